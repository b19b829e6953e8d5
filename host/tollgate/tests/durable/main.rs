//! Durable sessions end to end: Workers as child processes on a real store, the real CLI against
//! the mock model, the example agent's components built from source, and SIGKILL at named points.
//!
//! - `api`: the HTTP API and the `tollgate session|approvals` client against `tollgate serve`.
//! - `matrix`: the seeds' crash matrix.
//! - `scale`: two Workers on one PostgreSQL database, a thousand sessions waiting for approval,
//!   refused rows.
//! - `secrets`: what the agent's `Bash` can reach (environment, process tree, store), the model
//!   proxy's key swap and token revocation, the spend limit within a segment.

mod api;
mod matrix;
mod scale;
mod secrets;
mod served;
mod tracing;
mod util;
