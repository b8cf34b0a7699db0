//! Consumer groups: fan-out, queue mode, subscription modes, and the group
//! routes (delete, subscription, seek).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::{tx_ids, txids, TestBroker};
use serde_json::{json, Value};

/// Pops everything `group` can see in one call and commits it.
async fn drain(b: &TestBroker, queue: &str, group: &str, extra: &str) -> Vec<String> {
    let (status, popped) =
        b.pop(queue, &format!("batch=100&partitions=10&consumerGroup={group}&{extra}")).await;
    if status == 204 {
        return Vec::new();
    }
    assert_eq!(status, 200, "{popped}");
    let acks: Vec<Value> = popped["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| json!({"transactionId": m["transactionId"], "partitionId": m["partitionId"], "leaseId": m["leaseId"], "status": "completed", "error": null}))
        .collect();
    let res = b.ack_batch(json!(acks), Some(group)).await;
    assert!(res.as_array().unwrap().iter().all(|r| r["success"] == true), "{res}");
    tx_ids(&popped)
}

#[tokio::test]
async fn every_consumer_group_sees_every_message() {
    let b = TestBroker::start().await;
    let ids = txids("m", 3);
    b.push_txids("fan", "Default", &ids).await;
    assert_eq!(drain(&b, "fan", "g1", "subscriptionMode=all").await, ids);
    assert_eq!(drain(&b, "fan", "g2", "subscriptionMode=all").await, ids);
    assert_eq!(drain(&b, "fan", "g1", "").await, Vec::<String>::new());
    b.push("fan", "Default", &[("late", json!(1))]).await;
    assert_eq!(drain(&b, "fan", "g1", "").await, ["late"]);
    assert_eq!(drain(&b, "fan", "g2", "").await, ["late"]);
}

#[tokio::test]
async fn workers_in_one_group_compete_for_partitions() {
    let b = TestBroker::start().await;
    b.push("compete", "p1", &[("a", json!(1))]).await;
    b.push("compete", "p2", &[("b", json!(1))]).await;
    let w1 = b.pop_some("compete", "batch=10&subscriptionMode=all&consumerGroup=g").await;
    let w2 = b.pop_some("compete", "batch=10&subscriptionMode=all&consumerGroup=g").await;
    assert_ne!(w1["partition"], w2["partition"]);
    b.pop_none("compete", "batch=10&consumerGroup=g").await;
    assert_eq!(w1["consumerGroup"], "g");
    assert_eq!(w1["messages"][0]["consumerGroup"], "g");
}

#[tokio::test]
async fn queue_mode_is_independent_of_consumer_groups() {
    let b = TestBroker::start().await;
    let ids = txids("m", 3);
    b.push_txids("independent", "Default", &ids).await;
    assert_eq!(drain(&b, "independent", "billing", "subscriptionMode=all").await, ids);
    let q = b.pop_some("independent", "batch=10").await;
    assert_eq!(tx_ids(&q), ids, "queue mode still sees what billing consumed");
    assert_eq!(q["consumerGroup"], "__QUEUE_MODE__");
    // Queue mode ignores subscriptionMode.
    let b2 = TestBroker::start().await;
    b2.push_txids("independent", "Default", &ids).await;
    let q = b2.pop_some("independent", "batch=10&subscriptionMode=new").await;
    assert_eq!(tx_ids(&q), ids);
}

/// Queen 1.6's default (`DEFAULT_SUBSCRIPTION_MODE=new`): a group whose
/// first pop names no start skips what was there before it came, in every
/// partition, and gets everything later, in lanes created later too.
#[tokio::test]
async fn a_new_group_starts_at_the_tail_by_default() {
    let b = TestBroker::start().await;
    b.push_txids("tail", "Default", &txids("history", 3)).await;
    b.push_txids("tail", "old-lane", &txids("old", 2)).await;
    b.pop_none("tail", "batch=100&partitions=10&consumerGroup=g").await;
    assert_eq!(
        b.scalar("SELECT count(*) FROM queen.consumer_groups WHERE name = 'g' AND subscription_mode = 'new'")
            .await,
        1,
        "the group registered with the default start"
    );
    b.push_txids("tail", "old-lane", &txids("fresh", 2)).await;
    b.push("tail", "new-lane", &[("n1", json!(1))]).await;
    let mut got = drain(&b, "tail", "g", "").await;
    got.sort();
    assert_eq!(got, ["fresh-0", "fresh-1", "n1"]);
    // An explicit mode still reads the history; queue mode is unaffected.
    assert_eq!(drain(&b, "tail", "archive", "subscriptionMode=all").await.len(), 8);
    assert_eq!(drain(&b, "tail", "replay", "subscriptionMode=from_beginning").await.len(), 8);
    let q = b.pop_some("tail", "batch=100&partitions=10").await;
    assert_eq!(tx_ids(&q).len(), 8, "queue mode reads from the beginning");
}

/// `DEFAULT_SUBSCRIPTION_MODE=all` restores the start at the beginning.
#[tokio::test]
async fn the_default_start_of_a_new_group_is_a_setting() {
    let options = queen_engine::EngineOptions {
        default_subscription_mode: queen_engine::SubscriptionMode::All,
        ..queen_engine::EngineOptions::default()
    };
    let b = TestBroker::start_with_options(options).await;
    let ids = txids("m", 3);
    b.push_txids("setting", "Default", &ids).await;
    assert_eq!(drain(&b, "setting", "g", "").await, ids);
    assert_eq!(
        b.scalar("SELECT count(*) FROM queen.consumer_groups WHERE name = 'g' AND subscription_mode = 'all'")
            .await,
        1
    );
    // An explicit `new` still wins over the default.
    assert_eq!(drain(&b, "setting", "h", "subscriptionMode=new").await, Vec::<String>::new());
    // The parser takes Queen's spellings; an empty value is Queen's old default.
    for (text, mode) in [
        ("", queen_engine::SubscriptionMode::All),
        ("from_beginning", queen_engine::SubscriptionMode::All),
        ("NEW", queen_engine::SubscriptionMode::New),
        ("new-only", queen_engine::SubscriptionMode::New),
    ] {
        assert_eq!(text.parse::<queen_engine::SubscriptionMode>(), Ok(mode), "{text:?}");
    }
    assert!("latest".parse::<queen_engine::SubscriptionMode>().is_err());
}

#[tokio::test]
async fn subscription_mode_new_registers_on_an_empty_first_pop_and_gets_only_later_messages() {
    let b = TestBroker::start().await;
    b.push_txids("news", "Default", &txids("history", 5)).await;
    b.push_txids("news", "old-lane", &txids("old", 2)).await;
    b.pop_none("news", "batch=100&partitions=10&consumerGroup=g&subscriptionMode=new").await;
    assert_eq!(
        b.scalar("SELECT count(*) FROM queen.consumer_groups WHERE name = 'g' AND subscription_mode = 'new'")
            .await,
        1,
        "the empty pop registered the group"
    );
    let fresh = txids("fresh", 3);
    b.push_txids("news", "Default", &fresh).await;
    let got = drain(&b, "news", "g", "subscriptionMode=new").await;
    assert_eq!(got, fresh);
    // A lane created after registration is new in full.
    b.push("news", "new-lane", &[("n1", json!(1))]).await;
    assert_eq!(drain(&b, "news", "g", "subscriptionMode=new").await, ["n1"]);
}

#[tokio::test]
async fn new_only_alias_and_a_group_registered_before_the_queue_exists() {
    let b = TestBroker::start().await;
    b.pop_none("later", "batch=10&consumerGroup=early&subscriptionMode=new-only").await;
    b.push_txids("later", "Default", &txids("m", 2)).await;
    assert_eq!(drain(&b, "later", "early", "subscriptionMode=new-only").await, txids("m", 2));
}

#[tokio::test]
async fn the_stored_position_wins_over_later_subscription_parameters() {
    let b = TestBroker::start().await;
    let history = txids("h", 3);
    b.push_txids("sticky", "Default", &history).await;
    // Registered as "new": asking for "all" later does not bring history back.
    b.pop_none("sticky", "batch=10&consumerGroup=newbie&subscriptionMode=new").await;
    b.pop_none("sticky", "batch=10&consumerGroup=newbie&subscriptionMode=all").await;
    b.pop_none("sticky", "batch=10&consumerGroup=newbie&subscriptionMode=from_beginning").await;
    // Registered as "all": asking for "new" later does not skip anything.
    let first = b.pop_some("sticky", "batch=1&consumerGroup=veteran&subscriptionMode=all").await;
    assert_eq!(tx_ids(&first), ["h-0"]);
    b.ack(&first["messages"][0], "completed", Some("veteran")).await;
    assert_eq!(drain(&b, "sticky", "veteran", "subscriptionMode=new").await, ["h-1", "h-2"]);
}

#[tokio::test]
async fn subscription_from_now_skips_what_exists_at_registration() {
    let b = TestBroker::start().await;
    b.push_txids("now", "Default", &txids("h", 3)).await;
    b.pop_none("now", "batch=10&consumerGroup=g&subscriptionFrom=now").await;
    b.push("now", "Default", &[("after", json!(1))]).await;
    assert_eq!(drain(&b, "now", "g", "subscriptionFrom=now").await, ["after"]);
}

#[tokio::test]
async fn subscription_from_a_timestamp_starts_at_that_time() {
    let b = TestBroker::start().await;
    for tx in ["a", "b", "c"] {
        b.push("since", "Default", &[(tx, json!(tx))]).await;
    }
    let all = b.pop_some("since", "batch=10").await;
    let at_b = all["messages"][1]["createdAt"].as_str().unwrap().to_owned();
    let got = drain(&b, "since", "g", &format!("subscriptionFrom={at_b}")).await;
    assert_eq!(got, ["b", "c"]);
    for (param, value) in [("subscriptionFrom", "yesterday-ish"), ("subscriptionMode", "sometimes")] {
        let (status, body) = b.pop("since", &format!("batch=10&consumerGroup=bad&{param}={value}")).await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"].as_str().unwrap().contains(param), "{body}");
    }
    assert_eq!(
        b.scalar("SELECT count(*) FROM queen.consumer_groups WHERE name = 'bad'").await,
        0,
        "a refused pop registers nothing"
    );
}

#[tokio::test]
async fn deleting_a_consumer_group_lets_it_register_afresh() {
    let b = TestBroker::start().await;
    let ids = txids("m", 3);
    b.push_txids("del", "Default", &ids).await;
    b.push_txids("del2", "Default", &ids).await;
    assert_eq!(drain(&b, "del", "g", "subscriptionMode=all").await, ids);
    assert_eq!(drain(&b, "del2", "g", "subscriptionMode=all").await, ids);
    let (status, body) = b.delete("/api/v1/consumer-groups/g?deleteMetadata=true").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["consumerGroup"], "g");
    assert_eq!(body["deletedPartitions"], 2);
    assert_eq!(body["metadataDeleted"], true);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.cursors WHERE consumer_group = 'g'").await, 0);
    // Registers again, this time as "new".
    b.pop_none("del", "batch=10&consumerGroup=g&subscriptionMode=new").await;
    b.push("del", "Default", &[("later", json!(1))]).await;
    assert_eq!(drain(&b, "del", "g", "").await, ["later"]);
    // Queue mode was never touched.
    assert_eq!(tx_ids(&b.pop_some("del", "batch=10").await), ["m-0", "m-1", "m-2", "later"]);
}

#[tokio::test]
async fn deleting_a_group_but_keeping_its_metadata_restarts_it_from_its_subscription() {
    let b = TestBroker::start().await;
    let ids = txids("m", 3);
    b.push_txids("keep", "Default", &ids).await;
    assert_eq!(drain(&b, "keep", "g", "subscriptionMode=all").await, ids);
    let (status, body) = b.delete("/api/v1/consumer-groups/g/queues/keep?deleteMetadata=false").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["metadataDeleted"], false);
    assert_eq!(b.scalar("SELECT count(*) FROM queen.consumer_groups WHERE name = 'g'").await, 1);
    assert_eq!(drain(&b, "keep", "g", "subscriptionMode=new").await, ids, "restarted from its stored 'all'");
}

#[tokio::test]
async fn a_group_of_mode_new_restarts_after_its_join_time_when_its_cursors_are_deleted() {
    let b = TestBroker::start().await;
    b.push_txids("rejoin", "Default", &txids("h", 2)).await;
    b.pop_none("rejoin", "batch=10&consumerGroup=g&subscriptionMode=new").await;
    let fresh = txids("f", 2);
    b.push_txids("rejoin", "Default", &fresh).await;
    assert_eq!(drain(&b, "rejoin", "g", "").await, fresh);
    let (status, _) = b.delete("/api/v1/consumer-groups/g?deleteMetadata=false").await;
    assert_eq!(status, 200);
    assert_eq!(drain(&b, "rejoin", "g", "").await, fresh, "history before the join stays invisible");
}

#[tokio::test]
async fn seek_to_end_skips_the_backlog() {
    let b = TestBroker::start().await;
    b.push_txids("seek", "Default", &txids("m", 2)).await;
    let first = b.pop_some("seek", "batch=1&subscriptionMode=all&consumerGroup=g").await;
    b.push_txids("seek", "Default", &txids("n", 3)).await;
    let (status, body) = b.post("/api/v1/consumer-groups/g/queues/seek/seek", &json!({"toEnd": true})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["seekToEnd"], true);
    assert_eq!(body["partitionsUpdated"], 1);
    b.pop_none("seek", "batch=10&consumerGroup=g").await;
    // The seek cleared the old lease; a late ack of what was skipped is a no-op.
    let late = b.ack(&first["messages"][0], "completed", Some("g")).await;
    assert_eq!((late["success"].clone(), late["noop"].clone()), (json!(true), json!(true)), "{late}");
    let (_, ext) =
        b.post_empty(&format!("/api/v1/lease/{}/extend", first["leaseId"].as_str().unwrap())).await;
    assert_eq!(ext["success"], false);
    b.push("seek", "Default", &[("after", json!(1))]).await;
    assert_eq!(drain(&b, "seek", "g", "").await, ["after"]);
}

#[tokio::test]
async fn seek_to_a_timestamp_replays_what_came_after_it() {
    let b = TestBroker::start().await;
    for tx in ["a", "b", "c"] {
        b.push("replay", "Default", &[(tx, json!(tx))]).await;
    }
    let got = b.pop_some("replay", "batch=10&subscriptionMode=all&consumerGroup=g").await;
    let at_a = got["messages"][0]["createdAt"].as_str().unwrap().to_owned();
    b.ack(&got["messages"][2], "completed", Some("g")).await;
    b.pop_none("replay", "batch=10&consumerGroup=g").await;
    let (status, body) =
        b.post("/api/v1/consumer-groups/g/queues/replay/seek", &json!({"timestamp": at_a})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["seekToEnd"], false);
    assert!(body["targetTimestamp"].is_string());
    assert_eq!(drain(&b, "replay", "g", "").await, ["b", "c"]);
    let (status, body) = b.post("/api/v1/consumer-groups/g/queues/replay/seek", &json!({})).await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("toEnd"), "{body}");
    let (status, body) =
        b.post("/api/v1/consumer-groups/g/queues/replay/seek", &json!({"timestamp": "soon"})).await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("timestamp"), "{body}");
}

/// The group's cursors as text (group:partition:next_seq:leased), to show a
/// refused seek changed nothing.
async fn cursor_state(b: &TestBroker) -> String {
    let row = b
        .sql()
        .await
        .query_one(
            "SELECT coalesce(string_agg(c.consumer_group || ':' || p.name || ':' || c.next_seq || ':'
                                        || (c.lease_id IS NOT NULL), ',' ORDER BY p.name, c.consumer_group), '')
               FROM queen.cursors c JOIN queen.partitions p ON p.id = c.partition_id",
            &[],
        )
        .await
        .unwrap();
    row.get(0)
}

/// Whether `group` holds a lease on `partition`.
async fn leased(b: &TestBroker, group: &str, partition: &str) -> bool {
    let q = format!(
        "SELECT count(*) FROM queen.cursors c JOIN queen.partitions p ON p.id = c.partition_id
          WHERE c.consumer_group = '{group}' AND p.name = '{partition}' AND c.lease_id IS NOT NULL"
    );
    b.scalar(&q).await == 1
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

/// Issue 36 item 6: the queue-level seek on one partition. Its lease goes
/// (a late ack there is a no-op), the other partitions keep their backlog
/// and their leases.
#[tokio::test]
async fn partition_seek_to_end_skips_only_that_partitions_backlog() {
    let b = TestBroker::start().await;
    let pushed = b.push_txids("pseek", "p1", &txids("a", 3)).await;
    b.push_txids("pseek", "p2", &txids("b", 2)).await;
    let on_p1 = b.pop_partition("pseek", "p1", "batch=1&subscriptionMode=all&consumerGroup=g").await.1;
    let on_p2 = b.pop_partition("pseek", "p2", "batch=1&subscriptionMode=all&consumerGroup=g").await.1;
    assert_eq!((tx_ids(&on_p1), tx_ids(&on_p2)), (vec!["a-0".to_owned()], vec!["b-0".to_owned()]));
    assert!(leased(&b, "g", "p1").await && leased(&b, "g", "p2").await);

    let (status, body) =
        b.post("/api/v1/consumer-groups/g/queues/pseek/partitions/p1/seek", &json!({"toEnd": true})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["consumerGroup"], "g");
    assert_eq!(body["queueName"], "pseek");
    assert_eq!(body["partitionName"], "p1");
    assert_eq!(body["updated"], true);
    assert_eq!(body["seekToEnd"], true);
    assert_eq!(body["partitionsUpdated"], 1);
    let last_of_p1 = pushed.as_array().unwrap().last().unwrap()["message_id"].clone();
    assert_eq!(body["cursorMovedTo"], last_of_p1, "{body} vs {pushed}");

    assert!(!leased(&b, "g", "p1").await, "the seek cleared p1's lease");
    assert!(leased(&b, "g", "p2").await, "p2's lease is untouched");
    let late = b.ack(&on_p1["messages"][0], "completed", Some("g")).await;
    assert_eq!((late["success"].clone(), late["noop"].clone()), (json!(true), json!(true)), "{late}");
    let live = b.ack(&on_p2["messages"][0], "completed", Some("g")).await;
    assert_eq!(live["success"], true, "{live}");
    assert_ne!(live["noop"], true, "{live}");

    b.push("pseek", "p1", &[("after", json!(1))]).await;
    assert_eq!(sorted(drain(&b, "pseek", "g", "").await), ["after", "b-1"]);
}

#[tokio::test]
async fn partition_seek_to_a_timestamp_replays_only_that_partition() {
    let b = TestBroker::start().await;
    for tx in ["a", "b", "c"] {
        b.push("preplay", "p1", &[(tx, json!(tx))]).await;
    }
    b.push_txids("preplay", "p2", &txids("x", 2)).await;
    let p1 = b.pop_partition("preplay", "p1", "batch=10&subscriptionMode=all&consumerGroup=g").await.1;
    let at_a = p1["messages"][0]["createdAt"].as_str().unwrap().to_owned();
    let id_of_a = p1["messages"][0]["id"].clone();
    b.ack(&p1["messages"][2], "completed", Some("g")).await;
    assert_eq!(drain(&b, "preplay", "g", "").await, ["x-0", "x-1"]);
    b.pop_none("preplay", "batch=10&partitions=10&consumerGroup=g").await;

    let (status, body) = b
        .post("/api/v1/consumer-groups/g/queues/preplay/partitions/p1/seek", &json!({"timestamp": at_a}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["updated"], true);
    assert_eq!(body["seekToEnd"], false);
    assert!(body["targetTimestamp"].is_string(), "{body}");
    assert_eq!(body["cursorMovedTo"], id_of_a, "the cursor is just past a");
    assert_eq!(drain(&b, "preplay", "g", "").await, ["b", "c"], "p2 is not replayed");
}

/// Bad bodies are 400 with a code and move nothing; an unknown queue or
/// partition is Queen's "Partition not found" (404 here, not Queen's 500,
/// which clients would retry); a group with no cursor there moves nothing;
/// no body at all is Queen's seek to the end.
#[tokio::test]
async fn partition_seek_refuses_bad_bodies_and_unknown_partitions() {
    let b = TestBroker::start().await;
    b.push_txids("prefuse", "p1", &txids("a", 2)).await;
    let popped = b.pop_partition("prefuse", "p1", "batch=1&subscriptionMode=all&consumerGroup=g").await.1;
    let before = cursor_state(&b).await;
    let route = "/api/v1/consumer-groups/g/queues/prefuse/partitions/p1/seek";
    for (body, field) in [
        ("{}", "toEnd"),
        (r#"{"toEnd": false}"#, "toEnd"),
        (r#"{"timestamp": "soon"}"#, "timestamp"),
        (r#"{"toEnd": "yes"}"#, "body"),
        ("[true]", "body"),
        ("{", "body"),
    ] {
        let (status, answer) = b.api().post_raw(route, body).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["code"], "bad_request", "{body}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains(field), "{body}: {answer}");
    }
    for path in [
        "/api/v1/consumer-groups/g/queues/prefuse/partitions/nope/seek",
        "/api/v1/consumer-groups/g/queues/ghost/partitions/p1/seek",
    ] {
        let (status, answer) = b.post(path, &json!({"toEnd": true})).await;
        assert_eq!(status, 404, "{path}: {answer}");
        assert_eq!(answer["error"], "Partition not found", "{answer}");
    }
    let (status, answer) = b
        .post("/api/v1/consumer-groups/stranger/queues/prefuse/partitions/p1/seek", &json!({"toEnd": true}))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!((answer["updated"].clone(), answer["cursorMovedTo"].clone()), (json!(false), Value::Null));
    assert_eq!(cursor_state(&b).await, before, "nothing moved");
    let ack = b.ack(&popped["messages"][0], "completed", Some("g")).await;
    assert_ne!(ack["noop"], true, "the lease survived the refusals: {ack}");

    let (status, answer) = b.post_empty(route).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!((answer["seekToEnd"].clone(), answer["updated"].clone()), (json!(true), json!(true)));
    b.pop_none("prefuse", "batch=10&consumerGroup=g").await;
}

#[tokio::test]
async fn subscription_update_sets_where_a_reset_group_starts() {
    let b = TestBroker::start().await;
    for tx in ["a", "b", "c"] {
        b.push("resub", "Default", &[(tx, json!(tx))]).await;
    }
    assert_eq!(drain(&b, "resub", "g", "subscriptionMode=all").await, ["a", "b", "c"]);
    let q = b.pop_some("resub", "batch=10").await;
    let at_b = q["messages"][1]["createdAt"].as_str().unwrap().to_owned();
    let (status, body) =
        b.post("/api/v1/consumer-groups/g/subscription", &json!({"subscriptionTimestamp": at_b})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["success"], true);
    assert_eq!(body["consumerGroup"], "g");
    assert_eq!(body["rowsUpdated"], 1);
    assert!(body["newTimestamp"].is_string());
    // Existing cursors stay where they are...
    assert_eq!(drain(&b, "resub", "g", "").await, Vec::<String>::new());
    // ...and a reset group starts at the new timestamp.
    b.delete("/api/v1/consumer-groups/g?deleteMetadata=false").await;
    assert_eq!(drain(&b, "resub", "g", "").await, ["b", "c"]);
    let (status, body) = b.post("/api/v1/consumer-groups/g/subscription", &json!({})).await;
    assert_eq!(status, 400);
    assert!(body["error"].as_str().unwrap().contains("subscriptionTimestamp"), "{body}");
}

#[tokio::test]
async fn nacks_and_retries_are_counted_per_group() {
    let b = TestBroker::start().await;
    b.configure_ok("pergroup", json!({"retryLimit": 0})).await;
    b.push("pergroup", "Default", &[("m", json!(1))]).await;
    let g1 = b.pop_some("pergroup", "batch=1&subscriptionMode=all&consumerGroup=g1").await;
    let g2 = b.pop_some("pergroup", "batch=1&subscriptionMode=all&consumerGroup=g2").await;
    assert_eq!(b.ack(&g1["messages"][0], "failed", Some("g1")).await["dlq"], true);
    b.pop_none("pergroup", "batch=1&consumerGroup=g1").await;
    assert_eq!(b.ack(&g2["messages"][0], "completed", Some("g2")).await["success"], true);
    let dlq = b.dlq("pergroup").await;
    assert_eq!(dlq["total"], 1);
    assert_eq!(dlq["messages"][0]["consumerGroup"], "g1");
    assert_eq!(tx_ids(&b.pop_some("pergroup", "batch=1").await), ["m"], "queue mode still has it");
}

/// A group that registers while the push creating the queue is in flight:
/// one of the two must give the group its cursor on the new partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_registering_while_the_queue_is_created_still_gets_the_messages() {
    let b = TestBroker::start().await;
    let mut races = Vec::new();
    for i in 0..30 {
        let (p, c) = (b.api(), b.api());
        let queue = format!("born-{i}");
        let q2 = queue.clone();
        let push = tokio::spawn(async move { p.push(&queue, "Default", &[("m", json!(1))]).await });
        let pop = tokio::spawn(async move {
            c.pop(&q2, "batch=1&consumerGroup=g&subscriptionMode=all&autoAck=true").await
        });
        races.push((format!("born-{i}"), push, pop));
    }
    for (queue, push, pop) in races {
        push.await.unwrap();
        let (status, _) = pop.await.unwrap();
        if status == 204 {
            // Registered first (or raced): the message must still be there for g.
            let popped = b.pop_some(&queue, "batch=1&subscriptionMode=all&consumerGroup=g").await;
            assert_eq!(tx_ids(&popped), ["m"], "{queue}");
        }
    }
}

/// Queen starts a group at its subscription time on a partition it has no
/// cursor on yet: a subscription updated to a time still to come holds back
/// what partitions created later receive before that time (and also what a
/// partition created then receives later, until the time); a time already
/// past lets a later partition start at its beginning, as `new` does.
#[tokio::test]
async fn a_subscription_time_still_to_come_holds_back_partitions_created_later() {
    let b = TestBroker::start().await;
    b.push("held", "p1", &[("p1-a", json!(1))]).await;
    assert_eq!(drain(&b, "held", "g", "subscriptionMode=all").await, ["p1-a"]);
    let sql = b.sql().await;
    let at_iso: String = sql
        .query_one("SELECT to_char(now() AT TIME ZONE 'UTC' + interval '3 seconds', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')", &[])
        .await
        .unwrap()
        .get(0);
    let (status, body) =
        b.post("/api/v1/consumer-groups/g/subscription", &json!({"subscriptionTimestamp": at_iso})).await;
    assert_eq!((status, body["rowsUpdated"].clone()), (200, json!(1)), "{body}");

    b.push("held", "p2", &[("p2-early", json!(1))]).await;
    b.push("held", "p1", &[("p1-b", json!(1))]).await;
    assert_eq!(drain(&b, "held", "g", "").await, ["p1-b"], "p2's early message is before the time");
    b.push("held", "p2", &[("p2-still-early", json!(1))]).await;
    assert_eq!(drain(&b, "held", "g", "").await, Vec::<String>::new());
    let named = b.pop_partition("held", "p2", "batch=10&consumerGroup=g").await;
    assert_eq!(named.0, 204, "a pop naming the partition skips it too: {}", named.1);

    while sql.query_one("SELECT now() < $1::text::timestamptz", &[&at_iso]).await.unwrap().get::<_, bool>(0) {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    b.push("held", "p2", &[("p2-late", json!(1))]).await;
    assert_eq!(drain(&b, "held", "g", "").await, ["p2-late"]);

    // A time already past: a partition made later starts at its beginning.
    let (status, _) = b
        .post(
            "/api/v1/consumer-groups/g/subscription",
            &json!({"subscriptionTimestamp": "2020-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(status, 200);
    b.push("held", "p3", &[("p3-a", json!(1)), ("p3-b", json!(2))]).await;
    assert_eq!(drain(&b, "held", "g", "").await, ["p3-a", "p3-b"]);
}

/// The group routes' answers, whole: the engine writes them from the counts
/// and times SQL answers (`queen_wire::{GroupDeleted, SubscriptionUpdated,
/// Seeked, PartitionSeeked}`), and a queue's deletion from whether it existed.
#[tokio::test]
async fn the_group_and_queue_deletion_routes_answer_every_field() {
    let b = TestBroker::start().await;
    b.push("whole", "p1", &[("a", json!(1)), ("b", json!(2))]).await;
    b.push("whole", "p2", &[("c", json!(3))]).await;
    b.pop_some("whole", "batch=1&subscriptionMode=all&consumerGroup=g").await;
    let last_of_p1: String = b
        .sql()
        .await
        .query_one("SELECT m.id::text FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id WHERE p.name = 'p1' AND m.transaction_id = 'b'", &[])
        .await
        .unwrap()
        .get(0);

    let (status, body) = b.post("/api/v1/consumer-groups/g/queues/whole/seek", &json!({"toEnd": true})).await;
    assert_eq!(status, 200, "{body}");
    let want = json!({"success": true, "consumerGroup": "g", "queueName": "whole", "seekToEnd": true,
                      "targetTimestamp": null, "partitionsUpdated": 2});
    assert_eq!(body, want);

    let path = "/api/v1/consumer-groups/g/queues/whole/partitions/p1/seek";
    let (status, body) = b.post(path, &json!({"toEnd": true})).await;
    assert_eq!(status, 200, "{body}");
    let want = json!({"success": true, "consumerGroup": "g", "queueName": "whole", "partitionName": "p1",
                      "updated": true, "cursorMovedTo": last_of_p1, "seekToEnd": true,
                      "targetTimestamp": null, "partitionsUpdated": 1});
    assert_eq!(body, want);
    let (status, body) =
        b.post(&path.replace("/g/", "/nobody/"), &json!({"timestamp": "2000-01-01T00:00:00Z"})).await;
    assert_eq!(status, 200, "{body}");
    let want = json!({"success": true, "consumerGroup": "nobody", "queueName": "whole", "partitionName": "p1",
                      "updated": false, "cursorMovedTo": null, "seekToEnd": false,
                      "targetTimestamp": "2000-01-01T00:00:00.000000Z", "partitionsUpdated": 0});
    assert_eq!(body, want);

    let (status, body) = b
        .post(
            "/api/v1/consumer-groups/g/subscription",
            &json!({"subscriptionTimestamp": "2001-02-03T04:05:06.5Z"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let want = json!({"success": true, "consumerGroup": "g", "newTimestamp": "2001-02-03T04:05:06.500000Z",
                      "rowsUpdated": 1});
    assert_eq!(body, want);

    let (status, body) = b.delete("/api/v1/consumer-groups/g/queues/whole?deleteMetadata=true").await;
    assert_eq!(status, 200, "{body}");
    let want = json!({"success": true, "consumerGroup": "g", "queueName": "whole", "deletedPartitions": 2,
                      "metadataDeleted": true});
    assert_eq!(body, want);
    let (status, body) = b.delete("/api/v1/consumer-groups/g?deleteMetadata=true").await;
    assert_eq!(status, 200, "{body}");
    let want = json!({"success": true, "consumerGroup": "g", "queueName": null, "deletedPartitions": 0,
                      "metadataDeleted": false});
    assert_eq!(body, want);

    let (status, body) = b.delete("/api/v1/resources/queues/whole").await;
    assert_eq!((status, body), (200, json!({"deleted": true, "queue": "whole", "existed": true})));
    let (status, body) = b.delete("/api/v1/resources/queues/whole").await;
    assert_eq!((status, body), (200, json!({"deleted": false, "queue": "whole", "existed": false})));
}
