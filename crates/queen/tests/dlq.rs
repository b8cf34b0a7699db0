//! Retries and the dead-letter queue, and GET /api/v1/dlq.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::{tx_ids, txids, TestBroker};
use serde_json::{json, Value};

/// Pops and nacks until the queue is empty; answers (deliveries, last ack result).
async fn nack_until_empty(b: &TestBroker, queue: &str, error: Option<&str>) -> (usize, Value) {
    let mut deliveries = 0;
    let mut last = Value::Null;
    loop {
        let (status, popped) = b.pop(queue, "batch=1").await;
        if status == 204 {
            return (deliveries, last);
        }
        assert_eq!(status, 200);
        deliveries += 1;
        assert!(deliveries < 20, "never dead-lettered");
        last = b.ack_with(&popped["messages"][0], "failed", error, None).await;
        assert_eq!(last["success"], true, "{last}");
    }
}

#[tokio::test]
async fn retry_limit_2_gives_3_deliveries_then_exactly_one_dead_letter_with_the_error_text() {
    let b = TestBroker::start().await;
    // Only leaseTime and retryLimit: the DLQ is on by default.
    b.configure_ok("retry2", json!({"leaseTime": 30, "retryLimit": 2})).await;
    b.push("retry2", "Default", &[("doomed", json!({"message": "hello"}))]).await;
    let (deliveries, last) = nack_until_empty(&b, "retry2", Some("Test error - triggering DLQ")).await;
    assert_eq!(deliveries, 3);
    assert_eq!(last["dlq"], true);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.dead_letters").await, 1);

    let (code, dlq) = b.get("/api/v1/dlq?queue=retry2&limit=100&offset=0").await;
    assert_eq!(code, 200);
    assert_eq!(dlq["total"], 1);
    let rows = dlq["messages"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row["data"]["message"], "hello");
    assert!(row["errorMessage"].as_str().unwrap().contains("Test error"), "{row}");
    assert_eq!(row["transactionId"], "doomed");
    assert!(row["partitionId"].is_string());
    assert_eq!(row["queue"], "retry2");
    assert_eq!(row["partition"], "Default");
    assert_eq!(row["consumerGroup"], "__QUEUE_MODE__");
    assert_eq!(row["retryCount"], 2);
    assert!(row["createdAt"].is_string() && row["failedAt"].is_string());
    // The cursor moved past it and the counter was reset.
    assert_eq!(
        b.scalar(
            "SELECT count(*) FROM queen.cursors WHERE next_seq = 1 AND retry_count = 0 AND lease_id IS NULL"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn default_retry_limit_allows_four_deliveries() {
    let b = TestBroker::start().await;
    b.push("defaults", "Default", &[("m", json!(1))]).await;
    let (deliveries, last) = nack_until_empty(&b, "defaults", None).await;
    assert_eq!(deliveries, 4);
    assert_eq!(last["dlq"], true);
    let dlq = b.dlq("defaults").await;
    assert_eq!(dlq["total"], 1);
    assert_eq!(dlq["messages"][0]["errorMessage"], "Retries exhausted");
}

#[tokio::test]
async fn retries_count_per_nack_call_and_the_rest_of_the_batch_redelivers_once() {
    let b = TestBroker::start().await;
    b.configure_ok("each", json!({"retryLimit": 1})).await;
    b.push_txids("each", "Default", &txids("m", 3)).await;
    // An each() consumer: nack the head, drop the rest of the batch.
    let first = b.pop_some("each", "batch=3").await;
    assert_eq!(tx_ids(&first), txids("m", 3));
    assert_eq!(b.ack_with(&first["messages"][0], "failed", Some("boom"), None).await["dlq"], false);
    let second = b.pop_some("each", "batch=3").await;
    assert_eq!(tx_ids(&second), txids("m", 3));
    assert_eq!(b.ack_with(&second["messages"][0], "failed", Some("boom"), None).await["dlq"], true);
    let rest = b.pop_some("each", "batch=3").await;
    assert_eq!(tx_ids(&rest), ["m-1", "m-2"]);
    assert_eq!(b.ack(&rest["messages"][1], "completed", None).await["leaseReleased"], true);
    b.pop_none("each", "batch=3").await;
    let dlq = b.dlq("each").await;
    assert_eq!(dlq["total"], 1);
    assert_eq!(dlq["messages"][0]["transactionId"], "m-0");
}

#[tokio::test]
async fn a_nack_covering_several_messages_counts_one_retry() {
    let b = TestBroker::start().await;
    b.configure_ok("onecall", json!({"retryLimit": 1})).await;
    b.push_txids("onecall", "Default", &txids("m", 3)).await;
    let popped = b.pop_some("onecall", "batch=3").await;
    let acks: Vec<Value> = popped["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "failed", "error": "all bad"}))
        .collect();
    let res = b.ack_batch(json!(acks), None).await;
    assert!(res.as_array().unwrap().iter().all(|r| r["success"] == true && r["dlq"] == false), "{res}");
    assert_eq!(b.scalar("SELECT retry_count::bigint FROM queen.cursors").await, 1);
    assert_eq!(tx_ids(&b.pop_some("onecall", "batch=3").await), txids("m", 3));
}

#[tokio::test]
async fn status_dlq_dead_letters_at_once() {
    let b = TestBroker::start().await;
    b.push_txids("poison", "Default", &txids("m", 2)).await;
    let popped = b.pop_some("poison", "batch=2").await;
    let r = b.ack_with(&popped["messages"][0], "dlq", Some("poison pill"), None).await;
    assert_eq!(r["success"], true);
    assert_eq!(r["dlq"], true);
    assert_eq!(tx_ids(&b.pop_some("poison", "batch=2").await), ["m-1"]);
    let dlq = b.dlq("poison").await;
    assert_eq!(dlq["total"], 1);
    assert_eq!(dlq["messages"][0]["transactionId"], "m-0");
    assert_eq!(dlq["messages"][0]["errorMessage"], "poison pill");
}

#[tokio::test]
async fn with_the_dlq_disabled_an_exhausted_message_is_dropped() {
    let b = TestBroker::start().await;
    b.configure_ok("nodlq", json!({"retryLimit": 0, "deadLetterQueue": false})).await;
    b.push_txids("nodlq", "Default", &txids("m", 2)).await;
    let popped = b.pop_some("nodlq", "batch=1").await;
    let r = b.ack_with(&popped["messages"][0], "failed", Some("gone"), None).await;
    assert_eq!(r["success"], true);
    assert_eq!(r["dlq"], false);
    assert_eq!(tx_ids(&b.pop_some("nodlq", "batch=10").await), ["m-1"], "m-0 was dropped");
    assert_eq!(b.dlq("nodlq").await["total"], 0);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.dead_letters").await, 0);
}

#[tokio::test]
async fn retry_limit_0_in_a_transaction_dead_letters_at_once() {
    let b = TestBroker::start().await;
    b.configure_ok("txdlq", json!({"retryLimit": 0})).await;
    b.push("txdlq", "Default", &[("m", json!({"message": "tx"}))]).await;
    let popped = b.pop_some("txdlq", "batch=1").await;
    let m = &popped["messages"][0];
    let (code, body) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "ack", "transactionId": "m", "partitionId": m["partitionId"],
                                    "status": "failed", "leaseId": m["leaseId"]}],
                    "requiredLeases": [m["leaseId"]]}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["success"], true, "{body}");
    assert_eq!(body["results"][0]["dlq"], true);
    b.pop_none("txdlq", "batch=1").await;
    let dlq = b.dlq("txdlq").await;
    assert_eq!(dlq["total"], 1);
    assert_eq!(dlq["messages"][0]["data"]["message"], "tx");
}

#[tokio::test]
async fn dlq_listing_pages_and_filters() {
    let b = TestBroker::start().await;
    b.configure_ok("pages", json!({"retryLimit": 0})).await;
    b.push_txids("pages", "Default", &txids("m", 3)).await;
    b.push_txids("pages", "other", &txids("o", 1)).await;
    for group in [None, Some("g")] {
        let q = match group {
            Some(g) => format!("batch=10&partitions=2&subscriptionMode=all&consumerGroup={g}"),
            None => "batch=10&partitions=2".to_owned(),
        };
        loop {
            let (status, popped) = b.pop("pages", &q).await;
            if status == 204 {
                break;
            }
            for m in popped["messages"].as_array().unwrap() {
                b.ack_with(m, "dlq", Some("bad"), group).await;
            }
        }
    }
    let all = b.dlq("pages").await;
    assert_eq!(all["total"], 8);
    let (_, page) = b.get("/api/v1/dlq?queue=pages&limit=3&offset=0").await;
    assert_eq!(page["messages"].as_array().unwrap().len(), 3);
    assert_eq!(page["total"], 8);
    let (_, page) = b.get("/api/v1/dlq?queue=pages&limit=3&offset=6").await;
    assert_eq!(page["messages"].as_array().unwrap().len(), 2);
    let (_, g) = b.get("/api/v1/dlq?queue=pages&consumerGroup=g&limit=100&offset=0").await;
    assert_eq!(g["total"], 4);
    let (_, p) = b.get("/api/v1/dlq?queue=pages&partition=other&limit=100&offset=0").await;
    assert_eq!(p["total"], 2);
    let (_, none) = b.get("/api/v1/dlq?queue=elsewhere&limit=100&offset=0").await;
    assert_eq!(none, json!({"messages": [], "total": 0}));
    for bad in ["limit=0", "limit=abc", "offset=-1", "from=whenever"] {
        let (code, body) = b.get(&format!("/api/v1/dlq?queue=pages&{bad}")).await;
        assert_eq!(code, 400, "{bad}: {body}");
        assert!(body["error"].is_string());
    }
}

/// The engine writes each dead letter from one read of its fields
/// (`queen.dead_letter_rows`): the listing and the dashboard's keyset page
/// answer the same element, every field present, null or not; a page past
/// the end is empty and still counts the filter.
#[tokio::test]
async fn a_dead_letter_is_one_element_in_the_listing_and_the_dashboards_page() {
    let b = TestBroker::start().await;
    b.configure_ok("one", json!({"retryLimit": 0})).await;
    b.push("one", "p", &[("only", json!({"n": 1})), ("second", json!(2))]).await;
    let popped = b.pop_some("one", "batch=2").await;
    let first = &popped["messages"][0];
    b.ack_with(first, "dlq", Some("bad"), None).await;
    let listed = b.dlq("one").await;
    assert_eq!(listed["total"], 1, "{listed}");
    let element = &listed["messages"][0];
    let mut keys: Vec<&String> = element.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "consumerGroup",
            "createdAt",
            "data",
            "dlqId",
            "errorMessage",
            "failedAt",
            "id",
            "partition",
            "partitionId",
            "producerSub",
            "queue",
            "retryCount",
            "traceId",
            "transactionId"
        ]
    );
    assert_eq!(
        [&element["data"], &element["errorMessage"], &element["transactionId"], &element["queue"]],
        [&json!({"n": 1}), &json!("bad"), &json!("only"), &json!("one")]
    );
    assert_eq!([&element["id"], &element["partitionId"]], [&first["id"], &first["partitionId"]]);
    assert_eq!(
        [&element["partition"], &element["consumerGroup"], &element["retryCount"]],
        [&json!("p"), &json!("__QUEUE_MODE__"), &json!(0)]
    );
    assert_eq!([&element["traceId"], &element["producerSub"]], [&Value::Null, &Value::Null]);
    assert!(element["dlqId"].is_i64() && element["createdAt"].is_string() && element["failedAt"].is_string());

    let page: Value =
        serde_json::from_str(&b.engine.dlq_page(Some("one"), None, 10).await.unwrap().0).unwrap();
    assert_eq!(page, json!({"messages": [element], "nextBefore": null, "total": 1}));
    let full: Value =
        serde_json::from_str(&b.engine.dlq_page(Some("one"), None, 1).await.unwrap().0).unwrap();
    assert_eq!(full["nextBefore"], element["dlqId"], "a full page names where the next one starts");
    let after: Value =
        serde_json::from_str(&b.engine.dlq_page(Some("one"), element["dlqId"].as_i64(), 10).await.unwrap().0)
            .unwrap();
    assert_eq!(after, json!({"messages": [], "nextBefore": null, "total": 1}));
    let (_, past) = b.get("/api/v1/dlq?queue=one&limit=10&offset=5").await;
    assert_eq!(past, json!({"messages": [], "total": 1}));
}
