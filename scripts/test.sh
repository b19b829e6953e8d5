#!/usr/bin/env bash
# The whole test suite. On a fresh clone it installs what the tests need first (scripts/setup.sh),
# then runs every test of the workspace: unit, golden, integration (real guests built from source,
# the real Claude Code CLI against the scripted mock model) and doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
# The dependency tree: sources, licences, duplicate versions (deny.toml).
scripts/check-deps.sh
# A missing CLI, PostgreSQL, Chromium or API contract checker must fail their tests, never skip them.
export TOLLGATE_REQUIRE_REAL_CLI=1
export TOLLGATE_REQUIRE_POSTGRES=1
export TOLLGATE_REQUIRE_BROWSER=1
export TOLLGATE_REQUIRE_SCHEMATHESIS=1
cargo test --locked
