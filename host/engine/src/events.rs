//! The session's event stream: every [`EventKind`], listed once, and the payloads one part of
//! the house writes and another reads ([`InterruptOpened`]).
//!
//! The state machine writes most kinds; the API writes `decision_recorded`, a Worker firing a
//! deadline `interrupt_escalated`, the store `agent_upgraded`. The HTTP API's document, the
//! webhooks, the CLI and the web inbox all take the kinds from here, so a kind added here and
//! nowhere else fails their tests (`tollgate`'s `every_event_kind_reaches_every_consumer`).
//! A client groups live text by `(turn_id, step, attempt)`.

use serde::{Deserialize, Serialize};

use crate::approval::ApprovalRequest;

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
