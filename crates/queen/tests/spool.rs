//! The push spool (Queen's file buffer): while PostgreSQL is away, or
//! pushes are paused, a push is fsynced to a file and answered 201
//! `buffered`; when the database is back the spool drains, each
//! acknowledged item exactly once and in order per partition, across
//! SIGKILLs of the broker while spooling and while draining, and a damaged
//! spool tail is reported and skipped. PostgreSQL is a private cluster
//! each test stops and starts (`queen_test_kit::PrivatePg`).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{eventually, Api, BrokerProcess, PrivatePg, ServeSpec, TestBroker};
use serde_json::{json, Value};

const PARTITIONS: usize = 4;

/// A private cluster with database `queen`, and a spool directory of the test's own.
async fn cluster() -> (PrivatePg, PathBuf) {
    let pg = PrivatePg::start();
    pg.sql("postgres").await.batch_execute("CREATE DATABASE queen").await.expect("create database");
    let spool = pg.dir.join("spool");
    (pg, spool)
}

fn spec(pg: &PrivatePg, spool: &Path, port: u16) -> ServeSpec {
    ServeSpec { url: pg.url("queen"), port, env: Vec::new(), log: None }
        .env("RUST_LOG", "error")
        .env("FILE_BUFFER_DIR", spool.to_str().unwrap())
}

/// Pushes one item; answers the HTTP status and the item's status.
async fn push_one(api: &Api, partition: usize, txid: &str, seq: usize) -> (u16, Value) {
    let body = json!({"items": [{"queue": "spooled", "partition": format!("p{partition}"),
                                 "transactionId": txid, "payload": {"seq": seq}}]});
    match api.http.post(api.url("/api/v1/push")).json(&body).timeout(Duration::from_secs(20)).send().await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap_or("").to_owned());
            let v: Value = resp.json().await.unwrap_or(Value::Null);
            if status == 503 {
                assert_eq!(retry_after.as_deref(), Some("1"), "a 503 carries Retry-After: {v}");
            }
            (status, v)
        }
        Err(_) => (0, Value::Null),
    }
}

async fn buffers(api: &Api) -> Value {
    let (status, v) = api.get("/api/v1/status/buffers").await;
    assert_eq!(status, 200, "{v}");
    v
}

/// Every message of the queue per partition, in order, read by offset
/// (no lease, no cursor): (partition, seq, transaction id).
async fn everything(pg: &PrivatePg) -> BTreeMap<String, Vec<(i64, String)>> {
    let db = pg.sql("queen").await;
    let rows = db
        .query(
            "SELECT p.name, (m.payload->>'seq')::bigint, m.transaction_id
               FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
               JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.name = 'spooled' ORDER BY p.name, m.seq",
            &[],
        )
        .await
        .expect("read the messages");
    let mut out: BTreeMap<String, Vec<(i64, String)>> = BTreeMap::new();
    for r in rows {
        out.entry(r.get(0)).or_default().push((r.get(1), r.get(2)));
    }
    out
}

/// Checks that every acknowledged push is stored exactly once, that nothing
/// is stored twice, and that each partition holds them in push order.
fn check_exactly_once_in_order(stored: &BTreeMap<String, Vec<(i64, String)>>, acked: &BTreeSet<String>) {
    let mut seen = BTreeSet::new();
    for (partition, rows) in stored {
        for (seq, txid) in rows {
            assert!(seen.insert(txid.clone()), "{txid} stored twice");
            let _ = seq;
        }
        let seqs: Vec<i64> = rows.iter().map(|(s, _)| *s).collect();
        let mut sorted = seqs.clone();
        sorted.sort();
        assert_eq!(seqs, sorted, "partition {partition} out of order");
    }
    let missing: Vec<&String> = acked.difference(&seen).collect();
    assert!(missing.is_empty(), "acknowledged but lost: {missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_acknowledged_while_postgres_is_down_are_stored_once_each_in_order_after_it() {
    let (pg, spool) = cluster().await;
    let broker = BrokerProcess::spawn_with(&spec(&pg, &spool, common::free_port())).await;
    let api = broker.api.clone();
    let (status, v) = push_one(&api, 0, "before", 0).await;
    assert_eq!((status, v[0]["status"].as_str()), (201, Some("queued")), "{v}");
    assert_eq!(buffers(&api).await["enabled"], true);

    pg.pg_ctl_stop("immediate");
    let mut acked = BTreeSet::from(["before".to_owned()]);
    for n in 1..=60 {
        let txid = format!("t{n}");
        let (status, v) = push_one(&api, n % PARTITIONS, &txid, n).await;
        assert_eq!(status, 201, "{v}");
        assert_eq!(v[0]["status"], "buffered", "{v}");
        assert_eq!(v[0]["transactionId"], txid.as_str());
        acked.insert(txid);
    }
    // An item without a transaction id is spooled with one drawn for it.
    let (status, v) = api
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": "spooled", "partition": "p1",
                                                                "payload": {"seq": 61}}]}),
        )
        .await;
    assert_eq!((status, v[0]["status"].as_str()), (201, Some("buffered")), "{v}");
    let drawn = v[0]["transactionId"].as_str().expect("a drawn transaction id").to_owned();
    acked.insert(drawn);
    let b = buffers(&api).await;
    assert_eq!(b["pending"], 61, "{b}");
    assert!(b["bytes"].as_u64().unwrap() > 0, "{b}");
    // Bad input is still refused at once, spool or not.
    let (status, v) = api.post("/api/v1/push", &json!({"items": [{"partition": "p1"}]})).await;
    assert_eq!(status, 400, "{v}");

    pg.pg_ctl_start();
    eventually(Duration::from_secs(60), "the spool drains", || async {
        let b = buffers(&api).await;
        (b["pending"] == 0 && b["drained"] == 61).then_some(())
    })
    .await;
    let stored = everything(&pg).await;
    check_exactly_once_in_order(&stored, &acked);
    assert_eq!(stored.values().map(Vec::len).sum::<usize>(), 62);
    // Drained, a push goes straight to PostgreSQL again.
    let (status, v) = push_one(&api, 0, "after", 62).await;
    assert_eq!((status, v[0]["status"].as_str()), (201, Some("queued")), "{v}");
    // A pop sees the spooled messages like any other.
    let (status, popped) = api.get("/api/v1/pop/queue/spooled/partition/p1?batch=100&wait=false").await;
    assert_eq!(status, 200, "{popped}");
    assert_eq!(popped["messages"].as_array().unwrap().len(), 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_while_spooling_and_while_draining_loses_and_duplicates_nothing() {
    let (pg, spool) = cluster().await;
    let port = common::free_port();
    let mut broker = BrokerProcess::spawn_with(&spec(&pg, &spool, port)).await;
    push_one(&broker.api, 0, "warm", 0).await;
    pg.pg_ctl_stop("immediate");

    // Spooling, with a SIGKILL in the middle of a stream of pushes.
    let mut acked = BTreeSet::from(["warm".to_owned()]);
    let pushers: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            let api = broker.api.clone();
            tokio::spawn(async move {
                let mut ok = Vec::new();
                // Until the broker is killed under it.
                for k in 0.. {
                    let txid = format!("p{p}-{k}");
                    match push_one(&api, p, &txid, k).await {
                        (201, v) if v[0]["status"] == "buffered" => ok.push(txid),
                        (0, _) => break, // the broker is gone
                        (status, v) => panic!("{txid}: {status} {v}"),
                    }
                }
                ok
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    broker.kill9();
    for p in pushers {
        acked.extend(p.await.unwrap());
    }
    let n = acked.len() - 1;
    assert!(n > 50, "pushes were acknowledged before the kill ({n})");

    // The database back, a new broker adopts the spool of the killed one
    // and drains it; a SIGKILL once the drain has begun.
    pg.pg_ctl_start();
    // One record per drained push: a drain slow enough to be killed in.
    let broker =
        BrokerProcess::spawn_with(&spec(&pg, &spool, port).env("QUEEN_SPOOL_DRAIN_ITEMS", "1")).await;
    let b = buffers(&broker.api).await;
    let spooled = b["pending"].as_u64().unwrap() + b["drained"].as_u64().unwrap();
    assert!(spooled >= n as u64, "{b} < {n}: the adopted spool holds every acknowledged push");
    eventually(Duration::from_secs(60), "the drain begins", || async {
        let b = buffers(&broker.api).await;
        (b["drained"].as_u64().unwrap_or(0) > 0).then_some(())
    })
    .await;
    let mut broker = broker;
    broker.kill9();
    let drained_before_kill = everything(&pg).await.values().map(Vec::len).sum::<usize>();
    eprintln!("acknowledged while down: {n}; stored when the drain was killed: {drained_before_kill}");
    assert!(
        drained_before_kill < n + 1,
        "the kill came in the middle of the drain ({drained_before_kill} of {n})"
    );
    let broker = BrokerProcess::spawn_with(&spec(&pg, &spool, port)).await;
    eventually(Duration::from_secs(120), "the spool drains", || async {
        (buffers(&broker.api).await["pending"] == 0).then_some(())
    })
    .await;
    let stored = everything(&pg).await;
    check_exactly_once_in_order(&stored, &acked);
    assert_eq!(buffers(&broker.api).await["failed"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_spool_tail_is_reported_and_skipped_never_a_crash_loop() {
    let (pg, spool) = cluster().await;
    let port = common::free_port();
    let mut broker = BrokerProcess::spawn_with(&spec(&pg, &spool, port)).await;
    push_one(&broker.api, 0, "warm", 0).await;
    pg.pg_ctl_stop("immediate");
    for n in 1..=5 {
        let (status, _) = push_one(&broker.api, 0, &format!("d{n}"), n).await;
        assert_eq!(status, 201);
    }
    broker.kill9();
    // Tear the last record, as a crash in the middle of a write would: the
    // end of the newest segment (the drainer's attempts while the database
    // was down may have sealed earlier ones).
    let mut segments: Vec<PathBuf> = std::fs::read_dir(&spool)
        .unwrap()
        .flatten()
        .flat_map(|db| std::fs::read_dir(db.path()).unwrap().flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    segments.sort();
    let segment = segments.pop().expect("a spool segment");
    let bytes = std::fs::read(&segment).unwrap();
    std::fs::write(&segment, &bytes[..bytes.len() - 7]).unwrap();

    pg.pg_ctl_start();
    let broker = BrokerProcess::spawn_with(&spec(&pg, &spool, port)).await;
    let b = eventually(Duration::from_secs(60), "the spool drains what is whole", || async {
        let b = buffers(&broker.api).await;
        (b["pending"] == 0 && b["failed"] == 1).then_some(b)
    })
    .await;
    assert!(b["damaged"][0]["reason"].as_str().unwrap().contains("torn"), "{b}");
    let stored = everything(&pg).await;
    let txids: Vec<&str> = stored["p0"].iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(txids, ["warm", "d1", "d2", "d3", "d4"]);
    // The damaged segment is kept for the operator, and the broker serves on.
    let corrupt = segment.with_extension("seg.corrupt");
    assert!(corrupt.exists(), "{corrupt:?}");
    let (status, _) = broker.api.get("/health").await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_spool_answers_503_with_retry_after_and_keeps_what_it_acknowledged() {
    let (pg, spool) = cluster().await;
    let broker = BrokerProcess::spawn_with(
        &spec(&pg, &spool, common::free_port()).env("QUEEN_SPOOL_MAX_BYTES", "1200"),
    )
    .await;
    push_one(&broker.api, 0, "warm", 0).await;
    pg.pg_ctl_stop("immediate");
    let mut acked = BTreeSet::from(["warm".to_owned()]);
    let mut refused = 0;
    for n in 1..=40 {
        let txid = format!("f{n}");
        match push_one(&broker.api, 0, &txid, n).await {
            (201, _) => {
                assert_eq!(refused, 0, "nothing is accepted after the bound was hit");
                acked.insert(txid);
            }
            (503, _) => refused += 1,
            (status, v) => panic!("{status} {v}"),
        }
    }
    assert!(refused > 0 && acked.len() > 2, "{} acknowledged, {refused} refused", acked.len());
    assert!(buffers(&broker.api).await["bytes"].as_u64().unwrap() <= 1200);
    pg.pg_ctl_start();
    eventually(Duration::from_secs(60), "the spool drains", || async {
        (buffers(&broker.api).await["pending"] == 0).then_some(())
    })
    .await;
    let stored = everything(&pg).await;
    check_exactly_once_in_order(&stored, &acked);
    assert_eq!(stored["p0"].len(), acked.len());
}

/// Push maintenance: pushes are spooled, pops see none of them, and turning
/// maintenance off drains them; the embedded engine takes the same option.
#[tokio::test]
async fn push_maintenance_spools_pushes_and_drains_them_when_it_ends() {
    let dir = std::env::temp_dir().join(format!("queen-spool-maint-{}", uuid::Uuid::new_v4().simple()));
    let options = queen_engine::EngineOptions {
        spool: Some(queen_engine::SpoolOptions { dir: dir.clone(), max_bytes: 1 << 20, drain_items: 500 }),
        ..queen_engine::EngineOptions::default()
    };
    let b = TestBroker::start_with_options(options).await;
    b.push("maint", "Default", &[("m0", json!(0))]).await;
    let (status, _) = b.post("/api/v1/system/maintenance", &json!({"enabled": true})).await;
    assert_eq!(status, 200);
    let pushed = b.push_txids("maint", "Default", &common::txids("m", 3)).await;
    assert!(pushed.as_array().unwrap().iter().all(|i| i["status"] == "buffered"), "{pushed}");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages").await, 1, "nothing written while paused");
    let (status, _) = b.post("/api/v1/system/maintenance", &json!({"enabled": false})).await;
    assert_eq!(status, 200);
    eventually(Duration::from_secs(30), "the spool drains", || async {
        (b.get("/api/v1/status/buffers").await.1["pending"] == 0).then_some(())
    })
    .await;
    let popped = b.pop_some("maint", "batch=10").await;
    assert_eq!(common::tx_ids(&popped), ["m0", "m-0", "m-1", "m-2"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without a spool the status says so.
#[tokio::test]
async fn without_a_spool_the_status_says_it_is_off() {
    let b = TestBroker::start().await;
    let (status, v) = b.get("/api/v1/status/buffers").await;
    assert_eq!(status, 200);
    assert_eq!(v["enabled"], false);
    assert_eq!(v["pending"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_to_a_broker_started_before_postgres_are_spooled_and_drained_after_its_migration() {
    let (pg, spool) = cluster().await;
    pg.pg_ctl_stop("fast");
    let broker = BrokerProcess::start(&spec(&pg, &spool, common::free_port()));
    let api = broker.api.clone();
    let (status, v) = eventually(Duration::from_secs(10), "a push before the database", || async {
        let (status, v) = push_one(&api, 0, "early", 0).await;
        (status != 0).then_some((status, v))
    })
    .await;
    assert_eq!((status, v[0]["status"].as_str()), (201, Some("buffered")), "{v}");
    let (status, _) = api.get("/ready").await;
    assert_eq!(status, 503);
    pg.pg_ctl_start();
    // Ready means migrated: only then do the tables exist to be read.
    eventually(Duration::from_secs(30), "the broker is ready", || async {
        (api.get("/ready").await.0 == 200).then_some(())
    })
    .await;
    let stored = eventually(Duration::from_secs(30), "the spooled push drained", || async {
        let all = everything(&pg).await;
        (!all.is_empty()).then_some(all)
    })
    .await;
    assert_eq!(stored["p0"], vec![(0, "early".to_owned())]);
    let (status, v) = push_one(&api, 0, "late", 1).await;
    assert_eq!((status, v[0]["status"].as_str()), (201, Some("queued")), "{v}");
}
