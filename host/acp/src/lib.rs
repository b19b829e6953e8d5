//! Tollgate's ACP face: the Agent Client Protocol (v1, over stdio for `tollgate acp`) mapped onto
//! the session service, so an editor (Zed, JetBrains), a headless client (`acpx`) or an agent
//! platform drives a durable, gated Claude Code session.
//!
//! | module | owns |
//! | --- | --- |
//! | [`server`] | one connection: each ACP method as a [`tollgate_sessions::service::Sessions`] call |
//! | [`updates`] | a stored event as `session/update`s, and a turn's end as the prompt's answer (pure) |
//!
//! The agent works in its own workspace on the Worker's machine, never in the client's `cwd`.

pub mod server;
pub mod updates;

pub use server::{Face, serve};
