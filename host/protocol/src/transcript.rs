//! Transcript entries, byte-exact, and the `transcript_mirror` frame that carries them.
//!
//! Read [`TranscriptEntry`] first. The CLI decides whether a deferred call was already answered by
//! a raw substring search (`"tool_use_id":"<id>"`) over the compact JSON lines of its transcript
//! file (docs/PROTOCOL.md, "transcript_mirror"): an entry re-serialized with other spacing or key
//! order made a later resume run a finished write again. So an entry is held as the exact bytes the
//! CLI sent and is never re-serialized: store [`TranscriptEntry::as_str`], write it back to a
//! resume file as one line, rebuild it with [`TranscriptEntry::from_raw`].
//!
//! This module does not own the store, the resume directory or the project-key rule; it only
//! reads the few fields the host needs ([`TranscriptEntry::uuid`], [`TranscriptEntry::entry_type`]).
//!
//! ```
//! use tollgate_protocol::{Frame, parse_line};
//!
//! let line = r#"{"type":"transcript_mirror","filePath":"/c/projects/-p/s1.jsonl","entries":[{"type":"user","uuid":"u-1","message":{"role":"user","content":"hi"}}]}"#;
//! let Frame::TranscriptMirror(mirror) = parse_line(line)? else { unreachable!() };
//! let entry = &mirror.entries[0];
//! assert_eq!(entry.as_str(), r#"{"type":"user","uuid":"u-1","message":{"role":"user","content":"hi"}}"#);
//! assert_eq!(entry.uuid().as_deref(), Some("u-1"));
//! assert_eq!(mirror.session_id(), Some("s1"));
//! # Ok::<(), tollgate_protocol::ProtocolError>(())
//! ```
//!
//! # Caveats
//!
//! - Byte-exact means exactly what arrived. The CLI sends compact JSON (JSON.stringify form);
//!   entries parsed from a differently spaced line keep that spacing. Use
//!   [`TranscriptEntry::is_compact`] to check before writing a resume file.
//! - Entries whose `type` starts with `api-request` never appear in the mirror; metadata entries
//!   (`last-prompt`, `cost-state`, …) have no `uuid`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::ProtocolError;

/// `{"type":"transcript_mirror","filePath":…,"entries":[…]}`: entries the CLI just wrote to
/// its local transcript file (`--session-mirror`). Needs no answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptMirror {
    /// Absolute path of the local file: `<CLAUDE_CONFIG_DIR>/projects/<key>/<session>.jsonl`,
    /// or `…/<session>/<sub…>.jsonl` for a subagent transcript.
    #[serde(rename = "filePath")]
    pub file_path: String,
    /// The new entries, in file order, byte-exact.
    pub entries: Vec<TranscriptEntry>,
}

impl TranscriptMirror {
    /// The session id from [`TranscriptMirror::file_path`]: the file stem right under the
    /// project folder (`projects/<key>/<session>.jsonl`), or for a subagent transcript the
    /// folder it sits in.
    pub fn session_id(&self) -> Option<&str> {
        let after = self.file_path.rsplit_once("/projects/")?.1;
        let mut parts = after.split('/');
        let _project_key = parts.next()?;
        let first = parts.next()?;
        Some(first.strip_suffix(".jsonl").unwrap_or(first)).filter(|s| !s.is_empty())
    }

    /// True for a subagent transcript (`projects/<key>/<session>/<sub…>.jsonl`), whose entries
    /// do not belong in the main transcript.
    pub fn is_subagent(&self) -> bool {
        self.file_path.rsplit_once("/projects/").is_some_and(|(_, after)| after.split('/').count() > 2)
    }

    /// The subagent a subagent transcript belongs to: `<id>` of `…/<session>/subagents/agent-<id>.jsonl`
    /// (the `agent_id` its hook inputs carry), or the file stem of another subagent file; `None`
    /// for the main transcript.
    pub fn subagent_id(&self) -> Option<&str> {
        if !self.is_subagent() {
            return None;
        }
        let file = self.file_path.rsplit('/').next()?;
        let stem = file.strip_suffix(".jsonl").unwrap_or(file);
        Some(stem.strip_prefix("agent-").unwrap_or(stem)).filter(|id| !id.is_empty())
    }
}

/// One transcript entry, held as the exact JSON text received.
///
/// Equality compares the bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TranscriptEntry(Box<RawValue>);

impl PartialEq for TranscriptEntry {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for TranscriptEntry {}

impl From<Box<RawValue>> for TranscriptEntry {
    /// An entry from a value already parsed (a [`RawValue`] always holds one JSON value): no
    /// second parse, the bytes as they are.
    fn from(value: Box<RawValue>) -> Self {
        TranscriptEntry(value)
    }
}

impl TranscriptEntry {
    /// Rebuild an entry from stored text. The text must be one JSON value; surrounding
    /// whitespace is dropped, everything else is kept byte for byte.
    pub fn from_raw(text: impl Into<String>) -> Result<Self, ProtocolError> {
        RawValue::from_string(text.into())
            .map(TranscriptEntry)
            .map_err(|source| ProtocolError::InvalidEntry { source })
    }

    /// The entry's JSON text, exactly as received. Write it as one line of a resume file.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The raw value, for embedding in other serialized structures unchanged.
    pub fn as_raw(&self) -> &RawValue {
        &self.0
    }

    /// The entry's `uuid`: present on `user`, `assistant`, `attachment` and `system` entries,
    /// absent on metadata entries. The store keys the transcript by it.
    pub fn uuid(&self) -> Option<String> {
        entry_uuid(self.as_str())
    }

    /// The entry's `type` (`"user"`, `"assistant"`, `"attachment"`, `"last-prompt"`, …).
    pub fn entry_type(&self) -> Option<String> {
        peek(self.as_str()).and_then(|p| p.entry_type.map(Cow::into_owned))
    }

    /// The entry's `parentUuid`, if it has a non-null one.
    pub fn parent_uuid(&self) -> Option<String> {
        peek(self.as_str()).and_then(|p| p.parent_uuid.map(Cow::into_owned))
    }

    /// True when the text is in the compact form the CLI writes: re-serializing it gives the
    /// same bytes apart from key order (no whitespace between tokens).
    pub fn is_compact(&self) -> bool {
        is_compact(self.as_str())
    }
}

/// Whether JSON text has no whitespace between tokens. Strings may hold spaces, so the walk
/// skips string contents.
fn is_compact(text: &str) -> bool {
    let mut in_string = false;
    let mut escaped = false;
    for b in text.bytes() {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if b.is_ascii_whitespace() {
            return false;
        }
    }
    true
}

/// The text of the `.jsonl` file a resumed CLI reads: one compact entry per line, in the order
/// the CLI wrote them, held as blocks of whole lines so that text stored in this form already
/// (a session's materialized transcript) is written out without being parsed again.
///
/// [`ResumeText::push_entries`] is the one rule of what goes in: every entry but `last-prompt`.
/// Each `last-prompt` entry names the leaf a resume continues from, and one from an earlier
/// segment can make a later resume skip what came after it (the TypeScript adapter drops them
/// for that reason); the CLI writes a fresh one.
///
/// ```
/// use tollgate_protocol::transcript::ResumeText;
///
/// let mut text = ResumeText::from_blocks(vec!["{\"uuid\":\"a\"}\n".to_owned()]);
/// text.push_entries([r#"{"type":"last-prompt","leafUuid":"a"}"#, r#"{"uuid":"b"}"#]);
/// assert_eq!(text.to_string(), "{\"uuid\":\"a\"}\n{\"uuid\":\"b\"}\n");
/// assert_eq!(text.not_compact(), 0);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumeText {
    blocks: Vec<String>,
    not_compact: usize,
}

impl ResumeText {
    /// Text kept in resume form already: each block is whole lines, each ending in `\n`.
    pub fn from_blocks(blocks: Vec<String>) -> Self {
        ResumeText { blocks, not_compact: 0 }
    }

    /// Appends the entries that belong in a resume file, one line each, byte for byte.
    pub fn push_entries<'a>(&mut self, entries: impl IntoIterator<Item = &'a str>) {
        let mut block = String::new();
        for entry in entries {
            if !belongs_in_resume(entry) {
                continue;
            }
            if !is_compact(entry) {
                self.not_compact += 1;
            }
            block.push_str(entry);
            block.push('\n');
        }
        if !block.is_empty() {
            self.blocks.push(block);
        }
    }

    /// The blocks, in order.
    pub fn blocks(&self) -> &[String] {
        &self.blocks
    }

    /// How many pushed entries were not in the compact form the CLI writes (the CLI may then
    /// re-run a finished call: see the module docs).
    pub fn not_compact(&self) -> usize {
        self.not_compact
    }
}

impl std::fmt::Display for ResumeText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.blocks.iter().try_for_each(|block| f.write_str(block))
    }
}

/// Whether a raw entry belongs in a resume file: all but `last-prompt` ([`ResumeText`]).
fn belongs_in_resume(entry: &str) -> bool {
    peek(entry).and_then(|p| p.entry_type).as_deref() != Some("last-prompt")
}

/// The `uuid` of a raw transcript entry (text as stored), or `None` when it has none or is not
/// a JSON object.
pub fn entry_uuid(raw: &str) -> Option<String> {
    peek(raw).and_then(|p| p.uuid.map(Cow::into_owned))
}

#[derive(Deserialize)]
struct EntryPeek<'a> {
    #[serde(borrow, default)]
    uuid: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "type")]
    entry_type: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "parentUuid")]
    parent_uuid: Option<Cow<'a, str>>,
}

fn peek(raw: &str) -> Option<EntryPeek<'_>> {
    if !raw.trim_start().starts_with('{') {
        return None;
    }
    serde_json::from_str(raw).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mirror(path: &str) -> TranscriptMirror {
        TranscriptMirror { file_path: path.into(), entries: vec![] }
    }

    #[test]
    fn entry_keeps_spacing_key_order_and_escapes() {
        let text = r#"{"z":1,"a":"caf\u00e9 \"q\"","uuid":"u"}"#;
        let entry = TranscriptEntry::from_raw(text).unwrap();
        assert_eq!(entry.as_str(), text);
        assert_eq!(serde_json::to_string(&entry).unwrap(), text);
    }

    #[test]
    fn uuid_is_read_from_objects_and_missing_elsewhere() {
        assert_eq!(entry_uuid(r#"{"type":"user","uuid":"abc"}"#).as_deref(), Some("abc"));
        assert_eq!(entry_uuid(r#"{"type":"last-prompt","leafUuid":"abc"}"#), None);
        assert_eq!(entry_uuid(r#"{"uuid":null}"#), None);
        assert_eq!(entry_uuid("[1,2]"), None);
        assert_eq!(entry_uuid("not json"), None);
    }

    #[test]
    fn entry_type_and_parent_uuid_are_read() {
        let entry = TranscriptEntry::from_raw(
            r#"{"parentUuid":"p","type":"attachment","attachment":{"type":"hook_deferred_tool"},"uuid":"u"}"#,
        )
        .unwrap();
        assert_eq!(entry.entry_type().as_deref(), Some("attachment"));
        assert_eq!(entry.parent_uuid().as_deref(), Some("p"));
    }

    #[test]
    fn spaced_entries_are_not_compact_but_spaces_in_strings_are_fine() {
        assert!(TranscriptEntry::from_raw(r#"{"a":"x y, z: \" w"}"#).unwrap().is_compact());
        assert!(!TranscriptEntry::from_raw(r#"{"a": 1}"#).unwrap().is_compact());
    }

    #[test]
    fn from_raw_rejects_text_that_is_not_one_json_value() {
        let err = TranscriptEntry::from_raw(r#"{"a":1} {"b":2}"#).unwrap_err();
        assert!(matches!(err, ProtocolError::InvalidEntry { .. }));
    }

    #[test]
    fn session_id_comes_from_the_file_under_the_project_folder() {
        let m = mirror("/tmp/cfg/projects/-srv-p/221d1b81.jsonl");
        assert_eq!(m.session_id(), Some("221d1b81"));
        assert!(!m.is_subagent());
        let sub = mirror("/tmp/cfg/projects/-srv-p/221d1b81/subagents/agent-1.jsonl");
        assert_eq!(sub.session_id(), Some("221d1b81"));
        assert!(sub.is_subagent());
        assert_eq!(mirror("/elsewhere/x.jsonl").session_id(), None);
        assert_eq!((m.subagent_id(), sub.subagent_id()), (None, Some("1")));
        assert_eq!(mirror("/tmp/cfg/projects/-srv-p/221d1b81/other.jsonl").subagent_id(), Some("other"));
    }
}
