//! Rules over attributes in a running service: aggregates of event attributes (exact whether
//! folded or not), entity context set through `PUT /v1/entities/{entity}/attributes` (validated,
//! kept with its history), read by a post's rules through its author, kept in the evaluation's
//! snapshot and replayed exactly by a backtest.

use std::time::Duration;

use quiesce::{domain::EntityId, rules::RuleSet};
use serde_json::{Value, json};

use crate::helpers::scalar;
use crate::{
    attributes::DECLARED,
    helpers::{TestApp, TestOptions, spawn_app, wait_for},
};

const SETTLE: Duration = Duration::from_secs(30);

fn rules() -> String {
    format!(
        r#"{DECLARED}
[[rule]]
name = "spam_reports"
kinds = ["post"]
when = 'count("report", {{"reason": "spam"}}) >= 3'
action = "hide"
reason = "spam reports"

[[rule]]
name = "classifier"
kinds = ["post"]
when = 'max("flag", "score") > 0.7 && distinct("flag", "reason") <= 1'
action = "flag"
reason = "classifier"

[[rule]]
name = "new_account_spam"
kinds = ["comment"]
when = 'count("report", {{"reason": "spam"}}) >= 2 && author.attr("account_age_days", 9999) < 7 && author.status == "visible"'
action = "hide"
reason = "new account reported for spam"
"#
    )
}

async fn app() -> TestApp {
    spawn_app(TestOptions {
        rules: Some(RuleSet::from_toml(&rules()).unwrap()),
        ..TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(50))
    })
    .await
}

/// `signal` events on `entity` with these attributes, ids `<prefix>-<n>`.
fn events(prefix: &str, entity: &str, signal: &str, attributes: &[Value]) -> Value {
    let events: Vec<Value> = attributes
        .iter()
        .enumerate()
        .map(|(i, a)| {
            json!({"id": format!("{prefix}-{i}"), "entity": entity, "type": signal,
                   "author": "user:new", "attributes": a})
        })
        .collect();
    json!(events)
}

async fn actions(app: &TestApp) -> Vec<(String, String)> {
    app.actions()
        .await
        .into_iter()
        .map(|a| (a.entity, a.rule))
        .collect()
}

#[tokio::test]
async fn aggregates_over_attributes_decide_and_read_the_same_folded_or_not() {
    let app = app().await;
    let spam = json!({"reason": "spam"});
    let abuse = json!({"reason": "abuse"});
    app.send(&events(
        "a",
        "post:a",
        "report",
        &[spam.clone(), abuse.clone(), spam.clone(), spam.clone()],
    ))
    .await;
    app.send(&events(
        "b",
        "post:b",
        "report",
        &[spam.clone(), abuse.clone(), spam.clone()],
    ))
    .await;
    let scores = [0.2, 0.8, 0.1].map(|score| json!({"score": score, "reason": "spam"}));
    app.send(&events("c", "post:c", "flag", &scores)).await;
    // Scores on two reasons: distinct > 1, so no flag.
    let mixed = [
        json!({"score": 0.95, "reason": "spam"}),
        json!({"score": 0.1, "reason": "abuse"}),
    ];
    app.send(&events("d", "post:d", "flag", &mixed)).await;
    app.wait_settled(SETTLE).await;
    assert_eq!(
        actions(&app).await,
        vec![
            ("post:a".into(), "spam_reports".into()),
            ("post:c".into(), "classifier".into())
        ],
        "exactly these actions, no others"
    );

    // The figures, unfolded, then folded (as an evaluation folds a busy entity), then with one
    // more event not folded: each read is exact.
    let unfolded = app.snapshot("post:c").await.attributes;
    let score = &unfolded.events["flag"]["score"];
    assert_eq!((score.max, score.latest), (Some(0.8), Some(0.1)));
    assert_eq!(unfolded.events["flag"]["reason"].values["spam"], 3);
    fold_all(&app, &["post:c", "post:a"]).await;
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM attribute_numbers WHERE entity = 'post:c'"
        ),
        1
    );
    assert_eq!(app.snapshot("post:c").await.attributes, unfolded);
    app.send(&events("c2", "post:c", "flag", &[json!({"score": 0.3})]))
        .await;
    let mixed = app.snapshot("post:c").await.attributes;
    let score = &mixed.events["flag"]["score"];
    assert_eq!(
        (score.max, score.latest),
        (Some(0.8), Some(0.3)),
        "folded max, unfolded latest"
    );
    let reasons = &app.snapshot("post:a").await.attributes.events["report"]["reason"].values;
    assert_eq!((reasons["spam"], reasons["abuse"]), (3, 1));
}

/// Folds every event of these entities (a fold takes only the events below the oldest running
/// transaction of the server, which another test may hold for a moment).
async fn fold_all(app: &TestApp, entities: &[&str]) {
    let store = &app.backends.store;
    wait_for(Duration::from_secs(10), "every event folded", || async {
        store.fold().entities(entities, 1).await.unwrap();
        let entities: Vec<String> = entities.iter().map(|&e| e.to_owned()).collect();
        scalar!(
            app,
            "SELECT count(*) FROM unfolded_events WHERE entity = ANY($1)",
            &entities
        ) == 0
    })
    .await;
}

async fn put_context(app: &TestApp, entity: &str, body: Value) -> (u16, Value) {
    let response = app
        .client
        .put(format!("{}/v1/entities/{entity}/attributes", app.base))
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn context_is_validated_kept_with_its_history_and_read_through_the_author() {
    let app = app().await;
    let (status, set) = put_context(
        &app,
        "user:new",
        json!({"account_age_days": 3, "role": "member"}),
    )
    .await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(
        set["attributes"],
        json!({"account_age_days": 3.0, "role": "member"})
    );
    for (body, field) in [
        (json!({"role": "admin"}), "attributes.role"),
        (json!({"colour": "red"}), "attributes.colour"),
        (
            json!({"account_age_days": "3"}),
            "attributes.account_age_days",
        ),
        (json!({"reason": "spam"}), "attributes.reason"),
        (json!(["member"]), "attributes"),
    ] {
        let (status, error) = put_context(&app, "user:new", body.clone()).await;
        assert_eq!(status, 422, "{body}: {error}");
        assert_eq!(error["error"]["code"], "invalid_attributes", "{error}");
        assert_eq!(error["error"]["field"], field, "{body}: {error}");
    }
    assert_eq!(
        scalar!(app, "SELECT count(*) FROM entity_context"),
        1,
        "refusals write nothing"
    );
    let (status, _) = put_context(&app, "user:old", json!({"account_age_days": 400})).await;
    assert_eq!(status, 200);

    let spam = json!({"reason": "spam"});
    app.send(&events(
        "n",
        "comment:new",
        "report",
        &[spam.clone(), spam.clone()],
    ))
    .await;
    let old = events("o", "comment:old", "report", &[spam.clone(), spam.clone()]);
    let old = json!(
        old.as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let mut e = e.clone();
                e["author"] = json!("user:old");
                e
            })
            .collect::<Vec<_>>()
    );
    app.send(&old).await;
    app.wait_settled(SETTLE).await;
    assert_eq!(
        actions(&app).await,
        vec![("comment:new".into(), "new_account_spam".into())],
        "the new account's comment only"
    );
    // The evaluation kept what it read of the author.
    let saw: Value = scalar!(
        app,
        "SELECT snapshot FROM evaluations WHERE entity = 'comment:new' ORDER BY id DESC LIMIT 1"
    );
    let author = &saw["attributes"]["author"];
    assert_eq!(author["id"], "user:new", "{saw}");
    assert_eq!(author["status"], "visible", "{saw}");
    assert_eq!(author["attributes"]["account_age_days"], 3.0, "{saw}");
    assert_eq!(
        saw["attributes"]["events"]["report"]["reason"]["values"]["spam"], 2,
        "{saw}"
    );

    // A later change is a new row; the past stays as it was read.
    let (status, _) = put_context(&app, "user:new", json!({"account_age_days": 30})).await;
    assert_eq!(status, 200);
    let history = app
        .backends
        .store
        .context()
        .context_history(&EntityId::parse("user:new").unwrap(), 10)
        .await
        .unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(
        serde_json::to_value(&history[0].attributes).unwrap(),
        json!({"account_age_days": 30.0})
    );
    let (_, entity) = app.get("/v1/entities/comment:new").await;
    assert_eq!(
        entity["attributes"]["author"]["attributes"]["account_age_days"], 30.0,
        "{entity}"
    );

    // The identity backtest replays the stored snapshots: the same action, nothing added.
    let (status, report) = app
        .post_json(
            "/v1/rules/backtest",
            json!({"rules": rules(), "since": "1h", "sample": 100}),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    let overall = &report["overall"];
    assert_eq!(overall["in_force_actions"], 1, "{report}");
    assert_eq!(overall["backtest_actions"], 1, "{report}");
    assert_eq!(
        (overall["added"].as_i64(), overall["removed"].as_i64()),
        (Some(0), Some(0)),
        "{report}"
    );
    assert_eq!(
        report["warnings"],
        json!([]),
        "every snapshot read what the rules read"
    );
}

#[tokio::test]
async fn windowed_aggregates_count_only_the_window_folded_or_not_and_old_buckets_leave() {
    let rules = format!(
        r#"{DECLARED}
[[rule]]
name = "spam_surge"
kinds = ["post"]
when = 'count_in("report", {{"reason": "spam"}}, "1h") >= 2 && max_in("report", "score", "1h") > 0.5'
action = "hide"
reason = "a surge of spam reports"
"#
    );
    let app = spawn_app(TestOptions {
        rules: Some(RuleSet::from_toml(&rules).unwrap()),
        ..TestOptions::idle()
    })
    .await;
    let report = |id: &str, entity: &str, score: f64| {
        json!({"id": id, "entity": entity, "type": "report",
               "attributes": {"reason": "spam", "score": score}})
    };
    // Two spam reports on post:old, one of them (with the high score) three hours ago.
    app.send(&json!([
        report("old-1", "post:old", 0.9),
        report("old-2", "post:old", 0.2)
    ]))
    .await;
    let hour = Duration::from_secs(3600);
    app.age_events(&["old-1"], 3 * hour).await;
    // Where the fold puts the aged event's signal bucket.
    app.add_past_partition(
        quiesce::store::Partitioned::SignalBuckets,
        4 * hour,
        2 * hour,
    )
    .await;
    app.send(&json!([
        report("new-1", "post:new", 0.9),
        report("new-2", "post:new", 0.2)
    ]))
    .await;
    let windows = |snapshot: &quiesce::domain::Snapshot| {
        let by = &snapshot.attributes.events["report"];
        (
            by["reason"].windows.get("1h").map(|w| w.values["spam"]),
            by["score"].windows.get("1h").and_then(|w| w.max),
            by["score"].windows.get("24h").and_then(|w| w.max),
            // latest_in: the last event recorded (one commit: the greatest id), old-2 / new-2.
            by["score"].windows.get("1h").and_then(|w| w.latest),
            by["score"].windows.get("24h").and_then(|w| w.latest),
        )
    };
    let old = app.snapshot("post:old").await;
    assert_eq!(
        windows(&old),
        (Some(1), Some(0.2), Some(0.9), Some(0.2), Some(0.2)),
        "the aged report is past 1h"
    );
    assert_eq!(
        old.attributes.events["report"]["reason"].values["spam"], 2,
        "but in the total"
    );
    let new = app.snapshot("post:new").await;
    assert_eq!(
        windows(&new),
        (Some(2), Some(0.9), Some(0.9), Some(0.2), Some(0.2))
    );
    // Folded, the figures read the same (the fold keeps minute buckets as for the counts).
    let store = &app.backends.store;
    fold_all(&app, &["post:old", "post:new"]).await;
    assert!(app.count_attribute_buckets().await > 0);
    assert_eq!(windows(&app.snapshot("post:old").await), windows(&old));
    assert_eq!(windows(&app.snapshot("post:new").await), windows(&new));
    // Evaluated: only the entity whose spam reports are within the hour is hidden.
    let rules = RuleSet::from_toml(&rules).unwrap();
    assert!(
        rules
            .evaluate(&app.snapshot("post:old").await)
            .matched
            .is_empty()
    );
    assert_eq!(
        rules.evaluate(&app.snapshot("post:new").await).matched[0].rule,
        "spam_surge"
    );
    // Buckets older than the longest window leave with retention, in bounded batches.
    sqlx::query!(
        "INSERT INTO attribute_buckets
 (entity, signal, attribute, value, bucket_start, count)
         VALUES ('post:old', 'report', 'reason', 'spam', now() - interval '26 hours', 1)",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let before = app.count_attribute_buckets().await;
    let purged = store.retention().purge_expired(1000, 10).await.unwrap();
    assert_eq!(purged.attribute_buckets, 1);
    assert_eq!(app.count_attribute_buckets().await, before - 1);
}

#[tokio::test]
async fn the_console_shows_what_the_rules_saw_of_attributes_and_context() {
    use crate::secrets::TOKEN_INGEST;
    let app = spawn_app(TestOptions {
        rules: Some(RuleSet::from_toml(&rules()).unwrap()),
        ..TestOptions::default().with(|s| {
            s.schedule.debounce_window = Duration::from_millis(50);
            crate::console::with_console(s);
        })
    })
    .await;
    let context = app
        .client
        .put(format!("{}/v1/entities/user:new/attributes", app.base))
        .bearer_auth(TOKEN_INGEST)
        .json(&json!({"account_age_days": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(context.status(), 200);
    let spam = json!({"reason": "spam"});
    let sent = app
        .client
        .post(format!("{}/v1/events", app.base))
        .bearer_auth(TOKEN_INGEST)
        .json(&events(
            "s",
            "comment:seen",
            "report",
            &[spam.clone(), spam],
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 202);
    app.wait_settled(SETTLE).await;
    let (cookie, _) = crate::console::sign_in(&app).await;
    let page = app
        .client
        .get(format!("{}/console/entities/comment:seen", app.base))
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    for part in [
        "What the rules saw of attributes",
        "report.reason",
        "spam ×2",
        "user:new",
        "account_age_days = 3",
    ] {
        assert!(page.contains(part), "{part} is on the page");
    }
}
