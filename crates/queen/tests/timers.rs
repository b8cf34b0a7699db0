//! Timers: schedule and reschedule as one upsert, cancel against a fire,
//! peek and list, the fire (exactly once, with the promised message id and
//! the op's txn), the transaction rider, and bad input that writes nothing.
mod common;

use std::time::Duration;

use base64::Engine as _;
use common::TestBroker;
use queen_engine::TimerOp;
use serde_json::{json, Value};

fn b64(v: &Value) -> String {
    base64::engine::general_purpose::STANDARD.encode(v.to_string())
}

fn schedule(queue: &str, key: &str, payload: Value, delay_ms: i64) -> Value {
    json!({"op": "schedule", "queue": queue, "timerKey": key, "payload": b64(&payload), "delayMs": delay_ms,
           "txn": format!("txn-{key}")})
}

async fn call(b: &TestBroker, ops: Value) -> Vec<Value> {
    let (status, body) = b.post("/api/v1/timers", &json!({ "operations": ops })).await;
    assert_eq!(status, 200, "{body}");
    body["results"].as_array().expect("results").clone()
}

async fn timer_rows(b: &TestBroker) -> i64 {
    b.sql().await.query_one("SELECT count(*) FROM queen.timers", &[]).await.expect("count").get(0)
}

/// Pops one partition until `n` messages came back or `within` passed.
async fn pop_until(b: &TestBroker, queue: &str, n: usize, within: Duration) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + within;
    let mut got = Vec::new();
    while got.len() < n && tokio::time::Instant::now() < deadline {
        let (status, body) = b.pop(queue, "batch=1000&autoAck=true").await;
        if status == 200 {
            got.extend(body["messages"].as_array().expect("messages").iter().cloned());
        } else {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    got
}

#[tokio::test]
async fn schedule_reschedule_peek_list_and_cancel() {
    let b = TestBroker::start().await;
    let r = call(&b, json!([schedule("orders", "o1", json!({"id": 1}), 60_000)])).await;
    assert_eq!((r[0]["ok"].clone(), r[0]["status"].clone()), (json!(true), json!("scheduled")), "{}", r[0]);
    assert_eq!(
        (r[0]["queue"].clone(), r[0]["timerKey"].clone(), r[0]["txn"].clone()),
        (json!("orders"), json!("o1"), json!("txn-o1"))
    );
    assert!(r[0]["messageId"].as_str().is_some_and(|m| m.len() == 36));
    let fields: Vec<&str> = r[0].as_object().expect("element").keys().map(String::as_str).collect();
    assert_eq!(fields, ["deliverAt", "messageId", "ok", "queue", "status", "timerKey", "txn"], "{}", r[0]);
    let at1 = r[0]["deliverAt"].as_str().expect("deliverAt").to_owned();
    assert_eq!(at1.len(), 27, "fixed width: {at1}");

    // The same key again is the same upsert: rescheduled, later, same id for the same txn.
    let again = call(&b, json!([schedule("orders", "o1", json!({"id": 2}), 120_000)])).await;
    assert_eq!(again[0]["status"], json!("rescheduled"));
    assert_eq!(again[0]["messageId"], r[0]["messageId"]);
    assert!(
        again[0]["deliverAt"].as_str().expect("deliverAt") > at1.as_str(),
        "strings compare in time order"
    );

    let (status, peek) = b.get("/api/v1/timers/orders/o1").await;
    assert_eq!(status, 200);
    assert_eq!(peek["found"], json!(true));
    assert_eq!(peek["payload"], json!({"id": 2}));
    assert_eq!(peek["txn"], json!("txn-o1"));
    // The whole peek, which the engine writes from queen.timer_rows.
    let fields: Vec<&str> = peek.as_object().expect("peek").keys().map(String::as_str).collect();
    let want = [
        "attempts",
        "createdAt",
        "deliverAt",
        "encrypted",
        "found",
        "lastError",
        "messageId",
        "partition",
        "payload",
        "queue",
        "timerKey",
        "txn",
        "updatedAt",
    ];
    assert_eq!(fields, want, "{peek}");
    assert_eq!(
        [&peek["queue"], &peek["timerKey"], &peek["messageId"], &peek["deliverAt"]],
        [&json!("orders"), &json!("o1"), &again[0]["messageId"], &again[0]["deliverAt"]]
    );
    assert_eq!(
        [&peek["encrypted"], &peek["attempts"], &peek["lastError"]],
        [&json!(false), &json!(0), &Value::Null]
    );
    assert!(peek["createdAt"]
        .as_str()
        .is_some_and(|t| t.len() == 27 && t <= peek["updatedAt"].as_str().unwrap_or("")));
    let (_, miss) = b.get("/api/v1/timers/orders/none").await;
    assert_eq!(miss, json!({"found": false}));

    // Keys with slashes travel in the path.
    let ops: Vec<Value> =
        ["a/1", "a/2", "b", "c", "d"].iter().map(|k| schedule("paged", k, json!(k), 60_000)).collect();
    call(&b, json!(ops)).await;
    let (_, page) = b.get("/api/v1/timers/paged?limit=2").await;
    assert_eq!(page["truncated"], json!(true), "{page}");
    assert_eq!(page["rows"].as_array().map(Vec::len), Some(2));
    assert_eq!(page["nextAfter"], json!("a/2"));
    let mut listed = page["rows"][0].clone();
    assert_eq!(listed.as_object_mut().and_then(|o| o.remove("timerKey")), Some(json!("a/1")));
    let fields: Vec<&str> = listed.as_object().expect("row").keys().map(String::as_str).collect();
    let want = [
        "attempts",
        "createdAt",
        "deliverAt",
        "lastError",
        "messageId",
        "partition",
        "queue",
        "txn",
        "updatedAt",
    ];
    assert_eq!(fields, want, "a listed timer has no payload: {listed}");
    let (_, rest) = b.get("/api/v1/timers/paged?limit=10&after=a%2F2").await;
    let keys: Vec<&str> =
        rest["rows"].as_array().expect("rows").iter().filter_map(|r| r["timerKey"].as_str()).collect();
    assert_eq!(keys, vec!["b", "c", "d"]);
    assert_eq!(rest["truncated"], json!(false));
    let (_, peek) = b.get("/api/v1/timers/paged/a/1").await;
    assert_eq!(peek["payload"], json!("a/1"));

    let (status, cancelled) = b.delete("/api/v1/timers/paged/a/1?txn=mine").await;
    assert_eq!(status, 200);
    let stored_txn = page["rows"][0]["txn"].clone();
    assert_eq!(
        cancelled,
        json!({"ok": true, "status": "cancelled", "queue": "paged", "timerKey": "a/1", "txn": stored_txn}),
        "a cancel answers the timer's own txn"
    );
    let (_, absent) = b.delete("/api/v1/timers/paged/a/1?txn=mine").await;
    assert_eq!(
        absent,
        json!({"ok": false, "status": "absent", "queue": "paged", "timerKey": "a/1", "txn": "mine"})
    );
    b.pop_none("orders", "").await;
}

#[tokio::test]
async fn a_due_timer_fires_once_with_its_promised_id_and_txn() {
    let b = TestBroker::start().await;
    let r = call(&b, json!([schedule("fire", "now", json!({"big": 12345678901234567890u64}), -5_000)])).await;
    let got = pop_until(&b, "fire", 1, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 1, "fired within the sweeper's cycle");
    assert_eq!(got[0]["transactionId"], json!("txn-now"));
    assert_eq!(got[0]["id"], r[0]["messageId"], "the fired message keeps the promised id");
    assert_eq!(got[0]["data"], json!({"big": 12345678901234567890u64}), "every digit kept");
    let (_, peek) = b.get("/api/v1/timers/fire/now").await;
    assert_eq!(peek["found"], json!(false), "a fired timer is no longer pending");
    assert!(b.engine.timer_stats().fired >= 1);
    let (_, gone) = b.delete("/api/v1/timers/fire/now").await;
    assert_eq!(gone["status"], json!("absent"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_brokers_fire_every_due_timer_exactly_once() {
    let a = TestBroker::start().await;
    let b = TestBroker::on(&a.db).await;
    let ops: Vec<Value> = (0..400).map(|i| schedule("many", &format!("k{i:03}"), json!(i), -1)).collect();
    call(&a, json!(ops)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while timer_rows(&a).await > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(timer_rows(&a).await, 0, "every timer fired");
    let sql = a.sql().await;
    let row = sql
        .query_one(
            "SELECT count(*), count(DISTINCT transaction_id) FROM queen.messages m \
             JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id \
             WHERE q.name = 'many'",
            &[],
        )
        .await
        .expect("count");
    let (n, distinct): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((n, distinct), (400, 400), "one message per timer, none twice");
    assert_eq!(a.engine.timer_stats().fired + b.engine.timer_stats().fired, 400);
}

#[tokio::test]
async fn a_cancel_never_waits_for_a_fire_in_progress() {
    let b = TestBroker::start().await;
    call(&b, json!([schedule("busy", "k", json!(1), 600_000)])).await;
    // A sweeper holding the row, as a fire in progress does.
    let mut holder = b.sql().await;
    let tx = holder.transaction().await.expect("begin");
    tx.execute("SELECT 1 FROM queen.timers WHERE timer_key = 'k' FOR UPDATE", &[]).await.expect("lock");
    let started = std::time::Instant::now();
    let (status, body) = b.delete("/api/v1/timers/busy/k").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body["ok"].clone(), body["status"].clone()), (json!(false), json!("too_late")));
    assert!(started.elapsed() < Duration::from_secs(5), "answered without waiting");
    tx.rollback().await.expect("rollback");
}

#[tokio::test]
async fn the_timers_rider_commits_with_the_bundle_and_rolls_back_with_it() {
    let b = TestBroker::start().await;
    let bundle = |tag: &str, kv: Value| {
        json!({
            "operations": [{"type": "push", "items": [{"queue": "rider", "payload": {"tag": tag}, "transactionId": format!("p-{tag}")}]}],
            "requiredLeases": [],
            "kv": kv,
            "timers": [schedule("rider-timers", tag, json!({"tag": tag}), 600_000), {"op": "cancel", "queue": "rider-timers", "timerKey": "nothing"}],
        })
    };
    let (status, ok) = b
        .post(
            "/api/v1/transaction",
            &bundle("kept", json!([{"op": "put", "ns": "r", "key": "k", "value": 1, "ttlSeconds": 60}])),
        )
        .await;
    assert_eq!(status, 200, "{ok}");
    assert_eq!(ok["success"], json!(true), "{ok}");
    let results = ok["results"].as_array().expect("results");
    assert_eq!(results.len(), 4, "push, kv, then two timer results: {ok}");
    assert_eq!(results[2]["type"], json!("timer"));
    assert_eq!(results[2]["index"], json!(2));
    assert_eq!(results[2]["status"], json!("scheduled"));
    assert_eq!(results[3]["status"], json!("absent"));
    let (_, peek) = b.get("/api/v1/timers/rider-timers/kept").await;
    assert_eq!(peek["found"], json!(true));

    // A lost required precondition rolls the timer back with the push.
    let lost =
        json!([{"op": "putIfAbsent", "ns": "r", "key": "k", "value": 2, "ttlSeconds": 60, "required": true}]);
    let (status, refused) = b.post("/api/v1/transaction", &bundle("dropped", lost)).await;
    assert_eq!(status, 200, "{refused}");
    assert_eq!(refused["reason"], json!("kv_precondition"), "{refused}");
    let (_, peek) = b.get("/api/v1/timers/rider-timers/dropped").await;
    assert_eq!(peek["found"], json!(false), "the timer rolled back");
    let popped = b.pop_some("rider", "batch=10").await;
    assert_eq!(popped["messages"].as_array().map(Vec::len), Some(1), "only the first bundle's push");

    // A timer-only bundle is a bundle.
    let (status, only) = b
        .post("/api/v1/transaction", &json!({"operations": [], "requiredLeases": [], "timers": [schedule("rider-timers", "solo", json!(1), 1000)]}))
        .await;
    assert_eq!(status, 200, "{only}");
    assert_eq!(only["results"][0]["status"], json!("scheduled"));
}

#[tokio::test]
async fn bad_timer_calls_are_refused_and_write_nothing() {
    let b = TestBroker::start().await;
    let ok = schedule("bad", "k", json!(1), 1000);
    let mut owned = ok.clone();
    owned["messageId"] = json!("x");
    let mut far = ok.clone();
    far["delayMs"] = json!(91_i64 * 24 * 3600 * 1000);
    let mut not_b64 = ok.clone();
    not_b64["payload"] = json!("%%%");
    let cases = [
        (json!([ok.clone(), schedule("bad", "k", json!(2), 5)]), 400, "timers_bad_request"),
        (json!([ok.clone(), owned]), 400, "timers_bad_request"),
        (json!([ok.clone(), far]), 403, "timer_horizon_exceeded"),
        (json!([ok.clone(), not_b64]), 400, "timers_bad_request"),
        (json!([ok.clone(), {"op": "later", "queue": "bad", "timerKey": "z"}]), 400, "timers_bad_request"),
    ];
    for (ops, status, error) in cases {
        let (got, body) = b.post("/api/v1/timers", &json!({ "operations": ops })).await;
        assert_eq!(got, status, "{ops} -> {body}");
        assert_eq!(body["error"], json!(error), "{body}");
        assert!(body["reason"].is_string() && body["detail"].is_string(), "{body}");
    }
    let big = json!({"op": "schedule", "queue": "bad", "timerKey": "big", "delayMs": 1,
                     "payload": b64(&json!("x".repeat(1024 * 1024)))});
    let (got, body) = b.post("/api/v1/timers", &json!({ "operations": [big] })).await;
    assert_eq!((got, body["error"].clone()), (413, json!("payload_too_large")), "{body}");
    assert_eq!(timer_rows(&b).await, 0, "nothing written");
}

#[tokio::test]
async fn embedded_timer_ops_are_typed_and_checked() {
    let b = TestBroker::start().await;
    let op = TimerOp::Schedule {
        queue: "emb".into(),
        key: "k".into(),
        partition: "p".into(),
        payload: serde_json::value::RawValue::from_string("{\"v\":1}".into()).expect("raw"),
        delay_ms: -1,
        txn: "emb-txn".into(),
        reschedule: false,
    };
    let r = b.engine.timer_ops(&[op.clone(), op]).await;
    assert!(r.is_err(), "the same key twice is refused in embedded calls too");
    let op = TimerOp::Cancel { queue: "emb".into(), key: "k".into(), txn: None };
    let r = b.engine.timer_ops(&[op]).await.expect("cancel");
    assert_eq!(r[0].status, "absent");
}

/// A bundle that pushes into a partition and reschedules a due timer firing
/// into that same partition, racing the sweeper: both take the timer's row
/// before the partition's, so neither waits on the other in a cycle (a
/// deadlock PostgreSQL breaks would answer the bundle 503).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bundles_and_the_timer_sweeper_racing_on_one_partition_never_deadlock() {
    let options = queen_engine::EngineOptions {
        timer_sweep_interval: Some(Duration::from_millis(2)),
        ..queen_engine::EngineOptions::default()
    };
    let b = TestBroker::start_with_options(options).await;
    let workers: Vec<_> = (0..6)
        .map(|w| {
            let api = b.api();
            tokio::spawn(async move {
                let mut refused = Vec::new();
                for i in 0..60 {
                    let key = format!("tick{}", i % 3);
                    let body = json!({
                        "operations": [{"type": "push", "items": [{"queue": "race", "partition": "p", "payload": {"w": w, "i": i}}]}],
                        "requiredLeases": [],
                        "timers": [{"op": "schedule", "queue": "race", "timerKey": key, "partition": "p",
                                    "payload": b64(&json!({"w": w, "i": i})), "delayMs": 0, "txn": format!("t-{w}-{i}")}],
                    });
                    let (status, v) = api.post("/api/v1/transaction", &body).await;
                    if status != 200 || v["success"] != json!(true) {
                        refused.push(format!("{status} {v}"));
                    }
                }
                refused
            })
        })
        .collect();
    let mut refused = Vec::new();
    for w in workers {
        refused.extend(w.await.expect("worker"));
    }
    assert!(refused.is_empty(), "{} bundles refused, first: {:?}", refused.len(), refused.first());
    // The timers fired into the partition too.
    let fired = b.scalar("SELECT count(*) FROM queen.messages WHERE transaction_id LIKE 't-%'").await;
    assert!(fired > 0, "the sweeper fired while the bundles ran");
}

/// The engine writes a transaction's whole answer from what SQL did: acks
/// and push items in `operations` order (their slots), then the KV ops,
/// then the timer ops, each with its own fields and nothing else.
#[tokio::test]
async fn a_mixed_bundle_answers_each_element_in_slot_then_kv_then_timer_order() {
    let b = TestBroker::start().await;
    b.push("mixed-in", "Default", &[("in-1", json!(1))]).await;
    let m = b.pop_some("mixed-in", "batch=1").await["messages"][0].clone();
    let body = json!({
        "operations": [
            {"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"]},
            {"type": "push", "items": [{"queue": "mixed-out", "payload": 1, "transactionId": "out-1"},
                                       {"queue": "mixed-out", "payload": 2}]},
        ],
        "kv": [{"op": "put", "ns": "mixed", "key": "k", "value": 1, "forever": true}],
        "timers": [schedule("mixed-timers", "t", json!({"n": 1}), 600_000),
                   {"op": "cancel", "queue": "mixed-timers", "timerKey": "none"}],
    });
    let (status, r) = b.post("/api/v1/transaction", &body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["success"], json!(true), "{r}");
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&r), ["results", "success", "transactionId"]);
    let rs = r["results"].as_array().expect("results");
    let kinds: Vec<(&Value, &Value)> = rs.iter().map(|x| (&x["index"], &x["type"])).collect();
    assert_eq!(
        kinds,
        vec![
            (&json!(0), &json!("ack")),
            (&json!(1), &json!("push")),
            (&json!(2), &json!("push")),
            (&json!(3), &json!("kv")),
            (&json!(4), &json!("timer")),
            (&json!(5), &json!("timer")),
        ]
    );
    assert_eq!(keys(&rs[0]), ["dlq", "error", "index", "success", "transactionId", "type"]);
    assert_eq!(rs[0]["transactionId"], m["transactionId"]);
    assert_eq!(keys(&rs[1]), ["index", "messageId", "queueName", "success", "transactionId", "type"]);
    assert_eq!((&rs[1]["transactionId"], &rs[1]["queueName"]), (&json!("out-1"), &json!("mixed-out")));
    assert!(rs[2]["transactionId"].as_str().is_some_and(|t| !t.is_empty()), "a drawn id: {}", rs[2]);
    assert_eq!(keys(&rs[3]), ["applied", "index", "key", "op", "type", "value", "version"]);
    assert_eq!(
        keys(&rs[4]),
        ["deliverAt", "index", "messageId", "ok", "queue", "status", "timerKey", "txn", "type"]
    );
    assert_eq!(keys(&rs[5]), ["index", "ok", "queue", "status", "timerKey", "txn", "type"]);
    assert_eq!(rs[5]["txn"], Value::Null, "a cancel without txn writes txn null");
}
