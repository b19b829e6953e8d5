//! The Claude Code options of one segment ([`AgentOptions`]) and the one check that stops them
//! from letting a tool call bypass the gate ([`check_options`]). Read [`check_options`] first.
//!
//! Options come from two places: the options factory (`tollgate-sandbox` converts its WIT
//! `agent-options` record) and the static `[options]` table of `tollgate.toml` (the binary's
//! `AgentConfig`). Both go through [`check_options`], whose only way out is [`CheckedOptions`]:
//! `tollgate-claude` turns checked options into the CLI's arguments and cannot be handed unchecked
//! ones. This crate owns the type because both of those crates depend on it and neither may depend
//! on the other, and because what it checks is the gate's own safety (docs/ARCHITECTURE.md, "The
//! gate's rules").
//!
//! ```
//! use tollgate_engine::options::{AgentOptions, check_options};
//!
//! let options = AgentOptions { permission_mode: Some("bypassPermissions".into()), ..AgentOptions::default() };
//! let error = check_options(options, "tools").unwrap_err();
//! assert!(error.to_string().contains("would let tool calls bypass the gate"));
//! ```
//!
//! # Caveats
//!
//! - The options' `env` is not checked: it is the CLI's environment, and it wins over the
//!   segment's own variables (the Worker's documented behaviour).
//! - Settings files named by `setting_sources` are read by the CLI as they are; their hooks and
//!   permission rules cannot skip the gate's `PreToolUse` hook, which the host registers for every
//!   tool.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::hooks::{HookError, HookMatcher, check_matchers};

/// Permission modes that would let a call run without the gate seeing it.
pub const BYPASSING_MODES: &[&str] = &["bypassPermissions", "acceptEdits", "auto"];

/// Permission modes a durable session cannot keep: `plan` ([`OptionsError::UnsupportedPermissionMode`]
/// says why).
pub const UNSUPPORTED_MODES: &[&str] = &["plan"];

/// CLI options the host owns: `extra` may not set them (they would replace the host's protocol
/// flags, its tool server, its permission flow or its settings).
pub const OWNED_FLAGS: &[&str] = &[
    "resume",
    "continue",
    "fork-session",
    "session-id",
    "mcp-config",
    "strict-mcp-config",
    "await-initialize",
    "await-claim",
    "permission-prompt-tool",
    "permission-mode",
    "dangerously-skip-permissions",
    "allow-dangerously-skip-permissions",
    "allowedTools",
    "allowed-tools",
    "output-format",
    "input-format",
    "verbose",
    "resume-session-at",
    "resume-drops-turn",
    "session-mirror",
    "include-partial-messages",
    "setting-sources",
    "settings",
    "print",
    "p",
];

/// An external MCP server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McpServer {
    /// Its name.
    pub name: String,
    /// Its `--mcp-config` entry.
    pub config: serde_json::Value,
}

/// The Claude Code options of one segment (`agent-options` in the WIT, `[options]` in
/// `tollgate.toml`). The default is the CLI's own defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentOptions {
    /// The model.
    pub model: Option<String>,
    /// Replaces the system prompt.
    pub system_prompt: Option<String>,
    /// Appended to the system prompt.
    pub append_system_prompt: Option<String>,
    /// Built-in tools offered; `None` keeps the CLI's default set.
    pub tools: Option<Vec<String>>,
    /// Built-in tools taken away.
    #[serde(default)]
    pub disallowed_tools: Vec<String>,
    /// The CLI's working directory.
    pub cwd: Option<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The permission mode.
    pub permission_mode: Option<String>,
    /// Model round trips per segment.
    pub max_turns: Option<u32>,
    /// Spend limit per turn, in US dollars.
    pub max_budget_usd: Option<f64>,
    /// External MCP servers.
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
    /// Settings files the CLI reads.
    #[serde(default)]
    pub setting_sources: Vec<String>,
    /// Further CLI options: `{"flag": value}` becomes `--flag=value` (`true` or `null`: `--flag`;
    /// `false`: left out).
    pub extra: Option<serde_json::Value>,
    /// The agent's own hooks ([`crate::hooks`]): only an options factory that runs them can name
    /// them, so `[options]` of `tollgate.toml` cannot.
    #[serde(skip)]
    pub hooks: Vec<HookMatcher>,
}

/// Options that passed [`check_options`]. The only way to make one (besides the default, the
/// CLI's own defaults); read the options through `Deref`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckedOptions(AgentOptions);

impl CheckedOptions {
    /// The options.
    pub fn into_inner(self) -> AgentOptions {
        self.0
    }
}

impl std::ops::Deref for CheckedOptions {
    type Target = AgentOptions;

    fn deref(&self) -> &AgentOptions {
        &self.0
    }
}

/// Why options were refused. The texts name the option and, for a bypass, what to use instead.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum OptionsError {
    /// A permission mode that skips the permission checks the gate answers.
    #[error("permission mode `{mode}` would let tool calls bypass the gate; use `default` or `dontAsk`")]
    BypassingPermissionMode {
        /// The mode.
        mode: String,
    },
    /// A permission mode a durable session cannot keep ([`UNSUPPORTED_MODES`]). In `plan` mode
    /// the model leaves the mode by calling `ExitPlanMode`, which Claude Code (2.1.328) asks a
    /// person about inside the CLI process even after the gate's hook allowed it, and a session's
    /// every segment starts a new CLI in the options' mode: the session would stay in plan mode.
    #[error(
        "permission mode `{mode}` is not supported: the model leaves plan mode by calling ExitPlanMode, \
         which Claude Code asks a person about inside one CLI process, and every segment of a session \
         starts a new CLI in the mode the options name; use `default` or `dontAsk`"
    )]
    UnsupportedPermissionMode {
        /// The mode.
        mode: String,
    },
    /// A hook the agent names that does not fit its event ([`crate::hooks::check_matchers`]).
    #[error("hooks: {0}")]
    Hooks(#[from] HookError),
    /// An external MCP server that takes the host's tool server name (its tools would pass for
    /// the host's custom tools).
    #[error("MCP server name `{name}` is the host's own tool server; rename it")]
    ReusedToolServer {
        /// The name.
        name: String,
    },
    /// An external MCP server whose config is not a JSON object.
    #[error("MCP server `{name}`: its config must be a JSON object")]
    McpConfigNotAnObject {
        /// The server.
        name: String,
    },
    /// `extra` that is not a JSON object.
    #[error("`extra` must be a JSON object")]
    ExtraNotAnObject,
    /// An `extra` key that is not a plain flag name (`--a=b c` would smuggle in another flag).
    #[error(
        "options `extra` key {key:?} is not a flag name (letters, digits and `-`, not starting with `-`)"
    )]
    NotAFlagName {
        /// The key.
        key: String,
    },
    /// An `extra` flag the host sets itself ([`OWNED_FLAGS`]).
    #[error("options `extra` sets --{flag}, which Tollgate owns")]
    OwnedFlag {
        /// The flag, without `--`.
        flag: String,
    },
    /// A spend limit that is not a positive number.
    #[error("max-budget-usd must be a positive number, not {budget}")]
    BadBudget {
        /// The value.
        budget: f64,
    },
}

impl OptionsError {
    /// The option at fault, as its key in `[options]`.
    pub fn option(&self) -> &'static str {
        match self {
            OptionsError::BypassingPermissionMode { .. } | OptionsError::UnsupportedPermissionMode { .. } => {
                "permission_mode"
            }
            OptionsError::Hooks(_) => "hooks",
            OptionsError::ReusedToolServer { .. } | OptionsError::McpConfigNotAnObject { .. } => {
                "mcp_servers"
            }
            OptionsError::ExtraNotAnObject
            | OptionsError::NotAFlagName { .. }
            | OptionsError::OwnedFlag { .. } => "extra",
            OptionsError::BadBudget { .. } => "max_budget_usd",
        }
    }
}

/// Checks `options` for the host whose tool server is named `tool_server`; every rule that
/// stops an option from letting a tool call bypass the gate is here:
///
/// | rule | refused |
/// | --- | --- |
/// | permission mode | [`BYPASSING_MODES`] (`--dangerously-skip-permissions` and `--permission-mode` through `extra` are owned flags); [`UNSUPPORTED_MODES`] |
/// | MCP servers | one named `tool_server`; a config that is not a JSON object |
/// | `extra` | not a JSON object; a key that is not a flag name; an [`OWNED_FLAGS`] flag (the host's MCP config, permission flow, allowed tools, settings and settings sources, resume and protocol flags) |
/// | `max_budget_usd` | not a positive number |
/// | `hooks` | what [`crate::hooks::check_matchers`] refuses |
///
/// # Errors
/// The first rule broken, in the order of the table.
pub fn check_options(options: AgentOptions, tool_server: &str) -> Result<CheckedOptions, OptionsError> {
    if let Some(mode) = &options.permission_mode
        && BYPASSING_MODES.contains(&mode.as_str())
    {
        return Err(OptionsError::BypassingPermissionMode { mode: mode.clone() });
    }
    if let Some(mode) = &options.permission_mode
        && UNSUPPORTED_MODES.contains(&mode.as_str())
    {
        return Err(OptionsError::UnsupportedPermissionMode { mode: mode.clone() });
    }
    for server in &options.mcp_servers {
        if server.name == tool_server {
            return Err(OptionsError::ReusedToolServer { name: server.name.clone() });
        }
        if !server.config.is_object() {
            return Err(OptionsError::McpConfigNotAnObject { name: server.name.clone() });
        }
    }
    match &options.extra {
        None => {}
        Some(serde_json::Value::Object(extra)) => {
            for flag in extra.keys() {
                let plain = flag.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
                if flag.is_empty() || flag.starts_with('-') || !plain {
                    return Err(OptionsError::NotAFlagName { key: flag.clone() });
                }
                if OWNED_FLAGS.contains(&flag.as_str()) {
                    return Err(OptionsError::OwnedFlag { flag: flag.clone() });
                }
            }
        }
        Some(_) => return Err(OptionsError::ExtraNotAnObject),
    }
    if let Some(budget) = options.max_budget_usd
        && !(budget.is_finite() && budget > 0.0)
    {
        return Err(OptionsError::BadBudget { budget });
    }
    check_matchers(&options.hooks)?;
    Ok(CheckedOptions(options))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn error_of(options: serde_json::Value) -> String {
        let options: AgentOptions = serde_json::from_value(options).expect("well-formed options");
        check_options(options, "tools").expect_err("the options are refused").to_string()
    }

    #[test]
    fn permission_modes_that_bypass_the_gate_are_refused() {
        for mode in ["bypassPermissions", "acceptEdits", "auto"] {
            assert_eq!(
                error_of(json!({"permission_mode": mode})),
                format!(
                    "permission mode `{mode}` would let tool calls bypass the gate; use `default` or `dontAsk`"
                )
            );
        }
        for mode in ["default", "dontAsk"] {
            let options = AgentOptions { permission_mode: Some(mode.into()), ..AgentOptions::default() };
            assert_eq!(check_options(options.clone(), "tools").map(CheckedOptions::into_inner), Ok(options));
        }
    }

    #[test]
    fn plan_mode_is_refused_saying_why_a_session_could_not_leave_it() {
        let error = error_of(json!({"permission_mode": "plan"}));
        assert!(
            error.starts_with(
                "permission mode `plan` is not supported: the model leaves plan mode by calling ExitPlanMode"
            ),
            "{error}"
        );
        assert!(error.ends_with("use `default` or `dontAsk`"), "{error}");
        let options = AgentOptions { permission_mode: Some("plan".into()), ..AgentOptions::default() };
        assert_eq!(check_options(options, "tools").unwrap_err().option(), "permission_mode");
    }

    #[test]
    fn hooks_come_only_from_a_factory_and_are_checked() {
        let error = serde_json::from_value::<AgentOptions>(json!({"hooks": []})).unwrap_err();
        assert!(error.to_string().contains("unknown field `hooks`"), "{error}");
        let stop = |matcher: Option<&str>| HookMatcher {
            event: crate::hooks::HookEvent::Stop,
            matcher: matcher.map(str::to_owned),
        };
        let options = AgentOptions { hooks: vec![stop(None)], ..AgentOptions::default() };
        assert_eq!(check_options(options.clone(), "tools").map(CheckedOptions::into_inner), Ok(options));
        let bad = AgentOptions { hooks: vec![stop(Some("Bash"))], ..AgentOptions::default() };
        let error = check_options(bad, "tools").unwrap_err();
        assert_eq!(error.option(), "hooks");
        assert_eq!(error.to_string(), "hooks: hook 0 (Stop): Stop hooks take no matcher, found \"Bash\"");
    }

    #[test]
    fn an_mcp_server_may_not_take_the_host_servers_name() {
        let error = error_of(json!({"mcp_servers": [{"name": "tools", "config": {"type": "http"}}]}));
        assert_eq!(error, "MCP server name `tools` is the host's own tool server; rename it");
        let other = AgentOptions {
            mcp_servers: vec![McpServer { name: "docs".into(), config: json!({"type": "http"}) }],
            ..AgentOptions::default()
        };
        assert!(check_options(other, "tools").is_ok(), "another name is fine");
    }

    #[test]
    fn an_mcp_servers_config_must_be_an_object() {
        let error = error_of(json!({"mcp_servers": [{"name": "docs", "config": "http://x"}]}));
        assert_eq!(error, "MCP server `docs`: its config must be a JSON object");
    }

    #[test]
    fn extra_must_be_an_object() {
        assert_eq!(error_of(json!({"extra": ["--verbose"]})), "`extra` must be a JSON object");
    }

    #[test]
    fn an_extra_flag_that_tollgate_owns_is_refused_by_name() {
        for flag in
            ["resume", "mcp-config", "permission-mode", "dangerously-skip-permissions", "allowedTools"]
        {
            let error = error_of(json!({"extra": {flag: "x"}}));
            assert!(error.contains(&format!("--{flag}")), "{error}");
            assert_eq!(error, format!("options `extra` sets --{flag}, which Tollgate owns"));
        }
        for flag in OWNED_FLAGS {
            assert!(error_of(json!({"extra": {*flag: true}})).contains("which Tollgate owns"), "{flag}");
        }
    }

    #[test]
    fn an_extra_key_that_is_not_a_plain_flag_name_cannot_smuggle_an_owned_flag() {
        for key in ["permission-mode=bypassPermissions", "--permission-mode", "effort high", ""] {
            assert_eq!(
                error_of(json!({"extra": {key: true}})),
                format!(
                    "options `extra` key {key:?} is not a flag name (letters, digits and `-`, not starting with `-`)"
                )
            );
        }
        let plain =
            json!({"extra": {"effort": "high", "betas": "interleaved-thinking", "max-thinking-tokens": 5}});
        assert!(check_options(serde_json::from_value(plain).unwrap(), "tools").is_ok());
    }

    #[test]
    fn a_budget_must_be_a_positive_number() {
        for budget in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let options = AgentOptions { max_budget_usd: Some(budget), ..AgentOptions::default() };
            assert_eq!(
                check_options(options, "tools").unwrap_err().to_string(),
                format!("max-budget-usd must be a positive number, not {budget}")
            );
        }
    }

    #[test]
    fn options_from_toml_or_json_share_one_shape_and_unknown_keys_are_refused() {
        let options: AgentOptions = toml::from_str("model = \"m\"\ntools = [\"Read\"]\n").unwrap();
        assert_eq!(options.model.as_deref(), Some("m"));
        let error = toml::from_str::<AgentOptions>("modle = \"m\"\n").unwrap_err().to_string();
        assert!(error.contains("modle"), "{error}");
    }
}
