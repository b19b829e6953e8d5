//! What the mock answers: the typed reply that [`crate::plan`] chooses and the request log records.
//!
//! Read [`Reply`] first. How an [`AssistantReply`] is put on the wire (SSE or JSON) is
//! [`crate::wire`]'s job, not this module's.

use serde::Serialize;
use serde_json::Value;
/// A content block of the Messages API: the protocol crate's type, which the CLI's frames carry
/// too. The mock writes only `Text` and `ToolUse`.
pub use tollgate_protocol::ContentBlock;

/// The answer to one logged request.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reply {
    /// A model message (streamed as SSE when the request asked for `stream: true`, else one JSON object).
    Message(AssistantReply),
    /// An HTTP error with an Anthropic error body (`fail`).
    Error {
        /// The HTTP status.
        status: u16,
    },
    /// `POST /v1/messages/count_tokens`.
    TokenCount {
        /// The estimate returned.
        input_tokens: u64,
    },
    /// HTTP 200 with no body (`HEAD`).
    Empty,
    /// A path the mock does not serve (HTTP 404).
    NotFound,
    /// A body that is not a JSON object (HTTP 400).
    BadRequest {
        /// What was wrong.
        message: String,
    },
}

impl Reply {
    /// The message, when the reply is one.
    pub fn message(&self) -> Option<&AssistantReply> {
        match self {
            Reply::Message(message) => Some(message),
            _ => None,
        }
    }
}

/// The content of one assistant message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssistantReply {
    /// The content blocks, in order.
    pub content: Vec<ContentBlock>,
    /// `tool_use` when `content` has a tool call, else `end_turn`.
    pub stop_reason: StopReason,
}

impl AssistantReply {
    /// A message of one text block that ends the turn.
    pub fn text(text: impl Into<String>) -> Self {
        AssistantReply {
            content: vec![ContentBlock::Text { text: text.into() }],
            stop_reason: StopReason::EndTurn,
        }
    }

    /// The text blocks, joined with newlines.
    pub fn joined_text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }

    /// The tool calls, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

/// `stop_reason` of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its answer.
    EndTurn,
    /// The model waits for tool results.
    ToolUse,
}

impl StopReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::ToolUse => "tool_use",
        }
    }
}
