//! The request log: every request the mock served, in arrival order, for assertions.
//!
//! Read [`RecordedRequest`] first. A request is logged when it arrives, before it waits at any gate, so a
//! test can read the body of a request that is still parked. Control requests (`/__mock/…`) are not logged.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use http::HeaderMap;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;
use tollgate_protocol::ContentBlock;

use crate::reply::Reply;

/// One request as the mock received and answered it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedRequest {
    /// 1 for the first request, then 2, …
    pub seq: u64,
    /// `POST`, `HEAD`, …
    pub method: String,
    /// The path with its query, e.g. `/v1/messages?beta=true`.
    pub path: String,
    /// Every header, names in lower case; values of `x-api-key` and `authorization` longer than 6
    /// characters are cut to 6 and `...` (the dummy key `dummy` stays whole).
    pub headers: BTreeMap<String, String>,
    /// The body, when it is JSON.
    pub body: Option<Value>,
    /// The body as text (lossy UTF-8, at most 2,000 bytes), when it is not empty and not JSON.
    pub raw_body: Option<String>,
    /// The gates the request waits at before its reply, in order.
    pub gates: Vec<String>,
    /// The reply chosen.
    pub reply: Reply,
}

impl RecordedRequest {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// Whether this is a model call: `POST /v1/messages` with any query.
    pub fn is_messages_call(&self) -> bool {
        self.method == "POST" && self.path.split('?').next() == Some("/v1/messages")
    }

    /// The body's `stream` flag.
    pub fn is_streaming(&self) -> bool {
        self.body.as_ref().and_then(|body| body.get("stream")).and_then(Value::as_bool).unwrap_or(false)
    }

    /// The text and error flag of the `tool_result` for `tool_use_id` this model call carries.
    pub fn tool_result(&self, tool_use_id: &str) -> Option<(String, bool)> {
        tool_result(self.body.as_ref()?, tool_use_id)
    }
}

/// The text and error flag of the `tool_result` for `tool_use_id` in a Messages API request body
/// (text parts joined by newlines, exactly as the CLI sent them).
pub fn tool_result(body: &Value, tool_use_id: &str) -> Option<(String, bool)> {
    let blocks =
        body["messages"].as_array()?.iter().flat_map(|message| message["content"].as_array()).flatten();
    blocks.filter_map(|block| serde_json::from_value::<ContentBlock>(block.clone()).ok()).find_map(|block| {
        let ContentBlock::ToolResult { tool_use_id: id, content, is_error } = block else { return None };
        if id != tool_use_id {
            return None;
        }
        let text = match content {
            Some(Value::String(text)) => text,
            Some(Value::Array(parts)) => {
                parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n")
            }
            _ => String::new(),
        };
        Some((text, is_error.unwrap_or(false)))
    })
}

/// Headers whose values are secrets.
const MASKED: [&str; 2] = ["x-api-key", "authorization"];
const RAW_BODY_LIMIT: usize = 2000;

/// Turns a header map into the logged form.
pub(crate) fn logged_headers(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut logged: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let mut value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        if MASKED.contains(&name.as_str()) && value.chars().count() > 6 {
            value = value.chars().take(6).chain("...".chars()).collect();
        }
        logged
            .entry(name.as_str().to_owned())
            .and_modify(|existing| {
                existing.push_str(", ");
                existing.push_str(&value);
            })
            .or_insert(value);
    }
    logged
}

/// Splits a body into its JSON form or its text form.
pub(crate) fn logged_body(raw: &[u8]) -> (Option<Value>, Option<String>) {
    if raw.is_empty() {
        return (None, None);
    }
    match serde_json::from_slice(raw) {
        Ok(json) => (Some(json), None),
        Err(_) => {
            let cut = &raw[..raw.len().min(RAW_BODY_LIMIT)];
            (None, Some(String::from_utf8_lossy(cut).into_owned()))
        }
    }
}

/// The log, with a watch counter of its length for waiters.
#[derive(Debug)]
pub(crate) struct RequestLog {
    requests: Mutex<Vec<RecordedRequest>>,
    len: watch::Sender<usize>,
}

impl RequestLog {
    pub(crate) fn new() -> Self {
        RequestLog { requests: Mutex::new(Vec::new()), len: watch::Sender::new(0) }
    }

    /// Appends a request, numbering it.
    pub(crate) fn push(&self, mut request: RecordedRequest) {
        let mut requests = self.requests.lock().expect("request log lock");
        request.seq = requests.len() as u64 + 1;
        requests.push(request);
        let len = requests.len();
        drop(requests);
        self.len.send_replace(len);
    }

    pub(crate) fn all(&self) -> Vec<RecordedRequest> {
        self.requests.lock().expect("request log lock").clone()
    }

    /// Waits until at least `count` requests are logged; on timeout returns how many there are.
    pub(crate) async fn wait_for(
        &self,
        count: usize,
        timeout: Duration,
    ) -> Result<Vec<RecordedRequest>, usize> {
        let mut len = self.len.subscribe();
        match tokio::time::timeout(timeout, len.wait_for(|len| *len >= count)).await {
            Ok(_) => Ok(self.all()),
            Err(_) => Err(*self.len.borrow()),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    #[test]
    fn api_keys_are_cut_but_a_dummy_key_stays_whole() {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("dummy"));
        headers.insert("authorization", HeaderValue::from_static("Bearer sk-secret-value"));
        headers.append("anthropic-beta", HeaderValue::from_static("a"));
        headers.append("anthropic-beta", HeaderValue::from_static("b"));
        let logged = logged_headers(&headers);
        assert_eq!(logged["x-api-key"], "dummy");
        assert_eq!(logged["authorization"], "Bearer...");
        assert_eq!(logged["anthropic-beta"], "a, b");
    }

    #[test]
    fn a_body_is_kept_as_json_or_else_as_text() {
        assert_eq!(logged_body(br#"{"a":1}"#), (Some(serde_json::json!({"a": 1})), None));
        assert_eq!(logged_body(b"not json"), (None, Some("not json".to_owned())));
        assert_eq!(logged_body(b""), (None, None));
    }
}
