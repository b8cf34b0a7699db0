//! The SDK's bearer token against a broker with auth on (a real server in
//! process): the right token works, no token or a wrong one is a 401 that is
//! not retried, and a read token is refused (403) where it would write.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::Fixture;
use queen_client::{Error, Expiry, HttpBroker, HttpConfig, Queen, RetryPolicy};
use queen_server::{AuthConfig, ServerConfig};
use serde_json::json;

/// Retries slow enough that a retried 4xx would show in the elapsed time.
fn slow_retries() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        initial_backoff: Duration::from_secs(2),
        max_backoff: Duration::from_secs(4),
    }
}

fn client(f: &Fixture, token: Option<&str>) -> Queen<HttpBroker> {
    let mut config = HttpConfig::new(f.base.clone().unwrap()).retry(slow_retries());
    if let Some(t) = token {
        config = config.bearer_token(t);
    }
    Queen::http(config).unwrap()
}

async fn fixture() -> anyhow::Result<Fixture> {
    // `write` is kept as the name of the role that may do everything.
    let auth = AuthConfig::default().with_token_spec("secret:write")?.with_token_spec("peek:read")?;
    Ok(Fixture::http_with(ServerConfig { auth, ..ServerConfig::default() }).await)
}

fn assert_status(r: Result<impl std::fmt::Debug, Error>, status: u16, code: &str) {
    match r {
        Err(Error::Status { status: s, code: c, .. }) => {
            assert_eq!(s, status);
            assert_eq!(c.as_deref(), Some(code));
        }
        other => panic!("expected {status} {code}, got {other:?}"),
    }
}

/// `queen_http_requests_total` of one route and status, from the server's
/// Prometheus text (the recorder is per process, hence before/after).
async fn requests(queen: &Queen<HttpBroker>, route: &str, status: u16) -> u64 {
    let text = queen.broker().get_json(&["metrics", "prometheus"]).await.unwrap().0;
    let (route, status) = (format!("route=\"{route}\""), format!("status=\"{status}\""));
    text.lines()
        .filter(|l| l.starts_with("queen_http_requests_total{") && l.contains(&route) && l.contains(&status))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_opens_the_broker() -> anyhow::Result<()> {
    let f = fixture().await?;
    let queen = client(&f, Some("secret"));
    let q = queen.queue("guarded");
    q.push(&json!({"n": 1})).await?;
    let msgs = q.pop().batch(10).fetch().await?;
    assert_eq!(msgs.len(), 1);
    assert!(queen.ack(&msgs[0]).await?.success);
    let kv = queen.kv();
    kv.put("auth", "k", &7, Expiry::Forever).await?;
    assert_eq!(kv.get("auth", "k").await?.unwrap().json::<i64>()?, 7);
    assert!(queen.consumer_group("nobody").await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_or_a_wrong_one_is_401_and_not_retried() -> anyhow::Result<()> {
    let f = fixture().await?;
    let admin = client(&f, Some("secret"));
    let before = requests(&admin, "/api/v1/push", 401).await;

    for token in [None, Some("not-the-secret")] {
        let anonymous = client(&f, token);
        let started = Instant::now();
        let r = anonymous.queue("guarded").push(&json!({"n": 1})).await;
        let took = started.elapsed();
        assert_status(r, 401, "unauthorized");
        assert!(took < Duration::from_secs(2), "a 401 answered at once, not after a backoff: {took:?}");
        // Reads too: every route but /health needs the token.
        assert_status(anonymous.kv().get("auth", "k").await, 401, "unauthorized");
        assert_status(anonymous.consumer_groups().await, 401, "unauthorized");
    }
    // One request per push: the 401s were not sent again.
    assert_eq!(requests(&admin, "/api/v1/push", 401).await - before, 2);

    // Nothing was written.
    assert!(admin.queue("guarded").pop().batch(10).fetch().await?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_token_observes_but_cannot_write() -> anyhow::Result<()> {
    let f = fixture().await?;
    let admin = client(&f, Some("secret"));
    admin.queue("guarded").push(&json!({"n": 1})).await?;
    let reader = client(&f, Some("peek"));

    let started = Instant::now();
    assert_status(reader.queue("guarded").push(&json!({"n": 2})).await, 403, "forbidden");
    assert!(started.elapsed() < Duration::from_secs(2), "a 403 is not retried");
    // A pop takes a lease, and a KV call is a POST: both need write.
    assert_status(reader.queue("guarded").pop().fetch().await, 403, "forbidden");
    assert_status(reader.kv().get("auth", "k").await, 403, "forbidden");
    assert_status(reader.seek("g", "guarded", queen_client::Seek::End).await, 403, "forbidden");
    assert_status(
        reader.seek_partition("g", "guarded", "Default", queen_client::Seek::End).await,
        403,
        "forbidden",
    );
    // GET routes are open to it.
    assert!(reader.consumer_groups().await?.is_empty());
    assert_eq!(reader.queue("guarded").dlq(10, 0).await?.messages.len(), 0);

    // Only the admin's message is there.
    assert_eq!(admin.queue("guarded").pop().batch(10).fetch().await?.len(), 1);
    Ok(())
}
