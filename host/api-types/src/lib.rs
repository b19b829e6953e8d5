//! The HTTP API's contract as its clients see it: every body it takes and answers ([`types`]),
//! the typed client that calls it ([`client`]), and the TLS both ends speak ([`tls`]).
//!
//! It holds no server and no Worker: a program that only calls the API (the `tollgate session`
//! and `tollgate approvals` commands, a test) builds on this crate alone. The server
//! (`tollgate-api`) answers with the same types, and the OpenAPI document is generated from them.

#![forbid(unsafe_code)]

pub mod client;
pub mod tls;
pub mod types;
