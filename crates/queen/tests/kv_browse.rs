//! The KV browser over real HTTP: `GET /api/v1/resources/kv/namespaces` and
//! `POST /api/v1/resources/kv/list` (keyset pages, expired-but-unswept rows
//! labelled, bounded by a limit and a byte ceiling), their 400s, a read-only
//! token, and the SDK and embedded calls.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::TestBroker;
use queen_client::{HttpConfig, Queen};
use queen_engine::EngineOptions;
use queen_server::{AuthConfig, Role, ServerConfig};
use serde_json::{json, Value};

async fn put(b: &TestBroker, ns: &str, key: &str, value: Value) {
    let op = json!({"op": "put", "ns": ns, "key": key, "value": value, "forever": true});
    let (status, body) = b.post("/api/v1/kv", &json!({"operations": [op]})).await;
    assert_eq!((status, &body["results"][0]["applied"]), (200, &json!(true)), "{body}");
}

/// Makes a row expired without waiting: the sweeper has not deleted it yet.
async fn expire(b: &TestBroker, ns: &str, key: &str) {
    let sql = b.sql().await;
    let n = sql
        .execute(
            "UPDATE queen.kv SET expires_at = now() - interval '1 second' WHERE ns = $1 AND key = $2",
            &[&ns, &key],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
}

async fn list(b: &TestBroker, body: Value) -> Value {
    let (status, answer) = b.post("/api/v1/resources/kv/list", &body).await;
    assert_eq!(status, 200, "{body} -> {answer}");
    answer
}

fn keys(page: &Value) -> Vec<String> {
    page["keys"].as_array().unwrap().iter().map(|k| k["key"].as_str().unwrap().to_owned()).collect()
}

fn assert_kv_400(status: u16, body: &Value, reason: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"], "kv_bad_request", "{body}");
    assert_eq!(body["reason"], reason, "{body}");
}

#[tokio::test]
async fn namespaces_lists_every_namespace_with_live_and_expired_counts() {
    let b = TestBroker::start().await;
    let (status, empty) = b.get("/api/v1/resources/kv/namespaces").await;
    assert_eq!((status, empty), (200, json!({"namespaces": []})));
    for i in 0..3 {
        put(&b, "alpha", &format!("k{i}"), json!(i)).await;
    }
    put(&b, "beta", "only", json!("x")).await;
    put(&b, "gone", "dead", json!(null)).await;
    expire(&b, "alpha", "k1").await;
    expire(&b, "gone", "dead").await;
    let (status, body) = b.get("/api/v1/resources/kv/namespaces").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"namespaces": [
            {"namespace": "alpha", "keys": 2, "expired": 1},
            {"namespace": "beta", "keys": 1, "expired": 0},
            {"namespace": "gone", "keys": 0, "expired": 1},
        ]})
    );
}

#[tokio::test]
async fn list_walks_every_key_in_byte_order_with_get_fields_and_labels_expired_rows() {
    let b = TestBroker::start().await;
    let mut all: Vec<String> = (0..250).map(|i| format!("user:{i:04}")).collect();
    for k in &all {
        put(&b, "app", k, json!({"k": k})).await;
    }
    put(&b, "app", "other", json!(1)).await;
    put(&b, "elsewhere", "user:0000", json!(2)).await;
    expire(&b, "app", "user:0007").await;

    let first = list(&b, json!({"namespace": "app", "prefix": "user:", "limit": 100})).await;
    assert_eq!(first["namespace"], "app");
    assert_eq!(keys(&first), all[..100]);
    assert_eq!(first["nextCursor"], "user:0099");
    let row = &first["keys"][3];
    let get = b
        .post("/api/v1/kv", &json!({"operations": [{"op": "get", "ns": "app", "key": "user:0003"}]}))
        .await
        .1["results"][0]
        .clone();
    for field in ["key", "value", "version", "expiresAt", "updatedAt"] {
        assert_eq!(row[field], get[field], "{field}: {row} vs {get}");
    }
    assert_eq!(row["expired"], false);
    let expired = &first["keys"][7];
    assert_eq!(
        (expired["key"].as_str(), &expired["expired"]),
        (Some("user:0007"), &json!(true)),
        "{expired}"
    );
    assert!(expired["expiresAt"].is_string());

    let mut walked = keys(&first);
    let mut cursor = first["nextCursor"].clone();
    while !cursor.is_null() {
        let page =
            list(&b, json!({"namespace": "app", "prefix": "user:", "cursor": cursor, "limit": 100})).await;
        walked.extend(keys(&page));
        cursor = page["nextCursor"].clone();
    }
    assert_eq!(walked, all);

    // An empty prefix is every key; the default limit is 100; the last page has no cursor.
    all.push("other".into());
    all.sort();
    assert_eq!(keys(&list(&b, json!({"namespace": "app", "limit": 2})).await), ["other", "user:0000"]);
    let page = list(&b, json!({"namespace": "app", "prefix": "", "cursor": "user:0200"})).await;
    assert_eq!(keys(&page), all[202..]);
    assert_eq!(page["nextCursor"], Value::Null);
    let page = list(&b, json!({"namespace": "app"})).await;
    assert_eq!(keys(&page).len(), 100);
    // A limit above 1000 is clamped, not refused; an unknown namespace is an empty page.
    let page = list(&b, json!({"namespace": "app", "limit": 100000})).await;
    assert_eq!((keys(&page).len(), &page["nextCursor"]), (251, &Value::Null));
    let page = list(&b, json!({"namespace": "nobody"})).await;
    assert_eq!(page, json!({"namespace": "nobody", "keys": [], "nextCursor": null}));
}

#[tokio::test]
async fn a_page_stops_at_the_byte_ceiling_but_always_holds_one_row() {
    let b =
        TestBroker::start_with_options(EngineOptions { kv_max_read_bytes: 1000, ..EngineOptions::default() })
            .await;
    let big = "x".repeat(300);
    for i in 0..10 {
        put(&b, "big", &format!("k{i}"), json!(big)).await;
    }
    put(&b, "big", "z-huge", json!("y".repeat(5000))).await;
    let page = list(&b, json!({"namespace": "big", "limit": 1000})).await;
    assert_eq!(keys(&page), ["k0", "k1", "k2"], "3 rows of ~306 bytes fit in 1000");
    assert_eq!(page["nextCursor"], "k2");
    let page = list(&b, json!({"namespace": "big", "cursor": "k9"})).await;
    assert_eq!(keys(&page), ["z-huge"], "a row larger than the ceiling still comes alone");
    assert_eq!(page["nextCursor"], Value::Null);
}

#[tokio::test]
async fn bad_input_and_query_strings_are_400_with_a_reason() {
    let b = TestBroker::start().await;
    put(&b, "app", "k", json!(1)).await;
    let cases = [
        (json!({}), "kv_bad_namespace"),
        (json!({"namespace": "Not Valid"}), "kv_bad_namespace"),
        (json!({"namespace": 5}), "kv_bad_namespace"),
        (json!({"namespace": "app", "cursor": 5}), "kv_bad_cursor"),
        (json!({"namespace": "app", "cursor": {"k": 1}}), "kv_bad_cursor"),
        (json!({"namespace": "app", "prefix": ["a"]}), "kv_bad_prefix"),
        (json!({"namespace": "app", "limit": 0}), "kv_bad_limit"),
        (json!({"namespace": "app", "limit": -3}), "kv_bad_limit"),
        (json!({"namespace": "app", "limit": "10"}), "kv_bad_limit"),
        (json!({"namespace": "app", "limit": 2.5}), "kv_bad_limit"),
        (json!({"namespace": "app", "after": "k"}), "kv_bad_body"),
        (json!(["app"]), "kv_bad_body"),
    ];
    for (body, reason) in cases {
        let (status, answer) = b.post("/api/v1/resources/kv/list", &body).await;
        assert_kv_400(status, &answer, reason);
    }
    let (status, answer) = b.post_raw("/api/v1/resources/kv/list", "not json").await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = b
        .post("/api/v1/resources/kv/list?namespace=app&cursor=secret-key", &json!({"namespace": "app"}))
        .await;
    assert_kv_400(status, &answer, "kv_no_query_string");
    let (status, answer) = b.get("/api/v1/resources/kv/namespaces?x=1").await;
    assert_kv_400(status, &answer, "kv_no_query_string");
    let (status, _) = b.post("/api/v1/resources/kv/namespaces", &json!({})).await;
    assert_eq!(status, 405);
    // Nothing was written by any of them.
    assert_eq!(b.scalar("SELECT count(*) FROM queen.kv").await, 1);
}

#[tokio::test]
async fn a_read_only_token_may_browse_and_no_token_may_not() {
    let auth = AuthConfig::default().with_token("reader-token-0123", Role::ReadOnly).unwrap();
    let b = TestBroker::start_with(ServerConfig { auth, ..ServerConfig::default() }).await;
    b.engine
        .kv(r#"{"operations": [{"op": "put", "ns": "app", "key": "k", "value": 1, "forever": true}]}"#)
        .await
        .unwrap();
    let reader = |req: reqwest::RequestBuilder| req.bearer_auth("reader-token-0123");
    let r = reader(b.http.get(b.url("/api/v1/resources/kv/namespaces"))).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = reader(b.http.post(b.url("/api/v1/resources/kv/list")))
        .json(&json!({"namespace": "app"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(keys(&r.json::<Value>().await.unwrap()), ["k"]);
    let r = b
        .http
        .post(b.url("/api/v1/resources/kv/list"))
        .json(&json!({"namespace": "app"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = b.http.get(b.url("/api/v1/resources/kv/namespaces")).send().await.unwrap();
    assert_eq!(r.status(), 401);
}

#[tokio::test]
async fn the_sdk_browses_over_http_and_embedded_alike() {
    let b = TestBroker::start().await;
    for k in ["a1", "a2", "a3", "b1"] {
        put(&b, "sdk", k, json!({"k": k})).await;
    }
    expire(&b, "sdk", "a2").await;
    browse(&Queen::http(HttpConfig::new(b.base.clone())).unwrap().kv()).await;
    browse(&Queen::embedded(b.engine.clone()).kv()).await;
}

async fn browse<B: queen_client::Broker>(kv: &queen_client::Kv<B>) {
    let namespaces = kv.namespaces().await.unwrap();
    assert_eq!(namespaces.len(), 1);
    assert_eq!((namespaces[0].namespace.as_str(), namespaces[0].keys, namespaces[0].expired), ("sdk", 3, 1));
    let page = kv.list("sdk", "a", None, Some(2)).await.unwrap();
    let got: Vec<(&str, bool)> = page.keys.iter().map(|k| (k.key.as_str(), k.expired)).collect();
    assert_eq!(got, [("a1", false), ("a2", true)]);
    assert_eq!(page.keys[0].json::<Value>().unwrap(), json!({"k": "a1"}));
    assert_eq!(page.next_cursor.as_deref(), Some("a2"));
    let page = kv.list("sdk", "a", page.next_cursor.as_deref(), Some(2)).await.unwrap();
    assert_eq!(page.keys.iter().map(|k| k.key.as_str()).collect::<Vec<_>>(), ["a3"]);
    assert_eq!(page.next_cursor, None);
    assert!(kv.list("Bad NS", "", None, None).await.is_err());
}

/// A page whole, as the engine writes it from `queen.kv_list`'s rows: each
/// key with its value text, version, times and `expired`, and the cursor.
#[tokio::test]
async fn a_page_answers_every_field_of_every_key() {
    let b = TestBroker::start().await;
    put(&b, "whole", "a", json!({"n": 1.50})).await;
    put(&b, "whole", "b", json!([1, "x"])).await;
    put(&b, "whole", "c", json!(null)).await;
    expire(&b, "whole", "b").await;
    let sql = b.sql().await;
    let times = |key: &'static str| {
        let sql = &sql;
        async move {
            let row = sql
                .query_one(
                    "SELECT version, queen.iso(expires_at), queen.iso(updated_at) FROM queen.kv WHERE ns = 'whole' AND key = $1",
                    &[&key],
                )
                .await
                .unwrap();
            (row.get::<_, i64>(0), row.get::<_, Option<String>>(1), row.get::<_, String>(2))
        }
    };
    let ((va, ea, ua), (vb, eb, ub)) = (times("a").await, times("b").await);
    let page = list(&b, json!({"namespace": "whole", "limit": 2})).await;
    let want = json!({"namespace": "whole", "nextCursor": "b", "keys": [
        {"key": "a", "value": {"n": 1.50}, "version": va, "expiresAt": ea, "updatedAt": ua, "expired": false},
        {"key": "b", "value": [1, "x"], "version": vb, "expiresAt": eb, "updatedAt": ub, "expired": true},
    ]});
    assert_eq!(page, want);
    let rest = list(&b, json!({"namespace": "whole", "cursor": "b"})).await;
    assert_eq!(rest["keys"][0]["value"], Value::Null);
    assert_eq!((keys(&rest), &rest["nextCursor"]), (vec!["c".to_owned()], &Value::Null));
}
