//! How long polls are woken now that no push sends a NOTIFY inside its own
//! transaction: in process on the pushing engine, through one coalesced
//! notification on the others, and by the re-check interval when no
//! notification comes. Two engines on one database are two brokers.
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{db_config, TestDb};
use queen_engine::{Engine, EngineOptions, PopRequest};

fn engine(db: &TestDb, poll_interval: Duration, cross_broker_wakeups: bool) -> Arc<Engine> {
    let options = EngineOptions {
        poll_interval,
        cross_broker_wakeups,
        kv_sweep_interval: None,
        ..EngineOptions::default()
    };
    Arc::new(Engine::connect(&db_config(&db.name), options).expect("engine"))
}

fn pop_of(queue: &str) -> PopRequest {
    PopRequest { queue: queue.into(), batch: 1, partitions: 1, ..PopRequest::default() }
}

/// Starts a long poll on `waiter`, lets it settle, pushes through `pusher`
/// and answers how long after the push returned the poll delivered.
async fn wake_delay(
    waiter: &Arc<Engine>,
    push: impl std::future::Future<Output = ()>,
    queue: &str,
) -> Duration {
    wake_delay_within(waiter, push, queue, Duration::from_secs(20)).await
}

async fn wake_delay_within(
    waiter: &Arc<Engine>,
    push: impl std::future::Future<Output = ()>,
    queue: &str,
    timeout: Duration,
) -> Duration {
    let w = waiter.clone();
    let req = pop_of(queue);
    let poll = tokio::spawn(async move {
        let got = w.pop_wait(&req, timeout).await.expect("pop_wait");
        (Instant::now(), got)
    });
    // Let the poll find the queue empty and go to sleep.
    tokio::time::sleep(Duration::from_millis(300)).await;
    push.await;
    let pushed = Instant::now();
    let (delivered, got) = poll.await.expect("join");
    assert!(got.is_some(), "the long poll answered empty");
    delivered.saturating_duration_since(pushed)
}

/// Pushes to partition `p<n>`, so that each round's message sits in a lane
/// no earlier round's pop holds under its lease.
async fn push_one(engine: &Engine, queue: &str, n: usize) {
    let items = format!(r#"[{{"queue":"{queue}","partition":"p{n}","payload":{{"n":{n}}}}}]"#);
    engine.push(&items).await.expect("push");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_on_broker_b_returns_within_100_ms_of_a_push_on_broker_a() {
    let db = TestDb::create().await;
    // B's re-check is far away: only a notification can wake it in time.
    let a = engine(&db, Duration::from_secs(30), true);
    let b = engine(&db, Duration::from_secs(30), true);
    // The LISTEN connections open in the background.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut delays = Vec::new();
    for n in 0..3 {
        delays.push(wake_delay(&b, push_one(&a, "cross", n), "cross").await);
    }
    let best = delays.iter().min().copied().unwrap_or_default();
    assert!(best < Duration::from_millis(100), "cross-broker wake-ups took {delays:?}");
    assert!(
        delays.iter().all(|d| *d < Duration::from_secs(5)),
        "a wake-up waited for the re-check: {delays:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pop_on_the_pushing_broker_is_woken_in_process() {
    let db = TestDb::create().await;
    // No notifications at all and a far re-check: only the in-process wake is left.
    let a = engine(&db, Duration::from_secs(30), false);
    let mut delays = Vec::new();
    for n in 0..3 {
        delays.push(wake_delay(&a, push_one(&a, "local", n), "local").await);
    }
    let best = delays.iter().min().copied().unwrap_or_default();
    assert!(best < Duration::from_millis(100), "in-process wake-ups took {delays:?}");
    assert!(delays.iter().all(|d| *d < Duration::from_secs(5)), "{delays:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_bundle_that_pushes_wakes_a_long_poll_in_process() {
    let db = TestDb::create().await;
    let a = engine(&db, Duration::from_secs(30), false);
    let bundle = r#"{"operations":[{"type":"push","items":[{"queue":"bundled","payload":1}]}]}"#;
    let push = async {
        a.transaction(bundle).await.expect("transaction");
    };
    let delay = wake_delay(&a, push, "bundled").await;
    assert!(delay < Duration::from_secs(5), "the bundle's push did not wake the poll: {delay:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cross_broker_notifications_the_re_check_still_delivers() {
    let db = TestDb::create().await;
    let a = engine(&db, Duration::from_secs(30), false);
    let quick = engine(&db, Duration::from_millis(200), true);
    let slow = engine(&db, Duration::from_secs(30), true);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // A re-checking poll finds the message within its interval (plus a pop).
    let delay = wake_delay(&quick, push_one(&a, "recheck", 0), "recheck").await;
    assert!(delay < Duration::from_secs(2), "the re-check took {delay:?}");

    // The switch is real: a poll whose re-check is far away is not woken; it
    // finds the message only in its last attempt, at its 2 s deadline.
    let delay = wake_delay_within(&slow, push_one(&a, "silent", 1), "silent", Duration::from_secs(2)).await;
    assert!(
        delay >= Duration::from_millis(1000),
        "a poll was woken {delay:?} after the push, with announcements off"
    );
}
