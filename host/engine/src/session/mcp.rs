//! Tool calls an MCP client makes through `/mcp/{agent}`, each a session of its own.
//!
//! An MCP client's `tools/call` is not a model's: no CLI runs. The API stores it as a session of
//! its own, one turn long, with one [`ItemKind::McpCall`] item (the [`McpRequest`]) and a
//! [`StepKind::McpCall`] step. A Worker claims that step, resolves the tool's policy and asks
//! [`on_request`]: the call becomes the turn's deferred call, settled by the same steps as a
//! model's: its interrupt in the inbox (approvers, deadlines, escalation, edits, review,
//! webhooks), then `CallTool` (idempotent, 3 attempts under one key) or `CallSingleAttemptTool`
//! (once; a crash mid-call is `outcome_unknown`). Where a model's turn would resume its CLI, the
//! `ResumeTurn` after the record ends the turn instead ([`on_recorded`]).
//!
//! The call's id ([`call_id`]) is also its interrupt's. The session's starter is the client
//! principal, so separation of duties keeps it from approving its own call.
//!
//! # Caveats
//!
//! - An approval-free read runs in `CallTool` here, one step after the request; the API of
//!   `tollgate serve` runs such reads at once in its own sandbox instead and stores nothing.
//! - Session grants do not apply: each call is a session of its own.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    CallEntry, CallState, CallStep, CancelRequestChange, EngineError, Finish, ItemKind, NewItem, NextStep,
    RunState, SessionStatus, Start, StepKind, Transition, TurnState, raw,
};
use crate::approval::ApprovalRequest;
use crate::catalog::ToolKind;
use crate::events::{self, Payload};
use crate::policy::{Annotations, DeferredRun, Handling, ToolPolicy};
use crate::texts;

/// The turn an MCP call is: its session has no other.
pub const TURN_ID: &str = "turn-1";

/// What an MCP client asked for, stored as the session's [`ItemKind::McpCall`] item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McpRequest {
    /// The agent's custom tool.
    pub tool_name: String,
    /// Its input (a JSON object the API checked against the tool's schema).
    pub arguments: Value,
    /// The client principal that called it.
    pub requested_by: String,
}

impl McpRequest {
    /// The item that stores it.
    pub fn item(&self) -> NewItem {
        NewItem {
            kind: ItemKind::McpCall,
            uuid: None,
            turn_id: Some(TURN_ID.to_owned()),
            body: raw(&json!({
                "kind": ItemKind::McpCall.as_str(),
                "tool_name": self.tool_name,
                "arguments": self.arguments,
                "requested_by": self.requested_by,
            })),
        }
    }

    /// Reads a stored item's body.
    ///
    /// # Errors
    /// Not an `mcp_call` body of this shape.
    pub fn parse(body: &str) -> Result<Self, EngineError> {
        #[derive(Deserialize)]
        struct Stored {
            kind: String,
            #[serde(flatten)]
            request: McpRequest,
        }
        let corrupt = |reason: String| EngineError::Corrupt { what: "mcp_call item".into(), reason };
        let stored: Stored = serde_json::from_str(body).map_err(|e| corrupt(e.to_string()))?;
        if stored.kind != ItemKind::McpCall.as_str() {
            return Err(corrupt(format!("`kind` is {:?}", stored.kind)));
        }
        Ok(stored.request)
    }
}

/// A custom tool as a Worker publishes it for `/mcp/{agent}` (see the store's
/// `AgentRegistry::publish_tools`): what `tools/list` shows, and what the API checks a call
/// against before it stores anything.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PublishedTool {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// The JSON Schema of its input.
    pub input_schema: Value,
    /// Its own hints.
    pub annotations: Annotations,
    /// Its resolved policy in the agent that published it.
    pub policy: ToolPolicy,
}

impl PublishedTool {
    /// Whether a call runs at once, with no record and no approval: an approval-free read.
    pub fn is_inline_read(&self) -> bool {
        self.policy.handling(ToolKind::Custom) == Handling::Inline
    }
}

/// The id of the call (and of its interrupt) in session `session_id`.
///
/// ```
/// assert_eq!(tollgate_engine::session::mcp::call_id("mcp-4f2a"), "mcpcall_4f2a");
/// ```
pub fn call_id(session_id: &str) -> String {
    format!("mcpcall_{}", session_id.strip_prefix("mcp-").unwrap_or(session_id))
}

/// The [`StepKind::McpCall`] step's payload for the call of session `session_id`.
pub fn step_payload(session_id: &str) -> Value {
    serde_json::to_value(CallStep { turn_id: TURN_ID.to_owned(), tool_call_id: call_id(session_id) })
        .expect("serializes")
}

/// The step the API queues with the request of session `session_id`.
pub fn request_step(session_id: &str) -> NextStep {
    NextStep {
        kind: StepKind::McpCall,
        payload: step_payload(session_id),
        start: Start::Now,
        only_if_prompts_after: None,
        session_status: Some(SessionStatus::Running),
    }
}

/// A claimed [`StepKind::McpCall`]: `request` under `policy`, the tool's resolved policy, or
/// `None` when the agent no longer offers the tool (it is then recorded `failed`, and never
/// runs). An approval-free call is approved as it is deferred; one that needs approval opens its
/// interrupt and waits.
pub fn on_request(
    state: &RunState,
    step: &CallStep,
    request: &McpRequest,
    policy: Option<ToolPolicy>,
) -> Transition {
    let entry = |requires_approval: bool, runs_in: DeferredRun, state: CallState| CallEntry {
        requires_approval,
        runs_in,
        requested_by: Some(request.requested_by.clone()),
        ..CallEntry::new(
            &step.tool_call_id,
            &request.tool_name,
            ToolKind::Custom,
            request.arguments.clone(),
            &step.turn_id,
            state,
        )
    };
    let mut next = state.clone();
    next.turn =
        Some(TurnState { turn_id: step.turn_id.clone(), prompts_upto: 0, ahead: Vec::new(), trace: None });
    let Some(policy) = policy else {
        let error = texts::render(texts::TOOL_NOT_OFFERED, &request.tool_name);
        let call = entry(false, DeferredRun::CallTool, CallState::Failed { error });
        let mut t = on_recorded(state, &call);
        t.events.insert(0, call.finished_event(true).into());
        t.calls.push(call);
        return t;
    };
    let (requires_approval, runs_in) = match policy.handling(ToolKind::Custom) {
        Handling::Deferred { requires_approval, runs_in } => (requires_approval, runs_in),
        // A read or an idempotent write that needs no approval: in `CallTool`, under its key.
        Handling::Inline | Handling::Recorded => (false, DeferredRun::CallTool),
    };
    let mut t =
        Transition::new(Finish::Done(json!({"outcome": "deferred", "tool_call_id": step.tool_call_id})));
    t = t.event(Payload::TurnStarted(events::TurnStarted { turn_id: step.turn_id.clone(), attempt: 1 }));
    if requires_approval {
        let call = entry(true, runs_in, CallState::PendingApproval);
        let mut request_ = ApprovalRequest::new(
            &call.turn_id,
            &call.tool_call_id,
            &call.tool_name,
            ToolKind::Custom,
            call.arguments.clone(),
            policy.effect,
        );
        request_.requested_by = Some(request.requested_by.clone());
        let interrupt = super::NewInterrupt { interrupt_id: call.tool_call_id.clone(), request: request_ };
        t.events.push(interrupt.opened_event());
        t.interrupts.push(interrupt);
        let call_step = serde_json::to_value(step).expect("serializes");
        super::turn::await_approval(&mut t, &call.turn_id, &call, call_step, call.tool_call_id.clone());
        t.calls.push(call);
    } else {
        super::turn::approved_as_deferred(&mut t, &entry(false, runs_in, CallState::Queued));
    }
    t.run_state = Some(next);
    t
}

/// The call has its record: where a model's turn would resume its CLI, the MCP call's turn ends,
/// with the record's text as its result.
pub fn on_recorded(state: &RunState, call: &CallEntry) -> Transition {
    let mut t = Transition::new(Finish::Done(json!({"outcome": "completed"})));
    let mut next = state.clone();
    next.turn_entries.clear();
    next.turn = None;
    next.turns_ended += 1;
    next.last_turn_error = None;
    next.last_turn_cancelled = None;
    t.run_state = Some(next);
    t.status = Some(SessionStatus::Idle);
    t.cancel = CancelRequestChange::Drop;
    let result = match &call.state {
        CallState::Succeeded { output } => output.clone(),
        other => format!("{}: {}", other.name(), other.text().unwrap_or_default()),
    };
    t.event(Payload::TurnCompleted(events::TurnCompleted { turn_id: call.turn_id.clone(), result }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Effect;
    use crate::session::client::HumanDecision;
    use crate::session::tools::{ToolRun, on_approval, on_tool_result};
    use crate::session::{EventKind, StepKind};

    fn request() -> McpRequest {
        McpRequest {
            tool_name: "create_refund".into(),
            arguments: json!({"order_id": "7", "amount_cents": 500}),
            requested_by: "carl".into(),
        }
    }

    fn step() -> CallStep {
        serde_json::from_value(step_payload("mcp-ab12")).unwrap()
    }

    #[test]
    fn the_request_item_reads_back_and_a_wrong_kind_is_refused_by_name() {
        let item = request().item();
        assert_eq!(item.kind, ItemKind::McpCall);
        assert_eq!(McpRequest::parse(item.body.get()).unwrap(), request());
        let err =
            McpRequest::parse(r#"{"kind":"user_prompt","tool_name":"x","arguments":{},"requested_by":"a"}"#)
                .unwrap_err();
        assert!(err.to_string().contains("mcp_call item"), "{err}");
    }

    #[test]
    fn a_write_that_needs_approval_waits_in_the_inbox_runs_once_when_approved_then_ends_the_turn() {
        let state = RunState::default();
        let policy = ToolPolicy::new(Effect::NonIdempotentWrite);
        let t = on_request(&state, &step(), &request(), Some(policy));
        assert_eq!(t.status, Some(SessionStatus::AwaitingApproval));
        assert_eq!(t.interrupts.len(), 1);
        let asked = &t.interrupts[0];
        assert_eq!(asked.interrupt_id, "mcpcall_ab12");
        assert_eq!(asked.request.requested_by.as_deref(), Some("carl"));
        assert_eq!(t.steps.len(), 1);
        assert_eq!(t.steps[0].kind, StepKind::AwaitToolApproval);
        let call = t.calls[0].clone();
        assert_eq!(call.state, CallState::PendingApproval);
        assert_eq!(call.requested_by.as_deref(), Some("carl"));
        let kinds: Vec<EventKind> = t.events.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EventKind::TurnStarted, EventKind::InterruptOpened, EventKind::ApprovalAwaited]);

        let approved = on_approval(&call, &HumanDecision { approved: true, ..HumanDecision::default() });
        assert_eq!(approved.steps[0].kind, StepKind::CallSingleAttemptTool);
        let queued = approved.calls[0].clone();
        let ran = on_tool_result(
            true,
            1,
            &queued,
            ToolRun::Output { text: "refund r-1".into(), is_error: false, images: Vec::new() },
        );
        assert_eq!(ran.steps[0].kind, StepKind::ResumeTurn);
        let recorded = ran.calls[0].clone();
        let state = t.run_state.clone().unwrap();
        let end = on_recorded(&state, &recorded);
        assert_eq!(end.status, Some(SessionStatus::Idle));
        assert!(end.steps.is_empty(), "nothing runs after: no CLI, no next turn");
        assert_eq!(end.run_state.as_ref().unwrap().turns_ended, 1);
        assert!(end.run_state.as_ref().unwrap().turn.is_none());
        assert_eq!(end.events.last().unwrap().kind, EventKind::TurnCompleted);
        assert!(end.events.last().unwrap().payload.to_string().contains("refund r-1"));
    }

    #[test]
    fn an_approval_free_read_and_idempotent_write_are_queued_in_call_tool_without_an_interrupt() {
        for effect in [Effect::Read, Effect::IdempotentWrite] {
            let t = on_request(&RunState::default(), &step(), &request(), Some(ToolPolicy::new(effect)));
            assert!(t.interrupts.is_empty(), "{effect:?}");
            assert_eq!(t.steps[0].kind, StepKind::CallTool, "{effect:?}");
            assert_eq!(t.calls[0].state, CallState::Queued);
            assert_eq!(t.status, Some(SessionStatus::Running));
        }
        let approval = ToolPolicy { effect: Effect::Read, requires_approval: true };
        let t = on_request(&RunState::default(), &step(), &request(), Some(approval));
        assert_eq!(t.interrupts.len(), 1, "a read whose policy asks for approval waits too");
    }

    #[test]
    fn a_tool_the_agent_no_longer_offers_is_recorded_failed_and_ends_the_turn_without_running() {
        let t = on_request(&RunState::default(), &step(), &request(), None);
        assert!(t.steps.is_empty());
        assert_eq!(t.status, Some(SessionStatus::Idle));
        assert!(matches!(&t.calls[0].state, CallState::Failed { error } if error.contains("does not offer")));
        assert_eq!(t.events.first().unwrap().kind, EventKind::ToolCallFinished);
    }
}
