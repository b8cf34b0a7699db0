//! The idempotent payment of the design text: the charge marker (`once`) and
//! the ack commit together, so a message whose work is already done can be
//! recognised on redelivery and taken off the queue without paying twice.
//!
//! Runs against a broker over HTTP when `QUEEN_URL` is set
//! (`QUEEN_URL=http://127.0.0.1:6632`), or embedded in this process on the
//! database of `QUEEN_DATABASE_URL` (migrated first):
//!
//! ```text
//! QUEEN_URL=http://127.0.0.1:6632 cargo run -p queen-client --example idempotent_payment
//! QUEEN_DATABASE_URL=postgres://postgres@127.0.0.1/queen cargo run -p queen-client --example idempotent_payment
//! ```

use queen_client::{Broker, DbConfig, EmbeddedBroker, EngineOptions, Expiry, Message, Queen, TxOutcome};
use serde_json::json;

/// The external effect. It lives outside PostgreSQL: a crash between it and
/// the commit repeats it on redelivery, which no broker can prevent.
async fn charge_card(order: &serde_json::Value) -> String {
    format!("ch_{}", order_id(order))
}

/// The order id of an order payload.
fn order_id(order: &serde_json::Value) -> &str {
    order["order"].as_str().unwrap_or("unknown")
}

/// The commit of the design text: marker and cursor, one commit.
async fn settle<B: Broker>(
    queen: &Queen<B>,
    msg: &Message,
    key: &str,
    charge: &str,
) -> queen_client::Result<()> {
    let outcome = queen
        .tx()
        .once_with("charges", key, &json!({ "charge": charge }), Expiry::secs(86_400)?)
        .ack(msg)
        .commit()
        .await?;
    match outcome {
        TxOutcome::Committed { .. } => {
            println!("{}: charged {charge}; marker and ack committed", msg.transaction_id)
        }
        TxOutcome::PreconditionLost { value, .. } => {
            // Somebody already did this work and NOTHING in the bundle
            // committed: the ack rolled back with the marker, so the message
            // must be taken off separately or it comes back forever. The
            // winner's charge id arrives without a second round trip.
            let winner = value.map(|v| v.get().to_owned()).unwrap_or_default();
            println!("{}: lost to {winner}; acking separately (void {charge})", msg.transaction_id);
            queen.ack(msg).await?;
        }
    }
    Ok(())
}

/// A consumer's handler: skip the charge when the marker is already there.
async fn handle<B: Broker>(queen: &Queen<B>, msg: &Message) -> queen_client::Result<()> {
    let order: serde_json::Value = msg.json()?;
    let key = format!("charge:{}", order_id(&order));
    if let Some(done) = queen.kv().get("charges", &key).await? {
        println!("{}: already charged ({}); acking", msg.transaction_id, done.value);
        queen.ack(msg).await?;
        return Ok(());
    }
    let charge = charge_card(&order).await;
    settle(queen, msg, &key, &charge).await
}

fn one(mut msgs: Vec<Message>) -> queen_client::Result<Message> {
    match msgs.len() {
        1 => Ok(msgs.remove(0)),
        n => Err(queen_client::Error::Invalid(format!("expected one message, got {n}"))),
    }
}

async fn run<B: Broker>(queen: Queen<B>) -> queen_client::Result<()> {
    let queue = queen.queue(format!("payments-{}", uuid::Uuid::new_v4().simple()));
    let order = json!({ "order": uuid::Uuid::new_v4().simple().to_string() });
    let key = format!("charge:{}", order_id(&order));
    // The producer sent the same order twice, and two workers raced: both
    // passed the marker check and charged before either committed.
    queue.clone().partition("a").push(&order).await?;
    queue.clone().partition("b").push(&order).await?;
    let m1 = one(queue.clone().partition("a").pop().fetch().await?)?;
    let m2 = one(queue.clone().partition("b").pop().fetch().await?)?;
    let (c1, c2) = (charge_card(&m1.json()?).await, format!("{}-dup", charge_card(&m2.json()?).await));
    settle(&queen, &m1, &key, &c1).await?;
    settle(&queen, &m2, &key, &c2).await?;

    // A later redelivery of the same order finds the marker and pays nothing.
    queue.push(&order).await?;
    for msg in queue.pop().fetch().await? {
        handle(&queen, &msg).await?;
    }
    if !queue.pop().batch(10).fetch().await?.is_empty() {
        return Err(queen_client::Error::Invalid("a message was left unsettled".into()));
    }
    queue.delete().await?;
    println!("every message settled, one charge kept");
    Ok(())
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
