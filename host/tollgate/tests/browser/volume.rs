//! Volume in the inbox: the list view, filters and search, the `?` keys, bulk decisions of
//! selected rows of one tool, and how many keystrokes 20 refunds take by keyboard.

use std::time::{Duration, Instant};

use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use serde_json::json;

use crate::driver::Browser;
use crate::inbox::{ONE_BROWSER, park_as};
use crate::served::Served;
use crate::world::{Refund, World};

/// Presses and releases `key` (one character, or a WebDriver key code such as `\u{E004}` for
/// Tab) wherever the focus is, as a person at the keyboard would.
async fn key(browser: &Browser, key: &str) {
    let mut chars = key.chars();
    let (Some(value), None) = (chars.next(), chars.next()) else { panic!("one key, not {key:?}") };
    let press =
        KeyActions::new("keyboard".to_owned()).then(KeyAction::Down { value }).then(KeyAction::Up { value });
    browser.client.perform_actions(press).await.unwrap_or_else(|e| panic!("press {key:?}: {e}"));
}

/// The open interrupts of the sessions whose id starts with `prefix`.
async fn open_of(world: &World, prefix: &str) -> usize {
    let open = world.store.open_interrupts(None, 10_000).await.unwrap();
    open.iter().filter(|i| i.session_id.starts_with(prefix)).count()
}

/// Waits until no interrupt of `prefix` is open (the held decisions were sent).
async fn all_decided(world: &World, prefix: &str) -> Duration {
    let start = Instant::now();
    while open_of(world, prefix).await > 0 {
        assert!(start.elapsed() < Duration::from_secs(60), "{prefix}: decisions never arrived");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_list_view_filters_selects_in_bulk_and_decides_by_keyboard() {
    let _one = ONE_BROWSER.lock().await;
    let Some(world) = World::new("browser: inbox volume", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let Some(browser) = Browser::start("browser: inbox volume", world.dir.path()).await else { return };
    for i in 1..=20 {
        park_as(
            &world,
            &format!("t{i:02}"),
            Some("tabbing"),
            json!({"order_id": format!("T{i}"), "amount_cents": 100 * i}),
        )
        .await;
        park_as(
            &world,
            &format!("k{i:02}"),
            Some("keys"),
            json!({"order_id": format!("K{i}"), "amount_cents": 100 * i}),
        )
        .await;
    }
    for i in 1..=3 {
        park_as(
            &world,
            &format!("b{i}"),
            Some("bulk"),
            json!({"order_id": format!("B{i}"), "amount_cents": 700}),
        )
        .await;
    }
    let served = Served::start_api(&world, "api", &["--token", "t0ken"]).await;
    browser.sign_in(&served.url, "t0ken", "tollgate:token").await;
    browser.js("sessionStorage.setItem('tollgate.holdMs', '1000')", vec![]).await;
    let count = "return document.querySelectorAll('#inbox-list .card:not([hidden])').length;";
    browser.until("43 cards", &format!("{} === 43", count.trim_end_matches(';')), vec![]).await;

    // The agent filter, then search; `?` lists the keys.
    browser.js("const s = document.getElementById('inbox-agent'); s.value = 'bulk'; s.dispatchEvent(new Event('change'));", vec![]).await;
    assert_eq!(browser.js(count, vec![]).await, json!(3), "only the bulk agent's approvals");
    browser.type_into("#inbox-search", "B2").await;
    let shown = browser.js("return [...document.querySelectorAll('#inbox-list .card:not([hidden])')].map(c => c.dataset.session);", vec![]).await;
    assert_eq!(shown, json!(["b2"]), "search reads the arguments");
    browser.js("const s = document.getElementById('inbox-search'); s.value = ''; s.dispatchEvent(new Event('input')); document.activeElement.blur();", vec![]).await;
    browser.js("document.body.focus();", vec![]).await;
    key(&browser, "?").await;
    let keys = browser
        .js("const k = document.getElementById('inbox-keys'); return !k.hidden && k.textContent;", vec![])
        .await;
    assert!(
        keys.as_str().is_some_and(|k| k.contains("next / previous approval") && k.contains("approve")),
        "{keys}"
    );
    key(&browser, "\u{E00C}").await; // Esc
    assert_eq!(browser.js("return document.getElementById('inbox-keys').hidden;", vec![]).await, json!(true));

    // The list view: one row each; select two rows (x), reject them in bulk.
    browser.click("#inbox-view").await;
    let rows = browser
        .js("return [document.getElementById('inbox-list').classList.contains('compact'), Math.max(...[...document.querySelectorAll('#inbox-list .card:not([hidden])')].map(c => c.getBoundingClientRect().height))];", vec![])
        .await;
    assert_eq!(rows[0], json!(true));
    assert!(rows[1].as_f64().unwrap() < 80.0, "a row, not a card: {rows}");
    browser.screenshot("inbox-list").await;
    browser.assert_axe_clean("the inbox's list view").await;
    browser.assert_lighthouse_100("the inbox's list view").await;
    key(&browser, "j").await;
    key(&browser, "x").await;
    key(&browser, "j").await;
    key(&browser, "x").await;
    let why = browser.js("return [document.getElementById('bulk-reject').disabled, document.getElementById('bulk-why').textContent];", vec![]).await;
    assert_eq!(why, json!([false, "2 selected of create_refund."]));
    browser.click("#bulk-reject").await;
    all_decided(&world, "b1").await;
    all_decided(&world, "b2").await;
    assert_eq!(open_of(&world, "b3").await, 1, "the unselected row still waits");
    let audit = world
        .store
        .audit()
        .audit_entries(&tollgate_store::AuditQuery { limit: 1000, ..Default::default() })
        .await
        .unwrap();
    // The bulk decisions are sent side by side, so their audit order is either.
    let mut bulk: Vec<(&str, &str)> =
        audit.iter().map(|a| (a.session_id.as_str(), a.decision.as_str())).collect();
    bulk.sort();
    assert_eq!(bulk, [("b1", "rejected"), ("b2", "rejected")], "one audited decision each");
    browser.click("#inbox-view").await;

    // 20 refunds by Tab alone, starting from the top of the page each time (as when a decided
    // card dropped the focus to the page): count the keystrokes.
    let filter = |agent: &str| {
        format!(
            "const s = document.getElementById('inbox-agent'); s.value = '{agent}'; s.dispatchEvent(new Event('change'));"
        )
    };
    browser.js(&filter("tabbing"), vec![]).await;
    let start = Instant::now();
    let mut tab_keys = 0;
    for _ in 0..20 {
        browser.js("document.getElementById('nav-inbox').focus();", vec![]).await;
        loop {
            key(&browser, "\u{E004}").await;
            tab_keys += 1;
            let on = browser.js("const a = document.activeElement; return a.matches('button.approve') && !a.closest('.card').classList.contains('held');", vec![]).await;
            if on == json!(true) {
                break;
            }
            assert!(tab_keys < 2000, "Tab never reached an Approve");
        }
        key(&browser, "\u{E007}").await;
        tab_keys += 1;
    }
    let tab_time = start.elapsed();
    all_decided(&world, "t").await;

    // The same with the keys: j to the first, then a for each (focus moves on by itself).
    browser.js(&filter("keys"), vec![]).await;
    browser.js("document.activeElement.blur();", vec![]).await;
    let start = Instant::now();
    let mut shortcut_keys = 0;
    key(&browser, "j").await;
    shortcut_keys += 1;
    for _ in 0..20 {
        key(&browser, "a").await;
        shortcut_keys += 1;
    }
    let key_time = start.elapsed();
    let sent = all_decided(&world, "k").await;
    eprintln!(
        "FIGURE deciding 20 pending refunds by keyboard: Tab and Enter from the top of the page each time {tab_keys} keystrokes in {:.1} s; \
         j then a: {shortcut_keys} keystrokes in {:.1} s (the last decision sent {:.1} s later, after its undo window)",
        tab_time.as_secs_f64(),
        key_time.as_secs_f64(),
        sent.as_secs_f64()
    );
    assert_eq!(shortcut_keys, 21);
    let approved = world
        .store
        .audit()
        .audit_entries(&tollgate_store::AuditQuery { limit: 1000, ..Default::default() })
        .await
        .unwrap();
    let by_keys = approved
        .iter()
        .filter(|a| a.session_id.starts_with('k') && a.decision.as_str() == "approved")
        .count();
    assert_eq!(by_keys, 20, "each an audited approval");
    browser.assert_no_console_errors("volume").await;
    browser.stop().await;
}
