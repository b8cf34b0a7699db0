//! Locks and semaphores (`POST /api/v1/locks`, `Engine::lock_ops`): a
//! permit is a KV row whose version is a fencing token; semaphores never
//! grant more than their limit, checked against the rows themselves.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::TestBroker;
use queen_engine::{EngineError, LockOp};
use serde_json::{json, Value};

/// One lock op over HTTP; answers its result (asserting 200, one result).
async fn lock(b: &TestBroker, op: Value) -> Value {
    let (status, body) = b.post("/api/v1/locks", &json!({ "operations": [op.clone()] })).await;
    assert_eq!(status, 200, "locks call failed: {body}");
    let results = body["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "one result per op: {body}");
    assert_eq!(results[0]["index"], json!(0));
    assert_eq!(results[0]["op"], op["op"]);
    results[0].clone()
}

async fn kv_get(b: &TestBroker, key: &str) -> Value {
    let (status, body) =
        b.post("/api/v1/kv", &json!({"operations": [{"op": "get", "ns": "queen-locks", "key": key}]})).await;
    assert_eq!(status, 200, "{body}");
    body["results"][0].clone()
}

async fn lock_rows(b: &TestBroker, name: &str) -> i64 {
    let sql = b.sql().await;
    sql.query_one(
        "SELECT count(*) FROM queen.kv WHERE ns = 'queen-locks' AND key LIKE $1 || '#%' \
         AND (expires_at IS NULL OR expires_at > now())",
        &[&name],
    )
    .await
    .expect("count")
    .get(0)
}

fn token(r: &Value) -> i64 {
    r["token"].as_i64().unwrap_or_else(|| panic!("a token: {r}"))
}

#[tokio::test]
async fn a_lock_round_trip_is_a_kv_row_whose_version_is_the_token() {
    let b = TestBroker::start().await;
    let a = lock(&b, json!({"op": "acquire", "name": "job", "ttlSeconds": 30, "owner": "alice"})).await;
    assert_eq!(a["acquired"], json!(true), "{a}");
    assert_eq!(a["slot"], json!(0));
    assert_eq!(a["owner"], json!("alice"));
    assert!(a.get("already").is_none(), "a first acquire is not `already`: {a}");
    let t1 = token(&a);
    assert_eq!(
        a["guard"],
        json!({"op": "check", "ns": "queen-locks", "key": "job#0", "expect": t1, "required": true})
    );
    let row = kv_get(&b, "job#0").await;
    assert_eq!(row["found"], json!(true));
    assert_eq!(row["version"], json!(t1), "the token is the row's version");
    assert_eq!(row["value"]["owner"], json!("alice"));

    // Idempotent by owner.
    let again = lock(&b, json!({"op": "acquire", "name": "job", "ttlSeconds": 30, "owner": "alice"})).await;
    assert_eq!((again["acquired"].clone(), again["already"].clone()), (json!(true), json!(true)));
    assert_eq!(token(&again), t1);

    // Somebody else is refused and told who holds it.
    let bob = lock(&b, json!({"op": "acquire", "name": "job", "ttlSeconds": 30, "owner": "bob"})).await;
    assert_eq!(bob["acquired"], json!(false));
    assert_eq!(bob["reason"], json!("held"));
    assert_eq!(bob["holders"][0]["owner"], json!("alice"));
    assert_eq!(bob["holders"][0]["token"], json!(t1));

    // Renew: a higher token; an old token sent again by its owner renews too.
    let r1 = lock(&b, json!({"op": "renew", "name": "job", "token": t1, "ttlSeconds": 30, "owner": "alice"}))
        .await;
    assert_eq!(r1["renewed"], json!(true), "{r1}");
    let t2 = token(&r1);
    assert!(t2 > t1);
    let r2 = lock(&b, json!({"op": "renew", "name": "job", "token": t1, "ttlSeconds": 30, "owner": "alice"}))
        .await;
    assert_eq!(r2["renewed"], json!(true), "{r2}");
    let t3 = token(&r2);
    assert!(t3 > t2);
    // Not by another owner, whatever token it sends.
    let lost =
        lock(&b, json!({"op": "renew", "name": "job", "token": t3, "ttlSeconds": 30, "owner": "bob"})).await;
    assert_eq!((lost["renewed"].clone(), lost["reason"].clone()), (json!(false), json!("lost")));
    assert_eq!(lost["holders"][0]["owner"], json!("alice"));
    // Without an owner, only the current token renews.
    let stale = lock(&b, json!({"op": "renew", "name": "job", "token": t1, "ttlSeconds": 30})).await;
    assert_eq!(stale["renewed"], json!(false));

    let held = lock(&b, json!({"op": "get", "name": "job"})).await;
    assert_eq!(held["held"], json!(true));
    let h = &held["holders"][0];
    assert_eq!(
        (h["slot"].clone(), h["owner"].clone(), h["token"].clone()),
        (json!(0), json!("alice"), json!(t3))
    );
    for f in ["since", "expiresAt", "renewedAt"] {
        assert!(h[f].as_str().is_some_and(|s| s.len() == 27 && s.ends_with('Z')), "{f}: {h}");
    }

    // Release: only with the current token.
    let wrong = lock(&b, json!({"op": "release", "name": "job", "token": t2})).await;
    assert_eq!((wrong["released"].clone(), wrong["reason"].clone()), (json!(false), json!("lost")));
    let released = lock(&b, json!({"op": "release", "name": "job", "token": t3})).await;
    assert_eq!(released["released"], json!(true));
    assert_eq!(kv_get(&b, "job#0").await["found"], json!(false));
    let free = lock(&b, json!({"op": "get", "name": "job"})).await;
    assert_eq!((free["held"].clone(), free["holders"].clone()), (json!(false), json!([])));

    // The next holder's token is higher than any before.
    let next = lock(&b, json!({"op": "acquire", "name": "job", "ttlSeconds": 30})).await;
    assert_eq!(next["acquired"], json!(true));
    assert!(token(&next) > t3);
    assert!(next["owner"].as_str().is_some_and(|o| !o.is_empty()), "an owner is minted: {next}");
}

#[tokio::test]
async fn an_expired_permit_passes_to_the_next_acquirer_with_a_higher_token() {
    let b = TestBroker::start().await;
    let a = lock(&b, json!({"op": "acquire", "name": "lapse", "ttlSeconds": 1, "owner": "a"})).await;
    assert_eq!(a["acquired"], json!(true));
    let held = lock(&b, json!({"op": "acquire", "name": "lapse", "ttlSeconds": 1, "owner": "b"})).await;
    assert_eq!(held["acquired"], json!(false));
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let next = lock(&b, json!({"op": "acquire", "name": "lapse", "ttlSeconds": 30, "owner": "b"})).await;
    assert_eq!(next["acquired"], json!(true), "{next}");
    assert!(token(&next) > token(&a), "fencing tokens rise across holders");
    // The lapsed holder can neither renew nor release the permit it lost.
    let renew =
        lock(&b, json!({"op": "renew", "name": "lapse", "token": token(&a), "ttlSeconds": 5, "owner": "a"}))
            .await;
    assert_eq!((renew["renewed"].clone(), renew["holders"][0]["owner"].clone()), (json!(false), json!("b")));
    let release = lock(&b, json!({"op": "release", "name": "lapse", "token": token(&a)})).await;
    assert_eq!(release["released"], json!(false));
    assert_eq!(lock_rows(&b, "lapse").await, 1);
}

#[tokio::test]
async fn a_semaphore_grants_its_limit_on_slots_below_it() {
    let b = TestBroker::start().await;
    let mut slots = Vec::new();
    for owner in ["o1", "o2", "o3", "o4", "o5"] {
        let r =
            lock(&b, json!({"op": "acquire", "name": "pool", "ttlSeconds": 30, "owner": owner, "limit": 3}))
                .await;
        if r["acquired"] == json!(true) {
            slots.push(r["slot"].as_i64().expect("slot"));
        } else {
            assert_eq!(r["holders"].as_array().map(Vec::len), Some(3), "{r}");
        }
    }
    slots.sort_unstable();
    assert_eq!(slots, vec![0, 1, 2]);
    assert_eq!(lock_rows(&b, "pool").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_on_a_semaphore_of_three_never_hold_more_than_three() {
    let b = Arc::new(TestBroker::start().await);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let (b, inside, most, granted) = (b.clone(), inside.clone(), most.clone(), granted.clone());
            tokio::spawn(async move {
                let sql = b.sql().await;
                for _ in 0..6 {
                    let owner = format!("task-{i}");
                    let r = lock(
                        &b,
                        json!({"op": "acquire", "name": "sem", "ttlSeconds": 60, "owner": owner, "limit": 3}),
                    )
                    .await;
                    if r["acquired"] != json!(true) {
                        assert!(r["reason"] == json!("held") || r["reason"] == json!("contended"), "{r}");
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                    granted.fetch_add(1, Ordering::SeqCst);
                    assert!(r["slot"].as_i64().is_some_and(|s| (0..3).contains(&s)), "{r}");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let rows: i64 = sql
                        .query_one(
                            "SELECT count(*) FROM queen.kv WHERE ns = 'queen-locks' AND key LIKE 'sem#%' \
                             AND expires_at > now()",
                            &[],
                        )
                        .await
                        .expect("count")
                        .get(0);
                    assert!(rows <= 3, "{rows} live permits of a semaphore of 3");
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    let rel = lock(
                        &b,
                        json!({"op": "release", "name": "sem", "token": r["token"], "slot": r["slot"]}),
                    )
                    .await;
                    assert_eq!(rel["released"], json!(true), "{rel}");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    assert!(most.load(Ordering::SeqCst) <= 3, "at most 3 holders at once");
    assert!(granted.load(Ordering::SeqCst) >= 3, "permits were granted");
    assert_eq!(lock_rows(&b, "sem").await, 0, "every permit was given back");
}

#[tokio::test]
async fn the_guard_rolls_back_a_zombie_holders_bundle_whole() {
    let b = TestBroker::start().await;
    let zombie =
        lock(&b, json!({"op": "acquire", "name": "leader", "ttlSeconds": 1, "owner": "zombie"})).await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let live = lock(&b, json!({"op": "acquire", "name": "leader", "ttlSeconds": 30, "owner": "live"})).await;
    assert_eq!(live["acquired"], json!(true));

    let bundle = |guard: &Value, tag: &str| {
        json!({
            "operations": [{"type": "push", "items": [{"queue": "fenced", "payload": {"by": tag}, "transactionId": format!("tx-{tag}")}]}],
            "requiredLeases": [],
            "kv": [guard.clone(), {"op": "put", "ns": "app", "key": format!("by-{tag}"), "value": 1, "ttlSeconds": 60}],
        })
    };
    let (status, body) = b.post("/api/v1/transaction", &bundle(&zombie["guard"], "zombie")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], json!(false), "{body}");
    assert_eq!(body["reason"], json!("kv_precondition"));
    assert_eq!(body["failedIndex"], json!(1), "the guard's flat index: 1 push item, then kv[0]");
    assert_eq!(body["value"]["owner"], json!("live"), "the winner's value names the live owner");
    b.pop_none("fenced", "").await;

    let (status, body) = b.post("/api/v1/transaction", &bundle(&live["guard"], "live")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], json!(true), "{body}");
    let popped = b.pop_some("fenced", "batch=10").await;
    assert_eq!(popped["messages"].as_array().map(Vec::len), Some(1));
    assert_eq!(popped["messages"][0]["data"], json!({"by": "live"}));
    let sql = b.sql().await;
    let keys: Vec<String> = sql
        .query("SELECT key FROM queen.kv WHERE ns = 'app' ORDER BY key", &[])
        .await
        .expect("keys")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(keys, vec!["by-live".to_owned()], "the zombie's KV write rolled back with its push");
}

#[tokio::test]
async fn bad_lock_calls_answer_400_with_a_reason_and_write_nothing() {
    let b = TestBroker::start().await;
    let cases = [
        (json!({"operations": "x"}), "locks_bad_body"),
        (json!({"operations": [{"op": "grab", "name": "a"}]}), "locks_unknown_op"),
        (json!({"operations": [{"op": "acquire", "name": "a#0", "ttlSeconds": 5}]}), "locks_bad_name"),
        (json!({"operations": [{"op": "acquire", "name": "a", "ttlSeconds": 0}]}), "locks_bad_ttl"),
        (
            json!({"operations": [{"op": "acquire", "name": "a", "ttlSeconds": 5, "limit": 0}]}),
            "locks_bad_limit",
        ),
        (json!({"operations": [{"op": "renew", "name": "a", "ttlSeconds": 5}]}), "locks_bad_token"),
        // A bad op refuses the whole call: the good acquire before it is not applied.
        (
            json!({"operations": [{"op": "acquire", "name": "a", "ttlSeconds": 5}, {"op": "release", "name": "a", "token": -1}]}),
            "locks_bad_token",
        ),
    ];
    for (body, reason) in cases {
        let (status, answer) = b.post("/api/v1/locks", &body).await;
        assert_eq!(status, 400, "{body} -> {answer}");
        assert_eq!(answer["error"], json!("locks_bad_request"), "{answer}");
        assert_eq!(answer["reason"], json!(reason), "{body} -> {answer}");
        assert!(answer["detail"].is_string());
    }
    assert_eq!(lock_rows(&b, "a").await, 0, "nothing written");
}

#[tokio::test]
async fn embedded_lock_ops_are_typed_and_checked_like_http() {
    let b = TestBroker::start().await;
    let acquire = |owner: &str| LockOp::Acquire {
        name: "embedded".into(),
        ttl_seconds: 30,
        owner: Some(owner.into()),
        limit: 2,
    };
    let r = b.engine.lock_ops(&[acquire("x"), acquire("y"), acquire("z")]).await.expect("lock ops");
    assert_eq!(r.iter().map(|r| r.acquired).collect::<Vec<_>>(), vec![Some(true), Some(true), Some(false)]);
    assert_eq!(r[2].holders.as_ref().map(Vec::len), Some(2));
    let t = r[0].token.expect("token");
    let renewed = b
        .engine
        .lock_ops(&[LockOp::Renew {
            name: "embedded".into(),
            token: t,
            ttl_seconds: 30,
            slot: r[0].slot,
            owner: None,
        }])
        .await
        .expect("renew");
    assert_eq!(renewed[0].renewed, Some(true));
    assert!(renewed[0].token.expect("token") > t);
    match b.engine.lock_ops(&[LockOp::Get { name: "no#hash".into() }]).await {
        Err(EngineError::Rejected { status: 400, body }) => {
            assert!(body.contains("locks_bad_name"), "{body}")
        }
        other => panic!("a bad name is refused: {other:?}"),
    }
}

/// The engine writes each answer (`LockResult`) from SQL's outcome: the
/// fields an op answers and no others, named after the op in call order.
#[tokio::test]
async fn each_lock_answer_carries_exactly_its_ops_fields_in_call_order() {
    let b = TestBroker::start().await;
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
        k.sort();
        k
    };
    let (status, body) = b
        .post(
            "/api/v1/locks",
            &json!({"operations": [
                {"op": "get", "name": "z"},
                {"op": "acquire", "name": "a", "ttlSeconds": 30, "owner": "w1"},
                {"op": "release", "name": "m", "token": 1},
            ]}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let r = body["results"].as_array().expect("results");
    let names: Vec<(&Value, &Value, &Value)> =
        r.iter().map(|x| (&x["index"], &x["op"], &x["name"])).collect();
    assert_eq!(
        names,
        vec![
            (&json!(0), &json!("get"), &json!("z")),
            (&json!(1), &json!("acquire"), &json!("a")),
            (&json!(2), &json!("release"), &json!("m"))
        ]
    );
    assert_eq!(keys(&r[0]), ["held", "holders", "index", "name", "op"]);
    assert_eq!(
        keys(&r[1]),
        ["acquired", "expiresAt", "guard", "index", "name", "op", "owner", "slot", "token"]
    );
    assert_eq!(keys(&r[2]), ["index", "name", "op", "reason", "released"]);
    let holders = lock(&b, json!({"op": "get", "name": "a"})).await;
    assert_eq!(keys(&holders["holders"][0]), ["expiresAt", "owner", "renewedAt", "since", "slot", "token"]);
}

/// A row in the locks namespace that a KV call wrote (no owner) still takes
/// its slot; a locks call answers it as a holder without an owner, not a 500.
#[tokio::test]
async fn a_kv_written_row_in_the_locks_namespace_is_a_holder_without_owner() {
    let b = TestBroker::start().await;
    let (status, body) = b
        .post("/api/v1/kv", &json!({"operations": [{"op": "put", "ns": "queen-locks", "key": "L#0", "value": 5, "forever": true}]}))
        .await;
    assert_eq!(status, 200, "{body}");
    let got = lock(&b, json!({"op": "get", "name": "L"})).await;
    assert_eq!(got["held"], json!(true), "{got}");
    assert_eq!(got["holders"][0]["owner"], Value::Null, "{got}");
    assert!(got["holders"][0].get("owner").is_some(), "owner is written, as null: {got}");
    let refused = lock(&b, json!({"op": "acquire", "name": "L", "ttlSeconds": 30, "owner": "me"})).await;
    assert_eq!((&refused["acquired"], &refused["reason"]), (&json!(false), &json!("held")), "{refused}");
    let typed = b.engine.lock_ops(&[LockOp::Get { name: "L".into() }]).await.expect("typed get");
    assert_eq!(typed[0].holders.as_ref().map(|h| h[0].owner.clone()), Some(None));
}
