//! Pinned agent bundles end to end: `tollgate agent lock`, a Worker refusing a bundle that no
//! longer matches its lock, Workers of two bundles on one PostgreSQL database each running only
//! their own sessions, and a session waiting for approval moved to another bundle.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use sha2::Digest;
use tollgate_store::{AgentDigest, StepState};

use crate::served::{Served, stdout_of};
use crate::world::{Refund, World, plain};

const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;

/// `sha256:<hex>` of a file.
fn digest_of(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("read");
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

/// Runs `tollgate agent lock DIR` and returns the agent digest it printed.
async fn lock(world: &World, dir: &Path) -> String {
    let output = world.tollgate().args(["agent", "lock"]).arg(dir).output().await.expect("run agent lock");
    let stdout = stdout_of(&output, "tollgate agent lock");
    let digest = stdout
        .lines()
        .find_map(|l| l.strip_prefix("agent digest: "))
        .unwrap_or_else(|| panic!("no agent digest in:\n{stdout}"))
        .to_owned();
    assert!(stdout.contains("tools/payments.wasm") && stdout.contains("agent.wasm"), "{stdout}");
    assert!(dir.join("tollgate.lock").is_file());
    digest
}

/// A copy of the agent `from` at `to` whose `tollgate.toml` differs by a comment: another bundle
/// of the same agent (named as `from`'s folder is), with the same behaviour.
fn copy_agent(from: &Path, to: &Path, label: &str) {
    std::fs::create_dir_all(to.join("tools")).expect("mkdir");
    for file in ["agent.wasm", "tools/orders.wasm", "tools/payments.wasm"] {
        std::fs::copy(from.join(file), to.join(file)).expect("copy");
    }
    let config = std::fs::read_to_string(from.join("tollgate.toml")).expect("config");
    let name = from.file_name().expect("a folder").to_string_lossy();
    let config = config.replacen("[agent]\n", &format!("[agent]\nname = \"{name}\"\n"), 1);
    std::fs::write(to.join("tollgate.toml"), format!("{config}\n# bundle {label}\n")).expect("write config");
}

/// How many times the log says a segment of `session` started.
fn segments_of(log: &str, session: &str) -> usize {
    let needle = format!("session={session} ");
    plain(log).lines().filter(|l| l.contains("segment starting") && l.contains(&needle)).count()
}

/// A `tollgate worker` run that must fail at start; its stderr.
async fn refused_worker(world: &World, what: &str) -> String {
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        world.tollgate().args(["worker", "--agent"]).arg(&world.agent).args(["--db", &world.db]).output(),
    )
    .await
    .unwrap_or_else(|_| panic!("the Worker did not stop ({what})"))
    .expect("run worker");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "the Worker must refuse to start ({what}); stderr:\n{stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread")]
async fn a_locked_agent_refuses_a_swapped_missing_or_unlisted_file_naming_it_and_both_digests() {
    let Some(world) = World::new("bundles: a swapped component", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let agent = world.agent.clone();
    let digest = lock(&world, &agent).await;
    let check = world.tollgate().args(["agent", "lock", "--check"]).arg(&agent).output().await.unwrap();
    assert!(stdout_of(&check, "agent lock --check").contains(&digest));

    // A session for this bundle waits in the store while the bundle is tampered with.
    let pinned = AgentDigest { digest: digest.clone(), pinned: true };
    tollgate_sessions::writes::start_under(world.store.as_ref(), "s", Some(pinned)).await.unwrap();
    world.send("s", "say hello").await;

    let payments = agent.join("tools/payments.wasm");
    let original = std::fs::read(&payments).unwrap();
    let expected = digest_of(&payments);
    std::fs::copy(tollgate_test_guests::ORDERS, &payments).unwrap();
    let found = digest_of(&payments);
    assert_ne!(expected, found);
    let stderr = refused_worker(&world, "swapped payments.wasm").await;
    assert!(
        stderr.contains(&format!("tools/payments.wasm changed: expected {expected}, found {found}")),
        "the error names the file and both digests:\n{stderr}"
    );
    let check = world.tollgate().args(["agent", "lock", "--check"]).arg(&agent).output().await.unwrap();
    assert_eq!(check.status.code(), Some(1), "--check fails on a changed bundle");
    std::fs::write(&payments, &original).unwrap();

    std::fs::copy(tollgate_test_guests::ORDERS, agent.join("tools/extra.wasm")).unwrap();
    let stderr = refused_worker(&world, "an unlisted tools/extra.wasm").await;
    assert!(stderr.contains("tools/extra.wasm is not in the lock"), "{stderr}");
    std::fs::remove_file(agent.join("tools/extra.wasm")).unwrap();

    let orders = agent.join("tools/orders.wasm");
    let orders_digest = digest_of(&orders);
    let orders_bytes = std::fs::read(&orders).unwrap();
    std::fs::remove_file(&orders).unwrap();
    let stderr = refused_worker(&world, "a missing tools/orders.wasm").await;
    assert!(stderr.contains(&format!("tools/orders.wasm is missing: expected {orders_digest}")), "{stderr}");
    std::fs::write(&orders, orders_bytes).unwrap();

    let lock_file = agent.join("tollgate.lock");
    let good_lock = std::fs::read_to_string(&lock_file).unwrap();
    std::fs::write(&lock_file, "version = 1\nagent_digest = [\n").unwrap();
    let stderr = refused_worker(&world, "a lock that does not parse").await;
    assert!(stderr.contains(&lock_file.display().to_string()) && stderr.contains("line 2"), "{stderr}");
    std::fs::write(&lock_file, good_lock).unwrap();

    // Nothing ran while the bundle was wrong: the session's step was never claimed.
    let step = world.store.step_in_flight("s").await.unwrap().expect("still in flight");
    assert_eq!((step.state, step.attempt), (StepState::Queued, 0), "{step:?}");

    // Restored, the bundle has its digest again and a Worker runs the session.
    let worker = world.worker("restored");
    let done = world.wait_idle_after("s", 1).await;
    assert_eq!(done.messages.last().map(|m| m.text.as_str()), Some("said: hello"), "{}", world.diagnostics());
    assert!(plain(&worker.log_text()).contains(&digest), "the Worker logs the digest it loaded");
    worker.terminate().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_of_two_bundles_on_one_postgres_database_each_run_only_their_own_sessions() {
    let Some(db) = crate::pg_database().await else { return };
    let Some(world) =
        World::on_db("bundles: two bundles on PostgreSQL", Refund::SingleAttemptWithApproval, &db).await
    else {
        return;
    };
    let agent_b = world.dir.path().join("agent-b");
    copy_agent(&world.agent, &agent_b, "B");
    let (a, b) = (lock(&world, &world.agent).await, lock(&world, &agent_b).await);
    assert_ne!(a, b, "two bundles, two digests");
    const EACH: usize = 4;
    let store = world.store.as_ref();
    let mut all = Vec::new();
    for (prefix, digest) in [("a", Some(&a)), ("b", Some(&b)), ("any", None)] {
        for i in 0..EACH {
            let id = format!("{prefix}{i}");
            let agent = digest.map(|d| AgentDigest { digest: d.clone(), pinned: true });
            tollgate_sessions::writes::start_under(store, &id, agent).await.unwrap();
            world.send(&id, &format!("say hello {id}")).await;
            all.push(id);
        }
    }
    let worker_a = world.worker_of("worker-a", &world.agent);
    let worker_b = world.worker_of("worker-b", &agent_b);
    for id in &all {
        let done = world.wait_idle_after(id, 1).await;
        assert_eq!(done.messages.last().map(|m| m.text.clone()), Some(format!("said: hello {id}")), "{id}");
    }
    let (log_a, log_b) = (worker_a.log_text(), worker_b.log_text());
    for i in 0..EACH {
        let (on_a, on_b) = (format!("a{i}"), format!("b{i}"));
        assert_eq!((segments_of(&log_a, &on_a), segments_of(&log_b, &on_a)), (1, 0), "{on_a} ran on A only");
        assert_eq!((segments_of(&log_a, &on_b), segments_of(&log_b, &on_b)), (0, 1), "{on_b} ran on B only");
        let any = format!("any{i}");
        assert_eq!(segments_of(&log_a, &any) + segments_of(&log_b, &any), 1, "{any} ran once, on either");
    }
    let listed = store.list_sessions(None, "", 100).await.unwrap();
    let agent_of = |id: &str| listed.iter().find(|s| s.session_id == id).and_then(|s| s.agent.clone());
    assert_eq!(agent_of("a0").map(|x| x.digest), Some(a));
    assert_eq!(agent_of("b0").map(|x| x.digest), Some(b));
    assert_eq!(agent_of("any0"), None);
    worker_a.terminate().await;
    worker_b.terminate().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_waiting_for_approval_under_bundle_a_upgraded_to_b_is_finished_by_a_worker_of_b() {
    let Some(world) =
        World::new("bundles: upgrade a waiting session", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let agent_b = world.dir.path().join("agent-b");
    copy_agent(&world.agent, &agent_b, "B");
    let (a, b) = (lock(&world, &world.agent).await, lock(&world, &agent_b).await);
    // `serve` loads bundle A: the sessions it creates are pinned to A.
    let served = Served::start(&world, "serve-a", None).await;
    let worker_b = world.worker_of("worker-b", &agent_b);
    stdout_of(&served.tollgate(&["session", "start", "w", "--message", REFUND]).await, "session start");
    let waiting =
        world.wait_for("w", "the refund to wait for approval", |s| !s.pending_interrupts.is_empty()).await;
    let interrupt = waiting.pending_interrupts[0].interrupt_id.clone();
    stdout_of(&served.tollgate(&["session", "start", "idle"]).await, "session start idle");

    let listed = stdout_of(&served.tollgate(&["session", "list"]).await, "session list");
    assert!(
        listed.contains("AGENT DIGEST") && listed.lines().any(|l| l.starts_with("w ") && l.contains(&a)),
        "{listed}"
    );
    let json = stdout_of(&served.tollgate(&["session", "list", "--json"]).await, "session list --json");
    let page: Value = serde_json::from_str(&json).unwrap();
    crate::world::assert_schema("SessionPage", &page);
    assert_eq!(page["sessions"][1]["session_id"], "w");
    assert_eq!(
        (&page["sessions"][1]["agent_digest"], &page["sessions"][1]["agent_pinned"]),
        (&Value::from(a.clone()), &Value::from(true))
    );

    let bad = served.tollgate(&["session", "upgrade", "w", "--to", "sha256:nope"]).await;
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not an agent digest"), "{bad:?}");
    let moved =
        stdout_of(&served.tollgate(&["session", "upgrade", "w", "--to", &b]).await, "session upgrade");
    assert!(moved.contains(&format!("session w: {a} -> {b}")), "{moved}");
    let again =
        stdout_of(&served.tollgate(&["session", "upgrade", "w", "--to", &b]).await, "session upgrade again");
    assert!(again.contains("already on"), "{again}");
    let all = served.tollgate(&["session", "upgrade", "--all", "--from", &a, "--to", &b]).await;
    let all = stdout_of(&all, "session upgrade --all");
    assert!(
        all.contains("idle: ") && all.contains("1 upgraded, 0 busy"),
        "only `idle` was still on A:\n{all}"
    );

    world.decide("w", &interrupt, true, None, "approve-w").await;
    let done = world.wait_idle_after("w", 1).await;
    assert_eq!(done.tool_calls[0].state.name(), "succeeded", "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 1, "the refund ran once");
    let events = world.events("w").await;
    let upgraded: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == "agent_upgraded")
        .map(|e| serde_json::from_str(e.payload.get()).unwrap())
        .collect();
    assert_eq!(upgraded, [serde_json::json!({"from": a, "from_pinned": true, "to": b})]);
    let log_a = std::fs::read_to_string(world.dir.path().join("serve-a.log")).unwrap();
    assert_eq!(segments_of(&log_a, "w"), 1, "A ran the segment that asked for approval, nothing after");
    assert_eq!(segments_of(&worker_b.log_text(), "w"), 1, "B resumed the turn after the refund");
    worker_b.terminate().await;
    served.stop().await;
}
