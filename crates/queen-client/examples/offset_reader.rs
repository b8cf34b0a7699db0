//! Reading a partition by offset, as an audit or replay tool would: no
//! lease is taken and no cursor moves, so the consumers of the queue are
//! not disturbed. Offsets count from 0 in push order, per partition.
//!
//! ```text
//! QUEEN_URL=http://127.0.0.1:6632 cargo run -p queen-client --example offset_reader
//! ```

use queen_client::{Broker, DbConfig, EmbeddedBroker, EngineOptions, FetchEntry, PushItem, Queen};
use serde_json::json;

async fn run<B: Broker>(queen: Queen<B>) -> queen_client::Result<()> {
    let queue = format!("ledger-{}", uuid::Uuid::new_v4().simple());
    let items: Vec<PushItem> = (0..5)
        .map(|i| PushItem::new(&json!({"entry": i})).map(|p| p.transaction_id(format!("entry-{i}"))))
        .collect::<Result<_, _>>()?;
    queen.queue(&queue).push_batch(&items).await?;

    // Replay from offset 2, in pages of two records.
    let mut offset = 2;
    let mut seen = Vec::new();
    loop {
        let entry =
            FetchEntry { queue: queue.clone(), partition: "Default".into(), offset, max_bytes: Some(1) };
        let read = queen.reads().fetch(&[entry], None).await?.remove(0);
        assert_eq!((read.log_start_offset, read.high_watermark), (0, 5));
        let Some(last) = read.records.last() else { break };
        offset = last.offset + 1;
        seen.extend(read.records.iter().map(|r| r.transaction_id.clone()));
    }
    assert_eq!(seen, ["entry-2", "entry-3", "entry-4"]);
    println!("replayed offsets 2..5: {seen:?}");

    // The partitions written since a time: the next `since` is the page's safeTime.
    let page = queen.reads().changed(&queue, None, None, None).await?;
    assert_eq!(page.partitions.len(), 1);
    assert_eq!(page.partitions[0].last_offset, 4);
    println!(
        "partition {} last offset {}, safe time {}",
        page.partitions[0].name, page.partitions[0].last_offset, page.safe_time
    );

    // The consumers still get everything: reading moved no cursor.
    let msgs = queen.queue(&queue).pop().batch(10).fetch().await?;
    assert_eq!(msgs.len(), 5);
    queen.ack(msgs.last().ok_or_else(|| queen_client::Error::Invalid("no messages".into()))?).await?;
    println!("a consumer popped all 5 after the replay");
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
