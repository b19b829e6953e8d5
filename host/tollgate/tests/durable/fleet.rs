//! Agents as a fleet on one store: a session names its agent, and only a Worker serving that agent
//! runs it. Two agents (`agent`, the example support agent, and `billing`, a copy of it under
//! another name) share one store, neither locked: every session created through the first's
//! server runs there, none on the second's Worker, on SQLite and on PostgreSQL. A step no Worker
//! of its agent claims shows as unclaimable in `/healthz`, `/metrics` and its snapshot.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::served::{Served, stdout_of};
use crate::world::{Refund, World, plain};

/// Sessions created through the first agent's server, each its own turn.
const SESSIONS: usize = 8;

/// A copy of the agent `from` at `to`: another agent (its name is its folder's) with the same
/// tools, prompt and policies, and a bundle of its own (its `tollgate.toml` differs by a comment).
fn copy_agent(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("tools")).expect("mkdir");
    for file in ["agent.wasm", "tools/orders.wasm", "tools/payments.wasm"] {
        std::fs::copy(from.join(file), to.join(file)).expect("copy");
    }
    let config = std::fs::read_to_string(from.join("tollgate.toml")).expect("config");
    std::fs::write(to.join("tollgate.toml"), format!("{config}\n# another agent\n")).expect("write config");
}

/// How many times the log says a segment of `session` started.
fn segments_of(log: &str, session: &str) -> usize {
    let needle = format!("session={session} ");
    plain(log).lines().filter(|l| l.contains("segment starting") && l.contains(&needle)).count()
}

/// `tollgate serve` of the first agent and `tollgate worker` of `billing` on `world`'s store;
/// [`SESSIONS`] sessions started through the server each run once, all by the server.
async fn only_the_named_agent_runs_its_sessions(world: World) {
    let billing = world.dir.path().join("billing");
    copy_agent(&world.agent, &billing);
    let served = Served::start(&world, "serve-agent", None).await;
    // The billing Worker polls often, so it would win its share of claims if it could.
    let worker = world.worker_of("worker-billing", &billing);
    let ids: Vec<String> = (0..SESSIONS).map(|i| format!("s{i}")).collect();
    for id in &ids {
        let start = served.tollgate(&["session", "start", id, "--message", &format!("say hello {id}")]).await;
        stdout_of(&start, "session start");
    }
    for id in &ids {
        let done = world.wait_idle_after(id, 1).await;
        assert_eq!(done.messages.last().map(|m| m.text.clone()), Some(format!("said: hello {id}")), "{id}");
    }
    let serve_log = std::fs::read_to_string(world.dir.path().join("serve-agent.log")).expect("serve log");
    let billing_log = worker.log_text();
    let stolen: Vec<&String> = ids.iter().filter(|id| segments_of(&billing_log, id) > 0).collect();
    let finding = format!(
        "{} of {SESSIONS} sessions of agent `agent` were run by the Worker of `billing`: {stolen:?}",
        stolen.len()
    );
    println!("finding: {finding}");
    assert!(stolen.is_empty(), "{finding}");
    for id in &ids {
        assert_eq!(segments_of(&serve_log, id), 1, "{id} ran once, on its agent's server");
    }
    let listed = stdout_of(&served.tollgate(&["session", "list"]).await, "session list");
    assert!(
        ids.iter()
            .all(|id| listed.lines().any(|l| l.starts_with(&format!("{id} ")) && l.contains(" agent "))),
        "every session names its agent in the list:\n{listed}"
    );

    // A session that names `billing` runs on billing's Worker, through the same server.
    let start = served.tollgate(&[
        "session",
        "start",
        "for-billing",
        "--agent",
        "billing",
        "--message",
        "say hello b",
    ]);
    stdout_of(&start.await, "session start --agent billing");
    let done = world.wait_idle_after("for-billing", 1).await;
    assert_eq!(done.agent.as_deref(), Some("billing"));
    assert_eq!(segments_of(&worker.log_text(), "for-billing"), 1, "billing's Worker ran it");

    // What would strand a session is refused, naming why, and writes nothing.
    let known = world.store.agents().known_agents().await.expect("known agents");
    let digest_of = |name: &str| known.iter().find(|k| k.name == name).expect("registered").digest.clone();
    let (agent_digest, billing_digest) = (digest_of("agent"), digest_of("billing"));
    for (extra, why) in [
        (
            vec!["--agent", "nope"],
            "no Worker or server of agent `nope` has started on this store (agents: agent, billing)",
        ),
        (vec!["--agent", "billing@2"], "agent `billing` has no version 2: no version of it was pushed"),
        (vec!["--agent", &billing_digest], "agent `billing` was loaded from"),
    ] {
        let refused = served.tollgate(&[&["session", "start", "refused"], extra.as_slice()].concat()).await;
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success() && stderr.contains(why), "{extra:?}: {stderr}");
    }
    assert!(world.store.session("refused").await.unwrap().is_none(), "nothing was written");
    // The serving agent's own digest is unlocked: pinned to it, no Worker would run the session.
    let upgrade = served.tollgate(&["session", "upgrade", "s0", "--to", &agent_digest]).await;
    let stderr = String::from_utf8_lossy(&upgrade.stderr);
    assert!(!upgrade.status.success() && stderr.contains("unlocked"), "{stderr}");
    let all = served.tollgate(&["session", "upgrade", "--all", "--to", &agent_digest]).await;
    let all = stdout_of(&all, "session upgrade --all");
    assert!(all.contains("0 upgraded"), "{all}");
    let s0 = world.store.session("s0").await.unwrap().unwrap();
    assert!(!s0.agent.is_some_and(|a| a.pinned), "s0 stays unpinned");
    let next = served.tollgate(&["session", "send", "s0", "say hello again"]).await;
    stdout_of(&next, "session send s0");
    let again = world.wait_idle_after("s0", 2).await;
    assert_eq!(again.messages.last().map(|m| m.text.as_str()), Some("said: hello again"), "s0 still runs");

    // `tollgate api` serves no agent of its own: with two in the store, a session must name one.
    let api = Served::start_api(&world, "api", &["--insecure-open"]).await;
    let plain = api.tollgate(&["session", "start", "plain"]).await;
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(
        !plain.status.success()
            && stderr.contains("this store serves several agents (agent, billing): name one"),
        "{stderr}"
    );
    stdout_of(
        &api.tollgate(&["session", "start", "plain", "--agent", "agent"]).await,
        "session start --agent agent",
    );
    api.stop().await;
    worker.terminate().await;
    served.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_of_another_agent_on_the_same_sqlite_store_runs_none_of_its_sessions() {
    let Some(world) = World::new("fleet: two agents on SQLite", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    only_the_named_agent_runs_its_sessions(world).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_of_another_agent_on_the_same_postgres_database_runs_none_of_its_sessions() {
    let Some(db) = crate::pg_database().await else { return };
    let Some(world) =
        World::on_db("fleet: two agents on PostgreSQL", Refund::SingleAttemptWithApproval, &db).await
    else {
        return;
    };
    only_the_named_agent_runs_its_sessions(world).await;
}

/// Waits until a Worker or server of `agent` has registered it in `world`'s store.
async fn registered(world: &World, agent: &str) {
    let started = std::time::Instant::now();
    while !world.store.agents().known_agents().await.unwrap().iter().any(|k| k.name == agent) {
        assert!(started.elapsed() < Duration::from_secs(30), "{agent}'s Worker never registered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `GET url` as JSON, or the text of `/metrics`.
async fn fetch(url: &str) -> (u16, String) {
    let answer = reqwest::get(url).await.expect("GET");
    (answer.status().as_u16(), answer.text().await.expect("body"))
}

/// A session of an agent whose Worker is gone waits for one: after the bound, `/healthz` says
/// `degraded` naming the agent, `/metrics` counts its step, and its snapshot says since when;
/// a Worker of that agent starting again runs it and clears all three.
#[tokio::test(flavor = "multi_thread")]
async fn a_step_no_worker_of_its_agent_claims_shows_as_unclaimable_until_one_runs_it() {
    let Some(world) = World::new("fleet: unclaimable", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let billing = world.dir.path().join("billing");
    copy_agent(&world.agent, &billing);
    let served = Served::start_with(
        &world,
        "serve-agent",
        "127.0.0.1:0",
        &["--insecure-open", "--unclaimable-after-secs", "1"],
    )
    .await;
    // Billing's Worker registers its agent, then stops: its sessions wait.
    let gone = world.worker_of("worker-billing-1", &billing);
    registered(&world, "billing").await;
    gone.terminate().await;
    let (status, health) = fetch(&format!("{}/healthz", served.url)).await;
    assert_eq!(status, 200);
    let health: Value = serde_json::from_str(&health).unwrap();
    assert_eq!((health["status"].as_str(), &health["unclaimable"]), (Some("ok"), &Value::Array(vec![])));
    let start = served.tollgate(&["session", "start", "b", "--agent", "billing", "--message", "say hello b"]);
    stdout_of(&start.await, "session start --agent billing");

    let started = std::time::Instant::now();
    let health = loop {
        let (_, health) = fetch(&format!("{}/healthz", served.url)).await;
        let health: Value = serde_json::from_str(&health).unwrap();
        if health["status"] == "degraded" {
            break health;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "never degraded: {health}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("finding: /healthz with billing's Worker gone: {health}");
    assert_eq!(health["unclaimable"][0]["agent"], "billing", "{health}");
    assert_eq!(health["unclaimable"][0]["steps"], 1, "{health}");
    assert_eq!(health["store"]["writable"], true, "the store is fine: {health}");
    let (_, metrics) = fetch(&format!("{}/metrics", served.url)).await;
    assert!(metrics.contains("tollgate_unclaimable_steps{agent=\"billing\"} 1"), "{metrics}");
    let snapshot = world.snapshot("b").await;
    assert_eq!(snapshot.unclaimable_since, None, "the store-side snapshot leaves it to the API");
    let (_, shown) = fetch(&format!("{}/v1/sessions/b", served.url)).await;
    let shown: Value = serde_json::from_str(&shown).unwrap();
    let since = shown["unclaimable_since"].as_i64().expect("since when");
    assert_eq!(since, health["unclaimable"][0]["oldest_due_at"].as_i64().unwrap(), "{shown}");

    let worker = world.worker_of("worker-billing-2", &billing);
    let done = world.wait_idle_after("b", 1).await;
    assert_eq!(done.messages.last().map(|m| m.text.as_str()), Some("said: hello b"));
    let (_, health) = fetch(&format!("{}/healthz", served.url)).await;
    let health: Value = serde_json::from_str(&health).unwrap();
    assert_eq!(health["status"], "ok", "{health}");
    let (_, metrics) = fetch(&format!("{}/metrics", served.url)).await;
    assert!(!metrics.contains("tollgate_unclaimable_steps{"), "{metrics}");
    let (_, shown) = fetch(&format!("{}/v1/sessions/b", served.url)).await;
    assert!(!shown.contains("unclaimable_since"), "{shown}");
    worker.terminate().await;
    served.stop().await;
}

/// `tollgate ARGS` of `world`, which must succeed; its stdout.
async fn tollgate_ok(world: &World, args: &[&str]) -> String {
    let output = world.tollgate().args(args).output().await.expect("run tollgate");
    stdout_of(&output, &args.join(" "))
}

/// Agents pushed into the store and run by a Worker with no agent folder: `agent push` (a no-op
/// when unchanged, a broken bundle refused naming its file with nothing stored), versions listed,
/// promoted and rolled back; a Worker pulling the current version by name, from its cache after a
/// restart, and fetching again when the cached copy was tampered with.
#[tokio::test(flavor = "multi_thread")]
async fn a_pushed_agent_runs_on_a_worker_without_its_folder_and_versions_are_promoted_and_rolled_back() {
    let Some(world) = World::new("fleet: pushed agents", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let db = world.db.clone();
    let agent = world.agent.to_str().unwrap().to_owned();
    let pushed = tollgate_ok(&world, &["agent", "push", &agent, "--db", &db, "--by", "carl"]).await;
    assert!(
        pushed.contains("locked") && pushed.contains("pushed agent@1 (sha256:") && pushed.contains("current"),
        "{pushed}"
    );
    let again = tollgate_ok(&world, &["agent", "push", &agent, "--db", &db]).await;
    assert!(
        again.contains("agent@1 is this bundle already") && again.contains("nothing was pushed"),
        "{again}"
    );

    // A second version of the same agent (same folder name, another comment), and a broken one.
    let second = world.dir.path().join("v2").join("agent");
    copy_agent(&world.agent, &second);
    let second = second.to_str().unwrap().to_owned();
    let pushed = tollgate_ok(&world, &["agent", "push", &second, "--db", &db]).await;
    assert!(
        pushed.contains("pushed agent@2") && pushed.contains("tollgate agent promote agent@2"),
        "{pushed}"
    );
    let broken = world.dir.path().join("broken").join("agent");
    copy_agent(&world.agent, &broken);
    std::fs::write(broken.join("tools/payments.wasm"), b"not a component").unwrap();
    let refused =
        world.tollgate().args(["agent", "push"]).arg(&broken).args(["--db", &db]).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("payments.wasm") && stderr.contains("nothing was"),
        "{stderr}"
    );
    let shown = tollgate_ok(&world, &["agent", "show", "agent", "--db", &db]).await;
    println!("finding: agent show after two pushes and a refused one:\n{shown}");
    let rows: Vec<&str> = shown.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "the broken bundle stored nothing:\n{shown}");
    assert!(rows[0].starts_with("@1") && rows[0].contains("yes") && rows[0].contains("carl"), "{shown}");
    let listed = tollgate_ok(&world, &["agent", "list", "--db", &db]).await;
    assert!(
        listed.lines().any(|l| l.starts_with("agent ") && l.contains("@1") && l.contains(" 2 ")),
        "{listed}"
    );

    // A Worker with no folder runs the current version; sessions created through `tollgate api`.
    let cache = world.dir.path().join("bundle-cache");
    let api = Served::start_api(&world, "api", &["--insecure-open"]).await;
    let worker = world.worker_pulling("pulling-1", "agent", &cache);
    let start =
        api.tollgate(&["session", "start", "p1", "--agent", "agent", "--message", "say hello p1"]).await;
    stdout_of(&start, "session start p1");
    let done = world.wait_idle_after("p1", 1).await;
    assert_eq!(
        done.messages.last().map(|m| m.text.as_str()),
        Some("said: hello p1"),
        "{}",
        world.diagnostics()
    );
    let log = plain(&worker.log_text());
    assert!(log.contains("pulled the agent from the store") && log.contains("fetched=true"), "{log}");
    worker.terminate().await;
    // Restarted, it loads from its cache; tampered with, the cache is fetched again.
    let worker = world.worker_pulling("pulling-2", "agent", &cache);
    let start =
        api.tollgate(&["session", "start", "p2", "--agent", "agent", "--message", "say hello p2"]).await;
    stdout_of(&start, "session start p2");
    world.wait_idle_after("p2", 1).await;
    assert!(plain(&worker.log_text()).contains("fetched=false"), "{}", worker.log_text());
    worker.terminate().await;
    let payments = std::fs::read_dir(&cache)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path().join("agent/tools/payments.wasm"))
        .find(|p| p.is_file())
        .expect("the cached payments.wasm");
    std::fs::write(&payments, b"tampered").unwrap();
    let worker = world.worker_pulling("pulling-3", "agent", &cache);
    let start =
        api.tollgate(&["session", "start", "p3", "--agent", "agent", "--message", "say hello p3"]).await;
    stdout_of(&start, "session start p3");
    world.wait_idle_after("p3", 1).await;
    let log = plain(&worker.log_text());
    assert!(log.contains("does not match its version") && log.contains("fetched=true"), "{log}");
    assert_ne!(std::fs::read(&payments).unwrap(), b"tampered", "the cached file was replaced");
    worker.terminate().await;

    // Promote and roll back what new sessions get.
    let promoted = tollgate_ok(&world, &["agent", "promote", "agent@2", "--db", &db]).await;
    assert!(promoted.contains("new sessions of agent get agent@2 (was agent@1)"), "{promoted}");
    let shown = tollgate_ok(&world, &["agent", "show", "agent", "--db", &db]).await;
    assert!(shown.lines().any(|l| l.starts_with("@2") && l.contains("yes")), "{shown}");
    assert!(
        shown.lines().any(|l| l.starts_with("@1") && l.contains(" 3 ")),
        "three sessions on @1:\n{shown}"
    );
    let back = tollgate_ok(&world, &["agent", "rollback", "agent", "--db", &db]).await;
    assert!(back.contains("agent@1 again (was agent@2)"), "{back}");
    let missing = world.tollgate().args(["agent", "promote", "agent@9", "--db", &db]).output().await.unwrap();
    assert!(String::from_utf8_lossy(&missing.stderr).contains("has no version 9"), "{missing:?}");

    // A session may name a version: pinned to it, run by a Worker of that version, while new
    // sessions naming the agent alone still get the current one.
    let worker = world.worker_pulling("pulling-4", "agent@2", &cache);
    let start =
        api.tollgate(&["session", "start", "v2", "--agent", "agent@2", "--message", "say hello v2"]).await;
    stdout_of(&start, "session start v2");
    let done = world.wait_idle_after("v2", 1).await;
    assert_eq!(
        done.messages.last().map(|m| m.text.as_str()),
        Some("said: hello v2"),
        "{}",
        world.diagnostics()
    );
    let v2 = world.store.session("v2").await.unwrap().unwrap();
    let versions = world.store.versions().agent_versions("agent").await.unwrap();
    assert_eq!(
        v2.agent.as_ref().map(|a| (a.digest.as_str(), a.pinned)),
        Some((versions[1].digest.as_str(), true))
    );
    worker.terminate().await;
    let nine = api.tollgate(&["session", "start", "v9", "--agent", "agent@9"]).await;
    let stderr = String::from_utf8_lossy(&nine.stderr);
    assert!(
        !nine.status.success() && stderr.contains("agent `agent` has no version 9: it has versions 1 to 2"),
        "{stderr}"
    );

    // A canary: half of 40 new sessions get agent@2, the rest agent@1 (each pinned to its digest).
    let canary = tollgate_ok(&world, &["agent", "promote", "agent@2", "--share", "50", "--db", &db]).await;
    assert!(
        canary.contains("50% of new sessions of agent get agent@2 (the canary); the rest agent@1"),
        "{canary}"
    );
    for i in 0..40 {
        let id = format!("c{i}");
        stdout_of(&api.tollgate(&["session", "start", &id, "--agent", "agent"]).await, "session start");
    }
    let versions = world.store.versions().agent_versions("agent").await.unwrap();
    let on = |v: usize| versions[v].sessions;
    println!(
        "finding: with a 50% canary, 40 new sessions went {} to @1 (3 before) and {} to @2 (1 before)",
        on(0) - 3,
        on(1) - 1
    );
    assert_eq!(on(0) - 3 + on(1) - 1, 40, "each on one of the two");
    assert!((6..=36).contains(&on(1)), "about half on the canary: {}", on(1) - 1);
    let shown = tollgate_ok(&world, &["agent", "show", "agent", "--db", &db]).await;
    assert!(shown.lines().any(|l| l.starts_with("@2") && l.contains("50%")), "{shown}");
    // The session list says which version each runs.
    let listed = stdout_of(&api.tollgate(&["session", "list", "--limit", "200"]).await, "session list");
    let on_list =
        |version: &str| listed.lines().filter(|l| l.starts_with('c') && l.contains(version)).count() as i64;
    assert_eq!((on_list(" agent@1 "), on_list(" agent@2 ")), (on(0) - 3, on(1) - 1), "{listed}");
    api.stop().await;
}

/// `tollgate auth add NAME --role ROLE [--agents AGENTS] --auth FILE`: the token it prints.
async fn principal(world: &World, file: &Path, name: &str, role: &str, agents: Option<&str>) -> String {
    let mut command = world.tollgate();
    command.args(["auth", "add", name, "--role", role, "--auth"]).arg(file);
    if let Some(agents) = agents {
        command.args(["--agents", agents]);
    }
    stdout_of(&command.output().await.expect("run tollgate auth add"), "tollgate auth add").trim().to_owned()
}

/// An approver limited to `billing` neither sees nor decides the approvals of the other agent: its
/// sessions are not found, left out of the inbox (and its count), the sessions list, the event
/// stream and the audit trail, and a session for it is refused; an approver of that agent decides
/// them, and an unlimited one sees both.
#[tokio::test(flavor = "multi_thread")]
async fn a_principal_limited_to_one_agent_neither_sees_nor_decides_another_agents_approvals() {
    let Some(world) = World::new("fleet: agent scopes", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let billing = world.dir.path().join("billing");
    copy_agent(&world.agent, &billing);
    let file = world.dir.path().join("auth.toml");
    let starter = principal(&world, &file, "starter", "client", None).await;
    let bill = principal(&world, &file, "bill", "approver", Some("billing")).await;
    let sue = principal(&world, &file, "sue", "approver", Some("agent")).await;
    let ann = principal(&world, &file, "ann", "approver", None).await;
    let billing_client = principal(&world, &file, "bc", "client", Some("billing")).await;
    // A webhook endpoint for billing's events only.
    let receiver = crate::webhooks::Receiver::start(Vec::new()).await;
    let hooks = crate::webhooks::write_hooks(&world, &receiver.url);
    let text = std::fs::read_to_string(&hooks).unwrap();
    std::fs::write(&hooks, format!("{text}agents = [\"billing\"]\n")).unwrap();
    let served = Served::start_with(
        &world,
        "serve-agent",
        "127.0.0.1:0",
        &["--auth", file.to_str().unwrap(), "--webhooks", &hooks],
    )
    .await;
    let worker = world.worker_of("worker-billing", &billing);
    registered(&world, "billing").await;
    let http = reqwest::Client::new();
    let url = served.url.clone();
    let call = |method: reqwest::Method, path: String, token: &str, body: Option<Value>| {
        let mut request = http.request(method, format!("{url}{path}")).bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let answer = request.send().await.expect("call");
            let status = answer.status().as_u16();
            let text = answer.text().await.expect("body");
            (status, serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)))
        }
    };
    let refund = r#"call create_refund {"order_id":"7","amount_cents":500}"#;
    for (id, agent) in [("s", "agent"), ("b", "billing")] {
        let body = serde_json::json!({"session_id": id, "agent": agent, "message": refund});
        let (status, created) =
            call(reqwest::Method::POST, "/v1/sessions".into(), &starter, Some(body)).await;
        assert_eq!(status, 201, "{created}");
    }
    let s = world.wait_for("s", "the refund to wait", |s| !s.pending_interrupts.is_empty()).await;
    let b = world.wait_for("b", "billing's refund to wait", |s| !s.pending_interrupts.is_empty()).await;
    let (s_interrupt, b_interrupt) =
        (&s.pending_interrupts[0].interrupt_id, &b.pending_interrupts[0].interrupt_id);

    let sessions_of = |page: &Value, key: &str| -> Vec<String> {
        page[key].as_array().unwrap().iter().map(|x| x["session_id"].as_str().unwrap().to_owned()).collect()
    };
    let (_, inbox) = call(reqwest::Method::GET, "/v1/interrupts".into(), &bill, None).await;
    println!("finding: bill's inbox: {inbox}");
    assert_eq!(sessions_of(&inbox, "interrupts"), ["b"], "{inbox}");
    let (_, listed) = call(reqwest::Method::GET, "/v1/sessions".into(), &bill, None).await;
    assert_eq!(sessions_of(&listed, "sessions"), ["b"], "{listed}");
    for path in ["/v1/sessions/s", "/v1/sessions/s/events"] {
        let (status, error) = call(reqwest::Method::GET, path.into(), &bill, None).await;
        assert_eq!(
            (status, error["error"]["code"].as_str()),
            (404, Some("session_not_found")),
            "{path}: {error}"
        );
    }
    let decision = serde_json::json!({"approved": true});
    let path = format!("/v1/sessions/s/interrupts/{s_interrupt}");
    let (status, error) = call(reqwest::Method::POST, path.clone(), &bill, Some(decision.clone())).await;
    assert_eq!(status, 404, "bill cannot decide s: {error}");
    let (_, me) = call(reqwest::Method::GET, "/v1/me".into(), &bill, None).await;
    assert_eq!(me["agents"], serde_json::json!(["billing"]), "{me}");
    let body = serde_json::json!({"session_id": "x", "agent": "agent"});
    let (status, error) =
        call(reqwest::Method::POST, "/v1/sessions".into(), &billing_client, Some(body)).await;
    assert_eq!((status, error["error"]["code"].as_str()), (403, Some("agent_not_allowed")), "{error}");
    assert!(world.store.session("x").await.unwrap().is_none(), "nothing was written");
    // The inbox stream's first event: billing's approval only, and a count of one.
    let mut stream = http.get(format!("{url}/v1/interrupts/events")).bearer_auth(&bill).send().await.unwrap();
    let first =
        tokio::time::timeout(Duration::from_secs(10), stream.chunk()).await.unwrap().unwrap().unwrap();
    let first = String::from_utf8_lossy(&first).into_owned();
    assert!(
        first.contains("\"total\":1")
            && first.contains("\"session_id\":\"b\"")
            && !first.contains("\"session_id\":\"s\""),
        "{first}"
    );
    drop(stream);

    // Each approver decides its own agent's approval; the audit trail shows each only its own.
    let (status, _) = call(reqwest::Method::POST, path, &sue, Some(decision.clone())).await;
    assert_eq!(status, 200, "sue decides s");
    let (status, _) = call(
        reqwest::Method::POST,
        format!("/v1/sessions/b/interrupts/{b_interrupt}"),
        &bill,
        Some(decision),
    )
    .await;
    assert_eq!(status, 200, "bill decides b");
    let (_, audit) = call(reqwest::Method::GET, "/v1/audit".into(), &bill, None).await;
    assert_eq!(sessions_of(&audit, "entries"), ["b"], "{audit}");
    let (_, audit) = call(reqwest::Method::GET, "/v1/audit".into(), &ann, None).await;
    let mut all = sessions_of(&audit, "entries");
    all.sort();
    assert_eq!(all, ["b", "s"], "ann sees both: {audit}");
    for id in ["s", "b"] {
        let done = world.wait_idle_after(id, 1).await;
        assert_eq!(done.tool_calls[0].state.name(), "succeeded", "{id}: {}", world.diagnostics());
    }
    let session_of =
        |r: &crate::webhooks::Received| r.json()["data"]["session_id"].as_str().unwrap_or("").to_owned();
    let done = |r: &[crate::webhooks::Received]| {
        r.iter().any(|r| r.json()["type"] == "turn.completed" && session_of(r) == "b")
    };
    receiver.wait_until("b's turn.completed", done, &world).await;
    // Every delivery settled, sent or (another agent's) marked done unsent.
    let outbox = world.store.outbox().expect("an outbox");
    let started = std::time::Instant::now();
    loop {
        let all = outbox.deliveries(0, 1000).await.unwrap();
        if all.iter().all(|d| d.state == tollgate_store::DeliveryState::Delivered) {
            assert!(all.iter().any(|d| d.session_id == "s"), "s's events had deliveries: {all:?}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "deliveries still pending: {all:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sessions: std::collections::BTreeSet<String> = receiver.requests().iter().map(session_of).collect();
    println!("finding: billing's webhook received events of {sessions:?}");
    assert_eq!(
        sessions.into_iter().collect::<Vec<_>>(),
        ["b"],
        "billing's endpoint got billing's events only"
    );
    worker.terminate().await;
    served.stop().await;
}

/// One `tollgate worker --agents agent,billing` process serves two pushed agents side by side:
/// each session runs under its own agent's bundle, and both agents are registered.
#[tokio::test(flavor = "multi_thread")]
async fn one_worker_process_serves_two_pushed_agents_each_session_under_its_own() {
    let Some(world) = World::new("fleet: one process, two agents", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let billing = world.dir.path().join("billing");
    copy_agent(&world.agent, &billing);
    let db = world.db.clone();
    for dir in [&world.agent, &billing] {
        tollgate_ok(&world, &["agent", "push", dir.to_str().unwrap(), "--db", &db]).await;
    }
    let cache = world.dir.path().join("bundle-cache");
    let worker = world.worker_pulling("both", "agent,billing", &cache);
    let api = Served::start_api(&world, "api", &["--insecure-open"]).await;
    for (id, agent) in [("a1", "agent"), ("b1", "billing")] {
        let message = format!("say hello {id}");
        let start = api.tollgate(&["session", "start", id, "--agent", agent, "--message", &message]).await;
        stdout_of(&start, "session start");
    }
    for (id, agent) in [("a1", "agent"), ("b1", "billing")] {
        let done = world.wait_idle_after(id, 1).await;
        assert_eq!(done.messages.last().map(|m| m.text.clone()), Some(format!("said: hello {id}")), "{id}");
        assert_eq!(done.agent.as_deref(), Some(agent));
    }
    let log = plain(&worker.log_text());
    assert_eq!(log.matches("tollgate worker ready (agent ").count(), 2, "{log}");
    let known = world.store.agents().known_agents().await.unwrap();
    let mut names: Vec<&str> = known.iter().map(|k| k.name.as_str()).collect();
    names.dedup();
    assert_eq!(names, ["agent", "billing"], "both registered, locked: {known:?}");
    assert!(known.iter().all(|k| k.locked), "{known:?}");
    worker.terminate().await;
    api.stop().await;
}

/// A Worker whose `tollgate.toml` is edited keeps what it loaded, and says so in its log once.
#[tokio::test(flavor = "multi_thread")]
async fn an_edited_configuration_is_logged_as_needing_a_restart() {
    let Some(world) = World::new("fleet: edited configuration", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let worker = world.worker("w");
    registered(&world, "agent").await;
    let config = world.agent.join("tollgate.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("requires_approval = true", "requires_approval = false")).unwrap();
    let started = std::time::Instant::now();
    let line = loop {
        let log = plain(&worker.log_text());
        if let Some(line) = log.lines().find(|l| l.contains("changed on disk")) {
            break line.to_owned();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "nothing said:\n{log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(line.contains("restart it to apply") && line.contains("tollgate.toml"), "{line}");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(plain(&worker.log_text()).matches("changed on disk").count(), 1, "said once");
    worker.terminate().await;
}

/// `serve --agent DIR` pushes a locked folder as the agent's newest version (once: a restart on
/// the same folder pushes nothing), and leaves an unlocked development folder unpushed, saying
/// why; its own sessions run either way.
#[tokio::test(flavor = "multi_thread")]
async fn serve_pushes_a_locked_agent_folder_as_a_version_and_not_an_unlocked_one() {
    let Some(world) = World::new("fleet: serve pushes", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let log =
        |name: &str| plain(&std::fs::read_to_string(world.dir.path().join(format!("{name}.log"))).unwrap());
    let served = Served::start(&world, "serve-unlocked", None).await;
    assert!(
        log("serve-unlocked").contains("agent `agent` is unlocked, so it is not pushed"),
        "{}",
        log("serve-unlocked")
    );
    assert!(world.store.versions().agent_versions("agent").await.unwrap().is_empty());
    served.stop().await;

    let agent = world.agent.to_str().unwrap().to_owned();
    tollgate_ok(&world, &["agent", "lock", &agent]).await;
    let served = Served::start_with_env(
        &world,
        "serve-locked",
        "127.0.0.1:0",
        &["--insecure-open"],
        &[("USER", "dana")],
    )
    .await;
    let text = log("serve-locked");
    assert!(text.contains("pushed agent@1 (sha256:") && text.contains("current"), "{text}");
    let start = served.tollgate(&["session", "start", "s1", "--message", "say hello s1"]).await;
    stdout_of(&start, "session start s1");
    let done = world.wait_idle_after("s1", 1).await;
    assert_eq!(
        done.messages.last().map(|m| m.text.as_str()),
        Some("said: hello s1"),
        "{}",
        world.diagnostics()
    );
    // Its Worker's series name the version by its number.
    let metrics = fetch(&format!("{}/metrics", served.url)).await.1;
    assert!(
        metrics.lines().any(|l| l.starts_with("tollgate_steps_total{agent=\"agent\",agent_version=\"1\",")),
        "{metrics}"
    );
    served.stop().await;
    let versions = world.store.versions().agent_versions("agent").await.unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!((versions[0].pushed_by.as_str(), versions[0].sessions), ("dana", 1), "{versions:?}");

    let served = Served::start(&world, "serve-again", None).await;
    assert!(
        log("serve-again").contains("agent@1 is this folder already; nothing was pushed"),
        "{}",
        log("serve-again")
    );
    served.stop().await;
    assert_eq!(world.store.versions().agent_versions("agent").await.unwrap().len(), 1);
}
