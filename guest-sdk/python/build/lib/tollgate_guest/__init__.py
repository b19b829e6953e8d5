"""Write Tollgate tools in Python.

A tool module registers functions with the ``tool`` decorator::

    from tollgate_guest import tool, error_output

    @tool(
        description="Look up an order by id.",
        input_schema={"type": "object", "properties": {"order_id": {"type": "string"}},
                      "required": ["order_id"]},
        read_only=True, idempotent=True,
    )
    def lookup_order(args, execution):
        return f"order {args['order_id']}"

and ``python -m tollgate_guest.build tool.py OUT.wasm`` builds the component (componentize-py
0.25.1, world ``tool-provider-py`` of the package's ``wit``: ``tollgate:tool/tool-provider`` plus
the ``wasi:http`` client behind ``fetch``).

A handler gets ``args`` (the JSON arguments, already validated by the host against
``input_schema``) and ``execution`` (an ``Execution``, or ``None`` for an inline read) and returns:

- a ``str`` (one text block), a list of blocks (``str``, ``Text`` or ``Image``), or an ``Output``
  (``error_output(msg)`` sets ``is_error``: a tool-level failure the model reads, never retried);
- or raises ``failed(msg)`` / ``retryable(msg)`` (the WIT ``call-error``). A deferred idempotent
  write is attempted again with the same idempotency key after ``retryable``. Any other exception
  becomes ``failed`` with its text.

``log``, ``config`` and ``fetch`` reach the host: the host's log, the config keys the manifest
grants, and outbound HTTP to the hosts the manifest allows.
"""

from ._api import (
    CallError,
    Execution,
    Failed,
    Image,
    Output,
    Retryable,
    Text,
    Tool,
    error_output,
    failed,
    registered_tools,
    retryable,
    tool,
)
from ._host import HTTPError, Response, config, fetch, log

__all__ = [
    "CallError", "Execution", "Failed", "HTTPError", "Image", "Output", "Response", "Retryable",
    "Text", "Tool", "config", "error_output", "failed", "fetch", "log", "registered_tools",
    "retryable", "tool",
]
