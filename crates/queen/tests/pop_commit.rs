//! Which pops wait for their WAL flush. A lease is soft state, so a pop
//! that only leases commits asynchronously; a pop that moves a cursor
//! (auto-ack) or registers a group waits, and the setting never outlives
//! the pop's own transaction (a pooled connection's next push still waits).
mod common;

use common::TestBroker;
use serde_json::json;

/// Runs `pop` inside an explicit transaction and answers the
/// synchronous_commit it left in force, then the setting after the commit.
async fn commit_mode_of(sql: &tokio_postgres::Client, pop: &str) -> (String, String) {
    sql.batch_execute("BEGIN").await.expect("begin");
    sql.query_one(pop, &[]).await.expect("pop");
    let inside: String = sql.query_one("SHOW synchronous_commit", &[]).await.expect("show").get(0);
    sql.batch_execute("COMMIT").await.expect("commit");
    let after: String = sql.query_one("SHOW synchronous_commit", &[]).await.expect("show").get(0);
    (inside, after)
}

#[tokio::test]
async fn only_a_leasing_pop_of_a_registered_group_commits_without_waiting_for_its_flush() {
    let b = TestBroker::start().await;
    b.push("q", "p", &[("a", json!(1)), ("b", json!(2)), ("c", json!(3))]).await;
    let sql = b.sql().await;
    let pop = |group: &str, auto_ack: bool| {
        format!("SELECT queen.pop('q', 'p', '{group}', 1, 1, NULL, {auto_ack}, NULL, NULL)::text")
    };
    // The group's first pop registers it: waits.
    assert_eq!(commit_mode_of(&sql, &pop("g", false)).await, ("on".into(), "on".into()));
    // A registered group's leasing pop (empty or not): asynchronous, for its transaction only.
    assert_eq!(commit_mode_of(&sql, &pop("g", false)).await, ("off".into(), "on".into()));
    // Auto-ack moves the cursor: waits.
    assert_eq!(commit_mode_of(&sql, &pop("h", true)).await.0, "on");
    assert_eq!(commit_mode_of(&sql, &pop("h", true)).await, ("on".into(), "on".into()));
    // Queue mode, registered by the first pop, then leasing.
    commit_mode_of(&sql, "SELECT queen.pop('q', 'p', NULL, 1, 1, NULL, false, NULL, NULL)::text").await;
    let (inside, after) =
        commit_mode_of(&sql, "SELECT queen.pop('q', 'p', NULL, 1, 1, NULL, false, NULL, NULL)::text").await;
    assert_eq!((inside.as_str(), after.as_str()), ("off", "on"));
    // The broker's own pops still deliver and ack as before.
    let popped = b.pop_some("q", "consumerGroup=g2").await;
    let ack = b.ack(&popped["messages"][0], "completed", Some("g2")).await;
    assert_eq!(ack["success"], json!(true), "{ack}");
}
