//! `queen bench`: our HTTP throughput and latency beside pgbench calling the
//! same SQL function on the same machine in the same run, as a ratio. The
//! machine is noisy, so only ratios taken in one run mean anything.
//!
//! The bench creates its own database, starts `queen serve` (this binary) on
//! it as a child process, and drives it with N concurrent HTTP clients; then
//! it runs `pgbench -c N` with the script of `bench/pgbench/<workload>.sql`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use hdrhistogram::Histogram;
use tokio_postgres::NoTls;

#[derive(Args)]
pub struct BenchArgs {
    /// An admin URL of the PostgreSQL to bench on; the bench creates (and drops) its own database.
    #[arg(
        long,
        env = "QUEEN_BENCH_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    database_url: String,
    /// Workloads, comma separated: push-1, push-100, pop-ack, kv-get, kv-put, kv-put-if-absent,
    /// kv-incr, once-ack, kv-prefix.
    #[arg(long, default_value = "push-1,push-100,pop-ack,kv-get,kv-put,kv-put-if-absent,kv-incr,once-ack")]
    workloads: String,
    /// Concurrent clients, comma separated.
    #[arg(long, default_value = "1,16,64")]
    clients: String,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Directory of the pgbench scripts.
    #[arg(long, default_value = "bench/pgbench")]
    scripts: PathBuf,
    /// Where to write the JSON and markdown results.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Broker pool size.
    #[arg(long, default_value_t = 16)]
    pool_size: usize,
}

/// One measured point.
#[derive(serde::Serialize)]
struct Point {
    workload: String,
    clients: usize,
    ours_ops: f64,
    ours_p50_ms: f64,
    ours_p99_ms: f64,
    ours_p999_ms: f64,
    pgbench_ops: Option<f64>,
    pgbench_avg_ms: Option<f64>,
    ratio: Option<f64>,
    rows_per_op: u32,
    broker_rss_mb: f64,
}

struct Broker {
    child: Child,
    base: String,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
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

fn db_url(admin: &str, db: &str) -> String {
    match admin.rfind('/') {
        Some(i) => format!("{}/{db}", &admin[..i]),
        None => admin.to_owned(),
    }
}

async fn admin_exec(url: &str, sql: &str) -> anyhow::Result<()> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await.context("connecting to PostgreSQL")?;
    tokio::spawn(conn);
    client.batch_execute(sql).await.map_err(|e| match e.as_db_error() {
        Some(db) => anyhow::anyhow!("{}: {}", db.code().code(), db.message()),
        None => anyhow::anyhow!(e),
    })?;
    Ok(())
}

/// What a workload sends over HTTP, and how many rows one op moves.
#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Push1,
    Push100,
    PopAck,
    KvGet,
    KvPut,
    KvPutIfAbsent,
    KvIncr,
    OnceAck,
    KvPrefix1k,
    KvPrefix1m,
}

impl Workload {
    fn parse(s: &str) -> anyhow::Result<Vec<Self>> {
        Ok(match s {
            "push-1" => vec![Workload::Push1],
            "push-100" => vec![Workload::Push100],
            "pop-ack" => vec![Workload::PopAck],
            "kv-get" => vec![Workload::KvGet],
            "kv-put" => vec![Workload::KvPut],
            "kv-put-if-absent" => vec![Workload::KvPutIfAbsent],
            "kv-incr" => vec![Workload::KvIncr],
            "once-ack" => vec![Workload::OnceAck],
            "kv-prefix" => vec![Workload::KvPrefix1k, Workload::KvPrefix1m],
            other => bail!("unknown workload {other}"),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Workload::Push1 => "push-1",
            Workload::Push100 => "push-100",
            Workload::PopAck => "pop-ack",
            Workload::KvGet => "kv-get",
            Workload::KvPut => "kv-put",
            Workload::KvPutIfAbsent => "kv-put-if-absent",
            Workload::KvIncr => "kv-incr",
            Workload::OnceAck => "once-ack",
            Workload::KvPrefix1k => "kv-prefix-1k",
            Workload::KvPrefix1m => "kv-prefix-1m",
        }
    }

    fn rows(self) -> u32 {
        match self {
            Workload::Push100 => 100,
            _ => 1,
        }
    }
}

/// A cheap per-task random number generator (xorshift).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

async fn prepare(w: Workload, url: &str, clients: usize) -> anyhow::Result<()> {
    match w {
        Workload::KvGet | Workload::KvIncr => admin_exec(
            url,
            "SELECT queen.kv_batch(json_build_array(json_build_object('op','put','ns','bench','key','k:'||i,
               'value',i,'forever',true)), '{}') FROM generate_series(1,10000) i",
        )
        .await,
        Workload::PopAck | Workload::OnceAck => {
            // Enough backlog for the run on one partition per client.
            let sql = format!(
                "SELECT queen.push((SELECT json_agg(json_build_object('queue','bench-pop','partition','p'||(i % {clients}),
                   'payload',json_build_object('n',i))) FROM generate_series(1,{}) i))",
                (clients * 3000).max(30_000)
            );
            admin_exec(url, &sql).await
        }
        Workload::KvPrefix1k => admin_exec(
            url,
            "INSERT INTO queen.kv (ns, key, value, version) SELECT 'p1k', 'k:'||lpad(i::text,7,'0'), to_jsonb(i),
               nextval('queen.kv_version_seq') FROM generate_series(1,1000) i ON CONFLICT DO NOTHING",
        )
        .await,
        Workload::KvPrefix1m => admin_exec(
            url,
            "INSERT INTO queen.kv (ns, key, value, version) SELECT 'p1m', 'k:'||lpad(i::text,7,'0'), to_jsonb(i),
               nextval('queen.kv_version_seq') FROM generate_series(1,1000000) i ON CONFLICT DO NOTHING; ANALYZE queen.kv",
        )
        .await,
        _ => Ok(()),
    }
}

/// One HTTP op of the workload; `Ok(false)` when the answer is wrong.
async fn http_op(
    w: Workload,
    http: &reqwest::Client,
    base: &str,
    client_id: usize,
    rng: &mut Rng,
) -> anyhow::Result<bool> {
    let post = |path: &str, body: String| {
        http.post(format!("{base}{path}")).header("content-type", "application/json").body(body).send()
    };
    let resp = match w {
        Workload::Push1 => {
            post(
                "/api/v1/push",
                format!(
                    r#"{{"items":[{{"queue":"bench","partition":"p{client_id}","payload":{{"n":1}}}}]}}"#
                ),
            )
            .await?
        }
        Workload::Push100 => {
            let item = format!(r#"{{"queue":"bench","partition":"p{client_id}","payload":{{"n":1}}}}"#);
            let items = vec![item; 100].join(",");
            post("/api/v1/push", format!(r#"{{"items":[{items}]}}"#)).await?
        }
        Workload::PopAck | Workload::OnceAck => {
            let popped = http
                .get(format!("{base}/api/v1/pop/queue/bench-pop/partition/p{client_id}?batch=1&wait=false"))
                .send()
                .await?;
            if popped.status() != 200 {
                return Ok(false);
            }
            let v: serde_json::Value = popped.json().await?;
            let m = &v["messages"][0];
            let ack = serde_json::json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                "leaseId": m["leaseId"], "status": "completed"});
            if w == Workload::PopAck {
                post("/api/v1/ack", ack.to_string()).await?
            } else {
                let bundle = serde_json::json!({
                    "operations": [{"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"],
                                    "leaseId": m["leaseId"], "status": "completed"}],
                    "requiredLeases": [m["leaseId"]],
                    "kv": [{"op": "putIfAbsent", "ns": "once", "key": format!("charge:{}", m["transactionId"].as_str().unwrap_or("")),
                            "value": true, "ttlSeconds": 86400, "required": true}]});
                post("/api/v1/transaction", bundle.to_string()).await?
            }
        }
        Workload::KvGet => {
            let k = rng.next() % 10000 + 1;
            post("/api/v1/kv", format!(r#"{{"operations":[{{"op":"get","ns":"bench","key":"k:{k}"}}]}}"#))
                .await?
        }
        Workload::KvPut => {
            let k = rng.next() % 10000 + 1;
            post("/api/v1/kv", format!(r#"{{"operations":[{{"op":"put","ns":"bench","key":"k:{k}","value":{k},"forever":true}}]}}"#))
                .await?
        }
        Workload::KvPutIfAbsent => {
            let k = rng.next();
            post("/api/v1/kv", format!(r#"{{"operations":[{{"op":"putIfAbsent","ns":"bench","key":"n:{k}","value":1,"ttlSeconds":3600}}]}}"#))
                .await?
        }
        Workload::KvIncr => {
            let k = rng.next() % 10000 + 1;
            post("/api/v1/kv", format!(r#"{{"operations":[{{"op":"incr","ns":"bench","key":"c:{k}","delta":1,"forever":true}}]}}"#))
                .await?
        }
        Workload::KvPrefix1k | Workload::KvPrefix1m => {
            let ns = if w == Workload::KvPrefix1k { "p1k" } else { "p1m" };
            let start = rng.next() % 900;
            post("/api/v1/kv", format!(r#"{{"operations":[{{"op":"getPrefix","ns":"{ns}","prefix":"k:","after":"k:{start:07}","limit":100}}]}}"#))
                .await?
        }
    };
    let ok = resp.status().is_success();
    let _ = resp.bytes().await?;
    Ok(ok)
}

async fn run_ours(
    w: Workload,
    base: &str,
    clients: usize,
    seconds: u64,
    pid: u32,
) -> anyhow::Result<(f64, Histogram<u64>, f64)> {
    let http = reqwest::Client::builder().pool_max_idle_per_host(clients).build()?;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (http, base, stop, done) = (http.clone(), base.to_owned(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (c as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                if http_op(w, &http, &base, c, &mut rng).await? {
                    hist.saturating_record(t.elapsed().as_micros() as u64);
                    done.fetch_add(1, Ordering::Relaxed);
                } else {
                    bail!("{}: the broker refused an op", w.name());
                }
            }
            Ok::<_, anyhow::Error>(hist)
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds) / 2).await;
    let rss = rss_mb(pid);
    tokio::time::sleep(Duration::from_secs(seconds) - Duration::from_secs(seconds) / 2).await;
    stop.store(true, Ordering::Relaxed);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    for t in tasks {
        hist.add(t.await??)?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok((done.load(Ordering::Relaxed) as f64 / elapsed, hist, rss))
}

/// pgbench's tps and average latency for the same SQL.
fn run_pgbench(script: &Path, url: &str, clients: usize, seconds: u64) -> anyhow::Result<Option<(f64, f64)>> {
    if !script.exists() {
        return Ok(None);
    }
    let out = Command::new("pgbench")
        .args(["-n", "-M", "prepared", "-T", &seconds.to_string(), "-c", &clients.to_string()])
        .args(["-j", &clients.clamp(1, 2).to_string(), "-f"])
        .arg(script)
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
    Ok(match (grab("tps ="), grab("latency average =")) {
        (Some(tps), Some(lat)) => Some((tps, lat)),
        _ => None,
    })
}

pub async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let mut workloads = Vec::new();
    for w in args.workloads.split(',').filter(|s| !s.is_empty()) {
        workloads.extend(Workload::parse(w.trim())?);
    }
    let clients: Vec<usize> =
        args.clients.split(',').map(|c| c.trim().parse()).collect::<Result<_, _>>().context("--clients")?;
    let db = format!("queen_bench_{}", std::process::id());
    let url = db_url(&args.database_url, &db);
    admin_exec(&args.database_url, &format!("DROP DATABASE IF EXISTS {db}")).await?;
    admin_exec(&args.database_url, &format!("CREATE DATABASE {db}")).await?;

    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let exe = std::env::current_exe()?;
    let child = Command::new(exe)
        .arg("serve")
        .env("QUEEN_DATABASE_URL", &url)
        .env("PORT", port.to_string())
        .env("HOST", "127.0.0.1")
        .env("DB_POOL_SIZE", args.pool_size.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .context("starting queen serve")?;
    let pid = child.id();
    let broker = Broker { child, base: format!("http://127.0.0.1:{port}") };
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while http.get(format!("{}/health", broker.base)).send().await.map(|r| r.status() != 200).unwrap_or(true)
    {
        if Instant::now() > deadline {
            bail!("the broker did not become healthy");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut points = Vec::new();
    println!("| workload | clients | ours ops/s | p50 ms | p99 ms | p999 ms | pgbench tx/s | pgbench avg ms | ours/pgbench | broker RSS MB |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for &w in &workloads {
        let points_clients: Vec<usize> =
            if matches!(w, Workload::KvPrefix1k | Workload::KvPrefix1m) { vec![1] } else { clients.clone() };
        for &c in &points_clients {
            // A fresh backlog per point for the consuming workloads.
            admin_exec(&url, "TRUNCATE queen.messages, queen.cursors, queen.partitions, queen.queues CASCADE; DELETE FROM queen.consumer_groups;")
                .await?;
            prepare(w, &url, c).await?;
            let (ops, hist, rss) = run_ours(w, &broker.base, c, args.seconds, pid).await?;
            admin_exec(&url, "TRUNCATE queen.messages, queen.cursors, queen.partitions, queen.queues CASCADE; DELETE FROM queen.consumer_groups;")
                .await?;
            prepare(w, &url, c).await?;
            let pg = run_pgbench(&args.scripts.join(format!("{}.sql", w.name())), &url, c, args.seconds)?;
            let p = Point {
                workload: w.name().into(),
                clients: c,
                ours_ops: ops,
                ours_p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
                ours_p99_ms: hist.value_at_quantile(0.99) as f64 / 1000.0,
                ours_p999_ms: hist.value_at_quantile(0.999) as f64 / 1000.0,
                pgbench_ops: pg.map(|p| p.0),
                pgbench_avg_ms: pg.map(|p| p.1),
                ratio: pg.map(|p| ops / p.0),
                rows_per_op: w.rows(),
                broker_rss_mb: rss,
            };
            let opt = |v: Option<f64>, digits: usize| {
                v.map(|x| format!("{x:.digits$}")).unwrap_or_else(|| "n/a".into())
            };
            println!(
                "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {:.1} |",
                p.workload,
                p.clients,
                p.ours_ops,
                p.ours_p50_ms,
                p.ours_p99_ms,
                p.ours_p999_ms,
                opt(p.pgbench_ops, 0),
                opt(p.pgbench_avg_ms, 2),
                opt(p.ratio, 2),
                p.broker_rss_mb
            );
            points.push(p);
        }
    }
    drop(broker);
    admin_exec(&args.database_url, &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).await?;
    std::fs::create_dir_all(&args.out)?;
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let file = args.out.join(format!("bench-{stamp}.json"));
    std::fs::write(&file, serde_json::to_string_pretty(&points)?)?;
    println!("\nresults: {}", file.display());
    Ok(())
}
