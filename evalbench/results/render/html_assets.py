"""The stylesheet and script inlined into ``report.html`` (see :mod:`evalbench.results.render.html_report`).

Kept as string constants so a wheel needs no package data. The script renders every piece of
record data with ``textContent``/``createTextNode`` (never ``innerHTML``) and loads nothing.
"""

from __future__ import annotations

CSS = r"""
:root {
  --bg: #f5f6f8; --panel: #ffffff; --text: #1d2433; --muted: #5f6b7c; --faint: #8a94a3;
  --border: #e3e6eb; --accent: #3558d4; --accent-soft: #e8edfc; --track: #edf0f4;
  --ok: #23883b; --ok-soft: #e3f4e7; --bad: #cf2e2e; --bad-soft: #fbe7e7;
  --warn: #b96a00; --warn-soft: #fdf0dc; --na: #6b7584; --na-soft: #eef0f3;
  --code-bg: #f6f7f9; --user: #eef3fe; --vuser: #f4effc; --shadow: 0 1px 2px rgba(16, 24, 40, .06);
  --mono: ui-monospace, SFMono-Regular, "SF Mono", Menlo, Consolas, "Liberation Mono", monospace;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #14171c; --panel: #1c2027; --text: #e4e7ec; --muted: #a2acba; --faint: #7c8696;
    --border: #2e343e; --accent: #7f9cf5; --accent-soft: #26304a; --track: #2a3039;
    --ok: #5fcf7a; --ok-soft: #1d3324; --bad: #f07575; --bad-soft: #3a2124;
    --warn: #f0b459; --warn-soft: #3a2e1b; --na: #a2acba; --na-soft: #2a3039;
    --code-bg: #161a20; --user: #1e2740; --vuser: #2a2238; --shadow: none;
  }
}
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body {
  margin: 0; background: var(--bg); color: var(--text);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
}
code, pre, .mono { font-family: var(--mono); font-size: 12.5px; }
h1, h2, h3, h4 { margin: 0; font-weight: 600; letter-spacing: -.01em; }
h2 { font-size: 18px; }
h3 { font-size: 14px; }
h4 { font-size: 13px; }
a { color: var(--accent); }
.wrap { max-width: 1320px; margin: 0 auto; padding: 0 24px; }
header.top { background: var(--panel); border-bottom: 1px solid var(--border); }
header.top .wrap { padding-top: 20px; padding-bottom: 18px; }
.eyebrow { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .08em; font-weight: 600; }
header.top h1 { font-size: 24px; margin: 4px 0 14px; }
header.top h1 code { font-size: 22px; background: none; }
dl.meta { display: grid; grid-template-columns: repeat(auto-fill, minmax(200px, 1fr)); gap: 10px 24px; margin: 0; }
dl.meta div { min-width: 0; }
dl.meta dt { color: var(--muted); font-size: 12px; }
dl.meta dd { margin: 1px 0 0; font-weight: 500; overflow-wrap: anywhere; }
nav.toc { display: flex; gap: 18px; margin-top: 16px; font-size: 13px; }
nav.toc a { text-decoration: none; color: var(--muted); font-weight: 500; }
nav.toc a:hover { color: var(--accent); }
main { padding: 20px 0 48px; }
section { margin-top: 28px; }
section:first-child { margin-top: 0; }
.section-head { display: flex; align-items: baseline; gap: 12px; margin-bottom: 12px; flex-wrap: wrap; }
.hint { color: var(--muted); font-size: 12.5px; }
.notice { background: var(--warn-soft); color: var(--text); border: 1px solid var(--border); border-left: 4px solid var(--warn);
  border-radius: 6px; padding: 10px 14px; margin-bottom: 14px; }
.notice.bad { background: var(--bad-soft); border-left-color: var(--bad); }
.notice.info { background: var(--panel, transparent); border-left-color: var(--accent); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(190px, 1fr)); gap: 12px; margin-bottom: 14px; }
.card { background: var(--panel); border: 1px solid var(--border); border-radius: 8px; padding: 12px 14px; box-shadow: var(--shadow); }
.card .k { color: var(--muted); font-size: 12px; }
.card .v { font-size: 24px; font-weight: 600; margin-top: 2px; font-variant-numeric: tabular-nums; }
.card .s { color: var(--muted); font-size: 12px; margin-top: 2px; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(380px, 1fr)); gap: 14px; }
.panel { background: var(--panel); border: 1px solid var(--border); border-radius: 8px; padding: 14px 16px;
  box-shadow: var(--shadow); min-width: 0; }
.panel > h3 { margin-bottom: 10px; }
.panel.wide { grid-column: 1 / -1; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid var(--border); vertical-align: top; }
th { font-size: 12px; color: var(--muted); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.plain tr:last-child td { border-bottom: none; }
.meter { display: inline-block; width: 64px; height: 6px; background: var(--track); border-radius: 3px;
  vertical-align: middle; margin-right: 8px; overflow: hidden; }
.meter > span { display: block; height: 100%; background: var(--accent); }
.ci { color: var(--muted); font-size: 12px; white-space: nowrap; }
dl.stats { display: grid; grid-template-columns: max-content 1fr; gap: 5px 18px; margin: 0; }
dl.stats dt { color: var(--muted); }
dl.stats dd { margin: 0; font-variant-numeric: tabular-nums; overflow-wrap: anywhere; }
svg.chart { display: block; max-width: 100%; height: auto; }
svg.chart text { font: 12px system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; fill: var(--text); }
svg.chart text.val { fill: var(--muted); font-variant-numeric: tabular-nums; }
svg.chart .track { fill: var(--track); }
svg.chart .bar { fill: var(--accent); }
svg.chart .bar.ok { fill: var(--ok); }
svg.chart .bar.bad { fill: var(--bad); }
svg.chart .bar.warn { fill: var(--warn); }
svg.chart .bar.na { fill: var(--na); }
svg.chart .whisker { stroke: var(--text); stroke-width: 1.2; opacity: .55; }
.slices { display: grid; grid-template-columns: repeat(auto-fill, minmax(400px, 1fr)); gap: 14px; }
.empty { color: var(--faint); font-style: italic; }

/* conversations table */
.filters { display: flex; flex-wrap: wrap; gap: 10px; align-items: end; margin-bottom: 10px; }
.filters label { display: flex; flex-direction: column; gap: 3px; font-size: 12px; color: var(--muted); font-weight: 500; }
.filters input, .filters select, button {
  font: inherit; font-size: 13px; color: var(--text); background: var(--panel);
  border: 1px solid var(--border); border-radius: 6px; padding: 6px 9px; }
.filters input[type=search] { width: 260px; max-width: 70vw; }
.filters input:focus, .filters select:focus, button:focus-visible { outline: 2px solid var(--accent); outline-offset: 1px; }
button { cursor: pointer; }
button:hover { background: var(--accent-soft); }
button:disabled { opacity: .45; cursor: default; background: var(--panel); }
.count { margin-left: auto; color: var(--muted); font-size: 13px; align-self: center; }
.count strong { color: var(--text); }
.table-wrap { background: var(--panel); border: 1px solid var(--border); border-radius: 8px; overflow: auto;
  box-shadow: var(--shadow); max-height: 78vh; }
#conv-table thead th { position: sticky; top: 0; background: var(--panel); z-index: 1; box-shadow: inset 0 -1px 0 var(--border); }
#conv-table th button { all: unset; cursor: pointer; }
#conv-table th button:focus-visible { outline: 2px solid var(--accent); }
#conv-table th[aria-sort=ascending] button::after { content: " \25B2"; font-size: 9px; }
#conv-table th[aria-sort=descending] button::after { content: " \25BC"; font-size: 9px; }
#conv-table tbody tr { cursor: pointer; }
#conv-table tbody tr:hover { background: var(--accent-soft); }
#conv-table tbody tr:focus { outline: 2px solid var(--accent); outline-offset: -2px; background: var(--accent-soft); }
#conv-table td { white-space: nowrap; }
#conv-table td.diag { white-space: normal; min-width: 220px; max-width: 380px; color: var(--muted); }
#conv-table td.id { font-family: var(--mono); font-size: 12.5px; white-space: normal; overflow-wrap: anywhere;
  min-width: 170px; max-width: 280px; }
.more { display: flex; justify-content: center; padding: 10px; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 12px; font-weight: 500;
  background: var(--na-soft); color: var(--na); white-space: nowrap; }
.badge.ok { background: var(--ok-soft); color: var(--ok); }
.badge.bad { background: var(--bad-soft); color: var(--bad); }
.badge.warn { background: var(--warn-soft); color: var(--warn); }
.badge.accent { background: var(--accent-soft); color: var(--accent); }
.chips { display: inline-flex; gap: 4px; flex-wrap: wrap; }
#conv-table .chips { flex-wrap: nowrap; }
.chip { display: inline-block; padding: 0 6px; border-radius: 4px; font-size: 12px; border: 1px solid var(--border); white-space: nowrap; }
.chip.ok { color: var(--ok); background: var(--ok-soft); border-color: transparent; }
.chip.bad { color: var(--bad); background: var(--bad-soft); border-color: transparent; }
.chip.na { color: var(--na); }
.kind { font-weight: 600; color: var(--text); margin-right: 6px; }

/* detail dialog */
dialog#detail { width: min(1120px, 96vw); max-height: 92vh; padding: 0; border: 1px solid var(--border); border-radius: 10px;
  background: var(--bg); color: var(--text); box-shadow: 0 20px 50px rgba(0, 0, 0, .25); }
dialog#detail::backdrop { background: rgba(15, 20, 30, .45); }
.dlg-head { position: sticky; top: 0; z-index: 2; display: flex; align-items: center; gap: 12px; padding: 12px 18px;
  background: var(--panel); border-bottom: 1px solid var(--border); }
.dlg-head h2 { font-family: var(--mono); font-size: 16px; flex: 1; overflow-wrap: anywhere; }
.dlg-head .pos { color: var(--muted); font-size: 12px; }
.dlg-body { padding: 16px 18px 22px; }
.dlg-body > .panel, .dlg-body > .notice { margin-top: 12px; }
.dlg-body > :first-child { margin-top: 0; }
.badges { display: flex; flex-wrap: wrap; gap: 6px; margin-bottom: 6px; }
.diagnosis { border-left: 4px solid var(--bad); background: var(--bad-soft); border-radius: 6px; padding: 8px 12px; margin-top: 10px; }
.diagnosis.none { border-left-color: var(--ok); background: var(--ok-soft); }
.turns { display: flex; flex-direction: column; gap: 10px; }
.phase-sep { display: flex; align-items: center; gap: 10px; color: var(--muted); font-size: 12px; font-weight: 600;
  text-transform: uppercase; letter-spacing: .06em; margin-top: 6px; }
.phase-sep::after { content: ""; flex: 1; border-top: 1px solid var(--border); }
.msg { border: 1px solid var(--border); border-radius: 8px; padding: 8px 12px; background: var(--panel); max-width: 92%; }
.msg.user { background: var(--user); align-self: flex-start; }
.msg.vuser { background: var(--vuser); align-self: flex-start; }
.msg.agent { align-self: flex-end; width: 88%; }
.msg .who { font-size: 11.5px; color: var(--muted); font-weight: 600; text-transform: uppercase; letter-spacing: .05em; margin-bottom: 3px;
  display: flex; gap: 8px; align-items: center; flex-wrap: wrap; }
.msg .who .extra, .msg .who .badge { font-weight: 400; text-transform: none; letter-spacing: 0; }
.msg .text { white-space: pre-wrap; overflow-wrap: anywhere; }
pre { background: var(--code-bg); border: 1px solid var(--border); border-radius: 6px; padding: 8px 10px;
  margin: 6px 0 0; white-space: pre-wrap; overflow-wrap: anywhere; max-height: 360px; overflow: auto; }
pre.sql { border-left: 3px solid var(--accent); }
pre.sql-diff del { background: var(--bad-soft); color: var(--bad); text-decoration: line-through; }
pre.sql-diff ins { background: var(--ok-soft); color: var(--ok); text-decoration: none; font-weight: 600; }
.err { color: var(--bad); white-space: pre-wrap; overflow-wrap: anywhere; }
details.tool { margin-top: 6px; }
details.tool summary { cursor: pointer; color: var(--muted); font-size: 12.5px; }
.phase-grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 12px; margin-top: 10px; }
.result { border: 1px solid var(--border); border-radius: 8px; padding: 8px 10px; min-width: 0; background: var(--panel); }
.result h4 { display: flex; gap: 8px; align-items: baseline; flex-wrap: wrap; }
.result .rows { font-weight: 600; }
.preview { overflow: auto; max-height: 260px; margin-top: 6px; }
.preview table { font-size: 12.5px; }
.preview th, .preview td { padding: 3px 8px; white-space: nowrap; }
.preview td { font-family: var(--mono); font-size: 12px; }
.preview td.null { color: var(--faint); font-style: italic; }
.sub { color: var(--muted); font-size: 12.5px; }
.kv { display: flex; flex-wrap: wrap; gap: 4px 18px; color: var(--muted); font-size: 12.5px; margin-top: 4px; }
.kv b { color: var(--text); font-weight: 500; }
.scores td:nth-child(2) { white-space: nowrap; }
.phase h4 { margin: 14px 0 2px; }
.phase .result h4 { margin: 0; }
@media print {
  .filters, .more, nav.toc { display: none; }
  .table-wrap { max-height: none; overflow: visible; }
}
"""

JS = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("evalbench-data").textContent);
  var ROWS = DATA.rows, DETAILS = DATA.details, META = DATA.meta, DIFFS = DATA.diffs || [];
  var PAGE = 250;

  // ------------------------------------------------------------------ helpers
  function el(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v === null || v === undefined || v === false) return;
        if (k === "class") node.className = v;
        else if (k === "text") node.textContent = String(v);
        else if (k.slice(0, 2) === "on") node.addEventListener(k.slice(2), v);
        else node.setAttribute(k, v === true ? "" : String(v));
      });
    }
    for (var i = 2; i < arguments.length; i++) add(node, arguments[i]);
    return node;
  }
  function add(node, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { add(node, c); }); return; }
    node.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
  function dash(v) { return v === null || v === undefined || v === "" ? "\u2014" : String(v); }
  function secs(s) {
    if (s === null || s === undefined) return "\u2014";
    if (s < 0.001) return (s * 1e6).toFixed(0) + " \u00b5s";
    if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 2 : 1) + " ms";
    if (s < 120) return s.toFixed(2) + " s";
    return (s / 60).toFixed(1) + " min";
  }
  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }
  function phaseName(p) { return p === "follow_up" ? "follow-up" : String(p); }
  function json(v) { try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); } }
  var OUTCOME_TONE = { scored: "ok", cancelled: "", max_turns: "warn", timeout: "warn" };
  function outcomeBadge(o) {
    var tone = o in OUTCOME_TONE ? OUTCOME_TONE[o] : "bad";
    return el("span", { class: "badge " + tone, text: dash(o) });
  }
  function verdictChip(phase, scorer, v) {
    var name = phaseName(phase), by = scorer ? " (" + scorer + ")" : "";
    if (v === true) return el("span", { class: "chip ok", title: name + ": passed" + by, text: name + " \u2713" });
    if (v === false) return el("span", { class: "chip bad", title: name + ": failed" + by, text: name + " \u2717" });
    if (v === "missing") return el("span", { class: "chip na", title: name + ": not reached", text: name + " \u2013" });
    return el("span", { class: "chip na", title: name + ": no verdict applies", text: name + " n/a" });
  }
  function verdictChips(r) {
    var chips = r.v.map(function (pv) { return verdictChip(pv[0], pv[1], pv[2]); });
    if (r.fu && !r.v.some(function (pv) { return pv[0] === "follow_up"; })) chips.push(verdictChip("follow_up", null, "missing"));
    return el("span", { class: "chips" }, chips);
  }
  function diagText(r) {
    if (!r.dm && !r.dk) return "";
    return (r.dk ? r.dk + (r.dp ? " (" + phaseName(r.dp) + ")" : "") + ": " : "") + (r.dm || "");
  }

  // ------------------------------------------------------------------ search text
  function detailText(d) {
    var parts = [d.item_id];
    (d.phases || []).forEach(function (p) { parts.push(p.question || "", p.sql || ""); });
    (d.turns || []).forEach(function (t) {
      if (t.reply && t.reply.sql) parts.push(t.reply.sql);
    });
    return parts.join("\n");
  }
  var SEARCH = ROWS.map(function (r, i) {
    var d = DETAILS[i];
    return (d ? detailText(d) : (r.text || r.id)).toLowerCase();
  });

  // ------------------------------------------------------------------ filters and sorting
  var $ = function (id) { return document.getElementById(id); };
  var tbody = $("conv-body"), countEl = $("visible-count"), moreBtn = $("more");
  var FILTERS = { outcome: "f-outcome", verdict: "f-verdict", db: "f-database", cat: "f-category", diff: "f-difficulty", dk: "f-diagnosis" };
  var state = { terms: [], sortKey: null, sortDir: 1, shown: PAGE, filters: {} };
  var visible = [];

  function fillSelect(key, values) {
    var select = $(FILTERS[key]);
    if (!select) return;
    var counts = {};
    values.forEach(function (v) { counts[v] = (counts[v] || 0) + 1; });
    Object.keys(counts).sort(function (a, b) { return a.localeCompare(b, undefined, { numeric: true }); }).forEach(function (v) {
      select.appendChild(el("option", { value: v, text: (v === "" ? "(none)" : v) + " (" + counts[v] + ")" }));
    });
  }
  function key(v) { return v === null || v === undefined ? "" : String(v); }
  fillSelect("outcome", ROWS.map(function (r) { return key(r.outcome); }));
  fillSelect("db", ROWS.map(function (r) { return key(r.db); }));
  fillSelect("cat", ROWS.map(function (r) { return key(r.cat); }));
  fillSelect("diff", ROWS.map(function (r) { return key(r.diff); }));
  fillSelect("dk", ROWS.filter(function (r) { return r.dk; }).map(function (r) { return key(r.dk); }));

  function rowValue(r, k) {
    if (k === "verdict") return r.pass;
    return key(r[k]);
  }
  function matches(i) {
    var r = ROWS[i];
    for (var k in state.filters) {
      if (state.filters[k] !== "" && rowValue(r, k) !== state.filters[k]) return false;
    }
    var text = SEARCH[i];
    for (var t = 0; t < state.terms.length; t++) if (text.indexOf(state.terms[t]) < 0) return false;
    return true;
  }
  var collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });
  function sortValue(r, k) {
    if (k === "v") return r.pass;
    if (k === "diag") return diagText(r);
    return r[k];
  }
  function compare(a, b) {
    var k = state.sortKey, va = sortValue(ROWS[a], k), vb = sortValue(ROWS[b], k);
    var c;
    if (va === vb) c = 0;
    else if (va === null || va === undefined || va === "") c = 1;
    else if (vb === null || vb === undefined || vb === "") c = -1;
    else if (typeof va === "number" && typeof vb === "number") c = va - vb;
    else c = collator.compare(String(va), String(vb));
    return c * state.sortDir || a - b;
  }
  function apply() {
    state.terms = $("q").value.toLowerCase().split(/\s+/).filter(Boolean);
    Object.keys(FILTERS).forEach(function (k) { var s = $(FILTERS[k]); if (s) state.filters[k] = s.value; });
    visible = [];
    for (var i = 0; i < ROWS.length; i++) if (matches(i)) visible.push(i);
    if (state.sortKey) visible.sort(compare);
    state.shown = PAGE;
    render();
  }

  function rowEl(i) {
    var r = ROWS[i];
    var tr = el("tr", { tabindex: "0", "data-index": i, "aria-haspopup": "dialog",
                        "aria-label": "Conversation " + r.id + ", outcome " + dash(r.outcome) + ", " + (r.pass || "") });
    tr.appendChild(el("td", { class: "id", text: r.id }));
    tr.appendChild(el("td", { text: dash(r.db) }));
    tr.appendChild(el("td", { text: dash(r.cat) }));
    tr.appendChild(el("td", { text: dash(r.diff) }));
    tr.appendChild(el("td", { text: r.amb === null || r.amb === undefined ? "\u2014" : (r.amb ? "yes" : "no") }));
    tr.appendChild(el("td", {}, outcomeBadge(r.outcome)));
    tr.appendChild(el("td", {}, verdictChips(r)));
    tr.appendChild(el("td", { class: "num", text: dash(r.turns) }));
    tr.appendChild(el("td", { class: "num", text: r.reward === null || r.reward === undefined ? "\u2014" : r.reward.toFixed(2) }));
    tr.appendChild(el("td", { class: "num", text: secs(r.elapsed) }));
    var diag = el("td", { class: "diag" });
    if (r.dk) diag.appendChild(el("span", { class: "kind", text: r.dk }));
    if (r.dm) diag.appendChild(document.createTextNode(r.dm));
    tr.appendChild(diag);
    return tr;
  }
  function render() {
    var frag = document.createDocumentFragment();
    var n = Math.min(state.shown, visible.length);
    for (var j = 0; j < n; j++) frag.appendChild(rowEl(visible[j]));
    tbody.replaceChildren(frag);
    countEl.textContent = String(visible.length);
    $("visible-note").textContent = n < visible.length ? " (first " + n + " listed)" : "";
    $("no-rows").hidden = visible.length > 0;
    moreBtn.hidden = n >= visible.length;
    moreBtn.textContent = "Show " + Math.min(PAGE, visible.length - n) + " more (" + (visible.length - n) + " not listed)";
  }

  $("q").addEventListener("input", apply);
  Object.keys(FILTERS).forEach(function (k) { var s = $(FILTERS[k]); if (s) s.addEventListener("change", apply); });
  $("reset").addEventListener("click", function () {
    $("q").value = "";
    Object.keys(FILTERS).forEach(function (k) { var s = $(FILTERS[k]); if (s) s.value = ""; });
    apply();
  });
  moreBtn.addEventListener("click", function () { state.shown += PAGE; render(); });
  Array.prototype.forEach.call(document.querySelectorAll("#conv-table th[data-sort]"), function (th) {
    th.querySelector("button").addEventListener("click", function () {
      var k = th.getAttribute("data-sort");
      state.sortDir = state.sortKey === k ? -state.sortDir : 1;
      state.sortKey = k;
      Array.prototype.forEach.call(document.querySelectorAll("#conv-table th[data-sort]"), function (o) { o.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", state.sortDir > 0 ? "ascending" : "descending");
      var f = state.shown; apply(); state.shown = f; render();
    });
  });
  tbody.addEventListener("click", function (e) {
    var tr = e.target.closest("tr[data-index]");
    if (tr) open(+tr.getAttribute("data-index"));
  });
  tbody.addEventListener("keydown", function (e) {
    var tr = e.target.closest("tr[data-index]");
    if (!tr) return;
    if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(+tr.getAttribute("data-index")); }
    else if (e.key === "ArrowDown" && tr.nextElementSibling) { e.preventDefault(); tr.nextElementSibling.focus(); }
    else if (e.key === "ArrowUp" && tr.previousElementSibling) { e.preventDefault(); tr.previousElementSibling.focus(); }
  });

  // ------------------------------------------------------------------ detail
  var dialog = $("detail"), body = $("detail-body"), current = null;

  function kv(pairs) {
    return el("div", { class: "kv" }, pairs.filter(function (p) { return p[1] !== null && p[1] !== undefined && p[1] !== ""; })
      .map(function (p) { return el("span", {}, p[0] + " ", el("b", { text: String(p[1]) })); }));
  }
  function cell(v) {
    if (v === null || v === undefined) return el("td", { class: "null", text: "NULL" });
    return el("td", { text: typeof v === "object" ? JSON.stringify(v) : String(v) });
  }
  function resultBox(title, res, cls) {
    var box = el("div", { class: "result " + (cls || "") });
    if (!res) { box.appendChild(el("h4", {}, title)); box.appendChild(el("div", { class: "empty", text: "not executed" })); return box; }
    var rows = el("span", { class: "rows " + (cls || "") + "-rows", text: plural(res.row_count, "row") + (res.truncated ? " (truncated)" : "") });
    box.appendChild(el("h4", {}, title, rows, el("span", { class: "sub", text: secs(res.elapsed_s) })));
    if (res.error) box.appendChild(el("div", { class: "err", text: (res.error_kind ? res.error_kind + ": " : "") + res.error }));
    var cols = res.columns || [], preview = res.preview || [];
    if (cols.length || preview.length) {
      var thead = el("thead", {}, el("tr", {}, cols.map(function (c) { return el("th", { scope: "col", text: c }); })));
      var tb = el("tbody", {}, preview.map(function (row) { return el("tr", {}, row.map(cell)); }));
      box.appendChild(el("div", { class: "preview" }, el("table", {}, thead, tb)));
      if (res.row_count > preview.length) {
        box.appendChild(el("div", { class: "sub", text: "preview: first " + preview.length + " of " + res.row_count + " rows" }));
      }
    }
    return box;
  }
  function scoresTable(scores, primary) {
    var names = Object.keys(scores || {});
    if (!names.length) return el("div", { class: "empty", text: "no scores" });
    return el("table", { class: "plain scores" },
      el("thead", {}, el("tr", {}, ["Scorer", "Verdict", "Value", "Detail", "Flags"].map(function (h) {
        return el("th", { scope: "col", text: h });
      }))),
      el("tbody", {}, names.map(function (n) {
        var s = scores[n];
        var verdict = !s.applicable ? el("span", { class: "chip na", text: "n/a" })
          : s.passed === true ? el("span", { class: "chip ok", text: "pass" })
          : s.passed === false ? el("span", { class: "chip bad", text: "fail" }) : el("span", { class: "chip na", text: "metric" });
        return el("tr", {}, el("td", {}, el("code", { text: n }), n === primary ? el("span", { class: "sub", text: " verdict" }) : null),
          el("td", {}, verdict), el("td", { class: "num", text: s.value === null || s.value === undefined ? "\u2014" : String(s.value) }),
          el("td", { text: s.detail || "" }), el("td", { text: (s.flags || []).join(", ") }));
      })));
  }
  function replyEl(t) {
    var rep = t.reply;
    if (!rep) return el("div", { class: "msg agent" }, el("div", { class: "who", text: "Agent" }), el("div", { class: "empty", text: "no reply" }));
    var box = el("div", { class: "msg agent" });
    var usage = rep.usage && rep.usage.total ? rep.usage.total + " tokens" : "";
    var tone = rep.kind === "error" ? "bad" : rep.kind === "clarification" ? "warn" : rep.kind === "sql" ? "accent" : "";
    box.appendChild(el("div", { class: "who" }, "Agent", el("span", { class: "badge " + tone, text: rep.kind }),
      el("span", { class: "extra", text: secs(rep.latency_s) + (usage ? " \u00b7 " + usage : "") })));
    if (rep.text) box.appendChild(el("div", { class: "text", text: rep.text }));
    if (rep.sql) box.appendChild(el("pre", { class: "sql" }, el("code", { text: rep.sql })));
    (rep.tool_calls || []).forEach(function (c) {
      var ran = c.outcome ? " \u00b7 " + c.outcome + " \u00b7 " + secs(c.latency_s) + " \u00b7 " + (c.result_bytes || 0) + " B" : "";
      box.appendChild(el("details", { class: "tool" + (c.outcome && c.outcome !== "ok" ? " bad" : "") },
        el("summary", {}, "tool call ", el("code", { text: c.name }), el("span", { class: "extra", text: ran })),
        el("div", { class: "sub", text: "arguments" }), el("pre", {}, el("code", { text: json(c.args) })),
        c.response === null || c.response === undefined ? null
          : [el("div", { class: "sub", text: "response" }), el("pre", {}, el("code", { text: json(c.response) }))]));
    });
    if (rep.error) box.appendChild(el("div", { class: "err", text: (rep.error_kind ? rep.error_kind + ": " : "") + rep.error }));
    return box;
  }
  function vuserWho(v) {
    // the virtual user's action and leak audit, shown on the message it wrote
    var leaks = v && v.audit && v.audit.leaks && v.audit.leaks.length ? v.audit.leaks : [];
    return el("div", { class: "who" }, "Virtual user",
      v && v.action ? el("code", { class: "extra", title: "virtual user action", text: v.action }) : null,
      leaks.length ? el("span", { class: "badge bad", text: "leak: " + leaks.map(function (l) {
        return typeof l === "string" ? l : JSON.stringify(l);
      }).join(", ") }) : null);
  }
  function vuserNote(v) {
    return el("div", { class: "msg vuser" }, vuserWho(v), v.text ? el("div", { class: "text", text: v.text }) : null,
      v.error ? el("div", { class: "err", text: v.error }) : null);
  }
  function turnsEl(d) {
    var wrap = el("div", { class: "turns" }), lastPhase = null, turns = d.turns || [];
    turns.forEach(function (t, k) {
      if (t.phase !== lastPhase) {
        wrap.appendChild(el("div", { class: "phase-sep", text: phaseName(t.phase) + " phase" }));
        lastPhase = t.phase;
      }
      var prev = k > 0 ? turns[k - 1] : null;
      var isVuser = t.user_role === "vuser";
      wrap.appendChild(el("div", { class: "msg " + (isVuser ? "vuser" : "user") },
        isVuser ? vuserWho(prev && prev.vuser) : el("div", { class: "who", text: "User" }),
        el("div", { class: "text user-text", text: t.user_text })));
      wrap.appendChild(replyEl(t));
      var next = turns[k + 1];
      if (t.vuser && !(next && next.user_role === "vuser")) wrap.appendChild(vuserNote(t.vuser));
    });
    if (!turns.length) wrap.appendChild(el("div", { class: "empty", text: "no turns" }));
    return wrap;
  }
  function phaseEl(p, pv, diff) {
    var verdict = pv ? verdictChip(p.phase, pv[1], pv[2]) : null;
    var panel = el("div", { class: "panel phase" },
      el("div", { class: "section-head" }, el("h3", { text: phaseName(p.phase) + " phase" }), outcomeBadge(p.outcome), verdict));
    panel.appendChild(el("div", { class: "text", text: p.question }));
    var cond = p.conditions || {};
    panel.appendChild(kv([["clarifications", p.clarifications + " / " + p.clarification_budget], ["debug attempts", p.debug_used || 0],
      ["order", cond.order ? "yes" : "no"], ["distinct", cond.distinct ? "yes" : "no"],
      ["decimal", cond.decimal !== undefined && cond.decimal >= 0 ? cond.decimal : null]]));
    if (p.error) panel.appendChild(el("div", { class: "err", text: p.error }));
    panel.appendChild(el("h4", { text: "Final SQL" }));
    panel.appendChild(p.sql ? el("pre", { class: "sql phase-sql" }, el("code", { text: p.sql })) : el("div", { class: "empty", text: "no SQL" }));
    if (p.golden_sql && p.golden_sql.length) {
      var goldenTitle = p.golden_sql.length > 1 ? "Golden SQL (" + p.golden_sql.length + ")" : "Golden SQL";
      panel.appendChild(el("details", { class: "tool" }, el("summary", { text: goldenTitle }),
        p.golden_sql.map(function (g) { return el("pre", { class: "sql golden-sql" }, el("code", { text: g })); })));
    }
    if (diff && diff.length) {
      // golden -> generated, computed in Python (sqldiff.py); every segment is text, never markup
      var segs = diff.map(function (s) { return el(s[0] === "-" ? "del" : s[0] === "+" ? "ins" : "span", { text: s[1] }); });
      panel.appendChild(el("h4", { text: "SQL diff (golden \u2192 generated; struck out: golden only, bold: generated only)" }));
      panel.appendChild(el("pre", { class: "sql sql-diff" }, el("code", {}, segs)));
    }
    (p.attempts || []).forEach(function (a, k) {
      panel.appendChild(el("details", { class: "tool" }, el("summary", { text: "earlier attempt " + (k + 1) }),
        a.sql ? el("pre", { class: "sql" }, el("code", { text: a.sql })) : null, el("pre", {}, el("code", { text: json(a.scores) }))));
    });
    var answered = !p.sql && p.answer;  // an answer in words: shown where the generated result would be
    var grid = el("div", { class: "phase-grid" }, answered
      ? el("div", { class: "result generated answer" }, el("h4", { text: "Answer in words" }), el("div", { class: "text", text: p.answer }))
      : resultBox("Generated", p.generated, "generated"));
    (p.golden || []).forEach(function (g, k) { grid.appendChild(resultBox(p.golden.length > 1 ? "Golden #" + (k + 1) : "Golden", g, "golden")); });
    panel.appendChild(grid);
    panel.appendChild(el("h4", { text: "Scores" }));
    panel.appendChild(scoresTable(p.scores, pv ? pv[1] : null));
    return panel;
  }
  function timingsEl(d, r) {
    var stages = d.stage_seconds || {};
    var panel = el("div", { class: "panel" }, el("h3", { text: "Timings and usage" }));
    function timing(label, seconds) { return el("tr", {}, el("td", {}, label), el("td", { class: "num", text: secs(seconds) })); }
    var rows = Object.keys(stages).map(function (s) { return timing(s, stages[s]); });
    rows.push(timing(el("b", { text: "conversation (wall clock)" }), d.elapsed_s));
    (d.turns || []).forEach(function (t) {
      if (t.reply) rows.push(timing("turn " + (t.index + 1) + " agent latency", t.reply.latency_s));
    });
    var head = el("tr", {}, el("th", { scope: "col", text: "stage" }), el("th", { class: "num", scope: "col", text: "time" }));
    panel.appendChild(el("table", { class: "plain" }, el("thead", {}, head), el("tbody", {}, rows)));
    var tok = d.tokens || {};
    panel.appendChild(kv([["tokens", (tok.total || 0) + " (prompt " + (tok.prompt || 0) + ", completion " + (tok.completion || 0) + ")"],
      ["sessions opened", d.sessions_opened], ["seed", d.seed], ["source", d.source], ["journal line", r.line],
      ["virtual user", d.simulator ? [d.simulator.vuser, d.simulator.model].filter(Boolean).join(" ") : null]]));
    if (d.usage) panel.appendChild(usageTable(d.usage, d.cost_usd));
    return panel;
  }
  function usd(v) {
    if (v === null || v === undefined) return "unknown";
    return "$" + (v === 0 || Math.abs(v) >= 0.01 ? v.toFixed(4) : v.toFixed(6));
  }
  // the conversation's model calls per role (agent, vuser, judge:<scorer>): the journal's usage field
  function usageTable(usage, total) {
    var head = el("tr", {}, ["role", "model", "calls", "tokens in", "tokens out", "USD"].map(function (h, k) {
      return el("th", { scope: "col", class: k > 1 ? "num" : null, text: h });
    }));
    var rows = Object.keys(usage).map(function (role) {
      var u = usage[role] || {};
      return el("tr", {}, el("td", { text: role + (u.replayed ? " (replayed)" : "") }), el("td", { text: dash(u.model) }),
        [u.calls, u.prompt, u.completion].map(function (n) { return el("td", { class: "num", text: String(n || 0) }); }),
        el("td", { class: "num", text: usd(u.cost_usd) }));
    });
    rows.push(el("tr", {}, el("td", {}, el("b", { text: "total" })), el("td"), el("td"), el("td"), el("td"),
      el("td", { class: "num", text: usd(total) })));
    return el("table", { class: "plain usage" }, el("thead", {}, head), el("tbody", {}, rows));
  }
  function open(i) {
    current = i;
    var r = ROWS[i], d = DETAILS[i];
    $("detail-title").textContent = r.id;
    var pos = visible.indexOf(i);
    $("detail-pos").textContent = pos >= 0 ? (pos + 1) + " of " + visible.length : "";
    $("prev").disabled = pos <= 0;
    $("next").disabled = pos < 0 || pos >= visible.length - 1;
    var parts = [];
    var badges = el("div", { class: "badges" }, outcomeBadge(r.outcome), verdictChips(r),
      el("span", { class: "badge", text: [r.dialect, r.db].filter(Boolean).join(" / ") || "\u2014" }),
      r.cat ? el("span", { class: "badge", text: r.cat }) : null, r.diff ? el("span", { class: "badge", text: r.diff }) : null,
      r.amb ? el("span", { class: "badge warn", text: "ambiguous" }) : null,
      d && d.ambiguity_types ? d.ambiguity_types.map(function (a) { return el("span", { class: "badge warn", text: a }); }) : null,
      r.fu ? el("span", { class: "badge", text: "has follow-up" }) : null);
    var head = el("div", { class: "panel" }, badges,
      kv([["turns", r.turns], ["reward", r.reward === null || r.reward === undefined ? null : r.reward.toFixed(2)], ["elapsed", secs(r.elapsed)]]));
    if (r.dk || r.dm) {
      head.appendChild(el("div", { class: "diagnosis" }, el("b", { text: "Diagnosis: " }), r.dk ? el("span", { class: "kind", text: r.dk }) : null,
        r.dp ? el("span", { class: "sub", text: "(" + phaseName(r.dp) + " phase) " }) : null, r.dm || ""));
    }
    else if (r.pass === "pass") head.appendChild(el("div", { class: "diagnosis none", text: "Passed: no failure to diagnose." }));
    if (d && d.error) head.appendChild(el("div", { class: "err", text: "conversation error: " + d.error }));
    parts.push(head);
    if (!d) {
      parts.push(el("div", { class: "notice", text: "The full record of this conversation is not embedded: " + META.detail_note +
        " Find it in conversations.jsonl, line " + r.line + "." }));
    } else {
      parts.push(el("div", { class: "panel" }, el("h3", { text: "Conversation" }), turnsEl(d)));
      (d.phases || []).forEach(function (p, k) { parts.push(phaseEl(p, r.v[k], (DIFFS[i] || [])[k])); });
      parts.push(timingsEl(d, r));
    }
    body.replaceChildren.apply(body, parts);
    if (!dialog.open) dialog.showModal();
    body.scrollTop = 0; dialog.scrollTop = 0;
    try { history.replaceState(null, "", "#" + anchorOf(r)); } catch (e) { /* file:// may refuse */ }
  }
  function step(delta) {
    var pos = visible.indexOf(current);
    if (pos < 0) return;
    var nextPos = pos + delta;
    if (nextPos < 0 || nextPos >= visible.length) return;
    if (nextPos >= state.shown) { state.shown = nextPos + 1; render(); }
    open(visible[nextPos]);
  }
  $("prev").addEventListener("click", function () { step(-1); });
  $("next").addEventListener("click", function () { step(1); });
  $("close").addEventListener("click", function () { dialog.close(); });
  dialog.addEventListener("click", function (e) { if (e.target === dialog) dialog.close(); });
  dialog.addEventListener("keydown", function (e) {
    if (e.target.closest && e.target.closest("input, select, textarea")) return;
    if (e.key === "ArrowLeft") { e.preventDefault(); step(-1); }
    else if (e.key === "ArrowRight") { e.preventDefault(); step(1); }
  });
  dialog.addEventListener("close", function () {
    try { history.replaceState(null, "", location.pathname + location.search); } catch (e) { /* ignore */ }
    var tr = current === null ? null : tbody.querySelector('tr[data-index="' + current + '"]');
    if (tr) tr.focus();
  });

  // #<item id>[&trial=<n>] opens a conversation (links from index.html and compare.html: results/render/links.py)
  function anchorOf(r) { return encodeURIComponent(r.id) + (r.trial > 1 ? "&trial=" + r.trial : ""); }
  function openAnchor(hash) {
    for (var i = 0; i < ROWS.length; i++) if (anchorOf(ROWS[i]) === hash) { open(i); return; }
    try {  // a hand-written hash: the item id, decoded
      var wanted = decodeURIComponent(hash.split("&trial=")[0]);
      for (var j = 0; j < ROWS.length; j++) if (ROWS[j].id === wanted) { open(j); return; }
    } catch (e) { /* not percent-encoded text */ }
  }
  apply();
  if (location.hash.length > 1) openAnchor(location.hash.slice(1));
  document.documentElement.setAttribute("data-ready", "1");
})();
"""
