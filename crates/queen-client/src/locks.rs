//! Locks and semaphores: [`Locks`] speaks the four operations; a
//! [`Permit`] is what a holder keeps, and [`crate::Tx::guard`] fences a
//! transaction bundle with it (a holder whose token was superseded has its
//! whole bundle rolled back).

use serde_json::json;

use crate::broker::Broker;
use crate::client::Queen;
use crate::error::{Error, Result};

pub use queen_wire::{LockHolder, LockOp, LockResult, LOCKS_NAMESPACE};

/// A held permit: the token is its KV version, a fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permit {
    /// The lock's name.
    pub name: String,
    /// Its slot (0 for a lock).
    pub slot: u32,
    /// Its current token.
    pub token: i64,
    /// Who holds it.
    pub owner: String,
}

impl Permit {
    /// The permit of a granted acquire or renew; `None` for a refusal.
    pub fn of(result: &LockResult) -> Option<Permit> {
        let granted = result.acquired.or(result.renewed) == Some(true);
        match (granted, result.slot, result.token) {
            (true, Some(slot), Some(token)) => Some(Permit {
                name: result.name.clone(),
                slot,
                token,
                owner: result.owner.clone().unwrap_or_default(),
            }),
            _ => None,
        }
    }

    /// The KV key of the permit's row.
    pub fn key(&self) -> String {
        format!("{}#{}", self.name, self.slot)
    }
}

fn op_json(op: &LockOp) -> serde_json::Value {
    match op {
        LockOp::Acquire { name, ttl_seconds, owner, limit } => {
            let mut v = json!({"op": "acquire", "name": name, "ttlSeconds": ttl_seconds, "limit": limit});
            if let Some(o) = owner {
                v["owner"] = json!(o);
            }
            v
        }
        LockOp::Renew { name, token, ttl_seconds, slot, owner } => {
            let mut v = json!({"op": "renew", "name": name, "token": token, "ttlSeconds": ttl_seconds});
            if let Some(s) = slot {
                v["slot"] = json!(s);
            }
            if let Some(o) = owner {
                v["owner"] = json!(o);
            }
            v
        }
        LockOp::Release { name, token, slot } => {
            let mut v = json!({"op": "release", "name": name, "token": token});
            if let Some(s) = slot {
                v["slot"] = json!(s);
            }
            v
        }
        LockOp::Get { name } => json!({"op": "get", "name": name}),
    }
}

/// The lock operations of one client.
pub struct Locks<B> {
    queen: Queen<B>,
}

impl<B: Broker> Queen<B> {
    /// Locks and semaphores.
    pub fn locks(&self) -> Locks<B> {
        Locks::new(self.clone())
    }
}

impl<B: Broker> Locks<B> {
    fn new(queen: Queen<B>) -> Self {
        Locks { queen }
    }

    /// Several independent operations in one call: one result per op, in order.
    pub async fn batch(&self, ops: &[LockOp]) -> Result<Vec<LockResult>> {
        let body = json!({"operations": ops.iter().map(op_json).collect::<Vec<_>>()}).to_string();
        #[derive(serde::Deserialize)]
        struct Answer {
            results: Vec<LockResult>,
        }
        let answer: Answer =
            self.queen.broker().locks(&body).await?.decode().map_err(|e| Error::decode("locks answer", e))?;
        if answer.results.len() != ops.len() {
            return Err(Error::Decode(format!(
                "locks: {} results for {} ops",
                answer.results.len(),
                ops.len()
            )));
        }
        Ok(answer.results)
    }

    async fn one(&self, op: LockOp) -> Result<LockResult> {
        self.batch(std::slice::from_ref(&op))
            .await?
            .pop()
            .ok_or_else(|| Error::Decode("locks: no result".into()))
    }

    /// Takes a permit of `name` (a semaphore of `limit` permits; 1 is a lock).
    pub async fn acquire(
        &self,
        name: &str,
        ttl_seconds: u64,
        owner: Option<&str>,
        limit: u32,
    ) -> Result<LockResult> {
        self.one(LockOp::Acquire {
            name: name.to_owned(),
            ttl_seconds,
            owner: owner.map(str::to_owned),
            limit,
        })
        .await
    }

    /// Extends a permit; a granted renew carries a new token.
    pub async fn renew(&self, permit: &Permit, ttl_seconds: u64) -> Result<LockResult> {
        self.one(LockOp::Renew {
            name: permit.name.clone(),
            token: permit.token,
            ttl_seconds,
            slot: Some(permit.slot),
            owner: Some(permit.owner.clone()),
        })
        .await
    }

    /// Gives a permit back.
    pub async fn release(&self, permit: &Permit) -> Result<LockResult> {
        self.one(LockOp::Release { name: permit.name.clone(), token: permit.token, slot: Some(permit.slot) })
            .await
    }

    /// Who holds `name`.
    pub async fn get(&self, name: &str) -> Result<LockResult> {
        self.one(LockOp::Get { name: name.to_owned() }).await
    }
}
