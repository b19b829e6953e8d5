//! What the in-process MCP server serves: the [`ToolRunner`] trait and its plain data types.
//!
//! Read [`ToolRunner`] first. A segment lists the runner's tools in `tools/list` and calls
//! [`ToolRunner::call`] for an inline call the gate allowed (a read without approval). Deferred
//! calls never run here: they run in their own durable step, and the resumed segment replays
//! their record. The production runner is the binary's adapter of the sandbox's tool set
//! (`tollgate::tool_runner`); tests may use any other.
//!
//! This module does not decide whether a call may run (the gate does) and does not speak MCP
//! ([`crate::mcp`] does).
//!
//! # Caveats
//!
//! - [`ToolRunner::call`] gets no `DeferredExecution`: inline calls have none (DESIGN.md §4).
//! - A [`ToolRunError`] is shown to the model as an error result; an inline read cannot ask for a
//!   segment retry (seeds, "Effects and policies").

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;
use tollgate_engine::policy::Annotations;

/// One custom tool as `tools/list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The bare name (`lookup_order`); the model sees `mcp__<server>__<name>`.
    pub name: String,
    /// What the model reads about it.
    pub description: String,
    /// The JSON Schema of its arguments object.
    pub input_schema: Value,
    /// Its hints; they classify it when no policy names it.
    pub annotations: Annotations,
}

/// A tool's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// The content blocks, in order.
    pub content: Vec<ToolContent>,
    /// A tool-level failure the model reads.
    pub is_error: bool,
}

impl ToolOutput {
    /// One text block.
    pub fn text(text: impl Into<String>) -> Self {
        ToolOutput { content: vec![ToolContent::Text(text.into())], is_error: false }
    }

    /// One text block, flagged as an error.
    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput { content: vec![ToolContent::Text(text.into())], is_error: true }
    }
}

/// One content block of a [`ToolOutput`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolContent {
    /// Text.
    Text(String),
    /// An image: its MIME type and raw bytes.
    Image {
        /// `image/png`, …
        media_type: String,
        /// The bytes (not base64).
        data: Vec<u8>,
    },
}

/// The tool itself failed (trapped, timed out, a handler error). The model reads the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ToolRunError {
    /// The text for the model.
    pub message: String,
}

/// The future [`ToolRunner::call`] returns.
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<ToolOutput, ToolRunError>> + Send + 'a>>;

/// The custom tools of one segment attempt, and how to run one inline.
pub trait ToolRunner: Send + Sync + 'static {
    /// The tools to list, in order.
    fn tools(&self) -> Vec<ToolSpec>;

    /// Runs `name` with `arguments` (a JSON object, as the CLI sent it) for an inline call.
    fn call<'a>(&'a self, name: &'a str, arguments: &'a Value) -> CallFuture<'a>;
}

/// A runner with no tools (a segment that offers only Claude Code's own tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoTools;

impl ToolRunner for NoTools {
    fn tools(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    fn call<'a>(&'a self, name: &'a str, _arguments: &'a Value) -> CallFuture<'a> {
        Box::pin(async move { Err(ToolRunError { message: format!("no tool named {name}") }) })
    }
}

/// The [`tollgate_engine::catalog::ToolCatalog`] of a runner's tools, served as `server_name`,
/// for building the segment's [`tollgate_engine::gate::Gate`].
///
/// # Errors
///
/// A [`tollgate_engine::catalog::CatalogError`] for an invalid server name or tool name.
pub fn catalog(
    server_name: &str,
    tools: &[ToolSpec],
) -> Result<tollgate_engine::catalog::ToolCatalog, tollgate_engine::catalog::CatalogError> {
    tools.iter().try_fold(tollgate_engine::catalog::ToolCatalog::new(server_name)?, |catalog, tool| {
        catalog.with_tool(tool.name.clone(), tool.annotations)
    })
}
