//! `lock acquire|renew|release|get`: one op per call through `POST /api/v1/locks`.
//! A refusal (held, contended, lost) is printed, then exit 3.

use clap::Subcommand;
use queen_client::{Broker, LockResult};
use serde_json::{json, Value};

use super::table::{record, Table};
use super::{decode, Ctx, Failure, Outcome};

#[derive(Subcommand, Debug)]
pub(crate) enum LockCommand {
    /// Take a permit (a lock, or one of --limit permits of a semaphore).
    Acquire {
        /// The lock's name (no '#').
        name: String,
        /// Lifetime in seconds (renew before it passes).
        #[arg(long, value_name = "SECS")]
        ttl: u64,
        /// The holder's name (minted by the broker when absent).
        #[arg(long)]
        owner: Option<String>,
        /// Permits of a semaphore.
        #[arg(long, default_value_t = 1)]
        limit: u32,
    },
    /// Extend a permit; prints its new token.
    Renew {
        /// The lock's name.
        name: String,
        /// The permit's token, from the last acquire or renew (`--token` is the bearer token).
        #[arg(long, value_name = "TOKEN")]
        permit: i64,
        /// New lifetime in seconds, from now.
        #[arg(long, value_name = "SECS")]
        ttl: u64,
        /// The permit's slot.
        #[arg(long)]
        slot: Option<u32>,
        /// The holder's name.
        #[arg(long)]
        owner: Option<String>,
    },
    /// Give a permit back.
    Release {
        /// The lock's name.
        name: String,
        /// The permit's token (`--token` is the bearer token).
        #[arg(long, value_name = "TOKEN")]
        permit: i64,
        /// The permit's slot.
        #[arg(long)]
        slot: Option<u32>,
    },
    /// Who holds a lock.
    Get {
        /// The lock's name.
        name: String,
    },
}

pub(crate) async fn run(ctx: &Ctx, command: LockCommand) -> Outcome {
    let op = match &command {
        LockCommand::Acquire { name, ttl, owner, limit } => {
            json!({"op": "acquire", "name": name, "ttlSeconds": ttl, "owner": owner, "limit": limit})
        }
        LockCommand::Renew { name, permit: token, ttl, slot, owner } => {
            json!({"op": "renew", "name": name, "token": token, "ttlSeconds": ttl, "slot": slot, "owner": owner})
        }
        LockCommand::Release { name, permit: token, slot } => {
            json!({"op": "release", "name": name, "token": token, "slot": slot})
        }
        LockCommand::Get { name } => json!({"op": "get", "name": name}),
    };
    // Absent options are left out rather than sent as null.
    let op: Value = match op {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => other,
    };
    let json = ctx.broker.locks(&json!({ "operations": [op] }).to_string()).await?;
    #[derive(serde::Deserialize)]
    struct Envelope {
        results: Vec<Box<serde_json::value::RawValue>>,
    }
    let envelope: Envelope = decode(json.as_str(), "locks")?;
    let raw = envelope
        .results
        .into_iter()
        .next()
        .ok_or_else(|| Failure::Broker("locks answered no result".into()))?;
    let r: LockResult = decode(raw.get(), "locks")?;
    if ctx.json {
        ctx.out_json(raw.get())?;
    } else {
        ctx.out(&human(&r))?;
    }
    match r.acquired.or(r.renewed).or(r.released) {
        Some(false) => Err(Failure::Refused(format!(
            "{} of {} refused: {}",
            r.op,
            r.name,
            r.reason.as_deref().unwrap_or("no reason given")
        ))),
        _ => Ok(()),
    }
}

fn human(r: &LockResult) -> String {
    let granted = r.acquired.or(r.renewed).or(r.released);
    if r.op == "get" || granted == Some(false) {
        let holders = r.holders.clone().unwrap_or_default();
        if holders.is_empty() {
            return format!("{}: not held\n", r.name);
        }
        let mut t = Table::new(["SLOT", "OWNER", "TOKEN", "SINCE", "EXPIRES"]);
        for h in holders {
            t.row([
                h.slot.to_string(),
                h.owner.unwrap_or_default(),
                h.token.to_string(),
                h.since.unwrap_or_default(),
                h.expires_at.unwrap_or_default(),
            ]);
        }
        return t.render();
    }
    if r.op == "release" {
        return format!("released {}\n", r.name);
    }
    record(&[
        ("name", r.name.clone()),
        ("slot", r.slot.map(|s| s.to_string()).unwrap_or_default()),
        ("token", r.token.map(|t| t.to_string()).unwrap_or_default()),
        ("owner", r.owner.clone().unwrap_or_default()),
        ("expires", r.expires_at.clone().unwrap_or_default()),
        ("already", r.already.unwrap_or(false).to_string()),
    ])
}
