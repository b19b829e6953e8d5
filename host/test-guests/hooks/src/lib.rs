//! An options factory of `tollgate:agent@0.2.0` (`options-factory-with-hooks`) that names a hook
//! for every event and answers each from what it is told, so a test steers it with its prompts:
//!
//! | event | answer |
//! | --- | --- |
//! | `pre-tool-use` | arguments containing `hook:block` are blocked; a `create_refund` over 1000 cents is rewritten to 1000, with a context saying so |
//! | `post-tool-use` | context `checked by the application hook: <tool>` |
//! | `user-prompt-submit` | a prompt containing `hook:block-prompt` is blocked; any other gets the context `the customer is ACME` |
//! | `stop` | a first stop whose reply contains `hook:continue` is blocked with the reason `say continued after the stop hook` |
//! | `subagent-stop` | a subagent's first stop whose reply contains `hook:continue` is blocked with `say the subagent went on` |
//! | `pre-compact` | a manual compaction (`/compact`) is blocked; an automatic one goes ahead |
//!
//! With the config key `HOOKS_MISBEHAVE` set, every answer also carries a rewrite, which only
//! `pre-tool-use` takes: the other events' answers are then refused by the host.

/// The bindings wit-bindgen generates for the world (private: nothing outside uses them).
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "tollgate:agent/options-factory-with-hooks@0.2.0",
        generate_all,
    });
}

use bindings::exports::tollgate::agent::hooks::{Guest as Hooks, HookAnswer, HookInput};
use bindings::exports::tollgate::agent::options::Guest as Options;
use bindings::tollgate::agent::types::{AgentOptions, HookEvent, HookMatcher, OptionsContext};
use bindings::tollgate::tool::config;

struct Factory;

impl Options for Factory {
    fn build_options(_ctx: OptionsContext) -> Result<AgentOptions, String> {
        let every = |event| HookMatcher { event, matcher: None };
        Ok(AgentOptions {
            model: None,
            system_prompt: None,
            append_system_prompt: None,
            tools: Some(vec!["Read".into(), "Task".into()]),
            disallowed_tools: Vec::new(),
            cwd: None,
            env: Vec::new(),
            permission_mode: None,
            max_turns: Some(20),
            max_budget_usd: None,
            mcp_servers: Vec::new(),
            setting_sources: Vec::new(),
            extra: None,
            hooks: vec![
                every(HookEvent::PreToolUse),
                every(HookEvent::PostToolUse),
                every(HookEvent::UserPromptSubmit),
                every(HookEvent::Stop),
                every(HookEvent::SubagentStop),
                every(HookEvent::PreCompact),
            ],
        })
    }
}

fn nothing() -> HookAnswer {
    HookAnswer { context: None, block: None, stop: None, updated_input: None }
}

fn contains(text: &Option<String>, needle: &str) -> bool {
    text.as_deref().is_some_and(|t| t.contains(needle))
}

impl Hooks for Factory {
    fn on_hook(_ctx: OptionsContext, input: HookInput) -> Result<HookAnswer, String> {
        let mut answer = nothing();
        match input.event {
            HookEvent::PreToolUse => {
                if contains(&input.tool_input, "hook:block") {
                    answer.block = Some("blocked by the application hook".into());
                } else if input.tool_name.as_deref() == Some("mcp__tools__create_refund") {
                    let mut arguments: serde_json::Value =
                        serde_json::from_str(input.tool_input.as_deref().unwrap_or("{}"))
                            .map_err(|e| e.to_string())?;
                    if arguments["amount_cents"].as_u64().is_some_and(|cents| cents > 1000) {
                        arguments["amount_cents"] = 1000.into();
                        answer.updated_input = Some(arguments.to_string());
                        answer.context = Some("the application capped the refund at 1000 cents".into());
                    }
                }
            }
            HookEvent::PostToolUse => {
                answer.context = Some(format!(
                    "checked by the application hook: {}",
                    input.tool_name.as_deref().unwrap_or("?")
                ));
            }
            HookEvent::UserPromptSubmit => {
                if contains(&input.prompt, "hook:block-prompt") {
                    answer.block = Some("this prompt is not allowed here".into());
                } else {
                    answer.context = Some("the customer is ACME".into());
                }
            }
            HookEvent::Stop => {
                if !input.stop_hook_active && contains(&input.last_assistant_message, "hook:continue") {
                    answer.block = Some("say continued after the stop hook".into());
                }
            }
            HookEvent::SubagentStop => {
                let real = input.agent_type.as_deref().is_some_and(|t| !t.is_empty());
                if real && !input.stop_hook_active && contains(&input.last_assistant_message, "hook:continue")
                {
                    answer.block = Some("say the subagent went on".into());
                }
            }
            HookEvent::PreCompact => {
                if input.trigger.as_deref() == Some("manual") {
                    answer.block = Some("compaction is left to the host".into());
                }
            }
        }
        if config::get("HOOKS_MISBEHAVE").is_some() {
            answer.updated_input = Some(r#"{"misbehaving":true}"#.into());
        }
        Ok(answer)
    }
}

bindings::export!(Factory with_types_in bindings);
