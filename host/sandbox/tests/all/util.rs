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

/// An HTTP/1.1 server on 127.0.0.1 that records every request and answers with `status` and
/// `body`. Stops when dropped.
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
    pub async fn start(status: u16, body: &'static str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let log = log.clone();
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
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        let n = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut chunk)).await.ok()?.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize =
        headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..]).into_owned();
    Some(Received { method, path, headers, body })
}
