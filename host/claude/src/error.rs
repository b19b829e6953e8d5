//! The errors of this crate: [`SegmentError`] (why a segment failed) and [`CliError`] (why no
//! usable `claude` binary was found).
//!
//! Every variant says whether running the segment again may help ([`SegmentError::is_retryable`]):
//! a CLI hiccup (an exit mid-turn, a garbled line, a timeout, an API error result) is retryable;
//! a setup the next attempt would repeat (an unsupported CLI version, a tool named like a Claude
//! Code tool, a spec that contradicts itself) is terminal. The session's `RunModel` step uses that
//! to choose between another attempt and `last_turn_error`.
//!
//! Every message names the CLI's process and, where the CLI may have said why, ends with the tail
//! of its stderr.

use std::path::PathBuf;
use std::time::Duration;

use tollgate_engine::gate::GateError;
use tollgate_engine::session::FailureReason;

/// Why a segment ended without an answer or a deferred call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SegmentError {
    /// The segment spec contradicts itself (no prompt and nothing to resume, …). Terminal.
    #[error("invalid segment: {reason}")]
    InvalidSpec {
        /// What is wrong.
        reason: String,
    },

    /// The CLI binary could not be found or has an unsupported version. Terminal.
    #[error(transparent)]
    Cli(#[from] CliError),

    /// Preparing the segment's directories or the resume file failed. Retryable.
    #[error("cannot prepare the segment directory {path}: {source}")]
    Setup {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// The CLI process could not be started. Retryable.
    #[error("cannot start the Claude Code CLI {path}: {source}")]
    Spawn {
        /// The binary.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// A pipe to or from the CLI failed. Retryable.
    #[error("I/O with the Claude Code CLI (pid {pid}) failed: {source}{}", stderr_note(stderr))]
    Io {
        /// The CLI's process id.
        pid: u32,
        /// The I/O error.
        source: std::io::Error,
        /// The tail of the CLI's stderr.
        stderr: String,
    },

    /// The CLI wrote a stdout line that is not a protocol frame. Retryable.
    #[error(
        "the Claude Code CLI (pid {pid}) wrote a malformed line ({problem}): {excerpt}{}",
        stderr_note(stderr)
    )]
    MalformedOutput {
        /// The CLI's process id.
        pid: u32,
        /// What was wrong with it.
        problem: String,
        /// The start of the line.
        excerpt: String,
        /// The tail of the CLI's stderr.
        stderr: String,
    },

    /// The CLI wrote a stdout line longer than the limit. Retryable.
    #[error(
        "the Claude Code CLI (pid {pid}) wrote a stdout line longer than {limit} bytes (the limit is \
         `SegmentSpec::max_line_bytes`){}",
        stderr_note(stderr)
    )]
    LineTooLong {
        /// The CLI's process id.
        pid: u32,
        /// The limit in bytes.
        limit: usize,
        /// The tail of the CLI's stderr.
        stderr: String,
    },

    /// The CLI closed stdout (exited) before its `result`. Retryable.
    #[error("the Claude Code CLI (pid {pid}) exited before its result ({status}){}", stderr_note(stderr))]
    ExitedEarly {
        /// The CLI's process id.
        pid: u32,
        /// How it exited, as text (`exit status: 1`, `signal: 9`, or `still running`).
        status: String,
        /// The tail of the CLI's stderr.
        stderr: String,
    },

    /// The CLI did not answer `initialize` in time. Retryable.
    #[error(
        "the Claude Code CLI (pid {pid}) did not answer initialize within {waited:?}{}",
        stderr_note(stderr)
    )]
    InitializeTimeout {
        /// The CLI's process id.
        pid: u32,
        /// How long the host waited.
        waited: Duration,
        /// The tail of the CLI's stderr.
        stderr: String,
    },

    /// The CLI refused `initialize`, or did not apply the hooks. Retryable (a CLI hiccup) unless
    /// the same CLI refuses again.
    #[error("the Claude Code CLI (pid {pid}) refused initialize: {message}{}", stderr_note(stderr))]
    InitializeRefused {
        /// The CLI's process id.
        pid: u32,
        /// The CLI's error text, or what was wrong with its answer.
        message: String,
        /// The tail of the CLI's stderr.
        stderr: String,
    },

    /// A parked spare refused its `claim_session` (its reason token first, e.g.
    /// `project_settings_not_claimable: …`). No prompt reached it. [`crate::run_segment_on`]
    /// then runs the segment on a CLI of its own, so callers see this only in
    /// [`crate::SegmentStats::claim_refused`].
    #[error("the parked Claude Code CLI (pid {pid}) refused its claim: {message}{}", stderr_note(stderr))]
    ClaimRefused {
        /// The CLI's process id.
        pid: u32,
        /// The CLI's error text.
        message: String,
        /// The tail of the CLI's stderr.
        stderr: String,
    },

    /// The segment did not end within its time limit; the process group was killed. Retryable.
    #[error(
        "the segment did not end within {limit:?}; the Claude Code CLI (pid {pid}) was killed{}",
        stderr_note(stderr)
    )]
    Timeout {
        /// The CLI's process id.
        pid: u32,
        /// The segment's time limit.
        limit: Duration,
        /// The tail of the CLI's stderr.
        stderr: String,
    },

    /// The CLI ended the turn with an error result (API error, `error_during_execution`,
    /// `tool_deferred_unavailable`, …). Retryable, except a limit of the CLI's own options
    /// ([`SegmentError::limit_reason`]).
    #[error(
        "the Claude Code CLI ended the turn with an error (subtype {subtype}, terminal reason {terminal_reason}): {message}{}",
        stderr_note(stderr)
    )]
    ErrorResult {
        /// The result's `subtype`.
        subtype: String,
        /// The result's `terminal_reason`, as text (`none` when absent).
        terminal_reason: String,
        /// The result text and its `errors`, joined.
        message: String,
        /// The tail of the CLI's stderr.
        stderr: String,
    },

    /// A recorded inline write ran, but its record was not committed (the claim was lost, the
    /// store failed): the CLI was stopped before it read the result. Retryable: a rerun of the
    /// segment meets the write again (it replays a record that did commit, or calls again under
    /// the same key).
    #[error(
        "the Claude Code CLI (pid {pid}) was stopped: an inline write's record was not committed: {reason}"
    )]
    NotRecorded {
        /// The CLI's process id.
        pid: u32,
        /// What failed.
        reason: String,
    },

    /// The box the CLI ran in hit one of its limits (memory, tasks, CPU time, a full workspace)
    /// and that is why the segment stopped. Not retryable: a rerun would do the same.
    #[error("the agent's box hit its {limit} limit: {detail}")]
    BoxLimit {
        /// Which limit (`memory`, `tasks`, `cpu`, `workspace`, `scratch`).
        limit: String,
        /// What happened.
        detail: String,
    },

    /// The gate cannot accept what the CLI did (a deferral it did not make, a name collision).
    /// Retryable unless [`GateError::is_retryable`] says otherwise.
    #[error("the gate refused the segment: {0}")]
    Gate(#[from] GateError),
}

impl SegmentError {
    /// Whether running the segment again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            SegmentError::InvalidSpec { .. } | SegmentError::Cli(_) | SegmentError::BoxLimit { .. } => false,
            SegmentError::Gate(gate) => gate.is_retryable(),
            SegmentError::ErrorResult { .. } => self.limit_reason().is_none(),
            _ => true,
        }
    }

    /// The turn's failure reason when the CLI stopped at one of its own limits (`max_turns`,
    /// `max_budget_usd`): a rerun would pay again and stop there again
    /// ([`FailureReason::cli_limit`]).
    pub fn limit_reason(&self) -> Option<FailureReason> {
        match self {
            SegmentError::ErrorResult { subtype, .. } => FailureReason::cli_limit(subtype),
            _ => None,
        }
    }

    /// The tail of the CLI's stderr the error carries (empty when it carries none).
    pub fn stderr(&self) -> &str {
        match self {
            SegmentError::Io { stderr, .. }
            | SegmentError::MalformedOutput { stderr, .. }
            | SegmentError::LineTooLong { stderr, .. }
            | SegmentError::ExitedEarly { stderr, .. }
            | SegmentError::InitializeTimeout { stderr, .. }
            | SegmentError::InitializeRefused { stderr, .. }
            | SegmentError::ClaimRefused { stderr, .. }
            | SegmentError::Timeout { stderr, .. }
            | SegmentError::ErrorResult { stderr, .. } => stderr,
            _ => "",
        }
    }
}

fn stderr_note(stderr: &str) -> String {
    let trimmed = stderr.trim();
    if trimmed.is_empty() { "; stderr was empty".to_owned() } else { format!("; stderr:\n{trimmed}") }
}

/// Why no usable Claude Code CLI binary was found. Terminal: fix the install or the config.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// No candidate path holds an executable file.
    #[error(
        "no Claude Code CLI found; looked at {}. Install the pinned one with scripts/install-claude-cli.sh, \
         set TOLLGATE_CLAUDE_CLI, or configure the path",
        tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    NotFound {
        /// Every path tried, in order.
        tried: Vec<PathBuf>,
    },

    /// `claude --version` failed or printed something unreadable.
    #[error("`{} --version` failed: {message}", path.display())]
    VersionCheck {
        /// The binary.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },

    /// The binary is a version this host has not been verified against.
    #[error(
        "the Claude Code CLI at {} is version {found}, but this host supports only {}: the control \
         protocol it relies on (defer, --session-mirror, --await-initialize) was verified against those. \
         Install the pinned version with scripts/install-claude-cli.sh",
        path.display(),
        supported.join(", ")
    )]
    UnsupportedVersion {
        /// The binary.
        path: PathBuf,
        /// The version it reports.
        found: String,
        /// The supported versions.
        supported: Vec<String>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_process_errors_are_retryable_and_setup_errors_are_not() {
        let timeout = SegmentError::Timeout { pid: 1, limit: Duration::from_secs(1), stderr: String::new() };
        assert!(timeout.is_retryable());
        assert!(!SegmentError::InvalidSpec { reason: "x".into() }.is_retryable());
        let cli = CliError::UnsupportedVersion {
            path: "/bin/claude".into(),
            found: "9.9.9".into(),
            supported: vec!["2.1.328".into()],
        };
        assert!(!SegmentError::from(cli).is_retryable());
        assert!(!SegmentError::from(GateError::NameCollision { tool: "Bash".into() }).is_retryable());
        let not_recorded = SegmentError::NotRecorded { pid: 1, reason: "the lease was lost".into() };
        assert!(not_recorded.is_retryable(), "a rerun meets the write again");
    }

    #[test]
    fn an_error_result_is_retryable_unless_the_cli_stopped_at_one_of_its_own_limits() {
        let result = |subtype: &str| SegmentError::ErrorResult {
            subtype: subtype.into(),
            terminal_reason: "none".into(),
            message: String::new(),
            stderr: String::new(),
        };
        assert!(result("error_during_execution").is_retryable());
        assert_eq!(result("error_during_execution").limit_reason(), None);
        for (subtype, reason) in [
            ("error_max_turns", FailureReason::MaxTurns),
            ("error_max_budget_usd", FailureReason::MaxBudgetUsd),
        ] {
            assert!(!result(subtype).is_retryable(), "{subtype}");
            assert_eq!(result(subtype).limit_reason(), Some(reason));
        }
    }

    #[test]
    fn messages_end_with_the_stderr_tail() {
        let err =
            SegmentError::ExitedEarly { pid: 7, status: "exit status: 1".into(), stderr: "boom\n".into() };
        assert_eq!(
            err.to_string(),
            "the Claude Code CLI (pid 7) exited before its result (exit status: 1); stderr:\nboom"
        );
        assert_eq!(err.stderr(), "boom\n");
        let quiet = SegmentError::ExitedEarly { pid: 7, status: "signal: 9".into(), stderr: String::new() };
        assert!(quiet.to_string().ends_with("; stderr was empty"));
    }
}
