//! The HTTP API and the `tollgate session|approvals` client end to end: `tollgate serve` as a
//! child process (API + Worker) with the real CLI against the mock model, over real HTTP.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tollgate_api::api::types::{
    CallState, Created, DeferredRun, ErrorBody, ErrorCode, ErrorDetail, MessageReceipt, Snapshot, ToolCall,
    ToolKind, Usage,
};

use crate::served::{Served, stdout_of};
use crate::world::{Refund, World, api, api_events, assert_schema, check_answer};

const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;
const WAIT: Duration = Duration::from_secs(90);

/// One SSE event as the test saw it: its `id:`, its `event:` and its data.
#[derive(Debug, Clone)]
struct Seen {
    id: i64,
    kind: String,
    data: Value,
}

/// Streams `GET {url}/v1/sessions/{session}/events` into a channel, in a task.
/// The task holds the connection until it is aborted.
fn stream_events(
    http: &reqwest::Client,
    url: &str,
    session: &str,
) -> (mpsc::UnboundedReceiver<Seen>, tokio::task::JoinHandle<()>) {
    let request = http.get(format!("{url}/v1/sessions/{session}/events"));
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut stream = api_events(request).await;
        while let Some(events) = stream.next().await {
            for event in events {
                let seen = Seen {
                    id: event.id.as_deref().expect("an id").parse().expect("a seq id"),
                    kind: event.event,
                    data: serde_json::from_str(&event.data).expect("JSON data"),
                };
                if tx.send(seen).is_err() {
                    return;
                }
            }
        }
    });
    (rx, task)
}

/// Reads the stream until an event of `kind`, returning everything read.
async fn until(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    kind: &str,
    seen: &mut Vec<Seen>,
    world: &World,
) -> Seen {
    let found = tokio::time::timeout(WAIT, async {
        while let Some(event) = rx.recv().await {
            seen.push(event.clone());
            if event.kind == kind {
                return Some(event);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(event)) => event,
        _ => panic!("no {kind} event on the stream; seen {seen:#?}\n{}", world.diagnostics()),
    }
}

/// The status and JSON body of an answer (checked against the OpenAPI document).
async fn json_of(request: reqwest::RequestBuilder) -> (u16, Value) {
    let answer = api(request).await;
    let text = &answer.text;
    (answer.status, serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")))
}

async fn post(http: &reqwest::Client, url: String, body: &str) -> (u16, Value) {
    json_of(http.post(url).header("content-type", "application/json").body(body.to_owned())).await
}

async fn get(http: &reqwest::Client, url: String) -> (u16, Value) {
    json_of(http.get(url)).await
}

fn last_answer(snapshot: &Value) -> String {
    snapshot["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .and_then(|m| m["text"].as_str())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refund_approved_over_http_runs_once_and_the_event_stream_shows_each_step() {
    let Some(world) = World::new("api: refund over HTTP", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let served = Served::start(&world, "serve", None).await;
    let (url, http) = (served.url.clone(), reqwest::Client::new());

    let (status, health) = get(&http, format!("{url}/healthz")).await;
    assert_eq!((status, &health["status"]), (200, &json!("ok")));

    let body = json!({"session_id": "h", "message": REFUND}).to_string();
    let (status, created) = post(&http, format!("{url}/v1/sessions"), &body).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["session_id"], "h");
    assert_eq!(created["message"]["turn_started"], true, "{created}");

    let (mut events, streaming) = stream_events(&http, &url, "h");
    let mut seen = Vec::new();
    let opened = until(&mut events, "interrupt_opened", &mut seen, &world).await;
    let interrupt = opened.data["payload"]["interrupt_id"].as_str().expect("an interrupt id").to_owned();
    assert_eq!(opened.data["payload"]["request"]["tool_name"], "create_refund");
    assert_eq!(opened.data["seq"], opened.id, "the SSE id is the seq");

    let (status, inbox) = get(&http, format!("{url}/v1/interrupts?status=pending")).await;
    assert_eq!(status, 200);
    let listed = inbox["interrupts"]
        .as_array()
        .expect("interrupts")
        .iter()
        .find(|i| i["session_id"] == "h" && i["interrupt_id"] == interrupt.as_str())
        .unwrap_or_else(|| panic!("the approval is not in the inbox: {inbox}"))
        .clone();
    assert_eq!(listed["tool_name"], "create_refund");
    assert_eq!(listed["arguments"], json!({"order_id": "7", "amount_cents": 500}));

    // Bad requests name what was wrong; nothing is written.
    let (status, error) = post(&http, format!("{url}/v1/sessions/h/messages"), r#"{"txt":"x"}"#).await;
    assert_eq!((status, &error["error"]["field"]), (400, &json!("txt")), "{error}");
    let decide = format!("{url}/v1/sessions/h/interrupts/{interrupt}");
    let (status, error) = post(&http, decide.clone(), r#"{"message":"no verdict"}"#).await;
    assert_eq!((status, &error["error"]["field"]), (400, &json!("approved")), "{error}");
    let (status, error) = get(&http, format!("{url}/v1/sessions/nope")).await;
    assert_eq!((status, &error["error"]["code"]), (404, &json!("session_not_found")), "{error}");
    let (status, error) =
        post(&http, format!("{url}/v1/sessions/h/interrupts/nope"), r#"{"approved":true}"#).await;
    assert_eq!((status, &error["error"]["code"]), (404, &json!("interrupt_not_found")), "{error}");

    let (status, decided) = post(&http, decide.clone(), r#"{"approved":true}"#).await;
    assert_eq!((status, &decided["replayed"]), (200, &json!(false)), "{decided}");
    let (status, again) = post(&http, decide.clone(), r#"{"approved":true}"#).await;
    assert_eq!(
        (status, &again["replayed"]),
        (200, &json!(true)),
        "the same decision again is replayed: {again}"
    );
    let (status, error) =
        post(&http, decide.clone(), r#"{"approved":false,"message":"changed my mind"}"#).await;
    assert_eq!((status, &error["error"]["code"]), (409, &json!("interrupt_already_resolved")), "{error}");

    until(&mut events, "turn_completed", &mut seen, &world).await;
    let kinds: Vec<&str> = seen.iter().map(|e| e.kind.as_str()).collect();
    for kind in [
        "user_message",
        "turn_started",
        "text_delta",
        "interrupt_resolved",
        "tool_call_started",
        "tool_call_finished",
    ] {
        assert!(kinds.contains(&kind), "no {kind} on the stream: {kinds:?}");
    }
    assert!(seen.windows(2).all(|w| w[0].id < w[1].id), "seqs rise: {seen:#?}");

    let snapshot = tokio::time::timeout(WAIT, async {
        loop {
            let (status, snapshot) = get(&http, format!("{url}/v1/sessions/h")).await;
            assert_eq!(status, 200);
            if snapshot["status"] == "idle" {
                return snapshot;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the session goes idle");
    assert!(last_answer(&snapshot).contains("r_1"), "the answer quotes the refund: {snapshot:#}");
    assert_eq!(snapshot["tool_calls"][0]["status"], "succeeded", "{snapshot:#}");
    assert_eq!(snapshot["pending_interrupts"], json!([]));
    assert_eq!(world.payments.count(), 1, "the refund ran once");

    // Resuming after the interrupt gives the later events only, by header or by query.
    let after = opened.id;
    let later: Vec<i64> = seen.iter().map(|e| e.id).filter(|id| *id > after).collect();
    let resumed = http
        .get(format!("{url}/v1/sessions/h/events?follow=false"))
        .header("Last-Event-ID", after.to_string());
    let events = api_events(resumed).await.all().await;
    let ids: Vec<i64> = events.iter().map(|e| e.id.as_deref().unwrap().parse().unwrap()).collect();
    assert_eq!(ids.first(), Some(&(after + 1)), "{ids:?}");
    assert!(ids.iter().all(|id| *id > after));
    assert!(
        ids.starts_with(&later),
        "the resumed stream has what the live one had after {after}: {ids:?} vs {later:?}"
    );
    let by_query = http.get(format!("{url}/v1/sessions/h/events?follow=false&after={after}"));
    let by_query = api_events(by_query).await.all().await;
    assert_eq!(by_query.len(), events.len());
    let (status, error) = get(&http, format!("{url}/v1/sessions/nope/events")).await;
    assert_eq!(status, 404, "{error}");

    let metrics = api(http.get(format!("{url}/metrics"))).await.text;
    for name in ["tollgate_steps_total", "tollgate_open_interrupts"] {
        assert!(metrics.contains(name), "{name} is not in /metrics:\n{metrics}");
    }
    let openapi = api(http.get(format!("{url}/openapi.json"))).await;
    assert_eq!(openapi.status, 200);
    assert!(openapi.body["paths"]["/v1/sessions"].is_object(), "{}", openapi.text);
    assert_eq!(openapi.text, tollgate_api::api::openapi::document(), "it serves the generated document");
    // An open stream keeps SIGTERM waiting (see `sigterm_stops_the_server_while_an_event_stream_is_open`).
    streaming.abort();
    let _ = streaming.await;
    served.stop().await;
}

/// Collects a child's stdout as it is written.
fn collect(mut stdout: tokio::process::ChildStdout) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = stdout.read(&mut buf).await {
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

async fn wait_text(text: &Arc<Mutex<String>>, needle: &str, world: &World) {
    let start = Instant::now();
    while !text.lock().unwrap().contains(needle) {
        assert!(
            start.elapsed() < WAIT,
            "`{needle}` never appeared in:\n{}\n{}",
            text.lock().unwrap(),
            world.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_client_starts_watches_approves_and_shows_a_session() {
    let Some(world) = World::new("api: the CLI client", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let served = Served::start(&world, "serve", None).await;

    let started =
        stdout_of(&served.tollgate(&["session", "start", "c", "--message", REFUND]).await, "session start");
    assert!(started.contains("session c created") && started.contains("turn started"), "{started}");

    let mut watch = served
        .client_command(&["session", "watch", "c", "--until-idle"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start session watch");
    let watched = collect(watch.stdout.take().expect("piped"));

    let interrupt = tokio::time::timeout(WAIT, async {
        loop {
            let listed =
                stdout_of(&served.tollgate(&["approvals", "list", "--json"]).await, "approvals list --json");
            let listed: Value = serde_json::from_str(&listed).expect("JSON");
            for item in listed.as_array().expect("a list") {
                assert_schema("PendingInterrupt", item);
            }
            if let Some(found) = listed.as_array().expect("a list").iter().find(|i| i["session_id"] == "c") {
                assert_eq!(found["tool_name"], "create_refund");
                assert_eq!(found["arguments"], json!({"order_id": "7", "amount_cents": 500}));
                return found["interrupt_id"].as_str().expect("an id").to_owned();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no approval listed\n{}", world.diagnostics()));

    let table = stdout_of(&served.tollgate(&["approvals", "list"]).await, "approvals list");
    assert!(
        table.starts_with("SESSION") && table.contains(&interrupt) && table.contains("create_refund"),
        "{table}"
    );
    // The watcher prints the approval and the exact command to decide it.
    let command = format!("tollgate approvals approve c {interrupt} --url {}", served.url);
    wait_text(&watched, &command, &world).await;
    assert!(
        watched.lock().unwrap().contains(r#"[approval needed] create_refund {"#),
        "{}",
        watched.lock().unwrap()
    );

    // A script waits for the approval and gets its id (the session waits already: from event 0).
    let waited = tokio::time::timeout(WAIT, served.tollgate(&["session", "watch", "c", "--until-waiting"]))
        .await
        .expect("watch --until-waiting returns while the approval is pending");
    let waited = stdout_of(&waited, "session watch --until-waiting");
    assert!(waited.trim_end().ends_with(&format!("waiting for approval: {interrupt}")), "{waited}");

    let approved =
        stdout_of(&served.tollgate(&["approvals", "approve", "c", &interrupt]).await, "approvals approve");
    assert!(approved.contains(&format!("approved {interrupt} in session c")), "{approved}");
    let late = served.tollgate(&["approvals", "reject", "c", &interrupt, "--message", "too late"]).await;
    assert_eq!(late.status.code(), Some(2), "a different second decision fails");
    let stderr = String::from_utf8_lossy(&late.stderr);
    assert!(stderr.contains("409") && stderr.contains("already"), "{stderr}");

    let status =
        tokio::time::timeout(WAIT, watch.wait()).await.expect("watch --until-idle exits").expect("wait");
    let text = watched.lock().unwrap().clone();
    assert!(status.success(), "watch failed: {text}");
    for part in [
        "user: call create_refund",
        "[tool] create_refund",
        "succeeded",
        "assistant: ",
        "r_1",
        "[turn completed]",
    ] {
        assert!(text.contains(part), "`{part}` is not in the watch output:\n{text}");
    }
    assert!(text.trim_end().ends_with("[turn completed]"), "it stopped at the turn's end:\n{text}");

    let shown = stdout_of(&served.tollgate(&["session", "show", "c"]).await, "session show");
    assert!(shown.starts_with("session c: idle"), "{shown}");
    assert!(shown.contains(&format!("user: {REFUND}")), "{shown}");
    let answer = shown.lines().find(|l| l.starts_with("assistant: ")).unwrap_or_default();
    assert!(answer.contains("r_1"), "{shown}");
    assert!(shown.contains("tool calls:") && shown.contains("succeeded"), "{shown}");
    assert_eq!(world.payments.count(), 1);

    // A second turn, watched from where the first ended.
    let snapshot: Value = serde_json::from_str(&stdout_of(
        &served.tollgate(&["session", "show", "c", "--json"]).await,
        "show --json",
    ))
    .expect("JSON");
    assert_schema("Snapshot", &snapshot);
    let after = (snapshot["next_event_seq"].as_i64().expect("a seq") - 1).to_string();
    let sent = stdout_of(
        &served.tollgate(&["session", "send", "c", "say hello", "--key", "k1"]).await,
        "session send",
    );
    assert!(sent.contains("turn started"), "{sent}");
    let again = stdout_of(
        &served.tollgate(&["session", "send", "c", "say hello", "--key", "k1"]).await,
        "send again",
    );
    assert!(again.contains("sent before"), "the same key stores it once: {again}");
    let second = tokio::time::timeout(
        WAIT,
        served.tollgate(&["session", "watch", "c", "--after", &after, "--until-idle"]),
    )
    .await
    .expect("the second watch ends");
    let second = stdout_of(&second, "session watch --after");
    assert!(!second.contains("create_refund"), "only events after {after}: {second}");
    assert!(second.contains("assistant: said: hello"), "{second}");

    let listed = stdout_of(&served.tollgate(&["session", "list"]).await, "session list");
    assert!(listed.lines().any(|l| l.starts_with("c ") && l.contains("idle")), "{listed}");

    let missing = served.tollgate(&["session", "show", "nope"]).await;
    assert_eq!(missing.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("no session `nope`"), "{stderr}");
    let bad = served.tollgate(&["session", "send", "c", ""]).await;
    assert_eq!(bad.status.code(), Some(2), "an empty message is refused");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("[field `text`]"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_token_every_route_but_healthz_and_the_openapi_document_needs_it_from_http_and_the_cli_client()
{
    let Some(world) = World::new("api: the token", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let served = Served::start(&world, "serve", Some("s3cret")).await;
    let (url, http) = (served.url.clone(), reqwest::Client::new());
    let routes: [(&str, &str, &str); 8] = [
        ("POST", "/v1/sessions", r#"{"session_id":"t"}"#),
        ("GET", "/v1/sessions", ""),
        ("GET", "/v1/sessions/t", ""),
        ("POST", "/v1/sessions/t/messages", r#"{"text":"say hi"}"#),
        ("POST", "/v1/sessions/t/interrupts/i", r#"{"approved":true}"#),
        ("GET", "/v1/sessions/t/events?follow=false", ""),
        ("GET", "/v1/interrupts?status=pending", ""),
        ("GET", "/metrics", ""),
    ];
    for (method, path, body) in routes {
        for auth in [None, Some("Bearer nope"), Some("s3cret"), Some("Bearer s3cret2")] {
            let mut request = http
                .request(method.parse().expect("a method"), format!("{url}{path}"))
                .header("content-type", "application/json")
                .body(body.to_owned());
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            let answer = api(request).await;
            assert_eq!(answer.status, 401, "{method} {path} with {auth:?}");
            assert_eq!(answer.headers["www-authenticate"], "Bearer");
        }
    }
    let health = api(http.get(format!("{url}/healthz"))).await;
    assert_eq!(health.status, 200, "/healthz needs no token");
    // The API's contract is public: a client reads it before it has a token.
    let document = api(http.get(format!("{url}/openapi.json"))).await;
    assert_eq!(document.status, 200, "/openapi.json needs no token");
    let (status, created) = json_of(
        http.post(format!("{url}/v1/sessions")).bearer_auth("s3cret").json(&json!({"session_id": "t"})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let listed = api(http.get(format!("{url}/v1/sessions")).bearer_auth("s3cret")).await;
    assert_eq!(listed.status, 200);

    let without = served.tollgate(&["session", "list"]).await;
    assert_eq!(without.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&without.stderr);
    assert!(stderr.contains("401") && stderr.contains("token is missing or wrong"), "{stderr}");
    let wrong = served.tollgate(&["approvals", "list", "--token", "nope"]).await;
    assert_eq!(wrong.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("token is missing or wrong"));
    let with =
        stdout_of(&served.tollgate(&["session", "list", "--token", "s3cret"]).await, "session list --token");
    assert!(with.lines().any(|l| l.starts_with("t ")), "{with}");
    let by_env = served
        .client_command(&["session", "show", "t"])
        .env("TOLLGATE_TOKEN", "s3cret")
        .output()
        .await
        .expect("run");
    assert!(stdout_of(&by_env, "session show with TOLLGATE_TOKEN").starts_with("session t: idle"));
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn session_watch_resumes_after_its_connection_drops_without_repeating_events() {
    let Some(world) = World::new("api: watch reconnects", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let first = Served::start(&world, "serve-1", None).await;
    let url = first.url.clone();
    stdout_of(&first.tollgate(&["session", "start", "r", "--message", REFUND]).await, "session start");
    let mut watch = first
        .client_command(&["session", "watch", "r", "--until-idle"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start session watch");
    let watched = collect(watch.stdout.take().expect("piped"));
    let complaints = collect_err(watch.stderr.take().expect("piped"));
    wait_text(&watched, "[approval needed]", &world).await;

    // The server dies with the stream open; another takes over its address and the store.
    first.kill().await;
    let second = Served::start_on(&world, "serve-2", None, url.trim_start_matches("http://")).await;
    wait_text(&complaints, "reconnecting after event", &world).await;
    let snapshot: Value = serde_json::from_str(&stdout_of(
        &second.tollgate(&["session", "show", "r", "--json"]).await,
        "show --json",
    ))
    .expect("JSON");
    assert_schema("Snapshot", &snapshot);
    let interrupt = snapshot["pending_interrupts"][0]["interrupt_id"].as_str().expect("pending").to_owned();
    stdout_of(&second.tollgate(&["approvals", "approve", "r", &interrupt]).await, "approvals approve");

    let status =
        tokio::time::timeout(WAIT, watch.wait()).await.expect("watch --until-idle exits").expect("wait");
    let text = watched.lock().unwrap().clone();
    assert!(status.success(), "watch failed: {text}\n{}", complaints.lock().unwrap());
    assert_eq!(text.matches("[approval needed]").count(), 1, "no event twice:\n{text}");
    assert_eq!(text.matches("user: ").count(), 1, "no event twice:\n{text}");
    assert!(text.contains(&format!("[approval] {interrupt} approved")), "{text}");
    assert!(text.contains("r_1") && text.trim_end().ends_with("[turn completed]"), "{text}");
    assert_eq!(world.payments.count(), 1);
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_the_server_while_an_event_stream_is_open() {
    let Some(world) = World::new("api: SIGTERM with a stream open", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let served = Served::start(&world, "serve", None).await;
    stdout_of(&served.tollgate(&["session", "start", "q"]).await, "session start");
    let http = reqwest::Client::new();
    let _open = api_events(http.get(format!("{}/v1/sessions/q/events", served.url))).await;
    let stopping = Instant::now();
    served.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "SIGTERM waited {:?} for the open stream",
        stopping.elapsed()
    );
}

/// Collects a child's stderr as it is written.
fn collect_err(mut stderr: tokio::process::ChildStderr) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let sink = text.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = stderr.read(&mut buf).await {
            sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

/// The check every test's HTTP call goes through can fail: bodies, statuses, media types and
/// routes the generated document does not allow are refused, naming what is wrong.
#[test]
fn the_openapi_check_refuses_answers_the_document_does_not_allow() {
    let call = ToolCall {
        arguments: json!({"order_id": "7", "amount_cents": 500}),
        original_arguments: None,
        grants_session: None,
        approved_under: None,
        batch_id: None,
        decided_ahead: None,
        kind: ToolKind::Custom,
        requires_approval: true,
        runs_in: DeferredRun::CallSingleAttemptTool,
        state: CallState::Succeeded { output: "r_1".into() },
        images: Vec::new(),
        diagnostics: None,
        tool_call_id: "toolu_1".into(),
        tool_name: "create_refund".into(),
        turn_id: "t1".into(),
        checked: None,
    };
    let snapshot = Snapshot {
        live_text: None,
        session_id: "s".into(),
        status: "idle".into(),
        messages: Vec::new(),
        pending_interrupts: Vec::new(),
        tool_calls: vec![call],
        usage: Usage { input_tokens: 1, cached_input_tokens: 0, output_tokens: 1, model_calls: 1 },
        cost_usd: 0.5,
        last_turn_error: None,
        last_turn_cancelled: None,
        cancel_requested: None,
        turn_id: None,
        next_event_seq: 9,
        started_by: Some("tollgate:token".into()),
        agent: Some("agent".into()),
        unclaimable_since: None,
        decisions: Vec::new(),
        grants: Vec::new(),
        forked_from: None,
    };
    let good = serde_json::to_value(&snapshot).unwrap();
    let check = |status: u16, body: &Value| {
        check_answer("GET", "/v1/sessions/s", status, "application/json", &body.to_string())
    };
    check(200, &good).expect("a typed snapshot is a snapshot");

    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("status");
    let error = check(200, &missing).unwrap_err();
    assert!(error.contains("status"), "{error}");
    let mut omitted = good.clone();
    omitted.as_object_mut().unwrap().remove("last_turn_error");
    check(200, &omitted).expect_err("an answer's absent value is sent as null, never left out");
    let mut wrong_type = good.clone();
    wrong_type["next_event_seq"] = json!("9");
    assert!(check(200, &wrong_type).unwrap_err().contains("next_event_seq"));
    let mut unknown_state = good.clone();
    unknown_state["tool_calls"][0]["status"] = json!("exploded");
    check(200, &unknown_state).expect_err("a tool call status the document does not list");
    let mut no_output = good.clone();
    no_output["tool_calls"][0].as_object_mut().unwrap().remove("output");
    check(200, &no_output).expect_err("a succeeded call without its output");

    let error_body =
        |code: &str| json!({"error": {"code": code, "field": null, "message": "no session `s`"}});
    check(404, &error_body("session_not_found")).expect("a documented error");
    check(404, &error_body("no_such_code")).expect_err("an error code the document does not list");
    check(200, &error_body("session_not_found")).expect_err("an error body as a snapshot");
    let error = check(418, &error_body("session_not_found")).unwrap_err();
    assert!(error.contains("does not document the status 418"), "{error}");
    let error = check_answer("GET", "/v1/sessions/s", 200, "text/plain", &good.to_string()).unwrap_err();
    assert!(error.contains("text/plain"), "{error}");
    assert!(check_answer("GET", "/v1/sessions/s", 200, "application/json", "{").is_err(), "not JSON");

    // Routes the document lacks may only answer the router's 404 and 405 errors.
    let not_found = serde_json::to_string(&ErrorBody {
        error: ErrorDetail {
            code: ErrorCode::NotFound,
            field: None,
            message: "no such route".into(),
            needed: None,
        },
    })
    .unwrap();
    check_answer("GET", "/v2/nothing", 404, "application/json", &not_found).expect("the fallback");
    check_answer("DELETE", "/v1/sessions", 405, "application/json", &not_found).expect("a wrong method");
    check_answer("GET", "/v2/nothing", 200, "application/json", &not_found).expect_err("an unknown route");

    // Request bodies are not answers; a receipt is not a `Created`.
    let receipt = MessageReceipt { item_seq: 1, turn_started: true, replayed: false };
    let created = Created { created: true, message: Some(receipt.clone()), session_id: "s".into() };
    let created = serde_json::to_string(&created).unwrap();
    check_answer("POST", "/v1/sessions", 201, "application/json", &created).expect("a Created");
    let receipt = serde_json::to_string(&receipt).unwrap();
    check_answer("POST", "/v1/sessions", 201, "application/json", &receipt).expect_err("a receipt");

    // Every event of a stream is checked; an `error` event as a StreamError.
    let events = "id: 1\nevent: text_delta\ndata: {\"seq\":1,\"kind\":\"text_delta\",\"step_id\":2,\"fence\":1,\"created_at\":5,\"payload\":{\"text\":\"hi\"}}\n\nevent: error\ndata: {\"error\":\"the store failed\"}\n\n";
    check_answer("GET", "/v1/sessions/s/events", 200, "text/event-stream", events).expect("a stream");
    let broken = events.replace("\"seq\":1,", "");
    let error = check_answer("GET", "/v1/sessions/s/events", 200, "text/event-stream", &broken).unwrap_err();
    assert!(error.contains("seq"), "{error}");
    let bad_error = events.replace("\"error\":\"the store failed\"", "\"message\":\"x\"");
    check_answer("GET", "/v1/sessions/s/events", 200, "text/event-stream", &bad_error)
        .expect_err("an error event without its error");
    // The whole event is the schema's, not only its data: the `id` is a seq, the inbox's `event`
    // one of its own.
    let bad_id = events.replace("id: 1\n", "id: one\n");
    let error = check_answer("GET", "/v1/sessions/s/events", 200, "text/event-stream", &bad_id).unwrap_err();
    assert!(error.contains("one"), "{error}");
    let inbox = "id: ab\nevent: snapshot\ndata: {\"interrupts\":[],\"gone\":[],\"total\":0}\n\n";
    check_answer("GET", "/v1/interrupts/events", 200, "text/event-stream", inbox).expect("an inbox snapshot");
    let renamed = inbox.replace("event: snapshot", "event: everything");
    check_answer("GET", "/v1/interrupts/events", 200, "text/event-stream", &renamed)
        .expect_err("an inbox event of another name");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_inbox_is_read_page_by_page_oldest_first_and_a_forged_cursor_is_refused() {
    let Some(world) = World::new("api: inbox pages", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    const WAITING: usize = 7;
    for i in 0..WAITING {
        crate::park::park_on_approval(world.store.as_ref(), &format!("p{i}")).await;
    }
    let served = Served::start_api(&world, "api", &["--insecure-open"]).await;
    let (url, http) = (served.url.clone(), reqwest::Client::new());
    let mut seen = Vec::new();
    let mut query = "limit=3".to_owned();
    let mut pages = 0;
    loop {
        let (status, page) = get(&http, format!("{url}/v1/interrupts?status=pending&{query}")).await;
        assert_eq!(status, 200, "{page}");
        pages += 1;
        for pending in page["interrupts"].as_array().expect("interrupts") {
            seen.push(pending["session_id"].as_str().unwrap().to_owned());
        }
        match page["next_after"].as_str() {
            Some(next) => query = format!("limit=3&after={next}"),
            None => break,
        }
        assert!(pages < 10, "paging does not end: {page}");
    }
    assert_eq!(pages, 3, "7 approvals in pages of 3");
    let expected: Vec<String> = (0..WAITING).map(|i| format!("p{i}")).collect();
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, expected, "each waiting approval once: {seen:?}");
    // The CLI client reads every page.
    let listed = served.tollgate(&["approvals", "list"]).await;
    let out = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.status.success(), "{out}{}", String::from_utf8_lossy(&listed.stderr));
    for session in &expected {
        assert!(out.contains(session.as_str()), "{session} missing from:\n{out}");
    }
    for forged in ["nope", "W10", "WyJ4Il0"] {
        let (status, error) = get(&http, format!("{url}/v1/interrupts?after={forged}")).await;
        assert_eq!((status, &error["error"]["field"]), (400, &json!("after")), "{forged}: {error}");
    }
}

/// Opens a connection to `url` and sends a `POST /v1/sessions` whose body never comes: its
/// handler waits for the body, holding one of the server's request slots.
async fn stalled_post(url: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let address = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("connect");
    let head = format!(
        "POST /v1/sessions HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.expect("send the head");
    stream
}

/// What a raw connection reads until the server closes it or 10 s pass.
async fn answer_of(mut stream: tokio::net::TcpStream) -> String {
    let mut read = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut read)).await;
    String::from_utf8_lossy(&read).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_joins_the_callers_trace_logs_each_request_sheds_past_its_limit_and_stops_a_request_at_its_bound()
 {
    let Some(world) = World::new("api: behind a load balancer", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let served = Served::start_api(
        &world,
        "api",
        &["--insecure-open", "--max-concurrent-requests", "2", "--request-timeout-secs", "2"],
    )
    .await;
    let (url, http) = (served.url.clone(), reqwest::Client::new());
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traced = http
        .get(format!("{url}/v1/sessions"))
        .header("traceparent", format!("00-{TRACE}-00f067aa0ba902b7-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(traced.status(), 200);
    let ours = traced.headers()["traceparent"].to_str().unwrap().to_owned();
    assert!(ours.starts_with(&format!("00-{TRACE}-")) && !ours.contains("00f067aa0ba902b7"), "{ours}");
    let fresh = http.get(format!("{url}/v1/sessions")).header("traceparent", "garbage").send().await.unwrap();
    let fresh = fresh.headers()["traceparent"].to_str().unwrap().to_owned();
    assert!(
        fresh.starts_with("00-") && !fresh.contains(TRACE) && fresh.len() == 55,
        "a trace of its own: {fresh}"
    );

    // Two requests whose bodies never come hold both slots: a third is shed at once.
    let (first, second) = (stalled_post(&url).await, stalled_post(&url).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let shed = http.get(format!("{url}/v1/sessions")).send().await.unwrap();
    assert_eq!(shed.status(), 503);
    assert_eq!(shed.headers()["retry-after"], "1");
    let body: Value = shed.json().await.unwrap();
    assert_eq!(body["error"]["code"], "overloaded", "{body}");
    assert!(started.elapsed() < Duration::from_secs(1), "shed at once, not queued: {:?}", started.elapsed());
    assert_eq!(
        http.get(format!("{url}/healthz")).send().await.unwrap().status(),
        200,
        "health is never shed"
    );
    // At their bound the stalled requests are stopped and answered.
    for stalled in [first, second] {
        let answer = answer_of(stalled).await;
        assert!(answer.starts_with("HTTP/1.1 503") && answer.contains("request_timeout"), "{answer}");
    }
    assert_eq!(
        http.get(format!("{url}/v1/sessions")).send().await.unwrap().status(),
        200,
        "the slots came back"
    );
    let log = crate::world::plain(&std::fs::read_to_string(world.dir.path().join("api.log")).unwrap());
    let access: Vec<&str> = log.lines().filter(|l| l.contains("tollgate_api::access")).collect();
    println!("finding: access log lines:\n{}", access.join("\n"));
    assert!(
        access
            .iter()
            .any(|l| l.contains(TRACE) && l.contains("path=/v1/sessions") && l.contains("status=200")),
        "the traced request's line carries its trace id"
    );
    assert!(access.iter().filter(|l| l.contains("status=503")).count() >= 3, "the shed and stopped ones too");
    served.stop().await;
}
