//! JWT verification keys from an identity provider's JWKS URL (RFC 7517).
//!
//! Fetched over HTTPS only, kept for `refresh` (Queen's
//! `JWT_JWKS_REFRESH_INTERVAL`, an hour by default), fetched again when a
//! token names a `kid` the set does not hold (a rotated key) or when the set
//! is older than `refresh`. Fetches are one at a time and at most one per
//! `cooldown`, so a flood of tokens with made-up `kid`s costs the identity
//! provider one request per cooldown, not one per token.
//!
//! **Failing closed.** A token is only ever verified with a key from a
//! successful fetch no older than `refresh`: when the URL cannot be read
//! (down, a bad certificate, a body that is not a key set), a token whose key
//! is not in a fresh set is refused (503, retry later), never let in.
//! Symmetric (`oct`) keys and keys marked for encryption are ignored: a
//! broker verifies signatures with public keys only.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};

use crate::auth::AuthConfigError;

/// The largest key set read; a JWKS of a few keys is a few KiB.
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// How the key set is fetched and kept.
#[derive(Debug, Clone)]
pub struct JwksSettings {
    /// The `https://` URL of the key set.
    pub url: String,
    /// How long a fetched set is used before it is fetched again.
    pub refresh: Duration,
    /// The least time between two fetches (unknown `kid`s, a failing URL).
    pub cooldown: Duration,
    /// How long one fetch may take.
    pub timeout: Duration,
    /// Extra trusted CA certificates (PEM) for the URL's certificate, beside
    /// the system's roots: an identity provider on a private CA.
    pub ca_pem: Option<Vec<u8>>,
}

impl JwksSettings {
    /// Queen's defaults: refresh every hour, a 5 s timeout; refetches at
    /// most every 10 s.
    pub fn new(url: impl Into<String>) -> Self {
        JwksSettings {
            url: url.into(),
            refresh: Duration::from_secs(3600),
            cooldown: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
            ca_pem: None,
        }
    }
}

/// One usable key of the set.
struct Key {
    kid: Option<String>,
    /// The JWK's `alg`, when it names one: the only algorithm it verifies.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

impl Key {
    fn verifies(&self, alg: Algorithm) -> bool {
        self.alg.is_none_or(|a| a == alg) && self.key.family() == alg.family()
    }
}

#[derive(Default)]
struct Cache {
    keys: Vec<Key>,
    /// When the keys were fetched; `None` before the first success.
    fetched_at: Option<Instant>,
    /// The last fetch, successful or not (the cooldown counts from it).
    attempted_at: Option<Instant>,
}

/// Why no key verifies a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoKey {
    /// A fresh set holds no key for this `kid` and algorithm.
    Unknown,
    /// No fresh set: the URL could not be read (recently).
    Unavailable,
}

/// The key set of one JWKS URL, shared by every request.
pub(crate) struct Jwks {
    settings: JwksSettings,
    client: reqwest::Client,
    cache: RwLock<Cache>,
    /// Held while fetching: concurrent misses wait for one fetch.
    fetching: tokio::sync::Mutex<()>,
    fetches: AtomicU64,
}

impl std::fmt::Debug for Jwks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jwks").field("url", &self.settings.url).finish()
    }
}

impl Jwks {
    /// Checks the settings (an `https://` URL, a readable CA); fetches nothing yet.
    pub(crate) fn new(settings: JwksSettings) -> Result<Self, AuthConfigError> {
        let bad = |why: String| AuthConfigError::BadJwks(why);
        let url = reqwest::Url::parse(&settings.url).map_err(|e| bad(format!("the URL: {e}")))?;
        if url.scheme() != "https" {
            return Err(bad("the URL must be https:// (keys fetched in clear could be forged)".into()));
        }
        let mut builder = reqwest::Client::builder()
            .https_only(true)
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::limited(3));
        if let Some(pem) = &settings.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| bad(format!("the CA certificate: {e}")))?;
            if certs.is_empty() {
                return Err(bad("the CA file holds no certificate".into()));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder.build().map_err(|e| bad(format!("the HTTPS client: {e}")))?;
        Ok(Jwks {
            settings,
            client,
            cache: RwLock::new(Cache::default()),
            fetching: tokio::sync::Mutex::new(()),
            fetches: AtomicU64::new(0),
        })
    }

    /// How many fetches were attempted (for tests and logs).
    pub(crate) fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::Relaxed)
    }

    /// The key that verifies a token of `alg` naming `kid`; fetches the set
    /// when it is missing, stale, or lacks `kid` (within the cooldown).
    pub(crate) async fn key_for(&self, kid: Option<&str>, alg: Algorithm) -> Result<DecodingKey, NoKey> {
        if let Some(found) = self.cached(kid, alg) {
            return found;
        }
        let _one_at_a_time = self.fetching.lock().await;
        // Another request may have fetched while this one waited.
        if let Some(found) = self.cached(kid, alg) {
            return found;
        }
        let cooling = self.read().attempted_at.is_some_and(|t| t.elapsed() < self.settings.cooldown);
        if !cooling {
            self.refetch().await;
        }
        self.cached(kid, alg).unwrap_or_else(|| Err(self.missing()))
    }

    /// `Some` when the cache decides: a fresh set with the key.
    fn cached(&self, kid: Option<&str>, alg: Algorithm) -> Option<Result<DecodingKey, NoKey>> {
        let cache = self.read();
        let fresh = cache.fetched_at.is_some_and(|t| t.elapsed() < self.settings.refresh);
        if !fresh {
            return None;
        }
        let mut candidates = cache.keys.iter().filter(|k| k.verifies(alg));
        let found = match kid {
            Some(kid) => candidates.find(|k| k.kid.as_deref() == Some(kid)),
            // No kid: only a set with a single key for this algorithm is unambiguous.
            None => match (candidates.next(), candidates.next()) {
                (Some(only), None) => Some(only),
                _ => None,
            },
        };
        found.map(|k| Ok(k.key.clone()))
    }

    /// Why no key was found after a fetch (or a cooldown that forbade one).
    fn missing(&self) -> NoKey {
        let cache = self.read();
        match cache.fetched_at {
            Some(t) if t.elapsed() < self.settings.refresh => NoKey::Unknown,
            _ => NoKey::Unavailable,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.cache.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    async fn refetch(&self) {
        self.fetches.fetch_add(1, Ordering::Relaxed);
        let attempted = Instant::now();
        let result = self.fetch().await;
        let mut cache = self.cache.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        cache.attempted_at = Some(attempted);
        match result {
            Ok(keys) => {
                tracing::info!(url = %self.settings.url, keys = keys.len(), "JWKS fetched");
                cache.keys = keys;
                cache.fetched_at = Some(attempted);
            }
            // The old keys stay only as long as they are fresh; a stale set
            // with a failing URL verifies nothing.
            Err(why) => tracing::warn!(url = %self.settings.url, error = %why, "JWKS fetch failed"),
        }
    }

    async fn fetch(&self) -> Result<Vec<Key>, String> {
        let mut resp = self.client.get(&self.settings.url).send().await.map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("answered {}", resp.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(format!("the key set is larger than {MAX_JWKS_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        parse_key_set(&body)
    }
}

/// The usable keys of a JWKS document; a key we cannot use (another `kty`,
/// a symmetric or encryption key, a damaged one) is skipped, not fatal.
fn parse_key_set(body: &[u8]) -> Result<Vec<Key>, String> {
    #[derive(serde::Deserialize)]
    struct Set {
        keys: Vec<serde_json::Value>,
    }
    let set: Set = serde_json::from_slice(body).map_err(|e| format!("not a JWKS document: {e}"))?;
    let mut keys = Vec::with_capacity(set.keys.len());
    let mut by_kid: HashMap<String, usize> = HashMap::new();
    for value in set.keys {
        let Ok(jwk) = serde_json::from_value::<Jwk>(value) else { continue };
        if matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_) | AlgorithmParameters::Other(_))
            || matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption))
        {
            continue;
        }
        let alg = match jwk.common.key_algorithm {
            None => None,
            Some(ka) => match Algorithm::from_str(&ka.to_string()) {
                Ok(a) => Some(a),
                // An encryption algorithm (RSA-OAEP) or one we do not know.
                Err(_) => continue,
            },
        };
        let Ok(key) = DecodingKey::from_jwk(&jwk) else { continue };
        let kid = jwk.common.key_id.clone();
        // A kid given twice: the first one wins (an ambiguous set must not
        // let the later key decide silently).
        if let Some(k) = &kid {
            if by_kid.insert(k.clone(), keys.len()).is_some() {
                continue;
            }
        }
        keys.push(Key { kid, alg, key });
    }
    Ok(keys)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn only_https_urls() {
        assert!(Jwks::new(JwksSettings::new("http://idp.example/jwks")).is_err());
        assert!(Jwks::new(JwksSettings::new("not a url")).is_err());
        assert!(Jwks::new(JwksSettings::new("https://idp.example/.well-known/jwks.json")).is_ok());
    }

    #[test]
    fn unusable_keys_are_skipped() {
        let set = serde_json::json!({"keys": [
            {"kty": "oct", "kid": "sym", "k": "c2VjcmV0"},
            {"kty": "OKP", "crv": "Ed25519", "kid": "ed", "alg": "EdDSA",
             "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty": "OKP", "crv": "Ed25519", "kid": "enc", "use": "enc",
             "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            {"kty": "XYZ", "kid": "strange"},
            {"kty": "RSA", "kid": "oaep", "alg": "RSA-OAEP", "n": "AQAB", "e": "AQAB"},
        ]});
        let keys = parse_key_set(set.to_string().as_bytes()).unwrap();
        let kids: Vec<_> = keys.iter().map(|k| k.kid.as_deref()).collect();
        assert_eq!(kids, [Some("ed")]);
        assert!(keys[0].verifies(Algorithm::EdDSA));
        assert!(!keys[0].verifies(Algorithm::RS256));
        assert!(parse_key_set(b"[]").is_err());
    }
}
