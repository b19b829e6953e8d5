//! Webhooks: `[[webhooks]]` in the server's `--webhooks FILE`, deliveries signed the Standard
//! Webhooks way, sent from the store's durable outbox at least once with backoff.
//!
//! Read [`deliver::Deliverer`] first: the loop `tollgate serve` and `tollgate api` run. Modules:
//! [`config`] (the file, checked), [`sign`] (signatures, pure), [`deliver`] (the loop, the only
//! I/O). This module maps stored events to what a receiver gets ([`Message`], pure).
//!
//! # Why nothing is lost
//!
//! The store writes a delivery row per subscribed webhook **in the transaction that appends the
//! event** (`tollgate_store::outbox`), whichever process writes it; the loop claims due rows
//! under a lease (one process sends each, also with several API processes on PostgreSQL), POSTs,
//! and records the result under the claim's fence. A crash between the POST and the record sends
//! it again: at least once. Receivers dedupe by `webhook-id`, derived from the event (session and
//! seq), so it is the same on every attempt, after restarts and from any process.
//!
//! # What a receiver gets
//!
//! `POST` with `content-type: application/json`, the three `webhook-*` headers and a body
//! `{"type": …, "timestamp": RFC 3339 of the event (database clock), "data": {…}}`:
//!
//! | type | stored event | data |
//! |---|---|---|
//! | `interrupt.created` | `interrupt_opened` | [`InterruptCreated`] |
//! | `interrupt.escalated` | `interrupt_escalated` | [`InterruptEscalated`] (written when an approval deadline escalates: `crate::deadlines`) |
//! | `interrupt.decided` | `interrupt_resolved` | [`InterruptDecided`] |
//! | `turn.completed` | `turn_completed` | [`TurnCompleted`] |
//! | `turn.failed` | `turn_failed` | [`TurnFailed`] |
//! | `turn.cancelled` | `turn_cancelled` | [`TurnCancelled`] |

pub mod config;
pub mod deliver;
pub mod sign;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tollgate_engine::events::{self, EventKind, InterruptOpened};

pub use config::Webhook;

/// A webhook event type, as configured and as sent in `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// A call waits for a decision.
    InterruptCreated,
    /// A waiting call went to other approvers after its deadline.
    InterruptEscalated,
    /// A decision was recorded.
    InterruptDecided,
    /// A turn answered.
    TurnCompleted,
    /// A turn failed.
    TurnFailed,
    /// A turn was cancelled.
    TurnCancelled,
}

impl EventType {
    /// Every type.
    pub const ALL: [EventType; 6] = [
        Self::InterruptCreated,
        Self::InterruptEscalated,
        Self::InterruptDecided,
        Self::TurnCompleted,
        Self::TurnFailed,
        Self::TurnCancelled,
    ];

    /// The name in the file and in `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InterruptCreated => "interrupt.created",
            Self::InterruptEscalated => "interrupt.escalated",
            Self::InterruptDecided => "interrupt.decided",
            Self::TurnCompleted => "turn.completed",
            Self::TurnFailed => "turn.failed",
            Self::TurnCancelled => "turn.cancelled",
        }
    }

    /// The stored event kind it is made from.
    pub fn event_kind(self) -> EventKind {
        match self {
            Self::InterruptCreated => EventKind::InterruptOpened,
            Self::InterruptEscalated => EventKind::InterruptEscalated,
            Self::InterruptDecided => EventKind::InterruptResolved,
            Self::TurnCompleted => EventKind::TurnCompleted,
            Self::TurnFailed => EventKind::TurnFailed,
            Self::TurnCancelled => EventKind::TurnCancelled,
        }
    }

    /// The type named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The type made from stored event kind `kind`; `None` for the kinds no receiver gets (each
    /// kind is named here, so a new one must be sorted in).
    pub fn from_event_kind(kind: EventKind) -> Option<Self> {
        match kind {
            EventKind::InterruptOpened => Some(Self::InterruptCreated),
            EventKind::InterruptEscalated => Some(Self::InterruptEscalated),
            EventKind::InterruptResolved => Some(Self::InterruptDecided),
            EventKind::TurnCompleted => Some(Self::TurnCompleted),
            EventKind::TurnFailed => Some(Self::TurnFailed),
            EventKind::TurnCancelled => Some(Self::TurnCancelled),
            EventKind::UserMessage
            | EventKind::TurnStarted
            | EventKind::TextDelta
            | EventKind::ReasoningDelta
            | EventKind::ToolCallStarted
            | EventKind::ToolCallFinished
            | EventKind::ApprovedUnderGrant
            | EventKind::GrantRevoked
            | EventKind::ApprovalAwaited
            | EventKind::DecidedAheadUsed
            | EventKind::AheadUnused
            | EventKind::AttemptFailed
            | EventKind::CancelRequested
            | EventKind::AgentUpgraded
            | EventKind::DecisionRecorded => None,
        }
    }
}

/// The body of one delivery.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct Message<D> {
    /// [`EventType::as_str`].
    #[serde(rename = "type")]
    pub kind: String,
    /// When the event was written, RFC 3339 UTC with milliseconds (database clock).
    pub timestamp: String,
    /// The event's data, by type.
    pub data: D,
}

/// `interrupt.created`: a call waits for a decision.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct InterruptCreated {
    /// The session.
    pub session_id: String,
    /// The interrupt (decide it at `POST /v1/sessions/{session_id}/interrupts/{interrupt_id}`).
    pub interrupt_id: String,
    /// The turn that made the call.
    pub turn_id: Option<String>,
    /// The tool.
    pub tool_name: Option<String>,
    /// The call's input.
    pub arguments: Option<Value>,
    /// The tool's policy effect (e.g. `write`).
    pub effect: Option<String>,
    /// The batch it belongs to: the calls of one model reply that wait for a decision together
    /// (the first deferred call's id); absent for a call asked alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// `true` for a call asked ahead of the model repeating it (a batch sibling).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ahead: bool,
    /// What the options factory's review told the approver: `{"risk", "notes"}` (`risk` `null`
    /// when the review failed); absent when the factory reviews no calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<tollgate_engine::review::Review>,
    /// How many different principals must approve; absent when one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals_required: Option<u32>,
    /// The event's seq in the session's event stream.
    pub event_seq: i64,
}

/// `interrupt.escalated`: a waiting call went to other approvers.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct InterruptEscalated {
    /// The session.
    pub session_id: String,
    /// The interrupt.
    pub interrupt_id: String,
    /// Who may decide now (groups), as the event names them.
    pub escalate_to: Option<Value>,
    /// The event's seq.
    pub event_seq: i64,
}

/// `interrupt.decided`: a decision was recorded.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct InterruptDecided {
    /// The session.
    pub session_id: String,
    /// The interrupt.
    pub interrupt_id: String,
    /// Whether the call may run.
    pub approved: bool,
    /// The approver's words.
    pub message: Option<String>,
    /// Who decided, when the event records it.
    pub decided_by: Option<Value>,
    /// The approver's edited input, when the call runs with one (edit before approve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// The event's seq.
    pub event_seq: i64,
}

/// `turn.completed`: a turn answered.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct TurnCompleted {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: Option<String>,
    /// The turn's answer, as the CLI gave it.
    pub result: Option<Value>,
    /// The event's seq.
    pub event_seq: i64,
}

/// `turn.failed`: a turn failed.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct TurnFailed {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: Option<String>,
    /// What failed.
    pub error: Option<String>,
    /// Why, a closed set (`segment_failed`, `worker_stopped`, `spend_limit`, …).
    pub reason: Option<String>,
    /// The event's seq.
    pub event_seq: i64,
}

/// `turn.cancelled`: a turn was cancelled.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct TurnCancelled {
    /// The session.
    pub session_id: String,
    /// The turn.
    pub turn_id: Option<String>,
    /// The principal who cancelled it.
    pub cancelled_by: Option<String>,
    /// The event's seq.
    pub event_seq: i64,
}

/// The stable `webhook-id` of an event: `msg_` and 32 hex digits of SHA-256 of `{session}/{seq}`.
pub fn message_id(session_id: &str, seq: i64) -> String {
    let digest = Sha256::digest(format!("{session_id}/{seq}").as_bytes());
    format!("msg_{}", &hex::encode(digest)[..32])
}

/// The body of the delivery of stored event `kind` (`payload`, written at `event_at` ms) of
/// `session_id` at `seq`; `None` for a kind no webhook type is made from.
///
/// # Errors
/// The payload is not the JSON its kind writes.
pub fn body(
    session_id: &str,
    seq: i64,
    kind: &str,
    payload: &str,
    event_at: i64,
) -> Option<Result<Vec<u8>, String>> {
    let t = EventKind::parse(kind).and_then(EventType::from_event_kind)?;
    Some(body_of(t, session_id, seq, payload, event_at))
}

fn body_of(
    t: EventType,
    session_id: &str,
    seq: i64,
    payload: &str,
    event_at: i64,
) -> Result<Vec<u8>, String> {
    let v: Value = serde_json::from_str(payload)
        .map_err(|e| format!("the `{}` event is not JSON: {e}", t.event_kind()))?;
    let s = |v: &Value| v.as_str().map(str::to_owned);
    let session_id = session_id.to_owned();
    let interrupt_id = || {
        s(&v["interrupt_id"]).ok_or_else(|| format!("the `{}` event has no `interrupt_id`", t.event_kind()))
    };
    let present = |v: &Value| (!v.is_null()).then(|| v.clone());
    let data = match t {
        EventType::InterruptCreated => {
            let opened = InterruptOpened::parse(payload)
                .map_err(|e| format!("the `{}` event is not an opened interrupt: {e}", t.event_kind()))?;
            let r = opened.request;
            serde_json::to_value(InterruptCreated {
                interrupt_id: opened.interrupt_id,
                turn_id: Some(r.turn_id),
                tool_name: Some(r.tool_name),
                arguments: present(&r.arguments),
                effect: Some(r.effect),
                batch_id: r.batch_id,
                ahead: r.ahead,
                review: r.review,
                approvals_required: r.approvals_required,
                session_id,
                event_seq: seq,
            })
        }
        EventType::InterruptEscalated => {
            let escalated: events::InterruptEscalated = serde_json::from_str(payload)
                .map_err(|e| format!("the `{}` event is not an escalation: {e}", t.event_kind()))?;
            serde_json::to_value(InterruptEscalated {
                interrupt_id: escalated.interrupt_id,
                escalate_to: Some(Value::from(escalated.escalate_to)),
                session_id,
                event_seq: seq,
            })
        }
        EventType::InterruptDecided => serde_json::to_value(InterruptDecided {
            interrupt_id: interrupt_id()?,
            approved: v["approved"].as_bool().ok_or("the `interrupt_resolved` event has no `approved`")?,
            message: s(&v["message"]),
            decided_by: present(&v["principal"]).or_else(|| present(&v["decided_by"])),
            updated_input: present(&v["updated_input"]),
            session_id,
            event_seq: seq,
        }),
        EventType::TurnCompleted => serde_json::to_value(TurnCompleted {
            turn_id: s(&v["turn_id"]),
            result: present(&v["result"]),
            session_id,
            event_seq: seq,
        }),
        EventType::TurnFailed => serde_json::to_value(TurnFailed {
            turn_id: s(&v["turn_id"]),
            error: s(&v["error"]),
            reason: s(&v["reason"]),
            session_id,
            event_seq: seq,
        }),
        EventType::TurnCancelled => serde_json::to_value(TurnCancelled {
            turn_id: s(&v["turn_id"]),
            cancelled_by: s(&v["cancelled_by"]),
            session_id,
            event_seq: seq,
        }),
    }
    .expect("serializes");
    let message = Message { kind: t.as_str().to_owned(), timestamp: rfc3339_ms(event_at), data };
    Ok(serde_json::to_vec(&message).expect("serializes"))
}

/// RFC 3339 UTC with milliseconds of Unix time `ms`.
pub fn rfc3339_ms(ms: i64) -> String {
    let (secs, milli) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = tollgate_engine::summary::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_614_265_330_123), "2021-02-25T15:02:10.123Z");
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_ms(4_102_444_799_999), "2099-12-31T23:59:59.999Z");
    }

    #[test]
    fn the_message_id_depends_on_the_event_only() {
        assert_eq!(message_id("s-1", 7), message_id("s-1", 7));
        assert_ne!(message_id("s-1", 7), message_id("s-1", 8));
        assert_ne!(message_id("s-1", 7), message_id("s-2", 7));
        assert!(message_id("s", 1).starts_with("msg_") && message_id("s", 1).len() == 36);
    }

    #[test]
    fn each_stored_event_kind_becomes_its_typed_message() {
        let request = json!({"type": "tool_approval", "turn_id": "t1", "tool_call_id": "toolu_1",
            "tool_name": "refund", "kind": "custom", "arguments": {"amount": 5}, "effect": "write"});
        let opened = json!({"interrupt_id": "toolu_1", "request": request}).to_string();
        let got: Value =
            serde_json::from_slice(&body("s", 4, "interrupt_opened", &opened, 0).unwrap().unwrap()).unwrap();
        assert_eq!(
            got,
            json!({"type": "interrupt.created", "timestamp": "1970-01-01T00:00:00.000Z", "data": {
                "session_id": "s", "interrupt_id": "toolu_1", "turn_id": "t1", "tool_name": "refund",
                "arguments": {"amount": 5}, "effect": "write", "event_seq": 4}})
        );
        // A batch sibling asked ahead names its batch.
        let mut ahead = request.clone();
        ahead["batch_id"] = json!("toolu_0");
        ahead["ahead"] = json!(true);
        let opened = json!({"interrupt_id": "toolu_1", "request": ahead}).to_string();
        let got: Message<InterruptCreated> =
            serde_json::from_slice(&body("s", 4, "interrupt_opened", &opened, 0).unwrap().unwrap()).unwrap();
        assert_eq!((got.data.batch_id.as_deref(), got.data.ahead), (Some("toolu_0"), true));
        // A reviewed call carries its review and the approvers it needs.
        let mut reviewed = request.clone();
        reviewed["review"] = json!({"risk": "high", "notes": ["refund exceeds the order total of €54.00"]});
        reviewed["approvals_required"] = json!(2);
        let opened = json!({"interrupt_id": "toolu_1", "request": reviewed}).to_string();
        let got: Value =
            serde_json::from_slice(&body("s", 4, "interrupt_opened", &opened, 0).unwrap().unwrap()).unwrap();
        assert_eq!(
            (&got["data"]["review"], &got["data"]["approvals_required"]),
            (&json!({"risk": "high", "notes": ["refund exceeds the order total of €54.00"]}), &json!(2))
        );
        let edited =
            r#"{"interrupt_id":"toolu_1","approved":true,"message":null,"updated_input":{"amount":2}}"#;
        let got: Message<InterruptDecided> =
            serde_json::from_slice(&body("s", 5, "interrupt_resolved", edited, 0).unwrap().unwrap()).unwrap();
        assert_eq!(got.data.updated_input, Some(json!({"amount": 2})));
        let resolved = r#"{"interrupt_id":"toolu_1","approved":false,"message":"no"}"#;
        let got: Message<InterruptDecided> =
            serde_json::from_slice(&body("s", 5, "interrupt_resolved", resolved, 0).unwrap().unwrap())
                .unwrap();
        assert_eq!(
            (got.kind.as_str(), got.data.approved, got.data.message.as_deref()),
            ("interrupt.decided", false, Some("no"))
        );
        let failed = r#"{"turn_id":"t1","error":"boom","reason":"segment_failed"}"#;
        let got: Message<TurnFailed> =
            serde_json::from_slice(&body("s", 6, "turn_failed", failed, 0).unwrap().unwrap()).unwrap();
        assert_eq!(
            (got.data.reason.as_deref(), got.data.error.as_deref()),
            (Some("segment_failed"), Some("boom"))
        );
        let done = r#"{"turn_id":"t1","result":"ok"}"#;
        let got: Message<TurnCompleted> =
            serde_json::from_slice(&body("s", 7, "turn_completed", done, 0).unwrap().unwrap()).unwrap();
        assert_eq!((got.data.turn_id.as_deref(), got.data.result), (Some("t1"), Some(json!("ok"))));
        let cancelled = r#"{"turn_id":"t1","cancelled_by":"alice","requested_at":5}"#;
        let got: Message<TurnCancelled> =
            serde_json::from_slice(&body("s", 8, "turn_cancelled", cancelled, 0).unwrap().unwrap()).unwrap();
        assert_eq!(
            (got.kind.as_str(), got.data.turn_id.as_deref(), got.data.cancelled_by.as_deref()),
            ("turn.cancelled", Some("t1"), Some("alice"))
        );
        assert!(body("s", 8, "text_delta", "{}", 0).is_none());
        let err = body("s", 9, "interrupt_resolved", r#"{"approved":true}"#, 0).unwrap().unwrap_err();
        assert!(err.contains("no `interrupt_id`"), "{err}");
        let err = body(
            "s",
            9,
            "interrupt_opened",
            r#"{"interrupt_id":"toolu_1","request":{"type":"tool_approval"}}"#,
            0,
        )
        .unwrap()
        .unwrap_err();
        assert!(err.contains("`interrupt_opened`") && err.contains("missing field"), "{err}");
        let escalated = r#"{"deadline_passed":5,"escalate_to":["oncall"],"escalated_by":"tollgate:deadline","escalated_from":[],"interrupt_id":"toolu_1","next_deadline_secs":30,"tool_name":"refund"}"#;
        let got: Message<InterruptEscalated> =
            serde_json::from_slice(&body("s", 10, "interrupt_escalated", escalated, 0).unwrap().unwrap())
                .unwrap();
        assert_eq!(
            (got.data.interrupt_id.as_str(), got.data.escalate_to),
            ("toolu_1", Some(json!(["oncall"])))
        );
        let err =
            body("s", 11, "interrupt_escalated", r#"{"interrupt_id":"toolu_1"}"#, 0).unwrap().unwrap_err();
        assert!(err.contains("`interrupt_escalated`") && err.contains("missing field"), "{err}");
    }
}
