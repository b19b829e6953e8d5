#!/usr/bin/env python3
"""Copy the real-CLI captures the golden tests read, from a protocol probe's captures directory.

Run from this directory: python3 extract.py /path/to/captures
Re-run after re-probing a new CLI version; the golden tests then say what changed.

- frames/<scenario>.jsonl: the capture's frames.jsonl lines ({"t","dir","frame"}) as the probe
  wrote them (Python json.dumps: spaced, so not the CLI's bytes). "full" scenarios keep every
  line; "trimmed" ones drop cli->host transcript_mirror and control_response frames (the ~13 KB
  initialize answer) and stream_events other than content_block_delta, to keep the copy small.
- transcript/defer_resume_allow.jsonl: the local transcript file the CLI itself wrote (compact,
  as the CLI writes it) after the defer and the resume; transcript/defer_resume_allow.mirror.jsonl:
  the resume process's mirror frames as the probe recorded them.
- excerpts.jsonl: small frames from _excerpts.md whose scenarios are not in the captures copied here
  (hook timeout cancel, heartbeat, interrupt answer, session state).
"""
import glob, json, os, re, shutil, sys

if len(sys.argv) != 2:
    sys.exit("usage: python3 extract.py <captures directory>")
src = sys.argv[1]
FULL = ["defer_resume_allow/1-defer", "defer_resume_allow/2-resume"]
TRIMMED = [
    "tool_allow/run",
    "tool_ask_allow/run", "tool_ask_deny/run", "tool_updated_input/run", "tool_nodecision/run",
    "tool_deny/run", "mcp_errors/isError", "mcp_errors/jsonrpc_error", "mcp_errors/control_error",
    "hook_error/error_response", "errors/http500", "resume_edge/unknown_id",
    "resume_edge/deferred_without_sdk_server", "defer_resume_defer_again/2-resume",
    "defer_resume_deny/2-resume",
]
EXCERPTS = [
    "control_cancel_request (hook timeout)", "tool_progress heartbeat (pending hook)",
    "session_state_changed running", "session_state_changed idle", "interrupt response",
    "system/background_tasks_changed",
]

def keep(line):
    d = json.loads(line)
    fr = d["frame"]
    if d["dir"] != "cli->host" or not isinstance(fr, dict):
        return True
    t = fr.get("type")
    if t in ("transcript_mirror", "control_response"):
        return False
    if t == "stream_event" and fr["event"].get("type") != "content_block_delta":
        return False
    return True

os.makedirs("frames", exist_ok=True)
os.makedirs("transcript", exist_ok=True)
for run in FULL + TRIMMED:
    name = run.replace("/", "__")
    with open(f"{src}/{run}/frames.jsonl") as f, open(f"frames/{name}.jsonl", "w") as out:
        for line in f:
            if run in FULL or keep(line):
                out.write(line)
(local,) = glob.glob(f"{src}/defer_resume_allow/2-resume/config_projects/*/*.jsonl")
shutil.copyfile(local, "transcript/defer_resume_allow.jsonl")
shutil.copyfile(f"{src}/defer_resume_allow/2-resume/mirror.jsonl", "transcript/defer_resume_allow.mirror.jsonl")

text = open(f"{src}/_excerpts.md").read()
with open("excerpts.jsonl", "w") as out:
    for title in EXCERPTS:
        m = re.search(r"^### " + re.escape(title) + r"\n<!-- (.*?) -->\n```json\n(.*?)\n```", text, re.S | re.M)
        out.write(json.dumps({"source": m.group(1), "frame": json.loads(m.group(2))}) + "\n")
