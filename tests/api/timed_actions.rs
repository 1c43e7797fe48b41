//! Timed actions: a rule's `duration` suspends for a while and quiesce restores the entity at
//! the end, once, as an action of its own (delivered by the outbox, reversible); a Redis loss
//! delays the end but never loses it; a moderator ends a timer early, and a timed override
//! restores the status the entity had.

use std::time::Duration;

use quiesce::domain::Status;
use quiesce::rules::RuleSet;
use serde_json::{Value, json};

use crate::helpers::{TestApp, TestOptions, event, scalar, spawn_app, wait_for};

/// Suspends a user for `duration` at two reports.
fn timeout_rules(duration: &str) -> RuleSet {
    RuleSet::from_toml(&format!(
        "[[rule]]\nname = \"timeout\"\nkinds = [\"user\"]\nwhen = 'count(\"report\") >= 2'\n\
         action = \"suspend\"\nreason = \"{{count.report}} reports\"\nduration = \"{duration}\"\n"
    ))
    .unwrap()
}

async fn app_with(rules: RuleSet, workers: bool) -> TestApp {
    let options = TestOptions {
        rules: Some(rules),
        ..TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(10))
    };
    spawn_app(if workers {
        options
    } else {
        options.without_workers()
    })
    .await
}

async fn report_twice(app: &TestApp, user: &str) {
    let events = json!([
        event(&format!("{user}-r1"), user, "report"),
        event(&format!("{user}-r2"), user, "report")
    ]);
    assert_eq!(app.send(&events).await, (2, 0));
}

/// The entity's actions, oldest first: (action, new status, whether it has an end).
async fn actions_of(app: &TestApp, entity: &str) -> Vec<(String, String, bool)> {
    app.actions_of(entity)
        .await
        .into_iter()
        .map(|a| (a.action, a.new_status, a.ends_at.is_some()))
        .collect()
}

/// The outbox's notifications about the entity, oldest first: (topic, action, status).
async fn notifications(app: &TestApp, entity: &str) -> Vec<(String, String, String)> {
    sqlx::query!(
        r#"SELECT topic, payload->>'action' AS "action!", payload->>'status' AS "status!"
           FROM outbox WHERE payload->>'entity' = $1 AND topic <> 'statement.issued'
           ORDER BY id"#,
        entity
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| (row.topic, row.action, row.status))
    .collect()
}

/// One round of the worker: claims what is due and evaluates it.
async fn drive(worker: &quiesce::worker::Worker) {
    for claim in worker.claim_once(10).await.unwrap().claims {
        worker.evaluate_claim(claim).await;
    }
}

fn own(rows: &[(&str, &str, bool)]) -> Vec<(String, String, bool)> {
    rows.iter()
        .map(|(a, s, t)| (a.to_string(), s.to_string(), *t))
        .collect()
}

#[tokio::test]
async fn a_timed_suspension_is_restored_at_its_end_once_delivered_and_reversible() {
    let app = app_with(timeout_rules("2s"), true).await;
    report_twice(&app, "user:t1").await;
    wait_for(Duration::from_secs(20), "the suspension", || async {
        app.status_of("user:t1").await == Status::Suspended
    })
    .await;
    let (_, body) = app.get("/v1/entities/user:t1").await;
    assert_eq!(body["timer"]["restores_to"], "visible", "{body}");
    assert_eq!(body["timer"]["set_by"], "timeout", "{body}");
    wait_for(Duration::from_secs(20), "the restore", || async {
        app.status_of("user:t1").await == Status::Visible
    })
    .await;
    app.wait_settled(Duration::from_secs(10)).await;
    assert_eq!(
        actions_of(&app, "user:t1").await,
        own(&[
            ("suspend", "suspended", true),
            ("restore", "visible", false)
        ])
    );
    // Not before its end: the restore's time is at or after the suspension's end.
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM actions r JOIN actions s ON s.entity = r.entity
             WHERE r.entity = 'user:t1' AND r.action = 'restore' AND s.action = 'suspend'
               AND r.created_at >= s.ends_at"
        ),
        1
    );
    let (_, body) = app.get("/v1/entities/user:t1").await;
    assert!(body["timer"].is_null(), "{body}");
    assert_eq!(
        notifications(&app, "user:t1").await,
        vec![
            (
                "action.applied".into(),
                "suspend".into(),
                "suspended".into()
            ),
            ("action.applied".into(), "restore".into(), "visible".into()),
        ]
    );

    // The restore is reversible like any action: the entity goes back to suspended.
    let restore: i64 = scalar!(
        app,
        "SELECT id FROM actions WHERE entity = 'user:t1' AND action = 'restore'"
    );
    let (status, body) = app
        .post_json(
            &format!("/v1/actions/{restore}/reverse"),
            json!({"moderator": "mod:ana", "reason": "keep the timeout"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(app.status_of("user:t1").await, Status::Suspended);
    // The reversal rate counts the rule's decision only, not the restore (nor its reversal).
    let (status, rate) = app.get("/v1/stats/reversal-rate?window=24h&by=rule").await;
    assert_eq!(status, 200, "{rate}");
    assert_eq!(
        (rate["actions"].as_i64(), rate["reversed"].as_i64()),
        (Some(1), Some(0)),
        "{rate}"
    );
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn a_redis_loss_before_the_end_delays_the_restore_but_never_loses_it() {
    // No worker loop: the test drives the worker and the sweep, so the order is its own.
    let app = app_with(timeout_rules("1s"), false).await;
    report_twice(&app, "user:t2").await;
    let worker = app.worker();
    wait_for(Duration::from_secs(20), "the suspension", || async {
        drive(&worker).await;
        app.status_of("user:t2").await == Status::Suspended
    })
    .await;
    // The timer's entry is in Redis; all of it goes.
    app.lose_redis_data().await;
    let ends_at_passed = || async {
        scalar!(
            app,
            "SELECT count(*) FROM entities WHERE entity = 'user:t2' AND timer_ends_at <= now()"
        ) == 1
    };
    wait_for(Duration::from_secs(10), "the timer's end", ends_at_passed).await;
    // Nothing in Redis: the worker finds nothing to do until the sweep reads Postgres.
    drive(&worker).await;
    assert_eq!(app.status_of("user:t2").await, Status::Suspended);
    let report = app.maintenance().sweep_once(None).await.unwrap().0;
    assert_eq!(report.repaired, 1, "{report:?}");
    wait_for(Duration::from_secs(20), "the restore", || async {
        drive(&worker).await;
        app.status_of("user:t2").await == Status::Visible
    })
    .await;
    // A second sweep and evaluation restore nothing twice.
    app.maintenance().sweep_once(None).await.unwrap();
    drive(&worker).await;
    assert_eq!(
        actions_of(&app, "user:t2").await,
        own(&[
            ("suspend", "suspended", true),
            ("restore", "visible", false)
        ])
    );
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn a_moderator_ends_a_timer_early_and_a_timed_override_restores_what_it_found() {
    let app = app_with(timeout_rules("1h"), true).await;
    report_twice(&app, "user:t3").await;
    wait_for(Duration::from_secs(20), "the suspension", || async {
        app.status_of("user:t3").await == Status::Suspended
    })
    .await;
    let end = json!({"moderator": "mod:ana", "reason": "appealed"});
    let (status, body) = app
        .post_json("/v1/entities/user:t3/timer/end", end.clone())
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "visible", "{body}");
    assert_eq!(app.status_of("user:t3").await, Status::Visible);
    let (status, body) = app.post_json("/v1/entities/user:t3/timer/end", end).await;
    assert_eq!(status, 404, "no timer in force: {body}");
    assert_eq!(
        actions_of(&app, "user:t3").await,
        own(&[
            ("suspend", "suspended", true),
            ("restore", "visible", false)
        ])
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM moderator_decisions WHERE entity = 'user:t3' AND kind = 'timer_end'"
        ),
        1
    );
    // The early end is in the audit trail, with the moderator who ended it.
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM audit_log WHERE subject = 'user:t3' AND action = 'timer.end'
               AND actor = 'mod:ana' AND after->>'status' = 'visible'"
        ),
        1
    );

    // A timed override: hidden for 1 s, then the status it found (visible) again.
    let (status, body) = app
        .post_json(
            "/v1/entities/user:t3/override",
            json!({"moderator": "mod:bo", "status": "hidden", "duration": "1s", "reason": "cool-off"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(app.status_of("user:t3").await, Status::Hidden);
    let (_, body) = app.get("/v1/entities/user:t3").await;
    assert_eq!(body["timer"]["set_by"], "override", "{body}");
    // The schedule is the sweep's (an override has no evaluation to schedule it).
    wait_for(Duration::from_secs(20), "the override's end", || async {
        app.maintenance().sweep_once(None).await.unwrap();
        app.status_of("user:t3").await == Status::Visible
    })
    .await;

    // Bad input names the field, and changes nothing.
    for (body, problem) in [
        (
            json!({"moderator": "m", "status": "hidden", "duration": "2x", "reason": "r"}),
            "duration",
        ),
        (
            json!({"moderator": "m", "status": "hidden", "duration": 5, "reason": "r"}),
            "duration",
        ),
        (
            json!({"moderator": "m", "status": "hidden", "duration": "1h",
                   "until": "2099-01-01T00:00:00Z", "reason": "r"}),
            "duration",
        ),
    ] {
        let (status, answer): (u16, Value) =
            app.post_json("/v1/entities/user:t3/override", body).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["error"]["field"], problem, "{answer}");
    }
    assert_eq!(app.status_of("user:t3").await, Status::Visible);
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn a_rule_with_a_bad_duration_is_refused_naming_the_rule() {
    let error = RuleSet::from_toml(
        "[[rule]]\nname = \"broken_timeout\"\nwhen = 'true'\naction = \"suspend\"\nreason = \"x\"\nduration = \"2 days\"\n",
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        error.contains("broken_timeout") && error.contains("duration"),
        "{error}"
    );
}

#[tokio::test]
async fn the_console_shows_a_timer_and_a_moderator_ends_it_with_the_pages_form() {
    use quiesce::credentials::{ApiToken, Role};
    use reqwest::{StatusCode, header};

    use crate::secrets::{CONSOLE_SESSION_KEY, TOKEN_INGEST, TOKEN_MODERATOR};

    let app = spawn_app(TestOptions {
        rules: Some(timeout_rules("1h")),
        ..TestOptions::idle().with(|s| {
            s.security.api_tokens = crate::helpers::api_tokens(vec![
                ApiToken::spec_for(Role::Ingest, TOKEN_INGEST),
                ApiToken::spec_for(Role::Moderator, TOKEN_MODERATOR),
            ]);
            s.console.console_session_key = Some(CONSOLE_SESSION_KEY.to_owned().into());
            s.schedule.debounce_window = Duration::from_millis(10);
        })
    })
    .await;
    let sent = app
        .client
        .post(format!("{}/v1/events", app.base))
        .bearer_auth(TOKEN_INGEST)
        .json(&json!([
            event("t4-r1", "user:t4", "report"),
            event("t4-r2", "user:t4", "report")
        ]))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::ACCEPTED);
    let worker = app.worker();
    wait_for(Duration::from_secs(20), "the suspension", || async {
        drive(&worker).await;
        app.status_of("user:t4").await == Status::Suspended
    })
    .await;
    let (cookie, csrf) = crate::console::sign_in(&app).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = format!("{}/console/entities/user:t4", app.base);
    let page = |client: reqwest::Client, cookie: String| {
        let url = url.clone();
        async move {
            client
                .get(url)
                .header(header::COOKIE, cookie)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let before = page(client.clone(), cookie.clone()).await;
    assert!(
        before.contains(r#"<code class="timer-rule">timeout</code>"#)
            && before.contains(r#"action="/console/entities/user:t4/timer/end""#)
            && before.contains("End it now"),
        "{before}"
    );
    let ended = client
        .post(format!("{}/console/entities/user:t4/timer/end", app.base))
        .header(header::COOKIE, &cookie)
        .form(&[("csrf", csrf.as_str()), ("reason", "appeal granted")])
        .send()
        .await
        .unwrap();
    assert_eq!(ended.status(), StatusCode::SEE_OTHER);
    assert_eq!(app.status_of("user:t4").await, Status::Visible);
    let after = page(client.clone(), cookie.clone()).await;
    assert!(after.contains("No timed action is in force."), "{after}");
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM moderator_decisions WHERE entity = 'user:t4'
             AND kind = 'timer_end' AND moderator = 'Morgan'"
        ),
        1
    );
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn a_timed_action_over_another_restores_what_it_found_and_the_first_still_ends() {
    // A timed hide at two reports (for 4 s), a timed suspend at four (for 1 s): the suspend's
    // end restores `hidden` and puts the hide's timer back, whose end restores `visible`.
    let rules = RuleSet::from_toml(
        "[[rule]]\nname = \"hide_while\"\nkinds = [\"post\"]\nwhen = 'count(\"report\") >= 2'\n\
         action = \"hide\"\nreason = \"r\"\nduration = \"4s\"\n\n\
         [[rule]]\nname = \"suspend_while\"\nkinds = [\"post\"]\nwhen = 'count(\"report\") >= 4'\n\
         action = \"suspend\"\nreason = \"r\"\nduration = \"1s\"\n",
    )
    .unwrap();
    let app = app_with(rules, false).await;
    let worker = app.worker();
    let send = |from: usize| {
        let app = &app;
        async move {
            let events: Vec<Value> = (from..from + 2)
                .map(|i| event(&format!("s{i}"), "post:stack", "report"))
                .collect();
            app.send(&json!(events)).await;
        }
    };
    let reach = |status: &'static str| {
        let (app, worker) = (&app, &worker);
        async move {
            wait_for(Duration::from_secs(20), status, || async {
                drive(worker).await;
                app.status_of("post:stack").await.as_str() == status
            })
            .await;
        }
    };
    send(0).await;
    reach("hidden").await;
    send(2).await;
    reach("suspended").await;
    reach("hidden").await;
    let (_, body) = app.get("/v1/entities/post:stack").await;
    assert_eq!(body["timer"]["set_by"], "hide_while", "{body}");
    assert_eq!(body["timer"]["restores_to"], "visible", "{body}");
    reach("visible").await;
    assert_eq!(
        actions_of(&app, "post:stack").await,
        own(&[
            ("hide", "hidden", true),
            ("suspend", "suspended", true),
            ("restore", "hidden", false),
            ("restore", "visible", false),
        ])
    );
    let (_, body) = app.get("/v1/entities/post:stack").await;
    assert!(body["timer"].is_null(), "{body}");
    app.assert_statements_complete().await;
}
