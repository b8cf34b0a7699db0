//! The client subcommands through the real `queen` binary against a real
//! broker: JSON and human output, and the exit codes of `queen --help`
//! (0 done, 1 broker/network, 2 usage, 3 the broker said no).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::process::Command;

use common::{free_port, TestBroker};
use serde_json::{json, Value};

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The stdout as one JSON document.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// Asserts exit 0 and answers self.
    fn ok(self) -> Self {
        assert_eq!(self.code, 0, "expected success: {self:?}");
        self
    }
}

/// Runs `queen --url <base> <args>` off the runtime (the broker serves on it).
async fn queen(base: &str, args: &[&str]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_queen"));
    cmd.arg("--url").arg(base).args(args);
    for var in ["QUEEN_URL", "QUEEN_TOKEN", "RUST_LOG"] {
        cmd.env_remove(var);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run queen")).await.expect("join");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

/// The message fields an ack needs.
fn ack_args(msg: &Value) -> (String, String, String) {
    let s = |k: &str| msg[k].as_str().unwrap_or_else(|| panic!("no {k} in {msg}")).to_owned();
    (s("partitionId"), s("transactionId"), s("leaseId"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_then_pop_json_then_ack_settles_the_messages() {
    let b = TestBroker::start().await;
    let pushed =
        queen(&b.base, &["--json", "push", "orders", "-p", "eu", r#"{"order":1}"#, r#"{"order":2}"#])
            .await
            .ok();
    let results = pushed.json();
    assert_eq!(results.as_array().unwrap().len(), 2, "{results}");
    assert!(results.as_array().unwrap().iter().all(|r| r["status"] == "queued"), "{results}");

    let popped = queen(&b.base, &["pop", "orders", "--batch", "5", "--json"]).await.ok().json();
    let messages = popped["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 2, "{popped}");
    assert_eq!(messages[0]["data"]["order"], 1);
    assert_eq!(messages[0]["partition"], "eu");

    for msg in &messages {
        let (pid, tx, lease) = ack_args(msg);
        let human = queen(&b.base, &["ack", &pid, &tx, "--lease", &lease]).await.ok();
        assert!(human.stdout.starts_with(&format!("acked {tx} as completed")), "{human:?}");
    }
    // A second completed ack is a no-op, still a success.
    let (pid, tx, lease) = ack_args(&messages[0]);
    let again = queen(&b.base, &["--json", "ack", &pid, &tx, "--lease", &lease]).await.ok().json();
    assert_eq!(again["success"], true);
    assert_eq!(again["noop"], true, "{again}");

    let empty = queen(&b.base, &["pop", "orders"]).await.ok();
    assert_eq!(empty.stdout, "no messages in orders\n");
    let empty = queen(&b.base, &["pop", "orders", "--json"]).await.ok().json();
    assert_eq!(empty["messages"].as_array().unwrap().len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn human_push_and_pop_print_tables_with_what_the_ack_needs() {
    let b = TestBroker::start().await;
    let pushed = queen(&b.base, &["push", "jobs", r#"{"job":"a"}"#, "--transaction-id", "job-a"]).await.ok();
    assert!(pushed.stdout.contains("TRANSACTION ID"), "{pushed:?}");
    assert!(pushed.stdout.contains("job-a"), "{pushed:?}");
    assert!(pushed.stdout.ends_with("pushed 1 message to jobs: 1 queued\n"), "{pushed:?}");
    // The same transaction id again is a duplicate: an answer, not a failure.
    let dup = queen(&b.base, &["push", "jobs", r#"{"job":"a"}"#, "--transaction-id", "job-a"]).await.ok();
    assert!(dup.stdout.contains("1 duplicate"), "{dup:?}");

    let popped = queen(&b.base, &["pop", "jobs"]).await.ok();
    let mut lines = popped.stdout.lines();
    let header = lines.next().unwrap();
    for col in ["PARTITION", "PARTITION ID", "TRANSACTION ID", "LEASE ID", "DATA"] {
        assert!(header.contains(col), "{header}");
    }
    let row = lines.next().unwrap();
    assert!(row.contains("job-a") && row.contains(r#"{"job":"a"}"#), "{row}");
    assert!(popped.stdout.contains("ack with: queen ack"), "{popped:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_push_from_a_file_batches_and_queues_and_status_show_it() {
    let b = TestBroker::start().await;
    let dir = std::env::temp_dir().join(format!("queen-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lines.jsonl");
    let mut text: String = (0..20).map(|i| format!("{{\"n\":{i}}}\n")).collect();
    text.push_str("\n   \n"); // blank lines are skipped
    std::fs::write(&file, text).unwrap();
    let path = file.to_str().unwrap();

    let human = queen(&b.base, &["push", "bulk", "--file", path, "--batch", "7"]).await.ok();
    assert_eq!(human.stdout.lines().last().unwrap(), "pushed 20 messages to bulk: 20 queued");
    // With --json, one line per request: 7 + 7 + 6.
    let json = queen(&b.base, &["--json", "push", "bulk2", "--file", path, "--batch", "7"]).await.ok();
    let lines: Vec<Value> = json.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.iter().map(|l| l.as_array().unwrap().len()).collect::<Vec<_>>(), vec![7, 7, 6]);

    let queues = queen(&b.base, &["--json", "queues"]).await.ok().json();
    let bulk = queues["queues"].as_array().unwrap().iter().find(|q| q["name"] == "bulk").unwrap().clone();
    assert_eq!(bulk["messages"]["total"], 20, "{queues}");
    let table = queen(&b.base, &["queues"]).await.ok();
    let row = table.stdout.lines().find(|l| l.starts_with("bulk ")).expect("a bulk row");
    assert!(row.split_whitespace().any(|c| c == "20"), "{row}");

    let status = queen(&b.base, &["--json", "status"]).await.ok().json();
    assert_eq!(status["overview"]["messages"]["total"], 40, "{status}");
    let depth = status["queues"].as_array().unwrap().iter().find(|q| q["queue"] == "bulk2").unwrap().clone();
    assert_eq!(depth["depth"], 20);
    let human = queen(&b.base, &["status"]).await.ok();
    assert!(human.stdout.contains("40 total"), "{human:?}");
    assert!(human.stdout.lines().any(|l| l.starts_with("bulk2") && l.contains("20")), "{human:?}");

    // A line that is not JSON stops the push with exit 2 and says where.
    std::fs::write(&file, "{\"n\":1}\nnot json\n").unwrap();
    let bad = queen(&b.base, &["push", "bulk3", "--file", path, "--batch", "1"]).await;
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("line 2 is not JSON"), "{bad:?}");
    assert!(bad.stderr.contains("1 messages before it were pushed"), "{bad:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_put_get_incr_del_prefix_in_json_and_for_people() {
    let b = TestBroker::start().await;
    let put = queen(&b.base, &["--json", "kv", "put", "app", "user:1", r#"{"name":"ada"}"#, "--forever"])
        .await
        .ok()
        .json();
    assert_eq!(put["applied"], true, "{put}");
    let version = put["version"].as_u64().unwrap();

    let got = queen(&b.base, &["--json", "kv", "get", "app", "user:1"]).await.ok().json();
    assert_eq!(got["found"], true);
    assert_eq!(got["value"]["name"], "ada");
    assert_eq!(got["version"], version);
    let human = queen(&b.base, &["kv", "get", "app", "user:1"]).await.ok();
    assert!(
        human.stdout.contains(r#"value    {"name": "ada"}"#) || human.stdout.contains("ada"),
        "{human:?}"
    );
    assert!(human.stdout.contains(&format!("version  {version}")), "{human:?}");
    assert!(human.stdout.contains("expires  never"), "{human:?}");

    // A TTL'd put, and a stored null is found (not absent).
    queen(&b.base, &["kv", "put", "app", "user:2", "null", "--ttl", "600"]).await.ok();
    let null = queen(&b.base, &["--json", "kv", "get", "app", "user:2"]).await.ok().json();
    assert_eq!(null["found"], true);
    assert!(null["value"].is_null());
    assert!(null["expiresAt"].is_string(), "{null}");

    let one = queen(&b.base, &["kv", "incr", "app", "hits", "--ttl", "60"]).await.ok();
    assert!(one.stdout.starts_with("hits = 1 "), "{one:?}");
    let four = queen(&b.base, &["--json", "kv", "incr", "app", "hits", "--by", "3", "--ttl", "60"])
        .await
        .ok()
        .json();
    assert_eq!(four["value"], 4);
    let two = queen(&b.base, &["--json", "kv", "incr", "app", "hits", "--by", "-2", "--ttl", "60"])
        .await
        .ok()
        .json();
    assert_eq!(two["value"], 2);

    let page = queen(&b.base, &["--json", "kv", "prefix", "app", "user:"]).await.ok().json();
    let keys: Vec<&str> =
        page["rows"].as_array().unwrap().iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys, vec!["user:1", "user:2"]);
    // Pages of one: --all walks them, one JSON line per page.
    let all = queen(&b.base, &["--json", "kv", "prefix", "app", "user:", "--limit", "1", "--all"]).await.ok();
    assert_eq!(all.stdout.lines().count(), 2, "{all:?}");
    let first = queen(&b.base, &["kv", "prefix", "app", "user:", "--limit", "1"]).await.ok();
    assert!(first.stdout.starts_with("KEY"), "{first:?}");
    assert!(first.stdout.contains("more follow: --after 'user:1'"), "{first:?}");
    let table = queen(&b.base, &["kv", "prefix", "app", "user:"]).await.ok();
    assert!(table.stdout.lines().any(|l| l.starts_with("user:1") && l.contains("ada")), "{table:?}");
    assert!(table.stdout.ends_with("2 keys\n"), "{table:?}");

    let del = queen(&b.base, &["kv", "del", "app", "user:1"]).await.ok();
    assert_eq!(del.stdout, "deleted user:1\n");
    let absent = queen(&b.base, &["--json", "kv", "get", "app", "user:1"]).await.ok().json();
    assert_eq!(absent["found"], false);
    let absent = queen(&b.base, &["kv", "get", "app", "user:1"]).await.ok();
    assert_eq!(absent.stdout, "app/user:1: absent\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_write_that_does_not_apply_exits_3_after_printing_its_result() {
    let b = TestBroker::start().await;
    queen(&b.base, &["kv", "put", "app", "lock", r#""me""#, "--forever"]).await.ok();

    let taken =
        queen(&b.base, &["--json", "kv", "put", "app", "lock", r#""you""#, "--forever", "--if-absent"]).await;
    assert_eq!(taken.code, 3, "{taken:?}");
    let result = taken.json();
    assert_eq!(result["applied"], false);
    assert_eq!(result["reason"], "exists");
    assert_eq!(result["value"], "me", "the winner's value comes back");
    assert!(taken.stderr.contains("not applied: exists"), "{taken:?}");

    let stale = queen(&b.base, &["kv", "put", "app", "lock", "1", "--forever", "--expect", "999"]).await;
    assert_eq!(stale.code, 3, "{stale:?}");
    assert!(stale.stderr.contains("not applied: version"), "{stale:?}");
    assert_eq!(stale.stdout, "", "people get the verdict on stderr only");

    queen(&b.base, &["kv", "incr", "app", "quota", "--by", "3", "--forever"]).await.ok();
    let over = queen(&b.base, &["kv", "incr", "app", "quota", "--by", "1", "--max", "3", "--forever"]).await;
    assert_eq!(over.code, 3, "{over:?}");
    assert!(over.stderr.contains("limit"), "{over:?}");

    let gone = queen(&b.base, &["kv", "del", "app", "never-there"]).await;
    assert_eq!(gone.code, 3, "{gone:?}");
    assert!(gone.stderr.contains("absent"), "{gone:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_past_i64_keeps_every_digit() {
    let b = TestBroker::start().await;
    let big = "99999999999999999999999";
    queen(&b.base, &["kv", "put", "app", "big", big, "--forever"]).await.ok();
    let incr = queen(&b.base, &["--json", "kv", "incr", "app", "big", "--forever"]).await.ok();
    assert!(incr.stdout.contains("100000000000000000000000"), "{incr:?}");
    let human = queen(&b.base, &["kv", "get", "app", "big"]).await.ok();
    assert!(human.stdout.contains("value    100000000000000000000000"), "{human:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_lists_what_an_ack_dead_lettered_and_a_refused_ack_exits_3() {
    let b = TestBroker::start().await;
    queen(&b.base, &["push", "pay", r#"{"card":"declined"}"#, "--transaction-id", "pay-1"]).await.ok();
    let popped = queen(&b.base, &["--json", "pop", "pay"]).await.ok().json();
    let (pid, tx, lease) = ack_args(&popped["messages"][0]);

    // A lease that is not the message's is refused: exit 3, nothing settled.
    let wrong = queen(&b.base, &["ack", &pid, &tx, "--lease", &pid]).await;
    assert_eq!(wrong.code, 3, "{wrong:?}");
    assert!(wrong.stderr.contains("refused"), "{wrong:?}");

    let ack =
        queen(&b.base, &["ack", &pid, &tx, "--lease", &lease, "--status", "dlq", "--error", "card declined"])
            .await
            .ok();
    assert!(ack.stdout.contains("dead-lettered"), "{ack:?}");

    let dlq = queen(&b.base, &["--json", "dlq", "pay"]).await.ok().json();
    assert_eq!(dlq["total"], 1, "{dlq}");
    assert_eq!(dlq["messages"][0]["transactionId"], "pay-1");
    assert_eq!(dlq["messages"][0]["errorMessage"], "card declined");
    let table = queen(&b.base, &["dlq", "pay"]).await.ok();
    assert!(table.stdout.lines().any(|l| l.contains("pay-1") && l.contains("card declined")), "{table:?}");
    assert!(table.stdout.ends_with("1 of 1 dead letters in pay\n"), "{table:?}");
    let none = queen(&b.base, &["dlq", "elsewhere"]).await.ok();
    assert_eq!(none.stdout, "no dead letters in elsewhere\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_usage_2_broker_1() {
    let b = TestBroker::start().await;
    // Usage: clap refuses before anything is sent.
    for args in [
        &["kv", "put", "app", "k", "1"][..],                            // no expiry
        &["kv", "put", "app", "k", "1", "--ttl", "5", "--forever"][..], // both
        &["kv", "incr", "app", "k"][..],                                // no expiry
        &["kv", "put", "app", "k", "1", "--ttl", "0"][..],              // a zero TTL
        &["push", "q"][..],                                             // no payload
        &["ack", "only-one-arg"][..],
        &["ack", "p", "t", "--status", "maybe"][..],
    ] {
        let run = queen(&b.base, args).await;
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert_eq!(run.stdout, "", "{args:?}");
    }
    // Usage: input the CLI checks itself.
    let not_json = queen(&b.base, &["kv", "put", "app", "k", "text", "--forever"]).await;
    assert_eq!(not_json.code, 2, "{not_json:?}");
    assert!(not_json.stderr.starts_with("queen: the value is not JSON"), "{not_json:?}");
    let tx_two = queen(&b.base, &["push", "q", "1", "2", "--transaction-id", "t"]).await;
    assert_eq!(tx_two.code, 2, "{tx_two:?}");
    let bad_url = queen("not a url", &["status"]).await;
    assert_eq!(bad_url.code, 2, "{bad_url:?}");

    // Broker: nobody listens there; one clear line on stderr.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let down = queen(&dead, &["--retries", "0", "status"]).await;
    assert_eq!(down.code, 1, "{down:?}");
    assert_eq!(down.stderr.lines().count(), 1, "{down:?}");
    assert!(down.stderr.starts_with(&format!("queen: cannot connect to {dead}")), "{down:?}");
    // Broker: a 4xx is exit 1 with the broker's message.
    let bad = queen(&b.base, &["ack", "not-a-uuid", "t"]).await;
    assert_eq!(bad.code, 1, "{bad:?}");
    assert!(bad.stderr.contains("400") && bad.stderr.contains("partitionId"), "{bad:?}");
}

#[tokio::test]
async fn help_documents_the_exit_codes() {
    let run = queen("http://127.0.0.1:1", &["--help"]).await.ok();
    assert!(run.stdout.contains("Exit codes"), "{run:?}");
    for line in ["  1  the broker", "  2  bad usage", "  3  the broker said no"] {
        assert!(run.stdout.contains(line), "{line}: {}", run.stdout);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_acquire_get_renew_release_and_a_held_lock_exits_3() {
    let b = TestBroker::start().await;
    let got = queen(&b.base, &["--json", "lock", "acquire", "nightly", "--ttl", "30", "--owner", "a"])
        .await
        .ok()
        .json();
    assert_eq!(got["acquired"], true);
    let token = got["token"].as_i64().unwrap().to_string();
    let held = queen(&b.base, &["lock", "acquire", "nightly", "--ttl", "30", "--owner", "b"]).await;
    assert_eq!(held.code, 3, "{held:?}");
    assert!(held.stdout.contains("OWNER") && held.stdout.contains(" a "), "the holders table: {held:?}");
    assert!(held.stderr.contains("held"), "{held:?}");
    let who = queen(&b.base, &["lock", "get", "nightly"]).await.ok();
    assert!(who.stdout.contains(&token), "{who:?}");
    let renewed = queen(
        &b.base,
        &["--json", "lock", "renew", "nightly", "--permit", &token, "--ttl", "30", "--owner", "a"],
    )
    .await
    .ok()
    .json();
    let new_token = renewed["token"].as_i64().unwrap();
    assert!(new_token > token.parse::<i64>().unwrap());
    let stale = queen(&b.base, &["lock", "release", "nightly", "--permit", &token]).await;
    assert_eq!(stale.code, 3, "an old token releases nothing: {stale:?}");
    queen(&b.base, &["lock", "release", "nightly", "--permit", &new_token.to_string()]).await.ok();
    let free = queen(&b.base, &["lock", "get", "nightly"]).await.ok();
    assert!(free.stdout.contains("not held"), "{free:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timer_schedule_peek_list_cancel_and_read_by_offset() {
    let b = TestBroker::start().await;
    let s = queen(
        &b.base,
        &[
            "--json",
            "timer",
            "schedule",
            "later",
            "k1",
            r#"{"n":1}"#,
            "--delay-ms",
            "600000",
            "--txn",
            "tx-1",
        ],
    )
    .await
    .ok()
    .json();
    assert_eq!((s["status"].clone(), s["txn"].clone()), (Value::from("scheduled"), Value::from("tx-1")));
    let peek = queen(&b.base, &["timer", "peek", "later", "k1"]).await.ok();
    assert!(peek.stdout.contains(r#"{"n":1}"#) && peek.stdout.contains("tx-1"), "{peek:?}");
    let list = queen(&b.base, &["timer", "list", "later"]).await.ok();
    assert!(list.stdout.contains("k1") && list.stdout.contains("1 timers"), "{list:?}");
    queen(&b.base, &["timer", "cancel", "later", "k1"]).await.ok();
    let again = queen(&b.base, &["timer", "cancel", "later", "k1"]).await;
    assert_eq!(again.code, 3, "nothing pending: {again:?}");
    assert!(again.stderr.contains("absent"), "{again:?}");
    let bad = queen(&b.base, &["timer", "schedule", "later", "k2", "not json", "--delay-ms", "1"]).await;
    assert_eq!(bad.code, 2, "{bad:?}");

    b.push(
        "log",
        "Default",
        &[("r0", serde_json::json!(0)), ("r1", serde_json::json!(1)), ("r2", serde_json::json!(2))],
    )
    .await;
    let read = queen(&b.base, &["read", "log", "--offset", "1"]).await.ok();
    assert!(
        read.stdout.contains("r1") && read.stdout.contains("r2") && !read.stdout.contains("r0"),
        "{read:?}"
    );
    assert!(read.stdout.contains("2 records; log 0..3; next offset 3"), "{read:?}");
    let json = queen(&b.base, &["--json", "read", "log"]).await.ok().json();
    assert_eq!(json["entries"][0]["highWatermark"], 3);
    let past = queen(&b.base, &["read", "log", "--offset", "9"]).await;
    assert_eq!(past.code, 3, "{past:?}");
    assert!(past.stderr.contains("OFFSET_OUT_OF_RANGE"), "{past:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configure_sets_every_option_and_pop_spans_a_namespace() {
    let b = TestBroker::start().await;
    let set = queen(
        &b.base,
        &[
            "--json",
            "configure",
            "jobs-a",
            "--namespace",
            "jobs",
            "--task",
            "run",
            "--priority",
            "5",
            "--retry-delay-ms",
            "250",
            "--ttl",
            "3600",
            "--retention-seconds",
            "86400",
            "--completed-retention-seconds",
            "600",
            "--max-wait-seconds",
            "7200",
            "--lease-time",
            "30",
        ],
    )
    .await
    .ok()
    .json();
    let o = &set["options"];
    assert_eq!(
        (o["retryDelay"].clone(), o["ttl"].clone(), o["priority"].clone()),
        (json!(250), json!(3600), json!(5))
    );
    assert_eq!((o["retentionEnabled"].clone(), o["retentionSeconds"].clone()), (json!(true), json!(86400)));
    assert_eq!((o["maxWaitTimeSeconds"].clone(), o["leaseTime"].clone()), (json!(7200), json!(30)));
    assert_eq!(set["namespace"], "jobs");
    // Without a key the broker refuses encryption (a 400): the reason on stderr.
    let refused = queen(&b.base, &["configure", "jobs-a", "--encrypt"]).await;
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("QUEEN_ENCRYPTION_KEY"), "{refused:?}");
    let human = queen(&b.base, &["configure", "jobs-a", "--replace"]).await.ok();
    assert!(human.stdout.contains("retryDelay") && human.stdout.contains("  0"), "{human:?}");

    queen(&b.base, &["configure", "jobs-b", "--namespace", "jobs", "--priority", "1"]).await.ok();
    queen(&b.base, &["push", "jobs-b", r#"{"n":1}"#]).await.ok();
    let popped = queen(&b.base, &["--json", "pop", "--namespace", "jobs"]).await.ok().json();
    assert_eq!(popped["queue"], "jobs-b", "{popped}");
    let none = queen(&b.base, &["pop", "--namespace", "jobs"]).await.ok();
    assert!(none.stdout.contains("no messages in namespace jobs"), "{none:?}");
    let usage = queen(&b.base, &["pop"]).await;
    assert_eq!(usage.code, 2, "a pop names a queue or a tag: {usage:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_push_pop_ack_depth_and_delete() {
    let b = TestBroker::start().await;
    queen(&b.base, &["ephemeral", "configure", "inbox", "--max-length", "10", "--retry-limit", "3"])
        .await
        .ok();
    let pushed = queen(&b.base, &["ephemeral", "push", "inbox", r#"{"n":1}"#, r#""two""#]).await.ok().json();
    assert_eq!(pushed["pushed"], 2);
    let table = queen(&b.base, &["ephemeral", "pop", "inbox", "--batch", "1"]).await.ok();
    assert!(table.stdout.contains("ID") && table.stdout.contains(r#"{"n":1}"#), "{table:?}");
    let popped = queen(&b.base, &["--json", "ephemeral", "pop", "inbox"]).await.ok().json();
    let id = popped["messages"][0]["id"].as_str().unwrap().to_owned();
    let acked = queen(&b.base, &["ephemeral", "ack", "inbox", &id]).await.ok().json();
    assert_eq!(acked["results"][0]["outcome"], "acked");
    let depth = queen(&b.base, &["ephemeral", "depth", "inbox"]).await.ok().json();
    assert_eq!(depth["queue"], "inbox");
    assert_eq!(queen(&b.base, &["ephemeral", "delete", "inbox"]).await.ok().json()["deleted"], true);
    let missing = queen(&b.base, &["ephemeral", "depth", "inbox"]).await;
    assert_ne!(missing.code, 0, "{missing:?}");
    assert!(missing.stderr.contains("ephemeral_queue_not_found"), "{missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_replay_moves_a_record_by_id_a_duplicate_exits_3_and_purge_empties_a_queue() {
    let b = TestBroker::start().await;
    for tx in ["pay-1", "pay-2"] {
        queen(&b.base, &["push", "pay", r#"{"card":"declined"}"#, "--transaction-id", tx]).await.ok();
        let popped = queen(&b.base, &["--json", "pop", "pay"]).await.ok().json();
        let (pid, tx, lease) = ack_args(&popped["messages"][0]);
        queen(&b.base, &["ack", &pid, &tx, "--lease", &lease, "--status", "dlq"]).await.ok();
    }
    let listed = queen(&b.base, &["--json", "dlq", "pay"]).await.ok().json();
    let record =
        listed["messages"].as_array().unwrap().iter().find(|m| m["transactionId"] == "pay-1").unwrap();
    let id = record["dlqId"].as_i64().unwrap().to_string();
    let table = queen(&b.base, &["dlq", "pay"]).await.ok();
    assert!(table.stdout.starts_with("DLQ ID"), "{table:?}");
    assert!(table.stdout.lines().any(|l| l.starts_with(&id) && l.contains("pay-1")), "{table:?}");

    let moved =
        queen(&b.base, &["dlq", "replay", &id, "--queue", "retry-lane", "--partition", "p1"]).await.ok();
    assert_eq!(
        moved.stdout,
        format!("replayed dead letter {id} (pay-1, queue mode) to retry-lane/p1 as dlq:{id}\n"),
        "{moved:?}"
    );
    let popped = queen(&b.base, &["--json", "pop", "retry-lane"]).await.ok().json();
    assert_eq!(popped["messages"][0]["transactionId"], format!("dlq:{id}"));
    // Gone: the broker's 404 is a failure (exit 1) and nothing is pushed again.
    let again = queen(&b.base, &["dlq", "replay", &id, "--queue", "retry-lane", "--partition", "p1"]).await;
    assert_eq!(again.code, 1, "{again:?}");
    assert_eq!(
        b.scalar(&format!("SELECT count(*) FROM queen.messages WHERE transaction_id = 'dlq:{id}'")).await,
        1
    );

    // A record whose dlq:<id> message exists already: exit 3, the record kept.
    let other =
        listed["messages"].as_array().unwrap().iter().find(|m| m["transactionId"] == "pay-2").unwrap();
    let other_id = other["dlqId"].as_i64().unwrap().to_string();
    queen(&b.base, &["push", "pay", "1", "--transaction-id", &format!("dlq:{other_id}")]).await.ok();
    let dup = queen(&b.base, &["dlq", "replay", &other_id]).await;
    assert_eq!(dup.code, 3, "{dup:?}");
    assert!(dup.stderr.contains("not replayed"), "{dup:?}");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.dead_letters").await, 1);

    let usage = queen(&b.base, &["dlq", "purge"]).await;
    assert_eq!(usage.code, 2, "a purge names its queue: {usage:?}");
    let purged =
        queen(&b.base, &["dlq", "purge", "--queue", "pay", "--consumer-group", "__QUEUE_MODE__"]).await.ok();
    assert_eq!(purged.stdout, "deleted 1 dead letters of group __QUEUE_MODE__ in pay\n", "{purged:?}");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.dead_letters").await, 0);
    let json = queen(&b.base, &["--json", "dlq", "purge", "--queue", "pay"]).await.ok().json();
    assert_eq!(json["deleted"], 0, "{json}");
}
