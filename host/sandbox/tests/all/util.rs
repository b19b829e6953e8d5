//! Shared helpers: a tools directory made of built guests, a sandbox with a per-binary compile
//! cache, and a recording HTTP server on loopback.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_sandbox::{Manifests, Sandbox, SandboxConfig, ToolSet};

/// A temporary agent directory with a `tools/` subdirectory.
pub struct ToolsDir {
    pub root: tempfile::TempDir,
}

impl ToolsDir {
    pub fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("tools")).unwrap();
        Self { root }
    }

    pub fn tools(&self) -> PathBuf {
        self.root.path().join("tools")
    }

    /// Copies a built component in as `tools/<name>.wasm`.
    pub fn component(self, name: &str, built: &str) -> Self {
        std::fs::copy(built, self.tools().join(format!("{name}.wasm"))).unwrap();
        self
    }

    /// Writes `tools/<name>.toml`.
    pub fn manifest(self, name: &str, toml: &str) -> Self {
        std::fs::write(self.tools().join(format!("{name}.toml")), toml).unwrap();
        self
    }

    /// Writes any file under `tools/`.
    pub fn file(self, name: &str, bytes: &[u8]) -> Self {
        std::fs::write(self.tools().join(name), bytes).unwrap();
        self
    }

    pub async fn load(&self) -> ToolSet {
        match sandbox().load_tools(&self.tools(), &Manifests::default()).await {
            Ok(tools) => tools,
            Err(e) => panic!("loading {} failed: {e}", self.tools().display()),
        }
    }
}

/// A sandbox whose compile cache is shared by the whole test binary.
pub fn sandbox() -> Sandbox {
    static SANDBOX: std::sync::OnceLock<Sandbox> = std::sync::OnceLock::new();
    SANDBOX
        .get_or_init(|| {
            let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cwasm-cache");
            Sandbox::new(SandboxConfig { cache_dir: Some(cache), ..SandboxConfig::default() }).unwrap()
        })
        .clone()
}

/// A request the test server received.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// What a [`TestServer`] answers: a status and a body for each request.
type Responder = dyn Fn(&Received) -> (u16, String) + Send + Sync;

/// An HTTP/1.1 server on 127.0.0.1 that records every request (Content-Length and chunked bodies)
/// and answers through a responder. Stops when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// Answers every request with `status` and `body`.
    pub async fn start(status: u16, body: &'static str) -> Self {
        Self::respond_with(move |_| (status, body.to_string())).await
    }

    /// Answers each request with what `respond` makes of it.
    pub async fn respond_with(respond: impl Fn(&Received) -> (u16, String) + Send + Sync + 'static) -> Self {
        Self::listen("127.0.0.1:0".parse().unwrap(), Arc::new(respond)).await
    }

    /// Answers every request with 200 and `body`, listening on `addr` (another loopback address,
    /// `[::1]`; port 0 picks a free one).
    pub async fn start_on(addr: SocketAddr, body: &'static str) -> Self {
        Self::listen(addr, Arc::new(move |_: &Received| (200, body.to_string()))).await
    }

    async fn listen(addr: SocketAddr, respond: Arc<Responder>) -> Self {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (log, respond) = (log.clone(), respond.clone());
                tokio::spawn(async move {
                    let Some(request) = read_request(&mut socket).await else {
                        log.lock().unwrap().push(Received {
                            method: "CONNECT-ONLY".into(),
                            path: String::new(),
                            headers: Vec::new(),
                            body: String::new(),
                        });
                        return;
                    };
                    let (status, body) = respond(&request);
                    log.lock().unwrap().push(request);
                    let response = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(response.as_bytes()).await;
                });
            }
        });
        Self { addr, received, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The requests received so far, emptying the record.
    pub fn take(&self) -> Vec<Received> {
        std::mem::take(&mut *self.received.lock().unwrap())
    }
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let read =
        async |socket: &mut tokio::net::TcpStream, buf: &mut Vec<u8>, chunk: &mut [u8]| -> Option<()> {
            let n = tokio::time::timeout(Duration::from_secs(10), socket.read(chunk)).await.ok()?.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
            Some(())
        };
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        read(socket, &mut buf, &mut chunk).await?;
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut body = buf[head_end + 4..].to_vec();
    if let Some(length) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        while body.len() < length {
            let before = buf.len();
            read(socket, &mut buf, &mut chunk).await?;
            body.extend_from_slice(&buf[before..]);
        }
        body.truncate(length);
    } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        // Read until the last chunk, then decode.
        while !body.windows(5).any(|w| w == b"0\r\n\r\n") {
            let before = buf.len();
            read(socket, &mut buf, &mut chunk).await?;
            body.extend_from_slice(&buf[before..]);
        }
        let mut decoded = Vec::new();
        let mut rest = &body[..];
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).ok()?.trim(), 16).ok()?;
            if size == 0 {
                break;
            }
            decoded.extend_from_slice(&rest[line_end + 2..line_end + 2 + size]);
            rest = &rest[line_end + 2 + size + 2..];
        }
        body = decoded;
    }
    Some(Received { method, path, headers, body: String::from_utf8_lossy(&body).into_owned() })
}
