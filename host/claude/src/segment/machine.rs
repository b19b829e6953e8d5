//! The segment's conversation with the CLI, without I/O: frames in, effects out.
//!
//! Read [`SegmentMachine`] first. It owns the segment's [`Gate`] and everything the CLI's frames
//! change (the result, the transcript entries, the stats), and answers what the CLI asks. It never
//! touches the process, the MCP tool server, a task or the clock: the driver in
//! [`crate::segment`] feeds it what happened (`notify_*`, with the time since the segment started
//! where it matters) and carries out what it asks for ([`SegmentMachine::take_effect`]): a frame
//! to write, stdin to close, an `mcp_message` for the tool server's bridge, a question for the CLI
//! decider or an application hook, an event for the caller, the end of the loop. Its deadlines are
//! read with [`SegmentMachine::next_timer`] and fire through [`SegmentMachine::notify_timer`].
//! Once the loop has ended and the process is gone, [`SegmentMachine::finish`] says how the
//! segment ended.
//!
//! It does not own the process, the pipes or the scratch directories (the driver does), the tool
//! server ([`crate::mcp`]), the decisions (the [`Gate`]) or the bytes of a frame
//! (`tollgate-protocol`, [`crate::answer`]).
//!
//! # Caveats
//!
//! - One driver owns it and feeds it in the order things happened; the effects of one input are
//!   taken before the next input is given.
//! - After [`Effect::Shutdown`] it takes no more input (what comes is ignored): the driver stops
//!   its loop, shuts the process down and calls [`SegmentMachine::finish`].

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use serde_json::Value;
use tollgate_engine::catalog::ToolKind;
use tollgate_engine::gate::{CliDeciderQuery, Decision, Gate, McpPermit, Next, Origin, ToolCall};
use tollgate_engine::hooks::{HookAnswer, HookCall};
use tollgate_engine::session::tools::CliRun;
use tollgate_protocol::{
    ApiEvent, ClaimSession, CliRequest, ContentBlock, Frame, HookEvent, HostFrame, Initialize,
    InitializeResponse, MessageContent, ProtocolError, ResultMessage, StreamEvent, System, TranscriptEntry,
    TranscriptMirror, UserMessage, UserPrompt, parse_line,
};

use super::{DeciderAnswer, SegmentEvent, SegmentOutcome, SegmentSpec, SegmentStats, SubagentTranscript};
use crate::answer::{hook_frame, permission_frame};
use crate::app_hooks;
use crate::error::SegmentError;
use crate::transport::LineEvent;

/// The request id of the host's `initialize`.
pub(crate) const INITIALIZE_ID: &str = "tollgate_initialize";
/// The request id of the host's `claim_session` (a parked spare's, [`crate::pool`]).
const CLAIM_ID: &str = "tollgate_claim";
/// The gate's hook callback id.
pub(crate) const GATE_HOOK_ID: &str = "tollgate_gate";
/// The request id of the host's `interrupt` (a cancelled segment's).
const INTERRUPT_ID: &str = "tollgate_interrupt";
/// How long the CLI may take to exit after its turn ended (stdin closed).
const EXIT_GRACE: Duration = Duration::from_secs(5);

/// What the machine needs of the [`SegmentSpec`]: names and limits, nothing that runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// The sdk MCP server's name (its tools are reported by the tool server, not from frames).
    pub server_name: String,
    /// Whether the agent has its own hooks to ask ([`SegmentSpec::app_hook`]).
    pub app_hook: bool,
    /// Whether the agent has a CLI decider to ask ([`SegmentSpec::cli_decider`]).
    pub cli_decider: bool,
    /// [`SegmentSpec::initialize_timeout`].
    pub initialize_timeout: Duration,
    /// [`SegmentSpec::timeout`].
    pub timeout: Duration,
    /// [`SegmentSpec::drain_timeout`].
    pub drain_timeout: Duration,
    /// [`SegmentSpec::cancel_grace`].
    pub cancel_grace: Duration,
    /// [`SegmentSpec::max_line_bytes`] (named in the error of a longer line).
    pub max_line_bytes: usize,
}

impl Settings {
    /// The settings of `spec`.
    pub fn of(spec: &SegmentSpec) -> Self {
        Settings {
            server_name: spec.server_name.clone(),
            app_hook: spec.app_hook.is_some(),
            cli_decider: spec.cli_decider.is_some(),
            initialize_timeout: spec.initialize_timeout,
            timeout: spec.timeout,
            drain_timeout: spec.drain_timeout,
            cancel_grace: spec.cancel_grace,
            max_line_bytes: spec.max_line_bytes,
        }
    }
}

/// The first frames the segment writes.
#[derive(Debug)]
pub(crate) enum Opening {
    /// A CLI that waits for its `initialize`: that, then the prompt (if any) right after it, as
    /// the TypeScript SDK pipelines them (docs/PROTOCOL.md, "The prompt").
    Initialize {
        /// The `initialize` request.
        initialize: Initialize,
        /// The prompt; `None` for a resumed deferred call.
        prompt: Option<UserPrompt>,
    },
    /// A parked spare, whose `initialize` went when it was started: `claim_session`, and the
    /// prompt only once the claim is answered, so a refused claim leaves nothing run.
    Claim {
        /// The `claim_session` request.
        claim: ClaimSession,
        /// The prompt, held until the claim's answer.
        prompt: Option<UserPrompt>,
    },
}

/// What the driver must do. See the module docs.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Write this frame to the CLI's stdin.
    Write(HostFrame),
    /// Close the CLI's stdin (it never exits by itself after a result) and read stdout to EOF.
    CloseStdin,
    /// Hand this `mcp_message` to the tool server's bridge, which writes its answer.
    Mcp {
        /// The control request's id.
        request_id: String,
        /// The server the CLI addressed.
        server_name: String,
        /// The JSON-RPC message.
        message: Value,
    },
    /// The CLI withdrew the request `request_id`: the bridge drops its answer, and an application
    /// hook asked for it is stopped.
    Withdraw(String),
    /// Ask the CLI decider; its answer comes back through [`SegmentMachine::notify_decider_answer`].
    AskDecider {
        /// Names the question in the answer.
        ticket: u64,
        /// The CLI tool's name.
        tool_name: String,
        /// The call's input.
        input: Value,
    },
    /// Ask the application hook; its answer comes back through
    /// [`SegmentMachine::notify_app_hook_answer`].
    AskAppHook {
        /// The CLI's request id.
        request_id: String,
        /// What the hook is told.
        call: HookCall,
    },
    /// Tell the caller.
    Event(SegmentEvent),
    /// The loop is over: stop reading, shut the process down, allowing it `grace` to exit (zero
    /// when the segment stopped early), then call [`SegmentMachine::finish`].
    Shutdown {
        /// How long the process may take to exit before its group is killed.
        grace: Duration,
    },
}

/// A deadline of the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// The CLI has not answered `initialize`.
    Initialize,
    /// A parked spare's claim is unanswered as long: it counts as refused.
    Claim,
    /// A cancelled CLI has not ended its turn within the grace.
    CancelGrace,
    /// The whole segment's limit.
    Segment,
    /// The CLI has not closed stdout after its result.
    Drain,
}

/// Why the loop stopped early, before the stderr tail is known.
#[derive(Debug)]
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

/// How to answer a call once the CLI decider has spoken.
#[derive(Debug)]
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
#[derive(Debug)]
struct Asked {
    request_id: String,
    query: CliDeciderQuery,
    reply: Reply,
}

/// What the process left when it was gone.
#[derive(Debug)]
pub(crate) struct Exit {
    /// How it exited.
    pub status: String,
    /// The tail of its stderr.
    pub stderr: String,
    /// The box's limit that stopped it, when boxed and one did.
    pub box_limit: Option<tollgate_box::LimitHit>,
}

/// One segment's conversation with the CLI. See the module docs.
pub(crate) struct SegmentMachine<'a> {
    settings: Settings,
    pid: u32,
    /// The segment's one gate: only this machine asks it.
    gate: Gate,
    stats: &'a mut SegmentStats,
    effects: VecDeque<Effect>,
    /// The CLI decider's questions in flight, by ticket.
    deciding: HashMap<u64, Asked>,
    next_ticket: u64,
    /// The application hooks in flight: the CLI's request id → the event asked about.
    asking: HashMap<String, tollgate_engine::hooks::HookEvent>,
    result: Option<ResultMessage>,
    entries: Vec<TranscriptEntry>,
    subagents: Vec<SubagentTranscript>,
    message_ids: BTreeSet<String>,
    initialized: bool,
    /// A parked spare's prompt, sent once its claim is answered.
    held_prompt: Option<UserPrompt>,
    /// The inline CLI tool calls started and not finished yet: tool use ID → CLI name.
    cli_calls: HashMap<String, String>,
    /// When the drain after the result ends, once it started.
    drain_deadline: Option<Duration>,
    /// Once cancelled: when the CLI is killed if its turn has not ended.
    cancel_deadline: Option<Duration>,
    /// `Some` once the loop is over: why it stopped early, if it did.
    ended: Option<Option<Stop>>,
}

impl<'a> SegmentMachine<'a> {
    /// The machine of a segment whose CLI (process `pid`) has just started or been taken over;
    /// the opening frames are its first effects. `stats` receives what the frames tell.
    pub fn new(
        settings: Settings,
        pid: u32,
        gate: Gate,
        opening: Opening,
        stats: &'a mut SegmentStats,
    ) -> Self {
        let mut machine = SegmentMachine {
            settings,
            pid,
            gate,
            stats,
            effects: VecDeque::new(),
            deciding: HashMap::new(),
            next_ticket: 0,
            asking: HashMap::new(),
            result: None,
            entries: Vec::new(),
            subagents: Vec::new(),
            message_ids: BTreeSet::new(),
            initialized: false,
            held_prompt: None,
            cli_calls: HashMap::new(),
            drain_deadline: None,
            cancel_deadline: None,
            ended: None,
        };
        match opening {
            Opening::Claim { claim, prompt } => {
                machine.write(HostFrame::claim_session(CLAIM_ID, claim));
                machine.held_prompt = prompt;
            }
            Opening::Initialize { initialize, prompt } => {
                machine.write(HostFrame::initialize(INITIALIZE_ID, initialize));
                if let Some(prompt) = prompt {
                    machine.write(HostFrame::User(prompt));
                }
            }
        }
        machine
    }

    /// The next thing to do, in order; `None` when nothing is left until the next input.
    pub fn take_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Whether the loop is over ([`Effect::Shutdown`] was given).
    pub fn is_over(&self) -> bool {
        self.ended.is_some()
    }

    /// Whether the segment was cancelled ([`Self::notify_cancel`]).
    pub fn is_cancelling(&self) -> bool {
        self.cancel_deadline.is_some()
    }

    /// The stats the frames fill in, for what the driver adds (the box's report).
    pub fn stats_mut(&mut self) -> &mut SegmentStats {
        self.stats
    }

    /// The earliest deadline that is armed, as time since the segment started. The segment's own
    /// limit is always armed; of two at the same time, the first listed in [`Timer`] is given.
    pub fn next_timer(&self) -> (Duration, Timer) {
        let init = self.settings.initialize_timeout;
        [
            (!self.initialized).then_some((init, Timer::Initialize)),
            (self.initialized && self.held_prompt.is_some()).then_some((init, Timer::Claim)),
            self.cancel_deadline.filter(|_| self.result.is_none()).map(|at| (at, Timer::CancelGrace)),
            Some((self.settings.timeout, Timer::Segment)),
            self.drain_deadline.map(|at| (at, Timer::Drain)),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|(at, _)| *at)
        .expect("the segment's limit is always armed")
    }

    /// What the CLI's stdout gave, `now` after the segment started.
    pub fn notify_stdout(&mut self, event: LineEvent, now: Duration) {
        if self.is_over() {
            return;
        }
        match event {
            LineEvent::Line(line) => {
                if let Err(stop) = self.on_line(&line, now) {
                    return self.end(Some(stop));
                }
                if self.result.is_some() && self.drain_deadline.is_none() {
                    // The CLI never exits by itself after a result: close stdin, read to EOF.
                    self.effects.push_back(Effect::CloseStdin);
                    self.drain_deadline = Some(now + self.settings.drain_timeout);
                }
            }
            LineEvent::Eof => self.end(None),
            LineEvent::TooLong => self.end(Some(Stop::TooLong)),
            LineEvent::Error(err) => self.end(Some(Stop::Io(err))),
        }
    }

    /// A deadline of [`Self::next_timer`] passed.
    pub fn notify_timer(&mut self, timer: Timer) {
        if self.is_over() {
            return;
        }
        match timer {
            Timer::Initialize => self.end(Some(Stop::InitializeTimeout)),
            // A claim unanswered as long counts as refused: no prompt went, a CLI of its own runs.
            Timer::Claim => self.end(Some(Stop::ClaimRefused(format!(
                "no answer to claim_session within {:?}",
                self.settings.initialize_timeout
            )))),
            Timer::CancelGrace => {
                tracing::warn!(
                    pid = self.pid,
                    "the cancelled CLI did not end its turn within the grace; killing it"
                );
                self.end(Some(Stop::Cancelled));
            }
            Timer::Segment => self.end(Some(Stop::Timeout)),
            Timer::Drain => {
                tracing::warn!(pid = self.pid, "the CLI did not close stdout after its result; killing it");
                self.end(None);
            }
        }
    }

    /// The segment is cancelled, `now` after it started: the CLI gets `interrupt`, and is killed
    /// if its turn has not ended after the grace. A second call does nothing.
    pub fn notify_cancel(&mut self, now: Duration) {
        if self.is_over() || self.is_cancelling() {
            return;
        }
        tracing::info!(pid = self.pid, "the segment is cancelled: interrupting the CLI");
        self.write(HostFrame::interrupt(INTERRUPT_ID));
        self.cancel_deadline = Some(now + self.settings.cancel_grace);
    }

    /// The tool server asks whether a `tools/call` of `tool` under `tool_use_id` may run.
    pub fn permit_mcp_call(&mut self, tool_use_id: Option<&str>, tool: &str) -> McpPermit {
        self.gate.permit_mcp_call(tool_use_id, tool)
    }

    /// A recorded inline write's record was not committed: the segment stops.
    pub fn notify_not_recorded(&mut self, message: String) {
        if !self.is_over() {
            self.end(Some(Stop::NotRecorded(message)));
        }
    }

    /// The CLI decider answered the question of [`Effect::AskDecider`] `ticket`.
    pub fn notify_decider_answer(&mut self, ticket: u64, answer: DeciderAnswer) {
        let Some(asked) = self.deciding.remove(&ticket) else { return };
        if self.is_over() {
            return;
        }
        let (tool_use_id, tool_name, input) = (
            asked.query.tool_use_id().to_owned(),
            asked.query.tool_name().to_owned(),
            asked.query.input().clone(),
        );
        let decision = self.gate.answer_cli_decider(asked.query, answer);
        self.write(asked.reply.frame(&asked.request_id, &decision));
        self.cli_call_allowed(&tool_use_id, &tool_name, &input);
    }

    /// The application hook answered the request `request_id` of [`Effect::AskAppHook`]. The
    /// answer is checked before it goes out.
    pub fn notify_app_hook_answer(&mut self, request_id: String, answer: Result<HookAnswer, String>) {
        let Some(event) = self.asking.remove(&request_id) else { return };
        if !self.is_over() {
            self.write(app_hooks::answer_frame(request_id, event, answer));
        }
    }

    /// How the segment ended, once the loop is over and the process gone. The stats get the
    /// exit and the model calls counted.
    pub fn finish(self, exit: Exit) -> Result<SegmentOutcome, SegmentError> {
        let SegmentMachine {
            settings,
            pid,
            gate,
            stats,
            result,
            entries,
            subagents,
            message_ids,
            cancel_deadline,
            ended,
            ..
        } = self;
        let stop = ended.flatten();
        let Exit { status, stderr, box_limit } = exit;
        stats.exit_status = Some(status.clone());
        stats.stderr_tail = stderr.clone();
        // A subagent's last reply reaches stdout only in its transcript: its message IDs count too.
        for entry in subagents.iter().flat_map(|s| &s.entries) {
            if let Some(id) = assistant_message_id(entry) {
                stats.response_ids.insert(id);
            }
        }
        stats.model_calls = message_ids.len();
        stats.subagent_model_calls = stats.response_ids.len().saturating_sub(message_ids.len());
        stats.result = result.clone();
        if let Some(hit) = box_limit.filter(|hit| hit.stopped || stop.is_some() || result.is_none()) {
            // The box's limit is why the CLI stopped: that, not the symptom, is the failure.
            return Err(SegmentError::BoxLimit { limit: hit.limit, detail: hit.detail });
        }
        if cancel_deadline.is_some() {
            // The turn finished before the interrupt took: it ends as it finished.
            let finished = stop.is_none()
                && gate.failure().is_none()
                && result.as_ref().is_some_and(|result| !result.is_error);
            if !finished {
                return Ok(SegmentOutcome::Cancelled { killed: matches!(stop, Some(Stop::Cancelled)) });
            }
        }
        if let Some(stop) = stop {
            return Err(stopped(stop, pid, &settings, stderr));
        }
        if let Some(failure) = gate.failure() {
            return Err(SegmentError::Gate(failure.clone()));
        }
        let Some(result) = result else {
            return Err(SegmentError::ExitedEarly { pid, status, stderr });
        };
        if result.is_error {
            return Err(error_result(&result, stderr));
        }
        let usage = result.usage.unwrap_or_default();
        match result.deferred_tool_use {
            Some(deferred) => {
                let call = gate.accept_deferral(&deferred.id, &deferred.name, deferred.input)?;
                Ok(SegmentOutcome::Deferred {
                    session_id: result.session_id,
                    call,
                    entries,
                    subagents,
                    usage,
                })
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

    fn write(&mut self, frame: HostFrame) {
        self.effects.push_back(Effect::Write(frame));
    }

    fn emit(&mut self, event: SegmentEvent) {
        self.effects.push_back(Effect::Event(event));
    }

    /// The loop is over. A parked spare that failed its `initialize` before its prompt went is a
    /// refused claim too: nothing ran, and a CLI of its own can still serve the segment.
    fn end(&mut self, stop: Option<Stop>) {
        let parked = self.held_prompt.is_some();
        let stop = match stop {
            Some(Stop::InitializeTimeout) if parked => Some(Stop::ClaimRefused(format!(
                "no answer to the parked CLI's initialize within {:?}",
                self.settings.initialize_timeout
            ))),
            Some(Stop::InitializeRefused(message)) if parked => {
                Some(Stop::ClaimRefused(format!("the parked CLI refused its initialize: {message}")))
            }
            other => other,
        };
        let grace = if stop.is_some() { Duration::ZERO } else { EXIT_GRACE };
        self.ended = Some(stop);
        self.effects.push_back(Effect::Shutdown { grace });
    }

    fn on_line(&mut self, line: &str, now: Duration) -> Result<(), Stop> {
        if line.trim().is_empty() {
            return Ok(());
        }
        let frame = match parse_line(line) {
            Ok(frame) => frame,
            Err(ProtocolError::MalformedRequest { request_id, subtype, source }) => {
                let message = format!("the host could not read this {subtype} request: {source}");
                self.write(HostFrame::error_response(request_id, message));
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
                    CliRequest::McpMessage(mcp) => {
                        self.effects.push_back(Effect::Mcp {
                            request_id: id,
                            server_name: mcp.server_name,
                            message: mcp.message,
                        });
                        None
                    }
                    other => Some(HostFrame::error_response(
                        id,
                        format!("tollgate does not handle control requests of subtype {:?}", other.subtype()),
                    )),
                };
                if let Some(answer) = answer {
                    self.write(answer);
                }
            }
            Frame::ControlResponse(response) if response.request_id() == INITIALIZE_ID => {
                match response.decode::<InitializeResponse>() {
                    Ok(init) if init.hooks_applied == Some(true) => {
                        self.initialized = true;
                        self.stats.to_initialized = Some(now);
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
                        self.stats.to_claimed = Some(now);
                        if let Some(prompt) = self.held_prompt.take() {
                            self.write(HostFrame::User(prompt));
                        }
                    }
                    Err(message) => return Err(Stop::ClaimRefused(message.to_owned())),
                }
            }
            Frame::ControlResponse(_) => {}
            Frame::ControlCancelRequest(cancel) => {
                self.effects.push_back(Effect::Withdraw(cancel.request_id))
            }
            Frame::System(System::Init(init)) if self.stats.init_model.is_none() => {
                self.stats.init_model = init.model;
                self.stats.init_plugins = init.plugins.into_iter().map(|plugin| plugin.name).collect();
            }
            Frame::StreamEvent(event) if event.parent_tool_use_id.is_none() => {
                self.on_stream_event(&event, now)
            }
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
                self.stats.to_result = Some(now);
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

    /// A main-conversation stream event: text and thinking deltas go to the caller; a
    /// `message_delta`'s stop reason goes to the stats.
    fn on_stream_event(&mut self, event: &StreamEvent, now: Duration) {
        if let Some(text) = event.text_delta() {
            self.stats.to_first_delta.get_or_insert(now);
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
            .and_then(|rest| rest.strip_prefix(self.settings.server_name.as_str()))
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
    /// resumed segment (answered `{}` at once: it passed the hooks when it was deferred). An event
    /// no application hook registers is answered at once with an error.
    fn on_app_hook(&mut self, request_id: String, input: HookEvent) -> Option<HostFrame> {
        let pending = self.gate.pending().map(|p| p.tool_call_id.as_str());
        let ask = match &input {
            HookEvent::PreToolUse(call) if pending == Some(call.tool_use_id.as_str()) => false,
            _ => self.settings.app_hook,
        };
        if !ask {
            return Some(HostFrame::app_hook_answer(request_id, &Default::default()));
        }
        let Some(call) = app_hooks::call_of(&input) else {
            return Some(HostFrame::error_response(
                request_id,
                format!("tollgate registers no application hook for {:?}", input.event_name()),
            ));
        };
        let event = call.event.expect("call_of names the event");
        self.asking.insert(request_id.clone(), event);
        self.effects.push_back(Effect::AskAppHook { request_id, call });
        None
    }

    /// The answer for a step of the gate: at once for a decision; later, from
    /// [`Self::notify_decider_answer`], when the CLI decider is asked.
    fn step(&mut self, request_id: String, step: Next, reply: Reply) -> Option<HostFrame> {
        match step {
            Next::Decided(decision) => {
                if let Decision::Replay(record) = &decision
                    && record.kind == ToolKind::Cli
                    && self.stats.resumed_cli_call == CliRun::NotStarted
                {
                    // The CLI runs the approved call now; its result comes as a tool result.
                    self.stats.resumed_cli_call = CliRun::NoResult;
                }
                Some(reply.frame(&request_id, &decision))
            }
            Next::AskCliDecider(query) if self.settings.cli_decider => {
                let ticket = self.next_ticket;
                self.next_ticket += 1;
                self.effects.push_back(Effect::AskDecider {
                    ticket,
                    tool_name: query.tool_name().to_owned(),
                    input: query.input().clone(),
                });
                self.deciding.insert(ticket, Asked { request_id, query, reply });
                None
            }
            Next::AskCliDecider(query) => {
                let decision = self.gate.answer_cli_decider(query, Ok(None));
                Some(reply.frame(&request_id, &decision))
            }
        }
    }
}

/// The error of a segment that stopped early.
fn stopped(stop: Stop, pid: u32, settings: &Settings, stderr: String) -> SegmentError {
    match stop {
        Stop::Malformed { problem, excerpt } => {
            SegmentError::MalformedOutput { pid, problem, excerpt, stderr }
        }
        Stop::TooLong => SegmentError::LineTooLong { pid, limit: settings.max_line_bytes, stderr },
        Stop::Io(source) => SegmentError::Io { pid, source, stderr },
        Stop::InitializeTimeout => {
            SegmentError::InitializeTimeout { pid, waited: settings.initialize_timeout, stderr }
        }
        Stop::InitializeRefused(message) => SegmentError::InitializeRefused { pid, message, stderr },
        Stop::ClaimRefused(message) => SegmentError::ClaimRefused { pid, message, stderr },
        Stop::Timeout => SegmentError::Timeout { pid, limit: settings.timeout, stderr },
        Stop::NotRecorded(reason) => SegmentError::NotRecorded { pid, reason },
        Stop::Cancelled => unreachable!("a cancelled segment ends as cancelled"),
    }
}

/// The error of a `result` the CLI marked as an error: its text and errors, and why its turn
/// ended.
fn error_result(result: &ResultMessage, stderr: String) -> SegmentError {
    let mut message = result.result.clone().unwrap_or_default();
    for error in result.errors.iter().flatten() {
        message.push_str(if message.is_empty() { "" } else { "; " });
        message.push_str(error);
    }
    let terminal_reason = match &result.terminal_reason {
        Some(reason) => {
            serde_json::to_value(reason).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
        }
        None => "none".to_owned(),
    };
    SegmentError::ErrorResult { subtype: result.subtype.clone(), terminal_reason, message, stderr }
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

#[cfg(test)]
mod tests;
