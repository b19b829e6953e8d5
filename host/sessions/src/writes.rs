//! The session calls that write, on a store: start, send, decide, cancel, revoke a grant, mark a
//! call checked, upgrade, fork. Each is one store transaction; the rules are `tollgate_engine::session`'s.
//! Who may make them is [`crate::service::Sessions`]' check, made before these run.

use crate::agents::{SessionAgent, check_digest};
use crate::error::ClientError;
use crate::ids::{check_id, fresh_key};
use crate::reads::{call_check, cancel_requested, history, read_all_items_of_kind};
use tollgate_engine::approval::ApprovalRequest;
use tollgate_engine::events::{DecisionRecorded, GrantRevoked, Payload};
use tollgate_engine::session::client::{self, HumanDecision};
use tollgate_engine::session::{CallEntry, EngineError, ItemKind, RunState, SessionStatus, grants};
use tollgate_store::{
    AgentDigest, MessageReceipt, NewAuditEntry, NewSession, Resolution, ResolveReceipt, Store, StoreError,
    UpgradeReceipt, UserMessage,
};

use crate::convert;
use crate::edits;
use crate::rights;
use tollgate_engine::views::{CancelReceipt, CheckReceipt, RevokeReceipt};

/// Creates the session unless it exists, for the only agent the store knows (none yet: the first
/// agent to register adopts it); `true` when it was created.
///
/// # Errors
/// A bad id, or the store failed.
pub async fn start(store: &dyn Store, session_id: &str) -> Result<bool, ClientError> {
    start_under(store, session_id, None).await
}

/// Creates the session unless it exists, recording the digest it runs under (see the Worker's
/// `Agent::session_agent`) and [`rights::LOCAL`] as who started it; `true` when it was created. It
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
    start_by(store, session_id, SessionAgent { name, digest: agent }, rights::LOCAL).await
}

/// Creates the session unless it exists, for `agent` (see [`crate::agents::resolve_agent`]), recording
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

/// Forks `original` at turn `at_turn` into the new session `fork_id`, under `agent`, by
/// `principal` (its starter): where the turn ends and the fork's run state are
/// [`tollgate_engine::session::fork::plan`]'s, from the original's items, calls, run state and step
/// in flight; the rows are [`Store::fork_session`]'s, in one transaction.
///
/// # Errors
/// A bad id; [`ClientError::ForkRefused`] (nothing written); the original is not found; the fork's
/// id exists; the store failed, or a row is corrupt.
pub async fn fork(
    store: &dyn Store,
    original: &tollgate_store::Session,
    at_turn: i64,
    fork_id: &str,
    agent: SessionAgent,
    principal: &str,
    dry: bool,
) -> Result<tollgate_store::Lineage, ClientError> {
    use tollgate_engine::session::fork::{self, ForkItem, Original};
    check_id("session_id", fork_id)?;
    if let Some(digest) = &agent.digest {
        check_digest("agent_version", &digest.digest)?;
    }
    let sid = original.session_id.as_str();
    let state = RunState::parse(original.run_state.get())?;
    let mut calls = Vec::new();
    for record in store.tool_calls(sid).await? {
        calls.push(CallEntry::parse(record.record.get())?);
    }
    let busy = store.step_in_flight(sid).await?.is_some();
    let items = crate::reads::read_all_items(store, sid).await?;
    let items: Vec<ForkItem<'_>> = items
        .iter()
        .map(|item| ForkItem {
            seq: item.seq,
            kind: ItemKind::parse(&item.kind),
            turn_id: item.turn_id.as_deref(),
            body: item.body.get(),
        })
        .collect();
    let awaiting_approval = original.status == SessionStatus::AwaitingApproval.as_str();
    let now = Original { state: &state, busy, awaiting_approval, calls: &calls };
    let plan = fork::plan(now, &items, at_turn)
        .map_err(|refusal| ClientError::ForkRefused { session_id: sid.to_owned(), refusal })?;
    let new = tollgate_store::NewFork {
        session_id: fork_id.to_owned(),
        parent_id: sid.to_owned(),
        turn: at_turn,
        through_item_seq: plan.through_item_seq,
        run_state: plan.run_state.to_raw(),
        agent: agent.digest,
        agent_name: agent.name,
        forked_by: principal.to_owned(),
        dry,
    };
    Ok(store.fork_session(new).await?)
}

/// Pins the session to the agent digest `to` (see [`Store::upgrade_session`]).
///
/// # Errors
/// A malformed digest, an unknown session, a session that is running a step.
pub async fn upgrade(store: &dyn Store, session_id: &str, to: &str) -> Result<UpgradeReceipt, ClientError> {
    check_digest("to", to)?;
    Ok(store.upgrade_session(session_id, to).await?)
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

/// Decides the open interrupt `interrupt_id` under `client_key` as [`rights::LOCAL`]; the waiting
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
    resolve_as(store, session_id, interrupt_id, decision, client_key, rights::LOCAL).await
}

/// Decides the open interrupt `interrupt_id` under `client_key` as `principal`: the resolution,
/// a `decision_recorded` event and one audit row (who, the decision, the reason, the tool and its
/// input; the time is the database's) in one transaction, none on a replay. Whether `principal`
/// may decide is the caller's check ([`rights::Rules::may_decide`]).
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
/// ([`rights::Rules::may_cancel`]).
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
