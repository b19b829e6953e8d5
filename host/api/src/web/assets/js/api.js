// The HTTP API, as the CLI client calls it: the same routes, the bearer token from this tab's
// sessionStorage (never a URL), JSON errors turned into ApiError. Event streams are read with
// fetch (an EventSource cannot send the token) and resumed with Last-Event-ID.

const KEY = 'tollgate.token';

export function token() { return sessionStorage.getItem(KEY); }
export function setToken(value) { sessionStorage.setItem(KEY, value); }
export function clearToken() { sessionStorage.removeItem(KEY); }

/** An error answer of the API: `status`, and the body's `code`, `field`, `message`, `needed`. */
export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || 'http_error';
    this.field = error.field || null;
    this.needed = error.needed || null;
  }
  /** `403 group_required: …` */
  describe() { return `${this.status} ${this.code}: ${this.message}`; }
}

function headers(extra = {}) {
  const h = { ...extra };
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

/** `method path` with `body` as JSON; the answer's JSON, or throws ApiError. */
export async function call(method, path, body) {
  const init = { method, headers: headers(), cache: 'no-store' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  if (!response.ok) throw new ApiError(response.status, json);
  return json;
}

/** The image at `path` (sent with the token) as a `blob:` URL the page can show; throws
 *  ApiError. Revoke it with `URL.revokeObjectURL` when it is no longer shown. */
export async function image(path) {
  const response = await fetch(path, { headers: headers(), cache: 'default' });
  if (!response.ok) {
    let body = null;
    try { body = await response.json(); } catch { body = null; }
    throw new ApiError(response.status, body);
  }
  return URL.createObjectURL(await response.blob());
}

/** A path segment. */
export function seg(id) { return encodeURIComponent(id); }

/**
 * Reads the Server-Sent Events at `path` until closed: `onEvent({event, id, data})` for each
 * (data parsed as JSON), `onState('live' | 'reconnecting' | 'failed', detail)` on changes. After
 * a drop it reconnects (1 s, then up to 10 s apart) sending the last id as Last-Event-ID. A 401
 * or 403 ends it ('failed'). Returns `{close()}`.
 */
export function stream(path, onEvent, onState = () => {}) {
  let lastId = null, closed = false, controller = null, delay = 1000;
  async function run() {
    while (!closed) {
      controller = new AbortController();
      try {
        const extra = lastId === null ? {} : { 'Last-Event-ID': lastId };
        const response = await fetch(path, { headers: headers(extra), signal: controller.signal, cache: 'no-store' });
        if (!response.ok) {
          let body = null;
          try { body = await response.json(); } catch { body = null; }
          const error = new ApiError(response.status, body);
          if (response.status === 401 || response.status === 403 || response.status === 404) {
            onState('failed', error);
            return;
          }
          throw error;
        }
        onState('live');
        delay = 1000;
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
          let end;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const event = parse(block);
            if (!event) continue;
            if (event.id !== null) lastId = event.id;
            if (event.event === 'error') { onState('reconnecting', event.data); break; }
            onEvent(event);
          }
        }
      } catch (error) {
        if (closed) return;
        onState('reconnecting', error);
      }
      if (closed) return;
      controller.abort();
      onState('reconnecting');
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 10000);
    }
  }
  run();
  return { close() { closed = true; if (controller) controller.abort(); } };
}

/** Every event stored at `path` (a `follow=false` event stream) as `[{event, id, data}]`, read
 *  once to its end; throws ApiError. */
export async function storedEvents(path) {
  const response = await fetch(path, { headers: headers(), cache: 'no-store' });
  if (!response.ok) {
    let body = null;
    try { body = await response.json(); } catch { body = null; }
    throw new ApiError(response.status, body);
  }
  const text = (await response.text()).replace(/\r\n?/g, '\n');
  return text.split('\n\n').map(parse).filter((event) => event && event.event !== 'error');
}

function parse(block) {
  let event = 'message', id = null;
  const data = [];
  for (const line of block.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'id') id = value;
    else if (field === 'data') data.push(value);
  }
  if (data.length === 0) return null;
  let parsed;
  try { parsed = JSON.parse(data.join('\n')); } catch { parsed = data.join('\n'); }
  return { event, id, data: parsed };
}
