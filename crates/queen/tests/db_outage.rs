//! PostgreSQL going away: the broker answers 503 with Retry-After while it
//! is gone, recovers by itself when it returns, and loses nothing committed.
//! The outage is a TCP proxy between the broker and PostgreSQL that the test
//! cuts and restores, so the shared test server keeps running.
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::CutProxy;
use queen_engine::{DbConfig, Engine, EngineOptions};
use queen_server::ServerConfig;
use tokio::net::TcpListener;

#[tokio::test]
async fn database_outage_answers_503_with_retry_after_and_recovers_without_restart() {
    let db = common::fresh_database().await;
    let proxy = CutProxy::start(common::admin_host_port()).await;
    let url = proxy.url(&db);
    let engine = Arc::new(
        Engine::connect(
            &DbConfig { url: Some(url), pool_size: 4, ..DbConfig::default() },
            EngineOptions::default(),
        )
        .expect("engine"),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(queen_server::serve(listener, engine, ServerConfig::default(), std::future::pending()));
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().expect("http");
    let push = |tx: &'static str| {
        http.post(format!("{base}/api/v1/push"))
            .json(&serde_json::json!({"items": [{"queue": "outage", "payload": {"tx": tx}, "transactionId": tx}]}))
            .send()
    };

    assert_eq!(push("before").await.expect("push").status(), 201);

    proxy.cut();
    let resp = push("during").await.expect("push during the outage");
    assert_eq!(resp.status(), 503, "a database that is down is a 503");
    assert_eq!(resp.headers().get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    let body: serde_json::Value = resp.json().await.expect("json");
    assert!(body["error"].is_string(), "503 body carries an error: {body}");
    // Liveness stays 200; readiness says the database is away.
    let health = http.get(format!("{base}/health")).send().await.expect("health");
    assert_eq!(health.status(), 200);
    let ready = http.get(format!("{base}/ready")).send().await.expect("ready");
    assert_eq!(ready.status(), 503);

    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = push("after").await.expect("push after").status();
        if status == 201 {
            break;
        }
        assert_eq!(status, 503, "while recovering the broker answers 503, never another error");
        assert!(Instant::now() < deadline, "the broker did not recover by itself");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let popped: serde_json::Value = http
        .get(format!("{base}/api/v1/pop/queue/outage?batch=10&wait=false"))
        .send()
        .await
        .expect("pop")
        .json()
        .await
        .expect("json");
    let txs: Vec<&str> = popped["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["transactionId"].as_str())
        .collect();
    assert_eq!(
        txs,
        ["before", "after"],
        "what was committed before the outage survives; the refused push did not happen"
    );
}
