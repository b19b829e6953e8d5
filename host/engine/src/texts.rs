//! Every text the gate and the records show the model, in one place.
//!
//! This module owns the exact wording. [`crate::gate`] and [`crate::record`] only pick which text
//! to show. Each constant says where its wording comes from: the reference adapters (the durable
//! Agent SDK adapters Tollgate replaces; docs/ARCHITECTURE.md, "Glossary") give some texts
//! verbatim, and for the others only the meaning, so Tollgate's wording is marked "Tollgate
//! wording" and quotes the rule it implements.
//!
//! Templates hold the placeholders `{tool}` (the tool name as the model called it, such as
//! `mcp__tools__create_refund` or `Bash`) and `{message}`; [`render`] fills them in.
//!
//! # Caveats
//!
//! - A PreToolUse `deny` reaches the model with the CLI's prefix `PreToolUse:<tool> hook error: `
//!   (docs/PROTOCOL.md, "PreToolUse and the gate"); a `can_use_tool` deny and an MCP tool result
//!   reach it verbatim. The texts here never include that prefix.
//! - These texts are part of the behaviour other Workers must reproduce (the reference adapters'
//!   wire contract: "deny later deferrable calls with the same message"). Change them only together
//!   with the other implementations.

/// Denial of every deferrable call after the first one of a segment, and of a deferrable call that
/// reaches `can_use_tool` instead of being deferred.
///
/// Verbatim from the reference adapters' wording, "How a turn runs", step 3 ("Every later deferrable
/// call of the same segment: `deny` with …"); "Limits" reuses it for `can_use_tool` ("the adapter
/// denies the call with the same \"call it again by itself\" message").
pub const ONLY_ONE_DEFERRED_CALL: &str = "{tool} did not run. Only one tool call per reply can run outside \
this turn, and another call already does. Call {tool} again by itself.";

/// Denial of a deferrable call made inside a subagent.
///
/// Tollgate wording for the reference adapters' rule ("Limits"): "A deferrable call inside a
/// subagent is denied with a message that asks the model to call it from the main conversation."
/// They do not quote the text.
pub const CALL_FROM_MAIN_CONVERSATION: &str = "{tool} did not run. A subagent cannot call it, because its \
calls run outside this turn. Call {tool} from the main conversation instead.";

/// What the model sees for a rejected call when the reviewer gave a reason.
///
/// From the reference adapters' wording (TypeScript), "How a turn runs", step 5: "canUseTool denies it with
/// \"The user rejected this call: \"" followed by the reviewer's message (the rendered README lost
/// the placeholder after the colon).
pub const REJECTED_WITH_MESSAGE: &str = "The user rejected this call: {message}";

/// What the model sees for a rejected call when the reviewer gave no reason.
///
/// Tollgate wording: the reference adapters quote only the form with a message ([`REJECTED_WITH_MESSAGE`]).
pub const REJECTED_WITHOUT_MESSAGE: &str = "The user rejected this call.";

/// The replay form of an approved tool that runs inside the CLI (`APPROVED_CLI_TOOL_OUTPUT`,
/// `approvedCliToolOutput`), before the resumed segment runs it.
///
/// Tollgate wording: the reference adapters name the constant ("How a turn runs" step 4, and
/// their wire contract) but do not quote its value. The model never sees it as a tool result (the CLI runs
/// the approved tool itself), and no record keeps it: the call's record comes from that run.
pub const APPROVED_CLI_TOOL_OUTPUT: &str = "Approved to run inside Claude Code; its output is not recorded.";

/// What the model sees for a deferred call whose outcome is unknown (a single-attempt write that
/// crashed after it started, or an idempotent write whose attempts ran out).
///
/// Tollgate wording for "Effects and policies": "the session records `outcome_unknown`, because
/// the write may have taken effect." The reference adapters do not quote the text.
pub const OUTCOME_UNKNOWN: &str = "The outcome of {tool} is unknown: the call started but did not report \
a result, so it may have taken effect. Check before calling {tool} again.";

/// What the model reads for a write that failed before anything it sent left the machine (its
/// service refused the connection, the allow-list denied the request): a definite failure, not an
/// unknown outcome. `{tool}` is the tool's own name; `{message}` what went wrong.
///
/// Tollgate wording: the reference adapters record `outcome_unknown` for every exception of a write, "because
/// the write may have taken effect"; this is the case where it provably did not.
pub const NEVER_LEFT: &str =
    "The request of {tool} never left this machine, so it did not take effect: {message}";

/// [`NEVER_LEFT`] for `tool` and `message`.
pub fn never_left(tool: &str, message: &str) -> String {
    NEVER_LEFT.replace("{tool}", tool).replace("{message}", message)
}

/// Placeholder for non-text content the CLI's tool result of an approved CLI call holds (its
/// record keeps text); `{kind}` is the content type. Tollgate wording, after the reference
/// adapters' `[image content omitted]` ("Limits").
pub const CONTENT_OMITTED: &str = "[{kind} content omitted]";

/// What the model reads, after a replayed result's text, for an image of the record whose bytes
/// were not loaded for the replay; `{digest}` names the image. Tollgate wording: recorded results
/// keep their images (a replay sends them again), so this shows only if the Worker did not load
/// one, and then the model is told rather than shown nothing.
pub const IMAGE_NOT_LOADED: &str = "\n[image {digest} of this result could not be loaded]";

/// Denial of a second decision under a tool use ID that already has one in this segment.
///
/// Tollgate wording for the reference adapters' rule ("Limits"): "Each tool use ID gets one
/// PreToolUse decision per segment … A later PreToolUse for the same ID is denied and never
/// replaces that decision", and "canUseTool denies every later request for that tool use ID".
/// Narrower here: a repeated ask about the same call (tool and input) that was let run gets the
/// same answer (`crate::gate`, "The rules"), since Claude Code asks again for paths it guards.
pub const ALREADY_DECIDED: &str = "{tool} did not run. This tool use ID already has a decision in this \
reply; call {tool} again with a new tool use.";

/// Denial of a call under the tool use ID of a recorded call that is not the pending one, or of
/// another tool under the pending call's ID.
///
/// Tollgate wording for the reference adapters' rule ("Limits"): "A recorded call replays only as
/// its own tool … Another tool, or a second decision, under its tool use ID is denied and never
/// runs. … a recorded call whose tool_result the stored transcript already holds … is denied."
pub const RECORDED_UNDER_THIS_ID: &str = "{tool} did not run. Another call with this tool use ID \
already has a recorded result; call {tool} again with a new tool use.";

/// Denial of a new call of a custom tool that the current tool listing lacks.
///
/// Tollgate wording for the rule "a tool that vanished still replays its recorded result for a call
/// already made; a new call of it is denied" (docs/ARCHITECTURE.md, "The gate's rules"). (The
/// TypeScript reference adapter's "its tool source does not offer this tool now" is the same rule
/// for tool sources.)
pub const TOOL_NOT_OFFERED: &str = "{tool} did not run. This agent does not offer {tool} now.";

/// What the model reads when it calls a custom tool that is not loaded while some of the agent's
/// tool components are unavailable (a file in `tools/` that did not load): the tool is likely one
/// of theirs. Rendered by [`tool_unavailable`]. Tollgate wording.
pub const TOOL_UNAVAILABLE: &str = "{tool} did not run. This agent does not offer {tool} now: \
    a tool component of this agent is unavailable, so its tools cannot be called until it is fixed: {components}.";

/// [`TOOL_UNAVAILABLE`] for `tool`, naming each unavailable component with its reason
/// (`(component, reason)`), each reason cut to 300 bytes.
pub fn tool_unavailable<'a>(tool: &str, components: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let each: Vec<String> = components
        .into_iter()
        .map(|(component, reason)| {
            let mut end = reason.len().min(300);
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            let cut = if end < reason.len() { "…" } else { "" };
            format!("`{component}` ({}{cut})", &reason[..end])
        })
        .collect();
    render(TOOL_UNAVAILABLE, tool).replace("{components}", &each.join("; "))
}

/// Denial of a Claude Code tool whose name a custom tool also uses; the segment then fails.
///
/// Tollgate wording for the reference adapters' rule ("Limits"): "If a newer CLI adds a tool whose
/// name a custom tool uses, the hook denies that call and the segment fails with an error naming
/// the collision."
pub const NAME_COLLISION: &str = "{tool} did not run. A custom tool and a Claude Code tool are both \
named {tool}, so Tollgate cannot tell which one this call means.";

/// MCP `tools/call` result for a call that the gate did not permit under its tool use ID.
///
/// Tollgate wording for the reference adapters' rule ("How a turn runs"): "A call without a decision
/// for that ID does not run."
pub const MCP_CALL_NOT_PERMITTED: &str = "{tool} did not run. Tollgate has no permission decision for \
this call.";

/// The first line of a turn-failure note.
///
/// From the reference adapters' wording, "When a turn fails", with the engine's name in the
/// brackets (theirs writes its own engine's name; Tollgate is the engine here). The lines and the last
/// sentence are verbatim.
pub const TURN_FAILURE_NOTE_HEAD: &str = "[Tollgate] The previous turn failed after these tool calls ran:";

/// The last line of a turn-failure note. Verbatim from the seed.
pub const TURN_FAILURE_NOTE_TAIL: &str = "Do not repeat these tool calls unless the user asks again.";

/// The turn-failure note stored as a `user_prompt` for the next turn: one line per call with a
/// final record, `- <tool> <arguments> -> <status>[: <text>]`, arguments written as the seed's
/// example writes them (`{"message": "draft"}`).
///
/// ```
/// use serde_json::json;
/// use tollgate_engine::catalog::ToolKind;
/// use tollgate_engine::record::{Outcome, ToolCallRecord};
/// use tollgate_engine::texts::turn_failure_note;
///
/// let ran = ToolCallRecord::new("toolu_1", "publish", ToolKind::Custom, json!({"message": "draft"}),
///     Outcome::Succeeded { output: "published draft".into() });
/// assert_eq!(turn_failure_note(&[ran]), "[Tollgate] The previous turn failed after these tool calls ran:\n\
///     - publish {\"message\": \"draft\"} -> succeeded: published draft\n\
///     Do not repeat these tool calls unless the user asks again.");
/// ```
pub fn turn_failure_note(records: &[crate::record::ToolCallRecord]) -> String {
    let mut note = String::from(TURN_FAILURE_NOTE_HEAD);
    push_record_lines(&mut note, records);
    note.push('\n');
    note.push_str(TURN_FAILURE_NOTE_TAIL);
    note
}

/// One line per record, each after a line break: `- <tool> <arguments> -> <status>[: <text>]`.
fn push_record_lines(note: &mut String, records: &[crate::record::ToolCallRecord]) {
    use crate::record::Outcome;
    for record in records {
        let detail = match &record.outcome {
            Outcome::Succeeded { output } => Some(output.clone()),
            Outcome::Failed { error } => Some(error.clone()),
            Outcome::Rejected { message } => message.clone().filter(|m| !m.trim().is_empty()),
            Outcome::OutcomeUnknown => None,
        };
        note.push_str(&format!(
            "\n- {} {} -> {}",
            record.tool_name,
            spaced_json(&record.arguments),
            record.outcome.status()
        ));
        if let Some(detail) = detail {
            note.push_str(": ");
            note.push_str(&detail);
        }
    }
}

/// The resolution message of an interrupt closed because its turn was cancelled (`{by}`: who
/// cancelled it). Tollgate wording.
pub const CANCELLED_BEFORE_DECISION: &str = "Not decided: {by} cancelled the turn first.";

/// The longest part of a cancelled turn's request that its note quotes, in characters.
pub const CANCELLED_REQUEST_QUOTED: usize = 2000;

/// The note stored as a `user_prompt` for the turn after a cancelled one (Tollgate wording, in
/// the form of [`turn_failure_note`]): who cancelled it, the request it was answering (each
/// prompt quoted, clipped to [`CANCELLED_REQUEST_QUOTED`] characters), and the tool calls of it
/// that have a record, so the model neither goes on with it nor repeats a write.
///
/// ```
/// use serde_json::json;
/// use tollgate_engine::catalog::ToolKind;
/// use tollgate_engine::record::{Outcome, ToolCallRecord};
/// use tollgate_engine::texts::turn_cancelled_note;
///
/// let ran = ToolCallRecord::new("toolu_1", "record_credit", ToolKind::Custom,
///     json!({"order_id": "7"}), Outcome::OutcomeUnknown);
/// assert_eq!(turn_cancelled_note("alice", &["Credit order 7".into()], &[ran]),
///     "[Tollgate] alice cancelled the previous turn before it finished. Its request was:\n\
///     > Credit order 7\n\
///     These tool calls of it ran:\n\
///     - record_credit {\"order_id\": \"7\"} -> outcome_unknown\n\
///     Do not go on with that request or repeat these tool calls unless the user asks again.");
/// ```
pub fn turn_cancelled_note(
    cancelled_by: &str,
    prompts: &[String],
    records: &[crate::record::ToolCallRecord],
) -> String {
    let mut note = format!("[Tollgate] {cancelled_by} cancelled the previous turn before it finished.");
    if !prompts.is_empty() {
        note.push_str(" Its request was:");
    }
    for prompt in prompts {
        let mut quoted: String = prompt.chars().take(CANCELLED_REQUEST_QUOTED).collect();
        if quoted.len() < prompt.len() {
            quoted.push('…');
        }
        for line in quoted.lines() {
            note.push_str("\n> ");
            note.push_str(line);
        }
    }
    if records.is_empty() {
        note.push_str("\nDo not go on with that request unless the user asks again.");
    } else {
        note.push_str("\nThese tool calls of it ran:");
        push_record_lines(&mut note, records);
        note.push_str(
            "\nDo not go on with that request or repeat these tool calls unless the user asks again.",
        );
    }
    note
}

/// JSON with `, ` and `: ` between tokens (the seed's `json.dumps` form).
fn spaced_json(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Array(items) => format!("[{}]", items.iter().map(spaced_json).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), spaced_json(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// Fills `{tool}` in a template with `tool`.
///
/// ```
/// use tollgate_engine::texts::{render, ONLY_ONE_DEFERRED_CALL};
/// assert_eq!(
///     render(ONLY_ONE_DEFERRED_CALL, "Bash"),
///     "Bash did not run. Only one tool call per reply can run outside this turn, \
///      and another call already does. Call Bash again by itself."
/// );
/// ```
pub fn render(template: &str, tool: &str) -> String {
    template.replace("{tool}", tool)
}

/// What the model reads beside the result of a call whose input an approver edited (the model is
/// told the approver changed the input, and how). Tollgate wording.
pub const INPUT_EDITED: &str = "The approver changed the input from {original} to {edited}.";

/// [`INPUT_EDITED`] for this edit, both inputs as compact JSON.
pub fn input_edited_note(original: &serde_json::Value, edited: &serde_json::Value) -> String {
    INPUT_EDITED.replace("{original}", &original.to_string()).replace("{edited}", &edited.to_string())
}

/// The reason an approval deadline gives when it rejects a call (an expiry
/// rejects with a text the model reads): the model reads it on the rejection path, after
/// [`REJECTED_WITH_MESSAGE`]'s prefix. Tollgate wording.
pub const APPROVAL_EXPIRED: &str = "No one decided on this call within {waited}, so its approval deadline \
rejected it. Do not retry it unless the user asks again.";

/// [`APPROVAL_EXPIRED`] after `secs` seconds, and after an escalation to `escalated_to` when there
/// was one.
pub fn approval_expired(secs: u64, escalated_to: &[String]) -> String {
    let mut waited = format!("{secs} second{}", if secs == 1 { "" } else { "s" });
    if !escalated_to.is_empty() {
        let groups: Vec<String> = escalated_to.iter().map(|g| format!("`{g}`")).collect();
        waited.push_str(&format!(" (after it was escalated to {})", groups.join(", ")));
    }
    APPROVAL_EXPIRED.replace("{waited}", &waited)
}

/// The rejection text the model sees, with or without the reviewer's message.
///
/// An empty or all-blank message counts as none.
pub fn rejection(message: Option<&str>) -> String {
    match message.map(str::trim) {
        Some(message) if !message.is_empty() => REJECTED_WITH_MESSAGE.replace("{message}", message),
        _ => REJECTED_WITHOUT_MESSAGE.to_owned(),
    }
}

/// [`IMAGE_NOT_LOADED`] for the image `digest`.
pub fn image_not_loaded(digest: &str) -> String {
    IMAGE_NOT_LOADED.replace("{digest}", digest)
}

/// [`CONTENT_OMITTED`] for content of type `kind`.
pub fn content_omitted(kind: &str) -> String {
    CONTENT_OMITTED.replace("{kind}", kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_text_is_the_seed_text_with_the_tool_name_twice() {
        assert_eq!(
            render(ONLY_ONE_DEFERRED_CALL, "mcp__tools__create_refund"),
            "mcp__tools__create_refund did not run. Only one tool call per reply can run outside this \
             turn, and another call already does. Call mcp__tools__create_refund again by itself."
        );
    }

    #[test]
    fn an_expired_approval_says_how_long_it_waited_and_reaches_the_model_as_a_rejection() {
        let text = approval_expired(2, &[]);
        assert_eq!(
            text,
            "No one decided on this call within 2 seconds, so its approval deadline rejected it. \
             Do not retry it unless the user asks again."
        );
        assert!(rejection(Some(&text)).starts_with("The user rejected this call: No one decided"));
        assert!(
            approval_expired(1, &["oncall".into()]).contains("1 second (after it was escalated to `oncall`)")
        );
    }

    #[test]
    fn a_rejection_with_a_message_quotes_it_after_the_seed_prefix() {
        assert_eq!(rejection(Some("not this order")), "The user rejected this call: not this order");
    }

    #[test]
    fn a_rejection_with_a_blank_message_uses_the_text_without_message() {
        assert_eq!(rejection(Some("  ")), "The user rejected this call.");
        assert_eq!(rejection(None), "The user rejected this call.");
    }

    #[test]
    fn an_image_not_loaded_is_named_by_its_digest_on_a_line_of_its_own() {
        assert_eq!(image_not_loaded("sha256:ab"), "\n[image sha256:ab of this result could not be loaded]");
    }

    #[test]
    fn an_unavailable_component_is_named_with_its_reason_cut_short() {
        let long = "x".repeat(400);
        let text = tool_unavailable("refund", [("payments", "not WebAssembly"), ("broken", long.as_str())]);
        assert!(text.starts_with("refund did not run."), "{text}");
        assert!(text.contains("`payments` (not WebAssembly); `broken` (xxx"), "{text}");
        assert!(text.ends_with("x…)."), "{text}");
    }

    #[test]
    fn every_tool_template_names_the_tool() {
        for template in [
            ONLY_ONE_DEFERRED_CALL,
            CALL_FROM_MAIN_CONVERSATION,
            OUTCOME_UNKNOWN,
            ALREADY_DECIDED,
            RECORDED_UNDER_THIS_ID,
            TOOL_NOT_OFFERED,
            NAME_COLLISION,
            MCP_CALL_NOT_PERMITTED,
        ] {
            let text = render(template, "lookup_order");
            assert!(text.starts_with("lookup_order") || text.contains(" lookup_order "), "{text}");
            assert!(!text.contains('{'), "unfilled placeholder in {text}");
        }
    }
}
