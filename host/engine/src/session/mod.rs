//! The session state machine: what each step result changes and which step comes next.
//!
//! This module owns the rules of docs/ARCHITECTURE.md, "One turn" (after the reference adapters'
//! "How a turn runs", "Effects and policies" and "When a turn fails"): `RunModel` (3 attempts per
//! segment), `AwaitToolApproval`, `CallTool` (idempotent, 3 attempts under one key, then
//! `outcome_unknown`), `CallSingleAttemptTool` (one attempt; a claim that finds it started records
//! `outcome_unknown`) and `ResumeTurn`; queued user messages; turn failure with `last_turn_error`
//! and the turn-failure note; usage and spend totals. It does no I/O: the Worker reads the
//! session's rows, asks a function here, and commits the [`Transition`] it gets back in one
//! transaction.
//!
//! Read [`Transition`] first, then the step functions:
//!
//! | step | functions |
//! | --- | --- |
//! | client calls | [`client::user_message`], [`client::resolution`] |
//! | `RunModel` | [`turn::plan_run_model`] → run the CLI → [`turn::on_segment`] |
//! | `AwaitToolApproval` | [`tools::on_approval`] |
//! | `CallTool`, `CallSingleAttemptTool` | [`tools::begin_tool_step`] → run the tool → [`tools::on_tool_result`] |
//! | `ResumeTurn` | [`tools::on_resume_turn`] |
//! | a recorded inline write inside `RunModel` | [`inline::unseen_writes`], [`inline::begin`] → run the tool → [`inline::on_result`] |
//! | any step of a turn a client cancels | [`cancel::request_event`] → the step sees the request → [`cancel::on_cancel`] |
//! | a client forks the session at a turn | [`fork::plan`]: where the turn ends and the fork's run state |
//!
//! # Stored formats (the reference adapters' wire contract)
//!
//! - A user message item: `{"kind":"user_prompt","text":…}` (item kind `user_prompt`); a
//!   turn-failure note has the same body under item kind `turn_failure_note`.
//! - A transcript item: `{"kind":"claude_transcript","session_id":"<uuid>","entries":[…]}` with the
//!   CLI's entries byte for byte. Tollgate stores one entry per item, keyed by the entry's `uuid`
//!   (the reference adapters group entries per API message; the concatenation in order is the same
//!   transcript).
//! - A subagent's transcript of one segment: `{"kind":"subagent","agent_id":…,"tool_use_id":…,
//!   "entries":[…]}` (item kind `subagent`, [`subagents`]); read by people, never resumed.
//! - The run state: `{"version":1,"session_id":…,"turn_entries":[…],…}` ([`RunState`]).
//! - A tool call: [`CallEntry`], whose final form is [`crate::record::ToolCallRecord`]'s JSON.
//! - Images, in a user message's `"images"` and a call's `"images"`: [`MediaRef`]s
//!   (`{"digest","media_type"}`); the bytes are in the store's media table, once per session.

pub mod batches;
pub mod cancel;
pub mod client;
pub mod fork;
pub mod grants;
pub mod inline;
pub mod mcp;
pub mod subagents;
pub mod tools;
pub mod turn;
pub mod view;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::approval::ApprovalRequest;
use crate::catalog::ToolKind;
use crate::events::{EventKind, InterruptOpened, Payload};
use crate::media::MediaRef;
use crate::policy::DeferredRun;
use crate::record::{Outcome, ToolCallRecord};

stored_names! {
    /// Step kinds, as stored.
    pub enum StepKind {
        /// Runs one CLI segment.
        RunModel = "RunModel",
        /// Waits, as a row, for a human decision on a deferred call.
        AwaitToolApproval = "AwaitToolApproval",
        /// Runs an idempotent custom tool call (up to 3 attempts under one key).
        CallTool = "CallTool",
        /// Runs a non-idempotent custom tool call once.
        CallSingleAttemptTool = "CallSingleAttemptTool",
        /// Starts the resumed segment of a turn whose deferred call has its record.
        ResumeTurn = "ResumeTurn",
        /// Settles a tool call an MCP client made by its policy ([`mcp`]).
        McpCall = "McpCall",
    }
}

stored_names! {
    /// What a session item is, stored as its name ([`ItemKind::as_str`]).
    pub enum ItemKind {
        /// A user message: `{"kind":"user_prompt","text":…}`.
        UserPrompt = "user_prompt",
        /// A turn-failure note: the same body as a user message.
        TurnFailureNote = "turn_failure_note",
        /// One CLI transcript entry: `{"kind":"claude_transcript","session_id":…,"entries":[…]}`.
        ClaudeTranscript = "claude_transcript",
        /// A subagent's transcript of one segment, kept for people to read (never resumed):
        /// `{"kind":"subagent","agent_id":…,"tool_use_id":…,"entries":[…]}` ([`subagents`]).
        Subagent = "subagent",
        /// A session grant's revocation (not a prompt: no turn reads it):
        /// `{"kind":"grant_revoked","tool_name":…,"decision_ids":[…],"revoked_by":…,"revoked_at":…}`.
        GrantRevoked = "grant_revoked",
        /// A tool call an MCP client made ([`mcp`]), the turn's whole input:
        /// `{"kind":"mcp_call","tool_name":…,"arguments":{…},"requested_by":…}`.
        McpCall = "mcp_call",
    }
}

stored_names! {
    /// Session statuses, as stored.
    pub enum SessionStatus {
        /// No turn runs; the session waits for a user message.
        Idle = "idle",
        /// A turn runs (a segment, a tool call, or one queued).
        Running = "running",
        /// A turn waits for a human decision.
        AwaitingApproval = "awaiting_approval",
    }
}

stored_names! {
    /// Why a turn failed: the `reason` of a `turn_failed` event, a closed set (a metrics label).
    pub enum FailureReason {
        /// The segment failed on its last attempt, or in a way another attempt cannot fix.
        SegmentFailed = "segment_failed",
        /// The segment lost its Worker (crashed, was killed, stalled past its lease) more times
        /// than [`Limits::max_lost_workers`] allows.
        WorkerStopped = "worker_stopped",
        /// The session's spend limit is reached.
        SpendLimit = "spend_limit",
        /// The CLI stopped the turn at its `max_turns` option (a result of subtype
        /// `error_max_turns`).
        MaxTurns = "max_turns",
        /// The CLI stopped the turn at its `max_budget_usd` option (a result of subtype
        /// `error_max_budget_usd`).
        MaxBudgetUsd = "max_budget_usd",
        /// The CLI deferred a call that runs inline.
        InlineDeferred = "inline_deferred",
        /// The step's stored rows cannot be read or do not fit together (corrupt, inconsistent).
        UnusableRows = "unusable_rows",
    }
}

impl FailureReason {
    /// The reason a CLI result of `subtype` ends its turn with, when the subtype says the CLI
    /// reached one of its own limits: the same limit stops another attempt after it paid for its
    /// model calls again (and ran its inline tools again), so the turn fails at once.
    ///
    /// ```
    /// use tollgate_engine::session::FailureReason;
    ///
    /// assert_eq!(FailureReason::cli_limit("error_max_turns"), Some(FailureReason::MaxTurns));
    /// assert_eq!(FailureReason::cli_limit("error_max_budget_usd"), Some(FailureReason::MaxBudgetUsd));
    /// assert_eq!(FailureReason::cli_limit("error_during_execution"), None);
    /// ```
    pub fn cli_limit(subtype: &str) -> Option<Self> {
        match subtype {
            "error_max_turns" => Some(FailureReason::MaxTurns),
            "error_max_budget_usd" => Some(FailureReason::MaxBudgetUsd),
            _ => None,
        }
    }
}

/// Attempts of one segment before its turn fails. An attempt cut short by a lost claim (its
/// Worker died) or handed back by a draining Worker does not count.
pub const RUN_MODEL_ATTEMPTS: i64 = 3;
/// Attempts of an idempotent tool call before it records `outcome_unknown`.
pub const CALL_TOOL_ATTEMPTS: i64 = 3;
/// The run state version this build reads and writes.
pub const RUN_STATE_VERSION: u32 = 1;

/// Lost Workers one segment may have before its turn fails ([`Limits::max_lost_workers`]).
pub const DEFAULT_MAX_LOST_WORKERS: i64 = 10;

/// Limits of a session that the state machine enforces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    /// No new segment starts once the session spent this much (US dollars, as the CLI reports
    /// `total_cost_usd`). Checked once per segment, so one segment can overshoot it.
    pub spend_limit_usd: Option<f64>,
    /// A segment whose claim was lost this many times (its Worker SIGKILLed, stalled past the
    /// lease, cut off from the store) and is claimed once more fails its turn with
    /// [`FailureReason::WorkerStopped`] instead of running: a segment that kills every Worker it
    /// lands on must stop somewhere. Lost claims never count toward [`RUN_MODEL_ATTEMPTS`].
    pub max_lost_workers: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { spend_limit_usd: None, max_lost_workers: DEFAULT_MAX_LOST_WORKERS }
    }
}

// What a segment adds to a session's totals, what the store adds up, and what the HTTP API
// shows: one type (its doc is the API document's description).
/// Token totals of a session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    /// Input tokens, cache included.
    pub input_tokens: i64,
    /// Cache reads.
    pub cached_input_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// Model calls.
    pub model_calls: i64,
}

/// The session's run state, stored as the session row's JSON.
///
/// `session_id` and `turn_entries` are the reference adapters' `FrameworkRunState` of a suspended turn; the
/// other fields are Tollgate's and default when absent, so an older writer's state still reads.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunState {
    /// Always [`RUN_STATE_VERSION`].
    pub version: u32,
    /// The CLI session of the turn in progress (or of the last one).
    pub session_id: Option<String>,
    /// The transcript entries of the turn in progress, byte for byte.
    pub turn_entries: Vec<Box<RawValue>>,
    /// The turn in progress.
    #[serde(default)]
    pub turn: Option<TurnState>,
    /// Turns that ended (completed or failed); the next turn is `turn-<turns_ended + 1>`.
    #[serde(default)]
    pub turns_ended: u64,
    /// The highest item seq of a prompt a completed turn answered; later prompts (and notes)
    /// go to the next turn.
    #[serde(default)]
    pub prompts_through: i64,
    /// Why the last turn failed; cleared when a turn completes.
    #[serde(default)]
    pub last_turn_error: Option<String>,
    /// What the session's segments cost, as the CLI reported (US dollars).
    #[serde(default)]
    pub cost_usd: f64,
    /// Who cancelled the last turn, when it was cancelled; cleared when a turn completes or fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn_cancelled: Option<cancel::TurnCancelled>,
}

/// The turn in progress, once one of its segments ended on a deferred call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnState {
    /// `turn-<n>`.
    pub turn_id: String,
    /// The highest item seq of the prompts this turn answers.
    pub prompts_upto: i64,
    /// The turn's interrupts opened ahead, in batches ([`batches`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ahead: Vec<batches::AheadCall>,
    /// The turn's trace, fixed when it started (absent for a turn a build without traces began).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TurnTrace>,
}

/// Where a turn's spans belong: the trace and the `invoke_agent` span every `chat` and
/// `execute_tool` span of the turn is a child of, and when the turn started. A turn spans
/// segments, Workers and days: it is fixed when the turn starts, stored with the turn once a
/// segment defers a call, and the span is emitted with this start when the turn ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnTrace {
    /// The W3C trace id, 32 lowercase hex digits.
    pub trace_id: String,
    /// The `invoke_agent` span's id, 16 lowercase hex digits.
    pub span_id: String,
    /// When the turn started (its first step was queued), Unix ms on the store's clock.
    pub started_at_ms: i64,
}

impl Default for RunState {
    fn default() -> Self {
        RunState {
            version: RUN_STATE_VERSION,
            session_id: None,
            turn_entries: Vec::new(),
            turn: None,
            turns_ended: 0,
            prompts_through: 0,
            last_turn_error: None,
            cost_usd: 0.0,
            last_turn_cancelled: None,
        }
    }
}

impl RunState {
    /// Reads a stored run state.
    ///
    /// # Errors
    /// Not a JSON object of this shape, or a `version` newer than this build.
    pub fn parse(text: &str) -> Result<Self, EngineError> {
        #[derive(Deserialize)]
        struct Version {
            version: Option<Value>,
        }
        let version = serde_json::from_str::<Version>(text)
            .map_err(|e| EngineError::Corrupt { what: "run state".into(), reason: e.to_string() })?
            .version;
        match version.as_ref().and_then(Value::as_u64) {
            Some(v) if v == u64::from(RUN_STATE_VERSION) => {}
            Some(v) if v > u64::from(RUN_STATE_VERSION) => {
                return Err(EngineError::FutureVersion { what: "run state".into(), found: v });
            }
            _ => {
                return Err(EngineError::Corrupt {
                    what: "run state".into(),
                    reason: format!("`version` must be {RUN_STATE_VERSION}, found {version:?}"),
                });
            }
        }
        serde_json::from_str(text)
            .map_err(|e| EngineError::Corrupt { what: "run state".into(), reason: e.to_string() })
    }

    /// The stored JSON.
    pub fn to_raw(&self) -> Box<RawValue> {
        serde_json::value::to_raw_value(self).expect("a run state always serializes")
    }

    /// The turn id the next new turn gets.
    pub fn next_turn_id(&self) -> String {
        format!("turn-{}", self.turns_ended + 1)
    }
}

/// Where a deferred call is in its life: `succeeded` to `outcome_unknown` are final, each an
/// `Outcome`; `unused` and `cancelled` are final too, for calls that never ran. Stored in the
/// session's run state and sent as is by the HTTP API (`status` and that state's field).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CallState {
    /// Waits for a decision.
    PendingApproval,
    /// Approved (or needs no approval); its tool step is queued.
    Queued,
    /// Its tool step started attempt `attempt`; a single-attempt call found here after a crash
    /// records `outcome_unknown`.
    Started {
        /// The attempt that started, from 1.
        attempt: i64,
    },
    /// The tool ran and returned.
    Succeeded {
        /// What it returned.
        output: String,
    },
    /// The tool failed.
    Failed {
        /// The failure text.
        error: String,
    },
    /// The reviewer rejected the call.
    Rejected {
        /// The reviewer's reason (`null` when none was given).
        #[cfg_attr(feature = "openapi", schema(required = true))]
        message: Option<String>,
    },
    /// A single-attempt call whose Worker died while it ran: it may or may not have happened.
    OutcomeUnknown,
    /// A call held back in a batch whose interrupt was opened ahead, and whose turn ended before
    /// the model called it again: its decision (if anybody made one: see the audit trail) was
    /// never used, and the interrupt was closed if still open. It never ran.
    Unused,
    /// Its turn was cancelled before it ran (waiting for a decision, or approved and queued): it
    /// never ran, and its interrupt was closed if still open.
    Cancelled,
}

impl CallState {
    /// The stored status name.
    pub fn name(&self) -> &'static str {
        match self {
            CallState::PendingApproval => "pending_approval",
            CallState::Queued => "queued",
            CallState::Started { .. } => "started",
            CallState::Succeeded { .. } => "succeeded",
            CallState::Failed { .. } => "failed",
            CallState::Rejected { .. } => "rejected",
            CallState::OutcomeUnknown => "outcome_unknown",
            CallState::Unused => "unused",
            CallState::Cancelled => "cancelled",
        }
    }

    /// The final state's text: the output, the error or the reviewer's message.
    pub fn text(&self) -> Option<&str> {
        match self {
            CallState::Succeeded { output: text } | CallState::Failed { error: text } => Some(text),
            CallState::Rejected { message } => message.as_deref(),
            _ => None,
        }
    }

    /// The final outcome, once there is one.
    pub fn outcome(&self) -> Option<Outcome> {
        Some(match self {
            CallState::Succeeded { output } => Outcome::Succeeded { output: output.clone() },
            CallState::Failed { error } => Outcome::Failed { error: error.clone() },
            CallState::Rejected { message } => Outcome::Rejected { message: message.clone() },
            CallState::OutcomeUnknown => Outcome::OutcomeUnknown,
            CallState::PendingApproval
            | CallState::Queued
            | CallState::Started { .. }
            | CallState::Unused
            | CallState::Cancelled => {
                return None;
            }
        })
    }
}

impl From<Outcome> for CallState {
    fn from(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Succeeded { output } => CallState::Succeeded { output },
            Outcome::Failed { error } => CallState::Failed { error },
            Outcome::Rejected { message } => CallState::Rejected { message },
            Outcome::OutcomeUnknown => CallState::OutcomeUnknown,
        }
    }
}

/// A deferred tool call as stored: the record's fields, where it runs, and its state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallEntry {
    /// The model's tool use ID.
    pub tool_call_id: String,
    /// A custom tool's own name, or a CLI tool's CLI name.
    pub tool_name: String,
    /// Which side runs it.
    pub kind: ToolKind,
    /// The input it runs with.
    pub arguments: Value,
    /// The turn that made it.
    pub turn_id: String,
    /// Whether it waits for a decision first.
    pub requires_approval: bool,
    /// Where it runs once approved.
    pub runs_in: DeferredRun,
    /// The input the model asked for, when an approver edited it (`arguments` is then the
    /// edited input, the one that runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_arguments: Option<Value>,
    /// The session grant this call's approval made (decided with `scope: "session"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants_session: Option<grants::GrantRef>,
    /// The session grant it was approved under, with no interrupt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_under: Option<grants::GrantRef>,
    /// The batch its interrupt belongs to ([`batches`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// The decision made ahead in a batch that it ran under, or whose interrupt it waits on (an
    /// `unused` call: its own interrupt opened ahead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_ahead: Option<batches::AheadRef>,
    /// It ran inside its segment, recorded before the CLI read the result ([`inline`]); absent
    /// (false) for a deferred call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline: bool,
    /// The images of its result, after the text of its final state, by reference (absent when
    /// there are none). A replay sends them to the model again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<MediaRef>,
    /// What the tool wrote to stderr on its last attempt that failed (a Python traceback, a
    /// JavaScript stack), for the operators who read the record: never in what the model reads
    /// ([`CallEntry::record`] leaves it out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<String>,
    /// The MCP client principal that made the call ([`mcp`]); absent for a call the model made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// Where it is.
    #[serde(flatten)]
    pub state: CallState,
}

impl CallEntry {
    /// Reads a stored call.
    ///
    /// # Errors
    /// Not a call of this shape.
    pub fn parse(text: &str) -> Result<Self, EngineError> {
        serde_json::from_str(text)
            .map_err(|e| EngineError::Corrupt { what: "tool call record".into(), reason: e.to_string() })
    }

    /// A new call of turn `turn_id` in `state`, as it is made: approval-free, run in `CallTool`,
    /// nothing edited, granted, batched, decided ahead or recorded yet (set those with struct update
    /// syntax).
    pub fn new(
        tool_call_id: &str,
        tool_name: &str,
        kind: ToolKind,
        arguments: Value,
        turn_id: &str,
        state: CallState,
    ) -> Self {
        CallEntry {
            tool_call_id: tool_call_id.to_owned(),
            tool_name: tool_name.to_owned(),
            kind,
            arguments,
            turn_id: turn_id.to_owned(),
            requires_approval: false,
            runs_in: DeferredRun::CallTool,
            original_arguments: None,
            grants_session: None,
            approved_under: None,
            batch_id: None,
            decided_ahead: None,
            inline: false,
            images: Vec::new(),
            diagnostics: None,
            requested_by: None,
            state,
        }
    }

    /// The stored JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a call always serializes")
    }

    /// The record the gate replays, once the call is final.
    pub fn record(&self) -> Option<ToolCallRecord> {
        let mut record = ToolCallRecord::new(
            self.tool_call_id.clone(),
            self.tool_name.clone(),
            self.kind,
            self.arguments.clone(),
            self.state.outcome()?,
        );
        // A custom tool's output says it ([`tools::on_tool_result`]); a CLI tool's comes from the CLI.
        if let (ToolKind::Cli, Some(original)) = (self.kind, &self.original_arguments) {
            record.note = Some(crate::texts::input_edited_note(original, &self.arguments));
        }
        record.images = self.images.iter().cloned().map(Into::into).collect();
        Some(record)
    }

    /// `<session>/<turn>/<tool call>`: the key every attempt of the call runs under.
    pub fn idempotency_key(&self, session_id: &str) -> String {
        format!("{session_id}/{}/{}", self.turn_id, self.tool_call_id)
    }

    fn with_state(&self, state: CallState) -> CallEntry {
        CallEntry { state, ..self.clone() }
    }

    /// Its `tool_call_started` event as Tollgate runs attempt `attempt` of it: `deferred` when
    /// it runs as a step of its own, out of the segment.
    fn started_event(&self, attempt: i64, deferred: bool) -> Payload {
        Payload::ToolCallStarted(crate::events::ToolCallStarted {
            turn_id: self.turn_id.clone(),
            tool_call_id: self.tool_call_id.clone(),
            tool_name: self.tool_name.clone(),
            kind: None,
            arguments: self.arguments.clone(),
            attempt,
            deferred,
        })
    }

    /// Its `tool_call_finished` event, once its state is final: `deferred` when it ran as a step
    /// of its own.
    fn finished_event(&self, deferred: bool) -> Payload {
        Payload::ToolCallFinished(crate::events::ToolCallFinished {
            turn_id: self.turn_id.clone(),
            attempt: None,
            tool_call_id: self.tool_call_id.clone(),
            tool_name: self.tool_name.clone(),
            kind: None,
            status: self.state.name().to_owned(),
            deferred,
        })
    }
}

/// A step payload that names a turn and one of its deferred calls.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallStep {
    /// The turn.
    pub turn_id: String,
    /// The deferred call.
    pub tool_call_id: String,
}

/// `RunModel`'s payload: a new turn (`{}`), or the resumed segment of `turn_id` whose deferred
/// call `resume` has its record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunModelStep {
    /// The turn being resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// The deferred call the resumed segment replays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
}

/// A stored step, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepInput {
    /// See [`StepKind::RunModel`].
    RunModel(RunModelStep),
    /// See [`StepKind::AwaitToolApproval`].
    AwaitToolApproval(CallStep),
    /// See [`StepKind::CallTool`].
    CallTool(CallStep),
    /// See [`StepKind::CallSingleAttemptTool`].
    CallSingleAttemptTool(CallStep),
    /// See [`StepKind::ResumeTurn`].
    ResumeTurn(CallStep),
    /// See [`StepKind::McpCall`].
    McpCall(CallStep),
}

impl StepInput {
    /// Parses a stored step's kind and payload.
    ///
    /// # Errors
    /// An unknown kind or a payload of the wrong shape.
    pub fn parse(kind: &str, payload: &str) -> Result<Self, EngineError> {
        let corrupt = |e: serde_json::Error| EngineError::Corrupt {
            what: format!("{kind} step payload"),
            reason: e.to_string(),
        };
        let Some(known) = StepKind::parse(kind) else {
            return Err(EngineError::UnknownStep { kind: kind.to_owned() });
        };
        Ok(match known {
            StepKind::RunModel => StepInput::RunModel(serde_json::from_str(payload).map_err(corrupt)?),
            StepKind::AwaitToolApproval => {
                StepInput::AwaitToolApproval(serde_json::from_str(payload).map_err(corrupt)?)
            }
            StepKind::CallTool => StepInput::CallTool(serde_json::from_str(payload).map_err(corrupt)?),
            StepKind::CallSingleAttemptTool => {
                StepInput::CallSingleAttemptTool(serde_json::from_str(payload).map_err(corrupt)?)
            }
            StepKind::ResumeTurn => StepInput::ResumeTurn(serde_json::from_str(payload).map_err(corrupt)?),
            StepKind::McpCall => StepInput::McpCall(serde_json::from_str(payload).map_err(corrupt)?),
        })
    }
}

/// What happens to the step that produced a [`Transition`].
#[derive(Clone, Debug, PartialEq)]
pub enum Finish {
    /// Done, with this output.
    Done(Value),
    /// Run it again after this delay.
    Retry(Duration),
    /// Keep holding it (changes written before a side effect).
    Keep,
}

/// When a new step becomes claimable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// Now.
    Now,
    /// When the interrupt with this id is resolved.
    OnInterrupt(String),
}

/// A step to enqueue.
#[derive(Clone, Debug, PartialEq)]
pub struct NextStep {
    /// Its kind.
    pub kind: StepKind,
    /// Its payload.
    pub payload: Value,
    /// When it becomes claimable.
    pub start: Start,
    /// Enqueue only if the session holds a `user_prompt` item after this seq (a queued message
    /// starts the next turn; the store checks this inside the commit).
    pub only_if_prompts_after: Option<i64>,
    /// The session's status once the step is enqueued (only if it is): a new turn's `RunModel`
    /// makes the session `running` from the moment it is queued.
    pub session_status: Option<SessionStatus>,
}

/// An item to append to the session's log.
#[derive(Clone, Debug)]
pub struct NewItem {
    /// Its kind.
    pub kind: ItemKind,
    /// A transcript entry's uuid.
    pub uuid: Option<String>,
    /// The turn it belongs to.
    pub turn_id: Option<String>,
    /// Its JSON, byte for byte.
    pub body: Box<RawValue>,
}

/// An interrupt to open.
#[derive(Clone, Debug, PartialEq)]
pub struct NewInterrupt {
    /// Its id (the deferred call's tool use ID).
    pub interrupt_id: String,
    /// What is asked.
    pub request: ApprovalRequest,
}

impl NewInterrupt {
    /// Its `interrupt_opened` event, showing its request.
    pub fn opened_event(&self) -> NewEvent {
        let opened =
            InterruptOpened { interrupt_id: self.interrupt_id.clone(), request: self.request.clone() };
        Payload::InterruptOpened(Box::new(opened)).into()
    }
}

/// An interrupt to close if it is still open (nobody decided it): its resolution is written, no
/// audit row, no waiting step.
#[derive(Clone, Debug, PartialEq)]
pub struct CloseInterrupt {
    /// Its id.
    pub interrupt_id: String,
    /// The resolution it gets ([`batches::closing_decision`]).
    pub resolution: Value,
    /// Appended only if it is closed here (not decided before): its `interrupt_resolved`.
    pub events: Vec<NewEvent>,
}

/// An event to append.
#[derive(Clone, Debug, PartialEq)]
pub struct NewEvent {
    /// Its kind.
    pub kind: EventKind,
    /// Its JSON.
    pub payload: Value,
}

impl From<Payload> for NewEvent {
    fn from(payload: Payload) -> Self {
        NewEvent { kind: payload.kind(), payload: payload.to_value() }
    }
}

/// Everything a step result changes, committed in one transaction with the step's fence.
#[derive(Clone, Debug)]
pub struct Transition {
    /// What happens to the step.
    pub finish: Finish,
    /// Items to append.
    pub items: Vec<NewItem>,
    /// Tool calls to write (whole).
    pub calls: Vec<CallEntry>,
    /// Interrupts to open.
    pub interrupts: Vec<NewInterrupt>,
    /// Interrupts to close, each only if still open.
    pub close_interrupts: Vec<CloseInterrupt>,
    /// Steps to enqueue.
    pub steps: Vec<NextStep>,
    /// The session's new status.
    pub status: Option<SessionStatus>,
    /// The session's new run state.
    pub run_state: Option<RunState>,
    /// Added to the session's usage totals.
    pub usage: Usage,
    /// Events to append.
    pub events: Vec<NewEvent>,
    /// What becomes of the session's pending cancel request, if it has one.
    pub cancel: CancelRequestChange,
}

/// What a [`Transition`] does with the session's pending cancel request ([`cancel`]): the store
/// keeps one per session until a transition drops or applies it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CancelRequestChange {
    /// Leave it: the turn goes on, and its next step applies it.
    #[default]
    Keep,
    /// The turn ended another way (it completed or failed first): a request made during it is
    /// dropped, so it never cancels the next turn.
    Drop,
    /// The turn ended cancelled: the request is done, and the audit trail names who made it.
    Applied(cancel::TurnCancelled),
}

impl Transition {
    fn new(finish: Finish) -> Self {
        Transition {
            finish,
            items: Vec::new(),
            calls: Vec::new(),
            interrupts: Vec::new(),
            close_interrupts: Vec::new(),
            steps: Vec::new(),
            status: None,
            run_state: None,
            usage: Usage::default(),
            events: Vec::new(),
            cancel: CancelRequestChange::Keep,
        }
    }

    /// A transition that keeps the claim and changes nothing yet (add events to it).
    pub fn keep() -> Self {
        Transition::new(Finish::Keep)
    }

    fn event(mut self, event: Payload) -> Self {
        self.events.push(event.into());
        self
    }

    /// Changes the approval request of each interrupt the transition opens with `stamp`, which
    /// says whether it changed it; the `interrupt_opened` event of a changed one shows it changed.
    pub fn stamp_requests(&mut self, mut stamp: impl FnMut(&mut ApprovalRequest) -> bool) {
        self.stamp_requests_by_id(|_, request| stamp(request));
    }

    /// [`Transition::stamp_requests`], with each interrupt's id.
    pub fn stamp_requests_by_id(&mut self, mut stamp: impl FnMut(&str, &mut ApprovalRequest) -> bool) {
        for interrupt in &mut self.interrupts {
            if !stamp(&interrupt.interrupt_id, &mut interrupt.request) {
                continue;
            }
            for event in &mut self.events {
                let opened = event.kind == EventKind::InterruptOpened
                    && event.payload.get("interrupt_id").and_then(Value::as_str)
                        == Some(&interrupt.interrupt_id);
                if opened {
                    *event = interrupt.opened_event();
                }
            }
        }
    }
}

/// A stored row the state machine cannot use. The step that found it is not run; the row stays
/// as it is.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The row is not what Tollgate writes.
    #[error("the {what} is corrupt: {reason}")]
    Corrupt {
        /// Which row.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// The row was written by a newer Tollgate.
    #[error("the {what} has version {found}, newer than this Tollgate reads ({RUN_STATE_VERSION})")]
    FutureVersion {
        /// Which row.
        what: String,
        /// Its version.
        found: u64,
    },
    /// A step kind this build does not know.
    #[error("unknown step kind `{kind}`")]
    UnknownStep {
        /// The kind.
        kind: String,
    },
    /// The rows disagree with each other (a step for a call that does not exist, …).
    #[error("inconsistent session: {0}")]
    Inconsistent(String),
    /// A client call with bad input.
    #[error("{field}: {reason}")]
    BadInput {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

fn raw(value: &impl Serialize) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).expect("engine values always serialize")
}

#[cfg(test)]
mod tests;
