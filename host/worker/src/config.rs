//! `tollgate.toml`, an agent's configuration: its schema, defaults and errors, parsed once.
//! Read [`AgentConfig`] first.
//!
//! ```toml
//! [agent]
//! name = "support"                  # what sessions name; default: the folder's name
//! flow_type = "SupportAgent"        # a label
//! options_factory = "agent.wasm"    # or a static [options] table
//! spend_limit_usd = 5.0             # no new segment once a session spent this much
//! segment_timeout_secs = 900        # one CLI run
//! max_lost_workers = 10             # a segment's lost Workers before its turn fails
//!
//! [options]                         # used when there is no factory; tollgate_engine::options
//! model = "claude-sonnet-4-5"
//! tools = ["Read", "Grep"]
//!
//! [policies]                        # see tollgate_engine::policy
//! create_refund = { effect = "non_idempotent_write" }
//!
//! [tools.payments]                  # the component's grants; see tollgate_sandbox::ManifestFile
//! allowed_outbound_hosts = ["https://payments.example.com"]
//!
//! [sandbox]                         # the box the agent's CLI runs in; see tollgate_box
//! allowed_outbound_hosts = ["https://api.github.com"]   # through the Worker's egress proxy
//! memory_mb = 4096                  # limits; see tollgate_box::Limits for each default
//! read_only_paths = ["/opt/tools"]  # host folders bound read-only into the box
//! ```
//!
//! | key | default |
//! | --- | --- |
//! | `[agent] name` | the agent folder's name (see [`tollgate_store::check_agent_name`]) |
//! | `[agent] flow_type` | none |
//! | `[agent] options_factory` | none: the `[options]` table gives the options |
//! | `[agent] spend_limit_usd` | no limit |
//! | `[agent] segment_timeout_secs` | 900 ([`DEFAULT_SEGMENT_TIMEOUT`]) |
//! | `[agent] max_lost_workers` | 10 ([`tollgate_engine::session::DEFAULT_MAX_LOST_WORKERS`]) |
//! | `[options]` | the CLI's defaults |
//! | `[policies]` | the policy table's defaults |
//! | `[tools.<name>]` | the `<name>.toml` beside the component, or none (everything denied) |
//! | `[sandbox] allowed_outbound_hosts` | none: the agent's processes reach only the model proxy |
//! | `[sandbox] memory_mb`, `tasks`, `cpu_secs`, `workspace_mb`, `scratch_mb` | [`tollgate_box::Limits::default`] |
//! | `[sandbox] read_only_paths` | none |
//!
//! An agent directory without the file has the defaults. Every table is checked here, once: an
//! unknown table or key, a value of the wrong type, options that would bypass the gate
//! ([`check_options`]), a bad policy or manifest table — each a [`ConfigError`] naming the file,
//! the line and the key.
//!
//! [`AgentConfig::parse`] is pure. The text comes from [`crate::bundle::Bundle::read`] for the
//! Worker, `serve` and `agent lock` (the same bytes the lock's digest is computed from) and from
//! [`AgentConfig::read`] for `tollgate tools`.
//!
//! The binary owns this type: the file's tables belong to three crates — `[policies]` to
//! `tollgate-engine`, `[options]` to its `options` module, `[tools.<name>]` to
//! `tollgate-sandbox`'s manifests — and only the binary depends on all of them; `[agent]` (the
//! limits, the timeout, the factory's path) is the binary's own.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use tollgate_engine::catalog::DEFAULT_TOOL_SERVER_NAME;
use tollgate_engine::options::{AgentOptions, CheckedOptions, check_options};
use tollgate_engine::policy::Policies;
use tollgate_engine::session::Limits;
use tollgate_sandbox::{ManifestFile, Manifests};
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

/// The file name of an agent's configuration.
pub const CONFIG_FILE: &str = "tollgate.toml";

/// The default limit of one segment (the reference adapters' "Limits": 15 minutes).
pub const DEFAULT_SEGMENT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The tables `tollgate.toml` may have, as an error lists them.
const TABLES: &str = "[agent], [options], [policies], [tools.<name>], [sandbox]";

/// An agent's `tollgate.toml`, parsed and checked. See the module documentation for the schema.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The file (it need not exist).
    pub path: PathBuf,
    /// What sessions name this agent by (`[agent] name`; `None`: the folder's name).
    pub name: Option<String>,
    /// A label (`[agent] flow_type`).
    pub flow_type: Option<String>,
    /// The options factory's path as written, relative to the agent directory.
    pub options_factory: Option<PathBuf>,
    /// The limits the state machine enforces (`[agent] spend_limit_usd`, `max_lost_workers`).
    pub limits: Limits,
    /// How long one segment may run (`[agent] segment_timeout_secs`).
    pub segment_timeout: Duration,
    /// The static `[options]`, checked; `None` when the table is absent.
    pub options: Option<CheckedOptions>,
    /// The `[policies]` table.
    pub policies: Policies,
    /// The `[tools.<name>]` tables, with paths relative to the agent directory.
    pub manifests: Manifests,
    /// The `[sandbox]` table.
    pub sandbox: SandboxSettings,
}

/// The `[sandbox]` table: what the agent's box may reach and its limits.
#[derive(Clone, Debug, Default)]
pub struct SandboxSettings {
    /// Where the agent's processes may connect, through the Worker's egress proxy (the tools'
    /// `allowed_outbound_hosts` syntax). Empty: nowhere but the model proxy.
    pub allowed_outbound_hosts: tollgate_sandbox::AllowedHosts,
    /// The box's limits.
    pub limits: tollgate_box::Limits,
    /// Host folders bound read-only into the box at their own paths.
    pub read_only_paths: Vec<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SandboxTable {
    #[serde(default)]
    allowed_outbound_hosts: Vec<Spanned<String>>,
    memory_mb: Option<u64>,
    tasks: Option<u64>,
    cpu_secs: Option<u64>,
    workspace_mb: Option<u64>,
    scratch_mb: Option<u64>,
    #[serde(default)]
    read_only_paths: Vec<Spanned<PathBuf>>,
}

/// What is wrong with a `tollgate.toml`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A syntax error, or a table, key or value the schema refuses.
    #[error("{}{}: {message}", path.display(), line.map(|line| format!(":{line}")).unwrap_or_default())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The line (from 1), when the parser knows it.
        line: Option<usize>,
        /// The dotted key at fault (`agent.spend_limit_usd`, `options.permission_mode`), or `""`
        /// for a syntax error.
        key: String,
        /// What is wrong, naming the key.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentTable {
    name: Option<Spanned<String>>,
    flow_type: Option<String>,
    options_factory: Option<PathBuf>,
    spend_limit_usd: Option<Spanned<f64>>,
    segment_timeout_secs: Option<Spanned<u64>>,
    max_lost_workers: Option<u32>,
}

impl AgentConfig {
    /// The configuration of an agent directory without `tollgate.toml` at `path`.
    pub fn defaults(path: PathBuf) -> AgentConfig {
        AgentConfig {
            path,
            name: None,
            flow_type: None,
            options_factory: None,
            limits: Limits::default(),
            segment_timeout: DEFAULT_SEGMENT_TIMEOUT,
            options: None,
            policies: Policies::default(),
            manifests: Manifests::default(),
            sandbox: SandboxSettings::default(),
        }
    }

    /// Reads and parses `dir/tollgate.toml`; `None` when there is no such file.
    ///
    /// # Errors
    /// An unreadable file, or what [`AgentConfig::parse`] refuses.
    pub fn read(dir: &Path) -> Result<Option<AgentConfig>, ConfigError> {
        let path = dir.join(CONFIG_FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|source| ConfigError::Io { path: path.clone(), source })?;
        Self::parse(&path, &text).map(Some)
    }

    /// Parses `text`, the contents of `path` (named in errors; relative paths in `[tools.<name>]`
    /// are against its folder).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for the first problem in the file's order; the checks across
    /// tables (`options_factory` with `[options]`) come last.
    pub fn parse(path: &Path, text: &str) -> Result<AgentConfig, ConfigError> {
        let invalid = |span: Option<Range<usize>>, key: &str, message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            line: span.map(|span| line_of(text, span.start)),
            key: key.to_owned(),
            message,
        };
        // A value of the wrong type is named by its key; an unknown key names itself.
        let serde_error = |table: &str, entries: &[Entry], e: toml::de::Error| {
            let key = e.span().and_then(|span| entry_at(entries, span.start));
            let (key, at) = match key {
                Some(key) => (format!("{table}.{key}"), format!("[{table}] {key}")),
                None => (table.to_owned(), format!("[{table}]")),
            };
            invalid(e.span(), &key, format!("{at}: {}", e.message().trim_end()))
        };
        let root =
            DeTable::parse(text).map_err(|e| invalid(e.span(), "", e.message().trim_end().to_owned()))?;
        let mut config = AgentConfig::defaults(path.to_path_buf());
        let mut agent = None;
        let mut options_at = None;
        for (name, value) in root.into_inner() {
            let at = name.span();
            match name.get_ref().as_ref() {
                "agent" => {
                    let entries = entries(&value);
                    agent = Some(de::<AgentTable>(value).map_err(|e| serde_error("agent", &entries, e))?);
                }
                "options" => {
                    options_at = Some(at);
                    let entries = entries(&value);
                    let options: AgentOptions = de(value).map_err(|e| serde_error("options", &entries, e))?;
                    let checked = check_options(options, DEFAULT_TOOL_SERVER_NAME).map_err(|e| {
                        let key = e.option();
                        let span =
                            entries.iter().find(|entry| entry.key == key).map(|entry| entry.key_span.clone());
                        invalid(span, &format!("options.{key}"), format!("[options] {key}: {e}"))
                    })?;
                    config.options = Some(checked);
                }
                "policies" => {
                    let entries = entries(&value);
                    config.policies = de(value).map_err(|e| serde_error("policies", &entries, e))?;
                }
                "tools" => {
                    let span = value.span();
                    let DeValue::Table(tables) = value.into_inner() else {
                        return Err(invalid(
                            Some(span),
                            "tools",
                            "`tools` must be a table of `[tools.<component>]` tables".to_owned(),
                        ));
                    };
                    // Directories in tollgate.toml are relative to the agent directory, not `tools/`.
                    let base = path.parent().unwrap_or(Path::new(".")).to_path_buf();
                    for (component, table) in tables {
                        let line = line_of(text, component.span().start);
                        let component = component.into_inner().into_owned();
                        let name = format!("tools.{component}");
                        let entries = entries(&table);
                        let file: ManifestFile = de(table).map_err(|e| serde_error(&name, &entries, e))?;
                        let origin = format!("{}:{line} [{name}]", path.display());
                        config.manifests.insert(component, file, origin, base.clone());
                    }
                }
                "sandbox" => {
                    let table_span = value.span();
                    let entries = entries(&value);
                    let table: SandboxTable = de(value).map_err(|e| serde_error("sandbox", &entries, e))?;
                    config.sandbox = sandbox_settings(table, |span, key, message| {
                        invalid(Some(span.unwrap_or_else(|| table_span.clone())), key, message)
                    })?;
                }
                other => {
                    return Err(invalid(
                        Some(at),
                        other,
                        format!("unknown table `[{other}]` (expected {TABLES})"),
                    ));
                }
            }
        }
        if let Some(agent) = agent {
            if let Some(limit) = agent.spend_limit_usd {
                let (span, limit) = (limit.span(), limit.into_inner());
                if !(limit.is_finite() && limit > 0.0) {
                    return Err(invalid(
                        Some(span),
                        "agent.spend_limit_usd",
                        format!("[agent] spend_limit_usd must be a positive number of dollars, not {limit}"),
                    ));
                }
                config.limits.spend_limit_usd = Some(limit);
            }
            if let Some(secs) = agent.segment_timeout_secs {
                if *secs.get_ref() == 0 {
                    return Err(invalid(
                        Some(secs.span()),
                        "agent.segment_timeout_secs",
                        "[agent] segment_timeout_secs must be at least 1".to_owned(),
                    ));
                }
                config.segment_timeout = Duration::from_secs(secs.into_inner());
            }
            if let Some(lost) = agent.max_lost_workers {
                config.limits.max_lost_workers = i64::from(lost);
            }
            if let Some(name) = agent.name {
                let span = name.span();
                let name = name.into_inner();
                tollgate_store::check_agent_name(&name)
                    .map_err(|why| invalid(Some(span), "agent.name", format!("[agent] name: {why}")))?;
                config.name = Some(name);
            }
            config.flow_type = agent.flow_type;
            config.options_factory = agent.options_factory;
        }
        if config.options_factory.is_some() && options_at.is_some() {
            return Err(invalid(
                options_at,
                "options",
                "set either [agent] options_factory or [options], not both".to_owned(),
            ));
        }
        Ok(config)
    }

    /// The static options: `[options]`, or the CLI's defaults without the table.
    pub fn static_options(&self) -> CheckedOptions {
        self.options.clone().unwrap_or_default()
    }
}

/// Checks the `[sandbox]` table: every outbound entry parses, every limit is one a box can work
/// with, every read-only path is absolute. `invalid` makes the error for a span, key and message.
fn sandbox_settings(
    table: SandboxTable,
    invalid: impl Fn(Option<Range<usize>>, &str, String) -> ConfigError,
) -> Result<SandboxSettings, ConfigError> {
    let mut hosts = Vec::with_capacity(table.allowed_outbound_hosts.len());
    for entry in &table.allowed_outbound_hosts {
        tollgate_sandbox::AllowedHosts::parse(&[entry.get_ref()]).map_err(|e| {
            invalid(Some(entry.span()), "sandbox.allowed_outbound_hosts", format!("[sandbox] {e}"))
        })?;
        hosts.push(entry.get_ref().clone());
    }
    let allowed_outbound_hosts = tollgate_sandbox::AllowedHosts::parse(&hosts)
        .map_err(|e| invalid(None, "sandbox.allowed_outbound_hosts", format!("[sandbox] {e}")))?;
    let defaults = tollgate_box::Limits::default();
    let limits = tollgate_box::Limits {
        memory_mb: table.memory_mb.unwrap_or(defaults.memory_mb),
        tasks: table.tasks.unwrap_or(defaults.tasks),
        cpu_secs: table.cpu_secs.unwrap_or(defaults.cpu_secs),
        workspace_mb: table.workspace_mb.unwrap_or(defaults.workspace_mb),
        scratch_mb: table.scratch_mb.unwrap_or(defaults.scratch_mb),
    };
    limits.check().map_err(|message| {
        let key = message.split(' ').next().unwrap_or_default();
        invalid(None, &format!("sandbox.{key}"), format!("[sandbox] {message}"))
    })?;
    let mut read_only_paths = Vec::new();
    for path in table.read_only_paths {
        if !path.get_ref().is_absolute() {
            return Err(invalid(
                Some(path.span()),
                "sandbox.read_only_paths",
                format!("[sandbox] read_only_paths: {} is not an absolute path", path.get_ref().display()),
            ));
        }
        read_only_paths.push(path.into_inner());
    }
    Ok(SandboxSettings { allowed_outbound_hosts, limits, read_only_paths })
}

/// Deserializes one table of the document.
fn de<T: DeserializeOwned>(value: Spanned<DeValue<'_>>) -> Result<T, toml::de::Error> {
    T::deserialize(ValueDeserializer::from(value))
}

/// One `key = value` of a table, with where each is.
struct Entry {
    key: String,
    key_span: Range<usize>,
    value_span: Range<usize>,
}

/// The entries of a table value (none for another value).
fn entries(value: &Spanned<DeValue<'_>>) -> Vec<Entry> {
    match value.get_ref() {
        DeValue::Table(table) => table
            .iter()
            .map(|(key, value)| Entry {
                key: key.get_ref().to_string(),
                key_span: key.span(),
                value_span: value.span(),
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The key whose value holds byte `offset`.
fn entry_at(entries: &[Entry], offset: usize) -> Option<&str> {
    entries.iter().find(|entry| entry.value_span.contains(&offset)).map(|entry| entry.key.as_str())
}

/// The line (from 1) of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset).unwrap_or(text).matches('\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AgentConfig, ConfigError> {
        AgentConfig::parse(Path::new("/agents/a/tollgate.toml"), text)
    }

    /// The error's text, line and key.
    fn error_of(text: &str) -> (String, Option<usize>, String) {
        let error = parse(text).expect_err("the configuration is refused");
        let ConfigError::Invalid { line, key, .. } = &error else { panic!("{error}") };
        (error.to_string(), *line, key.clone())
    }

    #[test]
    fn no_tables_are_the_defaults() {
        let config = parse("").unwrap();
        assert_eq!(config.segment_timeout, DEFAULT_SEGMENT_TIMEOUT);
        assert_eq!(config.limits, Limits::default());
        assert!(config.options.is_none() && config.options_factory.is_none() && config.manifests.is_empty());
        assert_eq!(config.static_options(), CheckedOptions::default());
    }

    #[test]
    fn the_sandbox_table_sets_the_box_and_refuses_what_it_cannot_use_by_key() {
        let config = parse(
            "[sandbox]\nallowed_outbound_hosts = [\"https://api.github.com\"]\nmemory_mb = 2048\n\
             read_only_paths = [\"/opt/tools\"]\n",
        )
        .unwrap();
        assert!(config.sandbox.allowed_outbound_hosts.allows_http("https", "api.github.com", None));
        assert_eq!(config.sandbox.limits.memory_mb, 2048);
        assert_eq!(config.sandbox.limits.tasks, tollgate_box::Limits::default().tasks);
        assert_eq!(config.sandbox.read_only_paths, [PathBuf::from("/opt/tools")]);
        assert!(parse("").unwrap().sandbox.allowed_outbound_hosts.is_empty(), "nothing open by default");
        let (text, line, key) = error_of("[sandbox]\nallowed_outbound_hosts = [\"https://x.com/path\"]\n");
        assert_eq!((line, key.as_str()), (Some(2), "sandbox.allowed_outbound_hosts"), "{text}");
        let (text, _, key) = error_of("[sandbox]\ntasks = 3\n");
        assert_eq!(key, "sandbox.tasks", "{text}");
        assert!(text.contains("tasks = 3 is below"), "{text}");
        let (text, line, key) = error_of("[sandbox]\nread_only_paths = [\"opt\"]\n");
        assert_eq!((line, key.as_str()), (Some(2), "sandbox.read_only_paths"), "{text}");
        let (text, line, _) = error_of("[sandbox]\nnetwork = true\n");
        assert!(line == Some(2) && text.contains("unknown field `network`"), "{text}");
    }

    #[test]
    fn every_table_is_read_into_its_type() {
        let config = parse(
            "[agent]\nflow_type = \"Support\"\nspend_limit_usd = 2.5\nsegment_timeout_secs = 60\n\
             max_lost_workers = 4\n[options]\nmodel = \"m\"\n[policies]\nBash = { effect = \"read\" }\n\
             [tools.payments]\nmemory_mb = 16\n",
        )
        .unwrap();
        assert_eq!(config.flow_type.as_deref(), Some("Support"));
        assert_eq!(config.limits.spend_limit_usd, Some(2.5));
        assert_eq!(config.segment_timeout, Duration::from_secs(60));
        assert_eq!(config.limits.max_lost_workers, 4);
        assert_eq!(config.static_options().model.as_deref(), Some("m"));
        assert!(config.policies.get("Bash").is_some());
        assert!(!config.manifests.is_empty());
        let factory = parse("[agent]\noptions_factory = \"agent.wasm\"\n").unwrap();
        assert_eq!(factory.options_factory, Some(PathBuf::from("agent.wasm")));
    }

    #[test]
    fn the_agent_name_is_read_and_a_bad_one_refused_naming_the_key_and_line() {
        assert_eq!(parse("[agent]\nname = \"billing-2\"\n").unwrap().name.as_deref(), Some("billing-2"));
        assert_eq!(parse("").unwrap().name, None, "the folder's name, decided by the loader");
        for bad in ["support@3", "sha256:ab", "", "a b"] {
            let (error, line, key) = error_of(&format!("[agent]\nflow_type = \"x\"\nname = {bad:?}\n"));
            assert!(
                error.contains("[agent] name: the agent name") && error.contains(&format!("{bad:?}")),
                "{error}"
            );
            assert_eq!((line, key.as_str()), (Some(3), "agent.name"), "{error}");
        }
    }

    #[test]
    fn an_unknown_table_is_refused_with_its_line() {
        let (error, line, key) = error_of("[agent]\n\n[agnet]\n");
        assert_eq!(
            error,
            "/agents/a/tollgate.toml:3: unknown table `[agnet]` (expected [agent], [options], [policies], [tools.<name>], [sandbox])"
        );
        assert_eq!((line, key.as_str()), (Some(3), "agnet"));
    }

    #[test]
    fn a_syntax_error_names_the_line() {
        let (error, line, _) = error_of("[agent]\nflow_type = \"x\n");
        assert_eq!(line, Some(2), "{error}");
        assert!(error.starts_with("/agents/a/tollgate.toml:2: "), "{error}");
    }

    #[test]
    fn bad_agent_keys_are_refused_naming_the_key_and_line() {
        let (error, line, key) = error_of("[agent]\nspend_limit = 1\n");
        assert!(error.contains("[agent]: unknown field `spend_limit`"), "{error}");
        assert_eq!((line, key.as_str()), (Some(2), "agent"));
        let (error, line, key) = error_of("[agent]\nflow_type = \"x\"\nspend_limit_usd = -1.0\n");
        assert!(
            error.ends_with(":3: [agent] spend_limit_usd must be a positive number of dollars, not -1"),
            "{error}"
        );
        assert_eq!((line, key.as_str()), (Some(3), "agent.spend_limit_usd"));
        let (error, line, key) = error_of("[agent]\nsegment_timeout_secs = 0\n");
        assert!(error.ends_with(":2: [agent] segment_timeout_secs must be at least 1"), "{error}");
        assert_eq!((line, key.as_str()), (Some(2), "agent.segment_timeout_secs"));
        let (error, _, _) = error_of("[agent]\nsegment_timeout_secs = \"soon\"\n");
        assert!(
            error.ends_with(":2: [agent] segment_timeout_secs: invalid type: string \"soon\", expected u64"),
            "{error}"
        );
    }

    #[test]
    fn options_that_would_bypass_the_gate_are_refused_at_their_key() {
        let (error, line, key) =
            error_of("[options]\nmodel = \"m\"\npermission_mode = \"bypassPermissions\"\n");
        assert!(
            error.ends_with(
                ":3: [options] permission_mode: permission mode `bypassPermissions` would let tool calls \
                 bypass the gate; use `default` or `dontAsk`"
            ),
            "{error}"
        );
        assert_eq!((line, key.as_str()), (Some(3), "options.permission_mode"));
        let (error, line, key) = error_of("[options]\npermission_mode = \"plan\"\n");
        assert!(
            error.contains(":2: [options] permission_mode: permission mode `plan` is not supported"),
            "{error}"
        );
        assert_eq!((line, key.as_str()), (Some(2), "options.permission_mode"));
        let (error, _, key) = error_of("[options]\nextra = { dangerously-skip-permissions = true }\n");
        assert!(error.contains("sets --dangerously-skip-permissions, which Tollgate owns"), "{error}");
        assert_eq!(key, "options.extra");
        let (error, _, _) = error_of("[options]\nmodle = \"m\"\n");
        assert!(error.contains("[options]: unknown field `modle`"), "{error}");
    }

    #[test]
    fn a_bad_policy_or_manifest_table_is_refused_naming_it() {
        let (error, _, key) = error_of("[policies]\nBash = { effect = \"sometimes\" }\n");
        assert!(error.contains("[policies]") && error.contains("sometimes"), "{error}");
        assert_eq!(key, "policies");
        let (error, line, key) = error_of("[agent]\n[tools.payments]\nallowed_hosts = [\"x\"]\n");
        assert!(error.contains("[tools.payments]") && error.contains("allowed_hosts"), "{error}");
        assert_eq!((line, key.as_str()), (Some(3), "tools.payments"));
        let (error, _, key) = error_of("tools = 1\n");
        assert!(error.contains("`tools` must be a table"), "{error}");
        assert_eq!(key, "tools");
    }

    #[test]
    fn a_factory_and_static_options_together_are_refused() {
        let (error, line, _) =
            error_of("[agent]\noptions_factory = \"agent.wasm\"\n[options]\nmodel = \"m\"\n");
        assert!(error.ends_with(":3: set either [agent] options_factory or [options], not both"), "{error}");
        assert_eq!(line, Some(3));
    }
}
