//! The guest SDKs' own unit tests, run under their languages' host runtimes with the toolchains
//! `scripts/install-guest-toolchains.sh` installs: the Python SDK's glue under CPython
//! (`unittest`) and the JavaScript SDK's runtime under Node (`npm test`). The Go SDK's run in its
//! build (`guest-sdk/go/build.sh` runs `go test` before every component).

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `command` and returns its stdout and stderr together; fails when it does.
fn run(command: &mut Command, what: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e} (scripts/install-guest-toolchains.sh installs it)"));
    let text =
        format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{what} failed:\n{text}");
    text
}

#[test]
fn the_python_sdks_unit_tests_pass() {
    let root = root();
    let text = run(
        Command::new(root.join(".tools/venv/bin/python"))
            .args(["-m", "unittest", "discover", "-s"])
            .arg(root.join("guest-sdk/python/tests"))
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        "the Python SDK's unittest",
    );
    // Some ran (unittest says OK for none).
    assert!(text.contains("Ran ") && !text.contains("Ran 0 tests"), "{text}");
}

#[test]
fn the_javascript_sdks_unit_tests_pass() {
    run(
        Command::new("npm").args(["test", "--silent"]).current_dir(root().join("guest-sdk/js")),
        "the JavaScript SDK's npm test",
    );
}
