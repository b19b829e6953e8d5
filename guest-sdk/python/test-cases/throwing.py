"""A test guest of writes that take effect and then raise: ``charge_then_throw``,
``credit_then_throw`` (idempotent) and ``deposit_then_throw`` (idempotent) each POST
``{order_id, amount_cents, tool, attempt}`` to ``<PAYMENTS_URL>/refunds`` with the call's
idempotency key, then read the answer as ``{"refund":{"id":…}}``, which the stand-in payments
service never sends: the ``KeyError`` is not caught. The same guest exists in Rust
(host/test-guests/throwing), Go and JavaScript.
"""

import json

from tollgate_guest import config, failed, fetch, tool

SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer", "minimum": 1}},
    "required": ["order_id", "amount_cents"],
    "additionalProperties": False,
}


def pay_then_throw(name, args, execution):
    base = config("PAYMENTS_URL")
    if not base:
        raise failed("PAYMENTS_URL is not configured")
    if execution is None:
        raise failed(f"{name} must run as a deferred call")
    body = json.dumps(
        {"order_id": args["order_id"], "amount_cents": args["amount_cents"], "tool": name, "attempt": execution.attempt},
        separators=(",", ":"),
    )
    resp = fetch(
        base.rstrip("/") + "/refunds",
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": execution.idempotency_key},
        body=body,
    )
    return json.loads(resp.text())["refund"]["id"]


def _register(name, description, idempotent):
    @tool(name=name, description=description, input_schema=SCHEMA, idempotent=idempotent, open_world=True)
    def handler(args, execution):
        return pay_then_throw(name, args, execution)


_register("charge_then_throw", "Charges an order once, then fails reading the answer.", False)
_register("credit_then_throw", "Credits an order (idempotent under its key), then fails reading the answer.", True)
_register("deposit_then_throw", "Deposits to an order (idempotent under its key), then fails reading the answer.", True)
