// The page: sign-in with a token kept in sessionStorage, who is signed in, and the views by the
// URL's hash: #/inbox (default), #/sessions?status=…&agent=…, #/session/<id>, #/agents.

import { ApiError, call, clearToken, setToken, token } from './api.js';
import { clear, el } from './dom.js';
import * as agents from './agents.js';
import * as inbox from './inbox.js';
import * as session from './session.js';
import * as sessions from './sessions.js';

const $ = (id) => document.getElementById(id);
let me = null;
let unmount = null;

async function whoAmI() {
  try {
    me = await call('GET', '/v1/me');
    return true;
  } catch (error) {
    me = null;
    if (error instanceof ApiError && error.status === 401) return false;
    throw error;
  }
}

function showSignIn(message) {
  if (unmount) { unmount(); unmount = null; }
  clear($('view'));
  $('nav').hidden = true;
  $('who').hidden = true;
  $('sign-in').hidden = false;
  $('sign-in-error').textContent = message || '';
  $('token').focus();
}

function showWho() {
  $('sign-in').hidden = true;
  $('nav').hidden = false;
  $('who').hidden = false;
  const groups = me.groups.length ? `; groups: ${me.groups.join(', ')}` : '';
  $('who-text').textContent = `Signed in as ${me.name} (roles: ${me.roles.join(', ') || 'none'}${groups})`;
}

function route() {
  if (!me) return;
  if (unmount) { unmount(); unmount = null; }
  const view = $('view');
  clear(view);
  const hash = location.hash.replace(/^#/, '') || '/inbox';
  const [path, queryText] = hash.split('?');
  const query = new URLSearchParams(queryText || '');
  for (const link of document.querySelectorAll('nav a')) link.removeAttribute('aria-current');
  if (path.startsWith('/session/')) {
    let id;
    try { id = decodeURIComponent(path.slice('/session/'.length)); } catch { id = path.slice('/session/'.length); }
    document.title = 'Session \u2013 Tollgate';
    unmount = session.mount(view, id, me);
  } else if (path === '/agents') {
    $('nav-agents').setAttribute('aria-current', 'page');
    document.title = 'Agents \u2013 Tollgate';
    unmount = agents.mount(view);
  } else if (path === '/sessions') {
    $('nav-sessions').setAttribute('aria-current', 'page');
    document.title = 'Sessions \u2013 Tollgate';
    unmount = sessions.mount(view, query);
  } else {
    $('nav-inbox').setAttribute('aria-current', 'page');
    document.title = 'Approvals \u2013 Tollgate';
    unmount = inbox.mount(view, me);
  }
}

// `/healthz` needs no token: say it loudly when the Worker runs the agent unboxed.
async function warnIfUnboxed() {
  try {
    const response = await fetch('/healthz');
    const health = await response.json();
    $('unboxed').hidden = health.sandbox !== 'none';
  } catch { /* the sign-in or the views report an unreachable API */ }
}

async function start() {
  performance.mark('app-start');
  warnIfUnboxed();
  $('sign-in').addEventListener('submit', async (event) => {
    event.preventDefault();
    const value = $('token').value.trim();
    if (!value) return;
    setToken(value);
    $('token').value = '';
    try {
      if (await whoAmI()) { showWho(); route(); $('main').focus(); } else { clearToken(); showSignIn('No principal has this token.'); }
    } catch (error) {
      clearToken();
      showSignIn(error.message);
    }
  });
  $('sign-out').addEventListener('click', () => { clearToken(); me = null; showSignIn('Signed out.'); });
  window.addEventListener('hashchange', route);
  // Without a token, ask for one (no request that would answer 401).
  if (!token()) { showSignIn(); return; }
  const hash = location.hash.replace(/^#/, '');
  if (hash === '' || hash === '/inbox') inbox.prefetch();
  try {
    if (await whoAmI()) { performance.mark('signed-in'); showWho(); route(); } else { inbox.cancelPrefetch(); clearToken(); showSignIn('Your token is no longer accepted; sign in again.'); }
  } catch (error) {
    inbox.cancelPrefetch();
    showSignIn(`The API cannot be reached: ${error.message}`);
  }
}

start();
