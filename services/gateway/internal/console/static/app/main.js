// The console's shell: navigation, sign-in, project, and the router that
// gives each page a fresh AbortController (its polls and streams stop when
// the user goes elsewhere).
import {h, fill, notice} from './dom.js';
import * as api from './api.js';
import {clustersPage} from './clusters.js';
import {nodesPage} from './nodes.js';
import {jobsPage, jobPage} from './jobs.js';
import {trainingPage, studyPage, customJobPage} from './training.js';
import {modelsPage, modelPage} from './models.js';
import {dashboardsPage} from './dashboards.js';

const pages = [
  ['clusters', 'Clusters'],
  ['nodes', 'Nodes'],
  ['jobs', 'Jobs'],
  ['training', 'Training'],
  ['models', 'Models'],
  ['dashboards', 'Dashboards'],
];

const main = document.getElementById('page');
let current = null;

function nav(active) {
  fill(document.getElementById('nav'), pages.map(([id, title]) =>
    h('a', {href: '#/' + id, class: id === active ? 'active' : null}, title)));
}

function route() {
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  return parts.length ? parts : ['clusters'];
}

// render shows the page the location names.
function render() {
  if (current) current.abort();
  current = new AbortController();
  const ctx = {signal: current.signal, main};
  const [page, ...rest] = route();
  nav(page);
  main.removeAttribute('data-ready');
  main.dataset.page = page;
  if (!api.token()) {
    signInBox();
    return;
  }
  fill(main, h('p', {class: 'muted'}, 'Loading…'));
  const run = {
    clusters: () => clustersPage(ctx),
    nodes: () => nodesPage(ctx, rest[0]),
    jobs: () => rest.length ? jobPage(ctx, rest[0]) : jobsPage(ctx),
    training: () => rest[0] === 'studies' ? studyPage(ctx, rest[1]) : rest[0] === 'customJobs' ? customJobPage(ctx, rest[1]) : trainingPage(ctx),
    models: () => rest.length ? modelPage(ctx, rest[0]) : modelsPage(ctx),
    dashboards: () => dashboardsPage(ctx, rest[0]),
  }[page];
  if (!run) {
    fill(main, notice('warn', 'No page "' + page + '". Pick one above.'));
    return;
  }
  Promise.resolve(run()).catch(e => {
    if (ctx.signal.aborted) return;
    fill(main, notice('error', String(e.message || e)));
  });
}

// signInBox asks for a credential; why says why it is asked again.
function signInBox(why) {
  if (current) current.abort();
  current = new AbortController();
  main.dataset.page = 'signin';
  document.getElementById('who').textContent = '';
  document.getElementById('signout').hidden = true;
  const input = h('input', {id: 'secret', type: 'password', autocomplete: 'off', spellcheck: 'false', placeholder: 'lk_… or an access token', size: 48});
  const msg = h('div', {id: 'signin-msg'});
  const form = h('form', {id: 'signin', class: 'card signin', onsubmit: async ev => {
    ev.preventDefault();
    fill(msg);
    try {
      const who = await api.signIn(input.value);
      input.value = '';
      showWho(who);
      render();
    } catch (e) {
      fill(msg, notice('error', 'Sign-in failed: ' + e.message));
    }
  }},
  h('h2', null, 'Sign in to Loom'),
  h('p', null, 'Paste an API key or an access token. ', h('code', null, 'loom up'), ' made an administrator key (',
    h('code', null, '<data dir>/keys/admin.key'), '); ', h('code', null, 'loom auth keys create --user NAME'),
    ' makes one for anyone else. The key is exchanged for a short-lived token kept only in this tab.'),
  why ? notice('warn', why) : null,
  h('label', null, 'Credential ', input), ' ',
  h('button', {type: 'submit'}, 'Sign in'),
  msg);
  fill(main, form);
  main.dataset.ready = 'signin';
  input.focus();
}

function showWho(who) {
  document.getElementById('who').textContent = who ? (who.name || who.principal || who.user || '') : '';
  document.getElementById('signout').hidden = false;
}

api.setOnUnauthenticated(msg => {
  api.signOut();
  signInBox('Your credential was refused (' + msg + '): sign in again.');
});

document.getElementById('signout').addEventListener('click', async () => {
  await api.signOut(true);
  signInBox();
});

const proj = document.getElementById('project');
proj.value = api.project();
proj.addEventListener('change', () => {
  const v = proj.value.trim();
  if (/^[a-z0-9][a-z0-9-]{0,62}$/.test(v)) {
    api.setProject(v);
    render();
  } else {
    proj.value = api.project();
  }
});

// A CSP violation is a console bug (the policy is the console's own): say
// so where developers and the browser tests look.
document.addEventListener('securitypolicyviolation', e => {
  console.error('CSP violation: ' + e.violatedDirective + ' blocked ' + (e.blockedURI || 'inline content') + ' in ' + e.sourceFile + ':' + e.lineNumber);
});

window.addEventListener('hashchange', render);
if (api.token()) api.get('/v1/auth:whoami').then(showWho).catch(() => {});
render();
