//! The session page shows a reply as it streams (with no event written per flush):
//! the snapshot's `live_text` when the page opens mid-reply, then the live `text_delta`s and the
//! stored blocks that repeat them, each character once.

use serde_json::json;

use crate::driver::Browser;
use crate::served::Served;
use crate::world::{Refund, World, api};

/// ~1.2 KB in 60 deltas, 50 ms apart, parked halfway at gate `half`.
fn reply() -> (String, String) {
    let text = (0..200).map(|i| format!("w{i:04}")).collect::<Vec<_>>().join(" ");
    (format!("drip 60 50 ;; hold half ;; say {text}"), format!("said: {text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_session_page_shows_a_streaming_reply_from_the_snapshot_then_live_each_character_once() {
    let _one = crate::inbox::ONE_BROWSER.lock().await;
    let test = "browser: live text on the session page";
    let Some(world) = World::new(test, Refund::SingleAttemptWithApproval).await else { return };
    let Some(browser) = Browser::start(test, world.dir.path()).await else { return };
    let served = Served::start(&world, "serve", Some("t0ken")).await;
    let url = served.url.clone();
    let (script, answer) = reply();
    let created = api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions"))
        .bearer_auth("t0ken")
        .json(&json!({"session_id": "live", "message": script})))
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    world.mock.wait_for_gate("half", std::time::Duration::from_secs(90)).await.expect("halfway");

    browser.sign_in(&url, "t0ken", "tollgate:token").await;
    browser.client.goto(&format!("{url}/#/session/live")).await.unwrap();
    // Halfway, from the snapshot: a prefix of the reply, in the "writing…" item.
    let shown = browser
        .until(
            "the partial text",
            "const live = document.getElementById('live-text'); return !live.closest('li').hidden && live.textContent.length > 0 && live.textContent;",
            vec![],
        )
        .await;
    let shown = shown.as_str().expect("text").to_owned();
    assert!(answer.starts_with(&shown) && shown.len() < answer.len(), "{shown:?}");
    // Every text the item shows from now on, recorded by the page.
    browser
        .js(
            "window.liveSeen = []; new MutationObserver(() => window.liveSeen.push(document.getElementById('live-text').textContent)).observe(document.getElementById('live-text'), { childList: true, characterData: true, subtree: true }); return true;",
            vec![],
        )
        .await;
    world.mock.open_gate("half");
    browser
        .until(
            "the whole reply as a message",
            "return [...document.querySelectorAll('#messages li.assistant')].some(li => li.textContent.endsWith(arguments[0]));",
            vec![json!(answer)],
        )
        .await;
    let seen = browser.js("return window.liveSeen", vec![]).await;
    let seen: Vec<String> = serde_json::from_value(seen).expect("strings");
    assert!(!seen.is_empty(), "the page showed text as it streamed");
    for text in &seen {
        assert!(answer.starts_with(text.as_str()), "never a repeated or misplaced part: {text:?}");
    }
    assert!(seen.iter().any(|t| t.len() > shown.len()), "the text grew live: {seen:?}");
    browser.assert_no_console_errors("while the reply streamed").await;
    browser.stop().await;
    served.stop().await;
}
