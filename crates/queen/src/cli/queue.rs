//! `push`, `pop`, `ack` and `dlq` (list, replay, purge).

use std::io::{BufRead, BufReader, IsTerminal};
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use queen_client::{
    AckResult, Broker, DlqPage, DlqQuery, DlqReplay, Message, PopRequest, PushResult, PushStatus,
    QueueOptions, ReplayResult, ReplayTarget, QUEUE_MODE,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::table::{clip, Table};
use super::{decode, payload, Ctx, Failure, Outcome};

/// Results of a push listed one by one for people; past this, a summary only.
const LISTED: usize = 20;

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("input").required(true).args(["payloads", "file"])))]
pub(crate) struct PushArgs {
    /// The queue (created by its first push).
    queue: String,
    /// JSON payloads, one message each (quote them for the shell: '{"order":1}').
    #[arg(value_name = "JSON")]
    payloads: Vec<String>,
    /// A file of JSON lines, one message per non-empty line; "-" reads stdin.
    #[arg(long, short, value_name = "FILE", conflicts_with = "payloads")]
    file: Option<PathBuf>,
    /// The partition (the broker's "Default" otherwise).
    #[arg(long, short)]
    partition: Option<String>,
    /// Messages per request.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
    /// The transaction id (the dedup key) of a single message; the broker mints one otherwise.
    #[arg(long, value_name = "ID", conflicts_with = "file")]
    transaction_id: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PushWire<'a> {
    queue: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<&'a str>,
    payload: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    transaction_id: Option<&'a str>,
}

/// What a push has done so far.
#[derive(Default)]
struct Tally {
    sent: u64,
    queued: u64,
    duplicate: u64,
    buffered: u64,
    failed: u64,
    /// The first results, for the table.
    listed: Vec<PushResult>,
    /// The first failures, for stderr when there is no table.
    errors: Vec<String>,
}

impl Tally {
    fn summary(&self, queue: &str) -> String {
        let mut parts = vec![format!("{} queued", self.queued)];
        if self.duplicate > 0 {
            parts.push(format!("{} duplicate", self.duplicate));
        }
        if self.buffered > 0 {
            parts.push(format!("{} buffered", self.buffered));
        }
        if self.failed > 0 {
            parts.push(format!("{} failed", self.failed));
        }
        let noun = if self.sent == 1 { "message" } else { "messages" };
        format!("pushed {} {noun} to {queue}: {}", self.sent, parts.join(", "))
    }
}

/// Sends one batch; prints its answer with `--json`.
async fn send(
    ctx: &Ctx,
    a: &PushArgs,
    batch: &[Box<RawValue>],
    transaction_id: Option<&str>,
    tally: &mut Tally,
) -> Outcome {
    if batch.is_empty() {
        return Ok(());
    }
    let items: Vec<PushWire<'_>> = batch
        .iter()
        .map(|p| PushWire { queue: &a.queue, partition: a.partition.as_deref(), payload: p, transaction_id })
        .collect();
    let body =
        serde_json::to_string(&items).map_err(|e| Failure::Usage(format!("encoding the push: {e}")))?;
    let answer = ctx.broker.push(&body).await.map_err(|e| {
        let mut failure = Failure::from(e);
        if tally.sent > 0 {
            if let Failure::Broker(m) = &mut failure {
                m.push_str(&format!(" (after {} messages were accepted)", tally.sent));
            }
        }
        failure
    })?;
    if ctx.json {
        ctx.out_json(answer.as_str())?;
    }
    let results: Vec<PushResult> = decode(answer.as_str(), "push")?;
    for r in results {
        tally.sent += 1;
        match r.status {
            PushStatus::Queued => tally.queued += 1,
            PushStatus::Duplicate => tally.duplicate += 1,
            PushStatus::Buffered => tally.buffered += 1,
            PushStatus::Failed => {
                tally.failed += 1;
                if tally.errors.len() < 5 {
                    let why = r.error.clone().unwrap_or_else(|| "no reason given".into());
                    tally.errors.push(format!("item {}: {why}", tally.sent - 1));
                }
            }
        }
        if tally.listed.len() <= LISTED {
            tally.listed.push(r);
        }
    }
    Ok(())
}

/// A progress bar on stderr when it is a terminal, hidden otherwise.
fn progress(total_bytes: Option<u64>) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    match total_bytes {
        Some(len) => {
            let bar = ProgressBar::new(len);
            if let Ok(style) =
                ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg} ({elapsed}, eta {eta})")
            {
                bar.set_style(style);
            }
            bar
        }
        None => {
            let bar = ProgressBar::new_spinner();
            if let Ok(style) = ProgressStyle::with_template("{spinner} {bytes} read, {msg} ({elapsed})") {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        }
    }
}

pub(crate) async fn push(ctx: &Ctx, a: PushArgs) -> Outcome {
    let mut tally = Tally::default();
    match &a.file {
        None => {
            if a.transaction_id.is_some() && a.payloads.len() != 1 {
                return Err(Failure::Usage("--transaction-id needs exactly one JSON payload".into()));
            }
            let payloads = a
                .payloads
                .iter()
                .enumerate()
                .map(|(i, p)| payload(p, &format!("payload {}", i + 1)))
                .collect::<Result<Vec<_>, _>>()?;
            for chunk in payloads.chunks(a.batch as usize) {
                send(ctx, &a, chunk, a.transaction_id.as_deref(), &mut tally).await?;
            }
        }
        Some(path) => {
            let (reader, len): (Box<dyn BufRead>, Option<u64>) = if path.as_os_str() == "-" {
                (Box::new(std::io::stdin().lock()), None)
            } else {
                let file = std::fs::File::open(path)
                    .map_err(|e| Failure::Usage(format!("cannot open {}: {e}", path.display())))?;
                let len = file.metadata().ok().map(|m| m.len());
                (Box::new(BufReader::new(file)), len)
            };
            let bar = progress(len);
            let result = push_lines(ctx, &a, reader, &bar, &mut tally).await;
            bar.finish_and_clear();
            result?;
        }
    }
    if !ctx.json {
        let mut text = String::new();
        if tally.listed.len() <= LISTED {
            let mut t = Table::new(["#", "TRANSACTION ID", "MESSAGE ID", "STATUS", "ERROR"]);
            for r in &tally.listed {
                t.row([
                    r.index.to_string(),
                    r.transaction_id.clone(),
                    r.message_id.clone().unwrap_or_default(),
                    format!("{:?}", r.status).to_lowercase(),
                    r.error.clone().unwrap_or_default(),
                ]);
            }
            text.push_str(&t.render());
        } else {
            for e in &tally.errors {
                eprintln!("queen: {e}");
            }
        }
        text.push_str(&tally.summary(&a.queue));
        text.push('\n');
        ctx.out(&text)?;
    }
    if tally.failed > 0 {
        return Err(Failure::Refused(format!("{} of {} items failed", tally.failed, tally.sent)));
    }
    Ok(())
}

async fn push_lines(
    ctx: &Ctx,
    a: &PushArgs,
    mut reader: Box<dyn BufRead>,
    bar: &ProgressBar,
    tally: &mut Tally,
) -> Outcome {
    let mut batch = Vec::with_capacity(a.batch as usize);
    let mut line = String::new();
    let mut number = 0u64;
    loop {
        line.clear();
        let n = reader.read_line(&mut line).map_err(|e| Failure::Usage(format!("reading the input: {e}")))?;
        if n == 0 {
            break;
        }
        number += 1;
        bar.inc(n as u64);
        if line.trim().is_empty() {
            continue;
        }
        batch.push(payload(&line, &format!("line {number}")).map_err(|f| match f {
            Failure::Usage(m) if tally.sent > 0 => {
                Failure::Usage(format!("{m} ({} messages before it were pushed)", tally.sent))
            }
            other => other,
        })?);
        if batch.len() == a.batch as usize {
            send(ctx, a, &batch, None, tally).await?;
            batch.clear();
            bar.set_message(format!("{} messages", tally.sent));
        }
    }
    send(ctx, a, &batch, None, tally).await
}

#[derive(Args, Debug)]
pub(crate) struct PopArgs {
    /// The queue (omit it with --namespace or --task to pop across the queues carrying them).
    #[arg(required_unless_present_any = ["namespace", "task"])]
    queue: Option<String>,
    /// Pop from the queues of this namespace (higher priority first).
    #[arg(long, conflicts_with = "queue")]
    namespace: Option<String>,
    /// Pop from the queues of this task.
    #[arg(long, conflicts_with = "queue")]
    task: Option<String>,
    /// Only this partition (any free one otherwise).
    #[arg(long, short)]
    partition: Option<String>,
    /// Pop as this consumer group (queue mode otherwise).
    #[arg(long, short)]
    group: Option<String>,
    /// At most this many messages.
    #[arg(long, short, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    batch: u32,
    /// Long-poll: wait up to SECS for a message (0 answers at once).
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    wait: u64,
    /// Commit at delivery: no lease, nothing to ack.
    #[arg(long)]
    auto_ack: bool,
    /// Lease seconds of this pop (the queue's leaseTime otherwise).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u32).range(1..))]
    lease_seconds: Option<u32>,
    /// Partitions one pop may claim.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    partitions: u32,
    /// Where a new consumer group starts: all, new, or an RFC 3339 timestamp.
    #[arg(long, value_name = "FROM", requires = "group")]
    subscription: Option<String>,
}

#[derive(Deserialize)]
struct PopAnswer {
    #[serde(default)]
    messages: Vec<Message>,
}

pub(crate) async fn pop(ctx: &Ctx, a: PopArgs) -> Outcome {
    let (subscription_mode, subscription_from) = match a.subscription.as_deref() {
        None => (None, None),
        Some(m @ ("all" | "new")) => (Some(m.to_owned()), None),
        Some(ts) => (None, Some(ts.to_owned())),
    };
    let target = a.queue.clone().unwrap_or_else(|| {
        let tags: Vec<String> = [
            a.namespace.as_ref().map(|n| format!("namespace {n}")),
            a.task.as_ref().map(|t| format!("task {t}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        tags.join(", ")
    });
    let req = PopRequest {
        queue: a.queue.clone().unwrap_or_default(),
        partition: a.partition,
        consumer_group: a.group,
        batch: a.batch.min(i32::MAX as u32) as i32,
        partitions: a.partitions.min(i32::MAX as u32) as i32,
        lease_seconds: a.lease_seconds.map(|s| s.min(i32::MAX as u32) as i32),
        auto_ack: a.auto_ack,
        subscription_mode,
        subscription_from,
        namespace: a.namespace,
        task: a.task,
    };
    let wait = (a.wait > 0).then(|| Duration::from_secs(a.wait));
    let answer = ctx.broker.pop(&req, wait).await?;
    if ctx.json {
        return ctx.out_json(answer.as_ref().map_or(r#"{"messages":[]}"#, |j| j.as_str()));
    }
    let messages = match answer {
        Some(json) => decode::<PopAnswer>(json.as_str(), "pop")?.messages,
        None => Vec::new(),
    };
    if messages.is_empty() {
        return ctx.out(&format!("no messages in {target}\n"));
    }
    let mut t = Table::new(["PARTITION", "PARTITION ID", "TRANSACTION ID", "LEASE ID", "DATA"]);
    for m in &messages {
        t.row([
            m.partition.clone(),
            m.partition_id.clone(),
            m.transaction_id.clone(),
            m.lease_id.clone().unwrap_or_else(|| "-".into()),
            clip(m.data.get(), 60),
        ]);
    }
    let mut text = t.render();
    if !a.auto_ack {
        text.push_str("ack with: queen ack <PARTITION ID> <TRANSACTION ID> --lease <LEASE ID>");
        if let Some(g) = messages[0].group() {
            text.push_str(&format!(" --group {g}"));
        }
        text.push('\n');
    }
    ctx.out(&text)
}

/// How `ack` settles the message.
#[derive(ValueEnum, Clone, Copy, Debug)]
pub(crate) enum AckStatus {
    /// Done: the cursor moves past it.
    Completed,
    /// Failed: charges the retry budget, then redelivers or dead-letters.
    Failed,
    /// Redeliver without charging the retry budget.
    Retry,
    /// Dead-letter at once.
    Dlq,
}

impl AckStatus {
    fn wire(self) -> &'static str {
        match self {
            AckStatus::Completed => "completed",
            AckStatus::Failed => "failed",
            AckStatus::Retry => "retry",
            AckStatus::Dlq => "dlq",
        }
    }
}

#[derive(Args, Debug)]
pub(crate) struct AckArgs {
    /// The partition id of the message (a UUID, from the pop).
    partition_id: String,
    /// The transaction id of the message.
    transaction_id: String,
    /// The lease it was delivered under (fences a stale ack).
    #[arg(long, value_name = "LEASE ID")]
    lease: Option<String>,
    /// The consumer group it was popped by (queue mode otherwise).
    #[arg(long, short)]
    group: Option<String>,
    /// How to settle it.
    #[arg(long, value_enum, default_value_t = AckStatus::Completed)]
    status: AckStatus,
    /// The error text (kept with a dead letter).
    #[arg(long, value_name = "TEXT")]
    error: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AckWire<'a> {
    transaction_id: &'a str,
    partition_id: &'a str,
    status: &'static str,
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_id: Option<&'a str>,
    consumer_group: Option<&'a str>,
}

pub(crate) async fn ack(ctx: &Ctx, a: AckArgs) -> Outcome {
    let item = AckWire {
        transaction_id: &a.transaction_id,
        partition_id: &a.partition_id,
        status: a.status.wire(),
        error: a.error.as_deref(),
        lease_id: a.lease.as_deref(),
        consumer_group: a.group.as_deref(),
    };
    let body =
        serde_json::to_string(&[item]).map_err(|e| Failure::Usage(format!("encoding the ack: {e}")))?;
    let answer = ctx.broker.ack(&body, None).await?;
    let raw: Vec<Box<RawValue>> = decode(answer.as_str(), "ack")?;
    let first = raw.first().ok_or_else(|| Failure::Broker("the ack answered no result".into()))?;
    let result: AckResult = decode(first.get(), "ack")?;
    if ctx.json {
        ctx.out_json(first.get())?;
    } else if result.success {
        let mut notes = Vec::new();
        if result.noop {
            notes.push("already done");
        }
        if result.dlq {
            notes.push("dead-lettered");
        }
        if result.lease_released {
            notes.push("lease released");
        }
        let notes = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join(", ")) };
        ctx.out(&format!("acked {} as {}{notes}\n", result.transaction_id, a.status.wire()))?;
    }
    if !result.success {
        let why = result.error.unwrap_or_else(|| "no reason given".into());
        return Err(Failure::Refused(format!("ack of {} refused: {why}", result.transaction_id)));
    }
    Ok(())
}

/// `queen dlq <queue>` lists; `queen dlq replay|purge` act on records.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct DlqCommand {
    #[command(subcommand)]
    action: Option<DlqAction>,
    #[command(flatten)]
    list: DlqArgs,
}

#[derive(Subcommand, Debug)]
pub(crate) enum DlqAction {
    /// Replay one dead-letter record (its DLQ ID in the listing) as a new
    /// message with the transaction id dlq:<id>; exit 3 when that message
    /// exists already (the record is kept).
    Replay(ReplayArgs),
    /// Delete a queue's dead-letter records (or one consumer group's).
    Purge(PurgeArgs),
}

#[derive(Args, Debug)]
pub(crate) struct ReplayArgs {
    /// The record's id (DLQ ID in `queen dlq <queue>`).
    #[arg(value_parser = clap::value_parser!(i64).range(1..))]
    id: i64,
    /// Replay into this queue (created if missing) instead of the record's own.
    #[arg(long)]
    queue: Option<String>,
    /// Replay into this partition (created if missing); default: the record's partition name.
    #[arg(long)]
    partition: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct PurgeArgs {
    /// The queue whose dead-letter records go.
    #[arg(long)]
    queue: String,
    /// Only this consumer group's records.
    #[arg(long)]
    consumer_group: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct DlqArgs {
    /// The queue.
    #[arg(required = true)]
    queue: Option<String>,
    /// Only this consumer group's dead letters.
    #[arg(long, short)]
    group: Option<String>,
    /// Only this partition's.
    #[arg(long, short)]
    partition: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    limit: u32,
    /// Skip this many (newest failure first).
    #[arg(long, default_value_t = 0)]
    offset: u32,
}

pub(crate) async fn dlq(ctx: &Ctx, c: DlqCommand) -> Outcome {
    match c.action {
        Some(DlqAction::Replay(a)) => dlq_replay(ctx, a).await,
        Some(DlqAction::Purge(a)) => dlq_purge(ctx, a).await,
        None => dlq_list(ctx, c.list).await,
    }
}

async fn dlq_replay(ctx: &Ctx, a: ReplayArgs) -> Outcome {
    let target = ReplayTarget { queue: a.queue, partition: a.partition };
    let answer = ctx.broker.dlq_replay(a.id, &target).await?;
    let replay: DlqReplay = decode(answer.as_str(), "dlq replay")?;
    if ctx.json {
        ctx.out_json(answer.as_str())?;
    }
    let lane = format!("{}/{}", replay.queue, replay.partition);
    if replay.result == ReplayResult::Duplicate {
        return Err(Failure::Refused(format!(
            "dead letter {} not replayed: {} is in {lane} already; the record is kept",
            replay.dlq_id, replay.replayed_as
        )));
    }
    if ctx.json {
        return Ok(());
    }
    let group = Some(replay.consumer_group.as_str()).filter(|g| *g != QUEUE_MODE).unwrap_or("queue mode");
    ctx.out(&format!(
        "replayed dead letter {} ({}, {group}) to {lane} as {}\n",
        replay.dlq_id, replay.original_transaction_id, replay.replayed_as
    ))
}

async fn dlq_purge(ctx: &Ctx, a: PurgeArgs) -> Outcome {
    let answer = ctx.broker.dlq_purge(&a.queue, a.consumer_group.as_deref()).await?;
    if ctx.json {
        return ctx.out_json(answer.as_str());
    }
    #[derive(Deserialize)]
    struct Purged {
        deleted: u64,
    }
    let purged: Purged = decode(answer.as_str(), "dlq purge")?;
    let whose = a.consumer_group.map(|g| format!(" of group {g}")).unwrap_or_default();
    ctx.out(&format!("deleted {} dead letters{whose} in {}\n", purged.deleted, a.queue))
}

async fn dlq_list(ctx: &Ctx, a: DlqArgs) -> Outcome {
    let queue = a.queue.unwrap_or_default();
    let query = DlqQuery {
        queue: Some(queue.clone()),
        consumer_group: a.group,
        partition: a.partition,
        from: None,
        to: None,
        limit: a.limit.min(i32::MAX as u32) as i32,
        offset: a.offset.min(i32::MAX as u32) as i32,
    };
    let answer = ctx.broker.dlq(&query).await?;
    if ctx.json {
        return ctx.out_json(answer.as_str());
    }
    let page: DlqPage = decode(answer.as_str(), "dlq")?;
    if page.messages.is_empty() {
        return ctx.out(&format!("no dead letters in {queue}\n"));
    }
    let mut t = Table::new([
        "DLQ ID",
        "FAILED AT",
        "TRANSACTION ID",
        "PARTITION",
        "GROUP",
        "RETRIES",
        "ERROR",
        "DATA",
    ]);
    for d in &page.messages {
        t.row([
            d.dlq_id.map(|id| id.to_string()).unwrap_or_default(),
            d.failed_at.clone().unwrap_or_default(),
            d.transaction_id.clone(),
            d.partition.clone().unwrap_or_default(),
            d.consumer_group.clone().filter(|g| g != QUEUE_MODE).unwrap_or_else(|| "-".into()),
            d.retry_count.to_string(),
            clip(d.error_message.as_deref().unwrap_or(""), 40),
            clip(d.data.get(), 40),
        ]);
    }
    let mut text = t.render();
    text.push_str(&format!("{} of {} dead letters in {queue}\n", page.messages.len(), page.total));
    ctx.out(&text)
}

#[derive(Args, Debug)]
pub(crate) struct ConfigureArgs {
    /// The queue (created if it does not exist).
    queue: String,
    /// Reset every option not given here to its default (merge otherwise).
    #[arg(long)]
    replace: bool,
    /// Tag the queue with a namespace (pops by namespace span such queues).
    #[arg(long)]
    namespace: Option<String>,
    /// Tag the queue with a task.
    #[arg(long)]
    task: Option<String>,
    /// Seconds a pop's lease lasts.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(i64).range(1..))]
    lease_time: Option<i64>,
    /// Failed deliveries before the head message is dead-lettered.
    #[arg(long, value_parser = clap::value_parser!(i64).range(0..))]
    retry_limit: Option<i64>,
    /// Milliseconds a nacked (or lease-expired) batch waits before redelivery.
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(i64).range(0..))]
    retry_delay_ms: Option<i64>,
    /// Seconds after which an undelivered message is skipped (0: never).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(i64).range(0..))]
    ttl: Option<i64>,
    /// Backlog limit (0: none).
    #[arg(long, value_parser = clap::value_parser!(i64).range(0..))]
    max_size: Option<i64>,
    /// Order among the queues of a namespace or task pop (higher first).
    #[arg(long, allow_negative_numbers = true)]
    priority: Option<i64>,
    /// Seconds a message stays hidden after its push.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(i64).range(0..))]
    delayed_processing: Option<i64>,
    /// Seconds a partition must be quiet before it is delivered.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(i64).range(0..))]
    window_buffer: Option<i64>,
    /// Delete messages older than this, consumed or not (turns retention on).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(i64).range(0..))]
    retention_seconds: Option<i64>,
    /// Delete messages every group consumed, after this long (turns retention on).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(i64).range(0..))]
    completed_retention_seconds: Option<i64>,
    /// Delete messages still unconsumed after this long (0: never).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(i64).range(0..))]
    max_wait_seconds: Option<i64>,
    /// Encrypt payloads at rest (every broker needs QUEEN_ENCRYPTION_KEY).
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    encrypt: Option<bool>,
    /// Keep exhausted messages in the dead-letter queue.
    #[arg(long, value_name = "BOOL")]
    dead_letter_queue: Option<bool>,
    /// How long a transactionId is remembered per partition, in seconds.
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(i64).range(0..))]
    dedup_window_seconds: Option<i64>,
    /// Milliseconds a long poll for a batch may hold an under-full batch to fill it (0 to 60000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(i64).range(0..=60_000))]
    min_pop_wait_ms: Option<i64>,
}

pub(crate) async fn configure(ctx: &Ctx, a: ConfigureArgs) -> Outcome {
    let retention = a.retention_seconds.is_some() || a.completed_retention_seconds.is_some();
    let options = QueueOptions {
        lease_time: a.lease_time,
        retry_limit: a.retry_limit,
        retry_delay: a.retry_delay_ms,
        ttl: a.ttl,
        max_size: a.max_size,
        priority: a.priority,
        delayed_processing: a.delayed_processing,
        window_buffer: a.window_buffer,
        retention_enabled: retention.then_some(true),
        retention_seconds: a.retention_seconds,
        completed_retention_seconds: a.completed_retention_seconds,
        max_wait_time_seconds: a.max_wait_seconds,
        encryption_enabled: a.encrypt,
        dead_letter_queue: a.dead_letter_queue,
        dedup_window_seconds: a.dedup_window_seconds,
        min_pop_wait_time: a.min_pop_wait_ms,
        ..QueueOptions::default()
    };
    let body = serde_json::json!({
        "queue": a.queue, "namespace": a.namespace, "task": a.task,
        "mode": if a.replace { "replace" } else { "merge" }, "options": options,
    });
    let answer = ctx.broker.configure(&body.to_string()).await?;
    if ctx.json {
        return ctx.out_json(answer.as_str());
    }
    let v: serde_json::Value = decode(answer.as_str(), "configure")?;
    let mut fields: Vec<(&str, String)> = vec![("queue", a.queue.clone())];
    if let Some(o) = v["options"].as_object() {
        for (k, val) in o {
            fields.push((k.as_str(), val.to_string()));
        }
    }
    ctx.out(&super::table::record(&fields))
}
