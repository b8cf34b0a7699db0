//! The broker behind pgbouncer (Debian's 1.18, started by scripts/pgbouncer):
//! - session mode works with the defaults;
//! - transaction mode works with `QUEEN_PREPARED_STATEMENTS=false`, two
//!   broker processes racing on one database, and LISTEN over a direct URL;
//! - transaction mode with prepared statements on fails (which is why the
//!   switch exists), loudly, never with a wrong answer.
//!
//! The pools are tiny and reset after every transaction, so a statement that
//! outlives its transaction fails every time instead of by luck.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{free_port, url_for, Api, BrokerProcess, ServeSpec, TestDb};
use serde_json::{json, Value};
use tokio::sync::Barrier;

/// A pgbouncer of our own, stopped when dropped.
struct Bouncer {
    port: u16,
    dir: PathBuf,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pgbouncer")
}

impl Bouncer {
    fn start(mode: &str, pool_size: u32) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("queen-pgb-{mode}-{port}"));
        let out = Command::new(script())
            .args(["start", mode, &port.to_string()])
            .arg(&dir)
            .env("PGB_POOL_SIZE", pool_size.to_string())
            .env("PGB_RESET_ALWAYS", "1")
            .output()
            .expect("run scripts/pgbouncer");
        assert!(out.status.success(), "pgbouncer start: {}", String::from_utf8_lossy(&out.stderr));
        Bouncer { port, dir }
    }

    /// The URL of test database `db` through this pgbouncer.
    fn url(&self, db: &str) -> String {
        let direct = url_for(db);
        let (scheme_user, rest) = direct.split_once('@').unwrap();
        let (_, path) = rest.split_once('/').unwrap();
        format!("{scheme_user}@127.0.0.1:{}/{path}", self.port)
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["stop", &self.port.to_string()]).arg(&self.dir).output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn broker(url: String, env: &[(&str, &str)]) -> BrokerProcess {
    let mut spec = ServeSpec { url, port: free_port(), env: Vec::new(), log: None };
    for (k, v) in env {
        spec = spec.env(k, v);
    }
    BrokerProcess::spawn_with(&spec).await
}

async fn kv(api: &Api, op: Value) -> Value {
    let (status, body) = api.post("/api/v1/kv", &json!({ "operations": [op] })).await;
    assert_eq!(status, 200, "{body}");
    body["results"][0].clone()
}

/// Pushes, pops and acks across both brokers, and races KV writes: every
/// message is delivered once, one putIfAbsent wins, incr counts exactly.
async fn exact_workload(a: &Api, b: &Api) {
    let ids: Vec<String> = (0..60).map(|i| format!("m{i:03}")).collect();
    for (i, chunk) in ids.chunks(10).enumerate() {
        let via = if i.is_multiple_of(2) { a } else { b };
        let items: Vec<Value> = chunk
            .iter()
            .map(|id| json!({"queue": "pgb", "partition": format!("p{}", i % 3), "transactionId": id, "payload": {"id": id}}))
            .collect();
        let (status, body) = via.post("/api/v1/push", &json!({ "items": items })).await;
        assert_eq!(status, 201, "{body}");
    }
    let mut seen = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut turn = 0usize;
    while seen.len() < ids.len() {
        assert!(Instant::now() < deadline, "only {} of {} delivered", seen.len(), ids.len());
        let via = if turn.is_multiple_of(2) { a } else { b };
        turn += 1;
        let (status, popped) = via.pop("pgb", "batch=7").await;
        if status == 204 {
            continue;
        }
        assert_eq!(status, 200, "{popped}");
        for m in popped["messages"].as_array().unwrap() {
            let id = m["transactionId"].as_str().unwrap().to_owned();
            assert!(seen.insert(id.clone()), "{id} delivered twice");
            let other = if turn.is_multiple_of(2) { a } else { b };
            assert_eq!(other.ack(m, "completed", None).await["success"], json!(true));
        }
    }
    let (status, _) = a.pop("pgb", "batch=10").await;
    assert_eq!(status, 204, "nothing left after every ack");

    let n = 24;
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let api = if i % 2 == 0 { a.clone() } else { b.clone() };
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let won = kv(&api, json!({"op": "putIfAbsent", "ns": "pgb", "key": "once", "value": {"by": i}, "ttlSeconds": 600}))
                .await;
            let counted =
                kv(&api, json!({"op": "incr", "ns": "pgb", "key": "count", "delta": 1, "ttlSeconds": 600})).await;
            (won, counted)
        }));
    }
    let mut winners = 0;
    let mut counts = Vec::new();
    for t in tasks {
        let (won, counted) = t.await.unwrap();
        if won["applied"] == json!(true) {
            winners += 1;
        }
        assert_eq!(counted["applied"], json!(true), "{counted}");
        counts.push(counted["value"].as_i64().unwrap());
    }
    assert_eq!(winners, 1, "one putIfAbsent wins");
    counts.sort();
    assert_eq!(counts, (1..=n as i64).collect::<Vec<_>>(), "each incr saw its own count");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_mode_works_with_the_defaults() {
    let db = TestDb::create().await;
    // Session mode gives a client a server for as long as it stays: the
    // pool must hold both brokers' connections (8 each) and listeners.
    let pgb = Bouncer::start("session", 20);
    let a = broker(pgb.url(&db.name), &[]).await;
    let b = broker(pgb.url(&db.name), &[]).await;
    exact_workload(&a.api, &b.api).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transaction_mode_works_with_prepared_statements_off() {
    let db = TestDb::create().await;
    let pgb = Bouncer::start("transaction", 3);
    let direct = url_for(&db.name);
    let off = [("QUEEN_PREPARED_STATEMENTS", "false"), ("QUEEN_LISTEN_DATABASE_URL", direct.as_str())];
    let a = broker(pgb.url(&db.name), &off).await;
    // Broker B re-checks rarely, so a quick wake-up can only come from LISTEN.
    let slow = [
        ("QUEEN_PREPARED_STATEMENTS", "false"),
        ("QUEEN_LISTEN_DATABASE_URL", direct.as_str()),
        ("QUEEN_POLL_INTERVAL_MS", "20000"),
    ];
    let b = broker(pgb.url(&db.name), &slow).await;
    exact_workload(&a.api, &b.api).await;

    // A long poll on B is woken by a push on A, through the direct LISTEN.
    let waiting = {
        let b = b.api.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let (status, body) = b.get("/api/v1/pop/queue/woken?batch=1&wait=true&timeout=15000").await;
            (status, body, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.push("woken", "Default", &[("w1", json!({"w": 1}))]).await;
    let (status, body, took) = waiting.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["messages"][0]["transactionId"], "w1");
    assert!(took < Duration::from_secs(5), "woken by the notification, not the 20 s re-check: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transaction_mode_with_prepared_statements_on_fails_loudly() {
    let db = TestDb::create().await;
    let pgb = Bouncer::start("transaction", 3);
    // Migrations use unnamed statements, so the broker starts; its first
    // prepared statement is gone by the time it is executed.
    let a = broker(pgb.url(&db.name), &[]).await;
    let (status, body) = a
        .post("/api/v1/push", &json!({"items": [{"queue": "q", "transactionId": "x", "payload": {}}]}))
        .await;
    assert_eq!(status, 500, "a prepared statement cannot cross transactions here: {body}");
    let direct = BrokerProcess::spawn(&db.name).await;
    let (status, _) = direct.pop("q", "batch=1").await;
    assert_eq!(status, 204, "and nothing was written");
}
