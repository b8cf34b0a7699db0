//! Bad input: a 4xx with a JSON `error` naming the field, never a 500, and
//! nothing written.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::{txids, TestBroker};
use queen_server::ServerConfig;
use serde_json::{json, Value};

/// Asserts a 400 whose `error` names `field`.
#[track_caller]
fn assert_names(code: u16, body: &Value, field: &str) {
    assert_eq!(code, 400, "expected 400 naming {field}, got {code} {body}");
    let error = body["error"].as_str().unwrap_or_else(|| panic!("no error string in {body}"));
    assert!(error.contains(field), "error {error:?} does not name {field}");
}

/// The state of every cursor, to show a refused ack changed nothing.
async fn cursors(b: &TestBroker) -> Vec<String> {
    let client = b.sql().await;
    client
        .query(
            "SELECT concat_ws('/', partition_id, consumer_group, next_seq, lease_id, lease_expires_at, batch_end, retry_count)
               FROM queen.cursors ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn push_refuses_a_body_that_is_not_json() {
    let b = TestBroker::start().await;
    for text in ["{\"items\": [", "items=1", ""] {
        let (code, body) = b.post_raw("/api/v1/push", text).await;
        assert_names(code, &body, "body");
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn push_refuses_a_body_without_items() {
    let b = TestBroker::start().await;
    let (code, body) = b.post("/api/v1/push", &json!({"messages": []})).await;
    assert_names(code, &body, "items");
    let (code, body) = b.post("/api/v1/push", &json!({"items": {"queue": "q"}})).await;
    assert_names(code, &body, "items");
    // An array is not read as the struct by position.
    for array in [json!([{"queue": "q"}]), json!([[{"queue": "q", "transactionId": "t", "payload": 1}]])] {
        let (code, body) = b.post("/api/v1/push", &array).await;
        assert_names(code, &body, "body");
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn push_refuses_an_item_without_a_queue_and_writes_none_of_the_others() {
    let b = TestBroker::start().await;
    let good = json!({"queue": "q", "partition": "Default", "transactionId": "ok", "payload": 1});
    for bad in [json!({"payload": 1}), json!({"queue": "", "payload": 1}), json!({"queue": 7, "payload": 1})]
    {
        let (code, body) = b.post("/api/v1/push", &json!({"items": [good, bad]})).await;
        assert_names(code, &body, "items[1].queue");
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn push_refuses_a_non_object_item() {
    let b = TestBroker::start().await;
    let good = json!({"queue": "q", "transactionId": "ok", "payload": 1});
    for bad in [json!("q"), json!(null), json!([1])] {
        let (code, body) = b.post("/api/v1/push", &json!({"items": [good, bad]})).await;
        assert_names(code, &body, "items[1]");
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn push_refuses_bad_partition_and_transaction_id_fields() {
    let b = TestBroker::start().await;
    let cases = [
        (json!({"queue": "q", "partition": 5, "payload": 1}), "items[0].partition"),
        (json!({"queue": "q", "partition": "", "payload": 1}), "items[0].partition"),
        (json!({"queue": "q", "transactionId": 5, "payload": 1}), "items[0].transactionId"),
        (json!({"queue": "q", "transactionId": "", "payload": 1}), "items[0].transactionId"),
        (json!({"queue": "x".repeat(300), "payload": 1}), "items[0].queue"),
    ];
    for (item, field) in cases {
        let (code, body) = b.post("/api/v1/push", &json!({"items": [item]})).await;
        assert_names(code, &body, field);
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn ack_refuses_a_partition_id_that_is_not_a_uuid() {
    let b = TestBroker::start().await;
    b.push_txids("q", "Default", &txids("t", 2)).await;
    let popped = b.pop_some("q", "batch=2").await;
    let before = cursors(&b).await;
    let m = &popped["messages"][0];
    let (code, body) = b
        .post(
            "/api/v1/ack",
            &json!({"transactionId": "t-0", "partitionId": "Default", "status": "completed"}),
        )
        .await;
    assert_names(code, &body, "partitionId");
    let (code, body) = b
        .post("/api/v1/ack", &json!({"transactionId": "t-0", "status": "completed", "leaseId": m["leaseId"]}))
        .await;
    assert_names(code, &body, "partitionId");
    // In a batch, one bad item refuses the whole call: the good one is not applied.
    let good = json!({"transactionId": "t-1", "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "completed"});
    let bad = json!({"transactionId": "t-0", "partitionId": "not-a-uuid", "status": "completed"});
    let (code, body) = b.post("/api/v1/ack/batch", &json!({"acknowledgments": [good, bad]})).await;
    assert_names(code, &body, "acknowledgments[1].partitionId");
    assert_eq!(cursors(&b).await, before);
}

#[tokio::test]
async fn ack_refuses_a_bad_status_and_other_malformed_fields() {
    let b = TestBroker::start().await;
    b.push_txids("q", "Default", &txids("t", 1)).await;
    let popped = b.pop_some("q", "batch=1").await;
    let before = cursors(&b).await;
    let pid = popped["partitionId"].clone();
    let cases = [
        (json!({"transactionId": "t-0", "partitionId": pid, "status": "done"}), "status"),
        (json!({"transactionId": "t-0", "partitionId": pid, "status": 1}), "status"),
        (json!({"partitionId": pid, "status": "completed"}), "transactionId"),
        (json!({"transactionId": "t-0", "partitionId": pid, "status": "failed", "error": 3}), "error"),
        (json!({"transactionId": "t-0", "partitionId": pid, "leaseId": 3}), "leaseId"),
        (json!({"transactionId": "t-0", "partitionId": pid, "consumerGroup": 3}), "consumerGroup"),
    ];
    for (ack, field) in cases {
        let (code, body) = b.post("/api/v1/ack", &ack).await;
        assert_names(code, &body, field);
    }
    let (code, body) = b.post_raw("/api/v1/ack", "{\"transactionId\": ").await;
    assert_names(code, &body, "body");
    let (code, body) =
        b.post("/api/v1/ack/batch", &json!([[{"transactionId": "t-0", "partitionId": pid}]])).await;
    assert_names(code, &body, "body");
    let (code, body) = b.post("/api/v1/ack/batch", &json!({"acks": []})).await;
    assert_names(code, &body, "acknowledgments");
    let (code, body) = b.post("/api/v1/ack/batch", &json!({"acknowledgments": {}})).await;
    assert_names(code, &body, "acknowledgments");
    let (code, body) = b.post("/api/v1/ack/batch", &json!({"acknowledgments": [], "consumerGroup": 5})).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(cursors(&b).await, before);
}

#[tokio::test]
async fn pop_refuses_bad_query_parameters_and_registers_nothing() {
    let b = TestBroker::start().await;
    let cases = [
        ("batch=abc", "batch"),
        ("batch=0", "batch"),
        ("batch=-3", "batch"),
        ("wait=maybe", "wait"),
        ("wait=true&timeout=-1", "timeout"),
        ("timeout=soon", "timeout"),
        ("partitions=abc", "partitions"),
        ("partitions=0", "partitions"),
        ("leaseSeconds=0", "leaseSeconds"),
        ("autoAck=yes", "autoAck"),
    ];
    for (query, field) in cases {
        let (code, body) = b.get(&format!("/api/v1/pop/queue/q?{query}")).await;
        assert_names(code, &body, field);
        let (code, body) = b.get(&format!("/api/v1/pop/queue/q/partition/p?{query}")).await;
        assert_names(code, &body, field);
    }
    assert_eq!(b.written_rows().await, 0, "no queue, group or cursor was created");
}

#[tokio::test]
async fn configure_refuses_malformed_bodies() {
    let b = TestBroker::start().await;
    let cases = [
        (json!({"options": {}}), "queue"),
        (json!({"queue": "", "options": {}}), "queue"),
        (json!({"queue": "q", "options": []}), "options"),
        (json!({"queue": "q", "mode": "overwrite"}), "mode"),
        (json!({"queue": "q", "namespace": 5}), "namespace"),
        (json!({"queue": "q", "options": {"deadLetterQueue": "yes"}}), "deadLetterQueue"),
        (json!({"queue": "q", "options": {"retryLimit": -1}}), "retryLimit"),
        (json!({"queue": "q", "options": {"retryLimit": 1.5}}), "retryLimit"),
    ];
    for (body, field) in cases {
        let (code, answer) = b.post("/api/v1/configure", &body).await;
        assert_names(code, &answer, field);
    }
    let (code, answer) = b.post_raw("/api/v1/configure", "nope").await;
    assert_names(code, &answer, "body");
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_writes_nothing() {
    let b =
        TestBroker::start_with(ServerConfig { max_body_bytes: 1024 * 1024, ..ServerConfig::default() }).await;
    let blob = "x".repeat(2 * 1024 * 1024);
    let body = json!({"items": [{"queue": "q", "transactionId": "big", "payload": blob}]}).to_string();
    let (code, answer) = b.post_raw("/api/v1/push", body).await;
    assert_eq!(code, 413, "{answer}");
    assert!(answer["error"].is_string(), "{answer}");
    assert_eq!(b.written_rows().await, 0);
    // Just under the limit is fine.
    let blob = "x".repeat(1000 * 1024);
    let body = json!({"items": [{"queue": "q", "transactionId": "ok", "payload": blob}]}).to_string();
    let (code, answer) = b.post_raw("/api/v1/push", body).await;
    assert_eq!(code, 201, "{answer}");
}

#[tokio::test]
async fn unknown_routes_are_a_json_404() {
    let b = TestBroker::start().await;
    let (code, body) = b.get("/api/v1/nope").await;
    assert_eq!(code, 404);
    assert!(body["error"].is_string(), "{body}");
}
