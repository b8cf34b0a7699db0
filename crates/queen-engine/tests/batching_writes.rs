//! The KV write and ack batchers: concurrent single-op KV writes and
//! concurrent ack requests share one statement and one commit, and each
//! member still gets the answer a call of its own would have had. One batch
//! slot forces the requests in flight into few batches; four slots let
//! batches run side by side, which is what the deadlock checks need.
mod common;

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{all_at_once, db_config, TestEngine};
use queen_engine::{BatchKind, Engine, EngineError, EngineOptions, PopRequest};
use serde_json::{json, Value};
use tokio::sync::Barrier;

fn engine_with_slots(b: &TestEngine, slots: usize) -> Arc<Engine> {
    let options = EngineOptions {
        kv_write_batch_slots: slots,
        ack_batch_slots: slots,
        push_batch_slots: slots,
        kv_sweep_interval: None,
        ..EngineOptions::default()
    };
    Arc::new(Engine::connect(&db_config(&b.db), options).expect("engine"))
}

/// One KV call of one op: its result element.
fn kv_one(
    engine: &Arc<Engine>,
    body: Value,
) -> impl Future<Output = Result<Value, EngineError>> + Send + 'static {
    let engine = engine.clone();
    async move {
        engine
            .kv(&body.to_string())
            .await
            .map(|j| serde_json::from_str::<Value>(&j.0).expect("json")["results"][0].clone())
    }
}

/// Runs every body as a KV call of its own, all released at once.
async fn kv_all(engine: &Arc<Engine>, bodies: Vec<Value>) -> Vec<Result<Value, EngineError>> {
    all_at_once(bodies, |body| kv_one(engine, body)).await
}

/// Runs `gate` while `table` is held share-locked by another session, so
/// it takes the batcher's one slot and waits; then starts every one of
/// `rest` and lets the lock go once they have all called, so the rest
/// queue behind the gate and share the batches that follow (a poison
/// member cannot run alone by chance).
async fn behind_a_held_table<G, T, R, F, Fut>(
    b: &TestEngine,
    table: &str,
    gate: G,
    rest: Vec<T>,
    f: F,
) -> Vec<R>
where
    G: Future + Send + 'static,
    G::Output: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    let mut holder = b.sql().await;
    let hold = holder.transaction().await.expect("begin");
    hold.batch_execute(&format!("lock table {table} in share mode")).await.expect("lock");
    let gate = tokio::spawn(gate);
    let waiting = "select count(*) from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'";
    let watcher = b.sql().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while watcher.query_one(waiting, &[]).await.expect("waiting").get::<_, i64>(0) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the gate never waited on the lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let called = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = rest
        .into_iter()
        .map(|item| {
            let (work, called) = (f(item), called.clone());
            tokio::spawn(async move {
                called.fetch_add(1, Ordering::SeqCst);
                work.await
            })
        })
        .collect();
    while called.load(Ordering::SeqCst) < tasks.len() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Each task is a few instructions from the batcher's queue once it has called.
    tokio::time::sleep(Duration::from_millis(100)).await;
    hold.commit().await.expect("release");
    gate.await.expect("gate");
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.expect("join"));
    }
    out
}

/// Deadlocks PostgreSQL has counted in this test's database. Statistics
/// reach the shared counters within about a second of a transaction's end.
async fn deadlocks(b: &TestEngine) -> i64 {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let sql = b.sql().await;
    sql.batch_execute("select pg_stat_clear_snapshot()").await.expect("clear");
    let row = sql
        .query_one("select deadlocks from pg_stat_database where datname = current_database()", &[])
        .await
        .expect("deadlocks");
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_batched_put_if_absent_on_one_key_have_one_winner_that_every_loser_names() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 1);
    let bodies = (0..64)
        .map(|i| json!([{"op": "putIfAbsent", "ns": "race", "key": "once", "value": {"by": i}, "ttlSeconds": 600}]))
        .collect();
    let results: Vec<Value> = kv_all(&engine, bodies).await.into_iter().map(|r| r.expect("kv")).collect();
    let winners: Vec<(usize, &Value)> =
        results.iter().enumerate().filter(|(_, r)| r["applied"] == json!(true)).collect();
    assert_eq!(winners.len(), 1, "exactly one winner: {results:?}");
    let (who, w) = winners[0];
    assert_eq!(w["value"], json!({"by": who}));
    for r in results.iter().filter(|r| r["applied"] == json!(false)) {
        assert_eq!(r["reason"], "exists", "{r}");
        assert_eq!(r["value"], w["value"], "a loser names the winner's value");
        assert_eq!(r["version"], w["version"], "and its version");
    }
    let sql = b.sql().await;
    let row = sql
        .query_one("select value::text, version from queen.kv where key = 'once'", &[])
        .await
        .expect("row");
    assert_eq!(serde_json::from_str::<Value>(&row.get::<_, String>(0)).expect("json"), w["value"]);
    assert_eq!(json!(row.get::<_, i64>(1)), w["version"]);
    let sizes = engine.batch_sizes(BatchKind::KvWrite);
    assert_eq!(sizes.sum, 64);
    assert!(sizes.count < 64, "{} batches for 64 writes: nothing was batched", sizes.count);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batched_incr_with_max_never_passes_it_and_versions_rise_with_the_value() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 1);
    let bodies = (0..64)
        .map(|_| json!([{"op": "incr", "ns": "race", "key": "n", "delta": 1, "max": 50, "forever": true}]))
        .collect();
    let results: Vec<Value> = kv_all(&engine, bodies).await.into_iter().map(|r| r.expect("kv")).collect();
    let mut applied: Vec<(i64, i64)> = results
        .iter()
        .filter(|r| r["applied"] == json!(true))
        .map(|r| (r["value"].as_i64().expect("value"), r["version"].as_i64().expect("version")))
        .collect();
    assert_eq!(applied.len(), 50, "{results:?}");
    for r in results.iter().filter(|r| r["applied"] == json!(false)) {
        assert_eq!(r["reason"], "limit", "{r}");
        assert_eq!(r["value"], json!(50), "a refused incr sees the counter at its max");
    }
    applied.sort();
    let values: Vec<i64> = applied.iter().map(|a| a.0).collect();
    assert_eq!(values, (1..=50).collect::<Vec<i64>>(), "each step applied once");
    assert!(applied.windows(2).all(|w| w[0].1 < w[1].1), "versions rise with the counter: {applied:?}");
    assert_eq!(b.scalar("select (value #>> '{}')::bigint from queen.kv where key = 'n'").await, 50);
    assert!(engine.batch_sizes(BatchKind::KvWrite).count < 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_member_of_a_write_batch_gets_its_own_verdict() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 1);
    engine.kv(r#"[{"op":"put","ns":"m","key":"held","value":1,"forever":true}]"#).await.expect("seed");
    let mut bodies = Vec::new();
    for i in 0..16 {
        bodies.push(json!([{"op": "put", "ns": "m", "key": format!("k{i}"), "value": i, "ttlSeconds": 60}]));
        // A required expect that cannot hold: refused alone, nothing written.
        bodies.push(json!([{"op": "put", "ns": "m", "key": format!("x{i}"), "value": i, "ttlSeconds": 60,
                            "expect": 7, "required": true}]));
        bodies.push(json!([{"op": "check", "ns": "m", "key": "held", "expect": 0}]));
        bodies.push(json!([{"op": "delete", "ns": "m", "key": format!("gone{i}")}]));
    }
    let results = kv_all(&engine, bodies).await;
    for (n, r) in results.into_iter().enumerate() {
        let i = n / 4;
        match n % 4 {
            0 => {
                let r = r.expect("put");
                assert_eq!((r["applied"].clone(), r["value"].clone()), (json!(true), json!(i)), "{r}");
                assert_eq!(r["op"], "put");
                assert_eq!(r["index"], 0);
            }
            1 => match r {
                Err(EngineError::Refused(body)) => {
                    let body: Value = serde_json::from_str(&body).expect("json");
                    assert_eq!(body["reason"], "kv_precondition");
                    assert_eq!(body["kvReason"], "absent");
                    assert_eq!(body["key"], format!("x{i}"));
                }
                other => panic!("a lost required expect is refused: {other:?}"),
            },
            2 => {
                let r = r.expect("check");
                assert_eq!(
                    (r["applied"].clone(), r["reason"].clone()),
                    (json!(false), json!("exists")),
                    "{r}"
                );
            }
            _ => {
                let r = r.expect("delete");
                assert_eq!(
                    (r["applied"].clone(), r["reason"].clone()),
                    (json!(false), json!("absent")),
                    "{r}"
                );
            }
        }
    }
    assert_eq!(b.scalar("select count(*) from queen.kv where key like 'x%'").await, 0);
    assert_eq!(b.scalar("select count(*) from queen.kv where key like 'k%'").await, 16);
    assert!(engine.batch_sizes(BatchKind::KvWrite).count < 64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_batch_that_fails_as_a_whole_fails_only_its_poison_member() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 1);
    // Only the database can refuse this key: a trigger stands in for any
    // failure a statement meets after the engine's checks.
    b.sql()
        .await
        .batch_execute(
            "create function poison() returns trigger language plpgsql as $$
             begin raise exception 'poisoned key'; end $$;
             create trigger poison before insert on queen.kv for each row
               when (new.key = 'poison') execute function poison();",
        )
        .await
        .expect("trigger");
    let bodies = (0..32)
        .map(|i| {
            let key = if i == 17 { "poison".to_owned() } else { format!("ok{i}") };
            json!([{"op": "put", "ns": "p", "key": key, "value": i, "forever": true}])
        })
        .collect();
    let gate = {
        let engine = engine.clone();
        async move {
            engine
                .kv(&json!([{"op": "put", "ns": "gate", "key": "g", "value": 0, "forever": true}])
                    .to_string())
                .await
        }
    };
    let results = behind_a_held_table(&b, "queen.kv", gate, bodies, |body| kv_one(&engine, body)).await;
    for (i, r) in results.iter().enumerate() {
        if i == 17 {
            assert!(matches!(r, Err(EngineError::Database(_))), "the poison member fails: {r:?}");
        } else {
            assert_eq!(r.as_ref().expect("put")["applied"], json!(true), "member {i}");
        }
    }
    assert_eq!(b.scalar("select count(*) from queen.kv where ns = 'p'").await, 31);
    assert!(engine.batch_sizes(BatchKind::KvWrite).retried >= 1, "the poisoned batch ran member by member");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn write_batches_in_opposite_key_orders_beside_multi_op_calls_never_deadlock() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 4);
    let keys: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    let mut bodies = Vec::new();
    for round in 0..12 {
        let order: Vec<&String> =
            if round % 2 == 0 { keys.iter().collect() } else { keys.iter().rev().collect() };
        for k in order {
            bodies.push(json!([{"op": "incr", "ns": "d", "key": k, "delta": 1, "forever": true}]));
        }
        // A multi-op call over every key (kv_apply locks them in key order).
        let ops: Vec<Value> = keys
            .iter()
            .rev()
            .map(|k| json!({"op": "incr", "ns": "d", "key": k, "delta": 1, "forever": true}))
            .collect();
        bodies.push(Value::Array(ops));
    }
    let n = bodies.len();
    let results = kv_all(&engine, bodies).await;
    assert_eq!(results.iter().filter(|r| r.is_ok()).count(), n, "{results:?}");
    // 12 rounds: 12 single incrs and 12 multi-op incrs of every key.
    assert_eq!(
        b.scalar("select sum((value #>> '{}')::bigint)::bigint from queen.kv where ns = 'd'").await,
        8 * 24
    );
    assert_eq!(engine.batch_sizes(BatchKind::KvWrite).retried, 0, "a write batch failed as a whole");
    assert_eq!(deadlocks(&b).await, 0, "a batch locked keys out of order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletes_checks_and_writes_of_one_key_mixed_in_batches_never_conflict() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 4);
    // A batch may hold a delete (a row lock) and then a put of the same key
    // (the key lock): without the key lock first, two such batches deadlock.
    let tasks: Vec<_> = (0..16usize)
        .map(|t| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let mut seen = 0i64;
                for i in 0..30 {
                    let op = match (t + i) % 5 {
                        0 => json!({"op": "delete", "ns": "mix", "key": "k"}),
                        1 => json!({"op": "putIfAbsent", "ns": "mix", "key": "k", "value": t, "ttlSeconds": 60}),
                        2 => json!({"op": "incr", "ns": "mix", "key": "k", "ttlSeconds": 60}),
                        3 => json!({"op": "check", "ns": "mix", "key": "k", "expect": 0}),
                        _ => json!({"op": "put", "ns": "mix", "key": "k", "value": 1, "forever": true}),
                    };
                    let body = json!([op]).to_string();
                    let r: Value = serde_json::from_str(&engine.kv(&body).await.expect("no conflict").0).expect("json");
                    let r = &r["results"][0];
                    if r["applied"] == json!(true) && r["op"] != "delete" && r["op"] != "check" {
                        let v = r["version"].as_i64().expect("version");
                        assert!(v > seen, "a write after seeing {seen} got {v}");
                        seen = v;
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("worker");
    }
    assert_eq!(engine.batch_sizes(BatchKind::KvWrite).retried, 0, "a write batch failed as a whole");
    assert_eq!(deadlocks(&b).await, 0);
}

/// Puts on distinct keys take the set-based statement (kv_put_batch.sql):
/// each member's verdict is still the one kv_put gives alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn set_based_put_batches_answer_each_member_as_kv_put_would() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 1);
    let sql = b.sql().await;
    // live0..7 are live, dead0..7 expired but not yet swept, new0..7 absent.
    sql.batch_execute(
        "insert into queen.kv (ns, key, value, version, expires_at)
         select 's', 'live' || i, to_jsonb(i), nextval('queen.kv_version_seq'), null from generate_series(0, 7) i;
         insert into queen.kv (ns, key, value, version, expires_at)
         select 's', 'dead' || i, to_jsonb(i), nextval('queen.kv_version_seq'), now() - interval '1 s'
           from generate_series(0, 7) i;",
    )
    .await
    .expect("seed");
    let before: Vec<(String, i64)> = sql
        .query("select key, version from queen.kv where key like 'live%' order by key", &[])
        .await
        .expect("versions")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut bodies = Vec::new();
    for i in 0..8 {
        for prefix in ["live", "dead", "new"] {
            bodies.push(json!([{"op": "putIfAbsent", "ns": "s", "key": format!("{prefix}{i}"),
                                "value": {"by": prefix}, "ttlSeconds": 600}]));
        }
        bodies.push(
            json!([{"op": "put", "ns": "s", "key": format!("plain{i}"), "value": [i, "x"], "forever": true}]),
        );
    }
    let results: Vec<Value> = kv_all(&engine, bodies).await.into_iter().map(|r| r.expect("kv")).collect();
    for (n, r) in results.iter().enumerate() {
        let i = n / 4;
        assert_eq!(r["index"], 0);
        match n % 4 {
            0 => {
                assert_eq!(r["applied"], false, "a live key refuses putIfAbsent: {r}");
                assert_eq!(r["reason"], "exists");
                assert_eq!(r["value"], json!(i), "the loser sees the live value");
                assert_eq!(r["version"], json!(before[i].1), "and its version, untouched");
            }
            1 | 2 => {
                assert_eq!(r["applied"], true, "an expired or absent key takes putIfAbsent: {r}");
                assert_eq!(r["op"], "putIfAbsent");
                let prefix = if n % 4 == 1 { "dead" } else { "new" };
                assert_eq!(r["value"], json!({"by": prefix}));
            }
            _ => {
                assert_eq!((r["applied"].clone(), r["value"].clone()), (json!(true), json!([i, "x"])), "{r}");
                assert_eq!(r["op"], "put");
            }
        }
    }
    // The refused rows kept value, version and expiry; the written ones carry
    // the version their answer named.
    let after: Vec<(String, i64)> = sql
        .query("select key, version from queen.kv where key like 'live%' order by key", &[])
        .await
        .expect("versions")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(before, after);
    for r in results.iter().filter(|r| r["applied"] == json!(true)) {
        let key = r["key"].as_str().expect("key");
        let v: i64 = sql
            .query_one("select version from queen.kv where ns = 's' and key = $1", &[&key])
            .await
            .expect("row")
            .get(0);
        assert_eq!(json!(v), r["version"], "{key}");
    }
    let forever =
        b.scalar("select count(*) from queen.kv where key like 'plain%' and expires_at is null").await;
    assert_eq!(forever, 8);
    assert!(engine.batch_sizes(BatchKind::KvWrite).count < 32, "nothing was batched");
}

/// Two brokers' batches of putIfAbsent over the same distinct keys: one
/// winner per key, and every loser names the winner's value and version
/// although its statement began before the winner committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn set_based_put_if_absent_batches_of_two_engines_keep_one_winner_per_key() {
    let b = TestEngine::start().await;
    let engines = [engine_with_slots(&b, 1), engine_with_slots(&b, 1)];
    for round in 0..5 {
        let barrier = Arc::new(Barrier::new(64));
        let tasks: Vec<_> = (0..64)
            .map(|t| {
                let (engine, barrier) = (engines[t % 2].clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    let body = json!([{"op": "putIfAbsent", "ns": "two", "key": format!("r{round}k{}", t / 2),
                                       "value": {"by": t}, "ttlSeconds": 600}]);
                    let v: Value = serde_json::from_str(&engine.kv(&body.to_string()).await.expect("kv").0)
                        .expect("json");
                    (t / 2, v["results"][0].clone())
                })
            })
            .collect();
        let mut by_key: std::collections::HashMap<usize, Vec<Value>> = std::collections::HashMap::new();
        for t in tasks {
            let (k, r) = t.await.expect("task");
            by_key.entry(k).or_default().push(r);
        }
        for (k, rs) in by_key {
            let winners: Vec<&Value> = rs.iter().filter(|r| r["applied"] == json!(true)).collect();
            assert_eq!(winners.len(), 1, "key {k}: {rs:?}");
            for r in rs.iter().filter(|r| r["applied"] == json!(false)) {
                assert_eq!(r["value"], winners[0]["value"], "key {k}: {rs:?}");
                assert_eq!(r["version"], winners[0]["version"], "key {k}: {rs:?}");
            }
        }
    }
}

/// Incrs on distinct keys take the set-based statement (kv_incr_batch.sql):
/// each member's verdict is the one kv_incr gives alone, over every case a
/// key can be in (live integer, live non-integer, live string, at its max,
/// expired, absent), and the expiry rules hold (a live row keeps its own, an
/// expired one starts over with the call's).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn set_based_incr_batches_answer_each_member_as_kv_incr_would() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 1);
    let sql = b.sql().await;
    // The same rows in two namespaces: `b` for the batches, `s` for serial kv_incr calls.
    for ns in ["b", "s"] {
        sql.batch_execute(&format!(
            "insert into queen.kv (ns, key, value, version, expires_at)
             select '{ns}', k || i, v::jsonb, nextval('queen.kv_version_seq'), e
               from generate_series(0, 5) i,
                    (values ('live', '5', null::timestamptz), ('frac', '5.0', now() + interval '1 h'),
                            ('str', '\"x\"', null), ('half', '1.5', null), ('atmax', '10', null),
                            ('dead', '7', now() - interval '1 s')) r(k, v, e)"
        ))
        .await
        .expect("seed");
    }
    // (key prefix, delta, min, max, expiry)
    let cases = [
        ("live", 1, None, None, json!({"forever": true})),
        ("frac", 2, None, None, json!({"ttlSeconds": 60})),
        ("str", 1, None, None, json!({"forever": true})),
        ("half", 1, None, None, json!({"forever": true})),
        ("atmax", 1, None, Some(10), json!({"forever": true})),
        ("dead", 3, None, Some(5), json!({"ttlSeconds": 60})),
        ("new", 4, Some(-1), Some(4), json!({"ttlSeconds": 60})),
        ("down", -2, Some(-2), Some(0), json!({"forever": true})),
    ];
    let mut bodies = Vec::new();
    let mut expected = Vec::new();
    for i in 0..6 {
        for (prefix, delta, min, max, expiry) in &cases {
            let key = format!("{prefix}{i}");
            let mut op = json!({"op": "incr", "ns": "b", "key": key, "delta": delta, "min": min, "max": max});
            for (k, v) in expiry.as_object().expect("expiry") {
                op[k] = v.clone();
            }
            bodies.push(json!([op]));
            let row = sql
                .query_one(
                    "select queen.kv_incr('s', $1, $2::bigint::numeric, $3::bigint::numeric, $4::bigint::numeric,
                                          $5, $6)::text",
                    &[
                        &key,
                        &i64::from(*delta),
                        &min.map(i64::from),
                        &max.map(i64::from),
                        &expiry["ttlSeconds"].as_i64(),
                        &expiry["forever"].as_bool(),
                    ],
                )
                .await
                .expect("kv_incr");
            let mut serial: Value = serde_json::from_str(row.get::<_, &str>(0)).expect("json");
            serial.as_object_mut().expect("verdict").remove("version");
            expected.push(serial);
        }
    }
    let results: Vec<Value> = kv_all(&engine, bodies).await.into_iter().map(|r| r.expect("kv")).collect();
    for (r, want) in results.iter().zip(&expected) {
        for (k, v) in want.as_object().expect("verdict") {
            assert_eq!(&r[k], v, "{k} of {r}, serial {want}");
        }
        let key = r["key"].as_str().expect("key");
        let (version, long): (i64, Option<bool>) = {
            let row = sql
                .query_one(
                    "select version, expires_at > now() + interval '50 s' from queen.kv where ns = 'b' and key = $1",
                    &[&key],
                )
                .await
                .expect("row");
            (row.get(0), row.get(1))
        };
        assert_eq!(json!(version), r["version"], "the answer names the row's version: {r}");
        if key.starts_with("frac") {
            assert_eq!(long, Some(true), "a live row keeps its own expiry (an hour): {key}");
        }
        if key.starts_with("dead") || key.starts_with("new") {
            assert_eq!(long, Some(true), "a fresh lineage takes the call's 60 s: {key}");
        }
    }
    // The rows of both namespaces hold the same values and expiries.
    let differ = b
        .scalar(
            "select count(*) from queen.kv x join queen.kv y on x.key = y.key and x.ns = 'b' and y.ns = 's'
              where x.value <> y.value or (x.expires_at is null) <> (y.expires_at is null)",
        )
        .await;
    assert_eq!(differ, 0);
    assert!(engine.batch_sizes(BatchKind::KvWrite).count < 48, "nothing was batched");
}

/// Two brokers' batches of incr with max over the same distinct keys: no
/// counter passes its max, every applied step is counted once, and a
/// refusal names the counter at its max.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn set_based_incr_batches_of_two_engines_never_pass_max() {
    let b = TestEngine::start().await;
    let engines = [engine_with_slots(&b, 1), engine_with_slots(&b, 1)];
    let mut applied = 0;
    for _round in 0..4 {
        let barrier = Arc::new(Barrier::new(64));
        let tasks: Vec<_> = (0..64)
            .map(|t| {
                let (engine, barrier) = (engines[t % 2].clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    let body = json!([{"op": "incr", "ns": "two", "key": format!("k{}", t / 2), "delta": 1,
                                       "max": 5, "ttlSeconds": 600}]);
                    let v: Value = serde_json::from_str(&engine.kv(&body.to_string()).await.expect("kv").0)
                        .expect("json");
                    v["results"][0].clone()
                })
            })
            .collect();
        for t in tasks {
            let r = t.await.expect("task");
            if r["applied"] == json!(true) {
                applied += 1;
            } else {
                assert_eq!((r["reason"].clone(), r["value"].clone()), (json!("limit"), json!(5)), "{r}");
            }
        }
    }
    // 32 keys, one increment from each engine per round (so each engine's
    // batch holds distinct keys), 8 in all per key, capped at 5.
    assert_eq!(applied, 32 * 5);
    let total = b.scalar("select sum((value #>> '{}')::bigint)::bigint from queen.kv where ns = 'two'").await;
    assert_eq!(total, 32 * 5);
    assert_eq!(deadlocks(&b).await, 0);
}

/// Pushes one message to each partition and pops them all under `group`.
async fn leased(b: &TestEngine, engine: &Engine, queue: &str, partitions: usize, per: usize) -> Vec<Value> {
    for p in 0..partitions {
        let items: Vec<(String, Value)> = (0..per).map(|i| (format!("{queue}-{p}-{i}"), json!(i))).collect();
        let items: Vec<(&str, Value)> = items.iter().map(|(t, v)| (t.as_str(), v.clone())).collect();
        b.push(queue, &format!("p{p}"), &items).await;
    }
    let req = PopRequest {
        queue: queue.into(),
        consumer_group: Some("g".into()),
        subscription_mode: Some("all".into()),
        batch: (partitions * per) as i32,
        partitions: partitions as i32,
        ..PopRequest::default()
    };
    let popped: Value =
        serde_json::from_str(&engine.pop(&req).await.expect("pop").expect("some").0).expect("json");
    let messages = popped["messages"].as_array().expect("messages").clone();
    assert_eq!(messages.len(), partitions * per);
    messages
}

fn ack_body(m: &Value, status: &str) -> String {
    json!([{"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"],
            "status": status}])
    .to_string()
}

/// One ack request under group `g`: its answer.
fn ack_one(
    engine: &Arc<Engine>,
    body: String,
) -> impl Future<Output = Result<Value, EngineError>> + Send + 'static {
    let engine = engine.clone();
    async move { engine.ack(&body, Some("g")).await.map(|j| serde_json::from_str::<Value>(&j.0).expect("json")) }
}

async fn ack_all(engine: &Arc<Engine>, bodies: Vec<String>) -> Vec<Result<Value, EngineError>> {
    all_at_once(bodies, |body| ack_one(engine, body)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batched_acks_on_one_partition_commit_the_cursor_as_serial_acks_would() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 1);
    let messages = leased(&b, &engine, "acks", 1, 64).await;
    let answers = ack_all(&engine, messages.iter().map(|m| ack_body(m, "completed")).collect()).await;
    let mut released = 0;
    for (m, a) in messages.iter().zip(&answers) {
        let a = &a.as_ref().expect("ack")[0];
        assert_eq!(a["index"], 0, "each request indexes from 0: {a}");
        assert_eq!(a["transactionId"], m["transactionId"]);
        assert_eq!(a["success"], json!(true), "{a}");
        released += a["leaseReleased"].as_bool().map_or(0, i64::from);
    }
    assert_eq!(released, 1, "the lease is released once, by the ack that reached the end of the batch");
    assert_eq!(b.scalar("select next_seq from queen.cursors where consumer_group = 'g'").await, 64);
    assert_eq!(b.scalar("select count(*) from queen.cursors where lease_id is not null").await, 0);
    assert!(engine.batch_sizes(BatchKind::Ack).count < 64, "nothing was batched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nack_in_an_ack_batch_clamps_only_its_own_cursor() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 1);
    let messages = leased(&b, &engine, "mixed", 16, 1).await;
    let bodies: Vec<String> = messages
        .iter()
        .map(|m| ack_body(m, if m["partition"] == "p3" { "failed" } else { "completed" }))
        .collect();
    for a in ack_all(&engine, bodies).await {
        assert_eq!(a.expect("ack")[0]["success"], json!(true));
    }
    let sql = b.sql().await;
    let rows = sql
        .query(
            "select p.name, c.next_seq, c.retry_count from queen.cursors c
               join queen.partitions p on p.id = c.partition_id where c.consumer_group = 'g'",
            &[],
        )
        .await
        .expect("cursors");
    assert_eq!(rows.len(), 16);
    for r in rows {
        let (name, next, retries): (String, i64, i32) = (r.get(0), r.get(1), r.get(2));
        if name == "p3" {
            assert_eq!((next, retries), (0, 1), "the failed message redelivers");
        } else {
            assert_eq!((next, retries), (1, 0), "{name}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ack_batches_over_interleaved_partitions_never_deadlock() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 4);
    let messages = leased(&b, &engine, "cross", 2, 32).await;
    let last = |p: &str| messages.iter().rev().find(|m| m["partition"] == p).cloned().expect("message");
    let (a, z) = (ack_body(&last("p0"), "completed"), ack_body(&last("p1"), "completed"));
    // Sixteen workers ack both partitions, half of them p1 first, so the
    // batches that run side by side hold members in both arrival orders.
    // A repeated ack is a noop, but it still locks its cursor.
    let tasks: Vec<_> = (0..16)
        .map(|w| {
            let engine = engine.clone();
            let order = if w % 2 == 0 { [a.clone(), z.clone()] } else { [z.clone(), a.clone()] };
            tokio::spawn(async move {
                for _ in 0..40 {
                    for body in &order {
                        let v: Value =
                            serde_json::from_str(&engine.ack(body, Some("g")).await.expect("ack").0)
                                .expect("json");
                        assert_eq!(v[0]["success"], json!(true), "{v}");
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("worker");
    }
    assert_eq!(b.scalar("select min(next_seq) from queen.cursors where consumer_group = 'g'").await, 32);
    assert!(engine.batch_sizes(BatchKind::Ack).count < 16 * 80, "nothing was batched");
    assert_eq!(engine.batch_sizes(BatchKind::Ack).retried, 0, "an ack batch failed as a whole");
    assert_eq!(deadlocks(&b).await, 0, "an ack batch locked cursors out of order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ack_batch_that_fails_as_a_whole_fails_only_its_poison_request() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 1);
    let messages = leased(&b, &engine, "poison", 8, 1).await;
    b.sql()
        .await
        .batch_execute(
            "create function poison() returns trigger language plpgsql as $$
             begin
               if new.partition_id = (select id from queen.partitions where name = 'p5') then
                 raise exception 'poisoned cursor';
               end if;
               return new;
             end $$;
             create trigger poison before update on queen.cursors for each row execute function poison();",
        )
        .await
        .expect("trigger");
    let (gate, messages): (Vec<Value>, Vec<Value>) =
        messages.into_iter().partition(|m| m["partition"] == "p0");
    let gate = {
        let (engine, body) = (engine.clone(), ack_body(&gate[0], "completed"));
        async move { engine.ack(&body, Some("g")).await.map(|_| ()).expect("the gate's ack") }
    };
    let rest: Vec<String> = messages.iter().map(|m| ack_body(m, "completed")).collect();
    let answers = behind_a_held_table(&b, "queen.cursors", gate, rest, |body| ack_one(&engine, body)).await;
    let mut failed = HashSet::new();
    for (m, a) in messages.iter().zip(answers) {
        match a {
            Ok(v) => assert_eq!(v[0]["success"], json!(true), "{v}"),
            Err(EngineError::Database(_)) => {
                failed.insert(m["partition"].as_str().expect("partition").to_owned());
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(failed, HashSet::from(["p5".to_owned()]));
    assert!(engine.batch_sizes(BatchKind::Ack).retried >= 1, "the poisoned batch ran request by request");
    assert_eq!(
        b.scalar("select count(*) from queen.cursors where consumer_group = 'g' and next_seq = 1").await,
        7
    );
}

/// Completions on distinct cursors are applied for the whole batch at once
/// (`queen.ack_completions`); each request still gets the answer it would
/// alone: its own indexes from 0, its own refusals, its cursor moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batched_acks_on_distinct_cursors_answer_each_request_as_alone() {
    let b = TestEngine::start().await;
    let engine = engine_with_slots(&b, 1);
    let messages = leased(&b, &engine, "distinct", 16, 2).await;
    let wrong = uuid::Uuid::new_v4().to_string();
    let mut bodies = Vec::new();
    for p in 0..16 {
        let name = format!("p{p}");
        let mut items: Vec<Value> = messages
            .iter()
            .filter(|m| m["partition"] == name.as_str())
            .map(|m| {
                let lease = if p == 4 { json!(wrong) } else { m["leaseId"].clone() };
                json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": lease})
            })
            .collect();
        if p == 7 {
            let pid = items[0]["partitionId"].clone();
            items.push(json!({"transactionId": "ghost", "partitionId": pid}));
        }
        bodies.push(Value::Array(items).to_string());
    }
    let answers = ack_all(&engine, bodies).await;
    for (p, a) in answers.iter().enumerate() {
        let a = a.as_ref().expect("ack").as_array().expect("array").clone();
        assert_eq!(a.len(), if p == 7 { 3 } else { 2 }, "p{p}: {a:?}");
        for (i, item) in a.iter().enumerate() {
            assert_eq!(item["index"], i, "p{p}: {item}");
            match (p, i) {
                (4, _) => {
                    assert_eq!(item["success"], false, "{item}");
                    assert_eq!(item["error"], "invalid or expired lease", "{item}");
                }
                (7, 2) => {
                    assert_eq!(item["success"], false, "{item}");
                    assert!(item["error"].as_str().unwrap_or("").starts_with("unresolvable"), "{item}");
                }
                _ => {
                    assert_eq!(item["success"], true, "p{p}: {item}");
                    assert_eq!(item["leaseReleased"], true, "p{p}: {item}");
                }
            }
        }
    }
    let moved = b
        .scalar("select count(*) from queen.cursors where consumer_group = 'g' and next_seq = 2 and lease_id is null")
        .await;
    assert_eq!(moved, 15, "every cursor but p4's moved past both messages and released its lease");
    let p4 = b
        .scalar(
            "select c.next_seq from queen.cursors c join queen.partitions p on p.id = c.partition_id
              where c.consumer_group = 'g' and p.name = 'p4'",
        )
        .await;
    assert_eq!(p4, 0, "a refused lease moves nothing");
    assert_eq!(engine.batch_sizes(BatchKind::Ack).retried, 0);
    assert!(engine.batch_sizes(BatchKind::Ack).count < 16, "nothing was batched");
}
