//! Finding the CLI binary and refusing versions this host was not verified against.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tollgate_claude::{CliBinary, CliError, CliLocator};

use crate::util::dir;

fn script(dir: &Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("claude");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write the script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

#[tokio::test]
async fn an_unsupported_version_is_refused_with_a_message_that_says_what_to_do() {
    let bin = dir();
    let path = script(bin.path(), "echo '9.9.9 (Claude Code)'");
    let err = CliBinary::locate(&CliLocator::at(&path)).await.unwrap_err();
    assert!(matches!(&err, CliError::UnsupportedVersion { found, .. } if found == "9.9.9"), "{err}");
    let message = err.to_string();
    assert!(message.contains("is version 9.9.9, but this host supports only 2.1.328"), "{message}");
    assert!(message.contains("scripts/install-claude-cli.sh"), "{message}");
}

#[tokio::test]
async fn a_binary_that_fails_its_version_check_is_refused() {
    let bin = dir();
    let path = script(bin.path(), "echo 'no such thing' >&2; exit 2");
    let err = CliBinary::locate(&CliLocator::at(&path)).await.unwrap_err();
    assert!(matches!(err, CliError::VersionCheck { .. }), "{err}");
    assert!(err.to_string().contains("no such thing"), "{err}");
}

#[tokio::test]
async fn the_configured_path_wins_and_the_supported_version_is_accepted() {
    let bin = dir();
    let path = script(bin.path(), "echo '2.1.328 (Claude Code)'");
    let cli = CliBinary::locate(&CliLocator::at(&path)).await.expect("accepted");
    assert_eq!(cli.version(), "2.1.328");
    assert_eq!(cli.path(), std::fs::canonicalize(&path).unwrap());
}

#[test]
fn the_search_order_is_config_then_the_pinned_install_then_path() {
    let bin = dir();
    let locator = CliLocator {
        configured: Some(bin.path().join("nope")),
        workspace_root: Some(bin.path().to_path_buf()),
        skip_version_check: false,
    };
    let tried = locator.candidates();
    assert_eq!(tried[0], bin.path().join("nope"));
    let pinned = tried.iter().position(|p| *p == bin.path().join(tollgate_claude::cli::PINNED_INSTALL));
    let on_path =
        tried.iter().position(|p| p.file_name().is_some_and(|n| n == "claude") && !p.starts_with(bin.path()));
    assert!(pinned.is_some(), "{tried:?}");
    if let Some(on_path) = on_path {
        assert!(pinned < Some(on_path), "{tried:?}");
    }
    let message = CliError::NotFound { tried: tried.clone() }.to_string();
    assert!(message.contains(&bin.path().join("nope").display().to_string()), "{message}");
}
