//! Test fixtures: an engine on a test database (a database per test, cloned
//! from a migrated template: `queen-test-kit`, re-exported here), and that
//! engine served over real HTTP on an ephemeral port. Each generic test runs
//! twice, through `HttpBroker` and `EmbeddedBroker` (see the `both!` macro).
#![allow(dead_code)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use queen_client::{EmbeddedBroker, HttpBroker, HttpConfig, Queen, RetryPolicy};
use queen_engine::{Engine, EngineOptions};
use tokio::sync::oneshot;
use tokio_postgres::NoTls;

pub use queen_test_kit::*;

/// A broker on a fresh database: the engine, and (optionally) HTTP over it.
pub struct Fixture {
    pub db: String,
    pub engine: Arc<Engine>,
    pub base: Option<String>,
    stop: Option<oneshot::Sender<()>>,
}

impl Fixture {
    /// An engine on a fresh database, no HTTP.
    pub async fn embedded() -> Self {
        let db = fresh_database().await;
        let engine = Arc::new(Engine::connect(&db_config(&db), EngineOptions::default()).expect("engine"));
        Fixture { db, engine, base: None, stop: None }
    }

    /// An engine on a fresh database, served over HTTP on 127.0.0.1:0.
    pub async fn http() -> Self {
        Self::http_with(queen_server::ServerConfig::default()).await
    }

    /// Like [`Fixture::http`], with explicit server settings (auth, limits).
    pub async fn http_with(config: queen_server::ServerConfig) -> Self {
        let mut f = Self::embedded().await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        f.base = Some(format!("http://{}", listener.local_addr().expect("addr")));
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = f.engine.clone();
        tokio::spawn(async move {
            let _ = queen_server::serve(listener, serving, config, async move {
                let _ = stopped.await;
            })
            .await;
        });
        f.stop = Some(stop);
        f
    }

    /// A client over HTTP (quick retries, so a failing test fails fast).
    pub fn http_queen(&self) -> Queen<HttpBroker> {
        let base = self.base.clone().expect("an HTTP fixture");
        let retry = RetryPolicy {
            max_retries: 2,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
        };
        Queen::http(HttpConfig::new(base).retry(retry)).expect("client")
    }

    /// A client of the engine in process.
    pub fn embedded_queen(&self) -> Queen<EmbeddedBroker> {
        Queen::embedded(self.engine.clone())
    }

    /// A direct SQL client on this fixture's database, for assertions.
    pub async fn sql(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&url_for(&self.db), NoTls).await.expect("connect");
        tokio::spawn(conn);
        client
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.engine.close();
        drop_database_later(self.db.clone());
    }
}

/// Runs the generic test `$name(queen)` twice: over HTTP and embedded.
#[macro_export]
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn http() {
                    let f = $crate::common::Fixture::http().await;
                    super::$name(f.http_queen()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn embedded() {
                    let f = $crate::common::Fixture::embedded().await;
                    super::$name(f.embedded_queen()).await;
                }
            }
        )*
    };
}
