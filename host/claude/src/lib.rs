//! Runs one segment of the Claude Code CLI: transport, hooks into the gate, the in-process MCP
//! tool server, transcript mirroring and resume.
//!
//! `tollgate-claude` owns the `claude` process of one segment (docs/ARCHITECTURE.md, "Glossary": one
//! run of the CLI inside a turn, ending with an answer or one deferred tool call). Start with
//! [`run_segment`]: it takes a [`SegmentSpec`] (which binary, which directory, a prompt or a
//! stored session to resume), the segment's [`tollgate_engine::gate::Gate`] and a
//! [`tools::ToolRunner`], and returns a [`SegmentReport`] whose [`SegmentOutcome`] is
//! `Completed`, `Deferred` or `Failed`.
//!
//! | module | owns |
//! | --- | --- |
//! | [`segment`] | the run: spec, outcome, the loop that drives the segment's machine (`segment::machine`: the frames' logic, hook and permission answers, without I/O) |
//! | [`mcp`] | the rmcp tool server and its bridge over `mcp_message` control requests |
//! | [`transport`] | the child process: process group, pipes, line limit, stderr drain |
//! | `answer` | the one mapping from a gate decision to the hook or permission answer the CLI receives |
//! | [`app_hooks`] | the agent's own hooks: their matchers, asking them, the checked answer the CLI receives |
//! | [`launch`] | argv (the agent's options as CLI flags), scratch directories, the resume file |
//! | [`pool`] | pre-started CLIs waiting for `initialize`: their signature, the shelf, the time to live |
//! | [`cli`] | finding the binary and refusing unsupported versions |
//! | [`project_key`] | the transcript folder name of a working directory |
//! | [`tools`] | what the tool server serves ([`tools::ToolRunner`]; the binary adapts the sandbox's tool set to it) |
//!
//! It does not own decisions (the pure `tollgate-engine` does), the wire types
//! (`tollgate-protocol`), storing entries or records, or running deferred calls (the Worker's
//! steps do). The tests in `tests/all/` drive the real CLI against `tollgate-mock-model` and a
//! scripted fake CLI (`src/bin/fake-claude.rs`).
//!
//! # Caveats
//!
//! - Every segment costs a CLI process (~0.5–1 s and ~220 MB against an instant model); this
//!   crate's own overhead is measured by `benches/segment.rs`.
//! - The behaviour matches CLI 2.1.328 ([`cli::SUPPORTED_VERSIONS`]); other versions are refused.
//! - An application hook can add context, block or stop, and rewrite a call's input, which is sent
//!   without a permission decision: only the gate allows and defers ([`app_hooks`]).

mod answer;
pub mod app_hooks;
pub mod cli;
mod error;
pub mod launch;
pub mod mcp;
pub mod pool;
pub mod project_key;
pub mod segment;
pub mod tools;
pub mod transport;

pub use app_hooks::{AppHook, AppHookFuture};
pub use cli::{CliBinary, CliLocator};
pub use error::{CliError, SegmentError};
pub use segment::{
    CliDecider, DeciderAnswer, DeciderFuture, SegmentBox, SegmentEvent, SegmentOutcome, SegmentReport,
    SegmentSpec, SegmentStats, Start, SubagentTranscript, run_segment, run_segment_on,
};
