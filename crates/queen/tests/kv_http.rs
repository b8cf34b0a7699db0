//! KV state over `POST /api/v1/kv` and the path routes: every rule of the
//! wire contract (spec/kv.md, queen2-wire.md section 1).
mod common;
#[path = "common/kv.rs"]
mod kvh;

use std::sync::Arc;
use std::time::Duration;

use common::{db_config, TestBroker};
use kvh::*;
use queen_engine::{Engine, EngineOptions};
use serde_json::{json, Value};

const NS: &str = "app";

// ---------------------------------------------------------------- reads

#[tokio::test]
async fn get_hit_answers_found_key_value_version_expires_at_and_updated_at() {
    let b = TestBroker::start().await;
    let w = one(&b, put(NS, "user:1", json!({"name": "ada", "n": [1, 2]}))).await;
    let r = read(&b, NS, "user:1").await;
    assert_fields(&r, &["index", "op", "found", "key", "value", "version", "expiresAt", "updatedAt"]);
    assert_eq!(r["op"], "get");
    assert_eq!(r["found"], json!(true));
    assert_eq!(r["key"], "user:1");
    assert_eq!(r["value"], json!({"name": "ada", "n": [1, 2]}));
    assert_eq!(r["version"], w["version"]);
    assert!(r["version"].as_i64().unwrap() > 0);
    assert_eq!(r["expiresAt"], Value::Null, "forever has expiresAt null");
    assert_ts(&r["updatedAt"]);
}

#[tokio::test]
async fn get_of_a_ttl_key_answers_fixed_width_expires_at_after_updated_at() {
    let b = TestBroker::start().await;
    one(&b, put_ttl(NS, "k", json!(1), 3600)).await;
    let r = read(&b, NS, "k").await;
    assert_ts(&r["expiresAt"]);
    assert_ts(&r["updatedAt"]);
    // Fixed width: string order is time order.
    assert!(r["expiresAt"].as_str().unwrap() > r["updatedAt"].as_str().unwrap());
}

#[tokio::test]
async fn get_miss_answers_found_false_and_the_key_only() {
    let b = TestBroker::start().await;
    let r = read(&b, NS, "nope").await;
    assert_fields(&r, &["index", "op", "found", "key"]);
    assert_eq!(r, json!({"index": 0, "op": "get", "found": false, "key": "nope"}));
}

#[tokio::test]
async fn a_stored_null_is_found_true_with_value_null_not_a_miss() {
    let b = TestBroker::start().await;
    let w = one(&b, put(NS, "nothing", Value::Null)).await;
    assert_eq!(w["applied"], json!(true));
    assert_eq!(w["value"], Value::Null);
    let r = read(&b, NS, "nothing").await;
    assert_eq!(r["found"], json!(true));
    assert!(r.as_object().unwrap().contains_key("value"), "value is present and null: {r}");
    assert_eq!(r["value"], Value::Null);
    assert_eq!(r["version"], w["version"]);
}

#[tokio::test]
async fn get_many_answers_rows_in_byte_order_and_missing_in_request_order() {
    let b = TestBroker::start().await;
    ok(
        &b,
        json!([
            put(NS, "b", json!(2)),
            put(NS, "a", json!(1)),
            put(NS, "é", json!(3)),
            put(NS, "Z", json!(0))
        ]),
    )
    .await;
    let r = one(&b, json!({"op": "getMany", "ns": NS, "keys": ["é", "nope2", "b", "a", "nope1", "a", "Z"]}))
        .await;
    assert_fields(&r, &["index", "op", "rows", "missing", "truncated"]);
    let keys: Vec<&str> = r["rows"].as_array().unwrap().iter().map(|x| x["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["Z", "a", "b", "é"], "rows in byte order, never a map");
    assert_eq!(r["missing"], json!(["nope2", "nope1"]), "absent keys in request order");
    assert_eq!(r["truncated"], json!(false));
    let row = &r["rows"][1];
    assert_fields(row, &["key", "value", "version", "expiresAt", "updatedAt"]);
    assert_eq!(row["value"], json!(1));
    assert_eq!(row["expiresAt"], Value::Null);
    assert_ts(&row["updatedAt"]);
}

#[tokio::test]
async fn get_many_of_one_absent_key_lists_it_in_missing() {
    let b = TestBroker::start().await;
    let r = one(&b, json!({"op": "getMany", "ns": NS, "keys": ["many:nope"]})).await;
    assert_eq!(r["rows"], json!([]));
    assert_eq!(r["missing"], json!(["many:nope"]));
    assert_eq!(r["truncated"], json!(false));
}

fn big(i: usize) -> Value {
    // About 60 KiB of JSON per value.
    json!(format!("{i:04}-{}", "x".repeat(60 * 1024)))
}

async fn store_100_big_values(b: &TestBroker, ns: &str) -> Vec<String> {
    let keys: Vec<String> = (0..100).map(|i| format!("big:{i:03}")).collect();
    for chunk in keys.chunks(25) {
        let ops: Vec<Value> = chunk.iter().enumerate().map(|(i, k)| put(ns, k, big(i))).collect();
        ok(b, Value::Array(ops)).await;
    }
    keys
}

fn value_bytes(rows: &Value) -> usize {
    rows.as_array().unwrap().iter().map(|r| r["value"].to_string().len()).sum()
}

#[tokio::test]
async fn get_many_stops_before_the_byte_ceiling_and_cut_keys_are_in_neither_list() {
    let b = TestBroker::start().await;
    let keys = store_100_big_values(&b, NS).await;
    let r = one(&b, json!({"op": "getMany", "ns": NS, "keys": keys})).await;
    let rows = r["rows"].as_array().unwrap();
    assert!(!rows.is_empty() && rows.len() < 100, "{} rows", rows.len());
    assert!(value_bytes(&r["rows"]) <= 4 * 1024 * 1024);
    assert_eq!(r["truncated"], json!(true));
    assert_eq!(r["missing"], json!([]), "cut keys are not missing");
    let got: Vec<&str> = rows.iter().map(|x| x["key"].as_str().unwrap()).collect();
    let want: Vec<&str> = keys.iter().take(rows.len()).map(String::as_str).collect();
    assert_eq!(got, want, "the page is a byte-order prefix of the rows");
}

#[tokio::test]
async fn get_prefix_is_a_byte_range_and_percent_and_underscore_are_data() {
    let b = TestBroker::start().await;
    let keys =
        ["walk%_:1", "walk%_:2", "walk%_:", "walkab:1", "walk%X:1", "walk%_x", "walk_1", "walkX1", "wal"];
    ok(&b, Value::Array(keys.iter().map(|k| put(NS, k, json!(k))).collect())).await;
    let r = one(&b, json!({"op": "getPrefix", "ns": NS, "prefix": "walk%_:"})).await;
    assert_fields(&r, &["index", "op", "rows", "truncated", "nextAfter"]);
    let got: Vec<&str> = r["rows"].as_array().unwrap().iter().map(|x| x["key"].as_str().unwrap()).collect();
    assert_eq!(got, ["walk%_:", "walk%_:1", "walk%_:2"]);
    assert_eq!(r["truncated"], json!(false));
    assert_eq!(r["nextAfter"], Value::Null);
    let row = &r["rows"][1];
    assert_fields(row, &["key", "value", "version", "expiresAt", "updatedAt"]);
    assert_eq!(row["value"], json!("walk%_:1"));
    let r = one(&b, json!({"op": "getPrefix", "ns": NS, "prefix": "walk_"})).await;
    let got: Vec<&str> = r["rows"].as_array().unwrap().iter().map(|x| x["key"].as_str().unwrap()).collect();
    assert_eq!(got, ["walk_1"], "_ is not a wildcard");
}

fn row_keys(r: &Value) -> Vec<String> {
    r["rows"].as_array().unwrap().iter().map(|x| x["key"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn get_prefix_after_is_an_exclusive_cursor_that_need_not_exist() {
    let b = TestBroker::start().await;
    ok(&b, Value::Array((1..=5).map(|i| put(NS, &format!("p:{i}"), json!(i))).collect())).await;
    let page = |after: &str| json!({"op": "getPrefix", "ns": NS, "prefix": "p:", "after": after});
    assert_eq!(row_keys(&one(&b, page("p:2")).await), ["p:3", "p:4", "p:5"]);
    assert_eq!(row_keys(&one(&b, page("p:2x")).await), ["p:3", "p:4", "p:5"]);
    assert_eq!(row_keys(&one(&b, page("a")).await), ["p:1", "p:2", "p:3", "p:4", "p:5"]);
    let end = one(&b, page("p:5")).await;
    assert_eq!(end["rows"], json!([]));
    assert_eq!(end["truncated"], json!(false));
    assert_eq!(end["nextAfter"], Value::Null);
}

#[tokio::test]
async fn get_prefix_limit_defaults_to_100_and_is_clamped_into_1_to_1000_never_refused() {
    let b = TestBroker::start().await;
    let keys: Vec<String> = (0..1001).map(|i| format!("c:{i:04}")).collect();
    for chunk in keys.chunks(250) {
        ok(&b, Value::Array(chunk.iter().map(|k| put(NS, k, json!(1))).collect())).await;
    }
    let page = |limit: Value| {
        let mut op = json!({"op": "getPrefix", "ns": NS, "prefix": "c:", "keysOnly": true});
        if !limit.is_null() {
            op["limit"] = limit;
        }
        op
    };
    let r = one(&b, page(Value::Null)).await;
    assert_eq!(row_keys(&r).len(), 100, "default limit");
    assert_eq!(r["truncated"], json!(true));
    assert_eq!(r["nextAfter"], json!(keys[99]));
    for tiny in [json!(0), json!(-5)] {
        let r = one(&b, page(tiny.clone())).await;
        assert_eq!(row_keys(&r), [keys[0].clone()], "limit {tiny} clamps to 1");
        assert_eq!(r["truncated"], json!(true));
        assert_eq!(r["nextAfter"], json!(keys[0]));
    }
    let r = one(&b, page(json!(5000))).await;
    assert_eq!(row_keys(&r).len(), 1000, "limit 5000 clamps to 1000");
    assert_eq!(r["truncated"], json!(true));
    assert_eq!(r["nextAfter"], json!(keys[999]));
}

#[tokio::test]
async fn get_prefix_truncated_is_exact_and_next_after_walks_every_key_in_order() {
    let b = TestBroker::start().await;
    let keys: Vec<String> = (1..=5).map(|i| format!("w:{i}")).collect();
    ok(&b, Value::Array(keys.iter().map(|k| put(NS, k, json!(k))).collect())).await;
    // Decoy keys around the range.
    ok(&b, json!([put(NS, "w", json!(0)), put(NS, "w;", json!(0)), put(NS, "v:9", json!(0))])).await;

    let mut walked = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut op = json!({"op": "getPrefix", "ns": NS, "prefix": "w:", "limit": 2});
        if let Some(a) = &after {
            op["after"] = json!(a);
        }
        let r = one(&b, op).await;
        let got = row_keys(&r);
        pages += 1;
        walked.extend(got.clone());
        if r["truncated"] == json!(true) {
            assert_eq!(got.len(), 2);
            assert_eq!(r["nextAfter"], json!(got.last().unwrap()), "nextAfter == rows[-1].key");
            after = Some(got.last().unwrap().clone());
        } else {
            assert_eq!(r["nextAfter"], Value::Null);
            break;
        }
    }
    assert_eq!(walked, keys);
    assert_eq!(pages, 3);

    // A page that exactly exhausts the range is not truncated.
    let r = one(&b, json!({"op": "getPrefix", "ns": NS, "prefix": "w:", "limit": 5})).await;
    assert_eq!(row_keys(&r), keys);
    assert_eq!(r["truncated"], json!(false));
    assert_eq!(r["nextAfter"], Value::Null);
    let r = one(&b, json!({"op": "getPrefix", "ns": NS, "prefix": "w:", "limit": 2, "after": "w:3"})).await;
    assert_eq!(row_keys(&r), ["w:4", "w:5"]);
    assert_eq!(r["truncated"], json!(false), "the last two rows exactly exhaust");
    let r = one(&b, json!({"op": "getPrefix", "ns": NS, "prefix": "w:", "limit": 4})).await;
    assert_eq!(r["truncated"], json!(true));
    assert_eq!(r["nextAfter"], json!("w:4"));
}

#[tokio::test]
async fn get_prefix_keys_only_leaves_the_value_out() {
    let b = TestBroker::start().await;
    ok(&b, json!([put(NS, "ko:1", json!({"big": "x"})), put_ttl(NS, "ko:2", Value::Null, 60)])).await;
    let r = one(&b, json!({"op": "getPrefix", "ns": NS, "prefix": "ko:", "keysOnly": true})).await;
    let rows = r["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert_fields(row, &["key", "version", "expiresAt", "updatedAt"]);
    }
    assert_eq!(rows[0]["expiresAt"], Value::Null);
    assert_ts(&rows[1]["expiresAt"]);
}

#[tokio::test]
async fn get_prefix_stops_before_4_mib_holds_a_row_and_walking_gets_every_row() {
    let b = TestBroker::start().await;
    let keys = store_100_big_values(&b, NS).await;
    let r = one(&b, json!({"op": "getPrefix", "ns": NS, "prefix": "big:", "limit": 1000})).await;
    let first = row_keys(&r);
    assert!(!first.is_empty() && first.len() < 100, "{} rows", first.len());
    assert!(value_bytes(&r["rows"]) <= 4 * 1024 * 1024, "the page stays under the byte ceiling");
    assert_eq!(r["truncated"], json!(true));
    assert_eq!(r["nextAfter"], json!(first.last().unwrap()));

    let mut walked = first.clone();
    let mut after = first.last().unwrap().clone();
    loop {
        let r =
            one(&b, json!({"op": "getPrefix", "ns": NS, "prefix": "big:", "limit": 1000, "after": after}))
                .await;
        let got = row_keys(&r);
        assert!(!got.is_empty());
        assert!(value_bytes(&r["rows"]) <= 4 * 1024 * 1024);
        walked.extend(got.clone());
        if r["truncated"] == json!(false) {
            assert_eq!(r["nextAfter"], Value::Null);
            break;
        }
        after = r["nextAfter"].as_str().unwrap().to_owned();
        assert_eq!(&after, got.last().unwrap());
    }
    assert_eq!(walked, keys);

    // keysOnly pages are bounded by key bytes, so the whole range fits.
    let r = one(&b, json!({"op": "getPrefix", "ns": NS, "prefix": "big:", "limit": 1000, "keysOnly": true}))
        .await;
    assert_eq!(row_keys(&r), keys);
    assert_eq!(r["truncated"], json!(false));
}

#[tokio::test]
async fn an_unknown_namespace_reads_empty_and_is_never_an_error() {
    let b = TestBroker::start().await;
    let rs = ok(
        &b,
        json!([
            get("never-written", "k"),
            {"op": "getMany", "ns": "never-written", "keys": ["a", "b"]},
            {"op": "getPrefix", "ns": "never-written", "prefix": "a"},
        ]),
    )
    .await;
    assert_eq!(rs[0]["found"], json!(false));
    assert_eq!(rs[1]["rows"], json!([]));
    assert_eq!(rs[1]["missing"], json!(["a", "b"]));
    assert_eq!(rs[2]["rows"], json!([]));
    assert_eq!(rs[2]["truncated"], json!(false));
    assert_eq!(rs[2]["nextAfter"], Value::Null);
    assert_eq!(total_rows(&b).await, 0, "reading mints no namespace");
}

// ---------------------------------------------------------------- put

#[tokio::test]
async fn an_applied_put_answers_the_value_written_and_its_new_version() {
    let b = TestBroker::start().await;
    let w = one(&b, put(NS, "k", json!(5))).await;
    assert_fields(&w, &["index", "op", "applied", "key", "value", "version"]);
    assert_eq!(w["applied"], json!(true));
    assert_eq!(w["key"], "k");
    assert_eq!(w["value"], json!(5));
    assert!(w["version"].as_i64().unwrap() > 0);
}

#[tokio::test]
async fn put_replaces_value_and_expiry_and_never_inherits_the_ttl() {
    let b = TestBroker::start().await;
    one(&b, put_ttl(NS, "k", json!(1), 3600)).await;
    let r1 = read(&b, NS, "k").await;
    assert_ts(&r1["expiresAt"]);
    one(&b, put(NS, "k", json!(2))).await;
    let r2 = read(&b, NS, "k").await;
    assert_eq!(r2["value"], json!(2));
    assert_eq!(r2["expiresAt"], Value::Null, "a forever put does not inherit the TTL");
    one(&b, put_ttl(NS, "k", json!(3), 60)).await;
    let r3 = read(&b, NS, "k").await;
    assert_eq!(r3["value"], json!(3));
    assert_ts(&r3["expiresAt"]);
    assert!(
        r3["expiresAt"].as_str().unwrap() < r1["expiresAt"].as_str().unwrap(),
        "the new TTL, not the old"
    );
    assert!(r3["version"].as_i64() > r2["version"].as_i64());
}

#[tokio::test]
async fn put_expect_zero_on_a_live_key_answers_exists_with_the_current_value_and_version() {
    let b = TestBroker::start().await;
    let w = one(&b, put(NS, "k", json!({"charge": "ch_1"}))).await;
    let r =
        one(&b, json!({"op": "put", "ns": NS, "key": "k", "value": 2, "forever": true, "expect": 0})).await;
    assert_fields(&r, &["index", "op", "applied", "reason", "key", "value", "version"]);
    assert_eq!(r["applied"], json!(false));
    assert_eq!(r["reason"], "exists");
    assert_eq!(r["value"], json!({"charge": "ch_1"}));
    assert_eq!(r["version"], w["version"]);
    assert_eq!(read(&b, NS, "k").await["value"], json!({"charge": "ch_1"}));
}

#[tokio::test]
async fn expect_zero_and_put_if_absent_win_over_an_expired_unpruned_row_with_a_higher_version() {
    let b = TestBroker::start().await;
    let a = one(&b, put_ttl(NS, "a", json!("old"), 1)).await;
    let c = one(&b, put_ttl(NS, "c", json!("old"), 1)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(physical_rows(&b, NS).await, 2, "the sweeper has not pruned them");
    let r =
        one(&b, json!({"op": "put", "ns": NS, "key": "a", "value": "new", "ttlSeconds": 60, "expect": 0}))
            .await;
    assert_eq!(r["applied"], json!(true), "{r}");
    assert!(
        r["version"].as_i64().unwrap() > a["version"].as_i64().unwrap(),
        "a new lineage, a higher version"
    );
    let r =
        one(&b, json!({"op": "putIfAbsent", "ns": NS, "key": "c", "value": "new", "forever": true})).await;
    assert_eq!(r["applied"], json!(true), "{r}");
    assert!(r["version"].as_i64().unwrap() > c["version"].as_i64().unwrap());
    assert_eq!(read(&b, NS, "a").await["value"], json!("new"));
    let rc = read(&b, NS, "c").await;
    assert_eq!(rc["value"], json!("new"));
    assert_eq!(rc["expiresAt"], Value::Null, "the fresh row takes the expiry it carries");
}

#[tokio::test]
async fn put_expect_n_on_an_absent_key_answers_absent_version_0_and_creates_nothing() {
    let b = TestBroker::start().await;
    let r =
        one(&b, json!({"op": "put", "ns": NS, "key": "k", "value": 1, "forever": true, "expect": 7})).await;
    assert_eq!(
        r,
        json!({"index": 0, "op": "put", "applied": false, "reason": "absent", "key": "k", "value": null, "version": 0})
    );
    assert_absent(&b, NS, "k").await;
    assert_eq!(physical_rows(&b, NS).await, 0);
}

#[tokio::test]
async fn put_expect_n_on_an_expired_key_answers_absent_and_does_not_revive_it() {
    let b = TestBroker::start().await;
    let w = one(&b, put_ttl(NS, "k", json!(1), 1)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let r = one(
        &b,
        json!({"op": "put", "ns": NS, "key": "k", "value": 2, "forever": true, "expect": w["version"]}),
    )
    .await;
    assert_eq!(r["applied"], json!(false));
    assert_eq!(r["reason"], "absent");
    assert_eq!(r["version"], json!(0));
    assert_eq!(r["value"], Value::Null);
    assert_absent(&b, NS, "k").await;
}

#[tokio::test]
async fn put_expect_mismatch_answers_version_with_the_current_value_and_a_match_applies() {
    let b = TestBroker::start().await;
    let w = one(&b, put(NS, "k", json!("v1"))).await;
    let v1 = w["version"].as_i64().unwrap();
    let r = one(
        &b,
        json!({"op": "put", "ns": NS, "key": "k", "value": "v2", "forever": true, "expect": v1 + 1000}),
    )
    .await;
    assert_eq!(r["applied"], json!(false));
    assert_eq!(r["reason"], "version");
    assert_eq!(r["value"], json!("v1"));
    assert_eq!(r["version"], json!(v1));
    let r = one(&b, json!({"op": "put", "ns": NS, "key": "k", "value": "v2", "forever": true, "expect": v1}))
        .await;
    assert_eq!(r["applied"], json!(true));
    assert_eq!(r["value"], json!("v2"));
    assert!(r["version"].as_i64().unwrap() > v1);
}

#[tokio::test]
async fn put_if_absent_echoes_its_op_name_and_the_loser_gets_the_winners_value() {
    let b = TestBroker::start().await;
    let op =
        |v: i64| json!({"op": "putIfAbsent", "ns": NS, "key": "once", "value": {"by": v}, "ttlSeconds": 60});
    let w = one(&b, op(1)).await;
    assert_eq!(w["op"], "putIfAbsent");
    assert_eq!(w["applied"], json!(true));
    assert_eq!(w["value"], json!({"by": 1}));
    let l = one(&b, op(2)).await;
    assert_eq!(l["op"], "putIfAbsent");
    assert_eq!(l["applied"], json!(false));
    assert_eq!(l["reason"], "exists");
    assert_eq!(l["value"], json!({"by": 1}));
    assert_eq!(l["version"], w["version"]);
}

#[tokio::test]
async fn versions_strictly_increase_across_keys_and_rewrites() {
    let b = TestBroker::start().await;
    let mut last = 0;
    for i in 0..30 {
        let key = format!("k{}", i % 7);
        let w = one(&b, put(if i % 2 == 0 { NS } else { "other" }, &key, json!(i))).await;
        let v = w["version"].as_i64().unwrap();
        assert!(v > last, "version {v} after {last}");
        last = v;
    }
    let rs = ok(&b, Value::Array((0..10).map(|i| put(NS, &format!("batch{i}"), json!(i))).collect())).await;
    let mut vs: Vec<i64> = rs.iter().map(|r| r["version"].as_i64().unwrap()).collect();
    assert!(vs.iter().all(|v| *v > last));
    vs.sort();
    vs.dedup();
    assert_eq!(vs.len(), 10, "versions are never re-issued");
}

// ---------------------------------------------------------------- delete

#[tokio::test]
async fn an_applied_delete_answers_the_deleted_value_and_version() {
    let b = TestBroker::start().await;
    let w = one(&b, put(NS, "k", json!({"x": 1}))).await;
    let d = one(&b, json!({"op": "delete", "ns": NS, "key": "k"})).await;
    assert_eq!(
        d,
        json!({"index": 0, "op": "delete", "applied": true, "key": "k", "value": {"x": 1}, "version": w["version"]})
    );
    assert_absent(&b, NS, "k").await;
}

#[tokio::test]
async fn delete_of_an_absent_key_answers_absent_with_200() {
    let b = TestBroker::start().await;
    let d = one(&b, json!({"op": "delete", "ns": NS, "key": "nope"})).await;
    assert_eq!(
        d,
        json!({"index": 0, "op": "delete", "applied": false, "reason": "absent", "key": "nope", "value": null, "version": 0})
    );
}

#[tokio::test]
async fn delete_with_expect_deletes_only_the_expected_version() {
    let b = TestBroker::start().await;
    let w = one(&b, put(NS, "k", json!("v"))).await;
    let v = w["version"].as_i64().unwrap();
    let d = one(&b, json!({"op": "delete", "ns": NS, "key": "k", "expect": v + 1})).await;
    assert_eq!(d["applied"], json!(false));
    assert_eq!(d["reason"], "version");
    assert_eq!(d["value"], json!("v"));
    assert_eq!(d["version"], json!(v));
    assert_eq!(read(&b, NS, "k").await["found"], json!(true));
    let d = one(&b, json!({"op": "delete", "ns": NS, "key": "k", "expect": v})).await;
    assert_eq!(d["applied"], json!(true));
    assert_eq!(d["version"], json!(v));
    assert_absent(&b, NS, "k").await;
    let d = one(&b, json!({"op": "delete", "ns": NS, "key": "k", "expect": v})).await;
    assert_eq!(d["reason"], "absent");
    assert_eq!(d["version"], json!(0));
}

#[tokio::test]
async fn delete_with_expect_zero_never_deletes_and_answers_exists_or_absent() {
    let b = TestBroker::start().await;
    let w = one(&b, put(NS, "k", json!("v"))).await;
    let d = one(&b, json!({"op": "delete", "ns": NS, "key": "k", "expect": 0})).await;
    assert_eq!(
        d,
        json!({"index": 0, "op": "delete", "applied": false, "reason": "exists", "key": "k", "value": "v", "version": w["version"]})
    );
    assert_eq!(read(&b, NS, "k").await["version"], w["version"]);
    let d = one(&b, json!({"op": "delete", "ns": NS, "key": "nope", "expect": 0})).await;
    assert_eq!(d["applied"], json!(false));
    assert_eq!(d["reason"], "absent");
    assert_eq!(d["version"], json!(0));
}

// ---------------------------------------------------------------- check

#[tokio::test]
async fn check_answers_every_verdict_and_writes_nothing() {
    let b = TestBroker::start().await;
    let check = |key: &str, expect: i64| json!({"op": "check", "ns": NS, "key": key, "expect": expect});

    let r = one(&b, check("free", 0)).await;
    assert_eq!(r["applied"], json!(true), "expect 0 on an absent key holds: {r}");
    assert!(r.get("value").is_none() && r.get("reason").is_none(), "{r}");

    let w = one(&b, put(NS, "held", json!({"owner": "me"}))).await;
    let v = w["version"].as_i64().unwrap();
    let r = one(&b, check("held", 0)).await;
    assert_eq!(r["applied"], json!(false));
    assert_eq!(r["reason"], "exists");
    assert_eq!(r["value"], json!({"owner": "me"}));
    assert_eq!(r["version"], json!(v));

    let r = one(&b, check("held", v)).await;
    assert_eq!(r, json!({"index": 0, "op": "check", "applied": true, "key": "held", "version": v}));

    let r = one(&b, check("held", v + 5)).await;
    assert_eq!(r["applied"], json!(false));
    assert_eq!(r["reason"], "version");
    assert_eq!(r["value"], json!({"owner": "me"}));
    assert_eq!(r["version"], json!(v));

    let r = one(&b, check("free", 3)).await;
    assert_eq!(
        r,
        json!({"index": 0, "op": "check", "applied": false, "reason": "absent", "key": "free", "value": null, "version": 0})
    );

    assert_eq!(read(&b, NS, "held").await["version"], json!(v), "check writes nothing");
    assert_absent(&b, NS, "free").await;
}

// ---------------------------------------------------------------- incr

fn incr(key: &str) -> Value {
    json!({"op": "incr", "ns": NS, "key": key, "forever": true})
}

#[tokio::test]
async fn incr_counts_an_absent_key_as_zero_and_defaults_delta_to_one() {
    let b = TestBroker::start().await;
    let r = one(&b, incr("n")).await;
    assert_fields(&r, &["index", "op", "applied", "key", "value", "version"]);
    assert_eq!(r["applied"], json!(true));
    assert_eq!(r["value"], json!(1));
    let mut op = incr("n");
    op["delta"] = json!(5);
    let r2 = one(&b, op).await;
    assert_eq!(r2["value"], json!(6));
    assert!(r2["version"].as_i64() > r["version"].as_i64());
    let mut op = incr("n");
    op["delta"] = json!(-10);
    assert_eq!(one(&b, op).await["value"], json!(-4));
    assert_eq!(read(&b, NS, "n").await["value"], json!(-4));
}

#[tokio::test]
async fn incr_max_and_min_refuse_with_limit_and_the_current_value_and_write_nothing() {
    let b = TestBroker::start().await;
    let mut op = incr("n");
    op["delta"] = json!(3);
    let w = one(&b, op).await;
    let mut op = incr("n");
    op["delta"] = json!(5);
    op["max"] = json!(5);
    let r = one(&b, op).await;
    assert_eq!(
        r,
        json!({"index": 0, "op": "incr", "applied": false, "reason": "limit", "key": "n", "value": 3, "version": w["version"]})
    );
    let mut op = incr("n");
    op["delta"] = json!(-4);
    op["min"] = json!(0);
    let r = one(&b, op).await;
    assert_eq!(r["reason"], "limit");
    assert_eq!(r["value"], json!(3));
    let after = read(&b, NS, "n").await;
    assert_eq!(after["value"], json!(3), "no saturating, no truncating");
    assert_eq!(after["version"], w["version"]);
    // Landing exactly on the bound is allowed.
    let mut op = incr("n");
    op["delta"] = json!(2);
    op["max"] = json!(5);
    assert_eq!(one(&b, op).await["value"], json!(5));
}

#[tokio::test]
async fn incr_delta_10_max_5_on_an_absent_key_is_refused_and_creates_nothing() {
    let b = TestBroker::start().await;
    let mut op = incr("n");
    op["delta"] = json!(10);
    op["max"] = json!(5);
    op["ttlSeconds"] = json!(60);
    op.as_object_mut().unwrap().remove("forever");
    let r = one(&b, op).await;
    assert_eq!(
        r,
        json!({"index": 0, "op": "incr", "applied": false, "reason": "limit", "key": "n", "value": 0, "version": 0})
    );
    assert_absent(&b, NS, "n").await;
    assert_eq!(physical_rows(&b, NS).await, 0);
}

#[tokio::test]
async fn incr_ttl_applies_only_on_create_and_expires_at_stays_identical() {
    let b = TestBroker::start().await;
    let op = |ttl: Value| {
        let mut o = json!({"op": "incr", "ns": NS, "key": "window", "delta": 1, "max": 100});
        match ttl {
            Value::Null => o["forever"] = json!(true),
            t => o["ttlSeconds"] = t,
        }
        o
    };
    one(&b, op(json!(3600))).await;
    let before = read(&b, NS, "window").await;
    assert_ts(&before["expiresAt"]);
    one(&b, op(json!(10))).await;
    one(&b, op(json!(86400))).await;
    one(&b, op(Value::Null)).await;
    let after = read(&b, NS, "window").await;
    assert_eq!(after["value"], json!(4));
    assert_eq!(after["expiresAt"], before["expiresAt"], "the expiresAt string is identical");
}

#[tokio::test]
async fn incr_on_a_live_non_integer_answers_type_with_the_current_value() {
    let b = TestBroker::start().await;
    for (key, value) in [
        ("s", json!("str")),
        ("o", json!({"x": 1})),
        ("f", json!(1.5)),
        ("z", Value::Null),
        ("t", json!(true)),
    ] {
        let w = one(&b, put(NS, key, value.clone())).await;
        let r = one(&b, incr(key)).await;
        assert_eq!(r["applied"], json!(false), "{key}: {r}");
        assert_eq!(r["reason"], "type", "{key}: {r}");
        assert_eq!(r["value"], value);
        assert_eq!(r["version"], w["version"]);
        assert_eq!(read(&b, NS, key).await["value"], value, "nothing written");
    }
}

#[tokio::test]
async fn incr_on_an_expired_non_number_starts_again_from_zero_with_its_own_expiry() {
    let b = TestBroker::start().await;
    let w = one(&b, put_ttl(NS, "n", json!("not a number"), 1)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let r = one(&b, incr("n")).await;
    assert_eq!(r["applied"], json!(true), "{r}");
    assert_eq!(r["value"], json!(1));
    assert!(r["version"].as_i64().unwrap() > w["version"].as_i64().unwrap());
    let g = read(&b, NS, "n").await;
    assert_eq!(g["value"], json!(1));
    assert_eq!(g["expiresAt"], Value::Null, "a fresh window takes the expiry the incr carries");
}

#[tokio::test]
async fn incr_keeps_every_digit_of_big_integers() {
    let b = TestBroker::start().await;
    let e30 = format!("1{}", "0".repeat(30));
    let two_e30 = format!("2{}", "0".repeat(30));
    let body =
        format!(r#"{{"operations":[{{"op":"incr","ns":"{NS}","key":"big","delta":{e30},"forever":true}}]}}"#);
    let (s, text) = call_text(&b, &body).await;
    assert_eq!(s, 200, "{text}");
    assert!(
        text.contains(&format!(r#""value": {e30}"#)) || text.contains(&format!(r#""value":{e30}"#)),
        "{text}"
    );
    let body = format!(
        r#"{{"operations":[{{"op":"incr","ns":"{NS}","key":"big","delta":{e30},"max":{two_e30},"forever":true}}]}}"#
    );
    let (s, text) = call_text(&b, &body).await;
    assert_eq!(s, 200, "{text}");
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(compact.contains(&format!(r#""value":{two_e30}"#)), "2*10^30 exact, not rounded: {text}");
    assert!(compact.contains(r#""applied":true"#), "{text}");
    // One more unit is over the (big) max: refused with the exact current value.
    let body = format!(
        r#"{{"operations":[{{"op":"incr","ns":"{NS}","key":"big","delta":1,"max":{two_e30},"forever":true}}]}}"#
    );
    let (_, text) = call_text(&b, &body).await;
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(compact.contains(r#""reason":"limit""#), "{text}");
    assert!(compact.contains(&format!(r#""value":{two_e30}"#)), "{text}");
    // And a get answers every digit as well.
    let (_, text) = call_text(&b, &format!(r#"[{{"op":"get","ns":"{NS}","key":"big"}}]"#)).await;
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(compact.contains(&format!(r#""value":{two_e30}"#)), "{text}");
}

#[tokio::test]
async fn incr_with_a_float_delta_is_a_400_and_writes_nothing() {
    let b = TestBroker::start().await;
    for delta in [json!(1.5), json!("1"), json!(1e3)] {
        let mut op = incr("n");
        op["delta"] = delta;
        let (s, body) = call(&b, json!([op])).await;
        assert_eq!(s, 400, "{body}");
        assert_eq!(body["error"], "kv_bad_request");
        assert!(body["reason"].is_string());
    }
    assert_absent(&b, NS, "n").await;
}

// ---------------------------------------------------------------- expiry

#[tokio::test]
async fn a_one_second_ttl_is_invisible_by_1200_ms_before_the_sweeper_runs() {
    let b = TestBroker::start().await;
    let written = std::time::Instant::now();
    let w = one(&b, put_ttl(NS, "t:1", json!("short"), 1)).await;
    one(&b, put(NS, "t:2", json!("forever"))).await;
    let alive = read(&b, NS, "t:1").await;
    if written.elapsed() < Duration::from_millis(900) {
        assert_eq!(alive["found"], json!(true), "alive before its second is up");
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let rs = ok(
        &b,
        json!([
            get(NS, "t:1"),
            {"op": "getMany", "ns": NS, "keys": ["t:1", "t:2"]},
            {"op": "getPrefix", "ns": NS, "prefix": "t:"},
            {"op": "check", "ns": NS, "key": "t:1", "expect": w["version"]},
        ]),
    )
    .await;
    assert_eq!(rs[0]["found"], json!(false));
    assert_eq!(row_keys(&rs[1]), ["t:2"]);
    assert_eq!(rs[1]["missing"], json!(["t:1"]));
    assert_eq!(row_keys(&rs[2]), ["t:2"]);
    assert_eq!(rs[3]["reason"], "absent");
    assert_eq!(physical_rows(&b, NS).await, 2, "the expired row is still physically there");
}

#[tokio::test]
async fn a_write_without_exactly_one_expiry_is_kv_expiry_not_specified() {
    let b = TestBroker::start().await;
    for op in ["put", "putIfAbsent", "incr"] {
        let neither = json!({"op": op, "ns": NS, "key": "k", "value": 1});
        let both = json!({"op": op, "ns": NS, "key": "k", "value": 1, "ttlSeconds": 10, "forever": true});
        let (neither, both) = if op == "incr" {
            (
                json!({"op": op, "ns": NS, "key": "k"}),
                json!({"op": op, "ns": NS, "key": "k", "ttlSeconds": 10, "forever": true}),
            )
        } else {
            (neither, both)
        };
        refused(&b, json!([put(NS, "canary", json!(1)), neither]), 400, "kv_expiry_not_specified").await;
        refused(&b, json!([put(NS, "canary", json!(1)), both]), 400, "kv_expiry_not_specified").await;
    }
    assert_eq!(total_rows(&b).await, 0, "nothing written");
}

#[tokio::test]
async fn a_ttl_that_is_not_a_positive_integer_or_forever_false_is_kv_bad_ttl() {
    let b = TestBroker::start().await;
    for op in ["put", "putIfAbsent", "incr"] {
        for ttl in [json!(0), json!(-1), json!(1.5), json!("10")] {
            let o = json!({"op": op, "ns": NS, "key": "k", "value": 1, "ttlSeconds": ttl});
            refused(&b, json!([put(NS, "canary", json!(1)), o]), 400, "kv_bad_ttl").await;
        }
        let o = json!({"op": op, "ns": NS, "key": "k", "value": 1, "forever": false});
        refused(&b, json!([put(NS, "canary", json!(1)), o]), 400, "kv_bad_ttl").await;
        let o = json!({"op": op, "ns": NS, "key": "k", "value": 1, "forever": "true"});
        refused(&b, json!([put(NS, "canary", json!(1)), o]), 400, "kv_bad_ttl").await;
    }
    assert_eq!(total_rows(&b).await, 0, "nothing written");
}

// ---------------------------------------------------------------- ordering

#[tokio::test]
async fn a_get_sees_the_state_before_the_calls_write_and_multi_key_reads_see_the_writes() {
    let b = TestBroker::start().await;
    one(&b, put(NS, "o:k", json!("old"))).await;
    let rs = ok(
        &b,
        json!([
            {"op": "getMany", "ns": NS, "keys": ["o:k", "o:new"]},
            {"op": "getPrefix", "ns": NS, "prefix": "o:"},
            get(NS, "o:k"),
            put(NS, "o:k", json!("new")),
            get(NS, "o:new"),
            put(NS, "o:new", json!("fresh")),
        ]),
    )
    .await;
    assert_eq!(rs[2]["value"], json!("old"), "get sees the state before the write of its key");
    assert_eq!(rs[4]["found"], json!(false));
    assert_eq!(rs[3]["applied"], json!(true));
    let many = &rs[0];
    assert_eq!(many["rows"][0]["value"], json!("new"));
    assert_eq!(many["rows"][1]["value"], json!("fresh"));
    assert_eq!(many["missing"], json!([]));
    assert_eq!(row_keys(&rs[1]), ["o:k", "o:new"]);
    assert_eq!(rs[1]["rows"][0]["value"], json!("new"));
    assert_eq!(rs[1]["rows"][0]["version"], rs[3]["version"]);
}

#[tokio::test]
async fn results_stay_index_aligned_whatever_the_order_of_application() {
    let b = TestBroker::start().await;
    let keys = ["z", "a", "m", "é", "B", "aa"];
    let mut ops: Vec<Value> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        ops.push(match i % 3 {
            0 => put(NS, k, json!(i)),
            1 => json!({"op": "incr", "ns": NS, "key": k, "delta": i, "forever": true}),
            _ => json!({"op": "putIfAbsent", "ns": NS, "key": k, "value": i, "forever": true}),
        });
        ops.push(get("other", k));
    }
    let rs = ok(&b, Value::Array(ops)).await;
    for (i, k) in keys.iter().enumerate() {
        let w = &rs[2 * i];
        assert_eq!(w["key"], json!(k));
        assert_eq!(w["value"], json!(i));
        assert_eq!(rs[2 * i + 1]["key"], json!(k));
    }
    // Writes are applied in (ns, key) byte order: versions rise with the keys.
    let mut by_key: Vec<(&str, i64)> =
        keys.iter().enumerate().map(|(i, k)| (*k, rs[2 * i]["version"].as_i64().unwrap())).collect();
    by_key.sort();
    assert!(by_key.windows(2).all(|w| w[0].1 < w[1].1), "{by_key:?}");
}

// ---------------------------------------------------------------- required

#[tokio::test]
async fn a_lost_required_precondition_answers_200_kv_precondition_and_writes_nothing() {
    let b = TestBroker::start().await;
    let w = one(&b, put(NS, "taken", json!({"by": "winner"}))).await;
    let (s, body) = call(
        &b,
        json!([
            put(NS, "a-before", json!(1)),
            {"op": "putIfAbsent", "ns": NS, "key": "taken", "value": {"by": "me"}, "forever": true, "required": true},
            {"op": "incr", "ns": NS, "key": "z-after", "forever": true},
            get(NS, "taken"),
        ]),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        body,
        json!({"ok": false, "reason": "kv_precondition", "failedIndex": 1, "kvReason": "exists",
               "key": "taken", "version": w["version"], "value": {"by": "winner"}})
    );
    assert!(body.get("results").is_none(), "no results");
    // "a-before" sorts before "taken", so it was applied and then rolled back.
    assert_absent(&b, NS, "a-before").await;
    assert_absent(&b, NS, "z-after").await;
    assert_eq!(physical_rows(&b, NS).await, 1);
}

#[tokio::test]
async fn a_required_check_expect_version_on_an_absent_key_answers_absent_version_0() {
    let b = TestBroker::start().await;
    let (s, body) = call(
        &b,
        json!([
            {"op": "check", "ns": "queen-locks", "key": "job#0", "expect": 42, "required": true},
            put(NS, "effect", json!(1)),
        ]),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(body["ok"], json!(false));
    assert_eq!(body["reason"], "kv_precondition");
    assert_eq!(body["failedIndex"], json!(0));
    assert_eq!(body["kvReason"], "absent");
    assert_eq!(body["version"], json!(0));
    assert_eq!(body["value"], Value::Null);
    assert_absent(&b, NS, "effect").await;
}

#[tokio::test]
async fn a_refused_write_without_required_lets_the_rest_of_the_call_commit() {
    let b = TestBroker::start().await;
    one(&b, put(NS, "taken", json!(1))).await;
    let rs = ok(
        &b,
        json!([
            {"op": "putIfAbsent", "ns": NS, "key": "taken", "value": 2, "forever": true},
            put(NS, "other", json!("committed")),
            {"op": "putIfAbsent", "ns": NS, "key": "fresh", "value": 3, "forever": true, "required": true},
        ]),
    )
    .await;
    assert_eq!(rs[0]["applied"], json!(false));
    assert_eq!(rs[0]["reason"], "exists");
    assert_eq!(rs[1]["applied"], json!(true));
    assert_eq!(rs[2]["applied"], json!(true), "a required op that holds is an ordinary result");
    assert_eq!(read(&b, NS, "other").await["value"], json!("committed"));
    assert_eq!(read(&b, NS, "fresh").await["value"], json!(3));
}

// ---------------------------------------------------------------- errors

#[tokio::test]
async fn a_bad_namespace_is_400_kv_bad_namespace_and_a_64_char_one_is_fine() {
    let b = TestBroker::start().await;
    for ns in
        [json!("NOT A NAMESPACE"), json!("Upper"), json!(""), json!("a".repeat(65)), json!("-x"), json!(5)]
    {
        refused(
            &b,
            json!([put(NS, "canary", json!(1)), {"op": "get", "ns": ns, "key": "k"}]),
            400,
            "kv_bad_namespace",
        )
        .await;
    }
    refused(&b, json!([put(NS, "canary", json!(1)), {"op": "get", "key": "k"}]), 400, "kv_bad_namespace")
        .await;
    assert_eq!(total_rows(&b).await, 0);
    let ns = format!("a{}", "-._9".repeat(15) + "xyz");
    assert_eq!(ns.len(), 64);
    assert_eq!(one(&b, put(&ns, "k", json!(1))).await["applied"], json!(true));
}

#[tokio::test]
async fn a_bad_key_is_400_kv_bad_key() {
    let b = TestBroker::start().await;
    for key in [json!(""), json!("a\u{0}b"), json!(5), Value::Null] {
        let mut op = put(NS, "x", json!(1));
        op["key"] = key;
        refused(&b, json!([put(NS, "canary", json!(1)), op]), 400, "kv_bad_key").await;
    }
    refused(&b, json!([put(NS, "canary", json!(1)), {"op": "get", "ns": NS}]), 400, "kv_bad_key").await;
    let (s, text) = call_text(&b, r#"{"operations":[{"op":"get","ns":"app","key":"nul\u0000"}]}"#).await;
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_error_body(s, &body, 400, "kv_bad_key");
    assert_eq!(total_rows(&b).await, 0);
}

#[tokio::test]
async fn a_key_with_a_lone_surrogate_is_a_kv_bad_request() {
    let b = TestBroker::start().await;
    for text in [
        r#"{"operations":[{"op":"put","ns":"app","key":"a\ud800","value":1,"forever":true}]}"#,
        r#"{"operations":[{"op":"put","ns":"app","key":"k","value":"\udfff","forever":true}]}"#,
    ] {
        let (s, t) = call_text(&b, text).await;
        let body: Value = serde_json::from_str(&t).unwrap();
        assert_eq!(s, 400, "{t}");
        assert_eq!(body["error"], "kv_bad_request", "{t}");
        assert!(body["reason"].is_string(), "{t}");
        assert!(body.get("code").is_none() || body["code"] == body["error"], "{t}");
    }
    // A surrogate pair is a legal 4-byte character.
    let (s, t) =
        call_text(&b, r#"[{"op":"put","ns":"app","key":"\ud83d\ude00","value":1,"forever":true}]"#).await;
    assert_eq!(s, 200, "{t}");
    assert_eq!(read(&b, "app", "😀").await["found"], json!(true));
}

#[tokio::test]
async fn a_key_over_512_bytes_is_413_and_a_512_byte_multibyte_key_is_accepted() {
    let b = TestBroker::start().await;
    refused(
        &b,
        json!([put(NS, "canary", json!(1)), put(NS, &"k".repeat(513), json!(1))]),
        413,
        "kv_key_too_large",
    )
    .await;
    // 171 three-byte characters: 513 bytes, 171 characters.
    refused(&b, json!([put(NS, &"€".repeat(171), json!(1))]), 413, "kv_key_too_large").await;
    refused(&b, json!([get(NS, &"k".repeat(513))]), 413, "kv_key_too_large").await;
    assert_eq!(total_rows(&b).await, 0);
    let key = "😀".repeat(128);
    assert_eq!(key.len(), 512);
    assert_eq!(one(&b, put(NS, &key, json!(1))).await["applied"], json!(true));
    let r = read(&b, NS, &key).await;
    assert_eq!(r["found"], json!(true));
    assert_eq!(r["key"], json!(key));
}

#[tokio::test]
async fn a_value_over_64_kib_is_413_kv_value_too_large_and_64_kib_exactly_is_accepted() {
    let b = TestBroker::start().await;
    // A JSON string of 65,535 characters is 65,537 bytes serialized.
    let over = json!("v".repeat(65_535));
    refused(&b, json!([put(NS, "canary", json!(1)), put(NS, "k", over.clone())]), 413, "kv_value_too_large")
        .await;
    refused(
        &b,
        json!([{"op": "putIfAbsent", "ns": NS, "key": "k", "value": over, "forever": true}]),
        413,
        "kv_value_too_large",
    )
    .await;
    assert_eq!(total_rows(&b).await, 0);
    let exact = json!("v".repeat(65_534));
    assert_eq!(exact.to_string().len(), 65_536);
    assert_eq!(one(&b, put(NS, "k", exact)).await["applied"], json!(true));
}

#[tokio::test]
async fn an_unknown_op_is_400_kv_unknown_op() {
    let b = TestBroker::start().await;
    for op in [json!("merge"), json!("once"), json!("deletePrefix"), json!("GET"), json!(5), Value::Null] {
        refused(
            &b,
            json!([put(NS, "canary", json!(1)), {"op": op, "ns": NS, "key": "k"}]),
            400,
            "kv_unknown_op",
        )
        .await;
    }
    refused(&b, json!([put(NS, "canary", json!(1)), {"ns": NS, "key": "k"}]), 400, "kv_unknown_op").await;
    assert_eq!(total_rows(&b).await, 0);
}

#[tokio::test]
async fn a_bad_expect_is_400_kv_bad_expect() {
    let b = TestBroker::start().await;
    let cases = [
        json!({"op": "put", "ns": NS, "key": "k", "value": 1, "forever": true, "expect": -1}),
        json!({"op": "put", "ns": NS, "key": "k", "value": 1, "forever": true, "expect": 1.5}),
        json!({"op": "put", "ns": NS, "key": "k", "value": 1, "forever": true, "expect": "3"}),
        json!({"op": "putIfAbsent", "ns": NS, "key": "k", "value": 1, "forever": true, "expect": 0}),
        json!({"op": "incr", "ns": NS, "key": "k", "forever": true, "expect": 1}),
        json!({"op": "check", "ns": NS, "key": "k"}),
        json!({"op": "check", "ns": NS, "key": "k", "expect": -2}),
        json!({"op": "delete", "ns": NS, "key": "k", "expect": -1}),
    ];
    for op in cases {
        refused(&b, json!([put(NS, "canary", json!(1)), op]), 400, "kv_bad_expect").await;
    }
    assert_eq!(total_rows(&b).await, 0);
}

#[tokio::test]
async fn get_prefix_without_a_prefix_is_400_kv_prefix_required() {
    let b = TestBroker::start().await;
    for op in [
        json!({"op": "getPrefix", "ns": NS}),
        json!({"op": "getPrefix", "ns": NS, "prefix": ""}),
        json!({"op": "getPrefix", "ns": NS, "prefix": null}),
    ] {
        refused(&b, json!([put(NS, "canary", json!(1)), op]), 400, "kv_prefix_required").await;
    }
    assert_eq!(total_rows(&b).await, 0);
}

#[tokio::test]
async fn two_writes_of_one_key_in_a_call_are_400_kv_duplicate_key_in_call() {
    let b = TestBroker::start().await;
    refused(&b, json!([put(NS, "k", json!(1)), put(NS, "k", json!(2))]), 400, "kv_duplicate_key_in_call")
        .await;
    refused(
        &b,
        json!([put(NS, "k", json!(1)), {"op": "delete", "ns": NS, "key": "k"}]),
        400,
        "kv_duplicate_key_in_call",
    )
    .await;
    refused(
        &b,
        json!([{"op": "check", "ns": NS, "key": "k", "expect": 0}, {"op": "incr", "ns": NS, "key": "k", "forever": true}]),
        400,
        "kv_duplicate_key_in_call",
    )
    .await;
    assert_eq!(total_rows(&b).await, 0);
    // The same key in two namespaces, or a read beside the write, is fine.
    let rs = ok(&b, json!([put(NS, "k", json!(1)), put("other", "k", json!(2)), get(NS, "k")])).await;
    assert_eq!(rs[0]["applied"], json!(true));
    assert_eq!(rs[1]["applied"], json!(true));
}

#[tokio::test]
async fn more_than_256_ops_is_400_kv_too_many_ops_and_256_is_fine() {
    let b = TestBroker::start().await;
    let ops = |n: usize| Value::Array((0..n).map(|i| put(NS, &format!("k{i}"), json!(i))).collect());
    refused(&b, ops(257), 400, "kv_too_many_ops").await;
    assert_eq!(total_rows(&b).await, 0);
    assert_eq!(ok(&b, ops(256)).await.len(), 256);
}

#[tokio::test]
async fn get_many_of_more_than_1000_keys_is_400_kv_too_many_keys_and_1000_is_fine() {
    let b = TestBroker::start().await;
    let keys = |n: usize| (0..n).map(|i| format!("k{i}")).collect::<Vec<_>>();
    refused(
        &b,
        json!([put(NS, "canary", json!(1)), {"op": "getMany", "ns": NS, "keys": keys(1001)}]),
        400,
        "kv_too_many_keys",
    )
    .await;
    assert_eq!(total_rows(&b).await, 0);
    let r = one(&b, json!({"op": "getMany", "ns": NS, "keys": keys(1000)})).await;
    assert_eq!(r["missing"].as_array().unwrap().len(), 1000);
}

#[tokio::test]
async fn a_tenant_in_the_body_or_an_op_is_400_kv_tenant_not_an_input() {
    let b = TestBroker::start().await;
    let (s, body) = b.post(KV, &json!({"operations": [put(NS, "k", json!(1))], "tenant": "acme"})).await;
    assert_error_body(s, &body, 400, "kv_tenant_not_an_input");
    let mut op = put(NS, "k", json!(1));
    op["tenant"] = json!("acme");
    refused(&b, json!([op]), 400, "kv_tenant_not_an_input").await;
    assert_eq!(total_rows(&b).await, 0);
}

#[tokio::test]
async fn a_body_that_is_not_json_or_not_an_object_or_array_is_400_kv_bad_body() {
    let b = TestBroker::start().await;
    for text in [
        "not json",
        "{\"operations\": [",
        "\"a string\"",
        "5",
        "null",
        "{}",
        "{\"operations\": 5}",
        "[5]",
        "[[]]",
    ] {
        let (s, t) = call_text(&b, text).await;
        let body: Value =
            serde_json::from_str(&t).unwrap_or_else(|_| panic!("JSON error body for {text}: {t}"));
        assert_error_body(s, &body, 400, "kv_bad_body");
    }
}

#[tokio::test]
async fn a_bare_array_body_is_accepted_and_answers_results() {
    let b = TestBroker::start().await;
    let (s, body) = b.post(KV, &json!([put(NS, "k", json!(1)), get(NS, "k"), get(NS, "nope")])).await;
    assert_eq!(s, 200, "{body}");
    assert_fields(&body, &["results"]);
    let rs = body["results"].as_array().unwrap();
    let idx: Vec<i64> = rs.iter().map(|r| r["index"].as_i64().unwrap()).collect();
    assert_eq!(idx, [0, 1, 2]);
    assert_eq!(rs[0]["applied"], json!(true));
    assert_eq!(rs[1]["found"], json!(false), "get runs before the call's write of its key");
    assert_eq!(read(&b, NS, "k").await["value"], json!(1));
}

// ---------------------------------------------------------------- path routes

async fn raw(
    b: &TestBroker,
    method: reqwest::Method,
    path: &str,
    body: Option<&str>,
) -> (u16, Value, Option<String>) {
    let mut req = b.http.request(method, b.url(path));
    if let Some(text) = body {
        req = req.header("content-type", "application/json").body(text.to_owned());
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let etag = resp.headers().get("etag").map(|v| v.to_str().unwrap().to_owned());
    let text = resp.text().await.expect("body");
    let body = if text.is_empty() { Value::Null } else { serde_json::from_str(&text).expect("JSON") };
    (status, body, etag)
}

#[tokio::test]
async fn path_put_then_get_answers_the_bare_element_with_an_etag_of_the_version() {
    let b = TestBroker::start().await;
    let (s, w, _) = raw(
        &b,
        reqwest::Method::PUT,
        "/api/v1/kv/app/cfg/a/b",
        Some(r#"{"value": {"x": 1}, "ttlSeconds": 60}"#),
    )
    .await;
    assert_eq!(s, 200, "{w}");
    assert_eq!(w["index"], json!(0));
    assert_eq!(w["op"], "put");
    assert_eq!(w["applied"], json!(true));
    assert_eq!(w["key"], "cfg/a/b");
    assert!(w.get("results").is_none());
    let (s, r, etag) = raw(&b, reqwest::Method::GET, "/api/v1/kv/app/cfg/a/b", None).await;
    assert_eq!(s, 200);
    assert_eq!(r["found"], json!(true));
    assert_eq!(r["value"], json!({"x": 1}));
    assert_ts(&r["expiresAt"]);
    assert_eq!(etag, Some(format!("\"{}\"", w["version"])));
    // The batch route sees the same key.
    assert_eq!(read(&b, "app", "cfg/a/b").await["version"], w["version"]);
}

#[tokio::test]
async fn path_get_of_a_missing_key_is_200_found_false_without_an_etag() {
    let b = TestBroker::start().await;
    let (s, r, etag) = raw(&b, reqwest::Method::GET, "/api/v1/kv/app/nope", None).await;
    assert_eq!(s, 200);
    assert_eq!(r, json!({"index": 0, "op": "get", "found": false, "key": "nope"}));
    assert_eq!(etag, None);
}

#[tokio::test]
async fn path_keys_are_percent_decoded_and_may_hold_slashes() {
    let b = TestBroker::start().await;
    let (s, w, _) = raw(
        &b,
        reqwest::Method::PUT,
        "/api/v1/kv/app/caf%C3%A9%20x%2Fy/%25z",
        Some(r#"{"value": 1, "forever": true}"#),
    )
    .await;
    assert_eq!(s, 200, "{w}");
    assert_eq!(w["key"], "café x/y/%z");
    assert_eq!(read(&b, "app", "café x/y/%z").await["value"], json!(1));
    let (_, r, _) = raw(&b, reqwest::Method::GET, "/api/v1/kv/app/caf%C3%A9%20x/y/%25z", None).await;
    assert_eq!(r["found"], json!(true), "%2F and / name the same key");
}

#[tokio::test]
async fn path_put_carries_expect_and_required_and_needs_an_expiry() {
    let b = TestBroker::start().await;
    let (s, w, _) = raw(
        &b,
        reqwest::Method::PUT,
        "/api/v1/kv/app/k",
        Some(r#"{"value": 1, "forever": true, "expect": 0}"#),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(w["applied"], json!(true));
    let (s, l, _) = raw(
        &b,
        reqwest::Method::PUT,
        "/api/v1/kv/app/k",
        Some(r#"{"value": 2, "forever": true, "expect": 0}"#),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(l["reason"], "exists");
    assert_eq!(l["value"], json!(1));
    let (s, p, _) = raw(
        &b,
        reqwest::Method::PUT,
        "/api/v1/kv/app/k",
        Some(r#"{"value": 2, "forever": true, "expect": 0, "required": true}"#),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(p["reason"], "kv_precondition");
    assert_eq!(p["kvReason"], "exists");
    let (s, e, _) = raw(&b, reqwest::Method::PUT, "/api/v1/kv/app/k2", Some(r#"{"value": 2}"#)).await;
    assert_error_body(s, &e, 400, "kv_expiry_not_specified");
    assert_absent(&b, "app", "k2").await;
}

#[tokio::test]
async fn path_delete_works_with_and_without_a_body() {
    let b = TestBroker::start().await;
    let w = one(&b, put("app", "a/b", json!("v"))).await;
    let v = w["version"].as_i64().unwrap();
    let (s, d, _) =
        raw(&b, reqwest::Method::DELETE, "/api/v1/kv/app/a/b", Some(&format!(r#"{{"expect": {}}}"#, v + 1)))
            .await;
    assert_eq!(s, 200);
    assert_eq!(d["applied"], json!(false));
    assert_eq!(d["reason"], "version");
    let (s, d, _) = raw(&b, reqwest::Method::DELETE, "/api/v1/kv/app/a/b", None).await;
    assert_eq!(s, 200);
    assert_eq!(
        d,
        json!({"index": 0, "op": "delete", "applied": true, "key": "a/b", "value": "v", "version": v})
    );
    let (s, d, _) = raw(&b, reqwest::Method::DELETE, "/api/v1/kv/app/a/b", Some("{}")).await;
    assert_eq!(s, 200);
    assert_eq!(d["reason"], "absent");
    let w = one(&b, put("app", "c", json!("v"))).await;
    let (s, d, _) = raw(
        &b,
        reqwest::Method::DELETE,
        "/api/v1/kv/app/c",
        Some(&format!(r#"{{"expect": {}}}"#, w["version"])),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(d["applied"], json!(true));
}

#[tokio::test]
async fn path_routes_refuse_any_query_string() {
    let b = TestBroker::start().await;
    one(&b, put("app", "k", json!(1))).await;
    for (method, body) in [
        (reqwest::Method::GET, None),
        (reqwest::Method::PUT, Some(r#"{"value": 1, "forever": true}"#)),
        (reqwest::Method::DELETE, None),
    ] {
        for q in ["?prefix=quota:acme:", "?x", "?"] {
            let (s, e, _) = raw(&b, method.clone(), &format!("/api/v1/kv/app/k{q}"), body).await;
            assert_error_body(s, &e, 400, "kv_no_query_string");
        }
    }
    assert_eq!(read(&b, "app", "k").await["found"], json!(true), "the DELETE did not run");
}

#[tokio::test]
async fn path_bodies_naming_op_ns_or_key_are_kv_field_in_path() {
    let b = TestBroker::start().await;
    for field in ["op", "ns", "key"] {
        let body = format!(r#"{{"value": 1, "forever": true, "{field}": "x"}}"#);
        let (s, e, _) = raw(&b, reqwest::Method::PUT, "/api/v1/kv/app/k", Some(&body)).await;
        assert_error_body(s, &e, 400, "kv_field_in_path");
        let body = format!(r#"{{"{field}": "x"}}"#);
        let (s, e, _) = raw(&b, reqwest::Method::DELETE, "/api/v1/kv/app/k", Some(&body)).await;
        assert_error_body(s, &e, 400, "kv_field_in_path");
    }
    assert_eq!(total_rows(&b).await, 0);
}

#[tokio::test]
async fn path_routes_validate_like_the_batch_route() {
    let b = TestBroker::start().await;
    let (s, e, _) = raw(&b, reqwest::Method::GET, "/api/v1/kv/BAD/k", None).await;
    assert_error_body(s, &e, 400, "kv_bad_namespace");
    let (s, e, _) = raw(&b, reqwest::Method::GET, &format!("/api/v1/kv/app/{}", "k".repeat(513)), None).await;
    assert_error_body(s, &e, 413, "kv_key_too_large");
    let (s, e, _) = raw(&b, reqwest::Method::GET, "/api/v1/kv/app/a%00b", None).await;
    assert_error_body(s, &e, 400, "kv_bad_key");
    // A surrogate code point encoded as bytes is not UTF-8.
    let (s, e, _) = raw(&b, reqwest::Method::GET, "/api/v1/kv/app/a%ED%A0%80", None).await;
    assert_error_body(s, &e, 400, "kv_bad_key");
    let (s, e, _) = raw(&b, reqwest::Method::PUT, "/api/v1/kv/app/k", Some("not json")).await;
    assert_error_body(s, &e, 400, "kv_bad_body");
}

// ---------------------------------------------------------------- sweeper & availability

#[tokio::test]
async fn the_sweeper_prunes_expired_rows_and_never_removes_live_ones() {
    let b = TestBroker::start().await;
    let options =
        EngineOptions { kv_sweep_interval: Some(Duration::from_millis(100)), ..EngineOptions::default() };
    let sweeper = Engine::connect(&db_config(&b.db), options).expect("engine");
    let mut ops: Vec<Value> = (0..20).map(|i| put_ttl("sw", &format!("dead:{i}"), json!(i), 1)).collect();
    ops.extend((0..5).map(|i| put("sw", &format!("live:{i}"), json!(i))));
    ops.extend((0..5).map(|i| put_ttl("sw", &format!("ttl:{i}"), json!(i), 3600)));
    ok(&b, Value::Array(ops)).await;
    let sql = b.sql().await;
    let sql = &sql;
    let dead = move || async move {
        let n: i64 = sql
            .query_one("SELECT count(*) FROM queen.kv WHERE ns = 'sw' AND key LIKE 'dead:%'", &[])
            .await
            .unwrap()
            .get(0);
        n
    };
    assert_eq!(dead().await, 20);
    // The rule is about time: poll until the rows are gone (at most 15 s).
    let started = std::time::Instant::now();
    while dead().await > 0 {
        assert!(started.elapsed() < Duration::from_secs(15), "the sweeper never pruned the expired rows");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(sweeper.kv_rows_pruned() >= 20, "pruned {}", sweeper.kv_rows_pruned());
    // Let it run a few more rounds over the live rows.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(physical_rows(&b, "sw").await, 10, "live rows are never pruned");
    let r = one(&b, json!({"op": "getPrefix", "ns": "sw", "prefix": "live:"})).await;
    assert_eq!(row_keys(&r).len(), 5);
    sweeper.close();
}

#[tokio::test]
async fn a_database_that_is_down_answers_503_kv_unavailable_with_retry_after() {
    let db = queen_engine::DbConfig {
        url: Some("postgres://postgres@127.0.0.1:1/nothing".into()),
        pool_size: 1,
        ..queen_engine::DbConfig::default()
    };
    let options = EngineOptions { kv_sweep_interval: None, ..EngineOptions::default() };
    let engine = Arc::new(Engine::connect(&db, options).expect("engine"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(queen_server::serve(listener, engine, queen_server::ServerConfig::default(), async move {
        let _ = stopped.await;
    }));
    let resp = reqwest::Client::new()
        .post(format!("{base}{KV}"))
        .json(&json!({"operations": [get(NS, "k")]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned()), Some("1".into()));
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"], "kv_unavailable");
    assert!(body.get("code").is_none());
    let _ = stop.send(());
}

/// Every KV element has one writer (`queen_wire::KvResult`), whichever
/// path answered it: an op alone (typed columns or its batcher), inside a
/// call of several (`queen.kv_apply`), or in a transaction's `kv` rider.
/// Each op here reads or is refused, so repeating it changes nothing, and
/// the three answers must agree field for field (presence included).
#[tokio::test]
async fn each_op_answers_the_same_element_alone_in_a_call_of_several_and_in_a_transaction() {
    let b = TestBroker::start().await;
    ok(
        &b,
        json!([
            put(NS, "a", json!({"x": 1})),
            put_ttl(NS, "b", json!(2), 3600),
            put(NS, "s:1", json!("one")),
            put(NS, "s:2", Value::Null),
            put(NS, "s:3", json!(3)),
            put(NS, "w1", json!(1)),
            put(NS, "w2", json!(2)),
            put(NS, "w3", json!(3)),
            put(NS, "n", json!("not a number")),
        ]),
    )
    .await;
    let w3 = read(&b, NS, "w3").await["version"].clone();
    let reads_and_refusals = vec![
        get(NS, "a"),
        get(NS, "b"),
        get(NS, "nope"),
        json!({"op": "getMany", "ns": NS, "keys": ["a", "nope", "b"]}),
        json!({"op": "put", "ns": NS, "key": "c", "value": 1, "forever": true, "expect": 999_999}),
        json!({"op": "putIfAbsent", "ns": NS, "key": "w1", "value": 9, "forever": true}),
        json!({"op": "delete", "ns": NS, "key": "gone"}),
        json!({"op": "check", "ns": NS, "key": "w2", "expect": 0}),
        json!({"op": "check", "ns": NS, "key": "w3", "expect": w3}),
        json!({"op": "incr", "ns": NS, "key": "n", "delta": 1, "forever": true}),
    ];
    // getPrefix is not allowed in a transaction: alone and in a call only.
    let pages = vec![
        json!({"op": "getPrefix", "ns": NS, "prefix": "s:", "limit": 2}),
        json!({"op": "getPrefix", "ns": NS, "prefix": "s:", "after": "s:2", "keysOnly": true}),
    ];
    let strip = |mut e: Value| {
        let o = e.as_object_mut().expect("an element is an object");
        o.remove("index");
        o.remove("type");
        e
    };
    let all: Vec<Value> = reads_and_refusals.iter().chain(&pages).cloned().collect();
    let together = ok(&b, json!(all)).await;
    let (status, tx) =
        b.post("/api/v1/transaction", &json!({"operations": [], "kv": reads_and_refusals})).await;
    assert_eq!(status, 200, "{tx}");
    assert_eq!(tx["success"], json!(true), "{tx}");
    let in_tx = tx["results"].as_array().expect("results").clone();
    assert_eq!(in_tx.len(), reads_and_refusals.len(), "{tx}");
    for (i, op) in all.iter().enumerate() {
        let alone = one(&b, op.clone()).await;
        assert_eq!(strip(together[i].clone()), strip(alone.clone()), "op {i} in a call of several: {op}");
        if let Some(t) = in_tx.get(i) {
            assert_eq!((&t["index"], &t["op"], &t["type"]), (&json!(i), &op["op"], &json!("kv")), "{t}");
            assert_eq!(strip(t.clone()), strip(alone), "op {i} in a transaction: {op}");
        }
    }
    // What the element carries, where presence follows the op.
    assert_eq!(together[0].get("expiresAt"), Some(&Value::Null), "a forever row writes expiresAt null");
    assert_eq!(together[10].get("nextAfter"), Some(&json!("s:2")), "{}", together[10]);
    assert_eq!(together[11].get("nextAfter"), Some(&Value::Null), "the last page writes nextAfter null");
    assert_eq!(together[3]["rows"][0].get("expiresAt"), Some(&Value::Null), "a row writes expiresAt null");
    assert!(together[11]["rows"][0].get("value").is_none(), "keysOnly rows carry no value");
    assert!(together[8].get("value").is_none(), "an applied check answers no value");
}

/// A lost `required` precondition is answered by the engine from the facts
/// SQL raised: the same body whether the op ran alone or in a call of several.
#[tokio::test]
async fn a_lost_precondition_answers_the_same_body_alone_and_in_a_call_of_several() {
    let b = TestBroker::start().await;
    let w = one(&b, put(NS, "k", json!({"v": 1}))).await;
    let lose =
        json!({"op": "putIfAbsent", "ns": NS, "key": "k", "value": 2, "forever": true, "required": true});
    let (s1, alone) = call(&b, json!([lose])).await;
    let (s2, several) = call(&b, json!([get(NS, "other"), lose])).await;
    assert_eq!((s1, s2), (200, 200));
    let want = json!({"ok": false, "reason": "kv_precondition", "failedIndex": 0, "kvReason": "exists",
                      "key": "k", "version": w["version"], "value": {"v": 1}});
    assert_eq!(alone, want);
    let mut want = want;
    want["failedIndex"] = json!(1);
    assert_eq!(several, want);
}
