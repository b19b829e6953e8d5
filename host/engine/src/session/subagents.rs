//! A subagent's transcript, kept with its session: the item that holds it ([`subagent_item`]),
//! where it goes among a segment's items ([`place`]), and its text in the conversation
//! ([`message_part`]).
//!
//! A subagent (Claude Code's `Task` tool) writes a transcript of its own, which the CLI mirrors
//! apart from the main one. A resume does not need it, so it is never written to a resume file:
//! it is stored for people to read, one item per subagent per segment:
//!
//! ```json
//! {"kind":"subagent","agent_id":"a2a0…","tool_use_id":"toolu_…","entries":[…the CLI's entries, byte for byte…]}
//! ```
//!
//! `tool_use_id` is the main conversation's `Task` call that ran it (from the transcript's
//! `agent_metadata` entry), `null` when the transcript does not say.

use serde_json::Value;
use serde_json::value::RawValue;

use super::view::MessagePart;
use super::{ItemKind, NewItem};

/// The role of a subagent's part of the conversation.
pub const ROLE: &str = "subagent";

/// The item of subagent `agent_id`'s `entries` (byte for byte), in turn `turn_id`.
pub fn subagent_item(turn_id: &str, agent_id: &str, entries: &[Box<RawValue>]) -> NewItem {
    let tool_use_id = entries.iter().find_map(|entry| {
        let value: Value = serde_json::from_str(entry.get()).ok()?;
        (value["type"] == "agent_metadata").then(|| value["toolUseId"].as_str().map(str::to_owned)).flatten()
    });
    let joined: Vec<&str> = entries.iter().map(|e| e.get()).collect();
    // Built by hand so the entries keep their bytes.
    let body = format!(
        r#"{{"kind":"subagent","agent_id":{},"tool_use_id":{},"entries":[{}]}}"#,
        Value::String(agent_id.to_owned()),
        tool_use_id.map_or(Value::Null, Value::String),
        joined.join(",")
    );
    NewItem {
        kind: ItemKind::Subagent,
        uuid: None,
        turn_id: Some(turn_id.to_owned()),
        body: RawValue::from_string(body).expect("a subagent item is JSON"),
    }
}

/// Adds `subagents` to `items`, each right after the transcript item that holds the call that ran
/// it (so the conversation shows the subagent where the main agent asked for it), or at the end
/// when `items` does not hold that call (a deferred segment's entries are stored with its turn).
pub fn place(items: &mut Vec<NewItem>, subagents: Vec<NewItem>) {
    for subagent in subagents {
        let call = serde_json::from_str::<Value>(subagent.body.get())
            .ok()
            .and_then(|body| body["tool_use_id"].as_str().map(|id| format!(r#""id":"{id}""#)));
        let at = call.and_then(|needle| {
            items.iter().rposition(|item| {
                item.kind == ItemKind::ClaudeTranscript && item.body.get().contains(&needle)
            })
        });
        match at {
            Some(at) => items.insert(at + 1, subagent),
            None => items.push(subagent),
        }
    }
}

/// A subagent item's text for the conversation: `<type>: <description>` from its metadata, then
/// the texts of its prompts and replies, oldest first. `None` when it has no text.
pub fn message_part(body: &str) -> Option<MessagePart> {
    let body: Value = serde_json::from_str(body).ok()?;
    let mut lines = Vec::new();
    for entry in body["entries"].as_array().into_iter().flatten() {
        match entry["type"].as_str() {
            Some("agent_metadata") if lines.is_empty() => {
                let kind = entry["agentType"].as_str().unwrap_or("subagent");
                match entry["description"].as_str() {
                    Some(description) => lines.push(format!("{kind}: {description}")),
                    None => lines.push(kind.to_owned()),
                }
            }
            Some("user") if entry["isMeta"] != Value::Bool(true) => {
                lines.extend(text_of(&entry["message"]["content"]))
            }
            Some("assistant") => lines.extend(text_of(&entry["message"]["content"])),
            _ => {}
        }
    }
    (!lines.is_empty()).then(|| MessagePart {
        role: ROLE,
        merge_key: None,
        text: lines.join("\n\n"),
        images: Vec::new(),
    })
}

/// The text of a message's content: a string, or its text blocks joined; `None` when it has none.
fn text_of(content: &Value) -> Option<String> {
    let text = match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|block| block["type"] == "text")
            .filter_map(|block| block["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
        _ => String::new(),
    };
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn raw(value: Value) -> Box<RawValue> {
        serde_json::value::to_raw_value(&value).unwrap()
    }

    fn entries() -> Vec<Box<RawValue>> {
        vec![
            raw(
                json!({"type": "agent_metadata", "agentType": "general-purpose", "description": "look up the order", "toolUseId": "toolu_task"}),
            ),
            raw(
                json!({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": "call lookup_order"}]}}),
            ),
            raw(
                json!({"type": "assistant", "message": {"content": [{"type": "tool_use", "id": "toolu_sub", "name": "x", "input": {}}]}}),
            ),
            raw(
                json!({"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_sub", "content": "denied"}]}}),
            ),
            raw(
                json!({"type": "assistant", "message": {"content": [{"type": "text", "text": "order 7 is delivered"}]}}),
            ),
        ]
    }

    #[test]
    fn a_subagent_item_keeps_the_entries_bytes_and_names_its_task_call() {
        let spaced = RawValue::from_string(r#"{"type": "user",  "x":1}"#.to_owned()).unwrap();
        let mut all = entries();
        all.push(spaced);
        let item = subagent_item("turn-1", "a1", &all);
        assert_eq!(
            (item.kind, item.turn_id.as_deref(), item.uuid),
            (ItemKind::Subagent, Some("turn-1"), None)
        );
        assert!(item.body.get().ends_with(r#",{"type": "user",  "x":1}]}"#), "{}", item.body.get());
        let body: Value = serde_json::from_str(item.body.get()).unwrap();
        assert_eq!((&body["agent_id"], &body["tool_use_id"]), (&json!("a1"), &json!("toolu_task")));
        assert_eq!(body["entries"].as_array().unwrap().len(), 6);
        let untold = subagent_item("turn-1", "a2", &all[1..]);
        assert!(untold.body.get().contains(r#""tool_use_id":null"#));
    }

    #[test]
    fn its_text_is_its_kind_prompts_and_replies() {
        let item = subagent_item("turn-1", "a1", &entries());
        let part = message_part(item.body.get()).unwrap();
        assert_eq!(part.role, "subagent");
        assert_eq!(
            part.text,
            "general-purpose: look up the order\n\ncall lookup_order\n\norder 7 is delivered"
        );
        assert_eq!(message_part(r#"{"kind":"subagent","entries":[]}"#), None);
    }

    #[test]
    fn a_subagent_goes_right_after_the_call_that_ran_it() {
        let transcript = |text: &str| NewItem {
            kind: ItemKind::ClaudeTranscript,
            uuid: None,
            turn_id: None,
            body: RawValue::from_string(format!(
                r#"{{"kind":"claude_transcript","session_id":"s","entries":[{text}]}}"#
            ))
            .unwrap(),
        };
        let mut items = vec![
            transcript(r#"{"type":"user"}"#),
            transcript(
                r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_task"}]}}"#,
            ),
            transcript(r#"{"type":"assistant","message":{"content":[{"type":"text","text":"done"}]}}"#),
        ];
        place(
            &mut items,
            vec![subagent_item("turn-1", "a1", &entries()), subagent_item("turn-1", "a2", &entries()[1..])],
        );
        let kinds: Vec<&str> = items.iter().map(|i| i.kind.as_str()).collect();
        assert_eq!(
            kinds,
            ["claude_transcript", "claude_transcript", "subagent", "claude_transcript", "subagent"]
        );
        assert!(items[2].body.get().contains(r#""agent_id":"a1""#));
    }
}
