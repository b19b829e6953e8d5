//! One segment: one run of the `claude` CLI that ends with an answer, one deferred tool call, or a
//! failure (docs/ARCHITECTURE.md, "One turn", steps 3–9).
//!
//! Read [`run_segment`] first, then [`SegmentSpec`] (what to run) and [`SegmentOutcome`] (what
//! came of it). A segment:
//!
//! 1. makes fresh `HOME`, `CLAUDE_CONFIG_DIR` and `TMPDIR` directories and, for a resume, writes the
//!    stored entries to the project's transcript file ([`crate::launch`]);
//! 2. starts the CLI in its own process group ([`crate::transport`]) with the argv and the
//!    environment of docs/PROTOCOL.md, "Launch", the environment built from an allow-list (nothing
//!    else of the host's environment is inherited: see
//!    [`crate::transport::inherited_allowed_variables`]);
//! 3. writes `initialize` first (the gate's `PreToolUse` matcher for every tool, with a timeout;
//!    an application hook if any; the sdk server; the prompts), then the prompt of a fresh
//!    segment, or **no prompt** for a resumed deferred call. On a parked spare
//!    ([`crate::pool::WarmCli::park`]), which took the hooks when it was started, it writes
//!    `claim_session` instead and the prompt once the claim is answered;
//! 4. answers `hook_callback` and `can_use_tool` from the [`Gate`], serves `mcp_message` through the
//!    rmcp server ([`crate::mcp`]), forwards main-conversation text and thinking deltas as
//!    [`SegmentEvent::TextDelta`] and [`SegmentEvent::ReasoningDelta`] and its inline CLI tool
//!    calls as [`SegmentEvent::ToolCallStarted`] and [`SegmentEvent::ToolCallFinished`], and
//!    collects the `transcript_mirror` entries. The gate has one owner (the segment's machine,
//!    fed by one loop): the tool server's permits reach it over a channel, and a [`CliDecider`]
//!    question runs as its own task whose answer is one more event of the loop, so a slow
//!    decider holds up only its own call;
//! 5. closes stdin after the `result`, reads stdout to EOF (the last mirror entries come after the
//!    result), reaps the process and kills what is left of its group.
//!
//! Steps 3 to 5 are two layers. What the frames mean, what to answer and when the loop ends is
//! the segment's machine (`segment/machine.rs`, `SegmentMachine`): it takes the CLI's lines, the
//! answers of the CLI decider and the application hooks, the tool server's permit questions and
//! the deadlines, and hands back effects (a frame to write, stdin to close, an `mcp_message` for
//! the bridge, a question to ask, an event, the shutdown) without touching a process, a task or
//! the clock; its unit tests replay captured runs of the real CLI. `run_segment` owns the I/O:
//! the process, the bridge, the tasks, the clock, the scratch directories, and one loop that
//! feeds the machine and carries out its effects.
//!
//! A segment whose [`SegmentSpec::cancel`] turns `true` sends the CLI `interrupt`, lets it end its
//! turn for [`SegmentSpec::cancel_grace`], then kills it, and ends [`SegmentOutcome::Cancelled`]
//! (unless its turn had finished first: then it ends as it finished).
//!
//! ```no_run
//! use std::sync::Arc;
//! use tollgate_claude::{CliBinary, CliLocator, SegmentOutcome, SegmentSpec, run_segment, tools::NoTools};
//! use tollgate_engine::gate::Gate;
//! use tollgate_engine::policy::Policies;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let cli = CliBinary::locate(&CliLocator::default()).await?;
//! let spec = SegmentSpec::fresh(cli, "/srv/project", "Hello")
//!     .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:8080")
//!     .env("ANTHROPIC_API_KEY", "dummy");
//! let gate = Gate::new(Policies::default(), tollgate_claude::tools::catalog("tools", &[])?);
//! let report = run_segment(spec, gate, Arc::new(NoTools), None).await;
//! match report.outcome {
//!     SegmentOutcome::Completed { result, .. } => println!("{result}"),
//!     SegmentOutcome::Deferred { call, .. } => println!("deferred {}", call.tool_name),
//!     SegmentOutcome::Failed { error } => eprintln!("{error}"),
//!     _ => {}
//! }
//! # Ok(()) }
//! ```
//!
//! # Caveats
//!
//! - The segment never panics on what the CLI writes: a line that is not a frame, a line over
//!   [`SegmentSpec::max_line_bytes`], an exit before the `result` or a stall past
//!   [`SegmentSpec::timeout`] ends it with [`SegmentOutcome::Failed`], after the process group is
//!   killed. A malformed *control request* whose id is readable is answered with an error instead
//!   (the CLI then runs its own permission flow, which reaches the gate through `can_use_tool`).
//! - Dropping the future of [`run_segment`] kills the process group (the transport's `Drop`).
//! - A resumed segment without a prompt needs a pending deferred call ([`Gate::resuming`]); a
//!   completed session resumed without a prompt would wait for input until the timeout.
//! - Subagent transcripts (`projects/<key>/<session>/subagents/…`) are collected apart from the
//!   main transcript ([`SubagentTranscript`]); a resume needs only the main one. Subagents run in
//!   the foreground (`CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1`, set after the spec's environment).

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::sleep_until;
use tollgate_engine::catalog::ToolKind;
use tollgate_engine::gate::{CliToolDecision, DeferredCall, Gate};
use tollgate_engine::session::tools::CliRun;
use tollgate_protocol::{
    ClaimSession, HookMatcher, Initialize, ResultMessage, ResumeText, TranscriptEntry, Usage, UserPrompt,
};

use crate::app_hooks::{self, AppHook, Asking};
use crate::cli::CliBinary;
use crate::error::SegmentError;
use crate::launch::{ArgvOptions, ScratchDirs, argv, write_resume_file, write_resume_file_for};
use crate::mcp::{McpBridge, PermitRequest, ToolServer};
use crate::pool::WarmCli;
use crate::tools::{NotRecorded, ToolRunner};
use crate::transport::{CliProcess, Launch, inherited_allowed_variables, inherited_locale_variables};

mod machine;

pub(crate) use machine::INITIALIZE_ID;
use machine::{Effect, Exit, GATE_HOOK_ID, Opening, SegmentMachine, Settings};

/// Something the caller may watch while the segment runs (for the SSE API).
///
/// Inline tool calls are reported from where each runs: a custom tool by the tool server when it
/// runs it ([`crate::mcp`]); a CLI tool (a built-in such as `Read` or `Bash`, or a tool of an
/// external MCP server) from the CLI's frames: started when the gate allows the call, finished
/// at its `tool_result`. A deferred call, a denied one and the replay of a resumed one are not
/// inline calls: the session reports deferred calls from their own steps.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SegmentEvent {
    /// A piece of the main conversation's text, as it streams.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A piece of the main conversation's thinking (the model's visible reasoning), as it
    /// streams.
    ReasoningDelta {
        /// The thinking text.
        text: String,
    },
    /// An inline tool call started.
    ToolCallStarted {
        /// The model's tool use ID.
        tool_use_id: String,
        /// A custom tool's own name, or a CLI tool's CLI name.
        name: String,
        /// Which side runs it.
        kind: ToolKind,
        /// The input it runs with.
        input: Value,
    },
    /// An inline tool call finished.
    ToolCallFinished {
        /// The model's tool use ID.
        tool_use_id: String,
        /// A custom tool's own name, or a CLI tool's CLI name.
        name: String,
        /// Which side ran it.
        kind: ToolKind,
        /// Whether the model got an error result.
        is_error: bool,
    },
}

/// What a [`CliDecider`] answers: `Ok(None)` leaves the call to the policy table; `Err(text)`
/// denies it with the text.
pub type DeciderAnswer = Result<Option<CliToolDecision>, String>;

/// A [`CliDecider`]'s answer to come. It owns what it needs: the segment runs it as a task.
pub type DeciderFuture = Pin<Box<dyn Future<Output = DeciderAnswer> + Send + 'static>>;

/// The options factory's per-call decider for CLI tools (`decide-cli-tool`), when the agent has
/// one. Used only with [`Gate::with_cli_decider`]. The segment asks it from a task of its own and
/// goes on reading the CLI meanwhile; a decider that panics denies the call.
pub trait CliDecider: Send + Sync + 'static {
    /// The decision for one call of the CLI tool `tool_name` with `input`.
    fn decide(&self, tool_name: String, input: Value) -> DeciderFuture;
}

/// How the segment starts.
#[derive(Debug, Clone)]
pub enum Start {
    /// A new session, with this prompt.
    Fresh {
        /// The user prompt.
        prompt: UserPrompt,
    },
    /// `--resume` of a stored session: its transcript is written to the resume file. With no
    /// prompt the CLI resumes the pending deferred call; with one it starts a new turn.
    Resume {
        /// The CLI session id.
        session_id: String,
        /// The session's stored transcript in resume form, in order, byte-exact.
        transcript: ResumeText,
        /// A new turn's prompt, or `None` for a deferred-call resume.
        prompt: Option<UserPrompt>,
    },
}

/// What to run. Build it with [`SegmentSpec::fresh`] or [`SegmentSpec::resume`]; the other fields
/// have these defaults:
///
/// | field | default |
/// | --- | --- |
/// | `permission_mode` | none (the CLI's `default`) |
/// | `setting_sources` | `Some([])`: no settings files |
/// | `extra_args`, `env` | empty |
/// | `server_name` | `"tools"` (must match the gate's catalog) |
/// | `hook_timeout_secs` | 60 |
/// | `initialize_timeout` | 60 s |
/// | `timeout` | 15 min |
/// | `drain_timeout` | 10 s (after the `result`, to EOF) |
/// | `max_line_bytes` | 4 MiB |
/// | `scratch_parent` | the system temp dir |
/// | `app_hook`, `cli_decider` | none |
/// | `app_hook_matchers` | none (an application matcher fired with no `app_hook` is answered `{}`) |
/// | `system_prompt`, `append_system_prompt` | none (sent in `initialize` when set) |
/// | `cancel` | none (never cancelled) |
/// | `cancel_grace` | 5 s |
#[derive(Clone)]
pub struct SegmentSpec {
    /// The CLI binary.
    pub cli: CliBinary,
    /// The project directory (`cwd` of the CLI).
    pub cwd: PathBuf,
    /// Fresh or resumed.
    pub start: Start,
    /// `--permission-mode`.
    pub permission_mode: Option<String>,
    /// `--setting-sources`.
    pub setting_sources: Option<Vec<String>>,
    /// More arguments, appended.
    pub extra_args: Vec<String>,
    /// Variables set after the segment's own (`ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY`, proxies…).
    /// With the allow-listed ones of [`crate::transport::inherited_allowed_variables`], `HOME`,
    /// `CLAUDE_CONFIG_DIR`, `TMPDIR`, `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` and (after
    /// these, so it wins) `CLAUDE_CODE_DISABLE_BACKGROUND_TASKS`, they are the CLI's whole
    /// environment.
    pub env: Vec<(OsString, OsString)>,
    /// The sdk MCP server's name.
    pub server_name: String,
    /// The `timeout` of the hook matchers, in seconds.
    pub hook_timeout_secs: u32,
    /// How long the CLI may take to answer `initialize`.
    pub initialize_timeout: Duration,
    /// How long the whole segment may take.
    pub timeout: Duration,
    /// How long to read after the `result` before the process is killed.
    pub drain_timeout: Duration,
    /// The longest stdout line accepted.
    pub max_line_bytes: usize,
    /// Where the scratch directories go.
    pub scratch_parent: Option<PathBuf>,
    /// The agent's own hooks ([`crate::app_hooks`]), asked for the events of `app_hook_matchers`.
    pub app_hook: Option<Arc<dyn AppHook>>,
    /// Which events (and tools) the agent's hooks run on, registered in this order, an
    /// application `PreToolUse` matcher before the gate's.
    pub app_hook_matchers: Vec<tollgate_engine::hooks::HookMatcher>,
    /// The per-call decider for CLI tools.
    pub cli_decider: Option<Arc<dyn CliDecider>>,
    /// A system prompt sent in `initialize` rather than as `--system-prompt`
    /// ([`crate::launch::prompts_to_initialize`]): the launch is then the same for every session.
    pub system_prompt: Option<String>,
    /// Text appended to the system prompt, sent in `initialize` rather than as
    /// `--append-system-prompt`.
    pub append_system_prompt: Option<String>,
    /// The box the CLI runs in ([`tollgate_box`]); `None` runs it on the host as the Worker's
    /// user, with nothing between its commands and what that user can reach.
    pub sandbox: Option<SegmentBox>,
    /// The agent's external MCP servers by name, sent in `initialize` (never in the argv).
    pub mcp_servers: serde_json::Map<String, Value>,
    /// Stops the segment once it turns `true`: the CLI gets `interrupt`, and is killed if its
    /// turn has not ended after [`SegmentSpec::cancel_grace`].
    pub cancel: Option<tokio::sync::watch::Receiver<bool>>,
    /// How long a cancelled CLI may take to end its turn after `interrupt`.
    pub cancel_grace: Duration,
}

/// How a segment's CLI is boxed.
#[derive(Debug, Clone)]
pub struct SegmentBox {
    /// The Worker's box settings.
    pub config: Arc<tollgate_box::BoxConfig>,
    /// `true`: [`SegmentSpec::cwd`] is the session's workspace on the host, copied into the box's
    /// `/workspace` (the CLI works there) and back out after the segment; `false`: it is a folder
    /// the agent's options name, bound read-write at its own path.
    pub copy_workspace: bool,
}

impl std::fmt::Debug for SegmentSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentSpec")
            .field("cli", &self.cli)
            .field("cwd", &self.cwd)
            .field("permission_mode", &self.permission_mode)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl SegmentSpec {
    /// A first segment with a one-text prompt.
    pub fn fresh(cli: CliBinary, cwd: impl Into<PathBuf>, prompt: impl Into<String>) -> Self {
        Self::with_start(cli, cwd, Start::Fresh { prompt: UserPrompt::blocks([prompt.into()]) })
    }

    /// A segment resuming `session_id` from its stored entries, without a prompt.
    pub fn resume(
        cli: CliBinary,
        cwd: impl Into<PathBuf>,
        session_id: impl Into<String>,
        entries: Vec<TranscriptEntry>,
    ) -> Self {
        let mut transcript = ResumeText::default();
        transcript.push_entries(entries.iter().map(TranscriptEntry::as_str));
        Self::with_start(cli, cwd, Start::Resume { session_id: session_id.into(), transcript, prompt: None })
    }

    /// Any start.
    pub fn with_start(cli: CliBinary, cwd: impl Into<PathBuf>, start: Start) -> Self {
        SegmentSpec {
            cli,
            cwd: cwd.into(),
            start,
            permission_mode: None,
            setting_sources: Some(Vec::new()),
            extra_args: Vec::new(),
            env: Vec::new(),
            server_name: tollgate_engine::catalog::DEFAULT_TOOL_SERVER_NAME.to_owned(),
            hook_timeout_secs: 60,
            initialize_timeout: Duration::from_secs(60),
            timeout: Duration::from_secs(15 * 60),
            drain_timeout: Duration::from_secs(10),
            max_line_bytes: 4 * 1024 * 1024,
            scratch_parent: None,
            app_hook: None,
            app_hook_matchers: Vec::new(),
            cli_decider: None,
            system_prompt: None,
            append_system_prompt: None,
            sandbox: None,
            mcp_servers: serde_json::Map::new(),
            cancel: None,
            cancel_grace: Duration::from_secs(5),
        }
    }

    /// The CLI's working directory as the CLI sees it: the box's `/workspace` for a copied
    /// workspace, else [`SegmentSpec::cwd`].
    pub fn cli_cwd(&self) -> PathBuf {
        self.box_workspace(false).map_or_else(|| self.cwd.clone(), |workspace| workspace.cli_cwd())
    }

    /// The workspace of this spec's box, if boxed (`parked`: a parked spare's, empty until its
    /// claim).
    pub(crate) fn box_workspace(&self, parked: bool) -> Option<tollgate_box::BoxWorkspace> {
        let sandbox = self.sandbox.as_ref()?;
        Some(match (sandbox.copy_workspace, parked) {
            (true, true) => tollgate_box::BoxWorkspace::Copied(None),
            (true, false) => tollgate_box::BoxWorkspace::Copied(Some(self.cwd.clone())),
            (false, _) => tollgate_box::BoxWorkspace::Bound(self.cwd.clone()),
        })
    }

    /// Whether the CLI may read a settings file or load hooks, plugins or MCP servers from a
    /// folder the agent can write: it is told to read settings files (`setting_sources` not
    /// `Some([])`), or given a flag that loads from a folder (`--plugin-dir`, `--add-dir`,
    /// `--settings`), or another config folder. A boxed CLI that may gets the box's managed
    /// settings, which outrank any such file ([`tollgate_box::BoxConfig::cli_settings_locked`]).
    pub fn cli_reads_settings(&self) -> bool {
        const LOADING_FLAGS: &[&str] = &["--plugin-dir", "--add-dir", "--settings", "--setting-sources"];
        let loads = |arg: &String| {
            LOADING_FLAGS.iter().any(|flag| arg == flag || arg.starts_with(&format!("{flag}=")))
        };
        !self.setting_sources.as_ref().is_some_and(Vec::is_empty)
            || self.extra_args.iter().any(loads)
            || self.env.iter().any(|(name, _)| name == "CLAUDE_CONFIG_DIR")
    }

    /// Sets one environment variable of the CLI.
    #[must_use]
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// The argv this spec starts the CLI with.
    pub fn args(&self) -> Vec<String> {
        self.argv(false)
    }

    /// The argv of a parked spare for this spec ([`crate::pool`]): `--await-claim`, and the sdk
    /// MCP server left to the claim. Only a fresh start can be parked.
    pub fn parked_args(&self) -> Vec<String> {
        self.argv(true)
    }

    fn argv(&self, parked: bool) -> Vec<String> {
        let resume = match &self.start {
            Start::Resume { session_id, .. } => Some(session_id.as_str()),
            Start::Fresh { .. } => None,
        };
        argv(&ArgvOptions {
            server_name: &self.server_name,
            permission_mode: self.permission_mode.as_deref(),
            resume,
            setting_sources: self.setting_sources.as_deref(),
            extra: &self.extra_args,
            parked,
        })
    }

    /// The `initialize` request this spec sends.
    pub fn initialize(&self) -> Initialize {
        let mut init = self.parked_initialize().sdk_mcp_server(self.server_name.clone());
        init.system_prompt.clone_from(&self.system_prompt);
        init.append_system_prompt.clone_from(&self.append_system_prompt);
        init
    }

    /// The `initialize` a parked spare takes before its session is known: the hooks and the
    /// external MCP servers (the same for every session of a launch); the prompts and the sdk MCP
    /// server come with [`Self::claim`].
    pub fn parked_initialize(&self) -> Initialize {
        let mut init = Initialize::new();
        init.mcp_servers.clone_from(&self.mcp_servers);
        app_hooks::register(init, &self.app_hook_matchers, self.hook_timeout_secs)
            .pre_tool_use(HookMatcher::all_tools(GATE_HOOK_ID).timeout(self.hook_timeout_secs))
    }

    /// The `claim_session` that binds a parked spare to this segment: its `cwd`, its prompts,
    /// its sdk MCP server. With [`Self::parked_initialize`] it asks what [`Self::initialize`]
    /// asks of a CLI started for the segment.
    pub fn claim(&self) -> ClaimSession {
        ClaimSession::new(self.cli_cwd().to_string_lossy())
            .system_prompt(self.system_prompt.clone())
            .append_system_prompt(self.append_system_prompt.clone())
            .sdk_mcp_server(self.server_name.clone())
    }
}

/// How a segment ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum SegmentOutcome {
    /// The model answered.
    Completed {
        /// The CLI session id (resume the next turn with it).
        session_id: String,
        /// The final text.
        result: String,
        /// The transcript entries this segment added, byte-exact, in order.
        entries: Vec<TranscriptEntry>,
        /// The transcripts of the subagents that ran in this segment.
        subagents: Vec<SubagentTranscript>,
        /// Tokens of this segment.
        usage: Usage,
    },
    /// The segment ended on one deferred tool call.
    Deferred {
        /// The CLI session id.
        session_id: String,
        /// The call to record, with the CLI's final input (after every hook's `updatedInput`).
        call: DeferredCall,
        /// The transcript entries this segment added.
        entries: Vec<TranscriptEntry>,
        /// The transcripts of the subagents that ran in this segment.
        subagents: Vec<SubagentTranscript>,
        /// Tokens of this segment.
        usage: Usage,
    },
    /// The segment failed; see [`SegmentError::is_retryable`].
    Failed {
        /// Why.
        error: SegmentError,
    },
    /// The segment was cancelled ([`SegmentSpec::cancel`]) before its turn finished.
    Cancelled {
        /// Whether the CLI was killed after the grace (`false`: it ended its turn on `interrupt`).
        killed: bool,
    },
}

/// The transcript a subagent wrote in one segment (the CLI mirrors it apart from the main one,
/// under `<session>/subagents/agent-<id>.jsonl`). The main transcript does not need it to resume.
#[derive(Debug, Clone, PartialEq)]
pub struct SubagentTranscript {
    /// The subagent's ID (the `agent_id` of its calls' hook inputs).
    pub agent_id: String,
    /// Its entries, byte-exact, in order.
    pub entries: Vec<TranscriptEntry>,
}

impl SegmentOutcome {
    /// The subagent transcripts of a completed or deferred segment (empty for a failed one).
    pub fn subagents(&self) -> &[SubagentTranscript] {
        match self {
            SegmentOutcome::Completed { subagents, .. } | SegmentOutcome::Deferred { subagents, .. } => {
                subagents
            }
            SegmentOutcome::Failed { .. } | SegmentOutcome::Cancelled { .. } => &[],
        }
    }

    /// The entries of a completed or deferred segment (empty for a failed one).
    pub fn entries(&self) -> &[TranscriptEntry] {
        match self {
            SegmentOutcome::Completed { entries, .. } | SegmentOutcome::Deferred { entries, .. } => entries,
            SegmentOutcome::Failed { .. } | SegmentOutcome::Cancelled { .. } => &[],
        }
    }

    /// The session id of a completed or deferred segment.
    pub fn session_id(&self) -> Option<&str> {
        match self {
            SegmentOutcome::Completed { session_id, .. } | SegmentOutcome::Deferred { session_id, .. } => {
                Some(session_id)
            }
            SegmentOutcome::Failed { .. } | SegmentOutcome::Cancelled { .. } => None,
        }
    }
}

/// Timings and facts about one run, for logs, traces and the benchmark.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SegmentStats {
    /// The CLI's process id (its process group id too), once started.
    pub pid: Option<u32>,
    /// Whether the segment ran on a pre-started CLI ([`crate::pool`]); `to_spawn` then is the
    /// time to take it over.
    pub warm: bool,
    /// Why the parked spare it was given refused its claim; the segment then ran on a CLI it
    /// started itself (`warm` is false, the times are that run's).
    pub claim_refused: Option<String>,
    /// From the start of [`run_segment`] to the spawn.
    pub to_spawn: Option<Duration>,
    /// To the `initialize` answer (a parked spare's came before the segment: then at once).
    pub to_initialized: Option<Duration>,
    /// To the `claim_session` answer (a parked spare's).
    pub to_claimed: Option<Duration>,
    /// To the first main-conversation text delta.
    pub to_first_delta: Option<Duration>,
    /// To the `result`.
    pub to_result: Option<Duration>,
    /// To the end (process reaped, directories removed).
    pub total: Duration,
    /// How the process exited.
    pub exit_status: Option<String>,
    /// Distinct assistant message ids of the main conversation (model calls).
    pub model_calls: usize,
    /// Distinct assistant message ids of subagents (their model calls, not in `model_calls`).
    pub subagent_model_calls: usize,
    /// `model` of the first `system/init`: the model the CLI requests for the main conversation.
    pub init_model: Option<String>,
    /// The names of the plugins the first `system/init` lists: the CLI's built-in ones it loaded
    /// (a boxed CLI loads only those the box's managed settings leave it).
    pub init_plugins: Vec<String>,
    /// `message.model` of every assistant message, subagents included (API-error messages,
    /// whose model is `<synthetic>`, left out).
    pub response_models: BTreeSet<String>,
    /// `message.id` of every assistant message, subagents included (a subagent's last reply,
    /// which the CLI does not write to stdout, from its transcript).
    pub response_ids: BTreeSet<String>,
    /// `delta.stop_reason` of the main conversation's `message_delta` stream events, in order.
    pub finish_reasons: Vec<String>,
    /// The tail of the CLI's stderr.
    pub stderr_tail: String,
    /// The `result` frame, when one came.
    pub result: Option<ResultMessage>,
    /// What the box's init reported, for a boxed CLI.
    pub box_report: Option<tollgate_box::BoxReport>,
    /// `CLOCK_MONOTONIC` (ns) when this segment spawned its CLI (not for a pre-started one): with
    /// the box report's [`tollgate_box::BoxTimings`], how long `bwrap` took to make the box.
    pub spawned_ns: Option<u64>,
    /// What came of the pending call of a resumed segment when it is an approved CLI call
    /// ([`Gate::resuming`]): whether the gate let the CLI run it, and the tool result the CLI
    /// then sent for it (its record is made from this).
    pub resumed_cli_call: CliRun,
}

/// What [`run_segment`] returns.
#[derive(Debug)]
pub struct SegmentReport {
    /// How the segment ended.
    pub outcome: SegmentOutcome,
    /// Timings and diagnostics.
    pub stats: SegmentStats,
}

/// Runs one segment to its end. See the module docs. `events` receives text deltas and inline
/// tool calls as they happen.
pub async fn run_segment(
    spec: SegmentSpec,
    gate: Gate,
    runner: Arc<dyn ToolRunner>,
    events: Option<mpsc::UnboundedSender<SegmentEvent>>,
) -> SegmentReport {
    run_segment_on(spec, None, gate, runner, events).await
}

/// [`run_segment`] on `warm`, a CLI pre-started with the launch of `spec` (the caller checked
/// [`WarmCli::is_waiting`]); `None` starts one. One that waits for its `initialize`
/// ([`WarmCli::spawn`]) gets it now, after a resume's file is written into its own config
/// directory; a parked spare ([`WarmCli::park`]) gets [`SegmentSpec::claim`] and the prompt once
/// the claim is answered, and if the CLI refuses the claim the segment runs on a CLI it starts
/// ([`SegmentStats::claim_refused`]). Everything after is the same as for a CLI started here.
pub async fn run_segment_on(
    spec: SegmentSpec,
    warm: Option<WarmCli>,
    gate: Gate,
    runner: Arc<dyn ToolRunner>,
    events: Option<mpsc::UnboundedSender<SegmentEvent>>,
) -> SegmentReport {
    let started = Instant::now();
    let mut stats = SegmentStats::default();
    // A parked spare's box started with an empty workspace: a session whose workspace has files
    // (a first segment's second attempt) needs a CLI of its own.
    let warm = match warm {
        Some(warm)
            if warm.is_parked()
                && spec.sandbox.as_ref().is_some_and(|b| b.copy_workspace)
                && !is_empty_dir(&spec.cwd) =>
        {
            stats.claim_refused =
                Some("the session's workspace has files; a parked spare's box starts empty".into());
            None
        }
        other => other,
    };
    let parked = warm.as_ref().is_some_and(WarmCli::is_parked);
    // A refused claim sent no prompt: the segment runs again, on a CLI of its own, with what the
    // first run was given (nothing reached a tool or the model).
    let again = parked.then(|| (gate.clone(), runner.clone(), events.clone()));
    let mut result = run(&spec, gate, runner, events, started, &mut stats, warm).await;
    if let (Err(SegmentError::ClaimRefused { pid, message, .. }), Some((gate, runner, events))) =
        (&result, again)
    {
        tracing::warn!(pid, reason = %message, "a parked CLI refused its claim; starting one for the segment");
        stats = SegmentStats { claim_refused: Some(message.clone()), ..SegmentStats::default() };
        result = run(&spec, gate, runner, events, Instant::now(), &mut stats, None).await;
    }
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(error) => SegmentOutcome::Failed { error },
    };
    stats.total = started.elapsed();
    SegmentReport { outcome, stats }
}

/// Whether `dir` has no entries (a missing one counts as empty).
fn is_empty_dir(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).map_or(true, |mut entries| entries.next().is_none())
}

async fn run(
    spec: &SegmentSpec,
    gate: Gate,
    runner: Arc<dyn ToolRunner>,
    events: Option<mpsc::UnboundedSender<SegmentEvent>>,
    started: Instant,
    stats: &mut SegmentStats,
    warm: Option<WarmCli>,
) -> Result<SegmentOutcome, SegmentError> {
    let (resume, prompt) = match &spec.start {
        Start::Fresh { prompt } => (None, Some(prompt.clone())),
        Start::Resume { session_id, transcript, prompt } => (Some((session_id, transcript)), prompt.clone()),
    };
    if resume.is_some() && prompt.is_none() && gate.pending().is_none() {
        return Err(SegmentError::InvalidSpec {
            reason: "a resume without a prompt needs the pending deferred call's record (Gate::resuming)"
                .into(),
        });
    }
    let (dirs, warm_process, parked) = match warm {
        Some(warm) => {
            let parked = warm.is_parked();
            let (process, dirs) = warm.into_parts();
            stats.warm = true;
            (dirs, Some(process), parked)
        }
        None => (ScratchDirs::for_spec(spec, false)?, None, false),
    };
    if let Some((session_id, transcript)) = resume {
        // A pre-started CLI reads it only after `initialize` (benches/segment.rs measured it).
        match dirs.boxed() {
            Some(boxed) => {
                write_resume_file_for(&dirs.config(), &spec.cli_cwd(), session_id, transcript)?;
                boxed
                    .give_config_in()
                    .map_err(|source| SegmentError::Setup { path: dirs.config(), source })?;
            }
            None => {
                write_resume_file(&dirs.config(), &spec.cwd, session_id, transcript)?;
            }
        }
    }

    let (permits, mut permit_requests) = mpsc::unbounded_channel::<PermitRequest>();
    let (stops, mut not_recorded) = mpsc::unbounded_channel::<NotRecorded>();
    let replay_only = gate.replay_only_tool().map(str::to_owned);
    let mut bridge = McpBridge::start(
        ToolServer::new(spec.server_name.clone(), runner, replay_only, permits, events.clone())
            .with_stops(stops),
    );
    let mut process = match warm_process {
        Some(process) => process,
        None => {
            stats.spawned_ns = Some(tollgate_box::monotonic_ns());
            spawn(&launch(spec, &dirs, Started::Now))?
        }
    };
    let pid = process.pid();
    stats.pid = Some(pid);
    stats.to_spawn = Some(started.elapsed());

    let opening = if parked {
        Opening::Claim { claim: spec.claim(), prompt }
    } else {
        Opening::Initialize { initialize: spec.initialize(), prompt }
    };
    let mut machine = SegmentMachine::new(Settings::of(spec), pid, gate, opening, stats);
    let mut edge = Edge {
        spec,
        process: &mut process,
        bridge: &mut bridge,
        events,
        deciding: Deciding::default(),
        asking: Asking::default(),
        grace: Duration::ZERO,
    };
    edge.carry_out(&mut machine);
    let mut cancel = spec.cancel.clone();
    let at = |elapsed: Duration| tokio::time::Instant::from_std(started + elapsed);

    while !machine.is_over() {
        let (wake, timer) = machine.next_timer();
        tokio::select! {
            event = edge.process.next_line() => machine.notify_stdout(event, started.elapsed()),
            answer = edge.bridge.next_answer() => edge.process.send(answer.to_line()),
            Some(permit) = permit_requests.recv() => {
                let answer = machine.permit_mcp_call(permit.tool_use_id.as_deref(), &permit.tool);
                let _ = permit.reply.send(answer);
            }
            Some(stop) = not_recorded.recv() => machine.notify_not_recorded(stop.message),
            (ticket, answer) = edge.deciding.next() => machine.notify_decider_answer(ticket, answer),
            (request_id, answer) = edge.asking.next() => machine.notify_app_hook_answer(request_id, answer),
            () = cancelled(&mut cancel), if !machine.is_cancelling() => {
                machine.notify_cancel(started.elapsed());
            }
            () = sleep_until(at(wake)) => machine.notify_timer(timer),
        }
        edge.carry_out(&mut machine);
    }
    let grace = edge.grace;
    drop(edge);
    let ended = dirs.boxed().and_then(|boxed| boxed.ended_signal().ok());
    let (mut status, stderr) = process.shutdown_unless(grace, ended).await;
    drop(bridge);
    // Only now: a tool call whose record was not committed waits for this, so its answer can no
    // longer reach the CLI.
    drop(not_recorded);
    let box_limit = dirs.boxed().and_then(|boxed| finish_box(spec, boxed, machine.stats_mut()));
    if status == crate::transport::BOX_REPORTED
        && let Some(cli_exit) =
            machine.stats_mut().box_report.as_ref().and_then(|report| report.cli_exit.clone())
    {
        // What the CLI itself exited with, as the box's init saw it.
        status = cli_exit;
    }
    drop(dirs);
    machine.finish(Exit { status, stderr, box_limit })
}

/// What the segment's loop does for its [`SegmentMachine`]: the process, the tool server's
/// bridge, the questions to the CLI decider and the application hooks, the caller's events.
struct Edge<'a> {
    spec: &'a SegmentSpec,
    process: &'a mut CliProcess,
    bridge: &'a mut McpBridge,
    events: Option<mpsc::UnboundedSender<SegmentEvent>>,
    deciding: Deciding,
    asking: Asking,
    /// How long the process may take to exit, once the machine's loop is over.
    grace: Duration,
}

impl Edge<'_> {
    /// Carries out every effect the machine has, in order.
    fn carry_out(&mut self, machine: &mut SegmentMachine<'_>) {
        while let Some(effect) = machine.take_effect() {
            match effect {
                Effect::Write(frame) => self.process.send(frame.to_line()),
                Effect::CloseStdin => self.process.close_stdin(),
                Effect::Mcp { request_id, server_name, message } => {
                    if let Some(answer) = self.bridge.accept(&request_id, &server_name, &message) {
                        self.process.send(answer.to_line());
                    }
                }
                Effect::Withdraw(request_id) => {
                    self.bridge.cancel(&request_id);
                    self.asking.cancel(&request_id);
                }
                Effect::AskDecider { ticket, tool_name, input } => {
                    let decider = self.spec.cli_decider.as_deref().expect("asked only with a CLI decider");
                    self.deciding.ask(decider, ticket, tool_name, input);
                }
                Effect::AskAppHook { request_id, call } => {
                    let hook = self.spec.app_hook.as_deref().expect("asked only with an application hook");
                    self.asking.ask(hook, request_id, call);
                }
                Effect::Event(event) => {
                    if let Some(events) = &self.events {
                        let _ = events.send(event);
                    }
                }
                Effect::Shutdown { grace } => self.grace = grace,
            }
        }
    }
}

/// What the init of a boxed segment's CLI reported: the workspace it copied out becomes the
/// session's, the report goes into `stats`, and the limit hit that matters is returned.
fn finish_box(
    spec: &SegmentSpec,
    boxed: &tollgate_box::BoxDir,
    stats: &mut SegmentStats,
) -> Option<tollgate_box::LimitHit> {
    let Some(report) = boxed.report() else {
        tracing::debug!(dir = %boxed.root().display(), "the box wrote no report (it never ran, or was killed)");
        return None;
    };
    if spec.sandbox.as_ref().is_some_and(|sandbox| sandbox.copy_workspace) {
        match boxed.adopt_workspace(&spec.cwd, &report) {
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(workspace = %spec.cwd.display(), %err, "the box's workspace could not be copied back")
            }
        }
    }
    for left in &report.left_behind {
        tracing::info!(workspace = %spec.cwd.display(), entry = %left, "left in the box");
    }
    let hit = report.main_hit().cloned();
    stats.box_report = Some(report);
    hit
}

/// Starts `launch`'s process; a failure names the program.
pub(crate) fn spawn(launch: &Launch) -> Result<CliProcess, SegmentError> {
    CliProcess::spawn(launch).map_err(|source| SegmentError::Spawn { path: launch.program.clone(), source })
}

/// Whom a launch starts a CLI for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Started {
    /// The segment itself: its files (a resume's transcript) are in place.
    Now,
    /// A segment to come ([`crate::pool`]): a resume's transcript is written after the spawn,
    /// before `initialize`.
    Ahead,
    /// A parked spare: its session, and so its workspace, comes with the claim.
    Parked,
}

/// What starts the CLI of `spec` with `dirs` as its `HOME`, `CLAUDE_CONFIG_DIR` and `TMPDIR`.
pub(crate) fn launch(spec: &SegmentSpec, dirs: &ScratchDirs, started: Started) -> Launch {
    launch_with(spec, dirs, spec.args(), spec.cwd.clone(), started)
}

/// The launch of a parked spare for `spec` ([`crate::pool`]): its argv, in the directory `park`.
pub(crate) fn parked_launch(spec: &SegmentSpec, dirs: &ScratchDirs, park: PathBuf) -> Launch {
    launch_with(spec, dirs, spec.parked_args(), park, Started::Parked)
}

fn launch_with(
    spec: &SegmentSpec,
    dirs: &ScratchDirs,
    args: Vec<String>,
    cwd: PathBuf,
    started: Started,
) -> Launch {
    if let (Some(sandbox), Some(boxed)) = (&spec.sandbox, dirs.boxed()) {
        return boxed_launch(spec, &sandbox.config, boxed, args, started);
    }
    // An allow-list, not the inherited environment: the host's secrets stay out of the CLI and
    // of every command its tools run.
    let mut env: Vec<(OsString, OsString)> = inherited_allowed_variables();
    env.extend([
        ("HOME".into(), dirs.home().into()),
        ("CLAUDE_CONFIG_DIR".into(), dirs.config().into()),
        ("TMPDIR".into(), dirs.tmp().into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(), "1".into()),
    ]);
    env.extend(spec.env.iter().cloned());
    env.push(foreground_subagents());
    Launch {
        program: spec.cli.path().to_path_buf(),
        args: args.into_iter().map(OsString::from).collect(),
        cwd,
        env_remove: Vec::new(),
        env,
        max_line_bytes: spec.max_line_bytes,
        user: None,
        inherit_paths: Vec::new(),
    }
}

/// The variable set after the spec's environment, so no option turns it off: a subagent runs in
/// the foreground, its report the `Task` call's result. In the background (CLI 2.1.328's default)
/// it outlives the segment's result, and its model calls and tool calls would run after the
/// segment ended.
fn foreground_subagents() -> (OsString, OsString) {
    ("CLAUDE_CODE_DISABLE_BACKGROUND_TASKS".into(), "1".into())
}

/// The launch of `spec`'s CLI in a box: `bwrap` with the box's command line, running the init
/// with the CLI under it.
fn boxed_launch(
    spec: &SegmentSpec,
    config: &tollgate_box::BoxConfig,
    boxed: &tollgate_box::BoxDir,
    args: Vec<String>,
    started: Started,
) -> Launch {
    use tollgate_box::paths;
    let workspace = spec.box_workspace(started == Started::Parked).expect("a boxed spec has a box workspace");
    // The CLI's own folder is bound, so the program is its real path, not a link to it.
    let program = std::fs::canonicalize(spec.cli.path()).unwrap_or_else(|_| spec.cli.path().to_path_buf());
    let args: Vec<OsString> = args.into_iter().map(OsString::from).collect();
    let plan = tollgate_box::BoxPlan {
        config,
        dir: boxed,
        program: &program,
        args: &args,
        workspace: &workspace,
        late_config: started == Started::Ahead,
    };
    let command_line = tollgate_box::bwrap::command_line(&plan, &tollgate_box::bwrap::HostRoot::read());
    // The host's locale and terminal; never its paths or proxies (the box has its own).
    let mut env = inherited_locale_variables();
    env.extend([
        ("PATH".into(), paths::PATH.into()),
        ("HOME".into(), paths::HOME.into()),
        ("USER".into(), paths::USER.into()),
        ("LOGNAME".into(), paths::USER.into()),
        ("SHELL".into(), "/bin/bash".into()),
        ("CLAUDE_CONFIG_DIR".into(), paths::CONFIG.into()),
        ("TMPDIR".into(), paths::TMP.into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(), "1".into()),
    ]);
    env.extend(spec.env.iter().cloned());
    // Last: inside, the model and the outside are reached only through the relays.
    env.extend(config.relay_env().into_iter().map(|(name, value)| (name.into(), value.into())));
    env.push(foreground_subagents());
    let mut fds = vec![(boxed.inner(), paths::HOST_DIR_FD)];
    if let tollgate_box::BoxWorkspace::Copied(Some(host)) = &workspace {
        fds.push((host.clone(), paths::WORKSPACE_FD));
    }
    Launch {
        program: config.bwrap.clone(),
        args: command_line,
        cwd: PathBuf::from("/"),
        env_remove: Vec::new(),
        env,
        max_line_bytes: spec.max_line_bytes,
        user: config.user.owner(),
        inherit_paths: fds,
    }
}

/// The CLI decider's questions in flight, each a task, by the machine's ticket.
#[derive(Default)]
struct Deciding {
    tasks: JoinSet<DeciderAnswer>,
    asked: HashMap<tokio::task::Id, u64>,
}

impl Deciding {
    fn ask(&mut self, decider: &dyn CliDecider, ticket: u64, tool_name: String, input: Value) {
        let task = self.tasks.spawn(decider.decide(tool_name, input));
        self.asked.insert(task.id(), ticket);
    }

    /// The next answered question. Waits forever when none is in flight (use it in a `select!`;
    /// it is cancel-safe).
    async fn next(&mut self) -> (u64, DeciderAnswer) {
        loop {
            let (id, answer) = match self.tasks.join_next_with_id().await {
                None => return std::future::pending().await,
                Some(Ok((id, answer))) => (id, answer),
                Some(Err(err)) => (err.id(), Err(format!("the CLI tool decider failed: {err}"))),
            };
            if let Some(ticket) = self.asked.remove(&id) {
                return (ticket, answer);
            }
        }
    }
}

/// Resolves once `cancel` turns `true`; never without one, or once its sender is gone.
async fn cancelled(cancel: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    let Some(signal) = cancel else { return std::future::pending().await };
    if signal.wait_for(|cancelled| *cancelled).await.is_err() {
        std::future::pending::<()>().await;
    }
}
