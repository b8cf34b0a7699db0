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
//!
//! Keys: one current key seals, retired keys of a ring
//! (`QUEEN_ENCRYPTION_KEYS`) still open. What SQL cannot do, sealing stored
//! rows, is a pass here (`reseal_tables`): after a configure turns a queue's
//! encryption on, for a plain timer about to fire, and for `rotate`.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, RwLock};

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine as _;
use sha2::{Digest, Sha256};

use crate::db::Pool;
use crate::push::PushItem;
use crate::EngineError;

/// The envelope's opening text, up to its base64.
pub(crate) const SEALED_PREFIX: &str = r#"{"\u0000sealed":"v1."#;
const NONCE_BYTES: usize = 12;

/// The keys of encryption at rest: the current one, which seals every new
/// write, and the retired ones a rotation still opens. Its `Debug` never
/// shows a key.
#[derive(Clone)]
pub struct EncryptionKey {
    cipher: Aes256Gcm,
    /// Fingerprint: 8 hex digits of SHA-256 over a label and the key.
    id: String,
    /// Retired keys (id, cipher): opened, never used to seal.
    retired: Arc<Vec<(String, Aes256Gcm)>>,
}

impl fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EncryptionKey(..)")
    }
}

/// Why a key string was refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadKey(String);

fn parse_hex(hex: &str, var: &str) -> Result<(Aes256Gcm, String), BadKey> {
    let hex = hex.trim();
    let bad = || BadKey(format!("{var} must hold 64 hexadecimal characters (a 256-bit key)"));
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(bad());
    }
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    let digest = Sha256::new().chain_update(b"queen-rs encryption key id\0").chain_update(key).finalize();
    let id = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    Ok((Aes256Gcm::new(&key.into()), id))
}

impl EncryptionKey {
    /// A key from 64 hexadecimal characters, as Queen takes it.
    pub fn from_hex(hex: &str) -> Result<Self, BadKey> {
        let (cipher, id) = parse_hex(hex, "QUEEN_ENCRYPTION_KEY")?;
        Ok(EncryptionKey { cipher, id, retired: Arc::new(Vec::new()) })
    }

    /// Several keys, `QUEEN_ENCRYPTION_KEYS`: comma-separated entries
    /// `[*][label:]hex`, the current one marked `*` (optional when there is
    /// one). Labels are for people; rows name a key by its fingerprint, so a
    /// label can never be attached to the wrong key.
    pub fn from_ring(spec: &str) -> Result<Self, BadKey> {
        const VAR: &str = "QUEEN_ENCRYPTION_KEYS";
        let mut current = None;
        let mut retired = Vec::new();
        let entries: Vec<&str> = spec.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
        for entry in &entries {
            let (starred, rest) = match entry.strip_prefix('*') {
                Some(rest) => (true, rest),
                None => (false, *entry),
            };
            let hex = rest.rsplit_once(':').map_or(rest, |(_, hex)| hex);
            let (cipher, id) = parse_hex(hex, VAR)?;
            if starred || entries.len() == 1 {
                if current.is_some() {
                    return Err(BadKey(format!("{VAR} marks more than one key current (*)")));
                }
                current = Some((cipher, id));
            } else {
                retired.push((id, cipher));
            }
        }
        let (cipher, id) = current.ok_or_else(|| {
            BadKey(format!("{VAR} must mark its current key with * (as in old:HEX,*new:HEX)"))
        })?;
        retired.retain(|(other, _)| *other != id);
        Ok(EncryptionKey { cipher, id, retired: Arc::new(retired) })
    }

    /// The current key's fingerprint, stored with an encrypted queue and in
    /// each envelope, so a broker with another key is refused, not misled.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Every key id this broker opens, the current one first.
    pub fn ids(&self) -> Vec<String> {
        std::iter::once(self.id.clone()).chain(self.retired.iter().map(|(id, _)| id.clone())).collect()
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

    /// The plaintext JSON of an envelope's `<key id>.<base64>` part, with
    /// whichever of this broker's keys sealed it.
    fn open(&self, sealed: &str) -> Result<String, EngineError> {
        let (key_id, b64) = sealed.split_once('.').unwrap_or(("", sealed));
        let cipher = if key_id == self.id {
            &self.cipher
        } else {
            match self.retired.iter().find(|(id, _)| id == key_id) {
                Some((_, cipher)) => cipher,
                None => {
                    return Err(EngineError::Encryption(format!(
                        "a payload is sealed with key id {key_id}, which is not among this broker's keys \
                         (ids {}); add it to QUEEN_ENCRYPTION_KEYS",
                        self.ids().join(", ")
                    )))
                }
            }
        };
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
        let plain = cipher.decrypt(Nonce::from_slice(nonce), sealed).map_err(|_| unreadable())?;
        String::from_utf8(plain).map_err(|_| unreadable())
    }

    /// `text` sealed with the current key: a plain JSON text sealed, an
    /// envelope of another key opened and sealed again. `None` when it
    /// already is (SQL NULL counts as JSON `null`).
    pub(crate) fn reseal(&self, text: Option<&str>) -> Result<Option<String>, EngineError> {
        let text = text.unwrap_or("null");
        let plain = match text.strip_prefix(SEALED_PREFIX) {
            Some(rest) if rest.starts_with(&format!("{}.", self.id)) => return Ok(None),
            Some(rest) => {
                let body = rest.strip_suffix("\"}").ok_or_else(|| {
                    EngineError::Protocol("an encrypted payload's envelope is cut short".into())
                })?;
                self.open(body)?
            }
            None => text.to_owned(),
        };
        Ok(Some(self.seal(&plain)?))
    }
}

/// The queues this engine believes are encrypted (a hint; SQL fences it).
#[derive(Debug, Default)]
pub(crate) struct SealedQueues(RwLock<HashSet<String>>);

impl SealedQueues {
    pub(crate) fn contains(&self, queue: &str) -> bool {
        self.0.read().unwrap_or_else(|e| e.into_inner()).contains(queue)
    }

    pub(crate) fn is_empty(&self) -> bool {
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

/// The tables whose rows hold payloads that may be sealed, in pass order.
pub const SEALED_TABLES: [&str; 4] = ["messages", "dead_letters", "timers", "stream_state"];

/// The key before every row of a table, for `queen.reseal_page`.
fn first_key(table: &str) -> [String; 3] {
    const NIL: &str = "00000000-0000-0000-0000-000000000000";
    match table {
        "messages" => [NIL.into(), "-1".into(), String::new()],
        "dead_letters" => ["0".into(), String::new(), String::new()],
        "stream_state" => [NIL.into(), NIL.into(), String::new()],
        _ => [String::new(), String::new(), String::new()],
    }
}

/// Seals with `key`'s current key every row of `tables` (of `queue`, or
/// of all queues) not already sealed with it: plain rows of encrypted
/// queues, and rows sealed with a retired key. Pages of `batch` rows, each
/// read, sealed here and written back over its unchanged text in its own
/// short transaction, so the pass runs beside live brokers and a pass cut
/// short is simply run again. `on_page` hears each page's table and count.
pub(crate) async fn reseal_tables(
    pool: &Pool,
    key: &EncryptionKey,
    queue: Option<&str>,
    tables: &[&str],
    batch: i32,
    mut on_page: impl FnMut(&str, u64),
) -> Result<u64, EngineError> {
    let batch = batch.max(1);
    let mut total = 0u64;
    for table in tables {
        let mut at = first_key(table);
        loop {
            let client = pool.get().await?;
            let stmt = client
                .prepare_cached("SELECT k1, k2, k3, old FROM queen.reseal_page($1, $2, $3, $4, $5, $6, $7)")
                .await?;
            let rows =
                client.query(&stmt, &[table, &at[0], &at[1], &at[2], &queue, &key.id(), &batch]).await?;
            let (mut k1, mut k2, mut k3, mut old, mut new) = (vec![], vec![], vec![], vec![], vec![]);
            for row in &rows {
                let before: Option<String> = row.try_get(3)?;
                if let Some(sealed) = key.reseal(before.as_deref())? {
                    k1.push(row.try_get::<_, String>(0)?);
                    k2.push(row.try_get::<_, String>(1)?);
                    k3.push(row.try_get::<_, String>(2)?);
                    old.push(before);
                    new.push(sealed);
                }
            }
            if let Some(last) = rows.last() {
                at = [last.try_get(0)?, last.try_get(1)?, last.try_get(2)?];
            }
            if !new.is_empty() {
                let stmt = client.prepare_cached("SELECT queen.reseal_apply($1, $2, $3, $4, $5, $6)").await?;
                let n: i32 =
                    client.query_one(&stmt, &[table, &k1, &k2, &k3, &old, &new]).await?.try_get(0)?;
                total += n.max(0) as u64;
                on_page(table, n.max(0) as u64);
            }
            if rows.len() < batch as usize {
                break;
            }
        }
    }
    Ok(total)
}

/// What `queen encryption rotate` did.
#[derive(Debug, Clone, Default)]
pub struct RotateReport {
    /// Rows sealed again (or sealed for the first time) with the current key.
    pub sealed: u64,
    /// Key ids still found in rows after the pass (a broker still sealing
    /// with an old current key); empty when the rotation is complete.
    pub remaining: Vec<String>,
}

/// `queen encryption rotate`: moves every encrypted queue to the current
/// key, re-seals every row in pages of `batch` (online, resumable), and
/// forgets the retired keys once no row is sealed with them.
pub async fn rotate(
    db: &crate::DbConfig,
    key: &EncryptionKey,
    batch: i32,
    on_page: impl FnMut(&str, u64),
) -> Result<RotateReport, EngineError> {
    let pool = Pool::new(db.pool()?, db.prepared_statements);
    {
        let mut client = pool.get().await?;
        crate::migrate(&mut client).await?;
        let stmt = client.prepare_cached(include_str!("../sql/statements/seal_rotate_adopt.sql")).await?;
        client.execute(&stmt, &[&key.id()]).await?;
    }
    let sealed = reseal_tables(&pool, key, None, &SEALED_TABLES, batch, on_page).await?;
    let client = pool.get().await?;
    let keep = vec![key.id().to_owned()];
    let stmt = client.prepare_cached("SELECT queen.sealed_key_ids_other_than($1)").await?;
    let remaining: Vec<String> = client.query_one(&stmt, &[&keep]).await?.try_get(0)?;
    if remaining.is_empty() {
        let stmt = client.prepare_cached(include_str!("../sql/statements/seal_keys_keep_only.sql")).await?;
        client.execute(&stmt, &[&key.id()]).await?;
    }
    Ok(RotateReport { sealed, remaining })
}

pub(crate) fn missing_key_for(items: &[PushItem], sealed: &SealedQueues) -> EngineError {
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
