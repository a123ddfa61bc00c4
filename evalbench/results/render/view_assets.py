"""The extra stylesheet and the script of ``index.html`` (see :mod:`evalbench.results.render.view`); the
page also inlines report.html's stylesheet. The script renders record data with ``textContent``
only (never ``innerHTML``) and loads nothing."""

from __future__ import annotations

VIEW_CSS = r"""
#matrix-table td.cell, #matrix-table th.run { text-align: center; white-space: nowrap; }
#matrix-table td.cell a { display: inline-block; min-width: 2.2em; text-decoration: none; font-weight: 600; border-radius: 4px; }
#matrix-table td.c-p a, #matrix-table td.c-p span { color: var(--ok); }
#matrix-table td.c-f a, #matrix-table td.c-f span { color: var(--bad); }
#matrix-table td.c-e a, #matrix-table td.c-e span { color: var(--warn); }
#matrix-table td.c-n a, #matrix-table td.c-i a, #matrix-table td.c-n span, #matrix-table td.c-i span { color: var(--na); }
#matrix-table td.c-p { background: var(--ok-soft); }
#matrix-table td.c-f { background: var(--bad-soft); }
#matrix-table td.c-e { background: var(--warn-soft); }
#matrix-table td.cell .dk { display: block; font-size: 11px; font-weight: 400; color: var(--muted); }
#matrix-table th.run .rate { display: block; font-weight: 400; color: var(--text); }
#matrix-table td.id { font-family: var(--mono); font-size: 12.5px; }
#runs .panel { overflow-x: auto; }
#runs-table td.date { white-space: nowrap; }
#runs-table td.status { max-width: 340px; }
#runs-table td.status .badge { white-space: normal; overflow-wrap: anywhere; }
#runs-table td.run-name { max-width: 260px; overflow-wrap: anywhere; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; background: var(--na-soft); }
.badge.ok { background: var(--ok-soft); color: var(--ok); }
.badge.bad { background: var(--bad-soft); color: var(--bad); }
.badge.warn { background: var(--warn-soft); color: var(--warn); }
.filters { display: flex; flex-wrap: wrap; gap: 10px 14px; align-items: flex-end; margin-bottom: 10px; }
.filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); gap: 2px; }
.table-wrap { background: var(--panel); border: 1px solid var(--border); border-radius: 8px; overflow: auto; }
.more { padding: 10px; text-align: center; }
"""

VIEW_JS = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("evalbench-view").textContent);
  var COLS = DATA.runs.filter(function (r) { return r.column; });
  var ROWS = DATA.rows, PAGE = 300;
  var SYMBOL = { p: "\u2713", f: "\u2717", e: "!", n: "n/a", i: "invalid", "-": "\u2014" };
  var LABEL = { p: "pass", f: "fail", e: "error", n: "no verdict", i: "invalid item", "-": "no such phase" };
  var $ = function (id) { return document.getElementById(id); };
  var state = { q: "", phase: 0, rows: "", slices: {}, shown: PAGE };
  var visible = [];

  function el(tag, attrs) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      var v = attrs[k];
      if (v === null || v === undefined) return;
      if (k === "class") node.className = v; else if (k === "text") node.textContent = String(v); else node.setAttribute(k, String(v));
    });
    for (var i = 2; i < arguments.length; i++) if (arguments[i]) node.appendChild(arguments[i]);
    return node;
  }
  function key(v) { return v === null || v === undefined ? "" : String(v); }
  // the fragment report.html opens (results/render/links.py, and report.html's own script)
  function anchorOf(r) { return encodeURIComponent(r.id) + (r.trial > 1 ? "&trial=" + r.trial : ""); }
  function code(r, j) { var c = r.c[j]; return c ? c[state.phase] : null; }

  // ------------------------------------------------------------------ filters
  var filters = $("view-filters"), reset = $("v-reset");
  DATA.slices.forEach(function (s) {
    var counts = {};
    ROWS.forEach(function (r) { var v = key(r[s[0]]); if (v) counts[v] = (counts[v] || 0) + 1; });
    var values = Object.keys(counts).sort(function (a, b) { return a.localeCompare(b, undefined, { numeric: true }); });
    if (values.length < 2) return;  // one value: nothing to filter
    var select = el("select", { id: "v-slice-" + s[0], "data-slice": s[0] }, el("option", { value: "", text: "All" }));
    values.forEach(function (v) { select.appendChild(el("option", { value: v, text: v + " (" + counts[v] + ")" })); });
    select.addEventListener("change", function () { state.slices[s[0]] = select.value; apply(); });
    filters.insertBefore(el("label", { "for": select.id, text: s[1] }, select), reset);
  });

  function matches(r) {
    if (state.q && r.id.toLowerCase().indexOf(state.q) < 0) return false;
    for (var k in state.slices) if (state.slices[k] && key(r[k]) !== state.slices[k]) return false;
    var codes = [];
    for (var j = 0; j < COLS.length; j++) { var c = code(r, j); if (c && c !== "-") codes.push(c); }
    if (!codes.length) return false;  // e.g. no follow-up phase in any run
    var bad = codes.filter(function (c) { return c === "f" || c === "e"; }).length;
    if (state.rows === "differ") return codes.length < COLS.length || codes.some(function (c) { return c !== codes[0]; });
    if (state.rows === "anyfail") return bad > 0;
    if (state.rows === "allfail") return bad === codes.length;
    return true;
  }

  // ------------------------------------------------------------------ table
  var head = $("matrix-head"), body = $("matrix-body"), more = $("v-more");
  function renderHead() {
    var cells = [el("th", { scope: "col", text: "Item" }), el("th", { scope: "col", text: "Database" }),
      el("th", { scope: "col", text: "Category" })];
    COLS.forEach(function (run, j) {
      var p = 0, n = 0;
      visible.forEach(function (r) { var c = code(ROWS[r], j); if (c === "p" || c === "f" || c === "e") { n++; if (c === "p") p++; } });
      var name = run.href ? el("a", { href: run.href, text: run.id }) : el("span", { text: run.id });
      cells.push(el("th", { scope: "col", class: "run", title: (run.agent || "") + " \u00b7 " + run.status }, name,
        el("span", { class: "rate", text: n ? (100 * p / n).toFixed(1) + "% (" + p + "/" + n + ")" : "\u2014" })));
    });
    head.replaceChildren(el("tr", {}, cells[0], cells[1], cells[2]));
    for (var i = 3; i < cells.length; i++) head.firstChild.appendChild(cells[i]);
  }
  function cellEl(r, j) {
    var c = r.c[j], run = COLS[j];
    if (!c) return el("td", { class: "cell miss", title: run.id + ": not in this run" });
    var v = c[state.phase], text = SYMBOL[v] || v;
    var title = run.id + ": " + (LABEL[v] || v) + (c[3] && v !== "p" ? " \u2014 " + c[3] : "");
    var inner = run.href ? el("a", { href: run.href + "#" + anchorOf(r), text: text }) : el("span", { text: text });
    if (c[3] && (v === "f" || v === "e")) inner.appendChild(el("span", { class: "dk", text: c[3] }));
    return el("td", { class: "cell c-" + (v === "-" ? "n" : v), title: title }, inner);
  }
  function rowEl(i) {
    var r = ROWS[i];
    var id = r.id + (r.trial > 1 ? " (trial " + r.trial + ")" : "");
    var tr = el("tr", { "data-index": i }, el("td", { class: "id", text: id, title: key(r.dialect) }),
      el("td", { text: key(r.db) }), el("td", { text: key(r.cat) }));
    for (var j = 0; j < COLS.length; j++) tr.appendChild(cellEl(r, j));
    return tr;
  }
  function render() {
    var frag = document.createDocumentFragment();
    visible.slice(0, state.shown).forEach(function (i) { frag.appendChild(rowEl(i)); });
    body.replaceChildren(frag);
    more.hidden = visible.length <= state.shown;
    more.textContent = "Show more (" + (visible.length - Math.min(state.shown, visible.length)) + " left)";
    $("v-none").hidden = visible.length > 0;
  }
  function apply() {
    visible = [];
    for (var i = 0; i < ROWS.length; i++) if (matches(ROWS[i])) visible.push(i);
    state.shown = PAGE;
    $("v-count").textContent = String(visible.length);
    renderHead();
    render();
  }

  $("v-q").addEventListener("input", function () { state.q = this.value.trim().toLowerCase(); apply(); });
  $("v-phase").addEventListener("change", function () { state.phase = Number(this.value); apply(); });
  $("v-rows").addEventListener("change", function () { state.rows = this.value; apply(); });
  reset.addEventListener("click", function () {
    state.q = ""; state.rows = ""; state.phase = 0; state.slices = {};
    $("v-q").value = ""; $("v-rows").value = ""; $("v-phase").value = "0";
    Array.prototype.forEach.call(document.querySelectorAll("select[data-slice]"), function (s) { s.value = ""; });
    apply();
  });
  more.addEventListener("click", function () { state.shown += PAGE; render(); });
  apply();
  document.documentElement.setAttribute("data-ready", "1");
})();
"""

__all__ = ["VIEW_CSS", "VIEW_JS"]
