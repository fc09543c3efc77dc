// Small DOM helpers shared by the page's modules (app.js, graph.js, manage.js).

// el("li", {className, dataset, style, onclick…}, child…): an element with
// properties and children (strings become text nodes; null/false are skipped).
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  Object.entries(attrs || {}).forEach(([k, v]) => {
    if (k === "dataset") Object.assign(node.dataset, v);
    else if (k === "style" || k.startsWith("aria-") || k === "role") node.setAttribute(k, v);
    else node[k] = v;
  });
  children.flat().forEach((c) => {
    if (c === null || c === undefined || c === false) return;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  });
  return node;
}

// The text on one line, cut to n characters with an ellipsis.
export function short(text, n) {
  const s = String(text || "").replace(/\s+/g, " ").trim();
  return s.length > n ? s.slice(0, n) + "…" : s;
}

// A token for display: its first and last two characters.
export function mask(token) {
  const s = String(token || "");
  return s.length <= 4 ? "••••" : s.slice(0, 2) + "••••" + s.slice(-2);
}
