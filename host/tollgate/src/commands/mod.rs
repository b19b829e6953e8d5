//! One module per `tollgate` subcommand; each has an `Args` struct and an async `run`.

pub mod tools;
pub mod worker;
