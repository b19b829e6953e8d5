//! The HTTP API (axum): sessions, messages, decisions, snapshots, the approvals inbox, live
//! events over Server-Sent Events, health, metrics and the OpenAPI document.
//!
//! [`router`] builds it over a store; `tollgate serve` runs it beside a Worker and `tollgate api`
//! alone. Every write goes through [`crate::sessions`], so the state machine's rules and the
//! store's idempotency hold for HTTP clients too. The routes and their shapes are listed in
//! `openapi.json` beside this file (served at `/openapi.json`).
//!
//! Errors are JSON: `{"error":{"code":"…","message":"…","field":"…"}}` with a 4xx for bad input
//! (the field, query parameter or limit named; see [`input`]), 404 for an unknown session or
//! interrupt, 405 for a wrong method, 409 for a conflicting repeat, 413 for a body over
//! [`MAX_BODY`], 415 for a body that is not `application/json`, 401 without the bearer token
//! when one is configured, 5xx when the store fails: 503 with a `Retry-After` header when the
//! store is unavailable for a while (database unreachable, pool timeout, disk full, read-only
//! file), the message naming the cause. `/healthz` probes a read and a write (writing nothing):
//! `ok` (200), `degraded` (200: reads work, writes do not) or `down` (503), with the store's
//! reason.

mod events;
mod input;

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tollgate_engine::session::client::Decision;
use tollgate_engine::session::{EngineError, status};
use tollgate_store::{AgentDigest, Store, StoreError, UnavailableReason};

use self::input::{JsonBody, Params, parse, path_ids};
use crate::metrics::Metrics;
use crate::sessions::{self, ClientError};

/// The OpenAPI document of this API.
pub const OPENAPI: &str = include_str!("openapi.json");

/// The largest request body accepted.
pub const MAX_BODY: usize = 512 * 1024;

/// The session statuses `GET /v1/sessions?status=` filters by: the state machine's.
const STATUSES: [&str; 3] = [status::IDLE, status::RUNNING, status::AWAITING_APPROVAL];

/// The largest page of a list.
const MAX_LIMIT: i64 = 1000;

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The bearer token every request but `/healthz` must carry, when set.
    pub token: Option<Arc<str>>,
    /// The process's metrics.
    pub metrics: Arc<Metrics>,
    /// Turns `true` when the server stops: open event streams end, so a graceful shutdown does
    /// not wait for their clients.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// The agent a new session records when the request names none: the agent this process
    /// loaded (`tollgate serve`), or `None` (`tollgate api`: any Worker runs it).
    pub agent: Option<AgentDigest>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState").field("token", &self.token.as_ref().map(|_| "…")).finish_non_exhaustive()
    }
}

/// The API's routes over `state`.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/v1/sessions", post(create_session).get(list_sessions))
        .route("/v1/sessions/{id}", get(get_session))
        .route("/v1/sessions/{id}/messages", post(send_message))
        .route("/v1/sessions/{id}/interrupts/{interrupt_id}", post(decide))
        .route("/v1/sessions/{id}/events", get(events::stream))
        .route("/v1/sessions/{id}/upgrade", post(upgrade_session))
        .route("/v1/agent-upgrades", post(upgrade_all))
        .route("/v1/interrupts", get(list_interrupts))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// An API error as JSON.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    field: Option<String>,
    /// Seconds for a `Retry-After` header (a store that is unavailable for a while).
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into(), field: None, retry_after: None }
    }

    fn bad(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            field: Some(field.into()),
            ..Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
        }
    }

    fn no_session(id: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "session_not_found", format!("no session `{id}`"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message, "field": self.field}});
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        response
    }
}

impl From<ClientError> for ApiError {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::BadInput(EngineError::BadInput { field, reason }) => {
                ApiError::bad(field, format!("{field}: {reason}"))
            }
            ClientError::BadInput(other) => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "stored_row_refused", other.to_string())
            }
            ClientError::Store(store) => store.into(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        let text = error.to_string();
        match error {
            StoreError::SessionNotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "session_not_found", text)
            }
            StoreError::InterruptNotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, "interrupt_not_found", text)
            }
            StoreError::InterruptAlreadyResolved { .. } => {
                ApiError::new(StatusCode::CONFLICT, "interrupt_already_resolved", text)
            }
            StoreError::IdempotencyConflict { .. } => {
                ApiError::new(StatusCode::CONFLICT, "idempotency_conflict", text)
            }
            StoreError::Invalid { .. } => ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", text),
            StoreError::SessionBusy { .. } => ApiError::new(StatusCode::CONFLICT, "session_busy", text),
            StoreError::Corrupt { .. } | StoreError::FutureVersion { .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "stored_row_refused", text)
            }
            StoreError::Unavailable { reason, .. } => ApiError {
                retry_after: Some(retry_after(reason)),
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    format!("the store cannot take this request now ({reason}); retry later: {text}"),
                )
            },
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store_error", text),
        }
    }
}

type ApiResult = Result<Response, ApiError>;

/// The `Idempotency-Key` header, else the body's `client_key`.
fn client_key(headers: &HeaderMap, body_key: Option<String>) -> Result<Option<String>, ApiError> {
    match headers.get("idempotency-key") {
        Some(value) => value
            .to_str()
            .map(|v| Some(v.to_owned()))
            .map_err(|_| ApiError::bad("Idempotency-Key", "the Idempotency-Key header must be ASCII")),
        None => Ok(body_key),
    }
}

/// Constant-time comparison of two byte strings (the length is not secret).
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn authorize(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let Some(token) = &state.token else { return next.run(request).await };
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.get(..7).filter(|scheme| scheme.eq_ignore_ascii_case("bearer ")).map(|_| &v[7..]))
        .map(str::trim);
    match given {
        Some(given) if same_secret(given.as_bytes(), token.as_bytes()) => next.run(request).await,
        _ => {
            let mut response = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid `Authorization: Bearer <token>` header is required",
            )
            .into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
            response
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateSession {
    session_id: Option<String>,
    message: Option<String>,
    client_key: Option<String>,
    /// Pins the new session to this agent digest (else the serving process's agent, if any).
    agent_digest: Option<String>,
}

#[derive(Serialize)]
struct MessageView {
    item_seq: i64,
    turn_started: bool,
    replayed: bool,
}

async fn create_session(
    State(state): State<ApiState>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    Params::parse(query.as_deref(), &[])?;
    let request: CreateSession = if body.is_empty() {
        CreateSession { session_id: None, message: None, client_key: None, agent_digest: None }
    } else {
        parse(&body)?
    };
    let session_id = request.session_id.unwrap_or_else(new_session_id);
    let agent = match request.agent_digest {
        Some(digest) => Some(AgentDigest { digest, pinned: true }),
        None => state.agent.clone(),
    };
    let created = sessions::start_under(state.store.as_ref(), &session_id, agent).await?;
    let message = match &request.message {
        Some(text) => {
            // Idempotent on the id: the same first message under the same id is one message.
            let key = client_key(&headers, request.client_key.clone())?
                .unwrap_or_else(|| format!("create:{session_id}"));
            let receipt = sessions::send(state.store.as_ref(), &session_id, text, Some(&key)).await?;
            Some(MessageView {
                item_seq: receipt.item_seq,
                turn_started: receipt.step_id.is_some(),
                replayed: receipt.replayed,
            })
        }
        None => None,
    };
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, axum::Json(json!({"session_id": session_id, "created": created, "message": message})))
        .into_response())
}

fn new_session_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("session-{:x}{:x}{}", nanos, std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SendMessage {
    text: String,
    client_key: Option<String>,
}

async fn send_message(
    State(state): State<ApiState>,
    path: Result<Path<Vec<String>>, PathRejection>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let [id] = path_ids(path, ["id"])?;
    Params::parse(query.as_deref(), &[])?;
    let request: SendMessage = parse(&body)?;
    let key = client_key(&headers, request.client_key)?;
    let receipt = sessions::send(state.store.as_ref(), &id, &request.text, key.as_deref()).await?;
    let view = MessageView {
        item_seq: receipt.item_seq,
        turn_started: receipt.step_id.is_some(),
        replayed: receipt.replayed,
    };
    Ok((StatusCode::ACCEPTED, axum::Json(view)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Decide {
    approved: bool,
    #[serde(default)]
    message: Option<String>,
    client_key: Option<String>,
}

async fn decide(
    State(state): State<ApiState>,
    path: Result<Path<Vec<String>>, PathRejection>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let [id, interrupt_id] = path_ids(path, ["id", "interrupt_id"])?;
    Params::parse(query.as_deref(), &[])?;
    let request: Decide = parse(&body)?;
    let key = client_key(&headers, request.client_key)?;
    let decision = Decision { approved: request.approved, message: request.message };
    let receipt =
        sessions::resolve(state.store.as_ref(), &id, &interrupt_id, &decision, key.as_deref()).await?;
    Ok(axum::Json(json!({
        "session_id": id,
        "interrupt_id": interrupt_id,
        "approved": decision.approved,
        "replayed": receipt.replayed,
    }))
    .into_response())
}

async fn get_session(
    State(state): State<ApiState>,
    path: Result<Path<Vec<String>>, PathRejection>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let [id] = path_ids(path, ["id"])?;
    Params::parse(query.as_deref(), &[])?;
    match sessions::snapshot(state.store.as_ref(), &id).await? {
        Some(snapshot) => Ok(axum::Json(snapshot).into_response()),
        None => Err(ApiError::no_session(&id)),
    }
}

async fn list_sessions(State(state): State<ApiState>, RawQuery(query): RawQuery) -> ApiResult {
    let params = Params::parse(query.as_deref(), &["status", "after", "limit"])?;
    let status = params.one_of("status", &STATUSES)?;
    let after = params.text("after").unwrap_or("");
    if after.len() > input::MAX_ID {
        return Err(ApiError::bad(
            "after",
            format!(
                "after must be a session id (the `next_after` of the previous page) of at most {} bytes",
                input::MAX_ID
            ),
        ));
    }
    let limit = params.int("limit", 1, MAX_LIMIT)?.unwrap_or(100);
    let list = state.store.list_sessions(status.as_deref(), after, limit).await?;
    let next = (list.len() as i64 == limit).then(|| list.last().map(|s| s.session_id.clone())).flatten();
    let sessions: Vec<Value> = list
        .into_iter()
        .map(|s| {
            json!({
                "session_id": s.session_id,
                "status": s.status,
                "created_at": s.created_at,
                "updated_at": s.updated_at,
                "agent_digest": s.agent.as_ref().map(|a| a.digest.as_str()),
                "agent_pinned": s.agent.as_ref().is_some_and(|a| a.pinned),
            })
        })
        .collect();
    Ok(axum::Json(json!({"sessions": sessions, "next_after": next})).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Upgrade {
    to: String,
}

/// `POST /v1/sessions/{id}/upgrade {to}`: pins a waiting or idle session to the agent digest `to`.
async fn upgrade_session(
    State(state): State<ApiState>,
    path: Result<Path<Vec<String>>, PathRejection>,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let [id] = path_ids(path, ["id"])?;
    Params::parse(query.as_deref(), &[])?;
    let request: Upgrade = parse(&body)?;
    let receipt = sessions::upgrade(state.store.as_ref(), &id, &request.to).await?;
    Ok(axum::Json(json!({
        "session_id": id,
        "from": receipt.from.as_ref().map(|a| a.digest.as_str()),
        "from_pinned": receipt.from.as_ref().is_some_and(|a| a.pinned),
        "to": receipt.to.digest,
        "upgraded": receipt.event_seq.is_some(),
    }))
    .into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpgradeAll {
    to: String,
    /// Only sessions under this digest (else every session not already pinned to `to`).
    from: Option<String>,
}

/// `POST /v1/agent-upgrades {to, from?}`: every session that can move (idle or waiting) is
/// pinned to `to`; the running ones are listed as busy and left as they are.
async fn upgrade_all(
    State(state): State<ApiState>,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    Params::parse(query.as_deref(), &[])?;
    let request: UpgradeAll = parse(&body)?;
    sessions::check_digest("to", &request.to).map_err(ClientError::from)?;
    if let Some(from) = &request.from {
        sessions::check_digest("from", from).map_err(ClientError::from)?;
    }
    let (mut upgraded, mut busy, mut unchanged) = (Vec::new(), Vec::new(), 0u64);
    let mut after = String::new();
    loop {
        let page = state.store.list_sessions(None, &after, 500).await?;
        let Some(last) = page.last() else { break };
        after.clone_from(&last.session_id);
        for session in page {
            let digest = session.agent.as_ref().map(|a| a.digest.as_str());
            if request.from.as_deref().is_some_and(|from| digest != Some(from)) {
                continue;
            }
            if session.agent.as_ref().is_some_and(|a| a.pinned && a.digest == request.to) {
                unchanged += 1;
                continue;
            }
            match state.store.upgrade_session(&session.session_id, &request.to).await {
                Ok(receipt) if receipt.event_seq.is_some() => {
                    upgraded.push(json!({"session_id": session.session_id, "from": digest}));
                }
                Ok(_) => unchanged += 1,
                Err(error @ StoreError::SessionBusy { .. }) => {
                    busy.push(json!({"session_id": session.session_id, "message": error.to_string()}));
                }
                Err(StoreError::SessionNotFound { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
    }
    Ok(axum::Json(json!({"to": request.to, "upgraded": upgraded, "busy": busy, "unchanged": unchanged}))
        .into_response())
}

async fn list_interrupts(State(state): State<ApiState>, RawQuery(query): RawQuery) -> ApiResult {
    let params = Params::parse(query.as_deref(), &["status", "limit"])?;
    params.one_of("status", &["pending"])?;
    let limit = params.int("limit", 1, MAX_LIMIT)?.unwrap_or(100);
    let interrupts: Vec<Value> = state
        .store
        .open_interrupts(limit)
        .await?
        .into_iter()
        .map(|i| {
            let request: Value = serde_json::from_str(i.request.get()).unwrap_or(Value::Null);
            json!({
                "session_id": i.session_id,
                "interrupt_id": i.interrupt_id,
                "tool_name": request.get("tool_name"),
                "arguments": request.get("arguments"),
                "turn_id": request.get("turn_id"),
                "created_at": i.created_at,
                "request": request,
            })
        })
        .collect();
    Ok(axum::Json(json!({"interrupts": interrupts})).into_response())
}

/// How long a client should wait before retrying a request the store could not take.
fn retry_after(reason: UnavailableReason) -> u64 {
    match reason {
        UnavailableReason::Busy => 1,
        _ => 5,
    }
}

/// The longest a health probe waits for the store.
const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// `ok` when the store reads and can take a write, `degraded` (200) when it reads but cannot
/// write, `down` (503) when it cannot read; `store` says which and why.
async fn healthz(State(state): State<ApiState>) -> Response {
    let timed = |what: &'static str| StoreError::Invalid {
        what: format!("no {what} answer within {} s", HEALTH_TIMEOUT.as_secs()),
    };
    // Both at once: a store that is down makes each wait for its connection timeout.
    let (read, write) = tokio::join!(
        tokio::time::timeout(HEALTH_TIMEOUT, state.store.list_sessions(None, "", 1)),
        tokio::time::timeout(HEALTH_TIMEOUT, state.store.probe_write()),
    );
    let read = read.unwrap_or_else(|_| Err(timed("read"))).map(|_| ());
    let write = write.unwrap_or_else(|_| Err(timed("write")));
    let reason = |e: &StoreError| e.unavailable().map_or("error", UnavailableReason::code);
    let (status, http) = match (&read, &write) {
        (Ok(()), Ok(())) => ("ok", StatusCode::OK),
        (Ok(()), Err(_)) => ("degraded", StatusCode::OK),
        (Err(_), _) => ("down", StatusCode::SERVICE_UNAVAILABLE),
    };
    let failed = read.as_ref().err().or(write.as_ref().err());
    let store = json!({
        "readable": read.is_ok(),
        "writable": write.is_ok(),
        "reason": failed.map(reason),
        "error": failed.map(ToString::to_string),
    });
    (http, axum::Json(json!({"status": status, "store": store}))).into_response()
}

async fn metrics(State(state): State<ApiState>) -> Response {
    let open = state.store.count_open_interrupts().await.ok();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render(open)).into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route; see /openapi.json")
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} is not allowed on {}; see /openapi.json", request.method(), request.uri().path()),
    )
}

#[cfg(test)]
mod tests {
    use axum::body::Bytes;

    use super::*;

    #[test]
    fn secrets_compare_equal_only_when_every_byte_matches() {
        assert!(same_secret(b"s3cret", b"s3cret"));
        assert!(!same_secret(b"s3cret", b"s3creT"));
        assert!(!same_secret(b"s3cret", b"s3cre"));
    }

    #[test]
    fn a_body_error_names_the_field() {
        let error = parse::<SendMessage>(&Bytes::from_static(b"{\"txt\":\"hi\"}")).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("txt"));
        let error = parse::<SendMessage>(&Bytes::from_static(b"{}")).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("text"));
        let error = parse::<Decide>(&Bytes::from_static(b"{\"approved\":\"yes\"}")).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("approved"));
        let error = parse::<SendMessage>(&Bytes::new()).unwrap_err();
        assert_eq!(error.field.as_deref(), Some("body"));
    }

    #[test]
    fn the_openapi_document_is_json_and_lists_every_route() {
        let doc: Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
        for path in [
            "/v1/sessions",
            "/v1/sessions/{id}",
            "/v1/sessions/{id}/messages",
            "/v1/sessions/{id}/interrupts/{interrupt_id}",
            "/v1/sessions/{id}/events",
            "/v1/interrupts",
            "/v1/sessions/{id}/upgrade",
            "/v1/agent-upgrades",
            "/healthz",
            "/metrics",
        ] {
            assert!(doc["paths"].get(path).is_some(), "{path} is not documented");
        }
    }
}
