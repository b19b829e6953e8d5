#!/usr/bin/env bash
# Installs the pinned axe-core (tools/axe-core/package-lock.json) that the browser tests inject into
# each page they check for accessibility. Result: tools/axe-core/node_modules/axe-core/axe.min.js.
#
# Idempotent, like scripts/install-claude-cli.sh (scripts/lib/npm-pinned.sh): `npm ci` only when the
# lockfile changed or the file is missing. Needs node and npm on PATH, and the npm registry.
# Exit status: 0 installed, 1 failed (with a message).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/npm-pinned.sh
source "$root/scripts/lib/npm-pinned.sh"
dir="$root/tools/axe-core"

present() {
  [[ -s "$dir/node_modules/axe-core/axe.min.js" ]] && return 0
  echo "install-axe-core: $dir/node_modules/axe-core/axe.min.js is missing after npm ci" >&2
  return 1
}

npm_pinned_install install-axe-core "$dir" present
