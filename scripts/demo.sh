#!/usr/bin/env bash
# The demo: installs what it needs (the wasm32-wasip2 target, bubblewrap, the pinned Claude Code CLI), builds
# the example support agent from source, and runs it end to end on the embedded SQLite store with
# `tollgate demo`: "Refund order 7", the read tool inline, the refund waiting for approval,
# approved, run once, answered. Offline (the scripted mock model) unless ANTHROPIC_API_KEY is set.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage says what it does; cargo shows its own progress. The first run compiles wasmtime
# and the rest of the host from source: about 8 minutes on 2 cores, seconds afterwards. The
# installs and the example's components (their own cargo, their own target folder) run meanwhile.
rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
mkdir -p target
log=target/demo-setup.log
echo "== [1/3] in the background: bubblewrap (the agent's box), the pinned Claude Code CLI (npm ci from the lockfile), the example agent's components (wasm32-wasip2)" >&2
( scripts/install-bubblewrap.sh && scripts/install-claude-cli.sh && scripts/build-examples.sh ) >"$log" 2>&1 &
setup=$!
echo "== [2/3] tollgate itself (first run: about 8 minutes on 2 cores; then seconds)" >&2
cargo build --locked -p tollgate -p tollgate-mock-model
if ! wait "$setup"; then
  cat "$log" >&2
  echo "demo.sh: installing or building the example failed (above; kept in $log)" >&2
  exit 1
fi
tail -n 1 "$log" >&2
echo "== [3/3] the demo" >&2
exec target/debug/tollgate demo --agent examples/agents/support "$@"
