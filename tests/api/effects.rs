//! Labels and exemptions in a running service: a label is recorded on the entity once,
//! delivered by the outbox and shown, without changing the status; a rule may label and act
//! together or only label; a matching `unless` keeps a rule from acting, the evaluation
//! records that it was exempted, and the API, the rules listing and the console show it.

use std::time::Duration;

use quiesce::domain::Status;
use quiesce::rules::RuleSet;
use serde_json::{Value, json};

use crate::helpers::scalar;
use crate::{
    helpers::{TestApp, TestOptions, event, spawn_app},
    secrets::TOKEN_MODERATOR,
};

const RULES: &str = r#"
[[rule]]
name = "label_reported"
kinds = ["post"]
when = 'count("report") >= 2'
labels = ["spam"]
reason = "{count.report} reports"

[[rule]]
name = "hide_reported"
kinds = ["post"]
when = 'count("report") >= 3'
action = "hide"
labels = ["spam", "review"]
unless = 'entity.startsWith("post:staff-")'
reason = "{count.report} reports"
"#;

async fn reports(app: &TestApp, entity: &str, ids: std::ops::Range<usize>) {
    let events: Vec<Value> = ids
        .map(|i| event(&format!("{entity}-{i}"), entity, "report"))
        .collect();
    app.send(&json!(events)).await;
    app.wait_settled(Duration::from_secs(30)).await;
}

async fn labels(app: &TestApp, entity: &str) -> Vec<String> {
    let (status, body) = app.get(&format!("/v1/entities/{entity}")).await;
    assert_eq!(status, 200, "{body}");
    body["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["label"].as_str().unwrap().to_owned())
        .collect()
}

async fn label_notes(app: &TestApp, entity: &str) -> i64 {
    scalar!(
        app,
        "SELECT count(*) FROM outbox WHERE topic = 'label.applied' AND payload->>'entity' = $1",
        entity
    )
}

#[tokio::test]
async fn labels_are_recorded_once_delivered_and_shown_and_an_exemption_is_recorded() {
    let app = spawn_app(TestOptions {
        rules: Some(RuleSet::from_toml(RULES).unwrap()),
        ..TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(10))
    })
    .await;

    // Two reports: a label alone, the status unchanged.
    reports(&app, "post:1", 0..2).await;
    assert_eq!(app.status_of("post:1").await, Status::Visible);
    assert_eq!(labels(&app, "post:1").await, ["spam"]);
    assert_eq!(label_notes(&app, "post:1").await, 1);
    assert_eq!(app.action_count_of("post:1").await, 0);

    // A third: the hide and its labels; `spam` again is recorded and delivered once.
    reports(&app, "post:1", 2..3).await;
    assert_eq!(app.status_of("post:1").await, Status::Hidden);
    let mut now = labels(&app, "post:1").await;
    now.sort();
    assert_eq!(now, ["review", "spam"]);
    assert_eq!(label_notes(&app, "post:1").await, 2);
    assert_eq!(app.action_count_of("post:1").await, 1);

    // A staff post: the hide rule is exempted (recorded with the evaluation); the other
    // rule's label is given all the same.
    reports(&app, "post:staff-1", 0..3).await;
    assert_eq!(app.status_of("post:staff-1").await, Status::Visible);
    assert_eq!(labels(&app, "post:staff-1").await, ["spam"]);
    let exempted: Value = scalar!(
        app,
        "SELECT decisions->'exempted' FROM evaluations WHERE entity = 'post:staff-1'
         ORDER BY id DESC LIMIT 1"
    );
    assert_eq!(exempted, json!(["hide_reported"]));
    assert_eq!(app.action_count_of("post:staff-1").await, 0);

    // The rules listing says what each rule does.
    let (status, listing) = app.get("/v1/rules").await;
    assert_eq!(status, 200, "{listing}");
    let rules = listing["rules"].as_array().unwrap();
    assert_eq!(rules[0]["action"], Value::Null, "{listing}");
    assert_eq!(rules[0]["labels"], json!(["spam"]), "{listing}");
    assert_eq!(rules[1]["action"], "hide", "{listing}");
    assert_eq!(
        rules[1]["unless"], r#"entity.startsWith("post:staff-")"#,
        "{listing}"
    );
    assert_eq!(rules[1]["duration_secs"], Value::Null, "{listing}");

    // The backtest replays labels: the rules in force give exactly the labels recorded
    // (post:1 spam and review, post:staff-1 spam), and a candidate without the label-only
    // rule still labels post:1 (its hide rule does) but removes post:staff-1's.
    let backtest = |rules: String| {
        let app = &app;
        async move {
            let (status, report) = app
                .post_json("/v1/rules/backtest", json!({"rules": rules, "since": "1h"}))
                .await;
            assert_eq!(status, 200, "{report}");
            report
        }
    };
    let identity = backtest(RULES.to_owned()).await;
    assert_eq!(
        identity["labels"],
        json!([
            {"label": "review", "in_force": 1, "backtest": 1, "kept": 1, "added": 0, "removed": 0},
            {"label": "spam", "in_force": 2, "backtest": 2, "kept": 2, "added": 0, "removed": 0},
        ]),
        "{identity}"
    );
    let without = RULES.replace("labels = [\"spam\"]\n", "action = \"flag\"\n");
    assert_ne!(without, RULES);
    let report = backtest(without).await;
    let spam = report["labels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["label"] == "spam")
        .unwrap()
        .clone();
    assert_eq!(
        spam,
        json!({"label": "spam", "in_force": 2, "backtest": 1, "kept": 1, "added": 0, "removed": 1}),
        "{report}"
    );
    app.assert_statements_complete().await;
}

/// A GET with the moderator's token (the console's settings require one): its JSON.
async fn moderator_get(app: &TestApp, path: &str) -> Value {
    let response = app
        .client
        .get(format!("{}{path}", app.base))
        .bearer_auth(TOKEN_MODERATOR)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

/// The text of the first element of `class` after `from` in `page`.
fn cell<'a>(page: &'a str, from: &str, class: &str) -> &'a str {
    let row = &page[page.find(from).unwrap_or_else(|| panic!("{from}: {page}"))..];
    let at = row
        .find(&format!(r#"class="{class}""#))
        .unwrap_or_else(|| panic!("{class} after {from}: {row}"));
    let text = &row[at..];
    let open = text.find('>').unwrap() + 1;
    &text[open..open + text[open..].find("</td>").unwrap()]
}

#[tokio::test]
async fn an_exemption_is_shown_by_the_api_counted_per_rule_and_explained_on_the_console() {
    let app = spawn_app(TestOptions {
        rules: Some(RuleSet::from_toml(RULES).unwrap()),
        ..TestOptions::default().with(|s| {
            crate::console::with_console(s);
            s.schedule.debounce_window = Duration::from_millis(10);
        })
    })
    .await;
    let events: Vec<Value> = (0..3)
        .flat_map(|i| {
            ["post:staff-7", "post:7"]
                .map(|entity| event(&format!("{entity}-{i}"), entity, "report"))
        })
        .collect();
    crate::console::ingest(&app, &json!(events)).await;
    app.wait_settled(Duration::from_secs(30)).await;
    assert_eq!(app.status_of("post:staff-7").await, Status::Visible);
    assert_eq!(app.status_of("post:7").await, Status::Hidden);

    // The API: the staff post's evaluation lists the hide rule as exempted, not matched; the
    // other post's as matched and applied.
    let staff = moderator_get(&app, "/v1/entities/post:staff-7/evaluations").await;
    let evaluation = &staff["evaluations"][0];
    assert_eq!(staff["evaluations"].as_array().unwrap().len(), 1, "{staff}");
    assert_eq!(
        evaluation["decisions"]["exempted"],
        json!([{"rule": "hide_reported"}]),
        "{staff}"
    );
    assert_eq!(evaluation["decisions"]["matched"], json!([]), "{staff}");
    assert_eq!(evaluation["action_id"], Value::Null, "{staff}");
    assert_eq!(
        evaluation["decisions"]["labels"][0]["rule"], "label_reported",
        "{staff}"
    );
    let acted = moderator_get(&app, "/v1/entities/post:7/evaluations").await;
    let evaluation = &acted["evaluations"][0];
    assert_eq!(evaluation["decisions"]["exempted"], json!([]), "{acted}");
    assert_eq!(
        evaluation["decisions"]["matched"][0]["rule"], "hide_reported",
        "{acted}"
    );
    assert!(evaluation["action_id"].is_i64(), "{acted}");

    // The rules listing counts it beside the live match.
    let listing = moderator_get(&app, "/v1/rules").await;
    let hide = listing["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "hide_reported")
        .unwrap();
    assert_eq!(
        hide["hits_24h"],
        json!({"live": 1, "shadow": 0, "exempted": 1}),
        "{listing}"
    );

    // The console: the entity page says the rule matched and was exempted, and by what; the
    // quality page counts it.
    let (cookie, _) = crate::console::sign_in(&app).await;
    let page = crate::console::page(&app, &cookie, "/console/entities/post:staff-7").await;
    let decided = cell(&page, "data-evaluation-id", "decided");
    assert_eq!(
        decided,
        "Nothing applied: rule hide_reported matched and was exempted (unless entity.startsWith(&quot;post:staff-&quot;)).",
        "{page}"
    );
    assert!(!page.contains("no live rule matched"), "{page}");
    assert!(
        cell(&page, "data-evaluation-id", "exempted").contains("<code>hide_reported</code>"),
        "{page}"
    );
    let quality = crate::console::page(&app, &cookie, "/console/quality?window=24h").await;
    let row = r#"<tr data-rule="hide_reported">"#;
    assert_eq!(cell(&quality, row, "num live"), "1", "{quality}");
    assert_eq!(cell(&quality, row, "num exempted"), "1", "{quality}");
    app.assert_statements_complete().await;
}
