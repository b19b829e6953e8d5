//! Control-protocol envelopes: requests the CLI sends to the host, the responses both sides send,
//! and request cancellation.
//!
//! Read [`ControlRequest`] first: it is what the host must answer (`hook_callback`,
//! `can_use_tool`, `mcp_message`). [`ControlResponse`] is the answer envelope in both directions:
//! the CLI uses it for the host's own requests (decode the payload with
//! [`ControlResponse::decode`], e.g. into [`InitializeResponse`]), and the host's answers are
//! built with [`HostFrame`](crate::HostFrame)'s constructors, which wrap a `ControlResponse`.
//!
//! This module does not own the host-to-CLI requests (`initialize`, `interrupt`, …) or the answer
//! payloads (hook outputs, permission results): those live in [`crate::host`].
//!
//! # Caveats
//!
//! - The CLI's request ids are opaque strings (UUIDs); answer each request exactly once, with the
//!   same id. A [`ControlCancelRequest`] withdraws one; it gets no reply.
//! - A request with a subtype this crate does not know parses as [`CliRequest::Other`] so the host
//!   can answer it with an error response. A *known* subtype with wrong fields is a
//!   [`ProtocolError::MalformedRequest`], which still
//!   carries the id to answer.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ProtocolError;
use crate::hook::HookEvent;

/// `{"type":"control_request","request_id":…,"request":{"subtype":…}}` from the CLI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlRequest {
    /// Echo this in the answer.
    pub request_id: String,
    /// What the CLI asks for.
    pub request: CliRequest,
}

/// The body of a [`ControlRequest`], tagged by `subtype`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "subtype", rename_all = "snake_case")]
pub enum CliRequest {
    /// A registered hook fired (for Tollgate: `PreToolUse`). Answer with
    /// [`HostFrame::hook_answer`](crate::HostFrame::hook_answer).
    HookCallback(HookCallback),
    /// The permission check wants a decision. Answer with
    /// [`HostFrame::permission_answer`](crate::HostFrame::permission_answer).
    CanUseTool(CanUseTool),
    /// A JSON-RPC message for one of the host's sdk MCP servers. Answer with
    /// [`HostFrame::mcp_response`](crate::HostFrame::mcp_response).
    McpMessage(McpMessage),
    /// Any other subtype, kept whole (including its `subtype`). Answer with
    /// [`HostFrame::error_response`](crate::HostFrame::error_response).
    #[serde(untagged)]
    Other(Value),
}

impl CliRequest {
    /// The wire `subtype` (`"hook_callback"`, …), also for [`CliRequest::Other`]
    /// (`""` if that one has none).
    pub fn subtype(&self) -> &str {
        match self {
            CliRequest::HookCallback(_) => "hook_callback",
            CliRequest::CanUseTool(_) => "can_use_tool",
            CliRequest::McpMessage(_) => "mcp_message",
            CliRequest::Other(v) => v.get("subtype").and_then(Value::as_str).unwrap_or(""),
        }
    }
}

/// `hook_callback`: one registered hook matcher fired.
///
/// ```json
/// {"subtype":"hook_callback","callback_id":"hook_0","input":{…},"tool_use_id":"toolu_allow_1"}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookCallback {
    /// One of the `hookCallbackIds` the host registered in `initialize`.
    pub callback_id: String,
    /// The hook's input, by its event.
    pub input: HookEvent,
    /// The model's `tool_use` id (same as `input.tool_use_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
}

/// The `input` of a `PreToolUse` hook callback (the gate's event; the other events' inputs are in
/// [`crate::hook`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookInput {
    /// `"PreToolUse"`.
    pub hook_event_name: String,
    /// The CLI's session id.
    pub session_id: String,
    /// The local transcript file of the child process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_path: Option<String>,
    /// The child's working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Absent on the hook call a resume makes for a deferred call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_id: Option<String>,
    /// The `--permission-mode` in force (`"default"`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// `{"level":"medium"}`; kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Value>,
    /// Full CLI tool name, e.g. `mcp__tools__echo` or `Write`.
    pub tool_name: String,
    /// The tool's arguments as the model gave them.
    pub tool_input: Value,
    /// The model's `tool_use` id.
    pub tool_use_id: String,
    /// Present only for MCP tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_server: Option<McpServerRef>,
    /// Set for a call made inside a subagent (`tests/data/frames/subagent_foreground__run.jsonl`).
    /// Absent or empty for the main conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The subagent's type (`general-purpose`, …), with `agent_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
}

/// `{"name":"tools","source":"sdk"}`: which MCP server a tool belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerRef {
    /// Server name, e.g. `"tools"`.
    pub name: String,
    /// `"sdk"` for a host-served server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// `can_use_tool`: a permission prompt (`--permission-prompt-tool=stdio`).
///
/// Comes after a hook answered `ask`, or when no hook decided and the mode wants a prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanUseTool {
    /// Full CLI tool name.
    pub tool_name: String,
    /// The tool's arguments.
    pub input: Value,
    /// The model's `tool_use` id.
    pub tool_use_id: String,
    /// Human name of the tool (`"Echo"`, `"Write"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Short description of the call (e.g. the file for `Write`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Present only for MCP tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_server: Option<McpServerRef>,
    /// The hook's `permissionDecisionReason` after an `ask`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_reason: Option<String>,
    /// `"hook"` after a hook `ask`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_reason_type: Option<String>,
    /// `"PreToolUse"` after a hook `ask`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_reason_hook_event: Option<String>,
    /// `"settings"` after a hook `ask`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision_reason_hook_source: Option<String>,
    /// Rules the CLI suggests adding; kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_suggestions: Option<Value>,
    /// Seen as `true` for MCP tools with no hook decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_policy_ask_only: Option<bool>,
}

/// `mcp_message`: one JSON-RPC message for an sdk MCP server the host serves.
///
/// ```json
/// {"subtype":"mcp_message","server_name":"tools","message":{"method":"tools/list","jsonrpc":"2.0","id":1}}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpMessage {
    /// The sdk server's name.
    pub server_name: String,
    /// The JSON-RPC message, unchanged (request or notification).
    pub message: Value,
}

impl McpMessage {
    /// The JSON-RPC `method`, if any.
    pub fn method(&self) -> Option<&str> {
        self.message.get("method").and_then(Value::as_str)
    }

    /// The JSON-RPC `id`; `None` for a notification.
    pub fn id(&self) -> Option<&Value> {
        self.message.get("id").filter(|id| !id.is_null())
    }

    /// True for a notification (no `id`). Answer it with
    /// [`HostFrame::mcp_notification_ack`](crate::HostFrame::mcp_notification_ack).
    pub fn is_notification(&self) -> bool {
        self.id().is_none()
    }

    /// `params._meta["claudecode/toolUseId"]` of a `tools/call`: the model's `tool_use` id, which
    /// ties the call to the gate's hook decision.
    pub fn tool_use_id(&self) -> Option<&str> {
        self.message.pointer("/params/_meta")?.get("claudecode/toolUseId")?.as_str()
    }
}

/// `{"type":"control_cancel_request","request_id":…}`: the CLI no longer waits for an answer
/// (e.g. a hook timed out). Send nothing back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlCancelRequest {
    /// The id of the withdrawn request.
    pub request_id: String,
}

/// `{"type":"control_response","response":{"subtype":"success"|"error",…}}`, in both directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlResponse {
    /// The envelope body.
    pub response: ResponseBody,
}

/// The `response` object of a [`ControlResponse`], tagged by `subtype`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "subtype", rename_all = "snake_case")]
pub enum ResponseBody {
    /// `{"subtype":"success","request_id":…,"response":{…}}`.
    Success {
        /// The id of the request answered.
        request_id: String,
        /// The payload; its shape depends on the request.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response: Option<Value>,
        /// Only in the CLI's `initialize` answer, next to `response`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pending_permission_requests: Option<Value>,
        /// Only in the CLI's `initialize` answer, next to `response`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pending_user_dialog_requests: Option<Value>,
    },
    /// `{"subtype":"error","request_id":…,"error":"…"}`.
    Error {
        /// The id of the request answered.
        request_id: String,
        /// What went wrong, as text.
        error: String,
    },
}

impl ControlResponse {
    /// A success answer to `request_id` carrying `payload`.
    pub fn success(request_id: impl Into<String>, payload: Value) -> Self {
        ControlResponse {
            response: ResponseBody::Success {
                request_id: request_id.into(),
                response: Some(payload),
                pending_permission_requests: None,
                pending_user_dialog_requests: None,
            },
        }
    }

    /// An error answer to `request_id`.
    pub fn error(request_id: impl Into<String>, message: impl Into<String>) -> Self {
        ControlResponse {
            response: ResponseBody::Error { request_id: request_id.into(), error: message.into() },
        }
    }

    /// The id of the request this answers.
    pub fn request_id(&self) -> &str {
        match &self.response {
            ResponseBody::Success { request_id, .. } | ResponseBody::Error { request_id, .. } => request_id,
        }
    }

    /// The success payload, or the error text. A success without payload gives `Value::Null`.
    pub fn result(&self) -> Result<&Value, &str> {
        static NULL: Value = Value::Null;
        match &self.response {
            ResponseBody::Success { response, .. } => Ok(response.as_ref().unwrap_or(&NULL)),
            ResponseBody::Error { error, .. } => Err(error),
        }
    }

    /// Decode the success payload as `T` (e.g. [`InitializeResponse`]).
    ///
    /// An error answer becomes [`ProtocolError::ControlError`]; a payload of another shape
    /// [`ProtocolError::UnexpectedResponse`].
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, ProtocolError> {
        let request_id = self.request_id().to_owned();
        match self.result() {
            Ok(payload) => T::deserialize(payload)
                .map_err(|source| ProtocolError::UnexpectedResponse { request_id, source }),
            Err(message) => Err(ProtocolError::ControlError { request_id, message: message.to_owned() }),
        }
    }
}

/// The CLI's answer to `initialize` (the parts the host checks; the answer is ~17 KB).
///
/// Decode it with [`ControlResponse::decode`]. Check [`InitializeResponse::hooks_applied`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InitializeResponse {
    /// `true` when the hooks of the request were registered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks_applied: Option<bool>,
    /// `"2.1.328"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_code_version: Option<String>,
    /// The mode in force (`"default"`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_permission_mode: Option<String>,
    /// The CLI's process id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// `"idle"` at start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_state: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_request_subtype_is_kept_whole_for_an_error_answer() {
        let req: ControlRequest = serde_json::from_value(json!({
            "request_id": "r1", "request": {"subtype": "elicitation", "x": 1}
        }))
        .unwrap();
        assert_eq!(req.request.subtype(), "elicitation");
        assert_eq!(req.request, CliRequest::Other(json!({"subtype": "elicitation", "x": 1})));
    }

    #[test]
    fn mcp_message_finds_the_tool_use_id_of_a_tools_call() {
        let msg = McpMessage {
            server_name: "tools".into(),
            message: json!({"method": "tools/call", "jsonrpc": "2.0", "id": 2,
                "params": {"name": "echo", "arguments": {}, "_meta": {"claudecode/toolUseId": "toolu_1", "progressToken": 2}}}),
        };
        assert_eq!(msg.tool_use_id(), Some("toolu_1"));
        assert_eq!(msg.method(), Some("tools/call"));
        assert!(!msg.is_notification());
    }

    #[test]
    fn mcp_message_without_id_is_a_notification() {
        let msg = McpMessage {
            server_name: "tools".into(),
            message: json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        };
        assert!(msg.is_notification());
        assert_eq!(msg.tool_use_id(), None);
    }

    #[test]
    fn decoding_an_error_answer_names_the_request_and_the_message() {
        let resp = ControlResponse::error("req_1", "boom");
        let err = resp.decode::<InitializeResponse>().unwrap_err();
        assert_eq!(err.to_string(), "the CLI answered control_request req_1 with an error: boom");
    }

    #[test]
    fn decoding_a_payload_of_the_wrong_shape_is_an_unexpected_response() {
        let resp = ControlResponse::success("req_2", json!({"hooks_applied": "yes"}));
        let err = resp.decode::<InitializeResponse>().unwrap_err();
        assert!(
            matches!(err, ProtocolError::UnexpectedResponse { ref request_id, .. } if request_id == "req_2")
        );
    }
}
