// A session: its conversation with live text, what the model thought and did inline (its
// thinking and its inline tool calls, from the event log), a banner for calls that failed or whose
// outcome is unknown, its tool calls and their records, the
// audit trail, usage and cost, the last turn's error or cancel, a box to send a message, a
// button that cancels the turn in progress, a form that forks the session at a turn (with the
// warning that a fork taken before a refund will refund again, unless dry), and where a fork's
// history comes from.

import { call, image, seg, stream, storedEvents } from './api.js';
import { clear, el, notify, pretty, when } from './dom.js';
import { checkForm, checkedLine, describeStatus } from './attention.js';

const REFRESH_ON = new Set(['user_message', 'turn_started', 'turn_completed', 'turn_failed', 'tool_call_started',
  'tool_call_finished', 'interrupt_opened', 'interrupt_resolved', 'decision_recorded', 'attempt_failed', 'agent_upgraded',
  'cancel_requested', 'turn_cancelled']);
const TURN_ENDS = new Set(['turn_completed', 'turn_failed', 'turn_cancelled']);
// Said where the fork button is (issue: a fork's own calls get their own keys).
const FORK_WARNING = 'A fork taken before a refund will refund again: the fork\'s own calls run under their own keys. Check Dry to answer writes from this session\'s records or refuse them.';
const FORK_DRY_NOTE = 'Dry: the fork\'s writes never run; each is answered from this session\'s record of the same call, or refused.';

/** Mounts the session `id` in `view` for the principal `me`; returns its unmount. */
export function mount(view, id, me) {
  const title = el('h2', {}, 'Session ', el('span', { id: 'session-id', text: id }));
  const facts = el('dl', { class: 'facts', id: 'session-facts' });
  const error = el('p', { class: 'error', id: 'last-turn-error', role: 'alert' });
  const messages = el('ol', { class: 'messages', id: 'messages', 'aria-live': 'polite' });
  const liveNode = el('li', { class: 'assistant live', hidden: true }, el('span', { class: 'role', text: 'assistant (writing\u2026)' }), el('span', { id: 'live-text' }));
  const activity = el('ol', { class: 'activity', id: 'activity', 'aria-live': 'polite' });
  const calls = el('div', { id: 'tool-calls' });
  const audit = el('tbody', { id: 'audit' });
  const grants = el('ul', { id: 'grants' });
  const mayWrite = me.roles.includes('client') || me.roles.includes('admin');
  const textId = 'message-text';
  const text = el('textarea', { id: textId, name: 'text', required: true, disabled: !mayWrite, 'aria-describedby': 'send-why' });
  const send = el('button', { type: 'submit', disabled: !mayWrite, text: 'Send message', 'aria-describedby': 'send-why' });
  const sendWhy = el('p', { class: 'why', id: 'send-why', text: mayWrite ? '' : `Sending needs the role client or admin; ${me.name} has ${me.roles.join(', ') || 'none'}.` });
  const sendResult = el('p', { class: 'result', role: 'status' });
  const form = el('form', { class: 'send', id: 'send-form' }, el('label', { for: textId, text: 'Message' }), text, el('div', { class: 'actions' }, send), sendWhy, sendResult);
  const stop = el('button', { type: 'button', id: 'cancel-turn', class: 'danger', disabled: true, text: 'Cancel turn', 'aria-describedby': 'cancel-why' });
  const stopWhy = el('p', { class: 'why', id: 'cancel-why' });
  const stopResult = el('p', { class: 'result', id: 'cancel-result', role: 'status' });
  const cancelled = el('p', { class: 'notice', id: 'last-turn-cancelled' });
  const lineage = el('p', { class: 'notice', id: 'forked-from', hidden: true });
  // A fork: a client or admin forks (the API decides: this only greys the form out).
  const mayFork = me.roles.includes('client') || me.roles.includes('admin');
  const forkTurn = el('input', { type: 'number', id: 'fork-turn', name: 'at_turn', min: '1', step: '1', required: true, disabled: !mayFork, 'aria-describedby': 'fork-warning fork-why' });
  const forkDry = el('input', { type: 'checkbox', id: 'fork-dry', name: 'dry', disabled: !mayFork, 'aria-describedby': 'fork-warning' });
  const forkButton = el('button', { type: 'submit', id: 'fork-button', disabled: !mayFork, text: 'Fork at this turn', 'aria-describedby': 'fork-warning fork-why' });
  const forkWarning = el('p', { class: 'warning', id: 'fork-warning', role: 'note', text: FORK_WARNING });
  const forkWhy = el('p', { class: 'why', id: 'fork-why', text: mayFork ? '' : `Forking needs the role client or admin; ${me.name} has ${me.roles.join(', ') || 'none'}.` });
  const forkResult = el('p', { class: 'result', id: 'fork-result', role: 'status' });
  const forkForm = el('form', { class: 'fork', id: 'fork-form' },
    el('label', { for: 'fork-turn', text: 'Turn' }), forkTurn,
    el('label', { for: 'fork-dry' }, forkDry, ' Dry: answer writes from this session\'s records, or refuse them'),
    el('div', { class: 'actions' }, forkButton), forkWarning, forkWhy, forkResult);
  // Calls that failed or may have run without anyone seeing how they ended: loud, at the top.
  const failures = el('div', { class: 'banner', id: 'call-failures', role: 'alert' });
  // Calls someone checked: quiet, with who and what they found.
  const checkedNotes = el('ul', { class: 'checked-calls', id: 'checked-calls', 'aria-label': 'Checked tool calls', hidden: true });
  view.append(title, failures, checkedNotes, lineage, facts, error, cancelled, el('div', { class: 'actions' }, stop), stopWhy, stopResult,
    el('section', { class: 'panel', 'aria-labelledby': 'conv-h' }, el('h3', { id: 'conv-h', text: 'Conversation' }), messages, form),
    el('section', { class: 'panel', 'aria-labelledby': 'activity-h' }, el('h3', { id: 'activity-h', text: 'Thinking and inline tool calls' }), activity),
    el('section', { class: 'panel', 'aria-labelledby': 'calls-h' }, el('h3', { id: 'calls-h', text: 'Tool calls' }), calls),
    el('section', { class: 'panel', 'aria-labelledby': 'audit-h' }, el('h3', { id: 'audit-h', text: 'Audit trail' }),
      el('div', { class: 'table-wrap' }, el('table', {}, el('thead', {}, el('tr', {}, ...['When', 'Who', 'Decision', 'Tool', 'Reason', 'Input'].map((h) => el('th', { scope: 'col', text: h })))), audit)),
      el('h4', { text: 'Grants (allow for this session)' }), grants),
    el('section', { class: 'panel', 'aria-labelledby': 'fork-h' }, el('h3', { id: 'fork-h', text: 'Fork' }),
      el('p', { class: 'hint', text: 'A new session whose history is this one up to the end of the turn; it has no grants and no spend, and you start it.' }), forkForm));

  const path = `/v1/sessions/${seg(id)}`;
  let alive = true, live = null, refreshing = null, again = false;
  const liveText = new Map();

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const body = text.value.trim();
    if (!body) return;
    send.disabled = true;
    sendResult.classList.remove('failed');
    try {
      const key = crypto.randomUUID ? crypto.randomUUID() : `web-${Date.now()}-${Math.random().toString(16).slice(2)}`;
      await call('POST', `${path}/messages`, { text: body, client_key: key });
      text.value = '';
      sendResult.textContent = 'Sent.';
      notify(`Message sent to ${id}`);
    } catch (e) {
      sendResult.classList.add('failed');
      sendResult.textContent = e.describe ? e.describe() : String(e);
    }
    send.disabled = !mayWrite;
  });

  // An approver or admin cancels any turn; a client only those of sessions it started (the API
  // decides: this only greys the button out).
  function cancelRight(s) {
    if (s.status === 'idle') return [false, 'No turn is running.'];
    if (s.cancel_requested) return [false, `Cancelling: asked by ${s.cancel_requested.requested_by}.`];
    if (me.sole || me.roles.includes('approver') || me.roles.includes('admin')) return [true, ''];
    if (me.roles.includes('client') && s.started_by === me.name) return [true, ''];
    if (me.roles.includes('client')) return [false, `A client cancels only the sessions it started; ${s.started_by || 'nobody recorded'} started this one.`];
    return [false, `Cancelling needs the role client, approver or admin; ${me.name} has ${me.roles.join(', ') || 'none'}.`];
  }

  forkDry.addEventListener('change', () => {
    forkWarning.textContent = forkDry.checked ? FORK_DRY_NOTE : FORK_WARNING;
    forkWarning.classList.toggle('dry', forkDry.checked);
  });
  forkForm.addEventListener('submit', async (event) => {
    event.preventDefault();
    const turn = Number(forkTurn.value);
    if (!Number.isInteger(turn) || turn < 1) return;
    forkButton.disabled = true;
    forkResult.classList.remove('failed');
    clear(forkResult);
    try {
      const forked = await call('POST', `${path}/fork`, { at_turn: turn, dry: forkDry.checked });
      forkResult.append(`Forked at turn ${turn}: `, el('a', { href: `#/session/${seg(forked.session_id)}`, id: 'fork-link', text: forked.session_id }));
      notify(`Session ${id} forked at turn ${turn}`);
    } catch (e) {
      forkResult.classList.add('failed');
      forkResult.textContent = e.describe ? e.describe() : String(e);
    }
    forkButton.disabled = !mayFork;
  });

  stop.addEventListener('click', async () => {
    stop.disabled = true;
    stopResult.classList.remove('failed');
    try {
      const receipt = await call('POST', `${path}/cancel`, {});
      stopResult.textContent = `Cancel asked by ${receipt.cancel_requested.requested_by}.`;
      notify(`Cancel of ${id} asked`);
    } catch (e) {
      stopResult.classList.add('failed');
      stopResult.textContent = e.describe ? e.describe() : String(e);
    }
    refresh();
  });

  function render(s) {
    const [mayCancel, whyNot] = cancelRight(s);
    stop.disabled = !mayCancel;
    stopWhy.textContent = whyNot;
    clear(lineage);
    lineage.hidden = !s.forked_from;
    if (s.forked_from) {
      const from = s.forked_from;
      lineage.append('Forked from ', el('a', { href: `#/session/${seg(from.session)}`, text: from.session }),
        ` at turn ${from.turn} by ${from.forked_by}${from.dry ? ' (dry: its writes are answered from records or refused)' : ''}.`);
    }
    cancelled.textContent = s.last_turn_cancelled ? `Last turn (${s.last_turn_cancelled.turn_id}) cancelled by ${s.last_turn_cancelled.cancelled_by}.` : '';
    clear(facts);
    const usage = s.usage || {};
    const pairs = [
      ['Status', s.status], ['Started by', s.started_by || 'not recorded'], ['Turn', s.turn_id || 'none running'],
      ['Tokens', `${usage.input_tokens} in (${usage.cached_input_tokens} cached), ${usage.output_tokens} out, ${usage.model_calls} model calls`],
      ['Cost', `$${Number(s.cost_usd || 0).toFixed(4)}`],
      ['Waiting for approval', String((s.pending_interrupts || []).length)],
    ];
    for (const [k, v] of pairs) facts.append(el('dt', { text: k }), el('dd', { text: v }));
    error.textContent = s.last_turn_error ? `Last turn failed: ${s.last_turn_error}` : '';
    clear(messages);
    for (const m of s.messages) {
      const item = el('li', { class: m.role }, el('span', { class: 'role', text: m.role + (m.pending ? ' (pending)' : '') }), m.text);
      if ((m.images || []).length) item.append(images(m.images, `${m.role} message`));
      messages.append(item);
    }
    messages.append(liveNode);
    clear(failures);
    clear(checkedNotes);
    const needy = s.tool_calls.filter((c) => c.status === 'outcome_unknown' || c.status === 'failed');
    const loud = needy.filter((c) => !c.checked);
    failures.hidden = loud.length === 0;
    if (loud.length) {
      const list = el('ul');
      for (const c of loud) {
        list.append(el('li', {}, el('strong', { text: `${c.tool_name} (${c.tool_call_id})` }), ` ${describeStatus(c)}`,
          checkForm(me, s.session_id, c, () => refresh())));
      }
      failures.append(el('h3', { text: loud.length === 1 ? 'A tool call needs attention' : `${loud.length} tool calls need attention` }), list);
    }
    const checked = needy.filter((c) => c.checked);
    checkedNotes.hidden = checked.length === 0;
    for (const c of checked) checkedNotes.append(el('li', { text: checkedLine(c) }));
    clear(calls);
    if (!s.tool_calls.length) calls.append(el('p', { text: 'No deferred tool call yet.' }));
    for (const c of s.tool_calls) {
      const outcome = c.output !== undefined ? c.output : c.error !== undefined ? c.error : c.message !== undefined ? c.message : null;
      const grant = c.approved_under ? `approved under the grant of ${c.approved_under.granted_by}` : c.grants_session ? `granted the session by ${c.grants_session.granted_by}` : null;
      const facts = el('dl', { class: 'facts' },
        el('dt', { text: 'Status' }), el('dd', { text: c.status }),
        el('dt', { text: 'Attempt' }), el('dd', { text: c.attempt !== undefined ? String(c.attempt) : '\u2014' }),
        el('dt', { text: 'Idempotency key' }), el('dd', { text: `${s.session_id}/${c.turn_id}/${c.tool_call_id}` }),
        el('dt', { text: 'Runs' }), el('dd', { text: `${c.kind}, ${c.runs_in}${c.requires_approval ? ', after approval' : ''}` }));
      if (grant) facts.append(el('dt', { text: 'Grant' }), el('dd', { text: grant }));
      if (c.batch_id) facts.append(el('dt', { text: 'Batch' }), el('dd', { text: c.batch_id }));
      if (c.decided_ahead) facts.append(el('dt', { text: 'Decided ahead' }), el('dd', { text: Object.entries(c.decided_ahead).map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`).join('; ') }));
      const call = el('article', { class: 'call' }, el('h4', { text: c.tool_name }), facts,
        el('p', { class: 'hint', text: c.original_arguments ? 'Arguments, as the approver edited them' : 'Arguments' }), el('pre', {}, pretty(c.arguments)));
      if (c.original_arguments) call.append(el('p', { class: 'hint', text: 'As the model asked' }), el('pre', {}, pretty(c.original_arguments)));
      if (outcome !== null && outcome !== '') call.append(el('p', { class: 'hint', text: 'Outcome' }), el('pre', {}, String(outcome)));
      if ((c.images || []).length) call.append(el('p', { class: 'hint', text: 'Images of the result' }), images(c.images, `${c.tool_name} result`));
      calls.append(call);
    }
    clear(audit);
    if (!(s.decisions || []).length) audit.append(el('tr', {}, el('td', { colspan: '6', class: 'empty', text: 'No decisions yet' })));
    for (const d of s.decisions || []) {
      const input = el('td', {}, el('pre', {}, pretty(d.input)));
      if (d.edited_input) input.append(el('span', { text: 'edited to' }), el('pre', {}, pretty(d.edited_input)));
      audit.append(el('tr', {}, el('td', { text: when(d.decided_at) }), el('td', { text: d.principal }), el('td', { text: d.decision }),
        el('td', { text: d.tool_name || '' }), el('td', { text: d.reason || '' }), input));
    }
    clear(grants);
    for (const g of s.grants || []) {
      grants.append(el('li', { text: `${g.tool_name}: granted by ${g.granted_by} at ${when(g.granted_at)}${g.revoked ? `; revoked by ${g.revoked.revoked_by} at ${when(g.revoked.revoked_at)}` : ''}` }));
    }
    if (!(s.grants || []).length) grants.append(el('li', { text: 'none' }));
    if (s.live_text) addText(s.live_text.turn_id, s.live_text.step_id, s.live_text.fence, 0, s.live_text.text);
    showLive(s.turn_id);
  }

  // The session's images by digest, each fetched once (with the token) and shown from a blob URL.
  const imageUrls = new Map();
  function images(refs, what) {
    const box = el('div', { class: 'images' });
    refs.forEach((ref, i) => {
      const img = el('img', { alt: `image ${i + 1} of ${refs.length} of the ${what} (${ref.media_type}, ${ref.digest.slice(0, 19)}\u2026)`, 'data-digest': ref.digest });
      box.append(img);
      if (!imageUrls.has(ref.digest)) imageUrls.set(ref.digest, image(`${path}/media/${seg(ref.digest)}`));
      imageUrls.get(ref.digest).then((url) => { img.src = url; })
        .catch((e) => { img.replaceWith(el('span', { class: 'error', text: `image ${ref.digest}: ${e.describe ? e.describe() : e}` })); });
    });
    return box;
  }

  function showLive(turn) {
    const text = turn ? liveText.get(turn) : null;
    const shown = text ? [...text.values()].map((t) => t.text).join('') : '';
    liveNode.hidden = !shown;
    liveNode.querySelector('#live-text').textContent = shown;
  }

  async function refresh() {
    if (refreshing) { again = true; return; }
    refreshing = (async () => {
      do {
        again = false;
        try {
          const s = await call('GET', path);
          if (!alive) return null;
          render(s);
          current = s;
        } catch (e) {
          if (!alive) return null;
          error.textContent = e.describe ? e.describe() : String(e);
          return null;
        }
      } while (again && alive);
      return current;
    })();
    const s = await refreshing;
    refreshing = null;
    return s;
  }

  // Text of (turn, step, fence) from the snapshot's live_text, stored text_delta blocks and live
  // ones (`live=true`), which overlap: `offset` (characters) says where each starts.
  function addText(turn, stepId, fence, offset, text) {
    if (!liveText.has(turn)) liveText.set(turn, new Map());
    const steps = liveText.get(turn);
    const step = String(stepId);
    let prior = steps.get(step);
    // A retried attempt (higher fence) replaces the text of the one it supersedes.
    if (!prior || fence > prior.fence) { prior = { fence, text: '' }; steps.set(step, prior); }
    else if (fence < prior.fence) return;
    if (offset === undefined || offset === null) { prior.text += text; return; }
    const have = Array.from(prior.text), add = Array.from(text);
    if (offset <= have.length && offset + add.length > have.length) prior.text = have.slice(0, offset).concat(add).join('');
  }

  // What the model thought and did inline, in the order it happened: one item per thinking of a
  // (turn, step, fence), its stored `reasoning_delta` blocks joined by `offset`, and one per
  // inline tool call, its status updated when it finishes. Each stored event counts once.
  const seenSeqs = new Set();
  const thoughts = new Map(), toolItems = new Map();
  function addActivity(data) {
    if (typeof data.seq !== 'number' || seenSeqs.has(`${data.seq}/${data.kind}`)) return;
    seenSeqs.add(`${data.seq}/${data.kind}`);
    const p = data.payload || {};
    if (data.kind === 'reasoning_delta') {
      const key = `${p.turn_id}/${data.step_id}/${data.fence}`;
      let thought = thoughts.get(key);
      if (!thought) {
        const body = el('span', { class: 'thought' });
        thought = { text: [], body };
        thoughts.set(key, thought);
        activity.append(el('li', { class: 'thinking' }, el('span', { class: 'role', text: `thinking (${p.turn_id})` }), body));
      }
      const have = thought.text, add = Array.from(p.text || ''), at = p.offset || 0;
      if (at <= have.length && at + add.length > have.length) thought.text = have.slice(0, at).concat(add);
      thought.body.textContent = thought.text.join('');
    } else if ((data.kind === 'tool_call_started' || data.kind === 'tool_call_finished') && p.deferred === false) {
      let item = toolItems.get(p.tool_call_id);
      if (!item) {
        const status = el('span', { class: 'status', text: 'running' });
        const node = el('li', { class: 'tool' }, el('span', { class: 'role', text: `tool call (${p.kind === 'cli' ? 'CLI tool' : 'custom tool'}, inline)` }),
          el('strong', { text: p.tool_name || '?' }), ' ', status);
        if (p.arguments !== undefined) node.append(el('pre', {}, pretty(p.arguments)));
        item = { node, status };
        toolItems.set(p.tool_call_id, item);
        activity.append(node);
      }
      if (data.kind === 'tool_call_finished') {
        item.status.textContent = p.status || 'finished';
        item.node.classList.add(p.status === 'failed' ? 'failed' : 'done');
      }
    }
    empty.hidden = activity.children.length > 1;
  }
  const empty = el('li', { class: 'empty', text: 'Nothing yet.' });
  activity.append(empty);

  let current = null;
  function onEvent(event) {
    const data = event.data || {};
    if (event.event === 'reasoning_delta' || ((event.event === 'tool_call_started' || event.event === 'tool_call_finished') && (data.payload || {}).deferred === false)) {
      addActivity(data);
    }
    if (event.event === 'text_delta') {
      const p = data.payload || {};
      if (!p.turn_id) return;
      addText(p.turn_id, data.step_id, data.fence, p.offset, p.text || '');
      showLive(current ? current.turn_id || p.turn_id : p.turn_id);
    } else if (REFRESH_ON.has(event.event)) {
      if (TURN_ENDS.has(event.event)) liveText.delete((data.payload || {}).turn_id);
      refresh();
    }
  }

  refresh().then((s) => {
    if (!alive || !s) return;
    const after = Math.max(0, (s.next_event_seq || 1) - 1);
    live = stream(`${path}/events?after=${after}&live=true`, onEvent, (state, detail) => {
      if (state === 'failed') error.textContent = detail.describe ? detail.describe() : String(detail);
    });
    // What happened before the page opened: the stored thinking and inline tool calls.
    storedEvents(`${path}/events?after=0&follow=false`).then((stored) => {
      if (!alive) return;
      for (const event of stored) {
        const data = event.data || {};
        if (data.kind === 'reasoning_delta' || data.kind === 'tool_call_started' || data.kind === 'tool_call_finished') addActivity(data);
      }
    }).catch((e) => { if (alive) error.textContent = e.describe ? e.describe() : String(e); });
  });
  return () => {
    alive = false;
    if (live) live.close();
    for (const url of imageUrls.values()) url.then((u) => URL.revokeObjectURL(u), () => {});
  };
}
