#!/usr/bin/env bash
# Installs everything the project needs on a fresh machine, idempotently: the wasm32-wasip2 Rust
# target, bubblewrap (Debian package; the box every agent's CLI runs in), the pinned Claude Code
# CLI (npm lockfile), the Go/JavaScript/Python guest toolchains (PyPI, npm, crates.io), the API
# contract checkers openapi-spec-validator and Schemathesis (PyPI), PostgreSQL (Debian package; the tests start throwaway clusters) and
# Chromium with chromedriver (Debian packages; the web inbox's browser tests), axe-core (npm lockfile; the
# accessibility check those tests inject) and Lighthouse (npm lockfile; the accessibility audit they run).
set -euo pipefail
cd "$(dirname "$0")/.."

rustup target add wasm32-wasip2
scripts/install-bubblewrap.sh
scripts/install-claude-cli.sh
scripts/install-guest-toolchains.sh
scripts/install-api-checks.sh
scripts/install-postgres.sh
scripts/install-chromium.sh
scripts/install-axe-core.sh
scripts/install-lighthouse.sh
scripts/install-acp-clients.sh
