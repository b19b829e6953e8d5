//! The conversation as text, for a session snapshot: what the CLI saw and answered in completed
//! turns, then the prompts no completed turn answered yet. A user message's images are listed
//! with it, by reference.

use serde::Serialize;
use serde_json::Value;

use super::turn::HistoryItem;
use super::{ItemKind, RunState};
use crate::media::MediaRef;

/// The key of a stored image reference in a transcript entry (`tollgate_protocol::media`).
const MEDIA_KEY: &str = "tollgate_media";

/// One message of the conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `user`, `assistant`, or `subagent` (what a subagent of the main agent was asked and
    /// answered).
    pub role: &'static str,
    /// Its text (text blocks joined by blank lines).
    pub text: String,
    /// A prompt no completed turn answered yet (queued, in progress, or of a failed turn).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub pending: bool,
    /// A user message's images, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<MediaRef>,
}

/// What one item adds to the conversation: a message, or a part of one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessagePart {
    /// `user`, `assistant` or `subagent`.
    pub role: &'static str,
    /// The assistant API message it belongs to: parts with the same key are one message, their
    /// texts joined by a blank line. `None` for a user message.
    pub merge_key: Option<String>,
    /// Its text.
    pub text: String,
    /// A user message's images: its image blocks whose bytes are stored (by reference), in
    /// order. An assistant part has none (the model writes no images).
    pub images: Vec<MediaRef>,
}

/// The message parts of one item (`kind`, `body`): the text of the user and assistant entries of
/// a CLI transcript item, and a subagent's transcript as one part of role `subagent`
/// ([`super::subagents::message_part`]). Tool calls, tool results, meta prompts and the CLI's
/// hidden entries add nothing; so do other kinds of items and a body that is not JSON. What the
/// store's projection of the conversation keeps, item by item, and what [`messages`] folds.
pub fn message_parts(kind: Option<ItemKind>, body: &str) -> Vec<MessagePart> {
    if kind == Some(ItemKind::Subagent) {
        return super::subagents::message_part(body).into_iter().collect();
    }
    if kind != Some(ItemKind::ClaudeTranscript) {
        return Vec::new();
    }
    let Ok(body) = serde_json::from_str::<Value>(body) else { return Vec::new() };
    let mut parts = Vec::new();
    for entry in body["entries"].as_array().into_iter().flatten() {
        let message = &entry["message"];
        let role = match entry["type"].as_str() {
            Some("user") if entry["isMeta"] != Value::Bool(true) => "user",
            Some("assistant") => "assistant",
            _ => continue,
        };
        let text = text_of(&message["content"]);
        let images = if role == "user" { images_of(&message["content"]) } else { Vec::new() };
        if text.is_empty() && images.is_empty() {
            continue;
        }
        let merge_key = (role == "assistant").then(|| message["id"].as_str().map(str::to_owned)).flatten();
        parts.push(MessagePart { role, merge_key, text, images });
    }
    parts
}

/// The messages of a session's items, oldest first: the [`message_parts`] of every item, parts of
/// one assistant message joined, then the prompts no completed turn answered yet.
pub fn messages(items: &[HistoryItem<'_>], state: &RunState) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    let mut last_key: Option<String> = None;
    for item in items {
        for part in message_parts(item.kind, item.body) {
            match out.last_mut() {
                Some(last)
                    if last.role == "assistant" && part.merge_key.is_some() && part.merge_key == last_key =>
                {
                    last.text.push_str("\n\n");
                    last.text.push_str(&part.text);
                }
                _ => out.push(Message {
                    role: part.role,
                    text: part.text,
                    pending: false,
                    images: part.images,
                }),
            }
            last_key = part.merge_key;
        }
    }
    out.extend(pending_prompts(items, state));
    out
}

/// The user prompts among `items` that no completed turn answered yet (`pending`).
pub fn pending_prompts(items: &[HistoryItem<'_>], state: &RunState) -> Vec<Message> {
    items
        .iter()
        .filter(|item| item.kind == Some(ItemKind::UserPrompt) && item.seq > state.prompts_through)
        .filter_map(|item| {
            let body = serde_json::from_str::<Value>(item.body).ok()?;
            let images = serde_json::from_value(body["images"].clone()).unwrap_or_default();
            Some(Message { role: "user", text: body["text"].as_str()?.to_owned(), pending: true, images })
        })
        .collect()
}

/// The stored image blocks of a message's content: `{"type":"image","source":{"type":"base64",
/// "media_type":…,"data":{"tollgate_media":"sha256:…"}}}`. An image whose bytes are still
/// inline is not listed (it was not stored by reference).
fn images_of(content: &Value) -> Vec<MediaRef> {
    content
        .as_array()
        .into_iter()
        .flatten()
        .filter(|block| block["type"] == "image")
        .filter_map(|block| {
            let source = &block["source"];
            Some(MediaRef {
                digest: source["data"][MEDIA_KEY].as_str()?.to_owned(),
                media_type: source["media_type"].as_str()?.to_owned(),
            })
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn transcript(entries: serde_json::Value) -> String {
        json!({"kind": "claude_transcript", "session_id": "cli", "entries": entries}).to_string()
    }

    #[test]
    fn the_parts_of_a_transcript_item_are_its_user_and_assistant_text_and_nothing_else() {
        let body = transcript(json!([
            {"type": "user", "message": {"content": "refund order 7"}},
            {"type": "user", "isMeta": true, "message": {"content": "Continue from where you left off."}},
            {"type": "assistant", "message": {"id": "msg_1", "content": [
                {"type": "text", "text": "Looking."}, {"type": "tool_use", "name": "x", "input": {}}]}},
            {"type": "user", "message": {"content": [{"type": "tool_result", "content": "ok"}]}},
            {"type": "attachment", "attachment": {"type": "prompt_snapshot"}},
            {"type": "assistant", "message": {"content": "no id"}},
        ]));
        let parts = message_parts(Some(ItemKind::ClaudeTranscript), &body);
        let got: Vec<(&str, Option<&str>, &str)> =
            parts.iter().map(|p| (p.role, p.merge_key.as_deref(), p.text.as_str())).collect();
        assert_eq!(
            got,
            [
                ("user", None, "refund order 7"),
                ("assistant", Some("msg_1"), "Looking."),
                ("assistant", None, "no id")
            ]
        );
        assert!(message_parts(Some(ItemKind::UserPrompt), &body).is_empty(), "only transcript items");
        assert!(message_parts(Some(ItemKind::ClaudeTranscript), "not json").is_empty());
    }

    #[test]
    fn a_user_entrys_stored_images_are_listed_with_its_text_and_a_pending_prompts_with_it() {
        let digest = format!("sha256:{}", "d".repeat(64));
        // As stored: the reference's key is escaped in the entry's text.
        let body = format!(
            r#"{{"kind":"claude_transcript","session_id":"cli","entries":[{{"type":"user","message":{{"role":"user","content":[{{"type":"text","text":"what is this?"}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":{{"tollgate\u005fmedia":"{digest}"}}}}}},{{"type":"image","source":{{"type":"base64","media_type":"image/png","data":"aGk="}}}}]}}}}]}}"#
        );
        let parts = message_parts(Some(ItemKind::ClaudeTranscript), &body);
        let chart = MediaRef { digest: digest.clone(), media_type: "image/png".into() };
        assert_eq!(parts.len(), 1, "{parts:?}");
        assert_eq!(
            (parts[0].text.as_str(), parts[0].images.as_slice()),
            ("what is this?", std::slice::from_ref(&chart))
        );
        let prompt = json!({"kind": "user_prompt", "text": "and this?", "images": [chart]}).to_string();
        let items = [HistoryItem { seq: 2, kind: Some(ItemKind::UserPrompt), body: &prompt }];
        let pending = pending_prompts(&items, &RunState::default());
        assert_eq!(pending[0].images, [chart]);
    }

    #[test]
    fn messages_join_the_parts_of_one_assistant_message_and_end_with_the_unanswered_prompts() {
        let a = transcript(json!([{"type": "assistant", "message": {"id": "m1", "content": "one"}}]));
        let b = transcript(json!([{"type": "assistant", "message": {"id": "m1", "content": "two"}}]));
        let c = transcript(json!([{"type": "assistant", "message": {"id": "m2", "content": "three"}}]));
        let prompt = json!({"kind": "user_prompt", "text": "next"}).to_string();
        let items = [
            HistoryItem { seq: 1, kind: Some(ItemKind::ClaudeTranscript), body: &a },
            HistoryItem { seq: 2, kind: Some(ItemKind::ClaudeTranscript), body: &b },
            HistoryItem { seq: 3, kind: Some(ItemKind::ClaudeTranscript), body: &c },
            HistoryItem { seq: 4, kind: Some(ItemKind::UserPrompt), body: &prompt },
        ];
        let state = RunState { prompts_through: 3, ..RunState::default() };
        let got: Vec<(&str, String, bool)> =
            messages(&items, &state).into_iter().map(|m| (m.role, m.text, m.pending)).collect();
        assert_eq!(
            got,
            [
                ("assistant", "one\n\ntwo".to_owned(), false),
                ("assistant", "three".to_owned(), false),
                ("user", "next".to_owned(), true)
            ]
        );
    }
}
