// Training metrics over steps, from the metrics REST:
// GET /v1/{parent}/metrics and /v1/{parent}/metrics:read.
import {h, fill, section, notice} from './dom.js';
import {lineChart} from './charts.js';
import * as api from './api.js';

// MAX_SERIES bounds how many metrics one section draws.
const MAX_SERIES = 8;
const POINTS = 500;

// metricsSection returns a section charting every metric of parent (a
// job, CustomJob or trial). fallback, when given, is [{metric, points:
// [[step, value]]}] to draw when the metrics REST is not available (a
// trial's own measurements).
export async function metricsSection(ctx, parent, title, fallback) {
  const body = h('div', {class: 'charts'});
  const note = h('div');
  const sec = section(title, note, body);
  try {
    const idx = await api.tryGet('/v1/' + parent + '/metrics', ctx.signal);
    if (idx == null) {
      if (fallback && fallback.length) {
        fill(note, notice('info', 'The metrics API is not available on this gateway; showing the trial\'s reported measurements.'));
        fill(body, fallback.map(f => lineChart([{label: f.metric, points: f.points}], {title: f.metric, xLabel: 'step', intX: true})));
      } else {
        fill(note, notice('info', 'Training metrics are not available on this gateway (GET /v1/' + parent + '/metrics answered 404).'));
      }
      return sec;
    }
    const all = idx.series || [];
    const series = all.slice(0, MAX_SERIES);
    if (all.length > series.length) {
      const rest = all.slice(series.length).map(sr => sr.metric);
      fill(note, notice('warn', 'Showing ' + series.length + ' of ' + all.length + ' metrics; not drawn: ' +
        rest.slice(0, 10).join(', ') + (rest.length > 10 ? ', …' : '') + '. `loom metrics JOB --metric M` reads any one.'));
    }
    if (series.length === 0) {
      fill(body, h('p', {class: 'muted empty'}, 'No metrics recorded.'));
      return sec;
    }
    const reads = await Promise.all(series.map(sr => api.get('/v1/' + parent + '/metrics:read?metric=' + encodeURIComponent(sr.metric) + '&points=' + POINTS, ctx.signal)));
    fill(body, reads.map(r => lineChart([{label: r.metric, points: (r.points || []).map(p => [Number(p.step), p.value])}],
      {title: r.metric + (r.total > (r.points || []).length ? ' (' + r.total + ' points, downsampled)' : ''), xLabel: 'step', intX: true})));
  } catch (e) {
    fill(note, notice('error', 'Metrics: ' + e.message));
  }
  return sec;
}
