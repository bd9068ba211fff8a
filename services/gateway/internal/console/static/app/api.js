// The REST API as the console calls it: same origin, same credential as
// every client (Authorization: Bearer), kept in sessionStorage for this tab.

const TOKEN = 'loom.token';
const REFRESH = 'loom.refresh';
const PROJECT = 'loom.project';

// ApiError is a failed call: status is the HTTP status, message the
// gateway's explanation.
export class ApiError extends Error {
  constructor(status, message, path) {
    super(message);
    this.status = status;
    this.path = path;
  }
  // unavailable: the gateway does not serve this API at all (a route it
  // does not know, or an RPC it does not implement), as opposed to a
  // resource that does not exist.
  get unavailable() {
    return this.status === 501 || (this.status === 404 && /^not found$/i.test(this.message.trim()));
  }
}

export function token() { return sessionStorage.getItem(TOKEN) || ''; }
export function project() { return sessionStorage.getItem(PROJECT) || 'default'; }
export function setProject(p) { sessionStorage.setItem(PROJECT, p); }
// Training resources live in a location (the CLI's default: us-central1,
// LOOM_LOCATION); the model registry's default location is global.
export const trainingLocation = 'us-central1';
export const modelLocation = 'global';

// signOut forgets the credential. With revoke (a sign-out the user asked
// for) it also ends the refresh token at the gateway (POST
// /v1/auth:revoke), so that a copy of it taken from this tab gets no new
// token; it resolves once the gateway answered, whatever it said.
export function signOut(revoke = false) {
  const rt = sessionStorage.getItem(REFRESH);
  sessionStorage.removeItem(TOKEN);
  sessionStorage.removeItem(REFRESH);
  if (!revoke || !rt) return Promise.resolve();
  return fetch('/v1/auth:revoke', {method: 'POST', keepalive: true, headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({refresh_token: rt})}).catch(() => {});
}

// signIn takes an API key ("lk_…") or an access token. An API key is
// exchanged for a short-lived access token (POST /v1/auth:token), so the
// key itself is not kept; a gateway that mints no tokens takes the key.
// It then asks who the credential is (GET /v1/auth:whoami).
export async function signIn(secret) {
  secret = secret.trim();
  if (!secret) throw new ApiError(400, 'Paste an API key or an access token.');
  let access = secret, refresh = '';
  if (secret.startsWith('lk_')) {
    const r = await fetch('/v1/auth:token', {method: 'POST', headers: {'Authorization': 'Bearer ' + secret, 'Content-Type': 'application/json'}, body: '{}'});
    if (r.ok) {
      const t = await r.json();
      access = t.access_token || secret;
      refresh = t.refresh_token || '';
    } else if (r.status !== 501) {
      throw await failure(r, '/v1/auth:token');
    }
  }
  const who = await fetch('/v1/auth:whoami', {headers: {'Authorization': 'Bearer ' + access}});
  if (!who.ok) throw await failure(who, '/v1/auth:whoami');
  sessionStorage.setItem(TOKEN, access);
  if (refresh) sessionStorage.setItem(REFRESH, refresh); else sessionStorage.removeItem(REFRESH);
  return who.json();
}

async function failure(r, path) {
  let msg = r.statusText || ('HTTP ' + r.status);
  try {
    const b = await r.json();
    if (b && b.message) msg = b.message;
  } catch (_) { /* not JSON */ }
  return new ApiError(r.status, msg, path);
}

// renewing is the refresh in flight: a page's list and its watch stream
// that are refused at once share one refresh (a refresh token is spent by
// its first use).
let renewing = null;

// renew is what to do after a 401 on a request sent with `used`: when
// another request renewed the token meanwhile, retry with it; else trade
// the refresh token, once for all the requests refused together.
async function renew(used) {
  if (token() && token() !== used) return true;
  if (!renewing) renewing = refreshToken().finally(() => { renewing = null; });
  return renewing;
}

// refreshToken trades the refresh token for a new access token, once:
// true when renewed, false when the gateway refused it (spent, revoked,
// expired: sign in again). A gateway that did not answer, or answered
// that it could not (5xx), has not spent it: it is kept for the next
// try, and the failure thrown, so the page says what failed instead of
// asking the user to sign in again.
async function refreshToken() {
  const rt = sessionStorage.getItem(REFRESH);
  if (!rt) return false;
  let r;
  try {
    r = await fetch('/v1/auth:token', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify({refresh_token: rt})});
  } catch (e) {
    throw new ApiError(503, 'the gateway did not answer (' + e.message + '); try again', '/v1/auth:token');
  }
  if (r.status >= 500) throw await failure(r, '/v1/auth:token');
  if (sessionStorage.getItem(REFRESH) === rt) sessionStorage.removeItem(REFRESH);
  if (!r.ok) return false;
  const t = await r.json();
  if (!t.access_token) return false;
  sessionStorage.setItem(TOKEN, t.access_token);
  if (t.refresh_token) sessionStorage.setItem(REFRESH, t.refresh_token);
  return true;
}

// onUnauthenticated is called when the credential is refused (main shows
// the sign-in box).
export let onUnauthenticated = () => {};
export function setOnUnauthenticated(f) { onUnauthenticated = f; }

async function send(path, signal) {
  const used = token();
  const r = await fetch(path, {headers: {'Accept': 'application/json', 'Authorization': 'Bearer ' + used}, signal});
  r.used = used;
  return r;
}

// get GETs path and returns its JSON, or throws ApiError.
export async function get(path, signal) {
  let r = await send(path, signal);
  if (r.status === 401 && await renew(r.used)) r = await send(path, signal);
  if (r.status === 401) {
    const e = await failure(r, path);
    onUnauthenticated(e.message);
    throw e;
  }
  if (!r.ok) throw await failure(r, path);
  return r.json();
}

// tryGet is get, but answers null where the API is not available.
export async function tryGet(path, signal) {
  try {
    return await get(path, signal);
  } catch (e) {
    if (e instanceof ApiError && e.unavailable) return null;
    throw e;
  }
}

// list GETs every page of a list (at most maxPages), concatenating field.
// The array's `more` is true when the list goes on past maxPages: the
// page must then say that it shows only part (see dom.js's cut).
export async function list(path, field, signal, maxPages = 10) {
  const out = [];
  let tok = '';
  for (let i = 0; i < maxPages; i++) {
    const sep = path.includes('?') ? '&' : '?';
    const b = await get(tok ? path + sep + 'page_token=' + encodeURIComponent(tok) : path, signal);
    out.push(...(b[field] || []));
    tok = b.next_page_token || b.nextPageToken || '';
    if (!tok) break;
  }
  out.more = tok !== '';
  return out;
}

// tryList is list, but answers null where the API is not available.
export async function tryList(path, field, signal, maxPages = 10) {
  try {
    return await list(path, field, signal, maxPages);
  } catch (e) {
    if (e instanceof ApiError && e.unavailable) return null;
    throw e;
  }
}

// MAX_LINE bounds one streamed JSON line: a longer one ends the stream.
const MAX_LINE = 8 << 20;

// stream reads a newline-delimited JSON stream (the REST API's :watch and
// :logs) and calls each(result) per message until it ends or signal aborts.
export async function stream(path, each, signal) {
  let r = await send(path, signal);
  if (r.status === 401 && await renew(r.used)) r = await send(path, signal);
  if (r.status === 401) { onUnauthenticated('credential refused'); throw await failure(r, path); }
  if (!r.ok) throw await failure(r, path);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += dec.decode(value, {stream: true});
    if (buf.length > MAX_LINE) throw new ApiError(0, 'stream line longer than ' + MAX_LINE + ' bytes', path);
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (!line) continue;
      const m = JSON.parse(line);
      if (m.error) throw new ApiError(m.error.http_code || 500, m.error.message || 'stream error', path);
      each(m.result);
    }
  }
}

// STOP, returned by a poll's load, ends the polling (the thing watched
// has finished).
export const STOP = Symbol('stop');

// poll runs load now and again every `every` ms while signal lives; after a
// failure it waits twice as long each time (at most `max`), and back to
// `every` after a success. onError gets the failure (null after recovery).
// A hidden tab does not poll: the next refresh waits until it is shown
// again, so forgotten tabs cost the gateway nothing.
export function poll(load, signal, every = 3000, max = 60000, onError = () => {}) {
  let delay = every, timer = null, first = true;
  const tick = async () => {
    if (signal.aborted) return;
    if (!first && document.visibilityState === 'hidden') {
      const shown = () => {
        if (document.visibilityState === 'hidden') return;
        document.removeEventListener('visibilitychange', shown);
        tick();
      };
      document.addEventListener('visibilitychange', shown);
      signal.addEventListener('abort', () => document.removeEventListener('visibilitychange', shown));
      return;
    }
    first = false;
    try {
      if ((await load()) === STOP) { onError(null); return; }
      delay = every;
      onError(null);
    } catch (e) {
      if (signal.aborted) return;
      delay = Math.min(delay * 2, max);
      onError(e);
      if (stops(e)) return;
    }
    if (!signal.aborted) timer = setTimeout(tick, delay);
  };
  signal.addEventListener('abort', () => clearTimeout(timer));
  tick();
}

// watch follows a stream and reopens it when it ends or fails, after
// `every` ms doubling to `max` while it keeps failing.
// stops is whether a failed read ends a page's updates rather than being
// retried: the caller may not read it (401, 403) or it is not there in
// this project (404, as after switching to another project); a retry would
// get the same answer.
export function stops(e) {
  return e instanceof ApiError && (e.status === 401 || e.status === 403 || e.status === 404);
}

// failed is what a page's status line says of a failed update (what:
// "Update", "Refresh"): that it is retried, or, where it stops (stops),
// that it stopped and what to do about it.
export function failed(e, what = 'Update') {
  if (!stops(e)) return what + ' failed (retrying with backoff): ' + e.message;
  return what + 's stopped: ' + e.message + ' (project ' + project() + '). ' +
    (e.status === 401 ? 'Sign in again.' : 'Choose a project you are a member of, or ask its admin for a role, then reload.');
}

export function watch(path, each, signal, onError = () => {}, every = 1000, max = 30000) {
  let delay = every;
  const go = async () => {
    while (!signal.aborted) {
      try {
        await stream(path, m => { delay = every; onError(null); each(m); }, signal);
      } catch (e) {
        if (signal.aborted) return;
        onError(e);
        if (stops(e)) return;
      }
      await new Promise(res => { const t = setTimeout(res, delay); signal.addEventListener('abort', () => { clearTimeout(t); res(); }); });
      delay = Math.min(delay * 2, max);
    }
  };
  go();
}

// LIVE_SETTLE is how long live waits after a change before it loads, so
// that a burst of changes costs one load.
const LIVE_SETTLE = 250;

// live keeps a page current from the watch stream (GET
// /v1/projects/{p}:watchChanges?collections=...), instead of polling.
// load is the page's own read of its lists (the same REST calls as
// always); live runs it at once, again when the watch has sent its
// initial state (SYNCED: nothing changed between the first load and the
// watch goes unseen), after every change (CHANGED, DELETED; a burst is one
// load, and never two loads at once), and at once on RESYNC (the gateway
// lost track: the page lists again). A load that returns STOP ends it. A
// dropped stream is reopened with backoff (its SYNCED loads again); a
// gateway without the watch (501, or a route it does not know) is polled
// every `every` ms instead. A hidden tab loads nothing until it is shown.
// onError gets a failure (null after recovery).
export function live(collections, load, signal, onError = () => {}, every = 5000) {
  const own = new AbortController();
  signal.addEventListener('abort', () => own.abort());
  const sig = own.signal;
  let running = false, again = false, timer = null;
  const run = async () => {
    if (sig.aborted) return;
    if (document.visibilityState === 'hidden') {
      const shown = () => {
        if (document.visibilityState === 'hidden') return;
        document.removeEventListener('visibilitychange', shown);
        run();
      };
      document.addEventListener('visibilitychange', shown);
      sig.addEventListener('abort', () => document.removeEventListener('visibilitychange', shown));
      return;
    }
    if (running) { again = true; return; }
    running = true;
    try {
      do {
        again = false;
        if ((await load()) === STOP) { onError(null); own.abort(); return; }
        onError(null);
      } while (again && !sig.aborted);
    } catch (e) {
      if (!sig.aborted) onError(e);
    } finally {
      running = false;
    }
  };
  const soon = () => {
    if (timer !== null) return;
    timer = setTimeout(() => { timer = null; run(); }, LIVE_SETTLE);
  };
  sig.addEventListener('abort', () => clearTimeout(timer));
  const path = '/v1/' + p() + ':watchChanges?collections=' + encodeURIComponent([].concat(collections).join(',')) +
    '&location=' + encodeURIComponent(trainingLocation);
  const follow = async () => {
    let delay = 1000, synced = false;
    while (!sig.aborted) {
      try {
        await stream(path, ev => {
          delay = 1000;
          switch (ev && ev.type) {
            case 'SYNCED': synced = true; run(); break;
            case 'RESYNC': synced = false; run(); break;
            case 'CHANGED': case 'DELETED': if (synced) soon(); break;
          }
        }, sig);
      } catch (e) {
        if (sig.aborted) return;
        if (e instanceof ApiError && e.unavailable) { poll(load, sig, every, 60000, onError); return; }
        onError(e);
        if (stops(e)) return;
      }
      synced = false;
      await new Promise(res => { const t = setTimeout(res, delay); sig.addEventListener('abort', () => { clearTimeout(t); res(); }); });
      delay = Math.min(delay * 2, 30000);
    }
  };
  run();
  follow();
}

// b64text decodes base64 bytes (LogChunk.data) as UTF-8 text.
export function b64text(b) {
  if (!b) return '';
  const bin = atob(b);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new TextDecoder().decode(bytes);
}

// p is the project's resource prefix; loc its training location's, mloc
// its model registry location's.
export function p() { return 'projects/' + encodeURIComponent(project()); }
export function loc() { return p() + '/locations/' + trainingLocation; }
export function mloc() { return p() + '/locations/' + modelLocation; }
