// Training: CustomJobs, hyperparameter tuning jobs (studies) and pipelines,
// live from the watch stream of the training collections; a study's trials, its
// best-so-far curve, parallel coordinates of hyperparameters against the
// objective, and each trial's metrics over steps.
import {h, fill, table, badge, section, notice, kv, ago, short, link, num, cut} from './dom.js';
import {lineChart, parallel, color} from './charts.js';
import {metricsSection} from './metrics.js';
import * as api from './api.js';

const TERMINAL = /SUCCEEDED|FAILED|CANCELLED|EXPIRED|PARTIALLY/;

export async function trainingPage(ctx) {
  const status = h('div', {class: 'status'});
  const body = h('div');
  fill(ctx.main, h('h1', null, 'Training'), status, body);
  api.live(['customJobs', 'hyperparameterTuningJobs', 'trainingPipelines'], async () => {
    const base = '/v1/' + api.loc();
    const [cj, hp, tp] = await Promise.all([
      api.list(base + '/customJobs?pageSize=100', 'customJobs', ctx.signal, 1),
      api.list(base + '/hyperparameterTuningJobs?pageSize=100', 'hyperparameterTuningJobs', ctx.signal, 1),
      api.list(base + '/trainingPipelines?pageSize=100', 'trainingPipelines', ctx.signal, 1),
    ]);
    if (ctx.signal.aborted) return;
    fill(body,
      section('Tuning jobs (studies)', cut(hp, 'tuning jobs', 'by name', '`loom hptuning list` lists them all.'), table([
        {title: 'ID', get: j => link(short(j.name), 'training', 'studies', short(j.name))},
        {title: 'Name', class: 'wrap', get: j => j.displayName},
        {title: 'State', get: j => badge(j.state)},
        {title: 'Trials', class: 'n', get: j => trialCount(j) + ' / ' + (j.maxTrialCount || '?')},
        {title: 'Objective', get: j => objectiveOf(j).id + ' (' + objectiveOf(j).goal.toLowerCase() + ')'},
        {title: 'Best', get: j => bestLine(j)},
        {title: 'Created', get: j => ago(j.createTime)},
      ], hp, 'No tuning jobs. `loom hptuning create -f study.json` starts one.')),
      section('Custom jobs', cut(cj, 'custom jobs', 'by name', '`loom custom list` lists them all.'), table([
        {title: 'ID', get: j => link(short(j.name), 'training', 'customJobs', short(j.name))},
        {title: 'Name', class: 'wrap', get: j => j.displayName},
        {title: 'State', get: j => badge(j.state)},
        {title: 'Cluster', get: j => short(j.cluster)},
        {title: 'Job', get: j => j.job ? link(short(j.job), 'jobs', short(j.job)) : null},
        {title: 'Error', class: 'wrap', get: j => j.error && j.error.message},
        {title: 'Created', get: j => ago(j.createTime)},
      ], cj, 'No custom jobs.')),
      section('Pipelines', cut(tp, 'pipelines', 'by name', '`loom pipelines list` lists them all.'), table([
        {title: 'ID', get: j => short(j.name)},
        {title: 'Name', class: 'wrap', get: j => j.displayName},
        {title: 'State', get: j => badge(j.state)},
        {title: 'Model version', get: j => j.modelVersion ? link(versionLabel(j.modelVersion), 'models', modelId(j.modelVersion)) : null},
        {title: 'Error', class: 'wrap', get: j => j.error && j.error.message},
        {title: 'Created', get: j => ago(j.createTime)},
      ], tp, 'No pipelines.')));
    ctx.main.dataset.ready = 'training';
  }, ctx.signal, e => fill(status, e ? notice('error', api.failed(e)) : null));
}

// versionLabel is "MODEL vN" for a pipeline's modelVersion: the model API's
// name ".../models/MODEL@N", or the registry's stored ".../models/MODEL/versions/N"
// that pipelines ended before named it.
function versionLabel(v) {
  const m = /models\/([^/@]+)(?:@(\d+)|\/versions\/(\d+))$/.exec(v || '');
  return m ? m[1] + ' v' + (m[2] || m[3]) : short(v);
}

function modelId(v) {
  const m = /models\/([^/@]+)/.exec(v || '');
  return m ? m[1] : '';
}

// objectiveOf is the study's first metric: {id, goal}.
export function objectiveOf(j) {
  const m = ((j.studySpec && j.studySpec.metrics) || [])[0] || {};
  return {id: m.metricId || 'objective', goal: m.goal || 'MAXIMIZE'};
}

function value(tr, metric) {
  const ms = (tr.finalMeasurement && tr.finalMeasurement.metrics) || [];
  const m = ms.find(x => x.metricId === metric);
  return m ? Number(m.value) : null;
}

function bestLine(j) {
  if (!j.bestTrial) return null;
  const o = objectiveOf(j);
  const t = (j.trials || []).find(x => x.id === j.bestTrial);
  return 'trial ' + j.bestTrial + (t ? ': ' + o.id + ' ' + num(value(t, o.id)) : '');
}

// trialCount is how many trials a study has: those its answer holds and
// those it left out (omittedTrials).
function trialCount(j) {
  return (j.trials || []).length + (j.omittedTrials || []).length;
}

// idRanges writes numeric ids as ranges, "1-469, 471, 480-990", at most 10
// of them ("…" after), as `loom hptuning get` does.
export function idRanges(ids) {
  const out = [];
  for (let i = 0; i < ids.length;) {
    let j = i;
    while (j + 1 < ids.length && Number(ids[j + 1]) === Number(ids[j]) + 1) j++;
    if (out.length === 10) { out.push('…'); break; }
    out.push(j === i ? String(ids[i]) : ids[i] + '-' + ids[j]);
    i = j + 1;
  }
  return out.join(', ');
}

// boundNote says what a study's answer left out: its answer is bounded
// (3 MiB, trainingspec.BoundTuningJobAnswer), so a big study's trials'
// intermediate measurements are thinned (measurementsThinned) and, past
// that, whole trials are left out (omittedTrials). Null when nothing was.
// Trial k of study N runs as CustomJob N+k: each omitted trial is still
// found there.
function boundNote(j, id) {
  const omitted = j.omittedTrials || [];
  const out = [];
  if (omitted.length) {
    const n = Number(id), k = Number(omitted[0]);
    const cj = Number.isSafeInteger(n) && Number.isSafeInteger(k) ? String(n + k) : null;
    out.push(h('p', null, omitted.length + ' of the study\'s ' + trialCount(j) + ' trials are left out of this page: trials ' + idRanges(omitted) +
      '. A study\'s answer is bounded at 3 MiB; it keeps the best trial, the unfinished ones, then the newest. The trials table and charts show only the ' +
      (j.trials || []).length + ' kept. Trial k runs as custom job ' + id + '+k', cj ? [' (trial ' + omitted[0] + ': ', link('custom job ' + cj, 'training', 'customJobs', cj), ')'] : null,
      '; `loom jobs custom get ID` shows its state and parameters.'));
  }
  if (j.measurementsThinned) {
    out.push(h('p', null, 'The trials\' intermediate measurements are thinned in this answer (each trial\'s first, last and evenly spaced ones; final measurements are whole). ' +
      'The metrics charts read the metrics API, which has every point (`loom metrics ID` of a trial\'s custom job).'));
  }
  return out.length ? notice('warn', h('strong', null, 'Part of this study is not shown.'), out) : null;
}

function paramValue(v) {
  if (v == null) return null;
  if (typeof v === 'object') return JSON.stringify(v);
  return v;
}

export async function studyPage(ctx, id) {
  const name = api.loc() + '/hyperparameterTuningJobs/' + encodeURIComponent(id);
  const status = h('div', {class: 'status'});
  const body = h('div');
  fill(ctx.main, h('p', null, link('← Training', 'training')), h('h1', null, 'Study ' + id), status, body);
  let sig = '', selected = '';
  const trialMetrics = h('div');
  const showTrial = async (j, tid) => {
    selected = tid;
    const tr = (j.trials || []).find(t => t.id === tid);
    if (!tr) { fill(trialMetrics); return; }
    const fb = {};
    for (const m of tr.measurements || []) {
      for (const x of m.metrics || []) (fb[x.metricId] = fb[x.metricId] || []).push([Number(m.stepCount || 0), Number(x.value)]);
    }
    const fallback = Object.entries(fb).map(([metric, points]) => ({metric, points}));
    fill(trialMetrics, await metricsSection(ctx, name + '/trials/' + encodeURIComponent(tid), 'Trial ' + tid + ': metrics over steps', fallback));
  };
  const load = async () => {
    const j = await api.get('/v1/' + name, ctx.signal);
    const next = j.state + '|' + j.updateTime + '|' + (j.trials || []).map(t => t.id + t.state).join(',') +
      '|' + (j.omittedTrials || []).join(',') + '|' + !!j.measurementsThinned;
    if (next === sig || ctx.signal.aborted) return j;
    sig = next;
    const o = objectiveOf(j);
    const trials = j.trials || [];
    const params = [...new Set(trials.flatMap(t => (t.parameters || []).map(p => p.parameterId)))];
    const pick = h('select', {id: 'trial-pick', onchange: ev => showTrial(j, ev.target.value)},
      trials.map(t => h('option', {value: t.id, selected: t.id === (selected || j.bestTrial) ? true : null}, 'trial ' + t.id + (t.id === j.bestTrial ? ' (best)' : ''))));
    const omitted = (j.omittedTrials || []).length;
    fill(body,
      boundNote(j, id),
      h('section', {class: 'card'},
        h('h2', null, j.displayName || id, ' ', badge(j.state)),
        kv([
          ['Objective', o.id + ' (' + o.goal.toLowerCase() + ')'],
          ['Trials', trialCount(j) + ' of ' + (j.maxTrialCount || '?') + ', ' + (j.parallelTrialCount || 1) + ' in parallel' +
            (omitted ? '; ' + omitted + ' left out of this page (see above)' : '')],
          ['Best trial', bestLine(j)],
          ['Parameters', params.join(', ')],
          ['Error', j.error && j.error.message],
          ['Created', ago(j.createTime)], ['Ended', ago(j.endTime)],
        ])),
      section('Trials', table([
        {title: 'Trial', get: t => t.id + (t.id === j.bestTrial ? ' ★' : '')},
        {title: 'State', get: t => badge(t.state)},
        ...params.map(pid => ({title: pid, class: 'n', get: t => {
          const p = (t.parameters || []).find(x => x.parameterId === pid);
          return p ? num(paramValue(p.value)) : null;
        }})),
        {title: o.id, class: 'n', get: t => num(value(t, o.id))},
        {title: 'Steps', class: 'n', get: t => t.finalMeasurement && t.finalMeasurement.stepCount ? String(t.finalMeasurement.stepCount) : null},
        {title: 'Job', get: t => t.customJob ? link(short(t.customJob), 'training', 'customJobs', short(t.customJob)) : null},
        {title: 'Note', class: 'wrap', get: t => t.infeasibleReason || (t.earlyStopped ? 'stopped early' : null)},
        {title: 'Ended', get: t => ago(t.endTime)},
      ], trials, 'No trials yet.', t => t.id === j.bestTrial ? 'row-best' : null)),
      h('div', {class: 'two'},
        section('Best so far', bestSoFar(trials, o)),
        section('Hyperparameters against ' + o.id, parallelView(trials, params, o, j.bestTrial))),
      section('Trial metrics', h('label', null, 'Trial ', pick), trialMetrics));
    const tid = selected || j.bestTrial || (trials[0] && trials[0].id);
    if (tid) showTrial(j, tid);
    ctx.main.dataset.ready = 'study';
    return j;
  };
  api.live('hyperparameterTuningJobs', async () => {
    const j = await load();
    if (j && TERMINAL.test(j.state || '')) return api.STOP;
  }, ctx.signal, e => fill(status, e ? notice('error', api.failed(e)) : null));
}

// bestSoFar charts each finished trial's objective in finishing order and
// the best value reached so far.
function bestSoFar(trials, o) {
  const done = trials.filter(t => value(t, o.id) != null).sort((a, b) => Date.parse(a.endTime || 0) - Date.parse(b.endTime || 0));
  if (done.length === 0) return h('p', {class: 'muted empty'}, 'No finished trials yet.');
  let best = null;
  const pts = [], bests = [];
  done.forEach((t, i) => {
    const v = value(t, o.id);
    best = best == null ? v : o.goal === 'MINIMIZE' ? Math.min(best, v) : Math.max(best, v);
    pts.push([i + 1, v]);
    bests.push([i + 1, best]);
  });
  return lineChart([{label: o.id, points: pts, color: '#93c5fd'}, {label: 'best so far', points: bests, color: color(1)}],
    {xLabel: 'trials finished', steps: true, intX: true});
}

function parallelView(trials, params, o, best) {
  const rows = trials.filter(t => value(t, o.id) != null);
  if (rows.length === 0 || params.length === 0) return h('p', {class: 'muted empty'}, 'No finished trials yet.');
  const dims = params.map(pid => ({
    id: pid,
    values: rows.map(t => {
      const p = (t.parameters || []).find(x => x.parameterId === pid);
      return p ? paramValue(p.value) : null;
    }),
  }));
  dims.push({id: o.id, values: rows.map(t => value(t, o.id))});
  return h('div', null, parallel(dims, rows.length, {goal: o.goal, highlight: rows.findIndex(t => t.id === best)}),
    h('p', {class: 'muted'}, 'One line per finished trial; darker is better, red is the best trial.'));
}

export async function customJobPage(ctx, id) {
  const name = api.loc() + '/customJobs/' + encodeURIComponent(id);
  const status = h('div', {class: 'status'});
  const head = h('div');
  const metrics = h('div');
  fill(ctx.main, h('p', null, link('← Training', 'training')), h('h1', null, 'Custom job ' + id), status, head, metrics);
  let first = true;
  api.live('customJobs', async () => {
    const j = await api.get('/v1/' + name, ctx.signal);
    if (ctx.signal.aborted) return;
    const pools = (j.jobSpec && j.jobSpec.workerPoolSpecs) || [];
    fill(head, h('section', {class: 'card'},
      h('h2', null, j.displayName || id, ' ', badge(j.state)),
      kv([
        ['Cluster', short(j.cluster)],
        ['Job', j.job ? link(short(j.job), 'jobs', short(j.job)) : null],
        ['Workers', pools.map(p => (p.replicaCount || 1) + ' × ' + ((p.machineSpec && p.machineSpec.machineType) || '?')).join(', ')],
        ['Command', pools.map(p => p.containerSpec ? [...(p.containerSpec.command || []), ...(p.containerSpec.args || [])].join(' ') : p.pythonPackageSpec ? 'python -m ' + p.pythonPackageSpec.pythonModule : '').join('; ')],
        ['Restarts', j.restartCount ? String(j.restartCount) : null],
        ['Error', j.error && j.error.message],
        ['Created', ago(j.createTime)], ['Started', ago(j.startTime)], ['Ended', ago(j.endTime)],
      ])));
    if (first) {
      first = false;
      metrics.append(await metricsSection(ctx, name, 'Metrics over steps'));
    }
    ctx.main.dataset.ready = 'customJob';
  }, ctx.signal, e => fill(status, e ? notice('error', api.failed(e)) : null));
}
