//! Who may do what to a session, as a pure function of the caller, the action, the session's
//! starter and the tool's approvers: roles ([`Role`]), the actions they allow ([`Action`]), the
//! authenticated [`Caller`] every face hands the service, the [`Rules`] of a deployment and why a
//! call is refused ([`Denied`]).
//!
//! Every face (HTTP, `/mcp`, a local command) authenticates its own way and then asks these rules
//! through the service ([`crate::service::Sessions`]), so one principal gets the same answer on
//! every face. How principals and their tokens are configured is the face's (`tollgate-api`'s
//! `auth`: the auth file).
//!
//! # Principals that are not in a file
//!
//! - [`SHORTCUT`] (`tollgate:token`): the holder of `--token`/`--token-file`, an admin. Without an
//!   auth file it is the only principal, so separation of duties and approver groups do not apply
//!   to it (nobody else could decide); beside an auth file it is an ordinary admin without groups.
//! - [`OPEN`] (`tollgate:open`): every caller of an API started with neither a token nor an auth
//!   file (loopback development), with the same exemption.
//! - [`LOCAL`] (`tollgate:local`): sessions a process starts on the store directly (the demo,
//!   tests), not through the API.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The principal of `--token` (see the module docs).
pub const SHORTCUT: &str = "tollgate:token";
/// The principal of every caller of an API with neither a token nor an auth file.
pub const OPEN: &str = "tollgate:open";
/// The principal of sessions started on the store directly, not through the API.
pub const LOCAL: &str = "tollgate:local";

/// A role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads sessions, events, the inbox and the audit trail.
    Viewer,
    /// Reads, starts sessions and sends messages.
    Client,
    /// Reads and decides interrupts.
    Approver,
    /// Everything.
    Admin,
}

impl Role {
    /// The name in the file and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Client => "client",
            Role::Approver => "approver",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "viewer" => Ok(Role::Viewer),
            "client" => Ok(Role::Client),
            "approver" => Ok(Role::Approver),
            "admin" => Ok(Role::Admin),
            other => Err(format!("unknown role `{other}`; expected viewer, client, approver or admin")),
        }
    }
}

/// What a request does, as far as roles go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Any read.
    Read,
    /// Start a session or send a message.
    Write,
    /// Decide an interrupt (then [`Rules::may_decide`] checks the session and the tool).
    Decide,
    /// Cancel a session's turn (then [`Rules::may_cancel`] checks the session).
    Cancel,
    /// Upgrade sessions to another agent.
    Operate,
    /// Fork a session at a turn into a new one ([`crate::service::Sessions::fork`]): a client's
    /// or an admin's, as starting a session is (a fork taken before a write runs it again).
    Fork,
}

impl Action {
    /// The roles allowed to do it.
    pub fn roles(self) -> &'static [Role] {
        match self {
            Action::Read => &[Role::Viewer, Role::Client, Role::Approver, Role::Admin],
            Action::Write => &[Role::Client, Role::Admin],
            Action::Decide => &[Role::Approver, Role::Admin],
            Action::Cancel => &[Role::Client, Role::Approver, Role::Admin],
            Action::Operate => &[Role::Admin],
            Action::Fork => &[Role::Client, Role::Admin],
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Write => "start sessions or send messages",
            Action::Decide => "decide interrupts",
            Action::Cancel => "cancel turns",
            Action::Operate => "upgrade sessions",
            Action::Fork => "fork sessions",
        }
    }
}

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Its name (recorded as who started a session and who decided).
    pub name: String,
    /// Its roles.
    pub roles: BTreeSet<Role>,
    /// Its groups.
    pub groups: BTreeSet<String>,
    /// The only principal there is ([`SHORTCUT`] without an auth file, or [`OPEN`]): separation
    /// of duties and approver groups do not apply.
    pub sole: bool,
    /// The agents whose sessions it may see and act on (`None`: every agent).
    pub agents: Option<BTreeSet<String>>,
}

impl Caller {
    /// The one admin of a server without an auth file.
    pub fn sole_admin(name: &str) -> Self {
        Caller {
            name: name.to_owned(),
            roles: [Role::Admin].into(),
            groups: BTreeSet::new(),
            sole: true,
            agents: None,
        }
    }

    /// Whether it may see and act on a session of `agent` (`None`: a session that names no
    /// agent, which only an unlimited principal sees).
    pub fn sees_agent(&self, agent: Option<&str>) -> bool {
        match &self.agents {
            None => true,
            Some(agents) => agent.is_some_and(|agent| agents.contains(agent)),
        }
    }
}

/// Why a known caller may not do something (a 403). Its text names what is needed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// None of the caller's roles allows the action.
    #[error("principal `{name}` (roles: {have}) may not {action}: that needs the role {needed}")]
    Role {
        /// The caller.
        name: String,
        /// Its roles, comma-separated.
        have: String,
        /// What it tried.
        action: &'static str,
        /// The roles that would do, as `` `approver` or `admin` ``.
        needed: String,
        /// The same, as a list.
        roles: Vec<Role>,
    },
    /// The tool's policy names approver groups the caller is in none of.
    #[error(
        "principal `{name}` may not decide `{tool}`: its policy lets only the group(s) {needed} decide it, and `{name}` is in {have}"
    )]
    Group {
        /// The caller.
        name: String,
        /// The tool.
        tool: String,
        /// The groups that would do, as `` `finance` `` or `` `finance`, `ops` ``.
        needed: String,
        /// The same, as a list.
        groups: Vec<String>,
        /// The caller's groups, or "no group".
        have: String,
    },
    /// Separation of duties: the caller started the session.
    #[error(
        "principal `{name}` started session `{session_id}` and may not decide its interrupts (separation of duties): another approver must"
    )]
    OwnSession {
        /// The caller.
        name: String,
        /// The session.
        session_id: String,
    },
    /// The principal is limited to other agents than the session's.
    #[error("principal `{name}` may not use agent `{agent}`: it is limited to {allowed}")]
    Agent {
        /// The caller.
        name: String,
        /// The agent asked for (`none` for a session that names none).
        agent: String,
        /// Its agents, as `` `billing`, `ops` ``.
        allowed: String,
    },
    /// A `client` (neither approver nor admin) cancels only the turns of sessions it started.
    #[error(
        "principal `{name}` may not cancel the turn of session `{session_id}`: as a client it cancels only sessions it started; an approver or admin may cancel any"
    )]
    NotOwnSession {
        /// The caller.
        name: String,
        /// The session.
        session_id: String,
    },
}

/// The rules of one server: whether separation of duties holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// Nobody decides an interrupt of a session they started.
    pub separation_of_duties: bool,
}

impl Default for Rules {
    fn default() -> Self {
        Rules { separation_of_duties: true }
    }
}

impl Rules {
    /// Whether `caller` may do `action` at all (its roles).
    ///
    /// # Errors
    /// [`Denied::Role`] naming the roles needed.
    pub fn allows(&self, caller: &Caller, action: Action) -> Result<(), Denied> {
        let needed = action.roles();
        if caller.roles.iter().any(|role| needed.contains(role)) {
            return Ok(());
        }
        Err(Denied::Role {
            name: caller.name.clone(),
            have: join(caller.roles.iter().map(|r| r.as_str()), "none"),
            action: action.describe(),
            needed: quoted_or(needed.iter().map(|r| r.as_str())),
            roles: needed.to_vec(),
        })
    }

    /// Whether `caller` may decide an interrupt of session `session_id`, started by `starter`
    /// (`None`: unknown), for `tool` whose policy names `approvers` (empty: any approver).
    ///
    /// # Errors
    /// [`Denied::Role`], then [`Denied::Group`], then [`Denied::OwnSession`], the first that
    /// applies.
    pub fn may_decide(
        &self,
        caller: &Caller,
        session_id: &str,
        starter: Option<&str>,
        tool: &str,
        approvers: &[String],
    ) -> Result<(), Denied> {
        self.allows(caller, Action::Decide)?;
        if caller.sole {
            return Ok(());
        }
        if !approvers.is_empty() && !approvers.iter().any(|group| caller.groups.contains(group)) {
            return Err(Denied::Group {
                name: caller.name.clone(),
                tool: tool.to_owned(),
                needed: join(approvers.iter().map(|g| format!("`{g}`")), ""),
                groups: approvers.to_vec(),
                have: if caller.groups.is_empty() {
                    "no group".to_owned()
                } else {
                    format!("the group(s) {}", join(caller.groups.iter().map(|g| format!("`{g}`")), ""))
                },
            });
        }
        if self.separation_of_duties && starter == Some(caller.name.as_str()) {
            return Err(Denied::OwnSession { name: caller.name.clone(), session_id: session_id.to_owned() });
        }
        Ok(())
    }
}

impl Rules {
    /// Whether `caller` may use agent `agent` (`None`: none), e.g. start a session for it.
    ///
    /// # Errors
    /// [`Denied::Agent`] naming the caller's agents.
    pub fn may_use_agent(&self, caller: &Caller, agent: Option<&str>) -> Result<(), Denied> {
        if caller.sees_agent(agent) {
            return Ok(());
        }
        Err(Denied::Agent {
            name: caller.name.clone(),
            agent: agent.unwrap_or("none").to_owned(),
            allowed: join(caller.agents.iter().flatten().map(|a| format!("`{a}`")), "no agent"),
        })
    }

    /// Whether `caller` may cancel the turn of session `session_id`, started by `starter`
    /// (`None`: unknown): an approver or admin any; a client only one it started.
    ///
    /// # Errors
    /// [`Denied::Role`], then [`Denied::NotOwnSession`].
    pub fn may_cancel(&self, caller: &Caller, session_id: &str, starter: Option<&str>) -> Result<(), Denied> {
        self.allows(caller, Action::Cancel)?;
        let any = caller.sole || caller.roles.iter().any(|role| matches!(role, Role::Approver | Role::Admin));
        if any || starter == Some(caller.name.as_str()) {
            return Ok(());
        }
        Err(Denied::NotOwnSession { name: caller.name.clone(), session_id: session_id.to_owned() })
    }
}

/// Who is awaited for a call whose policy names `approvers` (empty: any approver) in a session
/// started by `starter`, under `rules`: what a face tells a user who may not decide it, instead
/// of asking them ("waiting for approval by finance").
pub fn awaited(rules: Rules, approvers: &[String], starter: Option<&str>) -> String {
    match starter.filter(|_| rules.separation_of_duties) {
        _ if !approvers.is_empty() => format!("waiting for approval by {}", approvers.join(" or ")),
        Some(starter) => {
            format!("waiting for approval by an approver other than {starter}, who started the session")
        }
        None => "waiting for approval by an approver".to_owned(),
    }
}

fn join<S: AsRef<str>>(items: impl Iterator<Item = S>, empty: &str) -> String {
    let items: Vec<String> = items.map(|s| s.as_ref().to_owned()).collect();
    if items.is_empty() { empty.to_owned() } else { items.join(", ") }
}

fn quoted_or<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let items: Vec<String> = items.map(|s| format!("`{s}`")).collect();
    match items.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(name: &str, roles: &[Role], groups: &[&str]) -> Caller {
        Caller {
            name: name.into(),
            roles: roles.iter().copied().collect(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            sole: false,
            agents: None,
        }
    }

    #[test]
    fn each_role_allows_exactly_its_actions() {
        let rules = Rules::default();
        let table = [
            (Role::Viewer, [true, false, false, false, false, false]),
            (Role::Client, [true, true, false, true, false, true]),
            (Role::Approver, [true, false, true, true, false, false]),
            (Role::Admin, [true, true, true, true, true, true]),
        ];
        for (role, allowed) in table {
            let who = caller("p", &[role], &[]);
            let actions =
                [Action::Read, Action::Write, Action::Decide, Action::Cancel, Action::Operate, Action::Fork];
            for (action, ok) in actions.into_iter().zip(allowed) {
                assert_eq!(rules.allows(&who, action).is_ok(), ok, "{role} {action:?}");
            }
        }
        let denied = rules.allows(&caller("vera", &[Role::Viewer], &[]), Action::Decide).unwrap_err();
        assert_eq!(
            denied.to_string(),
            "principal `vera` (roles: viewer) may not decide interrupts: that needs the role `approver` or `admin`"
        );
    }

    #[test]
    fn deciding_needs_the_role_then_the_group_then_another_principal_than_the_starter() {
        let rules = Rules::default();
        let finance = ["finance".to_owned()];
        let decide = |who: &Caller, starter: Option<&str>, approvers: &[String]| {
            rules.may_decide(who, "s-1", starter, "create_refund", approvers)
        };
        let fin = caller("fin", &[Role::Approver], &["finance"]);
        let ops = caller("ops", &[Role::Approver], &["ops"]);
        let boss = caller("boss", &[Role::Admin], &[]);
        let vera = caller("vera", &[Role::Viewer], &["finance"]);
        assert_eq!(decide(&fin, Some("carl"), &finance), Ok(()));
        assert_eq!(decide(&ops, Some("carl"), &[]), Ok(()), "no approvers: any approver");
        assert!(matches!(decide(&vera, Some("carl"), &finance), Err(Denied::Role { .. })));
        let group = decide(&ops, Some("carl"), &finance).unwrap_err();
        assert_eq!(
            group.to_string(),
            "principal `ops` may not decide `create_refund`: its policy lets only the group(s) `finance` decide it, and `ops` is in the group(s) `ops`"
        );
        assert!(matches!(decide(&boss, Some("carl"), &finance), Err(Denied::Group { .. })), "admins too");
        let own = decide(&fin, Some("fin"), &finance).unwrap_err();
        assert!(matches!(own, Denied::OwnSession { .. }), "{own}");
        assert!(own.to_string().contains("started session `s-1`"), "{own}");
        assert_eq!(decide(&fin, None, &finance), Ok(()), "an unknown starter is nobody");
        let lenient = Rules { separation_of_duties: false };
        assert_eq!(lenient.may_decide(&fin, "s-1", Some("fin"), "create_refund", &finance), Ok(()));
        let sole = Caller::sole_admin(SHORTCUT);
        assert_eq!(decide(&sole, Some(SHORTCUT), &finance), Ok(()), "the one admin is exempt");
    }

    #[test]
    fn a_client_cancels_only_sessions_it_started_and_approvers_and_admins_any() {
        let rules = Rules::default();
        let carl = caller("carl", &[Role::Client], &[]);
        assert_eq!(rules.may_cancel(&carl, "s-1", Some("carl")), Ok(()));
        let other = rules.may_cancel(&carl, "s-1", Some("dana")).unwrap_err();
        assert!(matches!(other, Denied::NotOwnSession { .. }), "{other}");
        assert!(other.to_string().contains("cancels only sessions it started"), "{other}");
        assert!(rules.may_cancel(&carl, "s-1", None).is_err(), "an unknown starter is not carl");
        for role in [Role::Approver, Role::Admin] {
            assert_eq!(rules.may_cancel(&caller("p", &[role], &[]), "s-1", Some("dana")), Ok(()), "{role}");
        }
        let vera = rules.may_cancel(&caller("vera", &[Role::Viewer], &[]), "s-1", Some("vera")).unwrap_err();
        assert!(matches!(vera, Denied::Role { .. }), "{vera}");
        assert_eq!(rules.may_cancel(&Caller::sole_admin(OPEN), "s-1", None), Ok(()));
    }

    #[test]
    fn a_caller_who_may_not_decide_is_told_who_is_awaited() {
        let rules = Rules::default();
        let finance = ["finance".to_owned()];
        assert_eq!(
            awaited(rules, &[], Some("carl")),
            "waiting for approval by an approver other than carl, who started the session"
        );
        assert_eq!(awaited(rules, &finance, Some("carl")), "waiting for approval by finance");
        assert_eq!(awaited(rules, &[], None), "waiting for approval by an approver");
        // The single-user setting: without separation of duties the starter decides its own calls.
        let single = Rules { separation_of_duties: false };
        assert_eq!(awaited(single, &[], Some("carl")), "waiting for approval by an approver");
        let carl = caller("carl", &[Role::Client, Role::Approver], &[]);
        assert_eq!(single.may_decide(&carl, "s-1", Some("carl"), "create_refund", &[]), Ok(()));
    }
}
