// The Slipstream operator console. Plain JS, no build step, no library.
// Safety rule: data from the gateway (request content above all) goes into the page only as text
// nodes or attribute values (el() below), never as HTML.
"use strict";

const S = { session: null, page: "fleet", timer: null, selected: null, recent: [], whatif: null, wiTimer: null };
const COLORS = ["#2456c9", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#0b7285"];
const SOURCE_COLORS = { measured: "#2456c9", reported: "#2b8a3e", estimated: "#adb5bd" };

function el(tag, attrs, ...children) {
  const svg = ["svg", "line", "polyline", "circle", "rect", "text", "g", "path", "title"].includes(tag);
  const node = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "onclick") node.addEventListener("click", v);
    else if (k === "text") node.textContent = String(v);
    else if (k === "color") node.style.color = v; // through the CSSOM: the page's CSP allows no style attributes
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
  return node;
}
const $ = (id) => document.getElementById(id);
const fmt = (v, d = 1) => (v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(d));
const pct = (v) => (v === null || v === undefined ? "–" : (v * 100).toFixed(1) + " %");
function ago(t) { const s = Math.max(0, Date.now() / 1000 - t); return s < 90 ? s.toFixed(0) + " s ago" : (s / 60).toFixed(1) + " min ago"; }
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

async function api(path, opts = {}) {
  const init = { credentials: "same-origin", headers: {} , ...opts };
  if (opts.body !== undefined) {
    init.method = opts.method || "POST";
    init.headers["content-type"] = "application/json";
    init.headers["x-csrf-token"] = S.session ? S.session.csrf : "";
    init.body = JSON.stringify(opts.body);
  }
  const r = await fetch("/console/api/" + path, init);
  if (r.status === 401) { location.reload(); throw new Error("signed out"); }
  const data = await r.json();
  if (!r.ok) throw new Error((data.error && data.error.message) || ("HTTP " + r.status));
  return data;
}

// --- charts: small SVG line charts with their data points ---------------------------------------
function lineChart(series, opts) {
  const W = opts.width || 300, H = opts.height || 120, L = 36, R = 6, T = 16, B = 18;
  const pts = series.flatMap((s) => s.points.filter((p) => p[1] !== null));
  const svg = el("svg", { class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-points": pts.length, role: "img", "aria-label": opts.title });
  svg.appendChild(el("text", { x: 4, y: 11 }, opts.title));
  if (!pts.length) { svg.appendChild(el("text", { x: W / 2 - 24, y: H / 2 + 4 }, "no data yet")); return svg; }
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs) > x0 ? Math.max(...xs) : x0 + 1;
  // One early outlier (a first prediction before the model learned anything) would flatten every
  // other point to the axis: past 3x the 90th percentile the scale stops, and such points sit on
  // the top edge as triangles, their value in the tooltip.
  const sorted = [...ys].sort((a, b) => a - b), p90 = sorted[Math.floor(0.9 * (sorted.length - 1))];
  const cap = sorted.length >= 5 && sorted.at(-1) > 3 * p90 && p90 > 0 ? 2 * p90 : sorted.at(-1);
  const y1 = cap * 1.1 || 1;
  const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R), Y = (y) => H - B - (Math.min(y, cap * 1.1) / y1) * (H - T - B);
  const off = ys.filter((y) => y > cap * 1.1).length;
  if (off) svg.appendChild(el("text", { x: W - R, y: 11, "text-anchor": "end", class: "off" }, `▲ ${off} above ${fmt(cap * 1.1, cap > 20 ? 0 : 1)}`));
  svg.appendChild(el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#ccd" }));
  svg.appendChild(el("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#ccd" }));
  for (const f of [0, 0.5, 1]) {
    svg.appendChild(el("text", { x: 2, y: Y(y1 * f / 1.1) + 3 }, fmt(y1 * f / 1.1, y1 > 20 ? 0 : 1)));
  }
  if (opts.xLabel) svg.appendChild(el("text", { x: W - R, y: H - 4, "text-anchor": "end" }, opts.xLabel(x0, x1)));
  series.forEach((s) => {
    const p = s.points.filter((q) => q[1] !== null);
    if (p.length > 1) svg.appendChild(el("polyline", { points: p.map((q) => `${X(q[0]).toFixed(1)},${Y(q[1]).toFixed(1)}`).join(" "),
      fill: "none", stroke: s.color, "stroke-width": 1.4, "stroke-dasharray": s.dashed ? "4 3" : null }));
    for (const q of p) {
      const tip = el("title", {}, `${s.name}: ${fmt(q[1])} ms`);
      if (q[1] > cap * 1.1) {
        const x = X(q[0]), y = Y(q[1]);
        svg.appendChild(el("path", { d: `M${(x - 3).toFixed(1)},${(y + 4).toFixed(1)} L${x.toFixed(1)},${(y - 1).toFixed(1)} L${(x + 3).toFixed(1)},${(y + 4).toFixed(1)} Z`,
          fill: s.color, class: "pt clipped" }, tip));
      } else svg.appendChild(el("circle", { cx: X(q[0]).toFixed(1), cy: Y(q[1]).toFixed(1), r: 1.8, fill: s.color, class: "pt" }, tip));
    }
  });
  return svg;
}
function legend(series) {
  return el("div", { class: "legend" }, series.map((s) => el("span", { class: "item" }, el("span", { color: s.color, text: s.dashed ? "┄┄ " : "━━ " }), s.name)));
}
const minutesLabel = (x0, x1) => (x1 - x0 < 120 ? `over ${(x1 - x0).toFixed(0)} s, to ${ago(x1)}` : `over ${((x1 - x0) / 60).toFixed(1)} min, to ${ago(x1)}`);

// --- fleet ------------------------------------------------------------------------------------------
function renderFleet(d) {
  const oh = d.overhead;
  clear($("overhead")).append(
    tile("gateway added p50", fmt(oh.p50_ms, 2) + " ms", `total − upstream − cache, measured, last minute (${oh.n} requests)`),
    tile("gateway added p99", fmt(oh.p99_ms, 2) + " ms", "the same, 99th percentile"),
    (() => {
      const ser = [{ name: "p50", color: COLORS[0], points: oh.series.map((p) => [p[0], p[1]]) },
                   { name: "p99", color: COLORS[1], points: oh.series.map((p) => [p[0], p[2]]) }];
      return el("div", { class: "tile" }, lineChart(ser, { title: "gateway added ms", width: 340, height: 110, xLabel: minutesLabel }), legend(ser));
    })(),
    tile("queued at the gateway", String(d.queued), Object.keys(d.queued_by_tenant || {}).length ? JSON.stringify(d.queued_by_tenant) : "no tenant waiting"));
  const box = clear($("backends"));
  for (const b of d.backends) box.appendChild(backendCard(b));
}
function tile(k, v, hint) { return el("div", { class: "tile" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v), el("div", { class: "hint" }, hint)); }
function backendCard(b) {
  const stateText = b.state === "ejected" ? `ejected, ${fmt(b.cooldown_s)} s to probe` :
    b.state === "rate_limited" ? `429 cooling, ${fmt(b.cooldown_s)} s` : b.state;
  const L = b.learned;
  const kv = (pairs) => el("div", { class: "kv" }, pairs.flatMap(([k, v]) => [el("span", { class: "k" }, k), el("span", {}, v)]));
  const ser = b.series;
  const ttft = [{ name: "predicted", color: COLORS[1], dashed: true, points: ser.map((p) => [p[0], p[1]]) },
                { name: "measured", color: COLORS[0], points: ser.map((p) => [p[0], p[2]]) }];
  const e2e = [{ name: "predicted", color: COLORS[1], dashed: true, points: ser.map((p) => [p[0], p[3]]) },
               { name: "measured", color: COLORS[0], points: ser.map((p) => [p[0], p[4]]) }];
  // Figures the latency model publishes beyond those above (issue 24's work adds some): numbers as
  // they are, a mapping one level deep as "key value, ...".
  const show = (v) => (typeof v === "number" ? String(Math.round(v * 1000) / 1000) : String(v));
  const extra = Object.entries(b.model_extra || {}).filter(([, v]) => v !== null && !Array.isArray(v))
    .map(([k, v]) => [k, typeof v === "object" ? Object.entries(v).map(([a, x]) => `${a} ${typeof x === "object" ? JSON.stringify(x) : show(x)}`).join(", ") : show(v)]);
  return el("div", { class: "card backend", "data-backend": b.name },
    el("h3", {}, el("span", { class: "name" }, b.name), el("span", { class: "badge " + b.state }, stateText),
      el("span", { class: "hint" }, `${b.model} · ${b.flavor}`)),
    kv([["in flight", `${b.inflight} / ${b.max_concurrency}`], ["slots", `${b.slots ?? "?"} (${b.slots_source})`],
        ["backend queue", b.backend_waiting === null ? "not published" : String(b.backend_waiting)], ["breaker trips", String(b.trips)],
        ["network", fmt(L.net_ms, 2) + " ms"], ["prefill", (L.prefill_tokens_per_s ?? "–") + " tok/s"],
        ["TPOT", fmt(L.tpot_ms, 2) + " ms"], ["full-batch slowdown", L.batch_slowdown === null ? "–" : `×${fmt(L.batch_slowdown, 2)} at ${L.batch_of}`],
        ["expected output", fmt(L.output_tokens, 0) + " tok"], ["residual queue", fmt(L.residual_queue_ms, 1) + " ms"],
        ["prefix-cache accuracy", b.prefix.verified_requests ? pct(b.prefix.accuracy) + ` (${b.prefix.verified_requests} checked)` : "none checked"],
        ["requests (5 min)", String(b.requests)],
        ["median TTFT error", pct(b.median_error.ttft)], ["median E2E error", pct(b.median_error.e2e)],
        ...extra.map(([k, v]) => [k.replaceAll("_", " "), v])]),
    el("div", { class: "hint" }, `traffic share ${pct(b.share)} (${b.requests} of the last ${d_window()} min's requests)`),
    el("div", { class: "share" }, el("div", { class: "bar", style: null, "data-share": b.share })),
    el("div", { class: "charts" }, lineChart(ttft, { title: "TTFT ms (streams)", xLabel: minutesLabel }),
      lineChart(e2e, { title: "E2E ms", xLabel: minutesLabel })),
    legend(e2e));
}
let WINDOW_S = 300;
const d_window = () => (WINDOW_S / 60).toFixed(0);
function sizeShares() { document.querySelectorAll(".share .bar").forEach((b) => { b.style.width = (Number(b.dataset.share) * 100).toFixed(1) + "%"; }); }

// --- requests ---------------------------------------------------------------------------------------
const API_SHORT = { "chat/completions": "chat" };
function renderRequests(d) {
  S.recent = d.rows;
  $("ring-info").textContent = `The newest ${d.rows.length} of ${d.held} requests held in memory (ring of ${d.ring_size}; ${d.seen} seen since start). ` +
    (d.capture_content ? "Content capture is on: prompts and answers are shown." : "Content capture is off: no prompt or answer text is kept.");
  const t = clear($("requests-table"));
  t.appendChild(el("tr", {}, ["when", "API", "alias", "tenant", "backend", "status", "outcome", "cache", "ms", "predicted", "fallback, retries"]
    .map((h) => el("th", {}, h))));
  for (const r of d.rows) {
    const why = [r.fallback ? "fallback: " + r.fallback : null, r.retries ? `${r.retries} retr${r.retries > 1 ? "ies" : "y"}` : null,
      r.errors.length ? r.errors.join(", ") : null].filter(Boolean).join("; ");
    t.appendChild(el("tr", { class: "pick" + (S.selected === r.id ? " sel" : ""), "data-id": r.id, onclick: () => openRequest(r.id) },
      el("td", {}, ago(r.at)), el("td", { class: "api", title: "/v1/" + r.endpoint }, API_SHORT[r.endpoint] || r.endpoint), el("td", {}, r.alias), el("td", {}, r.tenant), el("td", {}, r.backend || "–"),
      el("td", { class: r.status >= 400 ? "bad" : "" }, r.status), el("td", {}, r.outcome), el("td", {}, r.cache),
      el("td", { class: "num" }, fmt(r.total_ms)), el("td", { class: "num" }, fmt(r.predicted_e2e_ms)), el("td", {}, why || "–")));
  }
  fillExplainPick();
}
async function openRequest(id) {
  S.selected = id;
  document.querySelectorAll("#requests-table tr.pick").forEach((tr) => tr.classList.toggle("sel", tr.dataset.id === id));
  const box = clear($("request-detail"));
  let d;
  try { d = await api("requests/" + encodeURIComponent(id)); } catch (e) { box.appendChild(el("p", { class: "bad" }, e.message)); return; }
  const r = d.request;
  box.append(el("h2", {}, `${r.alias} → ${r.backend || "no backend"} · ${r.outcome}`),
    el("div", { class: "kv" }, [["request id", r.id], ["trace id", traceLink(d.trace_id)], ["API", "/v1/" + r.endpoint], ["tenant", r.tenant], ["cache", r.cache],
      ["total", fmt(d.total_ms) + " ms (measured)"], ["gateway added", fmt(d.gateway_ms, 2) + " ms (measured)"],
      ["predicted TTFT", fmt(r.predicted_ttft_ms) + " ms (estimated)"], ["measured TTFT", fmt(r.ttft_ms) + " ms"],
      ["predicted E2E", fmt(r.predicted_e2e_ms) + " ms (estimated)"], ["measured E2E", fmt(r.e2e_ms) + " ms"],
      ["prompt tokens", d.usage ? `${d.usage.prompt_tokens} reported` : `${d.prompt_tokens_estimated} estimated`],
      ["completion tokens", d.usage ? `${d.usage.completion_tokens} reported` : "–"]]
      .flatMap(([k, v]) => [el("span", { class: "k" }, k), el("span", { class: k === "trace id" ? "trace" : "" }, v)])),
    waterfall(d), legend([{ name: "measured", color: SOURCE_COLORS.measured }, { name: "reported", color: SOURCE_COLORS.reported },
      { name: "estimated", color: SOURCE_COLORS.estimated }, { name: "gateway", color: "#7048e8" }, { name: "predicted TTFT / E2E", color: "#f08c00" }]),
    el("h2", {}, "Attempts"), attemptsTable(d.attempts));
  if (d.routes.length) {
    box.append(el("h2", {}, "Routing decisions"), ...d.routes.map((x) => el("p", {},
      `${x.alias}: ${x.strategy} chose ${x.chosen} — ${x.reason || ""} (`, Object.entries(x.candidates).map(([k, v]) => `${k}=${v}`).join(", "), ")")));
  }
  if (d.content) {
    box.append(el("h2", {}, "Prompt"), el("pre", { class: "content prompt" }, JSON.stringify(d.content.request, null, 1)),
      el("h2", {}, "Answer"), el("pre", { class: "content answer" }, d.content.answer ?? "(no answer text)"));
  } else {
    box.append(el("p", { class: "hint" }, "Prompt and answer text are shown only when content capture is on."));
  }
}
function traceLink(id) {
  if (!id) return "not traced";
  const tpl = S.session && S.session.trace_url;
  // The template is the operator's own config (http or https only, checked at load); the id is hex.
  return tpl ? el("a", { href: tpl.replace("{trace_id}", encodeURIComponent(id)), target: "_blank", rel: "noopener noreferrer" }, id) : id;
}
function waterfall(d) {
  const W = 520, rowH = 18, L = 150;
  const stages = d.stages;
  // The attempt that answered carries the prediction (a hedge's winner need not be the last one).
  const last = d.attempts.find((a) => a.number === d.answered) || d.attempts.at(-1);
  const end = Math.max(d.total_ms || 0, ...stages.map((s) => s.end_ms), d.request.predicted_e2e_ms ? d.request.predicted_e2e_ms + (last?.start_ms || 0) : 0) || 1;
  const X = (ms) => L + (ms / end) * (W - L - 10);
  const H = (stages.length + 2) * rowH + 24;
  const svg = el("svg", { class: "chart waterfall", width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-stages": stages.length });
  svg.appendChild(el("text", { x: 4, y: 12 }, `stages, ms from arrival (total ${fmt(end, 1)} ms)`));
  stages.forEach((s, i) => {
    const y = 20 + i * rowH;
    svg.appendChild(el("text", { x: 4, y: y + 12 }, `${s.name} ${fmt(s.end_ms - s.start_ms, 2)}`));
    svg.appendChild(el("rect", { x: X(s.start_ms).toFixed(1), y, width: Math.max(1, X(s.end_ms) - X(s.start_ms)).toFixed(1), height: rowH - 5,
      fill: SOURCE_COLORS[s.source] || "#888", class: "stage", "data-name": s.name }, el("title", {}, `${s.name}: ${s.source}`)));
  });
  // The gateway's own time is around all attempts.
  const ends = d.attempts.map((a) => a.end_ms);
  let y = 20 + stages.length * rowH;
  svg.appendChild(el("text", { x: 4, y: y + 12 }, `gateway ${fmt(d.gateway_ms, 2)}`));
  const first = d.attempts.length ? { start_ms: Math.min(...d.attempts.map((a) => a.start_ms)) } : null;
  const upstreamEnd = ends.length && ends.every((e) => e !== null) ? Math.max(...ends) : null;
  const cache = stages.find((s) => s.name === "cache");
  // The gateway's own time: before the first attempt (auth, parse, admission, cache, routing) and
  // after the last; for a cache hit, all but the lookup.
  const own = first && upstreamEnd !== null ? [[0, first.start_ms], [upstreamEnd, d.total_ms]] :
    !first && cache ? [[0, cache.start_ms], [cache.end_ms, d.total_ms]] : [];
  {
    for (const [a, b] of own) {
      if (b > a) svg.appendChild(el("rect", { x: X(a), y, width: Math.max(1, X(b) - X(a)), height: rowH - 5, fill: "#7048e8", class: "stage", "data-name": "gateway" },
        el("title", {}, `gateway ${fmt(b - a, 3)} ms (measured)`)));
    }
  }
  y += rowH;
  if (last && last.predicted) {
    const p = last.predicted;
    svg.appendChild(el("text", { x: 4, y: y + 12 }, `predicted ${fmt(p.ttft_ms)} / ${fmt(p.e2e_ms)}`));
    svg.appendChild(el("rect", { x: X(last.start_ms), y, width: Math.max(1, X(last.start_ms + p.ttft_ms) - X(last.start_ms)), height: rowH - 5, fill: "#ffd8a8", class: "predicted" },
      el("title", {}, `predicted TTFT ${fmt(p.ttft_ms)} ms`)));
    svg.appendChild(el("rect", { x: X(last.start_ms + p.ttft_ms), y, width: Math.max(1, X(last.start_ms + p.e2e_ms) - X(last.start_ms + p.ttft_ms)), height: rowH - 5, fill: "#ffe8cc", class: "predicted" },
      el("title", {}, `predicted E2E ${fmt(p.e2e_ms)} ms`)));
  }
  return svg;
}
function attemptsTable(attempts) {
  return el("table", { class: "grid" }, el("tr", {}, ["#", "alias", "backend", "status", "load", "pred. TTFT", "pred. E2E", "prefix match"].map((h) => el("th", {}, h))),
    attempts.map((a) => el("tr", {}, el("td", {}, a.number), el("td", {}, a.alias), el("td", {}, a.backend),
      el("td", { class: a.error ? "bad" : "" }, a.error || a.status), el("td", {}, a.load),
      el("td", { class: "num" }, a.predicted ? fmt(a.predicted.ttft_ms) : "–"), el("td", { class: "num" }, a.predicted ? fmt(a.predicted.e2e_ms) : "–"),
      el("td", {}, a.prefix ? `${a.prefix.matched_blocks} blocks, ~${fmt(a.prefix.matched_tokens_estimated, 0)} tok` : "–"))));
}

// --- route explain ---------------------------------------------------------------------------------
function fillExplainPick() {
  const sel = $("explain-pick"), keep = sel.value;
  clear(sel);
  for (const r of S.recent.filter((x) => x.endpoint !== "embeddings").slice(0, 50)) sel.appendChild(el("option", { value: r.id }, `${ago(r.at)} · ${r.alias} → ${r.backend || "–"} · ${r.outcome}`));
  if (keep) sel.value = keep;
}
async function explain(ask) {
  const out = clear($("explain-out"));
  let d;
  try { d = await api("explain", { body: ask }); } catch (e) { out.appendChild(el("p", { class: "bad" }, e.message)); return; }
  out.appendChild(el("p", {}, `Would use alias ${d.would_use}; ${d.request.prompt_tokens_estimated} prompt tokens estimated.`, d.note ? " " + d.note[0].toUpperCase() + d.note.slice(1) + "." : ""));
  for (const a of d.chain) {
    const tgt = a.latency_target ? ` · latency target TTFT ${a.latency_target.ttft_s ?? "–"} s (${a.latency_target.met ? "met" : "not met"})` : "";
    const rows = a.candidates.map((c) => el("tr", { class: c.backend === a.choice ? "winner" : "" },
      el("td", {}, c.backend), el("td", {}, c.usable ? "yes" : "no"), el("td", { class: "num" }, c.score === null ? "–" : fmt(c.score, 4)),
      el("td", { class: "num" }, fmt(c.predicted_queue_s * 1000)), el("td", { class: "num" }, fmt(c.predicted_ttft_s * 1000)),
      el("td", { class: "num" }, fmt(c.predicted_e2e_s * 1000)), el("td", {}, `${c.inflight} in flight, ${c.slots ?? "?"} slots (${c.slots_source})`),
      el("td", {}, c.breaker), el("td", {}, c.prefix ? `${fmt(c.prefix.matched_tokens_estimated, 0)} tok matched (${c.prefix.matched_blocks}/${c.prefix.prompt_blocks} blocks)` : "–")));
    out.appendChild(el("div", { class: "panel" }, el("h2", {}, `${a.alias} (${a.strategy})`),
      el("p", { class: "why" }, a.choice ? `Winner: ${a.choice}, ${a.why}` : a.why, a.waits_for_slot ? " (it waits for a slot)" : "", tgt,
        a.deadline_s ? ` · deadline ${fmt(a.deadline_s, 3)} s, ${a.meets_deadline ? "met" : "not met"} by prediction` : ""),
      el("table", { class: "grid explain" }, el("tr", {}, ["backend", "usable", "score", "queue ms", "TTFT ms", "E2E ms", "load", "breaker", "prefix"]
        .map((h) => el("th", {}, h))), rows),
      el("p", { class: "hint" }, "All figures are estimates of the latency model, at this moment.")));
  }
}

// --- cache and tenants -----------------------------------------------------------------------------
function renderCache(d) {
  const c = d.cache;
  clear($("cache-out")).append(tile("exact hit rate", pct(c.exact_hit_rate), `${c.exact_hits} of ${c.lookups} lookups`),
    tile("semantic hit rate", pct(c.semantic_hit_rate), `${c.semantic_hits} hits`),
    tile("guard rejections", c.guard_rejections, "semantic near-misses the guard refused"),
    tile("verifier rejections", c.verifier_rejections, "refused by a verifier or judge"),
    tile("store errors", c.store_errors, `store: ${c.store}; writer lost ${c.writer.lost}`),
    tile("stale served", c.stale_served, `${c.bypassed} bypassed`));
  const L = d.tenants.limiter;
  $("limiter-info").textContent = `limiter store: ${L.store}, on store error: ${L.on_redis_error}, window ${d.tenants.window_s} s` +
    (L.error ? ` · error: ${L.error}` : "") + (Object.keys(L.errors || {}).length ? " · errors " + JSON.stringify(L.errors) : "");
  const t = clear($("tenants-table"));
  t.appendChild(el("tr", {}, ["tenant", "priority", "weight", "limits", "used", "remaining", "queued now", "admitted", "shed / refused"].map((h) => el("th", {}, h))));
  for (const x of d.tenants.tenants) {
    const lim = x.limits || {}, use = x.usage || {};
    const remaining = Object.entries(lim).filter(([k, v]) => typeof v === "number" && typeof use[k] === "number").map(([k, v]) => `${k} ${v - use[k]}`);
    const counts = x.counts || {};
    const shed = Object.entries(counts).filter(([k]) => k !== "admitted").map(([k, v]) => `${k} ${v}`);
    t.appendChild(el("tr", {}, el("td", {}, x.tenant), el("td", {}, x.priority), el("td", {}, x.weight),
      el("td", {}, Object.entries(lim).map(([k, v]) => `${k} ${JSON.stringify(v)}`).join(", ") || "none"),
      el("td", {}, Object.entries(use).map(([k, v]) => `${k} ${v}`).join(", ") || "–"), el("td", {}, remaining.join(", ") || "–"),
      el("td", {}, x.queued_now), el("td", {}, counts.admitted ?? 0), el("td", {}, shed.join(", ") || "0")));
  }
}

// --- what-if, apply, roll back ---------------------------------------------------------------------
function buildPatch() {
  let patch = {};
  const text = $("wi-patch").value.trim();
  if (text) patch = JSON.parse(text);
  const alias = $("wi-alias").value, m = {};
  if ($("wi-strategy").value) m.strategy = $("wi-strategy").value;
  if ($("wi-hedge").value) m.hedge = { enabled: $("wi-hedge").value === "on" };
  if ($("wi-ttft").value) m.ttft_slo_ms = Number($("wi-ttft").value);
  if (Object.keys(m).length) patch.models = { ...(patch.models || {}), [alias]: { ...((patch.models || {})[alias] || {}), ...m } };
  return patch;
}
function wiStatus(text, bad) { const s = $("wi-status"); s.textContent = text; s.className = "status" + (bad ? " err" : ""); }
async function runWhatIf() {
  let patch;
  try { patch = buildPatch(); } catch (e) { wiStatus("the change is not JSON: " + e.message, true); return; }
  const ask = { patch };
  if ($("wi-source").value === "upload") {
    const f = $("wi-upload").files[0];
    if (!f) { wiStatus("choose a workload file first", true); return; }
    ask.workload = await f.text();
  }
  try {
    const r = await api("whatif", { body: ask });
    wiStatus(`replaying ${r.requests} ${r.source} against ${r.fleet}…`);
    pollWhatIf();
  } catch (e) { wiStatus(e.message, true); }
}
async function pollWhatIf() {
  clearTimeout(S.wiTimer);
  const d = await api("whatif");
  if (d.status === "running") { S.wiTimer = setTimeout(pollWhatIf, 2000); return; }
  if (d.status === "failed") { wiStatus("what-if failed: " + d.error, true); return; }
  if (d.status === "done") { wiStatus(`done: ${d.requests} requests replayed through each policy`); renderWhatIf(d); }
}
function renderWhatIf(d) {
  const res = d.result, out = clear($("whatif-out"));
  const cols = [["policy", "policy"], ["requests", "requests"], ["errors", "errors"], ["ttft_p50_ms", "TTFT p50"], ["ttft_p99_ms", "TTFT p99"],
    ["e2e_p50_ms", "E2E p50"], ["e2e_p99_ms", "E2E p99"]];
  const table = el("table", { class: "grid whatif" }, el("tr", {}, cols.map(([, h]) => el("th", {}, h + (h.includes("p") && h !== "policy" ? " ms" : "")))),
    res.rows.map((r) => el("tr", {}, cols.map(([k]) => el("td", { class: k === "policy" ? "" : "num" }, r[k])))));
  const [cur, cand] = [res.rows.find((r) => r.policy === "current"), res.rows.find((r) => r.policy === "candidate")];
  if (cur && cand) {
    // How the candidate differs, per column: what an operator decides on.
    table.appendChild(el("tr", { class: "delta" }, cols.map(([k]) => {
      if (k === "policy") return el("td", {}, "candidate vs current");
      const a = Number(cur[k]), b = Number(cand[k]);
      if (!k.endsWith("_ms") || !Number.isFinite(a) || !Number.isFinite(b) || a === 0) return el("td", { class: "num" }, k === "errors" ? b - a : "");
      const ch = (b - a) / a;
      return el("td", { class: "num " + (ch < -0.02 ? "okc" : ch > 0.02 ? "bad" : "") }, (ch > 0 ? "+" : "") + (ch * 100).toFixed(0) + " %");
    })));
  }
  const names = Object.keys(res.series);
  const series = names.map((n, i) => ({ name: n, color: COLORS[Math.floor(i / 2) % COLORS.length], dashed: n.endsWith("p99"), points: res.series[n] }));
  const bars = cols.filter(([k]) => k.endsWith("_ms")).map(([k, h]) => ({ name: h, values: res.rows.map((r) => Number(r[k])) }));
  out.append(el("div", { class: "panel" }, el("h2", {}, "Replay: current vs candidate"), table,
      el("p", { class: "hint" }, `change: ${JSON.stringify(d.patch)}`), el("p", { class: "hint" }, res.source)),
    el("div", { class: "panel" }, barChart(bars, res.rows.map((r) => r.policy), { title: "TTFT and E2E percentiles, ms", width: 460, height: 200 }),
      legend(res.rows.map((r, i) => ({ name: r.policy, color: COLORS[i % COLORS.length] }))),
      lineChart(series, { title: "E2E ms over the replay (p50 solid, p99 dashed)", width: 460, height: 200,
        xLabel: () => "seconds into the workload" }), legend(series)));
}
// Grouped bars: one group per figure (TTFT p50 ...), one bar per policy, each labelled with its value.
function barChart(groups, policies, opts) {
  const W = opts.width, H = opts.height, L = 8, T = 18, B = 30;
  const all = groups.flatMap((g) => g.values).filter(Number.isFinite);
  const svg = el("svg", { class: "chart bars", width: W, height: H, viewBox: `0 0 ${W} ${H}`, "data-points": all.length, role: "img", "aria-label": opts.title });
  svg.appendChild(el("text", { x: 4, y: 11 }, opts.title));
  if (!all.length) return svg;
  const gw = (W - L * 2) / groups.length, bw = Math.min(34, (gw - 14) / Math.max(1, policies.length));
  groups.forEach((g, gi) => {
    // Each group on its own scale: TTFT and E2E differ by orders of magnitude; bars compare policies.
    const top = Math.max(...g.values.filter(Number.isFinite), 1) * 1.15;
    const gx = L + gi * gw + (gw - bw * policies.length) / 2;
    g.values.forEach((v, pi) => {
      if (!Number.isFinite(v)) return;
      const h = (v / top) * (H - T - B), x = gx + pi * bw, y = H - B - h;
      svg.appendChild(el("rect", { x: x.toFixed(1), y: y.toFixed(1), width: (bw - 3).toFixed(1), height: Math.max(1, h).toFixed(1),
        fill: COLORS[pi % COLORS.length], class: "bar" }, el("title", {}, `${policies[pi]} ${g.name}: ${v} ms`)));
      svg.appendChild(el("text", { x: (x + (bw - 3) / 2).toFixed(1), y: (y - 2).toFixed(1), "text-anchor": "middle" }, String(v)));
    });
    svg.appendChild(el("text", { x: (L + gi * gw + gw / 2).toFixed(1), y: H - 12, "text-anchor": "middle" }, g.name));
  });
  svg.appendChild(el("line", { x1: L, y1: H - B, x2: W - L, y2: H - B, stroke: "#ccd" }));
  svg.appendChild(el("text", { x: W - 4, y: 11, "text-anchor": "end" }, "each figure on its own scale"));
  return svg;
}
async function applyChange() {
  let patch;
  try { patch = buildPatch(); } catch (e) { wiStatus("the change is not JSON: " + e.message, true); return; }
  if (!confirm("Apply this change to the running gateway?\n" + JSON.stringify(patch))) return;
  try { const r = await api("apply", { body: { patch } }); wiStatus(`applied: version ${r.version} (previous ${r.previous})`); renderAudit(r.audit); loadPolicy(); }
  catch (e) { wiStatus(e.message, true); loadPolicy().catch(() => {}); }
}
async function rollback() {
  if (!confirm("Roll back the last change?")) return;
  try { const r = await api("rollback", { body: {} }); wiStatus(`rolled back: now version ${r.version}`); renderAudit(r.audit); loadPolicy(); }
  catch (e) { wiStatus(e.message, true); }
}
function renderAudit(entries) {
  const t = clear($("audit-table"));
  t.appendChild(el("tr", {}, ["when", "who", "action", "from", "to", "what"].map((h) => el("th", {}, h))));
  if (!entries.length) t.appendChild(el("tr", {}, el("td", { colspan: 6, class: "hint" }, "No change made from the console yet.")));
  for (const a of entries) t.appendChild(el("tr", { class: "audit" }, el("td", {}, new Date(a.at * 1000).toLocaleString()), el("td", {}, a.who),
    el("td", {}, a.action), el("td", {}, a.from), el("td", {}, a.to), el("td", {}, a.patch ? JSON.stringify(a.patch) : a.reason || (a.undoes ? "undoes " + new Date(a.undoes * 1000).toLocaleTimeString() : ""))));
}
async function loadPolicy() {
  const p = await api("policy");
  const alias = $("wi-alias").value || Object.keys(p.models)[0];
  $("whatif-hint").textContent = `Running policy: ` + Object.entries(p.models).map(([a, m]) =>
    `${a}: ${m.strategy}${m.hedge && m.hedge.enabled ? ", hedging" : ""}${m.ttft_slo_ms ? ", TTFT target " + m.ttft_slo_ms + " ms" : ""}`).join(" · ") +
    (p.config_file ? ` (from ${p.config_file})` : " (not started from a config file: apply is off)");
  // Known before anyone tries: where the file cannot be written, neither button is offered, and the page says why.
  const off = p.writable ? "" : "Apply and roll back are off: " + p.why_not_writable + ".";
  for (const id of ["wi-apply", "wi-rollback"]) { $(id).disabled = !p.writable; $(id).title = off; }
  $("wi-readonly").textContent = off;
  $("wi-readonly").hidden = p.writable;
  $("wi-alias").value = alias;
  renderAudit(p.audit);
}

// --- the page loop: one poll of the visible page's view every few seconds ------------------------
const VIEWS = { fleet: ["fleet", renderFleet], requests: ["requests", renderRequests], cache: ["cache", renderCache], explain: ["requests", renderRequests] };
async function tick() {
  clearTimeout(S.timer);
  const view = VIEWS[S.page];
  if (view && !document.hidden) {
    try {
      const d = await api(view[0]);
      if (d.window_s) WINDOW_S = d.window_s;
      view[1](d);
      sizeShares();
      $("live").className = "live"; $("live-text").textContent = "live · " + new Date().toLocaleTimeString();
    } catch (e) { $("live").className = "live stale"; $("live-text").textContent = "stale: " + e.message; }
  }
  S.timer = setTimeout(tick, (S.session ? S.session.refresh_s : 3) * 1000);
}
function show(page) {
  S.page = VIEWS[page] || page === "whatif" ? page : "fleet";
  document.querySelectorAll(".page").forEach((p) => p.classList.toggle("active", p.id === "page-" + S.page));
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === S.page));
  if (S.page === "whatif") loadPolicy().catch((e) => wiStatus(e.message, true));
  tick();
}
async function start() {
  S.session = await api("session");
  $("who").textContent = "admin key " + S.session.who;
  for (const a of S.session.aliases) $("wi-alias").appendChild(el("option", { value: a }, a));
  $("wi-strategy").appendChild(el("option", { value: "" }, "unchanged"));
  for (const s of S.session.strategies) $("wi-strategy").appendChild(el("option", { value: s }, s));
  $("explain-body").value = JSON.stringify({ model: S.session.aliases[0], messages: [{ role: "user", content: "Hello" }], max_tokens: 64 }, null, 1);
  $("explain-recent").addEventListener("click", () => $("explain-pick").value && explain({ request_id: $("explain-pick").value }));
  $("explain-paste").addEventListener("click", () => explain({ body: $("explain-body").value }));
  $("wi-run").addEventListener("click", runWhatIf);
  $("wi-apply").addEventListener("click", applyChange);
  $("wi-rollback").addEventListener("click", rollback);
  if (!S.session.can_apply) { $("wi-apply").disabled = true; $("wi-rollback").disabled = true; }
  window.addEventListener("hashchange", () => show(location.hash.slice(1)));
  document.addEventListener("visibilitychange", () => { if (!document.hidden) tick(); });
  show(location.hash.slice(1) || "fleet");
  api("whatif").then((d) => { if (d.status === "done") renderWhatIf(d); else if (d.status === "running") pollWhatIf(); }).catch(() => {});
}
document.addEventListener("DOMContentLoaded", start);
