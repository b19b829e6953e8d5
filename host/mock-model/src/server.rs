//! The HTTP side: the axum app that logs each request, waits at its gates and writes its reply.
//!
//! This module owns routing and HTTP details; the answers come from [`crate::plan`] and their bytes from
//! [`crate::wire`]. Read [`handle`] first.
//!
//! | request | answer |
//! | --- | --- |
//! | `POST /v1/messages[?…]` | the scripted reply: SSE when the body says `"stream": true`, else JSON |
//! | `POST /v1/messages/count_tokens` | `{"input_tokens": n}` |
//! | `HEAD` anything | 200, empty |
//! | anything else outside `/__mock/` | 404 with an Anthropic `not_found_error` body |
//! | `POST /__mock/gates/{gate}/open`, `…/close` | opens or closes a gate, answers its [`GateStatus`] |
//! | `GET /__mock/gates/{gate}` | the gate's [`GateStatus`] |
//! | `GET /__mock/requests` | the request log, a JSON array of [`crate::RecordedRequest`] |
//!
//! The `/__mock/` control routes serve a mock run as its own process (the binary); they are not logged.
//! A request body that is not a JSON object gets 400 with an `invalid_request_error` body.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use serde_json::{Value, json};

use crate::gates::{GateStatus, Gates};
use crate::log::{RecordedRequest, RequestLog, logged_body, logged_headers};
use crate::plan::{Answer, plan_with_scenarios};
use crate::reply::Reply;
use crate::wire::{self, MessageMeta};
use futures_util::StreamExt;

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) log: RequestLog,
    pub(crate) gates: Gates,
    pub(crate) scenarios: std::sync::RwLock<crate::plan::Scenarios>,
    next_nonce: AtomicU64,
}

impl Shared {
    pub(crate) fn new() -> Self {
        // Seeded from the clock so IDs differ between mock runs (a resumed session meets a new mock).
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos() as u64)
            .unwrap_or_default();
        Shared {
            log: RequestLog::new(),
            gates: Gates::new(),
            scenarios: Default::default(),
            next_nonce: AtomicU64::new(seed & 0xffff_ffff_ffff),
        }
    }

    fn nonce(&self) -> u64 {
        self.next_nonce.fetch_add(1, Ordering::Relaxed) & 0xffff_ffff_ffff
    }
}

/// The app: one fallback handler, no body size limit (CLI requests carry the whole conversation).
pub(crate) fn app(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).layer(DefaultBodyLimit::disable()).with_state(shared)
}

/// Routes one request.
async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path();
    if let Some(control) = path.strip_prefix("/__mock/") {
        return control_route(&shared, &method, control);
    }
    let path_and_query = uri.path_and_query().map_or(path, |pq| pq.as_str()).to_owned();
    let (json_body, raw_body) = logged_body(&body);
    let mut record = RecordedRequest {
        seq: 0,
        method: method.to_string(),
        path: path_and_query,
        headers: logged_headers(&headers),
        body: json_body,
        raw_body,
        gates: Vec::new(),
        reply: Reply::NotFound,
    };
    if method == Method::HEAD {
        record.reply = Reply::Empty;
        shared.log.push(record);
        return StatusCode::OK.into_response();
    }
    let body = record.body.clone().filter(Value::is_object);
    match (method == Method::POST, path, body) {
        (true, "/v1/messages", Some(body)) => messages(&shared, record, body).await,
        (true, "/v1/messages/count_tokens", Some(body)) => {
            let input_tokens = wire::estimate_input_tokens(&body);
            record.reply = Reply::TokenCount { input_tokens };
            shared.log.push(record);
            json_response(StatusCode::OK, &json!({"input_tokens": input_tokens}))
        }
        (true, "/v1/messages" | "/v1/messages/count_tokens", None) => {
            let message = "mock: the body is not a JSON object".to_owned();
            record.reply = Reply::BadRequest { message: message.clone() };
            shared.log.push(record);
            let mut body = wire::error_body(400);
            body["error"]["message"] = json!(message);
            json_response(StatusCode::BAD_REQUEST, &body)
        }
        _ => {
            shared.log.push(record);
            let mut body = wire::error_body(404);
            body["error"]["message"] = json!("mock: no such endpoint");
            json_response(StatusCode::NOT_FOUND, &body)
        }
    }
}

/// `POST /v1/messages`: plan, log, wait at the gates, reply.
async fn messages(shared: &Arc<Shared>, mut record: RecordedRequest, body: Value) -> Response {
    let nonce = shared.nonce();
    let plan = plan_with_scenarios(&body, nonce, &shared.scenarios.read().expect("scenarios lock"));
    record.gates = plan.gates.clone();
    record.reply = plan.reply.clone().into();
    let streaming = record.is_streaming();
    shared.log.push(record);
    for gate in &plan.gates {
        if shared.gates.pass(gate).await.is_err() {
            let mut body = wire::error_body(503);
            body["error"]["message"] = json!("mock: shutting down");
            return json_response(StatusCode::SERVICE_UNAVAILABLE, &body);
        }
    }
    let message = match plan.reply {
        Answer::Message(message) => message,
        Answer::Error { status } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return json_response(code, &wire::error_body(status));
        }
    };
    let meta = MessageMeta {
        id: format!("msg_mock_{nonce:016x}"),
        model: body.get("model").and_then(Value::as_str).unwrap_or("claude-mock").to_owned(),
        input_tokens: plan.input_tokens.unwrap_or_else(|| wire::estimate_input_tokens(&body)),
    };
    if !streaming {
        return json_response(StatusCode::OK, &wire::json_message(&message, &meta));
    }
    let paced = wire::paced_events(&message, &meta, &plan.pace);
    let mut response = if plan.pace == crate::plan::Pace::default() {
        let events = paced.into_iter().filter_map(|step| match step {
            wire::Paced::Send { bytes, .. } => Some(Ok::<Bytes, Infallible>(bytes)),
            wire::Paced::Hold(_) => None,
        });
        Body::from_stream(futures_util::stream::iter(events)).into_response()
    } else {
        // Paced: each event after its wait, parked at a hold's gate (given up at shutdown).
        let shared = shared.clone();
        let steps = futures_util::stream::iter(paced).filter_map(move |step| {
            let shared = shared.clone();
            async move {
                match step {
                    wire::Paced::Send { wait, bytes } => {
                        if !wait.is_zero() {
                            tokio::time::sleep(wait).await;
                        }
                        Some(Ok::<Bytes, std::io::Error>(bytes))
                    }
                    wire::Paced::Hold(gate) => match shared.gates.pass(&gate).await {
                        Ok(()) => None,
                        Err(_) => Some(Err(std::io::Error::other("mock: shutting down"))),
                    },
                }
            }
        });
        Body::from_stream(steps).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    insert_request_id(headers);
    response
}

fn control_route(shared: &Shared, method: &Method, route: &str) -> Response {
    let parts: Vec<&str> = route.split('/').collect();
    match (method.clone(), parts.as_slice()) {
        (Method::GET, ["requests"]) => json_response(StatusCode::OK, &json!(shared.log.all())),
        (Method::GET, ["gates", gate]) => gate_response(shared.gates.status(gate)),
        (Method::POST, ["gates", gate, action @ ("open" | "close")]) => {
            shared.gates.set_open(gate, *action == "open");
            gate_response(shared.gates.status(gate))
        }
        _ => {
            let mut body = wire::error_body(404);
            body["error"]["message"] = json!("mock: no such control route");
            json_response(StatusCode::NOT_FOUND, &body)
        }
    }
}

fn gate_response(status: GateStatus) -> Response {
    json_response(StatusCode::OK, &json!(status))
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    insert_request_id(headers);
    response
}

fn insert_request_id(headers: &mut HeaderMap) {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = format!("req_mock_{:012x}", NEXT.fetch_add(1, Ordering::Relaxed));
    if let Ok(value) = HeaderValue::from_str(&id) {
        headers.insert("request-id", value);
    }
}
