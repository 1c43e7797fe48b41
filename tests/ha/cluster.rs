//! The HA cluster of scripts/dev/postgres-ha.sh, as the suite drives it: its addresses from the
//! environment `make ha` sets, the script's commands, and Patroni's REST API.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::Value;

/// A moment on both clocks: the test's and Postgres' (the same machine's).
#[derive(Debug, Clone, Copy)]
pub struct Stamp {
    pub instant: Instant,
    pub wall: DateTime<Utc>,
}

impl Stamp {
    pub fn now() -> Self {
        Self {
            instant: Instant::now(),
            wall: Utc::now(),
        }
    }

    /// The moment of a unix time (seconds) a moment ago.
    fn at_unix(seconds: f64) -> Self {
        let now = Self::now();
        let wall = DateTime::from_timestamp_micros((seconds * 1e6) as i64).expect("a unix time");
        let ago = (now.wall - wall).to_std().unwrap_or_default();
        Self {
            instant: now.instant - ago,
            wall,
        }
    }
}

/// Runs a disrupting command of the script (kill-node, kill-postgres, pause, switchover,
/// read-only): the node it acted on and when it did.
pub async fn act(args: &[&str]) -> (String, Stamp) {
    let output = ha(args).await;
    let (node, at) = output
        .split_once(' ')
        .unwrap_or_else(|| panic!("postgres-ha.sh {args:?} printed {output:?}"));
    (
        node.to_owned(),
        Stamp::at_unix(at.parse().expect("unix seconds")),
    )
}

/// `postgres://user@host:port` of HAProxy's read-write port (no database).
pub fn write_base() -> String {
    let url = std::env::var("QUIESCE_HA_URL")
        .expect("QUIESCE_HA_URL names HAProxy's read-write port: run the suite with make ha");
    url.rsplit_once('/')
        .map_or(url.clone(), |(base, _)| base.to_owned())
}

/// The nodes' Patroni REST APIs.
pub fn patroni_apis() -> Vec<String> {
    std::env::var("QUIESCE_HA_PATRONI")
        .expect("QUIESCE_HA_PATRONI names the Patroni REST APIs: run the suite with make ha")
        .split(',')
        .map(str::to_owned)
        .collect()
}

/// Runs scripts/dev/postgres-ha.sh with `args`; its standard output, trimmed.
pub async fn ha(args: &[&str]) -> String {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dev/postgres-ha.sh");
    let output = tokio::process::Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .await
        .expect("run postgres-ha.sh");
    assert!(
        output.status.success(),
        "postgres-ha.sh {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// One member as Patroni's GET /cluster shows it.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub role: String,
    pub timeline: i64,
    /// Its Patroni REST API.
    pub api: String,
    /// Its postgres, `host:port`.
    pub address: String,
}

/// The members as the first node that answers sees them.
pub async fn members() -> Vec<Member> {
    let client = client();
    for api in patroni_apis() {
        let Ok(response) = client.get(format!("{api}/cluster")).send().await else {
            continue;
        };
        let Ok(cluster) = response.json::<Value>().await else {
            continue;
        };
        return cluster["members"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| Member {
                name: m["name"].as_str().unwrap_or_default().to_owned(),
                role: m["role"].as_str().unwrap_or_default().to_owned(),
                timeline: m["timeline"].as_i64().unwrap_or_default(),
                api: m["api_url"]
                    .as_str()
                    .unwrap_or_default()
                    .trim_end_matches("/patroni")
                    .to_owned(),
                address: format!(
                    "{}:{}",
                    m["host"].as_str().unwrap_or_default(),
                    m["port"].as_i64().unwrap_or_default()
                ),
            })
            .collect();
    }
    Vec::new()
}

/// The running leader, if there is one.
pub async fn leader() -> Option<Member> {
    members().await.into_iter().find(|m| m.role == "leader")
}

/// Whether the node's Patroni answers its primary check with 200, as HAProxy asks it.
pub async fn answers_primary(api: &str) -> bool {
    client()
        .request(reqwest::Method::OPTIONS, format!("{api}/primary"))
        .send()
        .await
        .is_ok_and(|r| r.status() == 200)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}
