//! The dashboard in a real browser: headless Chromium driven through
//! chromedriver (WebDriver, `fantoccini`). The live figures refresh without a
//! reload (htmx polling), and dead letters are replayed by record and purged
//! by queue (or group) with the DLQ page's buttons.
//!
//! Skipped (with a note) when `chromedriver` is not installed; on Debian:
//! `apt-get install chromium chromium-driver`. `scripts/test` installs them
//! and sets `QUEEN_REQUIRE_BROWSER=1`, which turns the skip into a failure. With `QUEEN_SCREENSHOTS=dir`
//! it saves PNGs of the main pages there (`docs/screenshots/` holds them).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::TestBroker;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

/// chromedriver on a free local port, killed when dropped.
struct Driver {
    _child: tokio::process::Child,
    url: String,
}

fn chromedriver() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("chromedriver")).find(|p| p.is_file())
}

async fn start_driver() -> Option<Driver> {
    let Some(bin) = chromedriver() else {
        assert!(
            std::env::var_os("QUEEN_REQUIRE_BROWSER").is_none(),
            "QUEEN_REQUIRE_BROWSER is set but chromedriver is not installed"
        );
        eprintln!("skipped: chromedriver is not installed (apt-get install chromium chromium-driver)");
        return None;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = tokio::process::Command::new(bin)
        .arg(format!("--port={port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    for _ in 0..100 {
        if let Ok(r) = reqwest::get(format!("{url}/status")).await {
            if r.status().is_success() {
                return Some(Driver { _child: child, url });
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromedriver did not answer on {url}");
}

async fn browser(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                        "--window-size=1280,900"]}),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a browser session")
}

/// The text of the element `id`. An htmx refresh may swap the element
/// between finding it and reading it (a stale reference): find it again.
async fn text(c: &Client, id: &str) -> String {
    for _ in 0..20 {
        match c.find(Locator::Id(id)).await.unwrap().text().await {
            Ok(text) => return text,
            Err(e) if e.is_stale_element_reference() => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("reading #{id}: {e}"),
        }
    }
    panic!("#{id} went stale twenty times in a row");
}

/// Clicks the element `css`, finding it again when a refresh swapped it.
async fn click(c: &Client, css: &str) {
    for _ in 0..20 {
        match c.find(Locator::Css(css)).await.unwrap().click().await {
            Ok(()) => return,
            Err(e) if e.is_stale_element_reference() => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("clicking {css}: {e}"),
        }
    }
    panic!("{css} went stale twenty times in a row");
}

/// Saves a screenshot of the current page when QUEEN_SCREENSHOTS names a directory.
async fn screenshot(c: &Client, name: &str) {
    if let Some(dir) = std::env::var_os("QUEEN_SCREENSHOTS") {
        let png = c.screenshot().await.unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), png).unwrap();
    }
}

#[tokio::test]
async fn figures_refresh_live_and_replay_is_a_click() {
    let Some(driver) = start_driver().await else { return };
    let b = TestBroker::start().await;
    b.configure_ok("orders", json!({})).await;
    b.configure_ok("payments", json!({"retryLimit": 0})).await;
    b.push("orders", "eu", &[("o-1", json!({"sku": 1})), ("o-2", json!({"sku": 2}))]).await;
    b.push("orders", "us", &[("o-3", json!({"sku": 3}))]).await;
    b.push("emails", "Default", &[("e-1", json!({"to": "a@example.com"}))]).await;
    b.pop_some("orders", "batch=1&subscriptionMode=all&consumerGroup=billing").await;
    b.push("payments", "Default", &[("p-bad", json!({"amount": "?"}))]).await;
    let popped = b.pop_some("payments", "batch=1").await;
    let r = b.ack_with(&popped["messages"][0], "failed", Some("amount is not a number"), None).await;
    assert_eq!(r["dlq"], true, "{r}");
    let put = |key: &str, value: serde_json::Value| json!({"op": "put", "ns": "app", "key": key, "value": value, "forever": true});
    let ops = json!({"operations": [put("feature/dark-mode", json!(true)), put("user/42", json!({"name": "Ada"}))]});
    assert_eq!(b.post("/api/v1/kv", &ops).await.0, 200);
    use base64::Engine as _;
    let payload = base64::engine::general_purpose::STANDARD.encode(json!({"remind": "ada"}).to_string());
    let timer = json!({"op": "schedule", "queue": "reminders", "timerKey": "ada-1", "payload": payload,
                       "delayMs": 3_600_000});
    assert_eq!(b.post("/api/v1/timers", &json!({ "operations": [timer] })).await.0, 200);
    let lock = json!({"op": "acquire", "name": "nightly-report", "ttlSeconds": 600, "owner": "worker-7"});
    assert_eq!(b.post("/api/v1/locks", &json!({ "operations": [lock] })).await.0, 200);
    // The minute charts read what the registry heartbeat wrote: write it now.
    b.engine.flush_traffic().await.unwrap();
    let c = browser(&driver).await;

    // Overview: the total follows a push within a refresh, without a reload.
    c.goto(&b.url("/")).await.unwrap();
    let before: i64 = text(&c, "ov-total").await.parse().unwrap();
    screenshot(&c, "overview").await;
    b.push("emails", "Default", &[("e-2", json!({"to": "b@example.com"}))]).await;
    let mut seen = before;
    for _ in 0..40 {
        seen = text(&c, "ov-total").await.parse().unwrap();
        if seen > before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(seen, before + 1, "the live refresh shows the new message");

    // The numbers a page shows are the API's.
    c.goto(&b.url("/dashboard/queues")).await.unwrap();
    let (_, api) = b.get("/api/v1/resources/queues").await;
    for q in api["queues"].as_array().unwrap() {
        let name = q["name"].as_str().unwrap();
        for (field, id) in [("pending", "q-pending-"), ("total", "q-total-")] {
            assert_eq!(
                text(&c, &format!("{id}{name}")).await,
                q["messages"][field].to_string(),
                "{name} {field} on the page and in the API"
            );
        }
    }
    c.goto(&b.url("/dashboard/queues/orders")).await.unwrap();
    let (_, depth) = b.get("/api/v1/resources/queues/orders/depth").await;
    assert_eq!(text(&c, "qd-depth").await, depth["depth"].to_string());

    for (path, name) in [
        ("/dashboard/queues", "queues"),
        ("/dashboard/queues/orders", "queue"),
        ("/dashboard/groups", "groups"),
        ("/dashboard/messages", "messages"),
        ("/dashboard/kv", "kv"),
        ("/dashboard/kv/app", "kv-keys"),
        ("/dashboard/timers?queue=reminders", "timers-and-locks"),
        ("/dashboard/system", "system"),
    ] {
        c.goto(&b.url(path)).await.unwrap();
        c.find(Locator::Css("main h1")).await.unwrap();
        screenshot(&c, name).await;
    }

    // Dead letters: click Replay; the page comes back empty and the message is poppable.
    c.goto(&b.url("/dashboard/dlq")).await.unwrap();
    assert_eq!(text(&c, "dlq-total").await, "1");
    screenshot(&c, "dead-letters").await;
    click(&c, "form[action='/dashboard/dlq/replay'] button").await;
    let mut total = String::new();
    for _ in 0..40 {
        if let Ok(el) = c.find(Locator::Id("dlq-total")).await {
            total = el.text().await.unwrap_or_default();
            if total == "0" {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(total, "0");
    assert_eq!(b.dlq("payments").await["total"], 0);
    let again = b.pop_some("payments", "batch=1").await;
    assert!(again["messages"][0]["transactionId"].as_str().unwrap().starts_with("dlq:"), "{again}");
    assert_eq!(again["messages"][0]["data"], json!({"amount": "?"}), "{again}");
    c.close().await.unwrap();
}

#[tokio::test]
async fn with_auth_on_the_browser_logs_in_and_a_read_only_session_has_no_buttons() {
    let Some(driver) = start_driver().await else { return };
    let auth = queen_server::AuthConfig::default()
        .with_token_spec("viewer-token-0123456789:read-only")
        .and_then(|a| a.with_token_spec("worker-token-0123456789:read-write"))
        .unwrap();
    let b = TestBroker::start_with(queen_server::ServerConfig { auth, ..Default::default() }).await;
    b.engine.push(&json!([{"queue": "jobs", "payload": {"n": 1}}]).to_string()).await.unwrap();
    let c = browser(&driver).await;

    // No session: the dashboard sends the browser to the login form.
    c.goto(&b.url("/")).await.unwrap();
    assert!(c.current_url().await.unwrap().path().ends_with("/dashboard/login"));
    // A wrong token is refused and the form is shown again.
    let token = c.find(Locator::Css("input[name='token']")).await.unwrap();
    token.send_keys("not-a-token").await.unwrap();
    c.find(Locator::Css("form[action='/dashboard/login'] button")).await.unwrap().click().await.unwrap();
    // Waits: the click returns before the next page has loaded.
    c.wait().for_element(Locator::Css("p.err")).await.expect("the refusal on the login form");
    c.find(Locator::Css("input[name='token']")).await.expect("the login form again");
    assert!(c.source().await.unwrap().contains("not accepted"));

    // A read-only token: pages open, and the dead-letter page has no Retry button.
    let token = c.find(Locator::Css("input[name='token']")).await.unwrap();
    token.send_keys("viewer-token-0123456789").await.unwrap();
    c.find(Locator::Css("form[action='/dashboard/login'] button")).await.unwrap().click().await.unwrap();
    c.wait().for_element(Locator::Id("ov-total")).await.expect("the overview after login");
    assert_eq!(text(&c, "ov-total").await, "1");
    c.goto(&b.url("/dashboard/dlq")).await.unwrap();
    c.find(Locator::Css("main h1")).await.unwrap();
    assert!(
        c.find_all(Locator::Css("form[action^='/dashboard/dlq/']")).await.unwrap().is_empty(),
        "a read-only session sees no actions"
    );
    c.close().await.unwrap();
}

/// Waits until `#dlq-total` reads `want` (the redirect after a form's POST
/// lands on a new page; the click returns before it loads).
async fn wait_dlq_total(c: &Client, want: &str) {
    let mut total = String::new();
    for _ in 0..50 {
        if let Ok(el) = c.find(Locator::Id("dlq-total")).await {
            total = el.text().await.unwrap_or_default();
            if total == want {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(total, want, "#dlq-total");
}

#[tokio::test]
async fn a_dead_letter_is_replayed_by_record_and_a_queue_purged_by_clicks() {
    let Some(driver) = start_driver().await else { return };
    let b = TestBroker::start().await;
    b.configure_ok("refunds", json!({"retryLimit": 0})).await;
    for tx in ["r-1", "r-2"] {
        b.push("refunds", "Default", &[(tx, json!({"refund": tx}))]).await;
        for group in ["ledger", "mailer"] {
            let q = format!("batch=1&consumerGroup={group}&subscriptionMode=all");
            let popped = b.pop_some("refunds", &q).await;
            let m = popped["messages"].as_array().unwrap().iter().find(|m| m["transactionId"] == tx).unwrap();
            assert_eq!(b.ack_with(m, "dlq", Some("refund service down"), Some(group)).await["dlq"], true);
        }
    }
    let records = b.dlq("refunds").await["messages"].as_array().unwrap().clone();
    let ledger_r1 =
        records.iter().find(|r| r["transactionId"] == "r-1" && r["consumerGroup"] == "ledger").unwrap()
            ["dlqId"]
            .as_i64()
            .unwrap();
    let c = browser(&driver).await;

    // Without a queue filter there is no purge button, only the hint.
    c.goto(&b.url("/dashboard/dlq")).await.unwrap();
    c.wait().for_element(Locator::Id("dlq-total")).await.unwrap();
    assert!(c.find(Locator::Id("dlq-purge")).await.is_err(), "purge needs a queue filter");

    // Replay: one click moves that one record, back to the filtered page.
    c.goto(&b.url("/dashboard/dlq?queue=refunds")).await.unwrap();
    assert_eq!(text(&c, "dlq-total").await, "4");
    click(&c, &format!("#replay-{ledger_r1}")).await;
    c.wait().for_element(Locator::Id("dlq-total")).await.unwrap();
    wait_dlq_total(&c, "3").await;
    assert!(c.current_url().await.unwrap().as_str().ends_with("/dashboard/dlq?queue=refunds"));
    assert!(c.find(Locator::Id(&format!("dlq-{ledger_r1}"))).await.is_err(), "the replayed row is gone");
    let left = b.dlq("refunds").await;
    assert!(left["messages"].as_array().unwrap().iter().all(|r| r["dlqId"] != ledger_r1), "{left}");
    let popped = b.pop_some("refunds", "batch=10&subscriptionMode=all&consumerGroup=ledger").await;
    assert_eq!(popped["messages"][0]["transactionId"], format!("dlq:{ledger_r1}"), "{popped}");
    assert_eq!(popped["messages"][0]["data"], json!({"refund": "r-1"}));
    let mailer =
        left["messages"].as_array().unwrap().iter().filter(|r| r["consumerGroup"] == "mailer").count();
    assert_eq!(mailer, 2, "the mailer's records stay: {left}");

    // Purge one group's records, then the rest.
    c.find(Locator::Css("#dlq-purge input[name='consumerGroup']"))
        .await
        .unwrap()
        .send_keys("mailer")
        .await
        .unwrap();
    click(&c, "#dlq-purge-button").await;
    c.wait().for_element(Locator::Id("dlq-total")).await.unwrap();
    wait_dlq_total(&c, "1").await;
    let left = b.dlq("refunds").await;
    assert_eq!(left["messages"][0]["consumerGroup"], "ledger", "{left}");
    click(&c, "#dlq-purge-button").await;
    c.wait().for_element(Locator::Id("dlq-total")).await.unwrap();
    wait_dlq_total(&c, "0").await;
    assert_eq!(b.scalar("SELECT count(*) FROM queen.dead_letters").await, 0);
    c.close().await.unwrap();
}
