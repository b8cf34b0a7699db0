//! Push and pop over HTTP.
mod common;

use common::TestBroker;
use serde_json::json;

#[tokio::test]
async fn push_answers_201_with_snake_case_ids_and_pop_returns_them_in_order() {
    let b = TestBroker::start().await;
    let pushed =
        b.push("orders", "Default", &[("t1", json!({"n": 1})), ("t2", json!(null)), ("t3", json!({}))]).await;
    assert_eq!(pushed.as_array().map(Vec::len), Some(3));
    assert_eq!(pushed[0]["status"], "queued");
    assert!(pushed[0]["message_id"].is_string());
    assert_eq!(pushed[1]["transaction_id"], "t2");
    let (status, popped) = b.pop("orders", "batch=10").await;
    assert_eq!(status, 200);
    assert_eq!(TestBroker::tx_ids(&popped), ["t1", "t2", "t3"]);
    assert_eq!(popped["messages"][1]["data"], json!(null));
    assert_eq!(popped["messages"][2]["data"], json!({}));
    assert_eq!(popped["messages"][0]["id"], pushed[0]["message_id"]);
}

#[tokio::test]
async fn pop_of_an_empty_queue_is_204() {
    let b = TestBroker::start().await;
    let (status, body) = b.pop("nothing-here", "batch=1").await;
    assert_eq!(status, 204);
    assert!(body.is_null());
}
