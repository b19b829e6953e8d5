//! Writes that throw, with the real CLI, in every guest language: a tool that sends a payment and
//! then throws on the answer is never recorded `failed` (the payment was made), and a payments
//! service that is down is a definite failure, never `outcome_unknown`.
//!
//! Each language's agent has the `throwing` test guest (Rust: `host/test-guests/throwing`; Go,
//! JavaScript, Python: `guest-sdk/*/test-cases/throwing*`, built from source) under three
//! policies, and that language's example `create_refund`:
//!
//! | tool | runs | sends a payment, then throws: | service down: |
//! | --- | --- | --- | --- |
//! | `charge_then_throw` | deferred, one attempt | `outcome_unknown`, one payment | |
//! | `credit_then_throw` | inline, idempotent | three attempts under one key, `outcome_unknown` | `failed`, "never left" |
//! | `deposit_then_throw` | deferred, idempotent | three attempts under one key, `outcome_unknown` | |
//! | `create_refund` | deferred, one attempt | | `failed`, "never left" |
//!
//! The model's answer quotes each call's result, so it says what the record says.

use std::path::PathBuf;
use std::time::Duration;

use tollgate_api::api::types::Snapshot;
use tollgate_mock_model::payments::Payments;

use crate::world::{Refund, World};

/// The agent's configuration: the example's options factory and tools, plus the throwing guest
/// under its three policies; every tool reaches the payments service of the Worker's environment.
const CONFIG: &str = r#"[agent]
flow_type = "Throwing"
options_factory = "agent.wasm"

[policies]
default_effect = "unclassified"
lookup_order = { effect = "read" }
create_refund = { effect = "non_idempotent_write", requires_approval = false }
charge_then_throw = { effect = "non_idempotent_write", requires_approval = false }
credit_then_throw = { effect = "idempotent_write" }
deposit_then_throw = { effect = "idempotent_write", inline = false }

[tools.payments]
allowed_outbound_hosts = ["http://127.0.0.1:*"]
config = { PAYMENTS_URL = { env = "PAYMENTS_URL" } }
timeout_ms = 20000

[tools.throwing]
allowed_outbound_hosts = ["http://127.0.0.1:*"]
config = { PAYMENTS_URL = { env = "PAYMENTS_URL" } }
timeout_ms = 20000
"#;

/// `name`'s component in `lang`: Rust's built by `tollgate-test-guests`, the others by
/// `scripts/build-guests.sh`.
fn component(lang: &str, name: &str) -> PathBuf {
    match (lang, name) {
        ("rust", "payments") => tollgate_test_guests::PAYMENTS.into(),
        ("rust", "throwing") => tollgate_test_guests::THROWING.into(),
        _ => tollgate_test_guests::built(lang, name),
    }
}

/// A world whose agent runs `lang`'s throwing guest and example refund tool.
async fn world_of(lang: &str) -> Option<World> {
    let world = World::new(&format!("writes that throw ({lang})"), Refund::SingleAttemptWithApproval).await?;
    let tools = world.agent.join("tools");
    std::fs::copy(component(lang, "payments"), tools.join("payments.wasm")).expect("payments");
    std::fs::copy(component(lang, "throwing"), tools.join("throwing.wasm")).expect("throwing");
    std::fs::write(world.agent.join("tollgate.toml"), CONFIG).expect("write config");
    Some(world)
}

fn last_answer(snapshot: &Snapshot) -> String {
    snapshot.messages.iter().rev().find(|m| m.role == "assistant").map(|m| m.text.clone()).unwrap_or_default()
}

/// The one tool call record of `session`'s finished turn: its status and the model's answer.
/// Waits up to 5 minutes: each world compiles its JavaScript and Python components afresh (tens
/// of megabytes), which a busy machine makes slow.
async fn outcome(world: &World, session: &str) -> (String, Option<String>, String) {
    let start = std::time::Instant::now();
    while !world.events(session).await.iter().any(|e| e.kind == "turn_completed" || e.kind == "turn_failed") {
        assert!(start.elapsed() < Duration::from_secs(300), "{session} never ended\n{}", world.diagnostics());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let done = world.wait_idle_after(session, 1).await;
    assert_eq!(done.last_turn_error, None, "{session}: {}", world.diagnostics());
    assert_eq!(done.tool_calls.len(), 1, "{session}: {done:#?}");
    let call = &done.tool_calls[0];
    (call.state.name().to_owned(), call.state.text().map(str::to_owned), last_answer(&done))
}

/// The payments `tool` sent, as (idempotency key, attempt), in order.
fn payments_of(payments: &Payments, tool: &str) -> Vec<(String, String)> {
    payments
        .requests()
        .into_iter()
        .filter(|r| r.body.contains(&format!(r#""tool":"{tool}""#)))
        .map(|r| {
            let body: serde_json::Value = serde_json::from_str(&r.body).expect("a JSON body");
            (r.idempotency_key, body["attempt"].to_string())
        })
        .collect()
}

async fn writes_that_throw_are_never_failed_and_a_service_down_is(lang: &str) {
    let Some(mut world) = world_of(lang).await else { return };
    let _worker = world.worker("a");
    let pay = |tool: &str, order: u32| format!(r#"call {tool} {{"order_id":"{order}","amount_cents":100}}"#);
    world.send("single", &pay("charge_then_throw", 1)).await;
    world.send("inline", &pay("credit_then_throw", 2)).await;
    world.send("deferred", &pay("deposit_then_throw", 3)).await;

    // A single-attempt write that paid and then threw: one payment, outcome unknown.
    let (status, _, answer) = outcome(&world, "single").await;
    assert_eq!(status, "outcome_unknown", "{lang}: the payment was made\n{}", world.diagnostics());
    assert_eq!(payments_of(&world.payments, "charge_then_throw").len(), 1, "{lang}: one payment");
    assert!(answer.contains("is unknown") && answer.contains("may have taken effect"), "{lang}: {answer}");

    // Idempotent writes, inline and deferred: attempted again under one key, then unknown.
    for (session, tool) in [("inline", "credit_then_throw"), ("deferred", "deposit_then_throw")] {
        let (status, _, answer) = outcome(&world, session).await;
        let sent = payments_of(&world.payments, tool);
        assert_eq!(sent.len(), 3, "{lang} {session}: three attempts: {sent:?}\n{}", world.diagnostics());
        assert!(sent.iter().all(|(key, _)| *key == sent[0].0), "{lang} {session}: one key: {sent:?}");
        let attempts: Vec<&str> = sent.iter().map(|(_, attempt)| attempt.as_str()).collect();
        assert_eq!(attempts, ["1", "2", "3"], "{lang} {session}");
        assert_eq!(status, "outcome_unknown", "{lang} {session}");
        assert!(answer.contains("is unknown"), "{lang} {session}: {answer}");
    }

    // The payments service goes down: its port refuses connections.
    let gone = std::mem::replace(&mut world.payments, Payments::start().await.expect("another service"));
    let paid = gone.count();
    drop(gone);
    world.send("down", r#"call create_refund {"order_id":"4","amount_cents":100}"#).await;
    world.send("down-inline", &pay("credit_then_throw", 5)).await;
    for session in ["down", "down-inline"] {
        let (status, error, answer) = outcome(&world, session).await;
        assert_eq!(status, "failed", "{lang} {session}: nothing was sent\n{}", world.diagnostics());
        let error = error.unwrap_or_default();
        assert!(error.contains("never left this machine"), "{lang} {session}: {error}");
        assert!(answer.contains("never left this machine"), "{lang} {session}: the model read it: {answer}");
    }
    assert_eq!(world.payments.count(), 0, "{lang}: the new service got nothing");
    assert_eq!(paid, 7, "{lang}: 1 + 3 + 3 payments before the service went down");
}

#[tokio::test(flavor = "multi_thread")]
async fn rust_writes_that_throw_are_never_failed_and_a_service_down_is() {
    writes_that_throw_are_never_failed_and_a_service_down_is("rust").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn go_writes_that_throw_are_never_failed_and_a_service_down_is() {
    writes_that_throw_are_never_failed_and_a_service_down_is("go").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn javascript_writes_that_throw_are_never_failed_and_a_service_down_is() {
    writes_that_throw_are_never_failed_and_a_service_down_is("js").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn python_writes_that_throw_are_never_failed_and_a_service_down_is() {
    writes_that_throw_are_never_failed_and_a_service_down_is("python").await;
}
