// The approvals inbox: every pending approval across sessions, live over
// GET /v1/interrupts/events, grouped by batch when the API names one, each led by its policy's
// one-sentence summary when it has one (the tool, session, arguments and who may decide folded
// below), else by its tool, effect, arguments, who may decide and its deadline; approve, approve for this session,
// reject with a reason, or edit the arguments first. A decision is held on its card for a few
// seconds with an Undo before it is sent; focus moves on to the next card. Buttons the principal may not use are
// disabled with the API's reason.

import { call, seg, stream } from './api.js';
import { mountAttention } from './attention.js';
import { clear, el, notify, pretty, span, uid, when } from './dom.js';
import { describe, diff, editor, validate } from './schema.js';

const keyOf = (item) => JSON.stringify([item.session_id, item.interrupt_id]);
const field = (item, name) => (item[name] !== undefined ? item[name] : item.request && item.request[name]);

let early = null;

/** Starts reading the inbox while the page still asks who is signed in (one round trip less
 *  before the first paint); `mount` adopts it. */
export function prefetch() {
  if (early) return;
  const buffered = [];
  const handlers = { onEvent: (e) => buffered.push(['event', e]), onState: (s, d) => buffered.push(['state', s, d]) };
  const live = stream('/v1/interrupts/events', (e) => handlers.onEvent(e), (s, d) => handlers.onState(s, d));
  early = { live, buffered, handlers };
}

/** Drops a prefetched stream `mount` did not adopt. */
export function cancelPrefetch() {
  if (early) { early.live.close(); early = null; }
}

/** Mounts the inbox in `view`; returns its unmount. */
export function mount(view, me) {
  const offAttention = mountAttention(view, me);
  const items = new Map();
  const cards = new Map();
  const batches = new Map();
  let total = 0;
  let painted = false;
  const summary = el('p', { class: 'summary', id: 'inbox-summary', 'aria-live': 'polite', text: 'Connecting\u2026' });
  const list = el('div', { id: 'inbox-list' });
  const tools = new Controls(() => arrange());
  view.append(el('h2', { text: 'Approvals waiting' }), tools.node, summary, tools.bulk, list, tools.help);
  const offKeys = keyboard(list, tools);
  list.addEventListener('selection', () => tools.selection());

  /** Applies the filters (hiding what does not match), the sort and the view. */
  function arrange() {
    list.classList.toggle('compact', tools.view === 'list');
    tools.offer(items.values());
    const order = [...cards.entries()].map(([key, card]) => [items.get(key), card]).filter(([item]) => item);
    order.sort(([a], [b]) => tools.compare(a, b));
    let shown = 0;
    // Moving a node drops the focus inside it: only cards out of place move, and the focus is
    // put back.
    const focused = document.activeElement;
    const before = new Map();
    for (const [item, card] of order) {
      card.hidden = !tools.matches(item);
      if (!card.hidden) shown += 1;
      const home = card.parentNode;
      const last = before.get(home) || null;
      const expected = last ? last.nextElementSibling : home.querySelector(':scope > .card');
      if (expected !== card) home.insertBefore(card, expected);
      before.set(home, card);
    }
    if (focused && focused !== document.activeElement && focused.isConnected) focused.focus();
    for (const group of batches.values()) group.section.hidden = !group.section.querySelector('.card:not([hidden])');
    tools.shown(shown, cards.size);
    tools.selection();
  }

  function updateSummary() {
    const shown = items.size;
    if (shown === 0) summary.textContent = 'Nothing waits for a decision.';
    else if (total > shown) summary.textContent = `${total} pending; showing the oldest ${shown}.`;
    else summary.textContent = `${shown} pending.`;
  }

  function container(item) {
    const batch = field(item, 'batch_id');
    if (batch === undefined || batch === null) return list;
    let group = batches.get(batch);
    if (!group) {
      const heading = el('h3');
      const section = el('section', { class: 'batch', 'data-batch': batch, 'aria-label': `Batch ${batch}` }, heading);
      group = { section, heading, batch };
      batches.set(batch, group);
      list.append(section);
    }
    return group.section;
  }

  function recount() {
    for (const [batch, group] of batches) {
      const n = group.section.querySelectorAll('.card').length;
      if (n === 0) { group.section.remove(); batches.delete(batch); continue; }
      group.heading.textContent = `Batch ${batch}: ${n} call${n === 1 ? '' : 's'} from one reply`;
    }
  }

  // A snapshot renders its first cards at once and the rest in slices, so the page paints
  // early and stays responsive; a newer snapshot abandons an older one's slices.
  let generation = 0;
  function renderAll(done) {
    generation += 1;
    const mine = generation;
    clear(list);
    cards.clear();
    batches.clear();
    const keys = [...items.keys()];
    let next = 0;
    const slice = (n) => {
      if (mine !== generation) return;
      const fragment = document.createDocumentFragment();
      for (const end = Math.min(keys.length, next + n); next < end; next += 1) {
        const key = keys[next];
        const item = items.get(key);
        if (!item || cards.has(key)) continue;
        const card = build(item);
        cards.set(key, card);
        const home = container(item);
        (home === list ? fragment : home).append(card);
      }
      list.append(fragment);
      recount();
      if (next < keys.length) setTimeout(() => slice(200), 0);
      else arrange();
    };
    slice(40);
    updateSummary();
    if (done) done();
  }

  function upsert(item) {
    const key = keyOf(item);
    items.set(key, item);
    const card = build(item);
    card.dataset.shownAt = String(Date.now());
    const old = cards.get(key);
    if (old && old.cancelHeld) return; // a held decision keeps its card until it is sent or undone
    cards.set(key, card);
    if (old) old.replaceWith(card);
    else container(item).append(card);
  }

  function remove(key) {
    items.delete(key);
    const card = cards.get(key);
    cards.delete(key);
    if (card && card.cancelHeld) card.cancelHeld();
    if (card) card.remove();
  }

  function onEvent(event) {
    const data = event.data || {};
    if (event.event === 'snapshot') {
      if (!painted) performance.mark('inbox-snapshot');
      items.clear();
      for (const item of data.interrupts || []) items.set(keyOf(item), item);
      total = data.total || 0;
      const start = performance.now();
      renderAll();
      if (!painted) {
        painted = true;
        const rendered = performance.now() - start;
        // After the next frame: the first cards are on screen.
        requestAnimationFrame(() => setTimeout(() => {
          document.body.dataset.inboxPaintMs = performance.now().toFixed(1);
          document.body.dataset.inboxRenderMs = rendered.toFixed(1);
        }, 0));
      }
    } else if (event.event === 'changed') {
      for (const gone of data.gone || []) remove(JSON.stringify([gone.session_id, gone.interrupt_id]));
      for (const item of data.interrupts || []) upsert(item);
      total = data.total || 0;
      recount();
      updateSummary();
      arrange();
    }
  }

  function onState(state, detail) {
    if (state === 'live' && painted) updateSummary();
    else if (state === 'failed') summary.textContent = `The inbox cannot be read: ${detail.describe ? detail.describe() : detail}`;
    else if (state === 'reconnecting') summary.textContent = 'Connection lost; reconnecting\u2026';
  }

  let live;
  if (early) {
    const adopted = early;
    early = null;
    adopted.handlers.onEvent = onEvent;
    adopted.handlers.onState = onState;
    for (const [kind, a, b] of adopted.buffered) { if (kind === 'event') onEvent(a); else onState(a, b); }
    live = adopted.live;
  } else {
    live = stream('/v1/interrupts/events', onEvent, onState);
  }
  const timer = setInterval(() => tick(list), 1000);
  return () => { live.close(); clearInterval(timer); offKeys(); offAttention(); };
}

/** Updates every deadline's countdown. */
function tick(root) {
  for (const node of root.querySelectorAll('[data-deadline]')) countdown(node);
  for (const node of root.querySelectorAll('[data-opened]')) node.textContent = ago(Number(node.dataset.opened));
}

/** How long ago `ms` (since the epoch) was: `just now`, `5 min ago`, `3 h ago`, `2 days ago`. */
export function ago(ms) {
  const s = Math.max(0, Math.floor((Date.now() - ms) / 1000));
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  const d = Math.floor(s / 86400);
  return `${d} day${d === 1 ? '' : 's'} ago`;
}

/** The review's risk of an item: `high`, `medium`, `low`, `unknown` (the review failed) or `none`. */
const riskOf = (item) => (item.review === undefined ? 'none' : (item.review && item.review.risk) || 'unknown');
const RISK_RANK = { high: 0, medium: 1, low: 2, unknown: 3, none: 4 };

/** The inbox's filters (agent, tool, session, age, risk, search), sort, view and bulk actions. */
class Controls {
  constructor(changed) {
    const select = (id, label, options) => {
      const node = el('select', { id }, ...options.map(([value, text]) => el('option', { value, text })));
      node.addEventListener('change', changed);
      return [node, el('label', { for: id }, label, node)];
    };
    const input = (id, label, type) => {
      const node = el('input', { id, type, autocomplete: 'off' });
      node.addEventListener('input', changed);
      return [node, el('label', { for: id }, label, node)];
    };
    let agentLabel, toolLabel, sessionLabel, ageLabel, riskLabel, searchLabel, sortLabel;
    [this.agent, agentLabel] = select('inbox-agent', 'Agent', [['', 'Any agent']]);
    [this.tool, toolLabel] = select('inbox-tool', 'Tool', [['', 'Any tool']]);
    [this.session, sessionLabel] = input('inbox-session', 'Session', 'text');
    [this.age, ageLabel] = select('inbox-age', 'Waiting', [['', 'Any time'], ['300000', 'Over 5 min'], ['3600000', 'Over 1 h'], ['86400000', 'Over 1 day']]);
    [this.risk, riskLabel] = select('inbox-risk', 'Risk', [['', 'Any risk'], ['high', 'High'], ['medium', 'Medium'], ['low', 'Low'], ['unknown', 'Review failed'], ['none', 'Not reviewed']]);
    [this.search, searchLabel] = input('inbox-search', 'Search', 'search');
    [this.sort, sortLabel] = select('inbox-sort', 'Sort', [['oldest', 'Oldest first'], ['newest', 'Newest first'], ['tool', 'By tool'], ['risk', 'Highest risk first']]);
    this.view = 'cards';
    this.toggle = el('button', { type: 'button', id: 'inbox-view', 'aria-pressed': 'false', text: 'List view' });
    this.toggle.addEventListener('click', () => {
      this.view = this.view === 'list' ? 'cards' : 'list';
      this.toggle.setAttribute('aria-pressed', String(this.view === 'list'));
      changed();
    });
    this.count = el('span', { class: 'count', 'aria-live': 'polite' });
    this.node = el('form', { class: 'toolbar', role: 'search', 'aria-label': 'Filter approvals' },
      agentLabel, toolLabel, sessionLabel, ageLabel, riskLabel, searchLabel, sortLabel, this.toggle, this.count);
    this.node.addEventListener('submit', (event) => event.preventDefault());
    // Bulk: the selected rows of one tool, each still its own decision.
    this.approveAll = el('button', { type: 'button', id: 'bulk-approve', class: 'primary', disabled: true, text: 'Approve selected' });
    this.rejectAll = el('button', { type: 'button', id: 'bulk-reject', class: 'danger', disabled: true, text: 'Reject selected' });
    this.bulkWhy = el('span', { class: 'hint', id: 'bulk-why' });
    this.approveAll.addEventListener('click', () => { for (const card of this.selected()) card.approveNow(); this.selection(); });
    this.rejectAll.addEventListener('click', () => { for (const card of this.selected()) card.rejectNow(); this.selection(); });
    this.bulk = el('div', { class: 'bulk', hidden: true }, this.approveAll, this.rejectAll, this.bulkWhy);
    const keys = [['j / k', 'next / previous approval'], ['a', 'approve'], ['r', 'reject (type the reason, Enter)'],
      ['e', 'edit the arguments'], ['x', 'select the row (list view)'], ['u', 'undo the last decision'],
      ['Esc', 'close, or leave a field'], ['?', 'show or hide these keys']];
    this.help = el('section', { class: 'keys', id: 'inbox-keys', hidden: true, 'aria-labelledby': 'keys-h' },
      el('h3', { id: 'keys-h', text: 'Keyboard shortcuts' }),
      el('dl', {}, ...keys.flatMap(([k, what]) => [el('dt', {}, el('kbd', { text: k })), el('dd', { text: what })])));
  }

  /** Adds the agents and tools of `items` to their filters. */
  offer(items) {
    for (const item of items) {
      for (const [node, value] of [[this.agent, item.agent], [this.tool, item.tool_name]]) {
        if (value && ![...node.options].some((o) => o.value === value)) node.append(el('option', { value, text: value }));
      }
    }
  }

  matches(item) {
    if (this.agent.value && item.agent !== this.agent.value) return false;
    if (this.tool.value && item.tool_name !== this.tool.value) return false;
    const session = this.session.value.trim();
    if (session && !item.session_id.includes(session)) return false;
    if (this.age.value && Date.now() - item.created_at < Number(this.age.value)) return false;
    if (this.risk.value && riskOf(item) !== this.risk.value) return false;
    const q = this.search.value.trim().toLowerCase();
    if (q) {
      const text = [field(item, 'summary'), item.tool_name, item.session_id, item.agent, item.started_by, JSON.stringify(item.arguments)].join(' ').toLowerCase();
      if (!text.includes(q)) return false;
    }
    return true;
  }

  compare(a, b) {
    if (this.sort.value === 'newest') return b.created_at - a.created_at;
    if (this.sort.value === 'tool') return a.tool_name.localeCompare(b.tool_name) || a.created_at - b.created_at;
    if (this.sort.value === 'risk') return RISK_RANK[riskOf(a)] - RISK_RANK[riskOf(b)] || a.created_at - b.created_at;
    return a.created_at - b.created_at;
  }

  shown(n, of) {
    this.count.textContent = n === of ? '' : `${n} of ${of} shown`;
  }

  selected() {
    return [...document.querySelectorAll('#inbox-list .card:not([hidden]):not(.held):not(.decided)')].filter((c) => c.querySelector('input.select').checked);
  }

  /** Enables the bulk buttons when the selected rows are all of one tool. */
  selection() {
    this.bulk.hidden = this.view !== 'list';
    const picked = this.selected();
    const tools = new Set(picked.map((c) => c.dataset.tool));
    const ok = picked.length > 0 && tools.size === 1 && picked.every((c) => !c.querySelector('button.approve').disabled);
    this.approveAll.disabled = !ok;
    this.rejectAll.disabled = !ok;
    this.bulkWhy.textContent = picked.length === 0 ? 'Select rows (x) to decide them together.'
      : tools.size > 1 ? 'Select rows of one tool only.' : `${picked.length} selected of ${[...tools][0]}.`;
  }
}

/** The inbox's keys (see the `?` list); returns their removal. */
function keyboard(list, tools) {
  const visible = () => [...list.querySelectorAll('.card:not([hidden]):not(.held):not(.decided)')];
  const current = () => {
    const at = document.activeElement && document.activeElement.closest && document.activeElement.closest('.card');
    return at && list.contains(at) ? at : null;
  };
  const go = (card) => {
    if (!card) return;
    const approve = card.querySelector('button.approve:not([disabled])');
    if (approve) approve.focus(); else { card.tabIndex = -1; card.focus(); }
    card.scrollIntoView({ block: 'nearest' });
  };
  const onKey = (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(event.target.tagName);
    if (event.key === 'Escape') {
      if (!tools.help.hidden) { tools.help.hidden = true; event.preventDefault(); return; }
      const card = current();
      if (card) {
        for (const box of card.querySelectorAll('.confirm, .editor')) box.hidden = true;
        if (typing) go(card);
      }
      return;
    }
    if (typing) return;
    const cards = visible();
    const here = current();
    const at = here ? cards.indexOf(here) : -1;
    const handled = {
      j: () => go(cards[Math.min(cards.length - 1, at + 1)]),
      k: () => go(cards[Math.max(0, at - 1)]),
      a: () => { if (here) here.approveNow(); },
      r: () => { if (here) here.querySelector('input.reason').focus(); },
      e: () => { if (here) here.querySelector('button.edit').click(); },
      x: () => { if (here && tools.view === 'list') { const box = here.querySelector('input.select'); box.checked = !box.checked; tools.selection(); } },
      u: () => { const held = [...list.querySelectorAll('.card.held')].pop(); if (held) held.querySelector('button.undo').click(); },
      '?': () => { tools.help.hidden = !tools.help.hidden; },
    }[event.key];
    if (!handled) return;
    event.preventDefault();
    if (at < 0 && 'jk'.includes(event.key) && cards.length) { go(cards[0]); return; }
    handled();
  };
  document.addEventListener('keydown', onKey);
  return () => document.removeEventListener('keydown', onKey);
}

function countdown(node) {
  const left = Number(node.dataset.deadline) - Date.now();
  node.textContent = left > 0 ? `${span(left)} left` : `expired ${span(-left)} ago`;
  node.classList.toggle('late', left <= 60000);
}

function deadlineMs(value) {
  if (typeof value === 'number') return value;
  if (typeof value === 'string') { const t = Date.parse(value); return Number.isNaN(t) ? null : t; }
  return null;
}

/** One approval's card. */
function build(item) {
  const request = item.request || {};
  const right = item.decide || { allowed: true };
  const titleId = uid('title');
  const whyId = uid('why');
  const card = el('article', { class: 'card', 'aria-labelledby': titleId });
  card.dataset.session = item.session_id;
  card.dataset.interrupt = item.interrupt_id;
  card.dataset.tool = item.tool_name;
  // The list view's row: a box to select it, its agent, session and age.
  const selectId = uid('select');
  const pick = el('input', { type: 'checkbox', class: 'select', id: selectId });
  pick.addEventListener('change', () => card.dispatchEvent(new CustomEvent('selection', { bubbles: true })));
  card.append(el('div', { class: 'row-meta' },
    el('label', { for: selectId, class: 'select-label' }, pick, 'Select'),
    el('span', { text: item.agent || 'no agent' }),
    el('a', { href: `#/session/${seg(item.session_id)}`, text: item.session_id }),
    el('span', { 'data-opened': String(item.created_at), text: ago(item.created_at) })));

  // The decision first: the policy's one-sentence summary heads the card, the tool and its
  // ids collapse below. Without a summary the card shows the tool call as it is.
  const sentence = field(item, 'summary');
  const effect = request.effect || '';
  const badges = [el('span', { class: `badge${/write/.test(effect) ? ' write' : ''}`, text: effect }),
    el('span', { class: 'badge', text: request.kind || '' })];
  if (request.ahead) badges.push(el('span', { class: 'badge', title: 'Decided now, used when the model repeats this exact call in the same turn', text: 'asked ahead' }));
  const escalatedAt = field(item, 'escalated_at');
  if (escalatedAt || field(item, 'escalated')) badges.push(el('span', { class: 'badge escalated', text: 'escalated' }));
  // A call an MCP client made (`/mcp/{agent}`), not the model: the approver reads who asked.
  const requestedBy = field(item, 'requested_by');
  if (requestedBy) badges.push(el('span', { class: 'badge', title: 'Called through /mcp by an MCP client, not by the model', text: `called by ${requestedBy} (MCP)` }));
  const header = sentence
    ? el('header', { class: 'decision' },
      el('h3', { id: titleId, class: 'sentence', text: sentence }),
      el('p', { class: 'call' }, el('code', { class: 'tool', text: item.tool_name }), ' ', ...badges))
    : el('header', {}, el('h3', { id: titleId, text: item.tool_name }), ...badges);
  card.append(header);

  // The options factory's review, above the arguments: the risk in words (never colour alone),
  // how many approvers it needs and who approved so far, then its notes.
  const review = field(item, 'review');
  const required = field(item, 'approvals_required') || 1;
  if (review || required > 1) {
    const risk = review ? review.risk || 'unknown' : 'unknown';
    const label = risk === 'unknown' ? 'Risk unknown' : `${risk[0].toUpperCase()}${risk.slice(1)} risk`;
    const approvals = item.approvals || [];
    const progress = required > 1
      ? el('span', { class: 'approvals' }, ` \u00b7 ${approvals.length} of ${required} approvals`,
        approvals.length ? ` (approved by ${approvals.map((a) => a.principal).join(', ')})` : '')
      : null;
    const notes = review && review.notes.length
      ? el('ul', { class: 'notes' }, ...review.notes.map((note) => el('li', { text: note })))
      : null;
    card.append(el('div', { class: `review risk-${risk}` },
      el('p', { class: 'risk-line' }, el('strong', { class: `risk risk-${risk}`, text: label }), progress), notes));
  }

  const approvers = field(item, 'approvers') || [];
  const facts = el('dl', { class: 'facts' },
    el('dt', { text: 'Session' }),
    el('dd', {}, el('a', { href: `#/session/${seg(item.session_id)}`, class: 'session-link', text: item.session_id })),
    el('dt', { text: 'Interrupt' }), el('dd', { text: item.interrupt_id }),
    el('dt', { text: 'Opened' }), el('dd', { text: when(item.created_at) }),
    el('dt', { text: 'Started by' }), el('dd', { text: item.started_by || 'not recorded' }),
    el('dt', { text: 'Who may decide' }),
    el('dd', { text: approvers.length ? `approvers in ${approvers.join(', ')}` : 'any approver' }));
  if (escalatedAt) {
    const from = field(item, 'escalated_from') || [];
    facts.append(el('dt', { text: 'Escalated' }),
      el('dd', { text: `${when(escalatedAt)}${from.length ? ` from ${from.join(', ')}` : ' from any approver'}` }));
  }
  const deadline = deadlineMs(field(item, 'deadline_at'));
  let deadlineLine = null;
  if (deadline !== null) {
    const node = el('span', { class: 'deadline', 'data-deadline': String(deadline) });
    countdown(node);
    const policy = field(item, 'deadline') || {};
    const then = policy.on_timeout === 'escalate' && !escalatedAt
      ? `, then escalates to ${(policy.escalate_to || []).join(', ') || 'other approvers'}`
      : ', then it is rejected';
    deadlineLine = [node, ` (${when(deadline)}${then})`];
  }
  const argsId = uid('args');
  const args = el('figure', { class: 'args' },
    el('figcaption', { id: argsId, text: 'Arguments' }),
    el('pre', { 'aria-labelledby': argsId }, pretty(item.arguments)));
  if (sentence) {
    // The deadline stays in sight; the rest is one click away.
    if (deadlineLine) card.append(el('p', { class: 'deadline-line' }, 'Deadline: ', ...deadlineLine));
    card.append(el('details', { class: 'more' },
      el('summary', { text: `Arguments and ids (${item.tool_name}, session ${item.session_id})` }), args, facts));
  } else {
    if (deadlineLine) facts.append(el('dt', { text: 'Deadline' }), el('dd', {}, ...deadlineLine));
    card.append(facts, args);
  }

  const result = el('p', { class: 'result', role: 'status' });
  const why = el('p', { class: 'why', id: whyId, text: right.allowed ? '' : `You may not decide this: ${right.reason}` });
  const buttons = [];
  const button = (label, cls, handler, type = 'button') => {
    const b = el('button', { type, class: cls, text: label });
    if (handler) b.addEventListener('click', handler);
    buttons.push(b);
    return b;
  };
  const path = `/v1/sessions/${seg(item.session_id)}/interrupts/${seg(item.interrupt_id)}`;
  const send = async (body, done) => {
    for (const b of buttons) b.disabled = true;
    result.classList.remove('failed');
    result.textContent = 'Sending\u2026';
    try {
      const receipt = await call('POST', path, body);
      const progress = receipt && receipt.approvals;
      // An approval that counted but did not decide: the card stays, and the inbox's next
      // change redraws it with the approvals so far.
      const counted = progress ? ` (${progress.approvals} of ${progress.required} approvals; another approver decides it)` : '';
      result.textContent = `${done} by you${counted}`;
      card.classList.remove('held');
      if (!progress) card.classList.add('decided');
      notify(`${done}${counted}: ${item.tool_name} in session ${item.session_id}`);
    } catch (error) {
      card.classList.remove('held');
      actions.hidden = false;
      result.classList.add('failed');
      result.textContent = error.describe ? error.describe() : String(error);
      for (const b of buttons) b.disabled = !right.allowed;
    }
  };
  // A decision is held here for a few seconds, undoable, before anything is sent: the server
  // sees one decision or none.
  const decide = (body, done) => {
    const undo = el('button', { type: 'button', class: 'undo', text: 'Undo' });
    const held = el('p', { class: 'held-line' }, `${done} by you \u00b7 `, undo);
    let timer = null;
    const restore = () => {
      clearTimeout(timer);
      card.classList.remove('held');
      delete card.dataset.heldUntil;
      card.cancelHeld = null;
      held.remove();
      actions.hidden = false;
      editorHome.hidden = true;
      result.textContent = '';
    };
    undo.addEventListener('click', () => {
      restore();
      notify(`Undone: ${item.tool_name} in session ${item.session_id} still waits`);
      const again = card.querySelector('button.approve');
      if (again) again.focus();
    });
    actions.hidden = true;
    editorHome.hidden = true;
    confirmBox.hidden = true;
    card.classList.add('held');
    card.dataset.heldUntil = String(Date.now() + holdMs());
    card.cancelHeld = restore;
    result.before(held);
    focusNext(card);
    timer = setTimeout(() => {
      held.remove();
      card.cancelHeld = null;
      send(body, done);
    }, holdMs());
  };
  // Above the policy's threshold, Approve asks once more.
  const confirm = field(item, 'confirm_above');
  const amount = confirm && Number(item.arguments && item.arguments[confirm.argument]);
  const needsConfirm = Boolean(confirm) && Number.isFinite(amount) && amount > Number(confirm.above);
  const confirmYes = el('button', { type: 'button', class: 'primary confirm-approve', text: 'Yes, approve' });
  const confirmNo = el('button', { type: 'button', class: 'confirm-cancel', text: 'Cancel' });
  const confirmBox = el('div', { class: 'confirm', role: 'group', 'aria-label': 'Confirm the approval', hidden: true },
    el('p', { text: `${confirm ? confirm.argument : ''} is ${amount}, above ${confirm ? confirm.above : ''}: approve anyway?` }),
    confirmYes, confirmNo);
  confirmYes.addEventListener('click', () => decide({ approved: true }, 'Approved'));
  confirmNo.addEventListener('click', () => { confirmBox.hidden = true; approve.focus(); });
  const approve = button('Approve', 'primary approve', () => {
    if (needsConfirm) { confirmBox.hidden = false; confirmYes.focus(); } else decide({ approved: true }, 'Approved');
  });
  const reasonId = uid('reason');
  const reason = el('input', { id: reasonId, type: 'text', class: 'reason', placeholder: field(item, 'requested_by') ? 'What the client is told' : 'What the model is told' });
  buttons.push(reason);
  const editorHome = el('div', { class: 'editor', hidden: true });
  const rejectForm = el('form', { class: 'reject' },
    el('label', { for: reasonId }, 'Reason for rejecting', reason),
    button('Reject', 'danger reject-button', null, 'submit'));
  rejectForm.addEventListener('submit', (event) => {
    event.preventDefault();
    const text = reason.value.trim();
    decide(text ? { approved: false, message: text } : { approved: false }, 'Rejected');
  });
  // The broader approval sits in a secondary menu, away from Approve.
  const more = el('details', { class: 'more-actions' }, el('summary', { text: 'More\u2026' }),
    button('Approve for this session', 'approve-session', () => decide({ approved: true, scope: 'session' }, 'Approved for this session')));
  const actions = el('div', { class: 'actions' },
    approve,
    button('Edit arguments\u2026', 'edit', () => openEditor(item, editorHome, decide)),
    rejectForm, more);
  for (const b of buttons) {
    if (!right.allowed) {
      b.disabled = true;
      b.setAttribute('aria-describedby', whyId);
      b.title = right.reason || '';
    }
  }
  card.append(actions, confirmBox, why, result, editorHome);
  // What the keys and the bulk buttons use: the same paths as the buttons.
  card.approveNow = () => { if (!approve.disabled && !card.classList.contains('held')) approve.click(); };
  card.rejectNow = () => { if (!approve.disabled && !card.classList.contains('held')) rejectForm.requestSubmit(); };
  return card;
}

/** How long a decision is held, undoable, before it is sent (ms): 5 s, or the session's
 *  `tollgate.holdMs`. */
function holdMs() {
  const stored = sessionStorage.getItem('tollgate.holdMs');
  return stored !== null && Number(stored) >= 0 ? Number(stored) : 5000;
}

/** Moves focus to the card after `card` still waiting (or the one before): its Approve when the
 *  principal may use it, else the card. */
function focusNext(card) {
  const open = [...document.querySelectorAll('.card')].filter((c) => c === card || !(c.classList.contains('held') || c.classList.contains('decided')));
  const at = open.indexOf(card);
  const next = open[at + 1] || open[at - 1];
  if (!next || next === card) return;
  const approve = next.querySelector('button.approve:not([disabled])');
  if (approve) approve.focus();
  else { next.tabIndex = -1; next.focus(); }
}

/** Opens (or closes) the argument editor of `item` in `home`. */
function openEditor(item, home, decide) {
  if (!home.hidden) { home.hidden = true; clear(home); return; }
  const schema = (item.request && item.request.input_schema) || null;
  const original = item.arguments || {};
  const errors = el('ul', { class: 'errors' });
  const changes = el('ul', { class: 'diff', 'aria-live': 'polite' });
  const submit = el('button', { type: 'button', class: 'primary approve-edited', disabled: true, text: 'Approve with these arguments' });
  let current = null;
  const problemsHeading = el('p', { class: 'hint' });
  const update = () => {
    clear(errors); clear(changes);
    const read = ed.value();
    current = null;
    const problems = read.problem ? [read.problem] : validate(schema, read.input);
    if (!read.problem && (typeof read.input !== 'object' || read.input === null || Array.isArray(read.input))) problems.push('/: must be an object');
    for (const p of problems) errors.append(el('li', { text: p }));
    problemsHeading.textContent = problems.length ? 'Problems:' : (schema ? 'It fits the tool\u2019s input schema.' : 'It is a JSON object.');
    if (!read.problem) {
      const changed = diff(original, read.input);
      for (const change of changed) changes.append(el('li', { class: change.op === 'removed' ? 'del' : change.op === 'added' ? 'add' : '', text: describe(change) }));
      if (changed.length === 0) changes.append(el('li', { text: 'No change yet.' }));
      if (problems.length === 0 && changed.length > 0) current = read.input;
    }
    submit.disabled = current === null;
  };
  const ed = editor(schema, original, update);
  submit.addEventListener('click', () => { if (current) decide({ approved: true, updated_input: current }, 'Approved with edited arguments'); });
  const cancel = el('button', { type: 'button', text: 'Cancel edit' });
  cancel.addEventListener('click', () => { home.hidden = true; clear(home); });
  clear(home);
  home.append(el('h4', { text: 'Edit the arguments, then approve' }), ed.node,
    el('div', { class: 'problems', role: 'alert' }, problemsHeading, errors),
    el('p', { text: 'Changes:', class: 'hint' }), changes,
    el('div', { class: 'actions' }, submit, cancel));
  home.hidden = false;
  update();
  const first = home.querySelector('input, select, textarea');
  if (first) first.focus();
}
