// Clusters: state, node pools, capacity and health, live from the watch
// stream of clusters and node health.
import {h, fill, table, badge, section, notice, kv, ago, short, link, num, cut} from './dom.js';
import * as api from './api.js';

// MAX_CLUSTERS bounds the per-cluster reads (health, goodput) one refresh
// makes: the clusters past it say "not read", and the page says so.
const MAX_CLUSTERS = 20;
// NOT_READ is what a cluster past MAX_CLUSTERS shows for its health and goodput.
const NOT_READ = {unread: true};

export async function clustersPage(ctx) {
  const status = h('div', {class: 'status'});
  const body = h('div');
  fill(ctx.main, h('h1', null, 'Clusters'), status, body);
  api.live(['clusters', 'nodeHealth'], async () => {
    const clusters = await api.list('/v1/' + api.p() + '/clusters', 'clusters', ctx.signal);
    const read = clusters.slice(0, MAX_CLUSTERS);
    read.more = clusters.length > read.length;
    const extra = await Promise.all(read.map(async c => {
      const [health, goodput] = await Promise.all([
        api.tryList('/v1/' + c.name + '/nodeHealth?page_size=1000', 'nodes', ctx.signal).catch(() => null),
        api.tryGet('/v1/' + c.name + ':goodput', ctx.signal).catch(() => null),
      ]);
      return {health, goodput};
    }));
    const capacity = await api.tryGet('/v1/' + api.p() + '/capacity', ctx.signal).catch(() => null);
    if (ctx.signal.aborted) return;
    fill(body, clusters.length === 0
      ? notice('info', 'No clusters in project ' + api.project() + ' yet. Create one with `loom clusters create -f cluster.json`.')
      : [section('Summary', cut(clusters, 'clusters', 'by name', ['`loom clusters list` lists them all.']),
        cut(read, "clusters' health and goodput", 'by name', ['the others say “not read”: `loom health nodes CLUSTER` and `loom clusters goodput CLUSTER` read any one.']),
        summaryTable(clusters, extra)), clusters.map((c, i) => clusterCard(c, extra[i] || NOT_READ))],
    capacity && capacity.pools && capacity.pools.length ? section('Capacity pools', capacityTable(capacity.pools)) : null);
    ctx.main.dataset.ready = 'clusters';
  }, ctx.signal, e => fill(status, e ? notice('error', api.failed(e)) : null));
}

function healthCounts(health) {
  const by = {};
  for (const n of health || []) by[n.state] = (by[n.state] || 0) + 1;
  return by;
}

// healthText is a cluster's nodes by health state: "not read" past
// MAX_CLUSTERS, "not available" where the gateway does not serve node
// health, and "or more" after the counts when the list was cut.
function healthText(e, none) {
  if (e.unread) return 'not read';
  if (!e.health) return 'not available';
  const by = Object.entries(healthCounts(e.health));
  if (by.length === 0) return none;
  return [by.map(([k, v]) => [badge(k), ' ' + v + ' ']), e.health.more ? '(of the first ' + e.health.length + ' nodes; more not read)' : null];
}

function summaryTable(clusters, extra) {
  return table([
    {title: 'Cluster', get: c => short(c.name)},
    {title: 'State', get: c => badge((c.status || {}).state)},
    {title: 'Nodes ready', class: 'n', get: c => ((c.status || {}).ready_nodes || 0) + ' / ' + ((c.status || {}).total_nodes || 0)},
    {title: 'GPUs', class: 'n', get: c => String(((c.compute && c.compute.node_pools) || []).reduce((n, p) => n + (p.node_count || 0) * (p.accelerator_count || 0), 0))},
    {title: 'Pools', get: c => ((c.compute && c.compute.node_pools) || []).map(p => p.id + ' (' + (p.node_count || 0) + ' × ' + p.machine_type + ')').join(', ')},
    {title: 'Health', get: c => {
      return healthText(extra[clusters.indexOf(c)] || NOT_READ, null);
    }},
    {title: 'Goodput', class: 'n', get: c => {
      const e = extra[clusters.indexOf(c)] || NOT_READ;
      if (e.unread) return 'not read';
      const g = e.goodput;
      return g && g.jobs ? pct(g.goodput) : null;
    }},
    {title: 'Message', class: 'wrap', get: c => (c.status || {}).message},
  ], clusters);
}

function clusterCard(c, e) {
  const {goodput} = e;
  const st = c.status || {};
  const pools = (c.compute && c.compute.node_pools) || [];
  const poolStatus = Object.fromEntries((st.node_pools || []).map(p => [p.id, p]));
  const gpus = pools.reduce((n, p) => n + (p.node_count || 0) * (p.accelerator_count || 0), 0);
  return h('section', {class: 'card cluster'},
    h('h2', null, short(c.name), ' ', badge(st.state)),
    st.message ? h('p', {class: 'muted'}, st.message) : null,
    kv([
      ['Nodes ready', (st.ready_nodes || 0) + ' of ' + (st.total_nodes || 0)],
      ['GPUs', gpus ? String(gpus) : '0'],
      ['Health', healthText(e, 'no nodes reported')],
      ['Goodput', e.unread ? 'not read' : goodput && goodput.jobs ? pct(goodput.goodput) + ' over ' + goodput.jobs + ' jobs (' + (goodput.failures || 0) + ' failures, ' + (goodput.restarts || 0) + ' restarts)' : 'no finished work yet'],
      ['Login node', st.login_node],
      ['Shared home', st.home_dir || st.shared_dir],
      ['Created', ago(c.create_time)],
    ]),
    table([
      {title: 'Pool', get: p => p.id},
      {title: 'Machine', get: p => p.machine_type},
      {title: 'Accelerators', get: p => p.accelerator_count ? p.accelerator_count + ' × ' + (p.accelerator_type || 'GPU') : null},
      {title: 'Nodes', class: 'n', get: p => String(p.node_count || 0)},
      {title: 'Ready', class: 'n', get: p => poolStatus[p.id] ? String(poolStatus[p.id].ready || 0) : null},
      {title: 'Failed', class: 'n', get: p => poolStatus[p.id] ? String(poolStatus[p.id].failed || 0) : null},
      {title: 'Capacity', get: p => p.capacity ? (p.capacity.type || '') + (p.capacity.reservation ? ' ' + p.capacity.reservation : '') : 'ON_DEMAND'},
      {title: 'Zone', get: p => p.zone},
    ], pools, 'No node pools.'),
    partitionTable(c),
    (st.conditions || []).length ? table([
      {title: 'Condition', get: x => x.type},
      {title: 'Status', get: x => x.status},
      {title: 'Reason', get: x => x.reason},
      {title: 'Message', get: x => x.message},
      {title: 'Since', get: x => ago(x.last_transition_time)},
    ], st.conditions) : null,
    h('p', null, link('Nodes of ' + short(c.name) + ' →', 'nodes', short(c.name))));
}

// partitionTable is a cluster's Slurm partitions with their state, as
// sinfo's AVAIL shows it: the spec stores UP as empty, and DOWN (jobs wait),
// DRAIN (no new jobs) and INACTIVE (neither) are what `scontrol update
// PartitionName=P State=…` sets.
function partitionTable(c) {
  const parts = (c.orchestrator && c.orchestrator.slurm && c.orchestrator.slurm.partitions) || [];
  return table([
    {title: 'Partition', get: p => p.id + (p.default ? '*' : '')},
    {title: 'State', class: 'state', get: p => badge(partitionState(p))},
    {title: 'Node sets', class: 'wrap', get: p => (p.node_set_ids || []).join(', ')},
    {title: 'Max time', get: p => p.max_time || 'UNLIMITED'},
    {title: 'Priority tier', class: 'n', get: p => String(p.priority_tier || 0)},
  ], parts, 'No Slurm partitions.', p => 'partition');
}

// partitionState is a partition's state in upper case, UP when unset.
function partitionState(p) {
  return String((p && p.state) || 'UP').toUpperCase();
}

function capacityTable(pools) {
  return table([
    {title: 'Zone', get: p => p.zone},
    {title: 'Machine', get: p => p.machine_type},
    {title: 'Source', get: p => p.type},
    {title: 'Reservation', get: p => short(p.reservation)},
    {title: 'Total', class: 'n', get: p => num(p.total || 0)},
    {title: 'In use', class: 'n', get: p => num(p.in_use || 0)},
    {title: 'Free', class: 'n', get: p => num(p.free || 0)},
  ], pools);
}

export function pct(x) {
  return x == null ? null : (Math.round(Number(x) * 1000) / 10) + '%';
}
