//! Edit before approve: the JSON Schema an approver's edited input must fit,
//! stored with the interrupt when it opens (the process that decides may not load the agent),
//! and the check of an edit against it. Pure: no I/O.

use serde_json::{Value, json};
use tollgate_engine::catalog::ToolKind;
use tollgate_engine::session::{EngineError, Transition};

/// The field of a decision that carries the edited input.
pub const FIELD: &str = "updated_input";

/// The input schema of a built-in CLI tool Tollgate knows; `None` for the others (an edit of
/// those need only be a JSON object).
pub fn cli_tool_schema(tool: &str) -> Option<Value> {
    match tool {
        "Bash" => Some(json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1},
                "description": {"type": "string"},
                "timeout": {"type": "integer", "minimum": 0},
                "run_in_background": {"type": "boolean"}
            },
            "required": ["command"]
        })),
        _ => None,
    }
}

/// Stamps each tool approval interrupt the transition opens (and its `interrupt_opened` event)
/// with `input_schema`, the schema `schema_of(tool name, kind)` gives; a tool without one is
/// left as it is.
pub fn with_input_schemas(t: &mut Transition, schema_of: impl Fn(&str, ToolKind) -> Option<Value>) {
    t.stamp_requests(|request| {
        let Some(schema) = schema_of(&request.tool_name, request.kind) else { return false };
        request.input_schema = Some(schema);
        true
    });
}

/// Checks an edited input: a JSON object that fits `schema` when there is one.
///
/// # Errors
/// [`EngineError::BadInput`] on [`FIELD`], naming the path that failed (`/amount_cents: …`).
pub fn check_edit(schema: Option<&Value>, input: &Value) -> Result<(), EngineError> {
    let bad = |reason: String| EngineError::BadInput { field: FIELD, reason };
    if !input.is_object() {
        return Err(bad("must be a JSON object (the tool's whole input)".into()));
    }
    let Some(schema) = schema else { return Ok(()) };
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| bad(format!("the tool's stored input schema is not usable: {e}")))?;
    let errors: Vec<String> = validator
        .iter_errors(input)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() { e.to_string() } else { format!("{at}: {e}") }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(bad(format!("does not fit the tool's input schema: {}", errors.join("; "))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund_schema() -> Value {
        json!({
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer", "minimum": 1}},
            "required": ["order_id", "amount_cents"],
            "additionalProperties": false
        })
    }

    fn reason(result: Result<(), EngineError>) -> String {
        match result {
            Err(EngineError::BadInput { field, reason }) => {
                assert_eq!(field, FIELD);
                reason
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn an_edit_that_fits_the_schema_passes() {
        check_edit(Some(&refund_schema()), &json!({"order_id": "o_1", "amount_cents": 500})).unwrap();
    }

    #[test]
    fn an_edit_of_the_wrong_type_names_the_field_that_failed() {
        let why =
            reason(check_edit(Some(&refund_schema()), &json!({"order_id": "o_1", "amount_cents": "lots"})));
        assert!(why.contains("/amount_cents"), "{why}");
    }

    #[test]
    fn an_edit_missing_a_required_field_or_adding_one_is_refused() {
        let missing = reason(check_edit(Some(&refund_schema()), &json!({"order_id": "o_1"})));
        assert!(missing.contains("amount_cents"), "{missing}");
        let extra = reason(check_edit(
            Some(&refund_schema()),
            &json!({"order_id": "o", "amount_cents": 1, "to": "me"}),
        ));
        assert!(extra.contains("to"), "{extra}");
    }

    #[test]
    fn without_a_schema_an_edit_need_only_be_an_object() {
        check_edit(None, &json!({"anything": [1, 2]})).unwrap();
        assert!(reason(check_edit(None, &json!("ls"))).contains("JSON object"));
    }

    #[test]
    fn a_bash_edit_needs_a_command_string() {
        let bash = cli_tool_schema("Bash").unwrap();
        check_edit(Some(&bash), &json!({"command": "echo edited"})).unwrap();
        assert!(reason(check_edit(Some(&bash), &json!({"command": 7}))).contains("/command"));
        assert!(cli_tool_schema("Write").is_none());
    }
}
