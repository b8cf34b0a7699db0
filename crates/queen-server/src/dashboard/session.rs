//! The dashboard's session cookie and CSRF tokens.
//!
//! **Auth on.** The login form takes an API token (static or JWT); the
//! cookie `queen_session` then holds that token (base64url), `HttpOnly`
//! (no script reads it), `SameSite=Strict` (no other site's page sends it),
//! `Path=/`, and `Secure` when the broker serves HTTPS. Every page and action
//! checks it again with [`AuthConfig::caller_for`], the bearer-token rules:
//! no session table, any broker behind a load balancer accepts it, a JWT's
//! expiry ends the session, and a token removed from the configuration is
//! refused at once. (An HMAC-signed session id would need a secret shared by
//! every broker and a revocation list; the token is already the secret.)
//!
//! **Auth off.** Anyone may do anything, as with the API, but actions still
//! need a CSRF token, so the first page view sets a random `queen_session`.
//!
//! **CSRF.** An action (a `POST`) must carry `csrf`, a form field (or the
//! `X-CSRF-Token` header), equal to HMAC-SHA256(key = the cookie's value,
//! "queen-dashboard csrf v1") in hex, compared in constant time. Another
//! site can neither read the cookie nor the pages that carry the token, so
//! it cannot forge an action even where `SameSite` is not honoured.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::auth::Role;
use crate::AppState;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "queen_session";
const ANON_PREFIX: &str = "anon-";
const CSRF_CONTEXT: &[u8] = b"queen-dashboard csrf v1";

/// Who is looking at the dashboard.
pub(crate) struct Session {
    /// The token's role; `None` when authentication is off (anyone may act).
    pub role: Option<Role>,
    /// The CSRF token that this session's forms carry.
    pub csrf: String,
    /// A `Set-Cookie` value for a new anonymous session.
    pub set_cookie: Option<HeaderValue>,
    /// Whether the broker has authentication on (a logout button).
    pub auth_on: bool,
}

impl Session {
    /// Whether the session may retry and delete (read-write and above).
    pub fn can_act(&self) -> bool {
        self.role.is_none_or(|r| r >= Role::ReadWrite)
    }

    /// Whether the session may flip the maintenance switches (admin).
    pub fn is_admin(&self) -> bool {
        self.role.is_none_or(|r| r >= Role::Admin)
    }

    /// The role's name as shown in the header.
    pub fn role_name(&self) -> &'static str {
        self.role.map_or("open (auth off)", Role::name)
    }
}

/// The value of cookie `name` among the request's `Cookie` headers.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// HMAC-SHA256(key = the cookie value, the CSRF context) in hex.
fn csrf_for(cookie_value: &str) -> String {
    let Ok(mut mac) = <Hmac<Sha256> as KeyInit>::new_from_slice(cookie_value.as_bytes()) else {
        return String::new();
    };
    mac.update(CSRF_CONTEXT);
    mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// `Set-Cookie` for `value` (or, with `None`, one that removes the cookie).
pub(crate) fn set_cookie(app: &AppState, value: Option<&str>) -> Option<HeaderValue> {
    let secure = if app.config.tls.is_some() { "; Secure" } else { "" };
    let text = match value {
        Some(v) => format!("{COOKIE}={v}; HttpOnly; SameSite=Strict; Path=/{secure}"),
        None => format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{secure}"),
    };
    HeaderValue::from_str(&text).ok()
}

/// The cookie value that carries an API token.
pub(crate) fn encode_token(token: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.as_bytes())
}

fn decode_token(value: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(value).ok()?;
    String::from_utf8(bytes).ok()
}

fn random_anonymous() -> String {
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    format!("{ANON_PREFIX}{}{}", a.simple(), b.simple())
}

/// Why there is no usable session.
pub(crate) enum NoSession {
    /// Auth is on and the cookie is missing, unknown or expired.
    LoginNeeded,
}

/// The session of a page request.
pub(crate) async fn session(app: &AppState, headers: &HeaderMap) -> Result<Session, NoSession> {
    let raw = cookie(headers, COOKIE).filter(|v| !v.is_empty());
    let auth = &app.config.auth;
    if !auth.is_enabled() {
        return Ok(match raw.filter(|v| v.starts_with(ANON_PREFIX)) {
            Some(v) => Session { role: None, csrf: csrf_for(v), set_cookie: None, auth_on: false },
            None => {
                let v = random_anonymous();
                Session {
                    role: None,
                    csrf: csrf_for(&v),
                    set_cookie: set_cookie(app, Some(&v)),
                    auth_on: false,
                }
            }
        });
    }
    let raw = raw.ok_or(NoSession::LoginNeeded)?;
    let token = decode_token(raw).ok_or(NoSession::LoginNeeded)?;
    let caller = auth.caller_for(&token).await.ok_or(NoSession::LoginNeeded)?;
    Ok(Session { role: Some(caller.role), csrf: csrf_for(raw), set_cookie: None, auth_on: true })
}

/// Whether a `POST` comes from our own pages: an `Origin` header, when the
/// browser sends one, must name the host the request was sent to (a second
/// line behind the CSRF token, and the only one for the login form).
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host =
        origin.to_str().ok().and_then(|o| o.split_once("://")).map(|(_, h)| h.trim_end_matches('/'));
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

/// Checks an action: a session, a role of at least `needed`, and the CSRF
/// token (form field `csrf` or header `X-CSRF-Token`). A refusal's reason
/// is answered 403 by [`forbidden`].
pub(crate) async fn authorize(
    app: &AppState,
    headers: &HeaderMap,
    csrf: Option<&str>,
    needed: Role,
) -> Result<Session, &'static str> {
    if !same_origin(headers) {
        return Err("cross-origin request refused");
    }
    let session = session(app, headers).await.map_err(|_| "no dashboard session: log in first")?;
    if session.set_cookie.is_some() {
        // A session made just now: no form of it was ever served.
        return Err("missing or wrong CSRF token");
    }
    if session.role.is_some_and(|r| r < needed) {
        return Err(match needed {
            Role::Admin => "this action needs the admin role",
            _ => "this action needs the read-write role",
        });
    }
    let given =
        csrf.or_else(|| headers.get("x-csrf-token").and_then(|v| v.to_str().ok())).unwrap_or_default();
    let matches = !session.csrf.is_empty() && bool::from(session.csrf.as_bytes().ct_eq(given.as_bytes()));
    if !matches {
        return Err("missing or wrong CSRF token");
    }
    Ok(session)
}

/// The 403 page of a refused action.
pub(crate) fn forbidden(reason: &'static str) -> Response {
    let page = super::view::message_page("Forbidden", reason);
    (StatusCode::FORBIDDEN, page).into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cookies_and_tokens() {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_static("a=1; queen_session=abc; b=2"));
        assert_eq!(cookie(&h, COOKIE), Some("abc"));
        assert_eq!(cookie(&h, "c"), None);
        assert_eq!(decode_token(&encode_token("tok:en;=")).as_deref(), Some("tok:en;="));
        let csrf = csrf_for("abc");
        assert_eq!(csrf.len(), 64);
        assert_eq!(csrf, csrf_for("abc"));
        assert_ne!(csrf, csrf_for("abd"));
        assert!(random_anonymous().starts_with(ANON_PREFIX));
        assert_ne!(random_anonymous(), random_anonymous());
    }

    #[test]
    fn origins() {
        let mut h = HeaderMap::new();
        assert!(same_origin(&h), "no Origin header: not a browser's cross-site POST");
        h.insert(header::HOST, HeaderValue::from_static("broker:6632"));
        h.insert(header::ORIGIN, HeaderValue::from_static("http://broker:6632"));
        assert!(same_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert!(!same_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(!same_origin(&h));
    }
}
