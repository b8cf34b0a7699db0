//! OpenTelemetry export (`--features otel`): a real `queen serve` given
//! `OTEL_EXPORTER_OTLP_ENDPOINT` sends its request spans over OTLP/HTTP to
//! a collector (here a minimal one that records what it is sent). Each span
//! carries the route template and the request id the client sent; no KV key,
//! value or namespace and no payload reaches the exported spans.
//!
//! Run: `cargo nextest run -p queen --features otel --test otel`.
#![cfg(feature = "otel")]
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{BrokerProcess, ServeSpec, TestDb};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Accepts OTLP/HTTP posts and keeps (path, body) of each.
async fn collector() -> (u16, Arc<Mutex<Vec<(String, Vec<u8>)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let keep = keep.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                loop {
                    // One request: headers, then Content-Length bytes.
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    let length: usize = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse().unwrap())
                        })
                        .unwrap_or(0);
                    while buf.len() < end + 4 + length {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let path = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
                    keep.lock().unwrap().push((path, buf[end + 4..end + 4 + length].to_vec()));
                    buf.drain(..end + 4 + length);
                    let ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n";
                    if conn.write_all(ok).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, seen)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_spans_reach_the_collector_with_route_and_request_id_and_no_secrets() {
    let (port, seen) = collector().await;
    let db = TestDb::create().await;
    let spec = ServeSpec::for_db(&db.name)
        .env("RUST_LOG", "info")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("http://127.0.0.1:{port}"))
        .env("OTEL_SERVICE_NAME", "queen-otel-test");
    let mut broker = BrokerProcess::spawn_with(&spec).await;

    let secret_ns = format!("zqns{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let secret_key = format!("zqkey{}", uuid::Uuid::new_v4().simple());
    let secret_value = format!("zqval{}", uuid::Uuid::new_v4().simple());
    let secret_payload = format!("zqpay{}", uuid::Uuid::new_v4().simple());
    let request_id = format!("otel-test-{}", uuid::Uuid::new_v4().simple());

    let resp = broker
        .http
        .post(broker.url("/api/v1/kv"))
        .header("x-request-id", &request_id)
        .json(&json!({"operations": [
            {"op": "put", "ns": secret_ns, "key": secret_key, "value": secret_value, "ttlSeconds": 60},
            {"op": "get", "ns": secret_ns, "key": secret_key},
        ]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (code, body) = broker
        .post("/api/v1/push", &json!({"items": [{"queue": "otelq", "payload": {"p": secret_payload}}]}))
        .await;
    assert_eq!(code, 201, "{body}");
    let (code, _) = broker.get(&format!("/api/v1/kv/{secret_ns}/{secret_key}")).await;
    assert_eq!(code, 200);

    // Shutdown flushes the batch of spans still buffered.
    broker.terminate();
    let status = broker.wait_exit(Duration::from_secs(20)).await;
    assert!(status.success(), "queen serve exited with {status}");

    let posts = seen.lock().unwrap().clone();
    assert!(!posts.is_empty(), "the collector received nothing");
    assert!(
        posts.iter().all(|(path, _)| path == "/v1/traces"),
        "{:?}",
        posts.iter().map(|p| &p.0).collect::<Vec<_>>()
    );
    let all: Vec<u8> = posts.iter().flat_map(|(_, b)| b.clone()).collect();
    eprintln!("otel figures: {} OTLP posts, {} bytes of spans", posts.len(), all.len());
    assert!(contains(&all, "queen-otel-test"), "the service name is the resource's");
    assert!(contains(&all, "request"), "the request span is exported");
    assert!(contains(&all, &request_id), "the span carries the client's request id");
    assert!(contains(&all, "/api/v1/kv/{ns}/{*key}"), "the path route is named by its template");
    assert!(contains(&all, "/api/v1/push"));
    for secret in [&secret_ns, &secret_key, &secret_value, &secret_payload] {
        assert!(!contains(&all, secret), "a secret reached the exported spans: {secret}");
    }
}
