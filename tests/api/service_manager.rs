//! The service manager's readiness protocol, as systemd speaks it to a `Type=notify` unit: a
//! datagram socket named by NOTIFY_SOCKET, READY=1 once the process answers, RELOADING=1 and
//! READY=1 around a SIGHUP reload, STOPPING=1 at SIGTERM; and `quiesce healthcheck`, what a
//! container runtime asks.

use std::time::Duration;

use tokio::net::UnixDatagram;

use crate::helpers::{TestOptions, spawn_app};

/// The next notification on `socket`, within a deadline.
async fn next(socket: &UnixDatagram) -> String {
    let mut buffer = vec![0u8; 4096];
    let length = tokio::time::timeout(Duration::from_secs(30), socket.recv(&mut buffer))
        .await
        .expect("a notification within the deadline")
        .unwrap();
    String::from_utf8_lossy(&buffer[..length])
        .trim_end()
        .to_owned()
}

#[tokio::test]
async fn serve_tells_the_service_manager_when_it_is_ready_reloading_and_stopping() {
    let app = spawn_app(TestOptions::idle()).await;
    let dir = std::env::temp_dir().join(format!("quiesce-notify-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let address = crate::helpers::free_address();
    let mut serve = app
        .serve_command("notified", address)
        .env("NOTIFY_SOCKET", &path)
        .spawn()
        .expect("start serve");
    let pid = nix::unistd::Pid::from_raw(serve.id().unwrap() as i32);

    let ready = next(&socket).await;
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    // Ready means serving: the API answers as soon as the manager hears it.
    let health = app
        .client
        .get(format!("http://{address}/healthz"))
        .send()
        .await
        .expect("the API answers once READY=1 is sent");
    assert_eq!(health.status(), 200);

    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    assert_eq!(next(&socket).await, "RELOADING=1");
    assert_eq!(next(&socket).await, "READY=1");

    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert_eq!(next(&socket).await, "STOPPING=1");
    let exited = tokio::time::timeout(Duration::from_secs(30), serve.wait())
        .await
        .expect("serve exits after SIGTERM")
        .unwrap();
    assert!(exited.success(), "{exited}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn healthcheck_says_whether_the_process_on_its_metrics_listener_is_alive() {
    let app = spawn_app(TestOptions::idle()).await;
    let (mut worker, metrics) = app.spawn_ready_worker_process("checked").await;
    let healthcheck = |listen: String| {
        let app = &app;
        async move {
            let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_quiesce"))
                .arg("healthcheck")
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .envs(app.settings.to_environment())
                .env("QUIESCE_METRICS_LISTEN", listen)
                .env("RUST_LOG", "error")
                .output()
                .await
                .unwrap();
            (
                output.status.success(),
                String::from_utf8_lossy(&output.stdout).into_owned(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            )
        }
    };
    // The worker's metrics listener answers: healthy, and stdout says what was asked.
    let (ok, stdout, stderr) = healthcheck(metrics.to_string()).await;
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains(&format!("http://{metrics}/healthz")),
        "{stdout}"
    );
    // Nothing listens there any more: unhealthy, naming the address.
    worker.kill().await.unwrap();
    let _ = worker.wait().await;
    let (ok, _, stderr) = healthcheck(metrics.to_string()).await;
    assert!(!ok);
    assert!(stderr.contains(&metrics.to_string()), "{stderr}");
    // No metrics listener configured: says to give --url.
    let (ok, _, stderr) = healthcheck("off".to_owned()).await;
    assert!(!ok);
    assert!(stderr.contains("--url"), "{stderr}");
}
