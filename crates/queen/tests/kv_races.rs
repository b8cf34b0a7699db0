//! Concurrent KV writers over HTTP: putIfAbsent, incr with max, and expect
//! chains keep their guarantees under real races, on one broker and on two
//! brokers sharing a database.
mod common;
#[path = "common/kv.rs"]
mod kvh;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::TestBroker;
use kvh::*;
use serde_json::{json, Value};
use tokio::sync::Barrier;

/// POSTs one op to `url`; answers its result element (asserting 200).
async fn post_one(http: &reqwest::Client, url: &str, op: Value) -> Value {
    let resp = http.post(url).json(&json!({ "operations": [op] })).send().await.expect("request");
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.expect("JSON");
    assert_eq!(status, 200, "no 5xx, no 4xx under a race: {body}");
    body["results"][0].clone()
}

/// Runs `n` racing putIfAbsent calls, task `i` on `urls[i % urls.len()]`.
async fn put_if_absent_race(urls: Vec<String>, http: reqwest::Client, n: usize) -> Vec<(usize, Value)> {
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for i in 0..n {
        let (http, url, barrier) = (http.clone(), urls[i % urls.len()].clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let op = json!({"op": "putIfAbsent", "ns": "race", "key": "once", "value": {"by": i}, "ttlSeconds": 600});
            (i, post_one(&http, &url, op).await)
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}

fn assert_one_winner(results: &[(usize, Value)]) -> Value {
    let winners: Vec<&(usize, Value)> = results.iter().filter(|(_, r)| r["applied"] == json!(true)).collect();
    assert_eq!(winners.len(), 1, "exactly one putIfAbsent applies: {results:?}");
    let (who, w) = winners[0];
    assert_eq!(w["value"], json!({"by": who}));
    for (_, r) in results.iter().filter(|(_, r)| r["applied"] != json!(true)) {
        assert_eq!(r["applied"], json!(false));
        assert_eq!(r["reason"], "exists", "{r}");
        assert_eq!(r["value"], w["value"], "every loser sees the winner's value");
        assert_eq!(r["version"], w["version"], "and the winner's version");
    }
    w.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_put_if_absent_has_exactly_one_winner_and_every_loser_sees_it() {
    let b = TestBroker::start().await;
    let results = put_if_absent_race(vec![b.url(KV)], b.http.clone(), 32).await;
    let w = assert_one_winner(&results);
    let r = read(&b, "race", "once").await;
    assert_eq!(r["value"], w["value"]);
    assert_eq!(r["version"], w["version"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_put_if_absent_across_two_brokers_on_one_database_has_one_winner() {
    let b = TestBroker::start().await;
    let b2 = TestBroker::on(&b.db).await;
    let results = put_if_absent_race(vec![b.url(KV), b2.url(KV)], b.http.clone(), 32).await;
    let w = assert_one_winner(&results);
    assert_eq!(read(&b2, "race", "once").await["version"], w["version"]);
    assert_eq!(read(&b, "race", "once").await["value"], w["value"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_incr_with_max_50_admits_exactly_50_and_ends_at_50() {
    let b = TestBroker::start().await;
    let n = 160;
    let barrier = Arc::new(Barrier::new(n));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (http, url, barrier) = (b.http.clone(), b.url(KV), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let op = json!({"op": "incr", "ns": "race", "key": "quota", "delta": 1, "max": 50, "ttlSeconds": 3600});
            post_one(&http, &url, op).await
        }));
    }
    let mut applied = Vec::new();
    let mut refused = 0;
    for t in tasks {
        let r = t.await.expect("task");
        if r["applied"] == json!(true) {
            applied.push(r["value"].as_i64().unwrap());
        } else {
            assert_eq!(r["reason"], "limit", "{r}");
            assert_eq!(r["value"], json!(50), "a refused incr answers the current number");
            refused += 1;
        }
    }
    applied.sort();
    assert_eq!(applied, (1..=50).collect::<Vec<i64>>(), "each admitted incr saw a distinct count");
    assert_eq!(refused, n - 50);
    assert_eq!(read(&b, "race", "quota").await["value"], json!(50));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_expect_writers_form_one_linear_chain_of_versions() {
    let b = TestBroker::start().await;
    let seed = one(&b, put("race", "chain", json!({"n": 0}))).await;
    let v0 = seed["version"].as_i64().unwrap();
    let target = 20;
    let successes = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(16));
    let mut tasks = Vec::new();
    for t in 0..16usize {
        let (http, url, barrier, successes) = (b.http.clone(), b.url(KV), barrier.clone(), successes.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut mine: Vec<(i64, i64, i64)> = Vec::new();
            let mut losses = 0usize;
            while successes.load(Ordering::SeqCst) < target {
                let cur = post_one(&http, &url, json!({"op": "get", "ns": "race", "key": "chain"})).await;
                let version = cur["version"].as_i64().unwrap();
                let n = cur["value"]["n"].as_i64().unwrap();
                let op = json!({"op": "put", "ns": "race", "key": "chain", "value": {"n": n + 1, "by": t},
                                "forever": true, "expect": version});
                let r = post_one(&http, &url, op).await;
                if r["applied"] == json!(true) {
                    successes.fetch_add(1, Ordering::SeqCst);
                    mine.push((version, r["version"].as_i64().unwrap(), n + 1));
                } else {
                    assert_eq!(r["reason"], "version", "{r}");
                    assert!(r["version"].as_i64().unwrap() > version, "the loser sees the newer version");
                    assert!(r["value"]["n"].as_i64().unwrap() > n);
                    losses += 1;
                }
            }
            (mine, losses)
        }));
    }
    let mut chain: Vec<(i64, i64, i64)> = Vec::new();
    for t in tasks {
        let (mine, _) = t.await.expect("task");
        chain.extend(mine);
    }
    assert!(chain.len() >= target, "{} successes", chain.len());
    chain.sort_by_key(|(_, new, _)| *new);
    let mut expects: Vec<i64> = chain.iter().map(|(e, _, _)| *e).collect();
    expects.sort();
    expects.dedup();
    assert_eq!(expects.len(), chain.len(), "no two applied writes share an expect");
    let mut prev = v0;
    for (i, (expect, new, n)) in chain.iter().enumerate() {
        assert_eq!(*expect, prev, "write {i} expected the previous applied version");
        assert!(*new > *expect);
        assert_eq!(*n, i as i64 + 1, "no lost update");
        prev = *new;
    }
    let last = read(&b, "race", "chain").await;
    assert_eq!(last["version"], json!(prev));
    assert_eq!(last["value"]["n"], json!(chain.len()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_put_if_absent_over_an_expired_unpruned_row_has_exactly_one_winner() {
    let b = TestBroker::start().await;
    let old =
        one(&b, json!({"op": "put", "ns": "race", "key": "once", "value": "stale", "ttlSeconds": 1})).await;
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let results = put_if_absent_race(vec![b.url(KV)], b.http.clone(), 32).await;
    let w = assert_one_winner(&results);
    assert!(w["version"].as_i64().unwrap() > old["version"].as_i64().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_unconditional_puts_never_move_a_keys_version_backwards() {
    let b = TestBroker::start().await;
    let barrier = Arc::new(Barrier::new(16));
    let mut tasks = Vec::new();
    for t in 0..16usize {
        let (http, url, barrier) = (b.http.clone(), b.url(KV), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut mine = Vec::new();
            for i in 0..40 {
                let op = json!({"op": "put", "ns": "race", "key": "hot", "value": {"t": t, "i": i}, "forever": true});
                let w = post_one(&http, &url, op).await;
                let v = w["version"].as_i64().unwrap();
                // Anything committed after my write carries a higher version.
                let r = post_one(&http, &url, json!({"op": "get", "ns": "race", "key": "hot"})).await;
                assert!(r["version"].as_i64().unwrap() >= v, "version went backwards: wrote {v}, then read {r}");
                mine.push(v);
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    let max = all.iter().max().copied().unwrap();
    assert_eq!(
        read(&b, "race", "hot").await["version"],
        json!(max),
        "the last write holds the highest version"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_and_deleters_never_rewrite_a_key_with_a_lower_version() {
    let b = TestBroker::start().await;
    let barrier = Arc::new(Barrier::new(16));
    let mut tasks = Vec::new();
    for t in 0..16usize {
        let (http, url, barrier) = (b.http.clone(), b.url(KV), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut seen = 0i64;
            for i in 0..40 {
                let op = match (t + i) % 4 {
                    0 => json!({"op": "delete", "ns": "race", "key": "lock"}),
                    1 => json!({"op": "putIfAbsent", "ns": "race", "key": "lock", "value": {"owner": t}, "ttlSeconds": 60}),
                    2 => json!({"op": "incr", "ns": "race", "key": "lock", "ttlSeconds": 60}),
                    _ => json!({"op": "put", "ns": "race", "key": "lock", "value": 1, "forever": true}),
                };
                let w = post_one(&http, &url, op).await;
                if w["applied"] == json!(true) && !w["op"].as_str().unwrap().starts_with("delete") {
                    let v = w["version"].as_i64().unwrap();
                    assert!(v > seen, "a write after seeing {seen} got {v}");
                    seen = v;
                }
                let r = post_one(&http, &url, json!({"op": "get", "ns": "race", "key": "lock"})).await;
                if r["found"] == json!(true) {
                    let v = r["version"].as_i64().unwrap();
                    assert!(v >= seen, "read version {v} after seeing {seen}: {r}");
                    seen = v;
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
}
