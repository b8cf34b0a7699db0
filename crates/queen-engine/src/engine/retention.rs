//! `Engine`'s calls of `crate::maintenance::retention`: the facade over that module.

use crate::maintenance::retention::*;
use crate::{Engine, EngineError};

impl Engine {
    /// Messages removed by this engine's retention sweeper so far.
    pub fn retention_stats(&self) -> RetentionStatsSnapshot {
        self.retention_stats_ref().snapshot()
    }

    /// Runs one retention pass now (tests, and operators through the CLI);
    /// `None` when another broker is sweeping.
    pub async fn sweep_retention_once(&self) -> Result<Option<RetentionStatsSnapshot>, EngineError> {
        pass(self.pool(), self.retention_batch(), self.retention_stats_ref()).await
    }
}
