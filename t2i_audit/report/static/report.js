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
    var sel = selects(), params = new URLSearchParams();
    Object.keys(sel).forEach(function (n) { if (sel[n].value) { params.set(n, sel[n].value); } });
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
