// Unit tests of the build's schema derivation (bin/schema.mjs): `npm test`.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import { derivedSchemas } from '../bin/schema.mjs';

function source(text) {
  const file = join(mkdtempSync(join(tmpdir(), 'tollgate-schema-')), 'tool.js');
  writeFileSync(file, text);
  return file;
}

test('a handler typed by a JSDoc typedef gets its schema; a tool with inputSchema keeps its own', () => {
  const file = source(`
/**
 * @typedef {object} RefundArgs
 * @property {string} order_id The order to refund.
 * @property {number} amount_cents How much, in cents.
 * @property {'damaged' | 'late'} [reason] Why.
 * @property {string[]} [tags]
 * @property {Record<string, boolean>} [flags]
 * @property {{ note: string, urgent?: boolean }} [extra]
 */
export const tools = [
  {
    name: 'refund',
    description: 'r',
    /** @param {RefundArgs} args */
    handler(args) { return ''; },
  },
  { name: 'given', description: 'g', inputSchema: { type: 'object' }, handler(args) { return ''; } },
  { name: 'arrow', description: 'a', handler: (/** @type {{ id: string | null }} */ args) => '' },
];`);
  assert.deepEqual(derivedSchemas(file), {
    refund: {
      type: 'object',
      properties: {
        order_id: { type: 'string', description: 'The order to refund.' },
        amount_cents: { type: 'number', description: 'How much, in cents.' },
        reason: { enum: ['damaged', 'late'], description: 'Why.' },
        tags: { type: 'array', items: { type: 'string' } },
        flags: { type: 'object', additionalProperties: { type: 'boolean' } },
        extra: {
          type: 'object',
          properties: { note: { type: 'string' }, urgent: { type: 'boolean' } },
          required: ['note'],
          additionalProperties: false,
        },
      },
      required: ['order_id', 'amount_cents'],
      additionalProperties: false,
    },
    arrow: {
      type: 'object',
      properties: { id: { type: 'string' } },
      required: ['id'],
      additionalProperties: false,
    },
  });
});

test('a tool with neither inputSchema nor a JSDoc type is an error naming it', () => {
  const file = source(`export const tools = [{ name: 'bare', description: 'b', handler(args) { return ''; } }];`);
  assert.throws(() => derivedSchemas(file), /tool bare: give inputSchema, or a JSDoc type/);
});

test('a type with no JSON Schema here is an error naming the property', () => {
  const fn = source(`
/** @typedef {{ when: Date }} Args */
export const tools = [{
  name: 'dated',
  description: 'd',
  /** @param {Args} args */
  handler(args) { return ''; },
}];`);
  assert.throws(() => derivedSchemas(fn), /dated\.when: .*Date.*not a plain object type; give inputSchema/);
  const recursive = source(`
/** @typedef {{ name: string, children: Node[] }} Node */
export const tools = [{
  name: 'tree',
  description: 't',
  /** @param {Node} args */
  handler(args) { return ''; },
}];`);
  assert.throws(() => derivedSchemas(recursive), /tree\.children\[\]: a recursive type/);
});
