//! PostgreSQL restarted under load (issue 8). Each test boots a PRIVATE
//! cluster (initdb/pg_ctl from the system's binaries, in a temp dir, on a
//! free TCP port, owned by an unprivileged account when we run as root),
//! runs a real `queen serve` on it, and stops PostgreSQL under load with
//! `pg_ctl stop -m immediate` (a crash: no checkpoint, recovery on start).
//! While it is down the broker answers 503 with `Retry-After`; when it is
//! back the same broker process recovers by itself, nothing acknowledged is
//! lost, and long polls resume. The shared test server on 5432 is never
//! touched.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Api, BrokerProcess, PrivatePg, ServeSpec};
use serde_json::{json, Value};

/// A private cluster with database `queen` and a `queen serve` on it.
async fn cluster_and_broker() -> (PrivatePg, BrokerProcess) {
    let pg = PrivatePg::start();
    pg.sql("postgres").await.batch_execute("CREATE DATABASE queen").await.expect("create database");
    // The spool off: these tests pin the 503 a push gets while PostgreSQL is
    // away without one (tests/spool.rs has the spool's outages).
    let spec = ServeSpec { url: pg.url("queen"), port: common::free_port(), env: Vec::new(), log: None }
        .env("RUST_LOG", "error")
        .env("QUEEN_SPOOL", "false");
    let broker = BrokerProcess::spawn_with(&spec).await;
    (pg, broker)
}

/// Tallies of what the broker answered.
#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    unavailable: AtomicUsize,
    unavailable_without_retry_after: AtomicUsize,
    /// Anything else (5xx but 503, 4xx, no HTTP answer at all): must stay empty.
    unexpected: Mutex<Vec<String>>,
}

impl Tally {
    /// Classifies one answer; true when it was a 503 (retry later).
    fn record(&self, what: &str, status: u16, retry_after: Option<&str>, body: &str, ok: &[u16]) -> bool {
        if ok.contains(&status) {
            self.ok.fetch_add(1, SeqCst);
            false
        } else if status == 503 {
            self.unavailable.fetch_add(1, SeqCst);
            if retry_after != Some("1") {
                self.unavailable_without_retry_after.fetch_add(1, SeqCst);
            }
            true
        } else {
            self.unexpected.lock().unwrap().push(format!("{what}: {status} {body}"));
            false
        }
    }

    fn no_answer(&self, what: &str, e: &reqwest::Error) {
        self.unexpected.lock().unwrap().push(format!("{what}: no HTTP answer: {e}"));
    }
}

/// Sends a request; answers (status, Retry-After, body) or None without an HTTP answer.
async fn send(req: reqwest::RequestBuilder) -> Result<(u16, Option<String>, String), reqwest::Error> {
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    let retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body = resp.text().await?;
    Ok((status, retry_after, body))
}

/// Pushes one message per call with ids `{name}-{n}`; a push answered 503 is
/// retried with the same id (the dedup window makes that idempotent) until
/// it answers 201. Answers the confirmed ids.
async fn pusher(api: Api, name: &'static str, tally: Arc<Tally>, stop: Arc<AtomicBool>) -> Vec<String> {
    let mut confirmed = Vec::new();
    let mut n = 0;
    while !stop.load(SeqCst) {
        let tx = format!("{name}-{n}");
        n += 1;
        let body = json!({"items": [{"queue": "load", "partition": name, "transactionId": tx, "payload": {"tx": tx}}]});
        loop {
            match send(api.http.post(api.url("/api/v1/push")).json(&body)).await {
                Ok((status, ra, text)) => {
                    if !tally.record("push", status, ra.as_deref(), &text, &[201]) {
                        if status == 201 {
                            confirmed.push(tx.clone());
                        }
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    tally.no_answer("push", &e);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    confirmed
}

/// Long-polls `load` and acks every delivery; records deliveries and the
/// acks that answered success.
#[derive(Default)]
struct ConsumerLog {
    delivered: Mutex<Vec<String>>,
    acked: Mutex<Vec<String>>,
    /// A message delivered again after its ack had answered success: an ack was lost.
    redelivered_after_ack: Mutex<Vec<String>>,
}

async fn consumer(api: Api, tally: Arc<Tally>, log: Arc<ConsumerLog>, stop: Arc<AtomicBool>) {
    while !stop.load(SeqCst) {
        let popped = match send(
            api.http.get(api.url("/api/v1/pop/queue/load?wait=true&timeout=1000&batch=20&leaseSeconds=2")),
        )
        .await
        {
            Ok((status, ra, text)) => {
                if tally.record("pop", status, ra.as_deref(), &text, &[200, 204]) {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                if status != 200 {
                    continue;
                }
                serde_json::from_str::<Value>(&text).expect("pop answers JSON")
            }
            Err(e) => {
                tally.no_answer("pop", &e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let messages = popped["messages"].as_array().cloned().unwrap_or_default();
        {
            let acked = log.acked.lock().unwrap();
            for m in &messages {
                let tx = m["transactionId"].as_str().unwrap().to_owned();
                if acked.contains(&tx) {
                    log.redelivered_after_ack.lock().unwrap().push(tx.clone());
                }
                log.delivered.lock().unwrap().push(tx);
            }
        }
        let acks: Vec<Value> = messages
            .iter()
            .map(|m| {
                json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                       "leaseId": m["leaseId"], "status": "completed"})
            })
            .collect();
        match send(api.http.post(api.url("/api/v1/ack/batch")).json(&json!({ "acknowledgments": acks })))
            .await
        {
            Ok((status, ra, text)) => {
                // A 503 ack: the lease expires and the messages come again.
                if !tally.record("ack", status, ra.as_deref(), &text, &[200]) && status == 200 {
                    let results: Value = serde_json::from_str(&text).expect("ack answers JSON");
                    let mut acked = log.acked.lock().unwrap();
                    for (m, r) in messages.iter().zip(results.as_array().expect("ack array")) {
                        if r["success"] == json!(true) {
                            acked.push(m["transactionId"].as_str().unwrap().to_owned());
                        }
                    }
                }
            }
            Err(e) => tally.no_answer("ack", &e),
        }
    }
}

/// The client's long-poll loop: waits on `late`, honours Retry-After on a
/// 503, and answers the first message it gets with the number of 503s.
async fn patient_long_poll(api: Api) -> (Value, usize, usize) {
    let mut unavailable = 0;
    let mut polls = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < deadline, "the long poll never got the message");
        polls += 1;
        match send(api.http.get(api.url("/api/v1/pop/queue/late?wait=true&timeout=30000&batch=1"))).await {
            Ok((200, _, text)) => return (serde_json::from_str(&text).unwrap(), unavailable, polls),
            Ok((204, _, _)) => {}
            Ok((503, ra, _)) => {
                unavailable += 1;
                let secs: u64 = ra.and_then(|v| v.parse().ok()).expect("a 503 carries Retry-After seconds");
                tokio::time::sleep(Duration::from_secs(secs)).await;
            }
            Ok((status, _, text)) => panic!("long poll answered {status} {text}"),
            Err(e) => panic!("long poll got no HTTP answer: {e}"),
        }
    }
}

/// Probes every kind of route once while PostgreSQL is down; all must be 503 + Retry-After.
async fn probe_while_down(api: &Api, tally: &Tally, i: usize) {
    let probes = [
        api.http.post(api.url("/api/v1/push")).json(
            &json!({"items": [{"queue": "probe", "transactionId": format!("down-{i}"), "payload": 1}]}),
        ),
        api.http.get(api.url("/api/v1/pop/queue/load?wait=false&batch=1")),
        api.http.post(api.url("/api/v1/kv")).json(
            &json!({"operations": [{"op": "put", "ns": "probe", "key": format!("down-{i}"), "value": 1, "forever": true}]}),
        ),
        api.http.post(api.url("/api/v1/transaction")).json(&json!({"operations": [],
            "kv": [{"op": "putIfAbsent", "ns": "probe", "key": format!("tx-{i}"), "value": 1, "ttlSeconds": 60}]})),
        api.http.get(api.url("/ready")),
    ];
    for (n, req) in probes.into_iter().enumerate() {
        match send(req).await {
            Ok((status, ra, text)) => {
                assert_eq!(status, 503, "probe {n} while PostgreSQL is down: {status} {text}");
                assert_eq!(ra.as_deref(), Some("1"), "probe {n}: a 503 carries Retry-After: 1");
                let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                assert!(
                    body["error"].is_string() || body["status"].is_string(),
                    "probe {n}: the 503 body says why: {text}"
                );
                tally.unavailable.fetch_add(1, SeqCst);
            }
            Err(e) => panic!("probe {n} while PostgreSQL is down got no HTTP answer: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_under_load_is_503_while_down_and_recovers_without_a_broker_restart() {
    let (pg, mut broker) = cluster_and_broker().await;
    let api = Api {
        base: broker.api.base.clone(),
        http: reqwest::Client::builder().timeout(Duration::from_secs(40)).build().unwrap(),
    };
    let pid = broker.pid();

    let tally = Arc::new(Tally::default());
    let log = Arc::new(ConsumerLog::default());
    let stop_push = Arc::new(AtomicBool::new(false));
    let stop_pop = Arc::new(AtomicBool::new(false));
    let pushers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| tokio::spawn(pusher(api.clone(), name, tally.clone(), stop_push.clone())))
        .collect();
    let consumer = tokio::spawn(consumer(api.clone(), tally.clone(), log.clone(), stop_pop.clone()));
    // A client long poll that starts before the outage and lives across it.
    let late = tokio::spawn(patient_long_poll(api.clone()));

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let acked_before = log.acked.lock().unwrap().len();
    assert!(acked_before > 0, "the load ran before the outage");

    // Down: a crash of PostgreSQL, no checkpoint.
    pg.pg_ctl_stop("immediate");
    let down_at = Instant::now();
    let mut probes = 0;
    let probe_tally = Tally::default();
    while down_at.elapsed() < Duration::from_secs(3) {
        probe_while_down(&api, &probe_tally, probes).await;
        probes += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let unavailable_during_outage = probe_tally.unavailable.load(SeqCst);

    // Up again: the same broker process recovers by itself.
    pg.pg_ctl_start();
    let up_at = Instant::now();
    common::eventually(Duration::from_secs(30), "the broker to recover", || async {
        let (status, _, _) = send(api.http.get(api.url("/ready"))).await.ok()?;
        (status == 200).then_some(())
    })
    .await;
    let recovered_in = up_at.elapsed();
    assert!(broker.child.try_wait().unwrap().is_none(), "the broker did not exit");
    assert_eq!(broker.pid(), pid);

    // The long poll resumes and gets a message pushed after recovery.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!late.is_finished(), "nothing was pushed to `late` yet");
    api.push("late", "Default", &[("after-recovery", json!({"n": 1}))]).await;
    let (late_msg, late_503s, late_polls) =
        tokio::time::timeout(Duration::from_secs(10), late).await.expect("long poll resumed").unwrap();
    assert_eq!(late_msg["messages"][0]["transactionId"], "after-recovery");

    // More load after recovery, then drain.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop_push.store(true, SeqCst);
    let mut confirmed = Vec::new();
    for p in pushers {
        confirmed.extend(p.await.unwrap());
    }
    let confirmed_set: BTreeSet<String> = confirmed.iter().cloned().collect();
    // Drained when the cursor is past every message. (An ack answered 503
    // may or may not have committed; the cursor is the truth.)
    let sql = pg.sql("queen").await;
    let sql_ref = &sql;
    common::eventually(Duration::from_secs(30), "the consumer to drain the queue", || async move {
        let backlog: i64 = sql_ref
            .query_one(
                "SELECT coalesce(sum(p.next_seq - c.next_seq), 0)::bigint FROM queen.partitions p
                   JOIN queen.queues q ON q.id = p.queue_id
                   JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = '__QUEUE_MODE__'
                  WHERE q.name = 'load'",
                &[],
            )
            .await
            .ok()?
            .get(0);
        (backlog == 0).then_some(())
    })
    .await;
    stop_pop.store(true, SeqCst);
    consumer.await.unwrap();

    // Nothing confirmed or acknowledged was lost.
    let stored: Vec<(String, bool)> = sql
        .query(
            "SELECT m.transaction_id, m.seq < c.next_seq FROM queen.messages m
               JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
               JOIN queen.cursors c ON c.partition_id = m.partition_id AND c.consumer_group = '__QUEUE_MODE__'
              WHERE q.name = 'load'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (tx, _) in &stored {
        *counts.entry(tx.as_str()).or_default() += 1;
    }
    assert!(counts.values().all(|n| *n == 1), "a message is stored twice");
    let stored_set: BTreeSet<String> = stored.iter().map(|(t, _)| t.clone()).collect();
    assert_eq!(stored_set, confirmed_set, "the queue holds every confirmed push, and only those");
    assert!(stored.iter().all(|(_, done)| *done), "every acknowledged message is still acknowledged");
    let acked = log.acked.lock().unwrap().clone();
    let acked_set: BTreeSet<String> = acked.iter().cloned().collect();
    assert_eq!(acked.len(), acked_set.len(), "no message was acked twice");
    assert!(acked_set.is_subset(&stored_set), "every ack that answered success is on a stored message");
    assert!(log.redelivered_after_ack.lock().unwrap().is_empty(), "a message came back after its ack");

    let unexpected = tally.unexpected.lock().unwrap().clone();
    assert!(unexpected.is_empty(), "answers other than success or 503: {unexpected:?}");
    assert_eq!(tally.unavailable_without_retry_after.load(SeqCst), 0, "every 503 carries Retry-After: 1");
    assert!(broker.child.try_wait().unwrap().is_none(), "the broker never restarted");
    eprintln!(
        "pg restart figures: confirmed_pushes={} acked={} delivered={} load_503={} probes_503={unavailable_during_outage} \
         ({probes} rounds over {:.1}s down) recovered_in={:.2}s long_poll: {late_polls} polls, {late_503s} answered 503 \
         lost=0 unexpected=0",
        confirmed.len(),
        acked.len(),
        log.delivered.lock().unwrap().len(),
        tally.unavailable.load(SeqCst),
        (up_at - down_at).as_secs_f64(),
        recovered_in.as_secs_f64(),
    );
    broker.terminate();
    broker.wait_exit(Duration::from_secs(10)).await;
}

/// A single long-poll request (one HTTP call) that is waiting when
/// PostgreSQL goes away must keep waiting across the outage and answer the
/// message pushed after recovery, within its own timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_long_poll_request_waiting_across_the_outage_answers_the_message_pushed_after_recovery() {
    let (pg, broker) = cluster_and_broker().await;
    let api = Api {
        base: broker.api.base.clone(),
        http: reqwest::Client::builder().timeout(Duration::from_secs(40)).build().unwrap(),
    };
    // Register the queue and the group first, so the poll is a plain wait.
    api.push("late", "Default", &[("before", json!(0))]).await;
    let first = api.pop_some("late", "batch=1").await;
    api.ack(&first["messages"][0], "completed", None).await;

    let waiter = api.clone();
    let poll = tokio::spawn(async move {
        send(waiter.http.get(waiter.url("/api/v1/pop/queue/late?wait=true&timeout=25000&batch=1"))).await
    });
    common::eventually(Duration::from_secs(5), "the long poll to wait", || async {
        let (_, m) = api.get("/metrics").await;
        (m["longPolls"]["queuesWaiting"].as_u64() == Some(1)).then_some(())
    })
    .await;
    pg.pg_ctl_stop("immediate");
    tokio::time::sleep(Duration::from_secs(2)).await;
    pg.pg_ctl_start();
    common::eventually(Duration::from_secs(30), "the broker to recover", || async {
        let (status, _, _) = send(api.http.get(api.url("/ready"))).await.ok()?;
        (status == 200).then_some(())
    })
    .await;
    api.push("late", "Default", &[("after-recovery", json!(1))]).await;
    let (status, _, text) = tokio::time::timeout(Duration::from_secs(20), poll)
        .await
        .expect("the long poll answered within its timeout")
        .unwrap()
        .expect("the long poll got an HTTP answer");
    assert_eq!(status, 200, "the waiting long poll rides out the outage: {status} {text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["messages"][0]["transactionId"], "after-recovery");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_due_across_a_postgres_restart_fire_exactly_once() {
    use base64::Engine as _;
    let (pg, broker) = cluster_and_broker().await;
    let api = Api {
        base: broker.api.base.clone(),
        http: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap(),
    };
    // Due before, during and after the outage.
    let ops: Vec<Value> = (0..300)
        .map(|i| {
            let payload = base64::engine::general_purpose::STANDARD.encode(json!({"i": i}).to_string());
            json!({"op": "schedule", "queue": "restart-timers", "timerKey": format!("k{i}"), "payload": payload,
                   "delayMs": (i % 30) * 150, "txn": format!("t{i}")})
        })
        .collect();
    let (status, body) = api.post("/api/v1/timers", &json!({ "operations": ops })).await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    pg.pg_ctl_stop("immediate");
    tokio::time::sleep(Duration::from_secs(2)).await;
    pg.pg_ctl_start();
    let sql = pg.sql("queen").await;
    common::eventually(Duration::from_secs(30), "every timer to fire after the restart", || async {
        let pending: i64 = sql.query_one("SELECT count(*) FROM queen.timers", &[]).await.ok()?.get(0);
        (pending == 0).then_some(())
    })
    .await;
    let rows = sql
        .query("SELECT transaction_id, count(*) FROM queen.messages GROUP BY 1", &[])
        .await
        .expect("messages");
    let fired: HashMap<String, i64> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(fired.len(), 300, "every timer fired");
    assert!(fired.values().all(|n| *n == 1), "none twice: {fired:?}");
}

/// Lines of `log` that contain `needle`.
fn lines_with(log: &std::path::Path, needle: &str) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().filter(|l| l.contains(needle)).map(str::to_owned).collect()
}

#[tokio::test]
async fn a_broker_started_before_postgres_serves_liveness_at_once_and_becomes_ready_when_it_starts() {
    let pg = PrivatePg::start();
    pg.sql("postgres").await.batch_execute("CREATE DATABASE queen").await.expect("create database");
    pg.pg_ctl_stop("fast");
    let log = std::env::temp_dir().join(format!("queen-start-{}.log", uuid::Uuid::new_v4().simple()));
    let spec = ServeSpec {
        url: pg.url("queen"),
        port: common::free_port(),
        env: Vec::new(),
        log: Some(log.clone()),
    }
    .env("RUST_LOG", "warn")
    .env("QUEEN_SPOOL", "false");
    let started = Instant::now();
    let broker = BrokerProcess::start(&spec);
    let api = broker.api.clone();
    common::eventually(Duration::from_secs(5), "/health 200 with PostgreSQL down", || async {
        let (status, _, body) = send(api.http.get(api.url("/health"))).await.ok()?;
        (status == 200).then_some(body)
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(5), "liveness took {:?}", started.elapsed());
    let (status, retry_after, body) = send(api.http.get(api.url("/ready"))).await.expect("ready");
    assert_eq!((status, retry_after.as_deref()), (503, Some("1")), "{body}");
    let push =
        || api.http.post(api.url("/api/v1/push")).json(&json!({"items": [{"queue": "early", "payload": 1}]}));
    let (status, retry_after, body) = send(push()).await.expect("push");
    assert_eq!((status, retry_after.as_deref()), (503, Some("1")), "a push before the database: {body}");
    // Several retries go by (backoff 0.1, 0.2, 0.4, 0.8, 1.6 s ...).
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(send(api.http.get(api.url("/health"))).await.expect("health").0, 200);

    pg.pg_ctl_start();
    common::eventually(Duration::from_secs(20), "/ready 200 once PostgreSQL is up", || async {
        let (status, _, _) = send(api.http.get(api.url("/ready"))).await.ok()?;
        (status == 200).then_some(())
    })
    .await;
    let (status, _, body) = send(push()).await.expect("push");
    assert_eq!(status, 201, "a push once migrated, same broker process: {body}");
    let stored: i64 = pg
        .sql("queen")
        .await
        .query_one("SELECT count(*) FROM queen.messages", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(stored, 1);
    let outage = lines_with(&log, "database unreachable");
    assert_eq!(outage.len(), 1, "one line for the outage, not one per retry: {outage:#?}");
    assert_eq!(lines_with(&log, "database reachable again").len(), 1, "{:?}", std::fs::read_to_string(&log));
    drop(broker);
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn a_taken_port_fails_the_start_at_once_with_a_message_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let log = std::env::temp_dir().join(format!("queen-port-{}.log", uuid::Uuid::new_v4().simple()));
    // No database listens on port 1: the broker must not wait for one first.
    let spec = ServeSpec {
        url: "postgres://postgres@127.0.0.1:1/queen".into(),
        port,
        env: Vec::new(),
        log: Some(log.clone()),
    };
    let started = Instant::now();
    let mut broker = BrokerProcess::start(&spec);
    let status = broker.wait_exit(Duration::from_secs(10)).await;
    assert!(!status.success(), "{status}");
    assert!(started.elapsed() < Duration::from_secs(5), "exited after {:?}", started.elapsed());
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(text.contains(&format!("port {port}")), "the message names the port: {text}");
    drop(taken);
    let _ = std::fs::remove_file(&log);
}
