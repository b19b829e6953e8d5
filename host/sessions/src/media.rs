//! Images: a user message's images checked and stored once, a segment's transcript entries
//! stored with their images by reference and put back byte for byte for a resume, a record's
//! images loaded for its replay, and a prompt built with its images.
//!
//! The bytes live in the store's media table ([`tollgate_store::MediaStore`]), once per session
//! by digest; everything else holds [`MediaRef`]s (a user message's item, a call's record, the
//! snapshot's messages), and transcript entries hold the references of
//! [`tollgate_protocol::media`]. This module is where the two meet: it decodes, checks and stores
//! bytes, and reads them back when the CLI or a client needs them.
//!
//! Read [`check_message_images`] (what a client may send), then [`store_entries`] and
//! [`restore_transcript`] (a segment's transcript out and back in).
//!
//! # Caveats
//!
//! - A read of the store that fails, an image a reference names that the store does not have, or
//!   an entry whose images cannot be replaced reversibly fails the `RunModel` attempt (it is
//!   retried); nothing half-stored is left behind but rows no item references.
//! - Only Claude image blocks in base64 are stored by reference. Other content (a PDF document
//!   block, a file a built-in tool read) is stored as the CLI wrote it.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::value::RawValue;
use tollgate_engine::media::{IMAGE_MEDIA_TYPES, MediaRef};
use tollgate_engine::record::{RecordedImage, ToolCallRecord};
use tollgate_engine::session::turn::{Prompt, ResumeTranscript};
use tollgate_protocol::UserPrompt;
use tollgate_protocol::media as refs;
use tollgate_store::{NewMedia, Store, StoreError};

/// The most images one user message may carry.
pub const MAX_MESSAGE_IMAGES: usize = 8;

/// The most bytes (decoded) the images of one user message may have together: they reach the CLI
/// in one line of its protocol, and stay well under its line limit in base64.
pub const MAX_MESSAGE_IMAGE_BYTES: usize = 2 * 1024 * 1024;

/// Why a message's images were refused. Nothing is stored then.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// More than [`MAX_MESSAGE_IMAGES`].
    #[error("a message carries at most {MAX_MESSAGE_IMAGES} images, not {count}")]
    TooMany {
        /// How many were sent.
        count: usize,
    },
    /// A media type the model does not take.
    #[error(
        "images[{index}]: the media type `{media_type}` is not one of image/png, image/jpeg, image/gif, image/webp"
    )]
    UnsupportedType {
        /// Which image.
        index: usize,
        /// What it said.
        media_type: String,
    },
    /// The data is not standard base64.
    #[error("images[{index}]: the data is not standard base64 (with padding): {reason}")]
    NotBase64 {
        /// Which image.
        index: usize,
        /// The decoder's message.
        reason: String,
    },
    /// The bytes are not of the media type given.
    #[error("images[{index}]: the data is not a {media_type} image (its first bytes do not say so)")]
    WrongType {
        /// Which image.
        index: usize,
        /// What it said.
        media_type: String,
    },
    /// Over [`MAX_MESSAGE_IMAGE_BYTES`] together.
    #[error(
        "the images come to {bytes} bytes, over the limit of {MAX_MESSAGE_IMAGE_BYTES} bytes ({} MiB) per message",
        MAX_MESSAGE_IMAGE_BYTES / (1024 * 1024)
    )]
    TooLarge {
        /// Their decoded size together.
        bytes: usize,
    },
}

impl ImageError {
    /// The request field the error is about: `images[i].source.media_type`,
    /// `images[i].source.data`, or `images`.
    pub fn field(&self) -> String {
        match self {
            ImageError::UnsupportedType { index, .. } => format!("images[{index}].source.media_type"),
            ImageError::NotBase64 { index, .. } | ImageError::WrongType { index, .. } => {
                format!("images[{index}].source.data")
            }
            ImageError::TooMany { .. } | ImageError::TooLarge { .. } => "images".to_owned(),
        }
    }
}

/// The images a client sent with a message (`(media type, base64 data)`, in order), decoded and
/// checked: a media type the model takes, standard base64, bytes that begin as that type's do,
/// at most [`MAX_MESSAGE_IMAGES`] and [`MAX_MESSAGE_IMAGE_BYTES`] together.
///
/// # Errors
/// The first [`ImageError`] found.
pub fn check_message_images<'a>(
    images: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<NewMedia>, ImageError> {
    if images.len() > MAX_MESSAGE_IMAGES {
        return Err(ImageError::TooMany { count: images.len() });
    }
    let mut out = Vec::with_capacity(images.len());
    let mut bytes = 0usize;
    for (index, (media_type, data)) in images.enumerate() {
        if !IMAGE_MEDIA_TYPES.contains(&media_type) {
            return Err(ImageError::UnsupportedType { index, media_type: media_type.to_owned() });
        }
        // Cheap before decoding: base64 is 4 characters per 3 bytes.
        bytes += data.len() / 4 * 3;
        if bytes > MAX_MESSAGE_IMAGE_BYTES + 3 {
            return Err(ImageError::TooLarge { bytes });
        }
        let decoded =
            STANDARD.decode(data).map_err(|e| ImageError::NotBase64 { index, reason: e.to_string() })?;
        if !looks_like(media_type, &decoded) {
            return Err(ImageError::WrongType { index, media_type: media_type.to_owned() });
        }
        out.push(NewMedia { media_type: media_type.to_owned(), data: decoded });
    }
    let bytes: usize = out.iter().map(|m| m.data.len()).sum();
    if bytes > MAX_MESSAGE_IMAGE_BYTES {
        return Err(ImageError::TooLarge { bytes });
    }
    Ok(out)
}

/// Whether `data` begins the way a `media_type` file does.
fn looks_like(media_type: &str, data: &[u8]) -> bool {
    match media_type {
        "image/png" => data.starts_with(b"\x89PNG\r\n\x1a\n"),
        "image/jpeg" => data.starts_with(&[0xff, 0xd8, 0xff]),
        "image/gif" => data.starts_with(b"GIF87a") || data.starts_with(b"GIF89a"),
        "image/webp" => data.len() >= 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WEBP",
        _ => false,
    }
}

/// The references of `media` (their digests are the store's: the SHA-256 of the bytes).
pub fn references(media: &[NewMedia]) -> Vec<MediaRef> {
    media.iter().map(|m| MediaRef { digest: m.digest(), media_type: m.media_type.clone() }).collect()
}

/// Why a segment's images could not be stored or read back: the attempt fails (and is retried).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MediaFailure {
    /// The store failed.
    #[error("the images could not be stored or read: {0}")]
    Store(#[from] StoreError),
    /// An entry's images could not be replaced or put back.
    #[error(transparent)]
    Entry(#[from] refs::MediaError),
    /// An image in an entry is not plain base64 of its bytes.
    #[error("an image of a transcript entry is not standard base64 ({0})")]
    NotBase64(String),
    /// A restored entry is not a JSON value.
    #[error("a restored transcript entry is not JSON: {0}")]
    NotJson(String),
}

/// A segment's transcript entries as they are stored: each image of an entry stored once in the
/// session's media, and its base64 text in the entry replaced by a reference to it
/// ([`tollgate_protocol::media`]). Entries without images are kept as they are.
///
/// # Errors
/// [`MediaFailure`]: nothing references an image that was not stored.
pub async fn store_entries(
    store: &dyn Store,
    session_id: &str,
    entries: Vec<Box<RawValue>>,
) -> Result<Vec<Box<RawValue>>, MediaFailure> {
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let found = refs::images_of(entry.get())?;
        if found.is_empty() {
            out.push(entry);
            continue;
        }
        let mut media = Vec::with_capacity(found.len());
        for image in &found {
            let data = STANDARD.decode(&image.data).map_err(|e| MediaFailure::NotBase64(e.to_string()))?;
            // Put back as this module encodes it, or the entry would not come back byte for byte.
            if STANDARD.encode(&data) != image.data {
                return Err(MediaFailure::NotBase64("it does not encode back to the same text".into()));
            }
            media.push(NewMedia { media_type: image.media_type.clone(), data });
        }
        let digests = store.media().put_media(session_id, &media).await?;
        let pairs: Vec<(&str, &str)> = found
            .iter()
            .zip(&digests)
            .map(|(image, digest)| (image.data.as_str(), digest.as_str()))
            .collect();
        let stored = refs::to_references(entry.get(), &pairs)?.into_owned();
        out.push(RawValue::from_string(stored).map_err(|e| MediaFailure::NotJson(e.to_string()))?);
    }
    Ok(out)
}

/// The session's images in base64, read from the store once each.
struct Loaded<'a> {
    store: &'a dyn Store,
    session_id: &'a str,
    data: HashMap<String, String>,
}

impl<'a> Loaded<'a> {
    fn new(store: &'a dyn Store, session_id: &'a str) -> Self {
        Loaded { store, session_id, data: HashMap::new() }
    }

    /// Loads `digests` not loaded yet.
    async fn load(&mut self, digests: Vec<String>) -> Result<(), MediaFailure> {
        for digest in digests {
            if self.data.contains_key(&digest) {
                continue;
            }
            let Some(media) = self.store.media().media(self.session_id, &digest).await? else {
                return Err(refs::MediaError::Missing { digest }.into());
            };
            self.data.insert(digest, STANDARD.encode(&media.data));
        }
        Ok(())
    }

    fn get(&self, digest: &str) -> Option<String> {
        self.data.get(digest).cloned()
    }
}

/// Puts the images of a stored transcript back into its entries, byte for byte as the CLI wrote
/// them, before it is written to a resume file.
///
/// # Errors
/// [`MediaFailure`]: a reference the store has no image for, a malformed one, a failed read.
pub async fn restore_transcript(
    store: &dyn Store,
    session_id: &str,
    transcript: &mut ResumeTranscript,
) -> Result<(), MediaFailure> {
    let mut loaded = Loaded::new(store, session_id);
    for chunk in &mut transcript.chunks {
        if refs::has_references(chunk) {
            loaded.load(refs::references(chunk)?).await?;
            *chunk = refs::restore(chunk, |digest| loaded.get(digest))?;
        }
    }
    for entry in &mut transcript.entries {
        if refs::has_references(entry.get()) {
            loaded.load(refs::references(entry.get())?).await?;
            let restored = refs::restore(entry.get(), |digest| loaded.get(digest))?;
            *entry = RawValue::from_string(restored).map_err(|e| MediaFailure::NotJson(e.to_string()))?;
        }
    }
    Ok(())
}

/// Loads the bytes of `images` (a record's, or an inline write's) for a replay.
///
/// # Errors
/// [`MediaFailure`]: an image the store does not have, a failed read.
pub async fn load_images(
    store: &dyn Store,
    session_id: &str,
    images: &mut [RecordedImage],
) -> Result<(), MediaFailure> {
    let mut loaded = Loaded::new(store, session_id);
    loaded.load(images.iter().map(|image| image.reference.digest.clone()).collect()).await?;
    for image in images {
        image.data = loaded.get(&image.reference.digest);
    }
    Ok(())
}

/// [`load_images`] of a record.
///
/// # Errors
/// As [`load_images`].
pub async fn load_record(
    store: &dyn Store,
    session_id: &str,
    record: &mut ToolCallRecord,
) -> Result<(), MediaFailure> {
    load_images(store, session_id, &mut record.images).await
}

/// The prompt of a new turn: one prompt without images as a plain string; otherwise, for each
/// prompt in order, its text as a text block and then its images as base64 image blocks, in the
/// order the message gave them.
///
/// # Errors
/// [`MediaFailure`]: an image the store does not have, a failed read.
pub async fn user_prompt(
    store: &dyn Store,
    session_id: &str,
    prompts: &[Prompt],
) -> Result<UserPrompt, MediaFailure> {
    let mut loaded = Loaded::new(store, session_id);
    loaded.load(prompts.iter().flat_map(|p| &p.images).map(|image| image.digest.clone()).collect()).await?;
    Ok(prompt_of(prompts, |digest| loaded.get(digest)))
}

/// [`user_prompt`] with the images' base64 from `data_of`: one prompt text alone as a plain
/// string, as a text-only client sends it; otherwise one text block per prompt.
fn prompt_of(prompts: &[Prompt], data_of: impl Fn(&str) -> Option<String>) -> UserPrompt {
    if let [one] = prompts
        && one.images.is_empty()
    {
        return UserPrompt::text(one.text.clone());
    }
    let mut blocks = Vec::new();
    for prompt in prompts {
        blocks.push(serde_json::json!({"type": "text", "text": prompt.text}));
        for image in &prompt.images {
            blocks.push(serde_json::json!({"type": "image", "source": {
                "type": "base64", "media_type": image.media_type, "data": data_of(&image.digest),
            }}));
        }
    }
    UserPrompt::content(serde_json::Value::Array(blocks))
}

/// Stores the images of a tool's output for `session_id` and returns their references, in order.
///
/// # Errors
/// The store failed.
pub async fn store_output_images(
    store: &dyn Store,
    session_id: &str,
    images: Vec<NewMedia>,
) -> Result<Vec<MediaRef>, StoreError> {
    if images.is_empty() {
        return Ok(Vec::new());
    }
    store.media().put_media(session_id, &images).await?;
    Ok(references(&images))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real 1×1 PNG.
    const PNG: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00,
        0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53, 0xde, 0x00,
        0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0x00, 0x00, 0x03, 0x01,
        0x01, 0x00, 0xc9, 0xfe, 0x92, 0xef, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60,
        0x82,
    ];

    #[test]
    fn one_prompt_is_a_plain_string_and_otherwise_each_text_is_a_block_followed_by_its_images() {
        let text = |t: &str| Prompt { text: t.into(), images: Vec::new() };
        assert_eq!(prompt_of(&[text("a")], |_| None).message.content, serde_json::json!("a"));
        assert_eq!(
            prompt_of(&[text("a"), text("b")], |_| None).message.content,
            serde_json::json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])
        );
        let chart = MediaRef { digest: "sha256:c".into(), media_type: "image/png".into() };
        let with_image = Prompt { text: "see".into(), images: vec![chart] };
        assert_eq!(
            prompt_of(&[with_image, text("b")], |d| (d == "sha256:c").then(|| "aGk=".to_owned()))
                .message
                .content,
            serde_json::json!([
                {"type": "text", "text": "see"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}},
                {"type": "text", "text": "b"},
            ])
        );
    }

    #[test]
    fn a_message_s_images_are_decoded_and_checked_and_each_refusal_names_its_field() {
        let png = STANDARD.encode(PNG);
        let ok = check_message_images([("image/png", png.as_str())].into_iter()).unwrap();
        assert_eq!(ok, [NewMedia { media_type: "image/png".into(), data: PNG.to_vec() }]);
        assert_eq!(references(&ok)[0].digest, tollgate_store::media::digest_of(PNG));

        let bmp = check_message_images([("image/bmp", png.as_str())].into_iter()).unwrap_err();
        assert_eq!(bmp.field(), "images[0].source.media_type");
        let garbled = check_message_images([("image/png", png.as_str()), ("image/png", "!!")].into_iter());
        let garbled = garbled.unwrap_err();
        assert!(matches!(garbled, ImageError::NotBase64 { index: 1, .. }), "{garbled}");
        assert_eq!(garbled.field(), "images[1].source.data");
        let jpeg = check_message_images([("image/jpeg", png.as_str())].into_iter()).unwrap_err();
        assert!(matches!(jpeg, ImageError::WrongType { .. }), "{jpeg}");
        let many: Vec<(&str, &str)> = (0..9).map(|_| ("image/png", png.as_str())).collect();
        assert_eq!(check_message_images(many.into_iter()), Err(ImageError::TooMany { count: 9 }));
        let mut big = PNG.to_vec();
        big.resize(MAX_MESSAGE_IMAGE_BYTES + 1, 0);
        let big = STANDARD.encode(&big);
        let large = check_message_images([("image/png", big.as_str())].into_iter()).unwrap_err();
        assert!(matches!(large, ImageError::TooLarge { .. }), "{large}");
        assert_eq!(large.field(), "images");
    }
}
