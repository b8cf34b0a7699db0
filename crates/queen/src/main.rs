//! The `queen` command: `serve` the HTTP API, `migrate` a database, and the
//! client subcommands (`push`, `pop`, `ack`, `kv`, `queues`, `dlq`,
//! `status`; see `cli`).
//!
//! With no database settings at all, `serve` boots a private PostgreSQL
//! cluster from the system's binaries (see `embedded_pg`).

#![deny(clippy::unwrap_used, clippy::expect_used)]

mod cli;
mod embedded_pg;
mod telemetry;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use queen_engine::{DbConfig, Engine, EngineError, EngineOptions};
use queen_server::{AuthConfig, JwksSettings, ServerConfig};

#[derive(Parser)]
#[command(
    name = "queen",
    version,
    about = "A message broker on PostgreSQL with transactional KV state",
    after_help = cli::EXIT_CODES
)]
struct Cli {
    #[command(flatten)]
    client: cli::ClientArgs,
    /// Log lines as text or as JSON objects (one per line).
    #[arg(long, global = true, env = "QUEEN_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Queen HTTP API.
    Serve(Box<ServeArgs>),
    /// Apply the schema migrations and exit.
    Migrate(DbArgs),
    /// Encryption at rest: `rotate` re-seals every stored row with the current key.
    #[command(subcommand)]
    Encryption(EncryptionCommand),
    /// Measure the broker against pgbench running our SQL functions and plain SQL, in one run.
    Bench(queen_bench::BenchArgs),
    #[command(flatten)]
    Client(cli::ClientCommand),
}

#[derive(Subcommand)]
enum EncryptionCommand {
    /// Re-seal every stored payload (messages, dead letters, timers, stream state) with the
    /// current key, in batches that each commit on their own: online beside serving brokers,
    /// and safe to stop and run again. Then point every encrypted queue at the current key and
    /// forget the retired keys no row uses.
    Rotate(RotateArgs),
}

#[derive(Args)]
struct RotateArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The key (as QUEEN_ENCRYPTION_KEY) when there is one.
    #[arg(long, env = "QUEEN_ENCRYPTION_KEY", hide_env_values = true)]
    encryption_key: Option<String>,
    /// The keys, current one marked `*` (as QUEEN_ENCRYPTION_KEYS): every old key rows are
    /// sealed with, and the new one.
    #[arg(long, env = "QUEEN_ENCRYPTION_KEYS", hide_env_values = true, conflicts_with = "encryption_key")]
    encryption_keys: Option<String>,
    /// Rows per batch (one transaction each).
    #[arg(long, default_value_t = 500)]
    batch: i32,
}

/// The broker's keys from QUEEN_ENCRYPTION_KEY (one key) or QUEEN_ENCRYPTION_KEYS (a ring).
fn encryption_key(
    one: Option<&str>,
    ring: Option<&str>,
) -> anyhow::Result<Option<queen_engine::EncryptionKey>> {
    Ok(match (one.filter(|k| !k.is_empty()), ring.filter(|k| !k.is_empty())) {
        (_, Some(ring)) => Some(queen_engine::EncryptionKey::from_ring(ring)?),
        (Some(one), None) => Some(queen_engine::EncryptionKey::from_hex(one)?),
        (None, None) => None,
    })
}

#[derive(Args, Clone)]
struct DbArgs {
    /// PostgreSQL URL; wins over the PG_* settings. Several hosts make a
    /// high-availability cluster: `postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`
    /// (the broker only ever uses the host that accepts writes, and after a
    /// failover finds the new one). TLS takes libpq's options: `sslmode=require`,
    /// `verify-ca` or `verify-full` with `sslrootcert=<CA file>`, and
    /// `sslcert`/`sslkey` for a client certificate; without `sslmode` the
    /// connection is plain.
    #[arg(long, env = "QUEEN_DATABASE_URL")]
    database_url: Option<String>,
    /// PostgreSQL host (or Unix-socket directory).
    #[arg(long, env = "PG_HOST")]
    pg_host: Option<String>,
    /// PostgreSQL port.
    #[arg(long, env = "PG_PORT")]
    pg_port: Option<u16>,
    /// PostgreSQL user.
    #[arg(long, env = "PG_USER")]
    pg_user: Option<String>,
    /// PostgreSQL password.
    #[arg(long, env = "PG_PASSWORD", hide_env_values = true)]
    pg_password: Option<String>,
    /// PostgreSQL database.
    #[arg(long, env = "PG_DB")]
    pg_db: Option<String>,
    /// Connections in the pool.
    #[arg(long, env = "DB_POOL_SIZE", default_value_t = 16)]
    pool_size: usize,
    /// Prepare each statement once per connection. Set to false behind
    /// pgbouncer in transaction mode (before 1.21, which has no prepared
    /// statements there): every call then sends an unnamed statement.
    #[arg(long, env = "QUEEN_PREPARED_STATEMENTS", default_value_t = true, action = clap::ArgAction::Set)]
    prepared_statements: bool,
    /// A direct PostgreSQL URL for the LISTEN connection that wakes long polls
    /// across brokers; needed behind a transaction-mode pooler, where LISTEN
    /// hears nothing. Without it there, other brokers' pushes are seen at the
    /// long polls' re-check interval.
    #[arg(long, env = "QUEEN_LISTEN_DATABASE_URL")]
    listen_database_url: Option<String>,
}

impl DbArgs {
    /// `None` when nothing at all names a database.
    fn db_config(&self) -> Option<DbConfig> {
        let given = self.database_url.is_some()
            || self.pg_host.is_some()
            || self.pg_port.is_some()
            || self.pg_user.is_some()
            || self.pg_db.is_some();
        if !given {
            return None;
        }
        let d = DbConfig::default();
        Some(DbConfig {
            url: self.database_url.clone(),
            host: self.pg_host.clone().unwrap_or(d.host),
            port: self.pg_port.unwrap_or(d.port),
            user: self.pg_user.clone().unwrap_or(d.user),
            password: self.pg_password.clone(),
            dbname: self.pg_db.clone().unwrap_or(d.dbname),
            pool_size: self.pool_size,
            prepared_statements: self.prepared_statements,
            listen_url: self.listen_database_url.clone(),
            lock_timeout: d.lock_timeout,
            statement_timeout: d.statement_timeout,
        })
    }
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    db: DbArgs,
    /// HTTP port.
    #[arg(long, env = "PORT", default_value_t = 6632)]
    port: u16,
    /// Address to bind.
    #[arg(long, env = "HOST", default_value = "0.0.0.0")]
    host: String,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "QUEEN_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, env = "QUEEN_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Data directory of the embedded PostgreSQL (used only without database settings).
    #[arg(long, env = "QUEEN_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Byte ceiling of one multi-key KV read.
    #[arg(long, env = "QUEEN_KV_MAX_READ_BYTES", default_value_t = 4 * 1024 * 1024)]
    kv_max_read_bytes: i64,
    /// Milliseconds between KV sweeps of expired rows (0 disables the sweeper).
    #[arg(long, env = "QUEEN_KV_SWEEP_INTERVAL_MS", default_value_t = 30_000)]
    kv_sweep_interval_ms: u64,
    /// Expired rows deleted per sweep statement.
    #[arg(long, env = "QUEEN_KV_SWEEP_BATCH", default_value_t = 1000)]
    kv_sweep_batch: i32,
    /// The timer sweeper's tick in milliseconds; idle, it sleeps until the next due timer (at
    /// most 5 ticks) and a schedule on this broker wakes it (0: this broker fires none; another
    /// broker on the database may).
    #[arg(long, env = "QUEEN_TIMER_SWEEP_INTERVAL_MS", default_value_t = 200)]
    timer_sweep_interval_ms: u64,
    /// Timers fired per transaction.
    #[arg(long, env = "QUEEN_TIMER_FIRE_BATCH", default_value_t = 500)]
    timer_fire_batch: i32,
    /// How far ahead a timer may be scheduled, in seconds (default 90 days); further answers
    /// 403 timer_horizon_exceeded.
    #[arg(long, env = "QUEEN_TIMER_HORIZON_SECONDS", default_value_t = 90 * 24 * 3600)]
    timer_horizon_seconds: u64,
    /// The URL other brokers give callers of the ephemeral queues this broker owns (default
    /// http://HOST:PORT, with 127.0.0.1 for 0.0.0.0); set it when brokers run on several hosts.
    #[arg(long, env = "QUEEN_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// The key of encryption at rest (queue option encryptionEnabled): 64 hex characters, an
    /// AES-256 key. Every broker on the database needs the same one.
    #[arg(long, env = "QUEEN_ENCRYPTION_KEY", hide_env_values = true)]
    encryption_key: Option<String>,
    /// Several keys, for a rotation: `[*][label:]HEX,...`, the current one (which seals every
    /// new write) marked `*`; the others are only opened. Instead of QUEEN_ENCRYPTION_KEY.
    #[arg(long, env = "QUEEN_ENCRYPTION_KEYS", hide_env_values = true, conflicts_with = "encryption_key")]
    encryption_keys: Option<String>,
    /// Keep pushes that cannot reach PostgreSQL (or find pushes paused) in a file spool, fsynced
    /// before the 201 `buffered`, and drain them when the database is back; `false`: such pushes
    /// are answered 503.
    #[arg(long, env = "QUEEN_SPOOL", default_value_t = true, action = clap::ArgAction::Set)]
    spool: bool,
    /// The spool's directory (a directory per database inside it); default
    /// `/var/lib/queen/buffers` (root), else `~/.local/share/queen/buffers`.
    #[arg(long, env = "FILE_BUFFER_DIR")]
    spool_dir: Option<PathBuf>,
    /// Bytes the spool may hold; past them a push is answered 503 with Retry-After.
    #[arg(long, env = "QUEEN_SPOOL_MAX_BYTES", default_value_t = 1 << 30)]
    spool_max_bytes: u64,
    /// Items one push of the spool's drainer carries at most (whole records, so at least one).
    #[arg(long, env = "QUEEN_SPOOL_DRAIN_ITEMS", default_value_t = 500)]
    spool_drain_items: usize,
    /// Where a consumer group starts when its first pop names no subscriptionMode or
    /// subscriptionFrom: `new` (Queen 1.6's default: only messages pushed after that pop) or
    /// `all` (from the oldest message still in the queue; an empty value means `all`).
    #[arg(long, env = "DEFAULT_SUBSCRIPTION_MODE", default_value = "new")]
    default_subscription_mode: queen_engine::SubscriptionMode,
    /// Milliseconds between retention sweeps (queue options retentionSeconds,
    /// completedRetentionSeconds, maxWaitTimeSeconds); 0: this broker sweeps none.
    #[arg(long, env = "QUEEN_RETENTION_SWEEP_INTERVAL_MS", default_value_t = 10_000)]
    retention_sweep_interval_ms: u64,
    /// Messages the retention sweeper deletes per partition and statement.
    #[arg(long, env = "QUEEN_RETENTION_SWEEP_BATCH", default_value_t = 1000)]
    retention_sweep_batch: i32,
    /// Milliseconds between two counts of a large queue's operator gauge (the dashboard's
    /// counts of a queue of at least --queue-gauge-min-partitions partitions); 0: this broker
    /// counts none.
    #[arg(long, env = "QUEEN_QUEUE_GAUGE_INTERVAL_MS", default_value_t = 10_000)]
    queue_gauge_interval_ms: u64,
    /// Partitions from which a queue's operator counts come from its gauge (counted in the
    /// background) instead of being counted on every page view.
    #[arg(long, env = "QUEEN_QUEUE_GAUGE_MIN_PARTITIONS", default_value_t = 2000)]
    queue_gauge_min_partitions: i32,
    /// Milliseconds between a long poll's re-checks without a wake-up (lease expiry, delayed
    /// messages and lost cross-broker notifications rely on it).
    #[arg(long, env = "QUEEN_POLL_INTERVAL_MS", default_value_t = 250)]
    poll_interval_ms: u64,
    /// Wake long polls on other brokers of the same database through one coalesced NOTIFY
    /// outside the pushing transaction; `false` leaves them to their re-check.
    #[arg(long, env = "QUEEN_CROSS_BROKER_WAKEUPS", default_value_t = true, action = clap::ArgAction::Set)]
    cross_broker_wakeups: bool,
    /// Single-key KV gets that arrive together share one statement; at most this many such
    /// statements run at once (0: every get runs alone).
    #[arg(long, env = "QUEEN_KV_GET_BATCH_SLOTS", default_value_t = 1)]
    kv_get_batch_slots: usize,
    /// Concurrent push requests share one statement and one commit; at most this many such
    /// statements run at once.
    #[arg(long, env = "QUEEN_PUSH_BATCH_SLOTS", default_value_t = 1)]
    push_batch_slots: usize,
    /// Single-op KV writes (put, putIfAbsent, incr, delete, check) that arrive together share one
    /// statement and one commit; at most this many such statements run at once (0: every write
    /// runs alone).
    #[arg(long, env = "QUEEN_KV_WRITE_BATCH_SLOTS", default_value_t = 1)]
    kv_write_batch_slots: usize,
    /// Concurrent ack requests share one statement and one commit; at most this many such
    /// statements run at once (0: every ack runs alone).
    #[arg(long, env = "QUEEN_ACK_BATCH_SLOTS", default_value_t = 1)]
    ack_batch_slots: usize,
    /// Concurrent pops of queues share one statement and one commit; at most this many such
    /// statements run at once (0: every pop runs alone).
    #[arg(long, env = "QUEEN_POP_BATCH_SLOTS", default_value_t = 1)]
    pop_batch_slots: usize,
    /// Concurrent transaction bundles of acks and KV ops (no pushes, no timers) share one
    /// statement and one commit; at most this many such statements run at once (0: every
    /// bundle runs alone).
    #[arg(long, env = "QUEEN_TRANSACTION_BATCH_SLOTS", default_value_t = 1)]
    transaction_batch_slots: usize,
    /// Milliseconds a request's statement may wait for a row or advisory lock held elsewhere
    /// (PostgreSQL's lock_timeout); then it answers 503 `lock_timeout`, having written nothing
    /// (0: wait for ever). Migrations are exempt.
    #[arg(long, env = "QUEEN_LOCK_TIMEOUT_MS", default_value_t = 5_000)]
    lock_timeout_ms: u64,
    /// Milliseconds a request's statement may run (PostgreSQL's statement_timeout); then it
    /// answers 503 `statement_timeout`, having written nothing (0: no limit). Migrations are exempt.
    #[arg(long, env = "QUEEN_STATEMENT_TIMEOUT_MS", default_value_t = 30_000)]
    statement_timeout_ms: u64,
    /// Largest request body in bytes.
    #[arg(long, env = "QUEEN_MAX_BODY_BYTES", default_value_t = 32 * 1024 * 1024)]
    max_body_bytes: usize,
    /// Longest long poll (`wait=true`) a client may ask for, in milliseconds.
    #[arg(long, env = "QUEEN_MAX_WAIT_MS", default_value_t = 10 * 60 * 1000)]
    max_wait_ms: u64,
    /// Milliseconds a client has to send a request's headers; also how long an idle
    /// keep-alive connection stays open.
    #[arg(long, env = "QUEEN_HEADER_READ_TIMEOUT_MS", default_value_t = 60_000)]
    header_read_timeout_ms: u64,
    /// Milliseconds a client has to send a whole request body (then 408).
    #[arg(long, env = "QUEEN_BODY_READ_TIMEOUT_MS", default_value_t = 60_000)]
    body_read_timeout_ms: u64,
    /// A static bearer token, `token:read`, `token:write` or plain `token` (write);
    /// repeat the flag, or comma-separate in the environment. Any token or JWT key
    /// turns authentication on. Prefer the environment: flags show in `ps`.
    #[arg(long = "auth-token", env = "QUEEN_AUTH_TOKENS", value_delimiter = ',', hide_env_values = true)]
    auth_tokens: Vec<String>,
    /// Accept JWTs signed with HS256, HS384 or HS512 and this secret (role from the `role`
    /// claim). Queen's JWT_SECRET when JWT_ENABLED=true.
    #[arg(long, env = "QUEEN_JWT_SECRET", hide_env_values = true)]
    jwt_secret: Option<String>,
    /// Accept JWTs signed with RS256 or EdDSA, verified with this PEM public key file (RSA or
    /// Ed25519). Queen's JWT_PUBLIC_KEY (the PEM itself) when JWT_ENABLED=true.
    #[arg(long, env = "QUEEN_JWT_PUBLIC_KEY_FILE")]
    jwt_public_key_file: Option<PathBuf>,
    /// Accept JWTs signed with the keys of this https:// JWKS URL, picked by the token's `kid`.
    /// Queen's JWT_JWKS_URL when JWT_ENABLED=true.
    #[arg(long, env = "QUEEN_JWT_JWKS_URL")]
    jwt_jwks_url: Option<String>,
    /// Extra CA certificates (PEM) trusted for the JWKS URL, beside the system's.
    #[arg(long, env = "QUEEN_JWT_JWKS_CA_FILE")]
    jwt_jwks_ca_file: Option<PathBuf>,
    /// Seconds a fetched JWKS is used before it is fetched again (Queen's JWT_JWKS_REFRESH_INTERVAL).
    #[arg(long, env = "QUEEN_JWT_JWKS_REFRESH_INTERVAL")]
    jwt_jwks_refresh_interval: Option<u64>,
    /// Milliseconds one JWKS fetch may take (Queen's JWT_JWKS_TIMEOUT_MS).
    #[arg(long, env = "QUEEN_JWT_JWKS_TIMEOUT_MS")]
    jwt_jwks_timeout_ms: Option<u64>,
    /// The least milliseconds between two JWKS fetches: tokens naming unknown `kid`s (or a
    /// failing URL) cost the identity provider at most one request per this interval.
    #[arg(long, env = "QUEEN_JWT_JWKS_COOLDOWN_MS", default_value_t = 10_000)]
    jwt_jwks_cooldown_ms: u64,
    /// Accept only these JWT algorithms (comma-separated: HS256, HS384, HS512, RS256, EdDSA;
    /// `auto`: any one a key is configured for). Queen's JWT_ALGORITHM when JWT_ENABLED=true.
    #[arg(long, env = "QUEEN_JWT_ALGORITHM", value_delimiter = ',')]
    jwt_algorithm: Vec<String>,
    /// Paths served without a token (comma-separated; an entry ending in `/` is a prefix).
    /// Queen's JWT_SKIP_PATHS when JWT_ENABLED=true (default there
    /// /health,/metrics/prometheus,/metrics,/).
    #[arg(long, env = "QUEEN_JWT_SKIP_PATHS", value_delimiter = ',')]
    jwt_skip_paths: Option<Vec<String>>,
    /// Require JWTs to carry this `iss`.
    #[arg(long, env = "QUEEN_JWT_ISSUER")]
    jwt_issuer: Option<String>,
    /// Require JWTs to carry this `aud`.
    #[arg(long, env = "QUEEN_JWT_AUDIENCE")]
    jwt_audience: Option<String>,
}

/// Queen's own name of a JWT setting, read only when `JWT_ENABLED=true` (as
/// Queen reads them): ours win when both are given.
fn queen_jwt_env(name: &str) -> Option<String> {
    (std::env::var("JWT_ENABLED").as_deref() == Ok("true")).then(|| std::env::var(name).ok()).flatten()
}

/// Queen's default `JWT_SKIP_PATHS`.
const QUEEN_SKIP_PATHS: &str = "/health,/metrics/prometheus,/metrics,/";

fn comma_list(text: &str) -> Vec<String> {
    text.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect()
}

/// The authentication settings, checked before the broker starts serving.
fn auth_config(args: &ServeArgs) -> anyhow::Result<AuthConfig> {
    let queen_mode = std::env::var("JWT_ENABLED").as_deref() == Ok("true");
    let mut auth = AuthConfig::default();
    for spec in args.auth_tokens.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        // The error never repeats the token.
        auth = auth.with_token_spec(spec).context("bad --auth-token / QUEEN_AUTH_TOKENS entry")?;
    }
    if let Some(secret) =
        args.jwt_secret.clone().or_else(|| queen_jwt_env("JWT_SECRET")).filter(|s| !s.is_empty())
    {
        auth = auth
            .with_hmac_secret(secret.as_bytes())
            .context("bad --jwt-secret / QUEEN_JWT_SECRET / JWT_SECRET")?;
    }
    if let Some(path) = &args.jwt_public_key_file {
        let pem = std::fs::read(path)
            .with_context(|| format!("cannot read the JWT public key file {}", path.display()))?;
        auth = auth
            .with_public_key_pem(&pem)
            .with_context(|| format!("bad JWT public key file {}", path.display()))?;
    } else if let Some(pem) = queen_jwt_env("JWT_PUBLIC_KEY").filter(|p| !p.trim().is_empty()) {
        auth = auth.with_public_key_pem(pem.as_bytes()).context("bad JWT_PUBLIC_KEY")?;
    }
    if let Some(url) =
        args.jwt_jwks_url.clone().or_else(|| queen_jwt_env("JWT_JWKS_URL")).filter(|u| !u.is_empty())
    {
        let mut settings = JwksSettings::new(url);
        let refresh = args
            .jwt_jwks_refresh_interval
            .or_else(|| queen_jwt_env("JWT_JWKS_REFRESH_INTERVAL").and_then(|v| v.trim().parse().ok()));
        if let Some(secs) = refresh {
            settings.refresh = Duration::from_secs(secs.max(1));
        }
        let timeout = args
            .jwt_jwks_timeout_ms
            .or_else(|| queen_jwt_env("JWT_JWKS_TIMEOUT_MS").and_then(|v| v.trim().parse().ok()));
        if let Some(ms) = timeout {
            settings.timeout = Duration::from_millis(ms.max(1));
        }
        settings.cooldown = Duration::from_millis(args.jwt_jwks_cooldown_ms);
        if let Some(path) = &args.jwt_jwks_ca_file {
            settings.ca_pem = Some(
                std::fs::read(path)
                    .with_context(|| format!("cannot read the JWKS CA file {}", path.display()))?,
            );
        }
        auth = auth.with_jwks(settings).context("bad --jwt-jwks-url / QUEEN_JWT_JWKS_URL / JWT_JWKS_URL")?;
    }
    let algorithms = if args.jwt_algorithm.is_empty() {
        queen_jwt_env("JWT_ALGORITHM").map(|a| comma_list(&a)).unwrap_or_default()
    } else {
        args.jwt_algorithm.clone()
    };
    auth = auth
        .with_algorithms(&algorithms)
        .context("bad --jwt-algorithm / QUEEN_JWT_ALGORITHM / JWT_ALGORITHM")?;
    let issuer = args.jwt_issuer.clone().or_else(|| queen_jwt_env("JWT_ISSUER")).filter(|s| !s.is_empty());
    let audience =
        args.jwt_audience.clone().or_else(|| queen_jwt_env("JWT_AUDIENCE")).filter(|s| !s.is_empty());
    if (issuer.is_some() || audience.is_some()) && !auth.accepts_jwt() {
        anyhow::bail!("--jwt-issuer / --jwt-audience need a JWT key (secret, public key or JWKS URL)");
    }
    if queen_mode && !auth.accepts_jwt() {
        anyhow::bail!("JWT_ENABLED=true needs JWT_SECRET, JWT_PUBLIC_KEY or JWT_JWKS_URL");
    }
    if let Some(issuer) = issuer {
        auth = auth.with_issuer(issuer);
    }
    if let Some(audience) = audience {
        auth = auth.with_audience(audience);
    }
    let skip_paths = match &args.jwt_skip_paths {
        Some(paths) => paths.clone(),
        // Set but empty is an empty list, as in Queen; unset is Queen's default.
        None if queen_mode => {
            comma_list(&std::env::var("JWT_SKIP_PATHS").unwrap_or_else(|_| QUEEN_SKIP_PATHS.into()))
        }
        None => Vec::new(),
    };
    auth = auth
        .with_skip_paths(&skip_paths)
        .context("bad --jwt-skip-paths / QUEEN_JWT_SKIP_PATHS / JWT_SKIP_PATHS")?;
    Ok(auth)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let command = match cli.command {
        Command::Client(client) => std::process::exit(crate::cli::run(client, cli.client)),
        other => other,
    };
    let telemetry = telemetry::init(cli.log_format == "json")?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(async move {
        match command {
            Command::Client(_) => Ok(()),
            Command::Serve(args) => serve(*args).await,
            Command::Bench(args) => queen_bench::run(args).await,
            Command::Migrate(args) => {
                let db = args
                    .db_config()
                    .context("no database given: pass --database-url or set QUEEN_DATABASE_URL / PG_HOST")?;
                let engine = Engine::connect(&db, EngineOptions::default())?;
                engine.migrate().await?;
                engine.close();
                println!("migrations applied");
                Ok(())
            }
            Command::Encryption(EncryptionCommand::Rotate(args)) => rotate(args).await,
        }
    });
    telemetry.shutdown();
    result
}

/// `queen encryption rotate`.
async fn rotate(args: RotateArgs) -> anyhow::Result<()> {
    let db = args
        .db
        .db_config()
        .context("no database given: pass --database-url or set QUEEN_DATABASE_URL / PG_HOST")?;
    let key = encryption_key(args.encryption_key.as_deref(), args.encryption_keys.as_deref())?
        .context("no key: set QUEEN_ENCRYPTION_KEYS (old keys and the current one, marked *)")?;
    eprintln!("re-sealing with key id {} (batches of {})", key.id(), args.batch.max(1));
    let report = queen_engine::rotate(&db, &key, args.batch, |table, n| {
        eprintln!("{table}: {n} rows re-sealed");
    })
    .await?;
    if !report.remaining.is_empty() {
        anyhow::bail!(
            "{} rows re-sealed, but rows sealed with key ids {} remain (a broker still seals with an old \
             current key?); fix its QUEEN_ENCRYPTION_KEYS and run again",
            report.sealed,
            report.remaining.join(", ")
        );
    }
    println!("{} rows re-sealed; every row is sealed with key id {}", report.sealed, key.id());
    Ok(())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // Before anything starts, so a bad key file fails the start at once.
    let auth = auth_config(&args)?;
    tracing::info!(?auth, enabled = auth.is_enabled(), "authentication");
    let (db, embedded) = match args.db.db_config() {
        Some(db) => (db, None),
        None => {
            let dir = match args.data_dir.clone() {
                Some(d) => d,
                None => embedded_pg::default_data_dir()?,
            };
            let pg = embedded_pg::EmbeddedPostgres::start(&dir).await?;
            let mut db = pg.db_config();
            db.pool_size = args.db.pool_size;
            (db, Some(pg))
        }
    };
    let mut db = db;
    db.lock_timeout = Some(Duration::from_millis(args.lock_timeout_ms));
    db.statement_timeout = Some(Duration::from_millis(args.statement_timeout_ms));
    let result = run_broker(&args, &db, auth).await;
    if let Some(pg) = embedded {
        pg.stop().await;
    }
    result
}

/// The push spool's settings; `None` when it is off.
fn spool_options(args: &ServeArgs) -> anyhow::Result<Option<queen_engine::SpoolOptions>> {
    if !args.spool {
        return Ok(None);
    }
    let dir = match &args.spool_dir {
        Some(dir) => dir.clone(),
        None => embedded_pg::default_data_dir()
            .context("no directory for the push spool; set FILE_BUFFER_DIR or QUEEN_SPOOL=false")?
            .join("buffers"),
    };
    Ok(Some(queen_engine::SpoolOptions {
        dir,
        max_bytes: args.spool_max_bytes,
        drain_items: args.spool_drain_items,
    }))
}

async fn run_broker(args: &ServeArgs, db: &DbConfig, auth: AuthConfig) -> anyhow::Result<()> {
    // The port first: a clash fails the start at once, not after the database is found.
    let addr: SocketAddr = format!("{}:{}", args.host, args.port)
        .parse()
        .with_context(|| format!("bad listen address {}:{}", args.host, args.port))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (port {})", args.port))?;
    let options = EngineOptions {
        kv_max_read_bytes: args.kv_max_read_bytes,
        kv_sweep_interval: (args.kv_sweep_interval_ms > 0)
            .then(|| Duration::from_millis(args.kv_sweep_interval_ms)),
        kv_sweep_batch: args.kv_sweep_batch.max(1),
        poll_interval: Duration::from_millis(args.poll_interval_ms.max(1)),
        cross_broker_wakeups: args.cross_broker_wakeups,
        kv_get_batch_slots: args.kv_get_batch_slots,
        kv_write_batch_slots: args.kv_write_batch_slots,
        push_batch_slots: args.push_batch_slots.max(1),
        ack_batch_slots: args.ack_batch_slots,
        pop_batch_slots: args.pop_batch_slots,
        transaction_batch_slots: args.transaction_batch_slots,
        timer_sweep_interval: (args.timer_sweep_interval_ms > 0)
            .then(|| Duration::from_millis(args.timer_sweep_interval_ms)),
        timer_fire_batch: args.timer_fire_batch.max(1),
        timer_horizon: Duration::from_secs(args.timer_horizon_seconds),
        retention_sweep_interval: (args.retention_sweep_interval_ms > 0)
            .then(|| Duration::from_millis(args.retention_sweep_interval_ms)),
        retention_sweep_batch: args.retention_sweep_batch.max(1),
        queue_gauge_interval: (args.queue_gauge_interval_ms > 0)
            .then(|| Duration::from_millis(args.queue_gauge_interval_ms)),
        queue_gauge_min_partitions: args.queue_gauge_min_partitions.max(1),
        default_subscription_mode: args.default_subscription_mode,
        spool: spool_options(args)?,
        advertise_url: Some(args.advertise_url.clone().unwrap_or_else(|| {
            let host =
                if args.host == "0.0.0.0" || args.host == "::" { "127.0.0.1" } else { args.host.as_str() };
            let scheme = if args.tls_cert.is_some() { "https" } else { "http" };
            format!("{scheme}://{host}:{}", args.port)
        })),
        encryption_key: encryption_key(args.encryption_key.as_deref(), args.encryption_keys.as_deref())?,
    };
    let engine = Arc::new(Engine::connect(db, options)?);
    // Served at once: /health 200, /ready and requests that need the
    // schema 503 until the migration, retried in the background, succeeds.
    engine.expect_migration();
    let (fatal_tx, fatal_rx) = tokio::sync::oneshot::channel::<EngineError>();
    tokio::spawn(migrate_until_done(engine.clone(), fatal_tx));
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(queen_server::TlsIdentity::from_pem_files(cert, key)?),
        _ => None,
    };
    tracing::info!(%addr, https = tls.is_some(), "queen is serving");
    let config = ServerConfig {
        max_body_bytes: args.max_body_bytes,
        max_wait_ms: args.max_wait_ms,
        header_read_timeout: Duration::from_millis(args.header_read_timeout_ms.max(1)),
        body_read_timeout: Duration::from_millis(args.body_read_timeout_ms.max(1)),
        auth,
        tls,
    };
    let fatal = Arc::new(std::sync::Mutex::new(None));
    let stop = {
        let fatal = fatal.clone();
        async move {
            tokio::select! {
                () = shutdown_signal() => {}
                Ok(e) = fatal_rx => {
                    if let Ok(mut slot) = fatal.lock() {
                        *slot = Some(e);
                    }
                }
            }
        }
    };
    queen_server::serve(listener, engine, config, stop).await?;
    if let Some(e) = fatal.lock().ok().and_then(|mut slot| slot.take()) {
        return Err(e).context("migrating the database and checking its encryption keys");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Migrates, retrying with a capped backoff while PostgreSQL is unreachable
/// (it may start after the broker, or be restarting); logs the outage once
/// and the recovery once. Any other failure is fatal and stops the broker.
async fn migrate_until_done(engine: Arc<Engine>, fatal: tokio::sync::oneshot::Sender<EngineError>) {
    let mut backoff = Duration::from_millis(100);
    let mut down = false;
    loop {
        // Rows sealed with a key this broker lacks: refuse to serve.
        let migrated = match engine.migrate().await {
            Ok(()) => engine.check_encryption_keys().await.inspect_err(|_| engine.expect_migration()),
            Err(e) => Err(e),
        };
        match migrated {
            Ok(()) => {
                if down {
                    tracing::warn!("database reachable again; schema migrated, ready");
                } else {
                    tracing::info!("schema migrated, ready");
                }
                return;
            }
            Err(EngineError::Unavailable(e)) => {
                if !down {
                    tracing::warn!(error = %e, "database unreachable; /ready answers 503, retrying with backoff");
                    down = true;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MIGRATE_BACKOFF_CAP);
            }
            Err(e) => {
                tracing::error!(error = %e, "the migration or the encryption key check failed");
                let _ = fatal.send(e);
                return;
            }
        }
    }
}

/// The longest pause between two migration attempts while PostgreSQL is away.
const MIGRATE_BACKOFF_CAP: Duration = Duration::from_secs(5);

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            // Without signal handlers, run until killed.
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Every flag of every subcommand is distinct from the global ones
    /// (`lock renew --token` once collided with the bearer `--token`).
    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
