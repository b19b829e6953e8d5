//! Agents' versions in the store: the [`AgentVersions`] trait, implemented once for both backends
//! beside the shared [`crate::Store`] implementation, and reached from any store through
//! [`crate::Store::versions`].
//!
//! Read [`AgentVersions::push_version`] first. A pushed bundle becomes version `name@k` (k counting
//! from 1 per agent), with its agent digest, its files by path and digest, who pushed it and when.
//! Each file's bytes are kept once across every version and agent, keyed by the `sha256:` digest
//! the store computes, so no shared filesystem is needed: a Worker fetches a version's files by
//! digest ([`AgentVersions::bundle_file`]) and checks them. Versions never change. One agent has a
//! **current** version, what new sessions get: the first one pushed, then whichever
//! [`AgentVersions::promote`] names; [`AgentVersions::rollback`] returns to the one before.
//!
//! It does not know what a bundle means (the Worker's `bundle` module computes the agent digest and
//! loads the files) nor which sessions run where (sessions record their digest; see
//! [`crate::agents`]).
//!
//! # Caveats
//!
//! - A file is at most [`MAX_BUNDLE_FILE`] bytes, a bundle at most [`MAX_BUNDLE_FILES`] files.
//! - Two pushes of one agent at the same instant on PostgreSQL: one is refused
//!   ([`StoreError::Invalid`], saying to push again); nothing half-written.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use sqlx::Row;
use tollgate_store_macros::sqlx_bounds;

use crate::backend::Backend;
use crate::dialect::Dialect;
use crate::error::check_row_version;
use crate::*;

/// The largest file of a bundle, in bytes.
pub const MAX_BUNDLE_FILE: usize = 64 * 1024 * 1024;

/// The most files in one bundle.
pub const MAX_BUNDLE_FILES: usize = 1000;

/// A bundle to push as a new version of `name`.
#[derive(Clone, Debug)]
pub struct NewVersion {
    /// The agent (see [`check_agent_name`]).
    pub name: String,
    /// The bundle's agent digest, computed by the caller from `files`.
    pub digest: String,
    /// Each file's bytes by its path in the bundle (relative, `/`-separated).
    pub files: BTreeMap<String, Vec<u8>>,
    /// Who pushed it.
    pub pushed_by: String,
}

/// A version of an agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentVersion {
    /// The agent.
    pub name: String,
    /// Its number, from 1.
    pub version: i64,
    /// The bundle's agent digest.
    pub digest: String,
    /// Each file's `sha256:` digest by its path.
    pub files: BTreeMap<String, String>,
    /// Who pushed it.
    pub pushed_by: String,
    /// When (DB clock, ms).
    pub pushed_at: i64,
    /// Whether new sessions get it.
    pub current: bool,
    /// The percent of new sessions it gets as the agent's canary (`None`: not the canary).
    pub canary_share: Option<i64>,
    /// Sessions of the agent that recorded its digest.
    pub sessions: i64,
}

/// What [`AgentVersions::push_version`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The version the bundle is.
    pub version: i64,
    /// `false`: the agent had that bundle already (nothing was written).
    pub created: bool,
    /// Whether it is the current version.
    pub current: bool,
}

/// What new sessions of an agent get ([`AgentVersions::rollout`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollout {
    /// The current version and its digest.
    pub current: (i64, String),
    /// The canary: its version, digest and percent of new sessions.
    pub canary: Option<(i64, String, i64)>,
}

/// What [`AgentVersions::promote`] and [`AgentVersions::rollback`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promoted {
    /// The current version before.
    pub from: Option<i64>,
    /// The current version now.
    pub to: i64,
}

/// Agents' versions.
///
/// # Contract (checked by `testing::conformance` on both backends)
///
/// - A push stores each file once by the digest of its bytes and the version in one transaction:
///   all or nothing. Pushing a bundle the agent has already is a no-op naming its version.
/// - Versions number 1, 2, … per agent and never change; the first pushed is current.
/// - [`AgentVersions::promote`] of a version that does not exist is [`StoreError::Invalid`] and
///   changes nothing; [`AgentVersions::rollback`] without an earlier current version too.
#[async_trait::async_trait]
pub trait AgentVersions: Send + Sync {
    /// Stores `new` as the agent's next version (see the trait's contract).
    async fn push_version(&self, new: NewVersion) -> Result<Pushed, StoreError>;

    /// The agent's versions, oldest first (none: no version was pushed).
    async fn agent_versions(&self, name: &str) -> Result<Vec<AgentVersion>, StoreError>;

    /// The agent's version `version`, or its current one (`None`).
    async fn agent_version(
        &self,
        name: &str,
        version: Option<i64>,
    ) -> Result<Option<AgentVersion>, StoreError>;

    /// Makes `version` the one new sessions get (and ends any canary), or with `share` (1 to 99)
    /// its canary: that percent of new sessions get it, the rest the current one.
    async fn promote(&self, name: &str, version: i64, share: Option<i64>) -> Result<Promoted, StoreError>;

    /// What new sessions of the agent get: its current version and its canary, if any (`None`:
    /// no version pushed). Reads no session.
    async fn rollout(&self, name: &str) -> Result<Option<Rollout>, StoreError>;

    /// Makes the version current before the last promotion current again, and ends any canary.
    async fn rollback(&self, name: &str) -> Result<Promoted, StoreError>;

    /// A bundle file's bytes by digest.
    async fn bundle_file(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// The agents with at least one version, by name.
    async fn pushed_agents(&self) -> Result<Vec<String>, StoreError>;
}

struct VersionStatements {
    /// `$1` name, `$2` digest: the version, if the agent has that bundle.
    version_of_digest: &'static str,
    /// Inserts file `$1` digest, `$2` row version, `$3` size, `$4` data unless it exists.
    insert_file: &'static str,
    /// The next version number of `$1`.
    next_version: &'static str,
    /// Inserts version (`$1` name, `$2` version, `$3` row version, `$4` digest, `$5` files, `$6` by).
    insert_version: &'static str,
    /// `$1`'s current row.
    current: &'static str,
    /// Makes `$2` current for `$1` (`$3` row version) with `$4` the one before, `$5` the canary
    /// and `$6` its share; inserts the row.
    set_current: &'static str,
    /// Every version of `$1`.
    versions: &'static str,
    /// Version `$2` of `$1`.
    version: &'static str,
    /// Sessions of agent `$1` by digest: `agent_digest`, `n`.
    sessions_by_digest: &'static str,
    /// File `$1`'s bytes.
    file: &'static str,
    /// Every agent with a version.
    names: &'static str,
}

fn statements<DB: Dialect>() -> &'static VersionStatements {
    fn render(now: &str) -> VersionStatements {
        let keep = |s: String| -> &'static str { s.leak() };
        VersionStatements {
            version_of_digest: "SELECT version FROM agent_versions WHERE name = $1 AND digest = $2",
            insert_file: keep(format!(
                "INSERT INTO bundle_files (digest, row_version, size, data, created_at)
                 VALUES ($1, $2, $3, $4, {now}) ON CONFLICT (digest) DO NOTHING"
            )),
            next_version: "SELECT COALESCE(max(version), 0) + 1 AS next FROM agent_versions WHERE name = $1",
            insert_version: keep(format!(
                "INSERT INTO agent_versions (name, version, row_version, digest, files, pushed_by, pushed_at)
                 VALUES ($1, $2, $3, $4, $5, $6, {now})"
            )),
            current: "SELECT version, previous, canary, canary_share FROM agent_current WHERE name = $1",
            set_current: keep(format!(
                "INSERT INTO agent_current (name, row_version, version, previous, canary, canary_share, updated_at)
                 VALUES ($1, $3, $2, $4, $5, $6, {now})
                 ON CONFLICT (name) DO UPDATE SET version = excluded.version, previous = excluded.previous,
                     canary = excluded.canary, canary_share = excluded.canary_share,
                     updated_at = excluded.updated_at"
            )),
            versions:
                "SELECT name, version, row_version, digest, files, pushed_by, pushed_at FROM agent_versions
                 WHERE name = $1 ORDER BY version",
            version:
                "SELECT name, version, row_version, digest, files, pushed_by, pushed_at FROM agent_versions
                 WHERE name = $1 AND version = $2",
            sessions_by_digest: "SELECT agent_digest, count(*) AS n FROM sessions
                 WHERE agent_name = $1 AND agent_digest IS NOT NULL GROUP BY agent_digest",
            file: "SELECT row_version, data FROM bundle_files WHERE digest = $1",
            names: "SELECT DISTINCT name FROM agent_versions ORDER BY name",
        }
    }
    static SQLITE: LazyLock<VersionStatements> = LazyLock::new(|| render(<sqlx::Sqlite as Dialect>::NOW));
    static POSTGRES: LazyLock<VersionStatements> = LazyLock::new(|| render(<sqlx::Postgres as Dialect>::NOW));
    DB::pick(&SQLITE, &POSTGRES)
}

/// `sha256:` and the hex SHA-256 of `bytes` (as [`crate::media::digest_of`]).
pub fn file_digest(bytes: &[u8]) -> String {
    crate::media::digest_of(bytes)
}

fn invalid(what: String) -> StoreError {
    StoreError::Invalid { what }
}

/// Refuses a bundle the store cannot keep, naming the file.
fn check(new: &NewVersion) -> Result<(), StoreError> {
    check_agent_name(&new.name).map_err(invalid)?;
    crate::backend::check_digest(&new.digest)?;
    if new.pushed_by.is_empty() || new.pushed_by.len() > 200 {
        return Err(invalid("who pushed a version must be 1 to 200 bytes".into()));
    }
    if new.files.is_empty() || new.files.len() > MAX_BUNDLE_FILES {
        return Err(invalid(format!("a bundle has 1 to {MAX_BUNDLE_FILES} files, not {}", new.files.len())));
    }
    for (path, bytes) in &new.files {
        let parts_ok = path.split('/').all(|part| !part.is_empty() && part != "." && part != "..");
        if path.is_empty() || path.len() > 255 || path.contains('\\') || path.contains('\0') || !parts_ok {
            return Err(invalid(format!(
                "{path:?} is not a bundle path: relative, `/`-separated, no `.` or `..`, 1 to 255 bytes"
            )));
        }
        if bytes.len() > MAX_BUNDLE_FILE {
            return Err(invalid(format!("{path} is {} bytes, over {MAX_BUNDLE_FILE}", bytes.len())));
        }
    }
    Ok(())
}

/// An agent's `agent_current` row.
#[derive(Clone, Copy, Debug, Default)]
struct Current {
    version: i64,
    previous: Option<i64>,
    /// The canary version and the percent of new sessions it gets.
    canary: Option<(i64, i64)>,
}

#[sqlx_bounds(DB)]
async fn current_of<DB>(
    conn: impl sqlx::Executor<'_, Database = DB>,
    name: &str,
) -> Result<Option<Current>, StoreError>
where
    DB: Dialect,
{
    let row = sqlx::query(statements::<DB>().current).bind(name).fetch_optional(conn).await?;
    let Some(row) = row else { return Ok(None) };
    let canary: Option<i64> = row.try_get("canary")?;
    let share: Option<i64> = row.try_get("canary_share")?;
    Ok(Some(Current {
        version: row.try_get("version")?,
        previous: row.try_get("previous")?,
        canary: canary.zip(share),
    }))
}

/// Writes `name`'s current row.
#[sqlx_bounds(DB)]
async fn set_current<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    name: &str,
    to: Current,
) -> Result<(), StoreError>
where
    DB: Dialect,
{
    sqlx::query(statements::<DB>().set_current)
        .bind(name)
        .bind(to.version)
        .bind(ROW_VERSION)
        .bind(to.previous)
        .bind(to.canary.map(|(version, _)| version))
        .bind(to.canary.map(|(_, share)| share))
        .execute(&mut **tx)
        .await?;
    Ok(())
}

#[sqlx_bounds(DB)]
fn decode<DB>(
    row: &DB::Row,
    current: Option<Current>,
    sessions: &BTreeMap<String, i64>,
) -> Result<AgentVersion, StoreError>
where
    DB: Dialect,
{
    let name: String = row.try_get("name")?;
    let version: i64 = row.try_get("version")?;
    check_row_version("agent_versions", &format!("{name}@{version}"), row.try_get("row_version")?)?;
    let files: String = row.try_get("files")?;
    let files = serde_json::from_str(&files).map_err(|e| StoreError::Corrupt {
        table: "agent_versions",
        key: format!("{name}@{version}"),
        detail: format!("files is not a JSON object of paths to digests: {e}"),
    })?;
    let digest: String = row.try_get("digest")?;
    Ok(AgentVersion {
        sessions: sessions.get(&digest).copied().unwrap_or(0),
        current: current.is_some_and(|c| c.version == version),
        canary_share: current
            .and_then(|c| c.canary)
            .filter(|(canary, _)| *canary == version)
            .map(|(_, share)| share),
        name,
        version,
        digest,
        files,
        pushed_by: row.try_get("pushed_by")?,
        pushed_at: row.try_get("pushed_at")?,
    })
}

#[sqlx_bounds(DB)]
#[async_trait::async_trait]
impl<B, DB> AgentVersions for B
where
    B: Backend<Db = DB>,
    DB: Dialect,
{
    async fn push_version(&self, new: NewVersion) -> Result<Pushed, StoreError> {
        check(&new)?;
        let sql = statements::<DB>();
        let mut tx = self.begin_write().await?;
        let current = current_of::<DB>(&mut *tx, &new.name).await?.map(|c| c.version);
        let had = sqlx::query(sql.version_of_digest)
            .bind(new.name.as_str())
            .bind(new.digest.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(row) = had {
            let version: i64 = row.try_get("version")?;
            return Ok(Pushed { version, created: false, current: current == Some(version) });
        }
        let mut files = BTreeMap::new();
        for (path, bytes) in &new.files {
            let digest = file_digest(bytes);
            sqlx::query(sql.insert_file)
                .bind(digest.as_str())
                .bind(ROW_VERSION)
                .bind(i64::try_from(bytes.len()).unwrap_or(i64::MAX))
                .bind(bytes.as_slice())
                .execute(&mut *tx)
                .await?;
            files.insert(path.clone(), digest);
        }
        let version: i64 = sqlx::query(sql.next_version)
            .bind(new.name.as_str())
            .fetch_one(&mut *tx)
            .await?
            .try_get("next")?;
        let files = serde_json::to_string(&files).expect("strings serialize");
        sqlx::query(sql.insert_version)
            .bind(new.name.as_str())
            .bind(version)
            .bind(ROW_VERSION)
            .bind(new.digest.as_str())
            .bind(files.as_str())
            .bind(new.pushed_by.as_str())
            .execute(&mut *tx)
            .await
            .map_err(|e| match &e {
                sqlx::Error::Database(db) if db.is_unique_violation() => invalid(format!(
                    "another push of agent `{}` landed at the same time; push again",
                    new.name
                )),
                _ => e.into(),
            })?;
        let is_first = current.is_none();
        if is_first {
            set_current(&mut tx, &new.name, Current { version, ..Current::default() }).await?;
        }
        tx.commit().await?;
        Ok(Pushed { version, created: true, current: is_first })
    }

    async fn agent_versions(&self, name: &str) -> Result<Vec<AgentVersion>, StoreError> {
        let sql = statements::<DB>();
        let current = current_of::<DB>(self.read_pool(), name).await?;
        let mut sessions = BTreeMap::new();
        for row in sqlx::query(sql.sessions_by_digest).bind(name).fetch_all(self.read_pool()).await? {
            sessions.insert(row.try_get::<String, _>("agent_digest")?, row.try_get::<i64, _>("n")?);
        }
        let rows = sqlx::query(sql.versions).bind(name).fetch_all(self.read_pool()).await?;
        rows.iter().map(|row| decode::<DB>(row, current, &sessions)).collect()
    }

    async fn agent_version(
        &self,
        name: &str,
        version: Option<i64>,
    ) -> Result<Option<AgentVersion>, StoreError> {
        let current = current_of::<DB>(self.read_pool(), name).await?;
        let Some(version) = version.or(current.map(|c| c.version)) else { return Ok(None) };
        let row = sqlx::query(statements::<DB>().version)
            .bind(name)
            .bind(version)
            .fetch_optional(self.read_pool())
            .await?;
        row.map(|row| decode::<DB>(&row, current, &BTreeMap::new())).transpose()
    }

    async fn promote(&self, name: &str, version: i64, share: Option<i64>) -> Result<Promoted, StoreError> {
        check_agent_name(name).map_err(invalid)?;
        let sql = statements::<DB>();
        let mut tx = self.begin_write().await?;
        let exists = sqlx::query(sql.version).bind(name).bind(version).fetch_optional(&mut *tx).await?;
        if exists.is_none() {
            return Err(invalid(format!("agent `{name}` has no version {version}")));
        }
        let now = current_of::<DB>(&mut *tx, name).await?.unwrap_or_default();
        let from = Some(now.version).filter(|v| *v > 0);
        let next = match share {
            None if from == Some(version) => Current { canary: None, ..now },
            None => Current { version, previous: from, canary: None },
            Some(_) if from == Some(version) => {
                return Err(invalid(format!(
                    "{name}@{version} is current already: a canary is another version"
                )));
            }
            Some(share) if (1..=99).contains(&share) => Current { canary: Some((version, share)), ..now },
            Some(share) => {
                return Err(invalid(format!(
                    "a canary's share is 1 to 99 percent of new sessions, not {share} (100: promote it)"
                )));
            }
        };
        set_current(&mut tx, name, next).await?;
        tx.commit().await?;
        Ok(Promoted { from, to: version })
    }

    async fn rollout(&self, name: &str) -> Result<Option<Rollout>, StoreError> {
        let Some(current) = current_of::<DB>(self.read_pool(), name).await? else { return Ok(None) };
        let sql = statements::<DB>();
        let digest_of = |version: i64| async move {
            let row =
                sqlx::query(sql.version).bind(name).bind(version).fetch_optional(self.read_pool()).await?;
            row.map(|row| row.try_get::<String, _>("digest")).transpose().map_err(StoreError::from)
        };
        let Some(digest) = digest_of(current.version).await? else { return Ok(None) };
        let canary = match current.canary {
            Some((version, share)) => digest_of(version).await?.map(|digest| (version, digest, share)),
            None => None,
        };
        Ok(Some(Rollout { current: (current.version, digest), canary }))
    }

    async fn rollback(&self, name: &str) -> Result<Promoted, StoreError> {
        check_agent_name(name).map_err(invalid)?;
        let mut tx = self.begin_write().await?;
        let Some(Current { version: current, previous: Some(previous), .. }) =
            current_of::<DB>(&mut *tx, name).await?
        else {
            return Err(invalid(format!("agent `{name}` has no earlier current version to roll back to")));
        };
        set_current(&mut tx, name, Current { version: previous, previous: Some(current), canary: None })
            .await?;
        tx.commit().await?;
        Ok(Promoted { from: Some(current), to: previous })
    }

    async fn bundle_file(&self, digest: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let row = sqlx::query(statements::<DB>().file).bind(digest).fetch_optional(self.read_pool()).await?;
        let Some(row) = row else { return Ok(None) };
        check_row_version("bundle_files", digest, row.try_get("row_version")?)?;
        Ok(Some(row.try_get("data")?))
    }

    async fn pushed_agents(&self) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(statements::<DB>().names).fetch_all(self.read_pool()).await?;
        rows.iter().map(|row| Ok(row.try_get("name")?)).collect()
    }
}
