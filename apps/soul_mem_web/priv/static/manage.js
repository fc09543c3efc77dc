// Character management on the page (ES module, no build step).
//
//  * The operator view (operator token from #op-token, sent only in the
//    Authorization header): the characters table (GET /api/characters) with
//    per-row "new token" (POST /api/operator/tokens/:id), "open" (the chat
//    view) and "delete" (a confirm step; DELETE /api/characters/:id writes an
//    export backup first and answers its path); a new empty character
//    ({id, name, description}); a SillyTavern card file dropped or chosen,
//    sent as raw bytes (POST /api/characters?id=…), whose token is shown once;
//    and the token list (GET/POST/DELETE /api/operator/tokens).
//  * The memories panel: the open character's notes with its own token (GET
//    /api/characters/:id/notes?query&kind&page&per_page), a note's JSON (GET
//    notes/:note_id), deletion with a confirm step (DELETE notes/:note_id) and
//    the SillyTavern exports (GET export?format=world_info|card) as downloads.
// Strings: i18n.js.
import { t } from "/assets/i18n.js";
import { el, short } from "/assets/dom.js";

const $ = (id) => document.getElementById(id);
const PER_PAGE = 20;

// Content types of card files: the server reads any body that is not
// application/json as card bytes, so a .json card goes as octet-stream.
const CARD_TYPES = { png: "image/png", charx: "application/zip", json: "application/octet-stream" };

export function cardType(file) {
  const ext = String(file.name || "").toLowerCase().split(".").pop();
  return CARD_TYPES[ext] || (file.type && file.type !== "application/json" ? file.type : "application/octet-stream");
}

class ApiError extends Error {
  constructor(code, message, status) {
    super(t("op.error", { code, message: message || "" }));
    this.code = code;
    this.status = status;
  }
}

// A JSON API call with a bearer token. opts: {json} (a JSON body) or {body,
// type} (raw bytes). Resolves the decoded answer; rejects with an ApiError
// carrying the server's {code, message}.
async function call(method, url, token, opts) {
  const headers = { Authorization: "Bearer " + token };
  let body;
  if (opts && opts.json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(opts.json);
  } else if (opts && opts.body !== undefined) {
    headers["Content-Type"] = opts.type;
    body = opts.body;
  }
  let res;
  try {
    res = await fetch(url, { method, headers, body });
  } catch (e) {
    throw new ApiError("network", t("error.network"), 0);
  }
  let data = null;
  try { data = await res.json(); } catch (_) { data = null; }
  if (!res.ok) {
    const e = (data && data.error) || { code: String(res.status), message: res.statusText };
    throw new ApiError(e.code, e.message, res.status);
  }
  return data;
}

function say(node, text, kind) {
  node.textContent = text;
  node.className = "hint " + (kind || "");
}

function localTime(iso) {
  if (!iso) return t("mc.never");
  const d = new Date(iso);
  if (isNaN(d.getTime())) return iso;
  return new Intl.DateTimeFormat(t("locale"), { dateStyle: "short", timeStyle: "short" }).format(d);
}

// Copies text to the clipboard (the page is served from loopback, a secure
// context); falls back to selecting it.
async function copy(text, button, codeEl) {
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = t("mc.copied");
  } catch (_) {
    const range = document.createRange();
    range.selectNodeContents(codeEl);
    const sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
    button.textContent = t("mc.copy_failed");
  }
}

// A download of a JSON answer under `file` (Blob + a temporary link).
function download(data, file) {
  const url = URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: "application/json" }));
  const a = el("a", { href: url, download: file, hidden: true });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

function safeFile(id) {
  return String(id).replace(/[^\p{L}\p{N}_.-]+/gu, "_");
}

function tagText(tag) {
  if (typeof tag === "string") return tag;
  if (tag && typeof tag === "object") {
    const [k, v] = Object.entries(tag)[0] || ["", ""];
    return v === null || typeof v === "object" ? k : `${k}: ${v}`;
  }
  return String(tag);
}

function kindLabel(kind) {
  const key = "kind." + kind;
  return t(key) !== key ? t(key) : String(kind || "—");
}

// page: what the chat page lends: current() (the open character), tokenOf(id),
// open(id, token?) (connects the chat view; a token given is remembered),
// fill(id) (puts the id in the chat view's fields to enter a token), dropToken(id).
export class Manage {
  constructor(page) {
    this.page = page;
    this.minted = new Map();   // character id -> a token minted in this page load
    this.pendingDelete = null;
    this.mem = { page: 1, total: 0, query: "", kind: "", character: null, stale: true };
  }

  start() {
    $("op-form").addEventListener("submit", (e) => { e.preventDefault(); this.refresh(); });
    $("op-create").addEventListener("click", () => this.createToken());
    $("mc-new").addEventListener("submit", (e) => { e.preventDefault(); this.createEmpty(); });
    $("mc-confirm-yes").addEventListener("click", () => this.confirmDelete());
    $("mc-confirm-no").addEventListener("click", () => this.cancelDelete());
    $("mc-file").addEventListener("change", (e) => {
      const file = e.target.files && e.target.files[0];
      if (file) this.upload(file);
    });
    const drop = $("mc-drop");
    ["dragenter", "dragover"].forEach((ev) => drop.addEventListener(ev, (e) => {
      e.preventDefault();
      drop.classList.add("over");
    }));
    drop.addEventListener("dragleave", (e) => { if (!drop.contains(e.relatedTarget)) drop.classList.remove("over"); });
    drop.addEventListener("drop", (e) => {
      e.preventDefault();
      drop.classList.remove("over");
      const file = e.dataTransfer && e.dataTransfer.files && e.dataTransfer.files[0];
      if (file) this.upload(file);
    });

    $("mem-search").addEventListener("submit", (e) => {
      e.preventDefault();
      this.mem.query = $("mem-query").value.trim();
      this.mem.kind = $("mem-kind").value;
      this.loadNotes(1);
    });
    $("mem-kind").addEventListener("change", () => $("mem-search").requestSubmit());
    $("mem-prev").addEventListener("click", () => this.loadNotes(this.mem.page - 1));
    $("mem-next").addEventListener("click", () => this.loadNotes(this.mem.page + 1));
    $("mem-export-wi").addEventListener("click", () => this.exportAs("world_info"));
    $("mem-export-card").addEventListener("click", () => this.exportAs("card"));
    this.characterChanged(this.page.current());
  }

  // ------------------------------------------------------------ operator

  operatorToken() { return $("op-token").value.trim(); }

  status(text, kind) { say($("op-status"), text, kind); }

  async op(method, url, opts) {
    const token = this.operatorToken();
    if (!token) throw new ApiError("unauthorized", t("mc.need_operator"), 401);
    return call(method, url, token, opts);
  }

  // The characters and the token list, in one go.
  async refresh(quiet) {
    try {
      const [chars, tokens] = await Promise.all([this.op("GET", "/api/characters"), this.op("GET", "/api/operator/tokens")]);
      this.renderCharacters(chars.characters || []);
      this.renderTokens(tokens.characters || []);
      if (!quiet) this.status(t("mc.listed", { count: (chars.characters || []).length }) + " · " + t("op.listed", { count: (tokens.characters || []).length }));
      return true;
    } catch (e) {
      this.status(e.message, "error");
      return false;
    }
  }

  renderCharacters(list) {
    const cell = (label, ...children) => el("td", { dataset: { label } }, ...children);
    const rows = list.map((c) => {
      const state = c.state === "running" ? "running" : "stored";
      const stateText = t("mc." + state) + (c.status ? " · " + (t("mc.status." + c.status) !== "mc.status." + c.status ? t("mc.status." + c.status) : c.status) : "");
      return el("tr", { className: "mc-row", dataset: { id: c.id } },
        cell(t("mc.col_id"), el("code", { className: "mc-id" }, c.id)),
        cell(t("mc.col_name"), el("span", { className: "mc-name" }, c.name || "—")),
        cell(t("mc.col_state"), el("span", { className: "chip state " + state }, stateText)),
        el("td", { className: "num mc-notes", dataset: { label: t("mc.col_notes") } }, String(c.notes ?? "—")),
        el("td", { className: "num mc-links", dataset: { label: t("mc.col_links") } }, String(c.links ?? "—")),
        cell(t("mc.col_last"), c.last_active ? el("time", { className: "mc-last", dateTime: c.last_active, title: c.last_active }, localTime(c.last_active)) : el("span", { className: "mc-last" }, t("mc.never"))),
        el("td", { className: "num mc-tokens", dataset: { label: t("mc.col_tokens") } }, String(c.tokens ?? 0)),
        el("td", { className: "mc-actions" },
          el("button", { type: "button", className: "mc-open", onclick: () => this.open(c.id), "aria-label": t("mc.open") + " " + c.id }, t("mc.open")),
          el("button", { type: "button", className: "mc-token", onclick: () => this.newToken(c.id), "aria-label": t("mc.new_token") + " " + c.id }, t("mc.new_token")),
          el("button", { type: "button", className: "mc-delete danger-link", onclick: () => this.askDelete(c), "aria-label": t("mc.delete") + " " + c.id }, t("mc.delete"))));
    });
    $("mc-table").tBodies[0].replaceChildren(...rows);
    $("mc-empty").hidden = rows.length > 0;
  }

  renderTokens(list) {
    const rows = list.map((c) => el("tr", { className: "op-row" },
      el("td", {}, el("code", {}, c.id)),
      el("td", {}, String(c.tokens)),
      el("td", {}, el("button", { type: "button", className: "op-revoke", onclick: () => this.revoke(c.id) }, t("op.revoke")))));
    $("op-table").tBodies[0].replaceChildren(...rows);
  }

  async revoke(id) {
    try {
      await this.op("DELETE", "/api/operator/tokens/" + encodeURIComponent(id));
      await this.refresh(true);
      this.status(t("op.revoked", { id }));
    } catch (e) { this.status(e.message, "error"); }
  }

  // The token list's "new token" for any id (a character need not exist yet).
  async createToken() {
    const id = $("op-new-id").value.trim();
    if (!id) return;
    try {
      const body = await this.op("POST", "/api/operator/tokens/" + encodeURIComponent(id));
      this.minted.set(id, body.token);
      await this.refresh(true);
      const [before, after] = t("op.created", { id, token: "\u0000" }).split("\u0000");
      $("op-status").replaceChildren(before, el("code", { id: "op-new-token" }, body.token), after || "");
      $("op-status").className = "hint created";
    } catch (e) { this.status(e.message, "error"); }
  }

  // A row's "new token": shown once in the result box.
  async newToken(id) {
    try {
      const body = await this.op("POST", "/api/operator/tokens/" + encodeURIComponent(id));
      this.minted.set(id, body.token);
      await this.refresh(true);
      this.showResult(t("mc.token_for", { id }), null, id, body.token);
      this.status("");
    } catch (e) { this.status(e.message, "error"); }
  }

  open(id) {
    const token = this.page.tokenOf(id) || this.minted.get(id);
    if (token) this.page.open(id, token);
    else this.page.fill(id);
  }

  // Shows a created character or a new token: the token once, a copy button,
  // "open in chat"; for a card, the import report.
  showResult(title, report, id, token) {
    const box = $("mc-result");
    const code = el("code", { id: "mc-new-token", className: "token" }, token);
    const copyButton = el("button", { type: "button", className: "mc-copy" }, t("mc.copy"));
    copyButton.addEventListener("click", () => copy(token, copyButton, code));
    box.replaceChildren(...[
      el("div", { className: "result-head" },
        el("strong", { className: "result-title" }, title),
        el("button", { type: "button", className: "link mc-close", onclick: () => { box.hidden = true; box.replaceChildren(); } }, t("mc.close"))),
      report ? this.reportList(report) : null,
      el("p", { className: "token-once" }, t("mc.token_once")),
      el("div", { className: "token-row" }, code, copyButton,
        el("button", { type: "button", className: "mc-open-chat", onclick: () => this.page.open(id, token) }, t("mc.open_chat")))
    ].filter(Boolean));
    box.dataset.id = id;
    box.hidden = false;
  }

  reportList(report) {
    const order = ["name", "format", "notes", "links", "lore_entries", "skipped_disabled", "skipped_empty", "core_notes", "enrichment"];
    const keys = [...order.filter((k) => k in report), ...Object.keys(report).filter((k) => !order.includes(k))];
    return el("dl", { className: "report", "aria-label": t("report.title") },
      keys.map((k) => {
        const label = t("report." + k) !== "report." + k ? t("report." + k) : k;
        const v = report[k];
        return el("div", { className: "report-item", dataset: { key: k } },
          el("dt", {}, label), el("dd", {}, v !== null && typeof v === "object" ? JSON.stringify(v) : String(v)));
      }));
  }

  async createEmpty() {
    const id = $("mc-new-id").value.trim();
    const name = $("mc-new-name").value.trim();
    const description = $("mc-new-desc").value.trim();
    if (!id || !name) { this.status(t("mc.need_id_name"), "error"); return; }
    const json = { id, name };
    if (description) json.description = description;
    try {
      const body = await this.op("POST", "/api/characters", { json });
      this.created(body);
      $("mc-new").reset();
    } catch (e) { this.status(e.message, "error"); }
  }

  async upload(file) {
    const id = $("mc-card-id").value.trim();
    const query = new URLSearchParams();
    if (id) query.set("id", id);
    // The optional LLM pass over the card's long texts (the node's LLM).
    if ($("mc-enrich").checked) query.set("enrich", "true");
    const url = "/api/characters" + (query.toString() ? "?" + query : "");
    this.status(t("mc.uploading", { file: file.name }));
    try {
      const body = await this.op("POST", url, { body: file, type: cardType(file) });
      this.created(body);
      $("mc-card-id").value = "";
    } catch (e) {
      this.status(e.message, "error");
    } finally {
      $("mc-file").value = "";
    }
  }

  // The list first, so the new row is there when the result shows.
  async created(body) {
    this.minted.set(body.id, body.token);
    await this.refresh(true);
    this.showResult(t("mc.created", { name: body.name || body.id, id: body.id }), body.report, body.id, body.token);
    this.status("");
  }

  askDelete(c) {
    this.pendingDelete = c.id;
    $("mc-confirm-text").textContent = t("mc.delete_confirm", { id: c.id, name: c.name || c.id });
    $("mc-confirm").dataset.id = c.id;
    $("mc-confirm").hidden = false;
    $("mc-confirm-no").focus();
  }

  cancelDelete() {
    this.pendingDelete = null;
    $("mc-confirm").hidden = true;
  }

  async confirmDelete() {
    const id = this.pendingDelete;
    if (!id) return;
    this.cancelDelete();
    try {
      const body = await this.op("DELETE", "/api/characters/" + encodeURIComponent(id));
      this.minted.delete(id);
      this.page.dropToken(id);
      if ($("mc-result").dataset.id === id) { $("mc-result").hidden = true; $("mc-result").replaceChildren(); }
      await this.refresh(true);
      if (body.backup) {
        const [before, after] = t("mc.deleted", { id, backup: "\u0000" }).split("\u0000");
        $("op-status").replaceChildren(before, el("code", { id: "mc-backup" }, body.backup), after || "");
        $("op-status").className = "hint deleted";
      } else this.status(t("mc.deleted_nobackup", { id }));
    } catch (e) { this.status(e.message, "error"); }
  }

  // ------------------------------------------------------------ memories

  // The chat view opened another character (or none): the list is stale.
  characterChanged(id) {
    if (this.mem.character === id) return;
    this.mem = { page: 1, total: 0, query: "", kind: "", character: id, stale: true };
    $("mem-character").textContent = id || "";
    $("mem-query").value = "";
    $("mem-kind").value = "";
    $("mem-list").replaceChildren();
    $("mem-pager").hidden = true;
    say($("mem-status"), id ? "" : t("mem.none_open"));
    if (this.visible()) this.loadNotes(1);
  }

  visible() { return $("main").dataset.tab === "memories"; }

  // The panel was shown.
  shown() { if (this.mem.stale) this.loadNotes(this.mem.page); }

  memToken() {
    const id = this.mem.character;
    return id ? this.page.tokenOf(id) : null;
  }

  notesUrl(id, rest) { return "/api/characters/" + encodeURIComponent(id) + "/" + rest; }

  async loadNotes(pageNo) {
    const id = this.mem.character;
    const token = this.memToken();
    if (!id || !token) { say($("mem-status"), t("mem.none_open")); return; }
    const q = new URLSearchParams({ query: this.mem.query, kind: this.mem.kind, page: String(Math.max(1, pageNo)), per_page: String(PER_PAGE) });
    say($("mem-status"), t("mem.loading"));
    try {
      const body = await call("GET", this.notesUrl(id, "notes?" + q), token);
      if (id !== this.mem.character) return;
      const items = body.items || [];
      // A deletion emptied the last page: show the one before.
      if (!items.length && body.total > 0 && body.page > 1) return this.loadNotes(body.page - 1);
      this.mem.page = body.page || pageNo;
      this.mem.total = body.total || 0;
      this.mem.perPage = body.per_page || PER_PAGE;
      this.mem.stale = false;
      $("mem-list").replaceChildren(...items.map((n) => this.noteRow(n)));
      const from = items.length ? (this.mem.page - 1) * this.mem.perPage + 1 : 0;
      $("mem-range").textContent = t("mem.range", { from, to: from ? from + items.length - 1 : 0, total: this.mem.total });
      $("mem-prev").disabled = this.mem.page <= 1;
      $("mem-next").disabled = this.mem.page * this.mem.perPage >= this.mem.total;
      $("mem-pager").hidden = this.mem.total === 0;
      say($("mem-status"), items.length ? "" : t("mem.empty"));
    } catch (e) {
      if (id !== this.mem.character) return;
      $("mem-list").replaceChildren();
      $("mem-pager").hidden = true;
      say($("mem-status"), e.status === 404 && e.code === "not_found" ? t("mem.not_supported") + " " + e.message : t("mem.failed", { message: e.message }), "error");
    }
  }

  noteRow(n) {
    const tags = Array.isArray(n.tags) ? n.tags : [];
    const json = el("pre", { className: "note-json", hidden: true });
    const jsonButton = el("button", { type: "button", className: "link note-show", "aria-expanded": "false" }, t("mem.json"));
    jsonButton.addEventListener("click", () => this.toggleJson(n.id, json, jsonButton));
    const confirm = el("div", { className: "confirm small-confirm", role: "alertdialog", hidden: true },
      el("p", {}, t("mem.delete_confirm", { id: n.id, links: n.links ?? 0 })),
      el("div", { className: "fields" },
        el("button", { type: "button", className: "danger note-delete-yes", onclick: () => this.deleteNote(n.id, li) }, t("mem.delete_yes")),
        el("button", { type: "button", className: "note-delete-no", onclick: () => { confirm.hidden = true; } }, t("mc.cancel"))));
    const li = el("li", { className: "note", dataset: { id: n.id, kind: n.kind || "" } },
      el("div", { className: "note-head" },
        el("span", { className: "chip kind " + (n.kind || "") }, kindLabel(n.kind)),
        el("code", { className: "note-id" }, n.id),
        n.core ? el("span", { className: "chip core" }, t("mem.core")) : null,
        el("span", { className: "note-meta" }, t("mem.links", { count: n.links ?? 0 }),
          n.retrieval_count ? " · " + t("mem.recalled", { count: n.retrieval_count }) : "")),
      el("div", { className: "note-text" }, n.text || ""),
      tags.length ? el("div", { className: "note-tags" }, tags.map((g) => el("span", { className: "chip tag" }, short(tagText(g), 30)))) : null,
      el("div", { className: "note-actions" }, jsonButton,
        el("button", { type: "button", className: "link danger-link note-delete", onclick: () => { confirm.hidden = false; confirm.querySelector(".note-delete-no").focus(); } }, t("mem.delete"))),
      confirm, json);
    return li;
  }

  async toggleJson(noteId, pre, button) {
    if (!pre.hidden) {
      pre.hidden = true;
      button.textContent = t("mem.json");
      button.setAttribute("aria-expanded", "false");
      return;
    }
    try {
      const note = await call("GET", this.notesUrl(this.mem.character, "notes/" + encodeURIComponent(noteId)), this.memToken());
      pre.textContent = JSON.stringify(note, null, 2);
      pre.hidden = false;
      button.textContent = t("mem.json_hide");
      button.setAttribute("aria-expanded", "true");
    } catch (e) { say($("mem-status"), e.message, "error"); }
  }

  async deleteNote(noteId, li) {
    try {
      const body = await call("DELETE", this.notesUrl(this.mem.character, "notes/" + encodeURIComponent(noteId)), this.memToken());
      li.remove();
      await this.loadNotes(this.mem.page);
      say($("mem-status"), t("mem.deleted", { id: body.id || noteId, links: body.links_removed ?? 0 }), "ok");
    } catch (e) { say($("mem-status"), e.message, "error"); }
  }

  async exportAs(format) {
    const id = this.mem.character;
    const token = this.memToken();
    if (!id || !token) { say($("mem-status"), t("mem.none_open")); return; }
    try {
      const data = await call("GET", this.notesUrl(id, "export?format=" + format), token);
      const file = `${safeFile(id)}.${format === "card" ? "card_v2" : "world_info"}.json`;
      download(data, file);
      say($("mem-status"), t("mem.exported", { file }), "ok");
    } catch (e) { say($("mem-status"), e.message, "error"); }
  }
}
