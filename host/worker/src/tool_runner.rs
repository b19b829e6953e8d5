//! The sandbox's tool set as the segment's tool runner: [`SandboxTools`] implements
//! [`tollgate_claude::tools::ToolRunner`] for a [`ToolSet`], the way [`tollgate_sessions::convert`] adapts the
//! engine's values to the store's. `tollgate-claude` does not depend on `tollgate-sandbox`; this
//! binary, which uses both, joins them.
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
use tollgate_claude::tools::{CallFuture, ToolContent, ToolOutput, ToolRunError, ToolRunner, ToolSpec};
use tollgate_sandbox::{Content, ToolSet};

/// A [`ToolSet`] served by a segment's tool server.
#[derive(Clone, Debug)]
pub struct SandboxTools(pub ToolSet);

impl ToolRunner for SandboxTools {
    fn tools(&self) -> Vec<ToolSpec> {
        self.0
            .tools()
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
            match self.0.call(name, &arguments, None).await {
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

#[cfg(test)]
mod tests {
    use tollgate_sandbox::{Manifests, Sandbox, SandboxConfig};

    use super::*;

    #[tokio::test]
    async fn the_example_guests_are_offered_and_called_as_the_model_sees_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(tollgate_test_guests::ORDERS, dir.path().join("orders.wasm")).unwrap();
        let sandbox = Sandbox::new(SandboxConfig { cache_dir: None, ..SandboxConfig::default() }).unwrap();
        let tools = SandboxTools(sandbox.load_tools(dir.path(), &Manifests::default()).await.unwrap());

        let specs = tools.tools();
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].name, "lookup_order");
        assert!(specs[0].annotations.read_only);
        assert_eq!(specs[0].input_schema["required"], serde_json::json!(["order_id"]));

        let found = tools.call("lookup_order", &serde_json::json!({"order_id": "7"})).await.unwrap();
        assert!(!found.is_error);
        assert_eq!(
            found.content,
            [ToolContent::Text(
                r#"{"order_id":"7","status":"delivered","total_cents":4200,"currency":"EUR"}"#.into()
            )]
        );
        let missing = tools.call("lookup_order", &serde_json::json!({"order_id": "0"})).await.unwrap();
        assert!(missing.is_error, "a tool-level error is an error result");

        let refused = tools.call("lookup_order", &serde_json::json!({"order": "7"})).await.unwrap_err();
        assert!(refused.message.contains("order_id"), "{}", refused.message);
    }
}
