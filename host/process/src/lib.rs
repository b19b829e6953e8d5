//! What every Tollgate process shares, whichever faces and Workers it runs (`tollgate serve`, the
//! API alone, a Worker alone, `tollgate mcp`): how it sets itself up and reports a failure, and the
//! metrics its parts update and its `/metrics` renders.
//!
//! | module | owns |
//! | --- | --- |
//! | [`setup`] | logging on stderr, the stop signals, a process hidden from its neighbours that creates private files, the error report |
//! | [`metrics`] | the Prometheus counters and histograms the Worker and the faces update, and [`metrics::TokenCounts`] |
//!
//! It serves no HTTP and links no sandbox, so a face and the Worker can both depend on it without
//! depending on each other (it reads the store's types only, for the figures `/metrics` shows).

pub mod metrics;
pub mod setup;
