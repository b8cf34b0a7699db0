//! HTTPS: the broker's certificate and key, loaded once at start-up.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// What serves TLS on accepted connections.
#[derive(Clone)]
pub struct TlsIdentity {
    pub(crate) acceptor: TlsAcceptor,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TlsIdentity")
    }
}

/// Why the certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// A PEM file was missing or unreadable.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// The certificate file held no certificate.
    #[error("{0} holds no certificate")]
    NoCertificate(PathBuf),
    /// rustls refused the pair (a key that does not match, say).
    #[error("the certificate and key cannot be used: {0}")]
    Rustls(#[from] rustls::Error),
}

impl TlsIdentity {
    /// A certificate chain and its private key, both PEM.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Self, TlsSetupError> {
        let read = |path: &Path, e: &dyn std::fmt::Display| TlsSetupError::Read {
            path: path.to_owned(),
            reason: e.to_string(),
        };
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| read(cert, &e))?;
        if chain.is_empty() {
            return Err(TlsSetupError::NoCertificate(cert.to_owned()));
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| read(key, &e))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        // The server speaks HTTP/1.1 only.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsIdentity { acceptor: TlsAcceptor::from(Arc::new(config)) })
    }
}
