//! How a segment starts the CLI: the argv, the environment, and the per-segment scratch
//! directories with the resume file (docs/PROTOCOL.md, "Launch" and "Resume").
//!
//! Read [`argv`], [`apply_options`] and [`ScratchDirs`]. [`argv`] is pure: the host's own flags;
//! [`apply_options`] is the one mapping of an agent's options (checked by
//! [`tollgate_engine::options::check_options`], so none of them replaces a host flag) to CLI
//! flags and environment. [`ScratchDirs::create`] makes
//! `<root>/tollgate-segment-<pid>-XXXXXX/{home,config,tmp}` (mode `0700`: transcripts are private)
//! and, for a resume, writes the stored transcript to
//! `config/projects/<key(realpath cwd)>/<session>.jsonl` (mode `0600`), one compact line each,
//! byte for byte as the CLI mirrored them ([`write_resume_file`]; text the store keeps in that
//! form already is copied, not parsed). Dropping [`ScratchDirs`]
//! removes everything; [`remove_stale_scratch`] removes what a killed process left behind.
//!
//! ```
//! use tollgate_claude::launch::{ArgvOptions, argv};
//!
//! let args = argv(&ArgvOptions { server_name: "tools", resume: Some("s-1"), ..ArgvOptions::default() });
//! assert!(args.contains(&"--await-initialize".to_owned()));
//! assert!(args.contains(&"--resume=s-1".to_owned()));
//! assert!(args.contains(&r#"{"mcpServers":{"tools":{"type":"sdk","name":"tools"}}}"#.to_owned()));
//! ```
//!
//! # Caveats
//!
//! - `last-prompt` entries are left out of the resume file ([`ResumeText`] says why). The CLI
//!   writes a fresh one.
//! - The project key uses `realpath(cwd)`; a `cwd` that does not exist fails the setup.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;
use tollgate_engine::options::CheckedOptions;
use tollgate_protocol::ResumeText;

use crate::error::SegmentError;
use crate::project_key::project_key;
use crate::segment::SegmentSpec;

/// What [`argv`] needs. Defaults: server `tools`, no permission mode, no resume, `--setting-sources=`
/// (no settings files), no extra arguments, not parked.
#[derive(Debug, Clone)]
pub struct ArgvOptions<'a> {
    /// The sdk MCP server's name.
    pub server_name: &'a str,
    /// `--permission-mode`.
    pub permission_mode: Option<&'a str>,
    /// `--resume=<session>`.
    pub resume: Option<&'a str>,
    /// `--setting-sources=<a,b>`; `Some(&[])` reads no settings files, `None` leaves the flag out.
    pub setting_sources: Option<&'a [String]>,
    /// Appended as given.
    pub extra: &'a [String],
    /// A parked spare's launch (`--await-claim`, see [`crate::pool`]): the sdk MCP server is not
    /// declared in the argv (it connects at the claim, answered by the segment's server) and
    /// `--await-claim` is added. Cannot be combined with `resume` (the CLI refuses it).
    pub parked: bool,
}

impl Default for ArgvOptions<'_> {
    fn default() -> Self {
        ArgvOptions {
            server_name: "tools",
            permission_mode: None,
            resume: None,
            setting_sources: Some(&[]),
            extra: &[],
            parked: false,
        }
    }
}

/// The CLI's arguments (docs/PROTOCOL.md, "Launch").
pub fn argv(options: &ArgvOptions<'_>) -> Vec<String> {
    // Written by hand to keep the key order the CLI was probed with (`serde_json` would sort them).
    let name = serde_json::Value::from(options.server_name).to_string();
    let server = format!(r#"{{"mcpServers":{{{name}:{{"type":"sdk","name":{name}}}}}}}"#);
    let mut args: Vec<String> = [
        "--output-format",
        "stream-json",
        "--verbose",
        "--input-format",
        "stream-json",
        "--permission-prompt-tool=stdio",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    if options.parked {
        args.push("--await-claim".to_owned());
    } else {
        args.extend(["--mcp-config".to_owned(), server]);
    }
    args.extend(["--include-partial-messages", "--session-mirror", "--await-initialize"].map(str::to_owned));
    if let Some(sources) = options.setting_sources {
        args.push(format!("--setting-sources={}", sources.join(",")));
    }
    if let Some(mode) = options.permission_mode {
        args.push(format!("--permission-mode={mode}"));
    }
    if let Some(session) = options.resume {
        args.push(format!("--resume={session}"));
    }
    args.extend(options.extra.iter().cloned());
    args
}

/// Sets the agent's `options` on `spec`: `permission_mode` and `setting_sources` (placed by
/// [`argv`]), the other options as flags appended to `extra_args` in this order — `--model`,
/// `--system-prompt`, `--append-system-prompt`, `--tools`, `--disallowedTools`, `--max-turns`,
/// `--max-budget-usd`, then each `extra` flag (`--flag=value`; `true` or `null`: `--flag`;
/// `false`: left out) — and `env` after the variables already set, so it wins. The external MCP
/// servers go to [`SegmentSpec::mcp_servers`], sent in `initialize`.
pub fn apply_options(spec: &mut SegmentSpec, options: &CheckedOptions) {
    spec.permission_mode.clone_from(&options.permission_mode);
    spec.setting_sources = Some(options.setting_sources.clone());
    let args = &mut spec.extra_args;
    if let Some(model) = &options.model {
        args.push(format!("--model={model}"));
    }
    if let Some(prompt) = &options.system_prompt {
        args.extend(["--system-prompt".to_owned(), prompt.clone()]);
    }
    if let Some(prompt) = &options.append_system_prompt {
        args.extend(["--append-system-prompt".to_owned(), prompt.clone()]);
    }
    if let Some(tools) = &options.tools {
        args.extend(["--tools".to_owned(), tools.join(",")]);
    }
    if !options.disallowed_tools.is_empty() {
        args.extend(["--disallowedTools".to_owned(), options.disallowed_tools.join(",")]);
    }
    if let Some(turns) = options.max_turns {
        args.push(format!("--max-turns={turns}"));
    }
    if let Some(budget) = options.max_budget_usd {
        args.push(format!("--max-budget-usd={budget}"));
    }
    // In `initialize`, not the argv: every process of the CLI's user can read its argv.
    spec.mcp_servers = options.mcp_servers.iter().map(|s| (s.name.clone(), s.config.clone())).collect();
    let args = &mut spec.extra_args;
    if let Some(Value::Object(extra)) = &options.extra {
        for (flag, value) in extra {
            match value {
                Value::Bool(true) | Value::Null => args.push(format!("--{flag}")),
                Value::Bool(false) => {}
                Value::String(text) => args.push(format!("--{flag}={text}")),
                other => args.push(format!("--{flag}={other}")),
            }
        }
    }
    for (name, value) in &options.env {
        spec.env.push((name.into(), value.into()));
    }
}

/// Moves the system prompts [`apply_options`] put in `extra_args` (`--system-prompt <text>`,
/// `--append-system-prompt <text>`) to the `initialize` request ([`SegmentSpec::system_prompt`],
/// [`SegmentSpec::append_system_prompt`]), as the TypeScript SDK sends them. The model's request
/// is the same (observed with CLI 2.1.328); the argv no longer holds text that differs per
/// session, so a CLI started before its session is known can serve it ([`crate::pool`]).
pub fn prompts_to_initialize(spec: &mut SegmentSpec) {
    let mut kept = Vec::with_capacity(spec.extra_args.len());
    let mut args = std::mem::take(&mut spec.extra_args).into_iter();
    while let Some(arg) = args.next() {
        let slot = match arg.as_str() {
            "--system-prompt" => &mut spec.system_prompt,
            "--append-system-prompt" => &mut spec.append_system_prompt,
            _ => {
                kept.push(arg);
                continue;
            }
        };
        match args.next() {
            Some(text) if slot.is_none() => *slot = Some(text),
            // A second one stays a flag, as given.
            Some(text) => kept.extend([arg, text]),
            None => kept.push(arg),
        }
    }
    spec.extra_args = kept;
}

/// A segment's private directories: `home`, `config` (`CLAUDE_CONFIG_DIR`) and `tmp` (`TMPDIR`),
/// or for a boxed CLI its box's host directory ([`tollgate_box::BoxDir`]: the box has its own
/// `HOME`, config and `/tmp` inside, and [`ScratchDirs::config`] is where files for its config
/// folder go). Removed on drop.
#[derive(Debug)]
pub struct ScratchDirs {
    // Declared first: its egress socket is served until it goes.
    boxed: Option<tollgate_box::BoxDir>,
    root: tempfile::TempDir,
}

impl ScratchDirs {
    /// Makes the directories under `parent` (the system temp dir when `None`).
    ///
    /// # Errors
    ///
    /// [`SegmentError::Setup`] when a directory cannot be made.
    pub fn create(parent: Option<&Path>) -> Result<ScratchDirs, SegmentError> {
        Self::create_named(parent, SCRATCH_PREFIX)
    }

    /// [`ScratchDirs::create`] for a pre-started CLI ([`crate::pool`]): the root is
    /// `tollgate-warm-<pid>-XXXXXX` ([`WARM_SCRATCH_PREFIX`]), so a waiting CLI's directories are
    /// told from a segment's; [`remove_stale_scratch`] removes both kinds.
    ///
    /// # Errors
    ///
    /// [`SegmentError::Setup`] when a directory cannot be made.
    pub fn create_warm(parent: Option<&Path>) -> Result<ScratchDirs, SegmentError> {
        Self::create_named(parent, WARM_SCRATCH_PREFIX)
    }

    fn create_named(parent: Option<&Path>, prefix: &str) -> Result<ScratchDirs, SegmentError> {
        let parent = parent.map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
        let root = tempfile::Builder::new()
            .prefix(&format!("{prefix}{}-", std::process::id()))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&parent)
            .map_err(|source| SegmentError::Setup { path: parent.clone(), source })?;
        let dirs = ScratchDirs { boxed: None, root };
        for dir in [dirs.home(), dirs.config(), dirs.tmp()] {
            private_dir().create(&dir).map_err(|source| SegmentError::Setup { path: dir.clone(), source })?;
        }
        Ok(dirs)
    }

    /// The directories of a segment (`warm`: a pre-started CLI's) of `spec`: a box's host
    /// directory when `spec` has a [`SegmentSpec::sandbox`], else [`ScratchDirs::create`]'s.
    ///
    /// # Errors
    ///
    /// [`SegmentError::Setup`] when a directory cannot be made.
    pub fn for_spec(spec: &SegmentSpec, warm: bool) -> Result<ScratchDirs, SegmentError> {
        let prefix = if warm { WARM_SCRATCH_PREFIX } else { SCRATCH_PREFIX };
        let Some(sandbox) = &spec.sandbox else {
            return Self::create_named(spec.scratch_parent.as_deref(), prefix);
        };
        let parent = spec.scratch_parent.clone().unwrap_or_else(std::env::temp_dir);
        let root = tempfile::Builder::new()
            .prefix(&format!("{prefix}{}-", std::process::id()))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&parent)
            .map_err(|source| SegmentError::Setup { path: parent.clone(), source })?;
        let name = root.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let boxed =
            tollgate_box::BoxDir::create(root.path(), &sandbox.config, &name, spec.cli_reads_settings())
                .map_err(|source| SegmentError::Setup { path: root.path().to_path_buf(), source })?;
        Ok(ScratchDirs { boxed: Some(boxed), root })
    }

    /// The box's host directory, for a boxed CLI.
    pub fn boxed(&self) -> Option<&tollgate_box::BoxDir> {
        self.boxed.as_ref()
    }

    /// The segment's root directory.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// `HOME`.
    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// `CLAUDE_CONFIG_DIR`, or for a boxed CLI the host folder copied into it.
    pub fn config(&self) -> PathBuf {
        match &self.boxed {
            Some(boxed) => boxed.config_in(),
            None => self.root.path().join("config"),
        }
    }

    /// `TMPDIR`.
    pub fn tmp(&self) -> PathBuf {
        self.root.path().join("tmp")
    }
}

/// How every segment's root directory name starts; the creating process's pid follows.
pub const SCRATCH_PREFIX: &str = "tollgate-segment-";

/// How a pre-started CLI's root directory name starts; the creating process's pid follows.
pub const WARM_SCRATCH_PREFIX: &str = "tollgate-warm-";

/// How the folder of a Worker's model proxy socket starts; the Worker's pid follows.
pub const RUN_PREFIX: &str = "tollgate-run-";

/// A directory only its owner can enter (`0700`).
fn private_dir() -> std::fs::DirBuilder {
    let mut builder = std::fs::DirBuilder::new();
    builder.mode(0o700);
    builder
}

/// Removes the scratch directories that dead processes left under `parent` (the system temp
/// dir when `None`): a Worker killed by `SIGKILL` (or a power cut) cannot remove its own, and they
/// hold transcripts. A directory is removed only when its name is `tollgate-segment-<pid>-…` (or
/// a pre-started CLI's `tollgate-warm-<pid>-…`, the `/etc` its boxes shared,
/// `tollgate-box-etc-<pid>-…`, or its model proxy's socket folder, `tollgate-run-<pid>-…`), it
/// is this user's (or `boxes`', the user a root Worker gives its boxes' folders), and no process
/// `<pid>` is alive; a directory of a live process (another Worker, or this one) is left alone.
/// Returns how many were removed; a directory that cannot be removed is logged and skipped.
///
/// Before a directory goes, the processes its dead Worker left running are killed (those of this
/// user or of `boxes`):
///
/// - a tool process the CLI started (a `Bash` command) is in its own process group and outlives
///   the CLI, which dies with its Worker. It is found by its environment, which points into the
///   directory (`HOME`, `TMPDIR`, `CLAUDE_CONFIG_DIR` are inherited from the CLI);
/// - a box the Worker died while starting: `bwrap`'s child waits for its parent to write its
///   user namespace's maps, forever once that parent died with the Worker, and it has no
///   parent-death signal of its own yet. It is found by its arguments, which name the folders
///   it binds (`<dir>/egress.sock`, `<dir>/model.sock`, `<dir>`).
///
/// # Caveats
///
/// A dead Worker's pid that a live process took over keeps its directories until that process
/// ends; directories of an older naming (`tollgate-segment-XXXXXX`, no pid) are not touched. A
/// tool process that cleared its environment is not found.
pub fn remove_stale_scratch(parent: Option<&Path>, boxes: Option<u32>) -> usize {
    let parent = parent.map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
    let Ok(entries) = std::fs::read_dir(&parent) else { return 0 };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = scratch_owner(&name.to_string_lossy()) else { continue };
        let Ok(meta) = entry.path().symlink_metadata() else { continue };
        let ours = meta.uid() == me || Some(meta.uid()) == boxes;
        if !meta.is_dir() || !ours || process_alive(pid) {
            continue;
        }
        let killed = kill_processes_under(&entry.path(), me, boxes);
        if killed > 0 {
            tracing::info!(path = %entry.path().display(), killed, "killed the processes a dead Worker left running");
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => removed += 1,
            Err(err) => {
                tracing::warn!(path = %entry.path().display(), %err, "a stale segment directory could not be removed")
            }
        }
    }
    removed
}

/// Kills (`SIGKILL`) the processes of user `me` or `boxes` that name `dir` in an argument
/// (`<dir>` or `<dir>/…`) or in an environment variable (`NAME=<dir>/…`); returns how many.
fn kill_processes_under(dir: &Path, me: u32, boxes: Option<u32>) -> usize {
    use std::os::unix::ffi::OsStrExt;
    let dir = dir.as_os_str().as_bytes();
    let under = |arg: &[u8]| arg.strip_prefix(dir).is_some_and(|rest| rest.is_empty() || rest[0] == b'/');
    let in_env = [b"=", dir, b"/"].concat();
    let Ok(processes) = std::fs::read_dir("/proc") else { return 0 };
    let mut killed = 0;
    for entry in processes.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<libc::pid_t>().ok()) else {
            continue;
        };
        let Some(uid) = entry.metadata().map(|m| m.uid()).ok() else { continue };
        if uid != me && Some(uid) != boxes {
            continue;
        }
        let read = |file: &str| std::fs::read(entry.path().join(file)).unwrap_or_default();
        let (argv, environ) = (read("cmdline"), read("environ"));
        let named = argv.split(|b| *b == 0).any(under)
            || environ
                .split(|b| *b == 0)
                .any(|var| var.windows(in_env.len()).any(|w| w == in_env.as_slice()));
        // SAFETY: kill(2) has no memory effects.
        if named && unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
            killed += 1;
        }
    }
    killed
}

/// The pid in a scratch directory's name `tollgate-segment-<pid>-<random>`.
fn scratch_owner(name: &str) -> Option<u32> {
    let rest = name
        .strip_prefix(SCRATCH_PREFIX)
        .or_else(|| name.strip_prefix(WARM_SCRATCH_PREFIX))
        .or_else(|| name.strip_prefix(RUN_PREFIX))
        .or_else(|| name.strip_prefix(tollgate_box::layout::SHARED_ETC_PREFIX))?;
    let (pid, random) = rest.split_once('-')?;
    if random.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok().filter(|pid| *pid > 0)
}

/// Whether process `pid` exists (a zombie counts until it is reaped).
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks for existence and permission.
    let sent = unsafe { libc::kill(pid, 0) };
    sent == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Writes `transcript` to `<config>/projects/<key(realpath cwd)>/<session>.jsonl` and returns
/// the file's path. What goes in is [`ResumeText`]'s rule (see the module docs).
///
/// # Errors
///
/// [`SegmentError::Setup`] when `cwd` cannot be resolved or the file cannot be written.
pub fn write_resume_file(
    config: &Path,
    cwd: &Path,
    session_id: &str,
    transcript: &ResumeText,
) -> Result<PathBuf, SegmentError> {
    let real = std::fs::canonicalize(cwd).map_err(setup(cwd))?;
    write_resume_file_for(config, &real, session_id, transcript)
}

/// The [`SegmentError::Setup`] of an I/O error at `path`.
fn setup(path: &Path) -> impl FnOnce(std::io::Error) -> SegmentError {
    let path = path.to_path_buf();
    move |source| SegmentError::Setup { path, source }
}

/// [`write_resume_file`] for a working directory `cli_cwd` given as the CLI sees it, not
/// resolved on this host (a box's `/workspace`).
///
/// # Errors
///
/// [`SegmentError::Setup`] when the file cannot be written.
pub fn write_resume_file_for(
    config: &Path,
    cli_cwd: &Path,
    session_id: &str,
    transcript: &ResumeText,
) -> Result<PathBuf, SegmentError> {
    let dir = config.join("projects").join(project_key(&cli_cwd.to_string_lossy()));
    private_dir().recursive(true).create(&dir).map_err(setup(&dir))?;
    let file = dir.join(format!("{session_id}.jsonl"));
    if transcript.not_compact() > 0 {
        tracing::warn!(
            entries = transcript.not_compact(),
            "stored transcript entries are not compact JSON; the CLI may re-run a finished call"
        );
    }
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&file)
        .map_err(setup(&file))?;
    for block in transcript.blocks() {
        out.write_all(block.as_bytes()).map_err(setup(&file))?;
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The argv, one argument a line, as the snapshots hold it.
    fn lines(args: &[String]) -> String {
        args.join("\n")
    }

    #[test]
    fn the_argv_of_a_fresh_segment() {
        insta::assert_snapshot!(lines(&argv(&ArgvOptions::default())));
    }

    #[test]
    fn the_argv_of_a_resume_with_a_permission_mode_settings_and_extra_flags() {
        let sources = ["project".to_owned(), "local".to_owned()];
        let extra = ["--model=claude-sonnet-4-5".to_owned()];
        insta::assert_snapshot!(lines(&argv(&ArgvOptions {
            server_name: "tools \"one\"",
            permission_mode: Some("dontAsk"),
            resume: Some("s-1"),
            setting_sources: Some(&sources),
            extra: &extra,
            parked: false,
        })));
    }

    #[test]
    fn the_argv_of_a_parked_spare() {
        insta::assert_snapshot!(lines(&argv(&ArgvOptions { parked: true, ..ArgvOptions::default() })));
    }

    /// Every flag the host writes into argv is one the options' `extra` may not set: a flag that
    /// `extra` repeats would replace the host's (the CLI takes the last one).
    #[test]
    fn every_flag_the_host_writes_is_owned_so_extra_cannot_replace_it() {
        let sources = ["project".to_owned()];
        let everything = |parked: bool| {
            argv(&ArgvOptions {
                parked,
                resume: (!parked).then_some("s-1"),
                setting_sources: Some(&sources),
                permission_mode: Some("dontAsk"),
                ..ArgvOptions::default()
            })
        };
        let written: Vec<String> = [everything(false), everything(true)]
            .concat()
            .iter()
            .filter_map(|arg| arg.strip_prefix("--"))
            .map(|flag| flag.split('=').next().unwrap_or(flag).to_owned())
            .collect();
        assert!(written.len() > 10, "{written:?}");
        for flag in &written {
            assert!(
                tollgate_engine::options::OWNED_FLAGS.contains(&flag.as_str()),
                "argv writes --{flag}, which options `extra` could set too: add it to OWNED_FLAGS"
            );
        }
    }

    #[test]
    fn a_parked_launch_awaits_its_claim_and_leaves_the_sdk_server_to_it() {
        let normal = argv(&ArgvOptions::default());
        let parked = argv(&ArgvOptions { parked: true, ..ArgvOptions::default() });
        assert!(
            parked.contains(&"--await-claim".to_owned()) && !normal.contains(&"--await-claim".to_owned())
        );
        assert!(!parked.contains(&"--mcp-config".to_owned()), "{parked:?}");
        let rest: Vec<&String> =
            normal.iter().filter(|a| *a != "--mcp-config" && !a.contains("\"type\":\"sdk\"")).collect();
        assert_eq!(
            rest,
            parked.iter().filter(|a| *a != "--await-claim").collect::<Vec<_>>(),
            "nothing else differs"
        );
    }

    fn checked(options: serde_json::Value) -> CheckedOptions {
        tollgate_engine::options::check_options(serde_json::from_value(options).unwrap(), "tools").unwrap()
    }

    fn spec() -> SegmentSpec {
        let prompt = tollgate_protocol::UserPrompt::text("hi");
        SegmentSpec::with_start(crate::CliBinary::unchecked("claude"), "/tmp", crate::Start::Fresh { prompt })
    }

    #[test]
    fn options_become_cli_flags_and_environment() {
        let options = checked(serde_json::json!({
            "model": "claude-sonnet-4-5",
            "append_system_prompt": "Be brief.",
            "tools": ["Read", "Bash"],
            "disallowed_tools": ["WebFetch"],
            "permission_mode": "dontAsk",
            "max_turns": 5,
            "max_budget_usd": 1.5,
            "env": {"TZ": "UTC"},
            "extra": {"effort": "high", "strict-hooks": true, "off": false},
        }));
        let mut spec = spec();
        apply_options(&mut spec, &options);
        assert_eq!(
            spec.extra_args,
            [
                "--model=claude-sonnet-4-5",
                "--append-system-prompt",
                "Be brief.",
                "--tools",
                "Read,Bash",
                "--disallowedTools",
                "WebFetch",
                "--max-turns=5",
                "--max-budget-usd=1.5",
                "--effort=high",
                "--strict-hooks",
            ]
        );
        assert_eq!(spec.permission_mode.as_deref(), Some("dontAsk"));
        assert_eq!(spec.setting_sources, Some(vec![]));
        assert!(spec.env.contains(&("TZ".into(), "UTC".into())));
        let args = spec.args();
        assert!(args.contains(&"--permission-mode=dontAsk".to_owned()), "{args:?}");
        assert!(args.contains(&"--setting-sources=".to_owned()), "{args:?}");
        assert!(args.ends_with(&spec.extra_args), "the options come after the host's flags: {args:?}");
    }

    #[test]
    fn a_cli_reads_settings_files_when_its_options_say_so_and_only_then() {
        let reads = |options: serde_json::Value| {
            let mut spec = spec();
            apply_options(&mut spec, &checked(options));
            spec.cli_reads_settings()
        };
        assert!(!spec().cli_reads_settings(), "the default reads none");
        assert!(!reads(serde_json::json!({"model": "m", "extra": {"effort": "high"}})));
        assert!(reads(serde_json::json!({"setting_sources": ["project"]})));
        assert!(reads(serde_json::json!({"extra": {"plugin-dir": "/workspace/p"}})));
        assert!(reads(serde_json::json!({"extra": {"add-dir": "/workspace"}})));
        assert!(reads(serde_json::json!({"env": {"CLAUDE_CONFIG_DIR": "/workspace/c"}})));
        let mut unset = spec();
        unset.setting_sources = None;
        assert!(unset.cli_reads_settings(), "no flag: the CLI's default sources");
    }

    #[test]
    fn the_system_prompts_move_from_the_argv_to_initialize_and_the_rest_stays() {
        let options = checked(serde_json::json!({
            "model": "claude-sonnet-4-5",
            "system_prompt": "You are terse.",
            "append_system_prompt": "Session s-42.",
            "max_turns": 5,
        }));
        let mut spec = spec();
        apply_options(&mut spec, &options);
        prompts_to_initialize(&mut spec);
        assert_eq!(spec.extra_args, ["--model=claude-sonnet-4-5", "--max-turns=5"]);
        assert_eq!(spec.system_prompt.as_deref(), Some("You are terse."));
        assert_eq!(spec.append_system_prompt.as_deref(), Some("Session s-42."));
        let init = serde_json::to_value(spec.initialize()).unwrap();
        assert_eq!(init["systemPrompt"], "You are terse.");
        assert_eq!(init["appendSystemPrompt"], "Session s-42.");
        let mut none = self::spec();
        prompts_to_initialize(&mut none);
        let init = serde_json::to_value(none.initialize()).unwrap();
        assert!(init.get("systemPrompt").is_none() && init.get("appendSystemPrompt").is_none(), "{init}");
    }

    #[test]
    fn external_mcp_servers_go_in_initialize_and_never_in_the_argv() {
        let secret = "Bearer docs-token-7f3a";
        let options = checked(serde_json::json!({
            "mcp_servers": [{"name": "docs", "config": {"type": "http", "url": "http://docs", "headers": {"Authorization": secret}}}],
            "setting_sources": ["project"],
        }));
        let mut spec = spec();
        apply_options(&mut spec, &options);
        assert!(spec.extra_args.is_empty(), "{:?}", spec.extra_args);
        let args = spec.args();
        assert!(args.contains(&"--setting-sources=project".to_owned()), "{args:?}");
        assert_eq!(args.iter().filter(|a| *a == "--mcp-config").count(), 1, "only the host's: {args:?}");
        assert!(!args.iter().any(|a| a.contains(secret)), "{args:?}");
        for init in [spec.initialize(), spec.parked_initialize()] {
            let init = serde_json::to_value(init).unwrap();
            assert_eq!(init["mcpServers"]["docs"]["headers"]["Authorization"], secret, "{init}");
        }
    }

    #[test]
    fn the_resume_file_holds_the_entries_byte_for_byte_without_last_prompt() {
        let dirs = ScratchDirs::create(None).unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let entries = [
            r#"{"type":"user","uuid":"u1","message":{"role":"user","content":"caf\u00e9"}}"#,
            r#"{"type":"last-prompt","lastPrompt":"x","leafUuid":"u1"}"#,
            r#"{"type":"assistant","uuid":"a1"}"#,
        ];
        // Text kept in resume form (a stored chunk) first, then entries.
        let chunk = r#"{"type":"user","uuid":"u0"}"#.to_owned() + "\n";
        let mut transcript = ResumeText::from_blocks(vec![chunk.clone()]);
        transcript.push_entries(entries);
        let file = write_resume_file(&dirs.config(), cwd.path(), "s-1", &transcript).unwrap();
        let key = project_key(&std::fs::canonicalize(cwd.path()).unwrap().to_string_lossy());
        assert_eq!(file, dirs.config().join("projects").join(key).join("s-1.jsonl"));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            format!("{chunk}{}\n{}\n", entries[0], entries[2])
        );
        let root = dirs.root().to_path_buf();
        drop(dirs);
        assert!(!root.exists());
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn segment_directories_and_the_resume_file_are_private_and_named_by_pid() {
        let parent = tempfile::tempdir().unwrap();
        let dirs = ScratchDirs::create(Some(parent.path())).unwrap();
        let name = dirs.root().file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(scratch_owner(&name), Some(std::process::id()), "{name}");
        for dir in [dirs.root().to_path_buf(), dirs.home(), dirs.config(), dirs.tmp()] {
            assert_eq!(mode(&dir), 0o700, "{}", dir.display());
        }
        let cwd = tempfile::tempdir().unwrap();
        let mut transcript = ResumeText::default();
        transcript.push_entries([r#"{"type":"user","uuid":"u1"}"#]);
        let file = write_resume_file(&dirs.config(), cwd.path(), "s-1", &transcript).unwrap();
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(file.parent().unwrap()), 0o700);
    }

    #[test]
    fn only_scratch_directories_of_dead_processes_are_removed() {
        let parent = tempfile::tempdir().unwrap();
        let live = ScratchDirs::create(Some(parent.path())).unwrap();
        // A child that has exited and been reaped: its pid names no process (unless reused at once).
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        let dead = parent.path().join(format!("{SCRATCH_PREFIX}{dead_pid}-abc123"));
        std::fs::create_dir_all(dead.join("config/projects/x")).unwrap();
        std::fs::write(dead.join("config/projects/x/s.jsonl"), "{}\n").unwrap();
        let dead_warm = parent.path().join(format!("{WARM_SCRATCH_PREFIX}{dead_pid}-def456"));
        std::fs::create_dir_all(dead_warm.join("config")).unwrap();
        let dead_etc =
            parent.path().join(format!("{}{dead_pid}-1f2e", tollgate_box::layout::SHARED_ETC_PREFIX));
        std::fs::create_dir_all(dead_etc.join("claude-code")).unwrap();
        let dead_run = parent.path().join(format!("{RUN_PREFIX}{dead_pid}-9a8b"));
        std::fs::create_dir_all(&dead_run).unwrap();
        let live_warm = ScratchDirs::create_warm(Some(parent.path())).unwrap();
        let unrelated = [
            parent.path().join(format!("{SCRATCH_PREFIX}abc123")),
            parent.path().join(format!("{SCRATCH_PREFIX}{dead_pid}-")),
            parent.path().join("something-else"),
        ];
        for dir in &unrelated {
            std::fs::create_dir(dir).unwrap();
        }
        assert_eq!(remove_stale_scratch(Some(parent.path()), None), 4);
        assert!(!dead.exists(), "the dead process's directory is gone");
        assert!(!dead_warm.exists(), "and its warm CLI's");
        assert!(!dead_etc.exists(), "and its boxes' /etc");
        assert!(!dead_run.exists(), "and its model proxy's socket folder");
        assert!(live.root().exists(), "a live process's directory stays");
        assert!(live_warm.root().exists(), "and its warm CLI's");
        for dir in &unrelated {
            assert!(dir.exists(), "{} is not a scratch directory of a pid", dir.display());
        }
    }

    /// A child process, killed and reaped when dropped (a failed test leaves none behind).
    struct Reaped(std::process::Child);

    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// `tail -f FILE` with no environment: a process that names `FILE` only in its arguments,
    /// once it runs `tail` (before its exec it still shows the test's arguments).
    fn naming(file: &Path) -> Reaped {
        let child = Reaped(
            std::process::Command::new("tail")
                .arg("-f")
                .arg(file)
                .env_clear()
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let started = std::time::Instant::now();
        while !std::fs::read(format!("/proc/{}/cmdline", child.0.id())).unwrap().starts_with(b"tail\0") {
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "tail never started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child
    }

    #[test]
    fn a_process_naming_a_dead_workers_folder_in_its_arguments_is_killed_before_the_folder_goes() {
        use std::os::unix::process::ExitStatusExt;
        let parent = tempfile::tempdir().unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = gone.id();
        gone.wait().unwrap();
        let dead = parent.path().join(format!("{RUN_PREFIX}{dead_pid}-abc123"));
        let live = ScratchDirs::create(Some(parent.path())).unwrap();
        std::fs::create_dir(&dead).unwrap();
        // A file (not a folder: it stays) whose path starts with the dead folder's.
        let alike = parent.path().join(format!("{RUN_PREFIX}{dead_pid}-abc123.keep"));
        std::fs::write(&alike, "").unwrap();
        let file = |dir: &Path| {
            let file = dir.join("model.sock");
            std::fs::write(&file, "").unwrap();
            file
        };
        let mut in_dead = naming(&file(&dead));
        let mut in_live = naming(&file(live.root()));
        let mut in_alike = naming(&alike);
        assert_eq!(remove_stale_scratch(Some(parent.path()), None), 1);
        assert!(!dead.exists());
        let started = std::time::Instant::now();
        let status = loop {
            match in_dead.0.try_wait().unwrap() {
                Some(status) => break status.signal(),
                None if started.elapsed() > std::time::Duration::from_secs(5) => break None,
                None => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        };
        assert_eq!(status, Some(libc::SIGKILL), "killed before the folder went");
        for (what, child) in [("a live folder's", &mut in_live), ("a look-alike's", &mut in_alike)] {
            assert!(child.0.try_wait().unwrap().is_none(), "{what} process is left alone");
        }
    }

    #[test]
    fn a_scratch_directory_name_gives_its_pid() {
        assert_eq!(scratch_owner("tollgate-segment-1234-Ab9xYz"), Some(1234));
        assert_eq!(scratch_owner("tollgate-warm-1234-Ab9xYz"), Some(1234));
        assert_eq!(scratch_owner("tollgate-box-etc-1234-1f2e"), Some(1234));
        assert_eq!(scratch_owner("tollgate-run-1234-1f2e"), Some(1234));
        assert_eq!(scratch_owner("tollgate-segment-Ab9xYz"), None);
        assert_eq!(scratch_owner("tollgate-segment-0-x"), None);
        assert_eq!(scratch_owner("tollgate-segment--x"), None);
        assert_eq!(scratch_owner("other-1234-x"), None);
    }
}
