//! An agent directory: `tollgate.toml`, an optional options factory, and `tools/*.wasm`.
//!
//! [`Agent::load`] reads every file of the bundle once ([`crate::bundle`]), checks the
//! configuration and then the bundle against `tollgate.lock` when there is one; [`Agent::options`]
//! gives a segment its Claude Code options, from the factory or the static `[options]` table,
//! checked either way.
//!
//! [`Agent::tools`]: a **locked** agent's tools are loaded once, from the bytes that were hashed
//! and checked, and never read from disk again. An **unlocked** agent looks at `tools/` anew for
//! every segment attempt and tool step, one component at a time (a `.wasm` dropped into `tools/`
//! takes effect once it is stable, see [`tollgate_sandbox::live`]; one that does not load is
//! unavailable, the others keep serving). Either way [`Agent::digest`] is the agent digest of the files as read at
//! load: for an unlocked agent it describes the process's start, not a later hot-dropped tool.
//!
//! The configuration itself, `tollgate.toml`, is [`crate::config::AgentConfig`], parsed once by
//! [`Bundle::read`] from the bytes the lock's digest is computed from.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use tollgate_engine::options::CheckedOptions;
use tollgate_engine::policy::{Policies, PolicySource};
/// Refuses a `[policies]` table (of the configuration at `path`) that names a tool the agent does
/// not have: not one of `tools`, not a built-in, not an `mcp__` name. A misspelled policy would
/// otherwise never apply, and its tool would fall back to `default_effect` (see
/// [`tollgate_engine::tool_names`]). Each unknown name is listed with a did-you-mean. Then refuses
/// a custom tool's `summary` whose placeholder names no property of the tool's input schema: it
/// would show `—` on every approval; and a `confirm_above` on an argument the tool does not have.
///
/// # Errors
/// A name that names no tool; a summary placeholder or a threshold that names no argument.
pub fn check_policy_names(path: &Path, policies: &Policies, tools: &ToolSet) -> anyhow::Result<()> {
    let custom: Vec<&str> = tools.tools().iter().map(|tool| tool.name.as_str()).collect();
    let unknown = tollgate_engine::tool_names::unknown_tools(policies.tool_names(), &custom);
    // A component that did not load and has no last good build serves no tools: a policy may name
    // one of them. Said loudly, but the other components still serve.
    let dark: Vec<&str> =
        tools.unavailable().iter().filter(|u| !u.serving_last_good).map(|u| u.component.as_str()).collect();
    if !unknown.is_empty() {
        let each: Vec<String> = unknown.iter().map(ToString::to_string).collect();
        if dark.is_empty() {
            bail!("{}: [policies]: {}", path.display(), each.join("; "))
        }
        tracing::warn!(
            "{}: [policies]: {}; they may be tools of the unavailable component(s) {}, checked when they load",
            path.display(),
            each.join("; "),
            dark.join(", ")
        );
    }
    for (name, summary) in policies.summaries() {
        let Some(tool) = tools.tools().iter().find(|tool| tool.name == name) else { continue };
        if let Some(field) = summary.unknown_fields(&tool.input_schema).first() {
            bail!(
                "{}: [policies] `{name}.summary`: placeholder `{{{field}}}` names no argument of `{name}`",
                path.display()
            )
        }
    }
    for (name, confirm) in policies.confirms() {
        let Some(tool) = tools.tools().iter().find(|tool| tool.name == name) else { continue };
        let known = tool.input_schema.get("properties").and_then(|p| p.as_object());
        if known.is_some_and(|properties| !properties.contains_key(&confirm.argument)) {
            bail!(
                "{}: [policies] `{name}.confirm_above`: `{}` names no argument of `{name}`",
                path.display(),
                confirm.argument
            )
        }
    }
    Ok(())
}

/// The name of the agent in folder `dir` (canonical) configured by `config`: `[agent] name`, checked
/// when parsed, else the folder's name made into one: each character other than an ASCII letter,
/// digit, `-` or `_` becomes `-`, leading `-` and `_` go, and it is cut to
/// [`tollgate_store::MAX_AGENT_NAME`] bytes (`.tmp x` names `tmp-x`).
fn name_of(dir: &Path, config: &AgentConfig) -> anyhow::Result<String> {
    if let Some(name) = &config.name {
        return Ok(name.clone());
    }
    let folder = dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let mapped: String =
        folder.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect();
    let mut name = mapped.trim_start_matches(['-', '_']).to_owned();
    name.truncate(tollgate_store::MAX_AGENT_NAME);
    tollgate_store::check_agent_name(&name).map_err(|why| {
        anyhow::anyhow!(
            "{}: the agent has no [agent] name and its folder's name makes none ({why}); set [agent] name \
             in {}",
            dir.display(),
            config.path.display()
        )
    })?;
    Ok(name)
}

/// The custom tools of `tools` that neither a policy nor their annotations classify: their calls
/// get `default_effect`.
pub fn default_effect_tools<'a>(policies: &Policies, tools: &'a ToolSet) -> Vec<&'a str> {
    tools
        .tools()
        .iter()
        .filter(|tool| {
            let (_, source) = policies.resolve_with_source(&tool.name, Some(&tool.annotations));
            source == PolicySource::Default
        })
        .map(|tool| tool.name.as_str())
        .collect()
}

#[cfg(test)]
use tollgate_sandbox::SandboxConfig;
use tollgate_sandbox::{FactoryError, LiveTools, OptionsContext, OptionsFactory, Sandbox, ToolSet};
use tollgate_store::{AgentDigest, ClaimScope};

use crate::bundle::{Bundle, LOCK_FILE, Lock};
use crate::config::{AgentConfig, CONFIG_FILE};

/// A loaded agent directory. Share it behind an `Arc`.
pub struct Agent {
    dir: PathBuf,
    /// What sessions name it by: `[agent] name`, else the folder's name.
    name: String,
    /// Its `tollgate.toml` (the defaults when there is none).
    pub config: AgentConfig,
    sandbox: Sandbox,
    factory: Option<OptionsFactory>,
    digest: String,
    /// A locked agent's tools, loaded once.
    pinned_tools: Option<ToolSet>,
    /// An unlocked agent's `tools/`, looked at anew for every segment attempt and tool step.
    live: LiveTools,
    /// `tollgate.toml` as loaded: its length and modification time (`None`: there was none).
    config_stamp: Option<(u64, std::time::SystemTime)>,
}

/// The length and modification time of the file at `path`, if it exists.
fn stamp(path: &Path) -> Option<(u64, std::time::SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

/// Whether [`Agent::load_with`] checks `tollgate.lock`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockUse {
    /// Check the lock when there is one (every Worker and server).
    Verify,
    /// Load as if there were no lock (`tollgate agent lock`, which replaces it).
    Ignore,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("dir", &self.dir)
            .field("factory", &self.factory)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Loads `dir`: its `tollgate.toml` (optional for a directory of tools only), the options
    /// factory, and a first load of `tools/` so a broken component is reported now. A locked
    /// agent's components must all load; an unlocked agent's that do not are unavailable (the log
    /// names each, [`Agent::tools`] lists them) and the others serve, as when one breaks later.
    ///
    /// # Errors
    /// A missing directory, an unreadable or invalid configuration (a
    /// [`crate::config::ConfigError`] naming the file, line and key), an options factory that
    /// does not load, a locked agent's component that does not load.
    pub async fn load(dir: &Path, sandbox: Sandbox) -> anyhow::Result<Agent> {
        Self::load_with(dir, sandbox, LockUse::Verify).await
    }

    /// [`Agent::load`], checking `tollgate.lock` or not.
    ///
    /// # Errors
    /// As [`Agent::load`]; with [`LockUse::Verify`] also a lock that does not parse (the file and
    /// line named) or a bundle that differs from it (each file named with both digests), checked
    /// after the configuration parsed. Nothing is compiled before the lock is checked.
    pub async fn load_with(dir: &Path, sandbox: Sandbox, lock: LockUse) -> anyhow::Result<Agent> {
        if !dir.is_dir() {
            bail!("the agent directory {} does not exist", dir.display());
        }
        let dir = dir.canonicalize().with_context(|| format!("{}", dir.display()))?;
        let mut bundle = Bundle::read(&dir)?;
        // A configuration that does not parse comes first: without it the options factory could
        // not be found, and the lock would call it missing.
        let config = match bundle.config.take() {
            Some(parsed) => parsed?,
            None => AgentConfig::defaults(dir.join(CONFIG_FILE)),
        };
        let name = name_of(&dir, &config)?;
        let locked = match lock {
            LockUse::Verify => match Lock::read(&dir)? {
                Some(lock) => {
                    lock.verify(&bundle)?;
                    true
                }
                None => false,
            },
            LockUse::Ignore => false,
        };
        let factory = match (&config.options_factory, &bundle.factory) {
            (Some(_), Some(source)) => Some(
                sandbox
                    .load_options_factory_source(source, &config.manifests)
                    .await
                    .with_context(|| format!("{}: [agent] options_factory", config.path.display()))?,
            ),
            (Some(path), None) => bail!(
                "{}: [agent] options_factory: {} does not exist",
                config.path.display(),
                dir.join(path).display()
            ),
            (None, _) => None,
        };
        let tools_dir = dir.join("tools");
        let live = LiveTools::new(tools_dir.clone());
        let tools = if !tools_dir.exists() && config.manifests.is_empty() {
            sandbox.no_tools()
        } else if locked {
            // A locked bundle is all or nothing: what was hashed and checked must load.
            sandbox
                .load_tool_sources(&tools_dir, bundle.tools, &config.manifests)
                .await
                .context("loading the agent's tools")?
        } else {
            // The first look at an unlocked agent's tools/: a component that does not load is
            // unavailable (named in the log, and by the Worker's reports) and the others serve,
            // as when one breaks later.
            drop(bundle.tools);
            let tools = live.load(&sandbox, &config.manifests).await.context("loading the agent's tools")?;
            let mut stems: Vec<&str> = tools.components().iter().map(|c| c.name.as_str()).collect();
            stems.extend(tools.unavailable().iter().map(|u| u.component.as_str()));
            config.manifests.check_components(&tools_dir, &stems).context("loading the agent's tools")?;
            tools
        };
        check_policy_names(&config.path, &config.policies, &tools)?;
        let config_stamp = stamp(&config.path);
        Ok(Agent {
            config_stamp,
            dir,
            name,
            config,
            sandbox,
            factory,
            digest: bundle.digest,
            pinned_tools: locked.then_some(tools),
            live,
        })
    }

    /// The agent directory (canonical).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether `tollgate.toml` changed on disk since the agent was loaded (its length or
    /// modification time): the loaded configuration (policies, grants, limits) stays in force until
    /// the process restarts.
    pub fn config_changed_on_disk(&self) -> bool {
        stamp(&self.config.path) != self.config_stamp
    }

    /// What sessions name this agent by: `[agent] name`, else the folder's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The agent digest of the bundle as read at load (`sha256:…`, see [`crate::bundle`]).
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Whether the agent was loaded from a bundle checked against its `tollgate.lock`.
    pub fn is_locked(&self) -> bool {
        self.pinned_tools.is_some()
    }

    /// What a session created by this process records: the digest, pinned when the agent is
    /// locked (only Workers that loaded it run the session), a record only when it is not.
    pub fn session_agent(&self) -> AgentDigest {
        AgentDigest { digest: self.digest.clone(), pinned: self.is_locked() }
    }

    /// The sessions this agent's Worker may run: those of this agent, unpinned, or pinned to its
    /// digest when it is locked (an unlocked Worker runs unpinned sessions only).
    pub fn claim_scope(&self) -> ClaimScope {
        ClaimScope {
            agents: vec![self.name.clone()],
            digests: if self.is_locked() { vec![self.digest.clone()] } else { Vec::new() },
            pinned_only: false,
        }
    }

    /// The lock file's path.
    pub fn lock_path(&self) -> std::path::PathBuf {
        self.dir.join(LOCK_FILE)
    }

    /// The tool components: a locked agent's, loaded once; else `tools/` as it is now (none when
    /// it does not exist), one component at a time ([`tollgate_sandbox::live`]): a component that
    /// does not load is in [`ToolSet::unavailable`], serving its last good build if it had one,
    /// and the others serve.
    ///
    /// # Errors
    /// Only a `tools/` directory that cannot be read.
    pub async fn tools(&self) -> anyhow::Result<ToolSet> {
        if let Some(tools) = &self.pinned_tools {
            return Ok(tools.clone());
        }
        Ok(self.live.load(&self.sandbox, &self.config.manifests).await?)
    }

    /// [`Agent::tools`] when every component loads: what a lock pins must all load.
    ///
    /// # Errors
    /// A `tools/` directory that cannot be read; each component that did not load, with why.
    pub async fn every_tool(&self) -> anyhow::Result<ToolSet> {
        let tools = self.tools().await?;
        if !tools.unavailable().is_empty() {
            let each: Vec<String> =
                tools.unavailable().iter().map(|u| format!("`{}`: {}", u.component, u.reason)).collect();
            bail!("tool components did not load: {}", each.join("; "));
        }
        Ok(tools)
    }

    /// Whether the options factory decides built-in tool calls.
    pub fn has_cli_policy(&self) -> bool {
        self.factory.as_ref().is_some_and(OptionsFactory::has_cli_policy)
    }

    /// The options factory, if any.
    pub fn factory(&self) -> Option<&OptionsFactory> {
        self.factory.as_ref()
    }

    /// The options of one segment, checked ([`tollgate_engine::options::check_options`]).
    ///
    /// # Errors
    /// The factory refused, trapped, or returned options that would bypass the gate.
    pub async fn options(&self, ctx: &OptionsContext) -> Result<CheckedOptions, FactoryError> {
        match &self.factory {
            Some(factory) => factory.build_options(ctx).await,
            None => Ok(self.config.static_options()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn load(config: &str) -> anyhow::Result<Agent> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), config).unwrap();
        let sandbox = Sandbox::new(SandboxConfig { cache_dir: None, ..SandboxConfig::default() }).unwrap();
        Agent::load(dir.path(), sandbox).await
    }

    async fn error_of(config: &str) -> String {
        format!("{:#}", load(config).await.expect_err("the configuration is refused"))
    }

    #[tokio::test]
    async fn a_tools_table_for_a_component_that_is_not_loaded_is_refused_with_a_did_you_mean() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("tools")).unwrap();
        std::fs::copy(tollgate_test_guests::PAYMENTS, dir.path().join("tools/payments.wasm")).unwrap();
        let config = "[options]\nmodel = \"m\"\n\n[tools.paymnts]\nmemory_mb = 16\n";
        std::fs::write(dir.path().join(CONFIG_FILE), config).unwrap();
        let sandbox = || Sandbox::new(SandboxConfig { cache_dir: None, ..SandboxConfig::default() }).unwrap();
        let error = format!("{:#}", Agent::load(dir.path(), sandbox()).await.unwrap_err());
        assert!(
            error.contains("tollgate.toml:4 [tools.paymnts] grants capabilities to `paymnts`, but there is no paymnts.wasm in")
                && error.ends_with("; did you mean `[tools.payments]`?"),
            "{error}"
        );
        std::fs::write(dir.path().join(CONFIG_FILE), config.replace("paymnts", "payments")).unwrap();
        Agent::load(dir.path(), sandbox()).await.expect("the table names the component");
    }

    #[tokio::test]
    async fn a_configuration_changed_on_disk_after_the_load_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join(CONFIG_FILE);
        std::fs::write(&config, "[options]\nmodel = \"m\"\n").unwrap();
        let sandbox = Sandbox::new(SandboxConfig { cache_dir: None, ..SandboxConfig::default() }).unwrap();
        let agent = Agent::load(dir.path(), sandbox).await.unwrap();
        assert!(!agent.config_changed_on_disk());
        std::fs::write(&config, "[options]\nmodel = \"other\"\n").unwrap();
        assert!(agent.config_changed_on_disk(), "a new policy or grant does not apply until a restart");
    }

    /// The name the loader gives a folder without `[agent] name`.
    fn canonical_name(dir: &Path) -> String {
        let folder = dir.canonicalize().unwrap();
        name_of(&folder, &AgentConfig::defaults(folder.join(CONFIG_FILE))).unwrap()
    }

    #[tokio::test]
    async fn an_agent_is_named_by_its_configuration_else_by_its_folder_made_into_a_name() {
        let named = load("[agent]\nname = \"billing\"\n").await.unwrap();
        assert_eq!(named.name(), "billing");
        let parent = tempfile::tempdir().unwrap();
        for (folder, expected) in [("support", "support"), (".tmp x.y", "tmp-x-y"), ("_Ops_2", "Ops_2")] {
            let dir = parent.path().join(folder);
            std::fs::create_dir(&dir).unwrap();
            let sandbox =
                Sandbox::new(SandboxConfig { cache_dir: None, ..SandboxConfig::default() }).unwrap();
            assert_eq!(Agent::load(&dir, sandbox).await.unwrap().name(), expected, "{folder:?}");
        }
        let long = parent.path().join("a".repeat(100));
        std::fs::create_dir(&long).unwrap();
        assert_eq!(canonical_name(&long), "a".repeat(tollgate_store::MAX_AGENT_NAME));
        let nameless = parent.path().join("...");
        std::fs::create_dir(&nameless).unwrap();
        let sandbox = Sandbox::new(SandboxConfig { cache_dir: None, ..SandboxConfig::default() }).unwrap();
        let error = format!("{:#}", Agent::load(&nameless, sandbox).await.unwrap_err());
        assert!(
            error.contains("its folder's name makes none") && error.contains("set [agent] name"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_policy_for_a_tool_the_agent_does_not_have_is_refused_with_a_did_you_mean() {
        // With no custom tools: a built-in misspelled, a made-up custom name; MCP names pass.
        let text = error_of(
            "[policies]\nbash = { effect = \"read\" }\nmcp__github__create_issue = { effect = \"non_idempotent_write\" }\n\
             wether = { effect = \"read\" }\nWrite = { effect = \"non_idempotent_write\" }\n",
        )
        .await;
        assert!(text.contains("tollgate.toml: [policies]"), "{text}");
        assert!(text.contains("`bash` names no tool of this agent (did you mean `Bash`?)"), "{text}");
        assert!(text.contains("`wether` names no tool"), "{text}");
        assert!(!text.contains("mcp__github") && !text.contains("`Write`"), "{text}");
        // The approvers and deadline fields name tools too.
        let text = error_of(
            "[policies]\nWrite = { effect = \"non_idempotent_write\" }\nWritee = { effect = \"non_idempotent_write\", approvers = [\"ops\"] }\n",
        )
        .await;
        assert!(text.contains("`Writee` names no tool of this agent (did you mean `Write`?)"), "{text}");
    }

    #[tokio::test]
    async fn a_static_agent_loads_with_its_limits_policies_and_options() {
        let agent = load(
            "[agent]\nspend_limit_usd = 2.5\nsegment_timeout_secs = 60\n\
             [options]\nmodel = \"m\"\n[policies]\nBash = { effect = \"read\" }\n",
        )
        .await
        .unwrap();
        assert_eq!(agent.config.limits.spend_limit_usd, Some(2.5));
        assert_eq!(agent.config.segment_timeout, std::time::Duration::from_secs(60));
        assert!(!agent.has_cli_policy());
        let ctx = OptionsContext { session_id: "s".into(), turn_id: "turn-1".into(), attempt: 1 };
        assert_eq!(agent.options(&ctx).await.unwrap().model.as_deref(), Some("m"));
        assert!(agent.tools().await.unwrap().tools().is_empty(), "no tools/ directory is no tools");
    }

    #[tokio::test]
    async fn a_locked_agent_loads_only_the_files_its_lock_lists_with_their_digests() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join(CONFIG_FILE);
        std::fs::write(&config, "[options]\nmodel = \"m\"\n").unwrap();
        let sandbox = || Sandbox::new(SandboxConfig { cache_dir: None, ..SandboxConfig::default() }).unwrap();
        let unlocked = Agent::load(dir.path(), sandbox()).await.unwrap();
        assert!(!unlocked.is_locked());
        let folder = canonical_name(dir.path());
        assert_eq!(
            unlocked.claim_scope(),
            ClaimScope { agents: vec![folder.clone()], digests: vec![], pinned_only: false },
            "an unlocked Worker runs its agent's unpinned sessions only"
        );
        assert!(!unlocked.session_agent().pinned);
        let canonical = dir.path().canonicalize().unwrap();
        Lock::of(&Bundle::read(&canonical).unwrap()).write(&canonical).unwrap();
        let locked = Agent::load(dir.path(), sandbox()).await.unwrap();
        assert!(locked.is_locked());
        assert_eq!(locked.digest(), unlocked.digest(), "the same files, the same digest");
        assert_eq!(
            locked.claim_scope(),
            ClaimScope {
                agents: vec![folder],
                digests: vec![locked.digest().to_owned()],
                pinned_only: false
            }
        );
        assert!(locked.session_agent().pinned);

        let expected = crate::bundle::file_digest(&std::fs::read(&config).unwrap());
        std::fs::write(&config, "[options]\nmodel = \"other\"\n").unwrap();
        let found = crate::bundle::file_digest(&std::fs::read(&config).unwrap());
        let error = format!("{:#}", Agent::load(dir.path(), sandbox()).await.unwrap_err());
        assert!(
            error.contains(&format!("tollgate.toml changed: expected {expected}, found {found}")),
            "{error}"
        );
        let ignored = Agent::load_with(dir.path(), sandbox(), LockUse::Ignore).await.unwrap();
        assert!(!ignored.is_locked());

        std::fs::write(&config, "[options]\nmodel = \"m\"\n").unwrap();
        std::fs::create_dir(dir.path().join("tools")).unwrap();
        // Not even WebAssembly: refused by the lock before anything is compiled.
        std::fs::write(dir.path().join("tools/dropped.wasm"), b"junk").unwrap();
        let error = format!("{:#}", Agent::load(dir.path(), sandbox()).await.unwrap_err());
        assert!(error.contains("tools/dropped.wasm is not in the lock"), "{error}");
    }

    #[tokio::test]
    async fn a_broken_component_at_load_is_unavailable_and_the_others_serve_unless_the_agent_is_locked() {
        let dir = tempfile::tempdir().unwrap();
        let tools = dir.path().join("tools");
        std::fs::create_dir(&tools).unwrap();
        std::fs::copy(tollgate_test_guests::ORDERS, tools.join("orders.wasm")).unwrap();
        let bytes = std::fs::read(tollgate_test_guests::PAYMENTS).unwrap();
        std::fs::write(tools.join("payments.wasm"), &bytes[..bytes.len() / 2]).unwrap();
        // A policy for a tool of the broken component: it may be one of its tools, so no refusal.
        let config =
            "[options]\nmodel = \"m\"\n\n[policies]\ncreate_refund = { effect = \"non_idempotent_write\" }\n";
        std::fs::write(dir.path().join(CONFIG_FILE), config).unwrap();
        let sandbox = || Sandbox::new(SandboxConfig { cache_dir: None, ..SandboxConfig::default() }).unwrap();

        let agent = Agent::load(dir.path(), sandbox()).await.expect("the other components serve");
        let loaded = agent.tools().await.unwrap();
        assert!(loaded.get("lookup_order").is_some(), "orders serves");
        let unavailable: Vec<&str> = loaded.unavailable().iter().map(|u| u.component.as_str()).collect();
        assert_eq!(unavailable, ["payments"]);
        assert!(loaded.unavailable()[0].reason.contains("payments.wasm"), "{:?}", loaded.unavailable());
        let refused = format!("{:#}", agent.every_tool().await.unwrap_err());
        assert!(refused.contains("tool components did not load: `payments`: "), "{refused}");

        // A misspelled policy with nothing unavailable is still refused.
        std::fs::copy(tollgate_test_guests::PAYMENTS, tools.join("payments.wasm")).unwrap();
        std::fs::write(dir.path().join(CONFIG_FILE), config.replace("create_refund", "create_refnd"))
            .unwrap();
        let error = format!("{:#}", Agent::load(dir.path(), sandbox()).await.unwrap_err());
        assert!(error.contains("[policies]") && error.contains("create_refnd"), "{error}");

        // A locked bundle is all or nothing.
        std::fs::write(dir.path().join(CONFIG_FILE), config).unwrap();
        std::fs::write(tools.join("payments.wasm"), &bytes[..bytes.len() / 2]).unwrap();
        let canonical = dir.path().canonicalize().unwrap();
        Lock::of(&Bundle::read(&canonical).unwrap()).write(&canonical).unwrap();
        let error = format!("{:#}", Agent::load(dir.path(), sandbox()).await.unwrap_err());
        assert!(error.contains("loading the agent's tools") && error.contains("payments.wasm"), "{error}");
    }

    #[tokio::test]
    async fn bad_configurations_are_refused_naming_what_is_wrong() {
        assert!(error_of("[agnet]\n").await.contains("unknown table `[agnet]`"));
        assert!(error_of("[agent]\nspend_limit = 1\n").await.contains("spend_limit"));
        assert!(
            error_of("[agent]\nspend_limit_usd = -1.0\n")
                .await
                .contains("spend_limit_usd must be a positive")
        );
        assert!(error_of("[agent]\nsegment_timeout_secs = 0\n").await.contains("segment_timeout_secs"));
        assert!(
            error_of("[options]\npermission_mode = \"bypassPermissions\"\n")
                .await
                .contains("bypassPermissions")
        );
        assert!(error_of("[options]\nmodle = \"m\"\n").await.contains("modle"));
        assert!(error_of("[policies]\nBash = { effect = \"sometimes\" }\n").await.contains("sometimes"));
        let both = error_of("[agent]\noptions_factory = \"agent.wasm\"\n[options]\nmodel = \"m\"\n").await;
        assert!(both.contains("either [agent] options_factory or [options]"), "{both}");
        let missing = error_of("[agent]\noptions_factory = \"nope.wasm\"\n").await;
        assert!(missing.contains("options_factory"), "{missing}");
    }
}
