//! What the in-process MCP server serves: the [`ToolRunner`] trait and its plain data types.
//!
//! Read [`ToolRunner`] first. A segment lists the runner's tools in `tools/list` and calls
//! [`ToolRunner::call`] for an inline call the gate allowed (a read without approval), or
//! [`ToolRunner::call_recorded`] for a recorded inline write (an approval-free idempotent write).
//! Deferred calls never run here: they run in their own durable step, and the resumed segment
//! replays their record. The production runner is the binary's adapter of the sandbox's tool set
//! (`tollgate::tool_runner`); tests may use any other.
//!
//! This module does not decide whether a call may run (the gate does) and does not speak MCP
//! ([`crate::mcp`] does).
//!
//! # Caveats
//!
//! - [`ToolRunner::call`] gets no `DeferredExecution`: inline reads have none (the WIT's
//!   `deferred-execution`). A recorded inline write (an approval-free idempotent write) goes to
//!   [`ToolRunner::call_recorded`] instead, with its [`RecordedCall`]: the runner runs it under the
//!   record's idempotency key and commits the record before it answers. The default runs it like
//!   [`ToolRunner::call`] and records nothing (for runners without a store, such as tests).
//! - A [`ToolRunError`] is shown to the model as an error result; an inline read cannot ask for a
//!   segment retry (the reference adapters' "Effects and policies").

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;
#[cfg(doc)]
use tollgate_engine::gate::McpPermit;
use tollgate_engine::gate::RecordedRun;
use tollgate_engine::policy::Annotations;
use tollgate_engine::record::{ImageData, ToolResult};

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

/// A recorded inline write the gate permitted ([`McpPermit::RunRecorded`]).
#[derive(Debug, Clone, Copy)]
pub struct RecordedCall<'a> {
    /// The model's tool use ID of this call (`_meta["claudecode/toolUseId"]`).
    pub tool_use_id: &'a str,
    /// The tool as the model calls it (`mcp__tools__record_credit`), for the record's texts.
    pub cli_name: &'a str,
    /// The record and key it runs under, and the attempts an earlier run already started.
    pub run: &'a RecordedRun,
}

/// A recorded call's record was not committed (the segment lost its claim, the store is gone):
/// its result must not reach the CLI, and the segment stops.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NotRecorded {
    /// What failed.
    pub message: String,
}

/// The future [`ToolRunner::call_recorded`] returns: the recorded result the CLI reads.
pub type RecordedFuture<'a> = Pin<Box<dyn Future<Output = Result<ToolResult, NotRecorded>> + Send + 'a>>;

/// The custom tools of one segment attempt, and how to run one inline.
pub trait ToolRunner: Send + Sync + 'static {
    /// The tools to list, in order.
    fn tools(&self) -> Vec<ToolSpec>;

    /// Runs `name` with `arguments` (a JSON object, as the CLI sent it) for an inline call.
    fn call<'a>(&'a self, name: &'a str, arguments: &'a Value) -> CallFuture<'a>;

    /// Runs a recorded inline write: under the key of `call.run`, with `CallTool`'s attempts, and
    /// returns its record's result once the record is committed; [`NotRecorded`] when the commit
    /// failed (the segment then stops, and the CLI never reads the result).
    ///
    /// The default runs it once like [`ToolRunner::call`] and records nothing.
    fn call_recorded<'a>(
        &'a self,
        name: &'a str,
        arguments: &'a Value,
        call: RecordedCall<'a>,
    ) -> RecordedFuture<'a> {
        let _ = call;
        Box::pin(async move {
            Ok(match self.call(name, arguments).await {
                Ok(output) => output.into_result(),
                Err(err) => ToolResult::text(err.message, true),
            })
        })
    }
}

impl ToolOutput {
    /// The result the model reads: the texts joined with newlines, then the images.
    pub fn into_result(self) -> ToolResult {
        let mut texts = Vec::new();
        let mut images = Vec::new();
        for content in self.content {
            match content {
                ToolContent::Text(text) => texts.push(text),
                ToolContent::Image { media_type, data } => {
                    images.push(ImageData { media_type, data: crate::mcp::base64(&data) });
                }
            }
        }
        ToolResult { text: texts.join("\n"), is_error: self.is_error, images }
    }
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct Echo;

    impl ToolRunner for Echo {
        fn tools(&self) -> Vec<ToolSpec> {
            Vec::new()
        }

        fn call<'a>(&'a self, name: &'a str, arguments: &'a Value) -> CallFuture<'a> {
            Box::pin(async move {
                if name == "fail" {
                    return Err(ToolRunError { message: "boom".into() });
                }
                Ok(ToolOutput {
                    content: vec![
                        ToolContent::Text(format!("{name} {arguments}")),
                        ToolContent::Image { media_type: "image/png".into(), data: vec![1] },
                    ],
                    is_error: false,
                })
            })
        }
    }

    #[tokio::test]
    async fn a_runner_without_a_store_runs_a_recorded_call_once_and_shows_its_text_and_images() {
        let run = RecordedRun { record_id: "toolu_1".into(), attempts_before: 0 };
        let call = RecordedCall { tool_use_id: "toolu_1", cli_name: "mcp__tools__credit", run: &run };
        let shown = Echo.call_recorded("credit", &json!({"n": 1}), call).await;
        assert_eq!(
            shown,
            Ok(ToolResult {
                text: "credit {\"n\":1}".into(),
                is_error: false,
                images: vec![ImageData { media_type: "image/png".into(), data: "AQ==".into() }],
            })
        );
        let failed = Echo.call_recorded("fail", &json!({}), call).await;
        assert_eq!(failed, Ok(ToolResult::text("boom", true)));
    }
}
