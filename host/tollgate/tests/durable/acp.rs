//! `tollgate acp` end to end, driven by the `agent-client-protocol` crate's client over the
//! process's stdio, as an editor starts it: the refund's approval asked through
//! `session/request_permission` and run once, the session replayed by a second process with
//! `session/load`, bad input refused with JSON-RPC errors that store nothing, and under
//! `--separate-duties` the client told who is awaited and able to cancel.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AudioContent, CancelNotification, CloseSessionRequest, ContentBlock, DeleteSessionRequest,
    InitializeRequest, ListSessionsRequest, LoadSessionRequest, McpServer, McpServerStdio, NewSessionRequest,
    PermissionOptionKind, PromptRequest, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, ResumeSessionRequest, SelectedPermissionOutcome, SessionNotification,
    StopReason, TextContent,
};
use agent_client_protocol::{Agent, Client, Lines};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::world::{Refund, World};

const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;

/// What the client saw: every `session/update` (as its JSON) and every permission request.
#[derive(Clone, Default)]
struct Seen {
    updates: Arc<Mutex<Vec<Value>>>,
    asked: Arc<Mutex<Vec<Value>>>,
}

impl Seen {
    fn kinds(&self) -> Vec<String> {
        let updates = self.updates.lock().unwrap();
        updates.iter().map(|u| u["sessionUpdate"].as_str().unwrap_or_default().to_owned()).collect()
    }

    fn text(&self) -> String {
        let updates = self.updates.lock().unwrap();
        updates
            .iter()
            .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
            .filter_map(|u| u["content"]["text"].as_str())
            .collect()
    }
}

/// `tollgate acp` for `world`'s agent as `principal`, with `extra` arguments.
fn start(world: &World, name: &str, principal: &str, extra: &[&str]) -> tokio::process::Child {
    let mut command = world.tollgate();
    command
        .args(["acp", "--agent"])
        .arg(&world.agent)
        .args(["--db", &world.db, "--as", principal, "--poll-secs", "0.2", "--worker-id", name])
        .args(extra)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(world.dir.path().join(format!("{name}.log"))).unwrap())
        .kill_on_drop(true);
    command.spawn().expect("start tollgate acp")
}

/// The child's stdio as the crate's line transport.
fn transport(
    child: &mut tokio::process::Child,
) -> Lines<
    impl futures_util::Sink<String, Error = std::io::Error> + Send + 'static,
    impl futures_util::Stream<Item = std::io::Result<String>> + Send + 'static,
> {
    let stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let stdin = child.stdin.take().unwrap();
    let incoming = futures_util::stream::unfold(stdout, |mut lines| async move {
        match lines.next_line().await {
            Ok(Some(line)) => Some((Ok(line), lines)),
            Ok(None) => None,
            Err(error) => Some((Err(error), lines)),
        }
    });
    let outgoing = futures_util::sink::unfold(stdin, |mut stdin, line: String| async move {
        stdin.write_all(line.as_bytes()).await?;
        stdin.write_all(b"\n").await?;
        stdin.flush().await?;
        Ok::<_, std::io::Error>(stdin)
    });
    Lines::new(Box::pin(outgoing), incoming.boxed())
}

/// Runs `body` as an ACP client of `child` that records what it sees and answers each permission
/// request with the option of `answer`'s kind.
async fn client<T: Send + 'static>(
    child: &mut tokio::process::Child,
    seen: &Seen,
    answer: PermissionOptionKind,
    body: impl AsyncFnOnce(ConnectionTo<Agent>) -> Result<T, agent_client_protocol::Error> + Send + 'static,
) -> Result<T, agent_client_protocol::Error> {
    let (updates, asked) = (seen.updates.clone(), seen.asked.clone());
    let held = Arc::new(Mutex::new(Vec::new()));
    let run = Client
        .v1()
        .name("test-editor")
        .on_receive_notification(
            async move |notification: SessionNotification, _cx| {
                updates.lock().unwrap().push(serde_json::to_value(&notification.update).unwrap());
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: RequestPermissionRequest, responder, _cx| {
                asked.lock().unwrap().push(serde_json::to_value(&request).unwrap());
                if answer == PermissionOptionKind::RejectAlways {
                    // Never offered: this client never answers, and keeps the question open.
                    held.lock().unwrap().push(responder);
                    return Ok(());
                }
                let chosen = request.options.iter().find(|o| o.kind == answer).map(|o| o.option_id.clone());
                let outcome = match chosen {
                    Some(id) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
                    None => RequestPermissionOutcome::Cancelled,
                };
                responder.respond(RequestPermissionResponse::new(outcome))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport(child), body);
    tokio::time::timeout(Duration::from_secs(240), run).await.expect("the ACP exchange ends in time")
}

fn text(text: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::Text(TextContent::new(text))]
}

#[tokio::test(flavor = "multi_thread")]
async fn an_acp_client_answers_the_refunds_permission_it_runs_once_and_another_process_loads_the_session() {
    let Some(world) = World::new("acp: refund through tollgate acp", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let seen = Seen::default();
    let mut child = start(&world, "acp-1", "carl", &[]);
    let (session, stop) = client(&mut child, &seen, PermissionOptionKind::AllowOnce, async |cx| {
        let init = cx.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
        let init = serde_json::to_value(&init).unwrap();
        assert_eq!(init["agentCapabilities"]["loadSession"], true, "{init}");
        assert_eq!(init["agentCapabilities"]["promptCapabilities"]["image"], true, "{init}");
        assert_eq!(init["agentInfo"]["name"], "tollgate", "{init}");

        // The editor's cwd is its own machine's: the agent works in its workspace.
        let new = cx.send_request(NewSessionRequest::new("/home/editor/project")).block_task().await?;
        let session = new.session_id;
        let answer = cx.send_request(PromptRequest::new(session.clone(), text(REFUND))).block_task().await?;
        let usage = answer.usage.expect("the answer carries the turn's usage");
        assert!(usage.output_tokens > 0 && usage.total_tokens >= usage.output_tokens, "{usage:?}");
        Ok((session.to_string(), answer.stop_reason))
    })
    .await
    .unwrap_or_else(|e| {
        panic!("{e:?}: {}", std::fs::read_to_string(world.dir.path().join("acp-1.log")).unwrap())
    });
    assert_eq!(stop, StopReason::EndTurn);
    assert_eq!(world.payments.count(), 1, "approved once through ACP: it ran once");
    let asked = seen.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "one permission request: {asked:?}");
    let kinds: Vec<&str> =
        asked[0]["options"].as_array().unwrap().iter().map(|o| o["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["allow_once", "allow_always", "reject_once"],
        "no reject-always: there is no negative grant"
    );
    let updates = seen.kinds();
    for kind in ["tool_call", "tool_call_update", "agent_message_chunk"] {
        assert!(updates.iter().any(|k| k == kind), "{kind} in {updates:?}");
    }
    let finished = seen.updates.lock().unwrap().iter().any(|u| {
        u["sessionUpdate"] == "tool_call_update"
            && u["status"] == "completed"
            && u["rawOutput"]["status"] == "succeeded"
    });
    assert!(finished, "the refund's record reaches the client: {:?}", seen.updates.lock().unwrap());
    assert_eq!(
        world.store.audit().started_by(&session).await.unwrap().as_deref(),
        Some("carl"),
        "the session is carl's"
    );
    drop(child);

    // Another process: the session is in the store. Bad input is refused and stores nothing.
    let replay = Seen::default();
    let mut again = start(&world, "acp-2", "carl", &[]);
    let id = session.clone();
    let events_before = world.store.read_events(&session, 0, 10_000).await.unwrap().len();
    client(&mut again, &replay, PermissionOptionKind::AllowOnce, async move |cx| {
        cx.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
        let listed = cx.send_request(ListSessionsRequest::new()).block_task().await?;
        assert!(listed.sessions.iter().any(|s| s.session_id.to_string() == id), "{listed:?}");
        cx.send_request(LoadSessionRequest::new(id.clone(), "/elsewhere")).block_task().await?;
        cx.send_request(ResumeSessionRequest::new(id.clone(), "/elsewhere")).block_task().await?;
        cx.send_request(CloseSessionRequest::new(id.clone())).block_task().await?;
        let kept = cx.send_request(DeleteSessionRequest::new(id.clone())).block_task().await;
        let kept = kept.expect_err("a session is not deleted");
        assert!(kept.message.contains("audit trail"), "{kept:?}");

        let unknown = cx.send_request(PromptRequest::new("no-such-session", text("hi"))).block_task().await;
        let unknown = unknown.expect_err("an unknown session is an error");
        assert_eq!(unknown.code, agent_client_protocol::ErrorCode::RESOURCE_NOT_FOUND, "{unknown:?}");
        let audio = vec![ContentBlock::Audio(AudioContent::new("AAAA", "audio/wav"))];
        let refused = cx.send_request(PromptRequest::new(id.clone(), audio)).block_task().await;
        let refused = refused.expect_err("an audio block is refused");
        assert_eq!(refused.code, agent_client_protocol::ErrorCode::INVALID_PARAMS, "{refused:?}");
        assert!(refused.message.contains("prompt[0]") && refused.message.contains("audio"), "{refused:?}");
        let servers = vec![McpServer::Stdio(McpServerStdio::new("tickets", "/usr/bin/tickets-mcp"))];
        let refused = cx.send_request(NewSessionRequest::new("/tmp").mcp_servers(servers)).block_task().await;
        let refused = refused.expect_err("the client's MCP servers are not reached yet");
        assert!(refused.message.contains("mcpServers") && refused.message.contains("tickets"), "{refused:?}");
        Ok(())
    })
    .await
    .unwrap_or_else(|e| {
        panic!("{e:?}: {}", std::fs::read_to_string(world.dir.path().join("acp-2.log")).unwrap())
    });
    let events_after = world.store.read_events(&session, 0, 10_000).await.unwrap().len();
    assert_eq!(events_before, events_after, "refused input stores nothing");
    let replayed = replay.updates.lock().unwrap().clone();
    assert_eq!(replayed[0]["sessionUpdate"], "user_message_chunk", "{replayed:?}");
    assert_eq!(replayed[0]["content"]["text"], REFUND);
    assert!(replay.kinds().iter().any(|k| k == "tool_call"), "{replayed:?}");
    assert!(!replay.text().is_empty(), "the answer is replayed: {replayed:?}");
    assert!(replay.asked.lock().unwrap().is_empty(), "nothing is open: nothing is asked");
    assert_eq!(world.payments.count(), 1, "loading runs nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn under_separation_of_duties_the_client_reads_who_is_awaited_and_its_cancel_ends_the_turn() {
    let Some(world) = World::new("acp: separate duties", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let seen = Seen::default();
    let mut child = start(&world, "acp-sod", "carl", &["--separate-duties"]);
    let watched = seen.clone();
    let stop = client(&mut child, &seen, PermissionOptionKind::AllowOnce, async move |cx| {
        cx.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
        let session = cx.send_request(NewSessionRequest::new("/tmp")).block_task().await?.session_id;
        let prompt = cx.send_request(PromptRequest::new(session.clone(), text(REFUND)));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while !watched.text().contains("is waiting for approval by") {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no word of who is awaited: {:?}",
                watched.kinds()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cx.send_notification(CancelNotification::new(session))?;
        Ok(prompt.block_task().await?.stop_reason)
    })
    .await
    .unwrap_or_else(|e| {
        panic!("{e:?}: {}", std::fs::read_to_string(world.dir.path().join("acp-sod.log")).unwrap())
    });
    assert_eq!(stop, StopReason::Cancelled);
    assert!(seen.asked.lock().unwrap().is_empty(), "carl may not decide: he is not asked");
    assert!(seen.text().contains("waiting for approval by an approver"), "{}", seen.text());
    assert_eq!(world.payments.count(), 0, "cancelled: the refund never ran");
}

/// The process is SIGKILLed (its Worker with it) while the refund waits for the client's answer:
/// a new `tollgate acp` loads the session, asks the permission again, and answering it runs the
/// refund once and follows the turn to its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_permission_pending_when_the_process_is_killed_is_asked_again_after_load_and_runs_once() {
    let Some(world) = World::new("acp: killed while asking", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let first = Seen::default();
    let mut child = start(&world, "acp-killed", "carl", &[]);
    let pid = child.id().expect("it runs");
    let watched = first.clone();
    let named = Arc::new(Mutex::new(None));
    let name = named.clone();
    // This client never answers: the question is still open when the process dies. The kill may
    // end the connection before the body does: the session's id is kept before it.
    let killed = client(&mut child, &first, PermissionOptionKind::RejectAlways, async move |cx| {
        cx.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
        let session = cx.send_request(NewSessionRequest::new("/tmp")).block_task().await?.session_id;
        *name.lock().unwrap() = Some(session.to_string());
        let _prompt = cx.send_request(PromptRequest::new(session.clone(), text(REFUND)));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while watched.asked.lock().unwrap().is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "never asked: {:?}", watched.kinds());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let killed = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        assert!(killed.unwrap().success());
        Ok(())
    })
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    let session = named.lock().unwrap().clone().unwrap_or_else(|| panic!("no session: {killed:?}"));
    assert_eq!(world.payments.count(), 0, "nothing ran: the call waits for a decision");

    let second = Seen::default();
    let mut again = start(&world, "acp-after", "carl", &[]);
    let (id, store) = (session.clone(), world.store.clone());
    client(&mut again, &second, PermissionOptionKind::AllowOnce, async move |cx| {
        cx.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
        cx.send_request(LoadSessionRequest::new(id.clone(), "/tmp")).block_task().await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        loop {
            let session = store.session(&id).await.unwrap().unwrap();
            if session.status == "idle" {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "the turn did not end: {}", session.status);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The follower's last updates come with the turn's end.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(())
    })
    .await
    .unwrap_or_else(|e| {
        panic!("{e:?}: {}", std::fs::read_to_string(world.dir.path().join("acp-after.log")).unwrap())
    });
    assert_eq!(second.asked.lock().unwrap().len(), 1, "asked again, once");
    assert_eq!(world.payments.count(), 1, "answered after the kill: it ran once");
    let completed = second
        .updates
        .lock()
        .unwrap()
        .iter()
        .any(|u| u["sessionUpdate"] == "tool_call_update" && u["rawOutput"]["status"] == "succeeded");
    assert!(completed, "the loaded session's turn is followed to its end: {:?}", second.kinds());
}

/// `acpx` (npm, pinned in `tools/acpx`), the headless ACP client nobody here wrote, runs the refund
/// through `tollgate acp` with its own permission handling answering the approval: the refund runs
/// once and acpx prints the agent's answer.
#[tokio::test(flavor = "multi_thread")]
async fn acpx_runs_the_refund_through_tollgate_acp_and_answers_its_approval_over_acp() {
    let acpx = tollgate_testing::root().join("tools/acpx/node_modules/.bin/acpx");
    if !acpx.exists() {
        tollgate_testing::skip::missing(
            tollgate_testing::skip::Dependency::AcpClients,
            "acp::acpx_runs_the_refund",
            &format!("{} is not installed", acpx.display()),
        );
        return;
    }
    let Some(world) = World::new("acp: acpx drives the refund", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let tollgate = world.tollgate();
    let std = tollgate.as_std();
    let agent = format!(
        "{} acp --agent {} --db {} --as carl --poll-secs 0.2 --worker-id acpx",
        std.get_program().to_string_lossy(),
        world.agent.display(),
        world.db
    );
    let home = world.dir.path().join("acpx-home");
    std::fs::create_dir_all(&home).unwrap();
    let mut command = tokio::process::Command::new(&acpx);
    for (name, value) in std.get_envs() {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    command
        .env("HOME", &home)
        .current_dir(world.dir.path())
        .args(["--agent", &agent, "--approve-all", "--format", "json", "--timeout", "180", "exec", REFUND])
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(240), command.output())
        .await
        .expect("acpx ends in time")
        .expect("acpx runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "acpx failed: {stdout}\n{stderr}");
    assert_eq!(world.payments.count(), 1, "approved through acpx: it ran once\n{stdout}\n{stderr}");
    assert!(stdout.contains("create_refund"), "acpx saw the tool call: {stdout}");
    let sessions = world.store.list_sessions(None, "", 10).await.unwrap();
    assert_eq!(sessions.len(), 1, "one session");
    let session = &sessions[0].session_id;
    assert_eq!(world.store.audit().started_by(session).await.unwrap().as_deref(), Some("carl"));
    let decided = world.store.read_events(session, 0, 10_000).await.unwrap();
    let decision = decided.iter().find(|e| e.kind == "decision_recorded").expect("a decision was recorded");
    assert!(decision.payload.get().contains("\"principal\":\"carl\""), "{}", decision.payload.get());
}
