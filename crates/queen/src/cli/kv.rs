//! `kv get|put|incr|del|prefix`: one KV op per call through `POST /api/v1/kv`;
//! `kv namespaces|list`: the read-only KV browser (`/api/v1/resources/kv/*`).
//!
//! The ops are queen-engine's [`KvOp`], so the wire form is the one the SDK
//! and the broker's own tests send. A write that did not apply is exit 3
//! after its result is printed; `--json` prints the op's result object.

use clap::{Args, Subcommand};
use queen_client::Broker;
use queen_engine::{Expect, Expiry, KvOp};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::table::{clip, record, Table};
use super::{decode, payload, Ctx, Failure, Outcome};

#[derive(Subcommand, Debug)]
pub(crate) enum KvCommand {
    /// Read one key (an absent key is an answer, exit 0).
    Get {
        /// The namespace.
        ns: String,
        /// The key.
        key: String,
    },
    /// Write a JSON value (--ttl or --forever is required).
    Put(PutArgs),
    /// Add to an integer counter, created at 0 (--ttl or --forever is required).
    Incr(IncrArgs),
    /// Delete a key.
    Del(DelArgs),
    /// List the live keys under a prefix, in key order.
    Prefix(PrefixArgs),
    /// Every namespace with its live key count and its expired rows not yet swept.
    Namespaces,
    /// Browse a namespace's keys in key order, expired rows not yet swept included.
    List(ListArgs),
}

#[derive(Args, Debug)]
pub(crate) struct ListArgs {
    /// The namespace.
    ns: String,
    /// Only keys under this prefix (default: every key).
    #[arg(long, default_value = "")]
    prefix: String,
    /// Start strictly after this key (the nextCursor of the previous page).
    #[arg(long, value_name = "KEY")]
    cursor: Option<String>,
    /// Keys per page (1..=1000, larger is clamped; 100 by default).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    limit: Option<u32>,
    /// Walk every page (with --json, one page object per line).
    #[arg(long)]
    all: bool,
}

/// Exactly one expiry: every write names one, there is no default.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub(crate) struct ExpiryArgs {
    /// The key dies SECS seconds after this write (after its creation, for incr).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    ttl: Option<u64>,
    /// The key lives until deleted.
    #[arg(long)]
    forever: bool,
}

impl ExpiryArgs {
    /// A zero TTL is a usage error (exit 2), as the broker would refuse it.
    fn expiry(&self) -> Result<Expiry, Failure> {
        match self.ttl {
            Some(s) => Expiry::secs(s).map_err(|e| Failure::Usage(e.to_string())),
            None => Ok(Expiry::Forever),
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct PutArgs {
    /// The namespace.
    ns: String,
    /// The key.
    key: String,
    /// The value, as JSON (a string needs its quotes: '"text"').
    value: String,
    #[command(flatten)]
    expiry: ExpiryArgs,
    /// Write only if the live version is this one (a pure update).
    #[arg(long, value_name = "VERSION", value_parser = clap::value_parser!(u64).range(1..))]
    expect: Option<u64>,
    /// Write only if no live key exists.
    #[arg(long, conflicts_with = "expect")]
    if_absent: bool,
}

#[derive(Args, Debug)]
pub(crate) struct IncrArgs {
    /// The namespace.
    ns: String,
    /// The key.
    key: String,
    /// The delta (may be negative).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    by: i64,
    /// Refuse (write nothing) if the result would be below this.
    #[arg(long, allow_negative_numbers = true)]
    min: Option<i64>,
    /// Refuse (write nothing) if the result would be above this.
    #[arg(long, allow_negative_numbers = true)]
    max: Option<i64>,
    #[command(flatten)]
    expiry: ExpiryArgs,
}

#[derive(Args, Debug)]
pub(crate) struct DelArgs {
    /// The namespace.
    ns: String,
    /// The key.
    key: String,
    /// Delete only if the live version is this one.
    #[arg(long, value_name = "VERSION", value_parser = clap::value_parser!(u64).range(1..))]
    expect: Option<u64>,
}

#[derive(Args, Debug)]
pub(crate) struct PrefixArgs {
    /// The namespace.
    ns: String,
    /// The key prefix (not empty).
    prefix: String,
    /// Start strictly after this key (the nextAfter of the previous page).
    #[arg(long, value_name = "KEY")]
    after: Option<String>,
    /// Keys per page (the broker clamps it to 1..=1000; 100 by default).
    #[arg(long)]
    limit: Option<u32>,
    /// Keys, versions and expiries without the values.
    #[arg(long)]
    keys_only: bool,
    /// Walk every page (with --json, one result object per page, one per line).
    #[arg(long)]
    all: bool,
}

/// `Some(raw)` for any present value, JSON `null` included.
fn some_raw<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// One KV result object; which fields are set depends on the op.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    found: Option<bool>,
    #[serde(default)]
    applied: Option<bool>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default, deserialize_with = "some_raw")]
    value: Option<Box<RawValue>>,
    #[serde(default)]
    version: Option<u64>,
    #[serde(default)]
    expires_at: Option<String>,
    #[serde(default)]
    updated_at: Option<String>,
    #[serde(default)]
    rows: Vec<Row>,
    #[serde(default)]
    truncated: bool,
    #[serde(default)]
    next_after: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    key: String,
    #[serde(default, deserialize_with = "some_raw")]
    value: Option<Box<RawValue>>,
    version: u64,
    #[serde(default)]
    expires_at: Option<String>,
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    results: Vec<Box<RawValue>>,
}

/// Runs one op; answers its result object, raw and decoded.
async fn one(ctx: &Ctx, op: &KvOp) -> Result<(Box<RawValue>, Answer), Failure> {
    let body = format!("{{\"operations\":[{}]}}", op.to_wire());
    let json = ctx.broker.kv(&body).await?;
    let envelope: Envelope = decode(json.as_str(), "kv")?;
    let raw =
        envelope.results.into_iter().next().ok_or_else(|| Failure::Broker("kv answered no result".into()))?;
    let answer: Answer = decode(raw.get(), "kv")?;
    Ok((raw, answer))
}

fn raw_text(v: &Option<Box<RawValue>>) -> &str {
    v.as_deref().map_or("-", RawValue::get)
}

fn expires(e: &Option<String>) -> String {
    e.clone().unwrap_or_else(|| "never".into())
}

pub(crate) async fn run(ctx: &Ctx, command: KvCommand) -> Outcome {
    match command {
        KvCommand::Get { ns, key } => get(ctx, ns, key).await,
        KvCommand::Put(a) => {
            let value = payload(&a.value, "the value")?;
            let (ns, key, expiry) = (a.ns, a.key, a.expiry.expiry()?);
            let op = if a.if_absent {
                KvOp::PutIfAbsent { ns, key, value, expiry, required: false }
            } else {
                KvOp::Put { ns, key, value, expiry, expect: a.expect.map(Expect::from_wire), required: false }
            };
            write(ctx, "put", &op).await
        }
        KvCommand::Incr(a) => {
            let n = |v: i64| RawValue::from_string(v.to_string()).map_err(|e| Failure::Usage(e.to_string()));
            let op = KvOp::Incr {
                ns: a.ns,
                key: a.key,
                delta: n(a.by)?,
                min: a.min.map(n).transpose()?,
                max: a.max.map(n).transpose()?,
                expiry: a.expiry.expiry()?,
                required: false,
            };
            write(ctx, "incr", &op).await
        }
        KvCommand::Del(a) => {
            let op = KvOp::Delete { ns: a.ns, key: a.key, expect: a.expect, required: false };
            write(ctx, "delete", &op).await
        }
        KvCommand::Prefix(a) => prefix(ctx, a).await,
        KvCommand::Namespaces => namespaces(ctx).await,
        KvCommand::List(a) => list(ctx, a).await,
    }
}

async fn namespaces(ctx: &Ctx) -> Outcome {
    #[derive(Deserialize)]
    struct Answer {
        namespaces: Vec<queen_client::NamespaceCount>,
    }
    let json = ctx.broker.kv_namespaces().await?;
    if ctx.json {
        return ctx.out_json(json.as_str());
    }
    let answer: Answer = decode(json.as_str(), "kv namespaces")?;
    if answer.namespaces.is_empty() {
        return ctx.out("no KV namespaces\n");
    }
    let mut t = Table::new(["NAMESPACE", "KEYS", "EXPIRED"]);
    for n in &answer.namespaces {
        t.row([n.namespace.clone(), n.keys.to_string(), n.expired.to_string()]);
    }
    ctx.out(&t.render())
}

async fn list(ctx: &Ctx, a: ListArgs) -> Outcome {
    let mut cursor = a.cursor.clone();
    let mut t = Table::new(["KEY", "VERSION", "EXPIRES", "VALUE"]);
    let mut count = 0usize;
    loop {
        let body =
            serde_json::json!({"namespace": a.ns, "prefix": a.prefix, "cursor": cursor, "limit": a.limit});
        let json = ctx.broker.kv_list(&body.to_string()).await?;
        if ctx.json {
            ctx.out_json(json.as_str())?;
        }
        let page: queen_client::ListPage = decode(json.as_str(), "kv list")?;
        for row in &page.keys {
            count += 1;
            let expiry = if row.expired {
                format!("{} (expired)", expires(&row.expires_at))
            } else {
                expires(&row.expires_at)
            };
            t.row([row.key.clone(), row.version.to_string(), expiry, clip(row.value.get(), 60)]);
        }
        match page.next_cursor {
            Some(next) if a.all => cursor = Some(next),
            Some(next) => return key_table_end(ctx, &t, count, &a.prefix, &a.ns, Some(("--cursor", &next))),
            None => break,
        }
    }
    key_table_end(ctx, &t, count, &a.prefix, &a.ns, None)
}

/// The end of a listing of keys (`kv list`, `kv prefix`): the table and its
/// count, and where the next page starts (`flag` and its value) when one
/// follows; nothing more in `--json` mode, where each page was printed.
fn key_table_end(
    ctx: &Ctx,
    t: &Table,
    count: usize,
    prefix: &str,
    ns: &str,
    more: Option<(&str, &str)>,
) -> Outcome {
    if ctx.json {
        return Ok(());
    }
    if count == 0 && more.is_none() {
        return ctx.out(&format!("no keys under {prefix:?} in {ns}\n"));
    }
    let mut text = t.render();
    match more {
        Some((flag, next)) => {
            text.push_str(&format!("{count} keys; more follow: {flag} '{next}' (or --all)\n"))
        }
        None => text.push_str(&format!("{count} keys\n")),
    }
    ctx.out(&text)
}

async fn get(ctx: &Ctx, ns: String, key: String) -> Outcome {
    let op = KvOp::Get { ns: ns.clone(), key: key.clone() };
    let (raw, answer) = one(ctx, &op).await?;
    if ctx.json {
        return ctx.out_json(raw.get());
    }
    if answer.found != Some(true) {
        return ctx.out(&format!("{ns}/{key}: absent\n"));
    }
    ctx.out(&record(&[
        ("key", key),
        ("value", raw_text(&answer.value).to_owned()),
        ("version", answer.version.unwrap_or(0).to_string()),
        ("expires", expires(&answer.expires_at)),
        ("updated", answer.updated_at.clone().unwrap_or_default()),
    ]))
}

/// A write: prints its result, and exit 3 when it did not apply.
async fn write(ctx: &Ctx, what: &str, op: &KvOp) -> Outcome {
    let (raw, answer) = one(ctx, op).await?;
    let key = answer.key.clone().unwrap_or_default();
    let version = answer.version.unwrap_or(0);
    if answer.applied != Some(true) {
        if ctx.json {
            ctx.out_json(raw.get())?;
        }
        let reason = answer.reason.as_deref().unwrap_or("no reason given");
        let current = if version == 0 {
            "nothing live there".to_owned()
        } else {
            format!("current version {version}, value {}", clip(raw_text(&answer.value), 200))
        };
        return Err(Failure::Refused(format!("{what} of {key} not applied: {reason} ({current})")));
    }
    if ctx.json {
        return ctx.out_json(raw.get());
    }
    let line = match what {
        "incr" => format!("{key} = {} (version {version})\n", raw_text(&answer.value)),
        "delete" => format!("deleted {key}\n"),
        _ => format!("put {key} (version {version})\n"),
    };
    ctx.out(&line)
}

async fn prefix(ctx: &Ctx, a: PrefixArgs) -> Outcome {
    let mut after = a.after.clone();
    let mut t = Table::new(["KEY", "VERSION", "EXPIRES", "VALUE"]);
    let mut count = 0usize;
    loop {
        let op = KvOp::GetPrefix {
            ns: a.ns.clone(),
            prefix: a.prefix.clone(),
            after: after.clone(),
            limit: a.limit,
            keys_only: a.keys_only,
        };
        let (raw, page) = one(ctx, &op).await?;
        if ctx.json {
            ctx.out_json(raw.get())?;
        }
        for row in &page.rows {
            count += 1;
            t.row([
                row.key.clone(),
                row.version.to_string(),
                expires(&row.expires_at),
                clip(raw_text(&row.value), 60),
            ]);
        }
        match page.next_after {
            Some(next) if page.truncated && a.all => after = Some(next),
            Some(next) if page.truncated => {
                return key_table_end(ctx, &t, count, &a.prefix, &a.ns, Some(("--after", &next)));
            }
            _ => break,
        }
    }
    key_table_end(ctx, &t, count, &a.prefix, &a.ns, None)
}
