//! Encryption at rest (`encryptionEnabled`): payloads are sealed before
//! they reach PostgreSQL and opened in every answer that carries them.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use base64::Engine as _;
use common::{tx_ids, TestBroker};
use queen_engine::{EncryptionKey, EngineOptions};
use serde_json::{json, Value};

const KEY: &str = "8f3c2a9b1d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
const OTHER_KEY: &str = "0000000000000000000000000000000000000000000000000000000000000001";

fn with_key(hex: &str) -> EngineOptions {
    EngineOptions { encryption_key: Some(EncryptionKey::from_hex(hex).unwrap()), ..EngineOptions::default() }
}

fn secret(n: u32) -> Value {
    json!({"card": format!("4111-SECRET-{n}"), "amount": 12345678901234567890.25, "tags": ["a", null]})
}

/// Every stored payload of `queue`, as text, and whether SQL sees it sealed.
async fn stored(b: &TestBroker, queue: &str) -> Vec<(String, bool)> {
    b.sql()
        .await
        .query(
            "SELECT coalesce(m.payload::text, ''), queen.is_sealed(m.payload::text)
               FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
               JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1 ORDER BY m.seq",
            &[&queue],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test]
async fn an_encrypted_queue_stores_no_plaintext_and_every_read_opens_it() {
    let b = TestBroker::start_with_options(with_key(KEY)).await;
    let conf = b.configure_ok("vault", json!({"encryptionEnabled": true, "retryLimit": 0})).await;
    assert_eq!(conf["options"]["encryptionEnabled"], true);
    b.push("vault", "Default", &[("s1", secret(1)), ("s2", secret(2))]).await;
    b.push_items(json!([{"queue": "vault", "transactionId": "s3"}])).await;
    // A bundle's push is sealed too.
    let (status, tx) = b
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [{"queue": "vault", "transactionId": "s4",
                                                               "payload": secret(4)}]}]}),
        )
        .await;
    assert_eq!(status, 200, "{tx}");
    assert_eq!(tx["success"], true, "{tx}");

    let rows = stored(&b, "vault").await;
    assert_eq!(rows.len(), 4);
    for (text, sealed) in &rows {
        assert!(sealed, "stored unsealed: {text}");
        assert!(
            !text.contains("SECRET") && !text.contains("12345678901234567890"),
            "plaintext at rest: {text}"
        );
    }

    // fetch (reads by offset) opens them.
    let (status, fetched) = b
        .post("/api/v1/fetch", &json!({"entries": [{"queue": "vault", "partition": "Default", "offset": 0}]}))
        .await;
    assert_eq!(status, 200, "{fetched}");
    let records = fetched["entries"][0]["records"].as_array().unwrap();
    assert_eq!(records[0]["payload"], secret(1));
    assert_eq!(records[2]["payload"], Value::Null);

    // pop opens them, exact digits kept.
    let (status, popped) = b.get("/api/v1/pop/queue/vault?wait=false&batch=10").await;
    assert_eq!(status, 200, "{popped}");
    assert_eq!(tx_ids(&popped), ["s1", "s2", "s3", "s4"]);
    // Every digit survives the seal (the payload's own text is what is sealed).
    let (status, _) = b
        .post_raw(
            "/api/v1/push",
            r#"{"items":[{"queue":"vault","partition":"exact","payload":{"n":123456789012345678901234567890.5}}]}"#
                .to_owned(),
        )
        .await;
    assert_eq!(status, 201);
    let raw = b
        .http
        .get(b.url("/api/v1/pop/queue/vault/partition/exact?wait=false&batch=1"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(raw.contains(r#"{"n":123456789012345678901234567890.5}"#), "{raw}");
    assert_eq!(popped["messages"][1]["data"], secret(2));
    assert_eq!(popped["messages"][2]["data"], Value::Null);

    // The message route opens it and says it is encrypted.
    let pid = popped["messages"][0]["partitionId"].as_str().unwrap().to_owned();
    let (status, detail) = b.get(&format!("/api/v1/messages/{pid}/s1")).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["payload"], secret(1));
    assert_eq!(detail["isEncrypted"], true);

    // A dead letter keeps it sealed at rest and shows it opened; a retry
    // puts it back on the lane still sealed.
    b.ack(&popped["messages"][0], "failed", None).await;
    let dlq = b.dlq("vault").await;
    assert_eq!(dlq["messages"][0]["data"], secret(1), "{dlq}");
    let dead_text: String =
        b.sql().await.query_one("SELECT payload::text FROM queen.dead_letters", &[]).await.unwrap().get(0);
    assert!(!dead_text.contains("SECRET"), "{dead_text}");
    let (status, retried) = b.post_empty(&format!("/api/v1/messages/{pid}/s1/retry")).await;
    assert_eq!(status, 200, "{retried}");
    assert!(stored(&b, "vault").await.iter().all(|(_, sealed)| *sealed));
}

#[tokio::test]
async fn encryption_without_a_key_is_refused_and_nothing_is_written() {
    let b = TestBroker::start().await;
    let (status, body) = b.configure("vault", json!({"encryptionEnabled": true})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "encryption_key_missing");
    assert!(body["error"].as_str().unwrap().contains("QUEEN_ENCRYPTION_KEY"), "{body}");
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn a_broker_without_the_key_or_with_another_refuses_clearly_never_answers_ciphertext() {
    let b = TestBroker::start_with_options(with_key(KEY)).await;
    b.configure_ok("vault", json!({"encryptionEnabled": true})).await;
    b.push("vault", "Default", &[("s1", secret(1))]).await;
    for (i, options) in [EngineOptions::default(), with_key(OTHER_KEY)].into_iter().enumerate() {
        let other = TestBroker::on_with_options(&b.db, options).await;
        for auto_ack in [false, true] {
            let (status, body) = other
                .get(&format!(
                    "/api/v1/pop/queue/vault?wait=false&batch=1&subscriptionMode=all&consumerGroup=g{i}&autoAck={auto_ack}"
                ))
                .await;
            assert_eq!(status, 500, "{body}");
            assert_eq!(body["code"], "encryption_unavailable", "{body}");
            assert!(body["detail"].as_str().unwrap().contains("QUEEN_ENCRYPTION_KEY"), "{body}");
        }
        // Nor can it push into the encrypted queue, or turn encryption on with its key.
        let (status, body) = other
            .post("/api/v1/push", &json!({"items": [{"queue": "vault", "transactionId": "x", "payload": 1}]}))
            .await;
        assert_eq!(status, 500, "{body}");
        assert_eq!(body["code"], "encryption_unavailable", "{body}");
        let (status, body) = other.configure("vault", json!({"encryptionEnabled": true})).await;
        assert_eq!(status, 400, "{body}");
    }
    // The refused pops leased and consumed nothing: the right broker gets the message.
    for g in ["g0", "g1"] {
        let popped = b.pop_some("vault", &format!("batch=1&subscriptionMode=all&consumerGroup={g}")).await;
        assert_eq!(popped["messages"][0]["data"], secret(1));
    }
    assert!(
        stored(&b, "vault").await.iter().all(|(_, sealed)| *sealed),
        "no plaintext ever reached the table"
    );
}

#[tokio::test]
async fn a_broker_that_missed_the_configure_still_seals() {
    let a = TestBroker::start_with_options(with_key(KEY)).await;
    let b = TestBroker::on_with_options(&a.db, with_key(KEY)).await;
    // a learns the queue as plain, then b turns encryption on.
    a.push("flip", "Default", &[("plain", json!({"v": "PLAIN"}))]).await;
    b.configure_ok("flip", json!({"encryptionEnabled": true})).await;
    a.push("flip", "Default", &[("sealed-1", secret(1))]).await;
    a.push_items(json!((0..40)
        .map(|i| json!({"queue": "flip", "partition": format!("p{i}"),
        "transactionId": format!("many-{i}"), "payload": secret(i)}))
        .collect::<Vec<_>>()))
        .await;
    let rows = stored(&a, "flip").await;
    assert_eq!(rows.len(), 42);
    // The message pushed before the switch was sealed by the configure's pass.
    assert!(rows.iter().all(|(text, sealed)| *sealed && !text.contains("PLAIN")), "{rows:?}");
    let popped = a.pop_some("flip", "batch=1&partition=Default").await;
    assert_eq!(popped["messages"][0]["data"], json!({"v": "PLAIN"}));
}

#[tokio::test]
async fn payloads_with_a_nul_escape_are_refused_so_no_one_forges_an_envelope() {
    let b = TestBroker::start().await;
    let (status, body) = b
        .post_raw(
            "/api/v1/push",
            r#"{"items":[{"queue":"q","payload":{"\u0000sealed":"v1.AAAA"}}]}"#.to_owned(),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("items[0].payload"), "{body}");
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn a_timer_of_an_encrypted_queue_is_stored_sealed_and_fires_readable() {
    let b =
        TestBroker::start_with_options(EngineOptions { timer_sweep_interval: None, ..with_key(KEY) }).await;
    b.configure_ok("vault", json!({"encryptionEnabled": true})).await;
    let payload = base64::engine::general_purpose::STANDARD.encode(secret(7).to_string());
    let (status, body) = b
        .post(
            "/api/v1/timers",
            &json!({"operations": [{"op": "schedule", "queue": "vault", "timerKey": "k", "payload": payload,
                                     "delayMs": -1}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["ok"], true, "{body}");
    let at_rest: String =
        b.sql().await.query_one("SELECT payload::text FROM queen.timers", &[]).await.unwrap().get(0);
    assert!(at_rest.starts_with(r#"{"\u0000sealed""#) && !at_rest.contains("SECRET"), "{at_rest}");
    b.engine.fire_due_timers(100).await.unwrap();
    assert!(stored(&b, "vault").await.iter().all(|(text, sealed)| *sealed && !text.contains("SECRET")));
    let popped = b.pop_some("vault", "batch=1").await;
    assert_eq!(popped["messages"][0]["data"], secret(7));
}

#[tokio::test]
async fn a_queue_that_was_encrypted_still_needs_its_key_to_pop_after_encryption_is_off() {
    let b = TestBroker::start_with_options(with_key(KEY)).await;
    b.configure_ok("vault", json!({"encryptionEnabled": true})).await;
    b.push("vault", "Default", &[("s1", secret(1))]).await;
    b.configure_ok("vault", json!({"encryptionEnabled": false})).await;
    let keyless = TestBroker::on_with_options(&b.db, EngineOptions::default()).await;
    let (status, body) = keyless.get("/api/v1/pop/queue/vault?wait=false&batch=1&autoAck=true").await;
    assert_eq!((status, body["code"].clone()), (500, json!("encryption_unavailable")), "{body}");
    // Nothing was consumed: the keyed broker still gets it.
    let popped = b.pop_some("vault", "batch=1").await;
    assert_eq!(popped["messages"][0]["data"], secret(1));
}

/// Every stored text holding `marker` in a table that may hold a payload
/// (messages, dead letters, timers, stream state), named by its table.
async fn plaintext_anywhere(b: &TestBroker, marker: &str) -> Vec<String> {
    b.sql()
        .await
        .query(
            "SELECT 'messages: ' || payload::text FROM queen.messages WHERE strpos(payload::text, $1) > 0
             UNION ALL SELECT 'dead_letters: ' || payload::text FROM queen.dead_letters
                        WHERE strpos(payload::text, $1) > 0
             UNION ALL SELECT 'timers: ' || payload::text FROM queen.timers WHERE strpos(payload::text, $1) > 0
             UNION ALL SELECT 'stream_state: ' || value::text || coalesce(sealed, '') FROM queen.stream_state
                        WHERE strpos(value::text || coalesce(sealed, ''), $1) > 0",
            &[&marker],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Pushes race the configure that turns encryption on, from a broker that
/// believes the queue is plain (its hint is stale), on one partition (the
/// short path) and on several (the set-based path). Whatever committed
/// before the switch is sealed by the configure's pass, whatever after is
/// sealed by the push: no table holds the marker once configure answers.
#[tokio::test]
async fn pushes_racing_the_switch_leave_no_plaintext_in_any_table() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let a = TestBroker::start_with_options(with_key(KEY)).await;
    let b = TestBroker::on_with_options(&a.db, with_key(KEY)).await;
    for round in 0..8u64 {
        let queue = format!("race{round}");
        a.configure_ok(&queue, json!({"retryLimit": 0})).await;
        let stop = Arc::new(AtomicBool::new(false));
        let mut pushers = Vec::new();
        for w in 0..4 {
            let (api, stop, queue) = (a.api(), stop.clone(), queue.clone());
            pushers.push(tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let parts = if w % 2 == 0 { 1 } else { 3 };
                    let items: Vec<Value> = (0..parts)
                        .map(|p| {
                            json!({"queue": queue, "partition": format!("p{p}"),
                                        "payload": {"m": format!("RACEMARK-{w}-{n}-{p}")}})
                        })
                        .collect();
                    api.push_items(json!(items)).await;
                    n += 1;
                }
                n
            }));
        }
        tokio::time::sleep(std::time::Duration::from_millis(10 + 7 * round)).await;
        b.configure_ok(&queue, json!({"encryptionEnabled": true})).await;
        let leaks = plaintext_anywhere(&a, "RACEMARK").await;
        assert!(leaks.is_empty(), "round {round}: plaintext after the switch answered: {leaks:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        stop.store(true, Ordering::Relaxed);
        for p in pushers {
            assert!(p.await.unwrap() > 0);
        }
        let leaks = plaintext_anywhere(&a, "RACEMARK").await;
        assert!(leaks.is_empty(), "round {round}: {leaks:?}");
        // Every pushed message reads back.
        let n = a
            .scalar(&format!(
                "SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
                   JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = '{queue}'"
            ))
            .await;
        let popped = a.pop_some(&queue, "batch=10000&autoAck=true").await;
        let data = popped["messages"].as_array().unwrap();
        assert!(data.iter().all(|m| m["data"]["m"].as_str().unwrap().starts_with("RACEMARK")));
        assert!(n > 0);
    }
}

/// What a queue held before its encryption was turned on (a message, a dead
/// letter, a timer, a stream's state) is sealed by the switch and still
/// reads back; state written after it is sealed by the cycle; a plain timer
/// the pass missed is sealed when it fires, never fired plain.
#[tokio::test]
async fn what_a_queue_held_before_the_switch_is_sealed_timers_and_stream_state_included() {
    let a =
        TestBroker::start_with_options(EngineOptions { timer_sweep_interval: None, ..with_key(KEY) }).await;
    a.configure_ok("before", json!({"retryLimit": 0})).await;
    // A dead letter.
    a.push("before", "Default", &[("dead", json!({"m": "OLDMARK-dead"}))]).await;
    let popped = a.pop_some("before", "batch=1");
    let popped = popped.await;
    a.ack(&popped["messages"][0], "failed", None).await;
    assert_eq!(a.scalar("SELECT count(*) FROM queen.dead_letters").await, 1);
    // A message, a timer due later.
    a.push("before", "Default", &[("live", json!({"m": "OLDMARK-live"}))]).await;
    let payload = base64::engine::general_purpose::STANDARD.encode(json!({"m": "OLDMARK-timer"}).to_string());
    let (status, body) = a
        .post(
            "/api/v1/timers",
            &json!({"operations": [{"op": "schedule", "queue": "before", "timerKey": "t", "payload": payload,
                                     "delayMs": 600000}]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // Stream state of the queue as a source.
    let (status, reg) = a
        .post(
            "/streams/v1/queries",
            &json!({"name": "sq", "source_queue": "before", "sink_queue": "sink", "config_hash": "h"}),
        )
        .await;
    assert_eq!(status, 200, "{reg}");
    let qid = reg["query_id"].as_str().unwrap().to_owned();
    a.push("before", "Default", &[("src1", json!({"m": "OLDMARK-src"}))]).await;
    let cycle = |pop: &Value, key: &str, value: Value| {
        let msgs = pop["messages"].as_array().unwrap();
        json!({"query_id": qid, "partition_id": pop["partitionId"], "consumer_group": "g",
               "state_ops": [{"type": "upsert", "key": key, "value": value}], "push_items": [],
               "ack": {"transactionId": msgs[msgs.len() - 1]["transactionId"], "leaseId": pop["leaseId"],
                       "status": "completed", "count": msgs.len()},
               "release_lease": true})
    };
    let pop = a.pop_some("before", "batch=10&consumerGroup=g&subscriptionMode=all").await;
    let pid = pop["partitionId"].as_str().unwrap().to_owned();
    let old_state = json!({"windowEnd": 100, "secret": "OLDMARK-state"});
    let (_, ok) = a.post("/streams/v1/cycle", &cycle(&pop, "w1", old_state.clone())).await;
    assert_eq!(ok["success"], true, "{ok}");
    assert!(plaintext_anywhere(&a, "OLDMARK").await.len() >= 5, "every table holds the marker before");

    a.configure_ok("before", json!({"encryptionEnabled": true})).await;
    let leaks = plaintext_anywhere(&a, "OLDMARK").await;
    assert!(leaks.is_empty(), "{leaks:?}");

    // State after the switch is sealed by the cycle; both read back, and the
    // ripe filter still sees windowEnd.
    a.push("before", "Default", &[("src2", json!({"m": 2}))]).await;
    let pop = a.pop_some("before", "batch=10&consumerGroup=g").await;
    let new_state = json!({"windowEnd": 300, "secret": "NEWMARK-state"});
    let (_, ok) = a.post("/streams/v1/cycle", &cycle(&pop, "w2", new_state.clone())).await;
    assert_eq!(ok["success"], true, "{ok}");
    assert!(plaintext_anywhere(&a, "NEWMARK").await.is_empty());
    let read = |ripe: Option<i64>| {
        let mut body = json!({"query_id": qid, "partition_id": pid, "keys": []});
        if let Some(r) = ripe {
            body["ripe_at_or_before"] = json!(r);
        }
        let a = &a;
        async move { a.post("/streams/v1/state/get", &body).await.1 }
    };
    let all = read(None).await;
    assert_eq!(all["rows"][0]["value"], old_state, "{all}");
    assert_eq!(all["rows"][1]["value"], new_state, "{all}");
    let ripe = read(Some(150)).await;
    assert_eq!(ripe["rows"].as_array().unwrap().len(), 1, "{ripe}");
    assert_eq!(ripe["rows"][0]["key"], "w1");

    // The timer from before the switch fires sealed and reads back.
    let sql = a.sql().await;
    sql.execute("UPDATE queen.timers SET deliver_at = now() - interval '1 second'", &[]).await.unwrap();
    // A plain timer the sealing pass missed (as if it was cut short).
    sql.execute(
        "INSERT INTO queen.timers (queue_name, timer_key, partition_name, payload, txn, message_id, deliver_at)
         VALUES ('before', 'raw', 'Default', '{\"m\":\"OLDMARK-raw\"}', 'raw', gen_random_uuid(), now())",
        &[],
    )
    .await
    .unwrap();
    let fired = a.engine.fire_due_timers(100).await.unwrap();
    assert_eq!(fired.fired, 2);
    let leaks = plaintext_anywhere(&a, "OLDMARK").await;
    assert!(leaks.is_empty(), "{leaks:?}");
    let popped = a.pop_some("before", "batch=10").await;
    let mut seen: Vec<String> =
        popped["messages"].as_array().unwrap().iter().map(|m| m["data"].to_string()).collect();
    seen.sort();
    assert!(seen.iter().any(|d| d.contains("OLDMARK-timer")), "{seen:?}");
    assert!(seen.iter().any(|d| d.contains("OLDMARK-raw")), "{seen:?}");
    assert!(seen.iter().any(|d| d.contains("OLDMARK-live")), "{seen:?}");
    // The dead letter reads back too.
    let dlq = a.dlq("before").await;
    assert!(dlq.to_string().contains("OLDMARK-dead"), "{dlq}");
}
