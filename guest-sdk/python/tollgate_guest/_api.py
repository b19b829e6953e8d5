"""The tool author's types: the decorator, outputs and errors. No host imports here."""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional, Union

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Execution:
    """The durable step a deferred call runs in (WIT ``deferred-execution``)."""

    session_id: str
    turn_id: str
    tool_call_id: str
    #: 1 on the first attempt; an idempotent tool may see 2 and 3 after retryable errors.
    attempt: int
    #: ``<session-id>/<turn-id>/<tool-call-id>``: the same on every attempt. Send it along.
    idempotency_key: str


@dataclass(frozen=True)
class Text:
    """A text block of output."""

    text: str


@dataclass(frozen=True)
class Image:
    """An image block of output."""

    media_type: str
    data: bytes


Block = Union[str, Text, Image]


@dataclass
class Output:
    """What a call produced (WIT ``tool-output``)."""

    content: List[Block] = field(default_factory=list)
    #: A tool-level failure the model should read (recorded ``failed``, never retried).
    is_error: bool = False


def error_output(message: str) -> Output:
    """An output with one text block and ``is_error`` set."""
    return Output([Text(message)], is_error=True)


class CallError(Exception):
    """The handler failed (WIT ``call-error``); raise ``failed(...)`` or ``retryable(...)``."""

    retryable = False

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Failed(CallError):
    """A permanent failure (``call-error.failed``)."""


class Retryable(CallError):
    """A transient failure (``call-error.retryable``): a timeout, a 503."""

    retryable = True


def failed(message: str) -> Failed:
    """The exception to raise for a permanent failure: ``raise failed("…")``."""
    return Failed(str(message))


def retryable(message: str) -> Retryable:
    """The exception to raise for a transient failure: ``raise retryable("…")``."""
    return Retryable(str(message))


Handler = Callable[[Any, Optional[Execution]], Union[str, List[Block], Output]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: str
    read_only: bool
    idempotent: bool
    destructive: bool
    open_world: bool
    handler: Handler


_tools: dict[str, Tool] = {}


_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def schema_of(hint: Any, where: str) -> dict:
    """The JSON Schema of a type hint: ``str``, ``int``, ``float``, ``bool``, ``list[T]``,
    ``dict[str, T]``, ``Optional[T]``, ``Literal[...]``, a ``TypedDict`` (an object whose required
    keys are the ones not marked ``NotRequired``, no others allowed), and ``Annotated[T, "text"]``
    for a description. Anything else is a ``TypeError`` naming ``where``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        schema = schema_of(args[0], where)
        notes = [a for a in args[1:] if isinstance(a, str)]
        if notes:
            schema["description"] = " ".join(notes)
        return schema
    if origin in (typing.Required, typing.NotRequired):
        return schema_of(args[0], where)
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is list:
        return {"type": "array", "items": schema_of(args[0], f"{where}[]")} if args else {"type": "array"}
    if origin is dict:
        value = {"additionalProperties": schema_of(args[1], f"{where}{{}}")} if len(args) == 2 else {}
        return {"type": "object", **value}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin is Union or (hasattr(types, "UnionType") and isinstance(hint, types.UnionType)):
        kept = [a for a in args if a is not type(None)]
        if len(kept) == 1:
            return schema_of(kept[0], where)
        return {"anyOf": [schema_of(a, where) for a in kept]}
    if typing.is_typeddict(hint):
        hints = typing.get_type_hints(hint, include_extras=True)
        return {
            "type": "object",
            "properties": {key: schema_of(value, f"{where}.{key}") for key, value in hints.items()},
            "required": [key for key in hints if key in hint.__required_keys__],
            "additionalProperties": False,
        }
    raise TypeError(f"{where}: no JSON Schema for {hint!r}; give input_schema, or use str, int, float, bool, "
                    "list, dict, Optional, Literal, Annotated or a TypedDict")


def _derived_schema(fn: Handler, tool_name: str) -> dict:
    """The input schema of a handler whose ``args`` parameter is annotated with a ``TypedDict``."""
    params = list(inspect.signature(fn).parameters)
    hints = typing.get_type_hints(fn, include_extras=True) if params else {}
    hint = hints.get(params[0]) if params else None
    if hint is None or not typing.is_typeddict(hint):
        raise ValueError(f"tool {tool_name}: give input_schema, or annotate its first parameter with a TypedDict")
    return schema_of(hint, tool_name)


def tool(
    *,
    description: str,
    input_schema: Union[dict, str, None] = None,
    name: Optional[str] = None,
    read_only: bool = False,
    idempotent: bool = False,
    destructive: bool = False,
    open_world: bool = False,
) -> Callable[[Handler], Handler]:
    """Registers the decorated function as a tool (named after the function unless ``name``).

    ``input_schema`` is the JSON Schema of the arguments object, as a dict or JSON text; without
    it, the schema is derived from the ``TypedDict`` the handler's first parameter is annotated
    with (see :func:`schema_of`). The annotations classify the tool when no policy in the agent's
    tollgate.toml names it.
    """

    def register(fn: Handler) -> Handler:
        tool_name = name or fn.__name__
        if not _NAME.match(tool_name):
            raise ValueError(f"tool name {tool_name!r}: 1 to 64 ASCII letters, digits, '_' or '-'")
        if tool_name in _tools:
            raise ValueError(f"duplicate tool {tool_name}")
        if input_schema is None:
            schema = _derived_schema(fn, tool_name)
        else:
            schema = json.loads(input_schema) if isinstance(input_schema, str) else input_schema
        if not isinstance(schema, dict):
            raise ValueError(f"tool {tool_name}: input_schema must be a JSON object")
        _tools[tool_name] = Tool(
            name=tool_name,
            description=description,
            input_schema=json.dumps(schema, separators=(",", ":")),
            read_only=read_only,
            idempotent=idempotent,
            destructive=destructive,
            open_world=open_world,
            handler=fn,
        )
        return fn

    return register


def registered_tools() -> List[Tool]:
    """The registered tools, in registration order."""
    return list(_tools.values())


def to_output(result: Any) -> Output:
    """Normalizes what a handler returned."""
    if isinstance(result, Output):
        return result
    if isinstance(result, (str, Text, Image)):
        return Output([result])
    if isinstance(result, list):
        return Output(result)
    raise TypeError("a handler must return a str, a list of blocks or an Output")
