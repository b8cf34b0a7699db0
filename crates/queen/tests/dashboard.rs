//! The web dashboard over real HTTP (no browser): every page answers and
//! shows the numbers of the JSON API; Retry and Delete of a dead letter;
//! sessions, roles and CSRF with auth on.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::TestBroker;
use queen_server::{AuthConfig, Role, ServerConfig};
use serde_json::{json, Value};

const READ: &str = "dash-read-token";
const RW: &str = "dash-rw-token";
const ADMIN: &str = "dash-admin-token";

/// A client that does not follow redirects and keeps no cookies: each test
/// sends the cookie it means to.
fn browser() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

async fn get(b: &TestBroker, path: &str, cookie: Option<&str>) -> Answer {
    let mut req = browser().get(b.url(path));
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    answer(req).await
}

async fn post_form(b: &TestBroker, path: &str, cookie: Option<&str>, form: &[(&str, &str)]) -> Answer {
    let mut req = browser().post(b.url(path)).form(form);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    answer(req).await
}

async fn answer(req: reqwest::RequestBuilder) -> Answer {
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    Answer { status, headers, body: resp.text().await.unwrap() }
}

/// The text of the element with `id` (up to its first child or end tag).
fn by_id(html: &str, id: &str) -> String {
    let marker = format!("id=\"{id}\">");
    let start = html.find(&marker).unwrap_or_else(|| panic!("no #{id} in {html}")) + marker.len();
    html[start..].split('<').next().unwrap().to_owned()
}

/// The CSRF token a page's forms carry.
fn csrf(html: &str) -> String {
    let marker = "name=\"csrf\" value=\"";
    let start = html.find(marker).unwrap_or_else(|| panic!("no csrf field in {html}")) + marker.len();
    html[start..].split('"').next().unwrap().to_owned()
}

/// `name=value` of the `Set-Cookie` answer, and the whole header.
fn session_cookie(a: &Answer) -> (String, String) {
    let full = a.headers.get("set-cookie").expect("a Set-Cookie").to_str().unwrap().to_owned();
    (full.split(';').next().unwrap().to_owned(), full)
}

async fn json_ok(b: &TestBroker, path: &str) -> Value {
    let (code, body) = b.get(path).await;
    assert_eq!(code, 200, "GET {path}: {body}");
    body
}

/// Pushes `tx` to `queue` (retryLimit 0) and fails it into the DLQ.
async fn dead_letter(b: &TestBroker, queue: &str, tx: &str) -> Value {
    b.push(queue, "Default", &[(tx, json!({"tx": tx}))]).await;
    let popped = b.pop_some(queue, "batch=1").await;
    let m = popped["messages"][0].clone();
    assert_eq!(m["transactionId"], tx, "{popped}");
    let r = b.ack_with(&m, "failed", Some("boom"), None).await;
    assert_eq!(r["dlq"], true, "{r}");
    m
}

async fn dlq_total(b: &TestBroker, queue: &str) -> i64 {
    b.dlq(queue).await["total"].as_i64().unwrap()
}

#[tokio::test]
async fn every_page_answers_with_the_numbers_of_the_json_api() {
    let b = TestBroker::start().await;
    b.configure_ok("dq", json!({"retryLimit": 0})).await;
    let dead = dead_letter(&b, "dq", "d").await;
    b.push("dq", "p1", &[("a", json!(1)), ("b", json!(2))]).await;
    b.push("dq", "p2", &[("c", json!(3))]).await;
    // A consumer group with lag.
    b.pop_some("dq", "batch=1&subscriptionMode=all&consumerGroup=g1").await;

    let overview = json_ok(&b, "/api/v1/resources/overview").await;
    let home = get(&b, "/", None).await;
    assert_eq!(home.status, 200, "{}", home.body);
    assert!(home.headers["content-type"].to_str().unwrap().starts_with("text/html"));
    assert!(
        home.body.contains("/dashboard/assets/htmx.min.js") && home.body.contains("hx-trigger=\"every 5s [")
    );
    for (id, pointer) in [
        ("ov-total", "/messages/total"),
        ("ov-pending", "/messages/pending"),
        ("ov-deadLetter", "/messages/deadLetter"),
        ("ov-queues", "/queues"),
        ("ov-partitions", "/partitions"),
        ("ov-consumerGroups", "/consumerGroups"),
    ] {
        assert_eq!(by_id(&home.body, id), overview.pointer(pointer).unwrap().to_string(), "{id}");
    }
    assert_eq!(by_id(&home.body, "ov-deadLetter"), "1");

    // The live refresh gets the content block only.
    let req = browser().get(b.url("/")).header("hx-request", "true");
    let partial = answer(req).await;
    assert_eq!(partial.status, 200);
    assert!(
        !partial.body.contains("<html") && partial.body.contains("id=\"ov-pending\""),
        "{}",
        partial.body
    );

    let queues = json_ok(&b, "/api/v1/resources/queues").await;
    let dq = queues["queues"].as_array().unwrap().iter().find(|q| q["name"] == "dq").unwrap().clone();
    let page = get(&b, "/dashboard/queues", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(by_id(&page.body, "q-pending-dq"), dq["messages"]["pending"].to_string());
    assert_eq!(by_id(&page.body, "q-total-dq"), dq["messages"]["total"].to_string());
    assert_eq!(by_id(&page.body, "q-dead-dq"), "1");
    // Lag per consumer group, as the groups API counts it.
    let groups = json_ok(&b, "/api/v1/consumer-groups").await;
    let dq_groups: Vec<&Value> =
        groups.as_array().unwrap().iter().filter(|g| g["queueName"] == "dq").collect();
    assert!(dq_groups.iter().any(|g| g["name"] == "g1"), "{groups}");
    for g in dq_groups {
        let name = g["name"].as_str().unwrap();
        assert_eq!(by_id(&page.body, &format!("q-lag-dq-{name}")), g["totalLag"].to_string(), "{name}");
    }

    let depth = json_ok(&b, "/api/v1/resources/queues/dq/depth").await;
    let page = get(&b, "/dashboard/queues/dq", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(by_id(&page.body, "qd-depth"), depth["depth"].to_string());
    assert_eq!(by_id(&page.body, "qd-deadLetters"), depth["deadLetters"].to_string());
    assert!(page.body.contains("g1"), "the group is listed: {}", page.body);
    assert_eq!(get(&b, "/dashboard/queues/nope", None).await.status, 404);

    let groups = json_ok(&b, "/api/v1/consumer-groups").await;
    let g1 = groups.as_array().unwrap().iter().find(|g| g["name"] == "g1").unwrap().clone();
    let page = get(&b, "/dashboard/groups", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(by_id(&page.body, "g-lag-g1-dq"), g1["totalLag"].to_string());

    let page = get(&b, "/dashboard/dlq", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(by_id(&page.body, "dlq-total"), b.dlq("dq").await["total"].to_string());
    assert!(page.body.contains("/dashboard/dlq/replay") && page.body.contains("/dashboard/dlq/delete"));

    let page = get(&b, "/dashboard/messages?queue=dq&status=dead_letter", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains(">d</a>"), "{}", page.body);
    let detail = format!("/dashboard/messages/{}/d", dead["partitionId"].as_str().unwrap());
    let page = get(&b, &detail, None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("boom") && page.body.contains("&quot;tx&quot;"), "{}", page.body);
    assert_eq!(get(&b, "/dashboard/messages/not-a-uuid/d", None).await.status, 400);

    let page = get(&b, "/dashboard/system", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains(&b.engine.broker_id().to_string()), "{}", page.body);
    assert_eq!(by_id(&page.body, "maint-push"), "false");

    let js = get(&b, "/dashboard/assets/htmx.min.js", None).await;
    assert_eq!(js.status, 200);
    assert!(js.body.starts_with("/* htmx 2.0.11") && js.body.len() > 40_000);
    // The JSON API is where it was.
    assert_eq!(b.get("/api/v1/resources/overview").await.0, 200);
}

#[tokio::test]
async fn retry_and_delete_of_a_dead_letter_need_the_sessions_csrf_token() {
    let b = TestBroker::start().await;
    b.configure_ok("rq", json!({"retryLimit": 0})).await;
    let m = dead_letter(&b, "rq", "x").await;
    let pid = m["partitionId"].as_str().unwrap().to_owned();

    // Auth off: the first view sets an anonymous session for the CSRF token.
    let page = get(&b, "/dashboard/dlq", None).await;
    let (cookie, full) = session_cookie(&page);
    assert!(
        full.contains("HttpOnly") && full.contains("SameSite=Strict") && full.contains("Path=/"),
        "{full}"
    );
    let token = csrf(&page.body);
    let refused = [
        (Some(cookie.as_str()), None),
        (Some(cookie.as_str()), Some("0".repeat(64))),
        (None, Some(token.clone())),
        (Some("queen_session=anon-forged"), Some(token.clone())),
    ];
    for (cookie, csrf) in refused {
        let mut fields = vec![("partitionId", pid.as_str()), ("transactionId", "x")];
        if let Some(c) = csrf.as_deref() {
            fields.push(("csrf", c));
        }
        let a = post_form(&b, "/dashboard/dlq/retry", cookie, &fields).await;
        assert_eq!(a.status, 403, "{cookie:?} {csrf:?}: {}", a.body);
        let a = post_form(&b, "/dashboard/dlq/delete", cookie, &fields).await;
        assert_eq!(a.status, 403, "{cookie:?} {csrf:?}: {}", a.body);
    }
    assert_eq!(dlq_total(&b, "rq").await, 1, "nothing changed");

    let fields = [("csrf", token.as_str()), ("partitionId", pid.as_str()), ("transactionId", "x")];
    let a = post_form(&b, "/dashboard/dlq/retry", Some(&cookie), &fields).await;
    assert_eq!(a.status, 303, "{}", a.body);
    assert_eq!(a.headers["location"], "/dashboard/dlq");
    assert_eq!(dlq_total(&b, "rq").await, 0);
    // Moved as a replay moves it: the transaction id names the record.
    let popped = b.pop_some("rq", "batch=1").await;
    assert_eq!(popped["messages"][0]["transactionId"], "dlq:1", "{popped}");
    assert_eq!(popped["messages"][0]["data"], json!({"tx": "x"}), "{popped}");
    // A retry of what is no longer a dead letter is a 404.
    let a = post_form(&b, "/dashboard/dlq/retry", Some(&cookie), &fields).await;
    assert_eq!(a.status, 404, "{}", a.body);

    // Failed again, then deleted: out of the DLQ and not redelivered.
    let r = b.ack_with(&popped["messages"][0], "failed", Some("boom again"), None).await;
    assert_eq!(r["dlq"], true, "{r}");
    assert_eq!(dlq_total(&b, "rq").await, 1);
    let fields = [("csrf", token.as_str()), ("partitionId", pid.as_str()), ("transactionId", "dlq:1")];
    let a = post_form(&b, "/dashboard/dlq/delete", Some(&cookie), &fields).await;
    assert_eq!(a.status, 303, "{}", a.body);
    assert_eq!(dlq_total(&b, "rq").await, 0);
    b.pop_none("rq", "batch=1").await;
    let a = post_form(&b, "/dashboard/dlq/delete", Some(&cookie), &fields).await;
    assert_eq!(a.status, 404, "{}", a.body);
}

#[tokio::test]
async fn with_auth_on_a_session_needs_a_token_and_only_write_roles_act() {
    // Seeded through a broker without auth, watched through one with it.
    let open = TestBroker::start().await;
    open.configure_ok("aq", json!({"retryLimit": 0})).await;
    let m1 = dead_letter(&open, "aq", "one").await;
    dead_letter(&open, "aq", "two").await;
    let pid = m1["partitionId"].as_str().unwrap().to_owned();
    let auth = AuthConfig::default()
        .with_token(READ, Role::ReadOnly)
        .unwrap()
        .with_token(RW, Role::ReadWrite)
        .unwrap()
        .with_token(ADMIN, Role::Admin)
        .unwrap();
    let b = TestBroker::on_with(&open.db, ServerConfig { auth, ..ServerConfig::default() }).await;

    // No session: every page sends to the login form; htmx polls are told to.
    for path in ["/", "/dashboard/queues", "/dashboard/dlq", "/dashboard/system"] {
        let a = get(&b, path, None).await;
        assert_eq!(a.status, 303, "{path}");
        assert_eq!(a.headers["location"], "/dashboard/login", "{path}");
        let a = get(&b, path, Some("queen_session=bm9wZQ")).await;
        assert_eq!(a.status, 303, "{path} with an unknown token");
    }
    let a = answer(browser().get(b.url("/")).header("hx-request", "true")).await;
    assert_eq!(a.headers["hx-redirect"], "/dashboard/login");
    let login = get(&b, "/dashboard/login", None).await;
    assert_eq!(login.status, 200);
    assert!(login.body.contains("name=\"token\""), "{}", login.body);
    let a = post_form(&b, "/dashboard/login", None, &[("token", "wrong")]).await;
    assert_eq!(a.status, 401);
    // Another site's form: refused by its Origin, whatever the token.
    let req = browser()
        .post(b.url("/dashboard/login"))
        .header("origin", "https://evil.example")
        .form(&[("token", RW)]);
    let a = answer(req).await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a.headers.get("set-cookie").is_none());
    assert_eq!(login.headers["x-frame-options"], "DENY");
    assert!(a.headers.get("set-cookie").is_none());

    let log_in = |token: &'static str| {
        let b = &b;
        async move {
            let a = post_form(b, "/dashboard/login", None, &[("token", token)]).await;
            assert_eq!(a.status, 303, "{}", a.body);
            assert_eq!(a.headers["location"], "/");
            let (cookie, full) = session_cookie(&a);
            assert!(full.contains("HttpOnly") && full.contains("SameSite=Strict"), "{full}");
            assert!(!full.contains(token), "the cookie is encoded: {full}");
            cookie
        }
    };

    // Read-only: may look, has no buttons, and every action is 403.
    let read = log_in(READ).await;
    let page = get(&b, "/dashboard/dlq", Some(&read)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(by_id(&page.body, "dlq-total"), "2");
    assert!(!page.body.contains("/dashboard/dlq/replay") && !page.body.contains("/dashboard/dlq/delete"));
    let read_csrf = csrf(&page.body); // the logout form's
    for action in ["/dashboard/dlq/retry", "/dashboard/dlq/delete"] {
        let fields = [("csrf", read_csrf.as_str()), ("partitionId", pid.as_str()), ("transactionId", "one")];
        let a = post_form(&b, action, Some(&read), &fields).await;
        assert_eq!(a.status, 403, "{action}: {}", a.body);
    }
    assert_eq!(dlq_total(&open, "aq").await, 2, "the read role changed nothing");
    // The cookie is no bearer token for the JSON API.
    let a = get(&b, "/api/v1/resources/overview", Some(&read)).await;
    assert_eq!(a.status, 401);
    for path in ["/", "/dashboard/queues", "/dashboard/queues/aq", "/dashboard/groups", "/dashboard/messages"]
    {
        assert_eq!(get(&b, path, Some(&read)).await.status, 200, "{path}");
    }

    // Read-write: acts with its own CSRF token only.
    let rw = log_in(RW).await;
    let page = get(&b, "/dashboard/dlq", Some(&rw)).await;
    assert!(page.body.contains("/dashboard/dlq/replay"), "{}", page.body);
    assert!(!page.body.contains("/dashboard/dlq/purge"), "purging is the admin's: {}", page.body);
    let rw_csrf = csrf(&page.body);
    assert_ne!(rw_csrf, read_csrf);
    let purge =
        post_form(&b, "/dashboard/dlq/purge", Some(&rw), &[("csrf", rw_csrf.as_str()), ("queue", "aq")])
            .await;
    assert_eq!(purge.status, 403, "a purge is the admin's: {}", purge.body);
    assert_eq!(dlq_total(&open, "aq").await, 2, "nothing purged");
    let fields = [("csrf", rw_csrf.as_str()), ("partitionId", pid.as_str()), ("transactionId", "one")];
    let req = browser()
        .post(b.url("/dashboard/dlq/retry"))
        .header("cookie", &rw)
        .header("origin", "https://evil.example")
        .form(&fields);
    assert_eq!(answer(req).await.status, 403, "a cross-origin action, even with the token");
    for wrong in ["", read_csrf.as_str()] {
        let fields = [("csrf", wrong), ("partitionId", pid.as_str()), ("transactionId", "one")];
        let a = post_form(&b, "/dashboard/dlq/retry", Some(&rw), &fields).await;
        assert_eq!(a.status, 403, "{}", a.body);
    }
    assert_eq!(dlq_total(&open, "aq").await, 2);
    let fields = [("csrf", rw_csrf.as_str()), ("partitionId", pid.as_str()), ("transactionId", "one")];
    let a = post_form(&b, "/dashboard/dlq/retry", Some(&rw), &fields).await;
    assert_eq!(a.status, 303, "{}", a.body);
    let fields = [("csrf", rw_csrf.as_str()), ("partitionId", pid.as_str()), ("transactionId", "two")];
    let a = post_form(&b, "/dashboard/dlq/delete", Some(&rw), &fields).await;
    assert_eq!(a.status, 303, "{}", a.body);
    assert_eq!(dlq_total(&open, "aq").await, 0);
    let popped = open.pop_some("aq", "batch=10").await;
    let txs: Vec<&str> =
        popped["messages"].as_array().unwrap().iter().map(|m| m["transactionId"].as_str().unwrap()).collect();
    // The retried one comes back (as its record's replay: dlq:<id>), the deleted one does not.
    assert_eq!(txs.len(), 1, "{popped}");
    assert!(txs[0].starts_with("dlq:"), "{popped}");
    assert_eq!(popped["messages"][0]["data"], m1["data"], "{popped}");

    // The maintenance switches need the admin role.
    let page = get(&b, "/dashboard/system", Some(&rw)).await;
    assert!(!page.body.contains("/dashboard/system/maintenance"));
    let fields = [("csrf", rw_csrf.as_str()), ("which", "push"), ("on", "true")];
    assert_eq!(post_form(&b, "/dashboard/system/maintenance", Some(&rw), &fields).await.status, 403);
    let admin = log_in(ADMIN).await;
    let page = get(&b, "/dashboard/system", Some(&admin)).await;
    let admin_csrf = csrf(&page.body);
    let fields = [("csrf", admin_csrf.as_str()), ("which", "pop"), ("on", "true")];
    assert_eq!(post_form(&b, "/dashboard/system/maintenance", Some(&admin), &fields).await.status, 303);
    assert_eq!(json_ok(&open, "/api/v1/system/maintenance").await["popMaintenanceMode"], true);
    let fields = [("csrf", admin_csrf.as_str()), ("which", "pop"), ("on", "false")];
    assert_eq!(post_form(&b, "/dashboard/system/maintenance", Some(&admin), &fields).await.status, 303);

    // Logging out clears the cookie.
    let a = post_form(&b, "/dashboard/logout", Some(&rw), &[("csrf", rw_csrf.as_str())]).await;
    assert_eq!(a.status, 303);
    assert!(session_cookie(&a).1.contains("Max-Age=0"));
}

#[tokio::test]
async fn kv_pages_list_namespaces_prefix_pages_and_values() {
    let b = TestBroker::start().await;
    let put = |ns: &str, key: &str, value: Value| json!({"op": "put", "ns": ns, "key": key, "value": value, "forever": true});
    let ops = json!({"operations": [
        put("app", "user/1", json!({"n": 1})),
        put("app", "user/2", json!({"n": 2})),
        put("app", "cfg", json!("on")),
        put("other", "k", json!(null)),
    ]});
    let (code, body) = b.post("/api/v1/kv", &ops).await;
    assert_eq!(code, 200, "{body}");

    let home = get(&b, "/", None).await;
    let overview = json_ok(&b, "/api/v1/resources/overview").await;
    assert_eq!(by_id(&home.body, "ov-kvKeys"), overview["kv"]["keys"].to_string());

    let page = get(&b, "/dashboard/kv", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(by_id(&page.body, "kv-keys-app"), "3");
    assert_eq!(by_id(&page.body, "kv-keys-other"), "1");

    let page = get(&b, "/dashboard/kv/app?prefix=user%2F", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains(">user/1</a>") && page.body.contains(">user/2</a>"), "{}", page.body);
    assert!(!page.body.contains(">cfg</a>"), "{}", page.body);

    let page = get(&b, "/dashboard/kv/app/value?key=user%2F1", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let ops = json!({"operations": [{"op": "get", "ns": "app", "key": "user/1"}]});
    let (code, got) = b.post("/api/v1/kv", &ops).await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(by_id(&page.body, "kv-version"), got["results"][0]["version"].to_string());
    assert!(page.body.contains("&quot;n&quot;: 1"), "{}", page.body);
    let page = get(&b, "/dashboard/kv/app/value?key=nope", None).await;
    assert!(page.body.contains("id=\"kv-missing\""), "{}", page.body);
    // Every key of a namespace (no prefix), and an unknown one is empty.
    let page = get(&b, "/dashboard/kv/app", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(page.body.matches("/dashboard/kv/app/value?key=").count(), 3, "{}", page.body);
    let page = get(&b, "/dashboard/kv/nothing-here", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("/value?key="), "{}", page.body);
    // Keyset pages: 60 keys are two pages, the second after the first's last key.
    let ops: Vec<Value> = (0..60).map(|i| put("many", &format!("k{i:03}"), json!(i))).collect();
    let (code, body) = b.post("/api/v1/kv", &json!({ "operations": ops })).await;
    assert_eq!(code, 200, "{body}");
    let first = get(&b, "/dashboard/kv/many", None).await;
    assert_eq!(first.body.matches("/dashboard/kv/many/value?key=").count(), 50);
    assert!(first.body.contains("&amp;after=k049"), "{}", first.body);
    let second = get(&b, "/dashboard/kv/many?prefix=&after=k049", None).await;
    assert_eq!(second.body.matches("/dashboard/kv/many/value?key=").count(), 10);
    assert!(second.body.contains(">k050</a>") && !second.body.contains(">k049</a>"), "{}", second.body);
}

#[tokio::test]
async fn seek_moves_a_group_to_the_end_from_the_groups_page() {
    let b = TestBroker::start().await;
    b.push("sq", "p", &[("a", json!(1)), ("b", json!(2)), ("c", json!(3))]).await;
    let popped = b.pop_some("sq", "batch=1&subscriptionMode=all&consumerGroup=late").await;
    b.ack(&popped["messages"][0], "completed", Some("late")).await;
    let lag = |groups: &Value| {
        groups.as_array().unwrap().iter().find(|g| g["name"] == "late").unwrap()["totalLag"].as_i64().unwrap()
    };
    assert_eq!(lag(&json_ok(&b, "/api/v1/consumer-groups").await), 2);

    let page = get(&b, "/dashboard/groups", None).await;
    assert_eq!(by_id(&page.body, "g-lag-late-sq"), "2");
    assert!(page.body.contains("action=\"/dashboard/groups/seek\""), "{}", page.body);
    let (cookie, _) = session_cookie(&page);
    let token = csrf(&page.body);
    let fields = [("group", "late"), ("queue", "sq"), ("to", "")];
    assert_eq!(post_form(&b, "/dashboard/groups/seek", Some(&cookie), &fields).await.status, 403);
    let fields = [("csrf", token.as_str()), ("group", "late"), ("queue", "sq"), ("to", "")];
    let a = post_form(&b, "/dashboard/groups/seek", Some(&cookie), &fields).await;
    assert_eq!(a.status, 303, "{}", a.body);
    assert_eq!(lag(&json_ok(&b, "/api/v1/consumer-groups").await), 0);
    let page = get(&b, "/dashboard/groups", Some(&cookie)).await;
    assert_eq!(by_id(&page.body, "g-lag-late-sq"), "0");
    let fields = [("csrf", token.as_str()), ("group", "late"), ("queue", "sq"), ("to", "not a time")];
    assert_eq!(post_form(&b, "/dashboard/groups/seek", Some(&cookie), &fields).await.status, 400);
}

#[tokio::test]
async fn messages_are_found_by_transaction_id_on_any_queue() {
    let b = TestBroker::start().await;
    b.push("fa", "p1", &[("find-me", json!({"q": "fa"})), ("other", json!(0))]).await;
    b.push("fb", "Default", &[("find-me", json!({"q": "fb"}))]).await;
    let page = get(&b, "/dashboard/messages?transactionId=find-me", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("fa/p1") && page.body.contains("fb/Default"), "{}", page.body);
    assert!(!page.body.contains(">other</a>"), "{}", page.body);
    assert_eq!(page.body.matches(">find-me</a>").count(), 2, "{}", page.body);
    let listed = json_ok(&b, "/api/v1/messages?queue=fb").await;
    let pid = listed["messages"][0]["partitionId"].as_str().unwrap().to_owned();
    assert!(page.body.contains(&format!("/dashboard/messages/{pid}/find-me")), "{}", page.body);
    let page = get(&b, "/dashboard/messages?transactionId=nobody", None).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.body.matches("href=\"/dashboard/messages/").count(), 0, "{}", page.body);
}

#[tokio::test]
async fn timers_and_locks_page_lists_pending_timers_and_held_permits() {
    use base64::Engine as _;
    let b = TestBroker::start().await;
    let payload = base64::engine::general_purpose::STANDARD.encode(json!({"id": 1}).to_string());
    let ops: Vec<Value> = ["t-1", "t-2"]
        .iter()
        .map(|k| json!({"op": "schedule", "queue": "tq", "timerKey": k, "payload": payload, "delayMs": 600_000}))
        .collect();
    let (code, body) = b.post("/api/v1/timers", &json!({ "operations": ops })).await;
    assert_eq!(code, 200, "{body}");
    let op = json!({"op": "acquire", "name": "job", "ttlSeconds": 30, "owner": "alice"});
    let (code, body) = b.post("/api/v1/locks", &json!({ "operations": [op] })).await;
    assert_eq!(code, 200, "{body}");

    let page = get(&b, "/dashboard/timers", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(by_id(&page.body, "tl-pending"), "2");
    assert_eq!(by_id(&page.body, "tl-due"), "0");
    assert_eq!(by_id(&page.body, "tl-held"), "1");
    assert!(page.body.contains("job#") && page.body.contains("alice"), "{}", page.body);
    assert!(!page.body.contains("t-1"), "timers are listed per queue: {}", page.body);

    let page = get(&b, "/dashboard/timers?queue=tq", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("<td>t-1</td>") && page.body.contains("<td>t-2</td>"), "{}", page.body);
}

/// The URL the live block reloads from.
fn live_url(html: &str) -> String {
    let marker = "hx-get=\"";
    let start = html.find(marker).unwrap_or_else(|| panic!("no live block in {html}")) + marker.len();
    html[start..].split('"').next().unwrap().replace("&amp;", "&")
}

#[tokio::test]
async fn overview_rates_come_from_the_previous_reload_and_kv_verdicts_are_counted() {
    let b = TestBroker::start().await;
    let first = get(&b, "/", None).await;
    assert_eq!(by_id(&first.body, "ov-pushRate"), "—", "no previous reload, no rate");
    let next = live_url(&first.body);
    assert!(next.starts_with("/?t=") && next.contains("&push="), "{next}");

    b.push("rates", "Default", &[("r1", json!(1))]).await;
    let put = json!({"operations": [{"op": "put", "ns": "rates", "key": "k", "value": 1, "forever": true}]});
    assert_eq!(b.post("/api/v1/kv", &put).await.0, 200);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let reload = answer(browser().get(b.url(&next)).header("hx-request", "true")).await;
    assert_eq!(reload.status, 200, "{}", reload.body);
    assert!(reload.body.starts_with("<div id=\"live\""), "the block alone: {}", reload.body);
    let rate: f64 = by_id(&reload.body, "ov-pushRate").parse().unwrap();
    assert!(rate > 0.0, "{rate}");
    assert_ne!(live_url(&reload.body), next, "the next reload carries the new counters");
    let applied: f64 = by_id(&reload.body, "kv-verdict-put-applied").parse().unwrap();
    assert!(applied >= 1.0, "{applied}");
}

#[tokio::test]
async fn consumer_groups_are_paged_by_keyset() {
    let b = TestBroker::start().await;
    b.push("gq", "Default", &[("m", json!(1))]).await;
    for i in 0..51 {
        b.pop_some("gq", &format!("batch=1&subscriptionMode=all&consumerGroup=g{i:02}")).await;
    }
    let first = get(&b, "/dashboard/groups", None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body.matches("id=\"g-lag-").count(), 50);
    assert!(first.body.contains("afterQueue=gq&amp;afterGroup=g49"), "{}", first.body);
    let second = get(&b, "/dashboard/groups?queue=&afterQueue=gq&afterGroup=g49", None).await;
    assert_eq!(second.body.matches("id=\"g-lag-").count(), 1, "{}", second.body);
    assert!(second.body.contains("id=\"g-lag-g50-gq\""), "{}", second.body);
    // The queue's page shows its first 50 and links to the rest.
    let queue = get(&b, "/dashboard/queues/gq", None).await;
    assert!(queue.body.contains("/dashboard/groups?queue=gq"), "{}", queue.body);
    let filtered = get(&b, "/dashboard/groups?queue=other", None).await;
    assert_eq!(filtered.body.matches("id=\"g-lag-").count(), 0);
}

#[tokio::test]
async fn queues_are_paged_by_keyset() {
    let b = TestBroker::start().await;
    for i in 0..51 {
        b.configure_ok(&format!("q{i:02}"), json!({})).await;
    }
    let first = get(&b, "/dashboard/queues", None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body.matches("id=\"q-pending-").count(), 50);
    assert!(first.body.contains("/dashboard/queues?after=q49"), "{}", first.body);
    let second = get(&b, "/dashboard/queues?after=q49", None).await;
    assert_eq!(second.body.matches("id=\"q-pending-").count(), 1, "{}", second.body);
    assert!(second.body.contains("id=\"q-pending-q50\""), "{}", second.body);
    assert!(!second.body.contains("next →"), "the last page has no next: {}", second.body);
}

#[tokio::test]
async fn dead_letters_are_paged_by_keyset_newest_first() {
    let b = TestBroker::start().await;
    b.configure_ok("dl", json!({"retryLimit": 0})).await;
    for i in 0..51 {
        dead_letter(&b, "dl", &format!("x{i:02}")).await;
    }
    let first = get(&b, "/dashboard/dlq?queue=dl", None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(by_id(&first.body, "dlq-total"), "51");
    assert_eq!(first.body.matches("action=\"/dashboard/dlq/replay\"").count(), 50);
    assert!(first.body.contains(">x50</a>") && !first.body.contains(">x00</a>"), "newest first");
    let marker = "&amp;before=";
    let start = first.body.find(marker).expect("an older page") + marker.len();
    let before: String = first.body[start..].chars().take_while(char::is_ascii_digit).collect();
    let second = get(&b, &format!("/dashboard/dlq?queue=dl&before={before}"), None).await;
    assert_eq!(second.body.matches("action=\"/dashboard/dlq/replay\"").count(), 1, "{}", second.body);
    assert!(second.body.contains(">x00</a>"), "{}", second.body);
    assert!(!second.body.contains("older →"), "{}", second.body);
}

#[tokio::test]
async fn messages_are_paged_by_keyset_newest_first() {
    let b = TestBroker::start().await;
    // 53 messages over two partitions, pushed in bursts (several share a created_at).
    let ids: Vec<String> = (0..53).map(|i| format!("m{i:02}")).collect();
    for (n, chunk) in ids.chunks(9).enumerate() {
        let items: Vec<Value> = chunk
            .iter()
            .map(|id| json!({"queue": "mq", "partition": if n % 2 == 0 { "a" } else { "b" }, "transactionId": id, "payload": {}}))
            .collect();
        b.push_items(json!(items)).await;
    }
    let shown = |body: &str| -> Vec<String> {
        body.split("href=\"/dashboard/messages/")
            .skip(1)
            .filter_map(|rest| rest.split('"').next()?.split('/').nth(1).map(str::to_owned))
            .collect()
    };
    let first = get(&b, "/dashboard/messages?queue=mq", None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let page1 = shown(&first.body);
    assert_eq!(page1.len(), 50, "{}", first.body);
    let href = first.body.split("before=").nth(1).and_then(|r| r.split('"').next()).expect("an older link");
    let second = get(&b, &format!("/dashboard/messages?queue=mq&before={href}"), None).await;
    assert_eq!(second.status, 200, "{}", second.body);
    let page2 = shown(&second.body);
    assert_eq!(page2.len(), 3, "{}", second.body);
    assert!(!second.body.contains("before=") || second.body.contains("← newest"));
    let mut all: Vec<String> = page1.into_iter().chain(page2).collect();
    all.sort();
    all.dedup();
    assert_eq!(all, ids, "every message once across the pages");
    // A cursor this page did not make is a 400, not a wrong page.
    let bad = get(&b, "/dashboard/messages?before=yesterday", None).await;
    assert_eq!(bad.status, 400);
}

#[tokio::test]
async fn a_queue_page_pages_its_partitions_with_each_groups_lag_and_lease_holder() {
    let b = TestBroker::start().await;
    let items: Vec<Value> = (0..51)
        .map(|i| json!({"queue": "wide", "partition": format!("p{i:02}"), "transactionId": format!("t{i}"), "payload": {}}))
        .collect();
    b.push_items(json!(items)).await;
    // A consumer group leases p00; queue mode consumes nothing.
    let held = b.pop_partition("wide", "p00", "batch=1&subscriptionMode=all&consumerGroup=billing").await;
    assert_eq!(held.0, 200, "{}", held.1);
    let first = get(&b, "/dashboard/queues/wide", None).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.body.matches("id=\"qp-pending-").count(), 50, "one page of partitions");
    assert_eq!(by_id(&first.body, "qd-partitions"), "51");
    assert_eq!(by_id(&first.body, "qd-depth"), "51");
    assert_eq!(by_id(&first.body, "qp-lag-p00-billing"), "1");
    assert!(first.body.contains(held.1["leaseId"].as_str().unwrap()), "the lease holder is shown");
    let groups = json_ok(&b, "/api/v1/consumer-groups").await;
    let billing = groups.as_array().unwrap().iter().find(|g| g["name"] == "billing").unwrap();
    assert_eq!(by_id(&first.body, "qd-lag-billing"), billing["totalLag"].to_string());
    let second = get(&b, "/dashboard/queues/wide?after=p49", None).await;
    assert_eq!(second.body.matches("id=\"qp-pending-").count(), 1, "{}", second.body);
    assert!(second.body.contains("id=\"qp-pending-p50\""));
    assert!(first.body.contains("/dashboard/queues/wide?after=p49"), "a next link");
}

/// The message list walks partitions newest push first and stops once the
/// rest are older than its page: across many partitions, pushed in an order
/// unlike their names, every page is the newest of what is left, by
/// (created_at, partition, offset), and the pages cover every message once.
#[tokio::test]
async fn the_message_list_over_many_partitions_pages_newest_first() {
    let b = TestBroker::start().await;
    // 130 partitions, three rounds, each round in another partition order.
    for round in 0..3 {
        let items: Vec<Value> = (0..130)
            .map(|i| {
                let p = (i * 37 + round * 11) % 130;
                json!({"queue": "wide", "partition": format!("p{p:03}"), "transactionId": format!("r{round}-p{p:03}"), "payload": {}})
            })
            .collect();
        b.push_items(json!(items)).await;
    }
    let client = b.sql().await;
    let rows = client
        .query(
            "SELECT m.transaction_id FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id \
             JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'wide' \
             ORDER BY m.created_at DESC, m.partition_id DESC, m.seq DESC",
            &[],
        )
        .await
        .unwrap();
    let newest_first: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(newest_first.len(), 390);
    let shown = |body: &str| -> Vec<String> {
        body.split("href=\"/dashboard/messages/")
            .skip(1)
            .filter_map(|rest| rest.split('"').next()?.split('/').nth(1).map(str::to_owned))
            .collect()
    };
    let mut seen = Vec::new();
    let mut path = "/dashboard/messages?queue=wide".to_owned();
    for _ in 0..10 {
        let page = get(&b, &path, None).await;
        assert_eq!(page.status, 200, "{}", page.body);
        seen.extend(shown(&page.body));
        // The "older" link's cursor (the page's own URL carries its cursor too).
        let Some(link) = page.body.find("older →").map(|end| &page.body[..end]) else { break };
        let href = link.rsplit("before=").next().and_then(|r| r.split('"').next()).unwrap();
        path = format!("/dashboard/messages?queue=wide&before={href}");
    }
    assert_eq!(seen, newest_first, "each page is the newest of what is left, in order, and none twice");
}

/// A queue of at least the gauge threshold of partitions is counted in the
/// background: its pages show the gauge and say when it was counted, until
/// the next count; a smaller queue is still counted on every page view.
#[tokio::test]
async fn a_large_queue_is_counted_in_the_background_and_its_pages_say_when() {
    let options = queen_engine::EngineOptions {
        queue_gauge_interval: None,
        queue_gauge_min_partitions: 3,
        ..queen_engine::EngineOptions::default()
    };
    let b = TestBroker::start_with_options(options).await;
    for p in ["a", "b", "c"] {
        b.push("big", p, &[(&format!("{p}1"), json!(1)), (&format!("{p}2"), json!(2))]).await;
    }
    b.push("small", "a", &[("s1", json!(1))]).await;
    b.pop_some("big", "batch=1&subscriptionMode=all&consumerGroup=g1").await;

    // No gauge yet: counted on the page view.
    let page = get(&b, "/dashboard/queues", None).await;
    assert_eq!(by_id(&page.body, "q-pending-big"), "6");
    assert!(!page.body.contains("counted at"), "{}", page.body);

    assert_eq!(b.engine.refresh_queue_gauges_once().await.unwrap(), 1, "only the large queue has a gauge");
    assert_eq!(b.engine.refresh_queue_gauges_once().await.unwrap(), 0, "not due again yet");
    b.push("big", "a", &[("a3", json!(3))]).await;
    b.push("small", "a", &[("s2", json!(2))]).await;

    let page = get(&b, "/dashboard/queues", None).await;
    assert_eq!(by_id(&page.body, "q-pending-big"), "6", "the gauge, not a new count");
    assert_eq!(by_id(&page.body, "q-pending-small"), "2", "a small queue is counted now");
    assert_eq!(page.body.matches("counted at").count(), 1, "{}", page.body);
    let page = get(&b, "/dashboard/queues/big", None).await;
    assert!(page.body.contains("counted at"), "{}", page.body);
    assert_eq!(by_id(&page.body, "qd-pending"), "6");
    let page = get(&b, "/dashboard/groups", None).await;
    assert_eq!(
        by_id(&page.body, "g-lag-g1-big"),
        "6",
        "the gauge: popped, not acked, nor the push since: {}",
        page.body
    );
    assert!(page.body.contains("counted at"), "{}", page.body);
    let overview = json_ok(&b, "/api/v1/resources/overview").await;
    assert_eq!(overview["messages"]["pending"], 8, "the gauge's 6 and small's 2: {overview}");
    assert!(overview["messages"]["asOf"].is_string(), "{overview}");

    // Due again: the next count sees the push.
    client_exec(&b, "UPDATE queen.queue_gauges SET computed_at = now() - interval '1 hour'").await;
    assert_eq!(b.engine.refresh_queue_gauges_once().await.unwrap(), 1);
    let page = get(&b, "/dashboard/queues", None).await;
    assert_eq!(by_id(&page.body, "q-pending-big"), "7");
    let gauge = json_ok(&b, "/api/v1/resources/queues").await;
    let big = gauge["queues"].as_array().unwrap().iter().find(|q| q["name"] == "big").unwrap().clone();
    assert_eq!(big["messages"]["pending"], 7, "{big}");
    assert!(big["asOf"].is_string(), "the API says the counts are a gauge's: {big}");

    // A gauge no loop has counted for ten minutes is not shown: counted now.
    client_exec(&b, "UPDATE queen.queue_gauges SET computed_at = now() - interval '11 minutes'").await;
    b.push("big", "b", &[("b3", json!(3))]).await;
    let page = get(&b, "/dashboard/queues", None).await;
    assert_eq!(by_id(&page.body, "q-pending-big"), "8");
    assert!(!page.body.contains("counted at"), "{}", page.body);
}

async fn client_exec(b: &TestBroker, statement: &str) {
    b.sql().await.batch_execute(statement).await.unwrap();
}

/// KV namespaces are listed by a skip scan and their keys counted up to a
/// bound: past it the page shows the statistics' estimate; the overview
/// estimates a large table's keys instead of counting them.
#[tokio::test]
async fn kv_key_counts_stay_bounded_on_large_namespaces() {
    let b = TestBroker::start().await;
    client_exec(
        &b,
        "INSERT INTO queen.kv (ns, key, value, version) \
           SELECT 'many', 'k' || i, '1', nextval('queen.kv_version_seq') FROM generate_series(1, 1500) i; \
         INSERT INTO queen.kv (ns, key, value, version) \
           SELECT 'few', 'k' || i, '1', nextval('queen.kv_version_seq') FROM generate_series(1, 3) i; \
         ANALYZE queen.kv;",
    )
    .await;
    let page = get(&b, "/dashboard/kv", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(by_id(&page.body, "kv-keys-few"), "3");
    assert_eq!(by_id(&page.body, "kv-keys-many"), "≈ 1500", "{}", page.body);
    let overview = json_ok(&b, "/api/v1/resources/overview").await;
    assert_eq!(overview["kv"], json!({"keys": 1503, "estimated": false}), "{overview}");

    client_exec(
        &b,
        "INSERT INTO queen.kv (ns, key, value, version) \
           SELECT 'bulk', 'k' || i, '1', nextval('queen.kv_version_seq') FROM generate_series(1, 100000) i; \
         ANALYZE queen.kv;",
    )
    .await;
    let overview = json_ok(&b, "/api/v1/resources/overview").await;
    assert_eq!(overview["kv"]["estimated"], true, "{overview}");
    let home = get(&b, "/", None).await;
    assert!(by_id(&home.body, "ov-kvKeys").starts_with("≈ "), "{}", home.body);
}

/// A partition pushed to recently can still hold messages older than
/// another partition's: the walk must not stop reading a partition because
/// the page is full, or the messages between are never listed.
#[tokio::test]
async fn the_message_list_keeps_messages_between_an_old_and_a_new_push_of_one_partition() {
    let b = TestBroker::start().await;
    b.push("gap", "a", &[("a-old", json!(0))]).await;
    for i in 0..60 {
        b.push("gap", "b", &[(&format!("b{i:02}"), json!(i))]).await;
    }
    b.push("gap", "a", &[("a-new", json!(1))]).await;
    let rows = b
        .sql()
        .await
        .query(
            "SELECT m.transaction_id FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id \
             JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = 'gap' \
             ORDER BY m.created_at DESC, m.partition_id DESC, m.seq DESC",
            &[],
        )
        .await
        .unwrap();
    let newest_first: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(newest_first.len(), 62);
    let mut seen = Vec::new();
    let mut path = "/dashboard/messages?queue=gap".to_owned();
    for _ in 0..5 {
        let page = get(&b, &path, None).await;
        assert_eq!(page.status, 200, "{}", page.body);
        seen.extend(
            page.body
                .split("href=\"/dashboard/messages/")
                .skip(1)
                .filter_map(|rest| rest.split('"').next()?.split('/').nth(1).map(str::to_owned)),
        );
        let Some(link) = page.body.find("older →").map(|end| &page.body[..end]) else { break };
        let href = link.rsplit("before=").next().and_then(|r| r.split('"').next()).unwrap();
        path = format!("/dashboard/messages?queue=gap&before={href}");
    }
    assert_eq!(seen, newest_first, "every message once, newest first");
}
