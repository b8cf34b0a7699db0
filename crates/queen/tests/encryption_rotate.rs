//! Key rotation of encryption at rest: a key ring (QUEEN_ENCRYPTION_KEYS),
//! new writes sealed with the current key, reads with any key held, the
//! online re-seal (`queen encryption rotate`) surviving a SIGKILL midway,
//! and a broker that refuses to start without a key rows are sealed with.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::{url_for, BrokerProcess, ServeSpec, TestBroker};
use queen_engine::{EncryptionKey, EngineOptions};
use serde_json::{json, Value};

const OLD: &str = "8f3c2a9b1d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
const NEW: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn id(hex: &str) -> String {
    EncryptionKey::from_hex(hex).unwrap().id().to_owned()
}

fn ring() -> String {
    format!("old:{OLD},*new:{NEW}")
}

fn options(key: EncryptionKey) -> EngineOptions {
    EngineOptions { encryption_key: Some(key), timer_sweep_interval: None, ..EngineOptions::default() }
}

/// (sealed with OLD, sealed with NEW, plain) over the payload tables.
async fn census(b: &TestBroker) -> (i64, i64, i64) {
    let row = b
        .sql()
        .await
        .query_one(
            "WITH t AS (SELECT payload::text AS p FROM queen.messages
                        UNION ALL SELECT payload::text FROM queen.dead_letters
                        UNION ALL SELECT payload::text FROM queen.timers
                        UNION ALL SELECT coalesce(sealed, value::text) FROM queen.stream_state)
             SELECT count(*) FILTER (WHERE queen.sealed_with(p, $1)), count(*) FILTER (WHERE queen.sealed_with(p, $2)),
                    count(*) FILTER (WHERE NOT queen.is_sealed(p)) FROM t",
            &[&id(OLD), &id(NEW)],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

fn rotate_cmd(db: &str, batch: u32, log: &std::path::Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_queen"));
    cmd.args(["encryption", "rotate", "--database-url", &url_for(db), "--batch", &batch.to_string()])
        .env("QUEEN_ENCRYPTION_KEYS", ring())
        .env_remove("QUEEN_ENCRYPTION_KEY")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    cmd
}

#[test]
fn a_ring_names_its_current_key_and_refuses_ambiguity() {
    let r = EncryptionKey::from_ring(&ring()).unwrap();
    assert_eq!(r.id(), id(NEW));
    assert_eq!(r.ids(), vec![id(NEW), id(OLD)]);
    assert_eq!(EncryptionKey::from_ring(NEW).unwrap().id(), id(NEW), "one key needs no star");
    assert!(EncryptionKey::from_ring(&format!("{OLD},{NEW}")).is_err(), "which is current?");
    assert!(EncryptionKey::from_ring(&format!("*{OLD},*{NEW}")).is_err());
    assert!(EncryptionKey::from_ring("*a:1234").is_err());
}

/// A broker with the ring moves the queue to the new key at start, seals
/// new writes with it, and reads what the old key sealed.
#[tokio::test]
async fn new_writes_use_the_current_key_and_reads_open_any_key_held() {
    let a = TestBroker::start_with_options(options(EncryptionKey::from_hex(OLD).unwrap())).await;
    a.configure_ok("vault", json!({"encryptionEnabled": true})).await;
    a.push("vault", "Default", &[("o1", json!({"n": "old"}))]).await;
    let b = TestBroker::on_with_options(&a.db, options(EncryptionKey::from_ring(&ring()).unwrap())).await;
    b.engine.check_encryption_keys().await.unwrap();
    let key_id: String =
        b.sql().await.query_one("SELECT encryption_key_id FROM queen.queues", &[]).await.unwrap().get(0);
    assert_eq!(key_id, id(NEW));
    b.push("vault", "Default", &[("n1", json!({"n": "new"}))]).await;
    assert_eq!(census(&b).await, (1, 1, 0));
    let popped = b.pop_some("vault", "batch=10").await;
    let data: Vec<Value> = popped["messages"].as_array().unwrap().iter().map(|m| m["data"].clone()).collect();
    assert_eq!(data, vec![json!({"n": "old"}), json!({"n": "new"})]);
}

/// The re-seal runs in batches while a broker pushes, is SIGKILLed midway,
/// and run again: every row ends sealed with the new key exactly once (each
/// reads back as pushed), the old key is forgotten, and a broker without
/// the old key refuses to start before the rotation and starts after it.
#[tokio::test]
async fn a_rotation_killed_midway_resumes_and_loses_or_double_seals_nothing() {
    const N: usize = 3000;
    let a = TestBroker::start_with_options(options(EncryptionKey::from_hex(OLD).unwrap())).await;
    a.configure_ok("vault", json!({"encryptionEnabled": true, "retryLimit": 0})).await;
    for chunk in 0..N / 500 {
        let items: Vec<Value> = (chunk * 500..(chunk + 1) * 500)
            .map(|i| json!({"queue": "vault", "partition": format!("p{}", i % 7), "payload": {"n": i}}))
            .collect();
        a.push_items(json!(items)).await;
    }
    let payload = base64_timer(&json!({"n": "timer"}));
    let (status, body) = a
        .post(
            "/api/v1/timers",
            &json!({"operations": [{"op": "schedule", "queue": "vault", "timerKey": "t", "payload": payload,
                                     "delayMs": 600000}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // A dead letter and a stream's state, on another encrypted queue.
    a.configure_ok("side", json!({"encryptionEnabled": true, "retryLimit": 0})).await;
    a.push("side", "Default", &[("d1", json!({"n": "dead"})), ("s1", json!({"n": "src"}))]).await;
    let popped = a.pop_some("side", "batch=1").await;
    a.ack(&popped["messages"][0], "failed", None).await;
    let (_, reg) = a
        .post("/streams/v1/queries", &json!({"name": "sq", "source_queue": "side", "config_hash": "h"}))
        .await;
    let qid = reg["query_id"].as_str().unwrap().to_owned();
    let pop = a.pop_some("side", "batch=10&consumerGroup=g&subscriptionMode=all").await;
    let msgs = pop["messages"].as_array().unwrap();
    let state = json!({"windowEnd": 5, "total": "STATE"});
    let (_, ok) = a
        .post(
            "/streams/v1/cycle",
            &json!({"query_id": qid, "partition_id": pop["partitionId"], "consumer_group": "g",
                    "state_ops": [{"type": "upsert", "key": "k", "value": state}], "push_items": [],
                    "ack": {"transactionId": msgs[msgs.len() - 1]["transactionId"], "leaseId": pop["leaseId"],
                            "status": "completed", "count": msgs.len()},
                    "release_lease": true}),
        )
        .await;
    assert_eq!(ok["success"], true, "{ok}");
    // N + the timer + side's 2 messages, its dead letter and its state row.
    const ROWS: i64 = N as i64 + 5;
    assert_eq!(census(&a).await, (ROWS, 0, 0));

    // A broker holding only the new key refuses to start, naming the old key's id.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_queen"))
        .arg("serve")
        .env("QUEEN_DATABASE_URL", url_for(&a.db))
        .env("PORT", common::free_port().to_string())
        .env("HOST", "127.0.0.1")
        .env("QUEEN_ENCRYPTION_KEY", NEW)
        .env("FILE_BUFFER_DIR", std::env::temp_dir().join("queen-test-spool"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains(&format!("key id {}", id(OLD))), "{said}");

    // Rotate in small batches; SIGKILL it after its first committed batches.
    let log = std::env::temp_dir().join(format!("queen-rotate-{}.log", a.db));
    let mut child = rotate_cmd(&a.db, 20, &log).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.matches("rows re-sealed").count() >= 3 {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "rotate ended before it was killed: {text}");
        assert!(Instant::now() < deadline, "no progress from rotate: {text}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let (old, new, plain) = census(&a).await;
    assert!(old > 0 && new > 0, "killed midway: {old} old, {new} new");
    assert_eq!((old + new, plain), (ROWS, 0));

    // A broker with the ring serves meanwhile: its pushes use the new key.
    let b = TestBroker::on_with_options(&a.db, options(EncryptionKey::from_ring(&ring()).unwrap())).await;
    b.engine.check_encryption_keys().await.unwrap();
    b.push("vault", "p0", &[("during", json!({"n": "during"}))]).await;

    // Run again to completion.
    let status = rotate_cmd(&a.db, 500, &log).status().unwrap();
    assert!(status.success(), "{}", std::fs::read_to_string(&log).unwrap_or_default());
    assert_eq!(census(&b).await, (0, ROWS + 1, 0));
    let keys: Vec<String> = b
        .sql()
        .await
        .query(
            "SELECT key_id FROM queen.encryption_keys UNION SELECT encryption_key_id FROM queen.queues",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(keys, vec![id(NEW)], "one key left, and every queue on it");

    // A broker with only the new key starts, and every message reads back once, as pushed.
    let p = BrokerProcess::spawn_with(&ServeSpec::for_db(&a.db).env("QUEEN_ENCRYPTION_KEY", NEW)).await;
    let mut seen = BTreeSet::new();
    loop {
        let (status, popped) = p.get("/api/v1/pop/queue/vault?wait=false&batch=10000&autoAck=true").await;
        if status == 204 {
            break;
        }
        assert_eq!(status, 200, "{popped}");
        for m in popped["messages"].as_array().unwrap() {
            assert!(seen.insert(m["data"]["n"].to_string()), "twice: {m}");
        }
    }
    let mut want: BTreeSet<String> = (0..N).map(|i| i.to_string()).collect();
    want.insert("\"during\"".into());
    assert_eq!(seen.len(), want.len());
    assert!(seen == want, "a message lost or altered");
    // The dead letter and the stream state open with the new key too.
    let dlq = p.dlq("side").await;
    assert!(dlq.to_string().contains("dead"), "{dlq}");
    let (status, read) = p
        .post(
            "/streams/v1/state/get",
            &json!({"query_id": qid, "partition_id": pop["partitionId"], "keys": []}),
        )
        .await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["rows"][0]["value"], state, "{read}");
    let _ = std::fs::remove_file(&log);
}

fn base64_timer(v: &Value) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(v.to_string())
}
