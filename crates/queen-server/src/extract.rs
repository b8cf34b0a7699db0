//! Request shape checks shared by the routes: JSON bodies and query
//! parameters, each refused with a 400 that names the field.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::Query;
use axum::http::StatusCode;
use serde_json::value::RawValue;

use crate::ApiError;

/// The body as UTF-8 JSON text, checked to be one JSON document.
pub(crate) fn json_body(body: &Result<Bytes, BytesRejection>) -> Result<&str, ApiError> {
    let bytes = match body {
        Ok(b) => b,
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => return Err(ApiError::TooLarge),
        Err(r) => return Err(ApiError::bad("body", format!("could not be read: {r}"))),
    };
    let text = std::str::from_utf8(bytes).map_err(|_| ApiError::bad("body", "is not UTF-8"))?;
    serde_json::from_str::<&RawValue>(text)
        .map_err(|e| ApiError::bad("body", format!("is not valid JSON: {e}")))?;
    Ok(text)
}

/// Query parameters by name.
pub(crate) struct Params(pub HashMap<String, String>);

impl Params {
    pub(crate) fn from(q: Result<Query<HashMap<String, String>>, QueryRejection>) -> Result<Self, ApiError> {
        q.map(|Query(m)| Params(m)).map_err(|e| ApiError::bad("query", format!("could not be parsed: {e}")))
    }

    pub(crate) fn str(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str).filter(|s| !s.is_empty())
    }

    pub(crate) fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.str(name) {
            None => Ok(None),
            Some("true") | Some("1") => Ok(Some(true)),
            Some("false") | Some("0") => Ok(Some(false)),
            Some(_) => Err(ApiError::bad(name, "must be true or false")),
        }
    }

    pub(crate) fn int(&self, name: &str, min: i64, max: i64) -> Result<Option<i64>, ApiError> {
        match self.str(name) {
            None => Ok(None),
            Some(s) => match s.parse::<i64>() {
                Ok(v) if (min..=max).contains(&v) => Ok(Some(v)),
                _ => Err(ApiError::bad(name, format!("must be an integer from {min} to {max}"))),
            },
        }
    }
}

/// The body as JSON text that must be an object. serde would also read a
/// struct from a JSON array (by position), so `[[...]]` must be refused here.
pub(crate) fn object_body(body: &Result<Bytes, BytesRejection>) -> Result<&str, ApiError> {
    let text = json_body(body)?;
    if !text.trim_start().starts_with('{') {
        return Err(ApiError::bad("body", "must be a JSON object"));
    }
    Ok(text)
}
