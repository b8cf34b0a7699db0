//! [`HttpBroker`]: the [`Broker`] over the Queen HTTP API.
//!
//! Retry policy (queen2-wire.md section 0): a connection error or a 5xx is
//! sent again with exponential backoff, and a 503's `Retry-After` is honoured
//! (capped at [`RetryPolicy::max_backoff`]). A 4xx is returned at once, and a
//! 200 is an answer whatever its body says, so a business refusal never
//! reaches the retry loop. A timeout is not retried: the call may have run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use queen_wire::{DlqQuery, EphemeralPop, Json, PopRequest, ReplayTarget};
use reqwest::{Method, Url};

use crate::broker::{Broker, EphemeralVerb, Seek, StreamVerb};
use crate::error::{Error, Result};

/// When and how often a failed request is sent again.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Extra attempts after the first one (0 disables retries).
    pub max_retries: u32,
    /// The sleep before the first retry; it doubles after each one.
    pub initial_backoff: Duration,
    /// The longest sleep, for the doubling and for `Retry-After`.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// Three retries, sleeping 1 s, 2 s, 4 s (what the official clients do).
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        RetryPolicy { max_retries: 0, ..RetryPolicy::default() }
    }

    fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry.min(16)).unwrap_or(u32::MAX);
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }
}

/// Settings of an [`HttpBroker`].
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Base URLs of the brokers (`http://host:6632`); requests go round robin.
    pub urls: Vec<String>,
    /// Sent as `Authorization: Bearer <token>` when set.
    pub bearer_token: Option<String>,
    /// Timeout of one request (a long-poll pop gets its wait on top).
    pub timeout: Duration,
    /// Timeout of establishing a connection.
    pub connect_timeout: Duration,
    /// The retry policy.
    pub retry: RetryPolicy,
    /// Extra CA certificates (PEM) trusted for `https://` brokers, besides
    /// the system's; for a broker whose certificate a private CA signed.
    pub ca_certificates_pem: Vec<Vec<u8>>,
}

impl HttpConfig {
    /// One broker at `url`, with the defaults: 30 s timeout, 3 retries, no token.
    pub fn new(url: impl Into<String>) -> Self {
        HttpConfig {
            urls: vec![url.into()],
            bearer_token: None,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            ca_certificates_pem: Vec::new(),
        }
    }

    /// Several brokers, used round robin.
    pub fn many<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        HttpConfig { urls: urls.into_iter().map(Into::into).collect(), ..HttpConfig::new("") }
    }

    /// Sets the bearer token.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.bearer_token = Some(token.into());
        self
    }

    /// Sets the request timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the retry policy.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Trusts the CA certificate(s) in this PEM for `https://` brokers.
    pub fn ca_certificate_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_certificates_pem.push(pem.into());
        self
    }
}

/// A broker reached over HTTP.
#[derive(Debug)]
pub struct HttpBroker {
    client: reqwest::Client,
    bases: Vec<Url>,
    next: AtomicUsize,
    token: Option<String>,
    timeout: Duration,
    retry: RetryPolicy,
}

/// One request, before it is sent to a base URL.
struct Call<'a> {
    method: Method,
    path: &'a [&'a str],
    query: Vec<(&'static str, String)>,
    body: Option<String>,
    timeout: Duration,
}

impl HttpBroker {
    /// A broker at `url` with the default settings.
    pub fn new(url: &str) -> Result<Self> {
        Self::with_config(HttpConfig::new(url))
    }

    /// A broker (or several) with explicit settings.
    pub fn with_config(config: HttpConfig) -> Result<Self> {
        if config.urls.is_empty() {
            return Err(Error::Invalid("at least one broker URL is required".into()));
        }
        let mut bases = Vec::with_capacity(config.urls.len());
        for raw in &config.urls {
            let url = Url::parse(raw).map_err(|e| Error::Invalid(format!("broker URL {raw:?}: {e}")))?;
            if url.cannot_be_a_base() {
                return Err(Error::Invalid(format!("broker URL {raw:?} cannot be a base")));
            }
            bases.push(url);
        }
        let mut builder = reqwest::Client::builder().connect_timeout(config.connect_timeout);
        for pem in &config.ca_certificates_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| Error::Invalid(format!("CA certificate: {e}")))?;
            if certs.is_empty() {
                return Err(Error::Invalid("CA certificate: the PEM holds no certificate".into()));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder.build()?;
        Ok(HttpBroker {
            client,
            bases,
            next: AtomicUsize::new(0),
            token: config.bearer_token,
            timeout: config.timeout,
            retry: config.retry,
        })
    }

    /// The base URLs, in round-robin order.
    pub fn urls(&self) -> impl Iterator<Item = &str> {
        self.bases.iter().map(Url::as_str)
    }

    /// GETs any route of the HTTP API and answers its JSON body as text.
    ///
    /// For the read-only operator routes the [`Broker`] trait does not cover
    /// (they have no in-process twin), such as `["api", "v1", "status"]` or
    /// `["api", "v1", "resources", "queues"]`. `path` is a list of segments,
    /// each percent-encoded, so a queue name cannot change the route. The
    /// call goes through the same round robin, bearer token, timeout and
    /// retry policy as every other one; a non-2xx answer is [`Error::Status`].
    pub async fn get_json(&self, path: &[&str]) -> Result<Json> {
        self.json(self.call(Method::GET, path, None)).await
    }

    fn url(&self, path: &[&str], query: &[(&'static str, String)]) -> Url {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.bases.len();
        let mut url = self.bases[i].clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            // Percent-encodes every segment (queue names, lease ids, groups).
            segments.pop_if_empty().extend(path);
        }
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        url
    }

    /// Sends `call`, retrying per the policy; answers (status, body) of a 2xx.
    async fn send(&self, call: Call<'_>) -> Result<(u16, String)> {
        let mut retry = 0u32;
        loop {
            let url = self.url(call.path, &call.query);
            let mut req = self.client.request(call.method.clone(), url).timeout(call.timeout);
            if let Some(token) = &self.token {
                req = req.bearer_auth(token);
            }
            if let Some(body) = &call.body {
                req = req.header(reqwest::header::CONTENT_TYPE, "application/json").body(body.clone());
            }
            let can_retry = retry < self.retry.max_retries;
            let resp = match req.send().await {
                Ok(resp) => resp,
                Err(e) => {
                    let connection = e.is_connect() || (e.is_request() && !e.is_timeout());
                    if connection && can_retry {
                        let nap = self.retry.backoff(retry);
                        tracing::debug!(error = %e, ?nap, "connection error; retrying");
                        tokio::time::sleep(nap).await;
                        retry += 1;
                        continue;
                    }
                    return Err(Error::Http(e));
                }
            };
            let status = resp.status().as_u16();
            if status >= 500 && can_retry {
                let nap = match retry_after(&resp) {
                    Some(d) if status == 503 => d.min(self.retry.max_backoff),
                    _ => self.retry.backoff(retry),
                };
                tracing::debug!(status, ?nap, "server error; retrying");
                // Read the body so the connection can be reused.
                let _ = resp.bytes().await;
                tokio::time::sleep(nap).await;
                retry += 1;
                continue;
            }
            let text = resp.text().await?;
            if (200..300).contains(&status) {
                return Ok((status, text));
            }
            return Err(Error::from_status(status, &text));
        }
    }

    async fn json(&self, call: Call<'_>) -> Result<Json> {
        let (_, text) = self.send(call).await?;
        Ok(Json(text))
    }

    fn call<'a>(&self, method: Method, path: &'a [&'a str], body: Option<String>) -> Call<'a> {
        Call { method, path, query: Vec::new(), body, timeout: self.timeout }
    }
}

impl HttpBroker {
    /// `DELETE` on a consumer-group route.
    async fn delete_group(&self, path: &[&str], delete_metadata: bool) -> Result<Json> {
        let query = vec![("deleteMetadata", bool_text(delete_metadata))];
        self.json(Call { method: Method::DELETE, path, query, body: None, timeout: self.timeout }).await
    }

    /// Deletes `group` on every queue it is registered on, one
    /// `DELETE /consumer-groups/{group}/queues/{queue}` each, for the group
    /// names whose all-queues route the HTTP API cannot address. The end
    /// state and the answer's counts are the engine's for all queues at
    /// once; unlike it, the queues are not done in one transaction.
    async fn delete_group_queue_by_queue(&self, group: &str, delete_metadata: bool) -> Result<Json> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Registered {
            queue_name: String,
        }
        let all = self.json(self.call(Method::GET, &["api", "v1", "consumer-groups"], None)).await?;
        let mut queues: Vec<Registered> =
            only_group(&all, group)?.decode().map_err(|e| Error::decode("consumer groups answer", e))?;
        queues.dedup_by(|a, b| a.queue_name == b.queue_name);
        let (mut partitions, mut metadata) = (0u64, false);
        for q in &queues {
            let path = ["api", "v1", "consumer-groups", group, "queues", &q.queue_name];
            let answer = self.delete_group(&path, delete_metadata).await?;
            let d: queen_wire::GroupDeleted =
                answer.decode().map_err(|e| Error::decode("delete consumer group answer", e))?;
            partitions += d.deleted_partitions;
            metadata |= d.metadata_deleted;
        }
        let answer = queen_wire::GroupDeleted {
            success: true,
            consumer_group: group.to_owned(),
            queue_name: None,
            deleted_partitions: partitions,
            metadata_deleted: metadata,
        };
        serde_json::to_string(&answer).map(Json).map_err(|e| Error::decode("delete consumer group answer", e))
    }
}

/// `Retry-After` in seconds (the only form the broker sends).
fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    let value = resp.headers().get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

fn bool_text(b: bool) -> String {
    if b { "true" } else { "false" }.to_owned()
}

/// The entries of a consumer-groups list whose `name` is `group`, as a JSON
/// array; each entry is kept byte for byte.
fn only_group(list: &Json, group: &str) -> Result<Json> {
    #[derive(serde::Deserialize)]
    struct Named {
        #[serde(default)]
        name: String,
    }
    let all: Vec<Box<serde_json::value::RawValue>> =
        list.decode().map_err(|e| Error::decode("consumer groups answer", e))?;
    let mut kept = Vec::new();
    for entry in &all {
        let named: Named =
            serde_json::from_str(entry.get()).map_err(|e| Error::decode("consumer group entry", e))?;
        if named.name == group {
            kept.push(entry.get());
        }
    }
    Ok(Json(format!("[{}]", kept.join(","))))
}

impl Broker for HttpBroker {
    async fn configure(&self, body: &str) -> Result<Json> {
        self.json(self.call(Method::POST, &["api", "v1", "configure"], Some(body.to_owned()))).await
    }

    async fn push(&self, items: &str) -> Result<Json> {
        let body = format!("{{\"items\":{items}}}");
        self.json(self.call(Method::POST, &["api", "v1", "push"], Some(body))).await
    }

    async fn pop(&self, req: &PopRequest, wait: Option<Duration>) -> Result<Option<Json>> {
        let path: Vec<&str> = match &req.partition {
            _ if req.is_by_tag() => vec!["api", "v1", "pop"],
            Some(p) => vec!["api", "v1", "pop", "queue", &req.queue, "partition", p],
            None => vec!["api", "v1", "pop", "queue", &req.queue],
        };
        let wait_ms = wait.map(|d| d.as_millis().min(u64::MAX as u128) as u64);
        let mut query = vec![
            ("batch", req.batch.to_string()),
            ("wait", bool_text(wait_ms.is_some())),
            ("timeout", wait_ms.unwrap_or(0).to_string()),
        ];
        if let Some(g) = &req.consumer_group {
            query.push(("consumerGroup", g.clone()));
        }
        if let Some(n) = &req.namespace {
            query.push(("namespace", n.clone()));
        }
        if let Some(t) = &req.task {
            query.push(("task", t.clone()));
        }
        if req.partitions > 1 {
            query.push(("partitions", req.partitions.to_string()));
        }
        if let Some(s) = req.lease_seconds {
            query.push(("leaseSeconds", s.to_string()));
        }
        if req.auto_ack {
            query.push(("autoAck", "true".into()));
        }
        if let Some(m) = &req.subscription_mode {
            query.push(("subscriptionMode", m.clone()));
        }
        if let Some(f) = &req.subscription_from {
            query.push(("subscriptionFrom", f.clone()));
        }
        let timeout = self.timeout + wait.unwrap_or_default();
        let call = Call { method: Method::GET, path: &path, query, body: None, timeout };
        let (status, text) = self.send(call).await?;
        Ok(if status == 204 || text.trim().is_empty() { None } else { Some(Json(text)) })
    }

    async fn ack(&self, items: &str, consumer_group: Option<&str>) -> Result<Json> {
        let group = serde_json::to_string(&consumer_group).map_err(|e| Error::decode("consumer group", e))?;
        let body = format!("{{\"acknowledgments\":{items},\"consumerGroup\":{group}}}");
        self.json(self.call(Method::POST, &["api", "v1", "ack", "batch"], Some(body))).await
    }

    async fn extend_lease(&self, lease_id: &str, seconds: u32) -> Result<Json> {
        let body = format!("{{\"seconds\":{seconds}}}");
        self.json(self.call(Method::POST, &["api", "v1", "lease", lease_id, "extend"], Some(body))).await
    }

    async fn transaction(&self, body: &str) -> Result<Json> {
        self.json(self.call(Method::POST, &["api", "v1", "transaction"], Some(body.to_owned()))).await
    }

    async fn dlq(&self, q: &DlqQuery) -> Result<Json> {
        let mut query = vec![("limit", q.limit.to_string()), ("offset", q.offset.to_string())];
        let opt = [
            ("queue", &q.queue),
            ("consumerGroup", &q.consumer_group),
            ("partition", &q.partition),
            ("from", &q.from),
            ("to", &q.to),
        ];
        for (k, v) in opt {
            if let Some(v) = v {
                query.push((k, v.clone()));
            }
        }
        let path = ["api", "v1", "dlq"];
        self.json(Call { method: Method::GET, path: &path, query, body: None, timeout: self.timeout }).await
    }

    async fn dlq_replay(&self, dlq_id: i64, target: &ReplayTarget) -> Result<Json> {
        let body = serde_json::json!({"queue": target.queue, "partition": target.partition}).to_string();
        let id = dlq_id.to_string();
        self.json(self.call(Method::POST, &["api", "v1", "dlq", &id, "replay"], Some(body))).await
    }

    async fn dlq_purge(&self, queue: &str, consumer_group: Option<&str>) -> Result<Json> {
        let mut query = vec![("queue", queue.to_owned())];
        if let Some(g) = consumer_group {
            query.push(("consumerGroup", g.to_owned()));
        }
        let path = ["api", "v1", "dlq"];
        self.json(Call { method: Method::DELETE, path: &path, query, body: None, timeout: self.timeout })
            .await
    }

    async fn delete_queue(&self, queue: &str) -> Result<Json> {
        self.json(self.call(Method::DELETE, &["api", "v1", "resources", "queues", queue], None)).await
    }

    async fn consumer_groups(&self, group: Option<&str>) -> Result<Json> {
        match group {
            None => self.json(self.call(Method::GET, &["api", "v1", "consumer-groups"], None)).await,
            // `/consumer-groups/lagging` is a route of its own, and an empty
            // segment names none: those two names are read from the whole
            // list, filtered as the engine filters by name.
            Some(g @ ("lagging" | "")) => {
                let all = self.json(self.call(Method::GET, &["api", "v1", "consumer-groups"], None)).await?;
                only_group(&all, g)
            }
            Some(g) => self.json(self.call(Method::GET, &["api", "v1", "consumer-groups", g], None)).await,
        }
    }

    async fn lagging_groups(&self, min_lag_seconds: u32) -> Result<Json> {
        let path = ["api", "v1", "consumer-groups", "lagging"];
        let query = vec![("minLagSeconds", min_lag_seconds.min(i32::MAX as u32).to_string())];
        self.json(Call { method: Method::GET, path: &path, query, body: None, timeout: self.timeout }).await
    }

    async fn delete_consumer_group(
        &self,
        group: &str,
        queue: Option<&str>,
        delete_metadata: bool,
    ) -> Result<Json> {
        match queue {
            Some(q) => {
                self.delete_group(&["api", "v1", "consumer-groups", group, "queues", q], delete_metadata)
                    .await
            }
            // `DELETE /consumer-groups/lagging` meets the GET-only route of
            // that name (405), and an empty segment names no route (404).
            None if matches!(group, "lagging" | "") => {
                self.delete_group_queue_by_queue(group, delete_metadata).await
            }
            None => self.delete_group(&["api", "v1", "consumer-groups", group], delete_metadata).await,
        }
    }

    async fn update_subscription(&self, group: &str, timestamp: &str) -> Result<Json> {
        let body = serde_json::json!({ "subscriptionTimestamp": timestamp }).to_string();
        let path = ["api", "v1", "consumer-groups", group, "subscription"];
        self.json(self.call(Method::POST, &path, Some(body))).await
    }

    async fn seek(&self, group: &str, queue: &str, partition: Option<&str>, to: &Seek) -> Result<Json> {
        let body = match to.parts() {
            (true, _) => serde_json::json!({ "toEnd": true }),
            (false, ts) => serde_json::json!({ "timestamp": ts }),
        }
        .to_string();
        let queue_path = ["api", "v1", "consumer-groups", group, "queues", queue];
        let path: Vec<&str> = match partition {
            None => queue_path.iter().copied().chain(["seek"]).collect(),
            Some(p) => queue_path.iter().copied().chain(["partitions", p, "seek"]).collect(),
        };
        self.json(self.call(Method::POST, &path, Some(body))).await
    }

    async fn kv(&self, body: &str) -> Result<Json> {
        self.json(self.call(Method::POST, &["api", "v1", "kv"], Some(body.to_owned()))).await
    }

    async fn kv_namespaces(&self) -> Result<Json> {
        self.json(self.call(Method::GET, &["api", "v1", "resources", "kv", "namespaces"], None)).await
    }

    async fn kv_list(&self, body: &str) -> Result<Json> {
        self.json(self.call(Method::POST, &["api", "v1", "resources", "kv", "list"], Some(body.to_owned())))
            .await
    }

    async fn locks(&self, body: &str) -> Result<Json> {
        self.json(self.call(Method::POST, &["api", "v1", "locks"], Some(body.to_owned()))).await
    }

    async fn timers(&self, body: &str) -> Result<Json> {
        self.json(self.call(Method::POST, &["api", "v1", "timers"], Some(body.to_owned()))).await
    }

    async fn timer_cancel(&self, queue: &str, key: &str, txn: Option<&str>) -> Result<Json> {
        let path = ["api", "v1", "timers", queue, key];
        let query = txn.map(|t| vec![("txn", t.to_owned())]).unwrap_or_default();
        self.json(Call { method: Method::DELETE, path: &path, query, body: None, timeout: self.timeout })
            .await
    }

    async fn timer_peek(&self, queue: &str, key: &str) -> Result<Json> {
        self.json(self.call(Method::GET, &["api", "v1", "timers", queue, key], None)).await
    }

    async fn timer_list(&self, queue: &str, after: Option<&str>, limit: Option<u32>) -> Result<Json> {
        let path = ["api", "v1", "timers", queue];
        let mut query = Vec::new();
        if let Some(a) = after {
            query.push(("after", a.to_owned()));
        }
        if let Some(l) = limit {
            query.push(("limit", l.to_string()));
        }
        self.json(Call { method: Method::GET, path: &path, query, body: None, timeout: self.timeout }).await
    }

    async fn fetch(&self, body: &str) -> Result<Json> {
        self.json(self.call(Method::POST, &["api", "v1", "fetch"], Some(body.to_owned()))).await
    }

    async fn partitions_changed(&self, body: &str) -> Result<Json> {
        self.json(self.call(Method::POST, &["api", "v1", "partitions", "changed"], Some(body.to_owned())))
            .await
    }

    async fn ephemeral(&self, verb: EphemeralVerb, body: &str) -> Result<Json> {
        let path = verb.wire();
        self.json(self.call(Method::POST, &path, Some(body.to_owned()))).await
    }

    async fn ephemeral_pop(&self, req: &EphemeralPop) -> Result<Json> {
        let path = ["api", "v1", "ephemeral", "pop"];
        let mut query = vec![("queue", req.queue.clone()), ("batch", req.batch.to_string())];
        if let Some(p) = &req.partition {
            query.push(("partition", p.clone()));
        }
        if let Some(g) = &req.group {
            query.push(("group", g.clone()));
        }
        if req.auto_ack {
            query.push(("autoAck", "true".into()));
        }
        if let Some(w) = req.wait {
            query.push(("wait", "true".into()));
            query.push(("timeout", w.as_millis().to_string()));
        }
        let timeout = self.timeout + req.wait.unwrap_or_default();
        self.json(Call { method: Method::GET, path: &path, query, body: None, timeout }).await
    }

    async fn ephemeral_delete(&self, queue: &str) -> Result<Json> {
        self.json(self.call(Method::DELETE, &["api", "v1", "ephemeral", "queue", queue], None)).await
    }

    async fn ephemeral_depth(&self, queue: &str) -> Result<Json> {
        self.json(self.call(Method::GET, &["api", "v1", "ephemeral", "queues", queue, "depth"], None)).await
    }

    async fn streams(&self, verb: StreamVerb, body: &str) -> Result<Json> {
        self.json(self.call(Method::POST, verb.path(), Some(body.to_owned()))).await
    }
}
