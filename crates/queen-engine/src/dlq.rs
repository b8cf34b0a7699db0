//! Dead-letter replay and purge: the request checked here, once; the move
//! (claim, push as `dlq:<record id>`, remove) is `queen.dlq_replay`
//! (sql/functions/dlq.sql), which the retry route runs too.

pub use queen_wire::{DlqQuery, ReplayTarget};
use serde_json::value::RawValue;

use crate::wire::{self, Kind};
use crate::EngineError;

/// Names longer than this are refused, as a push refuses them.
const MAX_NAME_CHARS: usize = 255;

/// Decodes the optional body of `POST /api/v1/dlq/:id/replay`,
/// `{queue?, partition?}`; an empty body replays in place.
pub fn decode_replay_target(body: &str) -> Result<ReplayTarget, EngineError> {
    if body.trim().is_empty() {
        return Ok(ReplayTarget::default());
    }
    let raw: &RawValue =
        serde_json::from_str(body).map_err(|_| wire::bad_request("body", "must be a JSON object"))?;
    let fields = wire::fields(raw).ok_or_else(|| wire::bad_request("body", "must be a JSON object"))?;
    let name = |field: &str| -> Result<Option<String>, EngineError> {
        let bad = || wire::bad_request(field, "must be a non-empty string of at most 255 characters");
        match fields.get(field) {
            None => Ok(None),
            Some(v) => match wire::kind(v) {
                Kind::Null => Ok(None),
                Kind::String => match wire::string(v)? {
                    s if s.is_empty() || s.chars().count() > MAX_NAME_CHARS => Err(bad()),
                    s => Ok(Some(s)),
                },
                _ => Err(bad()),
            },
        }
    };
    Ok(ReplayTarget { queue: name("queue")?, partition: name("partition")? })
}

/// Reads a dead-letter record id from the path: a positive integer.
pub fn parse_dlq_id(raw: &str) -> Result<i64, EngineError> {
    raw.parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| wire::bad_request("id", "must be a positive integer (a dlqId of GET /api/v1/dlq)"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_body_is_optional_and_names_are_checked() {
        assert_eq!(decode_replay_target("").unwrap(), ReplayTarget::default());
        assert_eq!(decode_replay_target("{}").unwrap(), ReplayTarget::default());
        let t = decode_replay_target(r#"{"queue":"q2","partition":"p"}"#).unwrap();
        assert_eq!((t.queue.as_deref(), t.partition.as_deref()), (Some("q2"), Some("p")));
        for bad in [r#"{"queue":""}"#, r#"{"queue":5}"#, r#"{"partition":[]}"#, "[]", "nope"] {
            assert!(
                matches!(decode_replay_target(bad), Err(EngineError::Rejected { status: 400, .. })),
                "{bad}"
            );
        }
        let long = format!(r#"{{"queue":"{}"}}"#, "q".repeat(256));
        assert!(decode_replay_target(&long).is_err());
    }

    #[test]
    fn a_dlq_id_is_a_positive_integer() {
        assert_eq!(parse_dlq_id("42").unwrap(), 42);
        for bad in ["0", "-1", "abc", "1.5", ""] {
            assert!(parse_dlq_id(bad).is_err(), "{bad}");
        }
    }
}
