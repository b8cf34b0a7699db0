//! How the bench sends its HTTP requests. The sweep drives the broker the
//! way pgbench drives PostgreSQL: one kept-alive connection per client and
//! nothing else on the path (`LeanConn`, hyper's HTTP/1 connection API: no
//! pool, no URL parsing, no redirect or proxy logic). A general client
//! (reqwest) cost the bench process about 20% of the machine's two cores at
//! 7k requests/s, CPU the broker and PostgreSQL then lacked; pgbench, the
//! other side of every ratio, is lean C. The soak keeps reqwest
//! (`Reqwest`), since it measures the broker over time, not its ceiling.

use std::future::Future;

use anyhow::{bail, Context};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{header, Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Sends one request and answers its status and body.
pub trait Driver: Send {
    /// POSTs a JSON body to `path` (which starts with `/`).
    fn post(&mut self, path: &str, body: String)
        -> impl Future<Output = anyhow::Result<(u16, Bytes)>> + Send;
    /// GETs `path_and_query`.
    fn get(&mut self, path_and_query: &str) -> impl Future<Output = anyhow::Result<(u16, Bytes)>> + Send;
}

/// One HTTP/1.1 connection, kept alive, reopened after an error.
pub struct LeanConn {
    authority: String,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl LeanConn {
    /// A connection to `base` (`http://host:port`), opened on first use.
    pub fn new(base: &str) -> anyhow::Result<Self> {
        let Some(authority) = base.strip_prefix("http://") else {
            bail!("the bench drives plain http:// brokers, not {base}");
        };
        Ok(LeanConn { authority: authority.trim_end_matches('/').to_owned(), sender: None })
    }

    async fn open(&self) -> anyhow::Result<SendRequest<Full<Bytes>>> {
        let stream = TcpStream::connect(&self.authority)
            .await
            .with_context(|| format!("connecting to {}", self.authority))?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // The connection ends when the sender is dropped or the broker
            // closes it; the next request opens another.
            let _ = conn.await;
        });
        Ok(sender)
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> anyhow::Result<(u16, Bytes)> {
        let mut sender = match self.sender.take() {
            Some(s) if !s.is_closed() => s,
            _ => self.open().await?,
        };
        sender.ready().await?;
        let mut req = Request::builder().method(method).uri(path).header(header::HOST, &self.authority);
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let resp = sender.send_request(req).await?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await?.to_bytes();
        // Kept only after a whole exchange: an error drops the connection.
        self.sender = Some(sender);
        Ok((status, bytes))
    }
}

impl Driver for LeanConn {
    async fn post(&mut self, path: &str, body: String) -> anyhow::Result<(u16, Bytes)> {
        self.send(Method::POST, path, Some(body)).await
    }

    async fn get(&mut self, path_and_query: &str) -> anyhow::Result<(u16, Bytes)> {
        self.send(Method::GET, path_and_query, None).await
    }
}

/// reqwest behind the same calls, for the soak.
pub struct Reqwest<'a> {
    /// The shared client.
    pub http: &'a reqwest::Client,
    /// `http://host:port`.
    pub base: &'a str,
}

impl Driver for Reqwest<'_> {
    async fn post(&mut self, path: &str, body: String) -> anyhow::Result<(u16, Bytes)> {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await?;
        let status = resp.status().as_u16();
        Ok((status, resp.bytes().await?))
    }

    async fn get(&mut self, path_and_query: &str) -> anyhow::Result<(u16, Bytes)> {
        let resp = self.http.get(format!("{}{path_and_query}", self.base)).send().await?;
        let status = resp.status().as_u16();
        Ok((status, resp.bytes().await?))
    }
}
