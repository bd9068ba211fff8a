// Nodes: each node's state, GPU health and remediation step (health
// service) and its Slurm state and reason, for one cluster or all, live
// from the watch stream of clusters, nodes, node health and Slurm nodes.
import {h, fill, table, badge, notice, ago, short, link} from './dom.js';
import * as api from './api.js';

const MAX_CLUSTERS = 20;

export async function nodesPage(ctx, only) {
  const status = h('div', {class: 'status'});
  const body = h('div');
  fill(ctx.main, h('h1', null, only ? 'Nodes of ' + only : 'Nodes'), status, body);
  api.live(['clusters', 'nodes', 'nodeHealth', 'slurmNodes'], async () => {
    let clusters = await api.list('/v1/' + api.p() + '/clusters', 'clusters', ctx.signal);
    if (only) clusters = clusters.filter(c => short(c.name) === only);
    const rows = [];
    for (const c of clusters.slice(0, MAX_CLUSTERS)) {
      const [nodes, health, slurm] = await Promise.all([
        api.list('/v1/' + c.name + '/nodes?page_size=1000', 'nodes', ctx.signal),
        api.tryGet('/v1/' + c.name + '/nodeHealth?page_size=1000', ctx.signal).catch(() => null),
        api.tryGet('/v1/' + c.name + '/slurmNodes?page_size=1000', ctx.signal).catch(() => null),
      ]);
      const hb = Object.fromEntries(((health && health.nodes) || []).map(n => [n.hostname, n]));
      const sb = Object.fromEntries(((slurm && slurm.nodes) || []).map(n => [n.hostname, n]));
      for (const n of nodes) rows.push({c, n, hh: hb[n.hostname], sl: sb[n.hostname]});
    }
    if (ctx.signal.aborted) return;
    fill(body, clusters.length === 0 ? notice('info', only ? 'No cluster ' + only + '.' : 'No clusters yet.') : h('section', {class: 'card'}, table([
      {title: 'Cluster', get: r => link(short(r.c.name), 'nodes', short(r.c.name))},
      {title: 'Node', get: r => r.n.hostname},
      {title: 'Pool', get: r => r.n.node_pool},
      {title: 'State', get: r => badge(r.n.state)},
      {title: 'Reason', get: r => r.n.reason || r.n.next_action},
      {title: 'GPUs', class: 'n', get: r => String(r.n.gpus || 0)},
      {title: 'GPU health', get: r => gpuHealth(r.hh)},
      {title: 'Remediation', get: r => r.hh ? [badge(r.hh.state), r.hh.next_action && r.hh.next_action !== 'ACTION_UNSPECIFIED' ? ' next ' + r.hh.next_action.replace(/^ACTION_/, '') : '', r.hh.reason ? ' — ' + r.hh.reason : ''] : null},
      {title: 'Slurm', get: r => r.sl ? [badge(r.sl.state), r.sl.reason ? ' ' + r.sl.reason : ''] : null},
      {title: 'Heartbeat', get: r => ago(r.n.last_heartbeat || (r.hh && r.hh.last_heartbeat))},
    ], rows, 'No nodes.', r => /DOWN|FAILED/.test(r.n.state) ? 'row-bad' : null)));
    ctx.main.dataset.ready = 'nodes';
  }, ctx.signal, e => fill(status, e ? notice('error', 'Update failed (retrying with backoff): ' + e.message) : null));
}

// gpuHealth sums a node's GPU samples: lost GPUs, double-bit ECC errors,
// the hottest temperature.
function gpuHealth(hh) {
  if (!hh || !hh.gpus || hh.gpus.length === 0) return null;
  const lost = hh.gpus.filter(g => g.lost).length;
  const dbe = hh.gpus.reduce((n, g) => n + Number(g.ecc_dbe_volatile || 0), 0);
  const hot = Math.max(...hh.gpus.map(g => Number(g.temperature_c || 0)));
  const parts = [hh.gpus.length + ' GPUs'];
  if (lost) parts.push(lost + ' lost');
  if (dbe) parts.push(dbe + ' DBE');
  parts.push('max ' + Math.round(hot) + '°C');
  return h('span', {class: lost || dbe ? 'bad-text' : null}, parts.join(', '));
}
