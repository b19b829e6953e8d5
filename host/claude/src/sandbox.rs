//! [`ToolRunner`] for the sandbox's [`ToolSet`]: the production tool runner.
//!
//! This module only maps types: [`ToolInfo`](tollgate_sandbox::ToolInfo) to [`ToolSpec`], the
//! sandbox's output to [`ToolOutput`], and a [`CallError`](tollgate_sandbox::CallError) to the
//! text the model reads ([`CallError::message_for_model`](tollgate_sandbox::CallError::message_for_model)).
//! Inline calls run without a `DeferredExecution`.
//!
//! # Caveats
//!
//! The sandbox validates the arguments against the tool's schema first; a mismatch reaches the
//! model as an error result, like any other failure of an inline read.

use serde_json::Value;
use tollgate_sandbox::{Content, ToolSet};

use crate::tools::{CallFuture, ToolContent, ToolOutput, ToolRunError, ToolRunner, ToolSpec};

impl ToolRunner for ToolSet {
    fn tools(&self) -> Vec<ToolSpec> {
        ToolSet::tools(self)
            .iter()
            .map(|tool| ToolSpec {
                name: tool.name.clone(),
                description: tool.description.clone(),
                input_schema: tool.input_schema.clone(),
                annotations: tool.annotations,
            })
            .collect()
    }

    fn call<'a>(&'a self, name: &'a str, arguments: &'a Value) -> CallFuture<'a> {
        Box::pin(async move {
            let arguments = arguments.to_string();
            match ToolSet::call(self, name, &arguments, None).await {
                Ok(output) => Ok(ToolOutput {
                    content: output
                        .content
                        .into_iter()
                        .map(|content| match content {
                            Content::Text { text } => ToolContent::Text(text),
                            Content::Image { media_type, data } => ToolContent::Image { media_type, data },
                        })
                        .collect(),
                    is_error: output.is_error,
                }),
                Err(err) => Err(ToolRunError { message: err.message_for_model() }),
            }
        })
    }
}
