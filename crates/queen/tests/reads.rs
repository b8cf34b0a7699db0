//! Reads by offset (`POST /api/v1/fetch`) and partitions/changed: offsets
//! per partition from 0 in push order, no lease taken and no cursor moved,
//! byte budgets, entry errors, keyset pages and one timestamp format.
mod common;

use common::TestBroker;
use queen_engine::FetchEntry;
use serde_json::{json, Value};

async fn fetch(b: &TestBroker, body: Value) -> Vec<Value> {
    let (status, answer) = b.post("/api/v1/fetch", &body).await;
    assert_eq!(status, 200, "{answer}");
    let entries = answer["entries"].as_array().expect("entries").clone();
    assert_eq!(entries.len(), body["entries"].as_array().map(Vec::len).unwrap_or(0), "index-aligned");
    entries
}

fn offsets(entry: &Value) -> Vec<i64> {
    entry["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| r["offset"].as_i64().expect("offset"))
        .collect()
}

#[tokio::test]
async fn offsets_count_from_zero_in_push_order_and_reading_moves_no_cursor() {
    let b = TestBroker::start().await;
    for p in ["a", "b"] {
        b.push(
            "logs",
            p,
            &[("t0", json!({"n": 0})), ("t1", json!({"n": 1, "big": 12345678901234567890u64}))],
        )
        .await;
        b.push("logs", p, &[("t2", json!({"n": 2}))]).await;
    }
    let entries = fetch(
        &b,
        json!({"entries": [{"queue": "logs", "partition": "a", "offset": 0, "maxBytes": 1 << 20},
                           {"queue": "logs", "partition": "b", "offset": 1}], "maxBytes": 1 << 23}),
    )
    .await;
    assert_eq!(offsets(&entries[0]), vec![0, 1, 2]);
    assert_eq!(
        (entries[0]["highWatermark"].clone(), entries[0]["logStartOffset"].clone()),
        (json!(3), json!(0))
    );
    assert!(entries[0].get("error").is_none(), "{}", entries[0]);
    let r1 = &entries[0]["records"][1];
    assert_eq!(r1["transactionId"], json!("t1"));
    assert_eq!(
        r1["payload"],
        json!({"n": 1, "big": 12345678901234567890u64}),
        "payload numbers keep every digit"
    );
    assert!(r1["ts"].as_str().is_some_and(|t| t.len() == 27 && t.ends_with('Z')), "{r1}");
    assert_eq!(offsets(&entries[1]), vec![1, 2]);

    // At the high watermark: no records, no error. Past it: out of range.
    let edge = fetch(
        &b,
        json!({"entries": [{"queue": "logs", "partition": "a", "offset": 3},
                           {"queue": "logs", "partition": "a", "offset": 4},
                           {"queue": "logs", "partition": "nope", "offset": 0},
                           {"queue": "no-queue", "partition": "a", "offset": 0}]}),
    )
    .await;
    assert_eq!((edge[0]["records"].clone(), edge[0].get("error")), (json!([]), None));
    assert_eq!(
        edge[1],
        json!({"error": "OFFSET_OUT_OF_RANGE", "highWatermark": 3, "logStartOffset": 0, "records": []})
    );
    assert_eq!(
        edge[2],
        json!({"error": "UNKNOWN_TOPIC_OR_PARTITION", "highWatermark": 0, "logStartOffset": 0, "records": []})
    );
    assert_eq!(edge[3]["error"], json!("UNKNOWN_TOPIC_OR_PARTITION"));
    assert_eq!(edge[3]["records"], json!([]));

    // No lease was taken and no cursor moved: a pop gets all three.
    let popped = b.pop_partition("logs", "a", "batch=10").await.1;
    assert_eq!(popped["messages"].as_array().map(Vec::len), Some(3), "{popped}");
}

#[tokio::test]
async fn byte_budgets_cut_records_but_always_give_one() {
    let b = TestBroker::start().await;
    let big = "x".repeat(1000);
    let items: Vec<(String, Value)> = (0..5).map(|i| (format!("t{i}"), json!({"pad": big}))).collect();
    let refs: Vec<(&str, Value)> = items.iter().map(|(t, v)| (t.as_str(), v.clone())).collect();
    b.push("budget", "p", &refs).await;
    let e =
        fetch(&b, json!({"entries": [{"queue": "budget", "partition": "p", "offset": 0, "maxBytes": 2500}]}))
            .await;
    assert_eq!(offsets(&e[0]), vec![0, 1], "two records of ~1 KB fit 2500 bytes");
    let e =
        fetch(&b, json!({"entries": [{"queue": "budget", "partition": "p", "offset": 2, "maxBytes": 1}]}))
            .await;
    assert_eq!(offsets(&e[0]), vec![2], "a record larger than the budget is still readable, alone");
    // The call's budget spans entries: the second entry starts with nothing left.
    let e = fetch(
        &b,
        json!({"entries": [{"queue": "budget", "partition": "p", "offset": 0}, {"queue": "budget", "partition": "p", "offset": 0}],
               "maxBytes": 3000}),
    )
    .await;
    assert_eq!(offsets(&e[0]), vec![0, 1]);
    assert!(offsets(&e[1]).len() <= 1, "{}", e[1]);
}

#[tokio::test]
async fn a_deleted_head_moves_the_log_start_and_an_offset_below_it_is_out_of_range() {
    let b = TestBroker::start().await;
    b.push("trim", "p", &[("t0", json!(0)), ("t1", json!(1)), ("t2", json!(2))]).await;
    let sql = b.sql().await;
    sql.execute("DELETE FROM queen.messages WHERE transaction_id = 't0'", &[]).await.expect("delete");
    let e = fetch(&b, json!({"entries": [{"queue": "trim", "partition": "p", "offset": 0}, {"queue": "trim", "partition": "p", "offset": 1}]})).await;
    assert_eq!(e[0]["error"], json!("OFFSET_OUT_OF_RANGE"));
    assert_eq!((e[0]["logStartOffset"].clone(), e[0]["highWatermark"].clone()), (json!(1), json!(3)));
    assert_eq!(offsets(&e[1]), vec![1, 2]);
}

#[tokio::test]
async fn bad_fetch_input_is_a_400_naming_the_field() {
    let b = TestBroker::start().await;
    for (body, field) in [
        (json!({"entries": 1}), "entries"),
        (json!({"entries": [{"queue": "q", "offset": -1}]}), "entries[0].offset"),
        (json!({"entries": [{"partition": "p", "offset": 0}]}), "entries[0].queue"),
        (json!({"entries": [], "maxBytes": 0}), "body.maxBytes"),
    ] {
        let (status, answer) = b.post("/api/v1/fetch", &body).await;
        assert_eq!(status, 400, "{body} -> {answer}");
        assert_eq!(answer["field"], json!(field), "{answer}");
    }
    b.push("q", "p", &[("t", json!(1))]).await;
    // Words PostgreSQL would take (`yesterday`) are not ISO-8601; nor is a
    // date PostgreSQL cannot read.
    for since in ["yesterday", "2026-13-45T00:00:00Z"] {
        let (status, answer) =
            b.post("/api/v1/partitions/changed", &json!({"entries": [{"queue": "q", "since": since}]})).await;
        assert_eq!(status, 400, "{since}: {answer}");
        assert_eq!(answer["field"], json!("entries[0].since"), "{answer}");
    }
}

#[tokio::test]
async fn partitions_changed_pages_by_next_and_filters_by_since() {
    let b = TestBroker::start().await;
    let items: Vec<Value> = (0..25)
        .map(|i| json!({"queue": "many", "partition": format!("p{i:02}"), "transactionId": format!("t{i}"), "payload": i}))
        .collect();
    b.push_items(json!(items)).await;
    let mut seen = Vec::new();
    let mut after: Option<Value> = None;
    let mut pages = 0;
    let mut safe_times = Vec::new();
    loop {
        let mut entry = json!({"queue": "many", "limit": 10});
        if let Some(a) = &after {
            entry["after"] = a.clone();
        }
        let (status, answer) = b.post("/api/v1/partitions/changed", &json!({"entries": [entry]})).await;
        assert_eq!(status, 200, "{answer}");
        pages += 1;
        safe_times.push(answer["safeTime"].as_str().expect("safeTime").to_owned());
        let page = &answer["entries"][0];
        for p in page["partitions"].as_array().expect("partitions") {
            assert_eq!((p["lastOffset"].clone(), p["logStart"].clone()), (json!(0), json!(0)), "{p}");
            assert!(p["lastWriteAt"].as_str().is_some_and(|t| t.len() == 27), "{p}");
            seen.push(p["name"].as_str().expect("name").to_owned());
        }
        match page.get("next") {
            Some(n) => after = Some(n.clone()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    seen.sort();
    let want: Vec<String> = (0..25).map(|i| format!("p{i:02}")).collect();
    assert_eq!(seen, want, "every partition exactly once");
    assert!(safe_times.iter().all(|t| t.len() == 27 && t.ends_with('Z')));

    // Since the last safeTime: only what was written after it.
    let since = safe_times.last().cloned().expect("a safeTime");
    b.push("many", "p07", &[("later", json!(1))]).await;
    let (_, answer) =
        b.post("/api/v1/partitions/changed", &json!({"entries": [{"queue": "many", "since": since}]})).await;
    let names: Vec<&str> = answer["entries"][0]["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, vec!["p07"], "{answer}");
    assert_eq!(answer["entries"][0]["partitions"][0]["lastOffset"], json!(1));
}

/// Several entries in one call, each page whole: an unknown queue, a page
/// with a next one, the last page, and one that matches nothing.
#[tokio::test]
async fn partitions_changed_answers_each_entry_whole_in_order() {
    let b = TestBroker::start().await;
    b.push("pc", "a", &[("a1", json!(1)), ("a2", json!(2))]).await;
    b.push("pc", "b", &[("b1", json!(1))]).await;
    let sql = b.sql().await;
    let lane = |name: &'static str| {
        let sql = &sql;
        async move {
            let row = sql
                .query_one(
                    "SELECT p.id::text, queen.iso(p.last_push_at) FROM queen.partitions p WHERE p.name = $1",
                    &[&name],
                )
                .await
                .unwrap();
            (row.get::<_, String>(0), row.get::<_, String>(1))
        }
    };
    let ((a, a_at), (b_id, b_at)) = (lane("a").await, lane("b").await);
    let entries = json!({"entries": [
        {"queue": "nowhere"},
        {"queue": "pc", "limit": 1},
        {"queue": "pc", "limit": 1, "after": a},
        {"queue": "pc", "since": "2999-01-01T00:00:00Z"},
    ]});
    let (status, answer) = b.post("/api/v1/partitions/changed", &entries).await;
    assert_eq!(status, 200, "{answer}");
    let safe = answer["safeTime"].clone();
    assert!(safe.as_str().is_some_and(|t| t.len() == 27), "{answer}");
    let want = json!({"safeTime": safe, "entries": [
        {"error": "UNKNOWN_TOPIC_OR_PARTITION", "partitions": []},
        {"partitions": [{"name": "a", "id": a, "lastOffset": 1, "logStart": 0, "lastWriteAt": a_at}], "next": a},
        {"partitions": [{"name": "b", "id": b_id, "lastOffset": 0, "logStart": 0, "lastWriteAt": b_at}]},
        {"partitions": []},
    ]});
    assert_eq!(answer, want);
}

#[tokio::test]
async fn embedded_fetch_is_typed() {
    let b = TestBroker::start().await;
    b.push("emb", "Default", &[("a", json!({"v": 1})), ("b", json!({"v": 2}))]).await;
    let e = FetchEntry { queue: "emb".into(), partition: "Default".into(), offset: 1, max_bytes: None };
    let got = b.engine.fetch_entries(&[e], None).await.expect("fetch");
    assert_eq!(got[0].high_watermark, 2);
    assert_eq!(got[0].records.len(), 1);
    assert_eq!(got[0].records[0].transaction_id, "b");
    assert_eq!(got[0].records[0].payload.get(), r#"{"v":2}"#);
}
