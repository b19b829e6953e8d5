//! What a running segment streams, written to the store every [`EVENT_FLUSH`] under the step's
//! claim (so a reader tells this attempt's text from a retried one's by step and fence): the
//! [`Flush`] machine decides what to write at each tick from the events it was told, without
//! I/O; [`flush_events`] drives it (receives, sleeps, writes) and times the inline tool calls for
//! their spans.
//!
//! # Why text is written this way (write amplification of streaming)
//!
//! The model's thinking is stored the same way as its text, as `reasoning_delta` blocks with
//! their own offsets (a block of one also ends where the other stream takes over), but has no
//! live row: a client sees it block by block.
//!
//! Streamed text used to be a `text_delta` event per flush: a fenced transaction (session lock,
//! step fence, event row, seq) every 200 ms and a row per 200 ms of text, kept for ever beside the
//! transcript that holds the same text. Now:
//!
//! - **Live**: every flush that has new text overwrites the session's one live-text row
//!   ([`tollgate_store::Store::put_live_text`]: one fenced statement, no event, no seq) with the
//!   text not stored as events yet, and where it starts. It wakes the session's readers
//!   (in-process, and PostgreSQL `NOTIFY` for an API in another process), which send the new
//!   text to SSE clients that asked for it (`?live=true`) and show the whole text in the
//!   snapshot (`live_text`). The commit that ends the step deletes the row: by then the text is
//!   in the transcript and the projection.
//! - **Stored**: one `text_delta` event per text block, with `offset`, its start in the
//!   segment's text in characters: a block ends at the next tool event, at the segment's end, or
//!   when the unstored text reaches [`LIVE_BLOCK_BYTES`] (512). So a client resuming with
//!   `Last-Event-ID` still replays every text the log had (fewer, larger events), one that saw
//!   the live text drops what it has by offset, and a live write stays bounded (it never rewrites
//!   the whole of a long reply, which would cost bytes quadratic in its length).
//!
//! A stale claim writes neither: both are checked against the fence, and `LeaseLost` stops
//! the segment's writer.

use std::time::Duration;

use tokio::sync::mpsc;
use tollgate_claude::SegmentEvent;
use tollgate_engine::events::{EventKind, Payload, TextBlock, ToolCallFinished, ToolCallStarted};
use tollgate_engine::session::{NewEvent, Transition};
use tollgate_store::{Claimed, NewLiveText};
use tracing::warn;

use super::{StepError, Worker};
use crate::telemetry::InlineTools;

/// How often streamed text and events are written while a segment runs.
pub(super) const EVENT_FLUSH: Duration = Duration::from_millis(200);

/// The unstored text at which a flush stores it as a `text_delta` block, so the live-text row it
/// overwrites stays at most about this long (plus one flush of text). A smaller bound stores more
/// rows, a larger one rewrites more bytes each flush: bench `stream_writes` measured 512, 1024
/// and 2048, and 512 is the one whose PostgreSQL WAL per segment is no larger than before
/// (0.9-1.0x, 1.2x and 1.8x for a 24,000-character reply) while rows still drop ~9x.
const LIVE_BLOCK_BYTES: usize = 512;

/// Drives a [`Flush`] for one segment: what arrives on `rx` until the segment's end, written at
/// every tick, the `pending` events (the turn's start) first. Returns the timings of the inline
/// tool calls; a write that fails for good stops it.
pub(super) async fn flush_events(
    worker: Worker,
    claimed: Claimed,
    turn_id: String,
    attempt: i64,
    pending: Vec<NewEvent>,
    mut rx: mpsc::UnboundedReceiver<SegmentEvent>,
) -> Result<InlineTools, StepError> {
    let mut tools = InlineTools::default();
    let mut flush = Flush::new(turn_id, attempt, pending);
    let mut open = true;
    while open {
        let tick = tokio::time::sleep(EVENT_FLUSH);
        tokio::pin!(tick);
        loop {
            tokio::select! {
                event = rx.recv() => match event {
                    Some(event) => {
                        tools.on_event(&event);
                        flush.notify_event(event);
                    }
                    None => { open = false; break; }
                },
                () = &mut tick => break,
            }
        }
        let writes = flush.due(open);
        if let Some(live) = writes.live {
            match worker.store.put_live_text(&claimed, &live).await {
                Ok(()) => flush.notify_live_written(),
                // A hint for readers: the next tick writes the text again.
                Err(err) if err.is_retryable() => warn!(error = %err, "the live text was not written"),
                Err(err) => return Err(err.into()),
            }
        }
        if !writes.events.is_empty() {
            let mut keep = Transition::keep();
            keep.events = writes.events;
            let receipt = worker.commit(&claimed, keep).await?;
            flush.notify_committed(&receipt.event_seqs);
        }
    }
    Ok(tools)
}

/// What one segment's streamed events come to in the store, tick by tick, without I/O: told each
/// event ([`Flush::notify_event`]), it answers at each tick what to write ([`Flush::due`]) and is
/// told what was written ([`Flush::notify_live_written`], [`Flush::notify_committed`]).
#[derive(Debug)]
pub(super) struct Flush {
    turn_id: String,
    attempt: i64,
    /// Events not handed out to commit yet.
    pending: Vec<NewEvent>,
    streams: Streams,
    /// The kinds of the events last handed out to commit, until they are committed.
    committing: Vec<EventKind>,
}

/// What to write at a tick, in this order.
#[derive(Debug, Default)]
pub(super) struct Writes {
    /// The live-text row to overwrite (then [`Flush::notify_live_written`]); it covers the
    /// blocks in `events`, so a reader never finds the log ahead of it with a gap between.
    pub live: Option<NewLiveText>,
    /// The events to commit (then [`Flush::notify_committed`]).
    pub events: Vec<NewEvent>,
}

impl Flush {
    /// The flush of a segment of `turn_id`'s `attempt`, with `pending` to commit first.
    pub(super) fn new(turn_id: String, attempt: i64, pending: Vec<NewEvent>) -> Self {
        Flush { turn_id, attempt, pending, streams: Streams::default(), committing: Vec::new() }
    }

    /// An event the segment streamed.
    pub(super) fn notify_event(&mut self, event: SegmentEvent) {
        push_event(&mut self.pending, &mut self.streams, &self.turn_id, self.attempt, event);
    }

    /// What to write now: at a tick while the segment runs (`open`), or once its events ended.
    /// A stream's text becomes a stored block when it reaches [`LIVE_BLOCK_BYTES`] or at the end;
    /// the live row is written while the segment runs, when its text changed or its last write
    /// failed.
    pub(super) fn due(&mut self, open: bool) -> Writes {
        let (turn_id, attempt) = (self.turn_id.as_str(), self.attempt);
        for stream in [&mut self.streams.reasoning, &mut self.streams.text] {
            if !open || stream.unstored_bytes() >= LIVE_BLOCK_BYTES {
                self.pending.extend(stream.block_event(turn_id, attempt));
            }
        }
        let text = &self.streams.text;
        let live = (open && text.unwritten()).then(|| text.live(turn_id, attempt));
        let events = std::mem::take(&mut self.pending);
        self.committing = events.iter().map(|event| event.kind).collect();
        Writes { live, events }
    }

    /// The live row of the last [`Flush::due`] is written.
    pub(super) fn notify_live_written(&mut self) {
        self.streams.text.written();
    }

    /// The events of the last [`Flush::due`] are committed, with these seqs.
    pub(super) fn notify_committed(&mut self, seqs: &[i64]) {
        let text = &mut self.streams.text;
        if text.from_seq.is_none() {
            text.from_seq = self
                .committing
                .iter()
                .zip(seqs)
                .find_map(|(kind, seq)| (*kind == EventKind::TextDelta).then_some(*seq));
        }
        text.committed = text.stored;
        self.committing.clear();
    }
}

/// What a segment streams as text-like blocks: its text (also written live) and its thinking.
#[derive(Debug)]
struct Streams {
    text: StreamedText,
    reasoning: StreamedText,
}

impl Default for Streams {
    fn default() -> Self {
        Streams {
            text: StreamedText::of(Payload::TextDelta),
            reasoning: StreamedText::of(Payload::ReasoningDelta),
        }
    }
}

impl Streams {
    /// The `text_delta` and `reasoning_delta` events of what is not stored yet, in the order it
    /// streamed (at most one of them has any: a change of stream stores the other's block).
    fn block_events(&mut self, turn_id: &str, attempt: i64) -> impl Iterator<Item = NewEvent> {
        let reasoning = self.reasoning.block_event(turn_id, attempt);
        reasoning.into_iter().chain(self.text.block_event(turn_id, attempt))
    }
}

/// The text a segment streamed: all of it, how much of it the event log has (and from which
/// seq), and how much the live-text row has. The same for its thinking, stored as
/// `reasoning_delta` blocks (and written to no live row).
#[derive(Debug)]
struct StreamedText {
    /// The event of its stored blocks: `text_delta` or `reasoning_delta`.
    event: fn(TextBlock) -> Payload,
    /// Every text delta so far, joined.
    whole: String,
    /// Characters of `whole`.
    chars: usize,
    /// Bytes and characters of `whole` in `text_delta` events (committed or about to be).
    stored: (usize, usize),
    /// Bytes and characters of `whole` in committed `text_delta` events: where the live row starts.
    committed: (usize, usize),
    /// The seq of the first of them.
    from_seq: Option<i64>,
    /// Bytes of `whole` the live-text row covers (stored or in its text).
    live: usize,
}

impl StreamedText {
    fn of(event: fn(TextBlock) -> Payload) -> Self {
        StreamedText {
            event,
            whole: String::new(),
            chars: 0,
            stored: (0, 0),
            committed: (0, 0),
            from_seq: None,
            live: 0,
        }
    }

    fn push(&mut self, delta: &str) {
        self.whole.push_str(delta);
        self.chars += delta.chars().count();
    }

    /// The block event of the text not stored yet (`None` when there is none), which is then
    /// stored.
    fn block_event(&mut self, turn_id: &str, attempt: i64) -> Option<NewEvent> {
        let (bytes, chars) = self.stored;
        if bytes == self.whole.len() {
            return None;
        }
        let block = &self.whole[bytes..];
        let block = TextBlock {
            turn_id: turn_id.to_owned(),
            attempt,
            offset: u64::try_from(chars).unwrap_or(u64::MAX),
            text: block.to_owned(),
        };
        let event = (self.event)(block).into();
        self.stored = (self.whole.len(), self.chars);
        Some(event)
    }

    fn unstored_bytes(&self) -> usize {
        self.whole.len() - self.stored.0
    }

    /// The live-text row: the text after the committed blocks, and where it starts.
    fn live(&self, turn_id: &str, attempt: i64) -> NewLiveText {
        NewLiveText {
            turn_id: turn_id.to_owned(),
            attempt,
            offset: i64::try_from(self.committed.1).unwrap_or(i64::MAX),
            from_seq: self.from_seq,
            text: self.whole[self.committed.0..].to_owned(),
        }
    }

    fn unwritten(&self) -> bool {
        self.live != self.whole.len()
    }

    fn written(&mut self) {
        self.live = self.whole.len();
    }
}

fn push_event(
    pending: &mut Vec<NewEvent>,
    streams: &mut Streams,
    turn_id: &str,
    attempt: i64,
    event: SegmentEvent,
) {
    match event {
        SegmentEvent::TextDelta { text: delta } => {
            // The thinking before the text goes first, so the log keeps the order it streamed in.
            pending.extend(streams.reasoning.block_event(turn_id, attempt));
            streams.text.push(&delta);
        }
        SegmentEvent::ReasoningDelta { text: delta } => {
            pending.extend(streams.text.block_event(turn_id, attempt));
            streams.reasoning.push(&delta);
        }
        SegmentEvent::ToolCallStarted { tool_use_id, name, kind, input } => {
            // The text before the call goes first, so the log keeps the order it streamed in.
            pending.extend(streams.block_events(turn_id, attempt));
            pending.push(
                Payload::ToolCallStarted(ToolCallStarted {
                    turn_id: turn_id.to_owned(),
                    tool_call_id: tool_use_id,
                    tool_name: name,
                    kind: Some(kind),
                    arguments: input,
                    attempt,
                    deferred: false,
                })
                .into(),
            );
        }
        SegmentEvent::ToolCallFinished { tool_use_id, name, kind, is_error } => {
            pending.extend(streams.block_events(turn_id, attempt));
            pending.push(
                Payload::ToolCallFinished(ToolCallFinished {
                    turn_id: turn_id.to_owned(),
                    attempt: Some(attempt),
                    tool_call_id: tool_use_id,
                    tool_name: name,
                    kind: Some(kind),
                    status: if is_error { "failed" } else { "succeeded" }.to_owned(),
                    deferred: false,
                })
                .into(),
            );
        }
        other => warn!(event = ?other, "an unknown segment event was dropped"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tollgate_engine::catalog::ToolKind;

    use super::*;

    fn say(text: &str) -> SegmentEvent {
        SegmentEvent::TextDelta { text: text.into() }
    }

    fn kinds(events: &[NewEvent]) -> Vec<&str> {
        events.iter().map(|e| e.kind.as_str()).collect()
    }

    fn started() -> NewEvent {
        Payload::TurnStarted(tollgate_engine::events::TurnStarted { turn_id: "t1".into(), attempt: 1 }).into()
    }

    #[test]
    fn each_tick_commits_what_came_and_writes_the_live_text_only_when_it_changed() {
        let mut flush = Flush::new("t1".into(), 1, vec![started()]);
        flush.notify_event(say("Hel"));
        let writes = flush.due(true);
        assert_eq!(kinds(&writes.events), ["turn_started"], "text alone waits for its block's end");
        assert_eq!(writes.live.as_ref().map(|l| l.text.as_str()), Some("Hel"));
        flush.notify_live_written();
        flush.notify_committed(&[1]);
        let idle = flush.due(true);
        assert!(idle.live.is_none() && idle.events.is_empty(), "nothing new, nothing written: {idle:?}");
        flush.notify_event(say("lo"));
        let writes = flush.due(true);
        assert!(writes.events.is_empty());
        assert_eq!(writes.live.map(|l| (l.offset, l.text)), Some((0, "Hello".to_owned())));
    }

    #[test]
    fn a_failed_live_write_is_written_again_at_the_next_tick() {
        let mut flush = Flush::new("t1".into(), 1, Vec::new());
        flush.notify_event(say("Hi"));
        assert!(flush.due(true).live.is_some());
        let again = flush.due(true);
        assert_eq!(again.live.map(|l| l.text), Some("Hi".to_owned()), "written again though nothing came");
        flush.notify_live_written();
        assert!(flush.due(true).live.is_none());
    }

    #[test]
    fn text_past_the_block_size_is_stored_at_the_tick_and_the_live_row_starts_after_it_once_committed() {
        let mut flush = Flush::new("t1".into(), 3, Vec::new());
        let long = "x".repeat(LIVE_BLOCK_BYTES);
        flush.notify_event(say(&long));
        let writes = flush.due(true);
        assert_eq!(kinds(&writes.events), ["text_delta"]);
        let live = writes.live.expect("the live row covers the block about to be committed");
        assert_eq!((live.offset, live.text.len(), live.from_seq), (0, LIVE_BLOCK_BYTES, None));
        flush.notify_live_written();
        flush.notify_committed(&[41]);
        flush.notify_event(say("tail"));
        let live = flush.due(true).live.expect("new text");
        assert_eq!((live.offset, live.text.as_str(), live.from_seq), (512, "tail", Some(41)));
    }

    #[test]
    fn the_end_stores_every_block_and_writes_no_live_row() {
        let mut flush = Flush::new("t1".into(), 1, Vec::new());
        flush.notify_event(SegmentEvent::ReasoningDelta { text: "hmm".into() });
        flush.notify_event(say("Done."));
        let writes = flush.due(false);
        assert!(writes.live.is_none(), "the step's commit takes the text from here");
        assert_eq!(kinds(&writes.events), ["reasoning_delta", "text_delta"]);
        assert!(flush.due(false).events.is_empty(), "nothing is stored twice");
    }

    #[test]
    fn streamed_text_is_stored_once_per_block_with_its_offset_in_characters() {
        let mut pending = Vec::new();
        let mut streams = Streams::default();
        let delta = |t: &str| SegmentEvent::TextDelta { text: t.into() };
        push_event(&mut pending, &mut streams, "t1", 2, delta("Héllo"));
        push_event(&mut pending, &mut streams, "t1", 2, delta(", "));
        assert!(pending.is_empty(), "text alone waits for its block's end");
        let text = &mut streams.text;
        assert!(text.unwritten());
        assert_eq!((text.live("t1", 2).offset, text.live("t1", 2).text.as_str()), (0, "Héllo, "));
        text.written();
        assert!(!text.unwritten(), "the live row has it all");
        let started = SegmentEvent::ToolCallStarted {
            tool_use_id: "tu1".into(),
            name: "lookup".into(),
            kind: ToolKind::Custom,
            input: json!({"order_id": "7"}),
        };
        push_event(&mut pending, &mut streams, "t1", 2, started);
        push_event(&mut pending, &mut streams, "t1", 2, delta("wörld"));
        let text = &mut streams.text;
        pending.extend(text.block_event("t1", 2));
        assert_eq!(text.block_event("t1", 2).map(|e| e.payload), None, "nothing is stored twice");
        let kinds: Vec<&str> = pending.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["text_delta", "tool_call_started", "text_delta"]);
        assert_eq!(
            pending[0].payload,
            json!({"turn_id": "t1", "attempt": 2, "offset": 0, "text": "Héllo, "})
        );
        assert_eq!(pending[2].payload, json!({"turn_id": "t1", "attempt": 2, "offset": 7, "text": "wörld"}));
        assert_eq!(text.whole, "Héllo, wörld");
        assert_eq!(text.unstored_bytes(), 0);
        push_event(&mut pending, &mut streams, "t1", 2, delta("!"));
        let text = &mut streams.text;
        let live = text.live("t1", 2);
        assert_eq!((live.offset, live.text.as_str()), (0, "Héllo, wörld!"), "nothing is committed yet");
        text.committed = text.stored;
        let live = text.live("t1", 2);
        assert_eq!((live.offset, live.text.as_str()), (12, "!"), "the tail after the committed blocks");
    }

    #[test]
    fn thinking_is_stored_as_reasoning_blocks_in_the_order_it_streamed_between_text_and_tool_calls() {
        let mut pending = Vec::new();
        let mut streams = Streams::default();
        let think = |t: &str| SegmentEvent::ReasoningDelta { text: t.into() };
        let say = |t: &str| SegmentEvent::TextDelta { text: t.into() };
        push_event(&mut pending, &mut streams, "t1", 1, think("Let me "));
        push_event(&mut pending, &mut streams, "t1", 1, think("löök."));
        assert!(pending.is_empty(), "thinking alone waits for its block's end");
        push_event(&mut pending, &mut streams, "t1", 1, say("Reading."));
        let read = SegmentEvent::ToolCallStarted {
            tool_use_id: "tu1".into(),
            name: "Read".into(),
            kind: ToolKind::Cli,
            input: json!({"file_path": "/etc/hostname"}),
        };
        push_event(&mut pending, &mut streams, "t1", 1, read);
        push_event(&mut pending, &mut streams, "t1", 1, think("Done."));
        let finished = SegmentEvent::ToolCallFinished {
            tool_use_id: "tu1".into(),
            name: "Read".into(),
            kind: ToolKind::Cli,
            is_error: false,
        };
        push_event(&mut pending, &mut streams, "t1", 1, finished);
        let kinds: Vec<&str> = pending.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(
            kinds,
            ["reasoning_delta", "text_delta", "tool_call_started", "reasoning_delta", "tool_call_finished"]
        );
        assert_eq!(
            pending[0].payload,
            json!({"turn_id": "t1", "attempt": 1, "offset": 0, "text": "Let me löök."})
        );
        assert_eq!(pending[3].payload, json!({"turn_id": "t1", "attempt": 1, "offset": 12, "text": "Done."}));
        assert_eq!(
            pending[2].payload,
            json!({"turn_id": "t1", "attempt": 1, "tool_call_id": "tu1", "tool_name": "Read", "kind": "cli",
                "arguments": {"file_path": "/etc/hostname"}, "deferred": false})
        );
        assert_eq!(pending[4].payload["status"], "succeeded");
    }
}
