//! Failover across a real PostgreSQL HA cluster (pg_auto_failover: a
//! monitor, a primary and a synchronous standby, scripts/ha-cluster).
//!
//! Two brokers serve the cluster through a multi-host URL with
//! `target_session_attrs=read-write`, under a load of pushes, once + ack
//! bundles, putIfAbsent races, a counter and a lock. The primary's host is
//! crashed (its postmaster and supervisor killed with SIGKILL), the monitor
//! promotes the standby, the old primary rejoins as the new standby, and so
//! on, failing back and forth. After every failover and at the end:
//! - every acknowledged push is stored;
//! - every idempotency marker matches its cursor, both ways;
//! - every acknowledged once + ack has its marker;
//! - every putIfAbsent race has at most one acknowledged winner, and the
//!   stored value is that winner's;
//! - the counter and its versions never go backwards, and lock fencing
//!   tokens only grow;
//! - a long poll waiting on one broker across the failover is woken by a
//!   push on the other (the LISTEN connection follows the new primary).
//!
//! The time from each kill until pops work again is printed (docs/RELIABILITY.md).
//! `QUEEN_FAILOVERS` sets the number of failovers (default 5).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{free_port, Api, BrokerProcess, ServeSpec};
use serde_json::{json, Value};

const PARTITIONS: usize = 4;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/ha-cluster")
}

/// As [`ha`], with QUEEN_HA_TIMEOUT set, answering the failure instead of panicking.
fn ha_try(args: &[&str], dir: &str, timeout_secs: u32) -> Result<String, String> {
    let mut all: Vec<&str> = args.to_vec();
    all.insert(1, dir);
    let out = Command::new(script())
        .args(&all)
        .env("QUEEN_HA_TIMEOUT", timeout_secs.to_string())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

fn ha(args: &[&str], dir: &str) -> String {
    let mut all: Vec<&str> = args.to_vec();
    all.insert(1, dir);
    let out = Command::new(script()).args(&all).output().expect("run scripts/ha-cluster");
    assert!(
        out.status.success(),
        "scripts/ha-cluster {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The cluster, torn down when dropped.
struct Cluster {
    dir: String,
    url: String,
}

impl Cluster {
    fn up() -> Self {
        let dir = std::env::temp_dir().join(format!("queen-ha-{}", std::process::id())).display().to_string();
        // Built first, so a failing `up` is still torn down (Drop).
        let mut cluster = Cluster { dir, url: String::new() };
        let out = ha(&["up"], &cluster.dir);
        cluster.url = out.lines().last().expect("up prints the URL").trim().to_owned();
        assert!(cluster.url.contains("target_session_attrs=read-write"), "{}", cluster.url);
        cluster
    }

    fn primary(&self) -> String {
        ha(&["primary"], &self.dir).split_whitespace().next().expect("a primary").to_owned()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["down", &self.dir]).output();
    }
}

/// What the load was told had committed.
#[derive(Default)]
struct Acked {
    pushes: HashSet<String>,
    once_acks: HashSet<String>,
    /// key -> the acknowledged winner's value, if any.
    race_winners: BTreeMap<String, Value>,
    /// (value, version) of each acknowledged incr, in the order answered.
    counter: Vec<(i64, i64)>,
    /// Fencing tokens of acknowledged lock acquisitions, in order.
    tokens: Vec<i64>,
}

/// Answers seen during the run: 503s (with Retry-After) are expected while
/// there is no primary; anything else but 2xx is a wrong answer.
static UNAVAILABLE: AtomicU64 = AtomicU64::new(0);
static WRONG: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn judge(path: &str, resp: &reqwest::Response) {
    let status = resp.status().as_u16();
    match status {
        200 | 201 | 204 => {}
        503 if resp.headers().contains_key("retry-after") => {
            UNAVAILABLE.fetch_add(1, Ordering::Relaxed);
        }
        _ => WRONG.lock().unwrap().push(format!("{path}: {status}")),
    }
}

async fn post(api: &Api, path: &str, body: &Value) -> Option<Value> {
    let resp = api.http.post(api.url(path)).json(body).timeout(Duration::from_secs(10)).send().await.ok()?;
    judge(path, &resp);
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.ok()?;
    (status == 200 || status == 201).then_some(v)
}

async fn kv_one(api: &Api, op: Value) -> Option<Value> {
    post(api, "/api/v1/kv", &json!({ "operations": [op] })).await.map(|v| v["results"][0].clone())
}

/// Runs the load until `stop`: each loop is a task on one of the brokers.
fn start_load(
    apis: &[Api],
    acked: &Arc<Mutex<Acked>>,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    // Pushers.
    for w in 0..2usize {
        let (apis, acked, stop) = (apis.to_vec(), acked.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let id = format!("p{w}-{n}");
                let api = &apis[n % apis.len()];
                let body = json!({"items": [{"queue": "ha", "partition": format!("part{}", n % PARTITIONS),
                                             "transactionId": id, "payload": {"n": n}}]});
                if let Some(v) = post(api, "/api/v1/push", &body).await {
                    if v[0]["status"] == "queued" {
                        acked.lock().unwrap().pushes.insert(id);
                    }
                } else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                n += 1;
            }
        }));
    }
    // Once + ack consumers: a marker and the ack in one commit.
    for w in 0..3usize {
        let (apis, acked, stop) = (apis.to_vec(), acked.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut turn = w;
            while !stop.load(Ordering::SeqCst) {
                turn += 1;
                let api = &apis[turn % apis.len()];
                let popped = match api
                    .http
                    .get(api.url("/api/v1/pop/queue/ha?batch=1&wait=false&leaseSeconds=5"))
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await
                {
                    Ok(r) => {
                        judge("pop", &r);
                        if r.status() == 200 {
                            r.json::<Value>().await.ok()
                        } else {
                            None
                        }
                    }
                    Err(_) => None,
                };
                let Some(p) = popped else {
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    continue;
                };
                let m = &p["messages"][0];
                let id = m["transactionId"].as_str().unwrap_or_default().to_owned();
                let bundle = json!({
                    "operations": [{"type": "ack", "transactionId": id, "partitionId": m["partitionId"],
                                    "leaseId": m["leaseId"], "status": "completed"}],
                    "requiredLeases": [m["leaseId"]],
                    "kv": [{"op": "putIfAbsent", "ns": "ha-marks", "key": format!("done:{id}"),
                            "value": {"by": w}, "ttlSeconds": 3600, "required": true}]});
                if let Some(v) = post(api, "/api/v1/transaction", &bundle).await {
                    if v["success"] == true {
                        acked.lock().unwrap().once_acks.insert(id);
                    }
                }
            }
        }));
    }
    // putIfAbsent races: 6 racers per key, a new key per round.
    {
        let (apis, acked, stop) = (apis.to_vec(), acked.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut round = 0usize;
            while !stop.load(Ordering::SeqCst) {
                let key = format!("race-{round}");
                let racers: Vec<_> = (0..6usize)
                    .map(|i| {
                        let api = apis[i % apis.len()].clone();
                        let key = key.clone();
                        tokio::spawn(async move {
                            kv_one(
                                &api,
                                json!({"op": "putIfAbsent", "ns": "ha-race", "key": key,
                                                 "value": {"by": i}, "ttlSeconds": 3600}),
                            )
                            .await
                        })
                    })
                    .collect();
                let mut winners = Vec::new();
                for r in racers {
                    if let Some(v) = r.await.unwrap() {
                        if v["applied"] == true {
                            winners.push(v["value"].clone());
                        }
                    }
                }
                assert!(winners.len() <= 1, "{key}: {} acknowledged winners", winners.len());
                if let Some(w) = winners.pop() {
                    acked.lock().unwrap().race_winners.insert(key, w);
                }
                round += 1;
            }
        }));
    }
    // A counter, incremented by one task: its answers must only grow.
    {
        let (apis, acked, stop) = (apis.to_vec(), acked.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let op = json!({"op": "incr", "ns": "ha-count", "key": "c", "delta": 1, "ttlSeconds": 3600});
                match kv_one(&apis[n % apis.len()], op).await {
                    Some(v) if v["applied"] == true => acked
                        .lock()
                        .unwrap()
                        .counter
                        .push((v["value"].as_i64().unwrap(), v["version"].as_i64().unwrap())),
                    _ => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            }
        }));
    }
    // A lock taken and released again and again: fencing tokens only grow.
    {
        let (apis, acked, stop) = (apis.to_vec(), acked.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let api = &apis[n % apis.len()];
                let op =
                    json!({"op": "acquire", "name": "ha-lock", "ttlSeconds": 2, "owner": format!("o{n}")});
                match post(api, "/api/v1/locks", &json!({ "operations": [op] })).await {
                    Some(v) if v["results"][0]["acquired"] == true => {
                        let token = v["results"][0]["token"].as_i64().unwrap();
                        acked.lock().unwrap().tokens.push(token);
                        let release = json!({"op": "release", "name": "ha-lock", "token": token});
                        let _ = post(api, "/api/v1/locks", &json!({ "operations": [release] })).await;
                    }
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }));
    }
    tasks
}

async fn sql(url: &str) -> tokio_postgres::Client {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match tokio_postgres::connect(url, tokio_postgres::NoTls).await {
            Ok((client, conn)) => {
                tokio::spawn(conn);
                return client;
            }
            Err(e) => {
                assert!(Instant::now() < deadline, "no primary to check against: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Checks everything acknowledged so far against the new primary.
async fn check(url: &str, acked: &Arc<Mutex<Acked>>, when: &str) {
    let db = sql(url).await;
    let (pushes, once_acks, winners, counter, tokens) = {
        let a = acked.lock().unwrap();
        (a.pushes.clone(), a.once_acks.clone(), a.race_winners.clone(), a.counter.clone(), a.tokens.clone())
    };
    let stored: HashSet<String> = db
        .query(
            "SELECT transaction_id FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id \
                JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'ha'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let lost: Vec<&String> = pushes.difference(&stored).collect();
    assert!(
        lost.is_empty(),
        "{when}: {} acknowledged pushes lost: {:?}",
        lost.len(),
        lost.iter().take(5).collect::<Vec<_>>()
    );

    let row = db
        .query_one(
            "WITH acked AS (
               SELECT m.transaction_id FROM queen.messages m
                 JOIN queen.cursors c ON c.partition_id = m.partition_id AND c.consumer_group = '__QUEUE_MODE__'
                 JOIN queen.partitions p ON p.id = m.partition_id
                 JOIN queen.queues q ON q.id = p.queue_id AND q.name = 'ha'
                WHERE m.seq < c.next_seq)
             SELECT
               (SELECT count(*) FROM queen.kv k WHERE k.ns = 'ha-marks'
                   AND NOT EXISTS (SELECT 1 FROM acked a WHERE 'done:' || a.transaction_id = k.key)),
               (SELECT count(*) FROM acked a
                 WHERE NOT EXISTS (SELECT 1 FROM queen.kv k WHERE k.ns = 'ha-marks' AND k.key = 'done:' || a.transaction_id))",
            &[],
        )
        .await
        .unwrap();
    let violations: (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(violations, (0, 0), "{when}: (marked but on the cursor, acked but unmarked)");
    let marks: HashSet<String> = db
        .query("SELECT substr(key, 6) FROM queen.kv WHERE ns = 'ha-marks'", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let unmarked: Vec<&String> = once_acks.difference(&marks).collect();
    assert!(unmarked.is_empty(), "{when}: acknowledged once + acks without a marker: {unmarked:?}");

    for (key, winner) in &winners {
        let row = db
            .query_one("SELECT value::text FROM queen.kv WHERE ns = 'ha-race' AND key = $1", &[key])
            .await
            .unwrap_or_else(|e| panic!("{when}: race key {key} lost: {e}"));
        let stored: Value = serde_json::from_str(&row.get::<_, String>(0)).unwrap();
        assert_eq!(&stored, winner, "{when}: {key} holds another value than its acknowledged winner");
    }

    for pair in counter.windows(2) {
        assert!(
            pair[1].0 > pair[0].0 && pair[1].1 > pair[0].1,
            "{when}: the counter went backwards: {pair:?}"
        );
    }
    if let Some(&(value, version)) = counter.last() {
        let row = db
            .query_one(
                "SELECT value::text::bigint, version FROM queen.kv WHERE ns = 'ha-count' AND key = 'c'",
                &[],
            )
            .await
            .unwrap();
        let (v, ver): (i64, i64) = (row.get(0), row.get(1));
        assert!(
            v >= value && ver >= version,
            "{when}: stored ({v}, {ver}) is behind acknowledged ({value}, {version})"
        );
    }
    for pair in tokens.windows(2) {
        assert!(pair[1] > pair[0], "{when}: a fencing token went backwards: {pair:?}");
    }
}

/// Pushes to and pops from a probe queue until both work; the time it took.
async fn until_pops_work(api: &Api, since: Instant, n: usize) -> Duration {
    let deadline = since + Duration::from_secs(180);
    let id = format!("probe-{n}");
    loop {
        assert!(Instant::now() < deadline, "pops did not resume within 180 s");
        let body = json!({"items": [{"queue": "probe", "transactionId": id, "payload": {}}]});
        if post(api, "/api/v1/push", &body).await.is_some() {
            if let Ok(r) = api
                .http
                .get(api.url("/api/v1/pop/queue/probe?batch=1&wait=false&autoAck=true"))
                .timeout(Duration::from_secs(5))
                .send()
                .await
            {
                if r.status() == 200 {
                    return since.elapsed();
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_acknowledged_is_lost_across_failovers_and_fail_backs() {
    let failovers: usize = std::env::var("QUEEN_FAILOVERS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let cluster = Cluster::up();
    let a = BrokerProcess::spawn_with(&ServeSpec {
        url: cluster.url.clone(),
        port: free_port(),
        // The spool off: the harness counts a push acknowledged only when
        // PostgreSQL committed it, and retries the 503s (tests/spool.rs has
        // the spool's outages).
        env: vec![("QUEEN_SPOOL".into(), "false".into())],
        log: None,
    })
    .await;
    // B re-checks rarely: a long poll woken quickly on B was woken by LISTEN.
    let b = BrokerProcess::spawn_with(
        &ServeSpec { url: cluster.url.clone(), port: free_port(), env: Vec::new(), log: None }
            .env("QUEEN_POLL_INTERVAL_MS", "30000")
            .env("QUEEN_SPOOL", "false"),
    )
    .await;
    let apis = vec![a.api.clone(), b.api.clone()];
    let acked = Arc::new(Mutex::new(Acked::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let load = start_load(&apis, &acked, &stop);
    let resumed_ms = Arc::new(AtomicU64::new(0));
    let mut report = Vec::new();

    // A crash the monitor does not turn into a promotion within 90 s (seen
    // once in seven runs of five) is recovered by restarting the crashed node;
    // the checks still run across it, and the round is counted apart. The
    // harness needs `failovers` real promotions, in at most 3 extra rounds.
    let (mut promotions, mut unpromoted, mut round) = (0usize, 0usize, 0usize);
    while promotions < failovers {
        round += 1;
        assert!(round <= failovers + 3, "only {promotions} promotions in {} crashes", round - 1);
        tokio::time::sleep(Duration::from_secs(3)).await;
        // A long poll on B, waiting across the failover (its own deadline: 120 s).
        let queue = format!("lp-{round}");
        let waiting = {
            let b = b.api.clone();
            let queue = queue.clone();
            tokio::spawn(async move {
                b.http
                    .get(b.url(&format!(
                        "/api/v1/pop/queue/{queue}?batch=1&wait=true&timeout=120000&autoAck=true"
                    )))
                    .timeout(Duration::from_secs(150))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let old = cluster.primary();
        let killed_at = Instant::now();
        let killed = ha(&["crash-primary"], &cluster.dir);
        assert_eq!(killed.lines().last().unwrap_or_default().trim(), old);
        let promoted = match ha_try(&["wait-failover", &old], &cluster.dir, 90) {
            Ok(seconds) => Some(seconds),
            Err(why) => {
                eprintln!("crash {round}: no promotion ({why}); restarting {old}");
                ha(&["restart-node", &old], &cluster.dir);
                None
            }
        };
        let resumed = until_pops_work(&a.api, killed_at, round).await;
        resumed_ms.store(resumed.as_millis() as u64, Ordering::SeqCst);
        check(&cluster.url, &acked, &format!("after failover {round}")).await;

        // The long poll on B is still waiting; a push on A wakes it.
        assert!(!waiting.is_finished(), "the long poll ended during the failover");
        let pushed_at = Instant::now();
        let body =
            json!({"items": [{"queue": queue, "transactionId": format!("lp-{round}"), "payload": {}}]});
        let mut pushed = false;
        while !pushed {
            pushed = post(&a.api, "/api/v1/push", &body).await.is_some();
            assert!(pushed_at.elapsed() < Duration::from_secs(30), "no push after the failover");
        }
        let status = waiting.await.unwrap().expect("the long poll answered");
        let woke = pushed_at.elapsed();
        assert_eq!(status, 200, "the long poll got the message");
        assert!(woke < Duration::from_secs(10), "woken by the new primary's notification: {woke:?}");

        let new = cluster.primary();
        let Some(promoted) = promoted else {
            ha(&["wait-sync"], &cluster.dir);
            unpromoted += 1;
            report.push(format!(
                "crash {round}: {old} came back as the primary (no promotion); pops resumed {:.1} s after the kill",
                resumed.as_secs_f64()
            ));
            continue;
        };
        assert_ne!(new, old, "the standby was promoted");
        promotions += 1;
        ha(&["restart-node", &old], &cluster.dir);
        ha(&["wait-sync"], &cluster.dir);
        let line = format!(
            "failover {round}: {old} -> {new}; writes on the new primary {promoted} s after the kill (script), \
             pops resumed {:.1} s after the kill, a long poll across it woken {:.0} ms after a push",
            resumed.as_secs_f64(),
            woke.as_secs_f64() * 1000.0
        );
        eprintln!("{line}");
        report.push(line);
    }
    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.await.expect("a load task failed");
    }
    check(&cluster.url, &acked, "at the end").await;
    let a_ = acked.lock().unwrap();
    eprintln!(
        "acknowledged: {} pushes, {} once + acks, {} race winners, {} incrs, {} lock tokens",
        a_.pushes.len(),
        a_.once_acks.len(),
        a_.race_winners.len(),
        a_.counter.len(),
        a_.tokens.len()
    );
    let wrong = WRONG.lock().unwrap().clone();
    eprintln!("503 with Retry-After during the failovers: {}", UNAVAILABLE.load(Ordering::Relaxed));
    assert!(wrong.is_empty(), "answers other than 2xx or 503 + Retry-After: {wrong:?}");
    assert!(
        !a_.pushes.is_empty() && !a_.once_acks.is_empty() && !a_.counter.is_empty() && !a_.tokens.is_empty()
    );
    eprintln!("{promotions} promotions, {unpromoted} crashes the monitor did not promote");
    for line in &report {
        println!("{line}");
    }
}
