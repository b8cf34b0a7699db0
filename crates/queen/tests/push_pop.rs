//! Push, pop, configure and delete-queue over HTTP.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;
#[path = "common/kv.rs"]
mod kvh;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{eventually, tx_ids, txids, TestBroker};
use serde_json::{json, Value};

fn distinct(pop: &Value, key: &str) -> HashSet<String> {
    pop["messages"].as_array().unwrap().iter().map(|m| m[key].as_str().unwrap().to_owned()).collect()
}

// ---------------------------------------------------------------- push

#[tokio::test]
async fn push_answers_201_with_snake_case_ids_and_pop_returns_them_in_order() {
    let b = TestBroker::start().await;
    let pushed =
        b.push("orders", "Default", &[("t1", json!({"n": 1})), ("t2", json!(null)), ("t3", json!({}))]).await;
    assert_eq!(pushed.as_array().map(Vec::len), Some(3));
    assert_eq!(pushed[0]["status"], "queued");
    assert_eq!(pushed[0]["index"], 0);
    assert_eq!(pushed[0]["queueName"], "orders");
    assert!(pushed[0]["message_id"].is_string());
    assert_eq!(pushed[1]["transaction_id"], "t2");
    let (status, popped) = b.pop("orders", "batch=10").await;
    assert_eq!(status, 200);
    assert_eq!(TestBroker::tx_ids(&popped), ["t1", "t2", "t3"]);
    assert_eq!(popped["messages"][0]["data"], json!({"n": 1}));
    assert_eq!(popped["messages"][1]["data"], json!(null));
    assert_eq!(popped["messages"][2]["data"], json!({}));
    assert_eq!(popped["messages"][0]["id"], pushed[0]["message_id"]);
    assert_eq!(popped["consumerGroup"], "__QUEUE_MODE__");
    assert_eq!(popped["partition"], "Default");
    for m in popped["messages"].as_array().unwrap() {
        assert!(m["partitionId"].is_string() && m["leaseId"].is_string() && m["createdAt"].is_string());
        assert_eq!(m["leaseId"], popped["leaseId"]);
    }
}

#[tokio::test]
async fn pop_of_an_empty_queue_is_204() {
    let b = TestBroker::start().await;
    let (status, body) = b.pop("nothing-here", "batch=1").await;
    assert_eq!(status, 204);
    assert!(body.is_null());
}

#[tokio::test]
async fn push_of_1000_items_pops_all_1000_in_order_with_batch_1000() {
    let b = TestBroker::start().await;
    let ids = txids("m", 1000);
    let pushed = b.push_txids("big", "Default", &ids).await;
    let pushed = pushed.as_array().unwrap();
    assert_eq!(pushed.len(), 1000);
    assert!(pushed.iter().enumerate().all(|(i, r)| r["status"] == "queued" && r["index"] == i));
    let popped = b.pop_some("big", "batch=1000").await;
    assert_eq!(tx_ids(&popped), ids);
    assert_eq!(popped["messages"][999]["data"], json!({"tx": "m-999"}));
    b.pop_none("big", "batch=1000").await;
}

/// The Queen 2.x stream runtime orders a popped batch by (createdAt in
/// milliseconds, then id as a string): that order must be the push order.
fn client_sort_order(pop: &Value) -> Vec<String> {
    let mut messages: Vec<(String, String, String)> = pop["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let created = m["createdAt"].as_str().unwrap();
            // Fixed width (YYYY-MM-DDTHH:MM:SS.ffffffZ): the first 23
            // characters are the millisecond, and sort as time does.
            assert_eq!(created.len(), 27, "{created}");
            (
                created[..23].to_owned(),
                m["id"].as_str().unwrap().to_owned(),
                m["transactionId"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    messages.sort();
    messages.into_iter().map(|(_, _, tx)| tx).collect()
}

fn assert_uuid_v7(id: &str) {
    assert_eq!(id.len(), 36, "{id}");
    assert_eq!(&id[14..15], "7", "version nibble of {id}");
    assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"), "variant of {id}");
}

#[tokio::test]
async fn a_push_of_1000_sorts_in_push_order_by_created_at_ms_then_id() {
    let b = TestBroker::start().await;
    let ids = txids("m", 1000);
    b.push_txids("sorted", "Default", &ids).await;
    let popped = b.pop_some("sorted", "batch=1000").await;
    assert_eq!(tx_ids(&popped), ids);
    assert_eq!(client_sort_order(&popped), ids);
    let mut seen = HashSet::new();
    for m in popped["messages"].as_array().unwrap() {
        let id = m["id"].as_str().unwrap();
        assert_uuid_v7(id);
        assert!(seen.insert(id.to_owned()), "duplicate id {id}");
    }
}

/// The engine draws the transaction id of an item that has none (and the
/// random half of each message id): each is a distinct UUIDv7, the answer
/// names the id the message was stored with, and a duplicate in the same
/// call still answers its first occurrence's message id.
#[tokio::test]
async fn items_without_a_transaction_id_get_distinct_v7_ids_that_pop_returns() {
    let b = TestBroker::start().await;
    let mut items: Vec<Value> = (0..300).map(|i| json!({"queue": "drawn", "payload": {"i": i}})).collect();
    items.push(json!({"queue": "drawn", "transactionId": "own", "payload": {"i": 300}}));
    items.push(json!({"queue": "drawn", "transactionId": "own", "payload": {"i": 301}}));
    let (status, pushed) = b.api().post("/api/v1/push", &json!({"items": items})).await;
    assert_eq!(status, 201, "{pushed}");
    let pushed = pushed.as_array().unwrap();
    assert_eq!(pushed.len(), 302);
    let drawn: HashSet<&str> = pushed[..300].iter().map(|r| r["transaction_id"].as_str().unwrap()).collect();
    assert_eq!(drawn.len(), 300, "drawn transaction ids are distinct");
    for (i, r) in pushed.iter().enumerate() {
        assert_eq!(r["index"], i);
        assert_eq!(r["queueName"], "drawn");
        assert_uuid_v7(r["message_id"].as_str().unwrap());
        if i < 300 {
            assert_eq!(r["status"], "queued", "{r}");
            assert_uuid_v7(r["transaction_id"].as_str().unwrap());
        }
    }
    assert_eq!(pushed[300]["status"], "queued");
    assert_eq!(pushed[301]["status"], "duplicate");
    assert_eq!(pushed[301]["message_id"], pushed[300]["message_id"]);
    let popped = b.pop_some("drawn", "batch=1000").await;
    let messages = popped["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 301);
    for (m, r) in messages.iter().zip(pushed) {
        assert_eq!(m["id"], r["message_id"]);
        assert_eq!(m["transactionId"], r["transaction_id"]);
    }
    let ids: HashSet<&str> = messages.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 301);
}

#[tokio::test]
async fn concurrent_pushes_to_one_partition_sort_in_offset_order() {
    let b = TestBroker::start().await;
    let api = Arc::new(b.api());
    let mut tasks = Vec::new();
    for t in 0..16 {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..25 {
                let items = json!([{"queue": "race", "partition": "p", "transactionId": format!("t{t}-{i}"),
                                    "payload": {"t": t, "i": i}}]);
                let (status, body) = api.post("/api/v1/push", &json!({"items": items})).await;
                assert_eq!(status, 201, "{body}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let popped = b.pop_some("race", "batch=1000").await;
    let in_offset_order = tx_ids(&popped);
    assert_eq!(in_offset_order.len(), 400);
    assert_eq!(client_sort_order(&popped), in_offset_order);
}

#[tokio::test]
async fn ids_and_created_at_keep_rising_when_the_clock_is_behind_the_partition() {
    let b = TestBroker::start().await;
    b.push_txids("skew", "Default", &txids("a", 3)).await;
    // As if the database clock stepped back an hour after the last push,
    // which also used up its millisecond's counter.
    let sql = b.sql().await;
    sql.batch_execute(
        "UPDATE queen.partitions SET last_push_at = now() + interval '1 hour',
                id_clock = (floor(extract(epoch FROM now() + interval '1 hour') * 1000)::bigint << 12) | 4095",
    )
    .await
    .unwrap();
    b.push_txids("skew", "Default", &txids("b", 3)).await;
    let popped = b.pop_some("skew", "batch=10").await;
    let order = ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2"];
    assert_eq!(tx_ids(&popped), order);
    assert_eq!(client_sort_order(&popped), order);
    let ahead = sql
        .query_one(
            "SELECT bool_and(created_at > now() + interval '59 minutes') FROM queen.messages WHERE transaction_id LIKE 'b-%'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(ahead.get::<_, Option<bool>>(0), Some(true), "created_at never goes back in a partition");
}

#[tokio::test]
async fn duplicate_transaction_id_answers_duplicate_with_the_original_message_id() {
    let b = TestBroker::start().await;
    let first = b.push("dedup", "Default", &[("same", json!({"v": 1}))]).await;
    assert_eq!(first[0]["status"], "queued");
    let again = b.push("dedup", "Default", &[("same", json!({"v": 2})), ("other", json!({"v": 3}))]).await;
    assert_eq!(again[0]["status"], "duplicate");
    assert_eq!(again[0]["message_id"], first[0]["message_id"]);
    assert_eq!(again[0]["transaction_id"], "same");
    assert_eq!(again[1]["status"], "queued");
    let popped = b.pop_some("dedup", "batch=10").await;
    assert_eq!(tx_ids(&popped), ["same", "other"]);
    assert_eq!(popped["messages"][0]["data"], json!({"v": 1}), "the original payload is kept");
}

#[tokio::test]
async fn duplicate_inside_one_request_is_a_duplicate_of_the_first_occurrence() {
    let b = TestBroker::start().await;
    let pushed = b.push("dedup", "Default", &[("a", json!(1)), ("b", json!(2)), ("a", json!(3))]).await;
    assert_eq!(pushed[0]["status"], "queued");
    assert_eq!(pushed[1]["status"], "queued");
    assert_eq!(pushed[2]["status"], "duplicate");
    assert_eq!(pushed[2]["message_id"], pushed[0]["message_id"]);
    assert_eq!(pushed[2]["index"], 2);
    let popped = b.pop_some("dedup", "batch=10").await;
    assert_eq!(tx_ids(&popped), ["a", "b"]);
    assert_eq!(popped["messages"][0]["data"], json!(1));
}

/// A push to one partition that exists takes the short path of
/// `queen.push_rows`; it must keep the dedup window, in-call duplicates
/// and offsets exactly as the general path does.
#[tokio::test]
async fn a_push_to_one_existing_partition_keeps_dedup_and_order() {
    let b = TestBroker::start().await;
    let warm = b.push("short", "p", &[("w", json!(0))]).await;
    let pushed =
        b.push("short", "p", &[("a", json!(1)), ("b", json!(2)), ("a", json!(3)), ("w", json!(4))]).await;
    let statuses: Vec<&str> =
        pushed.as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["queued", "queued", "duplicate", "duplicate"]);
    assert_eq!(pushed[2]["message_id"], pushed[0]["message_id"]);
    assert_eq!(pushed[3]["message_id"], warm[0]["message_id"]);
    assert_eq!(pushed[3]["index"], 3);
    let popped = b.pop_some("short", "batch=10").await;
    assert_eq!(tx_ids(&popped), ["w", "a", "b"]);
    assert_eq!(popped["messages"][1]["data"], json!(1));
    assert_eq!(b.scalar("select count(*) from queen.messages").await, 3);
    assert_eq!(b.scalar("select max(seq) from queen.messages").await, 2, "offsets 0, 1, 2 without a gap");
}

#[tokio::test]
async fn same_transaction_id_on_another_partition_is_queued() {
    let b = TestBroker::start().await;
    let p1 = b.push("dedup", "p1", &[("shared", json!(1))]).await;
    let p2 = b.push("dedup", "p2", &[("shared", json!(2))]).await;
    assert_eq!(p1[0]["status"], "queued");
    assert_eq!(p2[0]["status"], "queued");
    assert_ne!(p1[0]["message_id"], p2[0]["message_id"]);
    // Another queue, same partition name: also queued.
    let other = b.push("dedup-2", "p1", &[("shared", json!(3))]).await;
    assert_eq!(other[0]["status"], "queued");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages WHERE transaction_id = 'shared'").await, 3);
}

#[tokio::test]
async fn nine_mib_body_is_accepted_and_round_trips() {
    let b = TestBroker::start().await;
    let blob = "x".repeat(9 * 1024 * 1024);
    let body = json!({"items": [{"queue": "large", "partition": "Default", "transactionId": "big", "payload": {"blob": blob}}]});
    let text = body.to_string();
    assert!(text.len() > 9 * 1024 * 1024);
    let (status, pushed) = b.post_raw("/api/v1/push", text).await;
    assert_eq!(status, 201, "{pushed}");
    assert_eq!(pushed[0]["status"], "queued");
    let popped = b.pop_some("large", "batch=1").await;
    assert_eq!(popped["messages"][0]["data"]["blob"].as_str().map(str::len), Some(9 * 1024 * 1024));
}

#[tokio::test]
async fn push_is_visible_to_the_very_next_non_waiting_pop() {
    let b = TestBroker::start().await;
    for i in 0..30 {
        let tx = format!("v-{i}");
        b.push("visible", "Default", &[(&tx, json!(i))]).await;
        let popped = b.pop_some("visible", "batch=10&autoAck=true").await;
        assert_eq!(tx_ids(&popped), [tx]);
    }
}

#[tokio::test]
async fn fifo_holds_across_pushes_and_pops() {
    let b = TestBroker::start().await;
    let ids = txids("f", 20);
    for chunk in ids.chunks(4) {
        b.push_txids("fifo", "Default", chunk).await;
    }
    let mut got = Vec::new();
    while got.len() < 20 {
        let popped = b.pop_some("fifo", "batch=3").await;
        let last = popped["messages"].as_array().unwrap().last().unwrap().clone();
        got.extend(tx_ids(&popped));
        assert_eq!(b.ack(&last, "completed", None).await["success"], true);
    }
    assert_eq!(got, ids);
    b.pop_none("fifo", "batch=3").await;
}

#[tokio::test]
async fn queues_and_partitions_are_created_on_first_push() {
    let b = TestBroker::start().await;
    assert_eq!(b.scalar("SELECT count(*) FROM queen.queues").await, 0);
    b.push_items(json!([
        {"queue": "fresh", "partition": "a", "transactionId": "1", "payload": 1},
        {"queue": "fresh", "partition": "b", "transactionId": "2", "payload": 2},
        {"queue": "fresh", "transactionId": "3", "payload": 3},
    ]))
    .await;
    assert_eq!(b.scalar("SELECT count(*) FROM queen.queues WHERE name = 'fresh'").await, 1);
    assert_eq!(
        b.scalar("SELECT count(*) FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'fresh'")
            .await,
        3
    );
    let (status, popped) = b.pop_partition("fresh", "b", "batch=10").await;
    assert_eq!(status, 200);
    assert_eq!(tx_ids(&popped), ["2"]);
    assert_eq!(popped["partition"], "b");
    let (status, popped) = b.pop_partition("fresh", "Default", "batch=10").await;
    assert_eq!(status, 200, "an item without partition lands in Default");
    assert_eq!(tx_ids(&popped), ["3"]);
}

/// Offsets are assigned in commit order: a consumer that commits as fast as
/// it can while many producers push never skips a message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pushes_to_one_partition_are_never_skipped_by_a_moving_cursor() {
    let b = TestBroker::start().await;
    let producers = 4;
    let per = 50;
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for p in 0..producers {
        let api = b.api();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let tx = format!("p{p}-{i:03}");
                api.push("race", "Default", &[(&tx, json!(i))]).await;
            }
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
    }
    let mut got: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let finished = done.load(std::sync::atomic::Ordering::SeqCst) == producers;
        let (status, popped) = b.pop("race", "batch=7&autoAck=true").await;
        if status == 200 {
            got.extend(tx_ids(&popped));
        } else if finished {
            break;
        }
        assert!(Instant::now() < deadline, "consumer did not finish");
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(got.len(), producers * per, "every message delivered exactly once");
    assert_eq!(got.iter().collect::<HashSet<_>>().len(), producers * per);
    for p in 0..producers {
        let mine: Vec<&String> = got.iter().filter(|t| t.starts_with(&format!("p{p}-"))).collect();
        let mut sorted = mine.clone();
        sorted.sort();
        assert_eq!(mine, sorted, "each producer's messages arrive in its push order");
    }
}

// ---------------------------------------------------------------- pop

#[tokio::test]
async fn batch_is_a_global_cap_across_partitions() {
    let b = TestBroker::start().await;
    let mut items = Vec::new();
    for p in 0..10 {
        for i in 0..50 {
            items.push(json!({"queue": "wide", "partition": format!("p{p}"), "transactionId": format!("p{p}-{i}"), "payload": i}));
        }
    }
    b.push_items(json!(items)).await;
    let popped = b.pop_some("wide", "batch=10&partitions=5").await;
    assert_eq!(popped["messages"].as_array().unwrap().len(), 10);
    let popped = b.pop_some("wide", "batch=3").await;
    assert_eq!(popped["messages"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn multi_partition_pop_claims_several_partitions_under_one_lease() {
    let b = TestBroker::start().await;
    for p in ["a", "b", "c"] {
        b.push("multi", p, &[(&format!("{p}1"), json!(1)), (&format!("{p}2"), json!(2))]).await;
    }
    let popped = b.pop_some("multi", "batch=100&partitions=3").await;
    assert_eq!(popped["messages"].as_array().unwrap().len(), 6);
    assert_eq!(distinct(&popped, "partitionId").len(), 3);
    let leases = distinct(&popped, "leaseId");
    assert_eq!(leases.len(), 1);
    assert_eq!(leases.iter().next().unwrap(), popped["leaseId"].as_str().unwrap());
    assert_eq!(popped["partitionsClaimed"], 3);
    // Within each partition, push order.
    for p in ["a", "b", "c"] {
        let mine: Vec<String> = tx_ids(&popped).into_iter().filter(|t| t.starts_with(p)).collect();
        assert_eq!(mine, [format!("{p}1"), format!("{p}2")]);
    }
    // Every partition is leased now.
    b.pop_none("multi", "batch=100&partitions=3").await;
}

#[tokio::test]
async fn pop_without_partitions_takes_exactly_one_partition() {
    let b = TestBroker::start().await;
    for p in 0..4 {
        let ids = txids(&format!("p{p}"), 5);
        b.push_txids("single", &format!("p{p}"), &ids).await;
    }
    let popped = b.pop_some("single", "batch=100").await;
    assert_eq!(popped["messages"].as_array().unwrap().len(), 5);
    assert_eq!(distinct(&popped, "partitionId").len(), 1);
    assert_eq!(popped["partitionsClaimed"], 1);
    let name = popped["partition"].as_str().unwrap();
    assert_eq!(tx_ids(&popped), txids(name, 5));
}

#[tokio::test]
async fn partition_route_pops_only_that_partition() {
    let b = TestBroker::start().await;
    b.push("routes", "left", &[("l1", json!(1))]).await;
    b.push("routes", "right", &[("r1", json!(1)), ("r2", json!(2))]).await;
    let (status, popped) = b.pop_partition("routes", "right", "batch=10").await;
    assert_eq!(status, 200);
    assert_eq!(tx_ids(&popped), ["r1", "r2"]);
    assert_eq!(popped["partition"], "right");
    let (status, _) = b.pop_partition("routes", "right", "batch=10").await;
    assert_eq!(status, 204, "right is leased");
    let (status, _) = b.pop_partition("routes", "nowhere", "batch=10").await;
    assert_eq!(status, 204, "a missing partition is empty");
    let (status, popped) = b.pop_partition("routes", "left", "batch=10").await;
    assert_eq!(status, 200);
    assert_eq!(tx_ids(&popped), ["l1"]);
}

#[tokio::test]
async fn pop_skips_leased_partition_but_serves_the_others() {
    let b = TestBroker::start().await;
    b.push("lanes", "x", &[("x1", json!(1)), ("x2", json!(2))]).await;
    b.push("lanes", "y", &[("y1", json!(1)), ("y2", json!(2))]).await;
    let first = b.pop_some("lanes", "batch=1").await;
    assert_eq!(first["messages"].as_array().unwrap().len(), 1);
    let leased = first["partition"].as_str().unwrap().to_owned();
    let other = if leased == "x" { "y" } else { "x" };
    // The rest of the leased partition is not served to another consumer...
    let (status, _) = b.pop_partition("lanes", &leased, "batch=10").await;
    assert_eq!(status, 204);
    // ...but the other partition is.
    let second = b.pop_some("lanes", "batch=10").await;
    assert_eq!(second["partition"], other);
    assert_eq!(tx_ids(&second), [format!("{other}1"), format!("{other}2")]);
    assert_ne!(second["leaseId"], first["leaseId"]);
    b.pop_none("lanes", "batch=10").await;
    // A different group is not blocked by queue mode's lease.
    let g = b.pop_some("lanes", "batch=10&subscriptionMode=all&consumerGroup=g&partitions=2").await;
    assert_eq!(g["messages"].as_array().unwrap().len(), 4);
    // Settling the batch frees the partition, and the rest comes next, in order.
    assert_eq!(b.ack(&first["messages"][0], "completed", None).await["leaseReleased"], true);
    let (status, rest) = b.pop_partition("lanes", &leased, "batch=10").await;
    assert_eq!(status, 200);
    assert_eq!(tx_ids(&rest), [format!("{leased}2")]);
}

#[tokio::test]
async fn long_poll_returns_soon_after_a_push_that_lands_later() {
    let b = TestBroker::start().await;
    let api = b.api();
    let pusher = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        api.push("lp", "Default", &[("late", json!({"n": 1}))]).await;
    });
    let start = Instant::now();
    let (status, popped) = b.get("/api/v1/pop/queue/lp?wait=true&timeout=10000&batch=1").await;
    let took = start.elapsed();
    pusher.await.unwrap();
    assert_eq!(status, 200, "{popped}");
    assert_eq!(tx_ids(&popped), ["late"]);
    assert!(took >= Duration::from_millis(900), "returned before the push: {took:?}");
    assert!(took < Duration::from_millis(3000), "long poll was slow to notice the push: {took:?}");
}

#[tokio::test]
async fn long_poll_of_a_consumer_group_wakes_on_push() {
    let b = TestBroker::start().await;
    let api = b.api();
    let pusher = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        api.push("lpg", "p7", &[("late", json!(1))]).await;
    });
    let start = Instant::now();
    let (status, popped) = b
        .get("/api/v1/pop/queue/lpg?wait=true&timeout=10000&batch=5&consumerGroup=g&subscriptionMode=new")
        .await;
    pusher.await.unwrap();
    assert_eq!(status, 200, "{popped}");
    assert_eq!(tx_ids(&popped), ["late"]);
    assert!(start.elapsed() < Duration::from_millis(3000));
}

#[tokio::test]
async fn long_poll_answers_204_at_timeout() {
    let b = TestBroker::start().await;
    let start = Instant::now();
    let (status, body) = b.get("/api/v1/pop/queue/quiet?wait=true&timeout=1000&batch=1").await;
    let took = start.elapsed();
    assert_eq!(status, 204);
    assert!(body.is_null());
    assert!(took >= Duration::from_millis(950), "answered before the timeout: {took:?}");
    assert!(took < Duration::from_millis(2500), "answered long after the timeout: {took:?}");
}

#[tokio::test]
async fn auto_ack_commits_the_cursor_at_delivery_without_a_lease() {
    let b = TestBroker::start().await;
    b.push("auto", "Default", &[("a1", json!(1)), ("a2", json!(2))]).await;
    let popped = b.pop_some("auto", "batch=10&autoAck=true").await;
    assert_eq!(tx_ids(&popped), ["a1", "a2"]);
    assert_eq!(popped["leaseId"], "");
    assert!(popped["messages"].as_array().unwrap().iter().all(|m| m["leaseId"] == ""));
    b.pop_none("auto", "batch=10").await;
    assert_eq!(
        b.scalar("SELECT count(*) FROM queen.cursors WHERE consumer_group = '__QUEUE_MODE__' AND next_seq = 2 AND lease_id IS NULL")
            .await,
        1
    );
    // A later push is delivered, and only it.
    b.push("auto", "Default", &[("a3", json!(3))]).await;
    assert_eq!(tx_ids(&b.pop_some("auto", "batch=10&autoAck=true").await), ["a3"]);
}

/// 10 workers popping batch=1 and acking each one from a single partition:
/// the partition lease serialises them, so the acks follow push order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_is_strict_under_10_concurrent_consumers() {
    let b = TestBroker::start().await;
    let ids = txids("s", 200);
    for chunk in ids.chunks(50) {
        b.push_txids("strict", "Default", chunk).await;
    }
    let order = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut workers = Vec::new();
    for _ in 0..10 {
        let api = b.api();
        let order = order.clone();
        workers.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut mine = 0;
            loop {
                if order.lock().unwrap().len() >= 200 {
                    return mine;
                }
                assert!(Instant::now() < deadline, "consumers did not drain the queue");
                let (status, popped) = api.pop("strict", "batch=1").await;
                if status == 204 {
                    tokio::task::yield_now().await;
                    continue;
                }
                assert_eq!(status, 200);
                let msg = &popped["messages"][0];
                // Recorded while the lease is held: no other worker can pop
                // the next message until the ack below commits.
                order.lock().unwrap().push(msg["transactionId"].as_str().unwrap().to_owned());
                let acked = api.ack(msg, "completed", None).await;
                assert_eq!(acked["success"], true, "{acked}");
                assert_eq!(acked["leaseReleased"], true);
                mine += 1;
            }
        }));
    }
    let mut per_worker = Vec::new();
    for w in workers {
        per_worker.push(w.await.unwrap());
    }
    assert_eq!(*order.lock().unwrap(), ids);
    assert_eq!(per_worker.iter().sum::<usize>(), 200);
}

// ---------------------------------------------------------------- configure

#[tokio::test]
async fn configure_echoes_the_effective_options() {
    let b = TestBroker::start().await;
    let body = b
        .configure_ok("conf", json!({"leaseTime": 60, "retryLimit": 5, "priority": 7, "maxSize": 5000}))
        .await;
    assert_eq!(body["configured"], true);
    assert_eq!(body["queue"], "conf");
    let o = &body["options"];
    assert_eq!(o["leaseTime"], 60);
    assert_eq!(o["retryLimit"], 5);
    assert_eq!(o["priority"], 7);
    assert_eq!(o["maxSize"], 5000);
    // Defaults for everything not given.
    assert_eq!(o["retryDelay"], 0, "redeliver at once");
    assert_eq!(o["ttl"], 0, "never expire");
    assert_eq!(o["deadLetterQueue"], true);
    assert_eq!(o["dlqAfterMaxRetries"], true);
    assert_eq!(o["delayedProcessing"], 0);
    assert_eq!(o["windowBuffer"], 0);
    assert_eq!(o["dedupWindowSeconds"], 3600);
    assert_eq!(b.scalar("SELECT lease_time::bigint FROM queen.queues WHERE name = 'conf'").await, 60);
}

#[tokio::test]
async fn configure_merges_absent_keys_and_replace_resets_them() {
    let b = TestBroker::start().await;
    b.configure_ok("merge", json!({"leaseTime": 60, "retryLimit": 5})).await;
    let merged = b.configure_ok("merge", json!({"priority": 7})).await;
    assert_eq!(merged["options"]["leaseTime"], 60, "absent key keeps the stored value");
    assert_eq!(merged["options"]["retryLimit"], 5);
    assert_eq!(merged["options"]["priority"], 7);
    let (status, replaced) = b
        .post(
            "/api/v1/configure",
            &json!({"queue": "merge", "mode": "replace", "options": {"retryLimit": 1}}),
        )
        .await;
    assert_eq!(status, 200, "{replaced}");
    assert_eq!(replaced["options"]["leaseTime"], 300);
    assert_eq!(replaced["options"]["priority"], 0);
    assert_eq!(replaced["options"]["retryLimit"], 1);
}

#[tokio::test]
async fn configure_tolerates_null_namespace_task_and_the_client_defaults() {
    let b = TestBroker::start().await;
    let defaults = json!({"leaseTime": 300, "retryLimit": 3, "priority": 0, "delayedProcessing": 0, "windowBuffer": 0,
        "maxSize": 0, "retentionSeconds": 0, "completedRetentionSeconds": 0, "encryptionEnabled": false,
        "dlqAfterMaxRetries": true});
    let (status, body) = b
        .post(
            "/api/v1/configure",
            &json!({"queue": "client", "namespace": null, "task": null, "options": defaults}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["configured"], true);
    assert_eq!(body["options"]["leaseTime"], 300);
    let (status, body) = b
        .post(
            "/api/v1/configure",
            &json!({"queue": "client2", "namespace": "ns", "task": "t", "options": null}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn configure_refuses_an_unknown_option_naming_it() {
    let b = TestBroker::start().await;
    let (status, body) = b.configure("conf", json!({"leaseTime": 60, "bogusOption": 1})).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("bogusOption"), "{body}");
    assert_eq!(b.written_rows().await, 0, "a refused configure writes nothing");
}

#[tokio::test]
async fn configure_refuses_bad_option_values_naming_them() {
    let b = TestBroker::start().await;
    for (key, value) in [
        ("retryDelay", json!(-1)),
        ("ttl", json!("ten")),
        ("retentionSeconds", json!(-5)),
        ("maxWaitTimeSeconds", json!(1.5)),
        ("leaseTime", json!("sixty")),
        ("leaseTime", json!(0)),
    ] {
        let (status, body) = b.configure("conf", json!({ key: value })).await;
        assert_eq!(status, 400, "{key}: {body}");
        assert!(body["error"].as_str().unwrap().contains(key), "{body}");
    }
    assert_eq!(b.written_rows().await, 0);
}

#[tokio::test]
async fn delayed_processing_hides_messages_until_they_are_due() {
    let b = TestBroker::start().await;
    b.configure_ok("delayed", json!({"delayedProcessing": 1})).await;
    let start = Instant::now();
    b.push("delayed", "Default", &[("d1", json!(1))]).await;
    b.pop_none("delayed", "batch=10").await;
    let popped = eventually(Duration::from_secs(5), "the delayed message", || async {
        let (status, body) = b.pop("delayed", "batch=10").await;
        (status == 200).then_some(body)
    })
    .await;
    let took = start.elapsed();
    assert_eq!(tx_ids(&popped), ["d1"]);
    assert!(took >= Duration::from_millis(950), "delivered too early: {took:?}");
    assert!(took < Duration::from_millis(3000), "delivered too late: {took:?}");
}

#[tokio::test]
async fn long_poll_wakes_for_a_delayed_message_when_it_becomes_due() {
    let b = TestBroker::start().await;
    b.configure_ok("delayed-lp", json!({"delayedProcessing": 1})).await;
    let start = Instant::now();
    b.push("delayed-lp", "Default", &[("d1", json!(1))]).await;
    let (status, popped) = b.get("/api/v1/pop/queue/delayed-lp?wait=true&timeout=5000&batch=1").await;
    let took = start.elapsed();
    assert_eq!(status, 200);
    assert_eq!(tx_ids(&popped), ["d1"]);
    assert!(took >= Duration::from_millis(950) && took < Duration::from_millis(3000), "{took:?}");
}

#[tokio::test]
async fn window_buffer_holds_a_partition_until_it_is_quiet() {
    let b = TestBroker::start().await;
    b.configure_ok("window", json!({"windowBuffer": 1})).await;
    b.push("window", "Default", &[("w1", json!(1))]).await;
    b.pop_none("window", "batch=10").await;
    // The window is about time: keep the partition busy for a moment.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let last_push = Instant::now();
    b.push("window", "Default", &[("w2", json!(2))]).await;
    b.pop_none("window", "batch=10").await;
    let popped = eventually(Duration::from_secs(5), "the quiet partition", || async {
        let (status, body) = b.pop("window", "batch=10").await;
        (status == 200).then_some(body)
    })
    .await;
    let took = last_push.elapsed();
    assert_eq!(tx_ids(&popped), ["w1", "w2"], "the whole window is delivered together");
    assert!(took >= Duration::from_millis(950), "delivered before the partition was quiet: {took:?}");
    assert!(took < Duration::from_millis(3000));
}

#[tokio::test]
async fn max_size_refuses_pushes_over_capacity() {
    let b = TestBroker::start().await;
    b.configure_ok("bounded", json!({"maxSize": 3})).await;
    let ok = b.push("bounded", "Default", &[("b1", json!(1)), ("b2", json!(2)), ("b3", json!(3))]).await;
    assert!(ok.as_array().unwrap().iter().all(|r| r["status"] == "queued"));
    let full = b.push("bounded", "other", &[("b4", json!(4))]).await;
    assert_eq!(full[0]["status"], "failed");
    assert!(full[0]["error"].as_str().unwrap().contains("capacity"), "{full}");
    assert_eq!(b.scalar("SELECT count(*) FROM queen.messages").await, 3);
    // Consuming makes room.
    let popped = b.pop_some("bounded", "batch=10&autoAck=true").await;
    assert_eq!(popped["messages"].as_array().unwrap().len(), 3);
    let again = b.push("bounded", "other", &[("b4", json!(4))]).await;
    assert_eq!(again[0]["status"], "queued");
}

// ---------------------------------------------------------------- delete queue

#[tokio::test]
async fn delete_queue_removes_it_with_its_messages() {
    let b = TestBroker::start().await;
    b.push("doomed", "p1", &[("d1", json!(1)), ("d2", json!(2))]).await;
    b.push("kept", "p1", &[("k1", json!(1))]).await;
    b.pop_some("doomed", "batch=1&subscriptionMode=all&consumerGroup=g").await;
    let (status, body) = b.delete("/api/v1/resources/queues/doomed").await;
    assert_eq!(status, 200);
    assert_eq!(body, json!({"deleted": true, "queue": "doomed", "existed": true}));
    assert_eq!(
        b.scalar(
            "SELECT (SELECT count(*) FROM queen.queues WHERE name = 'doomed')
                  + (SELECT count(*) FROM queen.messages WHERE transaction_id LIKE 'd%')
                  + (SELECT count(*) FROM queen.consumer_groups WHERE queue_name = 'doomed')"
        )
        .await,
        0
    );
    b.pop_none("doomed", "batch=10").await;
    assert_eq!(tx_ids(&b.pop_some("kept", "batch=10").await), ["k1"], "other queues are untouched");
    // The name can be used again from scratch.
    b.push("doomed", "p1", &[("d1", json!(1))]).await;
    assert_eq!(tx_ids(&b.pop_some("doomed", "batch=10").await), ["d1"]);
}

#[tokio::test]
async fn delete_of_a_missing_queue_answers_deleted_false() {
    let b = TestBroker::start().await;
    let (status, body) = b.delete("/api/v1/resources/queues/never-was").await;
    assert_eq!(status, 200);
    assert_eq!(body["deleted"], false);
    assert_eq!(body["existed"], false);
}

// ---------------------------------------------------------------- more

#[tokio::test]
async fn delayed_processing_delivers_only_the_messages_that_are_due() {
    let b = TestBroker::start().await;
    b.configure_ok("due", json!({"delayedProcessing": 1})).await;
    b.push("due", "Default", &[("early", json!(1))]).await;
    // The rule is about time: the second message is younger by half a second.
    tokio::time::sleep(Duration::from_millis(500)).await;
    b.push("due", "Default", &[("later", json!(2))]).await;
    let first = eventually(Duration::from_secs(5), "the first message to be due", || async {
        let (status, body) = b.pop("due", "batch=10").await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(tx_ids(&first), ["early"], "the younger message is not due yet");
    b.ack(&first["messages"][0], "completed", None).await;
    let second = eventually(Duration::from_secs(5), "the second message to be due", || async {
        let (status, body) = b.pop("due", "batch=10").await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(tx_ids(&second), ["later"]);
}

#[tokio::test]
async fn dedup_window_is_configurable_and_expires() {
    let b = TestBroker::start().await;
    b.configure_ok("window-dedup", json!({"dedupWindowSeconds": 1})).await;
    let first = b.push("window-dedup", "Default", &[("same", json!(1))]).await;
    assert_eq!(b.push("window-dedup", "Default", &[("same", json!(2))]).await[0]["status"], "duplicate");
    let again = eventually(Duration::from_secs(5), "the dedup window to pass", || async {
        let r = b.push("window-dedup", "Default", &[("same", json!(3))]).await;
        (r[0]["status"] == "queued").then_some(r)
    })
    .await;
    assert_ne!(again[0]["message_id"], first[0]["message_id"]);
    let popped = b.pop_some("window-dedup", "batch=10").await;
    assert_eq!(tx_ids(&popped), ["same", "same"]);
    assert_eq!(popped["messages"][1]["data"], json!(3));
}

/// Many consumers sweeping many partitions and batch-acking across them at
/// once: nothing is lost, nothing is delivered twice, no call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_multi_partition_consumers_consume_everything_exactly_once() {
    let b = TestBroker::start().await;
    let mut items = Vec::new();
    for p in 0..8 {
        for i in 0..25 {
            items.push(json!({"queue": "sweep", "partition": format!("p{p}"), "transactionId": format!("p{p}-{i:02}"), "payload": i}));
        }
    }
    b.push_items(json!(items)).await;
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut workers = Vec::new();
    for w in 0..6 {
        let api = b.api();
        let seen = seen.clone();
        workers.push(tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut idle = 0;
            while idle < 20 {
                assert!(Instant::now() < deadline, "consumers did not finish");
                let (status, popped) = api.pop("sweep", &format!("batch={}&partitions=3", 4 + w)).await;
                if status == 204 {
                    idle += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                assert_eq!(status, 200, "{popped}");
                idle = 0;
                let msgs = popped["messages"].as_array().unwrap();
                seen.lock().unwrap().extend(tx_ids(&popped));
                let acks: Vec<Value> = msgs
                    .iter()
                    .map(|m| json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "completed", "error": null}))
                    .collect();
                let res = api.ack_batch(json!(acks), None).await;
                assert!(res.as_array().unwrap().iter().all(|r| r["success"] == true), "{res}");
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 200, "every message exactly once");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 200);
    for p in 0..8 {
        let lane: Vec<&String> = seen.iter().filter(|t| t.starts_with(&format!("p{p}-"))).collect();
        let mut sorted = lane.clone();
        sorted.sort();
        assert_eq!(lane, sorted, "partition p{p} in order");
    }
}

/// Over HTTP, with the broker's default options: racing auto-ack pops meet
/// in the pop batcher and still deliver every message exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_http_pops_share_statements_and_deliver_each_message_once() {
    let b = TestBroker::start().await;
    for p in 0..16 {
        b.push_txids("http", &format!("p{p}"), &txids(&format!("p{p}"), 4)).await;
    }
    let mut seen: HashSet<String> = HashSet::new();
    for _round in 0..20 {
        let answers = common::all_at_once((0..32).collect::<Vec<_>>(), |_| {
            let api = b.api();
            async move { api.get("/api/v1/pop/queue/http?batch=2&wait=false&autoAck=true").await }
        })
        .await;
        for (status, body) in answers {
            match status {
                200 => {
                    for tx in tx_ids(&body) {
                        assert!(seen.insert(tx.clone()), "{tx} delivered twice");
                    }
                }
                204 => {}
                other => panic!("pop answered {other}: {body}"),
            }
        }
        if seen.len() == 64 {
            break;
        }
    }
    assert_eq!(seen.len(), 64, "every message is delivered");
    let sizes = b.engine.batch_sizes(queen_engine::BatchKind::Pop);
    assert!(
        sizes.count < sizes.sum,
        "{} statements for {} pops: nothing was batched",
        sizes.count,
        sizes.sum
    );
    assert_eq!(sizes.retried, 0);
}

/// Every pop path answers the one element the engine writes
/// (`queen_wire::PopAnswer`): a named lane, a walk over lanes, a pop by
/// namespace and an auto-ack pop, with every field's value, and each
/// payload's exact text.
#[tokio::test]
async fn a_pop_answers_every_field_of_every_message_on_every_path() {
    let b = TestBroker::start().await;
    let (status, body) =
        b.post("/api/v1/configure", &json!({"queue": "shape", "namespace": "shapes", "task": "t"})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = b
        .post_raw(
            "/api/v1/push",
            r#"{"items": [
                {"queue": "shape", "partition": "a", "transactionId": "a1", "traceId": "trace-1", "payload": {"n": 1, "s": "x y"}},
                {"queue": "shape", "partition": "a", "transactionId": "a2", "payload": null},
                {"queue": "shape", "partition": "b", "transactionId": "b1", "payload": [1,2.50, "\u00e9"]}]}"#,
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let sql = b.sql().await;
    let lane = |name: &'static str| {
        let sql = &sql;
        async move {
            let row = sql
                .query_one("SELECT id::text FROM queen.partitions WHERE name = $1", &[&name])
                .await
                .unwrap();
            row.get::<_, String>(0)
        }
    };
    let (lane_a, lane_b) = (lane("a").await, lane("b").await);
    let payloads = [("a1", r#"{"n": 1, "s": "x y"}"#), ("a2", "null"), ("b1", r#"[1,2.50, "\u00e9"]"#)];
    let raw = |path: String| {
        let url = b.api().url(&path);
        async move {
            let answer = reqwest::get(url).await.unwrap();
            assert_eq!(answer.status(), 200, "{path}");
            answer.text().await.unwrap()
        }
    };
    let answer_keys = [
        "consumerGroup",
        "leaseId",
        "messages",
        "partition",
        "partitionId",
        "partitionsClaimed",
        "queue",
        "success",
    ];
    let message_keys = [
        "consumerGroup",
        "createdAt",
        "data",
        "id",
        "leaseId",
        "partition",
        "partitionId",
        "producerSub",
        "queue",
        "traceId",
        "transactionId",
    ];
    let paths = [
        ("/api/v1/pop/queue/shape/partition/a?wait=false&batch=10", "__QUEUE_MODE__", 1, false),
        ("/api/v1/pop/queue/shape?wait=false&batch=10&partitions=2&consumerGroup=g1&subscriptionMode=all", "g1", 2, false),
        ("/api/v1/pop?namespace=shapes&wait=false&batch=10&partitions=2&consumerGroup=g2&subscriptionMode=all", "g2", 2, false),
        ("/api/v1/pop/queue/shape?wait=false&batch=10&partitions=2&consumerGroup=g3&subscriptionMode=all&autoAck=true", "g3", 2, true),
    ];
    for (path, group, lanes, auto_ack) in paths {
        let text = raw(path.to_owned()).await;
        for (tx, payload) in payloads.iter().take(if lanes == 1 { 2 } else { 3 }) {
            assert!(text.contains(&format!(r#""data":{payload}"#)), "{path}: {tx}'s payload as sent: {text}");
        }
        let answer: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(kvh::fields(&answer), answer_keys.iter().map(|k| k.to_string()).collect(), "{path}");
        assert_eq!(answer["success"], true);
        assert_eq!(answer["queue"], "shape");
        assert_eq!(answer["consumerGroup"], group, "{path}");
        assert_eq!(answer["partitionsClaimed"], lanes, "{path}");
        let lease = answer["leaseId"].as_str().unwrap();
        assert_eq!(lease.is_empty(), auto_ack, "{path}: {answer}");
        let messages = answer["messages"].as_array().unwrap();
        assert_eq!(messages.len(), if lanes == 1 { 2 } else { 3 }, "{path}");
        let first = &messages[0];
        assert_eq!(
            [&answer["partition"], &answer["partitionId"]],
            [&first["partition"], &first["partitionId"]]
        );
        for m in messages {
            assert_eq!(kvh::fields(m), message_keys.iter().map(|k| k.to_string()).collect(), "{path}");
            let tx = m["transactionId"].as_str().unwrap();
            let (name, id) = if tx.starts_with('a') { ("a", &lane_a) } else { ("b", &lane_b) };
            assert_eq!(m["partition"], name, "{path}");
            assert_eq!(m["partitionId"], id.as_str(), "{path}");
            assert_eq!(m["queue"], "shape");
            assert_eq!(m["leaseId"], lease);
            assert_eq!(m["consumerGroup"], group);
            assert_eq!(m["traceId"], if tx == "a1" { json!("trace-1") } else { Value::Null }, "{path}");
            assert_eq!(m["producerSub"], Value::Null);
            assert!(uuid::Uuid::parse_str(m["id"].as_str().unwrap()).is_ok(), "{m}");
            assert!(kvh::is_ts(m["createdAt"].as_str().unwrap()), "{m}");
        }
        let order: Vec<&str> = messages.iter().map(|m| m["transactionId"].as_str().unwrap()).collect();
        let a_order: Vec<&str> = order.iter().copied().filter(|t| t.starts_with('a')).collect();
        assert_eq!(a_order, ["a1", "a2"], "{path}: a lane in offset order");
        assert!(
            order.starts_with(&["a1", "a2"]) || order.ends_with(&["a1", "a2"]),
            "{path}: a lane's messages together: {order:?}"
        );
    }
}
