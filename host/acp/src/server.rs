//! The ACP agent side of one connection: each method mapped onto [`Sessions`], as the caller
//! this process was started for. A prompt runs in a task of its own (the connection's dispatch
//! loop is never held while a turn runs): it stores the message, follows the session's events as
//! `session/update`s, asks the client about each approval its caller may decide, and answers when
//! the turn that took the message ends.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse, ContentBlock,
    ContentChunk, DeleteSessionRequest, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, ListSessionsResponse, LoadSessionRequest, LoadSessionResponse, McpCapabilities,
    NewSessionRequest, NewSessionResponse, PermissionOption, PermissionOptionKind, PromptCapabilities,
    PromptRequest, PromptResponse, RequestPermissionOutcome, RequestPermissionRequest, ResumeSessionRequest,
    ResumeSessionResponse, SessionCapabilities, SessionCloseCapabilities, SessionInfo,
    SessionListCapabilities, SessionNotification, SessionResumeCapabilities, SessionUpdate, TextContent,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};
use agent_client_protocol::{Agent, Client, ConnectTo, Error, ErrorCode};
use tollgate_engine::events::Payload;
use tollgate_engine::session::RunState;
use tollgate_engine::session::client::{DecisionScope, HumanDecision};
use tollgate_sessions::error::ClientError;
use tollgate_sessions::rights::Caller;
use tollgate_sessions::service::{Deciders, NewMessage, NewSession, SessionFilter, Sessions};
use tollgate_store::StoreError;
use tracing::{info, warn};

use crate::updates::{self, TurnEnd};

/// Events read per store call while following a session.
const PAGE: i64 = 200;
/// The longest wait for a wake-up before the store is read again (a wake-up may be lost).
const POLL: Duration = Duration::from_secs(1);

/// What one ACP connection serves: the session service, as one caller, for one agent.
#[derive(Clone, Debug)]
pub struct Face {
    sessions: Sessions,
    caller: Caller,
    agent: Option<String>,
}

impl Face {
    /// The face of `sessions` for `caller`; new sessions are of `agent` (the service's serving
    /// agent when `None`).
    pub fn new(sessions: Sessions, caller: Caller, agent: Option<String>) -> Self {
        Face { sessions, caller, agent }
    }
}

/// Serves ACP on `transport` until the client goes away. A prompt's turn goes on without it: the
/// session is durable, and `session/load` from any process picks it up.
///
/// # Errors
/// The transport failed.
pub async fn serve(face: Face, transport: impl ConnectTo<Agent> + 'static) -> Result<(), Error> {
    let face = Arc::new(face);
    let (new, prompt, load, list, cancel) =
        (face.clone(), face.clone(), face.clone(), face.clone(), face.clone());
    let (resume, close) = (face.clone(), face.clone());
    Agent
        .v1()
        .name("tollgate")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| responder.respond(initialize(&request)),
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, _cx| {
                responder.respond_with_result(new_session(&new, request).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, cx: ConnectionTo<Client>| {
                let face = prompt.clone();
                let task_cx = cx.clone();
                cx.spawn(
                    async move { responder.respond_with_result(run_prompt(&face, &task_cx, request).await) },
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, cx: ConnectionTo<Client>| {
                let face = load.clone();
                let task_cx = cx.clone();
                cx.spawn(async move {
                    responder.respond_with_result(load_session(&face, &task_cx, request).await)
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ResumeSessionRequest, responder, cx: ConnectionTo<Client>| {
                let face = resume.clone();
                let task_cx = cx.clone();
                cx.spawn(async move {
                    responder.respond_with_result(resume_session(&face, &task_cx, request).await)
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: CloseSessionRequest, responder, _cx| {
                // The session is durable: closing it here frees nothing but the client's view.
                let closed = close.sessions.session(&close.caller, &request.session_id.to_string()).await;
                responder.respond_with_result(closed.map(|_| CloseSessionResponse::new()).map_err(error))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: DeleteSessionRequest, responder, _cx| {
                responder.respond_with_error(Error::new(
                    ErrorCode::INVALID_REQUEST,
                    format!(
                        "session `{}` is not deleted: a Tollgate session's records are its audit trail \
                         (every call, decision and outcome); the operator's retention removes them",
                        request.session_id
                    ),
                ))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ListSessionsRequest, responder, _cx| {
                responder.respond_with_result(list_sessions(&list, request).await)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: CancelNotification, _cx| {
                let id = notification.session_id.to_string();
                match cancel.sessions.cancel(&cancel.caller, &id).await {
                    Ok(_) | Err(ClientError::Store(StoreError::NothingToCancel { .. })) => {}
                    Err(error) => warn!(session = %id, %error, "session/cancel was refused"),
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await
}

/// `initialize`: what this agent can keep. Sessions load from the store; prompts take text and
/// images (as the HTTP API does); MCP servers of the client's are not served yet.
fn initialize(request: &InitializeRequest) -> InitializeResponse {
    let version = if request.protocol_version < ProtocolVersion::V1 {
        request.protocol_version
    } else {
        ProtocolVersion::V1
    };
    let capabilities = AgentCapabilities::new()
        .load_session(true)
        .prompt_capabilities(PromptCapabilities::new().image(true))
        .mcp_capabilities(McpCapabilities::new())
        .session_capabilities(
            SessionCapabilities::new()
                .list(SessionListCapabilities::new())
                .resume(SessionResumeCapabilities::new())
                .close(SessionCloseCapabilities::new()),
        );
    InitializeResponse::new(version)
        .agent_capabilities(capabilities)
        .agent_info(Implementation::new("tollgate", env!("CARGO_PKG_VERSION")).title("Tollgate"))
}

/// `session/new`: a Tollgate session of the agent. The agent works in its own workspace, not in
/// the client's `cwd`.
async fn new_session(face: &Face, request: NewSessionRequest) -> Result<NewSessionResponse, Error> {
    no_mcp_servers(&request.mcp_servers)?;
    let new = NewSession {
        session_id: format!("session-{}", tollgate_sessions::ids::random_id()),
        agent: face.agent.clone(),
        ..NewSession::default()
    };
    let started = face.sessions.start(&face.caller, new).await.map_err(error)?;
    info!(session = %started.session_id, "session/new");
    Ok(NewSessionResponse::new(started.session_id))
}

/// The name of an MCP server the client gave.
fn server_name(server: &agent_client_protocol::v1::schema::McpServer) -> String {
    serde_json::to_value(server)
        .ok()
        .and_then(|value| value.get("name").and_then(|n| n.as_str()).map(str::to_owned))
        .unwrap_or_default()
}

/// `session/list`: the caller's sessions of the agent, a page at a time.
async fn list_sessions(face: &Face, request: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
    let filter = SessionFilter {
        status: None,
        agent: face.agent.clone(),
        after: request.cursor.unwrap_or_default(),
        limit: 100,
    };
    let list = face.sessions.list(&face.caller, filter).await.map_err(error)?;
    let sessions = list
        .sessions
        .into_iter()
        .map(|(session, _)| {
            let updated = rfc3339_millis(session.updated_at);
            SessionInfo::new(session.session_id, PathBuf::from("/")).updated_at(updated)
        })
        .collect();
    Ok(ListSessionsResponse::new(sessions).next_cursor(list.next_after))
}

/// Milliseconds since the epoch as RFC 3339 (UTC).
fn rfc3339_millis(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = tollgate_engine::summary::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms.rem_euclid(1000)
    )
}

/// `session/load`: the stored conversation replayed as `session/update`s (from the store, in
/// whatever process), then [`attach`].
async fn load_session(
    face: &Face,
    cx: &ConnectionTo<Client>,
    request: LoadSessionRequest,
) -> Result<LoadSessionResponse, Error> {
    no_mcp_servers(&request.mcp_servers)?;
    attach(face, cx, &request.session_id.to_string(), true).await?;
    Ok(LoadSessionResponse::new())
}

/// `session/resume`: [`attach`] without the replay.
async fn resume_session(
    face: &Face,
    cx: &ConnectionTo<Client>,
    request: ResumeSessionRequest,
) -> Result<ResumeSessionResponse, Error> {
    no_mcp_servers(&request.mcp_servers)?;
    attach(face, cx, &request.session_id.to_string(), false).await?;
    Ok(ResumeSessionResponse::new())
}

/// Attaches the client to session `id` (replaying its events as updates when `replay`): the
/// approvals still open are asked again, and a turn in progress (its Worker may have died with
/// the last client's process: it goes on on any Worker) is followed to its end.
async fn attach(face: &Face, cx: &ConnectionTo<Client>, id: &str, replay: bool) -> Result<(), Error> {
    // One read says what is open and where the log stood; the replay reads on to its end, and
    // the follower of a turn in progress goes on from whichever is later.
    let snapshot = face.sessions.snapshot(&face.caller, id).await.map_err(error)?;
    let mut after = snapshot.next_event_seq - 1;
    if replay {
        let mut seq = 0;
        loop {
            let page = face.sessions.events(&face.caller, id, seq, PAGE).await.map_err(error)?;
            let Some(last) = page.last() else { break };
            seq = last.seq;
            for event in &page {
                if let Some(payload) = updates::parse(&event.kind, event.payload.get()).map_err(internal)? {
                    notify_all(cx, id, updates::updates(&payload))?;
                }
            }
        }
        after = after.max(seq);
    }
    for pending in &snapshot.pending_interrupts {
        ask(face, cx, id, &pending.interrupt_id)?;
    }
    if snapshot.turn_id.is_some() {
        let (face, task_cx, id) = (face.clone(), cx.clone(), id.to_owned());
        cx.spawn(async move {
            if let Err(error) = follow(&face, &task_cx, &id, after, None).await {
                warn!(session = %id, %error, "the session's turn was not followed to its end");
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// The client's MCP servers are not reached yet: an error naming the first, if any.
fn no_mcp_servers(servers: &[agent_client_protocol::v1::schema::McpServer]) -> Result<(), Error> {
    match servers.first() {
        None => Ok(()),
        Some(server) => Err(invalid(format!(
            "mcpServers: this agent does not reach the client's MCP servers yet ({} given, the first `{}`); \
             attach the session without them",
            servers.len(),
            server_name(server)
        ))),
    }
}

/// `session/prompt`: stores the message and follows the session until the turn that took it ends.
async fn run_prompt(
    face: &Face,
    cx: &ConnectionTo<Client>,
    request: PromptRequest,
) -> Result<PromptResponse, Error> {
    let id = request.session_id.to_string();
    let message = message_of(request.prompt)?;
    let snapshot = face.sessions.snapshot(&face.caller, &id).await.map_err(error)?;
    let after = snapshot.next_event_seq - 1;
    let receipt = face.sessions.send(&face.caller, &id, message).await.map_err(error)?;
    match follow(face, cx, &id, after, Some(receipt.item_seq)).await? {
        TurnEnd::Stopped(reason) => {
            // What the turn used: the session's totals now, less those when the prompt came.
            let now = face.sessions.snapshot(&face.caller, &id).await.map_err(error)?.usage;
            let used = updates::usage_between(&snapshot.usage, &now);
            Ok(PromptResponse::new(reason).usage(used))
        }
        TurnEnd::Failed { reason, error } => Err(Error::new(ErrorCode::INTERNAL_ERROR, error)
            .data(serde_json::json!({"reason": reason.as_str(), "session_id": id}))),
    }
}

/// Follows session `id`'s events after seq `after` as `session/update`s, asking the approvals
/// they await, until the end of the turn that answers the prompt of item seq `prompt` (any turn's
/// end when `None`), which it returns.
async fn follow(
    face: &Face,
    cx: &ConnectionTo<Client>,
    id: &str,
    mut after: i64,
    prompt: Option<i64>,
) -> Result<TurnEnd, Error> {
    let mut signal = face.sessions.event_signal(id);
    // The turn that started after the message was stored: the one that may answer it.
    let mut turn: Option<String> = None;
    loop {
        let page = face.sessions.events(&face.caller, id, after, PAGE).await.map_err(error)?;
        for event in &page {
            after = event.seq;
            let Some(payload) = updates::parse(&event.kind, event.payload.get()).map_err(internal)? else {
                continue;
            };
            if matches!(payload, Payload::UserMessage(_)) && prompt.is_some() {
                continue; // The client sent it.
            }
            notify_all(cx, id, updates::updates(&payload))?;
            match &payload {
                Payload::TurnStarted(started) if turn.is_none() => turn = Some(started.turn_id.clone()),
                Payload::ApprovalAwaited(awaited) => ask(face, cx, id, &awaited.interrupt_id)?,
                _ => {}
            }
            let Some(end) = updates::turn_end(&payload) else { continue };
            let Some(prompt) = prompt else { return Ok(end) };
            let ended_turn = match &payload {
                Payload::TurnCompleted(p) => Some(p.turn_id.as_str()),
                Payload::TurnCancelled(p) => Some(p.turn_id.as_str()),
                Payload::TurnFailed(p) => p.turn_id.as_deref(),
                _ => None,
            };
            // A turn answers the message when its end took it in (completed or cancelled turns
            // move the session's prompts on), or when it is the turn that started after it.
            let answered = answered_through(face, id).await? >= prompt;
            let ours = turn.as_deref().is_some_and(|t| Some(t) == ended_turn);
            if answered || ours {
                return Ok(end);
            }
            turn = None;
        }
        if page.is_empty() {
            signal.wait(POLL).await;
        }
    }
}

/// The highest prompt the session's turns answered.
async fn answered_through(face: &Face, id: &str) -> Result<i64, Error> {
    let session = face.sessions.session(&face.caller, id).await.map_err(error)?;
    let state = RunState::parse(session.run_state.get()).map_err(internal)?;
    Ok(state.prompts_through)
}

/// Puts the approval `interrupt_id` to the client when its caller may decide it (in a task of
/// its own: the client answers when its user does), and otherwise tells it who is awaited.
fn ask(face: &Face, cx: &ConnectionTo<Client>, id: &str, interrupt_id: &str) -> Result<(), Error> {
    let (face, task_cx, id, interrupt_id) =
        (face.clone(), cx.clone(), id.to_owned(), interrupt_id.to_owned());
    cx.spawn(async move {
        if let Err(error) = ask_once(&face, &task_cx, &id, &interrupt_id).await {
            warn!(session = %id, interrupt = %interrupt_id, %error, "the approval was not put to the client");
        }
        Ok(())
    })
}

async fn ask_once(face: &Face, cx: &ConnectionTo<Client>, id: &str, interrupt_id: &str) -> Result<(), Error> {
    let caller = &face.caller;
    match face.sessions.deciders(caller, id, interrupt_id).await {
        Ok(Deciders::Caller) => {}
        Ok(Deciders::Awaited(who)) => {
            let text = format!("The call {interrupt_id} is {who}.");
            return notify(
                cx,
                id,
                SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::Text(TextContent::new(
                    text,
                )))),
            );
        }
        // Decided or closed meanwhile: nothing to ask.
        Err(ClientError::Store(StoreError::InterruptNotFound { .. })) => return Ok(()),
        Err(other) => return Err(error(other)),
    }
    let options = vec![
        PermissionOption::new("allow_once", "Allow once", PermissionOptionKind::AllowOnce),
        PermissionOption::new("allow_always", "Allow for this session", PermissionOptionKind::AllowAlways),
        PermissionOption::new("reject_once", "Reject", PermissionOptionKind::RejectOnce),
    ];
    let call = ToolCallUpdate::new(
        interrupt_id.to_owned(),
        ToolCallUpdateFields::new().status(ToolCallStatus::Pending),
    );
    let request = RequestPermissionRequest::new(id.to_owned(), call, options);
    let answer = cx.send_request(request).block_task().await?;
    let decision = match answer.outcome {
        RequestPermissionOutcome::Selected(selected) => match selected.option_id.to_string().as_str() {
            "allow_once" => approve(DecisionScope::Call),
            "allow_always" => approve(DecisionScope::Session),
            "reject_once" => HumanDecision {
                approved: false,
                message: Some("rejected by the user in the editor".into()),
                updated_input: None,
                scope: DecisionScope::Call,
                granted: None,
            },
            other => {
                return Err(invalid(format!(
                    "outcome.optionId: `{other}` is not one of the options offered"
                )));
            }
        },
        // The client withdrew the question: the call waits for another decision.
        _ => return Ok(()),
    };
    let key = format!("acp:{interrupt_id}:{}", tollgate_sessions::ids::random_id());
    match face.sessions.decide(caller, id, interrupt_id, &decision, Some(&key)).await {
        Ok(_) => Ok(()),
        // Someone decided first: the first decision wins.
        Err(ClientError::Store(
            StoreError::InterruptAlreadyResolved { .. } | StoreError::InterruptNotFound { .. },
        )) => Ok(()),
        Err(other) => Err(error(other)),
    }
}

fn approve(scope: DecisionScope) -> HumanDecision {
    HumanDecision { approved: true, message: None, updated_input: None, scope, granted: None }
}

/// The message of a prompt's content blocks: its text blocks joined, its images checked as the
/// HTTP API checks them; any other block is an error naming it.
fn message_of(prompt: Vec<ContentBlock>) -> Result<NewMessage, Error> {
    let mut text = Vec::new();
    let mut images = Vec::new();
    for (index, block) in prompt.into_iter().enumerate() {
        match block {
            ContentBlock::Text(t) => text.push(t.text),
            ContentBlock::Image(image) => images.push((image.mime_type, image.data)),
            other => {
                let kind = serde_json::to_value(&other)
                    .ok()
                    .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
                    .unwrap_or_else(|| "unknown".into());
                return Err(invalid(format!(
                    "prompt[{index}]: a `{kind}` block is not taken; send text and images"
                )));
            }
        }
    }
    let images = tollgate_sessions::media::check_message_images(
        images.iter().map(|(media_type, data)| (media_type.as_str(), data.as_str())),
    )
    .map_err(|e| invalid(format!("prompt: {e}")))?;
    let text = text.join("\n\n");
    if text.trim().is_empty() && images.is_empty() {
        return Err(invalid("prompt: no text and no image".to_owned()));
    }
    Ok(NewMessage { text, images, client_key: None })
}

fn notify_all(cx: &ConnectionTo<Client>, id: &str, updates: Vec<SessionUpdate>) -> Result<(), Error> {
    updates.into_iter().try_for_each(|update| notify(cx, id, update))
}

fn notify(cx: &ConnectionTo<Client>, id: &str, update: SessionUpdate) -> Result<(), Error> {
    cx.send_notification(SessionNotification::new(id.to_owned(), update))
}

/// A session call's failure as a JSON-RPC error: bad input is `invalid_params`, a session or
/// interrupt not found is `resource_not_found`, a refusal names who may.
fn error(error: ClientError) -> Error {
    match &error {
        ClientError::BadInput(_) | ClientError::KeyReused { .. } => invalid(error.to_string()),
        ClientError::Store(StoreError::SessionNotFound { .. } | StoreError::InterruptNotFound { .. })
        | ClientError::MediaNotFound { .. }
        | ClientError::GrantNotFound { .. } => Error::new(ErrorCode::RESOURCE_NOT_FOUND, error.to_string()),
        ClientError::Denied(_) | ClientError::AgentUnavailable(_) | ClientError::ForkRefused { .. } => {
            Error::new(ErrorCode::INVALID_REQUEST, error.to_string())
        }
        ClientError::Store(_) => Error::new(ErrorCode::INTERNAL_ERROR, error.to_string()),
    }
}

fn invalid(message: String) -> Error {
    Error::new(ErrorCode::INVALID_PARAMS, message)
}

fn internal(error: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::INTERNAL_ERROR, error.to_string())
}
