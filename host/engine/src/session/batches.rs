//! Batches: a reply that asks for several calls needing approval shows all of them in the inbox at
//! once, so a person decides them in one sitting (docs/ARCHITECTURE.md, "Glossary", ahead). Pure
//! bookkeeping: which held-back calls get an interrupt ahead ([`to_open`]), which interrupt opened
//! ahead a deferred call repeats ([`find_repeat`]), and what the end of a turn does with the ones
//! never used ([`turn_end`]).
//!
//! The CLI defers one call per reply (docs/PROTOCOL.md, "PreToolUse and the gate"), so the gate
//! denies every other deferrable call of the segment with the retry text and the model calls it
//! again later in the turn. When a segment ends deferred, each such call that needs approval (the
//! gate's [`crate::gate::HeldBackCall`]) gets its interrupt opened *ahead*, grouped with the
//! deferred call's under a batch id (the deferred call's interrupt id; `batch_id` and `"ahead":
//! true` in the interrupt's request). The run state's turn keeps them ([`AheadCall`]) while the
//! turn runs.
//!
//! When a later segment of the turn ends deferred on the *same* call (same tool, same canonical
//! input, [`crate::gate::canonical`]), the decision made ahead is used, at most once
//! ([`AheadCall::used_by`]): approved → the call runs as an approved deferred step with no new
//! interrupt, its record naming the decision ([`AheadRef`]); rejected → it records the rejection
//! and the model reads it on resume; still open → the session waits on *that* interrupt. A held
//! back call that an unused interrupt ahead already covers gets no second one.
//!
//! When the turn ends (answered or failed), every interrupt ahead whose decision no call used is
//! recorded as a tool call with status `unused` (its `decided_ahead` names the interrupt; the
//! audit trail has the decision, if anybody made one), and the interrupt is closed if still open
//! ([`closing_decision`]: a rejection decided by nobody, with no audit row), so it does not linger
//! in the inbox. A decision made ahead never carries into a later turn.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::client::HumanDecision;
use crate::approval::ApprovalRequest;
use crate::catalog::ToolKind;
use crate::gate::HeldBackCall;
use crate::gate::canonical::same_input;
use crate::policy::DeferredRun;

/// A held-back call whose interrupt was opened ahead, as the turn's run state keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AheadCall {
    /// The interrupt (the held-back call's tool use ID).
    pub interrupt_id: String,
    /// The batch: the interrupt id of the call deferred beside it.
    pub batch_id: String,
    /// A custom tool's own name, or a CLI tool's name.
    pub tool_name: String,
    /// Which side runs it.
    pub kind: ToolKind,
    /// The input the model asked for.
    pub arguments: Value,
    /// Where it runs once approved.
    pub runs_in: DeferredRun,
    /// The tool call that used (or waits on) its decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_by: Option<String>,
}

/// The decision made ahead in a batch that a call ran under (or waits on), like a session
/// grant: its interrupt, its batch, and who decided it when (docs/ARCHITECTURE.md, "Glossary").
// Stored in the call's record, and shown as is in the snapshot (`DecidedAhead` on the wire).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = DecidedAhead))]
pub struct AheadRef {
    /// The interrupt opened ahead (its audit row in `decisions` names it).
    pub decision_id: String,
    /// Its batch: the interrupt id of the call deferred beside it.
    pub batch_id: String,
    /// The principal who decided (absent while open, or for an `unused` call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// When (ms since the epoch: the decision's audit row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<i64>,
}

/// Where an interrupt opened ahead stands, as the Worker read it when its segment ended.
#[derive(Clone, Debug, PartialEq)]
pub enum AheadState {
    /// Nobody decided it yet.
    Open,
    /// Decided (its `granted` stamp filled from the audit row, when there is one).
    Decided(HumanDecision),
}

/// The interrupt request of a held-back call opened ahead: today's `tool_approval` request, with
/// its batch and `"ahead": true`.
pub fn ahead_request(turn_id: &str, call: &HeldBackCall, batch_id: &str) -> ApprovalRequest {
    let request = ApprovalRequest::new(
        turn_id,
        &call.tool_use_id,
        &call.tool_name,
        call.kind,
        call.arguments.clone(),
        call.policy.effect,
    );
    ApprovalRequest { batch_id: Some(batch_id.to_owned()), ahead: true, ..request }
}

/// The first unused call ahead that a call of `tool` (`kind`) with `arguments` repeats.
pub fn find_repeat(ahead: &[AheadCall], tool: &str, kind: ToolKind, arguments: &Value) -> Option<usize> {
    ahead.iter().position(|a| {
        a.used_by.is_none() && a.tool_name == tool && a.kind == kind && same_input(&a.arguments, arguments)
    })
}

/// The held-back calls that need an interrupt ahead: those no unused call ahead covers. Each
/// unused one covers one held-back call (two identical calls need two decisions); `taken` is the
/// call ahead the segment's deferred call repeats, which covers none.
pub fn to_open<'a>(
    ahead: &[AheadCall],
    taken: Option<usize>,
    held: &'a [HeldBackCall],
) -> Vec<&'a HeldBackCall> {
    let mut covered: Vec<bool> = (0..ahead.len()).map(|i| Some(i) == taken).collect();
    let mut open = Vec::new();
    for call in held {
        let cover = ahead.iter().enumerate().position(|(i, a)| {
            !covered[i]
                && a.used_by.is_none()
                && a.tool_name == call.tool_name
                && a.kind == call.kind
                && same_input(&a.arguments, &call.arguments)
        });
        match cover {
            Some(i) => covered[i] = true,
            None => open.push(call),
        }
    }
    open
}

/// The turn's calls ahead whose decision no call used, when the turn ends.
pub fn turn_end(ahead: &[AheadCall]) -> impl Iterator<Item = &AheadCall> {
    ahead.iter().filter(|a| a.used_by.is_none())
}

/// The resolution that closes an interrupt ahead still open when its turn ends: a rejection
/// nobody decided (no audit row), saying so.
pub fn closing_decision(turn_id: &str) -> HumanDecision {
    HumanDecision {
        approved: false,
        message: Some(format!(
            "Closed by Tollgate, decided by nobody: {turn_id} ended before the model called this again."
        )),
        ..HumanDecision::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::policy::{Effect, ToolPolicy};

    fn held(id: &str, order: &str) -> HeldBackCall {
        let policy = ToolPolicy { effect: Effect::NonIdempotentWrite, requires_approval: true };
        HeldBackCall {
            tool_use_id: id.into(),
            tool_name: "create_refund".into(),
            kind: ToolKind::Custom,
            arguments: json!({"order_id": order, "amount_cents": 500}),
            policy,
            handling: policy.handling(ToolKind::Custom),
        }
    }

    fn ahead(id: &str, order: &str, used_by: Option<&str>) -> AheadCall {
        AheadCall {
            interrupt_id: id.into(),
            batch_id: "toolu_1".into(),
            tool_name: "create_refund".into(),
            kind: ToolKind::Custom,
            arguments: json!({"amount_cents": 500, "order_id": order}),
            runs_in: DeferredRun::CallSingleAttemptTool,
            used_by: used_by.map(str::to_owned),
        }
    }

    #[test]
    fn a_repeat_matches_the_same_tool_and_canonical_input_of_an_unused_call_ahead() {
        let list = [ahead("toolu_2", "8", None), ahead("toolu_3", "9", None)];
        let input: Value = serde_json::from_str(r#"{ "order_id": "9",  "amount_cents": 500 }"#).unwrap();
        assert_eq!(find_repeat(&list, "create_refund", ToolKind::Custom, &input), Some(1));
        let other = json!({"order_id": "9", "amount_cents": 400});
        assert_eq!(find_repeat(&list, "create_refund", ToolKind::Custom, &other), None, "another amount");
        assert_eq!(find_repeat(&list, "create_refund", ToolKind::Cli, &input), None, "another kind");
        assert_eq!(find_repeat(&list, "refund", ToolKind::Custom, &input), None, "another tool");
    }

    #[test]
    fn a_decision_ahead_is_used_at_most_once() {
        let list = [ahead("toolu_2", "8", Some("toolu_4")), ahead("toolu_3", "8", None)];
        let input = json!({"order_id": "8", "amount_cents": 500});
        assert_eq!(find_repeat(&list, "create_refund", ToolKind::Custom, &input), Some(1));
        let both_used = [ahead("toolu_2", "8", Some("toolu_4")), ahead("toolu_3", "8", Some("toolu_5"))];
        assert_eq!(find_repeat(&both_used, "create_refund", ToolKind::Custom, &input), None);
    }

    #[test]
    fn held_back_calls_already_asked_ahead_get_no_second_interrupt_but_identical_ones_each_get_one() {
        // First segment: nothing ahead yet; both held-back calls are opened.
        let first = [held("toolu_2", "8"), held("toolu_3", "9")];
        let opened: Vec<&str> = to_open(&[], None, &first).iter().map(|c| c.tool_use_id.as_str()).collect();
        assert_eq!(opened, ["toolu_2", "toolu_3"]);

        // A later segment: the deferred call repeats 8 (taken), 9 is held back again (covered by
        // its unused call ahead), and a second identical 9 needs a decision of its own.
        let list = [ahead("toolu_2", "8", None), ahead("toolu_3", "9", None)];
        let later = [held("toolu_6", "9"), held("toolu_7", "9"), held("toolu_8", "8")];
        let opened: Vec<&str> =
            to_open(&list, Some(0), &later).iter().map(|c| c.tool_use_id.as_str()).collect();
        assert_eq!(opened, ["toolu_7", "toolu_8"], "8's call ahead is taken by the deferred repeat");
    }

    #[test]
    fn the_turns_end_lists_the_calls_ahead_no_call_used_and_closing_is_decided_by_nobody() {
        let list = [ahead("toolu_2", "8", Some("toolu_4")), ahead("toolu_3", "9", None)];
        let unused: Vec<&str> = turn_end(&list).map(|a| a.interrupt_id.as_str()).collect();
        assert_eq!(unused, ["toolu_3"]);
        let closing = closing_decision("turn-1");
        assert!(!closing.approved && closing.granted.is_none());
        assert!(
            closing
                .message
                .as_deref()
                .is_some_and(|m| m.contains("decided by nobody") && m.contains("turn-1"))
        );
    }

    #[test]
    fn an_ahead_request_is_a_tool_approval_with_its_batch() {
        let request = ahead_request("turn-1", &held("toolu_2", "8"), "toolu_1").to_value();
        assert_eq!(request["type"], "tool_approval");
        assert_eq!(request["tool_call_id"], "toolu_2");
        assert_eq!(request["tool_name"], "create_refund");
        assert_eq!(request["kind"], "custom");
        assert_eq!(request["effect"], "non_idempotent_write");
        assert_eq!((&request["batch_id"], &request["ahead"]), (&json!("toolu_1"), &json!(true)));
        let stored: AheadCall =
            serde_json::from_value(serde_json::to_value(ahead("toolu_2", "8", None)).unwrap()).unwrap();
        assert_eq!(stored.used_by, None);
    }
}
