//! KV inside `POST /api/v1/transaction`: the `kv` rider shares one commit
//! with the pushes and acks of the bundle (seed-kv-state.txt, queen2-wire.md
//! section 2).
mod common;
#[path = "common/kv.rs"]
mod kvh;

use std::sync::Arc;
use std::time::Duration;

use common::{Rng, TestBroker};
use kvh::*;
use serde_json::{json, Value};
use tokio::sync::Barrier;

const TX: &str = "/api/v1/transaction";

/// Pops one message (non-waiting), asserting there is one.
async fn pop_one(b: &TestBroker, queue: &str, query: &str) -> Value {
    let (status, body) = b.pop(queue, &format!("batch=1&{query}")).await;
    assert_eq!(status, 200, "expected a message on {queue}: {body}");
    let msgs = body["messages"].as_array().expect("messages");
    assert_eq!(msgs.len(), 1);
    msgs[0].clone()
}

async fn assert_queue_empty(b: &TestBroker, queue: &str) {
    let (status, body) = b.pop(queue, "batch=10").await;
    assert_eq!(status, 204, "{queue} must pop empty: {body}");
}

fn ack_op(msg: &Value) -> Value {
    json!({"type": "ack", "transactionId": msg["transactionId"], "partitionId": msg["partitionId"],
           "status": "completed", "leaseId": msg["leaseId"]})
}

fn once(key: &str, value: Value) -> Value {
    json!({"op": "putIfAbsent", "ns": "charges", "key": key, "value": value, "ttlSeconds": 86400, "required": true})
}

fn push_op(items: Vec<Value>) -> Value {
    json!({"type": "push", "items": items})
}

fn item(queue: &str, payload: Value) -> Value {
    json!({"queue": queue, "payload": payload, "transactionId": uuid::Uuid::new_v4().to_string()})
}

async fn tx(b: &TestBroker, body: Value) -> (u16, Value) {
    b.post(TX, &body).await
}

#[tokio::test]
async fn once_with_ack_commits_marker_and_cursor_together_and_a_redelivery_finds_the_marker() {
    let b = TestBroker::start().await;
    b.push("orders", "Default", &[("order-9137-a", json!({"order": 9137}))]).await;
    let m1 = pop_one(&b, "orders", "").await;

    // First delivery: the effect happened, marker + effect push + cursor in one commit.
    let (s, r) = tx(
        &b,
        json!({
            "operations": [push_op(vec![item("receipts", json!({"receipt": 1})), item("receipts", json!({"receipt": 2}))]),
                           ack_op(&m1)],
            "requiredLeases": [m1["leaseId"]],
            "kv": [{"op": "put", "ns": "charges", "key": "last", "value": "ch_1", "forever": true},
                   once("charge:9137", json!({"charge": "ch_1"}))],
        }),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["success"], json!(true), "{r}");
    assert!(r["transactionId"].is_string());
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 5, "2 push items + 1 ack + 2 kv, flat: {r}");
    assert_eq!(results[0]["type"], "push");
    assert_eq!(results[0]["index"], json!(0));
    assert_eq!(results[0]["success"], json!(true));
    assert!(results[0]["messageId"].is_string());
    assert_eq!(results[1]["index"], json!(1));
    assert_eq!(results[2]["type"], "ack");
    assert_eq!(results[2]["index"], json!(2));
    assert_eq!(results[2]["success"], json!(true));
    assert_eq!(results[2]["error"], Value::Null);
    assert_eq!(results[3]["type"], "kv");
    assert_eq!(results[3]["index"], json!(3));
    assert_eq!(results[3]["op"], "put");
    let marker = &results[4];
    assert_eq!(marker["type"], "kv");
    assert_eq!(marker["index"], json!(4));
    assert_eq!(marker["op"], "putIfAbsent");
    assert_eq!(marker["applied"], json!(true));
    assert_eq!(marker["key"], "charge:9137");
    assert_eq!(marker["value"], json!({"charge": "ch_1"}));
    let winner_version = marker["version"].clone();
    assert_queue_empty(&b, "orders").await;

    // The same work arrives again as a new message.
    b.push("orders", "Default", &[("order-9137-b", json!({"order": 9137}))]).await;
    let m2 = pop_one(&b, "orders", "").await;
    assert_eq!(m2["transactionId"], "order-9137-b");
    let (s, r) = tx(
        &b,
        json!({
            "operations": [push_op(vec![item("receipts", json!({"receipt": 3})), item("receipts", json!({"receipt": 4}))]),
                           ack_op(&m2)],
            "requiredLeases": [m2["leaseId"]],
            "kv": [{"op": "put", "ns": "charges", "key": "last", "value": "ch_2", "forever": true},
                   once("charge:9137", json!({"charge": "ch_2"}))],
        }),
    )
    .await;
    assert_eq!(s, 200, "a lost precondition is HTTP 200: {r}");
    assert_eq!(r["success"], json!(false));
    assert_eq!(r["ok"], json!(false));
    assert_eq!(r["reason"], "kv_precondition");
    assert_eq!(r["kvReason"], "exists");
    assert_eq!(r["failedIndex"], json!(2 + 1 + 1), "push items + acks + kv index");
    assert_eq!(r["value"], json!({"charge": "ch_1"}), "the winner's value, no second round trip");
    assert_eq!(r["version"], winner_version);
    assert_eq!(r["results"], json!([]));
    assert!(r["error"].is_string());
    assert!(r["transactionId"].is_string());

    // Nothing in the bundle committed: no receipts 3/4, "last" unchanged...
    assert_eq!(read(&b, "charges", "last").await["value"], json!("ch_1"));
    let (_, receipts) = b.pop("receipts", "batch=10").await;
    let got: Vec<Value> =
        receipts["messages"].as_array().unwrap().iter().map(|m| m["data"].clone()).collect();
    assert_eq!(got, [json!({"receipt": 1}), json!({"receipt": 2})]);
    // ...and the message is still on the cursor: a plain ack with its lease takes it off.
    let acked = b.ack(&m2, "completed", None).await;
    assert_eq!(acked["success"], json!(true), "{acked}");
    assert_queue_empty(&b, "orders").await;
}

#[tokio::test]
async fn a_lost_gate_before_a_push_rolls_the_push_back_and_fails_at_index_1() {
    let b = TestBroker::start().await;
    one(&b, put("gates", "g", json!({"by": "other"}))).await;
    for gate in [
        json!({"op": "putIfAbsent", "ns": "gates", "key": "g", "value": {"by": "me"}, "forever": true, "required": true}),
        json!({"op": "check", "ns": "gates", "key": "g", "expect": 0, "required": true}),
    ] {
        let (s, r) = tx(
            &b,
            json!({"operations": [push_op(vec![item("gated", json!({"n": 1}))])], "requiredLeases": [], "kv": [gate]}),
        )
        .await;
        assert_eq!(s, 200, "{r}");
        assert_eq!(r["success"], json!(false));
        assert_eq!(r["reason"], "kv_precondition");
        assert_eq!(r["failedIndex"], json!(1), "1 push item, gate at kv[0]");
        assert_eq!(r["kvReason"], "exists");
        assert_eq!(r["value"], json!({"by": "other"}));
        assert_queue_empty(&b, "gated").await;
    }
    // With the gate free, the bundle commits and the queue holds exactly one message.
    let (s, r) = tx(
        &b,
        json!({"operations": [push_op(vec![item("gated2", json!({"n": 2}))])], "requiredLeases": [],
               "kv": [{"op": "check", "ns": "gates", "key": "free", "expect": 0, "required": true}]}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(r["success"], json!(true), "{r}");
    assert_eq!(r["results"][1]["type"], "kv");
    assert_eq!(r["results"][1]["index"], json!(1));
    assert_eq!(r["results"][1]["applied"], json!(true));
    let (_, popped) = b.pop("gated2", "batch=10").await;
    assert_eq!(popped["messages"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_handler_that_fails_before_the_commit_leaves_no_marker_and_the_retry_commits() {
    let b = TestBroker::start().await;
    b.push("jobs", "Default", &[("job-1", json!({"job": 1}))]).await;
    // Attempt 1: the handler fails before committing; it nacks.
    let m = pop_one(&b, "jobs", "").await;
    let nack = b.ack(&m, "failed", None).await;
    assert_eq!(nack["success"], json!(true), "{nack}");
    assert_absent(&b, "charges", "charge:job-1").await;
    // Attempt 2: the redelivery is not blocked by the failed attempt.
    let m = pop_one(&b, "jobs", "").await;
    assert_eq!(m["transactionId"], "job-1");
    let (s, r) = tx(
        &b,
        json!({"operations": [ack_op(&m)], "requiredLeases": [m["leaseId"]], "kv": [once("charge:job-1", json!("ch_9"))]}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(r["success"], json!(true), "{r}");
    assert_eq!(read(&b, "charges", "charge:job-1").await["value"], json!("ch_9"));
    assert_queue_empty(&b, "jobs").await;
}

#[tokio::test]
async fn a_kv_write_beside_an_ack_under_an_expired_lease_is_rolled_back() {
    let b = TestBroker::start().await;
    b.push("fenced", "Default", &[("f-1", json!({"n": 1}))]).await;
    let m = pop_one(&b, "fenced", "leaseSeconds=1").await;
    // The rule is about time: let the 1 s lease expire.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (s, r) = tx(
        &b,
        json!({"operations": [ack_op(&m)], "requiredLeases": [m["leaseId"]],
               "kv": [{"op": "put", "ns": "state", "key": "zombie", "value": "written", "forever": true}]}),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["success"], json!(false));
    assert!(r["error"].as_str().unwrap().contains("rolled back"), "{r}");
    assert_eq!(r["results"], json!([]));
    assert_ne!(r["reason"], "kv_precondition");
    assert_absent(&b, "state", "zombie").await;
    // The message is redelivered to the next holder.
    let again = pop_one(&b, "fenced", "").await;
    assert_eq!(again["transactionId"], "f-1");
}

#[tokio::test]
async fn an_ack_of_a_never_pushed_transaction_id_refuses_the_bundle_and_its_put() {
    let b = TestBroker::start().await;
    b.push("ghosts", "Default", &[("real-1", json!({"n": 1}))]).await;
    let m = pop_one(&b, "ghosts", "").await;
    let mut ghost = ack_op(&m);
    ghost["transactionId"] = json!("never-pushed-xyz");
    let (s, r) = tx(
        &b,
        json!({"operations": [ghost], "requiredLeases": [m["leaseId"]],
               "kv": [{"op": "put", "ns": "state", "key": "ghost", "value": 1, "forever": true}]}),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["success"], json!(false), "{r}");
    assert!(r["error"].is_string());
    assert!(r["error"].as_str().unwrap().contains("rolled back"), "{r}");
    assert_absent(&b, "state", "ghost").await;
}

#[tokio::test]
async fn get_and_get_many_are_allowed_in_a_kv_only_bundle_with_flat_indexes() {
    let b = TestBroker::start().await;
    let w = one(&b, put("state", "k", json!({"a": 1}))).await;
    let (s, r) = tx(
        &b,
        json!({"operations": [], "requiredLeases": [], "kv": [
            {"op": "get", "ns": "state", "key": "k"},
            {"op": "getMany", "ns": "state", "keys": ["k", "nope"]},
            {"op": "incr", "ns": "state", "key": "n", "forever": true},
            {"op": "check", "ns": "state", "key": "k", "expect": w["version"]},
        ]}),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["success"], json!(true));
    let rs = r["results"].as_array().unwrap();
    assert_eq!(rs.len(), 4);
    for (i, x) in rs.iter().enumerate() {
        assert_eq!(x["index"], json!(i));
        assert_eq!(x["type"], "kv");
    }
    assert_eq!(rs[0]["found"], json!(true));
    assert_eq!(rs[0]["value"], json!({"a": 1}));
    assert_eq!(rs[1]["missing"], json!(["nope"]));
    assert_eq!(rs[1]["rows"][0]["key"], "k");
    assert_eq!(rs[2]["value"], json!(1));
    assert_eq!(rs[3]["applied"], json!(true));
    assert_eq!(read(&b, "state", "n").await["value"], json!(1));
}

#[tokio::test]
async fn get_prefix_in_a_transaction_is_400_kv_get_prefix_not_allowed_in_transaction() {
    let b = TestBroker::start().await;
    let (s, r) = tx(
        &b,
        json!({"operations": [push_op(vec![item("q", json!(1))])], "requiredLeases": [], "kv": [
            {"op": "put", "ns": "state", "key": "k", "value": 1, "forever": true},
            {"op": "getPrefix", "ns": "state", "prefix": "k"},
        ]}),
    )
    .await;
    assert_error_body(s, &r, 400, "kv_get_prefix_not_allowed_in_transaction");
    assert_absent(&b, "state", "k").await;
    assert_queue_empty(&b, "q").await;
}

#[tokio::test]
async fn more_than_64_kv_ops_in_a_transaction_is_400_and_64_is_fine() {
    let b = TestBroker::start().await;
    let ops = |n: usize| -> Vec<Value> { (0..n).map(|i| put("state", &format!("k{i}"), json!(i))).collect() };
    let (s, r) = tx(&b, json!({"operations": [], "requiredLeases": [], "kv": ops(65)})).await;
    assert_error_body(s, &r, 400, "kv_too_many_ops");
    assert_eq!(total_rows(&b).await, 0);
    let (s, r) = tx(&b, json!({"operations": [], "requiredLeases": [], "kv": ops(64)})).await;
    assert_eq!(s, 200);
    assert_eq!(r["success"], json!(true));
    assert_eq!(r["results"].as_array().unwrap().len(), 64);
}

#[tokio::test]
async fn a_duplicate_kv_key_in_a_transaction_is_400_and_nothing_commits() {
    let b = TestBroker::start().await;
    let (s, r) = tx(
        &b,
        json!({"operations": [push_op(vec![item("q", json!(1))])], "requiredLeases": [], "kv": [
            put("state", "k", json!(1)),
            {"op": "incr", "ns": "state", "key": "k", "forever": true},
        ]}),
    )
    .await;
    assert_error_body(s, &r, 400, "kv_duplicate_key_in_call");
    assert_queue_empty(&b, "q").await;
    assert_eq!(total_rows(&b).await, 0);
}

#[tokio::test]
async fn a_bad_kv_op_in_a_transaction_is_a_kv_bad_request_and_nothing_commits() {
    let b = TestBroker::start().await;
    let (s, r) = tx(
        &b,
        json!({"operations": [push_op(vec![item("q", json!(1))])], "requiredLeases": [],
               "kv": [{"op": "put", "ns": "state", "key": "k", "value": 1}]}),
    )
    .await;
    assert_error_body(s, &r, 400, "kv_expiry_not_specified");
    assert_queue_empty(&b, "q").await;
}

#[tokio::test]
async fn a_bad_key_in_the_kv_rider_is_named_by_its_place_in_kv() {
    let b = TestBroker::start().await;
    let (s, r) = tx(
        &b,
        json!({"operations": [push_op(vec![item("q", json!(1))])], "requiredLeases": [],
               "kv": [{"op": "put", "ns": "state", "key": "ok", "value": 1, "ttlSeconds": 60},
                      {"op": "put", "ns": "state", "key": 42, "value": 1, "ttlSeconds": 60}]}),
    )
    .await;
    assert_error_body(s, &r, 400, "kv_bad_key");
    assert!(r.to_string().contains("kv[1].key"), "the rider's own index: {r}");
    assert!(!r.to_string().contains("operations[1]"), "{r}");
    assert_queue_empty(&b, "q").await;
}

#[tokio::test]
async fn a_bundle_without_kv_answers_exactly_as_before() {
    let b = TestBroker::start().await;
    b.push("plain", "Default", &[("p-1", json!({"n": 1}))]).await;
    let m = pop_one(&b, "plain", "").await;
    let (s, r) = tx(
        &b,
        json!({"operations": [push_op(vec![item("plain-out", json!({"n": 2}))]), ack_op(&m)],
               "requiredLeases": [m["leaseId"]]}),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    assert_fields(&r, &["transactionId", "success", "results"]);
    assert_eq!(r["success"], json!(true));
    let rs = r["results"].as_array().unwrap();
    assert_eq!(rs.len(), 2);
    assert_fields(&rs[0], &["index", "type", "success", "transactionId", "messageId", "queueName"]);
    assert_eq!(rs[0]["queueName"], "plain-out");
    assert_fields(&rs[1], &["index", "type", "success", "transactionId", "error", "dlq"]);
    assert_eq!(rs[1]["transactionId"], "p-1");
    assert!(rs.iter().all(|x| x["type"] != "kv"));
    assert_queue_empty(&b, "plain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlapping_bundles_touching_kv_keys_in_different_orders_never_deadlock() {
    let b = TestBroker::start().await;
    let workers = 16;
    let rounds = 20;
    let keys = ["d:0", "d:1", "d:2", "d:3", "d:4"];
    let barrier = Arc::new(Barrier::new(workers));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (http, url, barrier) = (b.http.clone(), b.url(TX), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = Rng::new(0x9e37_79b9 ^ (w as u64 + 1));
            barrier.wait().await;
            for round in 0..rounds {
                let mut order = keys.to_vec();
                rng.shuffle(&mut order);
                let mut kv: Vec<Value> = order
                    .iter()
                    .map(|k| json!({"op": "incr", "ns": "dl", "key": k, "delta": 1, "forever": true}))
                    .collect();
                // Plus other lock modes on a second overlapping set.
                for k in ["e:0", "e:1", "e:2"] {
                    kv.push(match rng.below(5) {
                        0 => json!({"op": "put", "ns": "dl", "key": k, "value": w, "forever": true}),
                        1 => json!({"op": "delete", "ns": "dl", "key": k}),
                        2 => json!({"op": "putIfAbsent", "ns": "dl", "key": k, "value": w, "ttlSeconds": 60}),
                        3 => json!({"op": "check", "ns": "dl", "key": k, "expect": 0}),
                        _ => json!({"op": "get", "ns": "dl", "key": k}),
                    });
                }
                rng.shuffle(&mut kv);
                let mut queues = vec!["dq-a", "dq-b"];
                rng.shuffle(&mut queues);
                let items: Vec<Value> =
                    queues.iter().map(|q| item(q, json!({"w": w, "round": round}))).collect();
                let body = json!({"operations": [push_op(items)], "requiredLeases": [], "kv": kv});
                let resp = http.post(&url).json(&body).send().await.expect("request");
                let status = resp.status().as_u16();
                let r: Value = resp.json().await.expect("JSON");
                assert_eq!(status, 200, "worker {w} round {round}: {r}");
                assert_eq!(r["success"], json!(true), "worker {w} round {round}: {r}");
            }
        }));
    }
    for t in tasks {
        t.await.expect("a bundle failed");
    }
    for k in keys {
        assert_eq!(read(&b, "dl", k).await["value"], json!(workers * rounds), "{k}");
    }
    for q in ["dq-a", "dq-b"] {
        let (_, popped) = b.pop(q, "batch=1000").await;
        let n = popped["messages"].as_array().map(Vec::len).unwrap_or(0);
        assert_eq!(n, workers * rounds, "every push of {q} committed");
    }
}

#[tokio::test]
async fn a_lock_guard_lost_to_a_renewal_answers_kv_reason_version_with_the_owner_in_value() {
    let b = TestBroker::start().await;
    let lock = |value: Value, expect: Option<i64>| {
        let mut op =
            json!({"op": "put", "ns": "queen-locks", "key": "job#0", "value": value, "ttlSeconds": 30});
        if let Some(e) = expect {
            op["expect"] = json!(e);
        }
        op
    };
    let v1 = one(&b, lock(json!({"owner": "w1"}), Some(0))).await["version"].as_i64().unwrap();
    let v2 = one(&b, lock(json!({"owner": "w1"}), Some(v1))).await["version"].as_i64().unwrap();
    assert!(v2 > v1, "a renewal issues a newer token");
    let guard = json!({"op": "check", "ns": "queen-locks", "key": "job#0", "expect": v1, "required": true});
    let (s, r) = tx(
        &b,
        json!({"operations": [push_op(vec![item("guarded", json!(1)), item("guarded", json!(2))])],
               "requiredLeases": [], "kv": [guard, put("state", "step", json!(1))]}),
    )
    .await;
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["success"], json!(false));
    assert_eq!(r["reason"], "kv_precondition");
    assert_eq!(r["failedIndex"], json!(2), "the guard is kv[0] after 2 push items");
    assert_eq!(r["kvReason"], "version");
    assert_eq!(r["version"], json!(v2));
    assert_eq!(r["value"]["owner"], "w1", "the lock code reads value.owner");
    assert_queue_empty(&b, "guarded").await;
    assert_absent(&b, "state", "step").await;
    // With the current token the guarded step commits.
    let guard = json!({"op": "check", "ns": "queen-locks", "key": "job#0", "expect": v2, "required": true});
    let (_, r) = tx(
        &b,
        json!({"operations": [], "requiredLeases": [], "kv": [guard, put("state", "step", json!(1))]}),
    )
    .await;
    assert_eq!(r["success"], json!(true), "{r}");
    assert_eq!(read(&b, "state", "step").await["value"], json!(1));
}

#[tokio::test]
async fn a_kv_rider_that_is_not_an_array_is_400_kv_bad_body() {
    let b = TestBroker::start().await;
    let (s, r) = tx(
        &b,
        json!({"operations": [push_op(vec![item("q", json!(1))])], "requiredLeases": [], "kv": {"op": "get"}}),
    )
    .await;
    assert_error_body(s, &r, 400, "kv_bad_body");
    assert_queue_empty(&b, "q").await;
}

/// `queen.transaction_rows` applies a bundle's lone put or putIfAbsent
/// itself instead of calling `queen.kv_apply`: for every key state, op and
/// `required`, it must answer what `kv_apply` answers in a transaction
/// (the result element, or the QN200 refusal body), version aside when a
/// new one is drawn (each run draws its own, and both roll back).
#[tokio::test]
async fn a_lone_put_in_a_bundle_answers_as_kv_apply_would() {
    let b = TestBroker::start().await;
    let db = b.sql().await;
    db.batch_execute(
        "INSERT INTO queen.kv (ns, key, value, version, expires_at)
         VALUES ('d', 'live', '{\"v\": 1}', nextval('queen.kv_version_seq'), NULL),
                ('d', 'expired', '2', nextval('queen.kv_version_seq'), now() - interval '1 second')",
    )
    .await
    .unwrap();
    let live: i64 =
        db.query_one("SELECT version FROM queen.kv WHERE key = 'live'", &[]).await.unwrap().get(0);
    let cols = "ARRAY[$1::text], ARRAY['d'], ARRAY[$2::text], ARRAY['{\"n\": 5}'::jsonb], ARRAY[$3::bigint],
                ARRAY[$6::boolean], ARRAY[$4::bigint], ARRAY[$5::boolean], ARRAY[NULL::numeric],
                ARRAY[NULL::numeric], ARRAY[NULL::numeric], ARRAY[NULL::jsonb], ARRAY[NULL::text],
                ARRAY[NULL::text], ARRAY[NULL::integer], ARRAY[NULL::boolean]";
    let general =
        format!("SELECT queen.kv_apply({cols}, '{{\"offset\": 0, \"maxReadBytes\": 4194304}}')::text");
    let lone = format!(
        "SELECT queen.transaction_rows('T', NULL, 4194304, 0, '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', '{{}}',
           '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', {cols},
           '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', '{{}}')::text"
    );
    // Runs one statement in a transaction that rolls back: its answer, or its refusal body.
    async fn run(
        db: &tokio_postgres::Client,
        sql: &str,
        p: (&str, &str, Option<i64>, Option<i64>, bool),
    ) -> Value {
        // A write carries exactly one of ttlSeconds or forever (the engine checks).
        let forever = p.2.is_none().then_some(true);
        db.batch_execute("BEGIN").await.unwrap();
        let got = db.query_one(sql, &[&p.0, &p.1, &p.2, &p.3, &p.4, &forever]).await;
        db.batch_execute("ROLLBACK").await.unwrap();
        match got {
            Ok(row) => serde_json::from_str(&row.get::<_, String>(0)).unwrap(),
            Err(e) => {
                let e = e.as_db_error().expect("a database error").clone();
                json!({"refused": serde_json::from_str::<Value>(e.message()).unwrap(), "code": e.code().code()})
            }
        }
    }
    let mut cases = Vec::new();
    for op in ["put", "putIfAbsent"] {
        for key in ["absent", "live", "expired"] {
            for expect in [None, Some(0), Some(live), Some(live + 1000)] {
                for required in [false, true] {
                    for ttl in [None, Some(60)] {
                        cases.push((op, key, ttl, expect, required));
                    }
                }
            }
        }
    }
    let (mut applied, mut refused) = (0, 0);
    for case in cases {
        let want = run(&db, &general, case).await;
        let got = run(&db, &lone, case).await;
        if want.get("refused").is_some() {
            refused += 1;
            assert_eq!(got, want, "{case:?}");
            continue;
        }
        let mut want = want[0].clone();
        let mut got = got["kv"][0].clone();
        if want["applied"] == true {
            applied += 1;
            assert!(got["version"].as_i64().unwrap() > want["version"].as_i64().unwrap(), "{case:?}");
            want["version"] = Value::Null;
            got["version"] = Value::Null;
        }
        assert_eq!(got, want, "{case:?}");
    }
    assert!(applied > 0 && refused > 0, "applied {applied}, refused {refused}");
    let untouched: i64 =
        db.query_one("SELECT count(*) FROM queen.kv WHERE key = 'absent'", &[]).await.unwrap().get(0);
    assert_eq!(untouched, 0, "every run rolled back");
}
