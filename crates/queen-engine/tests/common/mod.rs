//! The engine suites' fixture: an `Engine` on a database of its own (a
//! clone of the migrated template, dropped when the test passes), and
//! direct SQL for assertions. The database per test and the generic
//! helpers come from `queen-test-kit`, re-exported.
#![allow(dead_code)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use queen_engine::{Engine, EngineOptions};
use serde_json::{json, Value};

pub use queen_test_kit::*;

/// An engine on a fresh database.
pub struct TestEngine {
    /// The database's name.
    pub db: String,
    /// The engine under test, with default options.
    pub engine: Arc<Engine>,
}

impl TestEngine {
    /// An engine with default options on a fresh database.
    pub async fn start() -> Self {
        Self::start_with_options(EngineOptions::default()).await
    }

    /// An engine with `options` on a fresh database.
    pub async fn start_with_options(options: EngineOptions) -> Self {
        let db = fresh_database().await;
        let engine = Arc::new(Engine::connect(&db_config(&db), options).expect("engine"));
        TestEngine { db, engine }
    }

    /// Another engine on this database (many brokers, one database).
    pub fn another(&self, options: EngineOptions) -> Arc<Engine> {
        Arc::new(Engine::connect(&db_config(&self.db), options).expect("engine"))
    }

    /// A direct SQL client on the database, for assertions.
    pub async fn sql(&self) -> tokio_postgres::Client {
        sql_client(&self.db).await
    }

    /// One bigint (or count) from SQL.
    pub async fn scalar(&self, query: &str) -> i64 {
        scalar_of(&self.db, query).await
    }

    /// Configures `queue` and asserts success.
    pub async fn configure_ok(&self, queue: &str, options: Value) -> Value {
        let body = json!({"queue": queue, "namespace": null, "task": null, "options": options});
        let answer = self.engine.configure(&body.to_string()).await.expect("configure");
        serde_json::from_str(&answer.0).expect("json")
    }

    /// Pushes `items` (transaction id, payload) to `queue`/`partition`.
    pub async fn push(&self, queue: &str, partition: &str, items: &[(&str, Value)]) -> Value {
        let items: Vec<Value> = items
            .iter()
            .map(|(tx, payload)| json!({"queue": queue, "partition": partition, "transactionId": tx, "payload": payload}))
            .collect();
        let answer = self.engine.push(&json!(items).to_string()).await.expect("push");
        serde_json::from_str(&answer.0).expect("json")
    }
}

impl Drop for TestEngine {
    fn drop(&mut self) {
        self.engine.close();
        drop_database_later(self.db.clone());
    }
}
