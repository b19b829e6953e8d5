#!/usr/bin/env bash
# Installs the API contract checkers from PyPI into a project-local venv, idempotently:
#
#   .tools/api-venv/   python3 -m venv + pip: openapi-spec-validator and schemathesis, pinned in
#                      scripts/api-check-requirements.txt (reinstalled when the pins change)
#
# The durable test binary's `contract` tests run them against a live `tollgate api`.
# Usage: scripts/install-api-checks.sh        (TOLLGATE_TOOLS=DIR to install elsewhere)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=${TOLLGATE_TOOLS:-$ROOT/.tools}
REQ=$ROOT/scripts/api-check-requirements.txt
VENV=$TOOLS/api-venv
mkdir -p "$TOOLS"

# shellcheck source=lib/pip-pinned.sh
. "$ROOT/scripts/lib/pip-pinned.sh"
pip_pinned_venv api-venv "$VENV" "$REQ"
for bin in openapi-spec-validator schemathesis; do
  [ -x "$VENV/bin/$bin" ] || { echo "error: $bin missing from $VENV/bin after pip install" >&2; exit 1; }
done
printf '== API contract checkers ready in %s: schemathesis %s\n' "$VENV" \
  "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("schemathesis"))')" >&2
