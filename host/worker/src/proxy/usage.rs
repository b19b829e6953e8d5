//! Reading a response's usage while its bytes pass through: the `message_start` and
//! `message_delta` events of an SSE stream, or the finished message of a JSON body.
//!
//! Pure: [`UsageScanner::feed`] takes each chunk as it is forwarded (it never changes or holds
//! back a byte) and [`UsageScanner::finish`] says what the response reported. Only `data:` lines
//! that name `message_start`, `message_delta` or `error` are parsed; a JSON body is kept (up to
//! [`MAX_JSON_BODY`]) and parsed at its end.

use serde_json::Value;

use tollgate_process::metrics::TokenCounts;

/// The longest JSON body kept for its usage; a longer one passes through unread.
pub const MAX_JSON_BODY: usize = 16 * 1024 * 1024;
/// The longest SSE line kept; a longer one passes through unread.
const MAX_LINE: usize = 4 * 1024 * 1024;

/// What a response reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reported {
    /// `message.model`.
    pub model: Option<String>,
    /// `message.id`.
    pub id: Option<String>,
    /// Token counts; `None` when the response carried no usage.
    pub usage: Option<TokenCounts>,
    /// The stop reason.
    pub stop_reason: Option<String>,
    /// An error the body carried (`{"type":"error"}` or an SSE `error` event): its type and message.
    pub error: Option<String>,
}

/// How a body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `text/event-stream`.
    Sse,
    /// `application/json`.
    Json,
    /// Anything else: not read.
    Other,
}

impl BodyKind {
    /// The kind of a `content-type`.
    pub fn of_content_type(content_type: Option<&str>) -> BodyKind {
        let media = content_type.unwrap_or_default().split(';').next().unwrap_or_default().trim();
        if media.eq_ignore_ascii_case("text/event-stream") {
            BodyKind::Sse
        } else if media.eq_ignore_ascii_case("application/json") {
            BodyKind::Json
        } else {
            BodyKind::Other
        }
    }
}

/// Reads usage out of a body as it streams. See the module docs.
#[derive(Debug)]
pub struct UsageScanner {
    kind: BodyKind,
    buffer: Vec<u8>,
    overflow: bool,
    reported: Reported,
}

impl UsageScanner {
    /// A scanner for a body of `kind`.
    pub fn new(kind: BodyKind) -> Self {
        UsageScanner { kind, buffer: Vec::new(), overflow: false, reported: Reported::default() }
    }

    /// Reads one chunk.
    pub fn feed(&mut self, chunk: &[u8]) {
        match self.kind {
            BodyKind::Other => {}
            BodyKind::Json => {
                if self.buffer.len() + chunk.len() > MAX_JSON_BODY {
                    self.overflow = true;
                    self.buffer = Vec::new();
                } else if !self.overflow {
                    self.buffer.extend_from_slice(chunk);
                }
            }
            BodyKind::Sse => {
                let mut rest = chunk;
                while let Some(at) = rest.iter().position(|&b| b == b'\n') {
                    let (head, tail) = rest.split_at(at);
                    if self.overflow {
                        self.overflow = false;
                    } else if self.buffer.is_empty() {
                        self.line(head);
                    } else {
                        self.buffer.extend_from_slice(head);
                        let line = std::mem::take(&mut self.buffer);
                        self.line(&line);
                    }
                    rest = &tail[1..];
                }
                if !self.overflow {
                    if self.buffer.len() + rest.len() > MAX_LINE {
                        self.overflow = true;
                        self.buffer.clear();
                    } else {
                        self.buffer.extend_from_slice(rest);
                    }
                }
            }
        }
    }

    /// What the body reported, once it has ended.
    pub fn finish(mut self) -> Reported {
        match self.kind {
            BodyKind::Sse if !self.overflow && !self.buffer.is_empty() => {
                let line = std::mem::take(&mut self.buffer);
                self.line(&line);
            }
            BodyKind::Json if !self.overflow => {
                if let Ok(body) = serde_json::from_slice::<Value>(&self.buffer) {
                    if body["type"] == "error" {
                        self.reported.error = Some(error_text(&body["error"]));
                    } else {
                        self.reported.model = body["model"].as_str().map(str::to_owned);
                        self.reported.id = body["id"].as_str().map(str::to_owned);
                        self.reported.stop_reason = body["stop_reason"].as_str().map(str::to_owned);
                        if body["usage"].is_object() {
                            let mut usage = TokenCounts::default();
                            merge_usage(&mut usage, &body["usage"]);
                            self.reported.usage = Some(usage);
                        }
                    }
                }
            }
            _ => {}
        }
        self.reported
    }

    fn line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else { return };
        let data = data.strip_suffix(b"\r").unwrap_or(data);
        let named = |needle: &[u8]| data.windows(needle.len()).any(|w| w == needle);
        if !(named(b"\"message_start\"") || named(b"\"message_delta\"") || named(b"\"error\"")) {
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else { return };
        match event["type"].as_str() {
            Some("message_start") => {
                let message = &event["message"];
                self.reported.model = message["model"].as_str().map(str::to_owned);
                self.reported.id = message["id"].as_str().map(str::to_owned);
                let usage = self.reported.usage.get_or_insert_with(TokenCounts::default);
                merge_usage(usage, &message["usage"]);
            }
            Some("message_delta") => {
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    self.reported.stop_reason = Some(reason.to_owned());
                }
                // Counts in `message_delta` are cumulative: they replace the start's.
                let usage = self.reported.usage.get_or_insert_with(TokenCounts::default);
                merge_usage(usage, &event["usage"]);
            }
            Some("error") => self.reported.error = Some(error_text(&event["error"])),
            _ => {}
        }
    }
}

fn merge_usage(usage: &mut TokenCounts, value: &Value) {
    let set = |key: &str, slot: &mut u64| {
        if let Some(n) = value[key].as_u64() {
            *slot = n;
        }
    };
    set("input_tokens", &mut usage.input);
    set("output_tokens", &mut usage.output);
    set("cache_creation_input_tokens", &mut usage.cache_creation);
    set("cache_read_input_tokens", &mut usage.cache_read);
}

fn error_text(error: &Value) -> String {
    let kind = error["type"].as_str().unwrap_or("error");
    match error["message"].as_str() {
        Some(message) => format!("{kind}: {message}"),
        None => kind.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":120,"cache_creation_input_tokens":7,"cache_read_input_tokens":30,"output_tokens":1}}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"say \"message_delta\" here"}}"#,
        "\n\n",
        "event: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":42}}"#,
        "\n\n",
        "event: message_stop\n",
        r#"data: {"type":"message_stop"}"#,
        "\n\n",
    );

    fn scan(kind: BodyKind, chunks: &[&[u8]]) -> Reported {
        let mut scanner = UsageScanner::new(kind);
        for chunk in chunks {
            scanner.feed(chunk);
        }
        scanner.finish()
    }

    #[test]
    fn a_stream_reports_the_start_input_and_the_delta_output_in_any_chunking() {
        let expected = Reported {
            model: Some("claude-sonnet-4-5".into()),
            id: Some("msg_1".into()),
            usage: Some(TokenCounts { input: 120, output: 42, cache_creation: 7, cache_read: 30 }),
            stop_reason: Some("end_turn".into()),
            error: None,
        };
        let bytes = STREAM.as_bytes();
        assert_eq!(scan(BodyKind::Sse, &[bytes]), expected);
        for cut in [1, 7, 64, 200, bytes.len() - 1] {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(scan(BodyKind::Sse, &[a, b]), expected, "cut at {cut}");
        }
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(scan(BodyKind::Sse, &bytewise), expected);
        let crlf = STREAM.replace('\n', "\r\n");
        assert_eq!(scan(BodyKind::Sse, &[crlf.as_bytes()]), expected);
    }

    #[test]
    fn a_json_message_and_an_error_body_are_read_at_their_end() {
        let body = br#"{"id":"msg_2","type":"message","model":"claude-haiku-4-5","stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":9}}"#;
        let (a, b) = body.split_at(20);
        let reported = scan(BodyKind::Json, &[a, b]);
        assert_eq!(reported.model.as_deref(), Some("claude-haiku-4-5"));
        assert_eq!(reported.usage, Some(TokenCounts { input: 5, output: 9, ..TokenCounts::default() }));
        let error = scan(
            BodyKind::Json,
            &[br#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#],
        );
        assert_eq!(error.error.as_deref(), Some("overloaded_error: busy"));
        assert_eq!(error.usage, None);
        let sse_error = scan(
            BodyKind::Sse,
            &[b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"x\"}}\n\n"],
        );
        assert_eq!(sse_error.error.as_deref(), Some("api_error: x"));
    }

    #[test]
    fn content_types_choose_how_a_body_is_read() {
        assert_eq!(BodyKind::of_content_type(Some("text/event-stream; charset=utf-8")), BodyKind::Sse);
        assert_eq!(BodyKind::of_content_type(Some("application/json")), BodyKind::Json);
        assert_eq!(BodyKind::of_content_type(Some("text/html")), BodyKind::Other);
        assert_eq!(BodyKind::of_content_type(None), BodyKind::Other);
        assert_eq!(scan(BodyKind::Other, &[b"data: {\"type\":\"message_start\"}\n"]), Reported::default());
    }
}
