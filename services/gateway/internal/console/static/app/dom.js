// DOM helpers. Everything the API returns goes into the page through these:
// as text nodes and attribute values, never as HTML, so hostile names
// ("<script>…") are shown, not run.

const SVGNS = 'http://www.w3.org/2000/svg';

function put(el, props) {
  for (const [k, v] of Object.entries(props || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.setAttribute('class', v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'href' && !String(v).startsWith('#')) throw new Error('console: only in-page links: ' + v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function add(el, kids) {
  for (const k of kids.flat(Infinity)) {
    if (k == null || k === false) continue;
    el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return el;
}

// h makes an HTML element: h('td', {class: 'x'}, 'text', child, ...).
export function h(tag, props, ...kids) {
  const el = document.createElement(tag);
  put(el, props);
  return add(el, kids);
}

// s makes an SVG element.
export function s(tag, props, ...kids) {
  const el = document.createElementNS(SVGNS, tag);
  put(el, props);
  return add(el, kids);
}

// clear empties el and appends kids.
export function fill(el, ...kids) {
  el.replaceChildren();
  return add(el, kids);
}

// link is an in-page link to route parts (each part URL-encoded).
export function link(text, ...parts) {
  return h('a', {href: '#/' + parts.map(encodeURIComponent).join('/')}, text);
}

// table renders rows under columns [{title, get(row) → node|string, class?}].
// empty is what an empty table says.
export function table(columns, rows, empty = 'None.', rowClass) {
  if (!rows || rows.length === 0) return h('p', {class: 'muted empty'}, empty);
  return h('table', {class: 'grid'},
    h('thead', null, h('tr', null, columns.map(c => h('th', {class: c.class}, c.title)))),
    h('tbody', null, rows.map(r => h('tr', {class: rowClass ? rowClass(r) : null},
      columns.map(c => h('td', {class: c.class}, cell(c.get(r))))))));
}

function cell(v) {
  if (v == null || v === '') return '–';
  return v;
}

// badge shows a state, coloured by what it means.
export function badge(state) {
  const v = String(state || 'UNKNOWN');
  return h('span', {class: 'badge ' + tone(v)}, v.replace(/^(JOB_STATE_|PIPELINE_STATE_|REMEDIATION_STATE_|STATE_)/, ''));
}

function tone(v) {
  // INACTIVE (a Slurm partition that takes and starts no job) before ACTIVE.
  if (/FAIL|ERROR|DOWN|LOST|QUARANTIN|OUT_OF_MEMORY|TIMEOUT|INFEASIBLE|UNHEALTHY|DRAINED|INACTIVE/.test(v)) return 'bad';
  if (/PEND|QUEUED|PROVISION|CREATING|CONFIGUR|REQUEST|DRAIN|SUSPECT|REPAIR|REBOOT|REIMAG|REPLAC|UPDATING|STOPPING|CANCELLING|DELETING/.test(v)) return 'warn';
  if (/RUNNING|READY|SUCCEEDED|COMPLETED|HEALTHY|IDLE|ACTIVE|ALLOCATED|MIXED|^UP$/.test(v)) return 'good';
  return 'neutral';
}

// section is a titled block.
export function section(title, ...kids) {
  return h('section', {class: 'card'}, h('h2', null, title), ...kids);
}

// notice is a status line: kind is 'info', 'warn' or 'error'.
export function notice(kind, ...text) {
  return h('div', {class: 'notice ' + kind, role: kind === 'error' ? 'alert' : 'status'}, ...text);
}

// kv renders [label, value] pairs as a definition list.
export function kv(pairs) {
  return h('dl', {class: 'kv'}, pairs.filter(p => p).map(([k, v]) => [h('dt', null, k), h('dd', null, cell(v))]));
}

// ago is a timestamp as "3m ago", with the exact time as its title.
export function ago(ts) {
  if (!ts) return null;
  const t = Date.parse(ts);
  if (isNaN(t)) return String(ts);
  let d = Math.round((Date.now() - t) / 1000);
  const fut = d < 0;
  d = Math.abs(d);
  const txt = d < 60 ? d + 's' : d < 3600 ? Math.floor(d / 60) + 'm' : d < 86400 ? Math.floor(d / 3600) + 'h' : Math.floor(d / 86400) + 'd';
  return h('time', {datetime: ts, title: ts}, fut ? 'in ' + txt : txt + ' ago');
}

// dur formats a protobuf JSON duration ("12.5s") as "12.5 s", "3m 20s", "2h 5m".
export function dur(d) {
  if (d == null || d === '') return null;
  const x = parseFloat(String(d));
  if (!isFinite(x)) return String(d);
  if (x < 1) return Math.round(x * 1000) + ' ms';
  if (x < 60) return (Math.round(x * 10) / 10) + ' s';
  if (x < 3600) return Math.floor(x / 60) + 'm ' + Math.round(x % 60) + 's';
  return Math.floor(x / 3600) + 'h ' + Math.round((x % 3600) / 60) + 'm';
}

// short is the last segment of a resource name.
export function short(name) {
  if (!name) return '';
  const i = String(name).lastIndexOf('/');
  return i < 0 ? String(name) : String(name).slice(i + 1);
}

// num formats a number for a table.
export function num(v, digits = 4) {
  if (v == null || v === '') return null;
  const n = Number(v);
  if (!isFinite(n)) return String(v);
  if (Number.isInteger(n)) return String(n);
  return String(Number(n.toPrecision(digits)));
}

// cut is what a page says under a list that api.list read only part of
// (rows.more): how many it shows, in what order, and where the rest are;
// null when it has them all.
export function cut(rows, what, order, rest) {
  if (!rows || !rows.more) return null;
  return notice('warn', 'Showing the first ' + rows.length + ' ' + what + ' (' + order + '); there are more. ', rest);
}
