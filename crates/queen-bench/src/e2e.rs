//! `queen bench --e2e`: producers and consumers at the same time for a
//! fixed duration (`--e2e-seconds`, 60), Queen's published shape:
//! `--e2e-producers` connections (4) each pushing `--e2e-batch` (100)
//! messages of 256 bytes per request, each with a transactionId of its own
//! (dedup on, as a producer with idempotency sends), `--e2e-consumers`
//! connections (12) each popping up to 1,000 messages of one consumer group
//! queue-wide and acking them in one batch. Reported: messages pushed and
//! consumed per second, the end-to-end latency of ours (from the producer's
//! timestamp in the payload to the pop's answer), the broker's and
//! PostgreSQL's CPU in cores, and whether the backlog grew (sampled from
//! the tables during the run); beside it plain SQL doing the same data work
//! with two concurrent pgbench processes at the same connection counts
//! (`bench/pgbench/plain/e2e-push.sql`, `e2e-pop.sql`).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use hdrhistogram::Histogram;
use serde_json::Value;

use crate::driver::{Driver, LeanConn};
use crate::workload::{add_partitions, completed_acks, exec, short, Rng, Spread};
use crate::{connect, rss_mb, run_pgbench, server_settings, start_broker, BenchArgs, Length};

/// The queue of every shape; the consumer group is `g`.
const QUEUE: &str = "bench-e2e";
/// Messages one pop asks for.
const POP_BATCH: u32 = 1000;
/// The long poll of our consumers, in milliseconds.
const POP_WAIT_MS: u64 = 1000;
/// Payload characters besides the timestamp: `{"t":<16 digits>,"pad":"..."}`
/// is 256 bytes.
const PAD: usize = 225;

/// Where the producers' messages go.
#[derive(Clone, Copy)]
struct Shape {
    /// Partitions of the queue (made in preparation).
    partitions: u32,
    /// Distinct partitions one push spreads over.
    lanes: u32,
    /// Each producer pushes to its own partition p<producer>.
    own: bool,
}

/// Partitions one spread push covers (at most the queue's).
const SPREAD_LANES: u32 = 100;

/// "200", "10k", "100k", "1m": a count of partitions.
fn count(s: &str) -> Option<u32> {
    let (digits, unit) = match s.strip_suffix('k') {
        Some(d) => (d, 1000),
        None => match s.strip_suffix('m') {
            Some(d) => (d, 1_000_000),
            None => (s, 1),
        },
    };
    digits.parse::<u32>().ok()?.checked_mul(unit).filter(|&n| n > 0)
}

/// The shapes of `--e2e`: `own`, `rand<P>` (each push into one random
/// partition of P), `spread<P>` (each push over 100 distinct ones of P),
/// P as 200, 10k, 100k...; `all` is own, rand200, spread200, rand10k,
/// rand100k. `partitions` (`--e2e-partitions`) replaces the P of every
/// rand and spread shape.
fn shapes(list: &str, producers: usize, partitions: Option<u32>) -> anyhow::Result<Vec<Shape>> {
    let list = if list.trim() == "all" { "own,rand200,spread200,rand10k,rand100k" } else { list };
    let usage = "own, rand<P>, spread<P> (P as 200, 10k, 100k), all";
    if partitions == Some(0) {
        bail!("--e2e-partitions must be at least 1");
    }
    list.split(',')
        .map(|s| {
            let s = s.trim();
            if s == "own" {
                return Ok(Shape { partitions: producers.max(1) as u32, lanes: 1, own: true });
            }
            let (spread, p) = match (s.strip_prefix("rand"), s.strip_prefix("spread")) {
                (Some(p), _) => (false, p),
                (_, Some(p)) => (true, p),
                _ => bail!("unknown e2e shape {s} ({usage})"),
            };
            let Some(p) = partitions.or_else(|| count(p)) else { bail!("unknown e2e shape {s} ({usage})") };
            if spread && !only_twos_and_fives(p) {
                // The spread draw covers distinct partitions only then
                // (workload::Spread).
                bail!("{s}: a spread shape needs partitions whose only prime factors are 2 and 5, not {p}");
            }
            Ok(Shape { partitions: p, lanes: if spread { SPREAD_LANES.min(p) } else { 1 }, own: false })
        })
        .collect()
}

fn only_twos_and_fives(mut n: u32) -> bool {
    for f in [2, 5] {
        while n > 0 && n.is_multiple_of(f) {
            n /= f;
        }
    }
    n == 1
}

/// One side's figures.
#[derive(serde::Serialize, Clone, Default)]
struct Side {
    pushed_per_s: f64,
    consumed_per_s: f64,
    /// Pushed but not consumed at the end.
    backlog: i64,
    /// Pushed minus consumed as the tables said during the run: (seconds
    /// since the side started, messages).
    backlog_samples: Vec<(f64, i64)>,
    /// The least-squares slope of the samples after the first third of
    /// the run, in messages per second, and what it says: `grew` above 2%
    /// of the pushed rate (and 100 msg/s), `shrank` below minus that,
    /// else `steady`.
    backlog_slope_per_s: Option<f64>,
    backlog_trend: String,
    /// CPU of every PostgreSQL process over the run, in cores (CPU seconds
    /// per second of the run).
    pg_cpu_cores: Option<f64>,
    /// Requests that failed (ours only).
    errors: u64,
    /// Pops that found nothing (ours: 204 after the long poll).
    empty_pops: u64,
    /// Pushes and pops done.
    push_requests: u64,
    pop_requests: u64,
}

#[derive(serde::Serialize)]
struct Row {
    shape: String,
    partitions: u32,
    partitions_per_push: u32,
    producers: usize,
    consumers: usize,
    batch: u32,
    seconds: u64,
    ours: Side,
    plain: Option<Side>,
    plain_failed: bool,
    ratio_consumed: Option<f64>,
    ratio_pushed: Option<f64>,
    ours_latency_ms: Option<[f64; 3]>,
    /// The broker process's CPU over our side's run, in cores.
    broker_cpu_cores: Option<f64>,
    broker_rss_peak_mb: f64,
}

const HEADER: &str = "| shape | ours pushed/s | ours consumed/s | plain pushed/s | plain consumed/s | ratio (consumed ours/plain) | ratio (pushed ours/plain) | ours e2e p50 / p99 / max ms | backlog at end ours / plain | backlog trend ours / plain (slope msg/s) | broker CPU cores | PostgreSQL CPU cores ours / plain | broker RSS peak MB |\n\
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |";

/// "steady (+12/s)", "grew (+2100/s)", "n/a".
fn trend_md(side: &Side) -> String {
    match side.backlog_slope_per_s {
        Some(slope) => format!("{} ({slope:+.0}/s)", side.backlog_trend),
        None => "n/a".into(),
    }
}

fn row_md(r: &Row) -> String {
    let opt = |v: Option<f64>, d: usize| v.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.d$}"));
    let plain = r.plain.as_ref();
    let mut shape = r.shape.clone();
    if r.ours.errors > 0 {
        shape.push_str(&format!(" ({} ERRORS)", r.ours.errors));
    }
    if r.plain_failed {
        shape.push_str(" (plain pgbench failed)");
    }
    format!(
        "| {shape} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} / {} | {} / {} | {} | {} / {} | {:.1} |",
        r.ours.pushed_per_s,
        r.ours.consumed_per_s,
        opt(plain.map(|p| p.pushed_per_s), 0),
        opt(plain.map(|p| p.consumed_per_s), 0),
        opt(r.ratio_consumed, 2),
        opt(r.ratio_pushed, 2),
        r.ours_latency_ms.map_or_else(|| "n/a".into(), |[a, b, c]| format!("{a:.0} / {b:.0} / {c:.0}")),
        r.ours.backlog,
        plain.map_or_else(|| "n/a".into(), |p| p.backlog.to_string()),
        trend_md(&r.ours),
        plain.map_or_else(|| "n/a".into(), trend_md),
        opt(r.broker_cpu_cores, 2),
        opt(r.ours.pg_cpu_cores, 2),
        opt(plain.and_then(|p| p.pg_cpu_cores), 2),
        r.broker_rss_peak_mb,
    )
}

impl Shape {
    /// own, rand200, spread10k...
    fn key(self) -> String {
        match self {
            Shape { own: true, .. } => "own".into(),
            Shape { lanes: 1, partitions, .. } => format!("rand{}", short(partitions)),
            Shape { partitions, .. } => format!("spread{}", short(partitions)),
        }
    }

    fn name(self) -> String {
        let what = match self {
            Shape { own: true, .. } => "a partition per producer".to_owned(),
            Shape { lanes: 1, .. } => {
                format!("{} partitions, each push into one random one", self.partitions)
            }
            _ => format!("{} partitions, each push over {}", self.partitions, self.lanes),
        };
        format!("{} ({what})", self.key())
    }
}

/// Empties the queue tables and makes the queue, its group `g` and its
/// partitions, each with the group's cursor at 0, in set-based statements.
/// The cursor trigger gives every new cursor a ready lane, drained or not;
/// those rows are removed, as the first pop to visit each would remove it,
/// so both sides start from the state a long-running queue with drained
/// partitions is in (no ready row of an empty lane) rather than spending
/// the start of the run on tens of thousands of empty lanes (ours removes
/// them on its walks, the plain consumer never claims an empty lane).
async fn prepare(db: &tokio_postgres::Client, shape: Shape) -> anyhow::Result<()> {
    exec(
        db,
        "TRUNCATE queen.messages, queen.cursors, queen.partitions, queen.queues, queen.ready_lanes,
                  queen.consumer_groups, queen.dead_letters CASCADE",
    )
    .await?;
    exec(
        db,
        &format!(
            "SELECT queen.register_group('{QUEUE}', 'g', NULL, NULL);
             INSERT INTO queen.queues (name) VALUES ('{QUEUE}') ON CONFLICT DO NOTHING;"
        ),
    )
    .await?;
    add_partitions(db, QUEUE, 0, shape.partitions).await?;
    exec(db, "DELETE FROM queen.ready_lanes; ANALYZE queen.ready_lanes; ANALYZE queen.messages").await
}

/// Pushed and consumed messages as the tables say (offsets start at 0).
async fn totals(db: &tokio_postgres::Client) -> anyhow::Result<(i64, i64)> {
    let row = db
        .query_one(
            "SELECT (SELECT coalesce(sum(p.next_seq), 0)::bigint FROM queen.partitions p
                       JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1),
                    (SELECT coalesce(sum(c.next_seq), 0)::bigint FROM queen.cursors c
                       JOIN queen.queues q ON q.id = c.queue_id WHERE q.name = $1 AND c.consumer_group = 'g')",
            &[&QUEUE],
        )
        .await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// CPU time of every PostgreSQL process of this machine, in seconds: the
/// sum of utime, stime, cutime and cstime of each process named `postgres`
/// in /proc (fields 14 to 17 of `stat`, in ticks of 1/100 s, USER_HZ). The
/// postmaster's cutime and cstime hold its children that have exited, so a
/// backend that ends during the run (pgbench's, at its end) still counts.
/// Another user of the same server would count too. `None` off Linux.
fn pg_cpu_s() -> Option<f64> {
    let mut ticks = 0u64;
    let mut found = false;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        if !entry.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if &stat[open + 1..close] != "postgres" {
            continue;
        }
        // The fields after the name, from field 3 (state) on.
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        for n in 14..=17 {
            ticks += fields.get(n - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
        found = true;
    }
    found.then_some(ticks as f64 / 100.0)
}

/// CPU seconds per second of `secs`, between two readings.
fn cores(before: Option<f64>, after: Option<f64>, secs: f64) -> Option<f64> {
    before.zip(after).map(|(a, b)| (b - a).max(0.0) / secs.max(1e-9))
}

/// Seconds between two backlog samples: 12 samples over the run, at most
/// one every 5 s and at least one a second.
fn sample_every(seconds: u64) -> Duration {
    Duration::from_secs((seconds / 12).clamp(1, 5))
}

/// Slope (least squares, messages per second) of the backlog samples taken
/// after the first third of the run, and the verdict: `grew` when it rises
/// faster than 2% of the pushed rate and 100 msg/s, `shrank` when it falls
/// as fast, else `steady`. The first third is the warm-up (lanes fill, the
/// long polls settle); a consumer that keeps up holds a backlog of up to
/// its pops in flight, which rises and falls but does not grow.
fn trend(samples: &[(f64, i64)], seconds: u64, pushed_per_s: f64) -> (Option<f64>, String) {
    let late: Vec<(f64, f64)> =
        samples.iter().filter(|(t, _)| *t >= seconds as f64 / 3.0).map(|&(t, b)| (t, b as f64)).collect();
    if late.len() < 2 {
        return (None, "n/a".into());
    }
    let n = late.len() as f64;
    let (mt, mb) = (late.iter().map(|p| p.0).sum::<f64>() / n, late.iter().map(|p| p.1).sum::<f64>() / n);
    let var: f64 = late.iter().map(|p| (p.0 - mt).powi(2)).sum();
    if var <= 0.0 {
        return (None, "n/a".into());
    }
    let slope = late.iter().map(|p| (p.0 - mt) * (p.1 - mb)).sum::<f64>() / var;
    let limit = (0.02 * pushed_per_s).max(100.0);
    let verdict = if slope > limit {
        "grew"
    } else if slope < -limit {
        "shrank"
    } else {
        "steady"
    };
    (Some(slope), verdict.into())
}

/// Counters shared by our clients; only work finished before the deadline counts.
#[derive(Default)]
struct Counts {
    pushed: AtomicU64,
    consumed: AtomicU64,
    pushes: AtomicU64,
    pops: AtomicU64,
    empty: AtomicU64,
    errors: AtomicU64,
}

async fn producer(
    mut http: LeanConn,
    shape: Shape,
    batch: u32,
    me: usize,
    stop: Arc<AtomicBool>,
    deadline: Instant,
    counts: Arc<Counts>,
) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (me as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let pad = "x".repeat(PAD);
    while !stop.load(Ordering::Relaxed) {
        let spread = Spread::draw(&mut rng, shape.partitions);
        let t = now_us();
        let items: Vec<String> = (0..u64::from(batch))
            .map(|i| {
                let p = if shape.own { me as u64 } else { spread.partition(i % u64::from(shape.lanes)) };
                let tx = transaction_id(&mut rng);
                format!(
                    r#"{{"queue":"{QUEUE}","partition":"p{p}","transactionId":"{tx}","payload":{{"t":{t},"pad":"{pad}"}}}}"#
                )
            })
            .collect();
        let answer = http.post("/api/v1/push", format!(r#"{{"items":[{}]}}"#, items.join(","))).await;
        let ok = matches!(answer, Ok((status, _)) if (200..300).contains(&status));
        if Instant::now() > deadline {
            break;
        }
        if ok {
            counts.pushed.fetch_add(u64::from(batch), Ordering::Relaxed);
            counts.pushes.fetch_add(1, Ordering::Relaxed);
        } else {
            tracing::warn!("e2e push: {answer:?}");
            counts.errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// A random version-4 UUID as text: the transactionId a producer with
/// idempotency gives each message (the broker then looks it up in the
/// partition's dedup window before inserting).
fn transaction_id(rng: &mut Rng) -> String {
    let (a, b) = (rng.next(), rng.next());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

async fn consumer(
    mut http: LeanConn,
    stop: Arc<AtomicBool>,
    deadline: Instant,
    counts: Arc<Counts>,
) -> anyhow::Result<Histogram<u64>> {
    // Microseconds.
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
    let url = format!(
        "/api/v1/pop/queue/{QUEUE}?batch={POP_BATCH}&consumerGroup=g&subscriptionMode=all&wait=true&timeout={POP_WAIT_MS}"
    );
    while !stop.load(Ordering::Relaxed) {
        let popped = match http.get(&url).await {
            Ok((200, body)) => body,
            Ok((204, _)) => {
                counts.empty.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            other => {
                tracing::warn!("e2e pop: {other:?}");
                counts.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let received = now_us();
        let Ok(v) = serde_json::from_slice::<Value>(&popped) else {
            counts.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let acks = completed_acks(&v);
        let body = serde_json::json!({"acknowledgments": acks, "consumerGroup": "g"});
        let acked = http.post("/api/v1/ack/batch", body.to_string()).await;
        if Instant::now() > deadline {
            break;
        }
        let ok = matches!(&acked, Ok((status, b)) if (200..300).contains(status) && !refused(b));
        if !ok {
            tracing::warn!("e2e ack: {acked:?}");
            counts.errors.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        counts.consumed.fetch_add(acks.len() as u64, Ordering::Relaxed);
        counts.pops.fetch_add(1, Ordering::Relaxed);
        for m in v["messages"].as_array().into_iter().flatten() {
            if let Some(t) = m["data"]["t"].as_i64() {
                hist.saturating_record(received.saturating_sub(t).max(0) as u64);
            }
        }
    }
    Ok(hist)
}

fn refused(body: &[u8]) -> bool {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(items)) => items.iter().any(|i| i["success"] == Value::Bool(false)),
        Ok(v) => v["success"] == Value::Bool(false),
        Err(_) => true,
    }
}

/// What our side measured besides its [`Side`].
struct OursExtra {
    latency: Option<[f64; 3]>,
    rss_peak: f64,
    broker_cpu_cores: Option<f64>,
}

/// Our side: producers and consumers on two client threads (as pgbench's
/// `-j 2`), each a current-thread event loop over its share. The broker's
/// and PostgreSQL's CPU are read at the start and at the deadline, the
/// backlog every [`sample_every`] (and once more when the clients have
/// stopped).
async fn run_ours(
    db: &tokio_postgres::Client,
    base: &str,
    shape: Shape,
    args: &BenchArgs,
    pid: u32,
) -> anyhow::Result<(Side, OursExtra)> {
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let seconds = args.e2e_seconds;
    let (broker_cpu_before, pg_cpu_before) = (crate::cpu_ns(pid), pg_cpu_s());
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let threads = 2;
    let mut generators = Vec::new();
    let total = args.e2e_producers + args.e2e_consumers;
    for t in 0..threads {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let mut producers = Vec::new();
        let mut consumers = Vec::new();
        for c in (t..total).step_by(threads) {
            let http = LeanConn::new(base)?;
            let (stop, counts) = (stop.clone(), counts.clone());
            if c < args.e2e_producers {
                producers.push(runtime.spawn(producer(
                    http,
                    shape,
                    args.e2e_batch,
                    c,
                    stop,
                    deadline,
                    counts,
                )));
            } else {
                consumers.push(runtime.spawn(consumer(http, stop, deadline, counts)));
            }
        }
        generators.push(std::thread::Builder::new().name(format!("bench-e2e-{t}")).spawn(move || {
            runtime.block_on(async move {
                let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
                for p in producers {
                    p.await?;
                }
                for c in consumers {
                    hist.add(c.await??)?;
                }
                Ok::<_, anyhow::Error>(hist)
            })
        })?);
    }
    let mut rss_peak: f64 = 0.0;
    let mut samples = Vec::new();
    let every = sample_every(seconds);
    let mut next_sample = started + every;
    while Instant::now() < deadline {
        rss_peak = rss_peak.max(rss_mb(pid));
        if Instant::now() >= next_sample {
            let (pushed, consumed) = totals(db).await?;
            samples.push((started.elapsed().as_secs_f64(), pushed - consumed));
            next_sample += every;
        }
        tokio::time::sleep(
            Duration::from_millis(200).min(deadline.saturating_duration_since(Instant::now())),
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    let secs = seconds.max(1) as f64;
    let broker_cpu_cores = crate::cpu_ns(pid)
        .zip(broker_cpu_before)
        .map(|(after, before)| after.saturating_sub(before) as f64 / 1e9 / secs);
    let pg_cpu_cores = cores(pg_cpu_before, pg_cpu_s(), secs);
    let hist = crate::join_clients(generators, 3_600_000_000).await?;
    rss_peak = rss_peak.max(rss_mb(pid));
    let (pushed_rows, consumed_rows) = totals(db).await?;
    samples.push((started.elapsed().as_secs_f64(), pushed_rows - consumed_rows));
    let pushed = counts.pushed.load(Ordering::Relaxed);
    let consumed = counts.consumed.load(Ordering::Relaxed);
    let (backlog_slope_per_s, backlog_trend) = trend(&samples, seconds, pushed as f64 / secs);
    let side = Side {
        pushed_per_s: pushed as f64 / secs,
        consumed_per_s: consumed as f64 / secs,
        backlog: pushed_rows - consumed_rows,
        backlog_samples: samples,
        backlog_slope_per_s,
        backlog_trend,
        pg_cpu_cores,
        errors: counts.errors.load(Ordering::Relaxed),
        empty_pops: counts.empty.load(Ordering::Relaxed),
        push_requests: counts.pushes.load(Ordering::Relaxed),
        pop_requests: counts.pops.load(Ordering::Relaxed),
    };
    let q = |p: f64| hist.value_at_quantile(p) as f64 / 1000.0;
    let latency = (!hist.is_empty()).then(|| [q(0.5), q(0.99), hist.max() as f64 / 1000.0]);
    Ok((side, OursExtra { latency, rss_peak, broker_cpu_cores }))
}

/// Plain SQL: the producer and the consumer scripts as two pgbench
/// processes started together, for the same seconds. Messages counted from
/// the tables afterwards, over the longer process's wall time; the backlog
/// sampled from the tables meanwhile, and PostgreSQL's CPU read before
/// they start and after both have ended (their backends' CPU included).
async fn run_plain(
    db: &tokio_postgres::Client,
    url: &str,
    shape: Shape,
    args: &BenchArgs,
) -> anyhow::Result<Side> {
    let scripts = |f: &str| -> Vec<(PathBuf, u64)> { vec![(args.scripts.join("plain").join(f), 1)] };
    let push_defines = vec![
        ("batch".to_owned(), args.e2e_batch.to_string()),
        ("parts".to_owned(), shape.partitions.to_string()),
        ("lanes".to_owned(), shape.lanes.to_string()),
        ("own".to_owned(), u8::from(shape.own).to_string()),
    ];
    let pop_defines = vec![("batch".to_owned(), POP_BATCH.to_string())];
    let length = Length::Seconds(args.e2e_seconds);
    let (push_scripts, pop_scripts) = (scripts("e2e-push.sql"), scripts("e2e-pop.sql"));
    let (producers, consumers) = (args.e2e_producers, args.e2e_consumers);
    let (u1, u2) = (url.to_owned(), url.to_owned());
    let pg_cpu_before = pg_cpu_s();
    let started = Instant::now();
    let push = tokio::task::spawn_blocking(move || {
        let r = run_pgbench(&push_scripts, &push_defines, &u1, producers, length);
        (r, started.elapsed())
    });
    let pop = tokio::task::spawn_blocking(move || {
        let r = run_pgbench(&pop_scripts, &pop_defines, &u2, consumers, length);
        (r, started.elapsed())
    });
    let mut samples = Vec::new();
    let every = sample_every(args.e2e_seconds);
    let mut next_sample = started + every;
    while !(push.is_finished() && pop.is_finished()) {
        if Instant::now() >= next_sample {
            let (pushed, consumed) = totals(db).await?;
            samples.push((started.elapsed().as_secs_f64(), pushed - consumed));
            next_sample += every;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ((push, t1), (pop, t2)) = (push.await?, pop.await?);
    let pg_cpu_after = pg_cpu_s();
    let push = push.context("plain producers")?;
    let pop = pop.context("plain consumers")?;
    let secs = t1.max(t2).as_secs_f64();
    let (pushed, consumed) = totals(db).await?;
    samples.push((started.elapsed().as_secs_f64(), pushed - consumed));
    let (backlog_slope_per_s, backlog_trend) = trend(&samples, args.e2e_seconds, pushed as f64 / secs);
    Ok(Side {
        pushed_per_s: pushed as f64 / secs,
        consumed_per_s: consumed as f64 / secs,
        backlog: pushed - consumed,
        backlog_samples: samples,
        backlog_slope_per_s,
        backlog_trend,
        pg_cpu_cores: cores(pg_cpu_before, pg_cpu_after, secs),
        errors: 0,
        empty_pops: 0,
        push_requests: (push.tps * secs) as u64,
        pop_requests: (pop.tps * secs) as u64,
    })
}

/// Runs the end-to-end shapes of `--e2e`; see the module documentation.
pub(crate) async fn run(args: &BenchArgs, url: &str) -> anyhow::Result<()> {
    let shapes = shapes(&args.e2e, args.e2e_producers, args.e2e_partitions)?;
    let db = connect(url).await?;
    let settings = server_settings(&db).await?;
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let dir = args.out.join(format!("e2e-{stamp}"));
    println!(
        "end to end: {} producers x {} messages of 256 B per push (a transactionId each), {} consumers \
         popping up to {POP_BATCH} (group g, queue-wide) and acking them, {} s per side\n\n{HEADER}",
        args.e2e_producers, args.e2e_batch, args.e2e_consumers, args.e2e_seconds
    );
    let mut rows = Vec::new();
    for shape in shapes {
        // A fresh broker per shape, so each RSS peak is the shape's own.
        // The broker first: its start migrates a fresh database.
        let mut broker = start_broker(url, args.pool_size).await?;
        prepare(&db, shape).await?;
        let (ours, extra) = run_ours(&db, &broker.base, shape, args, broker.child.id()).await?;
        broker.stop();

        prepare(&db, shape).await?;
        let (plain, plain_failed) = match run_plain(&db, url, shape, args).await {
            Ok(p) => (Some(p), false),
            Err(e) => {
                eprintln!("{} (plain): {e:#}", shape.key());
                (None, true)
            }
        };
        let row = Row {
            shape: shape.name(),
            partitions: shape.partitions,
            partitions_per_push: shape.lanes,
            producers: args.e2e_producers,
            consumers: args.e2e_consumers,
            batch: args.e2e_batch,
            seconds: args.e2e_seconds,
            ratio_consumed: plain.as_ref().map(|p| ours.consumed_per_s / p.consumed_per_s.max(1e-9)),
            ratio_pushed: plain.as_ref().map(|p| ours.pushed_per_s / p.pushed_per_s.max(1e-9)),
            ours,
            plain,
            plain_failed,
            ours_latency_ms: extra.latency,
            broker_cpu_cores: extra.broker_cpu_cores,
            broker_rss_peak_mb: extra.rss_peak,
        };
        println!("{}", row_md(&row));
        rows.push(row);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let config = serde_json::json!({
        "seconds": args.e2e_seconds,
        "producers": args.e2e_producers,
        "consumers": args.e2e_consumers,
        "batch": args.e2e_batch,
        "pop_batch": POP_BATCH,
        "pop_wait_ms": POP_WAIT_MS,
        "payload_bytes": 256,
        "transaction_id_per_message": true,
        "partitions_override": args.e2e_partitions,
        "backlog_sample_seconds": sample_every(args.e2e_seconds).as_secs(),
        "broker_pool_size": args.pool_size,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "postgres": settings.get::<_, String>(0),
        "synchronous_commit": settings.get::<_, String>(1),
        "shared_buffers": settings.get::<_, String>(2),
    });
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&serde_json::json!({"stamp": stamp, "config": config, "rows": rows}))?,
    )?;
    let mut md = format!(
        "### End to end: {} producers x {} messages per push (a transactionId each), {} consumers (pop up to {POP_BATCH}, ack batch), {} s per side\n\n{HEADER}\n",
        args.e2e_producers, args.e2e_batch, args.e2e_consumers, args.e2e_seconds
    );
    for r in &rows {
        md.push_str(&row_md(r));
        md.push('\n');
    }
    std::fs::write(dir.join("results.md"), md)?;
    println!("\nresults: {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{count, shapes};

    #[test]
    fn shapes_parse_counts_and_the_override() {
        assert_eq!(count("200"), Some(200));
        assert_eq!(count("10k"), Some(10_000));
        assert_eq!(count("1m"), Some(1_000_000));
        assert_eq!(count("0"), None);
        assert_eq!(count("x"), None);
        let keys = |list: &str, over: Option<u32>| -> Vec<String> {
            shapes(list, 4, over).map(|v| v.into_iter().map(|s| s.key()).collect()).unwrap_or_default()
        };
        assert_eq!(keys("all", None), ["own", "rand200", "spread200", "rand10k", "rand100k"]);
        assert_eq!(keys("spread10k,rand1k", None), ["spread10k", "rand1k"]);
        assert_eq!(keys("own,rand200,spread200", Some(1000)), ["own", "rand1k", "spread1k"]);
        let s = shapes("spread50", 4, None).unwrap_or_default();
        assert_eq!((s[0].partitions, s[0].lanes), (50, 50));
        assert!(shapes("spread300", 4, None).is_err(), "300 has a factor 3");
        assert!(shapes("rand300", 4, None).is_ok());
        assert!(shapes("randx", 4, None).is_err());
        assert!(shapes("fifo", 4, None).is_err());
        assert!(shapes("rand200", 4, Some(0)).is_err());
    }
}
