//! The bundle batcher: concurrent transaction bundles of acks and KV ops
//! share one statement and one commit (`queen.transaction_batch`). Each
//! bundle is decided before it is applied: a refused one writes nothing
//! and answers alone while the others commit, with no bundle run again;
//! each is all-or-nothing, and each answer is the one a serial run gives.
//! One batch slot forces the bundles in flight into few batches.
mod common;

use std::sync::Arc;

use common::{all_at_once, db_config, TestEngine};
use queen_engine::{BatchKind, Engine, EngineError, EngineOptions, PopRequest};
use serde_json::{json, Value};

fn bundle_batching_engine(b: &TestEngine, slots: usize) -> Arc<Engine> {
    let options =
        EngineOptions { transaction_batch_slots: slots, kv_sweep_interval: None, ..EngineOptions::default() };
    Arc::new(Engine::connect(&db_config(&b.db), options).expect("engine"))
}

/// One leased message on each of `lanes` partitions of `queue`.
async fn leased(engine: &Engine, queue: &str, lanes: usize) -> Vec<Value> {
    let items: Vec<Value> = (0..lanes)
        .map(|i| {
            json!({"queue": queue, "partition": format!("p{i}"), "transactionId": format!("m{i}"),
                        "payload": {"i": i}})
        })
        .collect();
    engine.push(&Value::Array(items).to_string()).await.expect("push");
    let mut out = Vec::new();
    for i in 0..lanes {
        let req = PopRequest {
            queue: queue.into(),
            partition: Some(format!("p{i}")),
            batch: 1,
            partitions: 1,
            ..PopRequest::default()
        };
        let answer = engine.pop(&req).await.expect("pop").expect("a message");
        let popped: Value = serde_json::from_str(&answer.0).expect("json");
        out.push(popped["messages"][0].clone());
    }
    out
}

/// once + ack: the ack of `m` and a required marker `key`.
fn once_ack(m: &Value, key: &str) -> String {
    json!({
        "operations": [{"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"],
                        "leaseId": m["leaseId"], "status": "completed"}],
        "kv": [{"op": "putIfAbsent", "ns": "once", "key": key, "value": m["transactionId"],
                "ttlSeconds": 3600, "required": true}]
    })
    .to_string()
}

async fn run_all(engine: &Arc<Engine>, bodies: Vec<String>) -> Vec<Result<Value, EngineError>> {
    all_at_once(bodies, |body| {
        let engine = engine.clone();
        async move {
            engine.transaction(&body).await.map(|j| serde_json::from_str::<Value>(&j.0).expect("json"))
        }
    })
    .await
}

/// Messages still on their lane's cursor (not acked) among `m`.
async fn unacked(b: &TestEngine) -> i64 {
    b.scalar(
        "SELECT count(*) FROM queen.messages m JOIN queen.cursors c ON c.partition_id = m.partition_id
          WHERE c.consumer_group = '__QUEUE_MODE__' AND m.seq >= c.next_seq",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_once_ack_bundles_share_commits_and_each_commits_its_marker_with_its_ack() {
    let b = TestEngine::start().await;
    let engine = bundle_batching_engine(&b, 1);
    let messages = leased(&engine, "once", 48).await;
    let bodies: Vec<String> = messages
        .iter()
        .map(|m| once_ack(m, &format!("charge:{}", m["transactionId"].as_str().unwrap())))
        .collect();
    let answers = run_all(&engine, bodies).await;
    for (i, a) in answers.iter().enumerate() {
        let a = a.as_ref().unwrap_or_else(|e| panic!("bundle {i}: {e}"));
        assert_eq!(a["success"], true, "{a}");
        let results = a["results"].as_array().expect("results");
        assert_eq!(results.len(), 2, "{a}");
        assert_eq!(results[0]["type"], "ack");
        assert_eq!(
            results[0]["transactionId"], messages[i]["transactionId"],
            "each bundle has its own answer"
        );
        assert_eq!(results[1]["type"], "kv");
        assert_eq!(results[1]["index"], 1);
        assert_eq!(results[1]["applied"], true, "{a}");
    }
    assert_eq!(b.scalar("SELECT count(*) FROM queen.kv WHERE ns = 'once'").await, 48);
    assert_eq!(unacked(&b).await, 0, "every ack committed with its marker");
    let sizes = engine.batch_sizes(BatchKind::Transaction);
    assert_eq!(sizes.sum, 48);
    assert!(sizes.count < 48, "{} statements for 48 bundles: nothing was batched", sizes.count);
    assert_eq!(sizes.retried, 0, "no bundle was refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_bundle_in_a_batch_changes_nothing_and_the_others_commit() {
    let b = TestEngine::start().await;
    let engine = bundle_batching_engine(&b, 1);
    let messages = leased(&engine, "refuse", 32).await;
    // The marker of bundle 11 is taken already: it must roll back whole
    // (its ack too), and only it.
    let client = b.sql().await;
    client
        .execute(
            "INSERT INTO queen.kv (ns, key, value, version, expires_at)
             VALUES ('once', 'taken', '\"before\"', nextval('queen.kv_version_seq'), now() + interval '1 hour')",
            &[],
        )
        .await
        .expect("marker");
    let bodies: Vec<String> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let key = if i == 11 { "taken".to_owned() } else { format!("k{i}") };
            once_ack(m, &key)
        })
        .collect();
    let answers = run_all(&engine, bodies).await;
    for (i, a) in answers.iter().enumerate() {
        if i == 11 {
            match a {
                Err(EngineError::Refused(body)) => {
                    let body: Value = serde_json::from_str(body).expect("json");
                    assert_eq!(body["success"], false, "{body}");
                    assert_eq!(body["reason"], "kv_precondition", "{body}");
                    assert_eq!(body["value"], "before", "the refusal names the live marker: {body}");
                }
                other => panic!("bundle 11 is refused: {other:?}"),
            }
        } else {
            assert_eq!(a.as_ref().expect("a good bundle")["success"], true, "bundle {i}");
        }
    }
    assert_eq!(unacked(&b).await, 1, "only the refused bundle's message is still on its cursor");
    let still: i64 = b
        .scalar(&format!(
            "SELECT count(*) FROM queen.messages m JOIN queen.cursors c ON c.partition_id = m.partition_id
              WHERE m.transaction_id = '{}' AND m.seq >= c.next_seq",
            messages[11]["transactionId"].as_str().unwrap()
        ))
        .await;
    assert_eq!(still, 1, "the refused bundle's ack did not commit");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.kv WHERE ns = 'once'").await, 32);
    assert_eq!(
        engine.batch_sizes(BatchKind::Transaction).retried,
        0,
        "the refusal was decided ahead: no bundle ran again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bundle_with_a_stale_lease_in_a_batch_is_refused_alone_and_the_others_commit() {
    let b = TestEngine::start().await;
    let engine = bundle_batching_engine(&b, 1);
    let mut messages = leased(&engine, "stale", 24).await;
    // Bundle 5 acks under a lease that is not the cursor's.
    messages[5]["leaseId"] = json!(uuid::Uuid::new_v4().to_string());
    let bodies: Vec<String> =
        messages.iter().enumerate().map(|(i, m)| once_ack(m, &format!("s{i}"))).collect();
    let answers = run_all(&engine, bodies).await;
    for (i, a) in answers.iter().enumerate() {
        if i == 5 {
            let Err(EngineError::Refused(body)) = a else { panic!("bundle 5 is refused: {a:?}") };
            let body: Value = serde_json::from_str(body).expect("json");
            assert_eq!(body["reason"], "rejected_ack", "{body}");
            assert!(body["error"].as_str().unwrap_or("").starts_with("QTXN 1 acked"), "{body}");
        } else {
            assert_eq!(a.as_ref().expect("a good bundle")["success"], true, "bundle {i}");
        }
    }
    assert_eq!(unacked(&b).await, 1, "only the refused bundle's message is still on its cursor");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.kv WHERE ns = 'once' AND key = 's5'").await, 0);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.kv WHERE ns = 'once'").await, 23);
    assert_eq!(engine.batch_sizes(BatchKind::Transaction).retried, 0, "no bundle ran again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bundles_racing_one_marker_in_batches_have_exactly_one_winner() {
    let b = TestEngine::start().await;
    let engine = bundle_batching_engine(&b, 1);
    let messages = leased(&engine, "race", 32).await;
    let bodies: Vec<String> = messages.iter().map(|m| once_ack(m, "the-one")).collect();
    let answers = run_all(&engine, bodies).await;
    let winners: Vec<usize> = answers.iter().enumerate().filter(|(_, a)| a.is_ok()).map(|(i, _)| i).collect();
    assert_eq!(winners.len(), 1, "{answers:?}");
    let winner = &messages[winners[0]]["transactionId"];
    for a in &answers {
        if let Err(e) = a {
            let EngineError::Refused(body) = e else { panic!("a loser is refused: {e}") };
            let body: Value = serde_json::from_str(body).expect("json");
            assert_eq!(&body["value"], winner, "every loser names the winner's marker: {body}");
        }
    }
    assert_eq!(unacked(&b).await, 31, "only the winner's ack committed");
    assert_eq!(engine.batch_sizes(BatchKind::Transaction).retried, 0, "the losers were decided ahead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bundle_batches_writing_keys_in_opposite_orders_never_deadlock() {
    let b = TestEngine::start().await;
    // Two slots: two batches in flight at once, locking the same keys.
    let engine = bundle_batching_engine(&b, 2);
    // Bundles of one incr each, keys in ascending then descending runs: a
    // batch that locked in bundle order would take k0 before k5 in one
    // statement and k5 before k0 in the other.
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    let mut bodies = Vec::new();
    for round in 0..40 {
        let order: Vec<&String> =
            if round % 2 == 0 { keys.iter().collect() } else { keys.iter().rev().collect() };
        for k in order {
            let op = json!({"op": "incr", "ns": "d", "key": k, "delta": 1, "forever": true});
            bodies.push(json!({"operations": [], "kv": [op]}).to_string());
        }
    }
    let answers = run_all(&engine, bodies).await;
    assert!(answers.iter().all(|a| a.is_ok()), "{answers:?}");
    assert_eq!(
        b.scalar("SELECT sum((value #>> '{}')::bigint)::bigint FROM queen.kv WHERE ns = 'd'").await,
        6 * 40
    );
    let deadlocks =
        b.scalar("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").await;
    assert_eq!(deadlocks, 0, "a batch locked keys out of order");
    assert_eq!(engine.batch_sizes(BatchKind::Transaction).retried, 0, "a bundle batch failed as a whole");
}

/// Strips the KV versions (drawn from a sequence, so they differ between
/// two runs of the same bundles) from a transaction answer.
/// A bundle's record as the engine reads it (`transaction.rs`, `answer`):
/// versions aside (drawn per run), and of each ack only what the answer
/// carries (`transactionId`, `dlq`).
fn without_versions(mut answer: Value) -> Value {
    for part in ["results", "kv"] {
        if let Some(results) = answer[part].as_array_mut() {
            for r in results {
                if let Some(o) = r.as_object_mut() {
                    o.remove("version");
                }
            }
        }
    }
    if let Some(acks) = answer["acks"].as_array_mut() {
        for a in acks.iter_mut() {
            *a = json!({"transactionId": a["transactionId"], "dlq": a["dlq"]});
        }
    }
    answer
}

/// The idempotent consumer's batch (completions, one required putIfAbsent
/// each, no cursor or key shared) takes the one-pass path
/// (`queen.once_ack_batch`), and each bundle's answer there is the one
/// `transaction_rows` gives it alone: an accepted bundle, one refused by a
/// stale lease, one refused by a live marker. A batch whose bundles share a
/// key does not take it. Each run rolls back.
#[tokio::test]
async fn a_once_ack_batch_in_one_pass_answers_each_bundle_as_alone() {
    let b = TestEngine::start().await;
    let engine = bundle_batching_engine(&b, 1);
    let m = leased(&engine, "pass", 3).await;
    let client = b.sql().await;
    client
        .batch_execute(
            "INSERT INTO queen.kv (ns, key, value, version, expires_at)
             VALUES ('once', 'k2', '\"before\"', nextval('queen.kv_version_seq'), now() + interval '1 hour')",
        )
        .await
        .expect("marker");
    let txid = |i: usize| m[i]["transactionId"].as_str().expect("txid").to_owned();
    let pid = |i: usize| m[i]["partitionId"].as_str().expect("pid").to_owned();
    // Bundle 1 acks under a lease that is not its cursor's; bundle 2's marker is live.
    let lease = |i: usize| {
        if i == 1 {
            uuid::Uuid::new_v4().to_string()
        } else {
            m[i]["leaseId"].as_str().expect("lease").to_owned()
        }
    };
    let lit = |v: Vec<String>| format!("ARRAY['{}']", v.join("','"));
    let batch = |keys: [&str; 3]| {
        format!(
            "SELECT o.answers, o.refused FROM queen.once_ack_batch(ARRAY['t0','t1','t2'], ARRAY[NULL,NULL,NULL]::text[],
               ARRAY[1,1,1], ARRAY[1,1,1], ARRAY[1,1,1], ARRAY[0,0,0], {}, {}::uuid[],
               ARRAY['completed','completed','completed'], {}, ARRAY['__QUEUE_MODE__','__QUEUE_MODE__','__QUEUE_MODE__'],
               ARRAY['putIfAbsent','putIfAbsent','putIfAbsent'], ARRAY['once','once','once'], {},
               ARRAY['1','2','3']::jsonb[], ARRAY[60,60,60]::bigint[], ARRAY[NULL,NULL,NULL]::boolean[],
               ARRAY[true,true,true]) o",
            lit((0..3).map(txid).collect()),
            lit((0..3).map(pid).collect()),
            lit((0..3).map(lease).collect()),
            lit(keys.iter().map(|k| (*k).to_owned()).collect()),
        )
    };
    let alone = |i: usize, key: &str| {
        format!(
            "SELECT queen.transaction_rows('t{i}', NULL, 4194304, 1,
               '{{}}'::integer[], '{{}}'::text[], '{{}}'::text[], '{{}}'::text[], '{{}}'::text[], '{{}}'::text[],
               ARRAY[0], ARRAY['{}'], ARRAY['{}'::uuid], ARRAY['completed'], ARRAY[NULL::text], ARRAY['{}'],
               ARRAY['__QUEUE_MODE__'],
               ARRAY['putIfAbsent'], ARRAY['once'], ARRAY['{key}'], ARRAY['{}'::jsonb], ARRAY[60::bigint],
               ARRAY[NULL::boolean], ARRAY[NULL::bigint], ARRAY[true], ARRAY[NULL::numeric], ARRAY[NULL::numeric],
               ARRAY[NULL::numeric], ARRAY[NULL::jsonb], ARRAY[NULL::text], ARRAY[NULL::text], ARRAY[NULL::integer],
               ARRAY[NULL::boolean],
               '{{}}'::text[], '{{}}'::text[], '{{}}'::text[], '{{}}'::text[], '{{}}'::text[], '{{}}'::bigint[],
               '{{}}'::text[])::text",
            txid(i),
            pid(i),
            lease(i),
            i + 1
        )
    };
    client.batch_execute("BEGIN").await.expect("begin");
    let row = client.query_one(&batch(["k0", "k1", "k2"]), &[]).await.expect("one pass");
    let (answers, refused): (Option<Vec<String>>, Option<Vec<bool>>) = (row.get(0), row.get(1));
    client.batch_execute("ROLLBACK").await.expect("rollback");
    let (answers, refused) = (answers.expect("the one-pass path is taken"), refused.expect("refused"));
    assert_eq!(refused, vec![false, true, true]);
    for (i, key) in ["k0", "k1", "k2"].into_iter().enumerate() {
        client.batch_execute("BEGIN").await.expect("begin");
        let lone = client.query_one(&alone(i, key), &[]).await;
        client.batch_execute("ROLLBACK").await.expect("rollback");
        let batched: Value = serde_json::from_str(&answers[i]).expect("json");
        match lone {
            Ok(row) => {
                assert!(!refused[i], "bundle {i} is accepted alone");
                let lone: Value = serde_json::from_str(&row.get::<_, String>(0)).expect("json");
                assert_eq!(without_versions(batched), without_versions(lone), "bundle {i}");
            }
            Err(e) => {
                assert!(refused[i], "bundle {i} is refused alone");
                let e = e.as_db_error().expect("a refusal");
                let mut lone: Value = serde_json::from_str(e.message()).expect("json");
                // A refusal raises its facts: a refused ack's as
                // {"ackRefused": ..} (QN202), a lost precondition's bare
                // (QN201); a batch answers them as its refused bundle's
                // ackRefused or kvLost.
                if e.code().code() == "QN201" {
                    lone = json!({ "kvLost": lone });
                }
                assert_eq!(batched, lone, "bundle {i}");
            }
        }
    }
    // Two bundles on one key: member by member.
    client.batch_execute("BEGIN").await.expect("begin");
    let row = client.query_one(&batch(["k0", "k0", "k5"]), &[]).await.expect("sql");
    client.batch_execute("ROLLBACK").await.expect("rollback");
    assert!(row.get::<_, Option<Vec<String>>>(0).is_none(), "a shared key is not one-pass");
}

/// A bundle of acks only, batched with once + ack bundles, takes the
/// one-pass path too, and its record carries no KV outcome (7356301 wrote
/// `jsonb_build_array(NULL)` there: a trailing null in its results).
#[tokio::test]
async fn an_ack_only_bundle_in_a_one_pass_batch_answers_its_acks_and_no_kv_outcome() {
    let b = TestEngine::start().await;
    let engine = bundle_batching_engine(&b, 1);
    let m = leased(&engine, "pass-ack-only", 2).await;
    let s = |i: usize, f: &str| m[i][f].as_str().expect(f).to_owned();
    let sql = format!(
        "SELECT o.answers, o.refused FROM queen.once_ack_batch(ARRAY['t0','t1'], ARRAY[NULL,NULL]::text[],
           ARRAY[1,1], ARRAY[1,1], ARRAY[1,0], ARRAY[0,0], ARRAY['{}','{}'], ARRAY['{}','{}']::uuid[],
           ARRAY['completed','completed'], ARRAY['{}','{}'], ARRAY[queen.queue_mode(), queen.queue_mode()],
           ARRAY['putIfAbsent'], ARRAY['once'], ARRAY['marker-0'], ARRAY['1']::jsonb[], ARRAY[60]::bigint[],
           ARRAY[NULL]::boolean[], ARRAY[true]) o",
        s(0, "transactionId"),
        s(1, "transactionId"),
        s(0, "partitionId"),
        s(1, "partitionId"),
        s(0, "leaseId"),
        s(1, "leaseId"),
    );
    let client = b.sql().await;
    client.batch_execute("BEGIN").await.expect("begin");
    let row = client.query_one(&sql, &[]).await.expect("one pass");
    client.batch_execute("ROLLBACK").await.expect("rollback");
    let (answers, refused): (Option<Vec<String>>, Option<Vec<bool>>) = (row.get(0), row.get(1));
    assert_eq!(refused, Some(vec![false, false]), "the one-pass path is taken and accepts both");
    let answers = answers.expect("answers");
    let marked: Value = serde_json::from_str(&answers[0]).expect("json");
    let ack_only: Value = serde_json::from_str(&answers[1]).expect("json");
    assert_eq!(marked["kv"].as_array().map(Vec::len), Some(1), "{marked}");
    assert_eq!(ack_only["kv"], json!([]), "{ack_only}");
    assert_eq!(ack_only["ackDlq"], json!([false]), "one applied ack: {ack_only}");
}
