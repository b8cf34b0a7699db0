//! The overview's traffic of the last hour: each engine counts messages
//! pushed, pops that delivered and messages acked, its heartbeat adds them
//! to `queen.broker_minutes`, and the charts sum every broker on the
//! database.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::TestBroker;
use serde_json::json;

/// The text of the element with `id` (up to its first child or end tag).
fn by_id(html: &str, id: &str) -> String {
    let marker = format!("id=\"{id}\">");
    let start = html.find(&marker).unwrap_or_else(|| panic!("no #{id} in {html}")) + marker.len();
    html[start..].split('<').next().unwrap().to_owned()
}

fn hour_sums(hour: &[queen_engine::TrafficMinute]) -> (i64, i64, i64) {
    hour.iter().fold((0, 0, 0), |(p, o, a), m| (p + m.pushed, o + m.popped, a + m.acked))
}

#[tokio::test]
async fn the_overview_charts_the_last_hour_summed_over_every_broker() {
    let a = TestBroker::start().await;
    let b = TestBroker::on(&a.db).await;
    // Through A: five messages pushed (requests of three and two), one pop
    // that delivers, its message acked.
    a.push("tq", "Default", &[("a1", json!(1)), ("a2", json!(2)), ("a3", json!(3))]).await;
    a.push("tq", "p2", &[("a4", json!(4)), ("a5", json!(5))]).await;
    let first = a.pop_some("tq", "batch=1&subscriptionMode=all&consumerGroup=g").await;
    a.ack(&first["messages"][0], "completed", Some("g")).await;
    // Through B: three pushed, one pop delivering all three, three acks;
    // a pop that finds nothing is not counted.
    b.push("tq2", "Default", &[("b1", json!(1)), ("b2", json!(2)), ("b3", json!(3))]).await;
    let popped = b.pop_some("tq2", "batch=10").await;
    assert_eq!(popped["messages"].as_array().unwrap().len(), 3);
    for m in popped["messages"].as_array().unwrap() {
        b.ack(m, "completed", None).await;
    }
    b.pop_none("tq2", "batch=10").await;

    let totals = |pushed, popped, acked| queen_engine::TrafficTotals { pushed, popped, acked };
    assert_eq!(a.engine.traffic(), totals(5, 1, 1));
    assert_eq!(b.engine.traffic(), totals(3, 1, 3));

    // Written now rather than at the next heartbeat; a second flush (and
    // the heartbeats running meanwhile) adds nothing twice.
    for _ in 0..2 {
        a.engine.flush_traffic().await.unwrap();
        b.engine.flush_traffic().await.unwrap();
    }
    let brokers =
        a.scalar("SELECT count(DISTINCT broker_id) FROM queen.broker_minutes WHERE pushed > 0").await;
    assert_eq!(brokers, 2);
    for engine in [&a.engine, &b.engine] {
        let hour = engine.traffic_hour().await.unwrap();
        assert_eq!(hour.len(), 60, "one row per minute");
        assert!(hour.windows(2).all(|w| w[0].minute < w[1].minute), "oldest first");
        assert_eq!(hour_sums(&hour), (8, 2, 4));
    }

    // Both overviews chart the sums of both brokers.
    for broker in [&a, &b] {
        let page = broker.http.get(broker.url("/")).send().await.unwrap();
        assert_eq!(page.status(), 200);
        let html = page.text().await.unwrap();
        assert_eq!(by_id(&html, "ov-hour-pushed-total"), "8");
        assert_eq!(by_id(&html, "ov-hour-popped-total"), "2");
        assert_eq!(by_id(&html, "ov-hour-acked-total"), "4");
        for id in ["ov-hour-pushed-chart", "ov-hour-popped-chart", "ov-hour-acked-chart"] {
            assert!(html.contains(&format!("id=\"{id}\"")), "no #{id}");
        }
        // One bar per minute in each of the three charts.
        assert_eq!(html.matches("<rect ").count(), 180);
        assert!(html.contains("last 60 min"));
    }
}

#[tokio::test]
async fn an_idle_hour_is_sixty_empty_minutes() {
    let a = TestBroker::start().await;
    a.engine.flush_traffic().await.unwrap();
    let hour = a.engine.traffic_hour().await.unwrap();
    assert_eq!(hour.len(), 60);
    assert_eq!(hour_sums(&hour), (0, 0, 0));
    assert_eq!(a.scalar("SELECT count(*) FROM queen.broker_minutes").await, 0, "no row for no traffic");
    let html = a.http.get(a.url("/")).send().await.unwrap().text().await.unwrap();
    assert_eq!(by_id(&html, "ov-hour-pushed-total"), "0");
}
