//! The dashboard's HTML: the page frame and small helpers (maud).

use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde_json::Value;

use super::session::Session;

/// A page's live figures reload every 5 s, except while a form field has the
/// focus (the reload would replace what is being typed).
pub(crate) const REFRESH: &str =
    "every 5s [!(document.activeElement && document.activeElement.matches('input, select, textarea'))]";

const STYLE: &str = "
body{font-family:system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#2b2250;color:#fff;padding:.6rem 1rem;display:flex;gap:1.2rem;align-items:center;flex-wrap:wrap}
header a{color:#fff;text-decoration:none}header a:hover{text-decoration:underline}
header .brand{font-weight:700;margin-right:1rem}header .who{margin-left:auto;font-size:.85rem;opacity:.85}
main{padding:1rem 1.5rem}h1{font-size:1.4rem;margin:.2rem 0 1rem}h2{font-size:1.1rem;margin:1.4rem 0 .5rem}
table{border-collapse:collapse;background:#fff;font-size:.9rem;margin-bottom:.8rem}
th,td{border:1px solid #dde;padding:.3rem .6rem;text-align:left;vertical-align:top}th{background:#eceef4}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.cards{display:flex;flex-wrap:wrap;gap:.8rem}.card{background:#fff;border:1px solid #dde;border-radius:6px;padding:.6rem 1rem;min-width:8rem}
.card .v{font-size:1.5rem;font-weight:600}.card .k{font-size:.8rem;color:#667}
form.inline{display:inline}button{cursor:pointer}pre{background:#fff;border:1px solid #dde;padding:.6rem;overflow:auto;max-width:60rem}
.pager a{margin-right:1rem}.muted{color:#778}.err{color:#a40000}
.charts{display:flex;flex-wrap:wrap;gap:.8rem}.chart{background:#fff;border:1px solid #dde;border-radius:6px;padding:.5rem .8rem}
.chart .k{font-size:.85rem;color:#445}.chart .v{font-weight:600}.chart svg{display:block;margin-top:.3rem}
.chart text{font-size:10px;fill:#778}
";

/// The whole page: header, navigation, `content`; when `live` is set,
/// `content` sits in a block that htmx reloads from `live` every 5 s.
pub(crate) fn page(title: &str, session: Option<&Session>, live: Option<&str>, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Queen" }
                style { (PreEscaped(STYLE)) }
                script src="/dashboard/assets/htmx.min.js" {}
            }
            body {
                header {
                    a.brand href="/" { "Queen" }
                    @if let Some(s) = session {
                        a href="/" { "Overview" }
                        a href="/dashboard/queues" { "Queues" }
                        a href="/dashboard/groups" { "Consumer groups" }
                        a href="/dashboard/messages" { "Messages" }
                        a href="/dashboard/dlq" { "Dead letters" }
                        a href="/dashboard/kv" { "KV" }
                        a href="/dashboard/timers" { "Timers and locks" }
                        a href="/dashboard/system" { "System" }
                        span.who {
                            "role: " (s.role_name())
                            @if s.auth_on {
                                " "
                                form.inline method="post" action="/dashboard/logout" {
                                    input type="hidden" name="csrf" value=(s.csrf);
                                    button type="submit" { "Log out" }
                                }
                            }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    @if let Some(url) = live {
                        (live_block(url, content))
                    } @else {
                        (content)
                    }
                }
            }
        }
    }
}

/// The block htmx reloads from `url`; a reload answers the whole block
/// (`outerHTML`), so the next reload may use another URL (the overview
/// carries its counters in it to compute rates).
pub(crate) fn live_block(url: &str, content: Markup) -> Markup {
    html! { div #live hx-get=(url) hx-trigger=(REFRESH) hx-swap="outerHTML" { (content) } }
}

/// A page with one sentence (errors, refusals).
pub(crate) fn message_page(title: &str, text: &str) -> Markup {
    page(title, None, None, html! { p.err { (text) } p { a href="/" { "Back to the dashboard" } } })
}

/// A JSON value as table text: strings bare, null as a dash.
pub(crate) fn show(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "—".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// `v` at a JSON pointer, shown.
pub(crate) fn at(v: &Value, pointer: &str) -> String {
    show(v.pointer(pointer))
}

/// A number of seconds, rounded to a tenth.
pub(crate) fn seconds(v: Option<&Value>) -> String {
    match v.and_then(Value::as_f64) {
        Some(s) => format!("{s:.1} s"),
        None => "—".to_owned(),
    }
}

/// A figure in a card.
pub(crate) fn card(label: &str, value: String, id: &str) -> Markup {
    html! { div.card { div.v #(id) { (value) } div.k { (label) } } }
}

/// Plot size of a chart (SVG user units): one bar per minute.
const CHART_W: i64 = 360;
const CHART_H: i64 = 80;
/// Room above the plot for the maximum's label, and under it for the time axis.
const LABEL_H: i64 = 14;

/// A bar chart of one series per minute (oldest first), as inline SVG:
/// bars scaled to the series' maximum (a dashed line with its value above
/// the plot), the time span under it, each bar's minute and value as its
/// tooltip. `id` names the element with the series' sum (`{id}-total`) and
/// the SVG (`{id}-chart`).
pub(crate) fn minute_chart(label: &str, id: &str, color: &str, minutes: &[(String, i64)]) -> Markup {
    let total: i64 = minutes.iter().map(|(_, v)| *v).sum();
    let max = minutes.iter().map(|(_, v)| *v).max().unwrap_or(0).max(0);
    let n = i64::try_from(minutes.len()).unwrap_or(1).max(1);
    let step = CHART_W / n;
    let height =
        |v: i64| if max == 0 { 0 } else { (v.max(0).saturating_mul(CHART_H).saturating_add(max - 1)) / max };
    let base = LABEL_H + CHART_H;
    html! {
        div.chart {
            div.k { (label) ": " span.v #{ (id) "-total" } { (total) } " in the last hour" }
            svg #{ (id) "-chart" } width=(CHART_W) height=(base + LABEL_H)
                viewBox={ "0 0 " (CHART_W) " " (base + LABEL_H) } role="img"
                aria-label={ (label) " per minute, last 60 minutes" } {
                line x1="0" y1=(LABEL_H) x2=(CHART_W) y2=(LABEL_H) stroke="#ccd" stroke-dasharray="3 3" {}
                line x1="0" y1=(base) x2=(CHART_W) y2=(base) stroke="#bbc" {}
                @for (i, (minute, v)) in minutes.iter().enumerate() {
                    @let h = height(*v);
                    @let x = i64::try_from(i).unwrap_or(0) * step;
                    rect x=(x) y=(base - h) width=((step - 1).max(1)) height=(h) fill=(color) {
                        title { (minute.get(11..16).unwrap_or(minute)) " UTC: " (v) }
                    }
                }
                text x="0" y=(LABEL_H - 4) { "max " (max) "/min" }
                text x="0" y=(base + LABEL_H - 2) { "last 60 min" }
                text x=(CHART_W) y=(base + LABEL_H - 2) text-anchor="end" { "now" }
            }
        }
    }
}

/// Every scalar field of a JSON object as a two-column table.
pub(crate) fn fields(v: &Value) -> Markup {
    html! {
        table {
            @if let Some(map) = v.as_object() {
                @for (k, val) in map {
                    tr { th { (k) } td { (show(Some(val))) } }
                }
            }
        }
    }
}

/// Percent-encodes a path segment or query value.
pub(crate) fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// " (counted at …)" after counts that come from a large queue's gauge
/// (`asOf` set: counted in the background, not on this page view).
pub(crate) fn as_of(v: &Value) -> Markup {
    match v.get("asOf").and_then(Value::as_str) {
        Some(t) => {
            html! { span.muted.asof title="a large queue is counted in the background" { " (counted at " (t) ")" } }
        }
        None => html! {},
    }
}

/// A KV key count: exact (`keys`), or past the counted bound, the
/// statistics' estimate (`keysEstimate`) or the bound (`keysAtLeast`).
pub(crate) fn key_count(v: &Value) -> String {
    if let Some(n) = v.get("keys").and_then(Value::as_i64) {
        return n.to_string();
    }
    match (v.get("keysEstimate").and_then(Value::as_i64), v.get("keysAtLeast").and_then(Value::as_i64)) {
        (Some(e), Some(bound)) if e > bound => format!("≈ {e}"),
        (_, Some(bound)) => format!("over {bound}"),
        _ => "—".to_owned(),
    }
}
