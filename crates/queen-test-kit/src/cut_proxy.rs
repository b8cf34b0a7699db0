//! A TCP proxy between a broker and PostgreSQL that a test cuts and
//! restores, so the broker loses its database while the shared test server
//! keeps running (and other brokers, connected directly, keep reaching it).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A proxy on 127.0.0.1 forwarding to `upstream` until [`CutProxy::cut`].
pub struct CutProxy {
    port: u16,
    up: Arc<AtomicBool>,
    links: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl CutProxy {
    /// Listens on a free port and forwards each connection to `upstream`
    /// (`host:port`), e.g. [`crate::admin_host_port`].
    pub async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let up = Arc::new(AtomicBool::new(true));
        let links: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (up2, links2) = (up.clone(), links.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: connection refused-ish
                }
                let upstream = upstream.clone();
                let link = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                links2.lock().expect("links").push(link);
            }
        });
        CutProxy { port, up, links }
    }

    /// The port the proxy listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` through the proxy (user postgres).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Drops every open link and refuses new ones until [`CutProxy::restore`].
    pub fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for link in self.links.lock().expect("links").drain(..) {
            link.abort();
        }
    }

    /// Forwards new connections again.
    pub fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}
