// Turns an author's `tools` array into the WIT export `tollgate:tool/tools@0.1.0`
// ({ listTools, call }). The build's generated entry module calls makeToolsExport at build time
// (during the engine's snapshot), so an invalid tool list fails the build, not the first call.

import { callErrorKind } from './index.js';

const NAME = /^[A-Za-z0-9_-]{1,64}$/;
const ANNOTATIONS = ['readOnly', 'idempotent', 'destructive', 'openWorld'];

function validate(tools) {
  if (!Array.isArray(tools)) {
    throw new TypeError('the tool module must `export const tools = [ … ]`');
  }
  const seen = new Set();
  return tools.map((t, i) => {
    const where = `tools[${i}]${t && t.name ? ` (${t.name})` : ''}`;
    if (!t || typeof t !== 'object') throw new TypeError(`${where}: not an object`);
    if (typeof t.name !== 'string' || !NAME.test(t.name)) {
      throw new TypeError(`${where}: name must be 1 to 64 ASCII letters, digits, '_' or '-'`);
    }
    if (seen.has(t.name)) throw new TypeError(`${where}: duplicate tool name`);
    seen.add(t.name);
    if (typeof t.description !== 'string') throw new TypeError(`${where}: description must be a string`);
    if (typeof t.handler !== 'function') throw new TypeError(`${where}: handler must be a function`);
    const schema = typeof t.inputSchema === 'string' ? JSON.parse(t.inputSchema) : t.inputSchema;
    if (!schema || typeof schema !== 'object' || Array.isArray(schema)) {
      throw new TypeError(`${where}: inputSchema must be a JSON Schema object (or its JSON text)`);
    }
    const a = t.annotations || {};
    for (const k of Object.keys(a)) {
      if (!ANNOTATIONS.includes(k)) throw new TypeError(`${where}: unknown annotation ${k}`);
    }
    return {
      spec: {
        name: t.name,
        description: t.description,
        inputSchema: JSON.stringify(schema),
        annotations: {
          readOnly: !!a.readOnly,
          idempotent: !!a.idempotent,
          destructive: !!a.destructive,
          openWorld: !!a.openWorld,
        },
      },
      handler: t.handler,
    };
  });
}

function contentBlock(c) {
  if (typeof c === 'string') return { tag: 'text', val: c };
  if (c && c.type === 'text') return { tag: 'text', val: String(c.text) };
  if (c && c.type === 'image') {
    return { tag: 'image', val: { mediaType: String(c.mediaType), data: new Uint8Array(c.data) } };
  }
  throw new TypeError(`a content block must be a string, {type:'text',text} or {type:'image',mediaType,data}`);
}

// A handler's result: a string, a list of content blocks, or { content, isError }.
function toOutput(r) {
  if (typeof r === 'string') return { content: [{ tag: 'text', val: r }], isError: false };
  if (Array.isArray(r)) return { content: r.map(contentBlock), isError: false };
  if (r && typeof r === 'object' && 'content' in r) {
    const content = typeof r.content === 'string' ? [r.content] : r.content;
    return { content: content.map(contentBlock), isError: !!r.isError };
  }
  throw new TypeError('a handler must return a string, a content list or { content, isError }');
}

// The WIT `result<tool-output, call-error>` err case is thrown. Any other exception is
// `retryable`: the handler may have sent its write before it threw (a refund, then a parse error on
// the answer), so an idempotent write is attempted again under the same key and a single-attempt
// write is recorded `outcome_unknown`, never `failed`.
function toCallError(err) {
  const k = callErrorKind(err);
  if (k) return { tag: k, val: err.message };
  const message = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  // The stack goes to stderr, which the host logs and records; the model reads only the message.
  if (err instanceof Error && err.stack && typeof console !== 'undefined' && console.error) {
    console.error(`${message}\n${err.stack}`);
  }
  return { tag: 'retryable', val: message };
}

function execution(e) {
  if (e == null) return undefined;
  return {
    sessionId: e.sessionId,
    turnId: e.turnId,
    toolCallId: e.toolCallId,
    attempt: e.attempt,
    idempotencyKey: e.idempotencyKey,
  };
}

export function makeToolsExport(userTools) {
  const tools = validate(userTools);
  const byName = new Map(tools.map((t) => [t.spec.name, t]));
  const specs = tools.map((t) => t.spec);
  return {
    listTools() {
      return specs;
    },
    call(name, args, exec) {
      const t = byName.get(name);
      if (!t) throw { tag: 'failed', val: `unknown tool ${name}` };
      let r;
      try {
        r = t.handler(JSON.parse(args), execution(exec));
      } catch (err) {
        throw toCallError(err);
      }
      if (r && typeof r.then === 'function') {
        return r.then(
          (v) => {
            try {
              return toOutput(v);
            } catch (err) {
              throw toCallError(err);
            }
          },
          (err) => {
            throw toCallError(err);
          },
        );
      }
      try {
        return toOutput(r);
      } catch (err) {
        throw toCallError(err);
      }
    },
  };
}
