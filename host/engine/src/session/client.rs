//! Client calls: a user message and a decision on an interrupt, as the items, steps and events
//! the store writes for them.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    EngineError, ItemKind, NewEvent, NewItem, NextStep, RunModelStep, SessionStatus, Start, StepKind, raw,
};
use crate::events::{self, Payload};
use crate::media::MediaRef;

/// The longest user message accepted, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// What `send_user_message` writes.
#[derive(Clone, Debug)]
pub struct ClientMessage {
    /// The `user_prompt` item.
    pub item: NewItem,
    /// `RunModel` for a new turn, enqueued only when no step is in flight (else the running turn
    /// picks the message up when it ends).
    pub wake: NextStep,
    /// `user_message`.
    pub events: Vec<NewEvent>,
}

/// A user message, with the images it carries (stored already, by reference): the item
/// `{"kind":"user_prompt","text":…}`, with `"images":[{"digest","media_type"}…]` when there are
/// some, and its `user_message` event (`{"text"}`, and `"images"` the same way).
///
/// # Errors
/// An empty or over-long text.
pub fn user_message(text: &str, images: &[MediaRef]) -> Result<ClientMessage, EngineError> {
    if text.trim().is_empty() {
        return Err(EngineError::BadInput { field: "text", reason: "must not be empty".into() });
    }
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(EngineError::BadInput {
            field: "text",
            reason: format!("{} bytes is more than the limit of {MAX_MESSAGE_BYTES}", text.len()),
        });
    }
    Ok(ClientMessage {
        item: NewItem {
            kind: ItemKind::UserPrompt,
            uuid: None,
            turn_id: None,
            body: raw(&with_images(json!({"kind": "user_prompt", "text": text}), images)),
        },
        wake: NextStep {
            kind: StepKind::RunModel,
            payload: serde_json::to_value(RunModelStep::default()).expect("serializes"),
            start: Start::Now,
            only_if_prompts_after: None,
            session_status: Some(SessionStatus::Running),
        },
        events: vec![
            Payload::UserMessage(events::UserMessage { text: text.to_owned(), images: images.to_vec() })
                .into(),
        ],
    })
}

/// `object` with `"images"` added when there are any.
fn with_images(mut object: Value, images: &[MediaRef]) -> Value {
    if !images.is_empty() {
        object["images"] = serde_json::to_value(images).expect("references serialize");
    }
    object
}

/// A human decision on a deferred call, as stored in the interrupt.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HumanDecision {
    /// Whether the call may run.
    pub approved: bool,
    /// The reviewer's words; for a rejection, what the model reads.
    #[serde(default)]
    pub message: Option<String>,
    /// An approval's edited input: the call runs with it instead of the model's (checked
    /// against the tool's schema before it is stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_input: Option<Value>,
    /// `call` (this call only) or `session` (an approval that also allows the tool's later calls
    /// in the session: a session grant).
    #[serde(default, skip_serializing_if = "DecisionScope::is_call")]
    pub scope: DecisionScope,
    /// Who decided and when, for a `session` approval or a decision made ahead in a batch
    /// ([`super::batches`]): never stored with the decision (a replay must match it byte for
    /// byte); the Worker reads it from the decision's audit row (its principal, its database
    /// time) before it applies the decision.
    #[serde(skip)]
    pub granted: Option<GrantStamp>,
}

/// What an approval covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionScope {
    /// This call only.
    #[default]
    Call,
    /// This call and the same tool's later calls in the session, until revoked.
    Session,
}

impl DecisionScope {
    fn is_call(&self) -> bool {
        *self == DecisionScope::Call
    }
}

/// Who made a session grant, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantStamp {
    /// The principal.
    pub granted_by: String,
    /// Ms since the epoch (the deciding process's clock).
    pub granted_at: i64,
}

/// The stored resolution and its `interrupt_resolved` event, which names the principal who
/// decided (`decided_by`: `null` when Tollgate closed it, at a deadline or at the turn's end).
pub fn resolution(
    interrupt_id: &str,
    decision: &HumanDecision,
    decided_by: Option<&str>,
) -> (Value, Vec<NewEvent>) {
    let value = serde_json::to_value(decision).expect("serializes");
    let event = Payload::InterruptResolved(events::InterruptResolved {
        interrupt_id: interrupt_id.to_owned(),
        approved: decision.approved,
        message: decision.message.clone(),
        updated_input: decision.updated_input.clone(),
        scope: decision.scope,
        decided_by: decided_by.map(str::to_owned),
    });
    (value, vec![event.into()])
}

/// Reads a stored resolution.
///
/// # Errors
/// Not a [`HumanDecision`].
pub fn parse_decision(text: &str) -> Result<HumanDecision, EngineError> {
    serde_json::from_str(text)
        .map_err(|e| EngineError::Corrupt { what: "interrupt resolution".into(), reason: e.to_string() })
}
