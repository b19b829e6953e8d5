// The sessions list: GET /v1/sessions with a status and an agent filter, a page at a time.

import { call, seg } from './api.js';
import { clear, el, when } from './dom.js';

const PAGE = 25;
const STATUSES = [['', 'Any status'], ['awaiting_approval', 'Awaiting approval'], ['running', 'Running'], ['idle', 'Idle']];

/** Mounts the list in `view`; `query` is the hash's query (`status`, `agent`). Returns its unmount. */
export function mount(view, query) {
  let status = query.get('status') || '';
  let agent = query.get('agent') || '';
  const agentSelect = el('select', { id: 'agent-filter' }, el('option', { value: '', text: 'Any agent' }));
  if (agent) agentSelect.append(el('option', { value: agent, text: agent }));
  agentSelect.value = agent;
  const pages = [''];
  const filterId = 'status-filter';
  const select = el('select', { id: filterId });
  for (const [value, label] of STATUSES) select.append(el('option', { value, text: label }));
  select.value = status;
  const body = el('tbody');
  const state = el('p', { class: 'summary', 'aria-live': 'polite' });
  const prev = el('button', { type: 'button', text: 'Previous page', disabled: true });
  const next = el('button', { type: 'button', text: 'Next page', disabled: true });
  view.append(
    el('h2', { text: 'Sessions' }),
    el('div', { class: 'filters' }, el('label', { for: filterId, text: 'Status' }), select,
      el('label', { for: 'agent-filter', text: 'Agent' }), agentSelect),
    state,
    el('div', { class: 'table-wrap' }, el('table', { id: 'sessions-table' },
      el('thead', {}, el('tr', {}, ...['Session', 'Status', 'Created', 'Updated', 'Agent'].map((h) => el('th', { scope: 'col', text: h })))),
      body)),
    el('div', { class: 'pager' }, prev, next));

  let alive = true;
  async function load() {
    const after = pages[pages.length - 1];
    const params = new URLSearchParams({ limit: String(PAGE) });
    if (status) params.set('status', status);
    if (agent) params.set('agent', agent);
    if (after) params.set('after', after);
    state.textContent = 'Loading\u2026';
    try {
      const page = await call('GET', `/v1/sessions?${params}`);
      if (!alive) return;
      clear(body);
      for (const row of page.sessions) {
        body.append(el('tr', {},
          el('td', {}, el('a', { href: `#/session/${seg(row.session_id)}`, text: row.session_id })),
          el('td', { text: row.status }),
          el('td', { text: when(row.created_at) }),
          el('td', { text: when(row.updated_at) }),
          el('td', { text: `${row.agent || 'none'}${row.agent_digest ? ` ${row.agent_digest.slice(0, 19)}\u2026${row.agent_pinned ? ' (pinned)' : ''}` : ''}` })));
      }
      state.textContent = `Page ${pages.length}: ${page.sessions.length} session${page.sessions.length === 1 ? '' : 's'}.`;
      prev.disabled = pages.length === 1;
      next.disabled = !page.next_after;
      next.dataset.after = page.next_after || '';
    } catch (error) {
      state.textContent = error.describe ? error.describe() : String(error);
    }
  }
  function filtered() {
    status = select.value;
    agent = agentSelect.value;
    pages.length = 1;
    const params = new URLSearchParams();
    if (status) params.set('status', status);
    if (agent) params.set('agent', agent);
    history.replaceState(null, '', params.size ? `#/sessions?${params}` : '#/sessions');
    load();
  }
  select.addEventListener('change', filtered);
  agentSelect.addEventListener('change', filtered);
  call('GET', '/v1/agents').then(({ agents }) => {
    for (const { name } of agents) {
      if (name !== agent) agentSelect.append(el('option', { value: name, text: name }));
    }
  }).catch(() => {});
  next.addEventListener('click', () => { if (next.dataset.after) { pages.push(next.dataset.after); load(); } });
  prev.addEventListener('click', () => { if (pages.length > 1) { pages.pop(); load(); } });
  load();
  return () => { alive = false; };
}
