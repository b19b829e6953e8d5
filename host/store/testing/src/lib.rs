//! Test support for the session store (tests only: no binary links it): [`PgCluster`], a throwaway PostgreSQL on loopback,
//! [`conformance`], the one suite every [`tollgate_store::Store`] backend runs (one test per case
//! per backend, [`suite`]), and [`skip`], what every test does when a real dependency it needs
//! (PostgreSQL, the CLI, schemathesis, a browser) is missing.
//!
//! Read [`PgCluster::start`] first. It finds the PostgreSQL binaries (`TOLLGATE_PG_BIN`, else the
//! newest `/usr/lib/postgresql/*/bin`, else `pg_config --bindir`), runs `initdb` into a temporary
//! directory, and starts the server with `pg_ctl -w` (which waits for readiness) on a free
//! 127.0.0.1 port, with the server's defaults otherwise (`fsync=on`,
//! `synchronous_commit=on`). Dropping the cluster stops it (`pg_ctl stop -m immediate`) and
//! removes the directory. When run as root, the server runs as the `postgres` user (PostgreSQL
//! refuses root). Install the binaries with `scripts/install-postgres.sh`.
//!
//! # Caveats
//!
//! - Missing binaries are a [`ClusterError::NotInstalled`]; [`PgCluster::start_or_skip`] and
//!   [`PgCluster::shared`] make it a test failure, **unless `TOLLGATE_SKIP_MISSING` names
//!   `postgres`** ([`skip`]), where the test skips, saying so.
//! - A test process killed by SIGKILL leaves the servers of its [`PgCluster::start`]s running
//!   (their directories are under the system temp dir, named `tollgate-pg-*`); the
//!   [`PgCluster::shared`] one is stopped by a watchdog process even then.

#![forbid(unsafe_code)]

pub mod conformance;
pub mod outbox;
pub mod skip;
pub mod suite;

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Output, Stdio};
use std::sync::OnceLock;

use sqlx::postgres::PgConnectOptions;

use tollgate_store::PgStore;

/// Why a cluster could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// No PostgreSQL binaries were found (install them with `scripts/install-postgres.sh`).
    #[error("PostgreSQL is not installed (no initdb/pg_ctl found; run scripts/install-postgres.sh)")]
    NotInstalled,
    /// A command failed; the message holds its stdout and stderr.
    #[error("`{command}` failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status, stdout, stderr (and the server log when there is one).
        detail: String,
    },
    /// The temporary directory could not be made.
    #[error("temporary directory: {0}")]
    Io(#[from] std::io::Error),
}

/// A throwaway PostgreSQL server on 127.0.0.1, stopped and deleted on drop.
#[derive(Debug)]
pub struct PgCluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    as_postgres_user: bool,
}

impl PgCluster {
    /// Starts a fresh cluster. See the module docs.
    ///
    /// # Errors
    /// [`ClusterError::NotInstalled`] without binaries; [`ClusterError::Command`] when `initdb` or
    /// `pg_ctl` fails (the error carries their output and the server log).
    pub fn start() -> Result<Self, ClusterError> {
        let bin = find_bin().ok_or(ClusterError::NotInstalled)?;
        // Root? (`id -u` keeps this crate free of libc.)
        let as_postgres_user = run(Command::new("id").arg("-u"))?.stdout.trim_ascii() == b"0";
        let dir = tempfile::Builder::new().prefix("tollgate-pg-").tempdir()?;
        if as_postgres_user {
            run(Command::new("chown").arg("-R").arg("postgres:postgres").arg(dir.path()))?;
        }
        let port = free_port()?;
        let cluster = PgCluster { bin, dir, port, as_postgres_user };
        let data = cluster.data_dir();
        cluster.pg(
            "initdb",
            &["-D", path_str(&data), "-U", "tollgate", "--auth=trust", "-E", "UTF8", "--no-sync"],
        )?;
        cluster.start_again()?;
        Ok(cluster)
    }

    /// Stops the server as an operator would (`pg_ctl stop -m fast`: open connections are
    /// terminated, the data stays). [`PgCluster::start_again`] brings it back on the same port.
    ///
    /// # Errors
    /// `pg_ctl` failed.
    pub fn stop_fast(&self) -> Result<(), ClusterError> {
        let data = self.data_dir();
        self.pg("pg_ctl", &["-D", path_str(&data), "-m", "fast", "-w", "stop"]).map(|_| ())
    }

    /// Starts the (stopped) server on its data directory and port, and waits until it accepts
    /// connections.
    ///
    /// # Errors
    /// `pg_ctl` failed (the error carries the server log).
    pub fn start_again(&self) -> Result<(), ClusterError> {
        let data = self.data_dir();
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={} -c max_connections=200",
            self.port,
            path_str(self.dir.path())
        );
        let log = self.dir.path().join("server.log");
        let started = self.pg(
            "pg_ctl",
            &["-D", path_str(&data), "-l", path_str(&log), "-w", "-t", "60", "-o", &options, "start"],
        );
        if let Err(ClusterError::Command { command, detail }) = started {
            let server_log = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(ClusterError::Command {
                command,
                detail: format!("{detail}\nserver log:\n{server_log}"),
            });
        }
        Ok(())
    }

    /// [`PgCluster::start`], or `None` (with `!! SKIPPED` on stderr) when PostgreSQL is not
    /// installed and `TOLLGATE_SKIP_MISSING` names `postgres` ([`skip`]).
    ///
    /// # Panics
    /// When PostgreSQL is not installed and may not be skipped, or when it is installed but the
    /// cluster cannot start.
    #[track_caller]
    pub fn start_or_skip() -> Option<Self> {
        match PgCluster::start() {
            Ok(c) => Some(c),
            Err(ClusterError::NotInstalled) => {
                skip::missing(skip::Dependency::Postgres, &current_test(), NOT_INSTALLED);
                None
            }
            Err(e) => panic!("cannot start the throwaway PostgreSQL cluster: {e}"),
        }
    }

    /// The test binary's one cluster, started by the first test that asks and shared by all
    /// (each on its own schema, [`PgCluster::store`]); or `None` (with `!! SKIPPED` on stderr)
    /// when PostgreSQL is not installed and `TOLLGATE_SKIP_MISSING` names `postgres`.
    ///
    /// A static is never dropped, so the cluster is stopped and its directory removed by a
    /// watchdog (`sh`, reading a pipe this process holds): when the process ends, however it
    /// ends, the pipe closes and the watchdog runs `pg_ctl stop -m immediate` and `rm -rf`.
    ///
    /// # Panics
    /// When PostgreSQL is not installed and may not be skipped, or when it is installed but the
    /// cluster cannot start.
    #[track_caller]
    pub fn shared() -> Option<&'static PgCluster> {
        static SHARED: OnceLock<Result<(PgCluster, ChildStdin), ClusterError>> = OnceLock::new();
        let started = SHARED.get_or_init(|| {
            let cluster = PgCluster::start()?;
            let watchdog = cluster.watchdog()?;
            Ok((cluster, watchdog))
        });
        match started {
            Ok((cluster, _)) => Some(cluster),
            Err(ClusterError::NotInstalled) => {
                skip::missing(skip::Dependency::Postgres, &current_test(), NOT_INSTALLED);
                None
            }
            Err(e) => panic!("cannot start the shared throwaway PostgreSQL cluster: {e}"),
        }
    }

    /// Spawns the process that stops the cluster and removes its directory once the returned
    /// pipe closes (see [`PgCluster::shared`]).
    fn watchdog(&self) -> Result<ChildStdin, ClusterError> {
        let data = self.data_dir();
        let mut stop: Vec<&std::ffi::OsStr> = Vec::new();
        if self.as_postgres_user {
            stop.extend(["runuser", "-u", "postgres", "--"].map(std::ffi::OsStr::new));
        }
        let pg_ctl = self.bin.join("pg_ctl");
        stop.push(pg_ctl.as_os_str());
        stop.extend(["-D", path_str(&data), "-m", "immediate", "-w", "stop"].map(std::ffi::OsStr::new));
        // In a process group of its own, and deaf to signals, so a ^C or a kill of the test's
        // group that ends the tests does not end the watchdog before it has cleaned up.
        let mut child = Command::new("sh")
            .args(["-c", r#"trap '' INT HUP TERM; cat >/dev/null; "$@"; rm -rf "$0""#])
            .process_group(0)
            .arg(self.dir.path())
            .args(stop)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| ClusterError::Command {
                command: "sh (the cluster's watchdog)".into(),
                detail: e.to_string(),
            })?;
        Ok(child.stdin.take().expect("piped stdin"))
    }

    /// The URL of the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://tollgate@127.0.0.1:{}/postgres", self.port)
    }

    /// Connection options for a fresh schema `schema` (created here), so each test has its own
    /// empty store in the one cluster.
    ///
    /// # Errors
    /// The schema cannot be created.
    pub async fn schema_options(&self, schema: &str) -> Result<PgConnectOptions, sqlx::Error> {
        use sqlx::Connection;
        let base: PgConnectOptions = self.url().parse()?;
        let mut conn = sqlx::PgConnection::connect_with(&base).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"")))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        Ok(base.options([("search_path", schema)]))
    }

    /// A migrated [`PgStore`] on a fresh schema.
    ///
    /// # Panics
    /// When the store cannot be opened.
    pub async fn store(&self, schema: &str, max_connections: u32) -> PgStore {
        let options = self.schema_options(schema).await.expect("create schema");
        PgStore::connect_with(options, max_connections).await.expect("open PgStore")
    }

    /// Restarts the server (`pg_ctl restart -m fast`, waiting until it accepts connections
    /// again): every connection is closed, committed data stays, the port and options are the
    /// same.
    ///
    /// # Errors
    /// [`ClusterError::Command`] when `pg_ctl` fails (with the server log).
    pub fn restart(&self) -> Result<(), ClusterError> {
        let data = self.data_dir();
        let log = self.dir.path().join("server.log");
        self.pg(
            "pg_ctl",
            &["-D", path_str(&data), "-l", path_str(&log), "-m", "fast", "-w", "-t", "60", "restart"],
        )
        .map(drop)
        .map_err(|e| match e {
            ClusterError::Command { command, detail } => ClusterError::Command {
                command,
                detail: format!(
                    "{detail}\nserver log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ),
            },
            other => other,
        })
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg(&self, tool: &str, args: &[&str]) -> Result<Output, ClusterError> {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres_user {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        cmd.args(args);
        run(&mut cmd)
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let data = self.data_dir();
        if let Err(e) = self.pg("pg_ctl", &["-D", path_str(&data), "-m", "immediate", "-w", "stop"]) {
            eprintln!("could not stop the throwaway PostgreSQL cluster: {e}");
        }
    }
}

/// What is missing when [`find_bin`] finds nothing.
const NOT_INSTALLED: &str =
    "no initdb/pg_ctl in $TOLLGATE_PG_BIN, /usr/lib/postgresql/*/bin or `pg_config --bindir`";

/// The running test's name (libtest names its threads after their tests).
fn current_test() -> String {
    std::thread::current().name().unwrap_or("this test").to_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

fn run(cmd: &mut Command) -> Result<Output, ClusterError> {
    let out = cmd
        .output()
        .map_err(|e| ClusterError::Command { command: format!("{cmd:?}"), detail: e.to_string() })?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(ClusterError::Command {
            command: format!("{cmd:?}"),
            detail: format!(
                "{}\nstdout:\n{}\nstderr:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        })
    }
}

fn free_port() -> Result<u16, ClusterError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `TOLLGATE_PG_BIN`, the newest `/usr/lib/postgresql/<major>/bin`, or `pg_config --bindir`.
fn find_bin() -> Option<PathBuf> {
    let has_tools = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os("TOLLGATE_PG_BIN") {
        return Some(PathBuf::from(dir)).filter(|d| has_tools(d));
    }
    let mut majors: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, d)| has_tools(d))
        .collect();
    majors.sort();
    if let Some((_, dir)) = majors.pop() {
        return Some(dir);
    }
    let out = Command::new("pg_config").arg("--bindir").output().ok()?;
    let dir = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    has_tools(&dir).then_some(dir)
}
