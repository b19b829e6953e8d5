//! Images in transcript entries held by reference: a Claude image block's base64 data is
//! replaced by a reference to the stored bytes, and put back byte for byte before a resume.
//!
//! The CLI writes the bytes of every image it sends to the model into its transcript: a prompt's
//! image blocks, a tool result's image blocks, and copies of them (`toolUseResult`). Stored as is,
//! each image would sit in every entry that holds it. So before an entry is stored, the host
//! stores each image once, by digest, and replaces its base64 text in the entry with a
//! reference; before the entry is written to a resume file, it puts the text back. The restored
//! entry is the received one byte for byte (the CLI finds answered calls by a raw substring
//! search over its file), which [`to_references`] checks before it hands an entry out.
//!
//! Read [`to_references`] first, then [`restore`]. This module does no I/O and computes no
//! digest: the caller decodes, hashes and stores the images [`images_of`] finds, then passes the
//! digests in.
//!
//! # Wire format
//!
//! The base64 string of an image (every occurrence of it in the entry, as a whole JSON string)
//! becomes the object
//!
//! ```json
//! {"tollgate\u005fmedia":"sha256:<64 lowercase hex digits>"}
//! ```
//!
//! with the underscore of its key escaped as `\u005f`. The CLI writes JSON the way
//! `JSON.stringify` does, which never escapes an underscore, so that key cannot come from the CLI:
//! every marker in a stored entry is one the host put there, and a model that writes the same
//! object into a tool's input writes `tollgate_media`, which is left alone. An entry that holds the
//! escaped key already is refused.
//!
//! ```
//! use tollgate_protocol::media::{images_of, restore, to_references};
//!
//! let entry = r#"{"type":"user","message":{"content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"aGk="}}]}}"#;
//! let found = images_of(entry)?;
//! assert_eq!((found[0].media_type.as_str(), found[0].data.as_str()), ("image/png", "aGk="));
//! let digest = "sha256:8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4";
//! let stored = to_references(entry, &[("aGk=", digest)])?;
//! assert!(stored.contains(r#""data":{"tollgate\u005fmedia":"sha256:8f43"#));
//! assert_eq!(restore(&stored, |d| (d == digest).then(|| "aGk=".to_owned()))?, entry);
//! # Ok::<(), tollgate_protocol::media::MediaError>(())
//! ```

use std::borrow::Cow;

use serde_json::Value;

/// What a reference starts with, up to its digest.
const MARKER_START: &str = r#"{"tollgate\u005fmedia":""#;
/// What closes a reference after its digest.
const MARKER_END: &str = "\"}";
/// The escaped key alone: an entry from the CLI never holds it.
const MARKER_KEY: &str = r#""tollgate\u005fmedia""#;

/// One image an entry holds as base64: a Claude image block's source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InlineImage {
    /// Its `media_type`, e.g. `image/png`.
    pub media_type: String,
    /// Its base64 `data`, exactly as written.
    pub data: String,
}

/// Why an entry's images cannot be referenced or restored. Nothing is stored then.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MediaError {
    /// The entry is not JSON.
    #[error("the transcript entry is not JSON: {reason}")]
    NotJson {
        /// The parser's message.
        reason: String,
    },
    /// The entry holds a reference already, so its references could not be told apart.
    #[error("the transcript entry already holds a media reference; it is not stored")]
    HoldsReference,
    /// Replacing the images did not give an entry that restores to the same bytes.
    #[error("the transcript entry's images could not be replaced reversibly: {reason}")]
    NotReversible {
        /// What went wrong.
        reason: String,
    },
    /// A reference names a digest the caller has no bytes for.
    #[error("the transcript references the image {digest}, which is not in the store")]
    Missing {
        /// The digest.
        digest: String,
    },
    /// A reference is cut short or malformed.
    #[error("a media reference in the transcript is malformed near byte {at}")]
    Malformed {
        /// Where it starts.
        at: usize,
    },
}

/// The images `entry` holds as base64 Claude image blocks
/// (`{"type":"image","source":{"type":"base64","media_type":…,"data":…}}`), anywhere in it,
/// each once, in the order first met.
///
/// # Errors
/// [`MediaError::NotJson`].
pub fn images_of(entry: &str) -> Result<Vec<InlineImage>, MediaError> {
    let value: Value =
        serde_json::from_str(entry).map_err(|e| MediaError::NotJson { reason: e.to_string() })?;
    let mut found: Vec<InlineImage> = Vec::new();
    collect(&value, &mut found);
    Ok(found)
}

fn collect(value: &Value, found: &mut Vec<InlineImage>) {
    match value {
        Value::Object(map) => {
            if map.get("type").and_then(Value::as_str) == Some("image")
                && let Some(source) = map.get("source")
                && source.get("type").and_then(Value::as_str) == Some("base64")
                && let (Some(media_type), Some(data)) = (
                    source.get("media_type").and_then(Value::as_str),
                    source.get("data").and_then(Value::as_str),
                )
                && !found.iter().any(|image| image.data == data)
            {
                found.push(InlineImage { media_type: media_type.to_owned(), data: data.to_owned() });
            }
            map.values().for_each(|v| collect(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, found)),
        _ => {}
    }
}

/// Whether `text` (an entry, or lines of them) holds a media reference.
pub fn has_references(text: &str) -> bool {
    text.contains(MARKER_KEY)
}

/// `entry` with every occurrence of each `(data, digest)`'s base64 text, as a whole JSON string,
/// replaced by the reference to `digest` (see the module docs). An image that occurs nowhere is
/// skipped. The result restores to `entry` byte for byte (checked).
///
/// # Errors
/// [`MediaError::HoldsReference`] for an entry that holds a reference already;
/// [`MediaError::NotReversible`] when the result would not be JSON or would not restore to
/// `entry` (a digest that is not `sha256:` and 64 hex digits, a base64 text that is not plain
/// base64, the same digest given for two texts).
pub fn to_references<'a>(entry: &'a str, images: &[(&str, &str)]) -> Result<Cow<'a, str>, MediaError> {
    if entry.contains(MARKER_KEY) {
        return Err(MediaError::HoldsReference);
    }
    let not_reversible = |reason: String| MediaError::NotReversible { reason };
    let mut text = Cow::Borrowed(entry);
    for (data, digest) in images {
        if !is_digest(digest) {
            return Err(not_reversible(format!("{digest:?} is not a sha256 digest")));
        }
        if data.is_empty() || !data.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b)) {
            return Err(not_reversible("the image data is not plain base64".into()));
        }
        let quoted = format!("\"{data}\"");
        let mut out = String::with_capacity(text.len());
        let mut rest: &str = &text;
        let mut replaced = false;
        while let Some(at) = rest.find(&quoted) {
            // A quote that is escaped (an odd run of backslashes before it) is inside a string.
            let before = &rest[..at];
            let escaped = before.bytes().rev().take_while(|b| *b == b'\\').count() % 2 == 1;
            out.push_str(before);
            if escaped {
                out.push_str(&quoted);
            } else {
                out.push_str(MARKER_START);
                out.push_str(digest);
                out.push_str(MARKER_END);
                replaced = true;
            }
            rest = &rest[at + quoted.len()..];
        }
        if replaced {
            out.push_str(rest);
            text = Cow::Owned(out);
        }
    }
    if let Cow::Owned(stored) = &text {
        serde_json::from_str::<serde::de::IgnoredAny>(stored)
            .map_err(|e| not_reversible(format!("the result is not JSON: {e}")))?;
        let lookup =
            |digest: &str| images.iter().find(|(_, d)| *d == digest).map(|(data, _)| (*data).to_owned());
        if restore(stored, lookup)? != entry {
            return Err(not_reversible("the result does not restore to the entry".into()));
        }
    }
    Ok(text)
}

/// The digests `text` references, each once, in the order first met.
///
/// # Errors
/// [`MediaError::Malformed`].
pub fn references(text: &str) -> Result<Vec<String>, MediaError> {
    let mut digests: Vec<String> = Vec::new();
    for (_, digest, _) in markers(text) {
        let digest = digest?;
        if !digests.iter().any(|d| d == digest) {
            digests.push(digest.to_owned());
        }
    }
    Ok(digests)
}

/// `text` with every reference replaced by the base64 text `data_of(digest)` gives, as a JSON
/// string: the entry (or lines of entries) as the CLI wrote it.
///
/// # Errors
/// [`MediaError::Missing`] when `data_of` has nothing for a digest; [`MediaError::Malformed`].
pub fn restore(text: &str, mut data_of: impl FnMut(&str) -> Option<String>) -> Result<String, MediaError> {
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for (start, digest, end) in markers(text) {
        let digest = digest?;
        let data = data_of(digest).ok_or_else(|| MediaError::Missing { digest: digest.to_owned() })?;
        out.push_str(&text[from..start]);
        out.push('"');
        out.push_str(&data);
        out.push('"');
        from = end;
    }
    out.push_str(&text[from..]);
    Ok(out)
}

/// Each reference in `text`: where it starts, its digest, where it ends.
fn markers(text: &str) -> impl Iterator<Item = (usize, Result<&str, MediaError>, usize)> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = at + text[at..].find(MARKER_START)?;
        let digest_at = start + MARKER_START.len();
        let found = text[digest_at..]
            .find(MARKER_END)
            .map(|len| &text[digest_at..digest_at + len])
            .filter(|digest| is_digest(digest));
        match found {
            Some(digest) => {
                let end = digest_at + digest.len() + MARKER_END.len();
                at = end;
                Some((start, Ok(digest), end))
            }
            None => {
                at = text.len();
                Some((start, Err(MediaError::Malformed { at: start }), text.len()))
            }
        }
    })
}

/// `sha256:` and 64 lowercase hex digits.
pub fn is_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn lookup(digest: &str) -> Option<String> {
        match digest {
            A => Some("iVBORw0KGgo=".to_owned()),
            B => Some("R0lGODlh".to_owned()),
            _ => None,
        }
    }

    /// A tool result as the CLI writes it: the Claude block, and the MCP copy in `toolUseResult`.
    const TOOL_RESULT: &str = r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":[{"type":"text","text":"a chart"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}]},"toolUseResult":[{"type":"text","text":"a chart"},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}],"uuid":"u1"}"#;

    #[test]
    fn every_copy_of_an_image_becomes_one_reference_and_comes_back_byte_for_byte() {
        let found = images_of(TOOL_RESULT).unwrap();
        assert_eq!(found, [InlineImage { media_type: "image/png".into(), data: "iVBORw0KGgo=".into() }]);
        let stored = to_references(TOOL_RESULT, &[("iVBORw0KGgo=", A)]).unwrap();
        assert!(!stored.contains("iVBORw0KGgo="), "no copy of the bytes is left: {stored}");
        assert_eq!(stored.matches(A).count(), 2, "{stored}");
        assert!(has_references(&stored));
        assert_eq!(references(&stored).unwrap(), [A]);
        assert_eq!(restore(&stored, lookup).unwrap(), TOOL_RESULT);
        serde_json::from_str::<Value>(&stored).expect("the stored entry is JSON");
    }

    #[test]
    fn the_same_text_inside_another_string_is_left_alone() {
        let entry = r#"{"message":{"content":[{"type":"image","source":{"type":"base64","media_type":"image/gif","data":"R0lGODlh"}},{"type":"text","text":"quoted \"R0lGODlh\" here"}]}}"#;
        let stored = to_references(entry, &[("R0lGODlh", B)]).unwrap();
        assert!(stored.contains(r#"quoted \"R0lGODlh\" here"#), "{stored}");
        assert_eq!(restore(&stored, lookup).unwrap(), entry);
    }

    #[test]
    fn a_model_writing_the_reference_key_is_not_a_reference_and_an_entry_holding_the_escaped_key_is_refused()
    {
        let forged = format!(r#"{{"input":{{"data":{{"tollgate_media":"{A}"}}}}}}"#);
        assert!(!has_references(&forged));
        assert_eq!(restore(&forged, |_| None).unwrap(), forged, "not restored: nothing is looked up");
        let escaped = format!(r#"{{"input":{{"tollgate\u005fmedia":"{A}"}}}}"#);
        assert_eq!(to_references(&escaped, &[]), Err(MediaError::HoldsReference));
    }

    #[test]
    fn an_entry_without_images_is_borrowed_and_a_bad_digest_or_data_is_refused() {
        let entry = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"hi"}]}}"#;
        assert!(images_of(entry).unwrap().is_empty());
        assert!(matches!(to_references(entry, &[]).unwrap(), Cow::Borrowed(_)));
        assert!(matches!(
            to_references(TOOL_RESULT, &[("iVBORw0KGgo=", "sha256:short")]),
            Err(MediaError::NotReversible { .. })
        ));
        assert!(matches!(to_references(TOOL_RESULT, &[("a\"b", A)]), Err(MediaError::NotReversible { .. })));
        assert!(matches!(images_of("not json"), Err(MediaError::NotJson { .. })));
    }

    #[test]
    fn a_missing_image_or_a_cut_reference_fails_the_restore() {
        let stored = to_references(TOOL_RESULT, &[("iVBORw0KGgo=", A)]).unwrap().into_owned();
        assert_eq!(restore(&stored, |_| None), Err(MediaError::Missing { digest: A.into() }));
        let cut = &stored[..stored.find(A).unwrap() + 20];
        assert!(matches!(restore(cut, lookup), Err(MediaError::Malformed { .. })));
        assert!(matches!(references(cut), Err(MediaError::Malformed { .. })));
    }
}
