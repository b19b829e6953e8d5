//! The gate's rules, one test each, in the order of the module docs' table.

use serde_json::json;

use super::*;
use crate::catalog::DEFAULT_TOOL_SERVER_NAME;
use crate::policy::{Annotations, DeferredRun, Effect, PolicyEntry};

const RETRY_REFUND: &str = "mcp__tools__create_refund did not run. Only one tool call per reply can run \
    outside this turn, and another call already does. Call mcp__tools__create_refund again by itself.";

/// The reference adapters' support agent: `lookup_order` (read-only hint), `create_refund`
/// (non_idempotent_write), `set_status` (idempotent hint, `inline = false`: the deferred step),
/// `record_credit` (idempotent hint: a recorded inline write), `Read`/`Grep` read, `Bash` none.
fn gate() -> Gate {
    let policies = Policies::default()
        .with("create_refund", PolicyEntry::new(Effect::NonIdempotentWrite))
        .and_then(|p| p.with("set_status", PolicyEntry::new(Effect::IdempotentWrite).with_inline(false)))
        .and_then(|p| p.with("Read", PolicyEntry::new(Effect::Read)))
        .and_then(|p| p.with("Grep", PolicyEntry::new(Effect::Read)))
        .and_then(|p| p.with("Write", PolicyEntry::new(Effect::IdempotentWrite)))
        .and_then(|p| p.with("audit_log", PolicyEntry::new(Effect::Read).with_approval(true)));
    let catalog = ToolCatalog::new(DEFAULT_TOOL_SERVER_NAME)
        .and_then(|c| c.with_tool("lookup_order", Annotations { read_only: true, ..Annotations::default() }))
        .and_then(|c| c.with_tool("create_refund", Annotations::default()))
        .and_then(|c| c.with_tool("set_status", Annotations { idempotent: true, ..Annotations::default() }))
        .and_then(|c| {
            c.with_tool("record_credit", Annotations { idempotent: true, ..Annotations::default() })
        })
        .and_then(|c| c.with_tool("audit_log", Annotations { read_only: true, ..Annotations::default() }));
    match (policies, catalog) {
        (Ok(policies), Ok(catalog)) => Gate::new(policies, catalog),
        (policies, catalog) => panic!("fixture: {policies:?} {catalog:?}"),
    }
}

fn call(id: &str, tool: &str) -> ToolCall {
    ToolCall::new(id, tool, json!({ "id": id }))
}

fn decided(step: Next) -> Decision {
    match step {
        Next::Decided(decision) => decision,
        Next::AskCliDecider(query) => panic!("unexpected decider query for {}", query.tool_name()),
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
fn an_approval_free_idempotent_write_is_allowed_and_runs_once_over_mcp_recorded_under_its_own_id() {
    let mut gate = gate();
    assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__record_credit"), allow());
    assert_eq!(
        gate.permit_mcp_call(Some("toolu_1"), "record_credit"),
        McpPermit::RunRecorded(RecordedRun { record_id: "toolu_1".into(), attempts_before: 0 })
    );
    assert!(refused(&mut gate, Some("toolu_1"), "record_credit"), "a permit is used once");
    assert_eq!(gate.deferred_call_id(), None, "it does not end the segment");
    assert_eq!(
        hook(&mut gate, "toolu_2", "mcp__tools__create_refund"),
        Decision::Defer,
        "nor take its deferral"
    );
}

fn credit_write(id: &str, order: &str, outcome: Option<Outcome>, attempts: i64) -> InlineWrite {
    InlineWrite {
        tool_call_id: id.into(),
        tool_name: "record_credit".into(),
        arguments: json!({ "order_id": order }),
        attempts,
        outcome,
        images: Vec::new(),
    }
}

fn credit(gate: &mut Gate, id: &str, order: &str) -> Decision {
    decided(gate.pre_tool_use(&ToolCall::new(id, "mcp__tools__record_credit", json!({ "order_id": order }))))
}

#[test]
fn a_rerun_replays_a_recorded_inline_write_met_under_a_new_id_by_its_tool_and_arguments() {
    let done = Outcome::Succeeded { output: "credited c_1".into() };
    let mut gate = gate().with_inline_writes([credit_write("toolu_old", "7", Some(done.clone()), 1)]);
    let Decision::Replay(record) = credit(&mut gate, "toolu_new", "7") else { panic!("replayed") };
    assert_eq!(record.tool_call_id, "toolu_old", "the record it was made under");
    assert_eq!(
        gate.permit_mcp_call(Some("toolu_new"), "record_credit"),
        McpPermit::Replay(ToolResult::text("credited c_1", false)),
        "served from the record, never run"
    );
    assert_eq!(
        credit(&mut gate, "toolu_again", "7"),
        allow(),
        "each write is met once: a second equal call is a new write"
    );
    assert_eq!(
        gate.permit_mcp_call(Some("toolu_again"), "record_credit"),
        McpPermit::RunRecorded(RecordedRun { record_id: "toolu_again".into(), attempts_before: 0 })
    );
}

#[test]
fn a_rerun_calls_a_started_inline_write_again_under_its_own_key_counting_its_attempts() {
    let mut gate = gate()
        .with_inline_writes([credit_write("toolu_a", "7", None, 1), credit_write("toolu_b", "8", None, 2)]);
    assert_eq!(credit(&mut gate, "toolu_new", "8"), allow());
    assert_eq!(
        gate.permit_mcp_call(Some("toolu_new"), "record_credit"),
        McpPermit::RunRecorded(RecordedRun { record_id: "toolu_b".into(), attempts_before: 2 }),
        "met by its arguments"
    );
    assert_eq!(credit(&mut gate, "toolu_a", "9"), allow());
    assert_eq!(
        gate.permit_mcp_call(Some("toolu_a"), "record_credit"),
        McpPermit::RunRecorded(RecordedRun { record_id: "toolu_a".into(), attempts_before: 1 }),
        "met by its own ID first"
    );
    let other = hook(&mut gate, "toolu_b", "mcp__tools__lookup_order");
    assert_eq!(denial(&other).1, DenyReason::RecordedUnderThisId, "another tool under a write's ID");
}

#[test]
fn an_idempotent_custom_write_with_inline_false_defers_without_approval_to_call_tool() {
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
            handling: Handling::Deferred { requires_approval: true, runs_in: DeferredRun::ResumedSegment },
            held_back: Vec::new(),
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
    assert_eq!(gate.decision("toolu_1"), Some(allow()));
    assert_eq!(gate.deferred_call_id(), None, "the repeated ID did not take the deferral");
    assert!(refused(&mut gate, Some("toolu_1"), "create_refund"), "no permit for the other tool");
}

#[test]
fn a_deferred_id_asked_again_is_denied_and_stays_deferred() {
    // Asked about the same tool and input: a deferred call never runs inside the segment.
    let mut gate = gate();
    assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
    assert_eq!(
        denial(&hook(&mut gate, "toolu_1", "mcp__tools__create_refund")).1,
        DenyReason::AlreadyDecided
    );
    assert_eq!(gate.decision("toolu_1"), Some(Decision::Defer));
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
fn can_use_tool_after_a_hook_allow_for_another_input_or_tool_is_denied() {
    let mut gate = gate();
    assert_eq!(hook(&mut gate, "toolu_1", "Read"), allow());
    let other_input = ToolCall::new("toolu_1", "Read", json!({ "id": "toolu_1", "offset": 10 }));
    assert_eq!(
        denial(&decided(gate.can_use_tool(&other_input))),
        (
            "Read did not run. This tool use ID already has a decision in this reply; \
             call Read again with a new tool use.",
            DenyReason::AlreadyDecided
        )
    );
    assert_eq!(denial(&ask(&mut gate, "toolu_1", "Grep")).1, DenyReason::AlreadyDecided);
    assert_eq!(gate.decision("toolu_1"), Some(allow()));
}

#[test]
fn can_use_tool_after_a_hook_allow_for_the_same_call_gets_the_same_allow() {
    // Claude Code asks again after the hook's allow when a call touches a path it guards.
    let mut gate = gate();
    let first = ToolCall::new(
        "toolu_1",
        "Read",
        json!({ "file_path": "/workspace/.claude/settings.json", "limit": 5 }),
    );
    assert_eq!(decided(gate.pre_tool_use(&first)), allow());
    let reordered: Value =
        serde_json::from_str(r#"{ "limit": 5, "file_path": "/workspace/.claude/settings.json" }"#).unwrap();
    let again = ToolCall::new("toolu_1", "Read", reordered);
    assert_eq!(decided(gate.can_use_tool(&again)), allow(), "key order does not matter");
    assert_eq!(decided(gate.can_use_tool(&again)), allow(), "nor how often it asks");
    assert_eq!(decided(gate.pre_tool_use(&first)), allow(), "nor which request asks");
    assert_eq!(gate.decision("toolu_1"), Some(allow()));
}

#[test]
fn a_repeated_ask_about_an_allowed_custom_call_gets_the_same_allow_but_no_second_run() {
    let mut gate = gate();
    assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__lookup_order"), allow());
    assert_eq!(gate.permit_mcp_call(Some("toolu_1"), "lookup_order"), McpPermit::Run);
    assert_eq!(ask(&mut gate, "toolu_1", "mcp__tools__lookup_order"), allow());
    assert!(refused(&mut gate, Some("toolu_1"), "lookup_order"), "the permit was used");

    assert_eq!(credit(&mut gate, "toolu_2", "7"), allow());
    assert_eq!(credit(&mut gate, "toolu_2", "7"), allow());
    assert!(matches!(gate.permit_mcp_call(Some("toolu_2"), "record_credit"), McpPermit::RunRecorded(_)));
    assert_eq!(credit(&mut gate, "toolu_2", "7"), allow());
    assert!(refused(&mut gate, Some("toolu_2"), "record_credit"), "a recorded write runs once");
    assert_eq!(denial(&credit(&mut gate, "toolu_2", "8")).1, DenyReason::AlreadyDecided);
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
}

#[test]
fn the_mcp_server_returns_the_recorded_output_once_without_running_the_tool() {
    let mut gate = gate().resuming(refund_record(Outcome::Succeeded { output: "refunded r_1".to_owned() }));
    let _ = hook(&mut gate, "toolu_refund", "mcp__tools__create_refund");
    assert_eq!(
        gate.permit_mcp_call(Some("toolu_refund"), "create_refund"),
        McpPermit::Replay(ToolResult::text("refunded r_1", false))
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
        McpPermit::Replay(ToolResult::text("The user rejected this call: wrong order", true))
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
fn the_pending_call_asked_again_replays_the_same_record_served_once_and_nothing_else() {
    let record = refund_record(Outcome::Succeeded { output: "ok".to_owned() });
    let mut gate = gate().resuming(record.clone());
    let replay = Decision::Replay(record);
    assert_eq!(hook(&mut gate, "toolu_refund", "mcp__tools__create_refund"), replay);
    // Asked again about the input the hook got, or the recorded arguments its answer gave.
    assert_eq!(hook(&mut gate, "toolu_refund", "mcp__tools__create_refund"), replay);
    let recorded = ToolCall::new("toolu_refund", "mcp__tools__create_refund", json!({ "order_id": "7" }));
    assert_eq!(decided(gate.can_use_tool(&recorded)), replay);
    assert!(matches!(gate.permit_mcp_call(Some("toolu_refund"), "create_refund"), McpPermit::Replay(_)));
    assert_eq!(decided(gate.can_use_tool(&recorded)), replay);
    assert!(refused(&mut gate, Some("toolu_refund"), "create_refund"), "the record is served once");
    let other = ToolCall::new("toolu_refund", "mcp__tools__create_refund", json!({ "order_id": "8" }));
    assert_eq!(denial(&decided(gate.can_use_tool(&other))).1, DenyReason::AlreadyDecided);
}

#[test]
fn an_approved_cli_tool_asked_again_about_its_recorded_input_replays_again() {
    let record = bash_record(Outcome::approved_cli_tool());
    let mut gate = gate().resuming(record.clone());
    assert_eq!(hook(&mut gate, "toolu_bash", "Bash"), Decision::Replay(record.clone()));
    let recorded = ToolCall::new("toolu_bash", "Bash", json!({ "command": "make deploy" }));
    assert_eq!(decided(gate.can_use_tool(&recorded)), Decision::Replay(record));
    let edited = ToolCall::new("toolu_bash", "Bash", json!({ "command": "make deploy --force" }));
    assert_eq!(denial(&decided(gate.can_use_tool(&edited))).1, DenyReason::AlreadyDecided);
}

#[test]
fn can_use_tool_answers_a_resumed_call_whose_hook_did_not_run_from_the_record_once() {
    let mut gate = gate().resuming(refund_record(Outcome::Succeeded { output: "refunded r_1".to_owned() }));
    let asked =
        ToolCall::new("toolu_refund", "mcp__tools__create_refund", json!({ "order_id": "rewritten" }));
    let decision = decided(gate.can_use_tool(&asked));
    let Decision::Replay(record) = &decision else { panic!("expected a replay, got {decision:?}") };
    assert_eq!(record.arguments, json!({ "order_id": "7" }), "the recorded arguments, never the CLI's input");
    assert!(matches!(gate.permit_mcp_call(Some("toolu_refund"), "create_refund"), McpPermit::Replay(_)));
    assert_eq!(decided(gate.can_use_tool(&asked)), decision, "the same call asked again");
    assert!(refused(&mut gate, Some("toolu_refund"), "create_refund"), "the record is served once");
}

#[test]
fn can_use_tool_denies_a_rejected_resumed_cli_tool_with_the_plain_rejection_text() {
    let mut gate = gate().resuming(bash_record(Outcome::Rejected { message: None }));
    let decision = ask(&mut gate, "toolu_bash", "Bash");
    assert_eq!(denial(&decision), ("The user rejected this call.", DenyReason::Rejected));
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
        McpPermit::Replay(ToolResult::text("done", false))
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
        McpPermit::Refuse(ToolResult::text(
            "mcp__tools__lookup_order did not run. Tollgate has no permission decision for this call.",
            true,
        ))
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

fn with_decider(step: Next, answer: Result<Option<CliToolDecision>, String>, gate: &mut Gate) -> Decision {
    match step {
        Next::AskCliDecider(query) => gate.answer_cli_decider(query, answer),
        Next::Decided(decision) => panic!("expected a decider query, got {decision:?}"),
    }
}

fn decide_bash(answer: Result<Option<CliToolDecision>, String>) -> (Gate, Decision) {
    let mut gate = gate().with_cli_decider();
    let bash = ToolCall::new("toolu_1", "Bash", json!({ "command": "ls" }));
    let step = gate.pre_tool_use(&bash);
    if let Next::AskCliDecider(query) = &step {
        assert_eq!((query.tool_use_id(), query.tool_name(), query.input()), ("toolu_1", "Bash", &bash.input));
    }
    let decision = with_decider(step, answer, &mut gate);
    (gate, decision)
}

#[test]
fn the_cli_decider_may_allow_a_tool_that_the_table_would_defer() {
    let (gate, decision) = decide_bash(Ok(Some(CliToolDecision::Allow)));
    assert_eq!(decision, allow());
    assert_eq!(gate.decision("toolu_1"), Some(allow()));
    assert_eq!(gate.deferred_call_id(), None);
}

#[test]
fn the_cli_decider_may_rewrite_the_input() {
    let (_, decision) =
        decide_bash(Ok(Some(CliToolDecision::AllowWithInput(json!({ "command": "ls -la" })))));
    assert_eq!(decision, Decision::Allow { updated_input: Some(json!({ "command": "ls -la" })) });
}

#[test]
fn a_rewritten_call_asked_again_gets_the_new_input_again_without_asking_the_decider() {
    let (mut gate, decision) =
        decide_bash(Ok(Some(CliToolDecision::AllowWithInput(json!({ "command": "ls -la" })))));
    // Claude Code asks about the input after `updatedInput`; the first input is the same call too.
    for input in [json!({ "command": "ls -la" }), json!({ "command": "ls" })] {
        assert_eq!(decided(gate.can_use_tool(&ToolCall::new("toolu_1", "Bash", input))), decision);
    }
    let other = ToolCall::new("toolu_1", "Bash", json!({ "command": "rm -rf /" }));
    assert_eq!(denial(&decided(gate.can_use_tool(&other))).1, DenyReason::AlreadyDecided);
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
    assert_eq!(with_decider(step, Ok(Some(CliToolDecision::RequireApproval)), &mut gate), Decision::Defer);
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
    assert!(matches!(gate.pre_tool_use(&call("toolu_bash", "Bash")), Next::Decided(Decision::Replay(_))));
    assert!(matches!(gate.pre_tool_use(&call("toolu_1", "mcp__tools__lookup_order")), Next::Decided(_)));
    assert!(matches!(gate.pre_tool_use(&call("toolu_2", "mcp__tools__create_refund")), Next::Decided(_)));
}

#[test]
fn a_call_waiting_for_the_cli_decider_cannot_be_decided_twice() {
    let mut gate = gate().with_cli_decider();
    let step = gate.pre_tool_use(&call("toolu_1", "Bash"));
    assert_eq!(gate.decision("toolu_1"), None);
    assert_eq!(denial(&hook(&mut gate, "toolu_1", "Bash")).1, DenyReason::AlreadyDecided);
    assert_eq!(with_decider(step, Ok(Some(CliToolDecision::Allow)), &mut gate), allow());
    assert_eq!(gate.decision("toolu_1"), Some(allow()));
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

#[test]
fn deferrable_calls_denied_after_the_deferral_that_need_approval_are_held_back_with_their_input() {
    let mut gate = gate();
    let refund = |id: &str, order: &str| {
        ToolCall::new(id, "mcp__tools__create_refund", json!({"order_id": order, "amount_cents": 500}))
    };
    assert_eq!(decided(gate.pre_tool_use(&refund("toolu_1", "7"))), Decision::Defer);
    let second = decided(gate.pre_tool_use(&refund("toolu_2", "8")));
    assert_eq!(denial(&second), (RETRY_REFUND, DenyReason::OnlyOneDeferredCall));
    // Needs no approval (idempotent write, CallTool): denied the same way, but not held back.
    assert!(matches!(hook(&mut gate, "toolu_3", "mcp__tools__set_status"), Decision::Deny { .. }));
    // A CLI tool that needs approval is held back under its own name.
    let bash = ToolCall::new("toolu_4", "Bash", json!({"command": "ls"}));
    assert!(matches!(decided(gate.pre_tool_use(&bash)), Decision::Deny { .. }));
    // A subagent's call and a can_use_tool fallback are not held back.
    assert!(matches!(
        decided(gate.pre_tool_use(&refund("toolu_5", "9").in_subagent(None))),
        Decision::Deny { .. }
    ));
    assert!(matches!(decided(gate.can_use_tool(&refund("toolu_6", "10"))), Decision::Deny { .. }));

    let deferred = gate
        .accept_deferral(
            "toolu_1",
            "mcp__tools__create_refund",
            json!({"order_id": "7", "amount_cents": 500}),
        )
        .expect("the deferral");
    let held: Vec<(&str, &str, ToolKind, &Value)> = deferred
        .held_back
        .iter()
        .map(|c| (c.tool_use_id.as_str(), c.tool_name.as_str(), c.kind, &c.arguments))
        .collect();
    assert_eq!(
        held,
        vec![
            ("toolu_2", "create_refund", ToolKind::Custom, &json!({"order_id": "8", "amount_cents": 500})),
            ("toolu_4", "Bash", ToolKind::Cli, &json!({"command": "ls"})),
        ]
    );
    assert!(deferred.held_back.iter().all(|c| c.policy.requires_approval));
    assert_eq!(
        deferred.held_back[0].handling,
        Handling::Deferred { requires_approval: true, runs_in: DeferredRun::CallSingleAttemptTool }
    );
}

#[test]
fn a_segment_with_one_deferrable_call_holds_nothing_back() {
    let mut gate = gate();
    assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
    assert_eq!(hook(&mut gate, "toolu_2", "mcp__tools__lookup_order"), allow());
    let deferred = gate.accept_deferral("toolu_1", "mcp__tools__create_refund", json!({})).expect("deferral");
    assert!(deferred.held_back.is_empty());
}

#[test]
fn a_cli_call_the_decider_sends_to_approval_after_the_deferral_is_held_back() {
    let mut gate = gate().with_cli_decider();
    assert_eq!(hook(&mut gate, "toolu_1", "mcp__tools__create_refund"), Decision::Defer);
    let bash = ToolCall::new("toolu_2", "Bash", json!({"command": "rm -rf build; make"}));
    let step = gate.pre_tool_use(&bash);
    let decision = with_decider(step, Ok(Some(CliToolDecision::RequireApproval)), &mut gate);
    assert_eq!(denial(&decision).1, DenyReason::OnlyOneDeferredCall);
    // An allowed one is not.
    let ls = ToolCall::new("toolu_3", "Bash", json!({"command": "ls"}));
    let step = gate.pre_tool_use(&ls);
    assert_eq!(with_decider(step, Ok(Some(CliToolDecision::Allow)), &mut gate), allow());
    let deferred = gate.accept_deferral("toolu_1", "mcp__tools__create_refund", json!({})).expect("deferral");
    let held: Vec<(&str, &str, &Value)> = deferred
        .held_back
        .iter()
        .map(|c| (c.tool_use_id.as_str(), c.tool_name.as_str(), &c.arguments))
        .collect();
    assert_eq!(held, [("toolu_2", "Bash", &bash.input)]);
}
