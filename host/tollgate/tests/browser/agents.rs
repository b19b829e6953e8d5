//! The Agents page: each agent's versions in the store (current, canary, sessions on each, who
//! pushed them) and the bundles its Workers loaded, and the sessions list filtered to one agent.

use crate::driver::Browser;
use crate::served::{Served, stdout_of};
use crate::world::{Refund, World};

#[tokio::test(flavor = "multi_thread")]
async fn the_agents_page_shows_versions_canary_and_loaded_bundles_and_links_to_the_agents_sessions() {
    let _one = crate::inbox::ONE_BROWSER.lock().await;
    let test = "browser: the agents page";
    let Some(world) = World::new(test, Refund::SingleAttemptWithApproval).await else { return };
    let Some(browser) = Browser::start(test, world.dir.path()).await else { return };
    let db = world.db.clone();
    let push = |dir: std::path::PathBuf| {
        let mut command = world.tollgate();
        command.args(["agent", "push"]).arg(dir).args(["--db", &db, "--by", "carl"]);
        command
    };
    stdout_of(&push(world.agent.clone()).output().await.unwrap(), "agent push @1");
    // A second version: the same agent with another comment.
    let second = world.dir.path().join("v2").join("agent");
    std::fs::create_dir_all(second.join("tools")).unwrap();
    for file in ["agent.wasm", "tools/orders.wasm", "tools/payments.wasm"] {
        std::fs::copy(world.agent.join(file), second.join(file)).unwrap();
    }
    let config = std::fs::read_to_string(world.agent.join("tollgate.toml")).unwrap();
    std::fs::write(second.join("tollgate.toml"), format!("{config}\n# v2\n")).unwrap();
    stdout_of(&push(second).output().await.unwrap(), "agent push @2");
    let canary =
        world.tollgate().args(["agent", "promote", "agent@2", "--share", "30", "--db", &db]).output();
    stdout_of(&canary.await.unwrap(), "agent promote --share");
    let served = Served::start(&world, "serve", Some("t0ken")).await;
    let url = served.url.clone();
    stdout_of(&served.tollgate(&["session", "start", "s1", "--token", "t0ken"]).await, "session start");

    browser.sign_in(&url, "t0ken", "tollgate:token").await;
    browser.client.goto(&format!("{url}/#/agents")).await.unwrap();
    let shown = browser
        .until(
            "the agent with its two versions and its loaded bundle",
            "const s = document.querySelector('section[data-agent=\"agent\"]'); \
             return s && s.querySelectorAll('table.versions tbody tr').length === 2 \
               && s.querySelectorAll('table.loaded tbody tr').length >= 1 && s.textContent;",
            vec![],
        )
        .await;
    let text = shown.as_str().unwrap_or_default().to_owned();
    println!("finding: the agents page says: {text}");
    assert!(text.contains("current: @1") && text.contains("canary @2 for 30% of new sessions"), "{text}");
    assert!(text.contains("canary 30%") && text.contains("carl"), "{text}");
    browser.assert_no_console_errors("the agents page").await;
    browser.click("section[data-agent=\"agent\"] a").await;
    let rows = browser
        .until(
            "the sessions list filtered to the agent",
            "return location.hash === '#/sessions?agent=agent' \
               && document.getElementById('agent-filter').value === 'agent' \
               && document.querySelectorAll('#sessions-table tbody tr').length === 1 \
               && document.querySelector('#sessions-table tbody tr').textContent;",
            vec![],
        )
        .await;
    assert!(rows.as_str().unwrap_or_default().starts_with("s1"), "{rows}");
    browser.stop().await;
    served.stop().await;
}
