//! The guard, end to end, with a separate worker process evaluating: a live rule whose
//! reversals cross the threshold is turned to shadow by the reversal that crossed it (a new
//! rules version by quiesce-guard carrying the figures), takes no more live actions, and the
//! audit trail, the metric the alert watches and an outbound webhook each say so; a rule with
//! `guard = false` stays live past the same figures; a rollback re-arms the rule and the
//! reversals from before it are not counted again.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, body::Bytes, extract::State, routing::post};
use quiesce::{
    credentials::{ApiToken, Role},
    rules::RuleSet,
};
use serde_json::{Value, json};

use crate::{
    helpers::{TestApp, TestOptions, call, event, spawn_app, wait_for},
    secrets::{TOKEN_ADMIN, TOKEN_MODERATOR},
};

const RULES: &str = r#"# posts: guarded
[[rule]]
name = "guarded_posts"
kinds = ["post"]
when = 'count("flag") >= 2'
action = "hide"
reason = "{count.flag} flags"

# comments: an admin keeps this one live whatever moderators say
[[rule]]
name = "kept_comments"
kinds = ["comment"]
when = 'count("flag") >= 2'
action = "hide"
reason = "{count.flag} flags"
guard = false
"#;

const WAIT: Duration = Duration::from_secs(30);

/// A receiver that keeps every delivery's body.
async fn start_receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    async fn receive(State(inbox): State<Arc<Mutex<Vec<Value>>>>, body: Bytes) -> &'static str {
        if let Ok(body) = serde_json::from_slice(&body) {
            inbox.lock().unwrap().push(body);
        }
        "ok"
    }
    let inbox = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = Router::new()
        .route("/hooks", post(receive))
        .with_state(inbox.clone());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (format!("http://{address}/hooks"), inbox)
}

/// Two flags on each entity; waits until the worker process has evaluated them all.
async fn flag_twice(app: &TestApp, entities: &[String]) {
    let events: Vec<Value> = entities
        .iter()
        .flat_map(|e| (0..2).map(move |i| event(&format!("{e}-f{i}"), e, "flag")))
        .collect();
    let (status, body) = call(app, "POST", "/v1/events", TOKEN_ADMIN, json!(events)).await;
    assert_eq!(status, 202, "{body}");
    for entity in entities {
        wait_for(WAIT, &format!("{entity} evaluated"), || async {
            app.evaluation_count(entity).await >= 1
        })
        .await;
    }
}

async fn action_ids(app: &TestApp, rule: &str) -> Vec<i64> {
    sqlx::query_scalar!("SELECT id FROM actions WHERE rule = $1 ORDER BY id", rule)
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

async fn reverse(app: &TestApp, id: i64) {
    let path = format!("/v1/actions/{id}/reverse");
    let body = json!({"moderator": "mod:guard", "reason": "not abuse"});
    let (status, reply) = call(app, "POST", &path, TOKEN_MODERATOR, body).await;
    assert_eq!(status, 200, "{reply}");
}

async fn active(app: &TestApp) -> Value {
    let (status, body) = call(app, "GET", "/v1/rules", TOKEN_ADMIN, Value::Null).await;
    assert_eq!(status, 200, "{body}");
    body["version"].clone()
}

fn is_shadow(version: &Value, rule: &str) -> bool {
    let set = RuleSet::from_toml(version["text"].as_str().unwrap()).unwrap();
    set.rules().iter().any(|r| r.name == rule && r.shadow)
}

/// Waits until the worker process serving metrics at `metrics` runs rules `version`.
async fn worker_on(metrics: std::net::SocketAddr, version: i64) {
    let client = reqwest::Client::new();
    let line = format!(" {version}");
    wait_for(
        WAIT,
        &format!("the worker process on version {version}"),
        || async {
            let response = client.get(format!("http://{metrics}/metrics")).send();
            let text = response.await.unwrap().text().await.unwrap();
            text.lines()
                .any(|l| l.starts_with("quiesce_rules_version") && l.ends_with(&line))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_reversed_past_the_threshold_is_turned_to_shadow_and_an_opted_out_one_is_not() {
    let (hook_url, inbox) = start_receiver().await;
    let mut options = TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(10);
        s.security.api_tokens = crate::helpers::api_tokens(vec![
            ApiToken::spec_for(Role::Moderator, TOKEN_MODERATOR),
            ApiToken::spec_for(Role::Admin, TOKEN_ADMIN),
        ]);
        s.delivery.webhook_url = Some(hook_url);
        s.moderation.guard_actions = 4;
        s.moderation.guard_threshold = 0.5;
        s.moderation.guard_window = Duration::from_secs(3600);
    });
    options.rules = Some(RuleSet::from_toml(RULES).unwrap());
    let app = spawn_app(options).await;
    let (mut worker, worker_metrics) = app.spawn_ready_worker_process("guard-worker").await;

    let posts: Vec<String> = (0..4).map(|i| format!("post:guard{i}")).collect();
    let comments: Vec<String> = (0..4).map(|i| format!("comment:guard{i}")).collect();
    flag_twice(&app, &[posts.clone(), comments.clone()].concat()).await;
    let hides = action_ids(&app, "guarded_posts").await;
    let kept = action_ids(&app, "kept_comments").await;
    assert_eq!((hides.len(), kept.len()), (4, 4));

    // 2 of 4 reversed is the threshold, not above it: the rule stays live.
    reverse(&app, hides[0]).await;
    reverse(&app, hides[1]).await;
    assert_eq!(active(&app).await["version"], 1);
    let (_, listed) = call(&app, "GET", "/v1/rules", TOKEN_ADMIN, Value::Null).await;
    let guards: Vec<(&Value, &Value)> = listed["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (&r["name"], &r["guard"]))
        .collect();
    assert_eq!(
        guards,
        [
            (&json!("guarded_posts"), &json!(true)),
            (&json!("kept_comments"), &json!(false))
        ]
    );
    // The third crosses it: by the time the reversal is answered, quiesce has published.
    reverse(&app, hides[2]).await;
    let version = active(&app).await;
    assert_eq!(version["version"], 2, "{version}");
    assert_eq!(version["author"], "quiesce-guard");
    let message = version["message"].as_str().unwrap();
    for figure in [
        "guarded_posts",
        "3 of its last 4",
        "rate 0.750",
        "threshold 0.5",
    ] {
        assert!(message.contains(figure), "{message}");
    }
    assert!(is_shadow(&version, "guarded_posts"));
    assert!(!is_shadow(&version, "kept_comments"));
    let text = version["text"].as_str().unwrap();
    assert!(
        text.contains("# comments: an admin keeps"),
        "comments kept: {text}"
    );

    // The opted-out rule past the same figures: no new version.
    for id in &kept[..3] {
        reverse(&app, *id).await;
    }
    assert_eq!(active(&app).await["version"], 2);

    // The worker process follows version 2: the guarded rule matches in shadow only, the
    // opted-out one still acts.
    worker_on(worker_metrics, 2).await;
    flag_twice(&app, &["post:guard9".into(), "comment:guard9".into()]).await;
    assert_eq!(
        action_ids(&app, "guarded_posts").await,
        hides,
        "no more live actions"
    );
    assert_eq!(action_ids(&app, "kept_comments").await.len(), 5);
    let (rules_version, shadow): (Option<i64>, Value) = sqlx::query!(
        r#"SELECT rules_version, decisions->'shadow' AS "shadow!"
           FROM evaluations WHERE entity = 'post:guard9'"#,
    )
    .fetch_one(&app.pool)
    .await
    .map(|row| (row.rules_version, row.shadow))
    .unwrap();
    assert_eq!(rules_version, Some(2));
    assert!(shadow.to_string().contains("guarded_posts"), "{shadow}");

    // A fourth reversal finds the rule already in shadow: nothing more is published.
    reverse(&app, hides[3]).await;
    assert_eq!(active(&app).await["version"], 2);

    // The audit trail.
    let (status, audit) = call(
        &app,
        "GET",
        "/v1/audit?action=rules.guard",
        TOKEN_ADMIN,
        Value::Null,
    )
    .await;
    assert_eq!(status, 200, "{audit}");
    let entries = audit["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{audit}");
    let entry = &entries[0];
    assert_eq!(entry["actor"], "quiesce-guard", "{entry}");
    let after = &entry["after"];
    assert_eq!(
        (
            &after["rule"],
            &after["actions"],
            &after["reversals"],
            &after["version"],
            &after["shadow"]
        ),
        (
            &json!("guarded_posts"),
            &json!(4),
            &json!(3),
            &json!(2),
            &json!(true)
        ),
        "{entry}"
    );

    // The metric the alert rule watches, in the process that demoted it.
    let metrics = app.metrics_text().await;
    let demoted_at = metrics
        .lines()
        .find(|l| {
            l.starts_with("quiesce_rule_guard_demoted_timestamp_seconds{")
                && l.contains("rule=\"guarded_posts\"")
        })
        .unwrap_or_else(|| panic!("no demotion gauge in {metrics}"));
    let at: f64 = demoted_at.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        (chrono::Utc::now().timestamp() as f64 - at).abs() < 120.0,
        "{demoted_at}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("quiesce_rule_guard_demotions_total{")
                && l.contains("rule=\"guarded_posts\"")
                && l.ends_with(" 1")),
        "{metrics}"
    );

    // The outbound webhook, delivered by the worker process's dispatcher.
    wait_for(WAIT, "the rules.demoted webhook", || async {
        inbox
            .lock()
            .unwrap()
            .iter()
            .any(|b| b["type"] == "rules.demoted")
    })
    .await;
    let demoted: Vec<Value> = inbox
        .lock()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "rules.demoted")
        .cloned()
        .collect();
    assert_eq!(demoted.len(), 1, "{demoted:?}");
    let data = &demoted[0]["data"];
    assert_eq!(
        (
            &data["rule"],
            &data["rules_version"],
            &data["previous_rules_version"],
            &data["reversals"]
        ),
        (&json!("guarded_posts"), &json!(2), &json!(1), &json!(3)),
        "{data}"
    );

    // A rollback to version 1 re-arms the rule, and the guard counts only the actions taken
    // since: 1 of 2 new ones reversed is below the full sample. (Counting the reversed
    // actions from before the rollback, 3 of the last 4 would trip it again.)
    let body = json!({"message": "the reversals were wrong"});
    let path = "/v1/rules/versions/1/activate";
    let (status, reply) = call(&app, "POST", path, TOKEN_ADMIN, body).await;
    assert_eq!(status, 200, "{reply}");
    worker_on(worker_metrics, 1).await;
    flag_twice(&app, &["post:guard10".into(), "post:guard11".into()]).await;
    let rearmed = action_ids(&app, "guarded_posts").await;
    assert_eq!(
        rearmed.len(),
        hides.len() + 2,
        "live again after the rollback"
    );
    reverse(&app, rearmed[hides.len()]).await;
    assert_eq!(active(&app).await["version"], 1);

    worker.start_kill().unwrap();
    worker.wait().await.unwrap();
}
