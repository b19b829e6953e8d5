//! A scripted Anthropic Messages API on loopback, for tests and the offline demo.
//!
//! [`MockModel`] is the type to read first: it serves `POST /v1/messages` on `127.0.0.1` (SSE exactly as
//! the real API streams it, or JSON when the request does not stream), answers from a script written in
//! the prompt, logs every request, and parks requests at named gates until the test opens them.
//!
//! | module | owns |
//! | --- | --- |
//! | [`script`] | the script language (`say`, `recall`, `call … && call …`, `pause`, `fail`) |
//! | [`plan`] | choosing the answer from a request body (pure; a fake CLI can reuse it) |
//! | [`wire`] | the SSE and JSON bytes of a reply |
//! | [`reply`] | the typed reply the log records |
//! | [`payments`] | a stand-in payments service for the example refund tool |
//! | `server` | routing and HTTP |
//!
//! Point the Claude Code CLI at it with `ANTHROPIC_BASE_URL=<base_url()>` and a dummy
//! `ANTHROPIC_API_KEY`; see this crate's tests for the whole environment.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tollgate_mock_model::MockModel;
//!
//! let mock = MockModel::start().await?;
//! assert!(mock.base_url().starts_with("http://127.0.0.1:"));
//! // A prompt `pause g1 ;; say hi` would park its request here until:
//! mock.open_gate("g1");
//! assert!(mock.gate("g1").open);
//! assert!(mock.requests().is_empty());
//! assert!(mock.wait_for_requests(1, Duration::from_millis(10)).await.is_err());
//! # Ok(()) }
//! ```
//!
//! # Caveats
//!
//! Dropping the mock stops it: parked requests get HTTP 503 and the listener closes in the background.
//! Use [`MockModel::shutdown`] to wait for that. Every request is scripted, whether or not it offers
//! tools (with `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` the CLI makes no tool-less requests of
//! its own).

#![forbid(unsafe_code)]

mod error;
mod gates;
mod log;
pub mod payments;
pub mod plan;
pub mod reply;
pub mod script;
mod server;
pub mod wire;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use error::{StartError, WaitError};
pub use gates::GateStatus;
pub use log::{RecordedRequest, tool_result};
pub use reply::{AssistantReply, ContentBlock, Reply, StopReason};

/// A running mock Messages API. Stops when dropped.
#[derive(Debug)]
pub struct MockModel {
    addr: SocketAddr,
    shared: Arc<server::Shared>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl MockModel {
    /// Starts on `127.0.0.1` at a free port.
    pub async fn start() -> Result<MockModel, StartError> {
        Self::start_on_port(0).await
    }

    /// Starts on `127.0.0.1:<port>` (0: a free port).
    pub async fn start_on_port(port: u16) -> Result<MockModel, StartError> {
        let wanted = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let bind = |source| StartError::Bind { addr: wanted, source };
        let listener = tokio::net::TcpListener::bind(wanted).await.map_err(bind)?;
        let addr = listener.local_addr().map_err(bind)?;
        let shared = Arc::new(server::Shared::new());
        let (stop, stopped) = oneshot::channel::<()>();
        let app = server::app(shared.clone());
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(MockModel { addr, shared, stop: Some(stop), task: Some(task) })
    }

    /// Answers the plain prompt `prompt` as if it were `script` (see [`plan::Scenarios`]).
    pub fn add_scenario(&self, prompt: impl Into<String>, script: impl Into<String>) {
        self.shared.scenarios.write().expect("scenarios lock").insert(prompt.into(), script.into());
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`, for `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every logged request so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.log.all()
    }

    /// The logged model calls (`POST /v1/messages`), oldest first.
    pub fn message_requests(&self) -> Vec<RecordedRequest> {
        self.requests().into_iter().filter(RecordedRequest::is_messages_call).collect()
    }

    /// Waits until at least `count` requests are logged, and returns the log.
    pub async fn wait_for_requests(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<RecordedRequest>, WaitError> {
        self.shared.log.wait_for(count, timeout).await.map_err(|got| WaitError::Requests {
            wanted: count,
            got,
            timeout,
        })
    }

    /// Opens a gate: parked requests go on, later ones pass at once.
    pub fn open_gate(&self, gate: &str) {
        self.shared.gates.set_open(gate, true);
    }

    /// Closes a gate again: later requests park at it.
    pub fn close_gate(&self, gate: &str) {
        self.shared.gates.set_open(gate, false);
    }

    /// A gate's status (a gate never mentioned is closed, with no arrivals).
    pub fn gate(&self, gate: &str) -> GateStatus {
        self.shared.gates.status(gate)
    }

    /// Waits until a request has reached the gate: it is parked there (closed gate) or went through
    /// (open gate).
    pub async fn wait_for_gate(&self, gate: &str, timeout: Duration) -> Result<GateStatus, WaitError> {
        self.wait_for_gate_arrivals(gate, 1, timeout).await
    }

    /// Waits until `count` requests in all have reached the gate.
    pub async fn wait_for_gate_arrivals(
        &self,
        gate: &str,
        count: u64,
        timeout: Duration,
    ) -> Result<GateStatus, WaitError> {
        self.shared
            .gates
            .wait(gate, timeout, |status| status.arrivals >= count)
            .await
            .map_err(|status| WaitError::Gate { gate: gate.to_owned(), wanted: count, timeout, status })
    }

    /// Stops the mock and waits until the listener and every connection are closed.
    pub async fn shutdown(mut self) {
        self.begin_stop();
        if let Some(task) = self.task.take() {
            // A failed accept loop has nothing left to report at shutdown.
            let _ = task.await;
        }
    }

    fn begin_stop(&mut self) {
        self.shared.gates.shut_down();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        self.begin_stop();
    }
}
