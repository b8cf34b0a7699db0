//! JWT like Queen, over real HTTP: HS384, HS512 and EdDSA beside HS256 and
//! RS256; keys from a JWKS URL served here over HTTPS (a CA made with rcgen):
//! a known `kid` verifies, a rotated key is picked up by a refetch, floods of
//! unknown `kid`s cost at most one fetch per cooldown, and a JWKS URL that
//! cannot be read never lets a token in; `JWT_SKIP_PATHS`; Queen's env names.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use common::TestBroker;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use queen_server::{AuthConfig, JwksSettings, ServerConfig};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PUBLIC_PEM: &str = include_str!("fixtures/jwt-test-rs256-public.pem");
const PRIVATE_PEM: &str = include_str!("fixtures/jwt-test-rs256-private.pem");

fn claims(role: &str) -> Value {
    json!({"sub": "tester", "role": role, "exp": jsonwebtoken::get_current_timestamp() + 600})
}

fn sign(alg: Algorithm, kid: Option<&str>, key: &EncodingKey) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, &claims("read-write"), key).unwrap()
}

/// An Ed25519 key pair: (signing key, public PEM, public JWK x).
struct EdKey {
    signing: EncodingKey,
    public_pem: String,
    x: String,
}

fn ed_key() -> EdKey {
    let pair = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    EdKey {
        signing: EncodingKey::from_ed_pem(pair.serialize_pem().as_bytes()).unwrap(),
        public_pem: pair.public_key_pem(),
        x: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(pair.public_key_raw()),
    }
}

fn ed_jwk(kid: &str, key: &EdKey) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA", "use": "sig", "x": key.x})
}

fn rsa_jwk(kid: &str) -> Value {
    let jwk = Jwk::from_decoding_key(
        &DecodingKey::from_rsa_pem(PUBLIC_PEM.as_bytes()).unwrap(),
        Some(Algorithm::RS256),
    )
    .unwrap();
    let mut v = serde_json::to_value(jwk).unwrap();
    v["kid"] = json!(kid);
    v
}

async fn status_of(b: &TestBroker, token: Option<&str>, path: &str) -> (u16, Value) {
    let mut req = b.http.get(b.url(path));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

async fn with_auth(auth: AuthConfig) -> TestBroker {
    TestBroker::start_with(ServerConfig { auth, ..ServerConfig::default() }).await
}

#[tokio::test]
async fn hs384_hs512_and_eddsa_verify_with_the_right_key_only() {
    let secret = b"a-shared-secret-for-every-hmac-size";
    let ed = ed_key();
    let auth = AuthConfig::default()
        .with_hmac_secret(secret)
        .unwrap()
        .with_ed25519_public_key_pem(ed.public_pem.as_bytes())
        .unwrap()
        .with_rs256_public_key_pem(PUBLIC_PEM.as_bytes())
        .unwrap();
    let b = with_auth(auth).await;
    let right = EncodingKey::from_secret(secret).unwrap();
    let wrong = EncodingKey::from_secret(b"another-secret-of-the-same-size-x").unwrap();
    for alg in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
        let (status, body) = status_of(&b, Some(&sign(alg, None, &right)), "/api/v1/resources/queues").await;
        assert_eq!(status, 200, "{alg:?}: {body}");
        let (status, body) = status_of(&b, Some(&sign(alg, None, &wrong)), "/api/v1/resources/queues").await;
        assert_eq!((status, &body["code"]), (401, &json!("unauthorized")), "{alg:?}: {body}");
    }
    let (status, _) =
        status_of(&b, Some(&sign(Algorithm::EdDSA, None, &ed.signing)), "/api/v1/resources/queues").await;
    assert_eq!(status, 200);
    let other = ed_key();
    let (status, _) =
        status_of(&b, Some(&sign(Algorithm::EdDSA, None, &other.signing)), "/api/v1/resources/queues").await;
    assert_eq!(status, 401, "an Ed25519 token of another key");
    let rsa = EncodingKey::from_rsa_pem(PRIVATE_PEM.as_bytes()).unwrap();
    let (status, _) =
        status_of(&b, Some(&sign(Algorithm::RS256, None, &rsa)), "/api/v1/resources/queues").await;
    assert_eq!(status, 200);

    // An allow-list (Queen's JWT_ALGORITHM) refuses the others even with a key.
    let only = AuthConfig::default().with_hmac_secret(secret).unwrap().with_algorithms(&["HS512"]).unwrap();
    let b = with_auth(only).await;
    assert_eq!(
        status_of(&b, Some(&sign(Algorithm::HS512, None, &right)), "/api/v1/resources/queues").await.0,
        200
    );
    assert_eq!(
        status_of(&b, Some(&sign(Algorithm::HS256, None, &right)), "/api/v1/resources/queues").await.0,
        401
    );
    assert!(AuthConfig::default().with_algorithms(&["none"]).is_err());
    assert!(AuthConfig::default().with_ed25519_public_key_pem(PUBLIC_PEM.as_bytes()).is_err());
    assert!(AuthConfig::default()
        .with_ed25519_public_key_pem(ed_key().public_pem.replace("PUBLIC", "PRIVATE").as_bytes())
        .is_err());
}

/// A CA and a `localhost` certificate it signed: (CA PEM, rustls server config).
fn tls_for_localhost() -> (String, Arc<rustls::ServerConfig>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, "jwks test CA");
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned()]).unwrap().signed_by(&key, &ca).unwrap();
    let der_key = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap();
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], der_key)
            .unwrap();
    (ca.pem(), Arc::new(config))
}

/// A JWKS endpoint over HTTPS that answers whatever `body` holds and counts its requests.
struct JwksServer {
    url: String,
    ca_pem: String,
    body: Arc<Mutex<String>>,
    hits: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl JwksServer {
    async fn start(keys: Value) -> Self {
        let (ca_pem, config) = tls_for_localhost();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url =
            format!("https://localhost:{}/.well-known/jwks.json", listener.local_addr().unwrap().port());
        let body = Arc::new(Mutex::new(json!({"keys": keys}).to_string()));
        let hits = Arc::new(AtomicU64::new(0));
        let (served, counted) = (body.clone(), hits.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let (acceptor, served, counted) = (acceptor.clone(), served.clone(), counted.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                    let mut request = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let body = served.lock().unwrap().clone();
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = tls.write_all(answer.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        JwksServer { url, ca_pem, body, hits, task }
    }

    fn serve(&self, keys: Value) {
        *self.body.lock().unwrap() = json!({"keys": keys}).to_string();
    }

    fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }

    fn settings(&self, cooldown: Duration, refresh: Duration) -> JwksSettings {
        let mut s = JwksSettings::new(self.url.clone());
        s.ca_pem = Some(self.ca_pem.clone().into_bytes());
        s.cooldown = cooldown;
        s.refresh = refresh;
        s.timeout = Duration::from_secs(2);
        s
    }
}

#[tokio::test]
async fn jwks_keys_verify_by_kid_rotate_by_refetch_and_floods_are_rate_limited() {
    let (k1, k2, stranger) = (ed_key(), ed_key(), ed_key());
    let server = JwksServer::start(json!([ed_jwk("k1", &k1), rsa_jwk("r1")])).await;
    let cooldown = Duration::from_millis(1500);
    let auth = AuthConfig::default().with_jwks(server.settings(cooldown, Duration::from_secs(3600))).unwrap();
    let b = with_auth(auth.clone()).await;
    let path = "/api/v1/resources/queues";

    let (status, body) = status_of(&b, Some(&sign(Algorithm::EdDSA, Some("k1"), &k1.signing)), path).await;
    assert_eq!(status, 200, "{body}");
    let rsa = EncodingKey::from_rsa_pem(PRIVATE_PEM.as_bytes()).unwrap();
    assert_eq!(status_of(&b, Some(&sign(Algorithm::RS256, Some("r1"), &rsa)), path).await.0, 200);
    assert_eq!(server.hits(), 1, "the set is fetched once and cached");
    // A known kid with a signature of another key; an HMAC token has no JWKS key.
    assert_eq!(
        status_of(&b, Some(&sign(Algorithm::EdDSA, Some("k1"), &stranger.signing)), path).await.0,
        401
    );
    let hmac = EncodingKey::from_secret(b"guess").unwrap();
    assert_eq!(status_of(&b, Some(&sign(Algorithm::HS256, Some("k1"), &hmac)), path).await.0, 401);
    assert_eq!(server.hits(), 1);

    // A flood of unknown kids: at most one fetch per cooldown.
    tokio::time::sleep(cooldown).await;
    let before = server.hits();
    let started = Instant::now();
    let flood: Vec<_> = (0..40)
        .map(|i| {
            let token = sign(Algorithm::EdDSA, Some(&format!("ghost-{i}")), &stranger.signing);
            let (http, url) = (b.http.clone(), b.url(path));
            tokio::spawn(
                async move { http.get(url).bearer_auth(token).send().await.unwrap().status().as_u16() },
            )
        })
        .collect();
    for request in flood {
        assert_eq!(request.await.unwrap(), 401);
    }
    let allowed = 1 + started.elapsed().as_millis() as u64 / cooldown.as_millis() as u64;
    let fetched = server.hits() - before;
    assert!(fetched >= 1 && fetched <= allowed, "{fetched} fetches for 40 unknown kids (allowed {allowed})");

    // Rotation: the provider now publishes k2 only; the next token naming it
    // (after the cooldown) fetches the new set.
    server.serve(json!([ed_jwk("k2", &k2)]));
    tokio::time::sleep(cooldown).await;
    let (status, body) = status_of(&b, Some(&sign(Algorithm::EdDSA, Some("k2"), &k2.signing)), path).await;
    assert_eq!(status, 200, "the rotated key is picked up: {body}");
    assert_eq!(
        status_of(&b, Some(&sign(Algorithm::EdDSA, Some("k1"), &k1.signing)), path).await.0,
        401,
        "k1 retired"
    );
    assert_eq!(auth.jwks_fetches(), server.hits());

    // The provider goes away: a new kid cannot be fetched and is refused.
    server.task.abort();
    tokio::time::sleep(cooldown).await;
    let k3 = ed_key();
    let (status, _) = status_of(&b, Some(&sign(Algorithm::EdDSA, Some("k3"), &k3.signing)), path).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_jwks_url_that_cannot_be_read_never_lets_a_token_in() {
    let k1 = ed_key();
    let token = sign(Algorithm::EdDSA, Some("k1"), &k1.signing);
    let push = json!({"items": [{"queue": "jwks-q", "payload": {"n": 1}}]});

    // Down from the start: 503 (retry later), nothing written.
    let server = JwksServer::start(json!([ed_jwk("k1", &k1)])).await;
    let settings = server.settings(Duration::ZERO, Duration::from_secs(3600));
    server.task.abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let b = with_auth(AuthConfig::default().with_jwks(settings).unwrap()).await;
    let resp = b.http.post(b.url("/api/v1/push")).bearer_auth(&token).json(&push).send().await.unwrap();
    assert_eq!(resp.status(), 503);
    assert!(resp.headers().get("retry-after").is_some());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["code"], "jwks_unavailable", "{body}");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages").await, 0);

    // A certificate the broker does not trust is a failed fetch too.
    let untrusted = JwksServer::start(json!([ed_jwk("k1", &k1)])).await;
    let mut settings = untrusted.settings(Duration::ZERO, Duration::from_secs(3600));
    settings.ca_pem = None;
    let b = with_auth(AuthConfig::default().with_jwks(settings).unwrap()).await;
    assert_eq!(status_of(&b, Some(&token), "/api/v1/resources/queues").await.0, 503);
    assert_eq!(untrusted.hits(), 0, "no request goes past a failed handshake");

    // A set older than the refresh interval is not used once the URL fails.
    let server = JwksServer::start(json!([ed_jwk("k1", &k1)])).await;
    let settings = server.settings(Duration::ZERO, Duration::from_millis(700));
    let b = with_auth(AuthConfig::default().with_jwks(settings).unwrap()).await;
    assert_eq!(status_of(&b, Some(&token), "/api/v1/resources/queues").await.0, 200);
    server.task.abort();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(status_of(&b, Some(&token), "/api/v1/resources/queues").await.0, 503);
}

#[tokio::test]
async fn skip_paths_are_served_without_a_token_and_the_rest_still_need_one() {
    let auth = AuthConfig::default()
        .with_token("admin-token-0123456789", queen_server::Role::Admin)
        .unwrap()
        .with_skip_paths(&["/api/v1/resources/queues", "/api/v1/status/", "/"])
        .unwrap();
    let b = with_auth(auth).await;
    assert_eq!(status_of(&b, None, "/api/v1/resources/queues").await.0, 200);
    assert_eq!(status_of(&b, None, "/api/v1/resources/queues?namespace=x").await.0, 200);
    assert_eq!(status_of(&b, None, "/api/v1/status/queues").await.0, 200, "a prefix entry ends with /");
    assert_eq!(status_of(&b, None, "/api/v1/status").await.0, 401, "the prefix itself without its /");
    assert_eq!(status_of(&b, None, "/api/v1/resources/queues/x").await.0, 401, "an exact entry is no prefix");
    assert_eq!(status_of(&b, None, "/api/v1/resources/overview").await.0, 401, "/ is the root only");
    let (status, _) = status_of(&b, Some("admin-token-0123456789"), "/api/v1/resources/overview").await;
    assert_eq!(status, 200);
    assert!(AuthConfig::default().with_skip_paths(&["health"]).is_err());
}

#[tokio::test]
async fn queen_env_names_configure_serve_when_jwt_enabled_is_true() {
    let db = common::fresh_database().await;
    let secret = "queen-env-secret-0123456789";
    let spec = common::ServeSpec::for_db(&db)
        .env("JWT_ENABLED", "true")
        .env("JWT_SECRET", secret)
        .env("JWT_ALGORITHM", "HS512");
    let broker = common::BrokerProcess::spawn_with(&spec).await;
    let http = reqwest::Client::new();
    let get = |path: &str, token: Option<String>| {
        let mut req = http.get(broker.api.url(path));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move { req.send().await.unwrap().status().as_u16() }
    };
    let key = EncodingKey::from_secret(secret.as_bytes()).unwrap();
    // Queen's default skip paths open the metrics; the API needs a token.
    assert_eq!(get("/metrics", None).await, 200);
    assert_eq!(get("/api/v1/resources/queues", None).await, 401);
    assert_eq!(get("/api/v1/resources/queues", Some(sign(Algorithm::HS512, None, &key))).await, 200);
    assert_eq!(
        get("/api/v1/resources/queues", Some(sign(Algorithm::HS256, None, &key))).await,
        401,
        "JWT_ALGORITHM"
    );

    // JWT_ENABLED=true without any key does not start.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_queen"))
        .arg("serve")
        .env("QUEEN_DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .env("JWT_ENABLED", "true")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("JWT_ENABLED=true needs"));
}
