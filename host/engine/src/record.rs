//! Records: the durable outcome of a deferred tool call, and what the model is shown for it.
//!
//! This module owns [`ToolCallRecord`] and [`Outcome`] (docs/ARCHITECTURE.md, "Glossary":
//! `succeeded(output)`, `failed(text)`, `rejected(text)`, `outcome_unknown`), their stored JSON
//! shape, and the tool result each outcome becomes when the resumed CLI asks for it
//! ([`Outcome::tool_result`]). It does not store records (the store does) or decide when one
//! replays (the gate does).
//!
//! # Wire format
//!
//! A record is a JSON object; the outcome is flattened into it under `status`:
//!
//! ```json
//! {"tool_call_id":"toolu_1","tool_name":"create_refund","kind":"custom",
//!  "arguments":{"order_id":"7"},"status":"succeeded","output":"refunded r_1"}
//! {"…":"…","status":"failed","error":"Input validation error: …"}
//! {"…":"…","status":"rejected","message":"not this order"}      // message may be null
//! {"…":"…","status":"outcome_unknown"}
//! ```
//!
//! - `tool_call_id` is the model's tool use ID (`toolu_…`).
//! - `tool_name` names a custom tool by its own name and a CLI tool by its CLI name (the reference
//!   adapters' wire contract); `kind` says which.
//! - `arguments` is `deferred_tool_use.input`, the CLI's input after every hook's `updatedInput`.
//! - An approved CLI tool's record comes from its run in the resumed segment: the CLI's tool
//!   result (`succeeded` with its text, `failed` with the CLI's error), or `outcome_unknown` when
//!   the segment let it run and ended without one. Until then the resumed segment replays it as
//!   [`Outcome::approved_cli_tool`].
//! - `images` (left out when there are none) are the images of the tool's result, after its
//!   text, each by reference to the stored bytes: `[{"digest":"sha256:…","media_type":"image/png"}]`.
//!   A replay sends them to the model again, as image blocks after the text
//!   ([`ToolCallRecord::tool_result`]); whoever reads the record back for a replay loads their
//!   bytes into [`RecordedImage::data`] first.
//!
//! ```
//! use serde_json::json;
//! use tollgate_engine::catalog::ToolKind;
//! use tollgate_engine::record::{Outcome, ToolCallRecord};
//!
//! let record = ToolCallRecord::new("toolu_1", "create_refund", ToolKind::Custom, json!({"order_id": "7"}),
//!     Outcome::Rejected { message: Some("not this order".into()) });
//! let shown = record.outcome.tool_result("mcp__tools__create_refund");
//! assert_eq!(shown.text, "The user rejected this call: not this order");
//! assert!(shown.is_error);
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::catalog::ToolKind;
use crate::media::MediaRef;
use crate::texts;

pub use crate::texts::APPROVED_CLI_TOOL_OUTPUT;

/// The final outcome of a deferred call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The tool ran and returned `output` (its text; its images are the record's). For a CLI
    /// tool: the CLI's tool result of its run.
    Succeeded {
        /// What the tool returned.
        output: String,
    },
    /// The tool reported a failure the model reads (`is_error`, or "Input validation error: …").
    Failed {
        /// The failure text, shown to the model as is.
        error: String,
    },
    /// A reviewer rejected the call; it never ran.
    Rejected {
        /// The reviewer's reason, if any.
        message: Option<String>,
    },
    /// The call may have run: it started and never reported (a single-attempt write that crashed,
    /// an idempotent write whose attempts ran out).
    OutcomeUnknown,
}

impl Outcome {
    /// What a resumed segment replays for an approved CLI call that has not run yet: the gate
    /// lets the CLI run it with the approved input. Never the stored outcome of a call.
    pub fn approved_cli_tool() -> Self {
        Outcome::Succeeded { output: APPROVED_CLI_TOOL_OUTPUT.to_owned() }
    }

    /// The status name used in the wire format (`succeeded`, `failed`, `rejected`,
    /// `outcome_unknown`).
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Succeeded { .. } => "succeeded",
            Outcome::Failed { .. } => "failed",
            Outcome::Rejected { .. } => "rejected",
            Outcome::OutcomeUnknown => "outcome_unknown",
        }
    }

    /// The text the model is shown for this outcome, and whether it is an error result.
    /// `tool` is the name the model called (`mcp__tools__create_refund`, `Bash`).
    ///
    /// | outcome | text | `is_error` |
    /// | --- | --- | --- |
    /// | `succeeded(output)` | `output` | no |
    /// | `failed(error)` | `error` | yes |
    /// | `rejected(message)` | [`texts::rejection`] | yes |
    /// | `outcome_unknown` | [`texts::OUTCOME_UNKNOWN`] | yes |
    pub fn tool_result(&self, tool: &str) -> ToolResult {
        match self {
            Outcome::Succeeded { output } => ToolResult::text(output.clone(), false),
            Outcome::Failed { error } => ToolResult::text(error.clone(), true),
            Outcome::Rejected { message } => ToolResult::text(texts::rejection(message.as_deref()), true),
            Outcome::OutcomeUnknown => ToolResult::text(texts::render(texts::OUTCOME_UNKNOWN, tool), true),
        }
    }
}

/// A tool result as the model receives it: one text, the images after it, and the error flag.
/// The MCP server turns it into `{"content":[{"type":"text","text":…},{"type":"image",…}…],
/// "isError":…}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The text.
    pub text: String,
    /// Whether the result is an error.
    pub is_error: bool,
    /// The images after the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageData>,
}

impl ToolResult {
    /// A result of `text` alone.
    pub fn text(text: impl Into<String>, is_error: bool) -> Self {
        ToolResult { text: text.into(), is_error, images: Vec::new() }
    }

    /// The MCP `CallToolResult` JSON for this result.
    pub fn to_mcp_result(&self) -> Value {
        let mut content = vec![serde_json::json!({ "type": "text", "text": self.text })];
        content.extend(self.images.iter().map(
            |image| serde_json::json!({ "type": "image", "data": image.data, "mimeType": image.media_type }),
        ));
        serde_json::json!({ "content": content, "isError": self.is_error })
    }
}

/// An image as the model receives it: its media type and its bytes in base64.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageData {
    /// `image/png`, …
    pub media_type: String,
    /// The bytes, standard base64 with padding.
    pub data: String,
}

/// An image of a recorded result: its reference, as stored, and its bytes once loaded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedImage {
    /// The stored image.
    #[serde(flatten)]
    pub reference: MediaRef,
    /// Its bytes in base64, loaded for a replay; never stored.
    #[serde(skip)]
    pub data: Option<String>,
}

impl From<MediaRef> for RecordedImage {
    fn from(reference: MediaRef) -> Self {
        RecordedImage { reference, data: None }
    }
}

/// The durable record of one deferred call. See the module docs for its JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRecord {
    /// The model's tool use ID.
    pub tool_call_id: String,
    /// A custom tool's own name, or a CLI tool's CLI name.
    pub tool_name: String,
    /// Which side runs the tool.
    pub kind: ToolKind,
    /// The input the call runs with (after every hook's `updatedInput`).
    pub arguments: Value,
    /// The final outcome.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// What the model reads beside a CLI tool's own output when it replays (that output comes
    /// from the CLI, not the record): that an approver edited the input, and how.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The images of the tool's result, after its text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<RecordedImage>,
}

impl ToolCallRecord {
    /// A record.
    pub fn new(
        tool_call_id: impl Into<String>,
        tool_name: impl Into<String>,
        kind: ToolKind,
        arguments: Value,
        outcome: Outcome,
    ) -> Self {
        Self {
            tool_call_id: tool_call_id.into(),
            tool_name: tool_name.into(),
            kind,
            arguments,
            outcome,
            note: None,
            images: Vec::new(),
        }
    }

    /// What the model is shown when the record replays: [`Outcome::tool_result`] and the
    /// record's images after its text. An image whose bytes were not loaded
    /// ([`RecordedImage::data`]) is named in the text instead, so the model is never told an
    /// image is there that it cannot see.
    pub fn tool_result(&self, tool: &str) -> ToolResult {
        let mut result = self.outcome.tool_result(tool);
        for image in &self.images {
            match &image.data {
                Some(data) => result
                    .images
                    .push(ImageData { media_type: image.reference.media_type.clone(), data: data.clone() }),
                None => result.text.push_str(&texts::image_not_loaded(&image.reference.digest)),
            }
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record(outcome: Outcome) -> ToolCallRecord {
        ToolCallRecord::new("toolu_1", "create_refund", ToolKind::Custom, json!({ "order_id": "7" }), outcome)
    }

    #[test]
    fn a_succeeded_record_shows_its_output_as_a_normal_result() {
        let shown =
            Outcome::Succeeded { output: "refunded r_1".to_owned() }.tool_result("mcp__tools__create_refund");
        assert_eq!(shown, ToolResult::text("refunded r_1", false));
    }

    #[test]
    fn a_failed_record_shows_its_failure_text_as_an_error() {
        let shown = Outcome::Failed { error: "Input validation error: order_id".to_owned() }.tool_result("x");
        assert_eq!(shown, ToolResult::text("Input validation error: order_id", true));
    }

    #[test]
    fn a_rejected_record_shows_the_rejection_text() {
        let with = Outcome::Rejected { message: Some("wrong order".to_owned()) }.tool_result("x");
        assert_eq!(with, ToolResult::text("The user rejected this call: wrong order", true));
        let without = Outcome::Rejected { message: None }.tool_result("x");
        assert_eq!(without, ToolResult::text("The user rejected this call.", true));
    }

    #[test]
    fn an_unknown_outcome_tells_the_model_the_write_may_have_happened() {
        let shown = Outcome::OutcomeUnknown.tool_result("mcp__tools__create_refund");
        assert_eq!(
            shown.text,
            "The outcome of mcp__tools__create_refund is unknown: the call started but did not report a \
             result, so it may have taken effect. Check before calling mcp__tools__create_refund again."
        );
        assert!(shown.is_error);
    }

    #[test]
    fn the_replay_of_an_approved_cli_tool_not_run_yet_is_the_approved_output() {
        assert_eq!(
            Outcome::approved_cli_tool(),
            Outcome::Succeeded { output: APPROVED_CLI_TOOL_OUTPUT.to_owned() }
        );
    }

    #[test]
    fn records_serialize_with_the_outcome_flattened_under_status() {
        let cases = [
            (
                Outcome::Succeeded { output: "ok".to_owned() },
                json!({ "status": "succeeded", "output": "ok" }),
            ),
            (Outcome::Failed { error: "no".to_owned() }, json!({ "status": "failed", "error": "no" })),
            (Outcome::Rejected { message: None }, json!({ "status": "rejected", "message": null })),
            (Outcome::OutcomeUnknown, json!({ "status": "outcome_unknown" })),
        ];
        for (outcome, tail) in cases {
            let mut expected = json!({
                "tool_call_id": "toolu_1",
                "tool_name": "create_refund",
                "kind": "custom",
                "arguments": { "order_id": "7" },
            });
            if let (Some(object), Some(tail)) = (expected.as_object_mut(), tail.as_object()) {
                object.extend(tail.clone());
            }
            let record = record(outcome);
            assert_eq!(serde_json::to_value(&record).ok(), Some(expected.clone()));
            assert_eq!(serde_json::from_value::<ToolCallRecord>(expected).ok(), Some(record.clone()));
            assert_eq!(
                serde_json::to_value(&record).ok().and_then(|v| v.get("status").cloned()),
                Some(Value::from(record.outcome.status()))
            );
        }
    }

    #[test]
    fn an_unknown_status_does_not_deserialize() {
        let stored = json!({
            "tool_call_id": "toolu_1", "tool_name": "x", "kind": "cli", "arguments": {}, "status": "pending",
        });
        assert!(serde_json::from_value::<ToolCallRecord>(stored).is_err());
    }

    #[test]
    fn a_record_keeps_its_images_by_reference_and_replays_them_after_its_text() {
        let chart = MediaRef { digest: format!("sha256:{}", "c".repeat(64)), media_type: "image/png".into() };
        let mut record = record(Outcome::Succeeded { output: "sales chart".to_owned() });
        record.images.push(chart.clone().into());
        let stored = serde_json::to_value(&record).unwrap();
        assert_eq!(stored["images"], json!([{"digest": chart.digest, "media_type": "image/png"}]));
        let mut back: ToolCallRecord = serde_json::from_value(stored).unwrap();
        assert_eq!(back, record, "the bytes are never stored");
        let unloaded = back.tool_result("mcp__tools__chart");
        assert!(unloaded.images.is_empty() && unloaded.text.contains(&chart.digest), "{unloaded:?}");
        back.images[0].data = Some("aGk=".into());
        let shown = back.tool_result("mcp__tools__chart");
        assert_eq!(shown.text, "sales chart");
        assert_eq!(shown.images, [ImageData { media_type: "image/png".into(), data: "aGk=".into() }]);
        assert_eq!(
            shown.to_mcp_result()["content"][1],
            json!({"type": "image", "data": "aGk=", "mimeType": "image/png"})
        );
    }

    #[test]
    fn a_tool_result_becomes_an_mcp_call_tool_result() {
        let result = ToolResult::text("no", true);
        assert_eq!(
            result.to_mcp_result(),
            json!({ "content": [{ "type": "text", "text": "no" }], "isError": true })
        );
    }
}
