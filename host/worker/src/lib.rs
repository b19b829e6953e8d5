//! The Worker: it claims the steps of sessions from the store, runs them (a CLI segment, an
//! approval, a tool call, a resume) and commits each result with its state change; with it the
//! model proxy every CLI talks to, the pool of pre-started CLIs, the egress proxy of the agents'
//! boxes, approval deadlines, and the agent directory it loads.
//!
//! This is the crate that links the sandbox (wasmtime) and the CLI runner; the HTTP API
//! (`tollgate-api`) does not, and a process that only serves the API does without this crate.
//!
//! | module | owns |
//! | --- | --- |
//! | [`worker`] | claiming, running and committing steps |
//! | [`deadlines`] | firing approval deadlines that came due: expire or escalate (every Worker) |
//! | [`proxy`] | the loopback model proxy: the CLI gets a per-segment token, never the API key |
//! | [`egress`] | the egress proxy of the agents' boxes: each connection checked against `[sandbox] allowed_outbound_hosts` and logged |
//! | [`tool_runner`] | the sandbox's tool set as the segment's tool runner |
//! | [`telemetry`] | logs on stderr and the OpenTelemetry spans of segments and tool calls |
//! | [`agent`] | an agent directory: `tollgate.toml`, the options factory, `tools/` |
//! | [`config`] | `tollgate.toml` itself: its schema, defaults and errors, parsed once |
//! | [`bundle`] | an agent's files, their digests, the agent digest and `tollgate.lock` |
//! | [`pull`] | agents' versions in the store: pushed from a folder, pulled into a cached folder |
//!
//! The store conversions, images, edits and item reads it shares with the faces are the session
//! service's (`tollgate-sessions`); the metrics it updates and the process set-up are
//! `tollgate-process`'. It depends on no face.

pub mod agent;
pub mod bundle;
pub mod config;
pub mod deadlines;
pub mod egress;
pub mod proxy;
pub mod pull;
pub mod telemetry;
pub mod tool_runner;
pub mod worker;
