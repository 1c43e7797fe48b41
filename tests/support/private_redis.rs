//! A Redis server of a test's own (the machine's `redis-server` on a free loopback port, in a
//! temporary directory): a test may flush it, restart it or change its configuration without
//! touching the shared server other tests use.

use std::{process::Stdio, time::Duration};

use crate::helpers::wait_for;

/// A Redis server of this test's own, which it may flush and restart.
pub struct PrivateRedis {
    port: u16,
    dir: std::path::PathBuf,
    process: Option<tokio::process::Child>,
}

impl PrivateRedis {
    pub async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir =
            std::env::temp_dir().join(format!("quiesce-chaos-redis-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = Self {
            port,
            dir,
            process: None,
        };
        redis.spawn().await;
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) {
        let process = tokio::process::Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server on PATH (scripts/dev/services.sh installs it)");
        self.process = Some(process);
        let url = self.url();
        wait_for(
            Duration::from_secs(10),
            "the private Redis to answer",
            || async {
                let Ok(client) = redis::Client::open(url.as_str()) else {
                    return false;
                };
                let Ok(mut connection) = client.get_multiplexed_async_connection().await else {
                    return false;
                };
                redis::cmd("PING")
                    .query_async::<String>(&mut connection)
                    .await
                    .is_ok()
            },
        )
        .await;
    }

    pub async fn command(&self, name: &str) {
        let client = redis::Client::open(self.url()).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd(name).query_async(&mut connection).await.unwrap();
    }

    /// `CONFIG SET name value`.
    pub async fn config_set(&self, name: &str, value: &str) {
        let client = redis::Client::open(self.url()).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async(&mut connection)
            .await
            .unwrap();
    }

    /// A restart without persistence: everything in it is gone.
    pub async fn restart(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.start_kill().unwrap();
            process.wait().await.unwrap();
        }
        self.spawn().await;
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
