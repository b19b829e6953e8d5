//! The session page's "Cancel turn" button: a client who started the session cancels its
//! streaming turn with it (the page shows who cancelled, the button greys out, the next message
//! runs); a client who did not start it sees the button disabled, with why.

use std::time::Duration;

use serde_json::json;

use crate::driver::Browser;
use crate::served::{Served, add_principal};
use crate::world::{Refund, World, api};

/// A reply streamed in deltas and parked halfway at gate `gate`.
fn held_reply(gate: &str) -> String {
    let text = (0..120).map(|i| format!("w{i:03}")).collect::<Vec<_>>().join(" ");
    format!("drip 40 25 ;; hold {gate} ;; say {text}")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_session_page_cancels_a_streaming_turn_for_its_client_and_greys_the_button_out_for_others() {
    let _one = crate::inbox::ONE_BROWSER.lock().await;
    let test = "browser: cancel a turn from the session page";
    let Some(world) = World::new(test, Refund::SingleAttemptWithApproval).await else { return };
    let Some(browser) = Browser::start(test, world.dir.path()).await else { return };
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let dana = add_principal(&world, &file, "dana", &["client"], &[]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let url = served.url.clone();
    let created = api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions"))
        .bearer_auth(&carl)
        .json(&json!({"session_id": "s", "message": held_reply("streaming")})))
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    world.mock.wait_for_gate("streaming", Duration::from_secs(90)).await.expect("streaming");

    // Another client sees the button disabled, and why.
    browser.sign_in(&url, &dana, "dana").await;
    browser.client.goto(&format!("{url}/#/session/s")).await.unwrap();
    let why = browser
        .until(
            "the reason the button is disabled",
            "const b = document.getElementById('cancel-turn'); return b && b.disabled && document.getElementById('cancel-why').textContent;",
            vec![],
        )
        .await;
    assert!(why.as_str().unwrap().contains("only the sessions it started"), "{why}");

    // The session's client cancels it with the button.
    browser.click("#sign-out").await;
    browser.sign_in(&url, &carl, "carl").await;
    browser.client.goto(&format!("{url}/#/session/s")).await.unwrap();
    browser
        .until(
            "the live text and an enabled button",
            "return document.getElementById('live-text').textContent.length > 0 && !document.getElementById('cancel-turn').disabled;",
            vec![],
        )
        .await;
    browser.click("#cancel-turn").await;
    let shown = browser
        .until(
            "the cancelled turn",
            "return document.getElementById('last-turn-cancelled').textContent;",
            vec![],
        )
        .await;
    assert_eq!(shown, json!("Last turn (turn-1) cancelled by carl."));
    browser
        .until(
            "the button greyed out on the idle session",
            "const b = document.getElementById('cancel-turn'); return b.disabled && document.getElementById('cancel-why').textContent === 'No turn is running.' && document.getElementById('live-text').closest('li').hidden;",
            vec![],
        )
        .await;
    let audit = browser.js("return document.getElementById('audit').textContent", vec![]).await;
    assert!(audit.as_str().unwrap().contains("cancelled"), "{audit}");
    let done = world.snapshot("s").await;
    assert_eq!(done.last_turn_cancelled.map(|c| c.cancelled_by), Some("carl".into()));

    // The next message, sent from the page, runs as usual.
    world.mock.open_gate("streaming");
    browser.type_into("#message-text", "say hello again").await;
    browser.click("#send-form button[type=submit]").await;
    browser
        .until(
            "the next answer",
            "return [...document.querySelectorAll('#messages li.assistant')].some(li => li.textContent.endsWith('said: hello again')) && document.getElementById('last-turn-cancelled').textContent === '';",
            vec![],
        )
        .await;
    browser.assert_no_console_errors("while cancelling a turn").await;
    browser.stop().await;
    served.stop().await;
}
