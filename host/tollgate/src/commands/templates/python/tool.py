"""The `{{name}}` tool. Build it into ../../tools/ with `tollgate build` in the agent's folder;
try it with `tollgate tools call . {{name}} '{"text": "world"}'`."""

from typing import Annotated, TypedDict

from tollgate_guest import tool


class Args(TypedDict):
    """The arguments: their JSON Schema is derived from these type hints."""

    text: Annotated[str, "Who or what to greet."]


@tool(description="Greets: answers with the text it was given.", read_only=True, idempotent=True)
def {{name}}(args: Args, execution):
    return f"hello, {args['text']}"
