//! How the bench sends its HTTP requests. The sweep drives the broker the
//! way pgbench drives PostgreSQL: one kept-alive connection per client and
//! nothing else on the path (`LeanConn`, hyper's HTTP/1 connection API: no
//! pool, no URL parsing, no redirect or proxy logic). A general client
//! (reqwest) cost the bench process about 20% of the machine's two cores at
//! 7k requests/s, CPU the broker and PostgreSQL then lacked; pgbench, the
//! other side of every ratio, is lean C. The soak keeps reqwest
//! (`Reqwest`), since it measures the broker over time, not its ceiling.

use std::future::Future;
use std::pin::Pin;

use anyhow::{bail, Context};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::{Connection, SendRequest};
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
///
/// The connection is driven inside the task that sends on it (no spawned
/// connection task), as pgbench drives its sockets in its own loop: a
/// spawned task would add a task wake-up, often on another thread, to both
/// ends of every request.
pub struct LeanConn {
    authority: String,
    open: Option<Open>,
}

struct Open {
    sender: SendRequest<Full<Bytes>>,
    conn: Pin<Box<Connection<TokioIo<TcpStream>, Full<Bytes>>>>,
}

impl LeanConn {
    /// A connection to `base` (`http://host:port`), opened on first use.
    pub fn new(base: &str) -> anyhow::Result<Self> {
        let Some(authority) = base.strip_prefix("http://") else {
            bail!("the bench drives plain http:// brokers, not {base}");
        };
        Ok(LeanConn { authority: authority.trim_end_matches('/').to_owned(), open: None })
    }

    async fn connect(&self) -> anyhow::Result<Open> {
        let stream = TcpStream::connect(&self.authority)
            .await
            .with_context(|| format!("connecting to {}", self.authority))?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        Ok(Open { sender, conn: Box::pin(conn) })
    }

    async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> anyhow::Result<(u16, Bytes)> {
        let mut open = match self.open.take() {
            Some(o) if !o.sender.is_closed() => o,
            _ => self.connect().await?,
        };
        let mut req = Request::builder().method(method).uri(path).header(header::HOST, &self.authority);
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let req = req.body(Full::new(Bytes::from(body.unwrap_or_default())))?;
        let Open { sender, conn } = &mut open;
        let exchange = async {
            sender.ready().await?;
            let resp = sender.send_request(req).await?;
            let status = resp.status().as_u16();
            let bytes = resp.into_body().collect().await?.to_bytes();
            Ok::<_, anyhow::Error>((status, bytes))
        };
        // The exchange is polled first; the connection makes its progress.
        // The connection ending first (the broker closed it) is an error.
        let answer = tokio::select! {
            biased;
            answer = exchange => answer?,
            ended = conn.as_mut() => {
                ended?;
                bail!("the broker closed the connection");
            }
        };
        // Kept only after a whole exchange: an error drops the connection.
        self.open = Some(open);
        Ok(answer)
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
