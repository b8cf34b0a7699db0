//! Locks and semaphores (`POST /api/v1/locks`). A permit is a KV row in
//! namespace `queen-locks` with key `<name>#<slot>`; its version is the
//! token, so tokens are fencing tokens and the guard a holder puts in a
//! transaction bundle is a KV `check`. The call is decoded and checked here;
//! `sql/functions/locks.sql` picks slots and draws tokens.

pub use queen_wire::{LockHolder, LockOp, LockResult};

use serde_json::value::RawValue;

use crate::wire::{self, Fields, Kind};
use crate::EngineError;

pub use queen_wire::LOCKS_NAMESPACE;
const MAX_OPS: usize = 256;
const MAX_NAME_BYTES: usize = 256;
const MAX_OWNER_BYTES: usize = 256;
/// Permits of one semaphore, at most.
pub const MAX_LIMIT: u32 = 1024;
const MAX_TTL_SECONDS: u64 = 3_153_600_000;

/// The engine's rules on a lock op (the op itself is wire data).
pub(crate) trait CheckedLockOp {
    /// The rules every caller's op must meet, HTTP or embedded.
    fn check(&self, f: &str) -> Result<(), EngineError>;
}

impl CheckedLockOp for LockOp {
    /// The rules every caller's op must meet, HTTP or embedded.
    fn check(&self, f: &str) -> Result<(), EngineError> {
        check_name(self.name(), f)?;
        let ttl_ok = |ttl: u64| (1..=MAX_TTL_SECONDS).contains(&ttl);
        match self {
            LockOp::Acquire { ttl_seconds, owner, limit, .. } => {
                if !ttl_ok(*ttl_seconds) {
                    return Err(bad_ttl(f));
                }
                if let Some(owner) = owner {
                    check_owner(owner, f)?;
                }
                if !(1..=MAX_LIMIT).contains(limit) {
                    return Err(bad_limit(f));
                }
            }
            LockOp::Renew { token, ttl_seconds, slot, owner, .. } => {
                if *token <= 0 {
                    return Err(bad_token(f));
                }
                if !ttl_ok(*ttl_seconds) {
                    return Err(bad_ttl(f));
                }
                if let Some(owner) = owner {
                    check_owner(owner, f)?;
                }
                check_slot(*slot, f)?;
            }
            LockOp::Release { token, slot, .. } => {
                if *token <= 0 {
                    return Err(bad_token(f));
                }
                check_slot(*slot, f)?;
            }
            LockOp::Get { .. } => {}
        }
        Ok(())
    }
}

/// A locks 400: `{"error": "locks_bad_request", "reason", "detail"}`, the
/// envelope KV uses.
fn reject(reason: &str, detail: &str) -> EngineError {
    EngineError::Rejected {
        status: 400,
        body: serde_json::json!({"error": "locks_bad_request", "reason": reason, "detail": detail})
            .to_string(),
    }
}

fn bad_ttl(f: &str) -> EngineError {
    reject(
        "locks_bad_ttl",
        &format!("{f}.ttlSeconds must be an integer from 1 to {MAX_TTL_SECONDS}; there is no forever"),
    )
}

fn bad_limit(f: &str) -> EngineError {
    reject("locks_bad_limit", &format!("{f}.limit must be an integer from 1 to {MAX_LIMIT}"))
}

fn bad_token(f: &str) -> EngineError {
    reject("locks_bad_token", &format!("{f}.token must be the permit's token, an integer above 0"))
}

fn is_control(c: char) -> bool {
    let code = c as u32;
    code < 0x20 || (0x7f..=0x9f).contains(&code)
}

fn check_name(name: &str, f: &str) -> Result<(), EngineError> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.chars().any(|c| is_control(c) || c == '#') {
        return Err(reject(
            "locks_bad_name",
            &format!(
                "{f}.name must be a non-empty string of at most {MAX_NAME_BYTES} bytes, \
                 without control characters and without '#'"
            ),
        ));
    }
    Ok(())
}

fn check_owner(owner: &str, f: &str) -> Result<(), EngineError> {
    if owner.is_empty() || owner.len() > MAX_OWNER_BYTES || owner.chars().any(is_control) {
        return Err(reject(
            "locks_bad_owner",
            &format!(
                "{f}.owner must be a non-empty string of at most {MAX_OWNER_BYTES} bytes, \
                 without control characters"
            ),
        ));
    }
    Ok(())
}

fn check_slot(slot: Option<u32>, f: &str) -> Result<(), EngineError> {
    match slot {
        Some(s) if s >= MAX_LIMIT => {
            Err(reject("locks_bad_slot", &format!("{f}.slot must be an integer from 0 to {}", MAX_LIMIT - 1)))
        }
        _ => Ok(()),
    }
}

/// Decodes and checks a locks call: `{"operations": [...]}`.
pub(crate) fn decode_locks(body: &str) -> Result<Vec<LockOp>, EngineError> {
    if wire::has_nul_escape(body) {
        return Err(reject("locks_bad_body", "names and owners must not contain NUL (\\u0000)"));
    }
    let bad_body = || reject("locks_bad_body", "the body must be {\"operations\": [...]}");
    let raw: &RawValue = serde_json::from_str(body).map_err(|_| bad_body())?;
    let ops = wire::fields(raw)
        .and_then(|f| f.get("operations").copied())
        .and_then(wire::elements)
        .ok_or_else(bad_body)?;
    if ops.len() > MAX_OPS {
        return Err(reject("locks_too_many_ops", &format!("at most {MAX_OPS} operations per call")));
    }
    ops.iter()
        .enumerate()
        .map(|(i, o)| {
            let f = format!("operations[{i}]");
            let op = decode_op(&f, o)?;
            op.check(&f)?;
            Ok(op)
        })
        .collect()
}

fn decode_op(f: &str, raw: &RawValue) -> Result<LockOp, EngineError> {
    let fields =
        wire::fields(raw).ok_or_else(|| reject("locks_bad_body", &format!("{f} must be an object")))?;
    let text = |name: &str| -> Result<Option<String>, EngineError> {
        match fields.get(name) {
            None => Ok(None),
            Some(v) if wire::kind(v) == Kind::Null => Ok(None),
            Some(v) if wire::kind(v) == Kind::String => Ok(Some(wire::string(v)?)),
            Some(_) => Err(reject(&format!("locks_bad_{name}"), &format!("{f}.{name} must be a string"))),
        }
    };
    let op = text("op")?.unwrap_or_default();
    let name = text("name")?.ok_or_else(|| reject("locks_bad_name", &format!("{f}.name is required")))?;
    let allowed: &[&str] = match op.as_str() {
        "acquire" => &["op", "name", "ttlSeconds", "owner", "limit"],
        "renew" => &["op", "name", "token", "ttlSeconds", "slot", "owner"],
        "release" => &["op", "name", "token", "slot"],
        "get" => &["op", "name"],
        _ => {
            return Err(reject(
                "locks_unknown_op",
                &format!("{f}.op must be one of acquire, renew, release, get"),
            ))
        }
    };
    if let Some(extra) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(reject("locks_unknown_field", &format!("{f}.{extra} is not a field of {op}")));
    }
    let ttl = || uint(&fields, "ttlSeconds").ok().flatten().ok_or_else(|| bad_ttl(f));
    Ok(match op.as_str() {
        "acquire" => LockOp::Acquire {
            name,
            ttl_seconds: ttl()?,
            owner: text("owner")?,
            limit: match uint(&fields, "limit") {
                Ok(None) => 1,
                Ok(Some(l)) => u32::try_from(l).map_err(|_| bad_limit(f))?,
                Err(()) => return Err(bad_limit(f)),
            },
        },
        "renew" => LockOp::Renew {
            name,
            token: token(&fields, f)?,
            ttl_seconds: ttl()?,
            slot: slot(&fields, f)?,
            owner: text("owner")?,
        },
        "release" => LockOp::Release { name, token: token(&fields, f)?, slot: slot(&fields, f)? },
        _ => LockOp::Get { name },
    })
}

/// An optional non-negative integer; `Err(())` for anything else.
fn uint(fields: &Fields<'_>, name: &str) -> Result<Option<u64>, ()> {
    match fields.get(name) {
        None => Ok(None),
        Some(v) if wire::kind(v) == Kind::Null => Ok(None),
        Some(v) => v.get().parse::<u64>().map(Some).map_err(|_| ()),
    }
}

fn token(fields: &Fields<'_>, f: &str) -> Result<i64, EngineError> {
    match uint(fields, "token") {
        Ok(Some(t)) => i64::try_from(t).map_err(|_| bad_token(f)),
        _ => Err(bad_token(f)),
    }
}

fn slot(fields: &Fields<'_>, f: &str) -> Result<Option<u32>, EngineError> {
    let bad =
        || reject("locks_bad_slot", &format!("{f}.slot must be an integer from 0 to {}", MAX_LIMIT - 1));
    match uint(fields, "slot") {
        Ok(None) => Ok(None),
        Ok(Some(s)) => u32::try_from(s).map(Some).map_err(|_| bad()),
        Err(()) => Err(bad()),
    }
}

/// The body of a locks call: one answer per op.
#[derive(serde::Serialize)]
pub(crate) struct Results {
    pub(crate) results: Vec<LockResult>,
}

/// The call as the typed arrays `queen.lock_apply` takes.
#[derive(Default)]
pub(crate) struct LockColumns {
    pub(crate) ops: Vec<&'static str>,
    pub(crate) names: Vec<String>,
    pub(crate) owners: Vec<Option<String>>,
    pub(crate) ttls: Vec<Option<i64>>,
    pub(crate) limits: Vec<Option<i32>>,
    pub(crate) tokens: Vec<Option<i64>>,
    pub(crate) slots: Vec<Option<i32>>,
}

impl LockColumns {
    pub(crate) fn of(ops: &[LockOp]) -> Self {
        let mut c = LockColumns::default();
        for op in ops {
            c.ops.push(op.op_name());
            c.names.push(op.name().to_owned());
            let (owner, ttl, limit, token, slot) = match op {
                LockOp::Acquire { owner, ttl_seconds, limit, .. } => {
                    (owner.clone(), Some(*ttl_seconds), Some(*limit), None, None)
                }
                LockOp::Renew { owner, ttl_seconds, token, slot, .. } => {
                    (owner.clone(), Some(*ttl_seconds), None, Some(*token), *slot)
                }
                LockOp::Release { token, slot, .. } => (None, None, None, Some(*token), *slot),
                LockOp::Get { .. } => (None, None, None, None, None),
            };
            c.owners.push(owner);
            // Checked bounds: ttl <= 3.2e9 and limit, slot <= 1024 fit.
            c.ttls.push(ttl.and_then(|t| i64::try_from(t).ok()));
            c.limits.push(limit.and_then(|l| i32::try_from(l).ok()));
            c.tokens.push(token);
            c.slots.push(slot.and_then(|s| i32::try_from(s).ok()));
        }
        c
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn reason(body: &str) -> String {
        match decode_locks(body) {
            Err(EngineError::Rejected { status: 400, body }) => {
                let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                assert_eq!(v["error"], "locks_bad_request");
                v["reason"].as_str().unwrap().to_owned()
            }
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn a_full_call_decodes() {
        let ops = decode_locks(
            r#"{"operations":[{"op":"acquire","name":"a","ttlSeconds":5,"owner":"me","limit":3},
               {"op":"renew","name":"a","token":7,"ttlSeconds":5,"slot":2},
               {"op":"release","name":"a","token":8},{"op":"get","name":"a"}]}"#,
        )
        .unwrap();
        assert_eq!(
            ops[0],
            LockOp::Acquire { name: "a".into(), ttl_seconds: 5, owner: Some("me".into()), limit: 3 }
        );
        assert_eq!(
            ops[1],
            LockOp::Renew { name: "a".into(), token: 7, ttl_seconds: 5, slot: Some(2), owner: None }
        );
        assert_eq!(ops[2], LockOp::Release { name: "a".into(), token: 8, slot: None });
        assert_eq!(ops[3], LockOp::Get { name: "a".into() });
    }

    #[test]
    fn bad_input_names_its_reason() {
        assert_eq!(reason("[]"), "locks_bad_body");
        assert_eq!(reason(r#"{"operations":[{"op":"take","name":"a"}]}"#), "locks_unknown_op");
        assert_eq!(reason(r#"{"operations":[{"op":"get","name":"a#1"}]}"#), "locks_bad_name");
        assert_eq!(reason(r#"{"operations":[{"op":"get","name":""}]}"#), "locks_bad_name");
        assert_eq!(reason(r#"{"operations":[{"op":"acquire","name":"a"}]}"#), "locks_bad_ttl");
        assert_eq!(reason(r#"{"operations":[{"op":"acquire","name":"a","ttlSeconds":0}]}"#), "locks_bad_ttl");
        assert_eq!(
            reason(r#"{"operations":[{"op":"acquire","name":"a","ttlSeconds":1,"limit":1025}]}"#),
            "locks_bad_limit"
        );
        assert_eq!(
            reason(r#"{"operations":[{"op":"acquire","name":"a","ttlSeconds":1.5}]}"#),
            "locks_bad_ttl"
        );
        assert_eq!(reason(r#"{"operations":[{"op":"release","name":"a","token":0}]}"#), "locks_bad_token");
        assert_eq!(
            reason(r#"{"operations":[{"op":"acquire","name":"a","ttlSeconds":1,"owner":"x\u0001"}]}"#),
            "locks_bad_owner"
        );
        assert_eq!(reason(r#"{"operations":[{"op":"get","name":"a","tenant":"t"}]}"#), "locks_unknown_field");
        let many = format!("{{\"operations\":[{}]}}", vec![r#"{"op":"get","name":"a"}"#; 257].join(","));
        assert_eq!(reason(&many), "locks_too_many_ops");
    }
}
