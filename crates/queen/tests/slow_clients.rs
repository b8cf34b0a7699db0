//! Clients that send too much or too slowly: an announced oversized body is
//! refused before it is sent, a chunked one as soon as it passes the limit,
//! a body that dribbles gets 408, headers that never finish lose their
//! connection; nothing is written, and honest slow work (a long poll) is not
//! cut by these timeouts.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::TestBroker;
use queen_server::ServerConfig;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A guard against a hang, far above anything the broker should need.
const PATIENCE: Duration = Duration::from_secs(20);

async fn connect(b: &TestBroker) -> TcpStream {
    TcpStream::connect(b.base.trim_start_matches("http://")).await.unwrap()
}

/// Reads one HTTP/1.1 response (status and JSON body; the broker always
/// sends a Content-Length), without sending anything more.
async fn read_response(stream: &mut TcpStream) -> (u16, Value) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .expect("the broker answered in time")
            .unwrap();
        assert!(n > 0, "connection closed before a full response: {:?}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        let Some(end) = text.find("\r\n\r\n") else { continue };
        let head = &text[..end];
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
            })
            .expect("a content-length");
        if buf.len() >= end + 4 + length {
            let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
            let body = serde_json::from_slice(&buf[end + 4..end + 4 + length]).unwrap();
            return (status, body);
        }
    }
}

/// Whether the broker closes the connection (read returns 0 or an error)
/// without answering anything.
async fn closed_without_answer(stream: &mut TcpStream) -> bool {
    let mut chunk = [0u8; 1024];
    match tokio::time::timeout(PATIENCE, stream.read(&mut chunk)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) => false,
        Err(_) => panic!("the connection was still open after {PATIENCE:?}"),
    }
}

#[tokio::test]
async fn an_announced_oversized_body_is_413_before_it_is_sent() {
    let b =
        TestBroker::start_with(ServerConfig { max_body_bytes: 64 * 1024, ..ServerConfig::default() }).await;
    for (path, code_field, code) in
        [("/api/v1/push", "code", "payload_too_large"), ("/api/v1/kv", "error", "payload_too_large")]
    {
        let mut s = connect(&b).await;
        // 64 MiB announced, 1 KiB sent: the answer must come without the rest.
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            64 * 1024 * 1024
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&[b' '; 1024]).await.unwrap();
        let (status, body) = read_response(&mut s).await;
        assert_eq!((status, body[code_field].as_str()), (413, Some(code)), "{path}: {body}");
    }
    // The KV envelope carries its reason.
    let mut s = connect(&b).await;
    s.write_all(b"PUT /api/v1/kv/app/k HTTP/1.1\r\nHost: t\r\nContent-Length: 999999999\r\n\r\n")
        .await
        .unwrap();
    let (status, body) = read_response(&mut s).await;
    assert_eq!((status, body["reason"].as_str()), (413, Some("kv_body_too_large")), "{body}");
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn a_chunked_body_is_refused_once_it_passes_the_limit() {
    let b =
        TestBroker::start_with(ServerConfig { max_body_bytes: 64 * 1024, ..ServerConfig::default() }).await;
    let mut s = connect(&b).await;
    s.write_all(b"POST /api/v1/push HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    // 80 KiB in 8 KiB chunks, and then the body never ends.
    let piece = vec![b' '; 8 * 1024];
    for _ in 0..10 {
        s.write_all(format!("{:x}\r\n", piece.len()).as_bytes()).await.unwrap();
        s.write_all(&piece).await.unwrap();
        s.write_all(b"\r\n").await.unwrap();
    }
    let (status, body) = read_response(&mut s).await;
    assert_eq!((status, body["code"].as_str()), (413, Some("payload_too_large")), "{body}");
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn a_body_that_dribbles_is_408_and_writes_nothing() {
    let b = TestBroker::start_with(ServerConfig {
        body_read_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    })
    .await;
    let body = r#"{"items": [{"queue": "q", "transactionId": "slow", "payload": 1}]}"#;
    for (path, code_field, code) in
        [("/api/v1/push", "code", "request_timeout"), ("/api/v1/kv", "error", "request_timeout")]
    {
        let mut s = connect(&b).await;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        // A byte every 100 ms: each frame is prompt, the whole body is not.
        let mut answered = None;
        for byte in body.as_bytes() {
            if s.write_all(&[*byte]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut peek = [0u8; 1];
            if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(1), s.peek(&mut peek)).await {
                if n > 0 {
                    answered = Some(read_response(&mut s).await);
                    break;
                }
            }
        }
        let (status, answer) = match answered {
            Some(a) => a,
            None => read_response(&mut s).await,
        };
        assert_eq!((status, answer[code_field].as_str()), (408, Some(code)), "{path}: {answer}");
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn headers_that_never_finish_lose_the_connection() {
    let b = TestBroker::start_with(ServerConfig {
        header_read_timeout: Duration::from_millis(300),
        ..ServerConfig::default()
    })
    .await;
    let mut s = connect(&b).await;
    s.write_all(b"POST /api/v1/push HTTP/1.1\r\nHost: t\r\nX-Slow: ").await.unwrap();
    assert!(closed_without_answer(&mut s).await, "a half-sent header must not be answered");
    // An idle connection that never starts a request is closed too.
    let mut idle = connect(&b).await;
    assert!(closed_without_answer(&mut idle).await);
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn a_long_poll_outlives_the_header_and_body_timeouts() {
    let b = TestBroker::start_with(ServerConfig {
        header_read_timeout: Duration::from_millis(200),
        body_read_timeout: Duration::from_millis(200),
        ..ServerConfig::default()
    })
    .await;
    let started = std::time::Instant::now();
    let (code, _) = b.get("/api/v1/pop/queue/lp?wait=true&timeout=1500").await;
    assert_eq!(code, 204, "the poll ran to its own timeout, not the connection's");
    assert!(started.elapsed() >= Duration::from_millis(1400), "answered after {:?}", started.elapsed());
    // A normal request on a fresh connection works.
    let health = reqwest::get(b.url("/health")).await.unwrap();
    assert_eq!(health.status(), 200);
}

/// Reads one response's head (up to the blank line), lower-cased.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n =
            tokio::time::timeout(PATIENCE, stream.read(&mut byte)).await.expect("an answer in time").unwrap();
        assert!(n > 0, "closed before a full head: {:?}", String::from_utf8_lossy(&buf));
        buf.push(byte[0]);
    }
    String::from_utf8_lossy(&buf).to_ascii_lowercase()
}

/// Whether the broker closes the connection, whatever it still sends first
/// (the rest of the answer's body).
async fn closes(stream: &mut TcpStream) -> bool {
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn an_answer_sent_before_the_body_was_read_says_connection_close_and_closes() {
    let b =
        TestBroker::start_with(ServerConfig { max_body_bytes: 64 * 1024, ..ServerConfig::default() }).await;
    for path in ["/api/v1/push", "/api/v1/kv", "/api/v1/configure"] {
        let mut s = connect(&b).await;
        // 128 KiB announced and 2 KiB of it sent, then a second request that a
        // kept-alive connection would read out of the unread body.
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            128 * 1024
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&[b' '; 2048]).await.unwrap();
        let answer = read_head(&mut s).await;
        assert!(answer.starts_with("http/1.1 413"), "{path}: {answer}");
        assert!(answer.contains("\r\nconnection: close\r\n"), "{path}: {answer}");
        let _ = s.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n").await;
        assert!(closes(&mut s).await, "{path}: the connection was kept open");
    }
    // A chunked body refused past the limit, too.
    let mut s = connect(&b).await;
    s.write_all(b"POST /api/v1/push HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await
        .unwrap();
    let piece = vec![b' '; 8 * 1024];
    for _ in 0..10 {
        s.write_all(format!("{:x}\r\n", piece.len()).as_bytes()).await.unwrap();
        s.write_all(&piece).await.unwrap();
        s.write_all(b"\r\n").await.unwrap();
    }
    let answer = read_head(&mut s).await;
    assert!(answer.starts_with("http/1.1 413") && answer.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(closes(&mut s).await, "the chunked request's connection was kept open");
    // An answer after the whole body keeps the connection.
    let mut s = connect(&b).await;
    s.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n").await.unwrap();
    let answer = read_head(&mut s).await;
    assert!(!answer.contains("connection: close"), "{answer}");
    assert_eq!(b.written_rows().await, 0);
}
