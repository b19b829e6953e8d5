//! Streamed text (with no event written per flush): a long reply reaches a client
//! live (`?live=true`) and the snapshot (`live_text`) while it streams, a reconnecting client
//! gets it again, and the event log keeps one `text_delta` per text block instead of one per
//! flush. On SQLite under `tollgate serve`, and on PostgreSQL with the API and the Worker in two
//! processes (the live text crosses through the store and `NOTIFY`).

use std::time::Duration;

use serde_json::Value;
use tollgate_api_types::client::SseEvent;

use crate::served::Served;
use crate::world::{Refund, World, api_events};

const WAIT: Duration = Duration::from_secs(90);

/// The reply's text: ~1.2 KB, two blocks of the Worker's 512-byte live-text bound and a tail.
fn long_text() -> String {
    (0..200).map(|i| format!("w{i:04}")).collect::<Vec<_>>().join(" ")
}

/// A reply in 60 deltas of ~20 characters, 50 ms apart (~400 characters a second, a fast model:
/// 15 flushes), parked at gate `hold` halfway (past the first block).
fn script(hold: &str) -> String {
    format!("drip 60 50 ;; hold {hold} ;; say {}", long_text())
}

/// The text of a segment as a client assembles it from `text_delta` events of one claim,
/// stored and live, by `offset` (characters).
#[derive(Debug, Default)]
struct Assembled {
    claim: Option<(i64, i64)>,
    chars: Vec<char>,
    live_events: usize,
    stored_events: usize,
}

impl Assembled {
    fn add(&mut self, event: &SseEvent) {
        if event.event != "text_delta" {
            return;
        }
        let data: Value = serde_json::from_str(&event.data).expect("JSON data");
        let claim = (data["step_id"].as_i64().expect("a step"), data["fence"].as_i64().expect("a fence"));
        if self.claim != Some(claim) {
            *self = Assembled { claim: Some(claim), ..Assembled::default() };
        }
        let payload = &data["payload"];
        let offset = payload["offset"].as_u64().expect("an offset") as usize;
        let text: Vec<char> = payload["text"].as_str().expect("a text").chars().collect();
        assert!(offset <= self.chars.len(), "a gap before offset {offset}: {self:?} {event:?}");
        if offset + text.len() > self.chars.len() {
            self.chars.truncate(offset);
            self.chars.extend(text);
        }
        // A live event has no `id:` of its own (the parser keeps the last one, as SSE does, or
        // has none on a fresh connection): its `seq` is that last stored event's.
        let seq = data["seq"].as_i64().map(|s| s.to_string());
        match &event.id {
            Some(id) => assert_eq!(Some(id), seq.as_ref(), "{event:?}"),
            None => assert_eq!(payload["live"], true, "only live text has no id: {event:?}"),
        }
        if payload["live"] == true {
            self.live_events += 1;
        } else {
            self.stored_events += 1;
        }
    }

    fn text(&self) -> String {
        self.chars.iter().collect()
    }
}

/// `POST /v1/sessions` of `session` with its first `message`; asserts it was created.
async fn create(http: &reqwest::Client, url: &str, session: &str, message: &str) {
    let body = serde_json::json!({"session_id": session, "message": message}).to_string();
    let created = http
        .post(format!("{url}/v1/sessions"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("create the session");
    assert_eq!(created.status().as_u16(), 201);
}

/// Reads `events` into `assembled` until `done` holds for what was read (or panics after `WAIT`).
async fn read_until(
    events: &mut crate::world::ApiEvents,
    assembled: &mut Assembled,
    seen: &mut Vec<SseEvent>,
    what: &str,
    done: impl Fn(&Assembled, &[SseEvent]) -> bool,
) {
    let found = tokio::time::timeout(WAIT, async {
        while !done(assembled, seen) {
            let Some(batch) = events.next().await else { return false };
            for event in batch {
                assembled.add(&event);
                seen.push(event);
            }
        }
        true
    })
    .await;
    assert!(matches!(found, Ok(true)), "never {what}; read {seen:#?}");
}

/// The flow both stores run: a long reply parked halfway, seen live, in the snapshot and by a
/// reconnecting client; then finished, with one stored block.
/// With `served`, `tollgate session watch` follows it too, from halfway: it prints the live
/// text, then the stored block that repeats it, each character once.
async fn stream_a_long_reply(world: &World, url: &str, session: &str, served: Option<&Served>) {
    let http = reqwest::Client::new();
    let answer = format!("said: {}", long_text());
    create(&http, url, session, &script("half")).await;
    let mut events = api_events(http.get(format!("{url}/v1/sessions/{session}/events?live=true"))).await;
    let (mut assembled, mut seen) = (Assembled::default(), Vec::new());

    // Halfway: the client has the first half live, while the reply still streams.
    world.mock.wait_for_gate("half", WAIT).await.expect("the reply reached its hold");
    let watch = served.map(|served| {
        let mut command = served.client_command(&["session", "watch", session, "--until-idle"]);
        command.kill_on_drop(true);
        tokio::spawn(async move { command.output().await.expect("run session watch") })
    });
    read_until(&mut events, &mut assembled, &mut seen, "the first half live", |a, _| {
        a.chars.len() >= answer.chars().count() / 2 - 8
    })
    .await;
    let partial = assembled.text();
    assert!(answer.starts_with(&partial) && partial.len() < answer.len(), "{partial:?}");
    assert!(assembled.live_events >= 1, "{seen:#?}");
    let snapshot = world.snapshot(session).await;
    assert_eq!(snapshot.status, "running");
    let live = snapshot.live_text.clone().expect("the snapshot shows the partial text");
    assert_eq!(live.text, partial, "the snapshot has what the client has");
    assert_eq!(Some((live.step_id, live.fence)), assembled.claim);
    let stored = world.events(session).await;
    let blocks = stored.iter().filter(|e| e.kind == "text_delta").count();
    assert!(blocks <= 1, "halfway, at most the first 512-byte block is in the log: {stored:?}");

    // A client reconnecting after the last event before the text gets the partial text (the
    // stored block, if one is stored yet, then the live rest).
    let last_id = seen
        .iter()
        .take_while(|e| e.event != "text_delta")
        .filter_map(|e| e.id.clone())
        .last()
        .expect("a stored event before the text was read");
    let mut again = api_events(
        http.get(format!("{url}/v1/sessions/{session}/events?live=true")).header("Last-Event-ID", last_id),
    )
    .await;
    let (mut reassembled, mut reseen) = (Assembled::default(), Vec::new());
    read_until(&mut again, &mut reassembled, &mut reseen, "the partial text again", |a, _| {
        a.text() == partial
    })
    .await;
    drop(again);

    world.mock.open_gate("half");
    read_until(&mut events, &mut assembled, &mut seen, "the turn's end", |_, seen| {
        seen.iter().any(|e| e.event == "turn_completed")
    })
    .await;
    assert_eq!(assembled.text(), answer, "the client has the whole reply once: {seen:#?}");
    let done = world.wait_idle_after(session, 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(done.live_text, None, "the end supersedes the live text");
    assert_eq!(done.messages.last().map(|m| m.text.as_str()), Some(answer.as_str()));
    let blocks: Vec<Value> = world
        .events(session)
        .await
        .iter()
        .filter(|e| e.kind == "text_delta")
        .map(|e| serde_json::from_str(e.payload.get()).expect("JSON"))
        .collect();
    // ~1.2 KB over 15 or more flushes: a block per 512 bytes, not an event per flush.
    assert!((2..=3).contains(&blocks.len()), "{blocks:?}");
    let mut joined = String::new();
    for block in &blocks {
        assert_eq!(block["offset"].as_u64(), Some(joined.chars().count() as u64), "{blocks:?}");
        joined.push_str(block["text"].as_str().expect("text"));
    }
    assert_eq!(joined, answer, "the stored blocks are the reply, once");
    if let Some(watch) = watch {
        let output = tokio::time::timeout(WAIT, watch).await.expect("watch --until-idle exits").unwrap();
        let printed = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{printed}");
        let assistant: Vec<&str> = printed.lines().filter(|l| l.starts_with("assistant: ")).collect();
        let expected = format!("assistant: {answer}");
        assert_eq!(assistant, [expected.as_str()], "the reply is printed once, whole:\n{printed}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_reply_streams_live_shows_in_the_snapshot_and_is_stored_once_under_serve() {
    let Some(world) = World::new("streaming: serve on SQLite", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let served = Served::start(&world, "serve", None).await;
    stream_a_long_reply(&world, &served.url, "long", Some(&served)).await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_reply_streams_live_from_a_worker_to_an_api_process_on_postgres() {
    let Some(db) = crate::pg_database().await else { return };
    let test = "streaming: api and worker on PostgreSQL";
    let Some(world) = World::on_db(test, Refund::SingleAttemptWithApproval, &db).await else {
        return;
    };
    let served = Served::start_api(&world, "api", &["--insecure-open"]).await;
    let _worker = world.worker("w");
    stream_a_long_reply(&world, &served.url, "long-pg", None).await;
    served.stop().await;
}

/// What the model thinks and does inline is visible: under `tollgate serve`, a reply that thinks,
/// reads a file with the built-in `Read`, runs an allowed `Bash` (the support agent's policy as
/// code allows `cat`) and a custom read streams `reasoning_delta` blocks and a started and a
/// finished event per inline call, CLI tools included, through the API; `tollgate session watch`
/// prints them.
#[tokio::test(flavor = "multi_thread")]
async fn thinking_and_inline_cli_tool_calls_reach_the_event_stream_and_session_watch() {
    let test = "streaming: thinking and inline CLI tools";
    let Some(world) = World::new(test, Refund::SingleAttemptWithApproval).await else { return };
    let served = Served::start(&world, "serve", None).await;
    let (notes, script) = world.thinking_script("think");
    let http = reqwest::Client::new();
    create(&http, &served.url, "think", &script).await;
    let mut watch = served.client_command(&["session", "watch", "think", "--until-idle"]);
    watch.kill_on_drop(true);
    let watch = tokio::spawn(async move { watch.output().await.expect("run session watch") });

    let mut events = api_events(http.get(format!("{}/v1/sessions/think/events", served.url))).await;
    let mut seen: Vec<SseEvent> = Vec::new();
    let ended = tokio::time::timeout(WAIT, async {
        while !seen.iter().any(|e| e.event == "turn_completed" || e.event == "turn_failed") {
            let Some(batch) = events.next().await else { return false };
            seen.extend(batch);
        }
        true
    })
    .await;
    assert!(matches!(ended, Ok(true)), "the turn never ended: {seen:#?}\n{}", world.diagnostics());
    let done = world.wait_idle_after("think", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    let answer = done.messages.last().map(|m| m.text.clone()).unwrap_or_default();
    assert!(answer.contains("order 7 shipped late") && answer.contains("one lamp"), "{answer}");

    let payloads = |kind: &str| -> Vec<Value> {
        seen.iter()
            .filter(|e| e.event == kind)
            .map(|e| serde_json::from_str::<Value>(&e.data).expect("JSON")["payload"].clone())
            .collect()
    };
    let thinking: String = payloads("reasoning_delta")
        .iter()
        .map(|p| p["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(thinking, "the customer asks about order 7all three answered", "{seen:#?}");
    let thoughts = payloads("reasoning_delta");
    assert_eq!(thoughts.len(), 2, "one stored block per thinking block, not per delta: {thoughts:?}");
    assert_eq!(thoughts[1]["offset"], 31, "its offset counts the thinking before it: {thoughts:?}");
    for (name, kind) in [("Read", "cli"), ("Bash", "cli"), ("lookup_order", "custom")] {
        let of =
            |event: &str| payloads(event).into_iter().filter(|p| p["tool_name"] == name).collect::<Vec<_>>();
        let (started, finished) = (of("tool_call_started"), of("tool_call_finished"));
        assert_eq!((started.len(), finished.len()), (1, 1), "{name}: {seen:#?}");
        assert_eq!(
            (started[0]["kind"].as_str(), started[0]["deferred"].as_bool(), finished[0]["status"].as_str()),
            (Some(kind), Some(false), Some("succeeded")),
            "{name}: {started:?} {finished:?}"
        );
    }
    let read = payloads("tool_call_started").into_iter().find(|p| p["tool_name"] == "Read").expect("Read");
    assert_eq!(read["arguments"]["file_path"], notes.display().to_string(), "{read}");

    let output = tokio::time::timeout(WAIT, watch).await.expect("watch --until-idle exits").unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}");
    let lines: Vec<&str> = printed.lines().collect();
    for expected in [
        "thinking: the customer asks about order 7",
        "thinking: all three answered",
        "[tool] Read succeeded",
        "[tool] Bash succeeded",
        "[tool] lookup_order succeeded",
    ] {
        assert!(lines.contains(&expected), "{expected:?} not printed:\n{printed}");
    }
    assert!(lines.iter().any(|l| l.starts_with("[tool] Read {") && l.ends_with("started")), "{printed}");
    served.stop().await;
}
