//! The agents a store knows: the [`AgentRegistry`] trait, implemented once for both backends
//! beside the shared [`crate::Store`] implementation, and reached from any store through
//! [`crate::Store::agents`].
//!
//! Read [`AgentRegistry::register_agent`] first. Every Worker and server registers the agent it
//! serves when it starts: its name, the digest of the bundle it loaded, and whether that bundle is
//! locked. One row per (name, digest), kept forever. The rows answer three questions: which agent
//! a new session gets when the request names none or names a digest, whether a session may be
//! pinned to a digest (only a locked bundle's Workers claim pinned sessions), and which agent a
//! session from before agents had names belongs to.
//!
//! Beside the rows, what Workers learned loading the bundle, for the processes that never load it:
//! the custom tools ([`AgentRegistry::publish_tools`]), and each Worker's tool components that did
//! not load ([`AgentRegistry::report_unavailable_tools`], one row per agent and Worker while it
//! has any, read back only while fresh).
//!
//! It does not decide what a request means (the API does) nor run anything: a session's agent name
//! is copied onto its steps, and [`crate::Store::claim_for`] claims by it.
//!
//! # Caveats
//!
//! - Adoption, at each registration: sessions that name no agent are adopted by the agent whose
//!   digest they recorded when exactly one agent registered that digest, else by the only agent the
//!   store knows when it knows one. A store shared by several agents before names existed keeps
//!   the sessions neither rule places unnamed (no Worker claims them), and says how many.

use std::sync::LazyLock;

use sqlx::Row;
use tollgate_store_macros::sqlx_bounds;

use crate::backend::Backend;
use crate::dialect::Dialect;
use crate::error::check_row_version;
use crate::*;

/// One (agent, digest) the store knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownAgent {
    /// The agent's name.
    pub name: String,
    /// A digest of its bundle that a Worker or server loaded.
    pub digest: String,
    /// Whether that bundle was locked when last registered: only then do its Workers claim
    /// sessions pinned to the digest.
    pub locked: bool,
    /// When it was first registered (DB clock, ms).
    pub first_seen_at: i64,
    /// When it was last registered.
    pub last_seen_at: i64,
}

/// What [`AgentRegistry::register_agent`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Registration {
    /// Sessions that named no agent and now name this one.
    pub adopted: u64,
    /// Sessions that still name no agent: no rule placed them, and no Worker claims them.
    pub unnamed: u64,
}

/// The store's registry of agents.
///
/// # Contract (checked by `testing::conformance` on both backends)
///
/// - Registering twice is one row; `locked` and `last_seen_at` are the last registration's.
/// - Registration, adoption and the adopted sessions' steps change in one transaction.
/// - Names are checked with [`check_agent_name`], digests as everywhere in the store.
#[async_trait::async_trait]
pub trait AgentRegistry: Send + Sync {
    /// Records that a Worker or server serves agent `name` from a bundle with `digest` (`locked`:
    /// checked against its lock file), and adopts the sessions that name no agent (see the module's
    /// caveats).
    async fn register_agent(
        &self,
        name: &str,
        digest: &str,
        locked: bool,
    ) -> Result<Registration, StoreError>;

    /// Adopts, as [`AgentRegistry::register_agent`] does, the sessions that name no agent, for an
    /// agent that registered before: a session created without a name while the agent's
    /// registration was in flight is adopted by the next call. Reads only (one index probe) when
    /// every session names an agent: `Ok(None)` then; else `Ok(Some(adopted))`.
    async fn adopt_unnamed(&self, name: &str, digest: &str) -> Result<Option<u64>, StoreError>;

    /// Every (agent, digest) registered, by name, then first registration.
    async fn known_agents(&self) -> Result<Vec<KnownAgent>, StoreError>;

    /// Publishes the custom tools a Worker loaded from agent `name`'s bundle `digest` (registered
    /// before: [`StoreError::Invalid`] otherwise), as a JSON array, for the processes that never
    /// load a bundle: `tollgate api` lists them to MCP clients. The last publication stands.
    async fn publish_tools(&self, name: &str, digest: &str, tools: &str) -> Result<(), StoreError>;

    /// The tools last published for agent `name`, from the digest registered last among those
    /// with tools; `Ok(None)` when no Worker published any.
    async fn agent_tools(&self, name: &str) -> Result<Option<AgentTools>, StoreError>;

    /// Records that Worker `worker`, serving agent `name` from bundle `digest`, could not load
    /// `components` at its last look at `tools/` (its report replaces the one before; none removes
    /// it). `changed_at` moves only when the list or the digest changed; `reported_at` moves at
    /// every report, so a Worker repeating an unchanged report says it is still there. Reports not
    /// repeated for [`FORGET_AFTER`] are removed.
    async fn report_unavailable_tools(
        &self,
        name: &str,
        worker: &str,
        digest: &str,
        components: &[UnavailableComponent],
    ) -> Result<(), StoreError>;

    /// Every report of [`AgentRegistry::report_unavailable_tools`] made within `fresh` of now (DB
    /// clock; an older one is a Worker that stopped without removing it), by agent, then Worker.
    async fn unavailable_tools(
        &self,
        fresh: std::time::Duration,
    ) -> Result<Vec<UnavailableTools>, StoreError>;
}

/// A tool component a Worker could not load (see [`AgentRegistry::report_unavailable_tools`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnavailableComponent {
    /// Its name (its file's stem in `tools/`).
    pub component: String,
    /// Why it did not load.
    pub reason: String,
    /// Whether its last good build (an earlier version of the file) still serves its tools.
    pub serving_last_good: bool,
}

/// One Worker's report of the tool components it could not load ([`AgentRegistry::unavailable_tools`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnavailableTools {
    /// The agent.
    pub agent: String,
    /// The Worker (its id in claims and logs).
    pub worker: String,
    /// The bundle's digest it serves.
    pub digest: String,
    /// The components, as reported (never empty).
    pub components: Vec<UnavailableComponent>,
    /// When the list last changed (DB clock, ms).
    pub changed_at: i64,
    /// When the Worker last reported it.
    pub reported_at: i64,
}

/// How often a Worker repeats a report of unavailable components that is still true (and looks
/// at its tools while idle).
pub const REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a report counts after it was made: a Worker that repeats it misses two
/// [`REPORT_EVERY`] before readers take it for gone.
pub const REPORT_FRESH: std::time::Duration = std::time::Duration::from_secs(90);

/// How long a report not repeated stays in the store before the next report (of any Worker)
/// removes it: long after readers stopped counting it ([`REPORT_FRESH`]), so an operator can still
/// find in the database what a Worker that died had reported.
pub const FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The longest Worker id a report takes, in bytes.
pub const MAX_WORKER_ID: usize = 200;

/// The tools a Worker published for an agent ([`AgentRegistry::agent_tools`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentTools {
    /// The bundle's digest they were loaded from.
    pub digest: String,
    /// The JSON array, as published.
    pub tools: String,
}

/// The registry's statements (the same text on both backends but for the clock), rendered once.
struct AgentStatements {
    /// Registers `$1` name, `$2` digest, `$3` row version, `$4` locked.
    upsert: &'static str,
    /// Names sessions without a name `$1` when they recorded digest `$2` and only `$1` registered it.
    adopt_by_digest: &'static str,
    /// Names every session without a name `$1` when `$1` is the only agent known.
    adopt_by_only_agent: &'static str,
    /// Copies the sessions' names onto their unnamed steps in flight.
    name_steps: &'static str,
    /// How many sessions name no agent.
    unnamed: &'static str,
    /// Whether any session names no agent (the partial index `sessions_unnamed`).
    any_unnamed: &'static str,
    /// Every row.
    list: &'static str,
    /// Sets `$3` tools of `$1` name, `$2` digest.
    publish_tools: &'static str,
    /// The newest registration of `$1` with tools.
    tools: &'static str,
    /// Sets the report of `$1` agent, `$2` worker: `$3` digest, `$4` components, `$5` row version.
    report_unavailable: &'static str,
    /// Removes the report of `$1` agent, `$2` worker.
    clear_unavailable: &'static str,
    /// Removes the reports not repeated for [`FORGET_AFTER`] (their Workers are long gone).
    forget_unavailable: &'static str,
    /// The reports made within `$1` ms of now.
    unavailable: &'static str,
}

fn statements<DB: Dialect>() -> &'static AgentStatements {
    fn render(now: &str) -> AgentStatements {
        AgentStatements {
            upsert: format!(
                "INSERT INTO agent_digests (name, digest, row_version, locked, first_seen_at, last_seen_at)
                 VALUES ($1, $2, $3, $4, {now}, {now})
                 ON CONFLICT (name, digest) DO UPDATE SET locked = excluded.locked,
                     last_seen_at = excluded.last_seen_at"
            )
            .leak(),
            adopt_by_digest: "UPDATE sessions SET agent_name = $1
                 WHERE agent_name IS NULL AND agent_digest = $2
                     AND (SELECT count(*) FROM agent_digests WHERE digest = $2) = 1",
            adopt_by_only_agent: "UPDATE sessions SET agent_name = $1
                 WHERE agent_name IS NULL
                     AND NOT EXISTS (SELECT 1 FROM agent_digests WHERE name <> $1)",
            name_steps: "UPDATE steps SET agent = (SELECT s.agent_name FROM sessions s
                     WHERE s.session_id = steps.session_id)
                 WHERE agent = '' AND state IN ('queued', 'claimed', 'waiting')
                     AND EXISTS (SELECT 1 FROM sessions s
                         WHERE s.session_id = steps.session_id AND s.agent_name IS NOT NULL)",
            unnamed: "SELECT count(*) AS n FROM sessions WHERE agent_name IS NULL",
            any_unnamed: "SELECT 1 FROM sessions WHERE agent_name IS NULL LIMIT 1",
            list: "SELECT name, digest, row_version, locked, first_seen_at, last_seen_at FROM agent_digests
                 ORDER BY name, first_seen_at, digest",
            publish_tools: "UPDATE agent_digests SET tools = $3 WHERE name = $1 AND digest = $2",
            tools:
                "SELECT digest, row_version, tools FROM agent_digests WHERE name = $1 AND tools IS NOT NULL
                 ORDER BY last_seen_at DESC, digest LIMIT 1",
            report_unavailable: format!(
                "INSERT INTO tools_unavailable (agent, worker, row_version, digest, components, changed_at,
                     reported_at)
                 VALUES ($1, $2, $5, $3, $4, {now}, {now})
                 ON CONFLICT (agent, worker) DO UPDATE SET row_version = excluded.row_version,
                     digest = excluded.digest, components = excluded.components,
                     changed_at = CASE WHEN tools_unavailable.components = excluded.components
                         AND tools_unavailable.digest = excluded.digest
                         THEN tools_unavailable.changed_at ELSE excluded.changed_at END,
                     reported_at = excluded.reported_at"
            )
            .leak(),
            clear_unavailable: "DELETE FROM tools_unavailable WHERE agent = $1 AND worker = $2",
            forget_unavailable: format!(
                "DELETE FROM tools_unavailable WHERE reported_at < {now} - {}",
                FORGET_AFTER.as_millis()
            )
            .leak(),
            unavailable: format!(
                "SELECT agent, worker, row_version, digest, components, changed_at, reported_at
                 FROM tools_unavailable WHERE reported_at >= {now} - $1 ORDER BY agent, worker"
            )
            .leak(),
        }
    }
    static SQLITE: LazyLock<AgentStatements> = LazyLock::new(|| render(<sqlx::Sqlite as Dialect>::NOW));
    static POSTGRES: LazyLock<AgentStatements> = LazyLock::new(|| render(<sqlx::Postgres as Dialect>::NOW));
    DB::pick(&SQLITE, &POSTGRES)
}

/// Names the sessions without a name that agent `name` (registered with `digest`) adopts, and
/// their steps in flight, inside `tx`; how many sessions.
#[sqlx_bounds(DB)]
async fn adopt<DB>(tx: &mut sqlx::Transaction<'_, DB>, name: &str, digest: &str) -> Result<u64, StoreError>
where
    DB: Dialect,
{
    let sql = statements::<DB>();
    let by_digest = sqlx::query(sql.adopt_by_digest).bind(name).bind(digest).execute(&mut **tx).await?;
    let by_only = sqlx::query(sql.adopt_by_only_agent).bind(name).execute(&mut **tx).await?;
    let adopted = DB::rows_affected(&by_digest) + DB::rows_affected(&by_only);
    if adopted > 0 {
        sqlx::query(sql.name_steps).execute(&mut **tx).await?;
    }
    Ok(adopted)
}

/// The agent a session of agent `name` (`None`: not adopted) may be pinned to `digest` under, read
/// in the transaction `tx` of the upgrade; else why not.
#[sqlx_bounds(DB)]
pub(crate) async fn pin_owner<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    session_id: &str,
    name: Option<&str>,
    digest: &str,
) -> Result<String, StoreError>
where
    DB: Dialect,
{
    let rows = sqlx::query(statements::<DB>().list).fetch_all(&mut **tx).await?;
    let mut owners = Vec::new();
    for row in &rows {
        let (owner, of, locked): (String, String, bool) =
            (row.try_get("name")?, row.try_get("digest")?, row.try_get("locked")?);
        if of == digest {
            owners.push((owner, locked));
        }
    }
    let refuse = |detail: String| StoreError::UpgradeRefused {
        session_id: session_id.to_owned(),
        to: digest.to_owned(),
        detail,
    };
    let owner = match name {
        Some(name) => owners.iter().find(|(owner, _)| owner == name).ok_or_else(|| {
            if owners.is_empty() {
                refuse(format!(
                    "no Worker of agent `{name}` has loaded that digest; start one on the bundle first"
                ))
            } else {
                let of: Vec<&str> = owners.iter().map(|(owner, _)| owner.as_str()).collect();
                refuse(format!(
                    "it is a digest of agent {}, and the session belongs to `{name}`",
                    of.join(", ")
                ))
            }
        })?,
        None => match owners.as_slice() {
            [one] => one,
            [] => return Err(refuse("no Worker of any agent has loaded that digest".into())),
            _ => return Err(refuse("several agents loaded that digest; the session names none".into())),
        },
    };
    if !owner.1 {
        return Err(refuse(format!(
            "agent `{}` was last loaded from that digest unlocked: its Workers run only unpinned \
             sessions, so none would run this one; lock the bundle (`tollgate agent lock`) first",
            owner.0
        )));
    }
    Ok(owner.0.clone())
}

#[sqlx_bounds(DB)]
#[async_trait::async_trait]
impl<B, DB> AgentRegistry for B
where
    B: Backend<Db = DB>,
    DB: Dialect,
{
    async fn register_agent(
        &self,
        name: &str,
        digest: &str,
        locked: bool,
    ) -> Result<Registration, StoreError> {
        check_agent_name(name).map_err(|what| StoreError::Invalid { what })?;
        crate::backend::check_digest(digest)?;
        let sql = statements::<DB>();
        let mut tx = self.begin_write().await?;
        sqlx::query(sql.upsert)
            .bind(name)
            .bind(digest)
            .bind(ROW_VERSION)
            .bind(locked)
            .execute(&mut *tx)
            .await?;
        let adopted = adopt::<DB>(&mut tx, name, digest).await?;
        let unnamed: i64 = sqlx::query(sql.unnamed).fetch_one(&mut *tx).await?.try_get("n")?;
        tx.commit().await?;
        if adopted > 0 {
            // Their steps are claimable now.
            self.signals().work_ready();
        }
        Ok(Registration { adopted, unnamed: u64::try_from(unnamed).unwrap_or(0) })
    }

    async fn adopt_unnamed(&self, name: &str, digest: &str) -> Result<Option<u64>, StoreError> {
        check_agent_name(name).map_err(|what| StoreError::Invalid { what })?;
        crate::backend::check_digest(digest)?;
        let sql = statements::<DB>();
        // On the writer's connection: an idle Worker asks at every poll, and on SQLite each read
        // connection it touched would keep its own page cache warm for nothing.
        if sqlx::query(sql.any_unnamed).fetch_optional(self.write_pool()).await?.is_none() {
            return Ok(None);
        }
        let mut tx = self.begin_write().await?;
        let adopted = adopt::<DB>(&mut tx, name, digest).await?;
        tx.commit().await?;
        if adopted > 0 {
            self.signals().work_ready();
        }
        Ok(Some(adopted))
    }

    async fn known_agents(&self) -> Result<Vec<KnownAgent>, StoreError> {
        let rows = sqlx::query(statements::<DB>().list).fetch_all(self.read_pool()).await?;
        rows.iter()
            .map(|row| {
                let name: String = row.try_get("name")?;
                let digest: String = row.try_get("digest")?;
                check_row_version("agent_digests", &format!("{name}/{digest}"), row.try_get("row_version")?)?;
                Ok(KnownAgent {
                    name,
                    digest,
                    locked: row.try_get("locked")?,
                    first_seen_at: row.try_get("first_seen_at")?,
                    last_seen_at: row.try_get("last_seen_at")?,
                })
            })
            .collect()
    }

    async fn publish_tools(&self, name: &str, digest: &str, tools: &str) -> Result<(), StoreError> {
        check_agent_name(name).map_err(|what| StoreError::Invalid { what })?;
        crate::backend::check_digest(digest)?;
        if !serde_json::from_str::<serde_json::Value>(tools).is_ok_and(|v| v.is_array()) {
            return Err(StoreError::Invalid { what: format!("the tools of `{name}` must be a JSON array") });
        }
        let done = sqlx::query(statements::<DB>().publish_tools)
            .bind(name)
            .bind(digest)
            .bind(tools)
            .execute(self.write_pool())
            .await?;
        if DB::rows_affected(&done) != 1 {
            return Err(StoreError::Invalid {
                what: format!("agent `{name}` was not registered from {digest}: register it first"),
            });
        }
        Ok(())
    }

    async fn report_unavailable_tools(
        &self,
        name: &str,
        worker: &str,
        digest: &str,
        components: &[UnavailableComponent],
    ) -> Result<(), StoreError> {
        check_agent_name(name).map_err(|what| StoreError::Invalid { what })?;
        crate::backend::check_digest(digest)?;
        if worker.is_empty() || worker.len() > MAX_WORKER_ID {
            return Err(StoreError::Invalid {
                what: format!("a Worker id must be 1 to {MAX_WORKER_ID} bytes, not {}", worker.len()),
            });
        }
        let sql = statements::<DB>();
        // Workers killed without a word leave reports nobody reads: the next report removes them.
        sqlx::query(sql.forget_unavailable).execute(self.write_pool()).await?;
        if components.is_empty() {
            sqlx::query(sql.clear_unavailable).bind(name).bind(worker).execute(self.write_pool()).await?;
            return Ok(());
        }
        let text = serde_json::to_string(components).expect("components serialize");
        sqlx::query(sql.report_unavailable)
            .bind(name)
            .bind(worker)
            .bind(digest)
            .bind(text.as_str())
            .bind(ROW_VERSION)
            .execute(self.write_pool())
            .await?;
        Ok(())
    }

    async fn unavailable_tools(
        &self,
        fresh: std::time::Duration,
    ) -> Result<Vec<UnavailableTools>, StoreError> {
        let fresh = i64::try_from(fresh.as_millis()).unwrap_or(i64::MAX / 2);
        let rows =
            sqlx::query(statements::<DB>().unavailable).bind(fresh).fetch_all(self.read_pool()).await?;
        rows.iter()
            .map(|row| {
                let agent: String = row.try_get("agent")?;
                let worker: String = row.try_get("worker")?;
                let key = format!("{agent}/{worker}");
                check_row_version("tools_unavailable", &key, row.try_get("row_version")?)?;
                let text: String = row.try_get("components")?;
                let components = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                    table: "tools_unavailable",
                    key: key.clone(),
                    detail: format!("components: {e}"),
                })?;
                Ok(UnavailableTools {
                    agent,
                    worker,
                    digest: row.try_get("digest")?,
                    components,
                    changed_at: row.try_get("changed_at")?,
                    reported_at: row.try_get("reported_at")?,
                })
            })
            .collect()
    }

    async fn agent_tools(&self, name: &str) -> Result<Option<AgentTools>, StoreError> {
        let Some(row) =
            sqlx::query(statements::<DB>().tools).bind(name).fetch_optional(self.read_pool()).await?
        else {
            return Ok(None);
        };
        let digest: String = row.try_get("digest")?;
        check_row_version("agent_digests", &format!("{name}/{digest}"), row.try_get("row_version")?)?;
        Ok(Some(AgentTools { digest, tools: row.try_get("tools")? }))
    }
}
