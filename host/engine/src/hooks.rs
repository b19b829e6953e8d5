//! Application hooks: an agent's own code run on Claude Code's hook events, and the one check every
//! answer of it passes before the CLI reads it ([`check_answer`]).
//!
//! An options factory of `tollgate:agent@0.2.0` may name hooks in its options ([`HookMatcher`]);
//! the segment registers a matcher for each, beside the gate's own `PreToolUse` matcher, and asks
//! the factory ([`HookCall`] in, [`HookAnswer`] out) each time one fires. This module owns what a
//! hook may say, and nothing else: which events exist ([`HookEvent`]), which matchers are valid
//! ([`check_matchers`]) and which answers are ([`check_answer`]). It does not speak the wire (the
//! segment maps a [`CheckedHookAnswer`] to the CLI's JSON) or call the factory.
//!
//! # Why an answer cannot bypass the gate
//!
//! A [`HookAnswer`] has no way to say "allow", "ask" or "defer": it can add context for the
//! model, block, stop the turn, or (for `PreToolUse`) rewrite a call's input, which the gate then
//! decides like any other. A block beats every other hook's decision; a rewrite is sent without a
//! decision, so the gate's matcher still decides the call; a stop ends the turn after what the
//! gate decided. The segment never asks an application hook about the pending call of a resumed
//! segment (it passed the hooks when it was deferred, and its record holds the input approved).
//!
//! | event | `context` | `block` | `stop` | `updated_input` |
//! | --- | --- | --- | --- | --- |
//! | `PreToolUse` | read beside the call | the call is denied with the reason | the turn stops after the call is decided | the call's new arguments (a JSON object) |
//! | `PostToolUse` | read after the result | the reason is read after the result, which stands | the turn stops after the result | — |
//! | `UserPromptSubmit` | read with the prompt | the prompt is dropped; the turn ends with the reason | the same | — |
//! | `Stop`, `SubagentStop` | — | the (sub)agent goes on, reading the reason | the turn stops | — |
//! | `PreCompact` | — | no compaction | the turn stops | — |
//!
//! A field the event does not take ("—") fails the check: the segment then answers the CLI with an
//! error, which the CLI reads as no answer.
//!
//! ```
//! use tollgate_engine::hooks::{HookAnswer, HookEvent, check_answer};
//!
//! let rewrite = HookAnswer { updated_input: Some(serde_json::json!({"amount_cents": 100})), ..HookAnswer::default() };
//! assert!(check_answer(HookEvent::PreToolUse, rewrite.clone()).is_ok());
//! let error = check_answer(HookEvent::Stop, rewrite).unwrap_err();
//! assert_eq!(error.to_string(), "a Stop hook cannot answer with updated-input (only PreToolUse takes it)");
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest text a hook may answer with (context, block and stop reasons), in bytes.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// The largest rewritten input, as JSON, in bytes.
pub const MAX_INPUT_BYTES: usize = 256 * 1024;
/// The most hooks one segment registers.
pub const MAX_MATCHERS: usize = 32;
/// The longest matcher pattern, in bytes.
pub const MAX_PATTERN_BYTES: usize = 512;

/// The hook events an application hook can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HookEvent {
    /// Before a tool call is decided by the gate.
    PreToolUse,
    /// After a tool call ran.
    PostToolUse,
    /// Before a user prompt reaches the model.
    UserPromptSubmit,
    /// Before the main conversation ends its turn.
    Stop,
    /// Before a subagent ends (also the agent that writes a compaction's summary).
    SubagentStop,
    /// Before the conversation is compacted.
    PreCompact,
}

impl HookEvent {
    /// Claude Code's name of the event (`PreToolUse`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::Stop => "Stop",
            HookEvent::SubagentStop => "SubagentStop",
            HookEvent::PreCompact => "PreCompact",
        }
    }

    fn takes_context(self) -> bool {
        matches!(self, HookEvent::PreToolUse | HookEvent::PostToolUse | HookEvent::UserPromptSubmit)
    }
}

impl std::fmt::Display for HookEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One hook an agent registers: an event and, for the tool events, which tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookMatcher {
    /// The event.
    pub event: HookEvent,
    /// `PreToolUse`, `PostToolUse`: a tool-name pattern as Claude Code matches it (`Bash`,
    /// `Bash|Read`, `mcp__tools__.*`); `None` matches every tool. `PreCompact`: `manual` or
    /// `auto`; `None` matches both. The other events take none.
    pub matcher: Option<String>,
}

/// What a hook is told: the event and the fields Claude Code sent with it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookCall {
    /// The event (`None` only in [`HookCall::default`]).
    pub event: Option<HookEvent>,
    /// The tool as Claude Code names it (`mcp__tools__create_refund`, `Bash`): tool events.
    pub tool_name: Option<String>,
    /// The call's arguments: tool events.
    pub tool_input: Option<Value>,
    /// The model's tool use ID: tool events.
    pub tool_use_id: Option<String>,
    /// What the tool returned: `PostToolUse`.
    pub tool_response: Option<Value>,
    /// The prompt: `UserPromptSubmit`.
    pub prompt: Option<String>,
    /// The subagent the call or stop belongs to.
    pub agent_id: Option<String>,
    /// The subagent's type (`general-purpose`, …).
    pub agent_type: Option<String>,
    /// `Stop`, `SubagentStop`: the (sub)agent goes on because a stop hook blocked its last stop.
    pub stop_hook_active: bool,
    /// `Stop`, `SubagentStop`: the text of its last reply.
    pub last_assistant_message: Option<String>,
    /// `PreCompact`: `manual` or `auto`.
    pub trigger: Option<String>,
    /// `PreCompact`: the instructions given with `/compact`.
    pub custom_instructions: Option<String>,
}

/// What an application hook answered, before [`check_answer`]. The default says nothing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookAnswer {
    /// Text the model reads with the event.
    pub context: Option<String>,
    /// Block, with the reason (see the module table for what a block does per event).
    pub block: Option<String>,
    /// Stop the turn, with the reason.
    pub stop: Option<String>,
    /// `PreToolUse`: the call's new arguments, a JSON object.
    pub updated_input: Option<Value>,
}

/// A [`HookAnswer`] that passed [`check_answer`] for `event`: the only way to make one.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckedHookAnswer {
    event: HookEvent,
    answer: HookAnswer,
}

impl CheckedHookAnswer {
    /// The event it answers.
    pub fn event(&self) -> HookEvent {
        self.event
    }

    /// The answer.
    pub fn answer(&self) -> &HookAnswer {
        &self.answer
    }

    /// An answer that says nothing (`{}`).
    pub fn nothing(event: HookEvent) -> Self {
        CheckedHookAnswer { event, answer: HookAnswer::default() }
    }
}

/// Why a hook's answer or an agent's hooks were refused. The texts name the event and the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HookError {
    /// The event does not take this field.
    #[error("a {event} hook cannot answer with {field} (only {takes} takes it)")]
    NotForEvent {
        /// The event.
        event: HookEvent,
        /// The field (`context`, `updated-input`).
        field: &'static str,
        /// The events that take it.
        takes: &'static str,
    },
    /// A reason or context that is empty.
    #[error("a {event} hook answered with an empty {field}")]
    Empty {
        /// The event.
        event: HookEvent,
        /// The field.
        field: &'static str,
    },
    /// A text or input over its limit.
    #[error("a {event} hook's {field} is {bytes} bytes; the limit is {limit}")]
    TooLong {
        /// The event.
        event: HookEvent,
        /// The field.
        field: &'static str,
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// A rewritten input that is not a JSON object.
    #[error("a PreToolUse hook's updated-input must be a JSON object, not {found}")]
    InputNotAnObject {
        /// What it was (`an array`, …).
        found: &'static str,
    },
    /// More hooks than [`MAX_MATCHERS`].
    #[error("the options name {count} hooks; at most {MAX_MATCHERS} are allowed")]
    TooManyMatchers {
        /// How many.
        count: usize,
    },
    /// A matcher the event does not take, or an unusable one.
    #[error("hook {index} ({event}): {problem}")]
    BadMatcher {
        /// Its position in the options' list, from 0.
        index: usize,
        /// Its event.
        event: HookEvent,
        /// What is wrong.
        problem: String,
    },
}

/// Checks `answer` for `event` (see the module table). A checked answer carries no decision that
/// could let a call run: only the gate allows and defers.
///
/// # Errors
/// A field the event does not take, an empty reason or context, a text over [`MAX_TEXT_BYTES`],
/// an input that is not a JSON object or is over [`MAX_INPUT_BYTES`].
pub fn check_answer(event: HookEvent, answer: HookAnswer) -> Result<CheckedHookAnswer, HookError> {
    if answer.context.is_some() && !event.takes_context() {
        return Err(HookError::NotForEvent {
            event,
            field: "context",
            takes: "PreToolUse, PostToolUse or UserPromptSubmit",
        });
    }
    if let Some(input) = &answer.updated_input {
        if event != HookEvent::PreToolUse {
            return Err(HookError::NotForEvent { event, field: "updated-input", takes: "PreToolUse" });
        }
        let found = match input {
            Value::Object(_) => None,
            Value::Array(_) => Some("an array"),
            Value::String(_) => Some("a string"),
            Value::Number(_) => Some("a number"),
            Value::Bool(_) => Some("a boolean"),
            Value::Null => Some("null"),
        };
        if let Some(found) = found {
            return Err(HookError::InputNotAnObject { found });
        }
        let bytes = input.to_string().len();
        if bytes > MAX_INPUT_BYTES {
            return Err(HookError::TooLong { event, field: "updated-input", bytes, limit: MAX_INPUT_BYTES });
        }
    }
    for (field, text) in [("context", &answer.context), ("block", &answer.block), ("stop", &answer.stop)] {
        let Some(text) = text else { continue };
        if text.trim().is_empty() {
            return Err(HookError::Empty { event, field });
        }
        if text.len() > MAX_TEXT_BYTES {
            return Err(HookError::TooLong { event, field, bytes: text.len(), limit: MAX_TEXT_BYTES });
        }
    }
    Ok(CheckedHookAnswer { event, answer })
}

/// Checks the hooks an agent's options name: at most [`MAX_MATCHERS`]; a tool pattern only for
/// the tool events (non-empty, at most [`MAX_PATTERN_BYTES`]); `manual` or `auto` for
/// `PreCompact`; none for the others.
///
/// # Errors
/// The first matcher that breaks a rule, by its position.
pub fn check_matchers(matchers: &[HookMatcher]) -> Result<(), HookError> {
    if matchers.len() > MAX_MATCHERS {
        return Err(HookError::TooManyMatchers { count: matchers.len() });
    }
    for (index, HookMatcher { event, matcher }) in matchers.iter().enumerate() {
        let bad = |problem: String| HookError::BadMatcher { index, event: *event, problem };
        let Some(pattern) = matcher else { continue };
        match event {
            HookEvent::PreToolUse | HookEvent::PostToolUse => {
                if pattern.trim().is_empty() {
                    return Err(bad(
                        "an empty tool pattern matches nothing; leave it out to match every tool".into(),
                    ));
                }
                if pattern.len() > MAX_PATTERN_BYTES {
                    return Err(bad(format!("the tool pattern is over {MAX_PATTERN_BYTES} bytes")));
                }
            }
            HookEvent::PreCompact => {
                if !["manual", "auto"].contains(&pattern.as_str()) {
                    return Err(bad(format!(
                        "the matcher must be `manual` or `auto` (or none for both), not {pattern:?}"
                    )));
                }
            }
            HookEvent::UserPromptSubmit | HookEvent::Stop | HookEvent::SubagentStop => {
                return Err(bad(format!("{event} hooks take no matcher, found {pattern:?}")));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const EVENTS: [HookEvent; 6] = [
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::UserPromptSubmit,
        HookEvent::Stop,
        HookEvent::SubagentStop,
        HookEvent::PreCompact,
    ];

    fn text(t: &str) -> Option<String> {
        Some(t.to_owned())
    }

    #[test]
    fn every_event_takes_a_block_and_a_stop_and_says_nothing_by_default() {
        for event in EVENTS {
            let answer = HookAnswer { block: text("not now"), stop: text("done"), ..HookAnswer::default() };
            let checked = check_answer(event, answer.clone()).unwrap();
            assert_eq!((checked.event(), checked.answer()), (event, &answer));
            assert_eq!(
                check_answer(event, HookAnswer::default()).unwrap(),
                CheckedHookAnswer::nothing(event)
            );
        }
    }

    #[test]
    fn context_is_for_the_tool_and_prompt_events_and_a_rewrite_only_for_pre_tool_use() {
        let context = HookAnswer { context: text("the order is disputed"), ..HookAnswer::default() };
        let rewrite = HookAnswer { updated_input: Some(json!({"order_id": "7"})), ..HookAnswer::default() };
        for event in EVENTS {
            let takes_context =
                matches!(event, HookEvent::PreToolUse | HookEvent::PostToolUse | HookEvent::UserPromptSubmit);
            assert_eq!(check_answer(event, context.clone()).is_ok(), takes_context, "{event}");
            assert_eq!(
                check_answer(event, rewrite.clone()).is_ok(),
                event == HookEvent::PreToolUse,
                "{event}"
            );
        }
        assert_eq!(
            check_answer(HookEvent::PreCompact, context).unwrap_err().to_string(),
            "a PreCompact hook cannot answer with context (only PreToolUse, PostToolUse or UserPromptSubmit takes it)"
        );
    }

    #[test]
    fn bad_answers_are_refused_naming_the_field() {
        let refused = |event, answer| check_answer(event, answer).unwrap_err().to_string();
        assert_eq!(
            refused(
                HookEvent::PreToolUse,
                HookAnswer { updated_input: Some(json!([1])), ..HookAnswer::default() }
            ),
            "a PreToolUse hook's updated-input must be a JSON object, not an array"
        );
        assert_eq!(
            refused(HookEvent::Stop, HookAnswer { block: text("  "), ..HookAnswer::default() }),
            "a Stop hook answered with an empty block"
        );
        let long = "x".repeat(MAX_TEXT_BYTES + 1);
        assert_eq!(
            refused(HookEvent::PostToolUse, HookAnswer { context: Some(long), ..HookAnswer::default() }),
            format!(
                "a PostToolUse hook's context is {} bytes; the limit is {MAX_TEXT_BYTES}",
                MAX_TEXT_BYTES + 1
            )
        );
        let big = json!({"text": "y".repeat(MAX_INPUT_BYTES)});
        assert!(
            refused(HookEvent::PreToolUse, HookAnswer { updated_input: Some(big), ..HookAnswer::default() })
                .contains("updated-input is")
        );
    }

    #[test]
    fn matchers_fit_their_event() {
        let m = |event, matcher: Option<&str>| HookMatcher { event, matcher: matcher.map(str::to_owned) };
        let good = [
            m(HookEvent::PreToolUse, Some("Bash|mcp__tools__.*")),
            m(HookEvent::PostToolUse, None),
            m(HookEvent::UserPromptSubmit, None),
            m(HookEvent::Stop, None),
            m(HookEvent::SubagentStop, None),
            m(HookEvent::PreCompact, Some("auto")),
        ];
        assert_eq!(check_matchers(&good), Ok(()));
        let refused = |matchers: &[HookMatcher]| check_matchers(matchers).unwrap_err().to_string();
        assert_eq!(
            refused(&[m(HookEvent::Stop, None), m(HookEvent::Stop, Some("Bash"))]),
            "hook 1 (Stop): Stop hooks take no matcher, found \"Bash\""
        );
        assert!(refused(&[m(HookEvent::PreCompact, Some("sometimes"))]).contains("`manual` or `auto`"));
        assert!(refused(&[m(HookEvent::PreToolUse, Some(""))]).contains("matches nothing"));
        let many = vec![m(HookEvent::Stop, None); MAX_MATCHERS + 1];
        assert_eq!(
            refused(&many),
            format!("the options name {} hooks; at most {MAX_MATCHERS} are allowed", MAX_MATCHERS + 1)
        );
    }
}
