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

pub use queen_wire::EphemeralPop;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::{watch, Notify};
use uuid::Uuid;

use crate::wire::{self, Kind};
use crate::{EngineError, Json};

/// Largest `maxBytes` (payload bytes held by one queue); larger asks are clamped.
pub const MAX_QUEUE_BYTES: u64 = 64 * 1024 * 1024;
/// Largest `maxLength`; larger asks are clamped.
pub const MAX_QUEUE_LENGTH: u64 = 1_000_000;
/// Payload bytes all ephemeral queues of one broker may hold (then 503).
pub const BROKER_BYTES: u64 = 256 * 1024 * 1024;
/// Messages in one push, acks in one call.
pub const MAX_ITEMS: usize = 10_000;
/// A broker whose heartbeat is older than this loses its queues to the next caller.
pub(crate) const OWNER_STALE_SECONDS: i32 = 10;
/// An owner stops serving a queue this long after sending its last renewal
/// that succeeded: half the takeover time, so it has stopped before anyone
/// may take over, whatever happened to its heartbeats.
pub(crate) const OWNER_FENCE: Duration = Duration::from_secs(OWNER_STALE_SECONDS as u64 / 2);
/// Renewals: two may fail in a row before the fence is reached.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// After a failed renewal, the next try comes sooner.
const HEARTBEAT_RETRY: Duration = Duration::from_millis(500);
pub(crate) const SWEEP_EVERY: Duration = Duration::from_millis(250);
/// An implicit queue that is empty and untouched this long is forgotten.
const IDLE_FORGET: Duration = Duration::from_secs(300);
/// How long a non-owner remembers who the owner is.
pub(crate) const OWNER_CACHE: Duration = Duration::from_secs(2);
pub(crate) const SEQ_STRIDE: u64 = 1 << 40;

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
    pub(crate) fn to_json(&self) -> Value {
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
    pub(crate) fn decode(raw: Option<&RawValue>) -> Result<Self, EngineError> {
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

pub(crate) fn reject(status: u16, code: &str, detail: &str) -> EngineError {
    EngineError::Rejected { status, body: json!({"error": code, "code": code, "detail": detail}).to_string() }
}

pub(crate) fn bad(detail: &str) -> EngineError {
    reject(400, "ephemeral_bad_request", detail)
}

fn count(key: &str, v: &RawValue, min: u64, max: u64) -> Result<u64, EngineError> {
    let n = v.get().parse::<u64>().map_err(|_| bad(&format!("options.{key} must be an integer >= {min}")))?;
    if n < min || n > max {
        return Err(bad(&format!("options.{key} must be between {min} and {max}")));
    }
    Ok(n)
}

pub(crate) fn not_found(queue: &str) -> EngineError {
    reject(404, "ephemeral_queue_not_found", &format!("no ephemeral queue {queue}"))
}

pub(crate) fn check_name(what: &str, name: &str) -> Result<(), EngineError> {
    if name.is_empty() || name.chars().count() > 255 || name.chars().any(char::is_control) {
        return Err(bad(&format!("{what} must be 1 to 255 characters, none of them control characters")));
    }
    Ok(())
}

pub(crate) struct Msg {
    pub(crate) seq: u64,
    pub(crate) payload: Box<str>,
    pub(crate) at: Instant,
}

#[derive(Default)]
pub(crate) struct Group {
    /// The next never-delivered seq.
    pub(crate) next: u64,
    /// Delivered, then nacked or expired: delivered again before `next`.
    pub(crate) redeliver: BTreeSet<u64>,
    /// Lease deadlines of delivered messages.
    pub(crate) leased: HashMap<u64, Instant>,
    /// Deliveries so far, per message still in play.
    pub(crate) attempts: HashMap<u64, u32>,
    /// Messages evicted (dropOldest) before this group saw them.
    pub(crate) skipped: u64,
}

impl Group {
    fn forget(&mut self, seq: u64) {
        self.redeliver.remove(&seq);
        self.leased.remove(&seq);
        self.attempts.remove(&seq);
    }

    pub(crate) fn pending(&self, next_seq: u64) -> u64 {
        next_seq.saturating_sub(self.next) + self.redeliver.len() as u64
    }
}

pub(crate) struct Ring {
    pub(crate) msgs: VecDeque<Msg>,
    pub(crate) next_seq: u64,
    pub(crate) bytes: u64,
    pub(crate) groups: HashMap<String, Group>,
}

impl Ring {
    pub(crate) fn head(&self) -> u64 {
        self.msgs.front().map_or(self.next_seq, |m| m.seq)
    }

    pub(crate) fn get(&self, seq: u64) -> Option<&Msg> {
        let head = self.head();
        if seq < head {
            return None;
        }
        self.msgs.get((seq - head) as usize)
    }

    /// Removes the head message; every group moves past it.
    pub(crate) fn pop_head(&mut self) -> Option<Msg> {
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

pub(crate) struct Queue {
    pub(crate) cfg: EphemeralConfig,
    pub(crate) declared: bool,
    pub(crate) rings: BTreeMap<String, Ring>,
    pub(crate) known_groups: BTreeSet<String>,
    pub(crate) bytes: u64,
    pub(crate) len: u64,
    /// Dropped by bounds (dropOldest), ttl, retryLimit.
    pub(crate) drops: [u64; 3],
    pub(crate) touched: Instant,
    /// The ownership epoch this broker holds the queue at.
    pub(crate) epoch: i64,
    /// Served until then: the sending of the last renewal that succeeded
    /// (or of the claim) plus [`OWNER_FENCE`].
    pub(crate) serve_until: Instant,
    pub(crate) wake: Arc<Notify>,
}

impl Queue {
    pub(crate) fn new(cfg: EphemeralConfig, declared: bool, epoch: i64, serve_until: Instant) -> Self {
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
pub(crate) struct State {
    pub(crate) queues: HashMap<String, Queue>,
    /// Payload bytes held by every queue.
    pub(crate) bytes: u64,
    pub(crate) next_ring_base: u64,
    /// Queues another broker owns: its URL, and since when we know.
    pub(crate) elsewhere: HashMap<String, (String, Instant)>,
    /// Implicit queues forgotten since the last heartbeat (their rows go too).
    pub(crate) forgotten: Vec<String>,
}

/// The ephemeral queues of one engine.
pub(crate) struct Ephemeral {
    state: Mutex<State>,
    /// Changes at every start: ids of an earlier incarnation are `stale`.
    pub(crate) epoch: u32,
    pub(crate) me: Uuid,
    pub(crate) url: String,
}

pub(crate) enum Owner {
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

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn id(&self, partition: &str, seq: u64) -> String {
        format!("e:{:x}:{partition}:{seq}", self.epoch)
    }
}

/// Drops ttl-expired heads and handles expired leases; answers whether a
/// message became deliverable again.
pub(crate) fn expire(q: &mut Queue, now: Instant) -> bool {
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
pub(crate) fn trim(q: &mut Queue) -> u64 {
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

pub(crate) fn group_name(group: Option<&str>) -> &str {
    group.filter(|g| !g.is_empty()).unwrap_or(crate::QUEUE_MODE)
}

/// `{queue, messages}`; `messages` is the elements' JSON, joined, kept as built.
pub(crate) fn pop_answer(queue: &str, messages: &str) -> Json {
    let queue = serde_json::to_string(queue).unwrap_or_default();
    Json(format!(r#"{{"queue":{queue},"messages":[{messages}]}}"#))
}

/// The queue, under the state lock, if this broker may serve it now: the
/// fence is checked again where the messages are touched.
pub(crate) fn serving<'a>(
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
pub(crate) fn held_epoch(eph: &Ephemeral, queue: &str) -> Result<i64, EngineError> {
    eph.lock()
        .queues
        .get(queue)
        .map(|q| q.epoch)
        .ok_or_else(|| reject(503, "owner_moved", "another broker took the queue over; retry"))
}

/// An owner whose renewals failed for [`OWNER_FENCE`]: it serves nothing,
/// as a non-owner, and does not know who may own the queue now.
pub(crate) fn lapsed(queue: &str) -> EngineError {
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

pub(crate) fn not_owner(queue: &str, url: &str) -> EngineError {
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
pub(crate) fn parse_id(id: &str) -> Option<(u32, &str, u64)> {
    let rest = id.strip_prefix("e:")?;
    let (epoch, rest) = rest.split_once(':')?;
    let (partition, seq) = rest.rsplit_once(':')?;
    Some((u32::from_str_radix(epoch, 16).ok()?, partition, seq.parse().ok()?))
}

pub(crate) fn object(body: &str) -> Result<wire::Fields<'_>, EngineError> {
    let raw: &RawValue = serde_json::from_str(body).map_err(|_| bad("the body must be a JSON object"))?;
    wire::fields(raw).ok_or_else(|| bad("the body must be a JSON object"))
}

pub(crate) fn queue_field(f: &wire::Fields<'_>) -> Result<String, EngineError> {
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
