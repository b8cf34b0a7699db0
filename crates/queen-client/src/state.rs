//! The state handle: KV state of one lane (queue, partition, consumer group).
//!
//! Design: the handle is minted from a popped [`crate::Message`], never from
//! a free-form key, so its key is always
//! `@p/<queue>/<partition>/<group>/<name>` ([`crate::Message::state_key`]).
//! A key that derives from the partition is written only by the lane's lease
//! holder, which makes a read in one call and a write in the next safe. The
//! namespace is chosen when the handle is made ([`crate::Queen::state_in`],
//! or [`crate::DEFAULT_STATE_NS`] with [`crate::Queen::state`]). To write
//! state in the same commit as the ack, use [`State::ns`] and [`State::key`]
//! with [`crate::Tx::kv`].

use serde::Serialize;

use crate::broker::Broker;
use crate::error::Result;
use crate::kv::{Counter, Entry, Expect, Expiry, Incr, Kv, Write};

/// KV state bound to one lane-derived key.
pub struct State<B> {
    kv: Kv<B>,
    ns: String,
    key: String,
}

impl<B> Clone for State<B> {
    fn clone(&self) -> Self {
        State { kv: self.kv.clone(), ns: self.ns.clone(), key: self.key.clone() }
    }
}

impl<B: Broker> State<B> {
    pub(crate) fn new(kv: Kv<B>, ns: String, key: String) -> Self {
        State { kv, ns, key }
    }

    /// The namespace.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The derived key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Reads the state; `None` when absent.
    pub async fn get(&self) -> Result<Option<Entry>> {
        self.kv.get(&self.ns, &self.key).await
    }

    /// Writes the state unconditionally.
    pub async fn put<T: Serialize + ?Sized>(&self, value: &T, expiry: Expiry) -> Result<Write> {
        self.kv.put(&self.ns, &self.key, value, expiry).await
    }

    /// Writes the state if `expect` holds (the falsifiable form of "the lane serialises me").
    pub async fn put_expect<T: Serialize + ?Sized>(
        &self,
        value: &T,
        expiry: Expiry,
        expect: Expect,
    ) -> Result<Write> {
        self.kv.put_expect(&self.ns, &self.key, value, expiry, expect).await
    }

    /// Adds to the state as a counter.
    pub async fn incr(&self, by: impl Into<Incr>, expiry: Expiry) -> Result<Counter> {
        self.kv.incr(&self.ns, &self.key, by, expiry).await
    }

    /// Deletes the state.
    pub async fn delete(&self) -> Result<Write> {
        self.kv.delete(&self.ns, &self.key).await
    }
}
