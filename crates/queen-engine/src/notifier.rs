//! Wakes long polls. A push wakes this engine's own waiters in process,
//! after its commit; other brokers on the database hear of it through one
//! `pg_notify('queen_push', ...)` per few milliseconds, sent by this
//! module's connection outside any pushing transaction (a NOTIFY inside the
//! push would hold a cluster-wide lock through the commit's WAL flush and
//! serialise every pushing commit). Missing a notification only delays a
//! waiter until its next re-check (`EngineOptions::poll_interval`).
//!
//! A broker alone on its database sends nothing: the registry's heartbeat
//! counts the other live brokers, and a broker that joins says hello (an
//! announcement with no queues) once its registry row is committed, so the
//! brokers already there start announcing at once, not at their next beat.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, Notify};
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::pg_tls::PgTls;

/// The connection's messages, whichever transport carries them.
type MessageStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = Result<AsyncMessage, tokio_postgres::Error>> + Send>>;

/// The channel pushes are announced on.
pub(crate) const CHANNEL: &str = "queen_push";

/// How long announcements gather before one notification goes out.
const COALESCE: Duration = Duration::from_millis(2);

/// Payloads stay under PostgreSQL's 8000-byte limit.
const MAX_PAYLOAD: usize = 7900;

/// The waiters of pops across queues (by namespace or task): woken by a
/// push to any queue. A queue name cannot hold NUL, so no queue is called this.
pub(crate) const ANY_QUEUE: &str = "\0any";

/// Long-poll waiters, by queue name.
#[derive(Default)]
pub(crate) struct Waiters {
    by_queue: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Waiters {
    /// The wake-up handle for a queue; release it with [`Waiters::release`].
    pub(crate) fn handle(&self, queue: &str) -> Arc<Notify> {
        let mut map = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(queue.to_owned()).or_default().clone()
    }

    /// Drops the map entry once its last waiter is gone, so queue names do not pile up.
    pub(crate) fn release(&self, queue: &str, handle: Arc<Notify>) {
        let mut map = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        // One reference is ours, one is the map's.
        if Arc::strong_count(&handle) <= 2 {
            map.remove(queue);
        }
    }

    /// Number of queues with at least one waiter.
    pub(crate) fn queues_waiting(&self) -> usize {
        self.by_queue.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Wakes the waiters of these queues.
    pub(crate) fn wake<'a>(&self, queues: impl IntoIterator<Item = &'a str>) {
        let map = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        let mut any = false;
        for q in queues {
            any = true;
            if let Some(n) = map.get(q) {
                n.notify_waiters();
            }
        }
        if any {
            if let Some(n) = map.get(ANY_QUEUE) {
                n.notify_waiters();
            }
        }
    }

    fn wake_all(&self) {
        let map = self.by_queue.lock().unwrap_or_else(PoisonError::into_inner);
        map.values().for_each(|n| n.notify_waiters());
    }

    /// Handles one notification; `me` is this engine's id, whose own
    /// announcements were already delivered in process. True when it came
    /// from another broker's announcer.
    fn on_notification(&self, me: &str, payload: &str) -> bool {
        if let Ok(a) = serde_json::from_str::<Announcement>(payload) {
            if a.from == me {
                return false;
            }
            self.wake(a.queues.iter().map(String::as_str));
            return true;
        }
        match serde_json::from_str::<Vec<String>>(payload) {
            // A bare array of queue names (an older broker's queen.message_retry sent one).
            Ok(queues) => self.wake(queues.iter().map(String::as_str)),
            // '*' or anything unexpected: wake everyone.
            Err(_) => self.wake_all(),
        }
        false
    }
}

/// What one notification says: these queues got messages on broker `from`.
#[derive(Serialize, Deserialize)]
struct Announcement {
    from: String,
    queues: Vec<String>,
}

/// Queues with new messages that other brokers have not been told of yet.
pub(crate) struct Announcer {
    /// This engine's id, so its own notifications are not acted on twice.
    id: String,
    pending: Mutex<BTreeSet<String>>,
    kick: Notify,
    /// Off: other brokers find new messages at their next re-check.
    enabled: bool,
    /// Whether another broker may be listening; true until the registry
    /// finds this broker alone.
    others: AtomicBool,
    /// Hellos heard from other brokers, so a heartbeat that read the
    /// registry before a newcomer's row committed does not silence us.
    hellos: AtomicU64,
    /// Whether our LISTEN is in place: only then is a newcomer's hello
    /// sure to reach us, so only then may a heartbeat silence us.
    listening: AtomicBool,
}

impl Announcer {
    pub(crate) fn new(enabled: bool) -> Self {
        Announcer {
            id: uuid::Uuid::new_v4().to_string(),
            pending: Mutex::default(),
            kick: Notify::new(),
            enabled,
            others: AtomicBool::new(true),
            hellos: AtomicU64::new(0),
            listening: AtomicBool::new(false),
        }
    }

    /// Whether this announcer sends at all (cross-broker wake-ups on).
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Remembers queues to announce; the notifier task sends them shortly.
    /// Nothing is kept while no other broker is registered.
    pub(crate) fn add(&self, queues: Vec<String>) {
        if !self.enabled || queues.is_empty() || !self.others.load(Ordering::SeqCst) {
            return;
        }
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).extend(queues);
        self.kick.notify_one();
    }

    /// Another broker spoke on the channel: it is there to be told.
    pub(crate) fn heard_from_other(&self) {
        self.hellos.fetch_add(1, Ordering::SeqCst);
        self.others.store(true, Ordering::SeqCst);
    }

    /// Taken before a heartbeat reads the registry (see
    /// [`Announcer::registry_read`]); `None` while not listening.
    pub(crate) fn hello_mark(&self) -> Option<u64> {
        self.listening.load(Ordering::SeqCst).then(|| self.hellos.load(Ordering::SeqCst))
    }

    /// What a heartbeat found: `others` live brokers besides this one. No
    /// other broker silences the announcer, unless a hello arrived since
    /// `mark` (its sender's row may have committed after the read) or we
    /// were not listening throughout (a hello may have gone unheard).
    pub(crate) fn registry_read(&self, mark: Option<u64>, others: i64) {
        if others > 0 {
            self.others.store(true, Ordering::SeqCst);
        } else if mark.is_some() && self.hello_mark() == mark {
            self.others.store(false, Ordering::SeqCst);
        }
    }

    fn set_listening(&self, on: bool) {
        self.listening.store(on, Ordering::SeqCst);
    }

    /// The hello a broker sends once its registry row is committed: an
    /// announcement of no queues, which wakes nobody.
    pub(crate) fn hello(&self) -> String {
        serde_json::to_string(&Announcement { from: self.id.clone(), queues: Vec::new() })
            .unwrap_or_else(|_| "*".into())
    }

    /// The pending announcements as notification payloads, each under the size limit.
    fn take_payloads(&self) -> Vec<String> {
        let queues = std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        let mut payloads = Vec::new();
        let mut batch: Vec<String> = Vec::new();
        let mut size = 0;
        let encode = |queues: Vec<String>| {
            serde_json::to_string(&Announcement { from: self.id.clone(), queues })
                .unwrap_or_else(|_| "*".into())
        };
        for q in queues {
            // A queue name is at most 255 characters (4 bytes each), escaped at most 6x.
            let cost = q.len() * 6 + 3;
            if size + cost > MAX_PAYLOAD - 64 && !batch.is_empty() {
                payloads.push(encode(std::mem::take(&mut batch)));
                size = 0;
            }
            size += cost;
            batch.push(q);
        }
        if !batch.is_empty() {
            payloads.push(encode(batch));
        }
        payloads
    }
}

/// Keeps one connection that LISTENs and sends this engine's announcements
/// until `shutdown` flips, reconnecting with a delay when it drops.
pub(crate) async fn run(
    pg: tokio_postgres::Config,
    tls: PgTls,
    listen: bool,
    waiters: Arc<Waiters>,
    announcer: Arc<Announcer>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut outage = crate::outage::Outage::new("notification listener");
    loop {
        if *shutdown.borrow() {
            return;
        }
        let mut pause = Duration::from_millis(500);
        let connected = match &tls {
            PgTls::Plain => pg.connect(NoTls).await.map(|(client, connection)| {
                let mut connection = connection;
                let messages: MessageStream =
                    Box::pin(futures_util::stream::poll_fn(move |cx| connection.poll_message(cx)));
                (client, messages)
            }),
            PgTls::Rustls(tls) => pg.connect(tls.clone()).await.map(|(client, connection)| {
                let mut connection = connection;
                let messages: MessageStream =
                    Box::pin(futures_util::stream::poll_fn(move |cx| connection.poll_message(cx)));
                (client, messages)
            }),
        };
        match connected {
            Ok((client, mut messages)) => {
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
                let pump = tokio::spawn(async move {
                    while let Some(msg) = messages.next().await {
                        match msg {
                            Ok(AsyncMessage::Notification(n)) => {
                                if tx.send(n.payload().to_owned()).is_err() {
                                    break;
                                }
                            }
                            Ok(_) => {}
                            Err(e) => {
                                tracing::warn!(error = %e, "notification connection failed");
                                break;
                            }
                        }
                    }
                });
                let listening =
                    if listen { client.batch_execute(&format!("LISTEN {CHANNEL}")).await } else { Ok(()) };
                if let Err(e) = listening {
                    pause = pause.max(outage.failed(&e));
                } else {
                    outage.ok();
                    announcer.set_listening(listen);
                    // Anything pushed while we were not listening: let waiters re-check.
                    waiters.wake_all();
                    loop {
                        tokio::select! {
                            msg = rx.recv() => match msg {
                                Some(payload) => {
                                    if waiters.on_notification(&announcer.id, &payload) {
                                        announcer.heard_from_other();
                                    }
                                }
                                None => break,
                            },
                            _ = announcer.kick.notified() => {
                                tokio::time::sleep(COALESCE).await;
                                let payloads = announcer.take_payloads();
                                if let Err(e) = client
                                    .query_typed(
                                        "SELECT pg_notify($1, p) FROM unnest($2::text[]) p",
                                        &[(&CHANNEL, Type::TEXT), (&payloads, Type::TEXT_ARRAY)],
                                    )
                                    .await
                                {
                                    // Lost: the other brokers' re-check finds the messages.
                                    tracing::warn!(error = %e, "cannot announce pushes");
                                    break;
                                }
                            }
                            _ = shutdown.changed() => {
                                pump.abort();
                                return;
                            }
                        }
                    }
                }
                announcer.set_listening(false);
                pump.abort();
            }
            Err(e) => pause = pause.max(outage.failed(&e)),
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// What a committed push tells the engine: the queues that got messages.
pub(crate) type Announce = Arc<dyn Fn(Vec<String>) + Send + Sync>;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn payloads_stay_under_the_limit_and_keep_every_queue() {
        let a = Announcer::new(true);
        let names: Vec<String> = (0..200).map(|i| format!("{i:0>250}")).collect();
        a.add(names.clone());
        let payloads = a.take_payloads();
        assert!(payloads.len() > 1);
        let mut seen = Vec::new();
        for p in &payloads {
            assert!(p.len() < 8000, "{} bytes", p.len());
            let ann: Announcement = serde_json::from_str(p).unwrap();
            assert_eq!(ann.from, a.id);
            seen.extend(ann.queues);
        }
        seen.sort();
        let mut want = names;
        want.sort();
        assert_eq!(seen, want);
        assert!(a.take_payloads().is_empty());
    }

    #[test]
    fn a_broker_alone_keeps_nothing_to_announce_until_another_appears() {
        let a = Announcer::new(true);
        // Not listening yet: a hello could go unheard, so nothing silences us.
        a.registry_read(a.hello_mark(), 0);
        a.add(vec!["q".into()]);
        assert_eq!(a.take_payloads().len(), 1);
        a.set_listening(true);
        let mark = a.hello_mark();
        a.registry_read(mark, 0);
        a.add(vec!["q".into()]);
        assert!(a.take_payloads().is_empty(), "alone: nothing to send");
        // A newcomer's hello arrives after a heartbeat read the registry
        // without its row: the stale reading does not silence us.
        let mark = a.hello_mark();
        a.heard_from_other();
        a.registry_read(mark, 0);
        a.add(vec!["q".into()]);
        assert_eq!(a.take_payloads().len(), 1);
        // The next heartbeat sees the newcomer.
        a.registry_read(a.hello_mark(), 1);
        a.add(vec!["r".into()]);
        assert_eq!(a.take_payloads().len(), 1);
        // It left: alone again.
        a.registry_read(a.hello_mark(), 0);
        a.add(vec!["s".into()]);
        assert!(a.take_payloads().is_empty());
    }

    #[test]
    fn a_hello_wakes_nobody_but_marks_its_sender_as_another_broker() {
        let w = Waiters::default();
        let other = Announcer::new(true);
        assert!(w.on_notification("me", &other.hello()));
        assert!(!w.on_notification(&other.id, &other.hello()), "our own hello is not another broker");
        assert!(!w.on_notification("me", r#"["q"]"#), "a bare array comes from SQL, not a broker");
    }
}
