//! Encryption at rest (the queue option `encryptionEnabled`): AES-256-GCM,
//! a random 96-bit nonce per message, the key from `QUEEN_ENCRYPTION_KEY`.
//!
//! The engine seals a payload before SQL sees it and opens it in every
//! answer that carries it. A sealed payload is stored as the JSON text
//! `{"\u0000sealed":"v1.<key id>.<base64 of nonce, ciphertext and tag>"}`: the push
//! decoder refuses any payload holding a `\u0000` escape, so only the engine
//! writes that prefix, and SQL can tell a sealed payload by it
//! (`queen.is_sealed`). Answers are built in SQL with the payload's text
//! kept as stored, so opening is a splice of the plaintext over each
//! envelope, and an answer without the prefix is passed on untouched.
//!
//! Which queues are encrypted is a hint kept in memory; `queen.push_rows`
//! refuses an unsealed payload for an encrypted queue (QN409), and the
//! engine then re-reads the flag and sends the call again.

use std::collections::HashSet;
use std::fmt;
use std::sync::RwLock;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::push::PushItem;
use crate::{Engine, EngineError};

/// The envelope's opening text, up to its base64.
pub(crate) const SEALED_PREFIX: &str = r#"{"\u0000sealed":"v1."#;
const NONCE_BYTES: usize = 12;

/// An AES-256-GCM key. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct EncryptionKey {
    cipher: Aes256Gcm,
    /// Fingerprint: 8 hex digits of SHA-256 over a label and the key.
    id: String,
}

impl fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EncryptionKey(..)")
    }
}

/// Why a key string was refused.
#[derive(Debug, thiserror::Error)]
#[error("QUEEN_ENCRYPTION_KEY must be 64 hexadecimal characters (a 256-bit key)")]
pub struct BadKey;

impl EncryptionKey {
    /// A key from 64 hexadecimal characters, as Queen takes it.
    pub fn from_hex(hex: &str) -> Result<Self, BadKey> {
        let hex = hex.trim();
        if hex.len() != 64 || !hex.is_ascii() {
            return Err(BadKey);
        }
        let mut key = [0u8; 32];
        for (i, byte) in key.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| BadKey)?;
        }
        let digest = Sha256::new().chain_update(b"queen-rs encryption key id\0").chain_update(key).finalize();
        let id = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        Ok(EncryptionKey { cipher: Aes256Gcm::new(&key.into()), id })
    }

    /// The key's fingerprint, stored with an encrypted queue and in each
    /// envelope, so a broker with another key is refused, not misled.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The envelope of `plaintext` (a JSON text), itself a JSON text.
    pub(crate) fn seal(&self, plaintext: &str) -> Result<String, EngineError> {
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let sealed = self
            .cipher
            .encrypt(&nonce, plaintext.as_bytes())
            .map_err(|_| EngineError::Encryption("a payload could not be encrypted".into()))?;
        let mut blob = Vec::with_capacity(NONCE_BYTES + sealed.len());
        blob.extend_from_slice(&nonce);
        blob.extend_from_slice(&sealed);
        let b64 = base64::engine::general_purpose::STANDARD.encode(blob);
        Ok(format!("{SEALED_PREFIX}{}.{b64}\"}}", self.id))
    }

    /// The plaintext JSON of an envelope's `<key id>.<base64>` part.
    fn open(&self, sealed: &str) -> Result<String, EngineError> {
        let (key_id, b64) = sealed.split_once('.').unwrap_or(("", sealed));
        if key_id != self.id {
            return Err(EngineError::Encryption(format!(
                "a payload is sealed with key id {key_id}, and this broker's QUEEN_ENCRYPTION_KEY has id {}",
                self.id
            )));
        }
        let unreadable = || {
            EngineError::Encryption(
                "an encrypted payload cannot be decrypted with this broker's QUEEN_ENCRYPTION_KEY \
                 (a different key wrote it, or the stored text was altered)"
                    .into(),
            )
        };
        let blob = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|_| unreadable())?;
        if blob.len() < NONCE_BYTES {
            return Err(unreadable());
        }
        let (nonce, sealed) = blob.split_at(NONCE_BYTES);
        let plain = self.cipher.decrypt(Nonce::from_slice(nonce), sealed).map_err(|_| unreadable())?;
        String::from_utf8(plain).map_err(|_| unreadable())
    }
}

/// The queues this engine believes are encrypted (a hint; SQL fences it).
#[derive(Debug, Default)]
pub(crate) struct SealedQueues(RwLock<HashSet<String>>);

impl SealedQueues {
    fn contains(&self, queue: &str) -> bool {
        self.0.read().unwrap_or_else(|e| e.into_inner()).contains(queue)
    }

    fn is_empty(&self) -> bool {
        self.0.read().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    pub(crate) fn set(&self, queue: &str, encrypted: bool) {
        let mut set = self.0.write().unwrap_or_else(|e| e.into_inner());
        if encrypted {
            set.insert(queue.to_owned());
        } else {
            set.remove(queue);
        }
    }
}

/// Opens every envelope in an answer; an answer without one is returned as is.
pub(crate) fn open_all(key: Option<&EncryptionKey>, text: String) -> Result<String, EngineError> {
    if !text.contains(SEALED_PREFIX) {
        return Ok(text);
    }
    let key = key.ok_or_else(|| {
        EngineError::Encryption(
            "this answer holds payloads encrypted at rest and this broker has no QUEEN_ENCRYPTION_KEY".into(),
        )
    })?;
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find(SEALED_PREFIX) {
        out.push_str(&rest[..at]);
        let after = &rest[at + SEALED_PREFIX.len()..];
        let end = after
            .find("\"}")
            .ok_or_else(|| EngineError::Protocol("an encrypted payload's envelope is cut short".into()))?;
        out.push_str(&key.open(&after[..end])?);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Engine {
    /// Opens the envelopes in an answer built by SQL.
    pub(crate) fn open_sealed(&self, text: String) -> Result<String, EngineError> {
        open_all(self.encryption_key(), text)
    }

    /// Seals the payloads of items bound for queues believed encrypted.
    /// Borrowed as is when no queue is (the common case).
    pub(crate) fn seal_items<'a>(
        &self,
        items: &'a [PushItem],
    ) -> Result<std::borrow::Cow<'a, [PushItem]>, EngineError> {
        let sealed = self.sealed_queues();
        if sealed.is_empty() || !items.iter().any(|i| sealed.contains(&i.queue)) {
            return Ok(std::borrow::Cow::Borrowed(items));
        }
        let key = self.encryption_key().ok_or_else(|| missing_key_for(items, sealed))?;
        let mut out = items.to_vec();
        for item in out.iter_mut().filter(|i| sealed.contains(&i.queue)) {
            let plain = item.payload.as_ref().map_or("null", |p| p.get());
            let envelope = key.seal(plain)?;
            item.payload = Some(
                RawValue::from_string(envelope)
                    .map_err(|e| EngineError::Protocol(format!("sealed payload: {e}")))?,
            );
        }
        Ok(std::borrow::Cow::Owned(out))
    }

    /// Seals the payloads of timers scheduled into queues believed encrypted
    /// (a timer fires its stored payload as is). Borrowed when none is.
    pub(crate) fn seal_timer_ops<'a>(
        &self,
        ops: &'a [crate::timers::TimerOp],
    ) -> Result<std::borrow::Cow<'a, [crate::timers::TimerOp]>, EngineError> {
        use crate::timers::TimerOp;
        let sealed = self.sealed_queues();
        let bound = |op: &TimerOp| matches!(op, TimerOp::Schedule { queue, .. } if sealed.contains(queue));
        if sealed.is_empty() || !ops.iter().any(bound) {
            return Ok(std::borrow::Cow::Borrowed(ops));
        }
        let key = self.encryption_key().ok_or_else(|| {
            EngineError::Encryption(
                "a timer's queue is encrypted at rest and this broker has no QUEEN_ENCRYPTION_KEY".into(),
            )
        })?;
        let mut out = ops.to_vec();
        for op in out.iter_mut() {
            if let TimerOp::Schedule { queue, payload, .. } = op {
                if sealed.contains(queue) {
                    *payload = RawValue::from_string(key.seal(payload.get())?)
                        .map_err(|e| EngineError::Protocol(format!("sealed payload: {e}")))?;
                }
            }
        }
        Ok(std::borrow::Cow::Owned(out))
    }

    /// Re-reads the encryption flag of `queues` after a QN409.
    pub(crate) async fn refresh_sealed(&self, queues: &[String]) -> Result<(), EngineError> {
        let client = self.pool().get().await?;
        let stmt = client
            .prepare_cached("SELECT name, encryption_enabled FROM queen.queues WHERE name = ANY($1)")
            .await?;
        let rows = client.query(&stmt, &[&queues]).await?;
        drop(client);
        for q in queues {
            let encrypted = rows.iter().any(|r| r.get::<_, &str>(0) == q && r.get::<_, bool>(1));
            self.sealed_queues().set(q, encrypted);
        }
        Ok(())
    }
}

fn missing_key_for(items: &[PushItem], sealed: &SealedQueues) -> EngineError {
    let queue = items.iter().find(|i| sealed.contains(&i.queue)).map_or("", |i| i.queue.as_str());
    EngineError::Encryption(format!(
        "queue {queue} is encrypted at rest and this broker has no QUEEN_ENCRYPTION_KEY"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

    #[test]
    fn a_sealed_payload_opens_to_its_exact_text_and_hides_it() {
        let key = EncryptionKey::from_hex(KEY).unwrap();
        let plain = r#"{"card":"4111 1111 1111 1111","n":12345678901234567890.5}"#;
        let sealed = key.seal(plain).unwrap();
        assert!(sealed.starts_with(SEALED_PREFIX));
        assert!(!sealed.contains("4111"));
        serde_json::from_str::<serde_json::Value>(&sealed).expect("an envelope is JSON");
        let answer = format!(r#"{{"messages":[{{"data":{sealed}}},{{"data":{sealed}}},{{"data":7}}]}}"#);
        let opened = open_all(Some(&key), answer).unwrap();
        assert_eq!(opened, format!(r#"{{"messages":[{{"data":{plain}}},{{"data":{plain}}},{{"data":7}}]}}"#));
        // Two seals of one text differ (a fresh nonce each).
        assert_ne!(key.seal(plain).unwrap(), sealed);
    }

    #[test]
    fn a_wrong_or_missing_key_is_a_clear_error_never_garbage() {
        let key = EncryptionKey::from_hex(KEY).unwrap();
        let other = EncryptionKey::from_hex(&"ab".repeat(32)).unwrap();
        let sealed = key.seal("1").unwrap();
        assert!(matches!(open_all(Some(&other), sealed.clone()), Err(EngineError::Encryption(_))));
        assert!(matches!(open_all(None, sealed.clone()), Err(EngineError::Encryption(_))));
        let tampered = sealed.replacen(&format!("{}.", key.id()), &format!("{}.AAAA", key.id()), 1);
        assert!(matches!(open_all(Some(&key), tampered), Err(EngineError::Encryption(_))));
        assert_eq!(open_all(None, "[1,2]".into()).unwrap(), "[1,2]");
    }

    #[test]
    fn keys_are_64_hex_characters() {
        assert!(EncryptionKey::from_hex(KEY).is_ok());
        assert!(EncryptionKey::from_hex(&KEY[..62]).is_err());
        assert!(EncryptionKey::from_hex(&KEY.replace('0', "g")).is_err());
        assert!(EncryptionKey::from_hex(&"é".repeat(32)).is_err());
        assert_eq!(format!("{:?}", EncryptionKey::from_hex(KEY).unwrap()), "EncryptionKey(..)");
    }
}
