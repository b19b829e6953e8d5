//! Decisions for new calls: the rules table of the module docs, the CLI decider's answers, MCP
//! permits, and the check of the CLI's deferred call.

use super::call::{CallState, Decided, Phase, Target};
use super::canonical::canonical;
use super::{
    Channel, CliDeciderQuery, CliToolDecision, Decision, DeferredCall, DenyReason, Gate, GateError,
    HeldBackCall, McpPermit, Next, Origin, ToolCall,
};
use crate::catalog::{ToolKind, ToolRef};
use crate::policy::{Handling, ToolPolicy};
use crate::record::ToolResult;
use crate::texts;

impl Gate {
    /// Decides a `PreToolUse` hook callback.
    pub fn pre_tool_use(&mut self, call: &ToolCall) -> Next {
        self.decide(call, Channel::PreToolUse)
    }

    /// Decides a `can_use_tool` request: the fallback for a call whose hook did not run. Never
    /// yields [`Decision::Defer`].
    pub fn can_use_tool(&mut self, call: &ToolCall) -> Next {
        self.decide(call, Channel::CanUseTool)
    }

    /// Finishes a call that [`Next::AskCliDecider`] held, with the decider's answer: `Ok(None)`
    /// leaves the call to the policy table, `Err(text)` (the factory failed) denies it with the
    /// text.
    pub fn answer_cli_decider(
        &mut self,
        query: CliDeciderQuery,
        answer: Result<Option<CliToolDecision>, String>,
    ) -> Decision {
        let waiting = self
            .calls
            .get(&query.tool_use_id)
            .is_some_and(|state| matches!(state.phase, Phase::AskingDecider));
        if !waiting {
            return Decision::deny(
                DenyReason::AlreadyDecided,
                texts::render(texts::ALREADY_DECIDED, &query.tool_name),
            );
        }
        let table = self.policies.resolve(&query.tool_name, None);
        let decided = match answer {
            Err(message) => Decided::denied(DenyReason::CliDeciderFailed, message),
            Ok(Some(CliToolDecision::Allow)) => Decided::Allowed { updated_input: None },
            Ok(Some(CliToolDecision::AllowWithInput(input))) => {
                Decided::Allowed { updated_input: Some(input) }
            }
            Ok(Some(CliToolDecision::Deny(message))) => Decided::denied(DenyReason::CliDecider, message),
            Ok(Some(CliToolDecision::RequireApproval)) => {
                let policy = ToolPolicy { requires_approval: true, ..table };
                let call = Candidate::of_query(&query, policy);
                self.deferrable(&call, &query.origin, query.channel)
            }
            Ok(None) if table.handling(ToolKind::Cli).is_deferred() => {
                let call = Candidate::of_query(&query, table);
                self.deferrable(&call, &query.origin, query.channel)
            }
            Ok(None) => Decided::Allowed { updated_input: None },
        };
        let decision = decided.decision();
        if let Some(state) = self.calls.get_mut(&query.tool_use_id) {
            state.phase = Phase::Decided(decided);
        }
        decision
    }

    /// Whether the custom tool server may run `tool` (its bare name) for a `tools/call` under
    /// `tool_use_id` (`_meta["claudecode/toolUseId"]`). Each permit is used once.
    pub fn permit_mcp_call(&mut self, tool_use_id: Option<&str>, tool: &str) -> McpPermit {
        let refuse = McpPermit::Refuse(ToolResult::text(
            texts::render(texts::MCP_CALL_NOT_PERMITTED, &self.catalog.cli_name(tool)),
            true,
        ));
        let Some(state) = tool_use_id.and_then(|id| self.calls.get_mut(id)) else {
            return refuse;
        };
        if state.target != Target::Custom(tool.to_owned()) {
            return refuse;
        }
        match &mut state.phase {
            Phase::Decided(Decided::Inline { used: used @ false }) => {
                *used = true;
                McpPermit::Run
            }
            Phase::Decided(Decided::Recorded { used: used @ false, run }) => {
                *used = true;
                McpPermit::RunRecorded(run.clone())
            }
            Phase::Decided(Decided::Replayed { record, served: served @ false }) => {
                *served = true;
                McpPermit::Replay(record.tool_result(&state.tool_name))
            }
            _ => refuse,
        }
    }

    /// Checks the CLI's `deferred_tool_use` (`id`, `name`, `input`) against the segment's one
    /// deferred call and returns the call to record, with `input` as its arguments.
    ///
    /// # Errors
    ///
    /// A [`GateError`] when the gate deferred no call, another call, or this call under another
    /// tool. The segment then fails.
    pub fn accept_deferral(
        &self,
        tool_use_id: &str,
        tool_name: &str,
        input: serde_json::Value,
    ) -> Result<DeferredCall, GateError> {
        let nothing = || GateError::NothingDeferred {
            tool_use_id: tool_use_id.to_owned(),
            tool_name: tool_name.to_owned(),
        };
        let Some(deferred) = self.deferred.as_deref() else {
            return Err(nothing());
        };
        if deferred != tool_use_id {
            return Err(GateError::DeferredAnotherCall {
                reported: tool_use_id.to_owned(),
                deferred: deferred.to_owned(),
            });
        }
        let Some(state) = self.calls.get(deferred) else {
            return Err(nothing());
        };
        if state.tool_name != tool_name {
            return Err(GateError::DeferredAnotherTool {
                tool_use_id: tool_use_id.to_owned(),
                reported: tool_name.to_owned(),
                deferred: state.tool_name.clone(),
            });
        }
        let (name, kind) = match &state.target {
            Target::Custom(name) => (name.clone(), ToolKind::Custom),
            Target::Cli(name) => (name.clone(), ToolKind::Cli),
            Target::Collision => return Err(nothing()),
        };
        let Phase::Decided(Decided::Deferred { policy }) = state.phase else {
            return Err(nothing());
        };
        Ok(DeferredCall {
            tool_use_id: tool_use_id.to_owned(),
            tool_name: name,
            handling: policy.handling(kind),
            kind,
            arguments: input,
            policy,
            held_back: self.held_back.clone(),
        })
    }

    fn decide(&mut self, call: &ToolCall, channel: Channel) -> Next {
        if self.calls.contains_key(&call.tool_use_id) {
            return Next::Decided(self.decide_again(call, channel));
        }
        let tool = self.catalog.classify(&call.tool_name);
        let target = Target::of(tool);
        if let Some(decided) = self.recorded_call(tool, call) {
            return self.settle(call, channel, target, decided);
        }
        let name = call.tool_name.as_str();
        let decided = match tool {
            ToolRef::Collision { name: shared } => {
                self.failure.get_or_insert(GateError::NameCollision { tool: shared.to_owned() });
                Decided::denied(DenyReason::NameCollision, texts::render(texts::NAME_COLLISION, name))
            }
            ToolRef::Custom { listed: false, .. } => {
                Decided::denied(DenyReason::ToolNotOffered, self.catalog.not_offered(name))
            }
            ToolRef::Custom { name: custom, listed: true } => {
                let annotations = self.catalog.annotations(custom);
                let policy = self.policies.resolve(custom, annotations);
                if self.policies.handling(custom, annotations, ToolKind::Custom) == Handling::Recorded {
                    self.recorded_write(call, custom)
                } else if policy.handling(ToolKind::Custom).is_deferred() {
                    let candidate = Candidate::new(call, custom, ToolKind::Custom, policy);
                    self.deferrable(&candidate, &call.origin, channel)
                } else {
                    Decided::Inline { used: false }
                }
            }
            ToolRef::Cli { name: cli } if self.asks_cli_decider => {
                let state = CallState {
                    target,
                    tool_name: call.tool_name.clone(),
                    input: canonical(&call.input),
                    channel,
                    phase: Phase::AskingDecider,
                };
                self.calls.insert(call.tool_use_id.clone(), state);
                return Next::AskCliDecider(CliDeciderQuery {
                    tool_use_id: call.tool_use_id.clone(),
                    tool_name: cli.to_owned(),
                    input: call.input.clone(),
                    origin: call.origin.clone(),
                    channel,
                });
            }
            ToolRef::Cli { name: cli } => {
                let policy = self.policies.resolve(cli, None);
                if policy.handling(ToolKind::Cli).is_deferred() {
                    let candidate = Candidate::new(call, cli, ToolKind::Cli, policy);
                    self.deferrable(&candidate, &call.origin, channel)
                } else {
                    Decided::Allowed { updated_input: None }
                }
            }
        };
        self.settle(call, channel, target, decided)
    }

    /// A second request under a decided tool use ID: the same call gets the answer that let it
    /// run ([`CallState::repeated`]; the CLI asks `can_use_tool` again after a hook's allow for
    /// calls that touch paths it guards, such as `.claude/`); a first denial is repeated as is;
    /// anything else is denied.
    fn decide_again(&mut self, call: &ToolCall, channel: Channel) -> Decision {
        let already = Decision::deny(
            DenyReason::AlreadyDecided,
            texts::render(texts::ALREADY_DECIDED, &call.tool_name),
        );
        let Some(state) = self.calls.get_mut(&call.tool_use_id) else {
            return already;
        };
        match (&state.phase, state.channel, channel) {
            // Claude Code ignored the defer and asks instead: deny with the retry text and free the
            // segment's deferral, since this call will not end the segment.
            (Phase::Decided(Decided::Deferred { .. }), Channel::PreToolUse, Channel::CanUseTool) => {
                let denied = Decided::denied(
                    DenyReason::DeferIgnored,
                    texts::render(texts::ONLY_ONE_DEFERRED_CALL, &call.tool_name),
                );
                let decision = denied.decision();
                state.phase = Phase::Decided(denied);
                if self.deferred.as_deref() == Some(call.tool_use_id.as_str()) {
                    self.deferred = None;
                }
                decision
            }
            (Phase::Decided(first @ Decided::Denied { .. }), _, _) => first.decision(),
            _ => state.repeated(&call.tool_name, &call.input).unwrap_or(already),
        }
    }

    /// The decision for a deferrable call: defer the segment's first, deny the rest. A call
    /// denied because the segment's deferral is taken, and that needs approval, is held back:
    /// the session may ask for its approval ahead ([`HeldBackCall`]).
    fn deferrable(&mut self, call: &Candidate<'_>, origin: &Origin, channel: Channel) -> Decided {
        let retry = || texts::render(texts::ONLY_ONE_DEFERRED_CALL, call.cli_name);
        if matches!(origin, Origin::Subagent { .. }) {
            Decided::denied(
                DenyReason::InSubagent,
                texts::render(texts::CALL_FROM_MAIN_CONVERSATION, call.cli_name),
            )
        } else if channel == Channel::CanUseTool {
            Decided::denied(DenyReason::DeferIgnored, retry())
        } else if self.deferred.is_some() {
            if call.policy.requires_approval {
                self.held_back.push(HeldBackCall {
                    tool_use_id: call.tool_use_id.to_owned(),
                    tool_name: call.name.to_owned(),
                    kind: call.kind,
                    arguments: call.input.clone(),
                    policy: call.policy,
                    handling: call.policy.handling(call.kind),
                });
            }
            Decided::denied(DenyReason::OnlyOneDeferredCall, retry())
        } else {
            self.deferred = Some(call.tool_use_id.to_owned());
            Decided::Deferred { policy: call.policy }
        }
    }

    fn settle(&mut self, call: &ToolCall, channel: Channel, target: Target, decided: Decided) -> Next {
        let decision = decided.decision();
        let state = CallState {
            target,
            tool_name: call.tool_name.clone(),
            input: canonical(&call.input),
            channel,
            phase: Phase::Decided(decided),
        };
        self.calls.insert(call.tool_use_id.clone(), state);
        Next::Decided(decision)
    }
}

/// A deferrable call being decided: what [`Gate::deferrable`] needs to defer or hold it back.
struct Candidate<'a> {
    tool_use_id: &'a str,
    /// The tool as the CLI names it (for the texts).
    cli_name: &'a str,
    /// A custom tool's own name, or the CLI tool's name.
    name: &'a str,
    kind: ToolKind,
    input: &'a serde_json::Value,
    policy: ToolPolicy,
}

impl<'a> Candidate<'a> {
    fn new(call: &'a ToolCall, name: &'a str, kind: ToolKind, policy: ToolPolicy) -> Self {
        Candidate {
            tool_use_id: &call.tool_use_id,
            cli_name: &call.tool_name,
            name,
            kind,
            input: &call.input,
            policy,
        }
    }

    /// A CLI tool call the options factory's decider left to (or sent to) approval.
    fn of_query(query: &'a CliDeciderQuery, policy: ToolPolicy) -> Self {
        Candidate {
            tool_use_id: &query.tool_use_id,
            cli_name: &query.tool_name,
            name: &query.tool_name,
            kind: ToolKind::Cli,
            input: &query.input,
            policy,
        }
    }
}
