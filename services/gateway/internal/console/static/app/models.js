// Models: the registry's models, each one's versions and aliases, and a
// version's lineage drawn as a graph version → trial → job → data.
// Live from the watch stream of models.
import {h, fill, table, section, notice, kv, ago, short, link, num, cut} from './dom.js';
import {graph} from './charts.js';
import * as api from './api.js';

function unavailable(what) {
  return notice('info', 'The model registry is not available on this gateway (' + what + ' answered 404). ',
    'Models appear here once the registry REST (/v1/projects/{p}/locations/{l}/models) is served.');
}

function modelId(m) {
  return short(String(m.name || '').replace(/@.*$/, ''));
}

export async function modelsPage(ctx) {
  const status = h('div', {class: 'status'});
  const body = h('div');
  fill(ctx.main, h('h1', null, 'Models'), status, body);
  api.live('models', async () => {
    const path = '/v1/' + api.mloc() + '/models?pageSize=' + PAGE;
    const models = await api.tryList(path, 'models', ctx.signal, MODEL_PAGES);
    if (ctx.signal.aborted) return;
    if (models == null) {
      fill(body, unavailable('GET ' + path));
      ctx.main.dataset.ready = 'models';
      return api.STOP;
    }
    fill(body, section('Registered models', cut(models, 'models', 'by name', '`loom models list` lists them all.'), table([
      {title: 'Model', get: m => link(modelId(m), 'models', modelId(m))},
      {title: 'Name', class: 'wrap', get: m => m.displayName},
      {title: 'Version', class: 'n', get: m => m.versionId},
      {title: 'Aliases', get: m => aliases(m)},
      {title: 'Artifact', class: 'wrap', get: m => m.artifactUri},
      {title: 'Updated', get: m => ago(m.versionUpdateTime || m.updateTime)},
    ], models, 'No models registered yet. A pipeline with modelToUpload, or `loom models upload`, registers one.')));
    ctx.main.dataset.ready = 'models';
  }, ctx.signal, e => fill(status, e ? notice('error', api.failed(e)) : null));
}

// PAGE is a models list's page size; the Models page reads at most
// MODEL_PAGES of them, a model's page one page of versions (each with its
// lineage graph), and both say when there are more (dom.js's cut).
const PAGE = 100, MODEL_PAGES = 5;

function aliases(m) {
  return (m.versionAliases || []).map(a => h('span', {class: 'alias'}, a));
}

// modelPage follows the models watch for the model's versions: every
// version change (an upload, an alias moved, a version edited or deleted)
// changes the model as ListModels shows it (latest_version, update_time),
// so the watch's CHANGED makes the page read its versions again.
export async function modelPage(ctx, id) {
  const base = api.mloc() + '/models/' + encodeURIComponent(id);
  const status = h('div', {class: 'status'});
  const body = h('div');
  fill(ctx.main, h('p', null, link('← Models', 'models')), h('h1', null, 'Model ' + id), status, body);
  let sig = '';
  api.live('models', async () => {
    // The newest versions first: a model of more versions than a page
    // shows its latest, not its first.
    const path = '/v1/' + base + ':listVersions?pageSize=' + PAGE + '&orderBy=' + encodeURIComponent('version_id desc');
    const versions = await api.tryList(path, 'models', ctx.signal, 1);
    if (ctx.signal.aborted) return;
    if (versions == null) {
      fill(body, unavailable('GET ' + path));
      ctx.main.dataset.ready = 'model';
      return api.STOP;
    }
    versions.sort((a, b) => Number(b.versionId) - Number(a.versionId));
    const next = versions.more + '|' + versions.map(v => v.versionId + (v.versionAliases || []).join() + v.versionUpdateTime).join('|');
    if (next === sig) return;
    sig = next;
    fill(body,
      section('Versions', cut(versions, 'versions', 'the newest', '`loom models versions ' + id + '` lists them all.'), table([
        {title: 'Version', class: 'n', get: v => v.versionId},
        {title: 'Aliases', get: v => aliases(v)},
        {title: 'Description', class: 'wrap', get: v => v.versionDescription},
        {title: 'Metrics', get: v => Object.entries((v.lineage && v.lineage.metrics) || {}).map(([k, x]) => k + ' ' + num(x)).join(', ')},
        {title: 'Artifact', class: 'wrap', get: v => v.artifactUri},
        {title: 'Created', get: v => ago(v.versionCreateTime || v.createTime)},
      ], versions, 'No versions.')),
      versions.map(v => lineageCard(v)));
    ctx.main.dataset.ready = 'model';
  }, ctx.signal, e => fill(status, e ? notice('error', api.failed(e)) : null));
}

// lineageCard draws where a version came from: version → trial (and its
// tuning job) → CustomJob → job → data, with the parameters and metrics
// recorded with it.
function lineageCard(v) {
  const l = v.lineage || {};
  const nodes = [{kind: 'version', label: 'v' + v.versionId + ((v.versionAliases || []).length ? ' @' + v.versionAliases.join(',') : ''), title: v.name}];
  if (l.trial) {
    const hp = /hyperparameterTuningJobs\/([^/]+)/.exec(l.trial);
    nodes.push({kind: 'trial', label: 'trial ' + short(l.trial) + (hp ? ' of ' + hp[1] : ''), title: l.trial, href: hp ? '#/training/studies/' + encodeURIComponent(hp[1]) : null});
  } else if (l.hyperparameterTuningJob) {
    nodes.push({kind: 'study', label: short(l.hyperparameterTuningJob), title: l.hyperparameterTuningJob, href: '#/training/studies/' + encodeURIComponent(short(l.hyperparameterTuningJob))});
  }
  if (l.customJob) nodes.push({kind: 'custom job', label: short(l.customJob), title: l.customJob, href: '#/training/customJobs/' + encodeURIComponent(short(l.customJob))});
  if (l.jobId) nodes.push({kind: 'job', label: 'job ' + l.jobId, href: '#/jobs/' + encodeURIComponent(l.jobId)});
  nodes.push({kind: 'data', label: l.dataUri ? short(l.dataUri.replace(/\/+$/, '')) : 'not recorded', title: l.dataUri || 'no data URI recorded'});
  return section('Lineage of version ' + v.versionId,
    h('div', {class: 'scroll'}, graph(nodes)),
    kv([
      ['Pipeline', l.trainingPipeline ? short(l.trainingPipeline) : null],
      ['Parameters', Object.entries(l.parameters || {}).map(([k, x]) => k + '=' + x).join(', ')],
      ['Metrics', Object.entries(l.metrics || {}).map(([k, x]) => k + ' ' + num(x)).join(', ')],
      ['Checkpoint', l.checkpointUri],
      ['Data', l.dataUri],
    ]));
}
