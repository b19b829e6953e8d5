//! The errors of the public API: starting the mock and waiting on it.
//!
//! Both are terminal for a test: the mock does not retry anything itself. Read [`WaitError`] first; its
//! messages carry what the mock saw, so a failed wait explains itself.

use std::net::SocketAddr;
use std::time::Duration;

use crate::gates::GateStatus;

/// The mock could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// Binding the listening socket failed (the port is taken, for a fixed port).
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A wait on the mock ran out of time.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError {
    /// Not enough requests reached a gate in time.
    #[error("gate `{gate}`: wanted {wanted} arrival(s) within {timeout:?}, saw {status:?}")]
    Gate {
        /// The gate.
        gate: String,
        /// The arrivals waited for.
        wanted: u64,
        /// How long the wait lasted.
        timeout: Duration,
        /// The gate when the wait gave up.
        status: GateStatus,
    },
    /// Not enough requests were logged in time.
    #[error("wanted {wanted} logged request(s) within {timeout:?}, saw {got}")]
    Requests {
        /// The count waited for.
        wanted: usize,
        /// The count when the wait gave up.
        got: usize,
        /// How long the wait lasted.
        timeout: Duration,
    },
}
