//! Claude Code stream-json frames and transcript entries (pure, no I/O).
//!
//! `tollgate-protocol` owns the JSON lines exchanged with the `claude` CLI (2.1.328) over
//! `--input-format stream-json --output-format stream-json`: it turns each stdout line into a
//! typed [`Frame`] ([`parse_line`]) and builds every line the host writes ([`HostFrame`]). It does
//! no I/O, spawns nothing and keeps no session state: the transport owns the pipes, the engine
//! owns the decisions, another crate builds the argv.
//!
//! Read [`Frame`] first (what the CLI says), then [`HostFrame`] (what the host answers). The
//! modules:
//!
//! - [`control`]: control-request/response envelopes and the CLI's requests (`hook_callback`,
//!   `can_use_tool`, `mcp_message`);
//! - [`hook`]: the inputs of each hook event and the answer an application hook may send;
//! - [`host`]: host-to-CLI frames and their builders (`initialize`, hook and permission answers,
//!   MCP responses, prompts);
//! - [`message`]: `system/init`, `stream_event`, `assistant`, `user`, `result`;
//! - [`transcript`]: `transcript_mirror` and byte-exact [`TranscriptEntry`]s;
//! - [`media`]: images in entries held by reference to stored bytes, and put back byte for byte.
//!
//! ```
//! use tollgate_protocol::{CliRequest, Frame, HookAnswer, HookEvent, HostFrame, parse_line};
//!
//! let line = r#"{"type":"control_request","request_id":"a5b1","request":{"subtype":"hook_callback","callback_id":"hook_0","input":{"session_id":"s","hook_event_name":"PreToolUse","tool_name":"mcp__tools__echo","tool_input":{"text":"ping"},"tool_use_id":"toolu_1"},"tool_use_id":"toolu_1"}}"#;
//! let Frame::ControlRequest(req) = parse_line(line)? else { panic!("not a request") };
//! let CliRequest::HookCallback(hook) = &req.request else { panic!("not a hook") };
//! let HookEvent::PreToolUse(input) = &hook.input else { panic!("not PreToolUse") };
//! assert_eq!(input.tool_name, "mcp__tools__echo");
//!
//! let answer = HostFrame::hook_answer(&req.request_id, HookAnswer::defer());
//! assert_eq!(
//!     answer.to_line(),
//!     "{\"type\":\"control_response\",\"response\":{\"subtype\":\"success\",\"request_id\":\"a5b1\",\
//!      \"response\":{\"hookSpecificOutput\":{\"hookEventName\":\"PreToolUse\",\"permissionDecision\":\"defer\"}}}}\n"
//! );
//! # Ok::<(), tollgate_protocol::ProtocolError>(())
//! ```

#![forbid(unsafe_code)]

pub mod control;
mod error;
pub mod hook;
pub mod host;
pub mod media;
pub mod message;
pub mod transcript;

use std::borrow::Cow;

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

pub use control::{
    CanUseTool, CliRequest, ControlCancelRequest, ControlRequest, ControlResponse, HookCallback, HookInput,
    InitializeResponse, McpMessage, McpServerRef, ResponseBody,
};
pub use error::ProtocolError;
pub use hook::{
    AppHookOutput, HookEvent, HookEventName, PostToolUseInput, PreCompactInput, StopInput,
    UserPromptSubmitInput,
};
pub use host::{
    ClaimSession, HookAnswer, HookMatcher, Hooks, HostFrame, HostRequest, Initialize, PermissionAnswer,
    PermissionDecision, PromptMessage, UserPrompt,
};
pub use message::{
    ApiEvent, ApiMessage, AssistantMessage, ContentBlock, DeferredToolUse, Delta, McpServerStatus,
    MessageContent, PermissionDenial, PluginStatus, ResultMessage, StreamEvent, System, SystemInit,
    TerminalReason, Usage, UserContent, UserMessage,
};
pub use transcript::{ResumeText, TranscriptEntry, TranscriptMirror, entry_uuid};

/// One line the CLI wrote to stdout.
///
/// ## Wire format
///
/// One JSON object per line (UTF-8, `\n`-terminated), routed by its `type`. Lines are long: the
/// `initialize` answer is ~17 KB, a `transcript_mirror` up to ~100 KB. Unknown types and unknown
/// fields are normal (this CLI build emits many) and are never an error: unknown types become
/// [`Frame::Other`], unknown fields are skipped.
///
/// ```json
/// {"type":"<frame type>", ...}
/// ```
///
/// ### `control_request` → [`Frame::ControlRequest`]
///
/// The CLI asks the host something; answer exactly once with the same `request_id`
/// (see [`HostFrame`]). Requests may arrive before the `initialize` answer and while other
/// requests are pending.
///
/// ```json
/// {"type":"control_request","request_id":"a5b17f39-…","request":{"subtype":"hook_callback","callback_id":"hook_0",
///  "input":{"session_id":"…","hook_event_name":"PreToolUse","tool_name":"mcp__tools__echo","tool_input":{"text":"ping"},
///           "tool_use_id":"toolu_allow_1","mcp_server":{"name":"tools","source":"sdk"},…},"tool_use_id":"toolu_allow_1"}}
/// {"type":"control_request","request_id":"e497b81e-…","request":{"subtype":"can_use_tool","tool_name":"mcp__tools__echo",
///  "input":{"text":"ping"},"tool_use_id":"toolu_ask_1","decision_reason":"…",…}}
/// {"type":"control_request","request_id":"c5a270fa-…","request":{"subtype":"mcp_message","server_name":"tools",
///  "message":{"method":"tools/call","params":{"name":"echo","arguments":{…},"_meta":{"claudecode/toolUseId":"toolu_allow_1"}},"jsonrpc":"2.0","id":2}}}
/// ```
///
/// ### `control_response` → [`Frame::ControlResponse`]
///
/// The CLI's answer to a host request (`initialize`, `interrupt`, `set_permission_mode`).
///
/// ```json
/// {"type":"control_response","response":{"subtype":"success","request_id":"req_1","response":{"hooks_applied":true,…},
///  "pending_permission_requests":[],"pending_user_dialog_requests":[]}}
/// {"type":"control_response","response":{"subtype":"error","request_id":"req_1","error":"…"}}
/// ```
///
/// ### `control_cancel_request` → [`Frame::ControlCancelRequest`]
///
/// ```json
/// {"type":"control_cancel_request","request_id":"f6c10b2d-…"}
/// ```
///
/// ### `system` / `init` → [`Frame::System`]
///
/// At the start of every turn. Other `system` subtypes (`status`, `api_retry`,
/// `session_state_changed`, `background_tasks_changed`, `informational`) are [`Frame::Other`].
///
/// ```json
/// {"type":"system","subtype":"init","session_id":"21bff659-…","cwd":"…","model":"claude-opus-5-5","permissionMode":"default",
///  "tools":["Task","Bash","…","mcp__tools__echo"],"mcp_servers":[{"name":"tools","status":"connected","source":"sdk"}],
///  "claude_code_version":"2.1.328","uuid":"…",…}
/// ```
///
/// ### `stream_event` → [`Frame::StreamEvent`]
///
/// A raw Messages API SSE event (`--include-partial-messages`).
///
/// ```json
/// {"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Callin"}},
///  "session_id":"…","parent_tool_use_id":null,"uuid":"…","api_message_id":"msg_…"}
/// ```
///
/// ### `assistant` → [`Frame::Assistant`]
///
/// One frame per content block of a model reply.
///
/// ```json
/// {"type":"assistant","message":{"id":"msg_…","type":"message","role":"assistant","model":"claude-opus-5-5",
///  "content":[{"type":"tool_use","id":"toolu_allow_1","name":"mcp__tools__echo","input":{"text":"ping"}}],"stop_reason":null,"usage":{…}},
///  "parent_tool_use_id":null,"session_id":"…","uuid":"…",…}
/// ```
///
/// ### `user` → [`Frame::User`]
///
/// A tool result (or synthetic prompt) as the model will see it.
///
/// ```json
/// {"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_allow_1","type":"tool_result","content":[{"type":"text","text":"echo: ping"}]}]},
///  "parent_tool_use_id":null,"session_id":"…","uuid":"…","tool_use_result":[…],…}
/// ```
///
/// ### `result` → [`Frame::Result`]
///
/// The end of a turn. The process keeps running until stdin closes.
///
/// ```json
/// {"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"","stop_reason":"tool_deferred",
///  "terminal_reason":"tool_deferred","deferred_tool_use":{"id":"toolu_def_1","name":"mcp__tools__echo","input":{"text":"ping"}},
///  "permission_denials":[],"session_id":"221d1b81-…","total_cost_usd":0.010632,"usage":{"input_tokens":2588,"output_tokens":14,…},
///  "modelUsage":{…},"duration_ms":240,"result_index":0,"uuid":"…",…}
/// ```
///
/// ### `transcript_mirror` → [`Frame::TranscriptMirror`]
///
/// Entries just written to the local transcript (`--session-mirror`); no answer. Entries are kept
/// byte-exact ([`TranscriptEntry`]). Some arrive after the `result`: read stdout to EOF.
///
/// ```json
/// {"type":"transcript_mirror","filePath":"<CLAUDE_CONFIG_DIR>/projects/<key>/<session>.jsonl","entries":[{…},{…}]}
/// ```
///
/// ### Everything else → [`Frame::Other`]
///
/// `attachment`, `command_lifecycle`, `tool_progress`, `keep_alive`, other `system` subtypes,
/// and any type a later CLI adds, kept as the raw line ([`RawFrame`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Frame {
    /// The CLI asks the host; answer it.
    ControlRequest(ControlRequest),
    /// The CLI answers a host request.
    ControlResponse(ControlResponse),
    /// The CLI withdraws one of its requests; send nothing.
    ControlCancelRequest(ControlCancelRequest),
    /// `system/init`.
    System(System),
    /// A streaming API event.
    StreamEvent(StreamEvent),
    /// One block of a model reply.
    Assistant(AssistantMessage),
    /// A tool result (or synthetic prompt) echoed by the CLI.
    User(UserMessage),
    /// The end of a turn.
    Result(ResultMessage),
    /// New transcript entries.
    TranscriptMirror(TranscriptMirror),
    /// Any other frame, kept as received.
    #[serde(untagged)]
    Other(RawFrame),
}

impl Frame {
    /// The wire `type` of the frame.
    pub fn frame_type(&self) -> &str {
        match self {
            Frame::ControlRequest(_) => "control_request",
            Frame::ControlResponse(_) => "control_response",
            Frame::ControlCancelRequest(_) => "control_cancel_request",
            Frame::System(_) => "system",
            Frame::StreamEvent(_) => "stream_event",
            Frame::Assistant(_) => "assistant",
            Frame::User(_) => "user",
            Frame::Result(_) => "result",
            Frame::TranscriptMirror(_) => "transcript_mirror",
            Frame::Other(raw) => raw.frame_type(),
        }
    }

    /// The frame as compact JSON (no newline). Typed frames are written with only their typed
    /// fields; [`Frame::Other`] and transcript entries are written back byte for byte. Meant for
    /// fakes of the CLI in tests.
    pub fn to_json(&self) -> String {
        // All fields are strings, numbers, bools, `Value`s or raw JSON with string keys: this
        // cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A frame this crate does not type, kept as the exact JSON text of the line.
///
/// Equality compares the text.
#[derive(Debug, Clone)]
pub struct RawFrame {
    frame_type: String,
    subtype: Option<String>,
    raw: Box<RawValue>,
}

impl RawFrame {
    /// The wire `type` (`"attachment"`, `"system"`, …).
    pub fn frame_type(&self) -> &str {
        &self.frame_type
    }

    /// The top-level `subtype`, if the frame has a string one (`"status"`, …).
    pub fn subtype(&self) -> Option<&str> {
        self.subtype.as_deref()
    }

    /// The frame's JSON text, exactly as received (without the line end).
    pub fn as_str(&self) -> &str {
        self.raw.get()
    }

    /// Decode the frame into a type of the caller's choosing (or [`serde_json::Value`]).
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, ProtocolError> {
        serde_json::from_str(self.raw.get())
            .map_err(|source| ProtocolError::MalformedFrame { frame_type: self.frame_type.clone(), source })
    }
}

impl PartialEq for RawFrame {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for RawFrame {}

impl Serialize for RawFrame {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(serializer)
    }
}

/// Parse one stdout line of the CLI.
///
/// The line may end in `\n` or `\r\n`. Never panics: garbage gives a [`ProtocolError`] that says
/// what was wrong.
///
/// - not JSON → [`ProtocolError::InvalidJson`]; JSON but not an object →
///   [`ProtocolError::NotAnObject`]; no string `type` → [`ProtocolError::MissingType`];
/// - a known `type` (or `system/init`) with fields that do not match →
///   [`ProtocolError::MalformedFrame`], or for a `control_request` with a known subtype
///   [`ProtocolError::MalformedRequest`] (which carries the id to answer);
/// - an unknown `type`, an unknown `system` subtype → [`Frame::Other`];
/// - a `control_request` with an unknown subtype → [`CliRequest::Other`].
pub fn parse_line(line: &str) -> Result<Frame, ProtocolError> {
    let text = object_text(line)?;
    let (frame_type, subtype) = route(text)?;
    match frame_type.as_str() {
        "control_request" => parse_control_request(text),
        "control_response" => typed(text, "control_response", Frame::ControlResponse),
        "control_cancel_request" => typed(text, "control_cancel_request", Frame::ControlCancelRequest),
        "system" if subtype.as_deref() == Some("init") => {
            typed(text, "system/init", |init| Frame::System(System::Init(init)))
        }
        "stream_event" => typed(text, "stream_event", Frame::StreamEvent),
        "assistant" => typed(text, "assistant", Frame::Assistant),
        "user" => typed(text, "user", Frame::User),
        "result" => typed(text, "result", Frame::Result),
        "transcript_mirror" => typed(text, "transcript_mirror", Frame::TranscriptMirror),
        _ => {
            let raw = serde_json::from_str(text).map_err(|source| ProtocolError::InvalidJson { source })?;
            Ok(Frame::Other(RawFrame { frame_type, subtype, raw }))
        }
    }
}

/// Parse one line the host wrote (what a fake CLI reads on its stdin).
///
/// Same error rules as [`parse_line`]; every `type` other than `control_request`,
/// `control_response` and `user` is a [`ProtocolError::MalformedFrame`].
pub fn parse_host_line(line: &str) -> Result<HostFrame, ProtocolError> {
    let text = object_text(line)?;
    let (frame_type, _) = route(text)?;
    serde_json::from_str(text).map_err(|source| ProtocolError::MalformedFrame { frame_type, source })
}

/// Trim the line end and check that the text is a JSON object.
fn object_text(line: &str) -> Result<&str, ProtocolError> {
    let text = line.trim();
    if text.is_empty() {
        return Err(ProtocolError::EmptyLine);
    }
    if !text.starts_with('{') {
        return Err(match serde_json::from_str::<IgnoredAny>(text) {
            Ok(_) => ProtocolError::NotAnObject,
            Err(source) => ProtocolError::InvalidJson { source },
        });
    }
    Ok(text)
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(rename = "type", borrow, default)]
    frame_type: Option<Cow<'a, str>>,
    #[serde(default)]
    subtype: Option<Value>,
}

/// Read `type` (and a string `subtype`) of an object line.
fn route(text: &str) -> Result<(String, Option<String>), ProtocolError> {
    let envelope: Envelope<'_> = serde_json::from_str(text).map_err(|source| {
        if source.is_data() {
            ProtocolError::MissingType { detail: source.to_string() }
        } else {
            ProtocolError::InvalidJson { source }
        }
    })?;
    let frame_type = envelope
        .frame_type
        .ok_or_else(|| ProtocolError::MissingType { detail: "the object has no `type` key".into() })?
        .into_owned();
    let subtype = match envelope.subtype {
        Some(Value::String(s)) => Some(s),
        _ => None,
    };
    Ok((frame_type, subtype))
}

fn typed<T: DeserializeOwned>(
    text: &str,
    frame_type: &str,
    wrap: impl FnOnce(T) -> Frame,
) -> Result<Frame, ProtocolError> {
    serde_json::from_str(text)
        .map(wrap)
        .map_err(|source| ProtocolError::MalformedFrame { frame_type: frame_type.into(), source })
}

#[derive(Deserialize)]
struct RawControlRequest<'a> {
    request_id: String,
    #[serde(borrow)]
    request: &'a RawValue,
}

#[derive(Deserialize)]
struct Subtype<'a> {
    #[serde(borrow, default)]
    subtype: Option<Cow<'a, str>>,
}

/// A `control_request`: strict for the subtypes the host answers, whole for the others.
fn parse_control_request(text: &str) -> Result<Frame, ProtocolError> {
    let envelope: RawControlRequest<'_> = serde_json::from_str(text)
        .map_err(|source| ProtocolError::MalformedFrame { frame_type: "control_request".into(), source })?;
    let body = envelope.request.get();
    let subtype = serde_json::from_str::<Subtype<'_>>(body)
        .ok()
        .and_then(|s| s.subtype)
        .map(Cow::into_owned)
        .unwrap_or_default();
    let strict = |result: Result<CliRequest, serde_json::Error>| {
        result.map_err(|source| ProtocolError::MalformedRequest {
            request_id: envelope.request_id.clone(),
            subtype: subtype.clone(),
            source,
        })
    };
    let request = match subtype.as_str() {
        "hook_callback" => strict(serde_json::from_str(body).map(CliRequest::HookCallback))?,
        "can_use_tool" => strict(serde_json::from_str(body).map(CliRequest::CanUseTool))?,
        "mcp_message" => strict(serde_json::from_str(body).map(CliRequest::McpMessage))?,
        _ => strict(serde_json::from_str(body).map(CliRequest::Other))?,
    };
    Ok(Frame::ControlRequest(ControlRequest { request_id: envelope.request_id, request }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn garbage_lines_give_errors_that_say_what_was_wrong() {
        assert!(matches!(parse_line(""), Err(ProtocolError::EmptyLine)));
        assert!(matches!(parse_line("  \r\n"), Err(ProtocolError::EmptyLine)));
        assert!(matches!(parse_line("hello"), Err(ProtocolError::InvalidJson { .. })));
        assert!(matches!(parse_line("{\"type\":"), Err(ProtocolError::InvalidJson { .. })));
        assert!(matches!(parse_line("[1,2]"), Err(ProtocolError::NotAnObject)));
        assert!(matches!(parse_line("\"result\""), Err(ProtocolError::NotAnObject)));
        assert!(matches!(parse_line("{}"), Err(ProtocolError::MissingType { .. })));
        assert!(matches!(parse_line(r#"{"type":7}"#), Err(ProtocolError::MissingType { .. })));
        assert!(matches!(parse_line(r#"{"type":"x"} {}"#), Err(ProtocolError::InvalidJson { .. })));
    }

    #[test]
    fn a_known_type_with_bad_fields_is_malformed_and_named() {
        let err = parse_line(r#"{"type":"result","subtype":"success"}"#).unwrap_err();
        assert!(err.to_string().starts_with("`result` frame is malformed: missing field"), "{err}");
        let err = parse_line(r#"{"type":"system","subtype":"init"}"#).unwrap_err();
        assert!(err.to_string().contains("`system/init`"), "{err}");
    }

    #[test]
    fn a_malformed_hook_callback_keeps_the_request_id_to_answer() {
        let err = parse_line(
            r#"{"type":"control_request","request_id":"r9","request":{"subtype":"hook_callback","callback_id":"hook_0"}}"#,
        )
        .unwrap_err();
        match err {
            ProtocolError::MalformedRequest { request_id, subtype, .. } => {
                assert_eq!((request_id.as_str(), subtype.as_str()), ("r9", "hook_callback"));
            }
            other => panic!("expected MalformedRequest, got {other:?}"),
        }
    }

    #[test]
    fn unknown_types_and_system_subtypes_pass_through_byte_exact() {
        let line = r#"{"type":"system","subtype":"status","status":"requesting", "session_id":"s"}"#;
        let Frame::Other(raw) = parse_line(line).unwrap() else { panic!("typed") };
        assert_eq!((raw.frame_type(), raw.subtype()), ("system", Some("status")));
        assert_eq!(raw.as_str(), line);
        assert_eq!(parse_line(line).unwrap().to_json(), line);
        let v: Value = raw.decode().unwrap();
        assert_eq!(v["status"], "requesting");

        let Frame::Other(raw) = parse_line(r#"{"type":"keep_alive"}"#).unwrap() else { panic!() };
        assert_eq!(raw.frame_type(), "keep_alive");
    }

    #[test]
    fn line_ends_are_ignored() {
        let frame = parse_line("{\"type\":\"control_cancel_request\",\"request_id\":\"x\"}\r\n").unwrap();
        assert_eq!(frame, Frame::ControlCancelRequest(ControlCancelRequest { request_id: "x".into() }));
    }

    #[test]
    fn unknown_control_request_subtypes_can_still_be_answered() {
        let frame = parse_line(
            r#"{"type":"control_request","request_id":"r1","request":{"subtype":"elicitation","q":1}}"#,
        )
        .unwrap();
        let Frame::ControlRequest(req) = frame else { panic!() };
        assert_eq!(req.request, CliRequest::Other(json!({"subtype": "elicitation", "q": 1})));
        assert_eq!(req.request.subtype(), "elicitation");
    }

    #[test]
    fn typed_frames_serialize_with_their_type_tags() {
        let frame =
            parse_line(r#"{"type":"system","subtype":"init","session_id":"s","tools":[],"mcp_servers":[]}"#)
                .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&frame.to_json()).unwrap(),
            json!({"type": "system", "subtype": "init", "session_id": "s", "tools": [], "mcp_servers": []})
        );
    }

    #[test]
    fn every_prefix_of_a_frame_fails_cleanly_or_parses() {
        let line = r#"{"type":"control_request","request_id":"a","request":{"subtype":"mcp_message","server_name":"tools","message":{"jsonrpc":"2.0","method":"tools/list","id":1}}}"#;
        for end in 0..line.len() {
            assert!(parse_line(&line[..end]).is_err(), "prefix {end} parsed");
        }
        assert!(parse_line(line).is_ok());
    }

    #[test]
    fn host_lines_parse_back_for_a_fake_cli() {
        let line = HostFrame::prompt("hi").to_line();
        assert_eq!(parse_host_line(&line).unwrap(), HostFrame::prompt("hi"));
        assert!(matches!(parse_host_line(r#"{"type":"result"}"#), Err(ProtocolError::MalformedFrame { .. })));
    }
}
