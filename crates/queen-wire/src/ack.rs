//! Acks: the answer to each acknowledgment, and the refusals of a
//! transaction that roll it back.

use serde::{Deserialize, Serialize};

use crate::kv::PreconditionLost;

/// The broker's answer to one acknowledgment, as the engine writes it and
/// the SDK reads it. `error` is written even when null.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AckResult {
    /// Position in the request (from 0).
    #[serde(default)]
    pub index: usize,
    /// The acked transaction id.
    pub transaction_id: String,
    /// Whether the ack was applied; a refused item says why in `error`.
    pub success: bool,
    /// Why the item was refused ("invalid or expired lease", "already committed…").
    #[serde(default)]
    pub error: Option<String>,
    /// Whether the lease on the partition ended with this ack.
    #[serde(default)]
    pub lease_released: bool,
    /// Whether this nack moved the message to the DLQ.
    #[serde(default)]
    pub dlq: bool,
    /// A completed ack of a message already below the cursor.
    #[serde(default)]
    pub noop: bool,
}

/// The database's verdict on one acknowledgment against its cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckVerdict {
    /// Applied.
    Ok,
    /// A completion of a message already below the cursor: done before.
    Noop,
    /// No cursor, or the transaction id is not in the partition.
    Unresolvable,
    /// A nack of a message already below the cursor.
    Committed,
    /// The lease sent is not the cursor's live one.
    Lease,
}

impl AckVerdict {
    /// The verdict named `name`, as the ack functions spell it.
    pub fn named(name: &str) -> Option<Self> {
        Some(match name {
            "ok" => AckVerdict::Ok,
            "noop" => AckVerdict::Noop,
            "unresolvable" => AckVerdict::Unresolvable,
            "committed" => AckVerdict::Committed,
            "lease" => AckVerdict::Lease,
            _ => return None,
        })
    }

    /// Why an item with this verdict was refused; `None` when it succeeded.
    fn refusal(self) -> Option<&'static str> {
        match self {
            AckVerdict::Ok | AckVerdict::Noop => None,
            AckVerdict::Unresolvable => Some(
                "unresolvable: transaction not in the ack window (hash purged or never pushed); \
                 if leased, the message redelivers",
            ),
            AckVerdict::Committed => {
                Some("already committed: the cursor moved past this message before this ack")
            }
            AckVerdict::Lease => Some("invalid or expired lease"),
        }
    }
}

impl AckResult {
    /// The answer to the item at `index`: its verdict, whether its cursor's
    /// lease ended, and whether it was dead-lettered (both count only for
    /// an applied item).
    pub fn new(index: usize, transaction_id: String, verdict: AckVerdict, released: bool, dlq: bool) -> Self {
        let applied = verdict == AckVerdict::Ok;
        AckResult {
            index,
            transaction_id,
            success: verdict.refusal().is_none(),
            error: verdict.refusal().map(str::to_owned),
            lease_released: applied && released,
            dlq: applied && dlq,
            noop: verdict == AckVerdict::Noop,
        }
    }
}

/// Why the database refused a transaction, which then rolled back: SQL
/// reports the facts (SQLSTATE QN202, or a refused member of a bundle
/// batch), and [`TxRefusal::body`] writes the 200 answer.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TxRefusal {
    /// A `required` KV op lost its precondition.
    KvLost(PreconditionLost),
    /// An ack was not applicable (strict: a noop refuses too).
    AckRefused(AckRefused),
    /// A pushed item was a duplicate, or its queue was full.
    PushRefused(PushRefused),
}

/// The first cursor, in lock order, with a refused ack.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AckRefused {
    /// The cursor's partition.
    pub partition_id: String,
    /// Its refused acks.
    pub count: u64,
}

/// The first pushed item that was not queued.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushRefused {
    /// Its place among the bundle's push items (from 0).
    pub index: usize,
    /// A duplicate inside the dedup window (else its queue was full).
    pub duplicate: bool,
    /// Its transaction id.
    pub transaction_id: String,
    /// Its queue.
    pub queue: String,
}

/// A rolled-back transaction's answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TxRefused<'a> {
    transaction_id: &'a str,
    success: bool,
    reason: &'static str,
    results: [(); 0],
    error: String,
}

impl TxRefusal {
    /// The 200 body of the transaction `transaction_id`, rolled back.
    pub fn body(&self, transaction_id: &str) -> String {
        let (reason, error) = match self {
            TxRefusal::KvLost(lost) => return lost.transaction_body(transaction_id),
            TxRefusal::AckRefused(a) => (
                "rejected_ack",
                format!(
                    "QTXN {} acked message(s) on partition {} are not leased by this worker or were \
                     already acked; the transaction rolled back",
                    a.count, a.partition_id
                ),
            ),
            TxRefusal::PushRefused(p) if p.duplicate => (
                "duplicate",
                format!(
                    "QDUP item {} (transactionId {}) is a duplicate inside the dedup window; the \
                     transaction rolled back",
                    p.index, p.transaction_id
                ),
            ),
            TxRefusal::PushRefused(p) => (
                "duplicate",
                format!("Queue '{}' would exceed max capacity; the transaction rolled back", p.queue),
            ),
        };
        let body = TxRefused { transaction_id, success: false, reason, results: [], error };
        // Strings only: serialising cannot fail.
        serde_json::to_string(&body).unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_carries_every_field_and_counts_release_and_dlq_only_when_applied() {
        let done = AckResult::new(2, "t".into(), AckVerdict::Ok, true, false);
        assert_eq!(
            serde_json::to_string(&done).unwrap(),
            r#"{"index":2,"transactionId":"t","success":true,"error":null,"leaseReleased":true,"dlq":false,"noop":false}"#
        );
        let lease = AckResult::new(0, "t".into(), AckVerdict::Lease, true, true);
        assert_eq!((lease.success, lease.lease_released, lease.dlq), (false, false, false));
        assert_eq!(lease.error.as_deref(), Some("invalid or expired lease"));
        let noop = AckResult::new(0, "t".into(), AckVerdict::Noop, true, false);
        assert_eq!((noop.success, noop.noop, noop.lease_released, noop.error), (true, true, false, None));
        assert_eq!(AckVerdict::named("nope"), None);
    }

    #[test]
    fn refusals_are_read_from_their_facts_and_answer_the_transaction() {
        let ack: TxRefusal =
            serde_json::from_str(r#"{"ackRefused":{"partitionId":"p-1","count":2}}"#).unwrap();
        let body: serde_json::Value = serde_json::from_str(&ack.body("tx")).unwrap();
        assert_eq!(body["transactionId"], "tx");
        assert_eq!(body["success"], false);
        assert_eq!(body["reason"], "rejected_ack");
        assert_eq!(body["results"], serde_json::json!([]));
        assert!(body["error"].as_str().unwrap().starts_with("QTXN 2 acked message(s) on partition p-1 "));
        let dup: TxRefusal = serde_json::from_str(
            r#"{"pushRefused":{"index":1,"duplicate":true,"transactionId":"d","queue":"q"}}"#,
        )
        .unwrap();
        assert!(dup.body("tx").contains("QDUP item 1 (transactionId d) is a duplicate"));
        let full: TxRefusal = serde_json::from_str(
            r#"{"pushRefused":{"index":0,"duplicate":false,"transactionId":"d","queue":"q"}}"#,
        )
        .unwrap();
        assert!(full.body("tx").contains("Queue 'q' would exceed max capacity"));
        let lost: TxRefusal = serde_json::from_str(
            r#"{"kvLost":{"failedIndex":3,"kvReason":"exists","key":"k","version":7,"value":1}}"#,
        )
        .unwrap();
        assert!(lost.body("tx").contains(r#""reason":"kv_precondition""#));
    }
}
