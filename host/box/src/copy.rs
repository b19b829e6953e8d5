//! Copies a directory tree into another, as the init moves a workspace into and out of its box.
//!
//! Regular files (with their permission bits), directories and symbolic links are copied; other
//! entries (FIFOs, sockets, devices) are left behind. Nothing is followed while copying: a link is
//! copied as a link or not at all. [`Direction::OutOfBox`] is stricter than
//! [`Direction::IntoBox`]:
//!
//! - only a link that stays inside the tree is copied (`a -> b/c`, `b/d -> ../a`); one with an
//!   absolute target or one that climbs out (`x -> /etc/passwd`, `y -> ../..`) is left behind,
//!   because programs on the host that read the folder would follow it;
//! - the Claude Code settings an agent wrote into its workspace (`.claude/settings.json`,
//!   `.claude/settings.local.json`, `.mcp.json`, at any depth) are left behind: what runs inside
//!   the next segment's CLI is the agent's options' business, never the agent's own.
//!
//! Every entry left behind is named in [`CopySummary::left_behind`].
//!
//! Folders already in the destination are merged into; files are created new (`O_EXCL`), so a
//! file already there stops the copy.

use std::fs;
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Which way a copy goes, and so what it leaves behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Into a box: every entry (inside, a link can reach only what the box has).
    IntoBox,
    /// Out of a box: links that point out of the tree and the agent's CLI settings stay behind.
    OutOfBox,
}

/// The files of Claude Code's settings a segment must not carry to the next: they could add
/// hooks, environment, permissions, MCP servers or plugins to the next CLI.
const CLI_SETTINGS: &[&str] = &["settings.json", "settings.local.json"];

/// What a copy did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CopySummary {
    /// Files copied.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Entries not copied, each `path: why`.
    pub left_behind: Vec<String>,
}

/// Why a copy stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The destination ran out of space.
    #[error("no space left for {path} after {bytes} bytes")]
    Full {
        /// The entry being written.
        path: String,
        /// Bytes written until then.
        bytes: u64,
    },
    /// Any other failure.
    #[error("{path}: {source}")]
    Io {
        /// The entry.
        path: String,
        /// The error.
        source: io::Error,
    },
}

/// The deepest directory nesting copied; deeper entries are left behind.
const MAX_DEPTH: usize = 128;

/// Copies the tree under `from` into `to` (made if missing). See the module docs.
///
/// # Errors
///
/// [`CopyError::Full`] when the destination runs out of space, [`CopyError::Io`] otherwise.
pub fn copy_tree(from: &Path, to: &Path, direction: Direction) -> Result<CopySummary, CopyError> {
    let mut summary = CopySummary::default();
    make_dir(to, 0o755, "")?;
    copy_dir(from, to, Path::new(""), direction, &mut summary, 0)?;
    Ok(summary)
}

fn copy_dir(
    from: &Path,
    to: &Path,
    rel: &Path,
    direction: Direction,
    summary: &mut CopySummary,
    depth: usize,
) -> Result<(), CopyError> {
    let entries = fs::read_dir(from).map_err(|source| io_error(rel, source))?;
    for entry in entries {
        let entry = entry.map_err(|source| io_error(rel, source))?;
        let name = entry.file_name();
        let rel = rel.join(&name);
        let source = entry.path();
        let target = to.join(&name);
        let meta = fs::symlink_metadata(&source).map_err(|err| io_error(&rel, err))?;
        let kind = meta.file_type();
        if direction == Direction::OutOfBox && is_cli_setting(&rel) {
            summary
                .left_behind
                .push(format!("{}: Claude Code settings written in the workspace", rel.display()));
            continue;
        }
        if kind.is_dir() {
            if depth >= MAX_DEPTH {
                summary
                    .left_behind
                    .push(format!("{}: nested deeper than {MAX_DEPTH} folders", rel.display()));
                continue;
            }
            make_dir(&target, meta.permissions().mode() & 0o777 | 0o700, &rel.to_string_lossy())?;
            copy_dir(&source, &target, &rel, direction, summary, depth + 1)?;
        } else if kind.is_file() {
            copy_file(&source, &target, meta.permissions().mode() & 0o777, &rel, summary)?;
        } else if kind.is_symlink() {
            let text = fs::read_link(&source).map_err(|err| io_error(&rel, err))?;
            if direction == Direction::OutOfBox && !stays_inside(&rel, &text) {
                summary.left_behind.push(format!(
                    "{} -> {}: points out of the workspace",
                    rel.display(),
                    text.display()
                ));
                continue;
            }
            std::os::unix::fs::symlink(&text, &target)
                .map_err(|err| write_error(&rel, err, summary.bytes))?;
        } else {
            summary.left_behind.push(format!("{}: not a file, folder or link", rel.display()));
        }
    }
    Ok(())
}

fn copy_file(
    source: &Path,
    target: &Path,
    mode: u32,
    rel: &Path,
    summary: &mut CopySummary,
) -> Result<(), CopyError> {
    // `O_NOFOLLOW`: a link raced into place of the file is not read through.
    let mut input = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(source)
        .map_err(|err| io_error(rel, err))?;
    let mut output = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode | 0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(target)
        .map_err(|err| write_error(rel, err, summary.bytes))?;
    let copied = io::copy(&mut input, &mut output).map_err(|err| write_error(rel, err, summary.bytes))?;
    summary.files += 1;
    summary.bytes += copied;
    Ok(())
}

fn make_dir(dir: &Path, mode: u32, rel: &str) -> Result<(), CopyError> {
    use std::os::unix::fs::DirBuilderExt;
    match fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => Ok(()),
        // Merged into a folder that is there already (a config folder the CLI made).
        Err(err)
            if err.kind() == io::ErrorKind::AlreadyExists
                && fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) =>
        {
            Ok(())
        }
        Err(err) => Err(write_error(Path::new(rel), err, 0)),
    }
}

/// Whether `rel` is one of Claude Code's settings files: `.mcp.json`, or
/// `.claude/settings[.local].json`, in any folder.
fn is_cli_setting(rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let parent = rel.parent().and_then(Path::file_name).and_then(|n| n.to_str()).unwrap_or_default();
    name == ".mcp.json" || (parent == ".claude" && CLI_SETTINGS.contains(&name))
}

/// Whether a link at `rel` (relative to the tree's root) with target `text` resolves inside the
/// tree by its text alone.
pub fn stays_inside(rel: &Path, text: &Path) -> bool {
    if text.is_absolute() {
        return false;
    }
    // The link's own folder, as a depth below the root, then the target's components.
    let mut depth = rel.components().count().saturating_sub(1) as isize;
    for component in text.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

fn io_error(rel: &Path, source: io::Error) -> CopyError {
    CopyError::Io { path: display(rel), source }
}

fn write_error(rel: &Path, source: io::Error, bytes: u64) -> CopyError {
    if source.raw_os_error() == Some(libc::ENOSPC) || source.raw_os_error() == Some(libc::EDQUOT) {
        CopyError::Full { path: display(rel), bytes }
    } else {
        CopyError::Io { path: display(rel), source }
    }
}

fn display(rel: &Path) -> String {
    if rel.as_os_str().is_empty() { ".".to_owned() } else { rel.display().to_string() }
}

/// The total size of the regular files under `dir` (links not followed), for a workspace's
/// check against its cap before it is copied in.
pub fn tree_size(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = fs::symlink_metadata(entry.path()) else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_stays_inside_only_when_its_text_never_climbs_above_the_root() {
        let inside = [("a", "b"), ("d/a", "../b"), ("d/e/a", "../../b"), ("a", "./b/../c"), ("d/a", "..")];
        for (rel, text) in inside {
            assert!(stays_inside(Path::new(rel), Path::new(text)), "{rel} -> {text}");
        }
        let outside = [
            ("a", "/etc/passwd"),
            ("a", ".."),
            ("a", "../../../../etc/passwd"),
            ("d/a", "../../x"),
            ("a", "b/../../c"),
        ];
        for (rel, text) in outside {
            assert!(!stays_inside(Path::new(rel), Path::new(text)), "{rel} -> {text}");
        }
    }

    #[test]
    fn files_folders_and_inner_links_are_copied_and_escaping_links_left_behind() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        let dest = to.path().join("out");
        fs::create_dir(from.path().join("src")).unwrap();
        fs::write(from.path().join("src/main.rs"), "fn main() {}").unwrap();
        fs::set_permissions(from.path().join("src/main.rs"), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("src/main.rs", from.path().join("link")).unwrap();
        std::os::unix::fs::symlink("../../../../etc/passwd", from.path().join("src/passwd")).unwrap();
        std::os::unix::fs::symlink("..", from.path().join("up")).unwrap();
        std::os::unix::fs::symlink("/etc", from.path().join("etc")).unwrap();
        let summary = copy_tree(from.path(), &dest, Direction::OutOfBox).unwrap();
        assert_eq!((summary.files, summary.bytes), (1, 12));
        assert_eq!(fs::read_to_string(dest.join("link")).unwrap(), "fn main() {}");
        assert_eq!(fs::metadata(dest.join("src/main.rs")).unwrap().permissions().mode() & 0o777, 0o755);
        let mut left = summary.left_behind.clone();
        left.sort();
        assert_eq!(
            left,
            [
                "etc -> /etc: points out of the workspace",
                "src/passwd -> ../../../../etc/passwd: points out of the workspace",
                "up -> ..: points out of the workspace",
            ]
        );
        for gone in ["etc", "up", "src/passwd"] {
            assert!(fs::symlink_metadata(dest.join(gone)).is_err(), "{gone} was copied");
        }
        let all = copy_tree(from.path(), &to.path().join("all"), Direction::IntoBox).unwrap();
        assert!(all.left_behind.is_empty(), "{:?}", all.left_behind);
        assert_eq!(fs::read_link(to.path().join("all/etc")).unwrap(), Path::new("/etc"));
    }

    #[test]
    fn the_cli_settings_an_agent_wrote_stay_in_the_box_and_its_other_files_come_out() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        for file in [
            ".claude/settings.json",
            ".claude/settings.local.json",
            ".mcp.json",
            "sub/.mcp.json",
            "sub/.claude/settings.json",
        ] {
            let path = from.path().join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, "{}").unwrap();
        }
        for kept in [".claude/agents/a.md", "CLAUDE.md", "settings.json", "notes/.claude.md"] {
            let path = from.path().join(kept);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, "x").unwrap();
        }
        let summary = copy_tree(from.path(), &to.path().join("out"), Direction::OutOfBox).unwrap();
        assert_eq!(summary.left_behind.len(), 5, "{:?}", summary.left_behind);
        assert!(
            summary.left_behind.iter().all(|l| l.ends_with("Claude Code settings written in the workspace"))
        );
        assert_eq!(summary.files, 4);
        assert!(!to.path().join("out/.claude/settings.json").exists());
        assert!(to.path().join("out/.claude/agents/a.md").exists());
        let into = copy_tree(from.path(), &to.path().join("in"), Direction::IntoBox).unwrap();
        assert_eq!(into.files, 9, "into a box everything goes");
    }

    #[test]
    fn fifos_are_left_behind_by_name() {
        let from = tempfile::tempdir().unwrap();
        let to = tempfile::tempdir().unwrap();
        let fifo = std::ffi::CString::new(from.path().join("pipe").to_string_lossy().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let summary = copy_tree(from.path(), to.path(), Direction::IntoBox).unwrap();
        assert_eq!(summary.left_behind, ["pipe: not a file, folder or link"]);
    }
}
