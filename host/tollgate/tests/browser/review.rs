//! The factory's review on the inbox card: a refund over the order's €54.00 total shows "High
//! risk" in words, the example factory's note above the arguments, and "0 of 2 approvals"; after
//! the first approver's approval the card stays, live, at "1 of 2 approvals (approved by alice)"
//! with her buttons disabled and why, until a second approver decides it.

use serde_json::json;

use crate::driver::Browser;
use crate::inbox::{CARD, ONE_BROWSER, card_shown, in_card, start_as};
use crate::served::Served;
use crate::served::add_principal;
use crate::world::{Refund, World};

#[tokio::test(flavor = "multi_thread")]
async fn a_high_risk_refund_shows_its_review_above_the_arguments() {
    let _one = ONE_BROWSER.lock().await;
    let Some(world) = World::new("browser: a reviewed refund", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let Some(browser) = Browser::start("browser: a reviewed refund", world.dir.path()).await else { return };
    world.refund_policy_with("high_risk_approvers = 2");
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let alice = add_principal(&world, &file, "alice", &["approver"], &[]).await;
    let bob = add_principal(&world, &file, "bob", &["approver"], &[]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let over =
        r#"call lookup_order {"order_id":"9"} && call create_refund {"order_id":"9","amount_cents":125000}"#;
    let within =
        r#"call lookup_order {"order_id":"9"} && call create_refund {"order_id":"9","amount_cents":500}"#;
    start_as(&served, &carl, "r0", within).await;
    world.wait_for("r0", "its approval", |s| s.status == "awaiting_approval").await;
    start_as(&served, &carl, "r1", over).await;
    world.wait_for("r1", "its approval", |s| s.status == "awaiting_approval").await;
    browser.sign_in(&served.url, &alice, "alice").await;
    browser.js("sessionStorage.setItem('tollgate.holdMs', '300')", vec![]).await;
    card_shown(&browser, "r1").await;
    let shown = browser
        .js(
            &format!(
                "{CARD} const review = card.querySelector('.review'); const args = card.querySelector('.args'); \
                 return [review.querySelector('.risk').textContent, review.querySelector('.risk-line').textContent, \
                 [...review.querySelectorAll('.notes li')].map(li => li.textContent), \
                 !!(review.compareDocumentPosition(args) & Node.DOCUMENT_POSITION_FOLLOWING)];"
            ),
            vec![json!("r1")],
        )
        .await;
    assert_eq!(
        shown,
        json!([
            "High risk",
            "High risk · 0 of 2 approvals",
            ["refund exceeds the order total of €54.00"],
            true
        ])
    );
    browser.screenshot("inbox-review-high-risk").await;
    browser.assert_axe_clean("the inbox with a reviewed high-risk refund").await;

    // The risk filter and sort: the low-risk refund is older, the high-risk one sorts first.
    card_shown(&browser, "r0").await;
    let order = "return [...document.querySelectorAll('#inbox-list .card:not([hidden])')].map(c => c.dataset.session);";
    let set = |id: &str, value: &str| {
        format!(
            "const s = document.getElementById('{id}'); s.value = '{value}'; s.dispatchEvent(new Event('change'));"
        )
    };
    assert_eq!(browser.js(order, vec![]).await, json!(["r0", "r1"]), "oldest first");
    browser.js(&set("inbox-sort", "risk"), vec![]).await;
    assert_eq!(browser.js(order, vec![]).await, json!(["r1", "r0"]), "highest risk first");
    browser.js(&set("inbox-risk", "low"), vec![]).await;
    assert_eq!(browser.js(order, vec![]).await, json!(["r0"]), "only the low-risk refund");
    browser.js(&set("inbox-risk", "high"), vec![]).await;
    assert_eq!(browser.js(order, vec![]).await, json!(["r1"]), "only the high-risk refund");
    browser.js(&set("inbox-risk", ""), vec![]).await;
    browser.js(&set("inbox-sort", "oldest"), vec![]).await;

    // Alice approves: the approval counts, the call still waits, and her card says so live.
    browser.click(&in_card("r1", "button.approve")).await;
    browser.click(&in_card("r1", "button.confirm-approve")).await; // over the policy's confirm_above
    let after = browser
        .until(
            "the card at 1 of 2 approvals",
            &format!(
                "{CARD} const line = card && card.querySelector('.review .risk-line');                  return line && line.textContent.includes('1 of 2') && !card.classList.contains('decided') &&                  [line.textContent, card.querySelector('button.approve').disabled, card.querySelector('.why').textContent];"
            ),
            vec![json!("r1")],
        )
        .await;
    assert_eq!(after[0], json!("High risk · 1 of 2 approvals (approved by alice)"), "{after}");
    assert_eq!(after[1], json!(true), "alice cannot approve twice: {after}");
    assert!(after[2].as_str().unwrap().contains("alice approved it already"), "{after}");
    browser.screenshot("inbox-review-one-of-two").await;
    assert_eq!(world.store.session("r1").await.unwrap().unwrap().status, "awaiting_approval");

    // Bob's approval decides it: the card leaves the inbox.
    let by_bob = reqwest::Client::new()
        .post(format!("{}/v1/sessions/r1/interrupts/{}", served.url, open_id(&world, "r1").await))
        .bearer_auth(&bob)
        .json(&json!({"approved": true}))
        .send()
        .await
        .unwrap();
    assert!(by_bob.status().is_success(), "{}", by_bob.text().await.unwrap());
    browser.until("the card to leave", &format!("{CARD} return !card;"), vec![json!("r1")]).await;
    browser.assert_no_console_errors("two approvals").await;
}

/// The id of the interrupt session `session` waits on.
async fn open_id(world: &World, session: &str) -> String {
    let snapshot = world.wait_for(session, "its approval", |s| !s.pending_interrupts.is_empty()).await;
    snapshot.pending_interrupts[0].interrupt_id.clone()
}
