//! Stream cycles under SIGKILL: runners commit cycles (a count in stream
//! state, one emit per source message, the ack of the batch) while the
//! broker is killed at random moments and restarted. After every kill and
//! at the end, per source partition: the state's count, the cursor and the
//! emits in the sink all agree, and no message is emitted twice.
mod common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const MESSAGES: usize = 1800;
const PARTITIONS: usize = 6;
const KILLS: usize = 8;
const GROUP: &str = "streams.crash";

/// Source partitions whose state count, cursor and sink emits disagree,
/// and sink messages emitted twice; one snapshot.
async fn violations(sql: &tokio_postgres::Client) -> (i64, i64) {
    let row = sql
        .query_one(
            "WITH src AS (
               SELECT p.id, p.name, coalesce(c.next_seq, 0) AS consumed,
                      coalesce((SELECT (s.value ->> 'count')::bigint FROM queen.stream_state s
                                 WHERE s.partition_id = p.id AND s.key = 'count'), 0) AS counted,
                      (SELECT count(*) FROM queen.messages m
                         JOIN queen.partitions dp ON dp.id = m.partition_id
                         JOIN queen.queues dq ON dq.id = dp.queue_id
                        WHERE dq.name = 'dst' AND dp.name = p.name) AS emitted
                 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id AND q.name = 'src'
                 LEFT JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = $1)
             SELECT (SELECT count(*) FROM src WHERE consumed <> counted OR consumed <> emitted),
                    (SELECT count(*) - count(DISTINCT m.payload::text) FROM queen.messages m
                       JOIN queen.partitions dp ON dp.id = m.partition_id
                       JOIN queen.queues dq ON dq.id = dp.queue_id WHERE dq.name = 'dst')",
            &[&GROUP],
        )
        .await
        .expect("invariant query");
    (row.get(0), row.get(1))
}

/// Source messages the stream's cycles have acked.
async fn consumed(sql: &tokio_postgres::Client) -> usize {
    let n: i64 = sql
        .query_one(
            "SELECT coalesce(sum(next_seq), 0)::bigint FROM queen.cursors WHERE consumer_group = $1",
            &[&GROUP],
        )
        .await
        .expect("consumed")
        .get(0);
    n as usize
}

/// One runner's cycle over a popped batch: read the count, add the batch,
/// emit each message, ack the batch. Errors (the broker is down, a stale
/// lease) just end the cycle; its batch comes back after the lease.
async fn run_cycle(http: &reqwest::Client, base: &str, qid: &str, popped: &Value) -> Option<()> {
    let pid = popped["partitionId"].as_str()?;
    let state = http
        .post(format!("{base}/streams/v1/state/get"))
        .json(&json!({"query_id": qid, "partition_id": pid, "keys": ["count"]}))
        .send()
        .await
        .ok()?
        .json::<Value>()
        .await
        .ok()?;
    if state["success"] != true {
        return None;
    }
    let count = state["rows"][0]["value"]["count"].as_i64().unwrap_or(0);
    // The cycle's own work, so that kills land between its read and its commit.
    tokio::time::sleep(Duration::from_millis(15)).await;
    let messages = popped["messages"].as_array()?;
    let last = messages.last()?;
    let cycle = json!({
        "query_id": qid, "partition_id": pid, "consumer_group": GROUP,
        "state_ops": [{"type": "upsert", "key": "count", "value": {"count": count + messages.len() as i64}}],
        "push_items": messages.iter().map(|m| json!({"queue": "dst", "partition": m["partition"], "payload": m["data"]}))
            .collect::<Vec<_>>(),
        "ack": {"transactionId": last["transactionId"], "leaseId": popped["leaseId"], "status": "completed",
                "count": messages.len()},
        "release_lease": true,
    });
    http.post(format!("{base}/streams/v1/cycle")).json(&cycle).send().await.ok().map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_never_separates_a_cycles_state_emits_and_ack() {
    let db = common::fresh_database().await;
    let url = common::url_for(&db);
    let (sql, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("sql");
    tokio::spawn(conn);
    let spec = common::ServeSpec::for_db(&db).env("RUST_LOG", "error");
    let base = format!("http://127.0.0.1:{}", spec.port);
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("http");

    let mut broker = common::BrokerProcess::spawn_with(&spec).await;
    let items: Vec<Value> = (0..MESSAGES)
        .map(|i| json!({"queue": "src", "partition": format!("p{}", i % PARTITIONS), "payload": {"i": i}}))
        .collect();
    let r =
        http.post(format!("{base}/api/v1/push")).json(&json!({"items": items})).send().await.expect("push");
    assert_eq!(r.status(), 201);
    let reg = http
        .post(format!("{base}/streams/v1/queries"))
        .json(&json!({"name": "crash", "source_queue": "src", "sink_queue": "dst", "config_hash": "h"}))
        .send()
        .await
        .expect("register")
        .json::<Value>()
        .await
        .expect("register json");
    let qid = reg["query_id"].as_str().expect("query_id").to_owned();

    let stop = Arc::new(AtomicBool::new(false));
    let mut runners = Vec::new();
    for _ in 0..PARTITIONS {
        let (http, base, stop, qid) = (http.clone(), base.clone(), stop.clone(), qid.clone());
        runners.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let popped = match http
                    .get(format!(
                        "{base}/api/v1/pop/queue/src?batch=3&wait=false&leaseSeconds=1&consumerGroup={GROUP}"
                    ))
                    .send()
                    .await
                {
                    Ok(r) if r.status() == 200 => r.json::<Value>().await.ok(),
                    _ => None,
                };
                match popped {
                    Some(p) => {
                        let _ = run_cycle(&http, &base, &qid, &p).await;
                    }
                    None => tokio::time::sleep(Duration::from_millis(30)).await,
                }
            }
        }));
    }

    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ std::process::id() as u64;
    let mut killed_under_load = 0;
    for kill in 1..=KILLS {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(Duration::from_millis(150 + seed % 400)).await;
        Command::new("kill").arg("-KILL").arg(broker.pid().to_string()).status().expect("kill");
        let _ = broker.child.wait();
        assert_eq!(
            violations(&sql).await,
            (0, 0),
            "after kill {kill}: (partitions out of step, double emits)"
        );
        if consumed(&sql).await < MESSAGES {
            killed_under_load += 1;
        }
        broker = common::BrokerProcess::spawn_with(&spec).await;
    }

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert_eq!(violations(&sql).await, (0, 0), "while draining");
        let consumed = consumed(&sql).await;
        if consumed == MESSAGES {
            break;
        }
        assert!(Instant::now() < deadline, "only {consumed} of {MESSAGES} messages went through a cycle");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for r in runners {
        r.await.expect("runner");
    }
    assert_eq!(violations(&sql).await, (0, 0));
    let emitted: i64 = sql
        .query_one(
            "SELECT count(DISTINCT m.payload::text) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
               JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'dst'",
            &[],
        )
        .await
        .expect("emitted")
        .get(0);
    assert_eq!(emitted as usize, MESSAGES, "every message emitted exactly once");
    assert!(killed_under_load >= KILLS / 2, "only {killed_under_load} of {KILLS} kills hit a running stream");
    broker.terminate();
    broker.wait_exit(Duration::from_secs(10)).await;
}
