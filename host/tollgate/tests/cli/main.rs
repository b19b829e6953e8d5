//! The `tollgate` binary driven as a user would, against real components built from source.
//!
//! - `logins`: `tollgate worker|serve` refused at start without a model credential.
//! - `scaffold`: `tollgate new tool` and `tollgate build`, one tool per language, outside the repository.
//! - `tools`: `tollgate tools list|call|check`.

mod acp;
mod logins;
mod scaffold;
mod tools;
