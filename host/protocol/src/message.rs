//! Output frames that are not control traffic: `system/init`, `stream_event`, `assistant`,
//! `user` and `result`.
//!
//! Read [`ResultMessage`] first: it ends every turn and says how (answer, deferred call, error).
//! [`StreamEvent::text_delta`] is what a host streams to its clients.
//!
//! Only the fields the host acts on are typed; the rest of each frame (dozens of fields in this
//! CLI build) is skipped when parsing. The golden tests list every skipped top-level field by
//! name, so a renamed field shows up as a test failure rather than a silent `None`.
//!
//! # Caveats
//!
//! - Nested Anthropic API objects (events, deltas, content blocks) have an `Other` variant that
//!   keeps the JSON of any `type` not modelled here, and also of a known `type` whose fields do
//!   not match. Top-level frames are stricter: see [`parse_line`](crate::parse_line).
//! - `result.subtype` is `"success"` even for API errors: check [`ResultMessage::is_error`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `{"type":"system","subtype":…}` frames the host acts on, tagged by `subtype`.
///
/// Other subtypes (`status`, `api_retry`, `session_state_changed`, …) arrive as
/// [`Frame::Other`](crate::Frame::Other).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "subtype", rename_all = "snake_case")]
pub enum System {
    /// Sent at the start of every turn (not at process start).
    Init(SystemInit),
}

/// `system/init`: the session id, the model and the tools of this turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SystemInit {
    /// The CLI's session id (the one to `--resume`).
    pub session_id: String,
    /// The child's working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Model id, e.g. `claude-opus-5-5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `permissionMode` on the wire.
    #[serde(rename = "permissionMode", default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// Tool names the model may call (built-ins and `mcp__<server>__<tool>`).
    #[serde(default)]
    pub tools: Vec<String>,
    /// MCP servers and their connection status.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerStatus>,
    /// The plugins the CLI loaded, its built-in ones included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginStatus>,
    /// `"2.1.328"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_code_version: Option<String>,
    /// Frame id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// `{"name":"tools","status":"connected","source":"sdk"}` in `system/init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerStatus {
    /// Server name.
    pub name: String,
    /// `"connected"`, `"failed"`, …
    pub status: String,
    /// `"sdk"` for host-served servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// `{"name":"cc-plugin-privacy","path":"builtin","source":"cc-plugin-privacy@builtin"}` in
/// `system/init`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginStatus {
    /// Plugin name.
    pub name: String,
    /// Where it was loaded from (`"builtin"` for the CLI's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `<name>@<marketplace>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// `stream_event` (`--include-partial-messages`): one raw Messages API SSE event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamEvent {
    /// The SSE event as the API sent it.
    pub event: ApiEvent,
    /// The CLI's session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Set inside subagents; `null` for the main loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_use_id: Option<String>,
    /// Frame id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// The API message this event belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_message_id: Option<String>,
}

impl StreamEvent {
    /// The text of a `content_block_delta` / `text_delta`, the piece to stream to a client.
    pub fn text_delta(&self) -> Option<&str> {
        match &self.event {
            ApiEvent::ContentBlockDelta { delta: Delta::TextDelta { text }, .. } => Some(text),
            _ => None,
        }
    }

    /// The thinking of a `content_block_delta` / `thinking_delta`: the model's reasoning as it
    /// streams (a `signature_delta` that seals the block is not thinking).
    pub fn thinking_delta(&self) -> Option<&str> {
        match &self.event {
            ApiEvent::ContentBlockDelta { delta: Delta::ThinkingDelta { thinking }, .. } => Some(thinking),
            _ => None,
        }
    }
}

/// A Messages API stream event, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ApiEvent {
    /// A new API message; `message` kept as JSON.
    MessageStart {
        /// `{"id":…,"model":…,"usage":…}`.
        message: Value,
    },
    /// A content block begins.
    ContentBlockStart {
        /// Block index in the message.
        index: u32,
        /// The block (empty text, or a tool_use with `input:{}`).
        content_block: ContentBlock,
    },
    /// A piece of a content block.
    ContentBlockDelta {
        /// Block index in the message.
        index: u32,
        /// The piece.
        delta: Delta,
    },
    /// A content block ends.
    ContentBlockStop {
        /// Block index in the message.
        index: u32,
    },
    /// Message-level changes (`stop_reason`, usage); kept as JSON.
    MessageDelta {
        /// `{"stop_reason":…,"stop_sequence":…}`.
        delta: Value,
        /// Token counts so far.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Value>,
    },
    /// The message is complete.
    MessageStop,
    /// Any other event, kept whole.
    #[serde(untagged)]
    Other(Value),
}

/// The `delta` of a `content_block_delta`, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Delta {
    /// Text to append.
    TextDelta {
        /// The text piece.
        text: String,
    },
    /// A piece of a tool_use block's JSON input.
    InputJsonDelta {
        /// A fragment of JSON text (not valid on its own).
        partial_json: String,
    },
    /// A piece of a thinking block's text.
    ThinkingDelta {
        /// The piece.
        thinking: String,
    },
    /// A thinking block's signature (opaque; it comes once, before the block stops).
    SignatureDelta {
        /// The signature.
        signature: String,
    },
    /// Any other delta (citations…), kept whole.
    #[serde(untagged)]
    Other(Value),
}

/// A message content block, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A tool call by the model.
    ToolUse {
        /// `toolu_…`; the id hooks and MCP calls refer to.
        id: String,
        /// Full CLI tool name.
        name: String,
        /// Arguments.
        input: Value,
    },
    /// The model's visible reasoning, before its answer. The API checks `signature` when the
    /// block is sent back, so it travels unchanged.
    Thinking {
        /// The reasoning text.
        thinking: String,
        /// The API's signature of the block.
        #[serde(default)]
        signature: String,
    },
    /// A tool's result, sent back to the model.
    ToolResult {
        /// The `tool_use` it answers.
        tool_use_id: String,
        /// String or list of blocks.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<Value>,
        /// `true` when the model is told the call failed (denials included).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
    /// Any other block (redacted thinking, images, server tools…), kept whole.
    #[serde(untagged)]
    Other(Value),
}

/// `assistant`: one content block of the model's reply (one frame per block, same
/// `message.id`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// The API message, cut to this one block.
    pub message: ApiMessage,
    /// The CLI's session id.
    pub session_id: String,
    /// Set inside subagents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_use_id: Option<String>,
    /// Frame id (also the transcript entry's `uuid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Set on the synthetic message of an API failure (`"server_error"`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `true` on the synthetic message of an API failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_api_error_message: Option<bool>,
}

/// The `message` of an [`AssistantMessage`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiMessage {
    /// `msg_…`.
    pub id: String,
    /// `"assistant"`.
    pub role: String,
    /// Model id; `"<synthetic>"` for API-error messages.
    pub model: String,
    /// The block(s).
    pub content: Vec<ContentBlock>,
    /// `null` in these frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Usage as of `message_start`; kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
}

/// `user` from the CLI: a tool result (or a synthetic prompt) as the model will see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// `{"role":"user","content":…}`.
    pub message: UserContent,
    /// The CLI's session id.
    pub session_id: String,
    /// Set inside subagents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_use_id: Option<String>,
    /// Frame id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// What the tool returned, as the CLI recorded it; kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_result: Option<Value>,
}

/// The `message` of a [`UserMessage`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserContent {
    /// `"user"`.
    pub role: String,
    /// A string or blocks.
    pub content: MessageContent,
}

/// Message content: a plain string or a list of blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// `"content":"…"`.
    Text(String),
    /// `"content":[…]`.
    Blocks(Vec<ContentBlock>),
}

/// `result`: the end of a turn.
///
/// A deferred segment has [`ResultMessage::deferred_tool_use`] set (and normally
/// `terminal_reason: tool_deferred`; `null` when a resume defers again).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultMessage {
    /// `"success"` or `"error_during_execution"`; API errors are `"success"` + `is_error`.
    pub subtype: String,
    /// Whether the turn failed. The process exits 1 after such a result.
    pub is_error: bool,
    /// The CLI's session id.
    pub session_id: String,
    /// Final text; `""` when deferred; absent on startup failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Why the turn ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_reason: Option<TerminalReason>,
    /// The API stop reason (`"end_turn"`, `"tool_deferred"`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// The call the host deferred; its `input` is the input after every hook's `updatedInput`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred_tool_use: Option<DeferredToolUse>,
    /// Model calls in the turn (odd values on some resumes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_turns: Option<u32>,
    /// Cumulative session cost in USD (continues from the stored `cost-state` after a resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<f64>,
    /// Tokens of this turn's main loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// `modelUsage`: cumulative per model (camelCase fields); kept as JSON.
    #[serde(rename = "modelUsage", default, skip_serializing_if = "Option::is_none")]
    pub model_usage: Option<Value>,
    /// Calls denied in the turn (by hook, by `can_use_tool` or by mode).
    #[serde(default)]
    pub permission_denials: Vec<PermissionDenial>,
    /// HTTP status of a failed API call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_error_status: Option<u16>,
    /// Error texts of an `error_during_execution` result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<String>>,
    /// Wall time of the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Time spent in API calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_api_ms: Option<u64>,
    /// 0, 1, … per process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_index: Option<u32>,
    /// Frame id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

impl ResultMessage {
    /// True when the segment ended on a deferred tool call.
    pub fn is_deferred(&self) -> bool {
        self.deferred_tool_use.is_some()
    }
}

/// Why a turn ended (`result.terminal_reason`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminalReason {
    /// The model answered.
    Completed,
    /// A hook answered `defer`.
    ToolDeferred,
    /// The Messages API failed (after retries).
    ApiError,
    /// `can_use_tool` denied with `interrupt:true`.
    AbortedTools,
    /// An `interrupt` request during streaming.
    AbortedStreaming,
    /// A hook answered `continue:false`.
    HookStopped,
    /// A resume found the deferred call's tool missing.
    ToolDeferredUnavailable,
    /// A reason this crate does not know yet.
    #[serde(untagged)]
    Other(String),
}

/// `deferred_tool_use`: `{"id":"toolu_…","name":"mcp__tools__echo","input":{…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeferredToolUse {
    /// The model's `tool_use` id.
    pub id: String,
    /// Full CLI tool name.
    pub name: String,
    /// Arguments after every hook's `updatedInput`.
    pub input: Value,
}

/// One entry of `permission_denials`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionDenial {
    /// Full CLI tool name.
    pub tool_name: String,
    /// The model's `tool_use` id.
    pub tool_use_id: String,
    /// The arguments it was called with.
    pub tool_input: Value,
}

/// Token counts of `result.usage` (summed over the turn's model calls).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Uncached input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Tokens written to the prompt cache.
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    /// Tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, rhs: Self) {
        self.input_tokens += rhs.input_tokens;
        self.output_tokens += rhs.output_tokens;
        self.cache_creation_input_tokens += rhs.cache_creation_input_tokens;
        self.cache_read_input_tokens += rhs.cache_read_input_tokens;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_delta_is_found_and_other_deltas_are_not_text() {
        let ev: StreamEvent = serde_json::from_value(json!({
            "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Callin"}},
            "session_id": "s", "parent_tool_use_id": null, "uuid": "u"
        }))
        .unwrap();
        assert_eq!(ev.text_delta(), Some("Callin"));
        let json_delta: StreamEvent = serde_json::from_value(json!({
            "event": {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"te"}}
        }))
        .unwrap();
        assert_eq!(json_delta.text_delta(), None);
    }

    #[test]
    fn thinking_streams_as_its_own_deltas_and_its_signature_is_not_thinking() {
        let thinking: StreamEvent = serde_json::from_value(json!({
            "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}
        }))
        .unwrap();
        assert_eq!((thinking.thinking_delta(), thinking.text_delta()), (Some("hm"), None));
        let signature: StreamEvent = serde_json::from_value(json!({
            "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQB"}}
        }))
        .unwrap();
        assert_eq!(signature.thinking_delta(), None);
        let block: ContentBlock =
            serde_json::from_value(json!({"type": "thinking", "thinking": "", "signature": ""})).unwrap();
        assert_eq!(block, ContentBlock::Thinking { thinking: String::new(), signature: String::new() });
    }

    #[test]
    fn unknown_stream_events_and_deltas_are_kept_whole() {
        let ev: ApiEvent = serde_json::from_value(json!({"type": "ping", "at": 1})).unwrap();
        assert_eq!(ev, ApiEvent::Other(json!({"type": "ping", "at": 1})));
        let d: Delta = serde_json::from_value(json!({"type": "citations_delta", "citation": {}})).unwrap();
        assert_eq!(serde_json::to_value(&d).unwrap(), json!({"type": "citations_delta", "citation": {}}));
    }

    #[test]
    fn an_unknown_terminal_reason_is_kept_as_text() {
        let r: TerminalReason = serde_json::from_value(json!("budget_exhausted")).unwrap();
        assert_eq!(r, TerminalReason::Other("budget_exhausted".into()));
        let r: TerminalReason = serde_json::from_value(json!("tool_deferred")).unwrap();
        assert_eq!(r, TerminalReason::ToolDeferred);
    }

    #[test]
    fn usage_adds_up_field_by_field() {
        let mut total = Usage {
            input_tokens: 1,
            output_tokens: 2,
            cache_creation_input_tokens: 3,
            cache_read_input_tokens: 4,
        };
        total += Usage {
            input_tokens: 10,
            output_tokens: 20,
            cache_creation_input_tokens: 30,
            cache_read_input_tokens: 40,
        };
        assert_eq!(
            total,
            Usage {
                input_tokens: 11,
                output_tokens: 22,
                cache_creation_input_tokens: 33,
                cache_read_input_tokens: 44
            }
        );
    }

    #[test]
    fn user_content_may_be_a_string_or_blocks() {
        let s: MessageContent = serde_json::from_value(json!("(no content)")).unwrap();
        assert_eq!(s, MessageContent::Text("(no content)".into()));
        let b: MessageContent = serde_json::from_value(json!([
            {"tool_use_id": "t", "type": "tool_result", "content": "x", "is_error": true}
        ]))
        .unwrap();
        assert_eq!(
            b,
            MessageContent::Blocks(vec![ContentBlock::ToolResult {
                tool_use_id: "t".into(),
                content: Some(json!("x")),
                is_error: Some(true)
            }])
        );
    }
}
