//! The crash tests' world: an agent directory built from source, a store, the mock model, a
//! payments service that can hold a refund, and Workers as child processes to SIGKILL; and the
//! one way the tests call the HTTP API ([`api`], [`api_events`]), which checks every answer
//! against the generated OpenAPI document.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{Semaphore, SemaphorePermit};
use tollgate_api::api::types::Snapshot;
use tollgate_api_types::client::{SseEvent, SseParser};
use tollgate_engine::session::client::HumanDecision;
use tollgate_mock_model::MockModel;
pub use tollgate_mock_model::payments::Payments;
use tollgate_sessions::{reads, writes};
use tollgate_store::{Event, Store};

/// How many worlds a test binary runs at once: `TOLLGATE_TEST_WORLDS`, default 2 (Workers start
/// real CLIs, ~240 MB and most of a core each while they work).
pub static WORLDS: LazyLock<u32> = LazyLock::new(|| {
    std::env::var("TOLLGATE_TEST_WORLDS").ok().and_then(|n| n.parse().ok()).filter(|n| *n > 0).unwrap_or(2)
});

/// A slot per world that may run at once ([`WORLDS`]); a test that needs the machine to itself
/// takes them all.
pub static SLOTS: LazyLock<Semaphore> = LazyLock::new(|| Semaphore::new(*WORLDS as usize));

pub use crate::root;

/// The pinned CLI; or `None` (after `!! SKIPPED`) when it is not installed and
/// `TOLLGATE_SKIP_MISSING` names `cli`, a failure when it is not installed otherwise
/// ([`crate::skip`]).
pub fn real_cli(test: &str) -> Option<PathBuf> {
    let pinned = root().join(tollgate_claude::cli::PINNED_INSTALL);
    if pinned.exists() {
        return Some(pinned);
    }
    let detail = format!("not installed at {}", pinned.display());
    crate::skip::missing(crate::skip::Dependency::Cli, test, &detail);
    None
}

/// How the agent's `create_refund` is classified.
#[derive(Clone, Copy, Debug)]
pub enum Refund {
    /// The example's policy: non-idempotent, with approval.
    SingleAttemptWithApproval,
    /// Idempotent, with approval.
    IdempotentWithApproval,
}

/// One test's world.
pub struct World {
    /// Everything on disk, removed on drop.
    pub dir: tempfile::TempDir,
    /// The agent folder.
    pub agent: PathBuf,
    /// The store's URL.
    pub db: String,
    /// The store, opened by the test itself.
    pub store: Arc<dyn Store>,
    /// The scripted mock model.
    pub mock: MockModel,
    /// The stand-in payments service.
    pub payments: Payments,
    cli: PathBuf,
    /// Set by a test that rewrote items with raw SQL: the projection no longer follows them.
    pub items_rewritten: std::sync::atomic::AtomicBool,
    _slot: SemaphorePermit<'static>,
}

impl World {
    /// A world with the example support agent (its tools built from source) on a SQLite file.
    pub async fn new(test: &str, refund: Refund) -> Option<World> {
        Self::build(test, refund, None).await
    }

    /// The same on the store at `db`.
    pub async fn on_db(test: &str, refund: Refund, db: &str) -> Option<World> {
        Self::build(test, refund, Some(db)).await
    }

    async fn build(test: &str, refund: Refund, db: Option<&str>) -> Option<World> {
        let cli = real_cli(test)?;
        // reqwest has no TLS provider of its own (see tollgate_api_types::tls): the tests' clients need it.
        tollgate_api_types::tls::install_crypto_provider();
        let slot = SLOTS.acquire().await.expect("never closed");
        let dir = tempfile::Builder::new().prefix("tollgate-durable-").tempdir().expect("temp dir");
        let agent = dir.path().join("agent");
        std::fs::create_dir_all(agent.join("tools")).expect("agent dir");
        std::fs::copy(tollgate_test_guests::ORDERS, agent.join("tools/orders.wasm")).expect("orders");
        std::fs::copy(tollgate_test_guests::PAYMENTS, agent.join("tools/payments.wasm")).expect("payments");
        std::fs::copy(tollgate_test_guests::SUPPORT_FACTORY, agent.join("agent.wasm")).expect("factory");
        let config =
            std::fs::read_to_string(root().join("examples/agents/support/tollgate.toml")).expect("config");
        let config = match refund {
            Refund::SingleAttemptWithApproval => config,
            Refund::IdempotentWithApproval => config.replace(
                r#"create_refund = { effect = "non_idempotent_write", requires_approval = true"#,
                r#"create_refund = { effect = "idempotent_write", requires_approval = true"#,
            ),
        };
        std::fs::write(agent.join("tollgate.toml"), config).expect("write config");
        let db = db
            .map_or_else(|| format!("sqlite://{}", dir.path().join("tollgate.db").display()), str::to_owned);
        let store = tollgate_store::open(&db).await.expect("open the store");
        let mock = MockModel::start().await.expect("start the mock model");
        let payments = Payments::start().await.expect("start payments");
        Some(World { dir, agent, db, store, mock, payments, cli, items_rewritten: false.into(), _slot: slot })
    }

    /// The pinned Claude Code CLI.
    pub fn cli(&self) -> &std::path::Path {
        &self.cli
    }

    /// Starts a Worker process with a short lease (3 s), so a SIGKILLed one is replaced quickly.
    pub fn worker(&self, name: &str) -> WorkerProcess {
        self.worker_with(
            name,
            &self.db,
            &["--lease-secs", "3", "--heartbeat-secs", "1", "--concurrency", "2"],
        )
    }

    /// Starts a Worker process on `db` with more arguments.
    pub fn worker_with(&self, name: &str, db: &str, extra: &[&str]) -> WorkerProcess {
        self.spawn_worker(name, db, extra, &[])
    }

    /// Starts a Worker process like [`World::worker`], with more environment variables.
    pub fn worker_with_env(&self, name: &str, env: &[(&str, &str)]) -> WorkerProcess {
        self.spawn_worker(
            name,
            &self.db,
            &["--lease-secs", "3", "--heartbeat-secs", "1", "--concurrency", "2"],
            env,
        )
    }

    /// Starts a Worker process on this world's store with `extra` arguments (and none of
    /// [`World::worker`]'s) and more environment variables.
    pub fn worker_with_args_env(&self, name: &str, extra: &[&str], env: &[(&str, &str)]) -> WorkerProcess {
        self.spawn_worker(name, &self.db, extra, env)
    }

    /// Puts `files` (name, text) into the workspace of `session` before its first turn, and
    /// returns each one's path as the agent sees it in its box (`/workspace/<name>`). The
    /// Workers of [`Self::tollgate`] keep workspaces under the world's folder.
    pub fn seed_workspace(&self, session: &str, files: &[(&str, &str)]) -> Vec<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = self.dir.path().join("workspaces").join(session);
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir).expect("make the workspace");
        files
            .iter()
            .map(|(name, text)| {
                std::fs::write(dir.join(name), text).expect("write a workspace file");
                Path::new("/workspace").join(name)
            })
            .collect()
    }

    /// The script of a reply that thinks, then reads a file with the built-in `Read`, `cat`s
    /// another with `Bash` and calls `lookup_order`, then thinks again; the two files are put in
    /// `session`'s workspace first. Returns the read file's path (as the agent sees it) and the
    /// script.
    pub fn thinking_script(&self, session: &str) -> (PathBuf, String) {
        let files = [("notes.txt", "order 7 shipped late\n"), ("orders.txt", "order 7: one lamp\n")];
        let [notes, orders] = &self.seed_workspace(session, &files)[..] else { unreachable!("two files") };
        let script = format!(
            "think the customer asks about order 7 ;; call Read {} && call Bash {} && call lookup_order {} ;; \
             think all three answered",
            json!({"file_path": notes}),
            json!({"command": format!("cat {}", orders.display()), "description": "Show the order"}),
            json!({"order_id": "7"}),
        );
        (notes.clone(), script)
    }

    /// Adds `extra` (e.g. `high_risk_approvers = 2`, or `approvers = ["finance"]`) to the agent's
    /// refund policy in its `tollgate.toml`, after `requires_approval = true`.
    pub fn refund_policy_with(&self, extra: &str) {
        let config = self.agent.join("tollgate.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        let changed = text.replace(
            r#"create_refund = { effect = "non_idempotent_write", requires_approval = true"#,
            &format!(
                r#"create_refund = {{ effect = "non_idempotent_write", requires_approval = true, {extra}"#
            ),
        );
        assert_ne!(text, changed, "the example's refund policy line changed");
        std::fs::write(&config, changed).unwrap();
    }

    /// The `tollgate` binary with this world's environment: the pinned CLI, the mock model, a
    /// refused proxy for everything else, the payments service, the suite's compiled components,
    /// and its state and workspaces in the world's folder.
    pub fn tollgate(&self) -> tokio::process::Command {
        let private = self.dir.path().join("private");
        let mut command =
            crate::chaos::tollgate_command(&self.cli, &self.mock.base_url(), &self.payments.url, &private);
        command.env("RUST_LOG", "info,tollgate::guest=debug");
        command
    }

    fn spawn_worker(&self, name: &str, db: &str, extra: &[&str], env: &[(&str, &str)]) -> WorkerProcess {
        self.spawn_worker_of(name, &self.agent, db, extra, env)
    }

    /// Starts a Worker process like [`World::worker`] that loads the agent directory `agent`.
    pub fn worker_of(&self, name: &str, agent: &Path) -> WorkerProcess {
        self.spawn_worker_of(
            name,
            agent,
            &self.db,
            &["--lease-secs", "3", "--heartbeat-secs", "1", "--concurrency", "2"],
            &[],
        )
    }

    fn spawn_worker_of(
        &self,
        name: &str,
        agent: &Path,
        db: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> WorkerProcess {
        self.spawn(name, &[std::ffi::OsStr::new("--agent"), agent.as_os_str()], db, extra, env)
    }

    /// Starts a Worker process like [`World::worker`] that serves the agent `spec` (`NAME[@K]`)
    /// pulled from the store into `cache`, with no agent folder of its own.
    pub fn worker_pulling(&self, name: &str, spec: &str, cache: &Path) -> WorkerProcess {
        let agent = ["--agent-name", spec, "--bundle-cache"].map(std::ffi::OsStr::new);
        let agent = [&agent[..], &[cache.as_os_str()]].concat();
        self.spawn(name, &agent, &self.db, &["--lease-secs", "3", "--heartbeat-secs", "1"], &[])
    }

    fn spawn(
        &self,
        name: &str,
        agent: &[&std::ffi::OsStr],
        db: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> WorkerProcess {
        let log = self.dir.path().join(format!("{name}.log"));
        let stderr = std::fs::File::create(&log).expect("log file");
        let child = self
            .tollgate()
            .arg("worker")
            .args(agent)
            .args(["--db", db, "--worker-id", name, "--poll-secs", "0.2"])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("start a worker");
        WorkerProcess { child, log }
    }

    /// Starts the session and sends `text`.
    pub async fn send(&self, session: &str, text: &str) {
        writes::start(self.store.as_ref(), session).await.expect("start");
        writes::send(self.store.as_ref(), session, text, None).await.expect("send");
    }

    /// Decides interrupt `id` under `key`.
    pub async fn decide(&self, session: &str, id: &str, approved: bool, message: Option<&str>, key: &str) {
        let decision = HumanDecision {
            approved,
            message: message.map(str::to_owned),
            updated_input: None,
            ..Default::default()
        };
        writes::resolve(self.store.as_ref(), session, id, &decision, Some(key)).await.expect("resolve");
    }

    /// The snapshot.
    pub async fn snapshot(&self, session: &str) -> Snapshot {
        reads::snapshot(self.store.as_ref(), session).await.expect("snapshot").expect("the session exists")
    }

    /// Waits until the snapshot satisfies `done` (60 s at most), and returns it.
    pub async fn wait_for(&self, session: &str, what: &str, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
        let start = Instant::now();
        loop {
            let snapshot = self.snapshot(session).await;
            if done(&snapshot) {
                return snapshot;
            }
            if start.elapsed() > Duration::from_secs(90) {
                panic!("timed out waiting for {what}; snapshot: {snapshot:#?}\n{}", self.diagnostics());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits for the turn to end (idle after a completed or failed turn numbered `turns`).
    pub async fn wait_idle_after(&self, session: &str, turns_ended: usize) -> Snapshot {
        let start = Instant::now();
        loop {
            let ended = self
                .events(session)
                .await
                .iter()
                .filter(|e| e.kind == "turn_completed" || e.kind == "turn_failed")
                .count();
            if ended >= turns_ended {
                let snapshot = self.snapshot(session).await;
                if !self.items_rewritten.load(std::sync::atomic::Ordering::Relaxed) {
                    self.assert_projection_matches_items(session, &snapshot).await;
                }
                return snapshot;
            }
            if start.elapsed() > Duration::from_secs(120) {
                panic!(
                    "timed out waiting for turn {turns_ended} to end; {:#?}\n{}",
                    self.snapshot(session).await,
                    self.diagnostics()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The conversation the snapshot read from the store's projection is the one the whole item
    /// log gives (`view::messages`, the reading before the projection existed).
    pub async fn assert_projection_matches_items(&self, session: &str, snapshot: &Snapshot) {
        let store = self.store.as_ref();
        let row = store.session(session).await.expect("session").expect("the session exists");
        let state = tollgate_engine::session::RunState::parse(row.run_state.get()).expect("run state");
        let items = reads::read_all_items(store, session).await.expect("items");
        let from_items: Vec<(String, String, bool)> =
            tollgate_engine::session::view::messages(&reads::history(&items), &state)
                .into_iter()
                .map(|m| (m.role.to_owned(), m.text, m.pending))
                .collect();
        let projected: Vec<(String, String, bool)> =
            snapshot.messages.iter().map(|m| (m.role.clone(), m.text.clone(), m.pending)).collect();
        assert!(store.read_messages(session, None, 1).await.expect("messages").projected, "{session}");
        assert_eq!(projected, from_items, "{session}: the projection and the item log disagree");

        // The transcript in resume form is the one the item log gives, byte for byte.
        let mut from_items = tollgate_protocol::ResumeText::default();
        let mut cli_session = None;
        for item in items.iter().filter(|i| i.kind == "claude_transcript") {
            let body = tollgate_engine::session::turn::TranscriptBody::parse(item.body.get())
                .expect("a transcript item");
            from_items.push_entries(body.entries.iter().map(|e| e.get()));
            cli_session = Some(body.session_id);
        }
        let stored = store.read_transcript(session).await.expect("transcript");
        assert!(stored.chunked, "{session}");
        assert_eq!(stored.cli_session_id, cli_session, "{session}: the chunks' CLI session");
        assert!(
            stored.chunks.concat() == from_items.to_string(),
            "{session}: the transcript chunks and the item log disagree"
        );
    }

    /// Every event of the session.
    pub async fn events(&self, session: &str) -> Vec<Event> {
        self.store.read_events(session, 0, 100_000).await.expect("events")
    }

    /// The text of the mock's log and the Workers' logs, for failure messages.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir(self.dir.path()).into_iter().flatten().flatten() {
            if entry.path().extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                let tail: String = text
                    .lines()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                out.push_str(&format!("--- {} ---\n{tail}\n", entry.path().display()));
            }
        }
        let replies: Vec<Value> = self
            .mock
            .requests()
            .iter()
            .map(|r| serde_json::json!({"path": r.path, "reply": r.reply}))
            .collect();
        out.push_str(&format!(
            "--- mock: {} requests ---\n{}",
            replies.len(),
            serde_json::to_string(&replies).unwrap_or_default()
        ));
        out
    }

    /// The tool use ID of the mock's `Bash` call whose input has `command`.
    pub fn bash_call_id(&self, command: &str) -> String {
        self.mock
            .message_requests()
            .iter()
            .filter_map(|request| request.reply.message())
            .flat_map(|reply| {
                reply.tool_uses().map(|(id, name, input)| (id.to_owned(), name.to_owned(), input.clone()))
            })
            .find(|(_, name, input)| name == "Bash" && input["command"] == command)
            .map(|(id, ..)| id)
            .unwrap_or_else(|| panic!("the mock never called Bash with {command:?}\n{}", self.diagnostics()))
    }

    /// The text and error flag of the tool result for `tool_use_id` in the mock's last request that
    /// carries one.
    pub fn tool_result_seen(&self, tool_use_id: &str) -> Option<(String, bool)> {
        self.mock.message_requests().iter().rev().find_map(|request| request.tool_result(tool_use_id))
    }
}

/// A Worker child process.
pub struct WorkerProcess {
    child: tokio::process::Child,
    /// Its stderr, written to a file.
    pub log: PathBuf,
}

impl WorkerProcess {
    fn pid(&self) -> i32 {
        i32::try_from(self.child.id().expect("running")).expect("pid")
    }

    /// SIGKILL, and wait until it is gone.
    pub async fn kill(mut self) {
        // SAFETY: sending a signal to our own child's pid.
        unsafe { libc::kill(self.pid(), libc::SIGKILL) };
        let _ = self.child.wait().await;
    }

    /// SIGTERM, and wait until it has exited.
    pub async fn terminate(mut self) {
        // SAFETY: sending a signal to our own child's pid.
        unsafe { libc::kill(self.pid(), libc::SIGTERM) };
        let _ = self.child.wait().await;
    }

    /// SIGSTOP: frozen, holding whatever it holds.
    pub fn freeze(&self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.pid(), libc::SIGSTOP) };
    }

    /// SIGCONT.
    pub fn thaw(&self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.pid(), libc::SIGCONT) };
    }

    /// Whether it is still running (it has not exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its resident memory in KiB, from `/proc`.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Its pid.
    pub fn id(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Sends `signal` and returns at once.
    pub fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child's pid.
        unsafe { libc::kill(self.pid(), signal) };
    }

    /// Waits until it has exited (60 s at most) and returns how.
    pub async fn exited(mut self) -> std::process::ExitStatus {
        tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("the Worker did not exit; its log:\n{}", self.log_text()))
            .expect("wait for the Worker")
    }

    /// Its child processes, from `/proc`.
    pub fn children(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{}/task", self.pid())).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
        out
    }
}

/// The generated OpenAPI document (the one `/openapi.json` serves).
fn openapi() -> &'static Value {
    static DOCUMENT: LazyLock<Value> = LazyLock::new(|| {
        serde_json::from_str(tollgate_api::api::openapi::document()).expect("the OpenAPI document is JSON")
    });
    &DOCUMENT
}

/// Checks `instance` against the schema at `pointer` of the document (a JSON pointer, `$ref`s
/// resolved within the document); `Err` lists every mismatch with its place.
fn check_schema(pointer: &str, instance: &Value) -> Result<(), String> {
    let doc = openapi();
    let schema = doc.pointer(pointer).unwrap_or_else(|| panic!("the document has no schema at {pointer}"));
    // The schema's `$ref`s point into the document's components.
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
        "allOf": [schema],
    });
    let validator = jsonschema::draft202012::new(&root)
        .unwrap_or_else(|e| panic!("the schema at {pointer} does not compile: {e}"));
    let errors: Vec<String> =
        validator.iter_errors(instance).map(|e| format!("at `{}`: {e}", e.instance_path())).collect();
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

/// A JSON pointer's segment (`/` and `~` escaped).
fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The document's path template that `path` (a request's URL path) is an instance of; the one with
/// the fewest `{parameters}` when several are.
fn template_of(path: &str) -> Option<&'static str> {
    let given: Vec<&str> = path.split('/').collect();
    let paths = openapi()["paths"].as_object().expect("paths");
    let matches = paths.keys().map(String::as_str).filter(|template| {
        let parts: Vec<&str> = template.split('/').collect();
        parts.len() == given.len()
            && parts.iter().zip(&given).all(|(t, g)| (t.starts_with('{') && !g.is_empty()) || t == g)
    });
    matches.min_by_key(|template| template.matches('{').count())
}

/// Checks an answer of the HTTP API against the generated OpenAPI document: `status` must be
/// documented for `method path` (a route or method the document lacks may only answer 404 or
/// 405), `media` (the `Content-Type` without parameters) must be one it documents for that
/// status, and `body` must match its schema: JSON bodies as a whole, a `text/event-stream` event
/// by event (`error` events as a `StreamError`), text as a string.
///
/// # Errors
/// What does not match, and where.
pub fn check_answer(method: &str, path: &str, status: u16, media: &str, body: &str) -> Result<(), String> {
    let method = method.to_ascii_lowercase();
    let operation = template_of(path).filter(|t| openapi()["paths"][*t][&method].is_object());
    let Some(template) = operation else {
        // Not a route of the document: the router's fallbacks answer with an error.
        if !matches!(status, 404 | 405) {
            return Err(format!("{method} {path} is not in the document, yet it answered {status}"));
        }
        let json: Value = serde_json::from_str(body).map_err(|e| format!("the body is not JSON: {e}"))?;
        return check_schema("/components/schemas/ErrorBody", &json);
    };
    let responses = format!("/paths/{}/{method}/responses", escape(template));
    let answer = openapi()
        .pointer(&format!("{responses}/{status}"))
        .ok_or_else(|| format!("{method} {template} does not document the status {status}"))?;
    let content = answer["content"].as_object().ok_or_else(|| format!("{status} documents no body"))?;
    let (documented, _) = content
        .iter()
        .find(|(documented, _)| documented.split(';').next().map(str::trim) == Some(media))
        .ok_or_else(|| {
            let listed: Vec<&String> = content.keys().collect();
            format!("{method} {template} answered {status} as `{media}`; the document says {listed:?}")
        })?;
    let schema = format!("{responses}/{status}/content/{}/schema", escape(documented));
    match media {
        "application/json" => {
            let json: Value =
                serde_json::from_str(body).map_err(|e| format!("the body is not JSON ({e})"))?;
            check_schema(&schema, &json)
        }
        "text/event-stream" => {
            let mut parser = SseParser::default();
            let mut events = parser.push(body.as_bytes());
            events.extend(parser.finish());
            events.iter().try_for_each(|event| check_event(&schema, event))
        }
        _ => check_schema(&schema, &Value::String(body.to_owned())),
    }
}

/// Checks one Server-Sent Event against the stream's schema (at `schema`): the whole event
/// (`event`, `id`, `data` as a string) against the one of its `anyOf` whose `event` fits, then
/// its `data`, parsed, against that one's `contentSchema` (a keyword JSON Schema only annotates).
fn check_event(schema: &str, event: &SseEvent) -> Result<(), String> {
    let mut whole = json!({"event": event.event, "data": event.data});
    if let Some(id) = &event.id {
        whole["id"] = json!(id);
    }
    check_schema(schema, &whole).map_err(|e| format!("event {:?} ({}): {e}", event.id, event.event))?;
    let doc = openapi();
    let kinds =
        doc.pointer(&format!("{schema}/anyOf")).and_then(Value::as_array).expect("an anyOf of events");
    let component = |r: &Value| {
        let name = r["$ref"].as_str().expect("a $ref").trim_start_matches("#/components/schemas/");
        format!("/components/schemas/{name}")
    };
    // The error event names `error`; the stream's own events come first.
    let fits = |r: &&Value| {
        let values = doc.pointer(&format!("{}/properties/event/enum", component(r)));
        values.and_then(Value::as_array).is_some_and(|v| v.contains(&json!(event.event)))
    };
    let kind = kinds.iter().find(fits).unwrap_or(&kinds[0]);
    let content = format!("{}/properties/data/contentSchema", component(kind));
    let json: Value = serde_json::from_str(&event.data)
        .map_err(|e| format!("event {:?} is not JSON ({e}): {}", event.id, event.data))?;
    check_schema(&content, &json).map_err(|e| format!("event {:?} ({}): {e}", event.id, event.event))
}

/// An answer of the HTTP API, checked against the OpenAPI document.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type`, when there was one.
    pub content_type: Option<String>,
    /// Its headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body.
    pub text: String,
    /// The body as JSON (`Null` when the body is not JSON).
    pub body: Value,
}

/// Sends `request` to the HTTP API and reads the whole answer; panics (naming the route, the
/// status and the mismatch) when the generated OpenAPI document does not allow it.
pub async fn api(request: reqwest::RequestBuilder) -> Answer {
    let (http, request) = request.build_split();
    let request = request.expect("a valid request");
    let (method, path) = (request.method().to_string(), request.url().path().to_owned());
    let response = http.execute(request).await.expect("the API answers");
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    let content_type = headers.get("content-type").map(|v| v.to_str().expect("ASCII").to_owned());
    let text = response.text().await.expect("a body");
    let media = media_of(content_type.as_deref());
    if let Err(mismatch) = check_answer(&method, &path, status, &media, &text) {
        panic!(
            "{method} {path} answered {status} with what the OpenAPI document does not allow: {mismatch}\nbody: {text}"
        );
    }
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Answer { status, content_type, headers, text, body }
}

/// The `Content-Type` without its parameters (`-` when there is none).
fn media_of(content_type: Option<&str>) -> String {
    content_type.and_then(|c| c.split(';').next()).unwrap_or("-").trim().to_ascii_lowercase()
}

/// A live event stream of the HTTP API whose every event is checked against the document.
pub struct ApiEvents {
    path: String,
    schema: String,
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>,
    parser: SseParser,
}

/// Opens `GET …/events` (`request`): asserts it answered 200 as a documented `text/event-stream`.
pub async fn api_events(request: reqwest::RequestBuilder) -> ApiEvents {
    let (http, request) = request.build_split();
    let request = request.expect("a valid request");
    let path = request.url().path().to_owned();
    let response = http.execute(request).await.expect("open the event stream");
    let media = media_of(response.headers().get("content-type").and_then(|v| v.to_str().ok()));
    assert_eq!((response.status().as_u16(), media.as_str()), (200, "text/event-stream"), "GET {path}");
    let template = template_of(&path).unwrap_or_else(|| panic!("{path} is not in the document"));
    let schema = format!("/paths/{}/get/responses/200/content/text~1event-stream/schema", escape(template));
    assert!(openapi().pointer(&schema).is_some(), "GET {template} documents no event stream");
    ApiEvents { path, schema, body: Box::pin(response.bytes_stream()), parser: SseParser::default() }
}

impl ApiEvents {
    /// The events the next chunk completed (maybe none); `None` when the stream ended. Panics on
    /// an event the document does not allow.
    pub async fn next(&mut self) -> Option<Vec<SseEvent>> {
        let events = match futures_util::StreamExt::next(&mut self.body).await {
            Some(Ok(chunk)) => self.parser.push(&chunk),
            Some(Err(_)) | None => return None,
        };
        for event in &events {
            if let Err(mismatch) = check_event(&self.schema, event) {
                panic!("GET {} sent an event the OpenAPI document does not allow: {mismatch}", self.path);
            }
        }
        Some(events)
    }

    /// Every event until the server ends the stream (`?follow=false`).
    pub async fn all(mut self) -> Vec<SseEvent> {
        let mut all = Vec::new();
        while let Some(events) = self.next().await {
            all.extend(events);
        }
        all
    }
}

/// Panics unless `value` (e.g. a `--json` output of the client) matches the document's schema
/// `name`.
pub fn assert_schema(name: &str, value: &Value) {
    if let Err(mismatch) = check_schema(&format!("/components/schemas/{name}"), value) {
        panic!("not a {name} by the OpenAPI document: {mismatch}\n{value:#}");
    }
}

/// `text` without ANSI colour sequences (a Worker's log).
pub fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
