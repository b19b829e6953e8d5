#!/usr/bin/env bash
# Builds a Go tool component: guest-sdk/go/build.sh SRC_DIR OUT.wasm
#
# SRC_DIR is a Go main package that uses tollgate.invalid/tollgate (with a `replace` to this
# directory in its go.mod). Needs the toolchains of scripts/install-guest-toolchains.sh.
#
# Steps: check the hand-written ABI against the WIT (go test here), go build for wasip1 as a
# reactor (-buildmode=c-shared), add the adapter allocator (cmd/tollgate-patch-core), embed the
# WIT world tool-provider-go (wit/), and wrap it into a component with the wasmtime 48.0.8
# wasi_snapshot_preview1 reactor adapter.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 SRC_DIR OUT.wasm" >&2
  exit 2
fi
SDK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$SDK/../.." && pwd)
SRC=$(cd "$1" && pwd)
OUT=$2
TOOLS=${TOLLGATE_TOOLS:-$ROOT/.tools}
ADAPTER=$TOOLS/wasi_snapshot_preview1.reactor.wasm

export PATH=$TOOLS/venv/bin:$PATH
for tool in go wasm-tools; do
  if ! command -v "$tool" >/dev/null; then
    echo "error: $tool not found in $TOOLS/venv/bin: run scripts/install-guest-toolchains.sh" >&2
    exit 1
  fi
done
if [ ! -f "$ADAPTER" ]; then
  echo "error: $ADAPTER missing: run scripts/install-guest-toolchains.sh" >&2
  exit 1
fi
# No module proxy here: the SDK comes in through a local `replace`, nothing else is fetched.
export GOPROXY=off GOFLAGS=-mod=mod GOTOOLCHAIN=local GOTELEMETRY=off GOSUMDB=off
export GOCACHE=${GOCACHE:-$TOOLS/go-cache} GOPATH=${GOPATH:-$TOOLS/go-path}

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# 1. The ABI glue must match the WIT it is embedded with.
(cd "$SDK" && go test -count=1 . >"$WORK/witcheck.log" 2>&1) || {
  cat "$WORK/witcheck.log" >&2
  echo "error: the Go SDK's canonical ABI does not match the WIT (see above)" >&2
  exit 1
}
# 2. Core module (a reactor: _initialize, no _start).
(cd "$SRC" && GOOS=wasip1 GOARCH=wasm go build -trimpath -buildmode=c-shared -o "$WORK/core.wasm" .)
# 3. Allocator for the adapter (it runs before Go's runtime is up).
(cd "$SDK" && go build -o "$WORK/patch-core" ./cmd/tollgate-patch-core)
"$WORK/patch-core" "$WORK/core.wasm" "$WORK/patched.wasm"
wasm-tools validate "$WORK/patched.wasm"
# 4. Component.
wasm-tools component embed "$SDK/wit" --world tool-provider-go "$WORK/patched.wasm" -o "$WORK/embed.wasm"
mkdir -p "$(dirname "$OUT")"
wasm-tools component new "$WORK/embed.wasm" --adapt "wasi_snapshot_preview1=$ADAPTER" -o "$OUT"
