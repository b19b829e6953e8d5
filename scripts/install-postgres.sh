#!/usr/bin/env bash
# Installs PostgreSQL's server binaries (Debian package `postgresql`) for the store's tests and
# benchmark, idempotently: when initdb and pg_ctl are already there it only prints where they are.
# The tests start their own throwaway cluster (initdb into a temp dir, pg_ctl on a free loopback
# port); no system cluster is needed or used.
set -euo pipefail

find_bin() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then echo "$d"; return 0; fi
  done
  return 1
}

if ! bin=$(find_bin); then
  if [ "$(id -u)" != 0 ]; then
    echo "install-postgres: PostgreSQL is missing and this is not root; run: sudo apt-get install -y postgresql" >&2
    exit 1
  fi
  echo "install-postgres: installing the Debian package postgresql" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >&2
  bin=$(find_bin) || { echo "install-postgres: installed, but no /usr/lib/postgresql/*/bin/initdb found" >&2; exit 1; }
fi
echo "install-postgres: PostgreSQL binaries in $bin ($("$bin/postgres" --version))"
