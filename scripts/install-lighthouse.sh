#!/usr/bin/env bash
# Installs the pinned Lighthouse (tools/lighthouse/package-lock.json) whose accessibility audit the
# browser tests run on each page they check (tools/lighthouse/audit.mjs, attached to the tests' own
# Chromium). Result: tools/lighthouse/node_modules/lighthouse.
#
# Idempotent, like scripts/install-axe-core.sh (scripts/lib/npm-pinned.sh): `npm ci` only when the
# lockfile changed or the package is missing. Needs node and npm on PATH, and the npm registry.
# Exit status: 0 installed, 1 failed (with a message).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/npm-pinned.sh
source "$root/scripts/lib/npm-pinned.sh"
dir="$root/tools/lighthouse"

present() {
  [[ -s "$dir/node_modules/lighthouse/package.json" && -s "$dir/node_modules/puppeteer-core/package.json" ]] && return 0
  echo "install-lighthouse: $dir/node_modules/lighthouse is missing after npm ci" >&2
  return 1
}

npm_pinned_install install-lighthouse "$dir" present
