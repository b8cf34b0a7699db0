//! The one error type of the crate.
//!
//! Error policy: an `Err` means the call did not produce the answer it was
//! asked for. A verdict is not an error: an absent key, a write that did not
//! apply, a lost `required` precondition ([`crate::TxOutcome::PreconditionLost`])
//! and a refused ack item ([`crate::AckResult::success`] false) are values.
//! Only a bundle the broker rolled back for another reason (an ack it did not
//! honour, a duplicate push) is [`Error::Refused`], because the caller asked
//! for a commit and got none.

/// What went wrong with a call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The HTTP request failed (connection, timeout, body read); retries, if
    /// any, are exhausted.
    #[error("http: {0}")]
    Http(#[from] reqwest::Error),
    /// The broker answered a non-2xx status (a 4xx at once, a 5xx after the
    /// retries).
    #[error("broker answered {status} ({}): {message}", code.as_deref().unwrap_or("no code"))]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The machine code: the body's `code`, else its `error`.
        code: Option<String>,
        /// The stable reason id (KV errors), when the body has one.
        reason: Option<String>,
        /// The human message: the body's `detail`, else `error`, else `HTTP <status>`.
        message: String,
    },
    /// The broker refused the call as a whole and changed nothing (a
    /// transaction that rolled back because of an ack or a duplicate push).
    #[error("refused: {message}")]
    Refused {
        /// The broker's text (contains "rolled back" for a transaction).
        message: String,
        /// The broker's reason id, such as `rejected_ack` or `duplicate`.
        reason: Option<String>,
    },
    /// An integer the broker answered does not fit `i64`; `raw` has every digit.
    #[error("the number {raw} does not fit i64 (use the raw API for every digit)")]
    Precision {
        /// The JSON number as the broker wrote it.
        raw: String,
    },
    /// `incr` met a live value that is not an integer (reason `type`).
    #[error("the value of {key} is not an integer counter: {raw}")]
    NotACounter {
        /// The key.
        key: String,
        /// The current value, as raw JSON.
        raw: String,
    },
    /// The broker's answer could not be decoded, or a value could not be encoded.
    #[error("decode: {0}")]
    Decode(String),
    /// An argument the client refuses before anything is sent.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The embedded engine failed for a reason that has no HTTP shape
    /// (database down, a bug).
    #[error(transparent)]
    #[cfg(feature = "embedded")]
    Engine(queen_engine::EngineError),
}

impl Error {
    /// True for [`Error::Status`] with a 4xx code: the request itself is wrong.
    pub fn is_client_error(&self) -> bool {
        matches!(self, Error::Status { status, .. } if (400..500).contains(status))
    }

    /// The machine code of a [`Error::Status`] answer.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Status { code, .. } => code.as_deref(),
            _ => None,
        }
    }

    /// The stable reason id of a [`Error::Status`] or [`Error::Refused`] answer.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Error::Status { reason, .. } | Error::Refused { reason, .. } => reason.as_deref(),
            _ => None,
        }
    }

    /// A [`Error::Status`] from a status code and the JSON error body.
    pub(crate) fn from_status(status: u16, body: &str) -> Error {
        #[derive(serde::Deserialize, Default)]
        struct Body {
            error: Option<serde_json::Value>,
            code: Option<String>,
            reason: Option<String>,
            detail: Option<String>,
        }
        let parsed: Body = serde_json::from_str(body).unwrap_or_default();
        let error = match parsed.error {
            Some(serde_json::Value::String(s)) => Some(s),
            Some(other) => Some(other.to_string()),
            None => None,
        };
        let message =
            parsed.detail.clone().or_else(|| error.clone()).unwrap_or_else(|| format!("HTTP {status}"));
        Error::Status { status, code: parsed.code.or(error), reason: parsed.reason, message }
    }

    pub(crate) fn decode(what: &str, e: impl std::fmt::Display) -> Error {
        Error::Decode(format!("{what}: {e}"))
    }
}

/// A KV argument its type refused (a zero TTL, say): the SDK's `Invalid`.
impl From<queen_wire::Invalid> for Error {
    fn from(e: queen_wire::Invalid) -> Self {
        Error::Invalid(e.0)
    }
}

#[cfg(feature = "embedded")]
impl From<queen_engine::EngineError> for Error {
    fn from(e: queen_engine::EngineError) -> Self {
        match e {
            // Bad input has an HTTP shape: answer it as the broker would.
            queen_engine::EngineError::Rejected { status, body } => Error::from_status(status, &body),
            other => Error::Engine(other),
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
