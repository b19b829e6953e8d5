//! Tollgate's pure core: tool policies, records, and the gate that decides every tool call of a
//! segment.
//!
//! This crate owns the decisions of docs/ARCHITECTURE.md, "The gate's rules", and the texts the
//! model reads for them. It does no I/O: no tokio, no wasmtime, no database, no process. The host
//! feeds it what the CLI, the options factory and the store report, and carries its answers back.
//!
//! Start with [`gate::Gate`]; it uses
//!
//! - [`policy`]: effects, the `[policies]` table of `tollgate.toml`, and what a policy means for a
//!   call ([`policy::Handling`]);
//! - [`catalog`]: the custom tools of a segment attempt and how CLI tool names map onto them;
//! - [`record`]: the durable outcome of a deferred call and the tool result the model sees for it;
//! - [`media`]: images by reference (digest and media type), as records and messages hold them;
//! - [`texts`]: every text shown to the model, with the seed section each comes from;
//! - [`deadline`]: what an approval deadline does when it passes (expire or escalate);
//! - [`summary`]: a tool's approval summary, the sentence an approver reads first.
//!
//! [`options`] holds a segment's Claude Code options and the one check that stops them from
//! letting a call bypass the gate; [`hooks`] holds an agent's own hooks and the one check that
//! stops their answers from doing so.
//!
//! [`session`] is the session state machine around it: what each step result changes and which
//! step comes next, for the Worker to commit; [`views`] is a session as a client reads it (the
//! snapshot, the calls needing attention, the receipts of the session calls).

#![forbid(unsafe_code)]

#[macro_use]
mod names;

pub mod approval;
pub mod catalog;
pub mod deadline;
pub mod events;
pub mod gate;
pub mod hooks;
pub mod media;
pub mod options;
pub mod policy;
pub mod record;
pub mod review;
pub mod session;
pub mod summary;
pub mod texts;
pub mod tool_names;
pub mod views;
