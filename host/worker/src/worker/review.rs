//! The options factory's review of the calls a segment's end leaves waiting for approval: each
//! interrupt the transition opens is shown to the factory's `review` export with the session's
//! recent tool records, and its answer (or, when the review fails, a note saying so and no risk)
//! is stamped into the interrupt's request before the commit, with the approvers a high risk
//! needs ([`tollgate_engine::review`]).
//!
//! A review never holds an approval back: an error, a trap or the factory's time limit is a
//! failed review, and a transcript the store cannot read is reviewed without records.

use std::collections::HashMap;

use serde_json::Value;
use tollgate_engine::catalog::DEFAULT_TOOL_SERVER_NAME;
use tollgate_engine::review::{self, PendingCall, Review};
use tollgate_engine::session::{CallEntry, ItemKind, Transition};
use tracing::warn;

use super::Worker;
use tollgate_sessions::reads;

/// Reviews each interrupt `transition` opens, when the agent's factory exports `review`. `calls`
/// are the session's calls (for the status of its deferred ones).
pub(super) async fn review_approvals(
    worker: &Worker,
    session_id: &str,
    transition: &mut Transition,
    calls: &[CallEntry],
) {
    let Some(factory) = worker.agent.factory().filter(|factory| factory.has_review()) else { return };
    if transition.interrupts.is_empty() {
        return;
    }
    let entries = match stored_entries(worker, session_id).await {
        Ok(entries) => entries,
        Err(err) => {
            warn!(session = %session_id, error = %err, "the transcript could not be read for the review: reviewed without the session's tool records");
            Vec::new()
        }
    };
    // The turn in progress keeps its entries in the run state until it ends; a transcript item
    // the transition writes may hold them too (a record seen twice counts once).
    let turn_entries =
        transition.run_state.iter().flat_map(|state| &state.turn_entries).map(|e| e.get().to_owned());
    let new_items = transition.items.iter().filter(|item| item.kind == ItemKind::ClaudeTranscript);
    let entries: Vec<String> = entries
        .into_iter()
        .chain(new_items.flat_map(|item| body_entries(item.body.get())))
        .chain(turn_entries)
        .collect();
    let recent =
        review::recent_tool_records(entries.iter().map(String::as_str), calls, DEFAULT_TOOL_SERVER_NAME);
    let mut reviews = HashMap::new();
    for interrupt in &transition.interrupts {
        let request = &interrupt.request;
        let call = PendingCall {
            session_id: session_id.to_owned(),
            turn_id: request.turn_id.clone(),
            tool_call_id: request.tool_call_id.clone(),
            tool_name: request.tool_name.clone(),
            arguments: request.arguments.to_string(),
            effect: request.effect.clone(),
        };
        let found = match factory.review_call(&call, &recent).await {
            Ok(Some(found)) => found,
            Ok(None) => continue,
            Err(err) => {
                warn!(session = %session_id, interrupt = %interrupt.interrupt_id, error = %err, "the review of a call failed; it waits for approval without one");
                Review::failed(&err.to_string())
            }
        };
        reviews.insert(interrupt.interrupt_id.clone(), found);
    }
    let policies = &worker.agent.config.policies;
    review::with_review(
        transition,
        |interrupt_id, _| reviews.remove(interrupt_id),
        |tool| policies.high_risk_approvers(tool),
    );
}

/// The session's stored transcript entries, oldest first: its chunks' lines, or for a session
/// stored before the chunks, its transcript items' entries.
async fn stored_entries(
    worker: &Worker,
    session_id: &str,
) -> Result<Vec<String>, tollgate_store::StoreError> {
    let store = worker.store.as_ref();
    let stored = store.read_transcript(session_id).await?;
    if stored.chunked {
        return Ok(stored.chunks.iter().flat_map(|chunk| chunk.lines()).map(str::to_owned).collect());
    }
    let items = reads::read_all_items_of_kind(store, session_id, ItemKind::ClaudeTranscript).await?;
    Ok(items.iter().flat_map(|item| body_entries(item.body.get())).collect())
}

/// The entries of a transcript item's body (`{"entries": [...]}`), as JSON text.
fn body_entries(body: &str) -> Vec<String> {
    let Ok(body) = serde_json::from_str::<Value>(body) else { return Vec::new() };
    body.get("entries").and_then(Value::as_array).into_iter().flatten().map(Value::to_string).collect()
}
