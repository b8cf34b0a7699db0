//! The web dashboard: server-rendered pages at `/` and `/dashboard/*`.
//!
//! HTML is built by maud at compile time; the one script, htmx, is compiled
//! in from `assets/` and reloads each page's figures every 5 s
//! (`hx-trigger="every 5s"`: the page asks again with `HX-Request` and gets
//! its content block only). Pages read through the same engine calls as the
//! JSON routes, so they show the same numbers. Actions are `POST` forms that
//! work without script; see `session` for who may send them.

mod session;
mod view;

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use maud::{html, Markup};
use queen_engine::{EngineError, Json};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::Role;
use crate::{ApiError, AppState};
use session::{NoSession, Session};
use view::{as_of, at, card, enc, fields, key_count, minute_chart, seconds, show};

/// Rows per page of every list.
const PAGE: i64 = 50;

/// htmx 2.0.11 (Zero-Clause BSD), served from the binary.
const HTMX: &[u8] = include_bytes!("../../assets/htmx.min.js");

/// The dashboard's routes; the auth guard lets them through (they check
/// the session cookie themselves).
pub(crate) fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(overview))
        .route("/dashboard/assets/htmx.min.js", get(htmx))
        .route("/dashboard/login", get(login_form).post(login))
        .route("/dashboard/logout", post(logout))
        .route("/dashboard/queues", get(queues))
        .route("/dashboard/queues/{queue}", get(queue))
        .route("/dashboard/groups", get(groups))
        .route("/dashboard/groups/seek", post(seek))
        .route("/dashboard/messages", get(messages))
        .route("/dashboard/messages/{partition_id}/{transaction_id}", get(message))
        .route("/dashboard/dlq", get(dead_letters))
        .route("/dashboard/dlq/retry", post(retry_dead_letter))
        .route("/dashboard/dlq/delete", post(delete_dead_letter))
        .route("/dashboard/dlq/replay", post(replay_dead_letter))
        .route("/dashboard/dlq/purge", post(purge_dead_letters))
        .route("/dashboard/kv", get(kv_namespaces))
        .route("/dashboard/kv/{ns}", get(kv_keys))
        .route("/dashboard/kv/{ns}/value", get(kv_value))
        .route("/dashboard/timers", get(timers_and_locks))
        .route("/dashboard/system", get(system))
        .route("/dashboard/system/maintenance", post(maintenance))
}

type Page = Result<Markup, Response>;

fn value(json: Json) -> Value {
    serde_json::from_str(json.as_str()).unwrap_or(Value::Null)
}

/// An engine failure as an HTML page with the status the JSON API answers;
/// the detail of a refusal (4xx) is shown, never that of a 5xx (logged by the
/// JSON mapping).
fn failure(e: EngineError) -> Response {
    let detail = e.to_string();
    let api = ApiError::from(e).into_response();
    let status = api.status();
    let text =
        if status.is_client_error() { detail } else { format!("the broker could not answer ({status})") };
    let mut resp = (status, view::message_page("Error", &text)).into_response();
    if let Some(v) = api.headers().get(header::RETRY_AFTER) {
        resp.headers_mut().insert(header::RETRY_AFTER, v.clone());
    }
    resp
}

async fn read(call: impl std::future::Future<Output = Result<Json, EngineError>>) -> Result<Value, Response> {
    call.await.map(value).map_err(failure)
}

fn is_htmx(headers: &HeaderMap) -> bool {
    headers.contains_key("hx-request")
}

/// Where a request without a session goes: the login page (an htmx poll
/// is told to load it as a whole page).
fn to_login(headers: &HeaderMap) -> Response {
    if is_htmx(headers) {
        let mut resp = StatusCode::OK.into_response();
        resp.headers_mut().insert("hx-redirect", HeaderValue::from_static("/dashboard/login"));
        return resp;
    }
    see_other("/dashboard/login")
}

fn see_other(to: &str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

/// The response of a page: its content only for an htmx refresh, else the
/// whole page; never cached; the anonymous session's cookie when new.
fn finish(headers: &HeaderMap, s: &Session, title: &str, live: Option<&Uri>, content: Page) -> Response {
    let live =
        live.map(|u| u.path_and_query().map_or_else(|| u.path().to_owned(), |pq| pq.as_str().to_owned()));
    finish_at(headers, s, title, live, content)
}

/// [`finish`] with the URL the live block reloads from.
fn finish_at(headers: &HeaderMap, s: &Session, title: &str, live: Option<String>, content: Page) -> Response {
    let content = match content {
        Ok(c) => c,
        Err(resp) => return resp,
    };
    let body = match (&live, is_htmx(headers)) {
        (Some(url), true) => view::live_block(url, content),
        _ => view::page(title, Some(s), live.as_deref(), content),
    };
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::VARY, HeaderValue::from_static("HX-Request, Cookie"));
    secure_headers(h);
    if let Some(c) = &s.set_cookie {
        h.append(header::SET_COOKIE, c.clone());
    }
    resp
}

/// No framing (a framed page's buttons could be clicked by another site),
/// no type sniffing, no referrer outside the broker.
fn secure_headers(h: &mut HeaderMap) {
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("frame-ancestors 'none'"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
}

macro_rules! session_or_login {
    ($app:expr, $headers:expr) => {
        match session::session(&$app, &$headers).await {
            Ok(s) => s,
            Err(NoSession::LoginNeeded) => return to_login(&$headers),
        }
    };
}

async fn htmx() -> Response {
    let mut resp = HTMX.into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/javascript; charset=utf-8"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=3600"));
    resp
}

// ---------------------------------------------------------------- login

#[derive(Deserialize)]
struct LoginForm {
    token: Option<String>,
}

fn login_page(error: Option<&str>) -> Markup {
    view::page(
        "Log in",
        None,
        None,
        html! {
            p { "This broker has authentication on. Paste an API token (a static token or a JWT): "
                "a read-only token may look, a read-write or admin token may also act." }
            @if let Some(e) = error { p.err { (e) } }
            form method="post" action="/dashboard/login" {
                input type="password" name="token" size="60" autocomplete="off" autofocus;
                " "
                button type="submit" { "Log in" }
            }
        },
    )
}

async fn login_form(State(app): State<Arc<AppState>>) -> Response {
    if !app.config.auth.is_enabled() {
        return see_other("/");
    }
    let mut resp = login_page(None).into_response();
    secure_headers(resp.headers_mut());
    resp
}

async fn login(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    if !app.config.auth.is_enabled() {
        return see_other("/");
    }
    if !session::same_origin(&headers) {
        return session::forbidden("cross-origin request refused");
    }
    let token = form.token.unwrap_or_default();
    let token = token.trim();
    if token.is_empty() || app.config.auth.caller_for(token).await.is_none() {
        return (StatusCode::UNAUTHORIZED, login_page(Some("This token is not accepted."))).into_response();
    }
    let mut resp = see_other("/");
    if let Some(c) = session::set_cookie(&app, Some(&session::encode_token(token))) {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    resp
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: Option<String>,
}

async fn logout(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(reason) = session::authorize(&app, &headers, form.csrf.as_deref(), Role::ReadOnly).await {
        return session::forbidden(reason);
    }
    let mut resp = see_other(if app.config.auth.is_enabled() { "/dashboard/login" } else { "/" });
    if let Some(c) = session::set_cookie(&app, None) {
        resp.headers_mut().append(header::SET_COOKIE, c);
    }
    resp
}

// ---------------------------------------------------------------- pages

/// The counters of the previous overview reload, carried in its URL: rates
/// are the difference, with no state on the broker.
#[derive(Deserialize, Default, Clone, Copy)]
struct Traffic {
    /// Milliseconds since the Unix epoch.
    t: Option<u64>,
    push: Option<f64>,
    pop: Option<f64>,
    ack: Option<f64>,
    err: Option<f64>,
    dead: Option<f64>,
}

impl Traffic {
    /// This broker's request counters now, and the dead letters.
    fn now(dead: f64) -> Traffic {
        let millis = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).ok();
        let (mut push, mut pop, mut ack, mut err) = (0.0, 0.0, 0.0, 0.0);
        for (labels, n) in crate::metrics::counters("queen_http_requests_total") {
            let get =
                |k: &str| labels.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str()).unwrap_or("");
            let route = get("route");
            if route.starts_with("/api/v1/push") {
                push += n;
            } else if route.starts_with("/api/v1/pop") {
                pop += n;
            } else if route.starts_with("/api/v1/ack") {
                ack += n;
            }
            if get("status").starts_with('5') {
                err += n;
            }
        }
        Traffic {
            t: millis.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            push: Some(push),
            pop: Some(pop),
            ack: Some(ack),
            err: Some(err),
            dead: Some(dead),
        }
    }

    fn url(&self) -> String {
        let n = |v: Option<f64>| v.unwrap_or(0.0);
        format!(
            "/?t={}&push={}&pop={}&ack={}&err={}&dead={}",
            self.t.unwrap_or(0),
            n(self.push),
            n(self.pop),
            n(self.ack),
            n(self.err),
            n(self.dead)
        )
    }

    /// The change per second between `before` and `self`, times `per`; a
    /// dash without a previous reload, or when a counter went back (this
    /// broker restarted; the dead letters may go down, they are net).
    fn rate(&self, before: &Traffic, pick: fn(&Traffic) -> Option<f64>, per: f64, net: bool) -> String {
        let (Some(t1), Some(t0), Some(a), Some(b)) = (self.t, before.t, pick(self), pick(before)) else {
            return "—".to_owned();
        };
        if t1 <= t0 || (a < b && !net) {
            return "—".to_owned();
        }
        format!("{:.1}", (a - b) / ((t1 - t0) as f64 / 1000.0) * per)
    }
}

async fn overview(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(before): Query<Traffic>,
) -> Response {
    let s = session_or_login!(app, headers);
    match overview_content(&app, &before).await {
        Ok((content, next)) => finish_at(&headers, &s, "Overview", Some(next.url()), Ok(content)),
        Err(resp) => resp,
    }
}

/// The overview's KV key count: exact, or the planner's estimate of a large table.
fn kv_keys_card(o: &Value) -> String {
    match o.pointer("/kv/estimated").and_then(Value::as_bool) {
        Some(true) => format!("≈ {}", at(o, "/kv/keys")),
        _ => at(o, "/kv/keys"),
    }
}

async fn overview_content(app: &AppState, before: &Traffic) -> Result<(Markup, Traffic), Response> {
    let o = read(app.engine.resources_overview()).await?;
    let m = read(app.engine.maintenance()).await?;
    let hour = app.engine.traffic_hour().await.map_err(failure)?;
    let series = |pick: fn(&queen_engine::TrafficMinute) -> i64| -> Vec<(String, i64)> {
        hour.iter().map(|m| (m.minute.clone(), pick(m))).collect()
    };
    let (size, idle, max) = app.engine.pool_status();
    let now = Traffic::now(o.pointer("/messages/deadLetter").and_then(Value::as_f64).unwrap_or(0.0));
    let mut verdicts = crate::metrics::counters("queen_kv_verdicts_total");
    verdicts.sort_by(|a, b| a.0.cmp(&b.0));
    let label = |labels: &[(String, String)], k: &str| {
        labels.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone()).unwrap_or_default()
    };
    let content = html! {
        h2 { "Traffic of this broker" span.muted { " (per second since the last refresh)" } }
        div.cards {
            (card("push requests/s", now.rate(before, |t| t.push, 1.0, false), "ov-pushRate"))
            (card("pop requests/s", now.rate(before, |t| t.pop, 1.0, false), "ov-popRate"))
            (card("ack requests/s", now.rate(before, |t| t.ack, 1.0, false), "ov-ackRate"))
            (card("5xx answers/s", now.rate(before, |t| t.err, 1.0, false), "ov-errorRate"))
            (card("dead letters/min (net, all brokers)", now.rate(before, |t| t.dead, 60.0, true), "ov-deadRate"))
        }
        h2 { "Traffic of every broker" span.muted { " (per minute, last 60 min; each broker writes its figures every 5 s)" } }
        div.charts {
            (minute_chart("messages pushed", "ov-hour-pushed", "#4a6fd1", &series(|m| m.pushed)))
            (minute_chart("pops that delivered", "ov-hour-popped", "#2f9e6b", &series(|m| m.popped)))
            (minute_chart("messages acked", "ov-hour-acked", "#c27c1b", &series(|m| m.acked)))
        }
        h2 { "Messages" (as_of(o.get("messages").unwrap_or(&Value::Null))) }
        div.cards {
            (card("total", at(&o, "/messages/total"), "ov-total"))
            (card("pending", at(&o, "/messages/pending"), "ov-pending"))
            (card("processing", at(&o, "/messages/processing"), "ov-processing"))
            (card("completed", at(&o, "/messages/completed"), "ov-completed"))
            (card("dead letters", at(&o, "/messages/deadLetter"), "ov-deadLetter"))
        }
        h2 { "Resources" }
        div.cards {
            (card("queues", at(&o, "/queues"), "ov-queues"))
            (card("partitions", at(&o, "/partitions"), "ov-partitions"))
            (card("consumer groups", at(&o, "/consumerGroups"), "ov-consumerGroups"))
            (card("namespaces", at(&o, "/namespaces"), "ov-namespaces"))
            (card("tasks", at(&o, "/tasks"), "ov-tasks"))
            (card("KV keys", kv_keys_card(&o), "ov-kvKeys"))
        }
        h2 { "This broker" }
        div.cards {
            (card("push paused", at(&m, "/maintenanceMode"), "ov-pushPaused"))
            (card("pop paused", at(&m, "/popMaintenanceMode"), "ov-popPaused"))
            (card("pool (in use / max)", format!("{} / {max}", size.saturating_sub(idle)), "ov-pool"))
            (card("long polls waiting", app.engine.queues_waiting().to_string(), "ov-longPolls"))
        }
        h2 { "KV verdicts of this broker" span.muted { " (since it started)" } }
        @if verdicts.is_empty() { p.muted { "No KV call yet." } }
        @else {
            table {
                tr { th { "op" } th { "verdict" } th { "count" } }
                @for (labels, n) in &verdicts {
                    @let (op, verdict) = (label(labels, "op"), label(labels, "verdict"));
                    tr { td { (op) } td { (verdict) } td.n id={ "kv-verdict-" (op) "-" (verdict) } { (n) } }
                }
            }
        }
        p.muted { "as of " (at(&o, "/timestamp")) }
    };
    Ok((content, now))
}

#[derive(Deserialize, Default)]
struct Paging {
    queue: Option<String>,
    status: Option<String>,
    #[serde(rename = "transactionId")]
    transaction_id: Option<String>,
    /// The messages page's keyset cursor (created_at~partition id~seq).
    before: Option<String>,
}

impl Paging {
    fn filter(v: &Option<String>) -> Option<&str> {
        v.as_deref().map(str::trim).filter(|s| !s.is_empty())
    }
}

#[derive(Deserialize, Default)]
struct AfterQuery {
    after: Option<String>,
}

async fn queues(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<AfterQuery>,
) -> Response {
    let s = session_or_login!(app, headers);
    let content = queues_content(&app, &q).await;
    finish(&headers, &s, "Queues", Some(&uri), content)
}

async fn queues_content(app: &AppState, q: &AfterQuery) -> Page {
    let after = Paging::filter(&q.after);
    let v = read(app.engine.queues_after(after, PAGE as i32)).await?;
    let list = v.get("queues").and_then(Value::as_array).cloned().unwrap_or_default();
    let next = v.get("nextAfter").and_then(Value::as_str);
    Ok(html! {
        table {
            tr { th { "queue" } th { "namespace" } th { "task" } th { "partitions" } th { "pending" }
                 th { "processing" } th { "total" } th { "dead letters" } th { "oldest message" }
                 th { "lag per consumer group" } th { "created" } }
            @for q in &list {
                @let name = at(q, "/name");
                tr {
                    td { a href={ "/dashboard/queues/" (enc(&name)) } { (name) } (as_of(q)) }
                    td { (at(q, "/namespace")) } td { (at(q, "/task")) }
                    td.n { (at(q, "/partitions")) }
                    td.n id={ "q-pending-" (name) } { (at(q, "/messages/pending")) }
                    td.n id={ "q-processing-" (name) } { (at(q, "/messages/processing")) }
                    td.n id={ "q-total-" (name) } { (at(q, "/messages/total")) }
                    td.n id={ "q-dead-" (name) } { (at(q, "/messages/deadLetter")) }
                    td.n { (seconds(q.get("oldestMessageAgeSeconds"))) }
                    td {
                        @for g in q.get("groupLag").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
                            @let group = at(g, "/group");
                            span.lag {
                                (if group == queen_engine::QUEUE_MODE { "(queue mode)".to_owned() } else { group.clone() })
                                ": " span id={ "q-lag-" (name) "-" (group) } { (at(g, "/lag")) } " "
                            }
                        }
                    }
                    td { (at(q, "/createdAt")) }
                }
            }
        }
        p.pager {
            @if after.is_some() { a href="/dashboard/queues" { "← first page" } }
            @if let Some(n) = next { a href={ "/dashboard/queues?after=" (enc(n)) } { "next →" } }
        }
        p.muted { "Lag in messages; in seconds and per partition on each queue's page and under Consumer groups." }
    })
}

async fn queue(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
    Path(name): Path<String>,
    Query(q): Query<AfterQuery>,
) -> Response {
    let s = session_or_login!(app, headers);
    let content = queue_content(&app, &name, &q).await;
    finish(&headers, &s, &format!("Queue {name}"), Some(&uri), content)
}

/// One queue: its summary (no partition list behind it), a keyset page of
/// its partitions with every group's lag and lease holder on each, and its
/// options. Nothing here grows with the number of partitions but the counts.
async fn queue_content(app: &AppState, name: &str, after: &AfterQuery) -> Page {
    let summary = read(app.engine.queue_summary(name)).await?;
    let Some(q) = summary.get("queues").and_then(Value::as_array).and_then(|q| q.first()).cloned() else {
        return Err((StatusCode::NOT_FOUND, view::message_page("Not found", "no such queue")).into_response());
    };
    let after = Paging::filter(&after.after);
    let page = read(app.engine.queue_partitions_page(name, after, PAGE as i32)).await?;
    let partitions = page.get("partitions").and_then(Value::as_array).cloned().unwrap_or_default();
    let next = page.get("nextAfter").and_then(Value::as_str);
    let depth = q.pointer("/messages/pending").and_then(Value::as_i64).unwrap_or(0)
        + q.pointer("/messages/processing").and_then(Value::as_i64).unwrap_or(0);
    let base = format!("/dashboard/queues/{}", enc(name));
    Ok(html! {
        @if q.get("asOf").is_some_and(|a| !a.is_null()) { p { "Counts" (as_of(&q)) } }
        div.cards {
            (card("depth", depth.to_string(), "qd-depth"))
            (card("oldest message age", seconds(q.get("oldestMessageAgeSeconds")), "qd-oldest"))
            (card("dead letters", at(&q, "/messages/deadLetter"), "qd-deadLetters"))
            (card("pending", at(&q, "/messages/pending"), "qd-pending"))
            (card("processing", at(&q, "/messages/processing"), "qd-processing"))
            (card("partitions", at(&q, "/partitions"), "qd-partitions"))
        }
        h2 { "Lag per consumer group" }
        table {
            tr { th { "group" } th { "lag (messages)" } }
            @for g in q.get("groupLag").and_then(Value::as_array).into_iter().flatten() {
                @let group = at(g, "/group");
                tr {
                    td { a href={ "/dashboard/groups?queue=" (enc(name)) } {
                        (if group == queen_engine::QUEUE_MODE { "(queue mode)".to_owned() } else { group.clone() }) } }
                    td.n id={ "qd-lag-" (group) } { (at(g, "/lag")) }
                }
            }
        }
        h2 { "Partitions" }
        table {
            tr { th { "partition" } th { "pending" } th { "processing" } th { "completed" } th { "dead letters" }
                 th { "last push" } th { "groups: lag, lease holder" } }
            @for p in &partitions {
                @let pname = at(p, "/name");
                tr {
                    td { (pname) }
                    td.n id={ "qp-pending-" (pname) } { (at(p, "/stats/pending")) }
                    td.n { (at(p, "/stats/processing")) }
                    td.n { (at(p, "/stats/completed")) } td.n { (at(p, "/stats/deadLetter")) }
                    td { (at(p, "/lastPushAt")) }
                    td {
                        @for g in p.get("groups").and_then(Value::as_array).into_iter().flatten() {
                            @let group = at(g, "/group");
                            span.lag {
                                (if group == queen_engine::QUEUE_MODE { "(queue mode)".to_owned() } else { group.clone() })
                                ": " span id={ "qp-lag-" (pname) "-" (group) } { (at(g, "/lag")) }
                                @if !matches!(g.get("workerId"), None | Some(Value::Null)) {
                                    ", leased by " code { (at(g, "/workerId")) }
                                }
                                " "
                            }
                        }
                    }
                }
            }
        }
        p.pager {
            @if after.is_some() { a href=(base) { "← first page" } }
            @if let Some(n) = next { a href={ (base) "?after=" (enc(n)) } { "next →" } }
        }
        h2 { "Options" }
        (fields(q.get("options").unwrap_or(&Value::Null)))
        p { a href={ "/dashboard/messages?queue=" (enc(name)) } { "Messages of this queue" } " · "
            a href={ "/dashboard/dlq?queue=" (enc(name)) } { "Dead letters of this queue" } " · "
            a href={ "/dashboard/groups?queue=" (enc(name)) } { "Consumer groups of this queue" } }
    })
}

#[derive(Deserialize, Default)]
struct GroupsQuery {
    queue: Option<String>,
    #[serde(rename = "afterQueue")]
    after_queue: Option<String>,
    #[serde(rename = "afterGroup")]
    after_group: Option<String>,
}

async fn groups(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<GroupsQuery>,
) -> Response {
    let s = session_or_login!(app, headers);
    let content = groups_content(&app, &s, &q).await;
    finish(&headers, &s, "Consumer groups", Some(&uri), content)
}

async fn groups_content(app: &AppState, s: &Session, q: &GroupsQuery) -> Page {
    let queue = Paging::filter(&q.queue);
    let after = Paging::filter(&q.after_queue).map(|aq| (aq, q.after_group.as_deref().unwrap_or_default()));
    let page = read(app.engine.consumer_groups_page(queue, after, PAGE as i32)).await?;
    let shown: Vec<&Value> = page.get("groups").and_then(Value::as_array).into_iter().flatten().collect();
    let base = format!("/dashboard/groups?queue={}", enc(queue.unwrap_or_default()));
    let next = page.get("nextAfter").filter(|n| !n.is_null());
    Ok(html! {
        form method="get" action="/dashboard/groups" {
            "queue " input name="queue" value=(queue.unwrap_or_default());
            " " button type="submit" { "Filter" }
        }
        @if s.can_act() {
            p.muted { "Seek moves a group's cursors on a queue to the end, or to a time (ISO 8601, e.g. "
                      code { "2026-01-01T00:00:00Z" } "): the messages pushed from then on are read again." }
        }
        table {
            tr { th { "group" } th { "queue" } th { "partitions" } th { "lagging partitions" }
                 th { "lag (messages)" } th { "lag (seconds)" } th { "state" } th { "subscription" }
                 @if s.can_act() { th { "seek" } } }
            @for g in &shown {
                @let queue = at(g, "/queueName");
                tr {
                    td { (at(g, "/name")) }
                    td { a href={ "/dashboard/queues/" (enc(&queue)) } { (queue) } (as_of(g)) }
                    td.n { (at(g, "/members")) } td.n { (at(g, "/partitionsWithLag")) }
                    td.n id={ "g-lag-" (at(g, "/name")) "-" (queue) } { (at(g, "/totalLag")) }
                    td.n { (seconds(g.get("maxTimeLag"))) } td { (at(g, "/state")) }
                    td { (at(g, "/subscriptionMode")) }
                    @if s.can_act() {
                        td {
                            form.inline method="post" action="/dashboard/groups/seek" {
                                input type="hidden" name="csrf" value=(s.csrf);
                                input type="hidden" name="group" value=(at(g, "/name"));
                                input type="hidden" name="queue" value=(queue);
                                input name="to" size="22" placeholder="end";
                                " " button type="submit" { "Seek" }
                            }
                        }
                    }
                }
            }
        }
        p.pager {
            @if after.is_some() { a href=(base) { "← first page" } }
            @if let Some(n) = next {
                a href={ (base) "&afterQueue=" (enc(&at(n, "/queue"))) "&afterGroup=" (enc(&at(n, "/group"))) }
                  { "next →" }
            }
        }
    })
}

fn filter_query(p: &Paging) -> String {
    let mut base = String::from("?");
    if let Some(q) = Paging::filter(&p.queue) {
        base.push_str(&format!("queue={}&", enc(q)));
    }
    if let Some(st) = Paging::filter(&p.status) {
        base.push_str(&format!("status={}&", enc(st)));
    }
    base
}

async fn messages(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
    Query(p): Query<Paging>,
) -> Response {
    let s = session_or_login!(app, headers);
    let content = messages_content(&app, &p).await;
    finish(&headers, &s, "Messages", Some(&uri), content)
}

async fn messages_content(app: &AppState, p: &Paging) -> Page {
    let (queue, status) = (Paging::filter(&p.queue), Paging::filter(&p.status));
    let tx = Paging::filter(&p.transaction_id);
    let v = match tx {
        Some(tx) => read(app.engine.messages_by_transaction(tx, PAGE as i32)).await?,
        None => {
            let before = p
                .before
                .as_deref()
                .filter(|b| !b.is_empty())
                .map(|b| b.splitn(3, '~').map(str::to_owned).collect::<Vec<String>>());
            if before.as_ref().is_some_and(|b| b.len() != 3) {
                return Err(bad_cursor());
            }
            read(app.engine.messages_before(queue, status, before.as_deref(), PAGE as i32)).await?
        }
    };
    let next = v.get("nextBefore").and_then(Value::as_str).map(str::to_owned);
    let list = v.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    Ok(html! {
        form method="get" action="/dashboard/messages" {
            "transaction id " input name="transactionId" value=(tx.unwrap_or_default());
            " " button type="submit" { "Find" }
        }
        form method="get" action="/dashboard/messages" {
            "queue " input name="queue" value=(queue.unwrap_or_default());
            " status "
            select name="status" {
                option value="" { "any" }
                @for st in ["pending", "processing", "completed", "dead_letter"] {
                    option value=(st) selected[status == Some(st)] { (st) }
                }
            }
            " " button type="submit" { "Filter" }
        }
        table {
            tr { th { "transaction id" } th { "queue / partition" } th { "status" } th { "created" } }
            @for m in &list {
                tr {
                    td { a href={ "/dashboard/messages/" (at(m, "/partitionId")) "/" (enc(&at(m, "/transactionId"))) }
                         { (at(m, "/transactionId")) } }
                    td { (at(m, "/queuePath")) } td { (at(m, "/status")) } td { (at(m, "/createdAt")) }
                }
            }
        }
        @if tx.is_none() {
            p.pager {
                @if p.before.as_deref().is_some_and(|b| !b.is_empty()) {
                    a href={ "/dashboard/messages" (filter_query(p)) } { "← newest" }
                }
                @if let Some(n) = &next {
                    // filter_query ends in `?` or `&`.
                    a href={ "/dashboard/messages" (filter_query(p)) "before=" (enc(n)) } { "older →" }
                }
            }
        }
    })
}

async fn message(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Path((pid, tx)): Path<(String, String)>,
) -> Response {
    let s = session_or_login!(app, headers);
    let content = message_content(&app, &s, &pid, &tx).await;
    finish(&headers, &s, "Message", None, content)
}

fn bad_cursor() -> Response {
    (StatusCode::BAD_REQUEST, view::message_page("Bad request", "the page cursor is not one this page made"))
        .into_response()
}

fn bad_id() -> Response {
    (StatusCode::BAD_REQUEST, view::message_page("Bad request", "the partition id is not a UUID"))
        .into_response()
}

async fn message_content(app: &AppState, s: &Session, pid: &str, tx: &str) -> Page {
    let id = uuid::Uuid::parse_str(pid).map_err(|_| bad_id())?;
    let m = read(app.engine.message(&id, tx)).await?;
    let payload =
        m.get("payload").map(|p| serde_json::to_string_pretty(p).unwrap_or_default()).unwrap_or_default();
    let dead = !matches!(m.get("errorMessage"), None | Some(Value::Null));
    let mut summary = m.clone();
    if let Some(o) = summary.as_object_mut() {
        o.remove("payload");
        o.remove("consumerGroups");
        o.remove("queueConfig");
    }
    Ok(html! {
        (fields(&summary))
        @if dead { (dead_letter_actions(s, pid, tx, &["retry", "delete"])) }
        h2 { "Payload" }
        pre { (payload) }
        h2 { "History: consumer groups" }
        table {
            tr { th { "group" } th { "status" } th { "consumed" } th { "retries" } th { "lease until" } }
            @for g in m.get("consumerGroups").and_then(Value::as_array).into_iter().flatten() {
                tr { td { (at(g, "/name")) } td { (at(g, "/status")) } td { (at(g, "/consumed")) }
                     td.n { (at(g, "/retryCount")) } td { (at(g, "/leaseExpiresAt")) } }
            }
        }
    })
}

/// Retry and/or Delete buttons of one dead letter by (partition, transaction
/// id) (none for a read-only session); the DLQ page replays by record instead.
fn dead_letter_actions(s: &Session, pid: &str, tx: &str, actions: &[&str]) -> Markup {
    let labelled = [("retry", "Retry"), ("delete", "Delete")];
    html! {
        @if s.can_act() {
            @for (action, label) in labelled.iter().filter(|(a, _)| actions.contains(a)) {
                form.inline method="post" action={ "/dashboard/dlq/" (action) } {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="partitionId" value=(pid);
                    input type="hidden" name="transactionId" value=(tx);
                    button type="submit" { (label) }
                }
                " "
            }
        }
    }
}

#[derive(Deserialize, Default)]
struct DlqPaging {
    queue: Option<String>,
    before: Option<i64>,
}

async fn dead_letters(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(p): Query<DlqPaging>,
) -> Response {
    let s = session_or_login!(app, headers);
    let content = dead_letters_content(&app, &s, &p).await;
    finish(&headers, &s, "Dead letters", None, content)
}

async fn dead_letters_content(app: &AppState, s: &Session, p: &DlqPaging) -> Page {
    let queue = Paging::filter(&p.queue);
    let v = read(app.engine.dlq_page(queue, p.before, PAGE as i32)).await?;
    let list = v.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
    let next = v.get("nextBefore").and_then(Value::as_i64);
    let base = format!("/dashboard/dlq?queue={}", enc(queue.unwrap_or_default()));
    Ok(html! {
        form method="get" action="/dashboard/dlq" {
            "queue " input name="queue" value=(queue.unwrap_or_default());
            " " button type="submit" { "Filter" }
        }
        div.cards { (card("dead letters", show(v.get("total")), "dlq-total")) }
        @if !s.can_act() { p.muted { "Your role may look but not replay or delete." } }
        @if s.is_admin() {
            @if let Some(q) = queue {
                form.inline #dlq-purge method="post" action="/dashboard/dlq/purge" {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="queue" value=(q);
                    "consumer group " input name="consumerGroup" placeholder="all groups";
                    " " button #dlq-purge-button type="submit" { "Purge dead letters of " (q) }
                }
            } @else {
                p.muted { "Filter by a queue to purge its dead letters." }
            }
        }
        table {
            tr { th { "transaction id" } th { "queue / partition" } th { "group" } th { "error" } th { "retries" }
                 th { "failed" } @if s.can_act() { th { "actions" } } }
            @for m in &list {
                @let (pid, tx) = (at(m, "/partitionId"), at(m, "/transactionId"));
                @let dlq_id = at(m, "/dlqId");
                tr id={ "dlq-" (dlq_id) } {
                    td { a href={ "/dashboard/messages/" (pid) "/" (enc(&tx)) } { (tx) } }
                    td { (at(m, "/queue")) " / " (at(m, "/partition")) }
                    td { (at(m, "/consumerGroup")) } td { (at(m, "/errorMessage")) }
                    td.n { (at(m, "/retryCount")) } td { (at(m, "/failedAt")) }
                    @if s.can_act() {
                        td {
                            form.inline method="post" action="/dashboard/dlq/replay" {
                                input type="hidden" name="csrf" value=(s.csrf);
                                input type="hidden" name="dlqId" value=(dlq_id);
                                input type="hidden" name="queue" value=(queue.unwrap_or_default());
                                button type="submit" id={ "replay-" (dlq_id) } { "Replay" }
                            }
                            " "
                            (dead_letter_actions(s, &pid, &tx, &["delete"]))
                        }
                    }
                }
            }
        }
        p.pager {
            @if p.before.is_some() { a href=(base) { "← newest" } }
            @if let Some(n) = next { a href={ (base) "&before=" (n) } { "older →" } }
        }
    })
}

#[derive(Deserialize, Default)]
struct KvQuery {
    after: Option<String>,
    prefix: Option<String>,
    key: Option<String>,
}

async fn kv_namespaces(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<KvQuery>,
) -> Response {
    let s = session_or_login!(app, headers);
    let content = kv_namespaces_content(&app, &q).await;
    finish(&headers, &s, "KV", Some(&uri), content)
}

async fn kv_namespaces_content(app: &AppState, q: &KvQuery) -> Page {
    let after = Paging::filter(&q.after);
    let v = read(app.engine.kv_namespaces(after, PAGE as i32)).await?;
    let next = v.get("nextAfter").and_then(Value::as_str);
    Ok(html! {
        table {
            tr { th { "namespace" } th { "live keys" } }
            @for n in v.get("namespaces").and_then(Value::as_array).into_iter().flatten() {
                @let ns = at(n, "/namespace");
                tr { td { a href={ "/dashboard/kv/" (enc(&ns)) } { (ns) } }
                     td.n id={ "kv-keys-" (ns) } { (key_count(n)) } }
            }
        }
        p.pager {
            @if after.is_some() { a href="/dashboard/kv" { "← first page" } }
            @if let Some(n) = next { a href={ "/dashboard/kv?after=" (enc(n)) } { "next →" } }
        }
    })
}

/// One KV call through the same decoder and engine call as `POST /api/v1/kv`.
async fn kv_call(app: &AppState, op: Value) -> Result<Value, Response> {
    let v = read(app.engine.kv(&json!({"operations": [op]}).to_string())).await?;
    Ok(v.pointer("/results/0").cloned().unwrap_or(Value::Null))
}

async fn kv_keys(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(ns): Path<String>,
    Query(q): Query<KvQuery>,
) -> Response {
    let s = session_or_login!(app, headers);
    let content = kv_keys_content(&app, &ns, &q).await;
    finish(&headers, &s, &format!("KV namespace {ns}"), None, content)
}

/// Shortens a JSON text for a table cell.
fn preview(text: &str) -> String {
    match text.char_indices().nth(120) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

async fn kv_keys_content(app: &AppState, ns: &str, q: &KvQuery) -> Page {
    let prefix = q.prefix.clone().unwrap_or_default();
    let r = read(app.engine.kv_page(ns, &prefix, Paging::filter(&q.after), PAGE as i32)).await?;
    let next = r.get("nextAfter").and_then(Value::as_str);
    let base = format!("/dashboard/kv/{}?prefix={}", enc(ns), enc(&prefix));
    Ok(html! {
        form method="get" action={ "/dashboard/kv/" (enc(ns)) } {
            "prefix " input name="prefix" value=(prefix);
            " " button type="submit" { "Show" }
        }
        table {
            tr { th { "key" } th { "value" } th { "version" } th { "expires" } th { "updated" } }
            @for row in r.get("rows").and_then(Value::as_array).into_iter().flatten() {
                @let key = at(row, "/key");
                tr {
                    td { a href={ "/dashboard/kv/" (enc(ns)) "/value?key=" (enc(&key)) } { (key) } }
                    td { code { (preview(&row.get("value").map(Value::to_string).unwrap_or_default())) } }
                    td.n { (at(row, "/version")) } td { (at(row, "/expiresAt")) } td { (at(row, "/updatedAt")) }
                }
            }
        }
        p.pager {
            @if q.after.is_some() { a href=(base) { "← first page" } }
            @if let Some(n) = next { a href={ (base) "&after=" (enc(n)) } { "next →" } }
        }
    })
}

async fn kv_value(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
    Path(ns): Path<String>,
    Query(q): Query<KvQuery>,
) -> Response {
    let s = session_or_login!(app, headers);
    let key = q.key.clone().unwrap_or_default();
    let content = kv_value_content(&app, &ns, &key).await;
    finish(&headers, &s, &format!("KV {ns} / {key}"), Some(&uri), content)
}

async fn kv_value_content(app: &AppState, ns: &str, key: &str) -> Page {
    let r = kv_call(app, json!({"op": "get", "ns": ns, "key": key})).await?;
    let found = r.get("found").and_then(Value::as_bool).unwrap_or(false);
    let value =
        r.get("value").map(|v| serde_json::to_string_pretty(v).unwrap_or_default()).unwrap_or_default();
    Ok(html! {
        @if found {
            table {
                tr { th { "version" } td #kv-version { (at(&r, "/version")) } }
                tr { th { "expires" } td { (at(&r, "/expiresAt")) } }
            }
            pre #kv-value { (value) }
        } @else {
            p.muted #kv-missing { "No live key " code { (key) } " in " (ns) "." }
        }
        p { a href={ "/dashboard/kv/" (enc(ns)) } { "All keys of " (ns) } }
    })
}

#[derive(Deserialize, Default)]
struct TimersQuery {
    queue: Option<String>,
    after: Option<String>,
    #[serde(rename = "lockAfter")]
    lock_after: Option<String>,
}

async fn timers_and_locks(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<TimersQuery>,
) -> Response {
    let s = session_or_login!(app, headers);
    let content = timers_and_locks_content(&app, &q).await;
    finish(&headers, &s, "Timers and locks", Some(&uri), content)
}

async fn timers_and_locks_content(app: &AppState, q: &TimersQuery) -> Page {
    let (pending, due, held) = app.engine.timer_and_lock_gauges().await.map_err(failure)?;
    let queue = Paging::filter(&q.queue);
    let after = Paging::filter(&q.after);
    let timers = match queue {
        Some(queue) => Some(read(app.engine.timer_list(queue, after, Some(PAGE))).await?),
        None => None,
    };
    let locks = read(app.engine.kv_page(
        queen_engine::LOCKS_NAMESPACE,
        "",
        Paging::filter(&q.lock_after),
        PAGE as i32,
    ))
    .await?;
    let timers_base = format!("/dashboard/timers?queue={}", enc(queue.unwrap_or_default()));
    Ok(html! {
        div.cards {
            (card("timers pending", pending.to_string(), "tl-pending"))
            (card("timers due now", due.to_string(), "tl-due"))
            (card("lock permits held", held.to_string(), "tl-held"))
            (card("timers fired by this broker", app.engine.timer_stats().fired.to_string(), "tl-fired"))
        }
        h2 { "Timers" }
        form method="get" action="/dashboard/timers" {
            "queue " input name="queue" value=(queue.unwrap_or_default());
            " " button type="submit" { "List" }
        }
        @if let Some(t) = &timers {
            table {
                tr { th { "timer key" } th { "partition" } th { "deliver at" } th { "attempts" } th { "last error" }
                     th { "txn" } }
                @for row in t.get("rows").and_then(Value::as_array).into_iter().flatten() {
                    tr { td { (at(row, "/timerKey")) } td { (at(row, "/partition")) } td { (at(row, "/deliverAt")) }
                         td.n { (at(row, "/attempts")) } td { (at(row, "/lastError")) } td { (at(row, "/txn")) } }
                }
            }
            p.pager {
                @if after.is_some() { a href=(timers_base) { "← first page" } }
                @if let Some(n) = t.get("nextAfter").and_then(Value::as_str) {
                    a href={ (timers_base) "&after=" (enc(n)) } { "next →" }
                }
            }
        } @else {
            p.muted { "Name a queue to list its pending timers." }
        }
        h2 { "Lock permits" }
        table {
            tr { th { "lock # slot" } th { "token" } th { "holder" } th { "expires" } }
            @for row in locks.get("rows").and_then(Value::as_array).into_iter().flatten() {
                tr { td { (at(row, "/key")) } td.n { (at(row, "/version")) } td { code { (at(row, "/value")) } }
                     td { (at(row, "/expiresAt")) } }
            }
        }
        p.pager {
            @if q.lock_after.is_some() { a href=(timers_base) { "← first page" } }
            @if let Some(n) = locks.get("nextAfter").and_then(Value::as_str) {
                a href={ (timers_base) "&lockAfter=" (enc(n)) } { "next →" }
            }
        }
    })
}

async fn system(State(app): State<Arc<AppState>>, headers: HeaderMap, uri: Uri) -> Response {
    let s = session_or_login!(app, headers);
    let content = system_content(&app, &s).await;
    finish(&headers, &s, "System", Some(&uri), content)
}

async fn system_content(app: &AppState, s: &Session) -> Page {
    let brokers = read(app.engine.brokers()).await?;
    let db = read(app.engine.database_metrics()).await?;
    let m = read(app.engine.maintenance()).await?;
    let switches = [("push", "/maintenanceMode"), ("pop", "/popMaintenanceMode")];
    Ok(html! {
        p { "queen " (env!("CARGO_PKG_VERSION")) ", this broker " code { (app.engine.broker_id().to_string()) } }
        h2 { "Brokers" }
        table {
            tr { th { "id" } th { "url" } th { "host" } th { "pid" } th { "version" } th { "started" }
                 th { "heartbeat" } th { "figures" } }
            @for b in brokers.as_array().into_iter().flatten() {
                tr { td { (at(b, "/id")) } td { (at(b, "/url")) } td { (at(b, "/hostname")) } td.n { (at(b, "/pid")) }
                     td { (at(b, "/version")) } td { (at(b, "/startedAt")) }
                     td { (at(b, "/secondsSinceHeartbeat")) " s ago" } td { code { (at(b, "/figures")) } } }
            }
        }
        h2 { "PostgreSQL" }
        (fields(&db))
        h2 { "Maintenance switches" }
        table {
            @for (which, pointer) in switches {
                @let on = m.pointer(pointer).and_then(Value::as_bool).unwrap_or(false);
                tr {
                    th { (which) " paused" }
                    td id={ "maint-" (which) } { (on) }
                    @if s.is_admin() {
                        td {
                            form.inline method="post" action="/dashboard/system/maintenance" {
                                input type="hidden" name="csrf" value=(s.csrf);
                                input type="hidden" name="which" value=(which);
                                input type="hidden" name="on" value=(!on);
                                button type="submit" { @if on { "Resume " (which) } @else { "Pause " (which) } }
                            }
                        }
                    }
                }
            }
        }
    })
}

// ---------------------------------------------------------------- actions

#[derive(Deserialize)]
struct DeadLetterForm {
    csrf: Option<String>,
    #[serde(rename = "partitionId")]
    partition_id: Option<String>,
    #[serde(rename = "transactionId")]
    transaction_id: Option<String>,
}

async fn dead_letter_action(
    app: &AppState,
    headers: &HeaderMap,
    form: DeadLetterForm,
    retry: bool,
) -> Response {
    if let Err(reason) = session::authorize(app, headers, form.csrf.as_deref(), Role::ReadWrite).await {
        return session::forbidden(reason);
    }
    let Some(pid) = form.partition_id.as_deref().and_then(|p| uuid::Uuid::parse_str(p).ok()) else {
        return bad_id();
    };
    let tx = form.transaction_id.unwrap_or_default();
    let done = if retry {
        app.engine.retry_message(&pid, &tx).await
    } else {
        app.engine.delete_dead_letter(&pid, &tx).await
    };
    match done {
        Ok(_) => see_other("/dashboard/dlq"),
        Err(e) => failure(e),
    }
}

async fn retry_dead_letter(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Form(form): Form<DeadLetterForm>,
) -> Response {
    dead_letter_action(&app, &headers, form, true).await
}

async fn delete_dead_letter(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Form(form): Form<DeadLetterForm>,
) -> Response {
    dead_letter_action(&app, &headers, form, false).await
}

#[derive(Deserialize)]
struct ReplayForm {
    csrf: Option<String>,
    #[serde(rename = "dlqId")]
    dlq_id: Option<String>,
    /// The page's queue filter, to go back to.
    queue: Option<String>,
}

/// The DLQ page's filtered view of `queue` (all queues when none).
fn dlq_page_of(queue: Option<&str>) -> String {
    match queue.filter(|q| !q.is_empty()) {
        Some(q) => format!("/dashboard/dlq?queue={}", enc(q)),
        None => "/dashboard/dlq".to_owned(),
    }
}

/// Replays one record in place (`POST /api/v1/dlq/:id/replay`'s move); a
/// duplicate is said, not hidden behind the redirect.
async fn replay_dead_letter(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Form(form): Form<ReplayForm>,
) -> Response {
    if let Err(reason) = session::authorize(&app, &headers, form.csrf.as_deref(), Role::ReadWrite).await {
        return session::forbidden(reason);
    }
    let id = match queen_engine::parse_dlq_id(form.dlq_id.as_deref().unwrap_or_default()) {
        Ok(id) => id,
        Err(e) => return failure(e),
    };
    match app.engine.dlq_replay(id, &queen_engine::ReplayTarget::default()).await {
        Ok(json) => {
            let answer: Value = serde_json::from_str(&json.0).unwrap_or(Value::Null);
            if answer.get("result").and_then(Value::as_str) == Some("duplicate") {
                let text = format!(
                    "Dead letter {id} was not replayed: a message {} is in {}/{} already; the record is kept.",
                    at(&answer, "/replayedAs"),
                    at(&answer, "/queue"),
                    at(&answer, "/partition")
                );
                return (StatusCode::CONFLICT, view::message_page("Not replayed", &text)).into_response();
            }
            see_other(&dlq_page_of(form.queue.as_deref()))
        }
        Err(e) => failure(e),
    }
}

#[derive(Deserialize)]
struct PurgeForm {
    csrf: Option<String>,
    queue: Option<String>,
    #[serde(rename = "consumerGroup")]
    consumer_group: Option<String>,
}

/// Deletes the dead letters of the filtered queue (or one group's); admin only.
async fn purge_dead_letters(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Form(form): Form<PurgeForm>,
) -> Response {
    if let Err(reason) = session::authorize(&app, &headers, form.csrf.as_deref(), Role::Admin).await {
        return session::forbidden(reason);
    }
    let queue = form.queue.unwrap_or_default();
    let group = Paging::filter(&form.consumer_group);
    match app.engine.dlq_purge(&queue, group).await {
        Ok(_) => see_other(&dlq_page_of(Some(&queue))),
        Err(e) => failure(e),
    }
}

#[derive(Deserialize)]
struct SeekForm {
    csrf: Option<String>,
    group: Option<String>,
    queue: Option<String>,
    to: Option<String>,
}

async fn seek(State(app): State<Arc<AppState>>, headers: HeaderMap, Form(form): Form<SeekForm>) -> Response {
    if let Err(reason) = session::authorize(&app, &headers, form.csrf.as_deref(), Role::ReadWrite).await {
        return session::forbidden(reason);
    }
    let (group, queue) = (form.group.unwrap_or_default(), form.queue.unwrap_or_default());
    let to = Paging::filter(&form.to);
    match app.engine.seek(&group, &queue, None, to.is_none(), to).await {
        Ok(_) => see_other("/dashboard/groups"),
        Err(e) => failure(e),
    }
}

#[derive(Deserialize)]
struct MaintenanceForm {
    csrf: Option<String>,
    which: Option<String>,
    on: Option<String>,
}

async fn maintenance(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    Form(form): Form<MaintenanceForm>,
) -> Response {
    if let Err(reason) = session::authorize(&app, &headers, form.csrf.as_deref(), Role::Admin).await {
        return session::forbidden(reason);
    }
    let on = form.on.as_deref() == Some("true");
    let done = match form.which.as_deref() {
        Some("push") => app.engine.set_maintenance(Some(on), None).await,
        Some("pop") => app.engine.set_maintenance(None, Some(on)).await,
        _ => {
            return (StatusCode::BAD_REQUEST, view::message_page("Bad request", "which must be push or pop"))
                .into_response()
        }
    };
    match done {
        Ok(_) => see_other("/dashboard/system"),
        Err(e) => failure(e),
    }
}
