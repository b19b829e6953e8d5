#!/usr/bin/env bash
# Builds a Python tool module into a component: guest-sdk/python/build.sh TOOL.py OUT.wasm
#
# TOOL.py registers its tools with tollgate_guest.tool. The build generates the app module
# (import TOOL; export tollgate_guest's Tools) and runs componentize-py 0.25.1 against the world
# tool-provider-py of wit/ (tollgate:tool/tool-provider plus wasi:http for fetch). Modules beside
# TOOL.py can be imported. Needs scripts/install-guest-toolchains.sh.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 TOOL.py OUT.wasm" >&2
  exit 2
fi
SDK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SDK/../.." && pwd)
TOOLS=${TOLLGATE_TOOLS:-$ROOT/.tools}
if [ ! -x "$TOOLS/venv/bin/componentize-py" ]; then
  echo "error: componentize-py not found in $TOOLS/venv/bin: run scripts/install-guest-toolchains.sh" >&2
  exit 1
fi
# The package's own builder (tollgate_guest/build.py), from this checkout.
PYTHONPATH="$SDK${PYTHONPATH:+:$PYTHONPATH}" exec "$TOOLS/venv/bin/python" -m tollgate_guest.build "$1" "$2"
