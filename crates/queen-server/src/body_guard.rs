//! Reads every request body before a route sees it, with a byte limit and a
//! deadline for the whole body.
//!
//! A body that announces more than the limit (`Content-Length`) is refused
//! with 413 at once, before one byte of it is read; a chunked body is
//! refused as soon as it passes the limit, so a broker never holds more
//! than the limit of one request. A client that sends its body too slowly
//! (a slowloris dribbling a byte at a time) gets 408 when the deadline
//! passes: the inter-frame timeout of tower-http would let it go on for
//! ever. The time to send the headers is bounded by hyper's header read
//! timeout (see `serve`).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::header::CONTENT_LENGTH;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

use crate::ApiError;

/// The two bounds on a request body.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimits {
    pub max_bytes: usize,
    pub read_timeout: Duration,
}

enum Refusal {
    TooLarge,
    TooSlow,
    Broken(String),
}

/// The request with its whole body read, or the refusal.
pub(crate) async fn read(limits: BodyLimits, req: Request) -> Result<Request, Response> {
    let (parts, body) = req.into_parts();
    let kv_route = parts.uri.path() == "/api/v1/kv" || parts.uri.path().starts_with("/api/v1/kv/");
    let announced = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let read = match announced {
        Some(n) if n > limits.max_bytes as u64 => Err(Refusal::TooLarge),
        Some(0) => Ok(Bytes::new()),
        _ => match tokio::time::timeout(limits.read_timeout, collect(body, limits.max_bytes)).await {
            Ok(read) => read,
            Err(_) => Err(Refusal::TooSlow),
        },
    };
    match read {
        Ok(bytes) => Ok(Request::from_parts(parts, Body::from(bytes))),
        Err(refusal) => {
            let error = match refusal {
                Refusal::TooLarge => ApiError::TooLarge,
                Refusal::TooSlow => ApiError::BodyTimeout,
                Refusal::Broken(e) => ApiError::bad("body", format!("could not be read: {e}")),
            };
            let mut resp = if kv_route { crate::routes::kv_failure(error) } else { error.into_response() };
            // The body was not read to its end: the connection cannot carry another request.
            crate::error::close_after(&mut resp);
            Err(resp)
        }
    }
}

async fn collect(body: Body, max_bytes: usize) -> Result<Bytes, Refusal> {
    let mut stream = body.into_data_stream();
    let Some(first) = stream.next().await else {
        return Ok(Bytes::new());
    };
    let first = first.map_err(|e| Refusal::Broken(e.to_string()))?;
    if first.len() > max_bytes {
        return Err(Refusal::TooLarge);
    }
    // The common case, a body in one frame, is passed on without a copy.
    let Some(second) = stream.next().await else {
        return Ok(first);
    };
    let second = second.map_err(|e| Refusal::Broken(e.to_string()))?;
    let mut buf = Vec::with_capacity(first.len() + second.len());
    buf.extend_from_slice(&first);
    buf.extend_from_slice(&second);
    if buf.len() > max_bytes {
        return Err(Refusal::TooLarge);
    }
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| Refusal::Broken(e.to_string()))?;
        if buf.len() + chunk.len() > max_bytes {
            return Err(Refusal::TooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(buf))
}
