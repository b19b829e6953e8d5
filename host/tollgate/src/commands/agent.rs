//! `tollgate agent lock DIR [--check]`: pins an agent's files in `DIR/tollgate.lock`, or checks
//! that they still match it. See [`tollgate_worker::bundle`] for what the bundle is and the lock's format.
//!
//! `tollgate agent push|list|show|promote|rollback`: agents' versions in the store (see
//! [`tollgate_store::versions`]): a folder pushed as the next version (locked first when it has no
//! lock), the agents and their versions listed, the version new sessions get changed.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use tollgate_sandbox::{Sandbox, SandboxConfig};

use tollgate_worker::agent::{Agent, LockUse};
use tollgate_worker::bundle::{Bundle, Lock};

/// Options of `tollgate agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The subcommand.
    #[command(subcommand)]
    pub command: AgentCommand,
}

/// The `agent` subcommands.
#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Write DIR/tollgate.lock: the SHA-256 of tollgate.toml, the options factory and every
    /// tools/*.wasm and tools/*.toml, and the agent digest. The agent must load first.
    Lock {
        /// The agent directory.
        dir: PathBuf,
        /// Write nothing: exit 0 when the files match the existing lock, 1 (listing each
        /// difference) when they do not.
        #[arg(long)]
        check: bool,
        /// Print the lock as JSON instead of a summary.
        #[arg(long)]
        json: bool,
    },
    /// Store the agent folder DIR as the agent's next version (each file once, by digest), after
    /// it loads; DIR is locked first when it has no lock. Pushing an unchanged folder is a no-op.
    Push {
        /// The agent directory.
        dir: PathBuf,
        /// The agent's name (default: its `[agent] name`, else the folder's name).
        #[arg(long)]
        name: Option<String>,
        /// Who pushes it (default: `$USER`).
        #[arg(long, env = "USER", default_value = "tollgate:local")]
        by: String,
        /// The store.
        #[command(flatten)]
        store: StoreArg,
    },
    /// The agents with versions in the store: their current version, how many, sessions.
    List {
        /// The store.
        #[command(flatten)]
        store: StoreArg,
    },
    /// An agent's versions: digest, which is current, sessions on each, who pushed it and when.
    Show {
        /// The agent.
        name: String,
        /// The store.
        #[command(flatten)]
        store: StoreArg,
    },
    /// Make NAME@K the version new sessions of NAME get (ending any canary), or with `--share` its
    /// canary: that percent of new sessions get it, the rest the current version.
    Promote {
        /// `NAME@K`.
        spec: String,
        /// The percent of new sessions the canary gets (1 to 99).
        #[arg(long, value_name = "PERCENT")]
        share: Option<i64>,
        /// The store.
        #[command(flatten)]
        store: StoreArg,
    },
    /// Make the version current before the last promotion current again.
    Rollback {
        /// The agent.
        name: String,
        /// The store.
        #[command(flatten)]
        store: StoreArg,
    },
}

/// The store of the `agent` subcommands that keep versions.
#[derive(Debug, Args)]
pub struct StoreArg {
    /// The store: `sqlite://PATH` or `postgres://…`.
    #[arg(long, env = "TOLLGATE_DB")]
    pub db: String,
}

impl StoreArg {
    async fn open(&self) -> anyhow::Result<std::sync::Arc<dyn tollgate_store::Store>> {
        tollgate_store::open(&self.db).await.with_context(|| format!("opening the store {}", self.db))
    }
}

/// Runs `tollgate agent …`.
pub async fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let out = &mut std::io::stdout().lock();
    match args.command {
        AgentCommand::Lock { dir, check, json } => lock(out, &dir, check, json).await,
        AgentCommand::Push { dir, name, by, store } => push(out, &dir, name, &by, &store).await,
        AgentCommand::List { store } => list(out, &store).await,
        AgentCommand::Show { name, store } => show(out, &name, &store).await,
        AgentCommand::Promote { spec, share, store } => {
            let (name, version) = tollgate_worker::pull::parse_spec(&spec)?;
            let version =
                version.with_context(|| format!("{spec:?}: promote names a version, `{name}@K`"))?;
            let done = store.open().await?.versions().promote(name, version, share).await?;
            let from = done.from.map_or_else(|| "none".to_owned(), |v| format!("{name}@{v}"));
            match share {
                Some(share) => writeln!(
                    out,
                    "{share}% of new sessions of {name} get {name}@{} (the canary); the rest {from}",
                    done.to
                )?,
                None => writeln!(out, "new sessions of {name} get {name}@{} (was {from})", done.to)?,
            }
            Ok(ExitCode::SUCCESS)
        }
        AgentCommand::Rollback { name, store } => {
            let done = store.open().await?.versions().rollback(&name).await?;
            let from = done.from.map_or_else(|| "none".to_owned(), |v| format!("{name}@{v}"));
            writeln!(out, "new sessions of {name} get {name}@{} again (was {from})", done.to)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn push(
    out: &mut impl Write,
    dir: &std::path::Path,
    name: Option<String>,
    by: &str,
    store: &StoreArg,
) -> anyhow::Result<ExitCode> {
    if !dir.is_dir() {
        anyhow::bail!("the agent directory {} does not exist", dir.display());
    }
    let canonical = dir.canonicalize().with_context(|| dir.display().to_string())?;
    if tollgate_worker::bundle::Lock::read(&canonical)?.is_none() {
        let mut sink = Vec::new();
        lock(&mut sink, &canonical, false, false).await.context("nothing was pushed")?;
        writeln!(out, "locked {} first", canonical.display())?;
    }
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let agent = Agent::load(&canonical, sandbox)
        .await
        .with_context(|| format!("{} does not load; nothing was pushed", canonical.display()))?;
    let name = match name {
        Some(name) if name != agent.name() && agent.config.name.is_some() => anyhow::bail!(
            "{} names the agent `{}`: push it under that name, or change [agent] name; nothing was pushed",
            agent.config.path.display(),
            agent.name()
        ),
        Some(name) => {
            tollgate_store::check_agent_name(&name).map_err(anyhow::Error::msg)?;
            name
        }
        None => agent.name().to_owned(),
    };
    let store = store.open().await?;
    let pushed = tollgate_worker::pull::push(store.as_ref(), &canonical, &name, agent.digest(), by).await?;
    let current = if pushed.current { ", current" } else { "" };
    if pushed.created {
        writeln!(out, "pushed {name}@{} ({}){current}", pushed.version, agent.digest())?;
        if !pushed.current {
            writeln!(out, "new sessions get it after: tollgate agent promote {name}@{}", pushed.version)?;
        }
    } else {
        writeln!(
            out,
            "{name}@{} is this bundle already ({}){current}; nothing was pushed",
            pushed.version,
            agent.digest()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(out: &mut impl Write, store: &StoreArg) -> anyhow::Result<ExitCode> {
    let store = store.open().await?;
    let names = store.versions().pushed_agents().await?;
    writeln!(out, "{:<24} {:<10} {:>8} {:>9}", "AGENT", "CURRENT", "VERSIONS", "SESSIONS")?;
    for name in names {
        let versions = store.versions().agent_versions(&name).await?;
        let current =
            versions.iter().find(|v| v.current).map_or_else(|| "-".to_owned(), |v| format!("@{}", v.version));
        let sessions: i64 = versions.iter().map(|v| v.sessions).sum();
        writeln!(out, "{name:<24} {current:<10} {:>8} {sessions:>9}", versions.len())?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(out: &mut impl Write, name: &str, store: &StoreArg) -> anyhow::Result<ExitCode> {
    let store = store.open().await?;
    let versions = store.versions().agent_versions(name).await?;
    if versions.is_empty() {
        anyhow::bail!("agent `{name}` has no version in the store: push one (`tollgate agent push DIR`)");
    }
    writeln!(
        out,
        "{:<8} {:<8} {:>8}  {:<20} {:<24} DIGEST",
        "VERSION", "CURRENT", "SESSIONS", "PUSHED BY", "PUSHED AT"
    )?;
    for v in &versions {
        let at = tollgate_api::webhooks::rfc3339_ms(v.pushed_at);
        let current = match (v.current, v.canary_share) {
            (true, _) => "yes".to_owned(),
            (false, Some(share)) => format!("{share}%"),
            (false, None) => String::new(),
        };
        writeln!(
            out,
            "{:<8} {current:<8} {:>8}  {:<20} {at:<24} {}",
            format!("@{}", v.version),
            v.sessions,
            v.pushed_by,
            v.digest
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn lock(
    out: &mut impl Write,
    dir: &std::path::Path,
    check: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if !dir.is_dir() {
        anyhow::bail!("the agent directory {} does not exist", dir.display());
    }
    let canonical = dir.canonicalize().with_context(|| dir.display().to_string())?;
    if check {
        let lock = Lock::read(&canonical)?.with_context(|| {
            format!("{} has no {}", canonical.display(), tollgate_worker::bundle::LOCK_FILE)
        })?;
        let bundle = Bundle::read(&canonical)?;
        return match lock.verify(&bundle) {
            Ok(()) => {
                writeln!(out, "{} matches its lock: {}", canonical.display(), lock.agent_digest)?;
                Ok(ExitCode::SUCCESS)
            }
            Err(error) => {
                writeln!(out, "{error}")?;
                if let Some(Err(config)) = &bundle.config {
                    // Its options factory could not be found: the lock may call it missing.
                    writeln!(out, "and the configuration does not parse: {config}")?;
                }
                Ok(ExitCode::from(1))
            }
        };
    }
    // The agent must load (every component compiles and lists valid tools) before it is pinned.
    let sandbox = Sandbox::new(SandboxConfig::default())?;
    let agent = Agent::load_with(&canonical, sandbox, LockUse::Ignore)
        .await
        .with_context(|| format!("{} does not load; nothing was locked", canonical.display()))?;
    agent
        .every_tool()
        .await
        .with_context(|| format!("{} does not load; nothing was locked", canonical.display()))?;
    // Read again: what is locked is exactly what was hashed now, and it must be what loaded.
    let bundle = Bundle::read(&canonical)?;
    if bundle.digest != agent.digest() {
        anyhow::bail!(
            "the files of {} changed while it was being checked; nothing was locked, try again",
            canonical.display()
        );
    }
    let lock = Lock::of(&bundle);
    let path = lock.write(&canonical)?;
    if json {
        serde_json::to_writer_pretty(&mut *out, &lock)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "wrote {}", path.display())?;
    for (file, digest) in &lock.files {
        writeln!(out, "  {digest}  {file}")?;
    }
    writeln!(out, "agent digest: {}", lock.agent_digest)?;
    Ok(ExitCode::SUCCESS)
}
