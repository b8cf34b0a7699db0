//! Wakes long polls: one LISTEN connection per engine, fed by the
//! `pg_notify('queen_push', ...)` that every push call sends once. Missing a
//! notification only delays a waiter until its next fallback poll.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{watch, Notify};
use tokio_postgres::{AsyncMessage, NoTls};

/// The channel the push function notifies.
pub(crate) const CHANNEL: &str = "queen_push";

/// Long-poll waiters, by queue name.
#[derive(Default)]
pub(crate) struct Waiters {
    by_queue: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Waiters {
    /// The wake-up handle for a queue; release it with [`Waiters::release`].
    pub(crate) fn handle(&self, queue: &str) -> Arc<Notify> {
        let mut map = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(queue.to_owned()).or_default().clone()
    }

    /// Drops the map entry once its last waiter is gone, so queue names do not pile up.
    pub(crate) fn release(&self, queue: &str, handle: Arc<Notify>) {
        let mut map = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        // One reference is ours, one is the map's.
        if Arc::strong_count(&handle) <= 2 {
            map.remove(queue);
        }
    }

    /// Number of queues with at least one waiter.
    pub(crate) fn queues_waiting(&self) -> usize {
        self.by_queue.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    fn wake(&self, payload: &str) {
        let map = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        match serde_json::from_str::<Vec<String>>(payload) {
            Ok(queues) => {
                for q in queues {
                    if let Some(n) = map.get(&q) {
                        n.notify_waiters();
                    }
                }
            }
            // '*' (too many queues for one payload) or anything unexpected: wake everyone.
            Err(_) => map.values().for_each(|n| n.notify_waiters()),
        }
    }

    fn wake_all(&self) {
        let map = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().for_each(|n| n.notify_waiters());
    }
}

/// Keeps one LISTEN connection open until `shutdown` flips, reconnecting
/// with a delay when it drops.
pub(crate) async fn run(
    pg: tokio_postgres::Config,
    waiters: Arc<Waiters>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if *shutdown.borrow() {
            return;
        }
        match pg.connect(NoTls).await {
            Ok((client, mut connection)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let pump = tokio::spawn(async move {
                    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
                    while let Some(msg) = messages.next().await {
                        match msg {
                            Ok(AsyncMessage::Notification(n)) => {
                                if tx.send(n.payload().to_owned()).is_err() {
                                    break;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "notification connection failed");
                                break;
                            }
                        }
                    }
                });
                if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")).await {
                    tracing::warn!(error = %e, "LISTEN failed");
                } else {
                    // Anything pushed while we were not listening: let waiters re-check.
                    waiters.wake_all();
                    loop {
                        tokio::select! {
                            msg = rx.recv() => match msg {
                                Some(payload) => waiters.wake(&payload),
                                None => break,
                            },
                            _ = shutdown.changed() => {
                                pump.abort();
                                return;
                            }
                        }
                    }
                }
                pump.abort();
            }
            Err(e) => tracing::warn!(error = %e, "cannot open the notification connection"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = shutdown.changed() => return,
        }
    }
}
