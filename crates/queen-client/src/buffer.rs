//! Client-side push buffering: items wait in memory and go out in batches,
//! when the buffer is full or when its oldest item has waited long enough.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinHandle;

use crate::broker::Broker;
use crate::client::Queue;
use crate::error::{Error, Result};
use crate::message::{PushItem, PushResult};

/// When a [`Buffer`] flushes.
#[derive(Debug, Clone, Copy)]
pub struct BufferOptions {
    /// Flush as soon as this many items wait (also the largest batch sent).
    pub max_messages: usize,
    /// Flush items that have waited about this long.
    pub max_delay: Duration,
}

impl Default for BufferOptions {
    /// 100 messages or 100 ms.
    fn default() -> Self {
        BufferOptions { max_messages: 100, max_delay: Duration::from_millis(100) }
    }
}

struct Inner<B> {
    queue: Queue<B>,
    options: BufferOptions,
    items: Mutex<Vec<PushItem>>,
    /// Held while a batch is in flight, so batches leave in push order.
    sending: tokio::sync::Mutex<()>,
}

impl<B: Broker> Inner<B> {
    fn len(&self) -> usize {
        self.items.lock().map(|v| v.len()).unwrap_or(0)
    }

    fn take(&self, n: usize) -> Vec<PushItem> {
        match self.items.lock() {
            Ok(mut items) => {
                let n = n.min(items.len());
                items.drain(..n).collect()
            }
            Err(_) => Vec::new(),
        }
    }

    fn put_back(&self, batch: Vec<PushItem>) {
        if let Ok(mut items) = self.items.lock() {
            items.splice(0..0, batch);
        }
    }

    /// Sends everything that waits, in batches of `max_messages`. A batch
    /// that fails goes back to the head of the buffer (transaction ids are
    /// minted at push time, so a resend is deduplicated by the broker).
    async fn flush(&self) -> Result<Vec<PushResult>> {
        let _order = self.sending.lock().await;
        let mut results = Vec::new();
        loop {
            let batch = self.take(self.options.max_messages.max(1));
            if batch.is_empty() {
                return Ok(results);
            }
            match self.queue.push_batch(&batch).await {
                Ok(r) => results.extend(r),
                Err(e) => {
                    self.put_back(batch);
                    return Err(e);
                }
            }
        }
    }
}

/// A push buffer of one queue (and partition). Call [`Buffer::close`] to
/// send what is left; dropping it stops the timer and discards unsent items.
pub struct Buffer<B> {
    inner: Arc<Inner<B>>,
    timer: JoinHandle<()>,
}

impl<B: Broker + 'static> Queue<B> {
    /// A client-side buffer that pushes in batches, on size or on time.
    pub fn buffered(&self, options: BufferOptions) -> Buffer<B> {
        Buffer::new(self.clone(), options)
    }
}

impl<B: Broker + 'static> Buffer<B> {
    fn new(queue: Queue<B>, options: BufferOptions) -> Self {
        let inner =
            Arc::new(Inner { queue, options, items: Mutex::new(Vec::new()), sending: Default::default() });
        let timer = tokio::spawn(tick(Arc::downgrade(&inner), options.max_delay));
        Buffer { inner, timer }
    }

    /// Buffers one payload (its transaction id is minted now).
    pub async fn push<T: Serialize + ?Sized>(&self, payload: &T) -> Result<()> {
        self.push_item(PushItem::new(payload)?).await
    }

    /// Buffers one item; flushes when the buffer is full.
    pub async fn push_item(&self, mut item: PushItem) -> Result<()> {
        if item.transaction_id.is_none() {
            item.transaction_id = Some(uuid::Uuid::new_v4().to_string());
        }
        let len = match self.inner.items.lock() {
            Ok(mut items) => {
                items.push(item);
                items.len()
            }
            Err(_) => return Err(Error::Invalid("the buffer is poisoned".into())),
        };
        if len >= self.inner.options.max_messages {
            self.inner.flush().await?;
        }
        Ok(())
    }

    /// Items waiting to be sent.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sends everything now; answers the push results of what was sent.
    pub async fn flush(&self) -> Result<Vec<PushResult>> {
        self.inner.flush().await
    }

    /// Stops the timer and sends what is left.
    pub async fn close(self) -> Result<Vec<PushResult>> {
        self.timer.abort();
        self.inner.flush().await
    }
}

impl<B> Drop for Buffer<B> {
    fn drop(&mut self) {
        self.timer.abort();
    }
}

async fn tick<B: Broker>(inner: Weak<Inner<B>>, every: Duration) {
    let every = every.max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        if inner.len() > 0 {
            if let Err(e) = inner.flush().await {
                tracing::warn!(queue = %inner.queue.name(), error = %e, "buffered push failed; will retry");
            }
        }
    }
}
