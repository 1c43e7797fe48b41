//! Long windows and decay over real day buckets: the 7d/30d/90d windows and decayed counts
//! read the same before and after a fold, a fold keeps at most 91 day buckets per entity and
//! signal, the bytes that costs per entity, and the default rules' strikes that expire.

use std::time::Duration;

use chrono::{DateTime, DurationRound, Utc};
use quiesce::domain::Status;
use quiesce::{
    domain::{DAYS_KEPT, Snapshot, Windows, decay_weight},
    rules::RuleSet,
};
use serde_json::{Value, json};

use crate::helpers::{TestApp, TestOptions, event, scalar, spawn_app, wait_for};

const DAY: Duration = Duration::from_secs(24 * 3600);
const MINUTE: chrono::Duration = chrono::Duration::minutes(1);

/// The flag counts of the entity's 7d, 30d and 90d windows as the read API shows them.
async fn day_windows(app: &TestApp, entity: &str) -> [Option<i64>; 3] {
    let (status, body) = app.get(&format!("/v1/entities/{entity}")).await;
    assert_eq!(status, 200, "{body}");
    ["7d", "30d", "90d"].map(|w| body["signals"]["flag"]["windows"][w]["count"].as_i64())
}

/// The entity's decayed flag count with a 30-day half-life, as an evaluation reads it.
async fn decayed(app: &TestApp, entity: &str) -> (f64, DateTime<Utc>) {
    let snapshot = decaying(app, entity, "30d").await;
    (snapshot.signals["flag"].decayed["30d"], snapshot.taken_at)
}

/// The entity's snapshot as an evaluation of rules reading a decayed count with this
/// half-life reads it.
async fn decaying(app: &TestApp, entity: &str, half_life: &str) -> Snapshot {
    let read = Windows {
        half_lives: vec![half_life.into()],
        ..Windows::NONE
    };
    let mut snapshots = app
        .backends
        .store
        .snapshots()
        .many(&[entity], false, &read, Default::default())
        .await
        .unwrap();
    snapshots.remove(entity).unwrap()
}

/// The decayed count the receive times give at `now`: today's events aged from the start of
/// their minute, older ones from the start of their UTC day, to the start of the current
/// minute (whole minutes); none older than 90 days.
fn expected_decay(received: &[DateTime<Utc>], now: DateTime<Utc>, half_life_secs: i64) -> f64 {
    let minute = now.duration_trunc(MINUTE).unwrap();
    let today = now.duration_trunc(chrono::Duration::days(1)).unwrap();
    let oldest = today - chrono::Duration::days(DAYS_KEPT - 1);
    received
        .iter()
        .filter(|at| **at >= oldest)
        .map(|at| {
            let unit = if *at >= today {
                MINUTE
            } else {
                chrono::Duration::days(1)
            };
            let start = at.duration_trunc(unit).unwrap();
            decay_weight((minute - start).num_seconds() as f64, half_life_secs)
        })
        .sum()
}

#[tokio::test]
async fn day_windows_and_decayed_counts_are_the_same_before_and_after_the_fold() {
    let app = spawn_app(TestOptions::idle()).await;
    let ids = ["now-a", "now-b", "d3", "d10", "d40", "d100"];
    let events: Vec<Value> = ids
        .iter()
        .map(|id| event(id, "post:long", "flag"))
        .collect();
    assert_eq!(app.send(&json!(events)).await, (6, 0));
    for (id, days) in [("d3", 3), ("d10", 10), ("d40", 40), ("d100", 100)] {
        app.age_events(&[id], DAY * days).await;
    }
    let received: Vec<DateTime<Utc>> =
        sqlx::query_scalar!("SELECT received_at FROM events WHERE entity = 'post:long'")
            .fetch_all(&app.pool)
            .await
            .unwrap();

    // Unfolded: the reads add the events themselves.
    let expected_windows = [Some(3), Some(4), Some(5)];
    assert_eq!(day_windows(&app, "post:long").await, expected_windows);
    let (value, at) = decayed(&app, "post:long").await;
    let expected = expected_decay(&received, at, 30 * 86_400);
    assert!((value - expected).abs() < 1e-9, "{value} != {expected}");
    assert!(value > 2.5 && value < 5.0, "{value}");

    // Folded: the day buckets give the same figures; the 100-day-old event is in the total
    // only (older than any day bucket kept).
    wait_for(Duration::from_secs(10), "the fold", || async {
        app.backends
            .store
            .fold()
            .entities(&["post:long"], 1)
            .await
            .unwrap();
        app.count_unfolded_events().await == 0
    })
    .await;
    assert_eq!(
        scalar!(app, "SELECT coalesce(sum(count), 0)::int8 FROM signal_days"),
        5
    );
    assert_eq!(scalar!(app, "SELECT count(*) FROM signal_days"), 4);
    assert_eq!(day_windows(&app, "post:long").await, expected_windows);
    let (value, at) = decayed(&app, "post:long").await;
    let expected = expected_decay(&received, at, 30 * 86_400);
    assert!((value - expected).abs() < 1e-9, "{value} != {expected}");
    let (_, body) = app.get("/v1/entities/post:long").await;
    assert_eq!(body["signals"]["flag"]["count"], 6, "{body}");
}

/// A decayed count ages events in whole minutes, to the start of the current minute: three
/// strikes of this minute are exactly 3.0 (a `>= 3` threshold holds however far into the
/// minute it is read), and a strike of the minute before weighs one whole minute of decay,
/// however few seconds old it is.
#[tokio::test]
async fn a_decayed_count_ages_events_in_whole_minutes() {
    let app = spawn_app(TestOptions::idle()).await;
    let events: Vec<Value> = ["s1", "s2", "s3"]
        .iter()
        .map(|id| event(id, "user:fresh", "flag"))
        .chain([event("s4", "user:last", "flag")])
        .collect();
    assert_eq!(app.send(&json!(events)).await, (4, 0));
    let rules = RuleSet::from_toml(
        r#"
[[rule]]
name = "three_strikes"
when = 'decayed("flag", "1h") >= 3'
action = "suspend"
reason = "three strikes"
"#,
    )
    .unwrap();
    // The fourth goes one second before the current minute: a partition holds the hour before
    // the first one made (which may begin this minute).
    let first: DateTime<Utc> = scalar!(
        app,
        "SELECT min(lower_bound) FROM partitions WHERE parent = 'events'"
    );
    app.backends
        .store
        .partitions()
        .add_partition(
            quiesce::store::Partitioned::Events,
            first - chrono::Duration::hours(1),
            first,
        )
        .await
        .unwrap();
    // The strikes are put in the current minute (the fourth one second before it began) and
    // read at once; should the minute turn in between, again.
    let mut read = None;
    for _ in 0..3 {
        let minute: DateTime<Utc> = scalar!(
            app,
            "WITH moved AS (
                 UPDATE events SET received_at = CASE WHEN id = 's4'
                     THEN date_trunc('minute', now()) - interval '1 second' ELSE now() END)
             SELECT date_trunc('minute', now())"
        );
        let fresh = decaying(&app, "user:fresh", "1h").await;
        let last = decaying(&app, "user:last", "1h").await;
        let in_minute = |s: &Snapshot| s.taken_at.duration_trunc(MINUTE).unwrap() == minute;
        if in_minute(&fresh) && in_minute(&last) {
            read = Some((minute, fresh, last));
            break;
        }
    }
    let (minute, fresh, last) = read.expect("a read in the minute of the strikes");
    assert_eq!(
        fresh.signals["flag"].decayed["1h"], 3.0,
        "this minute's strikes weigh exactly 1 each"
    );
    let verdict = rules.evaluate(&fresh);
    assert!(verdict.errors.is_empty(), "{verdict:?}");
    assert_eq!(verdict.matched.len(), 1, "`>= 3` holds at 3.0: {verdict:?}");
    // The strike of the minute before weighs one whole minute of decay (a day and a minute
    // when that minute was yesterday's, just after midnight UTC).
    let received = minute - chrono::Duration::seconds(1);
    let expected = expected_decay(&[received], last.taken_at, 3600);
    if received.date_naive() == minute.date_naive() {
        assert_eq!(expected, decay_weight(60.0, 3600));
    }
    let value = last.signals["flag"].decayed["1h"];
    assert!(
        (value - expected).abs() < 1e-12,
        "a strike of the minute before weighs {expected}, not {value}"
    );
}

#[tokio::test]
async fn a_fold_keeps_at_most_91_day_buckets_per_entity_and_signal() {
    let app = spawn_app(TestOptions::idle()).await;
    app.send(&json!([event("e1", "post:kept", "flag")])).await;
    // Day buckets for each of the last 120 days, as if folded over four months.
    sqlx::query!(
        "INSERT INTO signal_days (entity, signal, day, count, weight_sum)
         SELECT 'post:kept', 'flag', (now() AT TIME ZONE 'UTC')::date - d, 1, 1
         FROM generate_series(1, 120) d",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    wait_for(Duration::from_secs(10), "the fold", || async {
        app.backends
            .store
            .fold()
            .entities(&["post:kept"], 1)
            .await
            .unwrap();
        app.count_unfolded_events().await == 0
    })
    .await;
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM signal_days WHERE entity = 'post:kept'"
        ),
        DAYS_KEPT,
        "today and the 90 days before"
    );
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM signal_days WHERE entity = 'post:kept'
             AND day < (now() AT TIME ZONE 'UTC')::date - 90"
        ),
        0
    );
    // Today's bucket (the folded event) and the 90 days before: 91 events in the 90d window.
    assert_eq!(day_windows(&app, "post:kept").await[2], Some(91));
}

/// The storage of day buckets per entity, at their bound (one signal, 91 days), for
/// BENCHMARKS.md: `cargo test --test api bytes_per_entity -- --nocapture` prints it.
#[tokio::test]
async fn day_buckets_cost_a_bounded_number_of_bytes_per_entity() {
    const ENTITIES: i64 = 2000;
    let app = spawn_app(TestOptions::idle()).await;
    sqlx::query!(
        "INSERT INTO signal_days (entity, signal, day, count, weight_sum)
         SELECT 'user:' || e, 'auto.hide', (now() AT TIME ZONE 'UTC')::date - d, 1, 1
         FROM generate_series(1, $1) e, generate_series(0, 90) d",
        i32::try_from(ENTITIES).unwrap()
    )
    .execute(&app.pool)
    .await
    .unwrap();
    // VACUUM: maintenance, not a statement the compile-time check takes.
    sqlx::query("VACUUM ANALYZE signal_days")
        .execute(&app.pool)
        .await
        .unwrap();
    let (heap, total) = (
        scalar!(app, "SELECT pg_relation_size('signal_days')"),
        scalar!(app, "SELECT pg_total_relation_size('signal_days')"),
    );
    let per_entity = total / ENTITIES;
    println!(
        "day buckets at their bound (1 signal x 91 days): {} bytes per entity and signal \
         ({} heap, {} with the primary key index)",
        per_entity,
        heap / ENTITIES,
        per_entity
    );
    // 91 rows of about 60 bytes, a page's fill factor of 70% and the index: well under 16 KiB.
    assert!(per_entity < 16 * 1024, "{per_entity} bytes per entity");
}

#[tokio::test]
async fn an_authors_strikes_expire_under_the_default_rules() {
    let app = spawn_app(
        TestOptions::default().with(|s| s.schedule.debounce_window = Duration::from_millis(10)),
    )
    .await;
    let hide_post = |post: usize| {
        let events: Vec<Value> = (0..10)
            .map(|i| {
                json!({"id": format!("s{post}-{i}"), "entity": format!("post:{post}"),
                       "type": "flag", "author": "user:55"})
            })
            .collect();
        json!(events)
    };
    let strikes = |app: &TestApp| {
        let pool = app.pool.clone();
        async move {
            sqlx::query_scalar!(
                "SELECT id FROM events WHERE entity = 'user:55' AND signal = 'auto.hide'",
            )
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    for post in 0..2 {
        app.send(&hide_post(post)).await;
    }
    app.wait_settled(Duration::from_secs(30)).await;
    assert_eq!(
        app.status_of("user:55").await,
        Status::Visible,
        "two strikes"
    );
    // The two strikes are 40 days old (not folded yet: the author's reads take them from the
    // events): each now weighs 0.5^(40/30) = 0.40.
    assert_eq!(
        scalar!(
            app,
            "SELECT count(*) FROM signal_days WHERE entity = 'user:55'"
        ),
        0
    );
    let old = strikes(&app).await;
    assert_eq!(old.len(), 2, "{old:?}");
    let old: Vec<&str> = old.iter().map(String::as_str).collect();
    app.age_events(&old, DAY * 40).await;

    // A third hide: 1 + 2 x 0.40 < 2.5, the old strikes have expired far enough.
    app.send(&hide_post(2)).await;
    app.wait_settled(Duration::from_secs(30)).await;
    assert_eq!(app.status_of("post:2").await, Status::Hidden);
    assert_eq!(
        app.status_of("user:55").await,
        Status::Visible,
        "expired strikes"
    );

    // One more: 2 + 2 x 0.40 >= 2.5, suspended (the old strikes still count, decayed).
    app.send(&hide_post(3)).await;
    app.wait_settled(Duration::from_secs(30)).await;
    assert_eq!(app.status_of("user:55").await, Status::Suspended);
    let snapshot: Value = sqlx::query_scalar!(
        "SELECT snapshot FROM actions WHERE entity = 'user:55' AND rule = 'suspend_repeat_offender'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    // The action keeps what the rule read: the decayed count, for the backtest to replay.
    let value = snapshot["signals"]["auto.hide"]["decayed"]["30d"]
        .as_f64()
        .unwrap();
    assert!(value > 2.7 && value < 2.9, "{snapshot}");
    assert_eq!(app.action_count_of("user:55").await, 1);
}
