#!/usr/bin/env bash
# Builds every non-Rust example tool and the hostile test guests into OUTDIR/<lang>/<name>.wasm,
# with each example's manifest copied beside it as OUTDIR/<lang>/<name>.toml:
#
#   go/orders  go/payments  go/hostile  go/throwing          (guest-sdk/go/build.sh)
#   js/orders  js/payments  js/hostile  js/throwing          (guest-sdk/js/bin/build.mjs)
#   python/orders  python/payments  python/throwing          (guest-sdk/python/build.sh)
#
# Usage: scripts/build-guests.sh OUTDIR [LANG...]   (LANG: go js python; all by default)
# A component newer than its source, its SDK, wit/tool and the toolchain stamps is kept;
# TOLLGATE_REBUILD=1 rebuilds everything.
# Needs scripts/install-guest-toolchains.sh first; fails, naming it, when a toolchain is missing.
# Prints one line per component: size and build time.
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 OUTDIR [go|js|python ...]" >&2
  exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
shift
# One build of OUTDIR at a time: test binaries run side by side (scripts/lib/run-tests.py) and each
# asks for the guests; the second waits, then finds them up to date.
exec 9>"$OUT/.build.lock"
flock 9
LANGS=${*:-go js python}
TOOLS=${TOLLGATE_TOOLS:-$ROOT/.tools}

missing() {
  echo "error: $1 is missing: run scripts/install-guest-toolchains.sh" >&2
  exit 1
}
for lang in $LANGS; do
  case $lang in
    go)
      [ -x "$TOOLS/venv/bin/go" ] || missing "go ($TOOLS/venv/bin/go)"
      [ -x "$TOOLS/venv/bin/wasm-tools" ] || missing "wasm-tools ($TOOLS/venv/bin/wasm-tools)"
      [ -s "$TOOLS/wasi_snapshot_preview1.reactor.wasm" ] || missing "the preview1 reactor adapter ($TOOLS/wasi_snapshot_preview1.reactor.wasm)"
      ;;
    js)
      command -v node >/dev/null || missing "node"
      [ -d "$ROOT/guest-sdk/js/node_modules/@bytecodealliance/componentize-js" ] || missing "componentize-js (guest-sdk/js/node_modules)"
      [ -d "$ROOT/guest-sdk/js/node_modules/componentize-qjs" ] || missing "componentize-qjs (guest-sdk/js/node_modules)"
      ;;
    python)
      [ -x "$TOOLS/venv/bin/componentize-py" ] || missing "componentize-py ($TOOLS/venv/bin/componentize-py)"
      ;;
    *)
      echo "error: unknown language $lang" >&2
      exit 2
      ;;
  esac
done

# Whether $1 (a built component) is older than any of the other arguments' files: its source, its
# SDK, the WIT, the installed toolchains. Rebuilding only then keeps repeated test runs fast.
# Files only: a folder's time changes when anything comes or goes in it (Python's __pycache__ as a
# build imports the source, `npm pack`'s passing wit-packed/), which would rebuild every guest of a
# language, with new bytes to compile again, at every run. A deleted source file is not seen:
# TOLLGATE_REBUILD=1 rebuilds everything.
stale() {
  local dest=$1
  shift
  [ -f "$dest" ] || return 0
  [ -n "$(find -L "$@" -path '*/node_modules' -prune -o -path '*/__pycache__' -prune -o -type f -newer "$dest" -print -quit 2>/dev/null)" ]
}

# build LANG NAME SOURCE [MANIFEST]
build() {
  local lang=$1 name=$2 src=$3 manifest=${4:-}
  local dest=$OUT/$lang/$name.wasm start end srcdir
  mkdir -p "$OUT/$lang"
  if [ -d "$src" ]; then srcdir=$src; else srcdir=$(dirname "$src"); fi
  local stamp=$TOOLS/venv/.requirements
  [ "$lang" = js ] && stamp=$ROOT/guest-sdk/js/node_modules/.tollgate-lock
  if [ "${TOLLGATE_REBUILD:-}" != 1 ] && ! stale "$dest" "$srcdir" "$ROOT/guest-sdk/$lang" "$ROOT/wit/tool" "$stamp" "$0"; then
    [ -n "$manifest" ] && cp "$manifest" "$OUT/$lang/$name.toml"
    printf '%-8s %-10s %10d bytes  up to date\n' "$lang" "$name" "$(stat -c %s "$dest")"
    return
  fi
  start=$(date +%s%N)
  case $lang in
    go) "$ROOT/guest-sdk/go/build.sh" "$src" "$dest" ;;
    js) node "$ROOT/guest-sdk/js/bin/build.mjs" "$src" -o "$dest" 2>"$OUT/$lang/$name.log" || {
          cat "$OUT/$lang/$name.log" >&2
          exit 1
        } ;;
    python) "$ROOT/guest-sdk/python/build.sh" "$src" "$dest" ;;
  esac
  end=$(date +%s%N)
  if [ -n "$manifest" ]; then
    cp "$manifest" "$OUT/$lang/$name.toml"
  fi
  printf '%-8s %-10s %10d bytes %6d ms\n' "$lang" "$name" "$(stat -c %s "$dest")" $(((end - start) / 1000000))
}

ex=$ROOT/examples/tools
for lang in $LANGS; do
  case $lang in
    go)
      build go orders "$ex/go/orders" "$ex/go/orders/orders.toml"
      build go payments "$ex/go/payments" "$ex/go/payments/payments.toml"
      build go hostile "$ROOT/guest-sdk/go/test-cases/hostile"
      build go throwing "$ROOT/guest-sdk/go/test-cases/throwing"
      ;;
    js)
      build js orders "$ex/js/orders/tool.js" "$ex/js/orders/orders.toml"
      build js payments "$ex/js/payments/tool.js" "$ex/js/payments/payments.toml"
      build js hostile "$ROOT/guest-sdk/js/test-cases/hostile.js"
      build js throwing "$ROOT/guest-sdk/js/test-cases/throwing.js"
      ;;
    python)
      build python orders "$ex/python/orders/orders.py" "$ex/python/orders/orders.toml"
      build python payments "$ex/python/payments/payments.py" "$ex/python/payments/payments.toml"
      build python throwing "$ROOT/guest-sdk/python/test-cases/throwing.py"
      ;;
  esac
done
