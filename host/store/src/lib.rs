//! Tollgate's durable session store: the [`Store`] trait and its contract, on SQLite (the
//! embedded default: one WAL file beside the agent, zero set-up) and PostgreSQL (many Workers).
//!
//! Read [`Store`] first: its rustdoc is the contract every backend keeps and
//! `tollgate_store_testing::conformance` (the `host/store/testing` crate) checks on both. Then [`Commit`], the one way a Worker changes a
//! session. The store owns the *durable mechanics* only: sessions (status, run state, usage),
//! the ordered append-only item log (user prompts, transcript entries by `uuid`), tool call
//! records, interrupts, steps with leases and fences, events with a per-session seq, and client
//! idempotency keys. It does not know the state machine's rules (`tollgate-engine` does): step
//! kinds, item kinds, statuses and payloads are opaque strings and JSON to it.
//!
//! Modules: [`types`] (values in and out), [`audit`] (who started a session, the append-only
//! audit trail of decisions), [`deadlines`] (approval deadlines on the database clock), [`media`]
//! (images, once per session by digest), [`error`] ([`StoreError`], terminal vs retryable),
//! [`signal`] (wake-ups), [`outbox`] (webhook deliveries written with their events), [`sqlite`] and [`postgres`] (the backends: connections, pools,
//! wake-ups across processes), and two private ones: `backend` (the one generic [`Store`]
//! implementation both backends share) and `dialect` (what differs between their SQL, each
//! dialect's statements rendered once). The throwaway PostgreSQL cluster and the conformance
//! suite are a crate of their own (`tollgate-store-testing`), which only tests link.
//!
//! ```no_run
//! # async fn demo() -> Result<(), tollgate_store::StoreError> {
//! use std::time::Duration;
//! use tollgate_store::{Commit, Finish, NewSession, NewStep, raw};
//!
//! let store = tollgate_store::open("sqlite://agent/tollgate.db").await?;
//! store.create_session(NewSession { session_id: "s-1".into(), status: "idle".into(),
//!     run_state: raw(r#"{"version":1}"#).unwrap(), agent: None, agent_name: None }).await?;
//! let mut work = store.work_signal();
//! loop {
//!     while let Some(claimed) = store.claim("worker-1", Duration::from_secs(60)).await? {
//!         // … run the step, then commit its result and state changes in one transaction:
//!         store.commit(&claimed, Commit::finish(Finish::Done(raw("null").unwrap()))).await?;
//!     }
//!     work.wait(Duration::from_secs(2)).await; // a notify, or the poll fallback
//! }
//! # }
//! ```
//!
//! # Schema
//!
//! One migration list per backend (`migrations/{sqlite,postgres}/NNNN_*.sql`: the same tables,
//! the types differ; `migrations/README.md` says what each migration added). The tables:
//!
//! | table | key | read through |
//! | --- | --- | --- |
//! | `sessions` | `session_id` | [`Store`] |
//! | `items` | `(session_id, seq)`, unique `(session_id, uuid)` | [`Store`] |
//! | `steps` | `step_id`; `steps_due(due_at)` and `steps_due_agent(agent, pin, due_at)` over queued and claimed steps serve fresh work and expired leases; `steps_in_flight(session_id)` keeps one step in flight per session | [`Store::claim`], [`Store::claim_for`] |
//! | `events` | `(session_id, seq)` | [`Store`] |
//! | `interrupts`, `tool_calls`, `idempotency_keys` | by session | [`Store`] |
//! | `messages`, `transcript_chunks`, `live_text` | by session | [`Store::read_messages`], [`Store::read_transcript`], [`Store::put_live_text`] |
//! | `audit`, `checked_calls` | append-only (triggers refuse `UPDATE` and `DELETE` on `audit`) | [`AuditLog`] |
//! | `webhook_subscriptions`, `webhook_deliveries` | the outbox a trigger on `events` fills | [`outbox`] |
//! | `media` | `(session_id, digest)` | [`media::MediaStore`] |
//! | `agent_digests` | `(name, digest)` | [`agents`] |
//! | `tools_unavailable` | `(agent, worker)`: the tool components each Worker could not load | [`agents::AgentRegistry::report_unavailable_tools`] |
//! | `bundle_files`, `agent_versions`, `agent_current` | by digest, `(name, version)`, name | [`versions`] |
//! | `forks`, `fork_history` | the fork; `(session_id, through_seq)`: the ranges of other sessions' items, messages and chunks a fork reads | [`Store::fork_session`], [`Store::lineage`] |
//!
//! JSON columns are `text` on both backends (never `jsonb`, which would re-serialize). Every row
//! but those of `idempotency_keys` and `webhook_subscriptions` carries `row_version` (now
//! [`ROW_VERSION`] = 1).
//!
//! # Caveats
//!
//! - SQLite runs with `synchronous=FULL` in WAL mode: a commit that returned survives a process
//!   crash (SIGKILL) and a power loss, including the claim and the `started` mark that keep a
//!   single-attempt step from running twice (the store bench prints the cost against `NORMAL`).
//!   Never put the file on a network filesystem.
//! - Faults that pass (PostgreSQL down, a full disk, a read-only file, lock contention) fail the
//!   calls they hit with [`StoreError::Unavailable`] and its [`UnavailableReason`]; the store heals
//!   by itself when the fault ends (no restart), and [`Store::probe_write`] tells a health check
//!   whether a write can be taken now.
//! - PostgreSQL must keep `synchronous_commit=on` (the default): with `off` a lost claim commit
//!   could let a single-attempt step run twice.
//! - A waiting session (e.g. awaiting approval) is rows only: one `waiting` step, one open
//!   interrupt; no task, no connection, no lease.

pub mod agents;
pub mod audit;
pub mod deadlines;
pub mod error;
pub mod media;
pub mod outbox;
pub mod postgres;
pub mod signal;
pub mod sqlite;
pub mod types;
pub mod versions;

mod backend;
mod dialect;
mod group;

use std::sync::Arc;
use std::time::Duration;

pub use agents::{
    AgentRegistry, AgentTools, KnownAgent, MAX_WORKER_ID, Registration, UnavailableComponent,
    UnavailableTools,
};
pub use audit::{
    AttentionCall, AuditDecision, AuditEntry, AuditLog, AuditQuery, CallCheck, CheckMark, CheckReceipt,
    NewAuditEntry,
};
pub use deadlines::{DEADLINE_PRINCIPAL, Deadlines, Escalation, EscalationReceipt, Expiry};
pub use error::{StoreError, UnavailableReason};
pub use media::{Media, MediaStore, NewMedia};
pub use outbox::{Delivery, DeliveryState, Outbox, Subscription};
pub use postgres::PgStore;
pub use signal::{EventSignal, WorkSignal};
pub use sqlite::SqliteStore;
pub use types::*;
pub use versions::{AgentVersion, AgentVersions, NewVersion, Promoted, Pushed, Rollout};

/// The newest row format this build reads and the one it writes.
pub const ROW_VERSION: i64 = 1;

/// The durable store of sessions and their steps. `Send + Sync`; share it as `Arc<dyn Store>`.
///
/// # Contract (every backend; checked by `tollgate_store_testing::conformance`)
///
/// - **Committed before `Ok`.** Every method that writes returns `Ok` only after its transaction
///   committed durably; an `Err` means it wrote nothing, except a retryable error, after which
///   the outcome is unknown (repeat it: client-keyed calls are idempotent, fenced calls are
///   checked against the fence).
/// - **One transaction per change.** [`Store::commit`] applies the step's finish, its items,
///   tool call records, interrupts, new steps, session update and events all or nothing.
/// - **Leases on the database clock, fenced per claim.** [`Store::claim`] takes the oldest due
///   step (queued and due, or claimed with an expired lease), increments its `attempt` and its
///   fence, and leases it until DB-now + `lease`. A commit or heartbeat with a fence that is no
///   longer the step's latest claim (or a step no longer claimed) writes nothing and returns
///   [`StoreError::LeaseLost`]. A lease that expired but was not reclaimed yet still commits:
///   nobody else holds the step. [`Store::release`] hands a claim back at once (a draining
///   Worker), leaving it just as stale.
/// - **At most one step in flight per session** (queued, claimed or waiting): a commit that would
///   break it fails with [`StoreError::StepInFlight`] and writes nothing; a
///   [`UserMessage::wake`] step is skipped while another step is in flight.
/// - **Items are append-only and ordered**; a transcript entry (`uuid` set) is stored once per
///   session, byte-exact; a repeat of its uuid is skipped.
/// - **Events** get consecutive per-session seqs; `read_events(after)` returns those above
///   `after`, so a reader resumes where it left off.
/// - **Idempotent client calls.** [`Store::send_user_message`] and [`Store::resolve_interrupt`]
///   repeated with the same client key and request return the first receipt with
///   `replayed: true` and write nothing; the same key with another request is
///   [`StoreError::IdempotencyConflict`]; another key on a resolved interrupt is
///   [`StoreError::InterruptAlreadyResolved`].
/// - **Refused rows.** A row with a higher `row_version` than [`ROW_VERSION`] is
///   [`StoreError::FutureVersion`] and never claimed; a row that is not what the store wrote is
///   [`StoreError::Corrupt`]. Only the call reading it fails; no row is changed or dropped.
/// - **Reads** return `Ok(None)` for a missing row, never an error.
/// - **Deadlines.** An interrupt committed with a [`NewInterrupt::deadline`] gets its deadline on
///   the database clock; a client decision after it passed is [`StoreError::InterruptExpired`]
///   and writes nothing ([`deadlines::Deadlines`] has the rest).
/// - **Cancel requests.** [`Store::request_cancel`] keeps one pending request per session, until a
///   commit with [`CancelChange::Clear`]. While one is pending, no interrupt of the session is
///   decided ([`StoreError::CancelPending`], nothing written; a deadline's decision too) and no
///   step of it waits: a step committed waiting on an interrupt is queued at once.
#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// Creates the session unless it exists. `Ok(true)`: created; `Ok(false)`: it existed and
    /// was left unchanged.
    async fn create_session(&self, session: NewSession) -> Result<bool, StoreError>;

    /// The session, or `Ok(None)`.
    async fn session(&self, session_id: &str) -> Result<Option<Session>, StoreError>;

    /// Appends a user message under a client key and enqueues `wake` if no step is in flight.
    async fn send_user_message(&self, message: UserMessage) -> Result<MessageReceipt, StoreError>;

    /// Resolves an open interrupt under a client key and queues the step waiting on it. It writes
    /// no audit row: [`audit::AuditLog::resolve_interrupt_as`] is the same decision with one.
    async fn resolve_interrupt(&self, resolution: Resolution) -> Result<ResolveReceipt, StoreError>;

    /// Claims the oldest due step for `worker_id` with a lease of `lease`; `Ok(None)` when none
    /// is due. Rows with a future `row_version` are never claimed.
    async fn claim(&self, worker_id: &str, lease: Duration) -> Result<Option<Claimed>, StoreError>;

    /// As [`Store::claim`], but only steps of sessions this Worker may run: sessions of one of
    /// `scope.agents`, unpinned (no agent digest, or one recorded with `pinned: false`; not when
    /// `scope.pinned_only`) or pinned to one of `scope.digests` (the locked bundles the Worker
    /// loaded). A step of another agent's
    /// session, of a session pinned to another digest, or of a session that names no agent stays.
    /// One index range per agent and pin (`steps_due_agent`).
    async fn claim_for(
        &self,
        worker_id: &str,
        lease: Duration,
        scope: &ClaimScope,
    ) -> Result<Option<Claimed>, StoreError>;

    /// Pins the session to the agent digest `to` and records an `agent_upgraded` event
    /// (`{"from": <digest or null>, "from_pinned": bool, "to": <digest>}`, its `created_at` the
    /// time) in the same transaction. Only a session that is idle, waiting on an interrupt, or
    /// queued but never claimed moves: a running one is [`StoreError::SessionBusy`] and nothing
    /// is written. Already pinned to `to`: `Ok` with no event. `to` must be a locked bundle of the
    /// session's agent that a Worker registered ([`agents::AgentRegistry`]), else
    /// [`StoreError::UpgradeRefused`] and nothing is written: no Worker would run the session. A
    /// session that names no agent takes the name of the one agent that registered `to`.
    async fn upgrade_session(&self, session_id: &str, to: &str) -> Result<UpgradeReceipt, StoreError>;

    /// Extends the claim's lease to DB-now + `lease` and returns the new end; `LeaseLost` when the
    /// claim is stale (stop the work, write nothing).
    async fn heartbeat(&self, claimed: &Claimed, lease: Duration) -> Result<i64, StoreError>;

    /// Commits the attempt's result and state changes in one transaction checked against the
    /// claim's fence; `LeaseLost` (nothing written) when the claim is stale.
    async fn commit(&self, claimed: &Claimed, commit: Commit) -> Result<CommitReceipt, StoreError>;

    /// Hands the claim back: the step is queued and claimable at once by any Worker, and the
    /// claim is stale from now on (its commits and heartbeats return `LeaseLost`; the next claim
    /// gets a higher fence). The released attempt is not counted: the next claim gets the same
    /// `attempt` (a Worker that stops on purpose does not use up a step's attempts; what the
    /// attempt already committed, such as a single-attempt call's `started` mark, stays).
    /// `LeaseLost` (nothing changed) when the claim is already stale.
    ///
    /// The default commits [`Finish::Retry`] with no delay, which counts the attempt; both
    /// backends override it.
    async fn release(&self, claimed: &Claimed) -> Result<(), StoreError> {
        self.commit(claimed, Commit::finish(Finish::Retry(Duration::ZERO))).await.map(drop)
    }

    /// Creates `fork.session_id`, a **fork** of `fork.parent_id`: an idle session whose history
    /// is the parent's items up to `fork.through_item_seq`, shared, not copied. In one
    /// transaction: the session row (usage from zero, `fork.forked_by` as its starter, its next
    /// item seq `through_item_seq + 1`), its `forks` row, its history ranges (`fork_history`: the
    /// parent's own, cut there, and those the parent inherits, so a fork of a fork reads no
    /// chain) and one [`AuditDecision::Forked`] audit row (its `interrupt_id` is `turn-<turn>`).
    /// It inserts as many rows for a history of 10,000 items as for one of 100: 3 and one per
    /// session its history reads from.
    ///
    /// From then on every history read of the fork reads through its ranges: [`Store::read_items`],
    /// [`Store::read_items_of_kind`], [`Store::read_messages`] (messages up to the parent's last
    /// one whose item is inherited), [`Store::read_transcript`] (chunks up to the cut),
    /// [`media::MediaStore::media`], and the uuids a commit skips as repeats. Its events, steps,
    /// interrupts, tool call records, grants, idempotency keys and checks are its own: it starts
    /// with none. The parent is never changed. A session a fork names or reads from cannot be
    /// deleted (the database refuses it); deleting a fork deletes its lineage rows.
    ///
    /// What a cut means (the end of a turn) is the caller's: the store checks only that the
    /// parent holds the item. [`StoreError::SessionNotFound`] (no parent),
    /// [`StoreError::SessionExists`], [`StoreError::Invalid`] (a cut beyond the parent's items, a
    /// turn below 1, a bad run state or name): nothing is written.
    async fn fork_session(&self, fork: NewFork) -> Result<Lineage, StoreError>;

    /// The session's lineage when it is a fork, else `Ok(None)` (also for a missing session).
    async fn lineage(&self, session_id: &str) -> Result<Option<Lineage>, StoreError>;

    /// The step, or `Ok(None)`.
    async fn step(&self, step_id: i64) -> Result<Option<Step>, StoreError>;

    /// Up to `limit` items of the session with `seq > after`, in order.
    async fn read_items(&self, session_id: &str, after: i64, limit: i64) -> Result<Vec<Item>, StoreError>;

    /// Up to `limit` items of the session of kind `kind` with `seq > after`, in order: one range
    /// of an index, however many items of other kinds the session has.
    async fn read_items_of_kind(
        &self,
        session_id: &str,
        kind: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Item>, StoreError>;

    /// The last `limit` messages of the session's conversation before message seq `before`
    /// (`None`: the newest), oldest first: the projection [`Commit::messages`] keeps, so a reader
    /// does not read the item log. A session created before schema 7 (or a missing one) reads as
    /// `projected: false` with no messages.
    async fn read_messages(
        &self,
        session_id: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<MessagePage, StoreError>;

    /// The session's transcript in the form a resume writes it: every chunk [`Commit::transcript`]
    /// kept, oldest first, in one read. A session created before schema 9 (or a missing one)
    /// reads as `chunked: false` with no chunks: its transcript is only in its items.
    async fn read_transcript(&self, session_id: &str) -> Result<StoredTranscript, StoreError>;

    /// Overwrites the session's live text ([`LiveText`]) with `live`, the text the claim's
    /// segment streamed and has not stored as events yet, in one statement checked against the
    /// claim's fence:
    /// `LeaseLost` (nothing written) when the claim is stale or when the row holds a later claim
    /// of the same step. Wakes the session's event readers, as an appended event does. The
    /// commit that finishes or requeues the step ([`Finish::Done`], [`Finish::Retry`]) deletes
    /// the row in its transaction.
    async fn put_live_text(&self, claimed: &Claimed, live: &NewLiveText) -> Result<(), StoreError>;

    /// The session's live text while the claim that wrote it still holds its step (claimed,
    /// same fence), else `Ok(None)`: a dead attempt's text is never returned.
    async fn live_text(&self, session_id: &str) -> Result<Option<LiveText>, StoreError>;

    /// Up to `limit` events of the session with `seq > after`, in order.
    async fn read_events(&self, session_id: &str, after: i64, limit: i64) -> Result<Vec<Event>, StoreError>;

    /// The interrupt, or `Ok(None)`.
    async fn interrupt(&self, session_id: &str, interrupt_id: &str) -> Result<Option<Interrupt>, StoreError>;

    /// Up to `limit` sessions with an id after `after` (`""` for the first page), in id order,
    /// only those with `status` when given.
    async fn list_sessions(
        &self,
        status: Option<&str>,
        after: &str,
        limit: i64,
    ) -> Result<Vec<SessionSummary>, StoreError>;

    /// Open interrupts by the agent of their session (`""`: sessions that name none), by agent.
    async fn open_interrupts_by_agent(&self) -> Result<Vec<(String, i64)>, StoreError>;

    /// How many interrupts of all sessions are open.
    async fn count_open_interrupts(&self) -> Result<i64, StoreError>;

    /// Up to `limit` open interrupts of all sessions, oldest first (by `created_at`, then session
    /// and interrupt id), starting after `after` (`None`: from the first). Pass the
    /// [`InterruptCursor::of`] the last one of a page to read the next: a page costs one index
    /// range, however many are open.
    async fn open_interrupts(
        &self,
        after: Option<&InterruptCursor>,
        limit: i64,
    ) -> Result<Vec<Interrupt>, StoreError>;

    /// Asks the session's turn in progress to stop: keeps `request` as the session's pending
    /// cancel request (with the database time), appends its events, queues the step in flight if
    /// it waits on an interrupt, and wakes Workers and the session's event readers (other
    /// processes too), so the Worker holding the step, wherever it runs, sees it. What the request
    /// does is the state machine's: the store only keeps it until a commit clears it
    /// ([`CancelChange`]). [`StoreError::NothingToCancel`] (nothing written) when no step is in
    /// flight; a request already pending is returned with `replayed: true` and nothing is
    /// written.
    async fn request_cancel(&self, request: CancelRequest) -> Result<CancelReceipt, StoreError>;

    /// The session's pending cancel request, or `Ok(None)` (none, or no such session): one row
    /// read by its key, cheap enough to ask at every wake-up.
    async fn pending_cancel(&self, session_id: &str) -> Result<Option<PendingCancel>, StoreError>;

    /// The tool call record, or `Ok(None)`.
    async fn tool_call(
        &self,
        session_id: &str,
        tool_call_id: &str,
    ) -> Result<Option<ToolCallRecord>, StoreError>;

    /// Every tool call record of the session, in the order they were first written.
    async fn tool_calls(&self, session_id: &str) -> Result<Vec<ToolCallRecord>, StoreError>;

    /// The session's step in flight (queued, claimed or waiting), or `Ok(None)` when it is idle.
    async fn step_in_flight(&self, session_id: &str) -> Result<Option<Step>, StoreError>;

    /// Steps due for `older_than` or more that no Worker claimed (queued, or claimed under a lease
    /// that ended), by agent (`""`: of sessions that name none), of `session_id` only when given.
    /// Such a step waits for a Worker that serves its agent (and pin) to start, or for a busy one
    /// to free up: no Worker of the agent runs, the pinned bundle's Workers are gone, or all are
    /// saturated.
    async fn unclaimed_steps(
        &self,
        older_than: Duration,
        session_id: Option<&str>,
    ) -> Result<Vec<UnclaimedSteps>, StoreError>;

    /// Checks that the store can take a write now, and writes nothing: a write transaction
    /// whose one statement changes no row, rolled back. `Ok(())` when writable, else the error
    /// a write would meet now (e.g. [`StoreError::Unavailable`] with
    /// [`UnavailableReason::ReadOnly`] or [`UnavailableReason::Unreachable`]). For health checks.
    /// It cannot see a full disk (that needs a write that takes new space).
    async fn probe_write(&self) -> Result<(), StoreError>;

    /// The webhook outbox in the same database ([`outbox`]), or `None` when this store has
    /// none. Both backends have one.
    fn outbox(&self) -> Option<&dyn Outbox> {
        None
    }

    /// This store's principals and audit trail ([`audit::AuditLog`]): the same database, the
    /// same transactions.
    fn audit(&self) -> &dyn audit::AuditLog;

    /// This store's approval deadlines ([`deadlines::Deadlines`]): the same database, the same
    /// transactions.
    fn deadlines(&self) -> &dyn deadlines::Deadlines;

    /// This store's images ([`media::MediaStore`]): the same database, the same transactions.
    fn media(&self) -> &dyn media::MediaStore;

    /// The agents this store knows ([`agents::AgentRegistry`]).
    fn agents(&self) -> &dyn agents::AgentRegistry;

    /// The agents' versions pushed into this store ([`versions::AgentVersions`]).
    fn versions(&self) -> &dyn versions::AgentVersions;

    /// A signal that wakes Workers when a step may be claimable.
    fn work_signal(&self) -> WorkSignal;

    /// A signal that wakes readers of the session's events; for `*`, of any session's (the live
    /// approvals inbox).
    fn event_signal(&self, session_id: &str) -> EventSignal;
}

/// Opens a store by URL: `sqlite://PATH` (the file is created and migrated) or
/// `postgres://…` (migrated; 8 connections). The factory keyed by the `--db` option.
///
/// # Errors
/// An unsupported URL, an unreachable database, or a failed migration.
pub async fn open(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    if let Some(path) = url.strip_prefix("sqlite://") {
        Ok(Arc::new(SqliteStore::open(std::path::Path::new(path)).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PgStore::connect(url, 8).await?))
    } else {
        Err(StoreError::UnsupportedUrl { url: url.to_owned() })
    }
}
