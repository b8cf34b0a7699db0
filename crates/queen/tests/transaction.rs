//! POST /api/v1/transaction: pushes and acks in one commit, fenced by leases.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{eventually, tx_ids, TestBroker};
use serde_json::{json, Value};

fn ack_op(m: &Value, with_lease: bool) -> Value {
    let mut op = json!({"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"],
                        "status": "completed"});
    if with_lease {
        op["leaseId"] = m["leaseId"].clone();
    }
    op
}

fn push_op(queue: &str, txids: &[&str]) -> Value {
    let items: Vec<Value> =
        txids.iter().map(|t| json!({"queue": queue, "payload": {"t": t}, "transactionId": t})).collect();
    json!({"type": "push", "items": items})
}

async fn transaction(b: &TestBroker, body: Value) -> Value {
    let (code, answer) = b.post("/api/v1/transaction", &body).await;
    assert_eq!(code, 200, "a transaction verdict is always 200: {answer}");
    answer
}

fn assert_rolled_back(answer: &Value) {
    assert_eq!(answer["success"], false, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("rolled back"), "{answer}");
    assert_eq!(answer["results"], json!([]));
    assert!(answer["transactionId"].is_string());
}

/// One message in `queue`, popped: the message (with its lease).
async fn leased(b: &TestBroker, queue: &str, tx: &str, query: &str) -> Value {
    b.push(queue, "Default", &[(tx, json!({"t": tx}))]).await;
    let popped = b.pop_some(queue, query).await;
    popped["messages"][0].clone()
}

#[tokio::test]
async fn push_and_ack_commit_together_with_flat_results() {
    let b = TestBroker::start().await;
    let m = leased(&b, "src", "t0", "batch=1").await;
    let answer = transaction(
        &b,
        json!({"operations": [push_op("dst", &["t1", "t2"]), ack_op(&m, true)], "requiredLeases": [m["leaseId"]]}),
    )
    .await;
    assert_eq!(answer["success"], true, "{answer}");
    let r = answer["results"].as_array().unwrap();
    assert_eq!(r.len(), 3);
    assert_eq!((r[0]["index"].clone(), r[0]["type"].clone()), (json!(0), json!("push")));
    assert_eq!(r[0]["transactionId"], "t1");
    assert_eq!(r[0]["queueName"], "dst");
    assert!(r[0]["messageId"].is_string() && r[0]["success"] == true);
    assert_eq!((r[1]["index"].clone(), r[1]["transactionId"].clone()), (json!(1), json!("t2")));
    assert_eq!((r[2]["index"].clone(), r[2]["type"].clone()), (json!(2), json!("ack")));
    assert_eq!(r[2]["transactionId"], "t0");
    assert_eq!(r[2]["success"], true);
    assert_eq!(r[2]["error"], json!(null));
    assert_eq!(r[2]["dlq"], false);
    // Visible to the very next non-waiting pop; the ack committed.
    let out = b.pop_some("dst", "batch=10").await;
    assert_eq!(tx_ids(&out), ["t1", "t2"]);
    assert_eq!(out["partition"], "Default");
    assert_eq!(out["messages"][0]["id"], r[0]["messageId"]);
    b.pop_none("src", "batch=10").await;
}

#[tokio::test]
async fn results_follow_operations_order() {
    let b = TestBroker::start().await;
    let m = leased(&b, "src", "t0", "batch=1").await;
    let answer = transaction(
        &b,
        json!({"operations": [ack_op(&m, true), push_op("dst", &["a", "b"]), push_op("dst2", &["c"])],
               "requiredLeases": [m["leaseId"]]}),
    )
    .await;
    assert_eq!(answer["success"], true, "{answer}");
    let kinds: Vec<(i64, String, String)> = answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["index"].as_i64().unwrap(),
                x["type"].as_str().unwrap().into(),
                x["transactionId"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (0, "ack".into(), "t0".into()),
            (1, "push".into(), "a".into()),
            (2, "push".into(), "b".into()),
            (3, "push".into(), "c".into())
        ]
    );
}

#[tokio::test]
async fn ack_under_an_expired_lease_rolls_back_the_whole_bundle() {
    let b = TestBroker::start().await;
    let m = leased(&b, "src", "t0", "batch=1&leaseSeconds=1").await;
    let held = leased(&b, "other", "o1", "batch=1&leaseSeconds=60").await;
    eventually(Duration::from_secs(5), "the lease to expire", || async {
        (b.scalar("SELECT count(*) FROM queen.cursors WHERE lease_expires_at <= now()").await == 1)
            .then_some(())
    })
    .await;
    let before = b.written_rows().await;
    let answer = transaction(
        &b,
        json!({"operations": [push_op("dst", &["t1"]), ack_op(&m, true), ack_op(&held, true)],
               "requiredLeases": [m["leaseId"], held["leaseId"]]}),
    )
    .await;
    assert_rolled_back(&answer);
    assert!(answer["error"].as_str().unwrap().starts_with("QTXN"), "{answer}");
    assert_eq!(b.written_rows().await, before, "nothing of the bundle happened");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.queues WHERE name = 'dst'").await, 0);
    // The new holder of the message acks it under its own lease; the other
    // ack still holds under its 60 s lease; then both queues pop empty.
    let again = b.pop_some("src", "batch=1").await;
    assert_eq!(tx_ids(&again), ["t0"]);
    let answer = transaction(
        &b,
        json!({"operations": [ack_op(&again["messages"][0], true), ack_op(&held, true)],
               "requiredLeases": [again["messages"][0]["leaseId"], held["leaseId"]]}),
    )
    .await;
    assert_eq!(answer["success"], true, "{answer}");
    b.pop_none("src", "batch=1").await;
    b.pop_none("other", "batch=1").await;
}

#[tokio::test]
async fn ack_of_a_never_pushed_transaction_id_rolls_back() {
    let b = TestBroker::start().await;
    let m = leased(&b, "src", "t0", "batch=1").await;
    let mut ghost = ack_op(&m, true);
    ghost["transactionId"] = json!("never-pushed");
    let answer = transaction(
        &b,
        json!({"operations": [push_op("dst", &["t1"]), ghost], "requiredLeases": [m["leaseId"]]}),
    )
    .await;
    assert_rolled_back(&answer);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages WHERE transaction_id = 't1'").await, 0);
    // The real lease was not burnt.
    assert_eq!(b.ack(&m, "completed", None).await["success"], true);
}

#[tokio::test]
async fn an_already_acked_message_rolls_the_bundle_back() {
    let b = TestBroker::start().await;
    let m = leased(&b, "src", "t0", "batch=1").await;
    assert_eq!(b.ack(&m, "completed", None).await["success"], true);
    let answer = transaction(
        &b,
        json!({"operations": [push_op("dst", &["t1"]), ack_op(&m, false)], "requiredLeases": []}),
    )
    .await;
    assert_rolled_back(&answer);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages WHERE transaction_id = 't1'").await, 0);
}

#[tokio::test]
async fn duplicate_push_inside_a_bundle_rolls_back() {
    let b = TestBroker::start().await;
    b.push("dst", "Default", &[("dup", json!(1))]).await;
    let m = leased(&b, "src", "t0", "batch=1").await;
    let answer = transaction(
        &b,
        json!({"operations": [push_op("dst", &["fresh", "dup"]), ack_op(&m, true)], "requiredLeases": [m["leaseId"]]}),
    )
    .await;
    assert_rolled_back(&answer);
    assert!(answer["error"].as_str().unwrap().starts_with("QDUP"), "{answer}");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages WHERE transaction_id = 'fresh'").await, 0);
    assert_eq!(
        b.scalar("SELECT count(*) FROM queen.cursors WHERE lease_id IS NOT NULL").await,
        1,
        "the ack was not applied"
    );
    // The same transactionId twice in one bundle is a duplicate as well.
    let answer =
        transaction(&b, json!({"operations": [push_op("dst", &["x", "x"])], "requiredLeases": []})).await;
    assert_rolled_back(&answer);
    assert!(answer["error"].as_str().unwrap().contains("QDUP"));
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages WHERE transaction_id = 'x'").await, 0);
}

#[tokio::test]
async fn two_queues_two_live_leases_one_bundle_applies_both() {
    let b = TestBroker::start().await;
    let a = leased(&b, "qa", "a0", "batch=1").await;
    let c = leased(&b, "qb", "b0", "batch=1").await;
    assert_ne!(a["leaseId"], c["leaseId"]);
    let answer = transaction(
        &b,
        json!({"operations": [ack_op(&a, true), ack_op(&c, true)], "requiredLeases": [a["leaseId"], c["leaseId"]]}),
    )
    .await;
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["results"].as_array().unwrap().len(), 2);
    b.pop_none("qa", "batch=1").await;
    b.pop_none("qb", "batch=1").await;
    assert_eq!(
        b.scalar("SELECT count(*) FROM queen.cursors WHERE lease_id IS NULL AND next_seq = 1").await,
        2
    );
}

#[tokio::test]
async fn required_leases_lends_exactly_one_distinct_lease() {
    let b = TestBroker::start().await;
    let m = leased(&b, "src", "t0", "batch=1").await;
    // A lent lease fences the lease-less ack: a wrong one refuses it...
    let wrong = uuid::Uuid::new_v4().to_string();
    let answer = transaction(&b, json!({"operations": [ack_op(&m, false)], "requiredLeases": [wrong]})).await;
    assert_rolled_back(&answer);
    // ...and the right one (named twice, still one distinct lease) applies it.
    let answer = transaction(
        &b,
        json!({"operations": [ack_op(&m, false)], "requiredLeases": [m["leaseId"], m["leaseId"]]}),
    )
    .await;
    assert_eq!(answer["success"], true, "{answer}");
    b.pop_none("src", "batch=1").await;
}

#[tokio::test]
async fn two_distinct_leases_are_not_lent() {
    let b = TestBroker::start().await;
    let m = leased(&b, "src", "t0", "batch=1").await;
    let (x, y) = (uuid::Uuid::new_v4().to_string(), uuid::Uuid::new_v4().to_string());
    // Neither wrong lease is lent, so the ack is lease-less and applies.
    let answer = transaction(&b, json!({"operations": [ack_op(&m, false)], "requiredLeases": [x, y]})).await;
    assert_eq!(answer["success"], true, "{answer}");
    b.pop_none("src", "batch=1").await;

    // An ack's own lease plus another one in requiredLeases: also two leases.
    let a = leased(&b, "qa", "a0", "batch=1").await;
    let c = leased(&b, "qb", "b0", "batch=1").await;
    let answer = transaction(
        &b,
        json!({"operations": [ack_op(&a, true), ack_op(&c, false)], "requiredLeases": [uuid::Uuid::new_v4().to_string()]}),
    )
    .await;
    assert_eq!(answer["success"], true, "the lease-less ack is not lent a's lease: {answer}");
}

#[tokio::test]
async fn a_bundle_without_lease_information_acks_lease_less() {
    let b = TestBroker::start().await;
    let m = leased(&b, "src", "t0", "batch=1").await;
    let answer = transaction(&b, json!({"operations": [ack_op(&m, false)], "requiredLeases": []})).await;
    assert_eq!(answer["success"], true, "{answer}");
    b.pop_none("src", "batch=1").await;
}

#[tokio::test]
async fn a_failed_ack_in_a_transaction_redelivers() {
    let b = TestBroker::start().await;
    let m = leased(&b, "src", "t0", "batch=1").await;
    let mut op = ack_op(&m, true);
    op["status"] = json!("failed");
    let answer = transaction(&b, json!({"operations": [op], "requiredLeases": [m["leaseId"]]})).await;
    assert_eq!(answer["success"], true, "{answer}");
    assert_eq!(answer["results"][0]["dlq"], false);
    assert_eq!(tx_ids(&b.pop_some("src", "batch=1").await), ["t0"]);
}

#[tokio::test]
async fn a_bundle_without_operations_is_400() {
    let b = TestBroker::start().await;
    let (code, body) = b.post("/api/v1/transaction", &json!({"requiredLeases": []})).await;
    assert_eq!(code, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("operations"), "{body}");
}

#[tokio::test]
async fn a_bundle_with_empty_operations_and_no_kv_is_400_and_writes_nothing() {
    let b = TestBroker::start().await;
    let (code, body) = b.post("/api/v1/transaction", &json!({"operations": [], "requiredLeases": []})).await;
    assert_eq!(code, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("operations"), "{body}");
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn an_unknown_operation_type_is_400_and_writes_nothing() {
    let b = TestBroker::start().await;
    let (code, body) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [push_op("dst", &["t1"]), {"type": "pop", "queue": "dst"}], "requiredLeases": []}),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("operations[1].type"), "{body}");
    for bad in [json!({"operations": "push"}), json!([1, 2]), json!({"operations": [42]})] {
        let (code, body) = b.post("/api/v1/transaction", &bad).await;
        assert_eq!(code, 400, "{bad}: {body}");
        assert!(body["error"].is_string());
    }
    let (code, body) = b.post_raw("/api/v1/transaction", "{not json").await;
    assert_eq!(code, 400);
    assert!(body["error"].as_str().unwrap().contains("body"), "{body}");
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn a_bad_push_item_in_a_bundle_is_400_naming_it() {
    let b = TestBroker::start().await;
    let (code, body) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [{"payload": 1, "transactionId": "t"}]}], "requiredLeases": []}),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("queue"), "{body}");
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn a_push_over_max_size_rolls_the_bundle_back() {
    let b = TestBroker::start().await;
    b.configure_ok("bounded", json!({"maxSize": 1})).await;
    b.push("bounded", "Default", &[("full", json!(1))]).await;
    let m = leased(&b, "src", "t0", "batch=1").await;
    let answer = transaction(
        &b,
        json!({"operations": [ack_op(&m, true), push_op("bounded", &["over"])], "requiredLeases": [m["leaseId"]]}),
    )
    .await;
    assert_rolled_back(&answer);
    assert!(answer["error"].as_str().unwrap().contains("capacity"), "{answer}");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.cursors WHERE lease_id IS NOT NULL").await, 1);
}

#[tokio::test]
async fn a_transaction_push_wakes_a_long_poll() {
    let b = TestBroker::start().await;
    let api = b.api();
    let start = std::time::Instant::now();
    let poll =
        tokio::spawn(async move { api.get("/api/v1/pop/queue/woken?wait=true&timeout=10000&batch=1").await });
    eventually(Duration::from_secs(5), "the long poll to wait", || async {
        (b.engine.queues_waiting() == 1).then_some(())
    })
    .await;
    let answer =
        transaction(&b, json!({"operations": [push_op("woken", &["t1"])], "requiredLeases": []})).await;
    assert_eq!(answer["success"], true);
    let (status, popped) = poll.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(tx_ids(&popped), ["t1"]);
    assert!(start.elapsed() < Duration::from_secs(3));
}

/// Bundles that push to the same partitions in opposite orders at the same
/// time must not deadlock (a deadlock would surface as a 503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_bundles_over_the_same_partitions_commit_without_deadlock() {
    let b = TestBroker::start().await;
    let mut tasks = Vec::new();
    for w in 0..4 {
        let api = b.api();
        tasks.push(tokio::spawn(async move {
            for i in 0..15 {
                let (first, second) = if (w + i) % 2 == 0 { ("x", "y") } else { ("y", "x") };
                let items = json!([
                    {"queue": "shared", "partition": first, "transactionId": format!("{w}-{i}-1"), "payload": 1},
                    {"queue": "shared", "partition": second, "transactionId": format!("{w}-{i}-2"), "payload": 2},
                    {"queue": format!("side-{}", i % 2), "transactionId": format!("{w}-{i}-3"), "payload": 3},
                ]);
                let (code, answer) = api
                    .post("/api/v1/transaction", &json!({"operations": [{"type": "push", "items": items}], "requiredLeases": []}))
                    .await;
                assert_eq!(code, 200, "{answer}");
                assert_eq!(answer["success"], true, "{answer}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages").await, 4 * 15 * 3);
    // Offsets are dense per partition: 0..n-1 without gaps.
    assert_eq!(
        b.scalar(
            "SELECT count(*) FROM (SELECT partition_id, max(seq) + 1 = count(*) AS dense FROM queen.messages
               GROUP BY partition_id) s WHERE NOT dense"
        )
        .await,
        0
    );
}
