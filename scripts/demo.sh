#!/usr/bin/env bash
# The demo: installs what it needs (the wasm32-wasip2 target, the pinned Claude Code CLI), builds
# the example support agent from source, and runs it end to end on the embedded SQLite store with
# `tollgate demo`: "Refund order 7", the read tool inline, the refund waiting for approval,
# approved, run once, answered. Offline (the scripted mock model) unless ANTHROPIC_API_KEY is set.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2 >/dev/null 2>&1 || rustup target add wasm32-wasip2
scripts/install-claude-cli.sh >/dev/null
scripts/build-examples.sh
cargo build --locked --quiet -p tollgate
exec target/debug/tollgate demo --agent examples/agents/support "$@"
