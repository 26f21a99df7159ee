// meshbench's live page: asks /api/board for what changed since the last answer (a long poll:
// the server answers as soon as a second lands), keeps the frames, and redraws the step, the
// tiles, six SVG charts and the steps table. No library, nothing loaded from elsewhere.
'use strict';

(() => {
  const HISTORY = 600; // frames kept, as the server keeps them
  const WAIT_MS = 5000; // how long the server may hold a poll
  const GIVE_UP_MS = 30000; // polls failing this long: the run's process is gone
  const SVGNS = 'http://www.w3.org/2000/svg';
  const PALETTE = ['#2563eb', '#16a34a', '#f59e0b', '#dc2626', '#7c3aed', '#0891b2', '#db2777', '#65a30d'];

  const state = {
    seq: 0, // the board's sequence number of the last answer
    frames: [], // oldest first
    view: null, // the last answer
    receivedAt: 0, // performance.now() when it came
    stopped: false,
    failingSince: 0,
  };

  const $ = (id) => document.getElementById(id);

  // ---- formatting --------------------------------------------------------------------------

  const fmtCount = (n) => Math.round(n).toLocaleString('en-US');
  const fmtRate = (v) => (v >= 100 ? fmtCount(v) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
  function fmtUs(us) {
    const ms = us / 1000;
    if (ms >= 1000) return (ms / 1000).toFixed(2) + ' s';
    if (ms >= 100) return ms.toFixed(0) + ' ms';
    if (ms >= 10) return ms.toFixed(1) + ' ms';
    if (ms >= 1) return ms.toFixed(2) + ' ms';
    return ms.toFixed(3) + ' ms';
  }
  const fmtMs = (ms) => fmtUs(ms * 1000);
  // Axis labels: as many decimals as the step between ticks needs.
  const decimals = (step) => Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9)));
  const tickPlain = (v, step) => v.toLocaleString('en-US', { maximumFractionDigits: decimals(step) });
  const tickMs = (v, step) => (v >= 1000 && step >= 1000 ? tickPlain(v / 1000, step / 1000) + ' s' : tickPlain(v, step) + ' ms');
  function fmtSecs(s) {
    s = Math.max(0, Math.round(s));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
    return Math.floor(s / 3600) + 'h' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + 'm';
  }
  function fmtBytes(b) {
    const mib = b / 1048576;
    return mib >= 1024 ? (mib / 1024).toFixed(2) + ' GiB' : mib.toFixed(mib >= 100 ? 0 : 1) + ' MiB';
  }
  const fmtPct = (x) => (x === 0 ? '0 %' : x < 0.001 ? '<0.1 %' : (x * 100).toFixed(1) + ' %');
  function fmtClock(ms) {
    const d = new Date(ms);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map((x) => String(x).padStart(2, '0')).join(':');
  }
  const stepText = (s) => `step ${s.number}/${s.steps} · ${s.scope.variant} · ${s.load}`;
  const sameScope = (a, b) => a.experiment === b.experiment && a.step === b.step && a.variant === b.variant;

  function setText(id, text) {
    const el = $(id);
    if (el.textContent !== text) el.textContent = text;
    return el;
  }

  // ---- charts ------------------------------------------------------------------------------

  function svgEl(name, attrs, parent) {
    const el = document.createElementNS(SVGNS, name);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    if (parent) parent.appendChild(el);
    return el;
  }

  // Round steps for an axis: 1, 2 or 5 times a power of ten.
  function niceStep(span, ticks) {
    const raw = span / Math.max(1, ticks);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }

  // Draws series over the frames' wall-clock times. Each series has a name, a color, a value
  // per frame (null for none) and a formatter; lines break between steps and over gaps.
  function drawChart(svgId, legendId, frames, series, opts) {
    const svg = $(svgId);
    const W = Math.max(200, svg.clientWidth || 600);
    const H = Math.max(120, svg.clientHeight || 200);
    const m = { l: 58, r: 12, t: 16, b: 22 };
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    svg.replaceChildren();
    const legend = $(legendId);
    legend.replaceChildren();
    const fmt = opts.fmt;
    const all = [];
    for (const s of series) for (const v of s.values) if (v !== null && Number.isFinite(v)) all.push(v);
    if (frames.length === 0 || series.length === 0 || (opts.log && !all.some((v) => v > 0))) {
      const t = svgEl('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' }, svg);
      t.textContent = frames.length === 0 ? 'waiting for the first measured second…' : opts.empty || 'nothing to draw';
      hovers.delete(svgId);
      delete legend.dataset.at;
      return;
    }
    // Each frame's time: a step's seconds are one second apart, whatever time each was
    // handed over at (the run may hand over two at once), counted from the step's first.
    const ts = [];
    let anchor = frames[0];
    frames.forEach((f, i) => {
      if (i > 0 && !sameScope(f.scope, frames[i - 1].scope)) anchor = f;
      ts.push(anchor.t_ms + (f.second - anchor.second) * 1000);
    });
    const t0 = ts[0] - 1000;
    const t1 = Math.max(ts[ts.length - 1], t0 + 5000);
    const x = (t) => m.l + ((t - t0) / (t1 - t0)) * (W - m.l - m.r);
    let y;
    const yTicks = [];
    if (opts.log) {
      const pos = all.filter((v) => v > 0);
      const lo = Math.pow(10, Math.floor(Math.log10(Math.min(...pos))));
      let hi = Math.pow(10, Math.ceil(Math.log10(Math.max(...pos))));
      if (hi <= lo) hi = lo * 10;
      const L0 = Math.log10(lo);
      const L1 = Math.log10(hi);
      y = (v) => H - m.b - ((Math.log10(Math.max(v, lo)) - L0) / (L1 - L0)) * (H - m.t - m.b);
      for (let d = lo; d <= hi * 1.0001; d *= 10) {
        for (const k of [1, 2, 5]) {
          if (d * k <= hi * 1.0001 && (L1 - L0 <= 3 || k === 1)) yTicks.push([d * k, d * k]);
        }
      }
    } else {
      let hi = Math.max(opts.minMax || 0, ...all);
      if (!(hi > 0)) hi = 1;
      const step = niceStep(hi, 5);
      hi = Math.ceil((hi * 1.05) / step) * step;
      y = (v) => H - m.b - (v / hi) * (H - m.t - m.b);
      for (let i = 0; i * step <= hi + step / 2; i++) yTicks.push([i * step, step]);
    }
    for (const [v, step] of yTicks) {
      const yy = y(v);
      svgEl('line', { x1: m.l, x2: W - m.r, y1: yy, y2: yy, class: 'grid' }, svg);
      const t = svgEl('text', { x: m.l - 6, y: yy + 4, 'text-anchor': 'end' }, svg);
      t.textContent = (opts.tick || tickPlain)(v, step);
    }
    const xStep = niceStep((t1 - t0) / 1000, Math.max(2, Math.floor((W - m.l - m.r) / 90))) * 1000;
    for (let t = Math.ceil(t0 / xStep) * xStep; t <= t1; t += xStep) {
      const xx = x(t);
      svgEl('line', { x1: xx, x2: xx, y1: H - m.b, y2: H - m.b + 4, class: 'axis' }, svg);
      const lab = svgEl('text', { x: xx, y: H - 6, 'text-anchor': 'middle' }, svg);
      lab.textContent = fmtClock(t);
    }
    svgEl('line', { x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, class: 'axis' }, svg);
    // Where each step begins.
    frames.forEach((f, i) => {
      if (i > 0 && sameScope(f.scope, frames[i - 1].scope)) return;
      const xx = x(ts[i] - 1000);
      svgEl('line', { x1: xx, x2: xx, y1: m.t - 4, y2: H - m.b, class: 'marker' }, svg);
      const lab = svgEl('text', { x: xx + 3, y: m.t - 5 }, svg);
      lab.textContent = 'step ' + (f.scope.step + 1);
    });
    const values = []; // the legend's value elements, by series
    for (const s of series) {
      let d = '';
      let pen = false;
      s.values.forEach((v, i) => {
        const f = frames[i];
        const prev = frames[i - 1];
        const broken = !prev || !sameScope(f.scope, prev.scope) || ts[i] - ts[i - 1] > 2500;
        if (v === null || !Number.isFinite(v) || (opts.log && !(v > 0))) {
          pen = false;
          return;
        }
        d += `${pen && !broken ? 'L' : 'M'}${x(ts[i]).toFixed(1)},${y(v).toFixed(1)}`;
        pen = true;
      });
      if (d) {
        // A lone point would draw nothing: a dot instead.
        const path = svgEl('path', { d, stroke: s.color, class: s.dashed ? 'series dashed' : 'series' }, svg);
        if (!/L/.test(d)) path.setAttribute('stroke-width', '4');
      }
      const last = [...s.values].reverse().find((v) => v !== null && Number.isFinite(v));
      const item = document.createElement('span');
      item.className = 'item';
      const sw = document.createElement('span');
      sw.className = s.dashed ? 'swatch dashed' : 'swatch';
      sw.style.background = s.color;
      sw.style.borderTopColor = s.color;
      const name = document.createElement('span');
      name.textContent = s.name;
      const val = document.createElement('b');
      val.textContent = last === undefined ? '–' : (s.fmt || fmt)(last);
      item.append(sw, name, val);
      legend.appendChild(item);
      values.push(val);
    }
    const cursor = svgEl('line', { x1: 0, x2: 0, y1: m.t, y2: H - m.b, class: 'cursor', visibility: 'hidden' }, svg);
    hovers.set(svgId, { frames, ts, series, values, fmt, x, cursor, legend, W });
    // Redrawn under the pointer: keep showing the second it points at.
    if (pointers.has(svgId)) hover(svgId, pointers.get(svgId));
    else delete legend.dataset.at;
  }

  // Hovering a chart: a cursor at the nearest second, and the legend shows that second's
  // values (and its time) instead of the last ones.
  const hovers = new Map();
  const pointers = new Map(); // the pointer's clientX over each chart
  function hover(svgId, clientX) {
    const h = hovers.get(svgId);
    if (!h || h.frames.length === 0) return;
    const box = $(svgId).getBoundingClientRect();
    const px = ((clientX - box.left) / box.width) * h.W;
    let best = 0;
    h.ts.forEach((t, i) => {
      if (Math.abs(h.x(t) - px) < Math.abs(h.x(h.ts[best]) - px)) best = i;
    });
    const xx = h.x(h.ts[best]);
    h.cursor.setAttribute('x1', xx);
    h.cursor.setAttribute('x2', xx);
    h.cursor.setAttribute('visibility', 'visible');
    h.series.forEach((s, i) => {
      const v = s.values[best];
      h.values[i].textContent = v === null || !Number.isFinite(v) ? '–' : (s.fmt || h.fmt)(v);
    });
    h.legend.dataset.at = `at ${fmtClock(h.ts[best])}, step ${h.frames[best].scope.step + 1}`;
  }
  function unhover(svgId) {
    const h = hovers.get(svgId);
    if (!h) return;
    h.cursor.setAttribute('visibility', 'hidden');
    h.series.forEach((s, i) => {
      const last = [...s.values].reverse().find((v) => v !== null && Number.isFinite(v));
      h.values[i].textContent = last === undefined ? '–' : (s.fmt || h.fmt)(last);
    });
    delete h.legend.dataset.at;
  }
  for (const svg of document.querySelectorAll('svg.chart')) {
    svg.addEventListener('mousemove', (e) => {
      pointers.set(svg.id, e.clientX);
      hover(svg.id, e.clientX);
    });
    svg.addEventListener('mouseleave', () => {
      pointers.delete(svg.id);
      unhover(svg.id);
    });
  }

  // Series for one value per role (CPU, memory), in a steady order.
  function roleSeries(frames, pick) {
    const roles = [];
    for (const f of frames) for (const r of f.roles) if (!roles.includes(r.role)) roles.push(r.role);
    roles.sort();
    return roles.map((role, i) => ({
      name: role,
      color: PALETTE[i % PALETTE.length],
      values: frames.map((f) => {
        const r = f.roles.find((x) => x.role === role);
        return r ? pick(r) : null;
      }),
    }));
  }

  function drawCharts() {
    const frames = state.frames;
    const hasTarget = frames.some((f) => f.target_rps !== null);
    const rate = [
      { name: 'completed', color: PALETTE[0], values: frames.map((f) => f.requests) },
      { name: 'sent', color: PALETTE[1], values: frames.map((f) => f.sends) },
    ];
    if (hasTarget) {
      rate.push({ name: 'target', color: '#6b7280', dashed: true, fmt: fmtRate, values: frames.map((f) => f.target_rps) });
    }
    drawChart('chart-rate', 'legend-rate', frames, rate, { fmt: fmtCount });

    const lat = [
      ['p50', 'p50_us', PALETTE[1]],
      ['p90', 'p90_us', PALETTE[0]],
      ['p99', 'p99_us', PALETTE[2]],
      ['p99.9', 'p999_us', PALETTE[3]],
    ].map(([name, key, color]) => ({
      name,
      color,
      values: frames.map((f) => (f[key] > 0 ? f[key] / 1000 : null)), // 0: no response that second
    }));
    drawChart('chart-latency', 'legend-latency', frames, lat, {
      fmt: fmtMs,
      tick: tickMs,
      log: true,
      empty: 'no response yet',
    });

    const kinds = [];
    for (const f of frames) for (const k of Object.keys(f.errors_by_kind)) if (!kinds.includes(k)) kinds.push(k);
    kinds.sort();
    const errs = kinds.map((k, i) => ({
      name: k.replace(/_/g, ' '),
      color: PALETTE[(i + 3) % PALETTE.length],
      values: frames.map((f) => f.errors_by_kind[k] || 0),
    }));
    if (errs.length === 0) {
      errs.push({ name: 'no errors', color: PALETTE[1], values: frames.map(() => 0) });
    }
    drawChart('chart-errors', 'legend-errors', frames, errs, { fmt: fmtCount, minMax: 1 });

    const lagged = frames.some((f) => f.target_rps !== null);
    drawChart(
      'chart-lag',
      'legend-lag',
      frames,
      lagged ? [{ name: 'lag p99', color: PALETTE[4], values: frames.map((f) => f.lag_p99_us / 1000) }] : [],
      { fmt: fmtMs, tick: tickMs, empty: 'a closed loop has no schedule to lag behind' },
    );

    const noRoles = 'no system under test is sampled (meshbench run measures only the client side)';
    const cpu = roleSeries(frames, (r) => r.cpu_millicores);
    drawChart('chart-cpu', 'legend-cpu', frames, cpu, {
      fmt: (v) => fmtCount(v) + 'm',
      tick: (v, step) => tickPlain(v, step) + 'm',
      empty: noRoles,
      minMax: 10,
    });
    const mem = roleSeries(frames, (r) => r.memory_bytes / 1048576);
    drawChart('chart-memory', 'legend-memory', frames, mem, {
      fmt: (mib) => fmtBytes(mib * 1048576),
      tick: (v, step) => tickPlain(v, step) + ' MiB',
      empty: noRoles,
      minMax: 1,
    });
  }

  // ---- the rest of the page ----------------------------------------------------------------

  function setStatus(kind, text) {
    setText('status', text).dataset.state = kind;
  }

  // The step shown: the one running, else the last one on the board.
  function shownStep(v) {
    return v.current || (v.steps.length ? v.steps[v.steps.length - 1] : null);
  }

  function drawTiles() {
    const f = state.frames[state.frames.length - 1];
    if (!f) return;
    document.body.dataset.seq = String(f.seq);
    setText('rps', fmtCount(f.requests)).dataset.value = String(f.requests);
    setText('sent', fmtCount(f.sends)).dataset.value = String(f.sends);
    setText('target', f.target_rps === null ? 'closed loop: no target' : `target ${fmtRate(f.target_rps)} req/s`);
    setText('p50', fmtUs(f.p50_us)).dataset.value = String(f.p50_us);
    setText('p99', fmtUs(f.p99_us)).dataset.value = String(f.p99_us);
    setText('p999', fmtUs(f.p999_us)).dataset.value = String(f.p999_us);
    const e = setText('errors', fmtCount(f.errors));
    e.dataset.value = String(f.errors);
    e.classList.toggle('bad', f.errors > 0);
    const kinds = Object.entries(f.errors_by_kind).map(([k, n]) => `${k.replace(/_/g, ' ')} ${fmtCount(n)}`);
    setText('errors-kinds', kinds.length ? kinds.join(', ') : 'none');
  }

  function drawSteps(v) {
    const body = $('steps').tBodies[0];
    body.replaceChildren();
    for (const s of v.steps) {
      const tr = document.createElement('tr');
      const running = v.current && sameScope(v.current.scope, s.scope);
      if (running) tr.className = 'running';
      const cells = [
        [`${s.number}/${s.steps}`],
        [s.scope.variant],
        [s.load],
        [running ? 'running' : s.finished ? 'finished' : 'starting'],
        [fmtCount(s.seconds), 'num'],
        [fmtCount(s.requests), 'num'],
        [s.requests ? `${fmtCount(s.errors)} (${fmtPct(s.errors / s.requests)})` : '–', 'num'],
        [s.requests ? fmtUs(s.p50_us) : '–', 'num'],
        [s.requests ? fmtUs(s.p99_us) : '–', 'num'],
        [s.requests ? fmtUs(s.p999_us) : '–', 'num'],
      ];
      for (const [text, cls] of cells) {
        const td = document.createElement('td');
        td.textContent = text;
        if (cls) td.className = cls;
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }

  function drawEnd(v) {
    const ended = $('ended');
    if (!v.done) {
      ended.hidden = true;
      return;
    }
    ended.hidden = false;
    setText('outcome', v.done.outcome);
    ended.classList.toggle('failed', v.done.outcome !== 'done');
    const link = $('report-link');
    if (v.done.report_url) {
      link.href = v.done.report_url;
      link.hidden = false;
      setText('report-path', v.done.report_path || '');
    } else {
      link.hidden = true;
      setText('report-path', 'no HTML report was written for this run');
    }
    document.title = 'meshbench live: ended (' + v.done.outcome + ')';
  }

  // Times left, counted down between answers with the server's clock.
  function tick() {
    const v = state.view;
    if (!v) return;
    const since = (performance.now() - state.receivedAt) / 1000;
    const s = shownStep(v);
    const inStep = v.current ? Math.max(0, v.current.left_in_step_secs - since) : 0;
    const inAll = v.done ? 0 : Math.max(0, v.left_in_all_secs - since);
    setText('left-step', v.done ? 'ended' : v.current ? fmtSecs(inStep) : 'between steps');
    setText('left-all', v.done ? 'ended' : fmtSecs(inAll));
    const bar = $('step-bar');
    if (s && s.step_secs > 0) {
      const frac = v.current ? 1 - inStep / s.step_secs : 1;
      bar.style.width = (Math.min(1, Math.max(0, frac)) * 100).toFixed(1) + '%';
    }
  }

  function draw() {
    const v = state.view;
    document.body.dataset.boardSeq = String(v.seq); // what the page shows is this answer
    const s = shownStep(v);
    if (s) {
      setText('experiment', s.scope.experiment);
      setText('step', stepText(s));
      setText('step-state', v.current ? 'running' : v.done ? 'the last step' : 'finished; the next step is starting');
      setText('step-seconds', fmtCount(s.seconds));
    }
    const f = state.frames[state.frames.length - 1];
    if (!v.done && f) document.title = `${fmtCount(f.requests)} req/s · ${s ? `step ${s.number}/${s.steps}` : ''} · meshbench live`;
    if (v.done) setStatus('ended', 'ended: ' + v.done.outcome);
    else if (v.current) setStatus('running', 'running');
    else if (s) setStatus('between', 'between steps');
    else setStatus('waiting', 'waiting for the first step');
    drawTiles();
    drawSteps(v);
    drawEnd(v);
    drawCharts();
    tick();
  }

  function take(v) {
    if (v.seq < state.seq) state.frames = []; // a new server: start over
    if (v.first_seq !== null) {
      state.frames = state.frames.filter((f) => f.seq >= v.first_seq);
    }
    for (const f of v.frames) state.frames.push(f);
    if (state.frames.length > HISTORY) state.frames.splice(0, state.frames.length - HISTORY);
    state.seq = v.seq;
    state.view = v;
    state.receivedAt = performance.now();
  }

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  async function poll() {
    while (!state.stopped) {
      let v;
      try {
        const r = await fetch(`/api/board?since=${state.seq}&wait=${WAIT_MS}`, { cache: 'no-store' });
        if (!r.ok) throw new Error('HTTP ' + r.status);
        v = await r.json();
      } catch (e) {
        const now = performance.now();
        if (!state.failingSince) state.failingSince = now;
        if (now - state.failingSince > GIVE_UP_MS) {
          setStatus('lost', 'meshbench stopped serving this page');
          state.stopped = true;
          return;
        }
        setStatus('lost', 'connection lost; retrying');
        await sleep(2000);
        continue;
      }
      state.failingSince = 0;
      take(v);
      draw();
      // Nothing changes after the end: stop asking (the run may stop serving at any time).
      if (v.done) state.stopped = true;
    }
  }

  let resizing = 0;
  window.addEventListener('resize', () => {
    cancelAnimationFrame(resizing);
    resizing = requestAnimationFrame(() => state.view && drawCharts());
  });
  setInterval(tick, 250);
  poll();
})();
