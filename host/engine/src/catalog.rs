//! The tools a segment offers, and how a tool name the CLI reports maps onto them.
//!
//! This module owns the naming rules: custom tools (served by Tollgate's in-process MCP server,
//! default name [`DEFAULT_TOOL_SERVER_NAME`]) are named bare in policies and records
//! (`create_refund`), and the CLI reports them as `mcp__<server>__<name>`; every other name is a
//! CLI tool — a Claude Code built-in (`Bash`) or a tool of an external MCP server
//! (`mcp__github__create_issue`), both of which run inside the CLI. It does not own the policies
//! ([`crate::policy`]) or the decisions ([`crate::gate`]).
//!
//! Read [`ToolCatalog`] first, then [`ToolCatalog::classify`].
//!
//! ```
//! use tollgate_engine::catalog::{ToolCatalog, ToolRef};
//! use tollgate_engine::policy::Annotations;
//!
//! let catalog = ToolCatalog::new("tools")?
//!     .with_tool("lookup_order", Annotations { read_only: true, ..Annotations::default() })?;
//! assert_eq!(
//!     catalog.classify("mcp__tools__lookup_order"),
//!     ToolRef::Custom { name: "lookup_order", listed: true }
//! );
//! assert_eq!(catalog.classify("Bash"), ToolRef::Cli { name: "Bash" });
//! # Ok::<(), tollgate_engine::catalog::CatalogError>(())
//! ```
//!
//! # Caveats
//!
//! [`CLAUDE_CODE_BUILT_IN_TOOL_NAMES`] is a snapshot. A newer CLI may add a tool whose name a
//! custom tool already uses; [`ToolCatalog::classify`] then reports a [`ToolRef::Collision`] at
//! the first call, and the gate denies it and fails the segment.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::policy::{Annotations, Policies};

/// The default name of Tollgate's in-process MCP server (`--mcp-config` `mcpServers.tools`).
pub const DEFAULT_TOOL_SERVER_NAME: &str = "tools";

/// Claude Code tool names a custom tool must not use (`CLAUDE_CODE_BUILT_IN_TOOL_NAMES` in the
/// reference adapters).
///
/// The `system/init` `tools` list of CLI 2.1.328 (as captured), plus the built-in names of other
/// 2.x builds that the reference adapters and Claude Code's documentation mention (`Agent`,
/// `Glob`, `Grep`, `LS`, `MultiEdit`, …), so that an agent keeps working across CLI upgrades.
pub const CLAUDE_CODE_BUILT_IN_TOOL_NAMES: &[&str] = &[
    "Agent",
    "AskUserQuestion",
    "Bash",
    "BashOutput",
    "CronCreate",
    "CronDelete",
    "CronList",
    "Edit",
    "EnterPlanMode",
    "EnterWorktree",
    "ExitPlanMode",
    "ExitWorktree",
    "Glob",
    "Grep",
    "KillShell",
    "LS",
    "ListAgents",
    "Monitor",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "Read",
    "ReportFindings",
    "ScheduleWakeup",
    "SendMessage",
    "Skill",
    "SlashCommand",
    "Task",
    "TaskOutput",
    "TaskStop",
    "TodoWrite",
    "ToolSearch",
    "WebFetch",
    "WebSearch",
    "Workflow",
    "Write",
];

/// Whether `name` is a Claude Code built-in tool's name in any letter case (`bash`, `READ`): a
/// custom tool so named would read as the built-in to the model and to anyone reviewing a
/// policy or a record, so the comparison ignores ASCII case.
pub fn is_built_in_name(name: &str) -> bool {
    CLAUDE_CODE_BUILT_IN_TOOL_NAMES.iter().any(|built_in| built_in.eq_ignore_ascii_case(name))
}

/// The prefix of every MCP tool name in the CLI.
const MCP_PREFIX: &str = "mcp__";

/// Which side runs a tool. Serialized as `custom` / `cli` in records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// A custom tool: a WASM component behind Tollgate's MCP server. Named bare.
    Custom,
    /// A tool that runs inside the CLI: a built-in or a tool of an external MCP server. Named as
    /// the CLI names it.
    Cli,
}

/// What a tool name the CLI reports refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolRef<'a> {
    /// `mcp__<our server>__<name>`: a custom tool. `listed` is false when the current listing
    /// lacks it (it vanished, or the model made the name up).
    Custom {
        /// The bare name.
        name: &'a str,
        /// Whether the catalog lists it now.
        listed: bool,
    },
    /// A built-in or an external MCP server's tool.
    Cli {
        /// The CLI's name.
        name: &'a str,
    },
    /// A bare name that a custom tool also uses: a Claude Code tool added after the catalog was
    /// checked.
    Collision {
        /// The shared name.
        name: &'a str,
    },
}

/// The custom tools of one segment attempt, with their annotations, and the server that serves
/// them. Tools are listed per attempt, so build a new catalog for every `RunModel` attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCatalog {
    server_name: String,
    prefix: String,
    tools: BTreeMap<String, Annotations>,
    /// The agent's tool components that did not load, with why: a call of a tool not listed names
    /// them ([`crate::texts::TOOL_UNAVAILABLE`]).
    unavailable: Vec<(String, String)>,
}

impl ToolCatalog {
    /// An empty catalog served as `server_name`.
    ///
    /// # Errors
    ///
    /// [`CatalogError::InvalidServerName`] unless the name is non-empty ASCII letters, digits,
    /// `_` and `-`, without `__` (which would make `mcp__<server>__<tool>` ambiguous).
    pub fn new(server_name: impl Into<String>) -> Result<Self, CatalogError> {
        let server_name = server_name.into();
        let valid = !server_name.is_empty()
            && !server_name.contains("__")
            && server_name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(CatalogError::InvalidServerName { name: server_name });
        }
        let prefix = format!("{MCP_PREFIX}{server_name}__");
        Ok(Self { server_name, prefix, tools: BTreeMap::new(), unavailable: Vec::new() })
    }

    /// The same catalog with one more custom tool.
    ///
    /// # Errors
    ///
    /// [`CatalogError::EmptyName`], [`CatalogError::Duplicate`], [`CatalogError::McpPrefix`] and
    /// [`CatalogError::BuiltInName`]: "Custom tool names must be unique and must not be a Claude
    /// Code tool name" (the reference adapters, "Running an agent"), nor start with `mcp__`.
    pub fn with_tool(
        mut self,
        name: impl Into<String>,
        annotations: Annotations,
    ) -> Result<Self, CatalogError> {
        let name = name.into();
        if name.is_empty() {
            return Err(CatalogError::EmptyName);
        }
        if name.starts_with(MCP_PREFIX) {
            return Err(CatalogError::McpPrefix { name });
        }
        if is_built_in_name(&name) {
            return Err(CatalogError::BuiltInName { name });
        }
        if self.tools.contains_key(&name) {
            return Err(CatalogError::Duplicate { name });
        }
        self.tools.insert(name, annotations);
        Ok(self)
    }

    /// The same catalog, knowing that tool component `component` did not load, for `reason`.
    #[must_use]
    pub fn with_unavailable(mut self, component: impl Into<String>, reason: impl Into<String>) -> Self {
        self.unavailable.push((component.into(), reason.into()));
        self
    }

    /// What the model reads for a new call of `name`, a custom tool the catalog does not list:
    /// [`crate::texts::TOOL_UNAVAILABLE`] naming the unavailable components when there are any,
    /// else [`crate::texts::TOOL_NOT_OFFERED`].
    pub fn not_offered(&self, name: &str) -> String {
        if self.unavailable.is_empty() {
            return crate::texts::render(crate::texts::TOOL_NOT_OFFERED, name);
        }
        crate::texts::tool_unavailable(name, self.unavailable.iter().map(|(c, r)| (c.as_str(), r.as_str())))
    }

    /// The MCP server's name.
    pub fn server_name(&self) -> &str {
        &self.server_name
    }

    /// The annotations of a listed custom tool.
    pub fn annotations(&self, name: &str) -> Option<&Annotations> {
        self.tools.get(name)
    }

    /// Every listed custom tool, by name.
    pub fn tools(&self) -> impl Iterator<Item = (&str, &Annotations)> {
        self.tools.iter().map(|(name, annotations)| (name.as_str(), annotations))
    }

    /// The name the CLI and the model use for the custom tool `name`: `mcp__<server>__<name>`.
    pub fn cli_name(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The name the model uses for a tool of `kind` that records name `name`.
    pub fn model_name(&self, kind: ToolKind, name: &str) -> String {
        match kind {
            ToolKind::Custom => self.cli_name(name),
            ToolKind::Cli => name.to_owned(),
        }
    }

    /// What the CLI's `tool_name` refers to.
    pub fn classify<'a>(&self, cli_tool_name: &'a str) -> ToolRef<'a> {
        if let Some(name) = cli_tool_name.strip_prefix(self.prefix.as_str()) {
            return ToolRef::Custom { name, listed: self.tools.contains_key(name) };
        }
        if self.tools.contains_key(cli_tool_name) {
            return ToolRef::Collision { name: cli_tool_name };
        }
        ToolRef::Cli { name: cli_tool_name }
    }

    /// Checks that no policy names a custom tool by its prefixed CLI name.
    ///
    /// # Errors
    ///
    /// [`CatalogError::PolicyUsesServerPrefix`] for the first key of the form
    /// `mcp__<this server>__<tool>` ("Policies use a custom tool's own name (`create_refund`, not
    /// `mcp__tools__create_refund`)").
    pub fn check_policies(&self, policies: &Policies) -> Result<(), CatalogError> {
        for (key, _) in policies.iter() {
            if let Some(bare) = key.strip_prefix(self.prefix.as_str()) {
                return Err(CatalogError::PolicyUsesServerPrefix {
                    key: key.to_owned(),
                    bare: bare.to_owned(),
                });
            }
        }
        Ok(())
    }
}

/// What is wrong with the custom tools or their server name. All are terminal: the agent's tools
/// or configuration must change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// The server name cannot form `mcp__<server>__<tool>` names.
    #[error("invalid tool server name `{name}`: use ASCII letters, digits, `_` and `-`, without `__`")]
    InvalidServerName {
        /// The name.
        name: String,
    },
    /// A custom tool has an empty name.
    #[error("a custom tool has an empty name")]
    EmptyName,
    /// Two custom tools share a name.
    #[error("two custom tools are named `{name}`")]
    Duplicate {
        /// The name.
        name: String,
    },
    /// A custom tool uses a Claude Code tool's name.
    #[error("custom tool `{name}` has the name of a Claude Code tool")]
    BuiltInName {
        /// The name.
        name: String,
    },
    /// A custom tool's name starts with `mcp__`.
    #[error("custom tool `{name}` must not start with `mcp__`: policies and records name custom tools bare")]
    McpPrefix {
        /// The name.
        name: String,
    },
    /// A policy names a custom tool by its CLI name.
    #[error("[policies] `{key}` names a custom tool by its CLI name; use `{bare}`")]
    PolicyUsesServerPrefix {
        /// The policy key.
        key: String,
        /// The bare name to use.
        bare: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Effect, PolicyEntry};

    fn catalog() -> ToolCatalog {
        let built = ToolCatalog::new(DEFAULT_TOOL_SERVER_NAME)
            .and_then(|catalog| catalog.with_tool("lookup_order", Annotations::default()))
            .and_then(|catalog| catalog.with_tool("create_refund", Annotations::default()));
        match built {
            Ok(catalog) => catalog,
            Err(error) => panic!("catalog: {error}"),
        }
    }

    #[test]
    fn our_servers_tools_are_custom_and_named_bare() {
        let catalog = catalog();
        assert_eq!(
            catalog.classify("mcp__tools__create_refund"),
            ToolRef::Custom { name: "create_refund", listed: true }
        );
        assert_eq!(catalog.cli_name("create_refund"), "mcp__tools__create_refund");
        assert_eq!(catalog.model_name(ToolKind::Custom, "create_refund"), "mcp__tools__create_refund");
        assert_eq!(catalog.model_name(ToolKind::Cli, "Bash"), "Bash");
    }

    #[test]
    fn a_custom_tool_the_listing_lacks_is_custom_but_not_listed() {
        assert_eq!(
            catalog().classify("mcp__tools__vanished"),
            ToolRef::Custom { name: "vanished", listed: false }
        );
    }

    #[test]
    fn built_ins_and_external_mcp_tools_are_cli_tools() {
        let catalog = catalog();
        assert_eq!(catalog.classify("Bash"), ToolRef::Cli { name: "Bash" });
        assert_eq!(
            catalog.classify("mcp__github__create_issue"),
            ToolRef::Cli { name: "mcp__github__create_issue" }
        );
        // Another server whose name starts like ours is not ours.
        assert_eq!(catalog.classify("mcp__toolsmith__x"), ToolRef::Cli { name: "mcp__toolsmith__x" });
    }

    #[test]
    fn a_bare_name_that_a_custom_tool_uses_is_a_collision() {
        assert_eq!(catalog().classify("lookup_order"), ToolRef::Collision { name: "lookup_order" });
    }

    #[test]
    fn custom_tool_names_must_be_unique() {
        assert_eq!(
            catalog().with_tool("lookup_order", Annotations::default()),
            Err(CatalogError::Duplicate { name: "lookup_order".to_owned() })
        );
    }

    #[test]
    fn a_custom_tool_must_not_use_a_claude_code_tool_name() {
        for name in ["Bash", "Write", "WebFetch", "Task", "Agent", "bash", "READ", "webfetch", "tOdOwRiTe"] {
            assert_eq!(
                catalog().with_tool(name, Annotations::default()),
                Err(CatalogError::BuiltInName { name: name.to_owned() })
            );
        }
    }

    #[test]
    fn a_custom_tool_must_not_start_with_mcp() {
        assert_eq!(
            catalog().with_tool("mcp__tools__x", Annotations::default()),
            Err(CatalogError::McpPrefix { name: "mcp__tools__x".to_owned() })
        );
        assert_eq!(catalog().with_tool("", Annotations::default()), Err(CatalogError::EmptyName));
    }

    #[test]
    fn a_server_name_must_form_unambiguous_mcp_names() {
        for name in ["", "my__tools", "tools!", "tö"] {
            assert_eq!(
                ToolCatalog::new(name),
                Err(CatalogError::InvalidServerName { name: name.to_owned() })
            );
        }
        assert!(ToolCatalog::new("my-tools_2").is_ok());
    }

    #[test]
    fn a_policy_that_names_a_custom_tool_by_its_cli_name_is_rejected() {
        let policies = Policies::default()
            .with("mcp__tools__create_refund", PolicyEntry::new(Effect::NonIdempotentWrite))
            .and_then(|policies| policies.with("mcp__github__create_issue", PolicyEntry::new(Effect::Read)));
        let Ok(policies) = policies else { panic!("valid policies") };
        assert_eq!(
            catalog().check_policies(&policies),
            Err(CatalogError::PolicyUsesServerPrefix {
                key: "mcp__tools__create_refund".to_owned(),
                bare: "create_refund".to_owned(),
            })
        );
        let external_only =
            Policies::default().with("mcp__github__create_issue", PolicyEntry::new(Effect::Read));
        let Ok(external_only) = external_only else { panic!("valid policies") };
        assert_eq!(catalog().check_policies(&external_only), Ok(()));
    }

    #[test]
    fn the_built_in_list_is_sorted_and_free_of_duplicates() {
        assert!(CLAUDE_CODE_BUILT_IN_TOOL_NAMES.windows(2).all(|pair| pair[0] < pair[1]));
    }
}
