//! How a segment starts the CLI: the argv, the environment, and the per-segment scratch
//! directories with the resume file (PROTOCOL.md §1, §12, §18 steps 1–2).
//!
//! Read [`argv`] and [`ScratchDirs`]. [`argv`] is pure; [`ScratchDirs::create`] makes
//! `<root>/tollgate-segment-XXXXXX/{home,config,tmp}` and, for a resume, writes the stored entries
//! to `config/projects/<key(realpath cwd)>/<session>.jsonl`, one compact line each, byte for byte
//! as the CLI mirrored them ([`write_resume_file`]). Dropping [`ScratchDirs`] removes everything.
//!
//! ```
//! use tollgate_claude::launch::{ArgvOptions, argv};
//!
//! let args = argv(&ArgvOptions { server_name: "tools", resume: Some("s-1"), ..ArgvOptions::default() });
//! assert!(args.contains(&"--await-initialize".to_owned()));
//! assert!(args.contains(&"--resume=s-1".to_owned()));
//! assert!(args.contains(&r#"{"mcpServers":{"tools":{"type":"sdk","name":"tools"}}}"#.to_owned()));
//! ```
//!
//! # Caveats
//!
//! - `last-prompt` entries are left out of the resume file: each names the leaf a resume continues
//!   from, and one from an earlier segment can make a later resume skip what came after it (the
//!   TypeScript adapter drops them for that reason). The CLI writes a fresh one.
//! - The project key uses `realpath(cwd)`; a `cwd` that does not exist fails the setup.

use std::io::Write;
use std::path::{Path, PathBuf};

use tollgate_protocol::TranscriptEntry;

use crate::error::SegmentError;
use crate::project_key::project_key;

/// What [`argv`] needs. Defaults: server `tools`, no permission mode, no resume, `--setting-sources=`
/// (no settings files), no extra arguments.
#[derive(Debug, Clone)]
pub struct ArgvOptions<'a> {
    /// The sdk MCP server's name.
    pub server_name: &'a str,
    /// `--permission-mode`.
    pub permission_mode: Option<&'a str>,
    /// `--resume=<session>`.
    pub resume: Option<&'a str>,
    /// `--setting-sources=<a,b>`; `Some(&[])` reads no settings files, `None` leaves the flag out.
    pub setting_sources: Option<&'a [String]>,
    /// Appended as given.
    pub extra: &'a [String],
}

impl Default for ArgvOptions<'_> {
    fn default() -> Self {
        ArgvOptions {
            server_name: "tools",
            permission_mode: None,
            resume: None,
            setting_sources: Some(&[]),
            extra: &[],
        }
    }
}

/// The CLI's arguments (PROTOCOL.md §1.1).
pub fn argv(options: &ArgvOptions<'_>) -> Vec<String> {
    // Written by hand to keep PROTOCOL.md §1.1's key order (`serde_json` would sort the keys).
    let name = serde_json::Value::from(options.server_name).to_string();
    let server = format!(r#"{{"mcpServers":{{{name}:{{"type":"sdk","name":{name}}}}}}}"#);
    let mut args: Vec<String> = [
        "--output-format",
        "stream-json",
        "--verbose",
        "--input-format",
        "stream-json",
        "--permission-prompt-tool=stdio",
        "--mcp-config",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    args.push(server);
    args.extend(["--include-partial-messages", "--session-mirror", "--await-initialize"].map(str::to_owned));
    if let Some(sources) = options.setting_sources {
        args.push(format!("--setting-sources={}", sources.join(",")));
    }
    if let Some(mode) = options.permission_mode {
        args.push(format!("--permission-mode={mode}"));
    }
    if let Some(session) = options.resume {
        args.push(format!("--resume={session}"));
    }
    args.extend(options.extra.iter().cloned());
    args
}

/// A segment's private directories: `home`, `config` (`CLAUDE_CONFIG_DIR`) and `tmp` (`TMPDIR`).
/// Removed on drop.
#[derive(Debug)]
pub struct ScratchDirs {
    root: tempfile::TempDir,
}

impl ScratchDirs {
    /// Makes the directories under `parent` (the system temp dir when `None`).
    ///
    /// # Errors
    ///
    /// [`SegmentError::Setup`] when a directory cannot be made.
    pub fn create(parent: Option<&Path>) -> Result<ScratchDirs, SegmentError> {
        let parent = parent.map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
        let root = tempfile::Builder::new()
            .prefix("tollgate-segment-")
            .tempdir_in(&parent)
            .map_err(|source| SegmentError::Setup { path: parent.clone(), source })?;
        let dirs = ScratchDirs { root };
        for dir in [dirs.home(), dirs.config(), dirs.tmp()] {
            std::fs::create_dir(&dir).map_err(|source| SegmentError::Setup { path: dir.clone(), source })?;
        }
        Ok(dirs)
    }

    /// The segment's root directory.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// `HOME`.
    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// `CLAUDE_CONFIG_DIR`.
    pub fn config(&self) -> PathBuf {
        self.root.path().join("config")
    }

    /// `TMPDIR`.
    pub fn tmp(&self) -> PathBuf {
        self.root.path().join("tmp")
    }
}

/// Writes `entries` to `<config>/projects/<key(realpath cwd)>/<session>.jsonl` and returns the
/// file's path. See the module docs for what is left out.
///
/// # Errors
///
/// [`SegmentError::Setup`] when `cwd` cannot be resolved or the file cannot be written.
pub fn write_resume_file(
    config: &Path,
    cwd: &Path,
    session_id: &str,
    entries: &[TranscriptEntry],
) -> Result<PathBuf, SegmentError> {
    let setup = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SegmentError::Setup { path, source }
    };
    let real = std::fs::canonicalize(cwd).map_err(setup(cwd))?;
    let dir = config.join("projects").join(project_key(&real.to_string_lossy()));
    std::fs::create_dir_all(&dir).map_err(setup(&dir))?;
    let file = dir.join(format!("{session_id}.jsonl"));
    let mut text = String::new();
    for entry in entries {
        if entry.entry_type().as_deref() == Some("last-prompt") {
            continue;
        }
        if !entry.is_compact() {
            tracing::warn!(uuid = ?entry.uuid(), "a stored transcript entry is not compact JSON; the CLI may re-run a finished call");
        }
        text.push_str(entry.as_str());
        text.push('\n');
    }
    let mut out = std::fs::File::create(&file).map_err(setup(&file))?;
    out.write_all(text.as_bytes()).map_err(setup(&file))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_segment_has_the_sdk_flags_and_no_resume() {
        let args = argv(&ArgvOptions::default());
        for flag in [
            "--permission-prompt-tool=stdio",
            "--session-mirror",
            "--include-partial-messages",
            "--setting-sources=",
        ] {
            assert!(args.contains(&flag.to_owned()), "{flag} missing from {args:?}");
        }
        assert!(!args.iter().any(|a| a.starts_with("--resume")));
        let mode = argv(&ArgvOptions { permission_mode: Some("dontAsk"), ..ArgvOptions::default() });
        assert!(mode.contains(&"--permission-mode=dontAsk".to_owned()));
    }

    #[test]
    fn the_resume_file_holds_the_entries_byte_for_byte_without_last_prompt() {
        let dirs = ScratchDirs::create(None).unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let entries = [
            r#"{"type":"user","uuid":"u1","message":{"role":"user","content":"caf\u00e9"}}"#,
            r#"{"type":"last-prompt","lastPrompt":"x","leafUuid":"u1"}"#,
            r#"{"type":"assistant","uuid":"a1"}"#,
        ]
        .map(|text| TranscriptEntry::from_raw(text).unwrap());
        let file = write_resume_file(&dirs.config(), cwd.path(), "s-1", &entries).unwrap();
        let key = project_key(&std::fs::canonicalize(cwd.path()).unwrap().to_string_lossy());
        assert_eq!(file, dirs.config().join("projects").join(key).join("s-1.jsonl"));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            format!("{}\n{}\n", entries[0].as_str(), entries[2].as_str())
        );
        let root = dirs.root().to_path_buf();
        drop(dirs);
        assert!(!root.exists());
    }
}
