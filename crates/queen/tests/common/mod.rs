//! Test fixtures: a database per test, cloned from a migrated template, and
//! a broker serving it over real HTTP on an ephemeral port.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use queen_engine::{DbConfig, Engine, EngineOptions};
use queen_server::ServerConfig;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_postgres::NoTls;

/// The server tests create their databases on.
pub fn admin_url() -> String {
    std::env::var("QUEEN_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn url_for(db: &str) -> String {
    let admin = admin_url();
    match admin.rfind('/') {
        Some(i) => format!("{}/{db}", &admin[..i]),
        None => admin,
    }
}

async fn admin() -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&admin_url(), NoTls)
        .await
        .expect("connect to the test PostgreSQL (is it running? see scripts/test)");
    tokio::spawn(conn);
    client
}

/// A fresh database for one test, cloned from the migrated template.
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

/// Settings that reach a test database.
pub fn db_config(db: &str) -> DbConfig {
    DbConfig { url: Some(url_for(db)), pool_size: 8, ..DbConfig::default() }
}

/// A broker on its own database, serving HTTP until dropped.
pub struct TestBroker {
    pub base: String,
    pub db: String,
    pub engine: Arc<Engine>,
    pub http: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
}

impl TestBroker {
    /// A broker on a fresh database.
    pub async fn start() -> Self {
        let db = fresh_database().await;
        Self::on(&db).await
    }

    /// Another broker on an existing database (many brokers, one database).
    pub async fn on(db: &str) -> Self {
        let engine = Arc::new(Engine::connect(&db_config(db), EngineOptions::default()).expect("engine"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = engine.clone();
        tokio::spawn(async move {
            let _ = queen_server::serve(listener, serving, ServerConfig::default(), async move {
                let _ = stopped.await;
            })
            .await;
        });
        TestBroker {
            base,
            db: db.to_owned(),
            engine,
            http: reqwest::Client::builder().timeout(Duration::from_secs(60)).build().expect("http"),
            stop: Some(stop),
        }
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

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self.http.get(self.url(path)).send().await.expect("request");
        read(resp).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        let resp = self.http.delete(self.url(path)).send().await.expect("request");
        read(resp).await
    }

    /// Pushes `payloads` to `queue`/`partition` with the given transaction ids.
    pub async fn push(&self, queue: &str, partition: &str, items: &[(&str, Value)]) -> Value {
        let items: Vec<Value> = items
            .iter()
            .map(|(tx, payload)| {
                serde_json::json!({"queue": queue, "partition": partition, "transactionId": tx, "payload": payload})
            })
            .collect();
        let (status, body) = self.post("/api/v1/push", &serde_json::json!({ "items": items })).await;
        assert_eq!(status, 201, "push failed: {body}");
        body
    }

    /// A non-waiting pop; `query` is appended as is.
    pub async fn pop(&self, queue: &str, query: &str) -> (u16, Value) {
        self.get(&format!("/api/v1/pop/queue/{queue}?wait=false&{query}")).await
    }

    /// Transaction ids of a pop answer, in order.
    pub fn tx_ids(pop: &Value) -> Vec<String> {
        pop["messages"]
            .as_array()
            .map(|m| m.iter().map(|x| x["transactionId"].as_str().unwrap_or("").to_owned()).collect())
            .unwrap_or_default()
    }

    /// Acks one message of a pop answer.
    pub async fn ack(&self, msg: &Value, status: &str, group: Option<&str>) -> Value {
        let (code, body) = self
            .post(
                "/api/v1/ack",
                &serde_json::json!({
                    "transactionId": msg["transactionId"], "partitionId": msg["partitionId"],
                    "leaseId": msg["leaseId"], "status": status, "error": null, "consumerGroup": group,
                }),
            )
            .await;
        assert_eq!(code, 200, "ack failed: {body}");
        body[0].clone()
    }

    /// A direct SQL client on this broker's database, for assertions.
    pub async fn sql(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&url_for(&self.db), NoTls).await.expect("connect");
        tokio::spawn(conn);
        client
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn read(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    let body = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).expect("JSON body") };
    (status, body)
}
