//! The conversation as text, for a session snapshot: what the CLI saw and answered in completed
//! turns, then the prompts no completed turn answered yet.

use serde::Serialize;
use serde_json::Value;

use super::turn::HistoryItem;
use super::{RunState, item_kind};

/// One message of the conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: &'static str,
    /// Its text (text blocks joined by blank lines).
    pub text: String,
    /// A prompt no completed turn answered yet (queued, in progress, or of a failed turn).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
}

/// The messages of a session's items, oldest first. Tool calls, tool results and the CLI's hidden
/// entries are left out; unreadable entries are skipped.
pub fn messages(items: &[HistoryItem<'_>], state: &RunState) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    let mut last_assistant_id: Option<String> = None;
    for item in items {
        let body: Value = match serde_json::from_str(item.body) {
            Ok(body) => body,
            Err(_) => continue,
        };
        if item.kind == item_kind::CLAUDE_TRANSCRIPT {
            for entry in body["entries"].as_array().into_iter().flatten() {
                let message = &entry["message"];
                match entry["type"].as_str() {
                    Some("user") if entry["isMeta"] != Value::Bool(true) => {
                        let text = text_of(&message["content"]);
                        if !text.is_empty() {
                            out.push(Message { role: "user", text, pending: false });
                            last_assistant_id = None;
                        }
                    }
                    Some("assistant") => {
                        let text = text_of(&message["content"]);
                        if text.is_empty() {
                            continue;
                        }
                        let id = message["id"].as_str().map(str::to_owned);
                        match out.last_mut() {
                            Some(last)
                                if last.role == "assistant" && id.is_some() && id == last_assistant_id =>
                            {
                                last.text.push_str("\n\n");
                                last.text.push_str(&text);
                            }
                            _ => out.push(Message { role: "assistant", text, pending: false }),
                        }
                        last_assistant_id = id;
                    }
                    _ => {}
                }
            }
        }
    }
    for item in items {
        if item.kind == item_kind::USER_PROMPT
            && item.seq > state.prompts_through
            && let Ok(body) = serde_json::from_str::<Value>(item.body)
            && let Some(text) = body["text"].as_str()
        {
            out.push(Message { role: "user", text: text.to_owned(), pending: true });
        }
    }
    out
}

/// The text blocks of a message's content (a string, or blocks of which the text ones count).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|block| block["type"] == "text")
            .filter_map(|block| block["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    }
}
