//! The model proxy: a loopback Messages API between each segment's CLI and the real one, so the
//! CLI (and every command its tools run) never holds the API key.
//!
//! Read [`ModelProxy`] first. One runs per Worker process on `127.0.0.1:<free port>`. Each segment
//! gets a [`SegmentToken`] ([`ModelProxy::register`]): its CLI is started with
//! `ANTHROPIC_BASE_URL=<proxy>` and `ANTHROPIC_API_KEY=<token>`, which the CLI sends as
//! `x-api-key` (docs/PROTOCOL.md, "Launch"; `Authorization: Bearer <token>` is accepted too). For every
//! request the proxy:
//!
//! 1. checks the token (its secret compared in constant time); a missing, unknown or revoked one
//!    gets 401 with a Messages-API `authentication_error` body;
//! 2. refuses the request (403, `permission_error`) once the session's spend — the stored total
//!    at the segment's start plus what this segment's requests cost so far ([`prices`]) — has
//!    reached the agent's `spend_limit_usd`, and records why ([`ProxySummary::stopped`]);
//! 3. forwards it to the [`Upstream`] (the Worker's own `ANTHROPIC_BASE_URL`, default
//!    `https://api.anthropic.com`) with the real credential in place of the token
//!    (`x-api-key: $ANTHROPIC_API_KEY`, else `Authorization: Bearer $ANTHROPIC_AUTH_TOKEN`, else
//!    `Authorization: Bearer $CLAUDE_CODE_OAUTH_TOKEN` with [`OAUTH_BETA`] added to
//!    `anthropic-beta`, as the CLI itself sends a subscription's OAuth token);
//! 4. streams the answer back as it arrives, byte for byte, reading the usage out of it on the
//!    way ([`usage`]), and adds the request's tokens, cost, latency and outcome to the segment's
//!    [`ProxySummary`] and the process [`Metrics`].
//!
//! Dropping a [`SegmentToken`] revokes it: a later request with it is refused.
//!
//! # Caveats
//!
//! - The request that crosses the limit is served in full (its cost is known only from its
//!   answer); the next one is refused. A segment can so overshoot the limit by one request.
//! - `accept-encoding` is not forwarded (the usage is read from plain bytes).
//! - API keys, `ANTHROPIC_AUTH_TOKEN` and `CLAUDE_CODE_OAUTH_TOKEN` are swapped in; Bedrock,
//!   Vertex and the CLI's interactive logins (`/login`, stored in its config directory) are not
//!   proxied.
//! - A Worker with none of them and no `ANTHROPIC_BASE_URL` would fail every turn: `tollgate
//!   worker` and `tollgate serve` refuse to start instead ([`Upstream::check`]).
//! - An `https://` upstream needs a TLS-enabled `reqwest` build (rustls).

pub mod prices;
pub mod usage;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use serde_json::json;
use tokio::task::JoinHandle;
use tollgate_claude::launch::RUN_PREFIX;

use self::usage::{BodyKind, UsageScanner};
use tollgate_process::metrics::{Metrics, TokenCounts};

/// The default upstream.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// How a token starts.
const TOKEN_PREFIX: &str = "tgp-";
/// How many revoked tokens are remembered for a clearer refusal.
const REMEMBERED_REVOKED: usize = 4096;

/// The `anthropic-beta` flag the Messages API wants beside a subscription's OAuth token: the
/// CLI adds it to every model request when it logs in with `CLAUDE_CODE_OAUTH_TOKEN`, but behind
/// the proxy it holds a segment token as its API key, so the proxy adds it.
pub const OAUTH_BETA: &str = "oauth-2025-04-20";

/// The credential the proxy swaps in.
#[derive(Clone)]
pub enum Credential {
    /// Sent as `x-api-key` (`ANTHROPIC_API_KEY`).
    ApiKey(String),
    /// Sent as `Authorization: Bearer` (`ANTHROPIC_AUTH_TOKEN`).
    AuthToken(String),
    /// A Claude subscription's OAuth token (`CLAUDE_CODE_OAUTH_TOKEN`, from `claude
    /// setup-token`): sent as `Authorization: Bearer`, with [`OAUTH_BETA`] in `anthropic-beta`.
    OAuthToken(String),
    /// Nothing is sent.
    None,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Credential::ApiKey(_) => "ApiKey(<redacted>)",
            Credential::AuthToken(_) => "AuthToken(<redacted>)",
            Credential::OAuthToken(_) => "OAuthToken(<redacted>)",
            Credential::None => "None",
        })
    }
}

/// Why a Worker cannot reach the model: it refuses to start rather than fail every turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpstreamError {
    /// No credential, and the default upstream (which needs one).
    #[error(
        "no model credential: set ANTHROPIC_API_KEY (an API key), ANTHROPIC_AUTH_TOKEN (a bearer token) \
         or CLAUDE_CODE_OAUTH_TOKEN (a Claude subscription's token, from `claude setup-token`) in the \
         Worker's environment, or ANTHROPIC_BASE_URL for a model endpoint that needs none"
    )]
    NoCredential,
}

/// Where requests go.
#[derive(Clone, Debug)]
pub struct Upstream {
    /// The base URL, without a trailing `/`.
    pub base_url: String,
    /// What is sent in place of the segment's token.
    pub credential: Credential,
}

impl Upstream {
    /// The Worker's own `ANTHROPIC_BASE_URL` (default [`DEFAULT_BASE_URL`]) with
    /// `ANTHROPIC_API_KEY`, else `ANTHROPIC_AUTH_TOKEN`, else `CLAUDE_CODE_OAUTH_TOKEN`.
    pub fn from_env() -> Upstream {
        Upstream::from_vars(|name| std::env::var(name).ok())
    }

    /// [`Upstream::from_env`] from the variables `var` reads (blank ones count as unset).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Upstream {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let credential = if let Some(key) = var("ANTHROPIC_API_KEY") {
            Credential::ApiKey(key)
        } else if let Some(token) = var("ANTHROPIC_AUTH_TOKEN") {
            Credential::AuthToken(token)
        } else if let Some(token) = var("CLAUDE_CODE_OAUTH_TOKEN") {
            Credential::OAuthToken(token)
        } else {
            Credential::None
        };
        Upstream::new(var("ANTHROPIC_BASE_URL").as_deref().unwrap_or(DEFAULT_BASE_URL), credential)
    }

    /// Whether a Worker can reach the model this way: a credential, or another endpoint than
    /// [`DEFAULT_BASE_URL`] (a local model server, a gateway that adds its own).
    ///
    /// # Errors
    /// [`UpstreamError::NoCredential`], naming the variables to set.
    pub fn check(&self) -> Result<(), UpstreamError> {
        match self.credential {
            Credential::None if self.base_url == DEFAULT_BASE_URL => Err(UpstreamError::NoCredential),
            _ => Ok(()),
        }
    }

    /// `base_url` with `credential`.
    pub fn new(base_url: &str, credential: Credential) -> Upstream {
        Upstream { base_url: base_url.trim_end_matches('/').to_owned(), credential }
    }
}

/// The spend a segment starts with and may not pass.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpendLimit {
    /// The session's limit (`[agent] spend_limit_usd`), if any.
    pub limit_usd: Option<f64>,
    /// What the session spent before this segment.
    pub spent_before_usd: f64,
}

/// What the proxy saw of one segment's model requests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProxySummary {
    /// Requests forwarded to the upstream.
    pub requests: u64,
    /// Forwarded requests that failed: an HTTP error status, an error in the body, or no answer.
    pub failed: u64,
    /// Requests refused because the spend limit was reached.
    pub refused: u64,
    /// Tokens of every answered request.
    pub tokens: TokenCounts,
    /// Their cost ([`prices`]).
    pub cost_usd: f64,
    /// The models that answered.
    pub models: BTreeSet<String>,
    /// The message ids, in order.
    pub response_ids: Vec<String>,
    /// The stop reasons, in order.
    pub stop_reasons: Vec<String>,
    /// The upstream's errors, in order (at most 10).
    pub errors: Vec<String>,
    /// Why the proxy stopped the segment (the spend limit), when it did.
    pub stopped: Option<String>,
}

struct Meter {
    /// `None` while the token is parked ([`ModelProxy::register_parked`]): every request is refused.
    limit: Mutex<Option<SpendLimit>>,
    summary: Mutex<ProxySummary>,
}

impl Meter {
    fn lock(&self) -> std::sync::MutexGuard<'_, ProxySummary> {
        self.summary.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Err(reason)` once the limit is reached.
    fn admit(&self) -> Result<(), String> {
        let Some(spend) = *self.limit.lock().unwrap_or_else(|p| p.into_inner()) else {
            return Err(
                "the model proxy token belongs to a pre-started CLI that no segment has taken yet".into()
            );
        };
        let Some(limit) = spend.limit_usd else { return Ok(()) };
        let mut summary = self.lock();
        let spent = spend.spent_before_usd + summary.cost_usd;
        if spent < limit {
            return Ok(());
        }
        summary.refused += 1;
        let reason = format!(
            "the session's spend limit of ${limit} was reached during the segment (${spent:.4} spent, \
             ${:.4} of it in this segment); Tollgate refused the next model request",
            summary.cost_usd
        );
        summary.stopped.get_or_insert_with(|| reason.clone());
        Err(reason)
    }
}

struct Registration {
    secret: String,
    meter: Arc<Meter>,
}

#[derive(Default)]
struct Registry {
    live: HashMap<u64, Registration>,
    revoked: VecDeque<u64>,
}

struct Shared {
    upstream: Upstream,
    client: reqwest::Client,
    registry: Mutex<Registry>,
    next_id: AtomicU64,
    metrics: Arc<Metrics>,
}

impl Shared {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The meter of a presented token, or why it is refused.
    fn check(&self, presented: Option<&str>) -> Result<Arc<Meter>, &'static str> {
        let presented = presented
            .ok_or("no model proxy token: the request carries neither x-api-key nor Authorization: Bearer")?;
        let invalid = "the model proxy token is not valid: this Worker did not issue it";
        let (id, secret) = presented
            .strip_prefix(TOKEN_PREFIX)
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(id, secret)| Some((u64::from_str_radix(id, 16).ok()?, secret)))
            .ok_or(invalid)?;
        let registry = self.registry();
        match registry.live.get(&id) {
            Some(registration) if constant_time_eq(registration.secret.as_bytes(), secret.as_bytes()) => {
                Ok(registration.meter.clone())
            }
            Some(_) => Err(invalid),
            None if registry.revoked.contains(&id) => {
                Err("the model proxy token was revoked: the segment it was issued to has ended")
            }
            None => Err(invalid),
        }
    }

    fn revoke(&self, id: u64) {
        let mut registry = self.registry();
        registry.live.remove(&id);
        if registry.revoked.len() >= REMEMBERED_REVOKED {
            registry.revoked.pop_front();
        }
        registry.revoked.push_back(id);
    }
}

/// The running proxy. Stops when dropped.
pub struct ModelProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
    /// The same service on a Unix socket, for the agents' boxes (their own loopback cannot reach
    /// this one; the box's init relays to the socket).
    socket: Option<(tempfile::TempDir, std::path::PathBuf, JoinHandle<()>)>,
}

impl std::fmt::Debug for ModelProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .finish_non_exhaustive()
    }
}

impl Drop for ModelProxy {
    fn drop(&mut self) {
        self.task.abort();
        if let Some((_, _, task)) = &self.socket {
            task.abort();
        }
    }
}

/// Why the proxy did not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The loopback port or the Unix socket could not be bound.
    #[error("the model proxy could not listen on 127.0.0.1 or its Unix socket: {0}")]
    Bind(#[source] std::io::Error),
    /// The HTTP client could not be built.
    #[error("the model proxy's HTTP client could not be built: {0}")]
    Client(#[source] reqwest::Error),
}

/// Makes `ring` the process's rustls provider, once (reqwest is built without one of its own; an
/// `https://` upstream needs it); later calls do nothing.
pub fn install_crypto_provider() {
    // Fails only when a provider is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl ModelProxy {
    /// Starts on `127.0.0.1` at a free port, forwarding to `upstream` and recording into `metrics`.
    ///
    /// # Errors
    /// The port cannot be bound or the client cannot be built.
    pub async fn start(upstream: Upstream, metrics: Arc<Metrics>) -> Result<ModelProxy, ProxyError> {
        let listener =
            tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.map_err(ProxyError::Bind)?;
        let addr = listener.local_addr().map_err(ProxyError::Bind)?;
        // An `https://` upstream (the real API) needs rustls' crypto provider.
        install_crypto_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()
            .map_err(ProxyError::Client)?;
        let shared = Arc::new(Shared {
            upstream,
            client,
            registry: Mutex::default(),
            next_id: AtomicU64::new(1),
            metrics,
        });
        let app = axum::Router::new().fallback(handle).with_state(shared.clone());
        let socket = Self::serve_socket(app.clone())?;
        // The answer streams as many small writes: without TCP_NODELAY, Nagle's algorithm holds
        // each one for the client's delayed ACK (about 40 ms a request on loopback).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            if let Err(err) = tcp.set_nodelay(true) {
                tracing::debug!(error = %err, "the model proxy could not set TCP_NODELAY");
            }
        });
        let task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                tracing::error!(error = %err, "the model proxy stopped");
            }
        });
        tracing::info!(%addr, upstream = %shared.upstream.base_url, "model proxy listening");
        Ok(ModelProxy { addr, shared, task, socket: Some(socket) })
    }

    /// Serves `app` on `<temp>/tollgate-run-<pid>-XXXXXX/model.sock`: the folder `0700` (boxes get
    /// the socket as a descriptor), the socket `0666` (a box's user may connect through it; every
    /// request still needs its segment's token). The folder goes with the proxy; the next Worker
    /// removes one a killed Worker left (`tollgate_claude::launch::remove_stale_scratch`).
    fn serve_socket(
        app: axum::Router,
    ) -> Result<(tempfile::TempDir, std::path::PathBuf, JoinHandle<()>), ProxyError> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix(&format!("{RUN_PREFIX}{}-", std::process::id()))
            .tempdir()
            .map_err(ProxyError::Bind)?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .map_err(ProxyError::Bind)?;
        let path = dir.path().join("model.sock");
        let listener = tokio::net::UnixListener::bind(&path).map_err(ProxyError::Bind)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).map_err(ProxyError::Bind)?;
        let task = tokio::spawn(async move {
            if let Err(err) = axum::serve(listener, app).await {
                tracing::error!(error = %err, "the model proxy's socket stopped");
            }
        });
        Ok((dir, path, task))
    }

    /// The Unix socket the proxy also serves (the agents' boxes reach it through their relay).
    pub fn socket_path(&self) -> Option<&std::path::Path> {
        self.socket.as_ref().map(|(_, path, _)| path.as_path())
    }

    /// The loopback port the proxy listens on (a box relays the same port to the socket).
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:<port>`, the CLI's `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The upstream.
    pub fn upstream(&self) -> &Upstream {
        &self.shared.upstream
    }

    /// A fresh token for one segment, valid until the returned value is dropped.
    pub fn register(&self, limit: SpendLimit) -> SegmentToken {
        self.register_with(Some(limit))
    }

    /// A token for a pre-started CLI: refused until [`SegmentToken::open`] gives it the spend
    /// limit of the segment that takes the CLI; revoked when dropped.
    pub fn register_parked(&self) -> SegmentToken {
        self.register_with(None)
    }

    fn register_with(&self, limit: Option<SpendLimit>) -> SegmentToken {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let secret = random_hex();
        let meter = Arc::new(Meter { limit: Mutex::new(limit), summary: Mutex::default() });
        self.shared.registry().live.insert(id, Registration { secret: secret.clone(), meter: meter.clone() });
        SegmentToken {
            id,
            token: format!("{TOKEN_PREFIX}{id:x}-{secret}"),
            meter,
            shared: self.shared.clone(),
        }
    }
}

/// One segment's token; dropping it revokes it.
pub struct SegmentToken {
    id: u64,
    token: String,
    meter: Arc<Meter>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SegmentToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SegmentToken").field("id", &self.id).finish_non_exhaustive()
    }
}

impl SegmentToken {
    /// The token, for the CLI's `ANTHROPIC_API_KEY`.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Sets the spend limit of the segment that took this token's CLI (a parked token's
    /// requests are served from now on) and forgets what was refused before.
    pub fn open(&self, limit: SpendLimit) {
        *self.meter.limit.lock().unwrap_or_else(|p| p.into_inner()) = Some(limit);
        *self.meter.lock() = ProxySummary::default();
    }

    /// What the proxy saw of this segment so far.
    pub fn summary(&self) -> ProxySummary {
        self.meter.lock().clone()
    }
}

impl Drop for SegmentToken {
    fn drop(&mut self) {
        self.shared.revoke(self.id);
    }
}

/// 32 random bytes as hex.
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random number generator failed");
    hex::encode(bytes)
}

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token a request presents: `x-api-key`, else `Authorization: Bearer`.
fn presented_token(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key.trim());
    }
    let auth = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = auth.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Adds `beta` to the request's `anthropic-beta` flags (one comma-separated header), unless it
/// has it.
fn with_beta(headers: &mut HeaderMap, beta: &str) {
    let mut betas: Vec<String> = headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|flag| !flag.is_empty())
        .map(str::to_owned)
        .collect();
    if !betas.iter().any(|flag| flag == beta) {
        betas.push(beta.to_owned());
    }
    if let Ok(value) = HeaderValue::from_str(&betas.join(",")) {
        headers.insert("anthropic-beta", value);
    }
}

/// A Messages-API error answer.
fn error_response(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// Headers that belong to one connection, not the request.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "proxy-authenticate"
            | "proxy-authorization"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let started = Instant::now();
    let meter = match shared.check(presented_token(request.headers())) {
        Ok(meter) => meter,
        Err(reason) => {
            shared.metrics.model_request("unauthorized", None, None);
            tracing::warn!(%reason, "the model proxy refused a request");
            return error_response(StatusCode::UNAUTHORIZED, "authentication_error", reason);
        }
    };
    if let Err(reason) = meter.admit() {
        shared.metrics.model_request("spend_limit", None, None);
        tracing::warn!(%reason, "the model proxy refused a request");
        return error_response(StatusCode::FORBIDDEN, "permission_error", &reason);
    }

    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let url = format!("{}{path}", shared.upstream.base_url);
    let mut headers = HeaderMap::with_capacity(parts.headers.len() + 1);
    for (name, value) in &parts.headers {
        if hop_by_hop(name)
            || name == "x-api-key"
            || name == header::AUTHORIZATION
            || name == header::ACCEPT_ENCODING
        {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    match &shared.upstream.credential {
        Credential::ApiKey(key) => {
            if let Ok(value) = HeaderValue::from_str(key) {
                headers.insert("x-api-key", value);
            }
        }
        Credential::AuthToken(token) => {
            if let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) {
                headers.insert(header::AUTHORIZATION, value);
            }
        }
        Credential::OAuthToken(token) => {
            if let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) {
                headers.insert(header::AUTHORIZATION, value);
            }
            with_beta(&mut headers, OAUTH_BETA);
        }
        Credential::None => {}
    }
    let upstream = shared
        .client
        .request(parts.method, &url)
        .headers(headers)
        .body(reqwest::Body::wrap_stream(body.into_data_stream()))
        .send()
        .await;
    let answer = match upstream {
        Ok(answer) => answer,
        Err(err) => {
            let text = format!("the model proxy could not reach {}: {err}", shared.upstream.base_url);
            {
                let mut summary = meter.lock();
                summary.requests += 1;
                summary.failed += 1;
                push_error(&mut summary.errors, text.clone());
            }
            shared.metrics.model_request("unreachable", Some(started.elapsed()), None);
            tracing::warn!(error = %text, "model request failed");
            return error_response(StatusCode::BAD_GATEWAY, "api_error", &text);
        }
    };
    let status = answer.status();
    let kind =
        BodyKind::of_content_type(answer.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()));
    let mut response = Response::builder().status(status.as_u16());
    if let Some(out) = response.headers_mut() {
        for (name, value) in answer.headers() {
            if !hop_by_hop(name) {
                out.append(name.clone(), value.clone());
            }
        }
    }
    let tap = Tap {
        inner: Box::pin(answer.bytes_stream()),
        scanner: Some(UsageScanner::new(kind)),
        status: status.as_u16(),
        started,
        meter,
        shared: shared.clone(),
    };
    response.body(Body::from_stream(tap)).unwrap_or_else(|err| {
        error_response(
            StatusCode::BAD_GATEWAY,
            "api_error",
            &format!("the model proxy could not answer: {err}"),
        )
    })
}

fn push_error(errors: &mut Vec<String>, error: String) {
    if errors.len() < 10 {
        errors.push(error);
    }
}

type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, reqwest::Error>> + Send>>;

/// The upstream's body on its way to the CLI: every chunk is passed on as it arrives and read
/// for its usage; the request is accounted for when the body ends, fails, or the CLI hangs up.
struct Tap {
    inner: ByteStream,
    scanner: Option<UsageScanner>,
    status: u16,
    started: Instant,
    meter: Arc<Meter>,
    shared: Arc<Shared>,
}

impl Tap {
    fn finish(&mut self, complete: bool) {
        let Some(scanner) = self.scanner.take() else { return };
        let reported = scanner.finish();
        let took = self.started.elapsed();
        let ok = (200..300).contains(&self.status) && reported.error.is_none() && complete;
        let tokens = reported.usage.unwrap_or_default();
        let model = reported.model.clone().unwrap_or_default();
        let cost = if reported.usage.is_some() { prices::cost_usd(&model, &tokens) } else { 0.0 };
        {
            let mut summary = self.meter.lock();
            summary.requests += 1;
            summary.tokens.add(&tokens);
            summary.cost_usd += cost;
            if let Some(model) = reported.model {
                summary.models.insert(model);
            }
            if let Some(id) = reported.id {
                summary.response_ids.push(id);
            }
            if let Some(reason) = reported.stop_reason {
                summary.stop_reasons.push(reason);
            }
            if !ok {
                summary.failed += 1;
                let error = match (&reported.error, complete) {
                    (Some(error), _) => format!("HTTP {}: {error}", self.status),
                    (None, false) => format!("HTTP {}: the answer was cut off", self.status),
                    (None, true) => format!("HTTP {}", self.status),
                };
                push_error(&mut summary.errors, error);
            }
        }
        let result = if ok { "ok" } else { "upstream_error" };
        self.shared.metrics.model_request(result, Some(took), reported.usage.map(|t| (t, cost)));
    }
}

impl Stream for Tap {
    type Item = Result<Bytes, reqwest::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.inner.poll_next_unpin(cx);
        match &next {
            Poll::Ready(Some(Ok(chunk))) => {
                if let Some(scanner) = self.scanner.as_mut() {
                    scanner.feed(chunk);
                }
            }
            Poll::Ready(Some(Err(_))) => self.finish(false),
            Poll::Ready(None) => self.finish(true),
            Poll::Pending => {}
        }
        next
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.finish(false);
    }
}

#[cfg(test)]
mod tests {
    use tollgate_mock_model::MockModel;

    use super::*;

    /// A streamed model call whose script the mock answers with `say <text>`.
    fn body(text: &str) -> String {
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "stream": true,
            "messages": [{"role": "user", "content": format!("say {text}")}],
        })
        .to_string()
    }

    async fn post(base: &str, key: Option<&str>, body: String) -> (u16, String, Vec<u8>) {
        super::install_crypto_provider();
        let mut request = reqwest::Client::new()
            .post(format!("{base}/v1/messages?beta=true"))
            .header("content-type", "application/json")
            .header("anthropic-version", "2023-06-01")
            .body(body);
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        let answer = request.send().await.expect("an answer");
        let status = answer.status().as_u16();
        let content_type =
            answer.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        (status, content_type, answer.bytes().await.expect("a body").to_vec())
    }

    /// The mock's message ids carry a per-request nonce: the one part of two answers that differs.
    fn without_ids(bytes: &[u8]) -> String {
        let text = String::from_utf8(bytes.to_vec()).expect("UTF-8");
        let mut out = String::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("msg_mock_") {
            out.push_str(&rest[..at]);
            out.push_str("msg_mock_<id>");
            rest = &rest[at + "msg_mock_".len() + 16..];
        }
        out.push_str(rest);
        out
    }

    async fn proxy_to(mock: &MockModel, credential: Credential) -> ModelProxy {
        ModelProxy::start(Upstream::new(&mock.base_url(), credential), Arc::new(Metrics::default()))
            .await
            .expect("the proxy starts")
    }

    #[tokio::test]
    async fn a_stream_through_the_proxy_is_byte_identical_to_the_mock_and_its_usage_is_counted() {
        let mock = MockModel::start().await.unwrap();
        let proxy = proxy_to(&mock, Credential::ApiKey("sk-real-key".into())).await;
        let token = proxy.register(SpendLimit::default());
        let text = "hello through the proxy, with enough words to span several deltas";
        let (status, content_type, direct) = post(&mock.base_url(), Some("dummy"), body(text)).await;
        assert_eq!((status, content_type.as_str()), (200, "text/event-stream; charset=utf-8"));
        let (status, proxied_type, proxied) = post(&proxy.base_url(), Some(token.token()), body(text)).await;
        assert_eq!(status, 200);
        assert_eq!(proxied_type, content_type);
        assert!(direct.len() > 500, "a real stream: {} bytes", direct.len());
        assert_eq!(without_ids(&proxied), without_ids(&direct), "only the per-request message id differs");
        assert_ne!(proxied, direct, "the two answers are separate requests");

        let requests = mock.message_requests();
        assert_eq!(requests[1].header("x-api-key"), Some("sk-rea..."), "the real key replaced the token");
        assert_eq!(requests[1].header("authorization"), None);
        let summary = token.summary();
        assert_eq!(summary.requests, 1);
        assert_eq!(summary.failed, 0);
        let sent = requests[1].body.clone().unwrap();
        let input = tollgate_mock_model::wire::estimate_input_tokens(&sent);
        assert_eq!(summary.tokens.input, input);
        assert!(summary.tokens.output > 1, "the delta's count replaced the start's: {summary:?}");
        assert_eq!(summary.models.iter().collect::<Vec<_>>(), ["claude-sonnet-4-5"]);
        assert_eq!(summary.stop_reasons, ["end_turn"]);
        let expected = prices::cost_usd("claude-sonnet-4-5", &summary.tokens);
        assert!((summary.cost_usd - expected).abs() < 1e-12 && expected > 0.0);
    }

    #[tokio::test]
    async fn a_missing_unknown_forged_or_revoked_token_is_refused_with_a_messages_api_error() {
        let mock = MockModel::start().await.unwrap();
        let proxy = proxy_to(&mock, Credential::AuthToken("oauth-real".into())).await;
        let token = proxy.register(SpendLimit::default());
        let kept = token.token().to_owned();
        let (status, _, _) = post(&proxy.base_url(), Some(&kept), body("live")).await;
        assert_eq!(status, 200);
        assert_eq!(mock.message_requests()[0].header("authorization"), Some("Bearer..."));
        assert_eq!(mock.message_requests()[0].header("x-api-key"), None);

        let last = if kept.ends_with('0') { '1' } else { '0' };
        let forged = format!("{}{last}", &kept[..kept.len() - 1]);
        let refused = |key: Option<String>, reason: &'static str| {
            let proxy_url = proxy.base_url();
            async move {
                let (status, content_type, answer) = post(&proxy_url, key.as_deref(), body("x")).await;
                assert_eq!(status, 401, "{key:?}");
                assert_eq!(content_type, "application/json");
                let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
                assert_eq!(answer["type"], "error");
                assert_eq!(answer["error"]["type"], "authentication_error");
                let message = answer["error"]["message"].as_str().unwrap();
                assert!(message.contains(reason), "{key:?}: {message}");
            }
        };
        // A live token's id with another secret.
        refused(Some(forged), "did not issue it").await;
        drop(token);
        refused(None, "no model proxy token").await;
        refused(Some("sk-ant-not-ours".into()), "did not issue it").await;
        refused(Some(kept), "revoked: the segment it was issued to has ended").await;
        assert_eq!(mock.message_requests().len(), 1, "no refused request reached the upstream");
    }

    #[tokio::test]
    async fn once_the_spend_limit_is_reached_the_next_request_is_refused_and_the_reason_kept() {
        let mock = MockModel::start().await.unwrap();
        let proxy = proxy_to(&mock, Credential::None).await;
        let token = proxy.register(SpendLimit { limit_usd: Some(0.5), spent_before_usd: 0.4999999 });
        let (status, _, _) = post(&proxy.base_url(), Some(token.token()), body("first")).await;
        assert_eq!(status, 200, "under the limit when it was asked");
        let (status, _, answer) = post(&proxy.base_url(), Some(token.token()), body("second")).await;
        assert_eq!(status, 403);
        let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["error"]["type"], "permission_error");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains("spend limit of $0.5 was reached"),
            "{answer}"
        );
        let summary = token.summary();
        assert_eq!((summary.requests, summary.refused), (1, 1));
        assert!(summary.stopped.is_some());
        assert_eq!(mock.message_requests().len(), 1);
    }

    #[tokio::test]
    async fn a_parked_token_is_refused_until_a_segment_opens_it_with_its_limit() {
        let mock = MockModel::start().await.unwrap();
        let proxy = proxy_to(&mock, Credential::None).await;
        let token = proxy.register_parked();
        let (status, _, answer) = post(&proxy.base_url(), Some(token.token()), body("early")).await;
        assert_eq!(status, 403);
        assert!(String::from_utf8_lossy(&answer).contains("no segment has taken yet"));
        assert!(mock.message_requests().is_empty(), "nothing reached the upstream");
        token.open(SpendLimit { limit_usd: Some(0.5), spent_before_usd: 0.4999999 });
        assert_eq!(token.summary(), ProxySummary::default(), "the segment's accounting starts at the take");
        let (status, _, _) = post(&proxy.base_url(), Some(token.token()), body("taken")).await;
        assert_eq!(status, 200);
        let (status, _, _) = post(&proxy.base_url(), Some(token.token()), body("over")).await;
        assert_eq!(status, 403, "the opened limit applies");
        assert_eq!(token.summary().requests, 1);
    }

    #[tokio::test]
    async fn an_upstream_error_passes_through_and_counts_as_a_failed_request() {
        let mock = MockModel::start().await.unwrap();
        let proxy = proxy_to(&mock, Credential::None).await;
        let token = proxy.register(SpendLimit::default());
        let (status, _, answer) = post(&proxy.base_url(), Some(token.token()), body("x ;; fail 529")).await;
        assert_eq!(status, 529);
        assert!(String::from_utf8_lossy(&answer).contains("overloaded_error"));
        let summary = token.summary();
        assert_eq!((summary.requests, summary.failed), (1, 1));
        assert_eq!(summary.errors, ["HTTP 529: overloaded_error: mock HTTP 529"]);
    }

    /// A loopback upstream that keeps every request's headers and answers a small message.
    async fn recorder() -> (String, Arc<Mutex<Vec<HeaderMap>>>) {
        let seen: Arc<Mutex<Vec<HeaderMap>>> = Arc::default();
        let keep = seen.clone();
        let app = axum::Router::new().fallback(move |request: Request| {
            let keep = keep.clone();
            async move {
                keep.lock().unwrap().push(request.headers().clone());
                let body = r#"{"type":"message","id":"msg_1","model":"claude-sonnet-4-5","usage":{"input_tokens":1,"output_tokens":1}}"#;
                ([(header::CONTENT_TYPE, "application/json")], body)
            }
        });
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (url, seen)
    }

    #[tokio::test]
    async fn a_subscription_oauth_token_goes_upstream_as_a_bearer_with_the_oauth_beta_added_once() {
        let (url, seen) = recorder().await;
        let credential = Credential::OAuthToken("sk-ant-oat01-subscription".into());
        let proxy =
            ModelProxy::start(Upstream::new(&url, credential), Arc::new(Metrics::default())).await.unwrap();
        let token = proxy.register(SpendLimit::default());
        // The betas the CLI sends with an API key (the segment token), one request with the OAuth
        // beta already, and one with none.
        for betas in [Some("claude-code-20250219, interleaved-thinking-2025-05-14"), Some(OAUTH_BETA), None] {
            let mut request = reqwest::Client::new()
                .post(format!("{}/v1/messages?beta=true", proxy.base_url()))
                .header("x-api-key", token.token())
                .header("content-type", "application/json")
                .body(body("hi"));
            if let Some(betas) = betas {
                request = request.header("anthropic-beta", betas);
            }
            assert_eq!(request.send().await.unwrap().status(), 200);
        }
        let seen = seen.lock().unwrap().clone();
        let header = |i: usize, name: &str| seen[i].get(name).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(seen.len(), 3);
        for headers in &seen {
            let authorization = headers.get("authorization").map(|v| v.to_str().unwrap());
            assert_eq!(authorization, Some("Bearer sk-ant-oat01-subscription"));
            assert!(headers.get("x-api-key").is_none(), "the segment token never leaves the Worker");
            assert_eq!(headers.get_all("anthropic-beta").iter().count(), 1);
        }
        assert_eq!(
            header(0, "anthropic-beta").as_deref(),
            Some("claude-code-20250219,interleaved-thinking-2025-05-14,oauth-2025-04-20")
        );
        assert_eq!(header(1, "anthropic-beta").as_deref(), Some(OAUTH_BETA), "not twice");
        assert_eq!(header(2, "anthropic-beta").as_deref(), Some(OAUTH_BETA));
        assert_eq!(token.summary().requests, 3);
    }

    #[test]
    fn the_credential_is_the_api_key_then_the_auth_token_then_the_oauth_token_and_none_is_refused() {
        let upstream = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars.iter().map(|(n, v)| ((*n).into(), (*v).into())).collect();
            Upstream::from_vars(|name| vars.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone()))
        };
        let all =
            [("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_AUTH_TOKEN", "t"), ("CLAUDE_CODE_OAUTH_TOKEN", "o")];
        assert!(matches!(upstream(&all).credential, Credential::ApiKey(k) if k == "k"));
        assert!(matches!(upstream(&all[1..]).credential, Credential::AuthToken(t) if t == "t"));
        let oauth = upstream(&all[2..]);
        assert!(matches!(&oauth.credential, Credential::OAuthToken(o) if o == "o"));
        assert_eq!(oauth.check(), Ok(()));
        assert_eq!(format!("{:?}", oauth.credential), "OAuthToken(<redacted>)");
        let blank = upstream(&[("CLAUDE_CODE_OAUTH_TOKEN", "  ")]);
        assert!(matches!(blank.credential, Credential::None), "a blank variable is unset");
        let refused = blank.check().unwrap_err().to_string();
        for name in
            ["ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_BASE_URL"]
        {
            assert!(refused.contains(name), "{refused}");
        }
        let local = upstream(&[("ANTHROPIC_BASE_URL", "http://127.0.0.1:8787/")]);
        assert_eq!((local.base_url.as_str(), local.check()), ("http://127.0.0.1:8787", Ok(())));
        let explicit = upstream(&[("ANTHROPIC_BASE_URL", DEFAULT_BASE_URL)]);
        assert_eq!(explicit.check(), Err(UpstreamError::NoCredential), "the real API needs a credential");
    }

    #[test]
    fn only_an_equal_secret_compares_equal() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn the_token_is_read_from_x_api_key_or_a_bearer_authorization() {
        let mut headers = HeaderMap::new();
        assert_eq!(presented_token(&headers), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer tgp-1-ab"));
        assert_eq!(presented_token(&headers), Some("tgp-1-ab"));
        headers.insert("x-api-key", HeaderValue::from_static("tgp-2-cd"));
        assert_eq!(presented_token(&headers), Some("tgp-2-cd"));
    }

    #[test]
    fn the_meter_refuses_once_the_stored_and_segment_spend_reach_the_limit() {
        let meter = Meter {
            limit: Mutex::new(Some(SpendLimit { limit_usd: Some(1.0), spent_before_usd: 0.75 })),
            summary: Mutex::default(),
        };
        assert!(meter.admit().is_ok());
        meter.lock().cost_usd = 0.25;
        let reason = meter.admit().unwrap_err();
        assert!(reason.contains("spend limit of $1 was reached"), "{reason}");
        assert!(reason.contains("$1.0000 spent"), "{reason}");
        let summary = meter.lock().clone();
        assert_eq!(summary.refused, 1);
        assert_eq!(summary.stopped.as_deref(), Some(reason.as_str()));
        let unlimited = Meter { limit: Mutex::new(Some(SpendLimit::default())), summary: Mutex::default() };
        unlimited.lock().cost_usd = 1e9;
        assert!(unlimited.admit().is_ok());
    }
}
