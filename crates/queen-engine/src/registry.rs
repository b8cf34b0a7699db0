//! The registry of live brokers: every engine upserts its row in
//! `queen.brokers` every few seconds with the figures only it knows (its
//! pool, its long polls, its memory), so any broker can list every broker on
//! the database. Advisory: a broker that stops beating is forgotten after
//! [`STALE_AFTER_SECONDS`]; nothing correct depends on the table.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use uuid::Uuid;

use crate::db::Pool;
use crate::notifier::{Announcer, Waiters};
use crate::{EngineError, Json};

/// How often a broker writes its row.
const BEAT_EVERY: Duration = Duration::from_secs(5);
/// A broker not heard from for this long is gone.
pub const STALE_AFTER_SECONDS: f64 = 30.0;

/// This process's resident memory, from /proc (Linux); `None` elsewhere.
pub fn process_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// This engine's traffic counters since it started: messages pushed, pops
/// that delivered, messages acked. Counted after success, with relaxed
/// atomics (hot paths); the heartbeat adds their growth to
/// `queen.broker_minutes`.
#[derive(Default)]
pub struct Traffic {
    pushed: AtomicU64,
    popped: AtomicU64,
    acked: AtomicU64,
    /// The totals already written to `queen.broker_minutes`; held across
    /// the write, so two flushes never write the same growth twice.
    written: tokio::sync::Mutex<TrafficTotals>,
}

/// A reading of the [`Traffic`] counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TrafficTotals {
    /// Messages pushed (items of accepted push calls and bundles).
    pub pushed: u64,
    /// Pop answers that delivered messages.
    pub popped: u64,
    /// Messages acked (items of accepted ack calls and bundles).
    pub acked: u64,
}

impl TrafficTotals {
    /// The growth from `written` to `self`: what a heartbeat still has to
    /// write. A failed write leaves `written` alone, so its growth is
    /// carried into the next one.
    pub fn since(self, written: TrafficTotals) -> TrafficTotals {
        TrafficTotals {
            pushed: self.pushed.wrapping_sub(written.pushed),
            popped: self.popped.wrapping_sub(written.popped),
            acked: self.acked.wrapping_sub(written.acked),
        }
    }

    /// `self` plus a written growth.
    pub fn plus(self, d: TrafficTotals) -> TrafficTotals {
        TrafficTotals {
            pushed: self.pushed.wrapping_add(d.pushed),
            popped: self.popped.wrapping_add(d.popped),
            acked: self.acked.wrapping_add(d.acked),
        }
    }
}

impl Traffic {
    pub(crate) fn pushed(&self, n: usize) {
        self.pushed.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn popped(&self) {
        self.popped.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn acked(&self, n: usize) {
        self.acked.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The counters now.
    pub fn totals(&self) -> TrafficTotals {
        TrafficTotals {
            pushed: self.pushed.load(Ordering::Relaxed),
            popped: self.popped.load(Ordering::Relaxed),
            acked: self.acked.load(Ordering::Relaxed),
        }
    }
}

/// Adds the traffic not yet written to this minute's row of this broker
/// (and deletes the rows older than two hours). Only a successful write
/// moves the written mark.
pub(crate) async fn flush_traffic(pool: &Pool, me: &Identity, traffic: &Traffic) -> Result<(), EngineError> {
    let mut written = traffic.written.lock().await;
    let now = traffic.totals();
    let d = now.since(*written);
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/broker_minutes.sql")).await?;
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    client.execute(&stmt, &[&me.id, &as_i64(d.pushed), &as_i64(d.popped), &as_i64(d.acked)]).await?;
    *written = written.plus(d);
    Ok(())
}

/// One minute of traffic summed over every broker on the database.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TrafficMinute {
    /// The minute's start (UTC, ISO 8601).
    pub minute: String,
    /// Messages pushed.
    pub pushed: i64,
    /// Pop answers that delivered.
    pub popped: i64,
    /// Messages acked.
    pub acked: i64,
}

/// The last 60 minutes, oldest first (the current minute last).
pub(crate) async fn traffic_hour(pool: &Pool) -> Result<Vec<TrafficMinute>, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/traffic_hour.sql")).await?;
    let rows = client.query(&stmt, &[]).await?;
    rows.iter()
        .map(|r| {
            Ok(TrafficMinute {
                minute: r.try_get(0)?,
                pushed: r.try_get(1)?,
                popped: r.try_get(2)?,
                acked: r.try_get(3)?,
            })
        })
        .collect()
}

/// Who this broker is, fixed at start.
pub(crate) struct Identity {
    pub id: Uuid,
    pub url: String,
    pub started: SystemTime,
    pub started_instant: std::time::Instant,
}

fn figures(pool: &Pool, waiters: &Waiters, me: &Identity) -> serde_json::Value {
    let s = pool.deadpool().status();
    serde_json::json!({
        "uptimeSeconds": me.started_instant.elapsed().as_secs(),
        "rssBytes": process_rss_bytes(),
        "longPollsWaiting": waiters.queues_waiting(),
        "pool": {"size": s.size, "idle": s.available, "max": s.max_size},
    })
}

/// Upserts this broker's row; answers how many other brokers are live.
async fn beat(pool: &Pool, waiters: &Waiters, me: &Identity) -> Result<i64, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/broker_beat.sql")).await?;
    let pid = std::process::id() as i32;
    let figures = figures(pool, waiters, me).to_string();
    let row = client
        .query_one(
            &stmt,
            &[
                &me.id,
                &me.url,
                &hostname(),
                &pid,
                &env!("CARGO_PKG_VERSION"),
                &me.started,
                &STALE_AFTER_SECONDS,
                &figures,
            ],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// Tells the brokers already on the database that this one is here
/// (`Announcer::hello`), once its row is committed.
async fn say_hello(pool: &Pool, announcer: &Announcer) -> Result<(), EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached("SELECT pg_notify($1, $2)").await?;
    client.execute(&stmt, &[&crate::notifier::CHANNEL, &announcer.hello()]).await?;
    Ok(())
}

/// Beats until shutdown; tells the announcer whether other brokers are live.
pub(crate) async fn run_registry(
    pool: Pool,
    waiters: Arc<Waiters>,
    announcer: Arc<Announcer>,
    me: Arc<Identity>,
    traffic: Arc<Traffic>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut greeted = false;
    let mut outage = crate::outage::Outage::new("broker heartbeat");
    loop {
        let mark = announcer.hello_mark();
        let mut pause = BEAT_EVERY;
        match beat(&pool, &waiters, &me).await {
            Ok(others) => {
                outage.ok();
                announcer.registry_read(mark, others);
                if !greeted && announcer.enabled() {
                    match say_hello(&pool, &announcer).await {
                        Ok(()) => greeted = true,
                        Err(e) => tracing::debug!(error = %e, "cannot greet the other brokers"),
                    }
                }
            }
            Err(e) => pause = BEAT_EVERY.max(outage.failed(&e)),
        }
        if let Err(e) = flush_traffic(&pool, &me, &traffic).await {
            tracing::debug!(error = %e, "writing the broker's traffic failed (carried to the next beat)");
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Deletes this broker's row, so a graceful stop leaves the list at once.
pub(crate) async fn leave(pool: &Pool, me: &Identity) -> Result<(), EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/broker_leave.sql")).await?;
    client.execute(&stmt, &[&me.id]).await?;
    Ok(())
}

/// The live brokers as JSON (oldest first).
pub(crate) async fn list(pool: &Pool) -> Result<Json, EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/brokers.sql")).await?;
    let row = client.query_one(&stmt, &[&STALE_AFTER_SECONDS]).await?;
    Ok(Json(row.try_get(0)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_not_written_is_carried_to_the_next_beat() {
        let t = Traffic::default();
        t.pushed(5);
        t.popped();
        t.acked(3);
        let mut written = TrafficTotals::default();
        // The first beat fails: nothing is marked written.
        let first = t.totals().since(written);
        assert_eq!(first, TrafficTotals { pushed: 5, popped: 1, acked: 3 });
        t.pushed(2);
        // The next beat writes both beats' growth, then only what came after.
        let second = t.totals().since(written);
        assert_eq!(second, TrafficTotals { pushed: 7, popped: 1, acked: 3 });
        written = written.plus(second);
        t.acked(1);
        assert_eq!(t.totals().since(written), TrafficTotals { pushed: 0, popped: 0, acked: 1 });
        assert_eq!(written.plus(t.totals().since(written)), t.totals());
    }
}
