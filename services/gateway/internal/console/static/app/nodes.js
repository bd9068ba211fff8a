// Nodes: each node's state, GPU health and remediation step (health
// service) and its Slurm state and reason, for one cluster or all, live
// from the watch stream of clusters, nodes, node health and Slurm nodes.
import {h, fill, table, badge, notice, ago, short, link, cut} from './dom.js';
import * as api from './api.js';

// MAX_CLUSTERS bounds the clusters whose nodes one refresh reads; past it
// the page says which it shows, and #/nodes/CLUSTER shows any one.
const MAX_CLUSTERS = 20;

export async function nodesPage(ctx, only) {
  const status = h('div', {class: 'status'});
  const body = h('div');
  fill(ctx.main, h('h1', null, only ? 'Nodes of ' + only : 'Nodes'), status, body);
  api.live(['clusters', 'nodes', 'nodeHealth', 'slurmNodes'], async () => {
    let clusters = await api.list('/v1/' + api.p() + '/clusters', 'clusters', ctx.signal);
    if (only) clusters = clusters.filter(c => short(c.name) === only);
    const rows = [], notes = [];
    const read = clusters.slice(0, MAX_CLUSTERS);
    read.more = clusters.more || clusters.length > read.length;
    notes.push(cut(read, 'clusters\' nodes', 'by name', [h('code', null, '#/nodes/CLUSTER'), ' shows any one; `loom nodes list CLUSTER` lists its nodes.']));
    for (const c of read) {
      // Each list is read whole (up to 10 pages of 1,000): a cluster of
      // more nodes than one page keeps every column.
      const [nodes, health, slurm] = await Promise.all([
        api.list('/v1/' + c.name + '/nodes?page_size=1000', 'nodes', ctx.signal),
        api.tryList('/v1/' + c.name + '/nodeHealth?page_size=1000', 'nodes', ctx.signal).catch(() => null),
        api.tryList('/v1/' + c.name + '/slurmNodes?page_size=1000', 'nodes', ctx.signal).catch(() => null),
      ]);
      const name = short(c.name);
      notes.push(cut(nodes, 'nodes of ' + name, 'in list order', ['`loom nodes list ' + name + '` lists them all.']),
        cut(health, 'health reports of ' + name, 'in list order', ['its other nodes say “not read”: `loom health nodes ' + name + '` lists them all.']),
        cut(slurm, 'Slurm nodes of ' + name, 'as Slurm lists them', ['its other nodes say “not read”: `LOOM_CLUSTER=' + name + ' loom slurm sinfo -N` lists them all.']));
      const hb = Object.fromEntries((health || []).map(n => [n.hostname, n]));
      const sb = Object.fromEntries((slurm || []).map(n => [n.hostname, n]));
      for (const n of nodes) {
        rows.push({c, n, hh: hb[n.hostname], sl: sb[n.hostname],
          hhUnread: !hb[n.hostname] && health && health.more, slUnread: !sb[n.hostname] && slurm && slurm.more});
      }
    }
    if (ctx.signal.aborted) return;
    fill(body, clusters.length === 0 ? notice('info', only ? 'No cluster ' + only + '.' : ['No clusters yet. Create one with ', h('code', null, 'loom clusters create -f CLUSTER.json'), '.']) : [notes, h('section', {class: 'card'}, table([
      {title: 'Cluster', get: r => link(short(r.c.name), 'nodes', short(r.c.name))},
      {title: 'Node', get: r => r.n.hostname},
      {title: 'Pool', get: r => r.n.node_pool},
      {title: 'State', get: r => badge(r.n.state)},
      {title: 'Reason', get: r => r.n.reason || r.n.next_action},
      {title: 'GPUs', class: 'n', get: r => String(r.n.gpus || 0)},
      {title: 'GPU health', get: r => r.hhUnread ? 'not read' : gpuHealth(r.hh)},
      {title: 'Remediation', get: r => r.hhUnread ? 'not read' : r.hh ? [badge(r.hh.state), r.hh.next_action && r.hh.next_action !== 'ACTION_UNSPECIFIED' ? ' next ' + r.hh.next_action.replace(/^ACTION_/, '') : '', r.hh.reason ? ' — ' + r.hh.reason : ''] : null},
      {title: 'Slurm', get: r => r.slUnread ? 'not read' : r.sl ? [badge(r.sl.state), r.sl.reason ? ' ' + r.sl.reason : ''] : null},
      {title: 'Heartbeat', get: r => ago(r.n.last_heartbeat || (r.hh && r.hh.last_heartbeat))},
    ], rows, 'No nodes.', r => /DOWN|FAILED/.test(r.n.state) ? 'row-bad' : null))]);
    ctx.main.dataset.ready = 'nodes';
  }, ctx.signal, e => fill(status, e ? notice('error', api.failed(e)) : null));
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
