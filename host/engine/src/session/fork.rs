//! Forking a session at a turn: where turn N of the original ends in its item log, the run state
//! the fork starts from, and which turns cannot be forked at ([`plan`]).
//!
//! A fork's history is the original's items up to the **end of turn N**: the last item whose
//! `turn_id` is `turn-N` (the turn's last transcript entry; its segments commit their entries
//! together, so that is also where the turn's transcript chunks end). The fork starts idle, with
//! the turns through N ended, the CLI session of turn N to resume, no spend, no turn in progress
//! and no calls, grants or interrupts of its own: the next message starts its turn N + 1, which
//! resumes the inherited transcript like any later turn.
//!
//! Refused ([`ForkRefusal`]): turn 0 or a turn that never started (no such turn), the turn in
//! progress (still running, or waiting for approval), a turn with a call not final yet (open
//! tasks), and a turn that stored no transcript entry (it failed or was cancelled before it
//! answered anything: nothing marks where it ended).
//!
//! A **dry** fork runs no write: the Worker asks [`dry_answer`] instead of the sandbox for every
//! custom tool call that would run with an idempotency key (a deferred call's tool step, a
//! recorded inline write). The answer is the original's record of the same tool with the same
//! input (key order and whitespace aside), the latest one that has an outcome, or a refusal; a
//! refusal is recorded `failed` and the model reads why. Reads run as in any session; CLI tools
//! run in the fork's own (empty) workspace.
//!
//! # Caveats
//!
//! - Messages sent while turn N ran are items before its end, so they are in the fork's history.
//!   Those sent after turn N's first segment stored its entries are known to be unanswered by it
//!   and go to the fork's next turn with its new message; one sent during that first segment
//!   cannot be told from turn N's own prompts and counts as answered.
//! - A turn that failed after storing entries forks like one that completed: its entries are the
//!   history, and the fork's next turn does not answer its prompts again.

use serde_json::Value;

use super::tools::ToolRun;
use super::turn::TranscriptBody;
use super::{CallEntry, CallState, ItemKind, RunState};
use crate::gate::canonical::same_input;
use crate::record::Outcome;

/// An item of the original, as [`plan`] reads it.
#[derive(Clone, Copy, Debug)]
pub struct ForkItem<'a> {
    /// Its seq.
    pub seq: i64,
    /// Its kind (`None`: unknown to this build).
    pub kind: Option<ItemKind>,
    /// The turn that stored it (transcript entries), if any.
    pub turn_id: Option<&'a str>,
    /// Its JSON.
    pub body: &'a str,
}

/// Where the original is now, as [`plan`] reads it.
#[derive(Clone, Copy, Debug)]
pub struct Original<'a> {
    /// Its run state.
    pub state: &'a RunState,
    /// It has a step in flight (queued, claimed or waiting).
    pub busy: bool,
    /// Its status is `awaiting_approval`.
    pub awaiting_approval: bool,
    /// Its deferred calls.
    pub calls: &'a [CallEntry],
}

/// What a fork at turn N starts from.
#[derive(Clone, Debug)]
pub struct ForkPlan {
    /// The original's last item the fork inherits: the end of turn N.
    pub through_item_seq: i64,
    /// The fork's run state.
    pub run_state: RunState,
}

/// Why a turn cannot be forked at.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ForkRefusal {
    /// Turn 0, or one that never started.
    #[error("session has no turn {turn}: its turns are 1 to {last}")]
    NoSuchTurn {
        /// The turn asked for.
        turn: i64,
        /// The last turn that started (0: none).
        last: u64,
    },
    /// The turn is still running.
    #[error("turn {turn} is still running: fork at a turn that ended (1 to {ended})")]
    StillRunning {
        /// The turn asked for.
        turn: i64,
        /// Turns that ended.
        ended: u64,
    },
    /// The turn waits for an approval.
    #[error(
        "turn {turn} is waiting for approval: fork at a turn before it (1 to {ended}), or decide it first"
    )]
    Waiting {
        /// The turn asked for.
        turn: i64,
        /// Turns that ended.
        ended: u64,
    },
    /// A call of the turn is not final.
    #[error("turn {turn} has open tasks: its call {tool_call_id} is {status}")]
    OpenTasks {
        /// The turn asked for.
        turn: i64,
        /// The call.
        tool_call_id: String,
        /// Its state.
        status: &'static str,
    },
    /// The turn stored no transcript entry.
    #[error(
        "turn {turn} stored no answer (it failed or was cancelled before one): nothing marks where it ended"
    )]
    NoTranscript {
        /// The turn asked for.
        turn: i64,
    },
}

/// Where turn `turn` of `original` ends in `items` (all of its items, in order) and the run
/// state a fork there starts from.
///
/// # Errors
/// The turn cannot be forked at ([`ForkRefusal`]).
pub fn plan(original: Original<'_>, items: &[ForkItem<'_>], turn: i64) -> Result<ForkPlan, ForkRefusal> {
    let state = original.state;
    let ended = state.turns_ended;
    let in_progress = state.turn.is_some() || original.busy;
    let last = if in_progress { ended + 1 } else { ended };
    let asked = u64::try_from(turn).unwrap_or(0);
    if asked == 0 || asked > last {
        return Err(ForkRefusal::NoSuchTurn { turn, last });
    }
    if asked > ended {
        return Err(if original.awaiting_approval {
            ForkRefusal::Waiting { turn, ended }
        } else {
            ForkRefusal::StillRunning { turn, ended }
        });
    }
    let turn_id = format!("turn-{turn}");
    let open = original.calls.iter().filter(|call| call.turn_id == turn_id).find(|call| {
        matches!(call.state, CallState::PendingApproval | CallState::Queued | CallState::Started { .. })
    });
    if let Some(call) = open {
        return Err(ForkRefusal::OpenTasks {
            turn,
            tool_call_id: call.tool_call_id.clone(),
            status: call.state.name(),
        });
    }
    let tid = turn_id.as_str();
    let of_turn = || items.iter().filter(move |item| item.turn_id == Some(tid));
    let (Some(first), Some(end)) = (of_turn().next(), of_turn().next_back()) else {
        return Err(ForkRefusal::NoTranscript { turn });
    };
    let cli_session = of_turn()
        .filter(|item| item.kind == Some(ItemKind::ClaudeTranscript))
        .rev()
        .find_map(|item| TranscriptBody::parse(item.body).ok().map(|body| body.session_id));
    let prompts_through = items
        .iter()
        .filter(|item| super::turn::is_prompt(item.kind) && item.seq < first.seq)
        .map(|item| item.seq)
        .max()
        .unwrap_or(0);
    let run_state = RunState {
        session_id: cli_session.or_else(|| state.session_id.clone()),
        turns_ended: asked,
        prompts_through,
        ..RunState::default()
    };
    Ok(ForkPlan { through_item_seq: end.seq, run_state })
}

/// What a dry fork's write call `tool_name(arguments)` gets instead of running: the latest of
/// `original`'s calls (its deferred calls and recorded writes, in the order first written) of
/// the same tool with the same input that has an outcome, answered as it was (a rejection or an
/// unknown outcome is refused, saying so); none is refused.
pub fn dry_answer(tool_name: &str, arguments: &Value, original: &[CallEntry]) -> ToolRun {
    let recorded = original
        .iter()
        .rev()
        .filter(|call| call.tool_name == tool_name && same_input(&call.arguments, arguments))
        .find_map(|call| call.state.outcome().map(|outcome| (call, outcome)));
    let refused = |why: String| ToolRun::Refused {
        message: format!(
            "This is a dry fork: `{tool_name}` is not run here, and {why}. Do not call it again with \
             this input."
        ),
    };
    match recorded {
        Some((call, Outcome::Succeeded { output })) => {
            ToolRun::Output { text: output, is_error: false, images: call.images.clone() }
        }
        Some((_, Outcome::Failed { error })) => ToolRun::Failed { message: error },
        Some((_, Outcome::Rejected { message })) => refused(format!(
            "the original session's reviewer rejected the same call{}",
            message.map(|m| format!(": {m}")).unwrap_or_default()
        )),
        Some((_, Outcome::OutcomeUnknown)) => {
            refused("the original session does not know how the same call ended".to_owned())
        }
        None => {
            refused("the original session holds no record of the same call with the same input".to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ToolKind;
    use crate::session::TurnState;

    fn transcript(session: &str) -> String {
        format!(r#"{{"kind":"claude_transcript","session_id":"{session}","entries":[{{}}]}}"#)
    }

    /// Turn 1: prompt 1, entries 2–3 (CLI session `c1`); a message sent during turn 2 (5)
    /// between its entries 4 and 6; turn 2's entries in CLI session `c2`; prompt 7 unanswered.
    fn log(bodies: &[String]) -> Vec<ForkItem<'_>> {
        let prompt = r#"{"kind":"user_prompt","text":"hi"}"#;
        let t = |seq, turn, body: &'static str| ForkItem {
            seq,
            kind: Some(ItemKind::ClaudeTranscript),
            turn_id: Some(turn),
            body,
        };
        let p = |seq| ForkItem { seq, kind: Some(ItemKind::UserPrompt), turn_id: None, body: prompt };
        let c1: &'static str = Box::leak(bodies[0].clone().into_boxed_str());
        let c2: &'static str = Box::leak(bodies[1].clone().into_boxed_str());
        vec![
            p(1),
            t(2, "turn-1", c1),
            t(3, "turn-1", c1),
            p(4),
            p(5),
            t(6, "turn-2", c2),
            t(8, "turn-2", c2),
            p(9),
        ]
    }

    fn ended(n: u64) -> RunState {
        RunState {
            turns_ended: n,
            prompts_through: 4,
            session_id: Some("c2".into()),
            cost_usd: 2.5,
            ..RunState::default()
        }
    }

    fn original<'a>(state: &'a RunState, calls: &'a [CallEntry]) -> Original<'a> {
        Original { state, busy: false, awaiting_approval: false, calls }
    }

    #[test]
    fn a_fork_at_an_ended_turn_inherits_through_its_last_entry_and_starts_idle_with_no_spend() {
        let bodies = [transcript("c1"), transcript("c2")];
        let items = log(&bodies);
        let state = ended(2);
        let first = plan(original(&state, &[]), &items, 1).unwrap();
        assert_eq!(first.through_item_seq, 3);
        let s = &first.run_state;
        assert_eq!((s.turns_ended, s.prompts_through, s.session_id.as_deref()), (1, 1, Some("c1")));
        assert_eq!((s.cost_usd, s.turn.is_none(), s.last_turn_error.is_none()), (0.0, true, true));
        assert_eq!(s.next_turn_id(), "turn-2", "the fork's next turn");
        let second = plan(original(&state, &[]), &items, 2).unwrap();
        assert_eq!(second.through_item_seq, 8, "the message sent during turn 2 is history");
        // Prompts 4 and 5 came before turn 2's first entry: both count as answered by it.
        assert_eq!(second.run_state.prompts_through, 5);
        assert_eq!(second.run_state.session_id.as_deref(), Some("c2"));
    }

    #[test]
    fn a_message_sent_after_the_turns_first_entries_goes_to_the_forks_next_turn() {
        let bodies = [transcript("c1"), transcript("c2")];
        let mut items = log(&bodies);
        // A message stored between turn 1's two entry commits.
        items.insert(2, ForkItem { seq: 2, kind: Some(ItemKind::UserPrompt), turn_id: None, body: "{}" });
        let seqs = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        for (item, seq) in items.iter_mut().zip(seqs) {
            item.seq = seq;
        }
        let state = ended(2);
        let fork = plan(original(&state, &[]), &items, 1).unwrap();
        assert_eq!((fork.through_item_seq, fork.run_state.prompts_through), (4, 1));
    }

    #[test]
    fn the_turn_in_progress_and_turns_that_never_were_are_refused() {
        let bodies = [transcript("c1"), transcript("c2")];
        let items = log(&bodies);
        let state = ended(2);
        assert_eq!(
            plan(original(&state, &[]), &items, 3).unwrap_err(),
            ForkRefusal::NoSuchTurn { turn: 3, last: 2 }
        );
        assert!(matches!(plan(original(&state, &[]), &items, 0), Err(ForkRefusal::NoSuchTurn { .. })));
        let running = RunState {
            turn: Some(TurnState {
                turn_id: "turn-3".into(),
                prompts_upto: 9,
                ahead: Vec::new(),
                trace: None,
            }),
            ..ended(2)
        };
        let busy = Original { busy: true, ..original(&running, &[]) };
        assert_eq!(plan(busy, &items, 3).unwrap_err(), ForkRefusal::StillRunning { turn: 3, ended: 2 });
        let waiting = Original { awaiting_approval: true, ..busy };
        assert_eq!(plan(waiting, &items, 3).unwrap_err(), ForkRefusal::Waiting { turn: 3, ended: 2 });
        assert!(plan(waiting, &items, 2).is_ok(), "a turn before the waiting one forks");
        assert_eq!(plan(waiting, &items, 4).unwrap_err(), ForkRefusal::NoSuchTurn { turn: 4, last: 3 });
        // A first turn queued, not planned yet: still running.
        let queued = Original { busy: true, ..original(&state, &[]) };
        assert!(matches!(plan(queued, &items, 3), Err(ForkRefusal::StillRunning { .. })));
    }

    #[test]
    fn a_dry_fork_answers_a_write_from_the_originals_record_of_the_same_input_or_refuses_it() {
        let refund = |id: &str, input: serde_json::Value, state: CallState| {
            CallEntry::new(id, "create_refund", ToolKind::Custom, input, "turn-1", state)
        };
        let records = [
            refund(
                "t1",
                serde_json::json!({"order": 7, "amount": 5}),
                CallState::Failed { error: "down".into() },
            ),
            refund(
                "t2",
                serde_json::json!({"amount": 5, "order": 7}),
                CallState::Succeeded { output: "r_1".into() },
            ),
            refund("t3", serde_json::json!({"order": 8}), CallState::Rejected { message: Some("no".into()) }),
            refund("t4", serde_json::json!({"order": 9}), CallState::Queued),
        ];
        let same = serde_json::json!({ "order": 7, "amount": 5 });
        assert!(matches!(
            dry_answer("create_refund", &same, &records),
            ToolRun::Output { ref text, is_error: false, .. } if text == "r_1"
        ));
        let ToolRun::Refused { message } =
            dry_answer("create_refund", &serde_json::json!({"order": 8}), &records)
        else {
            panic!("a rejected call is refused")
        };
        assert!(
            message.contains("dry fork") && message.contains("rejected") && message.contains("no"),
            "{message}"
        );
        for (tool, input) in [
            ("create_refund", serde_json::json!({"order": 9})),
            ("create_refund", serde_json::json!({"order": 1})),
            ("other", same.clone()),
        ] {
            let ToolRun::Refused { message } = dry_answer(tool, &input, &records) else {
                panic!("{tool} {input}")
            };
            assert!(message.contains("no record"), "{message}");
        }
    }

    #[test]
    fn a_turn_with_a_call_not_final_or_with_no_entries_is_refused() {
        let bodies = [transcript("c1"), transcript("c2")];
        let items = log(&bodies);
        let state = ended(2);
        let call = CallEntry::new(
            "t1",
            "refund",
            ToolKind::Custom,
            serde_json::json!({}),
            "turn-2",
            CallState::Queued,
        );
        let calls = [call];
        assert!(matches!(
            plan(original(&state, &calls), &items, 2),
            Err(ForkRefusal::OpenTasks { turn: 2, status: "queued", .. })
        ));
        assert!(plan(original(&state, &calls), &items, 1).is_ok());
        let no_entries: Vec<ForkItem<'_>> =
            items.iter().copied().filter(|i| i.turn_id != Some("turn-1")).collect();
        assert_eq!(
            plan(original(&state, &[]), &no_entries, 1).unwrap_err(),
            ForkRefusal::NoTranscript { turn: 1 }
        );
    }
}
