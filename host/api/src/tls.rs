//! The API server's TLS (rustls with the `ring` provider): its certificate chain and key read
//! from PEM files, and a listener that hands axum each connection after its TLS handshake.
//!
//! It owns checking the files (nothing is served until both load and the key matches the
//! certificate) and the handshakes; reading PEM files, the crypto provider and a client's trusted
//! CAs are `tollgate_api_types::tls`'s.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tollgate_api_types::tls::{TlsError, install_crypto_provider, read_certificates, read_pem};

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; more connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 256;

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
