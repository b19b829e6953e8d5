// DOM helpers. Data goes in as text only: `el` sets text with textContent and attributes with
// setAttribute; nothing here parses HTML.

/** An element: `attrs` are attributes (`text` sets textContent, `on*` functions add listeners,
 *  `true` sets an empty attribute, `false`/`null`/`undefined` leave it out); children are nodes
 *  or strings (added as text). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (name === 'text') node.textContent = String(value);
    else if (name.startsWith('on') && typeof value === 'function') node.addEventListener(name.slice(2), value);
    else if (name === 'disabled' || name === 'hidden' || name === 'checked' || name === 'required') node[name] = Boolean(value);
    else if (name === 'value') node.value = value;
    else node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Removes every child of `node`. */
export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

/** Readable JSON. */
export function pretty(value) {
  return JSON.stringify(value, null, 2);
}

/** A time (ms since the epoch) as local date and time. */
export function when(ms) {
  if (typeof ms !== 'number') return '';
  return new Date(ms).toLocaleString();
}

/** A duration in ms as `1h 2m 3s`. */
export function span(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return (h ? `${h}h ` : '') + (h || m ? `${m}m ` : '') + `${r}s`;
}

let ids = 0;
/** A fresh element id. */
export function uid(prefix) {
  ids += 1;
  return `${prefix}-${ids}`;
}

/** Shows `text` in the page's status line for a while. */
export function notify(text) {
  const notice = document.getElementById('notice');
  notice.textContent = text;
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => { notice.textContent = ''; }, 8000);
}
