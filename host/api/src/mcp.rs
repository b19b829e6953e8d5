//! `/mcp/{agent}`: an agent's custom tools served to any MCP client over Streamable HTTP (rmcp),
//! under the agent's policies, with durable records and the approvals inbox.
//!
//! Read [`AgentServer`] first. Every request names a principal by its bearer token (the API's
//! principals; role `client` or `admin` calls tools, `viewer` and `approver` may only list them).
//! `tools/list` gives the agent's custom tools: the ones this process loaded ([`InlineReads`](tollgate_sessions::inline_reads::InlineReads), in
//! `tollgate serve`), else the ones its Workers published in the store (`tollgate api`, which
//! loads no bundle). `tools/call` checks the tool and its arguments against its schema before
//! anything is stored (a bad call is a JSON-RPC `invalid_params` error), then:
//!
//! - an approval-free read runs at once, in this process's sandbox when it has one
//!   ([`InlineReads`](tollgate_sessions::inline_reads::InlineReads)); otherwise it is a durable step a Worker runs, as every other call;
//! - every other call is a session of its own (`tollgate_engine::session::mcp`), created once per
//!   (agent, principal, tool, key): the key is the request's `_meta["io.tollgate/idempotency-key"]`,
//!   else the tool's canonical arguments, so a client that retries a request, or calls again with
//!   the same arguments, finds the same session and its record: a write runs once;
//! - a call that waits for approval opens an interrupt in the inbox (the principal is the
//!   session's starter, so separation of duties keeps it from approving its own call) and holds
//!   no connection: a client that declared the MCP Tasks extension gets a task (its id is the
//!   session's), `working` until the decision and then `completed` with the call's result (a
//!   rejection is an error result with the approver's reason); any other client gets, at once, a
//!   result that says the call awaits approval, names the interrupt and who is awaited (the
//!   session service's `deciders`), and a second call with
//!   the same arguments (or key) returns the outcome once decided.
//!
//! The HTTP transport runs without MCP sessions (stateless), so any process on the store answers
//! any request: `tasks/get` reads the store, and a task survives the process that created it.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, DetailedTask, ErrorCode, ErrorData, GetTaskParams, GetTaskResult, Implementation,
    JsonObject, ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities, ServerConfig, Task,
    TaskPayload, TaskStatus, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value};
use tollgate_engine::session::mcp::{self as calls, McpRequest, PublishedTool};
use tollgate_engine::session::{CallEntry, CallState, SessionStatus};
use tollgate_store::StoreError;

use crate::api::ApiState;
use tollgate_sessions::error::ClientError;
use tollgate_sessions::rights::{Action, Caller};
use tollgate_sessions::service::Deciders;

/// The request `_meta` key whose string value is the call's idempotency key.
pub const KEY_META: &str = "io.tollgate/idempotency-key";

/// The `_meta` key of a result that names the session (and task) holding the call's record.
pub const SESSION_META: &str = "io.tollgate/session";

/// The longest a `tools/call` waits for a call that needs no approval before it answers that
/// the call still runs (a Tasks client gets its task instead).
pub const CALL_WAIT: Duration = Duration::from_secs(30);

/// How often a Tasks client is asked to poll.
const POLL_MS: u64 = 1000;

/// The `/mcp/{agent}` routes over `state`, with their own bearer check (a 401 names the scheme,
/// as MCP clients expect).
pub fn router(state: ApiState) -> Router {
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None);
    if !state.auth.is_open() {
        // Every request carries a token: DNS rebinding finds nothing to call.
        config = config.disable_allowed_hosts();
    }
    let handler = AgentServer { state: state.clone(), local: None };
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .route_service("/mcp/{agent}", service)
        .layer(middleware::from_fn_with_state(state, authenticate))
}

async fn authenticate(State(state): State<ApiState>, mut request: Request, next: Next) -> Response {
    let Some(caller) = state.auth.authenticate(crate::api::bearer(request.headers())) else {
        let mut response = (
            StatusCode::UNAUTHORIZED,
            "a valid `Authorization: Bearer <token>` header is required: no principal has this token",
        )
            .into_response();
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        return response;
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// The MCP server of `/mcp/{agent}`: one per request (the transport is stateless); the principal
/// and the agent come from the request.
#[derive(Clone)]
pub struct AgentServer {
    state: ApiState,
    /// Over stdio (`tollgate mcp`): the local caller and the agent, for every request.
    local: Option<(Caller, String)>,
}

/// How a stored call stands, for an answer.
enum Progress {
    /// It has its final record.
    Done(CallEntry),
    /// It waits for a person: who is awaited, as the session service says to the caller
    /// ([`tollgate_sessions::service::Sessions::deciders`]).
    Awaiting(CallEntry, String),
    /// It ended without a record (cancelled before it ran).
    Ended(String),
    /// It runs (or is queued) still.
    Running,
}

fn invalid(message: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(message.into(), None)
}

fn internal(message: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(message.to_string(), None)
}

fn store_error(error: StoreError) -> ErrorData {
    internal(format!("the store failed: {error}"))
}

impl AgentServer {
    /// The server of `agent` for one local client (stdio), every request made by `caller`.
    pub fn local(state: ApiState, caller: Caller, agent: &str) -> Self {
        AgentServer { state, local: Some((caller, agent.to_owned())) }
    }

    /// Serves one local client over stdin and stdout until it closes them or `stop` resolves.
    ///
    /// # Errors
    /// The handshake failed, or the connection broke, with rmcp's reason.
    pub async fn serve_stdio(self, stop: impl Future<Output = ()>) -> Result<(), String> {
        use rmcp::ServiceExt;
        let running = self.serve(rmcp::transport::stdio()).await.map_err(|e| e.to_string())?;
        tokio::select! {
            ended = running.waiting() => ended.map(|_| ()).map_err(|e| e.to_string()),
            () = stop => Ok(()),
        }
    }

    /// The caller and the agent of the request in `context`.
    fn who(&self, context: &RequestContext<RoleServer>) -> Result<(Caller, String), ErrorData> {
        if let Some(local) = &self.local {
            return Ok(local.clone());
        }
        let parts = context
            .extensions
            .get::<axum::http::request::Parts>()
            .ok_or_else(|| internal("the request's HTTP parts are missing"))?;
        let caller = parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| internal("the request was not authenticated"))?;
        let agent = parts.uri.path().trim_end_matches('/').rsplit('/').next().unwrap_or_default().to_owned();
        Ok((caller, agent))
    }

    /// Refuses a caller that may not use `agent` (or, `call`, may not call tools).
    fn check_caller(&self, caller: &Caller, agent: &str, call: bool) -> Result<(), ErrorData> {
        let rules = self.state.auth.rules();
        if call {
            rules.allows(caller, Action::Write).map_err(|denied| refused(&denied))?;
        }
        rules.may_use_agent(caller, Some(agent)).map_err(|denied| refused(&denied))
    }

    /// The agent's tools: this process's, else those its Workers published.
    async fn tools(&self, agent: &str) -> Result<Vec<PublishedTool>, ErrorData> {
        tollgate_store::check_agent_name(agent).map_err(|why| invalid(format!("`/mcp/{agent}`: {why}")))?;
        if let Some(reads) = self.state.mcp_reads.as_ref().filter(|reads| reads.agent() == agent) {
            return reads
                .tools()
                .await
                .map_err(|why| internal(format!("the agent's tools did not load: {why}")));
        }
        let Some(published) = self.state.store.agents().agent_tools(agent).await.map_err(store_error)? else {
            let known = self.state.store.agents().known_agents().await.map_err(store_error)?;
            let mut names: Vec<&str> = known.iter().map(|k| k.name.as_str()).collect();
            names.dedup();
            return Err(invalid(format!(
                "no Worker of agent `{agent}` has published its tools on this store (agents: {})",
                if names.is_empty() { "none".to_owned() } else { names.join(", ") }
            )));
        };
        serde_json::from_str(&published.tools)
            .map_err(|e| internal(format!("the published tools of `{agent}` do not read: {e}")))
    }

    async fn call(
        &self,
        caller: &Caller,
        agent: &str,
        request: CallToolRequestParams,
        context_meta: &rmcp::model::RequestMetaObject,
        tasks: bool,
    ) -> Result<CallToolResponse, ErrorData> {
        self.check_caller(caller, agent, true)?;
        let tools = self.tools(agent).await?;
        let Some(tool) = tools.iter().find(|tool| tool.name == request.name) else {
            let names: Vec<&str> = tools.iter().map(|tool| tool.name.as_str()).collect();
            return Err(invalid(format!(
                "unknown tool `{}`: agent `{agent}` offers {}",
                request.name,
                if names.is_empty() { "no tools".to_owned() } else { names.join(", ") }
            )));
        };
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        tollgate_sessions::edits::check_edit(Some(&tool.input_schema), &arguments)
            .map_err(|e| invalid(format!("the arguments of `{}` {}", tool.name, reason_of(e))))?;
        let key = request_key(&request, context_meta)?;
        if tool.is_inline_read()
            && key.is_none()
            && let Some(reads) = self.state.mcp_reads.as_ref().filter(|reads| reads.agent() == agent)
        {
            let out = reads.read(&tool.name, &arguments).await;
            let content = vec![ContentBlock::text(out.text)];
            return Ok(if out.is_error {
                CallToolResult::error(content)
            } else {
                CallToolResult::success(content)
            }
            .into());
        }
        let key = match key {
            Some(key) => key,
            // A read runs each time it is called.
            None if tool.is_inline_read() => tollgate_sessions::ids::random_id(),
            None => format!("args:{}", tollgate_engine::gate::canonical::canonical(&arguments)),
        };
        let session_id = session_id(agent, &caller.name, &tool.name, &key);
        let asked = McpRequest { tool_name: tool.name.clone(), arguments, requested_by: caller.name.clone() };
        match self.state.sessions().request_call(caller, agent, &session_id, asked).await {
            Ok(_) => {}
            Err(ClientError::KeyReused { .. }) => {
                return Err(invalid(format!(
                    "the idempotency key `{key}` was used before for another call of `{}` (other arguments): use \
                     a new key",
                    tool.name
                )));
            }
            Err(ClientError::Denied(denied)) => return Err(refused(&denied)),
            Err(error @ ClientError::AgentUnavailable(_)) => return Err(invalid(error.to_string())),
            Err(ClientError::Store(error)) => return Err(store_error(error)),
            Err(other) => return Err(internal(other.to_string())),
        }
        let progress = self.progress(caller, &session_id, CALL_WAIT).await?;
        Ok(match progress {
            Progress::Running | Progress::Awaiting(..) if tasks => {
                CallToolResponse::Task(CreateTaskResult::new(self.task(&session_id, &progress)))
            }
            other => self.answer(&session_id, &tool.name, other).await?.into(),
        })
    }

    /// Where the call of `session_id` stands, waiting up to `wait` for it to settle or to wait on
    /// a person.
    async fn progress(
        &self,
        caller: &Caller,
        session_id: &str,
        wait: Duration,
    ) -> Result<Progress, ErrorData> {
        let store = self.state.store.as_ref();
        let call_id = calls::call_id(session_id);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut signal = store.event_signal(session_id);
            if let Some(record) = store.tool_call(session_id, &call_id).await.map_err(store_error)? {
                let call = CallEntry::parse(record.record.get()).map_err(internal)?;
                match &call.state {
                    state if state.outcome().is_some() => return Ok(Progress::Done(call)),
                    CallState::PendingApproval => {
                        let deciders =
                            self.state.sessions().deciders(caller, session_id, &call.tool_call_id).await;
                        let awaited = match deciders {
                            Ok(Deciders::Awaited(who)) => who,
                            Ok(Deciders::Caller) => {
                                "you may decide it yourself, in the inbox or over the API".to_owned()
                            }
                            Err(error) => return Err(internal(error)),
                        };
                        return Ok(Progress::Awaiting(call, awaited));
                    }
                    CallState::Cancelled | CallState::Unused => {
                        return Ok(Progress::Ended(format!(
                            "{} was cancelled before it ran",
                            call.tool_name
                        )));
                    }
                    _ => {}
                }
            } else if let Some(session) = store.session(session_id).await.map_err(store_error)?
                && session.status == SessionStatus::Idle.as_str()
                && store.step_in_flight(session_id).await.map_err(store_error)?.is_none()
            {
                return Ok(Progress::Ended("the call was cancelled before it ran".to_owned()));
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(Progress::Running);
            }
            signal.wait(left.min(Duration::from_secs(1))).await;
        }
    }

    /// The `tools/call` result of a call that does not become a task.
    async fn answer(
        &self,
        session_id: &str,
        tool: &str,
        progress: Progress,
    ) -> Result<CallToolResult, ErrorData> {
        let text = |text: String| vec![ContentBlock::text(text)];
        let mut result = match progress {
            Progress::Done(call) => self.final_result(session_id, &call).await?,
            Progress::Awaiting(call, awaited) => CallToolResult::success(text(format!(
                "Not run yet: {tool} awaits a person's approval (interrupt {}): {awaited}. Nothing has happened \
                 so far. Call {tool} again with the same arguments to get its outcome once it is decided.",
                call.tool_call_id
            ))),
            Progress::Running => CallToolResult::success(text(format!(
                "{tool} is still running. Call {tool} again with the same arguments to get its outcome; it \
                 will not run twice."
            ))),
            Progress::Ended(why) => CallToolResult::error(text(why)),
        };
        result.meta = Some(session_meta(session_id));
        Ok(result)
    }

    /// The result of a call that has its record: its output, or an error that says what happened.
    async fn final_result(&self, session_id: &str, call: &CallEntry) -> Result<CallToolResult, ErrorData> {
        let text = |text: String| vec![ContentBlock::text(text)];
        Ok(match &call.state {
            CallState::Succeeded { output } => CallToolResult::success(text(output.clone())),
            CallState::Failed { error } => CallToolResult::error(text(error.clone())),
            CallState::Rejected { message } => {
                let decisions = tollgate_sessions::reads::decisions(self.state.store.as_ref(), session_id)
                    .await
                    .map_err(store_error)?;
                let by = decisions
                    .iter()
                    .rev()
                    .find(|row| row.interrupt_id == call.tool_call_id)
                    .map(|row| row.principal.clone());
                CallToolResult::error(text(format!(
                    "{} was rejected{}{} and did not run.",
                    call.tool_name,
                    by.map(|by| format!(" by {by}")).unwrap_or_default(),
                    message.as_deref().map(|m| format!(": {m}")).unwrap_or_default(),
                )))
            }
            CallState::OutcomeUnknown => CallToolResult::error(text(format!(
                "The outcome of {} is unknown: it started and was cut off before it reported. It was not run \
                 again; check what happened before calling it again.",
                call.tool_name
            ))),
            other => CallToolResult::error(text(format!("{} is {}", call.tool_name, other.name()))),
        })
    }

    /// The task of the call in `session_id`, standing at `progress`.
    fn task(&self, session_id: &str, progress: &Progress) -> Task {
        let now = crate::webhooks::rfc3339_ms(now_ms());
        let message = match progress {
            Progress::Awaiting(call, awaited) => {
                format!("awaiting approval (interrupt {}): {awaited}", call.tool_call_id)
            }
            Progress::Running => "running".to_owned(),
            Progress::Done(call) => call.state.name().to_owned(),
            Progress::Ended(why) => why.clone(),
        };
        Task::new(session_id, TaskStatus::Working, now.clone(), now)
            .with_status_message(message)
            .with_poll_interval_ms(POLL_MS)
    }

    /// `tasks/get`: the task's state read from the store, for its caller only.
    async fn get(&self, caller: &Caller, agent: &str, task_id: &str) -> Result<GetTaskResult, ErrorData> {
        self.check_caller(caller, agent, false)?;
        self.owned_task(caller, agent, task_id).await?;
        let progress = self.progress(caller, task_id, Duration::ZERO).await?;
        let task = self.task(task_id, &progress);
        let payload = match progress {
            Progress::Running | Progress::Awaiting(..) => TaskPayload::Working,
            Progress::Done(_) | Progress::Ended(_) => {
                let tool = match &progress {
                    Progress::Done(call) => call.tool_name.clone(),
                    _ => String::new(),
                };
                let result = self.answer(task_id, &tool, progress).await?;
                let Value::Object(result) = serde_json::to_value(result).map_err(internal)? else {
                    return Err(internal("a tool result is a JSON object"));
                };
                TaskPayload::Completed { result }
            }
        };
        Ok(GetTaskResult::new(DetailedTask::new(task, payload)))
    }

    /// Refuses a task id that is not one of `caller`'s calls of `agent`: the same error whether it
    /// does not exist or belongs to someone else.
    async fn owned_task(&self, caller: &Caller, agent: &str, task_id: &str) -> Result<(), ErrorData> {
        let unknown = || invalid(format!("unknown task `{task_id}`"));
        if !task_id.starts_with("mcp-") || task_id.len() > 64 {
            return Err(unknown());
        }
        let store = self.state.store.as_ref();
        let Some(session) = store.session(task_id).await.map_err(store_error)? else { return Err(unknown()) };
        let starter = store.audit().started_by(task_id).await.map_err(store_error)?;
        if session.agent_name.as_deref() != Some(agent) || starter.as_deref() != Some(caller.name.as_str()) {
            return Err(unknown());
        }
        Ok(())
    }
}

impl ServerHandler for AgentServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tasks().build())
            .with_server_info(Implementation::new("tollgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools of a Tollgate agent. A write that needs approval waits for a person: with the MCP \
                 Tasks extension it is a task; otherwise the answer says so, and the same call again \
                 returns the outcome once decided. A write never runs twice for the same arguments (or \
                 `_meta.\"io.tollgate/idempotency-key\"`)."
                    .to_owned(),
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let (caller, agent) = self.who(&context)?;
        self.check_caller(&caller, &agent, false)?;
        let tools = self.tools(&agent).await?;
        Ok(ListToolsResult::with_all_items(tools.iter().map(listed).collect()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (caller, agent) = self.who(&context)?;
        let tasks = context.client_capabilities().is_some_and(|caps| caps.supports_tasks());
        let answered = self.call(&caller, &agent, request, &context.meta, tasks).await;
        let answer = match &answered {
            Err(_) => "refused",
            Ok(CallToolResponse::Task(_)) => "task",
            Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => "error_result",
            Ok(_) => "result",
        };
        self.state.metrics.mcp_call(&agent, answer);
        answered
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let (caller, agent) = self.who(&context)?;
        self.get(&caller, &agent, &request.task_id).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (caller, agent) = self.who(&context)?;
        self.check_caller(&caller, &agent, true)?;
        self.owned_task(&caller, &agent, &request.task_id).await?;
        match self.state.sessions().cancel(&caller, &request.task_id).await {
            Ok(_) => Ok(()),
            // Already settled: nothing to cancel, and the task says how it ended.
            Err(ClientError::Store(
                StoreError::NothingToCancel { .. } | StoreError::CancelPending { .. },
            )) => Ok(()),
            Err(ClientError::Denied(denied)) => Err(refused(&denied)),
            Err(other) => Err(internal(other)),
        }
    }
}

/// A refusal as the MCP error a client reads: its text, tagged `forbidden`.
fn refused(denied: &tollgate_sessions::rights::Denied) -> ErrorData {
    ErrorData::new(ErrorCode::INVALID_REQUEST, format!("{denied}"), Some(Value::from("forbidden")))
}

/// The `tools/list` entry of a published tool.
fn listed(tool: &PublishedTool) -> Tool {
    let schema = match &tool.input_schema {
        Value::Object(object) => object.clone(),
        _ => Map::from_iter([("type".to_owned(), Value::from("object"))]),
    };
    let mut listed = Tool::new(tool.name.clone(), tool.description.clone(), Arc::new(schema));
    let hints = tool.annotations;
    listed.annotations = Some(
        ToolAnnotations::new()
            .read_only(hints.read_only)
            .idempotent(hints.idempotent)
            .destructive(hints.destructive)
            .open_world(hints.open_world),
    );
    let mut meta = JsonObject::new();
    meta.insert("io.tollgate/effect".to_owned(), Value::from(tool.policy.effect.as_str()));
    meta.insert("io.tollgate/requires-approval".to_owned(), Value::Bool(tool.policy.requires_approval));
    // Claude Code offers the model an MCP tool only after a tool search unless the tool asks to be
    // loaded at once: an agent's few tools are worth their place in every request.
    meta.insert("anthropic/alwaysLoad".to_owned(), Value::Bool(true));
    listed.meta = Some(MetaObject(meta));
    listed
}

/// The request's idempotency key, checked as a client key: in the request's `_meta`, which rmcp
/// hands over as the context's (`context_meta`), or left in the parameters.
fn request_key(
    request: &CallToolRequestParams,
    context_meta: &rmcp::model::RequestMetaObject,
) -> Result<Option<String>, ErrorData> {
    let value =
        context_meta.get(KEY_META).or_else(|| request.meta.as_ref().and_then(|meta| meta.get(KEY_META)));
    let Some(value) = value else { return Ok(None) };
    let key = value.as_str().ok_or_else(|| invalid(format!("`_meta.\"{KEY_META}\"` must be a string")))?;
    tollgate_sessions::ids::check_client_key(KEY_META, key).map_err(|e| invalid(reason_of(e)))?;
    Ok(Some(key.to_owned()))
}

fn reason_of(error: tollgate_engine::session::EngineError) -> String {
    match error {
        tollgate_engine::session::EngineError::BadInput { reason, .. } => reason,
        other => other.to_string(),
    }
}

/// The session of the call of `tool` by `principal` on `agent` under `key`: `mcp-` and 40 hex
/// digits of a sha256 over the four, so the same request always finds the same session.
pub fn session_id(agent: &str, principal: &str, tool: &str, key: &str) -> String {
    let digest = crate::auth::token_hash(&format!("{agent}\0{principal}\0{tool}\0{key}"));
    format!("mcp-{}", &digest[..40])
}

fn session_meta(session_id: &str) -> MetaObject {
    let mut meta = JsonObject::new();
    meta.insert(SESSION_META.to_owned(), Value::from(session_id));
    MetaObject(meta)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_engine::gate::canonical::canonical;

    #[test]
    fn the_same_arguments_in_another_order_are_the_same_call_and_each_part_of_the_id_counts() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":2,"x":[{"k":1,"j":2}]}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":[{"j":2,"k":1}],"y":2},"b":1}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
        let id = session_id("support", "carl", "create_refund", &canonical(&a));
        assert!(id.starts_with("mcp-") && id.len() == 44, "{id}");
        for other in [
            session_id("billing", "carl", "create_refund", &canonical(&a)),
            session_id("support", "dora", "create_refund", &canonical(&a)),
            session_id("support", "carl", "create_refunds", &canonical(&a)),
            session_id("support", "carl", "create_refund", "k2"),
        ] {
            assert_ne!(id, other);
        }
    }
}
