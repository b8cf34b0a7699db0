//! KV state through the embedded API (`Engine::kv_ops` / `Engine::kv`): the
//! same rules as the HTTP route, because both go through the engine's one
//! decoder (`kv_decode`) and the same statements.
mod common;

use std::time::Duration;

use common::{db_config, TestEngine};
use queen_engine::{Engine, EngineError, EngineOptions, Expect, Expiry, KvOp, KvOutcome, KvResult};
use serde_json::value::RawValue;
use serde_json::{json, Value};

const NS: &str = "emb";

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).expect("raw JSON")
}

fn s(x: &str) -> String {
    x.to_owned()
}

fn get(key: &str) -> KvOp {
    KvOp::Get { ns: s(NS), key: s(key) }
}

fn put(key: &str, value: &str, expiry: Expiry) -> KvOp {
    KvOp::Put { ns: s(NS), key: s(key), value: raw(value), expiry, expect: None, required: false }
}

fn put_expect(key: &str, value: &str, expect: Expect, required: bool) -> KvOp {
    KvOp::Put {
        ns: s(NS),
        key: s(key),
        value: raw(value),
        expiry: Expiry::Forever,
        expect: Some(expect),
        required,
    }
}

fn put_if_absent(key: &str, value: &str, required: bool) -> KvOp {
    KvOp::PutIfAbsent { ns: s(NS), key: s(key), value: raw(value), expiry: Expiry::Forever, required }
}

fn incr(key: &str, delta: &str, min: Option<&str>, max: Option<&str>, expiry: Expiry) -> KvOp {
    KvOp::Incr {
        ns: s(NS),
        key: s(key),
        delta: raw(delta),
        min: min.map(raw),
        max: max.map(raw),
        expiry,
        required: false,
    }
}

fn prefix(p: &str, after: Option<&str>, limit: Option<u32>, keys_only: bool) -> KvOp {
    KvOp::GetPrefix { ns: s(NS), prefix: s(p), after: after.map(s), limit, keys_only }
}

async fn done(engine: &Engine, ops: &[KvOp]) -> Vec<KvResult> {
    match engine.kv_ops(ops).await.expect("kv_ops") {
        KvOutcome::Done(rs) => {
            assert_eq!(rs.len(), ops.len(), "index-aligned");
            for (i, r) in rs.iter().enumerate() {
                assert_eq!(r.index, i);
            }
            rs
        }
        KvOutcome::PreconditionLost(p) => panic!("unexpected precondition loss: {p:?}"),
    }
}

async fn one(engine: &Engine, op: KvOp) -> KvResult {
    done(engine, &[op]).await.remove(0)
}

fn value(r: &KvResult) -> Value {
    serde_json::from_str(r.value.as_ref().expect("value present").get()).expect("JSON")
}

fn rejected(res: Result<KvOutcome, EngineError>) -> (u16, Value) {
    match res {
        Err(EngineError::Rejected { status, body }) => {
            (status, serde_json::from_str(&body).expect("JSON body"))
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[tokio::test]
async fn embedded_get_keeps_found_and_a_stored_null_distinct() {
    let b = TestEngine::start().await;
    let w = one(&b.engine, put("n", "null", Expiry::Forever)).await;
    assert_eq!(w.applied, Some(true));
    let rs = done(&b.engine, &[get("n"), get("missing")]).await;
    let hit = &rs[0];
    assert_eq!(hit.op, "get");
    assert_eq!(hit.found, Some(true));
    assert_eq!(hit.value.as_ref().map(|v| v.get()), Some("null"), "a stored null is Some(null)");
    assert_eq!(hit.version, w.version);
    assert_eq!(hit.expires_at, None);
    let miss = &rs[1];
    assert_eq!(miss.found, Some(false));
    assert!(miss.value.is_none(), "a miss carries no value at all");
    assert_eq!(miss.key.as_deref(), Some("missing"));
}

#[tokio::test]
async fn embedded_put_if_absent_and_expect_absent_lose_with_the_winners_value_and_version() {
    let b = TestEngine::start().await;
    let w = one(&b.engine, put_if_absent("once", r#"{"charge":"ch_1"}"#, false)).await;
    assert_eq!(w.op, "putIfAbsent");
    assert_eq!(w.applied, Some(true));
    for op in
        [put_if_absent("once", r#"{"charge":"ch_2"}"#, false), put_expect("once", "2", Expect::Absent, false)]
    {
        let l = one(&b.engine, op).await;
        assert_eq!(l.applied, Some(false));
        assert_eq!(l.reason.as_deref(), Some("exists"));
        assert_eq!(value(&l), json!({"charge": "ch_1"}));
        assert_eq!(l.version, w.version);
    }
}

#[tokio::test]
async fn embedded_expect_version_is_a_pure_update_that_creates_nothing() {
    let b = TestEngine::start().await;
    let r = one(&b.engine, put_expect("k", "1", Expect::from_wire(9), false)).await;
    assert_eq!(r.applied, Some(false));
    assert_eq!(r.reason.as_deref(), Some("absent"));
    assert_eq!(r.version, Some(0));
    assert_eq!(value(&r), Value::Null);
    assert_eq!(one(&b.engine, get("k")).await.found, Some(false));

    let w = one(&b.engine, put("k", r#""v1""#, Expiry::Forever)).await;
    let v1 = w.version.unwrap();
    let r = one(&b.engine, put_expect("k", r#""v2""#, Expect::from_wire(v1 + 7), false)).await;
    assert_eq!(r.reason.as_deref(), Some("version"));
    assert_eq!(value(&r), json!("v1"));
    assert_eq!(r.version, Some(v1));
    let r = one(&b.engine, put_expect("k", r#""v2""#, Expect::from_wire(v1), false)).await;
    assert_eq!(r.applied, Some(true));
    assert!(r.version.unwrap() > v1);
}

#[tokio::test]
async fn embedded_put_replaces_the_expiry_it_carries() {
    let b = TestEngine::start().await;
    one(&b.engine, put("k", "1", Expiry::secs(3600).unwrap())).await;
    let ttl = one(&b.engine, get("k")).await;
    assert!(ttl.expires_at.is_some());
    one(&b.engine, put("k", "2", Expiry::Forever)).await;
    let forever = one(&b.engine, get("k")).await;
    assert_eq!(forever.expires_at, None, "a put never inherits the TTL");
    assert_eq!(value(&forever), json!(2));
}

#[tokio::test]
async fn embedded_a_one_second_ttl_is_gone_by_1200_ms_and_expect_absent_wins_over_it() {
    let b = TestEngine::start().await;
    let written = std::time::Instant::now();
    let w = one(&b.engine, put("t", r#""short""#, Expiry::secs(1).unwrap())).await;
    let alive = one(&b.engine, get("t")).await;
    if written.elapsed() < Duration::from_millis(900) {
        assert_eq!(alive.found, Some(true), "alive before its second is up");
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(one(&b.engine, get("t")).await.found, Some(false));
    let r = one(&b.engine, put_expect("t", r#""new""#, Expect::Absent, false)).await;
    assert_eq!(r.applied, Some(true));
    assert!(r.version > w.version, "a new lineage has a higher version");
}

#[tokio::test]
async fn embedded_incr_counts_from_zero_refuses_at_limits_and_guards_the_type() {
    let b = TestEngine::start().await;
    let r = one(&b.engine, incr("c", "1", None, None, Expiry::Forever)).await;
    assert_eq!(r.applied, Some(true));
    assert_eq!(value(&r), json!(1));
    let r = one(&b.engine, incr("c", "5", None, Some("5"), Expiry::Forever)).await;
    assert_eq!(r.applied, Some(false));
    assert_eq!(r.reason.as_deref(), Some("limit"));
    assert_eq!(value(&r), json!(1), "the current number");
    let r = one(&b.engine, incr("c", "-2", Some("0"), None, Expiry::Forever)).await;
    assert_eq!(r.reason.as_deref(), Some("limit"));
    let r = one(&b.engine, incr("absent", "10", None, Some("5"), Expiry::secs(60).unwrap())).await;
    assert_eq!(r.reason.as_deref(), Some("limit"));
    assert_eq!(value(&r), json!(0));
    assert_eq!(r.version, Some(0));
    assert_eq!(one(&b.engine, get("absent")).await.found, Some(false), "a refused incr creates nothing");
    one(&b.engine, put("s", r#""text""#, Expiry::Forever)).await;
    let r = one(&b.engine, incr("s", "1", None, None, Expiry::Forever)).await;
    assert_eq!(r.reason.as_deref(), Some("type"));
    assert_eq!(value(&r), json!("text"));
}

#[tokio::test]
async fn embedded_incr_keeps_every_digit_and_its_ttl_only_on_create() {
    let b = TestEngine::start().await;
    let e30 = format!("1{}", "0".repeat(30));
    one(&b.engine, incr("big", &e30, None, None, Expiry::secs(3600).unwrap())).await;
    let before = one(&b.engine, get("big")).await;
    let r = one(&b.engine, incr("big", &e30, None, None, Expiry::secs(5).unwrap())).await;
    assert_eq!(r.value.as_ref().unwrap().get(), format!("2{}", "0".repeat(30)), "no digit lost");
    let after = one(&b.engine, get("big")).await;
    assert_eq!(after.value.as_ref().unwrap().get(), format!("2{}", "0".repeat(30)));
    assert_eq!(after.expires_at, before.expires_at, "a live counter keeps the expiry it was born with");
}

#[tokio::test]
async fn embedded_a_lost_required_precondition_is_precondition_lost_and_writes_nothing() {
    let b = TestEngine::start().await;
    let w = one(&b.engine, put("taken", r#"{"by":"winner"}"#, Expiry::Forever)).await;
    let out = b
        .engine
        .kv_ops(&[
            put("a-effect", "1", Expiry::Forever),
            put_if_absent("taken", r#"{"by":"me"}"#, true),
            incr("z-counter", "1", None, None, Expiry::Forever),
        ])
        .await
        .expect("kv_ops");
    let lost = match out {
        KvOutcome::PreconditionLost(p) => p,
        KvOutcome::Done(rs) => panic!("expected a precondition loss, got {rs:?}"),
    };
    assert_eq!(lost.failed_index, 1);
    assert_eq!(lost.kv_reason, "exists");
    assert_eq!(lost.key.as_deref(), Some("taken"));
    assert_eq!(Some(lost.version), w.version);
    assert_eq!(
        lost.value.as_ref().map(|v| serde_json::from_str::<Value>(v.get()).unwrap()),
        Some(json!({"by": "winner"}))
    );
    let rs = done(&b.engine, &[get("a-effect"), get("z-counter")]).await;
    assert_eq!(rs[0].found, Some(false));
    assert_eq!(rs[1].found, Some(false));

    // A required check that holds is an ordinary result.
    let rs = done(
        &b.engine,
        &[
            KvOp::Check {
                ns: s(NS),
                key: s("taken"),
                expect: Expect::from_wire(w.version.unwrap()),
                required: true,
            },
            put("effect", "1", Expiry::Forever),
        ],
    )
    .await;
    assert_eq!(rs[0].applied, Some(true));
    assert!(rs[0].value.is_none(), "a held check carries no value");
    assert_eq!(rs[1].applied, Some(true));
}

#[tokio::test]
async fn embedded_delete_and_check_answer_the_state_of_the_key() {
    let b = TestEngine::start().await;
    let w = one(&b.engine, put("k", r#""v""#, Expiry::Forever)).await;
    let v = w.version.unwrap();
    let c =
        one(&b.engine, KvOp::Check { ns: s(NS), key: s("k"), expect: Expect::Absent, required: false }).await;
    assert_eq!(c.reason.as_deref(), Some("exists"));
    let c =
        one(&b.engine, KvOp::Check { ns: s(NS), key: s("k"), expect: Expect::from_wire(v), required: false })
            .await;
    assert_eq!(c.applied, Some(true));
    let d =
        one(&b.engine, KvOp::Delete { ns: s(NS), key: s("k"), expect: Some(v + 1), required: false }).await;
    assert_eq!(d.reason.as_deref(), Some("version"));
    let d = one(&b.engine, KvOp::Delete { ns: s(NS), key: s("k"), expect: None, required: false }).await;
    assert_eq!(d.applied, Some(true));
    assert_eq!(value(&d), json!("v"));
    assert_eq!(d.version, Some(v));
    let d = one(&b.engine, KvOp::Delete { ns: s(NS), key: s("k"), expect: None, required: false }).await;
    assert_eq!(d.reason.as_deref(), Some("absent"));
    assert_eq!(d.version, Some(0));
    let c =
        one(&b.engine, KvOp::Check { ns: s(NS), key: s("k"), expect: Expect::from_wire(v), required: false })
            .await;
    assert_eq!(c.reason.as_deref(), Some("absent"));
}

#[tokio::test]
async fn embedded_a_get_sees_the_state_before_the_write_and_multi_key_reads_see_it() {
    let b = TestEngine::start().await;
    one(&b.engine, put("o:k", r#""old""#, Expiry::Forever)).await;
    let rs = done(
        &b.engine,
        &[
            KvOp::GetMany { ns: s(NS), keys: vec![s("o:k"), s("o:nope"), s("o:k")] },
            prefix("o:", None, None, false),
            get("o:k"),
            put("o:k", r#""new""#, Expiry::Forever),
        ],
    )
    .await;
    assert_eq!(value(&rs[2]), json!("old"));
    let many = rs[0].rows.as_ref().unwrap();
    assert_eq!(many.len(), 1);
    assert_eq!(many[0].value.as_ref().unwrap().get(), r#""new""#);
    assert_eq!(rs[0].missing.as_deref(), Some(&[s("o:nope")][..]));
    assert_eq!(rs[0].truncated, Some(false));
    let page = rs[1].rows.as_ref().unwrap();
    assert_eq!(page[0].version, rs[3].version.unwrap());
}

#[tokio::test]
async fn embedded_get_prefix_pages_in_byte_order_with_exact_truncation() {
    let b = TestEngine::start().await;
    let keys = ["p:b", "p:a", "p:é", "p:Z", "p:%", "p:_", "q:x", "p"];
    done(&b.engine, &keys.iter().map(|k| put(k, "1", Expiry::Forever)).collect::<Vec<_>>()).await;
    let want = ["p:%", "p:Z", "p:_", "p:a", "p:b", "p:é"];
    let mut got = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let r = one(&b.engine, prefix("p:", after.as_deref(), Some(4), true)).await;
        let rows = r.rows.unwrap();
        assert!(rows.iter().all(|row| row.value.is_none()), "keysOnly");
        got.extend(rows.iter().map(|row| row.key.clone()));
        if r.truncated == Some(true) {
            assert_eq!(r.next_after.as_deref(), rows.last().map(|row| row.key.as_str()));
            after = r.next_after;
        } else {
            assert_eq!(r.next_after, None);
            break;
        }
    }
    assert_eq!(got, want);
    let r = one(&b.engine, prefix("p:", None, Some(6), false)).await;
    assert_eq!(r.truncated, Some(false), "a page that exactly exhausts is not truncated");
    let r = one(&b.engine, prefix("p:", None, Some(0), false)).await;
    assert_eq!(r.rows.unwrap().len(), 1, "limit 0 is clamped to 1");
}

#[tokio::test]
async fn embedded_a_page_holds_at_least_one_row_even_above_the_byte_ceiling() {
    let b = TestEngine::start().await;
    let options =
        EngineOptions { kv_max_read_bytes: 100, kv_sweep_interval: None, ..EngineOptions::default() };
    let small = Engine::connect(&db_config(&b.db), options).expect("engine");
    let big = serde_json::to_string(&"x".repeat(300)).unwrap();
    let keys: Vec<String> = (0..5).map(|i| format!("b:{i}")).collect();
    done(&small, &keys.iter().map(|k| put(k, &big, Expiry::Forever)).collect::<Vec<_>>()).await;
    let mut got = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let r = one(&small, prefix("b:", after.as_deref(), Some(1000), false)).await;
        let rows = r.rows.unwrap();
        assert_eq!(rows.len(), 1, "one row per page: each value alone passes the ceiling");
        got.push(rows[0].key.clone());
        if r.truncated != Some(true) {
            break;
        }
        after = r.next_after;
    }
    assert_eq!(got, keys);
    let r = one(&small, KvOp::GetMany { ns: s(NS), keys: keys.clone() }).await;
    assert_eq!(r.rows.unwrap().len(), 1);
    assert_eq!(r.truncated, Some(true));
    assert_eq!(r.missing, Some(vec![]), "cut keys are not missing");
    // keysOnly counts key bytes, so everything fits.
    let r = one(&small, prefix("b:", None, None, true)).await;
    assert_eq!(r.rows.unwrap().len(), 5);
    small.close();
}

#[tokio::test]
async fn embedded_bad_input_is_rejected_with_the_kv_reason_and_writes_nothing() {
    let b = TestEngine::start().await;
    let e = &b.engine;
    let canary = || put("canary", "1", Expiry::Forever);
    let cases: Vec<(Vec<KvOp>, u16, &str)> = vec![
        (vec![canary(), put("k", "1", Expiry::secs(3_153_600_001).unwrap())], 400, "kv_bad_ttl"),
        (vec![canary(), KvOp::Get { ns: s("Bad NS"), key: s("k") }], 400, "kv_bad_namespace"),
        (vec![canary(), KvOp::Get { ns: s("a".repeat(65).as_str()), key: s("k") }], 400, "kv_bad_namespace"),
        (vec![canary(), get("")], 400, "kv_bad_key"),
        (vec![canary(), get("a\0b")], 400, "kv_bad_key"),
        (vec![canary(), get(&"k".repeat(513))], 413, "kv_key_too_large"),
        (
            vec![canary(), put("k", &serde_json::to_string(&"v".repeat(65_535)).unwrap(), Expiry::Forever)],
            413,
            "kv_value_too_large",
        ),
        (
            vec![canary(), put("k", "1", Expiry::Forever), put("k", "2", Expiry::Forever)],
            400,
            "kv_duplicate_key_in_call",
        ),
        (vec![canary(), prefix("", None, None, false)], 400, "kv_prefix_required"),
        (
            vec![canary(), KvOp::GetMany { ns: s(NS), keys: (0..1001).map(|i| i.to_string()).collect() }],
            400,
            "kv_too_many_keys",
        ),
        (vec![canary(), incr("c", "1.5", None, None, Expiry::Forever)], 400, "kv_bad_body"),
        ((0..257).map(|i| get(&i.to_string())).collect(), 400, "kv_too_many_ops"),
    ];
    for (ops, status, reason) in cases {
        let (got, body) = rejected(e.kv_ops(&ops).await);
        assert_eq!(got, status, "{reason}: {body}");
        assert_eq!(body["reason"], reason, "{body}");
        assert_eq!(body["error"], if status == 413 { "payload_too_large" } else { "kv_bad_request" });
    }
    let sql = b.sql().await;
    let n: i64 = sql.query_one("SELECT count(*) FROM queen.kv", &[]).await.unwrap().get(0);
    assert_eq!(n, 0, "nothing written");
}

#[tokio::test]
async fn embedded_kv_takes_the_wire_body_and_answers_the_wire_results() {
    let b = TestEngine::start().await;
    let out = b
        .engine
        .kv(r#"{"operations":[{"op":"put","ns":"emb","key":"k","value":{"a":1},"forever":true},{"op":"get","ns":"emb","key":"k"}]}"#)
        .await
        .expect("kv");
    let body: Value = out.decode().unwrap();
    assert_eq!(body["results"][0]["applied"], json!(true));
    assert_eq!(body["results"][1]["found"], json!(false));
    let out = b.engine.kv(r#"[{"op":"get","ns":"emb","key":"k"}]"#).await.expect("bare array");
    let body: Value = out.decode().unwrap();
    assert_eq!(body["results"][0]["value"], json!({"a": 1}));
    // A lost required precondition is a Refused carrying the 200 body.
    match b
        .engine
        .kv(r#"[{"op":"putIfAbsent","ns":"emb","key":"k","value":2,"forever":true,"required":true}]"#)
        .await
    {
        Err(EngineError::Refused(body)) => {
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["reason"], "kv_precondition");
            assert_eq!(v["kvReason"], "exists");
            assert_eq!(v["value"], json!({"a": 1}));
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}

/// Concurrent single-key gets share statements (the get batcher); every
/// caller still gets exactly its own key's answer, found or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_gets_are_batched_and_each_answers_its_own_key() {
    let b = TestEngine::start().await;
    let options =
        EngineOptions { kv_get_batch_slots: 1, kv_sweep_interval: None, ..EngineOptions::default() };
    let engine = std::sync::Arc::new(Engine::connect(&db_config(&b.db), options).expect("engine"));
    for i in 0..50 {
        let op = put(&format!("g{i}"), &format!("{{\"n\": {i}.50}}"), Expiry::Forever);
        assert!(matches!(engine.kv_ops(&[op]).await.expect("put"), KvOutcome::Done(_)));
    }
    let tasks: Vec<_> = (0..400)
        .map(|t| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let key = format!("g{}", t % 60);
                let answer = engine.kv(&format!(r#"[{{"op":"get","ns":"{NS}","key":"{key}"}}]"#)).await;
                (t % 60, answer.expect("get").0)
            })
        })
        .collect();
    for task in tasks {
        let (i, body) = task.await.expect("join");
        let v: Value = serde_json::from_str(&body).expect("json");
        let r = &v["results"][0];
        assert_eq!(r["key"], format!("g{i}"));
        if i < 50 {
            assert_eq!(r["found"], true, "{body}");
            // The value's text is kept: 12.50 stays 12.50.
            assert!(body.contains(&format!("\"n\": {i}.50")), "{body}");
        } else {
            assert_eq!(r["found"], false, "{body}");
        }
    }
    let sizes = engine.batch_sizes(queen_engine::BatchKind::KvGet);
    let (batches, items) = (sizes.count, sizes.sum);
    assert_eq!(items, 400);
    assert!(batches < items, "{batches} batches for {items} gets: nothing was batched");
}

/// The get batcher bounds each statement's answer in bytes: a batch of
/// large values is answered over several statements, each caller still
/// gets its own whole value, and no statement answers more than the
/// ceiling plus one value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_large_gets_is_answered_within_the_byte_ceiling() {
    let b = TestEngine::start().await;
    let options = EngineOptions {
        kv_get_batch_slots: 1,
        kv_max_read_bytes: 40_000,
        kv_sweep_interval: None,
        ..EngineOptions::default()
    };
    let engine = std::sync::Arc::new(Engine::connect(&db_config(&b.db), options).expect("engine"));
    let big = |i: usize| format!("\"{}{}\"", i, "x".repeat(10_000));
    for i in 0..32 {
        let op = put(&format!("big{i}"), &big(i), Expiry::Forever);
        assert!(matches!(engine.kv_ops(&[op]).await.expect("put"), KvOutcome::Done(_)));
    }
    let tasks: Vec<_> = (0..96)
        .map(|t| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let i = t % 32;
                let answer = engine.kv(&format!(r#"[{{"op":"get","ns":"{NS}","key":"big{i}"}}]"#)).await;
                (i, answer.expect("get").0)
            })
        })
        .collect();
    for task in tasks {
        let (i, body) = task.await.expect("join");
        let v: Value = serde_json::from_str(&body).expect("json");
        assert_eq!(v["results"][0]["found"], true, "{body}");
        assert_eq!(v["results"][0]["value"].as_str().map(str::len), Some(10_000 + i.to_string().len()));
        assert!(v["results"][0]["value"].as_str().unwrap().starts_with(&i.to_string()));
    }
    // The statement itself, called with the batch's arrays: at most the
    // ceiling's worth of values comes back included (the first row always).
    let db = b.sql().await;
    let keys: Vec<String> = (0..32).map(|i| format!("big{i}")).collect();
    let ns: Vec<String> = vec![NS.to_owned(); 32];
    let rows = db
        .query(include_str!("../../queen-engine/sql/statements/kv_get_batch.sql"), &[&ns, &keys, &40_000i64])
        .await
        .expect("the batch statement");
    let included: Vec<&tokio_postgres::Row> = rows.iter().filter(|r| r.get::<_, bool>(5)).collect();
    assert_eq!(rows.len(), 32);
    assert_eq!(included.len(), 4, "10 KB values under a 40 KB ceiling: the rows starting before it");
    assert!(rows.iter().filter(|r| !r.get::<_, bool>(5)).all(|r| r.get::<_, Option<String>>(0).is_none()));
}
