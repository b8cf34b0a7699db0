//! `read QUEUE`: a partition's messages from an offset on, through
//! `POST /api/v1/fetch`. Takes no lease and moves no cursor.

use clap::Args;
use queen_client::{Broker, Fetched};
use serde_json::json;

use super::table::{clip, Table};
use super::{decode, Ctx, Failure, Outcome};

#[derive(Args, Debug)]
pub(crate) struct ReadArgs {
    /// The queue.
    queue: String,
    /// The partition.
    #[arg(long, default_value = "Default")]
    partition: String,
    /// The first offset to read (offsets count from 0 in push order).
    #[arg(long, default_value_t = 0)]
    offset: i64,
    /// Byte budget of the records.
    #[arg(long)]
    max_bytes: Option<i64>,
}

pub(crate) async fn run(ctx: &Ctx, a: ReadArgs) -> Outcome {
    let mut entry = json!({"queue": a.queue, "partition": a.partition, "offset": a.offset});
    if let Some(m) = a.max_bytes {
        entry["maxBytes"] = json!(m);
    }
    let json = ctx.broker.fetch(&json!({ "entries": [entry] }).to_string()).await?;
    if ctx.json {
        return ctx.out_json(json.as_str());
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        entries: Vec<Fetched>,
    }
    let answer: Answer = decode(json.as_str(), "fetch")?;
    let e =
        answer.entries.into_iter().next().ok_or_else(|| Failure::Broker("fetch answered no entry".into()))?;
    if let Some(error) = &e.error {
        return Err(Failure::Refused(format!(
            "{}/{} at offset {}: {error} (log {}..{})",
            a.queue, a.partition, a.offset, e.log_start_offset, e.high_watermark
        )));
    }
    let mut t = Table::new(["OFFSET", "TRANSACTION ID", "TS", "PAYLOAD"]);
    for r in &e.records {
        t.row([r.offset.to_string(), r.transaction_id.clone(), r.ts.clone(), clip(r.payload.get(), 80)]);
    }
    let mut text = t.render();
    let next = e.records.last().map_or(a.offset, |r| r.offset + 1);
    text.push_str(&format!(
        "{} records; log {}..{}; next offset {next}\n",
        e.records.len(),
        e.log_start_offset,
        e.high_watermark
    ));
    ctx.out(&text)
}
