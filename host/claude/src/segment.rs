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
//!    collects the `transcript_mirror` entries. One loop owns the
//!    gate: the tool server's permits reach it over a channel, and a [`CliDecider`] question runs
//!    as its own task whose answer is one more event of the loop, so a slow decider holds up only
//!    its own call;
//! 5. closes stdin after the `result`, reads stdout to EOF (the last mirror entries come after the
//!    result), reaps the process and kills what is left of its group.
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
use tollgate_engine::gate::{
    CliDeciderQuery, CliToolDecision, Decision, DeferredCall, Gate, Origin, Step, ToolCall,
};
use tollgate_engine::session::tools::CliRun;
use tollgate_protocol::{
    ApiEvent, ClaimSession, CliRequest, ContentBlock, Frame, HookEvent, HookMatcher, HostFrame, Initialize,
    InitializeResponse, MessageContent, ProtocolError, ResultMessage, ResumeText, StreamEvent, System,
    TranscriptEntry, TranscriptMirror, Usage, UserMessage, UserPrompt, parse_line,
};

use crate::answer::{hook_frame, permission_frame};
use crate::app_hooks::{self, AppHook, Asking};
use crate::cli::CliBinary;
use crate::error::SegmentError;
use crate::launch::{ArgvOptions, ScratchDirs, argv, write_resume_file, write_resume_file_for};
use crate::mcp::{McpBridge, PermitRequest, ToolServer};
use crate::pool::WarmCli;
use crate::tools::{NotRecorded, ToolRunner};
use crate::transport::{
    CliProcess, Launch, LineEvent, inherited_allowed_variables, inherited_locale_variables,
};

/// The request id of the host's `initialize`.
pub(crate) const INITIALIZE_ID: &str = "tollgate_initialize";
/// The request id of the host's `claim_session` (a parked spare's, [`crate::pool`]).
const CLAIM_ID: &str = "tollgate_claim";
/// The gate's hook callback id.
const GATE_HOOK_ID: &str = "tollgate_gate";
/// The request id of the host's `interrupt` (a cancelled segment's).
const INTERRUPT_ID: &str = "tollgate_interrupt";

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

/// Why the loop stopped early, before the stderr tail is known.
enum Stop {
    Malformed {
        problem: String,
        excerpt: String,
    },
    TooLong,
    Io(std::io::Error),
    InitializeTimeout,
    InitializeRefused(String),
    ClaimRefused(String),
    Timeout,
    /// A recorded inline write's record was not committed.
    NotRecorded(String),
    /// Cancelled, and the CLI did not end its turn within the grace.
    Cancelled,
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

    let held_prompt = if parked {
        // Its initialize went at the spawn; the prompt waits for the claim's answer, so a refused
        // claim leaves nothing run.
        process.send(HostFrame::claim_session(CLAIM_ID, spec.claim()).to_line());
        prompt
    } else {
        process.send(HostFrame::initialize(INITIALIZE_ID, spec.initialize()).to_line());
        if let Some(prompt) = prompt {
            // Pipelined right after initialize, as the TypeScript SDK does (docs/PROTOCOL.md, "The
            // prompt").
            process.send(HostFrame::User(prompt).to_line());
        }
        None
    };

    let mut turn = Turn {
        gate,
        deciding: Deciding::default(),
        asking: Asking::default(),
        spec,
        events,
        started,
        stats,
        result: None,
        entries: Vec::new(),
        subagents: Vec::new(),
        message_ids: BTreeSet::new(),
        initialized: false,
        held_prompt,
        cli_calls: HashMap::new(),
    };
    let deadline = tokio::time::Instant::from_std(started + spec.timeout);
    let init_deadline = tokio::time::Instant::from_std(started + spec.initialize_timeout);
    let mut drain_deadline: Option<tokio::time::Instant> = None;
    let mut cancel = spec.cancel.clone();
    // Once cancelled: when the CLI is killed if its turn has not ended.
    let mut cancel_deadline: Option<tokio::time::Instant> = None;

    let stop: Option<Stop> = loop {
        tokio::select! {
            event = process.next_line() => match event {
                LineEvent::Line(line) => {
                    if let Err(stop) = turn.on_line(&line, &mut process, &mut bridge) {
                        break Some(stop);
                    }
                    if turn.result.is_some() && drain_deadline.is_none() {
                        // The CLI never exits by itself after a result: close stdin, read to EOF.
                        process.close_stdin();
                        drain_deadline = Some(tokio::time::Instant::now() + spec.drain_timeout);
                    }
                }
                LineEvent::Eof => break None,
                LineEvent::TooLong => break Some(Stop::TooLong),
                LineEvent::Error(err) => break Some(Stop::Io(err)),
            },
            answer = bridge.next_answer() => process.send(answer.to_line()),
            Some(permit) = permit_requests.recv() => {
                let answer = turn.gate.permit_mcp_call(permit.tool_use_id.as_deref(), &permit.tool);
                let _ = permit.reply.send(answer);
            }
            Some(stop) = not_recorded.recv() => break Some(Stop::NotRecorded(stop.message)),
            (asked, answer) = turn.deciding.next() => {
                let (tool_use_id, tool_name, input) = (
                    asked.query.tool_use_id().to_owned(),
                    asked.query.tool_name().to_owned(),
                    asked.query.input().clone(),
                );
                let decision = turn.gate.answer_cli_decider(asked.query, answer);
                process.send(asked.reply.frame(&asked.request_id, &decision).to_line());
                turn.cli_call_allowed(&tool_use_id, &tool_name, &input);
            }
            answer = turn.asking.next() => process.send(answer.to_line()),
            () = sleep_until(init_deadline), if !turn.initialized => break Some(Stop::InitializeTimeout),
            // A claim unanswered as long counts as refused: no prompt went, a CLI of its own runs.
            () = sleep_until(init_deadline), if turn.initialized && turn.held_prompt.is_some() => break Some(Stop::ClaimRefused(
                format!("no answer to claim_session within {:?}", spec.initialize_timeout),
            )),
            () = cancelled(&mut cancel), if cancel_deadline.is_none() => {
                tracing::info!(pid, "the segment is cancelled: interrupting the CLI");
                process.send(HostFrame::interrupt(INTERRUPT_ID).to_line());
                cancel_deadline = Some(tokio::time::Instant::now() + spec.cancel_grace);
            }
            () = sleep_until(cancel_deadline.unwrap_or(deadline)), if cancel_deadline.is_some() && turn.result.is_none() => {
                tracing::warn!(pid, "the cancelled CLI did not end its turn within the grace; killing it");
                break Some(Stop::Cancelled);
            }
            () = sleep_until(deadline) => break Some(Stop::Timeout),
            () = sleep_until(drain_deadline.unwrap_or(deadline)), if drain_deadline.is_some() => {
                tracing::warn!(pid, "the CLI did not close stdout after its result; killing it");
                break None;
            }
        }
    };
    // A parked spare that failed its `initialize` before its prompt went is a refused claim too:
    // nothing ran, and a CLI of its own can still serve the segment.
    let stop = match stop {
        Some(Stop::InitializeTimeout) if turn.held_prompt.is_some() => Some(Stop::ClaimRefused(format!(
            "no answer to the parked CLI's initialize within {:?}",
            spec.initialize_timeout
        ))),
        Some(Stop::InitializeRefused(message)) if turn.held_prompt.is_some() => {
            Some(Stop::ClaimRefused(format!("the parked CLI refused its initialize: {message}")))
        }
        other => other,
    };
    let grace = if stop.is_some() { Duration::ZERO } else { Duration::from_secs(5) };
    let ended = dirs.boxed().and_then(|boxed| boxed.ended_signal().ok());
    let (mut status, stderr) = process.shutdown_unless(grace, ended).await;
    drop(bridge);
    // Only now: a tool call whose record was not committed waits for this, so its answer can no
    // longer reach the CLI.
    drop(not_recorded);
    turn.stats.exit_status = Some(status.clone());
    turn.stats.stderr_tail = stderr.clone();
    // A subagent's last reply reaches stdout only in its transcript: its message IDs count too.
    for entry in turn.subagents.iter().flat_map(|s| &s.entries) {
        if let Some(id) = assistant_message_id(entry) {
            turn.stats.response_ids.insert(id);
        }
    }
    turn.stats.model_calls = turn.message_ids.len();
    turn.stats.subagent_model_calls = turn.stats.response_ids.len().saturating_sub(turn.message_ids.len());
    turn.stats.result = turn.result.clone();
    let limit = dirs.boxed().and_then(|boxed| finish_box(spec, boxed, turn.stats));
    if let Some(cli_exit) = turn.stats.box_report.as_ref().and_then(|report| report.cli_exit.as_ref())
        && status == crate::transport::BOX_REPORTED
    {
        // What the CLI itself exited with, as the init saw it.
        status.clone_from(cli_exit);
        turn.stats.exit_status = Some(status.clone());
    }
    drop(dirs);
    if let Some(hit) = limit.filter(|hit| hit.stopped || stop.is_some() || turn.result.is_none()) {
        // The box's limit is why the CLI stopped: that, not the symptom, is the failure.
        return Err(SegmentError::BoxLimit { limit: hit.limit, detail: hit.detail });
    }

    if cancel_deadline.is_some() {
        // The turn finished before the interrupt took: it ends as it finished.
        let finished = stop.is_none()
            && turn.gate.failure().is_none()
            && turn.result.as_ref().is_some_and(|result| !result.is_error);
        if !finished {
            return Ok(SegmentOutcome::Cancelled { killed: matches!(stop, Some(Stop::Cancelled)) });
        }
    }

    if let Some(stop) = stop {
        return Err(match stop {
            Stop::Malformed { problem, excerpt } => {
                SegmentError::MalformedOutput { pid, problem, excerpt, stderr }
            }
            Stop::TooLong => SegmentError::LineTooLong { pid, limit: spec.max_line_bytes, stderr },
            Stop::Io(source) => SegmentError::Io { pid, source, stderr },
            Stop::InitializeTimeout => {
                SegmentError::InitializeTimeout { pid, waited: spec.initialize_timeout, stderr }
            }
            Stop::InitializeRefused(message) => SegmentError::InitializeRefused { pid, message, stderr },
            Stop::ClaimRefused(message) => SegmentError::ClaimRefused { pid, message, stderr },
            Stop::Timeout => SegmentError::Timeout { pid, limit: spec.timeout, stderr },
            Stop::NotRecorded(reason) => SegmentError::NotRecorded { pid, reason },
            Stop::Cancelled => unreachable!("a cancelled segment returned above"),
        });
    }
    drop(turn.deciding);
    drop(turn.asking);
    let gate = &turn.gate;
    if let Some(failure) = gate.failure() {
        return Err(SegmentError::Gate(failure.clone()));
    }
    let Some(result) = turn.result.take() else {
        return Err(SegmentError::ExitedEarly { pid, status, stderr });
    };
    if result.is_error {
        let mut message = result.result.clone().unwrap_or_default();
        for error in result.errors.iter().flatten() {
            message.push_str(if message.is_empty() { "" } else { "; " });
            message.push_str(error);
        }
        let terminal_reason = match &result.terminal_reason {
            Some(reason) => serde_json::to_value(reason)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            None => "none".to_owned(),
        };
        return Err(SegmentError::ErrorResult {
            subtype: result.subtype.clone(),
            terminal_reason,
            message,
            stderr,
        });
    }
    let usage = result.usage.unwrap_or_default();
    let entries = std::mem::take(&mut turn.entries);
    let subagents = std::mem::take(&mut turn.subagents);
    match result.deferred_tool_use {
        Some(deferred) => {
            let call = gate.accept_deferral(&deferred.id, &deferred.name, deferred.input)?;
            Ok(SegmentOutcome::Deferred { session_id: result.session_id, call, entries, subagents, usage })
        }
        None => Ok(SegmentOutcome::Completed {
            session_id: result.session_id,
            result: result.result.unwrap_or_default(),
            entries,
            subagents,
            usage,
        }),
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

/// How to answer a call once the CLI decider has spoken.
enum Reply {
    /// A `hook_callback` of the gate's matcher.
    Hook,
    /// A `can_use_tool` request that asked about this input.
    Permission { input: Value },
}

impl Reply {
    fn frame(&self, request_id: &str, decision: &Decision) -> HostFrame {
        match self {
            Reply::Hook => hook_frame(request_id, decision),
            Reply::Permission { input } => permission_frame(request_id, decision, input),
        }
    }
}

/// A call waiting for the CLI decider.
struct Asked {
    request_id: String,
    query: CliDeciderQuery,
    reply: Reply,
}

/// The CLI decider's questions in flight, each a task.
#[derive(Default)]
struct Deciding {
    tasks: JoinSet<DeciderAnswer>,
    asked: HashMap<tokio::task::Id, Asked>,
}

impl Deciding {
    fn ask(&mut self, decider: &dyn CliDecider, asked: Asked) {
        let answer = decider.decide(asked.query.tool_name().to_owned(), asked.query.input().clone());
        let task = self.tasks.spawn(answer);
        self.asked.insert(task.id(), asked);
    }

    /// The next answered question. Waits forever when none is in flight (use it in a `select!`;
    /// it is cancel-safe).
    async fn next(&mut self) -> (Asked, DeciderAnswer) {
        loop {
            let (id, answer) = match self.tasks.join_next_with_id().await {
                None => return std::future::pending().await,
                Some(Ok((id, answer))) => (id, answer),
                Some(Err(err)) => (err.id(), Err(format!("the CLI tool decider failed: {err}"))),
            };
            if let Some(asked) = self.asked.remove(&id) {
                return (asked, answer);
            }
        }
    }
}

/// The state of one segment's conversation with the CLI.
struct Turn<'a> {
    /// The segment's one gate: only this loop asks it.
    gate: Gate,
    deciding: Deciding,
    /// The agent's own hooks in flight.
    asking: Asking,
    spec: &'a SegmentSpec,
    events: Option<mpsc::UnboundedSender<SegmentEvent>>,
    started: Instant,
    stats: &'a mut SegmentStats,
    result: Option<ResultMessage>,
    entries: Vec<TranscriptEntry>,
    subagents: Vec<SubagentTranscript>,
    message_ids: BTreeSet<String>,
    initialized: bool,
    /// A parked spare's prompt, sent once its claim is answered.
    held_prompt: Option<UserPrompt>,
    /// The inline CLI tool calls started and not finished yet: tool use ID → CLI name.
    cli_calls: HashMap<String, String>,
}

impl Turn<'_> {
    fn on_line(&mut self, line: &str, process: &mut CliProcess, bridge: &mut McpBridge) -> Result<(), Stop> {
        if line.trim().is_empty() {
            return Ok(());
        }
        let frame = match parse_line(line) {
            Ok(frame) => frame,
            Err(ProtocolError::MalformedRequest { request_id, subtype, source }) => {
                let message = format!("the host could not read this {subtype} request: {source}");
                process.send(HostFrame::error_response(request_id, message).to_line());
                return Ok(());
            }
            Err(err) => return Err(Stop::Malformed { problem: err.to_string(), excerpt: excerpt(line) }),
        };
        match frame {
            Frame::ControlRequest(request) => {
                let id = request.request_id;
                let answer = match request.request {
                    CliRequest::HookCallback(hook) => self.on_hook(id, &hook.callback_id, hook.input),
                    CliRequest::CanUseTool(ask) => {
                        let call = ToolCall::new(ask.tool_use_id, ask.tool_name, ask.input.clone());
                        let step = self.gate.can_use_tool(&call);
                        let answer = self.step(id, step, Reply::Permission { input: ask.input });
                        self.cli_call_allowed(&call.tool_use_id, &call.tool_name, &call.input);
                        answer
                    }
                    CliRequest::McpMessage(mcp) => bridge.accept(&id, &mcp.server_name, &mcp.message),
                    other => Some(HostFrame::error_response(
                        id,
                        format!("tollgate does not handle control requests of subtype {:?}", other.subtype()),
                    )),
                };
                if let Some(answer) = answer {
                    process.send(answer.to_line());
                }
            }
            Frame::ControlResponse(response) if response.request_id() == INITIALIZE_ID => {
                match response.decode::<InitializeResponse>() {
                    Ok(init) if init.hooks_applied == Some(true) => {
                        self.initialized = true;
                        self.stats.to_initialized = Some(self.started.elapsed());
                    }
                    Ok(init) => {
                        return Err(Stop::InitializeRefused(format!(
                            "hooks_applied is {:?}, so the gate would not see the tool calls",
                            init.hooks_applied
                        )));
                    }
                    Err(err) => return Err(Stop::InitializeRefused(err.to_string())),
                }
            }
            Frame::ControlResponse(response) if response.request_id() == CLAIM_ID => {
                match response.result() {
                    Ok(_) => {
                        self.stats.to_claimed = Some(self.started.elapsed());
                        if let Some(prompt) = self.held_prompt.take() {
                            process.send(HostFrame::User(prompt).to_line());
                        }
                    }
                    Err(message) => return Err(Stop::ClaimRefused(message.to_owned())),
                }
            }
            Frame::ControlResponse(_) => {}
            Frame::ControlCancelRequest(cancel) => {
                bridge.cancel(&cancel.request_id);
                self.asking.cancel(&cancel.request_id);
            }
            Frame::System(System::Init(init)) if self.stats.init_model.is_none() => {
                self.stats.init_model = init.model;
            }
            Frame::StreamEvent(event) if event.parent_tool_use_id.is_none() => self.on_stream_event(&event),
            Frame::Assistant(message) => {
                let api = message.message;
                if message.is_api_error_message != Some(true) {
                    self.stats.response_models.insert(api.model);
                }
                self.stats.response_ids.insert(api.id.clone());
                if message.parent_tool_use_id.is_none() {
                    self.message_ids.insert(api.id);
                }
            }
            Frame::User(user) if user.parent_tool_use_id.is_none() => {
                self.on_tool_results(&user.message.content);
                self.cli_calls_finished(&user);
            }
            Frame::TranscriptMirror(mirror) if !mirror.is_subagent() => self.entries.extend(mirror.entries),
            Frame::TranscriptMirror(mirror) => collect_subagent(&mut self.subagents, mirror),
            Frame::Result(result) if self.result.is_none() => {
                self.stats.to_result = Some(self.started.elapsed());
                self.result = Some(result);
            }
            _ => {}
        }
        Ok(())
    }

    /// Keeps the CLI's tool result for the approved CLI call this segment resumed.
    fn on_tool_results(&mut self, content: &MessageContent) {
        let Some(pending) = self.gate.pending().filter(|p| p.kind == ToolKind::Cli) else { return };
        let MessageContent::Blocks(blocks) = content else { return };
        for block in blocks {
            if let ContentBlock::ToolResult { tool_use_id, content, is_error } = block
                && *tool_use_id == pending.tool_call_id
            {
                let text = tool_result_text(content.as_ref());
                self.stats.resumed_cli_call = CliRun::Result { text, is_error: is_error.unwrap_or(false) };
            }
        }
    }

    fn on_hook(&mut self, request_id: String, callback_id: &str, input: HookEvent) -> Option<HostFrame> {
        if app_hooks::is_app_callback(callback_id) {
            return self.on_app_hook(request_id, input);
        }
        let input = match input {
            HookEvent::PreToolUse(input) if callback_id == GATE_HOOK_ID => input,
            other => {
                return Some(HostFrame::error_response(
                    request_id,
                    format!("unknown hook callback id {callback_id:?} for {:?}", other.event_name()),
                ));
            }
        };
        let main_conversation = input.agent_id.is_none();
        let call = ToolCall {
            origin: Origin::of_agent(input.agent_id.as_deref()),
            tool_use_id: input.tool_use_id,
            tool_name: input.tool_name,
            input: input.tool_input,
        };
        let step = self.gate.pre_tool_use(&call);
        let answer = self.step(request_id, step, Reply::Hook);
        if main_conversation {
            self.cli_call_allowed(&call.tool_use_id, &call.tool_name, &call.input);
        }
        answer
    }

    fn emit(&self, event: SegmentEvent) {
        if let Some(events) = &self.events {
            let _ = events.send(event);
        }
    }

    /// A main-conversation stream event: text and thinking deltas go to the caller; a
    /// `message_delta`'s stop reason goes to the stats.
    fn on_stream_event(&mut self, event: &StreamEvent) {
        if let Some(text) = event.text_delta() {
            self.stats.to_first_delta.get_or_insert_with(|| self.started.elapsed());
            self.emit(SegmentEvent::TextDelta { text: text.to_owned() });
        } else if let Some(thinking) = event.thinking_delta() {
            self.emit(SegmentEvent::ReasoningDelta { text: thinking.to_owned() });
        } else if let ApiEvent::MessageDelta { delta, .. } = &event.event
            && let Some(reason) = delta.get("stop_reason").and_then(Value::as_str)
        {
            self.stats.finish_reasons.push(reason.to_owned());
        }
    }

    /// A main-conversation CLI tool call the gate has answered: once it is allowed (not a
    /// replay, not a custom tool, which the tool server reports), it starts inline.
    fn cli_call_allowed(&mut self, tool_use_id: &str, tool_name: &str, input: &Value) {
        let Some(Decision::Allow { updated_input }) = self.gate.decision(tool_use_id) else { return };
        let custom = tool_name
            .strip_prefix("mcp__")
            .and_then(|rest| rest.strip_prefix(self.spec.server_name.as_str()))
            .is_some_and(|rest| rest.starts_with("__"));
        if custom || self.cli_calls.contains_key(tool_use_id) {
            return;
        }
        self.cli_calls.insert(tool_use_id.to_owned(), tool_name.to_owned());
        self.emit(SegmentEvent::ToolCallStarted {
            tool_use_id: tool_use_id.to_owned(),
            name: tool_name.to_owned(),
            kind: ToolKind::Cli,
            input: updated_input.unwrap_or_else(|| input.clone()),
        });
    }

    /// The tool results of a main-conversation `user` frame: each inline CLI call they answer
    /// has finished.
    fn cli_calls_finished(&mut self, user: &UserMessage) {
        let MessageContent::Blocks(blocks) = &user.message.content else { return };
        for block in blocks {
            if let ContentBlock::ToolResult { tool_use_id, is_error, .. } = block
                && let Some(name) = self.cli_calls.remove(tool_use_id)
            {
                self.emit(SegmentEvent::ToolCallFinished {
                    tool_use_id: tool_use_id.clone(),
                    name,
                    kind: ToolKind::Cli,
                    is_error: is_error.unwrap_or(false),
                });
            }
        }
    }

    /// An application matcher fired: the agent's hook is asked, except about the pending call of a
    /// resumed segment (answered `{}` at once: it passed the hooks when it was deferred).
    fn on_app_hook(&mut self, request_id: String, input: HookEvent) -> Option<HostFrame> {
        let pending = self.gate.pending().map(|p| p.tool_call_id.as_str());
        let hook = match (&self.spec.app_hook, &input) {
            (_, HookEvent::PreToolUse(call)) if pending == Some(call.tool_use_id.as_str()) => None,
            (hook, _) => hook.as_deref(),
        };
        match hook {
            Some(hook) => self.asking.ask(hook, request_id, &input),
            None => Some(HostFrame::app_hook_answer(request_id, &Default::default())),
        }
    }

    /// The answer for a step of the gate: at once for a decision; later, from
    /// [`Deciding::next`], when the CLI decider is asked.
    fn step(&mut self, request_id: String, step: Step, reply: Reply) -> Option<HostFrame> {
        match step {
            Step::Decided(decision) => {
                if let Decision::Replay(record) = &decision
                    && record.kind == ToolKind::Cli
                    && self.stats.resumed_cli_call == CliRun::NotStarted
                {
                    // The CLI runs the approved call now; its result comes as a tool result.
                    self.stats.resumed_cli_call = CliRun::NoResult;
                }
                Some(reply.frame(&request_id, &decision))
            }
            Step::AskCliDecider(query) => match &self.spec.cli_decider {
                Some(decider) => {
                    self.deciding.ask(decider.as_ref(), Asked { request_id, query, reply });
                    None
                }
                None => {
                    let decision = self.gate.answer_cli_decider(query, Ok(None));
                    Some(reply.frame(&request_id, &decision))
                }
            },
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

/// The text of a tool result's `content`: a string, or its blocks' texts joined by newlines (other
/// blocks become a placeholder naming their type: an approved CLI call's record keeps text).
fn tool_result_text(content: Option<&Value>) -> String {
    match content {
        None => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|block| match (block["type"].as_str(), block["text"].as_str()) {
                (Some("text"), Some(text)) => text.to_owned(),
                (kind, _) => tollgate_engine::texts::content_omitted(kind.unwrap_or("unknown")),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Some(other) => other.to_string(),
    }
}

/// Appends a subagent transcript's mirrored entries to its transcript (a new one for a subagent
/// not seen yet in the segment).
fn collect_subagent(subagents: &mut Vec<SubagentTranscript>, mirror: TranscriptMirror) {
    let Some(agent_id) = mirror.subagent_id() else { return };
    match subagents.iter_mut().find(|s| s.agent_id == agent_id) {
        Some(transcript) => transcript.entries.extend(mirror.entries),
        None => subagents.push(SubagentTranscript { agent_id: agent_id.to_owned(), entries: mirror.entries }),
    }
}

/// The API message ID of an `assistant` transcript entry.
fn assistant_message_id(entry: &TranscriptEntry) -> Option<String> {
    let value: Value = serde_json::from_str(entry.as_str()).ok()?;
    (value["type"] == "assistant").then(|| value["message"]["id"].as_str().map(str::to_owned)).flatten()
}

/// The first 200 characters of a line, for an error message.
fn excerpt(line: &str) -> String {
    let mut out: String = line.chars().take(200).collect();
    if out.len() < line.len() {
        out.push_str(&format!("… ({} bytes)", line.len()));
    }
    out
}
