//! `timer schedule|cancel|peek|list`: scheduled messages. A cancel that
//! found nothing pending (absent, too_late) is printed, then exit 3.

use base64::Engine as _;
use clap::Subcommand;
use queen_client::{Broker, PendingTimer, TimerPage, TimerResult};
use serde_json::json;

use super::table::{clip, record, Table};
use super::{decode, payload, Ctx, Failure, Outcome};

#[derive(Subcommand, Debug)]
pub(crate) enum TimerCommand {
    /// Schedule (or reschedule) a message: PAYLOAD (JSON) goes to QUEUE after --delay-ms.
    Schedule {
        /// The queue the message goes to.
        queue: String,
        /// The timer's name in its queue.
        key: String,
        /// The message payload, as JSON.
        payload: String,
        /// Milliseconds from now (negative fires at once).
        #[arg(long, allow_negative_numbers = true)]
        delay_ms: i64,
        /// The partition (Default when absent).
        #[arg(long)]
        partition: Option<String>,
        /// The fired message's transactionId (minted when absent).
        #[arg(long)]
        txn: Option<String>,
    },
    /// Cancel a pending timer.
    Cancel {
        /// The timer's queue.
        queue: String,
        /// The timer's name.
        key: String,
    },
    /// Show a pending timer with its payload.
    Peek {
        /// The timer's queue.
        queue: String,
        /// The timer's name.
        key: String,
    },
    /// List a queue's pending timers, in key order.
    List {
        /// The queue.
        queue: String,
        /// Start strictly after this key (the nextAfter of the previous page).
        #[arg(long)]
        after: Option<String>,
        /// Timers per page (clamped to 1..=1000; 100 by default).
        #[arg(long)]
        limit: Option<u32>,
    },
}

pub(crate) async fn run(ctx: &Ctx, command: TimerCommand) -> Outcome {
    match command {
        TimerCommand::Schedule { queue, key, payload: text, delay_ms, partition, txn } => {
            let data = payload(&text, "the payload")?;
            let mut op = json!({"op": "schedule", "queue": queue, "timerKey": key, "delayMs": delay_ms,
                "payload": base64::engine::general_purpose::STANDARD.encode(data.get())});
            if let Some(p) = partition {
                op["partition"] = json!(p);
            }
            if let Some(t) = txn {
                op["txn"] = json!(t);
            }
            let json = ctx.broker.timers(&json!({ "operations": [op] }).to_string()).await?;
            #[derive(serde::Deserialize)]
            struct Envelope {
                results: Vec<Box<serde_json::value::RawValue>>,
            }
            let e: Envelope = decode(json.as_str(), "timers")?;
            let raw = e
                .results
                .into_iter()
                .next()
                .ok_or_else(|| Failure::Broker("timers answered no result".into()))?;
            if ctx.json {
                return ctx.out_json(raw.get());
            }
            let r: TimerResult = decode(raw.get(), "timers")?;
            ctx.out(&record(&[
                ("status", r.status),
                ("queue", r.queue.unwrap_or_default()),
                ("key", r.timer_key.unwrap_or_default()),
                ("deliverAt", r.deliver_at.unwrap_or_default()),
                ("messageId", r.message_id.unwrap_or_default()),
                ("txn", r.txn.unwrap_or_default()),
            ]))
        }
        TimerCommand::Cancel { queue, key } => {
            let json = ctx.broker.timer_cancel(&queue, &key, None).await?;
            let r: TimerResult = decode(json.as_str(), "timer cancel")?;
            if ctx.json {
                ctx.out_json(json.as_str())?;
            } else if r.ok {
                ctx.out(&format!("cancelled {queue}/{key}\n"))?;
            }
            if r.ok {
                Ok(())
            } else {
                Err(Failure::Refused(format!("{queue}/{key} not cancelled: {}", r.status)))
            }
        }
        TimerCommand::Peek { queue, key } => {
            let json = ctx.broker.timer_peek(&queue, &key).await?;
            if ctx.json {
                return ctx.out_json(json.as_str());
            }
            #[derive(serde::Deserialize)]
            struct Found {
                found: bool,
            }
            if !decode::<Found>(json.as_str(), "timer peek")?.found {
                return ctx.out(&format!("{queue}/{key}: not pending\n"));
            }
            let t: PendingTimer = decode(json.as_str(), "timer peek")?;
            ctx.out(&record(&[
                ("queue", t.queue),
                ("key", t.timer_key),
                ("partition", t.partition),
                ("deliverAt", t.deliver_at),
                ("messageId", t.message_id),
                ("txn", t.txn),
                ("attempts", t.attempts.to_string()),
                ("payload", t.payload.map(|p| p.get().to_owned()).unwrap_or_default()),
            ]))
        }
        TimerCommand::List { queue, after, limit } => {
            let json = ctx.broker.timer_list(&queue, after.as_deref(), limit).await?;
            if ctx.json {
                return ctx.out_json(json.as_str());
            }
            let page: TimerPage = decode(json.as_str(), "timer list")?;
            let mut t = Table::new(["KEY", "DELIVER AT", "PARTITION", "TXN"]);
            for r in &page.rows {
                t.row([clip(&r.timer_key, 60), r.deliver_at.clone(), r.partition.clone(), r.txn.clone()]);
            }
            let mut text = t.render();
            match (&page.next_after, page.truncated) {
                (Some(next), true) => {
                    text.push_str(&format!("{} timers; more follow: --after '{next}'\n", page.rows.len()))
                }
                _ => text.push_str(&format!("{} timers\n", page.rows.len())),
            }
            ctx.out(&text)
        }
    }
}
