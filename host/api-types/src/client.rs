//! A typed client of the HTTP API (see its OpenAPI document, `/openapi.json`): one method per route, its bodies the
//! API's own types ([`crate::types`]), the API's JSON errors as [`CallError`]s, and the live
//! event stream parsed from Server-Sent Events.
//!
//! It owns the wire: URLs, the bearer token, status codes, bodies and the SSE framing
//! ([`SseParser`], a line-based parser over the response's bytes). It does not own what a command
//! prints; `commands::session` and `commands::approvals` do. Read [`ApiClient`] first.
//!
//! ```no_run
//! # async fn example() -> Result<(), tollgate_api_types::client::CallError> {
//! let client = tollgate_api_types::client::ApiClient::new("http://127.0.0.1:8080", None)?;
//! let created = client.create_session(None, Some("say hello")).await?;
//! let snapshot = client.snapshot(&created.session_id).await?;
//! println!("{}", snapshot.status);
//! # Ok(())
//! # }
//! ```
//!
//! `https://` URLs are verified against the system's roots, or only against the CA certificates
//! of a PEM file given to [`ApiClient::with_ca`] (`--ca-cert`); a server the client does not
//! trust is [`CallError::Tls`].
//!
//! # Caveats
//! - [`EventStream`] ends when the server ends the response or the connection drops; resuming
//!   (with `Last-Event-ID`) is the caller's choice: call [`ApiClient::events`] again with
//!   [`EventStream::last_seq`].

use std::collections::VecDeque;
use std::path::Path;
use std::pin::Pin;

use futures_util::{Stream, StreamExt};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;

use crate::types::{
    AuditPage, AuditQuery, CreateSession, Created, Decide, DecisionReceipt, ErrorBody, EventsQuery,
    ImageBlock, InterruptList, InterruptsQuery, ListSessionsQuery, MessageReceipt, PendingInterrupt,
    SendMessage, SessionPage, Snapshot, StreamError, StreamEvent, UpgradeAll, UpgradeSession, Upgraded,
    UpgradedAll,
};

/// A call to the API that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The base URL is not an `http://` or `https://` URL.
    #[error("the API URL `{url}` is not valid: {reason}")]
    BadUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The API answered 401: the token is missing or wrong.
    #[error(
        "the API at {url} refused the request (401): the token is missing or wrong; pass --token-file or set TOLLGATE_TOKEN"
    )]
    Unauthorized {
        /// The URL called.
        url: String,
    },
    /// The API answered with an error: its JSON error's message (and field).
    #[error("{message}{} ({status} {code})", field.as_ref().map(|f| format!(" [field `{f}`]")).unwrap_or_default())]
    Api {
        /// The HTTP status.
        status: u16,
        /// The error code, e.g. `session_not_found`.
        code: String,
        /// What the API said.
        message: String,
        /// The field of the request that was wrong, when one was.
        field: Option<String>,
    },
    /// The CA certificate file cannot be used.
    #[error(transparent)]
    CaCert(#[from] crate::tls::TlsError),
    /// The TLS handshake failed: most often the server's certificate is not signed by a CA this
    /// client trusts, or is for another name.
    #[error("the TLS connection to {url} failed: {reason}; {}", tls_hint(reason))]
    Tls {
        /// The URL called.
        url: String,
        /// What rustls said, e.g. `invalid peer certificate: UnknownIssuer`.
        reason: String,
    },
    /// The API could not be reached, or the connection broke.
    #[error("calling {url} failed: {source}")]
    Transport {
        /// The URL called.
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The server ended the event stream with an `error` event (e.g. the store failed).
    #[error("the event stream of {url} failed: {message}")]
    Stream {
        /// The URL streamed.
        url: String,
        /// What the server said.
        message: String,
    },
    /// The API answered with a body of an unexpected shape.
    #[error("the answer of {url} is not the expected JSON: {reason}")]
    Decode {
        /// The URL called.
        url: String,
        /// What did not parse.
        reason: String,
    },
}

/// A client of one API server.
#[derive(Clone, Debug)]
pub struct ApiClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl ApiClient {
    /// A client of the API at `base` (e.g. `http://127.0.0.1:8080`), sending `token` as a bearer
    /// token when given; an `https://` server must have a certificate the system trusts.
    ///
    /// # Errors
    /// `base` is not an `http://` or `https://` URL.
    pub fn new(base: &str, token: Option<&str>) -> Result<Self, CallError> {
        Self::with_ca(base, token, None)
    }

    /// The same, trusting only the CA certificates in the PEM file `ca_cert` (when given) for an
    /// `https://` server.
    ///
    /// # Errors
    /// `base` is not an `http://` or `https://` URL, or `ca_cert` cannot be read or holds no
    /// certificate.
    pub fn with_ca(base: &str, token: Option<&str>, ca_cert: Option<&Path>) -> Result<Self, CallError> {
        let trimmed = base.trim().trim_end_matches('/');
        let bad = |reason: &str| CallError::BadUrl { url: base.to_owned(), reason: reason.to_owned() };
        let rest = trimmed
            .strip_prefix("http://")
            .or_else(|| trimmed.strip_prefix("https://"))
            .ok_or_else(|| bad("it must start with http:// or https://"))?;
        if rest.is_empty() {
            return Err(bad("it names no host"));
        }
        reqwest::Url::parse(trimmed).map_err(|e| bad(&e.to_string()))?;
        crate::tls::install_crypto_provider();
        let mut builder = reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(10));
        if let Some(path) = ca_cert {
            let roots = crate::tls::read_certificates("CA certificate", path)?;
            let roots = roots
                .iter()
                .map(|der| reqwest::Certificate::from_der(der))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| crate::tls::TlsError::BadPem {
                    what: "CA certificate",
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?;
            builder = builder.tls_certs_only(roots);
        }
        let http =
            builder.build().map_err(|source| CallError::Transport { url: trimmed.to_owned(), source })?;
        Ok(ApiClient {
            base: trimmed.to_owned(),
            token: token.map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned),
            http,
        })
    }

    /// The base URL, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/sessions`: creates the session `id` (a fresh id when `None`) unless it exists,
    /// and sends `message` when given.
    ///
    /// # Errors
    /// See [`CallError`].
    pub async fn create_session(
        &self,
        id: Option<&str>,
        message: Option<&str>,
    ) -> Result<Created, CallError> {
        self.create_session_with_images(id, message, Vec::new()).await
    }

    /// [`ApiClient::create_session`] whose first message carries `images`.
    ///
    /// # Errors
    /// See [`CallError`].
    pub async fn create_session_with_images(
        &self,
        id: Option<&str>,
        message: Option<&str>,
        images: Vec<ImageBlock>,
    ) -> Result<Created, CallError> {
        let body = CreateSession {
            session_id: id.map(str::to_owned),
            message: message.map(str::to_owned),
            images,
            ..CreateSession::default()
        };
        self.create(&body).await
    }

    /// `POST /v1/sessions` with every field of `body` (the agent, a first message, …).
    ///
    /// # Errors
    /// See [`CallError`].
    pub async fn create(&self, body: &CreateSession) -> Result<Created, CallError> {
        self.call(Method::POST, "/v1/sessions", |r| r.json(body)).await
    }

    /// `POST /v1/sessions/{id}/messages`: sends `text`, under the idempotency `key` when given.
    ///
    /// # Errors
    /// See [`CallError`].
    pub async fn send_message(
        &self,
        id: &str,
        text: &str,
        key: Option<&str>,
    ) -> Result<MessageReceipt, CallError> {
        self.send_message_with_images(id, text, Vec::new(), key).await
    }

    /// [`ApiClient::send_message`] of a message that carries `images`.
    ///
    /// # Errors
    /// See [`CallError`].
    pub async fn send_message_with_images(
        &self,
        id: &str,
        text: &str,
        images: Vec<ImageBlock>,
        key: Option<&str>,
    ) -> Result<MessageReceipt, CallError> {
        let body = SendMessage { text: text.to_owned(), images, client_key: key.map(str::to_owned) };
        self.call(Method::POST, &format!("/v1/sessions/{}/messages", segment(id)), |r| r.json(&body)).await
    }

    /// `POST /v1/sessions/{id}/cancel`: asks to cancel the turn in progress.
    ///
    /// # Errors
    /// See [`CallError`]; an idle session is [`CallError::Api`] with status 409 `no_turn_running`,
    /// a client's cancel of a session it did not start 403 `not_own_session`.
    pub async fn cancel(&self, id: &str) -> Result<crate::types::CancelReceipt, CallError> {
        let path = format!("/v1/sessions/{}/cancel", segment(id));
        self.call(Method::POST, &path, |r| r.json(&crate::types::CancelTurn::default())).await
    }

    /// `GET /v1/sessions/{id}`: the snapshot.
    ///
    /// # Errors
    /// See [`CallError`]; an unknown session is [`CallError::Api`] with status 404.
    pub async fn snapshot(&self, id: &str) -> Result<Snapshot, CallError> {
        self.call(Method::GET, &format!("/v1/sessions/{}", segment(id)), |r| r).await
    }

    /// `GET /v1/sessions`: a page of sessions, by id, after `after`, with `status` only when given.
    ///
    /// # Errors
    /// See [`CallError`].
    pub async fn list_sessions(
        &self,
        status: Option<&str>,
        after: Option<&str>,
        limit: Option<i64>,
    ) -> Result<SessionPage, CallError> {
        let query = ListSessionsQuery {
            status: status.map(str::to_owned),
            after: after.map(str::to_owned),
            limit,
            agent: None,
        };
        self.call(Method::GET, "/v1/sessions", |r| r.query(&query)).await
    }

    /// `GET /v1/audit`: a page of the audit trail of decisions, filtered as `query` says.
    ///
    /// # Errors
    /// A bad filter (400 naming it), the API's other errors, or the connection failed.
    pub async fn audit(&self, query: &AuditQuery) -> Result<AuditPage, CallError> {
        self.call(Method::GET, "/v1/audit", |r| r.query(query)).await
    }

    /// `POST /v1/sessions/{id}/fork`: a new session whose history is this one's up to the end of
    /// turn `fork.at_turn`.
    ///
    /// # Errors
    /// See [`CallError`]; a turn that does not exist is [`CallError::Api`] with status 404
    /// `turn_not_found`, one still running, waiting for approval or with open tasks 409
    /// `fork_refused`.
    pub async fn fork(
        &self,
        id: &str,
        fork: &crate::types::ForkSession,
    ) -> Result<crate::types::Forked, CallError> {
        let path = format!("/v1/sessions/{}/fork", segment(id));
        self.call(Method::POST, &path, |r| r.json(fork)).await
    }

    /// `POST /v1/sessions/{id}/upgrade`: pins a waiting or idle session to the agent digest `to`.
    ///
    /// # Errors
    /// See [`CallError`]; a running session is [`CallError::Api`] with status 409.
    pub async fn upgrade_session(&self, id: &str, to: &str) -> Result<Upgraded, CallError> {
        let body = UpgradeSession { to: to.to_owned() };
        let path = format!("/v1/sessions/{}/upgrade", segment(id));
        self.call(Method::POST, &path, |r| r.json(&body)).await
    }

    /// `POST /v1/agent-upgrades`: pins every waiting or idle session (under `from` only, when
    /// given) to `to`.
    ///
    /// # Errors
    /// See [`CallError`].
    pub async fn upgrade_all(&self, to: &str, from: Option<&str>) -> Result<UpgradedAll, CallError> {
        let body = UpgradeAll { to: to.to_owned(), from: from.map(str::to_owned) };
        self.call(Method::POST, "/v1/agent-upgrades", |r| r.json(&body)).await
    }

    /// `GET /v1/interrupts?status=pending`: every approval waiting, oldest first, read page by
    /// page.
    ///
    /// # Errors
    /// See [`CallError`].
    pub async fn pending_interrupts(&self) -> Result<Vec<PendingInterrupt>, CallError> {
        let mut all = Vec::new();
        let mut after = None;
        loop {
            let query =
                InterruptsQuery { status: Some("pending".to_owned()), after, limit: Some(1000), agent: None };
            let page: InterruptList = self.call(Method::GET, "/v1/interrupts", |r| r.query(&query)).await?;
            all.extend(page.interrupts);
            match page.next_after {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// `POST /v1/sessions/{id}/interrupts/{interrupt_id}`: approves or rejects, with a message for
    /// the model when given.
    ///
    /// # Errors
    /// See [`CallError`]; a different decision made before is [`CallError::Api`] with status 409.
    pub async fn decide(
        &self,
        id: &str,
        interrupt_id: &str,
        approved: bool,
        message: Option<&str>,
    ) -> Result<DecisionReceipt, CallError> {
        self.decide_with_input(id, interrupt_id, approved, message, None).await
    }

    /// [`ApiClient::decide`], approving with an edited input (`updated_input`) when given.
    ///
    /// # Errors
    /// As [`ApiClient::decide`]; an edit that does not fit the tool's schema is status 400.
    pub async fn decide_with_input(
        &self,
        id: &str,
        interrupt_id: &str,
        approved: bool,
        message: Option<&str>,
        updated_input: Option<&serde_json::Value>,
    ) -> Result<DecisionReceipt, CallError> {
        let scope = crate::types::DecideScope::Call;
        self.decide_in_scope(id, interrupt_id, approved, message, updated_input, scope).await
    }

    /// [`ApiClient::decide_with_input`] with the approval's `scope` (`Session`: allow the tool
    /// for the rest of the session).
    ///
    /// # Errors
    /// As [`ApiClient::decide`]; `Session` with a rejection is status 400.
    pub async fn decide_in_scope(
        &self,
        id: &str,
        interrupt_id: &str,
        approved: bool,
        message: Option<&str>,
        updated_input: Option<&serde_json::Value>,
        scope: crate::types::DecideScope,
    ) -> Result<DecisionReceipt, CallError> {
        let body = Decide {
            approved,
            message: message.map(str::to_owned),
            updated_input: updated_input.cloned(),
            scope,
            client_key: None,
        };
        let path = format!("/v1/sessions/{}/interrupts/{}", segment(id), segment(interrupt_id));
        self.call(Method::POST, &path, |r| r.json(&body)).await
    }

    /// `DELETE /v1/sessions/{id}/grants/{tool}`: revokes the session's grant for `tool`.
    ///
    /// # Errors
    /// See [`CallError`]; no grant in force is status 404 `grant_not_found`.
    pub async fn revoke_grant(&self, id: &str, tool: &str) -> Result<crate::types::RevokeReceipt, CallError> {
        let path = format!("/v1/sessions/{}/grants/{}", segment(id), segment(tool));
        self.call(Method::DELETE, &path, |r| r).await
    }

    /// `GET /v1/sessions/{id}/events`: the events after seq `after`, live when `follow`.
    ///
    /// # Errors
    /// See [`CallError`]; errors while streaming come from [`EventStream::next`].
    pub async fn events(&self, id: &str, after: i64, follow: bool) -> Result<EventStream, CallError> {
        self.events_with(id, after, follow, false).await
    }

    /// [`ApiClient::events`] with the running segment's text as it streams (`live=true`): also
    /// `text_delta` events that are not stored (their `seq` is the last stored event's; resume
    /// after it as usual), with `offset`s that overlap the stored text.
    pub async fn live_events(&self, id: &str, after: i64) -> Result<EventStream, CallError> {
        self.events_with(id, after, true, true).await
    }

    async fn events_with(
        &self,
        id: &str,
        after: i64,
        follow: bool,
        live: bool,
    ) -> Result<EventStream, CallError> {
        let path = format!("/v1/sessions/{}/events", segment(id));
        let url = format!("{}{path}", self.base);
        let query =
            EventsQuery { after: None, follow: (!follow).then_some(false), live: live.then_some(true) };
        let mut request = self
            .request(Method::GET, &path)
            .query(&query)
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if after > 0 {
            request = request.header("Last-Event-ID", after.to_string());
        }
        let response = self.send(request, &url).await?;
        Ok(EventStream {
            url,
            body: Box::pin(response.bytes_stream()),
            parser: SseParser::default(),
            ready: VecDeque::new(),
            last_seq: after,
        })
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let request = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn send(&self, request: RequestBuilder, url: &str) -> Result<Response, CallError> {
        let response = request.send().await.map_err(|source| transport(url, source))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status == StatusCode::UNAUTHORIZED {
            return Err(CallError::Unauthorized { url: url.to_owned() });
        }
        let text = response.text().await.unwrap_or_default();
        Err(api_error(status, &text))
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        build: impl FnOnce(RequestBuilder) -> RequestBuilder,
    ) -> Result<T, CallError> {
        let url = format!("{}{path}", self.base);
        let response = self.send(build(self.request(method, path)), &url).await?;
        let bytes =
            response.bytes().await.map_err(|source| CallError::Transport { url: url.clone(), source })?;
        serde_json::from_slice(&bytes).map_err(|e| CallError::Decode { url, reason: e.to_string() })
    }
}

/// A failed request: [`CallError::Tls`] when the TLS handshake failed, else
/// [`CallError::Transport`].
fn transport(url: &str, source: reqwest::Error) -> CallError {
    match tls_failure(&source) {
        Some(reason) => CallError::Tls { url: url.to_owned(), reason },
        None => CallError::Transport { url: url.to_owned(), source },
    }
}

/// What to do about a refused handshake.
fn tls_hint(reason: &str) -> &'static str {
    if reason.contains("CaUsedAsEndEntity") {
        "the server's certificate is a CA certificate (basicConstraints CA:TRUE), which is refused as a server's: serve a certificate with CA:FALSE (e.g. `openssl req -x509 … -addext basicConstraints=critical,CA:FALSE`) or one a CA signed"
    } else {
        "if the server's certificate is signed by a private CA (or self-signed), pass that certificate with --ca-cert PEM (or TOLLGATE_CA_CERT)"
    }
}

/// What rustls said, when an error was caused by a rustls error (reqwest wraps it in an
/// `io::Error`, whose `source` skips it: look inside).
fn tls_failure(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(rustls) = error.downcast_ref::<rustls::Error>() {
            return Some(rustls.to_string());
        }
        if let Some(inner) = error.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref())
            && let Some(reason) = tls_failure(inner)
        {
            return Some(reason);
        }
        next = error.source();
    }
    None
}

/// The API's JSON error ([`ErrorBody`]), or the body as the message (code `http_error`).
fn api_error(status: StatusCode, body: &str) -> CallError {
    match serde_json::from_str::<ErrorBody>(body) {
        Ok(ErrorBody { error }) => CallError::Api {
            status: status.as_u16(),
            code: error.code.as_str().to_owned(),
            message: error.message,
            field: error.field,
        },
        Err(_) => {
            let body = body.trim();
            CallError::Api {
                status: status.as_u16(),
                code: "http_error".to_owned(),
                message: if body.is_empty() { format!("the API answered {status}") } else { body.to_owned() },
                field: None,
            }
        }
    }
}

/// A path segment with the characters a URL path cannot carry percent-encoded.
fn segment(text: &str) -> String {
    encode(text, b"-._~:@!$&'()*+,;=")
}

/// `text` with every byte but ASCII letters, digits and `keep` percent-encoded.
fn encode(text: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || keep.contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// A session's live events. [`EventStream::next`] yields them in seq order; `None` when the
/// server ended the response.
pub struct EventStream {
    url: String,
    body: ByteStream,
    parser: SseParser,
    ready: VecDeque<SseEvent>,
    last_seq: i64,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("url", &self.url)
            .field("last_seq", &self.last_seq)
            .finish_non_exhaustive()
    }
}

impl EventStream {
    /// The seq of the last event yielded (or the `after` it started from): resume after it.
    pub fn last_seq(&self) -> i64 {
        self.last_seq
    }

    /// The next event; `Ok(None)` when the response ended.
    ///
    /// # Errors
    /// The connection broke ([`CallError::Transport`]), the server sent an `error` event
    /// ([`CallError::Stream`]), or an event's data is not an event
    /// ([`CallError::Decode`]).
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, CallError> {
        loop {
            if let Some(sse) = self.ready.pop_front() {
                if sse.event == "error" {
                    let message =
                        serde_json::from_str::<StreamError>(&sse.data).map_or(sse.data, |e| e.error);
                    return Err(CallError::Stream { url: self.url.clone(), message });
                }
                let event: StreamEvent = serde_json::from_str(&sse.data).map_err(|e| CallError::Decode {
                    url: self.url.clone(),
                    reason: format!("event {:?}: {e}", sse.id),
                })?;
                self.last_seq = event.seq;
                return Ok(Some(event));
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.ready.extend(self.parser.push(&chunk)),
                Some(Err(source)) => return Err(CallError::Transport { url: self.url.clone(), source }),
                None => {
                    self.ready.extend(self.parser.finish());
                    if self.ready.is_empty() {
                        return Ok(None);
                    }
                }
            }
        }
    }
}

/// One Server-Sent Event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `id:` field, when the event had one.
    pub id: Option<String>,
    /// The `event:` field; `message` when absent.
    pub event: String,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// A line-based Server-Sent Events parser: feed it the response's bytes in any chunks and it hands
/// back each event once its blank line arrives.
///
/// It follows the WHATWG rules: lines end with `\n`, `\r\n` or `\r`; `:` starts a comment (the
/// server's keep-alives); one space after `field:` is dropped; `data` lines join with `\n`; an
/// event with no data is not dispatched; `retry` and unknown fields are ignored.
#[derive(Debug, Default)]
pub struct SseParser {
    pending: Vec<u8>,
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// Feeds `bytes`; returns the events they completed.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < self.pending.len() {
            match self.pending[i] {
                b'\n' => {
                    let line = self.pending[start..i].to_vec();
                    self.line(&line, &mut out);
                    i += 1;
                    start = i;
                }
                b'\r' => {
                    // A `\r` at the end of what has arrived may be the first half of `\r\n`.
                    if i + 1 == self.pending.len() {
                        break;
                    }
                    let line = self.pending[start..i].to_vec();
                    self.line(&line, &mut out);
                    i += if self.pending[i + 1] == b'\n' { 2 } else { 1 };
                    start = i;
                }
                _ => i += 1,
            }
        }
        self.pending.drain(..start);
        out
    }

    /// The end of the stream: a last line without its end is taken as a line; an event without
    /// its blank line is dropped (as the standard says).
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if !self.pending.is_empty() {
            let mut line = std::mem::take(&mut self.pending);
            if line.last() == Some(&b'\r') {
                line.pop();
                self.line(&line, &mut out);
            }
        }
        out
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            let event = self.event.take();
            if let Some(data) = self.data.take() {
                out.push(SseEvent {
                    id: self.id.clone(),
                    event: event.unwrap_or_else(|| "message".to_owned()),
                    data,
                });
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "event" => self.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: Option<&str>, kind: &str, data: &str) -> SseEvent {
        SseEvent { id: id.map(str::to_owned), event: kind.to_owned(), data: data.to_owned() }
    }

    #[test]
    fn an_event_is_handed_back_when_its_blank_line_arrives() {
        let mut parser = SseParser::default();
        assert_eq!(parser.push(b"id: 3\nevent: text_delta\ndata: {\"seq\":3}\n"), []);
        assert_eq!(parser.push(b"\n"), [event(Some("3"), "text_delta", "{\"seq\":3}")]);
    }

    #[test]
    fn events_split_at_any_byte_parse_the_same_as_whole() {
        let text = b"id: 1\r\nevent: a\r\ndata: one\r\n\r\n: keep-alive\n\nid: 2\rdata: two\rdata: lines\r\r";
        let mut parser = SseParser::default();
        let mut whole = parser.push(text);
        // The last `\r` may be half of a `\r\n` until the stream ends.
        assert_eq!(whole.len(), 1);
        whole.extend(parser.finish());
        assert_eq!(whole, [event(Some("1"), "a", "one"), event(Some("2"), "message", "two\nlines")]);
        for cut in 0..text.len() {
            let mut parser = SseParser::default();
            let mut got = parser.push(&text[..cut]);
            got.extend(parser.push(&text[cut..]));
            got.extend(parser.finish());
            assert_eq!(got, whole, "split at {cut}");
        }
    }

    #[test]
    fn comments_empty_data_and_unknown_fields_dispatch_nothing() {
        let mut parser = SseParser::default();
        assert_eq!(parser.push(b": ping\n\nevent: x\n\nretry: 10\nfoo: bar\n\n"), []);
    }

    #[test]
    fn the_space_after_the_colon_is_dropped_once_and_a_bare_field_is_empty() {
        let mut parser = SseParser::default();
        assert_eq!(parser.push(b"data:  two spaces\ndata\n\n"), [event(None, "message", " two spaces\n")]);
    }

    #[test]
    fn the_last_id_carries_over_to_later_events() {
        let mut parser = SseParser::default();
        let got = parser.push(b"id: 7\ndata: a\n\ndata: b\n\n");
        assert_eq!(got, [event(Some("7"), "message", "a"), event(Some("7"), "message", "b")]);
    }

    #[test]
    fn an_event_cut_off_before_its_blank_line_is_dropped_at_the_end() {
        let mut parser = SseParser::default();
        assert_eq!(parser.push(b"data: half"), []);
        assert_eq!(parser.finish(), []);
    }

    #[test]
    fn an_api_error_body_gives_its_message_field_and_code() {
        let body = r#"{"error":{"code":"invalid_request","message":"invalid JSON body: unknown field `txt`","field":"txt"}}"#;
        let error = api_error(StatusCode::BAD_REQUEST, body);
        assert_eq!(
            error.to_string(),
            "invalid JSON body: unknown field `txt` [field `txt`] (400 invalid_request)"
        );
        let error = api_error(StatusCode::BAD_GATEWAY, "");
        assert!(error.to_string().starts_with("the API answered 502"), "{error}");
    }

    #[test]
    fn a_url_that_is_not_http_or_https_is_refused_by_name() {
        assert_eq!(ApiClient::new("https://example.com/", None).unwrap().base(), "https://example.com");
        let error = ApiClient::new("localhost:8080", None).unwrap_err();
        assert!(error.to_string().contains("`localhost:8080`"), "{error}");
        assert!(error.to_string().contains("http:// or https://"), "{error}");
        let error = ApiClient::new("https://", None).unwrap_err();
        assert!(error.to_string().contains("`https://` is not valid"), "{error}");
        let error =
            ApiClient::with_ca("https://x", None, Some(Path::new("/nonexistent/ca.pem"))).unwrap_err();
        assert!(
            error.to_string().contains("cannot read the CA certificate file /nonexistent/ca.pem"),
            "{error}"
        );
        assert_eq!(ApiClient::new("http://127.0.0.1:8080/", None).unwrap().base(), "http://127.0.0.1:8080");
    }

    #[test]
    fn a_ca_certificate_served_as_the_server_s_gets_its_own_hint() {
        let error = CallError::Tls {
            url: "https://h".into(),
            reason: "invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))".into(),
        };
        assert!(error.to_string().contains("CA:FALSE"), "{error}");
        let error = CallError::Tls {
            url: "https://h".into(),
            reason: "invalid peer certificate: UnknownIssuer".into(),
        };
        assert!(error.to_string().contains("--ca-cert PEM"), "{error}");
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(segment("a b/c"), "a%20b%2Fc");
        assert_eq!(segment("session-1_x.y"), "session-1_x.y");
    }
}
