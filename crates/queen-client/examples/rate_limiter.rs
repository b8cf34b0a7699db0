//! A fixed-window rate limiter: one counter per client and window, bumped
//! with `incr` bounded by `max`. The bound is the admission decision, taken
//! by the broker in one statement, so concurrent callers can never admit
//! more than the limit, and a refused call writes nothing.
//!
//! Runs against a broker over HTTP when `QUEEN_URL` is set, or embedded in
//! this process on the database of `QUEEN_DATABASE_URL`:
//!
//! ```text
//! QUEEN_URL=http://127.0.0.1:6632 cargo run -p queen-client --example rate_limiter
//! ```

use queen_client::{Broker, DbConfig, EmbeddedBroker, EngineOptions, Expiry, Incr, Queen, Reason};

/// Requests a client may make per window.
const LIMIT: i64 = 5;
/// The window length in seconds.
const WINDOW: u64 = 60;

/// Admits one request of `client` at `now` (Unix seconds), or refuses it.
///
/// The key names the window, so a new window starts a new counter. Its TTL
/// applies when `incr` creates it: the counter cleans itself up after its
/// window (plus one, so a late reader of the window still sees it).
async fn admit<B: Broker>(queen: &Queen<B>, ns: &str, client: &str, now: u64) -> queen_client::Result<bool> {
    let window = now / WINDOW;
    let key = format!("{client}:{window}");
    let counter = queen.kv().incr(ns, &key, Incr::by(1).max(LIMIT), Expiry::secs(2 * WINDOW)?).await?;
    if !counter.applied {
        // A refusal is a value, not an error: the reason says which bound.
        assert_eq!(counter.reason, Some(Reason::Limit));
    }
    Ok(counter.applied)
}

async fn run<B: Broker>(queen: Queen<B>) -> queen_client::Result<()> {
    // A namespace of its own, so the example can run again on the same broker.
    let ns = format!("ratelimit-{}", uuid::Uuid::new_v4().simple());
    let now = 1_700_000_000; // the time is an argument, so the demo is exact

    // Eight requests of one client in one window: the first five pass.
    let mut admitted = 0;
    for i in 1..=8 {
        let ok = admit(&queen, &ns, "alice", now + i).await?;
        println!("alice request {i}: {}", if ok { "admitted" } else { "429 too many requests" });
        admitted += i64::from(ok);
    }
    assert_eq!(admitted, LIMIT, "the limiter admitted {admitted}, not {LIMIT}");

    // Other clients, and the next window, have counters of their own.
    assert!(admit(&queen, &ns, "bob", now).await?, "bob has his own budget");
    assert!(admit(&queen, &ns, "alice", now + WINDOW).await?, "a new window starts at zero");

    // The refused calls wrote nothing: the counter stopped at the limit.
    let key = format!("alice:{}", now / WINDOW);
    let entry = queen.kv().get(&ns, &key).await?.ok_or_else(|| invalid("the counter is gone"))?;
    assert_eq!(queen_client::parse_i64(&entry.value)?, LIMIT);
    println!("alice used {LIMIT}/{LIMIT} of her window; the limiter held");
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
