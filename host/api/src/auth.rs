//! Who may call the API and what they may do: the auth file (`tollgate serve|api --auth FILE`),
//! its principals and roles, the bearer token check, and the rules that allow or refuse an action
//! (a pure function of the principal, the action, the session's starter and the tool's approvers).
//!
//! Read [`Rules`] first, then [`Principals::authenticate`]. The HTTP layer ([`crate::api`]) asks
//! these and turns a refusal into a 401 or a 403; the command that writes the file is
//! `tollgate auth` (the binary's `commands::auth`).
//!
//! # The file
//!
//! ```toml
//! # Keep comments: `tollgate auth add` only ever appends.
//! separation_of_duties = true        # optional, default true
//!
//! [[principals]]
//! name = "alice"                     # 1-64 of A-Z a-z 0-9 . _ @ -
//! token_sha256 = "3f…"               # sha256 of the token, 64 lowercase hex digits; never the token
//! roles = ["approver"]               # viewer | client | approver | admin, at least one
//! groups = ["finance"]               # optional
//! agents = ["billing"]               # optional: only these agents' sessions (default: every agent)
//! ```
//!
//! Roles: `viewer` reads; `client` reads, starts sessions, sends messages and cancels the turns of
//! sessions it started; `approver` reads, decides interrupts and cancels any turn; `admin` does
//! everything (upgrades included).
//!
//! # Deciding an interrupt
//!
//! Besides the role: with separation of duties (the default) nobody decides an interrupt of a
//! session they started; a tool whose policy names `approvers = ["finance"]` is decided only by a
//! principal in one of those groups (admins included).
//!
//! # Agents
//!
//! A principal with `agents` sees and acts on the sessions of those agents only: another agent's
//! session is not found (404) on every route, is left out of every list (sessions, the approvals
//! inbox and its stream, the audit trail), and a session for it is not created (403
//! `agent_not_allowed`). A session that names no agent belongs to none of them. Roles, groups and
//! separation of duties apply within the agents as everywhere.
//!
//! # Principals that are not in a file
//!
//! - [`SHORTCUT`] (`tollgate:token`): the holder of `--token`/`--token-file`, an admin. Without an
//!   auth file it is the only principal, so separation of duties and approver groups do not apply
//!   to it (nobody else could decide); beside an auth file it is an ordinary admin without groups.
//! - [`OPEN`] (`tollgate:open`): every caller of an API started with neither a token nor an auth
//!   file (loopback development), with the same exemption.
//! - [`LOCAL`](tollgate_sessions::rights::LOCAL) (`tollgate:local`): sessions a process starts on the store directly (the demo,
//!   tests), not through the API.
//!
//! Names with `:` cannot appear in an auth file, so these never collide with a file's principals.
//!
//! # Caveats
//!
//! - The file is read at start-up: restart the server to add or remove a principal.
//! - A token is compared by its sha256 against every principal's hash, each in constant time and
//!   always all of them, so the time taken says nothing about which hash nearly matched.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tollgate_sessions::rights::{Action, Caller, OPEN, Role, Rules, SHORTCUT};

/// The longest principal name in an auth file.
pub const MAX_NAME: usize = 64;

/// An auth file as written.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthFile {
    /// See [`Rules::separation_of_duties`]; default `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub separation_of_duties: Option<bool>,
    /// The principals.
    #[serde(default)]
    pub principals: Vec<PrincipalEntry>,
}

/// One `[[principals]]` entry.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalEntry {
    /// Its name.
    pub name: String,
    /// The sha256 of its token, lowercase hex.
    pub token_sha256: String,
    /// Its roles.
    pub roles: Vec<Role>,
    /// Its groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// The agents it is limited to (absent: every agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
}

/// What is wrong with an auth file; each names the file and the principal or field.
#[derive(Debug, thiserror::Error)]
pub enum AuthFileError {
    /// It cannot be read.
    #[error("cannot read the auth file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It is not TOML of the documented shape.
    #[error("the auth file {path} is not valid: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message (line and field).
        reason: String,
    },
    /// A principal is wrong.
    #[error("the auth file {path}: principal #{index} ({name:?}): {reason}")]
    Principal {
        /// The file.
        path: String,
        /// Its position, from 1.
        index: usize,
        /// Its name as written.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// Checks a principal name: 1 to [`MAX_NAME`] of `A-Z a-z 0-9 . _ @ -`.
///
/// # Errors
/// The reason, naming the rule.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "._@-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!("a principal name must be 1 to {MAX_NAME} characters of letters, digits and ._@-"))
    }
}

/// The principals of an auth file, checked, with the rules it sets.
#[derive(Clone, Debug)]
pub struct Principals {
    /// The rules.
    pub rules: Rules,
    entries: Vec<([u8; 32], Caller)>,
}

impl Principals {
    /// The groups of the principals who may decide interrupts (approvers and admins).
    pub fn approver_groups(&self) -> BTreeSet<&str> {
        self.deciding().flat_map(|caller| caller.groups.iter().map(String::as_str)).collect()
    }

    /// The principals whose roles may decide calls.
    fn deciding(&self) -> impl Iterator<Item = &Caller> {
        self.entries
            .iter()
            .map(|(_, caller)| caller)
            .filter(|caller| caller.roles.iter().any(|role| Action::Decide.roles().contains(role)))
    }

    /// The principals who may decide a call whose policy names approver `groups` (any approver or
    /// admin when it names none), by name.
    pub fn deciders(&self, groups: &[String]) -> Vec<&str> {
        self.deciding()
            .filter(|caller| groups.is_empty() || caller.groups.iter().any(|g| groups.contains(g)))
            .map(|caller| caller.name.as_str())
            .collect()
    }

    /// Parses and checks an auth file's text (`path` names it in errors).
    ///
    /// # Errors
    /// Bad TOML, an unknown field or role, a bad name, a hash that is not 64 lowercase hex
    /// digits, a principal without roles, an empty group, or a name or hash given twice.
    pub fn parse(text: &str, path: &str) -> Result<Self, AuthFileError> {
        let file: AuthFile = toml::from_str(text)
            .map_err(|e| AuthFileError::Parse { path: path.to_owned(), reason: e.to_string() })?;
        let mut entries: Vec<([u8; 32], Caller)> = Vec::with_capacity(file.principals.len());
        for (i, entry) in file.principals.iter().enumerate() {
            let bad = |reason: String| AuthFileError::Principal {
                path: path.to_owned(),
                index: i + 1,
                name: entry.name.clone(),
                reason,
            };
            check_name(&entry.name).map_err(bad)?;
            let hash = parse_hash(&entry.token_sha256).map_err(bad)?;
            if entry.roles.is_empty() {
                return Err(bad(
                    "`roles` is empty: give at least one of viewer, client, approver, admin".into()
                ));
            }
            if entry.groups.iter().any(|g| g.is_empty() || g.len() > MAX_NAME) {
                return Err(bad(format!("every group must be 1 to {MAX_NAME} bytes")));
            }
            if let Some(agents) = &entry.agents {
                if agents.is_empty() {
                    return Err(bad(
                        "`agents` is empty: name at least one agent, or leave it out for every agent".into(),
                    ));
                }
                for agent in agents {
                    tollgate_store::check_agent_name(agent).map_err(|why| bad(format!("`agents`: {why}")))?;
                }
            }
            if entries.iter().any(|(_, c)| c.name == entry.name) {
                return Err(bad("the name is given twice".into()));
            }
            if entries.iter().any(|(h, _)| *h == hash) {
                return Err(bad("the token hash is given twice (two principals would share a token)".into()));
            }
            let caller = Caller {
                name: entry.name.clone(),
                roles: entry.roles.iter().copied().collect(),
                groups: entry.groups.iter().cloned().collect(),
                sole: false,
                agents: entry.agents.as_ref().map(|agents| agents.iter().cloned().collect()),
            };
            entries.push((hash, caller));
        }
        let rules = Rules { separation_of_duties: file.separation_of_duties.unwrap_or(true) };
        Ok(Principals { rules, entries })
    }

    /// Reads and checks the auth file at `path`.
    ///
    /// # Errors
    /// As [`Principals::parse`], or the file cannot be read.
    pub fn load(path: &Path) -> Result<Self, AuthFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|source| AuthFileError::Read { path: shown.clone(), source })?;
        Self::parse(&text, &shown)
    }

    /// Whether the file names `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.iter().any(|(_, c)| c.name == name)
    }

    /// How many principals the file lists.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the file lists none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The principal whose token is `token`: its sha256 compared with every principal's hash, in
    /// constant time each, all of them every time.
    pub fn authenticate(&self, token: &str) -> Option<&Caller> {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (known, caller) in &self.entries {
            if same_secret(known, &hash) {
                found = Some(caller);
            }
        }
        found
    }
}

/// The sha256 of `token`, lowercase hex (what an auth file stores).
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn parse_hash(text: &str) -> Result<[u8; 32], String> {
    let reason = || {
        "`token_sha256` must be 64 lowercase hex digits (the sha256 of the token, never the token)".to_owned()
    };
    if text.len() != 64 || !text.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')) {
        return Err(reason());
    }
    let bytes = hex::decode(text).map_err(|_| reason())?;
    bytes.try_into().map_err(|_| reason())
}

/// Constant-time comparison of two byte strings (the length is not secret): `subtle`'s, which
/// keeps the optimizer from turning it back into an early-exit loop.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(a.ct_eq(b))
}

/// How a server authenticates: a shortcut token, an auth file, both, or neither (open).
#[derive(Clone, Debug, Default)]
pub struct Auth {
    /// The `--token` shortcut.
    pub token: Option<String>,
    /// The `--auth` file's principals.
    pub principals: Option<Principals>,
}

impl Auth {
    /// The rules in force: the file's, or the default's.
    pub fn rules(&self) -> Rules {
        self.principals.as_ref().map_or_else(Rules::default, |p| p.rules)
    }

    /// Whether every caller is let in without a token.
    pub fn is_open(&self) -> bool {
        self.token.is_none() && self.principals.is_none()
    }

    /// The caller presenting `token` (`None`: no `Authorization: Bearer` header); `None` when
    /// nobody has it (a 401).
    pub fn authenticate(&self, token: Option<&str>) -> Option<Caller> {
        if self.is_open() {
            return Some(Caller::sole_admin(OPEN));
        }
        let token = token?;
        let shortcut = self.token.as_deref().is_some_and(|t| same_secret(t.as_bytes(), token.as_bytes()));
        let listed = self.principals.as_ref().and_then(|p| p.authenticate(token)).cloned();
        if shortcut {
            let mut admin = Caller::sole_admin(SHORTCUT);
            admin.sole = self.principals.is_none();
            return Some(admin);
        }
        listed
    }
}

/// A fresh random token: `tg_` and 64 hex digits (256 bits from the OS).
///
/// # Errors
/// The OS random source failed.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("tg_{}", hex::encode(bytes)))
}

/// The `[[principals]]` block `tollgate auth add` appends (`agents` empty: every agent).
pub fn entry_text(name: &str, token: &str, roles: &[Role], groups: &[String], agents: &[String]) -> String {
    let list = |items: Vec<String>| items.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
    let mut text = format!(
        "\n[[principals]]\nname = {name:?}\ntoken_sha256 = \"{}\"\nroles = [{}]\n",
        token_hash(token),
        list(roles.iter().map(|r| r.as_str().to_owned()).collect())
    );
    if !groups.is_empty() {
        text.push_str(&format!("groups = [{}]\n", list(groups.to_vec())));
    }
    if !agents.is_empty() {
        text.push_str(&format!("agents = [{}]\n", list(agents.to_vec())));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
# operators of the support desk
separation_of_duties = true

[[principals]]
name = "vera"   # read-only
token_sha256 = "a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3"
roles = ["viewer"]

[[principals]]
name = "fin"
token_sha256 = "b3a8e0e1f9ab1bfe3a36f231f676f78bb30a519d2b21e6c530c0eee8ebb4a5d0"
roles = ["approver"]
groups = ["finance"]
"#;

    #[test]
    fn an_auth_file_lists_principals_by_the_hash_of_their_token() {
        let principals = Principals::parse(FILE, "auth.toml").unwrap();
        assert_eq!(principals.len(), 2);
        assert!(principals.rules.separation_of_duties);
        let vera = principals.authenticate("123").expect("sha256(123) is vera's");
        assert_eq!(
            (vera.name.as_str(), vera.roles.iter().copied().collect::<Vec<_>>()),
            ("vera", vec![Role::Viewer])
        );
        assert_eq!(principals.authenticate("456").map(|c| c.name.as_str()), Some("fin"));
        assert!(principals.authenticate("789").is_none());
        assert!(principals.authenticate("").is_none());
        assert_eq!(token_hash("123"), "a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3");
    }

    #[test]
    fn a_bad_auth_file_is_refused_naming_the_principal_and_the_field() {
        let hash = token_hash("x");
        let with = |entry: &str| format!("[[principals]]\n{entry}\n");
        let cases = [
            (
                with(&format!("name = \"a:b\"\ntoken_sha256 = \"{hash}\"\nroles = [\"viewer\"]")),
                "letters, digits",
            ),
            (with("name = \"a\"\ntoken_sha256 = \"s3cret\"\nroles = [\"viewer\"]"), "64 lowercase hex"),
            (with(&format!("name = \"a\"\ntoken_sha256 = \"{hash}\"\nroles = []")), "at least one"),
            (
                with(&format!("name = \"a\"\ntoken_sha256 = \"{hash}\"\nroles = [\"root\"]")),
                "unknown variant `root`",
            ),
            (
                with(&format!(
                    "name = \"a\"\ntoken_sha256 = \"{hash}\"\nroles = [\"viewer\"]\ntoken = \"x\""
                )),
                "unknown field `token`",
            ),
            (
                with(&format!(
                    "name = \"a\"\ntoken_sha256 = \"{hash}\"\nroles = [\"viewer\"]\ngroups = [\"\"]"
                )),
                "every group",
            ),
            (
                format!(
                    "{}{}",
                    with(&format!("name = \"a\"\ntoken_sha256 = \"{hash}\"\nroles = [\"viewer\"]")),
                    with(&format!(
                        "name = \"a\"\ntoken_sha256 = \"{}\"\nroles = [\"viewer\"]",
                        token_hash("y")
                    ))
                ),
                "given twice",
            ),
        ];
        for (text, expected) in cases {
            let error = Principals::parse(&text, "auth.toml").expect_err(&text).to_string();
            assert!(error.contains("auth.toml") && error.contains(expected), "{expected:?} not in {error}");
        }
    }

    #[test]
    fn the_shortcut_token_is_the_sole_admin_only_without_an_auth_file() {
        let alone = Auth { token: Some("t0ken".into()), principals: None };
        let admin = alone.authenticate(Some("t0ken")).expect("the shortcut");
        assert_eq!((admin.name.as_str(), admin.sole), (SHORTCUT, true));
        assert!(alone.authenticate(Some("t0kem")).is_none());
        assert!(alone.authenticate(None).is_none());
        let both =
            Auth { token: Some("t0ken".into()), principals: Some(Principals::parse(FILE, "a").unwrap()) };
        assert!(!both.authenticate(Some("t0ken")).unwrap().sole, "an ordinary admin beside a file");
        assert_eq!(both.authenticate(Some("456")).unwrap().name, "fin");
        let open = Auth::default();
        assert_eq!(open.authenticate(None).unwrap().name, OPEN);
    }

    #[test]
    fn a_principal_limited_to_agents_sees_only_their_sessions_and_a_bad_list_is_refused() {
        let hash = "a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3";
        let file = |agents: &str| {
            format!(
                "[[principals]]\nname = \"bill\"\ntoken_sha256 = \"{hash}\"\nroles = [\"approver\"]\n{agents}"
            )
        };
        let limited = Principals::parse(&file("agents = [\"billing\", \"ops\"]\n"), "auth.toml").unwrap();
        let bill = limited.authenticate("123").expect("bill");
        assert!(bill.sees_agent(Some("billing")) && bill.sees_agent(Some("ops")));
        assert!(!bill.sees_agent(Some("support")) && !bill.sees_agent(None), "nor a session that names none");
        let refused = Rules::default().may_use_agent(bill, Some("support")).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "principal `bill` may not use agent `support`: it is limited to `billing`, `ops`"
        );
        let every = Principals::parse(&file(""), "auth.toml").unwrap();
        let all = every.authenticate("123").unwrap();
        assert!(all.sees_agent(Some("support")) && all.sees_agent(None), "no list: every agent");
        for (agents, why) in
            [("agents = []\n", "`agents` is empty"), ("agents = [\"a b\"]\n", "`agents`: the agent name")]
        {
            let error = Principals::parse(&file(agents), "auth.toml").unwrap_err().to_string();
            assert!(error.contains("principal #1 (\"bill\")") && error.contains(why), "{error}");
        }
    }

    #[test]
    fn an_added_entry_parses_back_and_authenticates_its_token() {
        let token = new_token().unwrap();
        assert!(token.starts_with("tg_") && token.len() == 67);
        let text = format!(
            "{FILE}{}",
            entry_text(
                "carl",
                &token,
                &[Role::Client],
                &["support".into()],
                &["support".into(), "ops".into()]
            )
        );
        let principals = Principals::parse(&text, "auth.toml").unwrap();
        let carl = principals.authenticate(&token).expect("carl");
        assert_eq!(carl.groups.iter().collect::<Vec<_>>(), ["support"]);
        assert_eq!(carl.agents.iter().flatten().collect::<Vec<_>>(), ["ops", "support"]);
        assert!(!text.contains(&token), "only the hash is stored");
    }
}
