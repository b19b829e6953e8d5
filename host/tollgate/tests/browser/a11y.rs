//! Accessibility to the letter, on the inbox and a session page: the focus ring and every
//! control's border at least 3:1 against what is around them, a visible caption on the arguments
//! (no `aria-label` on a `<pre>`), `role="alert"` on a wrapper rather than a list, no ring on
//! `<main>` after sign-in, axe-core finding nothing and Lighthouse's accessibility audit scoring
//! 100 on the sign-in page, the inbox, a session page and the sessions list.

use serde_json::json;

use crate::driver::Browser;
use crate::inbox::{ONE_BROWSER, in_card, park_as};
use crate::served::Served;
use crate::world::{Refund, World};

/// JavaScript: the contrast ratio of two CSS colours, and the background an element sits on.
const CONTRAST: &str = "
const rgb = (c) => c.match(/[\\d.]+/g).map(Number);
const lum = (c) => { const [r, g, b] = rgb(c).slice(0, 3).map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
const behind = (node) => { for (let n = node.parentElement; n; n = n.parentElement) { const bg = getComputedStyle(n).backgroundColor; if (rgb(bg)[3] !== 0) return bg; } return 'rgb(255, 255, 255)'; };
";

#[tokio::test(flavor = "multi_thread")]
async fn focus_rings_and_control_borders_have_3_to_1_axe_finds_nothing_and_lighthouse_scores_100() {
    let _one = ONE_BROWSER.lock().await;
    let Some(world) = World::new("browser: accessibility", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let Some(browser) = Browser::start("browser: accessibility", world.dir.path()).await else { return };
    park_as(&world, "a1", Some("support"), json!({"order_id": "7", "amount_cents": 500})).await;
    let served = Served::start_api(&world, "api", &["--token", "t0ken"]).await;
    browser.client.goto(&served.url).await.unwrap();
    browser.until("the sign-in form", "return !document.getElementById('sign-in').hidden;", vec![]).await;
    browser.assert_axe_clean("the sign-in page").await;
    browser.assert_lighthouse_100("the sign-in page").await;
    browser.sign_in(&served.url, "t0ken", "tollgate:token").await;
    browser.until("the card", "return document.querySelector('.card[data-session=\"a1\"]');", vec![]).await;

    // After sign-in the page focuses <main> for screen readers, without drawing a ring on it,
    // even for a keyboard user (whose programmatic focus is `:focus-visible`).
    browser.client.active_element().await.unwrap().send_keys("\u{E004}").await.unwrap();
    let main = browser
        .js("const m = document.getElementById('main'); m.focus(); return [document.activeElement === m, getComputedStyle(m).outlineStyle];", vec![])
        .await;
    assert_eq!(main, json!([true, "none"]), "no outline on <main>");

    // Every enabled control's border against what is around it.
    let weak = browser
        .js(
            &format!("{CONTRAST} return [...document.querySelectorAll('button:not([disabled]), input:not([disabled]):not([type=checkbox]), select, textarea')].filter((c) => c.checkVisibility()).map((c) => {{ const s = getComputedStyle(c); const edge = rgb(s.backgroundColor)[3] === 0 ? s.borderTopColor : (ratio(s.borderTopColor, behind(c)) >= 3 ? s.borderTopColor : s.backgroundColor); return [c.outerHTML.slice(0, 60), ratio(edge, behind(c)).toFixed(2)]; }}).filter(([, r]) => r < 3);"),
            vec![],
        )
        .await;
    assert_eq!(weak, json!([]), "control borders under 3:1");

    // The focus ring of a control on a card, by keyboard (Tab gives :focus-visible).
    browser.js("document.getElementById('inbox-search').focus();", vec![]).await;
    browser.client.active_element().await.unwrap().send_keys("\u{E004}").await.unwrap();
    let ring = browser
        .js(&format!("{CONTRAST} const a = document.activeElement; const s = getComputedStyle(a); return [s.outlineStyle, Number(ratio(s.outlineColor, behind(a)).toFixed(2))];"), vec![])
        .await;
    assert_eq!(ring[0], json!("solid"), "{ring}");
    assert!(ring[1].as_f64().unwrap() >= 3.0, "focus ring contrast {ring}");

    // The arguments have a visible caption, not an aria-label; the editor's problems are
    // announced from a wrapper, not from the list.
    let caption = browser
        .js("const pre = document.querySelector('.card pre'); const by = document.getElementById(pre.getAttribute('aria-labelledby')); return [pre.hasAttribute('aria-label'), by.tagName, by.textContent];", vec![])
        .await;
    assert_eq!(caption, json!([false, "FIGCAPTION", "Arguments"]));
    browser.click(&in_card("a1", "button.edit")).await;
    let alert = browser
        .js("const ul = document.querySelector('.card .errors'); return [ul.hasAttribute('role'), ul.parentElement.getAttribute('role')];", vec![])
        .await;
    assert_eq!(alert, json!([false, "alert"]));
    browser.assert_axe_clean("the inbox with the editor open").await;
    browser.assert_lighthouse_100("the inbox with the editor open").await;

    browser.client.goto(&format!("{}/#/session/a1", served.url)).await.unwrap();
    browser.until("the session page", "return document.querySelector('#audit td.empty');", vec![]).await;
    browser.assert_axe_clean("a session page").await;
    browser.assert_lighthouse_100("a session page").await;
    browser.client.goto(&format!("{}/#/sessions", served.url)).await.unwrap();
    browser.until("the sessions list", "return document.querySelector('#agent-filter');", vec![]).await;
    browser.assert_axe_clean("the sessions list").await;
    browser.assert_lighthouse_100("the sessions list").await;
    browser.stop().await;
}
