/* t2i-audit report: gallery filters. State lives in the URL hash
   (#category=…&failure=…&concept=…) so a filtered view can be linked and reloaded. */
(function () {
  "use strict";
  var form = document.getElementById("filters");
  if (!form) { return; }
  var cards = Array.prototype.slice.call(document.querySelectorAll("#cards .card"));
  var count = document.getElementById("count");
  var none = document.getElementById("nomatch");
  var names = ["category", "failure", "concept"];
  var attr = { category: "category", failure: "failures", concept: "concepts" };

  function selects() {
    var out = {};
    names.forEach(function (n) { var el = form.elements[n]; if (el) { out[n] = el; } });
    return out;
  }
  function readHash() {
    var params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    var sel = selects();
    Object.keys(sel).forEach(function (n) {
      var v = params.get(n) || "";
      var ok = Array.prototype.some.call(sel[n].options, function (o) { return o.value === v; });
      sel[n].value = ok ? v : "";
    });
  }
  function apply() {
    var sel = selects(), shown = 0;
    cards.forEach(function (card) {
      var visible = Object.keys(sel).every(function (n) {
        var v = sel[n].value;
        if (!v) { return true; }
        var have = card.getAttribute("data-" + attr[n]) || "";
        return n === "category" ? have === v : have.indexOf("|" + v + "|") !== -1;
      });
      card.hidden = !visible;
      if (visible) { shown += 1; }
    });
    if (count) { count.textContent = shown + " shown"; }
    if (none) { none.hidden = shown !== 0; }
    document.body.setAttribute("data-shown", String(shown));
  }
  function writeHash() {
    var sel = selects(), params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    Object.keys(sel).forEach(function (n) { params.delete(n); if (sel[n].value) { params.set(n, sel[n].value); } });
    var h = params.toString();
    if (window.history && window.history.replaceState) {
      window.history.replaceState(null, "", h ? "#" + h : window.location.pathname + window.location.search);
    }
  }
  form.addEventListener("change", function () { apply(); writeHash(); });
  var reset = document.getElementById("reset");
  if (reset) {
    reset.addEventListener("click", function () {
      var sel = selects();
      Object.keys(sel).forEach(function (n) { sel[n].value = ""; });
      apply(); writeHash();
    });
  }
  window.addEventListener("hashchange", function () {
    if (/^#(category|failure|concept)=/.test(window.location.hash)) { readHash(); apply(); }
  });
  if (/^#(category|failure|concept)=/.test(window.location.hash)) { readHash(); }
  apply();
}());

/* Sortable tables (the board): a click on a head with data-key sorts the body by its cells' data-v, highest
   first (data-order="asc": lowest first), a second click reverses; #sort=KEY in the address sorts on load. */
(function () {
  "use strict";
  var tables = Array.prototype.slice.call(document.querySelectorAll("table.sortable"));
  if (!tables.length) { return; }
  function sortTable(table, key, reverse) {
    var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
    var col = heads.findIndex(function (h) { return h.getAttribute("data-key") === key; });
    if (col < 0) { return false; }
    var asc = heads[col].getAttribute("data-order") === "asc";
    if (reverse) { asc = !asc; }
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = parseFloat(a.cells[col].getAttribute("data-v")), y = parseFloat(b.cells[col].getAttribute("data-v"));
      return asc ? x - y : y - x;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    table.setAttribute("data-sorted", key + (reverse ? ":reversed" : ""));
    return true;
  }
  function fromHash() {
    var key = new URLSearchParams(window.location.hash.replace(/^#/, "")).get("sort");
    if (!key) { return; }
    var hit = false;
    tables.forEach(function (t) { hit = sortTable(t, key, false) || hit; });
    document.body.setAttribute("data-sort", hit ? key : "");
  }
  tables.forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) {
      var key = h.getAttribute("data-key");
      if (!key) { return; }
      h.style.cursor = "pointer";
      h.title = "sort by this column";
      h.addEventListener("click", function () {
        var again = table.getAttribute("data-sorted") === key;
        sortTable(table, key, again);
        document.body.setAttribute("data-sort", key);
      });
    });
  });
  window.addEventListener("hashchange", fromHash);
  fromHash();
}());
