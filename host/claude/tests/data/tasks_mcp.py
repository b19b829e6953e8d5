"""An MCP server that answers `tools/call` with a task, for the tests that pin what the Claude Code
CLI does with MCP Tasks (docs/PROTOCOL.md, "MCP Tasks"). Standard library only.

    python3 tasks_mcp.py --state DIR (--stdio | --http)

It speaks both protocol eras the CLI can pick: `initialize` (2025-11-25 and older, stateful) and
`server/discover` followed by stateless 2026-07-28 requests. It declares tasks every way they
can be declared: the 2025-11-25 `capabilities.tasks` and the `io.modelcontextprotocol/tasks`
extension (SEP-2663). Its one tool, `slow_write`, says `execution.taskSupport: "optional"`.

A `tools/call` becomes a task when the request asks for one: a 2025-11-25 `params.task`, or a
2026-07-28 request whose `_meta` client capabilities declare the tasks extension. The task stays
`working` until the file `DIR/release` exists, then `completed` with the text
`task result: <text>`. A call that is not a task is answered at once with `ran now: <text>`. When the file
`DIR/always_task` exists, every `tools/call` becomes a task, asked for or not (in the shape of the
request's era).

Every JSON-RPC message in and out is appended to `DIR/log.jsonl` as
`{"t", "pid", "transport", "headers", "request", "response"}`; tasks are kept in
`DIR/tasks.json`, so a task outlives the process (a stdio server dies with its CLI). With
`--http` the server writes its port to `DIR/port` once it listens (`--port` fixes it, so a second
server on the same state answers at the same address).
"""

import argparse
import json
import os
import sys
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TASKS_EXT = "io.modelcontextprotocol/tasks"
CAPS_META = "io.modelcontextprotocol/clientCapabilities"
PROTOCOL_META = "io.modelcontextprotocol/protocolVersion"
LEGACY_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]
SERVER_INFO = {"name": "tasks-probe", "version": "1"}
TOOL = {
    "name": "slow_write",
    "description": "Writes the text somewhere slow; may answer with a task.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    "execution": {"taskSupport": "optional"},
    "_meta": {"anthropic/alwaysLoad": True},
}

STATE = ""
START = time.time()


def path(name):
    return os.path.join(STATE, name)


def log(transport, headers, request, response):
    entry = {"t": round(time.time() - START, 3), "pid": os.getpid(), "transport": transport,
             "headers": headers, "request": request, "response": response}
    with open(path("log.jsonl"), "a") as f:
        f.write(json.dumps(entry) + "\n")


def load_tasks():
    try:
        with open(path("tasks.json")) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def save_tasks(tasks):
    with open(path("tasks.json.tmp"), "w") as f:
        json.dump(tasks, f)
    os.replace(path("tasks.json.tmp"), path("tasks.json"))


def now_iso():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def task_fields(task_id, task, legacy):
    status = "completed" if os.path.exists(path("release")) else "working"
    if legacy:
        return {"taskId": task_id, "status": status, "createdAt": task["createdAt"],
                "lastUpdatedAt": now_iso(), "ttl": 3600000, "pollInterval": 500}
    return {"taskId": task_id, "status": status, "createdAt": task["createdAt"],
            "lastUpdatedAt": now_iso(), "ttlMs": 3600000, "pollIntervalMs": 500}


def call_result(text):
    return {"content": [{"type": "text", "text": text}], "isError": False}


def wants_task(params):
    """`legacy` for a 2025-11-25 task request, `modern` for a 2026-07-28 one, else None."""
    if isinstance(params.get("task"), dict):
        return "legacy"
    caps = (params.get("_meta") or {}).get(CAPS_META) or {}
    if TASKS_EXT in (caps.get("extensions") or {}):
        return "modern"
    if os.path.exists(path("always_task")):
        return "modern" if PROTOCOL_META in (params.get("_meta") or {}) else "legacy"
    return None


def answer(message):
    """The JSON-RPC answer to one request (None for a notification)."""
    method, ident = message.get("method"), message.get("id")
    params = message.get("params") or {}
    if ident is None:
        return None
    result, error = None, None
    if method == "initialize":
        asked = params.get("protocolVersion")
        version = asked if asked in LEGACY_VERSIONS else LEGACY_VERSIONS[0]
        result = {"protocolVersion": version, "serverInfo": SERVER_INFO, "capabilities": {
            "tools": {},
            "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
            "extensions": {TASKS_EXT: {}},
        }}
    elif method == "server/discover":
        result = {"resultType": "complete", "supportedVersions": ["2026-07-28"] + LEGACY_VERSIONS,
                  "capabilities": {"tools": {}, "extensions": {TASKS_EXT: {}}},
                  "ttlMs": 0, "cacheScope": "private",
                  "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO}}
    elif method == "ping":
        result = {}
    elif method == "tools/list":
        result = {"tools": [TOOL], "resultType": "complete", "ttlMs": 0, "cacheScope": "private"}
    elif method == "tools/call":
        text = (params.get("arguments") or {}).get("text", "")
        mode = wants_task(params)
        if mode is None:
            result = call_result(f"ran now: {text}")
        else:
            tasks = load_tasks()
            task_id = "task-" + uuid.uuid4().hex[:12]
            tasks[task_id] = {"createdAt": now_iso(), "text": text, "mode": mode}
            save_tasks(tasks)
            fields = task_fields(task_id, tasks[task_id], mode == "legacy")
            fields["status"] = "working"
            result = {"task": fields} if mode == "legacy" else {"resultType": "task", **fields}
    elif method in ("tasks/get", "tasks/result", "tasks/cancel"):
        task_id = params.get("taskId")
        task = load_tasks().get(task_id)
        if task is None:
            error = {"code": -32602, "message": f"unknown task {task_id}"}
        else:
            legacy = task["mode"] == "legacy"
            fields = task_fields(task_id, task, legacy)
            done = call_result(f"task result: {task['text']}")
            if method == "tasks/cancel":
                result = {**fields, "status": "cancelled"}
            elif method == "tasks/result":
                result = done
            elif legacy or fields["status"] == "working":
                result = fields
            else:
                result = {**fields, "result": done}
    elif method == "tasks/list":
        result = {"tasks": [task_fields(k, v, v["mode"] == "legacy") for k, v in load_tasks().items()]}
    else:
        error = {"code": -32601, "message": f"method not found: {method}"}
    if error is not None:
        return {"jsonrpc": "2.0", "id": ident, "error": error}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def serve_stdio():
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        response = answer(message)
        log("stdio", {}, message, response)
        if response is not None:
            print(json.dumps(response), flush=True)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def headers_of_interest(self):
        return {k.lower(): v for k, v in self.headers.items()
                if k.lower().startswith("mcp-") or k.lower() in ("accept", "authorization")}

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        message = json.loads(body)
        response = answer(message)
        log("http", self.headers_of_interest(), message, response)
        if response is None:
            self.send_response(202)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        data = json.dumps(response).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        log("http", self.headers_of_interest(), {"http": "GET"}, None)
        self.send_response(405)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_DELETE(self):
        log("http", self.headers_of_interest(), {"http": "DELETE"}, None)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()


def main():
    global STATE
    parser = argparse.ArgumentParser()
    parser.add_argument("--state", required=True)
    parser.add_argument("--stdio", action="store_true")
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0, help="with --http: the port (0: any free one)")
    args = parser.parse_args()
    STATE = args.state
    os.makedirs(STATE, exist_ok=True)
    if args.stdio:
        serve_stdio()
        return
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    with open(path("port.tmp"), "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(path("port.tmp"), path("port"))
    server.serve_forever()


if __name__ == "__main__":
    main()
