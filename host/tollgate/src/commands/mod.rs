//! One module per `tollgate` subcommand; each has an `Args` struct and an async `run`.

pub mod approvals;
pub mod demo;
pub mod serve;
pub mod session;
pub mod tools;
pub mod worker;
