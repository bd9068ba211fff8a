// Charts: line charts with uPlot (vendored, pinned; see vendor/README.md),
// and two small SVG drawings of our own: parallel coordinates and a graph.
import uPlot from '../vendor/uplot/uPlot.esm.js';
import {h, s} from './dom.js';

const PALETTE = ['#2563eb', '#dc2626', '#16a34a', '#d97706', '#7c3aed', '#0891b2', '#be185d', '#4b5563'];
export const color = i => PALETTE[i % PALETTE.length];

// MAX_POINTS bounds one chart's x values (the API downsamples before this).
const MAX_POINTS = 20000;

// lineChart draws series [{label, points: [[x, y], ...]}] and returns its
// element. opts: {title, xLabel, yLabel, time (x is unix seconds), height,
// steps (draw as steps)}.
export function lineChart(series, opts = {}) {
  const el = h('div', {class: 'chart'});
  const xs = [...new Set(series.flatMap(sr => sr.points.map(p => p[0])))].sort((a, b) => a - b).slice(0, MAX_POINTS);
  const index = new Map(xs.map((x, i) => [x, i]));
  const data = [xs];
  for (const sr of series) {
    const ys = new Array(xs.length).fill(null);
    for (const [x, y] of sr.points) if (index.has(x)) ys[index.get(x)] = y == null ? null : Number(y);
    data.push(ys);
  }
  const make = () => {
    const width = Math.max(280, Math.floor(el.getBoundingClientRect().width || 560));
    const u = new uPlot({
      title: opts.title,
      width,
      height: opts.height || 220,
      // One sample (a dashboard's first scrape) would stretch a time axis
      // over years: it gets a minute either side instead.
      scales: {x: xs.length === 1 && opts.time ? {time: true, range: () => [xs[0] - 60, xs[0] + 60]} : {time: !!opts.time}},
      legend: {live: false},
      axes: [opts.intX ? {label: opts.xLabel, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000], values: (u, v) => v.map(x => Number.isInteger(x) ? String(x) : '')} : {label: opts.xLabel},
        {label: opts.yLabel, size: 60}],
      series: [{label: opts.xLabel || 'x'}, ...series.map((sr, i) => ({
        label: sr.label, stroke: sr.color || color(i), width: 2, spanGaps: true,
        points: {show: xs.length < 60},
        paths: opts.steps && i === series.length - 1 ? uPlot.paths.stepped({align: 1}) : undefined,
      }))],
    }, data, el);
    return u;
  };
  // Drawn once the element is in the page (its width is known).
  requestAnimationFrame(() => { if (el.isConnected) make(); else setTimeout(() => el.isConnected && make(), 50); });
  return el;
}

// stat is a single-value tile.
export function stat(title, value, unit) {
  return h('div', {class: 'stat'}, h('div', {class: 'stat-value'}, value == null ? '–' : value + (unit ? ' ' + unit : '')), h('div', {class: 'stat-title'}, title));
}

// parallel draws parallel coordinates: one vertical axis per dimension
// [{id, values: [..per row..], categorical?}], one polyline per row,
// coloured by the last dimension (the objective): best rows darkest.
// Returns an SVG element.
export function parallel(dims, rowCount, {goal = 'MAXIMIZE', highlight = -1} = {}) {
  const W = 760, H = 300, pad = 70, top = 30, bottom = 40;
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, class: 'parallel', role: 'img', 'aria-label': 'parallel coordinates of hyperparameters against the objective'});
  const step = (W - 2 * pad) / Math.max(1, dims.length - 1);
  const scales = dims.map(d => scaleOf(d));
  const obj = dims[dims.length - 1];
  const oScale = scales[scales.length - 1];
  const order = [...Array(rowCount).keys()].sort((a, b) => tone(a) - tone(b));
  function tone(r) {
    const v = oScale.norm(obj.values[r]);
    return v == null ? -1 : goal === 'MINIMIZE' ? 1 - v : v;
  }
  for (const r of order) {
    const pts = dims.map((d, i) => {
      const v = scales[i].norm(d.values[r]);
      return v == null ? null : [pad + i * step, H - bottom - v * (H - top - bottom)];
    });
    if (pts.some(p => p == null)) continue;
    const t = tone(r);
    svg.append(s('polyline', {
      points: pts.map(p => p.join(',')).join(' '),
      fill: 'none',
      stroke: r === highlight ? '#dc2626' : `hsl(220, 80%, ${Math.round(85 - 50 * Math.max(0, t))}%)`,
      'stroke-width': r === highlight ? 3 : 1.5,
    }, s('title', null, 'row ' + (r + 1))));
  }
  dims.forEach((d, i) => {
    const x = pad + i * step;
    svg.append(s('line', {x1: x, x2: x, y1: top, y2: H - bottom, stroke: '#374151'}));
    svg.append(s('text', {x, y: H - bottom + 16, 'text-anchor': 'middle', class: 'axis-label'}, d.id));
    svg.append(s('text', {x, y: top - 8, 'text-anchor': 'middle', class: 'axis-tick'}, scales[i].hiLabel));
    svg.append(s('text', {x, y: H - bottom + 30, 'text-anchor': 'middle', class: 'axis-tick'}, scales[i].loLabel));
  });
  return svg;
}

function scaleOf(d) {
  const nums = d.values.map(Number).filter(v => isFinite(v));
  if (!d.categorical && nums.length === d.values.filter(v => v != null).length && nums.length > 0) {
    const lo = Math.min(...nums), hi = Math.max(...nums);
    const logish = lo > 0 && hi / lo > 50;
    const f = v => logish ? Math.log(v) : v;
    return {
      norm: v => (v == null || !isFinite(Number(v))) ? null : hi === lo ? 0.5 : (f(Number(v)) - f(lo)) / (f(hi) - f(lo)),
      loLabel: fmt(lo), hiLabel: fmt(hi),
    };
  }
  const cats = [...new Set(d.values.filter(v => v != null).map(String))].sort();
  return {
    norm: v => v == null ? null : cats.length < 2 ? 0.5 : cats.indexOf(String(v)) / (cats.length - 1),
    loLabel: cats[0] || '', hiLabel: cats[cats.length - 1] || '',
  };
}

function fmt(v) {
  return Math.abs(v) >= 1000 || Math.abs(v) < 0.01 && v !== 0 ? v.toExponential(1) : String(Number(v.toPrecision(3)));
}

// graph draws a left-to-right chain of boxes [{kind, label, href?}] joined
// by arrows (lineage: version → trial → job → data). Returns an SVG element.
export function graph(nodes) {
  const bw = 170, bh = 54, gap = 46, W = nodes.length * bw + (nodes.length - 1) * gap + 20, H = bh + 20;
  const svg = s('svg', {viewBox: `0 0 ${W} ${H}`, class: 'lineage', role: 'img', 'aria-label': 'lineage graph',
    width: W, height: H});
  svg.append(s('defs', null, s('marker', {id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'},
    s('path', {d: 'M 0 0 L 10 5 L 0 10 z', fill: '#6b7280'}))));
  nodes.forEach((n, i) => {
    const x = 10 + i * (bw + gap), y = 10;
    const box = s('g', {class: 'node ' + n.kind},
      s('rect', {x, y, width: bw, height: bh, rx: 8}),
      s('text', {x: x + 10, y: y + 20, class: 'node-kind'}, n.kind),
      s('text', {x: x + 10, y: y + 40, class: 'node-label'}, clip(n.label, 22)),
      s('title', null, n.title || n.label));
    if (n.href) {
      const a = s('a', {href: n.href}, box);
      svg.append(a);
    } else svg.append(box);
    if (i < nodes.length - 1) {
      svg.append(s('line', {x1: x + bw, y1: y + bh / 2, x2: x + bw + gap - 2, y2: y + bh / 2, stroke: '#6b7280', 'stroke-width': 2, 'marker-end': 'url(#arrow)'}));
    }
  });
  return svg;
}

function clip(t, n) {
  t = String(t || '');
  return t.length > n ? t.slice(0, n - 1) + '…' : t;
}
