//! The outbox conformance suite: one function per rule of the [`tollgate_store::Outbox`] contract, run on
//! every backend by [`run_all`] with the same fresh [`Harness`] per case as the store suite.
//!
//! Lease expiry is waited for by polling a claim with a deadline, never by a fixed sleep.

use std::future::Future;
use std::time::Duration;

use super::conformance::{Case, Harness, cases, run_cases};
use tollgate_store::*;

cases![
    an_event_of_a_subscribed_kind_gets_one_delivery_per_webhook_with_its_transaction,
    a_claimed_delivery_is_leased_to_one_claimer_until_its_lease_ends,
    a_failed_attempt_is_due_again_after_its_delay_with_its_error,
    a_delivered_row_is_never_claimed_again_and_a_stale_claim_writes_nothing,
    a_delivery_given_up_is_failed_for_good_with_its_last_error,
    concurrent_claimers_never_get_the_same_delivery,
];

/// Runs every case, each on a fresh harness from `fresh(case_name)`.
///
/// # Panics
/// After all cases ran, when any failed; the message names each failed case.
pub async fn run_all<F, Fut>(fresh: F)
where
    F: Fn(&'static str) -> Fut,
    Fut: Future<Output = Harness>,
{
    run_cases("outbox", CASES, fresh).await;
}

// ---------------------------------------------------------------- helpers

const LONG: Duration = Duration::from_secs(60);

fn j(text: &str) -> Box<serde_json::value::RawValue> {
    raw(text).expect("test JSON")
}

fn outbox(h: &Harness) -> &dyn Outbox {
    h.store.outbox().expect("the backend has an outbox")
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

async fn subscribe(h: &Harness, subs: &[(&str, &[&str])]) {
    let subs: Vec<Subscription> = subs
        .iter()
        .map(|(webhook, kinds)| Subscription { webhook: (*webhook).into(), kinds: names(kinds) })
        .collect();
    outbox(h).subscribe_webhooks(&subs).await.expect("subscribe");
}

async fn new_session(store: &dyn Store, id: &str) {
    let session = NewSession {
        session_id: id.into(),
        status: "idle".into(),
        run_state: j(r#"{"version":1}"#),
        agent: None,
        agent_name: None,
    };
    assert!(store.create_session(session).await.expect("create_session"));
}

/// Appends one event of `kind` to `session` (through a user message with no wake step).
async fn append(store: &dyn Store, session: &str, key: &str, kind: &str) {
    let message = UserMessage {
        session_id: session.into(),
        client_key: key.into(),
        item: NewItem {
            kind: "user_prompt".into(),
            uuid: None,
            turn_id: None,
            body: j(r#"{"kind":"user_prompt","text":"x"}"#),
        },
        wake: None,
        events: vec![NewEvent { kind: kind.into(), payload: j(&format!(r#"{{"key":"{key}"}}"#)) }],
    };
    store.send_user_message(message).await.expect("send_user_message");
}

/// Claims until something is due or `timeout` passes.
async fn claim_within(h: &Harness, owner: &str, lease: Duration, timeout: Duration) -> Vec<Delivery> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let got = outbox(h).claim_deliveries(owner, lease, &names(&["a", "b"]), 10).await.expect("claim");
        if !got.is_empty() || tokio::time::Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn all(h: &Harness) -> Vec<Delivery> {
    outbox(h).deliveries(0, 1000).await.expect("deliveries")
}

// ---------------------------------------------------------------- cases

async fn an_event_of_a_subscribed_kind_gets_one_delivery_per_webhook_with_its_transaction(h: Harness) {
    let store = h.store.as_ref();
    new_session(store, "s").await;
    append(store, "s", "before", "turn_completed").await;
    subscribe(&h, &[("a", &["turn_completed", "turn_failed"]), ("b", &["turn_completed"])]).await;
    append(store, "s", "k1", "turn_completed").await;
    append(store, "s", "k2", "turn_failed").await;
    append(store, "s", "k3", "text_delta").await;

    // A transaction that appends a subscribed event and then fails leaves no delivery.
    store
        .send_user_message(UserMessage {
            session_id: "s".into(),
            client_key: "k4".into(),
            item: NewItem { kind: "user_prompt".into(), uuid: None, turn_id: None, body: j("{}") },
            wake: Some(NewStep::now("RunModel", j("{}"))),
            events: vec![NewEvent { kind: "turn_completed".into(), payload: j("{}") }],
        })
        .await
        .expect("a message with a wake step");
    let claimed = store.claim("w", LONG).await.expect("claim").expect("the wake step");
    let mut failing = Commit::finish(Finish::Done(j("null")));
    failing.events.push(NewEvent { kind: "turn_completed".into(), payload: j(r#"{"rolled":"back"}"#) });
    failing.session.run_state = Some(j(r#"{"no":"version"}"#));
    store.commit(&claimed, failing).await.expect_err("an invalid run state fails the commit");

    let rows = all(&h).await;
    let mut got: Vec<(String, i64, String, String)> =
        rows.iter().map(|d| (d.webhook.clone(), d.seq, d.kind.clone(), d.payload.get().to_owned())).collect();
    got.sort_by(|x, y| (x.1, &x.0).cmp(&(y.1, &y.0)));
    let events = store.read_events("s", 0, 100).await.unwrap();
    let seq_of = |key: &str| events.iter().find(|e| e.payload.get().contains(key)).expect("event").seq;
    let (k1, k2) = (seq_of("\"k1\""), seq_of("\"k2\""));
    assert_eq!(
        got,
        vec![
            ("a".into(), k1, "turn_completed".into(), r#"{"key":"k1"}"#.into()),
            ("b".into(), k1, "turn_completed".into(), r#"{"key":"k1"}"#.into()),
            ("a".into(), k2, "turn_failed".into(), r#"{"key":"k2"}"#.into()),
            ("a".into(), seq_of("{}"), "turn_completed".into(), "{}".into()),
            ("b".into(), seq_of("{}"), "turn_completed".into(), "{}".into()),
        ],
        "one delivery per subscribed webhook, none before subscribing, none rolled back"
    );
    assert!(rows.iter().all(|d| d.state == DeliveryState::Pending && d.attempt == 0 && d.session_id == "s"));
    let event = events.iter().find(|e| e.seq == k1).unwrap();
    assert_eq!(rows[0].event_at, event.created_at, "the delivery carries the event's time");
}

async fn a_claimed_delivery_is_leased_to_one_claimer_until_its_lease_ends(h: Harness) {
    subscribe(&h, &[("a", &["turn_completed"])]).await;
    new_session(h.store.as_ref(), "s").await;
    append(h.store.as_ref(), "s", "k1", "turn_completed").await;
    let first = claim_within(&h, "p1", Duration::from_millis(300), LONG).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].attempt, 1);
    let none = outbox(&h).claim_deliveries("p2", LONG, &names(&["a"]), 10).await.unwrap();
    assert!(none.is_empty(), "a leased delivery is not claimed by another process");
    let other = outbox(&h).claim_deliveries("p2", LONG, &names(&["zzz"]), 10).await.unwrap();
    assert!(other.is_empty(), "a claim takes only the webhooks it names");
    let again = claim_within(&h, "p2", LONG, LONG).await;
    assert_eq!(again.len(), 1, "an expired lease is claimed again");
    assert_eq!((again[0].delivery_id, again[0].attempt), (first[0].delivery_id, 2));
    assert!(!outbox(&h).delivered(&first[0]).await.unwrap(), "the first claim is stale");
    assert!(outbox(&h).delivered(&again[0]).await.unwrap());
}

async fn a_failed_attempt_is_due_again_after_its_delay_with_its_error(h: Harness) {
    subscribe(&h, &[("a", &["turn_completed"])]).await;
    new_session(h.store.as_ref(), "s").await;
    append(h.store.as_ref(), "s", "k1", "turn_completed").await;
    let first = claim_within(&h, "p1", LONG, LONG).await.remove(0);
    assert!(outbox(&h).failed(&first, "HTTP 500", Some(Duration::from_millis(400))).await.unwrap());
    let row = all(&h).await.remove(0);
    assert_eq!((row.state, row.last_error.as_deref()), (DeliveryState::Pending, Some("HTTP 500")));
    let started = std::time::Instant::now();
    let none = outbox(&h).claim_deliveries("p1", LONG, &names(&["a"]), 10).await.unwrap();
    assert!(none.is_empty() || started.elapsed() >= Duration::from_millis(400), "not due before its delay");
    let second = claim_within(&h, "p1", LONG, LONG).await.remove(0);
    assert_eq!((second.delivery_id, second.attempt), (first.delivery_id, 2));
    assert!(second.due_at >= row.due_at, "claimed once due");
}

async fn a_delivered_row_is_never_claimed_again_and_a_stale_claim_writes_nothing(h: Harness) {
    subscribe(&h, &[("a", &["turn_completed"])]).await;
    new_session(h.store.as_ref(), "s").await;
    append(h.store.as_ref(), "s", "k1", "turn_completed").await;
    let first = claim_within(&h, "p1", Duration::from_millis(100), LONG).await.remove(0);
    let second = claim_within(&h, "p2", Duration::from_millis(100), LONG).await.remove(0);
    assert!(outbox(&h).delivered(&second).await.unwrap());
    assert!(!outbox(&h).failed(&first, "late", Some(Duration::ZERO)).await.unwrap(), "stale claim");
    assert!(!outbox(&h).failed(&second, "twice", None).await.unwrap(), "already delivered");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let none = outbox(&h).claim_deliveries("p3", LONG, &names(&["a"]), 10).await.unwrap();
    assert!(none.is_empty(), "a delivered row is never claimed again");
    let row = all(&h).await.remove(0);
    assert_eq!((row.state, row.attempt, row.last_error), (DeliveryState::Delivered, 2, None));
}

async fn a_delivery_given_up_is_failed_for_good_with_its_last_error(h: Harness) {
    subscribe(&h, &[("a", &["turn_completed"])]).await;
    new_session(h.store.as_ref(), "s").await;
    append(h.store.as_ref(), "s", "k1", "turn_completed").await;
    let first = claim_within(&h, "p1", Duration::from_millis(100), LONG).await.remove(0);
    assert!(outbox(&h).failed(&first, "connection refused", None).await.unwrap());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let none = outbox(&h).claim_deliveries("p1", LONG, &names(&["a"]), 10).await.unwrap();
    assert!(none.is_empty(), "a failed row is never claimed again");
    let row = all(&h).await.remove(0);
    assert_eq!((row.state, row.last_error.as_deref()), (DeliveryState::Failed, Some("connection refused")));
}

async fn concurrent_claimers_never_get_the_same_delivery(h: Harness) {
    subscribe(&h, &[("a", &["turn_completed"]), ("b", &["turn_completed"])]).await;
    new_session(h.store.as_ref(), "s").await;
    for i in 0..20 {
        append(h.store.as_ref(), "s", &format!("k{i}"), "turn_completed").await;
    }
    let store = h.store.clone();
    let claimers = (0..4).map(|p| {
        let store = store.clone();
        tokio::spawn(async move {
            let outbox = store.outbox().unwrap();
            let mut mine = Vec::new();
            loop {
                let got = outbox.claim_deliveries(&format!("p{p}"), LONG, &names(&["a", "b"]), 3).await;
                let got = got.expect("claim");
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|d| d.delivery_id));
            }
        })
    });
    let mut ids = Vec::new();
    for c in claimers {
        ids.extend(c.await.unwrap());
    }
    ids.sort_unstable();
    let before = ids.len();
    ids.dedup();
    assert_eq!((before, ids.len()), (40, 40), "each of the 40 deliveries claimed exactly once");
}
