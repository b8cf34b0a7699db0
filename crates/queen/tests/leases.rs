//! Partition leases: leaseSeconds, expiry and redelivery, and
//! POST /api/v1/lease/:leaseId/extend.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{eventually, tx_ids, txids, TestBroker};
use serde_json::{json, Value};

async fn retry_count(b: &TestBroker) -> i64 {
    b.scalar("SELECT retry_count::bigint FROM queen.cursors WHERE consumer_group = '__QUEUE_MODE__'").await
}

/// Seconds from now to the queue-mode cursor's lease expiry.
async fn lease_left(b: &TestBroker) -> f64 {
    let client = b.sql().await;
    let row = client
        .query_one(
            "SELECT extract(epoch FROM lease_expires_at - now())::float8 FROM queen.cursors
              WHERE consumer_group = '__QUEUE_MODE__'",
            &[],
        )
        .await
        .unwrap();
    row.get(0)
}

async fn wait_for_expiry(b: &TestBroker) {
    eventually(Duration::from_secs(5), "the lease to expire", || async {
        (b.scalar("SELECT count(*) FROM queen.cursors WHERE lease_expires_at <= now()").await == 1)
            .then_some(())
    })
    .await;
}

fn assert_renewed(body: &Value) {
    assert_eq!(body["success"], true, "{body}");
    for key in ["newExpiresAt", "expiresAt", "lease_expires_at"] {
        let v = body[key].as_str().unwrap_or_else(|| panic!("{key} missing in {body}"));
        assert!(v.ends_with('Z') && v.len() == "2026-01-01T00:00:00.000000Z".len(), "{key}: {v}");
    }
}

fn assert_not_renewed(body: &Value) {
    assert_eq!(body["success"], false, "{body}");
    assert_eq!(body["renewed"], 0);
    for key in ["newExpiresAt", "expiresAt", "lease_expires_at"] {
        assert!(body.get(key).is_some_and(Value::is_null), "{key} must be present and null: {body}");
    }
}

#[tokio::test]
async fn lease_expiry_redelivers_promptly_and_does_not_count_a_retry() {
    let b = TestBroker::start().await;
    b.configure_ok("expiry", json!({"retryLimit": 1})).await;
    b.push("expiry", "Default", &[("e1", json!(1))]).await;
    let start = Instant::now();
    let first = b.pop_some("expiry", "batch=1&leaseSeconds=1").await;
    assert_eq!(tx_ids(&first), ["e1"]);
    b.pop_none("expiry", "batch=1").await;
    let again = eventually(Duration::from_secs(5), "redelivery after the lease expired", || async {
        let (status, body) = b.pop("expiry", "batch=1").await;
        (status == 200).then_some(body)
    })
    .await;
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(950), "redelivered before the lease expired: {took:?}");
    assert!(took < Duration::from_millis(2500), "redelivery took {took:?}");
    assert_eq!(tx_ids(&again), ["e1"]);
    assert_ne!(again["leaseId"], first["leaseId"]);
    assert_eq!(retry_count(&b).await, 0, "an expiry is not a retry");
    // retryLimit 1 still allows one failure after the expiry...
    let r = b.ack(&again["messages"][0], "failed", None).await;
    assert_eq!((r["success"].clone(), r["dlq"].clone()), (json!(true), json!(false)), "{r}");
    let third = b.pop_some("expiry", "batch=1").await;
    assert_eq!(tx_ids(&third), ["e1"]);
    // ...and the second failure exhausts it.
    assert_eq!(b.ack(&third["messages"][0], "failed", None).await["dlq"], true);
    b.pop_none("expiry", "batch=1").await;
}

#[tokio::test]
async fn lease_time_of_the_queue_applies_without_lease_seconds() {
    let b = TestBroker::start().await;
    b.configure_ok("leasetime", json!({"leaseTime": 1})).await;
    b.push("leasetime", "Default", &[("l1", json!(1))]).await;
    let first = b.pop_some("leasetime", "batch=1").await;
    assert!(lease_left(&b).await <= 1.0);
    let again = eventually(Duration::from_secs(5), "redelivery", || async {
        let (status, body) = b.pop("leasetime", "batch=1").await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(tx_ids(&again), tx_ids(&first));
    // leaseSeconds overrides the queue's lease time.
    b.pop_none("leasetime", "batch=1").await;
    b.ack(&again["messages"][0], "retry", None).await;
    b.pop_some("leasetime", "batch=1&leaseSeconds=60").await;
    assert!(lease_left(&b).await > 50.0);
}

#[tokio::test]
async fn expiry_redelivers_the_unacked_remainder_of_the_batch_in_order() {
    let b = TestBroker::start().await;
    b.push_txids("remainder", "Default", &txids("t", 4)).await;
    let first = b.pop_some("remainder", "batch=4&leaseSeconds=1").await;
    let r = b.ack(&first["messages"][1], "completed", None).await;
    assert_eq!(r["leaseReleased"], false);
    let again = eventually(Duration::from_secs(5), "redelivery", || async {
        let (status, body) = b.pop("remainder", "batch=10").await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(tx_ids(&again), ["t-2", "t-3"]);
}

#[tokio::test]
async fn ack_under_an_expired_lease_is_refused_naming_the_lease() {
    let b = TestBroker::start().await;
    b.push("stale", "Default", &[("s1", json!(1))]).await;
    let first = b.pop_some("stale", "batch=1&leaseSeconds=1").await;
    wait_for_expiry(&b).await;
    let r = b.ack(&first["messages"][0], "completed", None).await;
    assert_eq!(r["success"], false, "{r}");
    assert!(r["error"].as_str().unwrap().contains("lease"), "{r}");
    let again = b.pop_some("stale", "batch=1").await;
    assert_eq!(tx_ids(&again), ["s1"], "the refused ack did not commit");
    // The old lease stays refused under the new holder; the new one works.
    assert_eq!(b.ack(&first["messages"][0], "completed", None).await["success"], false);
    assert_eq!(b.ack(&again["messages"][0], "completed", None).await["success"], true);
}

#[tokio::test]
async fn extend_with_an_empty_body_renews_the_lease() {
    let b = TestBroker::start().await;
    b.push("extend", "Default", &[("x1", json!(1))]).await;
    let popped = b.pop_some("extend", "batch=1&leaseSeconds=5").await;
    let lease = popped["leaseId"].as_str().unwrap();
    assert!(lease_left(&b).await <= 5.0);
    let (code, body) = b.post_empty(&format!("/api/v1/lease/{lease}/extend")).await;
    assert_eq!(code, 200);
    assert_renewed(&body);
    assert_eq!(body["renewed"], 1);
    assert_eq!(body["leaseId"], lease);
    assert_eq!(body["newExpiresAt"], body["expiresAt"]);
    assert_eq!(body["newExpiresAt"], body["lease_expires_at"]);
    let left = lease_left(&b).await;
    assert!(left > 55.0 && left <= 60.0, "default extension is 60 s, got {left}");
    // With an explicit body.
    let (code, body) = b.post(&format!("/api/v1/lease/{lease}/extend"), &json!({"seconds": 120})).await;
    assert_eq!(code, 200);
    assert_renewed(&body);
    assert!(lease_left(&b).await > 115.0);
    // And `{}` behaves as no body.
    let (code, body) = b.post(&format!("/api/v1/lease/{lease}/extend"), &json!({})).await;
    assert_eq!(code, 200);
    assert_renewed(&body);
}

#[tokio::test]
async fn extend_of_an_unknown_lease_renews_nothing_with_null_expiries() {
    let b = TestBroker::start().await;
    for lease in [uuid::Uuid::new_v4().to_string(), "not-a-lease".to_owned()] {
        let (code, body) = b.post_empty(&format!("/api/v1/lease/{lease}/extend")).await;
        assert_eq!(code, 200, "{body}");
        assert_not_renewed(&body);
        assert_eq!(
            body,
            json!({"leaseId": lease, "success": false, "renewed": 0, "newExpiresAt": null, "expiresAt": null,
                   "lease_expires_at": null}),
            "the whole answer"
        );
    }
}

#[tokio::test]
async fn extend_fails_once_an_ack_released_the_lease() {
    let b = TestBroker::start().await;
    b.push("released", "Default", &[("r1", json!(1))]).await;
    let popped = b.pop_some("released", "batch=1").await;
    let lease = popped["leaseId"].as_str().unwrap();
    assert_eq!(b.ack(&popped["messages"][0], "completed", None).await["leaseReleased"], true);
    let (code, body) = b.post_empty(&format!("/api/v1/lease/{lease}/extend")).await;
    assert_eq!(code, 200);
    assert_not_renewed(&body);
}

#[tokio::test]
async fn extend_fails_once_a_nack_released_the_lease() {
    let b = TestBroker::start().await;
    b.push("nacked", "Default", &[("n1", json!(1))]).await;
    let popped = b.pop_some("nacked", "batch=1").await;
    let lease = popped["leaseId"].as_str().unwrap();
    b.ack(&popped["messages"][0], "failed", None).await;
    let (_, body) = b.post_empty(&format!("/api/v1/lease/{lease}/extend")).await;
    assert_not_renewed(&body);
}

#[tokio::test]
async fn extend_of_an_expired_lease_fails() {
    let b = TestBroker::start().await;
    b.push("lapsed", "Default", &[("l1", json!(1))]).await;
    let popped = b.pop_some("lapsed", "batch=1&leaseSeconds=1").await;
    wait_for_expiry(&b).await;
    let (_, body) =
        b.post_empty(&format!("/api/v1/lease/{}/extend", popped["leaseId"].as_str().unwrap())).await;
    assert_not_renewed(&body);
}

#[tokio::test]
async fn extend_renews_every_partition_of_a_multi_partition_pop() {
    let b = TestBroker::start().await;
    for p in ["a", "b", "c"] {
        b.push("multi", p, &[(p, json!(1))]).await;
    }
    let popped = b.pop_some("multi", "batch=10&partitions=3&leaseSeconds=5").await;
    assert_eq!(popped["partitionsClaimed"], 3);
    let (_, body) =
        b.post_empty(&format!("/api/v1/lease/{}/extend", popped["leaseId"].as_str().unwrap())).await;
    assert_renewed(&body);
    assert_eq!(body["renewed"], 3);
}

#[tokio::test]
async fn an_extended_lease_outlives_its_original_expiry() {
    let b = TestBroker::start().await;
    b.push("outlive", "Default", &[("o1", json!(1))]).await;
    let popped = b.pop_some("outlive", "batch=1&leaseSeconds=1").await;
    let (_, body) =
        b.post_empty(&format!("/api/v1/lease/{}/extend", popped["leaseId"].as_str().unwrap())).await;
    assert_renewed(&body);
    // The rule is about time: outlast the original one-second lease.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    b.pop_none("outlive", "batch=1").await;
    assert_eq!(b.ack(&popped["messages"][0], "completed", None).await["success"], true);
}

#[tokio::test]
async fn extend_refuses_a_bad_seconds_value() {
    let b = TestBroker::start().await;
    let lease = uuid::Uuid::new_v4();
    for body in [json!({"seconds": 0}), json!({"seconds": "ten"}), json!({"seconds": -5})] {
        let (code, answer) = b.post(&format!("/api/v1/lease/{lease}/extend"), &body).await;
        assert_eq!(code, 400, "{body} -> {answer}");
        assert!(answer["error"].as_str().unwrap().contains("seconds"), "{answer}");
    }
}

/// Taking a lease (a pop) and releasing it (the ack) rewrite no indexed
/// column of the cursor, so both are HOT updates: no index entry is written
/// per pop or ack. Counted inside one transaction, where PostgreSQL's
/// per-transaction statistics are exact.
#[tokio::test]
async fn taking_and_releasing_a_lease_are_hot_updates() {
    let b = TestBroker::start().await;
    b.push("hot", "p", &[("h1", json!(1)), ("h2", json!(2))]).await;
    let mut client = b.sql().await;
    let tx = client.transaction().await.unwrap();
    let counts = "SELECT pg_stat_get_xact_tuples_updated('queen.cursors'::regclass),
                         pg_stat_get_xact_tuples_hot_updated('queen.cursors'::regclass)";
    let popped = tx
        .query_one("SELECT p.lease_id::text, p.lane_ids[1] FROM queen.pop('hot', 'p', NULL, 2, 1, NULL, false, NULL, NULL) p", &[])
        .await
        .unwrap();
    let (lease, pid): (String, uuid::Uuid) = (popped.get(0), popped.get(1));
    let row = tx.query_one(counts, &[]).await.unwrap();
    let (updated, hot): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((updated, hot), (1, 1), "the lease");
    let acked: String = tx
        .query_one(
            "SELECT json_build_object('verdicts', a.verdicts, 'released', a.released)::text
               FROM queen.ack_rows($1, $2, $3, $4, $5, $6) a",
            &[
                &vec!["h1", "h2"],
                &vec![pid, pid],
                &vec!["completed", "completed"],
                &vec![None::<String>, None],
                &vec![Some(lease.clone()), Some(lease)],
                &vec!["__QUEUE_MODE__", "__QUEUE_MODE__"],
            ],
        )
        .await
        .unwrap()
        .get(0);
    let acked: Value = serde_json::from_str(&acked).unwrap();
    assert_eq!((&acked["verdicts"][1], &acked["released"][1]), (&json!("ok"), &json!(true)), "{acked}");
    let row = tx.query_one(counts, &[]).await.unwrap();
    let (updated, hot): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!((updated, hot), (2, 2), "the lease and its release");
    tx.commit().await.unwrap();
}

/// A lease id names its queue (extend finds its cursors through the
/// queue), and a lease of one queue renews nothing of another.
#[tokio::test]
async fn extend_renews_only_the_lanes_of_the_lease_it_names() {
    let b = TestBroker::start().await;
    b.push("ext-a", "p", &[("a1", json!(1))]).await;
    b.push("ext-b", "p", &[("b1", json!(1))]).await;
    let a = b.pop_some("ext-a", "batch=1&leaseSeconds=30").await;
    let bb = b.pop_some("ext-b", "batch=1&leaseSeconds=30").await;
    let (lease_a, lease_b) = (a["leaseId"].as_str().unwrap(), bb["leaseId"].as_str().unwrap());
    assert_ne!(lease_a, lease_b);
    let qid = b.scalar("SELECT id FROM queen.queues WHERE name = 'ext-a'").await;
    assert_eq!(i64::from_str_radix(&lease_a.replace('-', "")[..12], 16).unwrap(), qid, "{lease_a}");
    let (_, body) = b.post(&format!("/api/v1/lease/{lease_a}/extend"), &json!({"seconds": 600})).await;
    assert_renewed(&body);
    assert_eq!(body["renewed"], 1);
    let left = |q: &'static str| {
        let b = &b;
        async move {
            b.scalar(&format!(
                "SELECT extract(epoch FROM c.lease_expires_at - now())::bigint FROM queen.cursors c
                   JOIN queen.queues q ON q.id = c.queue_id WHERE q.name = '{q}'"
            ))
            .await
        }
    };
    assert!(left("ext-a").await > 500);
    assert!(left("ext-b").await <= 30);
    // The same random bits under another queue's id match nothing.
    let forged = format!("{:012x}{}", qid + 1, &lease_a.replace('-', "")[12..]);
    let (_, body) = b.post(&format!("/api/v1/lease/{forged}/extend"), &json!({"seconds": 600})).await;
    assert_not_renewed(&body);
}
