//! Error policy: the database decides what is bad input. SQL functions raise
//! `QN400` (HTTP 400) or `QN413` (HTTP 413) with the JSON body to answer
//! with. A business refusal that rolls the call back (HTTP 200) raises its
//! facts, and the engine writes the body: `QN201` a lost KV precondition,
//! `QN202` a refused transaction, `QN203` a refused stream cycle. Anything
//! that means "the database cannot be reached" is
//! [`EngineError::Unavailable`], which the server turns into a 503 with
//! `Retry-After`.

/// Why an engine call did not produce its answer.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The input was refused; `body` is the JSON error body.
    #[error("rejected input ({status}): {body}")]
    Rejected {
        /// 400 or 413.
        status: u16,
        /// The JSON error body, as the SQL function wrote it.
        body: String,
    },
    /// A business refusal that rolled the whole call back; `0` is the JSON
    /// answer (HTTP 200, `success: false`).
    #[error("refused: {0}")]
    Refused(String),
    /// A `required` KV op lost its precondition and the call rolled back
    /// (SQLSTATE QN201). `Engine::kv` and `Engine::transaction` answer it
    /// as [`EngineError::Refused`] with the body they write from it.
    #[error("kv precondition lost at index {}", .0.failed_index)]
    PreconditionLost(Box<queen_wire::PreconditionLost>),
    /// A transaction's ack or push was refused and it rolled back (SQLSTATE
    /// QN202); `Engine::transaction` answers it as [`EngineError::Refused`]
    /// with the body it writes from these facts.
    #[error("transaction refused: {0:?}")]
    TransactionRefused(Box<queen_wire::TxRefusal>),
    /// A stream cycle was refused, or found to be a replay, and rolled back
    /// (SQLSTATE QN203); `Engine::stream_cycle` answers it.
    #[error("stream cycle refused: {0:?}")]
    CycleRefused(CycleRefusal),
    /// PostgreSQL is down, restarting, or the pool is exhausted.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The input holds text PostgreSQL cannot store (`\u0000`, a lone
    /// surrogate); bad input, answered 400 in the envelope of the route.
    #[error("unstorable text: {0}")]
    UnstorableText(String),
    /// The operation is paused by a maintenance switch; `0` is the JSON body (HTTP 503).
    #[error("paused: {0}")]
    Paused(String),
    /// A concurrent transaction won a serialization or deadlock race.
    #[error("conflict, retry: {0}")]
    Conflict(String),
    /// The statement waited past `lock_timeout` (SQLSTATE 55P03, `code`
    /// `lock_timeout`) or ran past `statement_timeout` (57014,
    /// `statement_timeout`); it rolled back, so nothing was written
    /// (HTTP 503 with `Retry-After`).
    #[error("{code}: {message}")]
    Timeout {
        /// `lock_timeout` or `statement_timeout`: the error code answered.
        code: &'static str,
        /// The server's message.
        message: String,
    },
    /// The engine could not be set up as configured (the push spool's
    /// directory, say); raised by `Engine::connect` only.
    #[error("setup: {0}")]
    Setup(String),
    /// Any other database error: a bug on our side.
    #[error("database error: {}", describe(.0))]
    Database(tokio_postgres::Error),
    /// The database answered something this crate does not understand.
    #[error("unexpected database answer: {0}")]
    Protocol(String),
    /// Encryption at rest cannot be honoured here: no key, or a payload
    /// this broker's key cannot open (HTTP 500, with this text).
    #[error("encryption at rest: {0}")]
    Encryption(String),
    /// An encrypted queue was sent an unsealed payload: the engine's view of
    /// which queues are encrypted was stale (these queues). Retried inside
    /// the engine; a caller sees it only if the flag keeps flipping.
    #[error("the encryption setting of {0:?} changed; retry")]
    EncryptionChanged(Vec<String>),
}

/// Why the database did not apply a stream cycle (the facts of SQLSTATE
/// QN203); the engine writes the runner's answer.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CycleRefusal {
    /// Refused: the runner's `success: false` answer, with this error.
    Refused(String),
    /// A copy of this cycle committed while it waited for the cursor: a
    /// replay, answered as a success that applied nothing.
    Replayed {
        /// The source queue.
        #[serde(rename = "queueName")]
        queue_name: String,
    },
}

/// The server's message, SQLSTATE and function context; never `detail`,
/// which can quote row values (KV values must not reach the logs).
fn describe(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => match db.where_() {
            Some(at) => format!("{} [{}] at {}", db.message(), db.code().code(), at),
            None => format!("{} [{}]", db.message(), db.code().code()),
        },
        None => err.to_string(),
    }
}

impl From<tokio_postgres::Error> for EngineError {
    fn from(err: tokio_postgres::Error) -> Self {
        let Some(db) = err.as_db_error() else {
            // No server error: the connection failed or closed.
            return EngineError::Unavailable(err.to_string());
        };
        let code = db.code().code();
        match code {
            "QN400" => EngineError::Rejected { status: 400, body: db.message().to_owned() },
            "QN413" => EngineError::Rejected { status: 413, body: db.message().to_owned() },
            // A lost KV precondition raises its facts, and the call writes
            // its refusal from them (a KV call's or a transaction's).
            // (Unreadable facts are our bug; as a database error the call
            // rolled back, so a batch still reruns its members alone.)
            "QN201" => match serde_json::from_str::<queen_wire::PreconditionLost>(db.message()) {
                Ok(lost) => EngineError::PreconditionLost(Box::new(lost)),
                Err(_) => EngineError::Database(err),
            },
            "QN202" => match serde_json::from_str::<queen_wire::TxRefusal>(db.message()) {
                Ok(refusal) => EngineError::TransactionRefused(Box::new(refusal)),
                Err(_) => EngineError::Database(err),
            },
            "QN203" => match serde_json::from_str::<CycleRefusal>(db.message()) {
                Ok(refusal) => EngineError::CycleRefused(refusal),
                Err(_) => EngineError::Database(err),
            },
            "QN404" => EngineError::Rejected { status: 404, body: db.message().to_owned() },
            // A conflict with stored state the caller must resolve (a stream's config hash).
            "QNC09" => EngineError::Rejected { status: 409, body: db.message().to_owned() },
            "QN503" => EngineError::Paused(db.message().to_owned()),
            "QN500" => EngineError::Encryption(db.message().to_owned()),
            "QN409" => EngineError::EncryptionChanged(
                serde_json::from_str::<serde_json::Value>(db.message())
                    .ok()
                    .and_then(|v| {
                        v["queues"]
                            .as_array()
                            .map(|q| q.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
                    })
                    .unwrap_or_default(),
            ),
            // Text PostgreSQL cannot hold: \u0000 or a lone surrogate in a JSON string.
            "22P05" | "22021" | "22P02" => EngineError::UnstorableText(db.message().to_owned()),
            "55P03" => EngineError::Timeout { code: "lock_timeout", message: db.message().to_owned() },
            "57014" => EngineError::Timeout { code: "statement_timeout", message: db.message().to_owned() },
            "40001" | "40P01" => EngineError::Conflict(db.message().to_owned()),
            // A standby: a failover is under way (the pool connects only to a
            // primary, so this is a connection caught by a demotion).
            "25006" => EngineError::Unavailable(format!("the database is read-only now: {}", db.message())),
            _ if code.starts_with("08") || code.starts_with("57P") || code == "53300" => {
                EngineError::Unavailable(db.message().to_owned())
            }
            _ => EngineError::Database(err),
        }
    }
}

impl From<deadpool_postgres::PoolError> for EngineError {
    fn from(err: deadpool_postgres::PoolError) -> Self {
        match err {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => EngineError::Unavailable(other.to_string()),
        }
    }
}
