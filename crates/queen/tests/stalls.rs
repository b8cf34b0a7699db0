//! Bounded stalls: a row lock held by an outside session (a `psql` user, a
//! long transaction) fails the one call that needs it after the lock
//! timeout, with 503 + `Retry-After` and nothing written, while calls on
//! other keys and partitions keep answering.

mod common;

use std::time::{Duration, Instant};

use common::TestBroker;
use serde_json::{json, Value};

/// The lock timeout of these brokers: long enough that "promptly" is
/// clearly shorter, short enough for a test.
const LOCK_TIMEOUT: Duration = Duration::from_millis(2000);

/// A call on an unlocked row answers within this, a lock held elsewhere or not.
const PROMPT: Duration = Duration::from_millis(1000);

async fn broker() -> TestBroker {
    TestBroker::start_with_db(|db| db.lock_timeout = Some(LOCK_TIMEOUT)).await
}

/// An outside session holding row locks in an open transaction.
async fn hold(b: &TestBroker, lock: &str) -> tokio_postgres::Client {
    let client = b.sql().await;
    client.batch_execute("BEGIN").await.expect("begin");
    let rows = client.query(lock, &[]).await.expect("lock");
    assert_eq!(rows.len(), 1, "{lock} locked one row");
    client
}

/// POSTs `body` to `path`; answers (status, Retry-After, body, elapsed).
async fn timed_post(b: &TestBroker, path: &str, body: Value) -> (u16, Option<String>, Value, Duration) {
    let started = Instant::now();
    let resp = b.http.post(b.url(path)).json(&body).send().await.expect("send");
    let status = resp.status().as_u16();
    let retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    (status, retry_after, body, started.elapsed())
}

fn put(key: &str, value: i64) -> Value {
    json!({"operations": [{"op": "put", "ns": "stall", "key": key, "value": value, "forever": true}]})
}

#[tokio::test]
async fn a_kv_key_locked_elsewhere_fails_its_call_after_the_lock_timeout_and_other_keys_keep_answering() {
    let b = broker().await;
    assert_eq!(b.post("/api/v1/kv", &put("held", 1)).await.0, 200);
    let locker = hold(&b, "SELECT 1 FROM queen.kv WHERE ns = 'stall' AND key = 'held' FOR UPDATE").await;

    let blocked = {
        let b = b.api();
        tokio::spawn(async move {
            let started = Instant::now();
            let resp = b.http.post(b.url("/api/v1/kv")).json(&put("held", 2)).send().await.expect("send");
            let status = resp.status().as_u16();
            let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap_or("").to_owned());
            let body: Value = resp.json().await.expect("json");
            (status, retry_after, body, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // While the put on `held` waits, the same kind of call on other keys answers.
    for n in 0..6 {
        let (status, _, body, took) = timed_post(&b, "/api/v1/kv", put(&format!("free-{n}"), n)).await;
        assert_eq!(status, 200, "{body}");
        assert!(took < PROMPT, "a put on another key took {took:?} while `held` was locked");
    }
    let (status, _, _, took) = timed_post(
        &b,
        "/api/v1/kv",
        json!({"operations": [
        {"op": "get", "ns": "stall", "key": "held"}]}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(took < PROMPT, "a get took {took:?}");

    let (status, retry_after, body, took) = blocked.await.expect("join");
    assert_eq!(status, 503, "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(body["error"], "kv_unavailable", "{body}");
    assert_eq!(body["reason"], "kv_timeout", "{body}");
    assert_eq!(body["code"], "lock_timeout", "{body}");
    assert!(took >= LOCK_TIMEOUT && took < LOCK_TIMEOUT * 4, "answered after {took:?}");

    // Members of one batch with the blocked key: the others commit, it alone fails.
    let calls: Vec<Value> =
        std::iter::once(put("held", 3)).chain((0..4).map(|n| put(&format!("mix-{n}"), n))).collect();
    let answers = common::all_at_once(calls, |body| {
        let b = b.api();
        async move { b.post("/api/v1/kv", &body).await }
    })
    .await;
    assert_eq!(answers[0].0, 503, "{:?}", answers[0]);
    for (status, body) in &answers[1..] {
        assert_eq!(*status, 200, "{body}");
    }

    let value = |sql: tokio_postgres::Client| async move {
        let row =
            sql.query_one("SELECT value::text FROM queen.kv WHERE ns = 'stall' AND key = 'held'", &[]).await;
        row.expect("held").get::<_, String>(0)
    };
    assert_eq!(value(b.sql().await).await, "1", "the timed-out puts wrote nothing");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.kv WHERE ns = 'stall' AND key LIKE 'mix-%'").await, 4);
    locker.batch_execute("ROLLBACK").await.expect("release");
    assert_eq!(b.post("/api/v1/kv", &put("held", 4)).await.0, 200, "served again once released");
    assert_eq!(value(b.sql().await).await, "4");
}

#[tokio::test]
async fn a_partition_locked_elsewhere_fails_its_push_after_the_lock_timeout_and_other_partitions_keep_answering(
) {
    let b = broker().await;
    b.configure_ok("stallq", json!({})).await;
    b.push("stallq", "held", &[("a", json!(1))]).await;
    b.push("stallq", "free", &[("b", json!(1))]).await;
    let messages = "SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id
                     WHERE p.name = 'held'";
    assert_eq!(b.scalar(messages).await, 1);
    let locker = hold(&b, "SELECT 1 FROM queen.partitions WHERE name = 'held' FOR UPDATE").await;

    let item = |partition: &str, n: i64| json!({"items": [{"queue": "stallq", "partition": partition, "payload": {"n": n}}]});
    let blocked = {
        let (b, body) = (b.api(), item("held", 2));
        tokio::spawn(async move {
            let started = Instant::now();
            let resp = b.http.post(b.url("/api/v1/push")).json(&body).send().await.expect("send");
            let status = resp.status().as_u16();
            let retry_after = resp.headers().get("retry-after").map(|v| v.to_str().unwrap_or("").to_owned());
            let body: Value = resp.json().await.expect("json");
            (status, retry_after, body, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    for n in 0..6 {
        let partition = if n % 2 == 0 { "free".to_owned() } else { format!("new-{n}") };
        let (status, _, body, took) = timed_post(&b, "/api/v1/push", item(&partition, n)).await;
        assert_eq!(status, 201, "{body}");
        assert!(took < PROMPT, "a push to {partition} took {took:?} while `held` was locked");
    }
    let (status, retry_after, body, took) = blocked.await.expect("join");
    assert_eq!(status, 503, "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(body["code"], "lock_timeout", "{body}");
    assert!(took >= LOCK_TIMEOUT && took < LOCK_TIMEOUT * 4, "answered after {took:?}");
    assert_eq!(b.scalar(messages).await, 1, "the timed-out push wrote nothing");

    locker.batch_execute("ROLLBACK").await.expect("release");
    let (status, _, body, _) = timed_post(&b, "/api/v1/push", item("held", 3)).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(b.scalar(messages).await, 2);
}

#[tokio::test]
async fn a_statement_past_the_statement_timeout_answers_503_statement_timeout() {
    // A lock timeout longer than the statement timeout: the statement's clock fires first.
    let b = TestBroker::start_with_db(|db| {
        db.lock_timeout = Some(Duration::from_secs(30));
        db.statement_timeout = Some(Duration::from_millis(1000));
    })
    .await;
    assert_eq!(b.post("/api/v1/kv", &put("slow", 1)).await.0, 200);
    let locker = hold(&b, "SELECT 1 FROM queen.kv WHERE ns = 'stall' AND key = 'slow' FOR UPDATE").await;
    let (status, retry_after, body, took) = timed_post(&b, "/api/v1/kv", put("slow", 2)).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert_eq!(body["code"], "statement_timeout", "{body}");
    assert!(took < Duration::from_secs(10), "answered after {took:?}");
    locker.batch_execute("ROLLBACK").await.expect("release");
    let v = b.sql().await.query_one("SELECT value::text FROM queen.kv WHERE key = 'slow'", &[]).await;
    assert_eq!(v.expect("slow").get::<_, String>(0), "1");
}
