//! One module per `tollgate` subcommand; each has an `Args` struct and an async `run`. `tollgate
//! api` is `tollgate_api::serve`'s, and `tollgate_api::token` reads the API's bearer token for the
//! server and the client commands alike.

pub mod acp;
pub mod agent;
pub mod approvals;
pub mod auth;
pub mod demo;
pub mod dev;
pub mod mcp;
pub mod mock;
pub mod scaffold;
pub mod serve;
pub mod session;
pub mod tools;
pub mod worker;
