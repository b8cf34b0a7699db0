//! The SDK against a real broker: every test is generic over the `Broker`
//! and runs twice, over HTTP and embedded (`both!`), so the two
//! implementations cannot drift apart.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::TryStreamExt;
use queen_client::{
    Ack, AckStatus, Broker, BufferOptions, Delay, Error, Expect, Expiry, FetchEntry, Incr, Message, Permit,
    PushItem, PushStatus, Queen, QueueOptions, Reason, ReplayResult, ReplayTarget, StopSignal, Subscription,
    TimerSpec, TxOutcome, TxResult, QUEUE_MODE,
};
use serde_json::{json, value::RawValue, Value};

fn tx_ids(msgs: &[Message]) -> Vec<String> {
    msgs.iter().map(|m| m.transaction_id.clone()).collect()
}

fn items(prefix: &str, n: usize) -> Vec<PushItem> {
    (0..n).map(|i| PushItem::new(&json!({"i": i})).unwrap().transaction_id(format!("{prefix}-{i}"))).collect()
}

fn raw(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).unwrap()
}

async fn push_pop_ack_in_order<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("orders");
    let pushed = q.push_batch(&items("o", 5)).await.unwrap();
    assert_eq!(pushed.len(), 5);
    assert!(pushed.iter().all(|r| r.status == PushStatus::Queued && r.message_id.is_some()));
    // The same transaction id again is a duplicate with the original id.
    let dup = q.push_item(items("o", 1).remove(0)).await.unwrap();
    assert_eq!(dup.status, PushStatus::Duplicate);
    assert_eq!(dup.message_id, pushed[0].message_id);

    let msgs = q.pop().batch(10).fetch().await.unwrap();
    assert_eq!(tx_ids(&msgs), ["o-0", "o-1", "o-2", "o-3", "o-4"]);
    let m = &msgs[0];
    assert_eq!(m.queue, "orders");
    assert_eq!(m.partition, "Default");
    assert_eq!(m.consumer_group, QUEUE_MODE);
    assert!(m.lease_id.is_some());
    assert_eq!(m.json::<Value>().unwrap(), json!({"i": 0}));
    assert_eq!(m.id, pushed[0].message_id.clone().unwrap());

    // The partition is leased: nothing more until the batch is settled.
    assert!(q.pop().fetch().await.unwrap().is_empty());
    let first = queen.ack(&msgs[0]).await.unwrap();
    assert!(first.success && first.error.is_none() && !first.lease_released);
    let acks: Vec<Ack> = msgs[1..].iter().map(Ack::completed).collect();
    let results = queen.ack_batch(&acks).await.unwrap();
    assert!(results.iter().all(|r| r.success), "{results:?}");
    assert!(results.last().unwrap().lease_released);
    assert!(q.pop().batch(10).fetch().await.unwrap().is_empty());
    // A completed re-ack below the cursor is a no-op, not an error.
    assert!(queen.ack(&msgs[4]).await.unwrap().noop);
}

async fn nack_redelivers_then_dead_letters<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("jobs");
    let opts = q.configure(&QueueOptions { retry_limit: Some(1), ..Default::default() }).await.unwrap();
    assert_eq!(opts.retry_limit, Some(1));
    assert_eq!(opts.dead_letter_queue, Some(true));
    q.push_item(PushItem::new(&json!({"job": 1})).unwrap().transaction_id("job-1")).await.unwrap();

    let first = q.pop().fetch().await.unwrap();
    assert_eq!(tx_ids(&first), ["job-1"]);
    let nack = queen.nack(&first[0], "Test error one").await.unwrap();
    assert!(nack.success && nack.lease_released && !nack.dlq);

    // Redelivered at once, under a new lease.
    let second = q.pop().fetch().await.unwrap();
    assert_eq!(tx_ids(&second), ["job-1"]);
    assert_ne!(second[0].lease_id, first[0].lease_id);
    let last = queen.nack(&second[0], "Test error two").await.unwrap();
    assert!(last.dlq, "retry limit 1 means two deliveries: {last:?}");
    assert!(q.pop().fetch().await.unwrap().is_empty());

    let dlq = q.dlq(100, 0).await.unwrap();
    assert_eq!(dlq.total, 1);
    assert_eq!(dlq.messages[0].transaction_id, "job-1");
    assert!(dlq.messages[0].error_message.as_deref().unwrap().contains("Test error two"));
    assert_eq!(serde_json::from_str::<Value>(dlq.messages[0].data.get()).unwrap(), json!({"job": 1}));

    // A nack of a message already below the cursor is refused as a result, not an Err.
    let late = queen.ack_as(&second[0], AckStatus::Failed, Some("late")).await.unwrap();
    assert!(!late.success && late.error.unwrap().contains("committed"));
    assert!(q.delete().await.unwrap());
    assert!(!q.delete().await.unwrap());
}

async fn dead_letters_replay_by_record_and_purge<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("sdk-dlq");
    q.configure(&QueueOptions { retry_limit: Some(0), ..Default::default() }).await.unwrap();
    q.push_item(PushItem::new(&json!({"job": 2})).unwrap().transaction_id("d-1")).await.unwrap();
    q.push_item(PushItem::new(&json!({"job": 3})).unwrap().transaction_id("d-2")).await.unwrap();
    for _ in 0..2 {
        let popped = q.pop().fetch().await.unwrap();
        assert!(queen.nack(&popped[0], "poison").await.unwrap().dlq);
    }
    let dlq = q.dlq(100, 0).await.unwrap();
    assert_eq!(dlq.total, 2);
    let first = dlq.messages.iter().find(|d| d.transaction_id == "d-1").unwrap();
    let id = first.dlq_id.expect("the listing carries each record's id");

    let target = ReplayTarget { queue: Some("sdk-dlq-2".into()), partition: None };
    let moved = queen.dlq_replay(id, &target).await.unwrap();
    assert_eq!(moved.result, ReplayResult::Moved);
    assert_eq!((moved.dlq_id, moved.original_transaction_id.as_str()), (id, "d-1"));
    assert_eq!(moved.replayed_as, format!("dlq:{id}"));
    assert_eq!(moved.queue, "sdk-dlq-2");
    let back = queen.queue("sdk-dlq-2").pop().fetch().await.unwrap();
    assert_eq!(tx_ids(&back), [format!("dlq:{id}")]);
    // The record is gone: a second replay is an error, not a second push.
    assert!(queen.dlq_replay(id, &target).await.is_err());

    assert_eq!(queen.dlq_purge("sdk-dlq", Some("no-such-group")).await.unwrap(), 0);
    assert_eq!(queen.dlq_purge("sdk-dlq", None).await.unwrap(), 1);
    assert_eq!(q.dlq(100, 0).await.unwrap().total, 0);
    assert!(queen.dlq_purge("", None).await.is_err(), "a purge names its queue");
}

async fn tx_once_and_ack_commit_then_a_second_once_loses<B: Broker>(queen: Queen<B>) {
    let orders = queen.queue("pay");
    let receipts = queen.queue("receipts");
    orders.push_batch(&items("order-9137", 2)).await.unwrap();
    let m1 = orders.pop().fetch().await.unwrap().remove(0);
    let expiry = Expiry::secs(86_400).unwrap();

    let out = queen
        .tx()
        .once_with("charges", "charge:9137", &json!({"charge": "ch_1"}), expiry)
        .queue("receipts")
        .push(&json!({"receipt": "ch_1"}))
        .ack(&m1)
        .commit()
        .await
        .unwrap();
    let TxOutcome::Committed { results, .. } = out else { panic!("expected a commit, got {out:?}") };
    assert_eq!(results.len(), 3);
    assert!(matches!(&results[0], TxResult::Push { index: 0, .. }));
    assert!(
        matches!(&results[1], TxResult::Ack { index: 1, transaction_id, .. } if transaction_id == "order-9137-0")
    );
    assert!(matches!(&results[2], TxResult::Kv { index: 2, .. }));
    assert_eq!(receipts.pop().auto_ack().fetch().await.unwrap().len(), 1);

    // The second message does the same work: the marker is there, nothing commits.
    let m2 = orders.pop().fetch().await.unwrap().remove(0);
    assert_eq!(m2.transaction_id, "order-9137-1");
    let out = queen
        .tx()
        .queue("receipts")
        .push(&json!({"receipt": "ch_2"}))
        .once_with("charges", "charge:9137", &json!({"charge": "ch_2"}), expiry)
        .ack(&m2)
        .commit()
        .await
        .expect("a lost race is never an Err");
    match out {
        TxOutcome::PreconditionLost { failed_index, kv_index, kv_reason, value, version, .. } => {
            assert_eq!(failed_index, 2, "one push item and one ack come first");
            assert_eq!(kv_index, Some(0));
            assert_eq!(kv_reason, Reason::Exists);
            assert!(version > 0);
            assert_eq!(
                serde_json::from_str::<Value>(value.unwrap().get()).unwrap(),
                json!({"charge": "ch_1"})
            );
        }
        other => panic!("expected PreconditionLost, got {other:?}"),
    }
    // Nothing of the bundle committed: no receipt, and m2 is still leased to us.
    assert!(receipts.pop().fetch().await.unwrap().is_empty());
    assert!(queen.ack(&m2).await.unwrap().success);
    assert!(orders.pop().fetch().await.unwrap().is_empty());

    // An ack the cursor does not honour rolls the bundle back: an Err with the broker's text.
    let err = queen
        .tx()
        .kv()
        .put("charges", "ghost", &json!(1), Expiry::Forever)
        .ack(&m2)
        .commit()
        .await
        .expect_err("a re-ack in a bundle is refused");
    match &err {
        Error::Refused { message, reason } => {
            assert!(message.contains("rolled back"), "{message}");
            assert_eq!(reason.as_deref(), Some("rejected_ack"));
        }
        other => panic!("expected Refused, got {other:?}"),
    }
    assert!(queen.kv().get("charges", "ghost").await.unwrap().is_none());

    // An empty bundle is refused before anything is sent.
    assert!(matches!(queen.tx().commit().await, Err(Error::Invalid(_))));
}

async fn tx_kv_rider_reads_and_fences<B: Broker>(queen: Queen<B>) {
    let kv = queen.kv();
    let w = kv.put("saga", "step", &json!("reserved"), Expiry::Forever).await.unwrap();
    let v = NonZeroU64::new(w.version).unwrap();
    let out = queen
        .tx()
        .kv()
        .required()
        .check("saga", "step", Expect::Version(v))
        .kv()
        .get("saga", "step")
        .kv()
        .incr("saga", "count", 5, Expiry::Forever)
        .kv()
        .get_many("saga", &["step", "nope"])
        .commit()
        .await
        .unwrap();
    let TxOutcome::Committed { results, .. } = out else { panic!("{out:?}") };
    assert_eq!(results.len(), 4);
    let kvs: Vec<_> = results
        .into_iter()
        .map(|r| match r {
            TxResult::Kv { result, .. } => result,
            other => panic!("{other:?}"),
        })
        .collect();
    match &kvs[1] {
        queen_client::KvResult::Get(Some(e)) => assert_eq!(e.json::<String>().unwrap(), "reserved"),
        other => panic!("{other:?}"),
    }
    match &kvs[2] {
        queen_client::KvResult::Write(w) => assert_eq!(w.counter().unwrap().value, 5),
        other => panic!("{other:?}"),
    }
    match &kvs[3] {
        queen_client::KvResult::Many(m) => assert_eq!(m.missing, ["nope"]),
        other => panic!("{other:?}"),
    }

    // A stale fence loses: nothing of the bundle is written.
    kv.put("saga", "step", &json!("charged"), Expiry::Forever).await.unwrap();
    let out = queen
        .tx()
        .kv()
        .put("saga", "other", &json!(1), Expiry::Forever)
        .kv()
        .required()
        .check("saga", "step", Expect::Version(v))
        .commit()
        .await
        .unwrap();
    match out {
        TxOutcome::PreconditionLost { failed_index, kv_reason, value, .. } => {
            assert_eq!(failed_index, 1);
            assert_eq!(kv_reason, Reason::Version);
            assert_eq!(value.unwrap().get(), "\"charged\"");
        }
        other => panic!("{other:?}"),
    }
    assert!(kv.get("saga", "other").await.unwrap().is_none());
}

async fn kv_found_and_null_are_distinct<B: Broker>(queen: Queen<B>) {
    let kv = queen.kv();
    assert!(kv.get("app", "missing").await.unwrap().is_none());

    let w = kv.put("app", "nothing", &Value::Null, Expiry::Forever).await.unwrap();
    assert!(w.applied && w.version > 0 && w.reason.is_none());
    let e = kv.get("app", "nothing").await.unwrap().expect("a stored null is found");
    assert!(e.is_null());
    assert_eq!(e.version, w.version);
    assert!(e.expires_at.is_none());

    let w = kv.put("app", "cfg", &json!({"a": [1, 2]}), Expiry::secs(60).unwrap()).await.unwrap();
    let e = kv.get("app", "cfg").await.unwrap().unwrap();
    assert_eq!(e.json::<Value>().unwrap(), json!({"a": [1, 2]}));
    assert!(e.expires_at.is_some());

    // Expect::Absent ("must not exist") is not "no expect".
    let lost = kv.put_expect("app", "cfg", &json!(2), Expiry::Forever, Expect::Absent).await.unwrap();
    assert!(!lost.applied);
    assert_eq!(lost.reason, Some(Reason::Exists));
    assert_eq!(lost.version, w.version);
    // A pure update of an absent key creates nothing.
    let none = kv
        .put_expect("app", "ghost", &json!(1), Expiry::Forever, Expect::Version(NonZeroU64::new(1).unwrap()))
        .await
        .unwrap();
    assert_eq!((none.applied, none.reason.clone(), none.version), (false, Some(Reason::Absent), 0));
    assert!(none.current().is_none());
    assert!(kv.get("app", "ghost").await.unwrap().is_none());
    // A matching version applies; a stale one does not.
    let v = NonZeroU64::new(w.version).unwrap();
    assert!(
        kv.put_expect("app", "cfg", &json!(3), Expiry::Forever, Expect::Version(v)).await.unwrap().applied
    );
    let stale = kv.put_expect("app", "cfg", &json!(4), Expiry::Forever, Expect::Version(v)).await.unwrap();
    assert_eq!(stale.reason, Some(Reason::Version));
    assert_eq!(stale.json::<i64>().unwrap(), 3);

    let many = kv.get_many("app", &["nothing", "missing", "cfg"]).await.unwrap();
    assert_eq!(many.rows.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["cfg", "nothing"]);
    assert_eq!(many.missing, ["missing"]);
    assert!(!many.truncated);

    assert!(kv.check("app", "cfg", Expect::Absent).await.unwrap().reason == Some(Reason::Exists));
    let d = kv.delete("app", "nothing").await.unwrap();
    assert!(d.applied);
    assert!(kv.get("app", "nothing").await.unwrap().is_none());
    assert_eq!(kv.delete("app", "nothing").await.unwrap().reason, Some(Reason::Absent));

    assert!(kv.once("app", "evt:1", Expiry::secs(60).unwrap()).await.unwrap().applied);
    assert!(!kv.once("app", "evt:1", Expiry::secs(60).unwrap()).await.unwrap().applied);

    // Bad input is the broker's verdict, with its code.
    let err = kv.put("NOT A NAMESPACE", "k", &1, Expiry::Forever).await.unwrap_err();
    match err {
        Error::Status { status, ref code, ref reason, .. } => {
            assert_eq!(status, 400);
            assert_eq!(code.as_deref(), Some("kv_bad_request"));
            assert_eq!(reason.as_deref(), Some("kv_bad_namespace"));
        }
        other => panic!("expected a 400, got {other:?}"),
    }
}

async fn put_if_absent_race_has_one_winner<B: Broker>(queen: Queen<B>) {
    let kv = queen.kv();
    let racers = (0..8).map(|i| {
        let kv = kv.clone();
        async move {
            kv.put_if_absent("locks", "job", &json!({"by": i}), Expiry::secs(30).unwrap()).await.unwrap()
        }
    });
    let results = futures_util::future::join_all(racers).await;
    let winners: Vec<_> = results.iter().filter(|w| w.applied).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = winners[0];
    for loser in results.iter().filter(|w| !w.applied) {
        assert_eq!(loser.reason, Some(Reason::Exists));
        assert_eq!(loser.version, winner.version);
        assert_eq!(loser.value.as_ref().unwrap().get(), winner.value.as_ref().unwrap().get());
    }
}

async fn incr_with_max_refuses_and_writes_nothing<B: Broker>(queen: Queen<B>) {
    let kv = queen.kv();
    let window = Expiry::secs(60).unwrap();
    let a = kv.incr("quota", "acme:1", Incr::by(1).max(2), window).await.unwrap();
    assert!(a.applied && a.value == 1);
    let b = kv.incr("quota", "acme:1", Incr::by(1).max(2), window).await.unwrap();
    assert!(b.applied && b.value == 2);
    let c = kv.incr("quota", "acme:1", Incr::by(1).max(2), window).await.unwrap();
    assert_eq!((c.applied, c.reason.clone(), c.value, c.version), (false, Some(Reason::Limit), 2, b.version));
    // The guard holds on the create branch too.
    let d = kv.incr("quota", "acme:2", Incr::by(10).max(5), window).await.unwrap();
    assert_eq!((d.applied, d.reason, d.value), (false, Some(Reason::Limit), 0));
    assert!(kv.get("quota", "acme:2").await.unwrap().is_none());
    // Negative deltas and min.
    let e = kv.incr("quota", "acme:1", Incr::by(-5).min(0), window).await.unwrap();
    assert_eq!((e.applied, e.value), (false, 2));
    // A non-integer live value is a typed error, not a number.
    kv.put("quota", "word", &"five", Expiry::Forever).await.unwrap();
    assert!(matches!(kv.incr("quota", "word", 1, window).await, Err(Error::NotACounter { .. })));
}

async fn counter_past_i64_is_an_error_and_raw_keeps_every_digit<B: Broker>(queen: Queen<B>) {
    let kv = queen.kv();
    kv.put("big", "n", &*raw("100000000000000000000"), Expiry::Forever).await.unwrap();
    let e = kv.get("big", "n").await.unwrap().unwrap();
    assert_eq!(e.value.get(), "100000000000000000000");

    match kv.incr("big", "n", 1, Expiry::Forever).await {
        Err(Error::Precision { raw }) => assert_eq!(raw, "100000000000000000001"),
        other => panic!("expected Error::Precision, got {other:?}"),
    }
    let w = kv.incr_raw("big", "n", 1, Expiry::Forever).await.unwrap();
    assert!(w.applied);
    assert_eq!(w.value.unwrap().get(), "100000000000000000002");

    // At the edge: i64::MAX decodes, one more does not.
    kv.put("big", "edge", &(i64::MAX - 1), Expiry::Forever).await.unwrap();
    assert_eq!(kv.incr("big", "edge", 1, Expiry::Forever).await.unwrap().value, i64::MAX);
    assert!(matches!(kv.incr("big", "edge", 1, Expiry::Forever).await, Err(Error::Precision { .. })));
}

async fn prefix_pages_and_list_all<B: Broker>(queen: Queen<B>) {
    let kv = queen.kv();
    for k in ["walk%_:3", "walk%_:1", "walk%_:5", "walk%_:2", "walk%_:4", "walkX:1"] {
        kv.put("pages", k, &k, Expiry::Forever).await.unwrap();
    }
    let p = kv.get_prefix("pages", "walk%_:", None, Some(2)).await.unwrap();
    assert_eq!(p.rows.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["walk%_:1", "walk%_:2"]);
    assert!(p.truncated);
    assert_eq!(p.next_after.as_deref(), Some("walk%_:2"));

    let all: Vec<_> = kv.list_all("pages", "walk%_:").try_collect().await.unwrap();
    assert_eq!(
        all.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["walk%_:1", "walk%_:2", "walk%_:3", "walk%_:4", "walk%_:5"]
    );
    let mut pages = kv.pages("pages", "walk").limit(4);
    let mut sizes = Vec::new();
    while let Some(page) = pages.next_page().await.unwrap() {
        sizes.push(page.rows.len());
    }
    assert_eq!(sizes, [4, 2]);
    assert!(matches!(kv.get_prefix("pages", "", None, None).await, Err(Error::Invalid(_))));
}

async fn consume_loop_runs_concurrently_and_stops_on_idle<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("work");
    for p in 0..8 {
        let batch: Vec<_> = (0..5)
            .map(|i| PushItem::new(&json!({"p": p, "i": i})).unwrap().partition(format!("p{p}")))
            .collect();
        q.push_batch(&batch).await.unwrap();
    }
    let seen = Mutex::new(BTreeMap::<String, Vec<i64>>::new());
    let in_flight = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let started = std::time::Instant::now();
    let stats = q
        .consume()
        .concurrency(4)
        .batch(5)
        .wait(Duration::from_millis(200))
        .stop_after_idle(Duration::from_millis(600))
        .each(|m: Message| {
            let (seen, in_flight, peak) = (&seen, &in_flight, &peak);
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                let v: Value = m.json().unwrap();
                seen.lock().unwrap().entry(m.partition.clone()).or_default().push(v["i"].as_i64().unwrap());
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<(), String>(())
            }
        })
        .await
        .unwrap();
    assert_eq!(stats.completed, 40);
    assert_eq!(stats.failed, 0);
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 8);
    for (p, order) in &seen {
        assert_eq!(order, &[0, 1, 2, 3, 4], "partition {p} out of order");
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!((2..=4).contains(&peak), "peak concurrency {peak}");
    assert!(started.elapsed() < Duration::from_secs(8));
    // Everything was acked.
    assert!(q.pop().batch(100).partitions(8).fetch().await.unwrap().is_empty());
}

async fn consume_nacks_a_failure_and_redelivers_the_rest<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("flaky");
    q.push_batch(&items("f", 4)).await.unwrap();
    let calls = Mutex::new(Vec::<String>::new());
    let failed_once = AtomicUsize::new(0);
    let stats = q
        .consume()
        .batch(4)
        .wait(Duration::from_millis(100))
        .stop_after_idle(Duration::from_millis(400))
        .each(|m: Message| {
            let (calls, failed_once) = (&calls, &failed_once);
            async move {
                calls.lock().unwrap().push(m.transaction_id.clone());
                if m.transaction_id == "f-1" && failed_once.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err("boom");
                }
                Ok(())
            }
        })
        .await
        .unwrap();
    assert_eq!(*calls.lock().unwrap(), ["f-0", "f-1", "f-1", "f-2", "f-3"]);
    assert_eq!((stats.completed, stats.failed, stats.batches), (4, 1, 2));
}

async fn consume_renews_the_lease_and_stops_on_signal<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("slow");
    q.push_batch(&items("s", 2)).await.unwrap();
    let stop = StopSignal::new();
    let handled = Mutex::new(Vec::<String>::new());
    // Two workers, one partition: if the 1 s lease were not renewed during the
    // 2.2 s handler, the other worker would get the batch again.
    let stats = q
        .consume()
        .concurrency(2)
        .batch(2)
        .lease_seconds(1)
        .wait(Duration::from_millis(200))
        .stop_on(&stop)
        .batches(|batch: Vec<Message>| {
            let (handled, stop) = (&handled, &stop);
            async move {
                tokio::time::sleep(Duration::from_millis(2200)).await;
                handled.lock().unwrap().extend(tx_ids(&batch));
                stop.stop();
                Ok::<(), String>(())
            }
        })
        .await
        .unwrap();
    assert_eq!(*handled.lock().unwrap(), ["s-0", "s-1"]);
    assert_eq!((stats.completed, stats.batches), (2, 1));
    assert!(q.pop().batch(10).fetch().await.unwrap().is_empty());
}

async fn state_handle_derives_the_key_from_the_lane<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("meters");
    q.push_item(PushItem::new(&json!({"kwh": 3})).unwrap().partition("meter-7")).await.unwrap();
    let m = q.pop().fetch().await.unwrap().remove(0);
    assert_eq!(m.state_key("total"), "@p/meters/meter-7/__QUEUE_MODE__/total");
    let state = queen.state_in("meters", &m, "total");
    assert_eq!((state.ns(), state.key()), ("meters", "@p/meters/meter-7/__QUEUE_MODE__/total"));
    assert!(state.get().await.unwrap().is_none());
    assert_eq!(state.incr(3, Expiry::Forever).await.unwrap().value, 3);
    assert_eq!(state.incr(4, Expiry::Forever).await.unwrap().value, 7);
    let e = queen.kv().get("meters", "@p/meters/meter-7/__QUEUE_MODE__/total").await.unwrap().unwrap();
    assert_eq!(e.value.get(), "7");
    let w = state.put(&json!({"kwh": 7}), Expiry::Forever).await.unwrap();
    let v = NonZeroU64::new(w.version).unwrap();
    assert!(state.put_expect(&json!({"kwh": 8}), Expiry::Forever, Expect::Version(v)).await.unwrap().applied);
    queen.ack(&m).await.unwrap();

    // A consumer group puts its own name in the key; the default namespace is "state".
    let g = q.clone().group("billing").subscription(Subscription::All);
    let gm = g.pop().fetch().await.unwrap().remove(0);
    assert_eq!(gm.group(), Some("billing"));
    let s = queen.state(&gm, "total");
    assert_eq!((s.ns(), s.key()), ("state", "@p/meters/meter-7/billing/total"));
    // The state write shares the commit of the ack.
    let out =
        queen.tx().kv().put(s.ns(), s.key(), &json!(3), Expiry::Forever).ack(&gm).commit().await.unwrap();
    assert!(out.is_committed());
    assert_eq!(s.get().await.unwrap().unwrap().value.get(), "3");
    assert!(s.delete().await.unwrap().applied);
}

async fn groups_fan_out_and_subscription_new_skips_history<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("events");
    q.push_batch(&items("old", 2)).await.unwrap();
    let all = q.clone().group("audit").subscription(Subscription::All);
    let fresh = q.clone().group("live").subscription(Subscription::New);
    // Registration happens on the first pop, even an empty one.
    assert!(fresh.pop().fetch().await.unwrap().is_empty());
    q.push_batch(&items("new", 1)).await.unwrap();

    let a = all.pop().batch(10).fetch().await.unwrap();
    assert_eq!(tx_ids(&a), ["old-0", "old-1", "new-0"]);
    queen.ack_batch(&a.iter().map(Ack::completed).collect::<Vec<_>>()).await.unwrap();
    let f = fresh.pop().batch(10).fetch().await.unwrap();
    assert_eq!(tx_ids(&f), ["new-0"]);
    assert_eq!(f[0].consumer_group, "live");
    queen.ack(&f[0]).await.unwrap();
    // Queue mode has its own cursor.
    let qm = q.pop().batch(10).auto_ack().fetch().await.unwrap();
    assert_eq!(qm.len(), 3);
    assert!(qm[0].lease_id.is_none());
}

async fn buffered_push_flushes_on_size_and_on_time<B: Broker + 'static>(queen: Queen<B>) {
    let q = queen.queue("buffered");
    let buf = q.buffered(BufferOptions { max_messages: 3, max_delay: Duration::from_millis(150) });
    for i in 0..3 {
        buf.push(&json!({"i": i})).await.unwrap();
    }
    // Full at 3: flushed inline.
    assert!(buf.is_empty());
    assert_eq!(q.pop().batch(10).auto_ack().fetch().await.unwrap().len(), 3);

    buf.push(&json!({"i": 3})).await.unwrap();
    assert_eq!(buf.len(), 1);
    let got = q.pop().batch(10).auto_ack().wait(Duration::from_secs(3)).fetch().await.unwrap();
    assert_eq!(got.len(), 1, "the timer flushed the lone message");

    buf.push(&json!({"i": 4})).await.unwrap();
    let sent = buf.close().await.unwrap();
    assert!(sent.len() <= 1);
    let rest = q.pop().batch(10).auto_ack().wait(Duration::from_secs(1)).fetch().await.unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].json::<Value>().unwrap(), json!({"i": 4}));
}

async fn payload_numbers_keep_every_digit<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("digits");
    let text = r#"{"big":123456789012345678901234567890,"pi":3.14159265358979323846264338327950288}"#;
    q.push_item(PushItem::raw(raw(text))).await.unwrap();
    q.push(&Value::Null).await.unwrap();
    let msgs = q.pop().batch(2).fetch().await.unwrap();
    assert!(msgs[0].data.get().contains("123456789012345678901234567890"));
    assert!(msgs[0].data.get().contains("3.14159265358979323846264338327950288"));
    assert_eq!(msgs[1].data.get(), "null");
    let ids: HashSet<_> = msgs.iter().map(|m| m.transaction_id.clone()).collect();
    assert_eq!(ids.len(), 2, "every push mints its own transaction id");
}

async fn lease_extension_answers<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("leases");
    q.push(&1).await.unwrap();
    let m = q.pop().lease_seconds(5).fetch().await.unwrap().remove(0);
    let lease = m.lease_id.clone().unwrap();
    let r = queen.extend_lease(&lease, 30).await.unwrap();
    assert!(r.success && r.renewed == 1 && r.new_expires_at.is_some());
    queen.ack(&m).await.unwrap();
    let gone = queen.extend_lease(&lease, 30).await.unwrap();
    assert!(!gone.success && gone.new_expires_at.is_none());
}

async fn locks_fence_a_bundle_with_their_permit<B: Broker>(queen: Queen<B>) {
    let locks = queen.locks();
    let first = locks.acquire("leader", 1, Some("a"), 1).await.unwrap();
    let zombie = Permit::of(&first).expect("granted");
    let refused = locks.acquire("leader", 30, Some("b"), 1).await.unwrap();
    assert_eq!((refused.acquired, refused.reason.as_deref()), (Some(false), Some("held")));
    assert_eq!(refused.holders.unwrap()[0].owner.as_deref(), Some("a"));
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let live =
        Permit::of(&locks.acquire("leader", 30, Some("b"), 1).await.unwrap()).expect("granted after expiry");
    assert!(live.token > zombie.token, "fencing tokens rise");

    // The zombie's bundle is fenced out whole; the live holder's commits.
    let lost = queen.tx().guard(&zombie).queue("fenced").push(&json!({"by": "a"})).commit().await.unwrap();
    assert!(matches!(lost, TxOutcome::PreconditionLost { failed_index: 1, .. }), "{lost:?}");
    let ok = queen.tx().guard(&live).queue("fenced").push(&json!({"by": "b"})).commit().await.unwrap();
    assert!(ok.is_committed());
    let msgs = queen.queue("fenced").pop().batch(10).fetch().await.unwrap();
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].json::<Value>().unwrap(), json!({"by": "b"}));

    let renewed = Permit::of(&locks.renew(&live, 30).await.unwrap()).expect("renewed");
    assert!(renewed.token > live.token);
    assert_eq!(locks.release(&live).await.unwrap().released, Some(false), "the old token no longer releases");
    assert_eq!(locks.release(&renewed).await.unwrap().released, Some(true));
    assert_eq!(locks.get("leader").await.unwrap().held, Some(false));
}

async fn timers_schedule_fire_and_ride_a_bundle<B: Broker>(queen: Queen<B>) {
    let timers = queen.timers();
    let later =
        TimerSpec::new("remind", "later", &json!({"n": 1}), Duration::from_secs(600)).unwrap().txn("t-later");
    let r = timers.schedule(later.clone()).await.unwrap();
    assert_eq!((r.ok, r.status.as_str()), (true, "scheduled"));
    assert_eq!(timers.schedule(later).await.unwrap().status, "rescheduled");
    let pending = timers.peek("remind", "later").await.unwrap().expect("pending");
    assert_eq!(pending.txn, "t-later");
    assert_eq!(pending.payload.unwrap().get(), r#"{"n":1}"#);
    let page = timers.list("remind", None, Some(10)).await.unwrap();
    assert_eq!(page.rows.len(), 1);
    assert!(!page.truncated);
    assert_eq!(timers.cancel("remind", "later").await.unwrap().status, "cancelled");
    assert_eq!(timers.cancel("remind", "later").await.unwrap().status, "absent");
    assert!(timers.peek("remind", "later").await.unwrap().is_none());

    // In a bundle: scheduled with the push, and due now, so it fires.
    let now = TimerSpec::new("remind", "now", &json!({"n": 2}), Delay(-1)).unwrap().txn("t-now");
    let out =
        queen.tx().queue("remind-log").push(&json!("pushed")).schedule_timer(&now).commit().await.unwrap();
    let TxOutcome::Committed { results, .. } = out else { panic!("committed: {out:?}") };
    let promised = match &results[1] {
        TxResult::Timer { index: 1, result } => result.message_id.clone().expect("messageId"),
        other => panic!("a timer result: {other:?}"),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let fired = loop {
        let got = queen.queue("remind").pop().fetch().await.unwrap();
        if let Some(m) = got.into_iter().next() {
            break m;
        }
        assert!(tokio::time::Instant::now() < deadline, "the timer fired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(fired.transaction_id, "t-now");
    assert_eq!(fired.id, promised);
}

async fn reads_by_offset_take_no_lease<B: Broker>(queen: Queen<B>) {
    let q = queen.queue("log");
    q.push_batch(&items("r", 3)).await.unwrap();
    let entry = FetchEntry { queue: "log".into(), partition: "Default".into(), offset: 1, max_bytes: None };
    let got = queen.reads().fetch(&[entry], None).await.unwrap();
    assert_eq!((got[0].high_watermark, got[0].log_start_offset), (3, 0));
    assert_eq!(got[0].records.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(got[0].records[0].transaction_id, "r-1");
    let page = queen.reads().changed("log", None, None, None).await.unwrap();
    assert_eq!(page.partitions.len(), 1);
    assert_eq!(page.partitions[0].last_offset, 2);
    assert_eq!(page.safe_time.len(), 27);
    assert_eq!(q.pop().batch(10).fetch().await.unwrap().len(), 3, "no cursor moved");
}

async fn options_round_trip_and_namespace_pops_span_queues<B: Broker>(queen: Queen<B>) {
    let opts = QueueOptions {
        retry_delay: Some(250),
        ttl: Some(3600),
        retention_enabled: Some(true),
        retention_seconds: Some(86_400),
        completed_retention_seconds: Some(600),
        max_wait_time_seconds: Some(7200),
        priority: Some(9),
        min_pop_wait_time: Some(120),
        retention_sink_hold: Some("archive".into()),
        ..QueueOptions::default()
    };
    let urgent = queen.queue("urgent").in_namespace("billing").task("invoice");
    let echoed = urgent.configure(&opts).await.unwrap();
    assert_eq!(echoed.retry_delay, Some(250));
    assert_eq!(echoed.ttl, Some(3600));
    assert_eq!(echoed.retention_enabled, Some(true));
    assert_eq!(echoed.max_wait_time_seconds, Some(7200));
    assert_eq!(echoed.encryption_enabled, Some(false));
    assert_eq!(echoed.min_pop_wait_time, Some(120));
    assert_eq!(echoed.retention_sink_hold.as_deref(), Some("archive"));
    assert_eq!(echoed.retention_sink_hold_max_seconds, Some(604_800));
    let routine = queen.queue("routine").in_namespace("billing").task("invoice");
    routine.configure(&QueueOptions { priority: Some(1), ..QueueOptions::default() }).await.unwrap();
    routine.push_batch(&items("low", 1)).await.unwrap();
    urgent.push_batch(&items("high", 1)).await.unwrap();

    let billing = queen.namespace("billing");
    let first = billing.pop().batch(10).fetch().await.unwrap();
    assert_eq!(tx_ids(&first), ["high-0"], "higher priority first");
    assert_eq!(first[0].queue, "urgent");
    let second = queen.task("invoice").pop().batch(10).fetch().await.unwrap();
    assert_eq!(tx_ids(&second), ["low-0"]);
    assert!(queen.namespace("billing").task("other").pop().fetch().await.unwrap().is_empty());
    queen.ack(&first[0]).await.unwrap();
}

async fn ephemeral_queues_push_pop_ack_and_fan_out<B: Broker>(queen: Queen<B>) {
    let q = queen.ephemeral(format!("eph-{}", std::process::id()));
    q.configure(&queen_client::EphemeralOptions { retry_limit: Some(2), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(q.push(&[json!({"n": 1}), json!({"n": 2})]).await.unwrap(), 2);
    let a = q.clone().group("a").pop(10, None, false).await.unwrap();
    let b = q.clone().group("b").pop(10, None, false).await.unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!(
        b.iter().map(|m| m.json::<Value>().unwrap()).collect::<Vec<_>>(),
        [json!({"n": 1}), json!({"n": 2})]
    );
    let outcomes = q.clone().group("a").ack(&a[..1], false).await.unwrap();
    assert_eq!(outcomes[0].outcome, "redelivered");
    let again = q.clone().group("a").pop(1, None, false).await.unwrap();
    assert_eq!((again[0].id.clone(), again[0].attempts), (a[0].id.clone(), 2));
    assert_eq!(
        q.clone().group("b").ack(&b, true).await.unwrap().iter().filter(|o| o.outcome == "acked").count(),
        2
    );
    assert_eq!(q.depth().await.unwrap()["groups"].as_array().unwrap().len(), 2, "groups a and b");
    assert!(q.delete().await.unwrap());
    assert!(q.depth().await.is_err(), "a deleted queue is not found");
}

both!(
    ephemeral_queues_push_pop_ack_and_fan_out,
    options_round_trip_and_namespace_pops_span_queues,
    push_pop_ack_in_order,
    nack_redelivers_then_dead_letters,
    dead_letters_replay_by_record_and_purge,
    tx_once_and_ack_commit_then_a_second_once_loses,
    tx_kv_rider_reads_and_fences,
    kv_found_and_null_are_distinct,
    put_if_absent_race_has_one_winner,
    incr_with_max_refuses_and_writes_nothing,
    counter_past_i64_is_an_error_and_raw_keeps_every_digit,
    prefix_pages_and_list_all,
    consume_loop_runs_concurrently_and_stops_on_idle,
    consume_nacks_a_failure_and_redelivers_the_rest,
    consume_renews_the_lease_and_stops_on_signal,
    state_handle_derives_the_key_from_the_lane,
    groups_fan_out_and_subscription_new_skips_history,
    buffered_push_flushes_on_size_and_on_time,
    payload_numbers_keep_every_digit,
    lease_extension_answers,
    locks_fence_a_bundle_with_their_permit,
    timers_schedule_fire_and_ride_a_bundle,
    reads_by_offset_take_no_lease,
);

#[test]
fn expiry_and_state_key_rules() {
    assert!(Expiry::secs(0).is_err());
    assert_eq!(Expiry::secs(5).unwrap(), Expiry::Ttl(NonZeroU64::new(5).unwrap()));
    assert!(Expiry::ttl(Duration::from_millis(1500)).is_err());
    assert_eq!(queen_client::state_key("q", "p", QUEUE_MODE, "n"), "@p/q/p/__QUEUE_MODE__/n");
    assert_eq!(queen_client::parse_i64(&raw("-9223372036854775808")).unwrap(), i64::MIN);
    assert!(matches!(queen_client::parse_i64(&raw("9223372036854775808")), Err(Error::Precision { .. })));
    assert!(matches!(queen_client::parse_i64(&raw("1.5")), Err(Error::Decode(_))));
}

#[allow(dead_code)]
fn broker_futures_are_send<B: Broker + 'static>(queen: Queen<B>) {
    fn is_send<T: Send>(_: T) {}
    is_send(async move {
        let _ = queen.kv().get("a", "b").await;
        let _ = queen.tx().commit().await;
        let _ = queen.queue("q").pop().fetch().await;
    });
    let _ = Arc::new(0);
}
