//! Optional authentication: static bearer tokens and JWTs (HS256, HS384,
//! HS512, RS256, EdDSA, and whatever a JWKS URL publishes).
//!
//! Off by default, because the broker is usually reached on a private
//! network and the official clients send no credentials unless they are
//! given a `bearerToken`. Once any token or key is configured, every request
//! but `GET /health` (which load balancers probe without credentials) must
//! carry `Authorization: Bearer <token>`. `JWT_SKIP_PATHS` (Queen's) names
//! more paths that need none: an exact path, or a prefix written with a
//! trailing `/` (`/public/` opens `/public/x`; `/` alone is only the root),
//! compared with the request's path as sent.
//!
//! **Roles** are Queen's: `read-only` < `read-write` < `admin`. A static
//! token has the role it was configured with. A JWT has the highest role
//! named by its `role` claim (a string) or its `roles` claim (an array of
//! strings); a verified JWT that names none of them is answered 403 (it
//! proves who the caller is but grants nothing). Our earlier names stay
//! accepted: `read` is `read-only`, `write` is `admin` (it always meant
//! "everything").
//! - `read-only` may observe: `GET` and `HEAD`, except the pop routes, which
//!   are `GET` but take leases (and, with `autoAck`, consume); plus the reads
//!   by offset (`POST /api/v1/fetch`, `POST /api/v1/partitions/changed`,
//!   `POST /streams/v1/state/get`) and the KV browser's page
//!   (`POST /api/v1/resources/kv/list`), which are `POST` only because their
//!   entries do not fit a URL (or, for keys, must stay out of access logs).
//! - `read-write` may also push, pop, ack, configure, and every other `POST`,
//!   `PUT` and `DELETE`, including a `POST /api/v1/kv` batch that holds only
//!   gets: the route is decided before the body is read, and a
//!   body-dependent rule would have to parse untrusted input before
//!   authorisation.
//! - `admin` may also use the system routes (`/api/v1/system/*`: the
//!   maintenance switches) and delete queues and consumer groups
//!   (`DELETE /api/v1/resources/queues/*`, `DELETE /api/v1/consumer-groups/*`).
//!
//! **Identity.** With JWTs on, the token's `sub` is the caller's identity:
//! the push routes stamp it on every message as `producerSub` (any
//! `producerSub` in the body is ignored), so a consumer can trust it.
//!
//! **The dashboard** (`/` and `/dashboard/*`) is passed through here: a
//! browser sends no `Authorization` header, so its pages and actions check
//! the session cookie and CSRF token themselves (`dashboard::session`),
//! with the same tokens and roles (`AuthConfig::caller_for`).
//!
//! **Answers.** No token, a token we do not know, a bad signature, an
//! expired JWT: 401 with `WWW-Authenticate: Bearer` and the broker's JSON
//! error body (`code: "unauthorized"`). A read token on a write route: 403
//! (`code: "forbidden"`). The reason never contains the token, and tokens are
//! never logged.
//!
//! **Static tokens** are kept only as SHA-256 digests and compared in
//! constant time, digest against digest, so neither the bytes nor the length
//! of a configured token can be learnt from response timing.
//!
//! **JWTs.** The header's `alg` picks the key: `HS256`, `HS384` and `HS512`
//! are verified with the configured secret only, `RS256` with the configured
//! RSA public key, `EdDSA` with the configured Ed25519 public key, and the
//! asymmetric algorithms also with the JWKS URL's key of the token's `kid`
//! (`jwks`); anything else (`none` included) is refused, and so is an
//! algorithm left out of a configured allow-list (Queen's `JWT_ALGORITHM`).
//! An HS256 token "signed" with an RSA public key therefore meets the HMAC
//! secret (or no key at all) and fails. A JWKS URL that cannot be read is a
//! 503 (`jwks_unavailable`, with `Retry-After`), never an acceptance. `exp` is required, `nbf` is honoured, both with a 30 s leeway for
//! clock skew; `iss` and `aud` are required and must match when an issuer or
//! audience is configured (and `aud` is not checked when none is).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use axum::extract::{MatchedPath, Request};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::json_response;
use crate::jwks::{Jwks, JwksSettings, NoKey};

/// Seconds of clock skew tolerated on `exp` and `nbf`.
const LEEWAY_SECS: u64 = 30;

/// What a credential may do; each role may do what the ones below it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Observe only: `GET`/`HEAD` routes other than pop, and reads by offset.
    ReadOnly,
    /// Produce and consume: everything but the admin routes.
    ReadWrite,
    /// Everything, the maintenance switches and deletions of queues and groups included.
    Admin,
}

impl FromStr for Role {
    type Err = AuthConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read-only" | "read" => Ok(Role::ReadOnly),
            "read-write" => Ok(Role::ReadWrite),
            "admin" | "write" => Ok(Role::Admin),
            other => Err(AuthConfigError::UnknownRole(other.to_owned())),
        }
    }
}

impl Role {
    /// Queen's name of the role.
    pub fn name(self) -> &'static str {
        match self {
            Role::ReadOnly => "read-only",
            Role::ReadWrite => "read-write",
            Role::Admin => "admin",
        }
    }
}

/// Who made a request, as authentication established it; in the request's
/// extensions for the handlers (absent when authentication is off).
#[derive(Debug, Clone)]
pub struct Caller {
    /// The credential's role.
    pub role: Role,
    /// A JWT's `sub`; `None` for static tokens.
    pub sub: Option<String>,
}

/// A setting that cannot make a working authentication.
#[derive(Debug, thiserror::Error)]
pub enum AuthConfigError {
    /// An empty static token would match an empty `Authorization: Bearer `.
    #[error("a bearer token must not be empty")]
    EmptyToken,
    /// A role other than Queen's three (or our `read`/`write`).
    #[error("unknown role {0:?}: use read-only, read-write or admin")]
    UnknownRole(String),
    /// An empty HMAC secret signs nothing.
    #[error("the JWT HMAC secret must not be empty")]
    EmptySecret,
    /// The RS256 or EdDSA key is not a public key of its kind in PEM.
    #[error("the JWT public key is not usable: {0}")]
    BadPublicKey(String),
    /// The JWKS URL or its CA cannot be used.
    #[error("the JWT JWKS setting is not usable: {0}")]
    BadJwks(String),
    /// An algorithm we do not verify (or `none`).
    #[error("unknown JWT algorithm {0:?}: use HS256, HS384, HS512, RS256, EdDSA (or auto)")]
    UnknownAlgorithm(String),
    /// A skip path that is not a path.
    #[error("a skip path must start with '/': {0:?}")]
    BadSkipPath(String),
}

/// Who may call the API. `AuthConfig::default()` is off: every request is
/// served without credentials.
///
/// Built with the `with_*` methods, which check each setting once at start,
/// so a bad key fails the start and never a request.
#[derive(Clone, Default)]
pub struct AuthConfig {
    /// SHA-256 of each static token with its role; the tokens themselves are
    /// not kept.
    tokens: Vec<([u8; 32], Role)>,
    /// The shared secret of HS256, HS384 and HS512.
    hmac: Option<DecodingKey>,
    rs256: Option<DecodingKey>,
    ed25519: Option<DecodingKey>,
    jwks: Option<Arc<Jwks>>,
    /// The only algorithms accepted; empty: every one a key is configured for.
    algorithms: Vec<Algorithm>,
    issuer: Option<String>,
    audience: Option<String>,
    skip_paths: Vec<String>,
}

/// Lists what is configured, never a secret.
impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthConfig")
            .field("static_tokens", &self.tokens.len())
            .field("hmac", &self.hmac.is_some())
            .field("rs256", &self.rs256.is_some())
            .field("ed25519", &self.ed25519.is_some())
            .field("jwks", &self.jwks)
            .field("algorithms", &self.algorithms)
            .field("skip_paths", &self.skip_paths)
            .field("issuer", &self.issuer)
            .field("audience", &self.audience)
            .finish()
    }
}

impl AuthConfig {
    /// True when any credential is configured, i.e. requests are checked.
    pub fn is_enabled(&self) -> bool {
        !self.tokens.is_empty() || self.accepts_jwt()
    }

    /// True when a JWT key is configured (an issuer or audience means
    /// nothing without one).
    pub fn accepts_jwt(&self) -> bool {
        self.hmac.is_some() || self.rs256.is_some() || self.ed25519.is_some() || self.jwks.is_some()
    }

    /// Accepts `token` as a static bearer token with `role`.
    pub fn with_token(mut self, token: &str, role: Role) -> Result<Self, AuthConfigError> {
        if token.is_empty() {
            return Err(AuthConfigError::EmptyToken);
        }
        self.tokens.push((digest(token), role));
        Ok(self)
    }

    /// Accepts a static token written `token:ROLE` (`read-only`,
    /// `read-write`, `admin`, or `read` / `write`), or a plain `token`
    /// (admin). Only a final role name is a role, so a token may itself
    /// contain colons.
    pub fn with_token_spec(self, spec: &str) -> Result<Self, AuthConfigError> {
        match spec.rsplit_once(':') {
            Some((token, role @ ("read" | "write" | "read-only" | "read-write" | "admin"))) => {
                let role = role.parse()?;
                self.with_token(token, role)
            }
            _ => self.with_token(spec, Role::Admin),
        }
    }

    /// Accepts JWTs signed with HS256, HS384 or HS512 and this shared secret.
    pub fn with_hmac_secret(mut self, secret: &[u8]) -> Result<Self, AuthConfigError> {
        if secret.is_empty() {
            return Err(AuthConfigError::EmptySecret);
        }
        self.hmac = Some(DecodingKey::from_secret(secret).map_err(|_| AuthConfigError::EmptySecret)?);
        Ok(self)
    }

    /// The earlier name of [`AuthConfig::with_hmac_secret`] (HS384 and HS512
    /// are accepted too).
    pub fn with_hs256_secret(self, secret: &[u8]) -> Result<Self, AuthConfigError> {
        self.with_hmac_secret(secret)
    }

    /// Accepts JWTs signed with EdDSA, verified with this Ed25519 public key
    /// (PEM, `BEGIN PUBLIC KEY`).
    pub fn with_ed25519_public_key_pem(mut self, pem: &[u8]) -> Result<Self, AuthConfigError> {
        if pem.windows(b"PRIVATE KEY".len()).any(|w| w == b"PRIVATE KEY") {
            return Err(AuthConfigError::BadPublicKey(
                "this is a private key; give the broker the public key only".into(),
            ));
        }
        let key = DecodingKey::from_ed_pem(pem).map_err(|e| AuthConfigError::BadPublicKey(e.to_string()))?;
        // An Ed25519 public key is 32 bytes; anything else verifies nothing.
        if key.try_get_as_bytes().map(<[u8]>::len).ok() != Some(32) {
            return Err(AuthConfigError::BadPublicKey("not an Ed25519 public key".into()));
        }
        self.ed25519 = Some(key);
        Ok(self)
    }

    /// Accepts JWTs signed with the asymmetric keys of a JWKS URL (the
    /// token's `kid` picks the key; see `jwks`).
    pub fn with_jwks(mut self, settings: JwksSettings) -> Result<Self, AuthConfigError> {
        self.jwks = Some(Arc::new(Jwks::new(settings)?));
        Ok(self)
    }

    /// Accepts only these algorithms (`HS256`, `HS384`, `HS512`, `RS256`,
    /// `EdDSA`, or `auto` for any with a key, Queen's `JWT_ALGORITHM`).
    pub fn with_algorithms<S: AsRef<str>>(mut self, names: &[S]) -> Result<Self, AuthConfigError> {
        let mut algorithms = Vec::new();
        for name in names.iter().map(|n| n.as_ref().trim()).filter(|n| !n.is_empty()) {
            if name.eq_ignore_ascii_case("auto") {
                return Ok(Self { algorithms: Vec::new(), ..self });
            }
            match Algorithm::from_str(name) {
                Ok(
                    a @ (Algorithm::HS256
                    | Algorithm::HS384
                    | Algorithm::HS512
                    | Algorithm::RS256
                    | Algorithm::EdDSA),
                ) => algorithms.push(a),
                _ => return Err(AuthConfigError::UnknownAlgorithm(name.to_owned())),
            }
        }
        self.algorithms = algorithms;
        Ok(self)
    }

    /// Paths served without credentials (Queen's `JWT_SKIP_PATHS`): an exact
    /// path, or a prefix when it ends with `/` (but `/` alone is the root only).
    pub fn with_skip_paths<S: AsRef<str>>(mut self, paths: &[S]) -> Result<Self, AuthConfigError> {
        for path in paths.iter().map(|p| p.as_ref().trim()).filter(|p| !p.is_empty()) {
            if !path.starts_with('/') {
                return Err(AuthConfigError::BadSkipPath(path.to_owned()));
            }
            self.skip_paths.push(path.to_owned());
        }
        Ok(self)
    }

    /// How many times the JWKS URL was fetched (0 without one); for tests.
    pub fn jwks_fetches(&self) -> u64 {
        self.jwks.as_ref().map_or(0, |j| j.fetches())
    }

    /// Whether `path` is one of the skip paths (Queen's `should_skip_path`).
    fn skips(&self, path: &str) -> bool {
        self.skip_paths.iter().any(|skip| {
            path == skip || (skip.len() > 1 && skip.ends_with('/') && path.starts_with(skip.as_str()))
        })
    }

    /// Accepts JWTs signed with RS256, verified with this RSA public key
    /// (PEM: `BEGIN PUBLIC KEY` or `BEGIN RSA PUBLIC KEY`).
    pub fn with_rs256_public_key_pem(mut self, pem: &[u8]) -> Result<Self, AuthConfigError> {
        // A private key would parse (jsonwebtoken takes either) and then fail
        // every verification; say so now, and keep private keys off brokers.
        if pem.windows(b"PRIVATE KEY".len()).any(|w| w == b"PRIVATE KEY") {
            return Err(AuthConfigError::BadPublicKey(
                "this is a private key; give the broker the public key only".into(),
            ));
        }
        let key = DecodingKey::from_rsa_pem(pem).map_err(|e| AuthConfigError::BadPublicKey(e.to_string()))?;
        // Parsing the PEM does not parse the RSA key inside; extracting its
        // modulus and exponent does, so a damaged key fails here.
        jsonwebtoken::jwk::Jwk::from_decoding_key(&key, Some(Algorithm::RS256))
            .map_err(|e| AuthConfigError::BadPublicKey(e.to_string()))?;
        self.rs256 = Some(key);
        Ok(self)
    }

    /// A public key in PEM, RSA (for RS256) or Ed25519 (for EdDSA), whichever
    /// it is (Queen's `JWT_PUBLIC_KEY`).
    pub fn with_public_key_pem(self, pem: &[u8]) -> Result<Self, AuthConfigError> {
        let ed = self.clone().with_ed25519_public_key_pem(pem);
        match self.with_rs256_public_key_pem(pem) {
            Ok(auth) => Ok(auth),
            Err(rsa_error) => ed.map_err(|_| rsa_error),
        }
    }

    /// Requires JWTs to carry `iss` equal to `issuer`.
    pub fn with_issuer(mut self, issuer: impl Into<String>) -> Self {
        self.issuer = Some(issuer.into());
        self
    }

    /// Requires JWTs to carry `aud` equal to (or containing) `audience`.
    pub fn with_audience(mut self, audience: impl Into<String>) -> Self {
        self.audience = Some(audience.into());
        self
    }

    /// Who `token` authenticates as (the dashboard's session cookie holds a
    /// token and is checked by the same rules as a bearer token).
    pub(crate) async fn caller_for(&self, token: &str) -> Option<Caller> {
        self.authenticate(token).await.ok()
    }

    /// Who presented `token`, or why it is refused.
    async fn authenticate(&self, token: &str) -> Result<Caller, Denied> {
        if let Some(role) = self.static_role(token) {
            return Ok(Caller { role, sub: None });
        }
        if self.accepts_jwt() && token.bytes().filter(|&b| b == b'.').count() == 2 {
            return self.jwt_role(token).await;
        }
        Err(Denied::Unauthorized("invalid token"))
    }

    /// The key that verifies a token of this header: the secret for HMAC,
    /// for the asymmetric algorithms the JWKS key of its `kid` (a token
    /// with a `kid`, or no static key of its kind), else the static key.
    async fn key_for(&self, header: &jsonwebtoken::Header) -> Result<DecodingKey, Denied> {
        let refused = Denied::Unauthorized("token algorithm not accepted");
        if !self.algorithms.is_empty() && !self.algorithms.contains(&header.alg) {
            return Err(refused);
        }
        let fixed = match header.alg {
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => {
                return self.hmac.clone().ok_or(refused)
            }
            Algorithm::RS256 => self.rs256.as_ref(),
            Algorithm::EdDSA => self.ed25519.as_ref(),
            // Other asymmetric algorithms only from a JWKS that publishes them.
            _ => None,
        };
        match (&self.jwks, fixed) {
            (Some(jwks), fixed) if header.kid.is_some() || fixed.is_none() => {
                jwks.key_for(header.kid.as_deref(), header.alg).await.map_err(|no| match no {
                    NoKey::Unknown => Denied::Unauthorized("token signed with a key the JWKS does not hold"),
                    NoKey::Unavailable => Denied::Unavailable("the JWKS URL cannot be read; retry later"),
                })
            }
            (_, Some(key)) => Ok(key.clone()),
            (_, None) => Err(refused),
        }
    }

    /// Compares against every configured token, without stopping at a match.
    fn static_role(&self, token: &str) -> Option<Role> {
        let presented = digest(token);
        let mut found = None;
        for (known, role) in &self.tokens {
            if bool::from(known.ct_eq(&presented)) {
                found = Some(*role);
            }
        }
        found
    }

    async fn jwt_role(&self, token: &str) -> Result<Caller, Denied> {
        // `alg: none` and unknown algorithms do not parse into `Algorithm`.
        let header = jsonwebtoken::decode_header(token).map_err(|_| Denied::Unauthorized("invalid token"))?;
        let key = self.key_for(&header).await?;
        let mut validation = Validation::new(header.alg);
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        let mut required = vec!["exp"];
        if let Some(iss) = &self.issuer {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        match &self.audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        let data = jsonwebtoken::decode::<Claims>(token, &key, &validation).map_err(|e| {
            Denied::Unauthorized(match e.kind() {
                ErrorKind::ExpiredSignature => "token expired",
                ErrorKind::ImmatureSignature => "token not valid yet",
                ErrorKind::MissingRequiredClaim(_) => "token lacks a required claim (exp, iss or aud)",
                ErrorKind::InvalidIssuer | ErrorKind::InvalidAudience => {
                    "token issued by or for someone else"
                }
                _ => "invalid token",
            })
        })?;
        let claims = data.claims;
        let named =
            claims.role.iter().chain(claims.roles.as_ref().and_then(|r| r.as_array()).into_iter().flatten());
        let role = named.filter_map(|r| r.as_str()).filter_map(|r| r.parse::<Role>().ok()).max();
        let role = role.ok_or(Denied::Forbidden(
            "the token names no role: a role or roles claim with read-only, read-write or admin",
        ))?;
        let sub = claims.sub.and_then(|s| s.as_str().map(str::to_owned));
        Ok(Caller { role, sub })
    }
}

/// The claims we read ourselves; `exp`, `nbf`, `iss` and `aud` are checked
/// by `jsonwebtoken`. JSON values, so that a claim of another type is a 403
/// like any other unknown role (or no identity), not a decoding failure.
#[derive(serde::Deserialize)]
struct Claims {
    role: Option<serde_json::Value>,
    roles: Option<serde_json::Value>,
    sub: Option<serde_json::Value>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Why a request is refused; the text is safe to send and to log.
#[derive(Debug)]
enum Denied {
    Unauthorized(&'static str),
    Forbidden(&'static str),
    /// The keys cannot be had (a JWKS URL down): not the caller's fault, and
    /// never an acceptance.
    Unavailable(&'static str),
}

/// `GET /health` stays open so that probes need no credentials.
fn is_open(method: &Method, route: Option<&str>) -> bool {
    (method == Method::GET || method == Method::HEAD) && matches!(route, Some("/health" | "/ready"))
}

/// The dashboard's pages and actions check their own session cookie (and
/// CSRF token) instead of a bearer token: a browser cannot send one.
fn is_dashboard(route: Option<&str>) -> bool {
    route.is_some_and(|r| r == "/" || r == "/dashboard" || r.starts_with("/dashboard/"))
}

/// The least role a route needs (see the module documentation).
fn required_role(method: &Method, route: Option<&str>) -> Role {
    let admin = route.is_some_and(|r| r.starts_with("/api/v1/system/"))
        || (method == Method::DELETE
            && route.is_some_and(|r| {
                r == "/api/v1/dlq"
                    || r.starts_with("/api/v1/resources/queues/")
                    || r.starts_with("/api/v1/consumer-groups/")
            }));
    if admin {
        Role::Admin
    } else if needs_write(method, route) {
        Role::ReadWrite
    } else {
        Role::ReadOnly
    }
}

/// Whether the route changes state (see the module documentation).
fn needs_write(method: &Method, route: Option<&str>) -> bool {
    // Reads by offset are POSTs (their entries do not fit a URL) that take
    // no lease and move no cursor: a read token may use them.
    // So are a stream's state read and a page of the KV browser.
    let reads_by_post = method == Method::POST
        && matches!(
            route,
            Some(
                "/api/v1/fetch"
                    | "/api/v1/partitions/changed"
                    | "/streams/v1/state/get"
                    | "/api/v1/resources/kv/list"
            )
        );
    let observes = method == Method::GET || method == Method::HEAD || reads_by_post;
    // A pop moves cursors and takes leases, ephemeral ones too.
    !observes
        || route.is_some_and(|r| {
            r == "/api/v1/pop" || r.starts_with("/api/v1/pop/") || r == "/api/v1/ephemeral/pop"
        })
}

/// The token of `Authorization: Bearer <token>`; the scheme name is
/// case-insensitive (RFC 7235).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn refusal(denied: &Denied) -> Response {
    if let Denied::Unavailable(reason) = denied {
        let body = serde_json::json!({
            "error": format!("jwks_unavailable: {reason}"), "code": "jwks_unavailable", "detail": reason,
        });
        let mut resp = json_response(StatusCode::SERVICE_UNAVAILABLE, body.to_string());
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        close_after(&mut resp);
        return resp;
    }
    let (status, code, reason, challenge) = match denied {
        Denied::Unauthorized(reason) => (
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            *reason,
            "Bearer realm=\"queen\", error=\"invalid_token\"",
        ),
        Denied::Forbidden(reason) => (
            StatusCode::FORBIDDEN,
            "forbidden",
            *reason,
            "Bearer realm=\"queen\", error=\"insufficient_scope\"",
        ),
        Denied::Unavailable(_) => return json_response(StatusCode::SERVICE_UNAVAILABLE, String::new()),
    };
    let body = serde_json::json!({"error": format!("{code}: {reason}"), "code": code, "detail": reason});
    let mut resp = json_response(status, body.to_string());
    resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    close_after(&mut resp);
    resp
}

use crate::error::close_after;

/// Checks credentials before anything else of the request is looked at
/// (inside the request id and the metrics, see `edge`, so refusals are
/// counted and carry an `x-request-id`); answers the refusal, if any. The
/// caller goes into the request's extensions.
pub(crate) async fn check(auth: &AuthConfig, req: &mut Request) -> Option<Response> {
    if !auth.is_enabled() {
        return None;
    }
    let matched = req.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map(MatchedPath::as_str);
    let method = req.method().clone();
    let method = &method;
    if is_open(method, route) || is_dashboard(route) || auth.skips(req.uri().path()) {
        return None;
    }
    let verdict = match bearer(req.headers()) {
        None => {
            // No credentials at all: the bare challenge (RFC 6750 §3.1).
            let body = serde_json::json!({
                "error": "unauthorized: missing bearer token", "code": "unauthorized",
                "detail": "send Authorization: Bearer <token>",
            });
            let mut resp = json_response(StatusCode::UNAUTHORIZED, body.to_string());
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"queen\""));
            close_after(&mut resp);
            return Some(resp);
        }
        Some(token) => auth.authenticate(token).await.and_then(|caller| match required_role(method, route) {
            needed if caller.role >= needed => Ok(caller),
            Role::Admin => Err(Denied::Forbidden("this route needs the admin role")),
            _ => Err(Denied::Forbidden("this route needs the read-write role")),
        }),
    };
    match verdict {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            None
        }
        Err(denied) => {
            tracing::debug!(
                ?denied,
                route = route.unwrap_or("unmatched"),
                "request refused by authentication"
            );
            Some(refusal(&denied))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn token_specs() {
        let auth = AuthConfig::default()
            .with_token_spec("r:read")
            .and_then(|a| a.with_token_spec("w:write"))
            .and_then(|a| a.with_token_spec("plain"))
            .and_then(|a| a.with_token_spec("has:colons:read"))
            .and_then(|a| a.with_token_spec("has:colon"))
            .unwrap();
        assert_eq!(auth.static_role("r"), Some(Role::ReadOnly));
        assert_eq!(auth.static_role("w"), Some(Role::Admin));
        assert_eq!(auth.static_role("plain"), Some(Role::Admin));
        assert_eq!(auth.static_role("has:colons"), Some(Role::ReadOnly));
        assert_eq!(auth.static_role("has:colon"), Some(Role::Admin));
        let queen = AuthConfig::default()
            .with_token_spec("a:read-only")
            .and_then(|a| a.with_token_spec("b:read-write"))
            .and_then(|a| a.with_token_spec("c:admin"))
            .unwrap();
        assert_eq!(queen.static_role("a"), Some(Role::ReadOnly));
        assert_eq!(queen.static_role("b"), Some(Role::ReadWrite));
        assert_eq!(queen.static_role("c"), Some(Role::Admin));
        assert_eq!(auth.static_role("r:read"), None);
        assert_eq!(auth.static_role(""), None);
        assert!(AuthConfig::default().with_token_spec(":read").is_err());
        assert!(!AuthConfig::default().is_enabled());
        assert!(auth.is_enabled());
    }

    #[test]
    fn debug_shows_no_secret() {
        let auth = AuthConfig::default().with_token("s3cret-token", Role::Admin).unwrap();
        let auth = auth.with_hs256_secret(b"hmac-s3cret").unwrap();
        let shown = format!("{auth:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn which_routes_need_write() {
        assert!(!needs_write(&Method::GET, Some("/api/v1/resources/queues")));
        assert!(!needs_write(&Method::HEAD, Some("/api/v1/kv/{ns}/{*key}")));
        assert!(needs_write(&Method::GET, Some("/api/v1/pop/queue/{queue}")));
        assert!(needs_write(&Method::GET, Some("/api/v1/pop/queue/{queue}/partition/{partition}")));
        assert!(needs_write(&Method::POST, Some("/api/v1/kv")));
        assert!(!needs_write(&Method::POST, Some("/api/v1/fetch")));
        assert!(!needs_write(&Method::POST, Some("/api/v1/partitions/changed")));
        assert!(!needs_write(&Method::POST, Some("/api/v1/resources/kv/list")));
        assert!(!needs_write(&Method::GET, Some("/api/v1/resources/kv/namespaces")));
        assert!(needs_write(&Method::POST, Some("/api/v1/locks")));
        assert!(needs_write(&Method::PUT, None));
        assert!(needs_write(&Method::DELETE, Some("/api/v1/resources/queues/{queue}")));
        assert_eq!(required_role(&Method::GET, Some("/api/v1/resources/queues")), Role::ReadOnly);
        assert_eq!(required_role(&Method::POST, Some("/api/v1/push")), Role::ReadWrite);
        assert_eq!(required_role(&Method::POST, Some("/api/v1/configure")), Role::ReadWrite);
        assert_eq!(required_role(&Method::POST, Some("/api/v1/system/maintenance")), Role::Admin);
        assert_eq!(required_role(&Method::GET, Some("/api/v1/system/maintenance")), Role::Admin);
        assert_eq!(required_role(&Method::DELETE, Some("/api/v1/resources/queues/{queue}")), Role::Admin);
        assert_eq!(required_role(&Method::DELETE, Some("/api/v1/consumer-groups/{group}")), Role::Admin);
        assert_eq!(required_role(&Method::DELETE, Some("/api/v1/consumer-groups/lagging")), Role::Admin);
        assert_eq!(
            required_role(&Method::DELETE, Some("/api/v1/consumer-groups/{group}/queues/{queue}")),
            Role::Admin
        );
        assert_eq!(required_role(&Method::DELETE, Some("/api/v1/kv/{ns}/{*key}")), Role::ReadWrite);
        // Both seeks move cursors: read-write, as Queen's.
        for seek in [
            "/api/v1/consumer-groups/{group}/queues/{queue}/seek",
            "/api/v1/consumer-groups/{group}/queues/{queue}/partitions/{partition}/seek",
        ] {
            assert_eq!(required_role(&Method::POST, Some(seek)), Role::ReadWrite, "{seek}");
        }
        assert_eq!(required_role(&Method::GET, Some("/api/v1/pop/queue/{queue}")), Role::ReadWrite);
        assert!(is_open(&Method::GET, Some("/health")));
        assert!(!is_open(&Method::POST, Some("/health")));
        assert!(!is_open(&Method::GET, None));
        assert!(is_dashboard(Some("/")));
        assert!(is_dashboard(Some("/dashboard/queues/{queue}")));
        assert!(!is_dashboard(Some("/api/v1/resources/queues")));
        assert!(!is_dashboard(Some("/dashboardx")));
        assert!(!is_dashboard(None));
    }

    #[test]
    fn bearer_header() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer abc"));
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer abc"));
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&h), None);
    }
}
