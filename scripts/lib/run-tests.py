#!/usr/bin/env python3
"""Runs the workspace's tests as `cargo test --locked --no-fail-fast` would, two test binaries
side by side instead of one after the other.

`cargo test` runs its test binaries one at a time. Ours are unequal: the durable binary alone is
half the suite's time, and the browser tests leave most of the machine idle while they wait on
Chromium. Measured on 2 cores, one at a time used 73% of the CPU over the run. This builds every
test binary with one `cargo test --no-run` (the same unit graph as a plain `cargo test`, so
nothing compiles twice), runs them in a pool (`TOLLGATE_TEST_JOBS`, default 2), longest first,
each with the working directory and `CARGO_*` variables cargo gives it, the doc tests among them.

Each binary's output is printed whole when it ends (never interleaved with another's) and kept
in target/test-logs/. Exits 1 when any binary or doc test failed, after running all of them, and
prints a table of each binary's time.

The code's checks that scripts/test.sh runs first (rustfmt, clippy, rustdoc) leave their seconds
in the file TOLLGATE_CHECK_TIMES names (target/test-logs/checks.tsv); they join the table as
`check <name>`.

The suite's time is a budget. `scripts/lib/suite-times.tsv` is its record: each binary's seconds
in a fresh clone's run on 2 cores (CI's machine), as the last change that measured it left them.
The table printed at the end puts each binary's time beside its record and the difference, so a
change reports the seconds it added (or saved); one that adds a binary or makes one slower updates
the record in the same commit, with its figures in the commit message. Soaks and benchmarks are
not test binaries of this suite: they run by hand (`cargo bench`, `cargo test -- --ignored`).
"""

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

# The longest first ("package target", as measured on 2 cores from a fresh clone: durable 479 s,
# browser 231 s, cli 98 s, sandbox all 75 s, claude all 45 s, ...), so that the pool ends as evenly
# as it can; the rest follow in cargo's order.
LONGEST_FIRST = [
    "tollgate durable",
    "tollgate browser",
    "tollgate cli",
    "tollgate-sandbox all",
    "tollgate-claude all",
    "tollgate-store conformance",
    "tollgate-sandbox limits",
    "tollgate-store faults",
    "tollgate-store outbox",
]


def record(root):
    """The budget's record: {label: seconds} from scripts/lib/suite-times.tsv (empty without it)."""
    path = os.path.join(root, "scripts", "lib", "suite-times.tsv")
    seconds = {}
    if os.path.exists(path):
        with open(path) as rows:
            for row in rows:
                if row.strip() and not row.startswith("#"):
                    label, value = row.rstrip("\n").split("\t")
                    seconds[label] = float(value)
    return seconds


def build(root):
    """Builds every test binary; returns [(package, version, target, kind, manifest, executable)]."""
    command = ["cargo", "test", "--locked", "--no-run", "--message-format=json-render-diagnostics"]
    process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, text=True)
    binaries = []
    for line in process.stdout:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message["profile"]["test"]:
            continue
        # `path+file:///…/host/store#tollgate-store@0.1.0`, or `…/host/tollgate#0.1.0` when the
        # package is named like its folder.
        package = message["package_id"].rsplit("#", 1)[-1]
        manifest = message["manifest_path"]
        name, version = package.split("@") if "@" in package else (os.path.basename(os.path.dirname(manifest)), package)
        target = message["target"]
        binaries.append((name, version, target["name"], target["kind"][0], manifest, message["executable"]))
    if process.wait() != 0:
        sys.exit(f"run-tests: `{' '.join(command)}` failed")
    return binaries


def rank(binary):
    """Where `binary` starts: its place in LONGEST_FIRST, else after all of those."""
    key = f"{binary[0]} {binary[2]}"
    return LONGEST_FIRST.index(key) if key in LONGEST_FIRST else len(LONGEST_FIRST)


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    jobs = int(os.environ.get("TOLLGATE_TEST_JOBS", "2"))
    binaries = sorted(build(root), key=rank)
    logs = os.path.join(root, "target", "test-logs")
    os.makedirs(logs, exist_ok=True)
    cargo = os.environ.get("CARGO", "cargo")
    # Where cargo has test binaries find shared libraries: proc-macro crates' tests link the
    # toolchain's `libstd-*.so`.
    host_libdir = subprocess.run(
        ["rustc", "--print", "target-libdir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    libdirs = [host_libdir, os.path.join(root, "target", "debug", "deps")]
    library_path = os.pathsep.join(libdirs + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    printing = threading.Lock()
    print(f"run-tests: {len(binaries)} test binaries, {jobs} at a time", flush=True)

    def logged(label, heading, command, cwd, env, log):
        """Runs `command` with its output in `log`, then prints the log whole and the verdict."""
        started = time.monotonic()
        with open(log, "w") as out:
            code = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
        seconds = time.monotonic() - started
        with printing:
            print(f"\n== {heading}", flush=True)
            with open(log) as text:
                sys.stdout.write(text.read())
            print(f"== {label}: {'ok' if code == 0 else f'FAILED (exit {code})'} in {seconds:.0f} s", flush=True)
        return label, code, seconds

    def run(binary):
        name, version, target, kind, manifest, executable = binary
        label = f"{name} {kind} {target}"
        manifest_dir = os.path.dirname(manifest)
        env = dict(
            os.environ,
            CARGO=cargo,
            CARGO_MANIFEST_DIR=manifest_dir,
            CARGO_MANIFEST_PATH=manifest,
            CARGO_PKG_NAME=name,
            CARGO_PKG_VERSION=version,
            CARGO_CRATE_NAME=target.replace("-", "_"),
            LD_LIBRARY_PATH=library_path,
        )
        heading = f"{label} ({os.path.relpath(executable, root)})"
        log = os.path.join(logs, f"{name}-{kind}-{target}.log")
        return logged(label, heading, [executable], manifest_dir, env, log)

    def doc_tests():
        command = [cargo, "test", "--locked", "--no-fail-fast", "--doc"]
        log = os.path.join(logs, "doc-tests.log")
        return logged("doc tests", "doc tests (cargo test --doc)", command, root, os.environ, log)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        # The doc tests are one more job of the pool, after the longest binaries.
        futures = [pool.submit(run, binary) for binary in binaries[:3]]
        futures.append(pool.submit(doc_tests))
        futures += [pool.submit(run, binary) for binary in binaries[3:]]
        results = [future.result() for future in futures]

    # The code's checks scripts/test.sh ran before the build (rustfmt, clippy, rustdoc) have their
    # seconds in the same budget, labelled `check <name>`.
    # scripts/test.sh names the file (TOLLGATE_CHECK_TIMES), so a run without the checks reports none.
    checks = os.environ.get("TOLLGATE_CHECK_TIMES")
    if checks and os.path.exists(checks):
        with open(checks) as rows:
            for row in rows:
                if row.strip():
                    label, value = row.rstrip("\n").split("\t")
                    results.append((label, 0, float(value)))
    budget = record(root)
    print(f"\nrun-tests: {time.monotonic() - started:.0f} s in all; the binaries that took over 5 s, "
          "beside their record (scripts/lib/suite-times.tsv):")
    print(f"  {'now':>6}    {'record':>6}    {'added':>6}")
    for label, code, seconds in sorted(results, key=lambda r: -r[2]):
        if seconds > 5 or code != 0 or label in budget:
            was = budget.get(label)
            was_text = f"{was:6.0f} s" if was is not None else "   new  "
            added = f"{seconds - was:+6.0f} s" if was is not None else f"{seconds:+6.0f} s"
            print(f"  {seconds:6.0f} s  {was_text}  {added}  {'ok    ' if code == 0 else 'FAILED'}  {label}")
    with open(os.path.join(logs, "suite-times.tsv"), "w") as out:
        out.write("# label\tseconds (this run; copy over scripts/lib/suite-times.tsv to update the record)\n")
        for label, _, seconds in sorted(results):
            out.write(f"{label}\t{seconds:.0f}\n")
    failed = [label for label, code, _ in results if code != 0]
    if failed:
        print(f"run-tests: FAILED: {', '.join(failed)}")
        sys.exit(1)
    print("run-tests: every test binary and doc test passed")


if __name__ == "__main__":
    main()
