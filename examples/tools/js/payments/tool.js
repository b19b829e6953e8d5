// The `create_refund` example tool (a non-idempotent write over outbound HTTP). Build:
// node guest-sdk/js/bin/build.mjs examples/tools/js/payments/tool.js -o payments.wasm. The same
// tool exists in Rust, Go and Python under examples/tools; all of them answer every call
// identically.
//
// It needs the config key PAYMENTS_URL and outbound HTTP to that host, both granted by its
// manifest (payments.toml beside the component).

import { config, errorOutput, failed, log, retryable } from '@tollgate/guest';
import { fetch } from '@tollgate/guest/http';

export const tools = [
  {
    name: 'create_refund',
    description:
      'Refund part or all of an order through the payments service. Not idempotent: runs once per call.',
    inputSchema: {
      type: 'object',
      properties: {
        order_id: { type: 'string', description: 'The order id.' },
        amount_cents: { type: 'integer', minimum: 1, description: 'Amount to refund, in cents.' },
        reason: { type: 'string', description: 'Why the refund is made.' },
      },
      required: ['order_id', 'amount_cents'],
      additionalProperties: false,
    },
    annotations: { readOnly: false, idempotent: false, destructive: false, openWorld: true },
    async handler({ order_id, amount_cents, reason }, execution) {
      const base = config('PAYMENTS_URL');
      if (!base) throw failed('PAYMENTS_URL is not configured');
      if (!execution) throw failed('create_refund must run as a deferred call');
      log.info(`refund ${order_id}: ${amount_cents} cents, attempt ${execution.attempt}`);
      let resp;
      try {
        resp = await fetch(`${base.replace(/\/+$/, '')}/refunds`, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'Idempotency-Key': execution.idempotencyKey },
          body: JSON.stringify({ order_id, amount_cents, reason: reason ?? null }),
        });
      } catch (err) {
        // The texts name only the wasi:http error code, so that every language says the same.
        if (err.denied) throw failed(`outbound request denied: ${err.code}`);
        if (!err.code) throw failed(`payments request failed: ${err}`);
        throw retryable(`payments service unreachable: ${err.code}`);
      }
      const body = await resp.text();
      if (resp.status >= 200 && resp.status < 300) return body;
      if (resp.status >= 500) throw retryable(`payments service returned ${resp.status}`);
      if (resp.status >= 400) return errorOutput(`refund refused: ${body}`);
      throw failed(`payments service returned ${resp.status}`);
    },
  },
];
