//! A session's workspace: the CLI's default working folder, `<root>/<session id>`, private to the
//! Worker's user (0700) and outside the agent directory and the store.
//!
//! Before workspaces the CLI ran in the agent directory, where the default SQLite store lives, so
//! a `Bash` tool could read other sessions' rows at `./tollgate.db`. [`check_root`] refuses a root
//! inside the agent directory or one that holds the store; [`prepare`] makes the session's folder.
//!
//! Session ids may hold `/`, `.`, `:` and `@`; [`folder_name`] escapes every character but
//! letters, digits, `-` and `_` as `%XX`, so an id is one folder name and never `..`.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The folder name of `session_id`. See the module docs.
pub fn folder_name(session_id: &str) -> String {
    let mut out = String::with_capacity(session_id.len());
    for byte in session_id.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Refuses a workspace root inside the agent directory, or one that holds the SQLite store.
///
/// # Errors
/// The reason, naming both paths.
pub fn check_root(root: &Path, agent_dir: &Path, sqlite_file: Option<&Path>) -> Result<(), String> {
    let resolve = |path: &Path| resolve_lexically(path);
    let root = resolve(root);
    let agent = resolve(agent_dir);
    if root.starts_with(&agent) {
        return Err(format!(
            "the workspace root {} is inside the agent directory {}; the agent's commands must not reach \
             it (choose another --workspace-root)",
            root.display(),
            agent.display()
        ));
    }
    if let Some(file) = sqlite_file {
        let file = resolve(file);
        if file.starts_with(&root) {
            return Err(format!(
                "the workspace root {} holds the store {}; the agent's commands must not reach it (choose \
                 another --workspace-root)",
                root.display(),
                file.display()
            ));
        }
    }
    Ok(())
}

/// The path with its existing part canonical (symlinks resolved) and the rest appended.
fn resolve_lexically(path: &Path) -> PathBuf {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// Makes `root` (mode 0700) if it is missing and checks that it is a directory of this user that
/// only it may write.
///
/// # Errors
/// A root that cannot be made, or one that another user owns or may write.
pub fn prepare_root(root: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(|e| format!("the workspace folder {} cannot be made: {e}", root.display()))?;
    // SAFETY: getuid(2) cannot fail and has no memory effects.
    let uid = unsafe { libc::getuid() };
    let meta = std::fs::symlink_metadata(root).map_err(|e| format!("{}: {e}", root.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(format!(
            "the workspace root {} is not a directory of this user that only it may write (owner uid {}, \
             mode {:o}); choose another --workspace-root",
            root.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Makes `<root>/<folder_name(session_id)>` (and `root`) with mode 0700 and returns it. It
/// belongs to `owner` (the user of a root Worker's boxes, who copies it into and out of the box)
/// or else to this user; a root Worker gives a workspace it finds another's (the session ran boxed
/// before, or on a Worker with another box user) to the one it needs, everything in it included.
///
/// # Errors
/// A folder that cannot be made, or a root or workspace that another user owns or may write
/// (for a Worker that is not root).
pub fn prepare(root: &Path, session_id: &str, owner: Option<(u32, u32)>) -> Result<PathBuf, String> {
    prepare_root(root)?;
    let make = |dir: &Path| {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("the workspace folder {} cannot be made: {e}", dir.display()))
    };
    // SAFETY: getuid(2) cannot fail and has no memory effects.
    let uid = unsafe { libc::getuid() };
    let dir = root.join(folder_name(session_id));
    make(&dir)?;
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // SAFETY: getgid(2) cannot fail and has no memory effects.
    let (want_uid, want_gid) = owner.unwrap_or((uid, unsafe { libc::getgid() }));
    if !meta.is_dir() || (meta.uid() != want_uid && uid != 0) {
        return Err(format!("the workspace {} is not a directory of this user", dir.display()));
    }
    if meta.uid() != want_uid {
        tollgate_box::layout::give_tree(&dir, Some((want_uid, want_gid)))
            .map_err(|e| format!("the workspace {} cannot be given to uid {want_uid}: {e}", dir.display()))?;
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("the workspace {} cannot be made private: {e}", dir.display()))?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_is_one_folder_name_and_distinct_ids_stay_distinct() {
        assert_eq!(folder_name("s-1_a"), "s-1_a");
        assert_eq!(folder_name("../x"), "%2E%2E%2Fx");
        assert_eq!(folder_name("a/b"), "a%2Fb");
        assert_ne!(folder_name("a/b"), folder_name("a%2Fb"));
        assert_eq!(folder_name("u@h:1"), "u%40h%3A1");
    }

    #[test]
    fn the_workspace_is_private_and_made_again_when_it_exists() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("workspaces");
        let ws = prepare(&root, "s/1", None).unwrap();
        assert_eq!(ws, root.join("s%2F1"));
        assert_eq!(std::fs::metadata(&ws).unwrap().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o777, 0o700);
        std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(prepare(&root, "s/1", None).unwrap(), ws);
        assert_eq!(std::fs::metadata(&ws).unwrap().mode() & 0o777, 0o700);
    }

    #[test]
    fn a_root_worker_gives_a_workspace_and_its_files_to_whoever_it_runs_it_as() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("workspaces");
        let ws = prepare(&root, "s", Some((65534, 65534))).unwrap();
        std::fs::write(ws.join("note"), "x").unwrap();
        let ws = prepare(&root, "s", Some((65534, 65534))).unwrap();
        assert_eq!(std::fs::metadata(&ws).unwrap().uid(), 65534);
        let ws = prepare(&root, "s", None).unwrap();
        assert_eq!(std::fs::metadata(&ws).unwrap().uid(), 0, "back to the Worker, unboxed");
        assert_eq!(std::fs::metadata(ws.join("note")).unwrap().uid(), 0, "its files go with it");
        let ws = prepare(&root, "s", Some((65534, 65534))).unwrap();
        assert_eq!(std::fs::metadata(ws.join("note")).unwrap().uid(), 65534);
    }

    #[test]
    fn a_root_others_may_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = prepare(dir.path(), "s", None).unwrap_err();
        assert!(error.contains("only it may write"), "{error}");
    }

    #[test]
    fn a_root_inside_the_agent_directory_or_holding_the_store_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("agent");
        std::fs::create_dir(&agent).unwrap();
        let inside = check_root(&agent.join("ws"), &agent, None).unwrap_err();
        assert!(inside.contains("inside the agent directory"), "{inside}");
        assert!(check_root(&agent, &agent, None).is_err());
        let store = dir.path().join("tollgate.db");
        let holds = check_root(dir.path(), &agent, Some(&store));
        assert!(holds.unwrap_err().contains("holds the store"));
        assert!(check_root(&dir.path().join("ws"), &agent, Some(&store)).is_ok());
    }
}
