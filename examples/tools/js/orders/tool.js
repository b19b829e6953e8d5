// The `lookup_order` example tool (read-only). Build: node guest-sdk/js/bin/build.mjs
// examples/tools/js/orders/tool.js -o orders.wasm. The same tool exists in Rust, Go and Python
// under examples/tools; all of them answer every call identically.

import { errorOutput } from '@tollgate/guest';

// "1" … "99" exactly: no sign, no leading zero.
const KNOWN = /^[1-9][0-9]?$/;

export const tools = [
  {
    name: 'lookup_order',
    description: 'Look up an order by its id: status, total in cents and currency.',
    inputSchema: {
      type: 'object',
      properties: { order_id: { type: 'string', description: 'The order id.' } },
      required: ['order_id'],
      additionalProperties: false,
    },
    annotations: { readOnly: true, idempotent: true },
    handler({ order_id }) {
      if (!KNOWN.test(order_id)) return errorOutput(`order ${order_id} not found`);
      return JSON.stringify({
        order_id,
        status: 'delivered',
        total_cents: 600 * Number(order_id),
        currency: 'EUR',
      });
    },
  },
];
