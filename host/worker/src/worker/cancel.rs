//! Cancelled turns in the Worker: a claimed step of a session with a pending cancel request
//! commits `tollgate_engine::session::cancel::on_cancel` instead of running ([`apply`]), and a
//! running segment watches for one ([`watch`]) so its CLI is interrupted at once.
//!
//! The request reaches this Worker through the store, whichever process took it: it appends a
//! `cancel_requested` event, which wakes the session's event readers here (PostgreSQL `NOTIFY`,
//! or the SQLite file's watch for another process's commits), and queues a step that waits on an
//! interrupt. [`watch`] reads the request at every such wake-up, and every [`CANCEL_POLL`] at the
//! latest (a wake-up may be lost).
//!
//! # Caveats
//!
//! - A tool step (`CallTool`, `CallSingleAttemptTool`) already running is not interrupted: it
//!   finishes and records its call, and the step after it applies the cancel.
//! - The watch reads one row per wake-up of the session's readers, and those include the
//!   segment's own event flushes (every 200 ms while it streams).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tollgate_engine::session::cancel::{CancelRequest, on_cancel};
use tollgate_engine::session::{EngineError, RunState, StepInput};
use tollgate_store::{Claimed, PendingCancel, Store};
use tracing::{info, warn};

use super::{StepError, Worker};
use tollgate_sessions::reads;

/// The longest a running segment's Worker goes without reading the cancel request.
pub const CANCEL_POLL: Duration = Duration::from_secs(2);

/// Ends the turn of `claimed`'s step cancelled, as `request` asked: the engine's transition,
/// with `cost_usd` (what a segment interrupted for it cost) added to the session's spend.
pub(super) async fn apply(
    worker: &Worker,
    claimed: &Claimed,
    request: PendingCancel,
    cost_usd: f64,
) -> Result<(), StepError> {
    let session_id = &claimed.step.session_id;
    let store = worker.store.as_ref();
    let session = store.session(session_id).await?.ok_or_else(|| {
        EngineError::Inconsistent(format!("step {} of a missing session", claimed.step.step_id))
    })?;
    let state = RunState::parse(session.run_state.get())?;
    let step = StepInput::parse(&claimed.step.kind, claimed.step.payload.get())?;
    let prompts = reads::prompts_after(store, session_id, state.prompts_through).await?;
    let calls = super::run_model::read_calls(store, session_id).await?;
    let request = CancelRequest { requested_by: request.requested_by, requested_at: request.requested_at };
    let mut transition = on_cancel(&step, &state, &reads::history(&prompts), &calls, &request)?;
    if cost_usd > 0.0 {
        let mut next = transition.run_state.take().unwrap_or_else(|| state.clone());
        next.cost_usd += cost_usd;
        transition.run_state = Some(next);
    }
    info!(session = %session_id, step = claimed.step.step_id, kind = %claimed.step.kind,
        cancelled_by = %request.requested_by, "turn cancelled");
    worker.commit(claimed, transition).await?;
    Ok(())
}

/// A running segment's watch for a cancel request: [`CancelWatch::signal`] turns `true` once the
/// session has one. The watching task stops when this is dropped.
pub(super) struct CancelWatch {
    /// Turns `true` once asked.
    pub(super) signal: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CancelWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching session `session_id` for a cancel request (see the module docs).
pub(super) fn watch(store: Arc<dyn Store>, session_id: &str) -> CancelWatch {
    let (asked, signal) = watch::channel(false);
    // Subscribed before the first read, so a request committed in between still wakes it.
    let mut woken = store.event_signal(session_id);
    let session_id = session_id.to_owned();
    let task = tokio::spawn(async move {
        loop {
            match store.pending_cancel(&session_id).await {
                Ok(Some(_)) => {
                    let _ = asked.send(true);
                    return;
                }
                Ok(None) => {}
                Err(err) => warn!(session = %session_id, error = %err, "could not read the cancel request"),
            }
            woken.wait(CANCEL_POLL).await;
        }
    });
    CancelWatch { signal, task }
}
