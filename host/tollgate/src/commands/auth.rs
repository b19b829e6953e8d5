//! `tollgate auth add NAME --role ROLE [--group G] --auth FILE`: adds a principal to an auth file
//! (see [`tollgate_api::auth`]). It makes a random token, prints it once on stdout, and appends the
//! principal with the token's sha256 only; the file is created `0600` when missing.
//!
//! The file is only ever appended to: every byte already there (comments, order, other
//! principals) stays. The whole file, new entry included, is checked before anything is written,
//! so a bad name, a duplicate or an unreadable file leaves it as it was.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};

use tollgate_api::auth::{self, Principals};
use tollgate_sessions::rights::Role;

/// Options of `tollgate auth`.
#[derive(Debug, Args)]
pub struct AuthArgs {
    /// The subcommand.
    #[command(subcommand)]
    pub command: AuthCommand,
}

/// The `auth` subcommands.
#[derive(Debug, Subcommand)]
pub enum AuthCommand {
    /// Add a principal: prints its new token once and stores only the token's sha256.
    Add {
        /// Its name (letters, digits and ._@-, at most 64).
        name: String,
        /// Its role: viewer, client, approver or admin (repeat for several).
        #[arg(long = "role", required = true, value_parser = parse_role)]
        roles: Vec<Role>,
        /// A group it belongs to (repeat for several), e.g. for `approvers = ["finance"]`.
        #[arg(long = "group")]
        groups: Vec<String>,
        /// The agents whose sessions it may see and act on, comma-separated (default: every agent).
        #[arg(long, value_delimiter = ',')]
        agents: Vec<String>,
        /// The auth file (created `0600` when missing).
        #[arg(long = "auth", env = "TOLLGATE_AUTH_FILE", value_name = "FILE")]
        file: PathBuf,
    },
}

fn parse_role(text: &str) -> Result<Role, String> {
    text.parse()
}

/// Runs `tollgate auth …`.
pub fn run(args: AuthArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        AuthCommand::Add { name, roles, groups, agents, file } => {
            let token = add(&file, &name, &roles, &groups, &agents)?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{token}")?;
            eprintln!(
                "added principal `{name}` to {}: the token above is shown once; only its sha256 is stored (restart the server to load it)",
                file.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Appends principal `name` to the auth file `path` with a new token, and returns the token.
///
/// # Errors
/// A bad name or group, a name the file already has, a file that is not a valid auth file, or
/// the file cannot be created or written.
pub fn add(
    path: &std::path::Path,
    name: &str,
    roles: &[Role],
    groups: &[String],
    agents: &[String],
) -> anyhow::Result<String> {
    auth::check_name(name).map_err(|reason| anyhow::anyhow!("principal {name:?}: {reason}"))?;
    let shown = path.display().to_string();
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading the auth file {shown}")),
    };
    if let Some(text) = &existing {
        let principals = Principals::parse(text, &shown)?;
        if principals.contains(name) {
            anyhow::bail!("the auth file {shown} already has a principal `{name}`; nothing changed");
        }
    }
    let token = auth::new_token().context("the OS random source failed")?;
    let mut entry = auth::entry_text(name, &token, roles, groups, agents);
    let before = existing.as_deref().unwrap_or_default();
    if before.is_empty() {
        entry =
            format!("# Tollgate principals (tollgate auth add); tokens are stored as sha256 only.\n{entry}");
    } else if !before.ends_with('\n') {
        entry.insert(0, '\n');
    }
    Principals::parse(&format!("{before}{entry}"), &shown)?;
    let mut options = std::fs::OpenOptions::new();
    options.append(true);
    if existing.is_none() {
        use std::os::unix::fs::OpenOptionsExt;
        options.create_new(true).mode(0o600);
    }
    let mut file = options.open(path).with_context(|| format!("opening the auth file {shown}"))?;
    file.write_all(entry.as_bytes()).with_context(|| format!("writing the auth file {shown}"))?;
    file.sync_all().with_context(|| format!("writing the auth file {shown}"))?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn adding_principals_creates_the_file_0600_appends_and_keeps_every_other_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.toml");
        let first = add(&path, "fin", &[Role::Approver], &["finance".into()], &[]).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("# a comment the operator wrote\n");
        std::fs::write(&path, &text).unwrap();
        let second = add(&path, "carl", &[Role::Client], &[], &[]).unwrap();
        let after = std::fs::read_to_string(&path).unwrap();
        assert!(after.starts_with(&text), "the bytes before stay");
        assert!(!after.contains(&first) && !after.contains(&second), "tokens are never stored");
        let principals = Principals::load(&path).unwrap();
        assert_eq!(principals.authenticate(&first).unwrap().name, "fin");
        assert_eq!(principals.authenticate(&second).unwrap().name, "carl");
        let again = add(&path, "fin", &[Role::Viewer], &[], &[]).unwrap_err().to_string();
        assert!(again.contains("already has a principal `fin`"), "{again}");
        let bad = add(&path, "a b", &[Role::Viewer], &[], &[]).unwrap_err().to_string();
        assert!(bad.contains("letters, digits"), "{bad}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), after, "refusals write nothing");
    }
}
