//! The sandbox's errors: [`LoadError`] when a directory of components cannot be loaded, and
//! [`CallError`] when a call produced no output.
//!
//! A load error is terminal: the directory must be fixed. A call error says whether another
//! attempt could succeed ([`CallError::is_retryable`]) and what the model should read
//! ([`CallError::message_for_model`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::manifest::ManifestError;

/// A component directory could not be loaded. Each variant names the file or tool at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The directory or a file in it could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not WebAssembly at all.
    #[error("{path} is not a WebAssembly file (it does not start with `\\0asm`)")]
    NotWasm {
        /// The file.
        path: PathBuf,
    },
    /// The file is a core module, not a component.
    #[error(
        "{path} is a core WebAssembly module, not a component: build it for `wasm32-wasip2`, \
         or wrap it with `wasm-tools component new`"
    )]
    NotAComponent {
        /// The file.
        path: PathBuf,
    },
    /// The component does not compile, or imports something the host does not provide.
    #[error("{path} cannot be loaded: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The compiler's or linker's message.
        reason: String,
    },
    /// The component does not export the world the host expects.
    #[error("{path} does not export `{expected}` (it exports: {found}); is it built against `wit/`?")]
    WrongWorld {
        /// The file.
        path: PathBuf,
        /// The interface the host needs.
        expected: &'static str,
        /// What it exports instead.
        found: String,
    },
    /// `list-tools` failed or trapped.
    #[error("{path}: listing its tools failed: {reason}")]
    ListFailed {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A tool's spec is unusable.
    #[error("{path}: tool `{tool}`: {reason}")]
    BadTool {
        /// The file.
        path: PathBuf,
        /// The tool's name as given.
        tool: String,
        /// What is wrong: its name, description or schema.
        reason: String,
    },
    /// Two components (or one, twice) export the same tool name.
    #[error("tool `{tool}` is exported by both {first} and {second}; tool names must be unique")]
    DuplicateTool {
        /// The name.
        tool: String,
        /// The first component.
        first: PathBuf,
        /// The second.
        second: PathBuf,
    },
    /// A component's manifest is bad.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A component has a manifest in two places.
    #[error("component `{component}` has two manifests, {first} and {second}; keep one")]
    TwoManifests {
        /// The component.
        component: String,
        /// One place.
        first: String,
        /// The other.
        second: String,
    },
    /// A manifest names a component that is not in the directory.
    #[error("{origin} grants capabilities to `{component}`, but there is no {component}.wasm in {dir}{hint}")]
    ManifestWithoutComponent {
        /// The manifest.
        origin: String,
        /// The component it names.
        component: String,
        /// The directory.
        dir: PathBuf,
        /// `; did you mean …?` naming the closest component there, or empty.
        hint: String,
    },
    /// The engine itself could not be set up.
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
}

/// A call produced no output for the model.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallError {
    /// No loaded component has this tool.
    #[error("no tool named `{tool}` is loaded")]
    UnknownTool {
        /// The name asked for.
        tool: String,
    },
    /// No loaded component has this tool, and some of the directory's components did not load:
    /// it may be one of theirs.
    #[error("{}", tollgate_engine::texts::tool_unavailable(tool, components.iter().map(|(c, r)| (c.as_str(), r.as_str()))))]
    Unavailable {
        /// The name asked for.
        tool: String,
        /// Each unavailable component and why it did not load.
        components: Vec<(String, String)>,
    },
    /// The arguments are not JSON.
    #[error("the arguments of `{tool}` are not valid JSON: {reason}")]
    InvalidJson {
        /// The tool.
        tool: String,
        /// The parser's message.
        reason: String,
    },
    /// The arguments do not match the tool's input schema; the handler did not run.
    #[error("the arguments of `{tool}` do not match its input schema: {}", problems.join("; "))]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// Each violation, with its JSON pointer.
        problems: Vec<String>,
    },
    /// The tool reported a permanent failure (`call-error::failed`).
    #[error("`{tool}` failed: {message}")]
    Failed {
        /// The tool.
        tool: String,
        /// Its message.
        message: String,
        /// What the guest wrote to stderr during the call (a Python or JavaScript SDK's traceback
        /// of an uncaught exception), lines kept, each escaped: for logs and records, never in
        /// what the model reads.
        stderr: Option<String>,
    },
    /// The tool reported a transient failure (`call-error::retryable`).
    #[error("`{tool}` failed and may succeed if called again: {message}")]
    Retryable {
        /// The tool.
        tool: String,
        /// Its message.
        message: String,
        /// What the guest wrote to stderr during the call (a Python or JavaScript SDK's traceback
        /// of an uncaught exception), lines kept, each escaped: for logs and records, never in
        /// what the model reads.
        stderr: Option<String>,
    },
    /// The call ran past its deadline and was stopped.
    #[error("`{tool}` did not finish within its {} ms deadline and was stopped", limit.as_millis())]
    DeadlineExceeded {
        /// The tool.
        tool: String,
        /// The deadline.
        limit: Duration,
    },
    /// The call tried to use more memory than its cap and was stopped.
    #[error("`{tool}` tried to use more than its {} MiB memory limit and was stopped", limit_bytes >> 20)]
    MemoryLimit {
        /// The tool.
        tool: String,
        /// The cap.
        limit_bytes: usize,
    },
    /// The call returned more output than allowed.
    #[error("`{tool}` returned {bytes} bytes of output, more than its limit of {limit} bytes")]
    OutputTooLarge {
        /// The tool.
        tool: String,
        /// What it returned.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// The guest trapped: a panic, an unreachable, a stack overflow, an out-of-bounds access.
    #[error("`{tool}` crashed: {reason}")]
    Trapped {
        /// The tool.
        tool: String,
        /// The trap, with the guest's panic message when it printed one.
        reason: String,
    },
    /// The host could not run the call (instantiation failed).
    #[error("`{tool}` could not be started: {reason}")]
    Host {
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
}

impl CallError {
    /// Whether another attempt of the same call may succeed: a tool's `retryable` error, a
    /// deadline, or a host hiccup. Bad arguments, crashes and permanent failures are terminal.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            CallError::Retryable { .. } | CallError::DeadlineExceeded { .. } | CallError::Host { .. }
        )
    }

    /// The text the model reads when an inline call fails.
    pub fn message_for_model(&self) -> String {
        match self {
            CallError::Failed { message, .. } | CallError::Retryable { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }

    /// What the guest wrote to stderr during a call that failed by its own report (see
    /// [`CallError::Failed`]), if anything.
    pub fn guest_stderr(&self) -> Option<&str> {
        match self {
            CallError::Failed { stderr, .. } | CallError::Retryable { stderr, .. } => stderr.as_deref(),
            _ => None,
        }
    }

    /// The tool the error is about.
    pub fn tool(&self) -> &str {
        match self {
            CallError::UnknownTool { tool }
            | CallError::Unavailable { tool, .. }
            | CallError::InvalidJson { tool, .. }
            | CallError::InvalidArguments { tool, .. }
            | CallError::Failed { tool, .. }
            | CallError::Retryable { tool, .. }
            | CallError::DeadlineExceeded { tool, .. }
            | CallError::MemoryLimit { tool, .. }
            | CallError::OutputTooLarge { tool, .. }
            | CallError::Trapped { tool, .. }
            | CallError::Host { tool, .. } => tool,
        }
    }
}
