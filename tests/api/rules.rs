//! Rules in a running service: shadow rules, windows over real buckets, the rules listing and
//! a new version put in force.

use std::time::Duration;

use quiesce::domain::Status;
use quiesce::rules::RuleSet;
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, TestOptions, claim_next, event, rules_check, scalar, spawn_app, wait_for,
};

async fn flags(app: &TestApp, entity: &str, n: usize) {
    let events: Vec<Value> = (0..n)
        .map(|i| event(&format!("{entity}-{i}"), entity, "flag"))
        .collect();
    app.send(&json!(events)).await;
}

async fn evaluate_next(app: &TestApp) {
    let worker = app.worker();
    let outcome = worker.evaluate_claim(claim_next(&worker).await).await;
    assert!(
        matches!(outcome, quiesce::worker::Outcome::Done(_)),
        "{outcome:?}"
    );
}

const SHADOW: &str = r#"
[[rule]]
name = "trial_suspend"
when = 'count("flag") >= 1'
action = "suspend"
reason = "{count.flag} flags"
shadow = true
"#;

#[tokio::test]
async fn a_shadow_rule_is_recorded_and_counted_but_changes_nothing() {
    let app = spawn_app(TestOptions {
        rules: Some(RuleSet::from_toml(SHADOW).unwrap()),
        ..TestOptions::idle().with(|s| s.schedule.debounce_window = Duration::from_millis(10))
    })
    .await;
    flags(&app, "post:s", 3).await;
    evaluate_next(&app).await;

    assert_eq!(app.status_of("post:s").await, Status::Visible);
    assert_eq!(app.count_actions().await, 0);
    assert_eq!(app.count_outbox().await, 0);
    let (decisions, snapshot): (Value, Option<Value>) =
        sqlx::query!("SELECT decisions, snapshot FROM evaluations WHERE entity = 'post:s'")
            .fetch_one(&app.pool)
            .await
            .map(|row| (row.decisions, row.snapshot))
            .unwrap();
    assert_eq!(decisions["shadow"][0]["rule"], "trial_suspend");
    assert_eq!(decisions["shadow"][0]["action"], "suspend");
    assert_eq!(decisions["shadow"][0]["reason"], "3 flags");
    assert_eq!(
        snapshot.expect("kept for a shadow hit")["signals"]["flag"]["count"],
        3
    );

    let (status, listing) = app.get("/v1/rules").await;
    assert_eq!(status, 200, "{listing}");
    let rule = &listing["rules"][0];
    assert_eq!(rule["name"], "trial_suspend");
    assert_eq!(rule["shadow"], true);
    assert_eq!(rule["hits_24h"]["shadow"], 1);
    assert_eq!(rule["hits_24h"]["live"], 0);
}

#[tokio::test]
async fn trailing_windows_count_the_recorded_buckets() {
    let rules = r#"
[[rule]]
name = "burst_of_flags"
when = 'count_in("flag", "1m") >= 3 && weight_in("flag", "24h") >= 3.0 && actors("flag") == 1'
action = "flag"
reason = "{count.flag} flags from {actors.flag} actor"
"#;
    let app = spawn_app(TestOptions {
        rules: Some(RuleSet::from_toml(rules).unwrap()),
        ..TestOptions::idle().with(|s| s.schedule.debounce_window = Duration::from_millis(10))
    })
    .await;
    let events: Vec<Value> = (0..3)
        .map(|i| json!({"id": format!("w{i}"), "entity": "post:w", "type": "flag", "actor": "user:1"}))
        .collect();
    app.send(&json!(events)).await;
    evaluate_next(&app).await;
    assert_eq!(app.status_of("post:w").await, Status::Flagged);
    let reason: String = sqlx::query_scalar!("SELECT reason FROM actions")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(reason, "3 flags from 1 actor");
}

#[tokio::test]
async fn a_broken_rules_version_is_refused_and_the_old_rules_stay() {
    // The rules file seeds version 1; later versions are published, not reloaded from it.
    let dir = std::env::temp_dir().join(format!("quiesce-rules-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rules.toml");
    let first = "[[rule]]\nname = \"old_rule\"\nwhen = 'count(\"flag\") >= 2'\naction = \"flag\"\nreason = \"x\"\n";
    std::fs::write(&file, first).unwrap();
    let app = spawn_app(TestOptions {
        rules: Some(RuleSet::from_file(&file).unwrap()),
        rules_file: Some(file.clone()),
        ..TestOptions::idle().with(|s| s.schedule.debounce_window = Duration::from_millis(10))
    })
    .await;
    let publish = |rules: String| {
        let app = &app;
        async move {
            app.post_json(
                "/v1/rules",
                json!({"rules": rules, "message": "a new rule"}),
            )
            .await
        }
    };

    let (status, body) = publish("[[rule]]\nname = \"typo\"\nwhen = 'cuont(\"flag\") >= 2'\naction = \"hide\"\nreason = \"x\"\n".into()).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "invalid_rules");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("typo"),
        "{body}"
    );
    // A reload reads the active version again: still the seeded one.
    let (status, body) = app.post_json("/v1/rules/reload", json!(null)).await;
    assert_eq!((status, body["version"].as_i64()), (200, Some(1)), "{body}");
    let (_, listing) = app.get("/v1/rules").await;
    assert_eq!(
        listing["rules"][0]["name"], "old_rule",
        "the old rules stay in force"
    );
    assert_eq!(
        listing["version"]["text"], first,
        "the file seeded version 1"
    );
    flags(&app, "post:a", 2).await;
    evaluate_next(&app).await;
    assert_eq!(app.status_of("post:a").await, Status::Flagged);

    let (status, body) = publish(
        first
            .replace("old_rule", "new_rule")
            .replace("\"flag\"\nreason", "\"hide\"\nreason"),
    )
    .await;
    assert_eq!((status, body["version"].as_i64()), (201, Some(2)), "{body}");
    flags(&app, "post:b", 2).await;
    evaluate_next(&app).await;
    assert_eq!(app.status_of("post:b").await, Status::Hidden);
    let rule: String = sqlx::query_scalar!("SELECT rule FROM actions WHERE entity = 'post:b'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(rule, "new_rule");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn repeated_automated_hides_on_one_authors_posts_suspend_the_author_once() {
    let app = spawn_app(
        TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(10)),
    )
    .await;
    for post in 0..3 {
        let events: Vec<Value> = (0..10)
            .map(|i| {
                json!({"id": format!("p{post}-{i}"), "entity": format!("post:{post}"), "type": "flag",
                       "author": "user:77"})
            })
            .collect();
        app.send(&json!(events)).await;
    }
    app.wait_settled(Duration::from_secs(30)).await;

    for post in 0..3 {
        assert_eq!(app.status_of(&format!("post:{post}")).await, Status::Hidden);
    }
    assert_eq!(app.status_of("user:77").await, Status::Suspended);
    let suspension = &app.actions_of("user:77").await[0];
    let (rule, reason) = (&suspension.rule, &suspension.reason);
    assert_eq!(rule, "suspend_repeat_offender");
    assert_eq!(reason, "3 automated hides of their posts");
    // One derived signal per action, recorded with the action.
    let derived: Vec<(String, String, String)> = sqlx::query!(
        r#"SELECT e.id, e.signal, e.actor AS "actor!" FROM events e WHERE e.entity = 'user:77' ORDER BY e.actor"#,
    )
    .fetch_all(&app.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| (row.id, row.signal, row.actor))
    .collect();
    assert_eq!(derived.len(), 3, "{derived:?}");
    for (i, (id, signal, actor)) in derived.iter().enumerate() {
        assert!(id.starts_with("derived:"), "{id}");
        assert_eq!(signal, "auto.hide");
        assert_eq!(actor, &format!("post:{i}"));
    }
    let (_, post) = app.get("/v1/entities/post:0").await;
    assert_eq!(app.action_count_of("user:77").await, 1);
    assert!(post["status"] == "hidden");
}

#[tokio::test]
async fn rules_check_names_the_broken_rule_and_the_position() {
    let (valid, printed) = rules_check(
        "[[rule]]\nname = \"fine\"\nwhen = 'count(\"flag\") > 1'\naction = \"flag\"\nreason = \"x\"\n\n\
         [[rule]]\nname = \"broken\"\nwhen = 'count(\"flag\") > 1 && weigth(\"flag\") > 2.0'\naction = \"hide\"\nreason = \"x\"\n",
    )
    .await;
    assert!(!valid);
    assert!(
        printed.contains("\"broken\"") && printed.contains("weigth") && printed.contains("1:22"),
        "{printed}"
    );

    let (valid, printed) = rules_check(quiesce::rules::DEFAULT_RULES).await;
    assert!(valid, "{printed}");
    assert!(printed.contains("4 rules, valid"), "{printed}");
}

#[tokio::test]
async fn a_reversed_hide_does_not_count_towards_suspending_the_author() {
    let app = spawn_app(
        TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(10)),
    )
    .await;
    let hide_post = |post: usize| {
        let events: Vec<Value> = (0..10)
            .map(|i| {
                json!({"id": format!("q{post}-{i}"), "entity": format!("post:{post}"), "type": "flag",
                       "author": "user:88"})
            })
            .collect();
        json!(events)
    };
    for post in 0..2 {
        app.send(&hide_post(post)).await;
    }
    app.wait_settled(Duration::from_secs(30)).await;
    let first: i64 = scalar!(app, "SELECT min(id) FROM actions WHERE entity = 'post:0'");
    let response = app
        .client
        .post(format!("{}/v1/actions/{first}/reverse", app.base))
        .json(&json!({"moderator": "mod:ana", "reason": "not spam"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    app.send(&hide_post(2)).await;
    app.wait_settled(Duration::from_secs(30)).await;

    assert_eq!(app.status_of("post:2").await, Status::Hidden);
    assert_eq!(app.signal_count_of("user:88", "auto.hide").await, 3);
    assert_eq!(
        app.signal_count_of("user:88", "auto.hide.reversed").await,
        1
    );
    assert_eq!(
        app.status_of("user:88").await,
        Status::Visible,
        "two hides stand, not three"
    );
    // Folded into the author's totals, the derived signals and the compensation count the same.
    let folded = |signal: &'static str| {
        let app = &app;
        async move {
            scalar!(
                app,
                "SELECT coalesce(sum(count), 0)::int8 FROM signal_totals
                 WHERE entity = 'user:88' AND signal = $1",
                signal
            )
        }
    };
    wait_for(Duration::from_secs(10), "the author's fold", || async {
        app.backends
            .store
            .fold()
            .entities(&["user:88"], 1)
            .await
            .unwrap();
        scalar!(
            app,
            "SELECT count(*) FROM unfolded_events WHERE entity = 'user:88'"
        ) == 0
    })
    .await;
    assert_eq!(folded("auto.hide").await, 3);
    assert_eq!(folded("auto.hide.reversed").await, 1);
}

/// A canary: flags a post with two flags, live for half of the posts.
const CANARY: &str = r#"
[[rule]]
name = "trial_flag"
kinds = ["post"]
when = 'count("flag") >= 2'
action = "flag"
reason = "{count.flag} flags"
rollout = 0.5
"#;

#[tokio::test]
async fn a_canary_rule_acts_only_on_its_share_of_entities_and_the_backtest_compares_the_two_groups()
{
    let rules = quiesce::rules::RuleSet::from_toml(CANARY).unwrap();
    let app = crate::helpers::spawn_app(crate::helpers::TestOptions {
        rules: Some(quiesce::rules::RuleSet::from_toml(CANARY).unwrap()),
        ..crate::helpers::TestOptions::default()
    })
    .await;
    let posts: Vec<String> = (0..40).map(|i| format!("post:c{i}")).collect();
    let events: Vec<serde_json::Value> = posts
        .iter()
        .flat_map(|p| (0..2).map(move |i| crate::helpers::event(&format!("{p}-{i}"), p, "flag")))
        .collect();
    app.send(&serde_json::json!(events)).await;
    app.wait_settled(std::time::Duration::from_secs(30)).await;
    let mut live = 0;
    for post in &posts {
        let entity = quiesce::domain::EntityId::parse(post).unwrap();
        let in_share = rules.rules()[0].live_for(&entity);
        live += usize::from(in_share);
        let expected = if in_share {
            Status::Flagged
        } else {
            Status::Visible
        };
        assert_eq!(app.status_of(post).await, expected, "{post}");
    }
    assert!(live > 5 && live < 35, "a share of about half: {live}");
    // Out of its share the rule ran as a shadow rule: its matches are recorded there.
    let shadow_hits = scalar!(
        app,
        "SELECT count(*) FROM evaluations
             WHERE decisions->'shadow' @> '[{\"rule\": \"trial_flag\"}]'"
    );
    assert_eq!(shadow_hits, (posts.len() - live) as i64);
    // The backtest of the rules in force reproduces the actions and compares the two groups.
    let (status, report) = app
        .post_json(
            "/v1/rules/backtest",
            serde_json::json!({"rules": CANARY, "since": "1h"}),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["overall"]["added"], 0, "{report}");
    assert_eq!(report["overall"]["removed"], 0, "{report}");
    let line = report["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "trial_flag")
        .unwrap();
    let canary = &line["canary"];
    assert_eq!(canary["rollout"], 0.5, "{report}");
    assert_eq!(canary["live_matches"], live, "{report}");
    assert_eq!(canary["shadow_matches"], posts.len() - live, "{report}");
    assert_eq!(
        canary["live_per_1000"], 1000.0,
        "every live evaluation matched: {report}"
    );
}

#[tokio::test]
async fn quality_shows_a_canarys_two_groups_with_their_evaluations_and_matches_per_1000() {
    use reqwest::header;

    use crate::secrets::TOKEN_INGEST;
    let rules = RuleSet::from_toml(CANARY).unwrap();
    let app = spawn_app(TestOptions {
        rules: Some(RuleSet::from_toml(CANARY).unwrap()),
        ..TestOptions::default().with(crate::console::with_console)
    })
    .await;
    // 30 posts with two flags (the rule matches wherever it runs) and 10 with one (it matches
    // nowhere), each evaluated once.
    let posts: Vec<(String, usize)> = (0..40)
        .map(|i| (format!("post:q{i}"), if i < 30 { 2 } else { 1 }))
        .collect();
    let events: Vec<Value> = posts
        .iter()
        .flat_map(|(p, n)| (0..*n).map(move |i| event(&format!("{p}-{i}"), p, "flag")))
        .collect();
    let sent = app
        .client
        .post(format!("{}/v1/events", app.base))
        .bearer_auth(TOKEN_INGEST)
        .json(&events)
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), reqwest::StatusCode::ACCEPTED);
    app.wait_settled(Duration::from_secs(30)).await;
    let rule = &rules.rules()[0];
    let live_for = |p: &str| rule.live_for(&quiesce::domain::EntityId::parse(p).unwrap());
    let count = |live: bool, flags: usize| {
        posts
            .iter()
            .filter(|(p, n)| live_for(p) == live && (flags == 0 || *n == flags))
            .count()
    };
    let evaluated = app.count_evaluations().await;
    assert_eq!(evaluated, 40, "each post evaluated once");
    let per_1000 = |matches: usize, evaluations: usize| {
        format!("{:.1}", 1000.0 * matches as f64 / evaluations as f64)
    };
    let (cookie, _) = crate::console::sign_in(&app).await;
    let quality = app
        .client
        .get(format!("{}/console/quality?window=24h", app.base))
        .header(header::COOKIE, &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let row = quality
        .split(r#"<tr data-rule="trial_flag">"#)
        .nth(2)
        .unwrap_or_else(|| panic!("a canary row after the per-rule row: {quality}"));
    let cell = |class: &str| {
        let start = row.find(&format!(r#"class="num {class}""#)).unwrap();
        let text = &row[start..];
        let open = text.find('>').unwrap() + 1;
        text[open..open + text[open..].find('<').unwrap()].to_owned()
    };
    let (live, shadow) = (count(true, 0), count(false, 0));
    assert!(
        live > 5 && shadow > 5,
        "both groups hold posts: {live} / {shadow}"
    );
    assert_eq!(cell("live-evaluations"), live.to_string(), "{row}");
    assert_eq!(cell("shadow-evaluations"), shadow.to_string(), "{row}");
    assert_eq!(cell("live-rate"), per_1000(count(true, 2), live), "{row}");
    assert_eq!(
        cell("shadow-rate"),
        per_1000(count(false, 2), shadow),
        "{row}"
    );
}
