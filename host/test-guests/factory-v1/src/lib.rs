//! The support agent's options factory as it was built against `tollgate:agent@0.1.0`
//! (`options-factory-with-cli-policy`), kept so the tests load a factory of that version.
//!
//! `build-options` gives every segment the same options, with the session in the system prompt and
//! the model overridable through the `MODEL` config key. `decide-cli-tool` is a `Bash` allow-list
//! as code: read-only commands run, `rm` is refused, anything else waits for a human.

/// The bindings wit-bindgen generates for the world (private: nothing outside uses them).
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "tollgate:agent/options-factory-with-cli-policy@0.1.0",
        generate_all,
    });
}

use bindings::exports::tollgate::agent::cli_policy::Guest as CliPolicy;
use bindings::exports::tollgate::agent::options::Guest as Options;
use bindings::tollgate::agent::types::{AgentOptions, Decision, OptionsContext};
use bindings::tollgate::tool::{config, log};

struct Factory;

impl Options for Factory {
    fn build_options(ctx: OptionsContext) -> Result<AgentOptions, String> {
        log::emit(log::Level::Debug, &format!("options for {} turn {}", ctx.session_id, ctx.turn_id));
        Ok(AgentOptions {
            model: Some(config::get("MODEL").unwrap_or_else(|| "claude-sonnet-4-5".to_string())),
            system_prompt: None,
            append_system_prompt: Some(format!(
                "You resolve order problems for ACME (session {}). Look an order up before you refund it.",
                ctx.session_id
            )),
            tools: Some(vec!["Read".into(), "Grep".into(), "Bash".into()]),
            disallowed_tools: vec!["WebFetch".into(), "WebSearch".into()],
            cwd: None,
            env: Vec::new(),
            permission_mode: Some("default".into()),
            max_turns: Some(20),
            max_budget_usd: Some(2.0),
            mcp_servers: Vec::new(),
            setting_sources: Vec::new(),
            extra: None,
        })
    }
}

const READ_ONLY_COMMANDS: &[&str] = &["ls", "cat", "head", "tail", "wc", "grep", "pwd", "echo"];

impl CliPolicy for Factory {
    fn decide_cli_tool(name: String, input: String) -> Option<Decision> {
        if name != "Bash" {
            return None;
        }
        let input: serde_json::Value = serde_json::from_str(&input).ok()?;
        let command = input.get("command")?.as_str()?.trim();
        let program = command.split_whitespace().next().unwrap_or_default();
        if command.contains(['|', ';', '&', '>', '<', '`', '$']) {
            return Some(Decision::RequireApproval);
        }
        if program == "rm" {
            return Some(Decision::Deny("Deleting files is not allowed for this agent.".into()));
        }
        if READ_ONLY_COMMANDS.contains(&program) {
            return Some(Decision::Allow);
        }
        Some(Decision::RequireApproval)
    }
}

bindings::export!(Factory with_types_in bindings);
