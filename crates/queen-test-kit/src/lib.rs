//! Test support shared by the workspace's test suites (`queen`,
//! `queen-client`): a database per test, cloned from a migrated template;
//! a private PostgreSQL cluster ([`PrivatePg`]); a TCP proxy to cut between
//! a broker and PostgreSQL ([`CutProxy`]); polling and racing helpers.
//! Nothing here knows the HTTP API: broker fixtures stay in each suite's
//! `tests/common/`. A dev-dependency only, never published.
//!
//! `expect` and `unwrap` are allowed crate-wide (library crates deny them):
//! this is test code, and a fixture that cannot do its job (PostgreSQL
//! unreachable, a template that does not migrate) can only fail the test
//! that asked for it, with a message, as the tests themselves do.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use queen_engine::DbConfig;
use tokio_postgres::NoTls;

pub mod cut_proxy;
pub mod private_pg;

pub use cut_proxy::CutProxy;
pub use private_pg::PrivatePg;

/// The server tests create their databases on (`QUEEN_TEST_DATABASE_URL`).
pub fn admin_url() -> String {
    std::env::var("QUEEN_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A direct SQL client on database `db`, for assertions.
pub async fn sql_client(db: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&url_for(db), NoTls).await.expect("connect");
    tokio::spawn(conn);
    client
}

/// One bigint (or count) from SQL on database `db`.
pub async fn scalar_of(db: &str, query: &str) -> i64 {
    let client = sql_client(db).await;
    let row = client.query_one(query, &[]).await.expect("scalar query");
    row.get::<_, i64>(0)
}

/// The URL of database `db` on the test server.
pub fn url_for(db: &str) -> String {
    let admin = admin_url();
    match admin.rfind('/') {
        Some(i) => format!("{}/{db}", &admin[..i]),
        None => admin,
    }
}

/// `host:port` of the test server, e.g. the upstream of a [`CutProxy`].
pub fn admin_host_port() -> String {
    let admin = admin_url();
    admin.split('@').nth(1).and_then(|s| s.split('/').next()).unwrap_or("127.0.0.1:5432").to_owned()
}

/// A client on the test server's admin database.
pub async fn admin() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&admin_url(), NoTls)
        .await
        .expect("connect to the test PostgreSQL (is it running? see scripts/test)");
    tokio::spawn(conn);
    client
}

/// A fresh database for one test, cloned from the migrated template
/// `queen_tpl_<schema digest>` (built once, under advisory lock 7242001 so
/// test processes running at once never race to build it).
pub async fn fresh_database() -> String {
    let template = format!("queen_tpl_{}", queen_engine::schema_digest());
    let admin = admin().await;
    // Serialise template creation across test processes.
    admin.execute("SELECT pg_advisory_lock(7242001)", &[]).await.expect("lock");
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&template])
        .await
        .expect("query")
        .is_some();
    if !exists {
        let building = format!("{template}_building");
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {building}")).await.expect("drop");
        admin.batch_execute(&format!("CREATE DATABASE {building}")).await.expect("create template");
        {
            let (mut client, conn) =
                tokio_postgres::connect(&url_for(&building), NoTls).await.expect("connect template");
            let task = tokio::spawn(conn);
            queen_engine::migrate(&mut client).await.expect("migrate template");
            drop(client);
            let _ = task.await;
        }
        admin
            .batch_execute(&format!("ALTER DATABASE {building} RENAME TO {template}"))
            .await
            .expect("rename template");
    }
    let name = format!("queen_t_{}", uuid::Uuid::new_v4().simple());
    admin
        .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
        .await
        .expect("clone template");
    admin.execute("SELECT pg_advisory_unlock(7242001)", &[]).await.expect("unlock");
    name
}

/// Drops a test database (on a thread of its own, so it works from `Drop`).
/// Kept when the test failed, for a post-mortem.
pub fn drop_database_later(db: String) {
    if std::thread::panicking() {
        eprintln!("keeping database {db} of a failed test");
        return;
    }
    let _ = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
            return;
        };
        rt.block_on(async move {
            if let Ok((client, conn)) = tokio_postgres::connect(&admin_url(), NoTls).await {
                tokio::spawn(conn);
                let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).await;
            }
        });
    })
    .join();
}

/// A fresh database that is dropped with this guard (when the test passed).
pub struct TestDb {
    pub name: String,
}

impl TestDb {
    pub async fn create() -> Self {
        TestDb { name: fresh_database().await }
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        drop_database_later(self.name.clone());
    }
}

/// Settings that reach a test database.
pub fn db_config(db: &str) -> DbConfig {
    DbConfig { url: Some(url_for(db)), pool_size: 8, ..DbConfig::default() }
}

/// Polls `f` every 50 ms until it answers `Some`, or panics after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

/// Runs `f` on every item, each in a task of its own, all released at once
/// by a barrier (so they race); answers in item order.
pub async fn all_at_once<T, R, F, Fut>(items: Vec<T>, f: F) -> Vec<R>
where
    F: Fn(T) -> Fut,
    Fut: Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(items.len()));
    let tasks: Vec<_> = items
        .into_iter()
        .map(|item| {
            let (work, barrier) = (f(item), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("join"));
    }
    out
}

/// A small seeded xorshift64* generator (no dependency).
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (0 counts as 1).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// The next number.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A random element.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// Shuffles in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}
