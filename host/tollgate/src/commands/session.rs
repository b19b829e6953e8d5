//! `tollgate session start|send|show|list|upgrade|watch`: sessions through the HTTP API, printed for a
//! person (or as JSON with `--json`).
//!
//! It owns what these commands print and how `watch` follows a stream (reconnecting with
//! `Last-Event-ID`, stopping with `--until-idle` or `--until-waiting`); the calls themselves are [`tollgate_api_types::client`]'s.
//! [`ClientArgs`] (`--url`, `--token`/`--token-file`, `--ca-cert`, `--json`) is shared with `tollgate approvals`.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde::Serialize;
use serde_json::Value;

use tollgate_engine::events::{DecisionRecorded, EventKind, InterruptOpened};

use tollgate_api::api::types::{CreateSession, ImageBlock, Snapshot, StreamEvent};
use tollgate_api_types::client::{ApiClient, CallError};

/// The API's address when neither `--url` nor `TOLLGATE_URL` is given.
pub const DEFAULT_URL: &str = "http://127.0.0.1:8080";

/// Consecutive failed reconnects after which `watch` gives up.
const MAX_RECONNECTS: u32 = 10;

/// How the client commands reach the API and print.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The API's base URL.
    #[arg(long, global = true, env = "TOLLGATE_URL", default_value = DEFAULT_URL)]
    pub url: String,
    /// The bearer token the API requires, if it requires one (on the command line it is visible
    /// to every local user: prefer `--token-file` or the environment).
    #[arg(long, global = true, env = "TOLLGATE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Read the bearer token from this file (one line).
    #[arg(long, global = true, env = "TOLLGATE_TOKEN_FILE", value_name = "PATH")]
    pub token_file: Option<std::path::PathBuf>,
    /// Trust only the CA certificates in this PEM file for an `https://` URL (default: the
    /// system's roots).
    #[arg(long, global = true, env = "TOLLGATE_CA_CERT", value_name = "PEM")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// Print JSON (one document, or one event per line for `watch`) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

impl ClientArgs {
    /// The client these options describe.
    ///
    /// # Errors
    /// The URL is not an `http://` or `https://` URL, the token file or the CA certificate
    /// cannot be used.
    pub fn client(&self) -> anyhow::Result<ApiClient> {
        let mut token = tollgate_api::token::resolve(self.token.as_deref(), self.token_file.as_deref())?;
        if token.is_none() {
            token = self.generated_token()?;
        }
        Ok(ApiClient::with_ca(&self.url, token.as_deref(), self.ca_cert.as_deref())?)
    }

    /// The token a server at `--url` made itself (`tollgate serve` without `--token` or `--auth`),
    /// when this user's state folder holds one for that address.
    fn generated_token(&self) -> anyhow::Result<Option<String>> {
        let Ok(url) = reqwest::Url::parse(self.url.trim()) else { return Ok(None) };
        let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else { return Ok(None) };
        let Some(path) = tollgate_api::token::generated_path(host, port).filter(|p| p.exists()) else {
            return Ok(None);
        };
        Ok(Some(tollgate_api::token::read_token_file(&path)?))
    }

    /// `--url URL` when it is not the default (and `--ca-cert PEM` when given), for commands
    /// printed as hints.
    pub fn url_flag(&self) -> String {
        let url = self.url.trim().trim_end_matches('/');
        let mut flags =
            if url == DEFAULT_URL { String::new() } else { format!(" --url {}", shell_word(url)) };
        if let Some(ca) = &self.ca_cert {
            flags.push_str(&format!(" --ca-cert {}", shell_word(&ca.display().to_string())));
        }
        flags
    }
}

/// Options of `tollgate session`.
#[derive(Debug, Args)]
pub struct SessionArgs {
    /// The API to talk to.
    #[command(flatten)]
    pub client: ClientArgs,
    /// The subcommand.
    #[command(subcommand)]
    pub command: SessionCommand,
}

/// The `session` subcommands.
#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Create a session (a fresh id unless ID is given), optionally with its first message.
    Start {
        /// The session's id.
        id: Option<String>,
        /// The first message.
        #[arg(long, short)]
        message: Option<String>,
        /// An image the first message carries (a .png, .jpg, .jpeg, .gif or .webp file); repeat
        /// for more.
        #[arg(long = "image", value_name = "FILE", requires = "message")]
        images: Vec<PathBuf>,
        /// The agent it belongs to: a name, or a locked bundle's digest (default: the server's
        /// agent, else the only agent the store knows).
        #[arg(long)]
        agent: Option<String>,
    },
    /// Send a message; it starts a turn, or waits for the running one.
    Send {
        /// The session.
        id: String,
        /// The message.
        text: String,
        /// An image the message carries (a .png, .jpg, .jpeg, .gif or .webp file); repeat for
        /// more.
        #[arg(long = "image", value_name = "FILE")]
        images: Vec<PathBuf>,
        /// An idempotency key: sending again under it stores the message once.
        #[arg(long)]
        key: Option<String>,
    },
    /// Cancel the turn in progress: a running segment is interrupted, a turn waiting for approval
    /// ends with its approvals closed. The turn ends `cancelled`; the session takes the next
    /// message as usual.
    Cancel {
        /// The session.
        id: String,
        /// Wait until the turn has ended (cancelled, or as it ended first) and print how.
        #[arg(long)]
        wait: bool,
    },
    /// Fork a session at a turn: a new idle session whose history is this one's up to the end of
    /// turn N (shared, not copied), with no grants, no spend and you as its starter. Writes
    /// recorded before the turn never run again, but the fork's own calls do: a fork taken before
    /// a refund will refund again, unless `--dry`.
    Fork {
        /// The session to fork.
        id: String,
        /// The turn to fork at (from 1): one that ended, not the turn running or waiting now.
        #[arg(long, value_name = "N")]
        at_turn: i64,
        /// Dry: the fork's write calls never run; each is answered from this session's record of
        /// the same tool with the same input, or refused.
        #[arg(long)]
        dry: bool,
        /// The fork's id (default: a fresh one).
        #[arg(long = "id", value_name = "FORK_ID")]
        fork_id: Option<String>,
        /// The agent version the fork runs under (a name, `NAME@K` or a digest; default: this
        /// session's).
        #[arg(long)]
        agent_version: Option<String>,
    },
    /// Show a session: status, messages, pending approvals, tool calls, usage.
    Show {
        /// The session.
        id: String,
    },
    /// List sessions, by id.
    List {
        /// Only sessions with this status (`idle`, `running`, `awaiting_approval`).
        #[arg(long)]
        status: Option<String>,
        /// Start after this session id (the `next_after` of the previous page).
        #[arg(long)]
        after: Option<String>,
        /// At most this many (1 to 1000).
        #[arg(long)]
        limit: Option<i64>,
    },
    /// Move waiting or idle sessions to another agent bundle: pin them to the agent digest `--to`
    /// (recorded as an `agent_upgraded` event). A running session is left as it is.
    Upgrade {
        /// The session (or `--all`).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Every session that can move (with `--from`: only those under that digest).
        #[arg(long)]
        all: bool,
        /// The agent digest to move to (`sha256:…`, as `tollgate agent lock` prints it).
        #[arg(long)]
        to: String,
        /// With `--all`: only sessions under this digest.
        #[arg(long, requires = "all")]
        from: Option<String>,
    },
    /// Follow a session's events live: text as it arrives, tool calls, approvals, turn ends.
    Watch {
        /// The session.
        id: String,
        /// Start after this event seq (0: from the beginning).
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// Exit once a turn has ended and the session is idle with no approval pending.
        #[arg(long, conflicts_with = "until_waiting")]
        until_idle: bool,
        /// Exit once the session waits for a decision (printing `waiting for approval: <interrupt
        /// id>`), or once a turn has ended and the session is idle.
        #[arg(long)]
        until_waiting: bool,
    },
}

/// Runs `tollgate session …`.
pub async fn run(args: SessionArgs) -> anyhow::Result<ExitCode> {
    let client = args.client.client()?;
    let out = &mut std::io::stdout().lock();
    match args.command {
        SessionCommand::Start { id, message, images, agent } => {
            let images = read_images(&images)?;
            let body = CreateSession { session_id: id, message, images, agent, ..CreateSession::default() };
            let created = client.create(&body).await?;
            if args.client.json {
                return print_json(out, &created);
            }
            let session = &created.session_id;
            let verb = if created.created { "created" } else { "exists" };
            writeln!(out, "session {session} {verb}")?;
            if let Some(receipt) = &created.message {
                writeln!(
                    out,
                    "message stored (item {}){}",
                    receipt.item_seq,
                    turn_note(receipt.turn_started, receipt.replayed)
                )?;
            }
            writeln!(out, "watch: tollgate session watch {}{}", shell_word(session), args.client.url_flag())?;
        }
        SessionCommand::Send { id, text, images, key } => {
            let images = read_images(&images)?;
            let receipt = client.send_message_with_images(&id, &text, images, key.as_deref()).await?;
            if args.client.json {
                return print_json(out, &receipt);
            }
            writeln!(
                out,
                "message stored (item {}){}",
                receipt.item_seq,
                turn_note(receipt.turn_started, receipt.replayed)
            )?;
        }
        SessionCommand::Cancel { id, wait } => {
            let receipt = client.cancel(&id).await?;
            let asked = &receipt.cancel_requested;
            if !wait {
                if args.client.json {
                    return print_json(out, &receipt);
                }
                let when = if receipt.replayed { ", asked before and still pending" } else { "" };
                writeln!(out, "cancel of session {id} asked by {}{when}", asked.requested_by)?;
                writeln!(out, "watch: tollgate session watch {}{}", shell_word(&id), args.client.url_flag())?;
                return Ok(ExitCode::SUCCESS);
            }
            let snapshot = wait_for_turn_end(&client, &id).await?;
            if args.client.json {
                return print_json(out, &snapshot);
            }
            match (&snapshot.last_turn_cancelled, &snapshot.last_turn_error) {
                (Some(cancelled), _) => writeln!(
                    out,
                    "{} of session {id} cancelled by {}",
                    cancelled.turn_id, cancelled.cancelled_by
                )?,
                (None, Some(error)) => {
                    writeln!(out, "the turn of session {id} failed before the cancel: {error}")?
                }
                (None, None) => writeln!(out, "the turn of session {id} completed before the cancel")?,
            }
        }
        SessionCommand::Fork { id, at_turn, dry, fork_id, agent_version } => {
            let request =
                tollgate_api::api::types::ForkSession { at_turn, session_id: fork_id, agent_version, dry };
            let forked = client.fork(&id, &request).await?;
            if args.client.json {
                return print_json(out, &forked);
            }
            let dry = if forked.forked_from.dry {
                " (dry: its writes are answered from records or refused)"
            } else {
                ""
            };
            writeln!(out, "session {} forked from {id} at turn {at_turn}{dry}", forked.session_id)?;
            writeln!(
                out,
                "send: tollgate session send {} MESSAGE{}",
                shell_word(&forked.session_id),
                args.client.url_flag()
            )?;
        }
        SessionCommand::Show { id } => {
            let snapshot = client.snapshot(&id).await?;
            if args.client.json {
                return print_json(out, &snapshot);
            }
            show(out, &snapshot, &args.client)?;
        }
        SessionCommand::List { status, after, limit } => {
            let page = client.list_sessions(status.as_deref(), after.as_deref(), limit).await?;
            if args.client.json {
                return print_json(out, &page);
            }
            if page.sessions.is_empty() {
                writeln!(out, "no sessions")?;
            } else {
                let now = now_ms();
                let rows: Vec<Vec<String>> = page
                    .sessions
                    .iter()
                    .map(|s| {
                        let digest = match (&s.agent_digest, s.agent_pinned) {
                            (Some(digest), true) => digest.clone(),
                            (Some(digest), false) => format!("{digest} (unpinned)"),
                            (None, _) => "-".to_owned(),
                        };
                        let agent = match (&s.agent, s.agent_version) {
                            (Some(name), Some(version)) => format!("{name}@{version}"),
                            (Some(name), None) => name.clone(),
                            (None, _) => "- (none: no Worker runs it)".to_owned(),
                        };
                        vec![s.session_id.clone(), s.status.clone(), age(now, s.updated_at), agent, digest]
                    })
                    .collect();
                table(out, &["SESSION", "STATUS", "UPDATED", "AGENT", "AGENT DIGEST"], &rows)?;
            }
            if let Some(next) = &page.next_after {
                writeln!(out, "more: tollgate session list --after {}", shell_word(next))?;
            }
        }
        SessionCommand::Upgrade { id, all, to, from } => {
            if all {
                let done = client.upgrade_all(&to, from.as_deref()).await?;
                if args.client.json {
                    return print_json(out, &done);
                }
                for moved in &done.upgraded {
                    writeln!(out, "{}: {} -> {to}", moved.session_id, moved.from.as_deref().unwrap_or("-"))?;
                }
                for busy in &done.busy {
                    writeln!(out, "{}: left as it is: {}", busy.session_id, busy.message)?;
                }
                writeln!(
                    out,
                    "{} upgraded, {} busy (running a step; try again once they wait), {} already on {to}",
                    done.upgraded.len(),
                    done.busy.len(),
                    done.unchanged
                )?;
            } else {
                let id = id.expect("clap requires an id without --all");
                let done = client.upgrade_session(&id, &to).await?;
                if args.client.json {
                    return print_json(out, &done);
                }
                if done.upgraded {
                    let from = done.from.as_deref().unwrap_or("no recorded digest");
                    writeln!(out, "session {id}: {from} -> {}", done.to)?;
                } else {
                    writeln!(out, "session {id} is already on {}", done.to)?;
                }
            }
        }
        SessionCommand::Watch { id, after, until_idle, until_waiting } => {
            if after < 0 {
                anyhow::bail!("--after must be an event seq (0 or more), not {after}");
            }
            watch(&client, &args.client, &id, after, until_idle || until_waiting, until_waiting).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn turn_note(turn_started: bool, replayed: bool) -> &'static str {
    match (replayed, turn_started) {
        (true, _) => ", sent before under the same key",
        (false, true) => ", turn started",
        (false, false) => ", queued behind the running turn",
    }
}

/// Prints `value` as pretty JSON.
pub(crate) fn print_json(out: &mut impl Write, value: &impl Serialize) -> anyhow::Result<ExitCode> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(ExitCode::SUCCESS)
}

fn show(out: &mut impl Write, snapshot: &Snapshot, args: &ClientArgs) -> anyhow::Result<()> {
    let session = &snapshot.session_id;
    writeln!(out, "session {session}: {}", snapshot.status)?;
    match &snapshot.agent {
        Some(agent) => writeln!(out, "agent: {agent}")?,
        None => writeln!(out, "agent: none (no Worker runs it until an agent adopts it)")?,
    }
    let usage = &snapshot.usage;
    writeln!(
        out,
        "usage: {} input tokens ({} cached), {} output tokens, {} model calls, ${:.4}",
        usage.input_tokens,
        usage.cached_input_tokens,
        usage.output_tokens,
        usage.model_calls,
        snapshot.cost_usd
    )?;
    if let Some(error) = &snapshot.last_turn_error {
        writeln!(out, "last turn failed: {error}")?;
    }
    if let Some(cancelled) = &snapshot.last_turn_cancelled {
        writeln!(out, "last turn ({}) cancelled by {}", cancelled.turn_id, cancelled.cancelled_by)?;
    }
    if let Some(asked) = &snapshot.cancel_requested {
        writeln!(out, "cancelling: asked by {}", asked.requested_by)?;
    }
    if let Some(from) = &snapshot.forked_from {
        let dry = if from.dry { " (dry)" } else { "" };
        writeln!(out, "forked from {} at turn {} by {}{dry}", from.session, from.turn, from.forked_by)?;
    }
    writeln!(out)?;
    if snapshot.messages.is_empty() {
        writeln!(out, "(no messages)")?;
    }
    for message in &snapshot.messages {
        let pending = if message.pending { " (pending)" } else { "" };
        writeln!(out, "{}{pending}: {}", message.role, indent_rest(&message.text))?;
        for image in &message.images {
            writeln!(out, "  [image {} {}]", image.media_type, image.digest)?;
        }
    }
    // What a running segment has streamed so far, not yet stored as a message.
    if let Some(live) = snapshot.live_text.as_ref().filter(|live| !live.text.is_empty()) {
        writeln!(out, "assistant (writing…): {}", indent_rest(&live.text))?;
    }
    if !snapshot.pending_interrupts.is_empty() {
        writeln!(out, "\npending approvals:")?;
        for interrupt in &snapshot.pending_interrupts {
            let id = &interrupt.interrupt_id;
            let batch = interrupt.batch_id.as_ref().map(|b| format!(" [batch {b}]")).unwrap_or_default();
            writeln!(out, "  {} {}{batch}", interrupt.tool_name, compact(&interrupt.arguments))?;
            writeln!(
                out,
                "    approve: tollgate approvals approve {} {}{}",
                shell_word(session),
                shell_word(id),
                args.url_flag()
            )?;
            writeln!(
                out,
                "    reject:  tollgate approvals reject {} {} --message \"why\"{}",
                shell_word(session),
                shell_word(id),
                args.url_flag()
            )?;
        }
    }
    if let Some(starter) = &snapshot.started_by {
        writeln!(out, "\nstarted by: {starter}")?;
    }
    if !snapshot.decisions.is_empty() {
        writeln!(out, "\ndecisions (audit trail):")?;
        for line in decision_lines(&snapshot.decisions) {
            writeln!(out, "  {line}")?;
        }
    }
    if !snapshot.tool_calls.is_empty() {
        writeln!(out, "\ntool calls:")?;
        let rows: Vec<Vec<String>> = snapshot
            .tool_calls
            .iter()
            .map(|call| {
                vec![
                    call.tool_call_id.clone(),
                    call.tool_name.clone(),
                    // A call that ran under (or waits on) a decision made ahead in a batch names it.
                    match &call.decided_ahead {
                        Some(ahead) => format!("{} (ahead: {})", call.state.name(), ahead.decision_id),
                        None => call.state.name().to_owned(),
                    },
                    match &call.original_arguments {
                        Some(_) => format!("{} (edited)", clip(&compact(&call.arguments), 50)),
                        None => clip(&compact(&call.arguments), 50),
                    },
                    call.state.text().map(|text| clip(text, 60)).unwrap_or_default(),
                ]
            })
            .collect();
        table(
            out,
            &["  ID", "TOOL", "STATUS", "ARGUMENTS", "RESULT"],
            &rows.into_iter().map(indent_row).collect::<Vec<_>>(),
        )?;
    }
    Ok(())
}

/// One line per audit row: `<time> <principal> approved|rejected|escalated|expired|revoked|cancelled <tool> <interrupt> [input] [: reason]` (a cancel's `<interrupt>` is its turn, its tool `-`).
pub fn decision_lines(decisions: &[tollgate_api::api::types::AuditRecord]) -> Vec<String> {
    decisions
        .iter()
        .map(|d| {
            let decision = match d.decision {
                tollgate_api::api::types::AuditDecision::Approved => "approved",
                tollgate_api::api::types::AuditDecision::Rejected => "rejected",
                tollgate_api::api::types::AuditDecision::Escalated => "escalated",
                tollgate_api::api::types::AuditDecision::Expired => "expired",
                tollgate_api::api::types::AuditDecision::Revoked => "revoked",
                tollgate_api::api::types::AuditDecision::Cancelled => "cancelled",
                tollgate_api::api::types::AuditDecision::PartiallyApproved => "partially approved",
                tollgate_api::api::types::AuditDecision::Checked => "checked",
                tollgate_api::api::types::AuditDecision::Forked => "forked",
            };
            let input = d.input.as_ref().map(|i| format!(" {}", clip(&compact(i), 60))).unwrap_or_default();
            let edited = d
                .edited_input
                .as_ref()
                .map(|i| format!(" edited to {}", clip(&compact(i), 60)))
                .unwrap_or_default();
            let reason = d.reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
            format!(
                "{} {} {decision} {} {}{input}{edited}{reason}",
                tollgate_api::webhooks::rfc3339_ms(d.decided_at),
                d.principal,
                d.tool_name.as_deref().unwrap_or("-"),
                d.interrupt_id,
            )
        })
        .collect()
}

/// The image files of `--image`, as the API takes them: the media type by the file's extension.
fn read_images(paths: &[PathBuf]) -> anyhow::Result<Vec<ImageBlock>> {
    paths
        .iter()
        .map(|path| {
            let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
            let media_type = match extension.as_str() {
                "png" => "image/png",
                "jpg" | "jpeg" => "image/jpeg",
                "gif" => "image/gif",
                "webp" => "image/webp",
                _ => anyhow::bail!(
                    "{}: an image must be a .png, .jpg, .jpeg, .gif or .webp file",
                    path.display()
                ),
            };
            let bytes =
                std::fs::read(path).with_context(|| format!("reading the image {}", path.display()))?;
            Ok(ImageBlock::base64(media_type, &bytes))
        })
        .collect()
}

fn indent_row(mut row: Vec<String>) -> Vec<String> {
    row[0] = format!("  {}", row[0]);
    row
}

/// Follows the session's events, reconnecting with `Last-Event-ID` when the connection drops.
async fn watch(
    client: &ApiClient,
    args: &ClientArgs,
    id: &str,
    after: i64,
    until_idle: bool,
    until_waiting: bool,
) -> anyhow::Result<()> {
    let mut printer = Printer {
        session: id.to_owned(),
        json: args.json,
        url_flag: args.url_flag(),
        mid_line: false,
        text_of: None,
        printed: HashMap::new(),
    };
    let mut last = after;
    let mut failures = 0u32;
    loop {
        let dropped = match client.live_events(id, last).await {
            Ok(mut stream) => loop {
                match stream.next().await {
                    Ok(Some(event)) => {
                        failures = 0;
                        last = event.seq;
                        printer.print(&event)?;
                        if until_waiting && EventKind::parse(&event.kind) == Some(EventKind::InterruptOpened)
                        {
                            let opened = InterruptOpened::parse(event.payload.get())
                                .with_context(|| format!("reading event {} of session `{id}`", event.seq))?;
                            printer.end_line()?;
                            println!("waiting for approval: {}", opened.interrupt_id);
                            return Ok(());
                        }
                        if until_idle
                            && EventKind::parse(&event.kind).is_some_and(EventKind::ends_turn)
                            && idle_after(client, id, event.seq).await?
                        {
                            printer.end_line()?;
                            return Ok(());
                        }
                    }
                    Ok(None) => break "the server ended the stream".to_owned(),
                    Err(error @ (CallError::Transport { .. } | CallError::Stream { .. })) => {
                        break error.to_string();
                    }
                    Err(error) => return Err(error.into()),
                }
            },
            Err(error @ CallError::Transport { .. }) => error.to_string(),
            Err(error) => return Err(error.into()),
        };
        failures += 1;
        if failures > MAX_RECONNECTS {
            anyhow::bail!(
                "the event stream of session `{id}` broke {MAX_RECONNECTS} times in a row; last: {dropped}"
            );
        }
        printer.end_line()?;
        eprintln!("({dropped}; reconnecting after event {last})");
        tokio::time::sleep(Duration::from_millis(500 * u64::from(failures.min(10)))).await;
    }
}

/// What of a `text_delta`'s `text` (starting at character `offset` of its segment's text, when
/// given) is new after `printed` characters, and how many are printed after it.
fn new_text(text: &str, offset: Option<usize>, printed: usize) -> (&str, usize) {
    let chars = text.chars().count();
    match offset {
        // An old server's text has no offset: every delta is new.
        None => (text, printed + chars),
        Some(offset) if offset + chars <= printed => ("", printed),
        Some(offset) => {
            let skip = printed.saturating_sub(offset);
            let from = text.char_indices().nth(skip).map_or(text.len(), |(at, _)| at);
            (&text[from..], offset + chars)
        }
    }
}

/// Waits (polling the snapshot) until the session has no cancel pending and is idle or runs the
/// next turn, and returns that snapshot.
async fn wait_for_turn_end(client: &ApiClient, id: &str) -> anyhow::Result<Snapshot> {
    let started = std::time::Instant::now();
    loop {
        let snapshot = client.snapshot(id).await?;
        if snapshot.cancel_requested.is_none() {
            return Ok(snapshot);
        }
        if started.elapsed() > CANCEL_WAIT {
            anyhow::bail!(
                "session `{id}`: the cancel is still pending after {} s (is a Worker running?)",
                CANCEL_WAIT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How long `session cancel --wait` waits for the turn to end.
const CANCEL_WAIT: Duration = Duration::from_secs(120);

/// Whether the session is idle with nothing pending and `seq` is its last event.
async fn idle_after(client: &ApiClient, id: &str, seq: i64) -> anyhow::Result<bool> {
    let snapshot =
        client.snapshot(id).await.with_context(|| format!("reading session `{id}` after its turn ended"))?;
    Ok(snapshot.status == "idle"
        && snapshot.pending_interrupts.is_empty()
        && seq + 1 >= snapshot.next_event_seq)
}

/// Prints events for a person: text as it comes, one line per everything else.
struct Printer {
    session: String,
    json: bool,
    url_flag: String,
    /// Text was printed without its line end.
    mid_line: bool,
    /// The stream (text or thinking) of a (turn, step, fence) being printed.
    text_of: Option<TextGroup>,
    /// How many characters of each stream were printed: live text and its stored blocks
    /// overlap, by `offset`. Forgotten when a turn ends.
    printed: HashMap<TextGroup, usize>,
}

/// The text, or the thinking, of one attempt of a step: (kind, turn, step, fence).
type TextGroup = (&'static str, Value, Option<i64>, Option<i64>);

impl Printer {
    fn print(&mut self, event: &StreamEvent) -> anyhow::Result<()> {
        let out = &mut std::io::stdout().lock();
        if self.json {
            serde_json::to_writer(&mut *out, event)?;
            writeln!(out)?;
            out.flush()?;
            return Ok(());
        }
        let p = &event.payload_value();
        let kind = EventKind::parse(&event.kind);
        let stream = match kind {
            Some(EventKind::TextDelta) => Some(("text_delta", "assistant")),
            Some(EventKind::ReasoningDelta) => Some(("reasoning_delta", "thinking")),
            _ => None,
        };
        if let Some((kind, label)) = stream {
            let group = (kind, p["turn_id"].clone(), event.step_id, event.fence);
            let whole = p["text"].as_str().unwrap_or_default();
            let printed = self.printed.get(&group).copied().unwrap_or(0);
            let offset = p["offset"].as_u64().and_then(|o| usize::try_from(o).ok());
            let (text, printed) = new_text(whole, offset, printed);
            self.printed.insert(group.clone(), printed);
            if text.is_empty() {
                return Ok(());
            }
            if self.text_of.as_ref() != Some(&group) {
                self.end_line_on(out)?;
                write!(out, "{label}: ")?;
                self.mid_line = true;
                self.text_of = Some(group);
            }
            write!(out, "{text}")?;
            self.mid_line = if text.is_empty() { self.mid_line } else { !text.ends_with('\n') };
            out.flush()?;
            return Ok(());
        }
        self.end_line_on(out)?;
        self.text_of = None;
        let (session, url) = (shell_word(&self.session), &self.url_flag);
        match kind {
            Some(EventKind::UserMessage) => {
                writeln!(out, "user: {}", indent_rest(p["text"].as_str().unwrap_or_default()))?;
                for image in p["images"].as_array().into_iter().flatten() {
                    writeln!(
                        out,
                        "  [image {} {}]",
                        text_of(&image["media_type"]),
                        text_of(&image["digest"])
                    )?;
                }
            }
            Some(EventKind::TurnStarted) => {}
            Some(EventKind::ToolCallStarted) => {
                let arguments = if p["arguments"].is_null() {
                    String::new()
                } else {
                    format!(" {}", compact(&p["arguments"]))
                };
                writeln!(out, "[tool] {}{arguments} started", text_of(&p["tool_name"]))?;
            }
            Some(EventKind::ToolCallFinished) => {
                writeln!(out, "[tool] {} {}", text_of(&p["tool_name"]), text_of(&p["status"]))?
            }
            Some(EventKind::InterruptOpened) => match InterruptOpened::parse(event.payload.get()) {
                Ok(opened) => {
                    let id = shell_word(&opened.interrupt_id);
                    let request = &opened.request;
                    writeln!(out, "[approval needed] {} {}", request.tool_name, compact(&request.arguments))?;
                    writeln!(out, "  approve: tollgate approvals approve {session} {id}{url}")?;
                    writeln!(
                        out,
                        "  reject:  tollgate approvals reject {session} {id} --message \"why\"{url}"
                    )?;
                }
                // Not what Tollgate writes: shown as it is.
                Err(_) => writeln!(out, "[{}] {}", event.kind, compact(p))?,
            },
            // One approval round: the `interrupt_opened` lines said what to decide.
            Some(EventKind::ApprovalAwaited) => {}
            Some(EventKind::DecidedAheadUsed) => {
                let verdict = if p["approved"].as_bool() == Some(true) { "approved" } else { "rejected" };
                writeln!(
                    out,
                    "[approval] {} {verdict} ahead in batch {} ({})",
                    text_of(&p["tool_name"]),
                    text_of(&p["batch_id"]),
                    text_of(&p["decision_id"])
                )?;
            }
            Some(EventKind::AheadUnused) => writeln!(
                out,
                "[approval] {} {} asked ahead, never called again: unused",
                text_of(&p["tool_name"]),
                compact(&p["arguments"])
            )?,
            Some(EventKind::InterruptResolved) => {
                let verdict = if p["approved"].as_bool() == Some(true) { "approved" } else { "rejected" };
                let message = p["message"].as_str().map(|m| format!(": {m}")).unwrap_or_default();
                writeln!(out, "[approval] {} {verdict}{message}", text_of(&p["interrupt_id"]))?;
            }
            Some(EventKind::DecisionRecorded) => {
                match serde_json::from_str::<DecisionRecorded>(event.payload.get()) {
                    Ok(d) => {
                        let reason = d.reason.map(|r| format!(": {r}")).unwrap_or_default();
                        writeln!(
                            out,
                            "[audit] {} {} by {}{reason}",
                            d.interrupt_id, d.decision, d.principal
                        )?;
                    }
                    // Not what Tollgate writes: shown as it is.
                    Err(_) => writeln!(out, "[{}] {}", event.kind, compact(p))?,
                }
            }
            Some(EventKind::AttemptFailed) => {
                writeln!(out, "(retrying…) attempt {} failed: {}", p["attempt"], text_of(&p["error"]))?
            }
            Some(EventKind::TurnCompleted) => {
                self.printed.clear();
                writeln!(out, "[turn completed]")?
            }
            Some(EventKind::TurnFailed) => {
                self.printed.clear();
                writeln!(out, "[turn failed] {}", text_of(&p["error"]))?
            }
            Some(EventKind::CancelRequested) => {
                writeln!(out, "[cancel asked by {}]", text_of(&p["requested_by"]))?
            }
            Some(EventKind::TurnCancelled) => {
                self.printed.clear();
                writeln!(out, "[turn cancelled by {}]", text_of(&p["cancelled_by"]))?
            }
            // Printed as they are (text and thinking went out above).
            Some(
                EventKind::TextDelta
                | EventKind::ReasoningDelta
                | EventKind::ApprovedUnderGrant
                | EventKind::GrantRevoked
                | EventKind::AgentUpgraded
                | EventKind::InterruptEscalated,
            )
            | None => writeln!(out, "[{}] {}", event.kind, compact(p))?,
        }
        out.flush()?;
        Ok(())
    }

    fn end_line(&mut self) -> anyhow::Result<()> {
        self.end_line_on(&mut std::io::stdout().lock())
    }

    fn end_line_on(&mut self, out: &mut impl Write) -> anyhow::Result<()> {
        if self.mid_line {
            writeln!(out)?;
            out.flush()?;
            self.mid_line = false;
        }
        Ok(())
    }
}

/// A string value as itself, anything else as compact JSON, nothing as `-`.
pub(crate) fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// Compact JSON.
pub(crate) fn compact(value: &Value) -> String {
    value.to_string()
}

/// The first `max` characters of `text` on one line, `…` when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    let line: String = text.replace('\n', " ");
    if line.chars().count() <= max {
        line
    } else {
        format!("{}…", line.chars().take(max.saturating_sub(1)).collect::<String>())
    }
}

/// Continuation lines indented under the first.
fn indent_rest(text: &str) -> String {
    text.replace('\n', "\n  ")
}

/// `text` as one shell word: as it is when it is plain, else in single quotes.
pub(crate) fn shell_word(text: &str) -> String {
    let plain =
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain { text.to_owned() } else { format!("'{}'", text.replace('\'', r"'\''")) }
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

/// How long ago `then_ms` was, e.g. `42s`, `5m`, `3h`, `2d`.
pub(crate) fn age(now_ms: i64, then_ms: i64) -> String {
    let secs = (now_ms - then_ms).max(0) / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86_400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// A table: the headers, then the rows, columns padded to their widest cell.
pub(crate) fn table(out: &mut impl Write, headers: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line =
        |cells: Vec<&str>| {
            let last = cells.len().saturating_sub(1);
            cells
                .iter()
                .enumerate()
                .map(|(i, cell)| {
                    if i == last { (*cell).to_owned() } else { format!("{cell:<width$}", width = widths[i]) }
                })
                .collect::<Vec<_>>()
                .join("  ")
        };
    writeln!(out, "{}", line(headers.to_vec()))?;
    for row in rows {
        writeln!(out, "{}", line(row.iter().map(String::as_str).collect()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_text_and_the_stored_block_that_repeats_it_print_each_character_once() {
        assert_eq!(new_text("Hé", Some(0), 0), ("Hé", 2));
        assert_eq!(new_text("llo", Some(2), 2), ("llo", 5));
        assert_eq!(new_text("Héllo", Some(0), 5), ("", 5), "the stored block of what was live");
        assert_eq!(new_text("Héllo, wörld", Some(0), 5), (", wörld", 12));
        assert_eq!(new_text("more", None, 12), ("more", 16), "an old server's delta is all new");
    }

    #[test]
    fn show_prints_the_text_a_running_segment_streamed_after_the_stored_messages() {
        let mut snapshot: Snapshot = serde_json::from_value(serde_json::json!({
            "session_id": "s-1", "status": "running",
            "messages": [{"role": "user", "text": "refund order 7", "pending": false}],
            "pending_interrupts": [], "tool_calls": [],
            "usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0, "model_calls": 0},
            "last_turn_error": null, "turn_id": "t-1", "next_event_seq": 3,
            "live_text": {"turn_id": "t-1", "attempt": 1, "step_id": 2, "fence": 5,
                "text": "Looking up\norder 7", "updated_at": 0}
        }))
        .expect("a snapshot");
        let args =
            ClientArgs { url: DEFAULT_URL.into(), token: None, token_file: None, ca_cert: None, json: false };
        let mut out = Vec::new();
        show(&mut out, &snapshot, &args).unwrap();
        let text = String::from_utf8(out).unwrap();
        let expected =
            format!("user: refund order 7\nassistant (writing…): {}\n", indent_rest("Looking up\norder 7"));
        assert!(text.contains(&expected), "{text}");
        snapshot.live_text = None;
        let mut out = Vec::new();
        show(&mut out, &snapshot, &args).unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("writing"), "nothing streams");
    }

    #[test]
    fn plain_words_stay_bare_and_others_are_single_quoted() {
        assert_eq!(shell_word("session-1"), "session-1");
        assert_eq!(shell_word("it's here"), r"'it'\''s here'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn ages_are_given_in_the_largest_whole_unit() {
        assert_eq!(age(61_000, 0), "1m");
        assert_eq!(age(5_000, 0), "5s");
        assert_eq!(age(0, 5_000), "0s");
        assert_eq!(age(90_000_000, 0), "1d");
    }

    #[test]
    fn a_table_pads_every_column_but_the_last() {
        let mut out = Vec::new();
        table(&mut out, &["A", "BB"], &[vec!["xxx".into(), "y".into()]]).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "A    BB\nxxx  y\n");
    }

    #[test]
    fn long_text_is_clipped_to_one_line() {
        assert_eq!(clip("ab\ncd", 10), "ab cd");
        assert_eq!(clip("abcdef", 4), "abc…");
    }

    #[test]
    fn the_url_flag_is_printed_only_for_a_url_other_than_the_default() {
        let args = ClientArgs {
            url: format!("{DEFAULT_URL}/"),
            token: None,
            token_file: None,
            ca_cert: None,
            json: false,
        };
        assert_eq!(args.url_flag(), "");
        let args = ClientArgs { url: "https://10.0.0.1:9".into(), ca_cert: Some("ca.pem".into()), ..args };
        assert_eq!(args.url_flag(), " --url https://10.0.0.1:9 --ca-cert ca.pem");
    }
}
