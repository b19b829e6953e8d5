# Sourced by the install scripts of the npm packages the project pins (tools/<name>/package-lock.json).
#
# npm_pinned_install NAME DIR CHECK [install]: installs DIR's lockfile with `npm ci` unless DIR/node_modules was
# made from the current package.json + package-lock.json (a stamp of their hash) and CHECK (a command)
# succeeds; then runs CHECK again and writes the stamp. Before `npm ci` it checks that every download
# address the lockfile records is the npm registry (the machines here reach nothing else; an npm that
# omits `resolved` records none, which is fine). Exits 1 with a message naming NAME on failure.

npm_pinned_fail() {
  echo "$1: $2" >&2
  exit 1
}

# With `install` as the fourth argument it runs `npm install --no-save` instead, which installs the
# lockfile's versions and checks their integrity too, for a lockfile `npm ci` refuses because the
# registry lacks other platforms' optional packages (it then says the lock is out of sync).
npm_pinned_install() {
  local name="$1" dir="$2" check="$3" mode="${4:-ci}"
  local stamp="$dir/node_modules/.tollgate-install-stamp"
  command -v npm >/dev/null || npm_pinned_fail "$name" "npm is not on PATH"

  local wanted_stamp
  wanted_stamp="$(cat "$dir/package.json" "$dir/package-lock.json" | sha256sum | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted_stamp" ]] && "$check" >/dev/null 2>&1; then
    return 0
  fi

  local bad_urls
  bad_urls="$(grep -o '"resolved": *"[^"]*"' "$dir/package-lock.json" |
    grep -v '"https://registry.npmjs.org/' || true)"
  [[ -z "$bad_urls" ]] || npm_pinned_fail "$name" "package-lock.json downloads from outside the npm registry:
$bad_urls"

  if [[ "$mode" == install ]]; then
    echo "$name: npm install --no-save in $dir (the lockfile's versions)" >&2
    (cd "$dir" && npm install --no-save --no-audit --no-fund --loglevel=error >&2) ||
      npm_pinned_fail "$name" "npm install failed"
  else
    echo "$name: npm ci in $dir" >&2
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2) || npm_pinned_fail "$name" "npm ci failed"
  fi
  "$check" || exit 1
  echo "$wanted_stamp" >"$stamp"
  echo "$name: installed $dir/node_modules" >&2
}
