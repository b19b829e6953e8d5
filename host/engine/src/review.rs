//! The review of a call that waits for approval: what the options factory tells the person who
//! decides it ([`Review`]: notes and a risk level), what the factory is shown to judge it
//! ([`PendingCall`] and the session's [`recent_tool_records`]), and how many approvers the answer
//! asks for ([`approvals_required`]).
//!
//! The Worker asks a factory that exports `review` once, when the call's interrupt opens, and
//! stamps the answer into the [`crate::approval::ApprovalRequest`] ([`with_review`]). A review
//! never decides: a failed one (an error, a trap, the time limit) leaves a note saying so and no
//! risk level ([`Review::failed`]), and the call waits for a person as it would without one.
//!
//! Pure: the caller reads the transcript and runs the factory.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::session::{CallEntry, CallState, Transition};

/// The most notes kept of one review.
pub const MAX_NOTES: usize = 10;
/// The most characters kept of one note.
pub const MAX_NOTE_CHARS: usize = 500;
/// The most tool records a review is shown.
pub const MAX_RECORDS: usize = 20;
/// The most characters of one record's input, output or error a review is shown; a longer text is
/// cut there (and ends with `…`).
pub const MAX_RECORD_TEXT_CHARS: usize = 8 * 1024;

/// How risky a reviewed call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// Nothing unusual.
    Low,
    /// Worth a closer look.
    Medium,
    /// Likely wrong or harmful; the tool policy's `high_risk_approvers` may ask for more approvers.
    High,
}

impl Risk {
    /// `low`, `medium` or `high`.
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }
}

/// What the options factory's review tells the approver about one call.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Review {
    /// The risk; `null` when the review failed (unknown).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub risk: Option<Risk>,
    /// Notes for the approver, plain text (to be escaped on a page), most important first.
    pub notes: Vec<String>,
}

impl Review {
    /// A review's answer, bounded: at most [`MAX_NOTES`] notes of at most [`MAX_NOTE_CHARS`]
    /// characters each, blank ones dropped.
    pub fn answered(risk: Risk, notes: Vec<String>) -> Self {
        let notes = notes
            .into_iter()
            .map(|note| cut(note.trim(), MAX_NOTE_CHARS))
            .filter(|note| !note.is_empty())
            .take(MAX_NOTES)
            .collect();
        Review { risk: Some(risk), notes }
    }

    /// The review could not answer (`why`: the factory's error, a trap, the time limit): the risk
    /// is unknown, and the one note says so.
    pub fn failed(why: &str) -> Self {
        Review { risk: None, notes: vec![cut(&format!("The review failed: {why}"), MAX_NOTE_CHARS)] }
    }
}

/// Where one of the session's earlier tool calls ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolStatus {
    /// It ran and returned its output.
    Succeeded,
    /// It failed (the model got an error result).
    Failed,
    /// A person rejected it.
    Rejected,
    /// It may or may not have happened.
    OutcomeUnknown,
}

/// One of the session's earlier tool calls that finished, as a review is shown it.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolRecord {
    /// A custom tool by its own name, a CLI tool by its CLI name.
    pub tool_name: String,
    /// The model's tool use ID.
    pub tool_call_id: String,
    /// Its arguments, JSON text.
    pub input: String,
    /// Where it ended.
    pub status: ToolStatus,
    /// Its output's text, when it succeeded.
    pub output: Option<String>,
    /// Its error, when it failed or was rejected.
    pub error: Option<String>,
}

/// The call a review is about.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingCall {
    /// The session.
    pub session_id: String,
    /// The turn that made it.
    pub turn_id: String,
    /// The model's tool use ID.
    pub tool_call_id: String,
    /// A custom tool by its own name, a CLI tool by its CLI name.
    pub tool_name: String,
    /// Its arguments, JSON text.
    pub arguments: String,
    /// Its effect (`non_idempotent_write`, …).
    pub effect: String,
}

/// The session's last [`MAX_RECORDS`] finished tool calls, oldest first, from its transcript
/// `entries` (CLI transcript entries as JSON text, oldest first): each `tool_use` of an assistant
/// entry that a later `tool_result` answered. `tool_server` is the host's MCP server name: its
/// tools (`mcp__<tool_server>__lookup_order`) are named by their own name. A call `calls` holds a
/// final state for (a deferred call: rejected, outcome unknown) takes its status from there.
/// Entries that are not JSON, subagents' entries and calls without a result are skipped; a call
/// whose entries appear twice counts once.
pub fn recent_tool_records<'a>(
    entries: impl DoubleEndedIterator<Item = &'a str>,
    calls: &[CallEntry],
    tool_server: &str,
) -> Vec<ToolRecord> {
    let prefix = format!("mcp__{tool_server}__");
    // Newest first: results wait for their call, met further back.
    let mut results: Vec<(String, bool, String)> = Vec::new();
    let mut records = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for entry in entries.rev() {
        if records.len() == MAX_RECORDS {
            break;
        }
        if !entry.contains("\"tool_use") && !entry.contains("\"tool_result") {
            continue;
        }
        let Ok(entry) = serde_json::from_str::<Value>(entry) else { continue };
        if entry.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        let Some(blocks) = entry.pointer("/message/content").and_then(Value::as_array) else { continue };
        let mut found = Vec::new();
        for block in blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("tool_result") => {
                    let Some(id) = block.get("tool_use_id").and_then(Value::as_str) else { continue };
                    let is_error = block.get("is_error").and_then(Value::as_bool) == Some(true);
                    results.push((id.to_owned(), is_error, result_text(block.get("content"))));
                }
                Some("tool_use") => {
                    let (Some(id), Some(name)) =
                        (block.get("id").and_then(Value::as_str), block.get("name").and_then(Value::as_str))
                    else {
                        continue;
                    };
                    let Some(at) = results.iter().position(|(result_id, ..)| result_id == id) else {
                        continue;
                    };
                    if !seen.insert(id.to_owned()) {
                        continue;
                    }
                    let (_, is_error, text) = results.swap_remove(at);
                    let name = name.strip_prefix(&prefix).unwrap_or(name);
                    let input = block.get("input").map_or_else(|| "{}".to_owned(), Value::to_string);
                    found.push(record(id, name, input, is_error, text, calls));
                }
                _ => {}
            }
        }
        // A reply's calls in their order, after the newer replies' (reversed below).
        records.extend(found.into_iter().rev());
    }
    records.truncate(MAX_RECORDS);
    records.reverse();
    records
}

fn record(
    id: &str,
    name: &str,
    input: String,
    is_error: bool,
    text: String,
    calls: &[CallEntry],
) -> ToolRecord {
    let stored = calls.iter().find(|call| call.tool_call_id == id).map(|call| &call.state);
    let (status, output, error) = match stored {
        Some(CallState::Rejected { message }) => (ToolStatus::Rejected, None, message.clone()),
        Some(CallState::OutcomeUnknown) => (ToolStatus::OutcomeUnknown, None, None),
        _ if is_error => (ToolStatus::Failed, None, Some(text)),
        _ => (ToolStatus::Succeeded, Some(text), None),
    };
    let short = |text: Option<String>| text.map(|t| cut(&t, MAX_RECORD_TEXT_CHARS));
    ToolRecord {
        tool_name: name.to_owned(),
        tool_call_id: id.to_owned(),
        input: cut(&input, MAX_RECORD_TEXT_CHARS),
        status,
        output: short(output),
        error: short(error),
    }
}

/// A `tool_result`'s content as text: a string as it is, text blocks joined by newlines.
fn result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|block| block.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// `text` cut to `max` characters, ending in `…` when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some(_) => {
            let end = text.char_indices().nth(max - 1).map_or(text.len(), |(at, _)| at);
            format!("{}…", &text[..end])
        }
    }
}

/// How many different approvers a call needs: `high_risk_approvers` (the tool policy's) when the
/// review found it `high` risk, else one.
pub fn approvals_required(review: Option<&Review>, high_risk_approvers: Option<u32>) -> u32 {
    match (review.and_then(|r| r.risk), high_risk_approvers) {
        (Some(Risk::High), Some(n)) => n.max(1),
        _ => 1,
    }
}

/// Stamps each approval interrupt the transition opens with its review (`review` of its id and
/// request; `None`: not reviewed) and, for a high risk, the approvers its tool's
/// `high_risk_approvers` asks for (`approvals_required`, omitted when one).
pub fn with_review(
    t: &mut Transition,
    mut review: impl FnMut(&str, &crate::approval::ApprovalRequest) -> Option<Review>,
    high_risk_approvers: impl Fn(&str) -> Option<u32>,
) {
    t.stamp_requests_by_id(|interrupt_id, request| {
        let Some(found) = review(interrupt_id, request) else { return false };
        let required = approvals_required(Some(&found), high_risk_approvers(&request.tool_name));
        request.approvals_required = (required > 1).then_some(required);
        request.review = Some(found);
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assistant(blocks: Value) -> String {
        json!({"type": "assistant", "message": {"role": "assistant", "content": blocks}}).to_string()
    }

    fn user(blocks: Value) -> String {
        json!({"type": "user", "message": {"role": "user", "content": blocks}}).to_string()
    }

    fn lookup(id: &str, order: &str) -> (String, String) {
        (
            assistant(
                json!([{"type": "tool_use", "id": id, "name": "mcp__tools__lookup_order", "input": {"order_id": order}}]),
            ),
            user(
                json!([{"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": format!("{{\"order_id\":\"{order}\"}}")}]}]),
            ),
        )
    }

    #[test]
    fn records_pair_each_call_with_its_result_oldest_first_and_name_custom_tools_bare() {
        let (use1, result1) = lookup("toolu_1", "9");
        let bash = assistant(
            json!([{"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "x"}}]),
        );
        let failed = user(
            json!([{"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such file", "is_error": true}]),
        );
        let pending = assistant(
            json!([{"type": "tool_use", "id": "toolu_3", "name": "mcp__tools__create_refund", "input": {}}]),
        );
        // The lookup's entries twice (a stored transcript and the turn's entries that overlap).
        let entries = [use1.as_str(), &result1, "not json", &use1, &result1, &bash, &failed, &pending];
        let records = recent_tool_records(entries.into_iter(), &[], "tools");
        assert_eq!(records.len(), 2, "unfinished and repeated calls are not records: {records:?}");
        assert_eq!(
            (records[0].tool_name.as_str(), records[0].status, records[0].output.as_deref()),
            ("lookup_order", ToolStatus::Succeeded, Some(r#"{"order_id":"9"}"#))
        );
        assert_eq!(records[0].input, r#"{"order_id":"9"}"#);
        assert_eq!(
            (records[1].tool_name.as_str(), records[1].status, records[1].error.as_deref()),
            ("Bash", ToolStatus::Failed, Some("no such file"))
        );
    }

    #[test]
    fn records_are_bounded_in_count_and_size() {
        let mut entries = Vec::new();
        for n in 0..30 {
            let (call, result) = lookup(&format!("toolu_{n}"), &n.to_string());
            entries.push(call);
            entries.push(result);
        }
        let big = "x".repeat(MAX_RECORD_TEXT_CHARS * 2);
        entries.push(assistant(json!([{"type": "tool_use", "id": "big", "name": "Read", "input": {}}])));
        entries.push(user(json!([{"type": "tool_result", "tool_use_id": "big", "content": big}])));
        let records = recent_tool_records(entries.iter().map(String::as_str), &[], "tools");
        assert_eq!(records.len(), MAX_RECORDS);
        assert_eq!(records.first().unwrap().tool_call_id, "toolu_11", "the newest 20, oldest first");
        let output = records.last().unwrap().output.as_deref().unwrap();
        assert_eq!(output.chars().count(), MAX_RECORD_TEXT_CHARS);
        assert!(output.ends_with('…'));
    }

    #[test]
    fn a_failed_review_has_no_risk_and_a_note_and_answers_are_bounded() {
        let failed = Review::failed("the factory trapped");
        assert_eq!(
            (failed.risk, failed.notes.as_slice()),
            (None, &["The review failed: the factory trapped".to_owned()][..])
        );
        let flood = Review::answered(Risk::High, vec!["x".repeat(2000); 50]);
        assert_eq!(flood.notes.len(), MAX_NOTES);
        assert!(flood.notes.iter().all(|n| n.chars().count() == MAX_NOTE_CHARS));
        assert_eq!(
            serde_json::to_value(&failed).unwrap(),
            json!({"risk": null, "notes": ["The review failed: the factory trapped"]})
        );
    }

    #[test]
    fn only_a_high_risk_asks_for_the_policys_approvers() {
        let high = Review::answered(Risk::High, vec![]);
        let medium = Review::answered(Risk::Medium, vec![]);
        assert_eq!(approvals_required(Some(&high), Some(2)), 2);
        assert_eq!(approvals_required(Some(&high), None), 1);
        assert_eq!(approvals_required(Some(&medium), Some(2)), 1);
        assert_eq!(approvals_required(Some(&Review::failed("x")), Some(2)), 1);
        assert_eq!(approvals_required(None, Some(3)), 1);
    }
}
