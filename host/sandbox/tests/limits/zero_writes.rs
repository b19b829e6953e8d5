//! A guest that writes zero-length buffers as fast as it can, to stdout, to stderr and to the
//! body of an outgoing request. Each empty write costs the guest nothing, so whatever the host
//! keeps or queues per write (a frame, a task, a wakeup) grows with the loop alone and escapes
//! the guest's `memory_mb`. Two wasmtime advisories concern exactly these writes, fixed upstream
//! after the `wasmtime-wasi` and `wasmtime-wasi-http` 48.0.8 we build on (the registry has no
//! later 48.x of either); this test holds the host to a flat memory line on them until then, and
//! after.
//!
//! Measured from outside over 20 s before this test was written: at most ~70 MB for the whole
//! process, and the unchecked body write traps.

use std::time::{Duration, Instant};

use tollgate_sandbox::CallError;
use tollgate_test_guests as guests;

use crate::util::{TestServer, ToolsDir};
use crate::{memory_growth, serial};

const MB: u64 = 1 << 20;
/// How long the guest loops on each target: long enough for hundreds of thousands of writes.
const LOOP_MS: u64 = 1000;
/// The call's deadline, well past the loop.
const TIMEOUT_MS: u64 = 10_000;
/// What the host may grow by over its resident memory before the call, per target. Measured:
/// under 1 MiB for each (650,000 to 790,000 empty writes a second on stdout and stderr in a
/// debug build). Were the host to keep even the 32-byte `Bytes` that stderr's `AsyncWriteStream`
/// queues per empty write, a second of them would pass this bound; a deliberately tiny bound (256 KiB)
/// fails on stdout at 772 KiB.
const BOUND: u64 = 16 * MB;

/// Zero-length writes in a loop to stdout, stderr and an outgoing body each end on their own
/// (done, or a trap for the body written without `check-write`) within the call's limits, and
/// leave the host's peak resident memory within 16 MiB of where it stood before the call.
#[tokio::test]
async fn zero_length_writes_to_stdout_stderr_and_a_request_body_keep_host_memory_flat() {
    let _serial = serial().await;
    let server = TestServer::start(200, "took nothing").await;
    let manifest = format!(
        "allowed_outbound_hosts = [\"http://{}\"]\nmemory_mb = 16\ntimeout_ms = {TIMEOUT_MS}\n",
        server.addr
    );
    let dir =
        ToolsDir::new().component("zero-writes", guests::ZERO_WRITES).manifest("zero-writes", &manifest);
    let tools = dir.load().await;

    // (target, a `blocking-write-and-flush` every so many writes; 0: only `write`).
    for (target, flush_every) in
        [("stdout", 0), ("stderr", 0), ("stderr", 1), ("body", 0), ("checked-body", 0)]
    {
        let args = format!(
            r#"{{"target":"{target}","ms":{LOOP_MS},"count":1000000000,"flush_every":{flush_every},"authority":"{}"}}"#,
            server.addr
        );
        let started = Instant::now();
        let (result, growth) = memory_growth(async || tools.call("zero_writes", &args, None).await).await;
        let took = started.elapsed();
        let outcome = match &result {
            Ok(output) => output.text(),
            Err(error) => error.to_string(),
        };
        eprintln!(
            "zero-length writes to {target} (flush every {flush_every}): {outcome}; host grew by {} KiB in {took:?}",
            growth >> 10
        );
        assert!(
            took < Duration::from_millis(LOOP_MS + 3000),
            "{target}: the call took {took:?} to end ({outcome})"
        );
        match target {
            // The loop ran its time, writing all along: the host was hammered.
            "stdout" | "stderr" | "checked-body" => {
                let output = result.unwrap_or_else(|e| panic!("{target}: {e}"));
                let written: u64 = output
                    .text()
                    .strip_prefix("wrote ")
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("{target}: {}", output.text()));
                assert!(written > 10_000, "{target}: only {written} writes");
            }
            // Without `check-write` the body stream holds one chunk; the next write traps.
            _ => assert!(
                matches!(&result, Err(CallError::Trapped { reason, .. }) if reason.contains("write exceeded budget")),
                "{target}: {outcome}"
            ),
        }
        assert!(growth < BOUND, "{target}: the host grew by {} KiB over its baseline", growth >> 10);
    }
}
