//! Replay from records: what a resumed segment answers for the turn's recorded calls.
//!
//! The pending deferred call replays its final record (a custom tool's record is served by the
//! MCP server; an approved CLI tool runs inside the CLI with the recorded input; a rejected or
//! failed CLI tool is denied with its text). Every other recorded tool use ID is denied.

use super::call::Decided;
use super::{DenyReason, Gate, Origin, ToolCall};
use crate::catalog::{ToolKind, ToolRef};
use crate::record::{Outcome, ToolCallRecord};
use crate::texts;

impl Gate {
    /// This segment resumes the turn's deferred call, which has this final record.
    pub fn resuming(mut self, pending: ToolCallRecord) -> Self {
        self.pending = Some(pending);
        self
    }

    /// The turn's other final records (calls an earlier segment already resumed). A call under
    /// one of their IDs is denied; the pending record, if listed again, still replays.
    pub fn with_turn_records(mut self, records: impl IntoIterator<Item = ToolCallRecord>) -> Self {
        self.recorded.extend(records.into_iter().map(|record| record.tool_call_id));
        self
    }

    /// The pending deferred call this segment resumes.
    pub fn pending(&self) -> Option<&ToolCallRecord> {
        self.pending.as_ref()
    }

    /// The pending call's custom tool when this attempt's listing lacks it: the MCP server must
    /// still list it (replay-only), or the resumed CLI ends with `tool_deferred_unavailable`
    /// (docs/PROTOCOL.md, "Resume"). A new call of it is still denied.
    pub fn replay_only_tool(&self) -> Option<&str> {
        self.pending
            .as_ref()
            .filter(|pending| {
                pending.kind == ToolKind::Custom && self.catalog.annotations(&pending.tool_name).is_none()
            })
            .map(|pending| pending.tool_name.as_str())
    }

    /// The answer for a call under a recorded tool use ID, or `None` for a new call.
    pub(super) fn recorded_call(&self, tool: ToolRef<'_>, call: &ToolCall) -> Option<Decided> {
        if self.inline.knows(&call.tool_use_id) {
            // An inline write an earlier attempt of this segment recorded: decided with the others.
            return self.inline.foreign_call(tool, call);
        }
        if let Some(pending) =
            self.pending.as_ref().filter(|pending| pending.tool_call_id == call.tool_use_id)
        {
            return Some(replay(pending, tool, call));
        }
        self.recorded.contains(&call.tool_use_id).then(|| {
            Decided::denied(
                DenyReason::RecordedUnderThisId,
                texts::render(texts::RECORDED_UNDER_THIS_ID, &call.tool_name),
            )
        })
    }
}

/// The decision for the pending call of a resumed segment: its record, if the call is the
/// record's own tool from the main conversation.
fn replay(pending: &ToolCallRecord, tool: ToolRef<'_>, call: &ToolCall) -> Decided {
    let own_tool = match (pending.kind, tool) {
        (ToolKind::Custom, ToolRef::Custom { name, .. }) | (ToolKind::Cli, ToolRef::Cli { name }) => {
            name == pending.tool_name
        }
        _ => false,
    };
    if !own_tool || call.origin != Origin::Main {
        return Decided::denied(
            DenyReason::RecordedUnderThisId,
            texts::render(texts::RECORDED_UNDER_THIS_ID, &call.tool_name),
        );
    }
    match (&pending.outcome, pending.kind) {
        (_, ToolKind::Custom) | (Outcome::Succeeded { .. }, ToolKind::Cli) => {
            Decided::Replayed { record: Box::new(pending.clone()), served: false }
        }
        (Outcome::Rejected { message }, ToolKind::Cli) => {
            Decided::denied(DenyReason::Rejected, texts::rejection(message.as_deref()))
        }
        (outcome, ToolKind::Cli) => {
            Decided::denied(DenyReason::RecordedFailure, outcome.tool_result(&call.tool_name).text)
        }
    }
}
