//! What a test does when a real dependency it needs is missing: it **fails**, naming what is
//! missing and how to install it, unless `TOLLGATE_SKIP_MISSING` names that dependency, when it
//! skips and says so on stderr (past libtest's capture). A skip is never silent.
//!
//! `TOLLGATE_SKIP_MISSING` is a comma-separated list of [`Dependency`] names: `cli` (the real
//! Claude Code CLI), `postgres`, `schemathesis`, `browser` (Chromium and chromedriver), `acp` (the
//! ACP clients the ACP face is tested with), or `all`.
//! It only lets a *missing* dependency skip: a test whose dependency is installed runs. An
//! unknown name fails the test that finds its dependency missing, so a typo cannot turn a
//! failure into a skip.
//!
//! ```text
//! TOLLGATE_SKIP_MISSING=cli,browser cargo test -p tollgate --test durable
//! ```
//!
//! `scripts/setup.sh` installs every dependency; each also has its own script (named in the
//! failure).

/// A real dependency some tests need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dependency {
    /// The real Claude Code CLI (`scripts/install-claude-cli.sh`).
    Cli,
    /// PostgreSQL's server binaries (`scripts/install-postgres.sh`).
    Postgres,
    /// schemathesis and openapi-spec-validator, the OpenAPI contract checkers
    /// (`scripts/install-api-checks.sh`).
    Schemathesis,
    /// Chromium and chromedriver (`scripts/install-chromium.sh`).
    Browser,
    /// The ACP clients nobody here wrote that drive `tollgate acp` (`scripts/install-acp-clients.sh`).
    AcpClients,
}

/// The variable naming the dependencies whose absence skips a test instead of failing it.
pub const SKIP_MISSING: &str = "TOLLGATE_SKIP_MISSING";

impl Dependency {
    /// Every dependency, in the order the docs list them.
    pub const ALL: [Dependency; 5] = [
        Dependency::Cli,
        Dependency::Postgres,
        Dependency::Schemathesis,
        Dependency::Browser,
        Dependency::AcpClients,
    ];

    /// Its name in `TOLLGATE_SKIP_MISSING`.
    pub fn name(self) -> &'static str {
        match self {
            Dependency::Cli => "cli",
            Dependency::Postgres => "postgres",
            Dependency::Schemathesis => "schemathesis",
            Dependency::Browser => "browser",
            Dependency::AcpClients => "acp",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Dependency::Cli => "the real Claude Code CLI",
            Dependency::Postgres => "PostgreSQL",
            Dependency::Schemathesis => "the API contract checkers (schemathesis, openapi-spec-validator)",
            Dependency::Browser => "Chromium and chromedriver",
            Dependency::AcpClients => "the ACP clients (acpx)",
        }
    }

    fn installer(self) -> &'static str {
        match self {
            Dependency::Cli => "scripts/install-claude-cli.sh",
            Dependency::Postgres => "scripts/install-postgres.sh",
            Dependency::Schemathesis => "scripts/install-api-checks.sh",
            Dependency::Browser => "scripts/install-chromium.sh",
            Dependency::AcpClients => "scripts/install-acp-clients.sh",
        }
    }

    /// Whether `TOLLGATE_SKIP_MISSING` lets a test skip when this dependency is missing.
    ///
    /// # Panics
    /// When the variable names something that is not a dependency (or is not Unicode).
    pub fn may_skip(self) -> bool {
        let Some(value) = std::env::var_os(SKIP_MISSING) else { return false };
        let value = value.to_str().unwrap_or_else(|| panic!("{SKIP_MISSING} is not Unicode: {value:?}"));
        self.named_in(value).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Whether the list `value` (as in `TOLLGATE_SKIP_MISSING`) names this dependency or `all`;
    /// an error naming the unknown entry and the known ones when it names anything else.
    fn named_in(self, value: &str) -> Result<bool, String> {
        let mut named = false;
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            if name != "all" && !Dependency::ALL.iter().any(|d| d.name() == name) {
                let known = Dependency::ALL.map(Dependency::name).join(", ");
                return Err(format!("{SKIP_MISSING}={value}: unknown `{name}`; the names are all, {known}"));
            }
            named |= name == "all" || name == self.name();
        }
        Ok(named)
    }
}

/// What `test` does on finding `dependency` missing (`detail`: what was looked for, where):
/// returns, after printing `!! SKIPPED …` on stderr, when `TOLLGATE_SKIP_MISSING` names it, so
/// the caller returns at once; panics otherwise, naming what is missing, how to install it and
/// how to skip instead.
///
/// # Panics
/// Unless `TOLLGATE_SKIP_MISSING` names `dependency` (or `all`).
#[track_caller]
pub fn missing(dependency: Dependency, test: &str, detail: &str) {
    let (what, name, installer) = (dependency.what(), dependency.name(), dependency.installer());
    if dependency.may_skip() {
        // Straight to the process's stderr: libtest captures `eprintln!` of a passing test, and a
        // skip must show under a plain `cargo test` too.
        let note = format!("!! SKIPPED {test}: {what} not found ({detail}); {SKIP_MISSING} names `{name}`\n");
        let _ = std::io::Write::write_all(&mut std::io::stderr(), note.as_bytes());
        return;
    }
    panic!(
        "{test} needs {what}, not found ({detail}).\n\
         Install it with {installer} (scripts/setup.sh installs everything), \
         or set {SKIP_MISSING}={name} to skip the tests that need it."
    );
}

#[cfg(test)]
mod tests {
    use super::Dependency::*;

    #[test]
    fn the_list_names_dependencies_or_all_and_refuses_anything_else() {
        assert_eq!(Postgres.named_in("cli, postgres"), Ok(true));
        assert_eq!(Browser.named_in("cli,postgres"), Ok(false));
        assert_eq!(Schemathesis.named_in("all"), Ok(true));
        assert_eq!(Cli.named_in(""), Ok(false));
        let typo = Postgres.named_in("postgres,chrome").unwrap_err();
        assert!(typo.contains("unknown `chrome`") && typo.contains("browser"), "{typo}");
    }
}
