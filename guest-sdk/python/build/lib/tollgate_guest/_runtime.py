"""The WIT export ``tollgate:tool/tools``: turns the registered tools into ``list-tools`` and
``call``. The build's generated app module imports ``Tools`` from here."""

from __future__ import annotations

import json
import sys
import traceback
from typing import List, Optional

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import tollgate_tool_types as t

from ._api import CallError, Execution, Image, Text, registered_tools, to_output


def _block(b) -> t.Content:
    if isinstance(b, str):
        return t.Content_Text(b)
    if isinstance(b, Text):
        return t.Content_Text(b.text)
    if isinstance(b, Image):
        return t.Content_Image(t.Image(media_type=b.media_type, data=bytes(b.data)))
    raise TypeError("a content block must be a str, Text or Image")


class Tools(exports.Tools):
    def list_tools(self) -> List[t.ToolSpec]:
        return [
            t.ToolSpec(
                name=x.name,
                description=x.description,
                input_schema=x.input_schema,
                annotations=t.Annotations(
                    read_only=x.read_only,
                    idempotent=x.idempotent,
                    destructive=x.destructive,
                    open_world=x.open_world,
                ),
            )
            for x in registered_tools()
        ]

    def call(self, name: str, arguments: str, execution: Optional[t.DeferredExecution]) -> t.ToolOutput:
        found = [x for x in registered_tools() if x.name == name]
        if not found:
            raise Err(t.CallError_Failed(f"unknown tool {name}"))
        exe = None
        if execution is not None:
            exe = Execution(
                session_id=execution.session_id,
                turn_id=execution.turn_id,
                tool_call_id=execution.tool_call_id,
                attempt=execution.attempt,
                idempotency_key=execution.idempotency_key,
            )
        try:
            out = to_output(found[0].handler(json.loads(arguments), exe))
            return t.ToolOutput(content=[_block(b) for b in out.content], is_error=bool(out.is_error))
        except CallError as e:
            if e.retryable:
                raise Err(t.CallError_Retryable(e.message))
            raise Err(t.CallError_Failed(e.message))
        except Err as e:
            # An `err` of some import that the handler did not catch: not a call-error value. The
            # handler ran up to it, so whatever it did may have taken effect: `retryable`.
            raise Err(t.CallError_Retryable(f"unhandled error from the host: {e.value!r}"))
        except Exception as e:  # noqa: BLE001: an uncaught exception may come after an effect
            # The handler may have sent its write before it raised (a refund, then a parse error
            # on the answer): `retryable`, so an idempotent write is attempted again under the
            # same key and a single-attempt write is recorded `outcome_unknown`, never `failed`.
            # The traceback goes to stderr, which the host logs and records; the model reads only
            # the exception's name and message.
            traceback.print_exception(e, file=sys.stderr)
            raise Err(t.CallError_Retryable(f"{type(e).__name__}: {e}"))
