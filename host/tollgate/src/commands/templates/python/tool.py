"""The `{{name}}` tool. Build it into ../../tools/ with `tollgate build` in the agent's folder;
try it with `tollgate tools call . {{name}} '{"text": "world"}'`."""

from tollgate_guest import tool


@tool(
    description="Greets: answers with the text it was given.",
    input_schema={
        "type": "object",
        "properties": {"text": {"type": "string", "description": "Who or what to greet."}},
        "required": ["text"],
        "additionalProperties": False,
    },
    read_only=True,
    idempotent=True,
)
def {{name}}(args, execution):
    return f"hello, {args['text']}"
