//! Natural batching: concurrent requests of one kind share one statement
//! and one round trip (and, for writes, one commit). A batch leaves as soon
//! as a slot is free (no timer: a lone request waits for nothing), so under
//! load the requests that arrived while every slot was busy go together,
//! and PostgreSQL sees a few busy backends instead of one per client.
//!
//! Six batchers share one design ([`Batcher`]): KV gets, single-op KV
//! writes, pushes, acks, queue pops and transaction bundles of acks and
//! KV ops. Each member gets the answer a call of its own
//! would have had, and only after the commit.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;

use crate::EngineError;

/// Upper bounds of the batch-size buckets (requests per statement).
pub const BATCH_SIZE_BOUNDS: [u64; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 1024];

/// How many batches carried how many requests: one counter per bucket of
/// [`BATCH_SIZE_BOUNDS`], plus the total carried.
#[derive(Default)]
pub(crate) struct SizeHistogram {
    counts: [AtomicU64; BATCH_SIZE_BOUNDS.len()],
    sum: AtomicU64,
    retried: AtomicU64,
}

impl SizeHistogram {
    fn record(&self, n: usize) {
        let n = n as u64;
        let i = BATCH_SIZE_BOUNDS.iter().position(|&b| n <= b).unwrap_or(BATCH_SIZE_BOUNDS.len() - 1);
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> BatchSizes {
        let buckets: Vec<u64> = self.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        BatchSizes {
            count: buckets.iter().sum(),
            sum: self.sum.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            buckets,
        }
    }
}

/// Batch sizes seen so far, for /metrics and the bench.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchSizes {
    /// Batches per bucket of [`BATCH_SIZE_BOUNDS`] (not cumulative).
    pub buckets: Vec<u64>,
    /// Batches.
    pub count: u64,
    /// Requests they carried.
    pub sum: u64,
    /// Batches whose statement failed as a whole, so that each member ran
    /// alone (a deadlock would show here, as would a poison member).
    pub retried: u64,
}

/// The kinds of batch, as `/metrics/prometheus` labels them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchKind {
    /// Single-key KV gets.
    KvGet,
    /// Single-op KV writes (put, putIfAbsent, incr, delete, check).
    KvWrite,
    /// Push requests.
    Push,
    /// Ack requests.
    Ack,
    /// Pops of one queue (not by namespace or task).
    Pop,
    /// Transaction bundles of acks and KV ops (no pushes, no timers).
    Transaction,
}

impl BatchKind {
    /// Every kind, in the order the metrics list them.
    pub const ALL: [BatchKind; 6] = [
        BatchKind::Push,
        BatchKind::Ack,
        BatchKind::Pop,
        BatchKind::Transaction,
        BatchKind::KvGet,
        BatchKind::KvWrite,
    ];

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            BatchKind::KvGet => "kv_get",
            BatchKind::KvWrite => "kv_write",
            BatchKind::Push => "push",
            BatchKind::Ack => "ack",
            BatchKind::Pop => "pop",
            BatchKind::Transaction => "transaction",
        }
    }
}

/// The batch sizes of each batcher.
#[derive(Default)]
pub(crate) struct BatchStats {
    gets: SizeHistogram,
    writes: SizeHistogram,
    pushes: SizeHistogram,
    acks: SizeHistogram,
    pops: SizeHistogram,
    bundles: SizeHistogram,
}

impl BatchStats {
    pub(crate) fn of(&self, kind: BatchKind) -> &SizeHistogram {
        match kind {
            BatchKind::KvGet => &self.gets,
            BatchKind::KvWrite => &self.writes,
            BatchKind::Push => &self.pushes,
            BatchKind::Ack => &self.acks,
            BatchKind::Pop => &self.pops,
            BatchKind::Transaction => &self.bundles,
        }
    }
}

/// A request waiting in a batcher, and where its answer goes.
pub(crate) struct Waiting<Q, A> {
    pub(crate) request: Q,
    reply: oneshot::Sender<Result<A, EngineError>>,
}

impl<Q, A> Waiting<Q, A> {
    fn answer(self, answer: Result<A, EngineError>) {
        // The caller may have gone away (its HTTP client hung up): nothing to tell.
        let _ = self.reply.send(answer);
    }
}

/// How much a batch may carry: two measures per request (requests or items,
/// and bytes), each with its ceiling. A request over a ceiling on its own
/// still runs, alone.
#[derive(Clone, Copy)]
pub(crate) struct Budget<Q> {
    pub(crate) ceiling: [usize; 2],
    pub(crate) cost: fn(&Q) -> [usize; 2],
}

/// What runs one batch: it answers every member, and says how.
type Run<Q, A> = Box<dyn Fn(Vec<Waiting<Q, A>>) -> BoxFuture<'static, Answered> + Send + Sync>;

/// The front of one batcher: cheap to clone, one per engine and kind.
///
/// There is no dispatcher task. A request that finds a slot free runs
/// alone, in its own task: no channel, no hand-off between threads, which
/// is what a lone client pays for in latency. A request that finds every
/// slot busy waits in the queue, and whoever finishes a batch hands the
/// queue on as the next batch (one spawned task per batch, not per
/// request). So the queue is never waiting while a slot is free.
pub(crate) struct Batcher<Q, A> {
    shared: Arc<Shared<Q, A>>,
}

impl<Q, A> Clone for Batcher<Q, A> {
    fn clone(&self) -> Self {
        Batcher { shared: self.shared.clone() }
    }
}

struct Shared<Q, A> {
    state: Mutex<Queue<Q, A>>,
    budget: Budget<Q>,
    /// A batch running longer than this lends its slot's place to the queue
    /// (see [`Shared::run_one`]).
    stall_after: Duration,
    kind: BatchKind,
    stats: Arc<BatchStats>,
    run: Run<Q, A>,
}

/// Invariant: `waiting` is empty whenever `free` is above zero.
struct Queue<Q, A> {
    waiting: VecDeque<Waiting<Q, A>>,
    free: usize,
    /// Slots lent to the queue by stalled batches, not yet given back.
    lent: usize,
    /// Slots to retire: the next ones to finish end instead of going on.
    owed: usize,
}

/// One busy slot. Dropping it (after a batch, or when a leading request is
/// cancelled) hands the queue on, or frees the slot when the queue is empty.
struct Slot<Q: Send + 'static, A: Send + 'static> {
    shared: Arc<Shared<Q, A>>,
    /// Paid back a lent slot: ends without handing on.
    retired: bool,
}

impl<Q: Send + 'static, A: Send + 'static> Drop for Slot<Q, A> {
    fn drop(&mut self) {
        if self.retired {
            return;
        }
        let next = self.shared.next_batch_or_free();
        if next.is_empty() {
            return;
        }
        let shared = self.shared.clone();
        // Without a runtime (the process is ending) the batch is dropped and
        // its members hear "the batch was dropped".
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(run_queue(shared, next));
        }
    }
}

/// Runs batches off the queue for as long as it has any, on one slot.
async fn run_queue<Q: Send + 'static, A: Send + 'static>(
    shared: Arc<Shared<Q, A>>,
    first: Vec<Waiting<Q, A>>,
) {
    let mut slot = Slot { shared, retired: false };
    let mut batch = first;
    while !batch.is_empty() {
        slot.shared.run_one(batch).await;
        match slot.shared.next_batch() {
            Some(next) => batch = next,
            None => {
                slot.retired = true;
                return;
            }
        }
    }
}

/// Gives a lent slot back when the stalled batch ends (or is dropped).
struct Lent<Q: Send + 'static, A: Send + 'static> {
    shared: Arc<Shared<Q, A>>,
}

impl<Q: Send + 'static, A: Send + 'static> Drop for Lent<Q, A> {
    fn drop(&mut self) {
        let mut queue = self.shared.lock();
        queue.lent -= 1;
        if queue.free > 0 {
            queue.free -= 1;
        } else {
            queue.owed += 1;
        }
    }
}

impl<Q: Send + 'static, A: Send + 'static> Shared<Q, A> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue<Q, A>> {
        // No code panics while holding the lock; a poisoned one is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next batch off the queue, within the budget; `None` when this
    /// slot pays back a lent one and ends.
    fn next_batch(&self) -> Option<Vec<Waiting<Q, A>>> {
        let mut queue = self.lock();
        if queue.owed > 0 {
            queue.owed -= 1;
            return None;
        }
        Some(self.take_locked(&mut queue))
    }

    fn next_batch_or_free(&self) -> Vec<Waiting<Q, A>> {
        let mut queue = self.lock();
        if queue.owed > 0 {
            queue.owed -= 1;
            return Vec::new();
        }
        let batch = self.take_locked(&mut queue);
        if batch.is_empty() {
            queue.free += 1;
        }
        batch
    }

    fn take_locked(&self, queue: &mut Queue<Q, A>) -> Vec<Waiting<Q, A>> {
        let mut batch = Vec::new();
        let mut spent = [0, 0];
        while let Some(w) = queue.waiting.front() {
            let c = (self.budget.cost)(&w.request);
            let fits = spent[0] + c[0] <= self.budget.ceiling[0] && spent[1] + c[1] <= self.budget.ceiling[1];
            // A request over a ceiling on its own still runs, alone.
            if !fits && !batch.is_empty() {
                break;
            }
            spent = [spent[0] + c[0], spent[1] + c[1]];
            if let Some(w) = queue.waiting.pop_front() {
                batch.push(w);
            }
        }
        batch
    }

    /// Runs one batch. One that runs past `stall_after` (waiting on a lock
    /// held elsewhere, until `lock_timeout`) lends the queue a slot, so
    /// requests behind it that need other rows are not held for its wait;
    /// at most [`MAX_LENT`] at once, given back when the batch ends.
    async fn run_one(self: &Arc<Self>, batch: Vec<Waiting<Q, A>>) {
        let histogram = self.stats.of(self.kind);
        histogram.record(batch.len());
        let run = (self.run)(batch);
        tokio::pin!(run);
        let answered = tokio::select! {
            biased;
            answered = &mut run => answered,
            () = tokio::time::sleep(self.stall_after) => {
                let _lent = self.lend();
                run.await
            }
        };
        if answered == Answered::EachAlone {
            histogram.retried.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lends the queue one more slot, unless [`MAX_LENT`] are out already.
    fn lend(self: &Arc<Self>) -> Option<Lent<Q, A>> {
        let next = {
            let mut queue = self.lock();
            if queue.lent >= MAX_LENT {
                return None;
            }
            queue.lent += 1;
            let next = self.take_locked(&mut queue);
            if next.is_empty() {
                queue.free += 1;
            }
            next
        };
        let lent = Lent { shared: self.clone() };
        if !next.is_empty() {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(run_queue(self.clone(), next));
            }
        }
        Some(lent)
    }
}

impl<Q: Send + 'static, A: Send + 'static> Batcher<Q, A> {
    /// At most `slots` batches run at once, each through `run`, which must
    /// answer every member.
    pub(crate) fn start<F, Fut>(
        slots: usize,
        budget: Budget<Q>,
        kind: BatchKind,
        stats: Arc<BatchStats>,
        stall_after: Duration,
        run: F,
    ) -> Self
    where
        F: Fn(Vec<Waiting<Q, A>>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Answered> + Send + 'static,
    {
        let run: Run<Q, A> = Box::new(move |batch| Box::pin(run(batch)));
        let state = Mutex::new(Queue { waiting: VecDeque::new(), free: slots.max(1), lent: 0, owed: 0 });
        Batcher { shared: Arc::new(Shared { state, budget, stall_after, kind, stats, run }) }
    }

    /// Runs `request` at once when a slot is free, or queues it for the next
    /// batch, and waits for its answer.
    pub(crate) async fn call(&self, request: Q) -> Result<A, EngineError> {
        let (reply, answer) = oneshot::channel();
        let waiting = Waiting { request, reply };
        let lead = {
            let mut queue = self.shared.lock();
            if queue.free > 0 {
                queue.free -= 1;
                Some(waiting)
            } else {
                queue.waiting.push_back(waiting);
                None
            }
        };
        if let Some(waiting) = lead {
            let slot = Slot { shared: self.shared.clone(), retired: false };
            slot.shared.run_one(vec![waiting]).await;
            drop(slot);
        }
        answer.await.map_err(|_| EngineError::Unavailable("the batch was dropped".into()))?
    }
}

/// How a batch was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answered {
    /// By its one statement (or it had one member).
    Together,
    /// Its statement failed as a whole, and each member ran alone.
    EachAlone,
}

/// How a batch's outcome is answered. A dropped connection may have
/// committed, so every member hears it and resends; so does a protocol
/// error (the statement ran and committed, its answer could not be read:
/// running the members again would apply them twice). Any other failure
/// rolled the statement back, so each member runs alone and a poison
/// request fails by itself.
pub(crate) async fn answer_batch<Q, A, Fut>(
    batch: Vec<Waiting<Q, A>>,
    outcome: Result<Vec<A>, EngineError>,
    alone: impl Fn(Q) -> Fut,
    rerun: Rerun,
) -> Answered
where
    Fut: Future<Output = Result<A, EngineError>>,
{
    answer_members(batch, outcome.map(|answers| answers.into_iter().map(Ok).collect()), alone, rerun).await
}

/// How the members of a batch whose statement failed run again, alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rerun {
    /// Side by side (a few at once): a member that hangs or fails again
    /// holds up no other.
    SideBySide,
    /// One after another in arrival order, where the batch's statement
    /// promises that order (pops of one lane see each other as serial pops
    /// would); after a timeout they still run side by side, as the member
    /// waiting on a lock would wait again.
    InArrivalOrder,
}

/// As [`answer_batch`], for a statement that answers each member on its
/// own, a refusal included (the batch committed the others).
pub(crate) async fn answer_members<Q, A, Fut>(
    batch: Vec<Waiting<Q, A>>,
    outcome: Result<Vec<Result<A, EngineError>>, EngineError>,
    alone: impl Fn(Q) -> Fut,
    rerun: Rerun,
) -> Answered
where
    Fut: Future<Output = Result<A, EngineError>>,
{
    match outcome {
        // The statement committed: every member with an answer hears its
        // own. Answers are positional (each statement builds one per input,
        // in input order), so a committed write is never answered as a
        // failure; a member a faulty statement left without one hears a
        // protocol error alone.
        Ok(answers) => {
            if answers.len() != batch.len() {
                tracing::error!(
                    members = batch.len(),
                    answers = answers.len(),
                    "a batch statement answered another number of results than it had members"
                );
            }
            let mut answers = answers.into_iter();
            for w in batch {
                w.answer(answers.next().unwrap_or_else(|| {
                    Err(EngineError::Protocol("the batch statement gave this member no answer".into()))
                }));
            }
        }
        Err(EngineError::Unavailable(m)) => {
            for w in batch {
                w.answer(Err(EngineError::Unavailable(m.clone())));
            }
        }
        Err(EngineError::Protocol(m)) => {
            for w in batch {
                w.answer(Err(EngineError::Protocol(m.clone())));
            }
        }
        Err(e) if rerun == Rerun::InArrivalOrder && !matches!(e, EngineError::Timeout { .. }) => {
            tracing::debug!(error = %e, "a batch statement failed; its members run alone, in order");
            for Waiting { request, reply } in batch {
                let _ = reply.send(alone(request).await);
            }
            return Answered::EachAlone;
        }
        Err(e) => {
            // Rolled back. Each member runs alone, side by side: a member
            // waiting on a lock (a timeout) will wait again and a poison
            // member fails again, so the others do not queue behind either.
            // Members' own faults are refused before SQL (the decoders), so
            // this is a fault of the database or of one member's locks.
            tracing::debug!(error = %e, "a batch statement failed; its members run alone, side by side");
            futures_util::stream::iter(batch)
                .for_each_concurrent(RERUN_CONCURRENCY, |Waiting { request, reply }| {
                    let run = alone(request);
                    async move {
                        let _ = reply.send(run.await);
                    }
                })
                .await;
            return Answered::EachAlone;
        }
    }
    Answered::Together
}

/// A batch of one runs alone, through the statement an unbatched call
/// uses; a larger batch is handed back.
pub(crate) async fn unless_alone<Q, A, Fut>(
    mut batch: Vec<Waiting<Q, A>>,
    alone: &impl Fn(Q) -> Fut,
) -> Option<Vec<Waiting<Q, A>>>
where
    Fut: Future<Output = Result<A, EngineError>>,
{
    if batch.len() != 1 {
        return Some(batch);
    }
    if let Some(Waiting { request, reply }) = batch.pop() {
        let _ = reply.send(alone(request).await);
    }
    None
}

/// How long a batch runs before it lends its slot's place to the queue:
/// far above a normal batch (a commit), far below a lock timeout.
pub(crate) const STALL_AFTER: Duration = Duration::from_millis(250);

/// Slots a batcher may lend at once: each holds a pool connection.
const MAX_LENT: usize = 2;

/// Members of a failed batch rerun at once (each holds a connection).
const RERUN_CONCURRENCY: usize = 4;

/// The payload bytes of one statement's members, together.
pub(crate) const MAX_BATCH_BYTES: usize = 4 * 1024 * 1024;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::Mutex as StdMutex;
    use std::time::Duration;

    use tokio::sync::{mpsc, Notify};

    use super::*;

    /// What a test batcher saw: each batch's requests, and the task that ran it.
    type Seen = Arc<StdMutex<Vec<(Vec<u32>, Option<tokio::task::Id>)>>>;

    /// A batcher whose batches answer each request with itself; a batch led
    /// by request 0 waits for `release` first, and tells `started` it began.
    fn test_batcher(
        slots: usize,
        ceiling: usize,
    ) -> (Batcher<u32, u32>, Seen, Arc<Notify>, mpsc::UnboundedReceiver<()>) {
        test_batcher_stalling_after(slots, ceiling, Duration::from_secs(3600))
    }

    fn test_batcher_stalling_after(
        slots: usize,
        ceiling: usize,
        stall_after: Duration,
    ) -> (Batcher<u32, u32>, Seen, Arc<Notify>, mpsc::UnboundedReceiver<()>) {
        let seen: Seen = Arc::default();
        let release = Arc::new(Notify::new());
        let (started_tx, started) = mpsc::unbounded_channel();
        let budget = Budget { ceiling: [ceiling, usize::MAX], cost: |_: &u32| [1, 0] };
        let (log, gate) = (seen.clone(), release.clone());
        let batcher = Batcher::start(
            slots,
            budget,
            BatchKind::KvGet,
            Arc::default(),
            stall_after,
            move |batch: Vec<Waiting<u32, u32>>| {
                let (log, gate, started_tx) = (log.clone(), gate.clone(), started_tx.clone());
                async move {
                    let requests: Vec<u32> = batch.iter().map(|w| w.request).collect();
                    log.lock().unwrap().push((requests.clone(), tokio::task::try_id()));
                    if requests.first() == Some(&0) {
                        let _ = started_tx.send(());
                        gate.notified().await;
                    }
                    for w in batch {
                        let n = w.request;
                        w.answer(Ok(n));
                    }
                    Answered::Together
                }
            },
        );
        (batcher, seen, release, started)
    }

    /// A committed batch whose statement answered too few results: the
    /// members with an answer hear theirs; only the one without hears an
    /// error (never every member, as if nothing had committed).
    #[tokio::test]
    async fn a_short_answer_fails_only_the_members_left_without_one() {
        let (mut replies, mut batch) = (Vec::new(), Vec::new());
        for n in 0..3u32 {
            let (reply, rx) = oneshot::channel();
            batch.push(Waiting { request: n, reply });
            replies.push(rx);
        }
        let alone =
            |_: u32| async { Err::<u32, EngineError>(EngineError::Protocol("never run alone".into())) };
        let answered = answer_members(batch, Ok(vec![Ok(10), Ok(11)]), alone, Rerun::SideBySide).await;
        assert_eq!(answered, Answered::Together);
        assert_eq!(replies.remove(0).await.unwrap().unwrap(), 10);
        assert_eq!(replies.remove(0).await.unwrap().unwrap(), 11);
        assert!(matches!(replies.remove(0).await.unwrap(), Err(EngineError::Protocol(_))));
    }

    /// A batch whose statement failed as a whole (not a timeout): each
    /// member runs alone, side by side, so one member that hangs or fails
    /// again does not hold the others' answers back.
    #[tokio::test]
    async fn a_failed_batch_reruns_its_members_side_by_side() {
        let (mut replies, mut batch) = (Vec::new(), Vec::new());
        for n in 0..3u32 {
            let (reply, rx) = oneshot::channel();
            batch.push(Waiting { request: n, reply });
            replies.push(rx);
        }
        let hang = Arc::new(Notify::new());
        let gate = hang.clone();
        let alone = move |n: u32| {
            let gate = gate.clone();
            async move {
                match n {
                    0 => {
                        gate.notified().await;
                        Ok(0)
                    }
                    1 => Err(EngineError::Protocol("poison".into())),
                    n => Ok(n),
                }
            }
        };
        let failure = Err(EngineError::Conflict("deadlock detected".into()));
        let rerun = tokio::spawn(answer_members(batch, failure, alone, Rerun::SideBySide));
        let mut replies = replies.into_iter();
        let (first, second, third) =
            (replies.next().unwrap(), replies.next().unwrap(), replies.next().unwrap());
        // Members 1 and 2 are answered while member 0 still hangs.
        let poison =
            tokio::time::timeout(Duration::from_secs(5), second).await.expect("queued behind member 0");
        assert!(matches!(poison.unwrap(), Err(EngineError::Protocol(_))));
        let third =
            tokio::time::timeout(Duration::from_secs(5), third).await.expect("queued behind member 0");
        assert_eq!(third.unwrap().unwrap(), 2);
        hang.notify_one();
        assert_eq!(first.await.unwrap().unwrap(), 0);
        assert_eq!(rerun.await.unwrap(), Answered::EachAlone);
    }

    /// Pops promise their members arrival order: after a failure that is
    /// not a timeout, they run again one after another, in that order.
    #[tokio::test]
    async fn a_failed_pop_like_batch_reruns_in_arrival_order() {
        let (mut replies, mut batch) = (Vec::new(), Vec::new());
        for n in 0..4u32 {
            let (reply, rx) = oneshot::channel();
            batch.push(Waiting { request: n, reply });
            replies.push(rx);
        }
        let order = Arc::new(StdMutex::new(Vec::new()));
        let seen = order.clone();
        let alone = move |n: u32| {
            let seen = seen.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(u64::from(4 - n) * 5)).await;
                seen.lock().unwrap().push(n);
                Ok(n)
            }
        };
        let failure = Err(EngineError::Conflict("deadlock detected".into()));
        let answered = answer_members(batch, failure, alone, Rerun::InArrivalOrder).await;
        assert_eq!(answered, Answered::EachAlone);
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
        for (n, rx) in (0..).zip(replies) {
            assert_eq!(rx.await.unwrap().unwrap(), n);
        }
    }

    /// A caller of its own, as a concurrent client would be.
    fn spawn_call(batcher: &Batcher<u32, u32>, n: u32) -> tokio::task::JoinHandle<Result<u32, EngineError>> {
        let b = batcher.clone();
        tokio::spawn(async move { b.call(n).await })
    }

    #[tokio::test]
    async fn a_request_that_finds_a_slot_free_runs_alone_in_its_own_task() {
        let (batcher, seen, _, _) = test_batcher(1, 10);
        for n in 1..=3 {
            let caller = tokio::task::try_id();
            assert_eq!(batcher.call(n).await.unwrap(), n);
            let last = seen.lock().unwrap().last().cloned().unwrap();
            assert_eq!(last, (vec![n], caller), "no hand-off to another task");
        }
    }

    #[tokio::test]
    async fn requests_that_wait_go_together_within_the_budget_in_arrival_order() {
        let (batcher, seen, release, mut started) = test_batcher(1, 3);
        let lead = spawn_call(&batcher, 0);
        started.recv().await.unwrap();
        let mut waiting = Vec::new();
        for n in 1..=5 {
            waiting.push(spawn_call(&batcher, n));
            // Queued in this order before the next one is spawned.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        release.notify_one();
        assert_eq!(lead.await.unwrap().unwrap(), 0);
        for (n, w) in (1..).zip(waiting) {
            assert_eq!(w.await.unwrap().unwrap(), n, "each request gets its own answer");
        }
        let batches: Vec<Vec<u32>> = seen.lock().unwrap().iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(batches, vec![vec![0], vec![1, 2, 3], vec![4, 5]]);
    }

    #[tokio::test]
    async fn a_cancelled_leader_hands_its_slot_to_the_queue() {
        let (batcher, seen, _release, mut started) = test_batcher(1, 10);
        let lead = spawn_call(&batcher, 0);
        started.recv().await.unwrap();
        let waiting: Vec<_> = (1..=2).map(|n| spawn_call(&batcher, n)).collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        // The leader's client went away while its batch was running.
        lead.abort();
        for (n, w) in (1..).zip(waiting) {
            let answer = tokio::time::timeout(Duration::from_secs(5), w).await;
            assert_eq!(answer.expect("the queue was stranded").unwrap().unwrap(), n);
        }
        let batches: Vec<Vec<u32>> = seen.lock().unwrap().iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(batches, vec![vec![0], vec![1, 2]]);
        // And the slot is free again: the next call runs at once.
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), batcher.call(7)).await.unwrap().unwrap(), 7);
    }

    #[tokio::test]
    async fn a_slot_per_batch_in_flight() {
        let (batcher, seen, release, mut started) = test_batcher(2, 10);
        let lead = spawn_call(&batcher, 0);
        started.recv().await.unwrap();
        // The second slot is free: this one runs at once, beside the blocked batch.
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), batcher.call(9)).await.unwrap().unwrap(), 9);
        release.notify_one();
        assert_eq!(lead.await.unwrap().unwrap(), 0);
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_stalled_batch_lends_a_slot_and_takes_it_back_when_it_ends() {
        let (batcher, seen, release, mut started) =
            test_batcher_stalling_after(1, 10, Duration::from_millis(50));
        let lead = spawn_call(&batcher, 0);
        started.recv().await.unwrap();
        // Queued behind the stalled batch, then run on the lent slot.
        let queued = spawn_call(&batcher, 8);
        let answer = tokio::time::timeout(Duration::from_secs(5), queued).await;
        assert_eq!(answer.expect("stuck behind a stalled batch").unwrap().unwrap(), 8);
        // Arriving after the loan, it finds the lent slot free.
        assert_eq!(tokio::time::timeout(Duration::from_secs(5), batcher.call(9)).await.unwrap().unwrap(), 9);
        release.notify_one();
        assert_eq!(lead.await.unwrap().unwrap(), 0);
        let queue = batcher.shared.lock();
        assert_eq!((queue.free, queue.lent, queue.owed), (1, 0, 0), "the loan was paid back");
        drop(queue);
        assert_eq!(seen.lock().unwrap().len(), 3);
    }
}
