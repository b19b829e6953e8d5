#!/usr/bin/env bash
# Installs the ACP clients nobody here wrote that the ACP face's tests drive `tollgate acp` with:
# acpx (npm, pinned in tools/acpx/package-lock.json). Idempotent (scripts/lib/npm-pinned.sh).
# Needs node, npm and the npm registry.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/npm-pinned.sh
source "$root/scripts/lib/npm-pinned.sh"
dir="$root/tools/acpx"

acpx_present() {
  [[ -x "$dir/node_modules/.bin/acpx" ]] && return 0
  echo "install-acp-clients: $dir/node_modules/.bin/acpx is missing after npm ci" >&2
  return 1
}

# `install`: the registry lacks the other platforms' builds of an optional dependency of acpx's.
npm_pinned_install install-acp-clients "$dir" acpx_present install
