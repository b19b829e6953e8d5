//! The support agent's options factory (`tollgate:agent@0.3.0`: options, a CLI policy and a
//! review).
//!
//! `build-options` gives every segment the same options, with the session in the system prompt and
//! the model overridable through the `MODEL` config key. `decide-cli-tool` is a `Bash` allow-list
//! as code: read-only commands run, `rm` is refused, anything else waits for a human.
//! `review-call` checks a refund against the order the session looked up: more than the order's
//! total is a high risk ("refund exceeds the order total of €54.00"), within it a low one, and a
//! refund of an order the session never looked up a medium one.

/// The bindings wit-bindgen generates for the world (private: nothing outside uses them).
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        inline: "
            package example:support;

            world support-factory {
                include tollgate:agent/options-factory-with-cli-policy@0.3.0;
                export tollgate:agent/review@0.3.0;
            }
        ",
        world: "example:support/support-factory",
        generate_all,
    });
}

use bindings::exports::tollgate::agent::cli_policy::Guest as CliPolicy;
use bindings::exports::tollgate::agent::options::Guest as Options;
use bindings::exports::tollgate::agent::review::{
    Guest as Review, PendingCall, ReviewAnswer, Risk, ToolRecord, ToolStatus,
};
use bindings::tollgate::agent::types::{AgentOptions, Decision, OptionsContext};
use bindings::tollgate::tool::{config, log};
use serde_json::Value;

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
            hooks: Vec::new(),
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

impl Review for Factory {
    fn review_call(call: PendingCall, recent: Vec<ToolRecord>) -> Result<ReviewAnswer, String> {
        if call.tool_name != "create_refund" {
            return Ok(ReviewAnswer { notes: Vec::new(), risk: Risk::Low });
        }
        let args: Value = serde_json::from_str(&call.arguments).map_err(|e| format!("arguments: {e}"))?;
        let order_id = args.get("order_id").and_then(Value::as_str).ok_or("the refund names no order_id")?;
        let amount =
            args.get("amount_cents").and_then(Value::as_u64).ok_or("the refund has no amount_cents")?;
        // The newest lookup of this order that succeeded.
        let order = recent.iter().rev().find_map(|record| {
            let looked_up = record.tool_name == "lookup_order"
                && matches!(record.status, ToolStatus::Succeeded)
                && serde_json::from_str::<Value>(&record.input).ok()?.get("order_id")?.as_str()
                    == Some(order_id);
            if !looked_up {
                return None;
            }
            let order: Value = serde_json::from_str(record.output.as_deref()?).ok()?;
            let total = order.get("total_cents")?.as_u64()?;
            let currency = order.get("currency").and_then(Value::as_str).unwrap_or("EUR").to_owned();
            Some((total, currency))
        });
        let Some((total, currency)) = order else {
            return Ok(ReviewAnswer {
                notes: vec![format!(
                    "order {order_id} was not looked up in this session: its total is unknown"
                )],
                risk: Risk::Medium,
            });
        };
        let total_text = money(total, &currency);
        Ok(if amount > total {
            ReviewAnswer {
                notes: vec![format!("refund exceeds the order total of {total_text}")],
                risk: Risk::High,
            }
        } else {
            ReviewAnswer {
                notes: vec![format!("refund is within the order total of {total_text}")],
                risk: Risk::Low,
            }
        })
    }
}

/// `cents` of `currency` as an amount is written in English: `€54.00`, `$1,250.00`, `1,250.00 CHF`.
fn money(cents: u64, currency: &str) -> String {
    let units = (cents / 100).to_string();
    let mut grouped = String::new();
    for (i, digit) in units.chars().enumerate() {
        if i > 0 && (units.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    let amount = format!("{grouped}.{:02}", cents % 100);
    match currency {
        "EUR" => format!("€{amount}"),
        "USD" => format!("${amount}"),
        "GBP" => format!("£{amount}"),
        other => format!("{amount} {other}"),
    }
}

bindings::export!(Factory with_types_in bindings);
