//! The shared commit under SIGKILL: consumers run once + ack bundles while
//! the broker process is killed at random moments and restarted, again and
//! again. At every moment, and at the end, no message is marked done but
//! still on the cursor, and none is acked but unmarked.
mod common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MESSAGES: usize = 240;
const PARTITIONS: usize = 6;
const KILLS: usize = 10;

fn spawn_broker(url: &str, port: u16) -> Child {
    Command::new(env!("CARGO_BIN_EXE_queen"))
        .arg("serve")
        .env("QUEEN_DATABASE_URL", url)
        .env("PORT", port.to_string())
        .env("HOST", "127.0.0.1")
        .env("DB_POOL_SIZE", "8")
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn queen serve")
}

async fn wait_healthy(http: &reqwest::Client, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !matches!(http.get(format!("{base}/ready")).send().await, Ok(r) if r.status() == 200) {
        assert!(Instant::now() < deadline, "broker did not come back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Bundles that shared a statement with another one on this broker so far
/// (the bundle batcher's requests less its statements); 0 when the broker
/// does not answer.
async fn shared_bundles(http: &reqwest::Client, base: &str) -> f64 {
    let Ok(r) = http.get(format!("{base}/metrics/prometheus")).send().await else { return 0.0 };
    let Ok(text) = r.text().await else { return 0.0 };
    let sample = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(name) && l.contains("kind=\"transaction\""))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    sample("queen_batch_size_sum") - sample("queen_batch_size_count")
}

/// (marked but still on the cursor, acked but unmarked), in one snapshot.
async fn violations(sql: &tokio_postgres::Client) -> (i64, i64) {
    let row = sql
        .query_one(
            "WITH acked AS (
               SELECT m.transaction_id FROM queen.messages m
                 JOIN queen.cursors c ON c.partition_id = m.partition_id AND c.consumer_group = '__QUEUE_MODE__'
                WHERE m.seq < c.next_seq)
             SELECT
               (SELECT count(*) FROM queen.kv k WHERE k.ns = 'charges'
                   AND NOT EXISTS (SELECT 1 FROM acked a WHERE 'charge:' || a.transaction_id = k.key)),
               (SELECT count(*) FROM acked a
                 WHERE NOT EXISTS (SELECT 1 FROM queen.kv k WHERE k.ns = 'charges' AND k.key = 'charge:' || a.transaction_id))",
            &[],
        )
        .await
        .expect("invariant query");
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_never_separates_the_marker_from_the_cursor_advance() {
    let db = common::fresh_database().await;
    let admin = common::admin_url();
    let url = format!("{}/{db}", &admin[..admin.rfind('/').expect("url has a database")]);
    let (sql, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("sql");
    tokio::spawn(conn);
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("port").port();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("http");

    let mut broker = spawn_broker(&url, port);
    wait_healthy(&http, &base).await;
    let items: Vec<serde_json::Value> = (0..MESSAGES)
        .map(|i| {
            serde_json::json!({"queue": "crash", "partition": format!("p{}", i % PARTITIONS),
                                    "transactionId": format!("m{i}"), "payload": {"i": i}})
        })
        .collect();
    let r = http
        .post(format!("{base}/api/v1/push"))
        .json(&serde_json::json!({"items": items}))
        .send()
        .await
        .expect("push");
    assert_eq!(r.status(), 201);

    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let mut consumers = Vec::new();
    for _ in 0..PARTITIONS {
        let (http, base, stop, committed) = (http.clone(), base.clone(), stop.clone(), committed.clone());
        consumers.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let popped = match http.get(format!("{base}/api/v1/pop/queue/crash?batch=1&wait=false&leaseSeconds=1")).send().await {
                    Ok(r) if r.status() == 200 => r.json::<serde_json::Value>().await.ok(),
                    Ok(_) => None,
                    Err(_) => None, // the broker is down: try again
                };
                let Some(p) = popped else {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    continue;
                };
                let m = &p["messages"][0];
                let bundle = serde_json::json!({
                    "operations": [{"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                    "leaseId": m["leaseId"], "status": "completed"}],
                    "requiredLeases": [m["leaseId"]],
                    "kv": [{"op": "putIfAbsent", "ns": "charges",
                            "key": format!("charge:{}", m["transactionId"].as_str().unwrap_or_default()),
                            "value": {"by": "consumer"}, "ttlSeconds": 3600, "required": true}]});
                if let Ok(r) = http.post(format!("{base}/api/v1/transaction")).json(&bundle).send().await {
                    if let Ok(v) = r.json::<serde_json::Value>().await {
                        if v["success"] == true {
                            committed.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
            }
        }));
    }

    let mut seed = 0x2545_F491_4F6C_DD1Du64 ^ std::process::id() as u64;
    let mut kills = 0;
    let mut max_seen = (0, 0);
    let mut shared = 0.0;
    while kills < KILLS {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(Duration::from_millis(150 + seed % 400)).await;
        shared += shared_bundles(&http, &base).await;
        Command::new("kill").arg("-KILL").arg(broker.id().to_string()).status().expect("kill");
        let _ = broker.wait();
        kills += 1;
        let v = violations(&sql).await;
        max_seen = (max_seen.0.max(v.0), max_seen.1.max(v.1));
        assert_eq!(v, (0, 0), "after kill {kills}: (marked but on the cursor, acked but unmarked)");
        broker = spawn_broker(&url, port);
        wait_healthy(&http, &base).await;
    }

    // Let the consumers drain the rest, checking the invariant as they go.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let v = violations(&sql).await;
        assert_eq!(v, (0, 0), "while draining: (marked but on the cursor, acked but unmarked)");
        let markers: i64 = sql
            .query_one("SELECT count(*) FROM queen.kv WHERE ns = 'charges'", &[])
            .await
            .expect("count")
            .get(0);
        if markers as usize == MESSAGES {
            break;
        }
        assert!(Instant::now() < deadline, "only {markers} of {MESSAGES} messages were processed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shared += shared_bundles(&http, &base).await;
    stop.store(true, Ordering::SeqCst);
    // The consumers' bundles met in the bundle batcher: the invariant held
    // for bundles that committed together, not only for lone ones.
    assert!(shared > 0.0, "no two bundles ever shared a statement");
    for c in consumers {
        c.await.expect("consumer");
    }
    let backlog: i64 = sql
        .query_one(
            "SELECT coalesce(sum(p.next_seq - c.next_seq), 0)::bigint FROM queen.partitions p
               JOIN queen.cursors c ON c.partition_id = p.id AND c.consumer_group = '__QUEUE_MODE__'",
            &[],
        )
        .await
        .expect("backlog")
        .get(0);
    assert_eq!(backlog, 0, "every message is off the cursor");
    assert_eq!(violations(&sql).await, (0, 0));
    assert!(committed.load(Ordering::SeqCst) as usize <= MESSAGES, "no message committed twice");
    Command::new("kill").arg("-TERM").arg(broker.id().to_string()).status().expect("kill");
    let _ = broker.wait();
    assert_eq!(kills, KILLS);
    assert_eq!(max_seen, (0, 0));
}
