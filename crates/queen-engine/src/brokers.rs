//! The registry of live brokers: every engine upserts its row in
//! `queen.brokers` every few seconds with the figures only it knows (its
//! pool, its long polls, its memory), so any broker can list every broker on
//! the database. Advisory: a broker that stops beating is forgotten after
//! [`STALE_AFTER_SECONDS`]; nothing correct depends on the table.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use uuid::Uuid;

use crate::db::Pool;
use crate::notifier::Waiters;
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

async fn beat(pool: &Pool, waiters: &Waiters, me: &Identity) -> Result<(), EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(include_str!("../sql/statements/broker_beat.sql")).await?;
    let pid = std::process::id() as i32;
    let figures = figures(pool, waiters, me).to_string();
    client
        .execute(
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
    Ok(())
}

/// Beats until shutdown.
pub(crate) async fn run_registry(
    pool: Pool,
    waiters: Arc<Waiters>,
    me: Arc<Identity>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if let Err(e) = beat(&pool, &waiters, &me).await {
            tracing::debug!(error = %e, "broker heartbeat failed");
        }
        tokio::select! {
            _ = tokio::time::sleep(BEAT_EVERY) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Deletes this broker's row, so a graceful stop leaves the list at once.
pub(crate) async fn leave(pool: &Pool, me: &Identity) -> Result<(), EngineError> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached("DELETE FROM queen.brokers WHERE id = $1").await?;
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
