"""The ``lookup_order`` example tool (read-only). Build:
``guest-sdk/python/build.sh examples/tools/python/orders/orders.py orders.wasm``. The same tool
exists in Rust, Go and JavaScript under examples/tools; all of them answer every call identically.
"""

import json
import re

from tollgate_guest import error_output, tool

# "1" ... "99" exactly: no sign, no leading zero.
_KNOWN = re.compile(r"^[1-9][0-9]?$")


@tool(
    description="Look up an order by its id: status, total in cents and currency.",
    input_schema={
        "type": "object",
        "properties": {"order_id": {"type": "string", "description": "The order id."}},
        "required": ["order_id"],
        "additionalProperties": False,
    },
    read_only=True,
    idempotent=True,
)
def lookup_order(args, execution):
    order_id = args["order_id"]
    if not _KNOWN.match(order_id):
        return error_output(f"order {order_id} not found")
    return json.dumps(
        {"order_id": order_id, "status": "delivered", "total_cents": 600 * int(order_id), "currency": "EUR"},
        separators=(",", ":"),
    )
