//! A real Chromium for the console suite: Debian's `chromium` driven through its
//! `chromedriver` over WebDriver (fantoccini). Each test gets its own chromedriver on a free
//! port and its own fresh profile, with the flags this closed network needs (no background
//! networking, no component updates, no sync). Waits are conditions with deadlines.

use std::{
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use fantoccini::{Client, ClientBuilder, Locator, elements::Element};
use serde_json::{Value, json};

/// How long a page or a condition may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub struct Browser {
    pub client: Client,
    /// The console's origin, `http://127.0.0.1:<port>`.
    pub base: String,
    /// chromedriver's process group, which the Chromium it starts joins: ended as a whole,
    /// so a test that fails half-way leaves no browser behind.
    group: nix::unistd::Pid,
    profile: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(self.group, nix::sys::signal::Signal::SIGKILL);
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    /// Starts chromedriver and a headless Chromium at 1280 x 900.
    pub async fn start(base: &str) -> Self {
        let port = free_port();
        let driver = tokio::process::Command::new(
            std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into()),
        )
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (make console installs Debian's chromium-driver)");
        let group = nix::unistd::Pid::from_raw(driver.id().expect("a running chromedriver") as i32);
        let status = format!("http://127.0.0.1:{port}/status");
        let http = reqwest::Client::new();
        let started = Instant::now();
        loop {
            let ready = match http.get(&status).send().await {
                Ok(response) => response
                    .json::<Value>()
                    .await
                    .is_ok_and(|v| v["value"]["ready"] == true),
                Err(_) => false,
            };
            if ready {
                break;
            }
            assert!(started.elapsed() < DEADLINE, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile =
            std::env::temp_dir().join(format!("quiesce-console-{}", uuid::Uuid::new_v4()));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".into(), json!("chrome"));
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()),
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session");
        Self {
            client,
            base: base.to_owned(),
            group,
            profile,
        }
    }

    /// Ends the session; dropping the browser then ends chromedriver and Chromium.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }

    pub async fn goto(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.base))
            .await
            .unwrap_or_else(|e| panic!("open {path}: {e}"));
    }

    pub async fn path(&self) -> String {
        let url = self.client.current_url().await.unwrap();
        match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        }
    }

    pub async fn find(&self, css: &str) -> Element {
        self.client
            .wait()
            .at_most(DEADLINE)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
    }

    /// Whether an element matches `css` now.
    pub async fn has(&self, css: &str) -> bool {
        !self
            .client
            .find_all(Locator::Css(css))
            .await
            .unwrap()
            .is_empty()
    }

    pub async fn text(&self, css: &str) -> String {
        self.find(css).await.text().await.unwrap()
    }

    /// Types into a field, as a user does.
    pub async fn type_into(&self, css: &str, text: &str) {
        self.find(css).await.send_keys(text).await.unwrap();
    }

    /// Clicks the element and waits for the page it leads to.
    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.unwrap();
    }

    /// Signs in from the sign-in form with the keyboard alone: name, Tab, token, Enter.
    pub async fn sign_in(&self, name: &str, token: &str) {
        self.goto("/console/login").await;
        let field = self.find("#name").await;
        field.click().await.unwrap();
        field
            .send_keys(&format!("{name}\u{E004}{token}\u{E007}"))
            .await
            .unwrap();
        self.wait_until("the sign-in to go through", |b| async move {
            !b.path().await.starts_with("/console/login") || b.has("#error-message").await
        })
        .await;
    }

    /// Reopens `path` until `condition` holds on it (a page shows what the server knows when it
    /// is served; what a worker does meanwhile shows on the next load).
    pub async fn reload_until<'a, F, Fut>(&'a self, path: &str, what: &str, condition: F)
    where
        F: Fn(&'a Browser) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let started = Instant::now();
        loop {
            self.goto(path).await;
            if condition(self).await {
                return;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "timed out after {DEADLINE:?} waiting for {what} on {path}"
            );
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// Waits for a condition on the current page.
    pub async fn wait_until<'a, F, Fut>(&'a self, what: &str, condition: F)
    where
        F: Fn(&'a Browser) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let started = Instant::now();
        while !condition(self).await {
            assert!(started.elapsed() < DEADLINE, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether a JavaScript dialog (alert, confirm, prompt) is open.
    pub async fn dialog_open(&self) -> bool {
        self.client.get_alert_text().await.is_ok()
    }

    /// Runs a script in the page (WebDriver's, which the page's CSP does not govern).
    pub async fn script(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap()
    }

    /// Makes the viewport `width` CSS pixels wide (900 high); returns the window's frame, what
    /// its outer size adds to the viewport.
    pub async fn set_viewport(&self, width: u32) -> i64 {
        self.client.set_window_size(width, 900).await.unwrap();
        let inner = self.script("return window.innerWidth").await;
        let frame = width as i64 - inner.as_i64().unwrap_or(width as i64);
        self.client
            .set_window_size((width as i64 + frame) as u32, 900)
            .await
            .unwrap();
        frame
    }

    /// A full-page screenshot at `width` CSS pixels, written to `docs/console/<name>-<width>.png`.
    /// Returns whether the page fits the width (no horizontal scrolling).
    pub async fn screenshot(&self, name: &str, width: u32) -> bool {
        let frame = self.set_viewport(width).await;
        let height = self
            .script("return Math.ceil(document.documentElement.scrollHeight)")
            .await
            .as_u64()
            .unwrap_or(900)
            .clamp(600, 6000) as u32;
        self.client
            .set_window_size((width as i64 + frame) as u32, height)
            .await
            .unwrap();
        let fits = self
            .script("return document.documentElement.scrollWidth <= window.innerWidth")
            .await
            == json!(true);
        let png = self.client.screenshot().await.unwrap();
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/console");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}-{width}.png")), png).unwrap();
        self.client.set_window_size(1280, 900).await.unwrap();
        fits
    }
}
