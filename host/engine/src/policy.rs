//! Tool policies: how a tool call touches the world, and whether a human approves it first.
//!
//! This module owns the `[policies]` table of `tollgate.toml` (parsing and validation), the
//! resolution order that gives every tool a [`ToolPolicy`], and what a policy means for a call
//! ([`Handling`]). It does not decide one concrete call — that is [`crate::gate`], which adds the
//! segment's state — and it knows nothing of TOML files: the caller hands it the table as a
//! [`serde_json::Value`] or through serde ([`Policies`] implements `Deserialize`).
//!
//! Read [`Policies`] first, then [`ToolPolicy::handling`].
//!
//! # The table
//!
//! ```toml
//! [policies]                   # by tool name: a custom tool's own name, a built-in, or mcp__<server>__<tool>
//! default_effect = "unclassified"
//! create_refund = { effect = "non_idempotent_write", requires_approval = true, approvers = ["finance"] }
//! Bash = { effect = "unclassified", approval_timeout_secs = 600, on_timeout = "escalate", escalate_to = ["oncall"] }
//! Read = { effect = "read" }
//! ```
//!
//! - `default_effect` (optional, default `unclassified`) classifies a tool that neither a policy
//!   nor annotations classify. The key is reserved: no policy can name a tool `default_effect`.
//! - Every other key names a tool and maps to a table with `effect` (required: `read`,
//!   `idempotent_write`, `non_idempotent_write` or `unclassified`) and `requires_approval`
//!   (optional boolean; without it the effect's default below applies), and `approvers`
//!   (optional array of group names: only a principal in one of these groups may decide a call
//!   of the tool; see [`Policies::approvers`]), `inline` (optional boolean, only for
//!   `idempotent_write`: see "Inline writes" below), `summary` (optional: the sentence an approver
//!   reads first, e.g. `"Refund {amount_cents|money:EUR} on order {order_id}"`; see
//!   [`crate::summary`]), `confirm_above` (optional: `{ amount_cents = 100000 }` makes an
//!   approver confirm a call whose argument is above the number; see [`ConfirmAbove`]),
//!   `high_risk_approvers` (optional integer 1 to [`MAX_HIGH_RISK_APPROVERS`]: a call the options
//!   factory's review finds `high` risk needs that many different approvers; see
//!   [`Policies::high_risk_approvers`]), and the deadline fields below. Other fields are errors.
//! - Deadlines (see [`Policies::deadline`], [`ApprovalDeadline`]): `approval_timeout_secs`
//!   (a positive integer, at most [`MAX_TIMEOUT_SECS`]) makes a call of the tool that waits for
//!   approval act by itself once that long passed undecided: `on_timeout = "reject"` (the
//!   default) rejects it with a text the model reads; `on_timeout = "escalate"` hands it to the
//!   groups `escalate_to` (required, non-empty) and, if they do not decide within
//!   `escalation_timeout_secs` (default: the same as `approval_timeout_secs`), rejects it.
//!   `on_timeout`, `escalate_to` and `escalation_timeout_secs` need `approval_timeout_secs`;
//!   `escalate_to` and `escalation_timeout_secs` need `on_timeout = "escalate"`; a deadline on a
//!   tool that needs no approval is an error.
//! - A custom tool is named bare (`create_refund`, not `mcp__tools__create_refund`);
//!   [`crate::catalog::ToolCatalog::check_policies`] rejects the prefixed form.
//!
//! # Resolution order
//!
//! 1. An explicit policy for the tool's name.
//! 2. For a custom tool without one, its annotations: `read_only` is `read`; otherwise
//!    `idempotent` is `idempotent_write`, whatever `destructive` says.
//! 3. `default_effect`.
//!
//! `requires_approval` is the policy's own value when it gives one, otherwise the effect's default
//! ([`Effect::default_requires_approval`]): `read` and `idempotent_write` need none,
//! `non_idempotent_write` and `unclassified` do (the reference adapters' "Effects and policies",
//! column "Default approval").
//!
//! # Inline writes
//!
//! An approval-free `idempotent_write` custom tool runs **inside the segment** by default, like a
//! read, but recorded: [`Handling::Recorded`] (the Worker commits its record under the key
//! `<session>/<turn>/<tool call>` before the CLI reads the result). `inline = false` keeps the
//! deferred `CallTool` step (the segment ends, a second CLI resumes). [`Policies::handling`] is
//! the one that reads `inline`; [`ToolPolicy::handling`] is the table without it.
//!
//! ```
//! use serde_json::json;
//! use tollgate_engine::catalog::ToolKind;
//! use tollgate_engine::policy::{Effect, Handling, Policies};
//!
//! let policies = Policies::from_value(&json!({
//!     "default_effect": "unclassified",
//!     "create_refund": { "effect": "non_idempotent_write" },
//!     "Read": { "effect": "read" },
//! }))?;
//! let refund = policies.resolve("create_refund", None);
//! assert_eq!(refund.effect, Effect::NonIdempotentWrite);
//! assert!(refund.requires_approval);
//! assert!(refund.handling(ToolKind::Custom).is_deferred());
//! assert_eq!(policies.resolve("Read", None).handling(ToolKind::Cli), Handling::Inline);
//! // Bash has no policy: the default effect makes every call wait for approval.
//! assert!(policies.resolve("Bash", None).requires_approval);
//! # Ok::<(), tollgate_engine::policy::PolicyError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::catalog::ToolKind;
use crate::summary::Summary;

/// The key of the `[policies]` table that holds the default effect.
pub const DEFAULT_EFFECT_KEY: &str = "default_effect";

/// How a tool call touches the world (docs/ARCHITECTURE.md, "The gate's rules"). Serialized in
/// snake_case, as in `tollgate.toml`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Safe to repeat; changes nothing.
    Read,
    /// A write that is safe to repeat with the same idempotency key.
    IdempotentWrite,
    /// A write that must run at most once.
    NonIdempotentWrite,
    /// Nothing is known; treated like [`Effect::NonIdempotentWrite`].
    Unclassified,
}

impl Effect {
    /// Every effect, in table order.
    pub const ALL: [Effect; 4] =
        [Effect::Read, Effect::IdempotentWrite, Effect::NonIdempotentWrite, Effect::Unclassified];

    /// The name used in `tollgate.toml` and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Read => "read",
            Effect::IdempotentWrite => "idempotent_write",
            Effect::NonIdempotentWrite => "non_idempotent_write",
            Effect::Unclassified => "unclassified",
        }
    }

    /// Whether a policy of this effect without its own `requires_approval` waits for approval
    /// (the reference adapters' "Effects and policies", column "Default approval").
    pub fn default_requires_approval(self) -> bool {
        match self {
            Effect::Read | Effect::IdempotentWrite => false,
            Effect::NonIdempotentWrite | Effect::Unclassified => true,
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of [`Effect::from_str`]: the text names no effect.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown effect `{0}`; expected one of read, idempotent_write, non_idempotent_write, unclassified")]
pub struct UnknownEffect(pub String);

impl FromStr for Effect {
    type Err = UnknownEffect;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Effect::ALL.into_iter().find(|effect| effect.as_str() == s).ok_or_else(|| UnknownEffect(s.to_owned()))
    }
}

/// A custom tool's own hints about its effect (the WIT `annotations` record, MCP `*Hint`s).
///
/// Only `read_only` and `idempotent` classify a tool; `destructive` and `open_world` are kept for
/// display and never change the effect.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Annotations {
    /// MCP `readOnlyHint`.
    pub read_only: bool,
    /// MCP `idempotentHint`.
    pub idempotent: bool,
    /// MCP `destructiveHint`.
    pub destructive: bool,
    /// MCP `openWorldHint`.
    pub open_world: bool,
}

impl Annotations {
    /// The effect these hints give, if any: `read_only` is `read`; otherwise `idempotent` is
    /// `idempotent_write`, whatever `destructive` says (the TypeScript reference adapter's
    /// "Effects and policies").
    pub fn effect(&self) -> Option<Effect> {
        if self.read_only {
            Some(Effect::Read)
        } else if self.idempotent {
            Some(Effect::IdempotentWrite)
        } else {
            None
        }
    }
}

/// One entry of the `[policies]` table, as written: the approval is optional.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PolicyEntry {
    /// The tool's effect.
    pub effect: Effect,
    /// `requires_approval` when the entry gives it.
    pub requires_approval: Option<bool>,
    /// `inline` when the entry gives it (only for `idempotent_write`): `Some(false)` keeps the
    /// deferred `CallTool` step of an approval-free call.
    pub inline: Option<bool>,
}

impl PolicyEntry {
    /// An entry with the effect's default approval.
    pub fn new(effect: Effect) -> Self {
        Self { effect, requires_approval: None, inline: None }
    }

    /// The same entry with an explicit approval.
    pub fn with_approval(self, requires_approval: bool) -> Self {
        Self { requires_approval: Some(requires_approval), ..self }
    }

    /// The same entry with an explicit `inline` (meaningful for `idempotent_write` only;
    /// [`Policies::from_value`] refuses it on other effects).
    pub fn with_inline(self, inline: bool) -> Self {
        Self { inline: Some(inline), ..self }
    }

    /// The policy this entry gives.
    pub fn policy(&self) -> ToolPolicy {
        ToolPolicy {
            effect: self.effect,
            requires_approval: self.requires_approval.unwrap_or(self.effect.default_requires_approval()),
        }
    }
}

/// A resolved policy: the effect and whether a call waits for approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolPolicy {
    /// The tool's effect.
    pub effect: Effect,
    /// Whether a call waits in `AwaitToolApproval` before it runs.
    pub requires_approval: bool,
}

impl ToolPolicy {
    /// The policy of `effect` with its default approval.
    pub fn new(effect: Effect) -> Self {
        PolicyEntry::new(effect).policy()
    }

    /// How a call of a tool of `kind` under this policy runs (the reference adapters' "Effects and
    /// policies").
    ///
    /// | policy | custom tool | CLI tool |
    /// | --- | --- | --- |
    /// | `read`, no approval | inline | inline |
    /// | `read`, approval | deferred, `CallTool` | deferred, resumed segment |
    /// | `idempotent_write` | deferred, `CallTool` | inline without approval, else resumed segment |
    /// | `non_idempotent_write`, `unclassified` | deferred, `CallSingleAttemptTool` | inline without approval, else resumed segment |
    ///
    /// A CLI tool with an approval-free write policy runs inline "because deferring it would not
    /// make it durable".
    pub fn handling(&self, kind: ToolKind) -> Handling {
        let requires_approval = self.requires_approval;
        match kind {
            ToolKind::Custom => match self.effect {
                Effect::Read if !requires_approval => Handling::Inline,
                Effect::Read | Effect::IdempotentWrite => {
                    Handling::Deferred { requires_approval, runs_in: DeferredRun::CallTool }
                }
                Effect::NonIdempotentWrite | Effect::Unclassified => {
                    Handling::Deferred { requires_approval, runs_in: DeferredRun::CallSingleAttemptTool }
                }
            },
            ToolKind::Cli if requires_approval => {
                Handling::Deferred { requires_approval, runs_in: DeferredRun::ResumedSegment }
            }
            ToolKind::Cli => Handling::Inline,
        }
    }
}

/// How a call runs, from its policy and the kind of tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "handling", rename_all = "snake_case")]
pub enum Handling {
    /// Runs inside the segment (`RunModel`); not recorded, repeated when the segment reruns.
    Inline,
    /// Runs inside the segment like [`Handling::Inline`], under the idempotency key
    /// `<session>/<turn>/<tool call>` with `CallTool`'s 3 attempts, and its record is committed
    /// before the CLI reads the result; a rerun of the segment replays the record. Only
    /// [`Policies::handling`] gives it: an approval-free `idempotent_write` custom tool whose
    /// policy does not say `inline = false`.
    Recorded,
    /// Leaves the segment: the gate defers it, the session records it.
    Deferred {
        /// Whether it waits in `AwaitToolApproval` first.
        requires_approval: bool,
        /// Where it runs once approved.
        runs_in: DeferredRun,
    },
}

impl Handling {
    /// Whether the call must leave the segment (the gate's "deferrable").
    pub fn is_deferred(&self) -> bool {
        matches!(self, Handling::Deferred { .. })
    }
}

/// Where a deferred call runs once approved (docs/ARCHITECTURE.md, "One turn", step 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum DeferredRun {
    /// A custom tool in `CallTool`: up to 3 attempts under one idempotency key.
    CallTool,
    /// A custom tool in `CallSingleAttemptTool`: one attempt; a crash records `outcome_unknown`.
    CallSingleAttemptTool,
    /// A CLI tool: the session records the approval and the CLI runs it in the resumed segment.
    ResumedSegment,
}

/// Where a resolved policy came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicySource {
    /// An entry of the `[policies]` table.
    Explicit,
    /// The custom tool's annotations.
    Annotations,
    /// `default_effect`.
    Default,
}

/// The most `high_risk_approvers` a tool may ask for.
pub const MAX_HIGH_RISK_APPROVERS: u32 = 5;

/// The longest `approval_timeout_secs` or `escalation_timeout_secs`: ten years.
pub const MAX_TIMEOUT_SECS: u64 = 10 * 365 * 24 * 3600;

/// The policy fields a tool's entry may have.
const FIELDS: [&str; 11] = [
    "effect",
    "summary",
    "confirm_above",
    "high_risk_approvers",
    "requires_approval",
    "inline",
    "approvers",
    "approval_timeout_secs",
    "on_timeout",
    "escalate_to",
    "escalation_timeout_secs",
];

/// What a deadline does when it passes with the call undecided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// Reject the call; the model reads why.
    #[default]
    Reject,
    /// Hand the call to the `escalate_to` groups, with a second deadline that rejects.
    Escalate,
}

impl OnTimeout {
    /// The name in `tollgate.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnTimeout::Reject => "reject",
            OnTimeout::Escalate => "escalate",
        }
    }
}

/// A tool's approval deadline: what happens when a call of it waits undecided too long (the
/// policy's deadline fields, see the module docs). Stamped, resolved, into each approval
/// interrupt's request as `deadline` (`crate::session::turn::with_deadlines`), so a process that
/// fires it needs no agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDeadline {
    /// How long a call may wait for a decision (seconds).
    pub approval_timeout_secs: u64,
    /// What happens then.
    pub on_timeout: OnTimeout,
    /// The groups who may decide after an escalation (non-empty exactly when escalating).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalate_to: Vec<String>,
    /// How long the escalated call may wait before it is rejected (seconds); `None` in the table
    /// means the default, [`ApprovalDeadline::second_timeout_secs`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation_timeout_secs: Option<u64>,
}

impl ApprovalDeadline {
    /// A deadline that rejects after `secs`.
    pub fn reject_after(secs: u64) -> Self {
        ApprovalDeadline {
            approval_timeout_secs: secs,
            on_timeout: OnTimeout::Reject,
            escalate_to: Vec::new(),
            escalation_timeout_secs: None,
        }
    }

    /// A deadline that escalates to `groups` after `secs`, then rejects after `then_secs`
    /// (`None`: as long again).
    pub fn escalate_after(secs: u64, groups: Vec<String>, then_secs: Option<u64>) -> Self {
        ApprovalDeadline {
            approval_timeout_secs: secs,
            on_timeout: OnTimeout::Escalate,
            escalate_to: groups,
            escalation_timeout_secs: then_secs,
        }
    }

    /// The second deadline after an escalation: `escalation_timeout_secs`, by default as long as
    /// the first (`approval_timeout_secs`), so the escalated group gets the time the first had.
    pub fn second_timeout_secs(&self) -> u64 {
        self.escalation_timeout_secs.unwrap_or(self.approval_timeout_secs)
    }

    /// The deadline with its default filled in, as stamped into a request.
    pub fn resolved(&self) -> Self {
        let mut resolved = self.clone();
        if resolved.on_timeout == OnTimeout::Escalate {
            resolved.escalation_timeout_secs = Some(self.second_timeout_secs());
        }
        resolved
    }

    /// Checks the deadline of `tool` (the rules of the module docs but the approval one).
    ///
    /// # Errors
    /// [`PolicyError::BadDeadline`] naming the tool and the field.
    pub fn check(&self, tool: &str) -> Result<(), PolicyError> {
        let bad = |field: &'static str, reason: String| PolicyError::BadDeadline {
            tool: tool.to_owned(),
            field,
            reason,
        };
        let range = |field: &'static str, secs: u64| {
            if secs == 0 || secs > MAX_TIMEOUT_SECS {
                Err(bad(field, format!("must be 1 to {MAX_TIMEOUT_SECS} seconds, not {secs}")))
            } else {
                Ok(())
            }
        };
        range("approval_timeout_secs", self.approval_timeout_secs)?;
        match self.on_timeout {
            OnTimeout::Escalate => {
                if self.escalate_to.is_empty() {
                    return Err(bad(
                        "escalate_to",
                        "is required with on_timeout = \"escalate\": name the groups who decide next".into(),
                    ));
                }
                if self.escalate_to.iter().any(String::is_empty) {
                    return Err(bad("escalate_to", "must not hold an empty group name".into()));
                }
                if let Some(secs) = self.escalation_timeout_secs {
                    range("escalation_timeout_secs", secs)?;
                }
            }
            OnTimeout::Reject => {
                if !self.escalate_to.is_empty() {
                    return Err(bad("escalate_to", "needs on_timeout = \"escalate\"".into()));
                }
                if self.escalation_timeout_secs.is_some() {
                    return Err(bad("escalation_timeout_secs", "needs on_timeout = \"escalate\"".into()));
                }
            }
        }
        Ok(())
    }
}

/// The validated `[policies]` table.
///
/// Build it with [`Policies::from_value`] (typed errors) or through serde (the same checks, the
/// error's text in the deserializer's error). [`Policies::default`] is an empty table with the
/// default effect `unclassified`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policies {
    default_effect: Effect,
    entries: BTreeMap<String, PolicyEntry>,
    /// `approvers` by tool, for the tools that name any.
    approvers: BTreeMap<String, Vec<String>>,
    /// Approval deadlines by tool, for the tools that set one.
    deadlines: BTreeMap<String, ApprovalDeadline>,
    /// Approval summary templates by tool, for the tools that set one.
    summaries: BTreeMap<String, Summary>,
    /// Confirmation thresholds by tool, for the tools that set one.
    confirms: BTreeMap<String, ConfirmAbove>,
    /// `high_risk_approvers` by tool, for the tools that set one.
    high_risk: BTreeMap<String, u32>,
}

/// A tool's `confirm_above`: approving a call whose numeric argument `argument` is above `above`
/// asks the approver to confirm first (`confirm_above = { amount_cents = 100000 }`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfirmAbove {
    /// The argument compared (a top-level argument's name).
    pub argument: String,
    /// The threshold: a value above it asks for a confirmation.
    pub above: serde_json::Number,
}

impl Default for Policies {
    fn default() -> Self {
        Self::new(Effect::Unclassified)
    }
}

impl Policies {
    /// An empty table with `default_effect`.
    pub fn new(default_effect: Effect) -> Self {
        Self {
            default_effect,
            entries: BTreeMap::new(),
            approvers: BTreeMap::new(),
            deadlines: BTreeMap::new(),
            summaries: BTreeMap::new(),
            confirms: BTreeMap::new(),
            high_risk: BTreeMap::new(),
        }
    }

    /// The same table where only principals in one of `groups` may decide a call of `tool`
    /// (an empty list: anyone allowed to decide).
    ///
    /// # Errors
    ///
    /// [`PolicyError::EmptyToolName`] and [`PolicyError::ReservedKey`] as for the table;
    /// [`PolicyError::WrongType`] for an empty group name.
    pub fn with_approvers(
        mut self,
        tool: impl Into<String>,
        groups: Vec<String>,
    ) -> Result<Self, PolicyError> {
        let tool = tool.into();
        check_tool_key(&tool)?;
        if groups.iter().any(String::is_empty) {
            return Err(PolicyError::WrongType {
                path: format!("{tool}.approvers"),
                expected: "an array of non-empty group names",
                found: "an empty string",
            });
        }
        if groups.is_empty() {
            self.approvers.remove(&tool);
        } else {
            self.approvers.insert(tool, groups);
        }
        Ok(self)
    }

    /// The groups whose principals alone may decide a call of `tool` (the entry's `approvers`);
    /// empty when the policy names none (anyone allowed to decide may).
    pub fn approvers(&self, tool: &str) -> &[String] {
        self.approvers.get(tool).map_or(&[], Vec::as_slice)
    }

    /// Each tool that names approver groups, with them.
    pub fn approver_groups(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.approvers.iter().map(|(tool, groups)| (tool.as_str(), groups.as_slice()))
    }

    /// The same table where a call of `tool` waiting for approval acts by itself after
    /// `deadline` (`None`: it waits for ever). Set the tool's entry first: the deadline is
    /// checked against its approval.
    ///
    /// # Errors
    ///
    /// [`PolicyError::EmptyToolName`] and [`PolicyError::ReservedKey`] as for the table;
    /// [`PolicyError::BadDeadline`] for a deadline the table would refuse.
    pub fn with_deadline(
        mut self,
        tool: impl Into<String>,
        deadline: Option<ApprovalDeadline>,
    ) -> Result<Self, PolicyError> {
        let tool = tool.into();
        check_tool_key(&tool)?;
        match deadline {
            Some(deadline) => {
                deadline.check(&tool)?;
                check_deadline_needs_approval(&tool, self.entries.get(&tool))?;
                self.deadlines.insert(tool, deadline);
            }
            None => {
                self.deadlines.remove(&tool);
            }
        }
        Ok(self)
    }

    /// The approval summary template of `tool` (its entry's `summary`), if it sets one: the
    /// sentence an approver reads first ([`crate::session::turn::with_summaries`] stamps it,
    /// rendered, into each approval request).
    pub fn summary(&self, tool: &str) -> Option<&Summary> {
        self.summaries.get(tool)
    }

    /// The confirmation threshold of `tool` (its entry's `confirm_above`), if it sets one.
    pub fn confirm_above(&self, tool: &str) -> Option<&ConfirmAbove> {
        self.confirms.get(tool)
    }

    /// How many different approvers a call of `tool` needs when the options factory's review
    /// finds it `high` risk (its entry's `high_risk_approvers`); `None` when it sets none (one
    /// approver, as for any call).
    pub fn high_risk_approvers(&self, tool: &str) -> Option<u32> {
        self.high_risk.get(tool).copied()
    }

    /// Every tool's `high_risk_approvers`, by tool name.
    pub fn high_risk_approvers_by_tool(&self) -> impl Iterator<Item = (&str, u32)> {
        self.high_risk.iter().map(|(tool, n)| (tool.as_str(), *n))
    }

    /// Every tool's confirmation threshold, by tool name.
    pub fn confirms(&self) -> impl Iterator<Item = (&str, &ConfirmAbove)> {
        self.confirms.iter().map(|(tool, confirm)| (tool.as_str(), confirm))
    }

    /// Every tool's summary template, by tool name.
    pub fn summaries(&self) -> impl Iterator<Item = (&str, &Summary)> {
        self.summaries.iter().map(|(tool, summary)| (tool.as_str(), summary))
    }

    /// The approval deadline of `tool` (its entry's deadline fields), if it sets one.
    pub fn deadline(&self, tool: &str) -> Option<&ApprovalDeadline> {
        self.deadlines.get(tool)
    }

    /// The same table with a policy for `tool` (replacing one it had).
    ///
    /// # Errors
    ///
    /// [`PolicyError::EmptyToolName`] and [`PolicyError::ReservedKey`] as for the table.
    pub fn with(mut self, tool: impl Into<String>, entry: PolicyEntry) -> Result<Self, PolicyError> {
        let tool = tool.into();
        check_tool_key(&tool)?;
        self.entries.insert(tool, entry);
        Ok(self)
    }

    /// Parses and validates the `[policies]` table.
    ///
    /// # Errors
    ///
    /// A [`PolicyError`] naming the first bad key or value, in key order.
    pub fn from_value(table: &Value) -> Result<Self, PolicyError> {
        let Value::Object(map) = table else {
            return Err(PolicyError::NotATable { found: json_kind(table) });
        };
        let mut policies = Policies::default();
        for (key, value) in map {
            if key == DEFAULT_EFFECT_KEY {
                policies.default_effect = parse_effect(value, DEFAULT_EFFECT_KEY.to_owned())?;
                continue;
            }
            check_tool_key(key)?;
            policies.entries.insert(key.clone(), parse_entry(key, value)?);
            if let Some(groups) = parse_approvers(key, value)? {
                policies.approvers.insert(key.clone(), groups);
            }
            if let Some(deadline) = parse_deadline(key, value)? {
                check_deadline_needs_approval(key, policies.entries.get(key))?;
                policies.deadlines.insert(key.clone(), deadline);
            }
            if let Some(summary) = parse_summary(key, value)? {
                policies.summaries.insert(key.clone(), summary);
            }
            if let Some(confirm) = parse_confirm_above(key, value)? {
                policies.confirms.insert(key.clone(), confirm);
            }
            if let Some(n) = parse_high_risk_approvers(key, value)? {
                if policies.entries.get(key).is_some_and(|entry| !entry.policy().requires_approval) {
                    return Err(PolicyError::WrongType {
                        path: format!("{key}.high_risk_approvers"),
                        expected: "a policy whose calls wait for approval",
                        found: "one whose calls never wait (set `requires_approval = true`)",
                    });
                }
                policies.high_risk.insert(key.clone(), n);
            }
        }
        Ok(policies)
    }

    /// The effect of a tool that nothing else classifies.
    pub fn default_effect(&self) -> Effect {
        self.default_effect
    }

    /// The explicit entry for `tool`, if the table has one.
    pub fn get(&self, tool: &str) -> Option<&PolicyEntry> {
        self.entries.get(tool)
    }

    /// Every tool name the table names (an entry, `approvers` or a deadline), sorted, once each:
    /// what [`crate::tool_names::unknown_tools`] checks against the tools an agent has.
    pub fn tool_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> =
            (self.entries.keys().chain(self.approvers.keys()).chain(self.deadlines.keys()))
                .map(String::as_str)
                .collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// How a call of `tool` of `kind` runs: [`ToolPolicy::handling`] of its policy, except that an
    /// approval-free `idempotent_write` custom tool runs [`Handling::Recorded`] unless its entry
    /// says `inline = false` (see "Inline writes" in the module docs).
    ///
    /// ```
    /// use serde_json::json;
    /// use tollgate_engine::catalog::ToolKind;
    /// use tollgate_engine::policy::{Handling, Policies};
    ///
    /// let policies = Policies::from_value(&json!({
    ///     "record_credit": { "effect": "idempotent_write" },
    ///     "set_status": { "effect": "idempotent_write", "inline": false },
    /// }))?;
    /// assert_eq!(policies.handling("record_credit", None, ToolKind::Custom), Handling::Recorded);
    /// assert!(policies.handling("set_status", None, ToolKind::Custom).is_deferred());
    /// # Ok::<(), tollgate_engine::policy::PolicyError>(())
    /// ```
    pub fn handling(&self, tool: &str, annotations: Option<&Annotations>, kind: ToolKind) -> Handling {
        let policy = self.resolve(tool, annotations);
        let recorded = kind == ToolKind::Custom
            && policy.effect == Effect::IdempotentWrite
            && !policy.requires_approval
            && self.entries.get(tool).and_then(|entry| entry.inline) != Some(false);
        if recorded { Handling::Recorded } else { policy.handling(kind) }
    }

    /// Every explicit entry, by tool name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &PolicyEntry)> {
        self.entries.iter().map(|(tool, entry)| (tool.as_str(), entry))
    }

    /// The policy of `tool`: explicit entry, then annotations (custom tools only), then the
    /// default effect. See the module docs.
    pub fn resolve(&self, tool: &str, annotations: Option<&Annotations>) -> ToolPolicy {
        self.resolve_with_source(tool, annotations).0
    }

    /// [`Policies::resolve`] and where the policy came from.
    pub fn resolve_with_source(
        &self,
        tool: &str,
        annotations: Option<&Annotations>,
    ) -> (ToolPolicy, PolicySource) {
        if let Some(entry) = self.entries.get(tool) {
            return (entry.policy(), PolicySource::Explicit);
        }
        if let Some(effect) = annotations.and_then(Annotations::effect) {
            return (ToolPolicy::new(effect), PolicySource::Annotations);
        }
        (ToolPolicy::new(self.default_effect), PolicySource::Default)
    }

    /// The table as JSON, in the shape [`Policies::from_value`] reads.
    pub fn to_value(&self) -> Value {
        let mut map = serde_json::Map::new();
        map.insert(DEFAULT_EFFECT_KEY.to_owned(), Value::from(self.default_effect.as_str()));
        for (tool, entry) in &self.entries {
            let mut fields = serde_json::Map::new();
            fields.insert("effect".to_owned(), Value::from(entry.effect.as_str()));
            if let Some(requires_approval) = entry.requires_approval {
                fields.insert("requires_approval".to_owned(), Value::from(requires_approval));
            }
            if let Some(inline) = entry.inline {
                fields.insert("inline".to_owned(), Value::from(inline));
            }
            if let Some(groups) = self.approvers.get(tool) {
                fields.insert("approvers".to_owned(), Value::from(groups.clone()));
            }
            if let Some(summary) = self.summaries.get(tool) {
                fields.insert("summary".to_owned(), Value::from(summary.source()));
            }
            if let Some(confirm) = self.confirms.get(tool) {
                let threshold = serde_json::json!({ confirm.argument.clone(): confirm.above.clone() });
                fields.insert("confirm_above".to_owned(), threshold);
            }
            if let Some(n) = self.high_risk.get(tool) {
                fields.insert("high_risk_approvers".to_owned(), Value::from(*n));
            }
            if let Some(deadline) = self.deadlines.get(tool) {
                let Value::Object(deadline) = serde_json::to_value(deadline).expect("serializes") else {
                    unreachable!("a deadline serializes as an object")
                };
                fields.extend(deadline);
            }
            map.insert(tool.clone(), Value::Object(fields));
        }
        Value::Object(map)
    }
}

impl<'de> Deserialize<'de> for Policies {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Policies::from_value(&value).map_err(serde::de::Error::custom)
    }
}

impl Serialize for Policies {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

/// What is wrong with a `[policies]` table. Every variant names the key (and value) at fault.
///
/// All are terminal: the agent's configuration must change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The table itself is not a table.
    #[error("[policies] must be a table, found {found}")]
    NotATable {
        /// The JSON kind found.
        found: &'static str,
    },
    /// A key is the empty string.
    #[error("[policies] has an empty tool name")]
    EmptyToolName,
    /// A policy tries to name the reserved key through [`Policies::with`].
    #[error("[policies] key `{key}` is reserved for the default effect")]
    ReservedKey {
        /// The key.
        key: String,
    },
    /// An effect name that is not one of the four.
    #[error(
        "[policies] `{path}`: unknown effect `{value}`; expected one of read, idempotent_write, non_idempotent_write, unclassified"
    )]
    UnknownEffect {
        /// `default_effect` or `<tool>.effect`.
        path: String,
        /// The value found.
        value: String,
    },
    /// A policy table has a field other than `effect`, `requires_approval`, `inline`,
    /// `approvers` and the deadline fields.
    #[error(
        "[policies] `{tool}`: unknown field `{field}`; expected `effect`, `summary`, `confirm_above`, `high_risk_approvers`, `requires_approval`, `inline`, `approvers`, `approval_timeout_secs`, `on_timeout`, `escalate_to` or `escalation_timeout_secs`"
    )]
    UnknownField {
        /// The tool the policy names.
        tool: String,
        /// The unknown field.
        field: String,
    },
    /// `inline` on a policy whose effect is not `idempotent_write` (only an idempotent write may
    /// run inline under a key; a read is inline anyway, other writes never).
    #[error("[policies] `{tool}.inline` applies only to effect `idempotent_write`, not `{effect}`")]
    InlineNotIdempotent {
        /// The tool the policy names.
        tool: String,
        /// The policy's effect.
        effect: Effect,
    },
    /// A policy table lacks `effect`.
    #[error("[policies] `{tool}`: missing field `effect`")]
    MissingEffect {
        /// The tool the policy names.
        tool: String,
    },
    /// A `summary` template is wrong: it names the placeholder.
    #[error(transparent)]
    BadSummary(#[from] crate::summary::SummaryError),
    /// A deadline field is wrong: out of range, missing what it needs, or set where it means
    /// nothing (e.g. `escalate_to` without `on_timeout = "escalate"`).
    #[error("[policies] `{tool}.{field}` {reason}")]
    BadDeadline {
        /// The tool the policy names.
        tool: String,
        /// The field at fault.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A value has the wrong type.
    #[error("[policies] `{path}` must be {expected}, found {found}")]
    WrongType {
        /// `default_effect`, `<tool>`, `<tool>.effect` or `<tool>.requires_approval`.
        path: String,
        /// What it must be.
        expected: &'static str,
        /// The JSON kind found.
        found: &'static str,
    },
}

fn check_tool_key(key: &str) -> Result<(), PolicyError> {
    if key.is_empty() {
        Err(PolicyError::EmptyToolName)
    } else if key == DEFAULT_EFFECT_KEY {
        Err(PolicyError::ReservedKey { key: key.to_owned() })
    } else {
        Ok(())
    }
}

fn parse_effect(value: &Value, path: String) -> Result<Effect, PolicyError> {
    let Value::String(text) = value else {
        return Err(PolicyError::WrongType { path, expected: "a string", found: json_kind(value) });
    };
    text.parse().map_err(|UnknownEffect(value)| PolicyError::UnknownEffect { path, value })
}

fn parse_entry(tool: &str, value: &Value) -> Result<PolicyEntry, PolicyError> {
    let Value::Object(fields) = value else {
        return Err(PolicyError::WrongType {
            path: tool.to_owned(),
            expected: "a table with `effect` and optional `requires_approval`",
            found: json_kind(value),
        });
    };
    if let Some(field) = fields.keys().find(|field| !FIELDS.contains(&field.as_str())) {
        return Err(PolicyError::UnknownField { tool: tool.to_owned(), field: field.clone() });
    }
    let effect = match fields.get("effect") {
        Some(value) => parse_effect(value, format!("{tool}.effect"))?,
        None => return Err(PolicyError::MissingEffect { tool: tool.to_owned() }),
    };
    let requires_approval = match fields.get("requires_approval") {
        None => None,
        Some(Value::Bool(flag)) => Some(*flag),
        Some(other) => {
            return Err(PolicyError::WrongType {
                path: format!("{tool}.requires_approval"),
                expected: "a boolean",
                found: json_kind(other),
            });
        }
    };
    let inline = match fields.get("inline") {
        None => None,
        Some(Value::Bool(_)) if effect != Effect::IdempotentWrite => {
            return Err(PolicyError::InlineNotIdempotent { tool: tool.to_owned(), effect });
        }
        Some(Value::Bool(flag)) => Some(*flag),
        Some(other) => {
            return Err(PolicyError::WrongType {
                path: format!("{tool}.inline"),
                expected: "a boolean",
                found: json_kind(other),
            });
        }
    };
    Ok(PolicyEntry { effect, requires_approval, inline })
}

/// The entry's `approvers`: `None` when absent or empty.
fn parse_approvers(tool: &str, value: &Value) -> Result<Option<Vec<String>>, PolicyError> {
    let Some(groups) = value.get("approvers") else { return Ok(None) };
    let wrong = |found| PolicyError::WrongType {
        path: format!("{tool}.approvers"),
        expected: "an array of non-empty group names",
        found,
    };
    let Value::Array(groups) = groups else { return Err(wrong(json_kind(groups))) };
    let mut names = Vec::with_capacity(groups.len());
    for group in groups {
        match group {
            Value::String(name) if !name.is_empty() => names.push(name.clone()),
            Value::String(_) => return Err(wrong("an empty string")),
            other => return Err(wrong(json_kind(other))),
        }
    }
    Ok((!names.is_empty()).then_some(names))
}

/// The entry's `summary` template, checked: `None` when absent.
fn parse_summary(tool: &str, value: &Value) -> Result<Option<Summary>, PolicyError> {
    match value.get("summary") {
        None => Ok(None),
        Some(Value::String(template)) => Ok(Some(Summary::parse(tool, template)?)),
        Some(other) => Err(PolicyError::WrongType {
            path: format!("{tool}.summary"),
            expected: "a text with {argument} placeholders",
            found: json_kind(other),
        }),
    }
}

/// The entry's `confirm_above`: a table of one argument name and a number; `None` when absent.
fn parse_confirm_above(tool: &str, value: &Value) -> Result<Option<ConfirmAbove>, PolicyError> {
    let Some(threshold) = value.get("confirm_above") else { return Ok(None) };
    let wrong = |found| PolicyError::WrongType {
        path: format!("{tool}.confirm_above"),
        expected: "a table of one numeric argument and its threshold, e.g. { amount_cents = 100000 }",
        found,
    };
    let Value::Object(map) = threshold else { return Err(wrong(json_kind(threshold))) };
    let mut entries = map.iter();
    match (entries.next(), entries.next()) {
        (Some((argument, Value::Number(above))), None) if !argument.is_empty() => {
            Ok(Some(ConfirmAbove { argument: argument.clone(), above: above.clone() }))
        }
        (Some((_, Value::Number(_))), None) => Err(wrong("an empty argument name")),
        (Some((_, other)), None) => Err(wrong(json_kind(other))),
        (None, _) => Err(wrong("an empty table")),
        (Some(_), Some(_)) => Err(wrong("a table of several arguments")),
    }
}

/// The entry's `high_risk_approvers`: an integer from 1 to [`MAX_HIGH_RISK_APPROVERS`]; `None`
/// when absent.
fn parse_high_risk_approvers(tool: &str, value: &Value) -> Result<Option<u32>, PolicyError> {
    let Some(n) = value.get("high_risk_approvers") else { return Ok(None) };
    match n.as_u64() {
        Some(n @ 1..=5) => Ok(Some(u32::try_from(n).expect("at most 5"))),
        _ => Err(PolicyError::WrongType {
            path: format!("{tool}.high_risk_approvers"),
            expected: "an integer from 1 to 5 (how many different approvers a high-risk call needs)",
            found: match n {
                Value::Number(_) => "a number outside 1 to 5",
                other => json_kind(other),
            },
        }),
    }
}

/// The entry's deadline fields: `None` when it has none.
fn parse_deadline(tool: &str, value: &Value) -> Result<Option<ApprovalDeadline>, PolicyError> {
    let secs = |field: &'static str| -> Result<Option<u64>, PolicyError> {
        match value.get(field) {
            None => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
            Some(other) => Err(PolicyError::WrongType {
                path: format!("{tool}.{field}"),
                expected: "a positive integer (seconds)",
                found: if other.is_number() { "a negative or fractional number" } else { json_kind(other) },
            }),
        }
    };
    let timeout = secs("approval_timeout_secs")?;
    let second = secs("escalation_timeout_secs")?;
    let on_timeout = match value.get("on_timeout") {
        None => None,
        Some(Value::String(text)) => Some(match text.as_str() {
            "reject" => OnTimeout::Reject,
            "escalate" => OnTimeout::Escalate,
            other => {
                return Err(PolicyError::BadDeadline {
                    tool: tool.to_owned(),
                    field: "on_timeout",
                    reason: format!("must be \"reject\" or \"escalate\", not {other:?}"),
                });
            }
        }),
        Some(other) => {
            return Err(PolicyError::WrongType {
                path: format!("{tool}.on_timeout"),
                expected: "\"reject\" or \"escalate\"",
                found: json_kind(other),
            });
        }
    };
    let escalate_to = match value.get("escalate_to") {
        None => None,
        Some(Value::Array(groups)) => {
            let mut names = Vec::with_capacity(groups.len());
            for group in groups {
                match group {
                    Value::String(name) => names.push(name.clone()),
                    other => {
                        return Err(PolicyError::WrongType {
                            path: format!("{tool}.escalate_to"),
                            expected: "an array of non-empty group names",
                            found: json_kind(other),
                        });
                    }
                }
            }
            Some(names)
        }
        Some(other) => {
            return Err(PolicyError::WrongType {
                path: format!("{tool}.escalate_to"),
                expected: "an array of non-empty group names",
                found: json_kind(other),
            });
        }
    };
    let Some(approval_timeout_secs) = timeout else {
        let given = [
            ("on_timeout", on_timeout.is_some()),
            ("escalate_to", escalate_to.is_some()),
            ("escalation_timeout_secs", second.is_some()),
        ];
        if let Some((field, _)) = given.into_iter().find(|(_, set)| *set) {
            return Err(PolicyError::BadDeadline {
                tool: tool.to_owned(),
                field,
                reason: "needs `approval_timeout_secs` (how long a call may wait) beside it".into(),
            });
        }
        return Ok(None);
    };
    let deadline = ApprovalDeadline {
        approval_timeout_secs,
        on_timeout: on_timeout.unwrap_or_default(),
        escalate_to: escalate_to.unwrap_or_default(),
        escalation_timeout_secs: second,
    };
    deadline.check(tool)?;
    Ok(Some(deadline))
}

/// A deadline only means something on a tool whose calls wait for approval.
fn check_deadline_needs_approval(tool: &str, entry: Option<&PolicyEntry>) -> Result<(), PolicyError> {
    match entry {
        Some(entry) if !entry.policy().requires_approval => Err(PolicyError::BadDeadline {
            tool: tool.to_owned(),
            field: "approval_timeout_secs",
            reason: "needs a policy that requires approval (this one's calls never wait)".into(),
        }),
        _ => Ok(()),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "a table",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn policies(value: Value) -> Policies {
        match Policies::from_value(&value) {
            Ok(policies) => policies,
            Err(error) => panic!("{value} should parse: {error}"),
        }
    }

    fn error(value: Value) -> PolicyError {
        match Policies::from_value(&value) {
            Ok(policies) => panic!("{value} should not parse, got {policies:?}"),
            Err(error) => error,
        }
    }

    #[test]
    fn effects_serialize_in_snake_case_as_in_tollgate_toml() {
        for effect in Effect::ALL {
            assert_eq!(serde_json::to_value(effect).ok(), Some(Value::from(effect.as_str())));
            assert_eq!(effect.as_str().parse::<Effect>(), Ok(effect));
        }
        assert_eq!(Effect::NonIdempotentWrite.to_string(), "non_idempotent_write");
    }

    #[test]
    fn default_approval_follows_the_seed_table() {
        assert!(!Effect::Read.default_requires_approval());
        assert!(!Effect::IdempotentWrite.default_requires_approval());
        assert!(Effect::NonIdempotentWrite.default_requires_approval());
        assert!(Effect::Unclassified.default_requires_approval());
    }

    #[test]
    fn the_default_effect_is_unclassified_when_the_table_omits_it() {
        let table = policies(json!({ "Read": { "effect": "read" } }));
        assert_eq!(table.default_effect(), Effect::Unclassified);
        assert_eq!(Policies::default().default_effect(), Effect::Unclassified);
        assert_eq!(
            table.resolve_with_source("Bash", None),
            (ToolPolicy { effect: Effect::Unclassified, requires_approval: true }, PolicySource::Default)
        );
    }

    #[test]
    fn a_table_may_set_another_default_effect() {
        let table = policies(json!({ "default_effect": "read" }));
        assert_eq!(
            table.resolve("Bash", None),
            ToolPolicy { effect: Effect::Read, requires_approval: false }
        );
    }

    #[test]
    fn an_explicit_policy_wins_over_annotations_and_the_default() {
        let table = policies(json!({ "lookup_order": { "effect": "non_idempotent_write" } }));
        let read_only = Annotations { read_only: true, ..Annotations::default() };
        assert_eq!(
            table.resolve_with_source("lookup_order", Some(&read_only)),
            (
                ToolPolicy { effect: Effect::NonIdempotentWrite, requires_approval: true },
                PolicySource::Explicit
            )
        );
    }

    #[test]
    fn a_read_only_annotation_classifies_a_custom_tool_without_policy_as_read() {
        let read_only = Annotations { read_only: true, idempotent: true, ..Annotations::default() };
        assert_eq!(
            Policies::default().resolve_with_source("lookup_order", Some(&read_only)),
            (ToolPolicy { effect: Effect::Read, requires_approval: false }, PolicySource::Annotations)
        );
    }

    #[test]
    fn an_idempotent_annotation_is_idempotent_write_whatever_destructive_says() {
        let hints = Annotations { idempotent: true, destructive: true, ..Annotations::default() };
        assert_eq!(
            Policies::default().resolve("set_status", Some(&hints)),
            ToolPolicy { effect: Effect::IdempotentWrite, requires_approval: false }
        );
    }

    #[test]
    fn annotations_without_read_only_or_idempotent_fall_back_to_the_default_effect() {
        let hints = Annotations { destructive: true, open_world: true, ..Annotations::default() };
        let table = policies(json!({ "default_effect": "idempotent_write" }));
        assert_eq!(
            table.resolve_with_source("wipe", Some(&hints)),
            (ToolPolicy { effect: Effect::IdempotentWrite, requires_approval: false }, PolicySource::Default)
        );
    }

    #[test]
    fn an_explicit_requires_approval_overrides_the_effects_default_both_ways() {
        let table = policies(json!({
            "lookup_order": { "effect": "read", "requires_approval": true },
            "send_mail": { "effect": "non_idempotent_write", "requires_approval": false },
        }));
        assert!(table.resolve("lookup_order", None).requires_approval);
        assert!(!table.resolve("send_mail", None).requires_approval);
        assert_eq!(
            table.get("send_mail"),
            Some(&PolicyEntry::new(Effect::NonIdempotentWrite).with_approval(false))
        );
    }

    #[test]
    fn the_design_sketch_table_parses() {
        let table = policies(json!({
            "default_effect": "unclassified",
            "create_refund": { "effect": "non_idempotent_write" },
            "Read": { "effect": "read" },
            "Grep": { "effect": "read" },
            "mcp__github__create_issue": { "effect": "idempotent_write", "requires_approval": true },
        }));
        assert_eq!(table.iter().count(), 4);
        assert!(table.resolve("create_refund", None).requires_approval);
        assert_eq!(table.resolve("Grep", None).handling(ToolKind::Cli), Handling::Inline);
        assert_eq!(
            table.resolve("mcp__github__create_issue", None).handling(ToolKind::Cli),
            Handling::Deferred { requires_approval: true, runs_in: DeferredRun::ResumedSegment }
        );
    }

    #[test]
    fn an_unknown_effect_is_rejected_naming_the_tool_and_the_value() {
        let error = error(json!({ "create_refund": { "effect": "write" } }));
        assert_eq!(
            error,
            PolicyError::UnknownEffect { path: "create_refund.effect".to_owned(), value: "write".to_owned() }
        );
        assert!(error.to_string().contains("`create_refund.effect`: unknown effect `write`"), "{error}");
    }

    #[test]
    fn an_unknown_default_effect_is_rejected() {
        assert_eq!(
            error(json!({ "default_effect": "dangerous" })),
            PolicyError::UnknownEffect { path: "default_effect".to_owned(), value: "dangerous".to_owned() }
        );
        assert_eq!(
            error(json!({ "default_effect": { "effect": "read" } })),
            PolicyError::WrongType {
                path: "default_effect".to_owned(),
                expected: "a string",
                found: "a table"
            }
        );
    }

    #[test]
    fn an_unknown_field_is_rejected_naming_the_tool_and_the_field() {
        let error = error(json!({ "Bash": { "effect": "read", "approval": true } }));
        assert_eq!(
            error,
            PolicyError::UnknownField { tool: "Bash".to_owned(), field: "approval".to_owned() }
        );
        assert_eq!(
            error.to_string(),
            "[policies] `Bash`: unknown field `approval`; expected `effect`, `summary`, `confirm_above`, `high_risk_approvers`, `requires_approval`, `inline`, `approvers`, `approval_timeout_secs`, `on_timeout`, `escalate_to` or `escalation_timeout_secs`"
        );
    }

    #[test]
    fn a_summary_template_is_checked_at_load_and_kept_as_written() {
        let table = json!({
            "create_refund": { "effect": "non_idempotent_write", "summary": "Refund {amount_cents|money:EUR}" },
        });
        let policies = Policies::from_value(&table).unwrap();
        assert_eq!(
            policies.summary("create_refund").unwrap().render(&json!({ "amount_cents": 500 })),
            "Refund €5.00"
        );
        assert_eq!(policies.summary("Bash"), None);
        assert_eq!(Policies::from_value(&policies.to_value()).unwrap(), policies, "round trip");
        let bad =
            error(json!({ "create_refund": { "effect": "read", "summary": "Refund {amount_cents|cash}" } }));
        assert_eq!(
            bad.to_string(),
            "[policies] `create_refund.summary`: placeholder `{amount_cents|cash}`: unknown formatter `cash`; expected `money:CUR`, `date` or `list`"
        );
        let wrong = error(json!({ "create_refund": { "effect": "read", "summary": 3 } }));
        assert!(wrong.to_string().contains("`create_refund.summary`"), "{wrong}");
    }

    #[test]
    fn a_confirmation_threshold_names_one_numeric_argument() {
        let table =
            json!({ "create_refund": { "effect": "read", "confirm_above": { "amount_cents": 100000 } } });
        let policies = Policies::from_value(&table).unwrap();
        let confirm = policies.confirm_above("create_refund").unwrap();
        assert_eq!((confirm.argument.as_str(), confirm.above.as_i64()), ("amount_cents", Some(100000)));
        assert_eq!(Policies::from_value(&policies.to_value()).unwrap(), policies, "round trip");
        for (bad, found) in [
            (json!({ "amount_cents": "lots" }), "found a string"),
            (json!({}), "found an empty table"),
            (json!({ "a": 1, "b": 2 }), "found a table of several arguments"),
            (json!(5), "found a number"),
        ] {
            let error =
                error(json!({ "create_refund": { "effect": "read", "confirm_above": bad } })).to_string();
            assert!(error.contains("`create_refund.confirm_above`") && error.contains(found), "{error}");
        }
    }

    #[test]
    fn a_policy_without_effect_is_rejected() {
        assert_eq!(
            error(json!({ "Bash": { "requires_approval": false } })),
            PolicyError::MissingEffect { tool: "Bash".to_owned() }
        );
    }

    #[test]
    fn values_of_the_wrong_type_are_rejected_naming_their_path() {
        assert_eq!(
            error(json!({ "Bash": { "effect": "read", "requires_approval": "yes" } })),
            PolicyError::WrongType {
                path: "Bash.requires_approval".to_owned(),
                expected: "a boolean",
                found: "a string",
            }
        );
        assert_eq!(
            error(json!({ "Bash": { "effect": 3 } })),
            PolicyError::WrongType {
                path: "Bash.effect".to_owned(),
                expected: "a string",
                found: "a number"
            }
        );
        assert!(matches!(
            error(json!({ "Bash": "read" })),
            PolicyError::WrongType { path, found: "a string", .. } if path == "Bash"
        ));
        assert_eq!(error(json!(["Bash"])), PolicyError::NotATable { found: "an array" });
        assert_eq!(error(json!({ "": { "effect": "read" } })), PolicyError::EmptyToolName);
    }

    #[test]
    fn deserializing_through_serde_runs_the_same_checks() {
        let parsed: Result<Policies, _> = serde_json::from_value(json!({ "Read": { "effect": "reed" } }));
        let Err(error) = parsed else { panic!("an unknown effect must not deserialize") };
        assert!(error.to_string().contains("unknown effect `reed`"), "{error}");

        let table = policies(
            json!({ "default_effect": "read", "Bash": { "effect": "unclassified", "requires_approval": false } }),
        );
        let round_trip: Result<Policies, _> = serde_json::from_value(table.to_value());
        assert_eq!(round_trip.ok(), Some(table));
    }

    #[test]
    fn policies_built_in_code_reject_the_reserved_key() {
        let result = Policies::default().with(DEFAULT_EFFECT_KEY, PolicyEntry::new(Effect::Read));
        assert_eq!(result, Err(PolicyError::ReservedKey { key: DEFAULT_EFFECT_KEY.to_owned() }));
    }

    #[test]
    fn custom_tools_follow_the_seed_table_of_effects() {
        use DeferredRun::*;
        let cases = [
            (Effect::Read, false, Handling::Inline),
            (Effect::Read, true, Handling::Deferred { requires_approval: true, runs_in: CallTool }),
            (
                Effect::IdempotentWrite,
                false,
                Handling::Deferred { requires_approval: false, runs_in: CallTool },
            ),
            (
                Effect::IdempotentWrite,
                true,
                Handling::Deferred { requires_approval: true, runs_in: CallTool },
            ),
            (
                Effect::NonIdempotentWrite,
                true,
                Handling::Deferred { requires_approval: true, runs_in: CallSingleAttemptTool },
            ),
            (
                Effect::NonIdempotentWrite,
                false,
                Handling::Deferred { requires_approval: false, runs_in: CallSingleAttemptTool },
            ),
            (
                Effect::Unclassified,
                true,
                Handling::Deferred { requires_approval: true, runs_in: CallSingleAttemptTool },
            ),
        ];
        for (effect, requires_approval, handling) in cases {
            let policy = ToolPolicy { effect, requires_approval };
            assert_eq!(policy.handling(ToolKind::Custom), handling, "{policy:?}");
        }
    }

    #[test]
    fn cli_tools_defer_exactly_when_they_need_approval() {
        for effect in Effect::ALL {
            let free = ToolPolicy { effect, requires_approval: false };
            assert_eq!(free.handling(ToolKind::Cli), Handling::Inline, "{free:?}");
            let approved = ToolPolicy { effect, requires_approval: true };
            assert_eq!(
                approved.handling(ToolKind::Cli),
                Handling::Deferred { requires_approval: true, runs_in: DeferredRun::ResumedSegment },
                "{approved:?}"
            );
        }
    }

    #[test]
    fn a_policy_names_the_groups_that_alone_may_decide_its_calls() {
        let table = json!({
            "create_refund": { "effect": "non_idempotent_write", "approvers": ["finance", "ops"] },
            "Bash": { "effect": "unclassified", "approvers": [] },
        });
        let parsed = policies(table);
        assert_eq!(parsed.approvers("create_refund"), ["finance", "ops"]);
        assert!(parsed.approvers("Bash").is_empty(), "an empty list restricts nobody");
        assert!(parsed.approvers("Read").is_empty(), "no policy, no restriction");
        assert_eq!(Policies::from_value(&parsed.to_value()).unwrap(), parsed, "round trip");
        let built = Policies::default()
            .with("create_refund", PolicyEntry::new(Effect::NonIdempotentWrite))
            .unwrap()
            .with_approvers("create_refund", vec!["finance".into()])
            .unwrap();
        assert_eq!(built.approvers("create_refund"), ["finance"]);
    }

    #[test]
    fn approval_free_idempotent_writes_of_custom_tools_run_recorded_inline_by_default() {
        let table = policies(json!({
            "record_credit": { "effect": "idempotent_write" },
            "approved_credit": { "effect": "idempotent_write", "requires_approval": true },
            "lookup_order": { "effect": "read" },
            "create_refund": { "effect": "non_idempotent_write", "requires_approval": false },
        }));
        assert_eq!(table.handling("record_credit", None, ToolKind::Custom), Handling::Recorded);
        let hints = Annotations { idempotent: true, ..Annotations::default() };
        assert_eq!(
            Policies::default().handling("set_status", Some(&hints), ToolKind::Custom),
            Handling::Recorded,
            "classified by its annotations"
        );
        assert_eq!(
            table.handling("approved_credit", None, ToolKind::Custom),
            Handling::Deferred { requires_approval: true, runs_in: DeferredRun::CallTool },
            "a write that needs approval stays deferred"
        );
        assert_eq!(table.handling("lookup_order", None, ToolKind::Custom), Handling::Inline);
        assert_eq!(
            table.handling("create_refund", None, ToolKind::Custom),
            Handling::Deferred { requires_approval: false, runs_in: DeferredRun::CallSingleAttemptTool }
        );
        assert_eq!(table.handling("record_credit", None, ToolKind::Cli), Handling::Inline, "a CLI tool");
        assert!(!Handling::Recorded.is_deferred());
    }

    #[test]
    fn inline_false_keeps_the_deferred_call_tool_step_and_round_trips() {
        let table = policies(json!({ "record_credit": { "effect": "idempotent_write", "inline": false } }));
        assert_eq!(
            table.handling("record_credit", None, ToolKind::Custom),
            Handling::Deferred { requires_approval: false, runs_in: DeferredRun::CallTool }
        );
        assert_eq!(
            table.get("record_credit"),
            Some(&PolicyEntry::new(Effect::IdempotentWrite).with_inline(false))
        );
        assert_eq!(
            table.to_value()["record_credit"],
            json!({ "effect": "idempotent_write", "inline": false })
        );
        assert_eq!(Policies::from_value(&table.to_value()).unwrap(), table, "round trip");
        let explicit = policies(json!({ "record_credit": { "effect": "idempotent_write", "inline": true } }));
        assert_eq!(explicit.handling("record_credit", None, ToolKind::Custom), Handling::Recorded);
        let built = Policies::default()
            .with("record_credit", PolicyEntry::new(Effect::IdempotentWrite).with_inline(false))
            .unwrap();
        assert!(built.handling("record_credit", None, ToolKind::Custom).is_deferred());
    }

    #[test]
    fn inline_is_refused_on_other_effects_and_when_not_a_boolean() {
        let refused = error(json!({ "lookup_order": { "effect": "read", "inline": true } }));
        assert_eq!(
            refused,
            PolicyError::InlineNotIdempotent { tool: "lookup_order".into(), effect: Effect::Read }
        );
        assert_eq!(
            refused.to_string(),
            "[policies] `lookup_order.inline` applies only to effect `idempotent_write`, not `read`"
        );
        assert_eq!(
            error(json!({ "record_credit": { "effect": "idempotent_write", "inline": "no" } })),
            PolicyError::WrongType {
                path: "record_credit.inline".to_owned(),
                expected: "a boolean",
                found: "a string",
            }
        );
    }

    #[test]
    fn high_risk_approvers_are_1_to_5_on_a_tool_that_waits_and_round_trip() {
        let table = json!({
            "create_refund": { "effect": "non_idempotent_write", "high_risk_approvers": 2 },
            "Bash": { "effect": "unclassified" },
        });
        let policies = Policies::from_value(&table).unwrap();
        assert_eq!(policies.high_risk_approvers("create_refund"), Some(2));
        assert_eq!(policies.high_risk_approvers("Bash"), None);
        assert_eq!(Policies::from_value(&policies.to_value()).unwrap(), policies);
        for bad in [json!(0), json!(6), json!(-1), json!(1.5), json!("2")] {
            let table =
                json!({ "create_refund": { "effect": "non_idempotent_write", "high_risk_approvers": bad } });
            let text = error(table).to_string();
            assert!(
                text.contains("`create_refund.high_risk_approvers`") && text.contains("1 to 5"),
                "{text}"
            );
        }
        let never_waits = json!({ "lookup_order": { "effect": "read", "high_risk_approvers": 2 } });
        let text = error(never_waits).to_string();
        assert!(
            text.contains("`lookup_order.high_risk_approvers`") && text.contains("requires_approval"),
            "{text}"
        );
    }

    #[test]
    fn bad_approvers_are_refused_naming_the_field() {
        for bad in [json!("finance"), json!([""]), json!([1])] {
            let table = json!({ "create_refund": { "effect": "read", "approvers": bad } });
            let error = error(table);
            assert!(
                matches!(&error, PolicyError::WrongType { path, .. } if path == "create_refund.approvers"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_policy_sets_an_approval_deadline_that_rejects_by_default_and_round_trips() {
        let table = json!({
            "create_refund": { "effect": "non_idempotent_write", "approval_timeout_secs": 120 },
            "Bash": {
                "effect": "unclassified",
                "approval_timeout_secs": 600,
                "on_timeout": "escalate",
                "escalate_to": ["oncall"],
            },
            "Write": {
                "effect": "unclassified",
                "approval_timeout_secs": 60,
                "on_timeout": "escalate",
                "escalate_to": ["leads", "oncall"],
                "escalation_timeout_secs": 30,
            },
            "Read": { "effect": "read" },
        });
        let parsed = policies(table);
        assert_eq!(parsed.deadline("create_refund"), Some(&ApprovalDeadline::reject_after(120)));
        let bash = parsed.deadline("Bash").expect("a deadline");
        assert_eq!(bash, &ApprovalDeadline::escalate_after(600, vec!["oncall".into()], None));
        assert_eq!(bash.second_timeout_secs(), 600, "the second deadline defaults to the first's length");
        assert_eq!(bash.resolved().escalation_timeout_secs, Some(600));
        assert_eq!(parsed.deadline("Write").map(ApprovalDeadline::second_timeout_secs), Some(30));
        assert_eq!(parsed.deadline("Read"), None);
        assert_eq!(Policies::from_value(&parsed.to_value()).unwrap(), parsed, "round trip");
        assert_eq!(parsed.to_value()["create_refund"]["on_timeout"], "reject");
        let built = Policies::default()
            .with("create_refund", PolicyEntry::new(Effect::NonIdempotentWrite))
            .unwrap()
            .with_deadline("create_refund", Some(ApprovalDeadline::reject_after(120)))
            .unwrap();
        assert_eq!(built.deadline("create_refund"), parsed.deadline("create_refund"));
        assert_eq!(
            built.clone().with_deadline("create_refund", None).unwrap().deadline("create_refund"),
            None
        );
    }

    #[test]
    fn bad_deadline_fields_are_refused_naming_the_tool_and_the_field() {
        let bad = |fields: Value| {
            let mut entry = json!({ "effect": "non_idempotent_write" });
            entry.as_object_mut().unwrap().extend(fields.as_object().unwrap().clone());
            error(json!({ "create_refund": entry }))
        };
        let field_of = |error: &PolicyError| match error {
            PolicyError::BadDeadline { tool, field, .. } => format!("{tool}.{field}"),
            PolicyError::WrongType { path, .. } => path.clone(),
            other => panic!("not a deadline error: {other}"),
        };
        for (fields, field, says) in [
            (json!({ "approval_timeout_secs": 0 }), "approval_timeout_secs", "1 to"),
            (json!({ "approval_timeout_secs": -5 }), "approval_timeout_secs", "positive integer"),
            (json!({ "approval_timeout_secs": 1.5 }), "approval_timeout_secs", "positive integer"),
            (json!({ "approval_timeout_secs": "2m" }), "approval_timeout_secs", "positive integer"),
            (json!({ "approval_timeout_secs": MAX_TIMEOUT_SECS + 1 }), "approval_timeout_secs", "1 to"),
            (json!({ "approval_timeout_secs": 5, "on_timeout": "ignore" }), "on_timeout", "\"escalate\""),
            (json!({ "approval_timeout_secs": 5, "on_timeout": true }), "on_timeout", "\"reject\""),
            (json!({ "approval_timeout_secs": 5, "on_timeout": "escalate" }), "escalate_to", "required"),
            (
                json!({ "approval_timeout_secs": 5, "on_timeout": "escalate", "escalate_to": [] }),
                "escalate_to",
                "required",
            ),
            (
                json!({ "approval_timeout_secs": 5, "on_timeout": "escalate", "escalate_to": [""] }),
                "escalate_to",
                "empty group",
            ),
            (
                json!({ "approval_timeout_secs": 5, "on_timeout": "escalate", "escalate_to": "oncall" }),
                "escalate_to",
                "array",
            ),
            (
                json!({ "approval_timeout_secs": 5, "escalate_to": ["oncall"] }),
                "escalate_to",
                "needs on_timeout",
            ),
            (
                json!({ "approval_timeout_secs": 5, "escalation_timeout_secs": 5 }),
                "escalation_timeout_secs",
                "needs on_timeout",
            ),
            (
                json!({ "approval_timeout_secs": 5, "on_timeout": "escalate", "escalate_to": ["x"], "escalation_timeout_secs": 0 }),
                "escalation_timeout_secs",
                "1 to",
            ),
            (json!({ "on_timeout": "reject" }), "on_timeout", "needs `approval_timeout_secs`"),
            (json!({ "escalate_to": ["oncall"] }), "escalate_to", "needs `approval_timeout_secs`"),
        ] {
            let error = bad(fields.clone());
            assert_eq!(field_of(&error), format!("create_refund.{field}"), "{fields}: {error}");
            assert!(error.to_string().contains(says), "{fields}: {error}");
            assert!(error.to_string().contains("create_refund"), "names the tool: {error}");
        }
        let free = error(json!({ "Read": { "effect": "read", "approval_timeout_secs": 5 } }));
        assert!(
            matches!(&free, PolicyError::BadDeadline { field: "approval_timeout_secs", .. })
                && free.to_string().contains("requires approval"),
            "{free}"
        );
        let built = Policies::default()
            .with("Read", PolicyEntry::new(Effect::Read))
            .unwrap()
            .with_deadline("Read", Some(ApprovalDeadline::reject_after(5)));
        assert!(matches!(built, Err(PolicyError::BadDeadline { .. })), "{built:?}");
    }
}
