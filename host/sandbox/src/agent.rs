//! The options factory: a `tollgate:agent` component that gives each segment its Claude Code
//! options, and may decide calls of Claude Code built-in tools and run the agent's own hooks. Read
//! [`OptionsFactory`] first.
//!
//! It is loaded like a tool component (cache, manifest, limits) and runs in a fresh instance per
//! call, so it cannot keep state between segments: the same context must give the same options
//! on every Worker.
//!
//! Two package versions load:
//!
//! | version | exports | hooks |
//! | --- | --- | --- |
//! | `tollgate:agent@0.1.0` | `options`, optionally `cli-policy` | none |
//! | `tollgate:agent@0.2.0` | `options`, optionally `cli-policy` and `hooks` | the options' `hooks`, run by `hooks.on-hook` |
//!
//! A 0.2.0 factory whose options name hooks but that does not export `hooks` is refused at the
//! segment ([`FactoryError::Invalid`]); what a hook answers is checked by the segment
//! ([`tollgate_engine::hooks::check_answer`]), not here.

use std::path::{Path, PathBuf};

use tollgate_engine::catalog::DEFAULT_TOOL_SERVER_NAME;
use tollgate_engine::gate::CliToolDecision;
use tollgate_engine::hooks::{HookAnswer, HookCall, HookEvent, HookMatcher};
use tollgate_engine::options::{AgentOptions, CheckedOptions, McpServer, check_options};
use wasmtime::component::InstancePre;

use crate::bindings::agent::v0_1::plain::OptionsFactoryPre;
use crate::bindings::agent::v0_1::plain::tollgate::agent::types as v1;
use crate::bindings::agent::v0_1::with_policy::OptionsFactoryWithCliPolicyPre;
use crate::bindings::agent::v0_2::exports::tollgate::agent::{cli_policy, hooks, options};
use crate::bindings::agent::v0_2::tollgate::agent::types as v2;
use crate::error::{CallError, LoadError};
use crate::state::HostState;
use crate::tools::{ComponentSource, Grants, Manifests, export_names};
use crate::{Manifest, Sandbox};

/// The interfaces an options factory may export as its options, newest first.
const OPTIONS_EXPORTS: &str = "tollgate:agent/options@0.2.0 or tollgate:agent/options@0.1.0";

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

/// The factory could not give options, a decision or a hook's answer.
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

/// A 0.2.0 factory: its exports, looked up once.
struct V2 {
    pre: InstancePre<HostState>,
    options: options::GuestIndices,
    cli_policy: Option<cli_policy::GuestIndices>,
    hooks: Option<hooks::GuestIndices>,
}

enum Pre {
    V1Plain(OptionsFactoryPre<HostState>),
    V1WithPolicy(OptionsFactoryWithCliPolicyPre<HostState>),
    V2(Box<V2>),
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
            .field("version", &self.version())
            .field("cli_policy", &self.has_cli_policy())
            .field("hooks", &self.has_hooks())
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
        let pre = if let Ok(options) = options::GuestIndices::new(&instance_pre) {
            Pre::V2(Box::new(V2 {
                cli_policy: cli_policy::GuestIndices::new(&instance_pre).ok(),
                hooks: hooks::GuestIndices::new(&instance_pre).ok(),
                options,
                pre: instance_pre,
            }))
        } else if let Ok(pre) = OptionsFactoryWithCliPolicyPre::new(instance_pre.clone()) {
            Pre::V1WithPolicy(pre)
        } else {
            Pre::V1Plain(OptionsFactoryPre::new(instance_pre).map_err(|_| LoadError::WrongWorld {
                path: path.to_path_buf(),
                expected: OPTIONS_EXPORTS,
                found: export_names(self, &component),
            })?)
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
    /// The `tollgate:agent` version it was built against (`0.1.0`, `0.2.0`).
    pub fn version(&self) -> &'static str {
        match self.pre {
            Pre::V1Plain(_) | Pre::V1WithPolicy(_) => "0.1.0",
            Pre::V2(_) => "0.2.0",
        }
    }

    /// Whether it decides calls of built-in tools.
    pub fn has_cli_policy(&self) -> bool {
        match &self.pre {
            Pre::V1Plain(_) => false,
            Pre::V1WithPolicy(_) => true,
            Pre::V2(v2) => v2.cli_policy.is_some(),
        }
    }

    /// Whether it runs the agent's own hooks (a 0.2.0 factory that exports `hooks`).
    pub fn has_hooks(&self) -> bool {
        matches!(&self.pre, Pre::V2(v2) if v2.hooks.is_some())
    }

    /// What it is granted.
    pub fn manifest(&self) -> &Manifest {
        &self.grants.manifest
    }

    /// The options of one segment, checked with [`check_options`] against the host's tool server
    /// name ([`DEFAULT_TOOL_SERVER_NAME`]).
    pub async fn build_options(&self, ctx: &OptionsContext) -> Result<CheckedOptions, FactoryError> {
        let options = match &self.pre {
            Pre::V1Plain(_) | Pre::V1WithPolicy(_) => {
                let wit_ctx = v1::OptionsContext {
                    session_id: ctx.session_id.clone(),
                    turn_id: ctx.turn_id.clone(),
                    attempt: ctx.attempt,
                };
                let result = self
                    .sandbox
                    .run(&self.grants, "build-options", async |store| match &self.pre {
                        Pre::V1Plain(pre) => {
                            let instance = pre.instantiate_async(&mut *store).await?;
                            instance.tollgate_agent_options().call_build_options(&mut *store, &wit_ctx).await
                        }
                        Pre::V1WithPolicy(pre) => {
                            let instance = pre.instantiate_async(&mut *store).await?;
                            instance.tollgate_agent_options().call_build_options(&mut *store, &wit_ctx).await
                        }
                        Pre::V2(_) => unreachable!("matched above"),
                    })
                    .await?;
                convert(OptionFields::from(result.map_err(FactoryError::Refused)?))?
            }
            Pre::V2(v2) => {
                let result = self
                    .sandbox
                    .run(&self.grants, "build-options", async |store| {
                        let instance = v2.pre.instantiate_async(&mut *store).await?;
                        let options = v2.options.load(&mut *store, &instance)?;
                        options.call_build_options(&mut *store, &v2_context(ctx)).await
                    })
                    .await?;
                let wit = result.map_err(FactoryError::Refused)?;
                let hooks: Vec<HookMatcher> = wit.hooks.iter().map(hook_matcher).collect();
                if !hooks.is_empty() && v2.hooks.is_none() {
                    return Err(FactoryError::Invalid(
                        "the options name hooks, but the factory does not export tollgate:agent/hooks@0.2.0"
                            .into(),
                    ));
                }
                AgentOptions { hooks, ..convert(OptionFields::from(wit))? }
            }
        };
        check_options(options, DEFAULT_TOOL_SERVER_NAME).map_err(|e| FactoryError::Invalid(e.to_string()))
    }

    /// Its decision on one call of built-in tool `name` with `input` (a JSON object); `None` when
    /// it has no CLI policy or leaves this call to the policies.
    pub async fn decide_cli_tool(
        &self,
        name: &str,
        input: &str,
    ) -> Result<Option<CliToolDecision>, FactoryError> {
        let decision = match &self.pre {
            Pre::V1Plain(_) => return Ok(None),
            Pre::V1WithPolicy(pre) => self
                .sandbox
                .run(&self.grants, "decide-cli-tool", async |store| {
                    let instance = pre.instantiate_async(&mut *store).await?;
                    instance.tollgate_agent_cli_policy().call_decide_cli_tool(&mut *store, name, input).await
                })
                .await?
                .map(Decision::from),
            Pre::V2(v2) => {
                let Some(policy) = &v2.cli_policy else { return Ok(None) };
                self.sandbox
                    .run(&self.grants, "decide-cli-tool", async |store| {
                        let instance = v2.pre.instantiate_async(&mut *store).await?;
                        let policy = policy.load(&mut *store, &instance)?;
                        policy.call_decide_cli_tool(&mut *store, name, input).await
                    })
                    .await?
                    .map(Decision::from)
            }
        };
        Ok(match decision {
            None => None,
            Some(Decision::Allow) => Some(CliToolDecision::Allow),
            Some(Decision::AllowWithInput(json)) => {
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
            Some(Decision::Deny(message)) => Some(CliToolDecision::Deny(message)),
            Some(Decision::RequireApproval) => Some(CliToolDecision::RequireApproval),
        })
    }

    /// Runs the agent's hook for `call`, for the segment of `ctx`. The answer is not checked here
    /// ([`tollgate_engine::hooks::check_answer`] is the segment's).
    ///
    /// # Errors
    /// The factory exports no hooks, the hook returned an error or trapped, or its
    /// `updated-input` is not JSON.
    pub async fn on_hook(&self, ctx: &OptionsContext, call: &HookCall) -> Result<HookAnswer, FactoryError> {
        let Pre::V2(v2) = &self.pre else {
            return Err(FactoryError::Invalid(format!("a {} factory runs no hooks", self.version())));
        };
        let Some(indices) = &v2.hooks else {
            return Err(FactoryError::Invalid(
                "the factory does not export tollgate:agent/hooks@0.2.0".into(),
            ));
        };
        let input = hook_input(call);
        let result = self
            .sandbox
            .run(&self.grants, "on-hook", async |store| {
                let instance = v2.pre.instantiate_async(&mut *store).await?;
                let hooks = indices.load(&mut *store, &instance)?;
                hooks.call_on_hook(&mut *store, &v2_context(ctx), &input).await
            })
            .await?;
        let answer = result.map_err(FactoryError::Refused)?;
        let updated_input = answer
            .updated_input
            .map(|text| {
                serde_json::from_str(&text)
                    .map_err(|e| FactoryError::Invalid(format!("the hook's updated-input is not JSON: {e}")))
            })
            .transpose()?;
        Ok(HookAnswer { context: answer.context, block: answer.block, stop: answer.stop, updated_input })
    }
}

fn v2_context(ctx: &OptionsContext) -> v2::OptionsContext {
    v2::OptionsContext {
        session_id: ctx.session_id.clone(),
        turn_id: ctx.turn_id.clone(),
        attempt: ctx.attempt,
    }
}

fn hook_matcher(matcher: &v2::HookMatcher) -> HookMatcher {
    let event = match matcher.event {
        v2::HookEvent::PreToolUse => HookEvent::PreToolUse,
        v2::HookEvent::PostToolUse => HookEvent::PostToolUse,
        v2::HookEvent::UserPromptSubmit => HookEvent::UserPromptSubmit,
        v2::HookEvent::Stop => HookEvent::Stop,
        v2::HookEvent::SubagentStop => HookEvent::SubagentStop,
        v2::HookEvent::PreCompact => HookEvent::PreCompact,
    };
    HookMatcher { event, matcher: matcher.matcher.clone() }
}

fn hook_input(call: &HookCall) -> hooks::HookInput {
    let event = match call.event {
        Some(HookEvent::PreToolUse) | None => v2::HookEvent::PreToolUse,
        Some(HookEvent::PostToolUse) => v2::HookEvent::PostToolUse,
        Some(HookEvent::UserPromptSubmit) => v2::HookEvent::UserPromptSubmit,
        Some(HookEvent::Stop) => v2::HookEvent::Stop,
        Some(HookEvent::SubagentStop) => v2::HookEvent::SubagentStop,
        Some(HookEvent::PreCompact) => v2::HookEvent::PreCompact,
    };
    let json = |value: &Option<serde_json::Value>| value.as_ref().map(serde_json::Value::to_string);
    hooks::HookInput {
        event,
        tool_name: call.tool_name.clone(),
        tool_input: json(&call.tool_input),
        tool_use_id: call.tool_use_id.clone(),
        tool_response: json(&call.tool_response),
        prompt: call.prompt.clone(),
        agent_id: call.agent_id.clone(),
        agent_type: call.agent_type.clone(),
        stop_hook_active: call.stop_hook_active,
        last_assistant_message: call.last_assistant_message.clone(),
        trigger: call.trigger.clone(),
        custom_instructions: call.custom_instructions.clone(),
    }
}

/// A built-in tool decision of either version.
enum Decision {
    Allow,
    AllowWithInput(String),
    Deny(String),
    RequireApproval,
}

impl From<v1::Decision> for Decision {
    fn from(decision: v1::Decision) -> Self {
        match decision {
            v1::Decision::Allow => Decision::Allow,
            v1::Decision::AllowWithInput(input) => Decision::AllowWithInput(input),
            v1::Decision::Deny(message) => Decision::Deny(message),
            v1::Decision::RequireApproval => Decision::RequireApproval,
        }
    }
}

impl From<v2::Decision> for Decision {
    fn from(decision: v2::Decision) -> Self {
        match decision {
            v2::Decision::Allow => Decision::Allow,
            v2::Decision::AllowWithInput(input) => Decision::AllowWithInput(input),
            v2::Decision::Deny(message) => Decision::Deny(message),
            v2::Decision::RequireApproval => Decision::RequireApproval,
        }
    }
}

/// The `agent-options` fields both versions share, as the host reads them.
struct OptionFields {
    model: Option<String>,
    system_prompt: Option<String>,
    append_system_prompt: Option<String>,
    tools: Option<Vec<String>>,
    disallowed_tools: Vec<String>,
    cwd: Option<String>,
    env: Vec<(String, String)>,
    permission_mode: Option<String>,
    max_turns: Option<u32>,
    max_budget_usd: Option<f64>,
    mcp_servers: Vec<(String, String)>,
    setting_sources: Vec<String>,
    extra: Option<String>,
}

impl From<v1::AgentOptions> for OptionFields {
    fn from(o: v1::AgentOptions) -> Self {
        OptionFields {
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
            mcp_servers: o.mcp_servers.into_iter().map(|m| (m.name, m.config)).collect(),
            setting_sources: o.setting_sources,
            extra: o.extra,
        }
    }
}

impl From<v2::AgentOptions> for OptionFields {
    fn from(o: v2::AgentOptions) -> Self {
        OptionFields {
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
            mcp_servers: o.mcp_servers.into_iter().map(|m| (m.name, m.config)).collect(),
            setting_sources: o.setting_sources,
            extra: o.extra,
        }
    }
}

fn convert(o: OptionFields) -> Result<AgentOptions, FactoryError> {
    let json = |what: &str, text: &str| {
        serde_json::from_str::<serde_json::Value>(text)
            .map_err(|e| FactoryError::Invalid(format!("{what} is not valid JSON: {e}")))
    };
    let mut mcp_servers = Vec::new();
    for (name, config) in o.mcp_servers {
        let config = json(&format!("the config of MCP server `{name}`"), &config)?;
        mcp_servers.push(McpServer { name, config });
    }
    let extra = o.extra.as_deref().map(|e| json("`extra`", e)).transpose()?;
    Ok(AgentOptions {
        model: o.model,
        system_prompt: o.system_prompt,
        append_system_prompt: o.append_system_prompt,
        tools: o.tools,
        disallowed_tools: o.disallowed_tools,
        cwd: o.cwd,
        env: o.env.into_iter().collect(),
        permission_mode: o.permission_mode,
        max_turns: o.max_turns,
        max_budget_usd: o.max_budget_usd,
        mcp_servers,
        setting_sources: o.setting_sources,
        extra,
        hooks: Vec::new(),
    })
}
