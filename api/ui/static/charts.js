// reviewledger charts: line and bar charts drawn as SVG in the page, for
// the SLO dashboard. No library and no markup from data: every node is
// built with createElementNS and textContent. Each chart comes with the
// same numbers as a table for screen readers, and with a title per step
// that browsers show on hover.
'use strict';

(function () {
  const NS = 'http://www.w3.org/2000/svg';
  const HEIGHT = 210;
  const PAD = { top: 14, right: 64, bottom: 30, left: 60 };

  function svg(tag, attrs, ...children) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) e.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function html(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  function finite(v) { return typeof v === 'number' && isFinite(v); }

  // niceStep returns a round tick step (1, 2 or 5 × 10^n) giving about n
  // ticks over span.
  function niceStep(span, n) {
    const raw = span / Math.max(1, n);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (raw <= m * mag) return m * mag;
    return 10 * mag;
  }

  // range returns {min, max, ticks} covering values (and the extra
  // values, such as a reference line), with round ticks.
  function range(values, axis) {
    let lo = finite(axis.min) ? axis.min : Infinity;
    let hi = finite(axis.max) ? axis.max : -Infinity;
    for (const v of values) {
      if (!finite(v)) continue;
      if (!finite(axis.min)) lo = Math.min(lo, v);
      if (!finite(axis.max)) hi = Math.max(hi, v);
    }
    if (!isFinite(lo) || !isFinite(hi)) { lo = 0; hi = 1; }
    if (finite(axis.floor)) lo = Math.max(axis.floor, lo);
    if (finite(axis.minSpan) && hi - lo < axis.minSpan) {
      if (finite(axis.max)) lo = hi - axis.minSpan; else hi = lo + axis.minSpan;
    }
    if (hi <= lo) hi = lo + 1;
    const step = axis.integer ? Math.max(1, niceStep(hi - lo, 4)) : niceStep(hi - lo, 4);
    const min = finite(axis.min) ? lo : Math.floor(lo / step) * step;
    const max = finite(axis.max) ? hi : Math.ceil(hi / step) * step;
    const ticks = [];
    for (let t = Math.ceil(min / step) * step; t <= max + step / 1e6; t += step) ticks.push(Math.round(t / step) * step);
    return { min, max, ticks };
  }

  function pad2(n) { return String(n).padStart(2, '0'); }

  // timeLabel is a step's start in UTC: HH:MM within a day, else MM-DD HH:MM.
  function timeLabel(d, long) {
    const hm = pad2(d.getUTCHours()) + ':' + pad2(d.getUTCMinutes());
    return long ? pad2(d.getUTCMonth() + 1) + '-' + pad2(d.getUTCDate()) + ' ' + hm : hm;
  }

  // lineChart draws, into box (an element emptied first), the series of
  // opts over its steps:
  //   steps:  [{from: Date, to: Date}]
  //   series: [{label, cls, values: [number|null], axis: 'left'|'right'}]
  //   left, right: {format(v), min?, max?, floor?, minSpan?, label}
  //   refs:   [{value, label, cls, axis}]: horizontal reference lines
  //   title:  the chart's accessible name; table: the caption of its table
  function lineChart(box, opts) {
    box.replaceChildren();
    const steps = opts.steps;
    const n = steps.length;
    const width = Math.max(240, Math.round(box.clientWidth || 640));
    const plotW = width - PAD.left - PAD.right;
    const plotH = HEIGHT - PAD.top - PAD.bottom;
    const axes = {};
    for (const side of ['left', 'right']) {
      const ax = opts[side];
      if (!ax) continue;
      const vals = [];
      for (const s of opts.series) if ((s.axis || 'left') === side) vals.push(...s.values);
      for (const r of opts.refs || []) if ((r.axis || 'left') === side) vals.push(r.value);
      axes[side] = Object.assign({}, ax, range(vals, ax));
    }
    const x = (i) => PAD.left + (n <= 1 ? plotW / 2 : (i / (n - 1)) * plotW);
    const y = (side, v) => {
      const a = axes[side];
      const f = (Math.min(a.max, Math.max(a.min, v)) - a.min) / (a.max - a.min);
      return PAD.top + (1 - f) * plotH;
    };
    const root = svg('svg', {
      class: 'chart-svg', viewBox: '0 0 ' + width + ' ' + HEIGHT, width: width, height: HEIGHT,
      role: 'img', 'aria-label': opts.title, focusable: 'false',
    });
    root.append(svg('title', null, opts.title));
    // Grid and axes.
    const grid = svg('g', { class: 'grid' });
    for (const side of ['left', 'right']) {
      const a = axes[side];
      if (!a) continue;
      for (const t of a.ticks) {
        const ty = y(side, t);
        if (side === 'left') grid.append(svg('line', { x1: PAD.left, x2: PAD.left + plotW, y1: ty, y2: ty }));
        grid.append(svg('text', {
          class: 'tick', x: side === 'left' ? PAD.left - 6 : PAD.left + plotW + 6, y: ty + 4,
          'text-anchor': side === 'left' ? 'end' : 'start',
        }, a.format(t)));
      }
    }
    const long = n > 0 && steps[n - 1].to - steps[0].from > 24 * 3600 * 1000;
    const every = Math.max(1, Math.ceil(n / Math.max(2, Math.floor(plotW / (long ? 110 : 70)))));
    for (let i = 0; i < n; i += every) {
      grid.append(svg('text', { class: 'tick', x: x(i), y: HEIGHT - 8, 'text-anchor': 'middle' }, timeLabel(steps[i].from, long)));
    }
    grid.append(svg('line', { class: 'axis', x1: PAD.left, x2: PAD.left + plotW, y1: PAD.top + plotH, y2: PAD.top + plotH }));
    root.append(grid);
    for (const r of opts.refs || []) {
      const side = r.axis || 'left';
      if (!axes[side] || !finite(r.value)) continue;
      const ry = y(side, r.value);
      root.append(svg('line', { class: 'ref ' + (r.cls || ''), x1: PAD.left, x2: PAD.left + plotW, y1: ry, y2: ry }));
      root.append(svg('text', { class: 'ref-label ' + (r.cls || ''), x: PAD.left + plotW - 4, y: ry - 4, 'text-anchor': 'end' }, r.label));
    }
    // Lines, broken where a step has no value; a lone value is a dot.
    for (const s of opts.series) {
      const side = s.axis || 'left';
      let d = '';
      let run = 0;
      const dots = svg('g', { class: 'dots ' + s.cls });
      s.values.forEach((v, i) => {
        if (!finite(v)) { run = 0; return; }
        d += (run === 0 ? 'M' : 'L') + x(i).toFixed(1) + ' ' + y(side, v).toFixed(1) + ' ';
        const next = s.values[i + 1];
        if (run === 0 && !finite(next)) dots.append(svg('circle', { cx: x(i).toFixed(1), cy: y(side, v).toFixed(1), r: 2.5 }));
        run++;
      });
      root.append(svg('path', { class: 'line ' + s.cls, d: d.trim() || 'M0 0', 'data-series': s.label, 'data-points': s.values.filter(finite).length }));
      root.append(dots);
    }
    // A column per step, whose title gives every value on hover.
    const hover = svg('g', { class: 'hover' });
    const colW = n <= 1 ? plotW : plotW / (n - 1);
    steps.forEach((st, i) => {
      const lines = [timeLabel(st.from, true) + '–' + timeLabel(st.to, false) + ' UTC'];
      for (const s of opts.series) {
        const ax = opts[s.axis || 'left'];
        lines.push(s.label + ': ' + (finite(s.values[i]) ? ax.format(s.values[i]) : 'no data'));
      }
      hover.append(svg('rect', { x: (x(i) - colW / 2).toFixed(1), y: PAD.top, width: Math.max(1, colW).toFixed(1), height: plotH },
        svg('title', null, lines.join('\n'))));
    });
    root.append(hover);
    box.append(root);
    box.append(legend(opts.series.map((s) => ({ label: s.label + (s.axis === 'right' && opts.right.label ? ' (' + opts.right.label + ', right)' : ''), cls: s.cls }))
      .concat((opts.refs || []).map((r) => ({ label: r.label, cls: 'ref ' + (r.cls || '') })))));
    box.append(table(opts.table, ['Step (UTC)'].concat(opts.series.map((s) => s.label)),
      steps.map((st, i) => [timeLabel(st.from, true) + '–' + timeLabel(st.to, false)].concat(opts.series.map((s) => {
        const ax = opts[s.axis || 'left'];
        return finite(s.values[i]) ? ax.format(s.values[i]) : 'no data';
      })))));
  }

  // barChart draws stacked bars: one bar per bucket, one stack per series.
  //   buckets: [{label}] ; series: [{label, cls, values: [number]}]
  function barChart(box, opts) {
    box.replaceChildren();
    const n = opts.buckets.length;
    const width = Math.max(240, Math.round(box.clientWidth || 640));
    const plotW = width - PAD.left - 16;
    const plotH = HEIGHT - PAD.top - PAD.bottom;
    const totals = opts.buckets.map((_, i) => opts.series.reduce((a, s) => a + (s.values[i] || 0), 0));
    const ax = range(totals, { min: 0, minSpan: 1, integer: true, format: opts.format });
    const y = (v) => PAD.top + (1 - v / ax.max) * plotH;
    const root = svg('svg', {
      class: 'chart-svg', viewBox: '0 0 ' + width + ' ' + HEIGHT, width: width, height: HEIGHT,
      role: 'img', 'aria-label': opts.title, focusable: 'false',
    });
    root.append(svg('title', null, opts.title));
    const grid = svg('g', { class: 'grid' });
    for (const t of ax.ticks) {
      grid.append(svg('line', { x1: PAD.left, x2: PAD.left + plotW, y1: y(t), y2: y(t) }));
      grid.append(svg('text', { class: 'tick', x: PAD.left - 6, y: y(t) + 4, 'text-anchor': 'end' }, opts.format(t)));
    }
    const slot = Math.min(plotW / Math.max(1, n), 64);
    const every = Math.max(1, Math.ceil(n / Math.max(2, Math.floor(plotW / 64))));
    opts.buckets.forEach((b, i) => {
      if (i % every === 0) grid.append(svg('text', { class: 'tick', x: PAD.left + slot * (i + 0.5), y: HEIGHT - 8, 'text-anchor': 'middle' }, b.label));
    });
    root.append(grid);
    const bars = svg('g', { class: 'bars' });
    opts.buckets.forEach((b, i) => {
      let base = 0;
      const lines = [b.title || b.label];
      for (const s of opts.series) {
        const v = s.values[i] || 0;
        lines.push(s.label + ': ' + opts.format(v));
        if (v <= 0) continue;
        bars.append(svg('rect', {
          class: 'col ' + s.cls, x: (PAD.left + slot * i + slot * 0.1).toFixed(1), width: Math.max(1, slot * 0.8).toFixed(1),
          y: y(base + v).toFixed(1), height: Math.max(0.5, y(base) - y(base + v)).toFixed(1),
        }));
        base += v;
      }
      bars.append(svg('rect', { class: 'hit', x: (PAD.left + slot * i).toFixed(1), y: PAD.top, width: slot.toFixed(1), height: plotH },
        svg('title', null, lines.join('\n'))));
    });
    root.append(bars);
    root.append(svg('line', { class: 'axis', x1: PAD.left, x2: PAD.left + plotW, y1: PAD.top + plotH, y2: PAD.top + plotH }));
    box.append(root);
    box.append(legend(opts.series));
    box.append(table(opts.table, [opts.bucketHeader].concat(opts.series.map((s) => s.label)),
      opts.buckets.map((b, i) => [b.title || b.label].concat(opts.series.map((s) => opts.format(s.values[i] || 0))))));
  }

  function legend(items) {
    const ul = html('ul', { class: 'legend', 'aria-hidden': 'true' });
    for (const it of items) ul.append(html('li', null, html('span', { class: 'swatch ' + it.cls }), it.label));
    return ul;
  }

  function table(caption, head, rows) {
    // The wrapper is what is visually hidden: a table keeps its content's
    // width whatever width it is given, and would widen the page.
    const t = html('table', { class: 'chart-data' }, html('caption', { text: caption }));
    const tr = html('tr');
    for (const h of head) tr.append(html('th', { scope: 'col', text: h }));
    t.append(html('thead', null, tr));
    const body = html('tbody');
    for (const r of rows) {
      const row = html('tr');
      r.forEach((c, i) => row.append(html(i === 0 ? 'th' : 'td', i === 0 ? { scope: 'row', text: c } : { text: c })));
      body.append(row);
    }
    t.append(body);
    return html('div', { class: 'sr-only' }, t);
  }

  window.reviewledgerCharts = { lineChart, barChart };
}());
