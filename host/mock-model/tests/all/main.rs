//! Integration tests of the mock model, in one test binary.
//!
//! - `util`: an HTTP client, an SSE reader and CLI-shaped request bodies, shared by the others.
//! - `http_api`: the mock over real HTTP on loopback: scripts, gates, errors, the log, the binary.
//! - `real_cli`: the pinned Claude Code CLI against the mock (skipped, loudly, when not installed).

mod http_api;
mod real_cli;
mod util;
