//! Statements of reasons and appeals: a statement for every restricting decision and none for
//! any other, written with its decision, delivered once to the platform and to a stand-in of
//! the Transparency Database that enforces the Commission's validation rules; appeals taken,
//! refused, and decided by a person through the reversal path.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use quiesce::{
    actions::{DsaSettings, DsaSubmitter},
    domain::Status,
    rules::RuleSet,
};
use serde_json::{Value, json};

use crate::helpers::{
    DsaStandIn, TestApp, TestOptions, claim_next, event, rules_check, scalar, spawn_app, wait_for,
};

/// Rules with a statement table per rule and file defaults: a hide on reports (a notice), a
/// timed hide, a flag for review, a shadow rule, an exempted rule, and a user suspension.
const RULES: &str = r#"
[statement]
ground = "incompatible"
contractual_ground = "Community guidelines, section 4"
category = "STATEMENT_CATEGORY_OTHER_VIOLATION_TC"
decision_ground_reference_url = "https://forum.example/guidelines#4"
territorial_scope = ["AT", "DE"]
content_language = "DE"
url = "https://forum.example/{kind}/{id}"
trusted_flagger_signals = ["trusted_report"]
[statement.kinds.post]
content_type = ["CONTENT_TYPE_TEXT"]
[statement.kinds.user]
account_type = "ACCOUNT_TYPE_PRIVATE"

[[rule]]
name = "remove_reported"
kinds = ["post"]
when = 'count("report") >= 3'
action = "hide"
reason = "{count.report} reports"
[rule.statement]
category = "STATEMENT_CATEGORY_SCAMS_AND_FRAUD"
category_specification = ["KEYWORD_OTHER"]
category_specification_other = "Fake giveaways"
keywords = ["scam"]
explanation = "Reported {count.report} times as a scam"

[[rule]]
name = "illegal_hate"
kinds = ["post"]
when = 'count("hate") >= 2'
action = "hide"
duration = "24h"
reason = "{count.hate} hate reports"
[rule.statement]
ground = "illegal"
legal_ground = "Section 130 of the Criminal Code"
category = "STATEMENT_CATEGORY_ILLEGAL_OR_HARMFUL_SPEECH"
category_addition = ["STATEMENT_CATEGORY_VIOLENCE"]
category_specification = ["KEYWORD_HATE_SPEECH"]
decision_ground_reference_url = "https://www.gesetze-im-internet.de/stgb/__130.html"
territorial_scope = ["DE"]

[[rule]]
name = "review_flags"
kinds = ["post"]
when = 'count("flag") >= 2'
action = "flag"
reason = "{count.flag} flags"

[[rule]]
name = "shadow_votes"
kinds = ["post"]
when = 'count("downvote") >= 2'
action = "hide"
shadow = true
reason = "{count.downvote} downvotes"

[[rule]]
name = "exempt_staff"
kinds = ["post"]
when = 'count("spam") >= 2'
unless = 'count("staff") >= 1'
action = "hide"
reason = "{count.spam} spam reports"

[[rule]]
name = "graphic_label"
kinds = ["post"]
when = 'count("gore") >= 2'
labels = ["graphic"]
reason = "{count.gore} reports of graphic violence"
[rule.statement]
labels_restrict = true
category = "STATEMENT_CATEGORY_VIOLENCE"

[[rule]]
name = "demote_clickbait"
kinds = ["post"]
when = 'count("clickbait") >= 2'
labels = ["clickbait"]
reason = "{count.clickbait} reports of clickbait"
[rule.statement]
labels_visibility = "demoted"

[[rule]]
name = "topic_label"
kinds = ["post"]
when = 'count("recipe") >= 1'
labels = ["cooking"]
reason = "a recipe"

[[rule]]
name = "suspend_spammer"
kinds = ["user"]
when = 'count("report") >= 2'
action = "suspend"
reason = "{count.report} reports against the account"
"#;

fn options() -> TestOptions {
    let mut options = TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(20);
    });
    options.rules = Some(RuleSet::from_toml(RULES).expect("the test rules are valid"));
    options
}

async fn with_dsa(stand_in: &DsaStandIn) -> TestApp {
    let endpoint = stand_in.endpoint();
    let token = stand_in.token();
    spawn_app(options().with(move |s| {
        s.delivery.dsa_endpoint = Some(endpoint);
        s.delivery.dsa_token = Some(token.into());
        s.delivery.delivery_backoff_base = Duration::from_millis(20);
        s.delivery.delivery_backoff_max = Duration::from_millis(100);
    }))
    .await
}

/// Sends `n` events of `signal` on `entity` and evaluates it once.
async fn decide(app: &TestApp, entity: &str, signal: &str, n: usize) {
    let events: Vec<Value> = (0..n)
        .map(|i| event(&format!("{entity}-{signal}-{i}"), entity, signal))
        .collect();
    app.send(&json!(events)).await;
    let worker = app.worker();
    worker.evaluate_claim(claim_next(&worker).await).await;
}

/// The app's submitter to the Transparency Database, as `serve` runs it beside the API.
fn submitter(app: &TestApp) -> DsaSubmitter {
    let settings =
        DsaSettings::from_settings(&app.settings).expect("dsa_endpoint and dsa_token set");
    DsaSubmitter::new(app.backends.store.clone(), settings)
}

/// Submits until the stand-in holds `n` statements (or the deadline passes).
async fn submitted(app: &TestApp, stand_in: &DsaStandIn, n: usize) {
    let submitter = submitter(app);
    wait_for(
        Duration::from_secs(20),
        &format!("the stand-in stores {n} statements"),
        || async {
            submitter.submit_once().await.unwrap();
            stand_in.accepted().len() >= n
        },
    )
    .await;
}

async fn statements(app: &TestApp, query: &str) -> Vec<Value> {
    let (status, body) = app.get(&format!("/v1/statements{query}")).await;
    assert_eq!(status, 200, "{body}");
    body["statements"].as_array().unwrap().clone()
}

#[tokio::test]
async fn every_restricting_decision_has_one_statement_and_no_other_decision_has_any() {
    let stand_in = DsaStandIn::start().await;
    let app = with_dsa(&stand_in).await;
    decide(&app, "post:1", "report", 3).await; // hide, a notice
    decide(&app, "post:2", "hate", 2).await; // a timed hide, illegal
    decide(&app, "post:3", "flag", 2).await; // a flag for review: restricts nothing
    decide(&app, "post:4", "downvote", 2).await; // a shadow match
    app.send(&json!([event("p5-staff", "post:5", "staff")]))
        .await;
    decide(&app, "post:5", "spam", 2).await; // exempted
    decide(&app, "user:9", "report", 2).await; // an account suspended
    assert_eq!(app.status_of("post:1").await, Status::Hidden);
    assert_eq!(app.status_of("post:3").await, Status::Flagged);
    assert_eq!(app.status_of("post:4").await, Status::Visible);
    assert_eq!(app.status_of("post:5").await, Status::Visible);
    assert_eq!(app.status_of("user:9").await, Status::Suspended);

    let all = statements(&app, "").await;
    let entities: Vec<&str> = all.iter().map(|s| s["entity"].as_str().unwrap()).collect();
    assert_eq!(entities, vec!["post:1", "post:2", "user:9"]);
    // Every restricting action has exactly one, each with its own never-reused identifier.
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM actions a WHERE a.new_status IN ('hidden', 'suspended')
             AND (SELECT count(*) FROM statements s WHERE s.action_id = a.id) <> 1"
        ),
        0
    );
    assert_eq!(
        scalar!(app, "SELECT count(DISTINCT puid) FROM statements"),
        3
    );

    let hide = &all[0]["statement"];
    assert_eq!(
        hide["decision_visibility"],
        json!(["DECISION_VISIBILITY_CONTENT_DISABLED"])
    );
    assert_eq!(
        hide["decision_ground"],
        "DECISION_GROUND_INCOMPATIBLE_CONTENT"
    );
    assert_eq!(
        hide["incompatible_content_ground"],
        "Community guidelines, section 4"
    );
    assert_eq!(
        hide["incompatible_content_explanation"],
        "Reported 3 times as a scam"
    );
    assert_eq!(hide["category"], "STATEMENT_CATEGORY_SCAMS_AND_FRAUD");
    assert_eq!(hide["category_specification"], json!(["KEYWORD_OTHER"]));
    assert_eq!(hide["category_specification_other"], "Fake giveaways");
    // The file's defaults where the rule says nothing.
    assert_eq!(
        hide["decision_ground_reference_url"],
        "https://forum.example/guidelines#4"
    );
    assert_eq!(hide["territorial_scope"], json!(["AT", "DE"]));
    assert_eq!(hide["content_language"], "DE");
    assert_eq!(hide["quiesce_keywords"], json!(["scam"]));
    assert_eq!(hide["content_type"], json!(["CONTENT_TYPE_TEXT"]));
    assert_eq!(hide["source_type"], "SOURCE_ARTICLE_16");
    assert_eq!(hide["automated_detection"], "Yes");
    assert_eq!(hide["automated_decision"], "AUTOMATED_DECISION_FULLY");
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    assert_eq!(hide["application_date"], today.as_str());
    // No content date from the sender: the day of the entity's first event.
    assert_eq!(hide["content_date"], today.as_str());
    // quiesce's own copy keeps where the content is; the database has no field for it.
    assert_eq!(hide["quiesce_url"], "https://forum.example/post/1");
    for absent in ["url", "end_date", "end_date_visibility_restriction"] {
        assert!(hide.get(absent).is_none(), "{absent}: {hide}");
    }
    let facts = hide["decision_facts"].as_str().unwrap();
    assert!(
        facts.contains("remove_reported") && facts.contains("report 3"),
        "{facts}"
    );

    let timed = &all[1]["statement"];
    assert_eq!(timed["decision_ground"], "DECISION_GROUND_ILLEGAL_CONTENT");
    assert_eq!(
        timed["illegal_content_legal_ground"],
        "Section 130 of the Criminal Code"
    );
    assert_eq!(timed["source_type"], "SOURCE_VOLUNTARY");
    assert_eq!(
        timed["category_addition"],
        json!(["STATEMENT_CATEGORY_VIOLENCE"])
    );
    assert_eq!(timed["territorial_scope"], json!(["DE"]));
    // A timed hide's end is the end of a visibility restriction, a day; quiesce's copy keeps
    // the moment.
    let ends: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(timed["quiesce_ends_at"].clone()).unwrap();
    assert_eq!(
        timed["end_date_visibility_restriction"],
        ends.format("%Y-%m-%d").to_string().as_str()
    );
    assert!(timed.get("end_date").is_none(), "{timed}");

    let account = &all[2]["statement"];
    assert_eq!(account["decision_account"], "DECISION_ACCOUNT_SUSPENDED");
    assert_eq!(account["account_type"], "ACCOUNT_TYPE_PRIVATE");
    // A kind the file says nothing of is named in words.
    assert_eq!(account["content_type"], json!(["CONTENT_TYPE_OTHER"]));
    assert_eq!(account["content_type_other"], "user");

    // No statement carries an actor or an event id.
    for statement in &all {
        let text = statement["statement"].to_string();
        assert!(!text.contains("post:1-report"), "{text}");
    }

    // Both receivers: the platform's webhook rows, and the Transparency Database, which
    // accepts each statement once.
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM outbox WHERE topic = 'statement.issued' AND receiver = 'platform'"
        ),
        3
    );
    // The platform's rows name their statement; a delivery carries it whole (claimed once its
    // action's row is delivered: an entity's rows go out in the order written).
    let store = &app.backends.store;
    let mut deliveries = Vec::new();
    loop {
        let rows = store
            .outbox()
            .claim_deliveries("platform", 100, Duration::from_secs(60))
            .await
            .unwrap();
        if rows.is_empty() {
            break;
        }
        for row in &rows {
            store.outbox().mark_delivered(row.id, 204).await.unwrap();
        }
        deliveries.extend(rows);
    }
    let webhooks: Vec<&Value> = deliveries
        .iter()
        .filter(|row| row.topic == "statement.issued")
        .map(|row| &row.payload)
        .collect();
    assert_eq!(webhooks.len(), 3);
    for webhook in webhooks {
        assert_eq!(webhook["statement"]["puid"], webhook["puid"], "{webhook}");
        assert!(
            webhook["statement"]["decision_facts"].is_string(),
            "{webhook}"
        );
    }
    submitted(&app, &stand_in, 3).await;
    let mut sent = stand_in.accepted_puids();
    sent.sort();
    let mut issued: Vec<String> = all
        .iter()
        .map(|s| s["puid"].as_str().unwrap().to_owned())
        .collect();
    issued.sort();
    assert_eq!(sent, issued);
    assert!(
        stand_in.rejections().is_empty(),
        "{:?}",
        stand_in.rejections()
    );
    // quiesce's own keys stay home.
    assert!(
        stand_in.accepted().iter().all(|s| s
            .as_object()
            .unwrap()
            .keys()
            .all(|key| !key.starts_with("quiesce_"))),
        "{:?}",
        stand_in.accepted()
    );
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn moderators_restricting_decisions_have_statements_and_a_restore_has_none() {
    let stand_in = DsaStandIn::start().await;
    let app = with_dsa(&stand_in).await;
    decide(&app, "post:7", "flag", 2).await;
    let item: i64 = scalar!(app, "SELECT id FROM actions WHERE action = 'flag'");
    let (status, body) = app
        .post_json(
            &format!("/v1/review/{item}/claim"),
            json!({"moderator": "mod:ana"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app
        .post_json(
            &format!("/v1/review/{item}/decide"),
            json!({"moderator": "mod:ana", "decision": "hide", "reason": "doxxing",
                   "moderation_version": body["moderation_version"]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // An override that hides restricts; one that makes visible does not.
    app.send(&json!([event("e8", "post:8", "upvote")])).await;
    let (status, body) = app
        .post_json(
            "/v1/entities/post:8/override",
            json!({"moderator": "mod:bo", "status": "hidden", "reason": "off-topic spam"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = app
        .post_json(
            "/v1/entities/post:8/override",
            json!({"moderator": "mod:bo", "status": "visible", "reason": "was fine"}),
        )
        .await;
    assert_eq!(status, 200);

    let all = statements(&app, "").await;
    let decided: Vec<(&str, &str)> = all
        .iter()
        .map(|s| {
            (
                s["entity"].as_str().unwrap(),
                s["decided_by"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(decided, vec![("post:7", "review"), ("post:8", "override")]);
    // Automation sent it for review, a person decided on what a rule weighed: partially
    // automated. An override is a person's alone.
    let review = &all[0]["statement"];
    assert_eq!(review["automated_detection"], "Yes");
    assert_eq!(review["automated_decision"], "AUTOMATED_DECISION_PARTIALLY");
    assert_eq!(review["incompatible_content_explanation"], "doxxing");
    let overridden = &all[1]["statement"];
    assert_eq!(overridden["automated_detection"], "No");
    assert_eq!(
        overridden["automated_decision"],
        "AUTOMATED_DECISION_NOT_AUTOMATED"
    );
    // A moderator's statement has its entity's content date too.
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    assert_eq!(overridden["content_date"], today.as_str());
    let text = all[1]["statement"].to_string();
    assert!(
        !text.contains("mod:bo"),
        "a statement names no moderator: {text}"
    );
    assert_eq!(statements(&app, "?decided_by=override").await.len(), 1);
    submitted(&app, &stand_in, 2).await;
    assert_eq!(stand_in.accepted().len(), 2);
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn a_statement_is_delivered_once_though_its_answers_are_lost_and_redis_is_flushed() {
    let stand_in = DsaStandIn::start().await;
    // The first two batches are stored but their answers lost: the retries find the
    // identifiers already submitted, which counts as delivered.
    stand_in.lose_next_answers(2);
    let app = with_dsa(&stand_in).await;
    for n in 0..4 {
        decide(&app, &format!("post:{n}"), "report", 3).await;
    }
    // Redis loses this app's data while the statements wait in the outbox: they are in
    // Postgres, written with their decisions.
    app.lose_redis_data().await;
    let submitter = submitter(&app);
    wait_for(
        Duration::from_secs(30),
        "every statement delivered",
        || async {
            submitter.submit_once().await.unwrap();
            scalar!(
                app,
                "SELECT count(*) FROM outbox WHERE receiver = 'dsa' AND delivered_at IS NULL"
            ) == 0
        },
    )
    .await;
    let mut puids = stand_in.accepted_puids();
    let stored = puids.len();
    puids.sort();
    puids.dedup();
    assert_eq!((stored, puids.len()), (4, 4), "each stored exactly once");
    assert!(stand_in.requests() >= 3, "the lost answers were retried");
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM outbox WHERE failed_at IS NOT NULL"
        ),
        0
    );
}

#[tokio::test]
async fn an_appeal_upheld_is_a_reversal_with_source_appeal_and_the_platform_is_told() {
    let app = spawn_app(options()).await;
    decide(&app, "post:1", "report", 3).await;
    decide(&app, "post:2", "flag", 2).await;
    let hide: i64 = scalar!(app, "SELECT id FROM actions WHERE entity = 'post:1'");
    let flag: i64 = scalar!(app, "SELECT id FROM actions WHERE entity = 'post:2'");

    // Bad input names the field and writes nothing.
    for (body, field) in [
        (json!({"appellant": "u:77"}), "text"),
        (
            json!({"appellant": "u:77", "text": "x".repeat(5001)}),
            "text",
        ),
        (
            json!({"appellant": "", "text": "it was satire"}),
            "appellant",
        ),
        (
            json!({"appellant": "u:77", "text": "ok", "extra": 1}),
            "extra",
        ),
    ] {
        let (status, reply) = app
            .post_json(&format!("/v1/actions/{hide}/appeals"), body)
            .await;
        assert_eq!(status, 422, "{reply}");
        assert_eq!(reply["error"]["field"], field, "{reply}");
    }
    assert_eq!(scalar!(app, "SELECT count(*) FROM appeals"), 0);
    // A flag restricts nothing: there is nothing to appeal.
    let (status, reply) = app
        .post_json(
            &format!("/v1/actions/{flag}/appeals"),
            json!({"appellant": "u:77", "text": "why?"}),
        )
        .await;
    assert_eq!(status, 422, "{reply}");
    assert_eq!(reply["error"]["code"], "nothing_to_appeal");
    let (status, _) = app
        .post_json(
            "/v1/actions/999999/appeals",
            json!({"appellant": "u:77", "text": "why?"}),
        )
        .await;
    assert_eq!(status, 404);

    let (status, appeal) = app
        .post_json(
            &format!("/v1/actions/{hide}/appeals"),
            json!({"appellant": "u:77", "text": "It was satire.\nPlease look again."}),
        )
        .await;
    assert_eq!(status, 201, "{appeal}");
    let id = appeal["id"].as_i64().unwrap();
    let (status, reply) = app
        .post_json(
            &format!("/v1/actions/{hide}/appeals"),
            json!({"appellant": "u:77", "text": "again"}),
        )
        .await;
    assert_eq!(status, 409, "{reply}");
    assert_eq!(reply["error"]["code"], "appeal_open");
    assert_eq!(reply["error"]["appeal"], id, "{reply}");

    let (status, page) = app.get("/v1/appeals").await;
    assert_eq!(status, 200);
    assert_eq!(page["appeals"][0]["id"], id);
    let (status, _) = app
        .post_json(
            &format!("/v1/appeals/{id}/claim"),
            json!({"moderator": "mod:ana"}),
        )
        .await;
    assert_eq!(status, 200);
    let (status, reply) = app
        .post_json(
            &format!("/v1/appeals/{id}/decide"),
            json!({"moderator": "mod:bo", "outcome": "upheld", "reason": "not mine"}),
        )
        .await;
    assert_eq!(status, 409, "{reply}");
    assert_eq!(reply["error"]["code"], "claimed");
    let (status, reply) = app
        .post_json(
            &format!("/v1/appeals/{id}/decide"),
            json!({"moderator": "mod:ana", "outcome": "maybe", "reason": "x"}),
        )
        .await;
    assert_eq!(
        (status, reply["error"]["field"].as_str()),
        (422, Some("outcome"))
    );
    let (status, decided) = app
        .post_json(
            &format!("/v1/appeals/{id}/decide"),
            json!({"moderator": "mod:ana", "outcome": "upheld", "reason": "satire is allowed"}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["outcome"], "upheld");
    assert_eq!(app.status_of("post:1").await, Status::Visible);
    // As the statements and appeals how-to's walk-through reads it (docs/how-to/statements-and-appeals.md): reversed by the moderator, from the appeal.
    let (_, actions) = app.get("/v1/actions?entity=post:1").await;
    let reversed = &actions["actions"][0];
    assert_eq!(
        (&reversed["reversed_by"], &reversed["reversal_source"]),
        (&json!("mod:ana"), &json!("appeal")),
        "{actions}"
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM actions WHERE reversal_source = 'appeal' AND reversed_by = 'mod:ana'"
        ),
        1
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM outbox WHERE topic = 'appeal.decided'"
        ),
        1
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM audit_log WHERE action IN ('appeal.submit', 'appeal.decide', 'action.reverse')"
        ),
        3
    );
    let (status, reply) = app
        .post_json(
            &format!("/v1/appeals/{id}/decide"),
            json!({"moderator": "mod:ana", "outcome": "rejected", "reason": "second thoughts"}),
        )
        .await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (409, Some("already_decided"))
    );
    // The upheld appeal counts in the rule's reversal rate, told apart by its source.
    let (_, rate) = app.get("/v1/stats/reversal-rate?by=rule").await;
    let rule = rate["by_rule"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "remove_reported")
        .unwrap()
        .clone();
    assert_eq!(
        (
            rule["actions"].as_i64(),
            rule["reversed"].as_i64(),
            rule["reversed_by_appeal"].as_i64()
        ),
        (Some(1), Some(1), Some(1)),
        "{rate}"
    );
}

#[tokio::test]
async fn a_rejected_appeal_is_final_and_a_late_one_is_refused() {
    let app =
        spawn_app(options().with(|s| s.moderation.appeal_window = Duration::from_millis(900)))
            .await;
    decide(&app, "post:1", "report", 3).await;
    decide(&app, "post:2", "report", 3).await;
    let (first, second): (i64, i64) = (
        scalar!(app, "SELECT id FROM actions WHERE entity = 'post:1'"),
        scalar!(app, "SELECT id FROM actions WHERE entity = 'post:2'"),
    );
    let (status, appeal) = app
        .post_json(
            &format!("/v1/actions/{first}/appeals"),
            json!({"appellant": "u:1", "text": "please"}),
        )
        .await;
    assert_eq!(status, 201, "{appeal}");
    let id = appeal["id"].as_i64().unwrap();
    let (status, decided) = app
        .post_json(
            &format!("/v1/appeals/{id}/decide"),
            json!({"moderator": "mod:ana", "outcome": "rejected", "reason": "a scam it was"}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(app.status_of("post:1").await, Status::Hidden);
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM actions WHERE reversed_at IS NOT NULL"
        ),
        0
    );
    // The rejection is final: a new appeal of the decision, by its action or its statement,
    // is refused naming the rejected one, and nothing of it is written.
    let statement: i64 = scalar!(app, "SELECT statement_id FROM appeals WHERE id = $1", id);
    let written = || async {
        scalar!(
            app,
            "SELECT (SELECT count(*) FROM appeals) + (SELECT count(*) FROM audit_log)
                    + (SELECT count(*) FROM outbox)"
        )
    };
    let before = written().await;
    for path in [
        format!("/v1/actions/{first}/appeals"),
        format!("/v1/statements/{statement}/appeals"),
    ] {
        let (status, reply) = app
            .post_json(&path, json!({"appellant": "u:1", "text": "please, again"}))
            .await;
        assert_eq!(status, 409, "{path}: {reply}");
        assert_eq!(reply["error"]["code"], "appeal_rejected", "{reply}");
        assert_eq!(reply["error"]["appeal"], id, "{reply}");
    }
    assert_eq!(written().await, before);

    // Past the window the second decision cannot be appealed any more.
    wait_for(
        Duration::from_secs(5),
        "the appeal window to close",
        || async {
            scalar!(
                app,
                "SELECT count(*) FROM statements WHERE created_at < now() - interval '1 second'"
            ) == 2
        },
    )
    .await;
    let (status, reply) = app
        .post_json(
            &format!("/v1/actions/{second}/appeals"),
            json!({"appellant": "u:2", "text": "please"}),
        )
        .await;
    assert_eq!(status, 422, "{reply}");
    assert_eq!(reply["error"]["code"], "appeal_window_closed");
}

#[tokio::test]
async fn statements_are_listed_in_keyset_pages_and_bad_filters_are_refused() {
    let app = spawn_app(options()).await;
    for n in 0..5 {
        decide(&app, &format!("post:{n}"), "report", 3).await;
    }
    let (status, first) = app.get("/v1/statements?limit=2").await;
    assert_eq!(status, 200, "{first}");
    let cursor = first["next_cursor"].as_str().unwrap().to_owned();
    let (_, second) = app
        .get(&format!("/v1/statements?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(second["statements"][0]["entity"], "post:2");
    assert_eq!(statements(&app, "?entity=post:4").await.len(), 1);
    assert_eq!(statements(&app, "?rule=remove_reported").await.len(), 5);
    assert_eq!(
        statements(&app, "?since=2999-01-01T00:00:00Z").await.len(),
        0
    );
    // The command line exports the same, one JSON object a line.
    let exported = app
        .run_cli(&["statements", "export", "--since", "2020-01-01T00:00:00Z"])
        .await;
    let lines: Vec<Value> = exported
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 5, "{exported}");
    assert_eq!(lines[4]["entity"], "post:4");
    assert!(lines[0]["statement"]["puid"].is_string());
    let (_, all) = app.get("/v1/statements").await;
    assert_eq!(lines, all["statements"].as_array().unwrap().clone());
    let none = app
        .run_cli(&["statements", "export", "--since", "2999-01-01T00:00:00Z"])
        .await;
    assert_eq!(none, "");
    for (query, field) in [
        ("?since=yesterday", "since"),
        ("?decided_by=robot", "decided_by"),
        ("?limit=0", "limit"),
    ] {
        let (status, body) = app.get(&format!("/v1/statements{query}")).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    }
}

#[test]
fn the_rules_check_refuses_an_unknown_category_or_ground_naming_the_rule() {
    let bad_category = RULES.replace(
        "STATEMENT_CATEGORY_SCAMS_AND_FRAUD",
        "STATEMENT_CATEGORY_SCAMS",
    );
    let error = RuleSet::from_toml(&bad_category).err().unwrap().to_string();
    assert!(
        error.contains("remove_reported") && error.contains("STATEMENT_CATEGORY_SCAMS"),
        "{error}"
    );
    // A ground that is neither is refused naming its rule and the two it may be, not as a bare
    // parse error of the file.
    let bad_ground = RULES.replace("ground = \"illegal\"", "ground = \"illegl\"");
    let error = RuleSet::from_toml(&bad_ground).err().unwrap().to_string();
    assert!(
        error.contains("rule \"illegal_hate\"")
            && error.contains("\"illegl\"")
            && error.contains("illegal, incompatible"),
        "{error}"
    );
    let bad_visibility = RULES.replace("\"demoted\"", "\"hidden\"");
    let error = RuleSet::from_toml(&bad_visibility)
        .err()
        .unwrap()
        .to_string();
    assert!(
        error.contains("demote_clickbait")
            && error.contains("labelled, demoted, age_restricted, interaction_restricted"),
        "{error}"
    );
    let no_legal = RULES.replace("legal_ground = \"Section 130 of the Criminal Code\"", "");
    let error = RuleSet::from_toml(&no_legal).err().unwrap().to_string();
    assert!(
        error.contains("illegal_hate") && error.contains("legal_ground"),
        "{error}"
    );
}

#[tokio::test]
async fn a_label_restricts_only_where_its_rule_says_so_and_an_upheld_appeal_takes_it_off() {
    let stand_in = DsaStandIn::start().await;
    let app = with_dsa(&stand_in).await;
    decide(&app, "post:20", "gore", 2).await; // a label that restricts
    decide(&app, "post:21", "recipe", 1).await; // a label that does not
    let labelled = statements(&app, "").await;
    assert_eq!(labelled.len(), 1, "{labelled:?}");
    let statement = &labelled[0];
    assert_eq!(statement["entity"], "post:20");
    assert_eq!(statement["action_id"], Value::Null);
    // A restricting label is labelled content, unless its rule names another visibility.
    assert_eq!(
        statement["statement"]["decision_visibility"],
        json!(["DECISION_VISIBILITY_CONTENT_LABELLED"])
    );
    assert!(
        statement["statement"]
            .get("decision_visibility_other")
            .is_none()
    );
    let facts = statement["statement"]["decision_facts"].as_str().unwrap();
    assert!(facts.contains("\"graphic\""), "{facts}");
    submitted(&app, &stand_in, 1).await;
    assert!(
        stand_in.rejections().is_empty(),
        "{:?}",
        stand_in.rejections()
    );

    // The author appeals the label (it has no action: through its statement), and wins.
    let (status, appeal) = app
        .post_json(
            &format!("/v1/statements/{}/appeals", statement["id"]),
            json!({"appellant": "user:20", "text": "It is a documentary still."}),
        )
        .await;
    assert_eq!(status, 201, "{appeal}");
    assert_eq!(appeal["label"], "graphic");
    let (status, decided) = app
        .post_json(
            &format!("/v1/appeals/{}/decide", appeal["id"]),
            json!({"moderator": "mod:ana", "outcome": "upheld", "reason": "news value"}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    let (_, entity) = app.get("/v1/entities/post:20").await;
    assert_eq!(entity["labels"], json!([]), "{entity}");
    assert_eq!(entity["status"], "visible");
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM outbox WHERE topic = 'label.removed'"
        ),
        1
    );
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn a_reversal_that_puts_a_hide_back_has_a_statement_of_its_own() {
    let app = spawn_app(options()).await;
    decide(&app, "post:30", "hate", 2).await; // a timed hide
    let (status, ended) = app
        .post_json(
            "/v1/entities/post:30/timer/end",
            json!({"moderator": "mod:ana", "reason": "served long enough"}),
        )
        .await;
    assert_eq!(status, 200, "{ended}");
    assert_eq!(app.status_of("post:30").await, Status::Visible);
    // The restore lifted the restriction: no statement. Reversing it puts the hide back.
    assert_eq!(statements(&app, "?entity=post:30").await.len(), 1);
    let (status, reversal) = app
        .post_json(
            &format!("/v1/actions/{}/reverse", ended["action_id"]),
            json!({"moderator": "mod:bo", "reason": "ended by mistake"}),
        )
        .await;
    assert_eq!(status, 200, "{reversal}");
    assert_eq!(app.status_of("post:30").await, Status::Hidden);
    let all = statements(&app, "?entity=post:30").await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1]["decided_by"], "reversal");
    // Listed by the way it was decided, as docs/statements.md names it.
    assert_eq!(statements(&app, "?decided_by=reversal").await, all[1..]);
    assert_eq!(all[1]["action_id"], Value::Null);
    assert_eq!(
        all[1]["statement"]["automated_decision"],
        "AUTOMATED_DECISION_NOT_AUTOMATED"
    );
    assert_eq!(
        all[1]["statement"]["incompatible_content_explanation"],
        "ended by mistake"
    );
    // Written in the order the platform is to hear of them: each decision, then its statement.
    let topics: Vec<String> = sqlx::query_scalar!(
        "SELECT topic FROM outbox WHERE receiver = 'platform' AND payload ->> 'entity' = 'post:30'
         ORDER BY id"
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        topics,
        [
            "action.applied",
            "statement.issued",
            "action.applied",
            "action.reversed",
            "statement.issued"
        ]
    );
    app.assert_statements_complete().await;
}

/// The platform's webhook receiver: each delivery's `webhook-id` and type, answering 503 while
/// `failing` is set.
#[derive(Clone, Default)]
struct Platform {
    received: Arc<Mutex<Vec<(String, String)>>>,
    failing: Arc<AtomicBool>,
}

impl Platform {
    async fn start(&self) -> String {
        async fn hook(
            axum::extract::State(platform): axum::extract::State<Platform>,
            headers: axum::http::HeaderMap,
            body: axum::body::Bytes,
        ) -> axum::http::StatusCode {
            if platform.failing.load(Ordering::SeqCst) {
                return axum::http::StatusCode::SERVICE_UNAVAILABLE;
            }
            let body: Value = serde_json::from_slice(&body).unwrap();
            let id = headers["webhook-id"].to_str().unwrap().to_owned();
            let kind = body["type"].as_str().unwrap().to_owned();
            platform.received.lock().unwrap().push((id, kind));
            axum::http::StatusCode::NO_CONTENT
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let router = axum::Router::new()
            .route("/hook", axum::routing::post(hook))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        url
    }

    /// The statements' webhook-ids received, each as often as it came.
    fn statements(&self) -> Vec<String> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, kind)| kind == "statement.issued")
            .map(|(id, _)| id.clone())
            .collect()
    }
}

#[tokio::test]
async fn a_killed_worker_and_a_flushed_redis_deliver_each_statement_once_to_both_receivers() {
    let stand_in = DsaStandIn::start().await;
    let platform = Platform::default();
    platform.failing.store(true, Ordering::SeqCst);
    let webhook_url = platform.start().await;
    let (endpoint, token) = (stand_in.endpoint(), stand_in.token());
    // The Transparency Database stores the first batches but their answers are lost.
    stand_in.lose_next_answers(3);
    let app = spawn_app(options().with(move |s| {
        s.delivery.webhook_url = Some(webhook_url);
        s.delivery.dsa_endpoint = Some(endpoint);
        s.delivery.dsa_token = Some(token.into());
        s.delivery.delivery_backoff_base = Duration::from_millis(20);
        s.delivery.delivery_backoff_max = Duration::from_millis(200);
    }))
    .await;
    let posts = ["post:40", "post:41", "post:42"];
    for post in posts {
        let events: Vec<Value> = (0..3)
            .map(|i| {
                json!({"id": format!("{post}-r{i}"), "entity": post, "type": "report",
                            "priority": "critical"})
            })
            .collect();
        app.send(&json!(events)).await;
    }
    // A worker process evaluates them and starts delivering; the platform is down. (Its
    // statements' webhooks wait behind their actions': an entity's rows go out in order.)
    let mut doomed = app.spawn_worker_process("doomed", None);
    wait_for(
        Duration::from_secs(30),
        "three statements, tried on both",
        || async {
            scalar!(app, "SELECT count(*) FROM statements") == 3
                && scalar!(
                    app,
                    "SELECT count(*) FROM outbox WHERE topic IN ('statement.submitted', 'action.applied')
                     AND attempts > 0"
                ) == 6
        },
    )
    .await;
    doomed.start_kill().unwrap();
    doomed.wait().await.unwrap();
    app.lose_redis_data().await;
    assert!(
        scalar!(
            app,
            "SELECT count(*) FROM outbox WHERE topic = 'statement.issued' AND delivered_at IS NULL"
        ) > 0,
        "the platform's webhooks still wait"
    );

    // The platform comes back; another worker process delivers what waits.
    platform.failing.store(false, Ordering::SeqCst);
    let mut survivor = app.spawn_worker_process("survivor", None);
    wait_for(Duration::from_secs(60), "every statement delivered to both", || async {
        scalar!(
            app,
            "SELECT count(*) FROM outbox WHERE topic LIKE 'statement.%' AND delivered_at IS NULL"
        ) == 0
    })
    .await;
    survivor.start_kill().unwrap();
    survivor.wait().await.unwrap();

    let mut puids = stand_in.accepted_puids();
    puids.sort();
    let mut issued: Vec<String> = sqlx::query_scalar!("SELECT puid FROM statements ORDER BY puid")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    issued.sort();
    assert_eq!(puids, issued, "the Transparency Database stored each once");
    let mut webhooks = platform.statements();
    webhooks.sort();
    let expected: Vec<String> = issued.iter().map(|p| format!("statement:{p}")).collect();
    assert_eq!(
        webhooks, expected,
        "the platform got each statement's webhook once"
    );
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn rules_check_takes_the_lists_in_force_and_refuses_any_other_value_naming_where_and_what() {
    let (valid, printed) = rules_check(RULES).await;
    assert!(valid, "{printed}");
    // A file written for the 2023 lists: the schema changed, and the value to write now.
    let old_default = RULES.replace(
        "STATEMENT_CATEGORY_OTHER_VIOLATION_TC",
        "STATEMENT_CATEGORY_VIOLATION_TOS",
    );
    let old_rule = RULES.replace(
        "\"STATEMENT_CATEGORY_SCAMS_AND_FRAUD\"",
        "\"STATEMENT_CATEGORY_FRAUD\"",
    );
    let cases: Vec<(String, Vec<&str>)> = vec![
        (
            old_default,
            vec![
                "[statement]",
                "STATEMENT_CATEGORY_VIOLATION_TOS",
                "2023 schema",
                "write \"STATEMENT_CATEGORY_OTHER_VIOLATION_TC\"",
            ],
        ),
        (
            old_rule,
            vec![
                "rule \"remove_reported\"",
                "2023 schema",
                "write \"STATEMENT_CATEGORY_SCAMS_AND_FRAUD\"",
            ],
        ),
        (
            RULES.replace(
                "[\"STATEMENT_CATEGORY_VIOLENCE\"]",
                "[\"STATEMENT_CATEGORY_GORE\"]",
            ),
            vec![
                "rule \"illegal_hate\"",
                "`statement.category_addition` \"STATEMENT_CATEGORY_GORE\"",
                "STATEMENT_CATEGORY_ANIMAL_WELFARE, STATEMENT_CATEGORY_CONSUMER_INFORMATION",
            ],
        ),
        (
            RULES.replace("[\"KEYWORD_HATE_SPEECH\"]", "[\"KEYWORD_HATE\"]"),
            vec![
                "rule \"illegal_hate\"",
                "`statement.category_specification` \"KEYWORD_HATE\"",
                "KEYWORD_ADULT_SEXUAL_MATERIAL",
                "KEYWORD_OTHER",
            ],
        ),
        (
            RULES.replace("category_specification_other = \"Fake giveaways\"\n", ""),
            vec!["rule \"remove_reported\"", "category_specification_other"],
        ),
        (
            RULES.replace(
                "territorial_scope = [\"DE\"]",
                "territorial_scope = [\"US\"]",
            ),
            vec![
                "rule \"illegal_hate\"",
                "`statement.territorial_scope` \"US\"",
                "AT, BE, BG",
            ],
        ),
        (
            RULES.replace(
                "\"https://www.gesetze-im-internet.de",
                "\"www.gesetze-im-internet.de",
            ),
            vec!["rule \"illegal_hate\"", "decision_ground_reference_url"],
        ),
        (
            RULES.replace("content_language = \"DE\"", "content_language = \"de\""),
            vec![
                "[statement]",
                "`statement.content_language` \"de\"",
                "AB, AA, AF",
            ],
        ),
        (
            RULES.replace("\"ACCOUNT_TYPE_PRIVATE\"", "\"ACCOUNT_TYPE_PERSONAL\""),
            vec![
                "`statement.kinds.user.account_type` \"ACCOUNT_TYPE_PERSONAL\"",
                "ACCOUNT_TYPE_BUSINESS, ACCOUNT_TYPE_PRIVATE",
            ],
        ),
        (
            RULES.replace("ground = \"illegal\"", "ground = \"illegl\""),
            vec![
                "rule \"illegal_hate\"",
                "\"illegl\"",
                "illegal, incompatible",
            ],
        ),
    ];
    for (text, said) in cases {
        let (valid, printed) = rules_check(&text).await;
        assert!(!valid, "accepted: {said:?}");
        for words in said {
            assert!(printed.contains(words), "{words:?} not in: {printed}");
        }
    }
}

#[tokio::test]
async fn a_stored_rules_version_of_the_2023_schema_still_goes_in_force_with_the_category_in_force()
{
    let stand_in = DsaStandIn::start().await;
    let app = with_dsa(&stand_in).await;
    // Version 2 as the release before the schema changed published it: its text names 2023
    // categories, which `rules check` refuses now.
    let old = RULES
        .replace(
            "STATEMENT_CATEGORY_OTHER_VIOLATION_TC",
            "STATEMENT_CATEGORY_VIOLATION_TOS",
        )
        .replace(
            "\"STATEMENT_CATEGORY_SCAMS_AND_FRAUD\"",
            "\"STATEMENT_CATEGORY_FRAUD\"",
        );
    assert!(RuleSet::from_toml(&old).is_err());
    sqlx::query!(
        "INSERT INTO rules_versions (version, text, hash, author, message)
         VALUES (2, $1, $2, 'mod:ana', 'published in 2024')",
        old,
        quiesce::active_rules::hash(&old),
    )
    .execute(&app.pool)
    .await
    .unwrap();
    sqlx::query!(
        "INSERT INTO rules_activations (version, kind, author, message)
         VALUES (2, 'publish', 'mod:ana', 'published in 2024')"
    )
    .execute(&app.pool)
    .await
    .unwrap();
    // A process starts with it in force and decides by it.
    let (mut worker, _) = app.spawn_ready_worker_process("after-the-change").await;
    let events: Vec<Value> = (0..3)
        .map(|i| json!({"id": format!("old-{i}"), "entity": "post:70", "type": "report", "priority": "critical"}))
        .collect();
    app.send(&json!(events)).await;
    wait_for(
        Duration::from_secs(30),
        "the worker hides post:70",
        || async {
            scalar!(
                app,
                "SELECT count(*) FROM statements WHERE entity = 'post:70'"
            ) == 1
        },
    )
    .await;
    // Stopped, not killed: its own submitter may hold the statement's delivery, which a
    // killed process would leave claimed for twice the delivery timeout (longer than the
    // wait below); a stop lets the attempt finish.
    let pid = worker.id().expect("the worker is running") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), worker.wait())
        .await
        .expect("the worker stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "exit status {status}");
    assert_eq!(
        scalar!(
            app,
            "SELECT coalesce(max(rules_version), 0) FROM actions WHERE entity = 'post:70'"
        ),
        2
    );
    let statement = &statements(&app, "?entity=post:70").await[0]["statement"];
    assert_eq!(statement["category"], "STATEMENT_CATEGORY_SCAMS_AND_FRAUD");
    // The version stays as it was published.
    let text: String = sqlx::query_scalar!("SELECT text FROM rules_versions WHERE version = 2")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(text, old);
    submitted(&app, &stand_in, 1).await;
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn a_senders_content_date_is_the_statements_else_the_day_of_the_entitys_first_event() {
    let stand_in = DsaStandIn::start().await;
    let app = with_dsa(&stand_in).await;
    // A sender says when the post was written with any of its events' attributes, undeclared;
    // the latest it sent counts.
    let dated = |id: &str, entity: &str, date: &str| {
        let mut event = event(id, entity, "upvote");
        event["attributes"] = json!({ "content_date": date });
        event
    };
    app.send(&json!([
        dated("d1", "post:80", "2025-11-02"),
        dated("d2", "post:80", "2025-11-03")
    ]))
    .await;
    decide(&app, "post:80", "report", 3).await;
    // Folded into the entity's row, then read from there.
    app.send(&json!([dated("d3", "post:81", "2024-02-29")]))
        .await;
    app.backends
        .store
        .fold()
        .entities(&["post:81"], 1)
        .await
        .unwrap();
    decide(&app, "post:81", "report", 3).await;
    // None given: the day of the entity's first event.
    decide(&app, "post:82", "report", 3).await;
    // A moderator's statement reads it too.
    app.send(&json!([dated("d4", "post:83", "2023-07-01")]))
        .await;
    let (status, body) = app
        .post_json(
            "/v1/entities/post:83/override",
            json!({"moderator": "mod:bo", "status": "hidden", "reason": "spam"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    for (entity, date) in [
        ("post:80", "2025-11-03"),
        ("post:81", "2024-02-29"),
        ("post:82", today.as_str()),
        ("post:83", "2023-07-01"),
    ] {
        let statement = &statements(&app, &format!("?entity={entity}")).await[0]["statement"];
        assert_eq!(statement["content_date"], date, "{entity}: {statement}");
    }
    // The date is the entity's, not a figure: nothing of it is folded among the attributes.
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM attribute_values WHERE attribute = 'content_date'"
        ),
        0
    );
    submitted(&app, &stand_in, 4).await;
    app.assert_statements_complete().await;

    // A date the database would refuse is refused at ingest, naming it, and nothing is written.
    for bad in [
        json!("2025-02-30"),
        json!("03/11/2025"),
        json!(20251103),
        json!("1999-12-31"),
    ] {
        let mut event = event("bad-date", "post:84", "upvote");
        event["attributes"] = json!({ "content_date": bad });
        let (status, body) = app.post_json("/v1/events", json!([event])).await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["error"]["field"], "attributes.content_date", "{body}");
    }
    assert_eq!(
        scalar!(app, "SELECT count(*) FROM events WHERE entity = 'post:84'"),
        0
    );
}

#[tokio::test]
async fn a_labels_visibility_names_the_restriction_its_statement_reports() {
    let stand_in = DsaStandIn::start().await;
    let app = with_dsa(&stand_in).await;
    decide(&app, "post:90", "clickbait", 2).await;
    let statement = &statements(&app, "?entity=post:90").await[0]["statement"];
    assert_eq!(
        statement["decision_visibility"],
        json!(["DECISION_VISIBILITY_CONTENT_DEMOTED"])
    );
    submitted(&app, &stand_in, 1).await;
    app.assert_statements_complete().await;
}

#[tokio::test]
async fn statements_written_in_the_2023_schema_and_not_delivered_are_sent_in_the_schema_in_force() {
    let stand_in = DsaStandIn::start().await;
    let app = with_dsa(&stand_in).await;
    app.send(&json!([event("e1", "post:100", "report")])).await;
    // Three rows exactly as the release before wrote them, each with its delivery waiting: a
    // rule's timed hide, a review decision's suspension, a restricting label.
    let written = [
        (
            "quiesce-7f0c1b9e-0000-4000-8000-000000000001",
            "post:100",
            "automated",
            json!({
                "decision_visibility": "DECISION_VISIBILITY_CONTENT_DISABLED",
                "decision_ground": "DECISION_GROUND_INCOMPATIBLE_CONTENT",
                "incompatible_content_ground": "Community guidelines, section 4",
                "incompatible_content_explanation": "Reported 3 times as a scam",
                "incompatible_content_illegal": "No",
                "content_type": ["CONTENT_TYPE_TEXT"],
                "category": "STATEMENT_CATEGORY_FRAUD",
                "application_date": "2026-12-06-09",
                "end_date": "2026-12-07-09",
                "decision_facts": "Rule remove_reported decided automatically when `count(\"report\") >= 3` held. Figures: report 3.",
                "source_type": "SOURCE_ARTICLE_16",
                "automated_detection": "Yes",
                "automated_decision": "Yes",
                "url": "https://forum.example/post/100",
                "puid": "quiesce-7f0c1b9e-0000-4000-8000-000000000001",
                "quiesce_keywords": ["scam"],
            }),
        ),
        (
            "quiesce-7f0c1b9e-0000-4000-8000-000000000002",
            "user:101",
            "review",
            json!({
                "decision_account": "DECISION_ACCOUNT_SUSPENDED",
                "decision_ground": "DECISION_GROUND_INCOMPATIBLE_CONTENT",
                "incompatible_content_ground": "The platform's terms of service",
                "incompatible_content_explanation": "ban evasion",
                "incompatible_content_illegal": "No",
                "content_type": ["CONTENT_TYPE_OTHER"],
                "content_type_other": "user",
                "category": "STATEMENT_CATEGORY_VIOLATION_TOS",
                "application_date": "2026-12-06-10",
                "decision_facts": "A moderator decided to set the user suspended, after automation sent it for review.",
                "source_type": "SOURCE_VOLUNTARY",
                "automated_detection": "Yes",
                "automated_decision": "No",
                "url": "user:101",
                "puid": "quiesce-7f0c1b9e-0000-4000-8000-000000000002",
            }),
        ),
        (
            "quiesce-7f0c1b9e-0000-4000-8000-000000000003",
            "post:102",
            "automated",
            json!({
                "decision_visibility": "DECISION_VISIBILITY_OTHER",
                "decision_visibility_other": "Content labelled \"graphic\"",
                "decision_ground": "DECISION_GROUND_INCOMPATIBLE_CONTENT",
                "incompatible_content_ground": "The platform's terms of service",
                "incompatible_content_explanation": "2 reports of graphic violence",
                "incompatible_content_illegal": "No",
                "content_type": ["CONTENT_TYPE_TEXT"],
                "category": "STATEMENT_CATEGORY_UNCATEGORISED",
                "application_date": "2026-12-06-11",
                "decision_facts": "Rule graphic_label decided automatically when `count(\"gore\") >= 2` held. Figures: gore 2.",
                "source_type": "SOURCE_VOLUNTARY",
                "automated_detection": "Yes",
                "automated_decision": "Yes",
                "url": "post:102",
                "puid": "quiesce-7f0c1b9e-0000-4000-8000-000000000003",
            }),
        ),
    ];
    for (puid, entity, decided_by, body) in &written {
        sqlx::query!(
            "WITH issued AS (
                 INSERT INTO statements (puid, entity, action_id, rule, decided_by,
                                         previous_status, status, body)
                 VALUES ($1, $2, NULL, NULL, $3, 'visible', 'hidden', $4)
                 RETURNING id, puid)
             INSERT INTO outbox (topic, idempotency_key, payload, receiver)
             SELECT 'statement.submitted', 'dsa:' || puid,
                    jsonb_build_object('statement_id', id), 'dsa'
             FROM issued",
            puid,
            entity,
            decided_by,
            body,
        )
        .execute(&app.pool)
        .await
        .unwrap();
    }
    submitted(&app, &stand_in, 3).await;
    assert!(
        stand_in.rejections().is_empty(),
        "{:?}",
        stand_in.rejections()
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM outbox WHERE receiver = 'dsa' AND delivered_at IS NULL"
        ),
        0
    );
    let stored = stand_in.accepted();
    let hide = &stored[0];
    assert_eq!(
        hide["decision_visibility"],
        json!(["DECISION_VISIBILITY_CONTENT_DISABLED"])
    );
    assert_eq!(hide["application_date"], "2026-12-06");
    assert_eq!(hide["end_date_visibility_restriction"], "2026-12-07");
    assert_eq!(hide["automated_decision"], "AUTOMATED_DECISION_FULLY");
    assert_eq!(hide["category"], "STATEMENT_CATEGORY_SCAMS_AND_FRAUD");
    // Its entity's first event was recorded today; the others have no row: their day.
    let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
    assert_eq!(hide["content_date"], today.as_str());
    let suspension = &stored[1];
    assert_eq!(
        suspension["automated_decision"],
        "AUTOMATED_DECISION_PARTIALLY"
    );
    assert_eq!(
        suspension["category"],
        "STATEMENT_CATEGORY_OTHER_VIOLATION_TC"
    );
    assert_eq!(suspension["content_date"], "2026-12-06");
    let label = &stored[2];
    assert_eq!(
        label["decision_visibility"],
        json!(["DECISION_VISIBILITY_CONTENT_LABELLED"])
    );
    // The platform's copy stays as it was written.
    let kept: Value = sqlx::query_scalar!(
        "SELECT body FROM statements WHERE puid = 'quiesce-7f0c1b9e-0000-4000-8000-000000000001'"
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(kept, written[0].3);
}

#[tokio::test]
async fn a_429_holds_every_batch_until_its_retry_after_and_all_are_stored_after() {
    let stand_in = DsaStandIn::start().await;
    // The token's limit made small: one request in two seconds.
    stand_in.limit(&[(1, Duration::from_secs(2))]);
    let app = with_dsa(&stand_in).await;
    let submitter = submitter(&app);
    decide(&app, "post:110", "report", 3).await;
    submitter.submit_once().await.unwrap();
    decide(&app, "post:111", "report", 3).await;
    submitter.submit_once().await.unwrap();
    let limited = stand_in.request_log()[1];
    assert_eq!((limited.status, limited.retry_after), (429, Some(2)));
    decide(&app, "post:112", "report", 3).await;
    wait_for(Duration::from_secs(20), "all three stored", || async {
        submitter.submit_once().await.unwrap();
        stand_in.accepted().len() == 3
    })
    .await;
    // After each 429, nothing came before the time it named.
    let log = stand_in.request_log();
    for (before, after) in log.iter().zip(log.iter().skip(1)) {
        if let Some(seconds) = before.retry_after {
            let waited = after.arrived.duration_since(before.arrived);
            assert!(
                waited >= Duration::from_secs(seconds),
                "a batch {waited:?} after a 429 asking for {seconds}s: {log:?}"
            );
        }
    }
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM outbox WHERE receiver = 'dsa' AND (delivered_at IS NULL OR failed_at IS NOT NULL)"
        ),
        0
    );
}

#[tokio::test]
async fn the_openapi_document_describes_a_statement_in_the_schema_in_force() {
    let app = spawn_app(options()).await;
    let (status, doc) = app.get("/openapi.json").await;
    assert_eq!(status, 200);
    let statement = &doc["components"]["schemas"]["StatementRecord"]["properties"]["statement"];
    let fields = statement["properties"].as_object().unwrap();
    for field in [
        "content_date",
        "end_date_visibility_restriction",
        "end_date_account_restriction",
        "category_specification",
        "quiesce_url",
    ] {
        assert!(fields.contains_key(field), "{field}: {statement}");
    }
    assert!(!fields.contains_key("url") && !fields.contains_key("end_date"));
    assert_eq!(fields["category"]["enum"].as_array().unwrap().len(), 16);
    assert_eq!(fields["decision_visibility"]["type"], "array");
    assert_eq!(
        fields["automated_decision"]["enum"],
        json!([
            "AUTOMATED_DECISION_FULLY",
            "AUTOMATED_DECISION_PARTIALLY",
            "AUTOMATED_DECISION_NOT_AUTOMATED"
        ])
    );
}
