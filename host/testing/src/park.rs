//! Parks a session on "waiting for approval of `create_refund`" through the state machine's own
//! transitions (as a segment that deferred the call would), without a CLI: what the scale tests
//! and the approvals bench seed by the thousand. Both run this code.

use std::time::Duration;

use serde_json::json;
use tollgate_engine::catalog::ToolKind;
use tollgate_engine::gate::DeferredCall;
use tollgate_engine::policy::{DeferredRun, Effect, Handling, ToolPolicy};
use tollgate_engine::session::turn::{Claims, Plan, SegmentResult, on_segment, plan_run_model};
use tollgate_engine::session::{CallEntry, Limits, RunState, StepInput, Usage};
use tollgate_sessions::{reads, writes};
use tollgate_store::Store;

/// Starts `session` with a refund request and commits its first segment as deferred on
/// `create_refund` (tool use `toolu_<session>`), leaving one open interrupt and one waiting step.
/// The store must have no other claimable step.
pub async fn park_on_approval(store: &dyn Store, session: &str) {
    writes::start(store, session).await.expect("start");
    park_started(store, session, json!({"order_id": "7", "amount_cents": 500})).await;
}

/// As [`park_on_approval`] for a session that exists already (created any way, e.g. straight on
/// the store with an id the API would refuse), deferring `create_refund` with `arguments`.
/// The store must have no other claimable step.
pub async fn park_started(store: &dyn Store, session: &str, arguments: serde_json::Value) {
    writes::send(store, session, "Refund order 7", None).await.expect("send");
    let claimed =
        store.claim("seeder", Duration::from_secs(60)).await.expect("claim").expect("the wake step");
    let StepInput::RunModel(step) = StepInput::parse(&claimed.step.kind, claimed.step.payload.get()).unwrap()
    else {
        panic!("expected RunModel");
    };
    let row = store.session(session).await.unwrap().unwrap();
    let state = RunState::parse(row.run_state.get()).unwrap();
    let (items, transcript) = reads::plan_inputs(store, session).await.unwrap();
    let Plan::Run(run) = plan_run_model(
        &step,
        Claims::nth(1),
        &state,
        &reads::history(&items),
        transcript,
        &[],
        &Limits::default(),
    )
    .unwrap() else {
        panic!("expected a segment");
    };
    let call = DeferredCall {
        tool_use_id: format!("toolu_{session}"),
        tool_name: "create_refund".into(),
        kind: ToolKind::Custom,
        arguments,
        policy: ToolPolicy { effect: Effect::NonIdempotentWrite, requires_approval: true },
        handling: Handling::Deferred { requires_approval: true, runs_in: DeferredRun::CallSingleAttemptTool },
        held_back: Vec::new(),
    };
    let entry =
        serde_json::value::RawValue::from_string(format!(r#"{{"type":"user","uuid":"u-{session}"}}"#))
            .unwrap();
    let deferred = SegmentResult::Deferred {
        session_id: format!("cli-{session}"),
        call,
        entries: vec![entry],
        usage: Usage::default(),
        cost_usd: None,
    };
    let transition = on_segment(&run, &state, &[] as &[CallEntry], deferred);
    store
        .commit(&claimed, tollgate_sessions::convert::commit(transition))
        .await
        .expect("commit the deferral");
}
