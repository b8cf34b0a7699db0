//! Pushes spread over many partitions (queen.push_rows' set-based path):
//! a batch answers as the same requests run one after another would,
//! batches on two slots that lock partitions in opposite item orders never
//! deadlock and keep FIFO, new partitions get every registered group's
//! cursor and ready lane, and a broker alone announces nothing to others.
mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use common::{all_at_once, db_config, url_for, TestBroker};
use futures_util::StreamExt;
use queen_engine::{Engine, EngineOptions, PopRequest};
use serde_json::{json, Value};
use tokio_postgres::{AsyncMessage, NoTls};

/// An item: queue, partition, transaction id.
type Item = (&'static str, &'static str, Option<&'static str>);

/// Requests as the batcher would send them: items over three queues and
/// several partitions, with repeats inside a request, across requests, on
/// another partition (not a repeat), and of a stored message, plus items
/// that carry no transaction id.
fn requests() -> Vec<Vec<Item>> {
    vec![
        vec![("a", "p1", Some("x")), ("a", "p2", Some("x")), ("a", "p1", Some("x")), ("b", "p1", None)],
        vec![("a", "p2", Some("y")), ("a", "p1", Some("x")), ("c", "new", Some("stored")), ("a", "p3", None)],
        vec![("b", "p1", Some("z")), ("b", "p1", Some("z")), ("a", "p3", Some("y")), ("a", "p2", Some("y"))],
        vec![
            ("a", "p1", Some("seed")),
            ("c", "new", Some("n1")),
            ("b", "p9", Some("x")),
            ("a", "p1", Some("w")),
        ],
    ]
}

/// Each item's status and the index (in the whole run) of the item whose
/// message it names, plus the log as (queue, partition, offset, txid).
type Outcome = (Vec<(String, usize)>, Vec<(String, String, i64, String)>);

async fn outcome(sql: &tokio_postgres::Client, answers: &[Value]) -> Outcome {
    let mut first_with_id: HashMap<String, usize> = HashMap::new();
    let mut verdicts = Vec::new();
    for (n, a) in answers.iter().enumerate() {
        let id = a["message_id"].as_str().unwrap_or_default().to_owned();
        let at = *first_with_id.entry(id).or_insert(n);
        verdicts.push((a["status"].as_str().unwrap_or_default().to_owned(), at));
    }
    let log = sql
        .query(
            "SELECT q.name, p.name, m.seq, m.transaction_id FROM queen.messages m
               JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
              WHERE m.transaction_id NOT LIKE '0%' ORDER BY 1, 2, 3",
            &[],
        )
        .await
        .expect("log")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    (verdicts, log)
}

async fn seeded() -> TestBroker {
    let b = TestBroker::start().await;
    b.push("a", "p1", &[("seed", json!(0))]).await;
    b.push("c", "new-not-yet", &[("stored", json!(0))]).await;
    b
}

#[tokio::test]
async fn a_batch_spread_over_partitions_answers_as_the_same_requests_one_after_another() {
    let serial = seeded().await;
    let mut serial_answers = Vec::new();
    for request in requests() {
        let items: Vec<Value> = request
            .iter()
            .map(|(q, p, t)| json!({"queue": q, "partition": p, "transactionId": t, "payload": {"q": q}}))
            .collect();
        let answer: Value =
            serde_json::from_str(&serial.engine.push(&json!(items).to_string()).await.expect("push").0)
                .expect("json");
        serial_answers.extend(answer.as_array().expect("array").iter().cloned());
    }

    // The same requests in one push_rows call, numbered as the batcher does.
    let batched = seeded().await;
    let all: Vec<(usize, Item)> =
        requests().into_iter().enumerate().flat_map(|(n, r)| r.into_iter().map(move |i| (n, i))).collect();
    let queues: Vec<&str> = all.iter().map(|(_, i)| i.0).collect();
    let parts: Vec<&str> = all.iter().map(|(_, i)| i.1).collect();
    let txids: Vec<Option<&str>> = all.iter().map(|(_, i)| i.2).collect();
    let traces: Vec<Option<&str>> = vec![None; all.len()];
    let payloads: Vec<String> = all.iter().map(|(_, i)| json!({"q": i.0}).to_string()).collect();
    let reqs: Vec<i32> = all.iter().map(|(n, _)| *n as i32).collect();
    let sql = batched.sql().await;
    let row = sql
        .query_one(
            "SELECT verdicts, ids::text[] FROM queen.push_rows($1, $2, $3, $4, $5, $6)",
            &[&queues, &parts, &txids, &traces, &payloads, &reqs],
        )
        .await
        .expect("push_rows");
    // The statuses and ids the 201 body would carry (push.rs writes it from these).
    let verdicts: String = row.get(0);
    let ids: Vec<Option<String>> = row.get(1);
    let batch_answers: Vec<Value> = verdicts
        .chars()
        .zip(&ids)
        .map(|(v, id)| {
            let status = match v {
                'q' => "queued",
                'd' => "duplicate",
                _ => "failed",
            };
            json!({"status": status, "message_id": id})
        })
        .collect();

    let (want, want_log) = outcome(&serial.sql().await, &serial_answers).await;
    let (got, got_log) = outcome(&sql, &batch_answers).await;
    assert_eq!(got, want, "verdicts and the messages they name");
    assert_eq!(got_log, want_log, "the log, partition by partition");
    let statuses: Vec<&str> = want.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        statuses,
        [
            "queued",
            "queued",
            "duplicate",
            "queued", // x on p1 and p2; x again on p1
            "queued",
            "duplicate",
            "queued",
            "queued", // y; x repeats request 0; "stored" is on another partition
            "queued",
            "duplicate",
            "queued",
            "duplicate", // z twice; y on p3 is new; y on p2 repeats request 1
            "duplicate",
            "queued",
            "queued",
            "queued", // seed is stored on a/p1
        ]
    );
}

/// Requests of 20 items over 20 partitions, half listing them in ascending
/// order and half descending, some partitions new: on two push slots the
/// batches lock partitions in one order, so none deadlocks, and each
/// partition holds its items in the order of their requests' commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_listing_partitions_in_opposite_orders_neither_deadlock_nor_lose_order() {
    let b = TestBroker::start().await;
    let engine = Arc::new(
        Engine::connect(
            &db_config(&b.db),
            EngineOptions { push_batch_slots: 2, kv_sweep_interval: None, ..EngineOptions::default() },
        )
        .expect("engine"),
    );
    b.push("rev", "p00", &[("warm", json!(0))]).await;
    for round in 0..3 {
        let bodies: Vec<(usize, String)> = (0..24)
            .map(|r| {
                let mut parts: Vec<usize> = (0..20).collect();
                if r % 2 == 1 {
                    parts.reverse();
                }
                // Small requests meet in the batcher; 20 items run alone: both kinds race.
                let take = if r % 3 == 0 { 4 } else { 20 };
                let items: Vec<Value> = parts
                    .iter()
                    .take(take)
                    .map(|p| {
                        json!({"queue": "rev", "partition": format!("p{:02}", p + round * 10),
                                    "transactionId": format!("r{round}-{r}-{p}"), "payload": {"r": r}})
                    })
                    .collect();
                (r, json!(items).to_string())
            })
            .collect();
        let answers = all_at_once(bodies, |(_, body)| {
            let engine = engine.clone();
            async move { tokio::time::timeout(Duration::from_secs(30), engine.push(&body)).await }
        })
        .await;
        for a in answers {
            let a = a.expect("no push waits forever").expect("push");
            assert!(!a.0.contains("duplicate") && !a.0.contains("failed"), "{}", a.0);
        }
    }
    // Offsets are dense in every partition, and in each partition the items
    // of one request sit together in request order (they were one commit).
    let sql = b.sql().await;
    let rows = sql
        .query(
            "SELECT p.name, m.seq, m.transaction_id FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
              ORDER BY 1, 2",
            &[],
        )
        .await
        .expect("log");
    let mut by_partition: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for r in &rows {
        by_partition.entry(r.get(0)).or_default().push((r.get(1), r.get(2)));
    }
    assert_eq!(by_partition.len(), 40);
    for (p, log) in &by_partition {
        let seqs: Vec<i64> = log.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (0..log.len() as i64).collect::<Vec<_>>(), "{p}: offsets are dense");
    }
    assert_eq!(rows.len(), 1 + 3 * (8 * 4 + 16 * 20));
}

#[tokio::test]
async fn a_spread_push_gives_every_registered_group_a_cursor_and_a_ready_lane_on_each_new_partition() {
    let b = TestBroker::start().await;
    // Register a group, and queue mode, before the partitions exist.
    b.pop_none("wide", "batch=1&consumerGroup=g").await;
    b.pop_none("wide", "batch=1").await;
    let items: Vec<Value> = (0..300)
        .map(|i| json!({"queue": "wide", "partition": format!("p{i}"), "transactionId": format!("t{i}")}))
        .collect();
    let answer = b.push_items(json!(items)).await;
    assert_eq!(answer.as_array().map(Vec::len), Some(300));
    assert_eq!(b.scalar("SELECT count(*) FROM queen.cursors WHERE consumer_group = 'g'").await, 300);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.ready_lanes WHERE consumer_group = 'g'").await, 300);
    // Queue-wide pops of the group and of queue mode find all 300.
    for group in ["&consumerGroup=g", ""] {
        let mut seen = 0;
        for _ in 0..300 {
            let (status, popped) =
                b.pop("wide", &format!("batch=100&partitions=50&autoAck=true{group}")).await;
            if status == 204 {
                break;
            }
            seen += popped["messages"].as_array().map_or(0, Vec::len);
        }
        assert_eq!(seen, 300, "group {group:?}");
    }
    // A second spread push into the drained lanes marks them ready again.
    let items: Vec<Value> = (0..300)
        .map(|i| json!({"queue": "wide", "partition": format!("p{i}"), "transactionId": format!("u{i}")}))
        .collect();
    b.push_items(json!(items)).await;
    let req = PopRequest {
        queue: "wide".into(),
        consumer_group: Some("g".into()),
        batch: 1000,
        partitions: 1000,
        auto_ack: true,
        ..PopRequest::default()
    };
    let popped: Value =
        serde_json::from_str(&b.engine.pop(&req).await.expect("pop").expect("some").0).expect("json");
    assert_eq!(popped["messages"].as_array().map(Vec::len), Some(300));
}

/// Listens on the broker channel from outside any broker.
async fn listen(db: &str) -> (tokio_postgres::Client, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let (client, mut conn) = tokio_postgres::connect(&url_for(db), NoTls).await.expect("connect");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    client.batch_execute("LISTEN queen_push").await.expect("listen");
    (client, rx)
}

/// Pushes once and says whether an announcement naming the queue followed.
async fn announced(
    b: &TestBroker,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    queue: &str,
) -> bool {
    while rx.try_recv().is_ok() {}
    b.push(queue, "p", &[(&uuid::Uuid::new_v4().to_string(), json!(1))]).await;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(400);
    while let Ok(Some(payload)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        if payload.contains(&format!("\"{queue}\"")) {
            return true;
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_alone_announces_nothing_and_announces_again_once_another_broker_joins() {
    let a = TestBroker::start().await;
    let (_listener, mut rx) = listen(&a.db).await;
    // Alone once its heartbeat has read the registry while it was listening.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while announced(&a, &mut rx, "solo").await {
        assert!(tokio::time::Instant::now() < deadline, "the lone broker kept announcing");
    }
    for _ in 0..3 {
        assert!(!announced(&a, &mut rx, "solo").await, "a broker alone sent a notification");
    }
    // Another broker joins: its hello reaches A, which announces at once.
    let b = TestBroker::on(&a.db).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while !announced(&a, &mut rx, "solo").await {
        assert!(tokio::time::Instant::now() < deadline, "the first broker did not hear the newcomer");
    }
    drop(b);
}

/// Bodies larger than the broker's decode budget each take all of it: they
/// take turns with one another and with small pushes, and every one lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_pushes_from_many_clients_take_turns_and_all_land() {
    let b = TestBroker::start().await;
    let big = |k: usize| {
        let items: Vec<Value> = (0..1200)
            .map(|i| json!({"queue": "big", "partition": format!("p{}", i % 40), "transactionId": format!("b{k}-{i}"),
                            "payload": {"pad": "x".repeat(2000)}}))
            .collect();
        json!({ "items": items })
    };
    let bodies: Vec<Value> = (0..4)
        .map(big)
        .chain((0..16).map(
            |k| json!({"items": [{"queue": "big", "partition": "small", "transactionId": format!("s{k}")}]}),
        ))
        .collect();
    assert!(bodies[0].to_string().len() > 1024 * 1024, "a big body exceeds the budget");
    let api = b.api();
    let answers = all_at_once(bodies, |body| {
        let api = api.clone();
        async move { tokio::time::timeout(Duration::from_secs(60), api.post("/api/v1/push", &body)).await }
    })
    .await;
    for a in answers {
        let (status, body) = a.expect("no push waits forever");
        assert_eq!(status, 201, "{body}");
    }
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages").await, 4 * 1200 + 16);
}

/// The ready-lane invariant under races: pushes spread over lanes while
/// queue-wide consumers drain them (and remove the ready rows of the lanes
/// they find drained). A push leaves an existing ready row alone and
/// inserts one only for cursors that had drained the lane; whatever the
/// interleaving, a lane with a backlog keeps its row, so queue-wide pops
/// deliver every message.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_spread_pushes_and_draining_pops_never_hide_a_lane() {
    let b = TestBroker::start().await;
    let options = EngineOptions { kv_sweep_interval: None, ..EngineOptions::default() };
    let engine = Arc::new(Engine::connect(&db_config(&b.db), options).expect("engine"));
    // Register the group first, so that every lane gets its cursor.
    let first = PopRequest {
        queue: "race".into(),
        consumer_group: Some("g".into()),
        batch: 1,
        partitions: 1,
        ..PopRequest::default()
    };
    assert!(engine.pop(&first).await.expect("pop").is_none());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let consumer = |engine: Arc<Engine>,
                    stop: Arc<std::sync::atomic::AtomicBool>,
                    consumed: Arc<std::sync::atomic::AtomicUsize>| async move {
        loop {
            let req = PopRequest { batch: 5, ..first_request() };
            if let Some(popped) = engine.pop(&req).await.expect("pop") {
                let popped: Value = serde_json::from_str(&popped.0).expect("json");
                let acks: Vec<Value> = popped["messages"]
                    .as_array()
                    .expect("messages")
                    .iter()
                    .map(|m| {
                        json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                    "leaseId": m["leaseId"]})
                    })
                    .collect();
                consumed.fetch_add(acks.len(), std::sync::atomic::Ordering::SeqCst);
                engine.ack(&Value::Array(acks).to_string(), Some("g")).await.expect("ack");
            } else if stop.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
        }
    };
    let consumers: Vec<_> =
        (0..4).map(|_| tokio::spawn(consumer(engine.clone(), stop.clone(), consumed.clone()))).collect();
    let mut pushed = 0;
    for round in 0..60 {
        let pushes: Vec<String> = (0..4)
            .map(|w| {
                let items: Vec<Value> = (0..10)
                    .map(|i| {
                        json!({"queue": "race", "partition": format!("p{}", (round * 7 + w * 3 + i * 5) % 24),
                               "transactionId": format!("r{round}-w{w}-i{i}"), "payload": {"i": i}})
                    })
                    .collect();
                Value::Array(items).to_string()
            })
            .collect();
        pushed += 40;
        for answer in all_at_once(pushes, |body| {
            let engine = engine.clone();
            async move { engine.push(&body).await }
        })
        .await
        {
            answer.expect("push");
        }
    }
    // Every lane with a backlog has its ready row, then everything drains.
    let hidden = b
        .scalar(
            "SELECT count(*) FROM queen.cursors c JOIN queen.partitions p ON p.id = c.partition_id
              WHERE c.consumer_group = 'g' AND c.next_seq < p.next_seq
                AND NOT EXISTS (SELECT 1 FROM queen.ready_lanes r
                                 WHERE r.partition_id = c.partition_id AND r.consumer_group = 'g')",
        )
        .await;
    assert_eq!(hidden, 0, "a lane with a backlog lost its ready row");
    common::eventually(Duration::from_secs(20), "every pushed message consumed", || {
        let consumed = consumed.clone();
        async move { (consumed.load(std::sync::atomic::Ordering::SeqCst) >= pushed).then_some(()) }
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for c in consumers {
        c.await.expect("consumer");
    }
    assert_eq!(consumed.load(std::sync::atomic::Ordering::SeqCst), pushed, "each message once");
}

fn first_request() -> PopRequest {
    PopRequest {
        queue: "race".into(),
        consumer_group: Some("g".into()),
        batch: 1,
        partitions: 1,
        ..PopRequest::default()
    }
}
