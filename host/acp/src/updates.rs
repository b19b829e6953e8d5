//! What a session's stored events are to an ACP client, without I/O: the `session/update` each
//! event becomes ([`updates`]), and how a turn's end answers `session/prompt` ([`turn_end`]).

use agent_client_protocol::v1::schema::{
    Content, ContentBlock, ContentChunk, StopReason, TextContent, ToolCall, ToolCallContent, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use serde_json::json;
use tollgate_engine::events::{EventKind, Payload};
use tollgate_engine::session::{FailureReason, Usage};

/// The updates a stored event of `kind` with `payload` is to a client: text and thinking as
/// chunks, a tool call as `tool_call` then `tool_call_update`s (its status, and the record's
/// outcome as its raw output), a call waiting for a decision as a pending call. Events a client
/// has no update for (a turn's start, an attempt that failed and runs again, the audit's
/// decisions) are none; a turn's end is [`turn_end`]'s.
pub fn updates(payload: &Payload) -> Vec<agent_client_protocol::v1::schema::SessionUpdate> {
    use agent_client_protocol::v1::schema::SessionUpdate as U;
    let text = |text: &str| ContentChunk::new(ContentBlock::Text(TextContent::new(text)));
    match payload {
        Payload::UserMessage(message) => vec![U::UserMessageChunk(text(&message.text))],
        Payload::TextDelta(block) => vec![U::AgentMessageChunk(text(&block.text))],
        Payload::ReasoningDelta(block) => vec![U::AgentThoughtChunk(text(&block.text))],
        Payload::ToolCallStarted(started) => {
            vec![U::ToolCall(
                ToolCall::new(started.tool_call_id.clone(), started.tool_name.clone())
                    .kind(tool_kind(&started.tool_name))
                    .status(ToolCallStatus::InProgress)
                    .raw_input(started.arguments.clone()),
            )]
        }
        Payload::ToolCallFinished(finished) => {
            let (status, note) = finished_status(&finished.status);
            let mut fields =
                ToolCallUpdateFields::new().status(status).raw_output(json!({"status": finished.status}));
            if let Some(note) = note {
                fields = fields.content(vec![ToolCallContent::Content(Content::new(ContentBlock::Text(
                    TextContent::new(note),
                )))]);
            }
            vec![U::ToolCallUpdate(ToolCallUpdate::new(finished.tool_call_id.clone(), fields))]
        }
        Payload::InterruptOpened(opened) => {
            let request = &opened.request;
            vec![U::ToolCall(
                ToolCall::new(opened.interrupt_id.clone(), request.tool_name.clone())
                    .kind(tool_kind(&request.tool_name))
                    .status(ToolCallStatus::Pending)
                    .raw_input(request.arguments.clone()),
            )]
        }
        Payload::InterruptResolved(_)
        | Payload::TurnStarted(_)
        | Payload::ApprovedUnderGrant(_)
        | Payload::GrantRevoked(_)
        | Payload::ApprovalAwaited(_)
        | Payload::DecidedAheadUsed(_)
        | Payload::AheadUnused(_)
        | Payload::AttemptFailed(_)
        | Payload::TurnCompleted(_)
        | Payload::TurnFailed(_)
        | Payload::CancelRequested(_)
        | Payload::TurnCancelled(_)
        | Payload::AgentUpgraded(_)
        | Payload::DecisionRecorded(_)
        | Payload::InterruptEscalated(_) => Vec::new(),
    }
}

/// A tool call's stored status as the client's, with the sentence a client shows for a status ACP
/// has no word for (a rejected call, one whose outcome is unknown, a cancelled one).
fn finished_status(status: &str) -> (ToolCallStatus, Option<&'static str>) {
    match status {
        "succeeded" => (ToolCallStatus::Completed, None),
        "rejected" => (ToolCallStatus::Failed, Some("rejected by an approver: it did not run")),
        "outcome_unknown" => (
            ToolCallStatus::Failed,
            Some("outcome unknown: it may have run; it is not run again (the inbox lists it for a check)"),
        ),
        "cancelled" => (ToolCallStatus::Failed, Some("cancelled with its turn: it did not run")),
        _ => (ToolCallStatus::Failed, None),
    }
}

/// The ACP kind of a tool, by the Claude Code tool it is (custom and MCP tools are `other`).
fn tool_kind(tool: &str) -> ToolKind {
    match tool {
        "Read" | "NotebookRead" => ToolKind::Read,
        "Edit" | "MultiEdit" | "Write" | "NotebookEdit" => ToolKind::Edit,
        "Bash" | "BashOutput" | "KillShell" => ToolKind::Execute,
        "Grep" | "Glob" | "LS" | "WebSearch" => ToolKind::Search,
        "WebFetch" => ToolKind::Fetch,
        "Task" | "TodoWrite" | "ExitPlanMode" => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

/// How a turn's end answers `session/prompt`.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnEnd {
    /// The prompt's answer: how the turn stopped.
    Stopped(StopReason),
    /// A JSON-RPC error: the turn failed, for this reason.
    Failed {
        /// Why, as the store's closed set names it.
        reason: FailureReason,
        /// What went wrong.
        error: String,
    },
}

/// The answer a turn-ending event gives `session/prompt`, `None` for any other event: answered
/// is `end_turn`, cancelled is `cancelled`, the CLI's turn limit is `max_turn_requests`; every
/// other failure (a budget, the spend limit, a segment that failed) is an error carrying its
/// reason.
pub fn turn_end(payload: &Payload) -> Option<TurnEnd> {
    match payload {
        Payload::TurnCompleted(_) => Some(TurnEnd::Stopped(StopReason::EndTurn)),
        Payload::TurnCancelled(_) => Some(TurnEnd::Stopped(StopReason::Cancelled)),
        Payload::TurnFailed(failed) => Some(match failed.reason {
            FailureReason::MaxTurns => TurnEnd::Stopped(StopReason::MaxTurnRequests),
            reason => TurnEnd::Failed { reason, error: failed.error.clone() },
        }),
        _ => None,
    }
}

/// The tokens a turn used, from the session's totals `before` and `after` it, as ACP counts them:
/// input (cached reads included), output, and the cached reads on their own.
pub fn usage_between(before: &Usage, after: &Usage) -> agent_client_protocol::v1::schema::Usage {
    let count = |after: i64, before: i64| u64::try_from(after - before).unwrap_or(0);
    let input = count(after.input_tokens, before.input_tokens);
    let output = count(after.output_tokens, before.output_tokens);
    let cached = count(after.cached_input_tokens, before.cached_input_tokens);
    agent_client_protocol::v1::schema::Usage::new(input + output, input, output).cached_read_tokens(cached)
}

/// Reads a stored event's payload by its stored kind; `None` for a kind this build does not know
/// (a newer Tollgate's), which a client is not shown.
///
/// # Errors
/// A payload that is not its kind's: the error names the field.
pub fn parse(kind: &str, payload: &str) -> Result<Option<Payload>, serde_json::Error> {
    match EventKind::parse(kind) {
        Some(kind) => Payload::parse(kind, payload).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use agent_client_protocol::v1::schema::SessionUpdate;
    use serde_json::json;

    use super::*;

    fn one(kind: &str, payload: serde_json::Value) -> serde_json::Value {
        let payload = parse(kind, &payload.to_string()).unwrap().expect("a known kind");
        let updates = updates(&payload);
        assert_eq!(updates.len(), 1, "{updates:?}");
        serde_json::to_value(&updates[0]).unwrap()
    }

    #[test]
    fn text_and_thinking_are_chunks_in_the_order_stored() {
        let text =
            one("text_delta", json!({"turn_id": "turn-1", "attempt": 1, "offset": 0, "text": "Refunded."}));
        assert_eq!(
            text,
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Refunded."}})
        );
        let thought = one(
            "reasoning_delta",
            json!({"turn_id": "turn-1", "attempt": 1, "offset": 0, "text": "Let me see"}),
        );
        assert_eq!(thought["sessionUpdate"], "agent_thought_chunk");
    }

    #[test]
    fn a_tool_call_starts_and_its_record_is_its_update_with_an_unknown_outcome_said_in_words() {
        let started = one(
            "tool_call_started",
            json!({"turn_id": "turn-1", "attempt": 1, "tool_call_id": "toolu_1", "tool_name": "Bash",
                "kind": "cli", "arguments": {"command": "ls"}, "deferred": false}),
        );
        assert_eq!(started["sessionUpdate"], "tool_call");
        assert_eq!(
            (started["toolCallId"].clone(), started["kind"].clone()),
            (json!("toolu_1"), json!("execute"))
        );
        assert_eq!(started["rawInput"], json!({"command": "ls"}));
        let unknown = one(
            "tool_call_finished",
            json!({"turn_id": "turn-1", "tool_call_id": "toolu_2", "tool_name": "create_refund",
                "status": "outcome_unknown", "deferred": true}),
        );
        assert_eq!(unknown["sessionUpdate"], "tool_call_update");
        assert_eq!(unknown["status"], "failed");
        assert_eq!(unknown["rawOutput"], json!({"status": "outcome_unknown"}));
        assert!(unknown["content"][0]["content"]["text"].as_str().unwrap().starts_with("outcome unknown"));
        let done = one(
            "tool_call_finished",
            json!({"turn_id": "turn-1", "tool_call_id": "toolu_3", "tool_name": "lookup", "status": "succeeded",
                "deferred": false}),
        );
        assert_eq!(done["status"], "completed");
    }

    #[test]
    fn a_turns_usage_is_the_sessions_totals_after_less_before() {
        let before = Usage { input_tokens: 100, cached_input_tokens: 40, output_tokens: 10, model_calls: 1 };
        let after = Usage { input_tokens: 350, cached_input_tokens: 140, output_tokens: 60, model_calls: 3 };
        let used = serde_json::to_value(usage_between(&before, &after)).unwrap();
        assert_eq!(
            used,
            json!({"totalTokens": 300, "inputTokens": 250, "outputTokens": 50, "cachedReadTokens": 100})
        );
    }

    #[test]
    fn a_turn_ends_the_prompt_as_its_stop_reason_or_as_an_error_with_its_reason() {
        let end = |kind: &str, payload: serde_json::Value| {
            turn_end(&parse(kind, &payload.to_string()).unwrap().unwrap())
        };
        assert_eq!(
            end("turn_completed", json!({"turn_id": "t", "result": "ok"})),
            Some(TurnEnd::Stopped(StopReason::EndTurn))
        );
        assert_eq!(
            end("turn_cancelled", json!({"turn_id": "t", "cancelled_by": "me", "requested_at": 1})),
            Some(TurnEnd::Stopped(StopReason::Cancelled))
        );
        assert_eq!(
            end("turn_failed", json!({"turn_id": "t", "error": "max turns", "reason": "max_turns"})),
            Some(TurnEnd::Stopped(StopReason::MaxTurnRequests))
        );
        assert_eq!(
            end("turn_failed", json!({"turn_id": "t", "error": "spent $1", "reason": "spend_limit"})),
            Some(TurnEnd::Failed { reason: FailureReason::SpendLimit, error: "spent $1".into() })
        );
        assert_eq!(end("turn_started", json!({"turn_id": "t", "attempt": 1})), None);
        let started: Vec<SessionUpdate> =
            updates(&parse("turn_started", r#"{"turn_id":"t","attempt":1}"#).unwrap().unwrap());
        assert!(started.is_empty());
    }
}
