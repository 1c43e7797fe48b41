//! Backtests (`POST /v1/rules/backtest`, `quiesce rules backtest`, the console's page) against
//! evaluations the workers really made: replaying the rules in force reproduces exactly the
//! actions taken; a stricter threshold removes exactly the actions below it; moderators'
//! overrides and reversals hold in the replay; nothing is written.

use std::{collections::BTreeSet, time::Duration};

use quiesce::domain::Status;
use quiesce::rules::{DEFAULT_RULES, RuleSet};
use reqwest::{StatusCode, header};
use serde_json::{Value, json};

use crate::helpers::scalar;
use crate::{
    console::{csrf_of, sign_in},
    helpers::{TestApp, TestOptions, event, spawn_app},
    secrets::{TOKEN_INGEST, TOKEN_MODERATOR},
};

const SETTLE: Duration = Duration::from_secs(20);

/// The default rules with the hide threshold (a flag score of 8.3) at `score`.
fn hide_threshold(score: &str) -> String {
    let rules = DEFAULT_RULES.replace(
        r#"weight("flag") >= 8.3"#,
        &format!(r#"weight("flag") >= {score}"#),
    );
    assert_ne!(rules, DEFAULT_RULES);
    rules
}

async fn signals(app: &TestApp, entity: &str, tag: &str, signal: &str, n: usize) {
    let events: Vec<Value> = (0..n)
        .map(|i| event(&format!("{entity}-{tag}-{i}"), entity, signal))
        .collect();
    app.send(&json!(events)).await;
}

async fn backtest(app: &TestApp, rules: &str) -> Value {
    let (status, report) = app
        .post_json(
            "/v1/rules/backtest",
            json!({"rules": rules, "since": "1h", "sample": 100}),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    report
}

async fn reverse(app: &TestApp, action: i64) {
    let (status, body) = app
        .post_json(
            &format!("/v1/actions/{action}/reverse"),
            json!({"moderator": "mod:ana", "reason": "not abuse"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

/// Everything a backtest could write: the rows of every table it reads, every entity's status,
/// version and evaluation count, and this test's Redis keys (but the index rescan's own, which
/// maintenance writes on a timer).
async fn fingerprint(app: &TestApp) -> (String, Vec<String>) {
    let rows: String = scalar!(
        app,
        "SELECT concat_ws(' ',
                (SELECT count(*) FROM evaluations), (SELECT count(*) FROM actions),
                (SELECT count(*) FROM actions WHERE reversed_at IS NOT NULL),
                (SELECT count(*) FROM outbox), (SELECT count(*) FROM moderator_decisions),
                (SELECT count(*) FROM events),
                (SELECT string_agg(concat_ws(':', entity, status, moderation_version, evaluation_count,
                                             override_status), ',' ORDER BY entity) FROM entities))"
    );
    let mut keys = app.work_keys().await;
    keys.sort();
    (rows, keys)
}

fn rule<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == name)
        .unwrap_or_else(|| panic!("no rule {name} in {report}"))
}

fn added_entities(report: &Value) -> BTreeSet<String> {
    report["added_sample"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["entity"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn replaying_the_rules_in_force_reproduces_every_action_and_a_stricter_threshold_removes_exactly_those_below_it()
 {
    let app = spawn_app(TestOptions::default()).await;
    // Flags only, so each entity's flag score is its count of flags.
    signals(&app, "post:b1", "a", "flag", 1).await;
    signals(&app, "post:b3", "a", "flag", 3).await;
    signals(&app, "post:b9", "a", "flag", 9).await;
    signals(&app, "post:b12", "a", "flag", 12).await;
    signals(&app, "post:b20", "a", "flag", 20).await;
    signals(&app, "post:be", "a", "flag", 3).await;
    signals(&app, "post:br", "a", "report", 5).await;
    // Ten flags under forty upvotes, in one request: a fifth of the reactions, under the guard.
    let mut buried: Vec<Value> = (0..10)
        .map(|i| event(&format!("bs-f{i}"), "post:bs", "flag"))
        .collect();
    buried.extend((0..40).map(|i| event(&format!("bs-u{i}"), "post:bs", "upvote")));
    app.send(&json!(buried)).await;
    app.wait_settled(SETTLE).await;
    // post:be escalates: flagged at 3 flags, hidden at 10.
    signals(&app, "post:be", "b", "flag", 7).await;
    app.wait_settled(SETTLE).await;
    // A moderator reverses post:b12's hide.
    reverse(&app, app.action_ids_of("post:b12").await[0]).await;
    let actions = app.count_actions().await;
    assert_eq!(
        actions, 7,
        "b3 flag, b9 b12 b20 hide, be flag and hide, br hide"
    );
    let before = fingerprint(&app).await;

    // The identity check: the rules in force, replayed, take exactly the actions taken.
    let identity = backtest(&app, DEFAULT_RULES).await;
    let overall = &identity["overall"];
    assert_eq!(overall["in_force_actions"], actions, "{identity}");
    assert_eq!(overall["backtest_actions"], actions, "{identity}");
    assert_eq!(overall["kept"], actions, "{identity}");
    assert_eq!(overall["added"], 0, "{identity}");
    assert_eq!(overall["removed"], 0, "{identity}");
    assert_eq!(overall["in_force_reversed"], 1, "{identity}");
    assert_eq!(identity["final_status_differs"], 0, "{identity}");
    assert_eq!(identity["coverage"]["skipped_without_snapshot"], 0);
    assert_eq!(
        identity["coverage"]["replayed"],
        app.count_evaluations().await
    );
    for (name, taken) in [
        ("hide_flag_pile_on", 4),
        ("remove_reported", 1),
        ("review_repeated_flags", 2),
    ] {
        assert_eq!(rule(&identity, name)["in_force_actions"], taken, "{name}");
        assert_eq!(rule(&identity, name)["kept"], taken, "{name}");
    }
    // The one reversal is on a kept action: the expected rate rests on it.
    assert_eq!(
        rule(&identity, "hide_flag_pile_on")["expected_reversal_rate"]["rate"],
        0.25
    );

    // A hide threshold of 15: exactly the hides below it go (b9, b12, be's second), the one
    // above it (b20) stays; where nothing else had acted, the review rule flags instead.
    let strict = backtest(&app, &hide_threshold("15")).await;
    let hides_below: i64 = scalar!(
        app,
        "SELECT count(*) FROM actions WHERE rule = 'hide_flag_pile_on'
               AND (snapshot->'signals'->'flag'->>'weight')::float8 < 15"
    );
    assert_eq!(hides_below, 3);
    let pile_on = rule(&strict, "hide_flag_pile_on");
    assert_eq!(pile_on["removed"], hides_below, "{strict}");
    assert_eq!(pile_on["kept"], 1, "{strict}");
    assert_eq!(pile_on["added"], 0, "{strict}");
    assert_eq!(pile_on["reversals_saved"], 1, "b12's hide was reversed");
    assert_eq!(rule(&strict, "remove_reported")["kept"], 1);
    let review = rule(&strict, "review_repeated_flags");
    assert_eq!(review["kept"], 2, "{strict}");
    assert_eq!(review["added"], 2, "{strict}");
    assert_eq!(
        added_entities(&strict),
        BTreeSet::from(["post:b12".to_owned(), "post:b9".to_owned()])
    );
    for added in strict["added_sample"].as_array().unwrap() {
        assert_eq!(added["action"], "flag");
        assert_eq!(added["in_force_took"], "hide (hide_flag_pile_on)");
        assert!(
            added["snapshot"]["signals"]["flag"]["count"]
                .as_i64()
                .unwrap()
                < 15
        );
    }
    // b9 and be end flagged instead of hidden; b12's reversal set it visible either way.
    assert_eq!(strict["final_status_differs"], 2, "{strict}");
    assert_eq!(
        strict["final_status_transitions"],
        json!([{"in_force": "hidden", "backtest": "flagged", "entities": 2}])
    );
    let differing: BTreeSet<&str> = strict["final_status_sample"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["entity"].as_str().unwrap())
        .collect();
    assert_eq!(differing, BTreeSet::from(["post:b9", "post:be"]));

    // Nothing was written, no status moved, no webhook was queued, Redis is as it was.
    assert_eq!(fingerprint(&app).await, before);
}

#[tokio::test]
async fn overrides_and_reversals_hold_in_the_replay_and_the_cli_reports_the_same() {
    let app = spawn_app(TestOptions::default()).await;
    // post:o: a moderator caps it at visible, then ten flags arrive; nothing may act.
    signals(&app, "post:o", "a", "flag", 1).await;
    app.wait_settled(SETTLE).await;
    let (status, body) = app
        .post_json(
            "/v1/entities/post:o/override",
            json!({"moderator": "mod:ana", "status": "visible", "reason": "known good"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    signals(&app, "post:o", "b", "flag", 10).await;
    // post:r: hidden at ten flags, reversed, then two more flags; automation may not redo it.
    signals(&app, "post:r", "a", "flag", 10).await;
    app.wait_settled(SETTLE).await;
    reverse(&app, app.action_ids_of("post:r").await[0]).await;
    signals(&app, "post:r", "b", "flag", 2).await;
    app.wait_settled(SETTLE).await;
    assert_eq!(app.count_actions().await, 1);
    assert_eq!(app.status_of("post:o").await, Status::Visible);
    assert_eq!(app.status_of("post:r").await, Status::Visible);
    let before = fingerprint(&app).await;

    // An eager candidate (hide at a score of 5) keeps r's first hide and adds nothing: o is
    // capped by its override, r's re-evaluation by the one its reversal implied.
    let eager = backtest(&app, &hide_threshold("5")).await;
    assert_eq!(eager["overall"]["kept"], 1, "{eager}");
    assert_eq!(eager["overall"]["added"], 0, "{eager}");
    assert_eq!(eager["overall"]["removed"], 0, "{eager}");
    assert_eq!(eager["final_status_differs"], 0, "{eager}");
    let rate = &rule(&eager, "hide_flag_pile_on")["expected_reversal_rate"];
    assert_eq!(rate["rate"], 1.0, "its one kept action was reversed");
    assert_eq!(rate["basis"], 1);

    // A strict one (hide at 15) saves r's reversal; it would have flagged r instead, before
    // the reversal, and nothing on o or after the reversal.
    let strict = backtest(&app, &hide_threshold("15")).await;
    assert_eq!(strict["overall"]["removed"], 1, "{strict}");
    assert_eq!(strict["overall"]["reversals_saved"], 1, "{strict}");
    assert_eq!(
        added_entities(&strict),
        BTreeSet::from(["post:r".to_owned()])
    );
    assert_eq!(strict["overall"]["added"], 1, "{strict}");
    assert_eq!(
        strict["final_status_differs"], 0,
        "the reversal left r visible"
    );

    // The CLI reads the same evaluations and reports the same.
    let file = std::env::temp_dir().join(format!("backtest-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&file, hide_threshold("15")).unwrap();
    let path = file.to_str().unwrap();
    let json_out = app
        .run_cli(&[
            "rules", "backtest", path, "--since", "1h", "--json", "--sample", "100",
        ])
        .await;
    let cli: Value = serde_json::from_str(&json_out).unwrap();
    for field in [
        "overall",
        "rules",
        "final_status_differs",
        "added_sample",
        "coverage",
    ] {
        assert_eq!(cli[field], strict[field], "{field}");
    }
    let text = app
        .run_cli(&["rules", "backtest", path, "--since", "1h"])
        .await;
    std::fs::remove_file(&file).unwrap();
    assert!(text.contains("backtest of"), "{text}");
    assert!(text.contains("hide_flag_pile_on"), "{text}");
    assert!(text.contains("added actions: 1"), "{text}");
    assert!(text.contains("post:r evaluation"), "{text}");

    assert_eq!(fingerprint(&app).await, before);
}

#[tokio::test]
async fn bad_backtest_requests_name_the_field_and_the_console_links_a_shadow_rule_to_its_backtest()
{
    let rules = format!(
        "{DEFAULT_RULES}\n[[rule]]\nname = \"trial_two_flags\"\nkinds = [\"post\"]\nwhen = 'count(\"flag\") >= 2'\naction = \"flag\"\nreason = \"{{count.flag}} flags\"\nshadow = true\n"
    );
    let app = spawn_app(TestOptions {
        rules: Some(RuleSet::from_toml(&rules).unwrap()),
        ..TestOptions::default().with(crate::console::with_console)
    })
    .await;
    let authed = |path: &str| {
        app.client
            .post(format!("{}{path}", app.base))
            .bearer_auth(TOKEN_MODERATOR)
    };
    // Two flags: only the shadow rule matches.
    let events: Vec<Value> = (0..2)
        .map(|i| event(&format!("s-{i}"), "post:s", "flag"))
        .collect();
    let sent = app
        .client
        .post(format!("{}/v1/events", app.base))
        .bearer_auth(TOKEN_INGEST)
        .json(&events)
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::ACCEPTED);
    app.wait_settled(SETTLE).await;
    let before = fingerprint(&app).await;

    for (body, status, code, field) in [
        (json!({}), 422, "invalid_request", "rules"),
        (
            json!({"rules": "[[rule]]\nname = 'x'\nwhen = 'count(\"flag\") >'\naction = 'hide'\nreason = 'r'\n"}),
            422,
            "invalid_rules",
            "rules",
        ),
        (json!({"rules": 7}), 422, "invalid_request", "rules"),
        (
            json!({"rules": "", "since": "forever"}),
            422,
            "invalid_request",
            "since",
        ),
        (
            json!({"rules": "", "since": "400days"}),
            422,
            "invalid_request",
            "since",
        ),
        (
            json!({"rules": "", "sample": 101}),
            422,
            "invalid_request",
            "sample",
        ),
        (
            json!({"rules": "", "promote": "trial_two_flags"}),
            422,
            "invalid_request",
            "promote",
        ),
        (
            json!({"promote": "hide_flag_pile_on"}),
            422,
            "invalid_request",
            "promote",
        ),
        (
            json!({"rules": "", "extra": 1}),
            422,
            "invalid_request",
            "extra",
        ),
    ] {
        let response = authed("/v1/rules/backtest")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], code, "{body}: {error}");
        assert_eq!(error["error"]["field"], field, "{body}: {error}");
    }
    let malformed = authed("/v1/rules/backtest")
        .header(header::CONTENT_TYPE, "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), StatusCode::BAD_REQUEST);
    // Promoting the shadow rule through the API: it would have flagged post:s.
    let promoted: Value = authed("/v1/rules/backtest")
        .json(&json!({"promote": "trial_two_flags", "since": "1h"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rule(&promoted, "trial_two_flags")["added"], 1, "{promoted}");
    assert_eq!(rule(&promoted, "trial_two_flags")["candidate_mode"], "live");

    // The console: Quality links the shadow rule to its backtest, which runs on a POST with
    // the session's CSRF token and shows the report beside its shadow matches.
    let (cookie, csrf) = sign_in(&app).await;
    let get = |path: String| {
        app.client
            .get(format!("{}{path}", app.base))
            .header(header::COOKIE, &cookie)
    };
    let quality = get("/console/quality?window=24h".into())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let link = "/console/backtest?promote=trial_two_flags&amp;window=24h";
    assert!(quality.contains(link), "{quality}");
    let form = get("/console/backtest?promote=trial_two_flags&window=24h".into())
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), StatusCode::OK);
    let form = form.text().await.unwrap();
    assert!(
        form.contains("name = &quot;trial_two_flags&quot;"),
        "{form}"
    );
    assert!(
        !form.contains("shadow = true"),
        "the rule is turned live: {form}"
    );
    let candidate = RuleSet::default_rules().to_toml()
        + "\n[[rule]]\nname = \"trial_two_flags\"\nkinds = [\"post\"]\nwhen = 'count(\"flag\") >= 2'\naction = \"flag\"\nreason = \"x\"\n";
    let run = |fields: Vec<(&'static str, String)>| {
        app.client
            .post(format!("{}/console/backtest", app.base))
            .header(header::COOKIE, &cookie)
            .form(&fields)
            .send()
    };
    let page = run(vec![
        ("csrf", csrf_of(&form)),
        ("rules", candidate.clone()),
        ("window", "24h".into()),
        ("promote", "trial_two_flags".into()),
    ])
    .await
    .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let page = page.text().await.unwrap();
    assert!(page.contains(r#"id="report""#), "{page}");
    assert!(page.contains(r#"<strong id="added">1</strong>"#), "{page}");
    assert!(
        page.contains(r#"<strong id="shadow-hits">1</strong>"#),
        "{page}"
    );
    assert!(page.contains("post:s"), "the added action is shown: {page}");
    // Without the CSRF token, or with rules that do not load: refused, naming the problem.
    let forged = run(vec![("rules", candidate.clone()), ("window", "24h".into())])
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::FORBIDDEN);
    let bad = run(vec![
        ("csrf", csrf.clone()),
        ("rules", "[[rule]]\nname = 'x'".into()),
        ("window", "24h".into()),
    ])
    .await
    .unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad.text()
            .await
            .unwrap()
            .contains(r#"<code id="error-field">rules</code>"#)
    );
    let bad_window = run(vec![
        ("csrf", csrf.clone()),
        ("rules", candidate.clone()),
        ("window", "1year".into()),
    ])
    .await
    .unwrap();
    assert_eq!(bad_window.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // Any window up to 90 days, and the sample size, as the command and the API take them.
    let custom = run(vec![
        ("csrf", csrf.clone()),
        ("rules", candidate.clone()),
        ("window", "36h".into()),
        ("sample", "0".into()),
    ])
    .await
    .unwrap();
    assert_eq!(custom.status(), StatusCode::OK);
    let custom = custom.text().await.unwrap();
    assert!(
        custom.contains(r#"<strong id="added">1</strong>"#),
        "{custom}"
    );
    assert!(
        custom.contains(r#"value="36h""#),
        "the window is kept: {custom}"
    );
    assert!(
        !custom.contains(r#"<article class="added""#),
        "a sample of 0 shows no added action: {custom}"
    );
    let bad_sample = run(vec![
        ("csrf", csrf.clone()),
        ("rules", candidate),
        ("window", "24h".into()),
        ("sample", "500".into()),
    ])
    .await
    .unwrap();
    assert_eq!(bad_sample.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad_sample
            .text()
            .await
            .unwrap()
            .contains(r#"<code id="error-field">sample</code>"#)
    );
    // The page's sweep form: each value of a rule's number backtested, in a table and a chart.
    assert!(
        form.contains(r#"action="/console/backtest/sweep""#),
        "{form}"
    );
    let sweep = |fields: Vec<(&'static str, String)>| {
        app.client
            .post(format!("{}/console/backtest/sweep", app.base))
            .header(header::COOKIE, &cookie)
            .form(&fields)
            .send()
    };
    let swept = sweep(vec![
        ("csrf", csrf.clone()),
        ("rule", "hide_flag_pile_on".into()),
        ("literal", "0".into()),
        ("values", "5, 8.3".into()),
        ("window", "24h".into()),
    ])
    .await
    .unwrap();
    assert_eq!(swept.status(), StatusCode::OK);
    let swept = swept.text().await.unwrap();
    assert!(swept.contains(r#"id="sweep-table""#), "{swept}");
    assert!(
        swept.contains(r#"data-value="5""#) && swept.contains(r#"data-value="8.3""#),
        "{swept}"
    );
    let bad_literal = sweep(vec![
        ("csrf", csrf.clone()),
        ("rule", "hide_flag_pile_on".into()),
        ("literal", "9".into()),
        ("window", "24h".into()),
    ])
    .await
    .unwrap();
    assert_eq!(bad_literal.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        bad_literal
            .text()
            .await
            .unwrap()
            .contains(r#"<code id="error-field">literal</code>"#)
    );

    assert_eq!(fingerprint(&app).await, before);
}

#[tokio::test]
async fn a_candidate_that_hides_one_evaluation_later_saves_no_reversal_and_its_json_is_clean_of_logs()
 {
    let app = spawn_app(TestOptions::default()).await;
    // Hidden at 11 flags; a 12th flag is evaluated while it is hidden; then a moderator
    // reverses the hide.
    signals(&app, "post:rh", "a", "flag", 11).await;
    app.wait_settled(SETTLE).await;
    assert_eq!(app.status_of("post:rh").await, Status::Hidden);
    signals(&app, "post:rh", "b", "flag", 1).await;
    app.wait_settled(SETTLE).await;
    assert_eq!(app.evaluation_count("post:rh").await, 2);
    reverse(&app, app.action_ids_of("post:rh").await[0]).await;

    // A candidate hiding at 12 flags only flags at 11, but hides at the 12th flag, before
    // the reversal: the moderator would have reversed that hide too.
    let report = backtest(&app, &hide_threshold("12")).await;
    let hide = rule(&report, "hide_flag_pile_on");
    assert_eq!(hide["removed"], 1, "{report}");
    assert_eq!(hide["added"], 1, "{report}");
    assert_eq!(hide["reversals_saved"], 0, "{report}");
    assert_eq!(hide["reversals_repeated"], 1, "{report}");
    assert_eq!(hide["expected_reversal_rate"]["rate"], 1.0, "{report}");
    assert_eq!(hide["expected_reversal_rate"]["basis"], 1, "{report}");
    assert_eq!(report["overall"]["reversals_saved"], 0, "{report}");
    // The authors' rule reads counts recorded from the hides in force, which the replay does
    // not follow: its line and a warning say so.
    assert_eq!(
        rule(&report, "suspend_repeat_offender")["reads_recorded_actions"],
        json!(["auto.hide", "auto.hide.reversed"]),
        "{report}"
    );
    assert!(
        report["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("suspend_repeat_offender reads auto.hide")),
        "{report}"
    );

    // The command's --json is JSON alone on stdout, even with every statement logged (as
    // sqlx logs a slow one): the logs go to stderr.
    let file = std::env::temp_dir().join(format!("backtest-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&file, hide_threshold("12")).unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_quiesce"))
        .args([
            "rules",
            "backtest",
            file.to_str().unwrap(),
            "--since",
            "1h",
            "--json",
        ])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(app.settings.to_environment())
        .env("RUST_LOG", "debug,sqlx=debug")
        .output()
        .await
        .unwrap();
    std::fs::remove_file(&file).unwrap();
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("sqlx"), "statements were logged: {stderr}");
    let cli: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));
    assert_eq!(cli["overall"], report["overall"]);
}

#[tokio::test]
async fn a_renamed_rule_is_expected_to_be_reversed_as_often_as_the_rule_in_force() {
    let app = spawn_app(TestOptions::default()).await;
    // Three posts hidden at ten flags; a moderator reverses one hide and lets two stand.
    for entity in ["post:n1", "post:n2", "post:n3"] {
        signals(&app, entity, "a", "flag", 10).await;
    }
    app.wait_settled(SETTLE).await;
    reverse(&app, app.action_ids_of("post:n1").await[0]).await;
    let identity = backtest(&app, DEFAULT_RULES).await;
    let in_force = rule(&identity, "hide_flag_pile_on");
    assert_eq!(
        (
            &in_force["in_force_actions"],
            &in_force["in_force_reversed"]
        ),
        (&json!(3), &json!(1)),
        "{identity}"
    );

    // The same file with the pile-on rule renamed takes the same hides on the same
    // evaluations: by rule, each is a hide removed and one added, and every added one repeats
    // a hide moderators judged, one reversed and two let stand.
    let renamed_rules =
        DEFAULT_RULES.replace("name = \"hide_flag_pile_on\"", "name = \"pile_on_renamed\"");
    assert_ne!(renamed_rules, DEFAULT_RULES);
    let report = backtest(&app, &renamed_rules).await;
    let renamed = rule(&report, "pile_on_renamed");
    assert_eq!(
        (&renamed["kept"], &renamed["added"]),
        (&json!(0), &json!(3))
    );
    assert_eq!(renamed["reversals_repeated"], 1, "{report}");
    assert_eq!(renamed["repeats_let_stand"], 2, "{report}");
    assert_eq!(
        renamed["expected_reversal_rate"], in_force["expected_reversal_rate"],
        "{report}"
    );
    assert_eq!(renamed["expected_reversal_rate"]["basis"], 3, "{report}");
    assert_eq!(rule(&report, "hide_flag_pile_on")["reversals_saved"], 0);
    assert_eq!(
        report["overall"]["expected_reversal_rate"],
        identity["overall"]["expected_reversal_rate"]
    );

    // The command prints the repeats let stand in their own column.
    let file = std::env::temp_dir().join(format!("renamed-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&file, &renamed_rules).unwrap();
    let text = app
        .run_cli(&["rules", "backtest", file.to_str().unwrap(), "--since", "1h"])
        .await;
    std::fs::remove_file(&file).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("rule ") && l.contains("repeated  let stand")),
        "{text}"
    );
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("pile_on_renamed "))
        .unwrap_or_else(|| panic!("{text}"))
        .split_whitespace()
        .collect();
    // rule, in force, reversed (2 words), backtest, kept, added, removed, saved, repeated,
    // let stand, then the rate.
    assert_eq!(&row[4..11], ["3", "0", "3", "0", "0", "1", "2"], "{text}");
    assert_eq!(row[11], "33.3%", "{text}");
}

#[tokio::test]
async fn a_sweep_reproduces_the_identity_backtest_at_the_rules_own_value_and_a_backtest_at_each_other()
 {
    let app = spawn_app(TestOptions::default()).await;
    for (entity, flags) in [
        ("post:s1", 1),
        ("post:s3", 3),
        ("post:s6", 6),
        ("post:s9", 9),
        ("post:s12", 12),
        ("post:s20", 20),
    ] {
        signals(&app, entity, "a", "flag", flags).await;
    }
    app.wait_settled(SETTLE).await;
    // A moderator reverses the hide of the 9-flag post.
    let hide: i64 = scalar!(
        app,
        "SELECT id FROM actions WHERE entity = 'post:s9' AND action = 'hide'"
    );
    reverse(&app, hide).await;

    let file = std::env::temp_dir().join(format!("sweep-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&file, DEFAULT_RULES).unwrap();
    let out = app
        .run_cli(&[
            "rules",
            "sweep",
            file.to_str().unwrap(),
            "--rule",
            "hide_flag_pile_on",
            "--values",
            "5,8.3,10,15",
            "--since",
            "1h",
            "--json",
        ])
        .await;
    let text = app
        .run_cli(&[
            "rules",
            "sweep",
            file.to_str().unwrap(),
            "--rule",
            "hide_flag_pile_on",
            "--since",
            "1h",
        ])
        .await;
    std::fs::remove_file(&file).unwrap();
    let sweep: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(sweep["literal_value"], 8.3, "{sweep}");
    let rows = sweep["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    // The rule's own value is the identity: every action kept, none added or removed.
    let own = &rows[1];
    assert_eq!(own["value"], 8.3);
    assert_eq!(own["actions"], 3, "9, 12 and 20 flags: {sweep}");
    assert_eq!(
        (own["added"].as_u64(), own["removed"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(
        (
            own["overall_added"].as_u64(),
            own["overall_removed"].as_u64()
        ),
        (Some(0), Some(0))
    );
    // Every other value reports exactly what a backtest of a file with that value reports.
    for row in rows {
        let value = row["value"].as_f64().unwrap();
        let candidate = if value == 8.3 {
            DEFAULT_RULES.to_owned()
        } else {
            hide_threshold(&format!("{value:?}"))
        };
        let report = backtest(&app, &candidate).await;
        let line = rule(&report, "hide_flag_pile_on");
        for (field, of_line) in [
            ("actions", "backtest_actions"),
            ("kept", "kept"),
            ("added", "added"),
            ("removed", "removed"),
            ("reversals_saved", "reversals_saved"),
            ("reversals_repeated", "reversals_repeated"),
            ("repeats_let_stand", "repeats_let_stand"),
            ("expected_reversal_rate", "expected_reversal_rate"),
        ] {
            assert_eq!(row[field], line[of_line], "{value}: {field}");
        }
        assert_eq!(row["overall_added"], report["overall"]["added"], "{value}");
        assert_eq!(
            row["overall_removed"], report["overall"]["removed"],
            "{value}"
        );
        // Its warnings are the sweep's, named with the value when not every value gave them
        // (the figures a warning names are that value's).
        for warning in report["warnings"].as_array().unwrap() {
            let warning = warning.as_str().unwrap();
            let named = format!("at value {value}: {warning}");
            assert!(
                sweep["warnings"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|w| w == warning || w == &named),
                "{value}: {warning} not in {sweep}"
            );
        }
    }
    // The recorded-actions warning names the values that add and remove actions, and how
    // many each does, never the rule's own value (which adds and removes none).
    let named: Vec<&str> = sweep["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .filter(|w| w.contains("added and"))
        .collect();
    assert!(!named.is_empty(), "{sweep}");
    assert!(
        named
            .iter()
            .all(|w| w.starts_with("at value ") && !w.starts_with("at value 8.3:")),
        "{named:?}"
    );
    // Moving the threshold to 10 removes the reversed hide of post:s9: a reversal saved.
    assert_eq!(rows[2]["reversals_saved"], 1, "{sweep}");
    // The text lists the default range around the literal, its own value among them.
    assert!(
        text.contains("sweep of hide_flag_pile_on (literal 0: 8.3)"),
        "{text}"
    );
    assert!(text.lines().any(|l| l.starts_with("8.3 ")), "{text}");
}

/// `rules backtest` and `rules sweep` print their report and log only warnings unless
/// `RUST_LOG` asks for more: a good run leaves stderr empty, and `RUST_LOG=info` shows the
/// info lines held back.
#[tokio::test]
async fn report_commands_log_only_warnings_unless_asked() {
    let app = spawn_app(TestOptions::idle()).await;
    let file = std::env::temp_dir().join(format!("quiet-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&file, DEFAULT_RULES).unwrap();
    let path = file.to_str().unwrap();
    let run = |args: Vec<&str>, log: Option<&str>| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_quiesce"));
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(app.settings.to_environment());
        if let Some(log) = log {
            command.env("RUST_LOG", log);
        }
        async move {
            let output = command.output().await.unwrap();
            assert!(output.status.success(), "{output:?}");
            String::from_utf8(output.stderr).unwrap()
        }
    };
    for args in [
        vec!["rules", "backtest", path, "--since", "1h"],
        vec![
            "rules",
            "sweep",
            path,
            "--rule",
            "hide_flag_pile_on",
            "--since",
            "1h",
        ],
    ] {
        let quiet = run(args.clone(), None).await;
        assert_eq!(quiet, "", "{args:?} logged by default");
        let asked = run(args.clone(), Some("info")).await;
        assert!(
            asked.contains(" INFO "),
            "{args:?} with RUST_LOG=info: {asked}"
        );
    }
    std::fs::remove_file(&file).unwrap();
}
