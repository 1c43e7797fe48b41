//! The dashboards and alerts, checked against a real Prometheus scraping a live quiesce under a
//! generated load: the rule file passes promtool, every panel's and alert's PromQL evaluates and
//! every panel returns data, every metric named in grafana/ is exported, the reversal-rate
//! gauge matches the API, no alert fires under normal load, and each alert fires under the
//! condition it describes (with `for:` shortened). Needs `prometheus` and `promtool` (Debian
//! package prometheus), so `make observability` runs it (and CI), not `make test`.

#[path = "../api/helpers/mod.rs"]
#[allow(dead_code)]
mod helpers;
#[path = "../api/proxy.rs"]
#[allow(dead_code)]
mod proxy;
#[path = "../support/secrets.rs"]
mod secrets;

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use axum::{Router, extract::State, http::StatusCode, routing::post};
use quiesce::{
    actions::{DeliverySettings, Dispatcher},
    rules::{DEFAULT_RULES, RuleSet},
    worker::BeforeApplyHook,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::helpers::scalar;
use crate::{
    helpers::{TestApp, TestOptions, event, spawn_app, wait_for},
    proxy::{TcpProxy, redirect},
};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// Metrics a process exports only where `database_read_url` is set.
const REPLICA_METRICS: [&str; 2] = ["quiesce_replica_in_use", "quiesce_replica_lag_seconds"];
/// What `$__rate_interval` and friends stand for when a panel's query is sent to Prometheus.
const RATE_INTERVAL: &str = "1m";

fn grafana_dir() -> PathBuf {
    Path::new(ROOT).join("grafana")
}

/// Every `(title, expr)` of a dashboard's panels.
fn panel_queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            queries.push((
                panel["title"].as_str().unwrap().to_owned(),
                target["expr"].as_str().unwrap().to_owned(),
            ));
        }
    }
    queries
}

fn dashboards() -> Vec<(String, Value)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(grafana_dir().join("dashboards")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let json: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()));
        found.push((path.display().to_string(), json));
    }
    assert!(found.len() >= 2, "the operations and moderation dashboards");
    found
}

/// Each alert's `runbook_url` annotation, by alert name (the same fixed layout as
/// [`alert_rules`]: the annotation inside the alert's block).
fn runbook_urls(text: &str) -> std::collections::BTreeMap<String, String> {
    let mut urls = std::collections::BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("- alert: ") {
            current = Some(name.to_owned());
        } else if let (Some(url), Some(name)) = (line.strip_prefix("runbook_url: "), &current) {
            urls.insert(name.clone(), url.trim_matches('"').to_owned());
        }
    }
    urls
}

/// The anchor a Markdown renderer gives a heading: lower case, spaces to dashes, punctuation
/// other than dashes and underscores dropped.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The alert rules' `(name, expr)`, read with a tiny YAML walk (the file's layout is fixed:
/// `- alert:` then `expr:` either inline or as a `|` block).
fn alert_rules(text: &str) -> Vec<(String, String)> {
    let mut rules = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        if let Some(name) = lines[i].trim().strip_prefix("- alert: ") {
            let expr_line = lines[i + 1].trim();
            let expr = match expr_line.strip_prefix("expr: ") {
                Some("|") => {
                    let mut block = Vec::new();
                    let mut j = i + 2;
                    while j < lines.len() && lines[j].starts_with("          ") {
                        block.push(lines[j].trim());
                        j += 1;
                    }
                    block.join(" ")
                }
                Some(inline) => inline.to_owned(),
                None => panic!("alert {name}: expr must follow the alert line"),
            };
            rules.push((name.to_owned(), expr));
        }
        i += 1;
    }
    rules
}

fn grafana_substitutions(expr: &str) -> String {
    expr.replace("$__rate_interval", RATE_INTERVAL)
        .replace("$__interval", RATE_INTERVAL)
        .replace("$__range", RATE_INTERVAL)
}

struct Prometheus {
    base: String,
    client: reqwest::Client,
    _process: tokio::process::Child,
    _dir: TempDir,
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` every second, with the alert rules' `for:` cut to
    /// `for_override` so that a test can see them fire.
    async fn start(targets: &[&str], for_override: &str) -> Self {
        let targets = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let dir = std::env::temp_dir().join(format!("quiesce-prom-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let alerts = std::fs::read_to_string(grafana_dir().join("prometheus/alerts.yml")).unwrap();
        let shortened: String = alerts
            .lines()
            .map(|line| match line.trim_start().strip_prefix("for: ") {
                Some(_) => format!(
                    "{}for: {for_override}",
                    &line[..line.len() - line.trim_start().len()]
                ),
                None => line.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(dir.join("alerts.yml"), shortened).unwrap();
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [alerts.yml]\nscrape_configs:\n  - job_name: quiesce\n    static_configs:\n      - targets: [{targets}]\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let process = tokio::process::Command::new(
            std::env::var("PROMETHEUS").unwrap_or_else(|_| "prometheus".into()),
        )
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--log.level=warn")
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus on PATH (Debian package prometheus; make observability installs it)");
        let prometheus = Self {
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
            _process: process,
            _dir: TempDir(dir),
        };
        wait_for(
            Duration::from_secs(30),
            "Prometheus to be ready",
            || async {
                prometheus
                    .client
                    .get(format!("{}/-/ready", prometheus.base))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            },
        )
        .await;
        prometheus
    }

    /// An instant query; `Err` with Prometheus' error for a bad expression.
    async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let reply: Value = self
            .client
            .get(format!("{}/api/v1/query", self.base))
            .query(&[("query", expr)])
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        if reply["status"] != "success" {
            return Err(format!("{}: {}", reply["errorType"], reply["error"]));
        }
        Ok(reply["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    async fn scalar(&self, expr: &str) -> Option<f64> {
        let result = self.query(expr).await.ok()?;
        result.first()?["value"][1].as_str()?.parse().ok()
    }

    /// Active alerts: `(name, state)` with state `pending` or `firing`.
    async fn alerts(&self) -> Vec<(String, String)> {
        let reply: Value = self
            .client
            .get(format!("{}/api/v1/alerts", self.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        reply["data"]["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["labels"]["alertname"].as_str().unwrap().to_owned(),
                    a["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// Whether `alert` is pending or firing.
    async fn raised(&self, alert: &str) -> bool {
        self.alerts().await.iter().any(|(n, _)| n == alert)
    }

    async fn wait_firing(&self, alert: &str) {
        wait_for(
            Duration::from_secs(90),
            &format!("alert {alert} to fire"),
            || async {
                self.alerts()
                    .await
                    .iter()
                    .any(|(n, s)| n == alert && s == "firing")
            },
        )
        .await;
    }
}

/// A webhook receiver whose answers can be switched to failures.
async fn start_receiver(failing: Arc<AtomicBool>) -> SocketAddr {
    async fn receive(State(failing): State<Arc<AtomicBool>>) -> StatusCode {
        if failing.load(Ordering::Relaxed) {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::NO_CONTENT
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = Router::new()
        .route("/hook", post(receive))
        .with_state(failing);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    address
}

/// Entities named `post:poison*` panic in evaluation (dead-lettered after two attempts);
/// `post:slow*` hold their worker for a while (so others queue up behind them).
fn hook() -> BeforeApplyHook {
    Arc::new(|snapshot| {
        Box::pin(async move {
            let entity = snapshot.entity.as_str().to_owned();
            if entity.starts_with("post:poison") {
                panic!("poison entity {entity}");
            }
            if entity.starts_with("post:slow") {
                tokio::time::sleep(Duration::from_secs(15)).await;
            }
        })
    })
}

async fn hide(app: &TestApp, entity: &str) {
    let events: Vec<Value> = (0..10)
        .map(|i| event(&format!("{entity}-f{i}"), entity, "flag"))
        .collect();
    app.send(&json!(events)).await;
}

async fn reverse_action(app: &TestApp, id: i64) {
    let response = app
        .client
        .post(format!("{}/v1/actions/{id}/reverse", app.base))
        .json(&json!({"moderator": "mod:obs", "reason": "not abuse"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// Metric families named in a text (dashboards, alerts): `quiesce_*`, without the histogram
/// series suffixes.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("quiesce_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        let name = &text[start..end];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        names.insert(family.to_owned());
        i = end;
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs prometheus and promtool; `make observability` runs it"]
async fn dashboards_and_alerts_work_against_a_real_prometheus() {
    // 1. The rule file is valid.
    let alerts_path = grafana_dir().join("prometheus/alerts.yml");
    let promtool = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&alerts_path)
        .output()
        .expect("promtool on PATH");
    assert!(
        promtool.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&promtool.stdout),
        String::from_utf8_lossy(&promtool.stderr)
    );
    let alert_text = std::fs::read_to_string(&alerts_path).unwrap();
    let alerts = alert_rules(&alert_text);
    assert_eq!(alerts.len(), 11, "{alerts:?}");
    // Every alert links to its runbook, a heading of docs/operations.md.
    let runbooks = runbook_urls(&alert_text);
    let operations = std::fs::read_to_string(Path::new(ROOT).join("docs/operations.md")).unwrap();
    let anchors: BTreeSet<String> = operations
        .lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| heading_anchor(heading.trim_start_matches('#')))
        .collect();
    for (name, _) in &alerts {
        let url = runbooks
            .get(name)
            .unwrap_or_else(|| panic!("alert {name} has a runbook_url annotation"));
        let anchor = url
            .strip_prefix("docs/operations.md#")
            .unwrap_or_else(|| panic!("{name}: {url} points into docs/operations.md"));
        assert!(
            anchors.contains(anchor),
            "{name}: {url} names a heading of docs/operations.md"
        );
        assert_eq!(anchor, format!("runbook-{}", name.to_lowercase()), "{name}");
    }

    // 2. The dashboards are well formed.
    let dashboards = dashboards();
    for (path, dashboard) in &dashboards {
        let panels = dashboard["panels"].as_array().expect("panels");
        assert!(!panels.is_empty(), "{path} has panels");
        let ids: BTreeSet<i64> = panels.iter().map(|p| p["id"].as_i64().unwrap()).collect();
        assert_eq!(ids.len(), panels.len(), "{path}: panel ids are unique");
        for panel in panels {
            let title = panel["title"].as_str().unwrap_or("?");
            assert_eq!(
                panel["datasource"]["uid"], "prometheus",
                "{path} {title}: datasource"
            );
            let targets = panel["targets"].as_array().expect("targets");
            assert!(!targets.is_empty(), "{path} {title}: targets");
            for target in targets {
                assert!(target["expr"].as_str().is_some_and(|e| !e.is_empty()));
                assert_eq!(target["datasource"]["uid"], "prometheus");
            }
        }
    }

    // 3. A live quiesce with a webhook receiver, and Prometheus scraping it.
    let mut rules = std::fs::read_to_string(Path::new(ROOT).join("rules/default.toml")).unwrap();
    rules.push_str(
        "\n[[rule]]\nname = \"shadow_any_flag\"\nkinds = [\"post\"]\nwhen = 'count(\"flag\") >= 1'\naction = \"flag\"\nshadow = true\nreason = \"a flag\"\n",
    );
    let app = spawn_app(TestOptions {
        before_apply: Some(hook()),
        rules: Some(RuleSet::from_toml(&rules).unwrap()),
        through_proxies: true,
        ..TestOptions::default().with(|s| {
            s.schedule.debounce_window = Duration::from_millis(100);
            s.schedule.max_wait = Duration::from_secs(1);
            s.worker.workers = 4;
            s.schedule.max_attempts = 2;
            s.database.backend_timeout = Duration::from_secs(1);
            s.maintenance.sweep_grace = Duration::from_secs(1);
            s.worker.evaluation_timeout = Duration::from_secs(30);
            s.worker.lease = Duration::from_secs(5);
        })
    })
    .await;
    let failing = Arc::new(AtomicBool::new(false));
    let receiver = start_receiver(Arc::clone(&failing)).await;
    let stop_dispatcher = CancellationToken::new();
    let dispatcher = Dispatcher::new(
        app.backends.store.clone(),
        DeliverySettings {
            url: format!("http://{receiver}/hook"),
            secret: None,
            timeout: Duration::from_secs(2),
            horizon: Duration::from_secs(3600),
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_millis(400),
            batch: 16,
            poll_interval: Duration::from_millis(50),
        },
    );
    tokio::spawn(dispatcher.run(stop_dispatcher.clone()));
    let target = app.metrics_base.trim_start_matches("http://").to_owned();
    let prometheus = Prometheus::start(&[&target], "2s").await;

    // 4. Normal load: hides, reactions that act on nothing (shadow hits), duplicates, refused
    // requests, and one reversal in twelve.
    for i in 0..12 {
        hide(&app, &format!("post:h{i}")).await;
    }
    // A second rule acts three times; one of its actions is reversed below (a third of them,
    // but fewer than the 5 actions the reversal alert asks for).
    for i in 0..3 {
        let entity = format!("post:r{i}");
        let reports: Vec<Value> = (0..5)
            .map(|n| event(&format!("{entity}-r{n}"), &entity, "report"))
            .collect();
        app.send(&json!(reports)).await;
    }
    for i in 0..30 {
        app.send(&json!([
            event(&format!("calm{i}-u"), &format!("post:c{i}"), "upvote"),
            event(&format!("calm{i}-f"), &format!("post:c{i}"), "flag"),
            event(&format!("calm{i}-v"), &format!("post:c{i}"), "upvote"),
        ]))
        .await;
    }
    app.send(&json!([event("calm0-u", "post:c0", "upvote")]))
        .await;
    for _ in 0..2 {
        let refused = app
            .client
            .post(format!("{}/v1/events", app.base))
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 400);
    }
    app.wait_settled(Duration::from_secs(60)).await;
    wait_for(Duration::from_secs(30), "the 12 hides", || async {
        scalar!(
            app,
            "SELECT count(*) FROM actions WHERE rule = 'hide_flag_pile_on'"
        ) == 12
    })
    .await;
    let first_hide = scalar!(
        app,
        "SELECT min(id) FROM actions WHERE rule = 'hide_flag_pile_on'"
    );
    reverse_action(&app, first_hide).await;
    wait_for(Duration::from_secs(30), "the 3 removals", || async {
        scalar!(
            app,
            "SELECT count(*) FROM actions WHERE rule = 'remove_reported'"
        ) == 3
    })
    .await;
    let first_removal = scalar!(
        app,
        "SELECT min(id) FROM actions WHERE rule = 'remove_reported'"
    );
    reverse_action(&app, first_removal).await;
    wait_for(
        Duration::from_secs(30),
        "every webhook to be delivered",
        || async { app.count_undelivered().await == 0 },
    )
    .await;
    // Prometheus has scraped the reversal, and has some history for rates.
    wait_for(
        Duration::from_secs(60),
        "a scrape after the reversal",
        || async {
            prometheus
                .scalar("sum(max by (rule) (quiesce_reversed_24h))")
                .await
                == Some(2.0)
                && prometheus
                    .scalar("count_over_time(up{job=\"quiesce\"}[1m])")
                    .await
                    .is_some_and(|n| n >= 10.0)
        },
    )
    .await;

    // 5. Every metric named in grafana/ is exported.
    let exported = app.metrics_text().await;
    let mut referenced = metric_names(&alert_text);
    for (_, dashboard) in &dashboards {
        referenced.extend(metric_names(&dashboard.to_string()));
    }
    // Exported only where a read replica is set: the replica test below checks them.
    let with_a_replica = REPLICA_METRICS;
    let missing: Vec<&String> = referenced
        .iter()
        .filter(|name| !with_a_replica.contains(&name.as_str()))
        .filter(|name| {
            !exported
                .lines()
                .any(|l| l.starts_with(name.as_str()) && !l.starts_with('#'))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "named in grafana/ but not in /metrics: {missing:?}"
    );

    // 6. Every panel query evaluates and returns data; every alert expression evaluates.
    let mut failures = Vec::new();
    for (path, dashboard) in &dashboards {
        for (title, expr) in panel_queries(dashboard) {
            match prometheus.query(&grafana_substitutions(&expr)).await {
                Ok(result) if result.is_empty() => {
                    failures.push(format!("{path} / {title}: no data for {expr}"))
                }
                Ok(_) => {}
                Err(error) => failures.push(format!("{path} / {title}: {error} in {expr}")),
            }
        }
    }
    for (name, expr) in &alerts {
        if let Err(error) = prometheus.query(expr).await {
            failures.push(format!("alert {name}: {error}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // 7. The reversal-rate gauge is the API's figure, rule by rule.
    let (status, rate) = app.get("/v1/stats/reversal-rate?window=24h&by=rule").await;
    assert_eq!(status, 200);
    for row in rate["by_rule"].as_array().unwrap() {
        let rule = row["rule"].as_str().unwrap();
        let gauge = prometheus
            .scalar(&format!(
                "max(quiesce_reversal_rate_24h{{rule=\"{rule}\"}})"
            ))
            .await
            .unwrap_or_else(|| panic!("no reversal-rate gauge for {rule}"));
        let api = row["rate"].as_f64().unwrap();
        assert!(
            (gauge - api).abs() < 1e-9,
            "{rule}: gauge {gauge}, API {api}"
        );
    }
    let rates: Vec<(&str, f64)> = rate["by_rule"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["rule"].as_str().unwrap(), r["rate"].as_f64().unwrap()))
        .collect();
    assert_eq!(rates.len(), 2, "{rates:?}");
    assert!((rates[0].1 - 1.0 / 12.0).abs() < 1e-9 && (rates[1].1 - 1.0 / 3.0).abs() < 1e-9);
    // Rules in force without actions read 0 rather than nothing.
    assert_eq!(
        prometheus
            .scalar("max(quiesce_reversal_rate_24h{rule=\"suspend_repeat_offender\"})")
            .await,
        Some(0.0)
    );

    // 8. Quiet under normal load: no alert was pending or firing at any point so far.
    let ever = prometheus.query("max_over_time(ALERTS[5m])").await.unwrap();
    assert!(ever.is_empty(), "alerts under normal load: {ever:?}");

    // 9. Each alert fires under its condition.
    // A poison entity is dead-lettered.
    app.send(&json!([event("poison-1", "post:poison1", "flag")]))
        .await;
    prometheus.wait_firing("QuiesceDeadLetters").await;

    // Locks held by someone else: every attempt on these entities finds them locked.
    let mut redis = app.backends.queue.connection();
    let locked: Vec<String> = (0..5).map(|i| format!("post:locked{i}")).collect();
    for entity in &locked {
        let id = quiesce::domain::EntityId::parse(entity).unwrap();
        let key = app.backends.queue.keys().for_entity(&id).lock(&id);
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("held-elsewhere")
            .arg("PX")
            .arg(120_000)
            .query_async(&mut redis)
            .await
            .unwrap();
        app.send(&json!([event(&format!("{entity}-f"), entity, "flag")]))
            .await;
    }
    prometheus.wait_firing("QuiesceLockContentionHigh").await;
    for entity in &locked {
        let id = quiesce::domain::EntityId::parse(entity).unwrap();
        let key = app.backends.queue.keys().for_entity(&id).lock(&id);
        let _: () = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut redis)
            .await
            .unwrap();
    }

    // Moderators reverse a third of a rule's actions.
    let hides: Vec<i64> = sqlx::query_scalar!(
        "SELECT id FROM actions WHERE rule = 'hide_flag_pile_on' AND reversed_at IS NULL ORDER BY id LIMIT 3",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    for id in hides {
        reverse_action(&app, id).await;
    }
    prometheus.wait_firing("QuiesceReversalRateHigh").await;

    // The webhook receiver fails while actions keep coming.
    failing.store(true, Ordering::Relaxed);
    // Each new action is scraped before the next, so the backlog grows across scrapes.
    for i in 0..4 {
        hide(&app, &format!("post:undelivered{i}")).await;
        wait_for(
            Duration::from_secs(30),
            "the grown backlog to be scraped",
            || async {
                prometheus
                    .scalar("max(quiesce_outbox_backlog)")
                    .await
                    .is_some_and(|backlog| backlog >= f64::from(i + 1))
            },
        )
        .await;
    }
    prometheus.wait_firing("QuiesceOutboxBacklogGrowing").await;
    failing.store(false, Ordering::Relaxed);

    // Every worker is held by a slow evaluation while more entities fall due.
    for i in 0..4 {
        app.send(&json!([event(
            &format!("slow-{i}"),
            &format!("post:slow{i}"),
            "flag"
        )]))
        .await;
    }
    for i in 0..8 {
        app.send(&json!([event(
            &format!("lag-{i}"),
            &format!("post:lag{i}"),
            "flag"
        )]))
        .await;
    }
    prometheus.wait_firing("QuiesceQueueLagHigh").await;

    // Postgres is cut off: ingest answers 503.
    app.postgres_proxy.as_ref().unwrap().cut();
    let cut_off = async {
        for i in 0.. {
            let response = app
                .post_events(&json!([event(&format!("cut-{i}"), "post:cut", "flag")]))
                .await;
            assert_eq!(response.status(), 503);
        }
    };
    tokio::select! {
        _ = cut_off => {}
        _ = prometheus.wait_firing("QuiesceIngest5xx") => {}
    }
    app.postgres_proxy.as_ref().unwrap().restore();
    stop_dispatcher.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs prometheus; `make observability` runs it"]
async fn processes_on_different_rules_versions_fire_the_disagreement_alert() {
    let app = spawn_app(TestOptions::idle()).await;
    let (mut worker, worker_metrics) = app.spawn_ready_worker_process("obs-rules").await;
    let app_metrics = app.metrics_base.trim_start_matches("http://").to_owned();
    let worker_metrics = worker_metrics.to_string();
    let prometheus = Prometheus::start(&[&app_metrics, &worker_metrics], "2s").await;
    wait_for(
        Duration::from_secs(30),
        "both processes scraped at rules version 1",
        || async { prometheus.scalar("count(quiesce_rules_version == 1)").await == Some(2.0) },
    )
    .await;
    assert!(
        !prometheus.raised("QuiesceRulesVersionsDisagree").await,
        "quiet while they agree"
    );
    // Version 2 made active in the database: the worker process follows it; this test's
    // in-process app runs no follower, so it stays behind, as a process that cannot hear of it.
    let text = std::fs::read_to_string(Path::new(ROOT).join("rules/default.toml")).unwrap();
    sqlx::query!(
        "WITH v AS (INSERT INTO rules_versions (version, text, hash, author, message)
                    VALUES (2, $1, $2, 'test', 'only some hear of it') RETURNING version)
         INSERT INTO rules_activations (version, kind, author, message)
         SELECT version, 'publish', 'test', 'only some hear of it' FROM v",
        &text,
        quiesce::active_rules::hash(&text)
    )
    .execute(&app.pool)
    .await
    .unwrap();
    prometheus.wait_firing("QuiesceRulesVersionsDisagree").await;
    // A reload brings the app to the active version: the fleet agrees again.
    let (status, body) = app.post_json("/v1/rules/reload", json!(null)).await;
    assert_eq!((status, &body["version"]), (200, &json!(2)), "{body}");
    wait_for(
        Duration::from_secs(60),
        "the disagreement alert to resolve",
        || async { !prometheus.raised("QuiesceRulesVersionsDisagree").await },
    )
    .await;
    worker.start_kill().unwrap();
    worker.wait().await.unwrap();
}

/// The demotion's gauge stays in this test process's metrics, which the other tests' apps
/// export, and the first test requires that no alert fires under normal load: the test sets it
/// back to 0 (outside the alert's hour) once the alert has fired, whatever order they run in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs prometheus; `make observability` runs it"]
async fn the_guard_turning_a_rule_to_shadow_fires_its_alert() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(10);
        s.moderation.guard_actions = 2;
    }))
    .await;
    let app_metrics = app.metrics_base.trim_start_matches("http://").to_owned();
    let prometheus = Prometheus::start(&[&app_metrics], "2s").await;
    let entities = ["post:obs-guard-a", "post:obs-guard-b"];
    for entity in entities {
        hide(&app, entity).await;
    }
    wait_for(Duration::from_secs(30), "both posts acted on", || async {
        scalar!(
            app,
            "SELECT count(*) FROM actions WHERE entity LIKE 'post:obs-guard-%'"
        ) == 2
    })
    .await;
    assert!(
        !prometheus.raised("QuiesceRuleDemotedByGuard").await,
        "quiet before any demotion"
    );
    let ids: Vec<i64> = sqlx::query_scalar!(
        "SELECT id FROM actions WHERE entity LIKE 'post:obs-guard-%' ORDER BY id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    for id in ids {
        reverse_action(&app, id).await;
    }
    prometheus.wait_firing("QuiesceRuleDemotedByGuard").await;
    for rule in RuleSet::from_toml(DEFAULT_RULES).unwrap().rules() {
        metrics::gauge!(
            quiesce::telemetry::names::GUARD_DEMOTED_AT,
            "rule" => rule.name.clone()
        )
        .set(0.0);
    }
}

/// An appeal that waits past `appeal_alert_after` fires the appeals alert. The gauges live in
/// this process's recorder, shared with the other tests: they are set back once it has fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs prometheus; `make observability` runs it"]
async fn an_appeal_waiting_too_long_fires_its_alert() {
    let app = spawn_app(TestOptions::default().with(|s| {
        s.schedule.debounce_window = Duration::from_millis(10);
        s.moderation.appeal_alert_after = Duration::from_secs(2);
    }))
    .await;
    let app_metrics = app.metrics_base.trim_start_matches("http://").to_owned();
    let prometheus = Prometheus::start(&[&app_metrics], "2s").await;
    hide(&app, "post:obs-appeal").await;
    wait_for(Duration::from_secs(30), "the post hidden", || async {
        scalar!(
            app,
            "SELECT count(*) FROM statements WHERE entity = 'post:obs-appeal'"
        ) == 1
    })
    .await;
    assert!(
        !prometheus.raised("QuiesceAppealWaitingTooLong").await,
        "quiet before any appeal"
    );
    let action: i64 = scalar!(
        app,
        "SELECT id FROM actions WHERE entity = 'post:obs-appeal'"
    );
    let response = app
        .client
        .post(format!("{}/v1/actions/{action}/appeals", app.base))
        .json(&json!({"appellant": "user:obs", "text": "please look again"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    prometheus.wait_firing("QuiesceAppealWaitingTooLong").await;
    assert_eq!(
        prometheus.scalar("max(quiesce_appeals_waiting)").await,
        Some(1.0)
    );
    metrics::gauge!(quiesce::telemetry::names::APPEALS_OLDEST_WAIT).set(0.0);
    metrics::gauge!(quiesce::telemetry::names::APPEALS_WAITING).set(0.0);
}

/// The primary not taking writes and the read replica out of use each fire their alert, and
/// both resolve when they are back (the gauges are left at 1 for the other tests' apps, which
/// share this process's recorder).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs prometheus; `make observability` runs it"]
async fn a_primary_that_takes_no_writes_and_a_replica_out_of_use_fire_their_alerts() {
    // The "replica" is another test database reached through a proxy the test can cut (a real
    // streaming replica and its lag are in `make ha`).
    let other = spawn_app(TestOptions::idle()).await;
    let other_url =
        secrecy::ExposeSecret::expose_secret(&other.settings.database.database_url).to_owned();
    let (target, _) = redirect(&other_url, 5432, "127.0.0.1:1".parse().unwrap());
    let replica = TcpProxy::start(target).await;
    let read_url = redirect(&other_url, 5432, replica.address).1;
    let app = spawn_app(TestOptions {
        through_proxies: true,
        ..TestOptions::idle().with(|s| {
            s.database.database_read_url = Some(read_url.into());
            s.database.read_max_lag = Duration::from_secs(5);
            s.database.backend_timeout = Duration::from_secs(1);
        })
    })
    .await;
    let app_metrics = app.metrics_base.trim_start_matches("http://").to_owned();
    let prometheus = Prometheus::start(&[&app_metrics], "2s").await;
    let both_up = "min(quiesce_postgres_writable) == 1 and on() min(quiesce_replica_in_use) == 1";
    wait_for(
        Duration::from_secs(30),
        "the primary writable and the replica in use, scraped",
        || async { prometheus.scalar(both_up).await == Some(1.0) },
    )
    .await;
    for alert in ["QuiescePostgresNotWritable", "QuiesceReplicaLagging"] {
        assert!(
            !prometheus.raised(alert).await,
            "{alert} quiet while both answer"
        );
    }
    let exported = app.metrics_text().await;
    for name in REPLICA_METRICS {
        assert!(
            exported.lines().any(|l| l.starts_with(name)),
            "{name} exported where a replica is set: {exported}"
        );
    }

    replica.cut();
    prometheus.wait_firing("QuiesceReplicaLagging").await;
    assert!(
        !prometheus.raised("QuiescePostgresNotWritable").await,
        "the primary still takes writes"
    );
    app.postgres_proxy.as_ref().unwrap().cut();
    prometheus.wait_firing("QuiescePostgresNotWritable").await;

    app.postgres_proxy.as_ref().unwrap().restore();
    replica.restore();
    for alert in ["QuiescePostgresNotWritable", "QuiesceReplicaLagging"] {
        wait_for(Duration::from_secs(60), "the alert to resolve", || async {
            !prometheus.raised(alert).await
        })
        .await;
    }
}
