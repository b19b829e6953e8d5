//! The one mapping from a decision to the answer the CLI receives.
//!
//! The engine decides ([`Decision`]), `tollgate-protocol` owns the bytes ([`HookAnswer`],
//! [`PermissionAnswer`], [`HostFrame`]); this module only picks the shape for each decision:
//!
//! | decision | `hook_callback` answer | `can_use_tool` answer |
//! | --- | --- | --- |
//! | allow | `allow` | `allow` with the request's input |
//! | allow with new input (CLI decider) | `allow` + `updatedInput` | `allow` with the new input |
//! | replay of the pending record | `allow` + the recorded arguments (+ `additionalContext`: the record's note of an approver's edit) | `allow` with the recorded arguments |
//! | defer | `defer` | (never: an error response) |
//! | deny | `deny` + `permissionDecisionReason` | `deny` + `message` |
//!
//! The agent's own hooks are answered elsewhere ([`crate::app_hooks`]): their answers carry no
//! decision at all.

use serde_json::Value;
use tollgate_engine::gate::Decision;
use tollgate_protocol::{HookAnswer, HostFrame, PermissionAnswer};

/// The answer to the gate's `PreToolUse` `hook_callback` request `request_id`.
pub(crate) fn hook_frame(request_id: &str, decision: &Decision) -> HostFrame {
    let answer = match decision {
        Decision::Allow { updated_input: None } => HookAnswer::allow(),
        Decision::Allow { updated_input: Some(input) } => HookAnswer::allow().updated_input(input.clone()),
        Decision::Replay(record) => {
            let answer = HookAnswer::allow().updated_input(record.arguments.clone());
            match &record.note {
                Some(note) => answer.additional_context(note.clone()),
                None => answer,
            }
        }
        Decision::Defer => HookAnswer::defer(),
        Decision::Deny { message, .. } => HookAnswer::deny(message.clone()),
    };
    HostFrame::hook_answer(request_id, answer)
}

/// The answer to the `can_use_tool` request `request_id` that asked about `input`.
pub(crate) fn permission_frame(request_id: &str, decision: &Decision, input: &Value) -> HostFrame {
    let answer = match decision {
        Decision::Allow { updated_input } => {
            PermissionAnswer::allow(updated_input.as_ref().unwrap_or(input).clone())
        }
        Decision::Replay(record) => PermissionAnswer::allow(record.arguments.clone()),
        Decision::Deny { message, .. } => PermissionAnswer::deny(message.clone()),
        Decision::Defer => {
            return HostFrame::error_response(
                request_id,
                "the gate has no answer for this permission request",
            );
        }
    };
    HostFrame::permission_answer(request_id, answer)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tollgate_engine::catalog::ToolKind;
    use tollgate_engine::gate::DenyReason;
    use tollgate_engine::record::{Outcome, ToolCallRecord};

    use super::*;

    fn deny() -> Decision {
        Decision::Deny { message: "no".into(), reason: DenyReason::CliDecider }
    }

    fn replay() -> Decision {
        Decision::Replay(ToolCallRecord::new(
            "toolu_1",
            "create_refund",
            ToolKind::Custom,
            json!({"order_id": "7"}),
            Outcome::Succeeded { output: "refunded".into() },
        ))
    }

    /// An approved `Bash` call whose input an approver edited: the note rides along.
    fn edited_replay() -> Decision {
        let mut record = ToolCallRecord::new(
            "toolu_2",
            "Bash",
            ToolKind::Cli,
            json!({"command": "echo b"}),
            Outcome::approved_cli_tool(),
        );
        record.note = Some("edited".into());
        Decision::Replay(record)
    }

    /// Every decision the segment answers, with a label for the snapshots.
    fn decisions() -> [(&'static str, Decision); 6] {
        [
            ("allow", Decision::Allow { updated_input: None }),
            ("allow with new input", Decision::Allow { updated_input: Some(json!({"command": "ls -la"})) }),
            ("replay", replay()),
            ("replay of an edited call", edited_replay()),
            ("defer", Decision::Defer),
            ("deny", deny()),
        ]
    }

    /// Each labelled line, as the snapshots hold them.
    fn lines(frames: impl IntoIterator<Item = (&'static str, HostFrame)>) -> String {
        frames.into_iter().map(|(label, frame)| format!("{label}:\n{}\n", frame.to_json())).collect()
    }

    /// Every `hook_callback` answer the segment sends, byte for byte.
    #[test]
    fn every_hook_answer_the_segment_sends() {
        insta::assert_snapshot!(lines(decisions().map(|(label, d)| (label, hook_frame("r", &d)))));
    }

    /// Every `can_use_tool` answer the segment sends for a request that asked about `ls`, byte for
    /// byte.
    #[test]
    fn every_permission_answer_the_segment_sends() {
        let asked = json!({"command": "ls"});
        insta::assert_snapshot!(lines(
            decisions().map(|(label, d)| (label, permission_frame("r", &d, &asked)))
        ));
    }
}
