//! Reminders as timers: schedule one per user, cancel the one that is no
//! longer needed, and consume what fires. A fired reminder is an ordinary
//! message whose id was promised when it was scheduled and whose
//! transactionId is the one the scheduler chose, so a consumer can dedup.
//!
//! ```text
//! QUEEN_URL=http://127.0.0.1:6632 cargo run -p queen-client --example reminder_timer
//! ```

use std::time::Duration;

use queen_client::{Broker, DbConfig, EmbeddedBroker, EngineOptions, Queen, TimerSpec};
use serde_json::json;

async fn run<B: Broker>(queen: Queen<B>) -> queen_client::Result<()> {
    let queue = format!("reminders-{}", uuid::Uuid::new_v4().simple());
    let timers = queen.timers();
    let delay = Duration::from_millis(300);
    let ana = timers
        .schedule(TimerSpec::new(&queue, "user-ana", &json!({"remind": "ana"}), delay)?.txn("remind-ana"))
        .await?;
    timers.schedule(TimerSpec::new(&queue, "user-bo", &json!({"remind": "bo"}), delay)?).await?;
    println!("scheduled 2 reminders, due {}", ana.deliver_at.as_deref().unwrap_or("?"));

    // Bo acted in time: cancel his reminder.
    let cancelled = timers.cancel(&queue, "user-bo").await?;
    assert_eq!(cancelled.status, "cancelled");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let fired = loop {
        if let Some(m) = queen.queue(&queue).pop().fetch().await?.into_iter().next() {
            break m;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(queen_client::Error::Invalid("the reminder did not fire".into()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(fired.transaction_id, "remind-ana");
    assert_eq!(Some(&fired.id), ana.message_id.as_ref(), "the promised message id");
    assert_eq!(fired.json::<serde_json::Value>()?, json!({"remind": "ana"}));
    println!("fired: {} (id {})", fired.transaction_id, fired.id);
    queen.ack(&fired).await?;

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(queen.queue(&queue).pop().fetch().await?.is_empty(), "the cancelled reminder never fires");
    assert!(timers.peek(&queue, "user-bo").await?.is_none());
    println!("bo's reminder was cancelled and never fired");
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
