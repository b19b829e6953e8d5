//! `tollgate dev [--agent DIR]`: a tool author's loop around `tollgate serve`. It builds the
//! agent's tool sources (`tollgate build`), starts the scripted mock model on loopback when no
//! model credential is set, runs `tollgate serve` on the agent (a child process, with a fresh
//! admin token it prints with the inbox's address), and then watches:
//! - a changed tool source under `DIR/src/` is rebuilt into `DIR/tools/`, which an unlocked
//!   agent's Worker reads at every step: the next tool call runs the new build;
//! - a changed `tollgate.toml` restarts the server on the same address: new sessions get the new
//!   configuration, and the sessions with a turn in progress keep the one they started under. The
//!   previous configuration (with the tools as they are) is locked, pushed into the store as the
//!   agent's next version, those sessions are pinned to it, and a Worker of that version runs them,
//!   and only them (`--pinned-only`: a new session is never its), while dev runs
//!   (`keep_running_sessions`). Idle sessions take the new configuration.
//!
//! Each change is said on stdout as it is applied. The server's own log goes to stderr.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};
use clap::Args;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Options of `tollgate dev`.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// The agent folder (its tool sources in DIR/src/, built into DIR/tools/).
    #[arg(long, default_value = ".")]
    agent: PathBuf,
    /// Where the server listens.
    #[arg(long, default_value = "127.0.0.1:7460")]
    listen: String,
    /// The store (default: `serve`'s, beside the agent).
    #[arg(long)]
    db: Option<String>,
    /// How often the sources and `tollgate.toml` are looked at, in milliseconds.
    #[arg(long, default_value_t = 500)]
    poll_ms: u64,
}

/// What the watch compares: each watched file's length and modification time.
type Stamps = BTreeMap<PathBuf, (u64, Option<SystemTime>)>;

/// The files under `dir` (build outputs and caches left out).
fn stamps(dir: &Path, into: &mut Stamps) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if matches!(name.to_str(), Some("target" | "node_modules" | "__pycache__" | ".git")) {
            continue;
        }
        match entry.metadata() {
            Ok(meta) if meta.is_dir() => stamps(&path, into),
            Ok(meta) => {
                into.insert(path, (meta.len(), meta.modified().ok()));
            }
            Err(_) => {}
        }
    }
}

fn config_stamp(agent: &Path) -> Stamps {
    let mut out = Stamps::new();
    let path = agent.join("tollgate.toml");
    if let Ok(meta) = std::fs::metadata(&path) {
        out.insert(path, (meta.len(), meta.modified().ok()));
    }
    out
}

fn source_stamps(agent: &Path) -> Stamps {
    let mut out = Stamps::new();
    stamps(&agent.join("src"), &mut out);
    out
}

/// A running `tollgate serve`.
struct Server {
    child: tokio::process::Child,
    url: String,
}

impl Server {
    /// Starts `tollgate serve` and waits until it says where it listens; its log goes on to
    /// stderr.
    async fn start(
        args: &DevArgs,
        listen: &str,
        token: &str,
        model: &[(String, String)],
    ) -> anyhow::Result<Server> {
        let mut command =
            tokio::process::Command::new(std::env::current_exe().context("this program's path")?);
        command.args(["serve", "--agent"]).arg(&args.agent).args(["--listen", listen]);
        if let Some(db) = &args.db {
            command.args(["--db", db]);
        }
        command
            .env("TOLLGATE_TOKEN", token)
            .envs(model.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Killed with dev, even by SIGKILL: a server left behind holds the port and runs the
        // store's sessions alone.
        let mut child = tollgate_claude::transport::spawn_dying_with_this_process(command)
            .context("starting tollgate serve")?;
        let mut lines = BufReader::new(child.stderr.take().context("its stderr")?).lines();
        let url = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("{line}");
                if let Some(rest) = line.strip_prefix("tollgate serving on ") {
                    return rest.split_whitespace().next().map(str::to_owned);
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        let Some(url) = url else {
            let status = child.wait().await.ok();
            bail!("tollgate serve did not start ({status:?}); its log is above");
        };
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("{line}");
            }
        });
        Ok(Server { child, url })
    }

    /// SIGTERM, then waits for it to drain and exit.
    async fn stop(mut self) {
        if let Some(pid) = self.child.id().and_then(|pid| i32::try_from(pid).ok()) {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }
}

/// Builds the agent's tool sources, when it has any (`tollgate build`); says what failed instead
/// of stopping.
async fn build(agent: &Path, out: &mut impl Write) -> anyhow::Result<bool> {
    if !agent.join("src").is_dir() {
        return Ok(true);
    }
    match super::scaffold::build_agent(agent).await {
        Ok(code) => Ok(code == ExitCode::SUCCESS),
        Err(error) => {
            writeln!(out, "the build failed: {error:#}\nthe tools built before stay in place")?;
            Ok(false)
        }
    }
}

/// What keeps the sessions of earlier configurations running: a Worker of each pinned version, and
/// the folders they were pushed from. Dropped (killed, removed) when dev exits.
#[derive(Default)]
struct Kept {
    workers: Vec<tokio::process::Child>,
    dirs: Vec<tempfile::TempDir>,
}

impl Kept {
    /// SIGTERM to each Worker, then waits for them to drain and exit; then removes the folders.
    async fn stop(mut self) {
        for worker in &mut self.workers {
            if let Some(pid) = worker.id().and_then(|pid| i32::try_from(pid).ok()) {
                // SAFETY: kill(2) on our own child's pid.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        for worker in &mut self.workers {
            let _ = tokio::time::timeout(Duration::from_secs(30), worker.wait()).await;
        }
    }
}

/// Pins the sessions of `agent` with a turn in progress to its previous configuration `old_toml`
/// (the server is stopped, so no step of theirs is claimed): the folder with that `tollgate.toml`
/// is locked and pushed as a version, a Worker of it starts, and each session is upgraded to its
/// digest. `Ok(None)` when no session has a turn in progress; else what was kept.
///
/// # Errors
/// The previous configuration does not load, the store failed, or its Worker did not register.
async fn keep_running_sessions(
    agent: &Path,
    db: &str,
    store: &dyn tollgate_store::Store,
    old_toml: &str,
    model: &[(String, String)],
    kept: &mut Kept,
) -> anyhow::Result<Option<String>> {
    use tollgate_worker::agent::{Agent, LockUse};
    use tollgate_worker::bundle::{Bundle, Lock};
    let mut running = Vec::new();
    for status in ["running", "awaiting_approval"] {
        running.extend(store.list_sessions(Some(status), "", 10_000).await?);
    }
    if running.is_empty() {
        // Nothing to keep: no copy, no load, no version.
        return Ok(None);
    }
    let bundle = Bundle::read(agent)?;
    let folder = agent.file_name().context("the agent folder's name")?;
    let dir = tempfile::Builder::new().prefix("tollgate-dev-").tempdir()?;
    let snapshot = dir.path().join(folder);
    for path in bundle.files.keys() {
        let to = snapshot.join(path);
        std::fs::create_dir_all(to.parent().context("a file's folder")?)?;
        std::fs::copy(agent.join(path), &to).with_context(|| format!("copying {path}"))?;
    }
    std::fs::write(snapshot.join("tollgate.toml"), old_toml)?;
    let sandbox = tollgate_sandbox::Sandbox::new(tollgate_sandbox::SandboxConfig::default())?;
    let previous = Agent::load_with(&snapshot, sandbox, LockUse::Ignore)
        .await
        .context("the previous tollgate.toml does not load")?;
    // It is locked and pushed below: every component must load.
    previous.every_tool().await.context("the previous tollgate.toml does not load")?;
    let name = previous.name().to_owned();
    let ours: Vec<String> = running
        .into_iter()
        .filter(|s| {
            s.agent_name.as_deref() == Some(name.as_str()) && !s.agent.as_ref().is_some_and(|a| a.pinned)
        })
        .map(|s| s.session_id)
        .collect();
    if ours.is_empty() {
        return Ok(None);
    }
    let locked = Bundle::read(&snapshot)?;
    Lock::of(&locked).write(&snapshot)?;
    let digest = locked.digest.clone();
    let pushed = tollgate_worker::pull::push(store, &snapshot, &name, &digest, "tollgate:dev").await?;
    let mut worker = tokio::process::Command::new(std::env::current_exe().context("this program's path")?);
    worker
        .args(["worker", "--agent-name", &format!("{name}@{}", pushed.version), "--db", db])
        .arg("--bundle-cache")
        .arg(dir.path().join("cache"))
        .args(["--worker-id", &format!("dev-{name}@{}", pushed.version), "--poll-secs", "0.5"])
        // The kept sessions only: a new session is the new configuration's.
        .arg("--pinned-only")
        .envs(model.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true);
    // Killed with dev, even by SIGKILL: it must not go on running sessions of a dev store alone.
    let worker = tollgate_claude::transport::spawn_dying_with_this_process(worker)
        .context("starting the previous configuration's Worker")?;
    kept.workers.push(worker);
    kept.dirs.push(dir);
    // An upgrade pins only to a digest a Worker registered, locked.
    let registered = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let known = store.agents().known_agents().await?;
            if known.iter().any(|k| k.name == name && k.digest == digest && k.locked) {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    registered.context("the previous configuration's Worker did not register within 60 s")??;
    let mut pinned = 0;
    let mut refused = Vec::new();
    for session in &ours {
        match store.upgrade_session(session, &digest).await {
            Ok(_) => pinned += 1,
            Err(error) => refused.push(format!("{session}: {error}")),
        }
    }
    let mut said = format!(
        "kept {pinned} session(s) with a turn in progress on the previous tollgate.toml ({name}@{}, run by a \
         Worker while dev runs)",
        pushed.version
    );
    if !refused.is_empty() {
        said.push_str(&format!("; these take the new one: {}", refused.join("; ")));
    }
    Ok(Some(said))
}

/// Runs `tollgate dev`.
pub async fn run(args: DevArgs) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout();
    if !args.agent.is_dir() {
        bail!(
            "the agent folder {} does not exist (`tollgate new tool NAME --lang … --agent DIR` makes one)",
            args.agent.display()
        );
    }
    build(&args.agent, &mut out).await?;
    // The model: Claude when a credential is set, else the scripted mock on loopback.
    let offline = matches!(
        tollgate_worker::proxy::Upstream::from_env().credential,
        tollgate_worker::proxy::Credential::None
    );
    let (_mock, model) = if offline {
        let mock = super::mock::MockProcess::start(&super::mock::MockOptions::default(), |_| {})
            .await
            .context("starting the mock model")?;
        let env = vec![
            ("ANTHROPIC_BASE_URL".to_owned(), mock.base_url.clone()),
            ("ANTHROPIC_API_KEY".to_owned(), "tollgate-dev-mock".to_owned()),
        ];
        writeln!(
            out,
            "no model credential: the scripted mock model answers on {} (a message `say hello`, or `call TOOL {{json}}`)",
            mock.base_url
        )?;
        (Some(mock), env)
    } else {
        (None, Vec::new())
    };
    let token = tollgate_api::auth::new_token().context("making a token")?;
    let canonical = args.agent.canonicalize().with_context(|| args.agent.display().to_string())?;
    let db = super::worker::db_url(args.db.as_deref(), &canonical);
    let mut old_toml = std::fs::read_to_string(canonical.join("tollgate.toml")).unwrap_or_default();
    let server = Server::start(&args, &args.listen, &token, &model).await?;
    let store = tollgate_store::open(&db).await.with_context(|| format!("opening the store {db}"))?;
    let mut kept = Kept::default();
    // A restart takes the same address, even when the first was `:0`.
    let listen = server.url.trim_start_matches("http://").trim_start_matches("https://").to_owned();
    writeln!(out, "inbox: {}/ (sign in with the token {token}, this server's only)", server.url)?;
    writeln!(out, "watching {} (src/ and tollgate.toml)", args.agent.display())?;
    out.flush()?;
    let mut server = Some(server);
    let (mut config, mut sources) = (config_stamp(&args.agent), source_stamps(&args.agent));
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = &mut interrupted => break,
            _ = terminate.recv() => break,
            () = tokio::time::sleep(Duration::from_millis(args.poll_ms)) => {}
        }
        let now = source_stamps(&args.agent);
        if now != sources {
            let changed = changed_tools(&args.agent, &sources, &now);
            writeln!(out, "sources changed: rebuilding {changed}")?;
            if build(&args.agent, &mut out).await? {
                writeln!(out, "rebuilt {changed}: the next tool call runs the new build")?;
            }
            sources = source_stamps(&args.agent);
            out.flush()?;
        }
        let now = config_stamp(&args.agent);
        if now != config {
            config = now;
            writeln!(
                out,
                "tollgate.toml changed: restarting the server (sessions are in the store and go on)"
            )?;
            out.flush()?;
            if let Some(old) = server.take() {
                old.stop().await;
            }
            match keep_running_sessions(&canonical, &db, store.as_ref(), &old_toml, &model, &mut kept).await {
                Ok(Some(said)) => writeln!(out, "{said}")?,
                Ok(None) => {}
                Err(err) => writeln!(out, "the sessions in progress take the new tollgate.toml: {err:#}")?,
            }
            match Server::start(&args, &listen, &token, &model).await {
                Ok(started) => {
                    old_toml = std::fs::read_to_string(canonical.join("tollgate.toml")).unwrap_or_default();
                    writeln!(
                        out,
                        "reloaded tollgate.toml: new sessions run under it; inbox: {}/",
                        started.url
                    )?;
                    server = Some(started);
                }
                Err(err) => {
                    writeln!(
                        out,
                        "the server did not start with the new tollgate.toml: {err:#}; fix it and save again"
                    )?;
                }
            }
            out.flush()?;
        }
    }
    if let Some(server) = server {
        server.stop().await;
    }
    kept.stop().await;
    Ok(ExitCode::SUCCESS)
}

/// The tool sources (folders of `src/`) whose files differ between `before` and `after`.
fn changed_tools(agent: &Path, before: &Stamps, after: &Stamps) -> String {
    let src = agent.join("src");
    let mut names: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|path| before.get(*path) != after.get(*path))
        .filter_map(|path| {
            path.strip_prefix(&src).ok()?.components().next()?.as_os_str().to_str().map(str::to_owned)
        })
        .collect();
    names.sort();
    names.dedup();
    names.join(", ")
}
