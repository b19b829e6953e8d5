#!/usr/bin/env bash
# Installs the pinned Claude Code CLI (tools/claude-cli/package-lock.json) for the real-CLI tests and the
# offline demo. Result: tools/claude-cli/node_modules/.bin/claude, version 2.1.328.
#
# Idempotent: when the installed tree was made from the current package.json + package-lock.json and the
# binary answers `--version` with the pinned version, it does nothing (well under a second). Otherwise it
# checks the lockfile (no download address outside the npm registry) and runs `npm ci`, which replaces
# node_modules whole.
#
# Needs node and npm on PATH, and the npm registry. Exit status: 0 installed, 1 failed (with a message).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/tools/claude-cli"
want_version="2.1.328"
bin="$dir/node_modules/.bin/claude"
stamp="$dir/node_modules/.tollgate-install-stamp"

fail() {
  echo "install-claude-cli: $*" >&2
  exit 1
}

command -v npm >/dev/null || fail "npm is not on PATH"

# The stamp is the hash of the two manifests that made node_modules.
wanted_stamp="$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)"

installed_version() {
  [[ -x "$bin" ]] || return 0
  "$bin" --version 2>/dev/null | head -n1 | cut -d' ' -f1 || true
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted_stamp" && "$(installed_version)" == "$want_version" ]]; then
  exit 0
fi

# Every download address the lockfile records must be the npm registry (the machines here reach nothing
# else). An npm configured with omit-lockfile-registry-resolved records none at all, which is fine.
bad_urls="$(grep -o '"resolved": *"[^"]*"' "$dir/package-lock.json" |
  grep -v '"https://registry.npmjs.org/' || true)"
[[ -z "$bad_urls" ]] || fail "package-lock.json downloads from outside the npm registry:
$bad_urls"

echo "install-claude-cli: npm ci in $dir" >&2
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2) || fail "npm ci failed"

got="$(installed_version)"
[[ "$got" == "$want_version" ]] ||
  fail "$bin reports version '${got}', expected $want_version (did the postinstall step that copies the native binary run?)"

echo "$wanted_stamp" >"$stamp"
echo "install-claude-cli: installed $bin ($got)" >&2
