// @tollgate/guest: write Tollgate tools in JavaScript.
//
// A tool module exports a list of tools:
//
//   import { retryable, failed, log, config } from '@tollgate/guest';
//
//   export const tools = [{
//     name: 'lookup_order',
//     description: 'Look up an order by id.',
//     inputSchema: { type: 'object', properties: { order_id: { type: 'string' } }, required: ['order_id'] },
//     annotations: { readOnly: true, idempotent: true },
//     handler(args, execution) { return JSON.stringify({ order_id: args.order_id }); },
//   }];
//
// and `node guest-sdk/js/bin/build.mjs tool.js -o tool.wasm` builds the component (see README.md).
// Outbound HTTP: `import { fetch } from '@tollgate/guest/http'` (src/http.js).
//
// This module is what tool authors import. The glue that turns `tools` into the WIT export lives
// in runtime.js; the build bundles both with the author's module.

import { emit, get } from 'tollgate:guest/host';

const kind = Symbol.for('tollgate.call-error');

/** The error a handler throws for WIT `call-error.retryable`: a transient failure (a timeout, a
 * 503). A deferred idempotent write is attempted again with the same idempotency key. */
export function retryable(message) {
  const e = new Error(String(message));
  e[kind] = 'retryable';
  return e;
}

/** The error a handler throws for WIT `call-error.failed`: a permanent failure. */
export function failed(message) {
  const e = new Error(String(message));
  e[kind] = 'failed';
  return e;
}

/** 'retryable' or 'failed' for an error made by retryable()/failed(), undefined otherwise. */
export function callErrorKind(err) {
  return err != null && typeof err === 'object' ? err[kind] : undefined;
}

/** A text content block. */
export function text(s) {
  return { type: 'text', text: String(s) };
}

/** An image content block: `data` is a Uint8Array of the encoded image. */
export function image(mediaType, data) {
  return { type: 'image', mediaType, data };
}

/** An output the model reads as a tool-level failure (`is-error`): recorded, never retried. */
export function errorOutput(message) {
  return { content: [text(message)], isError: true };
}

const levels = ['trace', 'debug', 'info', 'warn', 'error'];

/** Writes to the host's log: `log.info('…')`, `log.warn('…')`, … (the host bounds length and count). */
export const log = Object.freeze(
  Object.fromEntries(levels.map((level) => [level, (message) => emit(level, String(message))])),
);

/** The value of config key `key` when the component's manifest grants it and a value is set,
 * otherwise undefined. */
export function config(key) {
  const v = get(String(key));
  return v == null ? undefined : v;
}

