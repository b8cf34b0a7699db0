//! `Engine`'s calls of `crate::maintenance::gauges`: the facade over that module.

use crate::maintenance::gauges::*;
use crate::{Engine, EngineError};

impl Engine {
    /// Counts every queue whose gauge is due now (tests, and the bench's
    /// operator pages); answers how many it counted.
    pub async fn refresh_queue_gauges_once(&self) -> Result<usize, EngineError> {
        let (every, min) = self.gauge_settings();
        let mut counted = 0;
        while counted < MAX_QUEUES_PER_TICK && refresh_one(self.pool(), min, every).await? {
            counted += 1;
        }
        Ok(counted)
    }
}
