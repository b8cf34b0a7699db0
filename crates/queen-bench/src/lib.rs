//! `queen bench`: our HTTP throughput and latency beside pgbench on the same
//! machine in the same run, as ratios. The machine is noisy, so only ratios
//! taken in one run mean anything.
//!
//! Each point runs three sides, each on freshly prepared data: ours (N
//! concurrent HTTP clients against `queen serve`), the **twin** (`pgbench -c
//! N` calling our SQL functions, `bench/pgbench/*.sql`: what our SQL costs)
//! and the **plain** row (`pgbench -c N` doing the same data work with the
//! least SQL a hand-written client would send, straight on our tables,
//! `bench/pgbench/plain/*.sql`: the ceiling). ours/plain is the headline.
//!
//! The bench creates its own database and starts `queen serve` on it as a
//! child process: the binary is `std::env::current_exe()`, so [`run`] is
//! meant to be called from the `queen` binary (`queen bench`). `--scaling`
//! adds the runs that show how cost grows with the size of the data
//! (namespace, partitions, consumer groups, value size, partitions a push
//! creates or spreads over). Results go to
//! `bench/results/<unix time>/` as JSON, markdown and PNG. `--soak-seconds N`
//! runs the soak instead (see `soak`), `--e2e SHAPES` the end-to-end
//! producers-and-consumers run (see `e2e`), `--operator-pages` the
//! dashboard's pages on a large deployment's data (see `operator_pages`).

#![deny(clippy::unwrap_used, clippy::expect_used)]
#![warn(missing_docs)]

mod driver;
mod e2e;
mod operator_pages;
mod report;
mod soak;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use hdrhistogram::Histogram;
use tokio_postgres::NoTls;

use report::{BatchLine, Point, Report};
use workload::{Outcome, Rng, Workload};

/// The flags of `queen bench`.
#[derive(Args)]
pub struct BenchArgs {
    /// An admin URL of the PostgreSQL to bench on; the bench creates (and drops) its own database.
    #[arg(
        long,
        env = "QUEEN_BENCH_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    database_url: String,
    /// Workloads of the concurrency sweep, comma separated: push-1, push-10, push-100,
    /// push-1-rand1k, push-1-rand100k (1 message to a random one of 1,000 / 100,000 existing
    /// partitions), push-100-spread100, push-1000-spread1000 (100 / 1,000 messages over as many
    /// distinct partitions of 1,000), pop-ack, pop-any, pop10-rand1k (pop up to 10 of a random one of
    /// 1,000 filled partitions, ack them in one batch), fanout, once-ack, kv-get, kv-put,
    /// kv-put-if-absent, kv-incr, kv-prefix, mixed; `none` for no sweep.
    #[arg(
        long,
        default_value = "push-1,push-10,push-100,push-1-rand1k,push-1-rand100k,push-100-spread100,push-1000-spread1000,pop-ack,pop10-rand1k,fanout,once-ack,kv-get,kv-put,kv-put-if-absent,kv-incr,kv-prefix,mixed"
    )]
    workloads: String,
    /// Concurrent clients of the sweep, comma separated.
    #[arg(long, default_value = "1,16,64,256")]
    clients: String,
    /// Also run the scaling series (see --scaling-series).
    #[arg(long)]
    scaling: bool,
    /// Scaling series, comma separated: prefix (getPrefix page vs namespace size), pop (pop vs
    /// partitions), pop-sweep (pop of up to 10 + ack, a random named partition and queue-wide,
    /// at 1k / 10k / 100k partitions), push-groups (push vs consumer groups), kv-value (KV vs value size),
    /// push-create (a push that creates a partition, at 1k / 10k / 100k partitions, without and
    /// with a consumer group; one client), push-curve (one push of N items over P partitions,
    /// N in 100, 1600, 10000 and P in 1, 100, 1000, N; one client).
    #[arg(long, default_value = "prefix,pop,pop-sweep,push-groups,kv-value,push-create,push-curve")]
    scaling_series: String,
    /// Concurrent clients of each scaling point, comma separated.
    #[arg(long, default_value = "1,16")]
    scaling_clients: String,
    /// Seconds per measurement (each side of each point).
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Directory of the pgbench scripts.
    #[arg(long, default_value = "bench/pgbench")]
    scripts: PathBuf,
    /// Where to write the results (a directory per run).
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Broker pool size.
    #[arg(long, default_value_t = 16)]
    pool_size: usize,
    /// Run the soak instead of the sweep: this many seconds of a steady mixed load, sampling the
    /// broker's RSS, fds and PostgreSQL connections (results in <out>/soak-<unix time>/).
    #[arg(long, default_value_t = 0)]
    soak_seconds: u64,
    /// Soak: total rate of the mixed ops, per second.
    #[arg(long, default_value_t = 300.0)]
    rate: f64,
    /// Soak: the first seconds left out of the RSS comparison (first fifth vs last fifth).
    #[arg(long, default_value_t = 60)]
    soak_warmup_seconds: u64,
    /// Soak: long polls (wait=true) held at all times beside the rate-limited ops.
    #[arg(long, default_value_t = 4)]
    soak_long_polls: usize,
    /// Soak: scrape /metrics/prometheus every this many seconds, as a Prometheus would (0: never).
    #[arg(long, default_value_t = 0)]
    soak_scrape_seconds: u64,
    /// After the sweep, schedule this many timers due at one instant and report the fire lag
    /// (p50, p99, max from due time to the fired message's commit); 0 skips it.
    #[arg(long, default_value_t = 10_000)]
    timers: usize,
    /// After the sweep, run push + pop + ack round trips for this many seconds on an ephemeral
    /// queue, then on a durable one, 16 clients each, and report both rates; 0 skips it.
    #[arg(long, default_value_t = 4)]
    ephemeral_seconds: u64,
    /// Run the end-to-end shapes instead of the sweep: producers and consumers at once, ours
    /// beside plain SQL (two pgbench processes), comma separated: own (a partition per
    /// producer), rand<P> (P partitions, each push into one random one: rand200, rand10k,
    /// rand100k), spread<P> (P partitions, each push over 100 of them: spread200, spread10k; P
    /// with no prime factor but 2 and 5); `all` for own, rand200, spread200, rand10k, rand100k.
    /// Results in <out>/e2e-<unix time>/.
    #[arg(long, default_value = "")]
    e2e: String,
    /// End-to-end: seconds per side of each shape.
    #[arg(long, default_value_t = 60)]
    e2e_seconds: u64,
    /// End-to-end: producer connections (each request pushes --e2e-batch messages).
    #[arg(long, default_value_t = 4)]
    e2e_producers: usize,
    /// End-to-end: consumer connections (each pops up to 1,000 messages of one consumer group, then acks them).
    #[arg(long, default_value_t = 12)]
    e2e_consumers: usize,
    /// End-to-end: messages per push request.
    #[arg(long, default_value_t = 100)]
    e2e_batch: u32,
    /// End-to-end: partitions of every rand and spread shape, in place of the count in its name
    /// (`--e2e rand200,spread200 --e2e-partitions 1000` runs rand1k and spread1k).
    #[arg(long)]
    e2e_partitions: Option<u32>,
    /// Run the operator pages instead of the sweep: the dashboard's pages timed on a large
    /// deployment's data (--operator-dataset). Results in <out>/operator-pages-<unix time>/.
    #[arg(long)]
    operator_pages: bool,
    /// The data set of --operator-pages (SQL run on the migrated bench database).
    #[arg(long, default_value = "bench/operator-pages/dataset.sql")]
    operator_dataset: PathBuf,
}

/// One scaling series: the workloads in size order and what the size is.
struct Series {
    key: &'static str,
    title: &'static str,
    unit: &'static str,
    /// Cost is read from latency (p50) or from throughput.
    latency: bool,
    points: Vec<(Workload, u32)>,
    /// The clients of each point, when the series fixes them (else
    /// --scaling-clients): a latency of one client, one request at a time.
    clients: Option<&'static [usize]>,
    /// At most this many ops per side of a point (see [`Run::measure`]).
    max_ops: Option<u64>,
}

/// Creations measured per side at each level of push-create: a few hundred,
/// so the level (partitions of the queue) moves little while it is measured.
const CREATE_OPS: u64 = 300;
/// Requests per side of each cell of push-curve (the median is reported).
const CURVE_REPS: u64 = 5;

fn series(key: &str) -> anyhow::Result<Series> {
    Ok(match key {
        "prefix" => Series {
            key: "prefix",
            title: "getPrefix page (100 rows) vs namespace size",
            unit: "keys in the namespace",
            latency: true,
            points: [1000, 100_000, 1_000_000].map(|k| (Workload::KvPrefix { keys: k }, k)).to_vec(),
            clients: None,
            max_ops: None,
        },
        "pop" => Series {
            key: "pop",
            title: "pop (any partition) + ack vs partitions of the queue",
            unit: "partitions",
            latency: true,
            points: [10, 10_000, 100_000].map(|p| (Workload::PopAny { batch: 1, partitions: p }, p)).to_vec(),
            clients: None,
            max_ops: None,
        },
        // The issue 35 sweep: a consumer's pop of up to 10 + ack, naming a
        // random partition and queue-wide, as the queue grows; a point of
        // each kind per size, so both read the one backlog of that size
        // (written once, the group made anew before each side).
        "pop-sweep" => Series {
            key: "pop-sweep",
            title: "pop of up to 10 + ack (a random named partition; queue-wide) vs partitions of the queue",
            unit: "partitions",
            latency: true,
            points: [1000, 10_000, 100_000]
                .into_iter()
                .flat_map(|p| {
                    [
                        (Workload::PopRand { batch: 10, partitions: p }, p),
                        (Workload::PopAny { batch: 10, partitions: p }, p),
                    ]
                })
                .collect(),
            clients: None,
            max_ops: None,
        },
        "push-groups" => Series {
            key: "push-groups",
            title: "push-10 vs consumer groups of the queue",
            unit: "consumer groups",
            latency: false,
            points: [1, 10].map(|g| (Workload::Push { batch: 10, groups: g }, g)).to_vec(),
            clients: None,
            max_ops: None,
        },
        // The queue grows to 100,000 partitions: SQL makes them (one
        // statement per level, as the first push of each would leave them),
        // then a few hundred pushes each create one more, one at a time.
        // The levels rise, so the queue is only topped up between them.
        "push-create" => Series {
            key: "push-create",
            title: "push of 1 message that creates its partition vs partitions of the queue",
            unit: "partitions already in the queue",
            latency: true,
            points: [0, 1]
                .into_iter()
                .flat_map(|g| {
                    [1000, 10_000, 100_000].map(|p| (Workload::PushCreate { partitions: p, groups: g }, p))
                })
                .collect(),
            clients: Some(&[1]),
            max_ops: Some(CREATE_OPS),
        },
        // Time per request as N and P grow: linear in N, flat in P is the
        // aim. P = N is measured once when it is also one of the fixed P.
        "push-curve" => Series {
            key: "push-curve",
            title: "one push of N items over P partitions (time per request; a line per N)",
            unit: "partitions the items spread over (P)",
            latency: true,
            points: [100, 1600, 10_000]
                .into_iter()
                .flat_map(|n| {
                    let mut parts = vec![1, 100, 1000];
                    if !parts.contains(&n) {
                        parts.push(n);
                    }
                    parts.into_iter().map(move |p| (Workload::PushCurve { batch: n, partitions: p }, p))
                })
                .collect(),
            clients: Some(&[1]),
            max_ops: Some(CURVE_REPS),
        },
        "kv-value" => Series {
            key: "kv-value",
            title: "KV put / get vs value size",
            unit: "value bytes, as JSON with its quotes",
            latency: false,
            points: [100, 4096, 65536]
                .map(|s| (Workload::KvPut { size: s }, s))
                .into_iter()
                .chain([100, 4096, 65536].map(|s| (Workload::KvGet { size: s }, s)))
                .collect(),
            clients: None,
            max_ops: None,
        },
        other => bail!(
            "unknown scaling series {other} (prefix, pop, pop-sweep, push-groups, kv-value, push-create, push-curve)"
        ),
    })
}

struct Broker {
    child: Child,
    base: String,
}

impl Broker {
    /// Stops the broker (SIGTERM, then waits for it); a no-op once it has
    /// exited, so a reused pid is never signalled.
    fn stop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|kb| kb.parse::<f64>().ok()))
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// CPU time the process has run, every thread, in nanoseconds
/// (`/proc/<pid>/task/*/schedstat`, whose first field is exact, where
/// `/proc/<pid>/stat` counts in ticks of 10 ms). `None` off Linux.
fn cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        total += stat.split_whitespace().next().and_then(|ns| ns.parse::<u64>().ok()).unwrap_or(0);
    }
    Some(total)
}

fn db_url(admin: &str, db: &str) -> String {
    match admin.rfind('/') {
        Some(i) => format!("{}/{db}", &admin[..i]),
        None => admin.to_owned(),
    }
}

async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.context("connecting to PostgreSQL")?;
    tokio::spawn(conn);
    Ok(client)
}

/// version(), synchronous_commit and shared_buffers, printed with every run.
async fn server_settings(db: &tokio_postgres::Client) -> anyhow::Result<tokio_postgres::Row> {
    Ok(db
        .query_one(
            "SELECT version(), current_setting('synchronous_commit'), current_setting('shared_buffers')",
            &[],
        )
        .await?)
}

async fn admin_exec(url: &str, sql: &str) -> anyhow::Result<()> {
    let client = connect(url).await?;
    client.batch_execute(sql).await.map_err(|e| match e.as_db_error() {
        Some(db) => anyhow::anyhow!("{}: {}", db.code().code(), db.message()),
        None => anyhow::anyhow!(e),
    })?;
    Ok(())
}

/// The broker's `queen_batch_size` histogram: (kind, le) -> cumulative
/// batches, and kind -> requests. Empty when the scrape fails.
async fn batch_sizes(base: &str) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    let Ok(resp) = reqwest::get(format!("{base}/metrics/prometheus")).await else { return out };
    let Ok(text) = resp.text().await else { return out };
    for line in text.lines() {
        let (name, rest) = match line.split_once('{') {
            Some(x) => x,
            None => continue,
        };
        let Some((labels, value)) = rest.split_once("} ") else { continue };
        let Ok(value) = value.trim().parse::<u64>() else { continue };
        let label = |key: &str| {
            labels.split(',').find_map(|kv| kv.strip_prefix(key)).map(|v| v.trim_matches('"').to_owned())
        };
        let Some(kind) = label("kind=") else { continue };
        match name {
            "queen_batch_size_bucket" => {
                if let Some(le) = label("le=") {
                    out.insert((kind, le), value);
                }
            }
            "queen_batch_size_sum" => {
                out.insert((kind, "sum".into()), value);
            }
            _ => {}
        }
    }
    out
}

/// What the batchers did between two scrapes, per kind.
fn batch_delta(
    before: &BTreeMap<(String, String), u64>,
    after: &BTreeMap<(String, String), u64>,
) -> Vec<BatchLine> {
    let get = |m: &BTreeMap<(String, String), u64>, k: &str, le: &str| {
        m.get(&(k.to_owned(), le.to_owned())).copied().unwrap_or(0)
    };
    let mut kinds: Vec<&String> = after.keys().map(|(k, _)| k).collect();
    kinds.dedup();
    kinds
        .into_iter()
        .map(|kind| {
            let mut bounds: Vec<u64> = after
                .keys()
                .filter(|(k, _)| k == kind)
                .filter_map(|(_, le)| le.parse::<u64>().ok())
                .collect();
            bounds.sort_unstable();
            let mut buckets = Vec::new();
            let mut last = 0;
            for bound in bounds {
                let le = bound.to_string();
                let cumulative = get(after, kind, &le).saturating_sub(get(before, kind, &le));
                buckets.push((le, cumulative.saturating_sub(last)));
                last = cumulative;
            }
            BatchLine {
                kind: kind.clone(),
                batches: get(after, kind, "+Inf").saturating_sub(get(before, kind, "+Inf")),
                requests: get(after, kind, "sum").saturating_sub(get(before, kind, "sum")),
                buckets,
            }
        })
        .collect()
}

/// What our side measured.
struct Ours {
    /// Ops per second.
    ops: f64,
    /// Ops done (empty pops included).
    done: u64,
    hist: Histogram<u64>,
    rss_peak: f64,
    cpu_us_per_op: Option<f64>,
    empty: u64,
    errors: u64,
}

/// Runs our side for `seconds`, or until each client has done its share of
/// `max_ops` (a point that counts its ops ends when the last client does).
/// A request under way at the deadline is finished, not abandoned, so a
/// point lasts at least one request of each client.
async fn run_ours(
    w: Workload,
    base: &str,
    clients: usize,
    seconds: u64,
    max_ops: Option<u64>,
    pid: u32,
    blob: Arc<String>,
) -> anyhow::Result<Ours> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let empty = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let per_client = max_ops.map_or(u64::MAX, |n| n.div_ceil(clients.max(1) as u64).max(1));
    let finished = Arc::new(AtomicUsize::new(0));
    let all_finished = Arc::new(tokio::sync::Notify::new());
    // The clients run as pgbench's do: on threads of their own, as many as
    // its `-j` on the other side of the ratio (run_pgbench), each thread
    // one event loop (a current-thread runtime) over its share of the
    // clients. A request of ours then pays no wake-up between threads that
    // pgbench's requests do not.
    let threads = pgbench_threads(clients);
    let mut generators = Vec::with_capacity(threads);
    for t in 0..threads {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let mut tasks = Vec::new();
        for c in (t..clients).step_by(threads) {
            let mut http = driver::LeanConn::new(base)?;
            let (stop, done, empty, errors, blob) =
                (stop.clone(), done.clone(), empty.clone(), errors.clone(), blob.clone());
            let (finished, all_finished) = (finished.clone(), all_finished.clone());
            tasks.push(runtime.spawn(async move {
                let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
                let mut mine = 0u64;
                while !stop.load(Ordering::Relaxed) && mine < per_client {
                    let op = w.pick(&mut rng);
                    let t = Instant::now();
                    let outcome = match op.http_op(&mut http, c, &mut rng, &blob).await {
                        Ok(o) => o,
                        Err(e) => {
                            tracing::warn!("{}: {e:#}", w.name());
                            Outcome::Wrong
                        }
                    };
                    match outcome {
                        Outcome::Wrong => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            // An error loop must not spin: back off a little.
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                        Outcome::Empty => {
                            empty.fetch_add(1, Ordering::Relaxed);
                        }
                        Outcome::Done => {}
                    }
                    hist.saturating_record(t.elapsed().as_micros() as u64);
                    done.fetch_add(1, Ordering::Relaxed);
                    mine += 1;
                }
                // The last client to finish ends the point early (notify_one
                // keeps the wake-up if the bench is not waiting yet).
                if finished.fetch_add(1, Ordering::Relaxed) + 1 == clients {
                    all_finished.notify_one();
                }
                Ok::<_, anyhow::Error>(hist)
            }));
        }
        generators.push(std::thread::Builder::new().name(format!("bench-client-{t}")).spawn(move || {
            runtime.block_on(async move {
                let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
                for task in tasks {
                    hist.add(task.await??)?;
                }
                Ok::<_, anyhow::Error>(hist)
            })
        })?);
    }
    let cpu_before = cpu_ns(pid);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut rss_peak: f64 = 0.0;
    while Instant::now() < deadline {
        rss_peak = rss_peak.max(rss_mb(pid));
        let tick = Duration::from_millis(200).min(deadline.saturating_duration_since(Instant::now()));
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = all_finished.notified() => break,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let hist = join_clients(generators, 60_000_000).await?;
    // Counted once the requests in flight at the deadline have ended: they
    // are in the histogram, and a workload whose requests take longer than
    // the window (a push of 1,000 items over 1,000 partitions, 16 at once)
    // would otherwise count none. For short requests the difference is
    // one request per client.
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_before.zip(cpu_ns(pid)).map(|(a, b)| b.saturating_sub(a));
    let done_ops = done.load(Ordering::Relaxed);
    let ops = done_ops as f64 / elapsed;
    let cpu_us_per_op = cpu.filter(|_| done_ops > 0).map(|ns| ns as f64 / 1000.0 / done_ops as f64);
    rss_peak = rss_peak.max(rss_mb(pid));
    Ok(Ours {
        ops,
        done: done_ops,
        hist,
        rss_peak,
        cpu_us_per_op,
        empty: empty.load(Ordering::Relaxed),
        errors: errors.load(Ordering::Relaxed),
    })
}

/// What pgbench measured: tps, average latency, and the p50/p99 of its
/// per-transaction log.
struct Pg {
    tps: f64,
    avg_ms: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
}

/// pgbench's threads (`-j`) for `clients`, and our generator's: one per
/// core of this 2-core machine at most.
fn pgbench_threads(clients: usize) -> usize {
    clients.clamp(1, 2)
}

/// How long a pgbench side runs.
#[derive(Clone, Copy)]
enum Length {
    /// `-T`: this many seconds.
    Seconds(u64),
    /// `-t`: this many transactions per client (a point that counts its ops).
    Transactions(u64),
}

fn run_pgbench(
    scripts: &[(PathBuf, u64)],
    defines: &[(String, String)],
    url: &str,
    clients: usize,
    length: Length,
) -> anyhow::Result<Pg> {
    let logs = std::env::temp_dir().join(format!("queen-bench-{}-{}", std::process::id(), clients));
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs)?;
    let mut cmd = Command::new("pgbench");
    let (flag, n) = match length {
        Length::Seconds(s) => ("-T", s),
        Length::Transactions(t) => ("-t", t),
    };
    cmd.args(["-n", "-M", "prepared", flag, &n.to_string(), "-c", &clients.to_string()])
        .args(["-j", &pgbench_threads(clients).to_string(), "-l", "--log-prefix"])
        .arg(logs.join("tx"));
    for (k, v) in defines {
        cmd.arg("-D").arg(format!("{k}={v}"));
    }
    for (script, weight) in scripts {
        cmd.arg("-f").arg(format!("{}@{weight}", script.display()));
    }
    let out = cmd
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .context("running pgbench (install postgresql-contrib or the PostgreSQL client)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("pgbench failed: {}{}", text, String::from_utf8_lossy(&out.stderr));
    }
    let grab = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.split_whitespace().find_map(|t| t.parse::<f64>().ok()))
    };
    let (Some(tps), Some(avg_ms)) = (grab("tps ="), grab("latency average =")) else {
        bail!("cannot read pgbench's output: {text}");
    };
    // Log lines: client_id transaction_no latency_us script_no epoch us.
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for entry in std::fs::read_dir(&logs)? {
        let body = std::fs::read_to_string(entry?.path())?;
        for line in body.lines() {
            if let Some(us) = line.split_whitespace().nth(2).and_then(|t| t.parse::<u64>().ok()) {
                hist.saturating_record(us);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&logs);
    let q = |p: f64| (!hist.is_empty()).then(|| hist.value_at_quantile(p) as f64 / 1000.0);
    Ok(Pg { tps, avg_ms, p50_ms: q(0.5), p99_ms: q(0.99) })
}

/// Connection slots pgbench may take: what the server allows, less the
/// broker's pool, its LISTEN connection, our admin connection and headroom
/// for other users of the same server.
async fn pgbench_cap(db: &tokio_postgres::Client, pool_size: usize) -> anyhow::Result<(usize, usize)> {
    let row = db
        .query_one(
            "SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int",
            &[],
        )
        .await?;
    let (max, reserved): (i32, i32) = (row.get(0), row.get(1));
    let cap = (max - reserved).max(0) as usize;
    Ok((max as usize, cap.saturating_sub(pool_size + 2 + 8).max(1)))
}

async fn free_slots(db: &tokio_postgres::Client) -> anyhow::Result<usize> {
    let row = db
        .query_one(
            "SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
                    - (SELECT count(*)::int FROM pg_stat_activity WHERE backend_type = 'client backend')",
            &[],
        )
        .await?;
    Ok(row.get::<_, i32>(0).max(0) as usize)
}

struct Run<'a> {
    args: &'a BenchArgs,
    db: tokio_postgres::Client,
    url: String,
    broker: Broker,
    cap: usize,
}

impl Run<'_> {
    /// One pgbench side (twin or plain) of a point, on freshly prepared data:
    /// the result, whether pgbench failed, and its clients.
    async fn pgbench_side(
        &self,
        w: Workload,
        clients: usize,
        side: &str,
        twin: workload::Twin,
        length: Length,
    ) -> anyhow::Result<(Option<Pg>, bool, usize)> {
        let workload::Twin { files, defines } = twin;
        let scripts: Vec<(PathBuf, u64)> =
            files.iter().map(|(f, wt)| (self.args.scripts.join(f), *wt)).collect();
        let pg_clients = clients.min(self.cap).min(free_slots(&self.db).await?.saturating_sub(2).max(1));
        if !scripts.iter().all(|(p, _)| p.exists()) {
            return Ok((None, false, pg_clients));
        }
        let length = match length {
            // Our side's ops, shared out over pgbench's clients as over ours.
            Length::Transactions(total) => Length::Transactions(total.div_ceil(pg_clients as u64).max(1)),
            seconds => seconds,
        };
        match run_pgbench(&scripts, &defines, &self.url, pg_clients, length) {
            Ok(pg) => Ok((Some(pg), false, pg_clients)),
            Err(e) => {
                // One failed script must not cost the whole run: say so in the row.
                eprintln!("{} x{clients} ({side}): {e:#}", w.name());
                Ok((None, true, pg_clients))
            }
        }
    }

    /// The three sides of one point (ours, the twin, plain SQL), each on a
    /// freshly prepared database. With `max_ops`, our side stops after that
    /// many ops (or --seconds, whichever comes first) and each pgbench side
    /// runs as many transactions as ours did: a point that measures the
    /// latency of a few hundred ops at a given size of the data, which a run
    /// of --seconds would move too far, or ops of seconds each.
    async fn measure(&self, w: Workload, clients: usize, max_ops: Option<u64>) -> anyhow::Result<Point> {
        let size = match w {
            Workload::KvGet { size } | Workload::KvPut { size } => size,
            _ => 0,
        };
        let blob = Arc::new(workload::blob(size));
        w.prepare(&self.db, clients, &blob, self.args.seconds).await?;
        let base = &self.broker.base;
        let before = batch_sizes(base).await;
        let ours =
            run_ours(w, base, clients, self.args.seconds, max_ops, self.broker.child.id(), blob.clone())
                .await?;
        let batches = batch_delta(&before, &batch_sizes(base).await);
        let length = match max_ops {
            Some(_) => Length::Transactions(ours.done.max(1)),
            None => Length::Seconds(self.args.seconds),
        };

        w.prepare(&self.db, clients, &blob, self.args.seconds).await?;
        let (pg, pgbench_failed, pg_clients) =
            self.pgbench_side(w, clients, "twin", w.twin(&blob), length).await?;

        w.prepare(&self.db, clients, &blob, self.args.seconds).await?;
        w.prepare_plain(&self.db, clients).await?;
        let (plain, plain_failed, plain_clients) =
            self.pgbench_side(w, clients, "plain", w.plain(&blob), length).await?;

        let q = |p: f64| ours.hist.value_at_quantile(p) as f64 / 1000.0;
        Ok(Point {
            series: String::new(),
            workload: w.name(),
            kind: w.kind(),
            size: None,
            clients,
            ours_ops: ours.ops,
            ours_rows_per_s: ours.ops * f64::from(w.rows()),
            ours_p50_ms: q(0.5),
            ours_p99_ms: q(0.99),
            ours_p999_ms: q(0.999),
            ours_empty: ours.empty,
            ours_errors: ours.errors,
            pgbench_failed,
            pgbench_clients: pg.as_ref().map(|_| pg_clients),
            pgbench_ops: pg.as_ref().map(|p| p.tps),
            pgbench_avg_ms: pg.as_ref().map(|p| p.avg_ms),
            pgbench_p50_ms: pg.as_ref().and_then(|p| p.p50_ms),
            pgbench_p99_ms: pg.as_ref().and_then(|p| p.p99_ms),
            ratio: pg.as_ref().map(|p| ours.ops / p.tps),
            plain_failed,
            plain_clients: plain.as_ref().map(|_| plain_clients),
            plain_ops: plain.as_ref().map(|p| p.tps),
            plain_avg_ms: plain.as_ref().map(|p| p.avg_ms),
            plain_p50_ms: plain.as_ref().and_then(|p| p.p50_ms),
            plain_p99_ms: plain.as_ref().and_then(|p| p.p99_ms),
            ratio_plain: plain.as_ref().map(|p| ours.ops / p.tps),
            rows_per_op: w.rows(),
            broker_rss_peak_mb: ours.rss_peak,
            broker_cpu_us_per_op: ours.cpu_us_per_op,
            batches,
        })
    }
}

/// A bar on stderr (drawn only on a terminal) over the points of the run;
/// each point takes three measurements of `seconds` (ours, twin, plain) plus
/// their preparation.
fn progress(points: usize, seconds: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(points as u64);
    let style = indicatif::ProgressStyle::with_template(&format!(
        "{{elapsed_precise}} [{{bar:30}}] {{pos}}/{{len}} points (~{}s each, eta {{eta}}) {{msg}}",
        3 * seconds
    ))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

fn list(s: &str, what: &str) -> anyhow::Result<Vec<usize>> {
    s.split(',').map(|c| c.trim().parse()).collect::<Result<_, _>>().with_context(|| what.to_owned())
}

async fn start_broker(url: &str, pool_size: usize) -> anyhow::Result<Broker> {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let exe = std::env::current_exe()?;
    let child = Command::new(exe)
        .arg("serve")
        .env("QUEEN_DATABASE_URL", url)
        .env("PORT", port.to_string())
        .env("HOST", "127.0.0.1")
        .env("DB_POOL_SIZE", pool_size.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .context("starting queen serve")?;
    let broker = Broker { child, base: format!("http://127.0.0.1:{port}") };
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while http.get(format!("{}/ready", broker.base)).send().await.map(|r| r.status() != 200).unwrap_or(true) {
        if Instant::now() > deadline {
            bail!("the broker did not become healthy");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(broker)
}

/// Runs the bench (or the soak) as `args` say; see the crate documentation.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let mut workloads = Vec::new();
    for w in args.workloads.split(',').filter(|s| !s.trim().is_empty()) {
        workloads.extend(Workload::parse(w.trim())?);
    }
    let clients = list(&args.clients, "--clients")?;
    let scaling_clients = list(&args.scaling_clients, "--scaling-clients")?;
    let all_series: Vec<Series> = if args.scaling {
        args.scaling_series.split(',').map(|s| series(s.trim())).collect::<Result<_, _>>()?
    } else {
        vec![]
    };

    let dbname = format!("queen_bench_{}", std::process::id());
    let url = db_url(&args.database_url, &dbname);
    admin_exec(&args.database_url, &format!("DROP DATABASE IF EXISTS {dbname}")).await?;
    admin_exec(&args.database_url, &format!("CREATE DATABASE {dbname}")).await?;
    let result = if args.soak_seconds > 0 {
        soak::run(&args, &url).await
    } else if !args.e2e.trim().is_empty() {
        e2e::run(&args, &url).await
    } else if args.operator_pages {
        operator_pages::run(&args, &url).await
    } else {
        run_all(&args, &url, &workloads, &clients, &all_series, &scaling_clients).await
    };
    admin_exec(&args.database_url, &format!("DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")).await?;
    result
}

async fn run_all(
    args: &BenchArgs,
    url: &str,
    workloads: &[Workload],
    clients: &[usize],
    all_series: &[Series],
    scaling_clients: &[usize],
) -> anyhow::Result<()> {
    let broker = start_broker(url, args.pool_size).await?;
    let db = connect(url).await?;
    let (max_connections, cap) = pgbench_cap(&db, args.pool_size).await?;
    let settings = server_settings(&db).await?;
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let mut report = Report::new(
        stamp,
        args.out.join(stamp.to_string()),
        serde_json::json!({
            "seconds": args.seconds,
            "broker_pool_size": args.pool_size,
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "postgres": settings.get::<_, String>(0),
            "synchronous_commit": settings.get::<_, String>(1),
            "shared_buffers": settings.get::<_, String>(2),
            "max_connections": max_connections,
            "pgbench_client_cap": cap,
        }),
    );
    let mut run = Run { args, db, url: url.to_owned(), broker, cap };
    println!(
        "pgbench runs at most {cap} clients (max_connections {max_connections}, less the broker's pool and headroom); \
         a row past that compares at capped concurrency.\n"
    );

    let sweep_clients = |w: Workload| -> Vec<usize> {
        if matches!(w, Workload::KvPrefix { .. }) {
            vec![1]
        } else {
            clients.to_vec()
        }
    };
    let series_clients =
        |s: &Series| -> Vec<usize> { s.clients.map_or_else(|| scaling_clients.to_vec(), <[usize]>::to_vec) };
    let total: usize = workloads.iter().map(|&w| sweep_clients(w).len()).sum::<usize>()
        + all_series.iter().map(|s| s.points.len() * series_clients(s).len()).sum::<usize>();
    let bar = progress(total, args.seconds);

    if !workloads.is_empty() {
        bar.suspend(|| println!("{}", report::SWEEP_HEADER));
    }
    for (i, &w) in workloads.iter().enumerate() {
        // A fresh broker for each workload after the first, so that each
        // row's RSS peak is its own workload's: freed memory stays in the
        // allocator, and one broker's peak would carry over from, say,
        // push-100 at 256 clients into every workload after it.
        if i > 0 {
            // Stopped first: two brokers' pools at once could pass
            // max_connections beside pgbench's clients.
            run.broker.stop();
            run.broker = start_broker(url, args.pool_size).await?;
        }
        for c in sweep_clients(w) {
            bar.set_message(format!("{} x{c}", w.name()));
            let mut p = run.measure(w, c, None).await?;
            p.series = "sweep".into();
            bar.suspend(|| println!("{}", report::sweep_row(&p)));
            bar.inc(1);
            report.points.push(p);
        }
    }
    for s in all_series {
        bar.suspend(|| println!("\n{}\n\n{}", s.title, report::SCALING_HEADER));
        for &(w, size) in &s.points {
            for c in series_clients(s) {
                bar.set_message(format!("{} {size} x{c}", w.name()));
                let mut p = run.measure(w, c, s.max_ops).await?;
                p.series = s.key.into();
                p.size = Some(size);
                let row = report::scaling_row(&p, &report.points, s.latency);
                bar.suspend(|| println!("{row}"));
                bar.inc(1);
                report.points.push(p);
            }
        }
        if let Some(grid) = report::curve_grid(&report.points, s.key) {
            bar.suspend(|| println!("\n{grid}"));
        }
        if let Some(growth) = report::size_growth(&report.points, s.key) {
            bar.suspend(|| println!("\n{growth}"));
        }
        report.series.push(report::SeriesInfo {
            key: s.key.into(),
            title: s.title.into(),
            unit: s.unit.into(),
            latency: s.latency,
        });
    }
    bar.finish_and_clear();
    let fire = if args.timers > 0 {
        Some(timer_fire_lag(&run.broker.base, &run.db, args.timers).await?)
    } else {
        None
    };
    let ephemeral = if args.ephemeral_seconds > 0 {
        Some(ephemeral_vs_durable(&run.broker.base, Duration::from_secs(args.ephemeral_seconds), 16).await?)
    } else {
        None
    };
    drop(run);
    let dir = report.write()?;
    if let Some(fire) = fire {
        std::fs::write(dir.join("timers.json"), serde_json::to_string_pretty(&fire)?)?;
    }
    if let Some(eph) = ephemeral {
        std::fs::write(dir.join("ephemeral.json"), serde_json::to_string_pretty(&eph)?)?;
    }
    println!("\nresults: {}", dir.display());
    Ok(())
}

/// Schedules `n` timers due at one instant (2 s ahead) and measures how late
/// each fired: from its due time to the commit time of its message (the
/// message's `created_at` is the fire transaction's start; the commit
/// follows within that transaction). Prints one row; answers it as JSON.
async fn timer_fire_lag(
    base: &str,
    db: &tokio_postgres::Client,
    n: usize,
) -> anyhow::Result<serde_json::Value> {
    use base64::Engine as _;
    let http = reqwest::Client::new();
    let payload = base64::engine::general_purpose::STANDARD.encode("{\"bench\":true}");
    let due_in = Duration::from_secs(2);
    let start = Instant::now();
    let mut txns = Vec::with_capacity(n);
    let mut dues = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        // One instant for all: each call aims at the same wall-clock moment.
        let delay = due_in.saturating_sub(start.elapsed()).as_millis() as i64;
        let ops: Vec<serde_json::Value> = chunk
            .iter()
            .map(|i| {
                serde_json::json!({"op": "schedule", "queue": "bench-timers", "timerKey": format!("t{i}"),
                    "payload": payload, "delayMs": delay, "txn": format!("bench-timer-{i}")})
            })
            .collect();
        let answer: serde_json::Value = http
            .post(format!("{base}/api/v1/timers"))
            .json(&serde_json::json!({ "operations": ops }))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        for r in answer["results"].as_array().context("timers answer")? {
            txns.push(r["txn"].as_str().context("txn")?.to_owned());
            dues.push(r["deliverAt"].as_str().context("deliverAt")?.to_owned());
        }
    }
    let scheduled_in = start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pending: i64 = db.query_one("SELECT count(*) FROM queen.timers", &[]).await?.get(0);
        if pending == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{pending} timers still pending after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let row = db
        .query_one(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), percentile_cont(0.99) WITHIN GROUP (ORDER BY lag),
                    max(lag), count(*)
               FROM (SELECT (extract(epoch FROM m.created_at - d.due::timestamptz) * 1000)::float8 AS lag
                       FROM unnest($1::text[], $2::text[]) d(txn, due)
                       JOIN queen.messages m ON m.transaction_id = d.txn) x",
            &[&txns, &dues],
        )
        .await?;
    let (p50, p99, max, fired): (f64, f64, f64, i64) =
        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?, row.try_get(3)?);
    println!(
        "\ntimer fire lag: {n} timers due at one instant (scheduled in {:.2} s): fired {fired}, \
         lag p50 {p50:.0} ms, p99 {p99:.0} ms, max {max:.0} ms",
        scheduled_in.as_secs_f64()
    );
    Ok(serde_json::json!({"timers": n, "fired": fired, "lag_ms": {"p50": p50, "p99": p99, "max": max},
                          "scheduled_seconds": scheduled_in.as_secs_f64()}))
}

/// One client's round trips (push one message to its own partition, pop it,
/// ack it) for `span`, on an ephemeral (`durable` false) or a durable queue.
async fn round_trips(base: String, client: usize, durable: bool, span: Duration) -> anyhow::Result<u64> {
    let http = reqwest::Client::new();
    let partition = format!("p{client}");
    let deadline = Instant::now() + span;
    let mut done = 0u64;
    while Instant::now() < deadline {
        if durable {
            let items = serde_json::json!({"items": [{"queue": "bench-durable", "partition": partition, "payload": {"n": done}}]});
            http.post(format!("{base}/api/v1/push")).json(&items).send().await?.error_for_status()?;
            let popped: serde_json::Value = http
                .get(format!(
                    "{base}/api/v1/pop/queue/bench-durable/partition/{partition}?batch=1&wait=false"
                ))
                .send()
                .await?
                .json()
                .await?;
            let m = &popped["messages"][0];
            let ack = serde_json::json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                         "leaseId": m["leaseId"], "status": "completed"});
            http.post(format!("{base}/api/v1/ack")).json(&ack).send().await?.error_for_status()?;
        } else {
            let push = serde_json::json!({"queue": "bench-ephemeral", "partition": partition, "messages": [{"payload": {"n": done}}]});
            http.post(format!("{base}/api/v1/ephemeral/push"))
                .json(&push)
                .send()
                .await?
                .error_for_status()?;
            let popped: serde_json::Value = http
                .get(format!(
                    "{base}/api/v1/ephemeral/pop?queue=bench-ephemeral&partition={partition}&batch=1"
                ))
                .send()
                .await?
                .json()
                .await?;
            let ack = serde_json::json!({"queue": "bench-ephemeral", "acks": [{"id": popped["messages"][0]["id"]}]});
            http.post(format!("{base}/api/v1/ephemeral/ack")).json(&ack).send().await?.error_for_status()?;
        }
        done += 1;
    }
    Ok(done)
}

/// Push + pop + ack round trips per second on an ephemeral queue and on a
/// durable one, `clients` at a time, measured back to back in this run.
async fn ephemeral_vs_durable(
    base: &str,
    span: Duration,
    clients: usize,
) -> anyhow::Result<serde_json::Value> {
    let mut rates = Vec::new();
    for durable in [false, true] {
        let start = Instant::now();
        let tasks: Vec<_> =
            (0..clients).map(|c| tokio::spawn(round_trips(base.to_owned(), c, durable, span))).collect();
        let mut total = 0u64;
        for t in tasks {
            total += t.await??;
        }
        rates.push(total as f64 / start.elapsed().as_secs_f64());
    }
    println!(
        "\nephemeral vs durable ({clients} clients, push + pop + ack): ephemeral {:.0}/s, durable {:.0}/s, \
         ratio {:.2}",
        rates[0],
        rates[1],
        rates[0] / rates[1].max(1e-9)
    );
    Ok(serde_json::json!({"clients": clients, "seconds": span.as_secs_f64(),
                          "ephemeral_per_second": rates[0], "durable_per_second": rates[1],
                          "ratio": rates[0] / rates[1].max(1e-9)}))
}

/// Joins the bench's client threads and merges their latency histograms
/// (microseconds, up to `highest`).
pub(crate) async fn join_clients(
    generators: Vec<std::thread::JoinHandle<anyhow::Result<Histogram<u64>>>>,
    highest: u64,
) -> anyhow::Result<Histogram<u64>> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, highest, 3)?;
    for generator in generators {
        let part = tokio::task::spawn_blocking(move || generator.join())
            .await?
            .map_err(|_| anyhow::anyhow!("a bench client thread panicked"))??;
        hist.add(part)?;
    }
    Ok(hist)
}
