#!/usr/bin/env bash
# Re-vendors the WASI 0.2 WIT the Go, JavaScript and Python guest SDKs build against, from the
# wasmtime-wasi and wasmtime-wasi-http crates the host pins (Cargo.lock), into the one copy in
# guest-sdk/wasi-wit/ (each SDK's wit/deps/wasi-*.wit links there). Run it after bumping wasmtime;
# `cargo test -p tollgate-sandbox --test all wit` checks that the copy matches what the host links.
set -euo pipefail
cd "$(dirname "$0")/.."

# This platform's packages only: the others need not be downloaded.
metadata=$(cargo metadata --locked --format-version 1 --filter-platform "$(rustc -vV | sed -n 's/^host: //p')")
crate_dir() {
  python3 -c 'import json,os,sys
name = sys.argv[1]
dirs = {os.path.dirname(p["manifest_path"]) for p in json.load(sys.stdin)["packages"] if p["name"] == name}
if len(dirs) != 1:
    sys.exit(f"expected one {name} in Cargo.lock, found {len(dirs)}")
print(dirs.pop())' "$1" <<<"$metadata"
}
wasi=$(crate_dir wasmtime-wasi)
http=$(crate_dir wasmtime-wasi-http)

out=guest-sdk/wasi-wit
rm -f "$out"/wasi-*.wit
vendor() { # vendor SOURCE_FILE: named wasi-<package>@<version>.wit after its `package` line
  local package
  package=$(sed -n 's/^package wasi:\([a-z-]*\)@\([0-9.]*\);$/\1@\2/p' "$1" | head -n1)
  [ -n "$package" ] || { echo "no \`package wasi:…@…;\` line in $1" >&2; exit 1; }
  cp "$1" "$out/wasi-$package.wit"
}
for name in cli clocks filesystem io random sockets; do
  vendor "$wasi/src/p2/wit/deps/$name.wit"
done
vendor "$http/wit/deps/http.wit"
for lang in go js python; do
  for file in "$out"/wasi-*.wit; do
    ln -sfn "../../../wasi-wit/$(basename "$file")" "guest-sdk/$lang/wit/deps/$(basename "$file")"
  done
done
echo "vendored $(ls "$out" | wc -l) WIT files from $wasi and $http into $out"
