//! A server that does not accept writes (a standby, or a primary being
//! demoted) is never used: a connection that lands on one is refused at
//! connect time (`target_session_attrs=read-write` is always set), the call
//! answers 503 with Retry-After and writes nothing, and the broker comes back
//! by itself once the server accepts writes again.
//!
//! A database-wide `default_transaction_read_only` plays the standby here:
//! new sessions on it are read-only, as on a hot standby.
mod common;

use std::time::{Duration, Instant};

use common::TestBroker;
use serde_json::json;

#[tokio::test]
async fn sessions_on_a_read_only_server_are_refused_and_answered_503() {
    let b = TestBroker::start().await;
    b.push("ro", "Default", &[("before", json!({"n": 1}))]).await;
    let sql = b.sql().await;
    sql.batch_execute(&format!("ALTER DATABASE {} SET default_transaction_read_only = on", b.db))
        .await
        .expect("alter");
    // Every pooled session ends; new ones start read-only.
    sql.batch_execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND application_name = 'queen-rs'",
    )
    .await
    .expect("terminate");

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = b
            .http
            .post(b.url("/api/v1/push"))
            .json(&json!({"items": [{"queue": "ro", "transactionId": "during", "payload": {}}]}))
            .send()
            .await
            .expect("an answer");
        let status = resp.status().as_u16();
        if status == 503 {
            assert!(resp.headers().contains_key("retry-after"), "503 carries Retry-After");
            break;
        }
        // A call on a session that was already gone may race the terminate.
        assert!(Instant::now() < deadline, "never 503: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stored: i64 = sql
        .query_one("SELECT count(*) FROM queen.messages WHERE transaction_id = 'during'", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(stored, 0, "nothing written while the server was read-only");
    // No read-only session is kept: attempts open one briefly (to ask
    // whether it takes writes) and close it, so the count drops to 0.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let kept: i64 = sql
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND application_name = 'queen-rs'",
                &[],
            )
            .await
            .expect("count")
            .get(0);
        if kept == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{kept} broker sessions stay on a read-only server");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    sql.batch_execute(&format!("ALTER DATABASE {} RESET default_transaction_read_only", b.db))
        .await
        .expect("reset");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = b
            .post(
                "/api/v1/push",
                &json!({"items": [{"queue": "ro", "transactionId": "after", "payload": {}}]}),
            )
            .await;
        if status == 201 {
            break;
        }
        assert_eq!(status, 503);
        assert!(Instant::now() < deadline, "the broker did not come back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, popped) = b.pop("ro", "batch=10").await;
    let ids: Vec<&str> =
        popped["messages"].as_array().unwrap().iter().map(|m| m["transactionId"].as_str().unwrap()).collect();
    assert_eq!(ids, ["before", "after"]);
}
