#!/usr/bin/env bash
# The whole test suite. On a fresh clone it installs what the tests need first (scripts/setup.sh),
# checks the code (rustfmt, clippy, rustdoc: warnings are errors), then runs every test of the
# workspace: unit, golden, integration (real guests built from source, the real Claude Code CLI
# against the scripted mock model), doc tests, and the docs' own tests (`docs`: the crate graph
# of docs/ARCHITECTURE.md against `cargo metadata`, the guide's TOML and commands).
#
# The installs (downloads, mostly) run while the tests compile, and the test binaries run two at a
# time (scripts/lib/run-tests.py; TOLLGATE_TEST_JOBS=1 runs them one after the other).
set -euo pipefail
cd "$(dirname "$0")/.."

# The guests' target first: the tests' build compiles the Rust guests (host/test-guests).
rustup target add wasm32-wasip2
mkdir -p target
setup_log=target/setup.log
# Then everything else the tests need, and the dependency tree's check (sources, licences,
# duplicate versions: deny.toml), in the background.
( scripts/setup.sh && scripts/check-deps.sh ) >"$setup_log" 2>&1 &
setup=$!
# The code's checks, before the tests' build: formatting, clippy with warnings denied, and rustdoc
# with warnings denied (broken links, bad code blocks; `missing_docs` is denied in Cargo.toml's
# [workspace.lints]). clippy and rustdoc share the dependencies' check metadata (rustdoc checks the
# workspace's own crates again: clippy's metadata is its own); the tests' build needs code, not
# metadata, so it neither reuses nor redoes theirs. Each check's seconds go to
# target/test-logs/checks.tsv, and the runner puts them beside their record.
mkdir -p target/test-logs
checks=target/test-logs/checks.tsv
: >"$checks"
export TOLLGATE_CHECK_TIMES=$PWD/$checks
check() {
  local label=$1 started=$SECONDS
  shift
  "$@"
  printf 'check %s\t%s\n' "$label" "$((SECONDS - started))" >>"$checks"
}
check fmt cargo fmt --all --check
check clippy cargo clippy --workspace --all-targets --locked -- -D warnings
check rustdoc env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
# The tests' build: the runner below asks cargo for the same binaries again and finds them built.
cargo test --locked --no-run
if ! wait "$setup"; then
  cat "$setup_log"
  echo "test.sh: scripts/setup.sh or scripts/check-deps.sh failed (above; kept in $setup_log)" >&2
  exit 1
fi
cat "$setup_log"
# A missing CLI, PostgreSQL, Chromium or API contract checker fails its tests, never skips them.
unset TOLLGATE_SKIP_MISSING
exec python3 scripts/lib/run-tests.py
