//! How a background loop behaves while PostgreSQL is away: it backs off
//! (capped) instead of retrying at its own pace, and logs the change of
//! state once each way instead of a warning per attempt.

use std::fmt::Display;
use std::time::Duration;

/// The first pause after a failure; doubled per failure up to [`BACKOFF_CAP`].
const BACKOFF_START: Duration = Duration::from_millis(250);

/// The longest pause between two attempts of a failing loop.
pub(crate) const BACKOFF_CAP: Duration = Duration::from_secs(5);

/// One loop's state: failing or not, and its next pause.
pub(crate) struct Outage {
    task: &'static str,
    failing: bool,
    backoff: Duration,
}

impl Outage {
    pub(crate) fn new(task: &'static str) -> Self {
        Outage { task, failing: false, backoff: BACKOFF_START }
    }

    /// After a success: logs the recovery, once.
    pub(crate) fn ok(&mut self) {
        if self.failing {
            tracing::info!(task = self.task, "background task works again");
            self.failing = false;
        }
        self.backoff = BACKOFF_START;
    }

    /// After a failure: logs it if the loop was working (later ones at
    /// debug), and answers how long to pause before the next attempt.
    pub(crate) fn failed(&mut self, error: &dyn Display) -> Duration {
        if self.failing {
            tracing::debug!(task = self.task, error = %error, "background task still failing");
        } else {
            tracing::warn!(task = self.task, error = %error, "background task failing; retrying with backoff");
            self.failing = true;
        }
        let pause = self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_CAP);
        pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_doubles_to_its_cap_and_a_success_resets_it() {
        let mut o = Outage::new("test");
        let pauses: Vec<Duration> = (0..8).map(|_| o.failed(&"down")).collect();
        assert_eq!(pauses[0], BACKOFF_START);
        assert_eq!(pauses[1], BACKOFF_START * 2);
        assert_eq!(*pauses.last().unwrap_or(&Duration::ZERO), BACKOFF_CAP);
        o.ok();
        assert_eq!(o.failed(&"down"), BACKOFF_START);
    }
}
