//! The sandbox's limits on the host side: hostile guests that try to make the host itself use
//! memory or time past the tool's `memory_mb` and `timeout_ms`, or to forge its log, or to read
//! a secret out of it. Each case is followed by a call that must work.
//!
//! A binary of its own, its tests one at a time ([`serial`]): they measure the process's peak
//! memory, which tests running beside them would disturb.
//!
//! - `host_memory`: a huge request body to a denied host, hoarded header sets;
//! - `schemas`: input schemas that explode the validator, refused at load;
//! - `names_and_logs`: built-in names in another case, forged log lines;
//! - `secrets`: a config secret never reaches a log line;
//! - `zero_writes`: zero-length writes in a loop to stdout, stderr and a request body.

#[path = "../all/util.rs"]
#[allow(dead_code)]
mod util;

mod host_memory;
mod names_and_logs;
mod schemas;
mod secrets;
mod zero_writes;

use std::io::Write;
use std::sync::{Arc, Mutex};

use tollgate_sandbox::ToolSet;
use tollgate_test_guests as guests;

use crate::util::ToolsDir;

/// Runs the tests of this binary one at a time.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// The hostile guest with `manifest`, loaded.
pub async fn hostile(manifest: &str) -> (ToolsDir, ToolSet) {
    let dir = ToolsDir::new().component("hostile", guests::HOSTILE).manifest("hostile", manifest);
    let tools = dir.load().await;
    (dir, tools)
}

/// The proof that the sandbox still works: a fresh load and an ordinary call.
pub async fn assert_a_working_call_follows() {
    let (_dir, tools) = hostile("").await;
    let output = tools.call("echo", r#"{"text":"still here"}"#, None).await.unwrap();
    assert_eq!(output.text(), "still here (attempt 1, key None)");
}

/// The process's resident memory now, in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The process's peak resident memory since the last reset, in bytes (`VmHWM`).
fn peak_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// How far the process's resident memory rose above where it stood while `body` ran.
pub async fn memory_growth<R>(body: impl AsyncFnOnce() -> R) -> (R, u64) {
    // Writing 5 to clear_refs resets the peak (Linux ≥ 4.0).
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak resident memory");
    let before = resident_bytes();
    let result = body().await;
    let peak = peak_bytes().max(resident_bytes());
    (result, peak.saturating_sub(before))
}

/// Everything logged while it is held, on this thread (the tests' runtime is single-threaded, so
/// every call's events land here): every level of every target, except wasmtime's own TRACE
/// tracing of each wasi call, which prints the strings a guest passes (a URL's path and query),
/// whatever the guest chose to put there.
pub struct CapturedLog {
    buffer: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl CapturedLog {
    /// Starts capturing, until the value is dropped.
    pub fn start() -> Self {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = SharedBuffer(buffer.clone());
        let filter = tracing_subscriber::EnvFilter::new("trace,wasmtime_wasi=debug,wasmtime_wasi_http=debug");
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        Self { buffer, _guard: tracing::subscriber::set_default(subscriber) }
    }

    /// Everything logged so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap()).into_owned()
    }
}

#[derive(Clone)]
struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
