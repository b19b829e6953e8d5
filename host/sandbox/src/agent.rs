//! The options factory: a `tollgate:agent` component that gives each segment its Claude Code
//! options, and may decide calls of Claude Code built-in tools, run the agent's own hooks and
//! review calls before a person approves them. Read
//! [`OptionsFactory`] first.
//!
//! It is loaded like a tool component (cache, manifest, limits) and runs in a fresh instance per
//! call, so it cannot keep state between segments: the same context must give the same options
//! on every Worker.
//!
//! Three package versions load:
//!
//! | version | exports | hooks |
//! | --- | --- | --- |
//! | `tollgate:agent@0.1.0` | `options`, optionally `cli-policy` | none |
//! | `tollgate:agent@0.2.0` | `options`, optionally `cli-policy` and `hooks` | the options' `hooks`, run by `hooks.on-hook` |
//! | `tollgate:agent@0.3.0` | as 0.2.0, optionally `review` | as 0.2.0 |
//!
//! A 0.3.0 factory that exports `review` is asked about each call that waits for approval
//! ([`OptionsFactory::review_call`]).
//!
//! A 0.2.0 factory whose options name hooks but that does not export `hooks` is refused at the
//! segment ([`FactoryError::Invalid`]); what a hook answers is checked by the segment
//! ([`tollgate_engine::hooks::check_answer`]), not here.

use std::path::{Path, PathBuf};

use crate::bindings::agent::v0_1::plain::OptionsFactoryPre;
use crate::bindings::agent::v0_1::plain::tollgate::agent::types as v1;
use crate::bindings::agent::v0_1::with_policy::OptionsFactoryWithCliPolicyPre;
use crate::bindings::agent::v0_3::exports::tollgate::agent::review;
use crate::error::{CallError, LoadError};
use crate::state::HostState;
use crate::tools::{ComponentSource, Grants, Manifests, export_names};
use crate::{Manifest, Sandbox};
use tollgate_engine::catalog::DEFAULT_TOOL_SERVER_NAME;
use tollgate_engine::gate::CliToolDecision;
use tollgate_engine::hooks::{HookAnswer, HookCall};
use tollgate_engine::options::{AgentOptions, CheckedOptions, McpServer, check_options};
use tollgate_engine::review::{PendingCall, Review, Risk, ToolRecord, ToolStatus};

/// The interfaces an options factory may export as its options, newest first.
const OPTIONS_EXPORTS: &str =
    "tollgate:agent/options@0.3.0, tollgate:agent/options@0.2.0 or tollgate:agent/options@0.1.0";

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

/// The exports of a factory of 0.2.0 or later, looked up one by one, for one binding module:
/// `Exports` (found once at load), and `build_options`, `decide_cli_tool` and `on_hook` calls
/// converted to the host's types. The versions' types are alike but distinct, hence a macro.
macro_rules! modern_factory {
    ($module:ident, $bindings:ident, $version:literal) => {
        mod $module {
            use tollgate_engine::hooks::{HookAnswer, HookCall, HookEvent, HookMatcher};
            use tollgate_engine::options::AgentOptions;
            use wasmtime::component::InstancePre;

            use super::{Decision, FactoryError, OptionFields, OptionsContext, OptionsFactory, convert};
            use crate::bindings::agent::$bindings::exports::tollgate::agent::{cli_policy, hooks, options};
            use crate::bindings::agent::$bindings::tollgate::agent::types as wit;
            use crate::state::HostState;

            /// The factory's exports.
            pub(super) struct Exports {
                pub(super) pre: InstancePre<HostState>,
                options: options::GuestIndices,
                pub(super) cli_policy: Option<cli_policy::GuestIndices>,
                pub(super) hooks: Option<hooks::GuestIndices>,
            }

            impl Exports {
                /// Its exports, if it exports this version's `options`.
                pub(super) fn find(pre: &InstancePre<HostState>) -> Option<Self> {
                    Some(Exports {
                        options: options::GuestIndices::new(pre).ok()?,
                        cli_policy: cli_policy::GuestIndices::new(pre).ok(),
                        hooks: hooks::GuestIndices::new(pre).ok(),
                        pre: pre.clone(),
                    })
                }

                pub(super) async fn build_options(
                    &self,
                    factory: &OptionsFactory,
                    ctx: &OptionsContext,
                ) -> Result<AgentOptions, FactoryError> {
                    let result = factory
                        .sandbox
                        .run(&factory.grants, "build-options", async |store| {
                            let instance = self.pre.instantiate_async(&mut *store).await?;
                            let options = self.options.load(&mut *store, &instance)?;
                            options.call_build_options(&mut *store, &context(ctx)).await
                        })
                        .await?;
                    let wit = result.map_err(FactoryError::Refused)?;
                    let hooks: Vec<HookMatcher> = wit.hooks.iter().map(hook_matcher).collect();
                    if !hooks.is_empty() && self.hooks.is_none() {
                        return Err(FactoryError::Invalid(
                            concat!(
                                "the options name hooks, but the factory does not export tollgate:agent/hooks@",
                                $version
                            )
                            .into(),
                        ));
                    }
                    Ok(AgentOptions { hooks, ..convert(OptionFields::from(wit))? })
                }

                pub(super) async fn decide_cli_tool(
                    &self,
                    factory: &OptionsFactory,
                    name: &str,
                    input: &str,
                ) -> Result<Option<Decision>, FactoryError> {
                    let Some(policy) = &self.cli_policy else { return Ok(None) };
                    let decision = factory
                        .sandbox
                        .run(&factory.grants, "decide-cli-tool", async |store| {
                            let instance = self.pre.instantiate_async(&mut *store).await?;
                            let policy = policy.load(&mut *store, &instance)?;
                            policy.call_decide_cli_tool(&mut *store, name, input).await
                        })
                        .await?;
                    Ok(decision.map(|decision| match decision {
                        wit::Decision::Allow => Decision::Allow,
                        wit::Decision::AllowWithInput(input) => Decision::AllowWithInput(input),
                        wit::Decision::Deny(message) => Decision::Deny(message),
                        wit::Decision::RequireApproval => Decision::RequireApproval,
                    }))
                }

                pub(super) async fn on_hook(
                    &self,
                    factory: &OptionsFactory,
                    ctx: &OptionsContext,
                    call: &HookCall,
                ) -> Result<HookAnswer, FactoryError> {
                    let Some(indices) = &self.hooks else {
                        return Err(FactoryError::Invalid(
                            concat!("the factory does not export tollgate:agent/hooks@", $version).into(),
                        ));
                    };
                    let input = hook_input(call);
                    let result = factory
                        .sandbox
                        .run(&factory.grants, "on-hook", async |store| {
                            let instance = self.pre.instantiate_async(&mut *store).await?;
                            let hooks = indices.load(&mut *store, &instance)?;
                            hooks.call_on_hook(&mut *store, &context(ctx), &input).await
                        })
                        .await?;
                    let answer = result.map_err(FactoryError::Refused)?;
                    let updated_input = answer
                        .updated_input
                        .map(|text| {
                            serde_json::from_str(&text).map_err(|e| {
                                FactoryError::Invalid(format!("the hook's updated-input is not JSON: {e}"))
                            })
                        })
                        .transpose()?;
                    Ok(HookAnswer { context: answer.context, block: answer.block, stop: answer.stop, updated_input })
                }
            }

            pub(super) fn context(ctx: &OptionsContext) -> wit::OptionsContext {
                wit::OptionsContext {
                    session_id: ctx.session_id.clone(),
                    turn_id: ctx.turn_id.clone(),
                    attempt: ctx.attempt,
                }
            }

            fn hook_matcher(matcher: &wit::HookMatcher) -> HookMatcher {
                let event = match matcher.event {
                    wit::HookEvent::PreToolUse => HookEvent::PreToolUse,
                    wit::HookEvent::PostToolUse => HookEvent::PostToolUse,
                    wit::HookEvent::UserPromptSubmit => HookEvent::UserPromptSubmit,
                    wit::HookEvent::Stop => HookEvent::Stop,
                    wit::HookEvent::SubagentStop => HookEvent::SubagentStop,
                    wit::HookEvent::PreCompact => HookEvent::PreCompact,
                };
                HookMatcher { event, matcher: matcher.matcher.clone() }
            }

            fn hook_input(call: &HookCall) -> hooks::HookInput {
                let event = match call.event {
                    Some(HookEvent::PreToolUse) | None => wit::HookEvent::PreToolUse,
                    Some(HookEvent::PostToolUse) => wit::HookEvent::PostToolUse,
                    Some(HookEvent::UserPromptSubmit) => wit::HookEvent::UserPromptSubmit,
                    Some(HookEvent::Stop) => wit::HookEvent::Stop,
                    Some(HookEvent::SubagentStop) => wit::HookEvent::SubagentStop,
                    Some(HookEvent::PreCompact) => wit::HookEvent::PreCompact,
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

            impl From<wit::AgentOptions> for OptionFields {
                fn from(o: wit::AgentOptions) -> Self {
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
        }
    };
}

modern_factory!(v2, v0_2, "0.2.0");
modern_factory!(v3, v0_3, "0.3.0");

/// A 0.3.0 factory: the exports it shares with 0.2.0, and `review`.
struct V3 {
    exports: v3::Exports,
    review: Option<review::GuestIndices>,
}

enum Pre {
    V1Plain(OptionsFactoryPre<HostState>),
    V1WithPolicy(OptionsFactoryWithCliPolicyPre<HostState>),
    V2(Box<v2::Exports>),
    V3(Box<V3>),
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
            .field("review", &self.has_review())
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
        let pre = if let Some(exports) = v3::Exports::find(&instance_pre) {
            Pre::V3(Box::new(V3 { exports, review: review::GuestIndices::new(&instance_pre).ok() }))
        } else if let Some(exports) = v2::Exports::find(&instance_pre) {
            Pre::V2(Box::new(exports))
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
    /// The `tollgate:agent` version it was built against (`0.1.0`, `0.2.0`, `0.3.0`).
    pub fn version(&self) -> &'static str {
        match self.pre {
            Pre::V1Plain(_) | Pre::V1WithPolicy(_) => "0.1.0",
            Pre::V2(_) => "0.2.0",
            Pre::V3(_) => "0.3.0",
        }
    }

    /// Whether it decides calls of built-in tools.
    pub fn has_cli_policy(&self) -> bool {
        match &self.pre {
            Pre::V1Plain(_) => false,
            Pre::V1WithPolicy(_) => true,
            Pre::V2(v2) => v2.cli_policy.is_some(),
            Pre::V3(v3) => v3.exports.cli_policy.is_some(),
        }
    }

    /// Whether it runs the agent's own hooks (a 0.2.0 or later factory that exports `hooks`).
    pub fn has_hooks(&self) -> bool {
        match &self.pre {
            Pre::V1Plain(_) | Pre::V1WithPolicy(_) => false,
            Pre::V2(v2) => v2.hooks.is_some(),
            Pre::V3(v3) => v3.exports.hooks.is_some(),
        }
    }

    /// Whether it reviews calls that wait for approval (a 0.3.0 factory that exports `review`).
    pub fn has_review(&self) -> bool {
        matches!(&self.pre, Pre::V3(v3) if v3.review.is_some())
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
                        Pre::V2(_) | Pre::V3(_) => unreachable!("matched above"),
                    })
                    .await?;
                convert(OptionFields::from(result.map_err(FactoryError::Refused)?))?
            }
            Pre::V2(v2) => v2.build_options(self, ctx).await?,
            Pre::V3(v3) => v3.exports.build_options(self, ctx).await?,
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
            Pre::V2(v2) => v2.decide_cli_tool(self, name, input).await?,
            Pre::V3(v3) => v3.exports.decide_cli_tool(self, name, input).await?,
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
        match &self.pre {
            Pre::V1Plain(_) | Pre::V1WithPolicy(_) => {
                Err(FactoryError::Invalid(format!("a {} factory runs no hooks", self.version())))
            }
            Pre::V2(v2) => v2.on_hook(self, ctx, call).await,
            Pre::V3(v3) => v3.exports.on_hook(self, ctx, call).await,
        }
    }

    /// Its review of `call`, given the session's `recent` finished tool calls: `Ok(None)` when
    /// it exports no `review`. The answer is bounded ([`Review::answered`]); turning an error
    /// into a failed review ([`Review::failed`]) is the caller's.
    ///
    /// # Errors
    /// The review returned an error, trapped or ran out of time or memory.
    pub async fn review_call(
        &self,
        call: &PendingCall,
        recent: &[ToolRecord],
    ) -> Result<Option<Review>, FactoryError> {
        let Pre::V3(v3) = &self.pre else { return Ok(None) };
        let Some(indices) = &v3.review else { return Ok(None) };
        let wit_call = review::PendingCall {
            session_id: call.session_id.clone(),
            turn_id: call.turn_id.clone(),
            tool_call_id: call.tool_call_id.clone(),
            tool_name: call.tool_name.clone(),
            arguments: call.arguments.clone(),
            effect: call.effect.clone(),
        };
        let records: Vec<review::ToolRecord> = recent
            .iter()
            .map(|record| review::ToolRecord {
                tool_name: record.tool_name.clone(),
                tool_call_id: record.tool_call_id.clone(),
                input: record.input.clone(),
                status: match record.status {
                    ToolStatus::Succeeded => review::ToolStatus::Succeeded,
                    ToolStatus::Failed => review::ToolStatus::Failed,
                    ToolStatus::Rejected => review::ToolStatus::Rejected,
                    ToolStatus::OutcomeUnknown => review::ToolStatus::OutcomeUnknown,
                },
                output: record.output.clone(),
                error: record.error.clone(),
            })
            .collect();
        let result = self
            .sandbox
            .run(&self.grants, "review-call", async |store| {
                let instance = v3.exports.pre.instantiate_async(&mut *store).await?;
                let review = indices.load(&mut *store, &instance)?;
                review.call_review_call(&mut *store, &wit_call, &records).await
            })
            .await?;
        let answer = result.map_err(FactoryError::Refused)?;
        let risk = match answer.risk {
            review::Risk::Low => Risk::Low,
            review::Risk::Medium => Risk::Medium,
            review::Risk::High => Risk::High,
        };
        Ok(Some(Review::answered(risk, answer.notes)))
    }
}

/// A built-in tool decision of any version.
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

/// The `agent-options` fields every version shares, as the host reads them.
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
