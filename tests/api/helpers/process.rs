//! quiesce processes a test starts: a worker, a server, the CLI.

use std::{process::Stdio, time::Duration};

use quiesce::settings::Settings;

use super::{TestApp, log_dir, wait_for};

impl TestApp {
    /// Starts `quiesce worker` as a separate process on this test's database and prefix.
    /// With `metrics_listen`, the process also serves /metrics there.
    pub fn spawn_worker_process(
        &self,
        worker_id: &str,
        metrics_listen: Option<std::net::SocketAddr>,
    ) -> tokio::process::Child {
        self.worker_command(worker_id, metrics_listen)
            .spawn()
            .expect("start quiesce worker")
    }

    /// The `quiesce worker` command of [`Self::spawn_worker_process`], for a test to adjust.
    pub fn worker_command(
        &self,
        worker_id: &str,
        metrics_listen: Option<std::net::SocketAddr>,
    ) -> tokio::process::Command {
        let mut settings = self.settings.clone();
        settings.telemetry.metrics_listen = metrics_listen;
        settings.worker.workers = 4;
        settings.database.db_max_connections = 4;
        settings.worker.worker_id = worker_id.to_owned();
        process_command("worker", worker_id, &settings)
    }

    /// Starts `quiesce serve` (the API and its workers) as a separate process on this test's
    /// database and prefix, listening on `listen`, open without tokens.
    #[allow(dead_code)] // The cluster suite's; the API suite runs its API in the test process.
    pub fn spawn_serve_process(
        &self,
        name: &str,
        listen: std::net::SocketAddr,
    ) -> tokio::process::Child {
        self.serve_command(name, listen)
            .spawn()
            .expect("start quiesce serve")
    }

    /// The `quiesce serve` command of [`Self::spawn_serve_process`], for a test to adjust.
    #[allow(dead_code)] // The cluster suite's.
    pub fn serve_command(
        &self,
        name: &str,
        listen: std::net::SocketAddr,
    ) -> tokio::process::Command {
        let mut settings = self.settings.clone();
        settings.http.listen = listen;
        settings.telemetry.metrics_listen = None;
        settings.security.insecure_dev = true;
        settings.worker.workers = 4;
        settings.database.db_max_connections = 8;
        process_command("serve", name, &settings)
    }

    /// Runs the `quiesce` binary with this test's Redis settings; returns its standard output.
    pub async fn run_cli(&self, args: &[&str]) -> String {
        self.run_cli_with(args, &[]).await
    }

    /// [`Self::run_cli`] with some settings changed in the environment (`QUIESCE_*`, value).
    pub async fn run_cli_with(&self, args: &[&str], changed: &[(&str, &str)]) -> String {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_quiesce"))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(self.settings.to_environment())
            .envs(changed.iter().copied())
            .env("RUST_LOG", "error")
            .output()
            .await
            .expect("run quiesce");
        assert!(
            output.status.success(),
            "quiesce {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    }

    /// Starts a worker process with a metrics listener and waits until it answers.
    pub async fn spawn_ready_worker_process(
        &self,
        worker_id: &str,
    ) -> (tokio::process::Child, std::net::SocketAddr) {
        let address = free_address();
        let process = self.spawn_worker_process(worker_id, Some(address));
        self.wait_healthy("the worker process to start", address)
            .await;
        (process, address)
    }

    /// Waits (30 s at most) until a process this test started answers `/healthz` on `address`.
    pub async fn wait_healthy(&self, what: &str, address: std::net::SocketAddr) {
        wait_for(Duration::from_secs(30), what, || async {
            self.client
                .get(format!("http://{address}/healthz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        })
        .await;
    }
}

/// `quiesce rules check` on a file holding `text`: whether it passed, and what it printed (its
/// standard output, then its standard error).
pub async fn rules_check(text: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("quiesce-check-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("rules.toml");
    std::fs::write(&file, text).unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_quiesce"))
        .args(["rules", "check"])
        .arg(&file)
        .output()
        .await
        .unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), printed)
}

/// `quiesce <subcommand>` with `settings` in its environment (as the process reads them), its
/// output in the test log folder when there is one, killed when dropped. The binary is this
/// build's, or `QUIESCE_TEST_BINARY` (`make ha-figures HA_RELEASE=1` runs a release build).
fn process_command(subcommand: &str, name: &str, settings: &Settings) -> tokio::process::Command {
    let binary = std::env::var_os("QUIESCE_TEST_BINARY")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_quiesce").into());
    let mut command = tokio::process::Command::new(binary);
    command
        .arg(subcommand)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(settings.to_environment())
        .env(
            "RUST_LOG",
            if log_dir().is_some() {
                "debug,sqlx=info,hyper=info,hyper_util=info"
            } else if std::env::var_os("TEST_LOG").is_some() {
                "info"
            } else {
                "error"
            },
        )
        .stdin(Stdio::null())
        .kill_on_drop(true);
    if let Some(dir) = log_dir() {
        let path = dir.join(format!(
            "{subcommand}-{name}-{}.log",
            uuid::Uuid::new_v4().simple()
        ));
        let file = std::fs::File::create(path).expect("process log file");
        command
            .stdout(file.try_clone().expect("log file handle"))
            .stderr(file);
    }
    command
}

/// A loopback address no one listens on now, for a process a test starts.
/// Never the same port twice in one test process: the port is free when asked, and the kernel
/// may hand it out again before the process it was meant for binds it (a serve process then
/// found its metrics port taken by a worker started after it was chosen).
pub fn free_address() -> std::net::SocketAddr {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = probe.local_addr().unwrap();
        let mut handed_out = HANDED_OUT.lock().unwrap();
        if !handed_out.contains(&address.port()) {
            handed_out.push(address.port());
            return address;
        }
    }
}
