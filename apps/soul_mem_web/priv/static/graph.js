// The memory-graph view: cytoscape.js (npm `cytoscape`, served as
// /assets/vendor/cytoscape.min.js, global `cytoscape`). Shows a turn's
// recalled notes (coloured by stage) and their neighbours (grey); a click on
// a node shows its content in the detail box.
import { t } from "/assets/i18n.js";
import { short } from "/assets/dom.js";

const STAGE_COLOURS = { Similarity: "#3b82f6", Ppr: "#f59e0b", Both: "#10b981", Action: "#a855f7" };

export class MemoryGraph {
  constructor(container, detail) {
    this.container = container;
    this.detail = detail;
    this.cy = null;
    this.pending = null;
    this.shownKey = null;
  }

  available() { return typeof window.cytoscape === "function"; }

  // data: {nodes: [{id, kind, content, core}], links: [{from, to, kind, intensity}]};
  // recalled: Map id -> {stage, score}. Draws now when visible, else on the next resize().
  show(data, recalled, key) {
    this.pending = { data, recalled, key };
    if (this.visible()) this.draw();
  }

  visible() { return this.container.offsetParent !== null && this.container.clientWidth > 0; }

  // Called when the panel becomes visible (cytoscape needs a laid-out box).
  resize() {
    if (!this.visible()) return;
    if (this.pending && this.pending.key !== this.shownKey) this.draw();
    else if (this.cy) { this.cy.resize(); this.cy.fit(undefined, 20); }
  }

  draw() {
    const { data, recalled, key } = this.pending;
    this.shownKey = key;
    if (!this.available()) { this.container.textContent = t("graph.no_library"); return; }
    const ids = new Set(data.nodes.map((n) => n.id));
    const elements = data.nodes.map((n) => {
      const r = recalled.get(n.id);
      return {
        group: "nodes",
        data: {
          id: n.id,
          label: short(n.content || n.id, 8),
          kind: n.kind || "",
          content: n.content || "",
          core: !!n.core,
          recalled: !!r,
          colour: r ? (STAGE_COLOURS[r.stage] || "#3b82f6") : "#b8c0ca",
          size: r ? 34 : 22
        },
        classes: [r ? "recalled" : "neighbour", n.core ? "core" : ""].join(" ")
      };
    });
    data.links.forEach((l, i) => {
      if (!ids.has(l.from) || !ids.has(l.to) || l.from === l.to) return;
      const w = typeof l.intensity === "number" ? Math.max(0.5, Math.min(1, l.intensity) * 4) : 1;
      elements.push({ group: "edges", data: { id: "e" + i, source: l.from, target: l.to, kind: l.kind || "", width: w } });
    });

    if (this.cy) this.cy.destroy();
    this.container.textContent = "";
    this.cy = window.cytoscape({
      container: this.container,
      elements,
      wheelSensitivity: 0.3,
      style: [
        { selector: "node", style: {
          "background-color": "data(colour)", label: "data(label)", width: "data(size)", height: "data(size)",
          "font-size": 10, color: "#1d232a", "text-valign": "bottom", "text-margin-y": 3,
          "text-wrap": "ellipsis", "text-max-width": 90
        } },
        { selector: "node.core", style: { "border-width": 3, "border-color": "#7c3aed" } },
        { selector: "node:selected", style: { "border-width": 4, "border-color": "#111827" } },
        { selector: "edge", style: {
          width: "data(width)", "line-color": "#cbd2da", "curve-style": "bezier",
          "target-arrow-shape": "triangle", "target-arrow-color": "#cbd2da", "arrow-scale": 0.7
        } }
      ],
      layout: { name: "cose", animate: false, padding: 20, nodeRepulsion: () => 12000, idealEdgeLength: () => 80, componentSpacing: 80 }
    });
    this.cy.on("tap", "node", (e) => this.select(e.target.id()));
    this.detail.replaceChildren(Object.assign(document.createElement("p"), { className: "hint", textContent: t("graph.pick") }));
  }

  // Shows a node's content in the detail box.
  select(id) {
    if (!this.cy) return;
    const n = this.cy.getElementById(id);
    if (!n || n.empty()) return;
    this.cy.$(":selected").unselect();
    n.select();
    const d = n.data();
    const head = document.createElement("div");
    head.className = "detail-head";
    const code = document.createElement("code");
    code.textContent = d.id;
    const kind = document.createElement("span");
    kind.className = "chip";
    const kindName = d.kind ? t("kind." + d.kind) : "—";
    kind.textContent = t("graph.node_kind", { kind: kindName.startsWith("kind.") ? d.kind : kindName });
    head.append(code, " ", kind);
    if (d.core) {
      const core = document.createElement("span");
      core.className = "chip core";
      core.textContent = t("why.core");
      head.append(" ", core);
    }
    const body = document.createElement("p");
    body.className = "detail-content";
    body.textContent = d.content;
    this.detail.replaceChildren(head, body);
  }

  nodeIds() { return this.cy ? this.cy.nodes().map((n) => n.id()) : []; }
}
