//! rules/examples/discord-timeouts.toml end to end (its timeouts in seconds, its half-life an
//! hour): the timeout ladder takes exactly the actions its recipe says: a short timeout at two
//! violations, restored on time; strikes that expire (moved two days into the past, where an
//! hour's half-life leaves nothing of them), so a later violation is judged without them; and
//! a longer timeout when violations come back soon after a timeout ends.

use std::time::Duration;

use chrono::{DateTime, Utc};
use quiesce::domain::Status;
use quiesce::{domain::Windows, rules::RuleSet};
use serde_json::json;

use crate::helpers::{TestApp, TestOptions, event, spawn_app, wait_for};

const USER: &str = "user:d1";
const HALF_LIFE: &str = "1h";

/// The example with short lengths: a 1 h half-life, timeouts of 1, 3, 5 and 7 s.
fn rules() -> RuleSet {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/rules/examples/discord-timeouts.toml"
    ))
    .unwrap();
    let mut short = text.replace(
        r#"decayed("automod.violation", "7d")"#,
        &format!(r#"decayed("automod.violation", "{HALF_LIFE}")"#),
    );
    for (from, to) in [("10m", "1s"), ("1h", "3s"), ("1d", "5s"), ("7d", "7s")] {
        short = short.replace(
            &format!("duration = \"{from}\""),
            &format!("duration = \"{to}\""),
        );
    }
    assert!(!short.contains("\"7d\""), "every length replaced");
    RuleSet::from_toml(&short).unwrap()
}

async fn violation(app: &TestApp, n: usize) {
    app.send(&json!([event(&format!("v{n}"), USER, "automod.violation")]))
        .await;
    app.wait_settled(Duration::from_secs(30)).await;
}

/// The user's actions so far: (action, rule).
async fn actions(app: &TestApp) -> Vec<(String, String)> {
    app.actions_of(USER)
        .await
        .into_iter()
        .map(|a| (a.action, a.rule))
        .collect()
}

fn expected(rows: &[(&str, &str)]) -> Vec<(String, String)> {
    rows.iter()
        .map(|(a, r)| (a.to_string(), r.to_string()))
        .collect()
}

/// The user's decayed strikes as an evaluation would read them now.
async fn strikes(app: &TestApp) -> f64 {
    let read = Windows {
        half_lives: vec![HALF_LIFE.into()],
        ..Windows::NONE
    };
    let snapshots = app
        .backends
        .store
        .snapshots()
        .many(&[USER], false, &read, Default::default())
        .await
        .unwrap();
    snapshots[USER].signals["automod.violation"].decayed[HALF_LIFE]
}

/// Waits for the user's timeout to end, and checks it ended no earlier than its end.
async fn restored(app: &TestApp) {
    wait_for(Duration::from_secs(30), "the timeout's end", || async {
        app.status_of(USER).await == Status::Visible
    })
    .await;
    let (ends_at, restored_at): (DateTime<Utc>, DateTime<Utc>) = sqlx::query!(
        r#"SELECT s.ends_at AS "ends_at!", r.created_at FROM actions s, actions r
           WHERE s.entity = $1 AND r.entity = $1 AND s.action = 'suspend' AND r.action = 'restore'
           ORDER BY s.id DESC, r.id DESC LIMIT 1"#,
        USER
    )
    .fetch_one(&app.pool)
    .await
    .map(|row| (row.ends_at, row.created_at))
    .unwrap();
    assert!(
        restored_at >= ends_at,
        "restored {restored_at}, due {ends_at}"
    );
}

#[tokio::test]
async fn the_discord_timeout_ladder_times_out_restores_forgives_and_escalates() {
    let app = spawn_app(TestOptions {
        rules: Some(rules()),
        ..TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(10))
    })
    .await;

    // One violation: a warning label, no timeout.
    violation(&app, 1).await;
    assert_eq!(actions(&app).await, expected(&[]));
    assert_eq!(app.status_of(USER).await, Status::Visible);

    // A second: the 10-minute rung (1 s here), restored at its end (the queue settles only
    // once the timer's end is evaluated).
    violation(&app, 2).await;
    restored(&app).await;
    assert_eq!(
        actions(&app).await,
        expected(&[("suspend", "timeout_10m"), ("restore", "timeout_10m")])
    );

    // The strikes expire: two days on, they weigh nothing (0.5^48), and a third violation is
    // judged alone, and takes no timeout (counted over a lifetime, it would be the 1-hour
    // rung).
    app.age_events(&["v1", "v2"], Duration::from_secs(2 * 24 * 3600))
        .await;
    assert!(strikes(&app).await < 1e-6);
    violation(&app, 3).await;
    assert_eq!(
        actions(&app).await.len(),
        2,
        "an expired strike does not count"
    );
    assert_eq!(app.status_of(USER).await, Status::Visible);

    // A fourth right after: two fresh strikes, the short rung again.
    violation(&app, 4).await;
    restored(&app).await;
    // Back soon after it ends: three recent strikes, the 1-hour rung (3 s here).
    violation(&app, 5).await;
    restored(&app).await;
    assert_eq!(
        actions(&app).await,
        expected(&[
            ("suspend", "timeout_10m"),
            ("restore", "timeout_10m"),
            ("suspend", "timeout_10m"),
            ("restore", "timeout_10m"),
            ("suspend", "timeout_1h"),
            ("restore", "timeout_1h"),
        ])
    );
    let (_, body) = app.get(&format!("/v1/entities/{USER}")).await;
    assert_eq!(body["labels"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["labels"][0]["label"], "automod.warned", "{body}");

    // The identity backtest: the rules in force, replayed from the stored snapshots (decayed
    // strikes and timers included), take exactly the three timeouts taken; the restores are
    // replayed as what happened.
    let (status, report) = app
        .post_json(
            "/v1/rules/backtest",
            json!({"rules": rules().to_toml(), "since": "1h", "sample": 10}),
        )
        .await;
    assert_eq!(status, 200, "{report}");
    let overall = &report["overall"];
    assert_eq!(overall["in_force_actions"], 3, "{report}");
    assert_eq!(overall["backtest_actions"], 3, "{report}");
    assert_eq!(overall["kept"], 3, "{report}");
    assert_eq!(overall["added"], 0, "{report}");
    assert_eq!(overall["removed"], 0, "{report}");
    assert_eq!(report["final_status_differs"], 0, "{report}");
    app.assert_statements_complete().await;
}
