//! Helpers: a small HTTP client over hyper, an SSE reader, and request bodies shaped like the CLI's.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

/// Long enough for a loaded 2-core machine; a wait that times out fails the test with the mock's state.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A finished HTTP exchange.
#[derive(Debug)]
pub struct HttpReply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl HttpReply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|err| {
            panic!("body is not JSON ({err}): {:?}", String::from_utf8_lossy(&self.body))
        })
    }

    pub fn content_type(&self) -> &str {
        self.headers.get(http::header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).unwrap_or("")
    }

    /// The SSE events as (event name, parsed data), checking each event's framing.
    pub fn sse(&self) -> Vec<(String, Value)> {
        let text = std::str::from_utf8(&self.body).expect("SSE is UTF-8");
        assert!(text.ends_with("\n\n"), "the stream ends with a complete event: {text:?}");
        text.trim_end_matches('\n')
            .split("\n\n")
            .map(|event| {
                let (name, data) =
                    event.split_once('\n').unwrap_or_else(|| panic!("event without data: {event:?}"));
                let name = name.strip_prefix("event: ").unwrap_or_else(|| panic!("no event line: {event:?}"));
                let data = data.strip_prefix("data: ").unwrap_or_else(|| panic!("no data line: {event:?}"));
                (name.to_owned(), serde_json::from_str(data).unwrap_or_else(|err| panic!("{err}: {data}")))
            })
            .collect()
    }

    /// The assistant message an SSE stream spells: its content blocks (tool inputs re-parsed from their
    /// JSON deltas) and its stop reason.
    pub fn streamed_message(&self) -> (Vec<Value>, String) {
        let mut blocks: Vec<Value> = Vec::new();
        let mut partial_json: Vec<String> = Vec::new();
        let mut stop_reason = String::new();
        for (name, data) in self.sse() {
            assert_eq!(data["type"], name.as_str(), "event name and data type agree");
            match name.as_str() {
                "content_block_start" => {
                    assert_eq!(data["index"], blocks.len(), "blocks start in index order");
                    blocks.push(data["content_block"].clone());
                    partial_json.push(String::new());
                }
                "content_block_delta" => {
                    let index = data["index"].as_u64().unwrap() as usize;
                    match data["delta"]["type"].as_str().unwrap() {
                        "text_delta" => {
                            let text = format!(
                                "{}{}",
                                blocks[index]["text"].as_str().unwrap(),
                                data["delta"]["text"].as_str().unwrap()
                            );
                            blocks[index]["text"] = json!(text);
                        }
                        "input_json_delta" => {
                            partial_json[index].push_str(data["delta"]["partial_json"].as_str().unwrap())
                        }
                        other => panic!("unexpected delta {other}"),
                    }
                }
                "content_block_stop" => {
                    let index = data["index"].as_u64().unwrap() as usize;
                    if blocks[index]["type"] == "tool_use" {
                        blocks[index]["input"] = serde_json::from_str(&partial_json[index]).unwrap();
                    }
                }
                "message_delta" => stop_reason = data["delta"]["stop_reason"].as_str().unwrap().to_owned(),
                "message_start" | "ping" | "message_stop" => {}
                other => panic!("unexpected event {other}"),
            }
        }
        (blocks, stop_reason)
    }
}

/// Sends one request with the CLI's headers of note and reads the whole reply.
pub async fn send(method: Method, url: &str, body: Option<&Value>) -> HttpReply {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let bytes = body.map(|body| Bytes::from(body.to_string())).unwrap_or_default();
    let request = Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", "application/json")
        .header("x-api-key", "dummy")
        .header("authorization", "Bearer a-long-secret-token")
        .header("anthropic-version", "2023-06-01")
        .header("x-app", "cli")
        .body(Full::new(bytes))
        .unwrap();
    let response = tokio::time::timeout(PATIENCE, client.request(request))
        .await
        .expect("the mock answers in time")
        .expect("the request reaches the mock");
    let (parts, body) = response.into_parts();
    let body = tokio::time::timeout(PATIENCE, body.collect()).await.expect("the body ends in time").unwrap();
    HttpReply { status: parts.status, headers: parts.headers, body: body.to_bytes() }
}

pub async fn post(url: &str, body: &Value) -> HttpReply {
    send(Method::POST, url, Some(body)).await
}

/// The URL of the model endpoint, as the CLI calls it.
pub fn messages_url(base: &str) -> String {
    format!("{base}/v1/messages?beta=true")
}

/// A first request of a turn, shaped like the CLI's: a reminder block, the prompt, an environment entry.
pub fn first_request(prompt: &str, stream: bool) -> Value {
    json!({
        "model": "claude-opus-5-5",
        "max_tokens": 128000,
        "stream": stream,
        "system": [{"type": "text", "text": "You are Claude Code."}],
        "tools": [
            {"name": "Read", "input_schema": {"type": "object"}},
            {"name": "mcp__tools__lookup_order", "input_schema": {"type": "object"}},
        ],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\nAttribution…\n</system-reminder>"},
                {"type": "text", "text": prompt},
            ]},
            {"role": "system", "content": "# Environment\n…"},
        ],
    })
}
