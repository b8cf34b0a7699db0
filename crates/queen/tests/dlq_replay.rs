//! Dead-letter replay by record (`POST /api/v1/dlq/:id/replay`, and the
//! retry route that runs the same move) and purge (`DELETE /api/v1/dlq`).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::{tx_ids, TestBroker};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use queen_engine::{EncryptionKey, EngineOptions};
use queen_server::{AuthConfig, ServerConfig};
use serde_json::{json, Value};

/// Pushes `tx` to `queue`/Default and dead-letters it once for each group
/// (None: queue mode); answers the listed records of the queue, newest first.
async fn dead_letter_for(
    b: &TestBroker,
    queue: &str,
    tx: &str,
    data: Value,
    groups: &[Option<&str>],
) -> Vec<Value> {
    b.push(queue, "Default", &[(tx, data)]).await;
    for group in groups {
        let q = match group {
            // From the beginning: the group first pops after the push.
            Some(g) => format!("batch=1&consumerGroup={g}&subscriptionMode=all"),
            None => "batch=1".to_owned(),
        };
        let popped = b.pop_some(queue, &q).await;
        let m =
            popped["messages"].as_array().unwrap().iter().find(|m| m["transactionId"] == tx).unwrap().clone();
        assert_eq!(b.ack_with(&m, "dlq", Some("poison"), *group).await["dlq"], true);
    }
    b.dlq(queue).await["messages"].as_array().unwrap().clone()
}

fn dlq_id(record: &Value) -> i64 {
    record["dlqId"].as_i64().unwrap_or_else(|| panic!("no dlqId in {record}"))
}

async fn messages_with_tx(b: &TestBroker, tx: &str) -> i64 {
    b.scalar(&format!("SELECT count(*) FROM queen.messages WHERE transaction_id = '{tx}'")).await
}

async fn dead_letters(b: &TestBroker) -> i64 {
    b.scalar("SELECT count(*) FROM queen.dead_letters").await
}

#[tokio::test]
async fn a_replay_moves_exactly_the_addressed_groups_record_and_a_second_one_is_404() {
    let b = TestBroker::start().await;
    let records = dead_letter_for(&b, "rp", "x", json!({"keep": "me"}), &[Some("g1"), Some("g2")]).await;
    assert_eq!(records.len(), 2);
    let g1 = records.iter().find(|r| r["consumerGroup"] == "g1").unwrap();
    let g2 = records.iter().find(|r| r["consumerGroup"] == "g2").unwrap();
    let (id, other) = (dlq_id(g1), dlq_id(g2));
    assert_ne!(id, other);

    let (code, moved) = b.post_empty(&format!("/api/v1/dlq/{id}/replay")).await;
    assert_eq!(code, 200, "{moved}");
    assert_eq!(moved["result"], "moved", "{moved}");
    assert_eq!(moved["consumerGroup"], "g1");
    assert_eq!(moved["dlqId"], id);
    assert_eq!(moved["originalTransactionId"], "x");
    assert_eq!(moved["replayedAs"], format!("dlq:{id}"));
    assert_eq!((moved["queue"].as_str(), moved["partition"].as_str()), (Some("rp"), Some("Default")));

    // Only g1's record went; g2's stays.
    let left = b.dlq("rp").await;
    assert_eq!(left["total"], 1, "{left}");
    assert_eq!(dlq_id(&left["messages"][0]), other);
    // The message is back, poppable by the group whose record moved.
    let popped = b.pop_some("rp", "batch=10&consumerGroup=g1").await;
    assert_eq!(tx_ids(&popped), [format!("dlq:{id}")]);
    assert_eq!(popped["messages"][0]["data"], json!({"keep": "me"}));
    assert_eq!(popped["messages"][0]["id"], moved["messageId"]);

    // Gone now: a repeated replay is 404 and pushes nothing more.
    let (code, again) = b.post_empty(&format!("/api/v1/dlq/{id}/replay")).await;
    assert_eq!(code, 404, "{again}");
    assert_eq!(again["code"], "not_found", "{again}");
    assert_eq!(messages_with_tx(&b, &format!("dlq:{id}")).await, 1);
    assert_eq!(dead_letters(&b).await, 1);
}

#[tokio::test]
async fn a_replay_refused_as_a_duplicate_writes_nothing_and_keeps_the_record() {
    let b = TestBroker::start().await;
    let records = dead_letter_for(&b, "dup", "x", json!(1), &[None]).await;
    let id = dlq_id(&records[0]);
    // The message was pushed as dlq:<id> already (a replay whose answer was lost, say).
    b.push("dup", "Default", &[(&format!("dlq:{id}"), json!("earlier"))]).await;
    let before = b.scalar("SELECT count(*) FROM queen.messages").await;

    let (code, answer) = b.post_empty(&format!("/api/v1/dlq/{id}/replay")).await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["result"], "duplicate", "{answer}");
    assert_eq!(answer["dlqId"], id);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages").await, before, "nothing written");
    assert_eq!(messages_with_tx(&b, &format!("dlq:{id}")).await, 1);
    assert_eq!(b.dlq("dup").await["total"], 1, "the record is kept");
}

#[tokio::test]
async fn a_replay_into_another_queue_or_partition_creates_it() {
    let b = TestBroker::start().await;
    let records = dead_letter_for(&b, "src", "a", json!({"n": 1}), &[None]).await;
    let id = dlq_id(&records[0]);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.queues WHERE name = 'dst'").await, 0);
    let (code, moved) =
        b.post(&format!("/api/v1/dlq/{id}/replay"), &json!({"queue": "dst", "partition": "p9"})).await;
    assert_eq!(code, 200, "{moved}");
    assert_eq!((moved["result"].as_str(), moved["queue"].as_str()), (Some("moved"), Some("dst")));
    assert_eq!(moved["partition"], "p9");
    let (status, popped) = b.pop_partition("dst", "p9", "batch=10").await;
    assert_eq!(status, 200, "{popped}");
    assert_eq!(tx_ids(&popped), [format!("dlq:{id}")]);
    assert_eq!(popped["messages"][0]["data"], json!({"n": 1}));
    b.pop_none("src", "batch=10").await;
    assert_eq!(dead_letters(&b).await, 0);

    // A partition alone: the same queue, another lane.
    let records = dead_letter_for(&b, "src", "b", json!({"n": 2}), &[None]).await;
    let id = dlq_id(&records[0]);
    let (code, moved) = b.post(&format!("/api/v1/dlq/{id}/replay"), &json!({"partition": "side"})).await;
    assert_eq!(code, 200, "{moved}");
    let (status, popped) = b.pop_partition("src", "side", "batch=10").await;
    assert_eq!(status, 200, "{popped}");
    assert_eq!(tx_ids(&popped), [format!("dlq:{id}")]);
}

#[tokio::test]
async fn push_maintenance_refuses_a_replay_with_503_and_keeps_the_record() {
    let b = TestBroker::start().await;
    let records = dead_letter_for(&b, "mnt", "x", json!(1), &[None]).await;
    let id = dlq_id(&records[0]);
    let (code, _) = b.post("/api/v1/system/maintenance", &json!({"enabled": true})).await;
    assert_eq!(code, 200);
    let before = b.scalar("SELECT count(*) FROM queen.messages").await;
    let (code, answer) = b.post_empty(&format!("/api/v1/dlq/{id}/replay")).await;
    assert_eq!(code, 503, "{answer}");
    assert!(answer["code"].is_string(), "{answer}");
    assert_eq!(dead_letters(&b).await, 1);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages").await, before);
    // The retry route is the same move, refused the same way.
    let pid = records[0]["partitionId"].as_str().unwrap();
    let (code, answer) = b.post_empty(&format!("/api/v1/messages/{pid}/x/retry")).await;
    assert_eq!(code, 503, "{answer}");
    assert_eq!(dead_letters(&b).await, 1);

    b.post("/api/v1/system/maintenance", &json!({"enabled": false})).await;
    let (code, answer) = b.post_empty(&format!("/api/v1/dlq/{id}/replay")).await;
    assert_eq!((code, answer["result"].as_str()), (200, Some("moved")), "{answer}");
}

#[tokio::test]
async fn the_retry_route_runs_the_same_move_on_the_newest_record_only() {
    let b = TestBroker::start().await;
    let records = dead_letter_for(&b, "rt", "x", json!({"v": 7}), &[Some("g1"), Some("g2")]).await;
    let newest = records.iter().map(dlq_id).max().unwrap();
    let oldest = records.iter().map(dlq_id).min().unwrap();
    let pid = records[0]["partitionId"].as_str().unwrap();

    let (code, body) = b.post_empty(&format!("/api/v1/messages/{pid}/x/retry")).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["success"], true, "{body}");
    assert_eq!(body["transactionId"], "x");
    assert_eq!(body["result"], "moved");
    assert_eq!(body["dlqId"], newest);
    assert_eq!(body["replayedAs"], format!("dlq:{newest}"));
    assert_eq!(messages_with_tx(&b, &format!("dlq:{newest}")).await, 1);
    let left = b.dlq("rt").await;
    assert_eq!(left["total"], 1, "{left}");
    assert_eq!(dlq_id(&left["messages"][0]), oldest);
}

#[tokio::test]
async fn concurrent_replays_of_one_record_push_it_once() {
    let b = TestBroker::start().await;
    let records = dead_letter_for(&b, "race", "x", json!(1), &[None]).await;
    let id = dlq_id(&records[0]);
    let api = b.api();
    let answers = common::all_at_once((0..8).collect::<Vec<_>>(), |_| {
        let api = api.clone();
        async move { api.post_empty(&format!("/api/v1/dlq/{id}/replay")).await }
    })
    .await;
    let moved = answers.iter().filter(|(c, a)| *c == 200 && a["result"] == "moved").count();
    assert_eq!(moved, 1, "{answers:?}");
    for (code, answer) in &answers {
        assert!(
            (*code == 200 && (answer["result"] == "moved" || answer["result"] == "duplicate"))
                || *code == 404,
            "{code} {answer}"
        );
    }
    assert_eq!(messages_with_tx(&b, &format!("dlq:{id}")).await, 1);
    assert_eq!(dead_letters(&b).await, 0);
}

#[tokio::test]
async fn bad_ids_and_bodies_are_refused_with_codes_and_nothing_moves() {
    let b = TestBroker::start().await;
    let records = dead_letter_for(&b, "bad", "x", json!(1), &[None]).await;
    let id = dlq_id(&records[0]);
    for path in
        ["/api/v1/dlq/abc/replay", "/api/v1/dlq/0/replay", "/api/v1/dlq/-4/replay", "/api/v1/dlq/1.5/replay"]
    {
        let (code, answer) = b.post_empty(path).await;
        assert_eq!(code, 400, "{path}: {answer}");
        assert_eq!(answer["code"], "bad_request", "{path}: {answer}");
    }
    let (code, answer) = b.post_empty(&format!("/api/v1/dlq/{}/replay", id + 1000)).await;
    assert_eq!(code, 404, "{answer}");
    assert_eq!(answer["code"], "not_found");
    for body in [json!({"queue": ""}), json!({"queue": 5}), json!({"partition": ["p"]}), json!([1])] {
        let (code, answer) = b.post(&format!("/api/v1/dlq/{id}/replay"), &body).await;
        assert_eq!(code, 400, "{body}: {answer}");
        assert_eq!(answer["code"], "bad_request", "{body}: {answer}");
    }
    let (code, answer) = b.post_raw(&format!("/api/v1/dlq/{id}/replay"), "{not json").await;
    assert_eq!(code, 400, "{answer}");
    assert_eq!(dead_letters(&b).await, 1);
    assert_eq!(messages_with_tx(&b, &format!("dlq:{id}")).await, 0);
}

#[tokio::test]
async fn a_purge_deletes_one_queues_records_or_one_groups_and_needs_a_queue() {
    let b = TestBroker::start().await;
    for tx in ["a", "b"] {
        dead_letter_for(&b, "pq", tx, json!(1), &[Some("g1"), Some("g2")]).await;
    }
    dead_letter_for(&b, "keep", "k", json!(1), &[Some("g1")]).await;
    assert_eq!(dead_letters(&b).await, 5);

    let (code, answer) = b.delete("/api/v1/dlq").await;
    assert_eq!(code, 400, "{answer}");
    assert_eq!(answer["code"], "bad_request");
    assert_eq!(answer["field"], "queue");
    let (code, _) = b.delete("/api/v1/dlq?consumerGroup=g1").await;
    assert_eq!(code, 400);
    assert_eq!(dead_letters(&b).await, 5, "nothing deleted");

    let (code, answer) = b.delete("/api/v1/dlq?queue=pq&consumerGroup=g1").await;
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["deleted"], 2, "{answer}");
    let left = b.dlq("pq").await;
    assert!(left["messages"].as_array().unwrap().iter().all(|r| r["consumerGroup"] == "g2"), "{left}");
    assert_eq!(left["total"], 2);

    let (code, answer) = b.delete("/api/v1/dlq?queue=pq").await;
    assert_eq!((code, answer["deleted"].as_i64()), (200, Some(2)), "{answer}");
    assert_eq!(b.dlq("pq").await["total"], 0);
    assert_eq!(b.dlq("keep").await["total"], 1, "another queue's records stay");
    let (code, answer) = b.delete("/api/v1/dlq?queue=nosuch").await;
    assert_eq!((code, answer["deleted"].as_i64()), (200, Some(0)), "{answer}");
}

const SECRET: &[u8] = b"hs256-test-secret-that-is-long-enough";

fn token(role: &str) -> String {
    let claims = json!({"sub": "t", "role": role, "exp": jsonwebtoken::get_current_timestamp() + 600});
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &EncodingKey::from_secret(SECRET).unwrap())
        .unwrap()
}

#[tokio::test]
async fn with_jwt_a_purge_needs_the_admin_role_and_a_replay_a_writer() {
    let auth = AuthConfig::default().with_hs256_secret(SECRET).unwrap();
    let b = TestBroker::start_with(ServerConfig { auth, ..ServerConfig::default() }).await;
    let admin = token("admin");
    let rw = token("read-write");
    let ro = token("read-only");
    let call = |method: reqwest::Method, path: &str, who: &str| {
        b.http.request(method, b.url(path)).header("authorization", format!("Bearer {who}")).send()
    };
    // One dead letter, made with the writer's token.
    let push = b
        .http
        .post(b.url("/api/v1/push"))
        .header("authorization", format!("Bearer {rw}"))
        .json(&json!({"items": [{"queue": "jq", "transactionId": "x", "payload": 1}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(push.status(), 201);
    let popped: Value = call(reqwest::Method::GET, "/api/v1/pop/queue/jq?wait=false", &rw)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let m = &popped["messages"][0];
    let ack = b
        .http
        .post(b.url("/api/v1/ack"))
        .header("authorization", format!("Bearer {rw}"))
        .json(&json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"],
                      "leaseId": m["leaseId"], "status": "dlq"}))
        .send()
        .await
        .unwrap();
    assert_eq!(ack.status(), 200);
    assert_eq!(dead_letters(&b).await, 1);

    for who in [&ro, &rw] {
        let r = call(reqwest::Method::DELETE, "/api/v1/dlq?queue=jq", who).await.unwrap();
        assert_eq!(r.status(), 403);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], "forbidden", "{body}");
    }
    assert_eq!(dead_letters(&b).await, 1, "nothing deleted");
    let r = call(reqwest::Method::POST, "/api/v1/dlq/1/replay", &ro).await.unwrap();
    assert_eq!(r.status(), 403, "a read token may not replay");
    let r = call(reqwest::Method::DELETE, "/api/v1/dlq?queue=jq", &admin).await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["deleted"], 1, "{body}");
    assert_eq!(dead_letters(&b).await, 0);
}

const KEY: &str = "8f3c2a9b1d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

#[tokio::test]
async fn a_plain_dead_letter_replayed_into_an_encrypted_queue_is_sealed_at_rest() {
    let options = EngineOptions {
        encryption_key: Some(EncryptionKey::from_hex(KEY).unwrap()),
        ..EngineOptions::default()
    };
    let b = TestBroker::start_with_options(options).await;
    b.configure_ok("vault", json!({"encryptionEnabled": true})).await;
    let records = dead_letter_for(&b, "plain", "x", json!({"card": "4111-SECRET"}), &[None]).await;
    let id = dlq_id(&records[0]);
    let (code, moved) = b.post(&format!("/api/v1/dlq/{id}/replay"), &json!({"queue": "vault"})).await;
    assert_eq!((code, moved["result"].as_str()), (200, Some("moved")), "{moved}");
    let (text, sealed): (String, bool) = {
        let row = b
            .sql()
            .await
            .query_one(
                "SELECT payload::text, queen.is_sealed(payload::text) FROM queen.messages WHERE transaction_id = $1",
                &[&format!("dlq:{id}")],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert!(sealed && !text.contains("SECRET"), "{text}");
    let popped = b.pop_some("vault", "batch=1").await;
    assert_eq!(popped["messages"][0]["data"], json!({"card": "4111-SECRET"}));
    assert_eq!(dead_letters(&b).await, 0);
}
