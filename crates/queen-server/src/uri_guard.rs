//! Refuses request targets that cannot mean one thing: a malformed percent
//! escape (`%`, `%4`, `%zz`) or an escape that decodes to invalid UTF-8,
//! in the path or in the query. axum would pass the first through as
//! literal text (so `a%` and `a%25` would name the same key) and decode the
//! second lossily (so `g%FF` would become a group called `g\u{FFFD}`); both
//! are answered here, before any handler, with a JSON 400.

use axum::http::{StatusCode, Uri};
use axum::response::Response;

use crate::error::json_response;

/// Why a target component was refused.
#[derive(Debug, PartialEq, Eq)]
enum Flaw {
    MalformedEscape,
    InvalidUtf8,
}

/// Decodes `%XX` escapes strictly and checks the result is UTF-8.
fn check_component(raw: &str) -> Result<(), Flaw> {
    let bytes = raw.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |b: u8| (b as char).to_digit(16);
            match (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
                (Some(h), Some(l)) => decoded.push((h * 16 + l) as u8),
                _ => return Err(Flaw::MalformedEscape),
            }
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).map(|_| ()).map_err(|_| Flaw::InvalidUtf8)
}

fn refusal(kv_route: bool, field: &str, flaw: Flaw) -> Response {
    let problem = match flaw {
        Flaw::MalformedEscape => "has a malformed percent escape (% must be followed by two hex digits)",
        Flaw::InvalidUtf8 => "does not decode to valid UTF-8",
    };
    let body = if kv_route {
        serde_json::json!({"error": "kv_bad_request", "reason": "kv_bad_key", "detail": format!("the {field} {problem}")})
    } else {
        let msg = format!("{field} {problem}");
        serde_json::json!({"error": msg, "code": "bad_request", "field": field, "detail": msg})
    };
    json_response(StatusCode::BAD_REQUEST, body.to_string())
}

/// The refusal of a target that cannot mean one thing, if it is one.
pub(crate) fn check(uri: &Uri) -> Option<Response> {
    let kv_route = uri.path().starts_with("/api/v1/kv/");
    if let Err(flaw) = check_component(uri.path()) {
        return Some(refusal(kv_route, "path", flaw));
    }
    if let Some(query) = uri.query() {
        for part in query.split('&') {
            if let Err(flaw) = check_component(part) {
                let name = part.split('=').next().unwrap_or_default();
                let field = if check_component(name).is_ok() && !name.is_empty() { name } else { "query" };
                return Some(refusal(kv_route, field, flaw));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_decoding() {
        assert_eq!(check_component("a%2Fb%25c"), Ok(()));
        assert_eq!(check_component("caf%C3%A9"), Ok(()));
        assert_eq!(check_component("plain"), Ok(()));
        for bad in ["trail%", "trail%4", "bad%zzx", "pct%%", "%G1", "mid%-1x"] {
            assert_eq!(check_component(bad), Err(Flaw::MalformedEscape), "{bad}");
        }
        for bad in ["g%FF", "%C0%AF", "%ED%A0%80"] {
            assert_eq!(check_component(bad), Err(Flaw::InvalidUtf8), "{bad}");
        }
    }
}
