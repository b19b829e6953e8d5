//! A stand-in payments service on loopback for the example refund tool: the tests and the offline
//! demo use it where a real payments API would be.
//!
//! [`Payments`] answers every request with `200 {"refund_id":"r_<n>","status":"refunded"}`, keeps
//! each request's text and `Idempotency-Key`, and can hold its answers (the request is read and
//! counted, the answer waits) until released, so a test can kill a Worker in the middle of a call.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Called with each request as it arrives.
pub type Announce = Box<AnnounceFn>;

/// See [`Announce`].
pub type AnnounceFn = dyn Fn(&Received) + Send + Sync;

/// A running stand-in payments service. Stops when dropped.
#[derive(Debug)]
pub struct Payments {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// The listening address.
    pub addr: std::net::SocketAddr,
    requests: Arc<Mutex<Vec<Received>>>,
    hold: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// One request as received.
#[derive(Clone, Debug)]
pub struct Received {
    /// The request's text: head and body.
    pub text: String,
    /// Its `Idempotency-Key` header, or `""`.
    pub idempotency_key: String,
    /// Its body.
    pub body: String,
    /// Its path, from the request line (`/refunds`).
    pub path: String,
    /// When its body was complete (this machine's wall clock), so a test can order it against
    /// other logs.
    pub at: std::time::SystemTime,
}

impl Payments {
    /// Starts on a free loopback port.
    ///
    /// # Errors
    /// No port could be bound.
    pub async fn start() -> std::io::Result<Payments> {
        Self::serve(TcpListener::bind("127.0.0.1:0").await?, None)
    }

    /// Serves on `listener`; `announce` is called with each request as it arrives (the demo prints
    /// it).
    ///
    /// # Errors
    /// The listener has no local address.
    pub fn serve(listener: TcpListener, announce: Option<Announce>) -> std::io::Result<Payments> {
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (hold, held) = watch::channel(false);
        let announce: Option<Arc<AnnounceFn>> = announce.map(Arc::from);
        let seen = requests.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (seen, mut held, announce) = (seen.clone(), held.clone(), announce.clone());
                tokio::spawn(async move {
                    let Some(received) = read_request(&mut socket).await else { return };
                    if let Some(announce) = &announce {
                        announce(&received);
                    }
                    let n = {
                        let mut seen = seen.lock().expect("payments lock");
                        seen.push(received);
                        seen.len()
                    };
                    let _ = held.wait_for(|held| !*held).await;
                    let body = format!(r#"{{"refund_id":"r_{n}","status":"refunded"}}"#);
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Ok(Payments { url: format!("http://{addr}"), addr, requests, hold, task })
    }

    /// Requests received so far (held ones included).
    pub fn count(&self) -> usize {
        self.requests.lock().expect("payments lock").len()
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<Received> {
        self.requests.lock().expect("payments lock").clone()
    }

    /// Their idempotency keys, in order.
    pub fn keys(&self) -> Vec<String> {
        self.requests().into_iter().map(|r| r.idempotency_key).collect()
    }

    /// Holds every answer until [`Payments::release`].
    pub fn hold(&self) {
        self.hold.send_replace(true);
    }

    /// Answers held and later requests.
    pub fn release(&self) {
        self.hold.send_replace(false);
    }

    /// Waits until `n` requests arrived.
    ///
    /// # Panics
    /// After 90 s without them.
    pub async fn wait_for(&self, n: usize) {
        let start = Instant::now();
        while self.count() < n {
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "payments got {} requests, expected {n}",
                self.count()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Payments {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads one HTTP/1.1 request: the head, then `content-length` bytes of body.
async fn read_request(socket: &mut TcpStream) -> Option<Received> {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let read = socket.read(&mut buf).await.ok()?;
        if read == 0 {
            return None;
        }
        request.extend_from_slice(&buf[..read]);
        let text = String::from_utf8_lossy(&request).into_owned();
        let Some(head_end) = text.find("\r\n\r\n") else { continue };
        let header = |name: &str| {
            text[..head_end].lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
            })
        };
        let length = header("content-length").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
        if request.len() >= head_end + 4 + length {
            let idempotency_key = header("idempotency-key").unwrap_or_default();
            let body = text[head_end + 4..].to_owned();
            let path = text.split_whitespace().nth(1).unwrap_or_default().to_owned();
            return Some(Received { text, idempotency_key, body, path, at: std::time::SystemTime::now() });
        }
    }
}
