//! Results: the JSON of every point, a markdown table, and a PNG chart per
//! sweep (one per workload over the client counts, one per scaling series).

use std::path::{Path, PathBuf};

use anyhow::Context;
use plotters::prelude::*;

/// One measured point.
#[derive(serde::Serialize)]
pub struct Point {
    /// `sweep`, or the key of the scaling series.
    pub series: String,
    pub workload: String,
    /// The workload without its size (lines up a scaling series).
    pub kind: String,
    /// The scaling parameter (keys, partitions, groups, value bytes; for
    /// push-curve the partitions P, N being `rows_per_op`).
    pub size: Option<u32>,
    pub clients: usize,
    pub ours_ops: f64,
    pub ours_rows_per_s: f64,
    pub ours_p50_ms: f64,
    pub ours_p99_ms: f64,
    pub ours_p999_ms: f64,
    /// Pops that found nothing free (counted as ops, as pgbench counts them).
    pub ours_empty: u64,
    /// Wrong answers (errors, refusals): not counted as ops.
    pub ours_errors: u64,
    /// The twin's pgbench (our SQL functions) exited with an error (its
    /// message went to stderr). The `pgbench_*` fields are the twin's.
    pub pgbench_failed: bool,
    /// pgbench's concurrency: the clients, or the cap that max_connections allows.
    pub pgbench_clients: Option<usize>,
    pub pgbench_ops: Option<f64>,
    pub pgbench_avg_ms: Option<f64>,
    pub pgbench_p50_ms: Option<f64>,
    pub pgbench_p99_ms: Option<f64>,
    /// ours_ops / pgbench_ops, ours against the twin (at pgbench_clients, see there).
    pub ratio: Option<f64>,
    /// The plain-SQL pgbench (`bench/pgbench/plain/`) exited with an error.
    pub plain_failed: bool,
    /// The plain side's concurrency, as `pgbench_clients`.
    pub plain_clients: Option<usize>,
    pub plain_ops: Option<f64>,
    pub plain_avg_ms: Option<f64>,
    pub plain_p50_ms: Option<f64>,
    pub plain_p99_ms: Option<f64>,
    /// ours_ops / plain_ops: the headline ratio.
    pub ratio_plain: Option<f64>,
    pub rows_per_op: u32,
    pub broker_rss_peak_mb: f64,
    /// The broker's CPU time (every thread, user and system) per op of our
    /// side: steadier than ops/s on a noisy machine, and the figure the
    /// broker's own overhead shows in.
    pub broker_cpu_us_per_op: Option<f64>,
    /// Batches the broker's batchers ran during our side of the point.
    pub batches: Vec<BatchLine>,
}

/// The batch sizes one batcher saw during a point (from the broker's
/// `queen_batch_size` histogram, the difference over the point).
#[derive(serde::Serialize, Clone, Debug, PartialEq)]
pub struct BatchLine {
    /// `push` or `kv_get`.
    pub kind: String,
    pub batches: u64,
    /// Requests they carried.
    pub requests: u64,
    /// (upper bound of the bucket, batches in it), not cumulative.
    pub buckets: Vec<(String, u64)>,
}

/// Header of the batch-size table.
const BATCH_HEADER: &str = "| workload | clients | batcher | batches | mean requests per batch | buckets (size <= bound: batches) |\n\
                            | --- | ---: | --- | ---: | ---: | --- |";

fn batch_rows(p: &Point) -> String {
    p.batches
        .iter()
        .filter(|b| b.batches > 0)
        .map(|b| {
            let buckets: Vec<String> =
                b.buckets.iter().filter(|(_, n)| *n > 0).map(|(le, n)| format!("<={le}: {n}")).collect();
            format!(
                "| {} | {} | {} | {} | {:.2} | {} |\n",
                p.workload,
                p.clients,
                b.kind,
                b.batches,
                b.requests as f64 / b.batches as f64,
                buckets.join(", ")
            )
        })
        .collect()
}

/// A scaling series as the report shows it.
#[derive(serde::Serialize)]
pub struct SeriesInfo {
    pub key: String,
    pub title: String,
    pub unit: String,
    /// Cost read from p50 latency (else from throughput).
    pub latency: bool,
}

pub struct Report {
    pub stamp: u64,
    pub dir: PathBuf,
    pub config: serde_json::Value,
    pub points: Vec<Point>,
    pub series: Vec<SeriesInfo>,
}

pub const SWEEP_HEADER: &str = "| workload | clients | ours ops/s | rows/s | p50 ms | p99 ms | p999 ms | pgbench clients | plain tx/s | twin tx/s | ours/plain | ours/twin | plain p50 ms | plain p99 ms | twin p50 ms | twin p99 ms | broker RSS peak MB | broker CPU µs/op |\n\
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |";

pub const SCALING_HEADER: &str = "| workload | size | clients | ours ops/s | p50 ms | p99 ms | plain tx/s | twin tx/s | ours/plain | ours/twin | plain p50 ms | plain p99 ms | twin p50 ms | twin p99 ms | cost vs smallest, ours | cost vs smallest, plain | cost vs smallest, twin |\n\
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |";

/// A figure of a point that a chart line plots.
type Pick = fn(&Point) -> Option<f64>;

/// The y label of the ratio panels (also what marks a panel as one).
const RATIO_Y: &str = "ours / plain, ours / twin";

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}")).unwrap_or_else(|| "n/a".into())
}

/// Clients, marked when pgbench ran fewer, and notes of empty pops and errors.
fn notes(p: &Point) -> String {
    let mut s = String::new();
    if p.ours_empty > 0 {
        s.push_str(&format!(" ({} empty pops)", p.ours_empty));
    }
    if p.ours_errors > 0 {
        s.push_str(&format!(" ({} ERRORS)", p.ours_errors));
    }
    if p.plain_failed {
        s.push_str(" (plain pgbench failed)");
    }
    if p.pgbench_failed {
        s.push_str(" (twin pgbench failed)");
    }
    s
}

/// pgbench's clients: the fewest either pgbench side ran, marked when capped.
fn pg_clients(p: &Point) -> String {
    let ran = match (p.plain_clients, p.pgbench_clients) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    match ran {
        Some(c) if c < p.clients => format!("{c} (capped)"),
        Some(c) => c.to_string(),
        None if p.pgbench_failed || p.plain_failed => "pgbench failed".into(),
        None => "no script".into(),
    }
}

pub fn sweep_row(p: &Point) -> String {
    format!(
        "| {}{} | {} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} | {} |",
        p.workload,
        notes(p),
        p.clients,
        p.ours_ops,
        p.ours_rows_per_s,
        p.ours_p50_ms,
        p.ours_p99_ms,
        p.ours_p999_ms,
        pg_clients(p),
        opt(p.plain_ops, 0),
        opt(p.pgbench_ops, 0),
        opt(p.ratio_plain, 2),
        opt(p.ratio, 2),
        opt(p.plain_p50_ms, 2),
        opt(p.plain_p99_ms, 2),
        opt(p.pgbench_p50_ms, 2),
        opt(p.pgbench_p99_ms, 2),
        p.broker_rss_peak_mb,
        opt(p.broker_cpu_us_per_op, 0)
    )
}

/// How many times the smallest size's cost this point costs: p50 latency
/// for latency series, inverse throughput otherwise; ours, plain's and the
/// twin's.
fn growth(p: &Point, earlier: &[Point], latency: bool) -> (Option<f64>, Option<f64>, Option<f64>) {
    let Some(base) =
        earlier.iter().find(|e| e.series == p.series && e.kind == p.kind && e.clients == p.clients)
    else {
        return (Some(1.0), Some(1.0), Some(1.0));
    };
    let rel = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if latency && b > 0.0 => Some(a / b),
        (Some(a), Some(b)) if !latency && a > 0.0 => Some(b / a),
        _ => None,
    };
    if latency {
        let ours =
            (p.ours_ops > 0.0 && base.ours_ops > 0.0).then(|| p.ours_p50_ms / base.ours_p50_ms.max(1e-9));
        (ours, rel(p.plain_p50_ms, base.plain_p50_ms), rel(p.pgbench_p50_ms, base.pgbench_p50_ms))
    } else {
        let ours = (p.ours_ops > 0.0 && base.ours_ops > 0.0).then(|| base.ours_ops / p.ours_ops);
        (ours, rel(p.plain_ops, base.plain_ops), rel(p.pgbench_ops, base.pgbench_ops))
    }
}

pub fn scaling_row(p: &Point, earlier: &[Point], latency: bool) -> String {
    let (ours, plain, twin) = growth(p, earlier, latency);
    format!(
        "| {}{} | {} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        p.kind,
        notes(p),
        p.size.map(super::workload::short).unwrap_or_default(),
        match pg_clients(p).strip_suffix(" (capped)") {
            Some(c) => format!("{} (pgbench {c})", p.clients),
            None => p.clients.to_string(),
        },
        p.ours_ops,
        p.ours_p50_ms,
        p.ours_p99_ms,
        opt(p.plain_ops, 0),
        opt(p.pgbench_ops, 0),
        opt(p.ratio_plain, 2),
        opt(p.ratio, 2),
        opt(p.plain_p50_ms, 2),
        opt(p.plain_p99_ms, 2),
        opt(p.pgbench_p50_ms, 2),
        opt(p.pgbench_p99_ms, 2),
        times(ours),
        times(plain),
        times(twin),
    )
}

/// The push-curve series as a grid: a row per request size N, a column per
/// spread P (1, 100, 1000, then P = N), each cell the median time of one
/// request on the three sides. Read down a column for linear in N (N grows
/// 16x, then 6.25x), along a row for flat in P. `None` for other series.
pub fn curve_grid(points: &[Point], series: &str) -> Option<String> {
    if series != "push-curve" {
        return None;
    }
    let pts: Vec<&Point> = points.iter().filter(|p| p.series == series).collect();
    let mut sizes: Vec<u32> = pts.iter().map(|p| p.rows_per_op).collect();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() {
        return None;
    }
    let cell = |n: u32, parts: u32| -> String {
        let Some(p) = pts.iter().find(|p| p.rows_per_op == n && p.size == Some(parts)) else {
            return "-".into();
        };
        format!(
            "{:.2} / {} / {}{}",
            p.ours_p50_ms,
            opt(p.pgbench_p50_ms, 2),
            opt(p.plain_p50_ms, 2),
            notes(p)
        )
    };
    let mut md = String::from(
        "Push curve: median ms per request, ours / twin / plain (one client, sequential requests)\n\n\
         | N items | P = 1 | P = 100 | P = 1000 | P = N |\n| ---: | ---: | ---: | ---: | ---: |\n",
    );
    for n in sizes {
        let row = [1, 100, 1000, n].map(|parts| cell(n, parts)).join(" | ");
        md.push_str(&format!("| {n} | {row} |\n"));
    }
    Some(md)
}

/// The pop-sweep series in one table: a row per kind of pop and client
/// count, ops/s and ours/plain at each size, and the time per op at the
/// largest size over the smallest (100k against 1k partitions), from the
/// p50 and from the throughput (1 / ops/s), ours and plain. `None` for
/// other series.
pub fn size_growth(points: &[Point], series: &str) -> Option<String> {
    if series != "pop-sweep" {
        return None;
    }
    let pts: Vec<&Point> = points.iter().filter(|p| p.series == series).collect();
    let mut sizes: Vec<u32> = pts.iter().filter_map(|p| p.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let (first, last) = (*sizes.first()?, *sizes.last()?);
    let mut lines: Vec<(String, usize)> = Vec::new();
    for p in &pts {
        if !lines.contains(&(p.kind.clone(), p.clients)) {
            lines.push((p.kind.clone(), p.clients));
        }
    }
    let names: Vec<String> = sizes.iter().map(|&n| super::workload::short(n)).collect();
    let mut md = format!(
        "Pop + ack vs partitions: ops/s and ours/plain at {sizes}; time per op at {big} over {small}, \
         from p50 and from 1 / ops/s\n\n\
         | pop | clients | ours ops/s | plain tx/s | ours/plain | ours {big}/{small}, p50 | ours {big}/{small}, 1/ops | plain {big}/{small}, p50 | plain {big}/{small}, 1/ops |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        sizes = names.join(" / "),
        big = super::workload::short(last),
        small = super::workload::short(first),
    );
    for (kind, clients) in lines {
        let at = |n: u32| pts.iter().find(|p| p.kind == kind && p.clients == clients && p.size == Some(n));
        let join = |f: &dyn Fn(&Point) -> String| {
            sizes
                .iter()
                .map(|&n| at(n).map_or_else(|| "-".to_owned(), |p| f(p)))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => times(Some(a / b)),
            _ => "n/a".to_owned(),
        };
        let (small, big) = (at(first), at(last));
        let get = |p: Option<&&Point>, f: fn(&Point) -> Option<f64>| p.and_then(|p| f(p));
        md.push_str(&format!(
            "| {kind} | {clients} | {} | {} | {} | {} | {} | {} | {} |\n",
            join(&|p| format!("{:.0}{}", p.ours_ops, notes(p))),
            join(&|p| opt(p.plain_ops, 0)),
            join(&|p| opt(p.ratio_plain, 2)),
            ratio(get(big, |p| Some(p.ours_p50_ms)), get(small, |p| Some(p.ours_p50_ms))),
            ratio(get(small, |p| Some(p.ours_ops)), get(big, |p| Some(p.ours_ops))),
            ratio(get(big, |p| p.plain_p50_ms), get(small, |p| p.plain_p50_ms)),
            ratio(get(small, |p| p.plain_ops), get(big, |p| p.plain_ops)),
        ));
    }
    Some(md)
}

fn times(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}x")).unwrap_or_else(|| "n/a".into())
}

fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_owned()
}

impl Report {
    pub fn new(stamp: u64, dir: PathBuf, config: serde_json::Value) -> Self {
        Report { stamp, dir, config, points: Vec::new(), series: Vec::new() }
    }

    fn markdown(&self) -> String {
        let mut md = String::new();
        let sweep: Vec<&Point> = self.points.iter().filter(|p| p.series == "sweep").collect();
        if !sweep.is_empty() {
            md.push_str("### Concurrency sweep\n\n");
            md.push_str(SWEEP_HEADER);
            md.push('\n');
            for p in &sweep {
                md.push_str(&sweep_row(p));
                md.push('\n');
            }
            let batches: String = sweep.iter().map(|p| batch_rows(p)).collect();
            if !batches.is_empty() {
                md.push_str("\n### Batch sizes (requests per statement, our side of each point)\n\n");
                md.push_str(BATCH_HEADER);
                md.push('\n');
                md.push_str(&batches);
            }
        }
        for s in &self.series {
            md.push_str(&format!("\n### {} ({})\n\n{SCALING_HEADER}\n", s.title, s.unit));
            let mut earlier: Vec<&Point> = Vec::new();
            for p in self.points.iter().filter(|p| p.series == s.key) {
                md.push_str(&scaling_row_refs(p, &earlier, s.latency));
                md.push('\n');
                earlier.push(p);
            }
            if let Some(grid) = curve_grid(&self.points, &s.key) {
                md.push('\n');
                md.push_str(&grid);
            }
            if let Some(growth) = size_growth(&self.points, &s.key) {
                md.push('\n');
                md.push_str(&growth);
            }
        }
        md
    }

    /// Writes `results.json`, `results.md` and the charts; returns the directory.
    pub fn write(&self) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(&self.dir).with_context(|| format!("creating {}", self.dir.display()))?;
        let json = serde_json::json!({
            "stamp": self.stamp,
            "config": self.config,
            "series": self.series,
            "points": self.points,
        });
        std::fs::write(self.dir.join("results.json"), serde_json::to_string_pretty(&json)?)?;
        std::fs::write(self.dir.join("results.md"), self.markdown())?;
        match font() {
            Some(()) => {
                self.sweep_charts()?;
                self.scaling_charts()?;
            }
            None => eprintln!(
                "no TrueType font found (set QUEEN_BENCH_FONT, or install fonts-dejavu-core): charts skipped"
            ),
        }
        Ok(self.dir.clone())
    }

    fn sweep_charts(&self) -> anyhow::Result<()> {
        let mut names: Vec<&str> = Vec::new();
        for p in self.points.iter().filter(|p| p.series == "sweep") {
            if !names.contains(&p.workload.as_str()) {
                names.push(&p.workload);
            }
        }
        for name in names {
            let pts: Vec<&Point> =
                self.points.iter().filter(|p| p.series == "sweep" && p.workload == name).collect();
            if pts.len() < 2 {
                continue;
            }
            let path = self.dir.join(format!("sweep-{}.png", slug(name)));
            let ours: Vec<(f64, f64)> = pts.iter().map(|p| (p.clients as f64, p.ours_ops)).collect();
            let pg: Vec<(f64, f64)> =
                pts.iter().filter_map(|p| Some((p.pgbench_clients? as f64, p.pgbench_ops?))).collect();
            let plain: Vec<(f64, f64)> =
                pts.iter().filter_map(|p| Some((p.plain_clients? as f64, p.plain_ops?))).collect();
            let ours_p99: Vec<(f64, f64)> = pts.iter().map(|p| (p.clients as f64, p.ours_p99_ms)).collect();
            let pg_p99: Vec<(f64, f64)> =
                pts.iter().filter_map(|p| Some((p.pgbench_clients? as f64, p.pgbench_p99_ms?))).collect();
            let plain_p99: Vec<(f64, f64)> =
                pts.iter().filter_map(|p| Some((p.plain_clients? as f64, p.plain_p99_ms?))).collect();
            two_panels(
                &path,
                &format!("{name}: ours over HTTP vs pgbench (our SQL: twin; plain SQL), same run"),
                "clients",
                [
                    Panel { y: "ops/s", lines: vec![("ours", ours), ("twin", pg), ("plain SQL", plain)] },
                    Panel {
                        y: "p99 ms",
                        lines: vec![
                            ("ours p99", ours_p99),
                            ("twin p99", pg_p99),
                            ("plain SQL p99", plain_p99),
                        ],
                    },
                ],
            )?;
        }
        Ok(())
    }

    fn scaling_charts(&self) -> anyhow::Result<()> {
        for s in &self.series {
            let pts: Vec<&Point> = self.points.iter().filter(|p| p.series == s.key).collect();
            let mut keys: Vec<(String, usize)> = Vec::new();
            for p in &pts {
                if !keys.contains(&(p.kind.clone(), p.clients)) {
                    keys.push((p.kind.clone(), p.clients));
                }
            }
            let mut cost = Vec::new();
            let mut ratio = Vec::new();
            for (kind, clients) in &keys {
                let line: Vec<&&Point> =
                    pts.iter().filter(|p| &p.kind == kind && p.clients == *clients).collect();
                let x = |p: &Point| f64::from(p.size.unwrap_or(1));
                let (ours_y, plain_y, twin_y): (Pick, Pick, Pick) = if s.latency {
                    (|p| Some(p.ours_p50_ms), |p| p.plain_p50_ms, |p| p.pgbench_p50_ms)
                } else {
                    (|p| Some(p.ours_ops), |p| p.plain_ops, |p| p.pgbench_ops)
                };
                let what = if s.latency { " p50" } else { "" };
                for (side, y) in [("ours", ours_y), ("plain SQL", plain_y), ("twin", twin_y)] {
                    cost.push((
                        format!("{kind} x{clients} {side}{what}"),
                        line.iter().filter_map(|p| Some((x(p), y(p)?))).collect::<Vec<_>>(),
                    ));
                }
                ratio.push((
                    format!("{kind} x{clients} ours/plain"),
                    line.iter().filter_map(|p| Some((x(p), p.ratio_plain?))).collect::<Vec<_>>(),
                ));
                ratio.push((
                    format!("{kind} x{clients} ours/twin"),
                    line.iter().filter_map(|p| Some((x(p), p.ratio?))).collect::<Vec<_>>(),
                ));
            }
            let path = self.dir.join(format!("scaling-{}.png", slug(&s.key)));
            let cost_y = if s.latency { "p50 ms per op" } else { "ops/s" };
            let cost = cost.iter().map(|(n, l)| (n.as_str(), l.clone())).collect();
            let ratio = ratio.iter().map(|(n, l)| (n.as_str(), l.clone())).collect();
            two_panels(
                &path,
                &s.title,
                &s.unit,
                [Panel { y: cost_y, lines: cost }, Panel { y: RATIO_Y, lines: ratio }],
            )?;
        }
        Ok(())
    }
}

fn scaling_row_refs(p: &Point, earlier: &[&Point], latency: bool) -> String {
    // growth() wants the first point of the same line; find it among refs.
    let first = earlier.iter().find(|e| e.series == p.series && e.kind == p.kind && e.clients == p.clients);
    match first {
        Some(f) => scaling_row(p, std::slice::from_ref(*f), latency),
        None => scaling_row(p, &[], latency),
    }
}

/// Registers the chart font (plotters draws text with ab_glyph, which needs
/// the font's bytes): QUEEN_BENCH_FONT, else a DejaVu or Liberation sans.
pub(super) fn font() -> Option<()> {
    let candidates = std::env::var("QUEEN_BENCH_FONT").into_iter().chain(
        [
            "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/dejavu/DejaVuSans.ttf",
            "/usr/share/fonts/TTF/DejaVuSans.ttf",
            "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        ]
        .map(String::from),
    );
    for path in candidates {
        if let Ok(bytes) = std::fs::read(&path) {
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                return Some(());
            }
        }
    }
    None
}

struct Panel<'a> {
    y: &'a str,
    lines: Vec<(&'a str, Vec<(f64, f64)>)>,
}

pub(super) const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Two charts side by side over the same log-scaled x axis.
fn two_panels(path: &Path, title: &str, x_label: &str, panels: [Panel<'_>; 2]) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, (1400, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let root = root.titled(title, ("sans-serif", 24)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let halves = root.split_evenly((1, 2));
    for (area, panel) in halves.iter().zip(panels.iter()) {
        let xs = panel.lines.iter().flat_map(|(_, l)| l.iter().map(|p| p.0));
        let ys = panel.lines.iter().flat_map(|(_, l)| l.iter().map(|p| p.1));
        let (x_min, x_max) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
        let y_max = ys.fold(0.0f64, f64::max);
        if x_min > x_max {
            continue;
        }
        let x_range = (x_min * 0.8).max(0.5)..(x_max * 1.25).max(x_min + 1.0);
        let mut chart = ChartBuilder::on(area)
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(x_range.log_scale(), 0.0..(y_max * 1.15).max(1e-3))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(panel.y)
            .light_line_style(WHITE)
            .x_label_formatter(&|x| super::workload::short(x.round() as u32))
            .label_style(("sans-serif", 14))
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let ratio_panel = panel.y == RATIO_Y;
        for (i, (name, line)) in panel.lines.iter().enumerate() {
            if line.is_empty() {
                continue;
            }
            let color = COLORS[i % COLORS.len()];
            // Ours is solid, pgbench's lines (twin, plain SQL) are dashed;
            // in the ratio panel ours/twin is dashed.
            let dashed = if ratio_panel { name.ends_with("ours/twin") } else { !name.contains("ours") };
            if dashed {
                chart
                    .draw_series(DashedLineSeries::new(line.iter().copied(), 8, 5, color.stroke_width(3)))
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .label(*name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
            } else {
                chart
                    .draw_series(LineSeries::new(line.iter().copied(), color.stroke_width(3)).point_size(4))
                    .map_err(|e| anyhow::anyhow!("{e}"))?
                    .label(*name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
            }
        }
        if ratio_panel {
            chart
                .draw_series(LineSeries::new(
                    [(x_min * 0.8, 1.0), (x_max * 1.25, 1.0)],
                    BLACK.stroke_width(1),
                ))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}
