//! Which agent a new session belongs to and which digest it runs under: the serving agent, a name,
//! a pinned digest or a pushed version (`NAME@K`), checked against what the store knows.

use crate::error::ClientError;
use tollgate_engine::session::EngineError;
use tollgate_store::{AgentDigest, Store};

/// The agent a process serves (`tollgate serve`): what its new sessions get by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingAgent {
    /// The agent's name.
    pub name: String,
    /// Its digest, pinned when the bundle is locked.
    pub digest: AgentDigest,
}

/// What a new session records: the agent it belongs to and the digest it runs under.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionAgent {
    /// The agent (`None`: none yet; the store's registry adopts it when an agent registers).
    pub name: Option<String>,
    /// The digest (`None`: not known).
    pub digest: Option<AgentDigest>,
}

impl From<&ServingAgent> for SessionAgent {
    fn from(serving: &ServingAgent) -> Self {
        SessionAgent { name: Some(serving.name.clone()), digest: Some(serving.digest.clone()) }
    }
}

/// The agent a new session asked for by `agent` (a name, or a digest) and `agent_digest` (a digest
/// to pin), with `serving` the agent of this process, if any. Without either, the serving agent, else
/// the only agent the store knows, else (no agent has started on the store yet) none: the first
/// agent to register adopts the session. A name is one a Worker or server registered (or the serving
/// agent's); a digest pins the session, so it must be of a locked bundle a Worker registered: the
/// session's steps go only to Workers of its agent that loaded it.
///
/// # Errors
/// [`ClientError::AgentUnavailable`] naming why and what the store knows; a malformed name or
/// digest as bad input.
pub async fn resolve_agent(
    store: &dyn Store,
    agent: Option<&str>,
    agent_digest: Option<&str>,
    serving: Option<&ServingAgent>,
) -> Result<SessionAgent, ClientError> {
    let (name, digest) = match (agent, agent_digest) {
        (Some(asked), digest) if asked.contains('@') => return pushed_version(store, asked, digest).await,
        (Some(asked), None) if asked.starts_with("sha256:") => (None, Some(asked)),
        (Some(asked), Some(digest)) if asked.starts_with("sha256:") => {
            if asked != digest {
                return Err(ClientError::AgentUnavailable(format!(
                    "`agent` {asked} and `agent_digest` {digest} are two digests; a session runs under one"
                )));
            }
            (None, Some(digest))
        }
        (asked, digest) => (asked, digest),
    };
    if let Some(name) = name {
        tollgate_store::check_agent_name(name)
            .map_err(|reason| EngineError::BadInput { field: "agent", reason })?;
    }
    if let Some(digest) = digest {
        check_digest(if agent_digest.is_some() { "agent_digest" } else { "agent" }, digest)?;
    }
    if let Some(serving) = serving
        && name.is_none_or(|name| name == serving.name)
        && digest.is_none_or(|digest| serving.digest.pinned && digest == serving.digest.digest)
    {
        return Ok(serving.into());
    }
    let known = store.agents().known_agents().await?;
    let pushed = store.versions().pushed_agents().await?;
    let mut names: Vec<&str> =
        known.iter().map(|k| k.name.as_str()).chain(pushed.iter().map(String::as_str)).collect();
    if let Some(serving) = serving {
        names.push(&serving.name);
    }
    names.sort_unstable();
    names.dedup();
    let listed = || if names.is_empty() { "none".to_owned() } else { names.join(", ") };
    let unavailable = |why: String| Err(ClientError::AgentUnavailable(why));
    if let Some(digest) = digest {
        let owners: Vec<_> =
            known.iter().filter(|k| k.digest == digest && name.is_none_or(|name| k.name == name)).collect();
        return match owners.as_slice() {
            [] => unavailable(match name {
                Some(name) => format!(
                    "no Worker of agent `{name}` has loaded {digest}; start one on that bundle first (agents: {})",
                    listed()
                ),
                None => format!("no Worker has loaded {digest}; start one on that bundle first"),
            }),
            [one] if !one.locked => unavailable(format!(
                "agent `{}` was loaded from {digest} unlocked: its Workers run only unpinned sessions, so \
                 none would run one pinned to it; lock the bundle (`tollgate agent lock`) or name the agent",
                one.name
            )),
            [one] => Ok(SessionAgent {
                name: Some(one.name.clone()),
                digest: Some(AgentDigest { digest: digest.to_owned(), pinned: true }),
            }),
            _ => unavailable(format!("several agents loaded {digest}; name the agent too")),
        };
    }
    let chosen = match name {
        Some(name) if names.contains(&name) => name,
        Some(name) => {
            return unavailable(format!(
                "no Worker or server of agent `{name}` has started on this store (agents: {})",
                listed()
            ));
        }
        None => match names.as_slice() {
            [one] => *one,
            // No agent has started on this store yet: the first to register adopts the session.
            [] => return Ok(SessionAgent::default()),
            _ => return unavailable(format!("this store serves several agents ({}): name one", listed())),
        },
    };
    if let Some(serving) = serving.filter(|serving| serving.name == chosen) {
        return Ok(serving.into());
    }
    // An agent with versions in the store: its current one, or its canary for that share of new
    // sessions, pinned (a Worker pulls it locked).
    if let Some(rollout) = store.versions().rollout(chosen).await? {
        let digest = match rollout.canary {
            Some((_, canary, share)) if percent() < share => canary,
            _ => rollout.current.1,
        };
        return Ok(SessionAgent {
            name: Some(chosen.to_owned()),
            digest: Some(AgentDigest { digest, pinned: true }),
        });
    }
    // The newest digest it was loaded from, as a record: any Worker of the agent runs it.
    let newest = known.iter().filter(|k| k.name == chosen).max_by_key(|k| k.last_seen_at);
    Ok(SessionAgent {
        name: Some(chosen.to_owned()),
        digest: newest.map(|k| AgentDigest { digest: k.digest.clone(), pinned: false }),
    })
}

/// `NAME@K`: version K of an agent pushed into the store, pinned (a Worker pulls it locked);
/// `digest`, when given too, must be that version's.
async fn pushed_version(
    store: &dyn Store,
    asked: &str,
    digest: Option<&str>,
) -> Result<SessionAgent, ClientError> {
    let bad = |reason: String| ClientError::from(EngineError::BadInput { field: "agent", reason });
    let (name, number) = asked.split_once('@').unwrap_or((asked, ""));
    tollgate_store::check_agent_name(name).map_err(bad)?;
    let number = number
        .parse::<i64>()
        .ok()
        .filter(|k| *k >= 1)
        .ok_or_else(|| bad(format!("{asked:?}: a version is `NAME@K`, K a number from 1")))?;
    let Some(version) = store.versions().agent_version(name, Some(number)).await? else {
        let versions = store.versions().agent_versions(name).await?;
        let have = match versions.last() {
            Some(last) => format!("it has versions 1 to {}", last.version),
            None => "no version of it was pushed (`tollgate agent push`)".to_owned(),
        };
        return Err(ClientError::AgentUnavailable(format!("agent `{name}` has no version {number}: {have}")));
    };
    if let Some(digest) = digest.filter(|digest| *digest != version.digest) {
        return Err(ClientError::AgentUnavailable(format!(
            "`agent` {asked} is {} and `agent_digest` is {digest}; a session runs under one",
            version.digest
        )));
    }
    Ok(SessionAgent {
        name: Some(name.to_owned()),
        digest: Some(AgentDigest { digest: version.digest, pinned: true }),
    })
}

/// A random whole percent, 0 to 99.
fn percent() -> i64 {
    let mut byte = [0u8; 2];
    getrandom::fill(&mut byte).expect("the OS random number generator failed");
    i64::from(u16::from_le_bytes(byte) % 100)
}

/// Refuses anything but `sha256:<64 lowercase hex digits>`.
pub fn check_digest(field: &'static str, digest: &str) -> Result<(), EngineError> {
    if tollgate_protocol::media::is_digest(digest) {
        Ok(())
    } else {
        Err(EngineError::BadInput {
            field,
            reason: format!("{digest:?} is not an agent digest (sha256: and 64 lowercase hex digits)"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const DEV: &str = "sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd";
    const C: &str = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

    fn pinned(digest: &str) -> Option<AgentDigest> {
        Some(AgentDigest { digest: digest.into(), pinned: true })
    }

    fn of(name: &str, digest: Option<AgentDigest>) -> SessionAgent {
        SessionAgent { name: Some(name.into()), digest }
    }

    /// What [`resolve_agent`] answers, or its error's text.
    async fn resolve(
        store: &dyn Store,
        agent: Option<&str>,
        digest: Option<&str>,
        serving: Option<&ServingAgent>,
    ) -> Result<SessionAgent, String> {
        resolve_agent(store, agent, digest, serving).await.map_err(|e| e.to_string())
    }

    #[tokio::test]
    async fn a_new_session_gets_the_agent_it_names_the_servers_or_the_only_one_and_never_one_no_worker_runs()
    {
        let dir = tempfile::tempdir().unwrap();
        let store = tollgate_store::SqliteStore::open(&dir.path().join("t.db")).await.unwrap();
        let store: &dyn Store = &store;
        assert_eq!(resolve(store, None, None, None).await, Ok(SessionAgent::default()), "no agent yet");
        store.agents().register_agent("support", A, true).await.unwrap();
        assert_eq!(
            resolve(store, None, None, None).await,
            Ok(of("support", Some(AgentDigest { digest: A.into(), pinned: false }))),
            "the only agent, its newest digest recorded"
        );
        store.agents().register_agent("billing", B, true).await.unwrap();
        store.agents().register_agent("billing", DEV, false).await.unwrap();
        let serving =
            ServingAgent { name: "support".into(), digest: AgentDigest { digest: A.into(), pinned: true } };
        assert_eq!(resolve(store, None, None, Some(&serving)).await, Ok(of("support", pinned(A))));
        assert_eq!(resolve(store, Some("support"), None, Some(&serving)).await, Ok(of("support", pinned(A))));
        assert_eq!(
            resolve(store, Some(A), None, None).await,
            Ok(of("support", pinned(A))),
            "a digest names its agent"
        );
        assert_eq!(resolve(store, Some("billing"), Some(B), None).await, Ok(of("billing", pinned(B))));
        assert_eq!(
            resolve(store, Some(B), Some(B), None).await,
            Ok(of("billing", pinned(B))),
            "the same digest twice"
        );
        let newest = resolve(store, Some("billing"), None, Some(&serving)).await.unwrap();
        assert_eq!(newest.name.as_deref(), Some("billing"));
        assert!(newest.digest.is_some_and(|d| !d.pinned), "a name alone pins nothing");
        let refused = [
            (None, None, "this store serves several agents (billing, support): name one"),
            (
                Some("nope"),
                None,
                "no Worker or server of agent `nope` has started on this store (agents: billing, support)",
            ),
            (Some(DEV), None, "agent `billing` was loaded from"),
            (Some("support"), Some(B), "no Worker of agent `support` has loaded"),
            (Some(A), Some(B), "are two digests"),
            (
                None,
                Some("sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"),
                "no Worker has loaded",
            ),
        ];
        for (agent, digest, why) in refused {
            let got = resolve(store, agent, digest, None).await;
            assert!(got.as_ref().is_err_and(|e| e.contains(why)), "{agent:?} {digest:?}: {got:?}");
        }
        // An agent pushed into the store but never run: its current version, pinned.
        let files = [("tollgate.toml".to_owned(), b"[agent]\n".to_vec())].into_iter().collect();
        let new = tollgate_store::NewVersion {
            name: "ops".into(),
            digest: DEV.into(),
            files,
            pushed_by: "carl".into(),
        };
        store.versions().push_version(new).await.unwrap();
        assert_eq!(resolve(store, Some("ops"), None, None).await, Ok(of("ops", pinned(DEV))));
        // A version by its number, pinned; the current one stays what others get.
        let files = [("tollgate.toml".to_owned(), b"[agent]\n# two\n".to_vec())].into_iter().collect();
        let two = tollgate_store::NewVersion {
            name: "ops".into(),
            digest: C.into(),
            files,
            pushed_by: "carl".into(),
        };
        store.versions().push_version(two).await.unwrap();
        assert_eq!(resolve(store, Some("ops@2"), None, None).await, Ok(of("ops", pinned(C))));
        assert_eq!(resolve(store, Some("ops@1"), Some(DEV), None).await, Ok(of("ops", pinned(DEV))));
        assert_eq!(resolve(store, Some("ops"), None, None).await, Ok(of("ops", pinned(DEV))));
        for (agent, digest, why) in [
            ("ops@3", None, "agent `ops` has no version 3: it has versions 1 to 2"),
            ("billing@1", None, "agent `billing` has no version 1: no version of it was pushed"),
            ("ops@1", Some(C), "a session runs under one"),
        ] {
            let got = resolve(store, Some(agent), digest, None).await;
            assert!(got.as_ref().is_err_and(|e| e.contains(why)), "{agent}: {got:?}");
        }
        let several = resolve(store, None, None, None).await.unwrap_err();
        assert!(several.contains("(billing, ops, support)"), "{several}");
        for (agent, digest, field) in [
            (Some("support@x"), None, "agent"),
            (Some("support@0"), None, "agent"),
            (Some("a b@1"), None, "agent"),
            (Some("a b"), None, "agent"),
            (None, Some("sha256:x"), "agent_digest"),
        ] {
            let got = resolve_agent(store, agent, digest, None).await;
            assert!(
                matches!(&got, Err(ClientError::BadInput(EngineError::BadInput { field: f, .. })) if *f == field),
                "{agent:?} {digest:?}: {got:?}"
            );
        }
    }
}
