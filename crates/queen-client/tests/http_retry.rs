//! The retry policy of `HttpBroker`, against a scripted raw-TCP server that
//! counts requests: connection errors and 5xx are retried (503 after its
//! `Retry-After`), 4xx and 200 business refusals are not.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use queen_client::{Error, Expiry, HttpConfig, Queen, RetryPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One scripted answer: status, extra headers, body.
#[derive(Clone)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, &'static str)>,
    body: &'static str,
}

fn reply(status: u16, body: &'static str) -> Reply {
    Reply { status, headers: Vec::new(), body }
}

/// A server that answers the script in order (the last reply repeats) and
/// records every request head.
struct Script {
    base: String,
    count: Arc<AtomicUsize>,
    heads: Arc<Mutex<Vec<String>>>,
}

async fn serve(script: Vec<Reply>) -> Script {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (c, h) = (count.clone(), heads.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else { return };
            let (c, h, script) = (c.clone(), h.clone(), script.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Read the head, then the body by Content-Length.
                let head_end = loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                let len = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let i = c.fetch_add(1, Ordering::SeqCst);
                h.lock().unwrap().push(head);
                let r = &script[i.min(script.len() - 1)];
                let mut out = format!(
                    "HTTP/1.1 {} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
                    r.status,
                    r.body.len()
                );
                for (k, v) in &r.headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                out.push_str(r.body);
                let _ = sock.write_all(out.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    Script { base, count, heads }
}

fn quick() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_secs(2),
    }
}

const DELETED: &str = r#"{"deleted":true,"queue":"q","existed":true}"#;

#[tokio::test]
async fn a_503_is_retried_after_its_retry_after_then_the_200_answers() {
    let s = serve(vec![
        Reply {
            status: 503,
            headers: vec![("retry-after", "1")],
            body: r#"{"error":"database unavailable, retry"}"#,
        },
        reply(200, DELETED),
    ])
    .await;
    let queen = Queen::http(HttpConfig::new(&s.base).retry(quick())).unwrap();
    let started = Instant::now();
    assert!(queen.queue("q").delete().await.unwrap());
    assert_eq!(s.count.load(Ordering::SeqCst), 2);
    assert!(started.elapsed() >= Duration::from_millis(950), "Retry-After: 1 was not honoured");
}

#[tokio::test]
async fn a_500_is_retried_with_backoff_until_the_budget_is_spent() {
    let s = serve(vec![reply(500, r#"{"error":"internal error","code":"internal"}"#)]).await;
    let queen = Queen::http(HttpConfig::new(&s.base).retry(quick())).unwrap();
    let err = queen.queue("q").delete().await.unwrap_err();
    assert!(matches!(err, Error::Status { status: 500, .. }), "{err:?}");
    assert_eq!(s.count.load(Ordering::SeqCst), 4, "one attempt and three retries");
}

#[tokio::test]
async fn a_400_is_never_retried() {
    let s = serve(vec![
        reply(400, r#"{"error":"kv_bad_request","reason":"kv_bad_namespace","detail":"ns must match"}"#),
        reply(200, r#"{"results":[]}"#),
    ])
    .await;
    let queen = Queen::http(HttpConfig::new(&s.base).retry(quick())).unwrap();
    let err = queen.kv().put("BAD NS", "k", &1, Expiry::Forever).await.unwrap_err();
    match err {
        Error::Status { status, code, reason, message } => {
            assert_eq!(status, 400);
            assert_eq!(code.as_deref(), Some("kv_bad_request"));
            assert_eq!(reason.as_deref(), Some("kv_bad_namespace"));
            assert_eq!(message, "ns must match");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_429_is_a_4xx_and_is_not_retried() {
    let s = serve(vec![Reply {
        status: 429,
        headers: vec![("retry-after", "1")],
        body: r#"{"error":"slow down","code":"rate_limited"}"#,
    }])
    .await;
    let queen = Queen::http(HttpConfig::new(&s.base).retry(quick())).unwrap();
    let err = queen.queue("q").delete().await.unwrap_err();
    assert_eq!(err.code(), Some("rate_limited"));
    assert_eq!(s.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_200_business_refusal_is_returned_not_retried() {
    let s = serve(vec![reply(
        200,
        r#"{"transactionId":"t","success":false,"reason":"rejected_ack","error":"QTXN 1 acked message(s) on partition p are not leased by this worker or were already acked; the transaction rolled back","results":[]}"#,
    )])
    .await;
    let queen = Queen::http(HttpConfig::new(&s.base).retry(quick())).unwrap();
    let err = queen.tx().kv().put("ns", "k", &1, Expiry::Forever).commit().await.unwrap_err();
    assert!(matches!(&err, Error::Refused { message, .. } if message.contains("rolled back")), "{err:?}");
    assert_eq!(s.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_lost_precondition_is_a_value_and_is_not_retried() {
    let s = serve(vec![reply(
        200,
        r#"{"transactionId":"t","success":false,"ok":false,"reason":"kv_precondition","error":"lost","results":[],"failedIndex":0,"kvReason":"exists","key":"k","version":42,"value":{"by":"other"}}"#,
    )])
    .await;
    let queen = Queen::http(HttpConfig::new(&s.base).retry(quick())).unwrap();
    let out = queen.tx().once("ns", "k", Expiry::Forever).commit().await.unwrap();
    match out {
        queen_client::TxOutcome::PreconditionLost { failed_index, version, value, .. } => {
            assert_eq!((failed_index, version), (0, 42));
            assert_eq!(value.unwrap().get(), r#"{"by":"other"}"#);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.count.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn connection_errors_are_retried_on_the_next_url_round_robin() {
    // A port nobody listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let s = serve(vec![reply(200, DELETED)]).await;
    let config = HttpConfig::many([dead.clone(), s.base.clone()]).retry(quick());
    let queen = Queen::http(config).unwrap();
    // Whichever URL comes first, every call reaches the live one.
    for _ in 0..4 {
        assert!(queen.queue("q").delete().await.unwrap());
    }
    assert_eq!(s.count.load(Ordering::SeqCst), 4);

    // Only dead URLs: the connection error comes back after the retries.
    let queen = Queen::http(HttpConfig::new(dead).retry(quick())).unwrap();
    let started = Instant::now();
    let err = queen.queue("q").delete().await.unwrap_err();
    assert!(matches!(err, Error::Http(_)), "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(20 + 40 + 80));
}

#[tokio::test]
async fn requests_round_robin_and_carry_the_bearer_token() {
    let a = serve(vec![reply(200, DELETED)]).await;
    let b = serve(vec![reply(200, DELETED)]).await;
    let config = HttpConfig::many([a.base.clone(), b.base.clone()]).bearer_token("s3cret").retry(quick());
    let queen = Queen::http(config).unwrap();
    for _ in 0..4 {
        queen.queue("a/b c").delete().await.unwrap();
    }
    assert_eq!((a.count.load(Ordering::SeqCst), b.count.load(Ordering::SeqCst)), (2, 2));
    let heads = a.heads.lock().unwrap();
    assert!(heads[0].starts_with("DELETE /api/v1/resources/queues/a%2Fb%20c HTTP/1.1"), "{}", heads[0]);
    assert!(heads[0].to_ascii_lowercase().contains("authorization: bearer s3cret"));
}

#[tokio::test]
async fn a_timeout_is_not_retried() {
    // Accepts, never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let acc = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            acc.fetch_add(1, Ordering::SeqCst);
            held.push(sock);
        }
    });
    let queen =
        Queen::http(HttpConfig::new(base).timeout(Duration::from_millis(200)).retry(quick())).unwrap();
    let err = queen.queue("q").delete().await.unwrap_err();
    assert!(matches!(&err, Error::Http(e) if e.is_timeout()), "{err:?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}
