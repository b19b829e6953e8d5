//! The `tollgate` binary driven as a user would, against real components built from source.
//!
//! - `logins`: `tollgate worker|serve` refused at start without a model credential.
//! - `tools`: `tollgate tools list|call|check`.

mod logins;
mod tools;
