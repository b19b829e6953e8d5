//! Fires approval deadlines: every Worker runs [`run`] beside its claim loop. It asks the store
//! which open interrupts are due ([`tollgate_store::Deadlines`], database clock), lets the engine
//! say what each deadline does ([`tollgate_engine::deadline::on_deadline`]: expire or escalate,
//! from the deadline stamped into the stored request), commits that in one transaction, and
//! sleeps until the next deadline the store reports (at most [`MAX_NAP`]), so a deadline fires
//! within about a second of its time, after any restart, with no timer in memory to lose.
//!
//! Several Workers (PostgreSQL) fire the same deadline at most once: the store checks, under the
//! session's lock, that the interrupt is still open and the deadline is the one seen; the loser
//! gets `InterruptAlreadyResolved` or `DeadlineNotDue` (or a replay: every firer of one deadline
//! uses the same client key, `deadline:<deadline_at>`), which is the normal end of a lost race.
//! A deadline of a turn a client is cancelling (`CancelPending`) does not fire either: the
//! cancel closes the interrupt.
//!
//! What is written:
//! - **Expiry**: the interrupt is resolved as a rejection whose message is
//!   [`tollgate_engine::texts::approval_expired`] (the model reads it on the rejection path,
//!   "The user rejected this call: …"), its `interrupt_resolved` and `decision_recorded` events,
//!   and an audit row `expired` by [`DEADLINE_PRINCIPAL`]; the waiting step runs the rejection.
//! - **Escalation**: the request's `approvers` become the policy's `escalate_to` (so the API's
//!   check of who may decide reads the new groups), `escalated_from` keeps the old ones, the
//!   second deadline is set, an `interrupt_escalated` event (`{interrupt_id, tool_name,
//!   escalate_to, escalated_from, deadline_at, escalated_by}`; the `interrupt.escalated` webhook)
//!   and an audit row `escalated` by [`DEADLINE_PRINCIPAL`].

use std::time::Duration;

use tollgate_engine::approval::ApprovalRequest;
use tollgate_engine::deadline::{Firing, on_deadline};
use tollgate_engine::events::{DecisionRecorded, InterruptEscalated, Payload};
use tollgate_engine::session::client;
use tollgate_store::{
    AuditDecision, DEADLINE_PRINCIPAL, Escalation, Expiry, Interrupt, NewAuditEntry, NewEvent, Resolution,
    Store, StoreError,
};
use tracing::{info, warn};

use tollgate_sessions::convert;

/// The longest sleep between two looks at the store: a new interrupt's deadline is seen within
/// it, and a due one fires within it after its time.
pub const MAX_NAP: Duration = Duration::from_secs(1);

/// Due deadlines handled per look.
const BATCH: i64 = 100;

/// What one look did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fired {
    /// Interrupts rejected by their deadline.
    pub expired: usize,
    /// Interrupts handed to other approvers.
    pub escalated: usize,
    /// Deadlines another process (or a human) handled first.
    pub lost: usize,
}

/// Fires the deadlines due now.
///
/// # Errors
/// The store failed to list them (a failure on one interrupt is logged and skipped).
pub async fn fire_due(store: &dyn Store) -> Result<Fired, StoreError> {
    let mut fired = Fired::default();
    for interrupt in store.deadlines().due_deadlines(BATCH).await? {
        match fire(store, &interrupt).await {
            Ok(Some(true)) => fired.escalated += 1,
            Ok(Some(false)) => fired.expired += 1,
            Ok(None) => fired.lost += 1,
            Err(err) => warn!(session = %interrupt.session_id, interrupt = %interrupt.interrupt_id,
                error = %err, "could not fire the approval deadline; trying again at the next look"),
        }
    }
    Ok(fired)
}

/// Fires deadlines until `stop` resolves: a look, then a nap until the next deadline (at most
/// [`MAX_NAP`]).
pub async fn run(store: &dyn Store, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        let nap = match fire_due(store).await {
            Ok(fired) => {
                if fired != Fired::default() {
                    info!(
                        expired = fired.expired,
                        escalated = fired.escalated,
                        lost = fired.lost,
                        "approval deadlines fired"
                    );
                }
                match store.deadlines().next_deadline_in().await {
                    Ok(Some(wait)) => wait.min(MAX_NAP),
                    Ok(None) | Err(_) => MAX_NAP,
                }
            }
            Err(err) => {
                warn!(error = %err, "could not read due approval deadlines; trying again");
                MAX_NAP
            }
        };
        tokio::select! {
            () = tokio::time::sleep(nap) => {}
            () = &mut stop => return,
        }
    }
}

/// Fires one due deadline: `Some(true)` escalated, `Some(false)` expired, `None` someone else
/// decided or fired it first.
async fn fire(store: &dyn Store, interrupt: &Interrupt) -> Result<Option<bool>, anyhow::Error> {
    let Some(deadline_at) = interrupt.deadline_at else { return Ok(None) };
    let request = ApprovalRequest::parse(interrupt.request.get())?;
    let (sid, iid) = (interrupt.session_id.as_str(), interrupt.interrupt_id.as_str());
    let tool_name = Some(request.tool_name.clone());
    let firing = on_deadline(&request, interrupt.escalated_at.is_some())?;
    let outcome = match firing {
        Firing::Expire { decision } => {
            let (resolution, events) = client::resolution(iid, &decision, None);
            let mut events: Vec<NewEvent> = events.into_iter().map(convert::event).collect();
            events.push(convert::event(
                Payload::DecisionRecorded(DecisionRecorded {
                    interrupt_id: iid.to_owned(),
                    principal: DEADLINE_PRINCIPAL.to_owned(),
                    decision: AuditDecision::Expired.as_str().to_owned(),
                    reason: decision.message.clone(),
                    tool_name: tool_name.clone(),
                    input: Some(request.arguments.clone()),
                    edited_input: None,
                    deadline_at: Some(deadline_at),
                })
                .into(),
            ));
            let expiry = Expiry {
                resolution: Resolution {
                    session_id: sid.to_owned(),
                    interrupt_id: iid.to_owned(),
                    client_key: format!("deadline:{deadline_at}"),
                    resolution: convert::raw(&resolution),
                    events,
                    partial_events: Vec::new(),
                },
                deadline_at,
                entry: NewAuditEntry {
                    principal: DEADLINE_PRINCIPAL.to_owned(),
                    decision: AuditDecision::Expired,
                    reason: decision.message.clone(),
                    tool_name,
                    input: Some(convert::raw(&request.arguments)),
                    edited_input: None,
                },
            };
            store.deadlines().expire_interrupt(expiry).await.map(|r| (!r.replayed).then_some(false))
        }
        Firing::Escalate { request: next, to, from, second } => {
            let groups = |g: &[String]| g.iter().map(|g| format!("`{g}`")).collect::<Vec<_>>().join(", ");
            let escalation = Escalation {
                session_id: sid.to_owned(),
                interrupt_id: iid.to_owned(),
                deadline_at,
                request: convert::raw(&next.to_value()),
                next_deadline: second,
                events: vec![convert::event(
                    Payload::InterruptEscalated(InterruptEscalated {
                        interrupt_id: iid.to_owned(),
                        tool_name: tool_name.clone(),
                        escalate_to: to.clone(),
                        escalated_from: from,
                        deadline_passed: deadline_at,
                        next_deadline_secs: second.as_secs(),
                        escalated_by: DEADLINE_PRINCIPAL.to_owned(),
                    })
                    .into(),
                )],
                entry: NewAuditEntry {
                    principal: DEADLINE_PRINCIPAL.to_owned(),
                    decision: AuditDecision::Escalated,
                    reason: Some(format!(
                        "no decision before the approval deadline; escalated to {} for {} s more",
                        groups(&to),
                        second.as_secs()
                    )),
                    tool_name,
                    input: Some(convert::raw(&request.arguments)),
                    edited_input: None,
                },
            };
            store.deadlines().escalate_interrupt(escalation).await.map(|_| Some(true))
        }
    };
    match outcome {
        Ok(done) => {
            if let Some(escalated) = done {
                info!(session = %sid, interrupt = %iid, deadline_at, escalated, "approval deadline fired");
            }
            Ok(done)
        }
        // A turn being cancelled closes its interrupts itself.
        Err(
            StoreError::InterruptAlreadyResolved { .. }
            | StoreError::DeadlineNotDue { .. }
            | StoreError::CancelPending { .. },
        ) => Ok(None),
        Err(other) => Err(other.into()),
    }
}
