//! Client calls on a store: start a session, send a message, decide an interrupt, read a
//! snapshot. The HTTP API and the tests call these; the rules are `tollgate_engine::session`'s.

use tollgate_engine::approval::ApprovalRequest;
use tollgate_engine::events::{DecisionRecorded, EventKind, GrantRevoked, Payload, TextBlock};
use tollgate_engine::session::client::{self, HumanDecision};
use tollgate_engine::session::turn::{self, HistoryItem};
use tollgate_engine::session::view;
use tollgate_engine::session::{
    CallEntry, CallState, EngineError, ItemKind, RunState, SessionStatus, grants,
};
use tollgate_store::{
    AgentDigest, AuditQuery, Item, MessageReceipt, NewAuditEntry, NewSession, Resolution, ResolveReceipt,
    Store, StoreError, UpgradeReceipt, UserMessage,
};

use crate::auth;
use crate::convert;
use crate::edits;
use tollgate_api_types::types::{
    AttentionItem, AuditDecision, AuditRecord, CallCheck, CancelReceipt, CancelRequested, CheckReceipt,
    DecidedAhead, Grant, GrantRevocation, LiveText, Message, PendingApproval, RevokeReceipt, SessionGrant,
    Snapshot, ToolCall, TurnCancelled,
};

/// A client call that failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The input was refused; nothing was written.
    #[error(transparent)]
    BadInput(#[from] EngineError),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The session has no grant in force for the tool (none made, or revoked); nothing was written.
    #[error("session `{session_id}` has no grant in force for tool `{tool}`")]
    GrantNotFound {
        /// The session.
        session_id: String,
        /// The tool.
        tool: String,
    },
    /// No agent the store knows fits what a new session asked for (named none of several, an
    /// unknown name, a digest no Worker loaded or loaded unlocked); nothing was written.
    #[error("{0}")]
    AgentUnavailable(String),
}

/// The agent a process serves (`tollgate serve`): what its new sessions get by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingAgent {
    /// The agent's name.
    pub name: String,
    /// Its digest, pinned when the bundle is locked.
    pub digest: AgentDigest,
}

/// What a new session records: the agent it belongs to and the digest it runs under.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionAgent {
    /// The agent (`None`: none yet; the store's registry adopts it when an agent registers).
    pub name: Option<String>,
    /// The digest (`None`: not known).
    pub digest: Option<AgentDigest>,
}

impl From<&ServingAgent> for SessionAgent {
    fn from(serving: &ServingAgent) -> Self {
        SessionAgent { name: Some(serving.name.clone()), digest: Some(serving.digest.clone()) }
    }
}

/// The agent a new session asked for by `agent` (a name, or a digest) and `agent_digest` (a digest
/// to pin), with `serving` the agent of this process, if any. Without either, the serving agent, else
/// the only agent the store knows, else (no agent has started on the store yet) none: the first
/// agent to register adopts the session. A name is one a Worker or server registered (or the serving
/// agent's); a digest pins the session, so it must be of a locked bundle a Worker registered: the
/// session's steps go only to Workers of its agent that loaded it.
///
/// # Errors
/// [`ClientError::AgentUnavailable`] naming why and what the store knows; a malformed name or
/// digest as bad input.
pub async fn resolve_agent(
    store: &dyn Store,
    agent: Option<&str>,
    agent_digest: Option<&str>,
    serving: Option<&ServingAgent>,
) -> Result<SessionAgent, ClientError> {
    let (name, digest) = match (agent, agent_digest) {
        (Some(asked), digest) if asked.contains('@') => return pushed_version(store, asked, digest).await,
        (Some(asked), None) if asked.starts_with("sha256:") => (None, Some(asked)),
        (Some(asked), Some(digest)) if asked.starts_with("sha256:") => {
            if asked != digest {
                return Err(ClientError::AgentUnavailable(format!(
                    "`agent` {asked} and `agent_digest` {digest} are two digests; a session runs under one"
                )));
            }
            (None, Some(digest))
        }
        (asked, digest) => (asked, digest),
    };
    if let Some(name) = name {
        tollgate_store::check_agent_name(name)
            .map_err(|reason| EngineError::BadInput { field: "agent", reason })?;
    }
    if let Some(digest) = digest {
        check_digest(if agent_digest.is_some() { "agent_digest" } else { "agent" }, digest)?;
    }
    if let Some(serving) = serving
        && name.is_none_or(|name| name == serving.name)
        && digest.is_none_or(|digest| serving.digest.pinned && digest == serving.digest.digest)
    {
        return Ok(serving.into());
    }
    let known = store.agents().known_agents().await?;
    let pushed = store.versions().pushed_agents().await?;
    let mut names: Vec<&str> =
        known.iter().map(|k| k.name.as_str()).chain(pushed.iter().map(String::as_str)).collect();
    if let Some(serving) = serving {
        names.push(&serving.name);
    }
    names.sort_unstable();
    names.dedup();
    let listed = || if names.is_empty() { "none".to_owned() } else { names.join(", ") };
    let unavailable = |why: String| Err(ClientError::AgentUnavailable(why));
    if let Some(digest) = digest {
        let owners: Vec<_> =
            known.iter().filter(|k| k.digest == digest && name.is_none_or(|name| k.name == name)).collect();
        return match owners.as_slice() {
            [] => unavailable(match name {
                Some(name) => format!(
                    "no Worker of agent `{name}` has loaded {digest}; start one on that bundle first (agents: {})",
                    listed()
                ),
                None => format!("no Worker has loaded {digest}; start one on that bundle first"),
            }),
            [one] if !one.locked => unavailable(format!(
                "agent `{}` was loaded from {digest} unlocked: its Workers run only unpinned sessions, so \
                 none would run one pinned to it; lock the bundle (`tollgate agent lock`) or name the agent",
                one.name
            )),
            [one] => Ok(SessionAgent {
                name: Some(one.name.clone()),
                digest: Some(AgentDigest { digest: digest.to_owned(), pinned: true }),
            }),
            _ => unavailable(format!("several agents loaded {digest}; name the agent too")),
        };
    }
    let chosen = match name {
        Some(name) if names.contains(&name) => name,
        Some(name) => {
            return unavailable(format!(
                "no Worker or server of agent `{name}` has started on this store (agents: {})",
                listed()
            ));
        }
        None => match names.as_slice() {
            [one] => *one,
            // No agent has started on this store yet: the first to register adopts the session.
            [] => return Ok(SessionAgent::default()),
            _ => return unavailable(format!("this store serves several agents ({}): name one", listed())),
        },
    };
    if let Some(serving) = serving.filter(|serving| serving.name == chosen) {
        return Ok(serving.into());
    }
    // An agent with versions in the store: its current one, or its canary for that share of new
    // sessions, pinned (a Worker pulls it locked).
    if let Some(rollout) = store.versions().rollout(chosen).await? {
        let digest = match rollout.canary {
            Some((_, canary, share)) if percent() < share => canary,
            _ => rollout.current.1,
        };
        return Ok(SessionAgent {
            name: Some(chosen.to_owned()),
            digest: Some(AgentDigest { digest, pinned: true }),
        });
    }
    // The newest digest it was loaded from, as a record: any Worker of the agent runs it.
    let newest = known.iter().filter(|k| k.name == chosen).max_by_key(|k| k.last_seen_at);
    Ok(SessionAgent {
        name: Some(chosen.to_owned()),
        digest: newest.map(|k| AgentDigest { digest: k.digest.clone(), pinned: false }),
    })
}

/// `NAME@K`: version K of an agent pushed into the store, pinned (a Worker pulls it locked);
/// `digest`, when given too, must be that version's.
async fn pushed_version(
    store: &dyn Store,
    asked: &str,
    digest: Option<&str>,
) -> Result<SessionAgent, ClientError> {
    let bad = |reason: String| ClientError::from(EngineError::BadInput { field: "agent", reason });
    let (name, number) = asked.split_once('@').unwrap_or((asked, ""));
    tollgate_store::check_agent_name(name).map_err(bad)?;
    let number = number
        .parse::<i64>()
        .ok()
        .filter(|k| *k >= 1)
        .ok_or_else(|| bad(format!("{asked:?}: a version is `NAME@K`, K a number from 1")))?;
    let Some(version) = store.versions().agent_version(name, Some(number)).await? else {
        let versions = store.versions().agent_versions(name).await?;
        let have = match versions.last() {
            Some(last) => format!("it has versions 1 to {}", last.version),
            None => "no version of it was pushed (`tollgate agent push`)".to_owned(),
        };
        return Err(ClientError::AgentUnavailable(format!("agent `{name}` has no version {number}: {have}")));
    };
    if let Some(digest) = digest.filter(|digest| *digest != version.digest) {
        return Err(ClientError::AgentUnavailable(format!(
            "`agent` {asked} is {} and `agent_digest` is {digest}; a session runs under one",
            version.digest
        )));
    }
    Ok(SessionAgent {
        name: Some(name.to_owned()),
        digest: Some(AgentDigest { digest: version.digest, pinned: true }),
    })
}

/// A random whole percent, 0 to 99.
fn percent() -> i64 {
    let mut byte = [0u8; 2];
    getrandom::fill(&mut byte).expect("the OS random number generator failed");
    i64::from(u16::from_le_bytes(byte) % 100)
}

/// Creates the session unless it exists, for the only agent the store knows (none yet: the first
/// agent to register adopts it); `true` when it was created.
///
/// # Errors
/// A bad id, or the store failed.
pub async fn start(store: &dyn Store, session_id: &str) -> Result<bool, ClientError> {
    start_under(store, session_id, None).await
}

/// Creates the session unless it exists, recording the digest it runs under (see the Worker's
/// `Agent::session_agent`) and [`auth::LOCAL`] as who started it; `true` when it was created. It
/// belongs to the one agent that registered the digest, else to the only agent the store knows,
/// else to none yet (the first agent to register adopts it). An existing session keeps its agent.
///
/// # Errors
/// A bad id, a digest that is not `sha256:<64 hex digits>`, or the store failed.
pub async fn start_under(
    store: &dyn Store,
    session_id: &str,
    agent: Option<AgentDigest>,
) -> Result<bool, ClientError> {
    let known = store.agents().known_agents().await?;
    let mut owners: Vec<&str> = known
        .iter()
        .filter(|k| agent.as_ref().is_none_or(|a| a.digest == k.digest))
        .map(|k| k.name.as_str())
        .collect();
    if owners.is_empty() {
        owners = known.iter().map(|k| k.name.as_str()).collect();
    }
    owners.dedup();
    let name = match owners.as_slice() {
        [one] => Some((*one).to_owned()),
        _ => None,
    };
    start_by(store, session_id, SessionAgent { name, digest: agent }, auth::LOCAL).await
}

/// Creates the session unless it exists, for `agent` (see [`resolve_agent`]), recording
/// `principal` as who started it (an existing session keeps its agent and its starter): separation
/// of duties keeps them from deciding its interrupts.
///
/// # Errors
/// A bad id, a digest that is not `sha256:<64 hex digits>`, or the store failed.
pub async fn start_by(
    store: &dyn Store,
    session_id: &str,
    agent: SessionAgent,
    principal: &str,
) -> Result<bool, ClientError> {
    check_id("session_id", session_id)?;
    if let Some(digest) = &agent.digest {
        check_digest("agent_digest", &digest.digest)?;
    }
    let session = NewSession {
        session_id: session_id.to_owned(),
        status: SessionStatus::Idle.as_str().to_owned(),
        run_state: RunState::default().to_raw(),
        agent: agent.digest,
        agent_name: agent.name,
    };
    Ok(store.audit().create_session_by(session, principal).await?)
}

/// Pins the session to the agent digest `to` (see [`Store::upgrade_session`]).
///
/// # Errors
/// A malformed digest, an unknown session, a session that is running a step.
pub async fn upgrade(store: &dyn Store, session_id: &str, to: &str) -> Result<UpgradeReceipt, ClientError> {
    check_digest("to", to)?;
    Ok(store.upgrade_session(session_id, to).await?)
}

/// Refuses anything but `sha256:<64 lowercase hex digits>`.
pub fn check_digest(field: &'static str, digest: &str) -> Result<(), EngineError> {
    if tollgate_protocol::media::is_digest(digest) {
        Ok(())
    } else {
        Err(EngineError::BadInput {
            field,
            reason: format!("{digest:?} is not an agent digest (sha256: and 64 lowercase hex digits)"),
        })
    }
}

/// Stores a user message under `client_key` (a fresh key when `None`) and starts a turn when none
/// runs; a running turn leaves it for the next turn.
///
/// # Errors
/// An empty or over-long text, an unknown session, a key reused for another message.
pub async fn send(
    store: &dyn Store,
    session_id: &str,
    text: &str,
    client_key: Option<&str>,
) -> Result<MessageReceipt, ClientError> {
    send_with_images(store, session_id, text, Vec::new(), client_key).await
}

/// [`send`] of a message that carries `images` (checked already:
/// [`crate::media::check_message_images`]): they are stored once each, by digest, in the same
/// transaction as the message, which holds them by reference.
///
/// # Errors
/// As [`send`].
pub async fn send_with_images(
    store: &dyn Store,
    session_id: &str,
    text: &str,
    images: Vec<tollgate_store::NewMedia>,
    client_key: Option<&str>,
) -> Result<MessageReceipt, ClientError> {
    let message = client::user_message(text, &crate::media::references(&images))?;
    let client_key = match client_key {
        Some(key) => {
            check_id("client_key", key)?;
            key.to_owned()
        }
        None => fresh_key(),
    };
    let message = UserMessage {
        session_id: session_id.to_owned(),
        client_key,
        item: convert::item(message.item),
        wake: Some(convert::step(message.wake)),
        events: message.events.into_iter().map(convert::event).collect(),
    };
    Ok(if images.is_empty() {
        store.send_user_message(message).await?
    } else {
        store.media().send_user_message_with_media(message, &images).await?
    })
}

/// Decides the open interrupt `interrupt_id` under `client_key` as [`auth::LOCAL`]; the waiting
/// step runs next. See [`resolve_as`].
///
/// # Errors
/// As [`resolve_as`].
pub async fn resolve(
    store: &dyn Store,
    session_id: &str,
    interrupt_id: &str,
    decision: &HumanDecision,
    client_key: Option<&str>,
) -> Result<ResolveReceipt, ClientError> {
    resolve_as(store, session_id, interrupt_id, decision, client_key, auth::LOCAL).await
}

/// Decides the open interrupt `interrupt_id` under `client_key` as `principal`: the resolution,
/// a `decision_recorded` event and one audit row (who, the decision, the reason, the tool and its
/// input; the time is the database's) in one transaction, none on a replay. Whether `principal`
/// may decide is the caller's check ([`auth::Rules::may_decide`]).
///
/// # Errors
/// An unknown session or interrupt, one resolved under another key, a key reused for another
/// decision.
pub async fn resolve_as(
    store: &dyn Store,
    session_id: &str,
    interrupt_id: &str,
    decision: &HumanDecision,
    client_key: Option<&str>,
    principal: &str,
) -> Result<ResolveReceipt, ClientError> {
    resolve_checked(store, session_id, interrupt_id, decision, client_key, principal, None).await
}

/// [`resolve_as`] by a principal whose authority was checked against the interrupt as it was
/// with `escalated_at` (its [`tollgate_store::Interrupt::escalated_at`] when the check read it): an
/// escalation since is [`StoreError::InterruptEscalated`] and nothing is written, so the caller
/// checks again against the new approvers.
///
/// # Errors
/// As [`resolve_as`], and [`StoreError::InterruptEscalated`].
pub async fn resolve_as_of(
    store: &dyn Store,
    session_id: &str,
    interrupt_id: &str,
    decision: &HumanDecision,
    client_key: Option<&str>,
    principal: &str,
    escalated_at: Option<i64>,
) -> Result<ResolveReceipt, ClientError> {
    let seen = Some(escalated_at);
    resolve_checked(store, session_id, interrupt_id, decision, client_key, principal, seen).await
}

async fn resolve_checked(
    store: &dyn Store,
    session_id: &str,
    interrupt_id: &str,
    decision: &HumanDecision,
    client_key: Option<&str>,
    principal: &str,
    seen: Option<Option<i64>>,
) -> Result<ResolveReceipt, ClientError> {
    let client_key = match client_key {
        Some(key) => {
            check_id("client_key", key)?;
            key.to_owned()
        }
        // Without a key the decision itself is the key: the same decision repeated is one.
        None => format!("decision:{}", serde_json::to_string(decision).expect("serializes")),
    };
    let request = store.interrupt(session_id, interrupt_id).await?.map(|i| i.request);
    let request = request.and_then(|r| ApprovalRequest::parse(r.get()).ok());
    if decision.scope == client::DecisionScope::Session && !decision.approved {
        return Err(EngineError::BadInput {
            field: "scope",
            reason: "`session` (allow for this session) comes only with an approval (`approved: true`)"
                .into(),
        }
        .into());
    }
    let several = request.as_ref().is_some_and(|r| r.approvals_needed() > 1);
    if several
        && decision.approved
        && (decision.updated_input.is_some() || decision.scope == client::DecisionScope::Session)
    {
        return Err(EngineError::BadInput {
            field: if decision.updated_input.is_some() { edits::FIELD } else { "scope" },
            reason:
                "this call needs several different approvers (its review found it high risk): each approves \
                     it as asked, for this call only, with no edit and no `session` scope"
                    .into(),
        }
        .into());
    }
    if let Some(edited) = &decision.updated_input {
        if !decision.approved {
            return Err(EngineError::BadInput {
                field: edits::FIELD,
                reason: "an edited input comes only with an approval (`approved: true`)".into(),
            }
            .into());
        }
        // Checked before anything is stored, against the schema stored with the interrupt.
        edits::check_edit(request.as_ref().and_then(|r| r.input_schema.as_ref()), edited)?;
    }
    let (resolution, events) = client::resolution(interrupt_id, decision, Some(principal));
    let asked_input = request.as_ref().map(|r| &r.arguments);
    let tool_name = request.as_ref().map(|r| r.tool_name.clone());
    let input = asked_input.map(convert::raw);
    let edited = decision.updated_input.as_ref().filter(|e| Some(*e) != asked_input);
    let entry = NewAuditEntry {
        principal: principal.to_owned(),
        decision: if decision.approved {
            tollgate_store::AuditDecision::Approved
        } else {
            tollgate_store::AuditDecision::Rejected
        },
        reason: decision.message.clone(),
        tool_name,
        input,
        // An "edit" equal to the model's input is no edit (the call keeps no original either).
        edited_input: edited.as_ref().map(convert::raw),
    };
    let mut events: Vec<tollgate_store::NewEvent> = events.into_iter().map(convert::event).collect();
    events.push(convert::event(
        Payload::DecisionRecorded(DecisionRecorded {
            interrupt_id: interrupt_id.to_owned(),
            principal: principal.to_owned(),
            decision: entry.decision.as_str().to_owned(),
            reason: entry.reason.clone(),
            tool_name: entry.tool_name.clone(),
            input: asked_input.cloned(),
            edited_input: edited.cloned(),
            deadline_at: None,
        })
        .into(),
    ));
    // An approval that counts but does not decide yet (the store knows) is recorded as this.
    let partial_events = vec![convert::event(
        Payload::DecisionRecorded(DecisionRecorded {
            interrupt_id: interrupt_id.to_owned(),
            principal: principal.to_owned(),
            decision: tollgate_store::AuditDecision::PartiallyApproved.as_str().to_owned(),
            reason: entry.reason.clone(),
            tool_name: entry.tool_name.clone(),
            input: asked_input.cloned(),
            edited_input: None,
            deadline_at: None,
        })
        .into(),
    )];
    let resolution = Resolution {
        session_id: session_id.to_owned(),
        interrupt_id: interrupt_id.to_owned(),
        client_key,
        resolution: convert::raw(&resolution),
        events,
        partial_events,
    };
    Ok(match seen {
        Some(escalated_at) => {
            store.deadlines().resolve_interrupt_as_of(resolution, entry, escalated_at).await?
        }
        None => store.audit().resolve_interrupt_as(resolution, entry).await?,
    })
}

/// Asks the session's turn in progress to stop, as `principal` (see
/// `tollgate_engine::session::cancel`): the request and its `cancel_requested` event; the step in
/// flight ends the turn `cancelled`. Whether `principal` may is the caller's check
/// ([`auth::Rules::may_cancel`]).
///
/// # Errors
/// An unknown session; [`StoreError::NothingToCancel`] when no turn runs.
pub async fn cancel(
    store: &dyn Store,
    session_id: &str,
    principal: &str,
) -> Result<CancelReceipt, ClientError> {
    let request = tollgate_store::CancelRequest {
        session_id: session_id.to_owned(),
        requested_by: principal.to_owned(),
        events: vec![convert::event(tollgate_engine::session::cancel::request_event(principal))],
    };
    let receipt = store.request_cancel(request).await?;
    Ok(CancelReceipt {
        session_id: session_id.to_owned(),
        cancel_requested: cancel_requested(receipt.pending),
        replayed: receipt.replayed,
    })
}

fn cancel_requested(pending: tollgate_store::PendingCancel) -> CancelRequested {
    CancelRequested { requested_by: pending.requested_by, requested_at: pending.requested_at }
}

/// The prompts (user messages and notes) of the session after item seq `after`, in order: what a
/// turn that has not answered them yet reads.
///
/// # Errors
/// The store failed, or a row is corrupt.
pub async fn prompts_after(store: &dyn Store, session_id: &str, after: i64) -> Result<Vec<Item>, StoreError> {
    let mut items = read_all_items_of_kind_after(store, session_id, ItemKind::UserPrompt, after).await?;
    items.extend(read_all_items_of_kind_after(store, session_id, ItemKind::TurnFailureNote, after).await?);
    items.sort_by_key(|item| item.seq);
    Ok(items)
}

/// Every audit row of the session, oldest first.
///
/// # Errors
/// The store failed, or a row is corrupt.
pub async fn decisions(store: &dyn Store, session_id: &str) -> Result<Vec<AuditRecord>, StoreError> {
    const PAGE: i64 = 1000;
    let mut all = Vec::new();
    loop {
        let query = AuditQuery {
            session_id: Some(session_id.to_owned()),
            after: all.last().map_or(0, |r: &AuditRecord| r.audit_id),
            limit: PAGE,
            ..AuditQuery::default()
        };
        let page = store.audit().audit_entries(&query).await?;
        let done = (page.len() as i64) < PAGE;
        all.extend(page.into_iter().map(audit_record));
        if done {
            return Ok(all);
        }
    }
}

/// An audit row as the API shows it.
pub fn audit_record(entry: tollgate_store::AuditEntry) -> AuditRecord {
    let json = |raw: Option<Box<serde_json::value::RawValue>>| {
        raw.and_then(|r| serde_json::from_str::<serde_json::Value>(r.get()).ok())
    };
    AuditRecord {
        audit_id: entry.audit_id,
        session_id: entry.session_id,
        interrupt_id: entry.interrupt_id,
        principal: entry.principal,
        decision: match entry.decision {
            tollgate_store::AuditDecision::Approved => AuditDecision::Approved,
            tollgate_store::AuditDecision::Rejected => AuditDecision::Rejected,
            tollgate_store::AuditDecision::Escalated => AuditDecision::Escalated,
            tollgate_store::AuditDecision::Expired => AuditDecision::Expired,
            tollgate_store::AuditDecision::Revoked => AuditDecision::Revoked,
            tollgate_store::AuditDecision::Cancelled => AuditDecision::Cancelled,
            tollgate_store::AuditDecision::PartiallyApproved => AuditDecision::PartiallyApproved,
            tollgate_store::AuditDecision::Checked => AuditDecision::Checked,
        },
        reason: entry.reason,
        tool_name: entry.tool_name,
        input: json(entry.input),
        edited_input: json(entry.edited_input),
        decided_at: entry.decided_at,
    }
}

/// What the interrupt itself says of a pending approval: its deadline, when it escalated, and who
/// may decide it now (an escalation changes them).
struct InterruptFacts {
    deadline_at: Option<i64>,
    escalated_at: Option<i64>,
    approvers: Vec<String>,
    review: Option<tollgate_api_types::types::Review>,
    approvals_required: Option<u32>,
    approvals: Vec<tollgate_api_types::types::ApprovalSoFar>,
}

impl InterruptFacts {
    fn of(open: Option<&tollgate_store::Interrupt>) -> Self {
        let asked = open.and_then(|i| ApprovalRequest::parse(i.request.get()).ok());
        let (review, approvals_required) =
            asked.as_ref().map_or((None, None), |a| (a.review.clone(), a.approvals_required));
        InterruptFacts {
            deadline_at: open.and_then(|i| i.deadline_at),
            escalated_at: open.and_then(|i| i.escalated_at),
            approvers: asked.map(|a| a.approvers).unwrap_or_default(),
            review,
            approvals_required,
            approvals: open.map(|i| crate::api::approvals_so_far(&i.approvals)).unwrap_or_default(),
        }
    }
}

/// The session's snapshot, or `None` when it does not exist.
///
/// # Errors
/// The store failed, or a row is corrupt (named in the error).
pub async fn snapshot(store: &dyn Store, session_id: &str) -> Result<Option<Snapshot>, ClientError> {
    // The pending cancel before the session row: the commit that applies a cancel clears it and
    // writes the run state that names it (`last_turn_cancelled`) at once, and these are two reads.
    // Read in the other order, a commit between them gave a snapshot with neither (a client waiting
    // for its cancel read "completed before the cancel"); in this order a cleared cancel means the
    // row read after it is at least as new.
    let cancel = store.pending_cancel(session_id).await?;
    let Some(session) = store.session(session_id).await? else {
        return Ok(None);
    };
    let state = RunState::parse(session.run_state.get())?;
    let messages = conversation(store, session_id, &state).await?;
    let revocations = read_all_items_of_kind(store, session_id, ItemKind::GrantRevoked).await?;
    let mut pending_interrupts = Vec::new();
    let mut tool_calls = Vec::new();
    let mut entries = Vec::new();
    for record in store.tool_calls(session_id).await? {
        entries.push(CallEntry::parse(record.record.get())?);
    }
    let grants = grants::session_grants(&self::history(&revocations), &entries)?
        .into_iter()
        .map(session_grant)
        .collect();
    let mut checks: std::collections::BTreeMap<String, CallCheck> = store
        .audit()
        .call_checks(session_id)
        .await?
        .into_iter()
        .map(|c| (c.tool_call_id.clone(), call_check(c)))
        .collect();
    for entry in entries {
        let mut call = tool_call(entry);
        call.checked = checks.remove(&call.tool_call_id);
        // A call waiting on an interrupt opened ahead in its batch: that one is listed below.
        if call.state == CallState::PendingApproval && call.decided_ahead.is_none() {
            let open = store.interrupt(session_id, &call.tool_call_id).await?;
            let facts = InterruptFacts::of(open.as_ref());
            pending_interrupts.push(PendingApproval {
                arguments: call.arguments.clone(),
                interrupt_id: call.tool_call_id.clone(),
                kind: call.kind,
                tool_name: call.tool_name.clone(),
                turn_id: call.turn_id.clone(),
                batch_id: call.batch_id.clone(),
                deadline_at: facts.deadline_at,
                escalated_at: facts.escalated_at,
                approvers: facts.approvers,
                review: facts.review,
                approvals_required: facts.approvals_required,
                approvals: facts.approvals,
            });
        }
        tool_calls.push(call);
    }
    // The turn's interrupts opened ahead in a batch and still open: in the inbox at once.
    for ahead in state.turn.iter().flat_map(|turn| &turn.ahead) {
        let open = store.interrupt(session_id, &ahead.interrupt_id).await?;
        if open.as_ref().is_some_and(|i| i.resolution.is_none()) {
            let facts = InterruptFacts::of(open.as_ref());
            pending_interrupts.push(PendingApproval {
                arguments: ahead.arguments.clone(),
                interrupt_id: ahead.interrupt_id.clone(),
                kind: ahead.kind,
                tool_name: ahead.tool_name.clone(),
                turn_id: state.turn.as_ref().map(|t| t.turn_id.clone()).unwrap_or_default(),
                batch_id: Some(ahead.batch_id.clone()),
                deadline_at: facts.deadline_at,
                escalated_at: facts.escalated_at,
                approvers: facts.approvers,
                review: facts.review,
                approvals_required: facts.approvals_required,
                approvals: facts.approvals,
            });
        }
    }
    Ok(Some(Snapshot {
        session_id: session.session_id,
        status: session.status,
        messages,
        pending_interrupts,
        tool_calls,
        usage: session.usage,
        cost_usd: state.cost_usd,
        last_turn_error: state.last_turn_error,
        last_turn_cancelled: state
            .last_turn_cancelled
            .map(|c| TurnCancelled { turn_id: c.turn_id, cancelled_by: c.cancelled_by }),
        cancel_requested: cancel.map(cancel_requested),
        turn_id: state.turn.map(|t| t.turn_id),
        next_event_seq: session.next_event_seq,
        started_by: store.audit().started_by(session_id).await?,
        agent: session.agent_name,
        unclaimable_since: None,
        decisions: decisions(store, session_id).await?,
        grants,
        live_text: live_text(store, session_id).await?,
    }))
}

/// The running segment's text so far: its `text_delta` blocks stored from the live row's
/// `from_seq` on (one per 512-byte block or tool call of this segment), then the
/// row's unstored tail. `None` while no segment streams.
async fn live_text(store: &dyn Store, session_id: &str) -> Result<Option<LiveText>, StoreError> {
    let Some(live) = store.live_text(session_id).await? else { return Ok(None) };
    let mut text = String::new();
    let mut chars = 0i64;
    if let Some(from) = live.from_seq.filter(|_| live.offset > 0) {
        let mut after = from - 1;
        'read: loop {
            let page = store.read_events(session_id, after, 200).await?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            for event in &page {
                if event.kind != EventKind::TextDelta.as_str()
                    || event.step != Some((live.step_id, live.fence))
                {
                    continue;
                }
                let Ok(block) = serde_json::from_str::<TextBlock>(event.payload.get()) else { continue };
                if i64::try_from(block.offset).ok() == Some(chars) {
                    chars += i64::try_from(block.text.chars().count()).unwrap_or(i64::MAX);
                    text.push_str(&block.text);
                }
                if chars >= live.offset {
                    break 'read;
                }
            }
        }
    }
    text.push_str(&live.text);
    Ok(Some(LiveText {
        turn_id: live.turn_id,
        attempt: live.attempt,
        step_id: live.step_id,
        fence: live.fence,
        text,
        updated_at: live.updated_at,
    }))
}

/// Revokes every grant in force for `tool` in the session, as `principal`: a `grant_revoked` item
/// (the next segment's planner reads it: the tool's next call waits for approval again) and its
/// event, in one write. Whether `principal` may revoke is the caller's check.
///
/// # Errors
/// An unknown session; [`ClientError::GrantNotFound`] when the tool has no grant in force (nothing
/// is written).
pub async fn revoke_grant(
    store: &dyn Store,
    session_id: &str,
    tool: &str,
    principal: &str,
) -> Result<RevokeReceipt, ClientError> {
    if store.session(session_id).await?.is_none() {
        return Err(StoreError::SessionNotFound { session_id: session_id.to_owned() }.into());
    }
    let revocations = read_all_items_of_kind(store, session_id, ItemKind::GrantRevoked).await?;
    let mut calls = Vec::new();
    for record in store.tool_calls(session_id).await? {
        calls.push(CallEntry::parse(record.record.get())?);
    }
    let in_force = grants::session_grants(&history(&revocations), &calls)?;
    let revocation = grants::Revocation { revoked_by: principal.to_owned(), revoked_at: now_ms() };
    let Some(item) = grants::revocation_item(&in_force, tool, &revocation) else {
        return Err(ClientError::GrantNotFound { session_id: session_id.to_owned(), tool: tool.to_owned() });
    };
    let decision_ids: Vec<String> = in_force
        .iter()
        .filter(|g| g.revoked.is_none() && g.grant.tool_name == tool)
        .map(|g| g.grant.decision_id.clone())
        .collect();
    let event = convert::event(
        Payload::GrantRevoked(GrantRevoked {
            tool_name: tool.to_owned(),
            decision_ids: decision_ids.clone(),
            revoked_by: principal.to_owned(),
            revoked_at: revocation.revoked_at,
        })
        .into(),
    );
    let message = UserMessage {
        session_id: session_id.to_owned(),
        client_key: fresh_key(),
        item: convert::item(item),
        wake: None,
        events: vec![event],
    };
    // The audit row names the decision that made the grant (the first, when several did).
    let entry = NewAuditEntry {
        principal: principal.to_owned(),
        decision: tollgate_store::AuditDecision::Revoked,
        reason: Some(format!("revoked the session grant for {tool}")),
        tool_name: Some(tool.to_owned()),
        input: None,
        edited_input: None,
    };
    let granted_by = decision_ids.first().map_or("", String::as_str);
    store.audit().send_user_message_as(message, granted_by, entry).await?;
    Ok(RevokeReceipt {
        session_id: session_id.to_owned(),
        tool_name: tool.to_owned(),
        decision_ids,
        revoked_by: principal.to_owned(),
    })
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

fn grant(grant: grants::GrantRef) -> Grant {
    Grant {
        tool_name: grant.tool_name,
        granted_by: grant.granted_by,
        granted_at: grant.granted_at,
        decision_id: grant.decision_id,
    }
}

fn session_grant(listed: grants::SessionGrant) -> SessionGrant {
    SessionGrant {
        grant: grant(listed.grant),
        revoked: listed
            .revoked
            .map(|r| GrantRevocation { revoked_by: r.revoked_by, revoked_at: r.revoked_at }),
    }
}

/// A stored deferred call as the API shows it.
fn tool_call(call: CallEntry) -> ToolCall {
    ToolCall {
        arguments: call.arguments,
        original_arguments: call.original_arguments,
        grants_session: call.grants_session.map(grant),
        approved_under: call.approved_under.map(grant),
        batch_id: call.batch_id,
        decided_ahead: call.decided_ahead.map(|a| DecidedAhead {
            decision_id: a.decision_id,
            batch_id: a.batch_id,
            decided_by: a.decided_by,
            decided_at: a.decided_at,
        }),
        kind: call.kind,
        requires_approval: call.requires_approval,
        runs_in: call.runs_in,
        state: call.state,
        images: call.images,
        diagnostics: call.diagnostics,
        tool_call_id: call.tool_call_id,
        tool_name: call.tool_name,
        turn_id: call.turn_id,
        checked: None,
    }
}

/// A stored check mark as the API shows it.
fn call_check(check: tollgate_store::CallCheck) -> CallCheck {
    CallCheck { checked_by: check.checked_by, checked_at: check.checked_at, note: check.note }
}

/// Marks tool call `tool_call_id` of the session checked by `principal` (audited).
///
/// # Errors
/// The call does not exist or needs no attention, the note is too long, or the store failed.
pub async fn mark_checked(
    store: &dyn Store,
    session_id: &str,
    tool_call_id: &str,
    principal: &str,
    note: Option<String>,
) -> Result<CheckReceipt, StoreError> {
    let mark = tollgate_store::CheckMark {
        session_id: session_id.to_owned(),
        tool_call_id: tool_call_id.to_owned(),
        principal: principal.to_owned(),
        note,
    };
    let receipt = store.audit().mark_checked(mark).await?;
    Ok(CheckReceipt { check: call_check(receipt.check), replayed: receipt.replayed })
}

/// Up to `limit` tool calls across sessions that need attention, oldest change first.
///
/// # Errors
/// The store failed, or a record is corrupt.
pub async fn attention(store: &dyn Store, limit: i64) -> Result<Vec<AttentionItem>, ClientError> {
    let mut calls = Vec::new();
    for row in store.audit().calls_needing_attention(limit).await? {
        calls.push(AttentionItem {
            call: tool_call(CallEntry::parse(row.record.get())?),
            session_id: row.session_id,
            agent: row.agent_name,
            updated_at: row.updated_at,
        });
    }
    Ok(calls)
}

/// The session's conversation for its snapshot: the store's projection of it (a few small rows,
/// not the item log) and the prompts no completed turn answered yet. A session created before
/// the projection existed is read from its whole item log.
///
/// # Errors
/// The store failed, or a row is corrupt.
pub async fn conversation(
    store: &dyn Store,
    session_id: &str,
    state: &RunState,
) -> Result<Vec<Message>, StoreError> {
    let page = store.read_messages(session_id, None, i64::MAX).await?;
    let message = |m: view::Message| Message {
        role: m.role.to_owned(),
        text: m.text,
        pending: m.pending,
        images: m.images,
    };
    if !page.projected {
        let items = read_all_items(store, session_id).await?;
        return Ok(view::messages(&history(&items), state).into_iter().map(message).collect());
    }
    let prompts =
        read_all_items_of_kind_after(store, session_id, ItemKind::UserPrompt, state.prompts_through).await?;
    let mut messages = Vec::with_capacity(page.messages.len());
    for stored in page.messages {
        let images = match &stored.images {
            Some(text) => serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
                table: "messages",
                key: format!("{session_id}/{}", stored.seq),
                detail: format!("its images are not a list of image references: {e}"),
            })?,
            None => Vec::new(),
        };
        messages.push(Message { role: stored.role, text: stored.text, pending: false, images });
    }
    messages.extend(view::pending_prompts(&history(&prompts), state).into_iter().map(message));
    Ok(messages)
}

/// Every item of the session of kind `kind`, in order (one index range per page).
///
/// # Errors
/// The store failed, or a row is corrupt.
pub async fn read_all_items_of_kind(
    store: &dyn Store,
    session_id: &str,
    kind: ItemKind,
) -> Result<Vec<Item>, StoreError> {
    read_all_items_of_kind_after(store, session_id, kind, 0).await
}

async fn read_all_items_of_kind_after(
    store: &dyn Store,
    session_id: &str,
    kind: ItemKind,
    after: i64,
) -> Result<Vec<Item>, StoreError> {
    const PAGE: i64 = 1000;
    let mut items: Vec<Item> = Vec::new();
    loop {
        let from = items.last().map_or(after, |item| item.seq);
        let page = store.read_items_of_kind(session_id, kind.as_str(), from, PAGE).await?;
        let done = (page.len() as i64) < PAGE;
        items.extend(page);
        if done {
            return Ok(items);
        }
    }
}

/// Every item of the session, in order.
///
/// # Errors
/// The store failed.
pub async fn read_all_items(store: &dyn Store, session_id: &str) -> Result<Vec<Item>, StoreError> {
    const PAGE: i64 = 1000;
    let mut items: Vec<Item> = Vec::new();
    loop {
        let after = items.last().map_or(0, |item| item.seq);
        let page = store.read_items(session_id, after, PAGE).await?;
        let done = (page.len() as i64) < PAGE;
        items.extend(page);
        if done {
            return Ok(items);
        }
    }
}

/// What [`turn::plan_run_model`] reads of a session: its transcript in resume form (one read of
/// a few large rows) and the items of [`turn::PLAN_ITEM_KINDS`], in order; or, for a session
/// stored before the transcript was kept in resume form, every item.
///
/// # Errors
/// The store failed.
pub async fn plan_inputs(
    store: &dyn Store,
    session_id: &str,
) -> Result<(Vec<Item>, turn::TranscriptSource), StoreError> {
    let stored = store.read_transcript(session_id).await?;
    if !stored.chunked {
        return Ok((read_all_items(store, session_id).await?, turn::TranscriptSource::Items));
    }
    let mut items = Vec::new();
    for kind in turn::PLAN_ITEM_KINDS {
        items.extend(read_all_items_of_kind(store, session_id, kind).await?);
    }
    items.sort_by_key(|item| item.seq);
    let source = turn::TranscriptSource::Chunks { session_id: stored.cli_session_id, chunks: stored.chunks };
    Ok((items, source))
}

/// Items as the state machine reads them.
pub fn history(items: &[Item]) -> Vec<HistoryItem<'_>> {
    items
        .iter()
        .map(|item| HistoryItem { seq: item.seq, kind: ItemKind::parse(&item.kind), body: item.body.get() })
        .collect()
}

/// Refuses a client (idempotency) key that is not 1–200 of letters, digits and `-_.:/@`, naming
/// `field` (the body's `client_key` or the `Idempotency-Key` header).
///
/// # Errors
/// The key's fault, by `field`.
pub fn check_client_key(field: &'static str, key: &str) -> Result<(), EngineError> {
    check_id(field, key)
}

/// Session ids, interrupt ids and client keys: 1–200 bytes of letters, digits and `-_.:/@`.
fn check_id(field: &'static str, id: &str) -> Result<(), EngineError> {
    let ok = !id.is_empty()
        && id.len() <= 200
        && id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:/@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(EngineError::BadInput {
            field,
            reason: format!("{id:?} must be 1 to 200 characters of letters, digits and -_.:/@"),
        })
    }
}

fn fresh_key() -> String {
    format!("auto:{}", random_id())
}

/// 128 random bits as 32 hex digits: an id no other process mints, whatever its pid and clock
/// (two API replicas in containers are both pid 1, and a key or session id is idempotent: a
/// collision would hand one caller the other's message or session).
pub fn random_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random number generator failed");
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const DEV: &str = "sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd";
    const C: &str = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

    fn pinned(digest: &str) -> Option<AgentDigest> {
        Some(AgentDigest { digest: digest.into(), pinned: true })
    }

    fn of(name: &str, digest: Option<AgentDigest>) -> SessionAgent {
        SessionAgent { name: Some(name.into()), digest }
    }

    /// What [`resolve_agent`] answers, or its error's text.
    async fn resolve(
        store: &dyn Store,
        agent: Option<&str>,
        digest: Option<&str>,
        serving: Option<&ServingAgent>,
    ) -> Result<SessionAgent, String> {
        resolve_agent(store, agent, digest, serving).await.map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn a_new_session_gets_the_agent_it_names_the_servers_or_the_only_one_and_never_one_no_worker_runs()
    {
        let dir = tempfile::tempdir().unwrap();
        let store = tollgate_store::SqliteStore::open(&dir.path().join("t.db")).await.unwrap();
        let store: &dyn Store = &store;
        assert_eq!(resolve(store, None, None, None).await, Ok(SessionAgent::default()), "no agent yet");
        store.agents().register_agent("support", A, true).await.unwrap();
        assert_eq!(
            resolve(store, None, None, None).await,
            Ok(of("support", Some(AgentDigest { digest: A.into(), pinned: false }))),
            "the only agent, its newest digest recorded"
        );
        store.agents().register_agent("billing", B, true).await.unwrap();
        store.agents().register_agent("billing", DEV, false).await.unwrap();
        let serving =
            ServingAgent { name: "support".into(), digest: AgentDigest { digest: A.into(), pinned: true } };
        assert_eq!(resolve(store, None, None, Some(&serving)).await, Ok(of("support", pinned(A))));
        assert_eq!(resolve(store, Some("support"), None, Some(&serving)).await, Ok(of("support", pinned(A))));
        assert_eq!(
            resolve(store, Some(A), None, None).await,
            Ok(of("support", pinned(A))),
            "a digest names its agent"
        );
        assert_eq!(resolve(store, Some("billing"), Some(B), None).await, Ok(of("billing", pinned(B))));
        assert_eq!(
            resolve(store, Some(B), Some(B), None).await,
            Ok(of("billing", pinned(B))),
            "the same digest twice"
        );
        let newest = resolve(store, Some("billing"), None, Some(&serving)).await.unwrap();
        assert_eq!(newest.name.as_deref(), Some("billing"));
        assert!(newest.digest.is_some_and(|d| !d.pinned), "a name alone pins nothing");
        let refused = [
            (None, None, "this store serves several agents (billing, support): name one"),
            (
                Some("nope"),
                None,
                "no Worker or server of agent `nope` has started on this store (agents: billing, support)",
            ),
            (Some(DEV), None, "agent `billing` was loaded from"),
            (Some("support"), Some(B), "no Worker of agent `support` has loaded"),
            (Some(A), Some(B), "are two digests"),
            (
                None,
                Some("sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"),
                "no Worker has loaded",
            ),
        ];
        for (agent, digest, why) in refused {
            let got = resolve(store, agent, digest, None).await;
            assert!(got.as_ref().is_err_and(|e| e.contains(why)), "{agent:?} {digest:?}: {got:?}");
        }
        // An agent pushed into the store but never run: its current version, pinned.
        let files = [("tollgate.toml".to_owned(), b"[agent]\n".to_vec())].into_iter().collect();
        let new = tollgate_store::NewVersion {
            name: "ops".into(),
            digest: DEV.into(),
            files,
            pushed_by: "carl".into(),
        };
        store.versions().push_version(new).await.unwrap();
        assert_eq!(resolve(store, Some("ops"), None, None).await, Ok(of("ops", pinned(DEV))));
        // A version by its number, pinned; the current one stays what others get.
        let files = [("tollgate.toml".to_owned(), b"[agent]\n# two\n".to_vec())].into_iter().collect();
        let two = tollgate_store::NewVersion {
            name: "ops".into(),
            digest: C.into(),
            files,
            pushed_by: "carl".into(),
        };
        store.versions().push_version(two).await.unwrap();
        assert_eq!(resolve(store, Some("ops@2"), None, None).await, Ok(of("ops", pinned(C))));
        assert_eq!(resolve(store, Some("ops@1"), Some(DEV), None).await, Ok(of("ops", pinned(DEV))));
        assert_eq!(resolve(store, Some("ops"), None, None).await, Ok(of("ops", pinned(DEV))));
        for (agent, digest, why) in [
            ("ops@3", None, "agent `ops` has no version 3: it has versions 1 to 2"),
            ("billing@1", None, "agent `billing` has no version 1: no version of it was pushed"),
            ("ops@1", Some(C), "a session runs under one"),
        ] {
            let got = resolve(store, Some(agent), digest, None).await;
            assert!(got.as_ref().is_err_and(|e| e.contains(why)), "{agent}: {got:?}");
        }
        let several = resolve(store, None, None, None).await.unwrap_err();
        assert!(several.contains("(billing, ops, support)"), "{several}");
        for (agent, digest, field) in [
            (Some("support@x"), None, "agent"),
            (Some("support@0"), None, "agent"),
            (Some("a b@1"), None, "agent"),
            (Some("a b"), None, "agent"),
            (None, Some("sha256:x"), "agent_digest"),
        ] {
            let got = resolve_agent(store, agent, digest, None).await;
            assert!(
                matches!(&got, Err(ClientError::BadInput(EngineError::BadInput { field: f, .. })) if *f == field),
                "{agent:?} {digest:?}: {got:?}"
            );
        }
    }
}
