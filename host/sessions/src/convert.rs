//! The state machine's values (`tollgate_engine::session`) as the store's (`tollgate_store`):
//! one function per type, no decisions.

use serde::Serialize;
use serde_json::value::RawValue;
use tollgate_engine::session::{self as engine, ItemKind, view};
use tollgate_store as store;

/// A JSON value as the raw text the store keeps.
pub fn raw(value: &impl Serialize) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).expect("engine values always serialize")
}

/// An item.
pub fn item(item: engine::NewItem) -> store::NewItem {
    store::NewItem {
        kind: item.kind.as_str().to_owned(),
        uuid: item.uuid,
        turn_id: item.turn_id,
        body: item.body,
    }
}

/// A step.
pub fn step(step: engine::NextStep) -> store::NewStep {
    store::NewStep {
        kind: step.kind.as_str().to_owned(),
        payload: raw(&step.payload),
        start: match step.start {
            engine::Start::Now => store::StepStart::Now,
            engine::Start::OnInterrupt(id) => store::StepStart::OnInterrupt(id),
        },
        only_if_items_after: step
            .only_if_prompts_after
            .map(|seq| (seq, ItemKind::UserPrompt.as_str().to_owned())),
        session_status: step.session_status.map(|status| status.as_str().to_owned()),
    }
}

/// An event.
pub fn event(event: engine::NewEvent) -> store::NewEvent {
    store::NewEvent { kind: event.kind.as_str().to_owned(), payload: raw(&event.payload) }
}

/// A tool call.
pub fn call(call: &engine::CallEntry) -> store::ToolCallRecord {
    store::ToolCallRecord {
        tool_call_id: call.tool_call_id.clone(),
        status: call.state.name().to_owned(),
        record: raw(&call.to_value()),
    }
}

/// The conversation's projection of `items` ([`view::message_parts`] of each, tied to its
/// index, so the store keeps a part only when it keeps the item).
pub fn messages(items: &[store::NewItem]) -> Vec<store::NewMessage> {
    let mut out = Vec::new();
    for (index, item) in items.iter().enumerate() {
        for part in view::message_parts(ItemKind::parse(&item.kind), item.body.get()) {
            let images = (!part.images.is_empty())
                .then(|| serde_json::to_string(&part.images).expect("references serialize"));
            out.push(store::NewMessage {
                item: index,
                role: part.role.to_owned(),
                merge_key: part.merge_key,
                text: part.text,
                images,
            });
        }
    }
    out
}

/// The transcript items among `items` in the form a resume writes them
/// ([`tollgate_protocol::ResumeText`]'s rule), each tied to its index so the store keeps the lines
/// only when it keeps the item; `None` when there is no transcript item.
pub fn transcript(items: &[store::NewItem]) -> Option<store::NewTranscriptChunk> {
    let mut chunk: Option<store::NewTranscriptChunk> = None;
    for (index, item) in
        items.iter().enumerate().filter(|(_, i)| i.kind == ItemKind::ClaudeTranscript.as_str())
    {
        let body = match engine::turn::TranscriptBody::parse(item.body.get()) {
            Ok(body) => body,
            Err(err) => {
                // Never built by this build (`turn::transcript_item`); the plan refuses it too.
                tracing::error!(%err, "a transcript item that does not parse is left out of the resume form");
                continue;
            }
        };
        let mut lines = tollgate_protocol::ResumeText::default();
        lines.push_entries(body.entries.iter().map(|entry| entry.get()));
        if lines.not_compact() > 0 {
            tracing::warn!(uuid = ?item.uuid, "a transcript entry is not compact JSON; the CLI may re-run a finished call");
        }
        let chunk = chunk.get_or_insert_with(|| store::NewTranscriptChunk {
            cli_session_id: String::new(),
            lines: Vec::new(),
        });
        chunk.cli_session_id = body.session_id;
        chunk.lines.push((index, lines.to_string()));
    }
    chunk
}

/// A planned resume's stored transcript as the resume file's text: the chunks as they are, then
/// the entries by [`tollgate_protocol::ResumeText`]'s rule.
pub fn resume_text(transcript: engine::turn::ResumeTranscript) -> tollgate_protocol::ResumeText {
    let mut text = tollgate_protocol::ResumeText::from_blocks(transcript.chunks);
    text.push_entries(transcript.entries.iter().map(|entry| entry.get()));
    text
}

/// A whole transition as one commit, with the projection and resume form of its items.
pub fn commit(t: engine::Transition) -> store::Commit {
    let items: Vec<store::NewItem> = t.items.into_iter().map(item).collect();
    store::Commit {
        messages: messages(&items),
        transcript: transcript(&items),
        finish: match t.finish {
            engine::Finish::Done(output) => store::Finish::Done(raw(&output)),
            engine::Finish::Retry(delay) => store::Finish::Retry(delay),
            engine::Finish::Keep => store::Finish::Keep,
        },
        items,
        tool_calls: t.calls.iter().map(call).collect(),
        interrupts: t
            .interrupts
            .into_iter()
            .map(|i| store::NewInterrupt {
                interrupt_id: i.interrupt_id,
                // The deadline the policy stamped into the request (`turn::with_deadlines`); an
                // unreadable one was never stamped by this build, and waits for ever.
                deadline: tollgate_engine::deadline::first_deadline(&i.request).ok().flatten(),
                request: raw(&i.request.to_value()),
            })
            .collect(),
        close_interrupts: t
            .close_interrupts
            .into_iter()
            .map(|c| store::CloseInterrupt {
                interrupt_id: c.interrupt_id,
                resolution: raw(&c.resolution),
                events: c.events.into_iter().map(event).collect(),
            })
            .collect(),
        steps: t.steps.into_iter().map(step).collect(),
        session: store::SessionUpdate {
            status: t.status.map(|status| status.as_str().to_owned()),
            run_state: t.run_state.map(|state| state.to_raw()),
            add_usage: t.usage,
        },
        events: t.events.into_iter().map(event).collect(),
        cancel: cancel(t.cancel),
    }
}

/// What the commit does with the session's pending cancel request: applied, it is cleared with
/// the audit row that names who cancelled the turn (its `interrupt_id` is the turn's id).
pub fn cancel(change: engine::CancelRequestChange) -> store::CancelChange {
    match change {
        engine::CancelRequestChange::Keep => store::CancelChange::Keep,
        engine::CancelRequestChange::Drop => store::CancelChange::Clear { audit: None },
        engine::CancelRequestChange::Applied(cancelled) => {
            let entry = store::NewAuditEntry {
                principal: cancelled.cancelled_by,
                decision: store::AuditDecision::Cancelled,
                reason: Some(format!("cancelled {}", cancelled.turn_id)),
                tool_name: None,
                input: None,
                edited_input: None,
            };
            store::CancelChange::Clear { audit: Some((cancelled.turn_id, entry)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(kind: ItemKind, body: &str) -> store::NewItem {
        store::NewItem {
            kind: kind.as_str().into(),
            uuid: None,
            turn_id: None,
            body: store::raw(body).unwrap(),
        }
    }

    #[test]
    fn the_resume_form_keeps_each_transcript_items_entries_by_index_without_last_prompt() {
        let items = [
            item(ItemKind::UserPrompt, r#"{"kind":"user_prompt","text":"hi"}"#),
            item(
                ItemKind::ClaudeTranscript,
                r#"{"kind":"claude_transcript","session_id":"cli-1","entries":[{"uuid":"u1","t":"caf\u00e9 x"}]}"#,
            ),
            item(
                ItemKind::ClaudeTranscript,
                r#"{"kind":"claude_transcript","session_id":"cli-2","entries":[{"type":"last-prompt","leafUuid":"u1"},{"uuid":"a1"}]}"#,
            ),
        ];
        let chunk = transcript(&items).expect("a chunk");
        assert_eq!(chunk.cli_session_id, "cli-2", "the last item's CLI session");
        assert_eq!(
            chunk.lines,
            [
                (1, "{\"uuid\":\"u1\",\"t\":\"caf\\u00e9 x\"}\n".to_owned()),
                (2, "{\"uuid\":\"a1\"}\n".to_owned())
            ]
        );
        assert_eq!(transcript(&items[..1]), None, "no transcript item, no chunk");
    }
}
