//! The session service: every call a face makes on a session — start, send, decide (approve,
//! reject, edit), cancel, fork, snapshot, list, attention, check, media, grants — over the store, taking
//! and returning domain values (the engine's and the store's), with the caller's rights checked
//! here once.
//!
//! A **face** maps a wire protocol onto this crate and nothing more: the HTTP API and `/mcp`
//! (`tollgate-api`), the command line (`tollgate`), and the faces this round adds (ACP, the Managed
//! Agents API). A face authenticates its callers its own way, builds a [`rights::Caller`], calls
//! [`service::Sessions`], and turns the answer (or the [`error::ClientError`]) into its wire form.
//! It never reads the store to decide who may do what, and never writes a session row itself.
//! The Worker depends on this crate for the store conversions and item reads its steps share
//! with the faces, and never on a face.
//!
//! | module | owns |
//! | --- | --- |
//! | [`service`] | [`service::Sessions`]: the calls a face makes, each checking the caller's rights first |
//! | [`rights`] | roles, actions, the caller, the deployment's rules and why a call is refused (pure) |
//! | [`agents`] | which agent and digest a new session runs under |
//! | [`writes`] | the store writes behind the calls: start, send, decide, cancel, grants, checks, upgrade |
//! | [`reads`] | the store reads behind the calls: the snapshot and its parts, attention, the item reads the Worker shares |
//! | [`convert`] | the state machine's values as the store's |
//! | [`media`] | images: a message's checked and stored, a transcript's by reference and back, a record's for its replay |
//! | [`edits`] | an approver's edited input, checked against the tool's input schema |
//! | [`inline_reads`] | the sandbox of a process that loaded its agent, as a face runs approval-free reads |
//! | [`ids`] | session ids, interrupt ids and client keys |
//! | [`error`] | how a call fails |
//!
//! # Adding a call
//!
//! A new thing a client may do to a session is one method on [`service::Sessions`]: it checks
//! the caller ([`rights::Rules`], adding an [`rights::Action`] when no existing one fits), then
//! makes one store write in [`writes`] (or read in [`reads`]) whose state change comes from
//! `tollgate_engine::session`. Every face then maps that one method; no face reads or writes the
//! store for it. [`service::Sessions::fork`] is one made this way (HTTP and the command line map
//! it; ACP's `session/fork` and the Managed Agents API would map the same method). The calls later
//! work adds, so that no face invents its own:
//!
//! | call | adds | faces that map it |
//! | --- | --- | --- |
//! | a client-run tool's result | `Sessions::submit_tool_result`: the result of a call the client ran (ACP's client tools, a Managed Agents `user.custom_tool_result`) recorded as the call's record | ACP, Managed Agents |
//! | a reconcile | `Sessions::reconcile`: a tool's own answer to an `outcome_unknown` call, or a person's, recorded like a check | HTTP, the inbox, Managed Agents |
//!
//! It links no HTTP server, no sandbox and no CLI runner.

#![forbid(unsafe_code)]

pub mod agents;
pub mod convert;
pub mod edits;
pub mod error;
pub mod ids;
pub mod inline_reads;
pub mod media;
pub mod reads;
pub mod rights;
pub mod service;
pub mod writes;
