//! The repository's docs held against the code: what they say the code is, the code must be.
//!
//! - `architecture`: `docs/ARCHITECTURE.md`'s crate table against `cargo metadata` (every crate,
//!   its path, and every dependency arrow between the workspace's crates), its lists of step kinds
//!   against `StepKind::ALL`, and every code item it names against the source.
//!
//! Each test reads files and runs `cargo metadata` or `tollgate --help`; none builds anything.

mod architecture;
mod guide;
mod util;
