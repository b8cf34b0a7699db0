//! Real `queen serve` processes: two brokers on one database give the same
//! guarantees as one, and SIGTERM shuts a broker down gracefully.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{eventually, tx_ids, txids, Api, BrokerProcess, TestDb};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_through_one_broker_is_visible_to_a_pop_through_the_other() {
    let db = TestDb::create().await;
    let a = BrokerProcess::spawn(&db.name).await;
    let b = BrokerProcess::spawn(&db.name).await;
    a.push("shared", "Default", &[("t1", json!({"via": "a"}))]).await;
    let popped = b.pop_some("shared", "batch=10").await;
    assert_eq!(tx_ids(&popped), ["t1"]);
    assert_eq!(popped["messages"][0]["data"], json!({"via": "a"}));
    // The lease taken through B fences A's consumers too.
    a.pop_none("shared", "batch=10").await;
    // An ack through A commits what B delivered; an extend through A sees B's lease first.
    let (_, ext) =
        a.post_empty(&format!("/api/v1/lease/{}/extend", popped["leaseId"].as_str().unwrap())).await;
    assert_eq!(ext["success"], true);
    assert_eq!(a.ack(&popped["messages"][0], "completed", None).await["leaseReleased"], true);
    b.pop_none("shared", "batch=10").await;
    // Configuration through one broker applies through the other.
    a.configure_ok("strict", json!({"retryLimit": 0})).await;
    b.push("strict", "Default", &[("s1", json!(1))]).await;
    let m = a.pop_some("strict", "batch=1").await;
    assert_eq!(b.ack(&m["messages"][0], "failed", None).await["dlq"], true);
    assert_eq!(a.dlq("strict").await["total"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_on_two_brokers_never_overlap_leases_and_ack_the_sequence_in_order() {
    let db = TestDb::create().await;
    let a = BrokerProcess::spawn(&db.name).await;
    let b = BrokerProcess::spawn(&db.name).await;
    let ids = txids("m", 120);
    for chunk in ids.chunks(40) {
        a.push_txids("lane", "Default", chunk).await;
    }
    let brokers = [a.api.clone(), b.api.clone()];
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..6usize {
        let brokers = brokers.clone();
        let acked = acked.clone();
        let in_flight = in_flight.clone();
        workers.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut turn = w;
            let mut pops_per_broker = [0usize; 2];
            loop {
                if acked.lock().unwrap().len() >= 120 {
                    return pops_per_broker;
                }
                assert!(Instant::now() < deadline, "consumers did not drain the lane");
                // Alternate brokers: pop through one, ack through the other.
                let side = turn % 2;
                let popper: &Api = &brokers[side];
                let acker: &Api = &brokers[1 - side];
                turn += 1;
                let batch = 1 + w % 3;
                let (status, popped) = popper.pop("lane", &format!("batch={batch}")).await;
                if status == 204 {
                    tokio::task::yield_now().await;
                    continue;
                }
                assert_eq!(status, 200, "{popped}");
                pops_per_broker[side] += 1;
                let others = in_flight.fetch_add(1, Ordering::SeqCst);
                assert_eq!(others, 0, "two consumers held the partition at once");
                let got = tx_ids(&popped);
                acked.lock().unwrap().extend(got);
                let last: Value = popped["messages"].as_array().unwrap().last().unwrap().clone();
                in_flight.fetch_sub(1, Ordering::SeqCst);
                let r = acker.ack(&last, "completed", None).await;
                assert_eq!(r["success"], true, "{r}");
                assert_eq!(r["leaseReleased"], true);
            }
        }));
    }
    let mut per_broker = [0usize; 2];
    for w in workers {
        let counts = w.await.unwrap();
        per_broker[0] += counts[0];
        per_broker[1] += counts[1];
    }
    assert_eq!(*acked.lock().unwrap(), ids, "the union of acks is the pushed sequence, in order");
    assert!(per_broker[0] > 0 && per_broker[1] > 0, "both brokers served pops: {per_broker:?}");
    a.pop_none("lane", "batch=10").await;
    b.pop_none("lane", "batch=10").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_on_one_broker_is_woken_by_a_push_on_the_other() {
    let db = TestDb::create().await;
    let a = BrokerProcess::spawn(&db.name).await;
    let b = BrokerProcess::spawn(&db.name).await;
    let waiter = b.api.clone();
    let start = Instant::now();
    let poll = tokio::spawn(async move {
        let answer = waiter.get("/api/v1/pop/queue/wake?wait=true&timeout=20000&batch=5").await;
        (answer, start.elapsed())
    });
    // Push once B's long poll is waiting.
    eventually(Duration::from_secs(5), "the long poll to wait on B", || async {
        let (_, m) = b.get("/metrics").await;
        (m["longPolls"]["queuesWaiting"].as_u64() == Some(1)).then_some(())
    })
    .await;
    let pushed_at = start.elapsed();
    a.push("wake", "Default", &[("w1", json!(1))]).await;
    let ((status, popped), took) = poll.await.unwrap();
    assert_eq!(status, 200, "{popped}");
    assert_eq!(tx_ids(&popped), ["w1"]);
    assert!(took - pushed_at < Duration::from_millis(2000), "woken {:?} after the push", took - pushed_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_answers_waiting_long_polls_and_exits_0() {
    let db = TestDb::create().await;
    let mut p = BrokerProcess::spawn(&db.name).await;
    let waiter = p.api.clone();
    let poll = tokio::spawn(async move {
        let answer = waiter.get("/api/v1/pop/queue/idle?wait=true&timeout=30000&batch=1").await;
        (answer, Instant::now())
    });
    eventually(Duration::from_secs(5), "the long poll to wait", || async {
        let (_, m) = p.get("/metrics").await;
        (m["longPolls"]["queuesWaiting"].as_u64() == Some(1)).then_some(())
    })
    .await;
    let sent = Instant::now();
    p.terminate();
    let ((status, body), answered) = poll.await.unwrap();
    assert_eq!(status, 204, "{body}");
    assert!(
        answered - sent < Duration::from_secs(3),
        "long poll answered {:?} after SIGTERM",
        answered - sent
    );
    let exit = p.wait_exit(Duration::from_secs(10)).await;
    assert!(exit.success(), "queen serve exited with {exit}");
    assert!(sent.elapsed() < Duration::from_secs(10));
}
