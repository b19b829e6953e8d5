//! `tollgate agent lock DIR [--check]`: pins an agent's files in `DIR/tollgate.lock`, or checks
//! that they still match it. See [`crate::bundle`] for what the bundle is and the lock's format.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use tollgate_sandbox::{Sandbox, SandboxConfig};

use crate::agent::{Agent, LockUse};
use crate::bundle::{Bundle, Lock};

/// Options of `tollgate agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
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
}

/// Runs `tollgate agent …`.
pub async fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let AgentCommand::Lock { dir, check, json } = args.command;
    let out = &mut std::io::stdout().lock();
    if !dir.is_dir() {
        anyhow::bail!("the agent directory {} does not exist", dir.display());
    }
    let canonical = dir.canonicalize().with_context(|| dir.display().to_string())?;
    if check {
        let lock = Lock::read(&canonical)?
            .with_context(|| format!("{} has no {}", canonical.display(), crate::bundle::LOCK_FILE))?;
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
