//! The session page shows what the model thought and did inline: its thinking and its inline
//! tool calls (the built-in `Read`, an allowed `Bash`, a custom read), live while the turn runs
//! and again from the event log when the page is opened afterwards.

use serde_json::json;

use crate::driver::Browser;
use crate::served::Served;
use crate::world::{Refund, World, api};

/// JavaScript: the activity items as `[class, text]`.
const ACTIVITY: &str = "return [...document.querySelectorAll('#activity li:not(.empty)')].map(li => [li.className, li.textContent]);";

#[tokio::test(flavor = "multi_thread")]
async fn the_session_page_shows_the_thinking_and_the_inline_tool_calls_live_and_after_a_reload() {
    let _one = crate::inbox::ONE_BROWSER.lock().await;
    let test = "browser: thinking and inline tool calls on the session page";
    let Some(world) = World::new(test, Refund::SingleAttemptWithApproval).await else { return };
    let Some(browser) = Browser::start(test, world.dir.path()).await else { return };
    let served = Served::start(&world, "serve", Some("t0ken")).await;
    let url = served.url.clone();
    // Parked before the reply that thinks and calls, so the page is open when they happen.
    let (notes, script) = world.thinking_script("think");
    let script = format!("pause go ;; {script}");
    let created = api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions"))
        .bearer_auth("t0ken")
        .json(&json!({"session_id": "think", "message": script})))
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    world.mock.wait_for_gate("go", std::time::Duration::from_secs(90)).await.expect("parked");

    browser.sign_in(&url, "t0ken", "tollgate:token").await;
    browser.client.goto(&format!("{url}/#/session/think")).await.unwrap();
    browser
        .until(
            "the empty activity panel",
            "return document.querySelector('#activity li.empty') !== null",
            vec![],
        )
        .await;
    world.mock.open_gate("go");
    let live = browser
        .until(
            "the thinking and three finished inline calls, live",
            &format!("const items = (() => {{ {ACTIVITY} }})(); return items.filter(i => i[0].includes('done')).length === 3 && items.filter(i => i[0] === 'thinking').length === 1 && items.some(i => i[1].includes('all three answered')) && items;"),
            vec![],
        )
        .await;
    let check = |items: &serde_json::Value, when: &str| {
        let items: Vec<(String, String)> = serde_json::from_value(items.clone()).expect("pairs");
        let thinking: Vec<&(String, String)> = items.iter().filter(|i| i.0 == "thinking").collect();
        assert_eq!(thinking.len(), 1, "{when}: one thinking item for the segment: {items:?}");
        assert!(
            thinking[0].1.ends_with("the customer asks about order 7all three answered"),
            "{when}: {items:?}"
        );
        for (name, side) in [("Read", "CLI tool"), ("Bash", "CLI tool"), ("lookup_order", "custom tool")] {
            let call =
                items.iter().find(|i| i.0.starts_with("tool") && i.1.contains(&format!("inline){name}")));
            let call = call.unwrap_or_else(|| panic!("{when}: no {name} item: {items:?}"));
            assert!(call.1.contains(side) && call.1.contains("succeeded"), "{when}: {call:?}");
        }
        let read = items.iter().find(|i| i.1.contains("inline)Read")).expect("Read");
        assert!(read.1.contains(&notes.display().to_string()), "{when}: its arguments are shown: {read:?}");
    };
    check(&live, "live");
    let done = world.wait_idle_after("think", 1).await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());

    // Opened afterwards: the same, from the event log.
    browser.client.goto(&format!("{url}/#/sessions")).await.unwrap();
    browser.client.goto(&format!("{url}/#/session/think")).await.unwrap();
    let stored = browser
        .until(
            "the activity from the event log",
            &format!("const items = (() => {{ {ACTIVITY} }})(); return items.filter(i => i[0].includes('done')).length === 3 && items;"),
            vec![],
        )
        .await;
    check(&stored, "after a reload");
    browser.assert_no_console_errors("while the activity showed").await;
    browser.stop().await;
    served.stop().await;
}
