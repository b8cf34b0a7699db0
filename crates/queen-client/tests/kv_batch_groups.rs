//! Keys-only prefix pages, multi-op KV batches and consumer-group admin,
//! each generic over the `Broker` and run twice, over HTTP and embedded
//! (`both!`), so the two implementations answer alike.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use queen_client::{
    Ack, BatchOutcome, Broker, ConsumerGroup, Error, Expect, Expiry, Incr, KvResult, PushItem, Queen, Reason,
    Seek, Subscription,
};
use serde_json::json;

fn done(outcome: BatchOutcome) -> Vec<KvResult> {
    match outcome {
        BatchOutcome::Done(results) => results,
        lost => panic!("expected the batch to run, got {lost:?}"),
    }
}

fn keys_of<T>(rows: &[T], key: impl Fn(&T) -> &str) -> Vec<String> {
    rows.iter().map(|r| key(r).to_owned()).collect()
}

async fn keys_only_pages_carry_no_values<B: Broker>(queen: Queen<B>) {
    let kv = queen.kv();
    let mut versions = Vec::new();
    for (k, expiry) in [
        ("user:3", Expiry::Forever),
        ("user:1", Expiry::secs(3600).unwrap()),
        ("user:2", Expiry::Forever),
        ("users", Expiry::Forever),
    ] {
        let w = kv.put("keys", k, &json!({"name": k, "pad": "x".repeat(100)}), expiry).await.unwrap();
        versions.push((k, w.version));
    }
    let version_of = |k: &str| versions.iter().find(|(key, _)| *key == k).unwrap().1;

    let page = kv.get_prefix_keys("keys", "user:", None, Some(2)).await.unwrap();
    assert_eq!(keys_of(&page.rows, |r| &r.key), ["user:1", "user:2"]);
    assert!(page.truncated);
    assert_eq!(page.next_after.as_deref(), Some("user:2"));
    assert_eq!(page.rows[0].version, version_of("user:1"));
    assert!(page.rows[0].expires_at.is_some(), "a TTL key reports its expiry");
    assert!(page.rows[1].expires_at.is_none(), "a forever key has none");
    assert!(page.rows.iter().all(|r| r.updated_at.is_some()));

    let rest = kv.get_prefix_keys("keys", "user:", page.next_after.as_deref(), Some(2)).await.unwrap();
    assert_eq!(keys_of(&rest.rows, |r| &r.key), ["user:3"]);
    assert_eq!(rest.rows[0].version, version_of("user:3"));
    assert!(!rest.truncated);
    assert_eq!(rest.next_after, None);

    // The same keys and versions as the page with values.
    let full = kv.get_prefix("keys", "user", None, None).await.unwrap();
    let keys = kv.get_prefix_keys("keys", "user", None, None).await.unwrap();
    assert_eq!(keys_of(&full.rows, |r| &r.key), keys_of(&keys.rows, |r| &r.key));
    assert_eq!(
        full.rows.iter().map(|r| r.version).collect::<Vec<_>>(),
        keys.rows.iter().map(|r| r.version).collect::<Vec<_>>()
    );
    assert!(kv.get_prefix_keys("keys", "nobody:", None, None).await.unwrap().rows.is_empty());
    assert!(matches!(kv.get_prefix_keys("keys", "", None, None).await, Err(Error::Invalid(_))));
}

/// The reason a keys-only page exists: the read budget (4 MiB by default)
/// counts values on a full page, key bytes on a keys-only one.
async fn keys_only_pages_are_not_cut_by_value_bytes<B: Broker>(queen: Queen<B>) {
    let kv = queen.kv();
    let big = "v".repeat(60_000);
    // 72 values of ~60 KB: ~4.3 MB, past the 4 MiB read budget.
    for chunk in 0..3 {
        let mut batch = kv.batch();
        for i in 0..24 {
            batch = batch.put("big", &format!("blob:{:02}", chunk * 24 + i), &big, Expiry::Forever);
        }
        let results = done(batch.run().await.unwrap());
        assert_eq!(results.len(), 24);
    }
    let full = kv.get_prefix("big", "blob:", None, Some(100)).await.unwrap();
    assert!(full.truncated, "the values fill the byte budget");
    assert!(full.rows.len() < 72 && !full.rows.is_empty());
    let keys = kv.get_prefix_keys("big", "blob:", None, Some(100)).await.unwrap();
    assert_eq!(keys.rows.len(), 72);
    assert!(!keys.truncated);
    assert_eq!(keys.rows[71].key, "blob:71");
}

async fn batch_answers_index_aligned_in_one_transaction<B: Broker>(queen: Queen<B>) {
    let kv = queen.kv();
    kv.put("b", "k/old", &"before", Expiry::Forever).await.unwrap();

    // Writes are applied in key order, reads of several keys after them;
    // the results still come back in the order the ops were added.
    let results = done(
        kv.batch()
            .put("b", "k/b", &json!({"n": 2}), Expiry::Forever)
            .put("b", "k/a", &json!({"n": 1}), Expiry::Forever)
            .incr("b", "k/count", 5, Expiry::Forever)
            .get("b", "k/a")
            .get_many("b", &["k/a", "k/b", "k/zz"])
            .get_prefix("b", "k/", None, None)
            .get_prefix_keys("b", "k/", None, Some(2))
            .put("b", "k/old", &"after", Expiry::Forever)
            .get("b", "k/old")
            .run()
            .await
            .unwrap(),
    );
    assert_eq!(results.len(), 9);
    let version_b = match &results[0] {
        KvResult::Write(w) => {
            assert!(w.applied);
            assert_eq!(w.key, "k/b");
            w.version
        }
        other => panic!("0: {other:?}"),
    };
    match &results[1] {
        KvResult::Write(w) => {
            assert!(w.applied);
            assert_eq!(w.key, "k/a");
            assert_eq!(w.json::<serde_json::Value>().unwrap(), json!({"n": 1}));
            // One sequence: the version of k/a, written first (key order), is lower.
            assert!(w.version < version_b, "k/a is written before k/b");
        }
        other => panic!("1: {other:?}"),
    }
    match &results[2] {
        KvResult::Write(w) => assert_eq!(w.counter().unwrap().value, 5),
        other => panic!("2: {other:?}"),
    }
    // A `get` sees the state before the call's write of its key.
    assert!(matches!(&results[3], KvResult::Get(None)), "3: {:?}", results[3]);
    match &results[4] {
        KvResult::Many(m) => {
            assert_eq!(keys_of(&m.rows, |r| &r.key), ["k/a", "k/b"]);
            assert_eq!(m.missing, ["k/zz"]);
        }
        other => panic!("4: {other:?}"),
    }
    match &results[5] {
        KvResult::Page(p) => {
            assert_eq!(keys_of(&p.rows, |r| &r.key), ["k/a", "k/b", "k/count", "k/old"]);
            assert_eq!(p.rows[3].json::<String>().unwrap(), "after", "prefix reads see the call's writes");
        }
        other => panic!("5: {other:?}"),
    }
    match &results[6] {
        KvResult::Keys(p) => {
            assert_eq!(keys_of(&p.rows, |r| &r.key), ["k/a", "k/b"]);
            assert!(p.truncated);
            assert_eq!(p.next_after.as_deref(), Some("k/b"));
        }
        other => panic!("6: {other:?}"),
    }
    match &results[8] {
        KvResult::Get(Some(e)) => assert_eq!(e.json::<String>().unwrap(), "before"),
        other => panic!("8: {other:?}"),
    }
    assert_eq!(kv.get("b", "k/old").await.unwrap().unwrap().json::<String>().unwrap(), "after");

    // A write that does not apply, without `required`, leaves the rest to commit.
    let results = done(
        kv.batch()
            .put_if_absent("b", "k/a", &"again", Expiry::Forever)
            .put("b", "k/c", &3, Expiry::Forever)
            .run()
            .await
            .unwrap(),
    );
    match &results[0] {
        KvResult::Write(w) => {
            assert!(!w.applied);
            assert_eq!(w.reason, Some(Reason::Exists));
            assert_eq!(w.json::<serde_json::Value>().unwrap(), json!({"n": 1}), "the winner's value");
        }
        other => panic!("{other:?}"),
    }
    assert!(kv.get("b", "k/c").await.unwrap().is_some());

    // An empty batch answers nothing, and sends nothing.
    assert!(done(kv.batch().run().await.unwrap()).is_empty());
}

async fn batch_required_loss_writes_nothing<B: Broker>(queen: Queen<B>) {
    let kv = queen.kv();
    let marker = kv.put("r", "done:7", &json!({"by": "first"}), Expiry::Forever).await.unwrap();
    let outcome = kv
        .batch()
        .put("r", "a", &1, Expiry::Forever)
        .incr("r", "count", 1, Expiry::Forever)
        .required()
        .put_if_absent("r", "done:7", &json!({"by": "second"}), Expiry::Forever)
        .put("r", "z", &1, Expiry::Forever)
        .run()
        .await
        .unwrap();
    match outcome {
        BatchOutcome::PreconditionLost { failed_index, reason, key, value, version } => {
            assert_eq!(failed_index, 2);
            assert_eq!(reason, Reason::Exists);
            assert_eq!(key.as_deref(), Some("done:7"));
            assert_eq!(version, marker.version);
            let value: serde_json::Value = serde_json::from_str(value.unwrap().get()).unwrap();
            assert_eq!(value, json!({"by": "first"}));
        }
        other => panic!("expected a lost precondition, got {other:?}"),
    }
    for k in ["a", "count", "z"] {
        assert!(kv.get("r", k).await.unwrap().is_none(), "{k} was not written");
    }

    // `required` marks only the next op: a later loss without it is a verdict.
    kv.put("r", "done:8", &true, Expiry::Forever).await.unwrap();
    let results = done(
        kv.batch()
            .required()
            .check("r", "done:7", Expect::Version(marker.version.try_into().unwrap()))
            .check("r", "done:8", Expect::Absent)
            .incr("r", "count", Incr::by(2).max(1), Expiry::Forever)
            .run()
            .await
            .unwrap(),
    );
    assert!(matches!(&results[0], KvResult::Write(w) if w.applied));
    assert!(matches!(&results[1], KvResult::Write(w) if !w.applied && w.reason == Some(Reason::Exists)));
    assert!(matches!(&results[2], KvResult::Write(w) if !w.applied && w.reason == Some(Reason::Limit)));

    // The broker's call rules hold: one write per key.
    let dup = kv.batch().put("r", "k", &1, Expiry::Forever).delete("r", "k").run().await;
    match dup {
        Err(e) => {
            assert!(e.is_client_error(), "{e:?}");
            assert_eq!(e.reason(), Some("kv_duplicate_key_in_call"));
        }
        Ok(o) => panic!("a duplicate write was accepted: {o:?}"),
    }
    // An argument refused while building: nothing is sent.
    let bad = kv.batch().put("r", "never", &1, Expiry::Forever).get_prefix("r", "", None, None).run().await;
    assert!(matches!(bad, Err(Error::Invalid(_))), "{bad:?}");
    assert!(kv.get("r", "never").await.unwrap().is_none());
}

fn only<'a>(groups: &'a [ConsumerGroup], name: &str, queue: &str) -> &'a ConsumerGroup {
    let found: Vec<_> = groups.iter().filter(|g| g.name == name && g.queue_name == queue).collect();
    assert_eq!(found.len(), 1, "{name} on {queue} in {groups:?}");
    found[0]
}

fn items(prefix: &str, n: usize) -> Vec<PushItem> {
    (0..n).map(|i| PushItem::new(&json!({"i": i})).unwrap().transaction_id(format!("{prefix}-{i}"))).collect()
}

async fn consumer_groups_list_detail_and_lag<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("jobs").partition("p1");
    q.push_batch(&items("j", 5)).await.unwrap();
    let slow = q.clone().group("slow").subscription(Subscription::All);
    let fast = q.clone().group("fast").subscription(Subscription::All);
    let got = slow.pop().batch(2).fetch().await.unwrap();
    assert_eq!(got.len(), 2);
    queen.ack_batch(&got.iter().map(Ack::completed).collect::<Vec<_>>()).await.unwrap();
    assert_eq!(fast.pop().batch(10).auto_ack().fetch().await.unwrap().len(), 5);

    let all = queen.consumer_groups().await.unwrap();
    let s = only(&all, "slow", "jobs");
    assert_eq!(s.total_lag, 3);
    assert_eq!(s.partitions_with_lag, 1);
    assert_eq!(s.members, 1);
    assert_eq!(s.state, "Lagging");
    assert_eq!(s.subscription_mode.as_deref(), Some("all"));
    assert_eq!(s.partitions.len(), 1);
    assert_eq!(s.partitions[0].partition, "p1");
    assert_eq!(s.partitions[0].offset, 2);
    assert_eq!(s.partitions[0].offset_lag, 3);
    assert!(!s.partitions[0].lease_active, "the ack released the lease");
    assert!(s.max_time_lag >= 0.0);
    let f = only(&all, "fast", "jobs");
    assert_eq!(f.total_lag, 0);
    assert_eq!(f.state, "Stable");

    let detail = queen.consumer_group("slow").await.unwrap();
    assert_eq!(detail.len(), 1);
    assert_eq!(detail[0].total_lag, 3);
    assert!(queen.consumer_group("nobody").await.unwrap().is_empty());

    // Lagging: behind, and for at least the given time.
    let lagging = queen.lagging_groups(Duration::ZERO).await.unwrap();
    assert_eq!(lagging.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(), ["slow"]);
    assert!(queen.lagging_groups(Duration::from_secs(3600)).await.unwrap().is_empty());

    // A group may be named like the `lagging` route; its detail is its own.
    let named = q.clone().group("lagging").subscription(Subscription::All);
    assert_eq!(named.pop().batch(1).auto_ack().fetch().await.unwrap().len(), 1);
    let detail = queen.consumer_group("lagging").await.unwrap();
    assert_eq!(detail.len(), 1, "{detail:?}");
    assert_eq!(detail[0].name, "lagging");
    assert_eq!(detail[0].total_lag, 4);
    // Deleting it on every queue (which the HTTP API has no single route for).
    let other = queen.queue("tasks").group("lagging").subscription(Subscription::All);
    queen.queue("tasks").push(&json!({"t": 1})).await.unwrap();
    assert_eq!(other.pop().batch(1).auto_ack().fetch().await.unwrap().len(), 1);
    let d = queen.delete_consumer_group("lagging", None, true).await.unwrap();
    assert_eq!(d.deleted_partitions, 2);
    assert!(d.metadata_deleted);
    assert!(queen.consumer_group("lagging").await.unwrap().is_empty());
    // The empty name is no group (a pop without one is queue mode).
    assert!(queen.consumer_group("").await.unwrap().is_empty());
    let d = queen.delete_consumer_group("", None, true).await.unwrap();
    assert_eq!((d.deleted_partitions, d.metadata_deleted), (0, false));
    assert_eq!(queen.update_subscription("", "2020-01-01T00:00:00Z").await.unwrap().rows_updated, 0);
    assert_eq!(queen.seek("", "jobs", Seek::End).await.unwrap().partitions_updated, 0);
}

async fn seek_moves_cursors_to_the_end_and_back<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("replay").partition("p1");
    q.push_batch(&items("r", 4)).await.unwrap();
    let g = q.clone().group("g").subscription(Subscription::All);
    let first = g.pop().batch(1).fetch().await.unwrap();
    assert_eq!(first.len(), 1);

    let s = queen.seek("g", "replay", Seek::End).await.unwrap();
    assert!(s.seek_to_end);
    assert_eq!(s.partitions_updated, 1);
    assert_eq!(queen.consumer_group("g").await.unwrap()[0].total_lag, 0);
    assert!(g.pop().batch(10).fetch().await.unwrap().is_empty(), "the backlog was skipped");

    // Back to before the first message: the whole partition again.
    let s = queen.seek("g", "replay", Seek::After("2000-01-01T00:00:00Z".into())).await.unwrap();
    assert!(!s.seek_to_end);
    assert_eq!(s.partitions_updated, 1);
    assert!(s.target_timestamp.unwrap().starts_with("2000-01-01"));
    assert_eq!(queen.consumer_group("g").await.unwrap()[0].total_lag, 4);
    let again = g.pop().batch(10).fetch().await.unwrap();
    assert_eq!(
        again.iter().map(|m| m.transaction_id.as_str()).collect::<Vec<_>>(),
        ["r-0", "r-1", "r-2", "r-3"]
    );

    // A seek drops the leases: the batch from before the seek cannot ack.
    queen.seek("g", "replay", Seek::After("2000-01-01T00:00:00Z".into())).await.unwrap();
    let stale = queen.ack(&again[0]).await.unwrap();
    assert!(!stale.success, "{stale:?}");
    assert_eq!(queen.consumer_group("g").await.unwrap()[0].total_lag, 4);

    // A group without cursors on the queue moves nothing.
    assert_eq!(queen.seek("ghost", "replay", Seek::End).await.unwrap().partitions_updated, 0);
    let bad = queen.seek("g", "replay", Seek::After("not a time".into())).await;
    assert!(matches!(&bad, Err(e) if e.is_client_error()), "{bad:?}");
}

async fn seek_partition_moves_one_lane_only<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("lanes");
    q.clone().partition("p1").push_batch(&items("a", 3)).await.unwrap();
    q.clone().partition("p2").push_batch(&items("b", 2)).await.unwrap();
    let g1 = q.clone().partition("p1").group("g").subscription(Subscription::All);
    let first = g1.pop().batch(1).fetch().await.unwrap();
    assert_eq!(first[0].transaction_id, "a-0");

    let s = queen.seek_partition("g", "lanes", "p1", Seek::End).await.unwrap();
    assert_eq!(s.partition_name, "p1");
    assert!(s.updated && s.seek_to_end);
    assert!(s.cursor_moved_to.is_some());
    let lag = |groups: Vec<ConsumerGroup>, p: &str| {
        groups[0]
            .partitions
            .iter()
            .find(|x| x.partition == p)
            .map(|x| (x.offset_lag, x.lease_active))
            .unwrap()
    };
    assert_eq!(lag(queen.consumer_group("g").await.unwrap(), "p1"), (0, false), "p1 skipped, its lease gone");
    assert_eq!(lag(queen.consumer_group("g").await.unwrap(), "p2"), (2, false), "p2 keeps its backlog");
    let stale = queen.ack(&first[0]).await.unwrap();
    assert!(stale.success && stale.noop, "a late ack of a skipped message is a no-op: {stale:?}");

    // Back to before the first message: p1 alone is replayed.
    let s =
        queen.seek_partition("g", "lanes", "p1", Seek::After("2000-01-01T00:00:00Z".into())).await.unwrap();
    assert!(s.updated && !s.seek_to_end);
    assert!(s.target_timestamp.unwrap().starts_with("2000-01-01"));
    assert_eq!(s.cursor_moved_to, None, "before the first message");
    assert_eq!(lag(queen.consumer_group("g").await.unwrap(), "p1"), (3, false));
    assert_eq!(lag(queen.consumer_group("g").await.unwrap(), "p2"), (2, false));

    // A group without a cursor there moves nothing; an unknown lane is a 404.
    let none = queen.seek_partition("ghost", "lanes", "p1", Seek::End).await.unwrap();
    assert!(!none.updated);
    for (queue, partition) in [("lanes", "nope"), ("nowhere", "p1")] {
        let missing = queen.seek_partition("g", queue, partition, Seek::End).await;
        assert!(
            matches!(&missing, Err(Error::Status { status: 404, code: Some(c), .. }) if c == "not_found"),
            "{missing:?}"
        );
    }
    let bad = queen.seek_partition("g", "lanes", "p1", Seek::After("not a time".into())).await;
    assert!(matches!(&bad, Err(e) if e.code() == Some("bad_request")), "{bad:?}");
    assert_eq!(
        lag(queen.consumer_group("g").await.unwrap(), "p1"),
        (3, false),
        "a refused seek moves nothing"
    );
}

async fn update_subscription_sets_where_a_restarted_group_begins<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("feed");
    q.push_batch(&items("a", 2)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    q.push_batch(&items("b", 2)).await.unwrap();
    let late = q.clone().group("late").subscription(Subscription::All);
    let seen = late.pop().batch(10).auto_ack().fetch().await.unwrap();
    assert_eq!(seen.len(), 4);
    assert_eq!(seen[2].transaction_id, "b-0");
    let since = seen[2].created_at.clone();

    let u = queen.update_subscription("late", &since).await.unwrap();
    assert_eq!(u.rows_updated, 1);
    assert_eq!(u.new_timestamp.as_deref(), Some(since.as_str()));
    let detail = queen.consumer_group("late").await.unwrap();
    assert_eq!(detail[0].subscription_mode.as_deref(), Some("timestamp"));
    assert_eq!(detail[0].subscription_timestamp.as_deref(), Some(since.as_str()));
    // The cursors it has stay where they are.
    assert!(late.pop().batch(10).fetch().await.unwrap().is_empty());

    // Restarted on the queue (cursors deleted, registration kept), the
    // group begins at the new start position, not at the oldest message.
    let d = queen.delete_consumer_group("late", Some("feed"), false).await.unwrap();
    assert_eq!(d.deleted_partitions, 1);
    let again = late.pop().batch(10).auto_ack().fetch().await.unwrap();
    assert_eq!(again.iter().map(|m| m.transaction_id.as_str()).collect::<Vec<_>>(), ["b-0", "b-1"]);

    assert_eq!(queen.update_subscription("nobody", "2020-01-01T00:00:00Z").await.unwrap().rows_updated, 0);
    let bad = queen.update_subscription("late", "yesterday-ish").await;
    assert!(matches!(&bad, Err(e) if e.is_client_error()), "{bad:?}");
}

async fn delete_consumer_group_keeps_or_drops_the_registration<B: Broker>(queen: Queen<B>) {
    for name in ["qa", "qb"] {
        queen.queue(name).push_batch(&items(name, 3)).await.unwrap();
        for group in ["keep", "drop"] {
            let g = queen.queue(name).group(group).subscription(Subscription::All);
            assert_eq!(g.pop().batch(10).auto_ack().fetch().await.unwrap().len(), 3);
        }
    }

    // Without deleting the registration, the group restarts at its start
    // position (`all`: the oldest message): a replay of that queue only.
    let d = queen.delete_consumer_group("keep", Some("qa"), false).await.unwrap();
    assert_eq!(d.deleted_partitions, 1);
    assert!(!d.metadata_deleted);
    let keep = queen.consumer_group("keep").await.unwrap();
    assert_eq!(only(&keep, "keep", "qa").total_lag, 3);
    assert_eq!(only(&keep, "keep", "qb").total_lag, 0);

    // Every queue, registration included: the group is gone.
    let d = queen.delete_consumer_group("drop", None, true).await.unwrap();
    assert_eq!(d.deleted_partitions, 2);
    assert!(d.metadata_deleted);
    assert!(queen.consumer_group("drop").await.unwrap().is_empty());
    let all = queen.consumer_groups().await.unwrap();
    assert!(all.iter().all(|g| g.name != "drop"));
    assert_eq!(all.iter().filter(|g| g.name == "keep").count(), 2);

    let none = queen.delete_consumer_group("nobody", None, true).await.unwrap();
    assert_eq!(none.deleted_partitions, 0);
    assert!(!none.metadata_deleted);
}

both!(
    keys_only_pages_carry_no_values,
    keys_only_pages_are_not_cut_by_value_bytes,
    batch_answers_index_aligned_in_one_transaction,
    batch_required_loss_writes_nothing,
    consumer_groups_list_detail_and_lag,
    seek_moves_cursors_to_the_end_and_back,
    seek_partition_moves_one_lane_only,
    update_subscription_sets_where_a_restarted_group_begins,
    delete_consumer_group_keeps_or_drops_the_registration,
);
