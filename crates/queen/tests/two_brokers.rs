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

// ------------------------------------------------------------ round robin over two broker processes

/// POSTs one KV op to `api`; answers its result element (asserting 200).
async fn kv_one(api: &Api, op: Value) -> Value {
    let (status, body) = api.post("/api/v1/kv", &json!({ "operations": [op] })).await;
    assert_eq!(status, 200, "no 4xx or 5xx under a race: {body}");
    body["results"][0].clone()
}

/// Runs `n` racing calls of `op(i)`, call `i` through broker `i % 2` (round
/// robin), all released at once; answers (i, result) in call order.
async fn race_round_robin(brokers: [Api; 2], n: usize, op: fn(usize) -> Value) -> Vec<(usize, Value)> {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let (api, barrier) = (brokers[i % 2].clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            (i, kv_one(&api, op(i)).await)
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_put_if_absent_round_robin_over_two_brokers_has_one_winner_seen_by_every_loser() {
    let db = TestDb::create().await;
    let a = BrokerProcess::spawn(&db.name).await;
    let b = BrokerProcess::spawn(&db.name).await;
    let results = race_round_robin(
        [a.api.clone(), b.api.clone()],
        32,
        |i| json!({"op": "putIfAbsent", "ns": "race", "key": "once", "value": {"by": i}, "ttlSeconds": 600}),
    )
    .await;
    let winners: Vec<&(usize, Value)> = results.iter().filter(|(_, r)| r["applied"] == json!(true)).collect();
    assert_eq!(winners.len(), 1, "exactly one putIfAbsent applies across both brokers: {results:?}");
    let (who, w) = winners[0];
    assert_eq!(w["value"], json!({"by": who}));
    let mut losers_per_broker = [0usize; 2];
    for (i, r) in results.iter().filter(|(_, r)| r["applied"] != json!(true)) {
        assert_eq!(r["applied"], json!(false), "{r}");
        assert_eq!(r["reason"], "exists", "{r}");
        assert_eq!(r["value"], w["value"], "every loser sees the winner's value");
        assert_eq!(r["version"], w["version"], "and the winner's version");
        losers_per_broker[i % 2] += 1;
    }
    assert_eq!(losers_per_broker.iter().sum::<usize>(), 31);
    assert!(losers_per_broker.iter().all(|n| *n >= 15), "losers on both brokers: {losers_per_broker:?}");
    for api in [&a.api, &b.api] {
        let r = kv_one(api, json!({"op": "get", "ns": "race", "key": "once"})).await;
        assert_eq!(
            (&r["value"], &r["version"]),
            (&w["value"], &w["version"]),
            "both brokers read the winner"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_incr_with_max_50_round_robin_over_two_brokers_admits_exactly_50() {
    let db = TestDb::create().await;
    let a = BrokerProcess::spawn(&db.name).await;
    let b = BrokerProcess::spawn(&db.name).await;
    let results = race_round_robin(
        [a.api.clone(), b.api.clone()],
        160,
        |_| json!({"op": "incr", "ns": "race", "key": "quota", "delta": 1, "max": 50, "ttlSeconds": 3600}),
    )
    .await;
    let mut admitted = Vec::new();
    let mut answered_per_broker = [0usize; 2];
    for (i, r) in &results {
        answered_per_broker[i % 2] += 1;
        if r["applied"] == json!(true) {
            admitted.push(r["value"].as_i64().unwrap());
        } else {
            assert_eq!(r["reason"], "limit", "{r}");
            assert_eq!(r["value"], json!(50), "a refused incr answers the current number");
        }
    }
    admitted.sort();
    assert_eq!(admitted, (1..=50).collect::<Vec<i64>>(), "exactly 50 admitted, each saw a distinct count");
    // Not "both brokers admitted some": each broker batches its half, and
    // one batch may commit all 50 before the other broker's first one.
    assert_eq!(answered_per_broker, [80, 80], "each broker answered its half of the race");
    for api in [&a.api, &b.api] {
        assert_eq!(kv_one(api, json!({"op": "get", "ns": "race", "key": "quota"})).await["value"], json!(50));
    }
}

/// (markers without their ack, acks without their marker) over `groups`.
async fn once_ack_violations(sql: &tokio_postgres::Client, groups: &[&str]) -> (i64, i64) {
    let groups: Vec<&str> = groups.to_vec();
    let row = sql
        .query_one(
            "WITH acked AS (
               SELECT c.consumer_group || ':' || m.transaction_id AS key FROM queen.messages m
                 JOIN queen.cursors c ON c.partition_id = m.partition_id AND c.consumer_group = ANY($1)
                WHERE m.seq < c.next_seq)
             SELECT (SELECT count(*) FROM queen.kv k WHERE k.ns = 'once'
                       AND NOT EXISTS (SELECT 1 FROM acked a WHERE a.key = k.key)),
                    (SELECT count(*) FROM acked a
                      WHERE NOT EXISTS (SELECT 1 FROM queen.kv k WHERE k.ns = 'once' AND k.key = a.key))",
            &[&groups],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn once_and_ack_bundles_round_robin_over_two_brokers_commit_each_message_once_per_group() {
    const GROUPS: [&str; 2] = ["billing", "audit"];
    const MESSAGES: usize = 120;
    let db = TestDb::create().await;
    let a = BrokerProcess::spawn(&db.name).await;
    let b = BrokerProcess::spawn(&db.name).await;
    let items: Vec<Value> = (0..MESSAGES)
        .map(|i| json!({"queue": "rr", "partition": format!("p{}", i % 4), "transactionId": format!("m{i}"), "payload": i}))
        .collect();
    for chunk in items.chunks(40) {
        a.push_items(json!(chunk)).await;
    }
    let brokers = [a.api.clone(), b.api.clone()];
    let committed = Arc::new(Mutex::new(Vec::<String>::new()));
    let replays_refused = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for group in GROUPS {
        for w in 0..3usize {
            let (brokers, committed, replays_refused) =
                (brokers.clone(), committed.clone(), replays_refused.clone());
            workers.push(tokio::spawn(async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                let mut turn = w;
                let mut idle = 0;
                while idle < 20 {
                    assert!(Instant::now() < deadline, "the workers did not drain the queue");
                    // Round robin: pop through one broker, commit through the other,
                    // then replay the same bundle through the first (a client retry
                    // that a load balancer sends elsewhere).
                    let (popper, committer) = (&brokers[turn % 2], &brokers[(turn + 1) % 2]);
                    turn += 1;
                    let (status, popped) = popper.pop("rr", &format!("batch=1&leaseSeconds=30&subscriptionMode=all&consumerGroup={group}")).await;
                    if status == 204 {
                        idle += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    idle = 0;
                    assert_eq!(status, 200, "{popped}");
                    let m = &popped["messages"][0];
                    let tx = m["transactionId"].as_str().unwrap();
                    let bundle = json!({
                        "operations": [{"type": "ack", "transactionId": tx, "partitionId": m["partitionId"],
                                        "leaseId": m["leaseId"], "status": "completed", "consumerGroup": group}],
                        "requiredLeases": [m["leaseId"]],
                        "kv": [{"op": "putIfAbsent", "ns": "once", "key": format!("{group}:{tx}"),
                                "value": {"by": group}, "ttlSeconds": 3600, "required": true}],
                    });
                    let (status, answer) = committer.post("/api/v1/transaction", &bundle).await;
                    assert_eq!(status, 200, "{answer}");
                    assert_eq!(answer["success"], json!(true), "a fresh bundle commits: {answer}");
                    committed.lock().unwrap().push(format!("{group}:{tx}"));
                    let (status, replay) = popper.post("/api/v1/transaction", &bundle).await;
                    assert_eq!(status, 200, "{replay}");
                    assert_eq!(replay["success"], json!(false), "a replayed bundle changes nothing: {replay}");
                    replays_refused.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
    }
    for w in workers {
        w.await.unwrap();
    }
    let mut committed = committed.lock().unwrap().clone();
    committed.sort();
    let mut want: Vec<String> =
        GROUPS.iter().flat_map(|g| (0..MESSAGES).map(move |i| format!("{g}:m{i}"))).collect();
    want.sort();
    assert_eq!(committed, want, "each (group, message) committed exactly once across both brokers");
    assert_eq!(replays_refused.load(Ordering::SeqCst), want.len());
    let (sql, conn) =
        tokio_postgres::connect(&common::url_for(&db.name), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    assert_eq!(once_ack_violations(&sql, &GROUPS).await, (0, 0), "marker and ack commit together");
    let markers: i64 =
        sql.query_one("SELECT count(*) FROM queen.kv WHERE ns = 'once'", &[]).await.unwrap().get(0);
    assert_eq!(markers as usize, want.len());
    let groups: Vec<&str> = GROUPS.to_vec();
    let backlog = common::group_backlog(&sql, &groups).await;
    assert_eq!(backlog, 0, "both groups' cursors are at the end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_metrics_list_every_broker_on_the_database() {
    let db = TestDb::create().await;
    let mut a = BrokerProcess::spawn(&db.name).await;
    let b = BrokerProcess::spawn(&db.name).await;
    let pids = |v: &Value| -> Vec<u64> {
        let mut p: Vec<u64> =
            v["workers"].as_array().unwrap().iter().map(|w| w["pid"].as_u64().unwrap()).collect();
        p.sort();
        p
    };
    let mut both = vec![a.pid() as u64, b.pid() as u64];
    both.sort();
    // Each broker beats at start, then every few seconds.
    let seen = eventually(Duration::from_secs(15), "both brokers registered", || {
        let api = b.api.clone();
        let both = both.clone();
        async move {
            let (code, v) = api.get("/api/v1/analytics/worker-metrics").await;
            (code == 200 && pids(&v) == both).then_some(v)
        }
    })
    .await;
    for w in seen["workers"].as_array().unwrap() {
        assert!(w["figures"]["pool"]["max"].as_u64().unwrap() > 0, "{w}");
        assert!(w["figures"]["rssBytes"].as_u64().unwrap() > 1_000_000, "{w}");
        assert!(w["url"].as_str().unwrap().starts_with("http://127.0.0.1:"), "{w}");
        assert!(w["secondsSinceHeartbeat"].as_f64().unwrap() < 30.0, "{w}");
    }
    let (_, from_a) = a.get("/api/v1/analytics/worker-metrics").await;
    assert_eq!(pids(&from_a), both, "every broker answers with all of them");
    assert_ne!(from_a["answeredBy"], seen["answeredBy"]);

    // A broker that stops gracefully takes its row with it.
    a.terminate();
    a.wait_exit(Duration::from_secs(20)).await;
    let only_b = vec![b.pid() as u64];
    eventually(Duration::from_secs(10), "the stopped broker is gone from the list", || {
        let api = b.api.clone();
        let only_b = only_b.clone();
        async move {
            let (code, v) = api.get("/api/v1/analytics/worker-metrics").await;
            (code == 200 && pids(&v) == only_b).then_some(())
        }
    })
    .await;
}
