//! Failures are loud: a refund whose outcome is unknown shows as a banner at the top of its
//! session page; an empty audit trail says so.

use serde_json::json;

use crate::driver::Browser;
use crate::inbox::{ONE_BROWSER, REFUND, add_principal, start_as};
use crate::served::Served;
use crate::world::{Refund, World};

#[tokio::test(flavor = "multi_thread")]
async fn an_outcome_unknown_refund_is_a_banner_on_its_session_page() {
    let _one = ONE_BROWSER.lock().await;
    let Some(world) = World::new("browser: loud failures", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let Some(browser) = Browser::start("browser: loud failures", world.dir.path()).await else { return };
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &["finance"]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    start_as(&served, &carl, "u1", REFUND).await;
    let waiting = world.wait_for("u1", "the refund to wait", |s| !s.pending_interrupts.is_empty()).await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    browser.sign_in(&served.url, &fina, "fina").await;
    browser.client.goto(&format!("{}/#/session/u1", served.url)).await.unwrap();
    let empty = browser
        .until(
            "the empty audit trail",
            "const row = document.querySelector('#audit td.empty'); return row && [row.textContent, document.getElementById('call-failures').hidden];",
            vec![],
        )
        .await;
    assert_eq!(empty, json!(["No decisions yet", true]));

    // The payments service never answers: the single-attempt refund times out after sending.
    world.payments.hold();
    world.decide("u1", &id, true, None, "k-u1").await;
    let done = world.wait_for("u1", "the refund's turn", |s| s.status == "idle").await;
    let status: Vec<&str> = done.tool_calls.iter().map(|c| c.state.name()).collect();
    assert_eq!(status, ["outcome_unknown"], "{}", world.diagnostics());
    let banner = browser
        .until(
            "the banner",
            "const b = document.getElementById('call-failures'); return !b.hidden && b.getAttribute('role') === 'alert' && b.textContent;",
            vec![],
        )
        .await;
    let banner = banner.as_str().unwrap();
    assert!(banner.starts_with("A tool call needs attention"), "{banner}");
    assert!(
        banner.contains(&format!("create_refund ({id}) outcome unknown: it may have taken effect")),
        "{banner}"
    );
    browser.screenshot("session-outcome-unknown").await;
    browser.assert_axe_clean("a session page with a banner").await;
    world.payments.release();
    browser.stop().await;
}
