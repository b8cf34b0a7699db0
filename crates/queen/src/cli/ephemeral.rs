//! `ephemeral push|pop|ack|depth|configure|reset|delete`: queues held in the
//! owning broker's memory (`/api/v1/ephemeral/*`).

use std::time::Duration;

use clap::{Args, Subcommand};
use queen_client::{Broker, EphemeralPop, EphemeralVerb};
use serde_json::{json, Value};

use super::table::{clip, Table};
use super::{decode, payload, Ctx, Outcome};

#[derive(Subcommand, Debug)]
pub(crate) enum EphemeralCommand {
    /// Declare a queue's bounds and leases.
    Configure(ConfigureArgs),
    /// Push JSON payloads (all or none).
    Push(PushArgs),
    /// Pop messages (prints the ids to ack).
    Pop(PopArgs),
    /// Ack messages by id: completed, or --failed to redeliver.
    Ack(AckArgs),
    /// Show a queue's depth per partition and group.
    Depth(QueueArg),
    /// Drop every message and lease; keep the options.
    Reset(QueueArg),
    /// Delete the queue and its declared options.
    Delete(QueueArg),
}

#[derive(Args, Debug)]
pub(crate) struct QueueArg {
    /// The queue.
    queue: String,
}

#[derive(Args, Debug)]
pub(crate) struct ConfigureArgs {
    /// The queue.
    queue: String,
    /// Payload bytes the queue may hold.
    #[arg(long)]
    max_bytes: Option<u64>,
    /// Messages the queue may hold.
    #[arg(long)]
    max_length: Option<u64>,
    /// When full: reject (429) or dropOldest.
    #[arg(long, value_parser = ["reject", "dropOldest"])]
    policy: Option<String>,
    /// Undelivered messages older than this are dropped.
    #[arg(long, value_name = "SECS")]
    ttl_seconds: Option<u64>,
    /// Lease of a popped message.
    #[arg(long, value_name = "SECS")]
    lease_seconds: Option<u64>,
    /// Deliveries before a message is dropped.
    #[arg(long)]
    retry_limit: Option<u32>,
}

#[derive(Args, Debug)]
pub(crate) struct PushArgs {
    /// The queue.
    queue: String,
    /// JSON payloads.
    #[arg(required = true)]
    payloads: Vec<String>,
    /// The partition (Default otherwise).
    #[arg(long, short)]
    partition: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct PopArgs {
    /// The queue.
    queue: String,
    /// Only this partition.
    #[arg(long, short)]
    partition: Option<String>,
    /// Pop as this group (queue mode otherwise).
    #[arg(long, short)]
    group: Option<String>,
    /// At most this many messages.
    #[arg(long, short, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
    /// Long-poll up to SECS.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    wait: u64,
    /// Commit at delivery: nothing to ack.
    #[arg(long)]
    auto_ack: bool,
}

#[derive(Args, Debug)]
pub(crate) struct AckArgs {
    /// The queue.
    queue: String,
    /// Message ids.
    #[arg(required = true)]
    ids: Vec<String>,
    /// The group the messages were popped as.
    #[arg(long, short)]
    group: Option<String>,
    /// Nack: redeliver (until the retry limit).
    #[arg(long)]
    failed: bool,
}

pub(crate) async fn run(ctx: &Ctx, c: EphemeralCommand) -> Outcome {
    let answer = match c {
        EphemeralCommand::Configure(a) => {
            let mut options = serde_json::Map::new();
            let mut put = |k: &str, v: Option<Value>| {
                if let Some(v) = v {
                    options.insert(k.to_owned(), v);
                }
            };
            put("maxBytes", a.max_bytes.map(Value::from));
            put("maxLength", a.max_length.map(Value::from));
            put("policy", a.policy.map(Value::from));
            put("ttlSeconds", a.ttl_seconds.map(Value::from));
            put("leaseSeconds", a.lease_seconds.map(Value::from));
            put("retryLimit", a.retry_limit.map(Value::from));
            let body = json!({"queue": a.queue, "options": options}).to_string();
            ctx.broker.ephemeral(EphemeralVerb::Configure, &body).await?
        }
        EphemeralCommand::Push(a) => {
            let messages: Vec<Value> = a
                .payloads
                .iter()
                .map(|p| payload(p, "payload").map(|raw| json!({"payload": raw})))
                .collect::<Result<_, _>>()?;
            let mut body = json!({"queue": a.queue, "messages": messages});
            if let Some(p) = a.partition {
                body["partition"] = json!(p);
            }
            ctx.broker.ephemeral(EphemeralVerb::Push, &body.to_string()).await?
        }
        EphemeralCommand::Pop(a) => {
            let req = EphemeralPop {
                queue: a.queue.clone(),
                partition: a.partition,
                group: a.group,
                batch: a.batch as usize,
                auto_ack: a.auto_ack,
                wait: (a.wait > 0).then(|| Duration::from_secs(a.wait)),
            };
            let answer = ctx.broker.ephemeral_pop(&req).await?;
            if !ctx.json {
                let v: Value = decode(answer.as_str(), "ephemeral pop")?;
                let messages = v["messages"].as_array().cloned().unwrap_or_default();
                if messages.is_empty() {
                    return ctx.out(&format!("no messages in {}\n", a.queue));
                }
                let mut t = Table::new(["ID", "PARTITION", "ATTEMPTS", "PAYLOAD"]);
                for m in &messages {
                    t.row([
                        m["id"].as_str().unwrap_or_default().to_owned(),
                        m["partition"].as_str().unwrap_or_default().to_owned(),
                        m["attempts"].to_string(),
                        clip(&m["payload"].to_string(), 60),
                    ]);
                }
                return ctx.out(&t.render());
            }
            answer
        }
        EphemeralCommand::Ack(a) => {
            let status = if a.failed { "failed" } else { "completed" };
            let acks: Vec<Value> = a.ids.iter().map(|id| json!({"id": id, "status": status})).collect();
            let body = json!({"queue": a.queue, "group": a.group, "acks": acks}).to_string();
            ctx.broker.ephemeral(EphemeralVerb::Ack, &body).await?
        }
        EphemeralCommand::Depth(a) => ctx.broker.ephemeral_depth(&a.queue).await?,
        EphemeralCommand::Reset(a) => {
            ctx.broker.ephemeral(EphemeralVerb::Reset, &json!({"queue": a.queue}).to_string()).await?
        }
        EphemeralCommand::Delete(a) => ctx.broker.ephemeral_delete(&a.queue).await?,
    };
    // The answers are small JSON objects: printed as they are, in both modes.
    ctx.out_json(answer.as_str())
}
