//! A session as a client reads it: the snapshot and its parts (messages, tool calls, pending
//! approvals, decisions, grants, live text), the calls that need attention, and the receipts of
//! the session calls. Plain values: the session service (`tollgate-sessions`) builds them from
//! the store, and every face sends them in its wire form (the HTTP API as they are, so the
//! OpenAPI document's schemas come from these types under the `openapi` feature).

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use crate::catalog::ToolKind;
use crate::media::MediaRef;
use crate::policy::DeferredRun;
use crate::review::Review;
use crate::session::{CallState, Usage};

/// Serializes `value` with its object keys sorted (through a JSON value, whose maps are sorted):
/// the order of the objects the API sent nested in a JSON value before it had types. For
/// `#[serde(serialize_with = ...)]`, here and in `tollgate-api-types`.
///
/// # Errors
/// `value` does not serialize.
pub fn sorted_keys<T: Serialize, S: Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value).map_err(serde::ser::Error::custom)?.serialize(serializer)
}

/// A session grant (allow for this session): who allowed a tool, when, by which decision.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Grant {
    /// The tool whose later calls skip approval.
    pub tool_name: String,
    /// The principal who decided with `scope: "session"`.
    pub granted_by: String,
    /// When (ms since the epoch, the deciding server's clock).
    pub granted_at: i64,
    /// The deciding interrupt (its audit row in `decisions` names it).
    pub decision_id: String,
}

/// The decision made ahead in a batch that a call ran under (or waits on): the one type the
/// call's record stores and the snapshot shows.
pub use crate::session::batches::AheadRef as DecidedAhead;

/// A session grant as the snapshot lists it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionGrant {
    /// The grant.
    #[serde(flatten)]
    pub grant: Grant,
    /// Its revocation (`null`: in force).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub revoked: Option<GrantRevocation>,
}

/// Who revoked a grant, and when.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GrantRevocation {
    /// The principal.
    pub revoked_by: String,
    /// When (ms since the epoch, the revoking server's clock).
    pub revoked_at: i64,
}

/// The answer of `DELETE /v1/sessions/{id}/grants/{tool}`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevokeReceipt {
    /// The session.
    pub session_id: String,
    /// The tool whose calls need approval again.
    pub tool_name: String,
    /// The decisions whose grants were revoked.
    pub decision_ids: Vec<String>,
    /// Who revoked them.
    pub revoked_by: String,
}

/// A session as a client sees it (`GET /v1/sessions/{id}`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Snapshot {
    /// The session's id.
    pub session_id: String,
    /// `idle`, `running` or `awaiting_approval`.
    #[cfg_attr(feature = "openapi", schema(examples("idle", "running", "awaiting_approval")))]
    pub status: String,
    /// The conversation as text, oldest first.
    pub messages: Vec<Message>,
    /// The tool calls that wait for a decision.
    pub pending_interrupts: Vec<PendingApproval>,
    /// Every deferred tool call and its state.
    #[serde(serialize_with = "sorted_keys")]
    pub tool_calls: Vec<ToolCall>,
    /// Token totals.
    pub usage: Usage,
    /// What the session's segments cost (US dollars: every model request priced by the Worker's
    /// model proxy, `tollgate::proxy::prices`; as the CLI reported for segments run without it).
    #[serde(default)] // A client reads a server older than the field.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub cost_usd: f64,
    /// Why the last turn failed, until a turn completes.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub last_turn_error: Option<String>,
    /// Who cancelled the last turn, when it was cancelled, until a turn completes or fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_turn_cancelled: Option<TurnCancelled>,
    /// A request to cancel the turn in progress that its step has not applied yet (absent
    /// otherwise): decisions wait no more, and the turn ends `cancelled` (or as it ends first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_requested: Option<CancelRequested>,
    /// The turn in progress.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub turn_id: Option<String>,
    /// The seq the next event will get.
    pub next_event_seq: i64,
    /// The principal that started the session (`null`: not recorded, e.g. started before
    /// principals existed).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub started_by: Option<String>,
    /// The agent it belongs to (`null`: none yet; no Worker runs it until an agent adopts it).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub agent: Option<String>,
    /// Since when its step in flight has been due without any Worker claiming it, once that is
    /// longer than the server's bound (ms since the epoch, database clock); absent otherwise. No
    /// Worker serves its agent (or the bundle it is pinned to), or all are busy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unclaimable_since: Option<i64>,
    /// Every decision on the session's interrupts, oldest first: its audit trail.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub decisions: Vec<AuditRecord>,
    /// The session's grants (allow for this session), revoked ones too, oldest first.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub grants: Vec<SessionGrant>,
    /// The text the running segment has streamed so far, while one streams (absent otherwise):
    /// what the `text_delta` events of its (`turn_id`, `step_id`, `fence`) add up to. When the
    /// segment ends its text is in `messages` and this is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_text: Option<LiveText>,
    /// The session and turn this session was forked from, when it is a fork (absent otherwise):
    /// its history is that session's up to the end of that turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
}

/// Where a fork's history comes from ([`Snapshot::forked_from`], and the answer to a fork).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForkedFrom {
    /// The session it was forked from.
    pub session: String,
    /// The turn of that session it was forked at (its history ends with that turn).
    pub turn: i64,
    /// A dry fork: its writes are answered from the original's records or refused, never run.
    pub dry: bool,
    /// Who forked it.
    pub forked_by: String,
    /// When (ms since the epoch, database clock).
    pub forked_at: i64,
}

/// A turn that ended cancelled ([`Snapshot::last_turn_cancelled`]).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TurnCancelled {
    /// The turn.
    pub turn_id: String,
    /// The principal who cancelled it.
    pub cancelled_by: String,
}

/// A pending request to cancel a session's turn in progress.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CancelRequested {
    /// The principal who asked.
    pub requested_by: String,
    /// When (database clock, ms since the epoch).
    pub requested_at: i64,
}

/// `POST /v1/sessions/{id}/cancel`: the request is stored; the turn ends `cancelled` once the
/// step in flight sees it (a running segment is interrupted; a turn waiting for approval ends at
/// once; a tool call that runs finishes first), or as it ends first (watch the events).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CancelReceipt {
    /// The session.
    pub session_id: String,
    /// The pending request: this one, or an earlier one still pending.
    pub cancel_requested: CancelRequested,
    /// `true` when a request was pending already and nothing new was written.
    pub replayed: bool,
}

/// The text a running segment has streamed so far ([`Snapshot::live_text`]).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LiveText {
    /// The turn.
    pub turn_id: String,
    /// The attempt of the turn's step.
    pub attempt: i64,
    /// The step whose segment streams it.
    pub step_id: i64,
    /// That step's fence (a retried attempt has a higher one).
    pub fence: i64,
    /// Every text delta of the segment so far, joined.
    pub text: String,
    /// When it was last written (ms since the epoch).
    pub updated_at: i64,
}

/// One row of the audit trail: a decision, who made it and when.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditRecord {
    /// Its place in the trail (grows with every decision; the cursor of `GET /v1/audit`).
    pub audit_id: i64,
    /// The session.
    pub session_id: String,
    /// The interrupt decided (its tool call's id); for `cancelled`, the turn cancelled.
    pub interrupt_id: String,
    /// Who decided (or cancelled).
    pub principal: String,
    /// What was decided.
    pub decision: AuditDecision,
    /// The decider's text (for a rejection, what the model reads).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub reason: Option<String>,
    /// The tool.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub tool_name: Option<String>,
    /// The input the call was deferred with.
    #[cfg_attr(feature = "openapi", schema(required = true, value_type = Option<Object>))]
    pub input: Option<Value>,
    /// The input the decider replaced it with (`null`: not edited).
    #[cfg_attr(feature = "openapi", schema(required = true, value_type = Option<Object>))]
    pub edited_input: Option<Value>,
    /// When the decision committed (database clock, ms since the epoch).
    pub decided_at: i64,
}

/// What a decision was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AuditDecision {
    /// The call may run.
    Approved,
    /// The call is refused.
    Rejected,
    /// Its approval deadline passed and it went to other approvers (principal
    /// `tollgate:deadline`).
    Escalated,
    /// Its approval deadline passed and it was refused (principal `tollgate:deadline`; the reason
    /// is what the model read).
    Expired,
    /// A session grant this interrupt's decision made was revoked (principal: who revoked it).
    Revoked,
    /// A turn was cancelled (principal: who asked; `interrupt_id` is the turn's id).
    Cancelled,
    /// An approval that counted but did not decide yet: the call's review found it high risk and
    /// its policy asks for more approvers (`high_risk_approvers`).
    PartiallyApproved,
    /// A tool call that needed attention (outcome unknown, or failed) was marked checked
    /// (principal: who checked; `interrupt_id` is the call's id; `reason` their note).
    Checked,
    /// The session was forked from another at one of its turns (principal: who forked it; the
    /// row's session is the fork, `interrupt_id` the turn forked at, `reason` says from which
    /// session and whether the fork is dry).
    Forked,
}

impl AuditDecision {
    /// Every decision, in the order of the store schema's CHECK.
    pub const ALL: [AuditDecision; 9] = [
        AuditDecision::Approved,
        AuditDecision::Rejected,
        AuditDecision::Escalated,
        AuditDecision::Expired,
        AuditDecision::Revoked,
        AuditDecision::Cancelled,
        AuditDecision::PartiallyApproved,
        AuditDecision::Checked,
        AuditDecision::Forked,
    ];

    /// The stored and wire name: `approved`, `rejected`, `escalated`, `expired`, `revoked`,
    /// `cancelled`, `partially_approved`, `checked` or `forked`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuditDecision::Approved => "approved",
            AuditDecision::Rejected => "rejected",
            AuditDecision::Escalated => "escalated",
            AuditDecision::Expired => "expired",
            AuditDecision::Revoked => "revoked",
            AuditDecision::Cancelled => "cancelled",
            AuditDecision::PartiallyApproved => "partially_approved",
            AuditDecision::Checked => "checked",
            AuditDecision::Forked => "forked",
        }
    }

    /// The decision stored as `text`, if it is one.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.as_str() == text)
    }
}

/// One approval of a call that needs several approvers, made before the last one decided it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalSoFar {
    /// Who approved.
    pub principal: String,
    /// When (ms since the epoch, database clock).
    pub approved_at: i64,
}

/// One message of a conversation.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Message {
    /// `user`, `assistant`, or `subagent` (what a subagent of the agent was asked and answered).
    #[cfg_attr(feature = "openapi", schema(examples("user", "assistant", "subagent")))]
    pub role: String,
    /// Its text (text blocks joined by blank lines).
    pub text: String,
    /// A prompt no completed turn answered yet (queued, in progress, or of a failed turn);
    /// omitted when `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
    /// A user message's images, in order (`GET /v1/sessions/{id}/media/{digest}` serves each);
    /// omitted when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<MediaRef>,
}

/// A tool call that waits for a decision (`Snapshot::pending_interrupts`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingApproval {
    /// The input it would run with.
    pub arguments: Value,
    /// The interrupt's id (the tool call's).
    pub interrupt_id: String,
    /// Which side runs the tool.
    pub kind: ToolKind,
    /// The tool.
    pub tool_name: String,
    /// The turn that made the call.
    pub turn_id: String,
    /// Its batch (omitted outside a batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// When its approval deadline passes (ms since the epoch, database clock): then it is
    /// rejected, or escalated when its policy says so. Omitted: it waits for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<i64>,
    /// When a deadline escalated it to other approvers (ms since the epoch); omitted: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalated_at: Option<i64>,
    /// The groups whose principals alone may decide it now (after an escalation, the policy's
    /// `escalate_to`); omitted when any approver may.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// What the options factory's review told the approver: its notes and the call's risk
    /// (`null` when the review failed). Omitted when the factory reviews no calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Review>,
    /// How many different principals must approve (omitted when one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals_required: Option<u32>,
    /// The approvals made so far, when it needs several (omitted when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalSoFar>,
}

/// A deferred tool call and where it is (`Snapshot::tool_calls`).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCall {
    /// The input it runs with (an approver's edit, when there was one).
    pub arguments: Value,
    /// Which side runs the tool.
    pub kind: ToolKind,
    /// The input the model asked for, when an approver edited it (edit before approve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub original_arguments: Option<Value>,
    /// The session grant this call's approval made (`scope: "session"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants_session: Option<Grant>,
    /// The session grant it was approved under, with no interrupt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_under: Option<Grant>,
    /// The batch its interrupt belongs to: the calls of one reply that needed approval, shown in
    /// the inbox at once (omitted outside a batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// The decision made ahead in a batch that it ran under (no interrupt of its own) or waits
    /// on; for an `unused` call, its own interrupt opened ahead, whose decision (see `decisions`)
    /// no call used before the turn ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_ahead: Option<DecidedAhead>,
    /// Whether it waits for a decision first.
    pub requires_approval: bool,
    /// Where it runs once approved.
    pub runs_in: DeferredRun,
    /// Where it is: `status` and that state's field.
    #[serde(flatten)]
    pub state: CallState,
    /// The images of its result, after the text of `output` (or `error`), in order
    /// (`GET /v1/sessions/{id}/media/{digest}` serves each); omitted when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<MediaRef>,
    /// What the tool wrote to stderr on its last attempt that failed by its own report (a Python
    /// traceback, a JavaScript stack), for operators: the model never reads it. Omitted when
    /// there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<String>,
    /// The model's tool use id.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// The turn that made it.
    pub turn_id: String,
    /// Who marked it checked, when its outcome was unknown or it failed (`POST
    /// /v1/sessions/{id}/calls/{call}/check`); omitted until someone did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<CallCheck>,
}

/// A person's mark that a tool call which needed attention (its outcome unknown, or failed) was
/// checked: what they found is their note. Audited (decision `checked`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallCheck {
    /// Who checked it.
    pub checked_by: String,
    /// When (ms since the epoch, database clock).
    pub checked_at: i64,
    /// What they found; omitted when they wrote nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The answer of `POST /v1/sessions/{id}/calls/{call}/check`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CheckReceipt {
    /// The call's mark: this one, or the one made first.
    pub check: CallCheck,
    /// The call was marked before (by anyone): nothing was written.
    pub replayed: bool,
}

/// A tool call that needs attention: its outcome is unknown (it may have taken effect) or it
/// failed, and nobody marked it checked.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttentionItem {
    /// The session.
    pub session_id: String,
    /// The session's agent, when it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The call.
    pub call: ToolCall,
    /// When its record last changed (ms since the epoch, database clock).
    pub updated_at: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_audit_decisions_stored_name_is_its_wire_name_and_reads_back() {
        for decision in AuditDecision::ALL {
            let wire = serde_json::to_value(decision).unwrap();
            assert_eq!(wire, decision.as_str(), "one spelling for the store and the wire");
            assert_eq!(AuditDecision::parse(decision.as_str()), Some(decision));
        }
        assert_eq!(AuditDecision::parse("approve"), None);
    }
}
