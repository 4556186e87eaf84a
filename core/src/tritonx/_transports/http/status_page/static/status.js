// tritonx status page: polls /status/data and draws plain SVG charts (no libraries).
"use strict";

(function () {
  const POLL_MS = 1000;
  const WINDOW_S = 300; // the charts show the last five minutes
  const SVG = "http://www.w3.org/2000/svg";
  const history = new Map(); // "name/version" -> [{t, rate, p50, p95, p99, mean, queue}]
  const previous = new Map(); // "name/version" -> {t, stats}
  let quantiles = false;
  // legend swatches by colour (classes: the page's CSP allows no inline styles)
  const KEY_CLASS = { "#2f6fde": "k1", "#d98a00": "k2", "#d64545": "k3", "#1f9d55": "k4" };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  }

  function fmt(x, digits) {
    if (x === null || x === undefined || !isFinite(x)) return "–";
    if (Math.abs(x) >= 1000) return x.toFixed(0);
    return x.toFixed(digits === undefined ? (Math.abs(x) < 10 ? 2 : 1) : digits);
  }

  function duration(s) {
    s = Math.floor(s);
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24;
    const m = Math.floor(s / 60) % 60, sec = s % 60;
    if (d) return `${d}d ${h}h ${m}m`;
    if (h) return `${h}h ${m}m ${sec}s`;
    if (m) return `${m}m ${sec}s`;
    return `${sec}s`;
  }

  function clock(t) {
    return new Date(t * 1000).toLocaleTimeString([], { hour12: false });
  }

  // ------------------------------------------------------------------ data

  function update(data) {
    quantiles = data.server.latency_summaries;
    const now = data.time;
    const seen = new Set();
    for (const m of data.models) {
      if (m.version === null || !m.stats) continue;
      const key = `${m.name}/${m.version}`;
      seen.add(key);
      const s = m.stats;
      const prev = previous.get(key);
      previous.set(key, { t: now, stats: s });
      if (!prev || now <= prev.t) continue;
      const dt = now - prev.t;
      const dn = s.success_count - prev.stats.success_count;
      if (dn < 0) continue; // unloaded and loaded again between two polls: counts restarted (a reload keeps them)
      const dq = s.queue_count - prev.stats.queue_count;
      const point = {
        t: now,
        rate: dn / dt,
        mean: dn > 0 ? (s.success_ms - prev.stats.success_ms) / dn : null,
        queue: dq > 0 ? (s.queue_ms - prev.stats.queue_ms) / dq : null,
        p50: null, p95: null, p99: null,
      };
      if (s.latency_quantiles_ms && dn > 0) {
        [point.p50, point.p95, point.p99] = s.latency_quantiles_ms;
      }
      const rows = history.get(key) || [];
      rows.push(point);
      while (rows.length && now - rows[0].t > WINDOW_S) rows.shift();
      history.set(key, rows);
    }
    for (const key of [...history.keys()]) if (!seen.has(key)) history.delete(key);
    for (const key of [...previous.keys()]) if (!seen.has(key)) previous.delete(key);
  }

  function last(key) {
    const rows = history.get(key);
    return rows && rows.length ? rows[rows.length - 1] : null;
  }

  // ------------------------------------------------------------------ rendering

  function renderServer(data) {
    const s = data.server;
    const box = document.getElementById("server");
    box.replaceChildren(
      el("b", {}, s.name), ` ${s.version} · tritonx ${s.tritonx_version} · up `,
      el("b", { id: "uptime" }, duration(s.uptime_s)),
      ` · ${s.ready ? "ready" : "not ready"}`
    );
    let rate = 0, pending = 0, ready = 0;
    for (const m of data.models) {
      if (m.state === "READY") ready += 1;
      if (m.stats) pending += m.stats.pending;
      const p = m.version !== null ? last(`${m.name}/${m.version}`) : null;
      if (p) rate += p.rate;
    }
    const total = new Set(data.models.map((m) => m.name)).size;
    const card = (label, value) =>
      el("div", { class: "card" }, el("div", { class: "label" }, label),
        el("div", { class: "value" }, value));
    const cards = [
      card("Models", String(total)),
      card("Ready versions", String(ready)),
      card("Requests / s", fmt(rate, 1)),
      card("Pending requests", String(pending)),
      card("Uptime", duration(s.uptime_s)),
    ];
    const r = data.residency;
    if (r) {  // --model-load-on-demand
      cards.push(card("Loaded models",
        r.max_loaded_models ? `${r.loaded_models} / ${r.max_loaded_models}` : String(r.loaded_models)));
      if (r.memory_budget_bytes) {
        cards.push(card("Model memory", `${bytes(r.memory_used_bytes)} / ${bytes(r.memory_budget_bytes)}`));
      }
      cards.push(card("Loads on demand · evictions", `${r.on_demand_loads} · ${r.evictions}`));
    }
    document.getElementById("totals").replaceChildren(...cards);
    document.getElementById("latency-head").textContent = quantiles ? "p99 (ms)" : "Mean (ms)";
    document.getElementById("window-note").textContent = quantiles
      ? "last 5 minutes · latency p50/p95/p99 over the last 60 s"
      : "last 5 minutes · mean latency per second (start with --metrics-config " +
        "summary_latencies=true for p50/p95/p99)";
  }

  function bytes(n) {
    if (n == null) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return `${fmt(n, i ? 1 : 0)} ${units[i]}`;
  }

  function configCell(cfg) {
    if (!cfg) return el("span", { class: "muted" }, "–");
    const kind = cfg.backend || cfg.platform || "-";
    return el("div", { class: "cfg" },
      el("b", {}, kind),
      ` · max batch ${cfg.max_batch_size} · ${cfg.instances} · ${cfg.scheduler}`,
      cfg.decoupled ? " · decoupled" : null,
      el("br"),
      `in: ${cfg.inputs.join(", ") || "-"}`, el("br"),
      `out: ${cfg.outputs.join(", ") || "-"}`);
  }

  function renderModels(data) {
    const body = document.querySelector("#models tbody");
    const rows = data.models.map((m) => {
      const key = `${m.name}/${m.version}`;
      const p = m.version !== null ? last(key) : null;
      const latency = p ? (quantiles ? p.p99 : p.mean) : null;
      return el("tr", { "data-model": m.name, "data-version": m.version ?? "" },
        el("td", {}, el("b", {}, m.name)),
        el("td", {}, m.version ?? "–"),
        el("td", {}, el("span", { class: `state ${m.state}` }, m.state),
          m.reason ? el("div", { class: "reason" }, m.reason) : null,
          m.memory_bytes != null ? el("div", { class: "reason" }, `memory ${bytes(m.memory_bytes)}`) : null,
          m.stats && m.stats.restarts ? el("div", { class: "reason restarts" },
            `instances restarted ${m.stats.restarts}×`) : null),
        el("td", {}, configCell(m.config)),
        el("td", { class: "num" }, p ? fmt(p.rate, 1) : "–"),
        el("td", { class: "num", title: quantiles ? "p99" : "mean" }, fmt(latency)),
        el("td", { class: "num" }, p ? fmt(p.queue) : "–"),
        el("td", { class: "num" }, m.stats ? m.stats.pending : "–"));
    });
    if (!rows.length) {
      rows.push(el("tr", {}, el("td", { colspan: "8", class: "empty" }, "no models")));
    }
    body.replaceChildren(...rows);
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // One line chart: series = [{name, color, values: [[t, y|null]...]}].
  function chart(series, now, unit) {
    const width = 420, height = 150, left = 44, right = 8, top = 8, bottom = 20;
    const node = svg("svg", { class: "chart", viewBox: `0 0 ${width} ${height}`,
      preserveAspectRatio: "none", role: "img" });
    let max = 0;
    for (const s of series) for (const [, y] of s.values) if (y !== null && y > max) max = y;
    max = niceMax(max);
    const x = (t) => left + (width - left - right) * (1 - (now - t) / WINDOW_S);
    const y = (v) => top + (height - top - bottom) * (1 - v / max);
    for (let i = 0; i <= 5; i++) {
      const v = (max * i) / 5;
      node.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: y(v), y2: y(v) }));
      const label = svg("text", { x: left - 4, y: y(v) + 3, "text-anchor": "end" });
      label.textContent = String(+v.toFixed(2)) + (i === 5 ? ` ${unit}` : "");
      node.append(label);
    }
    for (const ago of [300, 240, 180, 120, 60, 0]) {
      const label = svg("text", { x: x(now - ago), y: height - 5,
        "text-anchor": ago === 300 ? "start" : ago === 0 ? "end" : "middle" });
      label.textContent = ago ? `-${ago / 60}m` : "now";
      node.append(label);
    }
    node.append(svg("line", { class: "axis", x1: left, x2: width - right,
      y1: height - bottom, y2: height - bottom }));
    for (const s of series) {
      // split at gaps (no requests): a polyline per run of values
      let run = [];
      const flush = () => {
        if (run.length === 1) {
          node.append(svg("circle", { cx: run[0][0], cy: run[0][1], r: 2, fill: s.color }));
        } else if (run.length > 1) {
          const pts = run.map((p) => p.join(",")).join(" ");
          if (s.fill) {
            const area = `${run[0][0]},${y(0)} ${pts} ${run[run.length - 1][0]},${y(0)}`;
            node.append(svg("polygon", { class: "area", points: area, fill: s.color }));
          }
          node.append(svg("polyline", { points: pts, stroke: s.color }));
        }
        run = [];
      };
      for (const [t, v] of s.values) {
        if (v === null || v === undefined) flush();
        else run.push([x(t).toFixed(1), y(v).toFixed(1)]);
      }
      flush();
    }
    return node;
  }

  function legend(series) {
    return el("div", { class: "chart-title" }, ...series.map((s) =>
      el("span", { class: "key" }, el("i", { class: KEY_CLASS[s.color] }), s.name)));
  }

  function renderCharts(data) {
    const box = document.getElementById("charts");
    const cards = [];
    for (const m of data.models) {
      if (m.version === null || !m.stats) continue;
      const key = `${m.name}/${m.version}`;
      const rows = history.get(key) || [];
      const values = (f) => rows.map((r) => [r.t, f(r)]);
      const rateSeries = [{ name: "requests/s", color: "#2f6fde", fill: true,
        values: values((r) => r.rate) }];
      const latSeries = quantiles
        ? [
          { name: "p50", color: "#2f6fde", values: values((r) => r.p50) },
          { name: "p95", color: "#d98a00", values: values((r) => r.p95) },
          { name: "p99", color: "#d64545", values: values((r) => r.p99) },
          { name: "queue (mean)", color: "#1f9d55", values: values((r) => r.queue) },
        ]
        : [
          { name: "latency (mean)", color: "#2f6fde", values: values((r) => r.mean) },
          { name: "queue (mean)", color: "#1f9d55", values: values((r) => r.queue) },
        ];
      const p = last(key);
      cards.push(el("div", {
        class: "chart-card", "data-model": m.name, "data-version": String(m.version),
        "data-points": String(rows.length), "data-last-rate": p ? p.rate.toFixed(3) : "0",
      },
      el("h3", {}, m.name, el("span", { class: "muted" }, ` v${m.version}`)),
      legend(rateSeries), chart(rateSeries, data.time, "/s"),
      legend(latSeries), chart(latSeries, data.time, "ms")));
    }
    if (!cards.length) cards.push(el("div", { class: "empty" }, "no loaded model versions"));
    box.replaceChildren(...cards);
  }

  function renderEvents(data) {
    const list = document.getElementById("events");
    const items = data.events.slice().reverse().map((e) =>
      el("li", {}, el("time", {}, clock(e.time)),
        el("b", {}, e.version ? `${e.model} v${e.version}` : e.model), " → ",
        el("span", { class: `state ${e.state}` }, e.state),
        e.reason ? el("div", { class: "reason" }, e.reason) : null));
    if (!items.length) items.push(el("li", { class: "empty" }, "no events yet"));
    list.replaceChildren(...items);
  }

  // ------------------------------------------------------------------ polling

  const live = document.getElementById("live");
  const errorBox = document.getElementById("error");

  async function poll() {
    try {
      const response = await fetch("/status/data", { cache: "no-store" });
      const body = await response.json();
      if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
      update(body);
      renderServer(body);
      renderModels(body);
      renderCharts(body);
      renderEvents(body);
      errorBox.hidden = true;
      live.className = "live on";
      document.getElementById("updated").textContent = `updated ${clock(body.time)}`;
    } catch (err) {
      errorBox.hidden = false;
      errorBox.textContent = `Cannot read the server status: ${err.message}`;
      live.className = "live off";
      document.getElementById("updated").textContent = "disconnected";
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  poll();
})();
