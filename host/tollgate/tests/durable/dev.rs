//! `tollgate dev`: a scaffolded tool served with the mock model, rebuilt when its source changes
//! and the server restarted when `tollgate.toml` does, while a session goes on.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::world::{Refund, World};

/// Reads `lines` until one contains `needle` (60 s at most); the lines seen so far.
async fn until(lines: &mut Lines, seen: &mut String, needle: &str) -> String {
    let found = tokio::time::timeout(Duration::from_secs(90), async {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains(needle) {
                return Some(line);
            }
        }
        None
    })
    .await;
    found.ok().flatten().unwrap_or_else(|| panic!("`{needle}` never came; dev said:\n{seen}"))
}

type Lines = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

/// `tollgate dev` on `world`'s agent without a model credential (dev starts the mock itself), once
/// it watches: the process, its stdout, what it said, the inbox's URL and the token it printed.
async fn start_dev(world: &World) -> (tokio::process::Child, Lines, String, String, String) {
    let agent = world.agent.to_str().unwrap();
    let mut child = world
        .tollgate()
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .args(["dev", "--agent", agent, "--listen", "127.0.0.1:0", "--db", &world.db, "--poll-ms", "200"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    let inbox = until(&mut lines, &mut seen, "inbox: ").await;
    until(&mut lines, &mut seen, "watching ").await;
    let url = inbox.split_whitespace().nth(1).unwrap().trim_end_matches('/').to_owned();
    let token =
        inbox.split_whitespace().find(|w| w.starts_with("tg_")).unwrap().trim_end_matches(',').to_owned();
    (child, lines, seen, url, token)
}

#[tokio::test(flavor = "multi_thread")]
async fn dev_serves_with_the_mock_rebuilds_a_changed_tool_and_reloads_a_changed_configuration() {
    let Some(world) = World::new("dev: the tool author's loop", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let agent = world.agent.to_str().unwrap().to_owned();
    let new = world
        .tollgate()
        .args(["new", "tool", "greet", "--lang", "js", "--agent", &agent])
        .output()
        .await
        .unwrap();
    assert!(new.status.success(), "{}", String::from_utf8_lossy(&new.stderr));
    let (mut child, mut lines, mut seen, url, token) = start_dev(&world).await;
    assert!(seen.contains("the scripted mock model answers on"), "{seen}");
    assert!(seen.contains("built ") && seen.contains("greet.wasm (js, "), "{seen}");
    let client = |args: &[&str]| {
        let mut command = world.tollgate();
        command.args(args).args(["--url", &url]).env("TOLLGATE_TOKEN", &token);
        command
    };
    let ask = |text: &str| {
        let text = text.to_owned();
        let mut command = client(&["session", "send", "d1"]);
        command.arg(text);
        command
    };
    let start = client(&["session", "start", "d1", "--message", r#"call greet {"text":"dev"}"#])
        .output()
        .await
        .unwrap();
    assert!(start.status.success(), "{}", String::from_utf8_lossy(&start.stderr));
    let done = world.wait_idle_after("d1", 1).await;
    assert_eq!(done.messages.last().map(|m| m.text.as_str()), Some("called greet: hello, dev"), "{seen}");

    // The tool's source changes: rebuilt, and the next call runs the new build.
    let source = world.agent.join("src/greet/tool.js");
    let text = std::fs::read_to_string(&source).unwrap().replace("`hello, ${text}`", "`hi there, ${text}`");
    std::fs::write(&source, text).unwrap();
    let rebuilt = until(&mut lines, &mut seen, "rebuilt ").await;
    assert!(rebuilt.contains("rebuilt greet"), "{seen}");
    assert!(ask(r#"call greet {"text":"again"}"#).output().await.unwrap().status.success());
    let done = world.wait_idle_after("d1", 2).await;
    assert_eq!(
        done.messages.last().map(|m| m.text.as_str()),
        Some("called greet: hi there, again"),
        "{seen}"
    );

    // The configuration changes: the server restarts on the same address and the session goes on.
    let config = world.agent.join("tollgate.toml");
    let text = std::fs::read_to_string(&config).unwrap() + "\n# edited\n";
    std::fs::write(&config, text).unwrap();
    let reloaded = until(&mut lines, &mut seen, "reloaded tollgate.toml").await;
    assert!(reloaded.contains(&url), "the same address: {seen}");
    assert!(ask("say after the reload").output().await.unwrap().status.success());
    let done = world.wait_idle_after("d1", 3).await;
    assert_eq!(done.messages.last().map(|m| m.text.as_str()), Some("said: after the reload"), "{seen}");
    println!("finding: tollgate dev said:\n{seen}");
    // SIGTERM: it stops its server and exits.
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(i32::try_from(child.id().unwrap()).unwrap(), libc::SIGTERM) };
    let status = tokio::time::timeout(Duration::from_secs(40), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status:?}");
}

/// A changed `tollgate.toml` reaches new sessions only: a session waiting for approval when it
/// changes keeps the configuration it started under (its later turns too), run by a Worker of the
/// previous configuration pushed as a version, while a new session gets the new one.
#[tokio::test(flavor = "multi_thread")]
async fn dev_keeps_a_session_in_progress_on_the_configuration_it_started_under() {
    let Some(world) =
        World::new("dev: running sessions keep their config", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let (mut child, mut lines, mut seen, url, token) = start_dev(&world).await;
    let client = |args: &[&str]| {
        let mut command = world.tollgate();
        command.args(args).args(["--url", &url]).env("TOLLGATE_TOKEN", &token);
        command
    };
    let refund = r#"call create_refund {"order_id":"7","amount_cents":500}"#;
    let started = client(&["session", "start", "old", "--message", refund]).output().await.unwrap();
    assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
    let waiting = world.wait_for("old", "its approval", |s| s.status == "awaiting_approval").await;
    let interrupt = waiting.pending_interrupts[0].interrupt_id.clone();

    // The new configuration: `lookup_order` now waits for approval.
    let config = world.agent.join("tollgate.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        r#"lookup_order = { effect = "read" }"#,
        r#"lookup_order = { effect = "read", requires_approval = true }"#,
    );
    std::fs::write(&config, text).unwrap();
    let kept = until(&mut lines, &mut seen, "kept ").await;
    assert!(kept.contains("kept 1 session"), "{seen}");
    until(&mut lines, &mut seen, "reloaded tollgate.toml").await;

    // The old session finishes its turn, and its next turn still reads orders at once.
    world.decide("old", &interrupt, true, None, "k1").await;
    world.wait_idle_after("old", 1).await;
    assert_eq!(world.payments.count(), 1);
    let lookup = r#"call lookup_order {"order_id":"7"}"#;
    assert!(client(&["session", "send", "old", lookup]).output().await.unwrap().status.success());
    let done = world.wait_idle_after("old", 2).await;
    let said = done.messages.last().map(|m| m.text.clone()).unwrap_or_default();
    assert!(said.starts_with("called lookup_order: "), "the old configuration: {said}\n{seen}");
    // A new session gets the new configuration: the same read waits for approval.
    let fresh = client(&["session", "start", "new", "--message", lookup]).output().await.unwrap();
    assert!(fresh.status.success(), "{}", String::from_utf8_lossy(&fresh.stderr));
    let waiting = world.wait_for("new", "the new policy", |s| s.status == "awaiting_approval").await;
    assert_eq!(waiting.pending_interrupts[0].tool_name, "lookup_order");
    // dev SIGKILLed (the other test stops it gracefully): its server and the previous
    // configuration's Worker die with it instead of running this store's sessions alone.
    let (servers, kept) = (|| servers_of(&world.db), || workers_pulling_from(&world.db));
    assert!(
        !servers().is_empty() && !kept().is_empty(),
        "dev's server and kept Worker run while dev does\n{seen}"
    );
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(i32::try_from(child.id().unwrap()).unwrap(), libc::SIGKILL) };
    child.wait().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !kept().is_empty() || !servers().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "outlived dev: the kept Worker {:?}, the server {:?}",
            kept(),
            servers()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pids of `tollgate serve` processes on the store `db`: the one dev runs.
fn servers_of(db: &str) -> Vec<i32> {
    tollgate_testing::processes(|args| {
        args.get(1) == Some(&b"serve".as_slice()) && args.contains(&db.as_bytes())
    })
}

/// The pids of Workers serving agents pulled from the store `db` (`--agent-name … --db db`): the
/// one dev keeps for a previous configuration.
fn workers_pulling_from(db: &str) -> Vec<i32> {
    tollgate_testing::processes(|args| {
        args.contains(&b"--agent-name".as_slice()) && args.contains(&db.as_bytes())
    })
}
