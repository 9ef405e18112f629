// Argus Lab GraphWidget front end: draws the plan DAG the kernel laid out, colours
// nodes by status, pans and zooms (SVG viewBox), and sends clicks as actions.
// Plain ES module, no dependencies, no network: anywidget loads it as it is.

const SVG = "http://www.w3.org/2000/svg";
const GROUP = "#group:";
const LOD_NODES = 400; // above this many nodes, labels hide when zoomed far out

function h(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
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

function groupStatus(list) {
  for (const st of ["failed", "in_doubt", "awaiting_approval", "running", "blocked"]) {
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
  const send = (action, extra = {}) => model.send({ action, ...extra });
  const select = (id) => {
    model.set("selected", id);
    model.save_changes();
  };

  // -- skeleton -------------------------------------------------------------
  const root = h("div", { class: "argus-graph" });
  const toolbar = h("div", { class: "argus-toolbar", role: "toolbar" });
  const buttons = {};
  const tools = [
    ["step", "Step", "Run the next ready task(s) once"],
    ["run", "Run", "Run in the background until done, paused or failed"],
    ["pause", "Pause", "No new task starts; running ones finish"],
    ["retry_failed", "Retry failed", "Make failed tasks pending again and run"],
    ["rerun_stale", "Rerun stale", "Rerun tasks whose inputs or tool changed"],
  ];
  for (const [action, label, title] of tools) {
    const b = h("button", { class: "argus-btn", "data-action": action, title }, label);
    b.addEventListener("click", () => send(action));
    buttons[action] = b;
    toolbar.append(b);
  }
  const zoomIn = h("button", { class: "argus-btn argus-zoom", title: "Zoom in" }, "+");
  const zoomOut = h("button", { class: "argus-btn argus-zoom", title: "Zoom out" }, "−");
  const fitBtn = h("button", { class: "argus-btn argus-zoom", title: "Fit" }, "Fit");
  toolbar.append(h("span", { class: "argus-spacer" }), zoomOut, zoomIn, fitBtn);

  const summary = h("div", { class: "argus-summary" });
  const approvals = h("div", { class: "argus-approvals" });
  const message = h("div", { class: "argus-message" });
  const canvas = h("div", { class: "argus-canvas" });
  const svg = s("svg", { class: "argus-svg", role: "img" });
  const gGroups = s("g", { class: "argus-groups" });
  const gEdges = s("g", { class: "argus-edges" });
  const gNodes = s("g", { class: "argus-nodes" });
  svg.append(gGroups, gEdges, gNodes);
  canvas.append(svg);
  const detail = h("aside", { class: "argus-detail", hidden: true });
  const main = h("div", { class: "argus-main" }, canvas, detail);
  root.append(toolbar, summary, approvals, main, message);
  el.append(root);

  // -- drawing --------------------------------------------------------------
  let nodeEls = new Map(); // id -> {g, rect, node}
  let groupEls = new Map(); // group id -> {label, group}
  let edgeEls = []; // {a, b, path}
  let lastCodes = "";
  let view = { x: 0, y: 0, w: 100, h: 100 };
  let userMoved = false; // until the user pans or zooms, resizes refit
  let nNodes = 0;

  const statusOf = () => {
    const tasks = model.get("tasks");
    const codes = model.get("status_codes");
    const legend = model.get("codes");
    const out = new Map();
    for (let i = 0; i < tasks.length; i++) out.set(tasks[i], legend[codes[i]] || "pending");
    return out;
  };

  function setView(v) {
    view = v;
    svg.setAttribute("viewBox", `${v.x} ${v.y} ${v.w} ${v.h}`);
    const scale = (svg.clientWidth || 800) / v.w;
    root.classList.toggle("argus-lod", nNodes > LOD_NODES && scale < 0.45);
  }

  function fit() {
    userMoved = false;
    const lay = model.get("graph");
    const W = Math.max(lay.width || 100, 100);
    const H = Math.max(lay.height || 100, 60);
    const cw = svg.clientWidth || 800;
    const ch = svg.clientHeight || model.get("height");
    const aspect = cw / ch;
    let w = W;
    let hh = H;
    if (W / H > aspect) hh = W / aspect;
    else w = H * aspect;
    // Never magnify a small graph beyond 1:1 (labels would look oversized).
    if (w < cw) {
      hh *= cw / w;
      w = cw;
    }
    setView({ x: (W - w) / 2, y: (H - hh) / 2, w, h: hh });
  }

  function zoom(factor, cx, cy) {
    userMoved = true;
    const px = cx === undefined ? view.x + view.w / 2 : cx;
    const py = cy === undefined ? view.y + view.h / 2 : cy;
    const w = view.w * factor;
    const hh = view.h * factor;
    setView({ x: px - (px - view.x) * factor, y: py - (py - view.y) * factor, w, h: hh });
  }

  function toSvg(evt) {
    const r = svg.getBoundingClientRect();
    // The viewBox keeps the element's aspect ratio (see fit), so this is exact.
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
    nNodes = nodes.length;
    for (const g of lay.groups || []) {
      if (g.collapsed) continue;
      const el = s("g", { class: "argus-group", "data-group": g.key });
      if (g.dissolved) el.classList.add("argus-dissolved");
      el.append(
        s("rect", { x: g.x, y: g.y, width: g.w, height: g.h, rx: 6, class: "argus-group-box" }),
      );
      const label = s("text", { x: g.x + 22, y: g.y + 15, class: "argus-group-label" });
      label.textContent = g.label;
      el.append(label);
      if (!g.dissolved) {
        const tog = s("text", {
          x: g.x + 8,
          y: g.y + 15,
          class: "argus-toggle",
          "data-toggle": g.key,
        });
        tog.textContent = "▾";
        el.append(tog);
      }
      gGroups.append(el);
      groupEls.set(g.id, { label, group: g });
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
      });
      const rect = s("rect", { width: n.w, height: n.h, rx: 5, class: "argus-node-box" });
      const text = s("text", { x: n.kind === "group" ? 22 : 10, y: n.h / 2 + 4 });
      text.textContent = n.label.length > 22 ? `${n.label.slice(0, 21)}…` : n.label;
      const title = s("title");
      title.textContent = n.id;
      const bp = s("circle", { cx: n.w - 8, cy: 8, r: 4, class: "argus-bp" });
      g.append(rect, text, bp, title);
      if (n.kind === "group") {
        g.classList.add("argus-collapsed");
        const tog = s("text", {
          x: 8,
          y: n.h / 2 + 4,
          class: "argus-toggle",
          "data-toggle": n.id.slice(GROUP.length),
        });
        tog.textContent = "▸";
        g.append(tog);
      }
      gNodes.append(g);
      nodeEls.set(n.id, { g, rect, title, node: n });
    }
    paint();
    marks();
    highlight();
  }

  function paint() {
    const codes = model.get("status_codes");
    const palette = model.get("palette");
    const legend = model.get("codes");
    const tasks = model.get("tasks");
    const full = codes.length !== lastCodes.length;
    for (let i = 0; i < tasks.length; i++) {
      if (!full && codes[i] === lastCodes[i]) continue;
      const ref = nodeEls.get(tasks[i]);
      if (!ref) continue;
      const st = legend[codes[i]] || "pending";
      ref.rect.setAttribute("fill", palette[st]);
      ref.g.setAttribute("data-status", st);
      ref.title.textContent = `${tasks[i]}: ${st}`;
    }
    lastCodes = codes;
    // Collapsed groups and group headers summarise their members.
    const lay = model.get("graph");
    if ((lay.groups || []).length) {
      const st = statusOf();
      for (const g of lay.groups) {
        const list = g.members.map((m) => st.get(m) || "pending");
        const done = list.filter((x) => x === "succeeded" || x === "skipped").length;
        if (g.collapsed) {
          const ref = nodeEls.get(g.id);
          if (!ref) continue;
          const agg = groupStatus(list);
          ref.rect.setAttribute("fill", palette[agg]);
          ref.g.setAttribute("data-status", agg);
          ref.title.textContent = `${g.key}: ${done}/${list.length} done`;
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
    for (const [id, ref] of nodeEls) {
      ref.g.classList.toggle("argus-has-bp", bps.has(id));
      ref.g.classList.toggle("argus-stale", stale.has(id));
    }
  }

  function highlight() {
    const sel = model.get("selected");
    for (const [id, ref] of nodeEls) ref.g.classList.toggle("argus-selected", id === sel);
    for (const e of edgeEls) {
      e.path.classList.toggle("argus-edge-on", e.a === sel || e.b === sel);
    }
  }

  // -- summary, approvals, message, busy -------------------------------------
  function renderSummary() {
    const m = model.get("summary");
    if (!m || m.total === undefined) return;
    const parts = [
      `${m.done}/${m.total} done`,
      `${m.running} running`,
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
    parts.push(budget.length ? `budget left ${budget.join(", ")}` : "no budget set");
    const chip = h("span", { class: `argus-chip argus-session-${m.status}` }, m.status);
    const text = h("span", { class: "argus-summary-text" }, parts.join(" · "));
    const reason = m.reason ? h("span", { class: "argus-reason", title: m.reason }, m.reason) : null;
    summary.replaceChildren(...[h("b", {}, m.name), chip, text, reason].filter(Boolean));
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
      const b = h(
        "button",
        { class: "argus-btn argus-ask", title: `Review ${id}` },
        `${id} (${ap[id].tool})`,
      );
      b.addEventListener("click", () => select(id));
      return b;
    });
    approvals.replaceChildren(h("span", {}, "Waiting for approval: "), ...items);
  }

  function renderMessage() {
    const m = model.get("message") || {};
    message.textContent = m.text || "";
    message.className = `argus-message argus-${m.level || "info"}`;
  }

  function renderBusy() {
    const busy = model.get("busy");
    root.classList.toggle("argus-busy", !!busy);
    for (const a of ["step", "run", "retry_failed", "rerun_stale"]) {
      buttons[a].disabled = !!busy;
    }
    buttons.run.textContent = busy === "run" ? "Running…" : "Run";
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
    const palette = model.get("palette");
    const close = h("button", { class: "argus-close", title: "Close" }, "×");
    close.addEventListener("click", () => select(""));
    const parts = [];
    if (d.kind === "group") {
      parts.push(h("h4", {}, d.title), close);
      const t = h("table", {});
      for (const [st, n] of Object.entries(d.counts || {})) t.append(row(st, n));
      parts.push(h("p", {}, `${d.members.length} tasks`), t);
      detail.replaceChildren(...parts);
      return;
    }
    const badge = h(
      "span",
      { class: "argus-badge", style: `background:${palette[d.status]}` },
      d.status,
    );
    parts.push(h("h4", {}, d.title), close, badge);
    if (d.stale) parts.push(h("span", { class: "argus-badge argus-stale-badge" }, "stale"));
    if (d.description) parts.push(h("p", { class: "argus-desc" }, d.description));
    const t = h("table", { class: "argus-facts" });
    t.append(row("id", d.id), row("tool", d.tool || "—"));
    if (d.group) t.append(row("group", d.group));
    if (d.deps && d.deps.length) t.append(row("after", d.deps.join(", ")));
    t.append(row("attempts", d.attempts));
    t.append(row("started", fmtTime(d.started)), row("duration", fmtSeconds(d.duration)));
    if (d.tokens || d.cost) t.append(row("tokens / cost", `${d.tokens} / $${Number(d.cost).toFixed(4)}`));
    if (d.idempotency_key) t.append(row("idempotency key", d.idempotency_key.slice(0, 12) + "…"));
    parts.push(t);
    if (d.args && Object.keys(d.args).length) {
      parts.push(h("div", { class: "argus-label" }, "args"), h("pre", {}, json(d.args)));
    }
    if (d.result !== null && d.result !== undefined) {
      parts.push(h("div", { class: "argus-label" }, "result"), h("pre", { class: "argus-result" }, d.result));
    }
    if (d.error) {
      parts.push(h("div", { class: "argus-error" }, `${d.error_type || "Error"}: ${d.error}`));
      if (d.traceback) {
        parts.push(h("details", {}, h("summary", {}, "traceback"), h("pre", {}, d.traceback)));
      }
    }
    if (d.reason) parts.push(h("p", { class: "argus-reason-full" }, d.reason));
    if (d.context && typeof d.context === "object") {
      const c = h("table", { class: "argus-facts" });
      for (const [k, v] of Object.entries(d.context)) c.append(row(k, typeof v === "object" ? json(v) : v));
      parts.push(h("div", { class: "argus-label" }, "context"), c);
    }
    if (d.status === "awaiting_approval") parts.push(approvalForm(d));
    else if (d.approval && d.approval.state) {
      const a = d.approval;
      parts.push(h("p", { class: "argus-approval-done" }, `approval: ${a.state}${a.by ? ` by ${a.by}` : ""}${a.reason ? ` (${a.reason})` : ""}`));
    }
    parts.push(actionsFor(d));
    detail.replaceChildren(...parts);
  }

  function approvalForm(d) {
    const asked = (d.approval && d.approval.args) || d.args || {};
    const original = json(asked);
    const area = h("textarea", { class: "argus-args", rows: 5, spellcheck: "false" });
    area.value = original;
    const err = h("div", { class: "argus-error", hidden: true });
    const ok = h("button", { class: "argus-btn argus-approve" }, "Approve");
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
    const why = h("input", { class: "argus-why", placeholder: "reason", type: "text" });
    const no = h("button", { class: "argus-btn argus-reject" }, "Reject");
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
    const bp = h(
      "button",
      { class: "argus-btn argus-bp-btn", title: "Pause a run before this task" },
      d.breakpoint ? "Remove breakpoint" : "Breakpoint",
    );
    bp.addEventListener("click", () => send("toggle_breakpoint", { task: d.id }));
    const fork = h("button", { class: "argus-btn argus-fork", title: "New session from here, earlier results kept" }, "Fork here");
    fork.addEventListener("click", () => send("fork", { at: d.id }));
    box.append(bp, fork);
    if (["failed", "in_doubt", "blocked", "skipped"].includes(d.status)) {
      const r = h("button", { class: "argus-btn argus-retry" }, "Retry");
      r.addEventListener("click", () => send("retry", { task: d.id }));
      box.append(r);
    }
    if (["pending", "failed", "in_doubt", "blocked", "awaiting_approval"].includes(d.status)) {
      const k = h("button", { class: "argus-btn argus-skip" }, "Skip");
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
    setView({
      ...drag.view,
      x: drag.view.x - (dx / r.width) * drag.view.w,
      y: drag.view.y - (dy / r.height) * drag.view.h,
    });
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
    evt.preventDefault();
    const p = toSvg(evt);
    zoom(evt.deltaY > 0 ? 1.15 : 1 / 1.15, p.x, p.y);
  }
  svg.addEventListener("pointerdown", onDown);
  window.addEventListener("pointermove", onMove);
  window.addEventListener("pointerup", onUp);
  svg.addEventListener("click", onClick);
  svg.addEventListener("wheel", onWheel, { passive: false });
  zoomIn.addEventListener("click", () => zoom(1 / 1.3));
  zoomOut.addEventListener("click", () => zoom(1.3));
  fitBtn.addEventListener("click", fit);

  // -- wiring -----------------------------------------------------------------
  const size = () => {
    canvas.style.height = `${model.get("height")}px`;
    detail.style.height = `${model.get("height")}px`;
  };
  size();
  const handlers = {
    "change:graph": () => {
      draw();
      fit();
    },
    "change:status_codes": paint,
    "change:palette": () => {
      lastCodes = "";
      paint();
    },
    "change:breakpoints": marks,
    "change:stale": marks,
    "change:selected": highlight,
    "change:detail": renderDetail,
    "change:summary": renderSummary,
    "change:approvals": renderApprovals,
    "change:message": renderMessage,
    "change:busy": renderBusy,
    "change:height": () => {
      size();
      fit();
    },
  };
  for (const [ev, fn] of Object.entries(handlers)) model.on(ev, fn);
  draw();
  renderSummary();
  renderApprovals();
  renderMessage();
  renderBusy();
  renderDetail();
  // Fit once the element has a size (it may not be attached yet); later resizes
  // (the detail panel opening, the window) refit, or keep the user's zoom and
  // centre once they have panned or zoomed.
  let size0 = null;
  const ro = new ResizeObserver(() => {
    const cw = svg.clientWidth;
    const ch = svg.clientHeight;
    if (!cw || !ch) return;
    if (!size0 || !userMoved) fit();
    else {
      const w = (view.w * cw) / size0.w;
      const hh = (view.h * ch) / size0.h;
      setView({ x: view.x + (view.w - w) / 2, y: view.y + (view.h - hh) / 2, w, h: hh });
    }
    size0 = { w: cw, h: ch };
  });
  ro.observe(svg);
  fit();

  return () => {
    for (const [ev, fn] of Object.entries(handlers)) model.off(ev, fn);
    window.removeEventListener("pointermove", onMove);
    window.removeEventListener("pointerup", onUp);
    ro.disconnect();
  };
}

export default { render };
