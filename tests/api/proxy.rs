//! A TCP forwarder between quiesce and a real server, which a test can cut and restore to
//! make Redis or Postgres unreachable without touching the shared server.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use tokio::{
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

#[derive(Default)]
struct Links {
    cut: bool,
    open: Vec<JoinHandle<()>>,
}

pub struct TcpProxy {
    pub address: SocketAddr,
    links: Arc<Mutex<Links>>,
    accept: JoinHandle<()>,
}

impl TcpProxy {
    pub async fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let links: Arc<Mutex<Links>> = Arc::default();
        let accepting = Arc::clone(&links);
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut links = accepting.lock().unwrap();
                if links.cut {
                    drop(inbound);
                    continue;
                }
                let target = target.clone();
                links.open.push(tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                }));
            }
        });
        Self {
            address,
            links,
            accept,
        }
    }

    /// Drops every open connection and refuses new ones until [`TcpProxy::restore`].
    pub fn cut(&self) {
        let mut links = self.links.lock().unwrap();
        links.cut = true;
        for link in links.open.drain(..) {
            link.abort();
        }
    }

    pub fn restore(&self) {
        self.links.lock().unwrap().cut = false;
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// `scheme://[user@]host:port/rest` -> (`host:port`, the URL with `replacement` as host:port).
pub fn redirect(url: &str, default_port: u16, replacement: SocketAddr) -> (String, String) {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let (userinfo, hostpart) = match rest.split_once('@') {
        Some((user, host)) => (format!("{user}@"), host),
        None => (String::new(), rest),
    };
    let (authority, path) = match hostpart.find(['/', '?']) {
        Some(i) => hostpart.split_at(i),
        None => (hostpart, ""),
    };
    let target = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:{default_port}")
    };
    (target, format!("{scheme}://{userinfo}{replacement}{path}"))
}
