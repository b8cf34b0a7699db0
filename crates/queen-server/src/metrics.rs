//! Prometheus metrics: request counters and latency histograms by route
//! and status, KV verdicts by op and outcome (a lost race is a verdict, not
//! an error), and, at scrape time, figures read from PostgreSQL.

use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The process-wide recorder (installed on first use; `None` if another
/// recorder was installed first).
pub(crate) fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets(&[
                    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0,
                ])
                .ok()?
                .install_recorder()
                .ok()
                .inspect(spawn_upkeep)
        })
        .as_ref()
}

/// Histogram samples are kept until upkeep folds them into buckets, which
/// otherwise happens only when `/metrics/prometheus` is scraped: a broker
/// nobody scrapes grew by every request's sample (the soak showed about
/// 27 MB an hour at 300 requests/s). A plain thread, so the recorder can be
/// installed outside a runtime.
fn spawn_upkeep(handle: &PrometheusHandle) {
    let handle = handle.clone();
    let spawned = std::thread::Builder::new().name("metrics-upkeep".into()).spawn(move || loop {
        std::thread::sleep(std::time::Duration::from_secs(5));
        handle.run_upkeep();
    });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no metrics upkeep thread: histograms grow until scraped");
    }
}

/// The counters named `name`, as (labels, value), read from the recorder's
/// text rendering: the dashboard's figures of this broker (empty when no
/// recorder is installed).
pub(crate) fn counters(name: &str) -> Vec<(Vec<(String, String)>, f64)> {
    let Some(handle) = handle() else {
        return Vec::new();
    };
    let text = handle.render();
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, value) = rest.rsplit_once("} ")?;
            Some((parse_labels(labels), value.trim().parse().ok()?))
        })
        .collect()
}

/// `a="x",b="y"` (with `\"` and `\\` escapes) as pairs.
fn parse_labels(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, next)) = chars.next() {
                        value.push(match next {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                other => value.push(other),
            }
        }
        out.push((key.trim_start_matches(',').to_owned(), value));
        rest = &after[end..];
    }
    out
}

/// The route label of a request: its template (never the raw URI, so KV
/// keys in path routes do not become label values).
pub(crate) fn route_of(req: &Request) -> Option<std::sync::Arc<str>> {
    req.extensions().get::<MatchedPath>().map(|p| interned(p.as_str()))
}

/// Counts and times one answered request by route, method and status. The
/// label texts are interned: none is allocated per request.
pub(crate) fn record_request(
    route: Option<std::sync::Arc<str>>,
    method: &axum::http::Method,
    code: axum::http::StatusCode,
    started: Instant,
) {
    let route: metrics::SharedString = match route {
        Some(route) => route.into(),
        None => metrics::SharedString::const_str("unmatched"),
    };
    let labels = [
        metrics::Label::new("route", route),
        metrics::Label::new("method", interned(method.as_str())),
        metrics::Label::new("status", interned(code.as_str())),
    ];
    metrics::counter!("queen_http_requests_total", labels.iter()).increment(1);
    metrics::histogram!("queen_http_request_duration_seconds", labels.iter())
        .record(started.elapsed().as_secs_f64());
}

/// Label texts seen so far (route templates, methods, statuses): a
/// handful, shared by every request.
fn interned(text: &str) -> std::sync::Arc<str> {
    use std::collections::HashSet;
    use std::sync::{Arc, RwLock};
    static TEXTS: OnceLock<RwLock<HashSet<Arc<str>>>> = OnceLock::new();
    let texts = TEXTS.get_or_init(Default::default);
    if let Some(known) = texts.read().unwrap_or_else(|e| e.into_inner()).get(text) {
        return known.clone();
    }
    let mut texts = texts.write().unwrap_or_else(|e| e.into_inner());
    // Another request may have added it between the two locks.
    if let Some(known) = texts.get(text) {
        return known.clone();
    }
    let new: Arc<str> = Arc::from(text);
    texts.insert(new.clone());
    new
}

/// Records the verdicts of a KV call: each op's, or the lost precondition
/// of a `required` one. Labels are interned.
pub(crate) fn record_kv(outcome: &queen_engine::KvOutcome) {
    match outcome {
        queen_engine::KvOutcome::PreconditionLost(lost) => {
            let verdict = format!("precondition_{}", lost.kv_reason);
            metrics::counter!("queen_kv_verdicts_total", "op" => "required", "verdict" => interned(&verdict))
                .increment(1);
        }
        queen_engine::KvOutcome::Done(results) => {
            for r in results {
                let verdict: metrics::SharedString = match (r.applied, r.found, r.reason.as_deref()) {
                    (Some(true), _, _) => metrics::SharedString::const_str("applied"),
                    (Some(false), _, Some(reason)) => interned(reason).into(),
                    (_, Some(true), _) => metrics::SharedString::const_str("found"),
                    (_, Some(false), _) => metrics::SharedString::const_str("missing"),
                    _ => metrics::SharedString::const_str("read"),
                };
                let op: metrics::SharedString = interned(&r.op).into();
                metrics::counter!("queen_kv_verdicts_total", "op" => op, "verdict" => verdict).increment(1);
            }
        }
    }
}

#[derive(serde::Deserialize)]
struct LockVerdicts {
    results: Vec<LockVerdict>,
}

#[derive(serde::Deserialize)]
struct LockVerdict {
    op: String,
    acquired: Option<bool>,
    renewed: Option<bool>,
    released: Option<bool>,
    reason: Option<String>,
}

/// Counts the verdicts of a locks answer: `queen_lock_verdicts_total{op, verdict}`.
pub(crate) fn record_locks(body: &str) {
    let Ok(v) = serde_json::from_str::<LockVerdicts>(body) else {
        return;
    };
    for r in v.results {
        let verdict = match (r.acquired.or(r.renewed).or(r.released), r.reason) {
            (Some(true), _) => "granted".to_owned(),
            (Some(false), Some(reason)) => reason,
            (Some(false), None) => "refused".to_owned(),
            (None, _) => "read".to_owned(),
        };
        metrics::counter!("queen_lock_verdicts_total", "op" => r.op, "verdict" => verdict).increment(1);
    }
}

#[derive(serde::Deserialize)]
struct TimerVerdicts {
    results: Vec<TimerVerdict>,
}

#[derive(serde::Deserialize)]
struct TimerVerdict {
    status: String,
}

/// Counts the verdicts of a timers answer: `queen_timer_ops_total{status}`.
pub(crate) fn record_timers(body: &str) {
    if let Ok(v) = serde_json::from_str::<TimerVerdicts>(body) {
        for r in v.results {
            metrics::counter!("queen_timer_ops_total", "status" => r.status).increment(1);
        }
    }
}

/// Counts the verdict of the cancel route.
pub(crate) fn record_timer_cancel(body: &str) {
    if let Ok(r) = serde_json::from_str::<TimerVerdict>(body) {
        metrics::counter!("queen_timer_ops_total", "status" => r.status).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::parse_labels;

    #[test]
    fn labels() {
        let pairs = parse_labels(r#"op="put",verdict="applied",route="/a\"b""#);
        let want: Vec<(String, String)> = [("op", "put"), ("verdict", "applied"), ("route", "/a\"b")]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(pairs, want);
        assert!(parse_labels("").is_empty());
    }
}
