// Unit tests of the SDK's glue (src/runtime.js): `node --import ./test/register.mjs --test test/`.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { config, errorOutput, failed, image, log, retryable, text } from '../src/index.js';
import { makeToolsExport } from '../src/runtime.js';
import * as host from './host-stub.mjs';

const schema = { type: 'object', properties: { n: { type: 'integer' } } };
const tool = (name, handler, extra = {}) => ({ name, description: `the ${name} tool`, inputSchema: schema, handler, ...extra });

test('list-tools gives the schema as JSON text and every annotation, missing ones false', () => {
  const t = makeToolsExport([tool('a', () => 'x', { annotations: { readOnly: true } })]);
  assert.deepEqual(t.listTools(), [
    {
      name: 'a',
      description: 'the a tool',
      inputSchema: JSON.stringify(schema),
      annotations: { readOnly: true, idempotent: false, destructive: false, openWorld: false },
    },
  ]);
});

test('a bad tool list is refused when the module loads', () => {
  assert.throws(() => makeToolsExport({}), /export const tools/);
  assert.throws(() => makeToolsExport([tool('no spaces', () => '')]), /name/);
  assert.throws(() => makeToolsExport([tool('a', () => ''), tool('a', () => '')]), /duplicate/);
  assert.throws(() => makeToolsExport([tool('a', () => '', { annotations: { readonly: true } })]), /unknown annotation/);
  assert.throws(() => makeToolsExport([{ ...tool('a', () => ''), inputSchema: '[]' }]), /inputSchema/);
});

test('handlers get parsed arguments and the execution, or undefined for an inline call', () => {
  const seen = [];
  const t = makeToolsExport([tool('a', (args, execution) => (seen.push([args, execution]), 'ok'))]);
  t.call('a', '{"n":1}', null);
  const exec = { sessionId: 's', turnId: 't', toolCallId: 'c', attempt: 2, idempotencyKey: 's/t/c' };
  t.call('a', '{"n":2}', exec);
  assert.deepEqual(seen, [[{ n: 1 }, undefined], [{ n: 2 }, exec]]);
});

test('every return shape becomes a tool-output', () => {
  const out = (r) => makeToolsExport([tool('a', () => r)]).call('a', '{}');
  assert.deepEqual(out('hi'), { content: [{ tag: 'text', val: 'hi' }], isError: false });
  assert.deepEqual(out(['a', text('b')]), {
    content: [{ tag: 'text', val: 'a' }, { tag: 'text', val: 'b' }],
    isError: false,
  });
  assert.deepEqual(out(errorOutput('no such order')), { content: [{ tag: 'text', val: 'no such order' }], isError: true });
  const img = out([image('image/png', new Uint8Array([1, 2]))]).content[0];
  assert.equal(img.tag, 'image');
  assert.deepEqual([img.val.mediaType, [...img.val.data]], ['image/png', [1, 2]]);
});

test('thrown helpers become call-errors, anything else is retryable with its text (it may follow an effect)', () => {
  const err = (f) => {
    try {
      makeToolsExport([tool('a', f)]).call('a', '{}');
    } catch (e) {
      return e;
    }
    return 'no error';
  };
  assert.deepEqual(err(() => { throw retryable('503'); }), { tag: 'retryable', val: '503' });
  assert.deepEqual(err(() => { throw failed('gone'); }), { tag: 'failed', val: 'gone' });
  assert.deepEqual(err(() => { throw new RangeError('bad'); }), { tag: 'retryable', val: 'RangeError: bad' });
  assert.deepEqual(err(() => 42), { tag: 'retryable', val: 'TypeError: a handler must return a string, a content list or { content, isError }' });
  assert.deepEqual(err(() => ''), 'no error');
  let unknown;
  try {
    makeToolsExport([]).call('nope', '{}');
  } catch (e) {
    unknown = e;
  }
  assert.deepEqual(unknown, { tag: 'failed', val: 'unknown tool nope' });
});

test('async handlers resolve to a tool-output or reject with a call-error', async () => {
  const t = makeToolsExport([
    tool('ok', async () => 'later'),
    tool('busy', async () => { throw retryable('busy'); }),
  ]);
  assert.deepEqual(await t.call('ok', '{}'), { content: [{ tag: 'text', val: 'later' }], isError: false });
  await assert.rejects(t.call('busy', '{}'), (e) => e.tag === 'retryable' && e.val === 'busy');
});

test('log and config reach the host imports', () => {
  host.config.set('PAYMENTS_URL', 'http://x');
  assert.equal(config('PAYMENTS_URL'), 'http://x');
  assert.equal(config('MISSING'), undefined);
  log.warn('careful');
  assert.deepEqual(host.logged.at(-1), ['warn', 'careful']);
});
