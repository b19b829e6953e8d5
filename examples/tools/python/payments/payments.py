"""The ``create_refund`` example tool (a non-idempotent write over outbound HTTP). Build:
``guest-sdk/python/build.sh examples/tools/python/payments/payments.py payments.wasm``. The same
tool exists in Rust, Go and JavaScript under examples/tools; all of them answer every call
identically.

It needs the config key PAYMENTS_URL and outbound HTTP to that host, both granted by its manifest
(payments.toml beside the component).
"""

import json

from tollgate_guest import HTTPError, config, error_output, failed, fetch, log, retryable, tool


@tool(
    description="Refund part or all of an order through the payments service. Not idempotent: runs once per call.",
    input_schema={
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "description": "The order id."},
            "amount_cents": {"type": "integer", "minimum": 1, "description": "Amount to refund, in cents."},
            "reason": {"type": "string", "description": "Why the refund is made."},
        },
        "required": ["order_id", "amount_cents"],
        "additionalProperties": False,
    },
    open_world=True,
)
def create_refund(args, execution):
    base = config("PAYMENTS_URL")
    if not base:
        raise failed("PAYMENTS_URL is not configured")
    if execution is None:
        raise failed("create_refund must run as a deferred call")
    log.info(f"refund {args['order_id']}: {args['amount_cents']} cents, attempt {execution.attempt}")
    body = json.dumps(
        {"order_id": args["order_id"], "amount_cents": args["amount_cents"], "reason": args.get("reason")},
        separators=(",", ":"),
    )
    try:
        resp = fetch(
            base.rstrip("/") + "/refunds",
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": execution.idempotency_key},
            body=body,
        )
    except HTTPError as e:
        # The texts name only the wasi:http error code, so that every language says the same.
        if e.denied:
            raise failed(f"outbound request denied: {e.code}")
        raise retryable(f"payments service unreachable: {e.code}")
    if 200 <= resp.status < 300:
        return resp.text()
    if resp.status >= 500:
        raise retryable(f"payments service returned {resp.status}")
    if resp.status >= 400:
        return error_output(f"refund refused: {resp.text()}")
    raise failed(f"payments service returned {resp.status}")
