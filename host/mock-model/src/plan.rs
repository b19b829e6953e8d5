//! Choosing the answer to a `POST /v1/messages` request from its body: the scripted model itself.
//!
//! This module owns the rules that turn a Messages API request body into a [`Plan`]: which prompt holds
//! the script, which stage of a `call` script the conversation is in, and the texts of the answers. It does
//! no I/O (the server waits at the gates and writes the reply), so a fake CLI can reuse
//! it. Read [`plan`] first.
//!
//! # Which text is the script
//!
//! The script is the **last text block of the conversation's last real prompt**. A real prompt is a `user`
//! text block that the CLI did not inject: blocks starting with `<system-reminder>`, the resume text
//! `Continue from where you left off.`, the CLI's `[Your previous response had no visible output…]`
//! nudges and the `[Image: source: <path>]` text it adds after a prompt's image are skipped. `role: "system"` entries and tool results are never prompts.
//!
//! # Stages of a `call` script
//!
//! Everything after the script's prompt tells the stage:
//!
//! 1. No tool call of this script yet: answer with every call as `tool_use` blocks (`stop_reason:
//!    "tool_use"`), after the modifiers written before the `call`.
//! 2. A call that vanished from the conversation, or whose latest result is a refusal saying to call it
//!    "again by itself" (the gate's text for a second deferrable call), is called again, alone, with the
//!    same input (or its `again` input); at most [`MAX_ATTEMPTS`] times per call. So a reply asking for
//!    three refunds, of which the gate defers the first and refuses the others, is followed by one
//!    repeat per refused refund, in script order, once the first has its result.
//! 3. Otherwise, after the modifiers written after the `call`, answer one text with a line per call:
//!    `called <tool>: <result text>`, or `called <tool> (error): <result text>` for an error result.
//!
//! Tool use IDs are `toolu_mock_<nonce hex>_<call index>`; the index is how a later request's tool results
//! are matched to the script's calls, whatever the CLI or a hook did to the input.
//!
//! # Other answers
//!
//! `say <text>` → `said: <text>`. `recall` → `recalled:` and one line per earlier item, oldest first:
//! `- prompt: <text>` or `- result <tool name>: <text>` (`recalled: nothing` when there is none).
//! `see` → `saw: ` and, joined by `; `, one description per image block of the user message that
//! holds the script, in order (`saw: no image` when it has none). An image is described as
//! [`describe_image`] says, here and where a quoted tool result holds one. A script
//! of modifiers only → `ok`. A prompt that is not a script → `mock: cannot read the script …`, and a
//! request without a prompt → `mock: the request has no prompt`. `fail` → [`Answer::Error`].
//!
//! The CLI's own prompts: a stop hook's feedback (`Stop hook feedback:\n<reason>`, what a blocking
//! `Stop` or `SubagentStop` hook makes the model read) is read as a prompt whose script is the
//! reason, so a test's hook can say what the model does next. The request that asks for a
//! compaction's summary (its prompt starts with [`SUMMARY_REQUEST`]) is answered with
//! `summary:` and the lines `recall` would give for the conversation before it.

use serde_json::Value;

use crate::reply::{AssistantReply, ContentBlock, Reply, StopReason};
use crate::script::{self, Action, Modifier, Script, ScriptedCall};

/// How often one scripted call is attempted before the final answer reports its refusal.
pub const MAX_ATTEMPTS: usize = 3;

/// How the CLI's request for a compaction's summary starts (CLI 2.1.328).
pub const SUMMARY_REQUEST: &str = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.";

/// How the CLI words the prompt a blocking stop hook's reason becomes (`Stop hook feedback:\n…`).
const STOP_FEEDBACK: &str = " hook feedback:\n";

/// What to do with one request: wait at these gates in order, then send the reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Gates to pass, in order, before replying.
    pub gates: Vec<String>,
    /// The reply.
    pub reply: Answer,
    /// How a streamed reply's text is paced (`drip`, `hold`).
    pub pace: Pace,
    /// The input tokens the reply's usage reports (`tokens`); `None`: an estimate from the request.
    pub input_tokens: Option<u64>,
}

/// How a streamed reply's text is cut and paced: the default is the real API's shape at full
/// speed (two deltas per block, no wait).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pace {
    /// `drip`: text deltas per text block and the wait before each later one.
    pub drip: Option<(u32, std::time::Duration)>,
    /// `hold`: the gate the reply parks at halfway through its first text block.
    pub hold: Option<String>,
}

/// The reply to a model call: a message, or an HTTP error (`fail`).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A model message.
    Message(AssistantReply),
    /// An HTTP error with an Anthropic error body.
    Error {
        /// The HTTP status.
        status: u16,
    },
}

impl Answer {
    /// The message, when the answer is one.
    pub fn message(&self) -> Option<&AssistantReply> {
        match self {
            Answer::Message(message) => Some(message),
            Answer::Error { .. } => None,
        }
    }
}

impl From<Answer> for Reply {
    fn from(answer: Answer) -> Self {
        match answer {
            Answer::Message(message) => Reply::Message(message),
            Answer::Error { status } => Reply::Error { status },
        }
    }
}

/// Chooses the answer to a Messages API request body. `nonce` makes this reply's tool use IDs unique.
pub fn plan(body: &Value, nonce: u64) -> Plan {
    plan_with_scenarios(body, nonce, &Scenarios::new())
}

/// Plain prompts that stand for a script (`Refund order 7` → `call lookup_order … && call
/// create_refund …`), so a demo can send what a user would type. Keys are matched trimmed and
/// case-insensitively against the whole prompt.
pub type Scenarios = std::collections::BTreeMap<String, String>;

/// [`plan`], reading a prompt found in `scenarios` as its script.
pub fn plan_with_scenarios(body: &Value, nonce: u64, scenarios: &Scenarios) -> Plan {
    let events = events(body);
    let last_prompt = events.iter().enumerate().rev().find_map(|(at, event)| match event {
        Event::Prompt(text) => Some((at, text)),
        _ => None,
    });
    let Some((prompt_at, prompt)) = last_prompt else {
        return Plan::answer(AssistantReply::text("mock: the request has no prompt"));
    };
    if prompt.starts_with(SUMMARY_REQUEST) {
        let recalled = recall(&events[..prompt_at]);
        let summary = recalled.strip_prefix("recalled:").unwrap_or(&recalled);
        return Plan::answer(AssistantReply::text(format!("summary:{summary}")));
    }
    let prompt = scenarios
        .iter()
        .find(|(said, _)| said.trim().eq_ignore_ascii_case(prompt.trim()))
        .map_or(&prompt[..], |(_, script)| script.as_str());
    let script = match script::parse(prompt) {
        Ok(script) => script,
        Err(err) => {
            return Plan::answer(AssistantReply::text(format!(
                "mock: cannot read the script {prompt:?}: {err}"
            )));
        }
    };
    let (before, after) = (&events[..prompt_at], &events[prompt_at + 1..]);
    let Script { before: modifiers_before, action, after: modifiers_after } = script;
    let all_modifiers = || modifiers_before.iter().chain(&modifiers_after);
    match action {
        Action::Say(text) => Plan::with(all_modifiers(), AssistantReply::text(format!("said: {text}"))),
        Action::Recall => Plan::with(all_modifiers(), AssistantReply::text(recall(before))),
        Action::See => Plan::with(all_modifiers(), AssistantReply::text(see(body))),
        Action::None => Plan::with(all_modifiers(), AssistantReply::text("ok")),
        Action::Call(calls) => {
            let offered = offered_tools(body);
            match call_stage(&calls, after) {
                CallStage::First => {
                    let content = calls
                        .iter()
                        .enumerate()
                        .map(|(index, call)| tool_use(call, index, nonce, &offered))
                        .collect();
                    Plan::with(
                        &modifiers_before,
                        AssistantReply { content, stop_reason: StopReason::ToolUse },
                    )
                }
                CallStage::Again(index) => {
                    // A repeat, as a real model would make it: alone, with the same input (or
                    // the script's `again` input).
                    let call = &calls[index];
                    let repeat = ScriptedCall {
                        input: call.again.clone().unwrap_or_else(|| call.input.clone()),
                        ..call.clone()
                    };
                    Plan::answer(AssistantReply {
                        content: vec![tool_use(&repeat, index, nonce, &offered)],
                        stop_reason: StopReason::ToolUse,
                    })
                }
                CallStage::Final(results) => {
                    let lines: Vec<String> = calls
                        .iter()
                        .zip(results)
                        .map(|(call, result)| match result {
                            Some(ToolResult { text, is_error: false }) => {
                                format!("called {}: {text}", call.tool)
                            }
                            Some(ToolResult { text, is_error: true }) => {
                                format!("called {} (error): {text}", call.tool)
                            }
                            None => format!("called {}: (no result)", call.tool),
                        })
                        .collect();
                    Plan::with(&modifiers_after, AssistantReply::text(lines.join("\n")))
                }
            }
        }
    }
}

impl Plan {
    fn answer(message: AssistantReply) -> Self {
        Plan { gates: Vec::new(), reply: Answer::Message(message), pace: Pace::default(), input_tokens: None }
    }

    /// Applies modifiers in order: pauses collect gates until a `fail` replaces the answer; each
    /// `think` adds a thinking block before the message's own blocks.
    fn with<'a>(modifiers: impl IntoIterator<Item = &'a Modifier>, mut message: AssistantReply) -> Self {
        let mut gates = Vec::new();
        let mut pace = Pace::default();
        let mut input_tokens = None;
        let mut thoughts = 0;
        for modifier in modifiers {
            match modifier {
                Modifier::Think(thinking) => {
                    let signature = format!("mock-signature-{}", thinking.len());
                    let block = ContentBlock::Thinking { thinking: thinking.clone(), signature };
                    message.content.insert(thoughts, block);
                    thoughts += 1;
                }
                Modifier::Pause(gate) => gates.push(gate.clone()),
                Modifier::Fail(status) => {
                    return Plan { gates, reply: Answer::Error { status: *status }, pace, input_tokens };
                }
                Modifier::Tokens(count) => input_tokens = Some(*count),
                Modifier::Drip { deltas, every_ms } => {
                    pace.drip = Some((*deltas, std::time::Duration::from_millis(*every_ms)));
                }
                Modifier::Hold(gate) => pace.hold = Some(gate.clone()),
            }
        }
        Plan { gates, reply: Answer::Message(message), pace, input_tokens }
    }
}

/// The conversation, flattened to what the script rules look at.
#[derive(Debug)]
enum Event<'a> {
    Prompt(String),
    ToolUse { id: &'a str, name: &'a str },
    ToolResult { id: &'a str, result: ToolResult },
}

#[derive(Debug, Clone)]
struct ToolResult {
    text: String,
    is_error: bool,
}

fn events(body: &Value) -> Vec<Event<'_>> {
    let mut events = Vec::new();
    let Some(messages) = body.get("messages").and_then(Value::as_array) else { return events };
    for message in messages {
        let role = message.get("role").and_then(Value::as_str).unwrap_or_default();
        match message.get("content") {
            Some(Value::String(text)) if role == "user" => events.extend(prompt_of(text).map(Event::Prompt)),
            Some(Value::Array(blocks)) => {
                for block in blocks {
                    match (role, block.get("type").and_then(Value::as_str)) {
                        ("user", Some("text")) => {
                            let text = block.get("text").and_then(Value::as_str).unwrap_or_default();
                            events.extend(prompt_of(text).map(Event::Prompt));
                        }
                        ("user", Some("tool_result")) => events.push(Event::ToolResult {
                            id: str_field(block, "tool_use_id"),
                            result: ToolResult {
                                text: result_text(block.get("content")),
                                is_error: block.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                            },
                        }),
                        ("assistant", Some("tool_use")) => events.push(Event::ToolUse {
                            id: str_field(block, "id"),
                            name: str_field(block, "name"),
                        }),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    events
}

fn str_field<'a>(block: &'a Value, key: &str) -> &'a str {
    block.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A user text as a prompt: itself, or a stop hook's reason; `None` for the texts the CLI injects.
fn prompt_of(text: &str) -> Option<String> {
    if !is_real_prompt(text) {
        return None;
    }
    match text.split_once(STOP_FEEDBACK) {
        Some((hook, reason)) if !hook.is_empty() && hook.bytes().all(|b| b.is_ascii_alphabetic()) => {
            Some(reason.to_owned())
        }
        _ => Some(text.to_owned()),
    }
}

/// False for the texts the CLI injects into user messages: reminders, the resume text, its
/// nudges, and the `[Image: source: <path>]` it adds after each image of a prompt.
fn is_real_prompt(text: &str) -> bool {
    let text = text.trim();
    !(text.starts_with("<system-reminder>")
        || text == "Continue from where you left off."
        || text.starts_with("[Your previous response had no visible output")
        || text.starts_with("[Image: source: "))
}

/// A tool result's `content`: a string, or blocks whose texts are joined with newlines.
/// A tool result's text as the model would read it, without the `<system-reminder>` blocks the
/// CLI appends to results (a real model does not quote them back).
fn result_text(content: Option<&Value>) -> String {
    let text = result_text_with_reminders(content);
    match text.find("<system-reminder>") {
        Some(at) => text[..at].trim_end().to_owned(),
        None => text,
    }
}

fn result_text_with_reminders(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => {
            let parts: Vec<String> = blocks
                .iter()
                .map(|block| match block.get("type").and_then(Value::as_str) {
                    Some("text") => str_field(block, "text").to_owned(),
                    Some("image") => format!("[image {}]", describe_image(block)),
                    Some(other) => format!("[{other}]"),
                    None => "[?]".to_owned(),
                })
                .collect();
            parts.join("\n")
        }
        _ => String::new(),
    }
}

fn recall(before: &[Event<'_>]) -> String {
    let mut lines = Vec::new();
    for event in before {
        match event {
            Event::Prompt(text) => lines.push(format!("- prompt: {text}")),
            Event::ToolResult { id, result } => {
                let name = before
                    .iter()
                    .find_map(|event| match event {
                        Event::ToolUse { id: use_id, name } if use_id == id => Some(*name),
                        _ => None,
                    })
                    .unwrap_or("?");
                lines.push(format!("- result {name}: {}", result.text));
            }
            Event::ToolUse { .. } => {}
        }
    }
    if lines.is_empty() { "recalled: nothing".to_owned() } else { format!("recalled:\n{}", lines.join("\n")) }
}

/// `see`: the images of the last user message that holds a real prompt.
fn see(body: &Value) -> String {
    let messages = body.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let holds_prompt = |message: &&Value| {
        message.get("role").and_then(Value::as_str) == Some("user")
            && match message.get("content") {
                Some(Value::String(text)) => is_real_prompt(text),
                Some(Value::Array(blocks)) => blocks.iter().any(|block| {
                    block.get("type").and_then(Value::as_str) == Some("text")
                        && is_real_prompt(str_field(block, "text"))
                }),
                _ => false,
            }
    };
    let images: Vec<String> = messages
        .iter()
        .rev()
        .find(holds_prompt)
        .and_then(|message| message.get("content").and_then(Value::as_array))
        .into_iter()
        .flatten()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("image"))
        .map(describe_image)
        .collect();
    if images.is_empty() { "saw: no image".to_owned() } else { format!("saw: {}", images.join("; ")) }
}

/// An image block as `see` and quoted results describe it: `<media type> <n> bytes sha256:<hex>`
/// of its decoded base64 data, so a test can check the model got the very bytes it sent; `<media
/// type> (unreadable base64)` or `(source <type>)` otherwise.
pub fn describe_image(block: &Value) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let source = block.get("source").unwrap_or(&Value::Null);
    let media_type = str_field(source, "media_type");
    match str_field(source, "type") {
        "base64" => match base64::engine::general_purpose::STANDARD.decode(str_field(source, "data")) {
            Ok(bytes) => {
                let digest = sha2::Sha256::digest(&bytes);
                let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
                format!("{media_type} {} bytes sha256:{hex}", bytes.len())
            }
            Err(_) => format!("{media_type} (unreadable base64)"),
        },
        other => format!("(source {other})"),
    }
}

enum CallStage {
    First,
    Again(usize),
    /// The latest result of each call, in script order.
    Final(Vec<Option<ToolResult>>),
}

fn call_stage(calls: &[ScriptedCall], after: &[Event<'_>]) -> CallStage {
    let mut attempts = vec![0usize; calls.len()];
    let mut latest: Vec<Option<ToolResult>> = vec![None; calls.len()];
    let index_of = |id: &str| call_index(id).filter(|index| *index < calls.len());
    for event in after {
        match event {
            Event::ToolUse { id, .. } => {
                if let Some(index) = index_of(id) {
                    attempts[index] += 1;
                }
            }
            Event::ToolResult { id, result } => {
                if let Some(index) = index_of(id) {
                    latest[index] = Some(result.clone());
                }
            }
            Event::Prompt(_) => {}
        }
    }
    if attempts.iter().all(|count| *count == 0) {
        return CallStage::First;
    }
    let again = (0..calls.len()).find(|&index| {
        let refused = latest[index].as_ref().is_some_and(is_refusal);
        attempts[index] == 0 || (refused && attempts[index] < MAX_ATTEMPTS)
    });
    match again {
        Some(index) => CallStage::Again(index),
        None => CallStage::Final(latest),
    }
}

/// The gate's answer to a second deferrable call in one reply ("… Call <tool> again by itself.").
fn is_refusal(result: &ToolResult) -> bool {
    result.is_error && result.text.contains("again by itself")
}

fn tool_use_id(nonce: u64, index: usize) -> String {
    format!("toolu_mock_{nonce:012x}_{index}")
}

/// The call index of a tool use ID this module made.
fn call_index(id: &str) -> Option<usize> {
    let rest = id.strip_prefix("toolu_mock_")?;
    let (_, index) = rest.rsplit_once('_')?;
    index.parse().ok()
}

fn tool_use(call: &ScriptedCall, index: usize, nonce: u64, offered: &[&str]) -> ContentBlock {
    ContentBlock::ToolUse {
        id: tool_use_id(nonce, index),
        name: resolve_tool_name(&call.tool, offered),
        input: call.input.clone(),
    }
}

fn offered_tools(body: &Value) -> Vec<&str> {
    body.get("tools")
        .and_then(Value::as_array)
        .map(|tools| tools.iter().filter_map(|tool| tool.get("name").and_then(Value::as_str)).collect())
        .unwrap_or_default()
}

/// `lookup_order` → `mcp__tools__lookup_order` when the request offers that and no `lookup_order`.
fn resolve_tool_name(wanted: &str, offered: &[&str]) -> String {
    if offered.contains(&wanted) {
        return wanted.to_owned();
    }
    let mut mcp = offered.iter().filter(|name| {
        name.strip_prefix("mcp__")
            .and_then(|rest| rest.split_once("__"))
            .is_some_and(|(_server, tool)| tool == wanted)
    });
    match (mcp.next(), mcp.next()) {
        (Some(only), None) => (*only).to_owned(),
        _ => wanted.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const REMINDER: &str = "<system-reminder>\nAttribution for git commits…</system-reminder>";

    /// A request body shaped like the CLI's: reminder block, then the prompt, then a system entry.
    fn request(prompt: &str, tail: Vec<Value>) -> Value {
        let mut messages = vec![
            json!({"role": "user", "content": [{"type": "text", "text": REMINDER}, {"type": "text", "text": prompt}]}),
            json!({"role": "system", "content": "# Environment\n…"}),
        ];
        messages.extend(tail);
        json!({
            "model": "claude-opus-5-5",
            "messages": messages,
            "tools": [{"name": "Read"}, {"name": "mcp__tools__lookup_order"}, {"name": "mcp__tools__create_refund"}],
            "stream": true,
        })
    }

    fn text_of(plan: &Plan) -> String {
        plan.reply.message().expect("a message").joined_text()
    }

    fn assistant_calls(ids_names: &[(&str, &str)]) -> Value {
        let content: Vec<Value> = ids_names
            .iter()
            .map(|(id, name)| json!({"type": "tool_use", "id": id, "name": name, "input": {}}))
            .collect();
        json!({"role": "assistant", "content": content})
    }

    fn results(items: &[(&str, &str, bool)]) -> Value {
        let mut content: Vec<Value> = items
            .iter()
            .map(|(id, text, is_error)| {
                json!({"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": text}], "is_error": is_error})
            })
            .collect();
        content.push(json!({"type": "text", "text": "Continue from where you left off."}));
        json!({"role": "user", "content": content})
    }

    #[test]
    fn a_quoted_result_leaves_out_the_clis_system_reminders() {
        let tail = vec![
            assistant_calls(&[("toolu_mock_0000000000ab_0", "a")]),
            results(&[(
                "toolu_mock_0000000000ab_0",
                "r_1\n\n<system-reminder>\nUSD budget\n</system-reminder>",
                false,
            )]),
        ];
        assert_eq!(text_of(&plan(&request("call a", tail), 2)), "called a: r_1");
    }

    #[test]
    fn a_scenario_prompt_is_answered_with_its_script() {
        let scenarios = Scenarios::from([("Refund order 7".to_owned(), "say refunding".to_owned())]);
        let plan = plan_with_scenarios(&request("refund order 7 ", vec![]), 1, &scenarios);
        assert_eq!(text_of(&plan), "said: refunding");
    }

    #[test]
    fn say_answers_said_and_ends_the_turn() {
        let plan = plan(&request("say hello from mock", vec![]), 1);
        assert_eq!(plan.gates, Vec::<String>::new());
        assert_eq!(plan.reply, Answer::Message(AssistantReply::text("said: hello from mock")));
    }

    #[test]
    fn a_string_content_prompt_is_read_too() {
        let body = json!({"messages": [{"role": "user", "content": "say plain"}]});
        assert_eq!(text_of(&plan(&body, 1)), "said: plain");
    }

    #[test]
    fn the_last_text_block_of_the_last_real_prompt_is_the_script() {
        let body = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "say first"}, {"type": "text", "text": "say second"}]},
            {"role": "user", "content": [{"type": "text", "text": REMINDER}]},
        ]});
        assert_eq!(text_of(&plan(&body, 1)), "said: second");
    }

    #[test]
    fn call_answers_every_call_in_one_reply_with_resolved_names() {
        let body = request(
            r#"call lookup_order {"order_id":"7"} && call Read {"file_path":"/a"} && call other"#,
            vec![],
        );
        let plan = plan(&body, 0xabc);
        let message = plan.reply.message().unwrap();
        assert_eq!(message.stop_reason, StopReason::ToolUse);
        let uses: Vec<_> =
            message.tool_uses().map(|(id, name, input)| (id.to_owned(), name, input.clone())).collect();
        assert_eq!(
            uses,
            vec![
                (
                    "toolu_mock_000000000abc_0".to_owned(),
                    "mcp__tools__lookup_order",
                    json!({"order_id": "7"})
                ),
                ("toolu_mock_000000000abc_1".to_owned(), "Read", json!({"file_path": "/a"})),
                ("toolu_mock_000000000abc_2".to_owned(), "other", json!({})),
            ]
        );
    }

    #[test]
    fn after_the_results_the_answer_quotes_each_of_them() {
        let body = request(
            "call lookup_order {} && call create_refund {}",
            vec![
                assistant_calls(&[("toolu_mock_1_0", "mcp__tools__lookup_order"), ("toolu_mock_1_1", "x")]),
                results(&[
                    ("toolu_mock_1_0", "order 7: shipped", false),
                    ("toolu_mock_1_1", "card declined", true),
                ]),
            ],
        );
        assert_eq!(
            text_of(&plan(&body, 2)),
            "called lookup_order: order 7: shipped\ncalled create_refund (error): card declined"
        );
    }

    #[test]
    fn a_call_refused_as_not_alone_is_called_again_by_itself() {
        let refusal = "PreToolUse:mcp__tools__create_refund hook error: create_refund did not run. Only one tool \
                       call per reply can run outside this turn, and another call already does. Call create_refund \
                       again by itself.";
        let first = vec![
            assistant_calls(&[("toolu_mock_1_0", "a"), ("toolu_mock_1_1", "b")]),
            results(&[("toolu_mock_1_0", "refund 1 done", false), ("toolu_mock_1_1", refusal, true)]),
        ];
        let script = r#"call create_refund {"n":1} && call create_refund {"n":2}"#;
        let again = plan(&request(script, first.clone()), 2);
        let uses: Vec<_> = again
            .reply
            .message()
            .unwrap()
            .tool_uses()
            .map(|(id, _, input)| (id.to_owned(), input.clone()))
            .collect();
        assert_eq!(uses, vec![("toolu_mock_000000000002_1".to_owned(), json!({"n": 2}))]);

        let mut done = first;
        done.push(assistant_calls(&[("toolu_mock_000000000002_1", "b")]));
        done.push(results(&[("toolu_mock_000000000002_1", "refund 2 done", false)]));
        assert_eq!(
            text_of(&plan(&request(script, done), 3)),
            "called create_refund: refund 1 done\ncalled create_refund: refund 2 done"
        );
    }

    /// The batch scenario (interrupts opened ahead): three refunds in one reply; the gate defers the
    /// first and refuses the others; each refused one is repeated alone, in order, as the real
    /// model does, with its own input or its `again` input.
    #[test]
    fn three_refunds_in_one_reply_are_repeated_one_by_one_after_the_refusals() {
        let refusal = "create_refund did not run. Only one tool call per reply can run outside this turn, and \
                       another call already does. Call mcp__tools__create_refund again by itself.";
        let script = r#"call create_refund {"order_id":"7"} && call create_refund {"order_id":"8"} && call create_refund {"order_id":"9"} again {"order_id":"9","note":"retry"}"#;
        let first = plan(&request(script, vec![]), 1);
        let inputs: Vec<Value> =
            first.reply.message().unwrap().tool_uses().map(|(_, _, i)| i.clone()).collect();
        assert_eq!(inputs, [json!({"order_id": "7"}), json!({"order_id": "8"}), json!({"order_id": "9"})]);

        let (a, b, c) =
            ("toolu_mock_000000000001_0", "toolu_mock_000000000001_1", "toolu_mock_000000000001_2");
        let mut tail = vec![
            assistant_calls(&[
                (a, "mcp__tools__create_refund"),
                (b, "mcp__tools__create_refund"),
                (c, "mcp__tools__create_refund"),
            ]),
            results(&[(b, refusal, true), (c, refusal, true), (a, "r_1", false)]),
        ];
        let again = plan(&request(script, tail.clone()), 2);
        let uses: Vec<_> =
            again.reply.message().unwrap().tool_uses().map(|(id, _, i)| (id.to_owned(), i.clone())).collect();
        assert_eq!(uses, [("toolu_mock_000000000002_1".to_owned(), json!({"order_id": "8"}))]);

        tail.push(assistant_calls(&[("toolu_mock_000000000002_1", "mcp__tools__create_refund")]));
        tail.push(results(&[("toolu_mock_000000000002_1", "r_2", false)]));
        let third = plan(&request(script, tail.clone()), 3);
        let uses: Vec<_> =
            third.reply.message().unwrap().tool_uses().map(|(id, _, i)| (id.to_owned(), i.clone())).collect();
        assert_eq!(
            uses,
            [("toolu_mock_000000000003_2".to_owned(), json!({"order_id": "9", "note": "retry"}))]
        );

        tail.push(assistant_calls(&[("toolu_mock_000000000003_2", "mcp__tools__create_refund")]));
        tail.push(results(&[("toolu_mock_000000000003_2", "The reviewer rejected this call: no", true)]));
        assert_eq!(
            text_of(&plan(&request(script, tail), 4)),
            "called create_refund: r_1\ncalled create_refund: r_2\ncalled create_refund (error): The reviewer rejected this call: no"
        );
    }

    #[test]
    fn a_call_that_vanished_from_the_conversation_is_called_again() {
        let body = request(
            "call a && call b",
            vec![assistant_calls(&[("toolu_mock_1_1", "b")]), results(&[("toolu_mock_1_1", "b ok", false)])],
        );
        let plan = plan(&body, 5);
        let ids: Vec<_> = plan.reply.message().unwrap().tool_uses().map(|(id, ..)| id.to_owned()).collect();
        assert_eq!(ids, vec!["toolu_mock_000000000005_0"]);
    }

    #[test]
    fn a_call_refused_every_time_is_reported_after_the_last_attempt() {
        let refusal = "did not run. Call a again by itself.";
        let mut tail = Vec::new();
        for attempt in 0..MAX_ATTEMPTS {
            let id = format!("toolu_mock_{attempt}_0");
            tail.push(assistant_calls(&[(&id, "a")]));
            tail.push(results(&[(&id, refusal, true)]));
        }
        assert_eq!(text_of(&plan(&request("call a", tail), 9)), format!("called a (error): {refusal}"));
    }

    #[test]
    fn pauses_before_a_call_gate_the_calls_and_pauses_after_gate_the_answer() {
        let script = "pause g1 ;; call a ;; pause g2 ;; fail 529";
        let first = plan(&request(script, vec![]), 1);
        assert_eq!(first.gates, vec!["g1"]);
        assert_eq!(first.reply.message().unwrap().stop_reason, StopReason::ToolUse);

        let tail =
            vec![assistant_calls(&[("toolu_mock_1_0", "a")]), results(&[("toolu_mock_1_0", "ok", false)])];
        let last = plan(&request(script, tail), 2);
        assert_eq!(
            last,
            Plan {
                gates: vec!["g2".to_owned()],
                reply: Answer::Error { status: 529 },
                pace: Pace::default(),
                input_tokens: None,
            }
        );
    }

    #[test]
    fn tokens_reports_the_input_tokens_of_its_reply() {
        assert_eq!(plan(&request("tokens 990000 ;; say full", vec![]), 1).input_tokens, Some(990_000));
        assert_eq!(plan(&request("say not full", vec![]), 1).input_tokens, None);
        let tail =
            vec![assistant_calls(&[("toolu_mock_1_0", "a")]), results(&[("toolu_mock_1_0", "ok", false)])];
        let script = "tokens 5 ;; call a ;; tokens 7";
        assert_eq!(
            plan(&request(script, vec![]), 1).input_tokens,
            Some(5),
            "before the call: the call's reply"
        );
        assert_eq!(plan(&request(script, tail), 2).input_tokens, Some(7), "after it: the answer");
    }

    #[test]
    fn a_stop_hooks_feedback_is_read_as_a_script() {
        let tail = vec![
            json!({"role": "assistant", "content": [{"type": "text", "text": "said: first"}]}),
            json!({"role": "user", "content": "Stop hook feedback:\nsay after the stop hook"}),
        ];
        assert_eq!(text_of(&plan(&request("say first", tail), 1)), "said: after the stop hook");
        let blocks = vec![
            json!({"role": "user", "content": [{"type": "text", "text": "SubagentStop hook feedback:\nrecall"}]}),
        ];
        assert_eq!(text_of(&plan(&request("say first", blocks), 1)), "recalled:\n- prompt: say first");
    }

    #[test]
    fn a_compaction_summary_request_is_answered_with_what_recall_would_list() {
        let tail = vec![
            json!({"role": "assistant", "content": [{"type": "text", "text": "said: remember order 7"}]}),
            json!({"role": "user", "content": format!("{SUMMARY_REQUEST}\n\n- Do NOT use Read…\nYour task is to create a detailed summary…")}),
        ];
        assert_eq!(
            text_of(&plan(&request("say remember order 7", tail), 1)),
            "summary:\n- prompt: say remember order 7"
        );
    }

    #[test]
    fn think_puts_a_thinking_block_before_the_reply_it_modifies() {
        let first = plan(&request("think I should look it up ;; call lookup_order", vec![]), 1);
        let content = &first.reply.message().unwrap().content;
        assert!(
            matches!(&content[0], ContentBlock::Thinking { thinking, signature } if thinking == "I should look it up" && !signature.is_empty()),
            "{content:?}"
        );
        assert!(matches!(&content[1], ContentBlock::ToolUse { .. }), "{content:?}");
        let said = plan(&request("say hi ;; think a greeting", vec![]), 1);
        let content = &said.reply.message().unwrap().content;
        assert!(matches!(&content[0], ContentBlock::Thinking { thinking, .. } if thinking == "a greeting"));
        assert_eq!(text_of(&said), "said: hi");
    }

    #[test]
    fn see_describes_the_images_of_the_prompt_message_by_their_bytes() {
        // "hi" in base64 is aGk=.
        let image =
            json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}});
        let body = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "say old"}, image.clone()]},
            {"role": "assistant", "content": [{"type": "text", "text": "said: old"}]},
            {"role": "user", "content": [{"type": "text", "text": "see"}, image.clone(),
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "!!"}}]},
        ]});
        assert_eq!(
            text_of(&plan(&body, 1)),
            "saw: image/png 2 bytes sha256:8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4; \
             image/png (unreadable base64)"
        );
        assert_eq!(text_of(&plan(&request("see", vec![]), 1)), "saw: no image");
        let tail = vec![
            assistant_calls(&[("toolu_mock_1_0", "mcp__tools__chart")]),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_mock_1_0",
                "content": [{"type": "text", "text": "a chart"}, image]}]}),
        ];
        assert_eq!(
            text_of(&plan(&request("call chart", tail), 2)),
            "called chart: a chart\n[image image/png 2 bytes sha256:8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4]"
        );
    }

    #[test]
    fn say_with_a_pause_waits_at_the_gate_then_answers() {
        let plan = plan(&request("pause g1 ;; say after the gate", vec![]), 1);
        assert_eq!(plan.gates, vec!["g1"]);
        assert_eq!(text_of(&plan), "said: after the gate");
    }

    #[test]
    fn fail_answers_with_an_http_error() {
        assert_eq!(plan(&request("fail", vec![]), 1).reply, Answer::Error { status: 500 });
    }

    #[test]
    fn recall_lists_earlier_prompts_and_tool_results_but_not_injected_texts() {
        let body = request(
            "say one",
            vec![
                assistant_calls(&[("toolu_x", "mcp__tools__lookup_order")]),
                results(&[("toolu_x", "order 7: shipped", false)]),
                json!({"role": "assistant", "content": [{"type": "text", "text": "called lookup_order"}]}),
                json!({"role": "user", "content": [{"type": "text", "text": "recall"}]}),
            ],
        );
        assert_eq!(
            text_of(&plan(&body, 1)),
            "recalled:\n- prompt: say one\n- result mcp__tools__lookup_order: order 7: shipped"
        );
        assert_eq!(text_of(&plan(&request("recall", vec![]), 1)), "recalled: nothing");
    }

    #[test]
    fn prose_is_answered_with_the_script_error() {
        let text = text_of(&plan(&request("hello there", vec![]), 1));
        assert!(
            text.starts_with("mock: cannot read the script \"hello there\": unknown command `hello`"),
            "{text}"
        );
        let no_prompt =
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": REMINDER}]}]});
        assert_eq!(text_of(&plan(&no_prompt, 1)), "mock: the request has no prompt");
    }

    #[test]
    fn an_ambiguous_short_name_is_left_as_written() {
        assert_eq!(resolve_tool_name("echo", &["mcp__a__echo", "mcp__b__echo"]), "echo");
        assert_eq!(resolve_tool_name("echo", &["mcp__a__echo"]), "mcp__a__echo");
        assert_eq!(resolve_tool_name("echo", &["echo", "mcp__a__echo"]), "echo");
    }
}
