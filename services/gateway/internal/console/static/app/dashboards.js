// Dashboards: each service's panels from /v1/dashboards/{service} (the same
// definitions Grafana's dashboards are generated from), drawn with uPlot,
// refreshed every 15 s.
import {h, fill, notice, section} from './dom.js';
import {lineChart, stat} from './charts.js';
import * as api from './api.js';

// MAX_PANELS bounds the panels one page draws.
const MAX_PANELS = 60;

function unavailable(path) {
  return notice('info', 'Dashboards are not available on this gateway (GET ' + path + ' answered 404). ',
    'They appear here once the gateway serves /v1/dashboards.');
}

export async function dashboardsPage(ctx, service) {
  const status = h('div', {class: 'status'});
  const tabs = h('nav', {class: 'tabs'});
  const body = h('div');
  fill(ctx.main, h('h1', null, 'Dashboards'), tabs, status, body);
  // The list of dashboards is read inside the poll, so that a failure at
  // open (a 503 while the gateway starts) is retried, not shown forever.
  let listed = false;
  api.poll(async () => {
    if (!listed) {
      const all = await api.tryGet('/v1/dashboards', ctx.signal);
      if (ctx.signal.aborted) return api.STOP;
      if (all == null) {
        fill(body, unavailable('/v1/dashboards'));
        ctx.main.dataset.ready = 'dashboards';
        return api.STOP;
      }
      const ds = all.dashboards || [];
      if (ds.length === 0) {
        fill(body, notice('info', 'No dashboards defined.'));
        ctx.main.dataset.ready = 'dashboards';
        return api.STOP;
      }
      service = service || ds[0].service;
      fill(tabs, ds.map(d => h('a', {href: '#/dashboards/' + encodeURIComponent(d.service), class: d.service === service ? 'active' : null}, d.title || d.service)));
      listed = true;
    }
    const d = await api.get('/v1/dashboards/' + encodeURIComponent(service), ctx.signal);
    if (ctx.signal.aborted) return;
    const panels = (d.panels || []).slice(0, MAX_PANELS);
    const stats = panels.filter(p => p.kind === 'stat');
    const series = panels.filter(p => p.kind !== 'stat');
    fill(body,
      h('h2', null, d.title || service),
      stats.length ? h('div', {class: 'stats'}, stats.map(p => stat(p.title, lastValue(p), unitLabel(p.unit)))) : null,
      h('div', {class: 'panels'}, series.map(p => section(p.title + (unitLabel(p.unit) ? ' (' + unitLabel(p.unit) + ')' : ''),
        (p.series || []).some(s => (s.points || []).length)
          ? lineChart((p.series || []).slice(0, 12).map(s => ({label: s.legend || p.title, points: (s.points || []).map(([t, v]) => [Number(t), Number(v)])})), {time: true, height: 180})
          : h('p', {class: 'muted empty'}, 'No data yet.')))));
    ctx.main.dataset.ready = 'dashboards';
  }, ctx.signal, 15000, 120000, e => fill(status, e ? notice('error', api.failed(e, 'Refresh')) : null));
}

// UNITS turns Grafana's unit ids (the definitions' Unit) into what a person
// reads; a unit without a label ("none", "short": plain counts) shows none.
const UNITS = {none: '', short: '', reqps: 'per s', ops: 'per s', percentunit: 'ratio', s: 's', bytes: 'bytes'};

function unitLabel(u) {
  return u in UNITS ? UNITS[u] : (u || '');
}

function lastValue(p) {
  let v = null;
  for (const s of p.series || []) {
    const pts = s.points || [];
    if (pts.length) v = (v || 0) + Number(pts[pts.length - 1][1]);
  }
  if (v == null) return null;
  return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)));
}
