//! The operator surface: read models, maintenance switches and the figures
//! `/metrics` exports; the read models are SQL functions (admin.sql).

/// One queue's figures for the metrics exporter.
#[derive(Debug, Clone)]
pub struct QueueDepth {
    /// Queue name.
    pub queue: String,
    /// Visible messages not yet done for queue mode (delayed ones excluded).
    pub depth: i64,
    /// Age of the oldest of them, in seconds (0 when none).
    pub oldest_age_seconds: f64,
    /// Rows in the dead-letter queue.
    pub dead_letters: i64,
}
