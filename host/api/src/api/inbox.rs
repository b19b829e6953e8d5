//! `GET /v1/interrupts/events`: the approvals inbox across sessions, live, as Server-Sent Events.
//!
//! There is no log of interrupts across sessions to resume from, so the stream sends states and
//! their differences: first a `snapshot` event (every pending approval tracked, oldest first,
//! at most `limit`), then a `changed` event whenever approvals open, change or close (the ones
//! that opened or changed, and the keys of those gone). Each item says whether the caller may
//! decide it ([`DecideRight`], the rules `POST …/interrupts/{id}` applies), so a page disables what
//! would be refused.
//!
//! Each event's SSE `id` is the inbox's *version* after it: a fingerprint of every tracked item
//! (the XOR of each item's sha256, as sent) and of the total, so equal inboxes have equal
//! versions whatever their history. A client that reconnects with `Last-Event-ID` gets no snapshot while the inbox is as
//! it had it, and a fresh snapshot when it changed meanwhile; either way it ends up current.
//!
//! The stream wakes on any session's new events (the store's [`tollgate_store::EventSignal`] for
//! `*`, which also fires for other processes' commits: PostgreSQL's NOTIFY, SQLite's
//! `data_version` watch) and re-reads the open interrupts, at most once per [`MIN_GAP`]. It also
//! re-reads every [`POLL`], in case a wake-up was lost in a way the store does not see (a
//! reconnected listener wakes everyone, but a commit can slip between a SQLite connection's
//! replacement and the watch's first read on the new one).
//!
//! # Caveats
//!
//! - Only the oldest `limit` approvals are tracked; `total` says how many are pending.
//! - Who started a session and its agent are read once per session per stream (they never change).
//! - Every open stream re-reads the tracked approvals after any session's new events (at most
//!   every 50 ms) and every [`POLL`] when nothing happens: with 1,000 pending, a page of 1,000 rows
//!   per open inbox every 5 s even when nothing changes (it was every second before the stores
//!   woke readers for other processes' commits). Changes show within ~50-100 ms in process and on
//!   PostgreSQL, ~100-200 ms from another process on SQLite (its watch interval).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::time::Duration;

use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream, StreamExt};
use sha2::{Digest, Sha256};
use tollgate_store::StoreError;

use super::input::Params;
use super::openapi::ReadErrors;
use super::types::{DecideRight, InboxEvent, InboxItem, InboxQuery, InterruptKey, StreamError};
use super::{ApiError, ApiResult, ApiState, MAX_LIMIT, pending_interrupt};
use tollgate_sessions::rights::Caller;

/// The re-read when no wake-up came (see the module's doc).
const POLL: Duration = Duration::from_secs(5);
/// How many "who started this session" lookups run at once.
const STARTER_LOOKUPS: usize = 8;
/// The least time between two reads: a burst of events (live text) costs one read.
const MIN_GAP: Duration = Duration::from_millis(50);

/// `GET /v1/interrupts/events`.
#[utoipa::path(
    get,
    path = "/v1/interrupts/events",
    operation_id = "inbox_events",
    tag = "approvals",
    summary = "The approvals inbox across sessions, live, as Server-Sent Events",
    description = "`text/event-stream`. First a `snapshot` event (data: an InboxEvent whose `interrupts` are every pending approval tracked, oldest first), then a `changed` event (`interrupts`: opened or changed, to upsert by session and interrupt id; `gone`: closed) whenever the inbox changes. Each event's `id` is the inbox's version after it: reconnect with `Last-Event-ID` and no snapshot is sent unless the inbox changed meanwhile. Each item's `decide` says whether the caller may decide it and why not. When the store fails mid-stream an `error` event (data: a StreamError) ends the stream. Comments (`:`) keep the connection alive every 15 s.",
    params(InboxQuery, ("Last-Event-ID" = Option<String>, Header, pattern = "^[0-9a-fA-F]{1,16}$", description = "The `id` of the last event received: the inbox's version the client has (hexadecimal)")),
    responses(
        (status = 200, description = "The inbox, live", body = InboxEvent, content_type = "text/event-stream"),
        ReadErrors,
    )
)]
pub(super) async fn stream(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let params = Params::parse(query.as_deref(), &["limit"])?;
    let limit = params.int("limit", 1, MAX_LIMIT)?.unwrap_or(MAX_LIMIT);
    let had = match headers.get("last-event-id") {
        Some(value) => {
            // As the document declares it: 1 to 16 hex digits, nothing around them.
            Some(
                value
                    .to_str()
                    .ok()
                    .filter(|v| (1..=16).contains(&v.len()))
                    .and_then(|v| u64::from_str_radix(v, 16).ok())
                    .ok_or_else(|| {
                        ApiError::bad("Last-Event-ID", "Last-Event-ID must be an inbox version (hex)")
                    })?,
            )
        }
        None => None,
    };
    // Subscribe before the first read: nothing committed after it is missed.
    let signal = state.store.event_signal("*");
    let inbox = Inbox {
        state,
        caller,
        limit,
        signal,
        tracked: None,
        total: None,
        had,
        starters: HashMap::new(),
        agents: HashMap::new(),
        done: false,
    };
    Ok(Sse::new(events(inbox)).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response())
}

/// One stream's state.
struct Inbox {
    state: ApiState,
    caller: Caller,
    limit: i64,
    signal: tollgate_store::EventSignal,
    /// What the client has: each item's hash and JSON, by key (`None` before the first event).
    tracked: Option<BTreeMap<InterruptKey, u64>>,
    /// The version the client said it had (`Last-Event-ID`), until the first read.
    had: Option<u64>,
    /// The `total` last sent.
    total: Option<i64>,
    /// Who started each session seen.
    starters: HashMap<String, Option<String>>,
    /// Each session's agent (shown, filtered on, and limiting a caller limited to agents).
    agents: HashMap<String, Option<String>>,
    done: bool,
}

fn events(inbox: Inbox) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold(inbox, |mut inbox| async move {
        let mut first = true;
        loop {
            if inbox.done {
                return None;
            }
            if !first {
                let mut stopping = inbox.state.stopping.clone();
                let stop = tokio::select! {
                    _ = inbox.signal.wait(POLL) => false,
                    _ = stopping.wait_for(|stop| *stop) => true,
                };
                if stop {
                    return None;
                }
                tokio::time::sleep(MIN_GAP).await;
            }
            first = false;
            match inbox.read().await {
                Ok(Some(event)) => return Some((Ok(event), inbox)),
                Ok(None) => {}
                Err(error) => {
                    inbox.done = true;
                    let data = serde_json::to_string(&StreamError { error: error.message.clone() })
                        .expect("serializes");
                    return Some((Ok(Event::default().event("error").data(data)), inbox));
                }
            }
        }
    })
}

impl Inbox {
    /// Reads the open interrupts; the event that brings the client up to date, if any.
    async fn read(&mut self) -> Result<Option<Event>, ApiError> {
        let store = &self.state.store;
        let mut total = store.count_open_interrupts().await?;
        let mut now = BTreeMap::new();
        let mut items = Vec::new();
        let mut open = store.open_interrupts(None, self.limit).await?;
        // Each session's agent and who started it, for the sessions not seen yet, a few lookups
        // at a time (neither ever changes).
        let unknown: BTreeSet<String> = open
            .iter()
            .filter(|o| {
                !self.starters.contains_key(&o.session_id) || !self.agents.contains_key(&o.session_id)
            })
            .map(|o| o.session_id.clone())
            .collect();
        type Found = (String, Result<Option<String>, StoreError>, Result<Option<String>, StoreError>);
        let found: Vec<Found> = stream::iter(unknown)
            .map(|session| async move {
                let starter = store.audit().started_by(&session).await;
                let agent = store.session(&session).await.map(|s| s.and_then(|s| s.agent_name));
                (session, starter, agent)
            })
            .buffer_unordered(STARTER_LOOKUPS)
            .collect()
            .await;
        for (session, starter, agent) in found {
            self.starters.insert(session.clone(), starter?);
            self.agents.insert(session, agent?);
        }
        if self.caller.agents.is_some() {
            // Only its agents' approvals, and their count: nothing of the others, not even how many.
            open.retain(|o| {
                self.caller.sees_agent(self.agents.get(&o.session_id).cloned().flatten().as_deref())
            });
            total = open.len() as i64;
        }
        for open in open {
            let interrupt = pending_interrupt(open)?;
            let session = interrupt.session_id.clone();
            let started_by = self.starters.get(&session).cloned().flatten();
            let agent = self.agents.get(&session).cloned().flatten();
            let decide = right(&self.state, &self.caller, &interrupt, started_by.as_deref());
            let item = InboxItem { interrupt, started_by, agent, decide };
            let key = InterruptKey { session_id: session, interrupt_id: item.interrupt.interrupt_id.clone() };
            now.insert(key, hash(&item));
            items.push(item);
        }
        // The tracked items and the total: a client whose count is stale is not current either.
        let version =
            now.values().fold(0u64, |v, h| v ^ h) ^ (total as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let (kind, sent) = match self.tracked.take() {
            None if self.had == Some(version) => ("snapshot", None),
            None => ("snapshot", Some(InboxEvent { interrupts: items, gone: Vec::new(), total })),
            Some(before) => {
                let gone: Vec<InterruptKey> =
                    before.keys().filter(|k| !now.contains_key(k)).cloned().collect();
                let changed: Vec<InboxItem> = items
                    .into_iter()
                    .filter(|item| {
                        let key = InterruptKey {
                            session_id: item.interrupt.session_id.clone(),
                            interrupt_id: item.interrupt.interrupt_id.clone(),
                        };
                        before.get(&key) != now.get(&key)
                    })
                    .collect();
                let quiet = gone.is_empty() && changed.is_empty() && self.total == Some(total);
                ("changed", (!quiet).then_some(InboxEvent { interrupts: changed, gone, total }))
            }
        };
        self.tracked = Some(now);
        self.total = Some(total);
        self.had = None;
        Ok(sent.map(|event| {
            let data = serde_json::to_string(&event).expect("serializes");
            Event::default().id(format!("{version:016x}")).event(kind).data(data)
        }))
    }
}

/// Whether `caller` may decide `interrupt`: the rules of `POST …/interrupts/{id}` (its role, the
/// tool's approver groups stored with the interrupt, who started the session).
fn right(
    state: &ApiState,
    caller: &Caller,
    interrupt: &super::types::PendingInterrupt,
    starter: Option<&str>,
) -> DecideRight {
    let rules = state.auth.rules();
    let decided = rules.may_decide(
        caller,
        &interrupt.session_id,
        starter,
        &interrupt.tool_name,
        &interrupt.request.approvers,
    );
    let required = interrupt.approvals_required.unwrap_or(1);
    if decided.is_ok() && interrupt.approvals.iter().any(|a| a.principal == caller.name) {
        return DecideRight {
            allowed: false,
            code: Some(super::types::ErrorCode::AlreadyApproved),
            reason: Some(format!(
                "{} approved it already; it needs {required} different approvers, so another approver decides it",
                caller.name
            )),
        };
    }
    match decided {
        Ok(()) => DecideRight { allowed: true, code: None, reason: None },
        Err(denied) => DecideRight {
            allowed: false,
            code: Some(super::denied_code(&denied)),
            reason: Some(denied.to_string()),
        },
    }
}

/// An item's fingerprint: the first 8 bytes of the sha256 of its JSON.
fn hash(item: &InboxItem) -> u64 {
    let json = serde_json::to_vec(item).expect("serializes");
    let digest = Sha256::digest(&json);
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
}
