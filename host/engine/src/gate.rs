//! The gate: one decision for every tool call of a segment.
//!
//! This module owns DESIGN.md §2 step 3. A [`Gate`] lives for one segment (one run of the CLI). The
//! host hands it every `PreToolUse` hook callback ([`Gate::pre_tool_use`]), every `can_use_tool`
//! request ([`Gate::can_use_tool`]), every MCP `tools/call` of the custom tool server
//! ([`Gate::permit_mcp_call`]) and, when the segment ends deferred, the CLI's `deferred_tool_use`
//! ([`Gate::accept_deferral`]). The gate does no I/O: it does not speak the wire (the host maps a
//! [`Decision`] with [`Decision::hook_response`] / [`Decision::permission_result`]), run tools,
//! call the options factory, or store anything.
//!
//! Read [`Gate`] first, then [`Decision`].
//!
//! # The rules (seeds, "How a turn runs" step 3 and "Limits")
//!
//! | call | decision |
//! | --- | --- |
//! | approval-free `read` custom tool, or approval-free CLI tool | [`Decision::Allow`]; a custom tool may then run once over MCP |
//! | the first other ("deferrable") call of the segment | [`Decision::Defer`] |
//! | every later deferrable call of the segment | deny, [`texts::ONLY_ONE_DEFERRED_CALL`] |
//! | a deferrable call inside a subagent | deny, [`texts::CALL_FROM_MAIN_CONVERSATION`] |
//! | the pending deferred call of a resumed segment | [`Decision::Replay`] of its record (custom tool: the MCP server serves the record; approved CLI tool: the CLI runs it with the recorded input); a rejected CLI tool is denied with the rejection text |
//! | another recorded call, or another tool under the pending call's ID | deny, [`texts::RECORDED_UNDER_THIS_ID`] |
//! | a second decision under one tool use ID | deny, [`texts::ALREADY_DECIDED`] (a first deny is repeated as is) |
//! | a new call of a custom tool the listing lacks | deny, [`texts::TOOL_NOT_OFFERED`] |
//! | a bare name that a custom tool also uses | deny, [`texts::NAME_COLLISION`], and the segment fails ([`Gate::failure`]) |
//!
//! "Deferrable" is [`Handling::is_deferred`] of the call's policy ([`crate::policy`]). For a new
//! CLI tool call the options factory's per-call decider, when the agent has one, is asked first
//! ([`Step::AskCliDecider`]): it may allow (with new input), deny, require approval, or leave the
//! call to the policy table.
//!
//! `can_use_tool` is the fallback for a call whose hook did not run, with the same rules, except
//! that it cannot defer: a deferrable call is denied with the retry text (seeds, "Limits": "If
//! Claude Code ever ignores a defer and asks `can_use_tool` instead, the adapter denies the call
//! with the same … message"). A `PreToolUse` allow is the call's one authorization, so a later
//! `can_use_tool` for that ID is denied.
//!
//! ```
//! use serde_json::json;
//! use tollgate_engine::catalog::ToolCatalog;
//! use tollgate_engine::gate::{Decision, Gate, Step, ToolCall};
//! use tollgate_engine::policy::{Annotations, Effect, Policies, PolicyEntry};
//!
//! let policies = Policies::default().with("create_refund", PolicyEntry::new(Effect::NonIdempotentWrite))?;
//! let catalog = ToolCatalog::new("tools")?
//!     .with_tool("lookup_order", Annotations { read_only: true, ..Annotations::default() })?
//!     .with_tool("create_refund", Annotations::default())?;
//! let mut gate = Gate::new(policies, catalog);
//!
//! let lookup = ToolCall::new("toolu_1", "mcp__tools__lookup_order", json!({"order_id": "7"}));
//! assert!(matches!(gate.pre_tool_use(&lookup), Step::Decided(Decision::Allow { updated_input: None })));
//!
//! let refund = ToolCall::new("toolu_2", "mcp__tools__create_refund", json!({"order_id": "7"}));
//! assert!(matches!(gate.pre_tool_use(&refund), Step::Decided(Decision::Defer)));
//!
//! let again = ToolCall::new("toolu_3", "mcp__tools__create_refund", json!({"order_id": "8"}));
//! let Step::Decided(Decision::Deny { message, .. }) = gate.pre_tool_use(&again) else { panic!() };
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
//! - The gate is `&mut`: a host that answers control requests concurrently must serialize the
//!   calls (a mutex). Between [`Step::AskCliDecider`] and [`Gate::answer_cli_decider`] other calls
//!   may be decided; "the first deferrable call" is the first one *decided*, so a call whose
//!   decider answers late may find the segment's deferral taken and be denied with the retry text.
//! - An inline custom tool is decided by its name and policy, not its input: the MCP call runs with
//!   whatever input the CLI sends under the permitted tool use ID (after other hooks'
//!   `updatedInput`).
//! - Whether a call comes from a subagent is the host's reading of the hook input (`agent_id`);
//!   PROTOCOL.md §19 lists subagents as not probed.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Value, json};

use crate::catalog::{ToolCatalog, ToolKind, ToolRef};
use crate::policy::{Handling, Policies, ToolPolicy};
use crate::record::{Outcome, ToolCallRecord, ToolResult};
use crate::texts;

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
    /// The origin a `PreToolUse` hook input reports: a subagent when it carries a non-empty
    /// `agent_id` (Claude Code's hook input for calls inside a subagent), the main conversation
    /// otherwise.
    ///
    /// # Caveats
    ///
    /// The probe did not run a subagent on CLI 2.1.328 (PROTOCOL.md §19): the `agent_id` field is
    /// Claude Code's documented hook input, not a captured frame. A `can_use_tool` request carries
    /// no such field; treating it as [`Origin::Main`] is safe there, because `can_use_tool` never
    /// defers.
    ///
    /// ```
    /// use serde_json::json;
    /// use tollgate_engine::gate::Origin;
    ///
    /// let input = json!({"hook_event_name": "PreToolUse", "tool_name": "Bash", "agent_id": "a1"});
    /// assert_eq!(Origin::from_hook_input(&input), Origin::Subagent { agent_id: Some("a1".into()) });
    /// assert_eq!(Origin::from_hook_input(&json!({"tool_name": "Bash"})), Origin::Main);
    /// ```
    pub fn from_hook_input(input: &Value) -> Self {
        match input.get("agent_id").and_then(Value::as_str) {
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
#[non_exhaustive]
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

    /// The `response` of the `control_response` to a `hook_callback` (PROTOCOL.md §7.2):
    /// `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":…}}` with
    /// `updatedInput` for a rewritten or replayed call and `permissionDecisionReason` for a
    /// denial.
    pub fn hook_response(&self) -> Value {
        let mut output = json!({ "hookEventName": "PreToolUse" });
        let (decision, extra) = match self {
            Decision::Allow { updated_input: None } => ("allow", None),
            Decision::Allow { updated_input: Some(input) } => {
                ("allow", Some(("updatedInput", input.clone())))
            }
            Decision::Replay(record) => ("allow", Some(("updatedInput", record.arguments.clone()))),
            Decision::Defer => ("defer", None),
            Decision::Deny { message, .. } => {
                ("deny", Some(("permissionDecisionReason", Value::from(message.as_str()))))
            }
        };
        if let Some(object) = output.as_object_mut() {
            object.insert("permissionDecision".to_owned(), Value::from(decision));
            if let Some((key, value)) = extra {
                object.insert(key.to_owned(), value);
            }
        }
        json!({ "hookSpecificOutput": output })
    }

    /// The `response` of the `control_response` to a `can_use_tool` request (PROTOCOL.md §8.3):
    /// `{"behavior":"allow","updatedInput":…}` (the original input when the decision does not
    /// change it, as both SDKs send) or `{"behavior":"deny","message":…}`. `None` for
    /// [`Decision::Defer`], which `can_use_tool` never yields.
    pub fn permission_result(&self, original_input: &Value) -> Option<Value> {
        match self {
            Decision::Allow { updated_input } => Some(json!({
                "behavior": "allow",
                "updatedInput": updated_input.as_ref().unwrap_or(original_input),
            })),
            Decision::Replay(record) => {
                Some(json!({ "behavior": "allow", "updatedInput": record.arguments }))
            }
            Decision::Deny { message, .. } => Some(json!({ "behavior": "deny", "message": message })),
            Decision::Defer => None,
        }
    }
}

/// Why a call was denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DenyReason {
    /// A deferrable call after the segment's deferred call ([`texts::ONLY_ONE_DEFERRED_CALL`]).
    OnlyOneDeferredCall,
    /// A deferrable call that reached `can_use_tool` instead of being deferred (same text).
    DeferIgnored,
    /// A deferrable call inside a subagent ([`texts::CALL_FROM_MAIN_CONVERSATION`]).
    InSubagent,
    /// The pending CLI tool call was rejected ([`texts::rejection`]).
    Rejected,
    /// The pending CLI tool call's record is `failed` or `outcome_unknown`.
    RecordedFailure,
    /// The tool use ID already has a decision in this segment ([`texts::ALREADY_DECIDED`]).
    AlreadyDecided,
    /// A recorded call that is not the pending one, or another tool under the pending call's ID
    /// ([`texts::RECORDED_UNDER_THIS_ID`]).
    RecordedUnderThisId,
    /// A new call of a custom tool the current listing lacks ([`texts::TOOL_NOT_OFFERED`]).
    ToolNotOffered,
    /// A Claude Code tool shares its name with a custom tool ([`texts::NAME_COLLISION`]); the
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

/// What one step of the gate needs next.
#[derive(Debug)]
#[must_use]
pub enum Step {
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
    /// segment reruns (seeds: "A deferred call that the hook did not defer fails the segment,
    /// which then retries"). A name collision needs a new tool name.
    pub fn is_retryable(&self) -> bool {
        !matches!(self, GateError::NameCollision { .. })
    }
}

/// What a decided tool use ID refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    Custom(String),
    Cli(String),
    Collision,
}

impl Target {
    fn of(tool: ToolRef<'_>) -> Self {
        match tool {
            ToolRef::Custom { name, .. } => Target::Custom(name.to_owned()),
            ToolRef::Cli { name } => Target::Cli(name.to_owned()),
            ToolRef::Collision { .. } => Target::Collision,
        }
    }
}

/// What the MCP server may still do under a tool use ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mcp {
    Nothing,
    Run,
    Replay,
    Used,
}

#[derive(Clone, Debug)]
struct CallState {
    target: Target,
    tool_name: String,
    /// `None` while the CLI decider is asked.
    decision: Option<Decision>,
    channel: Channel,
    /// Set for a deferred call.
    deferred_policy: Option<ToolPolicy>,
    mcp: Mcp,
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
    failure: Option<GateError>,
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
            failure: None,
        }
    }

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

    /// The options factory exports `decide-cli-tool`: ask it about every new CLI tool call.
    pub fn with_cli_decider(mut self) -> Self {
        self.asks_cli_decider = true;
        self
    }

    /// Decides a `PreToolUse` hook callback.
    pub fn pre_tool_use(&mut self, call: &ToolCall) -> Step {
        self.decide(call, Channel::PreToolUse)
    }

    /// Decides a `can_use_tool` request: the fallback for a call whose hook did not run. Never
    /// yields [`Decision::Defer`].
    pub fn can_use_tool(&mut self, call: &ToolCall) -> Step {
        self.decide(call, Channel::CanUseTool)
    }

    /// Finishes a call that [`Step::AskCliDecider`] held, with the decider's answer: `Ok(None)`
    /// leaves the call to the policy table, `Err(text)` (the factory failed) denies it with the
    /// text.
    pub fn answer_cli_decider(
        &mut self,
        query: CliDeciderQuery,
        answer: Result<Option<CliToolDecision>, String>,
    ) -> Decision {
        let waiting = self.calls.get(&query.tool_use_id).is_some_and(|state| state.decision.is_none());
        if !waiting {
            return Decision::deny(
                DenyReason::AlreadyDecided,
                texts::render(texts::ALREADY_DECIDED, &query.tool_name),
            );
        }
        let table = self.policies.resolve(&query.tool_name, None);
        let (decision, policy) = match answer {
            Err(message) => (Decision::deny(DenyReason::CliDeciderFailed, message), None),
            Ok(Some(CliToolDecision::Allow)) => (Decision::Allow { updated_input: None }, None),
            Ok(Some(CliToolDecision::AllowWithInput(input))) => {
                (Decision::Allow { updated_input: Some(input) }, None)
            }
            Ok(Some(CliToolDecision::Deny(message))) => {
                (Decision::deny(DenyReason::CliDecider, message), None)
            }
            Ok(Some(CliToolDecision::RequireApproval)) => {
                let policy = ToolPolicy { requires_approval: true, ..table };
                (
                    self.deferrable(&query.tool_use_id, &query.tool_name, &query.origin, query.channel),
                    Some(policy),
                )
            }
            Ok(None) if table.handling(ToolKind::Cli).is_deferred() => (
                self.deferrable(&query.tool_use_id, &query.tool_name, &query.origin, query.channel),
                Some(table),
            ),
            Ok(None) => (Decision::Allow { updated_input: None }, None),
        };
        if let Some(state) = self.calls.get_mut(&query.tool_use_id) {
            state.deferred_policy = policy.filter(|_| decision == Decision::Defer);
            state.decision = Some(decision.clone());
        }
        decision
    }

    /// Whether the custom tool server may run `tool` (its bare name) for a `tools/call` under
    /// `tool_use_id` (`_meta["claudecode/toolUseId"]`). Each permit is used once.
    pub fn permit_mcp_call(&mut self, tool_use_id: Option<&str>, tool: &str) -> McpPermit {
        let refuse = McpPermit::Refuse(ToolResult {
            text: texts::render(texts::MCP_CALL_NOT_PERMITTED, &self.catalog.cli_name(tool)),
            is_error: true,
        });
        let Some(state) = tool_use_id.and_then(|id| self.calls.get_mut(id)) else {
            return refuse;
        };
        if state.target != Target::Custom(tool.to_owned()) {
            return refuse;
        }
        match (state.mcp, &state.decision) {
            (Mcp::Run, _) => {
                state.mcp = Mcp::Used;
                McpPermit::Run
            }
            (Mcp::Replay, Some(Decision::Replay(record))) => {
                let result = record.outcome.tool_result(&state.tool_name);
                state.mcp = Mcp::Used;
                McpPermit::Replay(result)
            }
            _ => refuse,
        }
    }

    /// Checks the CLI's `deferred_tool_use` (`id`, `name`, `input`) against the segment's one
    /// deferred call and returns the call to record, with `input` as its arguments.
    ///
    /// # Errors
    ///
    /// A [`GateError`] when the gate deferred no call, another call, or this call under another
    /// tool. The segment then fails.
    pub fn accept_deferral(
        &self,
        tool_use_id: &str,
        tool_name: &str,
        input: Value,
    ) -> Result<DeferredCall, GateError> {
        let nothing = || GateError::NothingDeferred {
            tool_use_id: tool_use_id.to_owned(),
            tool_name: tool_name.to_owned(),
        };
        let Some(deferred) = self.deferred.as_deref() else {
            return Err(nothing());
        };
        if deferred != tool_use_id {
            return Err(GateError::DeferredAnotherCall {
                reported: tool_use_id.to_owned(),
                deferred: deferred.to_owned(),
            });
        }
        let Some(state) = self.calls.get(deferred) else {
            return Err(nothing());
        };
        if state.tool_name != tool_name {
            return Err(GateError::DeferredAnotherTool {
                tool_use_id: tool_use_id.to_owned(),
                reported: tool_name.to_owned(),
                deferred: state.tool_name.clone(),
            });
        }
        let (name, kind) = match &state.target {
            Target::Custom(name) => (name.clone(), ToolKind::Custom),
            Target::Cli(name) => (name.clone(), ToolKind::Cli),
            Target::Collision => return Err(nothing()),
        };
        let Some(policy) = state.deferred_policy else {
            return Err(nothing());
        };
        Ok(DeferredCall {
            tool_use_id: tool_use_id.to_owned(),
            tool_name: name,
            handling: policy.handling(kind),
            kind,
            arguments: input,
            policy,
        })
    }

    /// The first decision for `tool_use_id` in this segment (never replaced by a later request).
    /// `None` before any, or while the CLI decider is asked.
    pub fn decision(&self, tool_use_id: &str) -> Option<&Decision> {
        self.calls.get(tool_use_id).and_then(|state| state.decision.as_ref())
    }

    /// The tool use ID of the segment's deferred call, if the gate deferred one.
    pub fn deferred_call_id(&self) -> Option<&str> {
        self.deferred.as_deref()
    }

    /// The pending deferred call this segment resumes.
    pub fn pending(&self) -> Option<&ToolCallRecord> {
        self.pending.as_ref()
    }

    /// The pending call's custom tool when this attempt's listing lacks it: the MCP server must
    /// still list it (replay-only), or the resumed CLI ends with `tool_deferred_unavailable`
    /// (PROTOCOL.md §12.4). A new call of it is still denied.
    pub fn replay_only_tool(&self) -> Option<&str> {
        self.pending
            .as_ref()
            .filter(|pending| {
                pending.kind == ToolKind::Custom && self.catalog.annotations(&pending.tool_name).is_none()
            })
            .map(|pending| pending.tool_name.as_str())
    }

    /// Why the segment must fail, once a decision said so ([`DenyReason::fails_segment`]).
    pub fn failure(&self) -> Option<&GateError> {
        self.failure.as_ref()
    }

    fn decide(&mut self, call: &ToolCall, channel: Channel) -> Step {
        if self.calls.contains_key(&call.tool_use_id) {
            return Step::Decided(self.decide_again(call, channel));
        }
        let tool = self.catalog.classify(&call.tool_name);
        let target = Target::of(tool);
        let name = call.tool_name.as_str();

        if let Some(pending) =
            self.pending.as_ref().filter(|pending| pending.tool_call_id == call.tool_use_id)
        {
            let decision = replay(pending, tool, call);
            let mcp = match (&decision, pending.kind) {
                (Decision::Replay(_), ToolKind::Custom) => Mcp::Replay,
                _ => Mcp::Nothing,
            };
            return self.settle(call, channel, target, decision, mcp);
        }
        if self.recorded.contains(&call.tool_use_id) {
            let decision = Decision::deny(
                DenyReason::RecordedUnderThisId,
                texts::render(texts::RECORDED_UNDER_THIS_ID, name),
            );
            return self.settle(call, channel, target, decision, Mcp::Nothing);
        }
        match tool {
            ToolRef::Collision { name: shared } => {
                self.failure.get_or_insert(GateError::NameCollision { tool: shared.to_owned() });
                let decision =
                    Decision::deny(DenyReason::NameCollision, texts::render(texts::NAME_COLLISION, name));
                self.settle(call, channel, target, decision, Mcp::Nothing)
            }
            ToolRef::Custom { listed: false, .. } => {
                let decision =
                    Decision::deny(DenyReason::ToolNotOffered, texts::render(texts::TOOL_NOT_OFFERED, name));
                self.settle(call, channel, target, decision, Mcp::Nothing)
            }
            ToolRef::Custom { name: custom, listed: true } => {
                let policy = self.policies.resolve(custom, self.catalog.annotations(custom));
                if policy.handling(ToolKind::Custom).is_deferred() {
                    let decision = self.deferrable(&call.tool_use_id, name, &call.origin, channel);
                    self.settle_deferrable(call, channel, target, decision, policy)
                } else {
                    self.settle(call, channel, target, Decision::Allow { updated_input: None }, Mcp::Run)
                }
            }
            ToolRef::Cli { name: cli } if self.asks_cli_decider => {
                self.calls.insert(
                    call.tool_use_id.clone(),
                    CallState {
                        target,
                        tool_name: call.tool_name.clone(),
                        decision: None,
                        channel,
                        deferred_policy: None,
                        mcp: Mcp::Nothing,
                    },
                );
                Step::AskCliDecider(CliDeciderQuery {
                    tool_use_id: call.tool_use_id.clone(),
                    tool_name: cli.to_owned(),
                    input: call.input.clone(),
                    origin: call.origin.clone(),
                    channel,
                })
            }
            ToolRef::Cli { name: cli } => {
                let policy = self.policies.resolve(cli, None);
                if policy.handling(ToolKind::Cli).is_deferred() {
                    let decision = self.deferrable(&call.tool_use_id, name, &call.origin, channel);
                    self.settle_deferrable(call, channel, target, decision, policy)
                } else {
                    self.settle(call, channel, target, Decision::Allow { updated_input: None }, Mcp::Nothing)
                }
            }
        }
    }

    /// A second request under a decided tool use ID.
    fn decide_again(&mut self, call: &ToolCall, channel: Channel) -> Decision {
        let already = Decision::deny(
            DenyReason::AlreadyDecided,
            texts::render(texts::ALREADY_DECIDED, &call.tool_name),
        );
        let Some(state) = self.calls.get_mut(&call.tool_use_id) else {
            return already;
        };
        match (&state.decision, state.channel, channel) {
            // Claude Code ignored the defer and asks instead: deny with the retry text and free the
            // segment's deferral, since this call will not end the segment.
            (Some(Decision::Defer), Channel::PreToolUse, Channel::CanUseTool) => {
                let decision = Decision::deny(
                    DenyReason::DeferIgnored,
                    texts::render(texts::ONLY_ONE_DEFERRED_CALL, &call.tool_name),
                );
                state.decision = Some(decision.clone());
                state.deferred_policy = None;
                if self.deferred.as_deref() == Some(call.tool_use_id.as_str()) {
                    self.deferred = None;
                }
                decision
            }
            (Some(first @ Decision::Deny { .. }), _, _) => first.clone(),
            _ => already,
        }
    }

    /// The decision for a deferrable call: defer the segment's first, deny the rest.
    fn deferrable(
        &mut self,
        tool_use_id: &str,
        tool_name: &str,
        origin: &Origin,
        channel: Channel,
    ) -> Decision {
        if matches!(origin, Origin::Subagent { .. }) {
            Decision::deny(
                DenyReason::InSubagent,
                texts::render(texts::CALL_FROM_MAIN_CONVERSATION, tool_name),
            )
        } else if channel == Channel::CanUseTool {
            Decision::deny(DenyReason::DeferIgnored, texts::render(texts::ONLY_ONE_DEFERRED_CALL, tool_name))
        } else if self.deferred.is_some() {
            Decision::deny(
                DenyReason::OnlyOneDeferredCall,
                texts::render(texts::ONLY_ONE_DEFERRED_CALL, tool_name),
            )
        } else {
            self.deferred = Some(tool_use_id.to_owned());
            Decision::Defer
        }
    }

    fn settle_deferrable(
        &mut self,
        call: &ToolCall,
        channel: Channel,
        target: Target,
        decision: Decision,
        policy: ToolPolicy,
    ) -> Step {
        let deferred_policy = (decision == Decision::Defer).then_some(policy);
        let step = self.settle(call, channel, target, decision, Mcp::Nothing);
        if let Some(state) = self.calls.get_mut(&call.tool_use_id) {
            state.deferred_policy = deferred_policy;
        }
        step
    }

    fn settle(
        &mut self,
        call: &ToolCall,
        channel: Channel,
        target: Target,
        decision: Decision,
        mcp: Mcp,
    ) -> Step {
        self.calls.insert(
            call.tool_use_id.clone(),
            CallState {
                target,
                tool_name: call.tool_name.clone(),
                decision: Some(decision.clone()),
                channel,
                deferred_policy: None,
                mcp,
            },
        );
        Step::Decided(decision)
    }
}

/// The decision for the pending call of a resumed segment: its record, if the call is the
/// record's own tool from the main conversation.
fn replay(pending: &ToolCallRecord, tool: ToolRef<'_>, call: &ToolCall) -> Decision {
    let own_tool = match (pending.kind, tool) {
        (ToolKind::Custom, ToolRef::Custom { name, .. }) | (ToolKind::Cli, ToolRef::Cli { name }) => {
            name == pending.tool_name
        }
        _ => false,
    };
    if !own_tool || call.origin != Origin::Main {
        return Decision::deny(
            DenyReason::RecordedUnderThisId,
            texts::render(texts::RECORDED_UNDER_THIS_ID, &call.tool_name),
        );
    }
    match (&pending.outcome, pending.kind) {
        (_, ToolKind::Custom) | (Outcome::Succeeded { .. }, ToolKind::Cli) => {
            Decision::Replay(pending.clone())
        }
        (Outcome::Rejected { message }, ToolKind::Cli) => {
            Decision::deny(DenyReason::Rejected, texts::rejection(message.as_deref()))
        }
        (outcome, ToolKind::Cli) => {
            Decision::deny(DenyReason::RecordedFailure, outcome.tool_result(&call.tool_name).text)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::catalog::DEFAULT_TOOL_SERVER_NAME;
    use crate::policy::{Annotations, DeferredRun, Effect, PolicyEntry};

    const RETRY_REFUND: &str = "mcp__tools__create_refund did not run. Only one tool call per reply can run \
        outside this turn, and another call already does. Call mcp__tools__create_refund again by itself.";

    /// The seeds' support agent: `lookup_order` (read-only hint), `create_refund`
    /// (non_idempotent_write), `set_status` (idempotent hint), `Read`/`Grep` read, `Bash` none.
    fn gate() -> Gate {
        let policies = Policies::default()
            .with("create_refund", PolicyEntry::new(Effect::NonIdempotentWrite))
            .and_then(|p| p.with("Read", PolicyEntry::new(Effect::Read)))
            .and_then(|p| p.with("Grep", PolicyEntry::new(Effect::Read)))
            .and_then(|p| p.with("Write", PolicyEntry::new(Effect::IdempotentWrite)))
            .and_then(|p| p.with("audit_log", PolicyEntry::new(Effect::Read).with_approval(true)));
        let catalog = ToolCatalog::new(DEFAULT_TOOL_SERVER_NAME)
            .and_then(|c| {
                c.with_tool("lookup_order", Annotations { read_only: true, ..Annotations::default() })
            })
            .and_then(|c| c.with_tool("create_refund", Annotations::default()))
            .and_then(|c| {
                c.with_tool("set_status", Annotations { idempotent: true, ..Annotations::default() })
            })
            .and_then(|c| {
                c.with_tool("audit_log", Annotations { read_only: true, ..Annotations::default() })
            });
        match (policies, catalog) {
            (Ok(policies), Ok(catalog)) => Gate::new(policies, catalog),
            (policies, catalog) => panic!("fixture: {policies:?} {catalog:?}"),
        }
    }

    fn call(id: &str, tool: &str) -> ToolCall {
        ToolCall::new(id, tool, json!({ "id": id }))
    }

    fn decided(step: Step) -> Decision {
        match step {
            Step::Decided(decision) => decision,
            Step::AskCliDecider(query) => panic!("unexpected decider query for {}", query.tool_name()),
        }
    }

    fn hook(gate: &mut Gate, id: &str, tool: &str) -> Decision {
        decided(gate.pre_tool_use(&call(id, tool)))
    }

    fn ask(gate: &mut Gate, id: &str, tool: &str) -> Decision {
        decided(gate.can_use_tool(&call(id, tool)))
    }

    fn denial(decision: &Decision) -> (&str, DenyReason) {
        match decision {
            Decision::Deny { message, reason } => (message.as_str(), *reason),
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    fn allow() -> Decision {
        Decision::Allow { updated_input: None }
    }

    fn refund_record(outcome: Outcome) -> ToolCallRecord {
        ToolCallRecord::new(
            "toolu_refund",
            "create_refund",
            ToolKind::Custom,
            json!({ "order_id": "7" }),
            outcome,
        )
    }

    fn bash_record(outcome: Outcome) -> ToolCallRecord {
        ToolCallRecord::new("toolu_bash", "Bash", ToolKind::Cli, json!({ "command": "make deploy" }), outcome)
    }

    fn refused(gate: &mut Gate, id: Option<&str>, tool: &str) -> bool {
        matches!(gate.permit_mcp_call(id, tool), McpPermit::Refuse(ToolResult { is_error: true, .. }))
    }

    // --- first segment: allow, defer, deny ---

    #[test]
    fn an_approval_free_custom_read_is_allowed_and_may_run_once_over_mcp() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__lookup_order"), allow());
        assert_eq!(gate.permit_mcp_call(Some("toolu_1"), "lookup_order"), McpPermit::Run);
        assert!(refused(&mut gate, Some("toolu_1"), "lookup_order"), "a permit is used once");
        assert_eq!(gate.deferred_call_id(), None);
    }

    #[test]
    fn the_first_deferrable_custom_call_of_a_segment_is_deferred() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
        assert_eq!(gate.deferred_call_id(), Some("toolu_1"));
    }

    #[test]
    fn a_second_write_in_one_segment_is_denied_with_the_retry_text() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
        let second = hook(&mut gate, "toolu_2", "mcp__tools__create_refund");
        assert_eq!(denial(&second), (RETRY_REFUND, DenyReason::OnlyOneDeferredCall));
        assert_eq!(gate.deferred_call_id(), Some("toolu_1"));
    }

    #[test]
    fn a_cli_tool_that_needs_approval_after_a_deferred_write_is_denied_with_its_own_name() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
        let bash = hook(&mut gate, "toolu_2", "Bash");
        assert_eq!(
            denial(&bash),
            (
                "Bash did not run. Only one tool call per reply can run outside this turn, and another call \
                 already does. Call Bash again by itself.",
                DenyReason::OnlyOneDeferredCall
            )
        );
    }

    #[test]
    fn inline_calls_after_the_deferral_are_still_allowed() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
        assert_eq!(hook(&mut gate, "toolu_2", "mcp__tools__lookup_order"), allow());
        assert_eq!(hook(&mut gate, "toolu_3", "Read"), allow());
    }

    #[test]
    fn an_idempotent_custom_write_defers_without_approval_to_call_tool() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__set_status"), Decision::Defer);
        let deferred = gate.accept_deferral("toolu_1", "mcp__tools__set_status", json!({ "s": 1 }));
        assert_eq!(
            deferred.map(|call| call.handling),
            Ok(Handling::Deferred { requires_approval: false, runs_in: DeferredRun::CallTool })
        );
    }

    #[test]
    fn a_custom_read_that_requires_approval_is_deferred() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__audit_log"), Decision::Defer);
        assert!(refused(&mut gate, Some("toolu_1"), "audit_log"), "a deferred call never runs over MCP here");
    }

    #[test]
    fn an_approval_free_cli_tool_is_allowed_and_never_runs_over_our_mcp_server() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "Read"), allow());
        assert!(refused(&mut gate, Some("toolu_1"), "Read"));
    }

    #[test]
    fn a_cli_tool_with_an_approval_free_write_policy_runs_inline() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "Write"), allow());
    }

    #[test]
    fn a_cli_tool_without_policy_waits_for_approval_under_the_default_effect() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "Bash"), Decision::Defer);
        let deferred = gate.accept_deferral("toolu_1", "Bash", json!({ "command": "ls" }));
        assert_eq!(
            deferred,
            Ok(DeferredCall {
                tool_use_id: "toolu_1".to_owned(),
                tool_name: "Bash".to_owned(),
                kind: ToolKind::Cli,
                arguments: json!({ "command": "ls" }),
                policy: ToolPolicy { effect: Effect::Unclassified, requires_approval: true },
                handling: Handling::Deferred {
                    requires_approval: true,
                    runs_in: DeferredRun::ResumedSegment
                },
            })
        );
    }

    #[test]
    fn an_external_mcp_tool_is_a_cli_tool_named_in_full() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__github__create_issue"), Decision::Defer);
        let deferred = gate.accept_deferral("toolu_1", "mcp__github__create_issue", json!({}));
        assert_eq!(
            deferred.map(|call| (call.tool_name, call.kind)),
            Ok(("mcp__github__create_issue".to_owned(), ToolKind::Cli))
        );
    }

    // --- subagents ---

    #[test]
    fn a_deferrable_call_inside_a_subagent_is_denied_with_the_main_conversation_text() {
        let mut gate = gate();
        let decision = decided(
            gate.pre_tool_use(&call("toolu_1", "mcp__tools__create_refund").in_subagent(Some("a1".into()))),
        );
        assert_eq!(
            denial(&decision),
            (
                "mcp__tools__create_refund did not run. A subagent cannot call it, because its calls run outside \
                 this turn. Call mcp__tools__create_refund from the main conversation instead.",
                DenyReason::InSubagent
            )
        );
        assert_eq!(gate.deferred_call_id(), None, "the segment's deferral stays free");
        assert_eq!(hook(&mut gate, "toolu_2", "mcp__tools__create_refund"), Decision::Defer);
    }

    #[test]
    fn an_inline_call_inside_a_subagent_is_allowed() {
        let mut gate = gate();
        let read = decided(gate.pre_tool_use(&call("toolu_1", "mcp__tools__lookup_order").in_subagent(None)));
        assert_eq!(read, allow());
        assert_eq!(gate.permit_mcp_call(Some("toolu_1"), "lookup_order"), McpPermit::Run);
        let grep = decided(gate.pre_tool_use(&call("toolu_2", "Grep").in_subagent(None)));
        assert_eq!(grep, allow());
    }

    // --- one decision per tool use ID ---

    #[test]
    fn a_second_pre_tool_use_for_a_decided_id_is_denied_and_keeps_the_first_decision() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__lookup_order"), allow());
        let again = hook(&mut gate, "toolu_1", "mcp__tools__create_refund");
        assert_eq!(
            denial(&again),
            (
                "mcp__tools__create_refund did not run. This tool use ID already has a decision in this reply; \
                 call mcp__tools__create_refund again with a new tool use.",
                DenyReason::AlreadyDecided
            )
        );
        assert_eq!(gate.decision("toolu_1"), Some(&allow()));
        assert_eq!(gate.deferred_call_id(), None, "the repeated ID did not take the deferral");
        assert!(refused(&mut gate, Some("toolu_1"), "create_refund"), "no permit for the other tool");
    }

    #[test]
    fn a_deferred_id_asked_again_is_denied_and_stays_deferred() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
        assert_eq!(
            denial(&hook(&mut gate, "toolu_1", "mcp__tools__create_refund")).1,
            DenyReason::AlreadyDecided
        );
        assert_eq!(gate.decision("toolu_1"), Some(&Decision::Defer));
        assert_eq!(gate.deferred_call_id(), Some("toolu_1"));
    }

    #[test]
    fn a_denied_id_asked_again_gets_the_same_denial() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
        let first = hook(&mut gate, "toolu_2", "Bash");
        assert_eq!(hook(&mut gate, "toolu_2", "Bash"), first);
        assert_eq!(ask(&mut gate, "toolu_2", "Bash"), first);
    }

    // --- can_use_tool fallback ---

    #[test]
    fn can_use_tool_after_a_hook_allow_is_denied() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "Read"), allow());
        assert_eq!(denial(&ask(&mut gate, "toolu_1", "Read")).1, DenyReason::AlreadyDecided);
        assert_eq!(gate.decision("toolu_1"), Some(&allow()));
    }

    #[test]
    fn can_use_tool_for_an_ignored_defer_is_denied_with_the_retry_text_and_frees_the_deferral() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
        assert_eq!(
            denial(&ask(&mut gate, "toolu_1", "mcp__tools__create_refund")),
            (RETRY_REFUND, DenyReason::DeferIgnored)
        );
        assert_eq!(gate.deferred_call_id(), None);
        assert!(gate.accept_deferral("toolu_1", "mcp__tools__create_refund", json!({})).is_err());
        assert_eq!(hook(&mut gate, "toolu_2", "mcp__tools__create_refund"), Decision::Defer);
    }

    #[test]
    fn can_use_tool_for_a_new_deferrable_call_is_denied_with_the_retry_text() {
        let mut gate = gate();
        assert_eq!(
            denial(&ask(&mut gate, "toolu_1", "mcp__tools__create_refund")),
            (RETRY_REFUND, DenyReason::DeferIgnored)
        );
        assert_eq!(gate.deferred_call_id(), None, "can_use_tool never defers");
    }

    #[test]
    fn can_use_tool_for_a_new_inline_call_uses_the_same_table() {
        let mut gate = gate();
        assert_eq!(ask(&mut gate, "toolu_1", "mcp__tools__lookup_order"), allow());
        assert_eq!(gate.permit_mcp_call(Some("toolu_1"), "lookup_order"), McpPermit::Run);
        assert_eq!(ask(&mut gate, "toolu_2", "Grep"), allow());
    }

    // --- resumed segments ---

    #[test]
    fn the_pending_custom_call_replays_its_record_with_the_recorded_arguments() {
        let record = refund_record(Outcome::Succeeded { output: "refunded r_1".to_owned() });
        let mut gate = gate().resuming(record.clone());
        let decision = hook(&mut gate, "toolu_refund", "mcp__tools__create_refund");
        assert_eq!(decision, Decision::Replay(record));
        assert_eq!(
            decision.hook_response(),
            json!({ "hookSpecificOutput": {
                "hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": { "order_id": "7" },
            } })
        );
    }

    #[test]
    fn the_mcp_server_returns_the_recorded_output_once_without_running_the_tool() {
        let mut gate =
            gate().resuming(refund_record(Outcome::Succeeded { output: "refunded r_1".to_owned() }));
        let _ = hook(&mut gate, "toolu_refund", "mcp__tools__create_refund");
        assert_eq!(
            gate.permit_mcp_call(Some("toolu_refund"), "create_refund"),
            McpPermit::Replay(ToolResult { text: "refunded r_1".to_owned(), is_error: false })
        );
        assert!(refused(&mut gate, Some("toolu_refund"), "create_refund"), "a record replays at most once");
    }

    #[test]
    fn a_rejected_custom_call_is_allowed_and_the_mcp_server_returns_the_rejection_text() {
        let mut gate =
            gate().resuming(refund_record(Outcome::Rejected { message: Some("wrong order".to_owned()) }));
        assert!(hook(&mut gate, "toolu_refund", "mcp__tools__create_refund").is_allow());
        assert_eq!(
            gate.permit_mcp_call(Some("toolu_refund"), "create_refund"),
            McpPermit::Replay(ToolResult {
                text: "The user rejected this call: wrong order".to_owned(),
                is_error: true
            })
        );
    }

    #[test]
    fn an_unknown_outcome_replays_as_the_unknown_outcome_text() {
        let mut gate = gate().resuming(refund_record(Outcome::OutcomeUnknown));
        assert!(hook(&mut gate, "toolu_refund", "mcp__tools__create_refund").is_allow());
        let McpPermit::Replay(result) = gate.permit_mcp_call(Some("toolu_refund"), "create_refund") else {
            panic!("expected a replay");
        };
        assert!(result.is_error);
        assert!(
            result.text.starts_with("The outcome of mcp__tools__create_refund is unknown"),
            "{}",
            result.text
        );
    }

    #[test]
    fn an_approved_cli_tool_is_allowed_with_its_recorded_input_and_runs_inside_the_cli() {
        let record = bash_record(Outcome::approved_cli_tool());
        let mut gate = gate().resuming(record.clone());
        let decision = hook(&mut gate, "toolu_bash", "Bash");
        assert_eq!(decision, Decision::Replay(record));
        assert_eq!(
            decision.hook_response()["hookSpecificOutput"]["updatedInput"],
            json!({ "command": "make deploy" })
        );
        assert!(refused(&mut gate, Some("toolu_bash"), "Bash"), "our MCP server never serves a CLI tool");
    }

    #[test]
    fn a_rejected_cli_tool_is_denied_with_the_rejection_text() {
        let mut gate =
            gate().resuming(bash_record(Outcome::Rejected { message: Some("not on prod".to_owned()) }));
        assert_eq!(
            denial(&hook(&mut gate, "toolu_bash", "Bash")),
            ("The user rejected this call: not on prod", DenyReason::Rejected)
        );
    }

    #[test]
    fn a_cli_tool_record_that_is_not_an_approval_is_denied_with_its_text() {
        let mut gate = gate().resuming(bash_record(Outcome::Failed { error: "approval expired".to_owned() }));
        assert_eq!(
            denial(&hook(&mut gate, "toolu_bash", "Bash")),
            ("approval expired", DenyReason::RecordedFailure)
        );
    }

    #[test]
    fn a_resumed_segment_may_defer_one_new_call_after_the_replay() {
        let mut gate = gate().resuming(refund_record(Outcome::Succeeded { output: "ok".to_owned() }));
        assert!(hook(&mut gate, "toolu_refund", "mcp__tools__create_refund").is_allow());
        assert_eq!(hook(&mut gate, "toolu_2", "mcp__tools__create_refund"), Decision::Defer);
        assert_eq!(denial(&hook(&mut gate, "toolu_3", "Bash")).1, DenyReason::OnlyOneDeferredCall);
    }

    #[test]
    fn a_record_replays_only_as_its_own_tool() {
        let cases = [
            (refund_record(Outcome::Succeeded { output: "ok".to_owned() }), "toolu_refund", "Bash"),
            (
                refund_record(Outcome::Succeeded { output: "ok".to_owned() }),
                "toolu_refund",
                "mcp__tools__lookup_order",
            ),
            (bash_record(Outcome::approved_cli_tool()), "toolu_bash", "mcp__tools__Bash"),
            (bash_record(Outcome::approved_cli_tool()), "toolu_bash", "Write"),
        ];
        for (record, id, tool) in cases {
            let mut gate = gate().resuming(record);
            let decision = hook(&mut gate, id, tool);
            assert_eq!(denial(&decision).1, DenyReason::RecordedUnderThisId, "{tool}");
            assert!(
                denial(&decision)
                    .0
                    .starts_with(&format!("{tool} did not run. Another call with this tool use ID"))
            );
            let bare = tool.trim_start_matches("mcp__tools__");
            assert!(refused(&mut gate, Some(id), bare), "{tool} must not run under the record's ID");
        }
    }

    #[test]
    fn the_pending_call_does_not_replay_inside_a_subagent() {
        let mut gate = gate().resuming(refund_record(Outcome::Succeeded { output: "ok".to_owned() }));
        let decision =
            decided(gate.pre_tool_use(&call("toolu_refund", "mcp__tools__create_refund").in_subagent(None)));
        assert_eq!(denial(&decision).1, DenyReason::RecordedUnderThisId);
    }

    #[test]
    fn a_recorded_call_that_an_earlier_segment_resumed_is_denied() {
        let earlier = ToolCallRecord::new(
            "toolu_old",
            "create_refund",
            ToolKind::Custom,
            json!({}),
            Outcome::OutcomeUnknown,
        );
        let mut gate = gate().with_turn_records([earlier]);
        assert_eq!(
            denial(&hook(&mut gate, "toolu_old", "mcp__tools__create_refund")).1,
            DenyReason::RecordedUnderThisId
        );
        assert!(refused(&mut gate, Some("toolu_old"), "create_refund"));
        assert_eq!(gate.deferred_call_id(), None);
    }

    #[test]
    fn the_pending_record_replays_even_when_listed_among_the_turn_records() {
        let record = refund_record(Outcome::Succeeded { output: "ok".to_owned() });
        let mut gate = gate().with_turn_records([record.clone()]).resuming(record.clone());
        assert_eq!(hook(&mut gate, "toolu_refund", "mcp__tools__create_refund"), Decision::Replay(record));
    }

    #[test]
    fn a_second_decision_for_the_pending_call_is_denied() {
        let mut gate = gate().resuming(refund_record(Outcome::Succeeded { output: "ok".to_owned() }));
        assert!(hook(&mut gate, "toolu_refund", "mcp__tools__create_refund").is_allow());
        assert_eq!(
            denial(&hook(&mut gate, "toolu_refund", "mcp__tools__create_refund")).1,
            DenyReason::AlreadyDecided
        );
        assert_eq!(
            denial(&ask(&mut gate, "toolu_refund", "mcp__tools__create_refund")).1,
            DenyReason::AlreadyDecided
        );
    }

    #[test]
    fn can_use_tool_answers_a_resumed_call_whose_hook_did_not_run_from_the_record_once() {
        let mut gate =
            gate().resuming(refund_record(Outcome::Succeeded { output: "refunded r_1".to_owned() }));
        let asked =
            ToolCall::new("toolu_refund", "mcp__tools__create_refund", json!({ "order_id": "rewritten" }));
        let decision = decided(gate.can_use_tool(&asked));
        assert_eq!(
            decision.permission_result(&asked.input),
            Some(json!({ "behavior": "allow", "updatedInput": { "order_id": "7" } })),
            "the recorded arguments, never the input the CLI passes"
        );
        assert!(matches!(gate.permit_mcp_call(Some("toolu_refund"), "create_refund"), McpPermit::Replay(_)));
        assert_eq!(denial(&decided(gate.can_use_tool(&asked))).1, DenyReason::AlreadyDecided);
    }

    #[test]
    fn can_use_tool_denies_a_rejected_resumed_cli_tool_with_the_plain_rejection_text() {
        let mut gate = gate().resuming(bash_record(Outcome::Rejected { message: None }));
        let decision = ask(&mut gate, "toolu_bash", "Bash");
        assert_eq!(
            decision.permission_result(&json!({})),
            Some(json!({ "behavior": "deny", "message": "The user rejected this call." }))
        );
    }

    // --- tools that vanished or collide ---

    #[test]
    fn a_vanished_custom_tool_still_replays_its_record() {
        let record = ToolCallRecord::new(
            "toolu_gone",
            "retired_tool",
            ToolKind::Custom,
            json!({}),
            Outcome::Succeeded { output: "done".to_owned() },
        );
        let mut gate = gate().resuming(record.clone());
        assert_eq!(hook(&mut gate, "toolu_gone", "mcp__tools__retired_tool"), Decision::Replay(record));
        assert_eq!(
            gate.permit_mcp_call(Some("toolu_gone"), "retired_tool"),
            McpPermit::Replay(ToolResult { text: "done".to_owned(), is_error: false })
        );
    }

    #[test]
    fn only_a_pending_custom_tool_that_the_listing_lacks_is_replay_only() {
        let vanished = ToolCallRecord::new(
            "toolu_gone",
            "retired_tool",
            ToolKind::Custom,
            json!({}),
            Outcome::OutcomeUnknown,
        );
        assert_eq!(gate().resuming(vanished).replay_only_tool(), Some("retired_tool"));
        let listed = refund_record(Outcome::OutcomeUnknown);
        assert_eq!(gate().resuming(listed).replay_only_tool(), None);
        assert_eq!(gate().resuming(bash_record(Outcome::approved_cli_tool())).replay_only_tool(), None);
        assert_eq!(gate().replay_only_tool(), None);
    }

    #[test]
    fn a_new_call_of_a_vanished_custom_tool_is_denied() {
        let mut gate = gate();
        assert_eq!(
            denial(&hook(&mut gate, "toolu_1", "mcp__tools__retired_tool")),
            (
                "mcp__tools__retired_tool did not run. This agent does not offer mcp__tools__retired_tool now.",
                DenyReason::ToolNotOffered
            )
        );
        assert!(refused(&mut gate, Some("toolu_1"), "retired_tool"));
    }

    #[test]
    fn a_claude_code_tool_named_like_a_custom_tool_is_denied_and_fails_the_segment() {
        let mut gate = gate();
        assert_eq!(gate.failure(), None);
        let decision = hook(&mut gate, "toolu_1", "lookup_order");
        let (_, reason) = denial(&decision);
        assert_eq!(reason, DenyReason::NameCollision);
        assert!(reason.fails_segment());
        let failure = gate.failure().cloned();
        assert_eq!(failure, Some(GateError::NameCollision { tool: "lookup_order".to_owned() }));
        assert!(!failure.is_some_and(|error| error.is_retryable()));
    }

    // --- the MCP server ---

    #[test]
    fn an_mcp_call_without_a_tool_use_id_is_refused() {
        let mut gate = gate();
        let _ = hook(&mut gate, "toolu_1", "mcp__tools__lookup_order");
        assert_eq!(
            gate.permit_mcp_call(None, "lookup_order"),
            McpPermit::Refuse(ToolResult {
                text:
                    "mcp__tools__lookup_order did not run. Tollgate has no permission decision for this call."
                        .to_owned(),
                is_error: true,
            })
        );
    }

    #[test]
    fn an_mcp_call_under_an_undecided_or_denied_id_is_refused() {
        let mut gate = gate();
        assert!(refused(&mut gate, Some("toolu_never"), "lookup_order"));
        let _ = hook(&mut gate, "toolu_1", "mcp__tools__create_refund");
        let _ = hook(&mut gate, "toolu_2", "mcp__tools__create_refund");
        assert!(refused(&mut gate, Some("toolu_1"), "create_refund"), "deferred");
        assert!(refused(&mut gate, Some("toolu_2"), "create_refund"), "denied");
    }

    #[test]
    fn an_mcp_call_under_a_permitted_id_but_another_tool_is_refused_and_keeps_the_permit() {
        let mut gate = gate();
        let _ = hook(&mut gate, "toolu_1", "mcp__tools__lookup_order");
        assert!(refused(&mut gate, Some("toolu_1"), "create_refund"));
        assert_eq!(gate.permit_mcp_call(Some("toolu_1"), "lookup_order"), McpPermit::Run);
    }

    // --- the per-call CLI decider ---

    fn with_decider(
        step: Step,
        answer: Result<Option<CliToolDecision>, String>,
        gate: &mut Gate,
    ) -> Decision {
        match step {
            Step::AskCliDecider(query) => gate.answer_cli_decider(query, answer),
            Step::Decided(decision) => panic!("expected a decider query, got {decision:?}"),
        }
    }

    fn decide_bash(answer: Result<Option<CliToolDecision>, String>) -> (Gate, Decision) {
        let mut gate = gate().with_cli_decider();
        let bash = ToolCall::new("toolu_1", "Bash", json!({ "command": "ls" }));
        let step = gate.pre_tool_use(&bash);
        if let Step::AskCliDecider(query) = &step {
            assert_eq!(
                (query.tool_use_id(), query.tool_name(), query.input()),
                ("toolu_1", "Bash", &bash.input)
            );
        }
        let decision = with_decider(step, answer, &mut gate);
        (gate, decision)
    }

    #[test]
    fn the_cli_decider_may_allow_a_tool_that_the_table_would_defer() {
        let (gate, decision) = decide_bash(Ok(Some(CliToolDecision::Allow)));
        assert_eq!(decision, allow());
        assert_eq!(gate.decision("toolu_1"), Some(&allow()));
        assert_eq!(gate.deferred_call_id(), None);
    }

    #[test]
    fn the_cli_decider_may_rewrite_the_input() {
        let (_, decision) =
            decide_bash(Ok(Some(CliToolDecision::AllowWithInput(json!({ "command": "ls -la" })))));
        assert_eq!(
            decision.hook_response(),
            json!({ "hookSpecificOutput": {
                "hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": { "command": "ls -la" },
            } })
        );
    }

    #[test]
    fn the_cli_decider_may_deny_with_its_own_text() {
        let (_, decision) = decide_bash(Ok(Some(CliToolDecision::Deny("rm is not allowed".to_owned()))));
        assert_eq!(denial(&decision), ("rm is not allowed", DenyReason::CliDecider));
    }

    #[test]
    fn a_failing_cli_decider_denies_the_call_with_its_error() {
        let (_, decision) = decide_bash(Err("factory trapped".to_owned()));
        assert_eq!(denial(&decision), ("factory trapped", DenyReason::CliDeciderFailed));
    }

    #[test]
    fn the_cli_decider_may_require_approval_for_a_tool_the_table_allows() {
        let mut gate = gate().with_cli_decider();
        let step = gate.pre_tool_use(&call("toolu_1", "Read"));
        assert_eq!(
            with_decider(step, Ok(Some(CliToolDecision::RequireApproval)), &mut gate),
            Decision::Defer
        );
        let deferred = gate.accept_deferral("toolu_1", "Read", json!({ "file_path": "/etc/hosts" }));
        assert_eq!(
            deferred.map(|call| (call.policy, call.handling)),
            Ok((
                ToolPolicy { effect: Effect::Read, requires_approval: true },
                Handling::Deferred { requires_approval: true, runs_in: DeferredRun::ResumedSegment }
            ))
        );
    }

    #[test]
    fn without_an_answer_the_cli_decider_leaves_the_call_to_the_table() {
        let (gate, decision) = decide_bash(Ok(None));
        assert_eq!(decision, Decision::Defer);
        assert_eq!(gate.deferred_call_id(), Some("toolu_1"));
        let mut gate = self::gate().with_cli_decider();
        let step = gate.pre_tool_use(&call("toolu_2", "Grep"));
        assert_eq!(with_decider(step, Ok(None), &mut gate), allow());
    }

    #[test]
    fn a_decider_approval_requirement_inside_a_subagent_is_denied() {
        let mut gate = gate().with_cli_decider();
        let step = gate.pre_tool_use(&call("toolu_1", "Read").in_subagent(None));
        let decision = with_decider(step, Ok(Some(CliToolDecision::RequireApproval)), &mut gate);
        assert_eq!(denial(&decision).1, DenyReason::InSubagent);
    }

    #[test]
    fn a_decider_approval_requirement_after_the_deferral_is_denied_with_the_retry_text() {
        let mut gate = gate().with_cli_decider();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
        let step = gate.pre_tool_use(&call("toolu_2", "Read"));
        let decision = with_decider(step, Ok(Some(CliToolDecision::RequireApproval)), &mut gate);
        assert_eq!(denial(&decision).1, DenyReason::OnlyOneDeferredCall);
    }

    #[test]
    fn the_cli_decider_is_not_asked_about_custom_tools_or_replays() {
        let mut gate = gate().with_cli_decider().resuming(bash_record(Outcome::approved_cli_tool()));
        assert!(matches!(gate.pre_tool_use(&call("toolu_bash", "Bash")), Step::Decided(Decision::Replay(_))));
        assert!(matches!(gate.pre_tool_use(&call("toolu_1", "mcp__tools__lookup_order")), Step::Decided(_)));
        assert!(matches!(gate.pre_tool_use(&call("toolu_2", "mcp__tools__create_refund")), Step::Decided(_)));
    }

    #[test]
    fn a_call_waiting_for_the_cli_decider_cannot_be_decided_twice() {
        let mut gate = gate().with_cli_decider();
        let step = gate.pre_tool_use(&call("toolu_1", "Bash"));
        assert_eq!(gate.decision("toolu_1"), None);
        assert_eq!(denial(&hook(&mut gate, "toolu_1", "Bash")).1, DenyReason::AlreadyDecided);
        assert_eq!(with_decider(step, Ok(Some(CliToolDecision::Allow)), &mut gate), allow());
        assert_eq!(gate.decision("toolu_1"), Some(&allow()));
    }

    #[test]
    fn can_use_tool_asks_the_cli_decider_too_but_never_defers() {
        let mut gate = gate().with_cli_decider();
        let step = gate.can_use_tool(&call("toolu_1", "Bash"));
        let decision = with_decider(step, Ok(Some(CliToolDecision::RequireApproval)), &mut gate);
        assert_eq!(denial(&decision).1, DenyReason::DeferIgnored);
        assert_eq!(gate.deferred_call_id(), None);
    }

    // --- accepting the CLI's deferral ---

    #[test]
    fn the_deferral_becomes_a_call_with_the_clis_final_input() {
        let mut gate = gate();
        assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
        let deferred =
            gate.accept_deferral("toolu_1", "mcp__tools__create_refund", json!({ "order_id": "rewritten" }));
        let Ok(deferred) = deferred else { panic!("{deferred:?}") };
        assert_eq!(deferred.tool_name, "create_refund");
        assert_eq!(deferred.kind, ToolKind::Custom);
        assert_eq!(
            deferred.handling,
            Handling::Deferred { requires_approval: true, runs_in: DeferredRun::CallSingleAttemptTool }
        );
        assert_eq!(
            deferred.record(Outcome::OutcomeUnknown),
            ToolCallRecord::new(
                "toolu_1",
                "create_refund",
                ToolKind::Custom,
                json!({ "order_id": "rewritten" }),
                Outcome::OutcomeUnknown
            )
        );
    }

    #[test]
    fn a_deferral_the_gate_never_made_fails_the_segment() {
        let gate = gate();
        let error = gate.accept_deferral("toolu_1", "mcp__tools__create_refund", json!({}));
        assert_eq!(
            error,
            Err(GateError::NothingDeferred {
                tool_use_id: "toolu_1".to_owned(),
                tool_name: "mcp__tools__create_refund".to_owned(),
            })
        );
        assert!(error.is_err_and(|error| error.is_retryable()));
    }

    #[test]
    fn a_deferral_under_another_id_or_tool_fails_the_segment() {
        let mut gate = gate();
        let _ = hook(&mut gate, "toolu_1", "mcp__tools__create_refund");
        let _ = hook(&mut gate, "toolu_2", "mcp__tools__create_refund");
        assert_eq!(
            gate.accept_deferral("toolu_2", "mcp__tools__create_refund", json!({})),
            Err(GateError::DeferredAnotherCall {
                reported: "toolu_2".to_owned(),
                deferred: "toolu_1".to_owned()
            })
        );
        assert_eq!(
            gate.accept_deferral("toolu_1", "Bash", json!({})),
            Err(GateError::DeferredAnotherTool {
                tool_use_id: "toolu_1".to_owned(),
                reported: "Bash".to_owned(),
                deferred: "mcp__tools__create_refund".to_owned(),
            })
        );
    }

    // --- wire answers ---

    #[test]
    fn hook_responses_follow_the_protocol_shapes() {
        assert_eq!(
            allow().hook_response(),
            json!({ "hookSpecificOutput": { "hookEventName": "PreToolUse", "permissionDecision": "allow" } })
        );
        assert_eq!(
            Decision::Defer.hook_response(),
            json!({ "hookSpecificOutput": { "hookEventName": "PreToolUse", "permissionDecision": "defer" } })
        );
        assert_eq!(
            Decision::deny(DenyReason::CliDecider, "no".to_owned()).hook_response(),
            json!({ "hookSpecificOutput": {
                "hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "no",
            } })
        );
    }

    #[test]
    fn permission_results_follow_the_protocol_shapes() {
        let input = json!({ "command": "ls" });
        assert_eq!(
            allow().permission_result(&input),
            Some(json!({ "behavior": "allow", "updatedInput": input }))
        );
        assert_eq!(
            Decision::Allow { updated_input: Some(json!({ "command": "ls -la" })) }.permission_result(&input),
            Some(json!({ "behavior": "allow", "updatedInput": { "command": "ls -la" } }))
        );
        assert_eq!(
            Decision::deny(DenyReason::CliDecider, "no".to_owned()).permission_result(&input),
            Some(json!({ "behavior": "deny", "message": "no" }))
        );
        assert_eq!(Decision::Defer.permission_result(&input), None);
    }
}
