//! Ephemeral queues over HTTP: in memory, one owning broker per queue.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Api, CutProxy, TestBroker};
use queen_engine::{DbConfig, Engine, EngineOptions};
use queen_server::ServerConfig;
use serde_json::{json, Value};
use tokio::net::TcpListener;

async fn push(b: &Api, queue: &str, partition: Option<&str>, payloads: &[Value]) -> (u16, Value) {
    let messages: Vec<Value> = payloads.iter().map(|p| json!({"payload": p})).collect();
    let mut body = json!({"queue": queue, "messages": messages});
    if let Some(p) = partition {
        body["partition"] = json!(p);
    }
    b.post("/api/v1/ephemeral/push", &body).await
}

async fn pop(b: &TestBroker, queue: &str, query: &str) -> Vec<Value> {
    let (status, body) = b.get(&format!("/api/v1/ephemeral/pop?queue={queue}&{query}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["queue"], queue);
    body["messages"].as_array().unwrap().clone()
}

async fn ack(b: &TestBroker, queue: &str, group: Option<&str>, acks: Value) -> Vec<String> {
    let (status, body) =
        b.post("/api/v1/ephemeral/ack", &json!({"queue": queue, "group": group, "acks": acks})).await;
    assert_eq!(status, 200, "{body}");
    body["results"].as_array().unwrap().iter().map(|r| r["outcome"].as_str().unwrap().to_owned()).collect()
}

fn payloads(msgs: &[Value]) -> Vec<Value> {
    msgs.iter().map(|m| m["payload"].clone()).collect()
}

fn ids(msgs: &[Value]) -> Value {
    json!(msgs.iter().map(|m| json!({"id": m["id"]})).collect::<Vec<_>>())
}

#[tokio::test]
async fn fifo_verbatim_payloads_groups_fan_out_and_members_compete() {
    let b = TestBroker::start().await;
    let (status, body) = b
        .post_raw("/api/v1/ephemeral/push", r#"{"queue":"e","messages":[{"payload":{"n":12345678901234567890.5}},{"payload":"s"},{"payload":null}]}"#.to_owned())
        .await;
    assert_eq!((status, body["pushed"].clone()), (201, json!(3)));
    let raw = b
        .http
        .get(b.url("/api/v1/ephemeral/pop?queue=e&batch=10&group=raw"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(raw.contains(r#""payload":{"n":12345678901234567890.5}"#), "{raw}");
    let first = pop(&b, "e", "batch=10").await;
    assert_eq!(payloads(&first).len(), 3);
    assert_eq!(first[1]["payload"], "s");
    assert!(first.iter().all(|m| m["attempts"] == 1 && m["partition"] == "Default"));
    assert_eq!(ack(&b, "e", None, ids(&first)).await, ["acked"; 3]);
    assert!(pop(&b, "e", "batch=10").await.is_empty(), "acked: gone for queue mode");

    push(&b, "fan", None, &[json!(1), json!(2)]).await;
    assert_eq!(payloads(&pop(&b, "fan", "batch=10&group=g1").await), [json!(1), json!(2)]);
    assert_eq!(
        payloads(&pop(&b, "fan", "batch=10&group=g2").await),
        [json!(1), json!(2)],
        "every group sees every message"
    );
    let w1 = pop(&b, "fan", "batch=1&group=w").await;
    let w2 = pop(&b, "fan", "batch=1&group=w").await;
    assert_ne!(w1[0]["id"], w2[0]["id"], "members of a group get disjoint messages");
    assert_eq!(ack(&b, "fan", Some("other"), ids(&w1)).await, ["unknown"], "the wrong group's ack");
    assert_eq!(
        ack(&b, "fan", None, json!([{"id": "e:0:Default:1"}, {"id": "junk"}])).await,
        ["stale", "unknown"]
    );
}

#[tokio::test]
async fn nacks_and_expired_leases_redeliver_until_the_retry_limit() {
    let b = TestBroker::start().await;
    let (status, conf) = b
        .post(
            "/api/v1/ephemeral/configure",
            &json!({"queue": "r", "options": {"retryLimit": 2, "leaseSeconds": 1}}),
        )
        .await;
    assert_eq!(status, 201, "{conf}");
    assert_eq!(conf["options"]["retryLimit"], 2);
    push(&b, "r", None, &[json!("x")]).await;
    let m = pop(&b, "r", "batch=1").await;
    assert_eq!(ack(&b, "r", None, json!([{"id": m[0]["id"], "status": "failed"}])).await, ["redelivered"]);
    let again = pop(&b, "r", "batch=1").await;
    assert_eq!((again[0]["id"].clone(), again[0]["attempts"].clone()), (m[0]["id"].clone(), json!(2)));
    assert_eq!(
        ack(&b, "r", None, json!([{"id": again[0]["id"], "status": "retry"}])).await,
        ["acked"],
        "spent: dropped"
    );
    assert!(pop(&b, "r", "batch=1").await.is_empty());

    push(&b, "r", None, &[json!("y")]).await;
    pop(&b, "r", "batch=1").await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let back = pop(&b, "r", "batch=1").await;
    assert_eq!(
        (back[0]["payload"].clone(), back[0]["attempts"].clone()),
        (json!("y"), json!(2)),
        "after its lease expired"
    );
    let (_, queues) = b.get("/api/v1/ephemeral/queues").await;
    assert_eq!(queues["queues"][0]["drops"]["retry"], 1, "{queues}");
    assert_eq!(queues["queues"][0]["tier"], "declared");

    // autoAck: no lease, nothing to ack.
    push(&b, "auto", None, &[json!(1)]).await;
    let got = pop(&b, "auto", "autoAck=true").await;
    assert!(pop(&b, "auto", "").await.is_empty());
    assert_eq!(ack(&b, "auto", None, ids(&got)).await, ["unknown"]);
}

#[tokio::test]
async fn bounds_reject_whole_pushes_or_drop_the_oldest_and_ttl_drops_stale_messages() {
    let b = TestBroker::start().await;
    b.post("/api/v1/ephemeral/configure", &json!({"queue": "tight", "options": {"maxLength": 2}})).await;
    let (status, body) = push(&b, "tight", None, &[json!(1), json!(2), json!(3)]).await;
    assert_eq!((status, body["code"].clone()), (429, json!("queue_full")), "{body}");
    let (_, depth) = b.get("/api/v1/ephemeral/queues/tight/depth").await;
    assert_eq!(depth["pending"], 0, "all or nothing: {depth}");

    b.post(
        "/api/v1/ephemeral/configure",
        &json!({"queue": "rolling", "options": {"maxLength": 2, "policy": "dropOldest"}}),
    )
    .await;
    for n in 1..=3 {
        assert_eq!(push(&b, "rolling", None, &[json!(n)]).await.0, 201);
    }
    assert_eq!(payloads(&pop(&b, "rolling", "batch=10").await), [json!(2), json!(3)]);

    b.post("/api/v1/ephemeral/configure", &json!({"queue": "brief", "options": {"ttlSeconds": 1}})).await;
    push(&b, "brief", None, &[json!("old")]).await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert!(pop(&b, "brief", "batch=10").await.is_empty());

    let (status, body) = b
        .post("/api/v1/ephemeral/configure", &json!({"queue": "x", "options": {"policy": "drop_oldest"}}))
        .await;
    assert_eq!((status, body["code"].clone()), (400, json!("ephemeral_bad_request")));
}

#[tokio::test]
async fn partitions_long_polls_reset_delete_and_the_missing_queue_404() {
    let b = TestBroker::start().await;
    push(&b, "parts", Some("p1"), &[json!("a1"), json!("a2")]).await;
    push(&b, "parts", Some("p2"), &[json!("b1")]).await;
    assert_eq!(payloads(&pop(&b, "parts", "partition=p2&batch=10&group=g").await), [json!("b1")]);
    assert_eq!(
        payloads(&pop(&b, "parts", "batch=10&group=h").await),
        [json!("a1"), json!("a2"), json!("b1")]
    );

    let api = b.api();
    let waiting = tokio::spawn(async move {
        let start = Instant::now();
        let r = api.get("/api/v1/ephemeral/pop?queue=later&wait=true&timeout=5000").await;
        (r, start.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    push(&b, "later", None, &[json!("woke")]).await;
    let ((status, body), _) = waiting.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["messages"][0]["payload"], "woke");
    let (status, empty) = b.get("/api/v1/ephemeral/pop?queue=later&wait=true&timeout=300").await;
    assert_eq!((status, empty["messages"].clone()), (200, json!([])), "an empty long poll is 200 []");

    let (_, reset) = b.post("/api/v1/ephemeral/reset", &json!({"queue": "parts"})).await;
    assert_eq!(reset["dropped"], 3);
    let (_, del) = b.delete("/api/v1/ephemeral/queue/parts").await;
    assert_eq!(del["deleted"], true);
    let (status, missing) = b.get("/api/v1/ephemeral/queues/parts/depth").await;
    assert_eq!((status, missing["code"].clone()), (404, json!("ephemeral_queue_not_found")));
    let (_, del) = b.delete("/api/v1/ephemeral/queue/never").await;
    assert_eq!(del["deleted"], false);
    let (_, reset) = b.post("/api/v1/ephemeral/reset", &json!({"queue": "never"})).await;
    assert_eq!(reset["dropped"], 0);
}

#[tokio::test]
async fn a_second_broker_names_the_owner_and_takes_over_when_it_is_gone() {
    let db = common::fresh_database().await;
    let owner = TestBroker::on(&db).await;
    let other = TestBroker::on(&db).await;
    owner.post("/api/v1/ephemeral/configure", &json!({"queue": "owned", "options": {"maxLength": 5}})).await;
    push(&owner, "owned", None, &[json!(1)]).await;
    let (status, body) = push(&other, "owned", None, &[json!(2)]).await;
    assert_eq!((status, body["code"].clone()), (421, json!("ephemeral_not_owner")), "{body}");
    assert!(body["owner"].is_string(), "{body}");
    let (status, _) = other.get("/api/v1/ephemeral/pop?queue=owned").await;
    assert_eq!(status, 421);
    // The owner goes away: after its heartbeat is stale the queue moves,
    // configured (declared options survive) and empty (contents do not).
    owner.engine.close();
    drop(owner);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = push(&other, "owned", None, &[json!(3)]).await;
        if status == 201 {
            break;
        }
        assert_eq!(status, 421, "{body}");
        assert!(Instant::now() < deadline, "the queue never moved");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(payloads(&pop(&other, "owned", "batch=10").await), [json!(3)]);
    let (_, queues) = other.get("/api/v1/ephemeral/queues").await;
    assert_eq!(queues["queues"][0]["options"]["maxLength"], 5, "{queues}");
}

#[tokio::test]
async fn a_push_that_eviction_cannot_make_room_for_evicts_nothing() {
    let b = TestBroker::start().await;
    b.post(
        "/api/v1/ephemeral/configure",
        &json!({"queue": "q", "options": {"maxLength": 2, "policy": "dropOldest"}}),
    )
    .await;
    push(&b, "q", Some("a"), &[json!("a1")]).await;
    push(&b, "q", Some("b"), &[json!("b1")]).await;
    let (status, body) = push(&b, "q", Some("b"), &[json!("b2"), json!("b3")]).await;
    assert_eq!((status, body["code"].clone()), (429, json!("queue_full")), "{body}");
    assert_eq!(payloads(&pop(&b, "q", "batch=10").await), [json!("a1"), json!("b1")], "nothing was evicted");
}

#[tokio::test]
async fn a_waiting_pop_does_not_create_again_a_queue_deleted_while_it_waited() {
    let b = TestBroker::start().await;
    let sql = b.sql().await;
    let rows = || async {
        sql.query_one("SELECT count(*) FROM queen.ephemeral_queues WHERE queue = 'gone'", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    let api = b.api();
    let waiting =
        tokio::spawn(async move { api.get("/api/v1/ephemeral/pop?queue=gone&wait=true&timeout=5000").await });
    let until = Instant::now() + Duration::from_secs(5);
    while rows().await == 0 {
        assert!(Instant::now() < until, "the pop never claimed the queue");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, del) = b.delete("/api/v1/ephemeral/queue/gone").await;
    assert_eq!(del["deleted"], true, "{del}");
    let started = Instant::now();
    let (status, body) = waiting.await.unwrap();
    assert_eq!((status, body["messages"].clone()), (200, json!([])), "{body}");
    assert!(started.elapsed() < Duration::from_secs(2), "answered when the queue went, not at its timeout");
    assert_eq!(rows().await, 0, "the waiting pop created the deleted queue again");
    let (status, _) = b.get("/api/v1/ephemeral/queues/gone/depth").await;
    assert_eq!(status, 404);
}

/// The owner's heartbeats fail (its database link is cut): it stops serving
/// (421) before the takeover time, the other broker takes over with a new
/// epoch, and at no moment do both serve; back online, the old owner names
/// the new one, and a renewal at its old epoch renews nothing.
#[tokio::test]
async fn an_owner_that_cannot_renew_stops_serving_before_another_broker_takes_over() {
    let db = common::fresh_database().await;
    // The owner reaches PostgreSQL through a proxy the test cuts: it can
    // neither renew nor reach the database, while the other broker can.
    let proxy = CutProxy::start(common::admin_host_port()).await;
    let engine = Arc::new(
        Engine::connect(
            &DbConfig { url: Some(proxy.url(&db)), pool_size: 4, ..DbConfig::default() },
            EngineOptions {
                advertise_url: Some("http://owner-a.invalid".into()),
                ..EngineOptions::default()
            },
        )
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = Api::new(format!("http://{}", listener.local_addr().unwrap()));
    tokio::spawn(queen_server::serve(listener, engine, ServerConfig::default(), std::future::pending()));
    let b = TestBroker::on_with_options(
        &db,
        EngineOptions { advertise_url: Some("http://owner-b.invalid".into()), ..EngineOptions::default() },
    )
    .await;

    let (status, body) = a
        .post("/api/v1/ephemeral/configure", &json!({"queue": "fenced", "options": {"maxLength": 100000}}))
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(push(&a, "fenced", None, &[json!(0)]).await.0, 201);
    let (status, body) = push(&b, "fenced", None, &[json!(0)]).await;
    assert_eq!((status, body["owner"].clone()), (421, json!("http://owner-a.invalid")), "{body}");
    let sql = b.sql().await;
    let a_id: String = sql
        .query_one("SELECT owner_id::text FROM queen.ephemeral_queues WHERE queue = 'fenced'", &[])
        .await
        .unwrap()
        .get(0);

    proxy.cut();
    let cut = Instant::now();
    let (mut last_a, mut first_b): (Option<Instant>, Option<Instant>) = (None, None);
    loop {
        let (sa, body_a) = push(&a, "fenced", None, &[json!("a")]).await;
        let at_a = Instant::now();
        let (sb, body_b) = push(&b, "fenced", None, &[json!("b")]).await;
        let at_b = Instant::now();
        match sa {
            201 => last_a = Some(at_a),
            _ => assert_eq!((sa, body_a["code"].clone()), (421, json!("ephemeral_not_owner")), "{body_a}"),
        }
        match sb {
            201 => {
                first_b.get_or_insert(at_b);
            }
            _ => assert_eq!(sb, 421, "{body_b}"),
        }
        assert!(sa != 201 || sb != 201, "two brokers serve one queue");
        if let (Some(a_at), Some(b_at)) = (last_a, first_b) {
            assert!(a_at < b_at, "the old owner served after the takeover");
        }
        if first_b.is_some_and(|t| t.elapsed() > Duration::from_secs(1)) {
            break;
        }
        assert!(cut.elapsed() < Duration::from_secs(30), "the queue never moved");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stopped = last_a.expect("the owner served right after the cut").duration_since(cut);
    assert!(stopped < Duration::from_secs(6), "the owner served {stopped:?} after its link was cut");
    let epoch: i64 = sql
        .query_one("SELECT epoch FROM queen.ephemeral_queues WHERE queue = 'fenced'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(epoch, 2, "a takeover bumps the epoch");

    // Back online: the old owner drops its copy and names the new owner.
    proxy.restore();
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let (status, body) = push(&a, "fenced", None, &[json!("a")]).await;
        assert_ne!(status, 201, "the old owner serves again: {body}");
        if body["owner"] == "http://owner-b.invalid" {
            break;
        }
        assert!(Instant::now() < until, "the old owner never named the new one: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let renewed: i64 = sql
        .query_one(
            "SELECT count(*) FROM queen.ephemeral_renew($1::text::uuid, ARRAY['fenced'], ARRAY[1::bigint])",
            &[&a_id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(renewed, 0, "a late renewal at the old epoch renews nothing");
    assert_eq!(push(&b, "fenced", None, &[json!("b")]).await.0, 201);
    let (_, queues) = b.get("/api/v1/ephemeral/queues").await;
    assert_eq!(queues["queues"][0]["options"]["maxLength"], 100000, "{queues}");
}
