//! Recorded inline writes: an approval-free `idempotent_write` custom tool
//! ([`Handling::Recorded`](crate::policy::Handling::Recorded)) runs inside the segment like a
//! read, and the Worker commits its record before the CLI reads the result.
//!
//! The gate allows the call and, when the MCP `tools/call` comes, hands the server a
//! [`RecordedRun`]: the tool call ID the record and the idempotency key
//! `<session>/<turn>/<tool call>` are under, and how many attempts an earlier run of the segment
//! already started (`CallTool`'s rule: 3 attempts, then `outcome_unknown`).
//!
//! A segment reruns when its Worker stopped. Its CLI starts again from the segment's start, so
//! the model makes its calls again — under new tool use IDs when the model picks new ones. The
//! Worker hands the gate the turn's inline writes that the rerun's transcript does not hold
//! ([`Gate::with_inline_writes`]). A new call of a recorded tool *meets* one of them when it has
//! the write's ID, or else when it is the same tool with the same input
//! ([`super::canonical::same_input`]; each write is met once, in the order they were made):
//!
//! | the write met | the call |
//! | --- | --- |
//! | has a final record | [`Decision::Replay`](super::Decision::Replay): the MCP server serves the record; the tool does not run |
//! | started, no record (its Worker died between the call and the commit) | runs again under the write's own ID and key, its attempts counted on |
//! | none | a new write under the call's own ID |

use serde_json::Value;

use super::call::Decided;
use super::canonical::same_input;
use super::{DenyReason, Gate, ToolCall};
use crate::catalog::{ToolKind, ToolRef};
use crate::record::{Outcome, RecordedImage, ToolCallRecord};
use crate::texts;

/// One inline write of the turn, as stored, that the segment's CLI does not know of (an earlier
/// attempt of this segment made it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InlineWrite {
    /// The tool use ID it was made under (its record's and its key's).
    pub tool_call_id: String,
    /// The custom tool's own name.
    pub tool_name: String,
    /// The arguments it ran with.
    pub arguments: Value,
    /// The attempts that started.
    pub attempts: i64,
    /// Its final outcome, once recorded.
    pub outcome: Option<Outcome>,
    /// The images of its recorded result (their bytes loaded for a replay).
    pub images: Vec<RecordedImage>,
}

/// What the MCP server runs for a recorded inline write
/// ([`McpPermit::RunRecorded`](super::McpPermit::RunRecorded)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRun {
    /// The tool call ID the record and the idempotency key are under: the call's own, or the
    /// write an earlier attempt of the segment started.
    pub record_id: String,
    /// Attempts already started under that key (0 for a new write).
    pub attempts_before: i64,
}

/// The segment's unseen inline writes and which of them a call met.
#[derive(Clone, Debug, Default)]
pub(super) struct InlineWrites {
    writes: Vec<(InlineWrite, bool)>,
}

impl InlineWrites {
    /// Whether `tool_use_id` is one of the writes' IDs.
    pub(super) fn knows(&self, tool_use_id: &str) -> bool {
        self.writes.iter().any(|(write, _)| write.tool_call_id == tool_use_id)
    }

    /// A call under a write's ID: `None` when it is the write's own tool (decided as a new call,
    /// which meets the write), a denial otherwise.
    pub(super) fn foreign_call(&self, tool: ToolRef<'_>, call: &ToolCall) -> Option<Decided> {
        let own = self.writes.iter().any(|(write, _)| {
            write.tool_call_id == call.tool_use_id
                && matches!(tool, ToolRef::Custom { name, .. } if name == write.tool_name)
        });
        (!own).then(|| {
            Decided::denied(
                DenyReason::RecordedUnderThisId,
                texts::render(texts::RECORDED_UNDER_THIS_ID, &call.tool_name),
            )
        })
    }

    /// The write a call of `tool` with `input` under `tool_use_id` meets, marked met.
    fn meet(&mut self, tool_use_id: &str, tool: &str, input: &Value) -> Option<InlineWrite> {
        let unmet = |write: &InlineWrite, met: bool| !met && write.tool_name == tool;
        let index = self
            .writes
            .iter()
            .position(|(write, met)| unmet(write, *met) && write.tool_call_id == tool_use_id)
            .or_else(|| {
                self.writes
                    .iter()
                    .position(|(write, met)| unmet(write, *met) && same_input(&write.arguments, input))
            })?;
        let (write, met) = &mut self.writes[index];
        *met = true;
        Some(write.clone())
    }
}

impl Gate {
    /// The turn's inline writes this segment's CLI does not know of (an earlier attempt of the
    /// segment made them, then its Worker stopped), oldest first. See the module docs.
    pub fn with_inline_writes(mut self, writes: impl IntoIterator<Item = InlineWrite>) -> Self {
        self.inline.writes.extend(writes.into_iter().map(|write| (write, false)));
        self
    }

    /// The decision for a call of the recorded inline tool `tool`.
    pub(super) fn recorded_write(&mut self, call: &ToolCall, tool: &str) -> Decided {
        match self.inline.meet(&call.tool_use_id, tool, &call.input) {
            Some(InlineWrite { tool_call_id, arguments, outcome: Some(outcome), images, .. }) => {
                Decided::Replayed {
                    record: Box::new(ToolCallRecord {
                        images,
                        ..ToolCallRecord::new(tool_call_id, tool, ToolKind::Custom, arguments, outcome)
                    }),
                    served: false,
                }
            }
            Some(InlineWrite { tool_call_id, attempts, outcome: None, .. }) => Decided::Recorded {
                used: false,
                run: RecordedRun { record_id: tool_call_id, attempts_before: attempts },
            },
            None => Decided::Recorded {
                used: false,
                run: RecordedRun { record_id: call.tool_use_id.clone(), attempts_before: 0 },
            },
        }
    }
}
