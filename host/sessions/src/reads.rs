//! The session calls that read, on a store: the snapshot and its parts (conversation, calls,
//! pending approvals, decisions, grants, live text), the calls needing attention, and the item
//! reads the Worker's planner shares.

use crate::error::ClientError;
use tollgate_engine::approval::ApprovalRequest;
use tollgate_engine::events::{EventKind, TextBlock};
use tollgate_engine::session::turn::{self, HistoryItem};
use tollgate_engine::session::view;
use tollgate_engine::session::{CallEntry, CallState, ItemKind, RunState, grants};
use tollgate_store::{AuditQuery, Item, Store, StoreError};

use tollgate_engine::views::{
    AttentionItem, AuditRecord, CallCheck, CancelRequested, Grant, GrantRevocation, LiveText, Message,
    PendingApproval, SessionGrant, Snapshot, ToolCall, TurnCancelled,
};

pub(crate) fn cancel_requested(pending: tollgate_store::PendingCancel) -> CancelRequested {
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
        decision: entry.decision,
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
    review: Option<tollgate_engine::review::Review>,
    approvals_required: Option<u32>,
    approvals: Vec<tollgate_engine::views::ApprovalSoFar>,
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
            approvals: open.map(|i| approvals_so_far(&i.approvals)).unwrap_or_default(),
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
        forked_from: store.lineage(session_id).await?.map(forked_from),
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

/// A fork's lineage as the API shows it.
pub fn forked_from(lineage: tollgate_store::Lineage) -> tollgate_engine::views::ForkedFrom {
    tollgate_engine::views::ForkedFrom {
        session: lineage.parent_id,
        turn: lineage.turn,
        dry: lineage.dry,
        forked_by: lineage.forked_by,
        forked_at: lineage.created_at,
    }
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
        decided_ahead: call.decided_ahead,
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
pub(crate) fn call_check(check: tollgate_store::CallCheck) -> CallCheck {
    CallCheck { checked_by: check.checked_by, checked_at: check.checked_at, note: check.note }
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

/// The approvals an interrupt counted so far, as the API shows them.
pub fn approvals_so_far(
    approvals: &[tollgate_store::Approval],
) -> Vec<tollgate_engine::views::ApprovalSoFar> {
    approvals
        .iter()
        .map(|a| tollgate_engine::views::ApprovalSoFar {
            principal: a.principal.clone(),
            approved_at: a.approved_at,
        })
        .collect()
}
