//! OpenTelemetry spans of a Worker process, received by a loopback OTLP/HTTP JSON collector: a
//! `chat` span per segment with an `execute_tool` child per inline call, an `execute_tool` span
//! per deferred call attempt, and the last spans flushed when SIGTERM stops the Worker.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::world::{Refund, World};

/// A collector on loopback: keeps every span of every `POST /v1/traces` body, answers `200 {}`.
struct Collector {
    url: String,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    // One connection may carry several requests (keep-alive).
                    while let Some((head, body)) = read_request(&mut socket).await {
                        if head.starts_with("POST /v1/traces ") {
                            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            kept.lock().unwrap().extend(spans_of(&body));
                        }
                        let reply = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                        if socket.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Collector { url, spans }
    }

    fn spans(&self) -> Vec<Value> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (30 s at most) until a span named `name` arrived, and returns it.
    async fn wait_for(&self, name: &str, world: &World) -> Value {
        self.wait_for_named(name, world, |n| n == name).await
    }

    /// Waits (30 s at most) until a span whose name `matches` arrived, and returns it.
    async fn wait_for_named(&self, what: &str, world: &World, matches: impl Fn(&str) -> bool) -> Value {
        let name = what;
        let start = Instant::now();
        loop {
            if let Some(span) = self.spans().into_iter().find(|s| s["name"].as_str().is_some_and(&matches)) {
                return span;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "no span {name:?}; got {:#?}\n{}",
                self.spans(),
                world.diagnostics()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The head and the body (by `content-length`) of one request, or `None` at EOF.
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<(String, Vec<u8>)> {
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).into_owned();
            let length = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length").then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            while data.len() < end + 4 + length {
                let read = socket.read(&mut buf).await.ok()?;
                if read == 0 {
                    return None;
                }
                data.extend_from_slice(&buf[..read]);
            }
            return Some((head, data[end + 4..end + 4 + length].to_vec()));
        }
        let read = socket.read(&mut buf).await.ok()?;
        if read == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..read]);
    }
}

/// The spans of an OTLP `ExportTraceServiceRequest` in JSON.
fn spans_of(body: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    for resource in body["resourceSpans"].as_array().into_iter().flatten() {
        for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
            for span in scope["spans"].as_array().into_iter().flatten() {
                let mut span = span.clone();
                span["resource"] = resource["resource"].clone();
                out.push(span);
            }
        }
    }
    out
}

/// An attribute's value as JSON (`{"stringValue": …}` → the string, `intValue` → the number).
fn attribute(attributes: &Value, key: &str) -> Option<Value> {
    let found = attributes.as_array()?.iter().find(|kv| kv["key"] == key)?;
    let value = found["value"].as_object()?;
    let (kind, value) = value.iter().next()?;
    Some(match (kind.as_str(), value) {
        ("intValue", Value::String(text)) => text.parse::<i64>().map(Value::from).unwrap_or(value.clone()),
        _ => value.clone(),
    })
}

fn attr(span: &Value, key: &str) -> Option<Value> {
    attribute(&span["attributes"], key)
}

/// The span kind as its number (1 internal, 3 client), written as a number or its enum name.
fn kind(span: &Value) -> i64 {
    match &span["kind"] {
        Value::Number(n) => n.as_i64().unwrap_or(-1),
        Value::String(name) => match name.as_str() {
            "SPAN_KIND_INTERNAL" => 1,
            "SPAN_KIND_SERVER" => 2,
            "SPAN_KIND_CLIENT" => 3,
            _ => -1,
        },
        _ => -1,
    }
}

fn otel_env(collector: &Collector, delay_ms: &'static str) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url.clone()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json".to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", delay_ms.to_owned()),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_with_an_inline_read_exports_an_internal_chat_span_with_the_tool_call_as_its_child() {
    let Some(world) = World::new("tracing an inline read", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let collector = Collector::start().await;
    let env = otel_env(&collector, "200");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let _a = world.worker_with_env("a", &env);
    world.send("s", r#"call lookup_order {"order_id":"7"}"#).await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());

    let tool = collector.wait_for("execute_tool lookup_order", &world).await;
    let chats: Vec<Value> = collector
        .spans()
        .into_iter()
        .filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with("chat")))
        .collect();
    assert_eq!(chats.len(), 1, "one segment, one chat span: {chats:#?}");
    let chat = &chats[0];
    let text = format!("{chat:#}\n{tool:#}");

    // Two model calls (the tool call, then the answer): INTERNAL, without usage.
    assert_eq!(kind(chat), 1, "{text}");
    assert_eq!(attr(chat, "gen_ai.operation.name"), Some("chat".into()), "{text}");
    assert_eq!(attr(chat, "tollgate.model_calls"), Some(2.into()), "{text}");
    assert_eq!(attr(chat, "gen_ai.usage.input_tokens"), None, "{text}");
    assert_eq!(attr(chat, "gen_ai.response.id"), None, "{text}");
    let model = attr(chat, "gen_ai.request.model").and_then(|m| m.as_str().map(str::to_owned));
    let model = model.unwrap_or_else(|| panic!("no request model\n{text}"));
    assert_eq!(chat["name"], format!("chat {model}"), "{text}");
    assert!(attr(chat, "gen_ai.response.model").is_some(), "{text}");
    assert_eq!(attr(chat, "tollgate.session.id"), Some("s".into()), "{text}");
    assert_eq!(attr(chat, "tollgate.attempt"), Some(1.into()), "{text}");
    assert_eq!(attr(chat, "tollgate.segment.outcome"), Some("completed".into()), "{text}");
    assert!(attr(chat, "tollgate.turn.id").is_some(), "{text}");
    assert_eq!(attribute(&chat["resource"]["attributes"], "service.name"), Some("tollgate".into()), "{text}");

    // The inline call: a child of the segment's span.
    assert_eq!(kind(&tool), 1, "{text}");
    assert_eq!(attr(&tool, "gen_ai.operation.name"), Some("execute_tool".into()), "{text}");
    assert_eq!(attr(&tool, "gen_ai.tool.name"), Some("lookup_order".into()), "{text}");
    assert!(
        attr(&tool, "gen_ai.tool.call.id")
            .is_some_and(|id| id.as_str().is_some_and(|id| id.starts_with("toolu_"))),
        "{text}"
    );
    assert_eq!(attr(&tool, "tollgate.tool.deferred"), Some(false.into()), "{text}");
    assert_eq!(attr(&tool, "tollgate.tool.outcome"), Some("succeeded".into()), "{text}");
    assert_eq!(attr(&tool, "tollgate.session.id"), Some("s".into()), "{text}");
    assert_eq!(tool["traceId"], chat["traceId"], "{text}");
    assert_eq!(tool["parentSpanId"], chat["spanId"], "{text}");

    // The segment is the child of its turn's span, which the turn's end exports.
    let turn = collector.wait_for_named("invoke_agent", &world, |n| n.starts_with("invoke_agent ")).await;
    assert_eq!(chat["traceId"], turn["traceId"], "{text}\n{turn:#}");
    assert_eq!(chat["parentSpanId"], turn["spanId"], "{text}\n{turn:#}");
    assert_eq!(attr(&turn, "tollgate.turn.outcome"), Some("completed".into()), "{turn:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_across_two_workers_is_one_invoke_agent_span_over_its_chat_and_deferred_execute_tool_spans() {
    let Some(world) = World::new("tracing a deferred write", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let collector = Collector::start().await;
    // A minute's batch delay: nothing is sent before a Worker stops, so the flush on exit sends it.
    let env = otel_env(&collector, "60000");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // Worker `a` runs the segment that defers the refund, then stops while the turn waits.
    let a = world.worker_with_env("a", &env);
    world.send("s", r#"call create_refund {"order_id":"7","amount_cents":500}"#).await;
    let waiting = world.wait_for("s", "the approval", |s| s.status == "awaiting_approval").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    assert!(collector.spans().is_empty(), "exported before the Worker stopped: {:#?}", collector.spans());
    a.terminate().await;
    let from_a = collector.spans().len();
    assert!(from_a > 0, "SIGTERM flushes the deferring segment's span\n{}", world.diagnostics());
    // Worker `b` runs the approved call and the resumed segment that ends the turn.
    let b = world.worker_with_env("b", &env);
    world.decide("s", &id, true, None, "k").await;
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(
        collector.spans().len(),
        from_a,
        "exported before the Worker stopped: {:#?}",
        collector.spans()
    );

    b.terminate().await;
    let spans = collector.spans();
    let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
    let tool = spans
        .iter()
        .find(|s| s["name"] == "execute_tool create_refund")
        .unwrap_or_else(|| panic!("no deferred tool span in {names:?}\n{}", world.diagnostics()));
    assert_eq!(attr(tool, "tollgate.tool.deferred"), Some(true.into()), "{tool:#}");
    assert_eq!(attr(tool, "tollgate.tool.outcome"), Some("succeeded".into()), "{tool:#}");
    assert_eq!(attr(tool, "gen_ai.tool.call.id"), Some(id.as_str().into()), "{tool:#}");
    assert_eq!(attr(tool, "tollgate.attempt"), Some(1.into()), "{tool:#}");
    // The deferring segment and the resumed one that answered.
    let outcomes: Vec<Value> = spans
        .iter()
        .filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with("chat")))
        .filter_map(|s| attr(s, "tollgate.segment.outcome"))
        .collect();
    assert_eq!(outcomes, [Value::from("deferred"), Value::from("completed")], "{names:?}");

    // The turn: one `invoke_agent` span, the root of the segments' and the call's spans from both
    // Workers, from the turn's start (before the first segment's) to its end.
    let turns: Vec<&Value> =
        spans.iter().filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with("invoke_agent "))).collect();
    assert_eq!(turns.len(), 1, "one turn, one span: {names:?}");
    let turn = turns[0];
    let text = format!("{turn:#}");
    assert_eq!(attr(turn, "gen_ai.operation.name"), Some("invoke_agent".into()), "{text}");
    assert_eq!(attr(turn, "gen_ai.conversation.id"), Some("s".into()), "{text}");
    assert_eq!(attr(turn, "tollgate.turn.outcome"), Some("completed".into()), "{text}");
    assert_eq!(
        turn["name"],
        format!(
            "invoke_agent {}",
            attr(turn, "gen_ai.agent.name").and_then(|n| n.as_str().map(str::to_owned)).unwrap_or_default()
        ),
        "{text}"
    );
    assert!(turn["parentSpanId"].as_str().is_none_or(str::is_empty), "a root: {text}");
    let nanos = |span: &Value, key: &str| -> u128 {
        match &span[key] {
            Value::String(n) => n.parse().unwrap_or_default(),
            n => n.as_u64().map(u128::from).unwrap_or_default(),
        }
    };
    let children: Vec<&Value> = spans
        .iter()
        .filter(|s| {
            s["name"].as_str().is_some_and(|n| n.starts_with("chat") || n == "execute_tool create_refund")
        })
        .collect();
    assert_eq!(children.len(), 3, "{names:?}");
    for child in children {
        assert_eq!(child["traceId"], turn["traceId"], "{child:#}\n{text}");
        assert_eq!(child["parentSpanId"], turn["spanId"], "{child:#}\n{text}");
        assert!(nanos(turn, "startTimeUnixNano") <= nanos(child, "startTimeUnixNano"), "{child:#}\n{text}");
        assert!(nanos(turn, "endTimeUnixNano") >= nanos(child, "endTimeUnixNano"), "{child:#}\n{text}");
    }
}
