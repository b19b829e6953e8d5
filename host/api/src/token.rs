//! The API's bearer token as the server and the client commands take it: from `--token-file`
//! (`TOLLGATE_TOKEN_FILE`), from `TOLLGATE_TOKEN`, or from `--token` on the command line, which
//! works but warns, since every local user can read a process's arguments
//! (`/proc/PID/cmdline`, `ps`).
//!
//! It owns reading and checking the token; who compares it is [`crate::api`]'s business and who
//! sends it the client's (`tollgate_api_types::client`).

use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest token file read: a token is a line, not a document.
const MAX_TOKEN_FILE_BYTES: u64 = 64 * 1024;

/// A token that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Both a token and a token file were given.
    #[error(
        "both a token (--token or TOLLGATE_TOKEN) and a token file (--token-file or TOLLGATE_TOKEN_FILE) are given; give one"
    )]
    Both,
    /// The file could not be read.
    #[error("cannot read the token file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not one line of text.
    #[error("the token file {} is not usable: {reason}", path.display())]
    Bad {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// The token the options give: the file's, else `given` (from `--token` or `TOLLGATE_TOKEN`),
/// else none. Warns when the token is on the command line, or the file is readable by others.
///
/// # Errors
/// Both are given, or the file is missing, empty, not text or more than one line.
pub fn resolve(given: Option<&str>, file: Option<&Path>) -> Result<Option<String>, TokenError> {
    let given = given.map(str::trim).filter(|t| !t.is_empty());
    match (given, file) {
        (Some(_), Some(_)) => Err(TokenError::Both),
        (None, Some(path)) => read_token_file(path).map(Some),
        (Some(token), None) => {
            if on_command_line(std::env::args()) {
                tracing::warn!(
                    "the token was passed with --token, so any local user can read it in the process list \
                     (/proc/PID/cmdline); put it in a file readable only by you and pass --token-file, or set TOLLGATE_TOKEN"
                );
            }
            Ok(Some(token.to_owned()))
        }
        (None, None) => Ok(None),
    }
}

/// Whether the arguments carry `--token VALUE` or `--token=VALUE`.
fn on_command_line(args: impl Iterator<Item = String>) -> bool {
    args.take_while(|a| a != "--").any(|a| a == "--token" || a.starts_with("--token="))
}

/// The token in `path`: one line, surrounding whitespace (the trailing newline) trimmed.
///
/// # Errors
/// The file is missing, larger than 64 KiB, empty, not UTF-8 or more than one line.
pub fn read_token_file(path: &Path) -> Result<String, TokenError> {
    let read = |source| TokenError::Read { path: path.to_owned(), source };
    let bad = |reason| TokenError::Bad { path: path.to_owned(), reason };
    let file = std::fs::File::open(path).map_err(read)?;
    let metadata = file.metadata().map_err(read)?;
    if metadata.is_dir() {
        return Err(bad("it is a directory"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_TOKEN_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(bad("it is larger than 64 KiB; a token is one line"));
    }
    let text = String::from_utf8(bytes).map_err(|_| bad("it is not UTF-8 text"))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(bad("it is empty"));
    }
    if token.chars().any(char::is_control) {
        return Err(bad("the token must be one line without control characters"));
    }
    warn_if_shared(path, &metadata);
    Ok(token.to_owned())
}

/// Where a server listening on `addr` keeps the token it made itself, and where a client of that
/// address finds it: `$XDG_STATE_HOME/tollgate/api-<address>-<port>.token` (default state folder
/// `~/.local/state`). `None` when neither variable names a folder.
pub fn generated_path(host: &str, port: u16) -> Option<PathBuf> {
    let state =
        std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()).map(PathBuf::from).or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| Path::new(&home).join(".local/state"))
        })?;
    let host: String = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' })
        .collect();
    Some(state.join("tollgate").join(format!("api-{host}-{port}.token")))
}

/// The token in `path`, or a new random one (32 bytes, hex) written there first, the file `0600`
/// in a folder `0700`: a server started without `--token` or `--auth` is not open.
///
/// # Errors
/// The file cannot be read or written.
pub fn load_or_generate(path: &Path) -> anyhow::Result<String> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if path.exists() {
        return Ok(read_token_file(path)?);
    }
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| anyhow::anyhow!("cannot make {}: {e}", dir.display()))?;
    }
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness for a token: {e}"))?;
    let token = hex::encode(bytes);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| anyhow::anyhow!("cannot write the token file {}: {e}", path.display()))?;
    writeln!(file, "{token}")
        .map_err(|e| anyhow::anyhow!("cannot write the token file {}: {e}", path.display()))?;
    Ok(token)
}

#[cfg(unix)]
fn warn_if_shared(path: &Path, metadata: &std::fs::Metadata) {
    use std::os::unix::fs::PermissionsExt;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        tracing::warn!(
            "the token file {} can be read by its group or by others (mode {mode:04o}); `chmod 600` it",
            path.display()
        );
    }
}

#[cfg(not(unix))]
fn warn_if_shared(_path: &Path, _metadata: &std::fs::Metadata) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(text: &[u8]) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), text).expect("write");
        file
    }

    #[test]
    fn a_token_file_is_read_without_its_trailing_newline() {
        let file = file_with(b"s3cret\n");
        assert_eq!(read_token_file(file.path()).unwrap(), "s3cret");
    }

    #[test]
    fn an_empty_or_multi_line_token_file_is_refused_naming_the_file() {
        for (text, reason) in [(&b"\n \n"[..], "empty"), (b"a\nb\n", "one line"), (b"\xff\xfe", "UTF-8")] {
            let file = file_with(text);
            let error = read_token_file(file.path()).unwrap_err().to_string();
            assert!(error.contains(reason), "{error}");
            assert!(error.contains(&file.path().display().to_string()), "{error}");
        }
        let error = read_token_file(Path::new("/nonexistent/token")).unwrap_err().to_string();
        assert!(error.contains("/nonexistent/token"), "{error}");
    }

    #[test]
    fn a_token_and_a_token_file_together_are_refused() {
        let file = file_with(b"x");
        assert!(matches!(resolve(Some("y"), Some(file.path())), Err(TokenError::Both)));
        assert_eq!(resolve(Some("  "), Some(file.path())).unwrap().as_deref(), Some("x"));
        assert_eq!(resolve(None, None).unwrap(), None);
    }

    #[test]
    fn a_generated_token_is_private_made_once_and_named_by_address() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state/tollgate/api-127.0.0.1-8080.token");
        let token = load_or_generate(&path).unwrap();
        assert_eq!(token.len(), 64);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(load_or_generate(&path).unwrap(), token, "the same token on the next start");
        let named = generated_path("[::1]", 9).unwrap();
        assert!(named.ends_with("tollgate/api-__1-9.token"), "{}", named.display());
    }

    #[test]
    fn only_a_token_flag_counts_as_on_the_command_line() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>().into_iter();
        assert!(on_command_line(args(&["tollgate", "api", "--token", "x"])));
        assert!(on_command_line(args(&["tollgate", "api", "--token=x"])));
        assert!(!on_command_line(args(&["tollgate", "api", "--token-file", "t"])));
        assert!(!on_command_line(args(&["tollgate", "session", "send", "s", "--", "--token"])));
    }
}
