//! `tollgate serve` as a child process on a [`World`]: started on a free port, its stderr written
//! by the server itself to a log beside the Workers' (for [`World::diagnostics`]), where its
//! address is read; and the `tollgate` client commands run against it.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::world::World;

/// A `tollgate serve` child process.
pub struct Served {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    child: tokio::process::Child,
}

impl Served {
    /// Starts `tollgate serve` on `world` (API + Worker), requiring `token` when given (else open,
    /// `--insecure-open`); waits until it prints the address it listens on.
    pub async fn start(world: &World, name: &str, token: Option<&str>) -> Served {
        Self::start_on(world, name, token, "127.0.0.1:0").await
    }

    /// The same, listening on `listen` (to take over the address of a stopped one).
    pub async fn start_on(world: &World, name: &str, token: Option<&str>, listen: &str) -> Served {
        let token: Vec<&str> = token.map_or_else(|| vec!["--insecure-open"], |t| vec!["--token", t]);
        Self::start_with(world, name, listen, &token).await
    }

    /// The same with more `serve` arguments (e.g. `--auth FILE`).
    pub async fn start_with(world: &World, name: &str, listen: &str, extra: &[&str]) -> Served {
        Self::start_with_env(world, name, listen, extra, &[]).await
    }

    /// The same with more environment variables.
    pub async fn start_with_env(
        world: &World,
        name: &str,
        listen: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Served {
        let mut command = world.tollgate();
        command.envs(env.iter().copied());
        command
            .args(["serve", "--agent"])
            .arg(&world.agent)
            .args(["--db", &world.db, "--listen", listen, "--worker-id", name, "--poll-secs", "0.2"])
            .args(["--lease-secs", "3", "--heartbeat-secs", "1", "--concurrency", "2"])
            .args(extra);
        Self::listening(world, name, command, "tollgate serving on ").await
    }

    /// `tollgate api --db DB --listen 127.0.0.1:0 EXTRA` on `world`'s store: the API alone, without
    /// the agent (Workers run elsewhere).
    pub async fn start_api(world: &World, name: &str, extra: &[&str]) -> Served {
        Self::start_api_on(world, name, "127.0.0.1:0", extra).await
    }

    /// The same, listening on `listen` (to take over the address of a stopped one).
    pub async fn start_api_on(world: &World, name: &str, listen: &str, extra: &[&str]) -> Served {
        let mut command = world.tollgate();
        command.args(["api", "--db", &world.db, "--listen", listen]).args(extra);
        Self::listening(world, name, command, "tollgate API on ").await
    }

    /// Spawns `command` with its stderr written straight to `NAME.log` and waits until the log
    /// says where it listens (after `prefix`). The server writes its log itself, so a line it
    /// logged before answering a request is in the file when the answer arrives (a copy made by a
    /// task of ours would lag behind).
    async fn listening(
        world: &World,
        name: &str,
        mut command: tokio::process::Command,
        prefix: &str,
    ) -> Served {
        let path = world.dir.path().join(format!("{name}.log"));
        let log = std::fs::File::create(&path).expect("log file");
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log).kill_on_drop(true);
        let mut child = command.spawn().expect("start tollgate serve");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let url = loop {
            let seen = std::fs::read_to_string(&path).unwrap_or_default();
            if let Some(rest) = seen.lines().find_map(|line| line.strip_prefix(prefix)) {
                break rest.split_whitespace().next().expect("an address").to_owned();
            }
            let exited = child.try_wait().expect("poll the server");
            if exited.is_some() || tokio::time::Instant::now() > deadline {
                let why = exited
                    .map_or_else(|| "in 60 s".to_owned(), |status| format!("before it exited ({status})"));
                panic!("tollgate serve did not say where it listens {why}; stderr:\n{seen}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        Served { url, child }
    }

    /// The name of the agent this server's Worker registered (`GET /v1/agents` as the holder of
    /// `token`), once it did (30 s at most).
    pub async fn agent_name(&self, token: &str) -> String {
        let http = reqwest::Client::new();
        for _ in 0..300 {
            let answer = http.get(format!("{}/v1/agents", self.url)).bearer_auth(token).send().await;
            if let Ok(answer) = answer
                && let Ok(body) = answer.json::<serde_json::Value>().await
                && let Some(name) = body["agents"][0]["name"].as_str()
            {
                return name.to_owned();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no agent registered at {}", self.url)
    }

    /// `tollgate ARGS --url URL` (client commands), without the caller's token or URL variables.
    pub async fn tollgate(&self, args: &[&str]) -> Output {
        self.client_command(args).output().await.expect("run tollgate")
    }

    /// The same command, not yet started (to spawn it, or to set more environment).
    pub fn client_command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(crate::tollgate_binary());
        command
            .args(args)
            .args(["--url", &self.url])
            .env_remove("TOLLGATE_TOKEN")
            .env_remove("TOLLGATE_URL")
            .env_remove("TOLLGATE_TOKEN_FILE")
            .env_remove("TOLLGATE_TLS_CERT")
            .env_remove("TOLLGATE_TLS_KEY")
            .env_remove("TOLLGATE_CA_CERT")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// SIGTERM, and wait until it has exited (30 s at most).
    pub async fn stop(self) {
        self.signal(libc::SIGTERM).await;
    }

    /// Whether the server still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL: every connection drops at once.
    pub async fn kill(self) {
        self.signal(libc::SIGKILL).await;
    }

    async fn signal(mut self, signal: i32) {
        if let Some(pid) = self.child.id() {
            // SAFETY: sending a signal to our own child's pid.
            unsafe { libc::kill(i32::try_from(pid).expect("pid"), signal) };
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }
}

/// `tollgate auth add NAME --role … --group … --auth FILE` in `world`: the token it prints.
pub async fn add_principal(
    world: &World,
    file: &Path,
    name: &str,
    roles: &[&str],
    groups: &[&str],
) -> String {
    let mut command = world.tollgate();
    command.args(["auth", "add", name, "--auth"]).arg(file);
    for role in roles {
        command.args(["--role", role]);
    }
    for group in groups {
        command.args(["--group", group]);
    }
    let output = command.output().await.expect("run tollgate auth add");
    let token = stdout_of(&output, "tollgate auth add").trim().to_owned();
    assert!(token.starts_with("tg_"), "{token}");
    token
}

/// A finished command's stdout, asserting it succeeded.
pub fn stdout_of(output: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
