#!/usr/bin/env bash
# Installs the official TypeScript Claude Agent SDK pinned in tools/ts-sdk/package-lock.json: the
# baseline that `cargo bench -p tollgate --bench turn` and `-p tollgate-claude --bench segment` measure
# Tollgate against. The SDK drives the project's own pinned CLI (scripts/install-claude-cli.sh), not the
# one it bundles. Not part of the test suite; the benches skip the SDK's rows, saying so, without it.
#
# Idempotent, like install-claude-cli.sh (scripts/lib/npm-pinned.sh). Needs node, npm and the npm registry.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/npm-pinned.sh
source "$root/scripts/lib/npm-pinned.sh"
dir="$root/tools/ts-sdk"

sdk_present() {
  [[ -f "$dir/node_modules/@anthropic-ai/claude-agent-sdk/package.json" &&
    -f "$dir/node_modules/zod/package.json" ]] && return 0
  echo "install-ts-sdk: $dir/node_modules lacks @anthropic-ai/claude-agent-sdk or zod after npm ci" >&2
  return 1
}

npm_pinned_install install-ts-sdk "$dir" sdk_present
