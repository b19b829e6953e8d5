//! An options factory of `tollgate:agent@0.3.0` (`options-factory-with-review`) whose review of a
//! call does what the call's `review` argument says (or, without one, its `REVIEW` config key), so
//! a test steers it with the model's input or the factory's manifest:
//!
//! | `review` | answer |
//! | --- | --- |
//! | `trap` | panics (the component traps) |
//! | `loop` | loops for ever (the host's time limit stops it) |
//! | `refuse` | an `err` |
//! | `flood` | 50 notes of 2,000 characters each, risk `high` |
//! | anything else, or none | risk `medium` and a note per recent tool record: `<tool> <status>` |

/// The bindings wit-bindgen generates for the world (private: nothing outside uses them).
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "tollgate:agent/options-factory-with-review@0.3.0",
        generate_all,
    });
}

use bindings::exports::tollgate::agent::options::Guest as Options;
use bindings::exports::tollgate::agent::review::{
    Guest as Review, PendingCall, ReviewAnswer, Risk, ToolRecord, ToolStatus,
};
use bindings::tollgate::agent::types::{AgentOptions, OptionsContext};
use bindings::tollgate::tool::config;

struct Factory;

impl Options for Factory {
    fn build_options(_ctx: OptionsContext) -> Result<AgentOptions, String> {
        Ok(AgentOptions {
            model: None,
            system_prompt: None,
            append_system_prompt: None,
            tools: Some(vec!["Read".into()]),
            disallowed_tools: Vec::new(),
            cwd: None,
            env: Vec::new(),
            permission_mode: None,
            max_turns: Some(20),
            max_budget_usd: None,
            mcp_servers: Vec::new(),
            setting_sources: Vec::new(),
            extra: None,
            hooks: Vec::new(),
        })
    }
}

impl Review for Factory {
    fn review_call(call: PendingCall, recent: Vec<ToolRecord>) -> Result<ReviewAnswer, String> {
        let arguments: serde_json::Value =
            serde_json::from_str(&call.arguments).map_err(|e| e.to_string())?;
        let how = arguments.get("review").and_then(serde_json::Value::as_str).map(str::to_owned);
        match how.or_else(|| config::get("REVIEW")).as_deref() {
            Some("trap") => panic!("the review trapped on purpose"),
            Some("loop") => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Some("refuse") => Err("the review refused on purpose".into()),
            Some("flood") => Ok(ReviewAnswer { notes: vec!["x".repeat(2000); 50], risk: Risk::High }),
            _ => Ok(ReviewAnswer {
                notes: recent
                    .iter()
                    .map(|r| {
                        let status = match r.status {
                            ToolStatus::Succeeded => "succeeded",
                            ToolStatus::Failed => "failed",
                            ToolStatus::Rejected => "rejected",
                            ToolStatus::OutcomeUnknown => "outcome-unknown",
                        };
                        format!("{} {status}", r.tool_name)
                    })
                    .collect(),
                risk: Risk::Medium,
            }),
        }
    }
}

bindings::export!(Factory with_types_in bindings);
