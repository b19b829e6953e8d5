//! The one error type of this crate, [`ProtocolError`].
//!
//! Every variant names what was wrong with the input (which frame type, which request id, which
//! field via the wrapped `serde_json` message). None of them is retryable: a line that failed to
//! parse fails the same way again. Whether a bad line ends the CLI process or is only logged is the
//! transport's call, not this crate's.

/// Why a line, a control-response payload or a transcript entry could not be read.
///
/// Parsing never panics; every malformed input ends up here.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The line was empty or only whitespace.
    #[error("empty line: every stream-json line must hold one JSON object")]
    EmptyLine,

    /// The line is not JSON (or has bytes after the object).
    #[error("line is not valid JSON: {source}")]
    InvalidJson {
        /// What `serde_json` found, with line and column.
        source: serde_json::Error,
    },

    /// The line is JSON but not an object (an array, a string, a number…).
    #[error("line is JSON but not an object: every stream-json frame is a JSON object")]
    NotAnObject,

    /// The object has no string `"type"` field, so it cannot be routed.
    #[error("frame has no string \"type\" field: {detail}")]
    MissingType {
        /// What was found instead (absent, a number, a duplicated key…).
        detail: String,
    },

    /// The frame has a `type` this crate decodes, but its fields do not match.
    #[error("`{frame_type}` frame is malformed: {source}")]
    MalformedFrame {
        /// The frame's `type` (with `/subtype` for `system` frames).
        frame_type: String,
        /// The first field problem `serde_json` found.
        source: serde_json::Error,
    },

    /// A `control_request` from the CLI with a known subtype whose fields do not match.
    ///
    /// The request id is known, so the host can still answer with
    /// [`HostFrame::error_response`](crate::HostFrame::error_response); the CLI then treats the
    /// request as failed (for a hook: no decision, the normal permission flow runs).
    #[error("control_request {request_id} (`{subtype}`) is malformed: {source}")]
    MalformedRequest {
        /// The `request_id` to answer.
        request_id: String,
        /// The request's `subtype`.
        subtype: String,
        /// The first field problem `serde_json` found.
        source: serde_json::Error,
    },

    /// The CLI answered a host request with `{"subtype":"error"}`.
    #[error("the CLI answered control_request {request_id} with an error: {message}")]
    ControlError {
        /// The id of the host's request.
        request_id: String,
        /// The CLI's `error` text.
        message: String,
    },

    /// A successful control response whose payload does not have the expected shape.
    #[error("the CLI's answer to control_request {request_id} has an unexpected shape: {source}")]
    UnexpectedResponse {
        /// The id of the host's request.
        request_id: String,
        /// The first field problem `serde_json` found.
        source: serde_json::Error,
    },

    /// A stored transcript entry is not a single JSON value.
    #[error("transcript entry is not valid JSON: {source}")]
    InvalidEntry {
        /// What `serde_json` found.
        source: serde_json::Error,
    },
}
