#!/usr/bin/env bash
# Installs the pinned Claude Code CLI (tools/claude-cli/package-lock.json) for the real-CLI tests and the
# offline demo. Result: tools/claude-cli/node_modules/.bin/claude, version 2.1.328.
#
# Idempotent: when the installed tree was made from the current package.json + package-lock.json and the
# binary answers `--version` with the pinned version, it does nothing (well under a second). Otherwise it
# checks the lockfile (no download address outside the npm registry) and runs `npm ci`, which replaces
# node_modules whole (scripts/lib/npm-pinned.sh).
#
# Needs node and npm on PATH, and the npm registry. Exit status: 0 installed, 1 failed (with a message).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/npm-pinned.sh
source "$root/scripts/lib/npm-pinned.sh"
dir="$root/tools/claude-cli"
want_version="2.1.328"
bin="$dir/node_modules/.bin/claude"

right_version() {
  local got=""
  [[ -x "$bin" ]] && got="$("$bin" --version 2>/dev/null | head -n1 | cut -d' ' -f1 || true)"
  [[ "$got" == "$want_version" ]] && return 0
  echo "install-claude-cli: $bin reports version '${got}', expected $want_version (did the postinstall step that copies the native binary run?)" >&2
  return 1
}

npm_pinned_install install-claude-cli "$dir" right_version
