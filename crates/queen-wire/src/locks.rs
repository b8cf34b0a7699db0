//! Locks and semaphores.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// One lock operation. Names are at most 256 bytes, without control
/// characters and without `#` (which separates a name from its slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockOp {
    /// Take a permit: a lock when `limit` is 1, else one of `limit` slots.
    /// Acquiring again with the same owner answers the permit it holds.
    Acquire {
        /// The lock's name.
        name: String,
        /// Lifetime in seconds; a holder that needs longer renews.
        ttl_seconds: u64,
        /// Who holds it; minted by the broker when absent.
        owner: Option<String>,
        /// Permits of the semaphore (1 for a lock).
        limit: u32,
    },
    /// Extend a permit; answers a new token.
    Renew {
        /// The lock's name.
        name: String,
        /// The token of the last acquire or renew.
        token: i64,
        /// New lifetime in seconds, from now.
        ttl_seconds: u64,
        /// The permit's slot, when known.
        slot: Option<u32>,
        /// The holder; with it, a renew sent again with an older token still renews.
        owner: Option<String>,
    },
    /// Give a permit back.
    Release {
        /// The lock's name.
        name: String,
        /// The permit's current token.
        token: i64,
        /// The permit's slot, when known.
        slot: Option<u32>,
    },
    /// Who holds it.
    Get {
        /// The lock's name.
        name: String,
    },
}

/// One holder of a permit, as `get` and refusals list them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockHolder {
    /// The permit's slot (0 for a lock).
    pub slot: u32,
    /// Who holds it; `None` for a row in the locks namespace that a KV
    /// call wrote without an owner (it still takes the slot).
    pub owner: Option<String>,
    /// The permit's token (its KV version).
    pub token: i64,
    /// When this holder took it.
    pub since: Option<String>,
    /// When it lapses unless renewed.
    pub expires_at: Option<String>,
    /// When it was last acquired or renewed.
    pub renewed_at: Option<String>,
}

/// The answer to one lock operation; which fields are set depends on the op.
/// The engine writes every answer with this type (unset fields are left
/// out); SQL answers the fields after `name`, which the engine sets.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockResult {
    /// Position of the op in the call.
    #[serde(default)]
    pub index: usize,
    /// The op's name.
    #[serde(default)]
    pub op: String,
    /// The lock's name.
    #[serde(default)]
    pub name: String,
    /// acquire: the verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acquired: Option<bool>,
    /// renew: the verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renewed: Option<bool>,
    /// release: the verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub released: Option<bool>,
    /// get: whether anybody holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<bool>,
    /// acquire: the owner already held this permit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub already: Option<bool>,
    /// Why an op did not apply: `held`, `contended` or `lost`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The permit's slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
    /// The permit's token after the op.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<i64>,
    /// The permit's owner.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When the permit lapses unless renewed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The KV check op that guards a transaction bundle with this permit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guard: Option<Box<RawValue>>,
    /// Who holds it (get, and refusals).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holders: Option<Vec<LockHolder>>,
}

impl LockOp {
    /// The op's wire name.
    pub fn op_name(&self) -> &'static str {
        match self {
            LockOp::Acquire { .. } => "acquire",
            LockOp::Renew { .. } => "renew",
            LockOp::Release { .. } => "release",
            LockOp::Get { .. } => "get",
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        match self {
            LockOp::Acquire { name, .. }
            | LockOp::Renew { name, .. }
            | LockOp::Release { name, .. }
            | LockOp::Get { name } => name,
        }
    }
}
