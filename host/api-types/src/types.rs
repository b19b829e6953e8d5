//! Every body of the HTTP API, once: the requests, the responses, the SSE event data and the
//! JSON error, as typed structs and enums.
//!
//! The handlers (`tollgate-api`) build their answers from these, the client ([`crate::client`])
//! reads them back into the same types, and the OpenAPI document is generated from them
//! (`utoipa`), so the three cannot drift apart.
//!
//! The wire format is the one the API has always sent, byte for byte. Objects that used to be
//! built as JSON values have their fields declared in alphabetical order, the order they were sent
//! in; objects that were nested in such a value go out through `tollgate_engine::views::sorted_keys`. An answer's `Option`
//! goes out as `null`, never left out, so the schema marks it required (and nullable); a request's
//! may be left out.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

/// The engine's own types, sent as they are (their schemas come from the engine's `openapi`
/// feature): a call's state, which side runs a tool, where an approved call runs, what an
/// interrupt asks, and a session's token totals.
pub use tollgate_engine::approval::ApprovalRequest;
pub use tollgate_engine::catalog::ToolKind;
use tollgate_engine::events::EventKind;
pub use tollgate_engine::media::MediaRef;
pub use tollgate_engine::policy::DeferredRun;
pub use tollgate_engine::review::{Review, Risk};
pub use tollgate_engine::session::{CallState, Usage};
pub use tollgate_engine::views::{
    ApprovalSoFar, AttentionItem, AuditDecision, AuditRecord, CallCheck, CancelReceipt, CancelRequested,
    CheckReceipt, DecidedAhead, ForkedFrom, Grant, GrantRevocation, LiveText, Message, PendingApproval,
    RevokeReceipt, SessionGrant, Snapshot, ToolCall, TurnCancelled,
};

// ---- Requests ----

/// `POST /v1/sessions`: creates a session (idempotent on its id), optionally with its first
/// message. An empty body is the same as `{}`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// 1-200 of letters, digits and `-_.:/@`; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9._:/@-]{1,200}$")]
    pub session_id: Option<String>,
    /// The first user message: as `text` of `POST …/messages` (not only white space; at most
    /// 262144 bytes of UTF-8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(
        min_length = 1,
        max_length = 262144,
        pattern = "[^\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
    )]
    pub message: Option<String>,
    /// The first message's images (only with `message`), as for `POST …/messages`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 8)]
    pub images: Vec<ImageBlock>,
    /// The first message's idempotency key (the `Idempotency-Key` header wins): 1-200 of
    /// letters, digits and `-_.:/@`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9._:/@-]{1,200}$")]
    pub client_key: Option<String>,
    /// The agent the session belongs to: only Workers serving it run the session. A name
    /// (`support`) a Worker or server registered or `tollgate agent push` stored (the session then
    /// runs pinned to the agent's current version), a pushed version (`support@3`, pinned to it),
    /// or a digest (`sha256:…`) of a locked bundle a Worker loaded, which also pins the session to
    /// it. Default: the agent of the serving process
    /// (`tollgate serve`), else the only agent the store knows, else none yet (the first agent
    /// to start on the store adopts it); refused with 409 `agent_unavailable` when it knows
    /// several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^([A-Za-z0-9][A-Za-z0-9_-]{0,63}(@[1-9][0-9]{0,17})?|sha256:[0-9a-f]{64})$")]
    pub agent: Option<String>,
    /// Pin the new session to this agent digest: only Workers of its agent that loaded it run the
    /// session. It must be a locked bundle a Worker registered (of `agent`, when named). Default:
    /// the digest of the agent the serving process loaded (pinned when that agent is locked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    pub agent_digest: Option<String>,
}

/// `POST /v1/sessions/{id}/messages`: a user message.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// The message's text: not only white space, at most 262144 bytes of UTF-8 (`maxLength`
    /// counts characters, so it is the most a text of one-byte characters can have).
    #[schema(
        min_length = 1,
        max_length = 262144,
        pattern = "[^\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]"
    )]
    pub text: String,
    /// Images the model sees after the text, in order: at most 8, of 2 MiB together (decoded),
    /// PNG, JPEG, GIF or WebP. Each is stored once, by digest (the snapshot lists them with the
    /// message; `GET …/media/{digest}` serves them). A bad one is refused with 400 naming it
    /// (`images[i].source.media_type`, `images[i].source.data`); too many bytes with 413
    /// `image_too_large`; nothing is stored then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(max_items = 8)]
    pub images: Vec<ImageBlock>,
    /// Its idempotency key (the `Idempotency-Key` header wins): 1-200 of letters, digits and
    /// `-_.:/@`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9._:/@-]{1,200}$")]
    pub client_key: Option<String>,
}

/// `POST /v1/sessions/{id}/cancel`: no fields (an empty body is the same as `{}`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelTurn {}

/// An image of a message, as a Messages API image content block:
/// `{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR…"}}`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageBlock {
    /// Always `image`.
    #[serde(rename = "type")]
    pub block_type: ImageBlockType,
    /// The image.
    pub source: ImageSource,
}

/// The `type` of an [`ImageBlock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ImageBlockType {
    /// An image.
    Image,
}

/// Where an image's bytes are: inline, in base64.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageSource {
    /// Always `base64`.
    #[serde(rename = "type")]
    pub source_type: ImageSourceType,
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    #[schema(examples("image/png"), pattern = "^image/(png|jpeg|gif|webp)$")]
    pub media_type: String,
    /// The bytes, standard base64 with padding, of an image of `media_type`: its first bytes
    /// must say so (the document's `oneOf` spells out each type's).
    #[schema(content_encoding = "base64")]
    pub data: String,
}

/// An image's bytes: the body of `GET /v1/sessions/{id}/media/{digest}`.
#[derive(Clone, Debug, ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct ImageBytes(pub Vec<u8>);

/// The `type` of an [`ImageSource`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ImageSourceType {
    /// Inline base64.
    Base64,
}

impl ImageBlock {
    /// A PNG, JPEG, GIF or WebP image of `bytes`.
    pub fn base64(media_type: impl Into<String>, bytes: &[u8]) -> Self {
        use base64::Engine as _;
        ImageBlock {
            block_type: ImageBlockType::Image,
            source: ImageSource {
                source_type: ImageSourceType::Base64,
                media_type: media_type.into(),
                data: base64::engine::general_purpose::STANDARD.encode(bytes),
            },
        }
    }
}

/// `POST /v1/sessions/{id}/interrupts/{interrupt_id}`: a decision.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Decide {
    /// Approve (`true`) or reject.
    pub approved: bool,
    /// For a rejection, what the model reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Edit before approve (only with `approved: true`): the tool's whole input as the approver
    /// changed it. It must fit the tool's input schema (the request's `input_schema`; without
    /// one, any JSON object), else 400 naming the path that failed and nothing is stored. The
    /// call runs with it, the model is told the input was changed and how, and the audit row
    /// keeps both inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub updated_input: Option<Value>,
    /// `call` (default): this call only. `session` (only with `approved: true`): allow for this
    /// session — the tool's later calls in the session skip approval (they still run where their
    /// policy says) and are recorded as approved under this grant (`approved_under` on the call,
    /// an `approved_under_grant` event), until revoked (`DELETE …/grants/{tool}`). Only a
    /// principal who may decide the tool may grant it.
    #[serde(default, skip_serializing_if = "DecideScope::is_call")]
    pub scope: DecideScope,
    /// The decision's idempotency key (the `Idempotency-Key` header wins; without either the
    /// decision itself is the key): 1-200 of letters, digits and `-_.:/@`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9._:/@-]{1,200}$")]
    pub client_key: Option<String>,
}

/// What an approval covers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecideScope {
    /// This call only.
    #[default]
    Call,
    /// This call and the same tool's later calls in the session, until revoked.
    Session,
}

impl DecideScope {
    fn is_call(&self) -> bool {
        *self == DecideScope::Call
    }
}

/// `POST /v1/sessions/{id}/fork`: a new session whose history is this one's up to the end of
/// turn `at_turn`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkSession {
    /// The turn to fork at, from 1: the fork's history ends with it. It must have ended (not the
    /// turn running or waiting for approval now, none of its calls open).
    #[schema(minimum = 1)]
    #[serde(deserialize_with = "whole_number")]
    pub at_turn: i64,
    /// The fork's id: 1-200 of letters, digits and `-_.:/@`; generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[A-Za-z0-9._:/@-]{1,200}$")]
    pub session_id: Option<String>,
    /// The agent version the fork runs under (a name, `NAME@K` or a digest); absent: the
    /// original's agent and digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^([A-Za-z0-9][A-Za-z0-9_-]{0,63}(@[0-9]{1,9})?|sha256:[0-9a-f]{64})$")]
    pub agent_version: Option<String>,
    /// A dry fork: its write calls never run; each is answered from the original's record of the
    /// same tool with the same input, or refused. Otherwise (the default) a fork taken before a
    /// write (a refund) runs it again under the fork's own key.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry: bool,
}

/// `POST /v1/sessions/{id}/upgrade`: the agent digest to pin the session to.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpgradeSession {
    /// The digest.
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    pub to: String,
}

/// `POST /v1/agent-upgrades`: the agent digest to pin sessions to, and which.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpgradeAll {
    /// The digest.
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    pub to: String,
    /// Only sessions under this digest (else every session not already pinned to `to`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    pub from: Option<String>,
}

// ---- Query strings ----

/// The query of `GET /v1/sessions`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListSessionsQuery {
    /// Only sessions of this status: `idle`, `running` or `awaiting_approval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(pattern = "^(idle|running|awaiting_approval)$")]
    pub status: Option<String>,
    /// The `next_after` of the previous page (a session id; at most 200 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(max_length = 200)]
    pub after: Option<String>,
    /// The page's size (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// Only sessions of this agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(pattern = "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
    pub agent: Option<String>,
}

/// The query of `GET /v1/interrupts`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InterruptsQuery {
    /// Only `pending` (the only status listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(pattern = "^pending$")]
    pub status: Option<String>,
    /// The `next_after` of the previous page (opaque, base64url; absent for the first page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(max_length = 1024, pattern = "^[A-Za-z0-9_-]+$")]
    pub after: Option<String>,
    /// The most to list (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// Only approvals of this agent's sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(pattern = "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
    pub agent: Option<String>,
}

/// The query of `GET /v1/attention`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AttentionQuery {
    /// The most to list (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// The query of `GET /v1/sessions/{id}/events`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Resume after this event seq (the `Last-Event-ID` header wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// `false`: send what is stored and end; default `true` (stream live events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<bool>,
    /// `true`: also send the running segment's text as it streams, as `text_delta` events that
    /// are not stored: no SSE `id` (a reconnect resumes after the last stored event), `seq` the
    /// last stored event's, payload `{"turn_id","attempt","offset","text","live":true}`.
    /// `offset` is where `text` starts in the segment's text, in characters (Unicode scalar
    /// values), as in a stored `text_delta`: append what lies past the text you have of that
    /// (`turn_id`, `step_id`, `fence`). Default `false`: stored events only, whose text comes one
    /// event per text block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<bool>,
}

// ---- Sessions and messages ----

/// The answer of `POST /v1/sessions`: 201 when created, 200 when it existed (unchanged).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Created {
    /// `false` when the session existed.
    pub created: bool,
    /// The first message's receipt, when one was sent.
    #[serde(serialize_with = "tollgate_engine::views::sorted_keys")]
    #[schema(required = true)]
    pub message: Option<MessageReceipt>,
    /// The session's id (the one given, or a fresh one).
    pub session_id: String,
}

/// The answer of `POST /v1/sessions/{id}/fork` (201).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Forked {
    /// Where its history comes from.
    pub forked_from: ForkedFrom,
    /// The fork's id.
    pub session_id: String,
}

/// What storing a user message did.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct MessageReceipt {
    /// The message's item seq.
    pub item_seq: i64,
    /// Whether it started a turn; `false` when a running turn picks it up when it ends.
    pub turn_started: bool,
    /// Whether the same key had stored it before.
    pub replayed: bool,
}

/// The answer of a decision.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct DecisionReceipt {
    /// The decision.
    pub approved: bool,
    /// The interrupt decided.
    pub interrupt_id: String,
    /// Whether the same decision had been stored before.
    pub replayed: bool,
    /// The session.
    pub session_id: String,
    /// The approval counted, but the call needs more approvers (its review found it high risk):
    /// it still waits. Omitted when the decision decided it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalProgress>,
}

/// Where a call that needs several approvers stands after an approval that did not decide it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
pub struct ApprovalProgress {
    /// The different principals who approved so far.
    pub approvals: u32,
    /// How many it needs.
    pub required: u32,
}

/// `GET /v1/audit`: a page of the audit trail, oldest first.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct AuditPage {
    /// The decisions.
    pub entries: Vec<AuditRecord>,
    /// Pass as `after` for the next page; `null` on the last page.
    #[schema(required = true)]
    pub next_after: Option<i64>,
}

/// The query of `GET /v1/audit`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only this session's decisions (1-200 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(min_length = 1, max_length = 200)]
    pub session_id: Option<String>,
    /// Only this principal's decisions (1-200 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(min_length = 1, max_length = 200)]
    pub principal: Option<String>,
    /// Only decisions at or after this time (ms since the epoch, database clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 0)]
    pub since: Option<i64>,
    /// Only decisions before this time (ms since the epoch, database clock; exclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 0)]
    pub until: Option<i64>,
    /// The `next_after` of the previous page (an `audit_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// The page's size (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// The body of `POST /v1/sessions/{id}/calls/{call}/check`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    /// What the checker found (e.g. "no refund r_12 in the payments log; retried by hand"), at
    /// most 4096 bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 4096)]
    pub note: Option<String>,
}

/// The answer of `GET /v1/attention`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct AttentionList {
    /// The calls that need attention, oldest change first (at most `limit`).
    pub calls: Vec<AttentionItem>,
    /// The tool components of the caller's agents that a Worker could not load, as `/healthz`
    /// names them: until mended, the model cannot use their tools.
    #[serde(default)]
    #[schema(required = true)]
    pub tools_unavailable: Vec<ToolUnavailable>,
}

/// A page of `GET /v1/sessions`, by id.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct SessionPage {
    /// The `after` of the next page, when there may be one.
    #[schema(required = true)]
    pub next_after: Option<String>,
    /// The sessions, by id.
    pub sessions: Vec<SessionRow>,
}

/// One session of a list.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct SessionRow {
    /// The agent it belongs to; `null`: none yet (from before agents had names; no Worker runs
    /// it until an agent adopts it).
    #[serde(default)]
    #[schema(required = true)]
    pub agent: Option<String>,
    /// The agent digest it runs under; `null`: none recorded.
    #[serde(default)] // A client reads a server older than the field.
    #[schema(required = true)]
    pub agent_digest: Option<String>,
    /// Whether only Workers that loaded `agent_digest` run it.
    #[serde(default)]
    #[schema(required = true)]
    pub agent_pinned: bool,
    /// The number of the agent's pushed version whose digest it runs under (`3` in `support@3`,
    /// the canary's or the current one's); omitted when that digest was never pushed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<i64>,
    /// Creation time (ms since the epoch).
    pub created_at: i64,
    /// Its id.
    pub session_id: String,
    /// Its status.
    #[schema(examples("idle", "running", "awaiting_approval"))]
    pub status: String,
    /// Last change (ms since the epoch).
    pub updated_at: i64,
}

/// The answer of `POST /v1/sessions/{id}/upgrade`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Upgraded {
    /// The digest before (`null`: none was recorded).
    #[schema(required = true)]
    pub from: Option<String>,
    /// Whether it was pinned before.
    #[serde(default)] // A client reads a server older than the field.
    #[schema(required = true)]
    pub from_pinned: bool,
    /// The session.
    pub session_id: String,
    /// The digest it is pinned to now.
    pub to: String,
    /// `false` when it was already pinned to `to` (nothing changed).
    pub upgraded: bool,
}

/// The answer of `POST /v1/agent-upgrades`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct UpgradedAll {
    /// The sessions left because they are running a step.
    pub busy: Vec<BusySession>,
    /// The digest sessions were pinned to.
    pub to: String,
    /// Sessions already pinned to `to`.
    pub unchanged: u64,
    /// The sessions moved.
    pub upgraded: Vec<MovedSession>,
}

/// A session `POST /v1/agent-upgrades` moved.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct MovedSession {
    /// The digest it ran under (`null`: none was recorded).
    #[schema(required = true)]
    pub from: Option<String>,
    /// The session.
    pub session_id: String,
}

/// A session `POST /v1/agent-upgrades` left as it is.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct BusySession {
    /// Why (the store's `session_busy` message).
    pub message: String,
    /// The session.
    pub session_id: String,
}

// ---- The approvals inbox ----

/// The answer of `GET /v1/interrupts?status=pending`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct InterruptList {
    /// The open interrupts across sessions, oldest first.
    pub interrupts: Vec<PendingInterrupt>,
    /// Pass as `after` for the next page; absent when this page is the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
}

/// An approval waiting in the inbox.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct PendingInterrupt {
    /// The arguments the tool would run with (the request's).
    pub arguments: Value,
    /// When it opened (ms since the epoch).
    pub created_at: i64,
    /// Its id (the tool call's).
    pub interrupt_id: String,
    /// What is asked, as stored.
    pub request: ApprovalRequest,
    /// The session it belongs to.
    pub session_id: String,
    /// The tool that waits (the request's).
    pub tool_name: String,
    /// The turn that made the call (the request's).
    pub turn_id: String,
    /// Its batch (the request's; omitted outside a batch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_id: Option<String>,
    /// What the call will do, in one sentence (the request's: the tool policy's `summary`
    /// template rendered with the arguments; plain text). Omitted when the policy has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// When its approval deadline passes (ms since the epoch, database clock): then it is
    /// rejected, or escalated when its policy says so. Omitted: it waits for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<i64>,
    /// When a deadline escalated it to other approvers (ms since the epoch); omitted: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalated_at: Option<i64>,
    /// What the options factory's review told the approver (the request's): its notes and the
    /// call's risk (`null` when the review failed). Omitted when the factory reviews no calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<Review>,
    /// How many different principals must approve (the request's; omitted when one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals_required: Option<u32>,
    /// The approvals made so far, when it needs several (omitted when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<ApprovalSoFar>,
}

/// The query of `GET /v1/interrupts/events`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InboxQuery {
    /// The most pending approvals the stream tracks, oldest first (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// The data of one Server-Sent Event of `GET /v1/interrupts/events` (the live inbox across
/// sessions). Its SSE `event` is `snapshot` (the whole inbox: replace what you have) or
/// `changed` (apply: upsert `interrupts` by session and interrupt id, remove `gone`); its SSE
/// `id` names the inbox's state after it, so a client reconnecting with that `Last-Event-ID`
/// gets no snapshot unless the inbox changed meanwhile.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct InboxEvent {
    /// `snapshot`: every pending approval tracked; `changed`: the ones that opened or changed.
    pub interrupts: Vec<InboxItem>,
    /// The approvals decided (or otherwise closed) since the last event.
    pub gone: Vec<InterruptKey>,
    /// How many approvals are pending across sessions, tracked or not.
    pub total: i64,
}

/// A pending approval as the live inbox sends it: the inbox's entry and what the caller may do.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct InboxItem {
    /// The approval.
    #[serde(flatten)]
    pub interrupt: PendingInterrupt,
    /// The principal that started its session (`null`: not recorded).
    #[schema(required = true)]
    pub started_by: Option<String>,
    /// The agent its session runs (`null`: the session names none).
    #[schema(required = true)]
    pub agent: Option<String>,
    /// Whether the caller may decide it, and if not why (the 403 a decision would get).
    pub decide: DecideRight,
}

/// Whether the caller may decide an approval: the same rules `POST …/interrupts/{id}` applies.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct DecideRight {
    /// `true`: a decision by the caller would be accepted (as far as who decides goes).
    pub allowed: bool,
    /// When not: `role_required`, `group_required` or `own_session`.
    #[schema(required = true)]
    pub code: Option<ErrorCode>,
    /// When not: the refusal's text, naming the role or group needed.
    #[schema(required = true)]
    pub reason: Option<String>,
}

/// An approval's key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, ToSchema)]
pub struct InterruptKey {
    /// The session.
    pub session_id: String,
    /// The interrupt.
    pub interrupt_id: String,
}

/// `GET /v1/me`: who the caller is and what the server's rules are.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Me {
    /// The principal's name (`tollgate:token` for `--token`, `tollgate:open` without auth).
    pub name: String,
    /// Its roles: `viewer`, `client`, `approver`, `admin`.
    pub roles: Vec<String>,
    /// Its groups.
    pub groups: Vec<String>,
    /// The only principal there is (the `--token` holder without an auth file, or everyone on an
    /// open server): approver groups and separation of duties do not apply to it.
    pub sole: bool,
    /// Whether nobody decides an interrupt of a session they started.
    pub separation_of_duties: bool,
    /// The agents whose sessions it sees and acts on (absent: every agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
}

/// The answer of `GET /v1/agents`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct AgentList {
    /// Every agent the caller may see, by name.
    pub agents: Vec<AgentInfo>,
}

/// An agent: its versions in the store and the bundles its Workers loaded.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct AgentInfo {
    /// Its name.
    pub name: String,
    /// The version new sessions get (`null`: no version pushed).
    #[schema(required = true)]
    pub current: Option<i64>,
    /// Its versions pushed into the store, oldest first.
    pub versions: Vec<AgentVersionInfo>,
    /// The bundles its Workers and servers loaded, by first load.
    pub loaded: Vec<LoadedBundle>,
    /// Its tool components that a Worker could not load, as `/healthz` names them.
    #[serde(default)]
    #[schema(required = true)]
    pub tools_unavailable: Vec<ToolUnavailable>,
}

/// A version of an agent in the store.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct AgentVersionInfo {
    /// Its number, from 1.
    pub version: i64,
    /// Its agent digest.
    pub digest: String,
    /// Whether new sessions get it.
    pub current: bool,
    /// The percent of new sessions it gets as the canary (`null`: not the canary).
    #[schema(required = true)]
    pub canary_share: Option<i64>,
    /// Sessions that recorded its digest.
    pub sessions: i64,
    /// Who pushed it.
    pub pushed_by: String,
    /// When (ms since the epoch).
    pub pushed_at: i64,
}

/// A bundle a Worker or server of an agent loaded.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct LoadedBundle {
    /// Its agent digest.
    pub digest: String,
    /// Whether it was locked when last loaded.
    pub locked: bool,
    /// When it was first loaded (ms since the epoch).
    pub first_seen_at: i64,
    /// When it was last loaded.
    pub last_seen_at: i64,
}

// ---- Events ----

/// The data of one Server-Sent Event of `GET /v1/sessions/{id}/events` (its SSE `id` is `seq`,
/// its SSE `event` is `kind`). Group live text by (`payload.turn_id`, `step_id`, `fence`).
///
/// What the model writes, thinks and does inside a segment: `text_delta` and `reasoning_delta`
/// (its visible thinking), each stored one block at a time as `{"turn_id","attempt","offset",
/// "text"}` with `offset` in characters of the segment's text or thinking; and, for each inline
/// tool call (a custom read, or a CLI tool such as `Read`, `Grep`, an allowed `Bash`, or an
/// external MCP server's tool), `tool_call_started` `{"turn_id","attempt","tool_call_id",
/// "tool_name","kind","arguments","deferred":false}` and `tool_call_finished` `{…,"status"}`
/// (`succeeded` or `failed`), `kind` `custom` or `cli`. A deferred call's events come from its
/// steps, with `"deferred":true`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct StreamEvent {
    /// Its seq (also the SSE `id`).
    pub seq: i64,
    /// Its kind, e.g. `text_delta`.
    #[schema(schema_with = event_kind_schema)]
    pub kind: String,
    /// The step that wrote it, if one did.
    #[schema(required = true)]
    pub step_id: Option<i64>,
    /// That step's fence (a retried attempt has a higher one).
    #[schema(required = true)]
    pub fence: Option<i64>,
    /// When it was stored (ms since the epoch).
    pub created_at: i64,
    /// The kind's payload, byte for byte as stored.
    #[schema(value_type = Object)]
    pub payload: Box<RawValue>,
}

/// The schema of [`StreamEvent::kind`]: a string, each [`EventKind`] an example (a kind the
/// engine adds is listed without an edit here).
fn event_kind_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::Type::String)
        .description(Some("Its kind, e.g. `text_delta`."))
        .examples(EventKind::ALL.iter().map(|kind| kind.as_str()))
        .build()
}

impl StreamEvent {
    /// The payload as a JSON value.
    pub fn payload_value(&self) -> Value {
        serde_json::from_str(self.payload.get()).unwrap_or(Value::Null)
    }
}

/// The data of the SSE `error` event that ends a stream the store failed under; the client
/// resumes with `Last-Event-ID`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct StreamError {
    /// What failed.
    pub error: String,
}

// ---- Health ----

/// The answer of `/healthz`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, `degraded` (reads work, but writes do not, steps wait that no Worker claims, or tool
    /// components of a Worker did not load) or
    /// `down` (503).
    pub status: HealthStatus,
    /// The store's probes.
    pub store: StoreHealth,
    /// Steps due for longer than the server's bound (`--unclaimable-after-secs`) that no Worker
    /// claimed, by agent: no Worker serves the agent or its pinned bundle, or all are busy.
    #[serde(default)]
    #[schema(required = true)]
    pub unclaimable: Vec<Unclaimable>,
    /// The tool components that a Worker of any agent on this store could not load at its last
    /// look at `tools/` (the others serve), as the Workers report them to the store, by agent,
    /// component and Worker: the status is then `degraded`. Absent when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools_unavailable: Vec<ToolUnavailable>,
    /// How this process's Worker runs the agent's CLIs: `bwrap` (each in a box) or `none` (on the
    /// host, unboxed); absent without a Worker (`tollgate api`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

/// A tool component that a Worker could not load: the model reads that its tools are
/// unavailable when it calls one, until the file is mended.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
pub struct ToolUnavailable {
    /// The agent.
    pub agent: String,
    /// The component (its file's stem in `tools/`).
    pub component: String,
    /// Why it did not load.
    pub reason: String,
    /// The Worker that reported it (its `--worker-id`; Workers of one agent may see different
    /// files).
    #[serde(default)]
    #[schema(required = true)]
    pub worker: String,
    /// Whether its last good build (an earlier version of the file) still serves its tools; else
    /// the component serves nothing.
    #[serde(default)]
    #[schema(required = true)]
    pub serving_last_good: bool,
    /// The Worker has reported it unavailable without a break at least since then (ms since the
    /// epoch, the store's clock: when that Worker's list of unavailable components last changed).
    #[serde(default)]
    #[schema(required = true)]
    pub since: i64,
}

/// Steps of one agent that no Worker claimed for longer than the bound.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
pub struct Unclaimable {
    /// The agent (`""`: sessions that name none, which no Worker runs until an agent adopts them).
    pub agent: String,
    /// How many steps.
    pub steps: i64,
    /// Since when the oldest has been due (ms since the epoch, database clock).
    pub oldest_due_at: i64,
}

/// How healthy the server is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HealthStatus {
    /// The store reads and can take a write.
    Ok,
    /// The store reads but cannot take a write, or steps wait that no Worker claims (200).
    Degraded,
    /// The store cannot be read (503).
    Down,
}

/// The store's read and write probes (the write probe writes nothing).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct StoreHealth {
    /// The first failure's text.
    #[schema(required = true)]
    pub error: Option<String>,
    /// Whether a read worked.
    pub readable: bool,
    /// Why a probe failed, e.g. `read_only`, `disk_full`, `unreachable`, `pool_timeout`, `error`.
    #[schema(required = true)]
    pub reason: Option<String>,
    /// Whether the store can take a write.
    pub writable: bool,
}

// ---- Errors ----

/// Every error answer: `{"error":{"code","field","message"}}`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What went wrong.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// What kind of error.
    pub code: ErrorCode,
    /// The request's field, query parameter or header that was wrong, when one was.
    #[schema(required = true)]
    pub field: Option<String>,
    /// What happened, naming the value or limit.
    pub message: String,
    /// 403 only: the roles (`role_required`) or groups (`group_required`) that would be allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed: Option<Vec<String>>,
}

/// The code of an error answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400: a field, query parameter, header or path id is wrong (named in `field`).
    InvalidRequest,
    /// 400: the body is not JSON (the position in `message`).
    InvalidJson,
    /// 413: the body is over the limit.
    BodyTooLarge,
    /// 413: a message's images are over their limit together (named in `message`).
    ImageTooLarge,
    /// 415: the body is not `application/json`.
    UnsupportedMediaType,
    /// 401: the bearer token is missing or wrong.
    Unauthorized,
    /// 403: the principal's roles do not allow this (the roles that would in `needed`).
    RoleRequired,
    /// 403: the tool's policy lets only some groups decide it (named in `needed`).
    GroupRequired,
    /// 403: the principal started the session, so another must decide (separation of duties).
    OwnSession,
    /// 403: a `client` cancels only the turns of sessions it started.
    NotOwnSession,
    /// 403: the principal is limited to other agents than the one asked for.
    AgentNotAllowed,
    /// 404: no such route.
    NotFound,
    /// 405: the route does not take this method.
    MethodNotAllowed,
    /// 404: no such session.
    SessionNotFound,
    /// 404: no such interrupt.
    InterruptNotFound,
    /// 404: the session holds no image of that digest.
    MediaNotFound,
    /// 404: the session has no grant in force for the tool.
    GrantNotFound,
    /// 409: the interrupt was decided otherwise before.
    InterruptAlreadyResolved,
    /// 409: the interrupt's approval deadline passed before the decision (named in `message`).
    InterruptExpired,
    /// 409: the principal already approved this call, which needs several different approvers.
    AlreadyApproved,
    /// 404: the session has no tool call with that id.
    ToolCallNotFound,
    /// 409: the tool call needs no attention (its outcome is known and it did not fail).
    NothingToCheck,
    /// 409: the idempotency key was used for another request.
    IdempotencyConflict,
    /// 409: the session is running a step.
    SessionBusy,
    /// 409: the session has no turn in progress to cancel.
    NoTurnRunning,
    /// 409: no agent fits what the request names (none or several known, an unknown name, a
    /// digest no Worker loaded or loaded unlocked), so no Worker would run the session.
    AgentUnavailable,
    /// 409: the interrupt's turn is being cancelled, so it is decided by nobody.
    TurnCancelling,
    /// 404: the session has no such turn (a fork's `at_turn`).
    TurnNotFound,
    /// 409: the turn cannot be forked at: it is still running, waits for approval, has open
    /// tasks, or stored no answer (named in `message`).
    ForkRefused,
    /// 409: a session with the id asked for exists already.
    SessionExists,
    /// 503: the store cannot take the request now (a `Retry-After` header says when to retry).
    StoreUnavailable,
    /// 503: the server runs as many requests at once as it takes; retry (here or on another
    /// replica) after `Retry-After`.
    Overloaded,
    /// 503: the request ran past the server's time bound and was stopped; a write may have landed,
    /// so repeat it with the same idempotency key.
    RequestTimeout,
    /// 500: a stored row cannot be read (named in `message`).
    StoredRowRefused,
    /// 500: the store failed.
    StoreError,
}

impl ErrorCode {
    /// The code as sent.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidJson => "invalid_json",
            ErrorCode::BodyTooLarge => "body_too_large",
            ErrorCode::ImageTooLarge => "image_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::RoleRequired => "role_required",
            ErrorCode::GroupRequired => "group_required",
            ErrorCode::OwnSession => "own_session",
            ErrorCode::NotOwnSession => "not_own_session",
            ErrorCode::AgentNotAllowed => "agent_not_allowed",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::SessionNotFound => "session_not_found",
            ErrorCode::InterruptNotFound => "interrupt_not_found",
            ErrorCode::MediaNotFound => "media_not_found",
            ErrorCode::GrantNotFound => "grant_not_found",
            ErrorCode::InterruptAlreadyResolved => "interrupt_already_resolved",
            ErrorCode::InterruptExpired => "interrupt_expired",
            ErrorCode::AlreadyApproved => "already_approved",
            ErrorCode::ToolCallNotFound => "tool_call_not_found",
            ErrorCode::NothingToCheck => "nothing_to_check",
            ErrorCode::IdempotencyConflict => "idempotency_conflict",
            ErrorCode::SessionBusy => "session_busy",
            ErrorCode::NoTurnRunning => "no_turn_running",
            ErrorCode::AgentUnavailable => "agent_unavailable",
            ErrorCode::TurnCancelling => "turn_cancelling",
            ErrorCode::TurnNotFound => "turn_not_found",
            ErrorCode::ForkRefused => "fork_refused",
            ErrorCode::SessionExists => "session_exists",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::StoredRowRefused => "stored_row_refused",
            ErrorCode::StoreError => "store_error",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn wire(value: &impl Serialize) -> String {
        serde_json::to_string(value).expect("serializes")
    }

    #[test]
    fn bodies_go_out_byte_for_byte_as_the_api_has_always_sent_them() {
        let receipt = MessageReceipt { item_seq: 3, turn_started: true, replayed: false };
        assert_eq!(wire(&receipt), r#"{"item_seq":3,"turn_started":true,"replayed":false}"#);
        // Nested in `Created` it went out sorted.
        let created = Created { created: true, message: Some(receipt), session_id: "s".into() };
        assert_eq!(
            wire(&created),
            r#"{"created":true,"message":{"item_seq":3,"replayed":false,"turn_started":true},"session_id":"s"}"#
        );
        let created = Created { message: None, ..created };
        assert_eq!(wire(&created), r#"{"created":true,"message":null,"session_id":"s"}"#);
        let error = ErrorBody {
            error: ErrorDetail {
                code: ErrorCode::InvalidJson,
                field: None,
                message: "m".into(),
                needed: None,
            },
        };
        assert_eq!(wire(&error), r#"{"error":{"code":"invalid_json","field":null,"message":"m"}}"#);
        let message = Message { role: "user".into(), text: "hi".into(), pending: false, images: Vec::new() };
        assert_eq!(wire(&message), r#"{"role":"user","text":"hi"}"#);
        let health = Health {
            status: HealthStatus::Degraded,
            store: StoreHealth {
                error: Some("e".into()),
                readable: true,
                reason: Some("read_only".into()),
                writable: false,
            },
            unclaimable: vec![Unclaimable { agent: "billing".into(), steps: 2, oldest_due_at: 7 }],
            tools_unavailable: Vec::new(),
            sandbox: None,
        };
        assert_eq!(
            wire(&health),
            r#"{"status":"degraded","store":{"error":"e","readable":true,"reason":"read_only","writable":false},"unclaimable":[{"agent":"billing","steps":2,"oldest_due_at":7}]}"#
        );
        let boxed = Health { sandbox: Some("bwrap".into()), ..health };
        assert!(wire(&boxed).ends_with(r#""sandbox":"bwrap"}"#), "{}", wire(&boxed));
        let event = StreamEvent {
            seq: 4,
            kind: "text_delta".into(),
            step_id: None,
            fence: None,
            created_at: 9,
            payload: RawValue::from_string(r#"{"z":1, "a":2}"#.into()).unwrap(),
        };
        assert_eq!(
            wire(&event),
            r#"{"seq":4,"kind":"text_delta","step_id":null,"fence":null,"created_at":9,"payload":{"z":1, "a":2}}"#
        );
    }

    #[test]
    fn a_snapshot_s_tool_calls_go_out_with_their_keys_sorted_and_read_back_the_same() {
        let call = ToolCall {
            arguments: json!({"order_id": "7"}),
            original_arguments: None,
            grants_session: None,
            approved_under: None,
            batch_id: None,
            decided_ahead: None,
            kind: ToolKind::Custom,
            requires_approval: true,
            runs_in: DeferredRun::CallSingleAttemptTool,
            state: CallState::Rejected { message: None },
            images: Vec::new(),
            diagnostics: None,
            tool_call_id: "toolu_1".into(),
            tool_name: "create_refund".into(),
            turn_id: "t1".into(),
            checked: None,
        };
        let started = ToolCall { state: CallState::Started { attempt: 2 }, ..call.clone() };
        let snapshot = Snapshot {
            live_text: None,
            session_id: "s".into(),
            status: "idle".into(),
            messages: Vec::new(),
            pending_interrupts: Vec::new(),
            tool_calls: vec![call, started],
            usage: Usage { input_tokens: 1, cached_input_tokens: 0, output_tokens: 2, model_calls: 1 },
            cost_usd: 0.25,
            last_turn_error: None,
            last_turn_cancelled: None,
            cancel_requested: None,
            turn_id: None,
            next_event_seq: 7,
            started_by: Some("carl".into()),
            agent: Some("support".into()),
            unclaimable_since: None,
            decisions: Vec::new(),
            grants: Vec::new(),
            forked_from: None,
        };
        let text = wire(&snapshot);
        assert_eq!(
            text,
            concat!(
                r#"{"session_id":"s","status":"idle","messages":[],"pending_interrupts":[],"tool_calls":["#,
                r#"{"arguments":{"order_id":"7"},"kind":"custom","message":null,"requires_approval":true,"runs_in":"call_single_attempt_tool","status":"rejected","tool_call_id":"toolu_1","tool_name":"create_refund","turn_id":"t1"},"#,
                r#"{"arguments":{"order_id":"7"},"attempt":2,"kind":"custom","requires_approval":true,"runs_in":"call_single_attempt_tool","status":"started","tool_call_id":"toolu_1","tool_name":"create_refund","turn_id":"t1"}],"#,
                r#""usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":2,"model_calls":1},"#,
                r#""cost_usd":0.25,"last_turn_error":null,"turn_id":null,"next_event_seq":7,"#,
                r#""started_by":"carl","agent":"support","decisions":[],"grants":[]}"#
            )
        );
        let back: Snapshot = serde_json::from_str(&text).unwrap();
        assert_eq!(back.tool_calls, snapshot.tool_calls);
    }

    #[test]
    fn every_error_code_is_sent_as_its_name() {
        for code in [
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidJson,
            ErrorCode::BodyTooLarge,
            ErrorCode::ImageTooLarge,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::Unauthorized,
            ErrorCode::RoleRequired,
            ErrorCode::GroupRequired,
            ErrorCode::OwnSession,
            ErrorCode::NotOwnSession,
            ErrorCode::AgentNotAllowed,
            ErrorCode::NotFound,
            ErrorCode::MethodNotAllowed,
            ErrorCode::SessionNotFound,
            ErrorCode::InterruptNotFound,
            ErrorCode::MediaNotFound,
            ErrorCode::GrantNotFound,
            ErrorCode::InterruptAlreadyResolved,
            ErrorCode::InterruptExpired,
            ErrorCode::AlreadyApproved,
            ErrorCode::ToolCallNotFound,
            ErrorCode::NothingToCheck,
            ErrorCode::IdempotencyConflict,
            ErrorCode::SessionBusy,
            ErrorCode::NoTurnRunning,
            ErrorCode::AgentUnavailable,
            ErrorCode::TurnCancelling,
            ErrorCode::TurnNotFound,
            ErrorCode::ForkRefused,
            ErrorCode::SessionExists,
            ErrorCode::StoreUnavailable,
            ErrorCode::Overloaded,
            ErrorCode::RequestTimeout,
            ErrorCode::StoredRowRefused,
            ErrorCode::StoreError,
        ] {
            assert_eq!(wire(&code), format!("\"{code}\""));
        }
    }
}

/// A whole number, also written with a zero fraction (`3.0`): JSON Schema's `integer`, which the
/// API document promises, admits both.
fn whole_number<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    use serde::de::Error as _;
    let number = serde_json::Number::deserialize(deserializer)?;
    if let Some(n) = number.as_i64() {
        return Ok(n);
    }
    match number.as_f64() {
        // i64::MAX as f64 rounds up to 2^63, which is out of range.
        Some(f) if f.fract() == 0.0 && f >= -(2f64.powi(63)) && f < 2f64.powi(63) => Ok(f as i64),
        _ => Err(D::Error::custom(format!("expected a whole number, found {number}"))),
    }
}

#[cfg(test)]
mod whole_number_tests {
    use super::ForkSession;

    #[test]
    fn a_turn_may_be_written_with_a_zero_fraction_but_not_with_another() {
        let fork = |body: &str| serde_json::from_str::<ForkSession>(body).map(|f| f.at_turn);
        assert_eq!(fork(r#"{"at_turn":3}"#).unwrap(), 3);
        assert_eq!(fork(r#"{"at_turn":1988270420.0}"#).unwrap(), 1_988_270_420);
        let error = fork(r#"{"at_turn":1.5}"#).unwrap_err().to_string();
        assert!(error.contains("expected a whole number, found 1.5"), "{error}");
        assert!(fork(r#"{"at_turn":1e300}"#).is_err());
        assert!(fork(r#"{"at_turn":"3"}"#).is_err());
    }
}
