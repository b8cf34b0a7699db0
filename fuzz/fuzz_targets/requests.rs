//! Every route's request decoding, fuzzed through the real router.
//!
//! The router runs in-process over an engine whose database does not exist
//! (a closed port), so a request that decodes reaches the engine and is
//! answered 503; one that does not is answered 4xx by our own decoding.
//! The properties: no panic, never a 500, and every error answer (4xx,
//! 503) is a JSON body with an error code. Run with `scripts/fuzz` (bounded time).
//!
//! Input: byte 0 picks an operation of the OpenAPI document (method and
//! path template); the rest, split at `\n`, fills the path parameters in
//! order, then the query string; what is left is the body.
#![no_main]

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{Method, Request};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

struct Harness {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    operations: Vec<(Method, String)>,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let router = runtime.block_on(async {
            let db = queen_engine::DbConfig {
                url: Some("postgres://fuzz@127.0.0.1:1/none?connect_timeout=1".into()),
                pool_size: 2,
                ..Default::default()
            };
            let options = queen_engine::EngineOptions { kv_sweep_interval: None, ..Default::default() };
            let engine = Arc::new(queen_engine::Engine::connect(&db, options).unwrap());
            let config = queen_server::ServerConfig { max_wait_ms: 1, ..Default::default() };
            queen_server::router(engine, config)
        });
        let doc: serde_json::Value = serde_json::from_str(&queen_server::openapi_json()).unwrap();
        let mut operations = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                if let Ok(m) = method.to_uppercase().parse::<Method>() {
                    operations.push((m, path.clone()));
                }
            }
        }
        operations.sort_by(|a, b| (a.1.as_str(), a.0.as_str()).cmp(&(b.1.as_str(), b.0.as_str())));
        Harness { runtime, router, operations }
    })
}

/// The template with each `{name}` replaced by the next field.
fn fill(template: &str, fields: &mut std::slice::Iter<'_, &[u8]>) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').map(|c| open + c).unwrap_or(rest.len() - 1);
        let value = fields.next().copied().unwrap_or(b"x");
        out.push_str(&String::from_utf8_lossy(value));
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let h = harness();
    let (method, template) = &h.operations[pick as usize % h.operations.len()];
    let params = template.matches('{').count();
    let fields: Vec<&[u8]> = rest.splitn(params + 2, |b| *b == b'\n').collect();
    let mut it = fields.iter();
    let path = fill(template, &mut it);
    let query = it.next().map(|q| String::from_utf8_lossy(q).into_owned()).unwrap_or_default();
    let body = it.next().map(|b| b.to_vec()).unwrap_or_default();
    let uri = if query.is_empty() { path } else { format!("{path}?{query}") };
    // hyper refuses a request target that is not a URI before any route.
    let Ok(request) = Request::builder()
        .method(method.clone())
        .uri(&uri)
        .header("content-type", "application/json")
        .body(Body::from(body))
    else {
        return;
    };
    h.runtime.block_on(async {
        let response = h.router.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        assert_ne!(status, 500, "{method} {uri}: {}", String::from_utf8_lossy(&bytes));
        if status >= 400 {
            let json: serde_json::Value = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| panic!("{method} {uri}: {status} is not JSON: {}", String::from_utf8_lossy(&bytes)));
            let code = json.get("code").or_else(|| json.get("error"));
            assert!(code.and_then(|c| c.as_str()).is_some(), "{method} {uri}: {status} without a code: {json}");
        }
    });
});
