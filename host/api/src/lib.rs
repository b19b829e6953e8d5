//! The HTTP API server: its routes over the store (sessions, messages, decisions, snapshots, the
//! approvals inbox, live events, health, metrics, the OpenAPI document), the web inbox, who may
//! call it, `/mcp/{agent}` and the signed webhooks it sends.
//!
//! It is a face: every session call maps onto `tollgate_sessions::service::Sessions`, which
//! checks the caller's rights and makes the store writes. It runs no step and links no sandbox: a
//! process that only serves the API (`tollgate api`) needs nothing from the Worker.
//!
//! | module | owns |
//! | --- | --- |
//! | [`api`] | the HTTP API: sessions, approvals, live events, health, metrics |
//! | [`auth`] | principals and roles: the auth file, tokens by hash, who may decide what (401 vs 403) |
//! | [`mcp`] | `/mcp/{agent}`: the agent's tools to any MCP client, under its policies, records and approvals |
//! | [`serve`] | the API as a process: where and how it listens (plain or TLS), `tollgate api` |
//! | [`tls`] | the server's TLS: its certificate and key, the handshaking listener |
//! | [`token`] | the API's bearer token as the server and the client commands take it |
//! | [`web`] | the web inbox at `/`: HTML, CSS and JavaScript modules embedded in the binary |
//! | [`webhooks`] | `[[webhooks]]`: signed deliveries from the store's outbox, retried with backoff |
//!
//! The wire types, the client and TLS are `tollgate-api-types`'. The package's binary,
//! `tollgate-api` (`main.rs`), is `tollgate api` without the Worker: the API alone, no wasmtime.

#![forbid(unsafe_code)]

pub mod api;
pub mod auth;
pub mod mcp;
pub mod serve;
pub mod tls;
pub mod token;
pub mod web;
pub mod webhooks;
