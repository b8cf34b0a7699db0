//! The crash harness (issue 8): producers push while the consumers of two
//! groups run "effect, then a once + ack bundle" (`POST /api/v1/transaction`
//! with a `putIfAbsent … required` marker beside the ack), and the broker
//! process is SIGKILLed at random moments and restarted, again and again.
//!
//! The effect log is a table in a *separate* database, written by the
//! consumer right before it sends the bundle, so it is outside the broker's
//! transaction exactly like a real side effect (a charge, an e-mail).
//!
//! At the end: every pushed message is acknowledged exactly once on each
//! group's cursor; no marker exists without its ack and no ack without its
//! marker (also checked after every kill); every message's effect happened;
//! an effect is repeated only for a message whose bundle was in flight when
//! the broker died (or was sent into a dead broker), never after its bundle
//! reported committed; zero messages lost.
//!
//! `QUEEN_CRASH_KILLS` (default 20), `QUEEN_CRASH_MESSAGES` (default 800) and
//! `QUEEN_CRASH_SEED` tune and reproduce a run.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Api, BrokerProcess, Rng, ServeSpec, TestDb};
use serde_json::{json, Value};

const QUEUE: &str = "crash";
const GROUPS: [&str; 2] = ["billing", "audit"];
const PARTITIONS: usize = 4;
const CONSUMERS_PER_GROUP: usize = 3;
const LEASE_SECONDS: u64 = 5;
const MARKERS: &str = "once";

/// (consumer group, transactionId).
type Key = (String, String);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// What the test observed, shared by producers, consumers and the killer.
#[derive(Default)]
struct Ledger {
    /// One clock for effects and commit reports, so "after" is well defined.
    clock: AtomicU64,
    /// Effect written, bundle answer not received yet.
    in_flight: Mutex<HashSet<Key>>,
    /// Keys that were in flight at some kill moment.
    at_kill: Mutex<HashSet<Key>>,
    /// Sum over kills of the number of bundles in flight at that kill.
    at_kill_total: AtomicUsize,
    /// Keys whose bundle got no HTTP answer at least once (sent into a dying or dead broker).
    into_dead: Mutex<HashSet<Key>>,
    /// Key -> clock when its bundle reported `success: true`.
    committed: Mutex<HashMap<Key, u64>>,
    /// A second `success: true` for one key: exactly-once broken.
    double_commits: Mutex<Vec<Key>>,
    /// Bundles answered `success: false` (a retry of one that had committed, or a lost lease).
    refused: AtomicUsize,
    /// Bundles retried after no answer.
    retried: AtomicUsize,
    /// Bundles given up after no answer (impatient consumers).
    abandoned: AtomicUsize,
    /// 503 answers (a restarting broker may give some; never anything else).
    unavailable: AtomicUsize,
    /// Any answer but 200/201/204/503: must stay empty.
    unexpected: Mutex<Vec<String>>,
    /// transactionIds whose push answered 201.
    pushed: Mutex<Vec<String>>,
}

impl Ledger {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, SeqCst)
    }

    fn unexpected(&self, what: String) {
        eprintln!("unexpected: {what}");
        self.unexpected.lock().unwrap().push(what);
    }
}

/// Pushes batches of 4 until `stop` or `max` messages; a push without an
/// answer is retried with the same transactionIds until it answers 201 (the
/// dedup window makes the retry idempotent), so every id it mints is pushed.
async fn producer(api: Api, ledger: Arc<Ledger>, next: Arc<AtomicUsize>, max: usize, stop: Arc<AtomicBool>) {
    while !stop.load(SeqCst) {
        let ids: Vec<usize> = (0..4).map(|_| next.fetch_add(1, SeqCst)).filter(|i| *i < max).collect();
        if ids.is_empty() {
            return;
        }
        let items: Vec<Value> = ids
            .iter()
            .map(|i| {
                json!({"queue": QUEUE, "partition": format!("p{}", i % PARTITIONS),
                       "transactionId": format!("m{i}"), "payload": {"i": i}})
            })
            .collect();
        let body = json!({ "items": items });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(Instant::now() < deadline, "a push never got through");
            match api.http.post(api.url("/api/v1/push")).json(&body).send().await {
                Ok(r) if r.status() == 201 => match r.json::<Value>().await {
                    Ok(answer) => {
                        for item in answer.as_array().expect("push answers an array") {
                            let status = item["status"].as_str().unwrap_or_default();
                            if status != "queued" && status != "duplicate" {
                                ledger.unexpected(format!("push item {item}"));
                            }
                        }
                        ledger.pushed.lock().unwrap().extend(ids.iter().map(|i| format!("m{i}")));
                        break;
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                },
                Ok(r) if r.status() == 503 => {
                    ledger.unavailable.fetch_add(1, SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(r) => {
                    let status = r.status();
                    ledger.unexpected(format!(
                        "push answered {status}: {}",
                        r.text().await.unwrap_or_default()
                    ));
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await, // the broker is down
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Pops one message at a time for `group`; writes the effect; then commits
/// the once marker and the ack in one bundle. A `patient` consumer retries
/// the same bundle while the broker does not answer; an impatient one gives
/// the message up (as a consumer that crashed too would), so it is
/// redelivered when its lease expires and its effect repeats.
async fn consumer(
    api: Api,
    group: &'static str,
    patient: bool,
    effects: Arc<tokio_postgres::Client>,
    ledger: Arc<Ledger>,
    stop: Arc<AtomicBool>,
) {
    let pop = format!(
        "/api/v1/pop/queue/{QUEUE}?batch=1&wait=true&timeout=500&leaseSeconds={LEASE_SECONDS}&subscriptionMode=all&consumerGroup={group}"
    );
    while !stop.load(SeqCst) {
        let m = match api.http.get(api.url(&pop)).send().await {
            Ok(r) if r.status() == 200 => match r.json::<Value>().await {
                Ok(v) => v["messages"][0].clone(),
                Err(_) => continue, // killed mid-answer: the lease expires by itself
            },
            Ok(r) if r.status() == 204 => continue,
            Ok(r) if r.status() == 503 => {
                ledger.unavailable.fetch_add(1, SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Ok(r) => {
                let status = r.status();
                ledger.unexpected(format!("pop answered {status}: {}", r.text().await.unwrap_or_default()));
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(30)).await;
                continue;
            }
        };
        let txid = m["transactionId"].as_str().expect("transactionId").to_owned();
        let key: Key = (group.to_owned(), txid.clone());
        ledger.in_flight.lock().unwrap().insert(key.clone());
        // The side effect, outside the broker's transaction, right before the commit.
        let stamp = ledger.tick() as i64;
        effects
            .execute("INSERT INTO effects (stamp, grp, txid) VALUES ($1, $2, $3)", &[&stamp, &group, &txid])
            .await
            .expect("write the effect");
        let bundle = json!({
            "operations": [{"type": "ack", "transactionId": txid, "partitionId": m["partitionId"],
                            "leaseId": m["leaseId"], "status": "completed", "consumerGroup": group}],
            "requiredLeases": [m["leaseId"]],
            "kv": [{"op": "putIfAbsent", "ns": MARKERS, "key": format!("{group}:{txid}"),
                    "value": {"by": group}, "ttlSeconds": 3600, "required": true}],
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(Instant::now() < deadline, "a bundle never got an answer");
            let answer = match api.http.post(api.url("/api/v1/transaction")).json(&bundle).send().await {
                Ok(r) => {
                    let status = r.status().as_u16();
                    r.text().await.ok().map(|t| (status, t))
                }
                Err(_) => None,
            };
            let Some((status, text)) = answer else {
                // No answer: the broker died with the bundle in flight, or was already dead.
                ledger.into_dead.lock().unwrap().insert(key.clone());
                if !patient {
                    ledger.abandoned.fetch_add(1, SeqCst);
                    break;
                }
                ledger.retried.fetch_add(1, SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            match status {
                200 => {
                    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                    if body["success"] == json!(true) {
                        let at = ledger.tick();
                        if ledger.committed.lock().unwrap().insert(key.clone(), at).is_some() {
                            ledger.double_commits.lock().unwrap().push(key.clone());
                        }
                    } else if body["success"] == json!(false) {
                        ledger.refused.fetch_add(1, SeqCst);
                    } else {
                        ledger.unexpected(format!("bundle answered 200 {text}"));
                    }
                    break;
                }
                503 => {
                    ledger.unavailable.fetch_add(1, SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => {
                    ledger.unexpected(format!("bundle answered {status}: {text}"));
                    break;
                }
            }
        }
        ledger.in_flight.lock().unwrap().remove(&key);
    }
}

/// (markers without their ack, acks without their marker), in one snapshot.
async fn violations(sql: &tokio_postgres::Client) -> (i64, i64) {
    let groups: Vec<&str> = GROUPS.to_vec();
    let row = sql
        .query_one(
            "WITH acked AS (
               SELECT c.consumer_group || ':' || m.transaction_id AS key
                 FROM queen.messages m
                 JOIN queen.cursors c ON c.partition_id = m.partition_id AND c.consumer_group = ANY($1)
                WHERE m.seq < c.next_seq)
             SELECT
               (SELECT count(*) FROM queen.kv k WHERE k.ns = 'once'
                   AND NOT EXISTS (SELECT 1 FROM acked a WHERE a.key = k.key)),
               (SELECT count(*) FROM acked a
                 WHERE NOT EXISTS (SELECT 1 FROM queen.kv k WHERE k.ns = 'once' AND k.key = a.key))",
            &[&groups],
        )
        .await
        .expect("invariant query");
    (row.get(0), row.get(1))
}

async fn connect(db: &str) -> tokio_postgres::Client {
    let (client, conn) =
        tokio_postgres::connect(&common::url_for(db), tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_at_random_moments_loses_nothing_and_repeats_only_in_flight_effects() {
    let started = Instant::now();
    let kills = env_usize("QUEEN_CRASH_KILLS", 20);
    let max_messages = env_usize("QUEEN_CRASH_MESSAGES", 800);
    let seed = std::env::var("QUEEN_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    }) | 1;
    // Seeded (printed, and settable with QUEEN_CRASH_SEED).
    let mut rng = Rng::new(seed);
    eprintln!("crash harness: kills={kills} messages={max_messages} seed={seed}");

    let db = TestDb::create().await;
    let effects_db = TestDb::create().await;
    let sql = connect(&db.name).await;
    let effects = Arc::new(connect(&effects_db.name).await);
    effects
        .batch_execute(
            "CREATE TABLE effects (stamp bigint PRIMARY KEY, grp text NOT NULL, txid text NOT NULL)",
        )
        .await
        .expect("effect table");

    // The spool off: a restarted broker answers while it migrates, and a
    // push then would be spooled (201 buffered, drained later); this harness
    // counts a push acknowledged only once PostgreSQL committed it
    // (tests/spool.rs has the spool under SIGKILL).
    let spec = ServeSpec::for_db(&db.name).env("RUST_LOG", "error").env("QUEEN_SPOOL", "false");
    let mut broker = BrokerProcess::spawn_with(&spec).await;
    let api = Api {
        base: broker.api.base.clone(),
        http: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("http"),
    };

    let ledger = Arc::new(Ledger::default());
    let stop_producers = Arc::new(AtomicBool::new(false));
    let stop_consumers = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicUsize::new(0));
    let mut producers = Vec::new();
    for _ in 0..2 {
        producers.push(tokio::spawn(producer(
            api.clone(),
            ledger.clone(),
            next.clone(),
            max_messages,
            stop_producers.clone(),
        )));
    }
    let mut consumers = Vec::new();
    for group in GROUPS {
        for c in 0..CONSUMERS_PER_GROUP {
            consumers.push(tokio::spawn(consumer(
                api.clone(),
                group,
                c != 0,
                effects.clone(),
                ledger.clone(),
                stop_consumers.clone(),
            )));
        }
    }

    let mut per_kill = Vec::new();
    for k in 0..kills {
        tokio::time::sleep(Duration::from_millis(150 + rng.below(900))).await;
        broker.kill9();
        // Nothing can commit from here on: what is in flight now may be repeated.
        let snapshot: Vec<Key> = ledger.in_flight.lock().unwrap().iter().cloned().collect();
        per_kill.push(snapshot.len());
        ledger.at_kill_total.fetch_add(snapshot.len(), SeqCst);
        ledger.at_kill.lock().unwrap().extend(snapshot);
        assert_eq!(
            violations(&sql).await,
            (0, 0),
            "after kill {}: (markers without their ack, acks without their marker)",
            k + 1
        );
        broker = BrokerProcess::spawn_with(&spec).await;
    }
    let kill_phase = started.elapsed();

    stop_producers.store(true, SeqCst);
    for p in producers {
        p.await.expect("producer");
    }
    let pushed: Vec<String> = ledger.pushed.lock().unwrap().clone();
    let expected_markers = pushed.len() * GROUPS.len();

    // Let the consumers drain the rest, checking the invariant as they go.
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        assert_eq!(
            violations(&sql).await,
            (0, 0),
            "while draining: (markers without ack, acks without marker)"
        );
        let markers: i64 = sql
            .query_one("SELECT count(*) FROM queen.kv WHERE ns = 'once'", &[])
            .await
            .expect("count")
            .get(0);
        if markers as usize == expected_markers {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {markers} of {expected_markers} (message, group) pairs were processed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop_consumers.store(true, SeqCst);
    for c in consumers {
        c.await.expect("consumer");
    }
    broker.terminate();
    broker.wait_exit(Duration::from_secs(10)).await;

    // 1. What was pushed is exactly what the queue holds: no loss, no duplicate.
    let stored: Vec<String> = sql
        .query(
            "SELECT m.transaction_id FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
               JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1",
            &[&QUEUE],
        )
        .await
        .expect("messages")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let pushed_set: BTreeSet<String> = pushed.iter().cloned().collect();
    assert_eq!(pushed_set.len(), pushed.len(), "a transactionId was reported pushed twice");
    assert_eq!(stored.len(), pushed.len(), "the queue holds each pushed message once");
    assert_eq!(
        stored.iter().cloned().collect::<BTreeSet<_>>(),
        pushed_set,
        "the queue holds what was pushed"
    );
    assert_eq!(pushed.len(), max_messages.min(next.load(SeqCst)), "every minted message was pushed");

    // 2. Every message is acknowledged on each group's cursor, exactly once:
    //    the cursors are at the end, and each (group, message) has one marker.
    let groups: Vec<&str> = GROUPS.to_vec();
    let backlog = common::group_backlog(&sql, &groups).await;
    assert_eq!(backlog, 0, "every message is off both groups' cursors");
    let cursors: i64 = sql
        .query_one("SELECT count(*) FROM queen.cursors WHERE consumer_group = ANY($1)", &[&groups])
        .await
        .expect("cursors")
        .get(0);
    assert_eq!(cursors as usize, PARTITIONS * GROUPS.len(), "one cursor per (partition, group)");
    let markers: BTreeSet<String> = sql
        .query("SELECT key FROM queen.kv WHERE ns = 'once'", &[])
        .await
        .expect("markers")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let want: BTreeSet<String> =
        GROUPS.iter().flat_map(|g| pushed.iter().map(move |t| format!("{g}:{t}"))).collect();
    assert_eq!(markers, want, "one marker per (group, message), and no other");
    assert_eq!(violations(&sql).await, (0, 0));
    assert!(ledger.double_commits.lock().unwrap().is_empty(), "a bundle committed twice");

    // 3. Effects: each (group, message) had its effect; repeats only where a
    //    bundle was in flight at a kill (or sent into a dead broker), and
    //    never after the bundle reported committed.
    let mut effect_stamps: BTreeMap<Key, Vec<u64>> = BTreeMap::new();
    for row in effects.query("SELECT grp, txid, stamp FROM effects", &[]).await.expect("effects") {
        let stamp: i64 = row.get(2);
        effect_stamps.entry((row.get(0), row.get(1))).or_default().push(stamp as u64);
    }
    let lost: Vec<String> = GROUPS
        .iter()
        .flat_map(|g| pushed.iter().map(move |t| (g.to_string(), t.clone())))
        .filter(|k| !effect_stamps.contains_key(k))
        .map(|(g, t)| format!("{g}:{t}"))
        .collect();
    assert!(lost.is_empty(), "messages whose effect never happened: {lost:?}");
    assert_eq!(effect_stamps.len(), expected_markers, "effects only for pushed messages");
    let at_kill = ledger.at_kill.lock().unwrap().clone();
    let into_dead = ledger.into_dead.lock().unwrap().clone();
    let committed = ledger.committed.lock().unwrap().clone();
    let mut repeats = 0usize;
    let mut repeated_keys = 0usize;
    for (key, stamps) in &effect_stamps {
        if stamps.len() > 1 {
            repeats += stamps.len() - 1;
            repeated_keys += 1;
            assert!(
                at_kill.contains(key) || into_dead.contains(key),
                "{key:?} repeated its effect {} times but its bundle was never caught by a crash",
                stamps.len()
            );
        }
        if let Some(at) = committed.get(key) {
            let after: Vec<&u64> = stamps.iter().filter(|s| *s > at).collect();
            assert!(after.is_empty(), "{key:?}: an effect after its bundle reported committed");
        }
    }
    let at_risk = ledger.at_kill_total.load(SeqCst) + into_dead.difference(&at_kill).count();
    assert!(repeats <= at_risk, "{repeats} repeats for {at_risk} bundles caught by a crash");
    let unexpected = ledger.unexpected.lock().unwrap().clone();
    assert!(unexpected.is_empty(), "answers other than 200/201/204/503: {unexpected:?}");

    eprintln!(
        "crash harness figures: kills={kills} messages={} groups={} acks={} committed_reported={} \
         refused_after_retry={} retried_bundles={} abandoned_bundles={} in_flight_at_kills={} (per kill {per_kill:?}) \
         sent_into_dead_broker={} repeats={repeats} (keys {repeated_keys}) lost=0 answered_503={} \
         unexpected=0 kill_phase={:.1}s total={:.1}s seed={seed}",
        pushed.len(),
        GROUPS.len(),
        markers.len(),
        committed.len(),
        ledger.refused.load(SeqCst),
        ledger.retried.load(SeqCst),
        ledger.abandoned.load(SeqCst),
        ledger.at_kill_total.load(SeqCst),
        into_dead.len(),
        ledger.unavailable.load(SeqCst),
        kill_phase.as_secs_f64(),
        started.elapsed().as_secs_f64(),
    );
}
