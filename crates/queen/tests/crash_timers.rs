//! The crash harness for timers: a scheduler keeps scheduling timers due
//! within half a second while `queen serve` (which runs the sweeper that
//! fires them) is SIGKILLed at random moments and restarted. At the end
//! every timer whose schedule was answered fired exactly once, with its
//! promised message id; a timer whose schedule got no answer fired at most
//! once; nothing is left pending.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::{Api, BrokerProcess, ServeSpec, TestDb};
use serde_json::{json, Value};

#[derive(Default)]
struct Ledger {
    /// txn -> promised message id, for schedules answered `scheduled`.
    answered: Mutex<HashMap<String, String>>,
    /// txns whose schedule got no answer (sent into a dying or dead broker).
    unanswered: Mutex<HashSet<String>>,
}

async fn scheduler(api: Api, ledger: Arc<Ledger>, next: Arc<AtomicUsize>, stop: Arc<AtomicBool>) {
    while !stop.load(SeqCst) {
        let i = next.fetch_add(1, SeqCst);
        let txn = format!("timer-{i}");
        let payload = base64::engine::general_purpose::STANDARD.encode(json!({"i": i}).to_string());
        let op = json!({"op": "schedule", "queue": "crash-timers", "timerKey": format!("k{i}"),
                        "payload": payload, "delayMs": (i % 5) as i64 * 100, "txn": txn});
        let sent = api.http.post(api.url("/api/v1/timers")).json(&json!({ "operations": [op] })).send().await;
        let answer = match sent {
            Ok(resp) if resp.status() == 200 => resp.json::<Value>().await.ok(),
            _ => None,
        };
        match answer {
            Some(body) if body["results"][0]["status"] == "scheduled" => {
                let id = body["results"][0]["messageId"].as_str().unwrap().to_owned();
                ledger.answered.lock().unwrap().insert(txn, id);
            }
            _ => {
                ledger.unanswered.lock().unwrap().insert(txn);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_under_a_timer_load_fires_every_timer_exactly_once() {
    let kills: usize = std::env::var("QUEEN_CRASH_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(8);
    let db = TestDb::create().await;
    let spec = ServeSpec::for_db(&db.name).env("RUST_LOG", "error");
    let mut broker = BrokerProcess::spawn_with(&spec).await;
    let api = Api {
        base: broker.api.base.clone(),
        http: reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("http"),
    };
    let ledger = Arc::new(Ledger::default());
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..3)
        .map(|_| tokio::spawn(scheduler(api.clone(), ledger.clone(), next.clone(), stop.clone())))
        .collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..kills {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(Duration::from_millis(200 + seed % 600)).await;
        broker.kill9();
        broker = BrokerProcess::spawn_with(&spec).await;
    }
    stop.store(true, SeqCst);
    for t in tasks {
        t.await.expect("scheduler");
    }

    let (client, conn) =
        tokio_postgres::connect(&common::url_for(&db.name), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pending: i64 = client.query_one("SELECT count(*) FROM queen.timers", &[]).await.unwrap().get(0);
        if pending == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{pending} timers still pending after the load");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    broker.terminate();
    broker.wait_exit(Duration::from_secs(10)).await;

    let rows = client
        .query("SELECT transaction_id, id::text, count(*) OVER (PARTITION BY transaction_id) FROM queen.messages", &[])
        .await
        .unwrap();
    let mut fired: HashMap<String, String> = HashMap::new();
    for r in &rows {
        let (txn, id, n): (String, String, i64) = (r.get(0), r.get(1), r.get(2));
        assert_eq!(n, 1, "{txn} fired {n} times");
        fired.insert(txn, id);
    }
    let answered = ledger.answered.lock().unwrap().clone();
    let unanswered = ledger.unanswered.lock().unwrap().clone();
    assert!(answered.len() > 50, "the load scheduled timers ({} answered)", answered.len());
    for (txn, id) in &answered {
        assert_eq!(fired.get(txn), Some(id), "{txn} was scheduled and must fire once with its promised id");
    }
    for txn in fired.keys() {
        assert!(
            answered.contains_key(txn) || unanswered.contains(txn),
            "{txn} fired but was never scheduled"
        );
    }
    eprintln!(
        "crash timers: {kills} kills, {} timers answered, {} unanswered, {} fired",
        answered.len(),
        unanswered.len(),
        fired.len()
    );
}
