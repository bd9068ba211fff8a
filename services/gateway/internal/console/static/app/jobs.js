// Jobs: the queue (live from the watch stream of jobs), and one
// job live from its :watch stream, with its runs, goodput, logs (:logs,
// followed) and training metrics.
import {h, fill, table, badge, section, notice, kv, ago, short, link, num, dur, cut} from './dom.js';
import * as api from './api.js';
import {metricsSection} from './metrics.js';
import {pct} from './clusters.js';

const TERMINAL = /COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED/;
// JOBS_PAGE and JOBS_PAGES bound each list the Jobs page reads (the
// queue, all jobs): at most 1,000 jobs each, on every change.
const JOBS_PAGE = 500, JOBS_PAGES = 2;
// MAX_LOG bounds the log text kept on the page (the newest part is kept).
const MAX_LOG = 256 << 10;

export async function jobsPage(ctx) {
  const status = h('div', {class: 'status'});
  const body = h('div');
  fill(ctx.main, h('h1', null, 'Jobs'), status, body);
  api.live('jobs', async () => {
    // The queue is read on its own (active_only, as squeue): the list is
    // in submission order, so in a project of many finished jobs the
    // first pages of all jobs would hold none of the queue.
    const base = '/v1/' + api.p() + '/jobs?page_size=' + JOBS_PAGE;
    // Finished jobs are read newest first (order_by): past 1,000 the
    // table shows the latest, not the oldest.
    const [active, jobs] = await Promise.all([
      api.list(base + '&active_only=true', 'jobs', ctx.signal, JOBS_PAGES),
      api.list(base + '&order_by=' + encodeURIComponent('submit_time desc'), 'jobs', ctx.signal, JOBS_PAGES),
    ]);
    if (ctx.signal.aborted) return;
    const pending = active.filter(j => j.state === 'PENDING');
    const done = jobs.filter(j => TERMINAL.test(j.state || ''));
    done.more = jobs.more;
    const count = (rows, n = rows.length) => n + (rows.more ? ' or more' : '');
    fill(body,
      h('p', {class: 'muted'}, count(active) + ' active jobs (' + count(active, pending.length) + ' pending), ' + count(done) + ' finished. Live: updated as they change.'),
      section('Queue', cut(active, 'active jobs', 'in submission order', ['`loom jobs list --state active` lists them all.']),
        queueTable(active, ['No pending or running jobs. Submit one with ', h('code', null, 'loom jobs submit -- COMMAND'), ' (or sbatch on a login node).'])),
      section('Finished', cut(done, 'finished jobs', 'those among the ' + jobs.length + ' submitted last: the newest',
        ['`loom jobs list` lists them all; ', h('code', null, '#/jobs/ID'), ' opens any one.']),
        queueTable(done, ['No finished jobs. Jobs show here once they end; ', h('code', null, 'loom jobs list'), ' lists every job.'])));
    ctx.main.dataset.ready = 'jobs';
  }, ctx.signal, e => fill(status, e ? notice('error', api.failed(e)) : null));
}

// arrayTask is an array task's id as Slurm shows it ("2_5"), else null.
function arrayTask(j) {
  return j.array_job_id ? j.array_job_id + '_' + (j.array_task_id || 0) : null;
}

function queueTable(jobs, empty) {
  return table([
    {title: 'ID', get: j => link(arrayTask(j) || j.job_id, 'jobs', j.job_id)},
    {title: 'Name', class: 'wrap', get: j => j.display_name},
    {title: 'User', get: j => j.user},
    {title: 'Cluster', get: j => short(j.cluster)},
    {title: 'State', get: j => badge(j.state)},
    {title: 'Reason', get: j => j.state_reason},
    {title: 'Placement', class: 'wrap', get: j => j.placement},
    {title: 'Nodes', get: j => (j.nodes || []).join(',') || String(j.node_count || 1)},
    {title: 'Priority', class: 'n', get: j => j.priority ? String(j.priority) : null},
    {title: 'Submitted', get: j => ago(j.submit_time)},
  ], jobs, empty, j => j.state === 'PENDING' ? 'row-warn' : null);
}

export async function jobPage(ctx, id) {
  const name = api.p() + '/jobs/' + encodeURIComponent(id);
  const status = h('div', {class: 'status'});
  const head = h('div');
  const runs = h('div');
  const good = h('div');
  const logs = h('pre', {class: 'logs', id: 'logs'}, '(no output yet)');
  const metrics = h('div');
  fill(ctx.main, h('p', null, link('← Jobs', 'jobs')), h('h1', null, 'Job ' + id), status, head,
    section('Runs', runs), section('Goodput', good), metrics, section('Logs', logs));
  let job = await api.get('/v1/' + name, ctx.signal);
  const show = j => {
    job = j;
    fill(head, h('section', {class: 'card'},
      h('h2', null, j.display_name || 'job ' + j.job_id, ' ', badge(j.state)),
      kv([
        ['Reason', j.state_reason],
        ['Array task', arrayTask(j)],
        ['Placement', j.placement],
        ['Cluster', short(j.cluster)],
        ['User', j.user],
        ['Command', (j.command || []).join(' ') || (j.script ? j.script.split('\n').slice(0, 3).join(' ⏎ ') : null)],
        ['Nodes', (j.nodes || []).join(', ') || String(j.node_count || 1) + ' requested'],
        ['GPUs', j.alloc_gpus ? String(j.alloc_gpus) : j.gpus_per_node ? j.gpus_per_node + ' per node' : null],
        ['Exit code', TERMINAL.test(j.state || '') ? String(j.exit_code || 0) : null],
        ['Restarts', j.restart_count ? String(j.restart_count) : null],
        ['Priority', j.priority ? String(j.priority) : null],
        ['Submitted', ago(j.submit_time)], ['Started', ago(j.start_time)], ['Ended', ago(j.end_time)],
        ['Output', j.output_path],
      ])));
    fill(runs, table([
      {title: 'Attempt', class: 'n', get: r => String(r.attempt || 0)},
      {title: 'State', get: r => badge(r.state)},
      {title: 'Nodes', get: r => (r.nodes || []).join(', ')},
      {title: 'Started', get: r => ago(r.start_time)},
      {title: 'Ended', get: r => ago(r.end_time)},
      {title: 'Exit', class: 'n', get: r => r.end_time ? String(r.exit_code || 0) : null},
      {title: 'Reason', get: r => r.reason},
    ], j.runs, TERMINAL.test(j.state || '') ? 'No runs recorded.' : 'Not started yet.'));
  };
  show(job);

  // Live: the job's :watch stream, until the job ends.
  if (!TERMINAL.test(job.state || '')) {
    const stop = new AbortController();
    ctx.signal.addEventListener('abort', () => stop.abort());
    api.watch('/v1/' + name + ':watch', j => {
      show(j);
      if (TERMINAL.test(j.state || '')) { stop.abort(); loadGoodput(); }
    }, stop.signal, e => fill(status, e ? notice('warn', 'Live updates interrupted (reconnecting): ' + e.message) : null));
  }

  const loadGoodput = async () => {
    try {
      const g = await api.tryGet('/v1/' + name + ':goodput', ctx.signal);
      fill(good, !g ? notice('info', 'Goodput is not available on this gateway.') : kv([
        ['Goodput', pct(g.goodput)], ['Wall', dur(g.wall)], ['Productive', dur(g.productive)],
        ['Lost to recompute', dur(g.lost_recompute)], ['Lost to restarts', dur(g.lost_restart)],
        ['Lost queueing', dur(g.lost_queueing)], ['Checkpointing', dur(g.lost_checkpointing)],
        ['Failures', num(g.failures || 0)], ['Restarts', num(g.restarts || 0)],
      ]));
    } catch (e) {
      fill(good, notice('info', 'No goodput yet: ' + e.message));
    }
  };
  // Ready once the job and its goodput show (logs and metrics follow).
  await loadGoodput();
  ctx.main.dataset.ready = 'job';

  // Logs: followed while the job runs (the stream ends with the job).
  let text = '';
  const follow = !TERMINAL.test(job.state || '');
  api.stream('/v1/' + name + ':logs' + (follow ? '?follow=true' : ''), chunk => {
    text += api.b64text(chunk && chunk.data);
    if (text.length > MAX_LOG) text = '…' + text.slice(text.length - MAX_LOG);
    const atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
    logs.textContent = text;
    if (atEnd) logs.scrollTop = logs.scrollHeight;
  }, ctx.signal).then(() => {
    if (!text) logs.textContent = '(no output yet)';
  }).catch(e => {
    if (!ctx.signal.aborted) logs.textContent = text + (text ? '\n' : '') + '[logs: ' + e.message + ']';
  });

  metrics.append(await metricsSection(ctx, api.p() + '/jobs/' + encodeURIComponent(id), 'Training metrics'));
}
