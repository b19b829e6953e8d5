//! The `tollgate` binary driven as a user would, against real components built from source.
//!
//! - `tools`: `tollgate tools list|call|check`.

mod tools;
