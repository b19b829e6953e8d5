//! The sandbox of a process that loaded its agent (`tollgate serve`), as the faces use it: the
//! agent's tools as loaded now, and approval-free reads run at once with nothing stored. The
//! Worker implements [`InlineReads`] over its sandbox; a face that has one (`/mcp` in `serve`)
//! answers a read without a durable step, and a face without one (`tollgate api`) makes the read
//! a step a Worker runs.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;
use tollgate_engine::session::mcp::PublishedTool;

/// What an approval-free read returned when it ran at once ([`InlineReads`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOutput {
    /// The tool's text.
    pub text: String,
    /// Whether the tool reported an error (or did not run: its message).
    pub is_error: bool,
}

/// A boxed future, for [`InlineReads`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The sandbox of a process that loaded the agent (`tollgate serve`): its tools as loaded now,
/// and approval-free reads run at once, with nothing stored.
pub trait InlineReads: Send + Sync {
    /// The agent this process loaded.
    fn agent(&self) -> &str;
    /// Its custom tools with their policies.
    fn tools(&self) -> BoxFuture<'_, Result<Vec<PublishedTool>, String>>;
    /// Runs `tool`, an approval-free read, with `arguments` (checked against its schema).
    fn read<'a>(&'a self, tool: &'a str, arguments: &'a Value) -> BoxFuture<'a, ReadOutput>;
}
