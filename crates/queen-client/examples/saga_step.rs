//! A saga step fenced with `expect`: the saga's state is one KV key, and a
//! step commits its new state, the next step's message and its own ack in
//! one transaction that requires the state version it read. A worker that
//! read a stale state (a duplicate or late delivery of the same step) loses
//! the precondition and nothing of its bundle commits: no second "ship".
//!
//! Runs against a broker over HTTP when `QUEEN_URL` is set, or embedded in
//! this process on the database of `QUEEN_DATABASE_URL`:
//!
//! ```text
//! QUEEN_URL=http://127.0.0.1:6632 cargo run -p queen-client --example saga_step
//! ```

use std::num::NonZeroU64;

use queen_client::{
    Broker, DbConfig, EmbeddedBroker, EngineOptions, Expect, Expiry, Message, Queen, Reason, TxOutcome,
};
use serde_json::json;

const NS: &str = "sagas";

/// Runs the "charge" step for one delivery: read the state, check the step
/// applies, then commit state + next message + ack, fenced on the version.
/// Answers whether this delivery won.
async fn charge_step<B: Broker>(
    queen: &Queen<B>,
    msg: &Message,
    read: (serde_json::Value, NonZeroU64),
    ship_queue: &str,
) -> queen_client::Result<bool> {
    let (state, version) = read;
    let saga = msg.json::<serde_json::Value>()?["saga"].as_str().unwrap_or_default().to_owned();
    let key = format!("saga:{saga}");
    if state["step"] != "reserved" {
        // Already past this step: just take the message off.
        queen.ack(msg).await?;
        return Ok(false);
    }
    let outcome = queen
        .tx()
        .kv()
        .required() // the fence: if the version moved, nothing below commits
        .put_expect(NS, &key, &json!({"step": "charged"}), Expiry::Forever, Expect::Version(version))
        .queue(ship_queue)
        .push(&json!({"saga": saga}))
        .ack(msg)
        .commit()
        .await?;
    match outcome {
        TxOutcome::Committed { .. } => {
            println!("{}: charged, ship step queued", msg.transaction_id);
            Ok(true)
        }
        TxOutcome::PreconditionLost { kv_reason, value, version, .. } => {
            // A lost race is a value: the winner's state comes back with it.
            assert_eq!(kv_reason, Reason::Version);
            let winner = value.map(|v| v.get().to_owned()).unwrap_or_default();
            println!("{}: stale (state is now {winner} at v{version}); acking only", msg.transaction_id);
            // The ack rolled back with the bundle, so settle it on its own.
            queen.ack(msg).await?;
            Ok(false)
        }
    }
}

/// Reads the saga state and its version (the version is the fence).
async fn read_state<B: Broker>(
    queen: &Queen<B>,
    key: &str,
) -> queen_client::Result<(serde_json::Value, NonZeroU64)> {
    let entry = queen.kv().get(NS, key).await?.ok_or_else(|| invalid("the saga has no state"))?;
    let version = NonZeroU64::new(entry.version).ok_or_else(|| invalid("a live key has version 0"))?;
    Ok((entry.json()?, version))
}

async fn run<B: Broker>(queen: Queen<B>) -> queen_client::Result<()> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let key = format!("saga:{id}");
    let charge = queen.queue(format!("saga-charge-{id}"));
    let ship = queen.queue(format!("saga-ship-{id}"));

    // The saga starts: its state must not exist yet (Expect::Absent).
    let started = queen
        .kv()
        .put_expect(NS, &key, &json!({"step": "reserved"}), Expiry::Forever, Expect::Absent)
        .await?;
    assert!(started.applied, "a new saga id");

    // The charge step was sent twice, and two workers took one copy each
    // and read the same state before either committed.
    charge.clone().partition("a").push(&json!({"saga": id})).await?;
    charge.clone().partition("b").push(&json!({"saga": id})).await?;
    let m1 = one(charge.clone().partition("a").pop().fetch().await?)?;
    let m2 = one(charge.clone().partition("b").pop().fetch().await?)?;
    let (r1, r2) = (read_state(&queen, &key).await?, read_state(&queen, &key).await?);

    let won =
        [charge_step(&queen, &m1, r1, ship.name()).await?, charge_step(&queen, &m2, r2, ship.name()).await?];
    assert_eq!(won, [true, false], "exactly the first commit wins");

    // One ship step, the state advanced once, no charge message left.
    let shipped = ship.pop().batch(10).fetch().await?;
    assert_eq!(shipped.len(), 1, "one ship step, not two");
    queen.ack(&shipped[0]).await?;
    let (state, _) = read_state(&queen, &key).await?;
    assert_eq!(state["step"], "charged");
    assert!(charge.pop().batch(10).fetch().await?.is_empty(), "every charge delivery settled");

    charge.delete().await?;
    ship.delete().await?;
    queen.kv().delete(NS, &key).await?;
    println!("saga {id}: charged once, shipped once");
    Ok(())
}

fn one(mut msgs: Vec<Message>) -> queen_client::Result<Message> {
    match msgs.len() {
        1 => Ok(msgs.remove(0)),
        n => Err(invalid(&format!("expected one message, got {n}"))),
    }
}

fn invalid(what: &str) -> queen_client::Error {
    queen_client::Error::Invalid(what.into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Ok(url) = std::env::var("QUEEN_URL") {
        println!("broker over HTTP at {url}");
        run(Queen::connect(&url)?).await?;
    } else if let Ok(db) = std::env::var("QUEEN_DATABASE_URL") {
        println!("embedded broker on {db}");
        let config = DbConfig { url: Some(db), pool_size: 4, ..DbConfig::default() };
        let broker = EmbeddedBroker::connect(&config, EngineOptions::default()).await?;
        let closer = broker.clone();
        run(Queen::new(broker)).await?;
        closer.close();
    } else {
        eprintln!("set QUEEN_URL (a running broker) or QUEEN_DATABASE_URL (embedded)");
        std::process::exit(2);
    }
    Ok(())
}
