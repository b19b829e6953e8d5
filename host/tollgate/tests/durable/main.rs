//! Durable sessions end to end: Workers as child processes on a real store, the real CLI against
//! the mock model, the example agent's components built from source, and SIGKILL at named points.
//!
//! - `api`: the HTTP API and the `tollgate session|approvals` client against `tollgate serve`.
//! - `matrix`: the seeds' crash matrix.
//! - `outage`: PostgreSQL stopped and started again under `tollgate serve` and a Worker.
//! - `scale`: two Workers on one PostgreSQL database, a thousand sessions waiting for approval,
//!   refused rows.

mod api;
mod matrix;
mod outage;
mod scale;
mod served;
mod tracing;
mod util;
