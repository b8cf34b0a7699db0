//! Schema migrations: versioned files applied once, then the function files
//! (`CREATE OR REPLACE`), all under one advisory lock so that brokers
//! starting together are safe.

use tokio_postgres::types::Type;
use tokio_postgres::Client;

use crate::EngineError;

/// A versioned migration.
pub struct Migration {
    /// Applied in ascending order, recorded in `queen.schema_migrations`.
    pub version: i32,
    /// File name, for the record.
    pub name: &'static str,
    /// The SQL text.
    pub sql: &'static str,
}

/// Every versioned migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration { version: 1, name: "0001_broker.sql", sql: include_str!("../sql/migrations/0001_broker.sql") },
    Migration { version: 2, name: "0002_kv.sql", sql: include_str!("../sql/migrations/0002_kv.sql") },
    Migration { version: 3, name: "0003_admin.sql", sql: include_str!("../sql/migrations/0003_admin.sql") },
    Migration { version: 4, name: "0004_traces.sql", sql: include_str!("../sql/migrations/0004_traces.sql") },
    Migration {
        version: 5,
        name: "0005_ready_lanes.sql",
        sql: include_str!("../sql/migrations/0005_ready_lanes.sql"),
    },
    Migration { version: 6, name: "0006_reads.sql", sql: include_str!("../sql/migrations/0006_reads.sql") },
    Migration { version: 7, name: "0007_timers.sql", sql: include_str!("../sql/migrations/0007_timers.sql") },
    Migration {
        version: 8,
        name: "0008_message_order.sql",
        sql: include_str!("../sql/migrations/0008_message_order.sql"),
    },
    Migration {
        version: 9,
        name: "0009_queue_options.sql",
        sql: include_str!("../sql/migrations/0009_queue_options.sql"),
    },
    Migration {
        version: 10,
        name: "0010_encryption.sql",
        sql: include_str!("../sql/migrations/0010_encryption.sql"),
    },
    Migration {
        version: 11,
        name: "0011_streams.sql",
        sql: include_str!("../sql/migrations/0011_streams.sql"),
    },
    Migration {
        version: 12,
        name: "0012_ephemeral.sql",
        sql: include_str!("../sql/migrations/0012_ephemeral.sql"),
    },
    Migration {
        version: 13,
        name: "0013_producer_sub.sql",
        sql: include_str!("../sql/migrations/0013_producer_sub.sql"),
    },
    Migration {
        version: 14,
        name: "0014_brokers.sql",
        sql: include_str!("../sql/migrations/0014_brokers.sql"),
    },
    Migration {
        version: 15,
        name: "0015_broker_minutes.sql",
        sql: include_str!("../sql/migrations/0015_broker_minutes.sql"),
    },
    Migration {
        version: 16,
        name: "0016_push_marks_ready.sql",
        sql: include_str!("../sql/migrations/0016_push_marks_ready.sql"),
    },
    Migration {
        version: 17,
        name: "0017_hot_leases.sql",
        sql: include_str!("../sql/migrations/0017_hot_leases.sql"),
    },
    Migration {
        version: 18,
        name: "0018_queue_options_16.sql",
        sql: include_str!("../sql/migrations/0018_queue_options_16.sql"),
    },
    Migration {
        version: 19,
        name: "0019_encryption_gaps.sql",
        sql: include_str!("../sql/migrations/0019_encryption_gaps.sql"),
    },
    Migration {
        version: 20,
        name: "0020_fences_and_subs.sql",
        sql: include_str!("../sql/migrations/0020_fences_and_subs.sql"),
    },
    Migration {
        version: 21,
        name: "0021_operator_pages.sql",
        sql: include_str!("../sql/migrations/0021_operator_pages.sql"),
    },
    Migration {
        version: 22,
        name: "0022_retired_functions.sql",
        sql: include_str!("../sql/migrations/0022_retired_functions.sql"),
    },
    Migration {
        version: 23,
        name: "0023_push_answers_typed.sql",
        sql: include_str!("../sql/migrations/0023_push_answers_typed.sql"),
    },
    Migration {
        version: 24,
        name: "0024_kv_answers_by_the_engine.sql",
        sql: include_str!("../sql/migrations/0024_kv_answers_by_the_engine.sql"),
    },
    Migration {
        version: 25,
        name: "0025_ack_and_cycle_answers_by_the_engine.sql",
        sql: include_str!("../sql/migrations/0025_ack_and_cycle_answers_by_the_engine.sql"),
    },
    Migration {
        version: 26,
        name: "0026_lease_renewal_by_the_engine.sql",
        sql: include_str!("../sql/migrations/0026_lease_renewal_by_the_engine.sql"),
    },
    Migration {
        version: 27,
        name: "0027_pop_answers_by_the_engine.sql",
        sql: include_str!("../sql/migrations/0027_pop_answers_by_the_engine.sql"),
    },
    Migration {
        version: 28,
        name: "0028_admin_answers_by_the_engine.sql",
        sql: include_str!("../sql/migrations/0028_admin_answers_by_the_engine.sql"),
    },
    Migration {
        version: 29,
        name: "0029_stream_timer_and_read_answers_by_the_engine.sql",
        sql: include_str!("../sql/migrations/0029_stream_timer_and_read_answers_by_the_engine.sql"),
    },
    Migration {
        version: 30,
        name: "0030_kv_browse_answers_by_the_engine.sql",
        sql: include_str!("../sql/migrations/0030_kv_browse_answers_by_the_engine.sql"),
    },
];

/// The SQL functions, one file per engine module that calls them (named
/// after it), in dependency order: a SQL-language function's body is checked
/// when it is created, so what it calls comes first. Replaced as a whole when
/// any text changes.
const FUNCTIONS: &[&str] = &[
    include_str!("../sql/functions/common.sql"),
    include_str!("../sql/functions/queues.sql"),
    include_str!("../sql/functions/push.sql"),
    include_str!("../sql/functions/pop.sql"),
    include_str!("../sql/functions/ack.sql"),
    include_str!("../sql/functions/dlq.sql"),
    include_str!("../sql/functions/groups.sql"),
    include_str!("../sql/functions/kv.sql"),
    include_str!("../sql/functions/kv_write.sql"),
    include_str!("../sql/functions/transaction.sql"),
    include_str!("../sql/functions/admin.sql"),
    include_str!("../sql/functions/admin_status.sql"),
    include_str!("../sql/functions/locks.sql"),
    include_str!("../sql/functions/reads.sql"),
    include_str!("../sql/functions/timers.sql"),
    include_str!("../sql/functions/retention.sql"),
    include_str!("../sql/functions/streams.sql"),
    include_str!("../sql/functions/ephemeral.sql"),
    include_str!("../sql/functions/sealing.sql"),
];

/// The function files as applied: the wire's names written over their
/// placeholders, so that each is spelled once (in `queen-wire`).
fn function_text() -> String {
    // A single quote would end the SQL literal the placeholder sits in.
    debug_assert!(!queen_wire::QUEUE_MODE.contains('\''));
    FUNCTIONS.concat().replace("{{QUEUE_MODE}}", queen_wire::QUEUE_MODE)
}

/// A digest of every migration and function file: equal digests mean equal
/// schemas, so a migrated template database can be reused by tests.
pub fn schema_digest() -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for m in MIGRATIONS {
        m.sql.hash(&mut h);
    }
    function_text().hash(&mut h);
    format!("{:016x}", h.finish())
}

/// Arbitrary, fixed: the key of the migration advisory lock.
const MIGRATION_LOCK: i64 = 0x5155_4545_4e5f_4d49;

/// Brings the database to the current schema. Idempotent.
///
/// Unnamed statements only (`query_typed`, `batch_execute`), so it also runs
/// through a transaction-mode pooler.
pub async fn migrate(client: &mut Client) -> Result<(), EngineError> {
    let tx = client.transaction().await?;
    // Exempt from the pool's timeouts: another broker's migration holds the
    // lock as long as it needs, and DDL on a large table may run long.
    tx.batch_execute("SET LOCAL lock_timeout = 0; SET LOCAL statement_timeout = 0").await?;
    tx.query_typed("SELECT pg_advisory_xact_lock($1)", &[(&MIGRATION_LOCK, Type::INT8)]).await?;
    tx.batch_execute(
        "SET LOCAL client_min_messages = warning;
         CREATE SCHEMA IF NOT EXISTS queen;
         CREATE TABLE IF NOT EXISTS queen.schema_migrations (
             version integer PRIMARY KEY,
             name text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE IF NOT EXISTS queen.schema_functions (
             digest text PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now());",
    )
    .await?;
    let applied: Vec<i32> = tx
        .query_typed("SELECT version FROM queen.schema_migrations", &[])
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    for m in MIGRATIONS.iter().filter(|m| !applied.contains(&m.version)) {
        tracing::info!(version = m.version, name = m.name, "applying migration");
        tx.batch_execute(m.sql).await?;
        tx.query_typed(
            "INSERT INTO queen.schema_migrations (version, name) VALUES ($1, $2)",
            &[(&m.version, Type::INT4), (&m.name, Type::TEXT)],
        )
        .await?;
    }
    let all_functions = function_text();
    let current = tx
        .query_typed(
            "SELECT EXISTS (SELECT 1 FROM queen.schema_functions WHERE digest = md5($1))",
            &[(&all_functions, Type::TEXT)],
        )
        .await?
        .first()
        .map(|row| row.get::<_, bool>(0))
        .unwrap_or(false);
    if !current {
        tracing::info!("replacing SQL functions");
        tx.batch_execute(&all_functions).await?;
        tx.batch_execute("DELETE FROM queen.schema_functions").await?;
        tx.query_typed(
            "INSERT INTO queen.schema_functions (digest) VALUES (md5($1))",
            &[(&all_functions, Type::TEXT)],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}
