//! TLS to PostgreSQL under libpq's names (`sslmode`, `sslrootcert`,
//! `sslcert`, `sslkey`), done with rustls.
//!
//! tokio-postgres knows only `disable`, `prefer` and `require`, and leaves
//! certificate checks to the connector. So the libpq-only options are taken
//! out of the connection string here, before tokio-postgres parses it, and
//! become a rustls configuration that does what libpq would do:
//!
//! | sslmode | encrypted | chain checked | host name checked |
//! | --- | --- | --- | --- |
//! | (absent), `disable` | no | - | - |
//! | `allow`, `prefer` | if the server offers it | no | no |
//! | `require` | yes | only with `sslrootcert` (then like `verify-ca`) | no |
//! | `verify-ca` | yes | yes | no |
//! | `verify-full` | yes | yes | yes |
//!
//! One departure from libpq: with no `sslmode` at all we do not try TLS
//! (libpq's default is `prefer`). A broker's connections are long-lived and
//! local ones dominate; whoever wants TLS says so.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::EngineError;

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP (also what an absent `sslmode` means here).
    Disable,
    /// TLS when the server offers it, nothing checked.
    Prefer,
    /// TLS or no connection; the certificate checked only against `sslrootcert` if given.
    Require,
    /// TLS, the chain checked against `sslrootcert`; any host name.
    VerifyCa,
    /// TLS, the chain and the host name checked.
    VerifyFull,
}

/// The TLS options of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsOptions {
    /// The mode asked for.
    pub mode: SslMode,
    /// CA certificates (PEM) to trust.
    pub root_cert: Option<PathBuf>,
    /// Client certificate (PEM), for servers that ask for one.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    pub key: Option<PathBuf>,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions { mode: SslMode::Disable, root_cert: None, cert: None, key: None }
    }
}

const TLS_KEYS: [&str; 4] = ["sslmode", "sslrootcert", "sslcert", "sslkey"];

/// Splits a libpq URL or key/value string into what tokio-postgres should
/// parse and the TLS options it cannot.
pub fn split_tls_options(conn: &str) -> Result<(String, TlsOptions), EngineError> {
    let mut taken: Vec<(String, String)> = Vec::new();
    let rest = if conn.starts_with("postgres://") || conn.starts_with("postgresql://") {
        match conn.split_once('?') {
            None => conn.to_owned(),
            Some((base, query)) => {
                let mut kept = Vec::new();
                for pair in query.split('&').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                    let key = percent_decode(k);
                    if TLS_KEYS.contains(&key.as_str()) {
                        taken.push((key, percent_decode(v)));
                    } else {
                        kept.push(pair);
                    }
                }
                if kept.is_empty() {
                    base.to_owned()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        let mut kept = Vec::new();
        for (key, raw, value) in key_value_pairs(conn) {
            if TLS_KEYS.contains(&key.as_str()) {
                taken.push((key, value));
            } else {
                kept.push(raw);
            }
        }
        kept.join(" ")
    };
    let mut options = TlsOptions::default();
    for (key, value) in taken {
        match key.as_str() {
            "sslmode" => {
                options.mode = match value.as_str() {
                    "disable" => SslMode::Disable,
                    "allow" | "prefer" => SslMode::Prefer,
                    "require" => SslMode::Require,
                    "verify-ca" => SslMode::VerifyCa,
                    "verify-full" => SslMode::VerifyFull,
                    other => {
                        return Err(EngineError::Unavailable(format!(
                            "bad database URL: sslmode={other:?} is not one of disable, allow, prefer, require, verify-ca, verify-full"
                        )))
                    }
                }
            }
            "sslrootcert" => options.root_cert = Some(PathBuf::from(value)),
            "sslcert" => options.cert = Some(PathBuf::from(value)),
            _ => options.key = Some(PathBuf::from(value)),
        }
    }
    Ok((rest, options))
}

/// `key=value` pairs of a libpq key/value string: (key, the pair as written, unquoted value).
fn key_value_pairs(conn: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut chars = conn.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut key = String::new();
        while let Some(&(_, c)) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while matches!(chars.peek(), Some(&(_, c)) if c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if matches!(chars.peek(), Some(&(_, '='))) {
            chars.next();
            while matches!(chars.peek(), Some(&(_, c)) if c.is_whitespace()) {
                chars.next();
            }
            if matches!(chars.peek(), Some(&(_, '\''))) {
                chars.next();
                while let Some((_, c)) = chars.next() {
                    match c {
                        '\'' => break,
                        '\\' => {
                            if let Some((_, escaped)) = chars.next() {
                                value.push(escaped);
                            }
                        }
                        c => value.push(c),
                    }
                }
            } else {
                while let Some(&(_, c)) = chars.peek() {
                    if c.is_whitespace() {
                        break;
                    }
                    value.push(c);
                    chars.next();
                }
            }
        }
        let end = chars.peek().map(|&(i, _)| i).unwrap_or(conn.len());
        out.push((key, conn[start..end].to_owned(), value));
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(b) = s.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What to connect with: plain TCP, or rustls configured for the mode.
#[derive(Clone)]
pub(crate) enum PgTls {
    Plain,
    Rustls(MakeRustlsConnect),
}

impl TlsOptions {
    /// tokio-postgres's own sslmode for this mode.
    pub(crate) fn pg_mode(&self) -> PgSslMode {
        match self.mode {
            SslMode::Disable => PgSslMode::Disable,
            SslMode::Prefer => PgSslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => PgSslMode::Require,
        }
    }

    /// The connector, with certificates read now so a bad path fails at start-up.
    pub(crate) fn connector(&self) -> Result<PgTls, EngineError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = match (&self.root_cert, self.mode) {
            (_, SslMode::Disable) => return Ok(PgTls::Plain),
            (Some(path), _) => Some(read_roots(path)?),
            (None, SslMode::VerifyCa | SslMode::VerifyFull) => {
                // libpq's default place for the CA file.
                let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
                let default = home.join(".postgresql/root.crt");
                if !default.exists() {
                    return Err(tls_error(format!(
                        "sslmode={} needs sslrootcert=<CA file> (or {})",
                        if self.mode == SslMode::VerifyCa { "verify-ca" } else { "verify-full" },
                        default.display()
                    )));
                }
                Some(read_roots(&default)?)
            }
            (None, _) => None,
        };
        let algorithms = provider.signature_verification_algorithms;
        let verifier: Arc<dyn ServerCertVerifier> = match roots {
            None => Arc::new(Unchecked { algorithms }),
            Some(roots) => {
                let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| tls_error(format!("cannot build the certificate verifier: {e}")))?;
                if self.mode == SslMode::VerifyFull {
                    webpki
                } else {
                    Arc::new(AnyHostName { inner: webpki })
                }
            }
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert)?;
                let key = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| tls_error(format!("cannot read sslkey {}: {e}", key.display())))?;
                builder.with_client_auth_cert(chain, key).map_err(|e| tls_error(e.to_string()))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err(tls_error("sslcert and sslkey go together".to_owned())),
        };
        Ok(PgTls::Rustls(MakeRustlsConnect::new(config)))
    }
}

fn tls_error(msg: String) -> EngineError {
    EngineError::Unavailable(format!("database TLS: {msg}"))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, EngineError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| tls_error(format!("cannot read {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(tls_error(format!("{} holds no certificate", path.display())));
    }
    Ok(certs)
}

fn read_roots(path: &Path) -> Result<RootCertStore, EngineError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots.add(cert).map_err(|e| tls_error(format!("bad CA certificate in {}: {e}", path.display())))?;
    }
    Ok(roots)
}

/// `prefer` and `require` without a CA: encrypted, but whoever answers is
/// believed (libpq does the same). Signatures are still checked, so the
/// session key belongs to the certificate shown.
#[derive(Debug)]
struct Unchecked {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to the CA; the name in it may be any.
#[derive(Debug)]
struct AnyHostName {
    inner: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for AnyHostName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn url_options_are_taken_out() {
        let (rest, tls) = split_tls_options(
            "postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write&sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write");
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert, Some(PathBuf::from("/tmp/ca.pem")));
        let (rest, tls) = split_tls_options("postgres://u@h/db?sslmode=require").unwrap();
        assert_eq!(rest, "postgres://u@h/db");
        assert_eq!(tls.mode, SslMode::Require);
        let (rest, tls) = split_tls_options("postgres://u@h/db").unwrap();
        assert_eq!(rest, "postgres://u@h/db");
        assert_eq!(tls, TlsOptions::default());
    }

    #[test]
    fn key_value_options_are_taken_out() {
        let (rest, tls) =
            split_tls_options("host=h port=5432 sslmode = verify-ca sslrootcert='/a b/ca.pem' dbname=x")
                .unwrap();
        assert_eq!(rest, "host=h port=5432 dbname=x");
        assert_eq!(tls.mode, SslMode::VerifyCa);
        assert_eq!(tls.root_cert, Some(PathBuf::from("/a b/ca.pem")));
        assert!(split_tls_options("host=h sslmode=sometimes").is_err());
    }

    #[test]
    fn verify_full_without_a_ca_file_says_what_is_missing() {
        let tls = TlsOptions { mode: SslMode::VerifyFull, root_cert: None, cert: None, key: None };
        std::env::set_var("HOME", "/nonexistent-home-for-test");
        let err = tls.connector().err().unwrap().to_string();
        assert!(err.contains("sslrootcert"), "{err}");
    }
}
