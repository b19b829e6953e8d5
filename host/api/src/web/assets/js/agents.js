// The agents page: GET /v1/agents, each agent with its versions in the store (current, canary,
// sessions on each, who pushed it and when), the bundles its Workers loaded, and its tool
// components a Worker could not load.

import { call, seg } from './api.js';
import { el, when } from './dom.js';
import { describeUnavailable } from './attention.js';

/** Mounts the page in `view`. Returns its unmount. */
export function mount(view) {
  const state = el('p', { class: 'summary', 'aria-live': 'polite', text: 'Loading\u2026' });
  const list = el('div', { id: 'agents' });
  view.append(el('h2', { text: 'Agents' }), state, list);
  let alive = true;
  (async () => {
    try {
      const { agents } = await call('GET', '/v1/agents');
      if (!alive) return;
      state.textContent = `${agents.length} agent${agents.length === 1 ? '' : 's'}.`;
      for (const agent of agents) list.append(section(agent));
    } catch (error) {
      state.textContent = error.describe ? error.describe() : String(error);
    }
  })();
  return () => { alive = false; };
}

function section(agent) {
  const current = agent.current === null ? 'no version pushed' : `current: @${agent.current}`;
  const canary = agent.versions.find((v) => v.canary_share !== null);
  const heading = el('h3', { text: agent.name });
  const summary = el('p', {},
    `${current}${canary ? `; canary @${canary.version} for ${canary.canary_share}% of new sessions` : ''} \u2014 `,
    el('a', { href: `#/sessions?agent=${seg(agent.name)}`, text: 'its sessions' }));
  const parts = [heading, summary];
  if (agent.versions.length) {
    const rows = agent.versions.map((v) => el('tr', {},
      el('td', { text: `@${v.version}` }),
      el('td', { text: v.current ? 'current' : (v.canary_share !== null ? `canary ${v.canary_share}%` : '') }),
      el('td', { text: String(v.sessions) }),
      el('td', { text: v.pushed_by }),
      el('td', { text: when(v.pushed_at) }),
      el('td', {}, el('code', { text: v.digest.slice(0, 19) }))));
    parts.push(el('div', { class: 'table-wrap' }, el('table', { class: 'versions' },
      el('caption', { text: `Versions of ${agent.name}` }),
      el('thead', {}, el('tr', {}, ...['Version', 'Rollout', 'Sessions', 'Pushed by', 'Pushed at', 'Digest'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, ...rows))));
  }
  if (agent.loaded.length) {
    const rows = agent.loaded.map((b) => el('tr', {},
      el('td', {}, el('code', { text: b.digest.slice(0, 19) })),
      el('td', { text: b.locked ? 'locked' : 'unlocked' }),
      el('td', { text: when(b.last_seen_at) })));
    parts.push(el('div', { class: 'table-wrap' }, el('table', { class: 'loaded' },
      el('caption', { text: `Bundles ${agent.name}'s Workers loaded` }),
      el('thead', {}, el('tr', {}, ...['Digest', 'Lock', 'Last loaded'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, ...rows))));
  }
  const broken = agent.tools_unavailable || [];
  if (broken.length) {
    const rows = broken.map((u) => el('tr', { 'data-component': u.component },
      el('td', { text: u.component }),
      el('td', { text: u.worker }),
      el('td', { text: when(u.since) }),
      el('td', { text: describeUnavailable(u) })));
    parts.push(el('div', { class: 'table-wrap' }, el('table', { class: 'unavailable' },
      el('caption', { text: `Tool components of ${agent.name} that did not load` }),
      el('thead', {}, el('tr', {}, ...['Component', 'Worker', 'Since', 'Why'].map((h) => el('th', { scope: 'col', text: h })))),
      el('tbody', {}, ...rows))));
  }
  return el('section', { class: 'agent', 'data-agent': agent.name }, ...parts);
}
