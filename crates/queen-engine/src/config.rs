//! Where the database is and how many connections to keep.

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use crate::EngineError;

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
        }
    }
}

impl DbConfig {
    /// The tokio-postgres configuration these settings describe.
    pub fn pg_config(&self) -> Result<tokio_postgres::Config, EngineError> {
        let mut cfg = match &self.url {
            Some(url) => url
                .parse::<tokio_postgres::Config>()
                .map_err(|e| EngineError::Unavailable(format!("bad database URL: {e}")))?,
            None => {
                let mut cfg = tokio_postgres::Config::new();
                cfg.host(&self.host).port(self.port).user(&self.user).dbname(&self.dbname);
                if let Some(pw) = &self.password {
                    cfg.password(pw);
                }
                cfg
            }
        };
        cfg.application_name("queen-rs");
        // A database that is down must turn into a quick 503, not a hang.
        cfg.connect_timeout(Duration::from_secs(3));
        Ok(cfg)
    }

    /// A pool whose waits are bounded, so exhaustion becomes a 503.
    pub fn pool(&self) -> Result<Pool, EngineError> {
        let manager = Manager::from_config(
            self.pg_config()?,
            NoTls,
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
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
