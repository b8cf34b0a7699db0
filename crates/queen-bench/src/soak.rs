//! `queen bench --soak-seconds N`: a steady, rate-limited mixed load for a
//! long time, to show that the broker's memory, file descriptors and
//! PostgreSQL connections stay flat (no leak).
//!
//! `SOAK_WORKERS` tasks share `--rate` ops/s (each ticks at its share, a late
//! tick is skipped rather than bunched) and draw every op from `MIX`: pushes
//! and pops of one partition per worker (so the backlog stays level), `once`
//! bundles (pop, then ack + `putIfAbsent required` in one transaction), KV
//! get/put/incr/putIfAbsent with TTLs (so the sweeper has work). Beside them
//! `--soak-long-polls` tasks hold long polls (`wait=true`) on a queue that the
//! mix feeds. Every `SAMPLE` the broker's VmRSS, its open fds, the database's
//! connections, the ops, errors and latency of the interval are recorded.
//! Results: `<out>/soak-<unix time>/` (soak.json, soak.md, soak.png).

use crate::driver::Reqwest;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use plotters::prelude::*;
use serde_json::Value;

use super::report::{font, COLORS};
use super::workload::{Outcome, Rng, Workload};
use super::BenchArgs;

/// Rate-limited workers sharing `--rate`.
const SOAK_WORKERS: usize = 16;
/// Time between samples.
const SAMPLE: Duration = Duration::from_secs(5);
/// The queue the long pollers wait on.
const LP_QUEUE: &str = "soak-lp";
/// Milliseconds a long poll waits at most.
const LP_TIMEOUT_MS: u64 = 2000;

/// What one op of the mix is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    /// Push one message on the worker's partition of the pop backlog.
    Push,
    /// Pop one message of the worker's partition, then ack it.
    PopAck,
    /// Pop, then one transaction: ack + `putIfAbsent required` marker.
    OnceAck,
    /// Push one message on the long pollers' queue.
    PushLongPoll,
    /// KV get of one of 10,000 keys.
    KvGet,
    /// KV put with a 60 s TTL on 10,000 keys (most expire before the next put).
    KvPutTtl,
    /// KV incr with a 60 s TTL (set on create) on 1,000 counters.
    KvIncrTtl,
    /// putIfAbsent of a new key with a 30 s TTL (the sweeper reclaims them).
    KvPutIfAbsentTtl,
}

/// The mix, weights out of 20: pushes and pops of the backlog balance.
const MIX: [(Op, u64); 8] = [
    (Op::Push, 5),
    (Op::PopAck, 3),
    (Op::OnceAck, 2),
    (Op::PushLongPoll, 1),
    (Op::KvGet, 3),
    (Op::KvPutTtl, 3),
    (Op::KvIncrTtl, 2),
    (Op::KvPutIfAbsentTtl, 1),
];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Push => "push",
            Op::PopAck => "pop+ack",
            Op::OnceAck => "once+ack bundle",
            Op::PushLongPoll => "push (long-poll queue)",
            Op::KvGet => "kv get",
            Op::KvPutTtl => "kv put ttl 60s",
            Op::KvIncrTtl => "kv incr ttl 60s",
            Op::KvPutIfAbsentTtl => "kv putIfAbsent ttl 30s",
        }
    }

    fn draw(rng: &mut Rng) -> (usize, Op) {
        let total: u64 = MIX.iter().map(|m| m.1).sum();
        let mut d = rng.next() % total;
        for (i, &(op, w)) in MIX.iter().enumerate() {
            if d < w {
                return (i, op);
            }
            d -= w;
        }
        (0, MIX[0].0)
    }

    async fn run(
        self,
        http: &reqwest::Client,
        base: &str,
        worker: usize,
        rng: &mut Rng,
    ) -> anyhow::Result<Outcome> {
        // The consuming ops and the KV get are the bench's own workloads.
        match self {
            Op::PopAck => {
                return Workload::PopAck.http_op(&mut Reqwest { http, base }, worker, rng, "").await
            }
            Op::OnceAck => {
                return Workload::OnceAck.http_op(&mut Reqwest { http, base }, worker, rng, "").await
            }
            Op::KvGet => {
                return Workload::KvGet { size: 0 }
                    .http_op(&mut Reqwest { http, base }, worker, rng, "")
                    .await
            }
            _ => {}
        }
        let n = rng.next();
        let (path, body) = match self {
            Op::Push => (
                "/api/v1/push",
                format!(
                    r#"{{"items":[{{"queue":"bench-pop","partition":"p{worker}","payload":{{"n":{n}}}}}]}}"#
                ),
            ),
            Op::PushLongPoll => (
                "/api/v1/push",
                format!(
                    r#"{{"items":[{{"queue":"{LP_QUEUE}","partition":"p{}","payload":{{"n":{n}}}}}]}}"#,
                    n % 4
                ),
            ),
            Op::KvPutTtl => (
                "/api/v1/kv",
                format!(
                    r#"{{"operations":[{{"op":"put","ns":"soak","key":"t:{}","value":{{"n":{n}}},"ttlSeconds":60}}]}}"#,
                    n % 10_000
                ),
            ),
            Op::KvIncrTtl => (
                "/api/v1/kv",
                format!(
                    r#"{{"operations":[{{"op":"incr","ns":"soak","key":"c:{}","delta":1,"ttlSeconds":60}}]}}"#,
                    n % 1000
                ),
            ),
            Op::KvPutIfAbsentTtl => (
                "/api/v1/kv",
                format!(
                    r#"{{"operations":[{{"op":"putIfAbsent","ns":"soak","key":"n:{n}","value":1,"ttlSeconds":30}}]}}"#
                ),
            ),
            Op::PopAck | Op::OnceAck | Op::KvGet => bail!("handled above"),
        };
        let resp = http
            .post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let ok = resp.status().is_success();
        let body = resp.bytes().await?;
        let refused = serde_json::from_slice::<Value>(&body)
            .map(|v| v["success"] == Value::Bool(false))
            .unwrap_or(true);
        Ok(if ok && !refused { Outcome::Done } else { Outcome::Wrong })
    }
}

/// Counters the tasks add to; the sampler takes the difference per interval.
#[derive(Default)]
struct Counters {
    ops: AtomicU64,
    errors: AtomicU64,
    empty: AtomicU64,
    long_polls: AtomicU64,
    long_poll_messages: AtomicU64,
    per_op: [AtomicU64; MIX.len()],
    errors_per_op: [AtomicU64; MIX.len() + 2],
}

struct Shared {
    c: Counters,
    /// Latencies of the rate-limited ops (not the long polls) since the last sample.
    hist: Mutex<Histogram<u64>>,
    /// The first few error messages, for the verdict.
    first_errors: Mutex<Vec<String>>,
    stop: AtomicBool,
}

impl Shared {
    fn error(&self, what: &str, index: usize, e: String) {
        self.c.errors.fetch_add(1, Ordering::Relaxed);
        self.c.errors_per_op[index].fetch_add(1, Ordering::Relaxed);
        if let Ok(mut v) = self.first_errors.lock() {
            if v.len() < 10 {
                v.push(format!("{what}: {e}"));
            }
        }
    }
}

/// One sample: the broker's resources at its time and the load of the
/// interval that ended then.
#[derive(serde::Serialize, Clone)]
struct Sample {
    t_s: f64,
    rss_mb: f64,
    fds: usize,
    pg_connections: i64,
    kv_rows: i64,
    ops: u64,
    ops_per_s: f64,
    errors: u64,
    empty_pops: u64,
    long_polls: u64,
    long_poll_messages: u64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

#[derive(serde::Serialize)]
struct Verdict {
    duration_s: f64,
    warmup_s: u64,
    target_rate: f64,
    achieved_rate: f64,
    ops: u64,
    errors: u64,
    empty_pops: u64,
    long_polls: u64,
    long_poll_messages: u64,
    rss_start_mb: f64,
    rss_end_mb: f64,
    rss_peak_mb: f64,
    rss_first_fifth_mb: f64,
    rss_last_fifth_mb: f64,
    rss_ratio_last_vs_first: f64,
    rss_slope_mb_per_hour: f64,
    fds_min: usize,
    fds_max: usize,
    fds_first_fifth: f64,
    fds_last_fifth: f64,
    pg_connections_min: i64,
    pg_connections_max: i64,
    pg_connection_limit: usize,
    p99_ms_overall: f64,
    p999_ms_overall: f64,
    pass: bool,
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Least-squares slope of y over x.
fn slope(pts: &[(f64, f64)]) -> f64 {
    let n = pts.len() as f64;
    if pts.len() < 2 {
        return 0.0;
    }
    let (mx, my) = (pts.iter().map(|p| p.0).sum::<f64>() / n, pts.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

async fn long_poller(http: reqwest::Client, base: String, shared: Arc<Shared>) {
    let url = format!("{base}/api/v1/pop/queue/{LP_QUEUE}?batch=10&wait=true&timeout={LP_TIMEOUT_MS}");
    while !shared.stop.load(Ordering::Relaxed) {
        match long_poll_once(&http, &url, &base).await {
            Ok(Some(n)) => {
                shared.c.long_polls.fetch_add(1, Ordering::Relaxed);
                shared.c.long_poll_messages.fetch_add(n, Ordering::Relaxed);
            }
            Ok(None) => {
                shared.c.long_polls.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                shared.error("long poll", MIX.len(), format!("{e:#}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One long poll and the ack of what it got: Some(messages), None if it timed out empty.
async fn long_poll_once(http: &reqwest::Client, url: &str, base: &str) -> anyhow::Result<Option<u64>> {
    let resp = http.get(url).send().await?;
    match resp.status().as_u16() {
        204 => return Ok(None),
        200 => {}
        s => bail!("long poll answered {s}"),
    }
    let v: Value = resp.json().await?;
    let acks = super::workload::completed_acks(&v);
    if acks.is_empty() {
        bail!("long poll answered 200 without messages");
    }
    let mut body = serde_json::json!({ "acknowledgments": acks });
    if v["consumerGroup"].is_string() {
        body["consumerGroup"] = v["consumerGroup"].clone();
    }
    let resp = http
        .post(format!("{base}/api/v1/ack/batch"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await?;
    let status = resp.status();
    let answer: Value = resp.json().await.context("reading the batch ack answer")?;
    let refused = answer.as_array().map(|a| a.iter().any(|i| i["success"] == Value::Bool(false)));
    if !status.is_success() || refused != Some(false) {
        bail!("batch ack answered {status}: {answer}");
    }
    Ok(Some(acks.len() as u64))
}

/// A Prometheus scraping `/metrics/prometheus` (which also runs the
/// recorder's upkeep); its answers are not counted as ops.
async fn scraper(http: reqwest::Client, base: String, shared: Arc<Shared>, every: Duration) {
    let url = format!("{base}/metrics/prometheus");
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(every).await;
        let answer = match http.get(&url).send().await {
            Ok(r) if r.status().is_success() => r.bytes().await.map(|_| ()).map_err(|e| format!("{e:#}")),
            Ok(r) => Err(format!("answered {}", r.status())),
            Err(e) => Err(format!("{e:#}")),
        };
        if let Err(e) = answer {
            shared.error("scrape", MIX.len() + 1, e);
        }
    }
}

async fn worker(
    w: usize,
    period: Duration,
    http: reqwest::Client,
    base: String,
    shared: Arc<Shared>,
    deadline: Instant,
) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    // Spread the workers' ticks over one period.
    let offset = period.mul_f64(w as f64 / SOAK_WORKERS as f64);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + offset, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tick.tick().await;
        if Instant::now() >= deadline || shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let (index, op) = Op::draw(&mut rng);
        let t = Instant::now();
        match op.run(&http, &base, w, &mut rng).await {
            Ok(Outcome::Wrong) => shared.error(op.name(), index, "wrong answer".into()),
            Err(e) => shared.error(op.name(), index, format!("{e:#}")),
            Ok(outcome) => {
                if outcome == Outcome::Empty {
                    shared.c.empty.fetch_add(1, Ordering::Relaxed);
                }
                let us = t.elapsed().as_micros() as u64;
                if let Ok(mut h) = shared.hist.lock() {
                    h.saturating_record(us.max(1));
                }
                shared.c.ops.fetch_add(1, Ordering::Relaxed);
                shared.c.per_op[index].fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

async fn pg_sample(db: &tokio_postgres::Client) -> anyhow::Result<(i64, i64)> {
    let row = db
        .query_one(
            "SELECT (SELECT count(*) FROM pg_stat_activity
                      WHERE datname = current_database() AND pid <> pg_backend_pid()),
                    (SELECT count(*) FROM queen.kv)",
            &[],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

pub async fn run(args: &BenchArgs, url: &str) -> anyhow::Result<()> {
    if args.rate <= 0.0 {
        bail!("--rate must be above 0");
    }
    let broker = super::start_broker(url, args.pool_size).await?;
    let pid = broker.child.id();
    let db = super::connect(url).await?;
    // The backlog of one partition per worker and the 10,000 KV keys of kv get.
    Workload::PopAck.prepare(&db, SOAK_WORKERS, "", args.soak_seconds).await?;
    Workload::KvGet { size: 0 }.prepare(&db, SOAK_WORKERS, "", args.soak_seconds).await?;
    let settings = super::server_settings(&db).await?;

    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let dir = args.out.join(format!("soak-{stamp}"));
    let limit = args.pool_size + 1;
    let seconds = args.soak_seconds;
    println!(
        "soak: {seconds} s at {} ops/s over {SOAK_WORKERS} workers + {} long pollers, broker pid {pid}, \
         pool {} (+1 LISTEN); a sample every {} s, warm-up {} s",
        args.rate,
        args.soak_long_polls,
        args.pool_size,
        SAMPLE.as_secs(),
        args.soak_warmup_seconds
    );

    let shared = Arc::new(Shared {
        c: Counters::default(),
        hist: Mutex::new(Histogram::new_with_bounds(1, 60_000_000, 3)?),
        first_errors: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
    });
    let http =
        reqwest::Client::builder().pool_max_idle_per_host(SOAK_WORKERS + args.soak_long_polls).build()?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let period = Duration::from_secs_f64(SOAK_WORKERS as f64 / args.rate);
    let mut tasks = Vec::new();
    for w in 0..SOAK_WORKERS {
        tasks.push(tokio::spawn(worker(
            w,
            period,
            http.clone(),
            broker.base.clone(),
            shared.clone(),
            deadline,
        )));
    }
    for _ in 0..args.soak_long_polls {
        tasks.push(tokio::spawn(long_poller(http.clone(), broker.base.clone(), shared.clone())));
    }
    if args.soak_scrape_seconds > 0 {
        let every = Duration::from_secs(args.soak_scrape_seconds);
        tasks.push(tokio::spawn(scraper(http.clone(), broker.base.clone(), shared.clone(), every)));
    }

    let mut samples: Vec<Sample> = Vec::new();
    let mut total_hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let mut last = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut last_t = started;
    let mut next = started + SAMPLE;
    println!(
        "{:>6} {:>8} {:>5} {:>6} {:>8} {:>7} {:>6} {:>7} {:>8}",
        "t s", "RSS MB", "fds", "pg", "kv rows", "ops/s", "errors", "p99 ms", "lp msgs"
    );
    while next <= deadline + Duration::from_millis(100) {
        tokio::time::sleep_until(next.into()).await;
        next += SAMPLE;
        let now = Instant::now();
        let hist = match shared.hist.lock() {
            Ok(mut h) => {
                let copy = h.clone();
                h.reset();
                copy
            }
            Err(_) => bail!("a worker panicked"),
        };
        total_hist.add(&hist)?;
        let c = &shared.c;
        let cur = (
            c.ops.load(Ordering::Relaxed),
            c.errors.load(Ordering::Relaxed),
            c.empty.load(Ordering::Relaxed),
            c.long_polls.load(Ordering::Relaxed),
            c.long_poll_messages.load(Ordering::Relaxed),
        );
        let (pg_connections, kv_rows) = match pg_sample(&db).await {
            Ok(v) => v,
            Err(e) => {
                eprintln!("sampling PostgreSQL: {e:#}");
                (-1, -1)
            }
        };
        let q = |p: f64| if hist.is_empty() { 0.0 } else { hist.value_at_quantile(p) as f64 / 1000.0 };
        let s = Sample {
            t_s: (now - started).as_secs_f64(),
            rss_mb: super::rss_mb(pid),
            fds: fds(pid),
            pg_connections,
            kv_rows,
            ops: cur.0 - last.0,
            ops_per_s: (cur.0 - last.0) as f64 / (now - last_t).as_secs_f64(),
            errors: cur.1 - last.1,
            empty_pops: cur.2 - last.2,
            long_polls: cur.3 - last.3,
            long_poll_messages: cur.4 - last.4,
            p50_ms: q(0.5),
            p99_ms: q(0.99),
            max_ms: if hist.is_empty() { 0.0 } else { hist.max() as f64 / 1000.0 },
        };
        println!(
            "{:>6.0} {:>8.1} {:>5} {:>6} {:>8} {:>7.0} {:>6} {:>7.2} {:>8}",
            s.t_s,
            s.rss_mb,
            s.fds,
            s.pg_connections,
            s.kv_rows,
            s.ops_per_s,
            s.errors,
            s.p99_ms,
            s.long_poll_messages
        );
        samples.push(s);
        last = cur;
        last_t = now;
    }
    // The load ran until the deadline; joining waits out the last long polls.
    let duration = started.elapsed().as_secs_f64().min(seconds as f64);
    shared.stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.context("a soak task panicked")?;
    }
    drop(db);
    drop(broker);

    let c = &shared.c;
    let after: Vec<&Sample> = {
        let a: Vec<&Sample> = samples.iter().filter(|s| s.t_s >= args.soak_warmup_seconds as f64).collect();
        if a.len() >= 2 {
            a
        } else {
            samples.iter().collect()
        }
    };
    if after.is_empty() {
        bail!("no samples: --soak-seconds is shorter than one sample ({} s)", SAMPLE.as_secs());
    }
    let fifth = (after.len() / 5).max(1);
    let rss: Vec<f64> = after.iter().map(|s| s.rss_mb).collect();
    let fd: Vec<f64> = after.iter().map(|s| s.fds as f64).collect();
    let (first_rss, last_rss) = (mean(&rss[..fifth]), mean(&rss[rss.len() - fifth..]));
    let errors = c.errors.load(Ordering::Relaxed);
    let ops = c.ops.load(Ordering::Relaxed);
    let pg_max = samples.iter().map(|s| s.pg_connections).max().unwrap_or(0);
    let pg_min = samples.iter().map(|s| s.pg_connections).filter(|&n| n >= 0).min().unwrap_or(0);
    let q =
        |p: f64| if total_hist.is_empty() { 0.0 } else { total_hist.value_at_quantile(p) as f64 / 1000.0 };
    let verdict = Verdict {
        duration_s: duration,
        warmup_s: args.soak_warmup_seconds,
        target_rate: args.rate,
        achieved_rate: ops as f64 / duration,
        ops,
        errors,
        empty_pops: c.empty.load(Ordering::Relaxed),
        long_polls: c.long_polls.load(Ordering::Relaxed),
        long_poll_messages: c.long_poll_messages.load(Ordering::Relaxed),
        rss_start_mb: samples.first().map(|s| s.rss_mb).unwrap_or(0.0),
        rss_end_mb: samples.last().map(|s| s.rss_mb).unwrap_or(0.0),
        rss_peak_mb: samples.iter().map(|s| s.rss_mb).fold(0.0, f64::max),
        rss_first_fifth_mb: first_rss,
        rss_last_fifth_mb: last_rss,
        rss_ratio_last_vs_first: if first_rss > 0.0 { last_rss / first_rss } else { 0.0 },
        rss_slope_mb_per_hour: slope(&after.iter().map(|s| (s.t_s, s.rss_mb)).collect::<Vec<_>>()) * 3600.0,
        fds_min: samples.iter().map(|s| s.fds).min().unwrap_or(0),
        fds_max: samples.iter().map(|s| s.fds).max().unwrap_or(0),
        fds_first_fifth: mean(&fd[..fifth]),
        fds_last_fifth: mean(&fd[fd.len() - fifth..]),
        pg_connections_min: pg_min,
        pg_connections_max: pg_max,
        pg_connection_limit: limit,
        p99_ms_overall: q(0.99),
        p999_ms_overall: q(0.999),
        pass: errors == 0 && pg_max <= limit as i64,
    };
    let per_op: Vec<Value> = MIX
        .iter()
        .enumerate()
        .map(|(i, (op, weight))| {
            serde_json::json!({"op": op.name(), "weight": weight,
                               "ops": c.per_op[i].load(Ordering::Relaxed),
                               "errors": c.errors_per_op[i].load(Ordering::Relaxed)})
        })
        .chain(std::iter::once(serde_json::json!({
            "op": "long poll (wait=true) + batch ack", "weight": null,
            "ops": c.long_polls.load(Ordering::Relaxed),
            "errors": c.errors_per_op[MIX.len()].load(Ordering::Relaxed)})))
        .chain((args.soak_scrape_seconds > 0).then(|| {
            serde_json::json!({
            "op": format!("GET /metrics/prometheus every {} s", args.soak_scrape_seconds), "weight": null,
            "ops": null, "errors": c.errors_per_op[MIX.len() + 1].load(Ordering::Relaxed)})
        }))
        .collect();
    let first_errors = shared.first_errors.lock().map(|v| v.clone()).unwrap_or_default();
    let config = serde_json::json!({
        "soak_seconds": seconds,
        "rate": args.rate,
        "workers": SOAK_WORKERS,
        "long_pollers": args.soak_long_polls,
        "long_poll_timeout_ms": LP_TIMEOUT_MS,
        "scrape_seconds": args.soak_scrape_seconds,
        "sample_seconds": SAMPLE.as_secs(),
        "broker_pool_size": args.pool_size,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "postgres": settings.get::<_, String>(0),
        "synchronous_commit": settings.get::<_, String>(1),
        "shared_buffers": settings.get::<_, String>(2),
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "command": std::env::args().collect::<Vec<_>>().join(" "),
    });

    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = serde_json::json!({
        "stamp": stamp, "config": config, "verdict": verdict, "per_op": per_op,
        "first_errors": first_errors, "samples": samples,
    });
    std::fs::write(dir.join("soak.json"), serde_json::to_string_pretty(&json)?)?;
    std::fs::write(dir.join("soak.md"), markdown(&verdict, &per_op, &samples, &config))?;
    match font() {
        Some(()) => chart(&dir.join("soak.png"), &samples, &verdict, args.pool_size)?,
        None => eprintln!("no TrueType font found (set QUEEN_BENCH_FONT): chart skipped"),
    }

    println!("\n{}", summary(&verdict));
    for e in &first_errors {
        println!("  error: {e}");
    }
    println!("results: {}", dir.display());
    if !verdict.pass {
        bail!(
            "soak FAILED: {errors} errors, at most {pg_max} PostgreSQL connections (limit {limit} = pool + LISTEN)"
        );
    }
    Ok(())
}

fn summary(v: &Verdict) -> String {
    format!(
        "verdict: {pass}\n\
         - {dur:.0} s at {ach:.1} ops/s (target {tgt}), {ops} ops, {err} errors, {lp} long polls ({lpm} messages)\n\
         - RSS start {rs:.1} MB, end {re:.1} MB, peak {rp:.1} MB; after the {wu} s warm-up, last fifth {rl:.1} MB vs \
         first fifth {rf:.1} MB = {ratio:.3}x (trend {slope:+.2} MB/hour)\n\
         - PostgreSQL connections {cmin}..{cmax} (limit {lim} = pool + LISTEN); broker fds {fmin}..{fmax} \
         (first fifth {ff:.1}, last fifth {fl:.1})\n\
         - latency p99 {p99:.2} ms, p999 {p999:.2} ms over the whole run",
        pass = if v.pass { "PASS" } else { "FAIL" },
        dur = v.duration_s,
        ach = v.achieved_rate,
        tgt = v.target_rate,
        ops = v.ops,
        err = v.errors,
        lp = v.long_polls,
        lpm = v.long_poll_messages,
        rs = v.rss_start_mb,
        re = v.rss_end_mb,
        rp = v.rss_peak_mb,
        wu = v.warmup_s,
        rl = v.rss_last_fifth_mb,
        rf = v.rss_first_fifth_mb,
        ratio = v.rss_ratio_last_vs_first,
        slope = v.rss_slope_mb_per_hour,
        cmin = v.pg_connections_min,
        cmax = v.pg_connections_max,
        lim = v.pg_connection_limit,
        fmin = v.fds_min,
        fmax = v.fds_max,
        ff = v.fds_first_fifth,
        fl = v.fds_last_fifth,
        p99 = v.p99_ms_overall,
        p999 = v.p999_ms_overall,
    )
}

fn markdown(v: &Verdict, per_op: &[Value], samples: &[Sample], config: &Value) -> String {
    let mut md = String::from("### Soak\n\n");
    md.push_str(&format!("`{}`\n\n", config["command"].as_str().unwrap_or("")));
    md.push_str(&format!(
        "{} build, {} cores, pool {}, {}\n\n",
        config["build"].as_str().unwrap_or(""),
        config["cores"],
        config["broker_pool_size"],
        config["postgres"].as_str().unwrap_or("")
    ));
    md.push_str(&summary(v));
    md.push_str("\n\n| op | weight | ops | errors |\n| --- | ---: | ---: | ---: |\n");
    for p in per_op {
        md.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            p["op"].as_str().unwrap_or(""),
            p["weight"].as_u64().map(|w| format!("{w}/20")).unwrap_or_else(|| "beside".into()),
            if p["ops"].is_null() { "n/a".to_owned() } else { p["ops"].to_string() },
            p["errors"]
        ));
    }
    md.push_str(
        "\n| t s | RSS MB | fds | pg connections | kv rows | ops/s | errors | empty pops | long-poll messages | p50 ms | p99 ms | max ms |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for s in samples {
        md.push_str(&format!(
            "| {:.0} | {:.1} | {} | {} | {} | {:.0} | {} | {} | {} | {:.2} | {:.2} | {:.2} |\n",
            s.t_s,
            s.rss_mb,
            s.fds,
            s.pg_connections,
            s.kv_rows,
            s.ops_per_s,
            s.errors,
            s.empty_pops,
            s.long_poll_messages,
            s.p50_ms,
            s.p99_ms,
            s.max_ms
        ));
    }
    md
}

type Line<'a> = (&'a str, Vec<(f64, f64)>, bool);

/// Four panels over time: RSS, connections and fds, throughput, latency.
fn chart(path: &Path, samples: &[Sample], v: &Verdict, pool: usize) -> anyhow::Result<()> {
    let e = |e: &dyn std::fmt::Display| anyhow::anyhow!("{e}");
    let root = BitMapBackend::new(path, (1400, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let title = format!(
        "soak: {:.0} s at {} ops/s, {} ops, {} errors; RSS last/first fifth {:.3}x, pg connections max {} (limit {})",
        v.duration_s,
        v.target_rate,
        v.ops,
        v.errors,
        v.rss_ratio_last_vs_first,
        v.pg_connections_max,
        pool + 1
    );
    let root = root.titled(&title, ("sans-serif", 20)).map_err(|x| e(&x))?;
    let areas = root.split_evenly((2, 2));
    let x_max = samples.iter().map(|s| s.t_s).fold(1.0, f64::max);
    let pts = |f: &dyn Fn(&Sample) -> f64| samples.iter().map(|s| (s.t_s, f(s))).collect::<Vec<_>>();
    let flat = |y: f64| vec![(0.0, y), (x_max, y)];
    let panels: [(&str, &str, Vec<Line<'_>>); 4] = [
        ("broker RSS", "MB", vec![("VmRSS MB", pts(&|s| s.rss_mb), false)]),
        (
            "broker fds and PostgreSQL connections",
            "count",
            vec![
                ("open fds", pts(&|s| s.fds as f64), false),
                ("pg connections", pts(&|s| s.pg_connections as f64), false),
                ("pool + LISTEN", flat((pool + 1) as f64), true),
            ],
        ),
        (
            "throughput per 5 s interval",
            "ops/s",
            vec![
                ("target", flat(v.target_rate), true),
                ("ops/s", pts(&|s| s.ops_per_s), false),
                ("errors/s", pts(&|s| s.errors as f64 / SAMPLE.as_secs_f64()), false),
            ],
        ),
        (
            "latency per 5 s interval (long polls excluded)",
            "ms",
            vec![("p99 ms", pts(&|s| s.p99_ms), false), ("p50 ms", pts(&|s| s.p50_ms), false)],
        ),
    ];
    for (area, (caption, y_desc, lines)) in areas.iter().zip(panels.iter()) {
        let y_max = lines.iter().flat_map(|l| l.1.iter().map(|p| p.1)).fold(0.0f64, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(*caption, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..(y_max * 1.2).max(1.0))
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc(*y_desc)
            .light_line_style(WHITE)
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|x| e(&x))?;
        for (i, (name, line, dashed)) in lines.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let legend =
                move |(x, y): (i32, i32)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3));
            if *dashed {
                chart
                    .draw_series(DashedLineSeries::new(line.iter().copied(), 8, 5, color.stroke_width(2)))
                    .map_err(|x| e(&x))?
                    .label(*name)
                    .legend(legend);
            } else {
                chart
                    .draw_series(LineSeries::new(line.iter().copied(), color.stroke_width(2)))
                    .map_err(|x| e(&x))?
                    .label(*name)
                    .legend(legend);
            }
        }
        // The end of the warm-up (excluded from the first-fifth comparison).
        let wu = v.warmup_s as f64;
        if wu > 0.0 && wu < x_max {
            chart
                .draw_series(DashedLineSeries::new(
                    [(wu, 0.0), (wu, (y_max * 1.2).max(1.0))],
                    4,
                    4,
                    BLACK.mix(0.5).stroke_width(1),
                ))
                .map_err(|x| e(&x))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
