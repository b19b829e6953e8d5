//! The gate: one decision for every tool call of a segment.
//!
//! This module owns docs/ARCHITECTURE.md, "The gate's rules". A [`Gate`] lives for one segment (one
//! run of the CLI). The host hands it every `PreToolUse` hook callback ([`Gate::pre_tool_use`]),
//! every `can_use_tool` request ([`Gate::can_use_tool`]), every MCP `tools/call` of the custom tool
//! server ([`Gate::permit_mcp_call`]) and, when the segment ends deferred, the CLI's
//! `deferred_tool_use` ([`Gate::accept_deferral`]). The gate does no I/O: it returns typed
//! [`Decision`]s and does not speak the wire (`tollgate-claude` maps a decision to the bytes
//! `tollgate-protocol` encodes), run tools, call the options factory, or store anything.
//!
//! Read [`Gate`] first, then [`Decision`]. The parts: `decide` (the rules table, the CLI decider's
//! answers, MCP permits, the deferral check), `replay` (what a resumed segment answers for recorded
//! calls), `inline` (recorded inline writes and their replay in a rerun), `call` (one enum per call
//! state), [`canonical`] (when a repeated call is the same call), `tests`.
//!
//! # The rules (the reference adapters' "How a turn runs" step 3 and "Limits")
//!
//! | call | decision |
//! | --- | --- |
//! | approval-free `read` custom tool, or approval-free CLI tool | [`Decision::Allow`]; a custom tool may then run once over MCP |
//! | approval-free `idempotent_write` custom tool ([`Handling::Recorded`]) | [`Decision::Allow`]; it may run once over MCP, recorded ([`McpPermit::RunRecorded`]); a rerun of the segment that meets the call again replays its record (see `inline`) |
//! | the first other ("deferrable") call of the segment | [`Decision::Defer`] |
//! | every later deferrable call of the segment | deny, [`crate::texts::ONLY_ONE_DEFERRED_CALL`]; one that needs approval is also *held back* ([`DeferredCall::held_back`]): the session asks for its approval ahead, in a batch with the deferred call's |
//! | a deferrable call inside a subagent | deny, [`crate::texts::CALL_FROM_MAIN_CONVERSATION`] |
//! | the pending deferred call of a resumed segment | [`Decision::Replay`] of its record (custom tool: the MCP server serves the record; approved CLI tool: the CLI runs it with the recorded input); a rejected CLI tool is denied with the rejection text |
//! | another recorded call, or another tool under the pending call's ID | deny, [`crate::texts::RECORDED_UNDER_THIS_ID`] |
//! | the same call asked again (same tool use ID, tool and input) after an answer that let it run | the same answer ([`Decision::Allow`] with its `updated_input`, or [`Decision::Replay`]); a custom tool still runs once over MCP |
//! | any other second decision under one tool use ID | deny, [`crate::texts::ALREADY_DECIDED`] (a first deny is repeated as is; a deferred call asked again is denied, see below) |
//! | a new call of a custom tool the listing lacks | deny, [`crate::texts::TOOL_NOT_OFFERED`] |
//! | a bare name that a custom tool also uses | deny, [`crate::texts::NAME_COLLISION`], and the segment fails ([`Gate::failure`]) |
//!
//! "Deferrable" is [`Handling::is_deferred`] of the call's policy ([`crate::policy`]). For a new
//! CLI tool call the options factory's per-call decider, when the agent has one, is asked first
//! ([`Next::AskCliDecider`]): it may allow (with new input), deny, require approval, or leave the
//! call to the policy table.
//!
//! `can_use_tool` is the fallback for a call whose hook did not run, with the same rules, except
//! that it cannot defer: a deferrable call is denied with the retry text (the reference adapters,
//! "Limits": "If Claude Code ever ignores a defer and asks `can_use_tool` instead, the adapter
//! denies the call with the same … message"). A `PreToolUse` allow is the call's one authorization.
//! Claude Code asks `can_use_tool` about the same call again after the hook's allow when the call
//! writes to a path it guards (a `Bash` command that writes under `.claude/`): that repeated ask
//! is answered with the same allow. "The same call" is the same tool with the input the gate was
//! first asked about or the input its answer gave (`updatedInput`, a replay's recorded
//! arguments), compared by [`canonical`] text; another tool or input under the ID is denied. A
//! deferred call asked again never runs: `can_use_tool` denies it with the retry text (and frees
//! the segment's deferral), a second hook with [`crate::texts::ALREADY_DECIDED`].
//!
//! ```
//! use serde_json::json;
//! use tollgate_engine::catalog::ToolCatalog;
//! use tollgate_engine::gate::{Decision, Gate, Next, ToolCall};
//! use tollgate_engine::policy::{Annotations, Effect, Policies, PolicyEntry};
//!
//! let policies = Policies::default().with("create_refund", PolicyEntry::new(Effect::NonIdempotentWrite))?;
//! let catalog = ToolCatalog::new("tools")?
//!     .with_tool("lookup_order", Annotations { read_only: true, ..Annotations::default() })?
//!     .with_tool("create_refund", Annotations::default())?;
//! let mut gate = Gate::new(policies, catalog);
//!
//! let lookup = ToolCall::new("toolu_1", "mcp__tools__lookup_order", json!({"order_id": "7"}));
//! assert!(matches!(gate.pre_tool_use(&lookup), Next::Decided(Decision::Allow { updated_input: None })));
//!
//! let refund = ToolCall::new("toolu_2", "mcp__tools__create_refund", json!({"order_id": "7"}));
//! assert!(matches!(gate.pre_tool_use(&refund), Next::Decided(Decision::Defer)));
//!
//! let again = ToolCall::new("toolu_3", "mcp__tools__create_refund", json!({"order_id": "8"}));
//! let Next::Decided(Decision::Deny { message, .. }) = gate.pre_tool_use(&again) else { panic!() };
//! assert!(message.ends_with("Call mcp__tools__create_refund again by itself."));
//!
//! // The CLI's result names the deferred call; the session records it from here.
//! let deferred = gate.accept_deferral("toolu_2", "mcp__tools__create_refund", json!({"order_id": "7"}))?;
//! assert_eq!(deferred.tool_name, "create_refund");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Caveats
//!
//! - The gate is `&mut`: one owner (the segment's event loop) asks it everything; the custom tool
//!   server's permits reach that owner over a channel. Between [`Next::AskCliDecider`] and [`Gate::answer_cli_decider`] other calls
//!   may be decided; "the first deferrable call" is the first one *decided*, so a call whose
//!   decider answers late may find the segment's deferral taken and be denied with the retry text.
//! - An inline custom tool is decided by its name and policy, not its input: the MCP call runs with
//!   whatever input the CLI sends under the permitted tool use ID (after other hooks'
//!   `updatedInput`).
//! - Whether a call comes from a subagent is the host's reading of the hook input (`agent_id`);
//!   CLI 2.1.328 sends it on a subagent's calls and not on the main conversation's (the golden
//!   capture `subagent_foreground__run` in `tollgate-protocol`'s test data).

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use crate::catalog::{ToolCatalog, ToolKind};
use crate::policy::{Handling, Policies, ToolPolicy};
use crate::record::{Outcome, ToolCallRecord, ToolResult};

mod call;
pub mod canonical;
mod decide;
mod inline;
mod replay;

pub use inline::{InlineWrite, RecordedRun};

use call::CallState;

/// Where a tool call comes from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Origin {
    /// The main conversation.
    #[default]
    Main,
    /// A subagent (the hook input carries its `agent_id`).
    Subagent {
        /// The subagent's ID, when the CLI reports one.
        agent_id: Option<String>,
    },
}

impl Origin {
    /// The origin of a call whose `PreToolUse` hook input carries this `agent_id`: a subagent
    /// when it is non-empty (Claude Code's hook input for calls inside a subagent), the main
    /// conversation otherwise.
    ///
    /// # Caveats
    ///
    /// CLI 2.1.328 sends `agent_id` on a subagent's calls and not on the main conversation's (the
    /// golden capture `subagent_foreground__run` in `tollgate-protocol`'s test data). A
    /// `can_use_tool` request carries no such field; treating it as [`Origin::Main`] is safe there,
    /// because `can_use_tool` never defers.
    ///
    /// ```
    /// use tollgate_engine::gate::Origin;
    ///
    /// assert_eq!(Origin::of_agent(Some("a1")), Origin::Subagent { agent_id: Some("a1".into()) });
    /// assert_eq!(Origin::of_agent(Some("")), Origin::Main);
    /// assert_eq!(Origin::of_agent(None), Origin::Main);
    /// ```
    pub fn of_agent(agent_id: Option<&str>) -> Self {
        match agent_id {
            Some(agent_id) if !agent_id.is_empty() => {
                Origin::Subagent { agent_id: Some(agent_id.to_owned()) }
            }
            _ => Origin::Main,
        }
    }
}

/// One tool call as a `PreToolUse` hook or a `can_use_tool` request reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The model's tool use ID (`tool_use_id`).
    pub tool_use_id: String,
    /// The tool as the CLI names it (`mcp__tools__create_refund`, `Bash`).
    pub tool_name: String,
    /// The input the hook received (`tool_input`, or `can_use_tool`'s `input`).
    pub input: Value,
    /// Main conversation or subagent.
    pub origin: Origin,
}

impl ToolCall {
    /// A call from the main conversation.
    pub fn new(tool_use_id: impl Into<String>, tool_name: impl Into<String>, input: Value) -> Self {
        Self { tool_use_id: tool_use_id.into(), tool_name: tool_name.into(), input, origin: Origin::Main }
    }

    /// The same call, made inside a subagent.
    pub fn in_subagent(self, agent_id: Option<String>) -> Self {
        Self { origin: Origin::Subagent { agent_id }, ..self }
    }
}

/// Which request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Channel {
    /// A `PreToolUse` `hook_callback`.
    PreToolUse,
    /// A `can_use_tool` permission request.
    CanUseTool,
}

/// The gate's decision for one tool use ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Run inside the segment, with `updated_input` when the CLI decider rewrote it.
    Allow {
        /// New input for the call (`updatedInput`).
        updated_input: Option<Value>,
    },
    /// Defer the call: the CLI ends the segment with it in `deferred_tool_use`. Only from
    /// [`Gate::pre_tool_use`].
    Defer,
    /// Do not run the call; the model reads `message`.
    Deny {
        /// What the model reads (the CLI prefixes a hook denial with `PreToolUse:<tool> hook error: `).
        message: String,
        /// Why.
        reason: DenyReason,
    },
    /// The pending deferred call of a resumed segment: answered `allow` with the recorded
    /// arguments as `updatedInput`. A custom tool's record is then served by the MCP server
    /// ([`McpPermit::Replay`]); an approved CLI tool runs inside the CLI.
    Replay(ToolCallRecord),
}

impl Decision {
    fn deny(reason: DenyReason, message: String) -> Self {
        Decision::Deny { message, reason }
    }

    /// Whether the call may run (or replay).
    pub fn is_allow(&self) -> bool {
        matches!(self, Decision::Allow { .. } | Decision::Replay(_))
    }
}

/// Why a call was denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DenyReason {
    /// A deferrable call after the segment's deferred call ([`crate::texts::ONLY_ONE_DEFERRED_CALL`]).
    OnlyOneDeferredCall,
    /// A deferrable call that reached `can_use_tool` instead of being deferred (same text).
    DeferIgnored,
    /// A deferrable call inside a subagent ([`crate::texts::CALL_FROM_MAIN_CONVERSATION`]).
    InSubagent,
    /// The pending CLI tool call was rejected ([`crate::texts::rejection`]).
    Rejected,
    /// The pending CLI tool call's record is `failed` or `outcome_unknown`.
    RecordedFailure,
    /// The tool use ID already has a decision in this segment ([`crate::texts::ALREADY_DECIDED`]).
    AlreadyDecided,
    /// A recorded call that is not the pending one, or another tool under the pending call's ID
    /// ([`crate::texts::RECORDED_UNDER_THIS_ID`]).
    RecordedUnderThisId,
    /// A new call of a custom tool the current listing lacks ([`crate::texts::TOOL_NOT_OFFERED`]).
    ToolNotOffered,
    /// A Claude Code tool shares its name with a custom tool ([`crate::texts::NAME_COLLISION`]); the
    /// segment fails.
    NameCollision,
    /// The options factory's per-call decider denied the call with its own text.
    CliDecider,
    /// The per-call decider failed; the model reads its error.
    CliDeciderFailed,
}

impl DenyReason {
    /// Whether this denial also fails the segment ([`Gate::failure`] holds the error).
    pub fn fails_segment(self) -> bool {
        matches!(self, DenyReason::NameCollision)
    }
}

/// What the gate needs next for a call: nothing (its decision), or the per-call decider's answer.
#[derive(Debug)]
#[must_use]
pub enum Next {
    /// The decision; answer the CLI with it.
    Decided(Decision),
    /// A new CLI tool call and the agent has a per-call decider: call the options factory's
    /// `decide-cli-tool(name, input)` and hand its answer to [`Gate::answer_cli_decider`].
    AskCliDecider(CliDeciderQuery),
}

/// A pending question to the options factory's per-call decider. Answer it with
/// [`Gate::answer_cli_decider`]; until then its tool use ID is decided as "pending", and a second
/// request for it is denied.
#[derive(Debug)]
#[must_use]
pub struct CliDeciderQuery {
    tool_use_id: String,
    tool_name: String,
    input: Value,
    origin: Origin,
    channel: Channel,
}

impl CliDeciderQuery {
    /// The call's tool use ID.
    pub fn tool_use_id(&self) -> &str {
        &self.tool_use_id
    }

    /// The CLI tool's name, for the decider.
    pub fn tool_name(&self) -> &str {
        &self.tool_name
    }

    /// The input the hook received, for the decider.
    pub fn input(&self) -> &Value {
        &self.input
    }
}

/// What the options factory's `decide-cli-tool` returns for one call (WIT `decision`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CliToolDecision {
    /// Run the call inside the segment without approval.
    Allow,
    /// Run it with this input instead (`updatedInput`).
    AllowWithInput(Value),
    /// Deny it; the model reads the text.
    Deny(String),
    /// Defer it for approval, whatever the policy table says.
    RequireApproval,
}

/// What the custom tool server does with one `tools/call`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum McpPermit {
    /// Run the tool (an inline call the gate allowed), with the arguments the CLI sent.
    Run,
    /// Run an approval-free idempotent write inline, recorded: under the key of
    /// [`RecordedRun::record_id`], its record committed before the CLI reads the result.
    RunRecorded(RecordedRun),
    /// Return this recorded result without running the tool.
    Replay(ToolResult),
    /// Do not run the tool; return this error result.
    Refuse(ToolResult),
}

/// The segment's deferred call, as the session records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeferredCall {
    /// The model's tool use ID (the record's `tool_call_id`).
    pub tool_use_id: String,
    /// A custom tool's own name, or the CLI tool's name.
    pub tool_name: String,
    /// Which side runs the tool.
    pub kind: ToolKind,
    /// `deferred_tool_use.input`: the input after every hook's `updatedInput`.
    pub arguments: Value,
    /// The call's policy (a CLI decider's "require approval" included).
    pub policy: ToolPolicy,
    /// Approval and where the call runs.
    pub handling: Handling,
    /// The segment's other deferrable calls that need approval and were denied with the retry
    /// text ([`crate::texts::ONLY_ONE_DEFERRED_CALL`]) because this call took the segment's deferral,
    /// in the order the gate saw them. The session may ask for their approval ahead.
    pub held_back: Vec<HeldBackCall>,
}

/// A deferrable call that needs approval and that the gate denied with the retry text, because
/// the segment's deferral was taken: the model is told to call it again by itself, and the
/// session may open its interrupt ahead of time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldBackCall {
    /// The model's tool use ID of the denied call.
    pub tool_use_id: String,
    /// A custom tool's own name, or the CLI tool's name.
    pub tool_name: String,
    /// Which side runs the tool.
    pub kind: ToolKind,
    /// The input the hook received (a repeat is matched on it, [`canonical::same_input`]).
    pub arguments: Value,
    /// The call's policy.
    pub policy: ToolPolicy,
    /// Approval and where the call runs.
    pub handling: Handling,
}

impl DeferredCall {
    /// The record of this call with its final outcome.
    pub fn record(&self, outcome: Outcome) -> ToolCallRecord {
        ToolCallRecord::new(
            self.tool_use_id.clone(),
            self.tool_name.clone(),
            self.kind,
            self.arguments.clone(),
            outcome,
        )
    }
}

/// A segment that the gate cannot accept. Every variant fails the segment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// The CLI reports a deferred call, but the gate deferred none in this segment.
    #[error("the CLI deferred {tool_name} ({tool_use_id}), but the gate deferred no call in this segment")]
    NothingDeferred {
        /// The reported tool use ID.
        tool_use_id: String,
        /// The reported tool.
        tool_name: String,
    },
    /// The CLI reports another call than the one the gate deferred.
    #[error("the CLI deferred {reported}, but the gate deferred {deferred}")]
    DeferredAnotherCall {
        /// The reported tool use ID.
        reported: String,
        /// The tool use ID the gate deferred.
        deferred: String,
    },
    /// The CLI reports the deferred ID under another tool.
    #[error("the CLI deferred {tool_use_id} as {reported}, but the gate deferred it as {deferred}")]
    DeferredAnotherTool {
        /// The tool use ID.
        tool_use_id: String,
        /// The reported tool.
        reported: String,
        /// The tool the gate deferred.
        deferred: String,
    },
    /// A Claude Code tool and a custom tool share a name.
    #[error("the Claude Code tool {tool} has the name of a custom tool; rename the custom tool")]
    NameCollision {
        /// The shared name.
        tool: String,
    },
}

impl GateError {
    /// Whether running the segment again may succeed. A mismatched deferral is a CLI hiccup: the
    /// segment reruns (the reference adapters: "A deferred call that the hook did not defer fails
    /// the segment, which then retries"). A name collision needs a new tool name.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, GateError::NameCollision { .. })
    }
}

/// The decisions of one segment. See the module docs for the rules.
///
/// [`Gate::new`] starts a first segment of a turn: no pending call, no earlier records, no CLI
/// decider. [`Gate::resuming`], [`Gate::with_turn_records`] and [`Gate::with_cli_decider`] change
/// that.
#[derive(Clone, Debug)]
pub struct Gate {
    policies: Policies,
    catalog: ToolCatalog,
    asks_cli_decider: bool,
    pending: Option<ToolCallRecord>,
    recorded: BTreeSet<String>,
    calls: HashMap<String, CallState>,
    deferred: Option<String>,
    held_back: Vec<HeldBackCall>,
    failure: Option<GateError>,
    inline: inline::InlineWrites,
}

impl Gate {
    /// A gate for a segment with these policies and this attempt's custom tools.
    pub fn new(policies: Policies, catalog: ToolCatalog) -> Self {
        Self {
            policies,
            catalog,
            asks_cli_decider: false,
            pending: None,
            recorded: BTreeSet::new(),
            calls: HashMap::new(),
            deferred: None,
            held_back: Vec::new(),
            failure: None,
            inline: inline::InlineWrites::default(),
        }
    }

    /// The options factory exports `decide-cli-tool`: ask it about every new CLI tool call.
    pub fn with_cli_decider(mut self) -> Self {
        self.asks_cli_decider = true;
        self
    }

    /// The first decision for `tool_use_id` in this segment (never replaced by a later request,
    /// except a defer that `can_use_tool` shows was ignored). `None` before any, or while the CLI
    /// decider is asked.
    pub fn decision(&self, tool_use_id: &str) -> Option<Decision> {
        self.calls.get(tool_use_id).and_then(CallState::decision)
    }

    /// The tool use ID of the segment's deferred call, if the gate deferred one.
    pub fn deferred_call_id(&self) -> Option<&str> {
        self.deferred.as_deref()
    }

    /// Why the segment must fail, once a decision said so ([`DenyReason::fails_segment`]).
    pub fn failure(&self) -> Option<&GateError> {
        self.failure.as_ref()
    }
}

#[cfg(test)]
mod tests;
