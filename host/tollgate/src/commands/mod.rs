//! One module per `tollgate` subcommand; each has an `Args` struct and an async `run`. `tollgate
//! api` is `tollgate_api::serve`'s, and `tollgate_api::token` reads the API's bearer token for the
//! server and the client commands alike.

pub mod acp;
pub mod agent;
pub mod approvals;
pub mod auth;
pub mod demo;
pub mod dev;
pub mod mcp;
pub mod mock;
pub mod scaffold;
pub mod serve;
pub mod session;
pub mod tools;
pub mod worker;

/// Checks the `--as` name of a stdio face (`tollgate mcp`, `tollgate acp`): a principal's name,
/// or the local user's reserved name `tollgate:local`, the default when `$USER` is unset.
///
/// # Errors
/// Another name that is not a principal's, naming the rule.
pub fn check_local_principal(name: &str) -> anyhow::Result<()> {
    if name == tollgate_sessions::rights::LOCAL {
        return Ok(());
    }
    tollgate_api::auth::check_name(name).map_err(|why| anyhow::anyhow!("--as {name:?}: {why}"))
}
