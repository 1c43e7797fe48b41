//! Cluster suite (`make cluster`): quiesce on a real Redis Cluster of 3 masters and 3 replicas
//! (scripts/dev/redis-cluster.sh). A master SIGKILLed under load fails over to its replica, slots
//! move between masters under load, a shard count changes under load, and serve and worker
//! processes share the cluster; afterwards Postgres accounts for every event (tests/support/load.rs).
//! Each test prints its figures on a `cluster ...:` line.

#[path = "../api/helpers/mod.rs"]
#[allow(dead_code)]
mod helpers;
#[path = "../support/load.rs"]
#[allow(dead_code)]
mod load;
#[path = "../api/proxy.rs"]
#[allow(dead_code)]
mod proxy;
#[path = "../support/secrets.rs"]
mod secrets;

use std::{
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use crate::helpers::scalar;
use helpers::{TestApp, TestOptions, spawn_app, wait_for};
use load::{Tally, check_accounting, deliver_to, run_load, run_load_via};
use quiesce::loadgen::{self, LoadConfig, Scenario};
use secrecy::ExposeSecret;

fn cluster_url() -> String {
    std::env::var("QUIESCE_CLUSTER_URL")
        .expect("QUIESCE_CLUSTER_URL names the cluster: run the suite with make cluster")
}

/// The first of the cluster's six ports (scripts/dev/redis-cluster.sh).
fn first_port() -> u16 {
    std::env::var("QUIESCE_CLUSTER_PORT").map_or(7101, |p| p.parse().expect("a port"))
}

/// Runs scripts/dev/redis-cluster.sh with `args`; its standard output.
async fn cluster(args: &[&str]) -> String {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dev/redis-cluster.sh");
    let output = tokio::process::Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .await
        .expect("run redis-cluster.sh");
    assert!(
        output.status.success(),
        "redis-cluster.sh {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// One line of CLUSTER NODES.
#[derive(Debug, Clone)]
struct Node {
    port: u16,
    id: String,
    master: bool,
    failed: bool,
    slots: usize,
}

/// The cluster as a live node sees it.
async fn nodes() -> Vec<Node> {
    for port in first_port()..first_port() + 6 {
        let Ok(output) = tokio::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "cluster", "nodes"])
            .output()
            .await
        else {
            continue;
        };
        let text = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() || !text.contains("myself") {
            continue;
        }
        return text
            .lines()
            .map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let port = fields[1]
                    .split('@')
                    .next()
                    .and_then(|a| a.rsplit(':').next())
                    .and_then(|p| p.parse().ok())
                    .expect("a node address");
                let slots = fields[8..]
                    .iter()
                    .filter(|s| !s.starts_with('['))
                    .map(|range| match range.split_once('-') {
                        Some((a, b)) => {
                            b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1
                        }
                        None => 1,
                    })
                    .sum();
                Node {
                    port,
                    id: fields[0].to_owned(),
                    master: fields[2].contains("master"),
                    failed: fields[2].contains("fail"),
                    slots,
                }
            })
            .collect();
    }
    panic!("no cluster node answers CLUSTER NODES");
}

/// The live masters that serve slots, most slots first.
async fn masters() -> Vec<Node> {
    let mut masters: Vec<Node> = nodes()
        .await
        .into_iter()
        .filter(|n| n.master && !n.failed && n.slots > 0)
        .collect();
    masters.sort_by_key(|n| std::cmp::Reverse(n.slots));
    masters
}

async fn cluster_app(options: TestOptions) -> TestApp {
    // Every test starts on a cluster whose nodes agree and serve every slot, whatever the test
    // before it killed or moved.
    cluster(&["heal"]).await;
    spawn_app(options.with(|s| {
        s.redis.redis_url = cluster_url().into();
        // The default count, so the schedule spreads over the masters.
        s.redis.shards = quiesce::settings::Redis::default().shards;
    }))
    .await
}

/// Settings for a run under disruption: short windows, a repair sweep every second.
fn disrupted() -> TestOptions {
    TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(200);
        s.schedule.max_wait = Duration::from_secs(2);
        s.worker.lease = Duration::from_secs(2);
        s.schedule.max_attempts = 1000;
        s.database.backend_timeout = Duration::from_secs(1);
        s.maintenance.sweep_grace = Duration::from_secs(1);
        s.maintenance.sweep_interval = Duration::from_secs(1);
    })
}

/// What the report lines need, read from Postgres after the run settled.
async fn report(app: &TestApp, what: &str, recorded: u64, extra: &str) {
    let counted = app.count_events().await;
    let actions = app.count_actions().await;
    let duplicates = app.count_duplicate_actions().await;
    let not_evaluated = app.count_stale_entities().await;
    let evaluations = app.count_evaluations().await;
    eprintln!(
        "cluster {what}: {recorded} events accepted, {counted} counted, {evaluations} evaluations, \
         {actions} actions, {duplicates} duplicate actions, {not_evaluated} entities not evaluated after \
         their last event{extra}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "cluster suite: make cluster"]
async fn a_master_killed_under_load_fails_over_and_nothing_is_lost_or_applied_twice() {
    let options = disrupted();
    let max_wait = options.settings.schedule.max_wait;
    let sweep =
        options.settings.maintenance.sweep_interval + options.settings.maintenance.sweep_grace;
    let app = cluster_app(options).await;
    let workers: Vec<_> = (0..3)
        .map(|i| app.spawn_worker_process(&format!("failover-{i}"), None))
        .collect();
    let victim = masters().await.remove(0);
    let tally = Tally::default();

    let load = run_load(&app, "failover", 30, 1000, 1000, &tally);
    let chaos = async {
        wait_for(Duration::from_secs(60), "events to flow", || async {
            app.count_events().await >= 3000
        })
        .await;
        // A replica that has not finished its first sync cannot take over.
        cluster(&["wait-synced"]).await;
        cluster(&["kill", &victim.port.to_string()]).await;
        let killed = Instant::now();
        // Until a replica serves the killed master's slots (the survivors still call the
        // cluster ok for a node timeout after the kill).
        wait_for(
            Duration::from_secs(30),
            "a replica to take the killed master's slots",
            || async {
                let live = masters().await;
                live.len() == 3 && live.iter().all(|m| m.port != victim.port)
            },
        )
        .await;
        cluster(&["wait-ok"]).await;
        (killed, killed.elapsed())
    };
    let (accepted, (killed, failover)) = tokio::join!(load, chaos);
    // Each event was recorded once: accepted, or found recorded by the sender's retry of a
    // request answered 503 after its commit.
    let recorded = accepted + tally.duplicates.load(Ordering::Relaxed);
    assert_eq!(recorded, 30_000);
    let promoted = masters().await;
    assert_eq!(
        promoted.len(),
        3,
        "a replica took the killed master's slots: {promoted:?}"
    );
    assert!(promoted.iter().all(|m| m.port != victim.port));

    // Every entity is evaluated after its last event within max wait + the failover + the
    // repair sweep (its interval and grace), plus room for a loaded machine.
    let load_ended = Instant::now();
    let bound = max_wait + failover + sweep + Duration::from_secs(15);
    app.wait_settled(bound).await;
    let recovered = killed.elapsed();
    let settled_after_load = load_ended.elapsed();
    check_accounting(&app, recorded).await;

    cluster(&["restart", &victim.port.to_string()]).await;
    wait_for(
        Duration::from_secs(30),
        "the killed node to rejoin as a replica",
        || async { cluster(&["role", &victim.port.to_string()]).await.trim() == "slave" },
    )
    .await;
    report(
        &app,
        "failover",
        recorded,
        &format!(
            "; master :{} killed, slots served again after {failover:.1?}, every entity settled \
             {recovered:.1?} after the kill ({settled_after_load:.1?} after the last event), \
             {} 503s retried ({} events of them found recorded on retry); the node rejoined as a replica",
            victim.port,
            tally.unavailable.load(Ordering::Relaxed),
            tally.duplicates.load(Ordering::Relaxed),
        ),
    )
    .await;
    drop(workers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "cluster suite: make cluster"]
async fn slots_moved_between_masters_under_load_lose_and_duplicate_nothing() {
    let app = cluster_app(disrupted()).await;
    let workers: Vec<_> = (0..3)
        .map(|i| app.spawn_worker_process(&format!("reshard-{i}"), None))
        .collect();
    let masters = masters().await;
    let (from, to) = (&masters[0], &masters[masters.len() - 1]);
    let tally = Tally::default();

    let load = run_load(&app, "reshard", 30, 1000, 1000, &tally);
    let reshard = async {
        wait_for(Duration::from_secs(60), "events to flow", || async {
            app.count_events().await >= 3000
        })
        .await;
        let started = Instant::now();
        let output = tokio::process::Command::new("redis-cli")
            .args([
                "--cluster",
                "reshard",
                &format!("127.0.0.1:{}", from.port),
                "--cluster-from",
                &from.id,
                "--cluster-to",
                &to.id,
                "--cluster-slots",
                "2000",
                "--cluster-yes",
                "--cluster-pipeline",
                "100",
            ])
            .output()
            .await
            .expect("redis-cli --cluster reshard");
        assert!(
            output.status.success(),
            "reshard failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let moved_in = started.elapsed();
        // Until every node, replicas included, knows where the slots went (a replica promoted
        // before it heard would leave a slot unserved).
        wait_for(
            Duration::from_secs(30),
            "the nodes to agree on the moved slots",
            || async {
                tokio::process::Command::new("bash")
                    .arg(
                        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                            .join("scripts/dev/redis-cluster.sh"),
                    )
                    .arg("check")
                    .status()
                    .await
                    .is_ok_and(|s| s.success())
            },
        )
        .await;
        moved_in
    };
    let (accepted, moved_in) = tokio::join!(load, reshard);
    let recorded = accepted + tally.duplicates.load(Ordering::Relaxed);
    assert_eq!(recorded, 30_000);
    let after = crate::masters().await;
    let moved_to = after.iter().find(|m| m.id == to.id).unwrap();
    assert_eq!(
        moved_to.slots,
        to.slots + 2000,
        "2000 slots moved: {after:?}"
    );

    let load_ended = Instant::now();
    app.wait_settled(Duration::from_secs(60)).await;
    check_accounting(&app, recorded).await;
    report(
        &app,
        "reshard",
        recorded,
        &format!(
            "; 2000 slots moved from :{} to :{} in {moved_in:.1?} under load, settled {:.1?} after \
             the last event, {} 503s retried",
            from.port,
            to.port,
            load_ended.elapsed(),
            tally.unavailable.load(Ordering::Relaxed),
        ),
    )
    .await;
    drop(workers);
}

/// Until the API process at `address` answers its health check.
async fn wait_answering(address: std::net::SocketAddr) {
    let client = reqwest::Client::new();
    wait_for(
        Duration::from_secs(30),
        "a serve process to answer",
        || async {
            client
                .get(format!("http://{address}/healthz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        },
    )
    .await;
}

/// A free loopback port for a process to listen on.
fn free_address() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "cluster suite: make cluster"]
async fn two_serve_and_three_worker_processes_share_the_cluster_and_the_load_generator_finds_no_fault()
 {
    let app = cluster_app(TestOptions::idle().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(1500);
        s.schedule.max_wait = Duration::from_secs(20);
    }))
    .await;
    let addresses = [free_address(), free_address()];
    let serves: Vec<_> = addresses
        .iter()
        .enumerate()
        .map(|(i, address)| app.spawn_serve_process(&format!("serve-{i}"), *address))
        .collect();
    let workers: Vec<_> = (0..3)
        .map(|i| app.spawn_worker_process(&format!("shared-{i}"), None))
        .collect();
    for address in addresses {
        wait_answering(address).await;
    }
    // One load generator per API process, each with its own entities, checked on its own.
    let runs = addresses.iter().enumerate().map(|(i, address)| {
        loadgen::run(LoadConfig {
            url: format!("http://{address}"),
            scenario: Scenario::Burst,
            events: 6000,
            entities: 300,
            rate: None,
            send_for: None,
            pause: Duration::ZERO,
            batch: 50,
            connections: 8,
            token: None,
            secret: None,
            source: None,
            database_url: Some(
                app.settings
                    .database
                    .database_url
                    .expose_secret()
                    .to_owned(),
            ),
            drain_timeout: Duration::from_secs(90),
            window: app.settings.schedule.debounce_window,
            run_id: format!(
                "shared{i}{}",
                &uuid::Uuid::new_v4().simple().to_string()[..6]
            ),
            rules: Arc::new(quiesce::rules::RuleSet::default_rules()),
            seed: 11 + i as u64,
            progress: false,
            attributes: false,
            duplicates: 0.0,
        })
    });
    let reports = futures::future::try_join_all(runs).await.unwrap();
    let mut lines = Vec::new();
    for report in reports {
        assert_eq!(report.events_accepted, 6000);
        assert!(
            report.errors_by_status.is_empty(),
            "{:?}",
            report.errors_by_status
        );
        let drain = report.drain.unwrap();
        assert!(drain.drained);
        assert_eq!(drain.entities, 300);
        assert_eq!(
            drain.evaluations, 300,
            "one evaluation per entity across five processes"
        );
        assert_eq!(drain.actions, drain.expected_actions);
        assert_eq!(drain.wrong_actions, 0);
        assert_eq!(drain.duplicate_actions, 0);
        lines.push(format!(
            "{} evaluations for {} entities, {}/{} actions right",
            drain.evaluations, drain.entities, drain.actions, drain.expected_actions
        ));
    }
    // Every process took part in the evaluations.
    let by_worker = scalar!(app, "SELECT count(DISTINCT worker) FROM evaluations");
    eprintln!(
        "cluster processes: 2 serve + 3 worker processes, 12000 events; {}; evaluations by {by_worker} processes",
        lines.join("; ")
    );
    drop((serves, workers));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "cluster suite: make cluster"]
async fn the_shard_count_changes_under_load_with_old_and_new_processes_side_by_side() {
    // A window longer than the steady stream's gaps, so that only max wait fires it.
    let options = disrupted().with(|s| {
        s.schedule.debounce_window = Duration::from_secs(1);
        s.schedule.max_wait = Duration::from_millis(2500);
    });
    let max_wait = options.settings.schedule.max_wait;
    let app = cluster_app(options).await;
    let old_count = app.settings.redis.shards;
    let new_count = old_count / 2;
    let changed = [
        ("QUIESCE_SHARDS", new_count.to_string()),
        ("QUIESCE_PREVIOUS_SHARDS", old_count.to_string()),
    ];
    let old_workers: Vec<_> = (0..2)
        .map(|i| app.spawn_worker_process(&format!("old-{i}"), None))
        .collect();
    let new_address = free_address();
    let new_base = format!("http://{new_address}");
    let tally = Tally::default();
    let steady = std::sync::atomic::AtomicBool::new(true);
    let bases = std::sync::Mutex::new(vec![app.base.clone()]);

    // One entity hears an event every 100 ms or so throughout: its window never closes, so
    // only its max-wait anchor makes it due, before, during and after the change.
    let stream = async {
        let mut sent = 0u64;
        while steady.load(Ordering::Relaxed) {
            let base = {
                let bases = bases.lock().unwrap();
                bases[sent as usize % bases.len()].clone()
            };
            let body = serde_json::json!([helpers::event(
                &format!("steady-{sent}"),
                "post:steady",
                "upvote"
            )]);
            sent += deliver_to(&app, &base, &body, &tally).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sent
    };
    // Each phase lasts at least a few max waits, whatever the machine's pace.
    let phase = max_wait * 2;
    let change = async {
        let started = tokio::time::Instant::now();
        let before = run_load(&app, "before", 10, 1000, 1000, &tally).await;
        tokio::time::sleep_until(started + phase).await;
        // The rollout: processes with the new count come up beside the old ones.
        let new_serve = app
            .serve_command("new-serve", new_address)
            .envs(changed.clone())
            .spawn()
            .expect("start the new serve process");
        let new_workers: Vec<_> = (0..2)
            .map(|i| {
                app.worker_command(&format!("new-{i}"), None)
                    .envs(changed.clone())
                    .spawn()
                    .expect("start a new worker process")
            })
            .collect();
        wait_answering(new_address).await;
        bases.lock().unwrap().push(new_base.clone());
        let both = [app.base.clone(), new_base.clone()];
        let started = tokio::time::Instant::now();
        let during = run_load_via(&app, &both, "during", 10, 1000, 1000, &tally).await;
        tokio::time::sleep_until(started + phase).await;
        // The old worker processes stop; only the new API takes events from here on.
        drop(old_workers);
        *bases.lock().unwrap() = vec![new_base.clone()];
        let started = tokio::time::Instant::now();
        let after = run_load_via(
            &app,
            std::slice::from_ref(&new_base),
            "after",
            10,
            1000,
            1000,
            &tally,
        )
        .await;
        tokio::time::sleep_until(started + phase).await;
        steady.store(false, Ordering::Relaxed);
        (before + during + after, new_serve, new_workers)
    };
    let (steady_accepted, (accepted, new_serve, new_workers)) = tokio::join!(stream, change);
    // Each event was recorded once: accepted, or found recorded by a retry.
    let recorded = accepted + steady_accepted + tally.duplicates.load(Ordering::Relaxed);

    let load_ended = Instant::now();
    app.wait_settled(Duration::from_secs(60)).await;
    check_accounting(&app, recorded).await;
    // The old layout drains to nothing, as `quiesce shards` on a new process reports.
    let changed: Vec<(&str, &str)> = changed.iter().map(|(k, v)| (*k, v.as_str())).collect();
    wait_for(
        Duration::from_secs(60),
        "the old layout to be empty",
        || async {
            app.run_cli_with(&["shards"], &changed)
                .await
                .contains(&format!("the {old_count} shards drained are empty"))
        },
    )
    .await;
    // The steady entity kept its max-wait anchor through the change: each time it fell due
    // no later than max wait after the first of its events recorded after its previous claim
    // (that event's schedule set the anchor; the 1 s beside max wait covers its group commit
    // and schedule under this load). A lost anchor would push its due time on with every
    // event, past the bound. Measured from the event, not from the claim: the stream's own
    // gaps (a send that waits on a loaded server) are the sender's pace, not the schedule's.
    // (When it is evaluated after falling due is the workers' pace, not the schedule's.)
    let steady_evaluations = app.evaluation_count("post:steady").await;
    assert!(
        steady_evaluations >= 3,
        "post:steady evaluated {steady_evaluations} times"
    );
    let (gap_ms, claim_gap_ms, stream_gap_ms): (i64, i64, i64) = sqlx::query!(
        r#"WITH claims AS (
             SELECT due_at, lag(started_at) OVER (ORDER BY started_at) AS previous_start
             FROM evaluations WHERE entity = 'post:steady'),
         anchored AS (
             SELECT due_at, previous_start,
                    (SELECT min(received_at) FROM events
                     WHERE entity = 'post:steady' AND received_at >= c.previous_start) AS anchor_event
             FROM claims c WHERE previous_start IS NOT NULL),
         stream AS (
             SELECT received_at - lag(received_at) OVER (ORDER BY received_at) AS gap
             FROM events WHERE entity = 'post:steady')
         SELECT (1000 * extract(epoch FROM max(due_at - anchor_event)))::bigint AS "gap!",
                (1000 * extract(epoch FROM max(due_at - previous_start)))::bigint AS "claim_gap!",
                (SELECT (1000 * extract(epoch FROM max(gap)))::bigint FROM stream) AS "stream_gap!"
         FROM anchored"#,
    )
    .fetch_one(&app.pool)
    .await
    .map(|row| (row.gap, row.claim_gap, row.stream_gap))
    .expect("post:steady's due times");
    let bound = max_wait + Duration::from_secs(1);
    assert!(
        gap_ms < bound.as_millis() as i64,
        "post:steady fell due {gap_ms} ms after the first event recorded after its previous claim \
         (max wait {max_wait:?}; {claim_gap_ms} ms after the claim; the stream's largest gap between \
         two recorded events {stream_gap_ms} ms)"
    );
    report(
        &app,
        "shard change",
        recorded,
        &format!(
            "; {old_count} -> {new_count} shards with old and new processes side by side, settled \
             {:.1?} after the last event, the old layout empty; post:steady evaluated {steady_evaluations} times, due at most {gap_ms} ms \
             after the first event after its previous claim ({claim_gap_ms} ms after the claim, the stream's \
             largest gap {stream_gap_ms} ms; max wait {max_wait:?}); {} 503s retried",
            load_ended.elapsed(),
            tally.unavailable.load(Ordering::Relaxed),
        ),
    )
    .await;
    drop((new_serve, new_workers));
}

/// 20 entities whose shards the master at `victim` serves, and 20 whose shards it does not.
async fn entities_by_master(app: &TestApp, victim: u16) -> (Vec<String>, Vec<String>) {
    let keys = app.backends.queue.keys();
    let mut master_of_shard = std::collections::HashMap::new();
    let (mut on_victim, mut elsewhere) = (Vec::new(), Vec::new());
    for i in 0..2_000 {
        let entity = format!("post:m{i}");
        let shard = keys.shard_of(&quiesce::domain::EntityId::parse(&entity).unwrap());
        let port = match master_of_shard.get(&shard) {
            Some(port) => *port,
            None => {
                // The master of the shard's hash tag.
                let due = keys.for_shard(shard).due();
                let tag = &due[due.find('{').unwrap() + 1..due.find('}').unwrap()];
                let port = master_of_slot(quiesce::queue::slot_of(tag)).await;
                master_of_shard.insert(shard, port);
                port
            }
        };
        match port == victim {
            true if on_victim.len() < 20 => on_victim.push(entity),
            false if elsewhere.len() < 20 => elsewhere.push(entity),
            _ => {}
        }
    }
    assert_eq!((on_victim.len(), elsewhere.len()), (20, 20));
    (on_victim, elsewhere)
}

/// Posts one event for each entity, all at once (so that group commits mix the shards of
/// every master); each entity's answer.
async fn post_at_once(app: &TestApp, entities: &[String]) -> Vec<(String, u16)> {
    let requests = entities.iter().map(|entity| async move {
        let status = app
            .post_events(&helpers::event(&format!("e-{entity}"), entity, "flag"))
            .await
            .status()
            .as_u16();
        (entity.clone(), status)
    });
    futures::future::join_all(requests).await
}

/// Once the cluster is whole again, every entity is evaluated after its last event: the
/// repair sweep schedules what the failed requests could not. (An evaluation whose ack met the
/// lost master is made again once its lease ends, which the version fence makes harmless, so
/// the count of evaluations is returned, not held to one each.)
async fn every_entity_evaluated(app: &TestApp, entities: i64) -> i64 {
    cluster(&["wait-ok"]).await;
    wait_for(
        Duration::from_secs(60),
        "every entity to be evaluated after its last event",
        || async {
            scalar!(
                app,
                "SELECT count(*) FROM entities WHERE last_evaluated_at >= last_event_at"
            ) == entities
        },
    )
    .await;
    app.count_evaluations().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "cluster suite: make cluster"]
async fn a_hung_master_fails_only_the_requests_whose_entities_it_serves() {
    // A backend timeout the 40 requests' group commits fit in, one wave of them.
    let app = cluster_app(disrupted().with(|s| {
        s.database.backend_timeout = Duration::from_secs(3);
        s.maintenance.sweep_grace = Duration::from_secs(3);
    }))
    .await;
    let worker = app.spawn_worker_process("hung-master", None);
    let victim = masters().await.remove(0).port;
    let (on_victim, elsewhere) = entities_by_master(&app, victim).await;
    // Scripts in every master's cache first: the client loads a missing one on every master
    // at once, which a hung one would hold up for all (a fresh cluster has none).
    let warm: Vec<String> = (0..40).map(|i| format!("post:warm{i}")).collect();
    for (entity, status) in post_at_once(&app, &warm).await {
        assert_eq!(status, 202, "{entity}");
    }

    cluster(&["wait-synced"]).await;
    cluster(&["pause", &victim.to_string()]).await;
    let paused = Instant::now();
    let answers = post_at_once(&app, &[on_victim.clone(), elsewhere].concat()).await;
    let answered = paused.elapsed();
    // Resumed before the checks, so that a failed one leaves no node hung.
    cluster(&["resume", &victim.to_string()]).await;
    for (entity, status) in &answers {
        let expected = if on_victim.contains(entity) { 503 } else { 202 };
        assert_eq!(*status, expected, "{entity}: {answers:?}");
    }
    // Every event is durable, the failed requests' too.
    assert_eq!(app.count_events().await, 80);
    let evaluations = every_entity_evaluated(&app, 80).await;
    eprintln!(
        "cluster hung master: master :{victim} paused (SIGSTOP); 40 requests answered \
         {answered:.1?} after: the 20 on its shards 503, the 20 on the others 202; all 80 \
         entities (40 warm-up) evaluated after their last event {:.1?} after the pause, \
         {evaluations} evaluations",
        paused.elapsed()
    );
    drop(worker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "cluster suite: make cluster"]
async fn a_killed_masters_failed_requests_are_durable_and_the_sweep_schedules_them() {
    let app = cluster_app(disrupted()).await;
    let worker = app.spawn_worker_process("killed-master", None);
    let victim = masters().await.remove(0).port;
    let (on_victim, elsewhere) = entities_by_master(&app, victim).await;

    cluster(&["wait-synced"]).await;
    cluster(&["kill", &victim.to_string()]).await;
    let killed = Instant::now();
    let answers = post_at_once(&app, &[on_victim.clone(), elsewhere].concat()).await;
    let answered = killed.elapsed();
    assert!(
        answers
            .iter()
            .all(|(_, status)| [202, 503].contains(status)),
        "{answers:?}"
    );
    let failed = |on: bool| {
        answers
            .iter()
            .filter(|(entity, status)| *status == 503 && on_victim.contains(entity) == on)
            .count()
    };
    // Every event is durable, the failed requests' too, and no entity is left unscheduled.
    assert_eq!(app.count_events().await, 40);
    wait_for(
        Duration::from_secs(30),
        "a replica to take the killed master's slots",
        || async {
            let live = masters().await;
            live.len() == 3 && live.iter().all(|m| m.port != victim)
        },
    )
    .await;
    let evaluations = every_entity_evaluated(&app, 40).await;
    let settled = killed.elapsed();
    cluster(&["restart", &victim.to_string()]).await;
    wait_for(
        Duration::from_secs(30),
        "the killed node to rejoin as a replica",
        || async { cluster(&["role", &victim.to_string()]).await.trim() == "slave" },
    )
    .await;
    // While the client reconnects after the kill, requests to the live masters wait too (the
    // redis crate's cluster connection): their 503s are reported, not asserted.
    eprintln!(
        "cluster killed master: master :{victim} killed; 40 requests answered {answered:.1?} \
         after: 503 for {} of the 20 on its shards and {} of the 20 on the others; every \
         entity evaluated after its last event {settled:.1?} after the kill, {evaluations} \
         evaluations",
        failed(true),
        failed(false),
    );
    drop(worker);
}

/// The port of the master serving `slot`, as a live node sees it.
async fn master_of_slot(slot: u16) -> u16 {
    for port in first_port()..first_port() + 6 {
        let Ok(output) = tokio::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "cluster", "shards"])
            .output()
            .await
        else {
            continue;
        };
        if !output.status.success() {
            continue;
        }
        // CLUSTER SHARDS, one field per line: slots (pairs), then nodes with port and role.
        let text = String::from_utf8_lossy(&output.stdout);
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        let mut i = 0;
        while i < lines.len() {
            if lines[i] == "slots" {
                let mut ranges = Vec::new();
                let mut j = i + 1;
                while j + 1 < lines.len() && lines[j] != "nodes" {
                    if let (Ok(a), Ok(b)) = (lines[j].parse::<u16>(), lines[j + 1].parse::<u16>()) {
                        ranges.push((a, b));
                        j += 2;
                    } else {
                        j += 1;
                    }
                }
                let serves = ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot));
                // The shard's nodes, each a run of fields from "id": the online master.
                let mut k = j;
                let (mut port, mut master) = (None, false);
                while k + 1 < lines.len() && lines[k] != "slots" {
                    match lines[k] {
                        "id" => (port, master) = (None, false),
                        "port" => port = lines[k + 1].parse::<u16>().ok(),
                        "role" => master = lines[k + 1] == "master",
                        "health" if serves && master && lines[k + 1] == "online" => {
                            return port.expect("a port before the health");
                        }
                        _ => {}
                    }
                    k += 1;
                }
                i = k;
            } else {
                i += 1;
            }
        }
    }
    panic!("no live node names the master of slot {slot}");
}

/// How many subscribers the node at `port` has for `channel`.
async fn subscribers(port: u16, channel: &str) -> i64 {
    let output = tokio::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "pubsub", "numsub", channel])
        .output()
        .await
        .expect("redis-cli pubsub numsub");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .nth(1)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "cluster suite: make cluster"]
async fn wake_ups_come_back_after_the_master_of_the_wake_channel_fails_over() {
    let app = cluster_app(
        TestOptions::idle().with(|s| s.schedule.debounce_window = Duration::from_millis(300)),
    )
    .await;
    let channel = app.backends.queue.keys().index().wake_channel();
    let evaluated = |entity: &'static str| {
        let app = &app;
        move || async move { app.evaluation_count(entity).await >= 1 }
    };
    let critical = |entity: &str| {
        serde_json::json!([{
            "id": format!("{entity}-1"), "entity": entity, "type": "flag",
            "actor": "user:1", "priority": "critical"
        }])
    };
    // A worker process that polls every ten minutes: only wake-ups bring it work on time.
    let worker = app
        .worker_command("sleeper", None)
        .env("QUIESCE_POLL_INTERVAL", "10m")
        .spawn()
        .expect("start quiesce worker");
    app.send(&critical("post:first")).await;
    wait_for(
        Duration::from_secs(30),
        "the first evaluation",
        evaluated("post:first"),
    )
    .await;

    // The master the wake channel lives on dies; its replica takes over.
    let keyslot = tokio::process::Command::new("redis-cli")
        .args([
            "-p",
            &first_port().to_string(),
            "cluster",
            "keyslot",
            &channel,
        ])
        .output()
        .await
        .expect("redis-cli cluster keyslot");
    let slot: u16 = String::from_utf8_lossy(&keyslot.stdout)
        .trim()
        .parse()
        .unwrap();
    let victim = master_of_slot(slot).await;
    cluster(&["wait-synced"]).await;
    cluster(&["kill", &victim.to_string()]).await;
    let killed = Instant::now();
    wait_for(
        Duration::from_secs(30),
        "a replica to take the slots",
        || async {
            let live = masters().await;
            live.len() == 3 && live.iter().all(|m| m.port != victim)
        },
    )
    .await;
    cluster(&["wait-ok"]).await;
    let promoted = master_of_slot(slot).await;
    // The process notices its subscription went quiet and subscribes on the new master.
    wait_for(
        Duration::from_secs(60),
        "the wake channel subscribed again",
        || async { subscribers(promoted, &channel).await >= 1 },
    )
    .await;
    let resubscribed = killed.elapsed();
    let sent = Instant::now();
    app.send(&critical("post:after-failover")).await;
    wait_for(
        Duration::from_secs(20),
        "the sleeping process to be woken after the failover",
        evaluated("post:after-failover"),
    )
    .await;
    eprintln!(
        "cluster wake-ups: master :{victim} of the wake channel killed; subscribed again on \
         :{promoted} {resubscribed:.1?} after the kill; a critical event evaluated {:.1?} after \
         it was sent",
        sent.elapsed()
    );
    cluster(&["restart", &victim.to_string()]).await;
    drop(worker);
}
