//! `GET /v1/sessions/{id}/events`: the session's events as Server-Sent Events, from a seq on.
//!
//! Each SSE event has `id: <seq>` and `event: <kind>`; its data is a [`StreamEvent`]
//! `{"seq","kind","step_id","fence","created_at","payload"}`, the payload byte for byte as stored. A client resumes with the
//! `Last-Event-ID` header or `?after=<seq>`. Live text is grouped by (`payload.turn_id`,
//! `step_id`, `fence`): a retried attempt of a step has a higher fence, so a client drops the
//! text of the attempt it supersedes. `?follow=false` returns what is stored and ends.
//!
//! A segment's text is stored as one `text_delta` per text block (see the Worker's
//! `run_model::flush_events`), so the stored stream shows it block by block. `?live=true` adds
//! the text as it streams, read from the session's live-text row ([`Store::live_text`], woken by
//! the same signal as events): each new part as a `text_delta` without an SSE `id` (not stored,
//! so a reconnect resumes after the last stored event and is sent the live text again from the
//! offset it has none of: this connection's start), with `offset` in characters so a client
//! appends only what it lacks. A stored block that covers text sent live is still sent, byte
//! for byte; its `offset` tells the client it has that text.
//!
//! [`Store::live_text`]: tollgate_store::Store::live_text

use std::convert::Infallible;
use std::time::Duration;

use super::input::{Params, path_ids};
use super::openapi::{LastEventId, ReadErrors, SessionId};
use super::types::{ErrorBody, EventsQuery, StreamError, StreamEvent};
use super::{ApiError, ApiResult, ApiState};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use tollgate_engine::events::{EventKind, TextBlock};

/// Events read per store call.
const PAGE: i64 = 200;
/// The longest wait for a wake-up before the store is read again (the poll fallback).
const POLL: Duration = Duration::from_secs(1);

/// `GET /v1/sessions/{id}/events`.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/events",
    operation_id = "session_events",
    tag = "events",
    summary = "The session's events as Server-Sent Events",
    description = "`text/event-stream`: each event's `id` is its seq, its `event` its kind, its `data` a StreamEvent. A segment's text is stored one `text_delta` per text block; with `live=true` its text also comes as it streams, as `text_delta` events without an `id` (see the `live` parameter). When the store fails mid-stream an `error` event (data: a StreamError) ends the stream; resume with `Last-Event-ID`. Comments (`:`) keep the connection alive every 15 s.",
    params(SessionId, EventsQuery, LastEventId),
    responses(
        (status = 200, description = "The events, live unless `follow=false`", body = StreamEvent, content_type = "text/event-stream"),
        (status = 404, description = "`session_not_found`", body = ErrorBody),
        ReadErrors,
    )
)]
pub(super) async fn stream(
    State(state): State<ApiState>,
    path: Result<Path<Vec<String>>, PathRejection>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> ApiResult {
    let [id] = path_ids(path, ["id"])?;
    let params = Params::parse(query.as_deref(), &["after", "follow", "live"])?;
    let query_after = params.int("after", 0, i64::MAX)?;
    let from_header = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .ok_or_else(|| ApiError::bad("Last-Event-ID", "Last-Event-ID must be an event seq"))?,
        ),
        None => None,
    };
    let after = from_header.or(query_after).unwrap_or(0);
    if after < 0 {
        return Err(ApiError::bad("Last-Event-ID", "Last-Event-ID must be 0 or more"));
    }
    if state.store.session(&id).await?.is_none() {
        return Err(ApiError::no_session(&id));
    }
    let follow = params.boolean("follow")?.unwrap_or(true);
    let live = params.boolean("live")?.unwrap_or(false);
    Ok(Sse::new(events(state, id, after, follow, live))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

struct Cursor {
    state: ApiState,
    session: String,
    after: i64,
    follow: bool,
    /// `?live=true`: what this connection has of a segment's text, to send only what is new.
    live: Option<LiveSent>,
    /// The live text was ahead of the stored text this connection read, and the events are read
    /// again: when that read has nothing new either, the client had that text before it
    /// connected (stored at or before its `Last-Event-ID`).
    gap: bool,
    signal: tollgate_store::EventSignal,
    buffered: std::collections::VecDeque<Event>,
    done: bool,
}

/// How much of one claim's text (step, fence) a live connection has sent, in characters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct LiveSent {
    claim: Option<(i64, i64)>,
    chars: usize,
}

impl LiveSent {
    /// The connection sent `[offset, offset + chars)` of `claim`'s text (a stored block).
    fn stored(&mut self, claim: (i64, i64), offset: usize, chars: usize) {
        if self.claim != Some(claim) {
            *self = LiveSent { claim: Some(claim), chars: 0 };
        }
        if offset <= self.chars {
            self.chars = self.chars.max(offset + chars);
        }
    }

    /// What of a claim's live text (`text`, from character `offset` of its segment's text on)
    /// this connection lacks, counted as sent.
    fn next<'a>(&mut self, claim: (i64, i64), offset: usize, text: &'a str) -> Live<'a> {
        if self.claim != Some(claim) {
            *self = LiveSent { claim: Some(claim), chars: 0 };
        }
        if self.chars < offset {
            // The stored block before it is not read yet (stored before this row was written).
            return Live::Gap;
        }
        let Some(from) = text.char_indices().nth(self.chars - offset).map(|(at, _)| at) else {
            return Live::Nothing;
        };
        let start = self.chars;
        self.chars += text[from..].chars().count();
        Live::Text(start, &text[from..])
    }
}

/// What a live connection sends of a live-text row ([`LiveSent::next`]).
#[derive(Debug, PartialEq, Eq)]
enum Live<'a> {
    /// Nothing new.
    Nothing,
    /// The text it lacks, at this offset.
    Text(usize, &'a str),
    /// Stored text it has not read comes first: read the events again.
    Gap,
}

fn events(
    state: ApiState,
    session: String,
    after: i64,
    follow: bool,
    live: bool,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let signal = state.store.event_signal(&session);
    let live = live.then(LiveSent::default);
    let cursor = Cursor {
        state,
        session,
        after,
        follow,
        live,
        gap: false,
        signal,
        buffered: Default::default(),
        done: false,
    };
    stream::unfold(cursor, |mut cursor| async move {
        loop {
            if let Some(event) = cursor.buffered.pop_front() {
                return Some((Ok(event), cursor));
            }
            if cursor.done {
                return None;
            }
            match cursor.state.store.read_events(&cursor.session, cursor.after, PAGE).await {
                Ok(page) if !page.is_empty() => {
                    cursor.gap = false;
                    for event in page {
                        cursor.after = event.seq;
                        if let Some(sent) = cursor.live.as_mut() {
                            note_stored_text(sent, &event);
                        }
                        cursor.buffered.push_back(sse_event(&event));
                    }
                }
                Ok(_) => {
                    // Nothing stored is new: the live text, then the end or a wait.
                    if cursor.live.is_some() && live_text(&mut cursor).await {
                        continue;
                    }
                    if !cursor.follow {
                        cursor.done = true;
                        continue;
                    }
                    let mut stopping = cursor.state.stopping.clone();
                    tokio::select! {
                        _ = cursor.signal.wait(POLL) => {}
                        _ = stopping.wait_for(|stop| *stop) => cursor.done = true,
                    }
                }
                Err(error) => {
                    // Tell the client and end; it resumes with Last-Event-ID.
                    cursor.done = true;
                    let data = StreamError { error: error.to_string() };
                    let data = serde_json::to_string(&data).expect("serializes");
                    cursor.buffered.push_back(Event::default().event("error").data(data));
                }
            }
        }
    })
}

/// Counts a stored `text_delta` (with an `offset`) as sent to a live connection.
fn note_stored_text(sent: &mut LiveSent, event: &tollgate_store::Event) {
    let Some(claim) = event.step.filter(|_| event.kind == TEXT_DELTA) else { return };
    let Ok(block) = serde_json::from_str::<TextBlock>(event.payload.get()) else { return };
    sent.stored(claim, usize::try_from(block.offset).unwrap_or(usize::MAX), block.text.chars().count());
}

/// Buffers the live text the connection lacks, if any: `true` when it buffered some, or when
/// the events must be read again first (a block stored after they were read). A store error is
/// left to the next read of the events, which reports it.
async fn live_text(cursor: &mut Cursor) -> bool {
    let Ok(Some(live)) = cursor.state.store.live_text(&cursor.session).await else { return false };
    let Some(sent) = cursor.live.as_mut() else { return false };
    let (claim, offset) = ((live.step_id, live.fence), usize::try_from(live.offset).unwrap_or(usize::MAX));
    let mut next = sent.next(claim, offset, &live.text);
    if next == Live::Gap && std::mem::replace(&mut cursor.gap, true) {
        sent.chars = offset;
        next = sent.next(claim, offset, &live.text);
    }
    let (offset, text) = match next {
        Live::Nothing => return false,
        Live::Gap => return true,
        Live::Text(offset, text) => (offset, text),
    };
    cursor.gap = false;
    let payload = serde_json::json!({
        "turn_id": live.turn_id, "attempt": live.attempt, "offset": offset, "text": text, "live": true,
    });
    let data = StreamEvent {
        seq: cursor.after,
        kind: TEXT_DELTA.to_owned(),
        step_id: Some(live.step_id),
        fence: Some(live.fence),
        created_at: live.updated_at,
        payload: serde_json::value::to_raw_value(&payload).expect("serializes"),
    };
    let data = serde_json::to_string(&data).expect("serializes");
    cursor.buffered.push_back(Event::default().event(TEXT_DELTA).data(data));
    true
}

/// The kind of streamed text, stored or live.
const TEXT_DELTA: &str = EventKind::TextDelta.as_str();

fn sse_event(event: &tollgate_store::Event) -> Event {
    let data = StreamEvent {
        seq: event.seq,
        kind: event.kind.clone(),
        step_id: event.step.map(|(step, _)| step),
        fence: event.step.map(|(_, fence)| fence),
        created_at: event.created_at,
        payload: event.payload.clone(),
    };
    let data = serde_json::to_string(&data).expect("serializes");
    Event::default().id(event.seq.to_string()).event(event.kind.clone()).data(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_connection_sends_each_character_of_a_claims_text_once_and_starts_over_for_a_new_claim() {
        let mut sent = LiveSent::default();
        assert_eq!(sent.next((1, 1), 0, "Hé"), Live::Text(0, "Hé"));
        assert_eq!(sent.next((1, 1), 0, "Hé"), Live::Nothing, "nothing new");
        assert_eq!(sent.next((1, 1), 0, "Héllo"), Live::Text(2, "llo"));
        sent.stored((1, 1), 0, 7);
        assert_eq!(sent.next((1, 1), 7, "w"), Live::Text(7, "w"), "a stored block counts as sent");
        assert_eq!(sent.next((1, 1), 12, "more"), Live::Gap, "a block it has not read comes first");
        sent.stored((1, 1), 20, 3);
        assert_eq!(sent.chars, 8, "a block past a gap does not count");
        sent.stored((1, 1), 8, 4);
        assert_eq!(sent.next((1, 1), 12, "more"), Live::Text(12, "more"));
        assert_eq!(sent.next((1, 2), 0, "Re"), Live::Text(0, "Re"), "a retried attempt starts over");
    }
}
