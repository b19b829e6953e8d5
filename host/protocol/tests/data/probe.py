#!/usr/bin/env python3
"""Capture the real CLI's hook events, subagents and compaction into frames/<scenario>.jsonl.

Run from this directory after `cargo build -p tollgate-mock-model`:

    python3 probe.py                 # list the scenarios
    python3 probe.py NAME [NAME …]   # capture them (CLAUDE_BIN and MOCK_BIN override the paths)

Each scenario starts the pinned CLI against the scripted mock model with `--await-initialize`,
registers a matcher (`"matcher":null`, 30 s timeout) for each hook event it names, answers every
`hook_callback` from its script (a `PreToolUse` it does not script is allowed), serves two tools
(`lookup_order`, `create_refund`) as the sdk server `tools`, allows every `can_use_tool`, and
sends its prompts one per `result`. Frames are written as `extract.py` writes the probe's
captures, trimmed the same way (no `control_response` from the CLI, no `stream_event` but text
and input deltas, strings over 400 characters cut to 80, temporary paths as `/srv/probe`), except
that `transcript_mirror` frames are kept: they show which entries belong to a subagent.
"""
import asyncio, json, os, re, shutil, subprocess, sys, tempfile, time, urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "../../../.."))
CLI = os.environ.get("CLAUDE_BIN", os.path.join(ROOT, "tools/claude-cli/node_modules/.bin/claude"))
MOCK = os.environ.get("MOCK_BIN", os.path.join(ROOT, "target/debug/tollgate-mock-model"))
ALL = ["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SubagentStop", "PreCompact"]
ALLOW = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}
TASK = ('call Task {"description":"look up the order","subagent_type":"general-purpose","prompt":'
        + json.dumps('call lookup_order {"order_id":"7"} && call create_refund {"order_id":"7","amount_cents":100}')
        + "}")
SCENARIOS = {
    # Context from UserPromptSubmit and PostToolUse; a Stop that blocks once.
    "hooks_app__context_and_stop": {
        "prompts": ['call lookup_order {"order_id":"7"}'],
        "answers": {
            "UserPromptSubmit": [{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "CTX-FROM-UPS"}}],
            "PostToolUse": [{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "CTX-FROM-POST"}}],
            "Stop": [{"decision": "block", "reason": "say after the stop hook"}],
        },
    },
    # A blocked prompt, then one that runs; a PostToolUse block.
    "hooks_app__blocks": {
        "prompts": ["say blocked", 'call lookup_order {"order_id":"7"}'],
        "answers": {
            "UserPromptSubmit": [{"decision": "block", "reason": "UPS-BLOCKED"}],
            "PostToolUse": [{"decision": "block", "reason": "POST-BLOCK-REASON"}],
        },
    },
    # A foreground subagent (background tasks off): its read runs, its write is denied.
    "subagent_foreground__run": {
        "prompts": [TASK],
        "env": {"CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1"},
        "answers": {"PreToolUse": [ALLOW, ALLOW, {"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": "CALL IT FROM THE MAIN CONVERSATION"}}]},
    },
    # `/compact` between two prompts.
    "compact_manual__run": {"prompts": ["say one", "/compact", "recall"]},
}


def project_key(cwd):
    return re.sub(r"[^a-zA-Z0-9]", "-", os.path.realpath(cwd))


TOOLS = [
    {"name": "lookup_order", "description": "Look an order up.", "annotations": {"readOnlyHint": True},
     "inputSchema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
     "_meta": {"anthropic/alwaysLoad": True}},
    {"name": "create_refund", "description": "Refund an order.",
     "inputSchema": {"type": "object", "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}},
                     "required": ["order_id"]},
     "_meta": {"anthropic/alwaysLoad": True}},
]


def trim(value, tmp):
    if isinstance(value, str):
        value = value.replace(tmp, "/srv/probe")
        return value if len(value) <= 400 else value[:80] + f"…[{len(value) - 80} chars omitted]"
    if isinstance(value, list):
        return [trim(v, tmp) for v in value]
    if isinstance(value, dict):
        return {k: trim(v, tmp) for k, v in value.items()}
    return value


def keep(direction, frame):
    if direction != "cli->host" or not isinstance(frame, dict):
        return True
    if frame.get("type") == "control_response":
        return False
    if frame.get("type") == "stream_event":
        return frame["event"].get("type") == "content_block_delta"
    return True


async def run(name, scenario):
    mock = subprocess.Popen([MOCK], stdout=subprocess.PIPE, text=True)
    base = mock.stdout.readline().strip()
    tmp = tempfile.mkdtemp(prefix="probe-")
    home, config, tmpdir, cwd = [os.path.join(tmp, d) for d in ("home", "config", "tmp", "project")]
    for d in (home, config, tmpdir, cwd):
        os.makedirs(d)
    env = {k: v for k, v in os.environ.items() if not (k.startswith("CLAUDE") or k.startswith("ANTHROPIC"))}
    env.update({"HOME": home, "CLAUDE_CONFIG_DIR": config, "TMPDIR": tmpdir, "ANTHROPIC_BASE_URL": base,
                "ANTHROPIC_API_KEY": "dummy", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "HTTPS_PROXY": "http://127.0.0.1:1", "NO_PROXY": "127.0.0.1,localhost", "CLAUDE_CODE_MAX_RETRIES": "1"})
    env.update(scenario.get("env", {}))
    args = [CLI, "--output-format", "stream-json", "--verbose", "--input-format", "stream-json",
            "--permission-prompt-tool=stdio", "--mcp-config", json.dumps({"mcpServers": {"tools": {"type": "sdk", "name": "tools"}}}),
            "--include-partial-messages", "--session-mirror", "--await-initialize", "--setting-sources="]
    proc = await asyncio.create_subprocess_exec(*args, cwd=cwd, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, limit=64 * 1024 * 1024)
    t0 = time.time()
    lines = []

    def log(direction, frame):
        if keep(direction, frame):
            lines.append({"t": round(time.time() - t0, 3), "dir": direction, "frame": trim(frame, tmp)})

    def send(frame):
        log("host->cli", frame)
        proc.stdin.write((json.dumps(frame, separators=(",", ":")) + "\n").encode())

    def answer(rid, response):
        send({"type": "control_response", "response": {"subtype": "success", "request_id": rid, "response": response}})

    hooks = {ev: [{"matcher": None, "hookCallbackIds": ["cb_" + ev], "timeout": 30}] for ev in ALL}
    send({"type": "control_request", "request_id": "init", "request": {"subtype": "initialize", "hooks": hooks, "sdkMcpServers": ["tools"]}})
    answers = {k: list(v) for k, v in scenario.get("answers", {}).items()}
    prompts = list(scenario["prompts"])

    def next_prompt():
        if not prompts:
            proc.stdin.close()
            return
        text = prompts.pop(0)
        send({"type": "user", "session_id": "", "message": {"role": "user", "content": [{"type": "text", "text": text}]},
              "parent_tool_use_id": None})

    next_prompt()
    while True:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=120)
        if not line:
            break
        frame = json.loads(line)
        log("cli->host", frame)
        kind = frame.get("type")
        if kind == "control_request":
            request, rid = frame["request"], frame["request_id"]
            sub = request.get("subtype")
            if sub == "mcp_message":
                m = request["message"]
                method = m.get("method")
                if method == "initialize":
                    result = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {"listChanged": False}},
                              "serverInfo": {"name": "tools", "version": "1"}}
                elif method == "tools/list":
                    result = {"tools": TOOLS}
                elif method == "tools/call":
                    params = m["params"]
                    result = {"content": [{"type": "text", "text": f"{params['name']} ran with {json.dumps(params.get('arguments'))}"}]}
                else:
                    result = {}
                answer(rid, {"mcp_response": {"jsonrpc": "2.0", "id": m.get("id", 0), "result": result}})
            elif sub == "hook_callback":
                event = request["input"].get("hook_event_name")
                queue = answers.get(event) or []
                response = queue.pop(0) if queue else (ALLOW if event == "PreToolUse" else {})
                answer(rid, response)
            elif sub == "can_use_tool":
                answer(rid, {"behavior": "allow", "updatedInput": request["input"]})
            else:
                send({"type": "control_response", "response": {"subtype": "error", "request_id": rid, "error": "unsupported"}})
        elif kind == "result":
            next_prompt()
    await proc.wait()
    mock.terminate()
    shutil.rmtree(tmp, ignore_errors=True)
    with open(os.path.join(HERE, "frames", name + ".jsonl"), "w") as out:
        for line in lines:
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"{name}: {len(lines)} lines, exit {proc.returncode}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("\n".join(SCENARIOS))
        sys.exit(0)
    for name in sys.argv[1:]:
        asyncio.run(run(name, SCENARIOS[name]))
