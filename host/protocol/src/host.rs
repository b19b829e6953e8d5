//! Frames the host writes to the CLI's stdin, and their builders.
//!
//! Read [`HostFrame`] first: every line the host writes is one, made by one of its constructors
//! and turned into bytes with [`HostFrame::to_line`]. The payload types beside it are the
//! answers the host gives: [`HookAnswer`] for `hook_callback`, [`PermissionAnswer`] for
//! `can_use_tool`, a JSON-RPC value for `mcp_message`; and the requests it makes:
//! [`Initialize`] and the other [`HostRequest`]s.
//!
//! This module owns the JSON shapes only. Which answer to give is the engine's business, and
//! the argv is built elsewhere.
//!
//! ```
//! use tollgate_protocol::{HookAnswer, HookMatcher, HostFrame, Initialize};
//!
//! let init = Initialize::new()
//!     .pre_tool_use(HookMatcher::new("mcp__tools__.*", "hook_0").timeout(30))
//!     .sdk_mcp_server("tools");
//! let line = HostFrame::initialize("req_1", init).to_line();
//! assert!(line.starts_with(r#"{"type":"control_request","request_id":"req_1""#));
//! assert!(line.ends_with('\n'));
//!
//! let answer = HostFrame::hook_answer("cli-req-7", HookAnswer::defer().reason("host will decide later"));
//! assert!(answer.to_line().contains(r#""permissionDecision":"defer""#));
//! ```
//!
//! # Caveats
//!
//! - With `--await-initialize` the `initialize` request must be the very first line.
//! - Give every hook matcher a [`HookMatcher::timeout`]: without one an unanswered hook blocks
//!   the turn for 600 s.
//! - An empty prompt is not ignored by the CLI: it becomes a `(no content)` user message and a
//!   model call. A resumed segment sends no prompt at all.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::control::ControlResponse;
use crate::hook::{AppHookOutput, HookEventName};

/// One line from the host to the CLI.
///
/// ## Wire format
///
/// ```json
/// {"type":"control_request","request_id":"req_1","request":{"subtype":"initialize",…}}
/// {"type":"control_response","response":{"subtype":"success","request_id":"<cli id>","response":{…}}}
/// {"type":"control_response","response":{"subtype":"error","request_id":"<cli id>","error":"…"}}
/// {"type":"user","session_id":"","message":{"role":"user","content":[{"type":"text","text":"hi"}]},"parent_tool_use_id":null}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum HostFrame {
    /// A request of the host's own; the CLI answers with a
    /// [`Frame::ControlResponse`](crate::Frame::ControlResponse) carrying the same id.
    ControlRequest {
        /// Chosen by the host; unique per process.
        request_id: String,
        /// What the host asks for.
        request: HostRequest,
    },
    /// The host's answer to one of the CLI's requests.
    ControlResponse(ControlResponse),
    /// A user prompt.
    User(UserPrompt),
}

impl HostFrame {
    /// `initialize`. Must be the first line with `--await-initialize`.
    pub fn initialize(request_id: impl Into<String>, init: Initialize) -> Self {
        Self::request(request_id, HostRequest::Initialize(init))
    }

    /// `claim_session`: binds a CLI started with `--await-claim` (a parked spare) to its session.
    pub fn claim_session(request_id: impl Into<String>, claim: ClaimSession) -> Self {
        Self::request(request_id, HostRequest::ClaimSession(claim))
    }

    /// `interrupt`: stop the running turn.
    pub fn interrupt(request_id: impl Into<String>) -> Self {
        Self::request(request_id, HostRequest::Interrupt)
    }

    /// `set_permission_mode` (`"default"`, `"plan"`, …).
    pub fn set_permission_mode(request_id: impl Into<String>, mode: impl Into<String>) -> Self {
        Self::request(request_id, HostRequest::SetPermissionMode { mode: mode.into() })
    }

    /// Any host request.
    pub fn request(request_id: impl Into<String>, request: HostRequest) -> Self {
        HostFrame::ControlRequest { request_id: request_id.into(), request }
    }

    /// The answer to a `hook_callback` request.
    pub fn hook_answer(request_id: impl Into<String>, answer: HookAnswer) -> Self {
        HostFrame::ControlResponse(ControlResponse::success(request_id, answer.to_value()))
    }

    /// The answer to an application hook's `hook_callback` request.
    pub fn app_hook_answer(request_id: impl Into<String>, answer: &AppHookOutput) -> Self {
        HostFrame::ControlResponse(ControlResponse::success(request_id, answer.to_value()))
    }

    /// The answer to a `can_use_tool` request.
    pub fn permission_answer(request_id: impl Into<String>, answer: PermissionAnswer) -> Self {
        HostFrame::ControlResponse(ControlResponse::success(request_id, to_value(&answer)))
    }

    /// The answer to an `mcp_message` request: `jsonrpc` is the server's complete JSON-RPC
    /// message (`{"jsonrpc":"2.0","id":…,"result":…}` or `…"error":…`), sent as
    /// `{"mcp_response": jsonrpc}`.
    pub fn mcp_response(request_id: impl Into<String>, jsonrpc: Value) -> Self {
        HostFrame::ControlResponse(ControlResponse::success(request_id, json!({ "mcp_response": jsonrpc })))
    }

    /// The answer to an `mcp_message` that is a notification: an empty JSON-RPC result with
    /// id 0, as both Agent SDKs send.
    pub fn mcp_notification_ack(request_id: impl Into<String>) -> Self {
        Self::mcp_response(request_id, json!({"jsonrpc": "2.0", "result": {}, "id": 0}))
    }

    /// An error answer to any CLI request (unknown subtype, host failure).
    pub fn error_response(request_id: impl Into<String>, message: impl Into<String>) -> Self {
        HostFrame::ControlResponse(ControlResponse::error(request_id, message))
    }

    /// A user prompt made of one text (sent as one text block, as the TypeScript SDK does).
    pub fn prompt(text: impl Into<String>) -> Self {
        HostFrame::User(UserPrompt::blocks([text.into()]))
    }

    /// The frame as one compact JSON line, ending in `\n`.
    pub fn to_line(&self) -> String {
        let mut line = self.to_json();
        line.push('\n');
        line
    }

    /// The frame as compact JSON, without the newline.
    pub fn to_json(&self) -> String {
        // Every field is a string, a number, a bool or a `Value`, with string map keys, so
        // serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn to_value<T: Serialize>(value: &T) -> Value {
    // Same reasoning as `to_json`: these types always serialize.
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// A request the host sends, tagged by `subtype`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "subtype", rename_all = "snake_case")]
pub enum HostRequest {
    /// Register hooks and sdk MCP servers. Answered with an [`InitializeResponse`](crate::InitializeResponse).
    Initialize(Initialize),
    /// Bind a parked spare to its session. Answered with `{"status":"ok","session_id":…,…}`, or
    /// an error whose message starts with a reason token (`project_settings_not_claimable`,
    /// `cwd_not_found`, …); the spare then stays unclaimed and takes no prompt.
    ClaimSession(ClaimSession),
    /// `{"subtype":"interrupt"}`. Answered with `{"still_queued":[]}`.
    Interrupt,
    /// `{"subtype":"set_permission_mode","mode":…}`. Answered with `{"mode":…}`.
    SetPermissionMode {
        /// The new mode.
        mode: String,
    },
    /// Any other request (`mcp_status`, `set_model`, …), written as given; it must hold its own
    /// `subtype`.
    #[serde(untagged)]
    Other(Value),
}

/// The `initialize` request body.
///
/// Defaults ([`Initialize::new`]): no hooks, no sdk MCP servers (the `sdkMcpServers` key is then
/// left out).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Initialize {
    /// Hook matchers by event.
    #[serde(default)]
    pub hooks: Hooks,
    /// Names of the in-process MCP servers the host serves over `mcp_message`.
    #[serde(rename = "sdkMcpServers", default, skip_serializing_if = "Vec::is_empty")]
    pub sdk_mcp_servers: Vec<String>,
    /// The system prompt, in place of `--system-prompt` (as the TypeScript SDK sends it). The
    /// model's request is the same either way (observed with CLI 2.1.328).
    #[serde(rename = "systemPrompt", default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Text appended to the system prompt, in place of `--append-system-prompt`.
    #[serde(rename = "appendSystemPrompt", default, skip_serializing_if = "Option::is_none")]
    pub append_system_prompt: Option<String>,
    /// External MCP servers by name (the `.mcp.json` shape), in place of `--mcp-config`: their
    /// configuration (headers, tokens, environment) then never appears in the CLI's argv, which
    /// every process of its user can read. Needs `--await-initialize`.
    #[serde(rename = "mcpServers", default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub mcp_servers: serde_json::Map<String, serde_json::Value>,
}

impl Initialize {
    /// No hooks, no servers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a `PreToolUse` matcher.
    #[must_use]
    pub fn pre_tool_use(self, matcher: HookMatcher) -> Self {
        self.hook(HookEventName::PreToolUse, matcher)
    }

    /// Add a matcher for `event`, after its others.
    #[must_use]
    pub fn hook(mut self, event: HookEventName, matcher: HookMatcher) -> Self {
        self.hooks.of_mut(event).push(matcher);
        self
    }

    /// Declare an sdk MCP server by name (e.g. `"tools"`, tools then appear as
    /// `mcp__tools__<name>`).
    #[must_use]
    pub fn sdk_mcp_server(mut self, name: impl Into<String>) -> Self {
        self.sdk_mcp_servers.push(name.into());
        self
    }
}

/// The `claim_session` request body (CLI 2.1.328's schema; its keys are snake_case, unlike
/// `initialize`'s). A CLI started with `--await-claim` boots with the launch-level options in a
/// directory of its own, takes `initialize` (its hooks) while parked, and waits for this: the
/// session's working directory (it then runs as if spawned there), its prompts and its sdk MCP
/// servers (connected now: their handshake runs before the answer).
///
/// ```
/// use tollgate_protocol::{ClaimSession, HostFrame};
///
/// let claim = ClaimSession::new("/ws/s-1").system_prompt(Some("Be brief.".into())).sdk_mcp_server("tools");
/// let line = HostFrame::claim_session("claim", claim).to_line();
/// assert!(line.contains(r#""subtype":"claim_session","cwd":"/ws/s-1","system_prompt":["Be brief."]"#));
/// assert!(line.contains(r#""sdk_mcp_servers":["tools"]"#) && !line.contains("append_system_prompt"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimSession {
    /// The session's working directory: absolute, existing.
    pub cwd: String,
    /// The system prompt, as `initialize.systemPrompt` (the claim takes its parts as a list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<Vec<String>>,
    /// Text appended to the system prompt, as `initialize.appendSystemPrompt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_system_prompt: Option<String>,
    /// The session's final set of sdk MCP servers; those not registered while parked connect now.
    #[serde(default)]
    pub sdk_mcp_servers: Vec<String>,
}

impl ClaimSession {
    /// A claim of the working directory `cwd`, with no prompts and no sdk MCP servers.
    pub fn new(cwd: impl Into<String>) -> Self {
        ClaimSession {
            cwd: cwd.into(),
            system_prompt: None,
            append_system_prompt: None,
            sdk_mcp_servers: Vec::new(),
        }
    }

    /// Sets the system prompt (one part), or none.
    #[must_use]
    pub fn system_prompt(mut self, prompt: Option<String>) -> Self {
        self.system_prompt = prompt.map(|p| vec![p]);
        self
    }

    /// Sets the text appended to the system prompt, or none.
    #[must_use]
    pub fn append_system_prompt(mut self, prompt: Option<String>) -> Self {
        self.append_system_prompt = prompt;
        self
    }

    /// Adds an sdk MCP server by name.
    #[must_use]
    pub fn sdk_mcp_server(mut self, name: impl Into<String>) -> Self {
        self.sdk_mcp_servers.push(name.into());
        self
    }
}

/// The `hooks` object of [`Initialize`]: event name → matchers, for the events Tollgate registers
/// ([`HookEventName`]): the gate's `PreToolUse` and an application's hooks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hooks {
    /// `PreToolUse` matchers, tried in order.
    #[serde(rename = "PreToolUse", default, skip_serializing_if = "Vec::is_empty")]
    pub pre_tool_use: Vec<HookMatcher>,
    /// `PostToolUse` matchers.
    #[serde(rename = "PostToolUse", default, skip_serializing_if = "Vec::is_empty")]
    pub post_tool_use: Vec<HookMatcher>,
    /// `UserPromptSubmit` matchers.
    #[serde(rename = "UserPromptSubmit", default, skip_serializing_if = "Vec::is_empty")]
    pub user_prompt_submit: Vec<HookMatcher>,
    /// `Stop` matchers.
    #[serde(rename = "Stop", default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<HookMatcher>,
    /// `SubagentStop` matchers.
    #[serde(rename = "SubagentStop", default, skip_serializing_if = "Vec::is_empty")]
    pub subagent_stop: Vec<HookMatcher>,
    /// `PreCompact` matchers.
    #[serde(rename = "PreCompact", default, skip_serializing_if = "Vec::is_empty")]
    pub pre_compact: Vec<HookMatcher>,
}

impl Hooks {
    /// The matchers of `event`.
    pub fn of_mut(&mut self, event: HookEventName) -> &mut Vec<HookMatcher> {
        match event {
            HookEventName::PreToolUse => &mut self.pre_tool_use,
            HookEventName::PostToolUse => &mut self.post_tool_use,
            HookEventName::UserPromptSubmit => &mut self.user_prompt_submit,
            HookEventName::Stop => &mut self.stop,
            HookEventName::SubagentStop => &mut self.subagent_stop,
            HookEventName::PreCompact => &mut self.pre_compact,
        }
    }
}

/// One hook matcher: `{"matcher":"mcp__tools__.*","hookCallbackIds":["hook_0"],"timeout":30}`.
///
/// Defaults ([`HookMatcher::new`]): no `timeout` (the CLI then waits 600 s for an answer: set
/// one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookMatcher {
    /// Tool-name pattern (regex-like, e.g. `mcp__tools__.*`); `None` (sent as `null`) matches
    /// every tool, built-ins included.
    pub matcher: Option<String>,
    /// Ids the CLI echoes back as `callback_id`.
    #[serde(rename = "hookCallbackIds")]
    pub hook_callback_ids: Vec<String>,
    /// Seconds the CLI waits for the answer before it cancels the request and tells the model
    /// the hook did not respond (the tool does not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u32>,
}

impl HookMatcher {
    /// A matcher for `pattern` calling back with `callback_id`.
    pub fn new(pattern: impl Into<String>, callback_id: impl Into<String>) -> Self {
        HookMatcher {
            matcher: Some(pattern.into()),
            hook_callback_ids: vec![callback_id.into()],
            timeout: None,
        }
    }

    /// A matcher for every tool (`"matcher":null`).
    pub fn all_tools(callback_id: impl Into<String>) -> Self {
        HookMatcher { matcher: None, hook_callback_ids: vec![callback_id.into()], timeout: None }
    }

    /// Set the answer timeout in seconds.
    #[must_use]
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.timeout = Some(seconds);
        self
    }
}

/// A `PreToolUse` permission decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PermissionDecision {
    /// Run the tool (a `can_use_tool` about the same call follows only when it writes to a path the
    /// CLI guards, such as `.claude/`).
    Allow,
    /// Do not run it; the model gets `PreToolUse:<tool> hook error: <reason>`.
    Deny,
    /// Ask through `can_use_tool`, with the reason as `decision_reason`.
    Ask,
    /// Do not run it and end the segment with a deferred `result`.
    Defer,
}

/// The answer to a `PreToolUse` `hook_callback`.
///
/// ```json
/// {"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow",
///   "permissionDecisionReason":"…","updatedInput":{…}}}
/// ```
///
/// [`HookAnswer::no_decision`] is `{}`: the CLI then runs its normal permission flow.
/// [`HookAnswer::rewrite`] is `updatedInput` without a decision:
///
/// ```json
/// {"hookSpecificOutput":{"hookEventName":"PreToolUse","updatedInput":{…}}}
/// ```
///
/// On CLI 2.1.328 that is the one shape of a rewrite that survives another matcher's decision:
/// an `updatedInput` sent with `allow` was dropped when a later matcher answered `defer`, and one
/// sent with `defer` was dropped too; a decision-less one is applied, and a deferred call carries
/// it (`tollgate-claude`'s `tests/all/real_cli.rs`).
///
/// It (de)serializes to and from that payload, so a fake CLI can read it with
/// [`ControlResponse::decode`](crate::ControlResponse::decode); an invalid
/// `permissionDecision` is then an error (the real CLI treats it as no decision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "HookOutputWire", into = "HookOutputWire")]
pub struct HookAnswer {
    /// `None` = `{}`, no decision.
    pub decision: Option<PermissionDecision>,
    /// `permissionDecisionReason`; for `deny` the model reads it. Sent only with a decision.
    pub reason: Option<String>,
    /// `updatedInput`: replaces the tool's arguments (with `allow`, or alone: a rewrite).
    pub updated_input: Option<Value>,
    /// `additionalContext`: text the model reads beside the call (CLI 2.1.328 accepts it in a
    /// `PreToolUse` answer).
    pub additional_context: Option<String>,
}

impl HookAnswer {
    /// Run the tool.
    pub fn allow() -> Self {
        Self::decide(PermissionDecision::Allow)
    }

    /// Do not run the tool; `reason` reaches the model.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self::decide(PermissionDecision::Deny).reason(reason)
    }

    /// Ask through `can_use_tool`.
    pub fn ask() -> Self {
        Self::decide(PermissionDecision::Ask)
    }

    /// End the segment with this call deferred.
    pub fn defer() -> Self {
        Self::decide(PermissionDecision::Defer)
    }

    /// `{}`: let the CLI's permission flow decide.
    pub fn no_decision() -> Self {
        HookAnswer { decision: None, reason: None, updated_input: None, additional_context: None }
    }

    /// Replace the tool's arguments and decide nothing: the other matchers (and then the CLI's
    /// permission flow) decide the call with `input`.
    pub fn rewrite(input: Value) -> Self {
        HookAnswer { decision: None, reason: None, updated_input: Some(input), additional_context: None }
    }

    fn decide(decision: PermissionDecision) -> Self {
        HookAnswer { decision: Some(decision), reason: None, updated_input: None, additional_context: None }
    }

    /// Set `permissionDecisionReason`.
    #[must_use]
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Set `updatedInput`.
    #[must_use]
    pub fn updated_input(mut self, input: Value) -> Self {
        self.updated_input = Some(input);
        self
    }

    /// Set `additionalContext`.
    #[must_use]
    pub fn additional_context(mut self, text: impl Into<String>) -> Self {
        self.additional_context = Some(text.into());
        self
    }

    /// The JSON payload of the control response.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// The wire form of [`HookAnswer`].
#[derive(Serialize, Deserialize)]
struct HookOutputWire {
    #[serde(rename = "hookSpecificOutput", default, skip_serializing_if = "Option::is_none")]
    specific: Option<PreToolUseOutputWire>,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PreToolUseOutputWire {
    hook_event_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    permission_decision: Option<PermissionDecision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    permission_decision_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    updated_input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    additional_context: Option<String>,
}

impl From<HookAnswer> for HookOutputWire {
    fn from(answer: HookAnswer) -> Self {
        let specific =
            (answer.decision.is_some() || answer.updated_input.is_some()).then(|| PreToolUseOutputWire {
                hook_event_name: "PreToolUse".into(),
                permission_decision: answer.decision,
                permission_decision_reason: answer.reason.filter(|_| answer.decision.is_some()),
                updated_input: answer.updated_input,
                additional_context: answer.additional_context,
            });
        HookOutputWire { specific }
    }
}

impl From<HookOutputWire> for HookAnswer {
    fn from(wire: HookOutputWire) -> Self {
        match wire.specific {
            Some(out) => HookAnswer {
                decision: out.permission_decision,
                reason: out.permission_decision_reason,
                updated_input: out.updated_input,
                additional_context: out.additional_context,
            },
            None => HookAnswer::no_decision(),
        }
    }
}

/// The answer to a `can_use_tool` request, tagged by `behavior`.
///
/// ```json
/// {"behavior":"allow","updatedInput":{…}}
/// {"behavior":"deny","message":"…","interrupt":true}
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "behavior", rename_all = "lowercase")]
pub enum PermissionAnswer {
    /// Run the tool. Both SDKs send the original input as `updatedInput`; `None` and `{}` also
    /// keep the original input.
    Allow {
        /// Replacement arguments.
        #[serde(rename = "updatedInput", default, skip_serializing_if = "Option::is_none")]
        updated_input: Option<Value>,
    },
    /// Do not run it; the model reads `message` verbatim.
    Deny {
        /// Text for the model.
        message: String,
        /// `true` ends the turn (`terminal_reason:"aborted_tools"`, `is_error:true`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupt: bool,
    },
}

impl PermissionAnswer {
    /// Allow with these arguments (pass the request's `input` to keep it).
    pub fn allow(input: Value) -> Self {
        PermissionAnswer::Allow { updated_input: Some(input) }
    }

    /// Deny with `message`; the turn goes on.
    pub fn deny(message: impl Into<String>) -> Self {
        PermissionAnswer::Deny { message: message.into(), interrupt: false }
    }
}

/// A `user` line from the host: a prompt.
///
/// Build it with [`UserPrompt::text`] (content as a plain string) or [`UserPrompt::blocks`]
/// (one text block per text). `session_id` is sent empty and `parent_tool_use_id` as `null`,
/// as the TypeScript SDK does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserPrompt {
    /// May be empty.
    #[serde(default)]
    pub session_id: String,
    /// `{"role":"user","content":…}`.
    pub message: PromptMessage,
    /// Always `null` for a top-level prompt.
    #[serde(default)]
    pub parent_tool_use_id: Option<String>,
}

/// `{"role":"user","content":…}` of a [`UserPrompt`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptMessage {
    /// `"user"`.
    pub role: String,
    /// A string or a list of content blocks.
    pub content: Value,
}

impl UserPrompt {
    /// Content as one plain string.
    pub fn text(text: impl Into<String>) -> Self {
        Self::with_content(Value::String(text.into()))
    }

    /// Content as one `{"type":"text","text":…}` block per text, in order.
    pub fn blocks<I, S>(texts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let blocks = texts.into_iter().map(|t| json!({"type": "text", "text": t.into()})).collect();
        Self::with_content(Value::Array(blocks))
    }

    /// Content as given: a string, or a list of content blocks (text, images).
    pub fn content(content: Value) -> Self {
        Self::with_content(content)
    }

    fn with_content(content: Value) -> Self {
        UserPrompt {
            session_id: String::new(),
            message: PromptMessage { role: "user".into(), content },
            parent_tool_use_id: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(frame: &HostFrame) -> Value {
        serde_json::from_str(&frame.to_json()).unwrap()
    }

    #[test]
    fn initialize_carries_matchers_with_timeout_and_the_sdk_server() {
        let init = Initialize::new()
            .pre_tool_use(HookMatcher::new("mcp__tools__.*", "hook_0").timeout(30))
            .pre_tool_use(HookMatcher::all_tools("hook_1"))
            .sdk_mcp_server("tools");
        assert_eq!(
            value(&HostFrame::initialize("req_1", init)),
            json!({"type": "control_request", "request_id": "req_1", "request": {
                "subtype": "initialize",
                "hooks": {"PreToolUse": [
                    {"matcher": "mcp__tools__.*", "hookCallbackIds": ["hook_0"], "timeout": 30},
                    {"matcher": null, "hookCallbackIds": ["hook_1"]}
                ]},
                "sdkMcpServers": ["tools"]
            }})
        );
    }

    #[test]
    fn interrupt_and_set_permission_mode_have_only_their_subtype_fields() {
        assert_eq!(
            value(&HostFrame::interrupt("r")),
            json!({"type": "control_request", "request_id": "r", "request": {"subtype": "interrupt"}})
        );
        assert_eq!(
            value(&HostFrame::set_permission_mode("r", "plan")),
            json!({"type": "control_request", "request_id": "r", "request": {"subtype": "set_permission_mode", "mode": "plan"}})
        );
    }

    #[test]
    fn hook_deny_carries_the_reason_and_the_event_name() {
        assert_eq!(
            HookAnswer::deny("no").to_value(),
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "no"}})
        );
    }

    #[test]
    fn hook_no_decision_is_an_empty_object() {
        assert_eq!(HookAnswer::no_decision().to_value(), json!({}));
    }

    #[test]
    fn hook_allow_with_updated_input_replaces_the_arguments() {
        let v = HookAnswer::allow().updated_input(json!({"text": "x"})).to_value();
        assert_eq!(v["hookSpecificOutput"]["updatedInput"], json!({"text": "x"}));
        assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "allow");
    }

    #[test]
    fn a_hook_rewrite_sends_updated_input_without_a_decision() {
        assert_eq!(
            HostFrame::hook_answer("r1", HookAnswer::rewrite(json!({"text": "x"}))).to_json(),
            r#"{"type":"control_response","response":{"subtype":"success","request_id":"r1","response":{"hookSpecificOutput":{"hookEventName":"PreToolUse","updatedInput":{"text":"x"}}}}}"#
        );
    }

    #[test]
    fn hook_answers_read_back_from_their_payload() {
        let answers = [
            HookAnswer::allow().reason("ok").updated_input(json!({"a": 1})),
            HookAnswer::deny("no"),
            HookAnswer::ask(),
            HookAnswer::defer(),
            HookAnswer::no_decision(),
            HookAnswer::rewrite(json!({"b": 2})),
        ];
        for answer in answers {
            let back: HookAnswer = serde_json::from_value(answer.to_value()).unwrap();
            assert_eq!(back, answer);
        }
        let invalid =
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "maybe"}});
        assert!(serde_json::from_value::<HookAnswer>(invalid).is_err());
    }

    #[test]
    fn host_built_frames_refuse_fields_they_do_not_model() {
        let line = r#"{"type":"user","session_id":"","message":{"role":"user","content":"hi"},"parent_tool_use_id":null,"priority":"now"}"#;
        assert!(serde_json::from_str::<HostFrame>(line).is_err());
    }

    #[test]
    fn permission_deny_sends_interrupt_only_when_set() {
        let plain = to_value(&PermissionAnswer::deny("no"));
        assert_eq!(plain, json!({"behavior": "deny", "message": "no"}));
        let stop = to_value(&PermissionAnswer::Deny { message: "no".into(), interrupt: true });
        assert_eq!(stop, json!({"behavior": "deny", "message": "no", "interrupt": true}));
    }

    #[test]
    fn text_prompt_is_a_plain_string_and_blocks_prompt_a_list() {
        assert_eq!(
            value(&HostFrame::User(UserPrompt::text("hi"))),
            json!({"type": "user", "session_id": "", "message": {"role": "user", "content": "hi"}, "parent_tool_use_id": null})
        );
        assert_eq!(
            value(&HostFrame::User(UserPrompt::blocks(["a", "b"])))["message"]["content"],
            json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
        );
    }

    #[test]
    fn host_lines_are_compact_and_end_in_one_newline() {
        let line = HostFrame::mcp_notification_ack("r").to_line();
        assert!(!line.contains(": ") && !line.contains(", "));
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.ends_with('\n'));
    }

    #[test]
    fn host_frames_read_back_into_the_same_value() {
        let frames = [
            HostFrame::initialize("a", Initialize::new().pre_tool_use(HookMatcher::new("x", "h").timeout(5))),
            HostFrame::interrupt("b"),
            HostFrame::hook_answer("c", HookAnswer::defer()),
            HostFrame::error_response("d", "nope"),
            HostFrame::prompt("hi"),
        ];
        for frame in frames {
            let back: HostFrame = serde_json::from_str(&frame.to_json()).unwrap();
            assert_eq!(back, frame);
        }
    }
}
