//! `queen bench --operator-pages`: the dashboard's pages timed on a large
//! deployment's data (`bench/operator-pages/dataset.sql`: a queue of 100,000
//! partitions, 1,000,000 KV keys, dead letters, timers, a consumer group).
//! Each page is fetched `REPS` times one after another over one connection,
//! as an operator's browser would; the target is under 100 ms each. The
//! large queue's gauge is counted first (by the statement the broker's
//! gauge loop runs), and how long that count took is a row of its own: it
//! runs in the background, not on a page view.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::{connect, start_broker, BenchArgs};

/// Fetches of each page (the first is a warm-up and is not counted).
const REPS: usize = 21;
/// The target of every page.
const TARGET_MS: f64 = 100.0;

/// The pages, as an operator opens them.
const PAGES: &[(&str, &str)] = &[
    ("overview", "/"),
    ("queues", "/dashboard/queues"),
    ("queue (100k partitions)", "/dashboard/queues/scale"),
    ("queue, a later page", "/dashboard/queues/scale?after=p050000"),
    ("consumer groups", "/dashboard/groups"),
    ("messages", "/dashboard/messages"),
    ("messages of the large queue", "/dashboard/messages?queue=scale"),
    ("messages, completed", "/dashboard/messages?queue=scale&status=completed"),
    ("dead letters", "/dashboard/dlq"),
    ("KV namespaces", "/dashboard/kv"),
    ("KV keys (900k namespace)", "/dashboard/kv/big"),
    ("KV value", "/dashboard/kv/big/value?key=user:0000001"),
    ("timers and locks", "/dashboard/timers"),
    ("system", "/dashboard/system"),
];

#[derive(Serialize)]
struct Row {
    page: String,
    path: String,
    status: u16,
    p50_ms: f64,
    max_ms: f64,
    under_target: bool,
}

/// Builds the data set on the bench's database, starts the broker on it and
/// times each page; results in `<out>/operator-pages-<unix time>/`.
pub(crate) async fn run(args: &BenchArgs, url: &str) -> anyhow::Result<()> {
    let dataset = std::fs::read_to_string(&args.operator_dataset)
        .with_context(|| format!("reading {}", args.operator_dataset.display()))?;
    // The broker migrates the database. The bench counts the gauge itself
    // once, to time it; the broker's gauge loop runs as in production.
    let mut broker = start_broker(url, args.pool_size).await?;
    let db = connect(url).await?;
    let started = Instant::now();
    db.batch_execute(&dataset).await.context("loading the operator-pages data set")?;
    println!("data set loaded in {:.1} s", started.elapsed().as_secs_f64());
    let started = Instant::now();
    let mut counted = 0;
    while db
        .query_one("SELECT queen.refresh_queue_gauge(2000, interval '10 seconds')", &[])
        .await?
        .try_get::<_, bool>(0)?
    {
        counted += 1;
    }
    let gauge_ms = started.elapsed().as_secs_f64() * 1000.0;
    println!("{counted} queue gauge(s) counted in {gauge_ms:.0} ms (in the background, not on a page view)");

    let http = reqwest::Client::builder().pool_max_idle_per_host(1).build()?;
    let mut rows = Vec::new();
    for (name, path) in PAGES {
        let mut times = Vec::with_capacity(REPS);
        let mut status = 0;
        for rep in 0..REPS {
            let t = Instant::now();
            let resp = http.get(format!("{}{path}", broker.base)).send().await?;
            status = resp.status().as_u16();
            resp.bytes().await?;
            if rep > 0 {
                times.push(t.elapsed());
            }
        }
        times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let p50 = ms(times[times.len() / 2]);
        let max = times.last().map(|d| ms(*d)).unwrap_or(0.0);
        println!("{name:32} {status}  p50 {p50:7.1} ms  max {max:7.1} ms");
        rows.push(Row {
            page: (*name).to_owned(),
            path: (*path).to_owned(),
            status,
            p50_ms: p50,
            max_ms: max,
            under_target: status == 200 && p50 < TARGET_MS,
        });
    }
    broker.stop();

    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    let dir = args.out.join(format!("operator-pages-{stamp}"));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("results.json"),
        serde_json::to_string_pretty(&serde_json::json!({
            "stamp": stamp, "reps": REPS - 1, "target_ms": TARGET_MS, "gauge_count_ms": gauge_ms, "rows": rows,
        }))?,
    )?;
    let mut md = format!(
        "# Operator pages on {} ({} fetches each, one at a time)\n\n\
         The large queue's gauge took {gauge_ms:.0} ms to count, in the background.\n\n\
         | page | status | p50 ms | max ms | under {TARGET_MS} ms |\n| --- | --- | --- | --- | --- |\n",
        args.operator_dataset.display(),
        REPS - 1
    );
    for r in &rows {
        md.push_str(&format!(
            "| {} | {} | {:.1} | {:.1} | {} |\n",
            r.page,
            r.status,
            r.p50_ms,
            r.max_ms,
            if r.under_target { "yes" } else { "no" }
        ));
    }
    std::fs::write(dir.join("results.md"), md)?;
    println!("results in {}", dir.display());
    if rows.iter().any(|r| r.status != 200) {
        bail!("a page did not answer 200");
    }
    Ok(())
}
