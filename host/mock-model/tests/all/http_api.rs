//! The mock over real HTTP on loopback: each script command, gates, errors, the request log, the binary.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use http::{Method, StatusCode};
use serde_json::{Value, json};
use tollgate_mock_model::{AssistantReply, GateStatus, MockModel, Reply};

use crate::util::{PATIENCE, first_request, messages_url, post, send};

#[tokio::test]
async fn say_streams_the_sse_events_of_the_real_api_spelling_the_answer() {
    let mock = MockModel::start().await.unwrap();
    let reply = post(&messages_url(&mock.base_url()), &first_request("say hello from mock", true)).await;

    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.content_type(), "text/event-stream; charset=utf-8");
    assert!(reply.headers.contains_key("request-id"));
    let names: Vec<String> = reply.sse().into_iter().map(|(name, _)| name).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    let (blocks, stop_reason) = reply.streamed_message();
    assert_eq!(blocks, vec![json!({"type": "text", "text": "said: hello from mock"})]);
    assert_eq!(stop_reason, "end_turn");
    let (_, start) = &reply.sse()[0];
    assert_eq!(start["message"]["model"], "claude-opus-5-5", "the reply names the requested model");
}

#[tokio::test]
async fn a_request_that_does_not_stream_gets_the_finished_message_as_json() {
    let mock = MockModel::start().await.unwrap();
    let reply = post(&messages_url(&mock.base_url()), &first_request("say plain json", false)).await;

    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.content_type(), "application/json");
    let body = reply.json();
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(body["content"], json!([{"type": "text", "text": "said: plain json"}]));
    assert_eq!(body["stop_reason"], "end_turn");
    assert!(body["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn calls_joined_with_ampersands_come_back_in_one_reply_and_the_answer_quotes_their_results() {
    let mock = MockModel::start().await.unwrap();
    let url = messages_url(&mock.base_url());
    let script = r#"call lookup_order {"order_id":"7"} && call Read {"file_path":"/tmp/a b.txt"}"#;
    let mut request = first_request(script, true);

    let first = post(&url, &request).await;
    let (blocks, stop_reason) = first.streamed_message();
    assert_eq!(stop_reason, "tool_use");
    let names_inputs: Vec<(&Value, &Value)> =
        blocks.iter().map(|block| (&block["name"], &block["input"])).collect();
    assert_eq!(
        names_inputs,
        vec![
            (&json!("mcp__tools__lookup_order"), &json!({"order_id": "7"})),
            (&json!("Read"), &json!({"file_path": "/tmp/a b.txt"})),
        ]
    );

    // What the CLI sends next: the assistant message, then the tool results.
    let ids: Vec<&str> = blocks.iter().map(|block| block["id"].as_str().unwrap()).collect();
    let messages = request["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": blocks}));
    messages.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": ids[0], "content": [{"type": "text", "text": "order 7: shipped"}]},
        {"type": "tool_result", "tool_use_id": ids[1], "content": "no such file", "is_error": true},
    ]}));
    let last = post(&url, &request).await;
    let (blocks, stop_reason) = last.streamed_message();
    assert_eq!(stop_reason, "end_turn");
    assert_eq!(
        blocks,
        vec![
            json!({"type": "text", "text": "called lookup_order: order 7: shipped\ncalled Read (error): no such file"})
        ]
    );
}

#[tokio::test]
async fn recall_answers_with_the_earlier_prompts_and_tool_results_of_the_request() {
    let mock = MockModel::start().await.unwrap();
    let mut request = first_request("say first", true);
    let messages = request["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_a", "name": "Read", "input": {}}]}));
    messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_a", "content": "file text"}]}));
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "said: first"}]}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": "recall"}]}));

    let (blocks, _) = post(&messages_url(&mock.base_url()), &request).await.streamed_message();
    assert_eq!(blocks[0]["text"], "recalled:\n- prompt: say first\n- result Read: file text");
}

#[tokio::test]
async fn a_paused_request_waits_at_its_gate_until_the_test_opens_it() {
    let mock = MockModel::start().await.unwrap();
    let url = messages_url(&mock.base_url());
    let pending =
        tokio::spawn(async move { post(&url, &first_request("pause g1 ;; say after the gate", true)).await });

    let status = mock.wait_for_gate("g1", PATIENCE).await.unwrap();
    assert_eq!(status, GateStatus { open: false, arrivals: 1, parked: 1 });
    let logged = mock.requests();
    assert_eq!(logged.len(), 1, "the request is logged while it waits");
    assert_eq!(logged[0].gates, vec!["g1"]);
    assert!(!pending.is_finished(), "the reply waits for the gate");

    mock.open_gate("g1");
    let reply = pending.await.unwrap();
    assert_eq!(reply.streamed_message().0[0]["text"], "said: after the gate");
    assert_eq!(mock.gate("g1"), GateStatus { open: true, arrivals: 1, parked: 0 });

    // An open gate stays open: the next request passes at once and is counted.
    post(&messages_url(&mock.base_url()), &first_request("pause g1 ;; say again", true)).await;
    assert_eq!(mock.wait_for_gate_arrivals("g1", 2, PATIENCE).await.unwrap().parked, 0);
}

#[tokio::test]
async fn a_gate_can_be_opened_over_http_by_a_test_in_another_process() {
    let mock = MockModel::start().await.unwrap();
    let base = mock.base_url();
    let url = messages_url(&base);
    let pending =
        tokio::spawn(async move { post(&url, &first_request("pause remote ;; say through", true)).await });
    mock.wait_for_gate("remote", PATIENCE).await.unwrap();

    let status = send(Method::GET, &format!("{base}/__mock/gates/remote"), None).await.json();
    assert_eq!(status, json!({"open": false, "arrivals": 1, "parked": 1}));
    let opened = send(Method::POST, &format!("{base}/__mock/gates/remote/open"), None).await;
    assert_eq!(opened.json()["open"], true);
    assert_eq!(pending.await.unwrap().streamed_message().0[0]["text"], "said: through");

    let log = send(Method::GET, &format!("{base}/__mock/requests"), None).await.json();
    assert_eq!(log.as_array().unwrap().len(), 1, "control requests are not logged");
}

#[tokio::test]
async fn fail_answers_http_500_with_an_anthropic_error_body() {
    let mock = MockModel::start().await.unwrap();
    let url = messages_url(&mock.base_url());

    let reply = post(&url, &first_request("fail", true)).await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        reply.json(),
        json!({"type": "error", "error": {"type": "api_error", "message": "mock HTTP 500"}})
    );

    let overloaded = post(&url, &first_request("fail 529", true)).await;
    assert_eq!(overloaded.status.as_u16(), 529);
    assert_eq!(overloaded.json()["error"]["type"], "overloaded_error");
    assert_eq!(mock.requests()[0].reply, Reply::Error { status: 500 });
}

#[tokio::test]
async fn the_request_log_keeps_path_headers_body_and_reply_of_every_request() {
    let mock = MockModel::start().await.unwrap();
    let body = first_request("say logged", true);
    post(&messages_url(&mock.base_url()), &body).await;
    post(&format!("{}/v1/messages/count_tokens", mock.base_url()), &body).await;

    let log = mock.wait_for_requests(2, PATIENCE).await.unwrap();
    let call = &log[0];
    assert_eq!((call.seq, call.method.as_str(), call.path.as_str()), (1, "POST", "/v1/messages?beta=true"));
    assert!(call.is_messages_call() && call.is_streaming());
    assert_eq!(call.header("X-Api-Key"), Some("dummy"), "the dummy key stays whole");
    assert_eq!(call.header("authorization"), Some("Bearer..."), "a real-looking secret is cut");
    assert_eq!(call.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(call.body.as_ref(), Some(&body));
    assert_eq!(call.reply, Reply::Message(AssistantReply::text("said: logged")));
    assert_eq!(log[1].seq, 2);
    assert!(matches!(log[1].reply, Reply::TokenCount { input_tokens } if input_tokens > 0));
    assert_eq!(mock.message_requests().len(), 1);
}

#[tokio::test]
async fn count_tokens_head_and_unknown_paths_are_answered_like_the_python_mock() {
    let mock = MockModel::start().await.unwrap();
    let base = mock.base_url();

    let count = post(&format!("{base}/v1/messages/count_tokens"), &first_request("say x", false)).await;
    assert_eq!(count.status, StatusCode::OK);
    assert!(count.json()["input_tokens"].as_u64().unwrap() > 0);

    let head = send(Method::HEAD, &format!("{base}/anything"), None).await;
    assert_eq!(head.status, StatusCode::OK);

    let missing = send(Method::GET, &format!("{base}/v1/models"), None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.json()["error"]["type"], "not_found_error");

    let bad = send(Method::POST, &messages_url(&base), Some(&json!(["not", "an", "object"]))).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(bad.json()["error"]["type"], "invalid_request_error");

    let paths: Vec<String> = mock.requests().into_iter().map(|request| request.path).collect();
    assert_eq!(paths, ["/v1/messages/count_tokens", "/anything", "/v1/models", "/v1/messages?beta=true"]);
}

#[tokio::test]
async fn shutting_down_releases_a_parked_request_with_http_503() {
    let mock = MockModel::start().await.unwrap();
    let url = messages_url(&mock.base_url());
    let pending = tokio::spawn(async move { post(&url, &first_request("pause never ;; say x", true)).await });
    mock.wait_for_gate("never", PATIENCE).await.unwrap();

    tokio::time::timeout(PATIENCE, mock.shutdown()).await.expect("shutdown does not wait for the gate");
    assert_eq!(pending.await.unwrap().status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn the_binary_prints_its_url_and_serves_there() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate-mock-model"))
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the binary starts");
    let stdout = child.stdout.take().unwrap();
    // Reading one line blocks until the binary prints it (or exits): run it off the async runtime.
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line =
        tokio::time::timeout(PATIENCE, line).await.expect("the URL is printed in time").unwrap().unwrap();
    let base = line.trim().to_owned();
    assert!(base.starts_with("http://127.0.0.1:"), "{line:?}");

    let reply = post(&messages_url(&base), &first_request("say from the binary", true)).await;
    let killed = child.kill();
    let _ = child.wait();
    killed.unwrap();
    assert_eq!(reply.streamed_message().0[0]["text"], "said: from the binary");
}
