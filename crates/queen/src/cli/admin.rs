//! `queues` and `status`: the operator read routes, through
//! [`queen_client::HttpBroker::get_json`].

use serde_json::Value;

use super::table::{record, Table};
use super::{decode, Ctx, Outcome};

/// A field as display text: strings bare, numbers and the rest as JSON, `-` when missing.
fn text(v: &Value, path: &[&str]) -> String {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    match cur {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v[key].as_array().map_or(&[], Vec::as_slice)
}

/// `GET /api/v1/resources/queues`.
pub(crate) async fn queues(ctx: &Ctx) -> Outcome {
    let json = ctx.broker.get_json(&["api", "v1", "resources", "queues"]).await?;
    if ctx.json {
        return ctx.out_json(json.as_str());
    }
    let v: Value = decode(json.as_str(), "queues")?;
    let queues = list(&v, "queues");
    if queues.is_empty() {
        return ctx.out("no queues\n");
    }
    let mut t =
        Table::new(["QUEUE", "PARTITIONS", "TOTAL", "PENDING", "PROCESSING", "NAMESPACE", "TASK", "CREATED"]);
    for q in queues {
        t.row([
            text(q, &["name"]),
            text(q, &["partitions"]),
            text(q, &["messages", "total"]),
            text(q, &["messages", "pending"]),
            text(q, &["messages", "processing"]),
            text(q, &["namespace"]),
            text(q, &["task"]),
            text(q, &["createdAt"]),
        ]);
    }
    ctx.out(&t.render())
}

/// `GET /api/v1/status`.
pub(crate) async fn status(ctx: &Ctx) -> Outcome {
    let json = ctx.broker.get_json(&["api", "v1", "status"]).await?;
    if ctx.json {
        return ctx.out_json(json.as_str());
    }
    let v: Value = decode(json.as_str(), "status")?;
    let o = &v["overview"];
    let paused = |flag: &str| {
        if v["maintenance"][flag] == Value::Bool(true) {
            "paused for maintenance"
        } else {
            "running"
        }
    };
    let mut text_out = record(&[
        ("queues", text(o, &["queues"])),
        ("partitions", text(o, &["partitions"])),
        ("consumer groups", text(o, &["consumerGroups"])),
        (
            "messages",
            format!(
                "{} total, {} pending, {} processing, {} completed, {} dead letters",
                text(o, &["messages", "total"]),
                text(o, &["messages", "pending"]),
                text(o, &["messages", "processing"]),
                text(o, &["messages", "completed"]),
                text(o, &["messages", "deadLetter"]),
            ),
        ),
        ("kv keys", text(o, &["kv", "keys"])),
        ("push", paused("maintenanceMode").to_owned()),
        ("pop", paused("popMaintenanceMode").to_owned()),
        (
            "database",
            format!(
                "PostgreSQL {}, {} bytes",
                text(&v, &["database", "version"]),
                text(&v, &["database", "sizeBytes"])
            ),
        ),
        ("as of", text(o, &["timestamp"])),
    ]);
    let depths = list(&v, "queues");
    if !depths.is_empty() {
        let mut t = Table::new(["QUEUE", "DEPTH", "OLDEST (S)", "DEAD LETTERS"]);
        for q in depths {
            let age = q["oldestMessageAgeSeconds"].as_f64().map_or_else(|| "-".into(), |s| format!("{s:.1}"));
            t.row([text(q, &["queue"]), text(q, &["depth"]), age, text(q, &["deadLetters"])]);
        }
        text_out.push('\n');
        text_out.push_str(&t.render());
    }
    ctx.out(&text_out)
}
