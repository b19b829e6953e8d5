// Tool calls that need attention: a call whose outcome is unknown (it may have taken effect) or
// that failed stays loud, in the inbox's "Needs attention" section (GET /v1/attention) and on its
// session page, until an approver or admin marks it checked with what they found
// (POST /v1/sessions/{id}/calls/{call}/check, audited as `checked`). The same section names each
// tool component a Worker could not load (`tools_unavailable`, as /healthz does), until the file
// is mended: nothing to mark, the Worker's next look clears it.

import { call, seg } from './api.js';
import { clear, el, notify, uid, when } from './dom.js';

/** What a call's status means for the person who must check it. */
export function describeStatus(c) {
  return c.status === 'outcome_unknown'
    ? 'outcome unknown: it may have taken effect; check the system it acts on before trying again'
    : `failed${c.error ? `: ${c.error}` : ''}`;
}

/** What an unavailable tool component means for the sessions of its agent, and why it is so. */
export function describeUnavailable(u) {
  const serving = u.serving_last_good
    ? 'its last good build still serves its tools'
    : 'its tools are unavailable to the model';
  return `did not load; ${serving}: ${u.reason}`;
}

/** Whether the signed-in principal may mark calls checked (approver or admin). */
export function mayCheck(me) {
  return Boolean(me.sole || me.roles.includes('approver') || me.roles.includes('admin'));
}

/**
 * The "Mark checked" form of call `c` of session `sessionId`: a note and a button. `done(receipt)`
 * runs after the mark is stored.
 */
export function checkForm(me, sessionId, c, done) {
  const noteId = uid('check-note');
  const note = el('input', { id: noteId, type: 'text', class: 'check-note', maxlength: '4096', autocomplete: 'off' });
  const allowed = mayCheck(me);
  const submit = el('button', { type: 'submit', class: 'check', text: 'Mark checked', disabled: !allowed });
  const result = el('p', { class: 'result', role: 'status' });
  const form = el('form', { class: 'check-form', 'data-call': c.tool_call_id },
    el('label', { for: noteId, text: 'What you found' }), note, submit, result);
  if (!allowed) {
    result.textContent = `Marking checked needs the role approver or admin; ${me.name} has ${me.roles.join(', ') || 'none'}.`;
  }
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    submit.disabled = true;
    result.classList.remove('failed');
    result.textContent = 'Sending\u2026';
    try {
      const body = note.value.trim() ? { note: note.value.trim() } : {};
      const receipt = await call('POST', `/v1/sessions/${seg(sessionId)}/calls/${seg(c.tool_call_id)}/check`, body);
      result.textContent = receipt.replayed ? `Already checked by ${receipt.check.checked_by}` : 'Checked by you';
      notify(`Checked: ${c.tool_name} in session ${sessionId}`);
      done(receipt);
    } catch (error) {
      result.classList.add('failed');
      result.textContent = error.describe ? error.describe() : String(error);
      submit.disabled = false;
    }
  });
  return form;
}

/** A checked call's line: who checked it, when, and their note. */
export function checkedLine(c) {
  const check = c.checked;
  return `${c.tool_name} (${c.tool_call_id}) checked by ${check.checked_by} ${when(check.checked_at)}${check.note ? `: ${check.note}` : ''}`;
}

/**
 * The inbox's "Needs attention" section: mounted into `view` before the approvals, hidden while
 * nothing needs attention, read again every 15 s and after each mark. Returns its unmount.
 */
export function mountAttention(view, me) {
  const heading = el('h2', { id: 'attention-h', text: 'Needs attention' });
  const list = el('ul', { class: 'attention-list', id: 'attention-list' });
  const section = el('section', { class: 'attention', id: 'attention', 'aria-labelledby': 'attention-h', hidden: true },
    heading, el('p', { class: 'hint', text: 'Tool calls whose outcome is unknown or that failed, until someone checks them; tool components that did not load, until their file is mended.' }), list);
  view.append(section);
  let alive = true;

  async function load() {
    let page;
    try {
      page = await call('GET', '/v1/attention');
    } catch (error) {
      if (!alive) return;
      clear(list);
      list.append(el('li', { class: 'failed', text: `Cannot read the calls that need attention: ${error.describe ? error.describe() : error}` }));
      section.hidden = false;
      return;
    }
    if (!alive) return;
    const focused = document.activeElement && list.contains(document.activeElement);
    clear(list);
    const broken = page.tools_unavailable || [];
    for (const u of broken) {
      list.append(el('li', { class: 'attention-item tool-unavailable', 'data-agent': u.agent, 'data-component': u.component },
        el('p', {}, 'Tool component ', el('strong', { text: u.component }), ` of agent ${u.agent} \u00b7 Worker ${u.worker} \u00b7 since ${when(u.since)}`),
        el('p', { class: 'status', text: describeUnavailable(u) })));
    }
    for (const item of page.calls) {
      const c = item.call;
      const link = el('a', { href: `#/session/${encodeURIComponent(item.session_id)}`, text: item.session_id });
      const row = el('li', { class: `attention-item ${c.status}`, 'data-session': item.session_id, 'data-call': c.tool_call_id },
        el('p', {}, el('strong', { text: c.tool_name }), ' in session ', link, item.agent ? ` (${item.agent})` : '', ` \u00b7 ${when(item.updated_at)}`),
        el('p', { class: 'status', text: describeStatus(c) }),
        checkForm(me, item.session_id, c, () => setTimeout(load, 800)));
      list.append(row);
    }
    section.hidden = page.calls.length === 0 && broken.length === 0;
    if (focused) { const first = list.querySelector('input'); if (first) first.focus(); }
  }

  load();
  const timer = setInterval(load, 15000);
  return () => { alive = false; clearInterval(timer); };
}
