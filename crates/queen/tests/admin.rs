//! The operator surface over real HTTP: resources, messages, consumer
//! groups, status, maintenance switches, `/metrics`, `/metrics/prometheus`
//! and the request id header.
//!
//! The Prometheus recorder is process-global: under plain `cargo test` the
//! counters accumulate across the tests of this file, so counter assertions
//! are on presence and increase, never on absolute values.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{eventually, tx_ids, TestBroker};
use serde_json::{json, Value};

const QM: &str = "__QUEUE_MODE__";

/// POST /api/v1/configure with a namespace and a task.
async fn configure_labelled(b: &TestBroker, queue: &str, namespace: &str, task: &str) {
    let (code, body) = b
        .post(
            "/api/v1/configure",
            &json!({"queue": queue, "namespace": namespace, "task": task, "options": {}}),
        )
        .await;
    assert_eq!(code, 200, "configure failed: {body}");
}

/// GET that must answer 200.
async fn get_ok(b: &TestBroker, path: &str) -> Value {
    let (code, body) = b.get(path).await;
    assert_eq!(code, 200, "GET {path}: {body}");
    body
}

/// The `messages` array of GET /api/v1/messages.
async fn listed(b: &TestBroker, query: &str) -> Vec<Value> {
    get_ok(b, &format!("/api/v1/messages?{query}")).await["messages"].as_array().unwrap().clone()
}

/// Transaction ids of a message list.
fn txns(rows: &[Value]) -> Vec<String> {
    rows.iter().map(|r| r["transactionId"].as_str().unwrap().to_owned()).collect()
}

/// The depth of one queue from /resources/queues/:q/depth.
async fn depth(b: &TestBroker, queue: &str) -> Value {
    get_ok(b, &format!("/api/v1/resources/queues/{queue}/depth")).await
}

/// Pops one message of `queue` (queue mode) and nacks it; with
/// `retryLimit: 0` that dead-letters it.
async fn dead_letter(b: &TestBroker, queue: &str, query: &str) -> Value {
    let popped = b.pop_some(queue, query).await;
    let m = popped["messages"][0].clone();
    let r = b.ack_with(&m, "failed", Some("boom for the DLQ"), None).await;
    assert_eq!(r["dlq"], true, "{r}");
    m
}

/// The entry of `group` on `queue` in a consumer-groups array.
fn group_entry<'a>(groups: &'a Value, group: &str, queue: &str) -> Option<&'a Value> {
    groups.as_array().unwrap().iter().find(|g| g["name"] == group && g["queueName"] == queue)
}

/// GET /metrics/prometheus: (content type, text).
async fn scrape(b: &TestBroker) -> (String, String) {
    let resp = b.http.get(b.url("/metrics/prometheus")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let ct = resp.headers().get("content-type").unwrap().to_str().unwrap().to_owned();
    (ct, resp.text().await.unwrap())
}

/// The sum of the samples of family `name` whose label set contains every
/// one of `labels` (such as `queue="q"`); `None` when no sample matches.
fn sample(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let (set, value) = if let Some(r) = rest.strip_prefix('{') {
            let Some(end) = r.rfind('}') else { continue };
            (&r[..end], r[end + 1..].trim())
        } else if rest.starts_with(' ') {
            ("", rest.trim())
        } else {
            continue;
        };
        let parts: Vec<&str> = set.split(',').collect();
        if labels.iter().all(|l| parts.contains(l)) {
            let v: f64 = value.parse().unwrap_or_else(|_| panic!("bad sample value in {line:?}"));
            found = Some(found.unwrap_or(0.0) + v);
        }
    }
    found
}

// ------------------------------------------------------------- resources

#[tokio::test]
async fn resources_overview_queues_and_queue_detail_count_what_was_pushed() {
    let b = TestBroker::start().await;
    configure_labelled(&b, "orders", "shop", "billing").await;
    b.push("orders", "eu", &[("o1", json!(1)), ("o2", json!(2))]).await;
    b.push("orders", "us", &[("o3", json!(3))]).await;
    b.push("events", "Default", &[("e1", json!(1))]).await;

    let o = get_ok(&b, "/api/v1/resources/overview").await;
    assert_eq!(o["queues"], 2, "{o}");
    assert_eq!(o["partitions"], 3, "{o}");
    assert_eq!(o["namespaces"], 1, "{o}");
    assert_eq!(o["tasks"], 1, "{o}");
    assert_eq!(o["messages"]["total"], 4, "{o}");
    assert_eq!(o["messages"]["pending"], 4, "{o}");
    assert_eq!(o["messages"]["processing"], 0, "{o}");
    assert_eq!(o["messages"]["deadLetter"], 0, "{o}");
    assert!(o["timestamp"].is_string(), "{o}");

    let qs = get_ok(&b, "/api/v1/resources/queues").await;
    let list = qs["queues"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{qs}");
    let orders = list.iter().find(|q| q["name"] == "orders").unwrap();
    assert_eq!(orders["namespace"], "shop");
    assert_eq!(orders["task"], "billing");
    assert_eq!(orders["partitions"], 2);
    assert_eq!(orders["messages"]["total"], 3);
    assert_eq!(orders["messages"]["pending"], 3);
    assert!(orders["createdAt"].is_string() && orders["id"].is_number(), "{orders}");
    let events = list.iter().find(|q| q["name"] == "events").unwrap();
    assert_eq!(events["partitions"], 1);
    assert_eq!(events["namespace"], Value::Null);

    // One message of "eu" under a lease.
    b.pop_partition("orders", "eu", "batch=1").await;
    let q = get_ok(&b, "/api/v1/resources/queues/orders").await;
    assert_eq!(q["name"], "orders");
    assert_eq!(q["namespace"], "shop");
    let parts = q["partitions"].as_array().unwrap();
    assert_eq!(parts.iter().map(|p| p["name"].as_str().unwrap()).collect::<Vec<_>>(), ["eu", "us"]);
    let eu = &parts[0];
    assert!(eu["id"].is_string() && eu["createdAt"].is_string(), "{eu}");
    assert_eq!(
        eu["stats"],
        json!({"total": 2, "pending": 1, "processing": 1, "completed": 0, "deadLetter": 0})
    );
    assert_eq!(q["totals"]["total"], 3, "{q}");
    assert_eq!(q["totals"]["pending"], 2, "{q}");
    assert_eq!(q["totals"]["processing"], 1, "{q}");
}

#[tokio::test]
async fn a_missing_queue_is_a_json_404_on_detail_and_depth() {
    let b = TestBroker::start().await;
    for path in ["/api/v1/resources/queues/nope", "/api/v1/resources/queues/nope/depth"] {
        let (code, body) = b.get(path).await;
        assert_eq!(code, 404, "{path}: {body}");
        assert_eq!(body["error"], "Queue not found", "{path}: {body}");
    }
}

#[tokio::test]
async fn depth_counts_only_visible_messages_not_done_for_queue_mode() {
    let b = TestBroker::start().await;
    b.push("plain", "Default", &[("p1", json!(1)), ("p2", json!(2)), ("p3", json!(3))]).await;
    let d = depth(&b, "plain").await;
    assert_eq!(d["queue"], "plain");
    assert_eq!(d["depth"], 3, "{d}");
    assert_eq!(d["deadLetters"], 0, "{d}");
    assert!(d["oldestMessageAgeSeconds"].as_f64().unwrap() > 0.0, "{d}");

    // An acked message is done.
    let popped = b.pop_some("plain", "batch=1").await;
    assert_eq!(b.ack(&popped["messages"][0], "completed", None).await["success"], true);
    assert_eq!(depth(&b, "plain").await["depth"], 2);
    // A named group's progress does not change the queue-mode depth.
    b.pop_some("plain", "batch=10&subscriptionMode=all&consumerGroup=g&autoAck=true").await;
    assert_eq!(depth(&b, "plain").await["depth"], 2);

    // Fresh messages of a delayed queue are not visible yet.
    b.configure_ok("later", json!({"delayedProcessing": 3600})).await;
    b.push("later", "Default", &[("l1", json!(1)), ("l2", json!(2))]).await;
    let d = depth(&b, "later").await;
    assert_eq!(d["depth"], 0, "{d}");
    assert_eq!(d["oldestMessageAgeSeconds"].as_f64().unwrap(), 0.0, "{d}");
    b.pop_none("later", "batch=10").await;

    // Everything acked: empty.
    let popped = b.pop_some("plain", "batch=10").await;
    for m in popped["messages"].as_array().unwrap() {
        b.ack(m, "completed", None).await;
    }
    let d = depth(&b, "plain").await;
    assert_eq!(d["depth"], 0, "{d}");
    assert_eq!(d["oldestMessageAgeSeconds"].as_f64().unwrap(), 0.0, "{d}");
}

#[tokio::test]
async fn the_oldest_message_age_grows_while_a_message_waits() {
    let b = TestBroker::start().await;
    b.push("aging", "Default", &[("old", json!(1))]).await;
    eventually(Duration::from_secs(10), "an age over 1 s", || async {
        let d = depth(&b, "aging").await;
        (d["oldestMessageAgeSeconds"].as_f64().unwrap() >= 1.0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn partitions_lists_one_queue_or_all() {
    let b = TestBroker::start().await;
    b.push("pa", "one", &[("a1", json!(1))]).await;
    b.push("pa", "two", &[("a2", json!(1)), ("a3", json!(1))]).await;
    b.push("pb", "Default", &[("b1", json!(1))]).await;

    let only = get_ok(&b, "/api/v1/resources/partitions?queue=pa").await;
    let rows = only["partitions"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{only}");
    assert!(rows.iter().all(|p| p["queue"] == "pa"), "{only}");
    let two = rows.iter().find(|p| p["name"] == "two").unwrap();
    assert_eq!(two["messages"]["total"], 2);
    assert_eq!(two["messages"]["pending"], 2);
    assert!(two["id"].is_string() && two["lastPushAt"].is_string(), "{two}");

    let all = get_ok(&b, "/api/v1/resources/partitions").await;
    assert_eq!(all["partitions"].as_array().unwrap().len(), 3, "{all}");
    let none = get_ok(&b, "/api/v1/resources/partitions?queue=missing").await;
    assert_eq!(none["partitions"], json!([]));
}

#[tokio::test]
async fn namespaces_and_tasks_group_the_configured_queues() {
    let b = TestBroker::start().await;
    configure_labelled(&b, "n1", "shop", "ingest").await;
    configure_labelled(&b, "n2", "shop", "report").await;
    configure_labelled(&b, "n3", "ops", "ingest").await;
    b.configure_ok("unlabelled", json!({})).await;
    b.push("n1", "Default", &[("x", json!(1))]).await;
    b.push("n2", "Default", &[("y", json!(1)), ("z", json!(1))]).await;

    let ns = get_ok(&b, "/api/v1/resources/namespaces").await;
    let rows = ns["namespaces"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["namespace"].as_str().unwrap()).collect::<Vec<_>>(), ["ops", "shop"]);
    let shop = &rows[1];
    assert_eq!(shop["queues"], 2, "{shop}");
    assert_eq!(shop["partitions"], 2, "{shop}");
    assert_eq!(shop["messages"]["total"], 3, "{shop}");
    assert_eq!(shop["messages"]["pending"], 3, "{shop}");
    assert_eq!(rows[0]["queues"], 1);

    let tasks = get_ok(&b, "/api/v1/resources/tasks").await;
    let rows = tasks["tasks"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["task"].as_str().unwrap()).collect::<Vec<_>>(), ["ingest", "report"]);
    assert_eq!(rows[0]["queues"], 2, "{tasks}");
    assert_eq!(rows[0]["messages"]["total"], 1, "{tasks}");
    assert_eq!(rows[1]["messages"]["total"], 2, "{tasks}");
}

// -------------------------------------------------------------- messages

#[tokio::test]
async fn message_status_follows_push_pop_ack_and_the_dlq() {
    let b = TestBroker::start().await;
    b.configure_ok("st", json!({"retryLimit": 0})).await;
    b.push("st", "a", &[("m", json!({"n": 1}))]).await;

    let rows = listed(&b, "queue=st").await;
    assert_eq!(txns(&rows), ["m"]);
    let row = &rows[0];
    assert_eq!(row["status"], "pending", "{row}");
    assert_eq!(row["queue"], "st");
    assert_eq!(row["partition"], "a");
    assert_eq!(row["queuePath"], "st/a");
    assert!(row["id"].is_string() && row["partitionId"].is_string() && row["createdAt"].is_string());
    assert_eq!(row["leaseExpiresAt"], Value::Null);
    assert_eq!(txns(&listed(&b, "queue=st&status=pending").await), ["m"]);
    assert!(listed(&b, "queue=st&status=processing").await.is_empty());

    let popped = b.pop_some("st", "batch=1").await;
    let rows = listed(&b, "queue=st&status=processing").await;
    assert_eq!(txns(&rows), ["m"]);
    assert!(rows[0]["leaseExpiresAt"].is_string(), "{}", rows[0]);
    assert!(listed(&b, "queue=st&status=pending").await.is_empty());

    b.ack(&popped["messages"][0], "completed", None).await;
    let rows = listed(&b, "queue=st&status=completed").await;
    assert_eq!(txns(&rows), ["m"]);
    assert_eq!(rows[0]["leaseExpiresAt"], Value::Null);
    assert!(listed(&b, "queue=st&status=processing").await.is_empty());

    b.push("st", "b", &[("d", json!({"n": 2}))]).await;
    dead_letter(&b, "st", "batch=1").await;
    assert_eq!(txns(&listed(&b, "queue=st&status=dead_letter").await), ["d"]);
    assert_eq!(txns(&listed(&b, "queue=st&status=completed").await), ["m"]);
    // Newest first, and the partition filter.
    assert_eq!(txns(&listed(&b, "queue=st").await), ["d", "m"]);
    assert_eq!(txns(&listed(&b, "queue=st&partition=a").await), ["m"]);
    assert_eq!(txns(&listed(&b, "queue=st&limit=1&offset=1").await), ["m"]);
}

#[tokio::test]
async fn a_bad_message_status_is_400() {
    let b = TestBroker::start().await;
    for q in ["status=done", "status=PENDING", "limit=0", "limit=x", "offset=-1"] {
        let (code, body) = b.get(&format!("/api/v1/messages?{q}")).await;
        assert_eq!(code, 400, "{q}: {body}");
        assert!(body["error"].is_string(), "{q}: {body}");
    }
    let (_, body) = b.get("/api/v1/messages?status=done").await;
    assert!(body["error"].as_str().unwrap().contains("status"), "{body}");
}

#[tokio::test]
async fn message_detail_after_auto_ack_has_exactly_one_consumed_entry() {
    let b = TestBroker::start().await;
    b.push("detail", "Default", &[("auto", json!({"hello": "world"}))]).await;
    let popped = b.pop_some("detail", "batch=1&autoAck=true").await;
    let pid = popped["messages"][0]["partitionId"].as_str().unwrap().to_owned();

    let m = get_ok(&b, &format!("/api/v1/messages/{pid}/auto")).await;
    assert_eq!(m["transactionId"], "auto");
    assert_eq!(m["partitionId"], pid.as_str());
    assert_eq!(m["queue"], "detail");
    assert_eq!(m["partition"], "Default");
    assert_eq!(m["payload"], json!({"hello": "world"}));
    assert_eq!(m["isEncrypted"], false);
    assert!(m["queueConfig"]["leaseTime"].is_number() && m["queueConfig"]["retryLimit"].is_number(), "{m}");
    let groups = m["consumerGroups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "exactly one entry in queue mode: {m}");
    assert_eq!(groups[0]["name"], QM);
    assert_eq!(groups[0]["consumed"], true, "{m}");
    assert!(groups[0].get("leaseExpiresAt").is_some(), "the key is present: {m}");
    assert_eq!(groups[0]["leaseExpiresAt"], Value::Null, "{m}");
}

#[tokio::test]
async fn message_detail_shows_a_live_lease_and_every_group() {
    let b = TestBroker::start().await;
    b.push("leased", "Default", &[("x", json!(1))]).await;
    let popped = b.pop_some("leased", "batch=1").await;
    let pid = popped["messages"][0]["partitionId"].as_str().unwrap().to_owned();
    let m = get_ok(&b, &format!("/api/v1/messages/{pid}/x")).await;
    let groups = m["consumerGroups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{m}");
    assert_eq!(groups[0]["consumed"], false, "{m}");
    assert!(groups[0]["leaseExpiresAt"].is_string(), "{m}");

    b.pop_some("leased", "batch=1&subscriptionMode=all&consumerGroup=audit&autoAck=true").await;
    let m = get_ok(&b, &format!("/api/v1/messages/{pid}/x")).await;
    let groups = m["consumerGroups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{m}");
    let audit = groups.iter().find(|g| g["name"] == "audit").unwrap();
    assert_eq!(audit["consumed"], true);
    assert_eq!(audit["leaseExpiresAt"], Value::Null);
    let qm = groups.iter().find(|g| g["name"] == QM).unwrap();
    assert_eq!(qm["consumed"], false);
}

#[tokio::test]
async fn message_detail_refuses_a_bad_partition_id_and_404s_a_missing_message() {
    let b = TestBroker::start().await;
    b.push("d404", "Default", &[("here", json!(1))]).await;
    let (code, body) = b.get("/api/v1/messages/not-a-uuid/here").await;
    assert_eq!(code, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("partitionId"), "{body}");

    let missing = uuid::Uuid::new_v4();
    let (code, body) = b.get(&format!("/api/v1/messages/{missing}/here")).await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["error"], "Message not found", "{body}");

    let pid = listed(&b, "queue=d404").await[0]["partitionId"].as_str().unwrap().to_owned();
    let (code, body) = b.get(&format!("/api/v1/messages/{pid}/elsewhere")).await;
    assert_eq!(code, 404, "{body}");
    for (code, body) in [
        b.delete("/api/v1/messages/not-a-uuid/here").await,
        b.post_empty("/api/v1/messages/not-a-uuid/here/retry").await,
    ] {
        assert_eq!(code, 400, "{body}");
    }
}

#[tokio::test]
async fn deleting_a_message_removes_it_from_the_lane() {
    let b = TestBroker::start().await;
    b.push("del", "Default", &[("m0", json!(0)), ("m1", json!(1))]).await;
    let pid = listed(&b, "queue=del").await[0]["partitionId"].as_str().unwrap().to_owned();

    let (code, body) = b.delete(&format!("/api/v1/messages/{pid}/m0")).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["success"], true, "{body}");
    assert_eq!(body["transactionId"], "m0");
    assert_eq!(body["partitionId"], pid.as_str());
    assert_eq!(body["message"], "Message deleted successfully");
    let (code, _) = b.get(&format!("/api/v1/messages/{pid}/m0")).await;
    assert_eq!(code, 404);
    assert_eq!(txns(&listed(&b, "queue=del").await), ["m1"]);

    // The hole at the head of the lane: the rest is still counted and aged.
    let d = depth(&b, "del").await;
    assert_eq!(d["depth"], 1, "{d}");
    assert!(d["oldestMessageAgeSeconds"].as_f64().unwrap() > 0.0, "{d}");
    let q = get_ok(&b, "/api/v1/resources/queues/del").await;
    assert_eq!(q["totals"]["pending"], 1, "the deleted message is not pending: {q}");
    assert_eq!(q["totals"]["total"], 1, "{q}");
    let o = get_ok(&b, "/api/v1/resources/overview").await;
    assert_eq!(o["messages"]["pending"], 1, "{o}");

    let (code, body) = b.delete(&format!("/api/v1/messages/{pid}/m0")).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["success"], false, "{body}");
    assert_eq!(body["message"], "Message not found");

    assert_eq!(tx_ids(&b.pop_some("del", "batch=10").await), ["m1"]);
}

#[tokio::test]
async fn retrying_a_dead_letter_makes_it_poppable_and_takes_it_out_of_the_dlq() {
    let b = TestBroker::start().await;
    b.configure_ok("rq", json!({"retryLimit": 0})).await;
    b.push("rq", "Default", &[("x", json!({"keep": "me"}))]).await;
    let m = dead_letter(&b, "rq", "batch=1").await;
    let pid = m["partitionId"].as_str().unwrap().to_owned();
    assert_eq!(b.dlq("rq").await["messages"].as_array().unwrap().len(), 1);
    b.pop_none("rq", "batch=1").await;
    assert_eq!(depth(&b, "rq").await["deadLetters"], 1);
    let detail = get_ok(&b, &format!("/api/v1/messages/{pid}/x")).await;
    assert!(detail["errorMessage"].as_str().unwrap().contains("boom for the DLQ"), "{detail}");

    let (code, body) = b.post_empty(&format!("/api/v1/messages/{pid}/x/retry")).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["success"], true, "{body}");
    assert_eq!(body["transactionId"], "x");

    assert_eq!(b.dlq("rq").await["messages"], json!([]));
    assert_eq!(b.scalar("SELECT count(*) FROM queen.dead_letters").await, 0);
    let d = depth(&b, "rq").await;
    assert_eq!((d["depth"].clone(), d["deadLetters"].clone()), (json!(1), json!(0)), "{d}");
    assert!(listed(&b, "queue=rq&status=dead_letter").await.is_empty());

    // Replayed by the dead-letter move: the transaction id names the record.
    let popped = b.pop_some("rq", "batch=10").await;
    assert_eq!(tx_ids(&popped), [body["replayedAs"].as_str().unwrap()]);
    assert!(body["replayedAs"].as_str().unwrap().starts_with("dlq:"), "{body}");
    assert_eq!(popped["messages"][0]["data"], json!({"keep": "me"}));
    assert_eq!(b.ack(&popped["messages"][0], "completed", None).await["success"], true);

    // Not (or no longer) a dead letter.
    let (code, body) = b.post_empty(&format!("/api/v1/messages/{pid}/x/retry")).await;
    assert_eq!(code, 404, "{body}");
    assert!(body["error"].is_string(), "{body}");
}

// -------------------------------------------------------- consumer groups

#[tokio::test]
async fn consumer_groups_list_detail_and_lagging() {
    let b = TestBroker::start().await;
    b.push("cg", "Default", &[("a", json!(1)), ("b", json!(2)), ("c", json!(3))]).await;
    // billing consumes everything; queue mode consumes one of three.
    let popped = b.pop_some("cg", "batch=10&subscriptionMode=all&consumerGroup=billing").await;
    let acks: Vec<Value> = popped["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                        "leaseId": m["leaseId"], "status": "completed"})
        })
        .collect();
    b.ack_batch(json!(acks), Some("billing")).await;
    b.pop_some("cg", "batch=1&autoAck=true").await;

    let all = get_ok(&b, "/api/v1/consumer-groups").await;
    assert!(all.is_array(), "{all}");
    let billing = group_entry(&all, "billing", "cg").expect("billing listed");
    assert_eq!(billing["topics"], json!(["cg"]));
    assert_eq!(billing["totalLag"], 0, "{billing}");
    assert_eq!(billing["partitionsWithLag"], 0, "{billing}");
    assert_eq!(billing["state"], "Stable", "{billing}");
    assert!(billing["subscriptionMode"].is_string() && billing["subscriptionCreatedAt"].is_string());
    let qm = group_entry(&all, QM, "cg").expect("queue mode listed");
    assert_eq!(qm["totalLag"], 2, "{qm}");
    assert_eq!(qm["partitionsWithLag"], 1, "{qm}");
    assert_eq!(qm["state"], "Lagging", "{qm}");
    assert!(qm["maxTimeLag"].as_f64().unwrap() >= 0.0, "{qm}");

    let one = get_ok(&b, "/api/v1/consumer-groups/billing").await;
    let rows = one.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{one}");
    assert_eq!(rows[0]["name"], "billing");
    let parts = rows[0]["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 1, "{one}");
    assert_eq!(parts[0]["partition"], "Default");
    assert_eq!(parts[0]["offsetLag"], 0);
    assert_eq!(parts[0]["leaseActive"], false);
    assert!(parts[0]["lastConsumedAt"].is_string(), "{one}");
    assert_eq!(parts[0]["totalConsumed"], 3, "billing consumed all three: {one}");
    assert_eq!(parts[0]["timeLagSeconds"], 0.0, "nothing left to consume: {one}");
    assert_eq!(parts[0]["workerId"], Value::Null, "no lease held: {one}");
    // Queue mode: one consumed, two behind; a lease held names its holder.
    let held = b.pop_some("cg", "batch=1").await;
    let all = get_ok(&b, "/api/v1/consumer-groups").await;
    let qm_parts = group_entry(&all, QM, "cg").unwrap()["partitions"].clone();
    assert_eq!(qm_parts[0]["totalConsumed"], 1, "{qm_parts}");
    assert!(qm_parts[0]["timeLagSeconds"].as_f64().unwrap() >= 0.0, "{qm_parts}");
    assert_eq!(qm_parts[0]["workerId"], held["leaseId"], "the lease holder: {qm_parts}");

    let lagging = get_ok(&b, "/api/v1/consumer-groups/lagging?minLagSeconds=0").await;
    assert!(group_entry(&lagging, QM, "cg").is_some(), "queue mode lags: {lagging}");
    assert!(group_entry(&lagging, "billing", "cg").is_none(), "billing is caught up: {lagging}");
    let old = get_ok(&b, "/api/v1/consumer-groups/lagging?minLagSeconds=3600").await;
    assert_eq!(old, json!([]), "nothing is an hour behind");
    let (code, body) = b.get("/api/v1/consumer-groups/lagging?minLagSeconds=soon").await;
    assert_eq!(code, 400, "{body}");
}

/// A group named `lagging`: Queen's `GET /consumer-groups/lagging` keeps
/// its meaning, `?group=lagging` reads the group, and DELETE (which Queen
/// does not route for `lagging`) deletes it instead of answering 405.
#[tokio::test]
async fn a_group_named_lagging_is_read_and_deleted_by_paths_that_do_not_clash() {
    let b = TestBroker::start().await;
    b.push("lq", "Default", &[("a", json!(1)), ("b", json!(2))]).await;
    b.pop_some("lq", "batch=1&autoAck=true&subscriptionMode=all&consumerGroup=lagging").await;
    b.pop_some("lq", "batch=1&autoAck=true&subscriptionMode=all&consumerGroup=other").await;

    let lagging = get_ok(&b, "/api/v1/consumer-groups/lagging?minLagSeconds=0").await;
    assert!(group_entry(&lagging, "other", "lq").is_some(), "still the lagging list: {lagging}");
    let named = get_ok(&b, "/api/v1/consumer-groups?group=lagging").await;
    let rows = named.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{named}");
    assert_eq!(
        (rows[0]["name"].clone(), rows[0]["totalLag"].clone()),
        (json!("lagging"), json!(1)),
        "{named}"
    );
    let other = get_ok(&b, "/api/v1/consumer-groups?group=other").await;
    assert_eq!(other.as_array().unwrap().len(), 1, "{other}");
    assert_eq!(get_ok(&b, "/api/v1/consumer-groups").await.as_array().unwrap().len(), 2);

    let (code, body) = b.delete("/api/v1/consumer-groups/lagging").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (body["consumerGroup"].clone(), body["deletedPartitions"].clone()),
        (json!("lagging"), json!(1))
    );
    assert_eq!(get_ok(&b, "/api/v1/consumer-groups?group=lagging").await, json!([]));
    assert_eq!(get_ok(&b, "/api/v1/consumer-groups?group=other").await.as_array().unwrap().len(), 1);
}

// ----------------------------------------------------------------- status

#[tokio::test]
async fn status_summarises_and_stats_refresh_answers() {
    let b = TestBroker::start().await;
    b.push("s1", "Default", &[("a", json!(1)), ("b", json!(1))]).await;
    let s = get_ok(&b, "/api/v1/status").await;
    assert_eq!(s["overview"]["queues"], 1, "{s}");
    assert_eq!(s["maintenance"]["maintenanceMode"], false, "{s}");
    assert_eq!(s["maintenance"]["popMaintenanceMode"], false, "{s}");
    let q = s["queues"].as_array().unwrap().iter().find(|q| q["queue"] == "s1").unwrap().clone();
    assert_eq!(q["depth"], 2, "{s}");
    assert!(s["database"]["version"].is_string(), "{s}");

    let (code, body) = b.post_empty("/api/v1/stats/refresh").await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["success"], true, "{body}");
    let (code, _) = b.post("/api/v1/stats/refresh", &json!({})).await;
    assert_eq!(code, 200);
}

// ------------------------------------------------------------ maintenance

/// A push of one item; answers the raw response.
async fn raw_push(b: &TestBroker, queue: &str, tx: &str) -> reqwest::Response {
    b.http
        .post(b.url("/api/v1/push"))
        .json(
            &json!({"items": [{"queue": queue, "partition": "Default", "transactionId": tx, "payload": 1}]}),
        )
        .send()
        .await
        .unwrap()
}

async fn switch(b: &TestBroker, path: &str, enabled: bool) -> Value {
    let (code, body) = b.post(path, &json!({"enabled": enabled})).await;
    assert_eq!(code, 200, "{path}: {body}");
    body
}

#[tokio::test]
async fn push_maintenance_answers_503_writes_nothing_and_every_broker_sees_it() {
    let b = TestBroker::start().await;
    b.push("mq", "Default", &[("before", json!(1))]).await;
    let on = switch(&b, "/api/v1/system/maintenance", true).await;
    assert_eq!(on["maintenanceMode"], true, "{on}");
    assert_eq!(get_ok(&b, "/api/v1/system/maintenance").await["maintenanceMode"], true);
    let rows = b.written_rows().await;

    let resp = raw_push(&b, "mq", "during").await;
    assert_eq!(resp.status().as_u16(), 503);
    assert!(resp.headers().get("retry-after").is_some(), "Retry-After is sent");
    let body: Value = resp.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("maintenance"), "{body}");
    // A push that would create a queue is refused too.
    assert_eq!(raw_push(&b, "brand-new", "during").await.status().as_u16(), 503);

    let resp = b
        .http
        .post(b.url("/api/v1/transaction"))
        .json(&json!({"operations": [{"type": "push", "items": [{"queue": "mq", "transactionId": "tx", "payload": 1}]}],
                      "requiredLeases": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert!(resp.headers().get("retry-after").is_some());

    // The switch lives in the database: a second broker refuses too.
    let b2 = TestBroker::on(&b.db).await;
    assert_eq!(raw_push(&b2, "mq", "other").await.status().as_u16(), 503);
    assert_eq!(b.written_rows().await, rows, "nothing written while paused");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages").await, 1);

    // Pops still work during push maintenance.
    assert_eq!(tx_ids(&b.pop_some("mq", "batch=10&autoAck=true").await), ["before"]);

    // Switched off on the other broker.
    let off = switch(&b2, "/api/v1/system/maintenance", false).await;
    assert_eq!(off["maintenanceMode"], false, "{off}");
    assert_eq!(raw_push(&b, "mq", "after").await.status().as_u16(), 201);
    assert_eq!(tx_ids(&b.pop_some("mq", "batch=10").await), ["after"]);
}

#[tokio::test]
async fn pop_maintenance_answers_204_with_messages_waiting() {
    let b = TestBroker::start().await;
    b.push("pm", "Default", &[("a", json!(1)), ("b", json!(2))]).await;
    let on = switch(&b, "/api/v1/system/maintenance/pop", true).await;
    assert_eq!(on["popMaintenanceMode"], true, "{on}");
    assert_eq!(on["maintenanceMode"], false, "{on}");
    assert_eq!(get_ok(&b, "/api/v1/system/maintenance/pop").await["popMaintenanceMode"], true);

    b.pop_none("pm", "batch=10").await;
    b.pop_none("pm", "batch=10&subscriptionMode=all&consumerGroup=g").await;
    let b2 = TestBroker::on(&b.db).await;
    b2.pop_none("pm", "batch=10").await;
    let (code, _) = b.get("/api/v1/pop/queue/pm?wait=true&timeout=300").await;
    assert_eq!(code, 204);
    // Pushes are still accepted.
    b.push("pm", "Default", &[("c", json!(3))]).await;

    switch(&b2, "/api/v1/system/maintenance/pop", false).await;
    assert_eq!(tx_ids(&b.pop_some("pm", "batch=10").await), ["a", "b", "c"]);
}

#[tokio::test]
async fn a_bad_maintenance_body_is_400() {
    let b = TestBroker::start().await;
    for path in ["/api/v1/system/maintenance", "/api/v1/system/maintenance/pop"] {
        for bad in [json!({}), json!({"enabled": "yes"}), json!({"enabled": 1}), json!({"enabled": null})] {
            let (code, body) = b.post(path, &bad).await;
            assert_eq!(code, 400, "{path} {bad}: {body}");
            assert!(body["error"].as_str().unwrap().contains("enabled"), "{path} {bad}: {body}");
        }
        for raw in ["[true]", "true", "{not json", ""] {
            let (code, body) = b.post_raw(path, raw).await;
            assert_eq!(code, 400, "{path} {raw:?}: {body}");
            assert!(body["error"].is_string(), "{path} {raw:?}: {body}");
        }
    }
    let m = get_ok(&b, "/api/v1/system/maintenance").await;
    assert_eq!((m["maintenanceMode"].clone(), m["popMaintenanceMode"].clone()), (json!(false), json!(false)));
}

// ---------------------------------------------------------------- metrics

#[tokio::test]
async fn metrics_json_reports_pool_and_uptime() {
    let b = TestBroker::start().await;
    let m = get_ok(&b, "/metrics").await;
    assert!(m["uptimeSeconds"].is_number(), "{m}");
    assert!(m["database"]["poolSize"].is_number(), "{m}");
    assert!(m["database"]["idleConnections"].is_number(), "{m}");
    assert!(m["database"]["maxConnections"].as_u64().unwrap() > 0, "{m}");
    assert!(m["longPolls"]["queuesWaiting"].is_number(), "{m}");
    assert!(m["kv"]["rowsPruned"].is_number(), "{m}");
}

#[tokio::test]
async fn prometheus_labels_requests_by_route_template_and_counts_kv_verdicts() {
    let b = TestBroker::start().await;
    let (_, before) = scrape(&b).await;
    let exists = |t: &str| sample(t, "queen_kv_verdicts_total", &["verdict=\"exists\""]).unwrap_or(0.0);
    let precondition =
        |t: &str| sample(t, "queen_kv_verdicts_total", &["verdict=\"precondition_exists\""]).unwrap_or(0.0);

    // A path route with a concrete key.
    let resp = b
        .http
        .put(b.url("/api/v1/kv/metrics-ns/secret/key-4711"))
        .json(&json!({"value": 1, "forever": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let (code, _) = b.get("/api/v1/kv/metrics-ns/secret/key-4711").await;
    assert_eq!(code, 200);

    // A lost putIfAbsent, then a lost required one.
    let pia = json!({"op": "putIfAbsent", "ns": "metrics-ns", "key": "once", "value": 1, "forever": true});
    for _ in 0..2 {
        let (code, body) = b.post("/api/v1/kv", &json!({"operations": [pia]})).await;
        assert_eq!(code, 200, "{body}");
    }
    let mut required = pia.clone();
    required["required"] = json!(true);
    let (code, body) = b.post("/api/v1/kv", &json!({"operations": [required]})).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["reason"], "kv_precondition", "{body}");

    let (ct, text) = scrape(&b).await;
    assert!(ct.starts_with("text/plain"), "{ct}");
    let kv_route = "route=\"/api/v1/kv/{ns}/{*key}\"";
    assert!(
        sample(&text, "queen_http_requests_total", &[kv_route, "method=\"PUT\"", "status=\"200\""])
            .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    assert!(sample(&text, "queen_http_requests_total", &[kv_route, "method=\"GET\""]).is_some(), "{text}");
    assert!(
        sample(&text, "queen_http_requests_total", &["route=\"/api/v1/kv\"", "method=\"POST\""])
            .unwrap_or(0.0)
            >= 3.0,
        "{text}"
    );
    assert!(
        !text.contains("key-4711") && !text.contains("metrics-ns"),
        "no concrete key in a label:\n{text}"
    );
    // A latency histogram by route and status.
    assert!(
        sample(&text, "queen_http_request_duration_seconds_count", &[kv_route, "status=\"200\""])
            .unwrap_or(0.0)
            >= 2.0,
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("queen_http_request_duration_seconds_bucket{")
            && l.contains(kv_route)
            && l.contains("le=\"")),
        "{text}"
    );
    assert!(exists(&text) >= exists(&before) + 1.0, "a lost putIfAbsent is verdict=exists:\n{text}");
    assert!(
        precondition(&text) >= precondition(&before) + 1.0,
        "a lost required op is verdict=precondition_exists:\n{text}"
    );
    assert!(
        sample(&text, "queen_kv_verdicts_total", &["op=\"putIfAbsent\"", "verdict=\"applied\""])
            .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
}

#[tokio::test]
async fn prometheus_reports_depths_dlq_pool_sweeper_and_long_polls() {
    let b = TestBroker::start().await;
    b.configure_ok("pd", json!({"retryLimit": 0})).await;
    b.push("pd", "Default", &[("a", json!(1)), ("b", json!(2)), ("c", json!(3))]).await;
    dead_letter(&b, "pd", "batch=1").await;
    b.configure_ok("pdelay", json!({"delayedProcessing": 3600})).await;
    b.push("pdelay", "Default", &[("x", json!(1))]).await;

    let (_, text) = scrape(&b).await;
    let real = depth(&b, "pd").await["depth"].as_f64().unwrap();
    assert_eq!(real, 2.0);
    assert_eq!(sample(&text, "queen_queue_depth", &["queue=\"pd\""]), Some(real), "{text}");
    assert_eq!(sample(&text, "queen_queue_depth", &["queue=\"pdelay\""]), Some(0.0), "{text}");
    assert!(
        sample(&text, "queen_queue_oldest_message_age_seconds", &["queue=\"pd\""]).unwrap() > 0.0,
        "{text}"
    );
    assert_eq!(sample(&text, "queen_queue_oldest_message_age_seconds", &["queue=\"pdelay\""]), Some(0.0));
    assert_eq!(sample(&text, "queen_dlq_depth", &["queue=\"pd\""]), Some(1.0), "{text}");
    assert_eq!(sample(&text, "queen_dlq_depth", &["queue=\"pdelay\""]), Some(0.0), "{text}");
    assert!(sample(&text, "queen_db_pool_connections", &[]).unwrap() >= 1.0, "{text}");
    assert!(sample(&text, "queen_kv_sweeper_rows_pruned_total", &[]).is_some(), "{text}");
    assert_eq!(sample(&text, "queen_long_poll_queues_waiting", &[]), Some(0.0), "{text}");

    // A long poll that is waiting shows up in the gauge.
    let api = b.api();
    let poll = tokio::spawn(async move { api.get("/api/v1/pop/queue/idle?wait=true&timeout=20000").await });
    eventually(Duration::from_secs(10), "a waiting long poll", || async {
        let (_, text) = scrape(&b).await;
        (sample(&text, "queen_long_poll_queues_waiting", &[]).unwrap_or(0.0) >= 1.0).then_some(())
    })
    .await;
    b.push("idle", "Default", &[("wake", json!(1))]).await;
    let (code, body) = poll.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(tx_ids(&body), ["wake"]);
}

// ------------------------------------------------------------- request id

#[tokio::test]
async fn every_response_carries_a_request_id_and_a_client_one_is_echoed() {
    let b = TestBroker::start().await;
    let id_of = |r: &reqwest::Response| {
        r.headers().get("x-request-id").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default()
    };
    let mut seen = Vec::new();
    for path in ["/health", "/api/v1/resources/overview", "/api/v1/messages?status=bad", "/no/such/route"] {
        let r = b.http.get(b.url(path)).send().await.unwrap();
        let id = id_of(&r);
        assert!(!id.is_empty(), "{path} answered without x-request-id");
        seen.push(id);
    }
    let r = b.http.post(b.url("/api/v1/push")).body("{not json").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 400);
    seen.push(id_of(&r));
    assert!(!seen.last().unwrap().is_empty());
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), seen.len(), "a fresh id per request: {seen:?}");

    for path in ["/health", "/api/v1/resources/queues/missing"] {
        let r = b.http.get(b.url(path)).header("x-request-id", "client-chosen-42").send().await.unwrap();
        assert_eq!(id_of(&r), "client-chosen-42", "{path}");
    }
}

#[tokio::test]
async fn deleted_messages_leave_holes_that_pop_skips_without_starving_other_lanes() {
    let b = TestBroker::start().await;
    b.push("holes", "a", &[("a1", json!(1))]).await;
    b.push("holes", "b", &[("b1", json!(1)), ("b2", json!(2))]).await;
    let first = b.pop_partition("holes", "a", "batch=1").await;
    assert_eq!(first.0, 200);
    b.ack(&first.1["messages"][0], "retry", None).await;
    let pid = first.1["partitionId"].as_str().expect("pid").to_owned();
    // Lane a now holds only a hole: a1 is deleted.
    let (status, _) = b.delete(&format!("/api/v1/messages/{pid}/a1")).await;
    assert_eq!(status, 200);
    let mut got = Vec::new();
    for _ in 0..4 {
        let (status, body) = b.pop("holes", "batch=10").await;
        if status == 200 {
            got.extend(TestBroker::tx_ids(&body));
            b.ack(
                &body["messages"][body["messages"].as_array().map(|m| m.len() - 1).unwrap_or(0)],
                "completed",
                None,
            )
            .await;
        }
    }
    assert_eq!(got, ["b1", "b2"], "lane b is delivered although lane a is all holes");
    // And the head of a delayed lane being deleted does not block it forever.
    b.configure_ok("holes-delayed", json!({"delayedProcessing": 1})).await;
    b.push("holes-delayed", "Default", &[("d1", json!(1)), ("d2", json!(2))]).await;
    let pid: String = {
        let sql = b.sql().await;
        sql.query_one(
            "SELECT p.id::text FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'holes-delayed'",
            &[],
        )
        .await
        .expect("pid")
        .get(0)
    };
    let (status, _) = b.delete(&format!("/api/v1/messages/{pid}/d1")).await;
    assert_eq!(status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let (status, body) = b.pop("holes-delayed", "batch=10").await;
    assert_eq!(status, 200, "the delayed lane is delivered after its head was deleted");
    assert_eq!(TestBroker::tx_ids(&body), ["d2"]);
}

#[tokio::test]
async fn openapi_json_is_served_and_is_the_generated_document() {
    let b = TestBroker::start().await;
    let r = b.http.get(b.url("/openapi.json")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    let served: Value = r.json().await.unwrap();
    let generated: Value = serde_json::from_str(&queen_server::openapi_json()).unwrap();
    assert_eq!(served, generated);
    assert_eq!(served["openapi"], "3.1.0");
    assert!(served["paths"]["/api/v1/kv"]["post"]["requestBody"].is_object());
}

#[tokio::test]
async fn a_wrong_method_is_a_json_405_with_a_code() {
    let b = TestBroker::start().await;
    let r = b.http.put(b.url("/api/v1/push")).body("{}").send().await.unwrap();
    assert_eq!(r.status(), 405);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["code"], "method_not_allowed");
    let (code, body) = b.get("/no/such/route").await;
    assert_eq!((code, body["code"].as_str()), (404, Some("not_found")));
}

#[tokio::test]
async fn depth_per_partition_for_queue_mode_and_for_one_group() {
    let b = TestBroker::start().await;
    b.push("d", "p1", &[("a", json!(1)), ("b", json!(2))]).await;
    b.push("d", "p2", &[("c", json!(3))]).await;
    // Group g retires p1 entirely; queue mode consumes nothing.
    let popped = b.pop_partition("d", "p1", "batch=10&consumerGroup=g&subscriptionMode=all").await.1;
    let last = popped["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(b.ack(&last, "completed", Some("g")).await["success"], true);

    let whole = get_ok(&b, "/api/v1/resources/queues/d/depth").await;
    assert_eq!(whole["group"], Value::Null);
    assert_eq!(
        (whole["pending"].as_i64(), whole["partitionsPending"].as_i64()),
        (Some(3), Some(2)),
        "{whole}"
    );
    assert_eq!(
        whole["partitions"],
        json!([{"partition": "p1", "pending": 2}, {"partition": "p2", "pending": 1}])
    );
    assert_eq!(whole["depth"], 3, "the old field keeps its meaning: {whole}");

    let mine = get_ok(&b, "/api/v1/resources/queues/d/depth?group=g").await;
    assert_eq!(mine["group"], "g");
    assert_eq!((mine["pending"].as_i64(), mine["effectivePending"].as_i64()), (Some(1), Some(1)), "{mine}");
    assert_eq!(
        mine["partitions"],
        json!([{"partition": "p1", "pending": 0}, {"partition": "p2", "pending": 1}])
    );
    assert_eq!(mine["conflation"], false);
}

#[tokio::test]
async fn traces_are_recorded_against_a_message_and_found_by_message_and_by_name() {
    let b = TestBroker::start().await;
    b.push("t", "Default", &[("m1", json!({"n": 1})), ("m2", json!({"n": 2}))]).await;
    let popped = b.pop_some("t", "batch=2").await;
    let pid = popped["messages"][0]["partitionId"].as_str().unwrap().to_owned();
    for (tx, names, data) in [
        ("m1", json!("checkout"), json!({"step": 1})),
        ("m1", json!(["checkout", "audit"]), json!({"step": 2})),
        ("m2", Value::Null, json!("plain")),
    ] {
        let body = json!({"transactionId": tx, "partitionId": pid, "consumerGroup": null,
                          "traceNames": names, "eventType": "info", "data": data});
        let (code, answer) = b.post("/api/v1/traces", &body).await;
        assert_eq!(code, 201, "{answer}");
        assert_eq!(answer["success"], true);
        assert!(answer["traceId"].is_string());
    }
    let mine = get_ok(&b, &format!("/api/v1/traces/{pid}/m1")).await;
    let steps: Vec<_> =
        mine["traces"].as_array().unwrap().iter().map(|t| t["data"]["step"].clone()).collect();
    assert_eq!(steps, [json!(1), json!(2)], "oldest first: {mine}");
    assert_eq!(mine["traces"][1]["trace_names"], json!(["audit", "checkout"]));

    let named = get_ok(&b, "/api/v1/traces/by-name/checkout?limit=1").await;
    assert_eq!(named["total"], 2, "{named}");
    assert_eq!(named["traces"].as_array().unwrap().len(), 1);
    assert_eq!(named["traces"][0]["data"], json!({"step": 2}), "newest first: {named}");
    assert_eq!(named["traces"][0]["queue_name"], "t");
    assert_eq!(named["traces"][0]["message_payload"], json!({"n": 1}));

    let names = get_ok(&b, "/api/v1/traces/names").await;
    assert_eq!(names["total"], 2, "{names}");
    let checkout =
        names["trace_names"].as_array().unwrap().iter().find(|n| n["trace_name"] == "checkout").unwrap();
    assert_eq!((checkout["trace_count"].as_i64(), checkout["message_count"].as_i64()), (Some(2), Some(1)));

    // Refusals: no message, no data, a bad id; nothing is written.
    let (code, body) =
        b.post("/api/v1/traces", &json!({"transactionId": "nope", "partitionId": pid, "data": {}})).await;
    assert_eq!((code, body["code"].as_str()), (404, Some("not_found")), "{body}");
    let (code, body) = b.post("/api/v1/traces", &json!({"transactionId": "m1", "partitionId": pid})).await;
    assert_eq!((code, body["field"].as_str()), (400, Some("data")), "{body}");
    let (code, body) =
        b.post("/api/v1/traces", &json!({"transactionId": "m1", "partitionId": "x", "data": 1})).await;
    assert_eq!((code, body["field"].as_str()), (400, Some("partitionId")), "{body}");
    assert_eq!(get_ok(&b, "/api/v1/traces/names").await["total"], 2);

    // Deleting the queue takes its traces with it.
    b.delete("/api/v1/resources/queues/t").await;
    assert_eq!(get_ok(&b, "/api/v1/traces/names").await["total"], 0);
}

#[tokio::test]
async fn status_queue_detail_analytics_and_process_metrics() {
    let b = TestBroker::start().await;
    b.push("s", "Default", &[("a", json!(1)), ("b", json!(2)), ("c", json!(3))]).await;
    let detail = get_ok(&b, "/api/v1/status/queues/s").await;
    assert_eq!(detail["queue"], "s");
    assert_eq!(detail["totals"]["total"], 3, "{detail}");
    assert_eq!(detail["depth"]["pending"], 3, "{detail}");
    let (code, _) = b.get("/api/v1/status/queues/none").await;
    assert_eq!(code, 404);

    let a = get_ok(&b, "/api/v1/status/analytics?interval=minute&queue=s").await;
    assert_eq!(a["interval"], "minute");
    assert_eq!(a["totals"]["pushed"], 3, "{a}");
    assert_eq!(
        a["buckets"].as_array().unwrap().iter().map(|x| x["pushed"].as_i64().unwrap()).sum::<i64>(),
        3
    );
    let (code, body) = b.get("/api/v1/status/analytics?interval=week").await;
    assert_eq!((code, body["field"].as_str()), (400, Some("interval")), "{body}");
    let (code, body) = b.get("/api/v1/status/analytics?from=yesterday-ish").await;
    assert_eq!((code, body["field"].as_str()), (400, Some("from")), "{body}");
    let future =
        get_ok(&b, "/api/v1/status/analytics?from=2999-01-01T00:00:00Z&to=2999-01-02T00:00:00Z").await;
    assert_eq!(future["totals"]["pushed"], 0);

    let sys = get_ok(&b, "/api/v1/analytics/system-metrics").await;
    assert!(sys["process"]["rssBytes"].as_u64().unwrap() > 1_000_000, "{sys}");
    assert!(sys["database"]["connections"].as_i64().unwrap() >= 1, "{sys}");
    let workers = get_ok(&b, "/api/v1/analytics/worker-metrics").await;
    assert_eq!(workers["workers"][0]["pid"], std::process::id());
}

#[tokio::test]
async fn seek_with_no_body_names_the_fields_it_needs() {
    let b = TestBroker::start().await;
    b.push("k", "Default", &[("a", json!(1))]).await;
    b.pop_some("k", "consumerGroup=g&subscriptionMode=all").await;
    let (code, body) = b.post_empty("/api/v1/consumer-groups/g/queues/k/seek").await;
    assert_eq!(code, 400, "{body}");
    let msg = body["error"].as_str().unwrap();
    assert!(msg.contains("toEnd") && msg.contains("timestamp"), "{body}");
}

/// GET /metrics/prometheus carries the batch-size histogram of the push and
/// KV get batchers: every push and every get lands in exactly one batch.
#[tokio::test]
async fn prometheus_reports_batch_sizes_of_pushes_and_gets() {
    let b = TestBroker::start().await;
    let api = b.api();
    for i in 0..3 {
        b.push("batched", "Default", &[(&format!("m{i}"), json!(i))]).await;
    }
    let (status, _) = api.post("/api/v1/kv", &json!([{"op": "get", "ns": "n", "key": "k"}])).await;
    assert_eq!(status, 200);
    let (_, text) = scrape(&b).await;
    let requests = sample(&text, "queen_batch_size_sum", &["kind=\"push\""]).unwrap();
    assert_eq!(requests, 3.0, "{text}");
    let batches = sample(&text, "queen_batch_size_count", &["kind=\"push\""]).unwrap();
    assert!((1.0..=3.0).contains(&batches));
    let all = sample(&text, "queen_batch_size_bucket", &["kind=\"push\"", "le=\"+Inf\""]).unwrap();
    assert_eq!(all, batches, "the +Inf bucket counts every batch");
    assert_eq!(sample(&text, "queen_batch_size_sum", &["kind=\"kv_get\""]), Some(1.0));
    for kind in ["push", "ack", "kv_get", "kv_write"] {
        let label = format!("kind=\"{kind}\"");
        assert_eq!(sample(&text, "queen_batch_retried_total", &[&label]), Some(0.0), "{kind}: {text}");
    }
}

#[tokio::test]
async fn status_queues_pages_by_name_with_limit_and_offset() {
    let b = TestBroker::start().await;
    for q in ["q-c", "q-a", "q-e", "q-b", "q-d"] {
        b.push(q, "Default", &[("t", json!(1))]).await;
    }
    let names = |v: &Value| -> Vec<String> {
        v["queues"].as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap().to_owned()).collect()
    };
    let all = get_ok(&b, "/api/v1/status/queues").await;
    assert_eq!(names(&all), ["q-a", "q-b", "q-c", "q-d", "q-e"]);
    assert_eq!(all["total"], 5);
    let page = get_ok(&b, "/api/v1/status/queues?limit=2&offset=1").await;
    assert_eq!(names(&page), ["q-b", "q-c"]);
    assert_eq!(page["total"], 5, "total counts every queue");
    assert_eq!(page["queues"][0]["messages"]["total"], 1, "counts come with the page: {page}");
    let past = get_ok(&b, "/api/v1/status/queues?limit=2&offset=10").await;
    assert_eq!(names(&past), Vec::<String>::new());
    for bad in ["limit=0", "limit=x", "offset=-1", "limit=10001"] {
        let (code, body) = b.get(&format!("/api/v1/status/queues?{bad}")).await;
        assert_eq!(code, 400, "{bad}: {body}");
    }
}
