//! The values that go into and come out of a [`crate::Store`]: sessions, items, steps, events,
//! interrupts, tool call records, and the [`Commit`] that changes them together.
//!
//! Read [`Commit`] first: it is the one way a Worker changes a session. Every JSON value is a
//! [`RawValue`]: the store keeps the caller's bytes exactly and never re-serializes them (the CLI
//! finds answered deferred calls by a raw substring search, so a transcript entry must come back
//! byte for byte).
//!
//! This module does not know what a step kind, an item kind or a status *means*: those are the
//! state machine's (`tollgate-engine`). The store only keeps them and enforces the durable
//! mechanics documented on [`crate::Store`].
//!
//! # Caveats
//!
//! - Times are milliseconds since the Unix epoch on the **database** clock.
//! - Sequence numbers start at 1 and grow by one per stored row within a session; an item whose
//!   `uuid` was already stored takes no number.

use std::time::Duration;

use serde_json::value::RawValue;

/// Token and call counters of a session, added up by [`SessionUpdate::add_usage`]: the state
/// machine's.
pub use tollgate_engine::session::Usage;

/// A session as stored.
#[derive(Clone, Debug)]
pub struct Session {
    /// The client's name for it (`session-42`).
    pub session_id: String,
    /// Free text owned by the state machine (`idle`, `running`, `awaiting_approval`, …).
    pub status: String,
    /// The state machine's run state, a JSON object with an integer `version`
    /// (`{"version":1,…}`), exactly as last written.
    pub run_state: Box<RawValue>,
    /// Totals of every [`SessionUpdate::add_usage`].
    pub usage: Usage,
    /// The seq the next item will get (items so far: `next_item_seq - 1` at most).
    pub next_item_seq: i64,
    /// The seq the next event will get.
    pub next_event_seq: i64,
    /// Creation time (DB clock, ms).
    pub created_at: i64,
    /// Last change (DB clock, ms).
    pub updated_at: i64,
    /// The digest it runs under (`None`: not known).
    pub agent: Option<AgentDigest>,
    /// The agent it belongs to: only a Worker serving this agent claims its steps (`None`: a
    /// session from before agents had names, not adopted yet; no Worker claims it).
    pub agent_name: Option<String>,
}

/// The agent a session runs under: the digest of the agent bundle it started with (or was
/// upgraded to), and whether only a Worker that loaded exactly that digest may run its steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentDigest {
    /// The agent digest, e.g. `sha256:3f…` (opaque to the store; 1 to 200 bytes).
    pub digest: String,
    /// `true`: only [`crate::Store::claim_for`] with this digest claims the session's steps;
    /// `false`: the digest is a record only and any Worker runs it.
    pub pinned: bool,
}

/// What [`crate::Store::upgrade_session`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeReceipt {
    /// The agent before.
    pub from: Option<AgentDigest>,
    /// The agent now (pinned to the digest asked for).
    pub to: AgentDigest,
    /// The seq of the `agent_upgraded` event, `None` when the session was already pinned to it
    /// (nothing was written).
    pub event_seq: Option<i64>,
}

/// A session in a listing ([`crate::Store::list_sessions`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSummary {
    /// The client's name for it.
    pub session_id: String,
    /// Its status.
    pub status: String,
    /// Creation time (DB clock, ms).
    pub created_at: i64,
    /// Last change (DB clock, ms).
    pub updated_at: i64,
    /// The digest it runs under.
    pub agent: Option<AgentDigest>,
    /// The agent it belongs to (`None`: not adopted yet).
    pub agent_name: Option<String>,
}

/// A session to create with [`crate::Store::create_session`].
#[derive(Clone, Debug)]
pub struct NewSession {
    /// The client's name for it.
    pub session_id: String,
    /// Initial status.
    pub status: String,
    /// Initial run state: a JSON object with an integer `version`.
    pub run_state: Box<RawValue>,
    /// The digest it runs under (`None`: not known).
    pub agent: Option<AgentDigest>,
    /// The agent it belongs to (see [`check_agent_name`]): only Workers serving it claim the
    /// session's steps. `None` leaves the session to be adopted ([`crate::agents`]).
    pub agent_name: Option<String>,
}

/// A fork to create ([`crate::Store::fork_session`]): a new session whose history is the
/// parent's items up to `through_item_seq`, read through, never copied.
#[derive(Clone, Debug)]
pub struct NewFork {
    /// The fork's id (a new session).
    pub session_id: String,
    /// The session it is forked from.
    pub parent_id: String,
    /// The parent's turn it is forked at (from 1; the store keeps it, the state machine means it).
    pub turn: i64,
    /// The parent's last item the fork inherits (0: none); its own items start after it.
    pub through_item_seq: i64,
    /// The fork's run state: a JSON object with an integer `version`.
    pub run_state: Box<RawValue>,
    /// The digest it runs under.
    pub agent: Option<AgentDigest>,
    /// The agent it belongs to.
    pub agent_name: Option<String>,
    /// Who forked it: recorded as its starter and in its `forked` audit row (1 to
    /// [`crate::audit::MAX_AUDIT_TEXT`] bytes).
    pub forked_by: String,
    /// A dry fork: its writes are answered from the parent's records or refused (the Worker's
    /// rule; the store only keeps the mark).
    pub dry: bool,
}

/// Where a fork's history comes from ([`crate::Store::lineage`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lineage {
    /// The fork.
    pub session_id: String,
    /// The session it was forked from.
    pub parent_id: String,
    /// The parent's turn it was forked at.
    pub turn: i64,
    /// The parent's last item it inherits.
    pub through_item_seq: i64,
    /// The parent's last message (of the projection, [`StoredMessage::seq`]) it inherits.
    pub through_message_seq: i64,
    /// A dry fork.
    pub dry: bool,
    /// Who forked it.
    pub forked_by: String,
    /// When (DB clock, ms).
    pub created_at: i64,
}

/// Steps of one agent due and unclaimed for longer than a bound ([`crate::Store::unclaimed_steps`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnclaimedSteps {
    /// The agent (`""`: sessions that name none, which no Worker claims).
    pub agent: String,
    /// How many.
    pub steps: i64,
    /// The earliest `due_at` among them (DB clock, ms).
    pub oldest_due_at: i64,
}

/// What a Worker serves, for [`crate::Store::claim_for`]: steps of sessions of one of `agents`,
/// unpinned or pinned to one of `digests`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimScope {
    /// The agent names it serves.
    pub agents: Vec<String>,
    /// The digests whose pinned sessions it may run (the locked bundles it loaded).
    pub digests: Vec<String>,
    /// Only sessions pinned to one of `digests`, none unpinned: a Worker kept to finish the
    /// sessions of a previous version (`tollgate dev`) takes no new session.
    pub pinned_only: bool,
}

/// The longest agent name, in bytes.
pub const MAX_AGENT_NAME: usize = 64;

/// Refuses an agent name that is not 1 to [`MAX_AGENT_NAME`] ASCII letters, digits, `-` and `_`,
/// starting with a letter or digit. `@` (a version) and `:` (a digest) never appear in one, so
/// `support`, `support@3` and `sha256:…` cannot be confused.
///
/// # Errors
/// What is wrong with `name`, quoting it.
pub fn check_agent_name(name: &str) -> Result<(), String> {
    let well_formed = !name.is_empty()
        && name.len() <= MAX_AGENT_NAME
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if well_formed {
        Ok(())
    } else {
        Err(format!(
            "the agent name {name:?} must be 1 to {MAX_AGENT_NAME} ASCII letters, digits, `-` and `_`, \
             starting with a letter or a digit"
        ))
    }
}

/// A change of the session row inside a commit. `None` fields stay as they are.
#[derive(Clone, Debug, Default)]
pub struct SessionUpdate {
    /// New status.
    pub status: Option<String>,
    /// New run state (a JSON object with an integer `version`).
    pub run_state: Option<Box<RawValue>>,
    /// Added to the session's usage totals.
    pub add_usage: Usage,
}

/// One entry of a session's ordered, append-only item log.
#[derive(Clone, Debug)]
pub struct Item {
    /// Position in the session's log, from 1.
    pub seq: i64,
    /// What it is, e.g. `user_prompt`, `transcript_entry`, `turn_failure_note`.
    pub kind: String,
    /// A transcript entry's `uuid`: the log holds each uuid once.
    pub uuid: Option<String>,
    /// The turn it belongs to, when the state machine says so.
    pub turn_id: Option<String>,
    /// The JSON exactly as appended (a transcript entry: the CLI's bytes).
    pub body: Box<RawValue>,
    /// When it was appended (DB clock, ms).
    pub created_at: i64,
}

/// An item to append.
#[derive(Clone, Debug)]
pub struct NewItem {
    /// See [`Item::kind`].
    pub kind: String,
    /// See [`Item::uuid`]. An item whose uuid the session already holds is skipped (the first
    /// copy stays, byte for byte).
    pub uuid: Option<String>,
    /// See [`Item::turn_id`].
    pub turn_id: Option<String>,
    /// See [`Item::body`].
    pub body: Box<RawValue>,
}

/// Where a step is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepState {
    /// Claimable once `due_at` has passed.
    Queued,
    /// Held by a Worker until `due_at` (the lease); claimable again after it.
    Claimed,
    /// Parked on an interrupt: no lease, no process, a row. [`crate::Store::resolve_interrupt`]
    /// queues it.
    Waiting,
    /// Finished; never claimed again.
    Done,
}

impl StepState {
    /// The stored name (`queued`, `claimed`, `waiting`, `done`).
    pub fn as_str(self) -> &'static str {
        match self {
            StepState::Queued => "queued",
            StepState::Claimed => "claimed",
            StepState::Waiting => "waiting",
            StepState::Done => "done",
        }
    }
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "queued" => StepState::Queued,
            "claimed" => StepState::Claimed,
            "waiting" => StepState::Waiting,
            "done" => StepState::Done,
            _ => return None,
        })
    }
}

/// A step as stored.
#[derive(Clone, Debug)]
pub struct Step {
    /// Unique across the store.
    pub step_id: i64,
    /// Its session.
    pub session_id: String,
    /// The state machine's step kind (`RunModel`, `CallTool`, …).
    pub kind: String,
    /// The state machine's input for it, exactly as enqueued.
    pub payload: Box<RawValue>,
    /// Where it is.
    pub state: StepState,
    /// How many times it was claimed (1 on the first claim); a release hands a claim back
    /// without counting it.
    pub attempt: i64,
    /// The fence of its latest claim (0 before the first).
    pub fence: i64,
    /// How many of its claims were lost: a later claim took the step over while it was still
    /// claimed, its lease expired (the Worker that held it died, stalled past its lease, or lost
    /// the store). Counted in `attempt` too; a retry or a release never counts here.
    pub lost: i64,
    /// Queued: not before; claimed: the lease's end; else `None` (DB clock, ms).
    pub due_at: Option<i64>,
    /// Waiting: the interrupt that queues it.
    pub interrupt_id: Option<String>,
    /// Done: the output given to [`Finish::Done`].
    pub output: Option<Box<RawValue>>,
    /// When it was enqueued (DB clock, ms); a retry or a new claim keeps it.
    pub created_at: i64,
}

/// How a new step starts.
#[derive(Clone, Debug)]
pub enum StepStart {
    /// Claimable now.
    Now,
    /// Claimable after this delay (DB clock).
    After(Duration),
    /// Waiting for the interrupt with this ID (created in the same commit, or earlier).
    OnInterrupt(String),
}

/// A step to enqueue in the committing step's session.
#[derive(Clone, Debug)]
pub struct NewStep {
    /// The state machine's step kind.
    pub kind: String,
    /// Its input.
    pub payload: Box<RawValue>,
    /// When it becomes claimable.
    pub start: StepStart,
    /// Enqueue only if the session's log holds an item of kind `.1` after seq `.0` (checked
    /// inside the transaction). This closes the race between a turn that ends and a user
    /// message that arrives meanwhile: exactly one of the two enqueues the next step.
    pub only_if_items_after: Option<(i64, String)>,
    /// The session's status once this step is enqueued, in the same transaction; only when it
    /// is (its condition held; a [`UserMessage::wake`] found no step in flight). It wins over the
    /// commit's [`SessionUpdate::status`], so a turn that ends `idle` while a queued message
    /// starts the next one shows `running`.
    pub session_status: Option<String>,
}

impl NewStep {
    /// A step claimable now, unconditionally.
    pub fn now(kind: impl Into<String>, payload: Box<RawValue>) -> Self {
        NewStep {
            kind: kind.into(),
            payload,
            start: StepStart::Now,
            only_if_items_after: None,
            session_status: None,
        }
    }

    /// The same step, setting the session's status to `status` when it is enqueued.
    #[must_use]
    pub fn with_session_status(mut self, status: impl Into<String>) -> Self {
        self.session_status = Some(status.into());
        self
    }
}

/// A step a Worker holds: its claim and the fence every write of the attempt is checked against.
#[derive(Clone, Debug)]
pub struct Claimed {
    /// The step, as claimed (`state` is [`StepState::Claimed`]).
    pub step: Step,
    /// This claim's fence: a commit or heartbeat with it fails once another claim happened.
    pub fence: i64,
    /// The Worker that claimed it.
    pub worker_id: String,
    /// The lease's end (DB clock, ms) as of the claim or the last heartbeat.
    pub lease_until: i64,
}

/// What happens to the claimed step in a [`Commit`].
#[derive(Clone, Debug)]
pub enum Finish {
    /// The step is done, with this output.
    Done(Box<RawValue>),
    /// The attempt failed: queue the step again after the delay; its `attempt` count stays and
    /// grows at the next claim.
    Retry(Duration),
    /// Keep the claim and its lease: write the changes only (e.g. mark a single-attempt call
    /// `started` before its side effect).
    Keep,
}

/// An event to append to a session's stream.
#[derive(Clone, Debug)]
pub struct NewEvent {
    /// The name of a [`tollgate_engine::events::EventKind`], e.g. `text_delta`.
    pub kind: String,
    /// The event's JSON, exactly as given.
    pub payload: Box<RawValue>,
}

/// An event as stored.
#[derive(Clone, Debug)]
pub struct Event {
    /// Position in the session's stream, from 1; a reader continues with `after = seq`.
    pub seq: i64,
    /// See [`NewEvent::kind`].
    pub kind: String,
    /// See [`NewEvent::payload`].
    pub payload: Box<RawValue>,
    /// The step and fence whose commit appended it (`None` for client calls), so a reader can
    /// drop the live text of a superseded attempt.
    pub step: Option<(i64, i64)>,
    /// When it was appended (DB clock, ms).
    pub created_at: i64,
}

/// The text a running segment has streamed and not stored as events yet
/// ([`crate::Store::live_text`]): one value per session, overwritten as it grows, owned by the
/// claim that wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveText {
    /// The step whose claim streams it.
    pub step_id: i64,
    /// That claim's fence: a retried attempt has a higher one.
    pub fence: i64,
    /// The turn (opaque to the store).
    pub turn_id: String,
    /// The attempt of the turn's step (opaque to the store).
    pub attempt: i64,
    /// Where `text` starts in the segment's text, in characters (opaque to the store).
    pub offset: i64,
    /// The seq from which the segment's text before `offset` is in the event log (`None`: it has
    /// none; opaque to the store).
    pub from_seq: Option<i64>,
    /// The segment's text from `offset` on.
    pub text: String,
    /// When it was last written (DB clock, ms).
    pub updated_at: i64,
}

/// What [`crate::Store::put_live_text`] writes (see [`LiveText`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewLiveText {
    /// See [`LiveText::turn_id`].
    pub turn_id: String,
    /// See [`LiveText::attempt`].
    pub attempt: i64,
    /// See [`LiveText::offset`].
    pub offset: i64,
    /// See [`LiveText::from_seq`].
    pub from_seq: Option<i64>,
    /// See [`LiveText::text`].
    pub text: String,
}

/// A pending or resolved human decision.
#[derive(Clone, Debug)]
pub struct Interrupt {
    /// Its session.
    pub session_id: String,
    /// Unique within the session.
    pub interrupt_id: String,
    /// The state machine's description of the decision asked for.
    pub request: Box<RawValue>,
    /// The decision, once resolved.
    pub resolution: Option<Box<RawValue>>,
    /// Opened (DB clock, ms).
    pub created_at: i64,
    /// Resolved (DB clock, ms).
    pub resolved_at: Option<i64>,
    /// When its approval deadline passes (DB clock, ms; `None`: it waits for ever). Set at insert
    /// from [`NewInterrupt::deadline`]; an escalation moves it to the second deadline
    /// ([`crate::deadlines`]).
    pub deadline_at: Option<i64>,
    /// When a deadline escalated it to other approvers (DB clock, ms); `None`: never.
    pub escalated_at: Option<i64>,
    /// The approvals that counted so far without deciding it (its request asks for several
    /// approvers), oldest first (schema 15).
    pub approvals: Vec<Approval>,
}

/// One approval of an interrupt that needs several approvers, counted before the last one
/// resolved it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Approval {
    /// Who approved.
    pub principal: String,
    /// The client key it was made under (the same key again is a replay).
    pub client_key: String,
    /// When (database clock, ms).
    pub approved_at: i64,
}

/// Where an interrupt that needs several approvers stands after an approval that did not decide
/// it ([`ResolveReceipt::partial`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialApproval {
    /// The different principals who approved so far.
    pub approvals: u32,
    /// How many it needs.
    pub required: u32,
}

/// An interrupt to open in a commit.
#[derive(Clone, Debug)]
pub struct NewInterrupt {
    /// Unique within the session.
    pub interrupt_id: String,
    /// What is asked.
    pub request: Box<RawValue>,
    /// Its approval deadline, relative to the commit's database time (`None`: none). A Worker
    /// acts on it once it passes ([`crate::deadlines`]).
    pub deadline: Option<std::time::Duration>,
}

/// An interrupt to close in a commit, if still open.
#[derive(Clone, Debug)]
pub struct CloseInterrupt {
    /// Its id.
    pub interrupt_id: String,
    /// The resolution it gets.
    pub resolution: Box<RawValue>,
    /// Appended to the session's stream (before the commit's own events) only if it was closed
    /// here, not decided before.
    pub events: Vec<NewEvent>,
}

/// The client key a closed interrupt's resolution is stored under (no client decided it).
pub const CLOSED_BY_TOLLGATE: &str = "tollgate:closed";

/// A tool call record, written whole on every change (`status` is the state machine's).
#[derive(Clone, Debug)]
pub struct ToolCallRecord {
    /// The model's tool use ID.
    pub tool_call_id: String,
    /// E.g. `pending_approval`, `started`, `succeeded`, `outcome_unknown`.
    pub status: String,
    /// The record's JSON.
    pub record: Box<RawValue>,
}

/// Everything one step attempt changes, committed in one transaction checked against the fence.
#[derive(Clone, Debug)]
pub struct Commit {
    /// What happens to the claimed step.
    pub finish: Finish,
    /// Appended to the session's item log, in order.
    pub items: Vec<NewItem>,
    /// Tool call records to insert or replace.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Interrupts to open.
    pub interrupts: Vec<NewInterrupt>,
    /// Interrupts to close, each only if still open (nobody decided it): it gets this
    /// resolution, no audit row, and queues no step. Opened earlier, not in this commit.
    pub close_interrupts: Vec<CloseInterrupt>,
    /// Steps to enqueue in the session (at most one may be in flight once the commit is applied).
    /// A step waiting on an interrupt that is already resolved is queued at once.
    pub steps: Vec<NewStep>,
    /// The session row's change.
    pub session: SessionUpdate,
    /// Appended to the session's event stream, in order.
    pub events: Vec<NewEvent>,
    /// The conversation's projection ([`crate::Store::read_messages`]) of [`Commit::items`]: each
    /// is stored only when the item it names was (not when its uuid was already stored).
    pub messages: Vec<NewMessage>,
    /// The session's transcript in resume form ([`crate::Store::read_transcript`]) of
    /// [`Commit::items`]: the lines of the items the commit stores are kept as one chunk.
    pub transcript: Option<NewTranscriptChunk>,
    /// What becomes of the session's pending cancel request ([`crate::Store::request_cancel`]).
    pub cancel: CancelChange,
}

/// What a [`Commit`] does with the session's pending cancel request.
#[derive(Clone, Debug, Default)]
pub enum CancelChange {
    /// Leave it as it is.
    #[default]
    Keep,
    /// Clear it (whether or not one is pending), and with `audit` write one audit row about
    /// `audit.0` (e.g. the turn the request cancelled) in the same transaction.
    Clear {
        /// The row, and what it is about (stored as its `interrupt_id`).
        audit: Option<(String, crate::audit::NewAuditEntry)>,
    },
}

impl Commit {
    /// A commit that only finishes the step.
    pub fn finish(finish: Finish) -> Self {
        Commit {
            finish,
            items: Vec::new(),
            tool_calls: Vec::new(),
            interrupts: Vec::new(),
            close_interrupts: Vec::new(),
            steps: Vec::new(),
            session: SessionUpdate::default(),
            events: Vec::new(),
            messages: Vec::new(),
            transcript: None,
            cancel: CancelChange::Keep,
        }
    }
}

/// The resume form of the transcript items of one commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewTranscriptChunk {
    /// The CLI session the entries belong to (the last item's, when they differ).
    pub cli_session_id: String,
    /// Per item, by its index in [`Commit::items`]: its lines (whole lines, each ending in `\n`),
    /// kept only when the item is stored (not when its uuid was already stored).
    pub lines: Vec<(usize, String)>,
}

/// A session's transcript in resume form, as [`crate::Store::read_transcript`] reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredTranscript {
    /// `false` for a session created before the chunks existed (schema 9), or a missing one:
    /// its transcript is only in its items.
    pub chunked: bool,
    /// The CLI session of the last chunk; `None` when there is none.
    pub cli_session_id: Option<String>,
    /// The chunks' lines, oldest first.
    pub chunks: Vec<String>,
}

/// A message of the conversation's projection, derived from one item of the same commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewMessage {
    /// The index in [`Commit::items`] of the item it comes from.
    pub item: usize,
    /// `user` or `assistant` (opaque to the store).
    pub role: String,
    /// When set and the session's last message has the same key, that message takes this text,
    /// appended after a blank line, instead of a new message (the parts of one assistant API
    /// message, as `view::messages` joins them).
    pub merge_key: Option<String>,
    /// The text.
    pub text: String,
    /// Its images, as JSON text (opaque to the store); `None`: none. Written with a new message
    /// and never merged: a part merged into the last message adds text only.
    pub images: Option<String>,
}

/// A message of the conversation's projection, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMessage {
    /// Its place in the session's conversation (1, 2, …).
    pub seq: i64,
    /// `user` or `assistant`.
    pub role: String,
    /// The text.
    pub text: String,
    /// Its images, as written ([`NewMessage::images`]).
    pub images: Option<String>,
    /// The last item it took text from.
    pub item_seq: i64,
    /// When it was first stored (database clock, ms).
    pub created_at: i64,
}

/// A page of [`crate::Store::read_messages`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MessagePage {
    /// `false` for a session created before the projection existed (schema 7): its messages
    /// were never stored, read them from the item log.
    pub projected: bool,
    /// The messages, oldest first.
    pub messages: Vec<StoredMessage>,
}

/// What a commit stored.
#[derive(Clone, Debug, Default)]
pub struct CommitReceipt {
    /// Per [`Commit::items`] entry: its seq, or `None` when its uuid was already stored.
    pub item_seqs: Vec<Option<i64>>,
    /// Per [`Commit::events`] entry: its seq.
    pub event_seqs: Vec<i64>,
    /// Per [`Commit::steps`] entry: its ID, or `None` when its condition did not hold.
    pub step_ids: Vec<Option<i64>>,
}

/// A user message for [`crate::Store::send_user_message`].
#[derive(Clone, Debug)]
pub struct UserMessage {
    /// The session.
    pub session_id: String,
    /// The client's idempotency key: the same key and item return the first call's receipt.
    pub client_key: String,
    /// The item to append (`{"kind":"user_prompt","text":…}`).
    pub item: NewItem,
    /// Enqueued only when the session has no step in flight (no turn runs).
    pub wake: Option<NewStep>,
    /// Appended to the session's stream.
    pub events: Vec<NewEvent>,
}

/// What [`crate::Store::send_user_message`] stored (or had stored under the same key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageReceipt {
    /// The item's seq.
    pub item_seq: i64,
    /// The wake step's ID, when one was enqueued.
    pub step_id: Option<i64>,
    /// `true` when the key had been used before and nothing new was written.
    pub replayed: bool,
}

/// Where a page of [`crate::Store::open_interrupts`] starts: after this interrupt, in the order
/// `created_at`, `session_id`, `interrupt_id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterruptCursor {
    /// When it opened (database clock, ms).
    pub created_at: i64,
    /// Its session.
    pub session_id: String,
    /// Its id.
    pub interrupt_id: String,
}

impl InterruptCursor {
    /// The cursor just after `interrupt`.
    pub fn of(interrupt: &Interrupt) -> Self {
        InterruptCursor {
            created_at: interrupt.created_at,
            session_id: interrupt.session_id.clone(),
            interrupt_id: interrupt.interrupt_id.clone(),
        }
    }
}

/// A decision for [`crate::Store::resolve_interrupt`].
#[derive(Clone, Debug)]
pub struct Resolution {
    /// The session.
    pub session_id: String,
    /// The interrupt.
    pub interrupt_id: String,
    /// The client's idempotency key.
    pub client_key: String,
    /// The decision's JSON.
    pub resolution: Box<RawValue>,
    /// Appended to the session's stream.
    pub events: Vec<NewEvent>,
    /// Appended instead of `events` when the decision is an approval that counts but does not
    /// decide yet (its request asks for more approvers; see
    /// [`crate::AuditLog::resolve_interrupt_as`]).
    pub partial_events: Vec<NewEvent>,
}

/// What [`crate::Store::resolve_interrupt`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolveReceipt {
    /// The waiting step it queued (`None` if none waited on it).
    pub step_id: Option<i64>,
    /// `true` when this key had resolved it before and nothing new was written.
    pub replayed: bool,
    /// The approval counted but the interrupt stays open: it needs more approvers. `None` when
    /// the decision resolved it.
    pub partial: Option<PartialApproval>,
}

/// A request to cancel a session's turn in progress, for [`crate::Store::request_cancel`].
#[derive(Clone, Debug)]
pub struct CancelRequest {
    /// The session.
    pub session_id: String,
    /// The principal who asks (1 to [`crate::audit::MAX_AUDIT_TEXT`] bytes).
    pub requested_by: String,
    /// Appended to the session's stream with the request (not on a repeat).
    pub events: Vec<NewEvent>,
}

/// A session's pending cancel request ([`crate::Store::pending_cancel`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingCancel {
    /// Who asked.
    pub requested_by: String,
    /// When (DB clock, ms).
    pub requested_at: i64,
}

/// What [`crate::Store::request_cancel`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelReceipt {
    /// The pending request: this one, or the one pending before it.
    pub pending: PendingCancel,
    /// The step in flight the request stops.
    pub step_id: i64,
    /// `true` when a request was pending already and nothing new was written.
    pub replayed: bool,
}

/// Builds a [`RawValue`] from JSON text; a helper for callers and tests.
///
/// # Errors
/// When `text` is not JSON.
pub fn raw(text: impl Into<String>) -> Result<Box<RawValue>, serde_json::Error> {
    RawValue::from_string(text.into())
}
