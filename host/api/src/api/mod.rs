//! The HTTP API (axum): sessions, messages, decisions, snapshots, the approvals inbox, live
//! events over Server-Sent Events, health, metrics and the OpenAPI document.
//!
//! [`router`] builds it over a store (with the web inbox's files, [`crate::web`], at `/`); `tollgate serve` runs it beside a Worker and `tollgate api`
//! alone. Every write goes through `tollgate_sessions::service::Sessions`, so the state machine's rules and the
//! store's idempotency hold for HTTP clients too. Every body is a type of [`types`]; the OpenAPI
//! document is generated from those types and the handlers' `#[utoipa::path]` attributes
//! ([`openapi`], served at `/openapi.json`, kept as the snapshot `snapshots/openapi.snap` beside this file).
//!
//! Errors are JSON ([`types::ErrorBody`]): `{"error":{"code":"…","field":"…","message":"…"}}` with a 4xx for bad input
//! (the field, query parameter or limit named; see `input`), 404 for an unknown session or
//! interrupt, 405 for a wrong method, 409 for a conflicting repeat, 413 for a body over
//! [`MAX_BODY`] (a message's: [`MAX_MESSAGE_BODY`]) or a message's images over their limit, 415
//! for a body that is not `application/json`, 401 without the bearer token
//! when one is configured, 5xx when the store fails: 503 with a `Retry-After` header when the
//! store is unavailable for a while (database unreachable, pool timeout, disk full, read-only
//! file), the message naming the cause. `/healthz` probes a read and a write (writing nothing):
//! `ok` (200), `degraded` (200: reads work, writes do not) or `down` (503), with the store's
//! reason.

pub mod edge;
mod events;
mod inbox;
mod input;
pub mod openapi;
pub use tollgate_api_types::types;

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::rejection::PathRejection;
use axum::extract::{Extension, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tollgate_engine::session::client::{DecisionScope, HumanDecision};
use tollgate_engine::session::fork::ForkRefusal;
use tollgate_engine::session::{EngineError, SessionStatus};
use tollgate_store::{Store, StoreError, UnavailableReason};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use self::input::{JsonBody, MessageBody, Params, parse, path_ids};
use self::types::{
    AttentionList, AuditPage, BusySession, CancelReceipt, CheckReceipt, CheckRequest, CreateSession, Created,
    Decide, DecideScope, DecisionReceipt, ErrorBody, ErrorCode, ErrorDetail, Health, HealthStatus,
    ImageBlock, ImageBytes, InterruptList, Me, MessageReceipt, MovedSession, PendingInterrupt, RevokeReceipt,
    SendMessage, SessionPage, SessionRow, Snapshot, StoreHealth, UpgradeAll, UpgradeSession, Upgraded,
    UpgradedAll,
};
use tollgate_process::metrics::Metrics;
use tollgate_sessions::error::ClientError;
use tollgate_sessions::rights::Caller;
use tollgate_sessions::service::{NewMessage, NewSession, Sessions};

/// The largest request body accepted, but for a message's.
pub const MAX_BODY: usize = 512 * 1024;

/// The largest body of a route that takes a message (`POST /v1/sessions`, `…/messages`): its
/// images, in base64, make it larger ([`tollgate_sessions::media::MAX_MESSAGE_IMAGE_BYTES`] decoded).
pub const MAX_MESSAGE_BODY: usize = 4 * 1024 * 1024;

/// The session statuses `GET /v1/sessions?status=` filters by: the state machine's.
const STATUSES: [&str; 3] =
    [SessionStatus::Idle.as_str(), SessionStatus::Running.as_str(), SessionStatus::AwaitingApproval.as_str()];

/// The largest page of a list.
const MAX_LIMIT: i64 = 1000;

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    /// The store.
    pub store: Arc<dyn Store>,
    /// Who may call and what they may do: the `--token` shortcut, the `--auth` file's
    /// principals, or neither (open).
    pub auth: Arc<crate::auth::Auth>,
    /// The process's metrics.
    pub metrics: Arc<Metrics>,
    /// Turns `true` when the server stops: open event streams end, so a graceful shutdown does
    /// not wait for their clients.
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// The agent a new session belongs to when the request names none: the agent this process
    /// serves (`tollgate serve`), or `None` (`tollgate api`: the only agent the store knows).
    pub agent: Option<tollgate_sessions::agents::ServingAgent>,
    /// How this process's Worker runs the agent's CLIs (`bwrap`, `none`), shown by `/healthz`;
    /// `None` without a Worker (`tollgate api`).
    pub sandbox: Option<&'static str>,
    /// How long a due step may go unclaimed before `/metrics`, `/healthz` and its session's
    /// snapshot call it unclaimable.
    pub unclaimable_after: std::time::Duration,
    /// Each request's time bound and how many run at once ([`edge`]).
    pub limits: edge::EdgeLimits,
    /// The sandbox of the agent this process loaded (`tollgate serve`): `/mcp/{agent}` lists its
    /// tools and runs approval-free reads at once; `None` in `tollgate api` ([`crate::mcp`]).
    pub mcp_reads: Option<Arc<dyn tollgate_sessions::inline_reads::InlineReads>>,
}

impl ApiState {
    /// The session service over this state's store, rules and agent: every session call of the
    /// API goes through it.
    pub fn sessions(&self) -> Sessions {
        Sessions::new(self.store.clone(), self.auth.rules(), self.agent.clone())
    }
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("token", &self.auth.token.as_ref().map(|_| "…"))
            .field("principals", &self.auth.principals.as_ref().map(crate::auth::Principals::len))
            .finish_non_exhaustive()
    }
}

/// The API's routes over `state`.
pub fn router(state: ApiState) -> Router {
    let (routes, _) = routes().split_for_parts();
    let api = routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        // Each route's own limit is its body extractor's (`input::JsonBody`).
        .layer(axum::extract::DefaultBodyLimit::max(MAX_MESSAGE_BODY))
        .with_state(state.clone());
    // The web inbox's files (no token: the data comes from the API, which checks it).
    crate::web::router()
        .merge(crate::mcp::router(state.clone()))
        .merge(api)
        .layer(middleware::from_fn_with_state(edge::Edge::new(state.limits), edge::edge))
}

/// Every route with its handler and its documentation: the router and the OpenAPI document
/// come from this one list.
fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::with_openapi(openapi::base())
        .routes(routes!(create_session, list_sessions))
        .routes(routes!(get_session))
        .routes(routes!(send_message))
        .routes(routes!(get_media))
        .routes(routes!(decide))
        .routes(routes!(cancel))
        .routes(routes!(fork))
        .routes(routes!(revoke_grant))
        .routes(routes!(check_call))
        .routes(routes!(list_attention))
        .routes(routes!(events::stream))
        .routes(routes!(upgrade_session))
        .routes(routes!(upgrade_all))
        .routes(routes!(list_agents))
        .routes(routes!(list_interrupts))
        .routes(routes!(inbox::stream))
        .routes(routes!(me))
        .routes(routes!(list_audit))
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .routes(routes!(openapi_json))
}

/// An API error as JSON.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
    field: Option<String>,
    /// Seconds for a `Retry-After` header (a store that is unavailable for a while).
    retry_after: Option<u64>,
    /// A 403's roles or groups that would be allowed.
    needed: Option<Vec<String>>,
}

impl ApiError {
    fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError { status, code, message: message.into(), field: None, retry_after: None, needed: None }
    }

    fn bad(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            field: Some(field.into()),
            ..Self::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
        }
    }

    fn no_session(id: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, ErrorCode::SessionNotFound, format!("no session `{id}`"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                field: self.field,
                message: self.message,
                needed: self.needed,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        response
    }
}

/// The 403 code of a refusal.
pub(crate) fn denied_code(denied: &tollgate_sessions::rights::Denied) -> ErrorCode {
    use tollgate_sessions::rights::Denied;
    match denied {
        Denied::Role { .. } => ErrorCode::RoleRequired,
        Denied::Group { .. } => ErrorCode::GroupRequired,
        Denied::OwnSession { .. } => ErrorCode::OwnSession,
        Denied::NotOwnSession { .. } => ErrorCode::NotOwnSession,
        Denied::Agent { .. } => ErrorCode::AgentNotAllowed,
    }
}

impl From<tollgate_sessions::rights::Denied> for ApiError {
    fn from(denied: tollgate_sessions::rights::Denied) -> Self {
        use tollgate_sessions::rights::Denied;
        let (message, code) = (denied.to_string(), denied_code(&denied));
        let needed = match denied {
            Denied::Role { roles, .. } => Some(roles.iter().map(|r| r.as_str().to_owned()).collect()),
            Denied::Group { groups, .. } => Some(groups),
            Denied::OwnSession { .. } | Denied::NotOwnSession { .. } | Denied::Agent { .. } => None,
        };
        ApiError { needed, ..ApiError::new(StatusCode::FORBIDDEN, code, message) }
    }
}

impl From<ClientError> for ApiError {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::BadInput(EngineError::BadInput { field, reason }) => {
                ApiError::bad(field, format!("{field}: {reason}"))
            }
            ClientError::BadInput(other) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::StoredRowRefused,
                other.to_string(),
            ),
            ClientError::Store(store) => store.into(),
            ClientError::Denied(denied) => denied.into(),
            error @ ClientError::GrantNotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, ErrorCode::GrantNotFound, error.to_string())
            }
            error @ ClientError::KeyReused { .. } => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::IdempotencyConflict, error.to_string())
            }
            error @ ClientError::AgentUnavailable(_) => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::AgentUnavailable, error.to_string())
            }
            error @ ClientError::MediaNotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, ErrorCode::MediaNotFound, error.to_string())
            }
            ClientError::ForkRefused { ref refusal, .. } => {
                let (status, code) = match refusal {
                    ForkRefusal::NoSuchTurn { .. } => (StatusCode::NOT_FOUND, ErrorCode::TurnNotFound),
                    _ => (StatusCode::CONFLICT, ErrorCode::ForkRefused),
                };
                ApiError::new(status, code, error.to_string())
            }
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        let text = error.to_string();
        match error {
            StoreError::SessionNotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, ErrorCode::SessionNotFound, text)
            }
            StoreError::InterruptNotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, ErrorCode::InterruptNotFound, text)
            }
            StoreError::InterruptAlreadyResolved { .. } => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::InterruptAlreadyResolved, text)
            }
            StoreError::AlreadyApprovedBy { .. } => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::AlreadyApproved, text)
            }
            StoreError::ToolCallNotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, ErrorCode::ToolCallNotFound, text)
            }
            StoreError::NothingToCheck { .. } => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::NothingToCheck, text)
            }
            StoreError::InterruptExpired { deadline_at, .. } => ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::InterruptExpired,
                format!("{text} ({})", crate::webhooks::rfc3339_ms(deadline_at)),
            ),
            StoreError::IdempotencyConflict { .. } => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::IdempotencyConflict, text)
            }
            StoreError::Invalid { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, text)
            }
            StoreError::SessionExists { .. } => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::SessionExists, text)
            }
            StoreError::SessionBusy { .. } => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::SessionBusy, text)
            }
            StoreError::UpgradeRefused { .. } => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::AgentUnavailable, text)
            }
            StoreError::NothingToCancel { .. } => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::NoTurnRunning, text)
            }
            StoreError::CancelPending { .. } => {
                ApiError::new(StatusCode::CONFLICT, ErrorCode::TurnCancelling, text)
            }
            StoreError::Corrupt { .. } | StoreError::FutureVersion { .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::StoredRowRefused, text)
            }
            StoreError::Unavailable { reason, .. } => ApiError {
                retry_after: Some(retry_after(reason)),
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::StoreUnavailable,
                    format!("the store cannot take this request now ({reason}); retry later: {text}"),
                )
            },
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::StoreError, text),
        }
    }
}

type ApiResult = Result<Response, ApiError>;

/// The `Idempotency-Key` header, else the body's `client_key`; both checked whether or not the
/// request goes on to use them (the header wins; a request may have no message to key), so a
/// malformed key is refused before anything is written.
fn client_key(headers: &HeaderMap, body_key: Option<String>) -> Result<Option<String>, ApiError> {
    if let Some(key) = &body_key {
        tollgate_sessions::ids::check_client_key("client_key", key).map_err(ClientError::from)?;
    }
    let Some(value) = headers.get("idempotency-key") else { return Ok(body_key) };
    let value = value
        .to_str()
        .map_err(|_| ApiError::bad("Idempotency-Key", "the Idempotency-Key header must be ASCII"))?;
    tollgate_sessions::ids::check_client_key("Idempotency-Key", value).map_err(ClientError::from)?;
    Ok(Some(value.to_owned()))
}

/// What a request does, for the role check: reads are `GET`s, `POST /v1/sessions` and
/// `…/messages` write, `…/interrupts/{id}` and `DELETE …/grants/{tool}` decide, `…/cancel`
/// cancels, the upgrades operate. Anything else (a route
/// that does not exist, a wrong method) counts as a read, so it gets its 404 or 405.
fn action_of(method: &axum::http::Method, path: &str) -> tollgate_sessions::rights::Action {
    use tollgate_sessions::rights::Action;
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    if method == axum::http::Method::DELETE
        && matches!(parts.as_slice(), ["", "v1", "sessions", _, "grants", _])
    {
        return Action::Decide;
    }
    if method != axum::http::Method::POST {
        return Action::Read;
    }
    match parts.as_slice() {
        ["", "v1", "sessions"] | ["", "v1", "sessions", _, "messages"] => Action::Write,
        ["", "v1", "sessions", _, "interrupts", _] => Action::Decide,
        ["", "v1", "sessions", _, "cancel"] => Action::Cancel,
        ["", "v1", "sessions", _, "fork"] => Action::Fork,
        ["", "v1", "sessions", _, "upgrade"] | ["", "v1", "agent-upgrades"] => Action::Operate,
        _ => Action::Read,
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case), if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.get(..7).filter(|scheme| scheme.eq_ignore_ascii_case("bearer ")).map(|_| &v[7..]))
        .map(str::trim)
}

/// Authenticates every request but `/healthz` (401 without a known token), checks the caller's
/// roles against what the request does (403 naming the roles needed), and hands the handlers the
/// [`tollgate_sessions::rights::Caller`].
async fn authorize(State(state): State<ApiState>, mut request: Request, next: Next) -> Response {
    // Liveness, and the API's contract (a client reads it before it has a token).
    if matches!(request.uri().path(), "/healthz" | "/openapi.json") {
        return next.run(request).await;
    }
    let Some(caller) = state.auth.authenticate(bearer(request.headers())) else {
        let mut response = ApiError::new(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "a valid `Authorization: Bearer <token>` header is required: no principal has this token",
        )
        .into_response();
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        return response;
    };
    let action = action_of(request.method(), request.uri().path());
    if let Err(denied) = state.auth.rules().allows(&caller, action) {
        return ApiError::from(denied).into_response();
    }
    tracing::Span::current().record("principal", caller.name.as_str());
    // A principal limited to agents finds no session of another agent, on every session route.
    if caller.agents.is_some()
        && let ["", "v1", "sessions", id, ..] = request.uri().path().split('/').collect::<Vec<_>>()[..]
    {
        let id = percent_decoded(id);
        match state.store.session(&id).await {
            Ok(Some(session)) if !caller.sees_agent(session.agent_name.as_deref()) => {
                return ApiError::no_session(&id).into_response();
            }
            Ok(_) => {}
            Err(error) => return ApiError::from(error).into_response(),
        }
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// The `agent` query parameter, checked as an agent name.
fn agent_param(params: &Params) -> Result<Option<&str>, ApiError> {
    let agent = params.text("agent");
    if let Some(agent) = agent {
        tollgate_store::check_agent_name(agent).map_err(|why| ApiError::bad("agent", why))?;
    }
    Ok(agent)
}

/// A path segment with its `%XX` escapes decoded (as the router decodes it for the handler).
fn percent_decoded(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) =
                (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Which of `sessions` `caller` sees (a principal limited to agents: those of its agents), each
/// session's agent read once.
async fn visible_sessions(
    state: &ApiState,
    caller: &Caller,
    sessions: impl IntoIterator<Item = String>,
) -> Result<std::collections::BTreeSet<String>, ApiError> {
    let mut visible = std::collections::BTreeSet::new();
    for id in sessions.into_iter().collect::<std::collections::BTreeSet<_>>() {
        if caller.agents.is_none() {
            visible.insert(id);
            continue;
        }
        let agent = state.store.session(&id).await?.and_then(|s| s.agent_name);
        if caller.sees_agent(agent.as_deref()) {
            visible.insert(id);
        }
    }
    Ok(visible)
}

/// `POST /v1/sessions`.
#[utoipa::path(
    post,
    path = "/v1/sessions",
    tag = "sessions",
    summary = "Create a session (idempotent on its id), optionally with its first message",
    params(openapi::IdempotencyKey),
    request_body(content = CreateSession, description = "May be empty (the same as `{}`)"),
    responses(
        (status = 201, description = "Created", body = Created),
        (status = 200, description = "It existed; unchanged (its first message, when given, stored once)", body = Created),
        (status = 409, description = "`idempotency_conflict`: the key was used for another message; `agent_unavailable`: no agent fits `agent`/`agent_digest` (or none was named and the store knows none or several); nothing was written", body = ErrorBody),
        openapi::WriteErrors,
    )
)]
async fn create_session(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    JsonBody(body): MessageBody,
) -> ApiResult {
    Params::parse(query.as_deref(), &[])?;
    let request: CreateSession = if body.is_empty() { CreateSession::default() } else { parse(&body)? };
    if request.message.is_none() && !request.images.is_empty() {
        return Err(ApiError::bad("images", "images come with a first message: give `message` too"));
    }
    let images = checked_images(&request.images)?;
    let key = client_key(&headers, request.client_key.clone())?;
    let session_id = request.session_id.unwrap_or_else(new_session_id);
    let new = NewSession {
        session_id,
        agent: request.agent,
        agent_digest: request.agent_digest,
        message: request.message.map(|text| NewMessage { text, images, client_key: key }),
    };
    let started = state.sessions().start(&caller, new).await?;
    let (created, session_id) = (started.created, started.session_id);
    let message = started.message.as_ref().map(message_receipt);
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(Created { created, message, session_id })).into_response())
}

fn message_receipt(receipt: &tollgate_store::MessageReceipt) -> MessageReceipt {
    MessageReceipt {
        item_seq: receipt.item_seq,
        turn_started: receipt.step_id.is_some(),
        replayed: receipt.replayed,
    }
}

fn new_session_id() -> String {
    format!("session-{}", tollgate_sessions::ids::random_id())
}

/// `POST /v1/sessions/{id}/messages`.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/messages",
    tag = "sessions",
    summary = "Send a user message; it starts a turn, or waits for the running one to end",
    params(openapi::SessionId, openapi::IdempotencyKey),
    request_body = SendMessage,
    responses(
        (status = 202, description = "Stored (or the same key's message replayed)", body = MessageReceipt),
        (status = 404, description = "`session_not_found`", body = ErrorBody),
        (status = 409, description = "`idempotency_conflict`: the key was used for another message", body = ErrorBody),
        openapi::WriteErrors,
    )
)]
async fn send_message(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<Vec<String>>, PathRejection>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    JsonBody(body): MessageBody,
) -> ApiResult {
    let [id] = path_ids(path, ["id"])?;
    Params::parse(query.as_deref(), &[])?;
    let request: SendMessage = parse(&body)?;
    let images = checked_images(&request.images)?;
    let key = client_key(&headers, request.client_key)?;
    let message = NewMessage { text: request.text, images, client_key: key };
    let receipt = state.sessions().send(&caller, &id, message).await?;
    Ok((StatusCode::ACCEPTED, Json(message_receipt(&receipt))).into_response())
}

/// A message's images, decoded and checked: 400 naming the image that is wrong, 413
/// `image_too_large` when they are too many bytes together.
fn checked_images(images: &[ImageBlock]) -> Result<Vec<tollgate_store::NewMedia>, ApiError> {
    let sources = images.iter().map(|i| (i.source.media_type.as_str(), i.source.data.as_str()));
    tollgate_sessions::media::check_message_images(sources).map_err(|error| {
        let field = error.field();
        match error {
            tollgate_sessions::media::ImageError::TooLarge { .. } => ApiError {
                field: Some(field),
                ..ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, ErrorCode::ImageTooLarge, error.to_string())
            },
            other => ApiError::bad(field, other.to_string()),
        }
    })
}

/// `GET /v1/sessions/{id}/media/{digest}`.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/media/{digest}",
    tag = "sessions",
    summary = "One of the session's images (a message's or a tool result's), by digest, as its bytes",
    params(
        openapi::SessionId,
        ("digest" = String, Path, description = "`sha256:` and 64 lowercase hex digits", pattern = "^sha256:[0-9a-f]{64}$"),
    ),
    responses(
        (status = 200, description = "The image's bytes, its media type as `Content-Type`; it never changes", content(
            (ImageBytes = "image/png"), (ImageBytes = "image/jpeg"), (ImageBytes = "image/gif"), (ImageBytes = "image/webp"),
        )),
        (status = 404, description = "`session_not_found`, or `media_not_found` (the session holds no image of that digest)", body = ErrorBody),
        openapi::ReadErrors,
    )
)]
async fn get_media(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<Vec<String>>, PathRejection>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let [id, digest] = path_ids(path, ["id", "digest"])?;
    Params::parse(query.as_deref(), &[])?;
    let media = state.sessions().media(&caller, &id, &digest).await?;
    // Stored only with a media type this API took (or the CLI sent the model): an image type.
    let media_type = header::HeaderValue::from_str(&media.media_type)
        .unwrap_or(header::HeaderValue::from_static("application/octet-stream"));
    let headers = [
        (header::CONTENT_TYPE, media_type),
        (header::CACHE_CONTROL, header::HeaderValue::from_static("private, max-age=31536000, immutable")),
        (header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff")),
        (header::CONTENT_SECURITY_POLICY, header::HeaderValue::from_static("default-src 'none'; sandbox")),
    ];
    Ok((headers, media.data).into_response())
}

/// `POST /v1/sessions/{id}/interrupts/{interrupt_id}`.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/interrupts/{interrupt_id}",
    tag = "approvals",
    summary = "Approve or reject a deferred tool call (idempotent); recorded in the audit trail with who decided",
    params(openapi::SessionId, openapi::InterruptId, openapi::IdempotencyKey),
    request_body = Decide,
    responses(
        (status = 200, description = "Decided (or the same decision replayed)", body = DecisionReceipt),
        (status = 403, description = "`role_required` (not an approver or admin), `group_required` (the tool's policy names `approvers` groups the principal is in none of; listed in `needed`) or `own_session` (the principal started the session: separation of duties)", body = ErrorBody),
        (status = 404, description = "`session_not_found` or `interrupt_not_found`", body = ErrorBody),
        (status = 409, description = "`interrupt_already_resolved` (decided otherwise, or closed with its cancelled turn), `already_approved` (the caller approved this call already; it needs several different approvers), `interrupt_expired` (its approval deadline passed first; the message names it), `turn_cancelling` (its turn is being cancelled) or `idempotency_conflict`", body = ErrorBody),
        openapi::WriteErrors,
    )
)]
async fn decide(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<Vec<String>>, PathRejection>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let [id, interrupt_id] = path_ids(path, ["id", "interrupt_id"])?;
    Params::parse(query.as_deref(), &[])?;
    let request: Decide = parse(&body)?;
    let key = client_key(&headers, request.client_key)?;
    let decision = HumanDecision {
        approved: request.approved,
        message: request.message,
        updated_input: request.updated_input,
        scope: match request.scope {
            DecideScope::Call => DecisionScope::Call,
            DecideScope::Session => DecisionScope::Session,
        },
        granted: None,
    };
    let receipt = state.sessions().decide(&caller, &id, &interrupt_id, &decision, key.as_deref()).await?;
    let answer = DecisionReceipt {
        approved: decision.approved,
        interrupt_id,
        replayed: receipt.replayed,
        session_id: id,
        approvals: receipt
            .partial
            .map(|p| types::ApprovalProgress { approvals: p.approvals, required: p.required }),
    };
    Ok(Json(answer).into_response())
}

/// `POST /v1/sessions/{id}/cancel`.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/cancel",
    tag = "sessions",
    summary = "Cancel the turn in progress: a running segment is interrupted, a turn waiting for approval ends with its interrupts closed; the turn ends `cancelled` (audited with who asked)",
    params(openapi::SessionId),
    request_body(content = types::CancelTurn, description = "May be empty (the same as `{}`)"),
    responses(
        (status = 202, description = "Asked (or asked before and still pending: `replayed`); the `turn_cancelled` event follows once the step in flight applies it", body = CancelReceipt),
        (status = 403, description = "`role_required` (a viewer) or `not_own_session` (a client cancels only sessions it started)", body = ErrorBody),
        (status = 404, description = "`session_not_found`", body = ErrorBody),
        (status = 409, description = "`no_turn_running`: the session is idle", body = ErrorBody),
        openapi::WriteErrors,
    )
)]
async fn cancel(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<Vec<String>>, PathRejection>,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let [id] = path_ids(path, ["id"])?;
    Params::parse(query.as_deref(), &[])?;
    if !body.is_empty() {
        parse::<types::CancelTurn>(&body)?;
    }
    let receipt = state.sessions().cancel(&caller, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(receipt)).into_response())
}

/// `POST /v1/sessions/{id}/fork`.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/fork",
    tag = "sessions",
    summary = "Fork the session at a turn: a new idle session whose history is this one's up to the end of that turn (shared, not copied), with no grants, no spend, the caller as its starter and a `forked` audit row; it runs under this session's agent version unless `agent_version` names one. Writes recorded before the turn are never run again, but the fork's own calls get their own keys: a fork taken before a write (a refund) runs it again unless `dry`, whose writes are answered from this session's records of the same call or refused",
    params(openapi::SessionId),
    request_body = types::ForkSession,
    responses(
        (status = 201, description = "Forked: send the fork a message to start its next turn; its snapshot's `forked_from` names this session and turn", body = types::Forked),
        (status = 403, description = "`role_required`: forking needs the role `client` or `admin`; `agent_not_allowed`: an agent the principal may not use", body = ErrorBody),
        (status = 404, description = "`session_not_found`, or `turn_not_found`: the session has no such turn (from 1 to its turn in progress)", body = ErrorBody),
        (status = 409, description = "`fork_refused`: the turn is still running, waits for approval, has open tasks, or stored no answer (fork at an earlier turn); `session_exists`: the fork's id is taken; `agent_unavailable`: no agent fits `agent_version`. Nothing is stored", body = ErrorBody),
        openapi::WriteErrors,
    )
)]
async fn fork(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<Vec<String>>, PathRejection>,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let [id] = path_ids(path, ["id"])?;
    Params::parse(query.as_deref(), &[])?;
    let request: types::ForkSession = parse(&body)?;
    let new = tollgate_sessions::service::NewFork {
        session_id: request.session_id.unwrap_or_else(new_session_id),
        at_turn: request.at_turn,
        agent_version: request.agent_version,
        dry: request.dry,
    };
    let lineage = state.sessions().fork(&caller, &id, new).await?;
    let session_id = lineage.session_id.clone();
    let forked_from = tollgate_sessions::reads::forked_from(lineage);
    Ok((StatusCode::CREATED, Json(types::Forked { forked_from, session_id })).into_response())
}

/// `DELETE /v1/sessions/{id}/grants/{tool}`.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}/grants/{tool}",
    tag = "approvals",
    summary = "Revoke a session grant (allow for this session): the tool's next call waits for approval again",
    params(openapi::SessionId, ("tool" = String, Path, description = "The tool whose grant to revoke (1-200 characters)", min_length = 1, max_length = 200)),
    responses(
        (status = 200, description = "Revoked (the snapshot's `grants` show who and when)", body = RevokeReceipt),
        (status = 403, description = "`role_required` (not an approver or admin) or `group_required` (the tool's policy names `approvers` groups the principal is in none of)", body = ErrorBody),
        (status = 404, description = "`session_not_found`, or `grant_not_found` (no grant in force for the tool: none made, or revoked already)", body = ErrorBody),
        openapi::WriteErrors,
    )
)]
async fn revoke_grant(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<Vec<String>>, PathRejection>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let [id, tool] = path_ids(path, ["id", "tool"])?;
    Params::parse(query.as_deref(), &[])?;
    let receipt = state.sessions().revoke_grant(&caller, &id, &tool).await?;
    Ok(Json(receipt).into_response())
}

/// `POST /v1/sessions/{id}/calls/{call}/check`.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/calls/{call}/check",
    tag = "approvals",
    summary = "Mark a tool call that needs attention (outcome unknown, or failed) as checked, with what was found (audited)",
    params(openapi::SessionId, ("call" = String, Path, description = "The tool call's id (1-200 characters)", min_length = 1, max_length = 200)),
    request_body(content = CheckRequest, description = "An optional note", content_type = "application/json"),
    responses(
        (status = 200, description = "Marked (or marked before, by anyone: `replayed`, the first mark)", body = CheckReceipt),
        (status = 403, description = "`role_required` (not an approver or admin), or `agent_not_allowed`", body = ErrorBody),
        (status = 404, description = "`session_not_found` or `tool_call_not_found`", body = ErrorBody),
        (status = 409, description = "`nothing_to_check`: its outcome is known and it did not fail", body = ErrorBody),
        openapi::WriteErrors,
    )
)]
async fn check_call(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<Vec<String>>, PathRejection>,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let [id, call] = path_ids(path, ["id", "call"])?;
    Params::parse(query.as_deref(), &[])?;
    let request: CheckRequest = if body.is_empty() { CheckRequest::default() } else { parse(&body)? };
    let receipt = state.sessions().check(&caller, &id, &call, request.note).await?;
    Ok(Json(receipt).into_response())
}

/// `GET /v1/attention`.
#[utoipa::path(
    get,
    path = "/v1/attention",
    tag = "approvals",
    summary = "Tool calls across sessions that need attention (outcome unknown, or failed) and nobody marked checked, oldest first",
    params(types::AttentionQuery),
    responses(
        (status = 200, description = "The calls", body = AttentionList),
        openapi::ReadErrors,
    )
)]
async fn list_attention(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let params = Params::parse(query.as_deref(), &["limit"])?;
    let limit = params.int("limit", 1, MAX_LIMIT)?.unwrap_or(100);
    let calls = state.sessions().attention(&caller, limit).await?;
    let tools_unavailable = unavailable_components(state.sessions().tools_unavailable(&caller).await?);
    Ok(Json(AttentionList { calls, tools_unavailable }).into_response())
}

/// `GET /v1/sessions/{id}`.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}",
    tag = "sessions",
    summary = "The session's snapshot",
    params(openapi::SessionId),
    responses(
        (status = 200, description = "The snapshot", body = Snapshot),
        (status = 404, description = "`session_not_found`", body = ErrorBody),
        openapi::ReadErrors,
    )
)]
async fn get_session(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<Vec<String>>, PathRejection>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let [id] = path_ids(path, ["id"])?;
    Params::parse(query.as_deref(), &[])?;
    let mut snapshot = state.sessions().snapshot(&caller, &id).await?;
    let unclaimed = state.store.unclaimed_steps(state.unclaimable_after, Some(&id)).await?;
    snapshot.unclaimable_since = unclaimed.iter().map(|u| u.oldest_due_at).min();
    Ok(Json::<Snapshot>(snapshot).into_response())
}

/// `GET /v1/sessions`.
#[utoipa::path(
    get,
    path = "/v1/sessions",
    tag = "sessions",
    summary = "List sessions, by id",
    params(types::ListSessionsQuery),
    responses(
        (status = 200, description = "A page; continue with `after=next_after`", body = SessionPage),
        openapi::ReadErrors,
    )
)]
async fn list_sessions(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let params = Params::parse(query.as_deref(), &["status", "after", "limit", "agent"])?;
    let status = params.one_of("status", &STATUSES)?;
    let agent = agent_param(&params)?;
    let after = params.text("after").unwrap_or("");
    if after.chars().count() > input::MAX_ID {
        return Err(ApiError::bad(
            "after",
            format!(
                "after must be a session id (the `next_after` of the previous page) of at most {} characters",
                input::MAX_ID
            ),
        ));
    }
    let limit = params.int("limit", 1, MAX_LIMIT)?.unwrap_or(100);
    let filter = tollgate_sessions::service::SessionFilter {
        status,
        agent: agent.map(str::to_owned),
        after: after.to_owned(),
        limit,
    };
    let list = state.sessions().list(&caller, filter).await?;
    let sessions = list
        .sessions
        .into_iter()
        .map(|(s, agent_version)| SessionRow {
            agent_version,
            agent: s.agent_name,
            agent_digest: s.agent.as_ref().map(|a| a.digest.clone()),
            agent_pinned: s.agent.as_ref().is_some_and(|a| a.pinned),
            created_at: s.created_at,
            session_id: s.session_id,
            status: s.status,
            updated_at: s.updated_at,
        })
        .collect();
    let next_after = list.next_after;
    Ok(Json(SessionPage { next_after, sessions }).into_response())
}

/// `POST /v1/sessions/{id}/upgrade {to}`: pins a waiting or idle session to the agent digest `to`.
#[utoipa::path(
    post,
    path = "/v1/sessions/{id}/upgrade",
    tag = "agents",
    summary = "Pin a waiting or idle session to another agent digest (recorded as an agent_upgraded event with from, to and the time)",
    params(openapi::SessionId),
    request_body = UpgradeSession,
    responses(
        (status = 200, description = "Upgraded (or already there)", body = Upgraded),
        (status = 404, description = "`session_not_found`", body = ErrorBody),
        (status = 409, description = "`session_busy`: the session is running a step; `agent_unavailable`: no Worker would run it there (a digest no Worker of its agent loaded, of another agent, or unlocked); nothing changed", body = ErrorBody),
        openapi::WriteErrors,
    )
)]
async fn upgrade_session(
    State(state): State<ApiState>,
    path: Result<Path<Vec<String>>, PathRejection>,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let [id] = path_ids(path, ["id"])?;
    Params::parse(query.as_deref(), &[])?;
    let request: UpgradeSession = parse(&body)?;
    let receipt = tollgate_sessions::writes::upgrade(state.store.as_ref(), &id, &request.to).await?;
    Ok(Json(Upgraded {
        from: receipt.from.as_ref().map(|a| a.digest.clone()),
        from_pinned: receipt.from.as_ref().is_some_and(|a| a.pinned),
        session_id: id,
        to: receipt.to.digest,
        upgraded: receipt.event_seq.is_some(),
    })
    .into_response())
}

/// `POST /v1/agent-upgrades {to, from?}`: every session that can move (idle or waiting) is
/// pinned to `to`; the running ones are listed as busy and left as they are.
#[utoipa::path(
    post,
    path = "/v1/agent-upgrades",
    tag = "agents",
    summary = "Pin every waiting or idle session of the agent that loaded `to` (under `from` only, when given) to the agent digest `to`; running ones, and ones it cannot take, are listed as busy and left",
    request_body = UpgradeAll,
    responses(
        (status = 200, description = "What moved", body = UpgradedAll),
        (status = 409, description = "`agent_unavailable`: no Worker has loaded `to`; nothing changed", body = ErrorBody),
        openapi::WriteErrors,
    )
)]
async fn upgrade_all(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    RawQuery(query): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    Params::parse(query.as_deref(), &[])?;
    let request: UpgradeAll = parse(&body)?;
    tollgate_sessions::agents::check_digest("to", &request.to).map_err(ClientError::from)?;
    if let Some(from) = &request.from {
        tollgate_sessions::agents::check_digest("from", from).map_err(ClientError::from)?;
    }
    // Only the sessions of the agents that loaded `to` can move there.
    let known = state.store.agents().known_agents().await?;
    let owners: Vec<&str> =
        known.iter().filter(|k| k.digest == request.to).map(|k| k.name.as_str()).collect();
    if owners.is_empty() {
        return Err(ClientError::AgentUnavailable(format!(
            "no Worker has loaded {}; start one on that bundle first",
            request.to
        ))
        .into());
    }
    let (mut upgraded, mut busy, mut unchanged) = (Vec::new(), Vec::new(), 0u64);
    let mut after = String::new();
    loop {
        let page = state.store.list_sessions(None, &after, 500).await?;
        let Some(last) = page.last() else { break };
        after.clone_from(&last.session_id);
        for session in page {
            let digest = session.agent.as_ref().map(|a| a.digest.clone());
            let other_agent = session.agent_name.as_deref().is_some_and(|name| !owners.contains(&name))
                || !caller.sees_agent(session.agent_name.as_deref());
            if other_agent || (request.from.is_some() && digest != request.from) {
                continue;
            }
            if session.agent.as_ref().is_some_and(|a| a.pinned && a.digest == request.to) {
                unchanged += 1;
                continue;
            }
            match state.store.upgrade_session(&session.session_id, &request.to).await {
                Ok(receipt) if receipt.event_seq.is_some() => {
                    upgraded.push(MovedSession { from: digest, session_id: session.session_id });
                }
                Ok(_) => unchanged += 1,
                Err(error @ (StoreError::SessionBusy { .. } | StoreError::UpgradeRefused { .. })) => {
                    busy.push(BusySession { message: error.to_string(), session_id: session.session_id });
                }
                Err(StoreError::SessionNotFound { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
    }
    Ok(Json(UpgradedAll { busy, to: request.to, unchanged, upgraded }).into_response())
}

/// `GET /v1/interrupts?status=pending`.
#[utoipa::path(
    get,
    path = "/v1/interrupts",
    tag = "approvals",
    summary = "The approvals inbox across sessions, oldest first",
    params(types::InterruptsQuery),
    responses(
        (status = 200, description = "The open interrupts", body = InterruptList),
        openapi::ReadErrors,
    )
)]
async fn list_interrupts(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let params = Params::parse(query.as_deref(), &["status", "after", "limit", "agent"])?;
    params.one_of("status", &["pending"])?;
    let agent = agent_param(&params)?;
    let after = params.text("after").map(interrupt_cursor::decode).transpose()?;
    let limit = params.int("limit", 1, MAX_LIMIT)?.unwrap_or(100);
    let page = state.store.open_interrupts(after.as_ref(), limit).await?;
    let next_after =
        (page.len() as i64 == limit).then(|| page.last().map(interrupt_cursor::encode)).flatten();
    let only = agent.map(|agent| tollgate_sessions::rights::Caller {
        agents: Some([agent.to_owned()].into()),
        ..tollgate_sessions::rights::Caller::sole_admin("filter")
    });
    let mut visible = visible_sessions(&state, &caller, page.iter().map(|o| o.session_id.clone())).await?;
    if let Some(only) = &only {
        visible = visible_sessions(&state, only, visible).await?;
    }
    let mut interrupts = Vec::with_capacity(page.len());
    for open in page.into_iter().filter(|o| visible.contains(&o.session_id)) {
        interrupts.push(pending_interrupt(open)?);
    }
    Ok(Json(InterruptList { interrupts, next_after }).into_response())
}

/// The `after` cursor of `GET /v1/interrupts`: the last interrupt of a page (its `created_at`,
/// session and id) as base64url of a JSON array, so ids of any bytes round-trip and the client
/// treats it as opaque.
mod interrupt_cursor {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use tollgate_store::{Interrupt, InterruptCursor};

    use super::ApiError;

    /// The cursor just after `last`.
    pub(super) fn encode(last: &Interrupt) -> String {
        let key = (last.created_at, &last.session_id, &last.interrupt_id);
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&key).expect("a tuple of a number and strings"))
    }

    /// The cursor `after` names; a 400 naming `after` when it is not one this API gave.
    pub(super) fn decode(after: &str) -> Result<InterruptCursor, ApiError> {
        let bad = || ApiError::bad("after", "after must be the `next_after` of the previous page, unchanged");
        if after.len() > 1024 {
            return Err(bad());
        }
        let bytes = URL_SAFE_NO_PAD.decode(after).map_err(|_| bad())?;
        let (created_at, session_id, interrupt_id): (i64, String, String) =
            serde_json::from_slice(&bytes).map_err(|_| bad())?;
        Ok(InterruptCursor { created_at, session_id, interrupt_id })
    }
}

/// An open interrupt as the inbox lists it (`GET /v1/interrupts` and the live inbox).
fn pending_interrupt(open: tollgate_store::Interrupt) -> Result<PendingInterrupt, ApiError> {
    let request = types::ApprovalRequest::parse(open.request.get()).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::StoredRowRefused,
            format!(
                "the request of interrupt `{}` of session `{}` is not an approval request: {e}",
                open.interrupt_id, open.session_id
            ),
        )
    })?;
    Ok(PendingInterrupt {
        arguments: request.arguments.clone(),
        created_at: open.created_at,
        interrupt_id: open.interrupt_id,
        session_id: open.session_id,
        tool_name: request.tool_name.clone(),
        turn_id: request.turn_id.clone(),
        batch_id: request.batch_id.clone(),
        summary: request.summary.clone(),
        review: request.review.clone(),
        approvals_required: request.approvals_required,
        approvals: tollgate_sessions::reads::approvals_so_far(&open.approvals),
        request,
        deadline_at: open.deadline_at,
        escalated_at: open.escalated_at,
    })
}

/// `GET /v1/agents`.
#[utoipa::path(
    get,
    path = "/v1/agents",
    tag = "agents",
    summary = "The agents the caller may see: their versions in the store (current, canary, sessions on each, who pushed them and when) and the bundles their Workers loaded",
    responses(
        (status = 200, description = "The agents", body = types::AgentList),
        openapi::ReadErrors,
    )
)]
async fn list_agents(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    Params::parse(query.as_deref(), &[])?;
    let known = state.store.agents().known_agents().await?;
    let mut names: Vec<String> = known.iter().map(|k| k.name.clone()).collect();
    names.extend(state.store.versions().pushed_agents().await?);
    names.sort();
    names.dedup();
    let unavailable = unavailable_components(
        state.store.agents().unavailable_tools(tollgate_store::agents::REPORT_FRESH).await?,
    );
    let mut agents = Vec::new();
    for name in names.into_iter().filter(|name| caller.sees_agent(Some(name))) {
        let versions: Vec<types::AgentVersionInfo> = state
            .store
            .versions()
            .agent_versions(&name)
            .await?
            .into_iter()
            .map(|v| types::AgentVersionInfo {
                version: v.version,
                digest: v.digest,
                current: v.current,
                canary_share: v.canary_share,
                sessions: v.sessions,
                pushed_by: v.pushed_by,
                pushed_at: v.pushed_at,
            })
            .collect();
        let loaded = known
            .iter()
            .filter(|k| k.name == name)
            .map(|k| types::LoadedBundle {
                digest: k.digest.clone(),
                locked: k.locked,
                first_seen_at: k.first_seen_at,
                last_seen_at: k.last_seen_at,
            })
            .collect();
        let current = versions.iter().find(|v| v.current).map(|v| v.version);
        let tools_unavailable = unavailable.iter().filter(|u| u.agent == name).cloned().collect();
        agents.push(types::AgentInfo { name, current, versions, loaded, tools_unavailable });
    }
    Ok(Json(types::AgentList { agents }).into_response())
}

/// `GET /v1/me`.
#[utoipa::path(
    get,
    path = "/v1/me",
    tag = "operations",
    summary = "Who the caller is: its principal, roles and groups, and whether separation of duties holds (what the web inbox shows and decides its buttons by)",
    responses(
        (status = 200, description = "The caller", body = Me),
        openapi::ReadErrors,
    )
)]
async fn me(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    Params::parse(query.as_deref(), &[])?;
    Ok(Json(Me {
        name: caller.name.clone(),
        roles: caller.roles.iter().map(|r| r.as_str().to_owned()).collect(),
        groups: caller.groups.iter().cloned().collect(),
        sole: caller.sole,
        separation_of_duties: state.auth.rules().separation_of_duties,
        agents: caller.agents.as_ref().map(|agents| agents.iter().cloned().collect()),
    })
    .into_response())
}

/// `GET /v1/audit`.
#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "approvals",
    summary = "The audit trail of decisions, oldest first: who decided what, when (database clock), why, on which input",
    params(types::AuditQuery),
    responses(
        (status = 200, description = "A page; continue with `after=next_after`", body = AuditPage),
        openapi::ReadErrors,
    )
)]
async fn list_audit(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let params =
        Params::parse(query.as_deref(), &["session_id", "principal", "since", "until", "after", "limit"])?;
    let text = |name: &str| -> Result<Option<String>, ApiError> {
        match params.text(name) {
            Some(value) if value.is_empty() || value.chars().count() > input::MAX_ID => {
                Err(ApiError::bad(name, format!("{name} must be 1 to {} characters", input::MAX_ID)))
            }
            value => Ok(value.map(str::to_owned)),
        }
    };
    let query = tollgate_store::AuditQuery {
        session_id: text("session_id")?,
        principal: text("principal")?,
        since: params.int("since", 0, i64::MAX)?,
        until: params.int("until", 0, i64::MAX)?,
        after: params.int("after", 0, i64::MAX)?.unwrap_or(0),
        limit: params.int("limit", 1, MAX_LIMIT)?.unwrap_or(100),
    };
    let entries = state.store.audit().audit_entries(&query).await?;
    let next_after =
        (entries.len() as i64 == query.limit).then(|| entries.last().map(|e| e.audit_id)).flatten();
    let visible = visible_sessions(&state, &caller, entries.iter().map(|e| e.session_id.clone())).await?;
    let entries = entries
        .into_iter()
        .filter(|e| visible.contains(&e.session_id))
        .map(tollgate_sessions::reads::audit_record)
        .collect();
    Ok(Json(AuditPage { entries, next_after }).into_response())
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
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    summary = "Liveness and store health: a read and a write probe that writes nothing (no auth)",
    security(()),
    responses(
        (status = 200, description = "`ok`, or `degraded` when the store reads but cannot take a write (reason e.g. read_only, disk_full), steps wait unclaimed, or tool components did not load (`tools_unavailable` names each)", body = Health),
        (status = 503, description = "`down`: the store cannot be read (reason e.g. unreachable, pool_timeout)", body = Health),
    )
)]
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
    let reason = |e: &StoreError| e.unavailable().map_or("error", UnavailableReason::code).to_owned();
    let unclaimable: Vec<types::Unclaimable> =
        match &read {
            Ok(()) => tokio::time::timeout(
                HEALTH_TIMEOUT,
                state.store.unclaimed_steps(state.unclaimable_after, None),
            )
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
            .into_iter()
            .map(|u| types::Unclaimable { agent: u.agent, steps: u.steps, oldest_due_at: u.oldest_due_at })
            .collect(),
            Err(_) => Vec::new(),
        };
    // Every Worker on this store reports the tool components it could not load.
    let tools_unavailable = match &read {
        Ok(()) => unavailable_components(
            tokio::time::timeout(
                HEALTH_TIMEOUT,
                state.store.agents().unavailable_tools(tollgate_store::agents::REPORT_FRESH),
            )
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default(),
        ),
        Err(_) => Vec::new(),
    };
    let (status, http) = match (&read, &write) {
        (Ok(()), Ok(())) if unclaimable.is_empty() && tools_unavailable.is_empty() => {
            (HealthStatus::Ok, StatusCode::OK)
        }
        (Ok(()), _) => (HealthStatus::Degraded, StatusCode::OK),
        (Err(_), _) => (HealthStatus::Down, StatusCode::SERVICE_UNAVAILABLE),
    };
    let failed = read.as_ref().err().or(write.as_ref().err());
    let store = StoreHealth {
        error: failed.map(ToString::to_string),
        readable: read.is_ok(),
        reason: failed.map(reason),
        writable: write.is_ok(),
    };
    (
        http,
        Json(Health {
            status,
            store,
            unclaimable,
            tools_unavailable,
            sandbox: state.sandbox.map(str::to_owned),
        }),
    )
        .into_response()
}

/// The components of the Workers' `reports`, one entry per component and Worker, by agent,
/// component, then Worker.
fn unavailable_components(reports: Vec<tollgate_store::UnavailableTools>) -> Vec<types::ToolUnavailable> {
    let mut each: Vec<types::ToolUnavailable> = reports
        .into_iter()
        .flat_map(|report| {
            let (agent, worker, since) = (report.agent, report.worker, report.changed_at);
            report.components.into_iter().map(move |c| types::ToolUnavailable {
                agent: agent.clone(),
                component: c.component,
                reason: c.reason,
                worker: worker.clone(),
                serving_last_good: c.serving_last_good,
                since,
            })
        })
        .collect();
    each.sort_by(|a, b| (&a.agent, &a.component, &a.worker).cmp(&(&b.agent, &b.component, &b.worker)));
    each
}

/// `GET /metrics`.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    summary = "Prometheus metrics: steps, step (segment, tool call) durations, sandbox traps, open interrupts",
    responses(
        (status = 200, description = "The metrics", body = String, content_type = "text/plain; version=0.0.4"),
        (status = 401, description = "The bearer token is missing or wrong", body = ErrorBody),
    )
)]
async fn metrics(State(state): State<ApiState>) -> Response {
    let figures = tollgate_process::metrics::StoreFigures {
        open_interrupts: state.store.count_open_interrupts().await.ok(),
        open_interrupts_by_agent: state.store.open_interrupts_by_agent().await.ok(),
        unclaimable: state.store.unclaimed_steps(state.unclaimable_after, None).await.ok(),
        // Every agent a Worker registered has the series, 0 while none reports a component.
        tools_unavailable: match (
            state.store.agents().unavailable_tools(tollgate_store::agents::REPORT_FRESH).await,
            state.store.agents().known_agents().await,
        ) {
            (Ok(reports), Ok(known)) => {
                let names: Vec<&str> = known.iter().map(|k| k.name.as_str()).collect();
                Some(tollgate_process::metrics::unavailable_by_agent(&reports, &names))
            }
            _ => None,
        },
    };
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render(&figures)).into_response()
}

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    summary = "This document (no auth)",
    security(()),
    responses(
        (status = 200, description = "OpenAPI 3.1", body = Object),
    )
)]
async fn openapi_json() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi::document()).into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, "no such route; see /openapi.json")
}

async fn method_not_allowed(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::MethodNotAllowed,
        format!("{} is not allowed on {}; see /openapi.json", request.method(), request.uri().path()),
    )
}

#[cfg(test)]
mod tests {
    use axum::body::Bytes;

    use super::*;

    /// A generated session id is 128 random bits, nothing of the process or the clock: two
    /// replicas (both pid 1 in their containers) never mint the same one.
    #[test]
    fn a_generated_session_id_is_128_random_bits() {
        let ids: Vec<String> = (0..100).map(|_| new_session_id()).collect();
        for id in &ids {
            let random = id.strip_prefix("session-").unwrap_or_else(|| panic!("{id}"));
            assert!(random.len() == 32 && random.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
        let mut unique = ids.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), ids.len());
    }

    #[test]
    fn secrets_compare_equal_only_when_every_byte_matches() {
        use crate::auth::same_secret;
        assert!(same_secret(b"s3cret", b"s3cret"));
        assert!(!same_secret(b"s3cret", b"s3creT"));
        assert!(!same_secret(b"s3cret", b"s3cre"));
    }

    #[test]
    fn each_route_is_the_action_its_role_check_needs() {
        use tollgate_sessions::rights::Action;
        let post = axum::http::Method::POST;
        let get = axum::http::Method::GET;
        assert_eq!(action_of(&post, "/v1/sessions"), Action::Write);
        assert_eq!(action_of(&post, "/v1/sessions/s/messages"), Action::Write);
        assert_eq!(action_of(&post, "/v1/sessions/s/interrupts/i"), Action::Decide);
        assert_eq!(action_of(&post, "/v1/sessions/s/cancel"), Action::Cancel);
        assert_eq!(action_of(&post, "/v1/sessions/s/fork"), Action::Fork);
        assert_eq!(action_of(&axum::http::Method::DELETE, "/v1/sessions/s/grants/t"), Action::Decide);
        assert_eq!(action_of(&post, "/v1/sessions/s/upgrade"), Action::Operate);
        assert_eq!(action_of(&post, "/v1/agent-upgrades"), Action::Operate);
        assert_eq!(action_of(&get, "/v1/sessions/s"), Action::Read);
        assert_eq!(action_of(&get, "/v1/audit"), Action::Read);
        assert_eq!(action_of(&post, "/v2/nothing"), Action::Read, "a 404 stays a 404");
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
}
