//! The conformance cases of [`tollgate_store::Store::fork_session`]: a fork reads its parent's
//! history up to the cut through its lineage (items, uuids, messages, transcript chunks, media),
//! writes only its own rows after it, inserts rows by the depth of its lineage and not by the
//! length of its history, and keeps the sessions it reads from from being deleted.

use std::time::Duration;

use super::{Harness, chunk, done, entry, j, message, new_session, part};
use tollgate_store::media::{NewMedia, digest_of};
use tollgate_store::*;

/// One "turn" of `session`: a user message under `key`, then its step claimed and committed done
/// with transcript entries `uuids` (each with a line of the chunk and an assistant message).
async fn turn(store: &dyn Store, session: &str, key: &str, uuids: &[&str]) {
    store.send_user_message(message(session, key, key)).await.expect("send_user_message");
    let claimed = store.claim("w1", Duration::from_secs(60)).await.expect("claim").expect("a due step");
    assert_eq!(claimed.step.session_id, session);
    let mut commit = done();
    commit.items = uuids.iter().map(|u| entry(u, &format!("{{\"uuid\":\"{u}\"}}"))).collect();
    commit.messages =
        uuids.iter().enumerate().map(|(i, u)| part(i, "assistant", Some(*u), &format!("said {u}"))).collect();
    let lines: Vec<(usize, String)> =
        uuids.iter().enumerate().map(|(i, u)| (i, format!("{{\"uuid\":\"{u}\"}}\n"))).collect();
    let lines: Vec<(usize, &str)> = lines.iter().map(|(i, l)| (*i, l.as_str())).collect();
    commit.transcript = chunk(&format!("cli-{session}"), &lines);
    store.commit(&claimed, commit).await.expect("commit");
}

/// A fork of `parent` at `turn`, inheriting its items through `cut`, by `alice`.
fn fork(id: &str, parent: &str, turn: i64, cut: i64) -> NewFork {
    NewFork {
        session_id: id.into(),
        parent_id: parent.into(),
        turn,
        through_item_seq: cut,
        run_state: j(r#"{"version":1,"turns_ended":1}"#),
        agent: None,
        agent_name: None,
        forked_by: "alice".into(),
        dry: false,
    }
}

/// The seqs and uuids (or kinds) of a session's items, as read through its lineage.
async fn items_of(store: &dyn Store, session: &str) -> Vec<(i64, String)> {
    let items = store.read_items(session, 0, 1000).await.expect("read_items");
    items.into_iter().map(|i| (i.seq, i.uuid.unwrap_or(i.kind))).collect()
}

fn pairs(list: &[(i64, &str)]) -> Vec<(i64, String)> {
    list.iter().map(|(seq, name)| (*seq, (*name).to_owned())).collect()
}

pub(super) async fn a_fork_reads_its_parents_history_up_to_the_cut_and_writes_its_own_after_it(h: Harness) {
    let s = &*h.store;
    new_session(s, "p").await;
    // Turn 1: items 1 (prompt), 2, 3; turn 2: items 4 (prompt), 5.
    turn(s, "p", "one", &["u1", "u2"]).await;
    let image = NewMedia { media_type: "image/png".into(), data: vec![0x89, b'P', 0xff] };
    s.media().put_media("p", std::slice::from_ref(&image)).await.unwrap();
    turn(s, "p", "two", &["u3"]).await;
    let parent_before = s.session("p").await.unwrap().unwrap();

    let lineage = s.fork_session(fork("f", "p", 1, 3)).await.expect("fork");
    assert_eq!(
        (lineage.parent_id.as_str(), lineage.turn, lineage.through_item_seq, lineage.through_message_seq),
        ("p", 1, 3, 2),
        "{lineage:?}"
    );
    assert!(!lineage.dry);
    assert_eq!(s.lineage("f").await.unwrap(), Some(lineage.clone()));
    assert_eq!(s.lineage("p").await.unwrap(), None, "the parent is no fork");
    let f = s.session("f").await.unwrap().expect("the fork exists");
    assert_eq!((f.status.as_str(), f.next_item_seq, f.usage), ("idle", 4, Usage::default()));
    assert_eq!(f.run_state.get(), r#"{"version":1,"turns_ended":1}"#);
    assert_eq!(s.audit().started_by("f").await.unwrap().as_deref(), Some("alice"), "the forker started it");
    let trail = s
        .audit()
        .audit_entries(&AuditQuery { session_id: Some("f".into()), ..AuditQuery::default() })
        .await
        .unwrap();
    assert_eq!(trail.len(), 1, "one audit row: {trail:?}");
    assert_eq!((trail[0].decision, trail[0].interrupt_id.as_str()), (AuditDecision::Forked, "turn-1"));
    assert_eq!(trail[0].principal, "alice");
    assert!(trail[0].reason.as_deref().unwrap_or_default().contains("session p"), "{trail:?}");

    // Its history is the parent's up to the cut, read through, not copied.
    assert_eq!(items_of(s, "f").await, pairs(&[(1, "user_prompt"), (2, "u1"), (3, "u2")]));
    assert_eq!(h.count("SELECT count(*) FROM items WHERE session_id = 'f'").await, 0, "nothing copied");
    let kinds = s.read_items_of_kind("f", "transcript_entry", 0, 10).await.unwrap();
    assert_eq!(kinds.iter().map(|i| i.seq).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(s.read_items("f", 2, 1).await.unwrap()[0].seq, 3, "paged after a seq");
    let messages = s.read_messages("f", None, 100).await.unwrap();
    assert!(messages.projected);
    let texts: Vec<&str> = messages.messages.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["said u1", "said u2"]);
    let transcript = s.read_transcript("f").await.unwrap();
    assert!(transcript.chunked);
    assert_eq!(transcript.chunks, ["{\"uuid\":\"u1\"}\n{\"uuid\":\"u2\"}\n"]);
    assert_eq!(transcript.cli_session_id.as_deref(), Some("cli-p"));
    let media = s.media().media("f", &digest_of(&image.data)).await.unwrap().expect("inherited image");
    assert_eq!(media.data, image.data);

    // Its own turn: seqs go on after the cut; an inherited uuid is a repeat, a uuid the parent
    // stored after the cut is not (the fork never saw it).
    turn(s, "f", "again", &["u1", "u3", "v1"]).await;
    assert_eq!(
        items_of(s, "f").await,
        pairs(&[(1, "user_prompt"), (2, "u1"), (3, "u2"), (4, "user_prompt"), (5, "u3"), (6, "v1")])
    );
    let texts: Vec<(i64, String)> = s
        .read_messages("f", None, 100)
        .await
        .unwrap()
        .messages
        .into_iter()
        .map(|m| (m.seq, m.text))
        .collect();
    assert_eq!(
        texts,
        [(1, "said u1".into()), (2, "said u2".into()), (3, "said u3".into()), (4, "said v1".into())],
        "its messages go on after the inherited ones"
    );
    assert_eq!(s.read_transcript("f").await.unwrap().chunks.len(), 2);
    // A conditional step sees inherited items after its seq too.
    assert_eq!(s.read_items_of_kind("f", "user_prompt", 0, 10).await.unwrap().len(), 2);

    // The parent is untouched.
    let parent = s.session("p").await.unwrap().unwrap();
    assert_eq!(
        (parent.next_item_seq, parent.next_event_seq, parent.updated_at),
        (parent_before.next_item_seq, parent_before.next_event_seq, parent_before.updated_at)
    );
    assert_eq!(items_of(s, "p").await.len(), 5);
    assert_eq!(s.read_messages("p", None, 100).await.unwrap().messages.len(), 3);
}

pub(super) async fn a_fork_of_a_fork_reads_through_both_and_inserts_rows_by_depth_not_by_length(h: Harness) {
    let s = &*h.store;
    new_session(s, "p").await;
    turn(s, "p", "one", &["a1", "a2"]).await; // 1..3
    turn(s, "p", "two", &["a3"]).await; // 4..5
    s.fork_session(fork("f1", "p", 1, 3)).await.unwrap();
    turn(s, "f1", "mine", &["b1"]).await; // f1: 4..5
    // A fork of the fork, after the fork's own turn: the grandparent's rows, then the parent's.
    s.fork_session(fork("f2", "f1", 2, 5)).await.unwrap();
    assert_eq!(
        items_of(s, "f2").await,
        pairs(&[(1, "user_prompt"), (2, "a1"), (3, "a2"), (4, "user_prompt"), (5, "b1")])
    );
    let texts: Vec<String> =
        s.read_messages("f2", None, 100).await.unwrap().messages.into_iter().map(|m| m.text).collect();
    assert_eq!(texts, ["said a1", "said a2", "said b1"]);
    assert_eq!(s.read_transcript("f2").await.unwrap().chunks.len(), 2);
    // A fork of the fork before its own rows: only the grandparent's.
    s.fork_session(fork("f3", "f1", 1, 2)).await.unwrap();
    assert_eq!(items_of(s, "f3").await, pairs(&[(1, "user_prompt"), (2, "a1")]));
    turn(s, "f2", "deeper", &["c1"]).await;
    assert_eq!(items_of(s, "f2").await.len(), 7);
    assert_eq!(items_of(s, "f1").await.len(), 5, "a fork's fork leaves the fork as it was");
    // One range per session read from: no chain walked.
    let ranges = (
        h.count("SELECT count(*) FROM fork_history WHERE session_id = 'f1'").await,
        h.count("SELECT count(*) FROM fork_history WHERE session_id = 'f2'").await,
        h.count("SELECT count(*) FROM fork_history WHERE session_id = 'f3'").await,
    );
    assert_eq!(ranges, (1, 2, 1));

    // The rows a fork inserts do not grow with the history it inherits.
    new_session(s, "short").await;
    turn(s, "short", "s", &["s1"]).await;
    new_session(s, "long").await;
    let uuids: Vec<String> = (0..300).map(|i| format!("l{i}")).collect();
    let uuids: Vec<&str> = uuids.iter().map(String::as_str).collect();
    turn(s, "long", "l", &uuids).await;
    let rows = || async {
        h.count(
            "SELECT (SELECT count(*) FROM sessions) + (SELECT count(*) FROM forks)
                 + (SELECT count(*) FROM fork_history) + (SELECT count(*) FROM audit)
                 + (SELECT count(*) FROM items) + (SELECT count(*) FROM messages)
                 + (SELECT count(*) FROM transcript_chunks) + (SELECT count(*) FROM media)",
        )
        .await
    };
    let before = rows().await;
    s.fork_session(fork("fs", "short", 1, 2)).await.unwrap();
    let short = rows().await - before;
    let before = rows().await;
    s.fork_session(fork("fl", "long", 1, 301)).await.unwrap();
    let long = rows().await - before;
    assert_eq!((short, long), (4, 4), "a session, its fork row, one range and one audit row each");
    assert_eq!(items_of(s, "fl").await.len(), 301);
}

pub(super) async fn a_session_a_fork_reads_from_cannot_be_deleted_and_the_fork_can(h: Harness) {
    let s = &*h.store;
    new_session(s, "p").await;
    turn(s, "p", "one", &["a1"]).await;
    s.fork_session(fork("f", "p", 1, 2)).await.unwrap();
    let refused = h.try_exec("DELETE FROM sessions WHERE session_id = 'p'").await;
    assert!(refused.is_err(), "the parent of a fork was deleted");
    assert_eq!(items_of(s, "f").await.len(), 2, "the fork's history is intact");
    // A fork is deleted with its lineage rows; then nothing reads from the parent any more.
    h.try_exec("DELETE FROM sessions WHERE session_id = 'f'").await.expect("a fork is deleted");
    assert_eq!(h.count("SELECT count(*) FROM forks").await, 0);
    assert_eq!(h.count("SELECT count(*) FROM fork_history").await, 0);
    h.try_exec("DELETE FROM sessions WHERE session_id = 'p'")
        .await
        .expect("the parent, once nobody reads it");
}

pub(super) async fn a_fork_the_store_refuses_writes_nothing(h: Harness) {
    let s = &*h.store;
    new_session(s, "p").await;
    turn(s, "p", "one", &["a1"]).await;
    new_session(s, "taken").await;
    let rows = || async {
        h.count(
            "SELECT (SELECT count(*) FROM sessions) + (SELECT count(*) FROM forks)
                 + (SELECT count(*) FROM fork_history) + (SELECT count(*) FROM audit)",
        )
        .await
    };
    let before = rows().await;
    let missing = s.fork_session(fork("f", "nobody", 1, 0)).await.unwrap_err();
    assert!(matches!(missing, StoreError::SessionNotFound { .. }), "{missing}");
    let beyond = s.fork_session(fork("f", "p", 1, 3)).await.unwrap_err();
    assert!(matches!(beyond, StoreError::Invalid { .. }), "{beyond}");
    let exists = s.fork_session(fork("taken", "p", 1, 2)).await.unwrap_err();
    assert!(matches!(exists, StoreError::SessionExists { .. }), "{exists}");
    let no_turn = s.fork_session(fork("f", "p", 0, 2)).await.unwrap_err();
    assert!(matches!(no_turn, StoreError::Invalid { .. }), "{no_turn}");
    let nobody =
        s.fork_session(NewFork { forked_by: String::new(), ..fork("f", "p", 1, 2) }).await.unwrap_err();
    assert!(matches!(nobody, StoreError::Invalid { .. }), "{nobody}");
    let bad_state = s.fork_session(NewFork { run_state: j("{}"), ..fork("f", "p", 1, 2) }).await.unwrap_err();
    assert!(matches!(bad_state, StoreError::Invalid { .. }), "{bad_state}");
    assert_eq!(rows().await, before, "a refused fork writes nothing");
    assert!(s.session("f").await.unwrap().is_none());
    // A dry fork keeps its mark.
    let dry = s.fork_session(NewFork { dry: true, ..fork("f", "p", 1, 2) }).await.unwrap();
    assert!(dry.dry && s.lineage("f").await.unwrap().unwrap().dry);
}
