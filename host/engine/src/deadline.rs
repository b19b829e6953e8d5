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
//! use tollgate_engine::approval::ApprovalRequest;
//! use tollgate_engine::catalog::ToolKind;
//! use tollgate_engine::deadline::{Firing, on_deadline};
//! use tollgate_engine::policy::Effect;
//!
//! let asked = ApprovalRequest::new("turn-1", "toolu_1", "create_refund", ToolKind::Custom, json!({}), Effect::NonIdempotentWrite);
//! let request = ApprovalRequest {
//!     approvers: vec!["finance".into()],
//!     deadline: Some(json!({"approval_timeout_secs": 60, "on_timeout": "escalate",
//!                           "escalate_to": ["oncall"], "escalation_timeout_secs": 30})),
//!     ..asked
//! };
//! let Firing::Escalate { request, to, from, second } = on_deadline(&request, false).unwrap() else {
//!     panic!("escalates first")
//! };
//! assert_eq!((to, from), (vec!["oncall".to_owned()], vec!["finance".to_owned()]));
//! assert_eq!(request.approvers, ["oncall"]);
//! assert_eq!(second.as_secs(), 30);
//! assert!(matches!(on_deadline(&request, true).unwrap(), Firing::Expire { .. }), "then rejects");
//! ```

use std::time::Duration;

use crate::approval::ApprovalRequest;
use crate::policy::{ApprovalDeadline, OnTimeout};
use crate::session::EngineError;
use crate::session::client::HumanDecision;

/// What a passed deadline does.
#[derive(Clone, Debug, PartialEq)]
pub enum Firing {
    /// Reject the call with `decision` (its `message` is what the model reads).
    Expire {
        /// The rejection.
        decision: HumanDecision,
    },
    /// Hand the call to other approvers.
    Escalate {
        /// The interrupt's request from now on: `approvers` = `to`, `escalated_from` = `from`.
        request: Box<ApprovalRequest>,
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
pub fn stamped(request: &ApprovalRequest) -> Result<Option<ApprovalDeadline>, EngineError> {
    match &request.deadline {
        None | Some(serde_json::Value::Null) => Ok(None),
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
pub fn first_deadline(request: &ApprovalRequest) -> Result<Option<Duration>, EngineError> {
    Ok(stamped(request)?.map(|d| Duration::from_secs(d.approval_timeout_secs)))
}

/// What the deadline of `request` does now that it passed; `escalated`: it was escalated already
/// (this is the second deadline).
///
/// # Errors
/// A request without a deadline, or with one that is not one ([`EngineError::Corrupt`]).
pub fn on_deadline(request: &ApprovalRequest, escalated: bool) -> Result<Firing, EngineError> {
    let Some(deadline) = stamped(request)? else {
        return Err(EngineError::Corrupt {
            what: "an interrupt with a deadline".into(),
            reason: "its request names no `deadline`".into(),
        });
    };
    if deadline.on_timeout == OnTimeout::Escalate && !escalated {
        let from = request.approvers.clone();
        let next = Box::new(ApprovalRequest {
            approvers: deadline.escalate_to.clone(),
            escalated_from: Some(from.clone()),
            ..request.clone()
        });
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
        decision: HumanDecision { approved: false, message: Some(message), ..HumanDecision::default() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::ToolKind;
    use crate::policy::Effect;
    use serde_json::{Value, json};

    fn request(deadline: Option<Value>) -> ApprovalRequest {
        let asked = ApprovalRequest::new(
            "turn-1",
            "toolu_1",
            "create_refund",
            ToolKind::Custom,
            json!({}),
            Effect::Read,
        );
        ApprovalRequest { deadline, ..asked }
    }

    #[test]
    fn a_rejecting_deadline_expires_the_call_with_the_text_the_model_reads() {
        let asked = request(Some(serde_json::to_value(ApprovalDeadline::reject_after(2)).unwrap()));
        let Firing::Expire { decision } = on_deadline(&asked, false).unwrap() else { panic!("expires") };
        assert!(!decision.approved);
        assert_eq!(decision.message.as_deref(), Some(crate::texts::approval_expired(2, &[]).as_str()));
        assert_eq!(first_deadline(&asked).unwrap(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn an_escalating_deadline_hands_the_call_over_once_then_expires_after_the_second() {
        let deadline = ApprovalDeadline::escalate_after(60, vec!["oncall".into()], None).resolved();
        let asked = request(Some(serde_json::to_value(deadline).unwrap()));
        let Firing::Escalate { request, to, from, second } = on_deadline(&asked, false).unwrap() else {
            panic!("escalates")
        };
        assert_eq!((to.as_slice(), from.len()), (["oncall".to_owned()].as_slice(), 0));
        assert_eq!(request.approvers, ["oncall"]);
        assert_eq!(request.to_value()["escalated_from"], json!([]), "stored even when empty");
        assert_eq!(second, Duration::from_secs(60), "the default second deadline is as long as the first");
        let Firing::Expire { decision } = on_deadline(&request, true).unwrap() else { panic!("expires") };
        assert!(decision.message.unwrap().contains("60 seconds (after it was escalated to `oncall`)"));
    }

    #[test]
    fn a_request_without_a_good_deadline_is_refused() {
        assert_eq!(first_deadline(&request(None)).unwrap(), None);
        assert!(on_deadline(&request(None), false).is_err());
        assert!(on_deadline(&request(Some(json!({"approval_timeout_secs": "soon"}))), false).is_err());
    }
}
