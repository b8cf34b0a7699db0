//! Streams over HTTP (`/streams/v1/*`): the registry, the state read, and a
//! cycle's state ops, emits and ack committing together or not at all.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{eventually, tx_ids, TestBroker};
use serde_json::{json, Value};

const GROUP: &str = "streams.q";

async fn register(b: &TestBroker, name: &str, hash: &str, reset: bool) -> (u16, Value) {
    b.post(
        "/streams/v1/queries",
        &json!({"name": name, "source_queue": "src", "sink_queue": "dst", "config_hash": hash, "reset": reset}),
    )
    .await
}

async fn query(b: &TestBroker) -> String {
    let (status, body) = register(b, "q", "h1", false).await;
    assert_eq!(status, 200, "{body}");
    body["query_id"].as_str().unwrap().to_owned()
}

async fn rows(b: &TestBroker, qid: &str, pid: &str) -> Vec<(String, Value)> {
    let (status, body) =
        b.post("/streams/v1/state/get", &json!({"query_id": qid, "partition_id": pid, "keys": []})).await;
    assert_eq!(status, 200, "{body}");
    body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["key"].as_str().unwrap().to_owned(), r["value"].clone()))
        .collect()
}

/// Pushes `n` source messages and pops them as the stream's group.
async fn leased_batch(b: &TestBroker, n: usize) -> Value {
    let items: Vec<(String, Value)> = (0..n).map(|i| (format!("s{i}"), json!({"amount": i + 1}))).collect();
    let items: Vec<(&str, Value)> = items.iter().map(|(t, v)| (t.as_str(), v.clone())).collect();
    b.push("src", "Default", &items).await;
    b.pop_some("src", &format!("batch=100&consumerGroup={GROUP}")).await
}

fn cycle(qid: &str, pop: &Value, lease: &str, total: i64, emits: usize, release: bool, last: usize) -> Value {
    let msgs = pop["messages"].as_array().unwrap();
    json!({
        "query_id": qid, "partition_id": pop["partitionId"], "consumer_group": GROUP,
        "state_ops": [{"type": "upsert", "key": "total", "value": {"total": total}}],
        "push_items": (0..emits).map(|i| json!({"queue": "dst", "partition": "Default", "payload": {"e": i}})).collect::<Vec<_>>(),
        "ack": {"transactionId": msgs[last]["transactionId"], "leaseId": lease, "status": "completed", "count": last + 1},
        "release_lease": release,
    })
}

async fn dst_count(b: &TestBroker) -> i64 {
    b.scalar(
        "SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
           JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'dst'",
    )
    .await
}

#[tokio::test]
async fn registration_is_an_upsert_a_changed_hash_conflicts_and_reset_starts_over() {
    let b = TestBroker::start().await;
    let (status, first) = register(&b, "q", "h1", false).await;
    assert_eq!(status, 200, "{first}");
    let id = first["query_id"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "{first}");
    let want = json!({"success": true, "query_id": id, "name": "q", "config_hash": "h1", "fresh": true, "reset": false});
    assert_eq!(first, want, "the whole answer, which the engine writes");
    let (_, again) = register(&b, "q", "h1", true).await;
    let want = json!({"success": true, "query_id": id, "name": "q", "config_hash": "h1", "fresh": false, "reset": false});
    assert_eq!(again, want);
    let (status, body) = register(&b, "q", "h2", false).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "config_hash_mismatch");
    assert!(body["error"].as_str().unwrap().contains("config_hash mismatch"), "{body}");

    // State, then a reset: a new id, the old state gone, the old id refused.
    let qid = first["query_id"].as_str().unwrap();
    let pop = leased_batch(&b, 1).await;
    let pid = pop["partitionId"].as_str().unwrap();
    let (_, ok) =
        b.post("/streams/v1/cycle", &cycle(qid, &pop, pop["leaseId"].as_str().unwrap(), 1, 0, true, 0)).await;
    assert_eq!(ok["success"], true, "{ok}");
    assert_eq!(rows(&b, qid, pid).await.len(), 1);
    let (status, reset) = register(&b, "q", "h2", true).await;
    assert_eq!(status, 200, "{reset}");
    assert_eq!(reset["reset"], true);
    assert_ne!(reset["query_id"], first["query_id"]);
    assert!(rows(&b, qid, pid).await.is_empty());
    let (status, refused) = b
        .post(
            "/streams/v1/cycle",
            &json!({"query_id": qid, "partition_id": pid, "consumer_group": GROUP,
                                            "state_ops": [], "push_items": [], "ack": null}),
        )
        .await;
    assert_eq!(
        (status, refused["success"].clone(), refused["error"].clone()),
        (200, json!(false), json!("query not found"))
    );
    let (status, bad) =
        b.post("/streams/v1/queries", &json!({"source_queue": "s", "config_hash": "h"})).await;
    assert_eq!(status, 400);
    assert_eq!(bad["error"], "name is required");
}

#[tokio::test]
async fn a_cycle_commits_state_emits_and_ack_together() {
    let b = TestBroker::start().await;
    let qid = query(&b).await;
    let pop = leased_batch(&b, 3).await;
    let lease = pop["leaseId"].as_str().unwrap();
    let pid = pop["partitionId"].as_str().unwrap();
    let (status, ok) = b.post("/streams/v1/cycle", &cycle(&qid, &pop, lease, 6, 2, true, 2)).await;
    assert_eq!(status, 200, "{ok}");
    assert_eq!(ok["success"], true, "{ok}");
    assert_eq!(ok["queueName"], "src");
    assert_eq!(ok["ack_result"]["lease_released"], true);
    assert_eq!(rows(&b, &qid, pid).await, [("total".to_owned(), json!({"total": 6}))]);
    let emitted = b.pop_some("dst", "batch=10").await;
    assert_eq!(
        emitted["messages"].as_array().unwrap().iter().map(|m| m["data"]["e"].clone()).collect::<Vec<_>>(),
        [json!(0), json!(1)]
    );
    // The source batch is consumed for the group: only a new message comes next.
    b.push("src", "Default", &[("s-next", json!({"amount": 9}))]).await;
    assert_eq!(tx_ids(&b.pop_some("src", &format!("batch=10&consumerGroup={GROUP}")).await), ["s-next"]);
    // Sent again (a lost 2xx), it finds its lease released: refused, nothing doubled.
    let (_, again) = b.post("/streams/v1/cycle", &cycle(&qid, &pop, lease, 99, 2, true, 2)).await;
    assert_eq!(
        (again["success"].clone(), again["error"].clone()),
        (json!(false), json!("invalid or expired lease"))
    );
    assert_eq!(rows(&b, &qid, pid).await, [("total".to_owned(), json!({"total": 6}))]);
    assert_eq!(dst_count(&b).await, 2);
}

#[tokio::test]
async fn a_stale_lease_or_a_refused_emit_leaves_nothing_behind() {
    let b = TestBroker::start().await;
    let qid = query(&b).await;
    let pop = leased_batch(&b, 2).await;
    let pid = pop["partitionId"].as_str().unwrap();
    let (status, body) = b
        .post("/streams/v1/cycle", &cycle(&qid, &pop, "0194e1c2-0000-7000-8000-000000000000", 3, 2, true, 1))
        .await;
    assert_eq!(
        (status, body["success"].clone(), body["error"].clone()),
        (200, json!(false), json!("invalid or expired lease"))
    );
    assert!(rows(&b, &qid, pid).await.is_empty());
    assert_eq!(dst_count(&b).await, 0);

    // The sink refuses an emit (maxSize): state and ack roll back with it.
    b.configure_ok("dst", json!({"maxSize": 1})).await;
    let lease = pop["leaseId"].as_str().unwrap();
    let (status, body) = b.post("/streams/v1/cycle", &cycle(&qid, &pop, lease, 3, 2, true, 1)).await;
    assert_eq!(status, 200);
    assert_eq!(body["success"], false, "{body}");
    assert!(body["error"].as_str().unwrap().contains("rolled back"), "{body}");
    assert!(rows(&b, &qid, pid).await.is_empty());
    assert_eq!(dst_count(&b).await, 0);
    // The lease is still ours: the cycle goes through once the sink takes it.
    b.configure_ok("dst", json!({"maxSize": 0})).await;
    let (_, ok) = b.post("/streams/v1/cycle", &cycle(&qid, &pop, lease, 3, 2, true, 1)).await;
    assert_eq!(ok["success"], true, "{ok}");
    assert_eq!(dst_count(&b).await, 2);
}

#[tokio::test]
async fn a_partial_ack_keeps_the_lease_and_its_replay_applies_nothing() {
    let b = TestBroker::start().await;
    b.configure_ok("src", json!({"leaseTime": 1})).await;
    let qid = query(&b).await;
    let pop = leased_batch(&b, 4).await;
    let lease = pop["leaseId"].as_str().unwrap();
    let pid = pop["partitionId"].as_str().unwrap();
    let partial = cycle(&qid, &pop, lease, 3, 2, false, 1);
    let (_, ok) = b.post("/streams/v1/cycle", &partial).await;
    assert_eq!(
        (ok["success"].clone(), ok["ack_result"]["lease_released"].clone()),
        (json!(true), json!(false)),
        "{ok}"
    );
    let mut keys: Vec<&String> = ok.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "ack_result",
            "partition_id",
            "push_results",
            "query_id",
            "queueName",
            "state_ops_applied",
            "success"
        ],
        "an applied cycle answers every field but replayed: {ok}"
    );
    let (_, replay) = b.post("/streams/v1/cycle", &partial).await;
    assert_eq!(
        replay,
        json!({"success": true, "query_id": qid, "partition_id": pid, "queueName": "src",
               "state_ops_applied": 0, "push_results": [],
               "ack_result": {"success": true, "count": 0, "lease_released": false, "dlq": false},
               "replayed": true}),
        "a replay's whole answer"
    );
    assert_eq!(dst_count(&b).await, 2, "the replay emitted nothing");
    assert_eq!(rows(&b, &qid, pid).await, [("total".to_owned(), json!({"total": 3}))]);
    // The tail (s2, s3) comes back once the kept lease expires.
    let tail = eventually(Duration::from_secs(5), "the tail after the lease", || async {
        let (status, body) = b.pop("src", &format!("batch=10&consumerGroup={GROUP}")).await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(tx_ids(&tail), ["s2", "s3"]);
}

#[tokio::test]
async fn an_idle_flush_is_unfenced_but_a_replayed_one_is_refused() {
    let b = TestBroker::start().await;
    let qid = query(&b).await;
    let pop = leased_batch(&b, 1).await;
    let lease = pop["leaseId"].as_str().unwrap();
    let pid = pop["partitionId"].as_str().unwrap();
    let (_, ok) = b.post("/streams/v1/cycle", &cycle(&qid, &pop, lease, 1, 0, true, 0)).await;
    assert_eq!(ok["success"], true, "{ok}");
    let flush = json!({"query_id": qid, "partition_id": pid, "consumer_group": GROUP,
        "state_ops": [{"type": "delete", "key": "total"}], "push_items": [{"queue": "dst", "payload": {"window": 1}}],
        "ack": null, "release_lease": true});
    let (_, ok) = b.post("/streams/v1/cycle", &flush).await;
    assert_eq!((ok["success"].clone(), ok["ack_result"].clone()), (json!(true), Value::Null), "{ok}");
    let (_, again) = b.post("/streams/v1/cycle", &flush).await;
    assert_eq!(again["success"], false);
    assert!(again["error"].as_str().unwrap().contains("stale flush"), "{again}");
    assert_eq!(dst_count(&b).await, 1, "the window was emitted once");
}

#[tokio::test]
async fn state_reads_filter_by_keys_prefix_and_ripeness_in_key_order() {
    let b = TestBroker::start().await;
    let qid = query(&b).await;
    let pop = leased_batch(&b, 1).await;
    let pid = pop["partitionId"].as_str().unwrap();
    let ops = json!([
        {"type": "upsert", "key": "tumb:2\u{1f}b", "value": {"windowEnd": 2000, "acc": 1.5}},
        {"type": "upsert", "key": "tumb:2\u{1f}a", "value": {"windowEnd": 1000}},
        {"type": "upsert", "key": "__wm__", "value": 12345678901234567890u64},
    ]);
    let (_, ok) = b
        .post(
            "/streams/v1/cycle",
            &json!({"query_id": qid, "partition_id": pid, "consumer_group": GROUP,
                                            "state_ops": ops, "push_items": [], "ack": null}),
        )
        .await;
    assert_eq!(ok["success"], true, "{ok}");
    let bref = &b;
    let read = |body: Value| async move { bref.post("/streams/v1/state/get", &body).await.1 };
    let all = read(json!({"query_id": qid, "partition_id": pid, "keys": []})).await;
    let keys: Vec<&str> =
        all["rows"].as_array().unwrap().iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["__wm__", "tumb:2\u{1f}a", "tumb:2\u{1f}b"]);
    let ripe = read(json!({"query_id": qid, "partition_id": pid, "keys": [], "key_prefix": "tumb:2\u{1f}",
                           "ripe_at_or_before": 1500}))
    .await;
    assert_eq!(ripe["rows"].as_array().unwrap().len(), 1);
    assert_eq!(ripe["rows"][0]["key"], "tumb:2\u{1f}a");
    let one = read(json!({"query_id": qid, "partition_id": pid, "keys": ["__wm__"]})).await;
    assert_eq!(one["rows"][0]["value"], json!(12345678901234567890u64));
    let row = one["rows"][0].as_object().unwrap();
    assert_eq!(row.keys().map(String::as_str).collect::<Vec<_>>(), ["key", "updated_at", "value"], "{one}");
    assert!(row["updated_at"].as_str().is_some_and(|t| t.len() == 27 && t.ends_with('Z')), "{one}");
    let none = read(json!({"query_id": "not-a-uuid", "partition_id": pid, "keys": []})).await;
    assert_eq!(none, json!({"success": true, "rows": []}));
}

#[tokio::test]
async fn racing_cycles_on_one_lease_commit_exactly_once() {
    let b = TestBroker::start().await;
    let qid = query(&b).await;
    let pop = leased_batch(&b, 3).await;
    let lease = pop["leaseId"].as_str().unwrap().to_owned();
    let body = cycle(&qid, &pop, &lease, 6, 1, true, 2);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (api, body) = (b.api(), body.clone());
        tasks.push(tokio::spawn(async move { api.post("/streams/v1/cycle", &body).await }));
    }
    let mut won = 0;
    for t in tasks {
        let (status, answer) = t.await.unwrap();
        assert_eq!(status, 200, "{answer}");
        if answer["success"] == true {
            won += 1;
        } else {
            assert_eq!(answer["error"], "invalid or expired lease");
        }
    }
    assert_eq!(won, 1);
    assert_eq!(dst_count(&b).await, 1);
}

#[tokio::test]
async fn racing_copies_of_one_partial_ack_apply_once() {
    let b = TestBroker::start().await;
    let qid = query(&b).await;
    let pop = leased_batch(&b, 4).await;
    let lease = pop["leaseId"].as_str().unwrap().to_owned();
    let body = cycle(&qid, &pop, &lease, 3, 2, false, 1);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (api, body) = (b.api(), body.clone());
        tasks.push(tokio::spawn(async move { api.post("/streams/v1/cycle", &body).await }));
    }
    let mut applied = 0;
    for t in tasks {
        let (status, answer) = t.await.unwrap();
        assert_eq!((status, answer["success"].clone()), (200, json!(true)), "{answer}");
        if answer["replayed"] != true {
            applied += 1;
        }
    }
    assert_eq!(applied, 1, "one copy applied, the others answered as replays");
    assert_eq!(dst_count(&b).await, 2, "emitted once");
    let cursor =
        b.scalar(&format!("SELECT next_seq FROM queen.cursors WHERE consumer_group = '{GROUP}'")).await;
    assert_eq!(cursor, 2, "the cursor moved past the two acked messages only");
}

/// A failed cycle is a nack of its batch: retries counted, and after
/// `retryLimit` of them the batch's first message is dead-lettered (as a
/// message's failed ack is) and the rest comes back.
#[tokio::test]
async fn a_failed_cycle_dead_letters_after_the_retry_limit() {
    let b = TestBroker::start().await;
    let qid = query(&b).await;
    b.configure_ok("src", json!({"retryLimit": 2})).await;
    let mut pop = leased_batch(&b, 2).await;
    let failed = |pop: &Value| {
        json!({"query_id": qid, "partition_id": pop["partitionId"], "consumer_group": GROUP,
               "state_ops": [], "push_items": [],
               "ack": {"leaseId": pop["leaseId"], "status": "failed", "count": 2}, "release_lease": true})
    };
    for attempt in 0..2 {
        let (_, body) = b.post("/streams/v1/cycle", &failed(&pop)).await;
        assert_eq!(body["success"], true, "{body}");
        assert_eq!(body["ack_result"]["dlq"], false, "retry {attempt}: {body}");
        pop = b.pop_some("src", &format!("batch=100&consumerGroup={GROUP}")).await;
        assert_eq!(tx_ids(&pop), ["s0", "s1"], "redelivered whole");
    }
    let (_, body) = b.post("/streams/v1/cycle", &failed(&pop)).await;
    assert_eq!(
        (body["success"].clone(), body["ack_result"]["dlq"].clone()),
        (json!(true), json!(true)),
        "{body}"
    );
    let dlq = b.dlq("src").await;
    let dead = dlq["messages"].as_array().unwrap();
    assert_eq!(dead.len(), 1, "{dlq}");
    assert_eq!(dead[0]["transactionId"], "s0", "{dlq}");
    assert_eq!(dead[0]["consumerGroup"], GROUP, "{dlq}");
    // The rest of the batch comes back, its retries counted afresh.
    let rest = b.pop_some("src", &format!("batch=100&consumerGroup={GROUP}")).await;
    assert_eq!(tx_ids(&rest), ["s1"]);
    let retries = b
        .scalar(&format!("SELECT retry_count::bigint FROM queen.cursors WHERE consumer_group = '{GROUP}'"))
        .await;
    assert_eq!(retries, 0);
}

/// A cycle's push_results are the 201 body's elements (one writer,
/// `PushColumns::answer`): each emit's index, the stored message's id, its
/// transaction id (drawn by the engine when the emit has none) and status.
/// A cycle without emits answers an empty list, and so does its replay.
#[tokio::test]
async fn a_cycles_push_results_name_each_stored_emit_as_a_push_answers_it() {
    let b = TestBroker::start().await;
    let qid = query(&b).await;
    let pop = leased_batch(&b, 2).await;
    let lease = pop["leaseId"].as_str().unwrap();
    let mut body = cycle(&qid, &pop, lease, 3, 2, true, 1);
    body["push_items"][1]["transactionId"] = json!("emit-1");
    let (status, ok) = b.post("/streams/v1/cycle", &body).await;
    assert_eq!((status, ok["success"].clone()), (200, json!(true)), "{ok}");
    let results = ok["push_results"].as_array().expect("push_results");
    assert_eq!(results.len(), 2, "{ok}");
    let stored = b.sql().await;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(
            (r["index"].clone(), r["status"].clone(), r["queueName"].clone()),
            (json!(i), json!("queued"), json!("dst"))
        );
        let txid = r["transaction_id"].as_str().expect("a transaction id");
        let id: String = stored
            .query_one("SELECT id::text FROM queen.messages WHERE transaction_id = $1", &[&txid])
            .await
            .expect("the emit is stored under the answered transaction id")
            .get(0);
        assert_eq!(r["message_id"], json!(id), "{ok}");
    }
    assert_eq!(results[1]["transaction_id"], "emit-1");
    let drawn = uuid::Uuid::parse_str(results[0]["transaction_id"].as_str().unwrap()).expect("a uuid");
    assert_eq!(drawn.get_version_num(), 7, "the engine draws a missing id as a push does");

    // No emits: an empty list, not a missing field.
    b.push("src", "Default", &[("quiet", json!({"amount": 9}))]).await;
    let pop = b.pop_some("src", &format!("batch=100&consumerGroup={GROUP}")).await;
    let lease = pop["leaseId"].as_str().unwrap();
    let (_, quiet) = b.post("/streams/v1/cycle", &cycle(&qid, &pop, lease, 4, 0, true, 0)).await;
    assert_eq!(
        (quiet["success"].clone(), quiet["push_results"].clone()),
        (json!(true), json!([])),
        "{quiet}"
    );
}
