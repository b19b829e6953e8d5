//! The factory's review on the inbox card: a refund over the order's €54.00 total shows "High
//! risk" in words, the example factory's note above the arguments, and "0 of 2 approvals".

use serde_json::json;

use crate::driver::Browser;
use crate::inbox::{CARD, ONE_BROWSER, add_principal, card_shown, start_as};
use crate::served::Served;
use crate::world::{Refund, World};

#[tokio::test(flavor = "multi_thread")]
async fn a_high_risk_refund_shows_its_review_above_the_arguments() {
    let _one = ONE_BROWSER.lock().await;
    let Some(world) = World::new("browser: a reviewed refund", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let Some(browser) = Browser::start("browser: a reviewed refund", world.dir.path()).await else { return };
    let config = world.agent.join("tollgate.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let two = text.replace("requires_approval = true,", "requires_approval = true, high_risk_approvers = 2,");
    assert_ne!(text, two);
    std::fs::write(&config, two).unwrap();
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let alice = add_principal(&world, &file, "alice", &["approver"], &[]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let over =
        r#"call lookup_order {"order_id":"9"} && call create_refund {"order_id":"9","amount_cents":125000}"#;
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
}
