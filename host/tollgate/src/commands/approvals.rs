//! `tollgate approvals list|approve|reject`: the approvals inbox through the HTTP API.
//!
//! It owns what these commands print; the calls are [`tollgate_api_types::client`]'s and the connection
//! options are [`super::session::ClientArgs`].

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::session::{ClientArgs, age, clip, compact, now_ms, print_json, shell_word, table};

/// Options of `tollgate approvals`.
#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    /// The API to talk to.
    #[command(flatten)]
    pub client: ClientArgs,
    /// The subcommand.
    #[command(subcommand)]
    pub command: ApprovalsCommand,
}

/// The `approvals` subcommands.
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// List the tool calls waiting for a decision, oldest first.
    List,
    /// Approve a tool call; the session runs it and goes on.
    Approve {
        /// The session.
        session: String,
        /// The interrupt (the tool call's id).
        interrupt: String,
        /// Edit before approve: the tool's whole input as it should run (a JSON object that
        /// fits the tool's input schema); the model is told it was changed.
        #[arg(long, value_name = "JSON")]
        input: Option<String>,
        /// Allow for this session: the tool's later calls in the session skip approval (recorded
        /// as approved under this grant) until `tollgate approvals revoke`.
        #[arg(long)]
        for_session: bool,
    },
    /// Revoke a session's grant for a tool: its next call waits for approval again.
    Revoke {
        /// The session.
        session: String,
        /// The tool.
        tool: String,
    },
    /// The audit trail of decisions, oldest first: who decided what, when, why, on which input.
    Audit {
        /// Only this session's decisions.
        #[arg(long)]
        session: Option<String>,
        /// Only this principal's decisions.
        #[arg(long)]
        principal: Option<String>,
        /// Only decisions at or after this time (ms since the epoch).
        #[arg(long)]
        since: Option<i64>,
        /// Only decisions before this time (ms since the epoch).
        #[arg(long)]
        until: Option<i64>,
        /// Start after this audit id (the `next_after` of the previous page).
        #[arg(long)]
        after: Option<i64>,
        /// At most this many (1 to 1000).
        #[arg(long)]
        limit: Option<i64>,
    },
    /// Reject a tool call; the model reads the message instead of a result.
    Reject {
        /// The session.
        session: String,
        /// The interrupt (the tool call's id).
        interrupt: String,
        /// Why, for the model.
        #[arg(long, short)]
        message: Option<String>,
    },
}

/// Runs `tollgate approvals …`.
pub async fn run(args: ApprovalsArgs) -> anyhow::Result<ExitCode> {
    let client = args.client.client()?;
    let out = &mut std::io::stdout().lock();
    match args.command {
        ApprovalsCommand::List => {
            let pending = client.pending_interrupts().await?;
            if args.client.json {
                return print_json(out, &pending);
            }
            if pending.is_empty() {
                writeln!(out, "no approvals pending")?;
                return Ok(ExitCode::SUCCESS);
            }
            let now = now_ms();
            // A BATCH column when some approvals were asked together (one reply, one sitting).
            let batches = pending.iter().any(|i| i.batch_id.is_some());
            let rows: Vec<Vec<String>> = pending
                .iter()
                .map(|i| {
                    let mut row = vec![
                        i.session_id.clone(),
                        i.interrupt_id.clone(),
                        i.tool_name.clone(),
                        clip(&compact(&i.arguments), 60),
                        age(now, i.created_at),
                        deadline_cell(now, i.deadline_at, i.escalated_at.is_some()),
                        who_decides(&i.request.approvers),
                    ];
                    if batches {
                        row.push(i.batch_id.clone().unwrap_or_else(|| "-".into()));
                    }
                    row
                })
                .collect();
            let mut headers =
                vec!["SESSION", "INTERRUPT", "TOOL", "ARGUMENTS", "AGE", "DEADLINE", "APPROVERS"];
            if batches {
                headers.push("BATCH");
            }
            table(out, &headers, &rows)?;
            if let Some(first) = pending.first() {
                writeln!(
                    out,
                    "\napprove: tollgate approvals approve {} {}{}",
                    shell_word(&first.session_id),
                    shell_word(&first.interrupt_id),
                    args.client.url_flag()
                )?;
            }
        }
        ApprovalsCommand::Audit { session, principal, since, until, after, limit } => {
            let query = tollgate_api::api::types::AuditQuery {
                session_id: session,
                principal,
                since,
                until,
                after,
                limit,
            };
            let page = client.audit(&query).await?;
            if args.client.json {
                return print_json(out, &page);
            }
            if page.entries.is_empty() {
                writeln!(out, "no decisions")?;
            }
            for (entry, line) in page.entries.iter().zip(super::session::decision_lines(&page.entries)) {
                writeln!(out, "{} {line}", entry.session_id)?;
            }
            if let Some(next) = page.next_after {
                writeln!(out, "more: tollgate approvals audit --after {next}")?;
            }
        }
        ApprovalsCommand::Approve { session, interrupt, input, for_session } => {
            let input: Option<serde_json::Value> = input
                .map(|text| serde_json::from_str(&text))
                .transpose()
                .map_err(|e| anyhow::anyhow!("--input is not JSON: {e}"))?;
            if for_session {
                let scope = tollgate_api::api::types::DecideScope::Session;
                let receipt =
                    client.decide_in_scope(&session, &interrupt, true, None, input.as_ref(), scope).await?;
                if args.client.json {
                    return print_json(out, &receipt);
                }
                let again = if receipt.replayed { " (it was already, the same way)" } else { "" };
                writeln!(
                    out,
                    "approved {interrupt} in session {session}, and its tool for the session{again}"
                )?;
                return Ok(ExitCode::SUCCESS);
            }
            let decision = (true, None, input.as_ref());
            return decide(out, &client, &args.client, (&session, &interrupt), decision).await;
        }
        ApprovalsCommand::Revoke { session, tool } => {
            let receipt = client.revoke_grant(&session, &tool).await?;
            if args.client.json {
                return print_json(out, &receipt);
            }
            writeln!(
                out,
                "revoked the grant for {tool} in session {session}: its next call waits for approval"
            )?;
        }
        ApprovalsCommand::Reject { session, interrupt, message } => {
            let decision = (false, message.as_deref(), None);
            return decide(out, &client, &args.client, (&session, &interrupt), decision).await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Approves or rejects one interrupt and says what happened.
async fn decide(
    out: &mut impl Write,
    client: &tollgate_api_types::client::ApiClient,
    flags: &ClientArgs,
    (session, interrupt): (&str, &str),
    (approved, message, input): (bool, Option<&str>, Option<&serde_json::Value>),
) -> anyhow::Result<ExitCode> {
    let receipt = client.decide_with_input(session, interrupt, approved, message, input).await?;
    if flags.json {
        return print_json(out, &receipt);
    }
    let again = if receipt.replayed { " (it was already, the same way)" } else { "" };
    let verb = match (approved, input) {
        (true, Some(_)) => "approved with the edited input",
        (true, None) => "approved",
        (false, _) => "rejected",
    };
    writeln!(out, "{verb} {interrupt} in session {session}{again}")?;
    writeln!(out, "watch: tollgate session watch {}{}", shell_word(session), flags.url_flag())?;
    Ok(ExitCode::SUCCESS)
}

/// The DEADLINE cell: `-` (none), `in 42s`, `due` (passed, not fired yet), with ` (escalated)`.
fn deadline_cell(now: i64, deadline_at: Option<i64>, escalated: bool) -> String {
    let Some(at) = deadline_at else { return "-".into() };
    let when = if at > now { format!("in {}", age(at, now)) } else { "due".to_owned() };
    if escalated { format!("{when} (escalated)") } else { when }
}

/// The APPROVERS cell: the groups who may decide now, or `any`.
fn who_decides(groups: &[String]) -> String {
    if groups.is_empty() { "any".into() } else { groups.join(",") }
}

#[cfg(test)]
mod deadline_tests {
    use super::*;

    #[test]
    fn the_deadline_column_says_how_long_is_left_and_whether_it_was_escalated() {
        assert_eq!(deadline_cell(0, None, false), "-");
        assert_eq!(deadline_cell(1_000, Some(43_000), false), "in 42s");
        assert_eq!(deadline_cell(50_000, Some(43_000), true), "due (escalated)");
        assert_eq!(who_decides(&[]), "any");
        assert_eq!(who_decides(&["oncall".into(), "leads".into()]), "oncall,leads");
    }
}
