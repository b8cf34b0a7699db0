//! Acks as offset commits: POST /api/v1/ack and /api/v1/ack/batch.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::{tx_ids, txids, TestBroker};
use serde_json::{json, Value};

/// The batch-ack item for message `m` with `status`, under the message's lease.
fn item(m: &Value, status: &str) -> Value {
    json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"],
           "status": status, "error": null})
}

fn msgs(pop: &Value) -> Vec<Value> {
    pop["messages"].as_array().unwrap().clone()
}

async fn cursor(b: &TestBroker, group: &str) -> (i64, i64, bool) {
    let client = b.sql().await;
    let row = client
        .query_one(
            "SELECT next_seq, retry_count::bigint, lease_id IS NOT NULL FROM queen.cursors WHERE consumer_group = $1",
            &[&group],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

#[tokio::test]
async fn completed_ack_of_the_whole_batch_releases_the_lease() {
    let b = TestBroker::start().await;
    b.push("acks", "Default", &[("t1", json!(1))]).await;
    let popped = b.pop_some("acks", "batch=10").await;
    let (code, body) = b
        .post(
            "/api/v1/ack",
            &json!({"transactionId": "t1", "partitionId": popped["partitionId"], "leaseId": popped["leaseId"],
                    "status": "completed", "error": null, "consumerGroup": null}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(
        body,
        json!([{"index": 0, "transactionId": "t1", "success": true, "error": null, "leaseReleased": true,
                "dlq": false, "noop": false}])
    );
    assert_eq!(cursor(&b, "__QUEUE_MODE__").await, (1, 0, false));
    b.pop_none("acks", "batch=10").await;
}

#[tokio::test]
async fn acking_message_n_completes_the_earlier_ones_and_keeps_the_lease_until_the_batch_end() {
    let b = TestBroker::start().await;
    b.push_txids("acks", "Default", &txids("t", 4)).await;
    let popped = b.pop_some("acks", "batch=3").await;
    let m = msgs(&popped);
    assert_eq!(tx_ids(&popped), ["t-0", "t-1", "t-2"]);

    let r = b.ack(&m[1], "completed", None).await;
    assert_eq!(r["success"], true);
    assert_eq!(r["leaseReleased"], false, "the batch is not settled yet");
    assert_eq!(cursor(&b, "__QUEUE_MODE__").await, (2, 0, true), "t-0 and t-1 are committed");
    b.pop_none("acks", "batch=10").await;
    // Extending still works: the lease is live.
    let (_, ext) =
        b.post_empty(&format!("/api/v1/lease/{}/extend", popped["leaseId"].as_str().unwrap())).await;
    assert_eq!(ext["success"], true);

    let r = b.ack(&m[0], "completed", None).await;
    assert_eq!(
        (r["success"].clone(), r["noop"].clone()),
        (json!(true), json!(true)),
        "t-0 was committed by t-1"
    );

    let r = b.ack(&m[2], "completed", None).await;
    assert_eq!(r["leaseReleased"], true);
    assert_eq!(tx_ids(&b.pop_some("acks", "batch=10").await), ["t-3"]);
}

#[tokio::test]
async fn batch_ack_clamps_the_cursor_before_the_lowest_nack() {
    let b = TestBroker::start().await;
    let ids: Vec<String> = (1..=5).map(|i| format!("tx-{i}")).collect();
    b.push_txids("clamp", "Default", &ids).await;
    let popped = b.pop_some("clamp", "batch=5").await;
    let m = msgs(&popped);
    let acks: Vec<Value> =
        m.iter().enumerate().map(|(i, msg)| item(msg, if i == 1 { "failed" } else { "completed" })).collect();
    let res = b.ack_batch(json!(acks), None).await;
    assert_eq!(res.as_array().unwrap().len(), 5);
    for (i, r) in res.as_array().unwrap().iter().enumerate() {
        assert_eq!(r["index"], i);
        assert_eq!(r["transactionId"], ids[i]);
    }
    assert_eq!(res[1]["success"], true);
    assert_eq!(res[1]["leaseReleased"], true);
    assert_eq!(cursor(&b, "__QUEUE_MODE__").await, (1, 1, false), "cursor stops just before tx-2; one retry");
    let again = b.pop_some("clamp", "batch=10").await;
    assert_eq!(
        tx_ids(&again),
        ["tx-2", "tx-3", "tx-4", "tx-5"],
        "the nack and everything after it redelivers"
    );
    // ...and once: settling the redelivery empties the queue.
    let last = msgs(&again).pop().unwrap();
    assert_eq!(b.ack(&last, "completed", None).await["leaseReleased"], true);
    b.pop_none("clamp", "batch=10").await;
    assert_eq!(cursor(&b, "__QUEUE_MODE__").await, (5, 0, false), "a settled batch resets the retry counter");
}

#[tokio::test]
async fn retry_status_does_not_count_a_retry_and_never_dead_letters() {
    let b = TestBroker::start().await;
    b.configure_ok("retries", json!({"retryLimit": 0})).await;
    b.push("retries", "Default", &[("r1", json!(1))]).await;
    for _ in 0..3 {
        let popped = b.pop_some("retries", "batch=1").await;
        assert_eq!(tx_ids(&popped), ["r1"]);
        let r = b.ack(&popped["messages"][0], "retry", None).await;
        assert_eq!(r["success"], true);
        assert_eq!(r["dlq"], false);
        assert_eq!(cursor(&b, "__QUEUE_MODE__").await, (0, 0, false));
    }
    assert_eq!(b.dlq("retries").await["total"], 0);
    // The counter really is 0: with retryLimit 0 the first failure dead-letters.
    let popped = b.pop_some("retries", "batch=1").await;
    assert_eq!(b.ack(&popped["messages"][0], "failed", None).await["dlq"], true);
    b.pop_none("retries", "batch=1").await;
}

#[tokio::test]
async fn nack_below_the_cursor_is_refused_as_already_committed() {
    let b = TestBroker::start().await;
    b.push_txids("below", "Default", &txids("t", 2)).await;
    let m = msgs(&b.pop_some("below", "batch=2").await);
    assert_eq!(b.ack(&m[1], "completed", None).await["leaseReleased"], true);
    for status in ["failed", "retry", "dlq"] {
        let r = b.ack(&m[0], status, None).await;
        assert_eq!(r["success"], false, "{status}: {r}");
        assert!(r["error"].as_str().unwrap().to_lowercase().contains("committed"), "{r}");
    }
    assert_eq!(cursor(&b, "__QUEUE_MODE__").await, (2, 0, false), "nothing moved");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.dead_letters").await, 0);
}

#[tokio::test]
async fn completed_ack_below_the_cursor_is_a_noop_and_an_in_range_ack_is_not() {
    let b = TestBroker::start().await;
    b.push_txids("noop", "Default", &txids("t", 3)).await;
    let m = msgs(&b.pop_some("noop", "batch=3").await);
    let first = b.ack(&m[0], "completed", None).await;
    assert_eq!(first["success"], true);
    assert_eq!(first["noop"], false);
    assert_eq!(first["error"], json!(null));
    let again = b.ack(&m[0], "completed", None).await;
    assert_eq!(again["success"], true);
    assert_eq!(again["noop"], true);
    assert_eq!(again["error"], json!(null));
    // A batch mixing both.
    let res = b.ack_batch(json!([item(&m[0], "completed"), item(&m[2], "completed")]), None).await;
    assert_eq!(res[0]["noop"], true);
    assert_eq!(res[1]["noop"], false);
    assert_eq!(res[1]["leaseReleased"], true);
}

#[tokio::test]
async fn ghost_transaction_id_is_unresolvable_and_does_not_burn_the_lease() {
    let b = TestBroker::start().await;
    b.push_txids("ghost", "Default", &txids("t", 2)).await;
    let popped = b.pop_some("ghost", "batch=2").await;
    let m = msgs(&popped);
    for status in ["completed", "failed"] {
        let mut ghost = item(&m[0], status);
        ghost["transactionId"] = json!("never-pushed");
        let (code, body) = b.post("/api/v1/ack", &ghost).await;
        assert_eq!(code, 200);
        assert_eq!(body[0]["success"], false);
        assert!(body[0]["error"].as_str().unwrap().contains("unresolv"), "{body}");
    }
    assert_eq!(cursor(&b, "__QUEUE_MODE__").await, (0, 0, true), "the lease is intact");
    let res = b.ack_batch(json!([item(&m[0], "completed"), item(&m[1], "completed")]), None).await;
    assert!(res.as_array().unwrap().iter().all(|r| r["success"] == true), "{res}");
    assert_eq!(res[1]["leaseReleased"], true);
    b.pop_none("ghost", "batch=2").await;
}

#[tokio::test]
async fn ack_under_a_wrong_lease_fails_each_item_naming_the_lease() {
    let b = TestBroker::start().await;
    b.push_txids("fence", "Default", &txids("t", 2)).await;
    let m = msgs(&b.pop_some("fence", "batch=2").await);
    let wrong = uuid::Uuid::new_v4().to_string();
    let acks: Vec<Value> = m
        .iter()
        .map(|x| {
            let mut a = item(x, "completed");
            a["leaseId"] = json!(wrong);
            a
        })
        .collect();
    let res = b.ack_batch(json!(acks), None).await;
    for r in res.as_array().unwrap() {
        assert_eq!(r["success"], false);
        assert!(r["error"].as_str().unwrap().contains("lease"), "{r}");
    }
    assert_eq!(cursor(&b, "__QUEUE_MODE__").await, (0, 0, true));
    let res = b.ack_batch(json!([item(&m[0], "failed"), item(&m[1], "completed")]), None).await;
    assert_eq!(res[0]["success"], true, "the real lease still works: {res}");
    assert_eq!(cursor(&b, "__QUEUE_MODE__").await, (0, 1, false));
}

#[tokio::test]
async fn lease_less_ack_is_not_fenced_and_advances_the_cursor() {
    let b = TestBroker::start().await;
    b.push_txids("leaseless", "Default", &txids("t", 3)).await;
    let popped = b.pop_some("leaseless", "batch=3").await;
    let pid = popped["partitionId"].clone();
    let (code, body) = b
        .post(
            "/api/v1/ack",
            &json!({"transactionId": "t-1", "partitionId": pid, "status": "completed", "error": null}),
        )
        .await;
    assert_eq!(code, 200);
    assert_eq!(body[0]["success"], true, "{body}");
    assert_eq!(cursor(&b, "__QUEUE_MODE__").await.0, 2);
    let res = b
        .ack_batch(
            json!([{"transactionId": "t-2", "partitionId": pid, "status": "completed", "error": null}]),
            None,
        )
        .await;
    assert_eq!(res[0]["success"], true);
    assert_eq!(
        cursor(&b, "__QUEUE_MODE__").await,
        (3, 0, false),
        "reaching the batch end releases the lease"
    );
    b.pop_none("leaseless", "batch=3").await;
}

#[tokio::test]
async fn batch_ack_of_1000_items_settles_a_1000_message_pop() {
    let b = TestBroker::start().await;
    b.push_txids("thousand", "Default", &txids("t", 1000)).await;
    let popped = b.pop_some("thousand", "batch=1000").await;
    let acks: Vec<Value> = msgs(&popped).iter().map(|m| item(m, "completed")).collect();
    let res = b.ack_batch(json!(acks), None).await;
    let res = res.as_array().unwrap();
    assert_eq!(res.len(), 1000);
    assert!(res.iter().all(|r| r["success"] == true && r["error"].is_null()));
    assert_eq!(res[999]["leaseReleased"], true);
    b.pop_none("thousand", "batch=1000").await;
}

#[tokio::test]
async fn batch_ack_top_level_consumer_group_applies_to_every_item() {
    let b = TestBroker::start().await;
    b.push_txids("grouped", "Default", &txids("t", 2)).await;
    let g = b.pop_some("grouped", "batch=2&subscriptionMode=all&consumerGroup=billing").await;
    let q = b.pop_some("grouped", "batch=2").await;
    let acks: Vec<Value> = msgs(&g).iter().map(|m| item(m, "completed")).collect();
    let res = b.ack_batch(json!(acks), Some("billing")).await;
    assert!(res.as_array().unwrap().iter().all(|r| r["success"] == true), "{res}");
    assert_eq!(cursor(&b, "billing").await, (2, 0, false));
    assert_eq!(cursor(&b, "__QUEUE_MODE__").await, (0, 0, true), "queue mode is untouched");
    // Without the group, the billing lease does not match queue mode's.
    let res = b.ack_batch(json!([item(&msgs(&g)[0], "completed")]), None).await;
    assert_eq!(res[0]["success"], false);
    assert!(res[0]["error"].as_str().unwrap().contains("lease"));
    let last = msgs(&q).pop().unwrap();
    assert_eq!(b.ack(&last, "completed", None).await["leaseReleased"], true);
}

#[tokio::test]
async fn a_nack_on_one_partition_does_not_clamp_another() {
    let b = TestBroker::start().await;
    b.push_txids("twolanes", "a", &txids("a", 2)).await;
    b.push_txids("twolanes", "b", &txids("b", 2)).await;
    let popped = b.pop_some("twolanes", "batch=10&partitions=2").await;
    let acks: Vec<Value> = msgs(&popped)
        .iter()
        .map(|m| {
            let t = m["transactionId"].as_str().unwrap();
            item(m, if t == "b-0" { "failed" } else { "completed" })
        })
        .collect();
    let res = b.ack_batch(json!(acks), None).await;
    assert!(
        res.as_array().unwrap().iter().all(|r| r["success"] == true && r["leaseReleased"] == true),
        "{res}"
    );
    let again = b.pop_some("twolanes", "batch=10&partitions=2").await;
    assert_eq!(tx_ids(&again), ["b-0", "b-1"], "only lane b redelivers");
}

/// `ack_rows` answers one completed item on a short path, completions on a
/// set-based one, and anything with a nack cursor by cursor; each item's
/// outcome (verdict, lease released, dead-lettered) must be the same on
/// all three, with the same cursor
/// after it. A ghost item riding along picks the path (it never touches
/// the cursor): a completed one the set-based path, a retry the general
/// one. Each case runs in a transaction that rolls back.
#[tokio::test]
async fn a_lone_completed_ack_answers_and_moves_the_cursor_as_the_general_path_does() {
    let b = TestBroker::start().await;
    b.push_txids("short", "Default", &txids("t", 4)).await;
    let m = msgs(&b.pop_some("short", "batch=3").await);
    let (pid, lease) = (m[0]["partitionId"].as_str().unwrap(), m[0]["leaseId"].as_str().unwrap());
    let wrong = uuid::Uuid::new_v4().to_string();
    let client = b.sql().await;
    // Acks m[0] for good, so that a re-ack of it lands below the cursor.
    assert_eq!(b.ack(&m[0], "completed", None).await["success"], true);
    // (case, transaction id, lease sent, lent lease, an expired lease first)
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, Option<&'a str>, bool);
    let cases: [Case; 8] = [
        ("in range, the batch's end not reached", "t-1", Some(lease), None, false),
        ("in range, the batch's end reached", "t-2", Some(lease), None, false),
        ("below the cursor", "t-0", Some(lease), None, false),
        ("never pushed", "ghost-x", Some(lease), None, false),
        ("past the leased batch (t-3), under the lease", "t-3", Some(lease), None, false),
        ("a wrong lease", "t-1", Some(&wrong), None, false),
        ("an expired lease", "t-1", Some(lease), None, true),
        ("lease-less, lent the lease", "t-2", Some(""), Some(lease), false),
    ];
    let state = "SELECT next_seq, retry_count::bigint, lease_id::text, batch_end FROM queen.cursors";
    for (case, txid, sent, lent, expire) in cases {
        let mut answers = Vec::new();
        let mut cursors = Vec::new();
        for ghost in [None, Some("completed"), Some("retry")] {
            client.batch_execute("BEGIN").await.unwrap();
            if expire {
                client
                    .batch_execute("UPDATE queen.cursors SET lease_expires_at = now() - interval '1 s'")
                    .await
                    .unwrap();
            }
            let mut txids = vec![txid.to_owned()];
            let mut statuses = vec!["completed"];
            if let Some(status) = ghost {
                txids.push("ghost-rider".into());
                statuses.push(status);
            }
            let n = txids.len();
            let pid: uuid::Uuid = pid.parse().unwrap();
            let row = client
                .query_one(
                    "SELECT json_build_array(a.verdicts[1], a.released[1], a.dlq[1])::text
                       FROM queen.ack_rows($1, $2, $3, $4, $5, $6, NULL, $7) a",
                    &[
                        &txids,
                        &vec![pid; n],
                        &statuses,
                        &vec![None::<&str>; n],
                        &vec![sent; n],
                        &vec!["__QUEUE_MODE__"; n],
                        &lent,
                    ],
                )
                .await
                .unwrap();
            answers.push(row.get::<_, String>(0));
            let c = client.query_one(state, &[]).await.unwrap();
            cursors.push((
                c.get::<_, i64>(0),
                c.get::<_, i64>(1),
                c.get::<_, Option<String>>(2),
                c.get::<_, Option<i64>>(3),
            ));
            client.batch_execute("ROLLBACK").await.unwrap();
        }
        for path in 1..3 {
            assert_eq!(answers[0], answers[path], "{case}: the answers differ (path {path})");
            assert_eq!(cursors[0], cursors[path], "{case}: the cursors differ (path {path})");
        }
    }
}

/// The engine writes each ack element from the verdict SQL answers: every
/// refused verdict has its exact element (all seven fields, the error text
/// included), whether it is acked alone (the one-completion path), among
/// completions (the set-based path) or beside a nack (cursor by cursor).
#[tokio::test]
async fn each_refused_verdict_answers_its_exact_element_on_every_path() {
    let b = TestBroker::start().await;
    b.push_txids("verdicts", "Default", &txids("t", 3)).await;
    let m = msgs(&b.pop_some("verdicts", "batch=3").await);
    // t-0 acked for good: a completion of it is a noop, a nack of it is committed.
    assert_eq!(b.ack(&m[0], "completed", None).await["success"], true);
    let element = |txid: &str, success: bool, error: Option<&str>, noop: bool| {
        json!({"index": 0, "transactionId": txid, "success": success, "error": error,
               "leaseReleased": false, "dlq": false, "noop": noop})
    };
    let mut ghost = item(&m[1], "completed");
    ghost["transactionId"] = json!("never-pushed");
    let mut wrong_lease = item(&m[1], "completed");
    wrong_lease["leaseId"] = json!(uuid::Uuid::new_v4().to_string());
    let cases = [
        (item(&m[0], "completed"), element("t-0", true, None, true)),
        (item(&m[0], "failed"), element("t-0", false, Some("already committed: the cursor moved past this message before this ack"), false)),
        (ghost, element("never-pushed", false, Some("unresolvable: transaction not in the ack window (hash purged or never pushed); if leased, the message redelivers"), false)),
        (wrong_lease, element("t-1", false, Some("invalid or expired lease"), false)),
    ];
    // A ghost item riding along picks the path and never touches a cursor.
    let mut rider = item(&m[1], "completed");
    rider["transactionId"] = json!("rider");
    for (ack, expected) in cases {
        let alone = b.ack_batch(json!([ack]), None).await;
        let among_completions = b.ack_batch(json!([ack, rider]), None).await;
        let mut nack_rider = rider.clone();
        nack_rider["status"] = json!("retry");
        let beside_a_nack = b.ack_batch(json!([ack, nack_rider]), None).await;
        if ack["status"] == "completed" {
            assert_eq!(alone[0], expected, "alone");
            assert_eq!(among_completions[0], expected, "among completions");
        }
        assert_eq!(beside_a_nack[0], expected, "beside a nack");
    }
    assert_eq!(cursor(&b, "__QUEUE_MODE__").await, (1, 0, true), "only t-0's ack moved the cursor");
}
