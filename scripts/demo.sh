#!/usr/bin/env bash
# The demo: installs what it needs (the wasm32-wasip2 target, bubblewrap, the pinned Claude Code CLI), builds
# the example support agent from source, and runs it end to end on the embedded SQLite store with
# `tollgate demo`: "Refund order 7", the read tool inline, the refund waiting for approval,
# approved, run once, answered. Offline (the scripted mock model) unless ANTHROPIC_API_KEY is set.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage says what it does; cargo shows its own progress. The first run compiles wasmtime
# and the rest of the host from source: about 10-15 minutes on 2 cores, seconds afterwards.
rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
echo "== [1/4] bubblewrap (the agent's box) and the pinned Claude Code CLI (npm ci from the lockfile)" >&2
scripts/install-bubblewrap.sh >/dev/null
scripts/install-claude-cli.sh >/dev/null
echo "== [2/4] the example agent's components (wasm32-wasip2; first run: 2-4 minutes)" >&2
scripts/build-examples.sh
echo "== [3/4] tollgate itself (first run: about 10 minutes on 2 cores; then seconds)" >&2
cargo build --locked -p tollgate
echo "== [4/4] the demo" >&2
exec target/debug/tollgate demo --agent examples/agents/support "$@"
