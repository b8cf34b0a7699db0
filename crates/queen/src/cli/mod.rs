//! The client subcommands of `queen`: `push`, `pop`, `ack`, `kv`, `lock`,
//! `timer`, `read`, `queues`, `dlq` and `status`, over queen-client's
//! [`HttpBroker`].
//!
//! Output: aligned tables for people by default; with `--json` the broker's
//! JSON as it came, byte for byte (numbers keep every digit). A command that
//! sends one operation (`ack`, each `kv` op) prints that operation's result
//! object rather than the envelope around it; `pop` with nothing to deliver
//! prints `{"messages":[]}`. Messages go to stderr, results to stdout.
//!
//! The operator reads (`queues`, `status`) use [`HttpBroker::get_json`], a
//! small documented addition to queen-client: they have no twin in the
//! [`queen_client::Broker`] trait because the embedded engine has no routes.
//!
//! Errors are one line on stderr and an exit code ([`EXIT_CODES`]); `anyhow`
//! stays in `main.rs`, this module has its own [`Failure`].

mod admin;
mod ephemeral;
mod kv;
mod lock;
mod queue;
mod read;
mod table;
mod timer;

use std::io::Write as _;
use std::time::Duration;

use clap::{Args, Subcommand};
use queen_client::{HttpBroker, HttpConfig, RetryPolicy};
use serde_json::value::RawValue;

/// The `after_help` of `queen --help`.
pub(crate) const EXIT_CODES: &str = "\
Exit codes of the client commands (push, pop, ack, kv, lock, timer, read, queues, dlq, status):
  0  done (an empty pop and an absent key are answers, not failures)
  1  the broker or the network failed: unreachable, timed out, or an error status
  2  bad usage or bad input: a missing or conflicting flag, a payload that is not JSON
  3  the broker said no: a KV write that did not apply (exists, absent, version,
     limit, type), an ack it did not honour, a pushed item that failed, a lock
     held by another, a timer not pending, an offset out of range";

/// Connection and output settings of the client commands.
#[derive(Args, Debug, Clone)]
pub(crate) struct ClientArgs {
    /// Broker base URL; several, comma separated, are used round robin.
    #[arg(
        long,
        global = true,
        env = "QUEEN_URL",
        default_value = "http://127.0.0.1:6632",
        value_delimiter = ',',
        help_heading = "Client options"
    )]
    url: Vec<String>,
    /// Bearer token sent with every request.
    #[arg(long, global = true, env = "QUEEN_TOKEN", hide_env_values = true, help_heading = "Client options")]
    token: Option<String>,
    /// CA certificate (PEM) to trust for an https:// broker, besides the system's.
    #[arg(long, global = true, env = "QUEEN_CA_CERT", value_name = "FILE", help_heading = "Client options")]
    ca_cert: Option<std::path::PathBuf>,
    /// Print the broker's JSON instead of tables.
    #[arg(long, global = true, help_heading = "Client options")]
    json: bool,
    /// Seconds one request may take (a long-poll pop gets its wait on top).
    #[arg(long, global = true, value_name = "SECS", default_value_t = 30, help_heading = "Client options")]
    timeout: u64,
    /// Retries of a connection error or a 5xx (never of a 4xx), with backoff.
    #[arg(long, global = true, value_name = "N", default_value_t = 2, help_heading = "Client options")]
    retries: u32,
}

/// The client subcommands (flattened into `queen`'s own).
#[derive(Subcommand, Debug)]
pub(crate) enum ClientCommand {
    /// Push JSON messages to a queue (arguments, or a file of JSON lines).
    Push(queue::PushArgs),
    /// Pop messages from a queue, or from the queues of a namespace/task (prints what the ack needs).
    Pop(queue::PopArgs),
    /// Create a queue or change its options (merged into the stored ones; --replace resets the rest).
    Configure(queue::ConfigureArgs),
    /// Acknowledge one message: completed, failed, retry or dlq.
    Ack(queue::AckArgs),
    /// Read and write KV state.
    #[command(subcommand)]
    Kv(kv::KvCommand),
    /// Locks and semaphores: acquire, renew, release, get.
    #[command(subcommand)]
    Lock(lock::LockCommand),
    /// Timers (scheduled messages): schedule, cancel, peek, list.
    #[command(subcommand)]
    Timer(timer::TimerCommand),
    /// Read a partition by offset (no lease taken, no cursor moved).
    Read(read::ReadArgs),
    /// Ephemeral queues (in the owning broker's memory): configure, push, pop, ack, depth, reset, delete.
    #[command(subcommand)]
    Ephemeral(ephemeral::EphemeralCommand),
    /// List the queues with their message counts.
    Queues,
    /// List the dead letters of a queue; `dlq replay <id>` and `dlq purge --queue Q` act on them.
    Dlq(queue::DlqCommand),
    /// Show the broker's status: totals, maintenance, queue depths, database.
    Status,
}

/// Why a command did not succeed; each kind has its exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Exit 1: the broker or the network failed.
    Broker(String),
    /// Exit 2: the command line or its input is wrong.
    Usage(String),
    /// Exit 3: the broker answered, and its verdict was no.
    Refused(String),
}

impl Failure {
    fn code(&self) -> i32 {
        match self {
            Failure::Broker(_) => 1,
            Failure::Usage(_) => 2,
            Failure::Refused(_) => 3,
        }
    }

    fn message(&self) -> &str {
        match self {
            Failure::Broker(m) | Failure::Usage(m) | Failure::Refused(m) => m,
        }
    }
}

impl From<queen_client::Error> for Failure {
    fn from(e: queen_client::Error) -> Self {
        match &e {
            queen_client::Error::Invalid(_) => Failure::Usage(one_line(&e)),
            queen_client::Error::Http(h) => {
                let url = h.url().map(|u| format!("{}://{}", u.scheme(), u.authority()));
                let url = url.unwrap_or_else(|| "the broker".into());
                let root = root_cause(h);
                Failure::Broker(if h.is_timeout() {
                    format!("{url} did not answer in time (--timeout)")
                } else if h.is_connect() {
                    format!("cannot connect to {url}: {root}")
                } else {
                    format!("request to {url} failed: {}", one_line(h))
                })
            }
            _ => Failure::Broker(one_line(&e)),
        }
    }
}

/// An error and its sources on one line (reqwest hides the cause otherwise).
fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// The innermost source's text ("Connection refused (os error 111)").
fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

pub(crate) type Outcome = Result<(), Failure>;

/// What every command gets: the broker and the output mode.
pub(crate) struct Ctx {
    broker: HttpBroker,
    json: bool,
}

impl Ctx {
    /// Prints text to stdout as is; a closed pipe (`| head`) is not an error.
    fn out(&self, text: &str) -> Outcome {
        let mut stdout = std::io::stdout().lock();
        match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            Err(e) => Err(Failure::Broker(format!("writing the output: {e}"))),
        }
    }

    /// Prints one JSON document on its own line.
    fn out_json(&self, json: &str) -> Outcome {
        let mut line = json.trim().to_owned();
        line.push('\n');
        self.out(&line)
    }
}

/// Parses JSON text given on the command line or in a file (exit 2 when it is not JSON).
pub(crate) fn payload(text: &str, what: &str) -> Result<Box<RawValue>, Failure> {
    RawValue::from_string(text.trim().to_owned()).map_err(|e| {
        Failure::Usage(format!("{what} is not JSON ({e}); a string needs its quotes, e.g. '\"text\"'"))
    })
}

/// Runs a client command and answers the process exit code.
pub(crate) fn run(command: ClientCommand, args: ClientArgs) -> i32 {
    // Logs (retries are debug) go to stderr, so stdout stays the result.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match execute(command, args) {
        Ok(()) => 0,
        Err(failure) => {
            eprintln!("queen: {}", failure.message());
            failure.code()
        }
    }
}

fn execute(command: ClientCommand, args: ClientArgs) -> Outcome {
    let mut config =
        HttpConfig::many(args.url).timeout(Duration::from_secs(args.timeout.max(1))).retry(RetryPolicy {
            max_retries: args.retries,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(5),
        });
    if let Some(token) = args.token {
        config = config.bearer_token(token);
    }
    if let Some(path) = &args.ca_cert {
        let pem = std::fs::read(path)
            .map_err(|e| Failure::Usage(format!("cannot read --ca-cert {}: {e}", path.display())))?;
        config = config.ca_certificate_pem(pem);
    }
    let broker = HttpBroker::with_config(config)?;
    let ctx = Ctx { broker, json: args.json };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Broker(format!("starting the runtime: {e}")))?;
    runtime.block_on(async move {
        match command {
            ClientCommand::Push(a) => queue::push(&ctx, a).await,
            ClientCommand::Pop(a) => queue::pop(&ctx, a).await,
            ClientCommand::Configure(a) => queue::configure(&ctx, a).await,
            ClientCommand::Ack(a) => queue::ack(&ctx, a).await,
            ClientCommand::Kv(c) => kv::run(&ctx, c).await,
            ClientCommand::Lock(c) => lock::run(&ctx, c).await,
            ClientCommand::Timer(c) => timer::run(&ctx, c).await,
            ClientCommand::Read(a) => read::run(&ctx, a).await,
            ClientCommand::Ephemeral(c) => ephemeral::run(&ctx, c).await,
            ClientCommand::Queues => admin::queues(&ctx).await,
            ClientCommand::Dlq(a) => queue::dlq(&ctx, a).await,
            ClientCommand::Status => admin::status(&ctx).await,
        }
    })
}

/// Decodes a broker answer for the human view (exit 1 when it has another shape).
pub(crate) fn decode<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, Failure> {
    serde_json::from_str(text).map_err(|e| Failure::Broker(format!("unexpected {what} answer: {e}")))
}
