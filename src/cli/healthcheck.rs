//! `quiesce healthcheck`: whether the quiesce process on this host is alive, for a container's
//! health command (the image has no curl or shell). It asks `/healthz` on the process' metrics
//! listener (every `serve` and `worker` process has one unless it is off), or `--url`. Exits 0
//! on a 2xx answer, 1 otherwise, saying why on stderr.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::Duration,
};

use anyhow::{Context, bail};

use crate::{settings::ConfigArgs, startup::load_report_settings};

#[derive(clap::Args)]
pub struct HealthcheckArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// The URL to ask instead of the metrics listener's /healthz (for readiness, the API's
    /// /readyz, e.g. http://127.0.0.1:8080/readyz).
    #[arg(long)]
    url: Option<String>,
    /// Longest wait for the answer.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

pub async fn run(args: HealthcheckArgs) -> anyhow::Result<()> {
    let url = match args.url {
        Some(url) => url,
        None => {
            let settings = load_report_settings(&args.config)?;
            let Some(listen) = settings.telemetry.metrics_listen else {
                bail!(
                    "the metrics listener is off (QUIESCE_METRICS_LISTEN): give the URL to ask with --url"
                );
            };
            format!("http://{}/healthz", reachable(listen))
        }
    };
    let client = reqwest::Client::builder().timeout(args.timeout).build()?;
    let response = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("{url} did not answer"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("{url} answered {status}");
    }
    println!("healthy: {url} answered {status}");
    Ok(())
}

/// The address to reach a listener bound to `listen` from the same host: a wildcard address
/// (0.0.0.0, ::) is reached on loopback.
fn reachable(listen: SocketAddr) -> SocketAddr {
    let host = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(host, listen.port())
}

#[cfg(test)]
mod tests {
    use super::reachable;

    #[test]
    fn a_wildcard_listener_is_reached_on_loopback() {
        assert_eq!(
            reachable("0.0.0.0:9464".parse().unwrap()).to_string(),
            "127.0.0.1:9464"
        );
        assert_eq!(
            reachable("[::]:9464".parse().unwrap()).to_string(),
            "[::1]:9464"
        );
        assert_eq!(
            reachable("10.1.2.3:9464".parse().unwrap()).to_string(),
            "10.1.2.3:9464"
        );
    }
}
