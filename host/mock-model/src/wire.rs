//! The Messages API wire format the mock writes: SSE events for `stream: true`, one JSON object otherwise,
//! and the error body.
//!
//! This module owns bytes only; what to say is [`crate::plan`]'s job. Read [`sse_events`] first.
//! The events and content blocks are `tollgate-protocol`'s types (the ones the CLI's
//! `stream_event` frames carry), so the mock and the host agree on one definition.
//!
//! # Wire format
//!
//! A streamed reply is `text/event-stream`; each event is `event: <type>\ndata: <compact JSON>\n\n`,
//! written as its own HTTP chunk, in the order the real API uses:
//!
//! ```text
//! message_start        {"type":"message_start","message":{"id","type":"message","role":"assistant","model",
//!                       "content":[],"stop_reason":null,"stop_sequence":null,"usage":{…,"output_tokens":1}}}
//! per content block i:
//!   content_block_start {"type":"content_block_start","index":i,"content_block":{"type":"text","text":""}}
//!                       or {"type":"tool_use","id","name","input":{}}
//!                       or {"type":"thinking","thinking":"","signature":""}
//!   ping                (after the first block's start only) {"type":"ping"}
//!   content_block_delta {"type":"content_block_delta","index":i,"delta":{"type":"text_delta","text":…}}
//!                       or {"type":"input_json_delta","partial_json":…}
//!                       or {"type":"thinking_delta","thinking":…}, then one
//!                       {"type":"signature_delta","signature":…}; two deltas per block (the text,
//!                       the thinking or the compact input JSON cut in half, on a character boundary)
//!   content_block_stop  {"type":"content_block_stop","index":i}
//! message_delta        {"type":"message_delta","delta":{"stop_reason","stop_sequence":null},"usage":{…}}
//! message_stop         {"type":"message_stop"}
//! ```
//!
//! A non-streamed reply is the finished message: `{"id","type":"message","role":"assistant","model",
//! "content":[…],"stop_reason","stop_sequence":null,"usage":{…}}`. An error is
//! `{"type":"error","error":{"type":<by status>,"message":"mock HTTP <status>"}}`.
//! `usage` estimates input tokens as a quarter of the request's `messages` JSON length.

use bytes::Bytes;
use serde_json::{Value, json};

use tollgate_protocol::{ApiEvent, ContentBlock, Delta};

use crate::plan::Pace;
use crate::reply::AssistantReply;

/// The fixed parts of one reply: its message ID, the model named by the request, and token counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageMeta {
    /// `msg_mock_…`.
    pub id: String,
    /// The request's `model`.
    pub model: String,
    /// The input token estimate.
    pub input_tokens: u64,
}

/// The SSE events of a streamed reply, one `Bytes` per event.
pub fn sse_events(message: &AssistantReply, meta: &MessageMeta) -> Vec<Bytes> {
    cut_events(message, meta, 2).into_iter().map(|(bytes, _)| bytes).collect()
}

/// One step of a paced reply ([`paced_events`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Paced {
    /// Wait this long, then send the event.
    Send {
        /// The wait before it.
        wait: std::time::Duration,
        /// The SSE event.
        bytes: Bytes,
    },
    /// Park until this gate opens.
    Hold(String),
}

/// The SSE events of a streamed reply, paced as `pace` says: each text block cut in `drip`'s
/// count of deltas with its wait before every text delta but the first, and a `hold` halfway
/// through the first text block's deltas. The default pace is [`sse_events`] without waits.
pub fn paced_events(message: &AssistantReply, meta: &MessageMeta, pace: &Pace) -> Vec<Paced> {
    let (deltas, every) = pace.drip.unwrap_or((2, std::time::Duration::ZERO));
    let events = cut_events(message, meta, deltas as usize);
    let text_deltas = events.iter().filter(|(_, text)| *text).count();
    let first_block = message
        .content
        .iter()
        .find_map(|block| match block {
            ContentBlock::Text { text } => Some(pieces(text, deltas as usize).len()),
            _ => None,
        })
        .unwrap_or(0);
    let hold_after = first_block.div_ceil(2).max(1);
    let mut out = Vec::with_capacity(events.len() + 1);
    let mut seen = 0usize;
    for (bytes, text) in events {
        let wait = if text && seen > 0 { every } else { std::time::Duration::ZERO };
        out.push(Paced::Send { wait, bytes });
        if text {
            seen += 1;
            if seen == hold_after
                && let Some(gate) = &pace.hold
            {
                out.push(Paced::Hold(gate.clone()));
            }
        }
    }
    debug_assert!(seen == text_deltas);
    out
}

/// The SSE events of a streamed reply, each text block cut in `text_parts` deltas, each event
/// with whether it is a text delta.
fn cut_events(message: &AssistantReply, meta: &MessageMeta, text_parts: usize) -> Vec<(Bytes, bool)> {
    let mut events = vec![(
        sse(&ApiEvent::MessageStart {
            message: json!({
                "id": meta.id, "type": "message", "role": "assistant", "model": meta.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {
                    "input_tokens": meta.input_tokens, "output_tokens": 1,
                    "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                    "service_tier": "standard",
                },
            }),
        }),
        false,
    )];
    for (index, block) in message.content.iter().enumerate() {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        let (start, deltas): (ContentBlock, Vec<Delta>) = match block {
            ContentBlock::Text { text } => (
                ContentBlock::Text { text: String::new() },
                pieces(text, text_parts)
                    .into_iter()
                    .map(|text| Delta::TextDelta { text: text.to_owned() })
                    .collect(),
            ),
            ContentBlock::ToolUse { id, name, input } => (
                ContentBlock::ToolUse { id: id.clone(), name: name.clone(), input: json!({}) },
                halves(&input.to_string())
                    .into_iter()
                    .map(|part| Delta::InputJsonDelta { partial_json: part.to_owned() })
                    .collect(),
            ),
            ContentBlock::Thinking { thinking, signature } => (
                ContentBlock::Thinking { thinking: String::new(), signature: String::new() },
                halves(thinking)
                    .into_iter()
                    .map(|part| Delta::ThinkingDelta { thinking: part.to_owned() })
                    .chain([Delta::SignatureDelta { signature: signature.clone() }])
                    .collect(),
            ),
            other => (other.clone(), Vec::new()),
        };
        events.push((sse(&ApiEvent::ContentBlockStart { index, content_block: start }), false));
        if index == 0 {
            events.push((sse(&ApiEvent::Other(json!({"type": "ping"}))), false));
        }
        for delta in deltas {
            let text = matches!(delta, Delta::TextDelta { .. });
            events.push((sse(&ApiEvent::ContentBlockDelta { index, delta }), text));
        }
        events.push((sse(&ApiEvent::ContentBlockStop { index }), false));
    }
    events.push((
        sse(&ApiEvent::MessageDelta {
            delta: json!({"stop_reason": message.stop_reason.as_str(), "stop_sequence": null}),
            usage: Some(json!({
                "input_tokens": meta.input_tokens, "output_tokens": output_tokens(message),
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
            })),
        }),
        false,
    ));
    events.push((sse(&ApiEvent::MessageStop), false));
    events
}

/// The body of a non-streamed reply.
pub fn json_message(message: &AssistantReply, meta: &MessageMeta) -> Value {
    json!({
        "id": meta.id, "type": "message", "role": "assistant", "model": meta.model,
        "content": message.content,
        "stop_reason": message.stop_reason.as_str(), "stop_sequence": null,
        "usage": {
            "input_tokens": meta.input_tokens, "output_tokens": output_tokens(message),
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "service_tier": "standard",
        },
    })
}

/// The body of an HTTP error reply.
pub fn error_body(status: u16) -> Value {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": format!("mock HTTP {status}")}})
}

/// A rough token estimate of a request body: a quarter of its `messages` JSON, at least 1.
pub fn estimate_input_tokens(body: &Value) -> u64 {
    let len = body.get("messages").map(|messages| messages.to_string().len()).unwrap_or(0);
    (len as u64 / 4).max(1)
}

fn output_tokens(message: &AssistantReply) -> u64 {
    message
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text: text_or_thought }
            | ContentBlock::Thinking { thinking: text_or_thought, .. } => {
                (text_or_thought.len() as u64 / 4).max(1)
            }
            ContentBlock::ToolUse { .. } => 10,
            _ => 0,
        })
        .sum()
}

/// One SSE event: `event: <its type>` and its data as compact JSON.
fn sse(event: &ApiEvent) -> Bytes {
    let data = serde_json::to_value(event).unwrap_or(Value::Null);
    let name = data["type"].as_str().unwrap_or("unknown");
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// Cuts a string in `parts` pieces of about as many characters each (fewer when it is shorter);
/// two parts is [`halves`].
fn pieces(text: &str, parts: usize) -> Vec<&str> {
    if parts <= 2 {
        return if parts == 2 { halves(text) } else { vec![text] };
    }
    let chars = text.chars().count();
    let size = chars.div_ceil(parts).max(1);
    let mut out = Vec::new();
    let mut start = 0;
    for (n, (at, _)) in text.char_indices().enumerate() {
        if n > 0 && n % size == 0 {
            out.push(&text[start..at]);
            start = at;
        }
    }
    out.push(&text[start..]);
    out
}

/// Cuts a string in two on a character boundary; a string of one character or none stays whole.
fn halves(text: &str) -> Vec<&str> {
    if text.chars().nth(1).is_none() {
        return vec![text];
    }
    let mut cut = text.len() / 2;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    vec![&text[..cut], &text[cut..]]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::reply::StopReason;

    fn meta() -> MessageMeta {
        MessageMeta { id: "msg_mock_1".into(), model: "claude-test".into(), input_tokens: 42 }
    }

    /// Splits one event into its name and parsed data, checking the framing byte for byte.
    fn frame(bytes: &Bytes) -> (String, Value) {
        let text = std::str::from_utf8(bytes).unwrap();
        let body = text.strip_suffix("\n\n").expect("an event ends with a blank line");
        let (event_line, data_line) = body.split_once('\n').expect("two lines");
        assert!(!data_line.contains('\n'), "one data line: {text:?}");
        let event = event_line.strip_prefix("event: ").expect("event line");
        let data = data_line.strip_prefix("data: ").expect("data line");
        (event.to_owned(), serde_json::from_str(data).unwrap())
    }

    #[test]
    fn a_dripped_reply_cuts_its_text_in_as_many_paced_deltas_and_holds_halfway() {
        let text = "héllo wörld, a reply in pieces";
        let message = AssistantReply::text(text);
        let pace = Pace { drip: Some((6, Duration::from_millis(30))), hold: Some("half".into()) };
        let paced = paced_events(&message, &meta(), &pace);
        let mut deltas = Vec::new();
        let mut held_after = None;
        for step in &paced {
            match step {
                Paced::Send { wait, bytes } => {
                    let (_, data) = frame(bytes);
                    if let Some(delta) = data["delta"]["text"].as_str() {
                        let expected =
                            if deltas.is_empty() { Duration::ZERO } else { Duration::from_millis(30) };
                        assert_eq!(*wait, expected);
                        deltas.push(delta.to_owned());
                    } else {
                        assert_eq!(*wait, Duration::ZERO, "only text deltas wait");
                    }
                }
                Paced::Hold(gate) => {
                    assert_eq!(gate, "half");
                    held_after = Some(deltas.len());
                }
            }
        }
        assert_eq!(deltas.len(), 6);
        assert_eq!(deltas.concat(), text);
        assert_eq!(held_after, Some(3));
        let plain = paced_events(&message, &meta(), &Pace::default());
        let plain: Vec<Bytes> = plain
            .into_iter()
            .map(|step| match step {
                Paced::Send { wait, bytes } if wait.is_zero() => bytes,
                other => panic!("the default pace neither waits nor holds: {other:?}"),
            })
            .collect();
        assert_eq!(plain, sse_events(&message, &meta()), "the default pace is the real API's shape");
    }

    #[test]
    fn a_text_reply_streams_the_events_of_the_real_api_in_order() {
        let got: Vec<(String, Value)> =
            sse_events(&AssistantReply::text("héllo"), &meta()).iter().map(frame).collect();
        let usage0 = json!({"input_tokens": 42, "output_tokens": 1, "cache_creation_input_tokens": 0,
                            "cache_read_input_tokens": 0, "service_tier": "standard"});
        let expected = [
            (
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_mock_1", "type": "message",
                "role": "assistant", "model": "claude-test", "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": usage0}}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ),
            ("ping", json!({"type": "ping"})),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "hé"}}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "llo"}}),
            ),
            ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            (
                "message_delta",
                json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": {"input_tokens": 42, "output_tokens": 1, "cache_creation_input_tokens": 0,
                          "cache_read_input_tokens": 0}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ]
        .map(|(event, data)| (event.to_owned(), data));
        assert_eq!(got, expected);
    }

    #[test]
    fn a_tool_use_streams_its_input_as_json_deltas_that_rejoin_to_the_input() {
        let input = json!({"order_id": "7", "note": "ünïcode"});
        let message = AssistantReply {
            content: vec![
                ContentBlock::Text { text: "x".into() },
                ContentBlock::ToolUse { id: "toolu_1".into(), name: "lookup".into(), input: input.clone() },
            ],
            stop_reason: StopReason::ToolUse,
        };
        let data: Vec<Value> = sse_events(&message, &meta()).iter().map(|bytes| frame(bytes).1).collect();
        let types: Vec<&str> = data.iter().map(|event| event["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(
            data[5]["content_block"],
            json!({"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}})
        );
        let partial: String =
            data[6..8].iter().map(|event| event["delta"]["partial_json"].as_str().unwrap()).collect();
        assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), input);
        assert_eq!(data[9]["delta"]["stop_reason"], "tool_use");
        assert_eq!(data[9]["usage"]["output_tokens"], 11);
    }

    #[test]
    fn a_thinking_block_streams_its_thinking_then_its_signature_before_the_text() {
        let message = AssistantReply {
            content: vec![
                ContentBlock::Thinking { thinking: "hmm, ok".into(), signature: "sig".into() },
                ContentBlock::Text { text: "hi".into() },
            ],
            stop_reason: StopReason::EndTurn,
        };
        let data: Vec<Value> = sse_events(&message, &meta()).iter().map(|bytes| frame(bytes).1).collect();
        assert_eq!(data[1]["content_block"], json!({"type": "thinking", "thinking": "", "signature": ""}));
        let deltas: Vec<&Value> = data.iter().filter(|e| e["index"] == 0 && e["delta"].is_object()).collect();
        assert_eq!(
            deltas.iter().map(|e| e["delta"].clone()).collect::<Vec<_>>(),
            [
                json!({"type": "thinking_delta", "thinking": "hmm"}),
                json!({"type": "thinking_delta", "thinking": ", ok"}),
                json!({"type": "signature_delta", "signature": "sig"}),
            ]
        );
        assert_eq!(data[7]["content_block"], json!({"type": "text", "text": ""}), "{data:?}");
        let paced = paced_events(&message, &meta(), &Pace::default()).len();
        assert_eq!(paced, data.len(), "thinking deltas are not text deltas to pace");
    }

    #[test]
    fn a_non_streamed_reply_is_the_finished_message() {
        let body = json_message(&AssistantReply::text("done"), &meta());
        assert_eq!(body["content"], json!([{"type": "text", "text": "done"}]));
        assert_eq!(body["stop_reason"], "end_turn");
        assert_eq!(body["usage"]["input_tokens"], 42);
    }

    #[test]
    fn error_bodies_name_the_anthropic_error_type_of_the_status() {
        assert_eq!(error_body(500)["error"]["type"], "api_error");
        assert_eq!(error_body(529)["error"]["type"], "overloaded_error");
        assert_eq!(error_body(429)["error"]["message"], "mock HTTP 429");
    }
}
