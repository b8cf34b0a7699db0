//! Which pops wait for their WAL flush. A lease is soft state, so a pop
//! that only leases commits asynchronously; a pop that moves a cursor
//! (auto-ack), registers a group or runs inside a transaction that already
//! wrote waits, and the setting never outlives the pop's own transaction (a
//! pooled connection's next push still waits).
mod common;

use common::TestBroker;
use serde_json::json;

/// Runs `pop` inside an explicit transaction, after `before` (SQL run in
/// the same transaction first), and answers the synchronous_commit in
/// force after the pop, then the setting after the commit.
async fn commit_mode_of(sql: &tokio_postgres::Client, before: &str, pop: &str) -> (String, String) {
    sql.batch_execute("BEGIN").await.expect("begin");
    sql.batch_execute(before).await.expect("before");
    sql.query_one(pop, &[]).await.expect("pop");
    let inside: String = sql.query_one("SHOW synchronous_commit", &[]).await.expect("show").get(0);
    sql.batch_execute("COMMIT").await.expect("commit");
    let after: String = sql.query_one("SHOW synchronous_commit", &[]).await.expect("show").get(0);
    (inside, after)
}

fn pop(group: &str, auto_ack: bool) -> String {
    format!("SELECT queen.pop('q', 'p', '{group}', 1, 1, NULL, {auto_ack}, NULL, NULL)::text")
}

#[tokio::test]
async fn only_a_leasing_pop_of_a_registered_group_commits_without_waiting_for_its_flush() {
    let b = TestBroker::start().await;
    b.push("q", "p", &[("a", json!(1)), ("b", json!(2)), ("c", json!(3))]).await;
    let sql = b.sql().await;
    // Whatever the server's default, a waiting commit keeps it.
    let default: String = sql.query_one("SHOW synchronous_commit", &[]).await.expect("show").get(0);
    let waits = (default.clone(), default.clone());
    let leases = ("off".to_owned(), default.clone());
    // The group's first pop registers it: waits.
    assert_eq!(commit_mode_of(&sql, "", &pop("g", false)).await, waits);
    // A registered group's leasing pop (empty or not): asynchronous, for its transaction only.
    assert_eq!(commit_mode_of(&sql, "", &pop("g", false)).await, leases);
    // Auto-ack moves the cursor: waits, on its first pop and later.
    assert_eq!(commit_mode_of(&sql, "", &pop("h", true)).await, waits);
    assert_eq!(commit_mode_of(&sql, "", &pop("h", true)).await, waits);
    // A transaction that wrote before the pop is not the pop's own: waits.
    let wrote = "SELECT queen.kv_put('n', 'k', '1', NULL, true, NULL)";
    assert_eq!(commit_mode_of(&sql, wrote, &pop("g", false)).await, waits);
    // The engine's entry point (pop switch, then pop) in queue mode.
    let api = "SELECT queen.pop_api('q', 'p', NULL, 1, 1, NULL, false, NULL, NULL, NULL)::text";
    assert_eq!(commit_mode_of(&sql, "", api).await, waits, "the first pop registers queue mode");
    assert_eq!(commit_mode_of(&sql, "", api).await, leases);
}

#[tokio::test]
async fn a_message_leased_by_an_asynchronous_pop_is_acked_and_never_redelivered() {
    let b = TestBroker::start().await;
    // Register the group with an empty pop first, so the pop that leases is
    // one that commits without waiting.
    b.pop_none("q2", "consumerGroup=g2").await;
    b.push("q2", "p", &[("a", json!(1))]).await;
    let popped = b.pop_some("q2", "consumerGroup=g2").await;
    let ack = b.ack(&popped["messages"][0], "completed", Some("g2")).await;
    assert_eq!(ack["success"], json!(true), "{ack}");
    b.pop_none("q2", "consumerGroup=g2").await;
    assert_eq!(b.scalar("select next_seq from queen.cursors where consumer_group = 'g2'").await, 1);
}
