// Argus Lab GraphWidget front end: draws the plan DAG the kernel laid out, marks
// each node's status by colour AND shape, pans and zooms (SVG viewBox) with
// readable labels at every zoom, and sends clicks and keys as actions.
// Plain ES module, no dependencies, no network: anywidget loads it as it is.

const SVG = "http://www.w3.org/2000/svg";
const GROUP = "#group:";
const FONT = 12; // label size in graph units (CSS .argus-node text)
const MIN_PX = 11; // labels are never drawn smaller than this on screen
const LABEL_SCALE = MIN_PX / FONT; // below this zoom, labels give way to summaries
const MIN_SCALE = 0.02;
const MAX_SCALE = 4;
const EXPANDED = 0.8; // expanded canvas: this share of the window's height

// One glyph per status, so no status is told by colour alone.
const GLYPHS = {
  pending: "○",
  running: "▶",
  interrupted: "‖",
  awaiting_approval: "?",
  succeeded: "✓",
  failed: "✕",
  skipped: "↷",
  blocked: "⊘",
  in_doubt: "!",
  rejected: "⊗",
};
const LEGEND = [
  "pending",
  "running",
  "interrupted",
  "awaiting_approval",
  "succeeded",
  "failed",
  "rejected",
  "skipped",
  "blocked",
  "in_doubt",
];
const LABELS = { awaiting_approval: "awaiting approval", in_doubt: "in doubt" };
const label = (st) => LABELS[st] || st;

function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function s(tag, attrs = {}) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  return e;
}

function fmtSeconds(x) {
  if (x === null || x === undefined) return "—";
  if (x < 1) return `${Math.round(x * 1000)} ms`;
  if (x < 60) return `${x.toFixed(1)} s`;
  const m = Math.floor(x / 60);
  return `${m} min ${Math.round(x - 60 * m)} s`;
}

function fmtTime(ts) {
  return ts ? new Date(ts * 1000).toLocaleTimeString() : "—";
}

function json(v) {
  try {
    return JSON.stringify(v, null, 2);
  } catch (_e) {
    return String(v);
  }
}

// A task stored as running while nobody runs the session is drawn (and counts
// in its group) as interrupted: its intent, left for the next run.
export function memberStatus(st, name, interrupted) {
  return st === "running" && interrupted.has(name) ? "interrupted" : st;
}

export function groupStatus(list) {
  for (const st of ["failed", "in_doubt", "awaiting_approval", "running", "interrupted", "blocked"]) {
    if (list.includes(st)) return st;
  }
  if (list.length && list.every((x) => x === "succeeded" || x === "skipped")) {
    return list.includes("succeeded") ? "succeeded" : "skipped";
  }
  return "pending";
}

function edgePath(a, b) {
  const x1 = a.x + a.w;
  const y1 = a.y + a.h / 2;
  const x2 = b.x;
  const y2 = b.y + b.h / 2;
  const mid = (x1 + x2) / 2;
  return `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`;
}

function render({ model, el }) {
  let disconnected = false;
  // Keys typed in the widget are its own, not JupyterLab's notebook shortcuts.
  const root = h("div", { class: "argus-graph", tabindex: "-1", "data-lm-suppress-shortcuts": "true" });
  const send = (action, extra = {}) => {
    if (disconnected) return;
    try {
      model.send({ action, ...extra });
    } catch (e) {
      // The kernel (or its comm) is gone: say so instead of failing silently.
      setDisconnected(String(e));
    }
  };
  const select = (id) => {
    if (disconnected) return;
    model.set("selected", id);
    try {
      model.save_changes();
    } catch (e) {
      setDisconnected(String(e));
    }
  };

  // -- skeleton -------------------------------------------------------------
  const crumbs = h("nav", { class: "argus-crumbs", "aria-label": "session family", hidden: true });
  const toolbar = h("div", { class: "argus-toolbar", role: "toolbar", "aria-label": "session controls" });
  const buttons = {};
  const tools = [
    ["step", "Step", "Run the next ready task(s) once (key: s)"],
    ["run", "Run", "Run in the background until done, paused or failed (key: r)"],
    ["pause", "Pause", "No new task starts; running ones finish (key: p)"],
    ["retry_failed", "Retry failed", "Make failed tasks pending again and run"],
    ["rerun_stale", "Rerun stale", "Rerun tasks whose inputs or tool changed"],
  ];
  for (const [action, text, title] of tools) {
    const b = h("button", { class: "argus-btn", "data-action": action, title, type: "button" }, text);
    b.addEventListener("click", () => send(action));
    buttons[action] = b;
    toolbar.append(b);
  }
  const zoomOut = h("button", { class: "argus-btn argus-zoom", title: "Zoom out", "aria-label": "Zoom out", type: "button" }, "−");
  const zoomIn = h("button", { class: "argus-btn argus-zoom", title: "Zoom in", "aria-label": "Zoom in", type: "button" }, "+");
  const fitBtn = h("button", { class: "argus-btn argus-zoom", title: "Show the whole graph", type: "button" }, "Fit");
  const selBtn = h("button", { class: "argus-btn argus-zoom", title: "Centre the selected task at a readable size", type: "button" }, "Selected");
  const expandBtn = h("button", { class: "argus-btn argus-expand", title: "Taller canvas", "aria-pressed": "false", type: "button" }, "Expand");
  toolbar.append(h("span", { class: "argus-spacer" }), zoomOut, zoomIn, fitBtn, selBtn, expandBtn);

  const banner = h("div", { class: "argus-banner", role: "alert", hidden: true });
  const summary = h("div", { class: "argus-summary", "aria-live": "polite" });
  const legend = h("div", { class: "argus-legend", "aria-label": "status legend" });
  for (const st of LEGEND) {
    legend.append(
      h(
        "span",
        { class: "argus-legend-item", "data-status": st },
        h("span", { class: `argus-swatch argus-st-${st}`, "aria-hidden": "true" }, GLYPHS[st]),
        label(st),
      ),
    );
  }
  legend.append(
    h("span", { class: "argus-legend-item argus-legend-stale" }, h("span", { class: "argus-swatch argus-swatch-stale", "aria-hidden": "true" }), "stale"),
    h("span", { class: "argus-legend-item argus-legend-cached" }, h("span", { class: "argus-swatch argus-swatch-cached", "aria-hidden": "true" }, "⟲"), "cached"),
    h("span", { class: "argus-legend-item argus-legend-bp" }, h("span", { class: "argus-swatch argus-swatch-bp", "aria-hidden": "true" }, "●"), "breakpoint"),
  );
  const approvals = h("div", { class: "argus-approvals" });
  const message = h("div", { class: "argus-message", role: "status", "aria-live": "polite" });
  const canvas = h("div", { class: "argus-canvas" });
  const svg = s("svg", { class: "argus-svg", role: "group", tabindex: "0" });
  const gGroups = s("g", { class: "argus-groups" });
  const gEdges = s("g", { class: "argus-edges" });
  const gNodes = s("g", { class: "argus-nodes" });
  svg.append(gGroups, gEdges, gNodes);
  const hint = h("div", { class: "argus-canvas-hint", hidden: true });
  const layerBar = h("div", { class: "argus-layers", hidden: true, "aria-hidden": "true" });
  const mini = h("canvas", { class: "argus-minimap", hidden: true, "aria-hidden": "true", title: "Overview: click or drag to move there" });
  canvas.append(svg, layerBar, hint, mini);
  const detail = h("aside", { class: "argus-detail", hidden: true, "aria-label": "task detail" });
  const main = h("div", { class: "argus-main" }, canvas, detail);
  root.append(crumbs, toolbar, banner, summary, approvals, main, legend, message);
  el.append(root);

  // -- the static fallback output: hidden while this live view is shown -------
  const fallbacks = () => {
    const key = model.get("fallback_key");
    if (!key) return [];
    return [...document.querySelectorAll(`.argus-fb-${key}`)].map(
      (e) => e.closest(".jp-OutputArea-child") || e,
    );
  };
  for (const f of fallbacks()) f.style.display = "none";

  // -- drawing --------------------------------------------------------------
  let nodeEls = new Map(); // id -> {g, rect, glyph, title, node}
  let groupEls = new Map(); // group id -> {label, group}
  let edgeEls = []; // {a, b, path}
  let lastCodes = "";
  let view = { x: 0, y: 0, w: 100, h: 100 };
  let userMoved = false; // until the user pans or zooms, resizes re-frame
  let expanded = false;
  let wheelArmed = false; // the wheel zooms after a click into the canvas

  const statusOf = () => {
    const tasks = model.get("tasks");
    const codes = model.get("status_codes");
    const legendCodes = model.get("codes");
    const out = new Map();
    for (let i = 0; i < tasks.length; i++) out.set(tasks[i], legendCodes[codes[i]] || "pending");
    return out;
  };

  const scaleOf = (v = view) => (svg.clientWidth || 800) / v.w;

  function setView(v) {
    view = v;
    svg.setAttribute("viewBox", `${v.x} ${v.y} ${v.w} ${v.h}`);
    const scale = scaleOf(v);
    // Semantic zoom: labels below MIN_PX give way to group summaries drawn at a
    // readable size whatever the zoom.
    const lod = scale < LABEL_SCALE - 1e-6;
    root.classList.toggle("argus-lod", lod);
    root.style.setProperty("--argus-group-font", `${Math.max(FONT, MIN_PX / scale)}px`);
    hint.hidden = !lod;
    hint.textContent = lod ? "Zoomed out: labels hidden; layers and groups summarised. Zoom in (+, Ctrl+wheel) or select a task." : "";
    layerBar.hidden = !lod;
    if (lod) placeLayers(scale);
    drawMiniSoon();
  }

  // -- minimap: the whole graph, coloured by status, with the visible part
  // outlined; shown when the graph does not fit at a readable zoom.
  const MINI_W = 180;
  const MINI_H = 110;
  let mini0 = null; // {k, ox, oy}: graph -> minimap pixels
  let miniQueued = false;
  function drawMiniSoon() {
    if (miniQueued) return;
    miniQueued = true;
    requestAnimationFrame(() => {
      miniQueued = false;
      drawMini();
    });
  }
  function drawMini() {
    const lay = model.get("graph");
    const W = Math.max(lay.width || 1, 1);
    const H = Math.max(lay.height || 1, 1);
    const cw = svg.clientWidth || 800;
    const ch = svg.clientHeight || 440;
    // Only while part of the graph is out of view.
    const inside = view.x <= 0 && view.y <= 0 && view.x + view.w >= W && view.y + view.h >= H;
    const show = nodeEls.size > 0 && !inside && (W * LABEL_SCALE > cw + 1 || H * LABEL_SCALE > ch + 1);
    mini.hidden = !show;
    if (!show) return;
    // As small as the graph's shape allows, and never over half the canvas.
    const mh = Math.min(MINI_H, Math.max(24, Math.round(ch * 0.4)));
    const k = Math.min((MINI_W - 8) / W, (mh - 8) / H);
    const mw = Math.max(40, Math.ceil(W * k + 8));
    const mhh = Math.max(24, Math.ceil(H * k + 8));
    const dpr = window.devicePixelRatio || 1;
    if (mini.width !== mw * dpr || mini.height !== mhh * dpr) {
      mini.width = mw * dpr;
      mini.height = mhh * dpr;
      mini.style.width = `${mw}px`;
      mini.style.height = `${mhh}px`;
    }
    mini0 = { k, ox: (mw - W * k) / 2, oy: (mhh - H * k) / 2 };
    const ctx = mini.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const cs = getComputedStyle(root);
    ctx.fillStyle = cs.getPropertyValue("--argus-bg").trim() || "#fff";
    ctx.fillRect(0, 0, mw, mhh);
    const colour = {};
    for (const st of LEGEND) colour[st] = cs.getPropertyValue(`--argus-st-${st}`).trim() || "#ccc";
    for (const ref of nodeEls.values()) {
      const n = ref.node;
      const cl = ref.g.classList;
      const st = cl.contains("argus-rejected") ? "rejected" : cl.contains("argus-interrupted") ? "interrupted" : ref.g.getAttribute("data-status");
      ctx.fillStyle = colour[st] || colour.pending;
      ctx.fillRect(mini0.ox + n.x * k, mini0.oy + n.y * k, Math.max(1.5, n.w * k), Math.max(1.5, n.h * k));
    }
    ctx.strokeStyle = cs.getPropertyValue("--argus-accent").trim() || "#0969da";
    ctx.lineWidth = 1.5;
    ctx.strokeRect(mini0.ox + view.x * k, mini0.oy + view.y * k, view.w * k, view.h * k);
  }
  let miniDrag = false;
  function miniMove(evt) {
    if (!mini0) return;
    const r = mini.getBoundingClientRect();
    const gx = (evt.clientX - r.left - mini0.ox) / mini0.k;
    const gy = (evt.clientY - r.top - mini0.oy) / mini0.k;
    userMoved = true;
    setView({ ...view, x: gx - view.w / 2, y: gy - view.h / 2 });
  }
  mini.addEventListener("pointerdown", (evt) => {
    evt.stopPropagation();
    miniDrag = true;
    miniMove(evt);
  });
  mini.addEventListener("pointermove", (evt) => {
    if (miniDrag) miniMove(evt);
  });
  const miniUp = () => {
    miniDrag = false;
  };
  window.addEventListener("pointerup", miniUp);

  // Layer summaries for the zoomed-out view: one readable label per layer of
  // the layout (nodes sharing an x), placed over its column, thinned out so
  // that labels never overlap.
  let layers = []; // {x, w, ids}
  function computeLayers() {
    const byX = new Map();
    for (const [id, ref] of nodeEls) {
      const n = ref.node;
      if (!byX.has(n.x)) byX.set(n.x, { x: n.x, w: n.w, ids: [] });
      byX.get(n.x).ids.push(id);
    }
    layers = [...byX.values()].sort((a, b) => a.x - b.x);
  }
  function layerText(ids, st) {
    let done = 0;
    let failed = 0;
    for (const id of ids) {
      const v = st.get(id);
      if (v === "succeeded" || v === "skipped") done++;
      else if (v === "failed") failed++;
    }
    return `${ids.length} · ${done}✓${failed ? ` ${failed}✕` : ""}`;
  }
  function placeLayers(scale) {
    const st = statusOf();
    const spans = [];
    let lastRight = -Infinity;
    for (let i = 0; i < layers.length; i++) {
      const L = layers[i];
      const width = svg.clientWidth || 800;
      const cx = Math.min(width - 40, Math.max(40, (L.x + L.w / 2 - view.x) * scale));
      if ((L.x + L.w - view.x) * scale < 0 || (L.x - view.x) * scale > width) continue;
      if (cx - 34 < lastRight) continue;
      lastRight = cx + 34;
      spans.push(
        h("span", { class: "argus-layer", style: `left:${cx}px`, title: `layer ${i + 1}: ${L.ids.length} tasks` }, `L${i + 1}: ${layerText(L.ids, st)}`),
      );
    }
    layerBar.replaceChildren(...spans);
  }

  function canvasHeight() {
    const lay = model.get("graph");
    const max = expanded ? Math.round(window.innerHeight * EXPANDED) : model.get("height");
    const cw = canvas.clientWidth || 800;
    const fitScale = Math.min(1, cw / Math.max(lay.width || 100, 100));
    const natural = (lay.height || 100) * Math.max(fitScale, LABEL_SCALE) + 8;
    return Math.max(120, Math.min(max, Math.ceil(natural)));
  }

  function size() {
    const hgt = canvasHeight();
    canvas.style.height = `${hgt}px`;
    detail.style.maxHeight = `${Math.max(hgt, 320)}px`;
  }

  // The default frame: the whole graph if its labels stay readable, else the
  // start of the graph at the smallest readable zoom (pan or Fit for the rest).
  function frame() {
    userMoved = false;
    const lay = model.get("graph");
    const W = Math.max(lay.width || 100, 100);
    const H = Math.max(lay.height || 100, 60);
    const cw = svg.clientWidth || 800;
    const ch = svg.clientHeight || canvasHeight();
    let scale = Math.min(cw / W, ch / H, 1);
    if (scale < LABEL_SCALE) scale = LABEL_SCALE;
    const w = cw / scale;
    const hh = ch / scale;
    const x = w >= W ? (W - w) / 2 : 0;
    const y = hh >= H ? (H - hh) / 2 : 0;
    setView({ x, y, w, h: hh });
  }

  function fitAll() {
    const lay = model.get("graph");
    const W = Math.max(lay.width || 100, 100);
    const H = Math.max(lay.height || 100, 60);
    const cw = svg.clientWidth || 800;
    const ch = svg.clientHeight || canvasHeight();
    const scale = Math.max(MIN_SCALE, Math.min(cw / W, ch / H, 1));
    const w = cw / scale;
    const hh = ch / scale;
    userMoved = true;
    setView({ x: (W - w) / 2, y: (H - hh) / 2, w, h: hh });
  }

  function centreOn(id) {
    const ref = nodeEls.get(id);
    if (!ref) return;
    const n = ref.node;
    const cw = svg.clientWidth || 800;
    const ch = svg.clientHeight || canvasHeight();
    const scale = Math.max(scaleOf(), 1);
    const w = cw / scale;
    const hh = ch / scale;
    userMoved = true;
    setView({ x: n.x + n.w / 2 - w / 2, y: n.y + n.h / 2 - hh / 2, w, h: hh });
  }

  function ensureVisible(id) {
    const ref = nodeEls.get(id);
    if (!ref) return;
    const n = ref.node;
    const inside = n.x >= view.x && n.y >= view.y && n.x + n.w <= view.x + view.w && n.y + n.h <= view.y + view.h;
    if (!inside || scaleOf() < LABEL_SCALE) centreOn(id);
  }

  function zoom(factor, cx, cy) {
    const cw = svg.clientWidth || 800;
    const next = Math.min(MAX_SCALE, Math.max(MIN_SCALE, cw / (view.w * factor)));
    const f = cw / next / view.w; // the factor within the limits
    userMoved = true;
    const px = cx === undefined ? view.x + view.w / 2 : cx;
    const py = cy === undefined ? view.y + view.h / 2 : cy;
    setView({ x: px - (px - view.x) * f, y: py - (py - view.y) * f, w: view.w * f, h: view.h * f });
  }

  function toSvg(evt) {
    const r = svg.getBoundingClientRect();
    return {
      x: view.x + ((evt.clientX - r.left) / r.width) * view.w,
      y: view.y + ((evt.clientY - r.top) / r.height) * view.h,
    };
  }

  function draw() {
    const lay = model.get("graph");
    gGroups.replaceChildren();
    gEdges.replaceChildren();
    gNodes.replaceChildren();
    nodeEls = new Map();
    groupEls = new Map();
    edgeEls = [];
    lastCodes = "";
    const nodes = lay.nodes || [];
    svg.setAttribute("aria-label", `plan graph of ${nodes.length} nodes; Tab to a task, Enter for its detail`);
    for (const g of lay.groups || []) {
      if (g.collapsed) continue;
      const el = s("g", { class: "argus-group", "data-group": g.key });
      if (g.dissolved) el.classList.add("argus-dissolved");
      el.append(s("rect", { x: g.x, y: g.y, width: g.w, height: g.h, rx: 6, class: "argus-group-box" }));
      const lab = s("text", { x: g.x + 22, y: g.y + 15, class: "argus-group-label" });
      lab.textContent = g.label;
      el.append(lab);
      if (!g.dissolved) {
        const tog = s("text", { x: g.x + 8, y: g.y + 15, class: "argus-toggle", "data-toggle": g.key });
        tog.textContent = "▾";
        el.append(tog);
      }
      gGroups.append(el);
      groupEls.set(g.id, { label: lab, group: g });
    }
    const byId = new Map(nodes.map((n) => [n.id, n]));
    for (const [a, b] of lay.edges || []) {
      const na = byId.get(a);
      const nb = byId.get(b);
      if (!na || !nb) continue;
      const p = s("path", { d: edgePath(na, nb), class: "argus-edge" });
      gEdges.append(p);
      edgeEls.push({ a, b, path: p });
    }
    for (const n of nodes) {
      const g = s("g", {
        class: "argus-node",
        "data-id": n.id,
        transform: `translate(${n.x},${n.y})`,
        tabindex: "0",
        role: "button",
      });
      const rect = s("rect", { width: n.w, height: n.h, rx: 5, class: "argus-node-box" });
      const glyph = s("text", { x: n.kind === "group" ? 20 : 8, y: n.h / 2 + 4, class: "argus-glyph" });
      const text = s("text", { x: n.kind === "group" ? 34 : 22, y: n.h / 2 + 4, class: "argus-node-label" });
      text.textContent = n.label.length > 20 ? `${n.label.slice(0, 19)}…` : n.label;
      const title = s("title");
      title.textContent = n.id;
      const bp = s("circle", { cx: n.w - 8, cy: 8, r: 4, class: "argus-bp" });
      const cached = s("text", { x: n.w - 18, y: n.h - 5, class: "argus-cached-mark" });
      cached.textContent = "⟲";
      g.append(rect, glyph, text, bp, cached, title);
      if (n.kind === "group") {
        g.classList.add("argus-collapsed");
        const tog = s("text", { x: 6, y: n.h / 2 + 4, class: "argus-toggle", "data-toggle": n.id.slice(GROUP.length) });
        tog.textContent = "▸";
        g.append(tog);
      }
      gNodes.append(g);
      nodeEls.set(n.id, { g, rect, glyph, title, node: n });
    }
    computeLayers();
    paint();
    marks();
    highlight();
  }

  function setStatus(ref, st, name, extra = "") {
    const rejected = st === "failed" && rejectedSet.has(name);
    // Stored as running while nobody runs the session: an intent left behind.
    const drawn = memberStatus(st, name, interruptedSet);
    const cut = drawn !== st;
    const shown = rejected ? "rejected" : drawn;
    ref.rect.setAttribute("class", `argus-node-box argus-st-${shown}`);
    ref.g.setAttribute("data-status", st);
    ref.g.classList.toggle("argus-rejected", rejected);
    ref.g.classList.toggle("argus-interrupted", cut);
    ref.glyph.textContent = GLYPHS[shown] || "";
    ref.title.textContent = `${name}: ${label(shown)}${extra}`;
    ref.g.setAttribute("aria-label", `${ref.node.label}: ${label(shown)}${extra}`);
  }

  let rejectedSet = new Set();
  let interruptedSet = new Set();
  function paint() {
    const codes = model.get("status_codes");
    const legendCodes = model.get("codes");
    const tasks = model.get("tasks");
    const palette = model.get("palette");
    const full = codes.length !== lastCodes.length;
    for (let i = 0; i < tasks.length; i++) {
      if (!full && codes[i] === lastCodes[i]) continue;
      const ref = nodeEls.get(tasks[i]);
      if (!ref) continue;
      const st = legendCodes[codes[i]] || "pending";
      ref.rect.setAttribute("fill", palette[st]); // the CSS theme colour overrides it
      setStatus(ref, st, tasks[i]);
    }
    lastCodes = codes;
    if (!layerBar.hidden) placeLayers(scaleOf());
    drawMiniSoon();
    const lay = model.get("graph");
    if ((lay.groups || []).length) {
      const st = statusOf();
      for (const g of lay.groups) {
        const list = g.members.map((m) => memberStatus(st.get(m) || "pending", m, interruptedSet));
        const done = list.filter((x) => x === "succeeded" || x === "skipped").length;
        if (g.collapsed) {
          const ref = nodeEls.get(g.id);
          if (ref) setStatus(ref, groupStatus(list), g.key, `, ${done}/${list.length} done`);
        } else {
          const ref = groupEls.get(g.id);
          if (ref) ref.label.textContent = `${g.label} · ${done}/${list.length}`;
        }
      }
    }
  }

  function marks() {
    const bps = new Set(model.get("breakpoints"));
    const stale = new Set(model.get("stale"));
    const m = model.get("marks") || {};
    const cached = new Set(m.cached || []);
    const differs = new Set(model.get("differs"));
    const rej = new Set(m.rejected || []);
    const cut = new Set(m.interrupted || []);
    const differ = (a, b) => a.size !== b.size || [...a].some((t) => !b.has(t));
    const changed = differ(rej, rejectedSet) || differ(cut, interruptedSet);
    rejectedSet = rej;
    interruptedSet = cut;
    if (changed) {
      lastCodes = "";
      paint();
    }
    for (const [id, ref] of nodeEls) {
      ref.g.classList.toggle("argus-has-bp", bps.has(id));
      ref.g.classList.toggle("argus-stale", stale.has(id));
      ref.g.classList.toggle("argus-cached", cached.has(id));
      ref.g.classList.toggle("argus-differs", differs.has(id));
    }
  }

  function highlight() {
    const sel = model.get("selected");
    for (const [id, ref] of nodeEls) {
      ref.g.classList.toggle("argus-selected", id === sel);
      ref.g.setAttribute("aria-pressed", id === sel ? "true" : "false");
    }
    for (const e of edgeEls) e.path.classList.toggle("argus-edge-on", e.a === sel || e.b === sel);
    selBtn.disabled = !sel;
  }

  // -- crumbs, summary, approvals, message, controls ---------------------------
  function renderCrumbs() {
    const f = model.get("family") || {};
    const name = model.get("session_name");
    const parts = [];
    if (f.parent) {
      const up = h("button", { class: "argus-link", type: "button", title: `Show the parent session ${f.parent}` }, f.parent);
      up.addEventListener("click", () => send("open_family", { name: f.parent }));
      parts.push(up, h("span", { class: "argus-sep" }, ` › forked at ${f.forked_at || "start"} › `));
    }
    parts.push(h("b", {}, name));
    for (const k of f.forks || []) {
      const down = h("button", { class: "argus-link", type: "button", title: `Show the fork ${k}` }, k);
      down.addEventListener("click", () => send("open_family", { name: k }));
      parts.push(h("span", { class: "argus-sep" }, " · fork: "), down);
    }
    if (f.parent) {
      const cmp = h("button", { class: "argus-btn argus-compare", type: "button", title: "Mark tasks whose status or result differ from the parent's" }, "Compare with parent");
      cmp.addEventListener("click", () => send("compare"));
      parts.push(cmp);
    }
    crumbs.replaceChildren(...parts);
    crumbs.hidden = !(f.parent || (f.forks || []).length);
  }

  function renderSummary() {
    const m = model.get("summary");
    if (!m || m.total === undefined) return;
    const parts = [
      `${m.done}/${m.total} done`,
      `${m.running} running`,
      ...(m.interrupted ? [`${m.interrupted} interrupted`] : []),
      `${m.failed} failed`,
      `$${Number(m.cost || 0).toFixed(4)}`,
      `${m.tokens || 0} tok`,
      fmtSeconds(m.elapsed),
    ];
    const left = m.budget_left || {};
    const budget = [];
    if (left.cost !== undefined) budget.push(`$${Number(left.cost).toFixed(4)}`);
    if (left.tokens !== undefined) budget.push(`${left.tokens} tok`);
    if (left.wall_s !== undefined) budget.push(fmtSeconds(Number(left.wall_s)));
    if (left.steps !== undefined) budget.push(`${left.steps} steps`);
    if (budget.length) parts.push(`budget left ${budget.join(", ")}`);
    const chip = h("span", { class: `argus-chip argus-session-${m.status}` }, m.status);
    const text = h("span", { class: "argus-summary-text" }, parts.join(" · "));
    const reason = m.reason ? h("span", { class: "argus-reason", title: m.reason }, m.reason) : null;
    summary.replaceChildren(...[h("b", {}, m.name), chip, text, reason].filter(Boolean));
    renderMessage();
    renderControls();
  }

  function renderApprovals() {
    const ap = model.get("approvals") || {};
    const ids = Object.keys(ap);
    if (!ids.length) {
      approvals.replaceChildren();
      approvals.hidden = true;
      return;
    }
    approvals.hidden = false;
    const items = ids.map((id) => {
      const b = h("button", { class: "argus-btn argus-ask", title: `Review ${id}`, type: "button" }, `${id} (${ap[id].tool})`);
      b.addEventListener("click", () => {
        select(id);
        centreOn(id);
      });
      return b;
    });
    approvals.replaceChildren(h("span", {}, "Waiting for approval: "), ...items);
  }

  function renderMessage() {
    const m = model.get("message") || {};
    const reason = (model.get("summary") || {}).reason || "";
    // Each message once: not again when the summary already says it.
    let text = m.text && !reason.includes(m.text) ? m.text : "";
    if (text && reason && text.includes(reason)) text = text.replace(`; ${reason}`, "").replace(reason, "");
    message.textContent = text;
    message.className = `argus-message argus-${m.level || "info"}`;
  }

  function renderControls() {
    const busy = model.get("busy");
    const m = model.get("summary") || {};
    const counts = m.counts || {};
    const cell = model.get("cell_running");
    const live = !!busy || !!m.live;
    // A session closed in a cell (s.close()) acts no more, like a gone kernel.
    const off = disconnected || cell || !!m.closed;
    root.classList.toggle("argus-busy", !!busy);
    root.classList.toggle("argus-cell-running", !!cell);
    const stale = (model.get("stale") || []).length;
    buttons.step.disabled = off || live || !(counts.pending > 0);
    buttons.run.disabled = off || live || !(counts.pending > 0);
    buttons.pause.disabled = off || !live;
    buttons.retry_failed.disabled = off || live || !(counts.failed > 0);
    buttons.rerun_stale.disabled = off || live || !stale;
    buttons.run.textContent = busy === "run" || m.live ? "Running…" : "Run";
    buttons.run.setAttribute("aria-label", "Run");
    for (const b of detail.querySelectorAll("button:not(.argus-close)")) b.disabled = off;
    for (const b of approvals.querySelectorAll("button")) b.disabled = disconnected || !!m.closed;
    // Actions the shown thing cannot do (a LangGraph thread: Step, Run, ...)
    // stay disabled, their tooltip saying what to do instead.
    const unsupported = model.get("unsupported") || {};
    for (const b of root.querySelectorAll("button[data-action]")) {
      const why = unsupported[b.dataset.action];
      if (why) {
        b.disabled = true;
        b.title = why;
      }
    }
    renderBanner();
  }

  function renderBanner() {
    const m = model.get("summary") || {};
    const name = model.get("session_name");
    if (disconnected) {
      banner.hidden = false;
      banner.className = "argus-banner argus-disconnected-banner";
      banner.replaceChildren(
        h("b", {}, "Disconnected: "),
        `the kernel that ran ${name} is gone. Last status seen here: ${m.status || "unknown"}, ${m.done ?? "?"}/${m.total ?? "?"} done. Reopen it with `,
        h("code", {}, `%argus open ${name}`),
        " to see what was committed.",
      );
    } else if (m.closed) {
      banner.hidden = false;
      banner.className = "argus-banner argus-disconnected-banner argus-closed-banner";
      banner.replaceChildren(
        h("b", {}, "Closed: "),
        `${name} was closed in this kernel and acts no more. Last committed status: ${m.status || "unknown"}, ${m.done ?? "?"}/${m.total ?? "?"} done. Reopen it with `,
        h("code", {}, `%argus open ${name}`),
        " to go on.",
      );
    } else if (model.get("cell_running")) {
      banner.hidden = false;
      banner.className = "argus-banner argus-cell-banner";
      const v = model.get("hint_var");
      const text = v
        ? `The cell is running ${v}.run(): controls act when it returns; use ${v}.start() or %%argus --run for a live run.`
        : `A cell is running a blocking run() of ${name}: controls act when it returns; use start() or %%argus --run for a live run.`;
      banner.replaceChildren(text);
    } else {
      banner.hidden = true;
      banner.replaceChildren();
    }
  }

  function setDisconnected(why) {
    if (disconnected) return;
    disconnected = true;
    root.classList.add("argus-disconnected");
    root.setAttribute("data-disconnected", why || "comm closed");
    renderControls();
    renderDetail();
  }

  // -- detail panel ---------------------------------------------------------
  function row(k, v) {
    return h("tr", {}, h("th", {}, k), h("td", {}, v));
  }

  function renderDetail() {
    const d = model.get("detail") || {};
    if (!d.id) {
      detail.hidden = true;
      detail.replaceChildren();
      return;
    }
    detail.hidden = false;
    const close = h("button", { class: "argus-close", title: "Close (Esc)", "aria-label": "Close", type: "button" }, "×");
    close.addEventListener("click", () => select(""));
    const parts = [];
    if (d.kind === "group") {
      parts.push(h("h4", {}, d.title), close);
      const t = h("table", {});
      for (const [st, n] of Object.entries(d.counts || {})) t.append(row(label(st), n));
      parts.push(h("p", {}, `${d.members.length} tasks`), t);
      detail.replaceChildren(...parts);
      return;
    }
    const rejected = d.status === "failed" && d.error_type === "Rejected";
    const shown = rejected ? "rejected" : memberStatus(d.status, d.id, interruptedSet);
    const badge = h("span", { class: `argus-badge argus-st-${shown}` }, `${GLYPHS[shown] || ""} ${label(shown)}`);
    parts.push(h("h4", {}, d.title), close, badge);
    if (d.stale) parts.push(h("span", { class: "argus-badge argus-stale-badge" }, "stale"));
    if (d.breakpoint) parts.push(h("span", { class: "argus-badge argus-bp-badge" }, "● breakpoint"));
    if (d.description) parts.push(h("p", { class: "argus-desc" }, d.description));
    const t = h("table", { class: "argus-facts" });
    t.append(row("id", d.id), row("tool", d.tool || (d.task_kind === "llm" ? "LLM task" : "—")));
    if (d.group) t.append(row("group", d.group));
    if (d.deps && d.deps.length) t.append(row("after", d.deps.join(", ")));
    t.append(row("attempts", d.attempts));
    t.append(row("started", fmtTime(d.started)), row("duration", fmtSeconds(d.duration)));
    if (d.tokens || d.cost) t.append(row("tokens / cost", `${d.tokens} / $${Number(d.cost).toFixed(4)}`));
    if (d.idempotency_key) t.append(row("idempotency key", d.idempotency_key.slice(0, 12) + "…"));
    parts.push(t);
    const ran = d.resolved_args;
    if (ran && Object.keys(ran).length) {
      const edited = d.edited_args ? ` (edited at approval${d.approved_by ? ` by ${d.approved_by}` : ""})` : "";
      const what = d.attempts ? "args as run" : "args (references resolved so far)";
      parts.push(h("div", { class: "argus-label" }, `${what}${edited}`), h("pre", { class: "argus-resolved" }, json(ran)));
      if (json(ran) !== json(d.args)) {
        parts.push(h("details", {}, h("summary", {}, "args as planned"), h("pre", {}, json(d.args))));
      }
    }
    if (d.result !== null && d.result !== undefined) {
      parts.push(h("div", { class: "argus-label" }, "result"), h("pre", { class: "argus-result" }, d.result));
    }
    if (d.error) {
      parts.push(h("div", { class: "argus-error" }, `${d.error_type || "Error"}: ${d.error}`));
      if (d.traceback) parts.push(h("details", {}, h("summary", {}, "traceback"), h("pre", {}, d.traceback)));
    }
    if (d.reason) parts.push(h("p", { class: "argus-reason-full" }, d.reason));
    const log = d.attempt_log || [];
    if (log.length) {
      const a = h("table", { class: "argus-facts argus-attempts" }, h("tr", {}, h("th", {}, "#"), h("th", {}, "outcome"), h("th", {}, "took")));
      for (const r of log) a.append(h("tr", {}, h("td", {}, r.n), h("td", { title: r.error || "" }, r.outcome), h("td", {}, fmtSeconds(r.duration))));
      parts.push(h("div", { class: "argus-label" }, "attempts"), a);
    }
    if (d.context && typeof d.context === "object") parts.push(contextTable(d.context));
    if ((d.memories || []).length) {
      const ul = h("ul", { class: "argus-memories" });
      for (const m of d.memories) ul.append(h("li", { title: m.id }, `${m.kind}: ${m.text}`));
      parts.push(h("div", { class: "argus-label" }, "memories written"), ul);
    }
    if (d.status === "awaiting_approval") parts.push(approvalForm(d));
    else if (d.approval && d.approval.state) {
      const a = d.approval;
      parts.push(h("p", { class: "argus-approval-done" }, `approval: ${a.state}${a.by ? ` by ${a.by}` : ""}${a.reason ? ` (${a.reason})` : ""}`));
    }
    parts.push(actionsFor(d));
    detail.replaceChildren(...parts);
    renderControls();
  }

  function contextTable(c) {
    const box = h("div", { class: "argus-context" });
    const head = [];
    if (c.budget !== undefined) head.push(`budget ${c.budget} tokens`);
    if (c.used !== undefined) head.push(`used ${c.used}`);
    box.append(h("div", { class: "argus-label" }, `context${head.length ? ` (${head.join(", ")})` : ""}`));
    const items = Array.isArray(c.items) ? c.items : [];
    if (items.length) {
      const keys = [...new Set(items.flatMap((i) => Object.keys(i)))].filter((k) => k !== "text").slice(0, 5);
      const t = h("table", { class: "argus-facts argus-context-items" }, h("tr", {}, ...keys.map((k) => h("th", {}, k))));
      for (const it of items) t.append(h("tr", {}, ...keys.map((k) => h("td", {}, typeof it[k] === "object" ? json(it[k]) : it[k] ?? ""))));
      box.append(t);
    }
    for (const [k, v] of Object.entries(c)) {
      if (["items", "budget", "used"].includes(k)) continue;
      box.append(h("div", {}, `${k}: ${typeof v === "object" ? json(v) : v}`));
    }
    return box;
  }

  function approvalForm(d) {
    const asked = (d.approval && d.approval.args) || d.resolved_args || d.args || {};
    const original = json(asked);
    const area = h("textarea", { class: "argus-args", rows: 5, spellcheck: "false", "aria-label": "arguments to approve (JSON)" });
    area.value = original;
    const err = h("div", { class: "argus-error", hidden: true });
    const ok = h("button", { class: "argus-btn argus-approve", type: "button" }, "Approve");
    ok.addEventListener("click", () => {
      let args = null;
      if (area.value.trim() !== original.trim()) {
        try {
          args = JSON.parse(area.value);
        } catch (e) {
          err.hidden = false;
          err.textContent = `args are not valid JSON: ${e.message}`;
          return;
        }
      }
      send("approve", { task: d.id, args });
    });
    const why = h("input", { class: "argus-why", placeholder: "reason", type: "text", "aria-label": "reason for rejecting" });
    const no = h("button", { class: "argus-btn argus-reject", "data-action": "reject", type: "button" }, "Reject");
    no.addEventListener("click", () => send("reject", { task: d.id, reason: why.value || "rejected in the widget" }));
    const policy = d.approval && d.approval.reason ? h("p", {}, d.approval.reason) : null;
    return h(
      "div",
      { class: "argus-approval" },
      h("div", { class: "argus-label" }, "approve with args (editable JSON)"),
      policy,
      area,
      err,
      h("div", { class: "argus-row" }, ok, why, no),
    );
  }

  function actionsFor(d) {
    const box = h("div", { class: "argus-row argus-node-actions" });
    const bp = h("button", { class: "argus-btn argus-bp-btn", "data-action": "toggle_breakpoint", title: "Pause a run before this task", type: "button" }, d.breakpoint ? "Remove breakpoint" : "Breakpoint");
    bp.addEventListener("click", () => send("toggle_breakpoint", { task: d.id }));
    const fork = h("button", { class: "argus-btn argus-fork", title: "New session from here, earlier results kept", type: "button" }, "Fork here");
    fork.addEventListener("click", () => send("fork", { at: d.id }));
    box.append(bp, fork);
    if (["failed", "in_doubt", "blocked", "skipped"].includes(d.status)) {
      const r = h("button", { class: "argus-btn argus-retry", "data-action": "retry", type: "button" }, "Retry");
      r.addEventListener("click", () => send("retry", { task: d.id }));
      box.append(r);
    }
    if (["pending", "failed", "in_doubt", "blocked", "awaiting_approval"].includes(d.status)) {
      const k = h("button", { class: "argus-btn argus-skip", "data-action": "skip", type: "button" }, "Skip");
      k.addEventListener("click", () => send("skip", { task: d.id }));
      box.append(k);
    }
    return box;
  }

  // -- input ------------------------------------------------------------------
  let drag = null;
  let moved = false;
  function onDown(evt) {
    if (evt.button !== 0) return;
    wheelArmed = true;
    root.classList.add("argus-wheel-armed");
    drag = { x: evt.clientX, y: evt.clientY, view: { ...view } };
    moved = false;
  }
  function onMove(evt) {
    if (!drag) return;
    const r = svg.getBoundingClientRect();
    const dx = evt.clientX - drag.x;
    const dy = evt.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) moved = true;
    if (!moved) return;
    userMoved = true;
    setView({ ...drag.view, x: drag.view.x - (dx / r.width) * drag.view.w, y: drag.view.y - (dy / r.height) * drag.view.h });
  }
  function onUp() {
    drag = null;
  }
  function onClick(evt) {
    if (moved) {
      moved = false;
      return;
    }
    const tog = evt.target.closest("[data-toggle]");
    if (tog) {
      const key = tog.getAttribute("data-toggle");
      const cur = new Set(model.get("collapsed"));
      if (cur.has(key)) cur.delete(key);
      else cur.add(key);
      model.set("collapsed", [...cur]);
      model.save_changes();
      return;
    }
    const node = evt.target.closest("[data-id]");
    if (node) select(node.getAttribute("data-id"));
  }
  function onWheel(evt) {
    // The wheel scrolls the notebook unless Ctrl/Cmd is held or the user
    // clicked into the canvas first.
    if (!(evt.ctrlKey || evt.metaKey || wheelArmed)) return;
    evt.preventDefault();
    const p = toSvg(evt);
    zoom(evt.deltaY > 0 ? 1.15 : 1 / 1.15, p.x, p.y);
  }
  function disarm() {
    wheelArmed = false;
    root.classList.remove("argus-wheel-armed");
  }
  function onKey(evt) {
    if (evt.target.closest("textarea, input")) return;
    const node = evt.target.closest && evt.target.closest("g.argus-node");
    if (node && (evt.key === "Enter" || evt.key === " ")) {
      evt.preventDefault();
      select(node.getAttribute("data-id"));
      return;
    }
    if (node && evt.key.startsWith("Arrow")) {
      // Arrows move to the nearest node that way (layers run left to right).
      evt.preventDefault();
      const next = nearest(node.getAttribute("data-id"), evt.key);
      if (next) nodeEls.get(next).g.focus();
      return;
    }
    if (evt.key === "Escape" && model.get("selected")) {
      select("");
      return;
    }
    if (evt.ctrlKey || evt.metaKey || evt.altKey) return;
    const keys = { s: "step", r: "run", p: "pause" };
    const action = keys[evt.key];
    if (action && !buttons[action].disabled) {
      evt.preventDefault();
      evt.stopPropagation(); // not JupyterLab's command-mode shortcuts
      send(action);
    } else if (evt.key === "+" || evt.key === "=") zoom(1 / 1.3);
    else if (evt.key === "-") zoom(1.3);
  }
  function nearest(id, key) {
    const a = nodeEls.get(id).node;
    const ax = a.x + a.w / 2;
    const ay = a.y + a.h / 2;
    let best = null;
    let bestD = Infinity;
    for (const [other, ref] of nodeEls) {
      if (other === id) continue;
      const n = ref.node;
      const dx = n.x + n.w / 2 - ax;
      const dy = n.y + n.h / 2 - ay;
      const ok =
        (key === "ArrowRight" && dx > 1) ||
        (key === "ArrowLeft" && dx < -1) ||
        (key === "ArrowDown" && dy > 1) ||
        (key === "ArrowUp" && dy < -1);
      if (!ok) continue;
      // Prefer the same row (or column): the cross axis counts four times over.
      const horizontal = key === "ArrowRight" || key === "ArrowLeft";
      const d = horizontal ? Math.abs(dx) + 4 * Math.abs(dy) : Math.abs(dy) + 4 * Math.abs(dx);
      if (d < bestD) {
        bestD = d;
        best = other;
      }
    }
    return best;
  }

  function onFocus(evt) {
    // Keyboard focus (Tab) brings the node into view; a click's focus must not
    // move the graph under the pointer.
    if (drag) return;
    const node = evt.target.closest && evt.target.closest("g.argus-node");
    if (node) ensureVisible(node.getAttribute("data-id"));
  }
  svg.addEventListener("pointerdown", onDown);
  svg.addEventListener("pointerleave", disarm);
  svg.addEventListener("blur", disarm);
  window.addEventListener("pointermove", onMove);
  window.addEventListener("pointerup", onUp);
  svg.addEventListener("click", onClick);
  svg.addEventListener("wheel", onWheel, { passive: false });
  root.addEventListener("keydown", onKey);
  root.addEventListener("focusin", onFocus);
  zoomIn.addEventListener("click", () => zoom(1 / 1.3));
  zoomOut.addEventListener("click", () => zoom(1.3));
  fitBtn.addEventListener("click", fitAll);
  selBtn.addEventListener("click", () => centreOn(model.get("selected")));
  expandBtn.addEventListener("click", () => {
    expanded = !expanded;
    expandBtn.setAttribute("aria-pressed", String(expanded));
    expandBtn.textContent = expanded ? "Collapse" : "Expand";
    size();
  });

  // -- wiring -----------------------------------------------------------------
  const handlers = {
    "change:graph": () => {
      draw();
      size();
      frame();
    },
    "change:status_codes": paint,
    "change:palette": () => {
      lastCodes = "";
      paint();
    },
    "change:breakpoints": marks,
    "change:stale": () => {
      marks();
      renderControls();
    },
    "change:marks": marks,
    "change:differs": marks,
    "change:selected": highlight,
    "change:detail": renderDetail,
    "change:summary": renderSummary,
    "change:approvals": renderApprovals,
    "change:message": renderMessage,
    "change:busy": renderControls,
    "change:cell_running": renderControls,
    "change:unsupported": renderControls,
    "change:family": renderCrumbs,
    "change:session_name": renderCrumbs,
    "change:height": () => {
      size();
      frame();
    },
    // ipywidgets marks every model of a restarted or dead kernel this way.
    comm_live_update: () => setDisconnected("the kernel's comm closed"),
  };
  for (const [ev, fn] of Object.entries(handlers)) model.on(ev, fn);
  draw();
  renderCrumbs();
  renderSummary();
  renderApprovals();
  renderMessage();
  renderControls();
  renderDetail();
  size();
  // Frame once the element has a size (it may not be attached yet); later
  // resizes (the panel opening, the window) re-frame, or keep the user's zoom
  // and centre once they have panned or zoomed.
  let size0 = null;
  const ro = new ResizeObserver(() => {
    const cw = svg.clientWidth;
    const ch = svg.clientHeight;
    if (!cw || !ch) return;
    if (!size0 || !userMoved) frame();
    else {
      const scale = size0.w / view.w; // keep the zoom the user chose
      const w = cw / scale;
      const hh = ch / scale;
      setView({ x: view.x + (view.w - w) / 2, y: view.y + (view.h - hh) / 2, w, h: hh });
    }
    size0 = { w: cw, h: ch };
  });
  ro.observe(svg);
  frame();

  return () => {
    for (const [ev, fn] of Object.entries(handlers)) model.off(ev, fn);
    window.removeEventListener("pointermove", onMove);
    window.removeEventListener("pointerup", onUp);
    window.removeEventListener("pointerup", miniUp);
    ro.disconnect();
    // This live view is gone: let the static fallback show again.
    for (const f of fallbacks()) f.style.display = "";
  };
}

export default { render };
