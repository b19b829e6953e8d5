//! Durable sessions end to end: Workers as child processes on a real store, the real CLI against
//! the mock model, the example agent's components built from source, and SIGKILL at named points.
//!
//! - `agent_features`: a `tollgate:agent@0.2.0` factory's hooks on a refund that waits for
//!   approval, on a reply and on a prompt; a `Task` subagent's read and refused write, its
//!   transcript and model calls kept with the session; a session the CLI compacted, resumed on
//!   other Workers.
//! - `approved_cli`: an approved `Bash` call recorded from the CLI's result of its run in the
//!   resumed segment (`succeeded`, `failed`), or `outcome_unknown` when the segment ended without one.
//! - `bundles`: pinned agent bundles: a swapped component refused, Workers of two bundles on one
//!   PostgreSQL each running their own sessions, a waiting session upgraded to another bundle.
//! - `dev`: `tollgate dev`: a scaffolded tool served with the mock model, rebuilt and reloaded on change.
//! - `fork`: a session forked at a turn through the CLI and HTTP: before a refund (refunding
//!   again), while the original waits for its approval, dry (answered from the original's
//!   record, nothing run), after it (never run again), a fork of a fork; refused input.
//! - `fleet`: agents on one store: a session names its agent, and a Worker of another agent on
//!   the same SQLite or PostgreSQL store runs none of its sessions.
//! - `api`: the HTTP API and the `tollgate session|approvals` client against `tollgate serve`.
//! - `api_input`: bad input to every route of `tollgate api`, refused as JSON errors.
//! - `contract`: the API's contract checked by tools we did not write: `openapi-spec-validator` on
//!   the served document, a time-bounded Schemathesis pass (every check, a fixed seed) against a
//!   live `tollgate api` with a token.
//! - `auth`: principals from `tollgate auth add`: 401 and 403 (role, approver group, separation
//!   of duties) through HTTP and the CLI client, the audit trail in the snapshot, the event stream,
//!   `session show` and `GET /v1/audit`.
//! - `cancel`: a turn cancelled during a streaming segment, during an inline write and while
//!   waiting for approval (a late decision refused), by whom it may be; the request crossing
//!   from an API process to a Worker process on SQLite and PostgreSQL; the next message runs.
//! - `batches`: one reply asking for three refunds decided in one sitting (one approval round),
//!   the repeats using the decisions made ahead; unused and closed decisions ahead.
//! - `deadlines`: approval deadlines: a 2 s deadline fired by a Worker started after the first was
//!   SIGKILLed (the model reads the expiry; `tollgate:deadline` audited), a late decision refused
//!   with 409 `interrupt_expired`, an escalation changing who may decide (and its event and
//!   webhook); on PostgreSQL two Workers fire one deadline once.
//! - `edits`: edit before approve: a refund's amount and a `Bash` command changed by the
//!   approver run as edited, both inputs recorded and audited, the model told; a bad edit refused.
//! - `images`: a real PNG in a message and in a custom tool's result, through the real CLI and
//!   the mock model: what the model receives, stored once by digest, replayed on resume, refused
//!   when too large or not an image.
//! - `tls`: `tollgate api` over HTTPS with a test CA, the client's `--ca-cert`, token files.
//! - `cli_limits`: a turn that reaches the CLI's `max_turns` or `max_budget_usd` ends at once with
//!   that reason, after one attempt.
//! - `chaos`: the chaos soak's small form (harness and checker in `tollgate_testing::chaos`, shared
//!   with `benches/chaos.rs`).
//! - `logins`: a Worker whose only credential is a subscription's `CLAUDE_CODE_OAUTH_TOKEN`.
//! - `review`: the options factory's review of a refund (over the order's total: high risk, two
//!   approvers; within it: low risk), and a review that traps or loops.
//! - `matrix`: the reference adapters' crash matrix (docs/ARCHITECTURE.md, "Glossary").
//! - `inline_writes`: an approval-free idempotent write run inline in one CLI process, its record
//!   committed before the CLI reads it; SIGKILL before and after that commit.
//! - `outage`: PostgreSQL stopped and started again under `tollgate serve` and a Worker.
//! - `lifecycle`: a Worker's life and death: graceful drain and the handover of a released step,
//!   the CLI dying with a SIGKILLed Worker, private and reclaimed segment folders, poison steps,
//!   unreadable rows, statuses.
//! - `scale`: two Workers on one PostgreSQL database, a thousand sessions waiting for approval,
//!   refused rows.
//! - `sandbox`: the agent's box, attacked through `Bash` with `--sandbox none` (where each attack
//!   works) and in the box: the Worker's environment, the store, other workspaces, the API,
//!   PostgreSQL, loopback services, writes outside, killing the Worker, limits, planted settings,
//!   the egress proxy, a Worker that is not root.
//! - `secrets`: what the agent's `Bash` can reach (environment, process tree, store), the model
//!   proxy's key swap and token revocation, the spend limit within a segment.
//! - `warm`: pre-started CLIs: a second new session on the parked spare the first left, a warm
//!   `--resume` after an approval-free deferred step, a warm CLI killed before the take, the time
//!   to live, a SIGKILLed Worker's warm CLI.
//! - `throws`: writes that send a payment and then throw, in every guest language: never
//!   `failed`; a payments service that is down: `failed`, "never left", never `outcome_unknown`.
//! - `webhooks`: `tollgate serve --webhooks` delivering signed events to a loopback receiver that
//!   fails the first attempts, across a SIGKILL of the server.

mod acp;
mod agent_features;
mod api;
mod api_input;
mod approved_cli;
mod auth;
mod batches;
mod broken_tools;
mod bundles;
mod cancel;
mod chaos;
mod cli_limits;
mod contract;
mod deadlines;
mod dev;
mod edits;
mod fleet;
mod fork;
mod grants;
mod images;
mod inline_writes;
mod lifecycle;
mod logins;
mod matrix;
mod mcp;
mod outage;
mod review;
mod sandbox;
mod scale;
mod secrets;
mod streaming;
mod throws;
mod tls;
mod tracing;
mod warm;
mod webhooks;

use tollgate_testing::{park, served, world};

/// The URL of a fresh, empty database of its own in the binary's one PostgreSQL cluster
/// ([`tollgate_store_testing::PgCluster::shared`]); or `None` (after `!! SKIPPED`) when
/// PostgreSQL is not installed and `TOLLGATE_SKIP_MISSING` names `postgres`.
///
/// A database, not a schema: `NOTIFY` reaches only the listeners of its own database, so two
/// tests at once never wake each other's Workers. `CREATE DATABASE` takes a fraction of a second
/// where a cluster of one's own (`initdb`, start, stop) took about two. A test that stops or
/// restarts PostgreSQL (`outage`, `chaos`) keeps a cluster of its own.
async fn pg_database() -> Option<String> {
    use sqlx::Connection;
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let cluster = tollgate_store_testing::PgCluster::shared()?;
    let name = format!("t{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let mut conn = sqlx::PgConnection::connect(&cluster.url()).await.expect("connect to the shared cluster");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut conn)
        .await
        .expect("create the test's database");
    conn.close().await.expect("close");
    let url = cluster.url();
    let base = url.strip_suffix("/postgres").expect("the cluster's URL names the postgres database");
    Some(format!("{base}/{name}"))
}
