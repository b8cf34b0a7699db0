//! `Engine`'s calls of `crate::ephemeral`: the facade over that module.

use crate::ephemeral::*;
use crate::wire::{self, Kind};
use crate::{Engine, EngineError, Json};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

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
        let stmt = client.prepare_cached(include_str!("../../sql/statements/ephemeral_claim.sql")).await?;
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
        let stmt =
            client.prepare_cached(include_str!("../../sql/statements/ephemeral_configure.sql")).await?;
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
        let stmt = client.prepare_cached(include_str!("../../sql/statements/ephemeral_delete.sql")).await?;
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
