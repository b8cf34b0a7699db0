//! Optional authentication over real HTTP: off by default; with tokens or
//! JWT keys configured, every route but `GET /health` needs a bearer token,
//! a read token may only observe, and every refusal writes nothing.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::TestBroker;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use queen_server::{AuthConfig, Role, ServerConfig};
use reqwest::Method;
use serde_json::{json, Value};

const READ: &str = "read-token-0123456789";
const WRITE: &str = "write-token-0123456789";
const SECRET: &[u8] = b"hs256-test-secret-that-is-long-enough";
const PUBLIC_PEM: &str = include_str!("fixtures/jwt-test-rs256-public.pem");
const PRIVATE_PEM: &str = include_str!("fixtures/jwt-test-rs256-private.pem");

/// A broker with a read and a write static token.
async fn with_tokens() -> TestBroker {
    let auth = AuthConfig::default()
        .with_token(READ, Role::ReadOnly)
        .unwrap()
        .with_token(WRITE, Role::Admin)
        .unwrap();
    TestBroker::start_with(ServerConfig { auth, ..ServerConfig::default() }).await
}

async fn with_auth(auth: AuthConfig) -> TestBroker {
    TestBroker::start_with(ServerConfig { auth, ..ServerConfig::default() }).await
}

/// One request with an optional `Authorization` header value; answers
/// (status, headers, body: JSON, else the text as a string, or Null).
async fn send(
    b: &TestBroker,
    method: Method,
    path: &str,
    authorization: Option<&str>,
    body: Option<Value>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let mut req = b.http.request(method, b.url(path));
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, headers, body)
}

/// A request with `Authorization: Bearer <token>`.
async fn as_(
    b: &TestBroker,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    send(b, method, path, Some(&format!("Bearer {token}")), body).await
}

fn push_body(queue: &str, tx: &str) -> Value {
    json!({"items": [{"queue": queue, "partition": "p", "transactionId": tx, "payload": {"tx": tx}}]})
}

fn assert_unauthorized(status: u16, headers: &reqwest::header::HeaderMap, body: &Value) {
    assert_eq!(status, 401, "{body}");
    let challenge = headers.get("www-authenticate").expect("WWW-Authenticate").to_str().unwrap();
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    assert_eq!(body["code"], "unauthorized", "{body}");
    assert!(body["error"].is_string(), "{body}");
    assert!(headers.get("x-request-id").is_some(), "refusals carry a request id");
}

fn assert_forbidden(status: u16, body: &Value) {
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "forbidden", "{body}");
    assert!(body["error"].is_string(), "{body}");
}

fn now() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

fn hs256(claims: &Value, secret: &[u8]) -> String {
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(secret).unwrap())
        .unwrap()
}

fn rs256(claims: &Value) -> String {
    let key = EncodingKey::from_rsa_pem(PRIVATE_PEM.as_bytes()).unwrap();
    jsonwebtoken::encode(&Header::new(Algorithm::RS256), claims, &key).unwrap()
}

/// base64url without padding, for hand-made tokens.
fn b64url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

fn role_claims(role: &str) -> Value {
    json!({"sub": "tester", "role": role, "exp": now() + 600})
}

#[tokio::test]
async fn auth_is_off_by_default_and_any_header_or_none_works() {
    let b = TestBroker::start().await;
    let (s, _, body) = send(&b, Method::POST, "/api/v1/push", None, Some(push_body("q", "t1"))).await;
    assert_eq!(s, 201, "{body}");
    let (s, _, body) = send(&b, Method::GET, "/api/v1/resources/queues", Some("Bearer whatever"), None).await;
    assert_eq!(s, 200, "{body}");
    b.pop_some("q", "batch=1").await;
}

#[tokio::test]
async fn health_is_open_with_auth_on() {
    let b = with_tokens().await;
    let (s, _, body) = send(&b, Method::GET, "/health", None, None).await;
    assert_eq!(s, 200, "{body}");
    let (s, _, _) = send(&b, Method::HEAD, "/health", None, None).await;
    assert_eq!(s, 200);
    // Only the probe: anything else on /health is not open.
    let (s, h, body) = send(&b, Method::POST, "/health", None, None).await;
    assert_unauthorized(s, &h, &body);
}

#[tokio::test]
async fn no_token_is_401_with_a_bearer_challenge_and_writes_nothing() {
    let b = with_tokens().await;
    for (method, path) in [
        (Method::GET, "/api/v1/resources/queues"),
        (Method::GET, "/openapi.json"),
        (Method::GET, "/metrics/prometheus"),
        (Method::GET, "/api/v1/pop/queue/q?wait=false"),
        (Method::GET, "/no/such/route"),
        (Method::GET, "/api/v1/kv/app/k"),
    ] {
        let (s, h, body) = send(&b, method, path, None, None).await;
        assert_unauthorized(s, &h, &body);
    }
    let (s, h, body) = send(&b, Method::POST, "/api/v1/push", None, Some(push_body("q", "t1"))).await;
    assert_unauthorized(s, &h, &body);
    assert_eq!(h["www-authenticate"], "Bearer realm=\"queen\"");
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn a_wrong_or_malformed_token_is_401() {
    let b = with_tokens().await;
    for authorization in [
        "Bearer not-a-token".to_owned(),
        format!("Bearer {WRITE}x"),
        format!("Bearer {}", &WRITE[..WRITE.len() - 1]),
        format!("Basic {WRITE}"),
        format!("Bearer{WRITE}"),
        "Bearer ".to_owned(),
        "Bearer a.b.c".to_owned(),
    ] {
        let (s, h, body) =
            send(&b, Method::POST, "/api/v1/push", Some(&authorization), Some(push_body("q", "t1"))).await;
        assert_unauthorized(s, &h, &body);
        // The refusal never echoes what was sent.
        assert!(!body.to_string().contains(WRITE), "{body}");
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn a_static_read_token_observes_and_is_403_on_every_write_route() {
    let b = with_tokens().await;
    // A message to look at, pushed with the write token.
    let (s, _, body) = as_(&b, WRITE, Method::POST, "/api/v1/push", Some(push_body("q", "t1"))).await;
    assert_eq!(s, 201, "{body}");
    for path in [
        "/api/v1/resources/queues",
        "/api/v1/status",
        "/api/v1/kv/app/k",
        "/openapi.json",
        "/metrics/prometheus",
    ] {
        let (s, _, body) = as_(&b, READ, Method::GET, path, None).await;
        assert_eq!(s, 200, "{path}: {body}");
    }
    // A stream's state read is a POST that changes nothing.
    let state = json!({"query_id": "none", "partition_id": "none", "keys": []});
    let (s, _, body) = as_(&b, READ, Method::POST, "/streams/v1/state/get", Some(state)).await;
    assert_eq!((s, body["success"].clone()), (200, json!(true)), "{body}");
    let before = b.written_rows().await;
    let refused = [
        (Method::POST, "/api/v1/push", Some(push_body("q", "t2"))),
        (Method::GET, "/api/v1/pop/queue/q?wait=false", None),
        (Method::GET, "/api/v1/pop/queue/q/partition/p?wait=false&autoAck=true", None),
        (Method::POST, "/api/v1/configure", Some(json!({"queue": "q2", "options": {}}))),
        (Method::POST, "/api/v1/kv", Some(json!({"operations": [{"op": "get", "ns": "app", "key": "k"}]}))),
        (Method::PUT, "/api/v1/kv/app/k", Some(json!({"value": 1, "forever": true}))),
        (Method::DELETE, "/api/v1/resources/queues/q", None),
        (Method::GET, "/api/v1/pop?namespace=ns&wait=false", None),
        (
            Method::POST,
            "/streams/v1/queries",
            Some(json!({"name": "s", "source_queue": "q", "config_hash": "h"})),
        ),
        (Method::POST, "/streams/v1/cycle", Some(json!({"query_id": "x", "partition_id": "y"}))),
    ];
    for (method, path, body) in refused {
        let (s, _, answer) = as_(&b, READ, method, path, body).await;
        assert_forbidden(s, &answer);
    }
    // Nothing was written or leased: the one message is still there to pop.
    assert_eq!(b.written_rows().await, before);
    let (s, _, pop) = as_(&b, WRITE, Method::GET, "/api/v1/pop/queue/q?wait=false&batch=10", None).await;
    assert_eq!(s, 200, "{pop}");
    assert_eq!(TestBroker::tx_ids(&pop), ["t1"]);
    let (_, _, kv) = as_(&b, READ, Method::GET, "/api/v1/kv/app/k", None).await;
    assert_eq!(kv["found"], json!(false), "{kv}");
}

#[tokio::test]
async fn a_static_write_token_pushes_pops_acks_and_uses_kv() {
    let b = with_tokens().await;
    let (s, _, body) = as_(&b, WRITE, Method::POST, "/api/v1/push", Some(push_body("q", "t1"))).await;
    assert_eq!(s, 201, "{body}");
    let (s, _, pop) = as_(&b, WRITE, Method::GET, "/api/v1/pop/queue/q?wait=false", None).await;
    assert_eq!(s, 200, "{pop}");
    let msg = &pop["messages"][0];
    let ack = json!({"transactionId": msg["transactionId"], "partitionId": msg["partitionId"],
                     "leaseId": msg["leaseId"], "status": "completed"});
    let (s, _, body) = as_(&b, WRITE, Method::POST, "/api/v1/ack", Some(ack)).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body[0]["success"], json!(true), "{body}");
    let ops = json!({"operations": [{"op": "put", "ns": "app", "key": "k", "value": 7, "forever": true}]});
    let (s, _, body) = as_(&b, WRITE, Method::POST, "/api/v1/kv", Some(ops)).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["results"][0]["applied"], json!(true), "{body}");
    let (s, _, body) = as_(&b, WRITE, Method::GET, "/api/v1/kv/app/k", None).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["value"], json!(7), "{body}");
    let (s, _, body) =
        as_(&b, WRITE, Method::PUT, "/api/v1/kv/app/k2", Some(json!({"value": 1, "forever": true}))).await;
    assert_eq!(s, 200, "{body}");
    // The scheme name is case-insensitive.
    let (s, _, body) =
        send(&b, Method::GET, "/api/v1/kv/app/k2", Some(&format!("bearer {WRITE}")), None).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["value"], json!(1));
}

#[tokio::test]
async fn hs256_jwts_carry_their_role_and_bad_ones_are_401() {
    let b = with_auth(AuthConfig::default().with_hs256_secret(SECRET).unwrap()).await;
    let read = hs256(&role_claims("read"), SECRET);
    let write = hs256(&role_claims("write"), SECRET);
    let (s, _, body) = as_(&b, read.as_str(), Method::GET, "/api/v1/resources/queues", None).await;
    assert_eq!(s, 200, "{body}");
    let (s, _, body) = as_(&b, &read, Method::POST, "/api/v1/push", Some(push_body("q", "t1"))).await;
    assert_forbidden(s, &body);
    assert_eq!(b.written_rows().await, 0);
    let (s, _, body) = as_(&b, &write, Method::POST, "/api/v1/push", Some(push_body("q", "t1"))).await;
    assert_eq!(s, 201, "{body}");

    let header = b64url(br#"{"alg":"none","typ":"JWT"}"#);
    let claims = b64url(role_claims("write").to_string().as_bytes());
    let signature = write.rsplit('.').next().unwrap();
    let bad = [
        ("expired", hs256(&json!({"role": "write", "exp": now() - 3600}), SECRET)),
        ("wrong secret", hs256(&role_claims("write"), b"another-secret")),
        ("no exp", hs256(&json!({"role": "write"}), SECRET)),
        ("not yet valid", hs256(&json!({"role": "write", "exp": now() + 7200, "nbf": now() + 3600}), SECRET)),
        ("alg none", format!("{header}.{claims}.")),
        ("alg none with a signature", format!("{header}.{claims}.{signature}")),
        ("tampered claims", {
            let mut parts: Vec<&str> = read.split('.').collect();
            parts[1] = &claims;
            parts.join(".")
        }),
    ];
    for (what, token) in &bad {
        let (s, h, body) = as_(&b, token, Method::POST, "/api/v1/push", Some(push_body("q", "t2"))).await;
        assert_eq!(s, 401, "{what}: {body}");
        assert_unauthorized(s, &h, &body);
    }
    let (s, _, body) = as_(
        &b,
        &hs256(&json!({"role": "superuser", "exp": now() + 600}), SECRET),
        Method::GET,
        "/api/v1/status",
        None,
    )
    .await;
    assert_forbidden(s, &body);
    let (s, _, body) =
        as_(&b, &hs256(&json!({"exp": now() + 600}), SECRET), Method::GET, "/api/v1/status", None).await;
    assert_forbidden(s, &body);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages").await, 1);
}

#[tokio::test]
async fn rs256_jwts_verify_with_the_public_key_and_alg_confusion_is_refused() {
    let only_rsa = AuthConfig::default().with_rs256_public_key_pem(PUBLIC_PEM.as_bytes()).unwrap();
    let b = with_auth(only_rsa).await;
    let (s, _, body) =
        as_(&b, &rs256(&role_claims("write")), Method::POST, "/api/v1/push", Some(push_body("q", "t1")))
            .await;
    assert_eq!(s, 201, "{body}");
    let (s, _, body) = as_(&b, &rs256(&role_claims("read")), Method::GET, "/api/v1/status", None).await;
    assert_eq!(s, 200, "{body}");
    let (s, _, body) =
        as_(&b, &rs256(&role_claims("read")), Method::POST, "/api/v1/push", Some(push_body("q", "t2"))).await;
    assert_forbidden(s, &body);
    // The classic confusion: HS256 "signed" with the public key as the HMAC secret.
    let confused = hs256(&role_claims("write"), PUBLIC_PEM.as_bytes());
    let (s, h, body) = as_(&b, &confused, Method::POST, "/api/v1/push", Some(push_body("q", "t3"))).await;
    assert_unauthorized(s, &h, &body);
    let expired = rs256(&json!({"role": "write", "exp": now() - 3600}));
    let (s, h, body) = as_(&b, &expired, Method::GET, "/api/v1/status", None).await;
    assert_unauthorized(s, &h, &body);
    drop(b);

    // With an HS256 secret configured too, HS256 tokens meet the secret, never the RSA key.
    let both = AuthConfig::default()
        .with_rs256_public_key_pem(PUBLIC_PEM.as_bytes())
        .unwrap()
        .with_hs256_secret(SECRET)
        .unwrap();
    let b = with_auth(both).await;
    let (s, h, body) = as_(&b, &confused, Method::POST, "/api/v1/push", Some(push_body("q", "t3"))).await;
    assert_unauthorized(s, &h, &body);
    let (s, _, body) =
        as_(&b, &rs256(&role_claims("write")), Method::POST, "/api/v1/push", Some(push_body("q", "t4")))
            .await;
    assert_eq!(s, 201, "{body}");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages WHERE transaction_id = 't3'").await, 0);
}

#[tokio::test]
async fn issuer_and_audience_are_required_when_configured() {
    let auth =
        AuthConfig::default().with_hs256_secret(SECRET).unwrap().with_issuer("idp").with_audience("queen");
    let b = with_auth(auth).await;
    let good = json!({"role": "read", "exp": now() + 600, "iss": "idp", "aud": "queen"});
    let (s, _, body) = as_(&b, &hs256(&good, SECRET), Method::GET, "/api/v1/status", None).await;
    assert_eq!(s, 200, "{body}");
    let listed = json!({"role": "read", "exp": now() + 600, "iss": "idp", "aud": ["other", "queen"]});
    let (s, _, body) = as_(&b, &hs256(&listed, SECRET), Method::GET, "/api/v1/status", None).await;
    assert_eq!(s, 200, "{body}");
    for (what, claims) in [
        ("wrong audience", json!({"role": "read", "exp": now() + 600, "iss": "idp", "aud": "other"})),
        ("wrong issuer", json!({"role": "read", "exp": now() + 600, "iss": "evil", "aud": "queen"})),
        ("no audience", json!({"role": "read", "exp": now() + 600, "iss": "idp"})),
        ("no issuer", json!({"role": "read", "exp": now() + 600, "aud": "queen"})),
    ] {
        let (s, h, body) = as_(&b, &hs256(&claims, SECRET), Method::GET, "/api/v1/status", None).await;
        assert_eq!(s, 401, "{what}: {body}");
        assert_unauthorized(s, &h, &body);
    }
}

#[tokio::test]
async fn refusals_are_counted_in_the_metrics() {
    let b = with_tokens().await;
    let (s, _, _) = send(&b, Method::GET, "/api/v1/status", None, None).await;
    assert_eq!(s, 401);
    let resp = b.http.get(b.url("/metrics/prometheus")).bearer_auth(READ).send().await.expect("metrics");
    assert_eq!(resp.status().as_u16(), 200);
    let text = resp.text().await.unwrap();
    assert!(
        text.lines().any(|l| l.starts_with("queen_http_requests_total")
            && l.contains("route=\"/api/v1/status\"")
            && l.contains("status=\"401\"")),
        "no 401 line in the metrics"
    );
}

#[test]
fn bad_keys_and_tokens_fail_the_configuration() {
    assert!(AuthConfig::default().with_rs256_public_key_pem(PRIVATE_PEM.as_bytes()).is_err());
    assert!(AuthConfig::default().with_rs256_public_key_pem(b"not a pem").is_err());
    let damaged = PUBLIC_PEM.replacen("MII", "MIA", 1);
    assert!(AuthConfig::default().with_rs256_public_key_pem(damaged.as_bytes()).is_err());
    assert!(AuthConfig::default().with_hs256_secret(b"").is_err());
    assert!(AuthConfig::default().with_token("", Role::ReadOnly).is_err());
    assert!(!AuthConfig::default().is_enabled());
}

#[test]
fn serve_refuses_to_start_on_a_bad_key_file_and_names_it() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_queen"))
        .arg("serve")
        .env("QUEEN_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .env("QUEEN_JWT_PUBLIC_KEY_FILE", "/nonexistent/queen-key.pem")
        .env("QUEEN_AUTH_TOKENS", "secret-in-env:read")
        .output()
        .expect("run queen serve");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/queen-key.pem"), "{stderr}");
    assert!(!stderr.contains("secret-in-env"), "{stderr}");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_queen"))
        .arg("serve")
        .env("QUEEN_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .env("QUEEN_JWT_AUDIENCE", "queen")
        .output()
        .expect("run queen serve");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--jwt-audience"));
}

#[tokio::test]
async fn queen_roles_read_only_read_write_and_admin_each_get_their_routes() {
    let b = with_auth(AuthConfig::default().with_hs256_secret(SECRET).unwrap()).await;
    let ro = hs256(&json!({"sub": "viewer", "role": "read-only", "exp": now() + 600}), SECRET);
    let rw = hs256(&json!({"sub": "alice", "role": "read-write", "exp": now() + 600}), SECRET);
    // A roles array: the highest role named counts; unknown names are skipped.
    let admin = hs256(
        &json!({"sub": "root", "roles": ["read-only", "janitor", "admin"], "exp": now() + 600}),
        SECRET,
    );

    // read-only observes and nothing else.
    assert_eq!(as_(&b, &ro, Method::GET, "/api/v1/status", None).await.0, 200);
    let (s, _, body) = as_(&b, &ro, Method::POST, "/api/v1/push", Some(push_body("q", "t0"))).await;
    assert_forbidden(s, &body);

    // read-write produces and consumes (Queen's own token: 403 here before).
    let (s, _, body) = as_(&b, &rw, Method::POST, "/api/v1/push", Some(push_body("q", "t1"))).await;
    assert_eq!(s, 201, "{body}");
    let (s, _, popped) = as_(&b, &rw, Method::GET, "/api/v1/pop/queue/q?wait=false", None).await;
    assert_eq!(s, 200, "{popped}");
    // ...but the maintenance switches and deletions are the admin's.
    for (method, path) in [
        (Method::GET, "/api/v1/system/maintenance"),
        (Method::POST, "/api/v1/system/maintenance"),
        (Method::DELETE, "/api/v1/resources/queues/q"),
        (Method::DELETE, "/api/v1/consumer-groups/g"),
    ] {
        let body = (method == Method::POST).then(|| json!({"enabled": false}));
        let (s, _, answer) = as_(&b, &rw, method.clone(), path, body).await;
        assert_forbidden(s, &answer);
        assert!(answer["error"].as_str().unwrap().contains("admin"), "{path}: {answer}");
    }
    assert_eq!(b.scalar("SELECT count(*) FROM queen.queues WHERE name = 'q'").await, 1, "nothing deleted");

    // admin may do all of it.
    let (s, _, answer) = as_(&b, &admin, Method::GET, "/api/v1/system/maintenance", None).await;
    assert_eq!(s, 200, "{answer}");
    let (s, _, answer) = as_(&b, &admin, Method::DELETE, "/api/v1/resources/queues/q", None).await;
    assert_eq!(s, 200, "{answer}");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.queues WHERE name = 'q'").await, 0);
}

#[tokio::test]
async fn static_tokens_take_queen_role_names() {
    let auth = AuthConfig::default()
        .with_token_spec("viewer-token-0123:read-only")
        .and_then(|a| a.with_token_spec("worker-token-0123:read-write"))
        .and_then(|a| a.with_token_spec("root-token-0123:admin"))
        .unwrap();
    let b = with_auth(auth).await;
    let (s, _, body) =
        as_(&b, "viewer-token-0123", Method::POST, "/api/v1/push", Some(push_body("q", "a"))).await;
    assert_forbidden(s, &body);
    assert_eq!(
        as_(&b, "worker-token-0123", Method::POST, "/api/v1/push", Some(push_body("q", "b"))).await.0,
        201
    );
    let (s, _, body) = as_(&b, "worker-token-0123", Method::GET, "/api/v1/system/maintenance", None).await;
    assert_forbidden(s, &body);
    assert_eq!(as_(&b, "root-token-0123", Method::GET, "/api/v1/system/maintenance", None).await.0, 200);
}

#[tokio::test]
async fn with_jwt_on_every_message_carries_its_pushers_sub_and_a_body_cannot_forge_it() {
    let auth =
        AuthConfig::default().with_hs256_secret(SECRET).unwrap().with_token(WRITE, Role::Admin).unwrap();
    let b = with_auth(auth).await;
    let alice = hs256(&json!({"sub": "alice", "role": "read-write", "exp": now() + 600}), SECRET);
    let forged = json!({"items": [{"queue": "ps", "transactionId": "p1", "payload": {"n": 1}, "producerSub": "mallory"}]});
    let (s, _, body) = as_(&b, &alice, Method::POST, "/api/v1/push", Some(forged)).await;
    assert_eq!(s, 201, "{body}");
    // A bundle's pushes are stamped the same way.
    let bundle = json!({"operations": [{"type": "push", "items": [
        {"queue": "ps", "transactionId": "p2", "payload": {"n": 2}, "producerSub": "mallory"}]}], "requiredLeases": []});
    let (s, _, body) = as_(&b, &alice, Method::POST, "/api/v1/transaction", Some(bundle)).await;
    assert_eq!((s, body["success"].clone()), (200, json!(true)), "{body}");
    // A static token proves no identity: nothing is stamped.
    let (s, _, _) = as_(
        &b,
        WRITE,
        Method::POST,
        "/api/v1/push",
        Some(json!({"items": [
        {"queue": "ps", "transactionId": "p3", "payload": {"n": 3}, "producerSub": "mallory"}]})),
    )
    .await;
    assert_eq!(s, 201);

    let (s, _, popped) = as_(&b, &alice, Method::GET, "/api/v1/pop/queue/ps?batch=10&wait=false", None).await;
    assert_eq!(s, 200, "{popped}");
    let subs: Vec<(String, Value)> = popped["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["transactionId"].as_str().unwrap().to_owned(), m["producerSub"].clone()))
        .collect();
    assert_eq!(
        subs,
        [
            ("p1".to_owned(), json!("alice")),
            ("p2".to_owned(), json!("alice")),
            ("p3".to_owned(), Value::Null)
        ]
    );

    // The identity follows a message into the dead-letter queue and back.
    let (s, _, _) = as_(
        &b,
        WRITE,
        Method::POST,
        "/api/v1/configure",
        Some(json!({"queue": "dl", "options": {"retryLimit": 0}})),
    )
    .await;
    assert_eq!(s, 200);
    as_(
        &b,
        &alice,
        Method::POST,
        "/api/v1/push",
        Some(json!({"items": [{"queue": "dl", "transactionId": "d1", "payload": {}}]})),
    )
    .await;
    let (_, _, m) = as_(&b, &alice, Method::GET, "/api/v1/pop/queue/dl?wait=false", None).await;
    let msg = &m["messages"][0];
    let ack = json!({"transactionId": "d1", "partitionId": msg["partitionId"], "leaseId": msg["leaseId"], "status": "failed"});
    let (s, _, acked) = as_(&b, &alice, Method::POST, "/api/v1/ack", Some(ack)).await;
    assert_eq!(s, 200, "{acked}");
    let (_, _, dlq) = as_(&b, WRITE, Method::GET, "/api/v1/dlq?queue=dl", None).await;
    assert_eq!(dlq["messages"][0]["producerSub"], json!("alice"), "{dlq}");
}

/// A fired timer carries the `sub` of who scheduled it (the timers call or a
/// transaction's rider), and a stream's emits the `sub` of who ran the
/// cycle, as a push's messages do; a static token stamps nothing.
#[tokio::test]
async fn fired_timers_and_stream_emits_carry_their_producers_sub() {
    use base64::Engine as _;
    let auth =
        AuthConfig::default().with_hs256_secret(SECRET).unwrap().with_token(WRITE, Role::Admin).unwrap();
    let b = with_auth(auth).await;
    let alice = hs256(&json!({"sub": "alice", "role": "read-write", "exp": now() + 600}), SECRET);
    let bob = hs256(&json!({"sub": "bob", "role": "read-write", "exp": now() + 600}), SECRET);
    let timer = |key: &str| {
        let payload = base64::engine::general_purpose::STANDARD.encode(json!({"k": key}).to_string());
        json!({"op": "schedule", "queue": "tq", "timerKey": key, "payload": payload, "delayMs": 0,
               "txn": format!("t-{key}")})
    };
    let (s, _, body) =
        as_(&b, &alice, Method::POST, "/api/v1/timers", Some(json!({"operations": [timer("a")]}))).await;
    assert_eq!(s, 200, "{body}");
    let rider = json!({"operations": [], "requiredLeases": [], "timers": [timer("b")]});
    let (s, _, body) = as_(&b, &bob, Method::POST, "/api/v1/transaction", Some(rider)).await;
    assert_eq!((s, body["success"].clone()), (200, json!(true)), "{body}");
    let (s, _, body) =
        as_(&b, WRITE, Method::POST, "/api/v1/timers", Some(json!({"operations": [timer("c")]}))).await;
    assert_eq!(s, 200, "{body}");

    let mut subs = std::collections::BTreeMap::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while subs.len() < 3 {
        assert!(std::time::Instant::now() < deadline, "timers never fired: {subs:?}");
        let (_, _, popped) =
            as_(&b, WRITE, Method::GET, "/api/v1/pop/queue/tq?batch=10&wait=false&autoAck=true", None).await;
        for m in popped["messages"].as_array().cloned().unwrap_or_default() {
            subs.insert(m["transactionId"].as_str().unwrap().to_owned(), m["producerSub"].clone());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        subs.into_iter().collect::<Vec<_>>(),
        [
            ("t-a".to_owned(), json!("alice")),
            ("t-b".to_owned(), json!("bob")),
            ("t-c".to_owned(), Value::Null)
        ]
    );

    // A stream cycle's emits are stamped with the cycle's caller.
    let reg = json!({"name": "sq", "source_queue": "ssrc", "sink_queue": "sdst", "config_hash": "h"});
    let (s, _, reg) = as_(&b, &alice, Method::POST, "/streams/v1/queries", Some(reg)).await;
    assert_eq!(s, 200, "{reg}");
    as_(&b, &alice, Method::POST, "/api/v1/push", Some(json!({"items": [{"queue": "ssrc", "payload": {}}]})))
        .await;
    let (_, _, pop) = as_(
        &b,
        &alice,
        Method::GET,
        "/api/v1/pop/queue/ssrc?batch=10&wait=false&consumerGroup=streams.sq",
        None,
    )
    .await;
    let cycle = json!({
        "query_id": reg["query_id"], "partition_id": pop["partitionId"], "consumer_group": "streams.sq",
        "state_ops": [], "push_items": [{"queue": "sdst", "partition": "Default", "payload": {"e": 1}}],
        "ack": {"leaseId": pop["leaseId"], "status": "completed", "count": 1}, "release_lease": true,
    });
    let (s, _, body) = as_(&b, &bob, Method::POST, "/streams/v1/cycle", Some(cycle)).await;
    assert_eq!((s, body["success"].clone()), (200, json!(true)), "{body}");
    let (_, _, emitted) =
        as_(&b, WRITE, Method::GET, "/api/v1/pop/queue/sdst?batch=10&wait=false", None).await;
    assert_eq!(emitted["messages"][0]["producerSub"], json!("bob"), "{emitted}");
}
