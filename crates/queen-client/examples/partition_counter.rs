//! A per-partition counter through the state handle: every message counts
//! once in its own partition's counter. The handle is minted from a popped
//! message, so its key derives from the lane
//! (`@p/<queue>/<partition>/<group>/<name>`) and only the lease holder of
//! that partition writes it. The increment commits with the ack, so a
//! redelivered batch is never counted twice.
//!
//! Runs against a broker over HTTP when `QUEEN_URL` is set, or embedded in
//! this process on the database of `QUEEN_DATABASE_URL`:
//!
//! ```text
//! QUEEN_URL=http://127.0.0.1:6632 cargo run -p queen-client --example partition_counter
//! ```

use std::collections::BTreeMap;

use queen_client::{Broker, DbConfig, EmbeddedBroker, EngineOptions, Expiry, Message, Queen, TxOutcome};
use serde_json::json;

/// Counts one popped batch (all from one partition: a pop leases one lane).
async fn count_batch<B: Broker>(queen: &Queen<B>, batch: &[Message]) -> queen_client::Result<()> {
    let Some(first) = batch.first() else { return Ok(()) };
    let counter = queen.state(first, "count");
    // Counter and acks in one commit: all of it happens, or none.
    let mut tx = queen.tx().kv().incr(counter.ns(), counter.key(), batch.len() as i64, Expiry::Forever);
    for msg in batch {
        tx = tx.ack(msg);
    }
    match tx.commit().await? {
        TxOutcome::Committed { .. } => Ok(()),
        // No op of this bundle is `required`, so nothing can lose a precondition.
        TxOutcome::PreconditionLost { .. } => {
            Err(queen_client::Error::Invalid("unexpected precondition".into()))
        }
    }
}

async fn run<B: Broker>(queen: Queen<B>) -> queen_client::Result<()> {
    let queue = queen.queue(format!("clicks-{}", uuid::Uuid::new_v4().simple()));
    let pushed = [("eu", 3), ("us", 2), ("apac", 1)];
    for (partition, n) in pushed {
        for i in 0..n {
            queue.clone().partition(partition).push(&json!({"click": i})).await?;
        }
    }

    // Consume until empty; keep one message per partition to mint its handle later.
    let mut seen: BTreeMap<String, Message> = BTreeMap::new();
    loop {
        let batch = queue.pop().batch(2).fetch().await?;
        if batch.is_empty() {
            break;
        }
        count_batch(&queen, &batch).await?;
        seen.insert(batch[0].partition.clone(), batch[0].clone());
    }

    // Each partition's state counted its own messages, through the same handle.
    for (partition, n) in pushed {
        let msg =
            seen.get(partition).ok_or_else(|| queen_client::Error::Invalid(format!("{partition} unseen")))?;
        let state = queen.state(msg, "count");
        let entry = state.get().await?.ok_or_else(|| queen_client::Error::Invalid("no counter".into()))?;
        let count = queen_client::parse_i64(&entry.value)?;
        println!("{partition}: {count} at {}", state.key());
        assert_eq!(count, n, "partition {partition}");
        assert_eq!(state.key(), format!("@p/{}/{partition}/__QUEUE_MODE__/count", queue.name()));
        state.delete().await?;
    }
    queue.delete().await?;
    println!("every partition counted its own messages, once");
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
