// @tollgate/guest/http: fetch() over wasi:http@0.2.12 that tells a refused destination apart from
// a transport failure.
//
// StarlingMonkey's built-in fetch also works through the host's allow-list, but it rejects every
// failure with the same `TypeError: NetworkError when attempting to fetch resource`, so a tool
// cannot tell "the host denied this destination" (permanent) from "connection refused"
// (transient). This fetch rejects with an HttpError whose `code` is the wasi:http error-code case
// (`HTTP-request-denied`, `connection-refused`, …) and whose `denied` is true for a refusal.
//
// It runs synchronously (the instance blocks on the wasi:io pollable while the host waits) and
// returns an already settled promise. It supports method, headers (object, array of pairs, or
// Headers), a string/Uint8Array/ArrayBuffer body, and a Response with status, ok, headers.get(),
// text(), json() and arrayBuffer(). Importing this module selects the StarlingMonkey engine.

import { Fields, OutgoingBody, OutgoingRequest } from 'wasi:http/types@0.2.12';
import { handle } from 'wasi:http/outgoing-handler@0.2.12';

/** A request that produced no response. */
export class HttpError extends TypeError {
  constructor(url, code, detail) {
    super(`fetch ${url} failed: ${code}${detail ? ` (${detail})` : ''}`);
    this.name = 'HttpError';
    /** The wasi:http error-code case, such as `HTTP-request-denied` or `connection-refused`. */
    this.code = code;
  }

  /** The host refused the destination (not on the component's allow-list). */
  get denied() {
    return this.code === 'HTTP-request-denied';
  }
}

const METHODS = ['get', 'head', 'post', 'put', 'delete', 'connect', 'options', 'trace', 'patch'];
const encoder = new TextEncoder();
const decoder = new TextDecoder();

function toBytes(body) {
  if (body == null) return new Uint8Array(0);
  if (typeof body === 'string') return encoder.encode(body);
  if (body instanceof Uint8Array) return body;
  if (body instanceof ArrayBuffer) return new Uint8Array(body);
  throw new TypeError('fetch: body must be a string, Uint8Array or ArrayBuffer');
}

function headerEntries(h) {
  if (h == null) return [];
  if (Array.isArray(h)) return h.map(([k, v]) => [String(k), String(v)]);
  if (typeof h.entries === 'function' && Object.getPrototypeOf(h) !== Object.prototype) return [...h.entries()];
  return Object.entries(h).map(([k, v]) => [k, String(v)]);
}

// A wasi:http call's `err` arrives thrown, with the variant as `payload`.
function codeOf(err) {
  const v = err && typeof err === 'object' && 'payload' in err ? err.payload : err;
  if (v && typeof v === 'object' && typeof v.tag === 'string') {
    return [v.tag, v.tag === 'internal-error' && typeof v.val === 'string' ? v.val : ''];
  }
  return ['internal-error', String(err)];
}

function dispose(resource) {
  const d = resource && resource[Symbol.dispose];
  if (typeof d === 'function') d.call(resource);
}

class ResponseHeaders {
  constructor(entries) {
    this.list = entries.map(([k, v]) => [k.toLowerCase(), v]);
  }
  get(name) {
    const n = String(name).toLowerCase();
    const vs = this.list.filter(([k]) => k === n).map(([, v]) => v);
    return vs.length ? vs.join(', ') : null;
  }
  has(name) {
    return this.get(name) !== null;
  }
  [Symbol.iterator]() {
    return this.list[Symbol.iterator]();
  }
}

class HttpResponse {
  constructor(url, status, headers, bytes) {
    this.url = url;
    this.status = status;
    this.ok = status >= 200 && status < 300;
    this.headers = headers;
    this.bytes = bytes;
  }
  async text() {
    return decoder.decode(this.bytes);
  }
  async json() {
    return JSON.parse(decoder.decode(this.bytes));
  }
  async arrayBuffer() {
    return this.bytes.slice().buffer;
  }
}

function send(url, init) {
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/([^/?#]+)([^#]*)/.exec(url);
  if (!m) throw new HttpError(url, 'HTTP-request-URI-invalid');
  const [, scheme, authority, rest] = m;
  const method = String(init.method || 'GET').toUpperCase();
  const body = toBytes(init.body);
  const entries = headerEntries(init.headers).map(([k, v]) => [k.toLowerCase(), encoder.encode(v)]);
  if (body.length > 0 && !entries.some(([k]) => k === 'content-length')) {
    entries.push(['content-length', encoder.encode(String(body.length))]);
  }

  let fields;
  try {
    fields = Fields.fromList(entries);
  } catch (err) {
    throw new HttpError(url, 'HTTP-request-header-size', codeOf(err)[0]);
  }
  const req = new OutgoingRequest(fields);
  const lower = method.toLowerCase();
  req.setMethod(METHODS.includes(lower) ? { tag: lower } : { tag: 'other', val: method });
  const s = scheme.toLowerCase();
  req.setScheme(s === 'http' ? { tag: 'HTTP' } : s === 'https' ? { tag: 'HTTPS' } : { tag: 'other', val: s });
  req.setAuthority(authority);
  req.setPathWithQuery(rest || '/');
  const outBody = req.body();

  let future;
  try {
    future = handle(req, undefined);
  } catch (err) {
    throw new HttpError(url, ...codeOf(err));
  }
  // Write the body, then wait: when the host refused the request, the write fails and the
  // response future holds the reason, which is what the caller needs to see.
  let writeFailed = false;
  try {
    const stream = outBody.write();
    for (let i = 0; i < body.length; i += 4096) {
      stream.blockingWriteAndFlush(body.subarray(i, i + 4096));
    }
    dispose(stream);
    OutgoingBody.finish(outBody, undefined);
  } catch {
    writeFailed = true;
  }

  let got = future.get();
  if (got == null) {
    const p = future.subscribe();
    p.block();
    dispose(p);
    got = future.get();
  }
  // option<result<result<incoming-response, error-code>>>
  if (got == null || got.tag !== 'ok') throw new HttpError(url, 'internal-error', 'response not available');
  if (got.val.tag !== 'ok') throw new HttpError(url, ...codeOf(got.val.val));
  if (writeFailed) throw new HttpError(url, 'HTTP-request-body-size', 'writing the request body failed');
  const resp = got.val.val;
  const status = resp.status();
  const hf = resp.headers();
  const headers = new ResponseHeaders(hf.entries().map(([k, v]) => [k, decoder.decode(v)]));
  dispose(hf);
  const inBody = resp.consume();
  const input = inBody.stream();
  const chunks = [];
  let total = 0;
  for (;;) {
    let chunk;
    try {
      chunk = input.blockingRead(65536n);
    } catch (err) {
      if (codeOf(err)[0] === 'closed') break;
      throw new HttpError(url, 'HTTP-response-incomplete');
    }
    chunks.push(chunk);
    total += chunk.length;
  }
  dispose(input);
  dispose(inBody);
  dispose(resp);
  dispose(future);
  const bytes = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    bytes.set(c, off);
    off += c.length;
  }
  return new HttpResponse(url, status, headers, bytes);
}

/** fetch(url, { method, headers, body }) over wasi:http; rejects with an HttpError. */
export function fetch(input, init = {}) {
  try {
    return Promise.resolve(send(String(input), init));
  } catch (err) {
    return Promise.reject(err instanceof HttpError ? err : new HttpError(String(input), 'internal-error', String(err)));
  }
}
