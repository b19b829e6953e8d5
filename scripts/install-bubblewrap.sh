#!/usr/bin/env bash
# Installs Debian's bubblewrap (package `bubblewrap`, the `bwrap` program), which every Worker runs
# its agents' CLIs in (host/box), idempotently: when it is already there it only prints its version.
# Then it checks that this machine can make a box: a trial `bwrap` with every namespace, as the
# Worker will make one; without unprivileged user namespaces it says what to change.
set -euo pipefail

if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-bubblewrap: bwrap is missing and this is not root; run: sudo apt-get install -y bubblewrap" >&2
    exit 1
  fi
  echo "install-bubblewrap: installing the Debian package bubblewrap" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >&2
fi
if ! bwrap --unshare-all --unshare-user --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin \
  --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev -- /usr/bin/true; then
  echo "install-bubblewrap: bwrap cannot make a box here: unprivileged user namespaces are off" \
    "(sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0)" >&2
  exit 1
fi
echo "install-bubblewrap: $(bwrap --version)"
