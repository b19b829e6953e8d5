// A test guest of writes that take effect and then throw: charge_then_throw, credit_then_throw
// (idempotent) and deposit_then_throw (idempotent) each POST {order_id, amount_cents, tool,
// attempt} to <PAYMENTS_URL>/refunds with the call's idempotency key, then read the answer as
// {"refund":{"id":…}}, which the stand-in payments service never sends: reading `id` of the
// missing refund throws a TypeError the handler does not catch. The same guest exists in Rust
// (host/test-guests/throwing), Go and Python.

import { config, failed } from '@tollgate/guest';
import { fetch } from '@tollgate/guest/http';

const inputSchema = {
  type: 'object',
  properties: { order_id: { type: 'string' }, amount_cents: { type: 'integer', minimum: 1 } },
  required: ['order_id', 'amount_cents'],
  additionalProperties: false,
};

function payThenThrow(tool) {
  return async ({ order_id, amount_cents }, execution) => {
    const base = config('PAYMENTS_URL');
    if (!base) throw failed('PAYMENTS_URL is not configured');
    if (!execution) throw failed(`${tool} must run as a deferred call`);
    const resp = await fetch(`${base.replace(/\/+$/, '')}/refunds`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Idempotency-Key': execution.idempotencyKey },
      body: JSON.stringify({ order_id, amount_cents, tool, attempt: execution.attempt }),
    });
    const answer = JSON.parse(await resp.text());
    return answer.refund.id;
  };
}

export const tools = [
  {
    name: 'charge_then_throw',
    description: 'Charges an order once, then fails reading the answer.',
    inputSchema,
    annotations: { openWorld: true },
    handler: payThenThrow('charge_then_throw'),
  },
  {
    name: 'credit_then_throw',
    description: 'Credits an order (idempotent under its key), then fails reading the answer.',
    inputSchema,
    annotations: { idempotent: true, openWorld: true },
    handler: payThenThrow('credit_then_throw'),
  },
  {
    name: 'deposit_then_throw',
    description: 'Deposits to an order (idempotent under its key), then fails reading the answer.',
    inputSchema,
    annotations: { idempotent: true, openWorld: true },
    handler: payThenThrow('deposit_then_throw'),
  },
];
