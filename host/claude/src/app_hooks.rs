//! The agent's own hooks in a segment: their matchers in `initialize`, each callback asked of the
//! [`AppHook`] from a task of its own, and the answer the CLI gets once it passed
//! [`tollgate_engine::hooks::check_answer`].
//!
//! Read [`AppHook`] first. The segment registers one matcher per
//! [`tollgate_engine::hooks::HookMatcher`] of its spec (callback ids `tollgate_app_<n>`), an
//! application `PreToolUse` matcher before the gate's own. When one fires, the segment reads
//! the hook input ([`call_of`]) and starts the hook (`Asking::ask`); `Asking::next` hands the
//! segment's loop the answer, and the CLI gets [`AppHookOutput`] (which cannot carry a permission
//! decision) when the check passed, an error response otherwise (the CLI reads an error as no
//! answer). So whatever a hook says, the
//! gate alone allows or defers a call.
//!
//! # Caveats
//!
//! - The pending call of a resumed segment is never put to an application `PreToolUse` hook: it
//!   passed the hooks when it was deferred, and a later block would hide its recorded result.
//!   The segment answers `{}` for it at once.
//! - A hook that takes longer than the matcher's `timeout` is cancelled by the CLI
//!   (`control_cancel_request`), which aborts its task; the CLI tells the model the hook did not
//!   answer and goes on.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use tokio::task::JoinSet;
use tollgate_engine::hooks::{CheckedHookAnswer, HookAnswer, HookCall, HookEvent, HookMatcher, check_answer};
use tollgate_protocol::{AppHookOutput, HookEventName, HostFrame, Initialize};

/// What an [`AppHook`] answers: `Err(text)` when the hook failed (logged; the CLI gets an error
/// response, which it reads as no answer).
pub type AppHookFuture = Pin<Box<dyn Future<Output = Result<HookAnswer, String>> + Send + 'static>>;

/// The agent's own hooks (an options factory's `hooks` export). The segment asks it from a task of
/// its own and goes on reading the CLI meanwhile; a hook that panics fails like one that erred.
pub trait AppHook: Send + Sync + 'static {
    /// The answer to one hook event the spec's matchers registered.
    fn call(&self, call: HookCall) -> AppHookFuture;
}

/// The callback id of an application matcher.
const PREFIX: &str = "tollgate_app_";

/// Whether `callback_id` is an application matcher's.
pub(crate) fn is_app_callback(callback_id: &str) -> bool {
    callback_id.starts_with(PREFIX)
}

/// `init` with a matcher for each of `matchers`, in order, each answered within `timeout_secs`.
/// Call it before the gate's matcher is added, so an application `PreToolUse` hook comes first.
pub(crate) fn register(mut init: Initialize, matchers: &[HookMatcher], timeout_secs: u32) -> Initialize {
    for (index, HookMatcher { event, matcher }) in matchers.iter().enumerate() {
        let id = format!("{PREFIX}{index}");
        let wire = match matcher {
            Some(pattern) => tollgate_protocol::HookMatcher::new(pattern.clone(), id),
            None => tollgate_protocol::HookMatcher::all_tools(id),
        };
        init = init.hook(wire_event(*event), wire.timeout(timeout_secs));
    }
    init
}

/// The wire name of an event.
fn wire_event(event: HookEvent) -> HookEventName {
    match event {
        HookEvent::PreToolUse => HookEventName::PreToolUse,
        HookEvent::PostToolUse => HookEventName::PostToolUse,
        HookEvent::UserPromptSubmit => HookEventName::UserPromptSubmit,
        HookEvent::Stop => HookEventName::Stop,
        HookEvent::SubagentStop => HookEventName::SubagentStop,
        HookEvent::PreCompact => HookEventName::PreCompact,
    }
}

/// What a hook is told of `input`; `None` for an event no application hook registers.
pub fn call_of(input: &tollgate_protocol::HookEvent) -> Option<HookCall> {
    use tollgate_protocol::HookEvent as Wire;
    let call = match input {
        Wire::PreToolUse(i) => HookCall {
            event: Some(HookEvent::PreToolUse),
            tool_name: Some(i.tool_name.clone()),
            tool_input: Some(i.tool_input.clone()),
            tool_use_id: Some(i.tool_use_id.clone()),
            agent_id: i.agent_id.clone(),
            agent_type: i.agent_type.clone(),
            ..HookCall::default()
        },
        Wire::PostToolUse(i) => HookCall {
            event: Some(HookEvent::PostToolUse),
            tool_name: Some(i.tool_name.clone()),
            tool_input: Some(i.tool_input.clone()),
            tool_use_id: Some(i.tool_use_id.clone()),
            tool_response: Some(i.tool_response.clone()),
            agent_id: i.agent_id.clone(),
            agent_type: i.agent_type.clone(),
            ..HookCall::default()
        },
        Wire::UserPromptSubmit(i) => HookCall {
            event: Some(HookEvent::UserPromptSubmit),
            prompt: Some(i.prompt.clone()),
            ..HookCall::default()
        },
        Wire::Stop(i) | Wire::SubagentStop(i) => HookCall {
            event: Some(if matches!(input, Wire::Stop(_)) {
                HookEvent::Stop
            } else {
                HookEvent::SubagentStop
            }),
            stop_hook_active: i.stop_hook_active,
            last_assistant_message: i.last_assistant_message.clone(),
            agent_id: i.agent_id.clone(),
            agent_type: i.agent_type.clone(),
            ..HookCall::default()
        },
        Wire::PreCompact(i) => HookCall {
            event: Some(HookEvent::PreCompact),
            trigger: Some(i.trigger.clone()),
            custom_instructions: i.custom_instructions.clone(),
            ..HookCall::default()
        },
        Wire::Other(_) => return None,
    };
    Some(call)
}

/// The CLI's answer for a checked hook answer.
pub(crate) fn output(answer: &CheckedHookAnswer) -> AppHookOutput {
    let HookAnswer { context, block, stop, updated_input } = answer.answer().clone();
    AppHookOutput { event: Some(wire_event(answer.event())), context, block, stop, updated_input }
}

/// The application hooks in flight, each a task (the segment's driver owns them; the segment's
/// machine decides what to ask and turns each answer into the CLI's, [`answer_frame`]).
#[derive(Default)]
pub(crate) struct Asking {
    tasks: JoinSet<Result<HookAnswer, String>>,
    /// Task → the CLI's request id.
    asked: HashMap<tokio::task::Id, String>,
    /// Request id → task, to abort a cancelled one.
    by_request: HashMap<String, tokio::task::AbortHandle>,
}

impl Asking {
    /// Asks `hook` about `call` for the CLI's request `request_id`. The answer comes from
    /// [`Asking::next`].
    pub(crate) fn ask(&mut self, hook: &dyn AppHook, request_id: String, call: HookCall) {
        let task = self.tasks.spawn(hook.call(call));
        self.by_request.insert(request_id.clone(), task.clone());
        self.asked.insert(task.id(), request_id);
    }

    /// The CLI withdrew `request_id` (its timeout passed): the hook is stopped, nothing is sent.
    pub(crate) fn cancel(&mut self, request_id: &str) {
        if let Some(task) = self.by_request.remove(request_id) {
            task.abort();
        }
    }

    /// The next answer, with the request id it answers. Waits forever when no hook is in flight
    /// (use it in a `select!`; it is cancel-safe).
    pub(crate) async fn next(&mut self) -> (String, Result<HookAnswer, String>) {
        loop {
            let (id, answer) = match self.tasks.join_next_with_id().await {
                None => return std::future::pending().await,
                Some(Ok((id, answer))) => (id, answer),
                Some(Err(err)) if err.is_cancelled() => {
                    self.asked.remove(&err.id());
                    continue;
                }
                Some(Err(err)) => (err.id(), Err(format!("the application hook failed: {err}"))),
            };
            let Some(request_id) = self.asked.remove(&id) else { continue };
            self.by_request.remove(&request_id);
            return (request_id, answer);
        }
    }
}

/// The CLI's answer to the application hook request `request_id` of `event`.
pub(crate) fn answer_frame(
    request_id: String,
    event: HookEvent,
    answer: Result<HookAnswer, String>,
) -> HostFrame {
    match answer.map_err(|e| format!("the application's {event} hook failed: {e}")).and_then(|answer| {
        check_answer(event, answer).map_err(|e| format!("the application's hook answer was refused: {e}"))
    }) {
        Ok(checked) => HostFrame::app_hook_answer(request_id, &output(&checked)),
        Err(message) => {
            tracing::warn!(%event, error = %message, "an application hook gave no usable answer");
            HostFrame::error_response(request_id, message)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const HOOK: &str =
        r#"{"type":"control_response","response":{"subtype":"success","request_id":"r","response":"#;

    #[test]
    fn matchers_register_in_order_under_their_events() {
        let matchers = [
            HookMatcher { event: HookEvent::PreToolUse, matcher: Some("Bash".into()) },
            HookMatcher { event: HookEvent::Stop, matcher: None },
            HookMatcher { event: HookEvent::PreCompact, matcher: Some("auto".into()) },
        ];
        let init = register(Initialize::new(), &matchers, 30);
        assert_eq!(
            serde_json::to_value(&init.hooks).unwrap(),
            json!({
                "PreToolUse": [{"matcher": "Bash", "hookCallbackIds": ["tollgate_app_0"], "timeout": 30}],
                "Stop": [{"matcher": null, "hookCallbackIds": ["tollgate_app_1"], "timeout": 30}],
                "PreCompact": [{"matcher": "auto", "hookCallbackIds": ["tollgate_app_2"], "timeout": 30}],
            })
        );
        assert!(is_app_callback("tollgate_app_2") && !is_app_callback("tollgate_gate"));
    }

    #[test]
    fn a_checked_answer_goes_out_without_a_decision_and_a_refused_one_as_an_error() {
        let rewrite = HookAnswer {
            updated_input: Some(json!({"text": "x"})),
            context: Some("why".into()),
            ..HookAnswer::default()
        };
        assert_eq!(
            answer_frame("r".into(), HookEvent::PreToolUse, Ok(rewrite.clone())).to_json(),
            format!(
                r#"{HOOK}{{"hookSpecificOutput":{{"additionalContext":"why","hookEventName":"PreToolUse","updatedInput":{{"text":"x"}}}}}}}}}}"#
            )
        );
        let block = HookAnswer { block: Some("say go on".into()), ..HookAnswer::default() };
        assert_eq!(
            answer_frame("r".into(), HookEvent::Stop, Ok(block)).to_json(),
            format!(r#"{HOOK}{{"decision":"block","reason":"say go on"}}}}}}"#)
        );
        assert_eq!(
            answer_frame("r".into(), HookEvent::Stop, Ok(HookAnswer::default())).to_json(),
            format!("{HOOK}{{}}}}}}")
        );
        assert_eq!(
            answer_frame("r".into(), HookEvent::Stop, Ok(rewrite)).to_json(),
            r#"{"type":"control_response","response":{"subtype":"error","request_id":"r","error":"the application's hook answer was refused: a Stop hook cannot answer with context (only PreToolUse, PostToolUse or UserPromptSubmit takes it)"}}"#
        );
        assert_eq!(
            answer_frame("r".into(), HookEvent::PostToolUse, Err("trapped".into())).to_json(),
            r#"{"type":"control_response","response":{"subtype":"error","request_id":"r","error":"the application's PostToolUse hook failed: trapped"}}"#
        );
    }
}
