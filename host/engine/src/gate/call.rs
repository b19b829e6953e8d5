//! The state of one tool use ID in a segment: what it refers to, who asked, and where its
//! decision stands. One enum per state, so a deferred call cannot also hold an MCP permit and a
//! call waiting for the CLI decider has no decision to read.

use serde_json::Value;

use super::canonical::canonical;
use super::{Channel, Decision, DenyReason};
use crate::catalog::ToolRef;
use crate::policy::ToolPolicy;
use crate::record::ToolCallRecord;

/// What a decided tool use ID refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Target {
    Custom(String),
    Cli(String),
    Collision,
}

impl Target {
    pub(super) fn of(tool: ToolRef<'_>) -> Self {
        match tool {
            ToolRef::Custom { name, .. } => Target::Custom(name.to_owned()),
            ToolRef::Cli { name } => Target::Cli(name.to_owned()),
            ToolRef::Collision { .. } => Target::Collision,
        }
    }
}

/// One tool use ID of the segment.
#[derive(Clone, Debug)]
pub(super) struct CallState {
    pub(super) target: Target,
    /// The tool as the CLI names it.
    pub(super) tool_name: String,
    /// The canonical text ([`canonical`]) of the input the first request asked about.
    pub(super) input: String,
    /// The request that asked first.
    pub(super) channel: Channel,
    pub(super) phase: Phase,
}

/// Where a call's decision stands.
#[derive(Clone, Debug)]
pub(super) enum Phase {
    /// The options factory's per-call decider is being asked ([`super::Next::AskCliDecider`]).
    AskingDecider,
    /// Decided.
    Decided(Decided),
}

/// A decided call.
#[derive(Clone, Debug)]
pub(super) enum Decided {
    /// Runs inside the CLI (a CLI tool), with the decider's new input if it gave one.
    Allowed { updated_input: Option<Value> },
    /// An approval-free custom tool: the MCP server may run it once.
    Inline { used: bool },
    /// An approval-free idempotent write: the MCP server may run it once, recorded
    /// ([`super::McpPermit::RunRecorded`]).
    Recorded { used: bool, run: super::RecordedRun },
    /// The pending call of a resumed segment, answered from its record. A custom tool's record is
    /// served over MCP once.
    Replayed { record: Box<ToolCallRecord>, served: bool },
    /// The segment's one deferred call, recorded under this policy.
    Deferred { policy: ToolPolicy },
    /// Not run; the model reads `message`.
    Denied { message: String, reason: DenyReason },
}

impl Decided {
    pub(super) fn denied(reason: DenyReason, message: String) -> Self {
        Decided::Denied { message, reason }
    }

    /// The decision the host answers the CLI with.
    pub(super) fn decision(&self) -> Decision {
        match self {
            Decided::Allowed { updated_input } => Decision::Allow { updated_input: updated_input.clone() },
            Decided::Inline { .. } | Decided::Recorded { .. } => Decision::Allow { updated_input: None },
            Decided::Replayed { record, .. } => Decision::Replay((**record).clone()),
            Decided::Deferred { .. } => Decision::Defer,
            Decided::Denied { message, reason } => {
                Decision::Deny { message: message.clone(), reason: *reason }
            }
        }
    }
}

impl CallState {
    /// The call's decision; `None` while the CLI decider is asked.
    pub(super) fn decision(&self) -> Option<Decision> {
        match &self.phase {
            Phase::AskingDecider => None,
            Phase::Decided(decided) => Some(decided.decision()),
        }
    }

    /// The answer to a repeated ask about this call, when it is the same call and its answer let
    /// it run: the same decision again. The same call is the same tool with the input the gate
    /// was first asked about, or with the input its answer gave the call (the CLI asks about the
    /// input after `updatedInput`); key order does not matter ([`canonical`]). A repeated answer
    /// grants nothing new: the custom tool server still runs a permitted call once.
    ///
    /// `None` (the caller denies, or repeats a denial) for another tool or input, for a deferred
    /// call (it must not run inside the segment), and for a call waiting for the CLI decider.
    pub(super) fn repeated(&self, tool_name: &str, input: &Value) -> Option<Decision> {
        let Phase::Decided(decided) = &self.phase else { return None };
        let answered = match decided {
            Decided::Allowed { updated_input } => updated_input.as_ref(),
            Decided::Inline { .. } | Decided::Recorded { .. } => None,
            Decided::Replayed { record, .. } => Some(&record.arguments),
            Decided::Deferred { .. } | Decided::Denied { .. } => return None,
        };
        let asked = canonical(input);
        let same_input = asked == self.input || answered.is_some_and(|given| canonical(given) == asked);
        (self.tool_name == tool_name && same_input).then(|| decided.decision())
    }
}
