//! The background loops of an engine, in one shape ([`run`]): wake every
//! interval (or when told), do bounded steps until there is nothing more to
//! do now, back off (capped, logged once) while PostgreSQL is away, stop at
//! shutdown. Each loop's rules live in SQL; a loop only drives them.
//!
//! Here: the KV sweeper, the retention sweeper, the queue gauges and the
//! timer sweeper. Elsewhere, with shapes of their own: the LISTEN
//! connection (`notifier.rs`, a held connection, not a step), the broker
//! registry's heartbeat (`registry.rs`) and the ephemeral queues' expiry and
//! ownership renewal (`ephemeral.rs`, in memory and fenced by epoch).

pub(crate) mod gauges;
pub(crate) mod kv_sweep;
pub(crate) mod retention;
pub(crate) mod timers;

use std::future::Future;
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::outage::Outage;
use crate::EngineError;

/// What a loop does after a step.
pub(crate) enum Next {
    /// Another step at once: this one found a full batch.
    Again,
    /// Nothing more now: sleep the loop's interval.
    Sleep,
    /// Nothing more now: sleep this long (the next due timer, say).
    SleepFor(Duration),
}

/// One background loop: `task` names it in the logs. After each wake-up it
/// runs `step` until a step answers other than [`Next::Again`], at most
/// `max_steps` times; a failed step ends the round and the loop backs off.
pub(crate) async fn run<F, Fut>(
    task: &'static str,
    every: Duration,
    max_steps: usize,
    wake: Option<&Notify>,
    mut shutdown: watch::Receiver<bool>,
    mut step: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Next, EngineError>>,
{
    let mut outage = Outage::new(task);
    let mut pause = every;
    loop {
        let woken = async {
            match &wake {
                Some(w) => w.notified().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = woken => {}
            _ = shutdown.changed() => return,
        }
        pause = every;
        for _ in 0..max_steps.max(1) {
            match step().await {
                Ok(Next::Again) if !*shutdown.borrow() => outage.ok(),
                Ok(Next::Again | Next::Sleep) => {
                    outage.ok();
                    break;
                }
                Ok(Next::SleepFor(d)) => {
                    outage.ok();
                    pause = d;
                    break;
                }
                Err(e) => {
                    pause = every.max(outage.failed(&e));
                    break;
                }
            }
        }
    }
}
