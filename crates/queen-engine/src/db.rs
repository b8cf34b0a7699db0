//! How the engine runs a statement: prepared once per connection (the
//! default), or unnamed in one round trip for a pooler in transaction mode.
//!
//! pgbouncer before 1.21 hands a client a different server connection per
//! transaction and knows nothing of protocol-level prepared statements, so a
//! statement prepared in one round trip may be missing (or be another
//! process's statement of the same name) in the next. With prepared
//! statements off, every call is one Parse/Bind/Execute/Sync of an unnamed
//! statement, which a transaction-mode pooler keeps on one server. The
//! parameter types such a call must name are learnt once per statement text,
//! inside a transaction so the learning round trips stay on one server.
//!
//! The call sites read as they would with tokio-postgres: `prepare_cached`,
//! then `query_one` / `query_opt` / `query` / `execute` with the statement.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Row, Statement};

use crate::EngineError;

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Parameter types per statement text, learnt once per process.
type TypeCache = Arc<RwLock<HashMap<String, Arc<[Type]>>>>;

/// The engine's connection pool and its statement mode.
#[derive(Clone)]
pub(crate) struct Pool {
    inner: deadpool_postgres::Pool,
    /// `Some` when statements run unnamed: the parameter types per text.
    unnamed: Option<TypeCache>,
}

impl Pool {
    pub(crate) fn new(inner: deadpool_postgres::Pool, prepared_statements: bool) -> Self {
        Pool { inner, unnamed: (!prepared_statements).then(Default::default) }
    }

    /// A connection, waited for within the pool's bounds.
    pub(crate) async fn get(&self) -> Result<Conn, EngineError> {
        Ok(Conn {
            client: Some(self.inner.get().await?),
            unnamed: self.unnamed.clone(),
            read_only: false.into(),
        })
    }

    /// The deadpool pool (status, close).
    pub(crate) fn deadpool(&self) -> &deadpool_postgres::Pool {
        &self.inner
    }
}

/// A pooled connection. One that found itself on a read-only server (a
/// primary demoted under it) is closed instead of going back to the pool.
pub(crate) struct Conn {
    /// `None` only inside `drop`.
    client: Option<deadpool_postgres::Object>,
    unnamed: Option<TypeCache>,
    read_only: std::sync::atomic::AtomicBool,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.read_only.load(std::sync::atomic::Ordering::Relaxed) {
            if let Some(client) = self.client.take() {
                tracing::warn!("closing a connection to a read-only server");
                drop(deadpool_postgres::Object::take(client));
            }
        }
    }
}

/// A statement ready to run on a [`Conn`].
pub(crate) enum Stmt<'s> {
    Prepared(Statement),
    Unnamed { sql: &'s str, types: Arc<[Type]> },
}

impl std::ops::Deref for Conn {
    type Target = deadpool_postgres::Object;
    fn deref(&self) -> &Self::Target {
        match &self.client {
            Some(client) => client,
            None => unreachable!("the client is taken only in drop"),
        }
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match &mut self.client {
            Some(client) => client,
            None => unreachable!("the client is taken only in drop"),
        }
    }
}

impl Conn {
    /// The statement for `sql`: prepared and cached on this connection, or
    /// (unnamed mode) its parameter types, learnt once per process.
    pub(crate) async fn prepare_cached<'s>(&self, sql: &'s str) -> Result<Stmt<'s>, EngineError> {
        let Some(cache) = &self.unnamed else {
            return Ok(Stmt::Prepared(self.judge(self.wrapper().prepare_cached(sql).await)?));
        };
        let known = cache.read().unwrap_or_else(PoisonError::into_inner).get(sql).cloned();
        if let Some(types) = known {
            return Ok(Stmt::Unnamed { sql, types });
        }
        // BEGIN pins one server behind a transaction-mode pooler, so the
        // named statement is prepared, described and closed on that server.
        self.wrapper().batch_execute("BEGIN").await?;
        let learnt = self.wrapper().prepare(sql).await;
        let types: Arc<[Type]> = match learnt {
            Ok(statement) => {
                let types = statement.params().into();
                drop(statement); // queues the Close before the COMMIT
                self.wrapper().batch_execute("COMMIT").await?;
                types
            }
            Err(e) => {
                self.wrapper().batch_execute("ROLLBACK").await?;
                return Err(e.into());
            }
        };
        cache.write().unwrap_or_else(PoisonError::into_inner).insert(sql.to_owned(), types.clone());
        Ok(Stmt::Unnamed { sql, types })
    }

    fn wrapper(&self) -> &deadpool_postgres::ClientWrapper {
        self
    }

    /// Notes a read-only answer (SQLSTATE 25006), so `drop` closes the connection.
    fn judge<T>(&self, result: Result<T, tokio_postgres::Error>) -> Result<T, EngineError> {
        if let Err(e) = &result {
            if e.code() == Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION) {
                self.read_only.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        Ok(result?)
    }

    /// Every row.
    pub(crate) async fn query(&self, stmt: &Stmt<'_>, params: Params<'_>) -> Result<Vec<Row>, EngineError> {
        match stmt {
            Stmt::Prepared(s) => self.judge(self.wrapper().query(s, params).await),
            Stmt::Unnamed { sql, types } => {
                self.judge(self.wrapper().query_typed(sql, &typed(params, types)?).await)
            }
        }
    }

    /// Exactly one row.
    pub(crate) async fn query_one(&self, stmt: &Stmt<'_>, params: Params<'_>) -> Result<Row, EngineError> {
        match stmt {
            Stmt::Prepared(s) => self.judge(self.wrapper().query_one(s, params).await),
            Stmt::Unnamed { .. } => {
                let mut rows = self.query(stmt, params).await?;
                match (rows.pop(), rows.is_empty()) {
                    (Some(row), true) => Ok(row),
                    _ => Err(EngineError::Protocol("a statement expected to answer one row did not".into())),
                }
            }
        }
    }

    /// At most one row.
    pub(crate) async fn query_opt(
        &self,
        stmt: &Stmt<'_>,
        params: Params<'_>,
    ) -> Result<Option<Row>, EngineError> {
        match stmt {
            Stmt::Prepared(s) => self.judge(self.wrapper().query_opt(s, params).await),
            Stmt::Unnamed { .. } => {
                let mut rows = self.query(stmt, params).await?;
                match rows.len() {
                    0 | 1 => Ok(rows.pop()),
                    _ => Err(EngineError::Protocol(
                        "a statement expected to answer one row answered more".into(),
                    )),
                }
            }
        }
    }

    /// The number of rows changed.
    pub(crate) async fn execute(&self, stmt: &Stmt<'_>, params: Params<'_>) -> Result<u64, EngineError> {
        match stmt {
            Stmt::Prepared(s) => self.judge(self.wrapper().execute(s, params).await),
            Stmt::Unnamed { sql, types } => {
                use futures_util::StreamExt;
                let stream = self.judge(self.wrapper().query_typed_raw(sql, typed(params, types)?).await)?;
                let mut stream = std::pin::pin!(stream);
                while let Some(row) = stream.next().await {
                    self.judge(row)?;
                }
                Ok(stream.rows_affected().unwrap_or(0))
            }
        }
    }
}

fn typed<'a>(params: Params<'a>, types: &[Type]) -> Result<Vec<(&'a (dyn ToSql + Sync), Type)>, EngineError> {
    if params.len() != types.len() {
        return Err(EngineError::Protocol(format!(
            "a statement takes {} parameters, {} were given",
            types.len(),
            params.len()
        )));
    }
    Ok(params.iter().copied().zip(types.iter().cloned()).collect())
}
