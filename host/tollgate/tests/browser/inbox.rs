//! The approvals inbox, the session page and the sessions list, through Chromium.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tollgate_engine::session::{RunState, SessionStatus};
use tollgate_store::NewSession;

use crate::driver::Browser;
use crate::served::{Served, add_principal, stdout_of};
use crate::world::{Refund, World, api, api_events};

pub(crate) const REFUND: &str = r#"call create_refund {"order_id":"7","amount_cents":500}"#;

/// One browser test at a time: the timings they print are not shared with another Chromium.
pub(crate) static ONE_BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Gives the example agent's refund policy `approvers = ["finance"]` and a ten-minute deadline
/// that escalates to `ops`.
fn restrict_refunds_to_finance(world: &World) {
    world.refund_policy_with(
        r#"approvers = ["finance"], approval_timeout_secs = 600, on_timeout = "escalate", escalate_to = ["ops"]"#,
    );
}

/// `tollgate session start ID --message TEXT` as the holder of `token` (the CLI client).
pub(crate) async fn start_as(served: &Served, token: &str, session: &str, message: &str) {
    let output = served
        .client_command(&["session", "start", session, "--message", message])
        .env("TOLLGATE_TOKEN", token)
        .output()
        .await
        .expect("run tollgate session start");
    stdout_of(&output, "tollgate session start");
}

/// JavaScript: the inbox card of session `arguments[0]`, or null.
pub(crate) const CARD: &str =
    "const card = [...document.querySelectorAll('.card')].find(c => c.dataset.session === arguments[0]);";

/// Waits for the inbox card of `session` and returns when the page showed it (its
/// `data-shown-at`, ms since the epoch; `None` for a card of the first snapshot).
pub(crate) async fn card_shown(browser: &Browser, session: &str) -> Option<i64> {
    let shown = browser
        .until(
            &format!("the inbox card of session {session}"),
            &format!("{CARD} return card ? (card.dataset.shownAt || 'snapshot') : null;"),
            vec![json!(session)],
        )
        .await;
    shown.as_str().and_then(|s| s.parse().ok())
}

/// The CSS selector of something inside the card of `session` (an id made of letters and digits).
pub(crate) fn in_card(session: &str, css: &str) -> String {
    format!(".card[data-session=\"{session}\"] {css}")
}

#[tokio::test(flavor = "multi_thread")]
async fn approvers_decide_refunds_in_the_page_edited_rejected_or_refused_and_the_inbox_updates_live() {
    let _one = ONE_BROWSER.lock().await;
    let Some(world) = World::new("browser: the refund inbox", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let Some(browser) = Browser::start("browser: the refund inbox", world.dir.path()).await else { return };
    restrict_refunds_to_finance(&world);
    let file = world.dir.path().join("auth.toml");
    let carl = add_principal(&world, &file, "carl", &["client"], &[]).await;
    let fina = add_principal(&world, &file, "fina", &["approver"], &["finance"]).await;
    let olga = add_principal(&world, &file, "olga", &["approver"], &["ops"]).await;
    let served =
        Served::start_with(&world, "serve", "127.0.0.1:0", &["--auth", file.to_str().unwrap()]).await;
    let url = served.url.clone();

    // The page is served with its security headers, and signs in with a token.
    let page = reqwest::get(format!("{url}/")).await.expect("GET /");
    let csp = page.headers()["content-security-policy"].to_str().unwrap().to_owned();
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.headers()["x-content-type-options"], "nosniff");
    let me = api(reqwest::Client::new().get(format!("{url}/v1/me")).bearer_auth(&olga)).await;
    assert_eq!(
        me.body,
        json!({"name": "olga", "roles": ["approver"], "groups": ["ops"], "sole": false, "separation_of_duties": true})
    );
    let unknown = api(reqwest::Client::new().get(format!("{url}/v1/me?who=me")).bearer_auth(&olga)).await;
    assert_eq!((unknown.status, &unknown.body["error"]["field"]), (400, &json!("who")), "{}", unknown.text);
    browser.sign_in(&url, &fina, "fina").await;
    let who = browser.js("return document.getElementById('who-text').textContent", vec![]).await;
    assert_eq!(who, json!("Signed in as fina (roles: approver; groups: finance)"));
    // Decisions are held 0.5 s here (5 s by default; the undo has its own test).
    browser.js("sessionStorage.setItem('tollgate.holdMs', '500')", vec![]).await;
    let stored = browser.js("return sessionStorage.getItem('tollgate.token')", vec![]).await;
    assert_eq!(stored, json!(fina), "the token is kept in sessionStorage");
    let address = browser.client.current_url().await.unwrap();
    assert!(!address.as_str().contains(&fina), "never in the URL: {address}");
    browser
        .until(
            "the empty inbox",
            "return document.getElementById('inbox-summary').textContent.includes('Nothing waits')",
            vec![],
        )
        .await;

    // A refund started through the CLI client appears on the open page, without a reload.
    start_as(&served, &carl, "r1", REFUND).await;
    let shown = card_shown(&browser, "r1").await.expect("a card added live, not in a snapshot");
    let waiting = world.snapshot("r1").await;
    let id = waiting.pending_interrupts[0].interrupt_id.clone();
    let opened = world.store.interrupt("r1", &id).await.unwrap().expect("the interrupt").created_at;
    eprintln!(
        "FIGURE a new interrupt showed on the open page {} ms after it was created (tollgate serve, SQLite)",
        shown - opened
    );
    // The decision first: the policy's sentence heads the card; the call folds below it.
    let head = browser
        .js(
            &format!(
                "{CARD} const h = card.querySelector('h3'); const more = card.querySelector('details.more'); \
                 return [h.textContent, card.getAttribute('aria-labelledby') === h.id, more.open, \
                 card.querySelector('header').compareDocumentPosition(more) === Node.DOCUMENT_POSITION_FOLLOWING, \
                 more.querySelector('pre').checkVisibility()];"
            ),
            vec![json!("r1")],
        )
        .await;
    assert_eq!(
        head,
        json!(["Refund €5.00 on order 7", true, false, true, false]),
        "heading, folded arguments"
    );
    browser.screenshot("inbox-card-summary").await;
    browser.assert_axe_clean("the inbox with a card").await;
    browser.click(&in_card("r1", "details.more > summary")).await;
    let text = browser.js(&format!("{CARD} return card.innerText;"), vec![json!("r1")]).await;
    let text = text.as_str().unwrap();
    for expected in [
        "create_refund",
        "non_idempotent_write",
        "\"amount_cents\": 500",
        "approvers in finance",
        "carl",
        "then escalates to ops",
    ] {
        assert!(text.contains(expected), "the card lacks {expected:?}:\n{text}");
    }
    // The deadline counts down.
    let countdown = format!("{CARD} return card.querySelector('[data-deadline]').textContent;");
    let before = browser.js(&countdown, vec![json!("r1")]).await;
    let shown = before.as_str().unwrap();
    assert!((shown.starts_with("9m 5") || shown == "10m 0s left") && shown.ends_with("s left"), "{before}");
    browser
        .until(
            "the countdown to tick",
            &format!("{CARD} return card.querySelector('[data-deadline]').textContent !== arguments[1];"),
            vec![json!("r1"), before],
        )
        .await;
    assert_labelled(&browser).await;
    browser.screenshot("inbox").await;

    // Edit the amount: the form comes from the tool's schema; a value the schema refuses cannot
    // be sent; the diff names the change.
    browser.click(&in_card("r1", "button.edit")).await;
    browser.type_into(&in_card("r1", "input[name=amount_cents]"), "0").await;
    let refused = browser
        .until(
            "the schema's refusal",
            &format!("{CARD} return card.querySelector('.errors').textContent;"),
            vec![json!("r1")],
        )
        .await;
    assert!(refused.as_str().unwrap().contains("/amount_cents: must be at least 1"), "{refused}");
    let submit = format!("{CARD} return card.querySelector('.approve-edited').disabled;");
    assert_eq!(browser.js(&submit, vec![json!("r1")]).await, json!(true));
    browser.type_into(&in_card("r1", "input[name=amount_cents]"), "250").await;
    let diff = browser
        .until("the diff", &format!("{CARD} return card.querySelector('.errors').textContent === '' && card.querySelector('.diff').textContent;"), vec![json!("r1")])
        .await;
    assert_eq!(diff, json!("/amount_cents: 500 → 250"));
    assert_eq!(browser.js(&submit, vec![json!("r1")]).await, json!(false));
    browser.js(&format!("{CARD} card.querySelector('.editor').scrollIntoView();"), vec![json!("r1")]).await;
    browser.screenshot("edit-form").await;
    browser.click(&in_card("r1", "button.approve-edited")).await;
    browser
        .until("the decided card to leave the inbox", &format!("{CARD} return !card;"), vec![json!("r1")])
        .await;
    let done = world.wait_for("r1", "the refund's turn", |s| s.status == "idle").await;
    assert_eq!(done.last_turn_error, None, "{}", world.diagnostics());
    let paid = world.payments.requests();
    assert_eq!(paid.len(), 1, "{paid:?}");
    assert!(
        paid[0].body.contains("\"amount_cents\":250") && !paid[0].body.contains("500"),
        "{}",
        paid[0].body
    );
    let [decision] = done.decisions.as_slice() else { panic!("one decision: {:?}", done.decisions) };
    assert_eq!(
        (decision.principal.as_str(), decision.edited_input.clone()),
        ("fina", Some(json!({"order_id": "7", "amount_cents": 250})))
    );

    // Reject with a reason: the model reads it.
    // Its order id is markup: the summary shows it as text.
    start_as(&served, &carl, "r2", r#"call create_refund {"order_id":"<b>7</b>","amount_cents":500}"#).await;
    card_shown(&browser, "r2").await;
    let heading = browser
        .js(
            &format!("{CARD} const h = card.querySelector('h3'); return [h.textContent, h.children.length];"),
            vec![json!("r2")],
        )
        .await;
    assert_eq!(heading, json!(["Refund €5.00 on order <b>7</b>", 0]), "the summary is text, not HTML");
    let id2 = world.snapshot("r2").await.pending_interrupts[0].interrupt_id.clone();
    let reason = "Refunds over four dollars need a manager";
    // By keyboard: type the reason, Tab to Reject, Enter.
    browser.type_into(&in_card("r2", "input.reason"), &format!("{reason}\u{E004}")).await;
    let focused = browser.js("return document.activeElement.textContent;", vec![]).await;
    assert_eq!(focused, json!("Reject"), "Tab moves from the reason to its button");
    browser.client.active_element().await.unwrap().send_keys("\u{E007}").await.unwrap();
    let rejected = world.wait_for("r2", "the rejected turn", |s| s.status == "idle").await;
    assert_eq!(rejected.last_turn_error, None, "{}", world.diagnostics());
    let (seen, _) =
        world.tool_result_seen(&id2).unwrap_or_else(|| panic!("no tool result\n{}", world.diagnostics()));
    assert!(seen.contains(reason), "the model read: {seen}");
    assert_eq!(world.payments.count(), 1, "the rejected refund did not run");

    // Two refunds in one reply wait as one batch, decided in one sitting.
    let two = [
        r#"call create_refund {"order_id":"8","amount_cents":300}"#,
        r#"call create_refund {"order_id":"9","amount_cents":400}"#,
    ];
    start_as(&served, &carl, "b1", &two.join(" && ")).await;
    let grouped = browser
        .until(
            "both refunds in one batch",
            "const batches = [...document.querySelectorAll('.batch')].filter(b => [...b.querySelectorAll('.card')].every(c => c.dataset.session === 'b1')); return batches.length === 1 && batches[0].querySelectorAll('.card').length === 2 && batches[0].querySelector('h3').textContent;",
            vec![],
        )
        .await;
    assert!(grouped.as_str().is_some_and(|h| h.ends_with(": 2 calls from one reply")), "{grouped}");
    browser.screenshot("inbox-batch").await;
    for decided in 1..=2 {
        browser.click(".card[data-session=\"b1\"]:not(.held):not(.decided) button.approve").await;
        browser
            .until(
                "the decision to land",
                "return 2 - [...document.querySelectorAll('.card')].filter(c => c.dataset.session === 'b1' && !c.classList.contains('decided')).length >= arguments[0];",
                vec![json!(decided)],
            )
            .await;
    }
    let batch = world.wait_idle_after("b1", 1).await;
    assert_eq!(batch.last_turn_error, None, "{}", world.diagnostics());
    assert_eq!(world.payments.count(), 3, "both refunds of the batch ran once");

    // An approver outside the tool's group sees the buttons disabled with the reason, and a
    // forged request is refused.
    start_as(&served, &carl, "r3", REFUND).await;
    card_shown(&browser, "r3").await;
    browser.click("#sign-out").await;
    browser.sign_in(&url, &olga, "olga").await;
    card_shown(&browser, "r3").await;
    let state = browser
        .js(
            &format!("{CARD} return [card.querySelector('button.approve').disabled, card.querySelector('button.reject-button').disabled, card.querySelector('button.edit').disabled, card.querySelector('.why').textContent, card.querySelector('button.approve').getAttribute('aria-describedby') === card.querySelector('.why').id];"),
            vec![json!("r3")],
        )
        .await;
    assert_eq!((&state[0], &state[1], &state[2]), (&json!(true), &json!(true), &json!(true)), "{state}");
    let why = state[3].as_str().unwrap();
    assert!(why.contains("`finance`") && why.contains("`olga`"), "{why}");
    assert_eq!(state[4], json!(true), "the reason describes the button");
    let id3 = world.snapshot("r3").await.pending_interrupts[0].interrupt_id.clone();
    let forged = api(reqwest::Client::new()
        .post(format!("{url}/v1/sessions/r3/interrupts/{id3}"))
        .bearer_auth(&olga)
        .json(&json!({"approved": true})))
    .await;
    assert_eq!(
        (forged.status, &forged.body["error"]["code"]),
        (403, &json!("group_required")),
        "{}",
        forged.text
    );
    assert_eq!(world.snapshot("r3").await.status, "awaiting_approval");

    // The sessions list, filtered by status.
    browser.click("#sign-out").await;
    browser.sign_in(&url, &carl, "carl").await;
    browser.click("#nav-sessions").await;
    browser
        .until(
            "the sessions list",
            "return document.querySelectorAll('#sessions-table tbody tr').length === 4",
            vec![],
        )
        .await;
    assert_labelled(&browser).await;
    browser.click("#status-filter").await;
    browser
        .js("const s = document.getElementById('status-filter'); s.value = 'awaiting_approval'; s.dispatchEvent(new Event('change'));", vec![])
        .await;
    browser
        .until("the filtered list", "const rows = document.querySelectorAll('#sessions-table tbody tr'); return rows.length === 1 && rows[0].textContent.startsWith('r3');", vec![])
        .await;

    // A client may not decide at all: the inbox says which role it would need.
    browser.click("#nav-inbox").await;
    card_shown(&browser, "r3").await;
    let why = browser
        .js(&format!("{CARD} return card.querySelector('button.approve').disabled && card.querySelector('.why').textContent;"), vec![json!("r3")])
        .await;
    assert!(why.as_str().is_some_and(|w| w.contains("`approver` or `admin`")), "{why}");

    // An approver of the group allows the tool for the rest of the session.
    browser.click("#sign-out").await;
    browser.sign_in(&url, &fina, "fina").await;
    card_shown(&browser, "r3").await;
    browser.click(&in_card("r3", "details.more-actions > summary")).await;
    browser.click(&in_card("r3", "button.approve-session")).await;
    let granted = world.wait_for("r3", "the granted refund's turn", |s| s.status == "idle").await;
    assert_eq!(granted.grants.len(), 1, "{:?}", granted.grants);
    assert_eq!(granted.grants[0].grant.granted_by, "fina");

    // The session pages, as the client who started the refunds.
    browser.click("#sign-out").await;
    browser.sign_in(&url, &carl, "carl").await;
    browser.client.goto(&format!("{url}/#/session/r3")).await.unwrap();
    browser
        .until(
            "the grant on the session page",
            "return document.getElementById('grants').textContent.includes('create_refund: granted by fina');",
            vec![],
        )
        .await;

    // The session page, as the client who started the refund: records, audit, usage; a message
    // sent from its box whose tool result carries markup, shown as text.
    browser.client.goto(&format!("{url}/#/session/r1")).await.unwrap();
    let calls = browser
        .until("the tool call records", "return document.getElementById('tool-calls').textContent.includes('succeeded') && document.getElementById('tool-calls').innerText;", vec![])
        .await;
    let calls = calls.as_str().unwrap();
    let key = format!("r1/{}/{id}", done.tool_calls[0].turn_id);
    assert!(calls.contains("create_refund") && calls.contains(&key) && calls.contains("refunded"), "{calls}");
    let audit = browser.js("return document.getElementById('audit').innerText", vec![]).await;
    assert!(
        audit.as_str().unwrap().contains("fina") && audit.as_str().unwrap().contains("approved"),
        "{audit}"
    );
    let facts = browser.js("return document.getElementById('session-facts').innerText", vec![]).await;
    assert!(
        facts.as_str().unwrap().contains("model calls") && facts.as_str().unwrap().contains("$"),
        "{facts}"
    );
    let markup = "<img src=x onerror=window.xss=1>";
    browser.type_into("#message-text", &format!(r#"call lookup_order {{"order_id":"{markup}"}}"#)).await;
    browser.click("#send-form button[type=submit]").await;
    browser
        .until(
            "the tool result quoted in the answer",
            "return [...document.querySelectorAll('#messages li.assistant')].some(li => li.textContent.includes(arguments[0] + ' not found'));",
            vec![json!(markup)],
        )
        .await;
    assert_no_markup_ran(&browser).await;
    browser.client.set_window_size(1280, 2000).await.unwrap();
    browser.screenshot("session").await;
    browser.assert_no_console_errors("after deciding, refusing and sending").await;
    browser.stop().await;
    served.stop().await;
}

/// Asserts that every visible form control on the page has a label (or an `aria-label`) and every
/// button a name.
async fn assert_labelled(browser: &Browser) {
    let unlabelled = browser
        .js(
            "return [...document.querySelectorAll('input, select, textarea, button')].filter(c => c.offsetParent !== null && !(c.labels && c.labels.length) && !c.getAttribute('aria-label') && !(c.tagName === 'BUTTON' && c.textContent.trim())).map(c => c.outerHTML);",
            vec![],
        )
        .await;
    assert_eq!(unlabelled, json!([]), "controls without a label");
}

/// The stream's first event (30 s at most).
async fn first_event(stream: &mut crate::world::ApiEvents) -> tollgate_api_types::client::SseEvent {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let mut events = stream.next().await.expect("the stream is open");
            if !events.is_empty() {
                return events.remove(0);
            }
        }
    })
    .await
    .expect("an event within 30 s")
}

/// Asserts that no `<img>` made it into the page and no `onerror` ran.
async fn assert_no_markup_ran(browser: &Browser) {
    let ran =
        browser.js("return [document.querySelectorAll('img').length, typeof window.xss];", vec![]).await;
    assert_eq!(ran, json!([0, "undefined"]), "markup from data was inserted as HTML");
}

/// Brings `session` (created with any id, straight on the store, started by `carl`) to "waiting
/// for approval of create_refund with `arguments`", without a CLI (the store has no Worker).
async fn park(world: &World, session: &str, arguments: Value) {
    park_as(world, session, None, arguments).await;
}

/// As [`park`], the session running `agent`.
pub(crate) async fn park_as(world: &World, session: &str, agent: Option<&str>, arguments: Value) {
    let store = world.store.as_ref();
    let new = NewSession {
        session_id: session.to_owned(),
        status: SessionStatus::Idle.as_str().to_owned(),
        run_state: RunState::default().to_raw(),
        agent: None,
        agent_name: agent.map(str::to_owned),
    };
    store.audit().create_session_by(new, "carl").await.expect("create the session");
    crate::park::park_started(store, session, arguments).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_pending_approvals_paint_and_markup_in_ids_and_arguments_stays_text() {
    let _one = ONE_BROWSER.lock().await;
    let Some(world) = World::new("browser: 1,000 approvals", Refund::SingleAttemptWithApproval).await else {
        return;
    };
    let Some(browser) = Browser::start("browser: 1,000 approvals", world.dir.path()).await else { return };
    const PENDING: usize = 1000;
    let xss_session = "<img src=x onerror=window.xss=2>";
    let xss_argument = "<img src=x onerror=window.xss=3>";
    let seeding = Instant::now();
    park(&world, xss_session, json!({"order_id": "7", "amount_cents": 500, "reason": xss_argument})).await;
    for i in 1..PENDING {
        park(&world, &format!("p{i:04}"), json!({"order_id": "7", "amount_cents": 100 + i})).await;
    }
    eprintln!("seeded {PENDING} pending approvals through the store in {:?}", seeding.elapsed());
    // The API alone (no Worker: nothing runs the seeded sessions), as the one admin.
    let served = Served::start_api(&world, "api", &["--token", "t0ken"]).await;
    let url = served.url.clone();
    for _ in 0..2 {
        let http = reqwest::Client::new();
        let start = Instant::now();
        let list =
            http.get(format!("{url}/v1/interrupts?limit=1000")).bearer_auth("t0ken").send().await.unwrap();
        let list = list.bytes().await.unwrap().len();
        let listed = start.elapsed();
        let start = Instant::now();
        let mut events =
            http.get(format!("{url}/v1/interrupts/events")).bearer_auth("t0ken").send().await.unwrap();
        let mut first = 0;
        while let Some(chunk) = events.chunk().await.unwrap() {
            first += chunk.len();
            if chunk.ends_with(b"\n\n") {
                break;
            }
        }
        eprintln!(
            "FIGURE GET /v1/interrupts?limit=1000: {listed:?} ({list} bytes); the live inbox's first snapshot: {:?} ({first} bytes)",
            start.elapsed()
        );
    }
    // The live inbox's stream (every event checked against the OpenAPI document): a snapshot
    // first; a client resuming with the version it has gets only what changed since.
    let http = reqwest::Client::new();
    let inbox = || http.get(format!("{url}/v1/interrupts/events")).bearer_auth("t0ken");
    let mut fresh = api_events(inbox()).await;
    let first = first_event(&mut fresh).await;
    let snapshot: Value = serde_json::from_str(&first.data).unwrap();
    assert_eq!(
        (first.event.as_str(), snapshot["interrupts"].as_array().map(Vec::len), &snapshot["total"]),
        ("snapshot", Some(PENDING), &json!(PENDING))
    );
    let version = first.id.clone().expect("a version id");
    let mut resumed = api_events(inbox().header("last-event-id", &version)).await;
    let mut stale = api_events(inbox().header("last-event-id", "00000000000000ff")).await;
    assert_eq!(first_event(&mut stale).await.event, "snapshot", "another version gets a snapshot");
    let bad = api(inbox().header("last-event-id", "yesterday")).await;
    assert_eq!((bad.status, &bad.body["error"]["field"]), (400, &json!("Last-Event-ID")), "{}", bad.text);
    drop((fresh, stale));

    browser.sign_in(&url, "t0ken", "tollgate:token").await;
    // The editor's checks, in the page's own module: what the schema refuses, and the diff.
    let checked = browser
        .client
        .execute_async(
            r#"const done = arguments[arguments.length - 1];
            import('/js/schema.js').then((m) => {
              const schema = {type: 'object', required: ['order_id', 'amount_cents'], additionalProperties: false,
                properties: {order_id: {type: 'string', pattern: '^[0-9]+$'}, amount_cents: {type: 'integer', minimum: 1},
                  currency: {enum: ['usd', 'eur']}}};
              done({
                fits: m.validate(schema, {order_id: '7', amount_cents: 5}),
                wrong: m.validate(schema, {order_id: 'x', amount_cents: 2.5, currency: 'gbp', extra: 1}),
                missing: m.validate(schema, {}),
                diff: m.diff({a: 1, b: {c: 2}, gone: true}, {a: 1, b: {c: 3}, added: 'x'}).map(m.describe),
                formable: [m.formable(schema), m.formable({type: 'object', properties: {list: {type: 'array'}}})],
              });
            }, (e) => done(String(e)));"#,
            vec![],
        )
        .await
        .expect("run the schema module");
    assert_eq!(
        checked,
        json!({
            "fits": [],
            "wrong": [
                "/order_id: must match ^[0-9]+$",
                "/amount_cents: must be integer, not number",
                "/currency: must be one of \"usd\", \"eur\"",
                "/extra: is not a field of this tool"
            ],
            "missing": ["/order_id: is required", "/amount_cents: is required"],
            "diff": ["/b/c: 2 → 3", "− /gone: true", "+ /added: \"x\""],
            "formable": [true, false],
        })
    );
    let cards = "return document.querySelectorAll('.card').length";
    browser.until("1,000 cards", &format!("{cards} === {PENDING}"), vec![]).await;

    // First paint with 1,000 pending, measured by the page (from navigation start) after a reload.
    let mut paints = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        browser.client.refresh().await.expect("reload");
        let paint =
            browser.until("the first paint", "return document.body.dataset.inboxPaintMs;", vec![]).await;
        let render = browser.js("return document.body.dataset.inboxRenderMs;", vec![]).await;
        let marks = browser
            .js("const n = performance.getEntriesByType('navigation')[0]; return [n.responseEnd, n.domContentLoadedEventEnd, ...performance.getEntriesByType('mark').map(m => m.name + ' ' + m.startTime.toFixed(0))];", vec![])
            .await;
        eprintln!(
            "page marks (navigation responseEnd, DOMContentLoaded, then ms from navigation start): {marks}"
        );
        let wall = start.elapsed();
        assert_eq!(browser.js(cards, vec![]).await, json!(PENDING));
        paints.push((
            paint.as_str().unwrap().parse::<f64>().unwrap(),
            render.as_str().unwrap().parse::<f64>().unwrap(),
            wall,
        ));
    }
    for (paint, render, wall) in &paints {
        eprintln!(
            "FIGURE inbox first paint with {PENDING} pending approvals: {paint:.0} ms from navigation start (rendering the cards {render:.0} ms; {wall:?} as WebDriver saw it)"
        );
    }
    browser.screenshot("inbox-1000").await;

    // Markup in a session id and in an argument is shown as text and never runs.
    card_shown(&browser, xss_session).await;
    let shown = browser
        .js(&format!("{CARD} return [card.querySelector('.session-link').textContent, card.querySelector('.args').textContent];"), vec![json!(xss_session)])
        .await;
    assert_eq!(shown[0], json!(xss_session));
    assert!(shown[1].as_str().unwrap().contains(xss_argument), "{shown}");
    assert_no_markup_ran(&browser).await;
    browser
        .js(&format!("{CARD} card.querySelector('.session-link').click();"), vec![json!(xss_session)])
        .await;
    browser
        .until("the session page of the markup id", "return document.getElementById('session-id')?.textContent === arguments[0] && document.getElementById('tool-calls').textContent.includes(arguments[1]);", vec![json!(xss_session), json!(xss_argument)])
        .await;
    assert_no_markup_ran(&browser).await;

    // The sessions list pages through the thousand, by id, 25 at a time.
    browser.client.goto(&format!("{url}/#/sessions")).await.unwrap();
    let first = browser
        .until("the first page", "const ids = [...document.querySelectorAll('#sessions-table tbody tr td:first-child')].map(td => td.textContent); return ids.length === 25 && ids;", vec![])
        .await;
    assert_eq!(first[0], json!(xss_session), "ids sort `<` first: {first}");
    assert_eq!(first[24], json!("p0024"));
    browser.click(".pager button:last-child").await;
    let second = browser
        .until("the second page", "const ids = [...document.querySelectorAll('#sessions-table tbody tr td:first-child')].map(td => td.textContent); return ids[0] === 'p0025' && ids;", vec![])
        .await;
    assert_eq!(second.as_array().map(Vec::len), Some(25), "{second}");
    browser.click(".pager button:first-child").await;
    browser
        .until("the first page again", "return document.querySelector('#sessions-table tbody tr td:first-child').textContent === arguments[0];", vec![json!(xss_session)])
        .await;
    assert_no_markup_ran(&browser).await;

    // A new interrupt committed by another process (this test) on SQLite reaches the open page
    // through the stream's poll fallback.
    browser.client.goto(&format!("{url}/#/inbox")).await.unwrap();
    browser.until("the inbox", &format!("{cards} === {PENDING}"), vec![]).await;
    // One decided elsewhere leaves the page; one opened takes its place among the 1,000 tracked.
    let decided = world.store.open_interrupts(None, 10_000).await.unwrap();
    let decided_id =
        decided.iter().find(|i| i.session_id == "p0001").expect("p0001 waits").interrupt_id.clone();
    world.decide("p0001", &decided_id, false, Some("not now"), "k-p0001").await;
    browser.until("the decided card to leave", &format!("{CARD} return !card;"), vec![json!("p0001")]).await;
    // The decision queued p0001's next step; hold it, so the next claim is the new session's.
    let held = world.store.claim("seeder", Duration::from_secs(600)).await.unwrap().expect("p0001's step");
    assert_eq!(held.step.session_id, "p0001");
    park(&world, "late", json!({"order_id": "7", "amount_cents": 42})).await;
    let created = world
        .store
        .open_interrupts(None, 10_000)
        .await
        .unwrap()
        .iter()
        .find(|i| i.session_id == "late")
        .unwrap()
        .created_at;
    let shown = card_shown(&browser, "late").await.expect("a card added live");
    let mut changes = Vec::new();
    while !changes.iter().any(|e: &Value| {
        e["interrupts"].as_array().is_some_and(|l| l.iter().any(|i| i["session_id"] == "late"))
    }) {
        let events = tokio::time::timeout(Duration::from_secs(30), resumed.next())
            .await
            .expect("a change")
            .expect("open");
        for event in events {
            assert_eq!(event.event, "changed", "the resumed stream sends no snapshot: {}", event.data);
            changes.push(serde_json::from_str(&event.data).unwrap());
        }
    }
    assert_eq!(
        changes[0]["gone"],
        json!([{"session_id": "p0001", "interrupt_id": decided_id}]),
        "{changes:?}"
    );
    eprintln!(
        "FIGURE a new interrupt committed by another process showed {} ms after it was created (tollgate api on SQLite: its data_version watch, every 100 ms; the re-read without a wake-up is every 5 s)",
        shown - created
    );

    // Readable at 360 px: nothing scrolls sideways.
    browser.client.set_window_size(360, 800).await.unwrap();
    let width = browser.js("return [document.documentElement.scrollWidth, window.innerWidth];", vec![]).await;
    assert!(width[0].as_i64() <= width[1].as_i64(), "the inbox scrolls sideways at 360 px: {width}");
    browser.screenshot("inbox-360px").await;
    browser.assert_no_console_errors("with 1,000 approvals").await;

    // The server goes away and comes back on the same address: the open page reconnects (with
    // the version it has as Last-Event-ID) and shows what opened meanwhile, without a reload.
    browser.client.set_window_size(1280, 1000).await.unwrap();
    let address = url.trim_start_matches("http://").to_owned();
    served.kill().await;
    browser
        .until(
            "the page to notice",
            "return document.getElementById('inbox-summary').textContent.includes('reconnecting');",
            vec![],
        )
        .await;
    // One decided and one opened while it is down (the new one takes the decided one's place
    // among the 1,000 tracked).
    let decided = world.store.open_interrupts(None, 10_000).await.unwrap();
    let decided = decided.iter().find(|i| i.session_id == "p0002").expect("p0002 waits").interrupt_id.clone();
    world.decide("p0002", &decided, true, None, "k-p0002").await;
    let held = world.store.claim("seeder", Duration::from_secs(600)).await.unwrap().expect("p0002's step");
    assert_eq!(held.step.session_id, "p0002");
    park(&world, "meanwhile", json!({"order_id": "7", "amount_cents": 43})).await;
    let served = Served::start_api_on(&world, "api-again", &address, &["--token", "t0ken"]).await;
    card_shown(&browser, "meanwhile").await;
    browser.until("the decided one to leave", &format!("{CARD} return !card;"), vec![json!("p0002")]).await;
    browser
        .until(
            "the summary to recover",
            "return !document.getElementById('inbox-summary').textContent.includes('reconnecting');",
            vec![],
        )
        .await;
    // The outage's failed connections are the only console errors.
    let errors: Vec<(String, String)> = browser
        .console()
        .await
        .into_iter()
        .filter(|(level, _)| level == "SEVERE" || level == "WARNING")
        .collect();
    assert!(
        errors.iter().all(|(_, message)| message.contains("ERR_CONNECTION_REFUSED")
            || message.contains("ERR_EMPTY_RESPONSE")
            || message.contains("ERR_INCOMPLETE_CHUNKED_ENCODING")),
        "{errors:#?}"
    );
    browser.stop().await;
    served.stop().await;
}
