//! One broken tool is one broken component: a truncated `.wasm` and a component whose
//! `list-tools` traps, dropped into a running server's unlocked agent, are unavailable, named by
//! `tollgate tools check`, `/healthz`, `/metrics` and the log (once), while the other components
//! keep serving every session's turns.

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
