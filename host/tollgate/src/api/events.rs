//! `GET /v1/sessions/{id}/events`: the session's events as Server-Sent Events, from a seq on.
//!
//! Each SSE event has `id: <seq>` and `event: <kind>`; its data is a [`StreamEvent`]
//! `{"seq","kind","step_id","fence","created_at","payload"}`, the payload byte for byte as stored. A client resumes with the
//! `Last-Event-ID` header or `?after=<seq>`. Live text is grouped by (`payload.turn_id`,
//! `step_id`, `fence`): a retried attempt of a step has a higher fence, so a client drops the
//! text of the attempt it supersedes. `?follow=false` returns what is stored and ends.

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

/// Events read per store call.
const PAGE: i64 = 200;
/// The longest wait for a wake-up before the store is read again (the poll fallback).
const POLL: Duration = Duration::from_secs(1);

/// `GET /v1/sessions/{id}/events`.
#[utoipa::path(
    get,
    path = "/v1/sessions/{id}/events",
    tag = "events",
    summary = "The session's events as Server-Sent Events",
    description = "`text/event-stream`: each event's `id` is its seq, its `event` its kind, its `data` a StreamEvent. When the store fails mid-stream an `error` event (data: a StreamError) ends the stream; resume with `Last-Event-ID`. Comments (`:`) keep the connection alive every 15 s.",
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
    let params = Params::parse(query.as_deref(), &["after", "follow"])?;
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
    Ok(Sse::new(events(state, id, after, follow))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

struct Cursor {
    state: ApiState,
    session: String,
    after: i64,
    follow: bool,
    signal: tollgate_store::EventSignal,
    buffered: std::collections::VecDeque<Event>,
    done: bool,
}

fn events(
    state: ApiState,
    session: String,
    after: i64,
    follow: bool,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let signal = state.store.event_signal(&session);
    let cursor = Cursor { state, session, after, follow, signal, buffered: Default::default(), done: false };
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
                    for event in page {
                        cursor.after = event.seq;
                        cursor.buffered.push_back(sse_event(&event));
                    }
                }
                Ok(_) if !cursor.follow => cursor.done = true,
                Ok(_) => {
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
