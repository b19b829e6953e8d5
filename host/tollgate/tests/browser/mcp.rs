//! A refund an MCP client asked for (`/mcp/{agent}`), on the inbox card: the approver reads that a
//! client called it, not the model, decides it in the page, and the client reads the outcome.

use rmcp::model::{CallToolRequestParams, CallToolResponse};
use serde_json::{Value, json};

use crate::driver::Browser;
use crate::inbox::{CARD, ONE_BROWSER, card_shown, in_card};
use crate::served::{Served, add_principal};
use crate::world::{Refund, World};

#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_clients_refund_says_who_called_it_and_is_approved_in_the_page() {
    let _one = ONE_BROWSER.lock().await;
    let Some(world) = World::new("browser: an MCP client's refund", Refund::SingleAttemptWithApproval).await
    else {
        return;
    };
    let Some(browser) = Browser::start("browser: an MCP client's refund", world.dir.path()).await else {
        return;
    };
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &[]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let agent = served.agent_name(&carl).await;
    let client = tollgate_testing::mcp::client(&served.url, &agent, &carl, false).await;
    let refund = CallToolRequestParams::new("create_refund")
        .with_arguments(json!({"order_id": "7", "amount_cents": 500}).as_object().unwrap().clone());
    let CallToolResponse::Complete(waiting) = client.call_tool_once(refund.clone()).await.unwrap() else {
        panic!("a plain client gets a result")
    };
    let session = waiting.meta.as_ref().and_then(|m| m.get("io.tollgate/session")).and_then(Value::as_str);
    let session = session.expect("the session is named").to_owned();

    browser.sign_in(&served.url, &fina, "fina").await;
    browser.js("sessionStorage.setItem('tollgate.holdMs', '300')", vec![]).await;
    card_shown(&browser, &session).await;
    let badges = browser
        .js(
            &format!("{CARD} return [...card.querySelectorAll('.badge')].map(b => b.textContent);"),
            vec![json!(session)],
        )
        .await;
    assert!(badges.as_array().unwrap().contains(&json!("called by carl (MCP)")), "{badges}");
    let placeholder = browser
        .js(&format!("{CARD} return card.querySelector('input.reason').placeholder;"), vec![json!(session)])
        .await;
    assert_eq!(placeholder, json!("What the client is told"));
    browser.screenshot("inbox-mcp-call").await;
    browser.assert_axe_clean("the inbox with an MCP client's refund").await;
    browser.click(&in_card(&session, "button.approve")).await;
    world.wait_for(&session, "the approved refund", |s| s.status == "idle").await;
    let CallToolResponse::Complete(outcome) = client.call_tool_once(refund).await.unwrap() else {
        panic!("the outcome")
    };
    assert_ne!(outcome.is_error, Some(true), "{outcome:?}");
    assert_eq!(world.payments.count(), 1);
    browser.stop().await;
    served.stop().await;
}
