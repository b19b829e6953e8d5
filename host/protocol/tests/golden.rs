//! Golden tests: frames captured from the real `claude` 2.1.328 (see `data/README.md`).
//!
//! What belongs here: checks that run this crate against captured CLI output and compare what
//! it builds with what the probe's host sent. Shape checks on hand-written JSON stay in the unit
//! tests beside the code.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tollgate_protocol::{
    CliRequest, ControlRequest, Frame, HookAnswer, HookEvent, HookMatcher, HostFrame, Initialize,
    InitializeResponse, McpMessage, PermissionAnswer, System, TerminalReason, TranscriptEntry, parse_line,
};

/// Scenarios captured by `tests/data/probe.py` (hook events, subagents, compaction).
const PROBED: &[&str] = &["hooks_app__", "subagent_foreground__", "compact_manual__"];

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(rel)
}

fn read(rel: &str) -> String {
    let path = data(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// One line of a probe capture: `{"t":…,"dir":"cli->host"|"host->cli"|"note","frame":…}`.
#[derive(Deserialize)]
struct Captured {
    t: f64,
    dir: String,
    frame: Box<RawValue>,
}

struct Scenario {
    name: String,
    lines: Vec<Captured>,
}

impl Scenario {
    fn cli_frames(&self) -> impl Iterator<Item = &Captured> {
        self.lines.iter().filter(|c| c.dir == "cli->host")
    }
}

fn scenarios() -> Vec<Scenario> {
    let mut names: Vec<String> = std::fs::read_dir(data("frames"))
        .expect("tests/data/frames")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".jsonl").map(str::to_owned))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "expected the copied captures, found {names:?}");
    names
        .into_iter()
        .map(|name| {
            let lines = read(&format!("frames/{name}.jsonl"))
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            Scenario { name, lines }
        })
        .collect()
}

fn parse(scenario: &str, c: &Captured) -> Frame {
    parse_line(c.frame.get()).unwrap_or_else(|e| {
        panic!("{scenario} t={}: {e}\n{}", c.t, &c.frame.get()[..c.frame.get().len().min(300)])
    })
}

/// The frames Tollgate acts on, with the subtype that selects the type.
fn kind(v: &Value) -> Option<String> {
    let ty = v["type"].as_str()?;
    let kind = match ty {
        "control_request" => format!("control_request/{}", v["request"]["subtype"].as_str()?),
        "system" if v["subtype"] == "init" => "system/init".into(),
        "control_response"
        | "control_cancel_request"
        | "stream_event"
        | "assistant"
        | "user"
        | "result"
        | "transcript_mirror" => ty.into(),
        _ => return None,
    };
    Some(kind)
}

#[test]
fn every_cli_frame_of_every_capture_parses() {
    let mut count = 0;
    for s in scenarios() {
        for c in s.cli_frames() {
            parse(&s.name, c);
            count += 1;
        }
    }
    for line in read("excerpts.jsonl").lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        parse_line(&v["frame"].to_string()).unwrap_or_else(|e| panic!("{}: {e}", v["source"]));
        count += 1;
    }
    assert!(count > 250, "only {count} frames");
}

#[test]
fn truncated_real_frames_fail_cleanly() {
    for s in scenarios().iter().filter(|s| s.name == "tool_allow__run") {
        for c in s.cli_frames() {
            let text = c.frame.get();
            for cut in (1..10).map(|i| text.len() * i / 10) {
                let Some(prefix) = text.get(..cut) else { continue };
                assert!(parse_line(prefix).is_err(), "{} t={} cut {cut}", s.name, c.t);
            }
        }
    }
}

#[test]
fn acted_on_frames_decode_into_typed_variants() {
    let mut seen = BTreeMap::<String, usize>::new();
    for s in scenarios() {
        for c in s.cli_frames() {
            let value: Value = serde_json::from_str(c.frame.get()).unwrap();
            let frame = parse(&s.name, c);
            match kind(&value) {
                Some(k) => {
                    let typed = match &frame {
                        Frame::Other(_) => false,
                        Frame::ControlRequest(ControlRequest { request, .. }) => {
                            !matches!(request, CliRequest::Other(_))
                        }
                        _ => true,
                    };
                    assert!(typed, "{} t={}: {k} fell through to a pass-through variant", s.name, c.t);
                    *seen.entry(k).or_default() += 1;
                }
                None => assert!(matches!(frame, Frame::Other(_)), "{} t={}", s.name, c.t),
            }
        }
    }
    let expected = [
        "assistant",
        "control_request/can_use_tool",
        "control_request/hook_callback",
        "control_request/mcp_message",
        "control_response",
        "result",
        "stream_event",
        "system/init",
        "transcript_mirror",
        "user",
    ];
    for k in expected {
        assert!(seen.contains_key(k), "no `{k}` frame in the captures: {seen:?}");
    }
}

/// Top-level and nested fields the typed frames deliberately do not model, by frame kind and
/// dotted path (`[]` = any array element). A received field that is neither typed nor listed
/// here fails the test: either the CLI added it (list it, or type it) or a field name in the
/// crate is wrong.
fn untyped_fields() -> HashMap<&'static str, BTreeSet<&'static str>> {
    let lists: &[(&str, &[&str])] = &[
        // The other events' inputs type what an application hook is told (`tollgate_protocol::hook`).
        (
            "control_request/hook_callback",
            &[
                "request.input.agent_transcript_path",
                "request.input.background_tasks",
                "request.input.cwd",
                "request.input.duration_ms",
                "request.input.effort",
                "request.input.mcp_server",
                "request.input.permission_mode",
                "request.input.prompt_id",
                "request.input.session_crons",
                "request.input.transcript_path",
            ],
        ),
        ("control_request/can_use_tool", &[]),
        ("control_request/mcp_message", &[]),
        // The initialize answer's payload is decoded separately (`InitializeResponse`).
        ("control_response", &[]),
        (
            "system/init",
            &[
                "additional_directories",
                "agents",
                "analytics_disabled",
                "apiKeySource",
                "capabilities",
                "fast_mode_disabled_reason",
                "fast_mode_state",
                "memory_paths",
                "messaging_socket_path",
                "original_cwd",
                "output_style",
                "per_turn_effort_active",
                "product_feedback_disabled",
                "skills",
                "slash_commands",
                "terminal_slash_commands",
                "ultrathink_available",
                "ultrathink_typed_raises",
                "view_mode",
            ],
        ),
        ("stream_event", &["thinking_display", "ttft_ms"]),
        (
            "assistant",
            &[
                "agent_id",
                "api_error_status",
                "api_error_type",
                "message.stop_sequence",
                "message.type",
                "request_id",
                "subagent_type",
                "task_description",
                "timestamp",
                "tool_use_meta",
            ],
        ),
        (
            "user",
            &[
                "agent_id",
                "isReplay",
                "isSynthetic",
                "subagent_type",
                "task_description",
                "timestamp",
                "tool_result_meta",
            ],
        ),
        (
            "result",
            &[
                "api_error_type",
                "fast_mode_disabled_reason",
                "fast_mode_state",
                "first_content_frame_ms",
                "local_command",
                "model_usage_since_last_result",
                "queued_turn_count",
                "safety_stops",
                "subagent_stats",
                "time_to_request_ms",
                "ttft_ms",
                "ttft_stream_ms",
                "usage.cache_creation",
                "usage.inference_geo",
                "usage.iterations",
                "usage.output_tokens_details",
                "usage.server_tool_use",
                "usage.service_tier",
                "usage.speed",
            ],
        ),
        ("transcript_mirror", &[]),
    ];
    lists.iter().map(|(k, paths)| (*k, paths.iter().copied().collect())).collect()
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

/// `written` must equal `received` except for untyped fields (listed) and nulls (an absent
/// optional field is written as nothing).
fn compare(
    received: &Value,
    written: &Value,
    path: &str,
    untyped: &BTreeSet<&str>,
    problems: &mut BTreeSet<String>,
) {
    match (received, written) {
        (Value::Object(r), Value::Object(w)) => {
            for (k, wv) in w {
                match r.get(k) {
                    Some(rv) => compare(rv, wv, &join(path, k), untyped, problems),
                    None if wv.is_null() => {}
                    None => {
                        problems.insert(format!("{}: written but not received", join(path, k)));
                    }
                }
            }
            for (k, rv) in r {
                let p = join(path, k);
                if !w.contains_key(k) && !rv.is_null() && !untyped.contains(p.as_str()) {
                    problems.insert(format!("{p}: received but not typed (and not listed)"));
                }
            }
        }
        (Value::Array(r), Value::Array(w)) if r.len() == w.len() => {
            for (rv, wv) in r.iter().zip(w) {
                compare(rv, wv, &format!("{path}[]"), untyped, problems);
            }
        }
        (Value::Number(r), Value::Number(w)) if r.as_f64() == w.as_f64() => {}
        _ if received == written => {}
        _ => {
            problems.insert(format!("{path}: written {written} but received {received}"));
        }
    }
}

#[test]
fn typed_frames_keep_every_field_they_type_and_skip_only_listed_ones() {
    let untyped = untyped_fields();
    let mut problems = BTreeMap::<String, BTreeSet<String>>::new();
    for s in scenarios() {
        for c in s.cli_frames() {
            let received: Value = serde_json::from_str(c.frame.get()).unwrap();
            let Some(k) = kind(&received) else { continue };
            let written: Value = serde_json::from_str(&parse(&s.name, c).to_json()).unwrap();
            let list = untyped.get(k.as_str()).unwrap_or_else(|| panic!("no list for {k}"));
            compare(&received, &written, "", list, problems.entry(k).or_default());
        }
    }
    problems.retain(|_, p| !p.is_empty());
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn initialize_answers_decode_and_report_hooks_applied() {
    let mut answered = 0;
    for s in scenarios() {
        let init_ids: BTreeSet<String> = s
            .lines
            .iter()
            .filter(|c| c.dir == "host->cli")
            .filter_map(|c| match tollgate_protocol::parse_host_line(c.frame.get()).unwrap() {
                HostFrame::ControlRequest {
                    request_id,
                    request: tollgate_protocol::HostRequest::Initialize(_),
                } => Some(request_id),
                _ => None,
            })
            .collect();
        for c in s.cli_frames() {
            let Frame::ControlResponse(resp) = parse(&s.name, c) else { continue };
            assert!(init_ids.contains(resp.request_id()), "{}: answer to an unknown request", s.name);
            let init: InitializeResponse = resp.decode().unwrap();
            assert_eq!(init.hooks_applied, Some(true), "{}", s.name);
            assert_eq!(init.claude_code_version.as_deref(), Some("2.1.328"));
            assert_eq!(init.current_permission_mode.as_deref(), Some("default"));
            answered += 1;
        }
    }
    assert!(answered >= 2, "only {answered} initialize answers");
}

fn results(scenario: &str) -> Vec<tollgate_protocol::ResultMessage> {
    let s = scenarios().into_iter().find(|s| s.name == scenario).unwrap();
    s.cli_frames()
        .filter_map(|c| match parse(&s.name, c) {
            Frame::Result(r) => Some(r),
            _ => None,
        })
        .collect()
}

#[test]
fn a_deferred_segment_ends_with_the_deferred_call_and_its_reason() {
    let [r] = &results("defer_resume_allow__1-defer")[..] else { panic!("one result") };
    assert!(!r.is_error && r.is_deferred());
    assert_eq!(r.terminal_reason, Some(TerminalReason::ToolDeferred));
    let call = r.deferred_tool_use.as_ref().unwrap();
    assert_eq!((call.id.as_str(), call.name.as_str()), ("toolu_def_1", "mcp__tools__echo"));
    assert_eq!(call.input, json!({"text": "ping"}));
    assert_eq!(r.result.as_deref(), Some(""));
    assert!(r.total_cost_usd.unwrap() > 0.0);
    assert!(r.usage.unwrap().input_tokens > 0);
}

#[test]
fn a_resume_that_defers_again_has_a_null_terminal_reason_but_the_same_call() {
    let name = "defer_resume_defer_again__2-resume";
    let [r] = &results(name)[..] else { panic!("one result") };
    assert_eq!(r.terminal_reason, None);
    let s = scenarios().into_iter().find(|s| s.name == name).unwrap();
    let hooked = s
        .cli_frames()
        .find_map(|c| match parse(name, c) {
            Frame::ControlRequest(ControlRequest { request: CliRequest::HookCallback(h), .. }) => {
                match h.input {
                    HookEvent::PreToolUse(input) => Some(input.tool_use_id),
                    other => panic!("{other:?}"),
                }
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(r.deferred_tool_use.as_ref().unwrap().id, hooked);
}

#[test]
fn failed_turns_are_results_with_is_error_and_a_reason() {
    let [r] = &results("errors__http500")[..] else { panic!("one result") };
    assert_eq!((r.subtype.as_str(), r.is_error), ("success", true));
    assert_eq!(r.terminal_reason, Some(TerminalReason::ApiError));
    assert_eq!(r.api_error_status, Some(500));

    let [r] = &results("resume_edge__unknown_id")[..] else { panic!("one result") };
    assert_eq!((r.subtype.as_str(), r.is_error), ("error_during_execution", true));
    assert!(r.errors.as_ref().unwrap()[0].starts_with("No conversation found with session ID"));

    let [r] = &results("resume_edge__deferred_without_sdk_server")[..] else { panic!("one result") };
    assert_eq!(r.terminal_reason, Some(TerminalReason::ToolDeferredUnavailable));
}

#[test]
fn denials_are_listed_in_the_result() {
    let [r] = &results("tool_deny__run")[..] else { panic!("one result") };
    assert_eq!(r.permission_denials.len(), 1);
    assert_eq!(r.permission_denials[0].tool_name, "mcp__tools__echo");
}

#[test]
fn text_deltas_add_up_to_the_assistant_text() {
    let s = scenarios().into_iter().find(|s| s.name == "tool_allow__run").unwrap();
    let (mut streamed, mut answered) = (String::new(), String::new());
    for c in s.cli_frames() {
        match parse(&s.name, c) {
            Frame::StreamEvent(ev) => streamed.extend(ev.text_delta()),
            Frame::Assistant(a) => {
                for block in a.message.content {
                    if let tollgate_protocol::ContentBlock::Text { text } = block {
                        answered.push_str(&text);
                    }
                }
            }
            _ => {}
        }
    }
    assert!(!streamed.is_empty());
    assert_eq!(streamed, answered);
}

#[test]
fn hook_callbacks_name_the_tool_and_tool_use_id_that_mcp_calls_refer_to() {
    let s = scenarios().into_iter().find(|s| s.name == "tool_allow__run").unwrap();
    let (mut hooked, mut called) = (vec![], vec![]);
    for c in s.cli_frames() {
        let Frame::ControlRequest(req) = parse(&s.name, c) else { continue };
        match req.request {
            CliRequest::HookCallback(h) => {
                assert_eq!((h.callback_id.as_str(), h.input.event_name()), ("hook_0", "PreToolUse"));
                let HookEvent::PreToolUse(input) = h.input else { panic!("{:?}", h.input) };
                assert_eq!(input.mcp_server.unwrap().name, "tools");
                hooked.push(input.tool_use_id);
            }
            CliRequest::McpMessage(m) if m.method() == Some("tools/call") => {
                called.push(m.tool_use_id().unwrap().to_owned());
            }
            _ => {}
        }
    }
    assert_eq!(hooked, vec!["toolu_allow_1".to_owned()]);
    assert_eq!(called, hooked);
}

#[test]
fn excerpt_frames_route_to_cancel_response_or_pass_through() {
    let frames: Vec<Frame> = read("excerpts.jsonl")
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            parse_line(&v["frame"].to_string()).unwrap()
        })
        .collect();
    let kinds: Vec<String> = frames
        .iter()
        .map(|f| match f {
            Frame::Other(raw) => format!("other:{}/{}", raw.frame_type(), raw.subtype().unwrap_or("")),
            Frame::ControlResponse(r) => format!("response:{}", r.result().unwrap()),
            f => f.frame_type().to_owned(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "control_cancel_request",
            "other:tool_progress/",
            "other:system/session_state_changed",
            "other:system/session_state_changed",
            "response:{\"still_queued\":[]}",
            "other:system/background_tasks_changed",
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Transcript entries: byte-exact.

/// The local transcript the CLI wrote (compact, JSON.stringify form), after a defer and a resume.
fn local_transcript() -> Vec<String> {
    read("transcript/defer_resume_allow.jsonl").lines().map(str::to_owned).collect()
}

#[test]
fn transcript_entries_round_trip_byte_exactly() {
    let lines = local_transcript();
    let mirrored: Vec<&String> = lines
        .iter()
        .filter(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            !v["type"].as_str().unwrap().starts_with("api-request")
        })
        .collect();
    assert!(mirrored.len() > 20);
    // The frame the CLI would send for these entries: entries are spliced in as they are.
    let entries = mirrored.iter().map(|l| l.as_str()).collect::<Vec<_>>().join(",");
    let line = format!(
        r#"{{"type":"transcript_mirror","filePath":"/srv/probe/cfg/projects/-srv-probe-project/221d1b81-d21e-4790-9eec-313da8b28671.jsonl","entries":[{entries}]}}"#
    );
    let frame = parse_line(&line).unwrap();
    assert_eq!(frame.to_json(), line, "the frame is written back byte for byte");
    let Frame::TranscriptMirror(mirror) = frame else { panic!("not a mirror") };
    assert_eq!(mirror.session_id(), Some("221d1b81-d21e-4790-9eec-313da8b28671"));
    assert_eq!(mirror.entries.len(), mirrored.len());
    for (entry, original) in mirror.entries.iter().zip(&mirrored) {
        assert_eq!(entry.as_str(), original.as_str());
        assert!(entry.is_compact(), "{original}");
        let value: Value = serde_json::from_str(original).unwrap();
        assert_eq!(entry.uuid().as_deref(), value["uuid"].as_str());
        assert_eq!(entry.entry_type().as_deref(), value["type"].as_str());
        let rebuilt = TranscriptEntry::from_raw(entry.as_str().to_owned()).unwrap();
        assert_eq!(&rebuilt, entry);
    }
    // The entries the resume search looks for are there, unchanged.
    assert!(mirror.entries.iter().any(|e| e.as_str().contains(r#""type":"hook_deferred_tool""#)));
    assert!(mirror.entries.iter().any(|e| e.as_str().contains(r#""tool_use_id":"toolu_def_1""#)));
}

#[test]
fn the_resume_mirror_carries_the_entries_appended_to_the_local_file() {
    // mirror.jsonl is the probe's (spaced) record of the resume process's mirror frames.
    let mut from_mirror = vec![];
    for line in read("transcript/defer_resume_allow.mirror.jsonl").lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        v.as_object_mut().unwrap().remove("t");
        v["type"] = json!("transcript_mirror");
        let Frame::TranscriptMirror(m) = parse_line(&v.to_string()).unwrap() else { panic!() };
        assert!(!m.is_subagent());
        from_mirror.extend(m.entries.iter().map(|e| serde_json::from_str::<Value>(e.as_str()).unwrap()));
    }
    let local: Vec<Value> = local_transcript()
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| !v["type"].as_str().unwrap().starts_with("api-request"))
        .collect();
    assert!(!from_mirror.is_empty());
    assert_eq!(&local[local.len() - from_mirror.len()..], &from_mirror[..]);
}

#[test]
fn mirror_frames_in_the_captures_expose_entry_uuids() {
    let s = scenarios().into_iter().find(|s| s.name == "defer_resume_allow__1-defer").unwrap();
    let mut uuids = 0;
    for c in s.cli_frames() {
        let Frame::TranscriptMirror(m) = parse(&s.name, c) else { continue };
        for e in &m.entries {
            let v: Value = serde_json::from_str(e.as_str()).unwrap();
            assert_eq!(e.uuid().as_deref(), v["uuid"].as_str());
            uuids += usize::from(e.uuid().is_some());
        }
    }
    assert!(uuids > 10);
}

// ---------------------------------------------------------------------------------------------
// Host -> CLI frames: what our builders make equals what the probe's host sent.

/// The hook answer each scenario's host gave (`Err` = an error control response).
fn hook_answer(scenario: &str) -> Result<HookAnswer, &'static str> {
    Ok(match scenario {
        "tool_allow__run" => HookAnswer::allow().reason("host allowed"),
        "defer_resume_allow__1-defer" => HookAnswer::defer().reason("host will decide later"),
        "defer_resume_allow__2-resume" => HookAnswer::allow().reason("approved later"),
        "defer_resume_defer_again__2-resume" => HookAnswer::defer().reason("still undecided"),
        "defer_resume_deny__2-resume" => HookAnswer::deny("Reviewer rejected this call"),
        "tool_deny__run" => HookAnswer::deny("Host policy forbids echo"),
        "tool_ask_allow__run" => HookAnswer::ask().reason("host wants a prompt"),
        "tool_ask_deny__run" => HookAnswer::ask(),
        "tool_nodecision__run" => HookAnswer::no_decision(),
        "tool_updated_input__run" => {
            HookAnswer::allow().reason("rewrote").updated_input(json!({"text": "rewritten-by-hook"}))
        }
        "hook_error__error_response" => return Err("hook crashed"),
        s if s.starts_with("mcp_errors__") => HookAnswer::allow(),
        s => panic!("no hook answer known for {s}"),
    })
}

/// The `can_use_tool` answer each scenario's host gave.
fn permission_answer(scenario: &str, input: &Value) -> PermissionAnswer {
    match scenario {
        "tool_ask_allow__run" => PermissionAnswer::allow(json!({"text": "rewritten-by-can_use_tool"})),
        "tool_ask_deny__run" => PermissionAnswer::deny("User said no via can_use_tool"),
        "tool_nodecision__run" | "hook_error__error_response" => PermissionAnswer::allow(input.clone()),
        s => panic!("no can_use_tool answer known for {s}"),
    }
}

/// The probe's in-process MCP server (`echo` and `add`), answering one message.
fn mcp_answer(scenario: &str, request_id: &str, msg: &McpMessage) -> HostFrame {
    if msg.is_notification() {
        return HostFrame::mcp_notification_ack(request_id);
    }
    let id = msg.id().unwrap().clone();
    let reply = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
    let jsonrpc = match msg.method().unwrap() {
        "initialize" => reply(json!({
            "protocolVersion": msg.message["params"]["protocolVersion"],
            "capabilities": {"tools": {"listChanged": false}},
            "serverInfo": {"name": "tools", "version": "1.0.0"},
        })),
        "tools/list" => reply(json!({"tools": [
            {"name": "echo", "description": "Echo the given text back.",
             "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
            {"name": "add", "description": "Add two numbers.",
             "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}},
        ]})),
        "tools/call" => match scenario {
            "mcp_errors__control_error" => {
                return HostFrame::error_response(request_id, "host could not run tool");
            }
            "mcp_errors__isError" => reply(
                json!({"content": [{"type": "text", "text": "tool failed: disk on fire"}], "isError": true}),
            ),
            "mcp_errors__jsonrpc_error" => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "backend unavailable"}})
            }
            _ => {
                let text = msg.message["params"]["arguments"]["text"].as_str().unwrap();
                reply(json!({"content": [{"type": "text", "text": format!("echo: {text}")}]}))
            }
        },
        other => panic!("unexpected MCP method {other}"),
    };
    HostFrame::mcp_response(request_id, jsonrpc)
}

#[test]
fn host_frames_we_build_match_the_captured_host_frames() {
    let mut checked = BTreeMap::<&str, usize>::new();
    // The hook probe's scenarios (`probe.py`) were driven by the probe, not by what this crate builds.
    for s in scenarios().into_iter().filter(|s| !PROBED.iter().any(|p| s.name.starts_with(p))) {
        let mut pending = HashMap::<String, CliRequest>::new();
        for c in &s.lines {
            match c.dir.as_str() {
                "cli->host" => {
                    if let Frame::ControlRequest(req) = parse(&s.name, c) {
                        pending.insert(req.request_id, req.request);
                    }
                    continue;
                }
                "host->cli" => {}
                _ => continue,
            }
            let captured: Value = serde_json::from_str(c.frame.get()).unwrap();
            let (what, built) = match captured["type"].as_str().unwrap() {
                "control_request" => {
                    let mut init =
                        Initialize::new().pre_tool_use(HookMatcher::new("mcp__tools__.*", "hook_0"));
                    if s.name != "resume_edge__deferred_without_sdk_server" {
                        init = init.sdk_mcp_server("tools");
                    }
                    ("initialize", HostFrame::initialize(captured["request_id"].as_str().unwrap(), init))
                }
                "user" => {
                    let text =
                        if s.name == "defer_resume_allow__1-defer" { "please echo ping" } else { "hi" };
                    ("prompt", HostFrame::prompt(text))
                }
                "control_response" => {
                    let id = captured["response"]["request_id"].as_str().unwrap();
                    let request = pending
                        .remove(id)
                        .unwrap_or_else(|| panic!("{}: answer to unknown request {id}", s.name));
                    match request {
                        CliRequest::HookCallback(_) => match hook_answer(&s.name) {
                            Ok(answer) => ("hook answer", HostFrame::hook_answer(id, answer)),
                            Err(message) => ("hook error", HostFrame::error_response(id, message)),
                        },
                        CliRequest::CanUseTool(req) => (
                            "can_use_tool answer",
                            HostFrame::permission_answer(id, permission_answer(&s.name, &req.input)),
                        ),
                        CliRequest::McpMessage(msg) => ("mcp response", mcp_answer(&s.name, id, &msg)),
                        CliRequest::Other(v) => panic!("{}: answer to unexpected request {v}", s.name),
                    }
                }
                other => panic!("{}: unexpected host frame type {other}", s.name),
            };
            let ours: Value = serde_json::from_str(&built.to_json()).unwrap();
            assert_eq!(ours, captured, "{} t={}: {what}", s.name, c.t);
            assert!(
                TranscriptEntry::from_raw(built.to_json()).unwrap().is_compact(),
                "host lines are compact"
            );
            *checked.entry(what).or_default() += 1;
        }
    }
    for what in ["initialize", "prompt", "hook answer", "hook error", "can_use_tool answer", "mcp response"] {
        assert!(checked.get(what).copied().unwrap_or(0) > 0, "no `{what}` checked: {checked:?}");
    }
}

#[test]
fn captured_host_frames_parse_back_into_host_frames() {
    for s in scenarios() {
        for c in s.lines.iter().filter(|c| c.dir == "host->cli") {
            let frame = tollgate_protocol::parse_host_line(c.frame.get())
                .unwrap_or_else(|e| panic!("{} t={}: {e}", s.name, c.t));
            let back: Value = serde_json::from_str(&frame.to_json()).unwrap();
            let captured: Value = serde_json::from_str(c.frame.get()).unwrap();
            assert_eq!(back, captured, "{} t={}", s.name, c.t);
        }
    }
}

#[test]
fn system_init_lists_the_sdk_server_and_its_tools() {
    let s = scenarios().into_iter().find(|s| s.name == "tool_allow__run").unwrap();
    let init = s
        .cli_frames()
        .find_map(|c| match parse(&s.name, c) {
            Frame::System(System::Init(init)) => Some(init),
            _ => None,
        })
        .unwrap();
    assert_eq!(init.session_id, "21bff659-4833-49ff-a6b8-3dc9ce8124ed");
    assert!(init.tools.iter().any(|t| t == "mcp__tools__echo"));
    assert_eq!(init.mcp_servers[0].name, "tools");
    assert_eq!(init.mcp_servers[0].status, "connected");
}

/// The hook callbacks of one probed scenario, in order.
fn hook_events(scenario: &str) -> Vec<HookEvent> {
    let s = scenarios().into_iter().find(|s| s.name == scenario).unwrap();
    s.cli_frames()
        .filter_map(|c| match parse(&s.name, c) {
            Frame::ControlRequest(ControlRequest { request: CliRequest::HookCallback(h), .. }) => {
                Some(h.input)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn every_hook_event_an_application_registers_reads_into_its_own_input() {
    use tollgate_protocol::HookEventName as E;
    let events = hook_events("hooks_app__context_and_stop");
    let names: Vec<_> = events.iter().map(HookEvent::name).collect();
    assert_eq!(
        names,
        [E::UserPromptSubmit, E::PreToolUse, E::PostToolUse, E::Stop, E::Stop].map(Some),
        "{events:#?}"
    );
    let HookEvent::UserPromptSubmit(prompt) = &events[0] else { unreachable!() };
    assert_eq!(prompt.prompt, r#"call lookup_order {"order_id":"7"}"#);
    let HookEvent::PostToolUse(post) = &events[2] else { unreachable!() };
    assert_eq!(
        (post.tool_name.as_str(), &post.tool_input),
        ("mcp__tools__lookup_order", &json!({"order_id": "7"}))
    );
    assert_eq!(post.tool_response[0]["text"], r#"lookup_order ran with {"order_id": "7"}"#);
    // The Stop hook blocked once: the model went on, and the next Stop says so.
    let (HookEvent::Stop(first), HookEvent::Stop(second)) = (&events[3], &events[4]) else { unreachable!() };
    assert_eq!((first.stop_hook_active, second.stop_hook_active), (false, true));

    let compact = hook_events("compact_manual__run");
    let pre_compact = compact.iter().find_map(|e| match e {
        HookEvent::PreCompact(input) => Some(input),
        _ => None,
    });
    assert_eq!(pre_compact.map(|c| c.trigger.as_str()), Some("manual"), "{compact:#?}");
    // The compaction's summary is written by an agent of its own, which stops like a subagent.
    assert!(
        compact
            .iter()
            .any(|e| matches!(e, HookEvent::SubagentStop(s) if s.agent_type.as_deref() == Some("")))
    );
}

#[test]
fn a_subagents_calls_carry_its_agent_id_and_its_transcript_is_mirrored_apart() {
    let name = "subagent_foreground__run";
    let events = hook_events(name);
    let agent_ids: Vec<(String, Option<String>)> = events
        .iter()
        .filter_map(|e| match e {
            HookEvent::PreToolUse(input) => Some((input.tool_name.clone(), input.agent_id.clone())),
            _ => None,
        })
        .collect();
    let [(task, None), (read, Some(agent)), (write, Some(same))] = &agent_ids[..] else {
        panic!("{agent_ids:?}")
    };
    assert_eq!(
        (task.as_str(), read.as_str(), write.as_str()),
        ("Agent", "mcp__tools__lookup_order", "mcp__tools__create_refund")
    );
    assert_eq!(agent, same);
    assert!(
        events.iter().any(|e| matches!(e, HookEvent::SubagentStop(s) if s.agent_id.as_ref() == Some(agent)))
    );

    let s = scenarios().into_iter().find(|s| s.name == name).unwrap();
    let (mut main, mut sub) = (0, 0);
    for c in s.cli_frames() {
        let Frame::TranscriptMirror(mirror) = parse(name, c) else { continue };
        match mirror.subagent_id() {
            Some(id) => {
                assert_eq!(id, agent);
                sub += mirror.entries.len();
            }
            None => main += mirror.entries.len(),
        }
    }
    assert!(main > 0 && sub > 0, "main {main}, subagent {sub}");
    // The segment's result lists the subagent's denied call.
    let [r] = &results(name)[..] else { panic!("one result") };
    let denied: Vec<&str> = r.permission_denials.iter().map(|d| d.tool_name.as_str()).collect();
    assert_eq!(denied, ["mcp__tools__create_refund"], "{r:?}");
}
