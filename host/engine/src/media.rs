//! Images by reference: what the state machine keeps of an image is its digest and media type,
//! never its bytes (the store holds those once per session, by digest).
//!
//! [`MediaRef`] is the one stored and sent form: in a user message's item (`"images"`), in a
//! deferred call's record, in the snapshot's messages and tool calls. Whoever needs the bytes
//! (the prompt to the CLI, a replayed result, the web page) reads them from the store by digest.

use serde::{Deserialize, Serialize};

/// The media types an image may have: the ones the Messages API takes.
pub const IMAGE_MEDIA_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// An image stored by digest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MediaRef {
    /// `sha256:` and the 64 lowercase hex digits of the bytes' SHA-256.
    #[cfg_attr(feature = "openapi", schema(pattern = "^sha256:[0-9a-f]{64}$"))]
    pub digest: String,
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    #[cfg_attr(feature = "openapi", schema(examples("image/png")))]
    pub media_type: String,
}
