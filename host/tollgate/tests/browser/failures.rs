//! Failures are loud: a refund whose outcome is unknown shows as a banner at the top of its
//! session page and in the inbox's "Needs attention" section until an approver marks it checked
//! with what they found (audited); a client may not; an empty audit trail says so. A tool
//! component a Worker could not load is named in the same section.

use serde_json::json;

use crate::driver::Browser;
use crate::inbox::{ONE_BROWSER, REFUND, start_as};
use crate::served::Served;
use crate::served::add_principal;
use crate::world::{Refund, World};

#[tokio::test(flavor = "multi_thread")]
async fn an_outcome_unknown_refund_is_loud_on_its_session_page_and_in_the_inbox_until_checked() {
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
    browser.assert_lighthouse_100("a session page with a banner").await;

    // The inbox lists it under "Needs attention".
    browser.client.goto(&format!("{}/#/inbox", served.url)).await.unwrap();
    let listed = browser
        .until(
            "the needs-attention section",
            "const s = document.getElementById('attention'); return s && !s.hidden && [...s.querySelectorAll('.attention-item')].map((i) => [i.dataset.session, i.dataset.call, i.querySelector('.status').textContent]);",
            vec![],
        )
        .await;
    assert_eq!(
        listed,
        json!([[
            "u1",
            id,
            "outcome unknown: it may have taken effect; check the system it acts on before trying again"
        ]])
    );
    browser.screenshot("inbox-needs-attention").await;
    browser.assert_axe_clean("the inbox with a call that needs attention").await;
    browser.assert_lighthouse_100("the inbox with a call that needs attention").await;

    // A client may not mark it checked (the API says so); the approver does, with a note.
    let by_client = reqwest::Client::new()
        .post(format!("{}/v1/sessions/u1/calls/{id}/check", served.url))
        .bearer_auth(&carl)
        .json(&json!({"note": "looks fine to me"}))
        .send()
        .await
        .unwrap();
    let status = by_client.status();
    let body = by_client.text().await.unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("role_required"), "{body}");
    browser
        .type_into(".attention-item .check-note", "no refund in the payments log; sent again by hand")
        .await;
    browser.click(".attention-item button.check").await;
    browser
        .until("the section to empty", "return document.getElementById('attention').hidden;", vec![])
        .await;
    let audit = world
        .store
        .audit()
        .audit_entries(&tollgate_store::AuditQuery { session_id: Some("u1".into()), ..Default::default() })
        .await
        .unwrap();
    let checked: Vec<(&str, &str, Option<&str>)> = audit
        .iter()
        .filter(|a| a.decision == tollgate_store::AuditDecision::Checked)
        .map(|a| (a.interrupt_id.as_str(), a.principal.as_str(), a.reason.as_deref()))
        .collect();
    assert_eq!(checked, [(id.as_str(), "fina", Some("no refund in the payments log; sent again by hand"))]);
    // Checking again is a replay of the first mark; an unknown call is named.
    let check = |call: &str| {
        reqwest::Client::new()
            .post(format!("{}/v1/sessions/u1/calls/{call}/check", served.url))
            .bearer_auth(&fina)
            .json(&json!({"note": "again"}))
            .send()
    };
    let again: serde_json::Value = check(&id).await.unwrap().json().await.unwrap();
    assert_eq!(
        (&again["replayed"], &again["check"]["checked_by"], &again["check"]["note"]),
        (&json!(true), &json!("fina"), &json!("no refund in the payments log; sent again by hand"))
    );
    let unknown = check("toolu_nope").await.unwrap();
    assert_eq!(unknown.status(), 404);
    assert!(unknown.text().await.unwrap().contains("tool_call_not_found"));

    // The session page: no alert now, the call checked by fina with her note.
    browser.client.goto(&format!("{}/#/session/u1", served.url)).await.unwrap();
    let quiet = browser
        .until(
            "the checked call",
            "const c = document.getElementById('checked-calls'); return !c.hidden && [document.getElementById('call-failures').hidden, c.textContent];",
            vec![],
        )
        .await;
    assert_eq!(quiet[0], json!(true), "{quiet}");
    let line = quiet[1].as_str().unwrap();
    assert!(
        line.starts_with(&format!("create_refund ({id}) checked by fina "))
            && line.ends_with(": no refund in the payments log; sent again by hand"),
        "{line}"
    );
    world.payments.release();
    browser.assert_no_console_errors("checking a call").await;
    browser.stop().await;
}

/// A tool component a Worker could not load is named in the inbox's "Needs attention" section by
/// a `tollgate api` with no Worker of its own (from the Worker's report in the store): which
/// component of which agent, which Worker, and why, shown as text; and under its agent on the
/// Agents page.
#[tokio::test(flavor = "multi_thread")]
async fn an_unavailable_tool_component_is_named_in_the_inbox_of_a_standalone_api() {
    let _one = ONE_BROWSER.lock().await;
    let test = "browser: an unavailable tool component";
    let Some(world) = World::new(test, Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let Some(browser) = Browser::start(test, world.dir.path()).await else { return };
    let reason = "tools/truncated.wasm cannot be loaded: <img src=x onerror=alert(1)> is not WebAssembly";
    let broken = tollgate_store::UnavailableComponent {
        component: "truncated".into(),
        reason: reason.into(),
        serving_last_good: false,
    };
    world
        .store
        .agents()
        .report_unavailable_tools("agent", "worker-7", "sha256:abc", &[broken])
        .await
        .unwrap();
    // Its Worker registered the agent (the Agents page lists the agents the store knows).
    world.store.agents().register_agent("agent", "sha256:abc", false).await.unwrap();
    let served = Served::start_api(&world, "api", &["--token", "t0ken"]).await;
    browser.sign_in(&served.url, "t0ken", "tollgate:token").await;
    browser.client.goto(&format!("{}/#/inbox", served.url)).await.unwrap();
    let listed = browser
        .until(
            "the component under needs-attention",
            "const s = document.getElementById('attention'); return s && !s.hidden && [...s.querySelectorAll('.tool-unavailable')].map((i) => [i.dataset.agent, i.dataset.component, i.querySelector('strong').textContent, i.textContent, i.querySelectorAll('img').length]);",
            vec![],
        )
        .await;
    let [agent, component, strong, text, images] = &listed[0].as_array().unwrap()[..] else {
        panic!("one component: {listed}")
    };
    assert_eq!(
        (agent, component, strong, images),
        (&json!("agent"), &json!("truncated"), &json!("truncated"), &json!(0))
    );
    let text = text.as_str().unwrap();
    assert!(
        text.starts_with("Tool component truncated of agent agent \u{b7} Worker worker-7 \u{b7} since "),
        "{text}"
    );
    assert!(
        text.ends_with(&format!("did not load; its tools are unavailable to the model: {reason}")),
        "{text}"
    );
    browser.screenshot("inbox-tool-unavailable").await;
    browser.assert_no_console_errors("the inbox with an unavailable tool component").await;
    browser.assert_axe_clean("the inbox with an unavailable tool component").await;

    // The Agents page says it too, under the agent.
    browser.client.goto(&format!("{}/#/agents", served.url)).await.unwrap();
    let row = browser
        .until(
            "the component on the agents page",
            "const r = document.querySelector('section[data-agent=\"agent\"] table.unavailable tbody tr[data-component=\"truncated\"]'); return r && [...r.querySelectorAll('td')].map((d) => d.textContent);",
            vec![],
        )
        .await;
    let cells: Vec<&str> = row.as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!((cells[0], cells[1]), ("truncated", "worker-7"), "{row}");
    assert!(cells[3].ends_with(reason), "{row}");
    browser.screenshot("agents-tool-unavailable").await;
    browser.assert_no_console_errors("the agents page with an unavailable tool component").await;
    browser.assert_axe_clean("the agents page with an unavailable tool component").await;
    served.stop().await;
}
