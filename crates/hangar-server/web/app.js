// hangar's web page: a small client of hangar serve's /v1 API, with the person's API token.
// Plain JavaScript, no build step, no other origin: everything it shows comes from the API, and
// every piece of data goes into the page as text (textContent), never as markup.
// The API's shapes are in api.d.ts beside this file, generated from hangar-api's types (an
// editor with TypeScript's checker reads the JSDoc types below; the browser ignores them).
/// <reference path="./api.d.ts" />
// hangar-server's tests/web_types.rs runs TypeScript's checker over this file and api.d.ts, so
// a field this page reads that the API renames or drops fails the build's tests.
'use strict';

/** @typedef {import('./api').Answer} Answer */
/** @typedef {import('./api').AuthConfig} AuthConfig */
/** @typedef {import('./api').CreateToken} CreateToken */
/** @typedef {import('./api').OidcFinish} OidcFinish */
/** @typedef {import('./api').OidcStart} OidcStart */
/** @typedef {import('./api').OidcStarted} OidcStarted */
/** @typedef {import('./api').SignedIn} SignedIn */
/** @typedef {import('./api').TokenCreated} TokenCreated */
/** @typedef {import('./api').TokenInfo} TokenInfo */
/** @typedef {import('./api').Tokens} Tokens */
/** @typedef {import('./api').Approval} Approval */
/** @typedef {import('./api').Approvals} Approvals */
/** @typedef {import('./api').ApprovalRun} ApprovalRun */
/** @typedef {import('./api').PendingApprovals} PendingApprovals */
/** @typedef {import('./api').AuditRecord} AuditRecord */
/** @typedef {import('./api').AuditRecords} AuditRecords */
/** @typedef {import('./api').AuditVerify} AuditVerify */
/** @typedef {import('./api').Board} Board */
/** @typedef {import('./api').BoardRow} BoardRow */
/** @typedef {import('./api').CommandReply} CommandReply */
/** @typedef {import('./api').Diff} Diff */
/** @typedef {import('./api').ForkRecord} ForkRecord */
/** @typedef {import('./api').ForkRequest} ForkRequest */
/** @typedef {import('./api').Forked} Forked */
/** @typedef {import('./api').Harness} Harness */
/** @typedef {import('./api').Me} Me */
/** @typedef {import('./api').Policy} Policy */
/** @typedef {import('./api').StartSession} StartSession */
/** @typedef {import('./api').Started} Started */
/** @typedef {import('./api').Text} TextBody */
/** @typedef {import('./api').Turn} Turn */
/** @typedef {import('./api').TurnAudit} TurnAudit */
/** @typedef {import('./api').TurnOptions} TurnOptions */
/** @typedef {import('./api').TurnSummary} TurnSummary */
/** @typedef {import('./api').Usage} Usage */
/** @typedef {StartSession | TextBody | Answer | ForkRequest | CreateToken | OidcStart | OidcFinish} RequestBody */
/** @typedef {{outcome: string, text: string, turn?: string | null}} Said */

(() => {
  const TOKEN_KEY = 'hangar.token';
  // 'signin' when the page got its token from the issuer sign-in (signing out revokes it then;
  // a token pasted by hand is the person's own to keep).
  const TOKEN_ORIGIN_KEY = 'hangar.token.origin';
  // The web sign-in in progress ({flow, state}), for this tab only, until the issuer sends the
  // browser back to /ui/signin/callback.
  const FLOW_KEY = 'hangar.signin';
  const CALLBACK_PATH = '/ui/signin/callback';
  const TABS = ['live', 'timeline', 'manifest', 'audit'];
  const state = { token: localStorage.getItem(TOKEN_KEY), person: null, /** @type {Me | null} */ me: null, view: null, /** @type {ReturnType<typeof setInterval> | null} */ countTimer: null };

  // ---------- small helpers ----------

  const $ = (sel, root) => (root || document).querySelector(sel);

  /** An element with attributes and children (strings become text nodes). */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  /** Replaces an element's children (nulls and falses skipped, arrays flattened, strings as text). */
  function fill(el, ...children) {
    el.replaceChildren();
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  function when(ms) {
    if (!ms) return '';
    const d = new Date(ms);
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  const num = (n) => (n || 0).toLocaleString('en-US');

  /** @param {Usage | null | undefined} u */
  function tokens(u) {
    if (!u) return '–';
    const cached = u.cached_input_tokens ? ` (${num(u.cached_input_tokens)} cached)` : '';
    return `${num(u.input_tokens)} in / ${num(u.output_tokens)} out${cached}`;
  }

  function cost(c) {
    if (c === null || c === undefined) return '–';
    return '$' + (c < 0.01 ? c.toFixed(4) : c.toFixed(2));
  }

  function pretty(v) {
    if (typeof v === 'string') return v;
    try {
      return JSON.stringify(v, null, 2);
    } catch (_) {
      return String(v);
    }
  }

  function short(s, n) {
    s = String(s || '');
    return s.length > n ? s.slice(0, n - 1) + '…' : s;
  }

  /** Why a step's tree is not trusted, in one line. */
  const UNTRUSTED_WHY = 'The agent ran as the same user as hangar\'s driver (no uid split), so it could have changed the files this tree was read from after the fact.';

  function badge(text, kind) {
    return h('span', { class: `badge ${kind || ''}`.trim() }, text);
  }

  /** The phase's word as a person reads it, and its badge's colour (issue 21). */
  const PHASES = {
    queued: ['queued', 'queued'],
    running: ['running', 'live'],
    waiting: ['waiting for you', 'wait'],
    succeeded: ['succeeded', 'ok'],
    failed: ['failed', 'bad'],
    interrupted: ['interrupted', 'warn'],
    blocked: ['blocked', 'bad'],
    verify_failed: ['check failed', 'bad'],
    refused: ['refused', 'bad'],
  };

  /** @param {TurnSummary | null | undefined} t */
  function stateBadge(t) {
    if (!t) return badge('no turns');
    const [text, kind] = PHASES[t.phase] || [t.state, t.state];
    const b = badge(text, kind);
    b.dataset.phase = t.phase;
    if (t.phase_detail) b.title = t.phase_detail;
    return b;
  }

  /** A block of text that may be long: the first lines, the rest behind a "more". */
  function longText(text, cls) {
    text = String(text ?? '');
    const limit = 1500;
    if (text.length <= limit) return h('pre', { class: cls || '' }, text);
    return h('details', { class: 'long' }, h('summary', {}, h('pre', { class: cls || '' }, text.slice(0, limit) + '…')), h('pre', { class: cls || '' }, text));
  }

  // ---------- the API ----------

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  /**
   * One call of the API: its answer (the caller names its type), or an ApiError.
   * @param {string} method
   * @param {string} path
   * @param {RequestBody} [body]
   * @returns {Promise<any>}
   */
  async function api(method, path, body) {
    const headers = { Authorization: 'Bearer ' + state.token };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let r;
    try {
      r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store' });
    } catch (e) {
      throw new ApiError(0, 'unreachable', `cannot reach hangar serve (${e.message}); is it running?`);
    }
    let data = null;
    try {
      data = await r.json();
    } catch (_) {
      data = null;
    }
    if (!r.ok) {
      const err = data && data.error;
      const e = new ApiError(r.status, (err && err.code) || 'error', (err && err.message) || `HTTP ${r.status}`);
      if (r.status === 401) signOut('The server refused the token: ' + e.message);
      throw e;
    }
    return data;
  }

  /**
   * Follows a run's live event stream (Server-Sent Events over fetch, since EventSource cannot
   * send the token). After a dropped connection it reconnects with Last-Event-ID, the id of the
   * last event it handled, so the server sends exactly the events after it; an id it has already
   * handled is skipped all the same. Returns a function that stops it.
   */
  function followEvents(runId, onEvent, onStatus, onRepeat) {
    let stopped = false;
    let repeats = 0;
    let ctrl = null;
    let last = 0;
    (async () => {
      let backoff = 250;
      while (!stopped) {
        ctrl = new AbortController();
        try {
          const headers = { Authorization: 'Bearer ' + state.token, Accept: 'text/event-stream' };
          if (last > 0) headers['Last-Event-ID'] = String(last);
          const r = await fetch(`/v1/runs/${encodeURIComponent(runId)}/events/stream`, { headers, signal: ctrl.signal, cache: 'no-store' });
          if (r.status === 401) {
            signOut('The server refused the token.');
            return;
          }
          if (!r.ok) throw new Error(`HTTP ${r.status}`);
          onStatus('live', last);
          backoff = 250;
          const reader = r.body.getReader();
          const decoder = new TextDecoder();
          let buf = '';
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += decoder.decode(value, { stream: true });
            let cut;
            while ((cut = buf.indexOf('\n\n')) >= 0) {
              const frame = buf.slice(0, cut);
              buf = buf.slice(cut + 2);
              let id = null;
              let kind = 'message';
              const data = [];
              for (const raw of frame.split('\n')) {
                const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
                if (line.startsWith(':')) continue;
                const colon = line.indexOf(':');
                const field = colon < 0 ? line : line.slice(0, colon);
                let val = colon < 0 ? '' : line.slice(colon + 1);
                if (val.startsWith(' ')) val = val.slice(1);
                if (field === 'id') id = Number(val);
                else if (field === 'event') kind = val;
                else if (field === 'data') data.push(val);
              }
              if (kind === 'error' && id === null) throw new Error(short(data.join('\n'), 200));
              if (id === null || !Number.isFinite(id)) continue;
              if (id <= last) {
                // The server resumes after Last-Event-ID, so this should never happen; counted
                // (and skipped) so that it would show.
                repeats += 1;
                onRepeat(repeats);
                continue;
              }
              let payload = null;
              try {
                payload = JSON.parse(data.join('\n'));
              } catch (_) {
                payload = { kind, message: data.join('\n') };
              }
              last = id;
              onEvent(id, kind, payload);
            }
          }
          throw new Error('the server closed the stream');
        } catch (e) {
          if (stopped) return;
          onStatus('reconnecting', last, e.message || String(e));
          await sleep(backoff);
          backoff = Math.min(backoff * 2, 4000);
        }
      }
    })();
    return () => {
      stopped = true;
      if (ctrl) ctrl.abort();
    };
  }

  /**
   * The answer to an action, in words, as the driver gave it.
   * @param {CommandReply | null | undefined} reply
   * @param {string} [what]
   * @returns {Said}
   */
  function describeReply(reply, what) {
    const who = what ? what + ': ' : '';
    if (reply && reply.outcome === 'next_turn') return { outcome: 'next_turn', text: `${who}this message started the next turn`, turn: reply.turn };
    return { outcome: 'done', text: `${who}done (the driver carried it out)` };
  }

  /**
   * @param {ApiError} e
   * @param {string} [what]
   * @returns {Said}
   */
  function describeError(e, what) {
    const who = what ? what + ': ' : '';
    if (e.status === 403) return { outcome: 'forbidden', text: who + e.message };
    if (e.status === 422) return { outcome: 'refused', text: who + e.message };
    if (e.status === 409) return { outcome: 'ended', text: who + e.message };
    return { outcome: 'error', text: who + e.message };
  }

  /**
   * Shows an action's answer in `out` (data-outcome says which, for people and tests).
   * @param {HTMLElement} out
   * @param {Said} a
   */
  function showAnswer(out, a) {
    out.dataset.outcome = a.outcome;
    out.className = `answer ${a.outcome}`;
    fill(out, a.text);
    if (a.turn) out.append(' ', h('a', { href: `/ui/turns/${encodeURIComponent(a.turn)}`, 'data-nav': true }, 'open it'));
  }

  /**
   * @param {HTMLElement} out
   * @param {HTMLButtonElement[]} buttons
   * @param {string} what
   * @param {() => Promise<CommandReply>} f
   */
  async function act(out, buttons, what, f) {
    buttons.forEach((b) => (b.disabled = true));
    out.dataset.outcome = 'pending';
    out.className = 'answer pending';
    fill(out, 'sending…');
    try {
      showAnswer(out, describeReply(await f(), what));
      return true;
    } catch (e) {
      showAnswer(out, describeError(e, what));
      return false;
    } finally {
      buttons.forEach((b) => (b.disabled = b.dataset.locked === 'yes'));
    }
  }

  /**
   * Greys out a control this person may not use, with a title saying who may (`why` null: usable
   * again). The page only helps here: the server refuses the action all the same.
   * @param {HTMLElement} el
   * @param {string | null} why
   */
  function lock(el, why) {
    if (why) {
      el.dataset.locked = 'yes';
      el.setAttribute('title', why);
    } else if (el.dataset.locked === 'yes') {
      delete el.dataset.locked;
      el.removeAttribute('title');
    }
    /** @type {HTMLButtonElement} */ (el).disabled = !!why;
  }

  // ---------- navigation ----------

  function go(path) {
    history.pushState(null, '', path);
    render();
  }

  function signOut(why) {
    stopInboxCount();
    state.token = null;
    state.person = null;
    state.me = null;
    localStorage.removeItem(TOKEN_KEY);
    localStorage.removeItem(TOKEN_ORIGIN_KEY);
    render(why);
  }

  /** Sign out as the person asked: a token the sign-in made is revoked on the server first. */
  async function signOutAsked() {
    if (state.token && state.me && localStorage.getItem(TOKEN_ORIGIN_KEY) === 'signin') {
      try {
        await api('DELETE', `/v1/tokens/${encodeURIComponent(state.me.token_id)}`);
      } catch (e) {
        if (e.status !== 401) return signOut('Signed out here, but the server did not revoke the token: ' + e.message);
      }
    }
    signOut('Signed out.');
  }

  async function render(message) {
    if (state.view) {
      state.view();
      state.view = null;
    }
    const main = $('#main');
    main.replaceChildren();
    $('#who').textContent = '';
    $('#signout').hidden = true;
    $('#inbox').hidden = true;
    $('#audit-link').hidden = true;
    if (location.pathname === CALLBACK_PATH) return signInCallback(main);
    if (!state.token) return signInView(main, message);
    if (!state.person || !state.me) {
      try {
        state.me = /** @type {Me} */ (await api('GET', '/v1/me'));
        state.person = state.me.person;
      } catch (e) {
        if (state.token) fill(main, h('p', { class: 'notice bad' }, e.message));
        return;
      }
    }
    $('#who').textContent = state.person;
    $('#who').setAttribute('href', '/ui/me');
    $('#signout').hidden = false;
    $('#inbox').hidden = false;
    $('#audit-link').hidden = !(state.me && state.me.role === 'admin');
    startInboxCount();
    const ctx = { alive: true, cleanups: [] };
    state.view = () => {
      ctx.alive = false;
      ctx.cleanups.forEach((f) => f());
    };
    const path = location.pathname;
    if (path === '/ui/me') return personView(main, ctx);
    if (path === '/ui/approvals') return inboxView(main, ctx);
    if (path === '/ui/help') return helpView(main);
    if (path === '/ui/audit') return auditView(main, ctx);
    let m;
    if ((m = path.match(/^\/ui\/turns\/([^/]+)(?:\/([a-z]+))?\/?$/))) {
      const tab = TABS.includes(m[2]) ? m[2] : 'live';
      return turnView(main, ctx, decodeURIComponent(m[1]), tab);
    }
    if (path !== '/ui/sessions') history.replaceState(null, '', '/ui/sessions');
    return sessionsView(main, ctx);
  }

  // ---------- sign in ----------

  function signInView(main, message) {
    const input = h('input', { type: 'password', name: 'token', id: 'token', autocomplete: 'off', placeholder: 'hgr_…', required: true });
    const err = h('p', { class: 'error', id: 'signin-error', role: 'alert' }, message || '');
    const form = h(
      'form',
      { class: 'card signin', id: 'signin' },
      h('h1', {}, 'Sign in to hangar'),
      h('p', {}, 'Paste your API token. Make one on the server with ', h('code', {}, 'hangar token create --person EMAIL'), ' (the token is its last line).'),
      h('label', { for: 'token' }, 'API token'),
      input,
      h('button', { type: 'submit', class: 'primary' }, 'Sign in'),
      err,
    );
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      state.token = input.value.trim();
      try {
        state.person = /** @type {Me} */ (await api('GET', '/v1/me')).person;
        localStorage.setItem(TOKEN_KEY, state.token);
        if (!location.pathname.startsWith('/ui/')) history.replaceState(null, '', '/ui/sessions');
        render();
      } catch (e) {
        state.token = null;
        state.person = null;
        err.textContent = e.status === 401 ? 'That token was refused: ' + e.message : e.message;
      }
    });
    main.append(form);
    input.focus();
    oidcButton(form, err);
  }

  /** Adds "Sign in with <issuer>" to the sign-in form when the server has an issuer. */
  async function oidcButton(form, err) {
    let config;
    try {
      const r = await fetch('/v1/auth', { cache: 'no-store' });
      config = /** @type {AuthConfig} */ (await r.json());
    } catch (_) {
      return;
    }
    if (!config.oidc) return;
    const button = h('button', { type: 'button', class: 'primary', id: 'signin-oidc' }, `Sign in with ${config.oidc.name}`);
    button.addEventListener('click', async () => {
      button.disabled = true;
      try {
        const started = /** @type {OidcStarted} */ (await anonymous('/v1/auth/oidc/start', { redirect_uri: location.origin + CALLBACK_PATH }));
        sessionStorage.setItem(FLOW_KEY, JSON.stringify({ flow: started.flow, state: started.state }));
        location.assign(started.authorize_url);
      } catch (e) {
        button.disabled = false;
        err.textContent = e.message;
      }
    });
    form.insertBefore(h('p', { class: 'or' }, button, ' or paste a token:'), form.querySelector('label'));
  }

  /**
   * A POST of the sign-in routes, which take no token.
   * @param {string} path
   * @param {RequestBody} body
   * @returns {Promise<any>}
   */
  async function anonymous(path, body) {
    const r = await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), cache: 'no-store' });
    const data = await r.json().catch(() => null);
    if (!r.ok) throw new ApiError(r.status, (data && data.error && data.error.code) || 'error', (data && data.error && data.error.message) || `HTTP ${r.status}`);
    return data;
  }

  /** Where the issuer sends the browser back: the code becomes a token, for this tab's flow only. */
  async function signInCallback(main) {
    const q = new URLSearchParams(location.search);
    const saved = sessionStorage.getItem(FLOW_KEY);
    sessionStorage.removeItem(FLOW_KEY);
    // The code leaves the address bar (and the history) at once.
    history.replaceState(null, '', CALLBACK_PATH);
    const fail = (/** @type {string} */ why) => {
      const again = h('a', { href: '/ui/sessions', id: 'signin-again' }, 'Sign in again');
      fill(main, h('div', { class: 'card signin', id: 'signin-refused' }, h('h1', {}, 'Sign-in refused'), h('p', { class: 'error', role: 'alert' }, why), again));
    };
    const flow = saved ? JSON.parse(saved) : null;
    if (q.get('error')) return fail(`the issuer said: ${q.get('error_description') || q.get('error')}`);
    if (!flow || !q.get('code')) return fail('this tab began no sign-in (or it finished already)');
    if (q.get('state') !== flow.state) return fail('the answer is not for the sign-in this tab began (its state differs)');
    try {
      const signed = /** @type {SignedIn} */ (await anonymous('/v1/auth/oidc/finish', { flow: flow.flow, state: q.get('state') || '', code: q.get('code') || '' }));
      state.token = signed.token;
      localStorage.setItem(TOKEN_KEY, signed.token);
      localStorage.setItem(TOKEN_ORIGIN_KEY, 'signin');
      state.person = null;
      state.me = null;
      history.replaceState(null, '', '/ui/sessions');
      render();
    } catch (e) {
      fail(e.message);
    }
  }

  // ---------- the person menu ----------

  /** Who is signed in, their tokens (make one, shown once; revoke), and signing out. */
  async function personView(main, ctx) {
    const me = /** @type {Me} */ (state.me);
    const list = h('tbody', { id: 'tokens' });
    const out = h('p', { class: 'answer', id: 'token-answer', role: 'status' });
    const load = async () => {
      const all = /** @type {Tokens} */ (await api('GET', '/v1/tokens')).tokens;
      if (!ctx.alive) return;
      list.replaceChildren(
        ...all
          .filter((t) => t.person === me.person && !t.revoked_at)
          .map((t) => {
            const revoke = h('button', { type: 'button', class: 'revoke', dataset: { id: t.id } }, t.id === me.token_id ? 'revoke (this page’s)' : 'revoke');
            revoke.addEventListener('click', async () => {
              try {
                await api('DELETE', `/v1/tokens/${encodeURIComponent(t.id)}`);
                out.textContent = `Revoked ${t.name || t.id}.`;
                if (t.id === me.token_id) return signOut('This page’s token was revoked.');
                load();
              } catch (e) {
                out.textContent = e.message;
              }
            });
            return h('tr', { dataset: { id: t.id } }, h('td', {}, t.name || '(no name)'), h('td', {}, t.id), h('td', {}, when(t.created_at)), h('td', {}, t.expires_at ? when(t.expires_at) : ''), h('td', {}, t.last_used_at ? when(t.last_used_at) : 'never'), h('td', {}, revoke));
          }),
      );
    };
    const name = h('input', { name: 'name', id: 'token-name', placeholder: 'laptop', maxlength: 100 });
    const expires = h('select', { name: 'expires', id: 'token-expires' }, ...['1d', '7d', '30d', '90d', '365d'].map((v) => h('option', { value: v, selected: v === '90d' }, v)));
    const form = h('form', { class: 'grid-form', id: 'new-token' }, h('label', {}, 'Name', name), h('label', {}, 'Expires in', expires), h('button', { type: 'submit', class: 'primary' }, 'Make a token'));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      try {
        const made = /** @type {TokenCreated} */ (await api('POST', '/v1/tokens', { name: name.value.trim(), expires: expires.value }));
        fill(out, 'Your new token (shown this once; copy it now): ', h('code', { id: 'token-created' }, made.token));
        load();
      } catch (e) {
        out.textContent = e.message;
      }
    });
    const signout = h('button', { type: 'button', id: 'person-signout' }, 'Sign out');
    signout.addEventListener('click', () => signOutAsked());
    fill(
      main,
      h(
        'section',
        { class: 'card', id: 'person' },
        h('h1', {}, 'You'),
        h('dl', {}, h('dt', {}, 'email'), h('dd', { id: 'person-email' }, me.person), h('dt', {}, 'role'), h('dd', { id: 'person-role' }, me.role)),
        signout,
      ),
      h(
        'section',
        { class: 'card' },
        h('h2', {}, 'Your tokens'),
        h('table', { class: 'tokens' }, h('thead', {}, h('tr', {}, h('th', {}, 'name'), h('th', {}, 'id'), h('th', {}, 'made'), h('th', {}, 'expires'), h('th', {}, 'last used'), h('th', {}, ''))), list),
        form,
        out,
      ),
    );
    try {
      await load();
    } catch (e) {
      out.textContent = e.message;
    }
  }

  // ---------- the audit ----------

  /** An audit record's detail as `key=value` words. @param {string} d */
  function auditDetail(d) {
    try {
      const o = JSON.parse(d);
      return Object.entries(o)
        .map(([k, x]) => `${k}=${typeof x === 'object' ? JSON.stringify(x) : x}`)
        .join(' ');
    } catch (_) {
      return d;
    }
  }

  /** Audit records as a table (#, when, who, what, detail). @param {AuditRecord[]} records */
  function auditTable(records) {
    return h(
      'div',
      { class: 'scroll' },
      h(
        'table',
        { class: 'audit' },
        h('thead', {}, h('tr', {}, h('th', {}, '#'), h('th', {}, 'when'), h('th', {}, 'who'), h('th', {}, 'what'), h('th', {}, 'detail'))),
        h(
          'tbody',
          {},
          records.map((r) => h('tr', { dataset: { seq: r.seq, action: r.action } }, h('td', { class: 'num' }, String(r.seq)), h('td', { class: 'when' }, when(r.at)), h('td', {}, r.actor), h('td', {}, h('code', {}, r.action)), h('td', { class: 'detail' }, auditDetail(r.detail)))),
        ),
      ),
    );
  }

  /**
   * The whole audit log (issue 21: not only per turn), newest first, with a search over who,
   * what and the detail; the chain checked on demand. The server lets admins read it.
   */
  async function auditView(main, ctx) {
    const list = h('div', { id: 'audit-list' }, h('p', { class: 'muted' }, 'Loading…'));
    const search = h('input', { type: 'search', id: 'audit-search', placeholder: 'Filter by who, what or detail', 'aria-label': 'Filter the audit' });
    const out = h('span', { class: 'small', id: 'audit-verify' });
    const verify = h('button', { type: 'button', id: 'audit-verify-button' }, 'Verify the chain');
    verify.addEventListener('click', async () => {
      try {
        /** @type {AuditVerify} */
        const r = await api('GET', '/v1/audit/verify');
        out.textContent = r.ok ? `the chain holds (${r.records} records)` : `broken: ${r.error}`;
      } catch (e) {
        out.textContent = e.message;
      }
    });
    main.append(h('div', { class: 'row spread' }, h('h1', {}, 'Audit'), h('span', { class: 'row' }, verify, out)), h('div', { class: 'row filters' }, search), list);
    /** @type {AuditRecord[]} */
    let all = [];
    const draw = () => {
      const words = search.value.trim().toLowerCase();
      const rows = all.filter((r) => !words || `${r.actor} ${r.action} ${r.detail}`.toLowerCase().includes(words));
      fill(list, rows.length ? auditTable(rows.slice(0, 1000)) : h('p', { class: 'muted' }, 'No records match.'));
    };
    search.addEventListener('input', draw);
    try {
      let after = 0;
      for (;;) {
        /** @type {AuditRecords} */
        const page = await api('GET', `/v1/audit?after=${after}&limit=1000`);
        if (!ctx.alive) return;
        all = all.concat(page.records);
        if (page.records.length < 1000) break;
        after = page.records[page.records.length - 1].seq;
      }
      all.reverse();
      draw();
    } catch (e) {
      if (ctx.alive) fill(list, h('p', { class: 'notice bad' }, e.status === 403 ? 'Only an admin may read the whole audit log (each turn’s own records are on its Audit tab).' : e.message));
    }
  }

  // ---------- help ----------

  /** What the page's words mean where they are not obvious (linked from where they show). */
  function helpView(main) {
    main.append(
      h('h1', {}, 'What the page says'),
      h(
        'section',
        { class: 'card', id: 'trust' },
        h('h2', {}, 'Trusted and not trusted'),
        h('p', {}, 'After every tool call the driver records the repository’s tree, so any step can be forked. A tree is ', h('strong', {}, 'trusted'), ' when the agent could not have touched what it was read from: the agent runs as a user of its own (the ', h('em', {}, 'uid split'), '), the driver as another, and only the driver writes its log and object store.'),
        h('p', {}, 'It is ', h('strong', {}, 'not trusted'), ' when the agent ran as the same user as the driver: in a plain folder (run as the server’s user), or in a sandbox without the uid split (a container without root to switch users, a one-shot turn with no driver). The tree is then what the files said, and the agent could have arranged them. Text marked ', h('em', {}, 'unverified'), ' is the same: the run log could have been written by the agent.'),
        h('p', { class: 'muted small' }, 'Sandboxes made by a server running as root split the users by default; see the README’s “sandboxes” section.'),
      ),
      h(
        'section',
        { class: 'card', id: 'phases' },
        h('h2', {}, 'How a turn is doing'),
        h('ul', {}, ...Object.entries(PHASES).map(([k, [text]]) => h('li', {}, h('strong', {}, text), ` (${k})`))),
        h('p', { class: 'muted small' }, 'Blocked: it ended right after a call the rules, Tower or a person denied, and did nothing more. Hover a state to read why.'),
      ),
    );
    if (location.hash) document.querySelector(location.hash)?.scrollIntoView();
  }

  // ---------- the approvals inbox ----------

  /** How long ago `ms` was, in words. */
  function ago(ms) {
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 60) return `${s} s ago`;
    if (s < 3600) return `${Math.floor(s / 60)} min ago`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
    return `${Math.floor(s / 86400)} d ago`;
  }

  /** "Tell me when a call waits": asks the browser for notifications (only on a click). */
  function notifyButton() {
    if (!('Notification' in window)) return null;
    const b = h('button', { type: 'button', id: 'notify', class: 'small' }, 'Notify me when a call waits');
    const show = () => {
      const p = Notification.permission;
      b.textContent = p === 'granted' ? 'Notifications on' : p === 'denied' ? 'Notifications blocked by the browser' : 'Notify me when a call waits';
      b.disabled = p !== 'default';
    };
    b.addEventListener('click', async () => {
      await Notification.requestPermission();
      show();
    });
    show();
    return b;
  }

  /** Shows how many requests wait for this person beside the header's "Approvals". */
  function showInboxCount(n) {
    const c = $('#inbox-count');
    c.dataset.count = String(n);
    c.textContent = n ? String(n) : '';
    $('#inbox').setAttribute('title', n ? `${n} tool ${n === 1 ? 'call waits' : 'calls wait'} for your answer` : 'nothing waits for your answer');
    // The tab says it too, in its title and its icon (issue 21).
    document.title = n ? `(${n}) hangar` : 'hangar';
    favicon(n);
  }

  /** The tab's icon: hangar's mark, with the count of waiting requests on it when there are any. */
  function favicon(n) {
    let link = /** @type {HTMLLinkElement | null} */ (document.querySelector('link[rel=icon]'));
    if (!link) {
      link = /** @type {HTMLLinkElement} */ (h('link', { rel: 'icon' }));
      document.head.append(link);
    }
    const c = document.createElement('canvas');
    c.width = c.height = 32;
    const g = c.getContext('2d');
    if (!g) return;
    g.fillStyle = '#1f2937';
    g.fillRect(2, 6, 28, 22);
    g.fillStyle = '#ffffff';
    g.font = 'bold 18px sans-serif';
    g.textAlign = 'center';
    g.textBaseline = 'middle';
    g.fillText('h', 16, 17);
    if (n) {
      g.fillStyle = '#d97706';
      g.beginPath();
      g.arc(22, 10, 10, 0, 2 * Math.PI);
      g.fill();
      g.fillStyle = '#ffffff';
      g.font = 'bold 14px sans-serif';
      g.fillText(n > 9 ? '9+' : String(n), 22, 11);
    }
    link.href = c.toDataURL('image/png');
    link.dataset.count = String(n);
  }

  /** Requests already seen, so a notification is only for a new one. */
  const seenRequests = new Set();
  let firstCount = true;

  async function refreshInboxCount() {
    if (!state.token) return;
    try {
      const { approvals } = /** @type {PendingApprovals} */ (await api('GET', '/v1/approvals'));
      showInboxCount(approvals.length);
      for (const a of approvals) {
        const key = `${a.run_id}/${a.request_id}`;
        if (seenRequests.has(key)) continue;
        seenRequests.add(key);
        // A browser notification for a request new since the page opened, when the person
        // allowed them (the inbox has the button that asks).
        if (!firstCount && 'Notification' in window && Notification.permission === 'granted') {
          const n = new Notification('hangar: a tool call waits for you', { body: `${a.tool_name}: ${short(typeof a.input.command === 'string' ? a.input.command : JSON.stringify(a.input), 120)}`, tag: key });
          n.onclick = () => {
            window.focus();
            go('/ui/approvals');
          };
        }
      }
      firstCount = false;
    } catch (_) {
      /* the next round tries again; a refused token signs the page out */
    }
  }

  /** The header's count follows the server while signed in (every view, every few seconds). */
  function startInboxCount() {
    if (state.countTimer) return;
    refreshInboxCount();
    state.countTimer = setInterval(refreshInboxCount, 5000);
  }

  function stopInboxCount() {
    if (state.countTimer) clearInterval(state.countTimer);
    state.countTimer = null;
    showInboxCount(0);
  }

  /**
   * The requests waiting for this person's answer, across every live run: those the server lists
   * for them (their own runs', their environments' as a named approver, every run's for an
   * admin), oldest first. Polled; an answered request leaves the list at once.
   */
  function inboxView(main, ctx) {
    const list = h('div', { id: 'inbox-list' }, h('p', { class: 'muted' }, 'Loading…'));
    const status = h('span', { class: 'muted small', id: 'inbox-status' });
    main.append(
      h('div', { class: 'row spread' }, h('h1', {}, 'Approvals'), status),
      h('p', { class: 'muted small' }, 'Tool calls waiting for a person, in the runs whose requests you may answer: your own, those of environments that name you as an approver, and every run for an admin.'),
      notifyButton(),
      list,
    );
    /** @type {Map<string, {card: HTMLElement, age: HTMLElement, at: number}>} */
    const cards = new Map();
    // Answered here: kept out even if a poll still lists it before the run's watcher records it.
    const answered = new Set();
    const draw = (/** @type {string[]} */ order) => {
      const shown = order.filter((k) => cards.has(k) && !answered.has(k));
      for (const k of shown) {
        const c = /** @type {{card: HTMLElement, age: HTMLElement, at: number}} */ (cards.get(k));
        c.age.textContent = ago(c.at);
      }
      fill(list, shown.length ? shown.map((k) => cards.get(k).card) : h('p', { class: 'muted', id: 'inbox-empty' }, 'Nothing waits for your answer.'));
    };
    let order = [];
    const load = async () => {
      let all;
      try {
        all = /** @type {PendingApprovals} */ (await api('GET', '/v1/approvals'));
      } catch (e) {
        if (ctx.alive) status.textContent = e.message;
        return;
      }
      if (!ctx.alive) return;
      const runs = new Map((all.runs || []).map((r) => [r.run_id, r]));
      order = [];
      for (const a of all.approvals) {
        const key = `${a.run_id}/${a.request_id}`;
        order.push(key);
        if (!cards.has(key)) cards.set(key, inboxCard(a, runs.get(a.run_id), key));
      }
      for (const k of [...cards.keys()]) if (!order.includes(k)) cards.delete(k);
      draw(order);
      showInboxCount(order.filter((k) => !answered.has(k)).length);
      status.textContent = 'updated ' + when(Date.now()).slice(11);
    };

    /**
     * @param {Approval} a
     * @param {ApprovalRun | undefined} run
     * @param {string} key
     */
    function inboxCard(a, run, key) {
      const me = /** @type {Me} */ (state.me);
      const reason = h('input', { class: 'reason', placeholder: 'Reason (optional; the agent sees it when you deny)', 'aria-label': 'reason' });
      const allow = h('button', { type: 'button', class: 'primary approve' }, 'Approve');
      const deny = h('button', { type: 'button', class: 'danger deny' }, 'Deny');
      const out = h('p', { class: 'answer', 'aria-live': 'polite' });
      const age = h('span', { class: 'age' }, ago(a.requested_at));
      // The turn's page only for who may read it (its owner, an admin): an approver answers here.
      const mayRead = run && (me.role === 'admin' || run.person === me.person);
      const card = h(
        'article',
        { class: 'card approval inbox-item', dataset: { requestId: a.request_id, runId: a.run_id, sessionId: run ? run.session_id : '' } },
        h('div', { class: 'row spread' }, h('h3', {}, h('span', { class: 'tool-name' }, a.tool_name), ' ', h('span', { class: 'muted small' }, short(toolSummary(a.tool_name, a.input), 100))), age),
        h(
          'dl',
          { class: 'meta' },
          h('dt', {}, 'person'),
          h('dd', { class: 'person' }, run ? run.person : '–'),
          h('dt', {}, 'environment'),
          h('dd', {}, run ? run.environment : '–'),
          h('dt', {}, 'run'),
          h('dd', { class: 'mono' }, a.run_id),
          h('dt', {}, 'session'),
          h('dd', { class: 'mono' }, run ? (mayRead ? h('a', { href: `/ui/turns/${encodeURIComponent(run.turn_id)}`, 'data-nav': true }, run.session_id) : run.session_id) : '–'),
          h('dt', {}, 'asked'),
          h('dd', {}, when(a.requested_at)),
        ),
        toolInput(a.tool_name, a.input),
        reason,
        h('div', { class: 'row' }, allow, deny),
        out,
      );
      /** @param {import('./api').Decision} decision */
      const answerIt = async (decision) => {
        /** @type {Answer} */
        const body = { decision };
        if (reason.value.trim()) body.reason = reason.value.trim();
        const ok = await act(out, [allow, deny], decision === 'allow' ? 'approve' : 'deny', () => api('POST', `/v1/runs/${encodeURIComponent(a.run_id)}/approvals/${encodeURIComponent(a.request_id)}`, body));
        if (ok && ctx.alive) {
          answered.add(key);
          draw(order);
          showInboxCount(order.filter((k) => !answered.has(k)).length);
          status.textContent = `${decision === 'allow' ? 'Approved' : 'Denied'} ${a.tool_name} in run ${a.run_id}.`;
        }
      };
      allow.addEventListener('click', () => answerIt('allow'));
      deny.addEventListener('click', () => answerIt('deny'));
      return { card, age, at: a.requested_at };
    }

    load();
    const timer = setInterval(load, 2000);
    ctx.cleanups.push(() => clearInterval(timer));
  }

  // ---------- sessions ----------

  function newSessionForm() {
    const dir = h('input', { name: 'dir', required: true, placeholder: '/path/to/repo' });
    const harness = h('select', { name: 'harness' }, h('option', { value: 'claude' }, 'Claude Code'), h('option', { value: 'codex' }, 'Codex'));
    const env = h('input', { name: 'env', placeholder: 'optional: the in-place sandbox on the folder' });
    const policy = h('select', { name: 'policy' }, h('option', { value: '' }, 'the environment’s (ask if it names none)'), h('option', { value: 'ask' }, 'ask (a person answers each tool call)'), h('option', { value: 'auto' }, 'auto'), h('option', { value: 'governed' }, 'governed (Tower)'));
    const prompt = h('textarea', { name: 'prompt', required: true, rows: 3, placeholder: 'What should the agent do?' });
    const check = h('input', { name: 'verify', placeholder: 'optional, e.g. cargo test' });
    const rounds = h('input', { name: 'max_verify_rounds', type: 'number', min: 1, max: 20, placeholder: '3' });
    const out = h('p', { class: 'answer' });
    const start = h('button', { type: 'submit', class: 'primary' }, 'Start');
    const form = h(
      'form',
      { class: 'grid-form', id: 'new-session' },
      h('label', {}, 'Folder', dir),
      h('label', {}, 'Harness', harness),
      h('label', {}, 'Policy', policy),
      h('label', { class: 'wide' }, 'Environment (optional): a sandbox of it holds a copy of the folder; without one, the agent works on the folder in a local sandbox', env),
      h('label', { class: 'wide' }, 'Prompt', prompt),
      h('label', { class: 'span2' }, 'Check: runs when the agent is done; its output goes back to the agent until it passes', check),
      h('label', {}, 'Check rounds at most', rounds),
      h('div', { class: 'wide row' }, start, out),
    );
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      start.disabled = true;
      try {
        /** @type {TurnOptions} */
        const options = {};
        if (check.value.trim()) options.verify = check.value.trim();
        if (rounds.value) options.max_verify_rounds = Number(rounds.value);
        // Always a sandbox: the environment named, else the server's in-place one on the folder.
        /** @type {StartSession} */
        const body = { dir: dir.value.trim(), harness: /** @type {Harness} */ (harness.value), prompt: prompt.value, options };
        if (env.value.trim()) body.env = env.value.trim();
        if (policy.value) body.policy = /** @type {Policy} */ (policy.value);
        /** @type {Started} */
        const r = await api('POST', '/v1/sessions', body);
        go(`/ui/turns/${encodeURIComponent(r.turn.id)}`);
      } catch (e) {
        showAnswer(out, describeError(e));
      } finally {
        start.disabled = false;
      }
    });
    return h('details', { class: 'card' }, h('summary', {}, 'Start a session'), form);
  }

  /**
   * Where a forked session came from, in one line.
   * @param {ForkRecord | null | undefined} f
   */
  function forkedFrom(f) {
    if (!f) return null;
    const c = f.conversation;
    return h('p', { class: 'small forked-from' }, 'Forked from ', h('a', { href: `/ui/turns/${encodeURIComponent(f.turn)}/timeline`, 'data-nav': true }, `step ${f.step}`), ` of run ${f.run} (tree ${short(f.tree, 13)}${f.trusted ? '' : ', untrusted'}); conversation ${c.exact ? (c.parent ? 'cut exactly there' : 'new (nothing was said before)') : 'not cut exactly: ' + (c.why || '')}.`);
  }

  /**
   * A session without turns (a fork made without a first message): its first prompt.
   * @param {BoardRow} s
   */
  function firstPromptForm(s) {
    const text = h('textarea', { class: 'first-prompt', rows: 2, 'aria-label': 'first prompt', placeholder: 'The first prompt of this session…' });
    const start = h('button', { type: 'button', class: 'primary start-first' }, 'Start its first turn');
    const out = h('p', { class: 'answer' });
    start.addEventListener('click', async () => {
      if (!text.value.trim()) return;
      start.disabled = true;
      try {
        /** @type {CommandReply} */
        const r = await api('POST', `/v1/sessions/${encodeURIComponent(s.id)}/messages`, { text: text.value.trim() });
        if (r.turn) go(`/ui/turns/${encodeURIComponent(r.turn)}`);
        else showAnswer(out, describeReply(r));
      } catch (e) {
        showAnswer(out, describeError(e));
      } finally {
        start.disabled = false;
      }
    });
    return h('div', { class: 'first-prompt-form' }, text, h('div', { class: 'row' }, start, out));
  }

  /**
   * @param {BoardRow} s
   * @param {Map<string, HTMLElement>} forms
   * @param {boolean} all every turn (the session's own page), else the latest three
   */
  function sessionCard(s, forms, all) {
    const last = s.turns[s.turns.length - 1];
    const sb = s.sandbox;
    const turns = h(
      'table',
      { class: 'turns' },
      h('thead', {}, h('tr', {}, h('th', {}, 'turn'), h('th', {}, 'state'), h('th', {}, 'prompt'), h('th', {}, 'tokens'), h('th', {}, 'cost'))),
      h(
        'tbody',
        {},
        // The latest three (the session's page lists every turn).
        s.turns
          .slice(all ? 0 : -3)
          .reverse()
          .map((t) =>
            h(
              'tr',
              { dataset: { turnId: t.id } },
              h('td', {}, h('a', { href: `/ui/turns/${encodeURIComponent(t.id)}`, 'data-nav': true }, `#${t.index + 1}`)),
              h('td', {}, stateBadge(t)),
              h('td', { class: 'prompt' }, short(t.prompt, 90)),
              h('td', { class: 'num' }, tokens(t.usage)),
              h('td', { class: 'num' }, cost(t.cost_usd)),
            ),
          ),
      ),
    );
    return h(
      'article',
      { class: 'card session', dataset: { sessionId: s.id } },
      h(
        'div',
        { class: 'row spread' },
        h('h2', {}, last ? h('a', { href: `/ui/turns/${encodeURIComponent(last.id)}`, 'data-nav': true }, short(last.prompt, 60) || s.id) : s.id),
        h('span', { class: 'badges' }, stateBadge(last), badge(s.harness, 'plain'), badge(`policy ${s.policy}`, 'plain')),
      ),
      h(
        'dl',
        { class: 'meta' },
        h('dt', {}, 'person'),
        h('dd', {}, s.person || '–'),
        h('dt', {}, 'sandbox'),
        h('dd', {}, sb ? `${sb.kind} · ${sb.workdir}` : s.sandbox_id),
        h('dt', {}, 'tokens'),
        h('dd', {}, tokens(s.usage)),
        h('dt', {}, 'cost'),
        h('dd', {}, cost(s.cost_usd)),
        h('dt', {}, 'session'),
        h('dd', { class: 'mono' }, s.id),
      ),
      forkedFrom(s.fork),
      !all && s.turns.length > 3 ? h('p', { class: 'muted small' }, h('a', { href: `/ui/sessions?session=${encodeURIComponent(s.id)}`, 'data-nav': true }, `all ${s.turns.length} turns`)) : null,
      s.turns.length ? h('div', { class: 'scroll' }, turns) : forms.get(s.id) || (forms.set(s.id, firstPromptForm(s)), forms.get(s.id)),
    );
  }

  function sessionsView(main, ctx) {
    const only = new URLSearchParams(location.search).get('session');
    const list = h('div', { id: 'sessions' }, h('p', { class: 'muted' }, 'Loading…'));
    const status = h('span', { class: 'muted small' });
    const forms = new Map();
    // What waits for a person (issue 21): a count, a filter, and the count in the tab's title.
    const waitingCount = h('span', { id: 'waiting-count', class: 'badge wait', hidden: true });
    const needsMe = h('input', { type: 'checkbox', id: 'needs-me' });
    const filter = h('label', { class: 'small inline-check' }, needsMe, 'needs me');
    // Search and filters (issue 21): by words (prompt, person, folder, id) and by state,
    // person, harness and environment; the choices are those of the sessions listed.
    const search = h('input', { type: 'search', id: 'board-search', placeholder: 'Search prompts, people, folders, ids', 'aria-label': 'Search sessions' });
    /** @param {string} id @param {string} all */
    const choice = (id, all) => h('select', { id, 'aria-label': all }, h('option', { value: '' }, all));
    const byState = choice('filter-state', 'any state');
    const byPerson = choice('filter-person', 'anyone');
    const byHarness = choice('filter-harness', 'any harness');
    const byEnv = choice('filter-env', 'any environment');
    /** Keeps a select's choice while its options follow the rows. @param {HTMLSelectElement} sel @param {string[]} values */
    const options = (sel, values) => {
      const keep = sel.value;
      const first = sel.options[0];
      sel.replaceChildren(first, ...[...new Set(values)].sort().map((x) => h('option', { value: x }, x)));
      sel.value = values.includes(keep) ? keep : '';
    };
    /** @param {BoardRow} s */
    const envOf = (s) => (s.sandbox ? s.sandbox.environment : '');
    const filters = h('div', { class: 'row filters', id: 'board-filters' }, search, byState, byPerson, byHarness, byEnv);
    /** @type {BoardRow[]} */
    let shown = [];
    const render = () => {
      const words = search.value.trim().toLowerCase();
      const rows = shown.filter((s) => {
        if (needsMe.checked && !(s.waiting > 0)) return false;
        if (byState.value && s.phase !== byState.value) return false;
        if (byPerson.value && s.person !== byPerson.value) return false;
        if (byHarness.value && s.harness !== byHarness.value) return false;
        if (byEnv.value && envOf(s) !== byEnv.value) return false;
        if (!words) return true;
        const hay = [s.id, s.person, s.sandbox && s.sandbox.workdir, envOf(s), ...s.turns.map((t) => t.prompt)].join(' ').toLowerCase();
        return words.split(/\s+/).every((w) => hay.includes(w));
      });
      fill(list, ...(rows.length ? rows.map((s) => sessionCard(s, forms, !!only)) : [h('p', { class: 'muted' }, needsMe.checked ? 'Nothing waits for you.' : ['No sessions yet. Start one above, or with ', h('code', {}, 'hangar run'), '.'])]));
    };
    needsMe.addEventListener('change', render);
    search.addEventListener('input', render);
    for (const sel of [byState, byPerson, byHarness, byEnv]) sel.addEventListener('change', render);
    if (only) main.append(h('div', { class: 'row spread' }, h('h1', {}, 'Session'), h('span', {}, h('a', { href: '/ui/sessions', 'data-nav': true }, 'all sessions'), ' ', status)), list);
    else main.append(h('div', { class: 'row spread' }, h('h1', {}, 'Sessions'), h('span', { class: 'row' }, waitingCount, filter, status)), newSessionForm(), filters, list);
    const load = async () => {
      try {
        /** @type {Board} */
        const { sessions } = await api('GET', only ? `/v1/board?session=${encodeURIComponent(only)}` : '/v1/board');
        if (!ctx.alive) return;
        shown = sessions;
        options(byState, sessions.map((x) => x.phase || '').filter(Boolean));
        options(byPerson, sessions.map((x) => x.person || '').filter(Boolean));
        options(byHarness, sessions.map((x) => x.harness));
        options(byEnv, sessions.map(envOf).filter(Boolean));
        const waiting = sessions.reduce((n, s) => n + s.waiting, 0);
        waitingCount.textContent = `${waiting} waiting for you`;
        waitingCount.hidden = waiting === 0;
        render();
        status.textContent = 'updated ' + when(Date.now()).slice(11);
      } catch (e) {
        if (ctx.alive) status.textContent = e.message;
      }
    };
    load();
    const timer = setInterval(load, 5000);
    ctx.cleanups.push(() => clearInterval(timer));
  }

  // ---------- one turn ----------

  const TOOL_TEXT_KEYS = ['command', 'file_path', 'path', 'pattern', 'url', 'query'];

  /** A tool input as a person reads it: the command for a shell, else its JSON. */
  function toolInput(name, input) {
    if (input && typeof input === 'object' && !Array.isArray(input)) {
      if (typeof input.command === 'string' && Object.keys(input).every((k) => ['command', 'description', 'timeout'].includes(k))) {
        return h('div', {}, input.description ? h('p', { class: 'muted small' }, input.description) : null, h('pre', { class: 'cmd' }, '$ ' + input.command));
      }
    }
    return longText(pretty(input), 'json');
  }

  function toolSummary(name, input) {
    if (input && typeof input === 'object') {
      for (const k of TOOL_TEXT_KEYS) if (typeof input[k] === 'string') return `${name}: ${short(input[k], 80)}`;
    }
    return name;
  }

  /**
   * An interrupt's report, word for word as the CLI and the API say it (hangar-events'
   * `interrupt::describe`).
   * @param {{seq: number, person?: string, answering?: number[], queued?: number[], approvals?: string[]}} p
   * @param {(n: number) => string | undefined} kindOf
   */
  function interruptInWords(p, kindOf) {
    const by = p.seq === 0 ? 'interrupted from the terminal (Ctrl-C)' : p.person ? `interrupted by ${p.person}` : 'interrupted';
    const name = (/** @type {number} */ n) => `${kindOf(n) || 'message'} #${n}`;
    const answering = p.answering || [];
    const queued = p.queued || [];
    const approvals = (p.approvals || []).length;
    const parts = [];
    if (answering.length) parts.push(`stopped the answer to ${answering.map(name).join(' and ')}`);
    if (approvals) parts.push(approvals === 1 ? 'withdrew the waiting approval' : `withdrew ${approvals} waiting approvals`);
    if (!parts.length) parts.push('the model was not answering');
    if (queued.length) parts.push(`${queued.map(name).join(' and ')} not yet begun, still ${queued.length === 1 ? 'runs' : 'run'}`);
    return `${by}: ${parts.join('; ')}`;
  }

  function endedInWords(status, reason) {
    const what = status === 0 ? 'done' : status === 130 ? 'interrupted' : 'failed';
    const how = reason === 'harness_exited' ? ', the agent’s process exited on its own' : '';
    return `Ended with status ${status} (${what}${how}).`;
  }

  function turnView(main, ctx, turnId, tab) {
    /**
     * What the page knows of the turn: the API's turn and its session's board row, and what the
     * run's events said (their payloads are the control plane's, not typed by the API);
     * `asks`: tool calls by the request that asked for them; `stream`: the row a message is
     * being streamed into.
     * @type {{turn: Turn | null, session: BoardRow | null, tools: Map<string, any>, trees: any[], ended: boolean, pendingIds: Set<string>, picked: number[], forkForms: Map<number, HTMLElement>, asks: Map<string, string>, stream: {thinking: boolean, text: HTMLElement, el: HTMLElement} | null, kinds: Map<number, string>}}
     */
    const v = {
      turn: null,
      session: null,
      tools: new Map(),
      trees: [],
      ended: false,
      pendingIds: new Set(),
      picked: [],
      forkForms: new Map(),
      asks: new Map(),
      stream: null,
      kinds: new Map(),
    };

    const head = h('section', { class: 'card turn-head', id: 'turn-head' }, h('p', { class: 'muted' }, 'Loading…'));
    const streamState = h('span', { class: 'stream', id: 'stream-state', dataset: { state: 'connecting', repeats: '0' } }, 'connecting…');
    const tabLinks = TABS.map((t) => h('a', { href: `/ui/turns/${encodeURIComponent(turnId)}/${t}`, class: 'tab', dataset: { tab: t } }, t[0].toUpperCase() + t.slice(1)));
    const nav = h('nav', { class: 'tabs' }, tabLinks, streamState);

    const approvals = h('section', { id: 'approvals', class: 'approvals' });
    const feed = h('ol', { id: 'feed', class: 'feed' });
    const message = h('textarea', { id: 'message', rows: 2, 'aria-label': 'message', placeholder: 'A steer for the agent…' });
    const sendBtn = h('button', { type: 'button', id: 'send', class: 'primary' }, 'Steer');
    const interruptBtn = h('button', { type: 'button', id: 'interrupt', class: 'danger' }, 'Interrupt');
    const answer = h('p', { id: 'action-answer', class: 'answer', 'aria-live': 'polite' });
    const lockedNote = h('p', { class: 'locked-note', id: 'actions-locked', hidden: true });
    const actions = h('form', { class: 'actions', id: 'actions' }, lockedNote, message, h('div', { class: 'row' }, sendBtn, interruptBtn), answer);
    const livePanel = h('section', { class: 'panel', dataset: { panel: 'live' } }, approvals, feed, actions);

    const timeline = h('ol', { id: 'timeline', class: 'timeline' });
    const diffBox = h('section', { id: 'diff', class: 'card diff' }, h('p', { class: 'muted small' }, 'Tick two steps (compare) to see what changed between them.'));
    const timelinePanel = h(
      'section',
      { class: 'panel', dataset: { panel: 'timeline' } },
      h('p', { class: 'notice', id: 'timeline-note' }, 'The work tree after each step, as the driver hashed it (step numbers are the API’s). Tick two steps to see what changed between them; fork a step into a new sandbox with exactly that tree and a session whose conversation goes up to it.'),
      diffBox,
      timeline,
    );
    const manifestPanel = h('section', { class: 'panel', dataset: { panel: 'manifest' }, id: 'manifest' });
    const auditPanel = h('section', { class: 'panel', dataset: { panel: 'audit' }, id: 'audit' });

    main.append(head, nav, livePanel, timelinePanel, manifestPanel, auditPanel);

    const showTab = (t) => {
      tab = t;
      for (const a of tabLinks) a.classList.toggle('on', a.dataset.tab === t);
      for (const p of [livePanel, timelinePanel, manifestPanel, auditPanel]) p.hidden = p.dataset.panel !== t;
      if (t === 'audit') loadAudit();
      if (t === 'manifest') renderManifest();
    };
    for (const a of tabLinks) {
      a.addEventListener('click', (ev) => {
        ev.preventDefault();
        history.replaceState(null, '', a.getAttribute('href'));
        showTab(a.dataset.tab);
      });
    }

    const running = () => v.turn && (v.turn.state === 'running' || v.turn.state === 'queued');

    /**
     * Who may act on this session when it is not the signed-in person's (the server's own
     * words), or null when they may: its owner and the admins steer, interrupt, send and fork;
     * an environment's approvers may also answer its requests (from the inbox: they cannot read
     * the turn). Unknown owner (no board row): null, and the server judges.
     * @param {'act' | 'answer'} what
     */
    function whoMay(what) {
      const me = /** @type {Me} */ (state.me);
      const s = v.session;
      if (!s || !s.person || me.role === 'admin' || s.person === me.person) return null;
      const env = s.sandbox ? s.sandbox.environment : '';
      if (what === 'answer') return `only ${s.person} (the owner), an approver named by environment ${env || 'of its sandbox'} or an admin may answer its requests`;
      return `only ${s.person} (the owner) or an admin may steer, interrupt, send to or fork this session`;
    }

    /** Greys out (with who may) the controls this person may not use; the server judges anyway. */
    function applyLocks() {
      const act = whoMay('act');
      for (const el of [sendBtn, interruptBtn, message]) lock(el, act);
      for (const el of main.querySelectorAll('.fork-step, .fork-go')) lock(/** @type {HTMLElement} */ (el), act);
      const ans = whoMay('answer');
      for (const el of approvals.querySelectorAll('.approve, .deny')) lock(/** @type {HTMLElement} */ (el), ans);
      lockedNote.hidden = !act;
      lockedNote.textContent = act ? `You may read this session: ${act}.` : '';
    }

    /** Links to the session's turns after this one (a handed-back message or a next prompt). */
    function laterTurns() {
      const later = ((v.session && v.session.turns) || []).filter((x) => x.index > v.turn.index);
      if (!later.length) return null;
      return h('p', { class: 'notice', id: 'later-turns' }, 'This session went on: ', later.map((x, i) => [i ? ', ' : '', h('a', { href: `/ui/turns/${encodeURIComponent(x.id)}`, 'data-nav': true }, `turn #${x.index + 1}`), ` (${x.state})`]));
    }

    function renderHead() {
      const t = v.turn;
      const s = v.session;
      const sb = s && s.sandbox;
      fill(head, 
        h('div', { class: 'row spread' }, h('h1', {}, `Turn #${t.index + 1}`), h('span', { class: 'badges', id: 'turn-state', dataset: { state: t.state, status: t.status ?? '' } }, stateBadge(t), s ? badge(s.harness, 'plain') : null, s ? badge(`policy ${s.policy}`, 'plain') : null)),
        h('p', { class: 'prompt-text' }, t.prompt),
        s && s.fork && t.index === 0 ? forkedFrom(s.fork) : null,
        laterTurns(),
        t.state === 'refused' ? h('p', { class: 'notice bad' }, 'Refused: ', t.reason || 'no reason given') : null,
        t.state === 'ended' ? h('p', { class: 'muted small' }, endedInWords(t.status, t.reason)) : null,
        t.state === 'ended' && t.phase_detail ? h('p', { class: `notice ${t.phase === 'interrupted' || t.phase === 'succeeded' ? 'warn' : 'bad'}`, id: 'phase-detail' }, t.phase_detail) : null,
        h(
          'dl',
          { class: 'meta' },
          h('dt', {}, 'person'),
          h('dd', {}, (s && s.person) || '–'),
          h('dt', {}, 'sandbox'),
          h('dd', {}, sb ? `${sb.kind} · ${sb.workdir}` : (s && s.sandbox_id) || '–'),
          h('dt', {}, 'tokens'),
          h('dd', { id: 'turn-tokens' }, tokens(t.usage)),
          h('dt', {}, 'cost'),
          h('dd', {}, cost(t.cost_usd)),
          h('dt', {}, 'started'),
          h('dd', {}, when(t.started_at || t.created_at)),
          t.ended_at ? [h('dt', {}, 'ended'), h('dd', {}, when(t.ended_at))] : null,
          t.verify_state ? [h('dt', {}, 'check'), h('dd', {}, t.verify_state)] : null,
          h('dt', {}, 'session'),
          h('dd', { class: 'mono' }, t.session_id),
          h('dt', {}, 'run'),
          h('dd', { class: 'mono' }, t.run_id || '–'),
        ),
      );
      const live = running();
      interruptBtn.hidden = !live;
      sendBtn.textContent = live ? 'Steer' : 'Send as the next prompt';
      message.placeholder = live ? 'A steer for the agent…' : 'The next prompt of this session…';
      applyLocks();
    }

    async function loadTurn() {
      /** @type {Turn} */
      const t = await api('GET', `/v1/turns/${encodeURIComponent(turnId)}`);
      if (!ctx.alive) return;
      v.turn = t;
      if (!v.session || t.state !== 'running') {
        try {
          /** @type {Board} */
          const b = await api('GET', `/v1/board?session=${encodeURIComponent(t.session_id)}`);
          v.session = b.sessions[0] || null;
        } catch (_) {
          v.session = null;
        }
      }
      if (ctx.alive) renderHead();
    }

    let turnReload = null;
    const reloadTurnSoon = () => {
      if (turnReload) return;
      turnReload = setTimeout(async () => {
        turnReload = null;
        try {
          await loadTurn();
        } catch (_) {
          /* shown by the next poll */
        }
      }, 150);
    };

    // --- approvals waiting for a person ---

    async function loadApprovals() {
      if (!v.turn || !v.turn.run_id) return;
      let pending;
      try {
        pending = /** @type {Approvals} */ (await api('GET', `/v1/runs/${encodeURIComponent(v.turn.run_id)}/approvals`)).approvals;
      } catch (_) {
        return;
      }
      if (!ctx.alive) return;
      const ids = new Set(pending.map((a) => a.request_id));
      for (const card of approvals.querySelectorAll('.approval')) {
        if (!ids.has(card.dataset.requestId) && card.dataset.answered !== 'yes') card.remove();
      }
      for (const a of pending) {
        if (!v.pendingIds.has(a.request_id)) {
          v.pendingIds.add(a.request_id);
          approvals.append(approvalCard(a));
        }
      }
      applyLocks();
    }

    /** @param {Approval} a */
    function approvalCard(a) {
      const canEdit = !v.session || v.session.harness === 'claude';
      const reason = h('input', { class: 'reason', placeholder: 'Reason (the agent sees it when you deny)' });
      const edit = canEdit ? h('textarea', { class: 'edit-input', rows: 4 }, pretty(a.input)) : null;
      const allow = h('button', { type: 'button', class: 'primary approve' }, 'Approve');
      const deny = h('button', { type: 'button', class: 'danger deny' }, 'Deny');
      const out = h('p', { class: 'answer' });
      const title = h('h3', {}, 'Waiting for you: ', h('span', { class: 'tool-name' }, a.tool_name));
      const card = h(
        'article',
        { class: 'card approval', dataset: { requestId: a.request_id } },
        title,
        toolInput(a.tool_name, a.input),
        h(
          'div',
          { class: 'controls' },
          canEdit ? h('details', { class: 'edit' }, h('summary', {}, 'Edit the input before approving'), edit) : h('p', { class: 'muted small' }, 'This harness does not take a changed input.'),
          reason,
          h('div', { class: 'row' }, allow, deny),
        ),
        out,
      );
      /** @param {import('./api').Decision} decision */
      const answerIt = async (decision) => {
        /** @type {Answer} */
        const body = { decision };
        if (reason.value.trim()) body.reason = reason.value.trim();
        if (decision === 'allow' && edit && edit.value.trim() !== pretty(a.input).trim()) {
          try {
            body.input = JSON.parse(edit.value);
          } catch (e) {
            showAnswer(out, { outcome: 'error', text: 'The edited input is not JSON: ' + e.message });
            return;
          }
        }
        const ok = await act(out, [allow, deny], decision === 'allow' ? 'approve' : 'deny', () => api('POST', `/v1/runs/${encodeURIComponent(v.turn.run_id)}/approvals/${encodeURIComponent(a.request_id)}`, body));
        if (ok) {
          card.dataset.answered = 'yes';
          card.classList.add('answered');
          fill(title, decision === 'allow' ? 'Approved: ' : 'Denied: ', h('span', { class: 'tool-name' }, a.tool_name));
          for (const el of card.querySelectorAll('.controls')) el.remove();
          if (body.input) out.after(h('p', { class: 'muted small' }, 'It runs with your input:'), h('pre', { class: 'json' }, pretty(body.input)));
        }
      };
      allow.addEventListener('click', () => answerIt('allow'));
      deny.addEventListener('click', () => answerIt('deny'));
      return card;
    }

    // --- the event feed ---

    function row(id, kind, cls, ...children) {
      return h('li', { class: `ev ${cls || ''}`.trim(), dataset: { eventId: id, kind } }, ...children);
    }

    function label(text) {
      return h('span', { class: 'label' }, text);
    }

    /** When a person acted (the event's stored time, ms), as ` · 14:03:07`. */
    function when(at) {
      if (typeof at !== 'number') return null;
      const d = new Date(at);
      return h('time', { class: 'small muted', datetime: d.toISOString(), title: d.toLocaleString() }, ` · ${d.toLocaleTimeString()}`);
    }

    /** "not trusted", with its reason in a line and a link to what the uid split is (issue 21). */
    function untrustedBadge() {
      const b = badge('not trusted', 'warn');
      b.title = UNTRUSTED_WHY;
      return h('span', { class: 'untrusted' }, b, ' ', h('a', { href: '/ui/help#trust', 'data-nav': true, class: 'small', title: UNTRUSTED_WHY }, 'why?'));
    }

    function unverified() {
      return h('span', { class: 'label unverified', title: 'The run log could have been written by the agent itself (no uid split, or no driver to seal it): this text is not known to be the model\'s.' }, 'unverified');
    }

    function onEvent(id, kind, p) {
      const k = p.kind || kind;
      let el = null;
      switch (k) {
        case 'started':
          el = row(id, k, 'sys', label('started'), `${p.harness} under ${p.policy}${p.uid_split ? ', its own uid' : ''}`);
          break;
        case 'session':
          el = row(id, k, 'sys', label('conversation'), h('code', {}, p.harness_session_id));
          break;
        case 'user_message':
          el = row(id, k, 'user', label('message'), h('p', { class: 'text' }, p.text));
          break;
        case 'text_delta': {
          // Text as the model writes it (issue 21): pieces appended to one row; the whole
          // message (its `assistant_text`) then takes the row's place. Each piece keeps its
          // event id in the page, so a reload or a late viewer shows the same.
          const cur = v.stream;
          if (cur && cur.thinking === !!p.thinking) {
            cur.text.append(h('span', { dataset: { eventId: id } }, p.text));
            if (cur.el.getBoundingClientRect().bottom > window.innerHeight - 40 && tab === 'live') window.scrollTo(0, document.body.scrollHeight);
            return;
          }
          const text = h('p', { class: 'text' }, p.text);
          el = row(id, k, p.thinking ? 'thinking' : 'assistant streaming', label(p.thinking ? 'thinking' : 'agent · writing…'), p.unverified ? unverified() : null, text);
          v.stream = { thinking: !!p.thinking, text, el };
          break;
        }
        case 'assistant_text':
          if (v.stream && !v.stream.thinking) {
            v.stream.el.hidden = true;
            v.stream.el.classList.add('streamed');
          }
          v.stream = null;
          // A log the agent could have written: not known to be the model's words.
          el = row(id, k, 'assistant', label('agent'), p.unverified ? unverified() : null, h('p', { class: 'text' }, p.text));
          break;
        case 'tool_call': {
          v.stream = null;
          const result = h('div', { class: 'result pending' }, 'running…');
          el = row(id, k, 'tool', h('div', { class: 'row spread' }, h('span', {}, label('tool'), h('strong', { class: 'tool-name' }, p.name)), h('code', { class: 'small muted' }, p.tool_use_id)), toolInput(p.name, p.input), result);
          el.dataset.toolUseId = p.tool_use_id;
          v.tools.set(p.tool_use_id, { name: p.name, input: p.input, result, el });
          renderTimeline();
          break;
        }
        case 'tool_result': {
          const t = v.tools.get(p.tool_use_id);
          const body = h('div', { class: `result ${p.is_error ? 'bad' : 'ok'}`, dataset: { eventId: id, kind: k } }, h('span', { class: 'label' }, p.is_error ? 'error' : 'result'), longText(p.output));
          if (t) {
            t.result.replaceWith(body);
            t.result = body;
            renderTimeline();
            return;
          }
          el = row(id, k, 'tool', label('result'), h('code', { class: 'small' }, p.tool_use_id), body);
          delete body.dataset.eventId;
          break;
        }
        case 'approval_requested':
          el = row(id, k, 'ask', label('asks'), `may it run ${p.tool_name}?`, p.tool_use_id ? h('code', { class: 'small muted' }, ' ' + p.tool_use_id) : null);
          loadApprovals();
          // The turn is `waiting` now: its badge says so, and so does the tool's card.
          reloadTurnSoon();
          if (p.tool_use_id) {
            v.asks.set(p.request_id, p.tool_use_id);
            const t = v.tools.get(p.tool_use_id);
            if (t && t.result.classList.contains('pending')) {
              t.result.textContent = 'waiting for approval…';
              t.result.classList.add('asking');
            }
          }
          break;
        case 'approval_answered':
          // Who answered, when, and the words they gave with it or the input they changed
          // (issue 21: people's words are kept).
          el = row(id, k, p.decision === 'allow' ? 'ok' : 'bad', label('answered'), `${{ allow: 'allowed', deny: 'denied', cancelled: 'cancelled' }[p.decision] || p.decision} by ${p.person || (p.by === 'command' ? 'a person' : p.by === 'policy' ? 'the policy' : p.by)}${p.seq !== undefined ? ' (command #' + p.seq + ')' : ''}`, when(p.at), p.note ? h('q', { class: 'note' }, p.note) : null, p.updated_input ? h('div', { class: 'edited' }, h('span', { class: 'label' }, 'with the input changed to'), ' ', h('code', { class: 'small' }, short(JSON.stringify(p.updated_input), 400))) : null);
          loadApprovals();
          reloadTurnSoon();
          {
            const t = v.tools.get(v.asks.get(p.request_id));
            if (t && t.result.classList.contains('pending')) {
              t.result.textContent = p.decision === 'allow' ? 'running…' : p.decision === 'deny' ? 'denied' : 'cancelled';
              t.result.classList.remove('asking');
            }
          }
          break;
        case 'rules_denied':
          el = row(id, k, 'bad', label('blocked'), `the rules (${p.rule}) denied ${p.tool_name}: ${p.reason}`);
          break;
        case 'command_acked':
          v.kinds.set(p.seq, p.command);
          // A steer's or prompt's words, with who sent them (issue 21).
          el = row(id, k, p.text ? 'user' : 'sys', label(p.command), `#${p.seq}: ${p.outcome}${p.person ? ' · from ' + p.person : ''}`, p.person ? when(p.at) : null, ' ', p.text ? h('q', { class: 'note' }, p.text) : null);
          break;
        case 'interrupted':
          // What the interrupt stopped and what still runs (issue 21), in the CLI's words.
          el = row(id, k, 'warn', label('interrupted'), interruptInWords(p, (n) => v.kinds.get(n)), when(p.at));
          break;
        case 'command_refused':
          el = row(id, k, 'bad', label('refused'), `${p.command ? p.command + (p.seq !== undefined && p.seq !== null ? ' #' + p.seq : '') : 'a command it could not read'}: ${p.reason} (${p.code})`);
          break;
        case 'tree':
          v.trees.push({ id, ...p });
          el = row(id, k, 'sys', label('tree'), h('code', {}, short(p.tree, 13)), ` ${p.phase ? 'at the ' + p.phase : 'after ' + ((v.tools.get(p.tool_use_id) || {}).name || p.tool_use_id)}`, p.trusted ? '' : [' · ', untrustedBadge()]);
          renderTimeline();
          break;
        case 'verify':
          el = row(id, k, p.outcome === 'passed' ? 'ok' : 'warn', label(`check round ${p.round}`), `${p.outcome}${p.exit_code !== undefined ? ' (exit ' + p.exit_code + ')' : ''}`, p.output_tail ? longText(p.output_tail) : null);
          break;
        case 'usage':
          el = row(id, k, 'sys', label('usage'), tokens(p) + (p.cost_usd !== undefined ? ' · ' + cost(p.cost_usd) : ''));
          reloadTurnSoon();
          break;
        case 'result':
          el = row(id, k, p.status === 'interrupted' ? 'warn' : p.is_error ? 'bad' : 'ok', label(`result · ${p.status}`), p.unverified && p.text ? unverified() : null, p.text ? h('p', { class: 'text' }, p.text) : null);
          break;
        case 'error':
          el = row(id, k, 'bad', label('error'), p.message);
          break;
        case 'warning':
          el = row(id, k, 'warn', label('warning'), p.message);
          break;
        case 'turn_end': {
          v.ended = true;
          if (streamState.dataset.state === 'live') {
            streamState.textContent = 'live stream · turn over';
            streamState.dataset.ended = 'yes';
          }
          el = row(id, k, p.status === 0 ? 'ok' : p.status === 130 ? 'warn' : 'bad', label('turn ended'), endedInWords(p.status, p.reason).replace(/^Ended with /, '').replace(/\.$/, ''), p.verify ? ` · check ${p.verify}` : '', p.handed_back && p.handed_back.length ? ` · not delivered, handed to the next turn: ${p.handed_back.map((/** @type {number} */ n) => `${v.kinds.get(n) || 'message'} #${n}`).join(', ')}` : '');
          reloadTurnSoon();
          renderTimeline();
          for (const t of v.tools.values()) if (t.result.classList.contains('pending')) t.result.textContent = 'no result';
          break;
        }
        default:
          el = row(id, k, 'sys', label(k), h('code', { class: 'small' }, short(JSON.stringify(p), 200)));
      }
      const stick = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
      feed.append(el);
      if (stick && tab === 'live') window.scrollTo(0, document.body.scrollHeight);
    }

    // --- timeline, manifest, audit ---

    /**
     * The turn's steps: its start, each tool call, its end; each with the tree the driver wrote
     * for it. The driver writes a tree after a tool only when the tree changed, so a tool step
     * without one left the work tree as it was.
     */
    function renderTimeline() {
      const byTool = new Map();
      let start = null;
      let end = null;
      for (const t of v.trees) {
        if (t.phase === 'start') start = t;
        else if (t.phase === 'end') end = t;
        else if (t.tool_use_id) byTool.set(t.tool_use_id, t);
      }
      const steps = [{ what: 'turn start', tree: start }];
      for (const [id, tool] of v.tools) steps.push({ what: toolSummary(tool.name, tool.input), tree: byTool.get(id), tool: id });
      for (const [id, t] of byTool) if (!v.tools.has(id)) steps.push({ what: `tool ${id}`, tree: t, tool: id });
      if (end || v.ended) steps.push({ what: 'turn end', tree: end });
      const hashed = v.trees.length > 0;
      let prev = null;
      fill(
        timeline,
        steps.map((st, i) => {
          const t = st.tree;
          let badges;
          let treeLine;
          if (t) {
            const changed = prev !== null && prev !== t.tree;
            badges = [t.trusted ? badge('trusted', 'ok') : untrustedBadge(), t.skipped ? badge('skipped: ' + pretty(t.skipped), 'warn') : null, changed ? badge('changed', 'live') : prev !== null ? badge('unchanged', 'plain') : null];
            treeLine = [h('code', { class: 'tree-id', title: 'tree id' }, t.tree), h('span', { class: 'muted small' }, ` · hashed in ${t.ms} ms`)];
            prev = t.tree;
          } else if (st.tool && hashed) {
            badges = [badge('unchanged', 'plain')];
            treeLine = h('span', { class: 'muted small' }, prev ? `the work tree did not change: ${short(prev, 13)}` : 'no tree line: the work tree did not change');
          } else {
            badges = [];
            treeLine = h('span', { class: 'muted small' }, hashed || st.tool ? 'no tree recorded for this step' : 'no tree recorded (this run wrote no tree lines)');
          }
          const n = t ? v.trees.indexOf(t) : -1;
          const tools = t ? stepTools(n) : null;
          return h(
            'li',
            { class: 'step', dataset: t ? { tree: t.tree, event: t.id, step: n } : { tool: st.tool || '' } },
            h('span', { class: 'step-n', title: t ? `step ${n}` : 'no step of its own' }, t ? String(n) : '·'),
            h('div', { class: 'step-body' }, h('div', { class: 'row spread' }, h('strong', {}, st.what), h('span', { class: 'badges' }, badges)), h('div', {}, treeLine), tools),
          );
        }),
      );
      if (v.turn) applyLocks();
    }

    /** A step's controls: tick it to compare, or fork from it. */
    function stepTools(n) {
      const pick = h('input', { type: 'checkbox', class: 'pick-step', 'aria-label': `compare step ${n}`, checked: v.picked.includes(n) });
      pick.addEventListener('change', () => {
        v.picked = v.picked.filter((x) => x !== n);
        if (pick.checked) v.picked.push(n);
        while (v.picked.length > 2) v.picked.shift();
        for (const box of timeline.querySelectorAll('.step[data-step] .pick-step')) box.checked = v.picked.includes(Number(box.closest('.step').dataset.step));
        if (v.picked.length === 2) loadDiff(Math.min(...v.picked), Math.max(...v.picked));
      });
      const forkBtn = h('button', { type: 'button', class: 'fork-step' }, 'Fork from here');
      forkBtn.addEventListener('click', () => {
        const f = forkForm(n);
        f.hidden = !f.hidden;
        if (!f.hidden) f.querySelector('textarea').focus();
      });
      return h('div', { class: 'step-tools' }, h('div', { class: 'row' }, h('label', { class: 'pick' }, pick, ' compare'), forkBtn), forkForm(n));
    }

    /** The fork form of step `n` (kept across re-renders of the timeline, so typing survives). */
    function forkForm(n) {
      if (v.forkForms.has(n)) return v.forkForms.get(n);
      const prompt = h('textarea', { class: 'fork-prompt', rows: 2, 'aria-label': `first message for the fork of step ${n}`, placeholder: 'First message for the fork (optional: without one, send it later)' });
      const forkGo = h('button', { type: 'button', class: 'primary fork-go' }, `Fork step ${n}`);
      const out = h('div', { class: 'answer fork-answer', 'aria-live': 'polite' });
      const form = h('div', { class: 'fork-form', hidden: true }, h('p', { class: 'muted small' }, `A new sandbox whose work tree is exactly step ${n}’s tree (rebuilt from hangar’s store and checked), and a new session whose conversation is this one’s up to step ${n}.`), prompt, h('div', { class: 'row' }, forkGo), out);
      forkGo.addEventListener('click', async () => {
        /** @type {ForkRequest} */
        const body = { step: n };
        if (prompt.value.trim()) body.prompt = prompt.value.trim();
        forkGo.disabled = true;
        out.dataset.outcome = 'pending';
        out.className = 'answer fork-answer pending';
        fill(out, 'forking…');
        try {
          /** @type {Forked} */
          const r = await api('POST', `/v1/runs/${encodeURIComponent(v.turn.run_id)}/fork`, body);
          out.dataset.outcome = 'done';
          out.className = 'answer fork-answer done';
          const c = r.fork.conversation;
          const link = r.turn
            ? h('a', { href: `/ui/turns/${encodeURIComponent(r.turn.id)}`, 'data-nav': true, class: 'fork-link' }, 'open its first turn')
            : h('a', { href: `/ui/sessions?session=${encodeURIComponent(r.session.id)}`, 'data-nav': true, class: 'fork-link' }, 'open the session');
          fill(
            out,
            h('p', {}, 'forked: session ', h('code', {}, r.session.id), ' in ', h('code', {}, r.sandbox.workdir), ' — ', link),
            h('p', { class: 'small' }, `tree ${short(r.fork.tree, 13)} checked; conversation: ${c.parent ? (c.exact ? 'exactly up to step ' + n : 'not exact') : c.exact ? 'a new one (nothing was said before this step)' : 'a new one (not exact)'}`),
            r.fork.warnings.length ? h('ul', { class: 'warnings small' }, r.fork.warnings.map((w) => h('li', {}, w))) : null,
          );
        } catch (e) {
          const a = describeError(e, 'fork');
          out.dataset.outcome = a.outcome;
          out.className = `answer fork-answer ${a.outcome}`;
          fill(out, a.text);
        } finally {
          forkGo.disabled = forkGo.dataset.locked === 'yes';
        }
      });
      v.forkForms.set(n, form);
      return form;
    }

    /** What changed from step `a` to step `b`: the files with their lines, then git's patch (as text). */
    async function loadDiff(a, b) {
      fill(diffBox, h('p', { class: 'muted small' }, `Loading what changed from step ${a} to step ${b}…`));
      let d;
      try {
        d = /** @type {Diff} */ (await api('GET', `/v1/runs/${encodeURIComponent(v.turn.run_id)}/diff?from=${a}&to=${b}`));
      } catch (e) {
        fill(diffBox, h('p', { class: 'notice bad' }, e.message));
        return;
      }
      if (!ctx.alive || v.picked.length !== 2 || Math.min(...v.picked) !== a || Math.max(...v.picked) !== b) return;
      let added = 0;
      let deleted = 0;
      for (const f of d.files) {
        added += f.added || 0;
        deleted += f.deleted || 0;
      }
      const rows = d.files.map((f) =>
        h(
          'tr',
          { dataset: { path: f.path } },
          h('td', { class: 'path mono' }, f.path),
          f.added === null ? h('td', { class: 'num', colspan: 2 }, 'binary') : [h('td', { class: 'num add' }, `+${f.added}`), h('td', { class: 'num del' }, `−${f.deleted}`)],
        ),
      );
      const limit = 200000;
      const text = d.patch.length > limit ? d.patch.slice(0, limit) : d.patch;
      const kind = (l) => (l.startsWith('+++') || l.startsWith('---') || l.startsWith('diff ') || l.startsWith('index ') ? 'meta' : l.startsWith('@@') ? 'hunk' : l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : '');
      fill(
        diffBox,
        h('div', { class: 'row spread' }, h('h3', { id: 'diff-summary' }, `step ${a} → step ${b}: ${d.files.length} ${d.files.length === 1 ? 'file' : 'files'} changed, +${added} −${deleted}`), h('code', { class: 'small muted' }, `${short(d.from.tree, 10)} → ${short(d.to.tree, 10)}`)),
        d.files.length ? h('div', { class: 'scroll' }, h('table', { class: 'files' }, h('tbody', {}, rows))) : h('p', { class: 'muted' }, 'The two trees are the same.'),
        d.patch ? h('pre', { class: 'patch', id: 'diff-patch' }, text.replace(/\n$/, '').split('\n').map((l) => h('span', { class: kind(l) }, l + '\n'))) : null,
        d.patch.length > limit ? h('p', { class: 'muted small' }, `The patch is cut at ${num(limit)} characters: see it whole with hangar diff RUN --from ${a} --to ${b} --patch.`) : null,
      );
    }

    function renderManifest() {
      const t = v.turn;
      if (!t) return;
      // The manifest is the control plane's record, passed on as it is (the API types it as
      // an object): its keys are read as they come.
      const m = /** @type {Record<string, any> | null} */ (t.manifest);
      if (!m) {
        fill(manifestPanel, h('p', { class: 'notice' }, t.state === 'refused' ? `No manifest: the turn was refused (${t.reason || 'no reason given'}).` : 'No manifest yet.'));
        return;
      }
      const known = ['harness', 'harness_version', 'policy_requested', 'policy_effective', 'harness_digest', 'driver_digest', 'hooks', 'argv', 'env_names'];
      const rows = [
        ['harness', `${m.harness || '–'} ${m.harness_version || ''}`],
        ['policy asked', m.policy_requested || '–'],
        ['policy in effect', m.policy_effective || '–'],
        ['harness_digest', h('code', { class: 'digest' }, m.harness_digest || '–')],
        ['driver digest', h('code', { class: 'digest' }, m.driver_digest || '–')],
        ['hooks', m.hooks && m.hooks.length ? h('ul', { class: 'plain' }, m.hooks.map((x) => h('li', {}, x.name, ' ', h('code', { class: 'digest' }, x.digest)))) : 'none'],
        ['argv', h('pre', { class: 'argv' }, (m.argv || []).join('\n'))],
        ['environment (names only)', (m.env_names || []).join(', ') || 'none'],
      ];
      for (const [k, val] of Object.entries(m)) if (!known.includes(k)) rows.push([k, typeof val === 'object' ? h('pre', {}, pretty(val)) : String(val)]);
      fill(manifestPanel, h('dl', { class: 'kv card' }, rows.map(([k, val]) => [h('dt', {}, k), h('dd', {}, val)])));
    }

    async function loadAudit() {
      const out = h('p', { class: 'answer', id: 'audit-verify' });
      const verifyBtn = h('button', { type: 'button' }, 'Check the audit chain');
      verifyBtn.addEventListener('click', async () => {
        try {
          /** @type {AuditVerify} */
          const r = await api('GET', '/v1/audit/verify');
          showAnswer(out, r.ok ? { outcome: 'done', text: `the chain holds (${r.records} records)` } : { outcome: 'refused', text: 'the chain is broken: ' + r.error });
        } catch (e) {
          showAnswer(out, describeError(e));
        }
      });
      fill(auditPanel, h('p', { class: 'muted' }, 'Loading…'));
      let records;
      try {
        records = /** @type {TurnAudit} */ (await api('GET', `/v1/turns/${encodeURIComponent(turnId)}/audit`)).records;
      } catch (e) {
        fill(auditPanel, h('p', { class: 'notice bad' }, e.message));
        return;
      }
      if (!ctx.alive) return;
      fill(auditPanel, h('div', { class: 'row' }, verifyBtn, out), auditTable(records));
    }

    // --- acting ---

    sendBtn.addEventListener('click', async () => {
      const text = message.value.trim();
      if (!text || !v.turn) return;
      const steering = running() && v.turn.run_id;
      const ok = await act(answer, [sendBtn, interruptBtn], steering ? 'steer' : 'prompt', () =>
        steering
          ? api('POST', `/v1/runs/${encodeURIComponent(v.turn.run_id)}/steer?next_turn=false`, { text })
          : api('POST', `/v1/sessions/${encodeURIComponent(v.turn.session_id)}/messages`, { text }),
      );
      if (ok) message.value = '';
      reloadTurnSoon();
    });
    interruptBtn.addEventListener('click', async () => {
      if (!v.turn || !v.turn.run_id) return;
      await act(answer, [sendBtn, interruptBtn], 'interrupt', () => api('POST', `/v1/runs/${encodeURIComponent(v.turn.run_id)}/interrupt`));
      reloadTurnSoon();
    });
    actions.addEventListener('submit', (ev) => ev.preventDefault());
    message.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
        ev.preventDefault();
        sendBtn.click();
      }
    });

    // --- start ---

    showTab(tab);
    renderTimeline();
    (async () => {
      try {
        await loadTurn();
      } catch (e) {
        fill(head, h('p', { class: 'notice bad', id: 'turn-refused' }, e.message));
        // Nothing to act on what the server would not show: no actions, no stream.
        actions.hidden = true;
        approvals.hidden = true;
        streamState.dataset.state = 'none';
        streamState.textContent = '';
        return;
      }
      if (!ctx.alive) return;
      if (tab === 'manifest') renderManifest();
      if (!v.turn.run_id) {
        streamState.dataset.state = 'none';
        streamState.textContent = 'no run';
        return;
      }
      loadApprovals();
      const stop = followEvents(v.turn.run_id, onEvent, (st, last, why) => {
        streamState.dataset.state = st;
        streamState.dataset.last = String(last);
        // An ended turn's stream is only its history: no green "live" dot on it (issue 21).
        streamState.textContent = st === 'live' ? (v.ended ? 'live stream · turn over' : '● live') : `reconnecting… (${why})`;
        streamState.dataset.ended = v.ended ? 'yes' : 'no';
        if (st === 'live') loadApprovals();
      }, (n) => (streamState.dataset.repeats = String(n)));
      ctx.cleanups.push(stop);
      const poll = setInterval(() => {
        if (running()) reloadTurnSoon();
      }, 4000);
      ctx.cleanups.push(() => clearInterval(poll));
    })();
  }

  // ---------- wiring ----------

  document.addEventListener('click', (ev) => {
    const target = /** @type {Element} */ (ev.target);
    const a = target.closest && target.closest('a[data-nav]');
    if (!a || ev.defaultPrevented || ev.button !== 0 || ev.metaKey || ev.ctrlKey || ev.shiftKey) return;
    ev.preventDefault();
    go(a.getAttribute('href'));
  });
  window.addEventListener('popstate', () => render());
  $('#signout').addEventListener('click', () => signOutAsked());
  render();
})();
