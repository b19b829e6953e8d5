#!/usr/bin/env bash
# Installs everything the project needs on a fresh machine, idempotently: the wasm32-wasip2 Rust
# target, the pinned Claude Code CLI (npm lockfile) and, when present, the guest toolchains.
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2
scripts/install-claude-cli.sh
if [ -x scripts/install-guest-toolchains.sh ]; then
  scripts/install-guest-toolchains.sh
fi
