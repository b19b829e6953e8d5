//! What an approval deadline does when it passes with the call undecided: [`on_deadline`] reads
//! the deadline the policy stamped into the interrupt's request
//! ([`crate::session::turn::with_deadlines`]) and answers [`Firing::Expire`] (the rejection the
//! model reads, [`crate::texts::approval_expired`]) or [`Firing::Escalate`] (the request with its
//! approvers replaced, and the second deadline).
//!
//! Pure: the Worker finds due deadlines in the store and commits what this module answers
//! (`tollgate::deadlines`). It does not know clocks or rows.
//!
//! ```
//! use serde_json::json;
//! use tollgate_engine::deadline::{Firing, on_deadline};
//!
//! let request = json!({
//!     "type": "tool_approval", "tool_name": "create_refund", "approvers": ["finance"],
//!     "deadline": {"approval_timeout_secs": 60, "on_timeout": "escalate",
//!                  "escalate_to": ["oncall"], "escalation_timeout_secs": 30},
//! });
//! let Firing::Escalate { request, to, from, second } = on_deadline(&request, false).unwrap() else {
//!     panic!("escalates first")
//! };
//! assert_eq!((to, from), (vec!["oncall".to_owned()], vec!["finance".to_owned()]));
//! assert_eq!(request["approvers"], json!(["oncall"]));
//! assert_eq!(second.as_secs(), 30);
//! assert!(matches!(on_deadline(&request, true).unwrap(), Firing::Expire { .. }), "then rejects");
//! ```

use std::time::Duration;

use serde_json::{Value, json};

use crate::policy::{ApprovalDeadline, OnTimeout};
use crate::session::EngineError;
use crate::session::client::Decision;

/// What a passed deadline does.
#[derive(Clone, Debug, PartialEq)]
pub enum Firing {
    /// Reject the call with `decision` (its `message` is what the model reads).
    Expire {
        /// The rejection.
        decision: Decision,
    },
    /// Hand the call to other approvers.
    Escalate {
        /// The interrupt's request from now on: `approvers` = `to`, `escalated_from` = `from`.
        request: Value,
        /// The groups who may decide now.
        to: Vec<String>,
        /// The groups who could decide before (empty: any approver).
        from: Vec<String>,
        /// The second deadline, after which it rejects.
        second: Duration,
    },
}

/// The deadline stamped into an approval request (`request.deadline`), if it has one.
///
/// # Errors
/// A `deadline` that is not one ([`EngineError::Corrupt`]).
pub fn stamped(request: &Value) -> Result<Option<ApprovalDeadline>, EngineError> {
    match request.get("deadline") {
        None | Some(Value::Null) => Ok(None),
        Some(deadline) => {
            serde_json::from_value(deadline.clone()).map(Some).map_err(|e| EngineError::Corrupt {
                what: "the approval deadline of an interrupt request".into(),
                reason: e.to_string(),
            })
        }
    }
}

/// The first deadline of a request: how long after the interrupt opens it passes.
///
/// # Errors
/// As [`stamped`].
pub fn first_deadline(request: &Value) -> Result<Option<Duration>, EngineError> {
    Ok(stamped(request)?.map(|d| Duration::from_secs(d.approval_timeout_secs)))
}

/// What the deadline of `request` does now that it passed; `escalated`: it was escalated already
/// (this is the second deadline).
///
/// # Errors
/// A request without a deadline, or with one that is not one ([`EngineError::Corrupt`]).
pub fn on_deadline(request: &Value, escalated: bool) -> Result<Firing, EngineError> {
    let Some(deadline) = stamped(request)? else {
        return Err(EngineError::Corrupt {
            what: "an interrupt with a deadline".into(),
            reason: "its request names no `deadline`".into(),
        });
    };
    if deadline.on_timeout == OnTimeout::Escalate && !escalated {
        let from: Vec<String> =
            request.get("approvers").and_then(|a| serde_json::from_value(a.clone()).ok()).unwrap_or_default();
        let mut next = request.clone();
        next["approvers"] = json!(deadline.escalate_to);
        next["escalated_from"] = json!(from);
        return Ok(Firing::Escalate {
            request: next,
            to: deadline.escalate_to.clone(),
            from,
            second: Duration::from_secs(deadline.second_timeout_secs()),
        });
    }
    let (secs, to) = if escalated {
        (deadline.second_timeout_secs(), deadline.escalate_to.as_slice())
    } else {
        (deadline.approval_timeout_secs, &[][..])
    };
    let message = crate::texts::approval_expired(secs, to);
    Ok(Firing::Expire {
        decision: Decision { approved: false, message: Some(message), ..Decision::default() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(deadline: Value) -> Value {
        json!({"type": "tool_approval", "tool_name": "create_refund", "arguments": {}, "deadline": deadline})
    }

    #[test]
    fn a_rejecting_deadline_expires_the_call_with_the_text_the_model_reads() {
        let asked = request(serde_json::to_value(ApprovalDeadline::reject_after(2)).unwrap());
        let Firing::Expire { decision } = on_deadline(&asked, false).unwrap() else { panic!("expires") };
        assert!(!decision.approved);
        assert_eq!(decision.message.as_deref(), Some(crate::texts::approval_expired(2, &[]).as_str()));
        assert_eq!(first_deadline(&asked).unwrap(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn an_escalating_deadline_hands_the_call_over_once_then_expires_after_the_second() {
        let deadline = ApprovalDeadline::escalate_after(60, vec!["oncall".into()], None).resolved();
        let asked = request(serde_json::to_value(deadline).unwrap());
        let Firing::Escalate { request, to, from, second } = on_deadline(&asked, false).unwrap() else {
            panic!("escalates")
        };
        assert_eq!((to.as_slice(), from.len()), (["oncall".to_owned()].as_slice(), 0));
        assert_eq!(request["approvers"], json!(["oncall"]));
        assert_eq!(request["escalated_from"], json!([]));
        assert_eq!(second, Duration::from_secs(60), "the default second deadline is as long as the first");
        let Firing::Expire { decision } = on_deadline(&request, true).unwrap() else { panic!("expires") };
        assert!(decision.message.unwrap().contains("60 seconds (after it was escalated to `oncall`)"));
    }

    #[test]
    fn a_request_without_a_good_deadline_is_refused() {
        assert_eq!(first_deadline(&json!({"type": "tool_approval"})).unwrap(), None);
        assert!(on_deadline(&json!({"type": "tool_approval"}), false).is_err());
        assert!(on_deadline(&request(json!({"approval_timeout_secs": "soon"})), false).is_err());
    }
}
