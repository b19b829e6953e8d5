//! Safer deciding in the inbox: a decision is held on its card, undoable, before it is sent;
//! focus moves to the next card; a refund above the policy's threshold asks for a confirmation;
//! Reject is a form; "Approve for this session" sits in a secondary menu.

use std::time::Duration;

use serde_json::json;

use crate::driver::Browser;
use crate::inbox::{CARD, ONE_BROWSER, REFUND, card_shown, in_card, start_as};
use crate::served::Served;
use crate::served::add_principal;
use crate::world::{Refund, World};

/// How long the page holds a decision in this test (ms).
const HOLD_MS: u64 = 1500;

#[tokio::test(flavor = "multi_thread")]
async fn a_decision_is_held_with_undo_before_it_is_sent_and_focus_moves_to_the_next_card() {
    let _one = ONE_BROWSER.lock().await;
    let Some(world) = World::new("browser: safer deciding", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let Some(browser) = Browser::start("browser: safer deciding", world.dir.path()).await else { return };
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &["finance"]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    // One after the other, so the inbox (oldest first) lists them s1, s2, s3: the Worker runs
    // turns side by side, and their approvals would otherwise open in any order.
    for (session, message) in [
        ("s1", REFUND),
        ("s2", r#"call create_refund {"order_id":"8","amount_cents":200000}"#),
        ("s3", REFUND),
    ] {
        start_as(&served, &carl, session, message).await;
        world.wait_for(session, "its approval", |s| s.status == "awaiting_approval").await;
    }
    browser.sign_in(&served.url, &fina, "fina").await;
    browser
        .js("sessionStorage.setItem('tollgate.holdMs', arguments[0])", vec![json!(HOLD_MS.to_string())])
        .await;
    for session in ["s1", "s2", "s3"] {
        card_shown(&browser, session).await;
    }
    // The default hold is 5 s; this test shortens it.
    let pending = |session: &'static str| {
        let world = &world;
        async move { world.snapshot(session).await.pending_interrupts.len() }
    };

    // Approve s1: its card says so, with an Undo; nothing is sent; focus is on s2's Approve.
    browser.click(&in_card("s1", "button.approve")).await;
    let held = browser
        .js(
            &format!(
                "{CARD} return [card.classList.contains('held'), card.querySelector('.held-line').textContent, \
                 card.querySelector('.actions').hidden, document.activeElement.closest('.card').dataset.session, \
                 document.activeElement.textContent];"
            ),
            vec![json!("s1")],
        )
        .await;
    assert_eq!(held, json!([true, "Approved by you · Undo", true, "s2", "Approve"]));
    browser.screenshot("inbox-held-undo").await;
    browser.click(&in_card("s1", "button.undo")).await;
    tokio::time::sleep(Duration::from_millis(HOLD_MS + 1500)).await;
    assert_eq!(pending("s1").await, 1, "undone in time: nothing was sent");
    assert_eq!(world.payments.count(), 0);
    let back = browser
        .js(
            &format!("{CARD} return [card.classList.contains('held'), card.querySelector('.actions').hidden, document.activeElement.textContent];"),
            vec![json!("s1")],
        )
        .await;
    assert_eq!(back, json!([false, false, "Approve"]), "the card is back, its Approve focused");

    // s2 asks for 2,000.00 EUR, above the policy's 1,000.00: Approve asks to confirm first.
    browser.click(&in_card("s2", "button.approve")).await;
    let asked = browser
        .js(
            &format!("{CARD} return [card.classList.contains('held'), card.querySelector('.confirm').hidden, card.querySelector('.confirm p').textContent, document.activeElement.textContent];"),
            vec![json!("s2")],
        )
        .await;
    assert_eq!(
        asked,
        json!([false, false, "amount_cents is 200000, above 100000: approve anyway?", "Yes, approve"])
    );
    browser.screenshot("inbox-confirm-above").await;
    browser.assert_axe_clean("the inbox with a held card and a confirmation").await;
    browser.click(&in_card("s2", "button.confirm-approve")).await;
    let paid = world.wait_for("s2", "the confirmed refund's turn", |s| s.status == "idle").await;
    assert_eq!(paid.last_turn_error, None, "{}", world.diagnostics());
    assert!(world.payments.requests()[0].body.contains("\"amount_cents\":200000"));

    // Reject is a form: Enter in the reason submits it.
    let reason = "Duplicate of another refund";
    browser.type_into(&in_card("s3", "input.reason"), &format!("{reason}\u{E007}")).await;
    let rejected = browser
        .js(&format!("{CARD} return card.querySelector('.held-line').textContent;"), vec![json!("s3")])
        .await;
    assert_eq!(rejected, json!("Rejected by you · Undo"));
    let done = world.wait_for("s3", "the rejected turn", |s| s.status == "idle").await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());

    // "Approve for this session" is in the secondary menu, not beside Approve.
    let hidden = browser
        .js(
            &format!("{CARD} return card.querySelector('button.approve-session').checkVisibility();"),
            vec![json!("s1")],
        )
        .await;
    assert_eq!(hidden, json!(false), "folded in the menu");
    browser.click(&in_card("s1", "details.more-actions > summary")).await;
    browser.click(&in_card("s1", "button.approve-session")).await;
    let done = world.wait_for("s1", "the session-approved turn", |s| s.status == "idle").await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    let [decision] = done.decisions.as_slice() else { panic!("one decision: {:?}", done.decisions) };
    assert_eq!(decision.principal, "fina");
    assert_eq!(world.payments.count(), 2);
    browser.assert_no_console_errors("deciding").await;
    browser.stop().await;
}
