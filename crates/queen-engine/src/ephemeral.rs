//! Ephemeral queues (`/api/v1/ephemeral/*`): queues held in one broker's
//! memory, for traffic that must be fast and may be lost (presence,
//! request/reply inboxes, live fan-out). Their contents survive nothing: a
//! restart, a crash or an ownership move empties them, by design. What
//! PostgreSQL keeps is which broker owns each queue and the declared
//! configuration (`queen.ephemeral_queues`), so a queue comes back
//! configured and empty, and a broker that does not own a queue answers
//! 421 `ephemeral_not_owner` naming the owner's URL instead of serving it.
//!
//! One owner at a time: ownership is a lease fenced by an epoch. An owner
//! serves a queue only while its last renewal that succeeded was sent less
//! than [`OWNER_FENCE`] ago (half the takeover time, on its own monotonic
//! clock), so it stops before another broker may take over; a takeover
//! bumps the epoch, and a renewal names the epoch it holds, so a late one
//! renews nothing (`queen.ephemeral_claim`, `queen.ephemeral_renew`).
//!
//! Semantics follow the Queen 2.x client: every group has its own cursor
//! over a partition's ring (fan-out), members of one group compete, no group
//! is queue mode; leases are per message; `attempts` counts deliveries and a
//! message is dropped after `retryLimit` of them; `autoAck` commits at
//! delivery. Memory is bounded per queue (`maxBytes`, `maxLength`, then 429
//! `queue_full` or `dropOldest`) and per broker (503).
//!
//! This is the one place where broker memory holds messages; nothing else
//! in the engine may.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::{watch, Notify};
use uuid::Uuid;

use crate::wire::{self, Kind};
use crate::{Engine, EngineError, Json};

/// Largest `maxBytes` (payload bytes held by one queue); larger asks are clamped.
pub const MAX_QUEUE_BYTES: u64 = 64 * 1024 * 1024;
/// Largest `maxLength`; larger asks are clamped.
pub const MAX_QUEUE_LENGTH: u64 = 1_000_000;
/// Payload bytes all ephemeral queues of one broker may hold (then 503).
pub const BROKER_BYTES: u64 = 256 * 1024 * 1024;
/// Messages in one push, acks in one call.
pub const MAX_ITEMS: usize = 10_000;
/// A broker whose heartbeat is older than this loses its queues to the next caller.
const OWNER_STALE_SECONDS: i32 = 10;
/// An owner stops serving a queue this long after sending its last renewal
/// that succeeded: half the takeover time, so it has stopped before anyone
/// may take over, whatever happened to its heartbeats.
const OWNER_FENCE: Duration = Duration::from_secs(OWNER_STALE_SECONDS as u64 / 2);
/// Renewals: two may fail in a row before the fence is reached.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// After a failed renewal, the next try comes sooner.
const HEARTBEAT_RETRY: Duration = Duration::from_millis(500);
const SWEEP_EVERY: Duration = Duration::from_millis(250);
/// An implicit queue that is empty and untouched this long is forgotten.
const IDLE_FORGET: Duration = Duration::from_secs(300);
/// How long a non-owner remembers who the owner is.
const OWNER_CACHE: Duration = Duration::from_secs(2);
const SEQ_STRIDE: u64 = 1 << 40;

/// The options of an ephemeral queue, as configured (defaults otherwise).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EphemeralConfig {
    /// Payload bytes the queue may hold.
    pub max_bytes: u64,
    /// Messages the queue may hold.
    pub max_length: u64,
    /// When full: evict the oldest message of the pushed partition instead of refusing.
    pub drop_oldest: bool,
    /// Undelivered messages older than this are dropped (0: never).
    pub ttl_seconds: u64,
    /// How long a popped message is leased.
    pub lease_seconds: u64,
    /// Deliveries before a message is dropped.
    pub retry_limit: u32,
    /// A waiting pop holds out for this many messages ...
    pub window_count: u64,
    /// ... or this many milliseconds after the first became available (0: off).
    pub window_ms: u64,
}

impl Default for EphemeralConfig {
    fn default() -> Self {
        EphemeralConfig {
            max_bytes: 16 * 1024 * 1024,
            max_length: 10_000,
            drop_oldest: false,
            ttl_seconds: 0,
            lease_seconds: 30,
            retry_limit: 5,
            window_count: 0,
            window_ms: 0,
        }
    }
}

impl EphemeralConfig {
    fn to_json(&self) -> Value {
        json!({
            "maxBytes": self.max_bytes, "maxLength": self.max_length,
            "policy": if self.drop_oldest { "dropOldest" } else { "reject" },
            "ttlSeconds": self.ttl_seconds, "leaseSeconds": self.lease_seconds,
            "retryLimit": self.retry_limit,
            "windowBuffer": if self.window_ms > 0 || self.window_count > 0 {
                json!({"ms": self.window_ms, "count": self.window_count})
            } else {
                Value::Null
            },
        })
    }

    /// Decodes `options` (an object or null) over the defaults.
    fn decode(raw: Option<&RawValue>) -> Result<Self, EngineError> {
        let mut c = EphemeralConfig::default();
        let Some(raw) = raw.filter(|r| wire::kind(r) != Kind::Null) else { return Ok(c) };
        let f = wire::fields(raw).ok_or_else(|| bad("options must be an object"))?;
        for (key, v) in &f {
            let v: &RawValue = v;
            match key.as_str() {
                "maxBytes" => c.max_bytes = count(key, v, 1, u64::MAX)?.min(MAX_QUEUE_BYTES),
                "maxLength" => c.max_length = count(key, v, 1, u64::MAX)?.min(MAX_QUEUE_LENGTH),
                "ttlSeconds" => c.ttl_seconds = count(key, v, 0, 365 * 86_400)?,
                "leaseSeconds" => c.lease_seconds = count(key, v, 1, 86_400)?,
                "retryLimit" => c.retry_limit = count(key, v, 0, 1000)? as u32,
                "policy" => {
                    c.drop_oldest =
                        match (wire::kind(v) == Kind::String).then(|| wire::string(v)).transpose()? {
                            Some(p) if p == "reject" => false,
                            Some(p) if p == "dropOldest" => true,
                            _ => return Err(bad("options.policy must be \"reject\" or \"dropOldest\"")),
                        }
                }
                "windowBuffer" => {
                    if wire::kind(v) == Kind::Null {
                        continue;
                    }
                    let w = wire::fields(v).ok_or_else(|| bad("options.windowBuffer must be {ms, count}"))?;
                    for (wk, wv) in &w {
                        match wk.as_str() {
                            "ms" => c.window_ms = count("windowBuffer.ms", wv, 0, 300_000)?,
                            "count" => c.window_count = count("windowBuffer.count", wv, 0, 10_000)?,
                            other => {
                                return Err(bad(&format!(
                                    "options.windowBuffer.{other} is not a known field"
                                )))
                            }
                        }
                    }
                }
                other => return Err(bad(&format!("options.{other} is not a known ephemeral option"))),
            }
        }
        Ok(c)
    }
}

fn reject(status: u16, code: &str, detail: &str) -> EngineError {
    EngineError::Rejected { status, body: json!({"error": code, "code": code, "detail": detail}).to_string() }
}

fn bad(detail: &str) -> EngineError {
    reject(400, "ephemeral_bad_request", detail)
}

fn count(key: &str, v: &RawValue, min: u64, max: u64) -> Result<u64, EngineError> {
    let n = v.get().parse::<u64>().map_err(|_| bad(&format!("options.{key} must be an integer >= {min}")))?;
    if n < min || n > max {
        return Err(bad(&format!("options.{key} must be between {min} and {max}")));
    }
    Ok(n)
}

fn not_found(queue: &str) -> EngineError {
    reject(404, "ephemeral_queue_not_found", &format!("no ephemeral queue {queue}"))
}

fn check_name(what: &str, name: &str) -> Result<(), EngineError> {
    if name.is_empty() || name.chars().count() > 255 || name.chars().any(char::is_control) {
        return Err(bad(&format!("{what} must be 1 to 255 characters, none of them control characters")));
    }
    Ok(())
}

struct Msg {
    seq: u64,
    payload: Box<str>,
    at: Instant,
}

#[derive(Default)]
struct Group {
    /// The next never-delivered seq.
    next: u64,
    /// Delivered, then nacked or expired: delivered again before `next`.
    redeliver: BTreeSet<u64>,
    /// Lease deadlines of delivered messages.
    leased: HashMap<u64, Instant>,
    /// Deliveries so far, per message still in play.
    attempts: HashMap<u64, u32>,
    /// Messages evicted (dropOldest) before this group saw them.
    skipped: u64,
}

impl Group {
    fn forget(&mut self, seq: u64) {
        self.redeliver.remove(&seq);
        self.leased.remove(&seq);
        self.attempts.remove(&seq);
    }

    fn pending(&self, next_seq: u64) -> u64 {
        next_seq.saturating_sub(self.next) + self.redeliver.len() as u64
    }
}

struct Ring {
    msgs: VecDeque<Msg>,
    next_seq: u64,
    bytes: u64,
    groups: HashMap<String, Group>,
}

impl Ring {
    fn head(&self) -> u64 {
        self.msgs.front().map_or(self.next_seq, |m| m.seq)
    }

    fn get(&self, seq: u64) -> Option<&Msg> {
        let head = self.head();
        if seq < head {
            return None;
        }
        self.msgs.get((seq - head) as usize)
    }

    /// Removes the head message; every group moves past it.
    fn pop_head(&mut self) -> Option<Msg> {
        let m = self.msgs.pop_front()?;
        self.bytes -= m.payload.len() as u64;
        for g in self.groups.values_mut() {
            g.forget(m.seq);
            if g.next <= m.seq {
                g.next = m.seq + 1;
            }
        }
        Some(m)
    }
}

struct Queue {
    cfg: EphemeralConfig,
    declared: bool,
    rings: BTreeMap<String, Ring>,
    known_groups: BTreeSet<String>,
    bytes: u64,
    len: u64,
    /// Dropped by bounds (dropOldest), ttl, retryLimit.
    drops: [u64; 3],
    touched: Instant,
    /// The ownership epoch this broker holds the queue at.
    epoch: i64,
    /// Served until then: the sending of the last renewal that succeeded
    /// (or of the claim) plus [`OWNER_FENCE`].
    serve_until: Instant,
    wake: Arc<Notify>,
}

impl Queue {
    fn new(cfg: EphemeralConfig, declared: bool, epoch: i64, serve_until: Instant) -> Self {
        Queue {
            cfg,
            declared,
            rings: BTreeMap::new(),
            known_groups: BTreeSet::new(),
            bytes: 0,
            len: 0,
            drops: [0; 3],
            touched: Instant::now(),
            epoch,
            serve_until,
            wake: Arc::new(Notify::new()),
        }
    }
}

#[derive(Default)]
struct State {
    queues: HashMap<String, Queue>,
    /// Payload bytes held by every queue.
    bytes: u64,
    next_ring_base: u64,
    /// Queues another broker owns: its URL, and since when we know.
    elsewhere: HashMap<String, (String, Instant)>,
    /// Implicit queues forgotten since the last heartbeat (their rows go too).
    forgotten: Vec<String>,
}

/// The ephemeral queues of one engine.
pub(crate) struct Ephemeral {
    state: Mutex<State>,
    /// Changes at every start: ids of an earlier incarnation are `stale`.
    epoch: u32,
    me: Uuid,
    url: String,
}

enum Owner {
    Mine,
    Missing,
}

impl Ephemeral {
    pub(crate) fn new(url: String) -> Self {
        let me = Uuid::new_v4();
        let epoch = u32::from_be_bytes(me.as_bytes()[..4].try_into().unwrap_or([0; 4])).max(1);
        Ephemeral { state: Mutex::new(State::default()), epoch, me, url }
    }

    /// This engine's identity (also its row in the broker registry).
    pub(crate) fn owner_id(&self) -> Uuid {
        self.me
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn id(&self, partition: &str, seq: u64) -> String {
        format!("e:{:x}:{partition}:{seq}", self.epoch)
    }
}

/// Drops ttl-expired heads and handles expired leases; answers whether a
/// message became deliverable again.
fn expire(q: &mut Queue, now: Instant) -> bool {
    let mut woke = false;
    let ttl = (q.cfg.ttl_seconds > 0).then(|| Duration::from_secs(q.cfg.ttl_seconds));
    let limit = q.cfg.retry_limit.max(1);
    let (mut ttl_drops, mut retry_drops, mut freed, mut gone) = (0, 0, 0u64, 0u64);
    for ring in q.rings.values_mut() {
        if let Some(ttl) = ttl {
            while ring.msgs.front().is_some_and(|m| now.duration_since(m.at) >= ttl) {
                if let Some(m) = ring.pop_head() {
                    ttl_drops += 1;
                    freed += m.payload.len() as u64;
                    gone += 1;
                }
            }
        }
        for g in ring.groups.values_mut() {
            let due: Vec<u64> = g.leased.iter().filter(|(_, d)| **d <= now).map(|(s, _)| *s).collect();
            for seq in due {
                g.leased.remove(&seq);
                if g.attempts.get(&seq).copied().unwrap_or(0) >= limit {
                    g.attempts.remove(&seq);
                    retry_drops += 1;
                } else {
                    g.redeliver.insert(seq);
                    woke = true;
                }
            }
        }
    }
    q.drops[1] += ttl_drops;
    q.drops[2] += retry_drops;
    q.bytes -= freed;
    q.len -= gone;
    woke
}

/// Frees the messages every group is done with; answers the bytes freed.
fn trim(q: &mut Queue) -> u64 {
    let mut freed = 0;
    for ring in q.rings.values_mut() {
        if ring.groups.is_empty() {
            continue;
        }
        let needed = ring
            .groups
            .values()
            .map(|g| {
                let mut low = g.next;
                if let Some(r) = g.redeliver.first() {
                    low = low.min(*r);
                }
                if let Some(l) = g.leased.keys().min() {
                    low = low.min(*l);
                }
                low
            })
            .min()
            .unwrap_or(0);
        while ring.msgs.front().is_some_and(|m| m.seq < needed) {
            if let Some(m) = ring.pop_head() {
                freed += m.payload.len() as u64;
                q.len -= 1;
            }
        }
    }
    q.bytes -= freed;
    freed
}

fn group_name(group: Option<&str>) -> &str {
    group.filter(|g| !g.is_empty()).unwrap_or(crate::QUEUE_MODE)
}

/// A pop request.
#[derive(Debug, Clone)]
pub struct EphemeralPop {
    /// The queue.
    pub queue: String,
    /// Only this partition (all, in name order, otherwise).
    pub partition: Option<String>,
    /// The group (queue mode otherwise).
    pub group: Option<String>,
    /// At most this many messages.
    pub batch: usize,
    /// Commit at delivery: no lease, nothing to ack.
    pub auto_ack: bool,
    /// Long-poll up to this long (`None`: answer at once).
    pub wait: Option<Duration>,
}

impl Engine {
    /// Makes sure this broker owns `queue` (claiming it when `create` and no
    /// live broker does), loading its declared configuration.
    async fn ephemeral_owner(&self, queue: &str, create: bool) -> Result<Owner, EngineError> {
        let eph = self.ephemeral();
        {
            let mut st = eph.lock();
            if let Some(q) = st.queues.get_mut(queue) {
                let now = Instant::now();
                // Renewals failing: stop before another broker may take over.
                // The heartbeat renews it, or drops it if it was taken.
                if now >= q.serve_until {
                    return Err(lapsed(queue));
                }
                q.touched = now;
                return Ok(Owner::Mine);
            }
            if let Some((url, since)) = st.elsewhere.get(queue) {
                if since.elapsed() < OWNER_CACHE {
                    return Err(not_owner(queue, url));
                }
            }
        }
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../sql/statements/ephemeral_claim.sql")).await?;
        // The claim renews: it counts from before it was sent.
        let sent = Instant::now();
        let row =
            client.query_one(&stmt, &[&queue, &eph.me, &eph.url, &OWNER_STALE_SECONDS, &create]).await?;
        drop(client);
        let mine: bool = row.try_get(0)?;
        let url: Option<String> = row.try_get(1)?;
        let options: Option<String> = row.try_get(2)?;
        let found: Option<bool> = row.try_get(3)?;
        let epoch: Option<i64> = row.try_get(4)?;
        let mut st = eph.lock();
        if !mine {
            let url = url.unwrap_or_default();
            st.elsewhere.insert(queue.to_owned(), (url.clone(), Instant::now()));
            return Err(not_owner(queue, &url));
        }
        if !found.unwrap_or(false) && !create {
            return Ok(Owner::Missing);
        }
        st.elsewhere.remove(queue);
        // Claimed again before the heartbeat deleted its row: keep the row.
        st.forgotten.retain(|q| q != queue);
        let epoch = epoch.ok_or_else(|| EngineError::Protocol("ephemeral claim answered no epoch".into()))?;
        let serve_until = sent + OWNER_FENCE;
        let state = &mut *st;
        match state.queues.get_mut(queue) {
            Some(q) if q.epoch == epoch => q.serve_until = q.serve_until.max(serve_until),
            _ => {
                // A copy from an earlier ownership (taken over and back) is
                // not this one's: the queue comes back configured and empty.
                if let Some(old) = state.queues.remove(queue) {
                    old.wake.notify_waiters();
                    state.bytes = state.bytes.saturating_sub(old.bytes);
                }
                let declared = options.is_some();
                let cfg = match options.as_deref().map(serde_json::from_str::<&RawValue>) {
                    Some(Ok(raw)) => EphemeralConfig::decode(Some(raw)).unwrap_or_default(),
                    _ => EphemeralConfig::default(),
                };
                state.queues.insert(queue.to_owned(), Queue::new(cfg, declared, epoch, serve_until));
            }
        }
        if Instant::now() >= serve_until {
            // The claim took longer than the fence: not a renewal to serve on.
            return Err(lapsed(queue));
        }
        Ok(Owner::Mine)
    }

    /// `POST /api/v1/ephemeral/configure` (`{queue, options}`): declares the
    /// queue; answers its effective options (201).
    pub async fn ephemeral_configure(&self, body: &str) -> Result<Json, EngineError> {
        let f = object(body)?;
        let queue = queue_field(&f)?;
        let cfg = EphemeralConfig::decode(f.get("options").copied())?;
        self.ephemeral_owner(&queue, true).await?;
        let options = cfg.to_json().to_string();
        let eph = self.ephemeral();
        let epoch = held_epoch(eph, &queue)?;
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../sql/statements/ephemeral_configure.sql")).await?;
        let n = client.execute(&stmt, &[&queue, &options, &eph.me, &epoch]).await?;
        drop(client);
        if n == 0 {
            return Err(reject(503, "owner_moved", "another broker took the queue over; retry"));
        }
        let mut st = eph.lock();
        let q = st
            .queues
            .get_mut(&queue)
            .filter(|q| q.epoch == epoch)
            .ok_or_else(|| reject(503, "owner_moved", "another broker took the queue over; retry"))?;
        q.cfg = cfg.clone();
        q.declared = true;
        Ok(Json(json!({"queue": queue, "declared": true, "options": cfg.to_json()}).to_string()))
    }

    /// `POST /api/v1/ephemeral/push` (`{queue, partition?, messages: [{payload}]}`):
    /// all or nothing; answers `{pushed}` (201).
    pub async fn ephemeral_push(&self, body: &str) -> Result<Json, EngineError> {
        let f = object(body)?;
        let queue = queue_field(&f)?;
        let partition = match f.get("partition") {
            Some(p) if wire::kind(p) == Kind::String => wire::string(p)?,
            Some(p) if wire::kind(p) != Kind::Null => return Err(bad("partition must be a string")),
            _ => crate::DEFAULT_PARTITION.to_owned(),
        };
        check_name("partition", &partition)?;
        let items = f
            .get("messages")
            .and_then(|m| wire::elements(m))
            .ok_or_else(|| bad("messages must be an array of {payload}"))?;
        if items.len() > MAX_ITEMS {
            return Err(bad(&format!("messages holds more than {MAX_ITEMS} items")));
        }
        let mut payloads = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let itf = wire::fields(item).ok_or_else(|| bad(&format!("messages[{i}] must be an object")))?;
            let p = itf.get("payload").map_or("null", |p| p.get());
            payloads.push(Box::<str>::from(p));
        }
        self.ephemeral_owner(&queue, true).await?;
        let eph = self.ephemeral();
        let mut st = eph.lock();
        let State { queues, bytes: held, next_ring_base, .. } = &mut *st;
        let now = Instant::now();
        let q = serving(queues, &queue, now)?;
        let before = q.bytes;
        expire(q, now);
        trim(q);
        let add_bytes: u64 = payloads.iter().map(|p| p.len() as u64).sum();
        let add_len = payloads.len() as u64;
        if add_len == 0 {
            *held = held.saturating_sub(before - q.bytes);
            return Ok(Json(r#"{"pushed":0}"#.into()));
        }
        if add_bytes > q.cfg.max_bytes || add_len > q.cfg.max_length {
            *held = held.saturating_sub(before - q.bytes);
            return Err(reject(
                429,
                "queue_full",
                "this push alone is larger than the queue's maxBytes or maxLength",
            ));
        }
        let known = q.known_groups.clone();
        let ring = q.rings.entry(partition.clone()).or_insert_with(|| {
            let base = *next_ring_base;
            *next_ring_base += SEQ_STRIDE;
            let groups =
                known.iter().map(|g| (g.clone(), Group { next: base, ..Group::default() })).collect();
            Ring { msgs: VecDeque::new(), next_seq: base, bytes: 0, groups }
        });
        // Refuse before evicting anything: a refused push changes nothing.
        let fits_after_evicting_ring = q.bytes - ring.bytes + add_bytes <= q.cfg.max_bytes
            && q.len - ring.msgs.len() as u64 + add_len <= q.cfg.max_length;
        let full = q.bytes + add_bytes > q.cfg.max_bytes || q.len + add_len > q.cfg.max_length;
        if full && !(q.cfg.drop_oldest && fits_after_evicting_ring) {
            *held = held.saturating_sub(before - q.bytes);
            return Err(reject(
                429,
                "queue_full",
                &format!(
                    "ephemeral queue {queue} is full (maxBytes {}, maxLength {})",
                    q.cfg.max_bytes, q.cfg.max_length
                ),
            ));
        }
        if held.saturating_sub(before - q.bytes) + add_bytes > BROKER_BYTES {
            *held = held.saturating_sub(before - q.bytes);
            return Err(reject(
                503,
                "ephemeral_unavailable",
                "this broker's ephemeral memory is full; retry later",
            ));
        }
        while q.bytes + add_bytes > q.cfg.max_bytes || q.len + add_len > q.cfg.max_length {
            if ring.msgs.is_empty() {
                *held = held.saturating_sub(before - q.bytes);
                return Err(reject(
                    429,
                    "queue_full",
                    &format!(
                        "ephemeral queue {queue} is full (maxBytes {}, maxLength {})",
                        q.cfg.max_bytes, q.cfg.max_length
                    ),
                ));
            }
            let head = ring.head();
            for g in ring.groups.values_mut() {
                if g.next <= head {
                    g.skipped += 1;
                }
            }
            if let Some(m) = ring.pop_head() {
                q.bytes -= m.payload.len() as u64;
                q.len -= 1;
                q.drops[0] += 1;
            }
        }
        let released = before - q.bytes;
        for p in payloads {
            ring.msgs.push_back(Msg { seq: ring.next_seq, payload: p, at: now });
            ring.next_seq += 1;
        }
        ring.bytes += add_bytes;
        q.bytes += add_bytes;
        q.len += add_len;
        q.touched = now;
        *held = held.saturating_sub(released) + add_bytes;
        q.wake.notify_waiters();
        Ok(Json(json!({"pushed": add_len}).to_string()))
    }

    /// One pop attempt; `None` when nothing is deliverable (or a window holds out).
    fn ephemeral_take(
        &self,
        p: &EphemeralPop,
        waiting: bool,
    ) -> Result<(Option<String>, Arc<Notify>), EngineError> {
        let eph = self.ephemeral();
        let mut st = eph.lock();
        let State { queues, bytes: held, .. } = &mut *st;
        let now = Instant::now();
        let q = serving(queues, &p.queue, now)?;
        let before = q.bytes;
        if expire(q, now) {
            q.wake.notify_waiters();
        }
        *held = held.saturating_sub(before - q.bytes);
        let before = q.bytes;
        let group = group_name(p.group.as_deref()).to_owned();
        if q.known_groups.insert(group.clone()) {
            for ring in q.rings.values_mut() {
                let head = ring.head();
                ring.groups.entry(group.clone()).or_insert_with(|| Group { next: head, ..Group::default() });
            }
        }
        let wake = q.wake.clone();
        // A waiting pop with a window holds out until enough is there, or
        // the first available message is old enough.
        if waiting && (q.cfg.window_count > 0 || q.cfg.window_ms > 0) {
            let mut available = 0u64;
            let mut oldest: Option<Instant> = None;
            for (name, ring) in &q.rings {
                if p.partition.as_ref().is_some_and(|want| want != name) {
                    continue;
                }
                if let Some(g) = ring.groups.get(&group) {
                    available += g.pending(ring.next_seq);
                    let first = g.redeliver.first().copied().unwrap_or(g.next);
                    if let Some(m) = ring.get(first) {
                        oldest = Some(oldest.map_or(m.at, |o: Instant| o.min(m.at)));
                    }
                }
            }
            let want =
                if q.cfg.window_count > 0 { q.cfg.window_count.min(p.batch as u64) } else { p.batch as u64 };
            let ripe = oldest.is_some_and(|o| {
                q.cfg.window_ms > 0 && now.duration_since(o) >= Duration::from_millis(q.cfg.window_ms)
            });
            if available < want && !ripe {
                return Ok((None, wake));
            }
        }
        let lease = Duration::from_secs(q.cfg.lease_seconds);
        let mut out: Vec<String> = Vec::new();
        for (name, ring) in q.rings.iter_mut() {
            if out.len() >= p.batch {
                break;
            }
            if p.partition.as_ref().is_some_and(|want| want != name) {
                continue;
            }
            let next_seq = ring.next_seq;
            let Some(g) = ring.groups.get_mut(&group) else { continue };
            let mut taken: Vec<u64> = Vec::new();
            while taken.len() + out.len() < p.batch {
                if let Some(seq) = g.redeliver.pop_first() {
                    taken.push(seq);
                } else if g.next < next_seq {
                    taken.push(g.next);
                    g.next += 1;
                } else {
                    break;
                }
            }
            for seq in taken {
                let attempts = {
                    let a = g.attempts.entry(seq).or_insert(0);
                    *a += 1;
                    *a
                };
                if p.auto_ack {
                    g.attempts.remove(&seq);
                } else {
                    g.leased.insert(seq, now + lease);
                }
                let head = ring.msgs.front().map_or(next_seq, |m| m.seq);
                let Some(m) = (seq >= head).then(|| ring.msgs.get((seq - head) as usize)).flatten() else {
                    continue;
                };
                out.push(format!(
                    r#"{{"id":{},"partition":{},"payload":{},"attempts":{attempts}}}"#,
                    serde_json::to_string(&eph.id(name, seq)).unwrap_or_default(),
                    serde_json::to_string(name).unwrap_or_default(),
                    m.payload,
                ));
            }
        }
        trim(q);
        *held = held.saturating_sub(before - q.bytes);
        q.touched = now;
        if out.is_empty() {
            return Ok((None, wake));
        }
        Ok((Some(out.join(",")), wake))
    }

    /// `GET /api/v1/ephemeral/pop`: answers `{queue, messages}` (empty, never 204).
    pub async fn ephemeral_pop(&self, p: &EphemeralPop) -> Result<Json, EngineError> {
        check_name("queue", &p.queue)?;
        self.ephemeral_owner(&p.queue, true).await?;
        let deadline = p.wait.map(|w| Instant::now() + w);
        loop {
            let (found, wake) = self.ephemeral_take(p, deadline.is_some())?;
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(messages) = found {
                return Ok(pop_answer(&p.queue, &messages));
            }
            let Some(deadline) = deadline.filter(|d| Instant::now() < *d) else {
                // At the deadline a window gives way: whatever is there goes.
                if deadline.is_some() {
                    if let (Some(messages), _) = self.ephemeral_take(p, false)? {
                        return Ok(pop_answer(&p.queue, &messages));
                    }
                }
                return Ok(pop_answer(&p.queue, ""));
            };
            // Re-checks for lease expiry, ttl and windows as well as pushes.
            let nap = (deadline - Instant::now()).min(SWEEP_EVERY);
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(nap) => {}
            }
            // Deleted while we waited: answer, never create it again. Moved
            // or lapsed: ephemeral_owner answers 421.
            if matches!(self.ephemeral_owner(&p.queue, false).await?, Owner::Missing) {
                return Ok(pop_answer(&p.queue, ""));
            }
        }
    }

    /// `POST /api/v1/ephemeral/ack` (`{queue, group?, acks: [{id, status?}]}`):
    /// answers `{results: [{id, outcome}]}`, outcome acked | redelivered | stale | unknown.
    pub async fn ephemeral_ack(&self, body: &str) -> Result<Json, EngineError> {
        let f = object(body)?;
        let queue = queue_field(&f)?;
        let group = match f.get("group") {
            Some(g) if wire::kind(g) == Kind::String => Some(wire::string(g)?),
            _ => None,
        };
        let acks =
            f.get("acks").and_then(|a| wire::elements(a)).ok_or_else(|| bad("acks must be an array"))?;
        if acks.len() > MAX_ITEMS {
            return Err(bad(&format!("acks holds more than {MAX_ITEMS} items")));
        }
        let mut parsed = Vec::with_capacity(acks.len());
        for (i, a) in acks.iter().enumerate() {
            let af = wire::fields(a).ok_or_else(|| bad(&format!("acks[{i}] must be an object")))?;
            let id = match af.get("id") {
                Some(v) if wire::kind(v) == Kind::String => wire::string(v)?,
                _ => return Err(bad(&format!("acks[{i}].id is required and must be a string"))),
            };
            let status = match af.get("status") {
                Some(v) if wire::kind(v) == Kind::String => wire::string(v)?,
                _ => "completed".to_owned(),
            };
            parsed.push((id, status));
        }
        let owned = matches!(self.ephemeral_owner(&queue, false).await?, Owner::Mine);
        let eph = self.ephemeral();
        let mut st = eph.lock();
        let State { queues, bytes: held, .. } = &mut *st;
        let mut results = Vec::with_capacity(parsed.len());
        let group = group_name(group.as_deref()).to_owned();
        let q = if owned { queues.get_mut(&queue) } else { None };
        let Some(q) = q else {
            for (id, _) in &parsed {
                let outcome =
                    if parse_id(id).is_some_and(|(e, _, _)| e != eph.epoch) { "stale" } else { "unknown" };
                results.push(json!({"id": id, "outcome": outcome}));
            }
            return Ok(Json(json!({"results": results}).to_string()));
        };
        let now = Instant::now();
        let before = q.bytes;
        if expire(q, now) {
            q.wake.notify_waiters();
        }
        let limit = q.cfg.retry_limit.max(1);
        let mut woke = false;
        for (id, status) in &parsed {
            let outcome = match parse_id(id) {
                Some((epoch, _, _)) if epoch != eph.epoch => "stale",
                None => "unknown",
                Some((_, partition, seq)) => {
                    let g = q.rings.get_mut(partition).and_then(|r| r.groups.get_mut(&group));
                    match g {
                        Some(g) if g.leased.get(&seq).is_some_and(|d| *d > now) => {
                            g.leased.remove(&seq);
                            let completed =
                                matches!(status.as_str(), "completed" | "success" | "acked" | "ok");
                            if completed {
                                g.attempts.remove(&seq);
                                "acked"
                            } else if g.attempts.get(&seq).copied().unwrap_or(0) >= limit {
                                g.attempts.remove(&seq);
                                q.drops[2] += 1;
                                "acked"
                            } else {
                                g.redeliver.insert(seq);
                                woke = true;
                                "redelivered"
                            }
                        }
                        _ => "unknown",
                    }
                }
            };
            results.push(json!({"id": id, "outcome": outcome}));
        }
        trim(q);
        *held = held.saturating_sub(before - q.bytes);
        if woke {
            q.wake.notify_waiters();
        }
        Ok(Json(json!({"results": results}).to_string()))
    }

    /// `POST /api/v1/ephemeral/reset` (`{queue}`): drops every message and lease,
    /// rewinds every group; keeps the configuration. Answers `{queue, dropped}`.
    pub async fn ephemeral_reset(&self, body: &str) -> Result<Json, EngineError> {
        let queue = queue_field(&object(body)?)?;
        let dropped = match self.ephemeral_owner(&queue, false).await? {
            Owner::Missing => 0,
            Owner::Mine => {
                let eph = self.ephemeral();
                let mut st = eph.lock();
                let State { queues, bytes: held, .. } = &mut *st;
                match queues.get_mut(&queue) {
                    None => 0,
                    Some(q) => {
                        let dropped = q.len;
                        *held = held.saturating_sub(q.bytes);
                        q.rings.clear();
                        q.bytes = 0;
                        q.len = 0;
                        dropped
                    }
                }
            }
        };
        Ok(Json(json!({"queue": queue, "dropped": dropped}).to_string()))
    }

    /// `DELETE /api/v1/ephemeral/queue/:queue`: contents, cursors and the
    /// declared configuration. Answers `{queue, deleted, declared}`.
    pub async fn ephemeral_delete(&self, queue: &str) -> Result<Json, EngineError> {
        check_name("queue", queue)?;
        if matches!(self.ephemeral_owner(queue, false).await?, Owner::Missing) {
            return Ok(Json(json!({"queue": queue, "deleted": false, "declared": false}).to_string()));
        }
        let eph = self.ephemeral();
        let epoch = held_epoch(eph, queue)?;
        let client = self.pool().get().await?;
        let stmt = client.prepare_cached(include_str!("../sql/statements/ephemeral_delete.sql")).await?;
        client.execute(&stmt, &[&queue, &eph.me, &epoch]).await?;
        drop(client);
        let mut st = eph.lock();
        let removed = st.queues.remove(queue);
        let declared = removed.as_ref().is_some_and(|q| q.declared);
        if let Some(q) = &removed {
            st.bytes = st.bytes.saturating_sub(q.bytes);
            q.wake.notify_waiters();
        }
        Ok(Json(json!({"queue": queue, "deleted": true, "declared": declared}).to_string()))
    }

    /// `GET /api/v1/ephemeral/queues`: the queues this broker holds.
    pub fn ephemeral_queues(&self) -> Json {
        let st = self.ephemeral().lock();
        let mut names: Vec<&String> = st.queues.keys().collect();
        names.sort();
        let queues: Vec<Value> = names
            .iter()
            .filter_map(|n| st.queues.get(*n).map(|q| (n, q)))
            .map(|(n, q)| {
                json!({
                    "queue": n, "tier": if q.declared { "declared" } else { "implicit" },
                    "depth": q.len, "bytes": q.bytes, "partitions": q.rings.len(),
                    "groups": q.known_groups.len(),
                    "drops": {"bounds": q.drops[0], "ttl": q.drops[1], "retry": q.drops[2]},
                    "options": q.cfg.to_json(),
                })
            })
            .collect();
        Json(json!({"count": queues.len(), "queues": queues, "bytes": st.bytes}).to_string())
    }

    /// `GET /api/v1/ephemeral/queues/:queue/depth`: 404 `ephemeral_queue_not_found` when missing.
    pub async fn ephemeral_depth(&self, queue: &str, group: Option<&str>) -> Result<Json, EngineError> {
        check_name("queue", queue)?;
        if matches!(self.ephemeral_owner(queue, false).await?, Owner::Missing) {
            return Err(not_found(queue));
        }
        let st = self.ephemeral().lock();
        let q = st.queues.get(queue).ok_or_else(|| not_found(queue))?;
        let partitions: Vec<Value> = q
            .rings
            .iter()
            .map(|(name, r)| json!({"partition": name, "pending": r.msgs.len(), "bytes": r.bytes}))
            .collect();
        let mut groups: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for ring in q.rings.values() {
            for (name, g) in &ring.groups {
                let e = groups.entry(name.as_str()).or_default();
                e.0 += g.pending(ring.next_seq);
                e.1 += g.skipped;
            }
        }
        let pending = match group {
            Some(g) => groups.get(g).map_or(q.len, |e| e.0),
            None => q.len,
        };
        let groups: Vec<Value> =
            groups.iter().map(|(g, (p, s))| json!({"group": g, "pending": p, "skipped": s})).collect();
        Ok(Json(
            json!({
                "queue": queue, "group": group, "tier": if q.declared { "declared" } else { "implicit" },
                "pending": pending, "partitionsPending": q.rings.values().filter(|r| !r.msgs.is_empty()).count(),
                "bytes": q.bytes, "partitions": partitions, "groups": groups,
            })
            .to_string(),
        ))
    }
}

/// `{queue, messages}`; `messages` is the elements' JSON, joined, kept as built.
fn pop_answer(queue: &str, messages: &str) -> Json {
    let queue = serde_json::to_string(queue).unwrap_or_default();
    Json(format!(r#"{{"queue":{queue},"messages":[{messages}]}}"#))
}

/// The queue, under the state lock, if this broker may serve it now: the
/// fence is checked again where the messages are touched.
fn serving<'a>(
    queues: &'a mut HashMap<String, Queue>,
    queue: &str,
    now: Instant,
) -> Result<&'a mut Queue, EngineError> {
    match queues.get_mut(queue) {
        Some(q) if now < q.serve_until => Ok(q),
        _ => Err(lapsed(queue)),
    }
}

/// The epoch this broker holds `queue` at, once `ephemeral_owner` said mine.
fn held_epoch(eph: &Ephemeral, queue: &str) -> Result<i64, EngineError> {
    eph.lock()
        .queues
        .get(queue)
        .map(|q| q.epoch)
        .ok_or_else(|| reject(503, "owner_moved", "another broker took the queue over; retry"))
}

/// An owner whose renewals failed for [`OWNER_FENCE`]: it serves nothing,
/// as a non-owner, and does not know who may own the queue now.
fn lapsed(queue: &str) -> EngineError {
    EngineError::Rejected {
        status: 421,
        body: json!({
            "error": "ephemeral_not_owner", "code": "ephemeral_not_owner", "owner": null,
            "detail": format!("this broker could not renew its ownership of ephemeral queue {queue}; \
                               retry (here, or at the broker that takes it over)"),
        })
        .to_string(),
    }
}

fn not_owner(queue: &str, url: &str) -> EngineError {
    EngineError::Rejected {
        status: 421,
        body: json!({
            "error": "ephemeral_not_owner", "code": "ephemeral_not_owner", "owner": url,
            "detail": format!("ephemeral queue {queue} lives in the broker at {url}; send its calls there"),
        })
        .to_string(),
    }
}

/// `e:<epoch hex>:<partition>:<seq>`; the partition may hold `:`.
fn parse_id(id: &str) -> Option<(u32, &str, u64)> {
    let rest = id.strip_prefix("e:")?;
    let (epoch, rest) = rest.split_once(':')?;
    let (partition, seq) = rest.rsplit_once(':')?;
    Some((u32::from_str_radix(epoch, 16).ok()?, partition, seq.parse().ok()?))
}

fn object(body: &str) -> Result<wire::Fields<'_>, EngineError> {
    let raw: &RawValue = serde_json::from_str(body).map_err(|_| bad("the body must be a JSON object"))?;
    wire::fields(raw).ok_or_else(|| bad("the body must be a JSON object"))
}

fn queue_field(f: &wire::Fields<'_>) -> Result<String, EngineError> {
    let queue = match f.get("queue") {
        Some(q) if wire::kind(q) == Kind::String => wire::string(q)?,
        _ => return Err(bad("queue is required and must be a string")),
    };
    check_name("queue", &queue)?;
    Ok(queue)
}

/// The ephemeral sweeper: expires leases and ttl heads (waking pops) and
/// forgets idle implicit queues; it starts the ownership heartbeat as a
/// task of its own, so a renewal that hangs (a locked row, a dead
/// connection) stalls neither lease expiry nor the fence, which is judged
/// by time alone.
pub(crate) async fn sweep_ephemeral(
    engine_pool: crate::db::Pool,
    eph: Arc<Ephemeral>,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::spawn(renew_ownership(engine_pool, eph.clone(), shutdown.clone()));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = shutdown.changed() => return,
        }
        let now = Instant::now();
        let mut st = eph.lock();
        let mut forget = Vec::new();
        let mut freed = 0;
        for (name, q) in st.queues.iter_mut() {
            let before = q.bytes;
            if expire(q, now) {
                q.wake.notify_waiters();
            }
            trim(q);
            freed += before - q.bytes;
            if !q.declared && q.len == 0 && now.duration_since(q.touched) >= IDLE_FORGET {
                forget.push(name.clone());
            }
        }
        st.bytes = st.bytes.saturating_sub(freed);
        for name in forget {
            st.queues.remove(&name);
            st.forgotten.push(name);
        }
    }
}

/// Renews this broker's queues every [`HEARTBEAT_EVERY`] (sooner after a
/// failure); a queue whose row another broker took, at a newer epoch, is
/// dropped here.
async fn renew_ownership(pool: crate::db::Pool, eph: Arc<Ephemeral>, mut shutdown: watch::Receiver<bool>) {
    let mut failing = false;
    loop {
        let pause = if failing { HEARTBEAT_RETRY } else { HEARTBEAT_EVERY };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.changed() => return,
        }
        match heartbeat(&pool, &eph).await {
            Ok(()) => {
                if failing {
                    tracing::info!("ephemeral heartbeat renewed again");
                }
                failing = false;
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "ephemeral heartbeat failed; queues stop being served \
                                                 if it keeps failing; retrying");
                }
                failing = true;
            }
        }
    }
}

async fn heartbeat(pool: &crate::db::Pool, eph: &Ephemeral) -> Result<(), EngineError> {
    let (forgotten, held): (Vec<String>, Vec<(String, i64)>) = {
        let mut st = eph.lock();
        let held = st.queues.iter().map(|(name, q)| (name.clone(), q.epoch)).collect();
        (std::mem::take(&mut st.forgotten), held)
    };
    if forgotten.is_empty() && held.is_empty() {
        return Ok(());
    }
    // A renewal counts from before it was sent: the database stamps it no
    // earlier than this.
    let sent = Instant::now();
    let client = pool.get().await?;
    if !forgotten.is_empty() {
        let stmt = client.prepare_cached(include_str!("../sql/statements/ephemeral_forget.sql")).await?;
        client.execute(&stmt, &[&forgotten, &eph.me]).await?;
    }
    let names: Vec<&str> = held.iter().map(|(n, _)| n.as_str()).collect();
    let epochs: Vec<i64> = held.iter().map(|(_, e)| *e).collect();
    let stmt = client.prepare_cached(include_str!("../sql/statements/ephemeral_renew.sql")).await?;
    let rows = client.query(&stmt, &[&eph.me, &names, &epochs]).await?;
    drop(client);
    let renewed: std::collections::HashSet<String> = rows.iter().filter_map(|r| r.try_get(0).ok()).collect();
    let serve_until = sent + OWNER_FENCE;
    let mut guard = eph.lock();
    let st = &mut *guard;
    for (name, epoch) in held {
        // Only the copy this renewal was sent for: a queue claimed again
        // meanwhile (a new epoch) is judged by its own claim.
        let Some(q) = st.queues.get_mut(&name).filter(|q| q.epoch == epoch) else { continue };
        if renewed.contains(&name) {
            q.serve_until = q.serve_until.max(serve_until);
        } else if let Some(gone) = st.queues.remove(&name) {
            st.bytes = st.bytes.saturating_sub(gone.bytes);
            gone.wake.notify_waiters();
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_from_both_ends_and_options_are_checked() {
        assert_eq!(parse_id("e:1f:a:b:42"), Some((0x1f, "a:b", 42)));
        assert_eq!(parse_id("junk"), None);
        let raw: &RawValue = serde_json::from_str(
            r#"{"policy":"dropOldest","maxLength":2,"windowBuffer":{"ms":300,"count":3}}"#,
        )
        .unwrap();
        let c = EphemeralConfig::decode(Some(raw)).unwrap();
        assert!(c.drop_oldest && c.max_length == 2 && c.window_ms == 300 && c.window_count == 3);
        for bad_options in [
            r#"{"policy":"drop_oldest"}"#,
            r#"{"ttlSeconds":-1}"#,
            r#"{"leaseSeconds":1.5}"#,
            r#"{"bogus":1}"#,
            r#"{"windowBuffer":{"x":1}}"#,
        ] {
            let raw: &RawValue = serde_json::from_str(bad_options).unwrap();
            assert!(EphemeralConfig::decode(Some(raw)).is_err(), "{bad_options}");
        }
        let raw: &RawValue = serde_json::from_str(r#"{"maxBytes":999999999999}"#).unwrap();
        assert_eq!(EphemeralConfig::decode(Some(raw)).unwrap().max_bytes, MAX_QUEUE_BYTES);
    }
}
