//! TLS for the HTTP API (rustls with the `ring` provider): the server's certificate chain and key
//! read from PEM files, a listener that hands axum each connection after its TLS handshake, and
//! the CA certificates a client trusts.
//!
//! It owns reading and checking the PEM files (every failure names the file and the reason, and
//! nothing is served until both files load and the key matches the certificate) and the
//! handshakes; it does not own what is served over them (`tollgate-api`) or the client's calls
//! ([`crate::client`]).
//!
//! # Caveats
//! - reqwest is built with rustls but without a provider of its own: every process that builds a
//!   `reqwest::Client` must call [`install_crypto_provider`] first (the `tollgate` binary and
//!   [`crate::client::ApiClient`] do); otherwise reqwest panics saying so.
//! - The certificate is read once at start; a renewed certificate needs a restart.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The largest PEM file read (a chain of a few certificates is a few KiB).
const MAX_PEM_BYTES: u64 = 1024 * 1024;
/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; more connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;

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

/// Reads a PEM file of at most [`MAX_PEM_BYTES`].
fn read_pem(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
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

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
///
/// # Errors
/// The file cannot be read, is not PEM, or holds no private key.
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    const WHAT: &str = "private key";
    let bytes = read_pem(WHAT, path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::BadPem {
        what: WHAT,
        path: path.to_owned(),
        reason: match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "it holds no `PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY` section".to_owned()
            }
            other => format!("it is not valid PEM ({other})"),
        },
    })
}

/// The server's TLS configuration from a PEM certificate chain (leaf first) and its private key.
///
/// # Errors
/// Either file is missing or unparsable, or the key does not match the certificate.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    install_crypto_provider();
    let chain = read_certificates("certificate", cert)?;
    let private_key = read_private_key(key)?;
    let mismatch = |reason: String| TlsError::Mismatch { cert: cert.to_owned(), key: key.to_owned(), reason };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| mismatch(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(|e| {
            mismatch(match e {
                rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
                    "the key's public key is not the certificate's (a key of another certificate?)".to_owned()
                }
                other => other.to_string(),
            })
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A TCP listener whose connections arrive TLS-established: handshakes run in their own tasks
/// (a slow or failing client holds up no other), at most `MAX_HANDSHAKES` at once, each within
/// `HANDSHAKE_TIMEOUT`; a failed handshake is logged and dropped.
#[derive(Debug)]
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Serves TLS with `config` on `listener`.
    ///
    /// # Errors
    /// The listener has no local address.
    pub fn new(listener: TcpListener, config: Arc<ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let acceptor = tokio::spawn(accept_loop(listener, TlsAcceptor::from(config), tx));
        Ok(TlsListener { local, ready, acceptor })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    tx: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // As axum's own listener does: out of descriptors and the like pass.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Server-Sent Events are small writes: see `commands::serve` on TCP_NODELAY.
        let _ = tcp.set_nodelay(true);
        let (acceptor, tx) = (acceptor.clone(), tx.clone());
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = tx.send((stream, peer)).await;
                }
                Ok(Err(error)) => tracing::info!(%peer, %error, "a TLS handshake failed"),
                Err(_) => tracing::info!(%peer, "a TLS handshake timed out"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop ended (it never does while the listener lives).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
