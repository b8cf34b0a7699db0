//! Decoding helpers for wire JSON. Fields are read as raw JSON text so that
//! payloads and numbers keep every digit, and types are judged the way
//! PostgreSQL's `json_typeof` judges them, so that Rust refuses exactly what
//! the SQL functions used to refuse.

use std::collections::BTreeMap;

use serde_json::value::RawValue;

use crate::EngineError;

/// A JSON object as its fields; a repeated key keeps its last value, as
/// PostgreSQL's `json` operators do.
pub(crate) type Fields<'a> = BTreeMap<String, &'a RawValue>;

/// The JSON type of a raw value, named as `json_typeof` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Object,
    Array,
    String,
    Number,
    Boolean,
    Null,
}

pub(crate) fn kind(raw: &RawValue) -> Kind {
    match raw.get().as_bytes().first() {
        Some(b'{') => Kind::Object,
        Some(b'[') => Kind::Array,
        Some(b'"') => Kind::String,
        Some(b't' | b'f') => Kind::Boolean,
        Some(b'n') => Kind::Null,
        _ => Kind::Number,
    }
}

/// The kind of an optional field; an absent field is `None`.
pub(crate) fn kind_of(fields: &Fields<'_>, name: &str) -> Option<Kind> {
    fields.get(name).map(|r| kind(r))
}

/// Reads an object's fields; `None` when `raw` is not an object.
pub(crate) fn fields(raw: &RawValue) -> Option<Fields<'_>> {
    if kind(raw) != Kind::Object {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// Reads an array's elements; `None` when `raw` is not an array.
pub(crate) fn elements(raw: &RawValue) -> Option<Vec<&RawValue>> {
    if kind(raw) != Kind::Array {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// Decodes a JSON string. Text PostgreSQL cannot hold (`\u0000`, a lone
/// surrogate) is [`EngineError::UnstorableText`], as the database would have
/// refused it.
pub(crate) fn string(raw: &RawValue) -> Result<String, EngineError> {
    match serde_json::from_str::<String>(raw.get()) {
        Ok(s) if s.contains('\0') => {
            Err(EngineError::UnstorableText("unsupported Unicode escape sequence (\\u0000)".into()))
        }
        Ok(s) => Ok(s),
        Err(e) => Err(EngineError::UnstorableText(format!("invalid Unicode escape: {e}"))),
    }
}

/// The boolean of a raw value known to be a boolean.
pub(crate) fn boolean(raw: &RawValue) -> bool {
    raw.get() == "true"
}

/// Whether raw JSON text holds the escape of NUL (`\u0000`, in any case of
/// hex digits), which neither `text` nor `jsonb` can store.
pub(crate) fn has_nul_escape(text: &str) -> bool {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            if b.get(i + 1) == Some(&b'u') && b.get(i + 2..i + 6).is_some_and(|h| h == b"0000") {
                return true;
            }
            // Skip the escaped character, so `\\u0000` is not an escape of NUL.
            i += 2;
        } else {
            i += 1;
        }
    }
    false
}

/// A broker 400: `field` is the JSON path of the offending input.
pub(crate) fn bad_request(field: &str, problem: &str) -> EngineError {
    let msg = format!("{field} {problem}");
    EngineError::Rejected {
        status: 400,
        body: serde_json::json!({"error": msg, "code": "bad_request", "field": field, "detail": msg})
            .to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn nul_escapes_are_found_and_escaped_backslashes_are_not() {
        assert!(has_nul_escape(r#""a\u0000""#));
        assert!(!has_nul_escape(r#""a\\u0000""#));
        assert!(has_nul_escape(r#""a\\\u0000""#));
        assert!(!has_nul_escape(r#""\u00001""#.replace("0000", "0001").as_str()));
    }

    #[test]
    fn kinds_follow_json_typeof() {
        let raw = |s: &str| RawValue::from_string(s.to_owned()).unwrap();
        assert_eq!(kind(&raw("{}")), Kind::Object);
        assert_eq!(kind(&raw("-1.5e3")), Kind::Number);
        assert_eq!(kind(&raw("false")), Kind::Boolean);
        assert_eq!(kind(&raw("null")), Kind::Null);
    }
}
