//! The binary's telemetry: logs on stderr and, when an OTLP endpoint is set, OpenTelemetry spans
//! of the Worker's segments and tool calls.
//!
//! Read [`init`] first (what is exported, and when), then [`turn_trace`] and [`TurnSpan`] (one
//! `invoke_agent` span per turn, the parent of all the turn's spans), [`SegmentTrace`] (one `chat`
//! span per `RunModel` attempt, with an `execute_tool` child per inline tool call) and
//! [`ToolTrace`] (one `execute_tool` span per deferred tool call attempt). The attribute lists are built by pure
//! functions ([`model_call_metadata`], [`segment_span`], [`tool_span`]) that the tests check without
//! an exporter. This module does not own the facts it reads: [`SegmentStats`] collects them from
//! the CLI's frames.
//!
//! Span names and attributes follow the OpenTelemetry GenAI semantic conventions (`chat
//! {gen_ai.request.model}`, `execute_tool {gen_ai.tool.name}`, `gen_ai.*`), as the TypeScript
//! seed's "Tracing" section describes, plus `tollgate.*` attributes that place a span in its
//! session, turn and attempt.
//!
//! | span | kind | set when |
//! | --- | --- | --- |
//! | `invoke_agent {agent}` | INTERNAL | the turn ended (completed, failed or cancelled), by the Worker that committed its end, with the turn's stored start and ids ([`TurnTrace`]) |
//! | `chat {model}` | CLIENT, with usage | the segment made exactly one model call |
//! | `chat {model}` | INTERNAL, no usage | it made none or several (an inline tool call, subagents) |
//! | `execute_tool {tool}` | INTERNAL | an inline call (child of its segment; a custom tool or a CLI tool such as `Read`, `Bash` or an external MCP server's, `tollgate.tool.kind` `custom` or `cli`) or a deferred call attempt |
//!
//! A `chat` span also carries what the Worker's model proxy measured of every request of the
//! segment ([`proxy_attributes`]): `tollgate.model.requests`, `.request_errors`,
//! `.requests_refused`, `tollgate.usage.input_tokens` (cache reads and writes included),
//! `.output_tokens`, `.cost_usd`, and `tollgate.model.errors` (the upstream's error texts).
//!
//! # Caveats
//!
//! - Spans are exported by a batch processor on its own thread: the [`Telemetry`] guard must live
//!   until the process ends, and dropping it flushes and shuts the exporter down (blocking, so
//!   drop it outside the async runtime).
//! - Without `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` the global
//!   tracer is a no-op and building spans costs next to nothing.
//! - A turn spans segments, Workers and days, so its span cannot be held open: its ids and start
//!   are fixed when it starts ([`turn_trace`], from its first step's row, so every attempt on any
//!   Worker derives the same), stored with the turn once a segment defers a call, and the
//!   `invoke_agent` span is emitted when the turn ends, with that start. Its children are
//!   exported as they end, before it. A turn begun by a build without traces has none: its spans
//!   are roots, as before.
//! - A segment's span is built when the segment ends (its kind and name depend on what the CLI
//!   reported), with the start time it recorded; a Worker killed mid-segment exports nothing for it.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
};
use opentelemetry::{Array, Context, InstrumentationScope, KeyValue, StringValue, Value, global};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider};
use sha2::{Digest, Sha256};
use tollgate_claude::{SegmentEvent, SegmentStats};
use tollgate_engine::catalog::ToolKind;
use tollgate_engine::session::TurnTrace;
use tollgate_engine::session::tools::ToolRun;
use tollgate_engine::session::turn::SegmentResult;
use tracing::warn;

use crate::proxy::ProxySummary;

/// The instrumentation scope and the default `service.name`.
const SERVICE: &str = "tollgate";

/// Keeps the exporter alive; dropping it flushes the spans not yet sent and shuts it down.
#[must_use = "dropping the guard stops the export"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(err) = provider.shutdown()
        {
            eprintln!("tollgate: flushing the OpenTelemetry spans failed: {err}");
        }
    }
}

/// Sets up logging ([`tollgate_process::setup::init_logging`]) and, when `OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not `true`), an OTLP
/// span exporter over HTTP as the global tracer provider.
///
/// Defaults: `service.name` `tollgate` unless `OTEL_SERVICE_NAME` (or `OTEL_RESOURCE_ATTRIBUTES`)
/// names one; protocol `http/protobuf` unless `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`; the batch
/// processor's `OTEL_BSP_*` settings (5 s delay) and the exporter's `OTEL_EXPORTER_OTLP_*` headers
/// and timeout apply as the OpenTelemetry SDK reads them. An exporter that cannot be built is a
/// warning, not an error.
pub fn init(verbose: u8) -> Telemetry {
    tollgate_process::setup::init_logging(verbose);
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    if disabled || !(set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
        return Telemetry { provider: None };
    }
    let exporter = match opentelemetry_otlp::SpanExporter::builder().with_http().build() {
        Ok(exporter) => exporter,
        Err(err) => {
            warn!(error = %err, "the OTLP span exporter could not be built; no spans are exported");
            return Telemetry { provider: None };
        }
    };
    let resource = if set("OTEL_SERVICE_NAME") {
        Resource::builder()
    } else {
        Resource::builder().with_service_name(SERVICE)
    }
    .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
    .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .with_id_generator(TurnIds::default())
        .build();
    global::set_tracer_provider(provider.clone());
    EXPORTING.store(true, Ordering::Relaxed);
    Telemetry { provider: Some(provider) }
}

/// Set once [`init`] installed an exporter.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: a Worker reads a turn's stored trace only then.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

thread_local! {
    /// The ids the next span built on this thread gets instead of random ones ([`TurnIds`]).
    static NEXT_IDS: Cell<(Option<TraceId>, Option<SpanId>)> = const { Cell::new((None, None)) };
}

/// Random ids, except for the span [`TurnSpan::record`] builds: the SDK gives a span the ids its
/// generator makes, and a turn's `invoke_agent` span must have the ids fixed when the turn started.
#[derive(Debug, Default)]
struct TurnIds(RandomIdGenerator);

impl IdGenerator for TurnIds {
    fn new_trace_id(&self) -> TraceId {
        let (trace, span) = NEXT_IDS.get();
        NEXT_IDS.set((None, span));
        trace.unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        let (trace, span) = NEXT_IDS.get();
        NEXT_IDS.set((trace, None));
        span.unwrap_or_else(|| self.0.new_span_id())
    }
}

/// The trace of the turn that `step_id` (its session's step, enqueued at `created_at_ms` on the
/// store's clock) starts: its ids derived from the step, so that every attempt of the step on any
/// Worker gets the same, and its start the moment the step was enqueued.
pub fn turn_trace(session_id: &str, step_id: i64, created_at_ms: i64) -> TurnTrace {
    let digest = Sha256::new()
        .chain_update(b"tollgate turn trace\0")
        .chain_update(session_id.as_bytes())
        .chain_update([0])
        .chain_update(step_id.to_be_bytes())
        .chain_update(created_at_ms.to_be_bytes())
        .finalize();
    let mut trace_id = [0u8; 16];
    let mut span_id = [0u8; 8];
    trace_id.copy_from_slice(&digest[..16]);
    span_id.copy_from_slice(&digest[16..24]);
    // All zeros is the one invalid id (a chance of 2^-128 and 2^-64).
    trace_id[15] |= u8::from(trace_id == [0; 16]);
    span_id[7] |= u8::from(span_id == [0; 8]);
    TurnTrace { trace_id: hex::encode(trace_id), span_id: hex::encode(span_id), started_at_ms: created_at_ms }
}

/// The context a turn's spans are children of: its `invoke_agent` span, exported when the turn
/// ends (a root when the turn has no trace).
fn turn_context(trace: Option<&TurnTrace>) -> Context {
    let ids =
        trace.and_then(|t| Some((TraceId::from_hex(&t.trace_id).ok()?, SpanId::from_hex(&t.span_id).ok()?)));
    match ids {
        Some((trace_id, span_id)) => Context::new().with_remote_span_context(SpanContext::new(
            trace_id,
            span_id,
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        )),
        None => Context::new(),
    }
}

/// How a turn ended, as its `invoke_agent` span says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    /// It answered.
    Completed,
    /// It failed, for this reason (a `turn_failed` reason).
    Failed(String),
    /// A client cancelled it.
    Cancelled,
}

/// The `invoke_agent` span of turn `turn_id` of session `session_id`, run by `agent`.
pub fn turn_span(agent: &str, session_id: &str, turn_id: &str, end: &TurnEnd) -> SpanPlan {
    let outcome = match end {
        TurnEnd::Completed => "completed",
        TurnEnd::Failed(_) => "failed",
        TurnEnd::Cancelled => "cancelled",
    };
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", "invoke_agent"),
        KeyValue::new("gen_ai.agent.name", agent.to_owned()),
        KeyValue::new("gen_ai.conversation.id", session_id.to_owned()),
        KeyValue::new("tollgate.session.id", session_id.to_owned()),
        KeyValue::new("tollgate.turn.id", turn_id.to_owned()),
        KeyValue::new("tollgate.turn.outcome", outcome),
    ];
    let error = match end {
        TurnEnd::Failed(reason) => {
            attributes.push(KeyValue::new("error.type", reason.clone()));
            Some(format!("the turn failed: {reason}"))
        }
        _ => None,
    };
    SpanPlan { name: format!("invoke_agent {agent}"), kind: SpanKind::Internal, attributes, error }
}

/// A turn's `invoke_agent` span, emitted when the turn ends.
#[derive(Debug)]
pub struct TurnSpan {
    /// The turn's trace.
    pub trace: TurnTrace,
    /// Its span.
    pub plan: SpanPlan,
}

impl TurnSpan {
    /// Exports the span, from the turn's stored start to now, with the turn's ids.
    pub fn record(self) {
        let (Ok(trace_id), Ok(span_id)) =
            (TraceId::from_hex(&self.trace.trace_id), SpanId::from_hex(&self.trace.span_id))
        else {
            warn!(trace = ?self.trace, "a turn's stored trace ids do not parse; its span is not exported");
            return;
        };
        let start = u64::try_from(self.trace.started_at_ms)
            .map_or(SystemTime::UNIX_EPOCH, |ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        let end = SystemTime::now().max(start);
        NEXT_IDS.set((Some(trace_id), Some(span_id)));
        self.plan.record(&Context::new(), start, end);
        NEXT_IDS.set((None, None));
    }
}

fn tracer() -> global::BoxedTracer {
    global::tracer_with_scope(
        InstrumentationScope::builder(SERVICE).with_version(env!("CARGO_PKG_VERSION")).build(),
    )
}

/// Where a span belongs: the session, the turn, and the step's attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The Tollgate session.
    pub session_id: String,
    /// The turn.
    pub turn_id: String,
    /// The step's attempt (1, 2, …).
    pub attempt: i64,
    /// The turn's trace: the span's parent is its `invoke_agent` span.
    pub turn: Option<TurnTrace>,
}

impl Scope {
    fn attributes(&self) -> [KeyValue; 3] {
        [
            KeyValue::new("tollgate.session.id", self.session_id.clone()),
            KeyValue::new("tollgate.turn.id", self.turn_id.clone()),
            KeyValue::new("tollgate.attempt", self.attempt),
        ]
    }
}

/// What a segment's span says about its model calls: only what the CLI reported (the seed's
/// `modelCallMetadata`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelCallMetadata {
    /// Model calls, subagents included.
    pub model_calls: usize,
    /// The init message's model (else the options' model); `None` when a subagent called a model.
    pub request_model: Option<String>,
    /// The model every assistant message named, when they all agree.
    pub response_model: Option<String>,
    /// `gen_ai.provider.name` of the request model's `modelUsage` provider.
    pub provider_name: Option<String>,
    /// The one model call's message id.
    pub response_id: Option<String>,
    /// The one model call's stop reasons (main conversation).
    pub finish_reasons: Vec<String>,
    /// Input tokens (cache reads and writes included) and output tokens of the one model call.
    pub usage: Option<(u64, u64)>,
}

/// The metadata of a segment from its stats and the options' model.
pub fn model_call_metadata(stats: &SegmentStats, options_model: Option<&str>) -> ModelCallMetadata {
    let model_calls = stats.model_calls + stats.subagent_model_calls;
    let one = model_calls == 1;
    let request_model = if stats.subagent_model_calls == 0 {
        stats.init_model.clone().or_else(|| options_model.map(str::to_owned))
    } else {
        None
    };
    let provider_name = request_model.as_deref().and_then(|model| {
        let usage = stats.result.as_ref()?.model_usage.as_ref()?;
        provider_name(usage.get(model)?.get("provider")?.as_str()?).map(str::to_owned)
    });
    let response_model = match stats.response_models.len() {
        1 => stats.response_models.first().cloned(),
        _ => None,
    };
    let usage = stats.result.as_ref().and_then(|r| r.usage.as_ref()).filter(|_| one).map(|u| {
        (u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens, u.output_tokens)
    });
    ModelCallMetadata {
        model_calls,
        request_model,
        response_model,
        provider_name,
        response_id: if one { stats.response_ids.first().cloned() } else { None },
        finish_reasons: if one { stats.finish_reasons.clone() } else { Vec::new() },
        usage,
    }
}

/// `gen_ai.provider.name` of the CLI's `modelUsage[model].provider`: `firstParty` is `anthropic`,
/// `bedrock` and `mantle` are `aws.bedrock`, `vertex` is `gcp.vertex_ai`, `gateway` (a relay to a
/// backend the CLI does not name) is none, and anything else passes through.
pub fn provider_name(cli_provider: &str) -> Option<&str> {
    match cli_provider {
        "firstParty" => Some("anthropic"),
        "bedrock" | "mantle" => Some("aws.bedrock"),
        "vertex" => Some("gcp.vertex_ai"),
        "gateway" | "" => None,
        other => Some(other),
    }
}

/// A span to start: its name, kind, attributes and error status.
#[derive(Debug, Clone)]
pub struct SpanPlan {
    /// The span name.
    pub name: String,
    /// CLIENT or INTERNAL.
    pub kind: SpanKind,
    /// Its attributes.
    pub attributes: Vec<KeyValue>,
    /// The description of an error status, when it failed.
    pub error: Option<String>,
}

impl SpanPlan {
    /// The value of attribute `key`.
    pub fn attribute(&self, key: &str) -> Option<&Value> {
        self.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
    }

    /// Records the span, from `start` to `end`, under `cx`; returns the context of its children.
    fn record(self, cx: &Context, start: SystemTime, end: SystemTime) -> Context {
        use opentelemetry::trace::Span as _;
        let tracer = tracer();
        let mut span = tracer
            .span_builder(self.name)
            .with_kind(self.kind)
            .with_start_time(start)
            .with_attributes(self.attributes)
            .start_with_context(&tracer, cx);
        if let Some(error) = self.error {
            span.set_status(Status::error(error));
        }
        span.end_with_timestamp(end);
        cx.with_span(span)
    }
}

/// The `chat` span of one segment.
pub fn segment_span(scope: &Scope, meta: &ModelCallMetadata, result: &SegmentResult) -> SpanPlan {
    let client = meta.model_calls == 1;
    let mut attributes = vec![KeyValue::new("gen_ai.operation.name", "chat")];
    let mut push = |key: &'static str, value: Option<&String>| {
        if let Some(value) = value {
            attributes.push(KeyValue::new(key, value.clone()));
        }
    };
    push("gen_ai.request.model", meta.request_model.as_ref());
    push("gen_ai.response.model", meta.response_model.as_ref());
    push("gen_ai.provider.name", meta.provider_name.as_ref());
    push("gen_ai.response.id", meta.response_id.as_ref());
    if !meta.finish_reasons.is_empty() {
        let reasons: Vec<StringValue> = meta.finish_reasons.iter().cloned().map(StringValue::from).collect();
        attributes
            .push(KeyValue::new("gen_ai.response.finish_reasons", Value::Array(Array::String(reasons))));
    }
    if let (true, Some((input, output))) = (client, meta.usage) {
        attributes.push(KeyValue::new("gen_ai.usage.input_tokens", i64::try_from(input).unwrap_or(i64::MAX)));
        attributes
            .push(KeyValue::new("gen_ai.usage.output_tokens", i64::try_from(output).unwrap_or(i64::MAX)));
    }
    attributes.extend(scope.attributes());
    attributes
        .push(KeyValue::new("tollgate.model_calls", i64::try_from(meta.model_calls).unwrap_or(i64::MAX)));
    let (outcome, error) = match result {
        SegmentResult::Completed { .. } => ("completed", None),
        SegmentResult::Deferred { .. } => ("deferred", None),
        SegmentResult::Failed { error, .. } => ("failed", Some(error.clone())),
        SegmentResult::LimitReached { error, reason } => (reason.as_str(), Some(error.clone())),
    };
    attributes.push(KeyValue::new("tollgate.segment.outcome", outcome));
    SpanPlan {
        name: meta.request_model.as_ref().map_or_else(|| "chat".to_owned(), |model| format!("chat {model}")),
        kind: if client { SpanKind::Client } else { SpanKind::Internal },
        attributes,
        error,
    }
}

/// What the model proxy measured of a segment's requests, as `chat` span attributes (see the
/// module docs).
pub fn proxy_attributes(summary: &ProxySummary) -> Vec<KeyValue> {
    let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut attributes = vec![
        KeyValue::new("tollgate.model.requests", int(summary.requests)),
        KeyValue::new("tollgate.model.request_errors", int(summary.failed)),
        KeyValue::new("tollgate.model.requests_refused", int(summary.refused)),
        KeyValue::new("tollgate.usage.input_tokens", int(summary.tokens.all_input())),
        KeyValue::new("tollgate.usage.output_tokens", int(summary.tokens.output)),
        KeyValue::new("tollgate.usage.cost_usd", summary.cost_usd),
    ];
    if !summary.errors.is_empty() {
        let errors: Vec<StringValue> = summary.errors.iter().cloned().map(StringValue::from).collect();
        attributes.push(KeyValue::new("tollgate.model.errors", Value::Array(Array::String(errors))));
    }
    attributes
}

/// How a tool call attempt ended, as a span says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolOutcome {
    /// It returned a result.
    Succeeded,
    /// It returned an error result, never ran (arguments refused, tool gone), or failed with
    /// nothing of it sent.
    Failed,
    /// It failed in a way that may have taken effect (a trap, a timeout); retried or recorded
    /// `outcome_unknown`.
    Error,
    /// The segment ended before the inline call finished.
    Unfinished,
}

impl ToolOutcome {
    /// The `tollgate.tool.outcome` value.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolOutcome::Succeeded => "succeeded",
            ToolOutcome::Failed => "failed",
            ToolOutcome::Error => "error",
            ToolOutcome::Unfinished => "unfinished",
        }
    }

    /// The outcome of a deferred call's run.
    pub fn of_run(run: &ToolRun) -> ToolOutcome {
        match run {
            ToolRun::Output { is_error: false, .. } => ToolOutcome::Succeeded,
            ToolRun::Output { is_error: true, .. } | ToolRun::Refused { .. } | ToolRun::Contained { .. } => {
                ToolOutcome::Failed
            }
            ToolRun::Failed { .. } | ToolRun::Error { .. } => ToolOutcome::Error,
        }
    }
}

/// Which tool a span is about: its name, the model's call id, and which side runs it.
#[derive(Debug, Clone, Copy)]
pub struct ToolIdentity<'a> {
    /// A custom tool's own name, or a CLI tool's CLI name.
    pub name: &'a str,
    /// The model's tool use ID.
    pub call_id: &'a str,
    /// A custom tool (Tollgate's sandbox) or a CLI tool (a built-in or an external MCP
    /// server's tool, run by the CLI).
    pub kind: ToolKind,
}

/// The `execute_tool` span of one tool call attempt; `error` is set for [`ToolOutcome::Error`].
pub fn tool_span(
    scope: &Scope,
    tool: ToolIdentity<'_>,
    deferred: bool,
    outcome: ToolOutcome,
    error: Option<&str>,
) -> SpanPlan {
    let tool_name = tool.name;
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new("gen_ai.tool.name", tool_name.to_owned()),
        KeyValue::new("gen_ai.tool.call.id", tool.call_id.to_owned()),
        KeyValue::new("gen_ai.tool.type", "function"),
    ];
    attributes.extend(scope.attributes());
    let kind = match tool.kind {
        ToolKind::Custom => "custom",
        ToolKind::Cli => "cli",
    };
    attributes.push(KeyValue::new("tollgate.tool.kind", kind));
    attributes.push(KeyValue::new("tollgate.tool.deferred", deferred));
    attributes.push(KeyValue::new("tollgate.tool.outcome", outcome.as_str()));
    SpanPlan {
        name: format!("execute_tool {tool_name}"),
        kind: SpanKind::Internal,
        attributes,
        error: (outcome == ToolOutcome::Error).then(|| error.unwrap_or("the tool call failed").to_owned()),
    }
}

/// One segment's span, built when it ends: [`SegmentTrace::start`] when the segment starts,
/// [`SegmentTrace::requested_model`] and [`SegmentTrace::ran`] as it learns them, and
/// [`SegmentTrace::finish`] with the inline tool calls [`InlineTools`] saw.
#[derive(Debug)]
pub struct SegmentTrace {
    scope: Scope,
    started: SystemTime,
    options_model: Option<String>,
    meta: ModelCallMetadata,
    proxy: Option<ProxySummary>,
}

impl SegmentTrace {
    /// Starts the clock.
    pub fn start(scope: Scope) -> Self {
        SegmentTrace {
            scope,
            started: SystemTime::now(),
            options_model: None,
            meta: ModelCallMetadata::default(),
            proxy: None,
        }
    }

    /// What the model proxy measured of the segment's requests.
    pub fn proxied(&mut self, summary: &ProxySummary) {
        self.proxy = Some(summary.clone());
    }

    /// The options' model, the request model when the CLI sends no init message.
    pub fn requested_model(&mut self, model: Option<&str>) {
        self.options_model = model.map(str::to_owned);
    }

    /// What the CLI reported.
    pub fn ran(&mut self, stats: &SegmentStats) {
        self.meta = model_call_metadata(stats, self.options_model.as_deref());
    }

    /// Ends the segment's span now, with the inline tool calls' spans as its children.
    pub fn finish(self, result: &SegmentResult, tools: InlineTools) {
        let end = SystemTime::now();
        let mut plan = segment_span(&self.scope, &self.meta, result);
        if let Some(summary) = &self.proxy {
            plan.attributes.extend(proxy_attributes(summary));
        }
        let parent = plan.record(&turn_context(self.scope.turn.as_ref()), self.started, end);
        for call in tools.done {
            let tool = ToolIdentity { name: &call.name, call_id: &call.id, kind: call.kind };
            tool_span(&self.scope, tool, false, call.outcome, None).record(&parent, call.start, call.end);
        }
        for (id, (name, kind, start)) in tools.open {
            let tool = ToolIdentity { name: &name, call_id: &id, kind };
            tool_span(&self.scope, tool, false, ToolOutcome::Unfinished, None).record(&parent, start, end);
        }
    }
}

/// The inline tool calls of a segment (custom tools and CLI tools alike), timed by when their
/// events arrive.
#[derive(Debug, Default)]
pub struct InlineTools {
    open: HashMap<String, (String, ToolKind, SystemTime)>,
    done: Vec<InlineCall>,
}

#[derive(Debug)]
struct InlineCall {
    id: String,
    name: String,
    kind: ToolKind,
    outcome: ToolOutcome,
    start: SystemTime,
    end: SystemTime,
}

impl InlineTools {
    /// Notes a tool call starting or finishing; other events are ignored.
    pub fn on_event(&mut self, event: &SegmentEvent) {
        match event {
            SegmentEvent::ToolCallStarted { tool_use_id, name, kind, .. } => {
                self.open.insert(tool_use_id.clone(), (name.clone(), *kind, SystemTime::now()));
            }
            SegmentEvent::ToolCallFinished { tool_use_id, name, kind, is_error } => {
                let end = SystemTime::now();
                let start = self.open.remove(tool_use_id).map_or(end, |(_, _, start)| start);
                let outcome = if *is_error { ToolOutcome::Failed } else { ToolOutcome::Succeeded };
                self.done.push(InlineCall {
                    id: tool_use_id.clone(),
                    name: name.clone(),
                    kind: *kind,
                    outcome,
                    start,
                    end,
                });
            }
            _ => {}
        }
    }
}

/// The span of one deferred tool call attempt, started before the tool runs.
#[derive(Debug)]
pub struct ToolTrace {
    scope: Scope,
    tool_name: String,
    tool_call_id: String,
    started: SystemTime,
}

impl ToolTrace {
    /// Starts the clock.
    pub fn start(scope: Scope, tool_name: &str, tool_call_id: &str) -> Self {
        ToolTrace {
            scope,
            tool_name: tool_name.to_owned(),
            tool_call_id: tool_call_id.to_owned(),
            started: SystemTime::now(),
        }
    }

    /// Ends the span now with the run's outcome.
    pub fn finish(self, run: &ToolRun) {
        let error = match run {
            ToolRun::Failed { message } | ToolRun::Error { message } => Some(message.as_str()),
            _ => None,
        };
        // A deferred call's step runs a custom tool (an approved CLI tool runs in its segment).
        let tool =
            ToolIdentity { name: &self.tool_name, call_id: &self.tool_call_id, kind: ToolKind::Custom };
        tool_span(&self.scope, tool, true, ToolOutcome::of_run(run), error).record(
            &turn_context(self.scope.turn.as_ref()),
            self.started,
            SystemTime::now(),
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tollgate_engine::session::Usage;

    use super::*;

    fn scope() -> Scope {
        Scope { session_id: "s".into(), turn_id: "t1".into(), attempt: 2, turn: None }
    }

    fn stats(model_calls: usize, subagent_model_calls: usize, provider: &str) -> SegmentStats {
        let mut stats = SegmentStats::default();
        stats.model_calls = model_calls;
        stats.subagent_model_calls = subagent_model_calls;
        stats.init_model = Some("claude-opus-5-5".into());
        stats.response_models.insert("claude-opus-5-5-20261101".into());
        stats.response_ids = (0..model_calls + subagent_model_calls).map(|i| format!("msg_{i}")).collect();
        stats.finish_reasons = vec!["end_turn".into()];
        stats.result = Some(
            serde_json::from_value(json!({
                "type": "result", "subtype": "success", "is_error": false, "session_id": "cli",
                "usage": {"input_tokens": 10, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 2, "output_tokens": 7},
                "modelUsage": {"claude-opus-5-5": {"inputTokens": 10, "outputTokens": 7, "provider": provider}},
            }))
            .expect("a result message"),
        );
        stats
    }

    fn completed() -> SegmentResult {
        SegmentResult::Completed {
            session_id: "cli".into(),
            result: "ok".into(),
            entries: Vec::new(),
            usage: Usage::default(),
            cost_usd: None,
        }
    }

    fn text(value: &str) -> Value {
        Value::from(value.to_owned())
    }

    #[test]
    fn a_turns_trace_is_the_same_for_every_attempt_of_its_first_step_and_differs_between_turns() {
        let first = turn_trace("s", 41, 1_700_000_000_000);
        assert_eq!(first, turn_trace("s", 41, 1_700_000_000_000), "any Worker derives the same");
        assert_eq!(first.trace_id.len(), 32);
        assert_eq!(first.span_id.len(), 16);
        assert!(TraceId::from_hex(&first.trace_id).is_ok_and(|id| id != TraceId::INVALID));
        assert!(SpanId::from_hex(&first.span_id).is_ok_and(|id| id != SpanId::INVALID));
        assert_eq!(first.started_at_ms, 1_700_000_000_000);
        for other in [turn_trace("s", 42, 1_700_000_000_000), turn_trace("t", 41, 1_700_000_000_000)] {
            assert_ne!(other.trace_id, first.trace_id);
            assert_ne!(other.span_id, first.span_id);
        }
        // A session deleted and made again under the same id, whose store gave a step the same
        // id: another start, another trace.
        assert_ne!(turn_trace("s", 41, 1_700_000_000_001).trace_id, first.trace_id);
    }

    #[test]
    fn a_turns_span_names_the_agent_the_session_and_how_it_ended() {
        let done = turn_span("support", "s-1", "turn-2", &TurnEnd::Completed);
        assert_eq!(done.name, "invoke_agent support");
        assert_eq!(done.kind, SpanKind::Internal);
        assert_eq!(done.attribute("gen_ai.operation.name"), Some(&text("invoke_agent")));
        assert_eq!(done.attribute("gen_ai.agent.name"), Some(&text("support")));
        assert_eq!(done.attribute("gen_ai.conversation.id"), Some(&text("s-1")));
        assert_eq!(done.attribute("tollgate.turn.id"), Some(&text("turn-2")));
        assert_eq!(done.attribute("tollgate.turn.outcome"), Some(&text("completed")));
        assert_eq!(done.attribute("error.type"), None);
        assert_eq!(done.error, None);

        let failed = turn_span("support", "s-1", "turn-2", &TurnEnd::Failed("spend_limit".into()));
        assert_eq!(failed.attribute("tollgate.turn.outcome"), Some(&text("failed")));
        assert_eq!(failed.attribute("error.type"), Some(&text("spend_limit")));
        assert!(failed.error.is_some_and(|e| e.contains("spend_limit")));
        let cancelled = turn_span("support", "s-1", "turn-2", &TurnEnd::Cancelled);
        assert_eq!(cancelled.attribute("tollgate.turn.outcome"), Some(&text("cancelled")));
    }

    #[test]
    fn the_id_generator_gives_the_turns_ids_once_then_random_ones() {
        let ids = TurnIds::default();
        let trace = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
        let span = SpanId::from_hex("00f067aa0ba902b7").unwrap();
        NEXT_IDS.set((Some(trace), Some(span)));
        assert_eq!(ids.new_span_id(), span);
        assert_eq!(ids.new_trace_id(), trace);
        assert_ne!(ids.new_span_id(), span);
        assert_ne!(ids.new_trace_id(), trace);
    }

    #[test]
    fn a_span_of_a_turn_with_a_trace_is_a_child_of_its_invoke_agent_span() {
        let trace = turn_trace("s", 1, 5);
        let cx = turn_context(Some(&trace));
        let parent = cx.span().span_context().clone();
        assert_eq!(parent.trace_id().to_string(), trace.trace_id);
        assert_eq!(parent.span_id().to_string(), trace.span_id);
        assert!(parent.is_sampled());
        assert!(!turn_context(None).span().span_context().is_valid(), "no trace: a root");
    }

    #[test]
    fn one_model_call_is_a_client_span_with_usage_response_id_and_finish_reasons() {
        let meta = model_call_metadata(&stats(1, 0, "firstParty"), None);
        let span = segment_span(&scope(), &meta, &completed());
        assert_eq!(span.name, "chat claude-opus-5-5");
        assert_eq!(span.kind, SpanKind::Client);
        assert_eq!(span.attribute("gen_ai.operation.name"), Some(&text("chat")));
        assert_eq!(span.attribute("gen_ai.request.model"), Some(&text("claude-opus-5-5")));
        assert_eq!(span.attribute("gen_ai.response.model"), Some(&text("claude-opus-5-5-20261101")));
        assert_eq!(span.attribute("gen_ai.provider.name"), Some(&text("anthropic")));
        assert_eq!(span.attribute("gen_ai.response.id"), Some(&text("msg_0")));
        assert_eq!(
            span.attribute("gen_ai.response.finish_reasons"),
            Some(&Value::Array(Array::String(vec!["end_turn".into()])))
        );
        // Cache reads and writes count as input.
        assert_eq!(span.attribute("gen_ai.usage.input_tokens"), Some(&Value::I64(15)));
        assert_eq!(span.attribute("gen_ai.usage.output_tokens"), Some(&Value::I64(7)));
        assert_eq!(span.attribute("tollgate.session.id"), Some(&text("s")));
        assert_eq!(span.attribute("tollgate.turn.id"), Some(&text("t1")));
        assert_eq!(span.attribute("tollgate.attempt"), Some(&Value::I64(2)));
        assert_eq!(span.attribute("tollgate.segment.outcome"), Some(&text("completed")));
        assert_eq!(span.error, None);
    }

    #[test]
    fn two_model_calls_are_an_internal_span_without_usage_response_id_or_finish_reasons() {
        let meta = model_call_metadata(&stats(2, 0, "firstParty"), None);
        let span = segment_span(&scope(), &meta, &completed());
        assert_eq!(span.kind, SpanKind::Internal);
        assert_eq!(span.name, "chat claude-opus-5-5");
        assert_eq!(span.attribute("gen_ai.provider.name"), Some(&text("anthropic")));
        for absent in [
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.response.id",
            "gen_ai.response.finish_reasons",
        ] {
            assert_eq!(span.attribute(absent), None, "{absent}");
        }
        assert_eq!(span.attribute("tollgate.model_calls"), Some(&Value::I64(2)));
    }

    #[test]
    fn the_provider_maps_to_the_semantic_conventions_and_a_gateway_names_none() {
        let cases = [
            ("firstParty", Some("anthropic")),
            ("bedrock", Some("aws.bedrock")),
            ("mantle", Some("aws.bedrock")),
            ("vertex", Some("gcp.vertex_ai")),
            ("foundry", Some("foundry")),
            ("anthropicAws", Some("anthropicAws")),
            ("anthropicGoogleCloud", Some("anthropicGoogleCloud")),
            ("gateway", None),
        ];
        for (cli, expected) in cases {
            assert_eq!(provider_name(cli), expected, "{cli}");
            let meta = model_call_metadata(&stats(1, 0, cli), None);
            assert_eq!(meta.provider_name.as_deref(), expected, "{cli}");
        }
    }

    #[test]
    fn a_segment_where_a_subagent_called_a_model_has_no_request_model_and_no_provider() {
        let meta = model_call_metadata(&stats(1, 1, "firstParty"), Some("opus"));
        assert_eq!(meta.request_model, None);
        assert_eq!(meta.provider_name, None);
        let span = segment_span(&scope(), &meta, &completed());
        assert_eq!(span.name, "chat");
        assert_eq!(span.kind, SpanKind::Internal, "the subagent's call counts");
        assert_eq!(span.attribute("gen_ai.request.model"), None);
    }

    #[test]
    fn without_an_init_message_the_options_model_is_the_request_model_and_the_provider_is_not_guessed() {
        let mut stats = stats(1, 0, "firstParty");
        stats.init_model = None;
        let meta = model_call_metadata(&stats, Some("claude-sonnet-5"));
        assert_eq!(meta.request_model.as_deref(), Some("claude-sonnet-5"));
        assert_eq!(meta.provider_name, None, "modelUsage has no entry for that name");
    }

    #[test]
    fn answers_from_different_models_have_no_response_model() {
        let mut stats = stats(2, 0, "firstParty");
        stats.response_models.insert("claude-haiku-5".into());
        assert_eq!(model_call_metadata(&stats, None).response_model, None);
    }

    #[test]
    fn the_proxy_measurements_become_usage_and_request_attributes() {
        let summary = ProxySummary {
            requests: 3,
            failed: 1,
            refused: 1,
            tokens: tollgate_process::metrics::TokenCounts {
                input: 10,
                output: 4,
                cache_creation: 2,
                cache_read: 5,
            },
            cost_usd: 0.25,
            errors: vec!["HTTP 529: overloaded_error: busy".into()],
            ..ProxySummary::default()
        };
        let attributes = proxy_attributes(&summary);
        let get = |key: &str| attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.clone());
        assert_eq!(get("tollgate.model.requests"), Some(Value::I64(3)));
        assert_eq!(get("tollgate.model.request_errors"), Some(Value::I64(1)));
        assert_eq!(get("tollgate.model.requests_refused"), Some(Value::I64(1)));
        assert_eq!(get("tollgate.usage.input_tokens"), Some(Value::I64(17)));
        assert_eq!(get("tollgate.usage.output_tokens"), Some(Value::I64(4)));
        assert_eq!(get("tollgate.usage.cost_usd"), Some(Value::F64(0.25)));
        assert_eq!(
            get("tollgate.model.errors"),
            Some(Value::Array(Array::String(vec!["HTTP 529: overloaded_error: busy".into()])))
        );
    }

    #[test]
    fn a_failed_segment_has_an_error_status_and_the_failed_outcome() {
        let meta = model_call_metadata(&SegmentStats::default(), None);
        let failed = SegmentResult::Failed { error: "the CLI exited".into(), retryable: true };
        let span = segment_span(&scope(), &meta, &failed);
        assert_eq!(span.name, "chat");
        assert_eq!(span.kind, SpanKind::Internal);
        assert_eq!(span.attribute("tollgate.segment.outcome"), Some(&text("failed")));
        assert_eq!(span.error.as_deref(), Some("the CLI exited"));
    }

    #[test]
    fn a_deferred_tool_attempt_that_errs_is_an_error_span_and_an_error_result_is_not() {
        let error = ToolRun::Error { message: "trapped".into() };
        let refund = ToolIdentity { name: "create_refund", call_id: "toolu_1", kind: ToolKind::Custom };
        let span = tool_span(&scope(), refund, true, ToolOutcome::of_run(&error), Some("trapped"));
        assert_eq!(span.name, "execute_tool create_refund");
        assert_eq!(span.attribute("gen_ai.operation.name"), Some(&text("execute_tool")));
        assert_eq!(span.attribute("gen_ai.tool.call.id"), Some(&text("toolu_1")));
        assert_eq!(span.attribute("tollgate.tool.deferred"), Some(&Value::Bool(true)));
        assert_eq!(span.attribute("tollgate.tool.outcome"), Some(&text("error")));
        assert_eq!(span.error.as_deref(), Some("trapped"));

        let failed = ToolRun::Output { text: "no such order".into(), is_error: true, images: Vec::new() };
        let lookup = ToolIdentity { name: "lookup_order", call_id: "toolu_2", kind: ToolKind::Custom };
        let span = tool_span(&scope(), lookup, false, ToolOutcome::of_run(&failed), None);
        assert_eq!(span.attribute("tollgate.tool.outcome"), Some(&text("failed")));
        assert_eq!(span.error, None);
    }

    #[test]
    fn an_inline_cli_tool_call_is_an_execute_tool_span_of_kind_cli() {
        let read = ToolIdentity { name: "Read", call_id: "toolu_3", kind: ToolKind::Cli };
        let span = tool_span(&scope(), read, false, ToolOutcome::Succeeded, None);
        assert_eq!(span.name, "execute_tool Read");
        assert_eq!(span.attribute("tollgate.tool.kind"), Some(&text("cli")));
        assert_eq!(span.attribute("tollgate.tool.deferred"), Some(&Value::Bool(false)));
    }

    #[test]
    fn inline_tool_calls_are_timed_from_their_events_and_an_unfinished_one_stays_open() {
        let mut tools = InlineTools::default();
        let started = |id: &str, name: &str, kind| SegmentEvent::ToolCallStarted {
            tool_use_id: id.into(),
            name: name.into(),
            kind,
            input: serde_json::json!({}),
        };
        tools.on_event(&started("a", "lookup_order", ToolKind::Custom));
        tools.on_event(&started("b", "Bash", ToolKind::Cli));
        tools.on_event(&SegmentEvent::TextDelta { text: "…".into() });
        tools.on_event(&SegmentEvent::ReasoningDelta { text: "…".into() });
        tools.on_event(&SegmentEvent::ToolCallFinished {
            tool_use_id: "a".into(),
            name: "lookup_order".into(),
            kind: ToolKind::Custom,
            is_error: true,
        });
        assert_eq!(tools.done.len(), 1);
        assert_eq!(tools.done[0].outcome, ToolOutcome::Failed);
        assert!(tools.done[0].start <= tools.done[0].end);
        assert!(tools.open.contains_key("b"));
    }
}
