//! `fake-claude`: a scripted stand-in for the Claude Code CLI, for the corner cases the real CLI
//! cannot be made to produce on demand. Tests only.
//!
//! It speaks the subset of the stream-json protocol a segment uses (docs/PROTOCOL.md): it
//! insists on `initialize` as the first stdin line (as `--await-initialize` does), answers it
//! (started with `--await-claim`, it then takes a `claim_session` and does the MCP handshake
//! before answering it, as the real CLI's parked spare does), and then follows `FAKE_CLAUDE_MODE`:
//!
//! | mode | behaviour |
//! | --- | --- |
//! | `happy` (default) | reads the prompt, does the MCP handshake, streams a text delta, asks the `PreToolUse` hook about `mcp__tools__echo`, calls it over MCP when allowed, mirrors entries, prints a `result` quoting the tool's text; on stdin EOF mirrors `cost-state` and exits 0 |
//! | `garbage` | after the prompt, prints a line that is not JSON, then waits |
//! | `huge-line` | after the prompt, prints one 5 MB line, then waits |
//! | `exit-mid-turn` | after the prompt, streams a delta and exits 3 with a message on stderr |
//! | `stall` | starts a `sleep` child (same process group), asks the hook, then hangs, ignoring stdin |
//! | `no-init` | never answers `initialize` |
//! | `no-claim` | parked (`--await-claim`): never answers `claim_session`; otherwise like `happy` |
//! | `ask` | like `happy`, but asks `can_use_tool` instead of the hook (a resumed call whose hook was skipped) |
//! | `slow-decider` | asks the hook about `Bash` and, before reading the answer, streams the delta `while deciding`; then prints a `result` naming the decision |
//!
//! `claude --version` prints `FAKE_CLAUDE_VERSION` (default `2.1.328`) and ` (Claude Code)`.

#![forbid(unsafe_code)]

use std::io::{BufRead, Write};
use std::time::Duration;

use serde_json::{Value, json};

fn main() {
    if std::env::args().any(|arg| arg == "--version") {
        let version = std::env::var("FAKE_CLAUDE_VERSION").unwrap_or_else(|_| "2.1.328".into());
        println!("{version} (Claude Code)");
        return;
    }
    let mode = std::env::var("FAKE_CLAUDE_MODE").unwrap_or_else(|_| "happy".into());
    let mut fake = Fake {
        stdin: std::io::stdin().lock(),
        held: std::collections::VecDeque::new(),
        session: "fake-session-1".into(),
        next_id: 0,
    };

    let first = fake.read().unwrap_or(Value::Null);
    if first["request"]["subtype"] != "initialize" {
        eprintln!(
            "Error: --await-initialize requires the initialize control request as the first stdin line, and the first line is a different message."
        );
        std::process::exit(1);
    }
    if mode == "no-init" {
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
    let init_id = first["request_id"].as_str().unwrap_or_default().to_owned();
    let hook_id =
        first["request"]["hooks"]["PreToolUse"][0]["hookCallbackIds"][0].as_str().unwrap_or("").to_owned();
    let handshake = json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "fake", "version": "0.0.0"}});
    // A parked spare (`--await-claim`) connects its sdk MCP server at the claim, not before.
    let parked = std::env::args().any(|arg| arg == "--await-claim");
    if !parked {
        fake.mcp("initialize", handshake.clone());
    }
    emit(&json!({"type": "control_response", "response": {"subtype": "success", "request_id": init_id,
        "response": {"hooks_applied": true, "claude_code_version": "2.1.328", "pid": std::process::id()}}}));
    if parked {
        let claim = fake.read().unwrap_or(Value::Null);
        assert_eq!(claim["request"]["subtype"], "claim_session", "expected the claim, got {claim}");
        if mode == "no-claim" {
            fake.wait_for_eof();
            return;
        }
        fake.mcp("initialize", handshake);
        emit(&json!({"type": "control_response", "response": {"subtype": "success",
            "request_id": claim["request_id"], "response": {"status": "ok", "session_id": fake.session,
            "cwd": claim["request"]["cwd"], "sdk_mcp_settled": true}}}));
    }
    let resumed = std::env::args().any(|arg| arg.starts_with("--resume"));
    if !resumed {
        let prompt = fake.read().unwrap_or(Value::Null);
        assert_eq!(prompt["type"], "user", "expected the prompt, got {prompt}");
    }
    match mode.as_str() {
        "garbage" => {
            println!("this is not a JSON frame");
            fake.wait_for_eof();
        }
        "huge-line" => {
            let huge = json!({"type": "stream_event", "event": {"type": "ping"}, "pad": "x".repeat(5 * 1024 * 1024)});
            emit(&huge);
            fake.wait_for_eof();
        }
        "exit-mid-turn" => {
            fake.delta("half an ans");
            eprintln!("fake-claude: crashed mid-turn");
            std::process::exit(3);
        }
        "stall" => {
            let mut child = std::process::Command::new("sleep").arg("600").spawn().expect("start sleep");
            eprintln!("fake-claude: started sleep {}", child.id());
            fake.hook(&hook_id, "toolu_fake_1");
            // Stall: wait for the child (ten minutes), then forever.
            let _ = child.wait();
            loop {
                std::thread::sleep(Duration::from_secs(60));
            }
        }
        "slow-decider" => fake.slow_decider(&hook_id),
        _ => fake.happy(&hook_id, mode == "ask"),
    }
}

struct Fake<R> {
    stdin: R,
    /// Lines read while waiting for a control response, in order.
    held: std::collections::VecDeque<Value>,
    session: String,
    next_id: u64,
}

impl<R: BufRead> Fake<R> {
    fn read(&mut self) -> Option<Value> {
        if let Some(held) = self.held.pop_front() {
            return Some(held);
        }
        self.read_stdin()
    }

    fn read_stdin(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.stdin.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(
                serde_json::from_str(&line)
                    .unwrap_or_else(|err| panic!("host wrote bad JSON ({err}): {line}")),
            ),
        }
    }

    /// Sends a control request and returns the matching answer's `response` payload.
    fn ask(&mut self, request: Value) -> Value {
        let request_id = self.request(request);
        self.answer(&request_id)
    }

    /// Sends a control request; returns its id.
    fn request(&mut self, request: Value) -> String {
        self.next_id += 1;
        let request_id = format!("fake_req_{}", self.next_id);
        emit(&json!({"type": "control_request", "request_id": request_id, "request": request}));
        request_id
    }

    /// Waits for the answer to `request_id`; holds the other lines read meanwhile.
    fn answer(&mut self, request_id: &str) -> Value {
        loop {
            let Some(line) = self.read_stdin() else { std::process::exit(0) };
            if line["type"] == "control_response" && line["response"]["request_id"] == request_id {
                return line["response"].clone();
            }
            self.held.push_back(line);
        }
    }

    fn mcp(&mut self, method: &str, params: Value) -> Value {
        let mut message = json!({"jsonrpc": "2.0", "method": method, "params": params});
        if !method.starts_with("notifications/") {
            message["id"] = json!(self.next_id);
        }
        self.ask(json!({"subtype": "mcp_message", "server_name": "tools", "message": message}))
    }

    fn hook(&mut self, hook_id: &str, tool_use_id: &str) -> Value {
        self.ask(json!({"subtype": "hook_callback", "callback_id": hook_id, "tool_use_id": tool_use_id,
            "input": {"session_id": self.session, "hook_event_name": "PreToolUse", "tool_name": "mcp__tools__echo",
                      "tool_input": {"text": "ping"}, "tool_use_id": tool_use_id,
                      "mcp_server": {"name": "tools", "source": "sdk"}}}))
    }

    fn delta(&self, text: &str) {
        emit(&json!({"type": "stream_event", "session_id": self.session, "parent_tool_use_id": null,
            "event": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}}));
    }

    fn mirror(&self, entries: Value) {
        emit(
            &json!({"type": "transcript_mirror", "filePath": format!("/fake/config/projects/-fake/{}.jsonl", self.session),
            "entries": entries}),
        );
    }

    fn slow_decider(&mut self, hook_id: &str) {
        let request_id = self.request(json!({"subtype": "hook_callback", "callback_id": hook_id,
            "tool_use_id": "toolu_fake_bash", "input": {"session_id": self.session, "hook_event_name": "PreToolUse",
            "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "toolu_fake_bash"}}));
        self.delta("while deciding");
        let answer = self.answer(&request_id);
        let decision =
            answer["response"]["hookSpecificOutput"]["permissionDecision"].as_str().unwrap_or("none");
        self.mirror(
            json!([{"type": "user", "uuid": "fake-u1", "message": {"role": "user", "content": "hi"}}]),
        );
        emit(&json!({"type": "result", "subtype": "success", "is_error": false, "session_id": self.session,
            "result": format!("Bash: {decision}"), "terminal_reason": "completed",
            "usage": {"input_tokens": 10, "output_tokens": 2}, "permission_denials": []}));
        self.wait_for_eof();
    }

    fn wait_for_eof(&mut self) {
        while self.read().is_some() {}
    }

    fn happy(&mut self, hook_id: &str, ask_instead: bool) {
        let _ = self.mcp("notifications/initialized", json!({}));
        let tools = self.mcp("tools/list", json!({}));
        let mut listed = tools["response"]["mcp_response"]["result"]["tools"][0]["name"].clone();
        if listed.is_null() {
            listed = tools.clone();
        }
        self.mirror(
            json!([{"type": "user", "uuid": "fake-u1", "message": {"role": "user", "content": "hi"}}]),
        );
        self.delta("Calling ");
        self.delta("echo.");
        emit(&json!({"type": "assistant", "session_id": self.session, "parent_tool_use_id": null,
            "message": {"id": "msg_fake_1", "role": "assistant", "model": "fake", "content": [
                {"type": "tool_use", "id": "toolu_fake_1", "name": "mcp__tools__echo", "input": {"text": "ping"}}]}}));
        let allowed = if ask_instead {
            let answer = self.ask(json!({"subtype": "can_use_tool", "tool_name": "mcp__tools__echo",
                "input": {"text": "ping"}, "tool_use_id": "toolu_fake_1"}));
            answer["response"]["behavior"] == "allow"
        } else {
            let answer = self.hook(hook_id, "toolu_fake_1");
            answer["response"]["hookSpecificOutput"]["permissionDecision"] == "allow"
        };
        let tool_text = if allowed {
            let params = json!({"name": "echo", "arguments": {"text": "ping"}, "_meta": {"claudecode/toolUseId": "toolu_fake_1"}});
            let called = self.mcp("tools/call", params);
            called["response"]["mcp_response"]["result"]["content"][0]["text"]
                .as_str()
                .unwrap_or("?")
                .to_owned()
        } else {
            "denied".to_owned()
        };
        self.mirror(json!([{"type": "assistant", "uuid": "fake-a1", "parentUuid": "fake-u1"},
                           {"type": "last-prompt", "lastPrompt": "hi", "leafUuid": "fake-a1"}]));
        emit(&json!({"type": "result", "subtype": "success", "is_error": false, "session_id": self.session,
            "result": format!("listed {listed}; tool said {tool_text}"), "terminal_reason": "completed",
            "usage": {"input_tokens": 10, "output_tokens": 2}, "permission_denials": []}));
        self.wait_for_eof();
        self.mirror(json!([{"type": "cost-state", "totalCostUsd": 0}]));
    }
}

fn emit(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}
