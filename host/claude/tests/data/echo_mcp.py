"""A stdio MCP server with one tool, `echo`, for the tests: it answers with the text it was given
and the token its configuration's environment gave it (so a test sees the configuration arrived)."""

import json
import os
import sys

for line in sys.stdin:
    message = json.loads(line)
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        continue
    if method == "initialize":
        version = message.get("params", {}).get("protocolVersion", "2025-06-18")
        result = {"protocolVersion": version, "capabilities": {"tools": {}},
                  "serverInfo": {"name": "docs", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{
            "name": "echo",
            "description": "Echoes the text back.",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "_meta": {"anthropic/alwaysLoad": True},
        }]}
    elif method == "tools/call":
        text = message["params"].get("arguments", {}).get("text", "")
        result = {"content": [{"type": "text", "text": f"echo: {text} token={os.environ.get('DOCS_TOKEN', '')}"}]}
    else:
        result = {}
    print(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}), flush=True)
