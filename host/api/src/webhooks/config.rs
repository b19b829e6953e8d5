//! The `[[webhooks]]` file (`--webhooks FILE`), read and checked: pure, no network.
//!
//! ```toml
//! [[webhooks]]
//! name = "ops"                                   # optional; default: the URL
//! url = "https://hooks.example.com/tollgate"
//! secret_env = "OPS_WEBHOOK_SECRET"              # or `secret = "whsec_…"` or `secret_file = "PATH"`
//! events = ["interrupt.created", "interrupt.decided", "turn.completed", "turn.failed"]
//! timeout_secs = 10                              # optional: one attempt's limit
//! retry_initial_secs = 5                         # optional: the first retry's delay, doubled each time
//! max_attempts = 18                              # optional: then the delivery is `failed`
//! agents = ["billing"]                           # optional: only these agents' sessions (default: all)
//! ```
//!
//! Every error names the file, the line and the key. A secret is a Standard Webhooks secret:
//! `whsec_` and the base64 of 24 to 64 random bytes (the key); it may sit in the environment or in
//! a file instead of this one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
use toml::Spanned;

use super::EventType;

/// A configured webhook, checked.
#[derive(Clone)]
pub struct Webhook {
    /// Unique in the file; the key of its deliveries in the store.
    pub name: String,
    /// Where deliveries are POSTed.
    pub url: reqwest::Url,
    /// The HMAC key (the secret's decoded bytes).
    pub key: Vec<u8>,
    /// The event types it receives.
    pub events: Vec<EventType>,
    /// One attempt's limit.
    pub timeout: Duration,
    /// The first retry's delay; each later one doubles, up to [`MAX_RETRY_DELAY`].
    pub retry_initial: Duration,
    /// Attempts before the delivery is marked `failed`.
    pub max_attempts: i64,
    /// The agents whose sessions' events it receives (`None`: every agent's); the others' are
    /// marked delivered without being sent.
    pub agents: Option<Vec<String>>,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("name", &self.name)
            .field("url", &self.url.as_str())
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

/// The longest delay between two attempts.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(4 * 3600);
/// Default attempts: with 5 s doubling up to 4 h, the last one is about 26 h after the first.
pub const DEFAULT_MAX_ATTEMPTS: i64 = 18;

/// A bad webhooks file: the message names the file, the line and the key.
#[derive(Debug, thiserror::Error)]
#[error("{file}{}: {what}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ConfigError {
    /// The file.
    pub file: String,
    /// The line, when known.
    pub line: Option<usize>,
    /// What is wrong, naming the key.
    pub what: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    webhooks: Vec<Spanned<Entry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: Option<Spanned<String>>,
    url: Spanned<String>,
    secret: Option<Spanned<String>>,
    secret_env: Option<Spanned<String>>,
    secret_file: Option<Spanned<PathBuf>>,
    events: Spanned<Vec<Spanned<String>>>,
    timeout_secs: Option<Spanned<f64>>,
    retry_initial_secs: Option<Spanned<f64>>,
    max_attempts: Option<Spanned<i64>>,
    agents: Option<Spanned<Vec<String>>>,
}

/// Reads and checks the webhooks file at `path`; secrets from the environment through `env`.
///
/// # Errors
/// The file cannot be read, is not TOML of this shape, or a value is wrong.
pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Webhook>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        file: path.display().to_string(),
        line: None,
        what: format!("cannot read the webhooks file: {e}"),
    })?;
    parse(&path.display().to_string(), &text, path.parent().unwrap_or(Path::new(".")), env)
}

/// Parses the text of a webhooks file named `file`; `secret_file`s are relative to `dir`.
///
/// # Errors
/// As [`load`].
pub fn parse(
    file: &str,
    text: &str,
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Webhook>, ConfigError> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let err = |offset: usize, what: String| ConfigError {
        file: file.to_owned(),
        line: Some(line_of(offset)),
        what,
    };
    let parsed: File = toml::from_str(text).map_err(|e| ConfigError {
        file: file.to_owned(),
        line: e.span().map(|s| line_of(s.start)),
        what: e.message().to_owned(),
    })?;
    let mut hooks: Vec<Webhook> = Vec::new();
    for (i, entry) in parsed.webhooks.into_iter().enumerate() {
        let at = entry.span().start;
        let entry = entry.into_inner();
        let n = i + 1;
        let url_at = entry.url.span().start;
        let url = reqwest::Url::parse(entry.url.get_ref())
            .map_err(|e| err(url_at, format!("webhook {n}: `url` is not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(err(
                url_at,
                format!("webhook {n}: `url` must be http or https, not `{}`", url.scheme()),
            ));
        }
        let name = match &entry.name {
            Some(name) if name.get_ref().trim().is_empty() => {
                return Err(err(name.span().start, format!("webhook {n}: `name` is empty")));
            }
            Some(name) => name.get_ref().clone(),
            None => url.to_string(),
        };
        if hooks.iter().any(|h| h.name == name) {
            return Err(err(at, format!("webhook {n}: the name `{name}` is used twice (set `name`)")));
        }
        let secret = match (&entry.secret, &entry.secret_env, &entry.secret_file) {
            (Some(s), None, None) => (s.span().start, "secret", s.get_ref().clone()),
            (None, Some(var), None) => {
                let value = env(var.get_ref()).ok_or_else(|| {
                    err(var.span().start, format!("webhook {n}: `secret_env`: ${} is not set", var.get_ref()))
                })?;
                (var.span().start, "secret_env", value)
            }
            (None, None, Some(p)) => {
                let path = dir.join(p.get_ref());
                let value = std::fs::read_to_string(&path).map_err(|e| {
                    err(p.span().start, format!("webhook {n}: `secret_file` {}: {e}", path.display()))
                })?;
                (p.span().start, "secret_file", value.trim().to_owned())
            }
            (None, None, None) => {
                return Err(err(
                    at,
                    format!("webhook {n}: give one of `secret`, `secret_env`, `secret_file`"),
                ));
            }
            _ => {
                return Err(err(
                    at,
                    format!("webhook {n}: give only one of `secret`, `secret_env`, `secret_file`"),
                ));
            }
        };
        let key = decode_secret(&secret.2)
            .map_err(|why| err(secret.0, format!("webhook {n}: `{}`: {why}", secret.1)))?;
        let mut events = Vec::new();
        for e in entry.events.get_ref() {
            let t = EventType::parse(e.get_ref()).ok_or_else(|| {
                err(
                    e.span().start,
                    format!(
                        "webhook {n}: `events`: unknown event `{}` (known: {})",
                        e.get_ref(),
                        EventType::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                )
            })?;
            if !events.contains(&t) {
                events.push(t);
            }
        }
        if events.is_empty() {
            return Err(err(entry.events.span().start, format!("webhook {n}: `events` is empty")));
        }
        let secs = |v: &Option<Spanned<f64>>, key: &str, default: f64, max: f64| match v {
            None => Ok(Duration::from_secs_f64(default)),
            Some(v) if v.get_ref().is_finite() && *v.get_ref() > 0.0 && *v.get_ref() <= max => {
                Ok(Duration::from_secs_f64(*v.get_ref()))
            }
            Some(v) => {
                Err(err(v.span().start, format!("webhook {n}: `{key}` must be above 0 and at most {max}")))
            }
        };
        let max_attempts = match &entry.max_attempts {
            None => DEFAULT_MAX_ATTEMPTS,
            Some(v) if (1..=100).contains(v.get_ref()) => *v.get_ref(),
            Some(v) => {
                return Err(err(v.span().start, format!("webhook {n}: `max_attempts` must be 1 to 100")));
            }
        };
        let agents = match &entry.agents {
            None => None,
            Some(list) if list.get_ref().is_empty() => {
                return Err(err(
                    list.span().start,
                    format!("webhook {n}: `agents` is empty; leave it out for every agent"),
                ));
            }
            Some(list) => {
                for agent in list.get_ref() {
                    tollgate_store::check_agent_name(agent)
                        .map_err(|why| err(list.span().start, format!("webhook {n}: `agents`: {why}")))?;
                }
                Some(list.get_ref().clone())
            }
        };
        hooks.push(Webhook {
            agents,
            name,
            url,
            key,
            events,
            timeout: secs(&entry.timeout_secs, "timeout_secs", 10.0, 300.0)?,
            retry_initial: secs(&entry.retry_initial_secs, "retry_initial_secs", 5.0, 3600.0)?,
            max_attempts,
        });
    }
    Ok(hooks)
}

/// The key of a Standard Webhooks secret: `whsec_` then the base64 of 24 to 64 bytes.
///
/// # Errors
/// No `whsec_` prefix, not base64, or a key of another length.
pub fn decode_secret(secret: &str) -> Result<Vec<u8>, String> {
    let Some(b64) = secret.strip_prefix("whsec_") else {
        return Err("a secret starts with `whsec_` (then base64 of 24 to 64 random bytes)".into());
    };
    let key = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| format!("the part after `whsec_` is not base64: {e}"))?;
    if !(24..=64).contains(&key.len()) {
        return Err(format!("the key is {} bytes; it must be 24 to 64", key.len()));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn parse_with(text: &str, env: &[(&str, &str)]) -> Result<Vec<Webhook>, ConfigError> {
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        parse("hooks.toml", text, Path::new("/nonexistent"), &|k| {
            env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn a_full_entry_reads_with_its_defaults() {
        let hooks = parse_with(
            &format!(
                "[[webhooks]]\nurl = \"http://127.0.0.1:9/x\"\nsecret = \"{SECRET}\"\n\
                 events = [\"interrupt.created\", \"turn.failed\"]\n\n\
                 [[webhooks]]\nname = \"b\"\nurl = \"https://h.example/y\"\nsecret_env = \"S\"\n\
                 events = [\"turn.completed\"]\ntimeout_secs = 2\nretry_initial_secs = 0.5\nmax_attempts = 3\n"
            ),
            &[("S", SECRET)],
        )
        .unwrap();
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks[0].name, "http://127.0.0.1:9/x");
        assert_eq!(hooks[0].events, vec![EventType::InterruptCreated, EventType::TurnFailed]);
        assert_eq!(
            (hooks[0].timeout, hooks[0].max_attempts),
            (Duration::from_secs(10), DEFAULT_MAX_ATTEMPTS)
        );
        assert_eq!(hooks[1].key.len(), 24);
        assert_eq!((hooks[1].retry_initial, hooks[1].max_attempts), (Duration::from_millis(500), 3));
    }

    #[test]
    fn every_error_names_the_file_the_line_and_the_key() {
        let cases: &[(&str, &str)] = &[
            (
                "[[webhooks]]\nurl = \"x\"\nsecret = \"whsec_AA\"\nevents = []\n",
                "hooks.toml:2: webhook 1: `url` is not a URL",
            ),
            (
                &format!(
                    "[[webhooks]]\nurl = \"http://a/\"\nsecret = \"{SECRET}\"\nevents = [\"turn.done\"]\n"
                ),
                "hooks.toml:4: webhook 1: `events`: unknown event `turn.done`",
            ),
            (
                "[[webhooks]]\nurl = \"http://a/\"\nsecret = \"abc\"\nevents = [\"turn.failed\"]\n",
                "hooks.toml:3: webhook 1: `secret`: a secret starts with `whsec_`",
            ),
            (
                "[[webhooks]]\nurl = \"http://a/\"\nsecret_env = \"NOPE\"\nevents = [\"turn.failed\"]\n",
                "hooks.toml:3: webhook 1: `secret_env`: $NOPE is not set",
            ),
            (
                "[[webhooks]]\nurl = \"http://a/\"\nsecret = \"whsec_c2hvcnQ=\"\nevents = [\"turn.failed\"]\n",
                "hooks.toml:3: webhook 1: `secret`: the key is 5 bytes",
            ),
            (
                "[[webhooks]]\nurl = \"http://a/\"\nevents = [\"turn.failed\"]\n",
                "hooks.toml:1: webhook 1: give one of `secret`",
            ),
            (
                "[[webhooks]]\nurl = \"http://a/\"\nsecret = \"x\"\nevents = [\"turn.failed\"]\ncolour = 1\n",
                "hooks.toml:5: unknown field `colour`",
            ),
            (
                &format!(
                    "[[webhooks]]\nurl = \"http://a/\"\nsecret = \"{SECRET}\"\nevents = [\"turn.failed\"]\ntimeout_secs = 0\n"
                ),
                "hooks.toml:5: webhook 1: `timeout_secs` must be above 0",
            ),
        ];
        for (text, want) in cases {
            let got = parse_with(text, &[]).expect_err(want).to_string();
            assert!(got.starts_with(want), "want `{want}…`, got `{got}`");
        }
    }

    #[test]
    fn a_file_without_webhooks_is_an_empty_list_that_clears_the_subscriptions() {
        assert!(parse_with("", &[]).unwrap().is_empty());
        assert!(parse_with("# none yet\n", &[]).unwrap().is_empty());
    }

    #[test]
    fn an_endpoint_may_be_limited_to_agents_and_a_bad_list_is_refused_with_its_line() {
        let one =
            format!("[[webhooks]]\nurl = \"http://a/\"\nsecret = \"{SECRET}\"\nevents = [\"turn.failed\"]\n");
        let hooks = parse_with(&format!("{one}agents = [\"billing\", \"ops\"]\n"), &[]).unwrap();
        assert_eq!(hooks[0].agents.as_deref(), Some(&["billing".to_owned(), "ops".to_owned()][..]));
        assert_eq!(parse_with(&one, &[]).unwrap()[0].agents, None, "every agent by default");
        for (agents, why) in [("[]", "`agents` is empty"), ("[\"support@2\"]", "`agents`: the agent name")] {
            let err = parse_with(&format!("{one}agents = {agents}\n"), &[]).unwrap_err().to_string();
            assert!(err.starts_with("hooks.toml:5: webhook 1: ") && err.contains(why), "{err}");
        }
    }

    #[test]
    fn two_webhooks_with_one_name_are_refused() {
        let one =
            format!("[[webhooks]]\nurl = \"http://a/\"\nsecret = \"{SECRET}\"\nevents = [\"turn.failed\"]\n");
        let err = parse_with(&format!("{one}{one}"), &[]).unwrap_err().to_string();
        assert!(err.starts_with("hooks.toml:5: webhook 2: the name `http://a/` is used twice"), "{err}");
    }
}
