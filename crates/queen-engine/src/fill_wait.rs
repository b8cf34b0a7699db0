//! `minPopWaitTime` (Queen 1.6): a long poll asking for a batch larger than
//! one, on a queue whose backlog is not empty but smaller than the batch,
//! may hold off its claim up to that many milliseconds (never past its own
//! deadline), so one pop and one commit carry more messages. Pops of queues
//! without the option pay nothing: the option is cached per queue.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long a queue's cached option is trusted (a configure on another
/// broker is seen within this).
const FRESH_FOR: Duration = Duration::from_secs(5);

/// Each queue's `minPopWaitTime`, as last read.
#[derive(Default)]
pub(crate) struct FillWaits(Mutex<HashMap<String, (Duration, Instant)>>);

impl FillWaits {
    pub(crate) fn cached(&self, queue: &str) -> Option<Duration> {
        let map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(queue).filter(|(_, at)| at.elapsed() < FRESH_FOR).map(|(wait, _)| *wait)
    }

    /// Records a queue's option (read, or just configured on this broker).
    pub(crate) fn learn(&self, queue: &str, millis: u64) {
        let mut map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.insert(queue.to_owned(), (Duration::from_millis(millis.min(60_000)), Instant::now()));
    }
}
