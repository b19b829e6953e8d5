//! The session's event stream: every [`EventKind`], listed once, and each kind's payload as a type
//! ([`Payload`], one variant per kind): the writers build them, the readers parse them, and a
//! stored payload keeps its bytes (each type serializes to the JSON the writers stored before
//! there were types, which a test checks kind by kind).
//!
//! The state machine writes most kinds; the API writes `decision_recorded`, a Worker firing a
//! deadline `interrupt_escalated`, the store `agent_upgraded`. The HTTP API's document, the
//! webhooks, the CLI and the web inbox all take the kinds from here, so a kind added here and
//! nowhere else fails their tests (`tollgate`'s `every_event_kind_reaches_every_consumer`).
//! A client groups live text by `(turn_id, step, attempt)`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::approval::ApprovalRequest;
use crate::catalog::ToolKind;
use crate::media::MediaRef;
use crate::session::client::DecisionScope;
use crate::session::grants::GrantRef;
use crate::session::{FailureReason, StepKind};

stored_names! {
    /// What an event says happened, stored as its name ([`EventKind::as_str`]); [`EventKind::ALL`]
    /// in the order the HTTP API's document lists them.
    pub enum EventKind {
        /// A user message arrived.
        UserMessage = "user_message",
        /// A turn's first segment started.
        TurnStarted = "turn_started",
        /// Text of the main conversation, one block at a time:
        /// `{"turn_id","attempt","offset","text"}` (`offset`: where it starts in the segment's text,
        /// in characters).
        TextDelta = "text_delta",
        /// Thinking of the main conversation (the model's visible reasoning), stored as text is:
        /// `{"turn_id","attempt","offset","text"}`, `offset` counted in the segment's thinking.
        ReasoningDelta = "reasoning_delta",
        /// A tool call started (inline, or a deferred call's step). An inline call's:
        /// `{"turn_id","attempt","tool_call_id","tool_name","kind","arguments","deferred":false}`,
        /// `kind` `custom` (a custom tool, by its own name) or `cli` (a built-in or an external MCP
        /// server's tool, by its CLI name).
        ToolCallStarted = "tool_call_started",
        /// A tool call finished or got its record. An inline call's:
        /// `{"turn_id","attempt","tool_call_id","tool_name","kind","status","deferred":false}`,
        /// `status` `succeeded` or `failed` (the model got an error result).
        ToolCallFinished = "tool_call_finished",
        /// A deferred call waits for a decision: [`InterruptOpened`].
        InterruptOpened = "interrupt_opened",
        /// A decision arrived.
        InterruptResolved = "interrupt_resolved",
        /// A deferred call was approved under a session grant, with no interrupt:
        /// `{"turn_id","tool_call_id","tool_name","grant":{tool_name,granted_by,granted_at,decision_id}}`.
        ApprovedUnderGrant = "approved_under_grant",
        /// A session grant was revoked: `{"tool_name","decision_ids","revoked_by","revoked_at"}`.
        GrantRevoked = "grant_revoked",
        /// The session waits on a person (status `awaiting_approval`): one approval round.
        /// `{"turn_id","tool_call_id","interrupt_id"}`; the interrupt is the call's own, or one
        /// opened ahead in a batch ([`crate::session::batches`]).
        ApprovalAwaited = "approval_awaited",
        /// A deferred call used a decision made ahead in a batch, with no new interrupt:
        /// `{"turn_id","tool_call_id","tool_name","decision_id","batch_id","approved"}`.
        DecidedAheadUsed = "decided_ahead_used",
        /// A turn ended with an interrupt opened ahead that no call used (closed if still open):
        /// `{"turn_id","interrupt_id","batch_id","tool_name","arguments"}`.
        AheadUnused = "ahead_unused",
        /// A step attempt failed and will run again.
        AttemptFailed = "attempt_failed",
        /// The turn answered.
        TurnCompleted = "turn_completed",
        /// The turn failed; see `last_turn_error`. Its payload: `{"turn_id","error","reason"}`
        /// with a [`crate::session::FailureReason`].
        TurnFailed = "turn_failed",
        /// A client asked to cancel the turn in progress: `{"requested_by"}`
        /// ([`crate::session::cancel`]).
        CancelRequested = "cancel_requested",
        /// The turn was cancelled: `{"turn_id","cancelled_by","requested_at"}`
        /// ([`crate::session::cancel`]).
        TurnCancelled = "turn_cancelled",
        /// The session was pinned to another agent digest: `{"from","from_pinned","to"}` (written
        /// by the store).
        AgentUpgraded = "agent_upgraded",
        /// A decision, for the audit trail: `{"interrupt_id","principal","decision","reason",
        /// "tool_name","input","edited_input"}` (written by the API; a deadline that rejects adds
        /// `deadline_at`).
        DecisionRecorded = "decision_recorded",
        /// An approval deadline handed a waiting call to other approvers:
        /// `{"interrupt_id","tool_name","escalate_to","escalated_from","deadline_passed",
        /// "next_deadline_secs","escalated_by"}` (written by the Worker that fired it).
        InterruptEscalated = "interrupt_escalated",
    }
}

impl EventKind {
    /// Whether it ends a turn (answered, failed or cancelled): a follower that waits for the
    /// session to be idle checks after these.
    pub fn ends_turn(self) -> bool {
        matches!(self, EventKind::TurnCompleted | EventKind::TurnFailed | EventKind::TurnCancelled)
    }
}

/// An event's payload as one part of the house writes it and another reads it, which knows its
/// kind, so the two cannot disagree. [`Payload::to_value`] is the JSON stored (keys sorted, every
/// field present that the kind always carries); [`Payload::parse`] reads one back by its stored
/// kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    /// `user_message`.
    UserMessage(UserMessage),
    /// `turn_started`.
    TurnStarted(TurnStarted),
    /// `text_delta`.
    TextDelta(TextBlock),
    /// `reasoning_delta`.
    ReasoningDelta(TextBlock),
    /// `tool_call_started`.
    ToolCallStarted(ToolCallStarted),
    /// `tool_call_finished`.
    ToolCallFinished(ToolCallFinished),
    /// `interrupt_opened` (boxed: its request is the largest payload).
    InterruptOpened(Box<InterruptOpened>),
    /// `interrupt_resolved`.
    InterruptResolved(InterruptResolved),
    /// `approved_under_grant`.
    ApprovedUnderGrant(ApprovedUnderGrant),
    /// `grant_revoked`.
    GrantRevoked(GrantRevoked),
    /// `approval_awaited`.
    ApprovalAwaited(ApprovalAwaited),
    /// `decided_ahead_used`.
    DecidedAheadUsed(DecidedAheadUsed),
    /// `ahead_unused`.
    AheadUnused(AheadUnused),
    /// `attempt_failed`.
    AttemptFailed(AttemptFailed),
    /// `turn_completed`.
    TurnCompleted(TurnCompleted),
    /// `turn_failed`.
    TurnFailed(TurnFailed),
    /// `cancel_requested`.
    CancelRequested(CancelRequested),
    /// `turn_cancelled`.
    TurnCancelled(TurnCancelled),
    /// `agent_upgraded`.
    AgentUpgraded(AgentUpgraded),
    /// `decision_recorded`.
    DecisionRecorded(DecisionRecorded),
    /// `interrupt_escalated`.
    InterruptEscalated(InterruptEscalated),
}

/// Applies `$f` to the payload of each variant, naming the kind it is stored under.
macro_rules! each_event {
    ($event:expr, $payload:ident => $f:expr) => {
        match $event {
            Payload::UserMessage($payload) => (EventKind::UserMessage, $f),
            Payload::TurnStarted($payload) => (EventKind::TurnStarted, $f),
            Payload::TextDelta($payload) => (EventKind::TextDelta, $f),
            Payload::ReasoningDelta($payload) => (EventKind::ReasoningDelta, $f),
            Payload::ToolCallStarted($payload) => (EventKind::ToolCallStarted, $f),
            Payload::ToolCallFinished($payload) => (EventKind::ToolCallFinished, $f),
            Payload::InterruptOpened($payload) => (EventKind::InterruptOpened, $f),
            Payload::InterruptResolved($payload) => (EventKind::InterruptResolved, $f),
            Payload::ApprovedUnderGrant($payload) => (EventKind::ApprovedUnderGrant, $f),
            Payload::GrantRevoked($payload) => (EventKind::GrantRevoked, $f),
            Payload::ApprovalAwaited($payload) => (EventKind::ApprovalAwaited, $f),
            Payload::DecidedAheadUsed($payload) => (EventKind::DecidedAheadUsed, $f),
            Payload::AheadUnused($payload) => (EventKind::AheadUnused, $f),
            Payload::AttemptFailed($payload) => (EventKind::AttemptFailed, $f),
            Payload::TurnCompleted($payload) => (EventKind::TurnCompleted, $f),
            Payload::TurnFailed($payload) => (EventKind::TurnFailed, $f),
            Payload::CancelRequested($payload) => (EventKind::CancelRequested, $f),
            Payload::TurnCancelled($payload) => (EventKind::TurnCancelled, $f),
            Payload::AgentUpgraded($payload) => (EventKind::AgentUpgraded, $f),
            Payload::DecisionRecorded($payload) => (EventKind::DecisionRecorded, $f),
            Payload::InterruptEscalated($payload) => (EventKind::InterruptEscalated, $f),
        }
    };
}

impl Payload {
    /// The kind it is stored under.
    pub fn kind(&self) -> EventKind {
        each_event!(self, _p => ()).0
    }

    /// The JSON it is stored as.
    pub fn to_value(&self) -> Value {
        each_event!(self, p => payload(p)).1
    }

    /// Reads a stored event of `kind`.
    ///
    /// # Errors
    /// The payload is not `kind`'s: the error names the field that is wrong.
    pub fn parse(kind: EventKind, text: &str) -> Result<Self, serde_json::Error> {
        use serde_json::from_str as read;
        Ok(match kind {
            EventKind::UserMessage => Payload::UserMessage(read(text)?),
            EventKind::TurnStarted => Payload::TurnStarted(read(text)?),
            EventKind::TextDelta => Payload::TextDelta(read(text)?),
            EventKind::ReasoningDelta => Payload::ReasoningDelta(read(text)?),
            EventKind::ToolCallStarted => Payload::ToolCallStarted(read(text)?),
            EventKind::ToolCallFinished => Payload::ToolCallFinished(read(text)?),
            EventKind::InterruptOpened => Payload::InterruptOpened(Box::new(read(text)?)),
            EventKind::InterruptResolved => Payload::InterruptResolved(read(text)?),
            EventKind::ApprovedUnderGrant => Payload::ApprovedUnderGrant(read(text)?),
            EventKind::GrantRevoked => Payload::GrantRevoked(read(text)?),
            EventKind::ApprovalAwaited => Payload::ApprovalAwaited(read(text)?),
            EventKind::DecidedAheadUsed => Payload::DecidedAheadUsed(read(text)?),
            EventKind::AheadUnused => Payload::AheadUnused(read(text)?),
            EventKind::AttemptFailed => Payload::AttemptFailed(read(text)?),
            EventKind::TurnCompleted => Payload::TurnCompleted(read(text)?),
            EventKind::TurnFailed => Payload::TurnFailed(read(text)?),
            EventKind::CancelRequested => Payload::CancelRequested(read(text)?),
            EventKind::TurnCancelled => Payload::TurnCancelled(read(text)?),
            EventKind::AgentUpgraded => Payload::AgentUpgraded(read(text)?),
            EventKind::DecisionRecorded => Payload::DecisionRecorded(read(text)?),
            EventKind::InterruptEscalated => Payload::InterruptEscalated(read(text)?),
        })
    }
}

/// The payload of `user_message`: a message arrived.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// Its text.
    pub text: String,
    /// The images it carried, by reference (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<MediaRef>,
}

/// The payload of `turn_started`: a turn's first segment (or its attempt) started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnStarted {
    /// The turn.
    pub turn_id: String,
    /// The segment step's attempt.
    pub attempt: i64,
}

/// The payload of `text_delta` and `reasoning_delta`: one block of the main conversation's text
/// or thinking.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextBlock {
    /// The turn.
    pub turn_id: String,
    /// The segment step's attempt.
    pub attempt: i64,
    /// Where the block starts in the segment's text (or thinking), in characters.
    pub offset: u64,
    /// The block.
    pub text: String,
}

/// The payload of `tool_call_started`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallStarted {
    /// The turn.
    pub turn_id: String,
    /// The call's tool use ID.
    pub tool_call_id: String,
    /// The tool: a custom tool by its own name, a built-in by its CLI name.
    pub tool_name: String,
    /// `custom` or `cli`, for a call the CLI ran inside its segment (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    /// Its input.
    pub arguments: Value,
    /// The attempt (of the call's step, or of the segment that ran it).
    pub attempt: i64,
    /// Whether it runs as a step of its own, out of the segment.
    pub deferred: bool,
}

/// The payload of `tool_call_finished`: a call finished or got its record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallFinished {
    /// The turn.
    pub turn_id: String,
    /// The segment's attempt, for a call the CLI ran inside its segment (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i64>,
    /// The call's tool use ID.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// `custom` or `cli`, for a call the CLI ran inside its segment (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ToolKind>,
    /// How it ended: `succeeded`, `failed`, `rejected`, `outcome_unknown`, `cancelled`, …
    pub status: String,
    /// Whether it ran as a step of its own, out of the segment.
    pub deferred: bool,
}

/// The payload of `interrupt_resolved`: a decision arrived.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InterruptResolved {
    /// The interrupt.
    pub interrupt_id: String,
    /// Whether the call may run.
    pub approved: bool,
    /// The reviewer's words.
    pub message: Option<String>,
    /// An approval's edited input.
    pub updated_input: Option<Value>,
    /// What an approval covers.
    pub scope: DecisionScope,
    /// Who decided (`null` when Tollgate closed it, at a deadline or at the turn's end).
    pub decided_by: Option<String>,
}

/// The payload of `approved_under_grant`: a deferred call approved under a session grant, with no
/// interrupt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovedUnderGrant {
    /// The turn.
    pub turn_id: String,
    /// The call's tool use ID.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// Its input.
    pub arguments: Value,
    /// The grant.
    pub grant: GrantRef,
}

/// The payload of `grant_revoked`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GrantRevoked {
    /// The tool the grant allowed.
    pub tool_name: String,
    /// The decisions that made the grants revoked.
    pub decision_ids: Vec<String>,
    /// Who revoked it.
    pub revoked_by: String,
    /// When (ms since the epoch).
    pub revoked_at: i64,
}

/// The payload of `approval_awaited`: the session waits on a person, for one approval round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalAwaited {
    /// The turn.
    pub turn_id: String,
    /// The call waiting.
    pub tool_call_id: String,
    /// The interrupt it waits on: its own, or one opened ahead in a batch.
    pub interrupt_id: String,
}

/// The payload of `decided_ahead_used`: a deferred call used a decision made ahead in a batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecidedAheadUsed {
    /// The turn.
    pub turn_id: String,
    /// The call.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// The decision it used (the interrupt opened ahead).
    pub decision_id: String,
    /// The batch.
    pub batch_id: String,
    /// Whether that decision approved.
    pub approved: bool,
}

/// The payload of `ahead_unused`: an interrupt opened ahead that no call of the turn used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AheadUnused {
    /// The turn.
    pub turn_id: String,
    /// The interrupt.
    pub interrupt_id: String,
    /// The batch.
    pub batch_id: String,
    /// The tool it asked about.
    pub tool_name: String,
    /// The input it asked about.
    pub arguments: Value,
}

/// The payload of `attempt_failed`: a step attempt failed and will run again.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptFailed {
    /// The turn.
    pub turn_id: String,
    /// The step that failed.
    pub step: StepKind,
    /// The call, for a tool step (absent for a segment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The attempt that failed.
    pub attempt: i64,
    /// Why.
    pub error: String,
    /// `false` for an inline call's attempt (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<bool>,
}

/// The payload of `turn_completed`: the turn answered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnCompleted {
    /// The turn.
    pub turn_id: String,
    /// Its answer.
    pub result: String,
}

/// The payload of `turn_failed`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnFailed {
    /// The turn (`null` when unreadable rows left no turn to name).
    pub turn_id: Option<String>,
    /// What went wrong (the session's `last_turn_error`).
    pub error: String,
    /// Why, as a closed set.
    pub reason: FailureReason,
}

/// The payload of `cancel_requested`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelRequested {
    /// Who asked.
    pub requested_by: String,
}

/// The payload of `turn_cancelled`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnCancelled {
    /// The turn.
    pub turn_id: String,
    /// Who asked.
    pub cancelled_by: String,
    /// When they asked (ms since the epoch).
    pub requested_at: i64,
}

/// The payload of `agent_upgraded`: the session was pinned to another agent digest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentUpgraded {
    /// The digest it ran before (`null`: none recorded).
    pub from: Option<String>,
    /// Whether it was pinned to that digest.
    pub from_pinned: bool,
    /// The digest it runs now.
    pub to: String,
}

/// The payload of `interrupt_opened`: the interrupt and what it asks (the interrupt's stored
/// `request`, the same value).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InterruptOpened {
    /// The interrupt's id (the deferred call's tool use ID).
    pub interrupt_id: String,
    /// What it asks.
    pub request: ApprovalRequest,
}

impl InterruptOpened {
    /// Reads a stored payload.
    ///
    /// # Errors
    /// Not this kind's payload: the error names the field that is wrong.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// The payload of `decision_recorded`: a decision on an interrupt for the audit trail, as the
/// session's stream shows it (written by the API, or by a deadline that rejects). Every field is
/// present; an absent value is `null`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecorded {
    /// The interrupt decided.
    pub interrupt_id: String,
    /// Who decided (`tollgate:deadline` for a deadline).
    pub principal: String,
    /// `approved`, `rejected`, `expired`, … (the audit row's decision).
    pub decision: String,
    /// The reviewer's message, or why a deadline decided.
    pub reason: Option<String>,
    /// The tool.
    pub tool_name: Option<String>,
    /// The input the tool was asked with.
    pub input: Option<serde_json::Value>,
    /// The approver's edited input, when it differs from `input`.
    pub edited_input: Option<serde_json::Value>,
    /// The deadline that decided (ms since the epoch, database clock); absent for a person's
    /// decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<i64>,
}

/// The payload of `interrupt_escalated`: an approval deadline handed a waiting call to other
/// approvers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InterruptEscalated {
    /// The interrupt.
    pub interrupt_id: String,
    /// The tool.
    pub tool_name: Option<String>,
    /// The groups who may decide now.
    pub escalate_to: Vec<String>,
    /// The groups who could decide before (empty: any approver).
    pub escalated_from: Vec<String>,
    /// The deadline that passed (ms since the epoch, database clock).
    pub deadline_passed: i64,
    /// How long the escalated call waits before it is rejected.
    pub next_deadline_secs: u64,
    /// Who escalated it (`tollgate:deadline`).
    pub escalated_by: String,
}

/// A payload as the JSON value an event stores (its keys sorted, as every Tollgate wrote them).
pub fn payload(value: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(value).expect("event payloads always serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_once_and_stored_under_its_name() {
        let mut names: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
        for kind in EventKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
            assert_eq!(EventKind::parse(kind.as_str()), Some(*kind));
            assert_eq!(serde_json::from_value::<EventKind>(kind.as_str().into()).unwrap(), *kind);
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), EventKind::ALL.len(), "a name is used twice");
        assert_eq!(EventKind::parse("no_such_kind"), None);
    }

    /// One payload of each kind as the writers stored it before the payloads were types (their
    /// `json!` objects, keys sorted), every optional field shown both ways somewhere.
    fn stored(kind: EventKind) -> &'static [&'static str] {
        match kind {
            EventKind::UserMessage => &[
                r#"{"text":"hi"}"#,
                r#"{"images":[{"digest":"sha256:00","media_type":"image/png"}],"text":"look"}"#,
            ],
            EventKind::TurnStarted => &[r#"{"attempt":1,"turn_id":"turn-1"}"#],
            EventKind::TextDelta | EventKind::ReasoningDelta => {
                &[r#"{"attempt":2,"offset":7,"text":"wörld","turn_id":"t1"}"#]
            }
            EventKind::ToolCallStarted => &[
                r#"{"arguments":{"order_id":"7"},"attempt":1,"deferred":false,"kind":"cli","tool_call_id":"toolu_1","tool_name":"Bash","turn_id":"turn-1"}"#,
                r#"{"arguments":{"order_id":"7"},"attempt":2,"deferred":true,"tool_call_id":"toolu_1","tool_name":"create_refund","turn_id":"turn-1"}"#,
            ],
            EventKind::ToolCallFinished => &[
                r#"{"attempt":1,"deferred":false,"kind":"custom","status":"failed","tool_call_id":"toolu_1","tool_name":"lookup_order","turn_id":"turn-1"}"#,
                r#"{"deferred":true,"status":"outcome_unknown","tool_call_id":"toolu_1","tool_name":"create_refund","turn_id":"turn-1"}"#,
            ],
            EventKind::InterruptOpened => &[
                r#"{"interrupt_id":"toolu_1","request":{"arguments":{"order_id":"7"},"effect":"non_idempotent_write","kind":"custom","tool_call_id":"toolu_1","tool_name":"create_refund","turn_id":"turn-1","type":"tool_approval"}}"#,
            ],
            EventKind::InterruptResolved => &[
                r#"{"approved":true,"decided_by":"alice","interrupt_id":"toolu_1","message":null,"scope":"session","updated_input":{"order_id":"8"}}"#,
                r#"{"approved":false,"decided_by":null,"interrupt_id":"toolu_1","message":"too late","scope":"call","updated_input":null}"#,
            ],
            EventKind::ApprovedUnderGrant => &[
                r#"{"arguments":{},"grant":{"decision_id":"toolu_0","granted_at":1700000000000,"granted_by":"alice","tool_name":"create_refund"},"tool_call_id":"toolu_1","tool_name":"create_refund","turn_id":"turn-1"}"#,
            ],
            EventKind::GrantRevoked => &[
                r#"{"decision_ids":["toolu_0"],"revoked_at":1700000000000,"revoked_by":"bob","tool_name":"create_refund"}"#,
            ],
            EventKind::ApprovalAwaited => {
                &[r#"{"interrupt_id":"toolu_1","tool_call_id":"toolu_2","turn_id":"turn-1"}"#]
            }
            EventKind::DecidedAheadUsed => &[
                r#"{"approved":true,"batch_id":"b1","decision_id":"toolu_1","tool_call_id":"toolu_2","tool_name":"create_refund","turn_id":"turn-1"}"#,
            ],
            EventKind::AheadUnused => &[
                r#"{"arguments":{"order_id":"7"},"batch_id":"b1","interrupt_id":"toolu_1","tool_name":"create_refund","turn_id":"turn-1"}"#,
            ],
            EventKind::AttemptFailed => &[
                r#"{"attempt":1,"error":"HTTP 500","step":"RunModel","turn_id":"turn-1"}"#,
                r#"{"attempt":2,"error":"trap","step":"CallTool","tool_call_id":"toolu_1","turn_id":"turn-1"}"#,
                r#"{"attempt":1,"deferred":false,"error":"trap","step":"CallTool","tool_call_id":"toolu_1","turn_id":"turn-1"}"#,
            ],
            EventKind::TurnCompleted => &[r#"{"result":"Done.","turn_id":"turn-1"}"#],
            EventKind::TurnFailed => &[
                r#"{"error":"the CLI exited","reason":"segment_failed","turn_id":"turn-1"}"#,
                r#"{"error":"bad rows","reason":"unusable_rows","turn_id":null}"#,
            ],
            EventKind::CancelRequested => &[r#"{"requested_by":"alice"}"#],
            EventKind::TurnCancelled => {
                &[r#"{"cancelled_by":"alice","requested_at":1700000000000,"turn_id":"turn-2"}"#]
            }
            EventKind::AgentUpgraded => &[
                r#"{"from":"sha256:aa","from_pinned":false,"to":"sha256:bb"}"#,
                r#"{"from":null,"from_pinned":false,"to":"sha256:bb"}"#,
            ],
            EventKind::DecisionRecorded => &[
                r#"{"decision":"approved","edited_input":null,"input":{"order_id":"7"},"interrupt_id":"toolu_1","principal":"alice","reason":null,"tool_name":"create_refund"}"#,
            ],
            EventKind::InterruptEscalated => &[
                r#"{"deadline_passed":1700000000000,"escalate_to":["oncall"],"escalated_by":"tollgate:deadline","escalated_from":[],"interrupt_id":"toolu_1","next_deadline_secs":30,"tool_name":"create_refund"}"#,
            ],
        }
    }

    #[test]
    fn every_kind_has_a_payload_type_that_keeps_its_stored_form_byte_for_byte() {
        for kind in EventKind::ALL {
            for text in stored(*kind) {
                let read = Payload::parse(*kind, text).unwrap_or_else(|e| panic!("{kind:?}: {e}: {text}"));
                assert_eq!(read.kind(), *kind);
                assert_eq!(read.to_value().to_string(), *text, "{kind:?}");
            }
        }
    }

    #[test]
    fn a_payload_of_another_kind_is_refused_naming_the_field() {
        let err = Payload::parse(EventKind::TurnFailed, r#"{"requested_by":"alice"}"#).unwrap_err();
        assert!(err.to_string().contains("missing field `error`"), "{err}");
        let err = Payload::parse(
            EventKind::TurnFailed,
            r#"{"error":"x","reason":"no_such_reason","turn_id":null}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("no_such_reason"), "{err}");
    }

    #[test]
    fn recorded_decisions_and_escalations_keep_their_stored_form() {
        // As the API and the deadline Worker wrote them before these types, byte for byte.
        let by_a_person = r#"{"decision":"approved","edited_input":null,"input":{"order_id":"7"},"interrupt_id":"toolu_1","principal":"alice","reason":null,"tool_name":"create_refund"}"#;
        let by_a_deadline = r#"{"deadline_at":1700000000000,"decision":"expired","edited_input":null,"input":{},"interrupt_id":"toolu_1","principal":"tollgate:deadline","reason":"too late","tool_name":"create_refund"}"#;
        let escalated = r#"{"deadline_passed":1700000000000,"escalate_to":["oncall"],"escalated_by":"tollgate:deadline","escalated_from":[],"interrupt_id":"toolu_1","next_deadline_secs":30,"tool_name":"create_refund"}"#;
        for stored in [by_a_person, by_a_deadline] {
            let read: DecisionRecorded = serde_json::from_str(stored).unwrap();
            assert_eq!(payload(&read).to_string(), stored);
        }
        let read: InterruptEscalated = serde_json::from_str(escalated).unwrap();
        assert_eq!(payload(&read).to_string(), escalated);
    }

    #[test]
    fn an_opened_interrupt_reads_back_the_stored_payload_byte_for_byte() {
        let stored = r#"{"interrupt_id":"toolu_1","request":{"arguments":{"order_id":"7"},"effect":"non_idempotent_write","kind":"custom","tool_call_id":"toolu_1","tool_name":"create_refund","turn_id":"turn-1","type":"tool_approval"}}"#;
        let opened = InterruptOpened::parse(stored).unwrap();
        assert_eq!(serde_json::to_value(&opened).unwrap().to_string(), stored);
        let err = InterruptOpened::parse(r#"{"interrupt_id":"toolu_1"}"#).unwrap_err();
        assert!(err.to_string().contains("`request`"), "{err}");
    }
}
