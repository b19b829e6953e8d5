//! Hook events: what each `hook_callback` carries ([`HookEvent`]), and the one answer shape an
//! application hook may send back ([`AppHookOutput`]).
//!
//! Read [`HookEvent`] first. A `hook_callback` request's `input` names its event in
//! `hook_event_name`; [`HookEvent`] reads it into the input type of that event. The gate answers
//! only `PreToolUse` ([`HookInput`], with [`crate::HookAnswer`]); the other events, and the
//! application's own `PreToolUse` matcher, are answered with an [`AppHookOutput`], which has no
//! field for a permission decision: what an application hook says can add context, block or stop,
//! never allow, ask or defer a call.
//!
//! ## Wire format
//!
//! Inputs (CLI 2.1.328; the common `session_id`, `transcript_path`, `cwd`, `prompt_id`,
//! `permission_mode` and `effort` fields left out here):
//!
//! ```json
//! {"hook_event_name":"PreToolUse","tool_name":"mcp__tools__lookup_order","tool_input":{"order_id":"7"},"tool_use_id":"toolu_1","mcp_server":{"name":"tools","source":"sdk"}}
//! {"hook_event_name":"PostToolUse","tool_name":"mcp__tools__lookup_order","tool_input":{"order_id":"7"},"tool_response":[{"type":"text","text":"…"}],"tool_use_id":"toolu_1","duration_ms":15}
//! {"hook_event_name":"UserPromptSubmit","prompt":"Refund order 7"}
//! {"hook_event_name":"Stop","stop_hook_active":false,"last_assistant_message":"…","background_tasks":[],"session_crons":[]}
//! {"agent_id":"a2a0…","agent_type":"general-purpose","hook_event_name":"SubagentStop","stop_hook_active":false,"agent_transcript_path":"…","last_assistant_message":"…"}
//! {"hook_event_name":"PreCompact","trigger":"manual","custom_instructions":null}
//! ```
//!
//! A call made inside a subagent carries `agent_id` and `agent_type` (PreToolUse, PostToolUse).
//!
//! Answers ([`AppHookOutput`]), every field optional:
//!
//! ```json
//! {"continue":false,"stopReason":"…","decision":"block","reason":"…",
//!  "hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"…","updatedInput":{…}}}
//! ```
//!
//! What CLI 2.1.328 did with each (tests in `tollgate-claude`'s `tests/all/hooks.rs`):
//!
//! | event | `decision:"block"` + reason | `continue:false` | `additionalContext` |
//! | --- | --- | --- | --- |
//! | `PreToolUse` | the call is denied; the model reads `PreToolUse:<tool> hook error: <reason>` | the call is still decided by the other matchers; the turn stops after it | read by the model beside the call |
//! | `PostToolUse` | the output stands; the model also reads `PostToolUse:<tool> hook blocking error …: <reason>` | the turn stops after the result (`terminal_reason: "hook_stopped"`) | read by the model after the result |
//! | `UserPromptSubmit` | the prompt is dropped, no model call; the result is `UserPromptSubmit operation blocked by hook: …` | the same, `Operation stopped by hook: <reason>` | added to the prompt's context |
//! | `Stop`, `SubagentStop` | the (sub)agent goes on: it reads `Stop hook feedback:\n<reason>` as its next prompt, and the next `Stop` has `stop_hook_active: true` | — | refused by the CLI |
//! | `PreCompact` | no compaction (`Compaction blocked by PreCompact hook`) | — | refused by the CLI |
//!
//! `updatedInput` is sent only for `PreToolUse`, and never with a decision: the gate's own
//! matcher then decides the call with the new input (a rewrite that came with `allow` was dropped
//! when another matcher deferred).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value, json};

use crate::control::HookInput;

/// The hook events Tollgate registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HookEventName {
    /// Before a tool call runs (the gate's event; an application hook may run first).
    PreToolUse,
    /// After a tool call ran, with its output.
    PostToolUse,
    /// A user prompt is about to go to the model.
    UserPromptSubmit,
    /// The main conversation is about to end its turn.
    Stop,
    /// A subagent is about to end.
    SubagentStop,
    /// The conversation is about to be compacted.
    PreCompact,
}

impl HookEventName {
    /// Every event, in this order.
    pub const ALL: [HookEventName; 6] = [
        HookEventName::PreToolUse,
        HookEventName::PostToolUse,
        HookEventName::UserPromptSubmit,
        HookEventName::Stop,
        HookEventName::SubagentStop,
        HookEventName::PreCompact,
    ];

    /// The wire name (`"PreToolUse"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            HookEventName::PreToolUse => "PreToolUse",
            HookEventName::PostToolUse => "PostToolUse",
            HookEventName::UserPromptSubmit => "UserPromptSubmit",
            HookEventName::Stop => "Stop",
            HookEventName::SubagentStop => "SubagentStop",
            HookEventName::PreCompact => "PreCompact",
        }
    }

    /// Whether the event's matcher pattern is a tool-name pattern (`PreToolUse`, `PostToolUse`).
    pub fn matches_tools(self) -> bool {
        matches!(self, HookEventName::PreToolUse | HookEventName::PostToolUse)
    }
}

impl std::fmt::Display for HookEventName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `input` of a `hook_callback`, by its `hook_event_name`.
///
/// An event this crate does not model is [`HookEvent::Other`], kept whole; an event it models
/// whose fields do not fit is a [`crate::ProtocolError::MalformedRequest`] (answered with an error:
/// the CLI then goes on as if the hook had not answered).
#[derive(Debug, Clone, PartialEq)]
pub enum HookEvent {
    /// `PreToolUse`.
    PreToolUse(HookInput),
    /// `PostToolUse`.
    PostToolUse(PostToolUseInput),
    /// `UserPromptSubmit`.
    UserPromptSubmit(UserPromptSubmitInput),
    /// `Stop`.
    Stop(StopInput),
    /// `SubagentStop` (also fired for the agent that writes a compaction's summary, whose
    /// `agent_type` is empty).
    SubagentStop(StopInput),
    /// `PreCompact`.
    PreCompact(PreCompactInput),
    /// Another event, kept whole.
    Other(Value),
}

impl HookEvent {
    /// The event, `None` for [`HookEvent::Other`].
    pub fn name(&self) -> Option<HookEventName> {
        Some(match self {
            HookEvent::PreToolUse(_) => HookEventName::PreToolUse,
            HookEvent::PostToolUse(_) => HookEventName::PostToolUse,
            HookEvent::UserPromptSubmit(_) => HookEventName::UserPromptSubmit,
            HookEvent::Stop(_) => HookEventName::Stop,
            HookEvent::SubagentStop(_) => HookEventName::SubagentStop,
            HookEvent::PreCompact(_) => HookEventName::PreCompact,
            HookEvent::Other(_) => return None,
        })
    }

    /// The wire `hook_event_name`, also for [`HookEvent::Other`] (`""` if it has none).
    pub fn event_name(&self) -> &str {
        match (self.name(), self) {
            (Some(name), _) => name.as_str(),
            (None, HookEvent::Other(value)) => value["hook_event_name"].as_str().unwrap_or(""),
            (None, _) => "",
        }
    }
}

impl<'de> Deserialize<'de> for HookEvent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        let event = value.get("hook_event_name").and_then(Value::as_str).map(str::to_owned);
        Ok(match event.as_deref() {
            Some("PreToolUse") => HookEvent::PreToolUse(typed::<_, D>(value)?),
            Some("PostToolUse") => HookEvent::PostToolUse(typed::<_, D>(value)?),
            Some("UserPromptSubmit") => HookEvent::UserPromptSubmit(typed::<_, D>(value)?),
            Some("Stop") => HookEvent::Stop(typed::<_, D>(value)?),
            Some("SubagentStop") => HookEvent::SubagentStop(typed::<_, D>(value)?),
            Some("PreCompact") => HookEvent::PreCompact(typed::<_, D>(value)?),
            _ => HookEvent::Other(value),
        })
    }
}

/// `value` as `T`, a mismatch as `D`'s error.
fn typed<'de, T: serde::de::DeserializeOwned, D: Deserializer<'de>>(value: Value) -> Result<T, D::Error> {
    serde_json::from_value(value).map_err(serde::de::Error::custom)
}

impl Serialize for HookEvent {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            HookEvent::PreToolUse(input) => input.serialize(serializer),
            HookEvent::PostToolUse(input) => input.serialize(serializer),
            HookEvent::UserPromptSubmit(input) => input.serialize(serializer),
            HookEvent::Stop(input) | HookEvent::SubagentStop(input) => input.serialize(serializer),
            HookEvent::PreCompact(input) => input.serialize(serializer),
            HookEvent::Other(value) => value.serialize(serializer),
        }
    }
}

/// The `input` of a `PostToolUse` hook callback: the call and what it returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PostToolUseInput {
    /// `"PostToolUse"`.
    pub hook_event_name: String,
    /// The CLI's session id.
    pub session_id: String,
    /// Full CLI tool name.
    pub tool_name: String,
    /// The arguments the call ran with.
    pub tool_input: Value,
    /// What the tool returned: an MCP tool's content blocks, a built-in tool's own result object.
    pub tool_response: Value,
    /// The model's `tool_use` id.
    pub tool_use_id: String,
    /// Set for a call made inside a subagent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The subagent's type (`general-purpose`, …), with `agent_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
}

/// The `input` of a `UserPromptSubmit` hook callback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserPromptSubmitInput {
    /// `"UserPromptSubmit"`.
    pub hook_event_name: String,
    /// The CLI's session id.
    pub session_id: String,
    /// The prompt's text.
    pub prompt: String,
}

/// The `input` of a `Stop` or `SubagentStop` hook callback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopInput {
    /// `"Stop"` or `"SubagentStop"`.
    pub hook_event_name: String,
    /// The CLI's session id.
    pub session_id: String,
    /// True when the (sub)agent goes on because a stop hook blocked its last stop.
    #[serde(default)]
    pub stop_hook_active: bool,
    /// The text of the (sub)agent's last reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_assistant_message: Option<String>,
    /// The subagent (`SubagentStop` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The subagent's type (`SubagentStop` only; empty for a compaction's summary agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_type: Option<String>,
}

/// The `input` of a `PreCompact` hook callback.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreCompactInput {
    /// `"PreCompact"`.
    pub hook_event_name: String,
    /// The CLI's session id.
    pub session_id: String,
    /// `manual` (`/compact`) or `auto` (the context is nearly full).
    pub trigger: String,
    /// The instructions given with `/compact`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<String>,
}

/// The answer to an application hook's `hook_callback`: the one shape Tollgate sends for one. It
/// has no permission decision, so it cannot allow, ask or defer a call; see the module docs for
/// what each field does per event. [`AppHookOutput::default`] (`{}`) says nothing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AppHookOutput {
    /// The event answered (names `hookSpecificOutput`).
    pub event: Option<HookEventName>,
    /// `additionalContext`: text the model reads (PreToolUse, PostToolUse, UserPromptSubmit).
    pub context: Option<String>,
    /// `decision: "block"` with this `reason`.
    pub block: Option<String>,
    /// `continue: false` with this `stopReason`.
    pub stop: Option<String>,
    /// `updatedInput`, without a decision (PreToolUse).
    pub updated_input: Option<Value>,
}

impl AppHookOutput {
    /// The JSON payload of the control response.
    pub fn to_value(&self) -> Value {
        let mut out = Map::new();
        if let Some(reason) = &self.stop {
            out.insert("continue".into(), Value::Bool(false));
            out.insert("stopReason".into(), Value::String(reason.clone()));
        }
        if let Some(reason) = &self.block {
            out.insert("decision".into(), json!("block"));
            out.insert("reason".into(), Value::String(reason.clone()));
        }
        if let (Some(event), true) = (self.event, self.context.is_some() || self.updated_input.is_some()) {
            let mut specific = Map::new();
            specific.insert("hookEventName".into(), json!(event.as_str()));
            if let Some(context) = &self.context {
                specific.insert("additionalContext".into(), Value::String(context.clone()));
            }
            if let Some(input) = &self.updated_input {
                specific.insert("updatedInput".into(), input.clone());
            }
            out.insert("hookSpecificOutput".into(), Value::Object(specific));
        }
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_reads_into_its_own_input() {
        let read = |v: Value| serde_json::from_value::<HookEvent>(v).unwrap();
        let post = read(json!({"hook_event_name": "PostToolUse", "session_id": "s", "tool_name": "Read",
            "tool_input": {"file_path": "/a"}, "tool_response": {"type": "text"}, "tool_use_id": "t1",
            "agent_id": "a1", "agent_type": "general-purpose", "duration_ms": 3}));
        let HookEvent::PostToolUse(post) = post else { panic!("{post:?}") };
        assert_eq!((post.tool_use_id.as_str(), post.agent_id.as_deref()), ("t1", Some("a1")));
        let stop =
            read(json!({"hook_event_name": "SubagentStop", "session_id": "s", "stop_hook_active": true,
            "agent_id": "a1", "agent_type": "", "background_tasks": []}));
        assert!(
            matches!(&stop, HookEvent::SubagentStop(s) if s.stop_hook_active && s.agent_type.as_deref() == Some(""))
        );
        assert_eq!(stop.name(), Some(HookEventName::SubagentStop));
        let prompt = read(json!({"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "hi"}));
        assert!(matches!(prompt, HookEvent::UserPromptSubmit(p) if p.prompt == "hi"));
        let compact = read(json!({"hook_event_name": "PreCompact", "session_id": "s", "trigger": "auto",
            "custom_instructions": null}));
        assert!(
            matches!(compact, HookEvent::PreCompact(c) if c.trigger == "auto" && c.custom_instructions.is_none())
        );
        let other = read(json!({"hook_event_name": "Notification", "message": "m"}));
        assert_eq!((other.name(), other.event_name()), (None, "Notification"));
    }

    #[test]
    fn a_known_event_without_its_fields_is_an_error_naming_the_field() {
        let err = serde_json::from_value::<HookEvent>(
            json!({"hook_event_name": "UserPromptSubmit", "session_id": "s"}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("prompt"), "{err}");
    }

    #[test]
    fn an_application_answer_never_carries_a_permission_decision() {
        let all = AppHookOutput {
            event: Some(HookEventName::PreToolUse),
            context: Some("c".into()),
            block: Some("b".into()),
            stop: Some("s".into()),
            updated_input: Some(json!({"a": 1})),
        };
        assert_eq!(
            all.to_value().to_string(),
            r#"{"continue":false,"decision":"block","hookSpecificOutput":{"additionalContext":"c","hookEventName":"PreToolUse","updatedInput":{"a":1}},"reason":"b","stopReason":"s"}"#
        );
        assert_eq!(AppHookOutput::default().to_value(), json!({}));
        let context = AppHookOutput {
            event: Some(HookEventName::PostToolUse),
            context: Some("checked".into()),
            ..AppHookOutput::default()
        };
        assert_eq!(
            context.to_value(),
            json!({"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "checked"}})
        );
        for value in [all.to_value(), context.to_value()] {
            let text = value.to_string();
            for word in ["permissionDecision", "approve", "allow", "defer", "ask", "updatedPermissions"] {
                assert!(!text.contains(word), "{text}");
            }
        }
    }
}
