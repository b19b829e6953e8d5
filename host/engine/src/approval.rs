//! What an interrupt asks: [`ApprovalRequest`], the approval of one tool call, written once.
//!
//! The state machine builds it when a deferred call needs a person (or is asked ahead in a
//! batch); the Worker stamps the tool's approvers, approval deadline and input schema into it
//! before the commit; a deadline's escalation changes its approvers; the store keeps it as the
//! interrupt's `request`, and the `interrupt_opened` event carries the same value
//! ([`crate::events::InterruptOpened`]); the HTTP API, the webhooks and the CLI read it back.
//!
//! # Stored form
//!
//! [`ApprovalRequest::to_value`] is what the store keeps: a JSON object whose keys are sorted
//! (the form every Tollgate wrote), with the optional fields absent when empty. The HTTP API
//! sends the struct as declared.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::ToolKind;
use crate::policy::Effect;
use crate::review::Review;

/// The `type` of every approval request.
pub const TOOL_APPROVAL: &str = "tool_approval";

/// What an interrupt asks: the approval of one tool call (also the `request` of an
/// `interrupt_opened` event).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalRequest {
    /// The input the tool would run with.
    pub arguments: Value,
    /// The tool's effect, e.g. `non_idempotent_write`.
    pub effect: String,
    /// Which side runs the tool.
    pub kind: ToolKind,
    /// The tool call's id.
    pub tool_call_id: String,
    /// The tool.
    pub tool_name: String,
    /// The turn that made the call.
    pub turn_id: String,
    /// Always `tool_approval`.
    #[serde(rename = "type")]
    #[cfg_attr(feature = "openapi", schema(examples("tool_approval")))]
    pub request_type: String,
    /// The groups whose principals alone may decide it (the tool policy's `approvers`); omitted
    /// when any approver may.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// The JSON Schema an edited input (`updated_input`) must fit: a custom tool's input schema,
    /// or Tollgate's for a built-in CLI tool it knows (`Bash`); omitted when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub input_schema: Option<Value>,
    /// The batch it belongs to: the calls of one reply that need approval, shown at once so a
    /// person decides them in one sitting. Omitted outside a batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// `true` for a call the model was told to repeat (the CLI runs one deferred call per
    /// reply), asked ahead of time: its decision is used when the model repeats the identical
    /// call in the same turn (same tool, same input up to key order and whitespace), at most
    /// once, and is recorded `unused` if the turn ends first; still open then, it is closed
    /// (rejected, decided by nobody). Omitted when `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ahead: bool,
    /// The tool policy's approval deadline: `approval_timeout_secs`, `on_timeout` (`reject` or
    /// `escalate`), `escalate_to`, `escalation_timeout_secs`; omitted when it waits for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub deadline: Option<Value>,
    /// What the call will do, in one sentence: the tool policy's `summary` template rendered with
    /// the call's arguments (plain text, to be escaped on a page); omitted when the policy has
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The tool policy's `confirm_above`, `{"argument": …, "above": …}`: approving a call whose
    /// argument is above the number asks the approver to confirm first. Omitted when the policy
    /// has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub confirm_above: Option<Value>,
    /// After an escalation, the groups who could decide before it (`approvers` names who may
    /// now; empty: any approver could).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalated_from: Option<Vec<String>>,
    /// What the options factory's review told the approver: its notes and the call's risk
    /// (`null` when the review failed). Omitted when the factory reviews no calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Review>,
    /// How many different principals must approve: the tool policy's `high_risk_approvers` when
    /// the review found the call `high` risk. Omitted when one approval decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals_required: Option<u32>,
    /// The MCP client principal that made the call, not the model (`/mcp/{agent}`); omitted for a
    /// call the model made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
}

impl ApprovalRequest {
    /// The request to approve the call `tool_call_id` of turn `turn_id`: `tool_name` (run by
    /// `kind`) with `arguments`, of `effect`; no approvers, schema, batch or deadline yet.
    pub fn new(
        turn_id: &str,
        tool_call_id: &str,
        tool_name: &str,
        kind: ToolKind,
        arguments: Value,
        effect: Effect,
    ) -> Self {
        ApprovalRequest {
            arguments,
            effect: effect.as_str().to_owned(),
            kind,
            tool_call_id: tool_call_id.to_owned(),
            tool_name: tool_name.to_owned(),
            turn_id: turn_id.to_owned(),
            request_type: TOOL_APPROVAL.to_owned(),
            approvers: Vec::new(),
            input_schema: None,
            batch_id: None,
            ahead: false,
            deadline: None,
            summary: None,
            confirm_above: None,
            escalated_from: None,
            review: None,
            approvals_required: None,
            requested_by: None,
        }
    }

    /// Reads a stored request.
    ///
    /// # Errors
    /// Not a request of this shape: the error names the field that is wrong.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The stored form: a JSON object with its keys sorted, as every Tollgate wrote it.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a request always serializes")
    }

    /// How many different principals must approve it (1 unless its review asked for more).
    pub fn approvals_needed(&self) -> u32 {
        self.approvals_required.unwrap_or(1).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A request as a Tollgate before this type stored it (built as a JSON object), byte for
    /// byte: every field set.
    const STORED_FULL: &str = r#"{"ahead":true,"approvers":["oncall"],"arguments":{"amount_cents":500,"order_id":"7"},"batch_id":"toolu_1","deadline":{"approval_timeout_secs":2,"escalate_to":["oncall"],"escalation_timeout_secs":2,"on_timeout":"escalate"},"effect":"non_idempotent_write","escalated_from":["finance"],"input_schema":{"type":"object"},"kind":"custom","tool_call_id":"toolu_2","tool_name":"create_refund","turn_id":"turn-1","type":"tool_approval"}"#;
    /// The same with only the fields every request has.
    const STORED_PLAIN: &str = r#"{"arguments":{},"effect":"unclassified","kind":"cli","tool_call_id":"toolu_1","tool_name":"Bash","turn_id":"turn-3","type":"tool_approval"}"#;

    #[test]
    fn a_stored_request_reads_and_writes_back_byte_for_byte() {
        for stored in [STORED_FULL, STORED_PLAIN] {
            let request = ApprovalRequest::parse(stored).unwrap();
            assert_eq!(request.to_value().to_string(), stored);
        }
        let full = ApprovalRequest::parse(STORED_FULL).unwrap();
        assert_eq!((full.ahead, full.escalated_from.as_deref()), (true, Some(&["finance".to_owned()][..])));
    }

    #[test]
    fn a_reviewed_request_adds_its_review_and_reads_back() {
        let mut request = ApprovalRequest::parse(STORED_PLAIN).unwrap();
        assert_eq!((request.review.as_ref(), request.approvals_needed()), (None, 1), "old rows decode");
        request.review = Some(Review::answered(crate::review::Risk::High, vec!["over the total".into()]));
        request.approvals_required = Some(2);
        let stored = request.to_value().to_string();
        assert!(
            stored.contains(r#""approvals_required":2"#)
                && stored.contains(r#""review":{"notes":["over the total"],"risk":"high"}"#),
            "{stored}"
        );
        let back = ApprovalRequest::parse(&stored).unwrap();
        assert_eq!((back, request.approvals_needed()), (request, 2));
    }

    #[test]
    fn a_new_request_is_the_plain_stored_form() {
        let request =
            ApprovalRequest::new("turn-3", "toolu_1", "Bash", ToolKind::Cli, json!({}), Effect::Unclassified);
        assert_eq!(request.to_value().to_string(), STORED_PLAIN);
    }

    #[test]
    fn a_request_missing_a_field_is_refused_by_its_name() {
        let err = ApprovalRequest::parse(r#"{"type":"tool_approval","tool_name":"x"}"#).unwrap_err();
        assert!(err.to_string().contains("missing field `arguments`"), "{err}");
    }
}
