//! `Engine`'s calls of `crate::spool`: the facade over that module.

use crate::push::PushItem;
use crate::spool::*;
use crate::{Engine, EngineError, Json};
use std::fs::{self, File};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl Engine {
    /// Spools `items` (their transaction ids drawn) and answers the 201 body
    /// Queen gives: one `buffered` entry per item.
    pub(crate) fn spool_items(
        &self,
        spool: &Spool,
        items: &[PushItem],
        cause: EngineError,
    ) -> Result<Json, EngineError> {
        let spooled: Vec<SpooledItem> = items
            .iter()
            .map(|it| SpooledItem {
                queue: it.queue.clone(),
                partition: it.partition.clone(),
                transaction_id: it
                    .transaction_id
                    .clone()
                    .or_else(|| it.drawn_id.clone())
                    .unwrap_or_else(|| uuid::Uuid::new_v4().to_string()),
                trace_id: it.trace_id.clone(),
                payload: it.payload.clone(),
                producer_sub: it.producer_sub.clone(),
            })
            .collect();
        match spool.append(&spooled) {
            Ok(()) => {}
            Err(SpoolError::Full(limit)) => {
                tracing::warn!(limit, "the push spool is full; answering 503");
                return Err(cause);
            }
            Err(SpoolError::Io(e)) => {
                tracing::error!(error = %e, "the push spool cannot be written; answering 503");
                return Err(cause);
            }
        }
        let answer: Vec<serde_json::Value> = spooled
            .iter()
            .enumerate()
            .map(|(index, it)| {
                serde_json::json!({
                    "index": index,
                    "message_id": null,
                    "transaction_id": it.transaction_id,
                    "transactionId": it.transaction_id,
                    "queueName": it.queue,
                    "queue": it.queue,
                    "partition": it.partition,
                    "status": "buffered",
                })
            })
            .collect();
        Ok(Json(serde_json::Value::Array(answer).to_string()))
    }

    /// Starts the drainer of this engine's spool (no-op without one, or when
    /// started already). `queen_server::serve` calls it.
    pub fn start_spool_drain(self: &Arc<Self>) {
        let Some(spool) = self.spool.clone() else { return };
        if spool.draining.swap(true, Ordering::SeqCst) {
            return;
        }
        let engine = Arc::downgrade(self);
        let mut shutdown = self.shutdown_signal();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(200);
            loop {
                let outcome = match engine.upgrade() {
                    Some(engine) => engine.drain_spool(&spool).await,
                    None => return,
                };
                let nap = match outcome {
                    Drained::All => {
                        backoff = Duration::from_millis(200);
                        // Idle until a record is spooled (or a dead broker's may be found).
                        Duration::from_secs(5)
                    }
                    Drained::NotNow => {
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                        backoff
                    }
                };
                tokio::select! {
                    _ = spool.wake.notified(), if matches!(outcome, Drained::All) => {}
                    _ = tokio::time::sleep(nap) => {}
                    _ = shutdown.changed() => { spool.close(); return; }
                }
                if *shutdown.borrow() {
                    spool.close();
                    return;
                }
            }
        });
    }

    /// One pass: adopted segments first, then this broker's sealed ones.
    async fn drain_spool(&self, spool: &Spool) -> Drained {
        if self.awaiting_migration() {
            return Drained::NotNow;
        }
        spool.adopt_orphans();
        if !spool.holds_records() {
            return Drained::All;
        }
        spool.rotate();
        let current = spool.writer.lock().map(|w| w.seq).unwrap_or(u64::MAX);
        let adopted: Vec<String> =
            spool.adopted.lock().map(|a| a.keys().cloned().collect()).unwrap_or_default();
        for broker in adopted {
            for (segment, _) in spool.segments_of(&broker) {
                if let Drained::NotNow = self.drain_segment(spool, &segment).await {
                    return Drained::NotNow;
                }
            }
            // All of a dead broker's records are in: its lock file goes.
            let _ = fs::remove_file(spool.dir.join(lock_name(&broker)));
            if let Ok(mut a) = spool.adopted.lock() {
                a.remove(&broker);
            }
        }
        for (segment, seq) in spool.segments_of(&spool.broker) {
            if seq >= current {
                break;
            }
            if let Drained::NotNow = self.drain_segment(spool, &segment).await {
                return Drained::NotNow;
            }
        }
        Drained::All
    }

    async fn drain_segment(&self, spool: &Spool, segment: &str) -> Drained {
        let path = spool.dir.join(segment);
        let done_path = spool.done_path(segment);
        let done = read_offset(&done_path);
        let read = File::open(&path).and_then(|mut f| {
            let len = f.metadata()?.len();
            read_frames(&mut f, done).map(|r| (r, len))
        });
        let ((records, damage), len) = match read {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(segment, error = %e, "cannot read a push spool segment; will retry");
                return Drained::NotNow;
            }
        };
        let mut at = done;
        let mut records = records.into_iter().peekable();
        while records.peek().is_some() {
            // Records drain in groups of up to `drain_items` items, one push
            // (one commit) each, in arrival order: a broker back from an
            // outage catches up faster than pushes arrive.
            let (mut items, mut count, mut end) = (Vec::new(), 0u64, at);
            while let Some((record, record_end)) =
                records.next_if(|(r, _)| items.is_empty() || items.len() + r.items.len() <= spool.drain_items)
            {
                items.extend(record.items.into_iter().map(|it| PushItem {
                    queue: it.queue,
                    partition: it.partition,
                    transaction_id: Some(it.transaction_id),
                    trace_id: it.trace_id,
                    payload: it.payload,
                    producer_sub: it.producer_sub,
                    drawn_id: None,
                }));
                count += 1;
                end = record_end;
            }
            let n = items.len() as u64;
            match self.push_now(&items).await {
                Ok(_) => spool.db_healthy.store(true, Ordering::Relaxed),
                Err(
                    EngineError::Unavailable(e)
                    | EngineError::Paused(e)
                    | EngineError::Conflict(e)
                    | EngineError::Timeout { message: e, .. },
                ) => {
                    spool.db_healthy.store(false, Ordering::Relaxed);
                    tracing::debug!(error = %e, "the push spool waits for the database");
                    return Drained::NotNow;
                }
                Err(e) => {
                    // The items were checked before they were spooled: a
                    // refusal now (a queue deleted and recreated encrypted
                    // without a key, say) would refuse forever. Count it
                    // and go on rather than block the spool behind it.
                    tracing::error!(segment, offset = at, error = %e, "spooled pushes were refused; skipping them");
                    spool.counts().failed += count;
                }
            }
            if let Err(e) = write_offset(&done_path, end) {
                tracing::error!(segment, error = %e, "cannot record the push spool's progress; will retry");
                return Drained::NotNow;
            }
            let mut c = spool.counts();
            c.records = c.records.saturating_sub(count);
            c.items = c.items.saturating_sub(n);
            c.bytes = c.bytes.saturating_sub(end - at);
            c.drained_items += n;
            drop(c);
            at = end;
        }
        if let Some((offset, reason)) = damage {
            tracing::error!(segment, offset, %reason, "a damaged push spool segment; its tail is skipped and kept as .corrupt");
            let mut c = spool.counts();
            c.failed += 1;
            c.bytes = c.bytes.saturating_sub(len.saturating_sub(at));
            c.damage.push(Damage { file: segment.to_owned(), offset, reason });
            drop(c);
            let _ = fs::rename(&path, spool.dir.join(format!("{segment}.corrupt")));
        } else {
            let _ = fs::remove_file(&path);
        }
        let _ = fs::remove_file(&done_path);
        let _ = sync_dir(&spool.dir);
        Drained::All
    }
}
