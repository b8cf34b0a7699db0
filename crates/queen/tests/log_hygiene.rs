//! Secrets hygiene (issue 8): KV keys, values, prefixes, namespaces and
//! message payloads never reach the broker's logs, at any verbosity. A real
//! `queen serve` runs with verbose JSON logs captured to a file; the test
//! drives every KV path (batch route, path routes, transactions), succeeding
//! and failing (bad request, too large, precondition lost, rolled back), with
//! a unique sentinel string in every secret position, then checks that no
//! sentinel appears anywhere in what the broker wrote.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{Api, BrokerProcess, ServeSpec, TestDb};
use serde_json::{json, Value};

/// Unique, lowercase (valid as a namespace), and never produced by chance.
struct Sentinels(Vec<String>);

impl Sentinels {
    fn mint(&mut self, tag: &str) -> String {
        let s = format!("zq{tag}{}", &uuid::Uuid::new_v4().simple().to_string()[..20]);
        self.0.push(s.clone());
        s
    }
}

async fn raw(api: &Api, method: reqwest::Method, path: &str, body: Option<&str>) -> (u16, Value) {
    let mut req = api.http.request(method, api.url(path));
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b.to_owned());
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Drives every KV path with sentinels; answers them and the number of requests.
async fn drive(api: &Api) -> (Sentinels, usize) {
    let mut s = Sentinels(Vec::new());
    let mut requests = 0usize;
    let ns = s.mint("ns");
    let (k1, v1, k2, k3, k4) = (s.mint("key"), s.mint("val"), s.mint("key"), s.mint("key"), s.mint("key"));
    let (prefix, after) = (s.mint("pfx"), s.mint("aft"));
    let mut kv = |ops: Value| {
        requests += 1;
        let api = api.clone();
        async move { api.post("/api/v1/kv", &json!({ "operations": ops })).await }
    };

    // The batch route: every op, applied and not.
    let (st, r) = kv(json!([
        {"op": "put", "ns": ns, "key": k1, "value": {"secret": v1}, "forever": true},
        {"op": "put", "ns": ns, "key": format!("{prefix}/a"), "value": v1, "ttlSeconds": 600},
        {"op": "incr", "ns": ns, "key": k3, "delta": 7, "max": 100, "ttlSeconds": 600},
    ]))
    .await;
    assert_eq!(st, 200, "{r}");
    let version = r["results"][0]["version"].clone();
    let (st, r) = kv(json!([
        {"op": "get", "ns": ns, "key": k1},
        {"op": "getMany", "ns": ns, "keys": [k1, k2]},
        {"op": "getPrefix", "ns": ns, "prefix": prefix},
        {"op": "getPrefix", "ns": ns, "prefix": prefix, "after": after, "keysOnly": true},
        {"op": "putIfAbsent", "ns": ns, "key": k1, "value": s.mint("val"), "ttlSeconds": 60},
        {"op": "put", "ns": ns, "key": k2, "value": s.mint("val"), "forever": true, "expect": 999_999_999},
        {"op": "delete", "ns": ns, "key": k4},
        {"op": "incr", "ns": ns, "key": k3, "delta": 1000, "max": 100, "ttlSeconds": 600},
    ]))
    .await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["results"][4]["reason"], "exists", "{r}");
    let (st, r) = kv(json!([{"op": "check", "ns": ns, "key": k1, "expect": version}])).await;
    assert_eq!(st, 200, "{r}");
    // A lost `required` precondition on the batch route.
    let (st, r) = kv(json!([{"op": "putIfAbsent", "ns": ns, "key": k1, "value": s.mint("val"),
                              "ttlSeconds": 60, "required": true}]))
    .await;
    assert_eq!((st, &r["reason"]), (200, &json!("kv_precondition")), "{r}");
    // Bad requests of every kind.
    for ops in [
        json!([{"op": "put", "ns": ns, "key": s.mint("key"), "value": s.mint("val")}]),
        json!([{"op": "put", "ns": s.mint("ns").to_uppercase(), "key": s.mint("key"), "value": 1, "forever": true}]),
        json!([{"op": "merge", "ns": ns, "key": s.mint("key"), "value": s.mint("val")}]),
        json!([{"op": "getPrefix", "ns": ns, "prefix": ""}, {"op": "get", "ns": ns, "key": s.mint("key")}]),
        json!([{"op": "put", "ns": ns, "key": format!("{}\u{0}", s.mint("key")), "value": 1, "forever": true}]),
        json!([{"op": "put", "ns": ns, "key": s.mint("key"), "value": s.mint("val").repeat(3000), "forever": true}]),
        json!([{"op": "get", "ns": ns, "key": s.mint("key").repeat(30)}]),
        json!([{"op": "put", "ns": ns, "key": k1, "value": 1, "forever": true},
               {"op": "delete", "ns": ns, "key": k1}]),
    ] {
        let (st, r) = kv(ops).await;
        assert!((400..500).contains(&st), "{st} {r}");
    }
    let (st, _) =
        api.post_raw("/api/v1/kv", format!("{{\"operations\": [{{\"key\": \"{}\"", s.mint("key"))).await;
    requests += 1;
    assert_eq!(st, 400);

    // Path routes.
    let (k5, v5) = (s.mint("key"), s.mint("val"));
    let body = format!(r#"{{"value": "{v5}", "forever": true}}"#);
    for (method, path, body, want) in [
        (reqwest::Method::PUT, format!("/api/v1/kv/{ns}/{k5}/x"), Some(body.clone()), 200),
        (reqwest::Method::GET, format!("/api/v1/kv/{ns}/{k5}/x"), None, 200),
        (reqwest::Method::DELETE, format!("/api/v1/kv/{ns}/{k5}/x"), None, 200),
        (reqwest::Method::GET, format!("/api/v1/kv/{ns}/{}", s.mint("key")), None, 200),
        (reqwest::Method::GET, format!("/api/v1/kv/{ns}/k?prefix={}", s.mint("pfx")), None, 400),
        (reqwest::Method::GET, format!("/api/v1/kv/{ns}/{}%FF", s.mint("key")), None, 400),
        (reqwest::Method::GET, format!("/api/v1/kv/{}/k", s.mint("ns").to_uppercase()), None, 400),
        (
            reqwest::Method::PUT,
            format!("/api/v1/kv/{ns}/{}", s.mint("key")),
            Some(format!(r#"{{"value": "{}"}}"#, s.mint("val"))),
            400,
        ),
        (
            reqwest::Method::PUT,
            format!("/api/v1/kv/{ns}/{}", s.mint("key")),
            Some(format!(r#"{{"key": "{}"}}"#, s.mint("key"))),
            400,
        ),
        (
            reqwest::Method::PUT,
            format!("/api/v1/kv/{ns}/{}", s.mint("key")),
            Some(format!("not json {}", s.mint("val"))),
            400,
        ),
        (
            reqwest::Method::PUT,
            format!("/api/v1/kv/{ns}/{k1}"),
            Some(format!(
                r#"{{"value": "{}", "forever": true, "expect": 0, "required": true}}"#,
                s.mint("val")
            )),
            200,
        ),
        (reqwest::Method::GET, format!("/api/v1/kvx/{}", s.mint("key")), None, 404),
    ] {
        let (st, r) = raw(api, method.clone(), &path, body.as_deref()).await;
        requests += 1;
        assert_eq!(st, want, "{method} {path}: {r}");
    }

    // Transactions: a push + KV write that commits, a once + ack that loses
    // its precondition, an ack with a stale lease that rolls back, and
    // refused bundles.
    let (payload, txid) = (s.mint("payload"), s.mint("txid"));
    let queue = s.mint("queue");
    let (k6, v6) = (s.mint("key"), s.mint("val"));
    let (st, r) = api
        .post(
            "/api/v1/transaction",
            &json!({"operations": [{"type": "push", "items": [{"queue": queue, "partition": s.mint("part"),
                                     "transactionId": txid, "payload": {"secret": payload}}]}],
                    "kv": [{"op": "put", "ns": ns, "key": k6, "value": v6, "forever": true},
                           {"op": "get", "ns": ns, "key": k1}]}),
        )
        .await;
    requests += 1;
    assert_eq!((st, &r["success"]), (200, &json!(true)), "{r}");
    let popped = api.pop_some(&queue, "batch=1");
    let popped = popped.await;
    requests += 1;
    let m = &popped["messages"][0];
    let ack = json!({"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"],
                     "leaseId": m["leaseId"], "status": "completed"});
    let (st, r) = api
        .post(
            "/api/v1/transaction",
            &json!({"operations": [ack], "requiredLeases": [m["leaseId"]],
                    "kv": [{"op": "putIfAbsent", "ns": ns, "key": k1, "value": s.mint("val"),
                            "ttlSeconds": 60, "required": true}]}),
        )
        .await;
    requests += 1;
    assert_eq!((st, &r["reason"]), (200, &json!("kv_precondition")), "{r}");
    let stale = json!({"type": "ack", "transactionId": m["transactionId"], "partitionId": m["partitionId"],
                       "leaseId": "0190a3f0-0000-7000-8000-000000000000", "status": "completed"});
    let (st, r) = api
        .post(
            "/api/v1/transaction",
            &json!({"operations": [stale],
                    "kv": [{"op": "put", "ns": ns, "key": s.mint("key"), "value": s.mint("val"), "forever": true}]}),
        )
        .await;
    requests += 1;
    assert_eq!((st, &r["success"]), (200, &json!(false)), "{r}");
    for body in [
        json!({"operations": [], "kv": [{"op": "getPrefix", "ns": ns, "prefix": s.mint("pfx")}]}),
        json!({"operations": [], "kv": [{"op": "put", "ns": ns, "key": s.mint("key"), "value": s.mint("val")}]}),
        json!({"operations": [], "kv": [{"op": "put", "ns": ns, "key": format!("{}\u{0}", s.mint("key")),
                                          "value": s.mint("val"), "forever": true}]}),
        json!({"operations": [{"type": "push", "items": [{"queue": queue, "transactionId": txid,
                                                          "payload": s.mint("payload")}]}],
               "kv": [{"op": "put", "ns": ns, "key": s.mint("key"), "value": s.mint("val"), "forever": true}]}),
        json!({"operations": [{"type": "nope", "secret": s.mint("val")}]}),
    ] {
        let (st, r) = api.post("/api/v1/transaction", &body).await;
        requests += 1;
        assert!(st == 200 || (400..500).contains(&st), "{st} {r}");
    }
    (s, requests)
}

/// Runs a broker with `rust_log` and JSON logs, drives it, stops it, and
/// answers (captured log, sentinels, requests).
async fn capture(rust_log: &str) -> (String, Sentinels, usize) {
    let db = TestDb::create().await;
    let log = std::env::temp_dir().join(format!("queen-log-hygiene-{}.log", uuid::Uuid::new_v4().simple()));
    let mut spec = ServeSpec::for_db(&db.name).env("RUST_LOG", rust_log).env("QUEEN_LOG_FORMAT", "json");
    spec.log = Some(log.clone());
    let mut broker = BrokerProcess::spawn_with(&spec).await;
    let (sentinels, requests) = drive(&broker.api).await;
    broker.terminate();
    broker.wait_exit(Duration::from_secs(10)).await;
    let text = std::fs::read_to_string(&log).expect("read the captured log");
    let _ = std::fs::remove_file(&log);
    (text, sentinels, requests)
}

fn assert_clean(text: &str, sentinels: &Sentinels, requests: usize) {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    for l in &lines {
        assert!(serde_json::from_str::<Value>(l).is_ok(), "QUEEN_LOG_FORMAT=json writes JSON lines: {l}");
    }
    let finished = lines.iter().filter(|l| l.contains("finished processing request")).count();
    assert!(finished >= requests, "the log is verbose ({finished} request lines for {requests} requests)");
    let lower = text.to_lowercase();
    let leaked: Vec<(&String, String)> = sentinels
        .0
        .iter()
        .filter(|s| lower.contains(s.as_str()))
        .map(|s| {
            (
                s,
                lines
                    .iter()
                    .find(|l| l.to_lowercase().contains(s.as_str()))
                    .unwrap()
                    .chars()
                    .take(400)
                    .collect(),
            )
        })
        .collect();
    assert!(
        leaked.is_empty(),
        "{} of {} sentinels reached the log, e.g. {:?}",
        leaked.len(),
        sentinels.0.len(),
        leaked.first()
    );
    eprintln!(
        "log hygiene figures: {} log lines, {requests} requests, {} sentinels, 0 leaked",
        lines.len(),
        sentinels.0.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_kv_key_value_prefix_or_payload_reaches_the_logs_with_queen_crates_at_trace() {
    let (text, sentinels, requests) =
        capture("info,queen=trace,queen_engine=trace,queen_server=trace,tower_http=trace,axum=trace").await;
    assert_clean(&text, &sentinels, requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_kv_key_value_prefix_or_payload_reaches_the_logs_with_rust_log_debug() {
    let (text, sentinels, requests) = capture("debug").await;
    assert_clean(&text, &sentinels, requests);
}
