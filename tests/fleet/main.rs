//! The fleet: 2 `quiesce serve` and 3 `quiesce worker` processes (the real binary) on one
//! Redis prefix and one database, under load, follow the active rules version. A publish
//! reaches all five within 2 s (measured and printed), every evaluation that starts after
//! they all have it carries the new version and none mixes two; a rollback does the same; a
//! process started while a version is published runs the newest; a notification lost (the
//! listeners' connections terminated, or a version made active without one) is caught by the
//! poll.

#[path = "../api/helpers/mod.rs"]
#[allow(dead_code)]
mod helpers;
#[path = "../api/proxy.rs"]
#[allow(dead_code)]
mod proxy;
#[path = "../support/secrets.rs"]
mod secrets;

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crate::helpers::scalar;
use chrono::{DateTime, Utc};
use helpers::{TestApp, TestOptions, event, spawn_app, wait_for};
use serde_json::{Value, json};
use tokio::process::Child;

/// How long a publish may take to reach every process.
const REACH: Duration = Duration::from_secs(2);
/// Each process's poll in this test: what a lost notification may cost.
const POLL: Duration = Duration::from_secs(1);

/// A rules file whose one rule is named for `version`, so an evaluation's matches say which
/// version decided it.
fn rules_named(version: &str) -> String {
    format!(
        "[[rule]]\nname = \"flag_{version}\"\nwhen = 'count(\"flag\") >= 1'\naction = \"flag\"\nreason = \"{{count.flag}} flags\"\n\n[[rule]]\nname = \"shadow_{version}\"\nwhen = 'count(\"flag\") >= 1'\naction = \"hide\"\nreason = \"trial\"\nshadow = true\n"
    )
}

fn free_address() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// One process of the fleet and where it says which rules version it runs.
struct Member {
    name: String,
    child: Child,
    /// `/readyz` of a serve process, `/metrics` of a worker.
    probe: String,
}

impl Member {
    /// The rules version the process reports, if it answers.
    async fn version(&self, client: &reqwest::Client) -> Option<i64> {
        let response = client.get(&self.probe).send().await.ok()?;
        let text = response.text().await.ok()?;
        if self.probe.ends_with("/readyz") {
            return serde_json::from_str::<Value>(&text).ok()?["rules_version"].as_i64();
        }
        text.lines()
            .find_map(|l| l.strip_prefix("quiesce_rules_version "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as i64)
    }
}

struct Fleet {
    app: TestApp,
    members: Vec<Member>,
    /// The serve processes' API bases.
    apis: Vec<String>,
}

impl Fleet {
    async fn start(app: TestApp) -> Self {
        let mut members = Vec::new();
        let mut apis = Vec::new();
        for i in 0..2 {
            let name = format!("serve-{i}");
            let listen = free_address();
            let child = app
                .serve_command(&name, listen)
                .env("QUIESCE_WORKER_ID", &name)
                .spawn()
                .expect("start quiesce serve");
            apis.push(format!("http://{listen}"));
            members.push(Member {
                name,
                child,
                probe: format!("http://{listen}/readyz"),
            });
        }
        for i in 0..3 {
            members.push(worker(&app, &format!("worker-{i}")));
        }
        let fleet = Self { app, members, apis };
        fleet.wait_all_at(1, Duration::from_secs(60)).await;
        fleet
    }

    /// Waits until every member reports `version`; returns how long each took.
    async fn wait_all_at(&self, version: i64, within: Duration) -> BTreeMap<String, Duration> {
        let started = Instant::now();
        let mut reached = BTreeMap::new();
        while reached.len() < self.members.len() {
            for member in &self.members {
                if !reached.contains_key(&member.name)
                    && member.version(&self.app.client).await == Some(version)
                {
                    reached.insert(member.name.clone(), started.elapsed());
                }
            }
            assert!(
                started.elapsed() < within,
                "version {version} reached only {reached:?} within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        reached
    }

    async fn publish(&self, api: usize, version_name: &str) -> i64 {
        let (status, body) = post(
            &self.app,
            &format!("{}/v1/rules", self.apis[api]),
            json!({"rules": rules_named(version_name), "message": format!("rules {version_name}")}),
        )
        .await;
        assert_eq!(status, 201, "{body}");
        body["version"].as_i64().unwrap()
    }

    /// Publishes (or rolls back, with `rollback`) through one serve process and measures the
    /// time until all five report it; asserts it is within [`REACH`] and that evaluations
    /// started after that instant carry it. Returns the slowest member's time.
    async fn roll_out(&self, what: &str, change: impl Future<Output = i64>) -> Duration {
        let started = Instant::now();
        let version = change.await;
        let reached = self
            .wait_all_at(version, REACH + Duration::from_secs(3))
            .await;
        let all_at: DateTime<Utc> = Utc::now();
        let slowest = started.elapsed();
        let each: Vec<String> = reached
            .iter()
            .map(|(name, took)| format!("{name} {} ms", took.as_millis()))
            .collect();
        println!(
            "{what} (version {version}) reached all {} processes in {} ms: {}",
            self.members.len(),
            slowest.as_millis(),
            each.join(", ")
        );
        assert!(slowest <= REACH, "{what} took {slowest:?}");
        self.evaluations_after_carry(all_at, version).await;
        slowest
    }

    /// Waits for evaluations started after `instant` (from at least two processes) and checks
    /// that each carries `version`.
    async fn evaluations_after_carry(&self, instant: DateTime<Utc>, version: i64) {
        wait_for(
            Duration::from_secs(30),
            "evaluations after the change, by two processes or more",
            || async {
                let workers: i64 = scalar!(
                    self.app,
                    "SELECT count(DISTINCT worker) FROM evaluations WHERE started_at > $1",
                    instant
                );
                workers >= 2
            },
        )
        .await;
        let (total, other): (i64, i64) = sqlx::query!(
            r#"SELECT count(*) AS "total!",
                      count(*) FILTER (WHERE rules_version IS DISTINCT FROM $2) AS "other!"
               FROM evaluations WHERE started_at > $1"#,
            instant,
            version
        )
        .fetch_one(&self.app.pool)
        .await
        .map(|row| (row.total, row.other))
        .unwrap();
        assert_eq!(
            other, 0,
            "{other} of {total} evaluations after the instant carry another version"
        );
    }

    async fn stop(mut self) {
        for member in &mut self.members {
            member.child.start_kill().ok();
            member.child.wait().await.ok();
        }
        self.app.stop().await;
    }
}

fn worker(app: &TestApp, name: &str) -> Member {
    let metrics = free_address();
    Member {
        name: name.to_owned(),
        child: app.spawn_worker_process(name, Some(metrics)),
        probe: format!("http://{metrics}/metrics"),
    }
}

async fn post(app: &TestApp, url: &str, body: Value) -> (u16, Value) {
    let response = app.client.post(url).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Events a load request carries.
const BATCH: u64 = 50;

/// Sends flags, in turn through each API, until `stop`: [`BATCH`] events a request, a request
/// every 10 ms or so, over 1000 posts.
async fn load(
    client: reqwest::Client,
    apis: Vec<String>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let events: Vec<Value> = (0..BATCH)
            .map(|i| {
                n += 1;
                event(
                    &format!("e{n}"),
                    &format!("post:{}", (n * 7 + i) % 1000),
                    "flag",
                )
            })
            .collect();
        let api = &apis[(n / BATCH) as usize % apis.len()];
        let response = client
            .post(format!("{api}/v1/events"))
            .json(&events)
            .send()
            .await
            .unwrap();
        // A 503 (shed under load) is retried with new ids, as a sender would retry.
        match response.status().as_u16() {
            202 => {
                sent.fetch_add(BATCH, Ordering::Relaxed);
            }
            503 => {}
            other => panic!("ingest answered {other}"),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_runs_the_active_rules_version_within_two_seconds() {
    let app = spawn_app(
        TestOptions {
            rules: Some(quiesce::rules::RuleSet::from_toml(&rules_named("v1")).unwrap()),
            ..TestOptions::idle()
        }
        .with(|s| {
            s.schedule.debounce_window = Duration::from_millis(50);
            s.schedule.max_wait = Duration::from_millis(500);
            s.moderation.rules_poll_interval = POLL;
        }),
    )
    .await;
    let fleet = Fleet::start(app).await;
    let (stop, sent) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let sender = tokio::spawn(load(
        fleet.app.client.clone(),
        fleet.apis.clone(),
        Arc::clone(&stop),
        Arc::clone(&sent),
    ));
    wait_for(
        Duration::from_secs(30),
        "evaluations under load",
        || async { fleet.app.count_evaluations().await >= 50 },
    )
    .await;

    // A publish through one serve process, then a rollback through the other.
    let published = fleet.roll_out("publish", fleet.publish(0, "v2")).await;
    let rolled_back = fleet
        .roll_out("rollback", async {
            let (status, body) = post(
                &fleet.app,
                &format!("{}/v1/rules/versions/1/activate", fleet.apis[1]),
                json!({"message": "back to v1"}),
            )
            .await;
            assert_eq!(status, 200, "{body}");
            1
        })
        .await;

    // A process started while a version is published runs the newest one.
    let mut fleet = fleet;
    let spawned = Instant::now();
    fleet.members.push(worker(&fleet.app, "worker-late"));
    let newest = fleet.publish(1, "v3").await;
    let published_after = spawned.elapsed();
    fleet.wait_all_at(newest, Duration::from_secs(30)).await;
    fleet.evaluations_after_carry(Utc::now(), newest).await;
    println!(
        "a worker started {} ms before the publish of version {newest} ran it {} ms after its start",
        published_after.as_millis(),
        spawned.elapsed().as_millis()
    );
    let mut late = fleet.members.pop().unwrap();
    late.child.start_kill().unwrap();
    late.child.wait().await.unwrap();

    // The listeners' connections terminated: the next publish still arrives, through the
    // listeners' reconnection or the poll.
    let terminated: i64 = scalar!(
        fleet.app,
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND query ILIKE 'LISTEN%') t"
    );
    assert!(terminated >= 5, "{terminated} listeners terminated");
    let after_drop = fleet.publish(0, "v4").await;
    let started = Instant::now();
    fleet.wait_all_at(after_drop, POLL + REACH).await;
    fleet.evaluations_after_carry(Utc::now(), after_drop).await;
    println!(
        "after {terminated} listeners were terminated, version {after_drop} reached all in {} ms",
        started.elapsed().as_millis()
    );
    // A version made active with no notification at all: only the poll can find it.
    let silent = 5;
    let text = rules_named("v5");
    sqlx::query!(
        "WITH v AS (INSERT INTO rules_versions (version, text, hash, author, message)
                    VALUES ($1, $2, $3, 'test', 'no notification') RETURNING version)
         INSERT INTO rules_activations (version, kind, author, message)
         SELECT version, 'publish', 'test', 'no notification' FROM v",
        silent,
        &text,
        quiesce::active_rules::hash(&text)
    )
    .execute(&fleet.app.pool)
    .await
    .unwrap();
    let started = Instant::now();
    fleet.wait_all_at(silent, POLL + REACH).await;
    fleet.evaluations_after_carry(Utc::now(), silent).await;
    println!(
        "version {silent}, activated without a notification, reached all by their poll ({} ms poll) in {} ms",
        POLL.as_millis(),
        started.elapsed().as_millis()
    );

    stop.store(true, Ordering::Relaxed);
    sender.await.unwrap();

    // No evaluation mixes versions: every rule it names is one of its version's.
    let rows: Vec<(Option<i64>, Value)> =
        sqlx::query!("SELECT rules_version, decisions FROM evaluations")
            .fetch_all(&fleet.app.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|row| (row.rules_version, row.decisions))
            .collect();
    let name_of = |version: i64| match version {
        1 => "v1",
        2 => "v2",
        3 => "v3",
        4 => "v4",
        _ => "v5",
    };
    let mut by_version: BTreeMap<i64, usize> = BTreeMap::new();
    for (version, decisions) in &rows {
        let version = version.expect("every evaluation carries a rules version");
        *by_version.entry(version).or_default() += 1;
        let allowed: BTreeSet<String> = [
            format!("flag_{}", name_of(version)),
            format!("shadow_{}", name_of(version)),
        ]
        .into();
        for list in ["matched", "shadow"] {
            for decision in decisions[list].as_array().into_iter().flatten() {
                let rule = decision["rule"].as_str().unwrap();
                assert!(
                    allowed.contains(rule),
                    "an evaluation of version {version} names rule {rule}"
                );
            }
        }
    }
    let actions_without: i64 = scalar!(
        fleet.app,
        "SELECT count(*) FROM actions WHERE rules_version IS NULL"
    );
    assert_eq!(actions_without, 0, "every action carries its rules version");
    println!(
        "{} events sent; evaluations by rules version: {by_version:?}; publish {} ms, rollback {} ms",
        sent.load(Ordering::Relaxed),
        published.as_millis(),
        rolled_back.as_millis()
    );
    fleet.stop().await;
}
