//! [`Sessions`]: the calls a face makes on sessions. Each takes the authenticated [`Caller`],
//! checks what the caller may do ([`Rules`]) before anything is read for it, then makes the store
//! call of [`crate::writes`] or [`crate::reads`]. A refusal is [`ClientError::Denied`]; a session
//! the caller may not see is not found, as one that does not exist.
//!
//! The order of the checks is part of the contract, the same on every face: the caller's role for
//! the action first, then the session (not found, or not visible to a principal limited to other
//! agents), then what the call itself needs (the tool's approver groups, who started the session).

use std::sync::Arc;

use tollgate_engine::approval::ApprovalRequest;
use tollgate_engine::gate::canonical::same_input;
use tollgate_engine::session::ItemKind;
use tollgate_engine::session::client::HumanDecision;
use tollgate_engine::session::mcp::{self as mcp_calls, McpRequest};
use tollgate_engine::session::{CallEntry, EngineError};
use tollgate_engine::views::{AttentionItem, CancelReceipt, CheckReceipt, RevokeReceipt, Snapshot};
use tollgate_store::media::Media;
use tollgate_store::{
    Event, EventSignal, MessageReceipt, NewMedia, ResolveReceipt, Session, SessionSummary, Store, StoreError,
    UpgradeReceipt, UserMessage,
};

use crate::agents::{ServingAgent, resolve_agent};
use crate::error::ClientError;
use crate::rights::{Action, Caller, Rules};
use crate::{convert, reads, writes};

/// The session service of one process: its store, its rules, and the agent it serves, if any.
#[derive(Clone)]
pub struct Sessions {
    store: Arc<dyn Store>,
    rules: Rules,
    serving: Option<ServingAgent>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").field("rules", &self.rules).field("serving", &self.serving).finish()
    }
}

/// A new session, as a face asks for it.
#[derive(Clone, Debug, Default)]
pub struct NewSession {
    /// Its id (the face mints one when the client named none).
    pub session_id: String,
    /// The agent asked for: a name, `NAME@K`, or a digest (see [`resolve_agent`]).
    pub agent: Option<String>,
    /// A digest to pin it to.
    pub agent_digest: Option<String>,
    /// Its first message, stored once under the id (its key defaults to `create:<id>`).
    pub message: Option<NewMessage>,
}

/// A fork, as a face asks for it ([`Sessions::fork`]).
#[derive(Clone, Debug, Default)]
pub struct NewFork {
    /// The fork's id (the face mints one when the client named none).
    pub session_id: String,
    /// The original's turn to fork at, from 1: the fork's history ends with it.
    pub at_turn: i64,
    /// The agent version to run the fork under (a name, `NAME@K` or a digest); `None`: the
    /// original's agent and digest.
    pub agent_version: Option<String>,
    /// A dry fork: its writes are answered from the original's records or refused, never run.
    pub dry: bool,
}

/// A user message, as a face hands it over.
#[derive(Clone, Debug, Default)]
pub struct NewMessage {
    /// Its text.
    pub text: String,
    /// Its images, checked already ([`crate::media::check_message_images`]).
    pub images: Vec<NewMedia>,
    /// The client's idempotency key (`None`: a fresh one).
    pub client_key: Option<String>,
}

/// What [`Sessions::start`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// The session.
    pub session_id: String,
    /// `false`: it existed, and is unchanged.
    pub created: bool,
    /// Its first message's receipt, when one was given.
    pub message: Option<MessageReceipt>,
}

/// Which sessions [`Sessions::list`] lists: a page by id.
#[derive(Clone, Debug, Default)]
pub struct SessionFilter {
    /// Only sessions of this status.
    pub status: Option<String>,
    /// Only sessions of this agent.
    pub agent: Option<String>,
    /// The sessions after this id (the `next_after` of the page before).
    pub after: String,
    /// At most this many (the face bounds it).
    pub limit: i64,
}

/// A page of [`Sessions::list`].
#[derive(Clone, Debug)]
pub struct SessionList {
    /// The sessions the caller sees, by id, each with the pushed version its digest is, if any.
    pub sessions: Vec<(SessionSummary, Option<i64>)>,
    /// The `after` of the next page, when there may be one.
    pub next_after: Option<String>,
}

/// What deciding an interrupt depends on ([`Sessions::asked`]).
struct Asked {
    tool: String,
    approvers: Vec<String>,
    starter: Option<String>,
}

/// Who may decide a pending call, as far as one caller is concerned ([`Sessions::deciders`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deciders {
    /// The caller may decide it: a face may ask its user.
    Caller,
    /// Someone else must: the face tells its user who is awaited, and asks nothing.
    Awaited(String),
}

impl Sessions {
    /// The service over `store` under `rules`; `serving` is the agent of this process (new
    /// sessions get it by default), if any.
    pub fn new(store: Arc<dyn Store>, rules: Rules, serving: Option<ServingAgent>) -> Self {
        Sessions { store, rules, serving }
    }

    /// The store, for what faces read that is no session call (event streams, lists, health).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The rules in force.
    pub fn rules(&self) -> Rules {
        self.rules
    }

    /// The agent this process serves, if any.
    pub fn serving(&self) -> Option<&ServingAgent> {
        self.serving.as_ref()
    }

    /// The session `session_id` as `caller` may see it.
    ///
    /// # Errors
    /// [`StoreError::SessionNotFound`] when it does not exist or belongs to an agent the caller
    /// is not limited to; the store failed.
    pub async fn session(&self, caller: &Caller, session_id: &str) -> Result<Session, ClientError> {
        match self.store.session(session_id).await? {
            Some(session) if caller.sees_agent(session.agent_name.as_deref()) => Ok(session),
            _ => Err(StoreError::SessionNotFound { session_id: session_id.to_owned() }.into()),
        }
    }

    /// Creates a session unless it exists (idempotent on its id), for the agent it asks for, with
    /// `caller` as who started it; then stores its first message, if any.
    ///
    /// # Errors
    /// [`ClientError::Denied`] (the role, or an agent the caller may not use, asked for or the
    /// existing session's); bad input; no agent fits ([`ClientError::AgentUnavailable`]).
    pub async fn start(&self, caller: &Caller, new: NewSession) -> Result<Started, ClientError> {
        self.rules.allows(caller, Action::Write)?;
        let store = self.store.as_ref();
        let agent =
            resolve_agent(store, new.agent.as_deref(), new.agent_digest.as_deref(), self.serving.as_ref())
                .await?;
        self.rules.may_use_agent(caller, agent.name.as_deref())?;
        if caller.agents.is_some()
            && let Some(existing) = store.session(&new.session_id).await?
        {
            // Idempotent on the id, but not across agents the caller may not use.
            self.rules.may_use_agent(caller, existing.agent_name.as_deref())?;
        }
        let created = writes::start_by(store, &new.session_id, agent, &caller.name).await?;
        let message = match new.message {
            Some(message) => {
                // The same first message under the same id is one message.
                let key = message.client_key.unwrap_or_else(|| format!("create:{}", new.session_id));
                let receipt = writes::send_with_images(
                    store,
                    &new.session_id,
                    &message.text,
                    message.images,
                    Some(&key),
                )
                .await?;
                Some(receipt)
            }
            None => None,
        };
        Ok(Started { session_id: new.session_id, created, message })
    }

    /// Stores a user message; it starts a turn, or waits for the running one to end.
    ///
    /// # Errors
    /// [`ClientError::Denied`]; the session is not found; bad input; a key reused for another
    /// message.
    pub async fn send(
        &self,
        caller: &Caller,
        session_id: &str,
        message: NewMessage,
    ) -> Result<MessageReceipt, ClientError> {
        self.rules.allows(caller, Action::Write)?;
        self.visible(caller, session_id).await?;
        let key = message.client_key.as_deref();
        writes::send_with_images(self.store.as_ref(), session_id, &message.text, message.images, key).await
    }

    /// Decides the open interrupt `interrupt_id` as `caller`, under `client_key`.
    ///
    /// Who may decide: the caller's role, the tool's approver groups (stored with the interrupt
    /// when it opened: this process may not load the agent; an approval deadline's escalation
    /// replaces them) and who started the session. The decision is stored only if no escalation
    /// came between this check and it; after one, the check runs again on the new approvers.
    ///
    /// # Errors
    /// [`ClientError::Denied`]; the session or interrupt is not found; the decision is refused
    /// (see [`writes::resolve_as_of`]).
    pub async fn decide(
        &self,
        caller: &Caller,
        session_id: &str,
        interrupt_id: &str,
        decision: &HumanDecision,
        client_key: Option<&str>,
    ) -> Result<ResolveReceipt, ClientError> {
        self.rules.allows(caller, Action::Decide)?;
        self.visible(caller, session_id).await?;
        let store = self.store.as_ref();
        let mut checked_again = false;
        loop {
            let mut escalated_at = None;
            if let Some(open) = store.interrupt(session_id, interrupt_id).await? {
                let asked = self.asked(session_id, &open).await?;
                self.rules.may_decide(
                    caller,
                    session_id,
                    asked.starter.as_deref(),
                    &asked.tool,
                    &asked.approvers,
                )?;
                escalated_at = open.escalated_at;
            }
            let decided = writes::resolve_as_of(
                store,
                session_id,
                interrupt_id,
                decision,
                client_key,
                &caller.name,
                escalated_at,
            )
            .await;
            match decided {
                Err(ClientError::Store(StoreError::InterruptEscalated { .. })) if !checked_again => {
                    checked_again = true;
                }
                other => return other,
            }
        }
    }

    /// Whether `caller` may decide the open interrupt `interrupt_id`, and if not, who is awaited:
    /// what a face that both starts sessions and answers their approvals (an editor over ACP, an
    /// SDK client, `tollgate mcp`) asks before it puts the question to its user. It asks only a
    /// principal who may decide; otherwise it says who is awaited.
    ///
    /// # Errors
    /// The session or interrupt is not found (or not visible); the store failed.
    pub async fn deciders(
        &self,
        caller: &Caller,
        session_id: &str,
        interrupt_id: &str,
    ) -> Result<Deciders, ClientError> {
        self.visible(caller, session_id).await?;
        let store = self.store.as_ref();
        let Some(open) = store.interrupt(session_id, interrupt_id).await? else {
            return Err(StoreError::InterruptNotFound {
                session_id: session_id.to_owned(),
                interrupt_id: interrupt_id.to_owned(),
            }
            .into());
        };
        let asked = self.asked(session_id, &open).await?;
        let starter = asked.starter.as_deref();
        Ok(match self.rules.may_decide(caller, session_id, starter, &asked.tool, &asked.approvers) {
            Ok(()) => Deciders::Caller,
            Err(_) => Deciders::Awaited(crate::rights::awaited(self.rules, &asked.approvers, starter)),
        })
    }

    /// Asks the session's turn in progress to stop, as `caller`.
    ///
    /// # Errors
    /// [`ClientError::Denied`] (the role; a client cancels only sessions it started); the session
    /// is not found; [`StoreError::NothingToCancel`] when no turn runs.
    pub async fn cancel(&self, caller: &Caller, session_id: &str) -> Result<CancelReceipt, ClientError> {
        self.rules.allows(caller, Action::Cancel)?;
        self.session(caller, session_id).await?;
        let starter = self.store.audit().started_by(session_id).await?;
        self.rules.may_cancel(caller, session_id, starter.as_deref())?;
        writes::cancel(self.store.as_ref(), session_id, &caller.name).await
    }

    /// The session's snapshot.
    ///
    /// # Errors
    /// [`ClientError::Denied`]; the session is not found; a stored row is corrupt.
    pub async fn snapshot(&self, caller: &Caller, session_id: &str) -> Result<Snapshot, ClientError> {
        self.rules.allows(caller, Action::Read)?;
        self.visible(caller, session_id).await?;
        reads::snapshot(self.store.as_ref(), session_id)
            .await?
            .ok_or_else(|| StoreError::SessionNotFound { session_id: session_id.to_owned() }.into())
    }

    /// Revokes the session's grants in force for `tool`, as `caller`.
    ///
    /// Who may revoke: who may decide the tool (its approver groups, stored with the granting
    /// interrupts); revoking is no approval, so separation of duties does not apply.
    ///
    /// # Errors
    /// [`ClientError::Denied`]; the session is not found; [`ClientError::GrantNotFound`].
    pub async fn revoke_grant(
        &self,
        caller: &Caller,
        session_id: &str,
        tool: &str,
    ) -> Result<RevokeReceipt, ClientError> {
        self.rules.allows(caller, Action::Decide)?;
        let snapshot = self.snapshot(caller, session_id).await?;
        let mut approvers: Vec<String> = Vec::new();
        for listed in snapshot.grants.iter().filter(|g| g.revoked.is_none() && g.grant.tool_name == tool) {
            if let Some(open) = self.store.interrupt(session_id, &listed.grant.decision_id).await? {
                let asked = ApprovalRequest::parse(open.request.get()).ok();
                approvers.extend(asked.map(|a| a.approvers).unwrap_or_default());
            }
        }
        approvers.sort();
        approvers.dedup();
        self.rules.may_decide(caller, session_id, None, tool, &approvers)?;
        writes::revoke_grant(self.store.as_ref(), session_id, tool, &caller.name).await
    }

    /// Marks tool call `tool_call_id` (its outcome unknown, or failed) checked by `caller`, with
    /// `note` (blank: none).
    ///
    /// Who may check: an approver or admin of the session's agent; a check is no approval, so
    /// separation of duties does not apply.
    ///
    /// # Errors
    /// [`ClientError::Denied`]; the session or call is not found; nothing to check.
    pub async fn check(
        &self,
        caller: &Caller,
        session_id: &str,
        tool_call_id: &str,
        note: Option<String>,
    ) -> Result<CheckReceipt, ClientError> {
        self.rules.allows(caller, Action::Decide)?;
        self.session(caller, session_id).await?;
        let Some(record) = self.store.tool_call(session_id, tool_call_id).await? else {
            return Err(StoreError::ToolCallNotFound {
                session_id: session_id.to_owned(),
                tool_call_id: tool_call_id.to_owned(),
            }
            .into());
        };
        let tool = CallEntry::parse(record.record.get())?.tool_name;
        self.rules.may_decide(caller, session_id, None, &tool, &[])?;
        let note = note.filter(|n| !n.trim().is_empty());
        Ok(writes::mark_checked(self.store.as_ref(), session_id, tool_call_id, &caller.name, note).await?)
    }

    /// A page of the sessions `caller` sees, as `filter` asks, each with the pushed version of the
    /// agent its digest is (read once per agent of the page).
    ///
    /// # Errors
    /// [`ClientError::Denied`]; the store failed.
    pub async fn list(&self, caller: &Caller, filter: SessionFilter) -> Result<SessionList, ClientError> {
        self.rules.allows(caller, Action::Read)?;
        let store = self.store.as_ref();
        let page = store.list_sessions(filter.status.as_deref(), &filter.after, filter.limit).await?;
        let next_after =
            (page.len() as i64 == filter.limit).then(|| page.last().map(|s| s.session_id.clone()));
        let page: Vec<SessionSummary> = page
            .into_iter()
            .filter(|s| caller.sees_agent(s.agent_name.as_deref()))
            .filter(|s| filter.agent.as_ref().is_none_or(|agent| s.agent_name.as_ref() == Some(agent)))
            .collect();
        let mut versions = std::collections::BTreeMap::new();
        let mut names: Vec<&str> = page.iter().filter_map(|s| s.agent_name.as_deref()).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            for version in store.versions().agent_versions(name).await? {
                versions.insert((version.name, version.digest), version.version);
            }
        }
        let sessions = page
            .into_iter()
            .map(|s| {
                let version = match (&s.agent_name, &s.agent) {
                    (Some(name), Some(agent)) => versions.get(&(name.clone(), agent.digest.clone())).copied(),
                    _ => None,
                };
                (s, version)
            })
            .collect();
        Ok(SessionList { sessions, next_after: next_after.flatten() })
    }

    /// Up to `limit` of the session's events after seq `after`, in order, as `caller` may read
    /// them; [`Sessions::event_signal`] wakes a follower when more are stored.
    ///
    /// # Errors
    /// [`ClientError::Denied`]; the session not found (or not visible); the store failed.
    pub async fn events(
        &self,
        caller: &Caller,
        session_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<Event>, ClientError> {
        self.rules.allows(caller, Action::Read)?;
        self.session(caller, session_id).await?;
        Ok(self.store.read_events(session_id, after, limit).await?)
    }

    /// What wakes a follower of the session's events (in this process, and across processes on
    /// PostgreSQL or the SQLite file); a follower reads again after each wake-up, and now and then
    /// without one (a wake-up may be lost).
    pub fn event_signal(&self, session_id: &str) -> EventSignal {
        self.store.event_signal(session_id)
    }

    /// The image `digest` of session `session_id`, as `caller` may read it.
    ///
    /// # Errors
    /// [`ClientError::Denied`]; a malformed digest (bad input naming `digest`); the session not
    /// found (or not visible); [`ClientError::MediaNotFound`]; the store failed.
    pub async fn media(&self, caller: &Caller, session_id: &str, digest: &str) -> Result<Media, ClientError> {
        self.rules.allows(caller, Action::Read)?;
        if !tollgate_protocol::media::is_digest(digest) {
            let reason = "the digest must be `sha256:` and 64 lowercase hex digits".to_owned();
            return Err(EngineError::BadInput { field: "digest", reason }.into());
        }
        self.session(caller, session_id).await?;
        self.store.media().media(session_id, digest).await?.ok_or_else(|| ClientError::MediaNotFound {
            session_id: session_id.to_owned(),
            digest: digest.to_owned(),
        })
    }

    /// Up to `limit` tool calls that need attention across the sessions `caller` sees, oldest
    /// change first.
    ///
    /// # Errors
    /// [`ClientError::Denied`]; the store failed, or a record is corrupt.
    pub async fn attention(&self, caller: &Caller, limit: i64) -> Result<Vec<AttentionItem>, ClientError> {
        self.rules.allows(caller, Action::Read)?;
        let calls = reads::attention(self.store.as_ref(), limit).await?;
        // A call's `agent` is its session's: a principal limited to agents sees its agents' only.
        let visible = calls.into_iter().filter(|call| caller.sees_agent(call.agent.as_deref())).collect();
        Ok(visible)
    }

    /// The reports of the Workers of the agents `caller` sees that some tool components did not
    /// load ([`tollgate_store::AgentRegistry::unavailable_tools`], those fresher than
    /// [`tollgate_store::agents::REPORT_FRESH`]), by agent, then Worker.
    ///
    /// # Errors
    /// [`ClientError::Denied`]; the store failed, or a report is corrupt.
    pub async fn tools_unavailable(
        &self,
        caller: &Caller,
    ) -> Result<Vec<tollgate_store::UnavailableTools>, ClientError> {
        self.rules.allows(caller, Action::Read)?;
        let reports = self.store.agents().unavailable_tools(tollgate_store::agents::REPORT_FRESH).await?;
        Ok(reports.into_iter().filter(|report| caller.sees_agent(Some(&report.agent))).collect())
    }

    /// Forks the session `session_id` at the end of its turn `fork.at_turn` into the new session
    /// `fork.session_id`, as `caller`: its history is the original's up to there (shared, not
    /// copied); it has no grants, no spend, `caller` as its starter and a `forked` audit row; it
    /// runs under the original's agent and digest unless `fork.agent_version` names another (a
    /// name, `NAME@K` or a digest, as [`resolve_agent`] reads it). Writes recorded before the
    /// turn are history and never run again; the fork's own calls get their own keys, so a fork
    /// taken before a write runs it again, unless it is dry (the Worker then answers its writes
    /// from the original's records or refuses them).
    ///
    /// # Errors
    /// [`ClientError::Denied`] (the role, or an agent the caller may not use); the session is not
    /// found; [`ClientError::ForkRefused`] (no such turn, still running, waiting for approval,
    /// open tasks); the fork's id exists ([`StoreError::SessionExists`]); bad input. Nothing is
    /// written then.
    pub async fn fork(
        &self,
        caller: &Caller,
        session_id: &str,
        fork: NewFork,
    ) -> Result<tollgate_store::Lineage, ClientError> {
        self.rules.allows(caller, Action::Fork)?;
        let original = self.session(caller, session_id).await?;
        let store = self.store.as_ref();
        let agent = match fork.agent_version.as_deref() {
            Some(version) => resolve_agent(store, Some(version), None, None).await?,
            None => crate::agents::SessionAgent {
                name: original.agent_name.clone(),
                digest: original.agent.clone(),
            },
        };
        self.rules.may_use_agent(caller, agent.name.as_deref())?;
        writes::fork(store, &original, fork.at_turn, &fork.session_id, agent, &caller.name, fork.dry).await
    }

    /// Pins the session to the agent digest `to`.
    ///
    /// # Errors
    /// [`ClientError::Denied`]; a malformed digest, an unknown session, a session running a step.
    pub async fn upgrade(
        &self,
        caller: &Caller,
        session_id: &str,
        to: &str,
    ) -> Result<UpgradeReceipt, ClientError> {
        self.rules.allows(caller, Action::Operate)?;
        self.visible(caller, session_id).await?;
        writes::upgrade(self.store.as_ref(), session_id, to).await
    }

    /// Stores a client's direct call of one of `agent`'s tools (`/mcp/{agent}`, `tollgate mcp`) as
    /// the session `session_id` of its own, started by `caller`, unless it is stored already: the
    /// Worker's `McpCall` step settles it by the tool's policy. `true` when this stored it, `false`
    /// when it was stored before (a retry, or a poll for the outcome).
    ///
    /// # Errors
    /// [`ClientError::Denied`] (the role, or an agent the caller may not use);
    /// [`ClientError::KeyReused`] when the session holds a call with other arguments; the session
    /// belongs to another agent; no agent fits.
    pub async fn request_call(
        &self,
        caller: &Caller,
        agent: &str,
        session_id: &str,
        request: McpRequest,
    ) -> Result<bool, ClientError> {
        self.rules.allows(caller, Action::Write)?;
        self.rules.may_use_agent(caller, Some(agent))?;
        let store = self.store.as_ref();
        let reused = || ClientError::KeyReused { session_id: session_id.to_owned() };
        if let Some(session) = store.session(session_id).await? {
            if session.agent_name.as_deref() != Some(agent) {
                return Err(ClientError::AgentUnavailable(format!(
                    "session {session_id} belongs to another agent"
                )));
            }
            let items = reads::read_all_items_of_kind(store, session_id, ItemKind::McpCall).await?;
            if let Some(item) = items.first() {
                // A key names one call: the same key with other arguments is refused, not answered
                // with the first call's outcome.
                let stored = McpRequest::parse(item.body.get())?;
                return if same_input(&stored.arguments, &request.arguments) {
                    Ok(false)
                } else {
                    Err(reused())
                };
            }
        } else {
            let to = resolve_agent(store, Some(agent), None, self.serving.as_ref()).await?;
            writes::start_by(store, session_id, to, &caller.name).await?;
        }
        let message = UserMessage {
            session_id: session_id.to_owned(),
            client_key: "mcp-call".to_owned(),
            item: convert::item(request.item()),
            wake: Some(convert::step(mcp_calls::request_step(session_id))),
            events: Vec::new(),
        };
        match store.send_user_message(message).await {
            Ok(_) => Ok(true),
            Err(StoreError::IdempotencyConflict { .. }) => Err(reused()),
            Err(other) => Err(other.into()),
        }
    }

    /// What deciding the open interrupt `open` of `session_id` depends on: its tool and approver
    /// groups (stored with the interrupt when it opened, replaced by an escalation) and who
    /// started the session. [`Self::decide`] and [`Self::deciders`] ask the rules with it.
    async fn asked(&self, session_id: &str, open: &tollgate_store::Interrupt) -> Result<Asked, ClientError> {
        let asked = ApprovalRequest::parse(open.request.get()).ok();
        Ok(Asked {
            tool: asked.as_ref().map(|a| a.tool_name.clone()).unwrap_or_default(),
            approvers: asked.map(|a| a.approvers).unwrap_or_default(),
            starter: self.store.audit().started_by(session_id).await?,
        })
    }

    /// Refuses a session the caller may not see (a principal limited to other agents) as not
    /// found; one that does not exist passes, for the store call to name.
    async fn visible(&self, caller: &Caller, session_id: &str) -> Result<(), ClientError> {
        if caller.agents.is_none() {
            return Ok(());
        }
        match self.store.session(session_id).await? {
            Some(session) if !caller.sees_agent(session.agent_name.as_deref()) => {
                Err(StoreError::SessionNotFound { session_id: session_id.to_owned() }.into())
            }
            _ => Ok(()),
        }
    }
}
