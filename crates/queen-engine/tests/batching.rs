//! The push batcher: concurrent push requests share one statement and one
//! commit, and each still gets the answer a call of its own would have had.
//! One batch slot forces the requests in flight into few batches.
mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::{all_at_once, db_config, TestEngine};
use queen_engine::{BatchKind, Engine, EngineError, EngineOptions, PopRequest};
use serde_json::Value;

fn batching_engine(b: &TestEngine) -> Arc<Engine> {
    let options = EngineOptions { push_batch_slots: 1, kv_sweep_interval: None, ..EngineOptions::default() };
    Arc::new(Engine::connect(&db_config(&b.db), options).expect("engine"))
}

async fn push_all(engine: &Arc<Engine>, bodies: Vec<String>) -> Vec<Result<Value, EngineError>> {
    all_at_once(bodies, |body| {
        let engine = engine.clone();
        async move { engine.push(&body).await.map(|j| serde_json::from_str::<Value>(&j.0).expect("json")) }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_pushes_share_batches_and_keep_fifo_dedup_and_their_own_answers() {
    let b = TestEngine::start().await;
    let engine = batching_engine(&b);
    // Make the partition exist, then race 64 requests: 48 distinct ids and
    // 16 that repeat one of them (each repeat is a duplicate of whichever
    // request committed the id first).
    engine.push(r#"[{"queue":"race","partition":"p","transactionId":"warm"}]"#).await.expect("warm");
    let bodies: Vec<String> = (0..64)
        .map(|i| {
            let id = if i < 48 { format!("t{i}") } else { format!("t{}", i - 48) };
            format!(r#"[{{"queue":"race","partition":"p","transactionId":"{id}","payload":{{"i":{i}}}}}]"#)
        })
        .collect();
    let answers = push_all(&engine, bodies).await;
    let mut queued: HashMap<String, String> = HashMap::new();
    let mut duplicates = Vec::new();
    for a in &answers {
        let a = a.as_ref().expect("push");
        assert_eq!(a.as_array().map(Vec::len), Some(1), "{a}");
        let r = &a[0];
        assert_eq!(r["index"], 0, "each request is indexed from 0: {a}");
        let (tx, id) =
            (r["transaction_id"].as_str().unwrap().to_owned(), r["message_id"].as_str().unwrap().to_owned());
        match r["status"].as_str() {
            Some("queued") => assert!(queued.insert(tx, id).is_none(), "an id queued twice"),
            Some("duplicate") => duplicates.push((tx, id)),
            other => panic!("status {other:?}"),
        }
    }
    assert_eq!(queued.len(), 48);
    assert_eq!(duplicates.len(), 16);
    for (tx, id) in duplicates {
        assert_eq!(queued.get(&tx), Some(&id), "a duplicate names the message that was queued");
    }
    // Offsets have no gap and every queued id is in the log once.
    let sql = b.sql().await;
    let row = sql.query_one("select count(*), max(seq) from queen.messages", &[]).await.expect("sql");
    assert_eq!((row.get::<_, i64>(0), row.get::<_, i64>(1)), (49, 48));
    let sizes = engine.batch_sizes(BatchKind::Push);
    let (batches, requests) = (sizes.count, sizes.sum);
    assert_eq!(requests, 65);
    assert!(batches < requests, "{batches} batches for {requests} requests: nothing was batched");
    // FIFO: a pop sees the log in offset order.
    let req = PopRequest { queue: "race".into(), batch: 100, partitions: 1, ..PopRequest::default() };
    let popped: Value =
        serde_json::from_str(&engine.pop(&req).await.expect("pop").expect("some").0).expect("json");
    let order: Vec<&str> =
        popped["messages"].as_array().unwrap().iter().map(|m| m["transactionId"].as_str().unwrap()).collect();
    let by_seq: Vec<String> = sql
        .query("select transaction_id from queen.messages order by seq", &[])
        .await
        .expect("sql")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(order, by_seq);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_size_judges_batched_requests_one_after_another() {
    let b = TestEngine::start().await;
    b.configure_ok("small", serde_json::json!({"maxSize": 10})).await;
    let engine = batching_engine(&b);
    let bodies =
        (0..40).map(|i| format!(r#"[{{"queue":"small","transactionId":"m{i}","payload":{i}}}]"#)).collect();
    let answers = push_all(&engine, bodies).await;
    let statuses: Vec<String> =
        answers.iter().map(|a| a.as_ref().expect("push")[0]["status"].as_str().unwrap().to_owned()).collect();
    assert_eq!(statuses.iter().filter(|s| *s == "queued").count(), 10, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| *s == "failed").count(), 30, "{statuses:?}");
    assert_eq!(b.scalar("select count(*) from queen.messages").await, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_that_fails_as_a_whole_is_retried_request_by_request() {
    let b = TestEngine::start().await;
    let engine = batching_engine(&b);
    engine.set_maintenance(Some(true), None).await.expect("pause");
    let bodies = (0..20).map(|i| format!(r#"[{{"queue":"paused","transactionId":"m{i}"}}]"#)).collect();
    for a in push_all(&engine, bodies).await {
        assert!(matches!(a, Err(EngineError::Paused(_))), "{a:?}");
    }
    assert_eq!(b.scalar("select count(*) from queen.messages").await, 0);
    engine.set_maintenance(Some(false), None).await.expect("resume");
    let a = engine.push(r#"[{"queue":"paused","transactionId":"after"}]"#).await.expect("push");
    assert!(a.0.contains("queued"));
}

/// A batch whose first request maxSize refuses and whose second request
/// repeats one of its transaction ids: the repeat is queued (a refused item
/// is no first occurrence) with the id its own row got, and the refused
/// items answer failed with no id. The batch is sent as push_rows receives
/// it from the batcher, so its shape does not depend on timing.
#[tokio::test]
async fn a_transaction_id_repeated_after_a_refused_request_of_the_batch_is_queued() {
    let b = TestEngine::start().await;
    b.configure_ok("cap", serde_json::json!({"maxSize": 2})).await;
    b.push("cap", "p", &[("seed", serde_json::json!(0))]).await;
    let sql = b.sql().await;
    let row = sql
        .query_one(
            "SELECT r.verdicts, r.ids::text[] FROM queen.push_rows(
               ARRAY['cap','cap','cap','cap'], ARRAY['p','p','p','p'], ARRAY['x','y','z','x'],
               ARRAY[NULL,NULL,NULL,NULL]::text[], ARRAY['1','2','3','4'], ARRAY[0,0,0,1]) r",
            &[],
        )
        .await
        .expect("push_rows");
    let verdicts: String = row.get(0);
    let ids: Vec<Option<String>> = row.get(1);
    assert_eq!(verdicts, "fffq", "{ids:?}");
    assert!(ids[0].is_none());
    let stored: String = sql
        .query_one("select id::text from queen.messages where transaction_id = 'x'", &[])
        .await
        .expect("x stored once")
        .get(0);
    assert_eq!(ids[3].as_deref(), Some(stored.as_str()));
    assert_eq!(b.scalar("select max(seq) from queen.messages").await, 1, "offsets have no gap");
}
