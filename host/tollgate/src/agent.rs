//! An agent directory: `tollgate.toml`, an optional options factory, and `tools/*.wasm`.
//!
//! [`Agent::load`] reads and checks the configuration once; [`Agent::tools`] loads the tool
//! components anew for every segment attempt and tool step (DESIGN.md §5: a `.wasm` dropped into
//! `tools/` takes effect at the next attempt), and [`Agent::options`] gives a segment its Claude
//! Code options, from the factory or the static `[options]` table.
//!
//! ```toml
//! [agent]
//! flow_type = "SupportAgent"        # a label
//! options_factory = "agent.wasm"    # or a static [options] table
//! spend_limit_usd = 5.0             # no new segment once a session spent this much
//! segment_timeout_secs = 900        # one CLI run, default 15 min
//!
//! [options]                         # used when there is no factory
//! model = "claude-sonnet-4-5"
//! tools = ["Read", "Grep"]
//!
//! [policies]                        # see tollgate_engine::policy
//! create_refund = { effect = "non_idempotent_write" }
//!
//! [tools.payments]                  # the component's grants; see tollgate_sandbox::Manifest
//! allowed_outbound_hosts = ["https://payments.example.com"]
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use tollgate_engine::policy::Policies;
use tollgate_engine::session::Limits;
#[cfg(test)]
use tollgate_sandbox::SandboxConfig;
use tollgate_sandbox::{AgentOptions, FactoryError, OptionsFactory};
use tollgate_sandbox::{Manifests, OptionsContext, Sandbox, ToolSet};

/// The file name of an agent's configuration.
pub const CONFIG_FILE: &str = "tollgate.toml";

/// The default limit of one segment (seeds, "Limits": 15 minutes).
pub const DEFAULT_SEGMENT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AgentTable {
    flow_type: Option<String>,
    options_factory: Option<PathBuf>,
    spend_limit_usd: Option<f64>,
    segment_timeout_secs: Option<u64>,
}

/// A loaded agent directory. Share it behind an `Arc`.
pub struct Agent {
    dir: PathBuf,
    /// A label (`[agent] flow_type`).
    pub flow_type: Option<String>,
    /// The `[policies]` table.
    pub policies: Policies,
    manifests: Manifests,
    sandbox: Sandbox,
    factory: Option<OptionsFactory>,
    static_options: AgentOptions,
    /// The limits the state machine enforces.
    pub limits: Limits,
    /// How long one segment may run.
    pub segment_timeout: Duration,
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
    /// factory, and one trial load of `tools/` so a broken component is reported now.
    ///
    /// # Errors
    /// A missing directory, an unreadable or invalid configuration (the message names the key),
    /// an options factory that does not load.
    pub async fn load(dir: &Path, sandbox: Sandbox) -> anyhow::Result<Agent> {
        if !dir.is_dir() {
            bail!("the agent directory {} does not exist", dir.display());
        }
        let dir = dir.canonicalize().with_context(|| format!("{}", dir.display()))?;
        let config = dir.join(CONFIG_FILE);
        let (table, manifests) = if config.is_file() {
            let text =
                std::fs::read_to_string(&config).with_context(|| format!("reading {}", config.display()))?;
            let table: toml::Table =
                toml::from_str(&text).with_context(|| format!("{}", config.display()))?;
            (table, Manifests::from_agent_config(&config)?)
        } else {
            (toml::Table::new(), Manifests::default())
        };
        let where_ = config.display();
        for key in table.keys() {
            if !["agent", "options", "policies", "tools"].contains(&key.as_str()) {
                bail!(
                    "{where_}: unknown table `[{key}]` (expected [agent], [options], [policies], [tools.<name>])"
                );
            }
        }
        let agent: AgentTable = match table.get("agent") {
            Some(value) => value.clone().try_into().with_context(|| format!("{where_}: [agent]"))?,
            None => AgentTable::default(),
        };
        let policies = match table.get("policies") {
            Some(value) => Policies::from_value(&serde_json::to_value(value)?)
                .with_context(|| format!("{where_}: [policies]"))?,
            None => Policies::default(),
        };
        let static_options: AgentOptions = match table.get("options") {
            Some(value) => {
                let options: AgentOptions = serde_json::from_value(serde_json::to_value(value)?)
                    .with_context(|| format!("{where_}: [options]"))?;
                options.validate("tools").map_err(|e| anyhow::anyhow!("{where_}: [options]: {e}"))?;
                options
            }
            None => AgentOptions::default(),
        };
        if agent.options_factory.is_some() && table.contains_key("options") {
            bail!("{where_}: set either [agent] options_factory or [options], not both");
        }
        if let Some(limit) = agent.spend_limit_usd
            && !(limit.is_finite() && limit > 0.0)
        {
            bail!("{where_}: [agent] spend_limit_usd must be a positive number of dollars, not {limit}");
        }
        let segment_timeout = match agent.segment_timeout_secs {
            Some(0) => bail!("{where_}: [agent] segment_timeout_secs must be at least 1"),
            Some(secs) => Duration::from_secs(secs),
            None => DEFAULT_SEGMENT_TIMEOUT,
        };
        let factory = match &agent.options_factory {
            Some(path) => Some(
                sandbox
                    .load_options_factory(&dir.join(path), &manifests)
                    .await
                    .with_context(|| format!("{where_}: [agent] options_factory"))?,
            ),
            None => None,
        };
        let loaded = Agent {
            dir,
            flow_type: agent.flow_type,
            policies,
            manifests,
            sandbox,
            factory,
            static_options,
            limits: Limits { spend_limit_usd: agent.spend_limit_usd },
            segment_timeout,
        };
        loaded.tools().await.context("loading the agent's tools")?;
        Ok(loaded)
    }

    /// The agent directory (canonical).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The tool components of `tools/` as they are now (none when it does not exist).
    ///
    /// # Errors
    /// A component that does not load.
    pub async fn tools(&self) -> anyhow::Result<ToolSet> {
        let dir = self.dir.join("tools");
        if !dir.exists() && self.manifests.is_empty() {
            return Ok(self.sandbox.no_tools());
        }
        Ok(self.sandbox.load_tools(&dir, &self.manifests).await?)
    }

    /// Whether the options factory decides built-in tool calls.
    pub fn has_cli_policy(&self) -> bool {
        self.factory.as_ref().is_some_and(OptionsFactory::has_cli_policy)
    }

    /// The options factory, if any.
    pub fn factory(&self) -> Option<&OptionsFactory> {
        self.factory.as_ref()
    }

    /// The options of one segment.
    ///
    /// # Errors
    /// The factory refused, trapped, or returned options that would bypass the gate.
    pub async fn options(&self, ctx: &OptionsContext) -> Result<AgentOptions, FactoryError> {
        match &self.factory {
            Some(factory) => factory.build_options(ctx).await,
            None => Ok(self.static_options.clone()),
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
    async fn a_static_agent_loads_with_its_limits_policies_and_options() {
        let agent = load(
            "[agent]\nspend_limit_usd = 2.5\nsegment_timeout_secs = 60\n\
             [options]\nmodel = \"m\"\n[policies]\nBash = { effect = \"read\" }\n",
        )
        .await
        .unwrap();
        assert_eq!(agent.limits.spend_limit_usd, Some(2.5));
        assert_eq!(agent.segment_timeout, Duration::from_secs(60));
        assert!(!agent.has_cli_policy());
        let ctx = OptionsContext { session_id: "s".into(), turn_id: "turn-1".into(), attempt: 1 };
        assert_eq!(agent.options(&ctx).await.unwrap().model.as_deref(), Some("m"));
        assert!(agent.tools().await.unwrap().tools().is_empty(), "no tools/ directory is no tools");
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
