//! Where the database is and how many connections to keep.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::NoTls;

use crate::pg_tls::{split_tls_options, PgTls, TlsOptions};
use crate::EngineError;

/// The default `lock_timeout` of request paths.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);
/// The default `statement_timeout` of request paths.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// Connection settings: a URL, or the Queen `PG_*` names.
#[derive(Debug, Clone)]
pub struct DbConfig {
    /// A libpq URL or key/value string; wins over the fields below.
    pub url: Option<String>,
    /// Host name, IP, or a Unix-socket directory.
    pub host: String,
    /// TCP port (also the socket file suffix).
    pub port: u16,
    /// Role to connect as.
    pub user: String,
    /// Password, if the server asks for one.
    pub password: Option<String>,
    /// Database name.
    pub dbname: String,
    /// Connections in the pool.
    pub pool_size: usize,
    /// Prepare each statement once per connection (the default). Off, every
    /// call sends an unnamed statement in one round trip: what pgbouncer
    /// before 1.21 needs in transaction mode.
    pub prepared_statements: bool,
    /// Where the LISTEN connection for cross-broker wake-ups goes, when not
    /// to `url` (behind a transaction-mode pooler LISTEN must bypass it).
    pub listen_url: Option<String>,
    /// `lock_timeout` of the pool's connections: a row or advisory lock
    /// held elsewhere (a `psql` session, another broker's long bundle)
    /// fails the waiting statement instead of stalling every request of
    /// its kind. `None` or zero: wait for ever.
    pub lock_timeout: Option<Duration>,
    /// `statement_timeout` of the pool's connections. `None` or zero: none.
    pub statement_timeout: Option<Duration>,
}

impl Default for DbConfig {
    fn default() -> Self {
        DbConfig {
            url: None,
            host: "localhost".into(),
            port: 5432,
            user: "postgres".into(),
            password: None,
            dbname: "postgres".into(),
            pool_size: 16,
            prepared_statements: true,
            listen_url: None,
            lock_timeout: Some(DEFAULT_LOCK_TIMEOUT),
            statement_timeout: Some(DEFAULT_STATEMENT_TIMEOUT),
        }
    }
}

impl DbConfig {
    /// The tokio-postgres configuration these settings describe.
    pub fn pg_config(&self) -> Result<tokio_postgres::Config, EngineError> {
        Ok(self.connect_spec()?.0)
    }

    /// The TLS options of the URL (libpq's `sslmode` and friends).
    pub fn tls_options(&self) -> Result<TlsOptions, EngineError> {
        match &self.url {
            Some(url) => Ok(split_tls_options(url)?.1),
            None => Ok(TlsOptions::default()),
        }
    }

    /// The configuration and the TLS connector to open connections with.
    pub(crate) fn connect_spec(&self) -> Result<(tokio_postgres::Config, PgTls), EngineError> {
        self.spec_for(self.url.as_deref())
    }

    /// Where the notification connection goes: `listen_url`, else as the pool.
    pub(crate) fn listen_spec(&self) -> Result<(tokio_postgres::Config, PgTls), EngineError> {
        match &self.listen_url {
            Some(url) => self.spec_for(Some(url)),
            None => self.connect_spec(),
        }
    }

    fn spec_for(&self, url: Option<&str>) -> Result<(tokio_postgres::Config, PgTls), EngineError> {
        let (mut cfg, tls) = match url {
            Some(url) => {
                let (rest, tls) = split_tls_options(url)?;
                let cfg = rest
                    .parse::<tokio_postgres::Config>()
                    .map_err(|e| EngineError::Unavailable(format!("bad database URL: {e}")))?;
                (cfg, tls)
            }
            None => {
                let mut cfg = tokio_postgres::Config::new();
                cfg.host(&self.host).port(self.port).user(&self.user).dbname(&self.dbname);
                if let Some(pw) = &self.password {
                    cfg.password(pw);
                }
                (cfg, TlsOptions::default())
            }
        };
        cfg.ssl_mode(tls.pg_mode());
        cfg.application_name("queen-rs");
        // A database that is down must turn into a quick 503, not a hang.
        cfg.connect_timeout(Duration::from_secs(3));
        // Every call writes, so only a primary will do: of several hosts the
        // one that accepts writes, and after a failover the new one.
        cfg.target_session_attrs(TargetSessionAttrs::ReadWrite);
        Ok((cfg, tls.connector()?))
    }

    /// `-c lock_timeout=… -c statement_timeout=…` for the pool's connections.
    fn timeout_options(&self) -> String {
        let mut out = Vec::new();
        for (name, value) in
            [("lock_timeout", self.lock_timeout), ("statement_timeout", self.statement_timeout)]
        {
            if let Some(ms) = value.map(|d| d.as_millis()).filter(|ms| *ms > 0) {
                out.push(format!("-c {name}={ms}"));
            }
        }
        out.join(" ")
    }

    /// A pool whose waits are bounded, so exhaustion becomes a 503.
    pub fn pool(&self) -> Result<Pool, EngineError> {
        let (mut pg, tls) = self.connect_spec()?;
        // In the startup packet, so it costs no round trip; a pooler that
        // ignores `options` (pgbouncer's ignore_startup_parameters) drops it.
        let timeouts = self.timeout_options();
        if !timeouts.is_empty() {
            let options = match pg.get_options() {
                Some(given) if !given.trim().is_empty() => format!("{given} {timeouts}"),
                _ => timeouts,
            };
            pg.options(&options);
        }
        let manager_config = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        let manager = match tls {
            PgTls::Plain => Manager::from_config(pg, NoTls, manager_config),
            PgTls::Rustls(tls) => Manager::from_config(pg, tls, manager_config),
        };
        Pool::builder(manager)
            .max_size(self.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(5)))
            .create_timeout(Some(Duration::from_secs(3)))
            .recycle_timeout(Some(Duration::from_secs(3)))
            .build()
            .map_err(|e| EngineError::Unavailable(format!("cannot build the pool: {e}")))
    }
}
