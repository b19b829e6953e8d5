//! TLS for the HTTP API as both ends share it (rustls with the `ring` provider): the crypto
//! provider, reading PEM files (every failure names the file and the reason), and the CA
//! certificates a client trusts. The server's side (its certificate and key, the handshaking
//! listener) is `tollgate-api`'s `tls`; the client's calls are [`crate::client`]'s.
//!
//! # Caveats
//! - reqwest is built with rustls but without a provider of its own: every process that builds a
//!   `reqwest::Client` must call [`install_crypto_provider`] first (the `tollgate` binary and
//!   [`crate::client::ApiClient`] do); otherwise reqwest panics saying so.
//! - The certificate is read once at start; a renewed certificate needs a restart.

use std::io::Read;
use std::path::{Path, PathBuf};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The largest PEM file read (a chain of a few certificates is a few KiB).
const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// A certificate or key file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The file could not be read.
    #[error("cannot read the {what} file {}: {source}", path.display())]
    Read {
        /// `certificate`, `private key` or `CA certificate`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than a PEM file of this kind can be.
    #[error("the {what} file {} is larger than {MAX_PEM_BYTES} bytes; it is not a PEM file", path.display())]
    TooLarge {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
    },
    /// The file is not PEM, or holds no item of the kind needed.
    #[error("the {what} file {} is not usable: {reason}", path.display())]
    BadPem {
        /// What the file should hold.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The key does not belong to the certificate, or rustls refused the pair.
    #[error("the private key {} does not fit the certificate {}: {reason}", key.display(), cert.display())]
    Mismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// What rustls said.
        reason: String,
    },
}

/// Makes `ring` the process's rustls provider, once; later calls do nothing.
pub fn install_crypto_provider() {
    // Fails only when a provider is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Reads a PEM file of at most `MAX_PEM_BYTES` (1 MiB).
///
/// # Errors
/// The file cannot be read, or is larger.
pub fn read_pem(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let read = |source| TlsError::Read { what, path: path.to_owned(), source };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(TlsError::TooLarge { what, path: path.to_owned() });
    }
    Ok(bytes)
}

/// The certificates of a PEM file, at least one.
///
/// # Errors
/// The file cannot be read, is not PEM, or holds no `CERTIFICATE` section.
pub fn read_certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read_pem(what, path)?;
    let bad = |reason: String| TlsError::BadPem { what, path: path.to_owned(), reason };
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("it is not valid PEM ({e})")))?;
    if certs.is_empty() {
        return Err(bad("it holds no `-----BEGIN CERTIFICATE-----` section".to_owned()));
    }
    Ok(certs)
}
