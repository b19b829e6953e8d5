//! The options factory: a `tollgate:agent` component that gives each segment its Claude Code
//! options, and may decide calls of Claude Code built-in tools. Read [`OptionsFactory`] first.
//!
//! It is loaded like a tool component (cache, manifest, limits) and runs in a fresh instance per
//! call, so it cannot keep state between segments: the same context must give the same options
//! on every Worker.

use std::path::{Path, PathBuf};

use tollgate_engine::catalog::DEFAULT_TOOL_SERVER_NAME;
use tollgate_engine::gate::CliToolDecision;
use tollgate_engine::options::{AgentOptions, CheckedOptions, McpServer, check_options};

use crate::bindings::agent::plain::OptionsFactoryPre;
use crate::bindings::agent::plain::tollgate::agent::types as wit;
use crate::bindings::agent::with_policy::OptionsFactoryWithCliPolicyPre;
use crate::error::{CallError, LoadError};
use crate::tools::{ComponentSource, Grants, Manifests, export_names};
use crate::{Manifest, Sandbox};

/// The interface an options factory must export.
const OPTIONS_EXPORT: &str = "tollgate:agent/options@0.1.0";

/// Which segment the options are for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionsContext {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// The segment's attempt, from 1.
    pub attempt: u32,
}

/// The factory could not give options or a decision.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum FactoryError {
    /// The factory returned an error.
    #[error("the options factory refused: {0}")]
    Refused(String),
    /// It returned something unusable (bad JSON in a field, options [`check_options`] refuses).
    #[error("the options factory returned invalid options: {0}")]
    Invalid(String),
    /// It trapped, ran out of time or memory.
    #[error(transparent)]
    Call(#[from] CallError),
}

enum Pre {
    Plain(OptionsFactoryPre<crate::state::HostState>),
    WithPolicy(OptionsFactoryWithCliPolicyPre<crate::state::HostState>),
}

/// A loaded options factory. Cheap to share behind an `Arc`.
pub struct OptionsFactory {
    sandbox: Sandbox,
    pre: Pre,
    grants: Grants,
    path: PathBuf,
}

impl std::fmt::Debug for OptionsFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OptionsFactory")
            .field("path", &self.path)
            .field("cli_policy", &self.has_cli_policy())
            .finish()
    }
}

impl Sandbox {
    /// Loads an options factory from `path`. Its manifest is `<name>.toml` beside it or the entry
    /// of `manifests` named after its file stem.
    pub async fn load_options_factory(
        &self,
        path: &Path,
        manifests: &Manifests,
    ) -> Result<OptionsFactory, LoadError> {
        self.load_options_factory_source(&ComponentSource::read(path)?, manifests).await
    }

    /// As [`Sandbox::load_options_factory`], from a file already read.
    pub async fn load_options_factory_source(
        &self,
        source: &ComponentSource,
        manifests: &Manifests,
    ) -> Result<OptionsFactory, LoadError> {
        let path = source.path.as_path();
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("agent").to_string();
        let manifest = self.manifest_for(&name, source, manifests)?;
        let (component, _, _) = self.compile(source)?;
        let instance_pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Invalid { path: path.to_path_buf(), reason: format!("{e:#}") })?;
        let pre = match OptionsFactoryWithCliPolicyPre::new(instance_pre.clone()) {
            Ok(pre) => Pre::WithPolicy(pre),
            Err(_) => {
                Pre::Plain(OptionsFactoryPre::new(instance_pre).map_err(|_| LoadError::WrongWorld {
                    path: path.to_path_buf(),
                    expected: OPTIONS_EXPORT,
                    found: export_names(self, &component),
                })?)
            }
        };
        Ok(OptionsFactory {
            sandbox: self.clone(),
            pre,
            grants: Grants::new(&name, manifest),
            path: path.to_path_buf(),
        })
    }
}

impl OptionsFactory {
    /// Whether it decides calls of built-in tools.
    pub fn has_cli_policy(&self) -> bool {
        matches!(self.pre, Pre::WithPolicy(_))
    }

    /// What it is granted.
    pub fn manifest(&self) -> &Manifest {
        &self.grants.manifest
    }

    /// The options of one segment, checked with [`check_options`] against the host's tool server
    /// name ([`DEFAULT_TOOL_SERVER_NAME`]).
    pub async fn build_options(&self, ctx: &OptionsContext) -> Result<CheckedOptions, FactoryError> {
        let wit_ctx = wit::OptionsContext {
            session_id: ctx.session_id.clone(),
            turn_id: ctx.turn_id.clone(),
            attempt: ctx.attempt,
        };
        let result = self
            .sandbox
            .run(&self.grants, "build-options", async |store| match &self.pre {
                Pre::Plain(pre) => {
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance.tollgate_agent_options().call_build_options(&mut *store, &wit_ctx).await
                }
                Pre::WithPolicy(pre) => {
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance.tollgate_agent_options().call_build_options(&mut *store, &wit_ctx).await
                }
            })
            .await?;
        let options = convert(result.map_err(FactoryError::Refused)?)?;
        check_options(options, DEFAULT_TOOL_SERVER_NAME).map_err(|e| FactoryError::Invalid(e.to_string()))
    }

    /// Its decision on one call of built-in tool `name` with `input` (a JSON object); `None` when
    /// it has no CLI policy or leaves this call to the policies.
    pub async fn decide_cli_tool(
        &self,
        name: &str,
        input: &str,
    ) -> Result<Option<CliToolDecision>, FactoryError> {
        let Pre::WithPolicy(pre) = &self.pre else {
            return Ok(None);
        };
        let decision = self
            .sandbox
            .run(&self.grants, "decide-cli-tool", async |store| {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance.tollgate_agent_cli_policy().call_decide_cli_tool(&mut *store, name, input).await
            })
            .await?;
        Ok(match decision {
            None => None,
            Some(wit::Decision::Allow) => Some(CliToolDecision::Allow),
            Some(wit::Decision::AllowWithInput(json)) => {
                let value: serde_json::Value = serde_json::from_str(&json).map_err(|e| {
                    FactoryError::Invalid(format!("allow-with-input for `{name}` is not JSON: {e}"))
                })?;
                if !value.is_object() {
                    return Err(FactoryError::Invalid(format!(
                        "allow-with-input for `{name}` is not a JSON object"
                    )));
                }
                Some(CliToolDecision::AllowWithInput(value))
            }
            Some(wit::Decision::Deny(message)) => Some(CliToolDecision::Deny(message)),
            Some(wit::Decision::RequireApproval) => Some(CliToolDecision::RequireApproval),
        })
    }
}

fn convert(o: wit::AgentOptions) -> Result<AgentOptions, FactoryError> {
    let json = |what: &str, text: &str| {
        serde_json::from_str::<serde_json::Value>(text)
            .map_err(|e| FactoryError::Invalid(format!("{what} is not valid JSON: {e}")))
    };
    let mut mcp_servers = Vec::new();
    for server in o.mcp_servers {
        let config = json(&format!("the config of MCP server `{}`", server.name), &server.config)?;
        mcp_servers.push(McpServer { name: server.name, config });
    }
    let extra = o.extra.as_deref().map(|e| json("`extra`", e)).transpose()?;
    Ok(AgentOptions {
        model: o.model,
        system_prompt: o.system_prompt,
        append_system_prompt: o.append_system_prompt,
        tools: o.tools,
        disallowed_tools: o.disallowed_tools,
        cwd: o.cwd,
        env: o.env.into_iter().map(|v| (v.name, v.value)).collect(),
        permission_mode: o.permission_mode,
        max_turns: o.max_turns,
        max_budget_usd: o.max_budget_usd,
        mcp_servers,
        setting_sources: o.setting_sources,
        extra,
    })
}
