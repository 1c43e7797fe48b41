//! The example policies of `rules/examples/`, end to end against Redis and Postgres: the events
//! (and the authors' context) go in through the API, and exactly the actions each recipe names
//! come out, no others.

use std::time::Duration;

use quiesce::rules::RuleSet;
use serde_json::{Value, json};

use crate::helpers::{TestApp, TestOptions, spawn_app};

const SETTLE: Duration = Duration::from_secs(30);

async fn app_with(example: &str) -> TestApp {
    let path = format!("{}/rules/examples/{example}", env!("CARGO_MANIFEST_DIR"));
    spawn_app(TestOptions {
        rules: Some(RuleSet::from_file(std::path::Path::new(&path)).unwrap()),
        ..TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(50))
    })
    .await
}

async fn set_context(app: &TestApp, entity: &str, context: Value) {
    let response = app
        .client
        .put(format!("{}/v1/entities/{entity}/attributes", app.base))
        .json(&context)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}

/// `signal` events on `entity` by `author`, one per attributes object.
async fn send(app: &TestApp, entity: &str, author: &str, signal: &str, attributes: &[Value]) {
    let events: Vec<Value> = attributes
        .iter()
        .enumerate()
        .map(|(i, a)| {
            json!({"id": format!("{entity}-{signal}-{i}"), "entity": entity, "type": signal,
                   "author": author, "attributes": a})
        })
        .collect();
    app.send(&json!(events)).await;
}

/// (entity, action, rule) of every action taken, by entity.
async fn actions(app: &TestApp) -> Vec<(String, String, String)> {
    app.actions()
        .await
        .into_iter()
        .map(|a| (a.entity, a.action, a.rule))
        .collect()
}

fn expected(rows: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    rows.iter()
        .map(|(e, a, r)| (e.to_string(), a.to_string(), r.to_string()))
        .collect()
}

#[tokio::test]
async fn automoderator_removes_a_new_accounts_spam_and_filters_the_rest() {
    let app = app_with("automoderator.toml").await;
    set_context(
        &app,
        "user:new",
        json!({"account_age_days": 2, "karma": 50}),
    )
    .await;
    set_context(
        &app,
        "user:old",
        json!({"account_age_days": 900, "karma": 5000}),
    )
    .await;
    set_context(
        &app,
        "user:fresh",
        json!({"account_age_days": 0.5, "karma": 3}),
    )
    .await;
    let spam = json!({"reason": "spam"});
    let off_topic = json!({"reason": "off_topic"});
    // Three spam reports: removed for the new account, to review for the old one.
    send(
        &app,
        "post:new-spam",
        "user:new",
        "report",
        &[spam.clone(), spam.clone(), spam.clone()],
    )
    .await;
    send(
        &app,
        "post:old-spam",
        "user:old",
        "report",
        &[spam.clone(), spam.clone(), spam.clone()],
    )
    .await;
    // Three reports that do not say spam: to review, whoever wrote it.
    let brigade = [off_topic.clone(), off_topic.clone(), off_topic.clone()];
    send(&app, "post:new-brigade", "user:new", "report", &brigade).await;
    // One report: to review from a day-old, low-karma account only; nothing for the others.
    send(
        &app,
        "post:fresh-one",
        "user:fresh",
        "report",
        std::slice::from_ref(&spam),
    )
    .await;
    send(
        &app,
        "post:old-one",
        "user:old",
        "report",
        std::slice::from_ref(&spam),
    )
    .await;
    // No context at all for this author: an old account as far as the rules know.
    send(
        &app,
        "post:unknown-spam",
        "user:unknown",
        "report",
        &[spam.clone(), spam.clone(), spam],
    )
    .await;
    app.wait_settled(SETTLE).await;
    assert_eq!(
        actions(&app).await,
        expected(&[
            ("post:fresh-one", "flag", "brand_new_low_karma"),
            ("post:new-brigade", "flag", "reported_to_review"),
            ("post:new-spam", "hide", "new_account_spam_reports"),
            ("post:old-spam", "flag", "reported_to_review"),
            ("post:unknown-spam", "flag", "reported_to_review"),
        ])
    );
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn the_classifier_policy_hides_above_0_9_and_flags_above_0_7() {
    let app = app_with("classifier.toml").await;
    let scores = |s: &[f64]| -> Vec<Value> { s.iter().map(|t| json!({"toxicity": t})).collect() };
    send(
        &app,
        "comment:toxic",
        "user:1",
        "classifier",
        &scores(&[0.2, 0.95, 0.1]),
    )
    .await;
    send(
        &app,
        "comment:borderline",
        "user:1",
        "classifier",
        &scores(&[0.75, 0.3]),
    )
    .await;
    send(
        &app,
        "comment:fine",
        "user:2",
        "classifier",
        &scores(&[0.5, 0.7]),
    )
    .await;
    app.wait_settled(SETTLE).await;
    assert_eq!(
        actions(&app).await,
        expected(&[
            ("comment:borderline", "flag", "review_toxic"),
            ("comment:toxic", "hide", "hide_toxic"),
        ])
    );
    app.assert_statements_complete().await;
}
