//! The conformance cases of agents on one store: a session names its agent and keeps its digest,
//! a Worker claims only its agents' sessions (unpinned, or pinned to a digest it loaded), the
//! registry adopts sessions from before names, and an upgrade pins only to what a Worker runs.

use super::{Harness, LONG, done, j, message, parked_on_i1};
use tollgate_store::*;

const SUPPORT: &str = "support";
const BILLING: &str = "billing";

fn pinned(digest: &str) -> Option<AgentDigest> {
    Some(AgentDigest { digest: digest.into(), pinned: true })
}

fn unpinned(digest: &str) -> Option<AgentDigest> {
    Some(AgentDigest { digest: digest.into(), pinned: false })
}

fn new_session(id: &str, name: Option<&str>, agent: Option<AgentDigest>) -> NewSession {
    NewSession {
        session_id: id.into(),
        status: "idle".into(),
        run_state: j(r#"{"version":1}"#),
        agent,
        agent_name: name.map(str::to_owned),
    }
}

/// A session of agent `name` under `agent` with one prompt and its queued `RunModel` step.
async fn session_of(store: &dyn Store, id: &str, name: Option<&str>, agent: Option<AgentDigest>) {
    assert!(store.create_session(new_session(id, name, agent)).await.expect("create_session"));
    store.send_user_message(message(id, "k1", "hello")).await.expect("send_user_message");
}

fn scope(agents: &[&str], digests: &[&str]) -> ClaimScope {
    ClaimScope {
        agents: agents.iter().map(|a| (*a).to_owned()).collect(),
        digests: digests.iter().map(|d| (*d).to_owned()).collect(),
        pinned_only: false,
    }
}

/// Claims with `claim_for(scope)` until nothing is due; the sessions of the claimed steps, sorted.
async fn drain_for(store: &dyn Store, agents: &[&str], digests: &[&str]) -> Vec<String> {
    drain_scope(store, &scope(agents, digests)).await
}

/// The same with any scope.
async fn drain_scope(store: &dyn Store, scope: &ClaimScope) -> Vec<String> {
    let mut sessions = Vec::new();
    while let Some(c) = store.claim_for("w", LONG, scope).await.expect("claim_for") {
        sessions.push(c.step.session_id.clone());
    }
    sessions.sort();
    sessions
}

pub(super) async fn a_session_keeps_the_agent_it_was_created_with_and_lists_it(h: Harness) {
    let s = &*h.store;
    let cases = [
        ("a", Some(SUPPORT), pinned("sha256:a")),
        ("b", Some(BILLING), unpinned("sha256:u")),
        ("c", None, None),
    ];
    for (id, name, agent) in cases.clone() {
        assert!(s.create_session(new_session(id, name, agent)).await.unwrap());
    }
    for (id, name, agent) in cases.clone() {
        let got = s.session(id).await.unwrap().unwrap();
        assert_eq!((got.agent_name.as_deref(), got.agent), (name, agent), "{id}");
    }
    let listed: Vec<(Option<String>, Option<AgentDigest>)> =
        s.list_sessions(None, "", 10).await.unwrap().into_iter().map(|x| (x.agent_name, x.agent)).collect();
    let expected: Vec<(Option<String>, Option<AgentDigest>)> =
        cases.into_iter().map(|(_, name, agent)| (name.map(str::to_owned), agent)).collect();
    assert_eq!(listed, expected);
    let empty = new_session("d", Some(SUPPORT), pinned(""));
    assert!(matches!(s.create_session(empty).await, Err(StoreError::Invalid { .. })), "an empty digest");
    for bad in ["", "support@3", "sha256:x", "-lead", "a b", &"x".repeat(MAX_AGENT_NAME + 1)] {
        let refused = s.create_session(new_session("d", Some(bad), None)).await;
        assert!(
            matches!(&refused, Err(StoreError::Invalid { what }) if what.contains("agent name")),
            "{bad:?}: {refused:?}"
        );
    }
    assert!(s.session("d").await.unwrap().is_none(), "nothing was written");
}

pub(super) async fn claim_for_takes_only_steps_of_its_agents_unpinned_or_pinned_to_its_digests(h: Harness) {
    let s = &*h.store;
    session_of(s, "pa", Some(SUPPORT), pinned("sha256:a")).await;
    session_of(s, "pb", Some(SUPPORT), pinned("sha256:b")).await;
    session_of(s, "u", Some(SUPPORT), unpinned("sha256:u")).await;
    session_of(s, "n", Some(SUPPORT), None).await;
    // Another agent's sessions, one pinned to the same digest as a support bundle.
    session_of(s, "billing-a", Some(BILLING), pinned("sha256:a")).await;
    session_of(s, "billing-u", Some(BILLING), None).await;
    // A session that names no agent: nobody's.
    session_of(s, "nobody", None, None).await;
    assert_eq!(drain_for(s, &[SUPPORT], &["sha256:c"]).await, ["n", "u"], "only its agent's unpinned ones");
    assert_eq!(drain_for(s, &[SUPPORT], &["sha256:a"]).await, ["pa"], "and those pinned to its digest");
    assert_eq!(
        drain_for(s, &["other"], &["sha256:b"]).await,
        Vec::<String>::new(),
        "nothing of another agent"
    );
    assert_eq!(
        drain_for(s, &[SUPPORT, BILLING], &["sha256:b", "sha256:a"]).await,
        ["billing-a", "billing-u", "pb"]
    );
    assert_eq!(drain_for(s, &[], &[]).await, Vec::<String>::new(), "serving nothing claims nothing");
    assert!(s.step_in_flight("nobody").await.unwrap().is_some_and(|step| step.attempt == 0), "never claimed");
    let bad = s.claim_for("w", LONG, &scope(&[SUPPORT], &[""])).await;
    assert!(matches!(bad, Err(StoreError::Invalid { .. })), "an empty digest: {bad:?}");
    let bad = s.claim_for("w", LONG, &scope(&["no name"], &[])).await;
    assert!(matches!(bad, Err(StoreError::Invalid { .. })), "a bad name: {bad:?}");
}

/// A Worker kept to finish a previous version's sessions (`tollgate dev`) takes only those pinned
/// to it: a new (unpinned) session is left to the current version's Workers.
pub(super) async fn a_pinned_only_claim_takes_no_unpinned_session(h: Harness) {
    let s = &*h.store;
    session_of(s, "pa", Some(SUPPORT), pinned("sha256:a")).await;
    session_of(s, "u", Some(SUPPORT), unpinned("sha256:u")).await;
    session_of(s, "n", Some(SUPPORT), None).await;
    let kept = ClaimScope { pinned_only: true, ..scope(&[SUPPORT], &["sha256:a"]) };
    assert_eq!(drain_scope(s, &kept).await, ["pa"], "the pinned one only");
    let nothing = ClaimScope { pinned_only: true, ..scope(&[SUPPORT], &[]) };
    assert_eq!(drain_scope(s, &nothing).await, Vec::<String>::new(), "no digest, nothing");
    assert_eq!(drain_for(s, &[SUPPORT], &[]).await, ["n", "u"], "the unpinned ones stayed for the others");
}

pub(super) async fn a_step_a_commit_enqueues_keeps_the_sessions_agent_and_pin(h: Harness) {
    let s = &*h.store;
    session_of(s, "pa", Some(SUPPORT), pinned("sha256:a")).await;
    let c = s.claim_for("w", LONG, &scope(&[SUPPORT], &["sha256:a"])).await.unwrap().expect("pa's step");
    let mut next = done();
    next.steps.push(NewStep::now("ResumeTurn", j("{}")));
    s.commit(&c, next).await.unwrap();
    assert!(s.claim_for("w", LONG, &scope(&[SUPPORT], &["sha256:b"])).await.unwrap().is_none(), "not for b");
    assert!(
        s.claim_for("w", LONG, &scope(&[BILLING], &["sha256:a"])).await.unwrap().is_none(),
        "not billing's"
    );
    let resumed = s.claim_for("w", LONG, &scope(&[SUPPORT], &["sha256:a"])).await.unwrap().expect("for a");
    assert_eq!((resumed.step.session_id.as_str(), resumed.step.kind.as_str()), ("pa", "ResumeTurn"));
}

pub(super) async fn registering_an_agent_adopts_the_sessions_that_name_none_by_digest_or_as_the_only_agent(
    h: Harness,
) {
    let s = &*h.store;
    let registry = s.agents();
    // Sessions from before names: one recorded support's digest, one nothing.
    session_of(s, "old-a", None, pinned("sha256:a")).await;
    session_of(s, "old-none", None, None).await;
    assert_eq!(drain_for(s, &[SUPPORT], &["sha256:a"]).await, Vec::<String>::new(), "nobody's yet");
    let first = registry.register_agent(SUPPORT, "sha256:a", true).await.unwrap();
    assert_eq!(first, Registration { adopted: 2, unnamed: 0 }, "by digest, then as the only agent");
    assert_eq!(s.session("old-none").await.unwrap().unwrap().agent_name.as_deref(), Some(SUPPORT));
    // A second agent: sessions naming none are adopted by digest only.
    session_of(s, "old-b", None, unpinned("sha256:b")).await;
    session_of(s, "old-z", None, unpinned("sha256:z")).await;
    let second = registry.register_agent(BILLING, "sha256:b", false).await.unwrap();
    assert_eq!(second, Registration { adopted: 1, unnamed: 1 }, "old-z recorded a digest nobody registered");
    assert_eq!(
        drain_for(s, &[SUPPORT], &["sha256:a"]).await,
        ["old-a", "old-none"],
        "adopted with their steps"
    );
    assert_eq!(drain_for(s, &[BILLING], &[]).await, ["old-b"]);
    assert_eq!(s.session("old-z").await.unwrap().unwrap().agent_name, None);
    // Later: a session created without a name is adopted by the next call; one no rule places stays.
    assert_eq!(registry.adopt_unnamed(BILLING, "sha256:b").await.unwrap(), Some(0), "old-z: nobody's");
    session_of(s, "late-b", None, unpinned("sha256:b")).await;
    assert_eq!(registry.adopt_unnamed(BILLING, "sha256:b").await.unwrap(), Some(1));
    assert_eq!(s.session("late-b").await.unwrap().unwrap().agent_name.as_deref(), Some(BILLING));
    assert_eq!(drain_for(s, &[BILLING], &[]).await, ["late-b"], "with its step");
    // Registering again is the same row, with the last registration's lock and time.
    let again = registry.register_agent(SUPPORT, "sha256:a", false).await.unwrap();
    assert_eq!(again, Registration { adopted: 0, unnamed: 1 });
    let known = registry.known_agents().await.unwrap();
    let rows: Vec<(&str, &str, bool)> =
        known.iter().map(|k| (k.name.as_str(), k.digest.as_str(), k.locked)).collect();
    assert_eq!(rows, [(BILLING, "sha256:b", false), (SUPPORT, "sha256:a", false)]);
    assert!(known.iter().all(|k| k.first_seen_at > 0 && k.last_seen_at >= k.first_seen_at), "{known:?}");
    h.exec("UPDATE sessions SET agent_name = 'billing' WHERE session_id = 'old-z'").await;
    assert_eq!(registry.adopt_unnamed(SUPPORT, "sha256:a").await.unwrap(), None, "every session names one");
    for (name, digest) in [("no name", "sha256:a"), (SUPPORT, "")] {
        let bad = registry.register_agent(name, digest, false).await;
        assert!(matches!(bad, Err(StoreError::Invalid { .. })), "{name:?} {digest:?}: {bad:?}");
    }
    assert_eq!(registry.known_agents().await.unwrap().len(), 2, "nothing was written");
}

/// A session of support pinned to `digest` whose step waits on interrupt `i1`.
async fn waiting_under(store: &dyn Store, id: &str, digest: &str) -> i64 {
    session_of(store, id, Some(SUPPORT), pinned(digest)).await;
    let c = store.claim_for("w", LONG, &scope(&[SUPPORT], &[digest])).await.unwrap().expect("its step");
    store.commit(&c, parked_on_i1()).await.unwrap().step_ids[0].unwrap()
}

pub(super) async fn upgrading_a_waiting_session_moves_its_steps_to_the_new_digest_and_records_an_event(
    h: Harness,
) {
    let s = &*h.store;
    for digest in ["sha256:a", "sha256:b"] {
        s.agents().register_agent(SUPPORT, digest, true).await.unwrap();
    }
    let waiting = waiting_under(s, "s", "sha256:a").await;
    let receipt = s.upgrade_session("s", "sha256:b").await.unwrap();
    assert_eq!(receipt.from, pinned("sha256:a"));
    assert_eq!(Some(receipt.to.clone()), pinned("sha256:b"));
    let seq = receipt.event_seq.expect("an event");
    let events = s.read_events("s", seq - 1, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, "agent_upgraded");
    let payload: serde_json::Value = serde_json::from_str(events[0].payload.get()).unwrap();
    assert_eq!(payload, serde_json::json!({"from": "sha256:a", "from_pinned": true, "to": "sha256:b"}));
    assert!(events[0].created_at > 0, "the time it happened");
    assert_eq!(s.session("s").await.unwrap().unwrap().agent, pinned("sha256:b"));
    let again = s.upgrade_session("s", "sha256:b").await.unwrap();
    assert_eq!(again.event_seq, None, "already there: nothing written");
    assert_eq!(s.read_events("s", seq, 10).await.unwrap().len(), 0);
    s.resolve_interrupt(Resolution {
        session_id: "s".into(),
        interrupt_id: "i1".into(),
        client_key: "k".into(),
        resolution: j("true"),
        events: vec![],
        partial_events: Vec::new(),
    })
    .await
    .unwrap();
    let support = |digest: &'static str| scope(&[SUPPORT], &[digest]);
    assert!(
        s.claim_for("w", LONG, &support("sha256:a")).await.unwrap().is_none(),
        "the old bundle no longer runs it"
    );
    let resumed = s.claim_for("w", LONG, &support("sha256:b")).await.unwrap().expect("the new one does");
    assert_eq!(resumed.step.step_id, waiting);
    // An idle session (no step in flight) that names no agent moves, and takes the digest's agent.
    s.create_session(new_session("idle", None, None)).await.unwrap();
    let receipt = s.upgrade_session("idle", "sha256:b").await.unwrap();
    assert_eq!((receipt.from, receipt.event_seq.is_some()), (None, true));
    assert_eq!(s.session("idle").await.unwrap().unwrap().agent_name.as_deref(), Some(SUPPORT));
    s.send_user_message(message("idle", "k1", "hi")).await.unwrap();
    assert!(s.claim_for("w", LONG, &support("sha256:a")).await.unwrap().is_none(), "its new step is pinned");
    assert!(s.claim_for("w", LONG, &support("sha256:b")).await.unwrap().is_some());
}

pub(super) async fn an_upgrade_no_worker_could_serve_is_refused_and_nothing_is_written(h: Harness) {
    let s = &*h.store;
    s.agents().register_agent(SUPPORT, "sha256:a", true).await.unwrap();
    s.agents().register_agent(SUPPORT, "sha256:dev", false).await.unwrap();
    s.agents().register_agent(BILLING, "sha256:b", true).await.unwrap();
    s.agents().register_agent(BILLING, "sha256:shared", true).await.unwrap();
    s.agents().register_agent(SUPPORT, "sha256:shared", true).await.unwrap();
    waiting_under(s, "s", "sha256:a").await;
    s.create_session(new_session("nameless", None, None)).await.unwrap();
    let cases = [
        ("s", "sha256:never", "no Worker of agent `support` has loaded that digest"),
        ("s", "sha256:b", "it is a digest of agent billing, and the session belongs to `support`"),
        ("s", "sha256:dev", "unlocked"),
        ("nameless", "sha256:never", "no Worker of any agent has loaded that digest"),
        ("nameless", "sha256:shared", "several agents loaded that digest"),
    ];
    for (id, to, why) in cases {
        let before = s.session(id).await.unwrap().unwrap();
        let refused = s.upgrade_session(id, to).await;
        assert!(
            matches!(&refused, Err(e @ StoreError::UpgradeRefused { .. }) if e.to_string().contains(why)),
            "{id} -> {to}: {refused:?}"
        );
        let after = s.session(id).await.unwrap().unwrap();
        assert_eq!(
            (after.agent, after.agent_name, after.next_event_seq),
            (before.agent, before.agent_name, before.next_event_seq),
            "nothing written"
        );
    }
    assert!(
        s.claim_for("w", LONG, &scope(&[SUPPORT], &["sha256:a"])).await.unwrap().is_none(),
        "s still waits"
    );
}

pub(super) async fn a_running_session_is_not_upgraded_and_nothing_is_written(h: Harness) {
    let s = &*h.store;
    s.agents().register_agent(SUPPORT, "sha256:b", true).await.unwrap();
    session_of(s, "s", Some(SUPPORT), pinned("sha256:a")).await;
    let support_a = scope(&[SUPPORT], &["sha256:a"]);
    let c = s.claim_for("w", LONG, &support_a).await.unwrap().expect("claimed");
    let busy = s.upgrade_session("s", "sha256:b").await;
    assert!(matches!(busy, Err(StoreError::SessionBusy { .. })), "{busy:?}");
    // Queued again after an attempt ran: also busy (the attempt may have started a side effect).
    s.commit(&c, Commit::finish(Finish::Retry(std::time::Duration::ZERO))).await.unwrap();
    let busy = s.upgrade_session("s", "sha256:b").await;
    assert!(matches!(busy, Err(StoreError::SessionBusy { .. })), "{busy:?}");
    assert_eq!(s.session("s").await.unwrap().unwrap().agent, pinned("sha256:a"));
    assert!(s.read_events("s", 0, 10).await.unwrap().is_empty(), "no event");
    assert!(s.claim_for("w", LONG, &support_a).await.unwrap().is_some(), "still a's");
    let missing = s.upgrade_session("nope", "sha256:b").await;
    assert!(matches!(missing, Err(StoreError::SessionNotFound { .. })), "{missing:?}");
    assert!(matches!(s.upgrade_session("s", "").await, Err(StoreError::Invalid { .. })));
}

pub(super) async fn published_tools_are_read_from_the_newest_registration_and_bad_ones_are_refused(
    h: Harness,
) {
    let registry = h.store.agents();
    assert_eq!(registry.agent_tools(SUPPORT).await.unwrap(), None, "nothing published");
    registry.register_agent(SUPPORT, "sha256:a", false).await.unwrap();
    let unregistered = registry.publish_tools(SUPPORT, "sha256:b", "[]").await;
    assert!(
        matches!(&unregistered, Err(StoreError::Invalid { what }) if what.contains("register it first")),
        "{unregistered:?}"
    );
    for bad in ["{}", "not json", ""] {
        let refused = registry.publish_tools(SUPPORT, "sha256:a", bad).await;
        assert!(matches!(refused, Err(StoreError::Invalid { .. })), "{bad:?}: {refused:?}");
    }
    assert_eq!(registry.agent_tools(SUPPORT).await.unwrap(), None, "nothing was written");
    let first = r#"[{"name":"lookup_order"}]"#;
    registry.publish_tools(SUPPORT, "sha256:a", first).await.unwrap();
    let read = registry.agent_tools(SUPPORT).await.unwrap().unwrap();
    assert_eq!((read.digest.as_str(), read.tools.as_str()), ("sha256:a", first), "the writer's bytes");
    // A later registration of another bundle, with its own tools, is what a client sees.
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    registry.register_agent(SUPPORT, "sha256:b", false).await.unwrap();
    assert_eq!(registry.agent_tools(SUPPORT).await.unwrap().unwrap().digest, "sha256:a", "b has none yet");
    registry.publish_tools(SUPPORT, "sha256:b", "[]").await.unwrap();
    assert_eq!(registry.agent_tools(SUPPORT).await.unwrap().unwrap().digest, "sha256:b");
    assert_eq!(registry.agent_tools(BILLING).await.unwrap(), None);
}

pub(super) async fn unavailable_tools_are_one_report_per_worker_read_while_fresh_and_removed_when_none(
    h: Harness,
) {
    let registry = h.store.agents();
    let fresh = std::time::Duration::from_secs(60);
    assert_eq!(registry.unavailable_tools(fresh).await.unwrap(), [], "nothing reported");
    let broken = |name: &str, last_good: bool| UnavailableComponent {
        component: name.into(),
        reason: format!("{name}.wasm: not a component"),
        serving_last_good: last_good,
    };
    let one = [broken("truncated", false)];
    registry.report_unavailable_tools(SUPPORT, "w-1", "sha256:a", &one).await.unwrap();
    registry.report_unavailable_tools(BILLING, "w-2", "sha256:b", &[broken("ledger", true)]).await.unwrap();
    let read = registry.unavailable_tools(fresh).await.unwrap();
    let rows: Vec<(&str, &str, &str)> =
        read.iter().map(|r| (r.agent.as_str(), r.worker.as_str(), r.digest.as_str())).collect();
    assert_eq!(rows, [(BILLING, "w-2", "sha256:b"), (SUPPORT, "w-1", "sha256:a")], "by agent");
    assert_eq!(read[1].components, one, "read back as written");
    assert!(read[0].components[0].serving_last_good);
    let first = read[1].clone();
    assert_eq!(first.changed_at, first.reported_at);

    // The same list again moves only reported_at; a longer one moves changed_at too.
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    registry.report_unavailable_tools(SUPPORT, "w-1", "sha256:a", &one).await.unwrap();
    let again = registry.unavailable_tools(fresh).await.unwrap().pop().unwrap();
    assert_eq!(again.changed_at, first.changed_at, "unchanged");
    assert!(again.reported_at > first.reported_at, "{again:?} after {first:?}");
    let two = [broken("trapping", false), broken("truncated", false)];
    registry.report_unavailable_tools(SUPPORT, "w-1", "sha256:a", &two).await.unwrap();
    let changed = registry.unavailable_tools(fresh).await.unwrap().pop().unwrap();
    assert!(changed.changed_at > first.changed_at);
    assert_eq!(changed.components, two);
    // Another Worker of the same agent has its own report.
    registry.report_unavailable_tools(SUPPORT, "w-3", "sha256:a", &one).await.unwrap();
    assert_eq!(registry.unavailable_tools(fresh).await.unwrap().len(), 3);

    // None removes the Worker's report, and only its own.
    registry.report_unavailable_tools(SUPPORT, "w-1", "sha256:a", &[]).await.unwrap();
    let left: Vec<String> =
        registry.unavailable_tools(fresh).await.unwrap().into_iter().map(|r| r.worker).collect();
    assert_eq!(left, ["w-2", "w-3"]);

    // A report older than the bound is a Worker gone without a word: not read.
    h.exec("UPDATE tools_unavailable SET reported_at = reported_at - 120000 WHERE worker = 'w-2'").await;
    let left: Vec<String> =
        registry.unavailable_tools(fresh).await.unwrap().into_iter().map(|r| r.worker).collect();
    assert_eq!(left, ["w-3"]);

    // Long after, the next report of any Worker removes it.
    h.exec("UPDATE tools_unavailable SET reported_at = reported_at - 90000000 WHERE worker = 'w-2'").await;
    registry.report_unavailable_tools(SUPPORT, "w-3", "sha256:a", &one).await.unwrap();
    assert_eq!(h.count("SELECT count(*) FROM tools_unavailable").await, 1, "w-3's only");

    // Bad input is refused, naming what was wrong; nothing is written.
    let long = "w".repeat(MAX_WORKER_ID + 1);
    for (name, worker, digest) in [
        ("", "w-4", "sha256:a"),
        (SUPPORT, "", "sha256:a"),
        (SUPPORT, &long, "sha256:a"),
        (SUPPORT, "w-4", ""),
    ] {
        let refused = registry.report_unavailable_tools(name, worker, digest, &one).await;
        assert!(
            matches!(refused, Err(StoreError::Invalid { .. })),
            "{name:?} {worker:?} {digest:?}: {refused:?}"
        );
    }
    assert_eq!(registry.unavailable_tools(fresh).await.unwrap().len(), 1);

    // A damaged row is refused with a clear error.
    h.exec("UPDATE tools_unavailable SET components = 'not json'").await;
    let corrupt = registry.unavailable_tools(fresh).await;
    assert!(
        matches!(&corrupt, Err(StoreError::Corrupt { table: "tools_unavailable", key, .. }) if key == "support/w-3"),
        "{corrupt:?}"
    );
}
