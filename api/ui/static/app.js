// reviewledger browser UI: the manual queue for moderators and the SLO
// dashboard for operators and auditors. It speaks only the public HTTP API
// (docs/contracts.md §2) of the server that serves it.
//
// Rules this file keeps: data reaches the page only through textContent and
// DOM properties (never markup built from data); no inline handlers (the page
// is served with a Content-Security-Policy of default-src 'self'); the token
// lives in sessionStorage and travels only in the Authorization header.
'use strict';

(function () {
  const TOKEN_KEY = 'reviewledger.token';
  // Signed in through the identity provider: requests carry the session
  // cookie (HttpOnly, never readable here) and, when they change
  // anything, the session's CSRF token; state.token is then SESSION.
  const SESSION = '(session)';
  const SESSION_PATH = '/auth/session';
  const LOGOUT_PATH = '/auth/logout';
  const CSRF_HEADER = 'X-CSRF-Token';
  const REFRESH_MS = 5000;
  const STALE_MS = 30000;
  const REQUEST_TIMEOUT_MS = 20000;
  const REVIEW_ID = /^[A-Za-z0-9._:-]{1,128}$/;
  // Submitted text longer than this shows truncated, with "Show all".
  const CONTENT_PREVIEW_BYTES = 64 * 1024;

  // Alert thresholds of the SLO dashboard.
  const RATIO_WARN = 0.99;
  const RATIO_CRIT = 0.95;
  const QUEUE_AGE_WARN_S = 15 * 60;
  const QUEUE_AGE_CRIT_S = 60 * 60;

  // SLA colours of a queue item with a due time: amber in the last quarter
  // of its SLA, red once it is overdue.
  const SLA_WARN_SHARE = 0.25;

  // Live updates (GET /v1/manual-queue/events, server-sent events read with
  // fetch so the bearer token travels in the Authorization header, which
  // EventSource cannot send). While the stream is down the queue is polled
  // every REFRESH_MS and the stream retried with a growing delay.
  const STREAM_PATH = '/v1/manual-queue/events';
  const STREAM_RETRY_MIN_MS = 1000;
  const STREAM_RETRY_MAX_MS = 30000;
  // A stream that sends nothing (not even its heartbeat) for this long is
  // taken as broken.
  const STREAM_IDLE_MS = 45000;
  // While live the queue is still read now and then, to catch up with
  // what no change announces (claims running out).
  const LIVE_REFRESH_MS = 60000;
  // How long a review the stream said left the queue is kept out of a
  // queue read that may not have caught up yet.
  const GONE_MS = 5000;
  // Bulk requeue sends pages of at most this many reviews.
  const BULK_PAGE = 100;

  const $ = (id) => document.getElementById(id);

  // What each part of the page needs (docs/contracts.md §2 roles; admin may do
  // everything). Every role may open a review by its ID.
  const ROLE_CAN = {
    queue: ['moderator', 'admin'],             // the manual queue, claims, decisions
    why: ['moderator', 'auditor', 'admin'],    // a review's attempts, requeues and votes
    timeline: ['auditor', 'admin'],            // a review's event history
    content: ['moderator', 'admin'],           // the content submitted for review
    slo: ['auditor', 'moderator', 'admin'],    // the SLO dashboard
  };

  const state = {
    token: '',
    csrf: '',
    display: '', // a provider user's display name (state.me is the ledger's name)
    me: '',
    role: '',           // from GET /v1/me; '' when the server did not say
    abort: new AbortController(),
    view: '',
    reviewID: '',
    queue: { items: [], fetchedAt: 0, lastOK: 0, loading: false, seq: 0 },
    queueRows: new Map(),
    review: null,       // the review view last read
    reviewSeq: 0,
    contentURL: '',     // object URL of the content offered for download
    slo: { data: null, fetchedAt: 0, lastOK: 0, loading: false, seq: 0 },
    history: { series: null, attempts: null, seq: 0 },
    providers: { report: null, series: null, seq: 0 },
    classes: new Set(),
    cursor: '',         // the queue row the keyboard is on
    selected: new Set(),
    rejecting: false,   // "r" was pressed: Ctrl+Enter in the note rejects
    gone: new Map(),    // review ID -> when the stream said it left the queue
    added: new Map(),   // review ID -> { item, at }: what the stream added lately
    live: { mode: 'off', ctrl: null, retryMS: STREAM_RETRY_MIN_MS, retryAt: 0, timer: 0, lastID: '', reason: '', lastRead: 0, syncTimer: 0, events: 0 },
    dialog: null,       // the action the confirmation dialog is for
  };

  // ---- formatting -------------------------------------------------------

  function plural(n, word) { return n + ' ' + word + (n === 1 ? '' : 's'); }

  // duration renders seconds as a short human-readable age: 42 s, 3 min 12 s,
  // 2 h 5 min, 3 d 4 h.
  function duration(seconds) {
    if (typeof seconds !== 'number' || !isFinite(seconds)) return '—';
    let s = Math.max(0, Math.floor(seconds));
    if (s < 60) return s + ' s';
    let m = Math.floor(s / 60); s %= 60;
    if (m < 60) return m + ' min' + (s ? ' ' + s + ' s' : '');
    let h = Math.floor(m / 60); m %= 60;
    if (h < 24) return h + ' h' + (m ? ' ' + m + ' min' : '');
    const d = Math.floor(h / 24); h %= 24;
    return d + ' d' + (h ? ' ' + h + ' h' : '');
  }

  // shortAge renders seconds in one unit, for chart axes: 45 s, 3.5 min, 2.0 h.
  function shortAge(seconds) {
    if (typeof seconds !== 'number' || !isFinite(seconds)) return '—';
    const s = Math.max(0, seconds);
    if (s < 60) return Math.round(s) + ' s';
    if (s < 3600) return (s / 60).toFixed(s < 600 ? 1 : 0) + ' min';
    return (s / 3600).toFixed(s < 36000 ? 1 : 0) + ' h';
  }

  function millis(ms) {
    if (typeof ms !== 'number' || !isFinite(ms)) return '—';
    if (ms < 1000) return Math.round(ms) + ' ms';
    if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
    return duration(ms / 1000);
  }

  function count(n) {
    if (typeof n !== 'number' || !isFinite(n)) return '—';
    return n.toLocaleString('en-US');
  }

  function percent(r, digits) {
    if (typeof r !== 'number' || !isFinite(r)) return '—';
    return (r * 100).toFixed(digits === undefined ? 1 : digits) + '%';
  }

  function parseTime(iso) {
    if (!iso) return null;
    const t = Date.parse(iso);
    return isNaN(t) ? null : new Date(t);
  }

  function pad(n) { return String(n).padStart(2, '0'); }

  // timestamp renders an instant in UTC, the zone the ledger records.
  function timestamp(iso) {
    const d = parseTime(iso);
    if (!d) return '—';
    return d.getUTCFullYear() + '-' + pad(d.getUTCMonth() + 1) + '-' + pad(d.getUTCDate()) + ' ' +
      pad(d.getUTCHours()) + ':' + pad(d.getUTCMinutes()) + ':' + pad(d.getUTCSeconds()) + ' UTC';
  }

  function clock(iso) {
    const d = parseTime(iso);
    if (!d) return '—';
    return pad(d.getUTCHours()) + ':' + pad(d.getUTCMinutes()) + ':' + pad(d.getUTCSeconds()) + ' UTC';
  }

  function relative(iso) {
    const d = parseTime(iso);
    if (!d) return '';
    const s = (d.getTime() - Date.now()) / 1000;
    return s >= 0 ? 'in ' + duration(s) : duration(-s) + ' ago';
  }

  function words(code) { return String(code == null ? '' : code).replace(/_/g, ' '); }

  // ---- DOM helpers ------------------------------------------------------

  // el builds an element; text children become text nodes, never markup.
  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else if (k === 'dataset') Object.assign(e.dataset, v);
        else e.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function show(node, visible) { node.hidden = !visible; }

  function setText(id, text) { $(id).textContent = text; }

  function clear(node) { node.replaceChildren(); }

  // ---- errors -----------------------------------------------------------

  class SignedOut extends Error {}

  // problemOf normalises an error answer: RFC 9457 fields when the server
  // sent problem+json, something readable otherwise.
  function problemOf(res, body, text) {
    const p = (body && typeof body === 'object') ? body : {};
    return {
      status: typeof p.status === 'number' ? p.status : res.status,
      type: p.type || '',
      title: p.title || res.statusText || ('HTTP ' + res.status),
      detail: p.detail || (body ? '' : String(text || '').slice(0, 300)),
      field: p.field || '',
      requestID: p.request_id || res.headers.get('X-Request-Id') || '',
      claimedBy: typeof p.claimed_by === 'string' ? p.claimed_by : '',
    };
  }

  // renderProblem fills a problem box: an optional lead sentence, the
  // problem's title and detail, then the field, status and request ID.
  function renderProblem(box, problem, lead, extra) {
    clear(box);
    box.classList.remove('info');
    if (lead) box.append(el('p', { class: 'lead', text: lead }));
    const title = problem.title || 'Request failed';
    if (!lead || title !== lead) box.append(el('p', { class: 'title', text: title }));
    if (problem.detail) box.append(el('p', { class: 'detail', text: problem.detail }));
    const meta = el('p', { class: 'meta' });
    if (problem.field) meta.append(el('span', null, 'Field: ', el('code', { text: problem.field })));
    if (problem.status) meta.append(el('span', { text: problem.status ? 'HTTP ' + problem.status : '' }));
    if (problem.requestID) meta.append(el('span', null, 'Request ID: ', el('code', { class: 'request-id', text: problem.requestID })));
    if (meta.childNodes.length) box.append(meta);
    if (extra) box.append(extra);
    show(box, true);
  }

  // problemKind is the last segment of a problem type URI, such as
  // "version-moved" in urn:reviewledger:problem:version-moved.
  function problemKind(problem) {
    const m = /[^:/]+$/.exec(String((problem && problem.type) || ''));
    return m ? m[0] : '';
  }

  function forbiddenLead(what) { return 'Your role cannot do this' + (what ? ': ' + what : '') + '.'; }

  // ---- API --------------------------------------------------------------

  // api calls the HTTP API with the bearer token. It resolves to
  // {ok, status, data} or {ok:false, status, problem}; a 401 signs the user
  // out and rejects with SignedOut.
  async function api(method, path, body) {
    const sent = await request(method, path, body, 'application/json, application/problem+json');
    if (!sent.res) return sent;
    const res = sent.res;
    const text = await res.text().catch(() => '');
    let data = null;
    if (text && /json/i.test(res.headers.get('Content-Type') || '')) {
      try { data = JSON.parse(text); } catch (_) { data = null; }
    }
    if (res.status === 401) {
      const p = problemOf(res, data, text);
      signOut(refusedMessage(p), p);
      throw new SignedOut();
    }
    if (res.ok) return { ok: true, status: res.status, data };
    return { ok: false, status: res.status, problem: problemOf(res, data, text) };
  }

  // apiBytes reads a route that answers with bytes rather than JSON (the
  // submitted content). It resolves to {ok, status, headers, bytes} or
  // {ok:false, status, problem}; a 401 signs the user out as api does.
  async function apiBytes(path) {
    const sent = await request('GET', path, undefined, '*/*');
    if (!sent.res) return sent;
    const res = sent.res;
    if (!res.ok) {
      const text = await res.text().catch(() => '');
      let data = null;
      if (text && /json/i.test(res.headers.get('Content-Type') || '')) {
        try { data = JSON.parse(text); } catch (_) { data = null; }
      }
      const p = problemOf(res, data, text);
      if (res.status === 401) {
        signOut(refusedMessage(p), p);
        throw new SignedOut();
      }
      return { ok: false, status: res.status, problem: p };
    }
    let bytes;
    try {
      bytes = await res.arrayBuffer();
    } catch (err) {
      if (err && err.name === 'AbortError') throw new SignedOut();
      return { ok: false, status: 0, problem: { status: 0, title: 'The content could not be read', detail: String((err && err.message) || err), field: '', requestID: res.headers.get('X-Request-Id') || '' } };
    }
    return { ok: true, status: res.status, headers: res.headers, bytes };
  }

  // authHeaders adds the credentials of the sign-in: the bearer token, or
  // for a session the CSRF token (the cookie goes by itself).
  function authHeaders(headers) {
    if (state.token === SESSION) headers[CSRF_HEADER] = state.csrf;
    else headers['Authorization'] = 'Bearer ' + state.token;
    return headers;
  }

  // credentials sends the session cookie only for a session.
  function credentials() { return state.token === SESSION ? 'same-origin' : 'omit'; }

  // refusedMessage explains a 401.
  function refusedMessage(p) {
    if (state.token === SESSION) return 'Your session has ended. Sign in again.';
    return 'The server did not accept the token' + (p && p.detail ? ': ' + p.detail : '.') + ' Sign in again.';
  }

  // request sends one request with the bearer token (never in the URL). It
  // resolves to {res}, or to {ok:false, status:0, problem} when the server
  // could not be reached or did not answer in time.
  async function request(method, path, body, accept) {
    const headers = authHeaders({ 'Accept': accept });
    // A request is abandoned after REQUEST_TIMEOUT_MS, so a hung connection
    // cannot stall the periodic refresh.
    const signal = (AbortSignal.any && AbortSignal.timeout)
      ? AbortSignal.any([state.abort.signal, AbortSignal.timeout(REQUEST_TIMEOUT_MS)])
      : state.abort.signal;
    const init = { method, headers, cache: 'no-store', credentials: credentials(), redirect: 'error', signal };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    try {
      return { res: await fetch(path, init) };
    } catch (err) {
      if (err && err.name === 'AbortError') throw new SignedOut();
      const title = err && err.name === 'TimeoutError'
        ? 'The server did not answer within ' + duration(REQUEST_TIMEOUT_MS / 1000)
        : 'The server could not be reached';
      return { ok: false, status: 0, problem: { status: 0, title, detail: String((err && err.message) || err), field: '', requestID: '' } };
    }
  }

  // bg lets an async action run in the background; a sign-out that ends it
  // has already been handled.
  function bg(promise) {
    promise.catch((err) => {
      if (!(err instanceof SignedOut)) console.error(err);
    });
  }

  // guard runs an async UI action and swallows the rejection of a sign-out,
  // which has already been handled.
  // It calls fn synchronously, so fn may still call preventDefault.
  function guard(fn) {
    return function (...args) {
      let result;
      try {
        result = fn.apply(this, args);
      } catch (err) {
        if (!(err instanceof SignedOut)) console.error(err);
        return;
      }
      if (result && typeof result.then === 'function') bg(result);
    };
  }

  // ---- session ----------------------------------------------------------

  // showSignIn shows the sign-in form with message. keepTyped leaves a
  // token typed into the form as it is (the form shows from the start, so
  // a person may be typing while the session probe is under way).
  function showSignIn(message, problem, keepTyped) {
    state.view = 'signin';
    show($('signin-view'), true);
    show($('queue-view'), false);
    show($('slo-view'), false);
    show($('nav'), false);
    show($('session'), false);
    show($('lookup'), false);
    const box = $('signin-error');
    if (message) {
      renderProblem(box, problem || { title: '' }, message);
      box.classList.toggle('info', !problem);
    } else {
      show(box, false);
    }
    if (keepTyped && $('token').value) return;
    $('token').value = '';
    if ($('oidc-signin').hidden) $('token').focus();
    else $('oidc-signin-link').focus();
  }

  function signOut(message, problem) {
    state.abort.abort();
    state.abort = new AbortController();
    state.token = '';
    state.csrf = '';
    state.display = '';
    state.me = '';
    state.role = '';
    try { sessionStorage.removeItem(TOKEN_KEY); } catch (_) { /* storage unavailable */ }
    resetData();
    showSignIn(message, problem);
  }

  // endSession signs out of a session: the server ends it and names where
  // the browser goes next, the identity provider's sign-out when it offers
  // one (which comes back to this page).
  async function endSession() {
    const csrf = state.csrf;
    signOut('You signed out.');
    let next = '';
    try {
      const res = await fetch(LOGOUT_PATH, { method: 'POST', headers: { 'Accept': 'application/json', [CSRF_HEADER]: csrf }, cache: 'no-store', credentials: 'same-origin', redirect: 'error' });
      const data = await res.json();
      if (data && typeof data.redirect === 'string') next = data.redirect;
    } catch (_) { /* the session ends on the server with its refresh anyway */ }
    if (next && next !== '/' && /^https?:\/\//.test(next)) window.location.assign(next);
  }

  // probeSession asks whether this browser has a session with the
  // identity provider (GET /auth/session): signed in when it has, the
  // provider's sign-in offered when the server has one (401), the token
  // form alone otherwise (404).
  async function probeSession() {
    let res = null;
    let data = null;
    try {
      res = await fetch(SESSION_PATH, { method: 'GET', headers: { 'Accept': 'application/json' }, cache: 'no-store', credentials: 'same-origin', redirect: 'error' });
      data = await res.json().catch(() => null);
    } catch (_) { res = null; }
    const offered = !!res && (res.status === 200 || res.status === 401);
    show($('oidc-signin'), offered);
    if (res && res.status === 200 && data && typeof data.csrf_token === 'string') {
      state.csrf = data.csrf_token;
      await signIn(SESSION);
    } else if (!state.token) {
      // (Signed in from the form while the probe was under way: that
      // stands.)
      showSignIn('', undefined, true);
    }
    $('signin-view').dataset.probed = 'yes'; // the probe's answer is read (tests wait for it)
  }

  function resetData() {
    stopStream();
    state.selected.clear();
    state.cursor = '';
    state.gone.clear();
    state.added.clear();
    state.dialog = null;
    for (const d of ['confirm-dialog', 'help-dialog']) if ($(d).open) $(d).close();
    state.queue = { items: [], fetchedAt: 0, lastOK: 0, loading: false, seq: state.queue.seq + 1 };
    state.queueRows.clear();
    clear($('queue-body'));
    state.review = null;
    state.reviewID = '';
    state.reviewSeq++;
    resetContent();
    state.slo = { data: null, fetchedAt: 0, lastOK: 0, loading: false, seq: state.slo.seq + 1 };
    state.history = { series: null, attempts: null, seq: state.history.seq + 1 };
    state.providers = { report: null, series: null, seq: state.providers.seq + 1 };
    for (const id of ['queue-error', 'queue-notice', 'queue-empty', 'review-panel', 'slo-error', 'slo-alerts', 'slo-tiles', 'slo-history', 'slo-providers']) show($(id), false);
    setText('queue-count', '');
    setText('queue-updated', '');
    setText('slo-updated', '');
    $('decision-note').value = '';
    $('lookup-id').value = '';
    clear($('timeline-list'));
  }

  // can says whether the signed-in role may use a part of the page. With
  // no role known (a server without GET /v1/me) everything is offered and a
  // 403 is explained where it happens.
  function can(what) { return !state.role || ROLE_CAN[what].includes(state.role); }

  function renderWho() {
    const who = state.display || state.me;
    setText('who', who ? 'Signed in as ' + who + (state.role ? ' (' + state.role + ')' : '') : 'Signed in');
  }

  function setMe(name) {
    if (!name || name === state.me) return;
    state.me = name;
    renderWho();
  }

  // applyRole shows only what the role can use: the queue, claims and
  // decisions to moderators, the event history to auditors, the SLO
  // dashboard to both (and everything to admins).
  function applyRole() {
    show($('nav-queue'), can('queue'));
    show($('nav-slo'), can('slo'));
    show($('queue-panel'), can('queue'));
    $('lookup-hint-slo').hidden = !can('slo');
    renderWho();
  }

  // signIn asks the server who the token is (GET /v1/me), then shows what
  // that role can use. A refused token returns to the sign-in form (api
  // signs out on 401).
  async function signIn(token) {
    state.token = token;
    state.me = '';
    state.display = '';
    state.role = '';
    if (token !== SESSION) {
      try { sessionStorage.setItem(TOKEN_KEY, token); } catch (_) { /* storage unavailable */ }
    }
    const button = $('signin-submit');
    button.disabled = true;
    let r;
    try {
      r = await api('GET', '/v1/me');
    } finally {
      button.disabled = false;
    }
    if (state.token !== token) return;
    if (!r.ok && r.status === 0) {
      const problem = r.problem;
      signOut('Could not sign in: the server could not be reached.', problem);
      return;
    }
    if (!r.ok && r.status === 403 && problemKind(r.problem) === 'no-role') {
      signOut('You signed in, but your account has no role here' + (r.problem.detail ? ': ' + r.problem.detail : '.'), r.problem);
      return;
    }
    if (r.ok && r.data && typeof r.data.name === 'string') {
      state.me = r.data.name; // the name claims carry: the ledger's
      state.display = typeof r.data.display_name === 'string' ? r.data.display_name : '';
      state.role = typeof r.data.role === 'string' ? r.data.role : '';
    }
    show($('signin-view'), false);
    show($('signin-error'), false);
    show($('nav'), true);
    show($('session'), true);
    show($('lookup'), true);
    applyRole();
    route(true, true);
    if (can('queue')) startStream();
  }

  // ---- routing ----------------------------------------------------------

  // Routes: #/queue, #/reviews/<id> (the queue with that review open), #/slo.
  function parseRoute() {
    const h = location.hash.replace(/^#/, '');
    let m = /^\/reviews\/(.+)$/.exec(h);
    if (m) {
      let id = '';
      try { id = decodeURIComponent(m[1]); } catch (_) { id = ''; }
      if (REVIEW_ID.test(id)) return { view: 'queue', review: id };
    }
    if (h === '/slo') return { view: 'slo', review: '' };
    return { view: 'queue', review: '' };
  }

  // route shows the view of the location's hash. landing is true right
  // after sign-in: a role without the queue then starts on the SLO
  // dashboard when it may read it.
  function route(focusMain, landing) {
    if (!state.token) return;
    let r = parseRoute();
    let redirect = '';
    if (r.view === 'slo' && !can('slo')) {
      r = { view: 'queue', review: '' };
      redirect = '#/queue';
    } else if (r.view === 'queue' && !r.review && !can('queue') && landing && can('slo')) {
      r = { view: 'slo', review: '' };
      redirect = '#/slo';
    }
    if (redirect) history.replaceState(null, '', redirect);
    const changedView = r.view !== state.view;
    state.view = r.view;
    show($('queue-view'), r.view === 'queue');
    show($('slo-view'), r.view === 'slo');
    $('nav-queue').toggleAttribute('aria-current', false);
    $('nav-slo').toggleAttribute('aria-current', false);
    (r.view === 'slo' ? $('nav-slo') : $('nav-queue')).setAttribute('aria-current', 'page');
    document.title = (r.view === 'slo' ? 'SLO dashboard' : r.review ? 'Review ' + r.review : 'Manual queue') + ' · reviewledger';
    show($('lookup-hint'), r.view === 'queue' && !r.review && !can('queue'));
    if (r.view === 'queue') {
      if (changedView || focusMain) bg(loadQueue());
      if (r.review !== state.reviewID || focusMain || changedView) bg(openReview(r.review));
      if (!r.review && focusMain) (can('queue') ? $('queue-title') : $('lookup-id')).focus();
    } else {
      state.reviewID = '';
      if (changedView || focusMain) bg(loadSLO());
      if (changedView || focusMain) $('slo-title').focus();
    }
    markSelectedRow();
  }

  // ---- manual queue -----------------------------------------------------

  function queueQuery() {
    const q = new URLSearchParams();
    const cls = $('queue-class').value.trim();
    if (cls) q.set('content_class', cls);
    const reason = $('queue-reason').value;
    if (reason) q.set('reason', reason);
    const order = $('queue-order').value;
    if (order) q.set('order', order);
    // One read brings the queue and the items on hold, listed apart.
    q.set('held', 'any');
    q.set('limit', $('queue-limit').value);
    return q.toString();
  }

  // queueFilter is the filter a bulk action by filter applies: the class and
  // reason chosen above the queue.
  function queueFilter() {
    const f = {};
    const cls = $('queue-class').value.trim();
    if (cls) f.content_class = cls;
    const reason = $('queue-reason').value;
    if (reason) f.reason = reason;
    return f;
  }

  // queueProblem shows a problem in the queue's error box, saying whether
  // a read of the queue (load) or a moderator's action (action) met it.
  function queueProblem(from, ...args) {
    renderProblem($('queue-error'), ...args);
    $('queue-error').dataset.from = from;
  }

  async function loadQueue() {
    if (!state.token || !can('queue')) return;
    const seq = ++state.queue.seq;
    state.queue.loading = true;
    $('queue-panel').setAttribute('aria-busy', 'true');
    try {
      state.queue.lastRead = Date.now();
      const r = await api('GET', '/v1/manual-queue?' + queueQuery());
      if (seq !== state.queue.seq) return;
      const forbidden = !r.ok && r.status === 403;
      show($('queue-filter'), !forbidden);
      show($('queue-table-wrap'), !forbidden);
      if (forbidden) {
        show($('queue-empty'), false);
        setText('queue-count', '');
        const go = el('p', null, 'Open a review by its ID above, or see the ', el('a', { href: '#/slo', text: 'SLO dashboard' }), '.');
        queueProblem('load', r.problem, forbiddenLead('reading the manual queue needs the moderator role'), go);
        $('queue-error').classList.add('info');
        return;
      }
      if (!r.ok) {
        queueProblem('load', r.problem, 'The manual queue could not be loaded.');
        updateQueueFreshness();
        return;
      }
      // A refresh clears its own earlier failure, never an action's
      // refusal the moderator has yet to read.
      if ($('queue-error').dataset.from !== 'action') show($('queue-error'), false);
      const now = Date.now();
      for (const [id, at] of state.gone) if (now - at > GONE_MS) state.gone.delete(id);
      const reason = $('queue-reason').value;
      // A review the stream said has left stays out of a read that has not
      // caught up yet; the reason filter holds even on a server without it.
      const items = ((r.data && Array.isArray(r.data.items)) ? r.data.items : [])
        .filter((i) => i && i.review_id && !state.gone.has(String(i.review_id)) && (!reason || i.reason === reason));
      // Likewise a review the stream just added stays in a read that has
      // not caught up with it yet.
      for (const [id, a] of state.added) {
        if (now - a.at > GONE_MS) { state.added.delete(id); continue; }
        if (!items.some((i) => String(i.review_id) === id) && queueMatches(a.item) && (!reason || a.item.reason === reason)) items.push(a.item);
      }
      // The server's clock at the read: time left against an SLA is
      // due_at less that, less the time since the read.
      const serverNow = parseTime(r.data && r.data.now);
      for (const i of items) { i._at = now; i._now = serverNow ? serverNow.getTime() : null; }
      state.queue.items = items;
      state.queue.fetchedAt = Date.now();
      state.queue.lastOK = Date.now();
      renderQueue();
    } finally {
      if (seq === state.queue.seq) {
        state.queue.loading = false;
        $('queue-panel').removeAttribute('aria-busy');
      }
    }
  }

  function liveAge(item) {
    const base = typeof item.age_seconds === 'number' ? item.age_seconds : null;
    if (base === null) {
      const t = parseTime(item.escalated_at);
      return t ? (Date.now() - t.getTime()) / 1000 : NaN;
    }
    return base + (Date.now() - (item._at || state.queue.fetchedAt)) / 1000;
  }

  function isHeld(item) { return !!(item && item.held === true); }

  // holdOf describes an item's hold: who put it on hold, when, and why.
  function holdOf(item) {
    if (!isHeld(item)) return null;
    return { by: String(item.held_by || ''), at: item.held_at || '', note: String(item.hold_note || '') };
  }

  function holdText(item) {
    const h = holdOf(item);
    if (!h) return 'not on hold';
    return 'On hold' + (h.by ? ' by ' + h.by : '') + (h.at ? ' since ' + clock(h.at) : '') + (h.note ? ': ' + h.note : '');
  }

  // slaOf measures an item's time left against its SLA: due_at less the
  // server's clock at the read (the queue's "now"), less the time since the
  // read, so browser and server clocks need not agree. Without "now" it is
  // the SLA span (due_at less escalated_at) less the item's live age. The
  // span also sets when amber starts. null when the item has no due time.
  function slaOf(item) {
    const due = parseTime(item && item.due_at);
    if (!due) return null;
    const esc = parseTime(item.escalated_at);
    const span = esc ? (due.getTime() - esc.getTime()) / 1000 : NaN;
    let left;
    if (typeof item._now === 'number') left = (due.getTime() - item._now - (Date.now() - item._at)) / 1000;
    else {
      const age = liveAge(item);
      left = isFinite(span) && isFinite(age) ? span - age : (due.getTime() - Date.now()) / 1000;
    }
    let lvl = 'ok';
    if (left <= 0) lvl = 'crit';
    else if (isFinite(span) && span > 0 && left <= span * SLA_WARN_SHARE) lvl = 'warn';
    return { left, span, lvl, due: item.due_at };
  }

  // slaText says the time left in words, so colour is never the only signal.
  function slaText(sla) {
    if (!sla) return 'no SLA';
    if (sla.lvl === 'crit') return 'Overdue by ' + duration(-sla.left);
    if (sla.lvl === 'warn') return 'Due soon: ' + duration(sla.left) + ' left';
    return duration(sla.left) + ' left';
  }

  function paintSLA(node, sla) {
    node.textContent = slaText(sla);
    const lvl = !sla ? 'none' : sla.lvl;
    node.dataset.level = lvl;
    for (const l of ['ok', 'warn', 'crit']) node.classList.toggle('sla-' + l, lvl === l);
    node.title = sla ? 'Due ' + timestamp(sla.due) : '';
  }

  // claimOf describes the live claim of a queue item, or null.
  function claimOf(item) {
    if (!item || !item.claimed_by) return null;
    const exp = parseTime(item.claim_expires_at);
    if (exp && exp.getTime() <= Date.now()) return null;
    return { by: String(item.claimed_by), until: item.claim_expires_at || '', mine: !!state.me && item.claimed_by === state.me };
  }

  // claimText describes an item's claim; the long form adds how long the
  // lease has left.
  function claimText(item, long) {
    const c = claimOf(item);
    if (!c) return item && item.claimed_by ? 'Unclaimed (lease of ' + item.claimed_by + ' expired)' : 'Unclaimed';
    const who = c.mine ? 'you' : c.by;
    if (!c.until) return 'Claimed by ' + who;
    return 'Claimed by ' + who + ' until ' + clock(c.until) + (long ? ' (' + relative(c.until) + ')' : '');
  }

  function queueRow(item) {
    const id = String(item.review_id);
    const link = el('a', { href: '#/reviews/' + encodeURIComponent(id), class: 'review-link', text: id });
    link.addEventListener('focus', () => setCursor(id, false));
    const box = el('input', { type: 'checkbox', class: 'select', 'aria-label': 'Select review ' + id });
    box.addEventListener('change', () => { toggleSelected(id, box.checked); });
    const claimBtn = el('button', { type: 'button', class: 'secondary small claim', 'aria-label': 'Claim review ' + id, text: 'Claim' });
    claimBtn.addEventListener('click', guard(() => claim(id, claimBtn)));
    const tr = el('tr', { dataset: { reviewId: id } },
      el('td', { class: 'sel' }, box),
      el('td', { class: 'id', 'data-label': 'Review' }, link),
      el('td', { class: 'cls', 'data-label': 'Class' }),
      el('td', { class: 'reason', 'data-label': 'Reason' }),
      el('td', { class: 'num attempts', 'data-label': 'Attempts' }),
      el('td', { class: 'num age', 'data-label': 'Age' }),
      el('td', { class: 'sla', 'data-label': 'SLA' }, el('span', { class: 'sla-left' }), el('span', { class: 'hold-note', hidden: true })),
      el('td', { class: 'claim-cell', 'data-label': 'Claim' }),
      el('td', { class: 'actions' }, claimBtn));
    tr.addEventListener('click', (ev) => {
      if (ev.target.closest('a, button, input')) return;
      setCursor(id, true);
    });
    return tr;
  }

  function fillRow(tr, item) {
    tr.querySelector('.cls').textContent = item.content_class == null ? '' : String(item.content_class);
    const reason = tr.querySelector('.reason');
    reason.textContent = words(item.reason);
    reason.title = item.reason == null ? '' : String(item.reason);
    tr.querySelector('.attempts').textContent = item.attempts == null ? '—' : String(item.attempts);
    const age = tr.querySelector('.age');
    age.title = item.escalated_at ? 'Escalated ' + timestamp(item.escalated_at) : '';
    const held = isHeld(item);
    tr.classList.toggle('held', held);
    tr.querySelector('.sla').dataset.label = held ? 'SLA, hold' : 'SLA';
    tr.querySelector('input.select').checked = state.selected.has(String(item.review_id));
    tickRow(tr, item);
  }

  function tickRow(tr, item) {
    const ageSeconds = liveAge(item);
    const age = tr.querySelector('.age');
    age.textContent = duration(ageSeconds);
    age.classList.toggle('crit', ageSeconds >= QUEUE_AGE_CRIT_S);
    age.classList.toggle('warn', ageSeconds >= QUEUE_AGE_WARN_S && ageSeconds < QUEUE_AGE_CRIT_S);
    // The SLA clock runs while an item is on hold.
    paintSLA(tr.querySelector('.sla-left'), slaOf(item));
    const hold = tr.querySelector('.hold-note');
    const ht = isHeld(item) ? holdText(item) : '';
    if (hold.textContent !== ht) hold.textContent = ht;
    show(hold, !!ht);
    const c = claimOf(item);
    const cell = tr.querySelector('.claim-cell');
    cell.textContent = claimText(item, false);
    cell.title = c && c.until ? 'Lease ends ' + relative(c.until) : '';
    cell.classList.toggle('claimed', !!c && !c.mine);
    cell.classList.toggle('mine', !!c && c.mine);
    const btn = tr.querySelector('button.claim');
    btn.textContent = c && c.mine ? 'Renew' : 'Claim';
    btn.setAttribute('aria-label', (c && c.mine ? 'Renew claim on review ' : 'Claim review ') + item.review_id);
  }

  // renderQueue updates the tables in place, keyed by review ID, so focus and
  // selection survive the periodic refresh and live changes. Items on hold
  // are listed apart, below the queue.
  function renderQueue() {
    const items = state.queue.items;
    const bodies = { queue: $('queue-body'), held: $('held-body') };
    const prev = { queue: null, held: null };
    const counts = { queue: 0, held: 0 };
    const seen = new Set();
    for (const item of items) {
      if (!item || !item.review_id) continue;
      const id = String(item.review_id);
      if (seen.has(id)) continue;
      seen.add(id);
      if (item.content_class) state.classes.add(String(item.content_class));
      let tr = state.queueRows.get(id);
      if (!tr) {
        tr = queueRow(item);
        state.queueRows.set(id, tr);
      }
      fillRow(tr, item);
      const where = isHeld(item) ? 'held' : 'queue';
      counts[where]++;
      const body = bodies[where];
      const want = prev[where] ? prev[where].nextSibling : body.firstChild;
      if (want !== tr) body.insertBefore(tr, want);
      prev[where] = tr;
    }
    const order = visibleIDs();
    for (const [id, tr] of state.queueRows) {
      if (!seen.has(id)) {
        const hadFocus = tr.contains(document.activeElement);
        tr.remove();
        state.queueRows.delete(id);
        if (id === state.cursor) cursorLeft(id, hadFocus);
        else if (hadFocus) $('queue-title').focus();
      }
    }
    state.lastOrder = order;
    for (const id of Array.from(state.selected)) if (!seen.has(id)) state.selected.delete(id);
    setText('queue-count', plural(counts.queue, 'review') + ' waiting' + (counts.held ? ', ' + counts.held + ' on hold' : ''));
    show($('queue-empty'), counts.queue === 0);
    show($('queue-table'), counts.queue > 0);
    show($('held-section'), counts.held > 0);
    setText('held-count', counts.held ? String(counts.held) : '');
    updateClassList();
    markSelectedRow();
    renderBulk();
    updateQueueFreshness();
    if (state.review) renderReviewClaim();
  }

  // visibleIDs lists the rows in the order they are shown: the queue, then
  // the items on hold.
  function visibleIDs() {
    return Array.from(document.querySelectorAll('#queue-body tr, #held-body tr'), (tr) => tr.dataset.reviewId);
  }

  // cursorLeft moves the keyboard cursor off a row that has left the queue
  // (decided, requeued) to the row that took its place.
  function cursorLeft(id, hadFocus) {
    const before = state.lastOrder || [];
    const now = visibleIDs();
    let next = '';
    const at = before.indexOf(id);
    if (at >= 0) {
      next = before.slice(at + 1).find((x) => now.includes(x)) || before.slice(0, at).reverse().find((x) => now.includes(x)) || '';
    }
    state.cursor = '';
    if (next) setCursor(next, hadFocus);
    else if (hadFocus) $('queue-title').focus();
  }

  function markSelectedRow() {
    for (const [id, tr] of state.queueRows) {
      if (state.view === 'queue' && id === state.reviewID) tr.setAttribute('aria-current', 'true');
      else tr.removeAttribute('aria-current');
      tr.classList.toggle('cursor', id === state.cursor);
    }
  }

  // setCursor puts the keyboard cursor on a row, and focus on its link when
  // asked.
  function setCursor(id, focus) {
    const tr = state.queueRows.get(id);
    if (!tr) return;
    if (state.cursor !== id) {
      const old = state.queueRows.get(state.cursor);
      if (old) old.classList.remove('cursor');
      state.cursor = id;
      tr.classList.add('cursor');
    }
    if (focus) {
      const link = tr.querySelector('a.review-link');
      if (document.activeElement !== link) link.focus();
      tr.scrollIntoView({ block: 'nearest' });
    }
  }

  function moveCursor(step) {
    const ids = visibleIDs();
    if (!ids.length) return;
    let at = ids.indexOf(state.cursor);
    if (at < 0) at = step > 0 ? -1 : ids.length;
    const next = Math.max(0, Math.min(ids.length - 1, at + step));
    setCursor(ids[next], true);
  }

  // ---- selection and bulk actions ---------------------------------------

  function toggleSelected(id, on) {
    if (on) state.selected.add(id);
    else state.selected.delete(id);
    const tr = state.queueRows.get(id);
    if (tr) tr.querySelector('input.select').checked = on;
    renderBulk();
  }

  function renderBulk() {
    const n = state.selected.size;
    setText('bulk-count', n ? n + ' selected' : 'None selected');
    $('bulk-requeue').disabled = n === 0;
    $('bulk-release').disabled = n === 0;
    $('bulk-clear').disabled = n === 0;
    const shown = Array.from(document.querySelectorAll('#queue-body tr'), (tr) => tr.dataset.reviewId);
    const all = $('queue-select-all');
    const picked = shown.filter((id) => state.selected.has(id)).length;
    all.checked = shown.length > 0 && picked === shown.length;
    all.indeterminate = picked > 0 && picked < shown.length;
    const f = queueFilter();
    $('bulk-requeue-filter').textContent = 'Requeue all' + (f.reason ? ' ' + words(f.reason) : '') + (f.content_class ? ' of ' + f.content_class : '') + '…';
    // A moderator releases their own claims; an admin may release anyone's.
    $('bulk-release-filter').textContent = (state.role === 'admin' ? 'Release all claims' : 'Release my claims') +
      (f.reason ? ' on ' + words(f.reason) : '') + (f.content_class ? (f.reason ? ' of ' : ' on ') + f.content_class : '') + '…';
  }

  function updateQueueFreshness() {
    const out = $('queue-updated');
    if (!state.queue.lastOK) { out.textContent = ''; return; }
    const ago = Date.now() - state.queue.lastOK;
    out.textContent = 'Updated ' + (ago < 2000 ? 'just now' : duration(ago / 1000) + ' ago');
    out.classList.toggle('stale', ago > STALE_MS);
  }

  function updateClassList() {
    const list = $('class-list');
    const have = new Set(Array.from(list.options, (o) => o.value));
    for (const c of Array.from(state.classes).sort()) {
      if (!have.has(c)) list.append(el('option', { value: c }));
    }
  }

  // refreshQueueSoon reads the queue again once the read model has caught
  // up with a write (docs/contracts.md §2: current within about a second).
  function refreshQueueSoon() {
    bg(loadQueue());
    window.setTimeout(() => { if (state.token) bg(loadQueue()); }, 1200);
  }

  function queueItem(id) { return state.queue.items.find((i) => i && i.review_id === id) || null; }

  function notice(box, text, level) {
    clear(box);
    box.textContent = text;
    box.classList.toggle('ok', level === 'ok');
    box.classList.toggle('warn', level === 'warn');
    show(box, true);
  }

  async function claim(id, button) {
    const box = $('queue-notice');
    const buttons = [button, $('review-claim-btn')].filter(Boolean);
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const r = await api('POST', '/v1/manual-queue/' + encodeURIComponent(id) + '/claim');
      if (r.ok) {
        // The queue is a read model that may lag the claim by a moment, so
        // only the claim's own answer says who "you" are.
        if (r.data && typeof r.data.claimed_by === 'string') setMe(r.data.claimed_by);
        await loadQueue();
        refreshQueueSoon();
        const until = (r.data && r.data.claim_expires_at) || '';
        notice(box, 'You claimed ' + id + (until ? ' until ' + clock(until) : '') + '.', 'ok');
        show($('queue-error'), false);
        return;
      }
      if (r.status === 409 && problemKind(r.problem) === 'not-in-manual-review') {
        await loadQueue();
        queueProblem('action', r.problem, 'Review ' + id + ' is no longer waiting for a moderator.');
        show(box, false);
        return;
      }
      if (r.status === 409) {
        await loadQueue();
        const c = claimOf(queueItem(id));
        const lead = c && !c.mine
          ? 'Review ' + id + ' is claimed by ' + c.by + (c.until ? ' until ' + clock(c.until) : '') + '.'
          : 'Review ' + id + ' is claimed by another moderator.';
        queueProblem('action', r.problem, lead);
        show(box, false);
        return;
      }
      const lead = r.status === 403 ? forbiddenLead('claiming needs the moderator role')
        : r.status === 404 ? 'Review ' + id + ' is no longer in the manual queue.' : 'Could not claim ' + id + '.';
      queueProblem('action', r.problem, lead);
      show(box, false);
      if (r.status === 404) bg(loadQueue());
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  // itemPath is a queue item's route, such as /v1/manual-queue/{id}/claim.
  function itemPath(id, what) { return '/v1/manual-queue/' + encodeURIComponent(id) + '/' + what; }

  // release gives a claim back (DELETE on the claim), recorded in the ledger.
  async function release(id) {
    const box = $('queue-notice');
    const r = await api('DELETE', itemPath(id, 'claim'));
    if (r.ok) {
      const item = queueItem(id);
      if (item) { item.claimed_by = null; item.claim_expires_at = null; renderQueue(); }
      notice(box, 'You released your claim on ' + id + '.', 'ok');
      show($('queue-error'), false);
      refreshQueueSoon();
      return;
    }
    queueProblem('action', r.problem, r.status === 403 ? forbiddenLead('releasing a claim needs the moderator role') : 'Could not release the claim on ' + id + '.');
    show(box, false);
  }

  // unhold takes an item off hold at once: nothing is lost by it.
  async function unhold(id) {
    const box = $('queue-notice');
    const r = await api('DELETE', itemPath(id, 'hold'));
    if (r.ok) {
      notice(box, 'Review ' + id + ' is off hold and back in the queue.', 'ok');
      show($('queue-error'), false);
      refreshQueueSoon();
      if (state.reviewID === id) bg(loadReview(id, state.reviewSeq, false));
      return;
    }
    queueProblem('action', r.problem, 'Could not take ' + id + ' off hold.');
    show(box, false);
  }

  // outcomeWords turns a bulk outcome into a sentence part.
  const OUTCOME_WORDS = {
    requeued: 'requeued to automated review',
    released: 'claim released',
    held: 'put on hold',
    moved_on: 'moved on: no longer waiting for a moderator',
    conflict: 'conflict: it changed meanwhile, nothing recorded',
    not_claimed: 'no live claim to release',
    claimed: 'skipped: claimed by another moderator',
    not_found: 'no such review',
    error: 'failed',
  };

  function outcomeOf(o) {
    const kind = String(o.outcome || o.result || o.status || 'error').replace(/-/g, '_');
    return { id: String(o.review_id || ''), kind, detail: String(o.detail || o.error || '') };
  }

  // ---- confirmation dialog (requeue, release, hold) ----------------------

  // openConfirm asks before an action on one or many reviews, with a
  // count: for a bulk requeue the server's dry run says how many reviews
  // the action would move. action is {kind, ids} or {kind, filter}.
  function openConfirm(action) {
    const dlg = $('confirm-dialog');
    state.dialog = Object.assign({ phase: 'count', count: 0 }, action);
    show($('confirm-error'), false);
    show($('confirm-result'), false);
    clear($('confirm-outcomes'));
    $('confirm-note').value = '';
    const needsNote = action.kind !== 'release';
    show($('confirm-note-field'), needsNote);
    setText('confirm-note-label', action.kind === 'hold' ? 'Why it waits (recorded in the ledger)' : 'Why (recorded in the ledger)');
    $('confirm-note').setAttribute('aria-required', String(action.kind === 'hold'));
    const ok = $('confirm-ok');
    ok.hidden = false;
    ok.disabled = true;
    ok.textContent = action.kind === 'hold' ? 'Put on hold' : action.kind === 'release' ? 'Release claims' : 'Requeue';
    setText('confirm-cancel', 'Cancel');
    $('confirm-cancel').disabled = false;
    setText('confirm-title', action.kind === 'hold' ? 'Put review ' + action.ids[0] + ' on hold'
      : action.kind === 'release' ? (action.filter ? 'Release the claims that match the filter' : 'Release claims')
        : action.filter ? 'Requeue every review that matches the filter' : action.ids.length === 1 ? 'Requeue review ' + action.ids[0] : 'Requeue the selected reviews');
    setText('confirm-count', 'Counting…');
    if (!dlg.open) dlg.showModal();
    (needsNote ? $('confirm-note') : $('confirm-cancel')).focus();
    bg(countConfirm(state.dialog));
  }

  function filterWords(f) {
    const parts = [];
    if (f.reason) parts.push('reason ' + words(f.reason));
    if (f.content_class) parts.push('class ' + f.content_class);
    if (f.claimed_by) parts.push('claimed by ' + (f.claimed_by === state.me ? 'you' : f.claimed_by));
    return parts.length ? parts.join(', ') : 'every reason and class';
  }

  // isBulk: the action goes through a bulk route (a filter, several
  // reviews, or any release from the bulk bar), whose dry run counts it.
  function isBulk(d) { return d.kind !== 'hold' && (!!d.filter || d.ids.length > 1 || !!d.bulk); }

  async function countConfirm(d) {
    let n;
    if (isBulk(d)) {
      const r = await api('POST', bulkPath(d), Object.assign(selection(d), { dry_run: true }));
      if (state.dialog !== d) return;
      if (!r.ok) {
        renderProblem($('confirm-error'), r.problem, r.status === 403 ? forbiddenLead('this needs the moderator role') : 'The reviews could not be counted.');
        setText('confirm-count', '');
        return;
      }
      n = countOf(r.data);
    } else {
      n = d.ids.length;
    }
    d.count = n;
    const what = d.kind === 'release' ? plural(n, 'claim') : plural(n, 'review');
    let text;
    if (d.kind === 'requeue') {
      text = n === 0 ? 'No review matches: nothing would be requeued.'
        : 'This sends ' + what + (d.filter ? ' (' + filterWords(d.filter) + ')' : '') + ' back to automated review with a fresh budget; they leave the manual queue.';
    } else if (d.kind === 'release') {
      text = n === 0 ? (d.filter ? 'No claim matches: nothing would be released.' : 'None of the selected reviews is claimed.')
        : 'This releases ' + what + (d.filter ? ' (' + filterWords(d.filter) + ')' : ' of the selected reviews') + '; any moderator may then claim them.';
    } else {
      text = 'The review moves to the list on hold until it is taken off hold.';
    }
    setText('confirm-count', text);
    $('confirm-count').dataset.count = String(n);
    $('confirm-ok').disabled = n === 0;
    if (n > 0 && d.kind !== 'hold') $('confirm-ok').textContent = (d.kind === 'release' ? 'Release ' : 'Requeue ') + plural(n, d.kind === 'release' ? 'claim' : 'review');
  }

  // countOf reads the count of a dry run's answer (its total).
  function countOf(data) {
    return data && typeof data.total === 'number' ? data.total : 0;
  }

  function bulkPath(d) { return '/v1/manual-queue/bulk/' + (d.kind === 'release' ? 'release' : 'requeue'); }

  // expectedVersion is the version of a review the moderator was shown:
  // the queue item's, else the open review's.
  function expectedVersion(id) {
    const item = queueItem(id);
    if (item && typeof item.version === 'number') return item.version;
    if (state.review && state.review.review_id === id && typeof state.review.version === 'number') return state.review.version;
    return undefined;
  }

  // selection is a bulk body's choice of reviews: the filter, or the
  // checked items with the versions the moderator saw.
  function selection(d) {
    if (d.filter) return { filter: d.filter };
    return { items: d.ids.map((id) => { const v = expectedVersion(id); return v === undefined ? { review_id: id } : { review_id: id, expected_version: v }; }) };
  }

  async function confirmAction() {
    const d = state.dialog;
    if (!d || d.phase !== 'count') return;
    const note = $('confirm-note').value.trim();
    if (d.kind === 'hold' && !note) {
      renderProblem($('confirm-error'), { title: 'Write why the review waits.', field: 'note' }, '');
      $('confirm-note').focus();
      return;
    }
    d.phase = 'running';
    const ok = $('confirm-ok');
    ok.disabled = true;
    $('confirm-cancel').disabled = true;
    show($('confirm-error'), false);
    let outcomes = [];
    let failed = null;
    if (d.kind === 'hold') {
      const body = { note };
      const v = expectedVersion(d.ids[0]);
      if (v !== undefined) body.expected_version = v;
      const r = await api('POST', itemPath(d.ids[0], 'hold'), body);
      if (r.ok) outcomes.push({ id: d.ids[0], kind: 'held', detail: '' });
      else failed = r;
    } else if (!isBulk(d)) {
      const id = d.ids[0];
      const body = { note, expected_version: expectedVersion(id) };
      const r = await api('POST', itemPath(id, 'requeue'), body);
      if (r.ok) outcomes.push({ id, kind: 'requeued', detail: '' });
      else if (r.status === 409) {
        const k = problemKind(r.problem);
        outcomes.push({ id, kind: k === 'not-in-manual-review' ? 'moved_on' : k === 'claimed-by-other' ? 'claimed' : 'conflict', detail: r.problem.detail || r.problem.title });
      } else failed = r;
    } else {
      // Page by page until the server says there is no more (a selection
      // by items is one page).
      let cursor = '';
      for (let page = 0; page < 10000; page++) {
        const body = Object.assign(selection(d), { limit: BULK_PAGE });
        if (d.kind === 'requeue') body.note = note;
        if (cursor) body.cursor = cursor;
        const r = await api('POST', bulkPath(d), body);
        if (!r.ok) { failed = r; break; }
        const data = r.data || {};
        const items = Array.isArray(data.items) ? data.items : [];
        outcomes = outcomes.concat(items.map(outcomeOf));
        setText('confirm-count', (d.kind === 'release' ? 'Releasing… ' : 'Requeueing… ') + outcomes.length + ' of ' + d.count);
        cursor = d.filter && data.next_cursor ? String(data.next_cursor) : '';
        if (!cursor) break;
      }
    }
    $('confirm-cancel').disabled = false;
    if (state.dialog !== d) return;
    d.phase = 'done';
    if (failed) {
      renderProblem($('confirm-error'), failed.problem, failed.status === 403 ? forbiddenLead('this needs the moderator role') : 'The action was not completed.');
    }
    renderOutcomes(d, outcomes);
    for (const o of outcomes) if (o.kind === 'requeued') state.gone.set(o.id, Date.now());
    for (const o of outcomes) if (o.kind === 'requeued') state.selected.delete(o.id);
    refreshQueueSoon();
    if (state.review && d.ids && d.ids.includes(state.review.review_id)) bg(loadReview(state.review.review_id, state.reviewSeq, false));
  }

  function renderOutcomes(d, outcomes) {
    const list = $('confirm-outcomes');
    clear(list);
    const tally = new Map();
    for (const o of outcomes) {
      tally.set(o.kind, (tally.get(o.kind) || 0) + 1);
      list.append(el('li', { class: 'outcome outcome-' + o.kind.replace(/[^a-z_]/g, ''), dataset: { reviewId: o.id, outcome: o.kind } },
        el('code', { text: o.id }), ' — ' + (OUTCOME_WORDS[o.kind] || words(o.kind)) + (o.detail && o.kind !== 'moved_on' ? ' (' + o.detail + ')' : '')));
    }
    const summary = Array.from(tally, ([k, n]) => n + ' ' + (k === 'moved_on' ? 'moved on' : words(k))).join(', ');
    setText('confirm-summary', outcomes.length ? 'Done: ' + summary + '.' : 'Nothing was changed.');
    $('confirm-summary').classList.toggle('warn', outcomes.some((o) => o.kind !== 'requeued' && o.kind !== 'released' && o.kind !== 'held'));
    show($('confirm-result'), true);
    show($('confirm-note-field'), false);
    setText('confirm-count', '');
    $('confirm-ok').hidden = true;
    setText('confirm-cancel', 'Close');
    $('confirm-cancel').focus();
  }

  function closeConfirm() {
    const dlg = $('confirm-dialog');
    if (state.dialog && state.dialog.phase === 'running') return;
    state.dialog = null;
    if (dlg.open) dlg.close();
  }

  // ---- review -----------------------------------------------------------

  function reviewPath(id) { return '/v1/reviews/' + encodeURIComponent(id); }

  function closeReview() {
    const id = state.reviewID;
    location.hash = '#/queue';
    const tr = state.queueRows.get(id);
    if (tr) tr.querySelector('a').focus();
    else $('queue-title').focus();
  }

  async function openReview(id) {
    state.reviewID = id;
    const seq = ++state.reviewSeq;
    state.review = null;
    show($('decision-error'), false);
    show($('decision-result'), false);
    if (!id) { show($('review-panel'), false); markSelectedRow(); return; }
    show($('review-panel'), true);
    setText('review-id', id);
    // Nothing of the previous review stays on screen while this one loads.
    for (const x of ['review-fields', 'review-claim', 'decision-form', 'timeline', 'why', 'review-error']) show($(x), false);
    resetContent();
    setRejecting(false);
    setText('review-state', '');
    $('decision-note').value = '';
    setCursor(id, false);
    await loadReview(id, seq, true);
    // The content never changes: it is read once per opening, not on
    // every reload of the review.
    if (seq === state.reviewSeq && state.review && can('content')) bg(loadContent(id, seq));
  }

  // loadReview reads the review (and, for auditors, its history) and fills
  // the panel. The decision note is kept, so a reload after a conflict does
  // not lose what the moderator wrote.
  async function loadReview(id, seq, focus) {
    $('review-panel').setAttribute('aria-busy', 'true');
    const r = await api('GET', reviewPath(id));
    if (seq !== state.reviewSeq) return;
    $('review-panel').removeAttribute('aria-busy');
    if (!r.ok) {
      state.review = null;
      for (const x of ['review-fields', 'review-claim', 'decision-form', 'timeline', 'why']) show($(x), false);
      resetContent();
      setText('review-state', '');
      $('review-state').className = 'state';
      const lead = r.status === 404 ? 'No review has the ID ' + id + '.'
        : r.status === 403 ? forbiddenLead('reading reviews') : 'The review could not be loaded.';
      renderProblem($('review-error'), r.problem, lead);
      if (focus) $('review-title').focus();
      return;
    }
    show($('review-error'), false);
    renderReview(r.data || {});
    if (focus) $('review-title').focus();
    if (can('timeline') || can('why')) bg(loadTimeline(id, seq));
  }

  function renderReview(v) {
    state.review = v;
    const st = String(v.state || 'unknown');
    const badge = $('review-state');
    badge.textContent = words(st);
    badge.className = 'state state-' + st.replace(/[^a-z_]/g, '');
    setText('rv-class', v.content_class == null ? '—' : String(v.content_class));
    setText('rv-attempts', v.attempts == null ? '—' : String(v.attempts));
    setText('rv-version', v.version == null ? '—' : String(v.version));
    setText('rv-submitted', timestamp(v.submitted_at));
    const dl = $('rv-deadline');
    dl.textContent = v.deadline ? timestamp(v.deadline) + ' (' + relative(v.deadline) + ')' : '—';
    setText('rv-decided', v.decided_at ? timestamp(v.decided_at) : 'not yet');
    const reasons = $('rv-reasons');
    clear(reasons);
    if (Array.isArray(v.reasons) && v.reasons.length) {
      const ul = el('ul', { class: 'reasons' });
      for (const x of v.reasons) ul.append(el('li', { text: String(x) }));
      reasons.append(ul);
    } else {
      reasons.textContent = 'none';
    }
    show($('review-fields'), true);
    const open = st === 'manual_review';
    show($('decision-form'), open && can('queue'));
    setText('decision-version', v.version == null ? '?' : String(v.version));
    renderReviewClaim();
  }

  function renderReviewClaim() {
    const v = state.review;
    if (!v) return;
    const item = queueItem(v.review_id);
    const open = v.state === 'manual_review';
    const queue = can('queue');
    show($('rv-claim-label'), queue);
    show($('rv-claim'), queue);
    setText('rv-claim', !open ? '—' : item ? claimText(item, true) : 'not in the loaded queue');
    const c = claimOf(item);
    labelKey($('review-claim-btn'), c && c.mine ? 'Renew claim' : 'Claim this review', 'c');
    show($('review-release-btn'), !!c && c.mine);
    const held = isHeld(item);
    labelKey($('review-hold-btn'), held ? 'Take off hold' : 'Put on hold…', 'h');
    $('review-hold-btn').setAttribute('aria-haspopup', held ? 'false' : 'dialog');
    const sla = item ? slaOf(item) : null;
    const showSLA = queue && open && !!sla;
    show($('rv-sla-label'), showSLA);
    show($('rv-sla'), showSLA);
    if (showSLA) {
      paintSLA($('rv-sla'), sla);
      $('rv-sla').textContent = slaText(sla) + ' (due ' + clock(sla.due) + ')';
    }
    const required = !!item && item.claims === 'required';
    show($('decision-claim-note'), open && queue && required);
    if (required) setText('decision-claim-note', c && c.mine ? 'This class needs a claim to decide: you hold it.' : 'This class needs a claim to decide: claim the review first (c).');
    show($('rv-hold-label'), queue && open && held);
    show($('rv-hold'), queue && open && held);
    if (held) setText('rv-hold', holdText(item));
    show($('review-claim'), open && queue);
  }

  // labelKey sets a button's label followed by its shortcut key, only when
  // it changed, so a screen reader is not told the same thing every second.
  function labelKey(btn, label, key) {
    if (btn.dataset.label === label) return;
    btn.dataset.label = label;
    btn.replaceChildren(label + ' ', el('kbd', { text: key }));
  }

  async function decide(decision) {
    const v = state.review;
    if (!v) return;
    const id = v.review_id || state.reviewID;
    const seq = state.reviewSeq;
    const errBox = $('decision-error');
    const result = $('decision-result');
    const buttons = [$('decide-accept'), $('decide-reject')];
    buttons.forEach((b) => { b.disabled = true; });
    show(errBox, false);
    show(result, false);
    try {
      const body = { state: decision, note: $('decision-note').value, expected_version: v.version };
      const r = await api('POST', reviewPath(id) + '/decision', body);
      if (seq !== state.reviewSeq) return;
      if (!r.ok) {
        const kind = problemKind(r.problem);
        if (r.status === 409 && kind === 'already-approved') {
          renderProblem(errBox, r.problem, 'You have already voted on this review; another moderator has to approve it.');
        } else if (r.status === 409 && (kind === 'claim-required' || kind === 'claimed-by-other')) {
          // Nothing was recorded; the note stays for when the claim is held.
          const claimNow = el('button', { type: 'button', id: 'decision-claim', class: 'secondary', text: 'Claim this review' });
          claimNow.addEventListener('click', guard(async () => { await claim(id, claimNow); show(errBox, false); $('decision-note').focus(); }));
          const holder = (r.problem.claimedBy || '');
          const lead = kind === 'claim-required'
            ? 'This class needs a claim before a decision: claim the review, then decide. Nothing was recorded.'
            : 'Review ' + id + ' is claimed by ' + (holder || 'another moderator') + ': only the holder of the claim may decide. Nothing was recorded.';
          renderProblem(errBox, r.problem, lead, kind === 'claim-required' ? claimNow : null);
          bg(loadQueue());
          if (kind === 'claim-required') claimNow.focus();
        } else if (r.status === 409) {
          const reload = el('button', { type: 'button', id: 'decision-reload', class: 'secondary', text: 'Reload the review' });
          reload.addEventListener('click', guard(async () => {
            show(errBox, false);
            await loadReview(id, state.reviewSeq, false);
            if (!$('decision-form').hidden) $('decision-note').focus();
          }));
          const lead = problemKind(r.problem) === 'not-in-manual-review'
            ? 'This review is no longer in manual review — reload to see its outcome. Nothing was recorded.'
            : 'The review changed since you opened it — reload. Nothing was recorded.';
          renderProblem(errBox, r.problem, lead, reload);
          reload.focus();
        } else if (r.status === 403) {
          renderProblem(errBox, r.problem, forbiddenLead('deciding needs the moderator role'));
        } else {
          renderProblem(errBox, r.problem, 'The decision was not recorded.');
          if (r.problem.field === 'note') $('decision-note').focus();
        }
        return;
      }
      let view = r.data;
      if (!view || typeof view.state !== 'string' || typeof view.version !== 'number') {
        const again = await api('GET', reviewPath(id));
        view = again.ok ? again.data : null;
      }
      if (seq !== state.reviewSeq) return;
      if (view) renderReview(view);
      $('decision-note').value = '';
      if (view && view.state === 'manual_review') {
        // A moderator votes once; the form returns when the review is
        // opened again.
        show($('decision-form'), false);
        notice(result, 'Your vote to ' + (decision === 'accepted' ? 'accept' : 'reject') +
          ' is recorded. This class needs another moderator’s approval, so the review stays in manual review (now version ' + view.version + ').', 'warn');
      } else {
        notice(result, 'Decision recorded: ' + words(view ? view.state : decision) + '. The review has left the manual queue.', 'ok');
      }
      if (can('timeline') || can('why')) bg(loadTimeline(id, seq));
      setRejecting(false);
      refreshQueueSoon();
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  }

  // ---- submitted content (moderators) -----------------------------------

  // resetContent empties the content section and releases its download.
  function resetContent() {
    if (state.contentURL) URL.revokeObjectURL(state.contentURL);
    state.contentURL = '';
    for (const x of ['content', 'content-meta', 'content-msg', 'content-text', 'content-all', 'content-download']) show($(x), false);
    $('content-text').textContent = '';
    $('content-download').removeAttribute('href');
    $('content').removeAttribute('aria-busy');
  }

  // mediaTypeOf splits a Content-Type into its lower-case type/subtype and
  // charset.
  function mediaTypeOf(header) {
    const parts = String(header || '').split(';');
    const type = parts[0].trim().toLowerCase() || 'application/octet-stream';
    let charset = '';
    for (const p of parts.slice(1)) {
      const m = /^\s*charset\s*=\s*"?([^";\s]+)"?\s*$/i.exec(p);
      if (m) charset = m[1];
    }
    return { type, charset };
  }

  // Text is shown in the page; anything else is offered as a download.
  function isText(type) { return type.startsWith('text/') || type === 'application/json' || type.endsWith('+json'); }

  function decoder(charset) {
    try { return new TextDecoder(charset || 'utf-8'); } catch (_) { return new TextDecoder('utf-8'); }
  }

  function sizeText(n) {
    if (n >= 1024 && n % 1024 === 0) return count(n / 1024) + ' KiB';
    return count(n) + (n === 1 ? ' byte' : ' bytes');
  }

  function hex(buf) { return Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, '0')).join(''); }

  // verifyDigest compares the bytes with the sha256:<hex> digest the
  // server sent (the ledger's). null when it cannot be checked: Web Crypto
  // exists only on https or localhost pages.
  async function verifyDigest(bytes, digest) {
    if (!/^sha256:[0-9a-f]{64}$/.test(digest)) return false;
    if (!(window.crypto && crypto.subtle)) return null;
    return 'sha256:' + hex(await crypto.subtle.digest('SHA-256', bytes)) === digest;
  }

  function downloadName(disposition, id) {
    const m = /filename="([^"]+)"/.exec(disposition || '');
    return m ? m[1] : id.replace(/:/g, '_') + '.bin';
  }

  // loadContent reads what was submitted for review and shows text as
  // text (never as markup) or offers anything else as a download.
  async function loadContent(id, seq) {
    const box = $('content');
    const msg = $('content-msg');
    const meta = $('content-meta');
    const pre = $('content-text');
    show(box, true);
    box.setAttribute('aria-busy', 'true');
    msg.textContent = 'Loading the content…';
    show(msg, true);
    const r = await apiBytes(reviewPath(id) + '/content');
    if (seq !== state.reviewSeq) return;
    if (!r.ok) {
      box.removeAttribute('aria-busy');
      msg.textContent = r.status === 410
        ? 'Content purged: it is no longer stored (retention ended); the ledger keeps only its digest.'
        : r.status === 403
          ? 'The submitted content is shown to moderators; your role cannot read it.'
          : 'The content could not be loaded: ' + (r.problem.title || '') + (r.problem.requestID ? ' (request ID ' + r.problem.requestID + ')' : '');
      return;
    }
    const { type, charset } = mediaTypeOf(r.headers.get('Content-Type'));
    const digest = r.headers.get('X-Payload-Digest') || '';
    const verified = await verifyDigest(r.bytes, digest);
    if (seq !== state.reviewSeq) return;
    box.removeAttribute('aria-busy');
    const size = r.bytes.byteLength;
    if (verified === false) {
      msg.textContent = 'The content received does not match the digest the ledger recorded (' + (digest || 'none') + '), so it is not shown.';
      return;
    }
    show(msg, false);
    meta.textContent = type + ' · ' + sizeText(size) + ' · ' + digest + (verified ? ' (verified)' : ' (not verified: this page is not on https)');
    show(meta, true);
    if (isText(type)) {
      const truncated = size > CONTENT_PREVIEW_BYTES;
      // A streaming decode holds back a character cut at the limit.
      pre.textContent = truncated
        ? decoder(charset).decode(new Uint8Array(r.bytes, 0, CONTENT_PREVIEW_BYTES), { stream: true })
        : decoder(charset).decode(r.bytes);
      show(pre, true);
      const all = $('content-all');
      all.textContent = 'Show all (' + sizeText(size) + '; showing the first ' + sizeText(CONTENT_PREVIEW_BYTES) + ')';
      all.onclick = () => {
        pre.textContent = decoder(charset).decode(r.bytes);
        show(all, false);
        pre.focus();
      };
      show(all, truncated);
      return;
    }
    state.contentURL = URL.createObjectURL(new Blob([r.bytes], { type }));
    const link = $('content-download');
    link.href = state.contentURL;
    link.download = downloadName(r.headers.get('Content-Disposition'), id);
    link.textContent = 'Download (' + type + ', ' + sizeText(size) + ')';
    show(link, true);
  }

  // ---- timeline (auditors) ----------------------------------------------

  // The event fields shown in a timeline entry's one-line summary, with
  // their labels; the full data is one click away.
  const SUMMARY_KEYS = [
    ['attempt', 'attempt'], ['state', 'state'], ['classification', 'classification'], ['reason', 'reason'],
    ['moderator', 'moderator'], ['approvers', 'approvers'], ['elapsed_ms', 'elapsed'],
    ['attempt_timeout_ms', 'attempt timeout'], ['remaining_budget_ms', 'budget left'], ['retry_after_ms', 'retry after'],
    ['source', 'via'], ['detail', 'detail'], ['note', 'note'], ['reasons', 'reasons'],
    ['content_class', 'class'], ['deadline', 'deadline'], ['submitted_by', 'submitted by'],
  ];

  function summarise(data) {
    if (!data || typeof data !== 'object') return '';
    const parts = [];
    for (const [k, label] of SUMMARY_KEYS) {
      const v = data[k];
      if (v === undefined || v === null || v === '' || (Array.isArray(v) && !v.length)) continue;
      let s;
      if (k.endsWith('_ms') && typeof v === 'number') s = millis(v);
      else if (k === 'deadline') s = timestamp(v);
      else if (Array.isArray(v)) s = v.map(String).join(', ');
      else if (typeof v === 'object') continue;
      else s = String(v);
      parts.push(label + ': ' + s);
    }
    return parts.join(' · ');
  }

  // loadTimeline reads the review's events once and shows them as the
  // moderator's "why it is here" (attempts, escalation, requeues, holds,
  // votes) and, for auditors, as the full event history.
  async function loadTimeline(id, seq) {
    const [why, history] = await Promise.all([
      can('why') ? api('GET', reviewPath(id) + '/timeline') : null,
      can('timeline') ? api('GET', reviewPath(id) + '/events') : null,
    ]);
    if (seq !== state.reviewSeq) return;
    if (why) renderWhy(why, why.ok && why.data && Array.isArray(why.data.entries) ? why.data.entries : []);
    if (history) renderEvents(history, history.ok && history.data && Array.isArray(history.data.events) ? history.data.events : []);
  }

  function renderEvents(r, events) {
    const box = $('timeline');
    const msg = $('timeline-msg');
    const list = $('timeline-list');
    show(box, true);
    clear(list);
    if (!r.ok) {
      msg.textContent = r.status === 403
        ? 'The event history is shown to auditors; your role cannot read it.'
        : 'The event history could not be loaded: ' + (r.problem.title || '') + (r.problem.requestID ? ' (request ID ' + r.problem.requestID + ')' : '');
      show(msg, true);
      return;
    }
    show(msg, events.length === 0);
    msg.textContent = events.length ? '' : 'No events.';
    const first = events.length ? parseTime(events[0].recorded_at) : null;
    for (const e of events) {
      const at = parseTime(e.recorded_at);
      const since = first && at ? '+' + millis(at.getTime() - first.getTime()) : '';
      const head = el('div', { class: 'ev-head' },
        el('span', { class: 'ev-version', text: 'v' + e.version }),
        el('span', { class: 'ev-type', text: String(e.type) }),
        el('time', { datetime: e.recorded_at || '', text: timestamp(e.recorded_at) }),
        since ? el('span', { class: 'ev-since', text: since }) : null);
      const sum = summarise(e.data);
      const details = el('details', null, el('summary', { text: 'Event data' }),
        el('pre', { text: JSON.stringify(e.data, null, 2) }));
      list.append(el('li', { class: 'ev ev-' + String(e.type).replace(/[^A-Za-z]/g, '') }, head,
        sum ? el('p', { class: 'ev-summary', text: sum }) : null, details));
    }
  }

  // whyOf sorts a review's timeline entries (GET /v1/reviews/{id}/timeline)
  // into its attempts (numbered on across requeue rounds), escalations,
  // requeues, holds and claims, and votes.
  function whyOf(entries) {
    const out = { attempts: [], escalations: [], requeues: [], holds: [], votes: [], rounds: 1 };
    for (const e of entries) {
      if (!e || typeof e !== 'object') continue;
      const kind = String(e.kind || '');
      const round = typeof e.round === 'number' ? e.round : 1;
      out.rounds = Math.max(out.rounds, round);
      if (kind === 'attempt') {
        const failed = e.outcome === 'failed';
        out.attempts.push({
          no: e.attempt, round, started: e.at,
          kind: failed ? String(e.classification || 'failed') : String(e.outcome || ''),
          outcome: e.outcome === 'finding' ? 'finding: ' + words(e.state) : failed ? words(e.classification || 'failed') : e.outcome === 'in_flight' ? 'in flight' : words(e.outcome),
          detail: String(e.detail || ''),
          ms: typeof e.duration_ms === 'number' ? e.duration_ms : null,
        });
      } else if (kind === 'escalated') {
        out.escalations.push({ at: e.at, round, reason: String(e.reason || ''), detail: String(e.detail || '') });
      } else if (kind === 'requeued') {
        out.requeues.push({ at: e.at, round, by: String(e.actor || ''), note: String(e.note || ''), deadline: e.deadline || '' });
      } else if (kind === 'claimed' || kind === 'released' || kind === 'held' || kind === 'unheld') {
        out.holds.push({ at: e.at, kind, by: String(e.actor || ''), note: String(e.note || ''), reason: String(e.reason || ''), until: e.expires_at || '' });
      } else if (kind === 'approval' || kind === 'decided') {
        out.votes.push({ at: e.at, final: kind === 'decided', state: String(e.state || ''), by: String(e.actor || ''), note: String(e.note || '') });
      }
    }
    return out;
  }

  const HOLD_WORDS = { claimed: 'claimed', released: 'claim released', held: 'put on hold', unheld: 'taken off hold' };

  function whyItem(at, ...parts) {
    return el('li', null, el('time', { datetime: at || '', text: timestamp(at) }), ' ', ...parts);
  }

  function renderWhy(r, entries) {
    const box = $('why');
    const msg = $('why-msg');
    show(box, true);
    if (!r.ok) {
      show($('why-body'), false);
      msg.textContent = r.status === 403
        ? 'Your role cannot read this review’s history.'
        : 'The review’s history could not be loaded: ' + (r.problem.title || '') + (r.problem.requestID ? ' (request ID ' + r.problem.requestID + ')' : '');
      show(msg, true);
      return;
    }
    show(msg, false);
    show($('why-body'), true);
    const w = whyOf(entries);
    const esc = w.escalations[w.escalations.length - 1];
    const roundAttempts = esc ? w.attempts.filter((a) => a.round === esc.round).length : 0;
    $('why-escalation').textContent = esc
      ? 'Escalated ' + timestamp(esc.at) + ': ' + words(esc.reason) + (esc.detail ? ' (' + esc.detail + ')' : '') +
        (roundAttempts && !esc.detail ? ' after ' + plural(roundAttempts, 'attempt') : '') + (w.rounds > 1 ? ' in round ' + esc.round : '') +
        (w.escalations.length > 1 ? ' · escalated ' + w.escalations.length + ' times in all' : '')
      : 'Not escalated.';
    const body = $('why-attempts-body');
    clear(body);
    const rounds = w.rounds > 1;
    let round = 0;
    for (const a of w.attempts) {
      if (rounds && a.round !== round) {
        round = a.round;
        const q = w.requeues.find((x) => x.round === round);
        body.append(el('tr', { class: 'round' }, el('th', { colspan: '4', scope: 'colgroup',
          text: 'Round ' + round + (q ? ', requeued' + (q.by ? ' by ' + q.by : '') + ' ' + clock(q.at) : '') })));
      }
      body.append(el('tr', { class: 'attempt attempt-' + String(a.kind || a.outcome).replace(/[^a-z_]/g, ''), dataset: { round: String(a.round) } },
        el('td', { class: 'num', text: String(a.no) }),
        el('td', null, a.started ? clock(a.started) : '—'),
        el('td', { title: a.detail }, a.outcome + (a.detail ? ' · ' + a.detail : '')),
        el('td', { class: 'num', text: a.ms === null ? '—' : millis(a.ms) })));
    }
    if (!w.attempts.length) body.append(el('tr', null, el('td', { colspan: '4', class: 'muted', text: 'No attempt: the review went straight to a moderator.' })));
    const fill = (id, items, render, none) => {
      const list = $(id);
      clear(list);
      for (const x of items) list.append(render(x));
      if (!items.length) list.append(el('li', { class: 'muted', text: none }));
    };
    fill('why-requeues', w.requeues, (q) => whyItem(q.at, 'requeued' + (q.by ? ' by ' + q.by : ''),
      q.note ? ': ' + q.note : '', q.deadline ? ' (new deadline ' + timestamp(q.deadline) + ')' : ''), 'Never requeued.');
    fill('why-holds', w.holds, (h) => whyItem(h.at, HOLD_WORDS[h.kind] + (h.by ? ' by ' + h.by : '') +
      (h.kind === 'released' && h.reason === 'expired' ? ' (lease expired)' : '') + (h.until ? ' until ' + clock(h.until) : ''), h.note ? ': ' + h.note : ''), 'None recorded.');
    fill('why-votes', w.votes, (v) => whyItem(v.at, (v.final ? 'decided ' : 'voted to ') + (v.final ? words(v.state) : v.state === 'accepted' ? 'accept' : 'reject') +
      (v.by ? ' by ' + v.by : ''), v.note ? ': “' + v.note + '”' : ''), 'No vote yet.');
  }

  // ---- SLO dashboard ----------------------------------------------------

  function sloQuery() {
    const q = new URLSearchParams();
    q.set('window', $('slo-window').value);
    const cls = $('slo-class').value.trim();
    if (cls) q.set('content_class', cls);
    return q.toString();
  }

  async function loadSLO() {
    if (!state.token || !can('slo')) return;
    bg(loadHistory());
    bg(loadProviders());
    const seq = ++state.slo.seq;
    state.slo.loading = true;
    $('slo-view').setAttribute('aria-busy', 'true');
    try {
      const r = await api('GET', '/v1/slo?' + sloQuery());
      if (seq !== state.slo.seq) return;
      if (!r.ok) {
        const lead = r.status === 403 ? forbiddenLead('the SLO dashboard needs the auditor or moderator role') : 'The SLO summary could not be loaded.';
        renderProblem($('slo-error'), r.problem, lead);
        updateSLOFreshness();
        return;
      }
      show($('slo-error'), false);
      state.slo.data = r.data || {};
      state.slo.fetchedAt = Date.now();
      state.slo.lastOK = Date.now();
      renderSLO();
    } finally {
      if (seq === state.slo.seq) {
        state.slo.loading = false;
        $('slo-view').removeAttribute('aria-busy');
      }
    }
  }

  function level(node, lvl) {
    node.classList.toggle('warn', lvl === 'warn');
    node.classList.toggle('crit', lvl === 'crit');
    node.dataset.level = lvl;
  }

  function ratioLevel(d) {
    if (!(d.total > 0) || typeof d.within_budget_ratio !== 'number') return 'ok';
    if (d.within_budget_ratio < RATIO_CRIT) return 'crit';
    if (d.within_budget_ratio < RATIO_WARN) return 'warn';
    return 'ok';
  }

  function oldestAge() {
    const d = state.slo.data || {};
    const q = d.manual_queue || {};
    if (typeof q.oldest_age_seconds !== 'number' || !(q.depth > 0)) return null;
    return q.oldest_age_seconds + (Date.now() - state.slo.fetchedAt) / 1000;
  }

  function oldestLevel(age) {
    if (age === null) return 'ok';
    if (age >= QUEUE_AGE_CRIT_S) return 'crit';
    if (age >= QUEUE_AGE_WARN_S) return 'warn';
    return 'ok';
  }

  function renderSLO() {
    const d = state.slo.data || {};
    const total = typeof d.total === 'number' ? d.total : NaN;
    setText('slo-total', count(total));
    const ratioLvl = ratioLevel(d);
    setText('slo-ratio', total > 0 ? percent(d.within_budget_ratio, 1) : '—');
    setText('slo-ratio-sub', total > 0
      ? count(d.completed_within_budget) + ' of ' + count(total) + ' reached a finding or decision within budget'
      : 'no reviews in this window');
    const meter = $('slo-ratio-meter');
    meter.style.width = (total > 0 && typeof d.within_budget_ratio === 'number' ? Math.max(0, Math.min(1, d.within_budget_ratio)) * 100 : 0) + '%';
    level($('tile-ratio'), ratioLvl);
    setText('tile-ratio-flag', ratioLvl === 'crit' ? 'Critical: below ' + percent(RATIO_CRIT, 0)
      : ratioLvl === 'warn' ? 'Warning: below ' + percent(RATIO_WARN, 0) : '');

    setText('slo-escalated', count(d.escalated));
    setText('slo-escalated-sub', total > 0 && typeof d.escalated === 'number' ? percent(d.escalated / total, 1) + ' of reviews went to a human' : 'sent to the manual queue or failed closed');
    setText('slo-conflicts', count(d.conflicting_completions));
    setText('slo-conflicts-sub', total > 0 && typeof d.conflicting_completions === 'number'
      ? percent(d.conflicting_completions / total, 2) + ' of reviews · late or duplicate findings refused'
      : 'late or duplicate findings refused');

    const lat = d.latency_ms || {};
    const max = Math.max(1, ...['p50', 'p90', 'p99'].map((k) => (typeof lat[k] === 'number' ? lat[k] : 0)));
    for (const k of ['p50', 'p90', 'p99']) {
      setText('slo-' + k, millis(lat[k]));
      $('slo-' + k + '-bar').style.width = (typeof lat[k] === 'number' ? Math.max(1, (lat[k] / max) * 100) : 0) + '%';
    }
    const q = d.manual_queue || {};
    setText('slo-depth', count(q.depth));
    show($('slo-tiles'), true);
    tickSLO();
    updateSLOFreshness();
  }

  // tickSLO keeps the oldest-item age and the alerts current between polls.
  function tickSLO() {
    if (!state.slo.data) return;
    const d = state.slo.data;
    const age = oldestAge();
    const lvl = oldestLevel(age);
    setText('slo-oldest', age === null ? '—' : duration(age));
    level($('tile-oldest'), lvl);
    setText('tile-oldest-flag', lvl === 'crit' ? 'Critical: older than ' + duration(QUEUE_AGE_CRIT_S)
      : lvl === 'warn' ? 'Warning: older than ' + duration(QUEUE_AGE_WARN_S) : '');

    const alerts = [];
    const rl = ratioLevel(d);
    if (rl !== 'ok') alerts.push({ lvl: rl, text: 'Only ' + percent(d.within_budget_ratio, 1) + ' of reviews reached an outcome within budget (target ' + percent(rl === 'crit' ? RATIO_CRIT : RATIO_WARN, 0) + ').' });
    if (lvl !== 'ok') alerts.push({ lvl, text: 'The oldest manual-queue item has waited more than ' + duration(lvl === 'crit' ? QUEUE_AGE_CRIT_S : QUEUE_AGE_WARN_S) + '.' });
    // Re-render only when the alerts change, so screen readers announce
    // each alert once rather than every second.
    const box = $('slo-alerts');
    const key = alerts.map((a) => a.lvl + ':' + a.text).join('|');
    if (box.dataset.key !== key) {
      box.dataset.key = key;
      clear(box);
      for (const a of alerts) box.append(el('p', { class: 'alert ' + a.lvl }, el('strong', { text: a.lvl === 'crit' ? 'Critical' : 'Warning' }), ' ' + a.text));
    }
    show(box, alerts.length > 0);
  }

  // ---- SLO history (charts.js draws) ------------------------------------

  // loadHistory reads the window step by step (GET /v1/slo/series) and the
  // attempt service times per class (GET /v1/slo/attempts).
  async function loadHistory() {
    const seq = ++state.history.seq;
    const q = sloQuery();
    const [series, attempts] = await Promise.all([api('GET', '/v1/slo/series?' + q), api('GET', '/v1/slo/attempts?' + q)]);
    if (seq !== state.history.seq) return;
    const failed = !series.ok ? series : (!attempts.ok ? attempts : null);
    if (failed) {
      renderProblem($('slo-history-error'), failed.problem, 'The SLO history could not be loaded.');
      show($('slo-history'), true);
      return;
    }
    show($('slo-history-error'), false);
    state.history.series = series.data || {};
    state.history.attempts = attempts.data || {};
    renderHistory();
  }

  function renderHistory() {
    const charts = window.reviewledgerCharts;
    const h = state.history;
    if (!charts || !h.series || !h.attempts) return;
    show($('slo-history'), true);
    const pts = Array.isArray(h.series.points) ? h.series.points : [];
    const steps = pts.map((p) => ({ from: new Date(p.from), to: new Date(p.to) }));
    const objective = typeof h.series.objective === 'number' ? h.series.objective : null;
    const stepS = h.series.step_seconds || 60;
    setText('slo-history-range', timestamp(h.series.from) + ' to ' + timestamp(h.series.to) + ', steps of ' + duration(stepS));
    const pct = (v) => percent(v, Math.abs(v) < 1 && Math.round(v * 1000) % 10 !== 0 ? 1 : 0);
    const num = (v, k) => pts.map((p) => (typeof p[k] === 'number' ? p[k] : null));
    charts.lineChart($('chart-ratio-box'), {
      title: 'Share of reviews within budget per step' + (objective !== null ? ', against the objective of ' + percent(objective, 1) : ''),
      table: 'Within budget per step', steps,
      series: [{ label: 'Within budget', cls: 's-ratio', values: num(pts, 'within_budget_ratio') }],
      left: { format: pct, max: 1, floor: 0, minSpan: 0.04 },
      refs: objective !== null ? [{ value: objective, label: 'objective ' + percent(objective, 1), cls: 's-objective' }] : [],
    });
    charts.lineChart($('chart-budget-box'), {
      title: 'Error budget remaining since the window started, and burn rate per step', table: 'Error budget and burn rate per step', steps,
      series: [
        { label: 'Budget remaining', cls: 's-budget', values: num(pts, 'error_budget_remaining') },
        { label: 'Burn rate', cls: 's-burn', axis: 'right', values: num(pts, 'burn_rate') },
      ],
      left: { format: pct, max: 1, minSpan: 1 },
      right: { format: (v) => (Math.round(v * 10) / 10) + '×', min: 0, minSpan: 2, label: '× budget' },
      refs: [{ value: 1, label: 'burn 1×', cls: 's-one', axis: 'right' }],
    });
    charts.lineChart($('chart-queue-box'), {
      title: 'Manual queue depth and age of its oldest review at each step end', table: 'Manual queue per step', steps,
      series: [
        { label: 'Depth', cls: 's-depth', values: pts.map((p) => (p.manual_queue ? p.manual_queue.depth : null)) },
        { label: 'Oldest', cls: 's-oldest', axis: 'right', values: pts.map((p) => (p.manual_queue ? p.manual_queue.oldest_age_seconds : null)) },
      ],
      left: { format: (v) => count(Math.round(v)), min: 0, minSpan: 4, integer: true },
      right: { format: shortAge, min: 0, minSpan: 60, label: 'age' },
    });
    const lat = (k) => pts.map((p) => (p.concluded > 0 && p.latency_ms ? p.latency_ms[k] : null));
    charts.lineChart($('chart-latency-box'), {
      title: 'Latency from submission to outcome per step: p50, p90, p99', table: 'Latency percentiles per step', steps,
      series: [
        { label: 'p50', cls: 's-p50', values: lat('p50') },
        { label: 'p90', cls: 's-p90', values: lat('p90') },
        { label: 'p99', cls: 's-p99', values: lat('p99') },
      ],
      left: { format: millis, min: 0, minSpan: 100 },
    });
    renderAttempts(charts, Array.isArray(h.attempts.classes) ? h.attempts.classes : []);
  }

  // renderAttempts draws one distribution per class: the attempts per
  // service-time bucket, by outcome.
  function renderAttempts(charts, classes) {
    const box = $('chart-attempts-box');
    clear(box);
    show($('chart-attempts-empty'), classes.length === 0);
    for (const c of classes) {
      const buckets = (c.buckets || []).map((b) => ({
        label: b.to_ms === null ? '> ' + millis(b.from_ms) : '≤ ' + millis(b.to_ms),
        title: b.to_ms === null ? 'over ' + millis(b.from_ms) : millis(b.from_ms) + ' to ' + millis(b.to_ms),
      }));
      const of = (k) => (c.buckets || []).map((b) => b[k] || 0);
      const part = el('section', { class: 'attempt-class', 'data-class': c.content_class },
        el('h3', { text: c.content_class }),
        el('p', { text: count(c.attempts) + ' attempts: ' + count(c.findings) + ' findings, ' + count(c.timeouts) + ' timeouts (' +
          percent(c.timeout_rate, 1) + '), ' + count(c.failures) + ' failures · finding p50 ' + millis(c.finding_ms && c.finding_ms.p50) +
          ', p90 ' + millis(c.finding_ms && c.finding_ms.p90) + ', p99 ' + millis(c.finding_ms && c.finding_ms.p99) }));
      const chart = el('div', { class: 'chart-box' });
      part.append(chart);
      box.append(part);
      charts.barChart(chart, {
        title: 'Attempt service times of ' + c.content_class + ', by outcome', table: 'Attempts of ' + c.content_class + ' per service time',
        bucketHeader: 'Service time', buckets, format: (v) => count(Math.round(v)),
        series: [
          { label: 'Findings', cls: 's-finding', values: of('findings') },
          { label: 'Timeouts', cls: 's-timeout', values: of('timeouts') },
          { label: 'Failures', cls: 's-failure', values: of('failures') },
        ],
      });
    }
  }

  // ---- SLO per provider (GET /v1/slo/providers and its series) ---------

  // loadProviders reads each provider's figures over the window and step
  // by step, with the dashboard's window and class.
  async function loadProviders() {
    const seq = ++state.providers.seq;
    const q = sloQuery();
    const box = $('slo-providers');
    box.setAttribute('aria-busy', 'true');
    try {
      const [report, series] = await Promise.all([api('GET', '/v1/slo/providers?' + q), api('GET', '/v1/slo/providers/series?' + q)]);
      if (seq !== state.providers.seq) return;
      const failed = !report.ok ? report : (!series.ok ? series : null);
      if (failed) {
        const lead = failed.status === 403 ? forbiddenLead('the provider figures need the auditor or moderator role') : 'The provider figures could not be loaded.';
        renderProblem($('slo-providers-error'), failed.problem, lead);
        show(box, true);
        return;
      }
      show($('slo-providers-error'), false);
      state.providers.report = report.data || {};
      state.providers.series = series.data || {};
      renderProviders();
    } finally {
      if (seq === state.providers.seq) box.removeAttribute('aria-busy');
    }
  }

  // A provider acts as the deciding provider of a class when it was sent
  // attempts (or decided reviews), as a shadow when it was observed.
  function decides(p) { return !!p && ((p.attempts && p.attempts.total > 0) || p.decided > 0); }
  function shadows(p) { return !!p && !!p.shadow && (p.shadow.observed > 0 || p.shadow.missing > 0); }

  function providerKey(p) { return String(p.provider) + '\u0000' + String(p.content_class); }
  function providerLabel(p) { return String(p.provider) + ' · ' + String(p.content_class); }

  // providerColours gives each provider and class a colour (s-prov-0 to
  // s-prov-5) that its card and its lines share.
  function providerColours(report, series) {
    const keys = new Set();
    for (const p of report) keys.add(providerKey(p));
    for (const l of series) keys.add(providerKey(l));
    const out = new Map();
    Array.from(keys).sort().forEach((k, i) => out.set(k, 's-prov-' + (i % 6)));
    return out;
  }

  function renderProviders() {
    const pr = state.providers;
    if (!pr.report || !pr.series) return;
    const box = $('slo-providers');
    show(box, true);
    const report = (Array.isArray(pr.report.providers) ? pr.report.providers : []).filter((p) => decides(p) || shadows(p));
    const lines = Array.isArray(pr.series.providers) ? pr.series.providers : [];
    setText('slo-providers-range', pr.report.from ? timestamp(pr.report.from) + ' to ' + timestamp(pr.report.to) : '');
    const empty = report.length === 0;
    show($('slo-providers-empty'), empty);
    const cards = $('provider-cards');
    clear(cards);
    show(cards, !empty);
    show($('provider-charts'), !empty && lines.length > 0);
    if (empty) return;
    const colours = providerColours(report, lines);
    report.forEach((p, i) => cards.append(providerCard(p, i, colours.get(providerKey(p)))));
    if (lines.length > 0) renderProviderCharts(lines, colours);
  }

  // figure is one figure of a card: its name, value and a line under it;
  // a warning or critical level is written out too, not only coloured.
  function figure(name, label, value, sub, lvl) {
    const dd = el('dd', { class: 'figure-value', text: value });
    const alert = lvl === 'crit' || lvl === 'warn';
    if (alert) dd.classList.add(lvl);
    return el('div', { class: 'figure', dataset: { figure: name } }, el('dt', { text: label }), dd,
      sub ? el('dd', { class: 'figure-sub', text: sub }) : null,
      alert ? el('dd', { class: 'figure-flag ' + lvl, text: (lvl === 'crit' ? 'Critical: below ' + percent(RATIO_CRIT, 0) : 'Warning: below ' + percent(RATIO_WARN, 0)) }) : null);
  }

  function budgetLevel(ratio, n) {
    if (!(n > 0) || typeof ratio !== 'number') return 'ok';
    if (ratio < RATIO_CRIT) return 'crit';
    if (ratio < RATIO_WARN) return 'warn';
    return 'ok';
  }

  function providerCard(p, i, colour) {
    const id = 'provider-card-' + i;
    const a = p.attempts || {};
    const sh = p.shadow || {};
    const roles = el('p', { class: 'role-hints' });
    if (decides(p)) roles.append(el('span', { class: 'role-hint deciding', text: 'deciding' }));
    if (shadows(p)) roles.append(el('span', { class: 'role-hint shadow', text: 'shadow' }));
    const card = el('section', { class: 'provider-card', id, 'aria-labelledby': id + '-title', dataset: { provider: p.provider, class: p.content_class } },
      el('h3', { class: 'provider-name', id: id + '-title' }, el('span', { class: 'swatch ' + colour, 'aria-hidden': 'true' }), String(p.provider)),
      el('p', { class: 'provider-class', text: String(p.content_class) }),
      roles);
    if (decides(p)) {
      const lat = a.latency_ms || {};
      card.append(el('div', { class: 'provider-role deciding' },
        el('h4', { text: 'As the deciding provider' }),
        el('dl', { class: 'provider-figures' },
          figure('attempts', 'Attempts', count(a.total), count(a.findings) + ' findings · ' + count(a.timeouts) + ' timeouts · ' + count(a.failures) + ' failures'),
          figure('within-budget', 'Within budget', a.total > 0 ? percent(a.within_budget_ratio, 1) : '—',
            count(a.within_budget) + ' of ' + count(a.total) + ' attempts', budgetLevel(a.within_budget_ratio, a.total)),
          figure('timeouts-failures', 'Timeouts / failures', a.total > 0 ? percent(a.timeout_ratio, 1) + ' / ' + percent(a.failure_ratio, 1) : '—'),
          figure('latency', 'Latency to finding', a.findings > 0 ? 'p50 ' + millis(lat.p50) + ' · p99 ' + millis(lat.p99) : '—'),
          figure('decided', 'Reviews decided', count(p.decided), count(p.decided_within_budget) + ' within budget'))));
    }
    if (shadows(p)) {
      const lat = sh.latency_ms || {};
      card.append(el('div', { class: 'provider-role shadow' },
        el('h4', { text: 'As a shadow' }),
        el('dl', { class: 'provider-figures' },
          figure('observed', 'Observed', count(sh.observed), count(sh.findings) + ' findings · ' + count(sh.timeouts) + ' timeouts · ' + count(sh.errors) + ' errors'),
          figure('agreement', 'Agreement', sh.compared > 0 ? percent(sh.agreement_ratio, 1) : '—',
            sh.compared > 0 ? count(sh.agreed) + ' of ' + count(sh.compared) + ' compared' : 'nothing compared yet'),
          figure('shadow-within-budget', 'Within budget', sh.observed > 0 ? percent(sh.within_budget_ratio, 1) : '—',
            count(sh.within_budget) + ' of ' + count(sh.observed) + ' observed', budgetLevel(sh.within_budget_ratio, sh.observed)),
          figure('timeouts-errors', 'Timeouts / errors', sh.observed > 0 ? percent(sh.timeout_ratio, 1) + ' / ' + percent(sh.error_ratio, 1) : '—'),
          figure('missing', 'Missing', count(sh.missing), 'recorded, never came'),
          figure('shadow-latency', 'Latency p99', sh.findings > 0 ? millis(lat.p99) : '—', sh.findings > 0 ? 'p50 ' + millis(lat.p50) : '')),
        confusionTable(p, Array.isArray(sh.confusion) ? sh.confusion : [])));
    }
    return card;
  }

  // confusionTable counts the shadow's findings by its state (rows) and
  // the state of the finding that decided the review (columns).
  function confusionTable(p, cells) {
    if (cells.length === 0) return el('p', { class: 'muted confusion-none', text: 'No finding compared.' });
    const order = (xs) => Array.from(new Set(xs)).sort((x, y) => {
      const rank = (s) => (s === 'accepted' ? 0 : s === 'rejected' ? 1 : 2);
      return rank(x) - rank(y) || (x < y ? -1 : x > y ? 1 : 0);
    });
    const rows = order(cells.map((c) => String(c.shadow)));
    const cols = order(cells.map((c) => String(c.decided)));
    const n = new Map(cells.map((c) => [String(c.shadow) + '\u0000' + String(c.decided), c.count]));
    const head = el('tr', null, el('th', { scope: 'col', text: 'Shadow \u2193 decided \u2192' }));
    for (const c of cols) head.append(el('th', { scope: 'col', text: words(c) }));
    const body = el('tbody');
    for (const r of rows) {
      const tr = el('tr', null, el('th', { scope: 'row', text: words(r) }));
      for (const c of cols) {
        const v = n.get(r + '\u0000' + c) || 0;
        tr.append(el('td', { class: 'num' + (r === c ? ' agree' : ''), dataset: { shadow: r, decided: c }, text: count(v) }));
      }
      body.append(tr);
    }
    return el('table', { class: 'confusion' },
      el('caption', { text: 'Findings of ' + String(p.provider) + ' as a shadow (rows) against the decided finding (columns)' }),
      el('thead', null, head), body);
  }

  // renderProviderCharts draws, per provider and class, its within-budget
  // ratio (as deciding, solid; as a shadow, dashed) and its agreement
  // ratio step by step; a step without attempts or comparisons is a gap.
  function renderProviderCharts(lines, colours) {
    const charts = window.reviewledgerCharts;
    if (!charts) return;
    const pts0 = Array.isArray(lines[0].points) ? lines[0].points : [];
    const steps = pts0.map((p) => ({ from: new Date(p.from), to: new Date(p.to) }));
    const pct = (v) => percent(v, Math.abs(v) < 1 && Math.round(v * 1000) % 10 !== 0 ? 1 : 0);
    const vals = (l, k) => (Array.isArray(l.points) ? l.points : []).map((p) => (typeof p[k] === 'number' ? p[k] : null));
    const any = (l, k) => (Array.isArray(l.points) ? l.points : []).some((p) => p[k] > 0);
    const budget = [];
    const agreement = [];
    for (const l of lines) {
      const cls = colours.get(providerKey(l));
      if (any(l, 'attempts')) budget.push({ label: providerLabel(l), cls, values: vals(l, 'within_budget_ratio') });
      if (any(l, 'shadow_observed')) budget.push({ label: providerLabel(l) + ' (shadow)', cls: cls + ' s-shadow', values: vals(l, 'shadow_within_budget_ratio') });
      if (any(l, 'compared')) agreement.push({ label: providerLabel(l), cls, values: vals(l, 'agreement_ratio') });
    }
    const left = { format: pct, max: 1, floor: 0, minSpan: 0.04 };
    charts.lineChart($('chart-provider-budget-box'), {
      title: 'Share of each provider’s attempts (solid) and shadow observations (dashed) within budget per step',
      table: 'Within budget per provider and step', steps, series: budget, left,
    });
    show($('chart-provider-agreement-empty'), agreement.length === 0);
    show($('chart-provider-agreement-box'), agreement.length > 0);
    if (agreement.length > 0) {
      charts.lineChart($('chart-provider-agreement-box'), {
        title: 'Share of each shadow provider’s compared findings that agreed with the decided finding per step',
        table: 'Shadow agreement per provider and step', steps, series: agreement, left,
      });
    } else clear($('chart-provider-agreement-box'));
  }

  function updateSLOFreshness() {
    const out = $('slo-updated');
    if (!state.slo.lastOK) { out.textContent = ''; return; }
    const ago = Date.now() - state.slo.lastOK;
    out.textContent = 'Updated ' + (ago < 2000 ? 'just now' : duration(ago / 1000) + ' ago');
    out.classList.toggle('stale', ago > STALE_MS);
  }

  function renderThresholds() {
    setText('slo-thresholds', 'Alerts: within-budget ratio below ' + percent(RATIO_WARN, 0) + ' (warning) or ' +
      percent(RATIO_CRIT, 0) + ' (critical); oldest queue item older than ' + duration(QUEUE_AGE_WARN_S) +
      ' (warning) or ' + duration(QUEUE_AGE_CRIT_S) + ' (critical). The queue and these numbers are read models, current within about a second.');
  }

  // ---- live updates -----------------------------------------------------

  // setLive shows whether the queue is live (the stream is open) or polled.
  function setLive(mode, reason) {
    const live = state.live;
    live.mode = mode;
    if (reason !== undefined) live.reason = reason;
    renderLive();
  }

  function renderLive() {
    const live = state.live;
    const box = $('live-status');
    box.dataset.mode = live.mode;
    let text;
    if (live.mode === 'live') text = 'Live';
    else if (live.mode === 'connecting') text = 'Connecting to live updates…';
    else if (live.mode === 'polling') {
      const wait = Math.max(0, Math.ceil((live.retryAt - Date.now()) / 1000));
      text = 'Polling every ' + duration(REFRESH_MS / 1000) + ' · live updates ' + (live.reason ? live.reason + '; ' : '') +
        (wait > 0 ? 'retrying in ' + duration(wait) : 'retrying now');
    } else text = 'Not connected';
    const out = $('live-text');
    if (out.textContent !== text) out.textContent = text;
    box.title = live.mode === 'live' ? 'Changes to the queue appear as they are recorded' : '';
  }

  // startStream opens the stream of queue changes unless it is open or
  // waiting to be retried.
  function startStream() {
    const live = state.live;
    if (!state.token || !can('queue') || live.ctrl || live.timer) return;
    bg(runStream());
  }

  function stopStream() {
    const live = state.live;
    if (live.ctrl) live.ctrl.abort();
    live.ctrl = null;
    window.clearTimeout(live.timer);
    window.clearTimeout(live.syncTimer);
    live.timer = 0;
    live.syncTimer = 0;
    live.retryMS = STREAM_RETRY_MIN_MS;
    live.lastID = '';
    setLive('off', '');
  }

  // runStream reads GET /v1/manual-queue/stream with fetch, so the token
  // goes in the Authorization header, and applies each change to the queue.
  async function runStream() {
    const live = state.live;
    const ctrl = new AbortController();
    live.ctrl = ctrl;
    const token = state.token;
    const signal = AbortSignal.any ? AbortSignal.any([state.abort.signal, ctrl.signal]) : ctrl.signal;
    if (live.mode !== 'polling') setLive('connecting');
    const headers = authHeaders({ 'Accept': 'text/event-stream' });
    if (live.lastID) headers['Last-Event-ID'] = live.lastID;
    let idle = 0;
    const touch = () => {
      live.lastRead = Date.now();
      window.clearTimeout(idle);
      idle = window.setTimeout(() => ctrl.abort(), STREAM_IDLE_MS);
    };
    let why = 'the stream ended';
    try {
      touch();
      const res = await fetch(STREAM_PATH, { method: 'GET', headers, cache: 'no-store', credentials: credentials(), redirect: 'error', signal });
      if (res.status === 401) {
        window.clearTimeout(idle);
        live.ctrl = null;
        signOut(refusedMessage(null));
        return;
      }
      if (!res.ok || !/text\/event-stream/i.test(res.headers.get('Content-Type') || '') || !res.body) {
        why = res.status === 404 ? 'not offered by this server' : 'refused (HTTP ' + res.status + ')';
        if (res.body) res.body.cancel().catch(() => {});
        throw new Error(why);
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      const parser = sseParser(onStreamEvent);
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        touch();
        if (state.queue.lastOK) state.queue.lastOK = Date.now();
        parser(value);
      }
    } catch (err) {
      if (state.token !== token || state.abort.signal.aborted) { window.clearTimeout(idle); return; }
      if (err && err.name === 'AbortError') why = ctrl.signal.aborted && live.ctrl === ctrl ? 'silent for too long' : 'stopped';
      else if (err && err.message && why === 'the stream ended') why = err.name === 'TypeError' ? 'unreachable' : err.message;
      else if (err && err.message) why = err.message;
    }
    window.clearTimeout(idle);
    if (live.ctrl !== ctrl) return; // stopped meanwhile
    live.ctrl = null;
    if (state.token !== token) return;
    retryStream(why);
  }

  // retryStream falls back to polling and tries the stream again after a
  // delay that doubles up to STREAM_RETRY_MAX_MS, with some jitter.
  function retryStream(why) {
    const live = state.live;
    const delay = Math.round(live.retryMS * (0.8 + Math.random() * 0.4));
    live.retryMS = Math.min(STREAM_RETRY_MAX_MS, live.retryMS * 2);
    live.retryAt = Date.now() + delay;
    setLive('polling', why);
    bg(loadQueue());
    window.clearTimeout(live.timer);
    live.timer = window.setTimeout(() => { live.timer = 0; startStream(); }, delay);
  }

  // sseParser returns a function fed with text as it arrives; it calls
  // onEvent(name, data, id) for each complete server-sent event.
  function sseParser(onEvent) {
    let buf = '';
    let name = '';
    let data = [];
    return (chunk) => {
      buf += chunk;
      const lines = buf.split(/\r\n|\r|\n/);
      buf = lines.pop();
      for (const line of lines) {
        if (line === '') {
          if (data.length) onEvent(name || 'message', data.join('\n'));
          name = '';
          data = [];
          continue;
        }
        if (line.startsWith(':')) continue;
        const i = line.indexOf(':');
        const key = i < 0 ? line : line.slice(0, i);
        let value = i < 0 ? '' : line.slice(i + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (key === 'event') name = value;
        else if (key === 'data') data.push(value);
        else if (key === 'id' && !value.includes('\0')) state.live.lastID = value;
      }
    };
  }

  // onStreamEvent applies one change to the queue at once, then reads the
  // queue again shortly after to pick up what the change did not say.
  // "ready" says the stream is live (after any catch-up from Last-Event-ID).
  function onStreamEvent(name, text) {
    if (name === 'ready') {
      state.live.retryMS = STREAM_RETRY_MIN_MS;
      setLive('live', '');
      // Catch up with whatever changed while the stream was down.
      syncQueue();
      return;
    }
    let d = null;
    try { d = JSON.parse(text); } catch (_) { d = null; }
    if (!d || typeof d !== 'object') return;
    state.live.events++;
    // How many changes arrived live, for whoever wants to tell a live update
    // from a poll.
    $('live-status').dataset.events = String(state.live.events);
    const kind = String(name !== 'message' ? name : d.type || '');
    const id = d.review_id ? String(d.review_id) : '';
    if (id) applyChange(kind, id, d);
    syncQueue();
  }

  function applyChange(kind, id, d) {
    const items = state.queue.items;
    const at = items.findIndex((i) => i && String(i.review_id) === id);
    let item = at >= 0 ? items[at] : null;
    const open = state.review && state.review.review_id === id;
    if (kind === 'decided' || kind === 'requeued') {
      state.gone.set(id, Date.now());
      state.added.delete(id);
      if (at >= 0) { items.splice(at, 1); renderQueue(); }
      if (open) bg(loadReview(id, state.reviewSeq, false));
      return;
    }
    if (kind === 'added') {
      state.gone.delete(id);
      if (!d.item || typeof d.item !== 'object' || !queueMatches(d.item)) return;
      const fresh = Object.assign({}, d.item, { _at: Date.now(), _now: parseTime(d.at) ? parseTime(d.at).getTime() : null });
      state.added.set(id, { item: fresh, at: Date.now() });
      if (at >= 0) items[at] = fresh;
      else items.push(fresh);
      renderQueue();
      return;
    }
    if (!item) return;
    if (typeof d.version === 'number') item.version = d.version;
    if (kind === 'claimed') {
      item.claimed_by = d.claimed_by ? String(d.claimed_by) : null;
      item.claim_expires_at = d.claim_expires_at || null;
    } else if (kind === 'released') {
      item.claimed_by = null;
      item.claim_expires_at = null;
    } else if (kind === 'held') {
      item.held = true;
      item.held_by = d.held_by || d.actor || '';
      item.held_at = d.at || '';
      item.hold_note = d.note || '';
    } else if (kind === 'unheld') {
      item.held = false;
      item.held_by = null;
      item.held_at = null;
      item.hold_note = null;
    } else if (kind === 'approved') {
      if (open) bg(loadTimeline(id, state.reviewSeq));
    } else return;
    renderQueue();
    if (open && kind !== 'approved') bg(loadTimeline(id, state.reviewSeq));
  }

  // queueMatches says whether an item belongs in the queue as filtered.
  function queueMatches(item) {
    const f = queueFilter();
    return (!f.content_class || item.content_class === f.content_class) && (!f.reason || item.reason === f.reason);
  }

  // syncQueue reads the queue soon, and once more after the read model has
  // had time to catch up with the ledger; a burst of changes costs one read.
  function syncQueue() {
    const live = state.live;
    if (live.syncTimer) return;
    live.syncTimer = window.setTimeout(() => {
      live.syncTimer = 0;
      if (!state.token) return;
      bg(loadQueue());
      window.setTimeout(() => { if (state.token && state.view === 'queue') bg(loadQueue()); }, 1200);
    }, 250);
  }

  // ---- keyboard ---------------------------------------------------------

  function typingIn(t) {
    if (!t || !t.tagName) return false;
    if (t.isContentEditable || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT') return true;
    return t.tagName === 'INPUT' && !/^(checkbox|radio|button|submit|reset)$/.test(t.type);
  }

  // setRejecting arms (or disarms) a keyboard reject: "r" puts the cursor
  // in the note, Ctrl+Enter rejects with it.
  function setRejecting(on) {
    state.rejecting = on;
    $('decision-form').classList.toggle('rejecting', on);
    $('decision-keys').textContent = '';
    if (on) {
      $('decision-keys').append('Rejecting: write why, then ', el('kbd', { text: 'Ctrl' }), '+', el('kbd', { text: 'Enter' }),
        ' rejects; ', el('kbd', { text: 'Esc' }), ' cancels.');
    } else {
      $('decision-keys').append(el('kbd', { text: 'a' }), ' accepts with this note; ', el('kbd', { text: 'r' }),
        ' puts the cursor here to write why, then ', el('kbd', { text: 'Ctrl' }), '+', el('kbd', { text: 'Enter' }), ' rejects.');
    }
  }

  // target is the review a key acts on: the open one, else the one under
  // the cursor.
  function keyTarget() {
    if (state.review && state.review.state === 'manual_review') return String(state.review.review_id);
    return state.cursor && state.queueRows.has(state.cursor) ? state.cursor : '';
  }

  function canDecide() { return !!state.review && !$('decision-form').hidden && !$('review-panel').hidden; }

  function openHelp() {
    const dlg = $('help-dialog');
    if (!dlg.open) dlg.showModal();
    $('help-close').focus();
  }

  function holdOrUnhold(id) {
    if (!id) return;
    if (isHeld(queueItem(id))) bg(unhold(id));
    else openConfirm({ kind: 'hold', ids: [id] });
  }

  function onKey(ev) {
    if (!state.token || ev.defaultPrevented || ev.altKey || ev.metaKey) return;
    if (document.querySelector('dialog[open]')) return; // a dialog has its own keys
    const t = ev.target;
    if (t && t.id === 'decision-note') {
      if (ev.key === 'Enter' && ev.ctrlKey) {
        ev.preventDefault();
        if (!canDecide()) return;
        if (!t.value.trim()) { $('decision-keys').textContent = 'Write why you reject it first.'; return; }
        bg(decide('rejected'));
        return;
      }
      if (ev.key === 'Escape') {
        ev.preventDefault();
        ev.stopPropagation();
        setRejecting(false);
        $('review-title').focus();
        return;
      }
    }
    if (typingIn(t) && ev.key === 'Escape' && t.closest && t.closest('#queue-filter, #lookup') && state.view === 'queue' && can('queue')) {
      // Out of a filter or lookup field, back to the queue's keys.
      ev.preventDefault();
      $('queue-title').focus();
      return;
    }
    if (typingIn(t) || ev.ctrlKey) return;
    if (ev.key === '?') { ev.preventDefault(); openHelp(); return; }
    if (state.view !== 'queue' || !can('queue')) return;
    switch (ev.key) {
      case 'j': case 'ArrowDown': ev.preventDefault(); moveCursor(1); break;
      case 'k': case 'ArrowUp': ev.preventDefault(); moveCursor(-1); break;
      case 'Enter':
        if (t && t.closest && t.closest('a, button, summary')) return; // they act on Enter themselves
        if (state.cursor) { ev.preventDefault(); location.hash = '#/reviews/' + encodeURIComponent(state.cursor); }
        break;
      case 'c': { const id = keyTarget(); if (id) { ev.preventDefault(); bg(claim(id, null)); } break; }
      case 'a': if (canDecide()) { ev.preventDefault(); bg(decide('accepted')); } break;
      case 'r':
        if (canDecide()) { ev.preventDefault(); setRejecting(true); $('decision-note').focus(); }
        break;
      case 'q': { const id = keyTarget(); if (id) { ev.preventDefault(); openConfirm({ kind: 'requeue', ids: [id] }); } break; }
      case 'h': { const id = keyTarget(); if (id) { ev.preventDefault(); holdOrUnhold(id); } break; }
      case 'x': if (state.cursor) { ev.preventDefault(); toggleSelected(state.cursor, !state.selected.has(state.cursor)); } break;
      case '/': ev.preventDefault(); $('queue-class').focus(); break;
      case 'Escape': if (state.reviewID) { ev.preventDefault(); closeReview(); } break;
      default:
    }
  }

  // ---- timers -----------------------------------------------------------

  function everySecond() {
    if (!state.token) return;
    if (state.view === 'queue') {
      for (const item of state.queue.items) {
        const tr = item && state.queueRows.get(String(item.review_id));
        if (tr) tickRow(tr, item);
      }
      updateQueueFreshness();
      if (state.live.mode === 'polling') renderLive();
      if (state.review && state.review.deadline) {
        $('rv-deadline').textContent = timestamp(state.review.deadline) + ' (' + relative(state.review.deadline) + ')';
      }
      renderReviewClaim();
    } else if (state.view === 'slo') {
      tickSLO();
      updateSLOFreshness();
    }
  }

  // everyRefresh polls the visible view. It skips a beat while the last
  // read is still running, so a slow server is not sent a pile of requests.
  function everyRefresh() {
    if (!state.token || document.hidden) return;
    // While the stream is live the queue needs no polling, only a read now
    // and then for what no change announces.
    const live = state.live.mode === 'live';
    if (state.view === 'queue' && !state.queue.loading && (!live || Date.now() - state.queue.lastRead > LIVE_REFRESH_MS)) bg(loadQueue());
    else if (state.view === 'slo' && $('slo-auto').checked && !state.slo.loading) bg(loadSLO());
  }

  // ---- wiring -----------------------------------------------------------

  function init() {
    renderThresholds();
    $('signin-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const token = $('token').value.trim();
      if (!token) {
        renderProblem($('signin-error'), { title: '' }, 'Paste an API token to sign in.');
        $('token').focus();
        return;
      }
      bg(signIn(token));
    });
    $('signout').addEventListener('click', () => {
      if (state.token === SESSION) bg(endSession());
      else signOut('You signed out.');
    });
    $('queue-filter').addEventListener('submit', guard((ev) => { ev.preventDefault(); return loadQueue(); }));
    $('queue-refresh').addEventListener('click', guard(() => loadQueue()));
    $('slo-filter').addEventListener('submit', guard((ev) => { ev.preventDefault(); return loadSLO(); }));
    $('slo-window').addEventListener('change', guard(() => loadSLO()));
    $('slo-refresh').addEventListener('click', guard(() => loadSLO()));
    $('review-close').addEventListener('click', closeReview);
    $('review-panel').addEventListener('keydown', (ev) => {
      if (ev.key === 'Escape' && ev.target.tagName !== 'TEXTAREA') { ev.preventDefault(); closeReview(); }
    });
    $('review-claim-btn').addEventListener('click', guard(() => claim(state.reviewID, null)));
    $('review-release-btn').addEventListener('click', guard(() => release(state.reviewID)));
    $('review-requeue-btn').addEventListener('click', () => openConfirm({ kind: 'requeue', ids: [state.reviewID] }));
    $('review-hold-btn').addEventListener('click', () => holdOrUnhold(state.reviewID));
    $('queue-select-all').addEventListener('change', () => {
      const on = $('queue-select-all').checked;
      for (const tr of document.querySelectorAll('#queue-body tr')) toggleSelected(tr.dataset.reviewId, on);
      renderBulk();
    });
    $('bulk-requeue').addEventListener('click', () => openConfirm({ kind: 'requeue', ids: Array.from(state.selected) }));
    $('bulk-release').addEventListener('click', () => openConfirm({ kind: 'release', ids: Array.from(state.selected), bulk: true }));
    $('bulk-requeue-filter').addEventListener('click', () => openConfirm({ kind: 'requeue', filter: queueFilter() }));
    $('bulk-release-filter').addEventListener('click', () => {
      const filter = queueFilter();
      if (state.role !== 'admin' && state.me) filter.claimed_by = state.me;
      openConfirm({ kind: 'release', filter });
    });
    $('bulk-clear').addEventListener('click', () => {
      for (const id of Array.from(state.selected)) toggleSelected(id, false);
      renderBulk();
    });
    for (const id of ['queue-class', 'queue-reason']) $(id).addEventListener('input', renderBulk);
    $('queue-reason').addEventListener('change', guard(() => loadQueue()));
    $('queue-order').addEventListener('change', guard(() => loadQueue()));
    $('confirm-form').addEventListener('submit', guard((ev) => { ev.preventDefault(); return confirmAction(); }));
    $('confirm-cancel').addEventListener('click', closeConfirm);
    // A bulk action that has started runs to its end and lists its
    // outcomes: Escape does not close the dialog meanwhile.
    $('confirm-dialog').addEventListener('cancel', (ev) => {
      if (state.dialog && state.dialog.phase === 'running') ev.preventDefault();
    });
    $('confirm-dialog').addEventListener('close', () => {
      state.dialog = null;
      const back = state.reviewID && !$('review-panel').hidden ? $('review-title') : state.queueRows.get(state.cursor);
      if (back && back.tagName === 'TR') back.querySelector('a').focus();
      else if (back) back.focus();
    });
    $('help-open').addEventListener('click', openHelp);
    $('help-close').addEventListener('click', () => $('help-dialog').close());
    $('help-dialog').addEventListener('close', () => $('help-open').focus());
    document.addEventListener('keydown', guard(onKey));
    $('decision-form').addEventListener('submit', guard((ev) => {
      ev.preventDefault();
      const decision = ev.submitter && ev.submitter.value;
      if (decision !== 'accepted' && decision !== 'rejected') return;
      return decide(decision);
    }));
    $('lookup').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const input = $('lookup-id');
      const id = input.value.trim();
      if (!REVIEW_ID.test(id)) {
        input.setCustomValidity('A review ID is 1 to 128 characters from A–Z, a–z, 0–9 and . _ : -');
        input.reportValidity();
        return;
      }
      input.setCustomValidity('');
      // The panel heading shows the ID; the box is ready for the next one.
      input.value = '';
      location.hash = '#/reviews/' + encodeURIComponent(id);
    });
    $('lookup-id').addEventListener('input', () => $('lookup-id').setCustomValidity(''));
    window.addEventListener('hashchange', guard(() => route(false)));
    document.addEventListener('visibilitychange', guard(() => { if (!document.hidden) everyRefresh(); }));
    let resizing = 0;
    window.addEventListener('resize', () => {
      window.clearTimeout(resizing);
      resizing = window.setTimeout(() => { if (state.view === 'slo') { renderHistory(); renderProviders(); } }, 150);
    });
    window.setInterval(guard(everySecond), 1000);
    window.setInterval(guard(everyRefresh), REFRESH_MS);

    let token = '';
    try {
      token = sessionStorage.getItem(TOKEN_KEY) || '';
    } catch (_) { /* storage unavailable */ }
    if (token) bg(signIn(token));
    else bg(probeSession());
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
}());
