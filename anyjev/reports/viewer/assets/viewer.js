/* anyjev run viewer: this project's own code, no library. It runs from file:// and fetches nothing: the run's
   data is inline, and a cell's data files (cells/<model>/<task>.js, .items.js) are <script> tags added when the
   cell is opened, each calling anyjevViewer.load(kind, key, data). Pages (hash routes):
     #/                      the run: every cell with its summary numbers, and the failed cells
     #/cell/<model>/<task>   a cell: every test item, filters, sorting, the reliability diagram
     #/item/<model>/<task>/<item id>   an item: texts, probabilities by rotation, priors, levels, prompts */
(function () {
  "use strict";

  const RUN = JSON.parse(document.getElementById("anyjev-run").textContent);
  const CELLS = {};
  RUN.cells.forEach((c) => { CELLS[c.key] = c; });
  const loaded = { cell: {}, items: {} };
  const waiting = {};
  const app = document.getElementById("app");
  const crumbs = document.getElementById("crumbs");

  const viewer = {
    load(kind, key, data) {
      loaded[kind][key] = data;
      const w = waiting[kind + ":" + key];
      if (w) { delete waiting[kind + ":" + key]; w.resolve(data); }
    },
    renders: [],
  };
  window.anyjevViewer = viewer;

  // ------------------------------------------------------------------------------------------ helpers
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  const fmt = (v, d = 3) => (v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(d));
  const fmtT = (t) => (t === null || t === undefined ? "–" : Number(t).toPrecision(3).replace(/\.?0+$/, (m) => (m.startsWith(".") ? "" : m)));
  const seg = (s) => encodeURIComponent(s);
  const cellHash = (key, query) => "#/cell/" + key.split("/").map(seg).join("/") + (query ? "?" + query : "");
  const itemHash = (key, id, query) => "#/item/" + key.split("/").map(seg).join("/") + "/" + seg(id) + (query ? "?" + query : "");
  const srcOf = (path) => path.split("/").map(seg).join("/");


  function load(kind, cell) {
    const key = cell.key;
    if (loaded[kind][key]) return Promise.resolve(loaded[kind][key]);
    const id = kind + ":" + key;
    if (waiting[id]) return waiting[id].promise;
    let resolve, reject;
    const promise = new Promise((res, rej) => { resolve = res; reject = rej; });
    waiting[id] = { promise, resolve, reject };
    const s = document.createElement("script");
    s.src = srcOf(cell.files[kind]);
    s.onerror = () => {
      delete waiting[id];
      s.remove();
      reject(new Error("could not load " + cell.files[kind] + ": open index.html from the viewer's own folder " +
        "(results/viewer/), where the cells/ folder is"));
    };
    document.head.appendChild(s);
    return promise;
  }

  function setCrumbs(parts) {
    crumbs.innerHTML = parts.map((p) => (p.href ? `<a href="${p.href}">${esc(p.text)}</a>` : `<span>${esc(p.text)}</span>`))
      .join('<span class="sep">›</span>');
  }

  function done(route) {
    document.body.dataset.state = "ready";
    document.body.dataset.route = route;
    const ms = performance.now();
    viewer.renders.push({ route, ms });
    document.dispatchEvent(new CustomEvent("anyjev:rendered", { detail: { route, ms } }));
  }

  function fail(err) {
    app.innerHTML = `<div class="error-box"><b>Cannot show this page.</b> ${esc(err.message || err)}</div>`;
    document.body.dataset.state = "error";
  }

  // Viridis (perceptually uniform, readable with colour-vision deficiencies), 10 anchors interpolated.
  const VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725"]
    .map((h) => [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)));
  function viridis(t) {
    const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
    const f = x - i;
    return VIRIDIS[i].map((a, j) => Math.round(a + f * (VIRIDIS[i + 1][j] - a)));
  }
  function heatStyle(v, max) {
    const rgb = viridis(max > 0 ? v / max : 0);
    const lum = (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255;
    return `background:rgb(${rgb.join(",")});color:${lum < 0.55 ? "#fff" : "#000"}`;
  }
  function scaleLegend(max, what) {
    const stops = [0, 0.25, 0.5, 0.75, 1].map((t) => `rgb(${viridis(t).join(",")}) ${t * 100}%`).join(",");
    return `<div class="scale">${esc(what)}: 0 <span class="bar" style="background:linear-gradient(to right,${stops})"></span> ${fmt(max)}</div>`;
  }

  // --------------------------------------------------------------------------------------------- run
  function metricCell(v, d = 3) {
    if (!v || v[0] === null) return '<td class="num">–</td>';
    return `<td class="num"><span class="v">${fmt(v[0], d)}</span><span class="ci">[${fmt(v[1], d)}, ${fmt(v[2], d)}]</span></td>`;
  }

  function tText(c) {
    const t = c.temperature || {};
    return Object.keys(t).map((g) => `${g} ${fmtT(t[g].T)}${t[g].at_bound ? " (at bound)" : ""}`).join(", ") || "–";
  }

  // What a reader of a cell must know (its evaluation's notes: fewer items than asked, L1 refused or pooled over K).
  function notesHtml(c) {
    return (c.notes || []).map((n) => `<div class="note">${esc(n)}</div>`).join("");
  }

  // The batch audit (scoring.audit): the audited items read again under another batch; flagged when a decision changed.
  function auditText(c) {
    const a = c.audit;
    if (!a) return "batch audit: –";
    const changed = Object.keys(a.changed).filter((lv) => a.changed[lv] > 0);
    const said = changed.length ? changed.map((lv) => `${esc(lv)} ${a.changed[lv]}`).join(", ") : "none";
    return `<span class="audit${changed.length ? " changed" : ""}" title="${a.prompts} prompts read again alone, in ${fmt(a.seconds, 1)} s">` +
      `batch audit: ${a.items} items, max |Δ log-prob| ${a.max_dlp === 0 ? "0" : a.max_dlp.toExponential(1)}, decisions changed: ${said}</span>`;
  }

  const CARD_HEAD = '<thead><tr><th>level</th><th class="num">acc ↑</th><th class="num">NLL ↓</th><th class="num">ECE ↓</th>' +
    '<th class="num">flip ↓</th></tr></thead>';

  function card(c, compact) {
    if (!c) return '<td><div class="card muted">not in this run</div></td>';
    if (c.status !== "done") {
      return `<td><div class="card failed" data-cell="${esc(c.key)}"><h3>${esc(c.model)} / ${esc(c.task)}</h3>` +
        `<span class="status">failed</span><code class="error">${esc(c.error)}</code>` +
        `<span class="small">log: <code class="log">${esc(c.log)}</code></span></div></td>`;
    }
    const rows = c.levels.map((lv) => {
      const m = c.metrics[lv];
      return `<tr data-level="${esc(lv)}"><th>${esc(lv)}</th><td class="num" data-metric="acc">${fmt(m.acc[0])}</td>` +
        `<td class="num" data-metric="nll">${fmt(m.nll[0])}</td><td class="num" data-metric="ece">${fmt(m.ece[0])}</td>` +
        `<td class="num" data-metric="flip">${fmt(m.flip[0])}</td></tr>`;
    }).join("");
    return `<td><div class="card" data-cell="${esc(c.key)}"><h3><a href="${cellHash(c.key)}">${esc(c.model)} / ${esc(c.task)}</a></h3>` +
      `<div class="small muted">n = ${c.n} test items, K = ${esc(c.k)}; T (L1) ${esc(tText(c))}; answer mass ${c.answer_mass ? fmt(c.answer_mass[0]) : "–"}; ${auditText(c)}</div>` +
      notesHtml(c) + `<table>${compact ? "" : CARD_HEAD}<tbody>${rows}</tbody></table></div></td>`;
  }

  // A run of more cells gets a compact run page: one legend for its cards instead of a header in each, and its summary
  // table built when opened. Elements cost the renderer about 3 kB each; at 300 cells the table's rows are 80% of them.
  const LARGE_RUN = 30;

  function renderRun() {
    setCrumbs([{ text: "run" }]);
    document.title = "anyjev run viewer";
    const doneCells = RUN.cells.filter((c) => c.status === "done");
    const failed = RUN.cells.length - doneCells.length;
    const large = RUN.cells.length > LARGE_RUN;
    const byPair = {};
    RUN.cells.forEach((c) => { byPair[c.model + "\u0000" + c.task] = c; });
    const grid = `<table class="grid" id="grid"><thead><tr><th></th>${RUN.tasks.map((t) => `<th>${esc(t)}</th>`).join("")}</tr></thead><tbody>` +
      RUN.models.map((m) => `<tr><th>${esc(m)}</th>${RUN.tasks.map((t) => card(byPair[m + "\u0000" + t], large)).join("")}</tr>`).join("") +
      "</tbody></table>";
    const head = "<tr><th>model</th><th>task</th><th>level</th><th class=\"num\">n</th><th>K</th>" +
      RUN.metrics.map((m) => `<th class="num">${esc(m.title)} ${m.arrow}</th>`).join("") +
      '<th class="num">ties</th><th class="num">T (L1)</th><th class="num">answer mass</th></tr>';
    const body = () => doneCells.map((c) => c.levels.map((lv, i) => {
      const m = c.metrics[lv];
      const t = lv !== "L1" ? "" : Object.keys(c.temperature || {}).map((g) => `<span class="t" data-group="${g}">${g} ` +
        `${fmtT(c.temperature[g].T)}${c.temperature[g].at_bound ? " (at bound)" : ""}</span>`).join("");
      return `<tr data-cell="${esc(c.key)}" data-level="${esc(lv)}"${i === 0 ? ' class="first"' : ""}>` +
        `<td>${i === 0 ? `<a href="${cellHash(c.key)}">${esc(c.model)}</a>` : ""}</td><td>${i === 0 ? esc(c.task) : ""}</td>` +
        `<td>${esc(lv)}</td><td class="num">${c.n}</td><td>${esc(c.k)}</td>` +
        RUN.metrics.map((mm) => metricCell(m[mm.key]).replace("<td", `<td data-metric="${mm.key}"`)).join("") +
        `<td class="num" data-metric="tie_rate">${fmt(m.tie_rate, 2)}</td><td class="num" data-metric="T">${t}</td>` +
        (i === 0 && c.answer_mass ? metricCell(c.answer_mass).replace("<td", '<td data-metric="answer_mass"') : '<td data-metric="answer_mass"></td>') +
        "</tr>";
    }).join("")).join("");
    const noted = doneCells.filter((c) => (c.notes || []).length);
    const notes = noted.length ? `<div class="notes" id="notes"><b>Read with these notes</b> (each cell's metrics.json):` +
      noted.map((c) => `<div data-cell="${esc(c.key)}">${esc(c.key)}: ${c.notes.map(esc).join("; ")}</div>`).join("") + "</div>" : "";
    const table = () => `<table class="summary" id="summary"><thead>${head}</thead><tbody>${body()}</tbody></table>`;
    const rows = doneCells.reduce((n, c) => n + c.levels.length, 0);
    const note = doneCells.length ? doneCells[0].interval : "";
    app.innerHTML = `<h1>Run: ${RUN.cells.length} cell${RUN.cells.length === 1 ? "" : "s"}` +
      `${failed ? `, <span class="status" style="color:var(--warn)">${failed} failed</span>` : ""}</h1>` +
      `<p class="muted small">Each cell opens its items (wrong, flipped, tied, low answer mass) and each item its label ` +
      `probabilities under every rotation of its options. Levels: raw (one prompt), L0-perm (all rotations, geometric mean), ` +
      `L0-bc (label prior divided out), L0 (both), L1 (L0 with a temperature fitted on the calibration items).</p>` +
      (large ? `<p class="muted small">Each card lists, per level: acc ↑, NLL ↓, ECE ↓, flip ↓.</p>` : "") +
      `<div class="scroll">${grid}</div>` +
      `<h2>Summary table</h2><p class="muted small">The numbers of results/tables/summary.csv, from each cell's metrics.json: ` +
      `values with their ${esc(note)}. ↑ higher is better, ↓ lower is better; ties: share of test items with a tied top label.</p>` + notes +
      (large ? `<details id="summary-details"><summary>Show the table: ${rows} rows</summary><div class="scroll"></div></details>`
        : `<div class="scroll">${table()}</div>`);
    if (large) {
      const details = document.getElementById("summary-details");
      details.addEventListener("toggle", () => {
        const holder = details.querySelector(".scroll");
        if (details.open && !holder.firstChild) holder.innerHTML = table();
      });
    }
    done("run");
  }

  // -------------------------------------------------------------------------------------------- cell
  // flip: flips at this level; stable: ... but not at this one (absent: at any other level or not)
  const FILTERS = ["wrong", "flip", "stable", "tied", "mass", "clevel", "cmin", "cmax", "q", "sort", "dir"];

  function filterState(params, cell) {
    const st = {};
    FILTERS.forEach((f) => { if (params.has(f)) st[f] = params.get(f); });
    ["clevel", "flip", "stable"].forEach((f) => { if (st[f] && !cell.levels.includes(st[f])) delete st[f]; });
    if (!st.flip) delete st.stable;
    return st;
  }

  // The levels the flip filter compares when the user has not picked them: flipped at raw but not at L0.
  function flipDefaults(levels) {
    const at = levels.includes("raw") ? "raw" : levels[0];
    return { at, not: levels.includes("L0") && at !== "L0" ? "L0" : "" };
  }
  function stateQuery(st) {
    const p = new URLSearchParams();
    FILTERS.forEach((f) => { if (st[f] !== undefined && st[f] !== "") p.set(f, st[f]); });
    return p.toString();
  }

  function selectRows(cell, st) {
    const L = cell.levels;
    const has = (lv) => L.includes(lv);
    let rows = cell.items.slice();
    if (st.wrong && has(st.wrong)) rows = rows.filter((it) => it.d[st.wrong].ok < 1);
    if (st.flip && has(st.flip)) {
      rows = rows.filter((it) => it.d[st.flip].f > 0 && !(st.stable && has(st.stable) && it.d[st.stable].f > 0));
    }
    if (st.tied) rows = rows.filter((it) => L.some((lv) => it.d[lv].t > 1 || (it.d[lv].tr || 1) > 1));
    if (st.mass !== undefined && st.mass !== "") {
      const th = Number(st.mass);
      rows = rows.filter((it) => it.m !== null && it.m < th);
    }
    const cl = st.clevel || (has("L0") ? "L0" : L[0]);
    if (st.cmin !== undefined && st.cmin !== "") rows = rows.filter((it) => it.d[cl].c >= Number(st.cmin));
    if (st.cmax !== undefined && st.cmax !== "") rows = rows.filter((it) => it.d[cl].c <= Number(st.cmax));
    if (st.q) { const q = st.q.toLowerCase(); rows = rows.filter((it) => it.id.toLowerCase().includes(q)); }
    if (st.sort) {
      const dir = st.dir === "desc" ? -1 : 1;
      const key = st.sort === "id" ? (it) => it.id : st.sort === "gold" ? (it) => it.gold : st.sort === "mass" ? (it) => it.m
        : has(st.sort) ? (it) => it.d[st.sort].c : null;
      if (key) {
        rows.sort((a, b) => {
          const x = key(a), y = key(b);
          if (x === y) return 0;
          if (x === null) return 1;
          if (y === null) return -1;
          return (x < y ? -1 : 1) * dir;
        });
      }
    }
    return rows;
  }

  function okMark(ok) {
    if (ok >= 1) return '<span class="ok yes" title="correct">✓</span>';
    if (ok <= 0) return '<span class="ok no" title="wrong">✗</span>';
    return `<span class="ok part" title="gold is among the tied top labels: correct with probability ${fmt(ok)}">1/${Math.round(1 / ok)}</span>`;
  }
  function decCell(it, lv) {
    const d = it.d[lv];
    const names = it.o;
    let marks = okMark(d.ok);
    if (d.f !== undefined && d.f > 0) {
      marks += `<span class="fl" title="the answer changes when the options are reversed (reversed listing: ${esc(names[d.pr])})` +
        `${d.f < 1 ? ", probability " + fmt(d.f) : ""}">⇄${d.f < 1 ? fmt(d.f, 2) : ""}</span>`;
    }
    if (d.t > 1 || (d.tr || 1) > 1) marks += `<span class="tie" title="labels tied for the top: ${d.t} (reversed listing: ${d.tr || 1})">=${Math.max(d.t, d.tr || 1)}</span>`;
    return `<td class="dec" data-level="${esc(lv)}"><span class="pred">${esc(names[d.p])}</span><span class="conf">${fmt(d.c)}</span>${marks}</td>`;
  }

  function renderRows(cell, st) {
    const rows = selectRows(cell, st);
    const query = stateQuery(st);
    const tbody = rows.map((it) => `<tr data-id="${esc(it.id)}"><td><a href="${itemHash(cell.key, it.id, query)}">${esc(it.id)}</a></td>` +
      `<td class="gold">${esc(it.o[it.gold])}</td>${cell.levels.map((lv) => decCell(it, lv)).join("")}` +
      `<td class="num mass">${it.m === null ? "–" : fmt(it.m)}</td></tr>`).join("");
    document.querySelector("#items tbody").innerHTML = tbody ||
      `<tr><td colspan="${cell.levels.length + 3}" class="muted">No item matches these filters.</td></tr>`;
    document.getElementById("count").textContent = `${rows.length} of ${cell.items.length} items`;
    document.querySelectorAll("#items th.sortable").forEach((th) => {
      const a = th.querySelector(".arrow");
      a.textContent = st.sort === th.dataset.sort ? (st.dir === "desc" ? "▼" : "▲") : "";
    });
    return rows;
  }

  function reliabilitySvg(cell, summary, lv) {
    const r = cell.reliability[lv];
    if (!r) return "";
    const kmax = Math.max(...cell.items.map((it) => it.k));
    const x0 = 1 / kmax;
    const W = 220, H = 226, L = 34, B = 28, T = 46, R = 16;
    const sx = (x) => L + ((x - x0) / (1 - x0)) * (W - L - R);
    const sy = (y) => H - B - y * (H - B - T);
    let g = `<line x1="${sx(x0)}" y1="${sy(x0)}" x2="${sx(1)}" y2="${sy(1)}" stroke="#888" stroke-dasharray="4 3"/>`;
    g += `<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#444"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#444"/>`;
    [0, 0.5, 1].forEach((y) => { g += `<text x="${L - 4}" y="${sy(y) + 3}" text-anchor="end">${y}</text>`; });
    [x0, 1].forEach((x) => { g += `<text x="${sx(x)}" y="${H - B + 12}" text-anchor="middle">${fmt(x, 2)}</text>`; });
    g += `<text x="${(L + W - R) / 2}" y="${H - 3}" text-anchor="middle">confidence</text>`;
    g += `<text transform="translate(10 ${(T + H - B) / 2}) rotate(-90)" text-anchor="middle">accuracy in bin</text>`;
    cell.items.forEach((it) => { const c = it.d[lv].c; g += `<line x1="${sx(c)}" x2="${sx(c)}" y1="${H - B - 1}" y2="${H - B - 6}" stroke="#26828e" stroke-opacity=".5"/>`; });
    r.bins.forEach((b) => {
      g += `<line x1="${sx(b[0])}" x2="${sx(b[0])}" y1="${sy(b[3])}" y2="${sy(b[4])}" stroke="#0072b2" stroke-width="1.3"/>` +
        `<circle cx="${sx(b[0])}" cy="${sy(b[1])}" r="3.4" fill="#0072b2" stroke="#fff" stroke-width=".8"><title>bin of ${b[2]} items: ` +
        `mean confidence ${fmt(b[0])}, accuracy ${fmt(b[1])} [${fmt(b[3])}, ${fmt(b[4])}]</title></circle>`;
    });
    const sizes = r.bins.map((b) => b[2]);
    const smin = Math.min(...sizes), smax = Math.max(...sizes);
    g += `<text x="${W / 2}" y="26" text-anchor="middle" class="ece">ECE ${fmt(r.ece[0])} [${fmt(r.ece[1])}, ${fmt(r.ece[2])}]</text>` +
      `<text x="${W / 2}" y="38" text-anchor="middle">acc ${fmt(r.acc, 2)}, n=${r.n}, ${r.bins.length} bins × ${smin === smax ? smin : smin + "–" + smax}</text>`;
    return `<svg width="${W}" height="${H}" role="img" aria-label="reliability diagram ${esc(lv)}" data-level="${esc(lv)}">` +
      `<text x="${W / 2}" y="12" text-anchor="middle" font-weight="600">${esc(lv)}</text>${g}</svg>`;
  }

  function renderCell(key, params) {
    const summary = CELLS[key];
    if (!summary) throw new Error("no cell " + key + " in this run");
    setCrumbs([{ text: "run", href: "#/" }, { text: key }]);
    if (summary.status !== "done") {
      app.innerHTML = `<h1>${esc(key)}</h1><div class="error-box"><b>failed</b>: <code>${esc(summary.error)}</code><br>log: <code>${esc(summary.log)}</code></div>`;
      done("cell");
      return Promise.resolve();
    }
    app.innerHTML = `<h1>${esc(summary.model)} / ${esc(summary.task)}</h1><p class="muted">Loading the cell…</p>`;
    return load("cell", summary).then((cell) => {
      const st = filterState(params, cell);
      document.title = `${key} · anyjev`;
      const lvOpts = (sel) => cell.levels.map((lv) => `<option${lv === sel ? " selected" : ""}>${esc(lv)}</option>`).join("");
      const cl = st.clevel || (cell.levels.includes("L0") ? "L0" : cell.levels[0]);
      const head = '<tr><th class="sortable" data-sort="id">item <span class="arrow"></span></th><th class="sortable" data-sort="gold">gold <span class="arrow"></span></th>' +
        cell.levels.map((lv) => `<th class="sortable" data-sort="${esc(lv)}" title="sort by confidence at ${esc(lv)}">${esc(lv)} <span class="arrow"></span></th>`).join("") +
        '<th class="sortable num" data-sort="mass">answer mass <span class="arrow"></span></th></tr>';
      const canFlip = cell.groups.includes("rev");
      const fd = flipDefaults(cell.levels);
      const flipAt = st.flip || fd.at, flipNot = st.flip ? (st.stable || "") : fd.not;
      const notOpts = `<option value=""${flipNot === "" ? " selected" : ""}>(any)</option>` +
        cell.levels.map((lv) => `<option${lv === flipNot ? " selected" : ""}${lv === flipAt ? " disabled" : ""}>${esc(lv)}</option>`).join("");
      app.innerHTML = `<h1>${esc(summary.model)} / ${esc(summary.task)}</h1>` +
        `<div class="facts"><span><b>${summary.n}</b> test items</span><span>K = <b>${esc(summary.k)}</b></span>` +
        `<span>label prior: <b>${esc(summary.prior)}</b></span><span>T (L1): <b>${esc(tText(summary))}</b></span>` +
        `<span>answer mass: <b>${summary.answer_mass ? fmt(summary.answer_mass[0]) : "–"}</b></span>` +
        `<span>prompt: <b>${esc(summary.prompt_profile || "–")}</b></span><span>${auditText(summary)}</span><span class="muted">scored ${esc(summary.finished || "–")}</span></div>` + notesHtml(summary) +
        `<h2>Reliability (forward listing)</h2><div class="rel">${cell.levels.map((lv) => reliabilitySvg(cell, summary, lv)).join("")}</div>` +
        `<p class="muted small">Test items sorted by confidence in equal-mass bins; each point is a bin's accuracy with its Wilson 95% ` +
        `interval; ticks: the items' confidences; dashed: perfect calibration. The ECE is the table's (15 equal-mass bins).</p>` +
        `<h2>Items</h2><form class="controls" id="filters" onsubmit="return false">` +
        `<label><input type="checkbox" name="wrong"${st.wrong ? " checked" : ""}> wrong at</label><select name="wrongLevel">${lvOpts(st.wrong || (cell.levels.includes("L0") ? "L0" : cell.levels[0]))}</select>` +
        (canFlip ? `<span class="flipf"><label><input type="checkbox" name="flip"${st.flip ? " checked" : ""}> flipped at</label>` +
          `<select name="flipAt" title="the level whose answer changes when the options are reversed">${lvOpts(flipAt)}</select>` +
          `<label>but not at <select name="flipNot" title="the level whose answer does not change">${notOpts}</select></label></span>` : "") +
        `<label><input type="checkbox" name="tied"${st.tied ? " checked" : ""}> tied (any level)</label>` +
        `<label><input type="checkbox" name="massOn"${st.mass !== undefined ? " checked" : ""}> answer mass below</label><input type="number" name="mass" step="0.05" min="0" max="1" value="${esc(st.mass !== undefined ? st.mass : "0.5")}">` +
        `<label>confidence at <select name="clevel">${lvOpts(cl)}</select></label>` +
        `<label>from <input type="number" name="cmin" step="0.05" min="0" max="1" value="${esc(st.cmin || "")}"></label>` +
        `<label>to <input type="number" name="cmax" step="0.05" min="0" max="1" value="${esc(st.cmax || "")}"></label>` +
        `<label>id <input type="search" name="q" value="${esc(st.q || "")}"></label>` +
        `<span id="count"></span> <a href="${cellHash(key)}" id="reset">clear</a></form>` +
        `<div class="legend small muted"><span>each level: decision (option's label in the raw prompt), confidence, mark</span>` +
        `<span><b class="yes">✓</b> correct</span><span><b class="no">✗</b> wrong</span>` +
        `<span><b class="muted">1/m</b> gold among m tied labels</span><span><span class="fl">⇄</span> flips when the options are reversed</span>` +
        `<span><span class="tie">=m</span> m labels tied</span><span>click a column to sort</span></div>` +
        `<div class="scroll"><table class="items" id="items"><thead>${head}</thead><tbody></tbody></table></div>`;
      renderRows(cell, st);
      const form = document.getElementById("filters");
      const update = () => {
        const f = form.elements;
        const next = { sort: st.sort, dir: st.dir };
        if (f.wrong.checked) next.wrong = f.wrongLevel.value;
        if (f.flipNot) [...f.flipNot.options].forEach((o) => { o.disabled = o.value !== "" && o.value === f.flipAt.value; });
        if (f.flip && f.flip.checked) {
          next.flip = f.flipAt.value;
          if (f.flipNot.value && f.flipNot.value !== f.flipAt.value) next.stable = f.flipNot.value;
        }
        if (f.tied.checked) next.tied = "1";
        if (f.massOn.checked) next.mass = f.mass.value;
        if (f.clevel.value !== (cell.levels.includes("L0") ? "L0" : cell.levels[0])) next.clevel = f.clevel.value;
        if (f.cmin.value !== "") next.cmin = f.cmin.value;
        if (f.cmax.value !== "") next.cmax = f.cmax.value;
        if (f.q.value) next.q = f.q.value;
        Object.keys(st).forEach((k) => delete st[k]);
        Object.assign(st, next);
        history.replaceState(null, "", cellHash(key, stateQuery(st)));
        renderRows(cell, st);
      };
      form.addEventListener("input", update);
      form.addEventListener("change", update);
      document.querySelectorAll("#items th.sortable").forEach((th) => th.addEventListener("click", () => {
        const s = th.dataset.sort;
        st.dir = st.sort === s && st.dir !== "desc" ? "desc" : "asc";
        st.sort = s;
        history.replaceState(null, "", cellHash(key, stateQuery(st)));
        renderRows(cell, st);
      }));
      done("cell");
    });
  }

  // -------------------------------------------------------------------------------------------- item
  function textOf(items, p) {
    return p.l.map((i) => items.lines[i]).join("\n");
  }

  function heatRow(head, values, max, opts) {
    const o = opts || {};
    if (!values) return `<tr><th class="rowh">${head}</th><td class="v na" colspan="${o.k}">not read</td></tr>`;
    const top = o.top === undefined ? -1 : o.top;
    return `<tr${o.cls ? ` class="${o.cls}"` : ""}${o.attr || ""}><th class="rowh">${head}</th>` + values.map((v, j) => {
      const pos = o.pos ? `<sub>${esc(o.pos[j])}</sub>` : "";
      const title = (o.title ? o.title(j) + ": " : "") + `p = ${Number(v).toPrecision(5)}, log p = ${v > 0 ? Math.log(v).toFixed(4) : "-inf"}`;
      return `<td class="v${j === top ? " top" : ""}" style="${heatStyle(v, max)}" title="${esc(title)}">${fmt(v)}${pos}</td>`;
    }).join("") + (o.tail || "") + "</tr>";
  }

  function groupSection(items, it, cellItem, g, names, T, levels) {
    const m = Object.assign({}, items.shapes[it.groups[g].shape], it.groups[g]);
    const k = names.length;
    const inv = m.order.map((ord) => { const r = []; ord.forEach((opt, p) => { r[opt] = p; }); return r; });
    const marg = levels.filter((lv) => lv === "L0-perm" || lv === "L0" || lv === "L1").filter((lv) => it.dist[lv] && it.dist[lv][g]);
    const all = [].concat(...m.rows.filter(Boolean), ...marg.map((lv) => it.dist[lv][g]));
    const max = Math.max(...all);
    const head = `<tr><th>layout</th>${names.map((n, j) => `<th class="opt${j === cellItem.gold ? " gold" : ""}">${esc(n)}</th>`).join("")}</tr>`;
    const rows = m.rows.map((r, s) => heatRow(`${esc(m.layouts[s])}${m.swapped[s] ? ' <span class="muted small">(No/Yes)</span>' : ""}`, r, max, {
      k, pos: it.kind === "noul" ? null : inv[s].map((p) => it.labels[p]), top: r ? r.indexOf(Math.max(...r)) : -1, attr: ` data-layout="${esc(m.layouts[s])}"`,
      title: (j) => `${m.layouts[s]}: option ${names[j]} shown as label ${it.labels[inv[s][j]]}`,
    })).join("");
    const mrows = marg.map((lv, i) => heatRow(`${esc(lv)}${lv === "L1" && T[g] ? ` <span class="muted small">T = ${fmtT(T[g])}</span>` : ""}`,
      it.dist[lv][g], max, { k, top: g === "fwd" ? cellItem.d[lv].p : cellItem.d[lv].pr, cls: i === 0 ? "sum" : "", attr: ` data-level="${esc(lv)}"`, title: (j) => `${lv}, option ${names[j]}` })).join("");
    const priorTable = (idx, what) => {
      if (idx === null || idx === undefined) return "";
      const pr = items.priors[idx];
      const pmax = Math.max(...[].concat(...pr));
      return `<div class="prior-block"><h4 class="small">${what}</h4>` + scaleLegend(pmax, "prior") +
        `<div class="scroll"><table class="heat prior" data-group="${g}"><thead><tr><th>layout</th>${it.labels.map((l) => `<th class="opt">${esc(l)}</th>`).join("")}</tr></thead><tbody>` +
        pr.map((row, s) => heatRow(esc(m.layouts[s]), row, pmax, { k, title: (j) => `${m.layouts[s]}: label ${it.labels[j]}` })).join("") + "</tbody></table></div></div>";
    };
    const same = m.prior === m.l1prior;
    const rowsAre = it.kind === "noul"
      ? `Rows: the question's two phrasings ("No/Yes": it asks "No or Yes"); columns: the answers; each value is the probability of that answer (renormalised over the two).`
      : `Rows: the rotations (r<i>s</i> shows option (p + s) mod K at position p${g === "rev" ? ", starting from the reversed list" : ""}); ` +
        `columns: the options; each value is the probability of the option's label in that prompt (renormalised over the labels), with the label it was shown as.`;
    return `<section class="group" data-group="${g}"><h3>${g === "fwd" ? "Forward listing (fwd)" : "Reversed listing (rev)"}: label probabilities by ${it.kind === "noul" ? "phrasing" : "rotation"}</h3>` +
      `<p class="muted small">${rowsAre} Below: L0-perm (geometric mean over the rows), L0 (each row divided by the prior${items.strength !== 1 ? "^" + items.strength : ""}, then the mean) and L1 (L0 under the frozen calibration prior, divided by T).</p>` +
      scaleLegend(max, "probability") + `<div class="scroll"><table class="heat matrix" data-group="${g}"><thead>${head}</thead><tbody>${rows}${mrows}</tbody></table></div>` +
      '<div class="priors">' + priorTable(m.prior, `Prior divided out for L0 (position space: columns are labels; ${esc(items.prior_mode)} prior from the ${items.prior_source === "items" ? "test items" : esc(items.prior_source)})`) +
      (same ? "" : priorTable(m.l1prior, "Prior under L1 (the calibration items' frozen prior)")) + "</div></section>";
  }

  function renderItem(key, id, params) {
    const summary = CELLS[key];
    if (!summary) throw new Error("no cell " + key + " in this run");
    if (summary.status !== "done") return renderCell(key, params);
    setCrumbs([{ text: "run", href: "#/" }, { text: key, href: cellHash(key, params.toString()) }, { text: id }]);
    app.innerHTML = `<h1>${esc(id)}</h1><p class="muted">Loading the item…</p>`;
    return Promise.all([load("cell", summary), load("items", summary)]).then(([cell, items]) => {
      const it = items.items[id];
      const ci = cell.items.find((x) => x.id === id);
      if (!it || !ci) throw new Error(`no test item ${id} in ${key}`);
      document.title = `${id} · ${key} · anyjev`;
      const st = filterState(params, cell);
      const list = selectRows(cell, st);
      const at = list.findIndex((x) => x.id === id);
      const query = stateQuery(st);
      const pager = `<span class="pager small">${at >= 0 ? `${at + 1} of ${list.length}` : "not in the filtered list"}` +
        (at > 0 ? `<a id="prev" href="${itemHash(key, list[at - 1].id, query)}">← previous</a>` : "") +
        (at >= 0 && at < list.length - 1 ? `<a id="next" href="${itemHash(key, list[at + 1].id, query)}">next →</a>` : "") + "</span>";
      const names = ci.o;
      const options = it.options.map((o, j) => `<li data-option="${j}">${names[j] === o ? "" : `<span class="lab">${esc(names[j])}</span>`}${esc(o)}` +
        `${j === ci.gold ? '<span class="badge gold">gold</span>' : ""}</li>`).join("");
      const levels = cell.levels;
      const groups = cell.groups;
      const decRows = [];
      const dmax = Math.max(...[].concat(...levels.map((lv) => groups.map((g) => (it.dist[lv] && it.dist[lv][g]) || [])).flat()));
      levels.forEach((lv) => groups.forEach((g) => {
        const v = it.dist[lv] && it.dist[lv][g];
        if (!v) return;
        const d = ci.d[lv];
        const pred = g === "fwd" ? d.p : d.pr;
        const tail = `<td class="pred">${esc(names[pred])}</td><td class="num">${fmt(v[pred])}</td><td>${g === "fwd" ? okMark(d.ok) : ""}</td>`;
        decRows.push(heatRow(`${esc(lv)} <span class="muted small">${g}</span>`, v, dmax, { k: v.length, top: pred, tail,
          attr: ` data-level="${esc(lv)}" data-group="${g}"`, title: (j) => `${lv} (${g}), option ${names[j]}` }));
      }));
      const decisions = `<div class="scroll"><table class="heat decide" id="decide"><thead><tr><th>level</th>` +
        names.map((n, j) => `<th class="opt${j === ci.gold ? " gold" : ""}">${esc(n)}</th>`).join("") +
        `<th>decision</th><th class="num">confidence</th><th></th></tr></thead><tbody>${decRows.join("")}</tbody></table></div>`;
      const prompts = it.prompts.map((p) => {
        const text = textOf(items, p);
        return `<details class="prompt" data-layout="${esc(p.layout)}"><summary><b>${esc(p.layout)}</b> · <span class="ntok">${p.n}</span> tokens · ` +
          `prompt_sha <code>${esc(p.sha)}</code></summary><pre class="ptext">\n${esc(text)}</pre></details>`;
      }).join("");
      const T = items.T || {};
      app.innerHTML = `<div class="facts"><h1 style="margin:0">${esc(id)}</h1>${pager}</div>` +
        `<div class="facts"><span>gold: <b class="goldname">${esc(names[ci.gold])}</b></span><span>K = ${ci.k}</span>` +
        `<span>answer mass: <b class="itemmass">${ci.m === null ? "–" : fmt(ci.m)}</b></span><span>prior group: <b class="prior-group" title="the items whose batch label prior L0 divides out together (key ${esc(it.group_key)})">${esc(it.group)}</b></span>` +
        `<span>T (L1): ${Object.keys(T).map((g) => `${g} <b class="temp" data-group="${g}">${fmtT(T[g])}</b>`).join(", ") || "–"}</span></div>` +
        `<h3>State</h3><div class="state">${it.state === "" ? '<span class="muted">(empty)</span>' : esc(it.state)}</div>` +
        `<h3>Question</h3><div>${esc(it.question)}</div><ol class="options${it.options.length > 8 ? " many" : ""}">${options}</ol>` +
        `<h2>How each level decides</h2><p class="muted small">Each level's probabilities over the options, its decision ` +
        `(the top option, outlined) and confidence; ✓/✗ against gold (forward listing).</p>${scaleLegend(dmax, "probability")}${decisions}` +
        `<div class="groups${ci.k > 6 ? " stack" : ""}">${groups.filter((g) => it.groups[g]).map((g) => groupSection(items, it, ci, g, names, T, levels)).join("")}</div>` +
        `<h2>Prompts</h2><p class="muted small">The exact text of every layout (ending where the label token is read) and its token count, ` +
        `rebuilt with the scoring code and checked against the prompt hash stored in scores.jsonl (as <code>anyjev export-prompts</code> does).</p>${prompts}`;
      done("item");
    });
  }

  // ------------------------------------------------------------------------------------------ routing
  function route() {
    const raw = location.hash.replace(/^#\/?/, "");
    const q = raw.indexOf("?");
    const path = q >= 0 ? raw.slice(0, q) : raw;
    const params = new URLSearchParams(q >= 0 ? raw.slice(q + 1) : "");
    const parts = path.split("/").filter((p, i) => p !== "" || i > 0).map(decodeURIComponent);
    document.body.dataset.state = "loading";
    window.scrollTo(0, 0);
    let result;
    try {
      if (parts[0] === "cell" && parts.length >= 3) result = renderCell(parts[1] + "/" + parts[2], params);
      else if (parts[0] === "item" && parts.length >= 4) result = renderItem(parts[1] + "/" + parts[2], parts.slice(3).join("/"), params);
      else result = renderRun();
    } catch (err) {
      fail(err);
      return;
    }
    if (result && result.catch) result.catch(fail);
  }

  window.addEventListener("hashchange", route);
  route();
})();
