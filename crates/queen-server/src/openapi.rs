//! The OpenAPI document of the HTTP API.
//!
//! Routes are registered through `utoipa_axum::routes!`, which takes the
//! path, method and parameters from each handler's `#[utoipa::path]`
//! attribute and mounts the handler at exactly that path: a route cannot be
//! served without being documented, nor documented at a path it is not
//! served on. The types below describe the wire for the document only; the
//! handlers read raw JSON so that payloads keep every digit, and the SQL
//! functions own validation.

use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

/// The body of every broker error (4xx and 5xx).
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct ErrorBody {
    /// A readable message; for KV errors, the machine code itself.
    error: String,
    /// The machine code clients branch on (`bad_request`, `not_found`, `payload_too_large`,
    /// `unavailable`, `paused`, `internal`).
    code: Option<String>,
    /// The offending field or parameter, on a 400.
    field: Option<String>,
    detail: Option<String>,
}

/// The body of a KV error; `error` is the code and `reason` the closed reason.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct KvErrorBody {
    /// `kv_bad_request`, `payload_too_large`, `kv_unavailable` or `kv_error`.
    error: String,
    /// For example `kv_expiry_not_specified`, `kv_key_too_long`, `kv_timeout`.
    reason: String,
    detail: Option<String>,
}

/// `POST /api/v1/configure`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct ConfigureRequest {
    queue: String,
    namespace: Option<String>,
    task: Option<String>,
    /// camelCase queue options, merged into the stored ones (`"mode": "replace"` resets):
    /// leaseTime, retryLimit, priority, delayedProcessing, windowBuffer, maxSize,
    /// deadLetterQueue, dlqAfterMaxRetries, dedupWindowSeconds, minPopWaitTime (ms, clamped to
    /// 0..60000), retentionSinkHold and retentionSinkHoldMaxSeconds (stored, not acted on), ...
    #[schema(value_type = Object)]
    options: Option<Value>,
}

/// One message to push.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct PushItem {
    queue: String,
    /// `Default` when absent.
    partition: Option<String>,
    /// Any JSON value, kept digit for digit.
    payload: Option<Value>,
    /// Deduplicated per (queue, partition) inside the queue's dedup window.
    transactionId: Option<String>,
    traceId: Option<String>,
    namespace: Option<String>,
    task: Option<String>,
}

/// `POST /api/v1/push`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct PushRequest {
    items: Vec<PushItem>,
}

/// One settled message (an offset commit inside the leased batch).
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct AckItem {
    transactionId: String,
    partitionId: String,
    /// `completed`, `failed` (counts a retry), `retry` (does not) or `dlq`.
    status: Option<String>,
    error: Option<String>,
    leaseId: Option<String>,
    consumerGroup: Option<String>,
}

/// `POST /api/v1/ack/batch`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct BatchAckRequest {
    acknowledgments: Vec<AckItem>,
    consumerGroup: Option<String>,
}

/// `POST /api/v1/lease/{leaseId}/extend`; an empty body extends by 60 s.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct ExtendRequest {
    #[schema(minimum = 1, maximum = 604800)]
    seconds: Option<i64>,
}

/// One KV operation. Writes carry exactly one expiry: `ttlSeconds` or `forever: true`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct KvOperation {
    /// `get`, `getMany`, `getPrefix`, `put`, `putIfAbsent`, `delete`, `check`, `incr`.
    op: String,
    ns: String,
    key: Option<String>,
    keys: Option<Vec<String>>,
    prefix: Option<String>,
    after: Option<String>,
    limit: Option<i64>,
    keysOnly: Option<bool>,
    /// Any JSON value (`null` is a value).
    value: Option<Value>,
    ttlSeconds: Option<i64>,
    forever: Option<bool>,
    /// The version the key must have now; 0 means "must not exist".
    expect: Option<i64>,
    /// A lost precondition rolls the whole call back and answers `kv_precondition`.
    required: Option<bool>,
    /// A JSON number of any size (incr).
    #[schema(value_type = Option<f64>)]
    delta: Option<Value>,
    #[schema(value_type = Option<f64>)]
    min: Option<Value>,
    #[schema(value_type = Option<f64>)]
    max: Option<Value>,
}

/// `POST /api/v1/kv`: one PostgreSQL transaction per call.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct KvRequest {
    operations: Vec<KvOperation>,
}

/// One lock operation: `acquire`, `renew`, `release` or `get`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct LockOperation {
    /// `acquire`, `renew`, `release` or `get`.
    op: String,
    /// At most 256 bytes, no control characters, no `#`.
    name: String,
    /// acquire, renew: the lifetime in seconds (there is no forever).
    ttlSeconds: Option<i64>,
    /// acquire, renew: the holder (minted by the broker when absent).
    owner: Option<String>,
    /// acquire: permits of a semaphore, 1 to 1024 (default 1).
    limit: Option<i64>,
    /// renew, release: the permit's token.
    token: Option<i64>,
    /// renew, release: the permit's slot.
    slot: Option<i64>,
}

/// `POST /api/v1/locks`: one result per op; every verdict is a 200.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct LocksRequest {
    operations: Vec<LockOperation>,
}

/// One partition to read by offset.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct FetchEntry {
    queue: String,
    /// Default `Default`.
    partition: Option<String>,
    /// The first offset to read (from 0, in push order).
    offset: i64,
    /// Byte budget of this entry's records.
    maxBytes: Option<i64>,
}

/// `POST /api/v1/fetch`: up to 1024 entries; no lease taken, no cursor moved.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct FetchRequest {
    entries: Vec<FetchEntry>,
    /// Byte budget of the whole call (default 8 MiB, at most 64 MiB).
    maxBytes: Option<i64>,
}

/// One page request of partitions/changed.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct ChangedEntry {
    queue: String,
    /// Partitions per page (clamped to 1..1000).
    limit: Option<i64>,
    /// Only partitions written at or after this ISO-8601 time.
    since: Option<String>,
    /// The `next` of the previous page.
    after: Option<String>,
}

/// `POST /api/v1/partitions/changed`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct ChangedRequest {
    entries: Vec<ChangedEntry>,
}

/// One timer operation: `schedule`, `reschedule` or `cancel`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct TimerOperation {
    /// `schedule`, `reschedule` (the same upsert) or `cancel`.
    op: String,
    queue: String,
    timerKey: String,
    /// Base64 of the JSON document the fired message carries.
    payload: Option<String>,
    /// Milliseconds from now; negative fires on the first cycle.
    delayMs: Option<i64>,
    /// The fired message's transactionId (minted when absent).
    txn: Option<String>,
    /// Default `Default`.
    partition: Option<String>,
}

/// `POST /api/v1/timers`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct TimersRequest {
    operations: Vec<TimerOperation>,
}

/// The body of the KV path route `PUT`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct KvPutBody {
    value: Value,
    ttlSeconds: Option<i64>,
    forever: Option<bool>,
    expect: Option<i64>,
    required: Option<bool>,
}

/// `POST /api/v1/resources/kv/list`: one page of one namespace's keys.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct KvListBody {
    /// The namespace browsed (required).
    namespace: String,
    /// Only keys that start with it; empty or absent: every key.
    prefix: Option<String>,
    /// A key: the page starts strictly after it (the previous page's `nextCursor`).
    cursor: Option<String>,
    /// Keys of the page, at least 1 (default 100; above 1000 is 1000).
    limit: Option<u32>,
}

/// One key of a KV browser page.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct KvListedKey {
    key: String,
    value: Value,
    version: i64,
    /// Null for a key that lives until deleted.
    expiresAt: Option<String>,
    updatedAt: String,
    /// Past its expiry but not swept yet: every KV operation treats it as absent.
    expired: bool,
}

/// The answer of `POST /api/v1/resources/kv/list`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct KvListAnswer {
    namespace: String,
    /// In key (byte) order.
    keys: Vec<KvListedKey>,
    /// The `cursor` of the next page; null on the last page.
    nextCursor: Option<String>,
}

/// One namespace of `GET /api/v1/resources/kv/namespaces`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct KvNamespaceCount {
    namespace: String,
    /// Live keys.
    keys: i64,
    /// Rows past their expiry that the sweeper has not deleted yet.
    expired: i64,
}

/// The answer of `GET /api/v1/resources/kv/namespaces`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct KvNamespacesAnswer {
    /// Every namespace, by name.
    namespaces: Vec<KvNamespaceCount>,
}

/// The optional body of the KV path route `DELETE`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct KvDeleteBody {
    expect: Option<i64>,
    required: Option<bool>,
}

/// One push or ack of a transaction bundle.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct TransactionOperation {
    /// `push` or `ack`.
    r#type: String,
    /// Push: the items.
    items: Option<Vec<PushItem>>,
    transactionId: Option<String>,
    partitionId: Option<String>,
    status: Option<String>,
    leaseId: Option<String>,
    consumerGroup: Option<String>,
}

/// `POST /api/v1/transaction`: pushes, acks and KV operations in one commit.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct TransactionRequest {
    operations: Vec<TransactionOperation>,
    requiredLeases: Option<Vec<String>>,
    /// At most 64; no getPrefix; one write per key.
    kv: Option<Vec<KvOperation>>,
}

/// `POST /api/v1/consumer-groups/{group}/subscription`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct SubscriptionRequest {
    /// ISO 8601.
    subscriptionTimestamp: String,
}

/// `POST /api/v1/consumer-groups/{group}/queues/{queue}/seek`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct SeekRequest {
    toEnd: Option<bool>,
    /// ISO 8601.
    timestamp: Option<String>,
}

/// `POST /api/v1/system/maintenance[/pop]`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct MaintenanceSwitch {
    enabled: bool,
}

/// Query of the pop routes.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct PopParams {
    /// Message budget of the call (default 100).
    #[param(minimum = 1, maximum = 10000)]
    batch: Option<i64>,
    /// Long poll until a message arrives or `timeout` passes.
    wait: Option<bool>,
    /// Milliseconds (default 30000).
    #[param(minimum = 0)]
    timeout: Option<i64>,
    consumerGroup: Option<String>,
    /// `all` or `new` (`new-only`), for a group's first pop.
    subscriptionMode: Option<String>,
    /// ISO 8601 or `now`, for a group's first pop.
    subscriptionFrom: Option<String>,
    /// Commit at delivery.
    autoAck: Option<bool>,
    /// How many partitions one call may lease.
    #[param(minimum = 1, maximum = 10000)]
    partitions: Option<i64>,
    #[param(minimum = 1, maximum = 604800)]
    leaseSeconds: Option<i64>,
}

/// Query of `GET /api/v1/dlq`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct DlqParams {
    queue: Option<String>,
    consumerGroup: Option<String>,
    partition: Option<String>,
    /// ISO 8601.
    from: Option<String>,
    /// ISO 8601.
    to: Option<String>,
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<i64>,
    #[param(minimum = 0)]
    offset: Option<i64>,
}

/// Query of `DELETE /api/v1/dlq`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct DlqPurgeParams {
    /// Required: the queue whose dead-letter records go.
    queue: String,
    /// Only this group's records.
    consumerGroup: Option<String>,
}

/// Body of `POST /api/v1/dlq/{id}/replay` (optional).
#[derive(ToSchema)]
#[allow(dead_code)]
pub(crate) struct DlqReplayRequest {
    /// Destination queue (default: the record's own).
    queue: Option<String>,
    /// Destination partition (default: the record's partition name).
    partition: Option<String>,
}

/// Answer of `POST /api/v1/dlq/{id}/replay`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct DlqReplayAnswer {
    /// `moved` or `duplicate`.
    result: String,
    consumerGroup: String,
    dlqId: i64,
    originalTransactionId: String,
    /// The transaction id of the replayed message: `dlq:<dlqId>`.
    replayedAs: String,
    queue: String,
    partition: String,
    /// The new message's id (moved), or the earlier one's (duplicate).
    messageId: Option<String>,
}

/// Answer of `DELETE /api/v1/dlq`.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct DlqPurgeAnswer {
    deleted: i64,
    queue: String,
    consumerGroup: Option<String>,
}

/// Query of `GET /api/v1/messages`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct MessagesParams {
    queue: Option<String>,
    partition: Option<String>,
    /// `pending`, `processing`, `completed` or `dead_letter`.
    status: Option<String>,
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<i64>,
    #[param(minimum = 0)]
    offset: Option<i64>,
}

/// Query of the consumer-group delete routes.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct DeleteGroupParams {
    /// Also forget the group's registration (default true).
    deleteMetadata: Option<bool>,
}

/// Query of `GET /api/v1/consumer-groups`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct GroupsParams {
    /// Only this group (any name, `lagging` too: its path is a route of its own).
    group: Option<String>,
}

/// Query of `GET /api/v1/consumer-groups/lagging`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct LaggingParams {
    #[param(minimum = 0)]
    minLagSeconds: Option<i64>,
}

/// Query of `GET /api/v1/resources/partitions`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct PartitionsParams {
    queue: Option<String>,
}

/// Query of `GET /api/v1/resources/queues/{queue}/depth`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct DepthParams {
    /// A consumer group: its own backlog. Absent: queue mode's.
    group: Option<String>,
}

/// Query of `GET /api/v1/status/analytics`.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct AnalyticsParams {
    /// `minute`, `hour` (default) or `day`.
    interval: Option<String>,
    /// ISO 8601; default 24 h before `to`.
    from: Option<String>,
    /// ISO 8601; default now.
    to: Option<String>,
    queue: Option<String>,
}

/// A page of a listing.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub(crate) struct PageParams {
    #[param(minimum = 1, maximum = 10000)]
    limit: Option<i64>,
    #[param(minimum = 0)]
    offset: Option<i64>,
}

/// `POST /api/v1/traces`: a timeline entry on a message.
#[derive(ToSchema)]
#[allow(dead_code, non_snake_case)]
pub(crate) struct TraceRequest {
    transactionId: String,
    /// UUID.
    partitionId: String,
    consumerGroup: Option<String>,
    /// `info` by default.
    eventType: Option<String>,
    /// Any JSON value but null.
    data: Value,
    /// A name or a list of names to find the event by.
    #[schema(value_type = Option<Vec<String>>)]
    traceNames: Option<Value>,
}

/// Renames axum's catch-all `{*key}` to the OpenAPI form `{key}`.
pub(crate) fn finish(mut doc: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    let paths = std::mem::take(&mut doc.paths.paths);
    doc.paths.paths = paths.into_iter().map(|(path, item)| (path.replace("{*", "{"), item)).collect();
    doc.info.title = "queen-rs".into();
    doc.info.description = Some(
        "The Queen MQ HTTP API on PostgreSQL, with transactional KV state. \
         Business refusals are 200 with success false or a kv_precondition body; \
         every 4xx and 5xx carries an error code. Authentication is off unless the broker \
         is given tokens or JWT keys; then every route but GET /health needs \
         Authorization: Bearer (401 unauthorized without, 403 forbidden for a read token \
         on a route that changes state)."
            .into(),
    );
    // Declared optional (`{}` is an alternative): a broker without auth
    // configured serves every route without credentials.
    use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
    let scheme = HttpBuilder::new()
        .scheme(HttpAuthScheme::Bearer)
        .bearer_format("static token or JWT (HS256, HS384, HS512, RS256, EdDSA, JWKS)")
        .description(Some("A read token may call GET routes but pop; everything else needs a write token."))
        .build();
    doc.components
        .get_or_insert_with(Default::default)
        .add_security_scheme("bearer", SecurityScheme::Http(scheme));
    doc.security =
        Some(vec![SecurityRequirement::new("bearer", Vec::<String>::new()), SecurityRequirement::default()]);
    doc
}
