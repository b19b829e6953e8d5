//! What a replica behind a load balancer needs around every request: its trace context, a bound on
//! how many run at once and on how long each may take, and one access log line.
//!
//! Read `edge` first, the middleware. A request's W3C `traceparent` header (when it parses, see
//! [`TraceContext::parse`]) gives its trace id; otherwise the request starts a trace. Every log
//! line of the request is inside a `request` span carrying `trace_id`, and the response carries
//! `traceparent` with the trace id and this request's own span id, so a caller joins its trace to
//! our logs. Past [`EdgeLimits::max_in_flight`] handlers running at once a request is shed at once
//! with 503 `overloaded` and `Retry-After: 1` (a load balancer tries another replica; nothing
//! queues here); a handler still running after [`EdgeLimits::request_timeout`] is dropped and the
//! request answered 503 `request_timeout`. Streams count only until their headers are sent, and
//! `/healthz` and `/metrics` are never shed, so a busy replica still says how it is.
//!
//! It does not authenticate (the `authorize` middleware inside it does, and records the principal
//! on the span) nor log bodies or query strings.
//!
//! # Caveats
//!
//! - A write dropped at its timeout may have committed: every write is idempotent on its key, so
//!   the client repeats it with the same key.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::HttpBody as _;
use axum::extract::{Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;
use tracing::Instrument;

use super::ApiError;
use super::types::ErrorCode;

/// The bounds of the `edge` middleware.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EdgeLimits {
    /// The longest a handler may run before its request is answered 503 `request_timeout`.
    pub request_timeout: Duration,
    /// Handlers running at once; one more is answered 503 `overloaded`.
    pub max_in_flight: usize,
}

impl Default for EdgeLimits {
    fn default() -> Self {
        EdgeLimits { request_timeout: Duration::from_secs(30), max_in_flight: 512 }
    }
}

/// The middleware's state: its limits and the permits of the handlers in flight.
#[derive(Clone, Debug)]
pub(crate) struct Edge {
    limits: EdgeLimits,
    permits: Arc<Semaphore>,
}

impl Edge {
    pub(crate) fn new(limits: EdgeLimits) -> Self {
        Edge { limits, permits: Arc::new(Semaphore::new(limits.max_in_flight.max(1))) }
    }
}

/// A request's W3C trace context (`traceparent`: `00-<trace id>-<parent id>-<flags>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lowercase hex digits, not all zero.
    pub trace_id: String,
    /// The caller's span (16 lowercase hex digits), when the request came with one.
    pub parent_id: Option<String>,
    /// The trace flags (2 hex digits; `01`: sampled).
    pub flags: String,
}

impl TraceContext {
    /// The context of a `traceparent` header, as the W3C Trace Context spec reads it: version 2
    /// hex digits (not `ff`; a future version's extra fields are ignored), trace id 32 and parent
    /// id 16 lowercase hex digits, neither all zeros, flags 2 hex digits. `None` for anything else.
    pub fn parse(header: &str) -> Option<TraceContext> {
        let hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let mut parts = header.trim().split('-');
        let (version, trace_id, parent_id, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let extra = parts.next().is_some();
        let known = version == "00";
        if !hex(version, 2) || version == "ff" || (known && extra) {
            return None;
        }
        if !hex(trace_id, 32) || !hex(parent_id, 16) || !hex(flags, 2) {
            return None;
        }
        if trace_id.bytes().all(|b| b == b'0') || parent_id.bytes().all(|b| b == b'0') {
            return None;
        }
        Some(TraceContext {
            trace_id: trace_id.into(),
            parent_id: Some(parent_id.into()),
            flags: flags.into(),
        })
    }

    /// A new trace, sampled.
    fn start() -> TraceContext {
        TraceContext { trace_id: random_hex::<16>(), parent_id: None, flags: "01".into() }
    }

    /// The `traceparent` of this request's own span `span_id` in the trace.
    fn child(&self, span_id: &str) -> String {
        format!("00-{}-{span_id}-{}", self.trace_id, self.flags)
    }
}

/// `N` random bytes as lowercase hex, never all zeros.
fn random_hex<const N: usize>() -> String {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the OS random number generator failed");
    bytes[N - 1] |= 1;
    hex::encode(bytes)
}

/// The middleware: trace context, shedding, timeout and the access log (see the module).
pub(crate) async fn edge(State(edge): State<Edge>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let trace = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(TraceContext::parse)
        .unwrap_or_else(TraceContext::start);
    let span_id = random_hex::<8>();
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let span = tracing::info_span!("request", trace_id = %trace.trace_id, span_id = %span_id,
        principal = tracing::field::Empty);
    let exempt = matches!(path.as_str(), "/healthz" | "/metrics");
    let permit = if exempt { None } else { edge.permits.clone().try_acquire_owned().ok() };
    let mut response = if !exempt && permit.is_none() {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::Overloaded,
                format!(
                    "this server runs {} requests at once already; retry, here or on another replica",
                    edge.limits.max_in_flight
                ),
            )
        }
        .into_response()
    } else {
        match tokio::time::timeout(edge.limits.request_timeout, next.run(request).instrument(span.clone())).await {
            Ok(response) => response,
            Err(_) => ApiError {
                retry_after: Some(1),
                ..ApiError::new(
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::RequestTimeout,
                    format!(
                        "the request took longer than {} s and was stopped; a write may have landed: repeat it \
                         with the same idempotency key",
                        edge.limits.request_timeout.as_secs_f64()
                    ),
                )
            }
            .into_response(),
        }
    };
    drop(permit);
    if let Ok(value) = HeaderValue::from_str(&trace.child(&span_id)) {
        response.headers_mut().insert("traceparent", value);
    }
    let status = response.status().as_u16();
    // A stream's length is not known: `-`.
    let bytes = response.body().size_hint().exact().map_or_else(|| "-".to_owned(), |n| n.to_string());
    let parent = trace.parent_id.as_deref().unwrap_or("-");
    let ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
    span.in_scope(|| {
        tracing::info!(target: "tollgate_api::access", %method, %path, status, ms, bytes = %bytes,
            parent_id = %parent, "request");
    });
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const PARENT: &str = "00f067aa0ba902b7";

    #[test]
    fn a_traceparent_is_read_as_the_w3c_spec_says_and_anything_else_starts_a_trace() {
        let good = TraceContext::parse(&format!("00-{TRACE}-{PARENT}-01")).expect("the spec's example");
        assert_eq!(
            (good.trace_id.as_str(), good.parent_id.as_deref(), good.flags.as_str()),
            (TRACE, Some(PARENT), "01")
        );
        assert_eq!(good.child("b7ad6b7169203331"), format!("00-{TRACE}-b7ad6b7169203331-01"));
        let future = TraceContext::parse(&format!("cc-{TRACE}-{PARENT}-01-what-the-future-adds"));
        assert_eq!(future.map(|t| t.trace_id), Some(TRACE.to_owned()), "a later version's extra fields");
        for bad in [
            String::new(),
            format!("ff-{TRACE}-{PARENT}-01"),
            format!("00-{TRACE}-{PARENT}-01-extra"),
            format!("00-{}-{PARENT}-01", "0".repeat(32)),
            format!("00-{TRACE}-{}-01", "0".repeat(16)),
            format!("00-{}-{PARENT}-01", TRACE.to_uppercase()),
            format!("00-{TRACE}-{PARENT}"),
            format!("00-{}-{PARENT}-01", &TRACE[1..]),
            format!("00-{TRACE}-{PARENT}-0g"),
            format!("0-{TRACE}-{PARENT}-01"),
        ] {
            assert_eq!(TraceContext::parse(&bad), None, "{bad:?}");
        }
        let started = TraceContext::start();
        assert!(started.parent_id.is_none() && started.trace_id.len() == 32, "{started:?}");
        assert!(TraceContext::parse(&started.child(&random_hex::<8>())).is_some(), "what we send parses");
        assert_ne!(TraceContext::start().trace_id, started.trace_id);
    }
}
