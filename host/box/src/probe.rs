//! Whether boxes can be made on this machine: a Worker asks [`check`] before it takes any work
//! and refuses to start when it cannot box its agents, saying why and how to fix it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::config::BoxUser;

/// Why boxes cannot be made here; its text says how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// No `bwrap` on the `PATH` (or at the path given).
    #[error(
        "bubblewrap (`bwrap`) was not found{}: install it (Debian: `apt-get install bubblewrap`; this project's \
         scripts/setup.sh does) or pass --bwrap PATH",
        at.as_ref().map(|p| format!(" at {}", p.display())).unwrap_or_default()
    )]
    NoBwrap {
        /// Where it was looked for, when a path was given.
        at: Option<PathBuf>,
    },
    /// The init program is missing.
    #[error("the box init {} is missing: it is built beside the tollgate binary (`cargo build -p tollgate`)", .0.display())]
    NoInit(PathBuf),
    /// A trial box failed.
    #[error(
        "a trial box failed ({detail}): boxes need unprivileged user namespaces \
         (`sysctl kernel.unprivileged_userns_clone=1`, `sysctl user.max_user_namespaces=15000`; \
         in a container, allow the `unshare` and `clone` of user namespaces) and bwrap 0.8 or later"
    )]
    Trial {
        /// What bwrap said.
        detail: String,
    },
}

/// Finds `bwrap`: `explicit` when given, else the first on `PATH`.
///
/// # Errors
///
/// [`ProbeError::NoBwrap`].
pub fn find_bwrap(explicit: Option<&Path>) -> Result<PathBuf, ProbeError> {
    if let Some(path) = explicit {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(ProbeError::NoBwrap { at: Some(path.into()) })
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join("bwrap"))
        .find(|candidate| candidate.is_file())
        .ok_or(ProbeError::NoBwrap { at: None })
}

/// Runs a trial box (`bwrap` with every namespace, as `user`, running `true`), and checks that
/// `init` exists.
///
/// # Errors
///
/// What is missing, with how to fix it.
pub fn check(bwrap: &Path, init: &Path, user: BoxUser) -> Result<(), ProbeError> {
    if !init.is_file() {
        return Err(ProbeError::NoInit(init.to_path_buf()));
    }
    let mut command = Command::new(bwrap);
    command
        .args(["--unshare-all", "--unshare-user", "--die-with-parent", "--disable-userns"])
        .args(["--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib"])
        .args(["--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "--", "/usr/bin/true"])
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let BoxUser::Uid { uid, gid } = user {
        use std::os::unix::process::CommandExt;
        command.uid(uid).gid(gid);
    }
    let output = command
        .output()
        .map_err(|err| ProbeError::Trial { detail: format!("{}: {err}", bwrap.display()) })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    Err(ProbeError::Trial { detail: format!("{}: {stderr}", output.status) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_bwrap_or_init_is_named_with_the_fix() {
        let err = find_bwrap(Some(Path::new("/nowhere/bwrap"))).unwrap_err();
        assert!(
            err.to_string().contains("at /nowhere/bwrap")
                && err.to_string().contains("apt-get install bubblewrap")
        );
        let err =
            check(Path::new("/usr/bin/true"), Path::new("/nowhere/init"), BoxUser::Namespace).unwrap_err();
        assert!(matches!(err, ProbeError::NoInit(_)), "{err}");
    }

    #[test]
    fn a_bwrap_that_fails_its_trial_says_what_it_printed() {
        let err =
            check(Path::new("/usr/bin/false"), Path::new("/usr/bin/true"), BoxUser::Namespace).unwrap_err();
        assert!(err.to_string().contains("unprivileged user namespaces"), "{err}");
    }
}
