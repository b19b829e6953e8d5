//! One broken tool is one broken component: a truncated `.wasm` and a component whose
//! `list-tools` traps, dropped into a running server's unlocked agent, are unavailable, named by
//! `tollgate tools check`, `/healthz`, `/metrics` and the log (once), while the other components
//! keep serving every session's turns. A component already broken when a Worker starts does not
//! stop it, and a `tollgate api` without a Worker names it from the store (`/healthz`,
//! `/metrics`, the inbox) until it is mended or the Worker stops.

use std::time::Duration;

use crate::served::Served;
use crate::world::{Refund, World};

/// A turn that calls `lookup_order` (of `orders.wasm`) and must complete with its result.
async fn looked_up(world: &World, session: &str, turns: usize) {
    world.send(session, r#"call lookup_order {"order_id":"7"}"#).await;
    let done = world.wait_idle_after(session, turns).await;
    assert!(done.last_turn_error.is_none(), "{session}: {done:#?}\n{}", world.diagnostics());
    let answer = done.messages.last().map(|m| m.text.clone()).unwrap_or_default();
    assert!(answer.contains(r#""status":"delivered""#), "{session}: {done:#?}\n{}", world.diagnostics());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_truncated_and_a_trapping_component_leave_the_others_serving_every_session() {
    let Some(world) =
        World::new("broken tools: one broken component", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let served = Served::start(&world, "serve", None).await;
    let http = reqwest::Client::new();
    looked_up(&world, "broken-before", 1).await;

    // Dropped into the running agent's tools/: half of a component, and one whose list-tools traps.
    let tools = world.agent.join("tools");
    let bytes = std::fs::read(tollgate_test_guests::ORDERS).unwrap();
    std::fs::write(tools.join("truncated.wasm"), &bytes[..bytes.len() / 2]).unwrap();
    std::fs::copy(tollgate_test_guests::HOSTILE, tools.join("trapping.wasm")).unwrap();
    std::fs::write(tools.join("trapping.toml"), "[config]\nHOSTILE_LIST = \"trap\"\n").unwrap();
    // Past the settling time: the next look loads them, and both fail.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    for (i, session) in ["broken-a", "broken-b", "broken-c"].iter().enumerate() {
        looked_up(&world, session, 1).await;
        if i == 0 {
            looked_up(&world, "broken-before", 2).await;
        }
    }

    let check = world.tollgate().args(["tools", "check"]).arg(&world.agent).output().await.unwrap();
    let stderr = String::from_utf8_lossy(&check.stderr);
    assert_eq!(check.status.code(), Some(2), "a broken component fails the check: {stderr}");
    assert!(stderr.contains("unavailable: truncated ("), "{stderr}");
    assert!(
        stderr.contains("unavailable: trapping (") && stderr.contains("listing its tools failed"),
        "{stderr}"
    );

    let health: serde_json::Value =
        http.get(format!("{}/healthz", served.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "degraded", "{health}");
    let named: Vec<&str> = health["tools_unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["component"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["trapping", "truncated"], "{health}");
    let metrics = http.get(format!("{}/metrics", served.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tollgate_tool_components_unavailable{agent=\"agent\"} 2"), "{metrics}");

    // Named in the log once per change, not once per segment.
    let log = std::fs::read_to_string(world.dir.path().join("serve.log")).unwrap();
    let warned = |name: &str| {
        log.lines().filter(|l| l.contains("a tool component did not load") && l.contains(name)).count()
    };
    assert_eq!(warned("truncated.wasm"), 1, "{log}");
    assert_eq!(warned("trapping.wasm"), 1, "{log}");
    served.stop().await;
}

/// `GET url` of `served` as JSON.
async fn json_of(served: &Served, path: &str) -> serde_json::Value {
    let answer = reqwest::get(format!("{}{path}", served.url)).await.unwrap();
    assert!(answer.status().is_success(), "GET {path}: {}", answer.status());
    answer.json().await.unwrap()
}

/// `/healthz` of `served`, once it says `status` (10 s at most).
async fn health_when(served: &Served, status: &str) -> serde_json::Value {
    let started = std::time::Instant::now();
    loop {
        let health = json_of(served, "/healthz").await;
        if health["status"] == status {
            return health;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "never {status}: {health}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A component already broken when the Worker starts does not stop it: it serves the others. A
/// `tollgate api` with no Worker in its process learns of the component from the store and names
/// it (with its Worker and reason) in `/healthz`, `/metrics` and the inbox's attention list; once
/// the file is mended, the Worker's next look clears all three, and a Worker that stops takes its
/// report with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_component_broken_at_start_leaves_the_worker_serving_and_a_standalone_api_names_it() {
    let Some(world) =
        World::new("broken tools: broken at start, a standalone API", Refund::SingleAttemptWithApproval)
            .await
    else {
        return;
    };
    let tools = world.agent.join("tools");
    let bytes = std::fs::read(tollgate_test_guests::ORDERS).unwrap();
    std::fs::write(tools.join("truncated.wasm"), &bytes[..bytes.len() / 2]).unwrap();
    let api = Served::start_api(&world, "api", &["--insecure-open"]).await;
    let worker = world.worker("worker-1");
    looked_up(&world, "at-start", 1).await;

    let health = health_when(&api, "degraded").await;
    let named = &health["tools_unavailable"];
    assert_eq!(named.as_array().map(Vec::len), Some(1), "{health}");
    assert_eq!(
        (&named[0]["agent"], &named[0]["component"], &named[0]["worker"], &named[0]["serving_last_good"]),
        (&"agent".into(), &"truncated".into(), &"worker-1".into(), &false.into()),
        "{health}"
    );
    assert!(named[0]["reason"].as_str().unwrap().contains("truncated.wasm"), "{health}");
    assert!(named[0]["since"].as_i64().unwrap() > 0, "{health}");
    let metrics = reqwest::get(format!("{}/metrics", api.url)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tollgate_tool_components_unavailable{agent=\"agent\"} 1"), "{metrics}");
    let attention = json_of(&api, "/v1/attention").await;
    assert_eq!(attention["tools_unavailable"], *named, "the inbox names it as /healthz does");
    assert_eq!(attention["calls"], serde_json::json!([]), "{attention}");

    // Mended: the Worker's next look (this turn's) clears it everywhere.
    std::fs::remove_file(tools.join("truncated.wasm")).unwrap();
    looked_up(&world, "at-start", 2).await;
    let health = health_when(&api, "ok").await;
    assert!(health.get("tools_unavailable").is_none(), "{health}");
    let metrics = reqwest::get(format!("{}/metrics", api.url)).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("tollgate_tool_components_unavailable{agent=\"agent\"} 0"), "{metrics}");
    assert_eq!(json_of(&api, "/v1/attention").await["tools_unavailable"], serde_json::json!([]));

    // Broken again while it runs, then the Worker stops: its report goes with it.
    std::fs::copy(tollgate_test_guests::HOSTILE, tools.join("trapping.wasm")).unwrap();
    std::fs::write(tools.join("trapping.toml"), "[config]\nHOSTILE_LIST = \"trap\"\n").unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    looked_up(&world, "at-start", 3).await;
    let health = health_when(&api, "degraded").await;
    assert_eq!(health["tools_unavailable"][0]["component"], "trapping", "{health}");
    let log = worker.log.clone();
    worker.terminate().await;
    health_when(&api, "ok").await;

    // Named in the Worker's log once per change, not once per segment.
    let log = std::fs::read_to_string(log).unwrap();
    let warned = |name: &str| {
        log.lines().filter(|l| l.contains("a tool component did not load") && l.contains(name)).count()
    };
    assert_eq!(warned("truncated.wasm"), 1, "{log}");
    assert_eq!(warned("trapping.wasm"), 1, "{log}");
    api.stop().await;
}
