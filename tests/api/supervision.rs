//! The supervisor of `serve`'s tasks, on real backends: a task that ends unexpectedly ends the
//! run with an error naming it and stops the others (the API stops answering), and a shutdown
//! ends the run with `Ok` once every task has stopped.

use std::{net::SocketAddr, time::Duration};

use quiesce::startup::{Application, HowItEnded, Supervisor, TaskDied, stop_deadline};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::helpers::{TestApp, TestOptions, spawn_app, wait_for};

/// A second run of `serve`'s tasks (the API's listener, the metrics listener, the worker loop,
/// maintenance) on the test app's backends, under a supervisor of its own; and the address its
/// API listens on.
async fn supervised(app: &TestApp) -> (Supervisor, SocketAddr) {
    let served = Application::build(&app.settings, &app.backends, Some(app.worker()))
        .await
        .expect("application");
    let address = served.address();
    let mut supervisor = Supervisor::new(CancellationToken::new(), stop_deadline(&app.settings));
    served.supervise(&mut supervisor);
    (supervisor, address)
}

async fn answers(client: &reqwest::Client, base: &str) -> bool {
    client
        .get(format!("{base}/healthz"))
        .send()
        .await
        .is_ok_and(|response| response.status().is_success())
}

/// Runs `supervisor` and waits until the API at `address` answers.
async fn run_until_answering(
    app: &TestApp,
    supervisor: Supervisor,
    address: SocketAddr,
) -> JoinHandle<Result<(), TaskDied>> {
    let running = tokio::spawn(supervisor.run());
    let base = format!("http://{address}");
    wait_for(
        Duration::from_secs(10),
        "the supervised API to answer",
        || answers(&app.client, &base),
    )
    .await;
    running
}

/// How the run ended, within a deadline.
async fn ended(running: JoinHandle<Result<(), TaskDied>>) -> Result<(), TaskDied> {
    tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the run ends within its deadline")
        .expect("the supervisor itself does not panic")
}

#[tokio::test]
async fn a_task_that_dies_ends_the_run_with_an_error_naming_it_and_stops_the_others() {
    let app = spawn_app(TestOptions::default()).await;
    let (mut supervisor, address) = supervised(&app).await;
    let (pull, plug) = tokio::sync::oneshot::channel::<()>();
    supervisor.spawn("doomed", async move {
        if plug.await.is_ok() {
            panic!("the test pulled the plug");
        }
    });
    let shutdown = supervisor.shutdown();
    let running = run_until_answering(&app, supervisor, address).await;

    pull.send(()).expect("the doomed task waits");
    let died = ended(running).await.expect_err("a task died");
    assert_eq!(died.task, "doomed");
    assert!(
        matches!(&died.how, HowItEnded::Panicked(message) if message == "the test pulled the plug"),
        "{died}"
    );
    assert_eq!(
        died.to_string(),
        "the task `doomed` panicked: the test pulled the plug"
    );
    assert!(shutdown.is_cancelled(), "the other tasks were told to stop");
    assert!(
        tokio::net::TcpStream::connect(address).await.is_err(),
        "the API's listener stopped with the run"
    );
    assert!(
        answers(&app.client, &app.base).await,
        "the test app itself still serves"
    );
}

#[tokio::test]
async fn a_shutdown_ends_the_run_with_ok_once_every_task_has_stopped() {
    let app = spawn_app(TestOptions::default()).await;
    let (supervisor, address) = supervised(&app).await;
    let shutdown = supervisor.shutdown();
    let running = run_until_answering(&app, supervisor, address).await;

    shutdown.cancel();
    ended(running).await.expect("a clean shutdown");
    assert!(
        tokio::net::TcpStream::connect(address).await.is_err(),
        "the API's listener stopped"
    );
}
