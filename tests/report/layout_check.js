// What a person sees, measured in the browser: returns a list of problems (strings), empty when the page is fine.
// 1. overlap: a text box (Range.getClientRects of a text node) intersects another text box, or a picture/control
//    (img, svg, canvas, input, select, button) that does not contain it;
// 2. clipped: a table wider than its container, or its scroll container needs sideways scrolling to show it;
//    text cut off by an ancestor that hides or scrolls its overflow; the page itself wider than the window.
// Text under a CSS transform (rotated heatmap headers) is left out: its bounding box is not where its letters are.
(() => {
  const SLACK = 2;  // CSS px: anti-aliasing and font metrics, never a layout fault
  const name = (el) => {
    let s = el.tagName.toLowerCase();
    if (el.id) s += "#" + el.id;
    const c = typeof el.className === "string" ? el.className.trim() : "";
    if (c) s += "." + c.split(/\s+/).join(".");
    return s;
  };
  const where = (el) => {
    const parts = [];
    for (let e = el; e && e !== document.body && parts.length < 4; e = e.parentElement) parts.unshift(name(e));
    return parts.join(" > ");
  };
  const styles = new Map();
  const style = (el) => { if (!styles.has(el)) styles.set(el, getComputedStyle(el)); return styles.get(el); };
  const transformed = (el) => {
    for (let e = el; e && e !== document.documentElement; e = e.parentElement) {
      const t = style(e).transform;
      if (t && t !== "none") return true;
    }
    return false;
  };
  const cut = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > SLACK &&
                        Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > SLACK;
  const problems = [];
  const texts = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    const t = n.textContent.replace(/\s+/g, " ").trim();
    const el = n.parentElement;
    if (!t || !el || ["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE", "TITLE"].includes(el.tagName)) continue;
    // checkVisibility: not under display:none, a closed <details> (content-visibility), visibility:hidden
    if (!el.checkVisibility({visibilityProperty: true, opacityProperty: true}) || transformed(el)) continue;
    const range = document.createRange();
    range.selectNodeContents(n);
    for (const box of range.getClientRects())
      if (box.width > 1 && box.height > 1) texts.push({node: n, el, box, text: t.slice(0, 50)});
  }
  // text over text: a sweep down the page by top edge
  texts.sort((a, b) => a.box.top - b.box.top);
  for (let i = 0; i < texts.length; i++) {
    const a = texts[i];
    for (let j = i + 1; j < texts.length && texts[j].box.top < a.box.bottom - SLACK; j++) {
      const b = texts[j];
      if (a.node !== b.node && cut(a.box, b.box))
        problems.push(`overlap: "${a.text}" (${where(a.el)}) and "${b.text}" (${where(b.el)})`);
    }
  }
  // text under a picture or control it is not part of
  for (const g of document.querySelectorAll("img, svg, canvas, video, input, select, button, textarea")) {
    if (g.closest("svg") !== g && g.closest("svg")) continue;  // an svg inside an svg: its outer one counts
    const gb = g.getBoundingClientRect();
    if (gb.width < 1 || gb.height < 1 || !g.checkVisibility({visibilityProperty: true})) continue;
    for (const t of texts)
      if (!g.contains(t.el) && cut(gb, t.box)) problems.push(`overlap: ${where(g)} covers "${t.text}" (${where(t.el)})`);
  }
  // text cut off by an ancestor that clips (overflow other than visible)
  for (const t of texts) {
    for (let e = t.el; e && e !== document.body; e = e.parentElement) {
      const s = style(e);
      if (s.overflowX === "visible" && s.overflowY === "visible") continue;
      const r = e.getBoundingClientRect();
      const inner = {left: r.left + e.clientLeft, top: r.top + e.clientTop,
                     right: r.left + e.clientLeft + e.clientWidth, bottom: r.top + e.clientTop + e.clientHeight};
      if (t.box.left < inner.left - SLACK || t.box.right > inner.right + SLACK ||
          t.box.top < inner.top - SLACK || t.box.bottom > inner.bottom + SLACK) {
        problems.push(`clipped: "${t.text}" (${where(t.el)}) cut off by ${where(e)}`);
        break;
      }
    }
  }
  // tables: fit their container, need no sideways scrolling
  for (const table of document.querySelectorAll("table")) {
    if (!table.checkVisibility()) continue;  // not displayed (a closed <details>, a hidden panel)
    const parent = table.parentElement, ps = style(parent);
    const room = parent.clientWidth - parseFloat(ps.paddingLeft) - parseFloat(ps.paddingRight);
    const width = table.getBoundingClientRect().width;
    if (width > room + 1) problems.push(`clipped: ${where(table)} is ${Math.round(width)} px wide in ${Math.round(room)} px`);
    for (let e = parent; e && e !== document.documentElement; e = e.parentElement) {
      const s = style(e);
      if (s.overflowX !== "visible" && e.scrollWidth > e.clientWidth + 1) {
        problems.push(`clipped: ${where(table)} scrolls sideways in ${where(e)} (${e.scrollWidth} px in ${e.clientWidth})`);
        break;
      }
    }
  }
  const doc = document.documentElement;
  if (doc.scrollWidth > doc.clientWidth + 1) {
    const wide = [...document.body.querySelectorAll("*")].filter(e => e.getBoundingClientRect().right > doc.clientWidth + 1);
    problems.push(`clipped: the page is ${doc.scrollWidth} px wide in a ${doc.clientWidth} px window: ` +
                  wide.slice(-3).map(where).join("; "));
  }
  return [...new Set(problems)];
})()
