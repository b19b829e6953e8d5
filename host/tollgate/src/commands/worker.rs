//! `tollgate worker --agent DIR --db URL`: one Worker, until SIGINT or SIGTERM; then it drains
//! (`--drain-secs`, cut short by a second signal) and exits.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tollgate_claude::{CliBinary, CliLocator};
use tollgate_process::setup::StopSignals;
use tollgate_sandbox::{Sandbox, SandboxConfig};

use tollgate_worker::agent::Agent;
use tollgate_worker::worker::{Worker, WorkerConfig};

/// Options of `tollgate worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The agent directory (`tollgate.toml`, `agent.wasm`, `tools/`).
    #[arg(
        long,
        env = "TOLLGATE_AGENT",
        required_unless_present = "agent_names",
        conflicts_with = "agent_names"
    )]
    pub agent: Option<PathBuf>,
    /// Serve agents pushed into the store (`tollgate agent push`): `NAME` (its current version)
    /// or `NAME@K`, each fetched by digest, checked and cached under `--bundle-cache`; needs
    /// `--db`. Several, comma-separated or repeated (`tollgate worker` only), run side by side in
    /// this process, each with `--concurrency` steps.
    #[arg(
        long = "agent-name",
        visible_alias = "agents",
        env = "TOLLGATE_AGENT_NAME",
        value_name = "NAME[@K]",
        value_delimiter = ',',
        requires = "db"
    )]
    pub agent_names: Vec<String>,
    /// Where agents pulled from the store are kept, one folder per digest (default:
    /// `$XDG_CACHE_HOME/tollgate/bundles`, else `~/.cache/tollgate/bundles`).
    #[arg(long, env = "TOLLGATE_BUNDLE_CACHE", value_name = "DIR")]
    pub bundle_cache: Option<PathBuf>,
    /// The store: `sqlite://PATH` (default: `tollgate.db` in the agent directory) or
    /// `postgres://…`.
    #[arg(long, env = "TOLLGATE_DB")]
    pub db: Option<String>,
    /// Steps, and so CLI processes, at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// The lease of a claimed step, in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub lease_secs: f64,
    /// How often a held step's lease is extended, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub heartbeat_secs: f64,
    /// The longest wait between claims when no wake-up arrives, in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub poll_secs: f64,
    /// On SIGTERM or SIGINT: how long the steps in hand may take to finish, in seconds, before
    /// they are stopped and handed to another Worker (0: at once; a second signal also ends the
    /// drain at once).
    #[arg(long, default_value_t = 30.0)]
    pub drain_secs: f64,
    /// This Worker's name (default `worker-<pid>`).
    #[arg(long)]
    pub worker_id: Option<String>,
    /// The `claude` binary (default: `$TOLLGATE_CLAUDE_CLI`, the pinned install, then `PATH`).
    #[arg(long)]
    pub claude: Option<PathBuf>,
    /// Where each session's workspace (the CLI's default working folder, 0700) is made; never
    /// inside the agent directory (default: `<temp dir>/tollgate-workspaces-<uid>`).
    #[arg(long, env = "TOLLGATE_WORKSPACE_ROOT")]
    pub workspace_root: Option<PathBuf>,
    /// Pre-started CLIs kept waiting for the next segment: after a new session's segment, one for
    /// the next new session; after a call deferred to a tool step, one for the resume. Each costs
    /// an idle CLI's memory (~200+ MB) until used or expired; 0 starts none.
    #[arg(long, env = "TOLLGATE_WARM_CLIS", default_value_t = tollgate_worker::worker::DEFAULT_WARM_CLIS)]
    pub warm_clis: usize,
    /// How long a pre-started CLI waits for a segment before it is killed, in seconds.
    #[arg(long, env = "TOLLGATE_WARM_CLI_TTL_SECS", default_value_t = tollgate_worker::worker::DEFAULT_WARM_CLI_TTL.as_secs_f64())]
    pub warm_cli_ttl_secs: f64,
    /// The box the agent's CLI runs in.
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Run only sessions pinned to the agent's version (`--agent-name NAME@K`, or a locked
    /// `--agent`), never a new one: a Worker kept to finish what started on a previous version.
    #[arg(long)]
    pub pinned_only: bool,
}

/// Where the agent's CLIs run: each in a box of its own, or (explicitly) on the host.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// `bwrap`: every CLI and everything it starts runs in a bubblewrap box of its own (the
    /// default; the Worker refuses to start when it cannot make one). `none`: on the host as this
    /// user, reaching whatever this user can (a warning at start and on every segment, and
    /// `/healthz` and the web inbox say so).
    #[arg(long, env = "TOLLGATE_SANDBOX", value_enum, default_value_t = SandboxKind::Bwrap)]
    pub sandbox: SandboxKind,
    /// The user a root Worker's boxes run as, `UID[:GID]` (default 65534:65534, `nobody`). A Worker
    /// that is not root runs them as itself, in a user namespace.
    #[arg(long, env = "TOLLGATE_SANDBOX_USER", value_name = "UID[:GID]")]
    pub sandbox_user: Option<String>,
    /// The `bwrap` program (default: the first on `PATH`).
    #[arg(long, env = "TOLLGATE_BWRAP", value_name = "PATH")]
    pub bwrap: Option<PathBuf>,
    /// The box init (default: `tollgate-box` beside this executable).
    #[arg(long, env = "TOLLGATE_BOX_INIT", value_name = "PATH", hide = true)]
    pub box_init: Option<PathBuf>,
}

/// The values of `--sandbox`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SandboxKind {
    /// A bubblewrap box per CLI.
    Bwrap,
    /// No box.
    None,
}

impl SandboxArgs {
    /// The Worker's sandbox mode; for `bwrap`, after a trial box proved boxes can be made here.
    ///
    /// # Errors
    /// A bad `--sandbox-user`, or no box can be made (what is missing and how to fix it).
    pub fn mode(&self) -> anyhow::Result<tollgate_worker::worker::SandboxMode> {
        use tollgate_worker::worker::{BoxSettings, SandboxMode};
        if self.sandbox == SandboxKind::None {
            tracing::warn!(
                "--sandbox none: the agent's CLI and every command it runs are not boxed; they can read this \
                 user's files (the store, the agent folder), its processes' environment and every loopback service"
            );
            return Ok(SandboxMode::None);
        }
        let as_root = self.sandbox_user.as_deref().map(parse_user).transpose()?;
        // SAFETY: geteuid has no preconditions.
        let user = tollgate_box::BoxUser::for_worker(unsafe { libc::geteuid() }, as_root);
        let bwrap = tollgate_box::probe::find_bwrap(self.bwrap.as_deref()).map_err(refusal)?;
        let init = match &self.box_init {
            Some(path) => path.clone(),
            None => std::env::current_exe()
                .context("finding this executable (the box init sits beside it)")?
                .with_file_name("tollgate-box"),
        };
        tollgate_box::probe::check(&bwrap, &init, user).map_err(refusal)?;
        Ok(SandboxMode::Boxed(BoxSettings { bwrap, init, user }))
    }
}

/// A box that cannot be made stops the Worker, saying how to go on without one.
fn refusal(error: tollgate_box::probe::ProbeError) -> anyhow::Error {
    anyhow::anyhow!(
        "the agent's CLIs cannot be boxed: {error}\n(to run them on the host instead, as this user and reaching \
         whatever it can, pass --sandbox none)"
    )
}

/// `UID[:GID]`; the gid defaults to the uid.
fn parse_user(text: &str) -> anyhow::Result<(u32, u32)> {
    let (uid, gid) = text.split_once(':').unwrap_or((text, text));
    let number = |part: &str| {
        part.parse::<u32>().with_context(|| {
            format!("--sandbox-user {text:?}: expected UID or UID:GID as numbers, like 65534:65534")
        })
    };
    let (uid, gid) = (number(uid)?, number(gid)?);
    if uid == 0 || gid == 0 {
        anyhow::bail!("--sandbox-user {text:?}: the boxes' user must not be root");
    }
    Ok((uid, gid))
}

/// The store URL of `db`, or the SQLite file beside the agent.
pub fn db_url(db: Option<&str>, agent: &std::path::Path) -> String {
    db.map_or_else(|| format!("sqlite://{}", agent.join("tollgate.db").display()), str::to_owned)
}

fn secs(name: &str, value: f64) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("--{name} must be a positive number of seconds, not {value}"))
}

/// Builds the Worker of one agent from the options (`tollgate serve`); see [`build_all`].
///
/// # Errors
/// As [`build_all`], and more than one agent named.
pub async fn build(args: &WorkerArgs) -> anyhow::Result<(Worker, Arc<dyn tollgate_store::Store>)> {
    if args.agent_names.len() > 1 {
        anyhow::bail!("tollgate serve runs one agent; run several with `tollgate worker --agents a,b`");
    }
    let (mut workers, store) = build_all(args).await?;
    Ok((workers.remove(0), store))
}

/// Builds a Worker for each agent the options name, on one store (shared with `tollgate serve`). A
/// Worker that could not reach the model (no credential, no `ANTHROPIC_BASE_URL`) is refused
/// first, naming the variables.
///
/// # Errors
/// A bad option, an agent that does not load or is not in the store, the store or the CLI not
/// found.
pub async fn build_all(args: &WorkerArgs) -> anyhow::Result<(Vec<Worker>, Arc<dyn tollgate_store::Store>)> {
    tollgate_worker::proxy::Upstream::from_env().check()?;
    let lease = secs("lease-secs", args.lease_secs)?;
    let heartbeat = secs("heartbeat-secs", args.heartbeat_secs)?;
    if heartbeat >= lease {
        anyhow::bail!(
            "--heartbeat-secs ({}) must be shorter than --lease-secs ({})",
            args.heartbeat_secs,
            args.lease_secs
        );
    }
    let poll = secs("poll-secs", args.poll_secs)?;
    let warm_cli_ttl = secs("warm-cli-ttl-secs", args.warm_cli_ttl_secs)?;
    let drain = Duration::try_from_secs_f64(args.drain_secs).ok().with_context(|| {
        format!("--drain-secs must be zero or a positive number of seconds, not {}", args.drain_secs)
    })?;
    let sandbox_mode = args.sandbox.mode()?;
    let (agents, url, store) = match (&args.agent, args.agent_names.as_slice()) {
        (Some(dir), _) => {
            let agent = Agent::load(dir, Sandbox::new(SandboxConfig::default())?).await?;
            let url = db_url(args.db.as_deref(), agent.dir());
            let store =
                tollgate_store::open(&url).await.with_context(|| format!("opening the store {url}"))?;
            (vec![agent], url, store)
        }
        (None, specs) if !specs.is_empty() => {
            let url = args.db.clone().context("--agent-name needs --db")?;
            let store =
                tollgate_store::open(&url).await.with_context(|| format!("opening the store {url}"))?;
            let cache = args.bundle_cache.clone().unwrap_or_else(default_bundle_cache);
            let mut agents: Vec<Agent> = Vec::new();
            for spec in specs {
                let pulled = tollgate_worker::pull::pull(store.as_ref(), spec, &cache).await?;
                tracing::info!(agent = %pulled.version.name, version = pulled.version.version,
                    digest = %pulled.version.digest, folder = %pulled.dir.display(), fetched = pulled.fetched,
                    "pulled the agent from the store");
                if agents.iter().any(|a| a.name() == pulled.version.name) {
                    anyhow::bail!(
                        "--agents names `{}` twice; a process serves one version of an agent",
                        pulled.version.name
                    );
                }
                agents.push(Agent::load(&pulled.dir, Sandbox::new(SandboxConfig::default())?).await?);
            }
            (agents, url, store)
        }
        (None, _) => anyhow::bail!("name the agent: --agent DIR or --agent-name NAME"),
    };
    let workspace_root =
        args.workspace_root.clone().unwrap_or_else(tollgate_worker::worker::default_workspace_root);
    let sqlite_file =
        url.strip_prefix("sqlite://").map(|rest| PathBuf::from(rest.split('?').next().unwrap_or(rest)));
    for agent in &agents {
        tollgate_worker::worker::workspace::check_root(&workspace_root, agent.dir(), sqlite_file.as_deref())
            .map_err(anyhow::Error::msg)?;
    }
    let locator = CliLocator { configured: args.claude.clone(), ..CliLocator::default() };
    let cli = CliBinary::locate(&locator)
        .await
        .context("finding the claude CLI (set --claude or TOLLGATE_CLAUDE_CLI)")?;
    let mut config = WorkerConfig {
        concurrency: args.concurrency.max(1),
        lease,
        heartbeat,
        poll,
        drain,
        workspace_root: Some(workspace_root),
        warm_clis: args.warm_clis,
        warm_cli_ttl,
        sandbox: sandbox_mode,
        pinned_only: args.pinned_only,
        ..WorkerConfig::default()
    };
    if let Some(id) = &args.worker_id {
        config.worker_id.clone_from(id);
    }
    let several = agents.len() > 1;
    let workers = agents
        .into_iter()
        .map(|agent| {
            let mut config = config.clone();
            if several {
                // Each agent's claims under a name of their own.
                config.worker_id = format!("{}-{}", config.worker_id, agent.name());
            }
            Worker::new(store.clone(), Arc::new(agent), cli.clone(), config)
        })
        .collect();
    Ok((workers, store))
}

/// `$XDG_CACHE_HOME/tollgate/bundles`, else `~/.cache/tollgate/bundles`, else a folder in the
/// temp dir of this user.
fn default_bundle_cache() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|home| PathBuf::from(home).join(".cache"))
        })
        .unwrap_or_else(|| std::env::temp_dir().join(format!("tollgate-cache-{}", current_uid())));
    base.join("tollgate").join("bundles")
}

/// This process's uid.
fn current_uid() -> u32 {
    // SAFETY: getuid(2) cannot fail and has no memory effects.
    unsafe { libc::getuid() }
}

/// Runs `tollgate worker`.
pub async fn run(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let (workers, _store) = build_all(&args).await?;
    for worker in &workers {
        eprintln!(
            "tollgate worker ready (agent {} from {}, {}, store {}, sandbox {})",
            worker.agent().name(),
            worker.agent().dir().display(),
            super::serve::agent_note(worker.agent()),
            db_url(args.db.as_deref(), worker.agent().dir()),
            worker.sandbox().name()
        );
    }
    let signals = StopSignals::listen();
    let mut runs = tokio::task::JoinSet::new();
    for worker in workers {
        let (stop, hurry) = (signals.nth(1), signals.nth(2));
        runs.spawn(async move { worker.run_until(stop, hurry).await });
    }
    while let Some(ended) = runs.join_next().await {
        ended.context("a Worker's task panicked")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `worker` in a task of its own until `stop` turns true: the Worker in the process of
/// `tollgate mcp` and `tollgate acp`, stopped when their client goes away.
pub fn spawn_until(
    worker: tollgate_worker::worker::Worker,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        worker
            .run(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_user_is_two_numbers_and_never_root() {
        assert_eq!(parse_user("1234").unwrap(), (1234, 1234));
        assert_eq!(parse_user("1234:99").unwrap(), (1234, 99));
        assert!(parse_user("nobody").unwrap_err().to_string().contains("expected UID or UID:GID"));
        assert!(parse_user("0:5").unwrap_err().to_string().contains("must not be root"));
    }
}
