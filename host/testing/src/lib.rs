//! What the host's end-to-end tests and benches share, written once.
//!
//! - [`world`]: one test's world (an agent built from source, a store, the scripted mock model,
//!   the payments service, Workers as child processes to SIGKILL) and the one way the tests call
//!   the HTTP API, which checks every answer against the generated OpenAPI document.
//! - [`served`]: a `tollgate serve` or `tollgate api` of a [`world::World`] as a child process.
//! - [`serve`] and [`agent`]: a real server the way the benches start one, and the example support
//!   agent laid out for it.
//! - [`mcp`]: an MCP client of a server's `/mcp/{agent}`.
//! - [`park`]: sessions parked on an approval by the thousand, straight through the store.
//! - [`chaos`]: the chaos soak's harness and its checker, run small by a test and whole by a bench.
//! - [`ts_sdk`]: where the benches find the official TypeScript Agent SDK they measure against.
//! - [`skip`]: what a test does when a real dependency (the CLI, PostgreSQL, schemathesis, a
//!   browser) is missing: it fails, unless `TOLLGATE_SKIP_MISSING` names it (re-exported from
//!   `tollgate-store-testing`, the support crate every test support crate reaches).
//!
//! The `tollgate` binary these start is the one Cargo built for the test or bench that runs them
//! ([`tollgate_binary`]).

pub mod agent;
pub mod chaos;
pub mod mcp;
pub mod park;
pub mod serve;
pub mod served;
pub mod ts_sdk;
pub mod world;

pub use tollgate_store_testing::skip;

use std::path::{Path, PathBuf};

/// The `tollgate` binary: Cargo names it in `CARGO_BIN_EXE_tollgate` when it runs an integration
/// test or bench of the `tollgate` package; a test binary run by hand finds it beside its own
/// directory (`target/<profile>/deps/..`).
pub fn tollgate_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_tollgate") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut dir = exe.parent().expect("the test binary's directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join("tollgate")
}

/// The compiled components every test's `tollgate` process shares (`target/tmp/cwasm-cache`, the
/// folder the sandbox's own tests use): a component is compiled once per run of the suite, not
/// once per test. Artifacts are keyed by the component's digest and the engine's settings, and
/// written by rename, so processes side by side share the folder safely.
pub fn component_cache() -> PathBuf {
    let binary = tollgate_binary();
    let target = binary.parent().and_then(Path::parent).expect("the binary sits in target/<profile>/");
    target.join("tmp/cwasm-cache")
}

/// Whether process `pid` runs: it exists and is not a zombie (one that only waits to be reaped;
/// an orphan's may wait long where pid 1 does not reap).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S …`: the state follows the last `)`.
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// The pids of the processes whose arguments (`/proc/PID/cmdline` split at its NULs, empty ones
/// left out) satisfy `matches`. A process that ends while it is read is left out.
pub fn processes(matches: impl Fn(&[&[u8]]) -> bool) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
        if matches(&args) {
            found.push(pid);
        }
    }
    found
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}
