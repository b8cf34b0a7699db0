//! A leader lock with a fencing token: two workers want to run the nightly
//! job; one gets the permit. The first leader stalls past its lifetime, the
//! second takes over with a higher token, and the stale leader's bundle,
//! guarded by its old permit, commits nothing: no double report.
//!
//! ```text
//! QUEEN_URL=http://127.0.0.1:6632 cargo run -p queen-client --example leader_lock
//! ```

use std::time::Duration;

use queen_client::{Broker, DbConfig, EmbeddedBroker, EngineOptions, Permit, Queen, TxOutcome};
use serde_json::json;

async fn run<B: Broker>(queen: Queen<B>) -> queen_client::Result<()> {
    let name = format!("nightly-{}", uuid::Uuid::new_v4().simple());
    let queue = format!("reports-{}", uuid::Uuid::new_v4().simple());
    let locks = queen.locks();

    let first = locks.acquire(&name, 1, Some("worker-a"), 1).await?;
    let stale = Permit::of(&first).ok_or_else(|| invalid("worker-a should get the free lock"))?;
    let refused = locks.acquire(&name, 30, Some("worker-b"), 1).await?;
    assert_eq!(refused.acquired, Some(false), "one leader at a time");
    println!("worker-a leads with token {}; worker-b waits", stale.token);

    // worker-a stalls (a GC pause, a network partition) past its 1 s lifetime.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let taken = locks.acquire(&name, 30, Some("worker-b"), 1).await?;
    let leader = Permit::of(&taken).ok_or_else(|| invalid("worker-b should take the lapsed lock"))?;
    assert!(leader.token > stale.token, "a later holder always has a higher token");
    println!("worker-b takes over with token {}", leader.token);

    // Both publish the report, each guarded by its own permit.
    let late = queen.tx().guard(&stale).queue(&queue).push(&json!({"by": "worker-a"})).commit().await?;
    assert!(matches!(late, TxOutcome::PreconditionLost { .. }), "the stale leader commits nothing");
    let ok = queen.tx().guard(&leader).queue(&queue).push(&json!({"by": "worker-b"})).commit().await?;
    assert!(ok.is_committed());
    let reports = queen.queue(&queue).pop().batch(10).fetch().await?;
    assert_eq!(reports.len(), 1, "exactly one report");
    println!("one report, by {}", reports[0].json::<serde_json::Value>()?["by"]);

    assert_eq!(locks.release(&leader).await?.released, Some(true));
    queen.ack(&reports[0]).await?;
    Ok(())
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
