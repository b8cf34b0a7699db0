//! Test fixtures over the HTTP API: a broker serving a test database over
//! real HTTP on an ephemeral port (in process, or as a real `queen serve`
//! child process). The database per test, the private cluster, the cut
//! proxy and the generic helpers come from `queen-test-kit`, re-exported.
#![allow(dead_code)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use queen_engine::{DbConfig, Engine, EngineOptions};
use queen_server::ServerConfig;
use serde_json::{json, Value};
use tokio::sync::oneshot;

pub use queen_test_kit::*;

/// An HTTP client bound to one broker's base URL. Cheap to clone, so
/// concurrent consumers can each own one.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
}

impl Api {
    pub fn new(base: String) -> Self {
        Api { base, http: reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("http") }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// POST JSON; answers (status, body or Null).
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let resp = self.http.post(self.url(path)).json(body).send().await.expect("request");
        read(resp).await
    }

    /// POST raw bytes as JSON.
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
        let resp = self
            .http
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request");
        read(resp).await
    }

    /// POST with no body at all (Content-Length 0), as the client sends `{}`.
    pub async fn post_empty(&self, path: &str) -> (u16, Value) {
        let resp = self.http.post(self.url(path)).send().await.expect("request");
        read(resp).await
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self.http.get(self.url(path)).send().await.expect("request");
        read(resp).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let resp = self.http.delete(self.url(path)).send().await.expect("request");
        read(resp).await
    }

    /// POST /api/v1/configure with `options`.
    pub async fn configure(&self, queue: &str, options: Value) -> (u16, Value) {
        self.post(
            "/api/v1/configure",
            &json!({"queue": queue, "namespace": null, "task": null, "options": options}),
        )
        .await
    }

    /// Configures and asserts success.
    pub async fn configure_ok(&self, queue: &str, options: Value) -> Value {
        let (status, body) = self.configure(queue, options).await;
        assert_eq!(status, 200, "configure failed: {body}");
        body
    }

    /// Pushes `payloads` to `queue`/`partition` with the given transaction ids.
    pub async fn push(&self, queue: &str, partition: &str, items: &[(&str, Value)]) -> Value {
        let items: Vec<Value> = items
            .iter()
            .map(|(tx, payload)| json!({"queue": queue, "partition": partition, "transactionId": tx, "payload": payload}))
            .collect();
        self.push_items(json!(items)).await
    }

    /// Pushes `txids` (payload `{"tx": id}`) to one partition.
    pub async fn push_txids(&self, queue: &str, partition: &str, txids: &[String]) -> Value {
        let items: Vec<Value> = txids
            .iter()
            .map(|tx| json!({"queue": queue, "partition": partition, "transactionId": tx, "payload": {"tx": tx}}))
            .collect();
        self.push_items(json!(items)).await
    }

    /// Pushes a JSON array of items and asserts 201.
    pub async fn push_items(&self, items: Value) -> Value {
        let (status, body) = self.post("/api/v1/push", &json!({ "items": items })).await;
        assert_eq!(status, 201, "push failed: {body}");
        body
    }

    /// A non-waiting pop; `query` is appended as is.
    pub async fn pop(&self, queue: &str, query: &str) -> (u16, Value) {
        self.get(&format!("/api/v1/pop/queue/{queue}?wait=false&{query}")).await
    }

    /// A non-waiting pop of one partition.
    pub async fn pop_partition(&self, queue: &str, partition: &str, query: &str) -> (u16, Value) {
        self.get(&format!("/api/v1/pop/queue/{queue}/partition/{partition}?wait=false&{query}")).await
    }

    /// A non-waiting pop that must deliver something.
    pub async fn pop_some(&self, queue: &str, query: &str) -> Value {
        let (status, body) = self.pop(queue, query).await;
        assert_eq!(status, 200, "expected messages from {queue}?{query}, got {status} {body}");
        body
    }

    /// A non-waiting pop that must deliver nothing.
    pub async fn pop_none(&self, queue: &str, query: &str) {
        let (status, body) = self.pop(queue, query).await;
        assert_eq!(status, 204, "expected nothing from {queue}?{query}, got {status} {body}");
    }

    /// Acks one message of a pop answer.
    pub async fn ack(&self, msg: &Value, status: &str, group: Option<&str>) -> Value {
        self.ack_with(msg, status, None, group).await
    }

    /// Acks one message of a pop answer with an error text.
    pub async fn ack_with(
        &self,
        msg: &Value,
        status: &str,
        error: Option<&str>,
        group: Option<&str>,
    ) -> Value {
        let (code, body) = self
            .post(
                "/api/v1/ack",
                &json!({
                    "transactionId": msg["transactionId"], "partitionId": msg["partitionId"],
                    "leaseId": msg["leaseId"], "status": status, "error": error, "consumerGroup": group,
                }),
            )
            .await;
        assert_eq!(code, 200, "ack failed: {body}");
        assert!(body.is_array(), "ack answers an array: {body}");
        body[0].clone()
    }

    /// POST /api/v1/ack/batch; asserts 200 and answers the result array.
    pub async fn ack_batch(&self, acks: Value, group: Option<&str>) -> Value {
        let (code, body) =
            self.post("/api/v1/ack/batch", &json!({"acknowledgments": acks, "consumerGroup": group})).await;
        assert_eq!(code, 200, "batch ack failed: {body}");
        assert!(body.is_array(), "batch ack answers an array: {body}");
        body
    }

    /// GET /api/v1/dlq for one queue.
    pub async fn dlq(&self, queue: &str) -> Value {
        let (code, body) = self.get(&format!("/api/v1/dlq?queue={queue}&limit=100&offset=0")).await;
        assert_eq!(code, 200, "dlq failed: {body}");
        body
    }
}

/// A broker on its own database, serving HTTP until dropped.
pub struct TestBroker {
    pub base: String,
    pub db: String,
    pub engine: Arc<Engine>,
    pub http: reqwest::Client,
    api: Api,
    stop: Option<oneshot::Sender<()>>,
    owns_db: bool,
}

impl Deref for TestBroker {
    type Target = Api;
    fn deref(&self) -> &Api {
        &self.api
    }
}

impl TestBroker {
    /// A broker on a fresh database (dropped with the broker when the test passes).
    pub async fn start() -> Self {
        let db = fresh_database().await;
        let mut b = Self::on(&db).await;
        b.owns_db = true;
        b
    }

    /// A broker on a fresh database with its own HTTP settings.
    pub async fn start_with(config: ServerConfig) -> Self {
        let db = fresh_database().await;
        let mut b = Self::on_with(&db, config).await;
        b.owns_db = true;
        b
    }

    /// Another broker on an existing database (many brokers, one database).
    pub async fn on(db: &str) -> Self {
        Self::on_with(db, ServerConfig::default()).await
    }

    /// A broker on an existing database with its own HTTP settings.
    pub async fn on_with(db: &str, config: ServerConfig) -> Self {
        Self::on_with_engine(db, EngineOptions::default(), config).await
    }

    /// A broker on an existing database with its own engine options.
    pub async fn on_with_options(db: &str, options: EngineOptions) -> Self {
        Self::on_with_engine(db, options, ServerConfig::default()).await
    }

    /// A broker on a fresh database with its own engine options.
    pub async fn start_with_options(options: EngineOptions) -> Self {
        let db = fresh_database().await;
        let mut b = Self::on_with_options(&db, options).await;
        b.owns_db = true;
        b
    }

    /// A broker on a fresh database whose connection settings `adjust` changes
    /// (timeouts, pool size).
    pub async fn start_with_db(adjust: impl FnOnce(&mut DbConfig)) -> Self {
        let db = fresh_database().await;
        let mut cfg = db_config(&db);
        adjust(&mut cfg);
        let mut b = Self::on_db_config(&db, &cfg, EngineOptions::default(), ServerConfig::default()).await;
        b.owns_db = true;
        b
    }

    async fn on_with_engine(db: &str, options: EngineOptions, config: ServerConfig) -> Self {
        Self::on_db_config(db, &db_config(db), options, config).await
    }

    async fn on_db_config(db: &str, cfg: &DbConfig, options: EngineOptions, config: ServerConfig) -> Self {
        let engine = Arc::new(Engine::connect(cfg, options).expect("engine"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = engine.clone();
        tokio::spawn(async move {
            let _ = queen_server::serve(listener, serving, config, async move {
                let _ = stopped.await;
            })
            .await;
        });
        let api = Api::new(base.clone());
        TestBroker {
            base,
            db: db.to_owned(),
            engine,
            http: api.http.clone(),
            api,
            stop: Some(stop),
            owns_db: false,
        }
    }

    /// A clonable client of this broker.
    pub fn api(&self) -> Api {
        self.api.clone()
    }

    /// Transaction ids of a pop answer, in order.
    pub fn tx_ids(pop: &Value) -> Vec<String> {
        tx_ids(pop)
    }

    /// A direct SQL client on this broker's database, for assertions.
    pub async fn sql(&self) -> tokio_postgres::Client {
        sql_client(&self.db).await
    }

    /// One bigint (or count) from SQL.
    pub async fn scalar(&self, query: &str) -> i64 {
        scalar_of(&self.db, query).await
    }

    /// Rows in the tables a refused request must not touch.
    pub async fn written_rows(&self) -> i64 {
        self.scalar(
            "SELECT (SELECT count(*) FROM queen.queues) + (SELECT count(*) FROM queen.partitions)
                  + (SELECT count(*) FROM queen.messages) + (SELECT count(*) FROM queen.cursors)
                  + (SELECT count(*) FROM queen.consumer_groups) + (SELECT count(*) FROM queen.dead_letters)",
        )
        .await
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if self.owns_db {
            self.engine.close();
            drop_database_later(self.db.clone());
        }
    }
}

/// Transaction ids of a pop answer, in order.
pub fn tx_ids(pop: &Value) -> Vec<String> {
    pop["messages"]
        .as_array()
        .map(|m| m.iter().map(|x| x["transactionId"].as_str().unwrap_or("").to_owned()).collect())
        .unwrap_or_default()
}

/// `prefix-0`, `prefix-1`, ...
pub fn txids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

async fn read(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(format!("<not JSON> {text}")))
    };
    (status, body)
}

/// A real `queen serve` process on a test database, killed when dropped.
pub struct BrokerProcess {
    pub child: std::process::Child,
    pub api: Api,
}

impl BrokerProcess {
    /// Starts `queen serve` on `db` and waits until GET /ready answers 200.
    pub async fn spawn(db: &str) -> Self {
        Self::spawn_with(&ServeSpec::for_db(db)).await
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits for the process to exit, up to `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "queen serve did not exit within {limit:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// How to start a real `queen serve` process with [`BrokerProcess::spawn_with`]:
/// any database URL, a fixed port (so a restarted broker keeps its address),
/// extra environment, and optionally its stdout and stderr captured in a file.
pub struct ServeSpec {
    pub url: String,
    pub port: u16,
    /// Applied after the defaults of [`BrokerProcess::spawn`], so they win.
    pub env: Vec<(String, String)>,
    /// stdout and stderr are appended to this file (else discarded).
    pub log: Option<std::path::PathBuf>,
}

impl ServeSpec {
    /// A broker on test database `db`, on a free port.
    pub fn for_db(db: &str) -> Self {
        ServeSpec { url: url_for(db), port: free_port(), env: Vec::new(), log: None }
    }

    /// Adds one environment variable.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }
}

/// Waits until GET /ready answers 200 (the database answers and the schema
/// is migrated), up to `limit`.
pub async fn wait_healthy(api: &Api, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(resp) = api.http.get(api.url("/ready")).timeout(Duration::from_secs(2)).send().await {
            if resp.status().as_u16() == 200 {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{} did not become healthy within {limit:?}", api.base);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

impl BrokerProcess {
    /// Starts `queen serve` as `spec` says and waits until GET /ready answers 200.
    pub async fn spawn_with(spec: &ServeSpec) -> Self {
        let mut p = Self::start(spec);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(resp) = p.api.http.get(p.api.url("/ready")).timeout(Duration::from_secs(2)).send().await
            {
                if resp.status().as_u16() == 200 {
                    break;
                }
            }
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("queen serve exited early: {status}");
            }
            assert!(Instant::now() < deadline, "queen serve did not become ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        p
    }

    /// Starts `queen serve` as `spec` says, waiting for nothing.
    pub fn start(spec: &ServeSpec) -> Self {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_queen"));
        cmd.arg("serve")
            .env("QUEEN_DATABASE_URL", &spec.url)
            .env("PORT", spec.port.to_string())
            .env("HOST", "127.0.0.1")
            .env("DB_POOL_SIZE", "8")
            .env("RUST_LOG", "warn")
            // The push spool of every test broker under one temporary root
            // (a directory per database inside it), not in $HOME.
            .env("FILE_BUFFER_DIR", std::env::temp_dir().join("queen-test-spool"))
            .stdin(std::process::Stdio::null());
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        match &spec.log {
            Some(path) => {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("open the log file");
                cmd.stdout(file.try_clone().expect("dup the log file")).stderr(file);
            }
            None => {
                cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
            }
        }
        let child = cmd.spawn().expect("spawn queen serve");
        BrokerProcess { child, api: Api::new(format!("http://127.0.0.1:{}", spec.port)) }
    }

    /// SIGKILL (no shutdown of any kind) and reap the process.
    pub fn kill9(&mut self) -> std::process::ExitStatus {
        let _ = self.child.kill();
        self.child.wait().expect("wait for the killed broker")
    }
}

impl Deref for BrokerProcess {
    type Target = Api;
    fn deref(&self) -> &Api {
        &self.api
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Messages still on the cursors of `groups`, over every partition.
pub async fn group_backlog(sql: &tokio_postgres::Client, groups: &[&str]) -> i64 {
    sql.query_one(
        "SELECT coalesce(sum(p.next_seq - c.next_seq), 0)::bigint FROM queen.partitions p
           JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = ANY($1)",
        &[&groups],
    )
    .await
    .expect("backlog")
    .get(0)
}
