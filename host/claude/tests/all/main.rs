//! Integration tests of `tollgate-claude`, in one binary (one link instead of one per file).
//!
//! - `util`: temp directories, configured CLIs and segment specs, the example tools, a payments
//!   service that counts refunds, and failure messages that carry the CLI's stderr.
//! - `fake_cli`: the scripted `fake-claude` binary: the frame loop on a happy turn, `can_use_tool`
//!   instead of the hook, and every way the CLI can misbehave (garbage, a 5 MB line, an exit
//!   mid-turn, a stall, no `initialize` answer, a dropped segment). Fast; always run.
//! - `real_cli`: the pinned Claude Code CLI against `tollgate-mock-model` and the example tools
//!   (`lookup_order`, `create_refund`: an in-test runner answering as the example guests do; the
//!   guests themselves run in the `tollgate` crate's tests): inline reads, defer and resume,
//!   rejections, Bash, rewritten input, two writes in one reply, four resumes in a row, pre-started
//!   CLIs (fresh, and a resume whose file is written after the spawn). A failure when the CLI is
//!   not installed, unless `TOLLGATE_SKIP_MISSING` names `cli`, when they skip loudly.
//! - `boxed`: the real CLI in its box: what its commands see, the workspace in and out, links
//!   that point out of it left behind, commands that touch `.claude/` (which the CLI asks about
//!   again after the hook's allow), and a settings file the model writes changing nothing.
//! - `hooks`: the agent's own hooks against the pinned CLI, one test per event (`PreToolUse`,
//!   `PostToolUse`, `UserPromptSubmit`, `Stop`, `SubagentStop`, `PreCompact`), and that no answer
//!   lets a call past the gate.
//! - `subagents`: a `Task` subagent's read and (denied) write, its transcript and model calls;
//!   the defer and resume cycle and two writes in one reply under `dontAsk`.
//! - `mcp_tasks`: what the pinned CLI does with MCP Tasks (docs/PROTOCOL.md, "MCP Tasks"): which
//!   settings declare them over HTTP, stdio and the in-process server, a task the CLI did not ask
//!   for, a background task's result as a later notification, a task open at exit and resume.
//! - `locate`: finding the binary and refusing unsupported versions.
//! - `warm_pool`: the pool of pre-started CLIs with a stand-in process: keys, time to live, cap,
//!   a process killed before the take. Fast; always run.

mod boxed;
mod fake_cli;
mod hooks;
mod locate;
mod mcp_tasks;
mod real_cli;
mod subagents;
mod util;
mod warm_pool;
