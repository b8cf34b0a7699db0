//! Queue options that change delivery over time: retryDelay, ttl,
//! retention (retentionSeconds, completedRetentionSeconds) and
//! maxWaitTimeSeconds.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{eventually, tx_ids, TestBroker};
use queen_engine::RetentionStatsSnapshot;
use serde_json::{json, Value};

/// One retention pass, retried while the broker's own sweeper holds the lock.
async fn sweep(b: &TestBroker) -> RetentionStatsSnapshot {
    eventually(Duration::from_secs(10), "a retention pass", || async {
        b.engine.sweep_retention_once().await.expect("sweep")
    })
    .await
}

async fn messages_left(b: &TestBroker, queue: &str) -> Vec<String> {
    let sql = b.sql().await;
    sql.query(
        "SELECT m.transaction_id FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
           JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY m.seq",
        &[&queue],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

async fn log_start(b: &TestBroker, queue: &str) -> Value {
    let (status, body) = b
        .post("/api/v1/fetch", &json!({"entries": [{"queue": queue, "partition": "Default", "offset": 0}]}))
        .await;
    assert_eq!(status, 200, "{body}");
    body["entries"][0]["logStartOffset"].clone()
}

#[tokio::test]
async fn retry_delay_holds_a_nacked_message_back_for_that_long() {
    let b = TestBroker::start().await;
    let conf = b.configure_ok("slow-retry", json!({"retryDelay": 1500})).await;
    assert_eq!(conf["options"]["retryDelay"], 1500);
    b.push("slow-retry", "Default", &[("r1", json!(1))]).await;
    let first = b.pop_some("slow-retry", "batch=1").await;
    let nacked = Instant::now();
    b.ack(&first["messages"][0], "failed", None).await;
    b.pop_none("slow-retry", "batch=1").await;
    let again = eventually(Duration::from_secs(5), "the redelivery", || async {
        let (status, body) = b.pop("slow-retry", "batch=1").await;
        (status == 200).then_some(body)
    })
    .await;
    let waited = nacked.elapsed();
    assert_eq!(tx_ids(&again), ["r1"]);
    assert!(waited >= Duration::from_millis(1450), "redelivered after {waited:?}");
}

#[tokio::test]
async fn retry_delay_also_follows_an_expired_lease_and_zero_redelivers_at_once() {
    let b = TestBroker::start().await;
    b.configure_ok("lapse", json!({"leaseTime": 1, "retryDelay": 1500})).await;
    b.push("lapse", "Default", &[("l1", json!(1))]).await;
    let popped = Instant::now();
    b.pop_some("lapse", "batch=1").await;
    eventually(Duration::from_secs(6), "the redelivery after expiry", || async {
        let (status, _) = b.pop("lapse", "batch=1").await;
        (status == 200).then_some(())
    })
    .await;
    let waited = popped.elapsed();
    assert!(waited >= Duration::from_millis(2400), "lease 1 s + delay 1.5 s, redelivered after {waited:?}");

    // The default: a nack redelivers at once.
    b.push("eager", "Default", &[("e1", json!(1))]).await;
    let first = b.pop_some("eager", "batch=1").await;
    b.ack(&first["messages"][0], "failed", None).await;
    assert_eq!(tx_ids(&b.pop_some("eager", "batch=1").await), ["e1"]);
}

#[tokio::test]
async fn ttl_skips_messages_older_than_it_for_every_group() {
    let b = TestBroker::start().await;
    let conf = b.configure_ok("short-lived", json!({"ttl": 1})).await;
    assert_eq!(conf["options"]["ttl"], 1);
    b.push("short-lived", "Default", &[("old-1", json!(1)), ("old-2", json!(2))]).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    b.push("short-lived", "Default", &[("fresh", json!(3))]).await;
    assert_eq!(tx_ids(&b.pop_some("short-lived", "batch=10").await), ["fresh"]);
    assert_eq!(
        tx_ids(&b.pop_some("short-lived", "batch=10&subscriptionMode=all&consumerGroup=audit").await),
        ["fresh"]
    );
    // Expired is not deleted: reads by offset still see the log.
    assert_eq!(messages_left(&b, "short-lived").await, ["old-1", "old-2", "fresh"]);
}

#[tokio::test]
async fn retention_seconds_removes_old_messages_consumed_or_not_and_moves_the_log_start() {
    let b = TestBroker::start().await;
    b.configure_ok("kept", json!({"retentionEnabled": true, "retentionSeconds": 1})).await;
    b.push("kept", "Default", &[("a", json!(1)), ("b", json!(2)), ("c", json!(3))]).await;
    // Fresh messages survive a pass.
    sweep(&b).await;
    assert_eq!(messages_left(&b, "kept").await.len(), 3);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    b.push("kept", "Default", &[("d", json!(4))]).await;
    let removed = sweep(&b).await;
    assert_eq!(removed.retained, 3, "{removed:?}");
    assert_eq!(messages_left(&b, "kept").await, ["d"]);
    assert_eq!(log_start(&b, "kept").await, json!(3));
    assert_eq!(tx_ids(&b.pop_some("kept", "batch=10").await), ["d"]);
    // Without retentionEnabled the same option removes nothing.
    b.configure_ok("unkept", json!({"retentionSeconds": 1})).await;
    b.push("unkept", "Default", &[("x", json!(1))]).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    sweep(&b).await;
    assert_eq!(messages_left(&b, "unkept").await, ["x"]);
}

#[tokio::test]
async fn completed_retention_removes_only_what_every_group_consumed() {
    let b = TestBroker::start().await;
    b.configure_ok("done", json!({"retentionEnabled": true, "completedRetentionSeconds": 1})).await;
    b.push("done", "Default", &[("a", json!(1)), ("b", json!(2)), ("c", json!(3)), ("d", json!(4))]).await;
    // Queue mode consumes a and b; group "slow" consumes only a.
    let two = b.pop_some("done", "batch=2").await;
    b.ack_batch(
        json!(two["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| json!({
            "transactionId": m["transactionId"], "partitionId": m["partitionId"],
            "leaseId": m["leaseId"], "status": "completed"}))
            .collect::<Vec<_>>()),
        None,
    )
    .await;
    let one = b.pop_some("done", "batch=1&subscriptionMode=all&consumerGroup=slow").await;
    b.ack(&one["messages"][0], "completed", Some("slow")).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let removed = sweep(&b).await;
    assert_eq!(removed.retained, 1, "{removed:?}");
    assert_eq!(messages_left(&b, "done").await, ["b", "c", "d"]);
    assert_eq!(
        tx_ids(&b.pop_some("done", "batch=10&subscriptionMode=all&consumerGroup=slow").await),
        ["b", "c", "d"]
    );
}

#[tokio::test]
async fn max_wait_evicts_unconsumed_messages_and_counts_them() {
    let b = TestBroker::start().await;
    b.configure_ok("impatient", json!({"maxWaitTimeSeconds": 1})).await;
    b.push("impatient", "Default", &[("a", json!(1)), ("b", json!(2)), ("c", json!(3))]).await;
    let first = b.pop_some("impatient", "batch=1").await;
    b.ack(&first["messages"][0], "completed", None).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    b.push("impatient", "Default", &[("late", json!(4))]).await;
    let before = b.engine.retention_stats().evicted;
    sweep(&b).await;
    // b and c waited too long; a was consumed (retention is off, so it stays).
    assert_eq!(messages_left(&b, "impatient").await, ["a", "late"]);
    assert_eq!(b.engine.retention_stats().evicted - before, 2);
    assert_eq!(tx_ids(&b.pop_some("impatient", "batch=10").await), ["late"]);
    let (status, text) = {
        let r = b.http.get(b.url("/metrics/prometheus")).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(status, 200);
    let line =
        text.lines().find(|l| l.starts_with("queen_messages_removed_total{reason=\"max_wait\"}")).unwrap();
    let n: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 2, "{line}");
}

#[tokio::test]
async fn retention_passes_of_two_brokers_remove_each_message_once() {
    let b = TestBroker::start().await;
    let other = TestBroker::on(&b.db).await;
    b.configure_ok("shared", json!({"retentionEnabled": true, "retentionSeconds": 1})).await;
    let items: Vec<Value> = (0..40)
        .flat_map(|p| {
            (0..25).map(move |i| {
                json!({"queue": "shared", "partition": format!("p{p}"),
                                         "transactionId": format!("t{p}-{i}"), "payload": i})
            })
        })
        .collect();
    b.push_items(json!(items)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (x, y) = tokio::join!(
        async {
            let mut n = 0;
            for _ in 0..5 {
                n += b.engine.sweep_retention_once().await.unwrap().map_or(0, |s| s.retained);
            }
            n
        },
        async {
            let mut n = 0;
            for _ in 0..5 {
                n += other.engine.sweep_retention_once().await.unwrap().map_or(0, |s| s.retained);
            }
            n
        }
    );
    let left = b.scalar("SELECT count(*) FROM queen.messages").await;
    let background = b.engine.retention_stats().retained + other.engine.retention_stats().retained - x - y;
    assert_eq!(left, 0);
    assert_eq!(x + y + background, 1000, "each message removed once: {x} + {y} + {background}");
}

async fn configure_tagged(b: &TestBroker, queue: &str, namespace: &str, task: &str, priority: i64) {
    let (status, body) = b
        .post(
            "/api/v1/configure",
            &json!({"queue": queue, "namespace": namespace, "task": task, "options": {"priority": priority}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_namespace_or_task_pop_spans_its_queues_higher_priority_first() {
    let b = TestBroker::start().await;
    configure_tagged(&b, "mail-low", "mail", "send", 1).await;
    configure_tagged(&b, "mail-high", "mail", "send", 10).await;
    configure_tagged(&b, "mail-bounce", "mail", "bounce", 50).await;
    configure_tagged(&b, "sms", "sms", "send", 100).await;
    for q in ["mail-low", "mail-high", "mail-bounce", "sms"] {
        b.push(q, "Default", &[(&format!("{q}-1"), json!(1))]).await;
    }
    let (status, got) = b.get("/api/v1/pop?namespace=mail&task=send&wait=false&batch=5").await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["queue"], "mail-high");
    assert_eq!(tx_ids(&got), ["mail-high-1"]);
    let (_, got) = b.get("/api/v1/pop?namespace=mail&task=send&wait=false&batch=5").await;
    assert_eq!(tx_ids(&got), ["mail-low-1"]);
    let (status, _) = b.get("/api/v1/pop?namespace=mail&task=send&wait=false").await;
    assert_eq!(status, 204, "both leased: nothing left for namespace mail, task send");
    // A task alone spans namespaces; the acks of a tag pop are plain acks.
    let (_, got) = b.get("/api/v1/pop?task=send&wait=false&batch=5").await;
    assert_eq!(tx_ids(&got), ["sms-1"]);
    b.ack(&got["messages"][0], "completed", None).await;
    let (_, got) =
        b.get("/api/v1/pop?namespace=mail&wait=false&subscriptionMode=all&consumerGroup=audit").await;
    assert_eq!(got["queue"], "mail-bounce", "priority 50 first for a new group");
}

#[tokio::test]
async fn a_tag_pop_needs_a_tag_and_long_polls_until_a_push_to_any_queue() {
    let b = TestBroker::start().await;
    let (status, body) = b.get("/api/v1/pop?wait=false").await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("namespace"), "{body}");
    configure_tagged(&b, "later", "jobs", "run", 0).await;
    let api = b.api();
    let waiting =
        tokio::spawn(async move { api.get("/api/v1/pop?namespace=jobs&wait=true&timeout=10000").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    b.push("later", "Default", &[("woke", json!(1))]).await;
    let (status, got) = waiting.await.unwrap();
    assert_eq!(status, 200, "{got}");
    assert_eq!(tx_ids(&got), ["woke"]);
}

/// Queen 1.6's configure keys are all accepted; minPopWaitTime is clamped as
/// Queen clamps it; the sink hold is stored and labelled as not acted on.
#[tokio::test]
async fn queen_16_option_keys_are_accepted_and_the_ones_not_acted_on_are_labelled() {
    let b = TestBroker::start().await;
    let options = json!({"minPopWaitTime": 250, "dedupWindowSeconds": 10, "maxWaitTimeSeconds": 0,
                         "retentionSinkHold": "s3-archive", "retentionSinkHoldMaxSeconds": 3600});
    let (status, v) = b.configure("sixteen", options).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["options"]["minPopWaitTime"], 250);
    assert_eq!(v["options"]["retentionSinkHold"], "s3-archive");
    assert_eq!(v["options"]["retentionSinkHoldMaxSeconds"], 3600);
    assert_eq!(v["optionsNotActedOn"], json!(["retentionSinkHold", "retentionSinkHoldMaxSeconds"]));
    let (status, detail) = b.get("/api/v1/resources/queues/sixteen").await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["options"]["minPopWaitTime"], 250);
    assert_eq!(detail["optionsNotActedOn"], v["optionsNotActedOn"]);
    // Clamped, not refused.
    assert_eq!(
        b.configure_ok("sixteen", json!({"minPopWaitTime": -5})).await["options"]["minPopWaitTime"],
        0
    );
    assert_eq!(
        b.configure_ok("sixteen", json!({"minPopWaitTime": 99_999_999})).await["options"]["minPopWaitTime"],
        60000
    );
    // Bad values are refused with the field named, and nothing changes.
    for (bad, field) in [
        (json!({"retentionSinkHold": "a b"}), "options.retentionSinkHold"),
        (json!({"retentionSinkHold": 7}), "options.retentionSinkHold"),
        (json!({"retentionSinkHoldMaxSeconds": -1}), "options.retentionSinkHoldMaxSeconds"),
        (json!({"minPopWaitTime": "soon"}), "options.minPopWaitTime"),
    ] {
        let (status, body) = b.configure("sixteen", bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body.to_string().contains(field), "{bad}: {body}");
    }
    let (_, detail) = b.get("/api/v1/resources/queues/sixteen").await;
    assert_eq!(detail["options"]["retentionSinkHold"], "s3-archive");
    assert_eq!(detail["options"]["retentionSinkHoldMaxSeconds"], 3600);
    // "replace" resets them to Queen's defaults.
    let (status, v) =
        b.post("/api/v1/configure", &json!({"queue": "sixteen", "mode": "replace", "options": {}})).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["options"]["minPopWaitTime"], 0);
    assert_eq!(v["options"]["retentionSinkHold"], "");
    assert_eq!(v["options"]["retentionSinkHoldMaxSeconds"], 604800);
}

/// minPopWaitTime: a long poll for a batch finds 2 of 5 and waits for the
/// rest (one answer with all 5); without the option it answers the 2 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_pop_wait_time_holds_an_under_full_batch_until_it_fills() {
    let b = TestBroker::start().await;
    for (queue, wait) in [("filling", 5000), ("eager", 0)] {
        b.configure_ok(queue, json!({"minPopWaitTime": wait})).await;
        b.pop_none(queue, "batch=5").await; // registers queue mode
        b.push(queue, "Default", &[("a", json!(1)), ("b", json!(2))]).await;
        let api = b.api();
        let q = queue.to_owned();
        let pop = tokio::spawn(async move { api.pop(&q, "batch=5&wait=true&timeout=10000").await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        b.push(queue, "Default", &[("c", json!(3)), ("d", json!(4)), ("e", json!(5))]).await;
        let (status, popped) = pop.await.unwrap();
        assert_eq!(status, 200, "{popped}");
        let got = tx_ids(&popped);
        if wait > 0 {
            assert_eq!(got, ["a", "b", "c", "d", "e"], "the batch waited to fill");
        } else {
            assert_eq!(got, ["a", "b"], "without the option the pop answers what is there");
        }
    }
}

/// The fill wait never outlasts the caller's own wait: what is there is
/// delivered at the caller's deadline.
#[tokio::test]
async fn min_pop_wait_time_never_outlasts_the_callers_wait() {
    let b = TestBroker::start().await;
    b.configure_ok("patient", json!({"minPopWaitTime": 60000})).await;
    b.pop_none("patient", "batch=10").await;
    b.push("patient", "Default", &[("a", json!(1)), ("b", json!(2))]).await;
    let started = Instant::now();
    let popped = b.pop_some("patient", "batch=10&autoAck=true&wait=true&timeout=600").await;
    assert_eq!(tx_ids(&popped), ["a", "b"]);
    assert!(started.elapsed() < Duration::from_secs(5), "held {:?} past a 600 ms wait", started.elapsed());
    // A batch of one never waits, nor does a pop without wait.
    b.push("patient", "Default", &[("c", json!(3))]).await;
    let started = Instant::now();
    assert_eq!(tx_ids(&b.pop_some("patient", "batch=1&wait=true&timeout=30000").await), ["c"]);
    assert!(started.elapsed() < Duration::from_secs(5));
}
