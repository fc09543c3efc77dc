// The SoulMem chat page (ES module, no build step). Joins character:<id>
// over the Phoenix channel socket (phoenix.js from npm, global `Phoenix`),
// chats with the character (push `chat`, streamed `reply_delta` /
// `reply_done` / `reply_error`), shows per turn why each memory was recalled
// (channels, one normalised score bar, association path, 👍/👎 feedback) and
// the recalled notes' neighbourhood as a graph (graph.js, cytoscape). Tokens
// ({character, token} pairs) live in localStorage; a wrong or revoked token is
// explained and the socket stops reconnecting. Strings: i18n.js.
import { t, apply } from "/assets/i18n.js";
import { MemoryGraph } from "/assets/graph.js";
import { el, short, mask } from "/assets/dom.js";
import { Manage } from "/assets/manage.js";

const $ = (id) => document.getElementById(id);
const STORE_KEY = "soulmem.characters";
const CURRENT_KEY = "soulmem.current";
const CHAT_TIMEOUT_MS = 60000;
const TURN_TIMEOUT_MS = 180000;
const narrow = window.matchMedia("(max-width: 760px)");

const state = {
  saved: [],            // [{character, token}]
  current: null,        // character id
  socket: null,
  channel: null,
  connectId: 0,         // bumps on every connect(): late callbacks of an old socket are ignored
  joined: false,
  turns: new Map(),     // turn -> {turn, text, recall, userEl, replyEl, replyText, graph}
  order: [],            // turn numbers, oldest first
  selected: null,
  notes: new Map(),     // note id -> content (for readable paths)
  localTurn: 0,         // turn numbers for the `turn` fallback
  labels: new Map(),    // fallback turn key -> its number
  chatSupported: true,
  tab: "chat"
};

const params = new URLSearchParams(location.search);
let pendingSay = params.get("say");
const graph = new MemoryGraph($("graph-canvas"), $("graph-detail"));

// A server error reply ({reason, error: {code, message}}) in words.
function errorText(resp) {
  const e = resp && resp.error;
  if (!e) return t("error.generic");
  const key = "error." + e.code;
  const label = t(key) !== key ? t(key) : e.message;
  return `${label}（${e.code}）`;
}

function errorCode(resp) { return resp && resp.error && resp.error.code; }

function status(key, kind, vars) {
  const s = $("status");
  s.textContent = t(key, vars);
  s.className = "status " + (kind || "");
  s.dataset.state = kind || "idle";
}

// ---------------------------------------------------------------- tokens

function loadSaved() {
  try {
    const list = JSON.parse(localStorage.getItem(STORE_KEY) || "[]");
    state.saved = Array.isArray(list) ? list.filter((p) => p && typeof p.character === "string" && typeof p.token === "string") : [];
  } catch (_) { state.saved = []; }
  state.current = localStorage.getItem(CURRENT_KEY);
}

function persist() {
  localStorage.setItem(STORE_KEY, JSON.stringify(state.saved));
  if (state.current) localStorage.setItem(CURRENT_KEY, state.current);
  else localStorage.removeItem(CURRENT_KEY);
}

// A token opens one character: entering a new token for a character replaces its old one.
function remember(character, token) {
  const i = state.saved.findIndex((p) => p.character === character);
  if (i >= 0) state.saved[i] = { character, token };
  else state.saved.push({ character, token });
  state.current = character;
  persist();
  renderCharacters();
}

function forget(character) {
  state.saved = state.saved.filter((p) => p.character !== character);
  if (state.current === character) state.current = state.saved.length ? state.saved[0].character : null;
  persist();
  renderCharacters();
  if (state.current) connect(state.current);
  else { disconnect(); manage.characterChanged(null); showAuth("missing", "demo"); }
}

function tokenOf(character) {
  const p = state.saved.find((s) => s.character === character);
  return p ? p.token : null;
}

function renderCharacters() {
  const sw = $("switcher");
  sw.replaceChildren(...(state.saved.length
    ? state.saved.map((p) => el("option", { value: p.character, selected: p.character === state.current }, p.character))
    : [el("option", { value: "" }, t("switcher.none"))]));
  sw.disabled = !state.saved.length;

  $("char-list").replaceChildren(...state.saved.map((p) => el("li", { className: "char" + (p.character === state.current ? " current" : ""), dataset: { character: p.character } },
    el("span", { className: "char-name" }, p.character),
    el("code", { className: "char-token" }, mask(p.token)),
    p.character === state.current
      ? el("span", { className: "chip" }, t("chars.current"))
      : el("button", { type: "button", className: "char-switch", onclick: () => { state.current = p.character; persist(); renderCharacters(); connect(p.character); setTab("chat"); } }, t("chars.switch")),
    el("button", { type: "button", className: "char-remove link", onclick: () => forget(p.character) }, t("chars.remove")))));
  $("char-empty").hidden = state.saved.length > 0;
}

// ---------------------------------------------------------------- auth problems

// kind: missing | unauthorized | forbidden | revoked | origin | unreachable
function showAuth(kind, character) {
  const box = $("auth");
  const token = tokenOf(character);
  $("auth-text").textContent = t("auth." + kind, { character: character || "", masked: mask(token) });
  box.dataset.kind = kind;
  box.hidden = false;
  $("auth-character").value = character || "";
  $("auth-token").value = "";
  enable(false);
  if (kind !== "unreachable") status("status.auth", "error");
  setTab("chat");
}

function hideAuth() { $("auth").hidden = true; }

// The WebSocket upgrade refuses an unknown token with 403 before any frame,
// which a browser cannot read: ask the HTTP API's token check (GET
// /api/characters/:id/token: 200, 401 or 403; it starts nothing).
async function probe(character, token) {
  try {
    const res = await fetch("/api/characters/" + encodeURIComponent(character) + "/token", {
      headers: { Authorization: "Bearer " + token }
    });
    if (res.status === 401) return "unauthorized";
    if (res.status === 403) return "forbidden";
    return "ok";
  } catch (_) {
    return "unreachable";
  }
}

// ---------------------------------------------------------------- connection

function disconnect() {
  state.connectId++;
  state.joined = false;
  if (state.socket) {
    const s = state.socket;
    state.socket = null;
    state.channel = null;
    s.disconnect();
  }
  enable(false);
}

function connect(character) {
  disconnect();
  const id = state.connectId;
  const token = tokenOf(character);
  resetConversation();
  manage.characterChanged(token ? character : null);
  if (!token) { showAuth("missing", character || "demo"); return; }
  hideAuth();
  state.current = character;
  persist();
  renderCharacters();

  let probing = false;
  let historyLoaded = false;
  const socket = new Phoenix.Socket("/socket", {
    params: { token },
    // Network trouble: back off; an auth failure stops it (disconnect()).
    reconnectAfterMs: (tries) => [1000, 2000, 5000][tries - 1] || 10000,
    // A character that is still loading: retry the join after a few seconds.
    rejoinAfterMs: (tries) => [3000, 3000, 5000][tries - 1] || 10000
  });
  state.socket = socket;
  socket.onError(async () => {
    if (id !== state.connectId || probing || state.joined) return;
    probing = true;
    const verdict = await probe(character, token);
    probing = false;
    if (id !== state.connectId) return;
    if (verdict === "unauthorized" || verdict === "forbidden") {
      disconnect();
      showAuth(verdict, character);
    } else if (verdict === "unreachable") {
      status("status.offline", "error");
    } else {
      status("status.error", "error");
    }
  });
  socket.onClose(() => {
    if (id !== state.connectId) return;
    if (state.joined) { state.joined = false; enable(false); status("status.offline", "error"); }
  });
  socket.connect();

  const channel = socket.channel("character:" + character, { token });
  state.channel = channel;
  channel.on("reply_delta", (p) => onReplyDelta(p));
  channel.on("reply_done", (p) => onReplyDone(p));
  channel.on("reply_error", (p) => onReplyError(p));
  channel.on("summary_updated", (p) => showSummary(p.summary));
  channel.on("consolidated", () => logSystem(t("chat.consolidated")));
  // The server closes the channel when its token is revoked.
  channel.onClose(() => {
    if (id !== state.connectId) return;
    disconnect();
    showAuth("revoked", character);
  });
  status("status.joining", "", { character });
  channel.join()
    .receive("ok", () => {
      if (id !== state.connectId) return;
      state.joined = true;
      hideAuth();
      status("status.joined", "joined", { character });
      enable(true);
      const after = () => {
        if (pendingSay) { const s = pendingSay; pendingSay = null; send(s); }
      };
      if (!historyLoaded) { historyLoaded = true; loadHistory(channel, id).then(after); } else after();
    })
    .receive("error", (resp) => {
      if (id !== state.connectId) return;
      const code = errorCode(resp) || (resp && resp.reason);
      if (code === "unauthorized" || code === "forbidden") {
        disconnect();
        showAuth(code, character);
      } else if (code === "loading") {
        status("status.loading", "loading", { character });
      } else if (code === "not_running") {
        status("status.not_running", "loading", { character });
      } else {
        status("status.error", "error");
        logSystem(errorText(resp));
      }
    })
    .receive("timeout", () => { if (id === state.connectId) status("status.offline", "error"); });
}

function enable(on) {
  $("text").disabled = !on;
  $("send").disabled = !on;
}

// ---------------------------------------------------------------- conversation

function resetConversation() {
  $("log").replaceChildren();
  $("recalls").replaceChildren();
  state.turns.clear();
  state.order = [];
  state.selected = null;
  state.notes.clear();
  showSummary("");
  updateEmpty();
  $("graph-status").textContent = t("graph.empty");
}

function updateEmpty() {
  $("log-empty").hidden = $("log").children.length > 0;
  $("why-empty").hidden = state.order.length > 0;
}

function showSummary(summary) {
  $("summary").textContent = summary || "";
  $("summary-box").hidden = !summary;
}

function scrollLog() {
  const log = $("log");
  log.scrollTop = log.scrollHeight;
}

function logLine(role, text, extra) {
  const li = el("li", { className: "msg " + role }, el("div", { className: "bubble" }, text), extra || null);
  $("log").append(li);
  updateEmpty();
  scrollLog();
  return li;
}

function logSystem(text, kind) {
  return logLine("system" + (kind ? " " + kind : ""), text);
}

async function loadHistory(channel, id) {
  const r = await pushAsync(channel, "history", {}, 15000);
  if (id !== state.connectId) return;
  if (r.status !== "ok") {
    if (errorCode(r.response) !== "unknown_event") logSystem(t("chat.history_failed", { message: errorText(r.response) }), "error");
    return;
  }
  const messages = (r.response && r.response.messages) || [];
  // History comes before anything said in this page load.
  const first = $("log").firstChild;
  messages.forEach((m) => {
    const li = el("li", { className: "msg restored " + (m.role === "assistant" ? "assistant" : "user") },
      el("div", { className: "bubble" }, m.text || ""));
    $("log").insertBefore(li, first);
  });
  if (messages.length) {
    const note = el("li", { className: "msg system restored-note" }, el("div", { className: "bubble" }, t("chat.restored", { count: messages.length })));
    $("log").insertBefore(note, first);
  }
  showSummary(r.response.summary || "");
  updateEmpty();
  scrollLog();
}

function pushAsync(channel, event, payload, timeout) {
  return new Promise((resolve) => {
    if (!channel) { resolve({ status: "error", response: { error: { code: "network", message: "" } } }); return; }
    channel.push(event, payload, timeout)
      .receive("ok", (response) => resolve({ status: "ok", response }))
      .receive("error", (response) => resolve({ status: "error", response }))
      .receive("timeout", () => resolve({ status: "timeout", response: null }));
  });
}

function onSay(event) {
  event.preventDefault();
  const text = $("text").value.trim();
  if (!text || !state.channel || !state.joined) return;
  $("text").value = "";
  send(text);
}

async function send(text) {
  const channel = state.channel;
  const userEl = logLine("user", text);
  const pending = el("div", { className: "turn-note" }, t("chat.thinking"));
  userEl.append(pending);
  if (!state.chatSupported) return sendTurn(channel, text, userEl, pending);
  const r = await pushAsync(channel, "chat", { text }, CHAT_TIMEOUT_MS);
  if (r.status === "ok") {
    pending.remove();
    startTurn(r.response.turn, text, r.response.recall || {}, userEl);
  } else if (r.status === "error" && errorCode(r.response) === "unknown_event") {
    state.chatSupported = false;
    logSystem(t("chat.no_reply_feature"));
    sendTurn(channel, text, userEl, pending);
  } else {
    pending.remove();
    userEl.classList.add("failed");
    userEl.append(el("div", { className: "turn-note error" },
      r.status === "timeout" ? t("chat.timeout") : t("chat.send_failed", { message: errorText(r.response) })));
    if (!$("text").value) $("text").value = text;
  }
}

// The older server without `chat`: one `turn` push, the reply at once.
async function sendTurn(channel, text, userEl, pending) {
  const r = await pushAsync(channel, "turn", { text }, TURN_TIMEOUT_MS);
  pending.remove();
  if (r.status !== "ok") {
    userEl.classList.add("failed");
    userEl.append(el("div", { className: "turn-note error" }, r.status === "timeout" ? t("chat.timeout") : t("chat.send_failed", { message: errorText(r.response) })));
    return;
  }
  const turn = "local-" + (++state.localTurn);
  state.labels.set(turn, state.localTurn);
  const { reply, llm_error: llmError, ...recall } = r.response;
  startTurn(turn, text, recall, userEl);
  if (reply) onReplyDone({ turn, text: reply });
  else onReplyError({ turn, error: llmError || { code: "llm_not_configured", message: "" } });
}

function startTurn(turn, text, recall, userEl) {
  const rec = { turn, text, recall, userEl, replyEl: null, replyText: "", graph: null, done: false };
  state.turns.set(String(turn), rec);
  state.order.push(String(turn));
  userEl.dataset.turn = String(turn);
  remember_notes(recall);
  const count = (recall.memories || []).length + (recall.actions || []).length;
  userEl.append(el("button", { type: "button", className: "why-link link", onclick: () => { selectTurn(turn); setTab("why"); } },
    t("chat.why_button", { count })));
  ensureReply(rec);
  renderRecall(rec);
  selectTurn(turn);
  if (recall.summary) showSummary(recall.summary);
}

function turnRec(turn, create) {
  let rec = state.turns.get(String(turn));
  if (!rec && create) {
    // A reply for a turn this page did not start (another tab): show it all the same.
    rec = { turn, text: "", recall: null, userEl: null, replyEl: null, replyText: "", graph: null, done: false };
    state.turns.set(String(turn), rec);
  }
  return rec;
}

function ensureReply(rec) {
  if (!rec.replyEl) {
    rec.replyEl = logLine("assistant streaming", "");
    rec.replyEl.dataset.turn = String(rec.turn);
    rec.replyEl.querySelector(".bubble").dataset.placeholder = t("chat.typing");
  }
  return rec.replyEl;
}

function setReplyText(rec, text) {
  const bubble = ensureReply(rec).querySelector(".bubble");
  bubble.textContent = text;
  scrollLog();
}

function onReplyDelta(p) {
  const rec = turnRec(p.turn, true);
  if (rec.done) return;
  rec.replyText += p.text || "";
  setReplyText(rec, rec.replyText);
}

function onReplyDone(p) {
  const rec = turnRec(p.turn, true);
  rec.done = true;
  rec.replyText = typeof p.text === "string" ? p.text : rec.replyText;
  setReplyText(rec, rec.replyText);
  rec.replyEl.classList.remove("streaming");
  rec.replyEl.classList.add("done");
}

function onReplyError(p) {
  const rec = turnRec(p.turn, true);
  rec.done = true;
  const li = ensureReply(rec);
  li.classList.remove("streaming");
  li.classList.add("reply-error");
  const e = (p && p.error) || {};
  const notConfigured = /not_configured|no_llm|llm_disabled/.test(String(e.code || ""));
  const box = el("div", { className: "llm-error" },
    el("strong", {}, notConfigured ? t("llm.not_configured.title") : t("llm.failed.title")),
    el("p", {}, notConfigured ? t("llm.not_configured.body") : t("llm.failed.body")),
    e.code ? el("p", { className: "small code" }, `${e.code}${e.message ? ": " + e.message : ""}`) : null);
  if (rec.replyText) li.querySelector(".bubble").append(el("div", { className: "turn-note" }, t("chat.reply_interrupted")));
  else li.querySelector(".bubble").remove();
  li.append(box);
  scrollLog();
}

// ---------------------------------------------------------------- why panel

function remember_notes(recall) {
  ["memories", "actions", "core"].forEach((k) => (recall[k] || []).forEach((m) => {
    if (m && m.id && m.content) state.notes.set(m.id, m.content);
  }));
}

function turnLabel(turn) { return state.labels.get(turn) || turn; }

function noteLabel(id) {
  const c = state.notes.get(id);
  return c ? short(c, 14) : id;
}

function renderPath(ids) {
  const parts = [];
  ids.forEach((id, i) => {
    if (i) parts.push(el("span", { className: "arrow" }, " → "));
    parts.push(el("span", { className: "hop", title: id, dataset: { id } }, noteLabel(id)));
  });
  return parts;
}

function renderRecall(rec) {
  const r = rec.recall || {};
  const items = [...(r.memories || []), ...(r.actions || []).map((a) => Object.assign({ stage: "Action" }, a))];
  const max = items.reduce((m, x) => (typeof x.score === "number" && x.score > m ? x.score : m), 0);
  const rows = items.map((m) => {
    const score = typeof m.score === "number" ? m.score : 0;
    const pct = max > 0 ? Math.max(2, Math.round((Math.max(0, score) / max) * 100)) : 0;
    const channels = Array.isArray(m.channels) ? m.channels : [];
    const path = Array.isArray(m.path) && m.path.length > 1 ? m.path : null;
    const seedIds = Array.isArray(m.seeds) ? m.seeds.filter((id) => id !== m.id) : [];
    const seeds = !path && seedIds.length ? seedIds : null;
    const fbStatus = el("span", { className: "fb-status" });
    const fb = (value) => el("button", {
      type: "button", className: "fb " + (value > 0 ? "fb-up" : "fb-down"), title: t(value > 0 ? "why.like" : "why.dislike"),
      onclick: (e) => feedback(m.id, value, e.currentTarget, fbStatus)
    }, (value > 0 ? "👍 " : "👎 ") + t(value > 0 ? "why.like" : "why.dislike"));
    return el("li", { className: "mem", dataset: { id: m.id || "", stage: m.stage || "" } },
      el("div", { className: "mem-head" },
        el("span", { className: "chip stage " + (m.stage || "") }, t("stage." + (m.stage || "Similarity"))),
        channels.map((c) => el("span", { className: "chip channel " + c }, t("channel." + c))),
        m.core ? el("span", { className: "chip core" }, t("why.core")) : null,
        el("code", { className: "mem-id" }, m.id || "")),
      el("div", { className: "mem-content" }, m.content || ""),
      el("div", { className: "bar-row", title: t("why.legend") },
        el("div", { className: "bar" }, el("span", { style: `width:${pct}%` })),
        el("span", { className: "score" }, typeof m.score === "number" ? m.score.toFixed(3) : "—")),
      path ? el("div", { className: "path" }, el("span", { className: "path-label" }, t("why.path") + "："), renderPath(path)) : null,
      seeds ? el("div", { className: "path" }, el("span", { className: "path-label" }, t("why.seeds") + "："), renderPath(seeds)) : null,
      m.forgetting && m.forgetting.band ? el("div", { className: "hint small" }, t("why.forgetting", { band: m.forgetting.band })) : null,
      el("div", { className: "fb-row" }, fb(1), fb(-1), fbStatus));
  });
  const core = r.core || [];
  const emb = r.embedding && t("why.embedding." + r.embedding) !== "why.embedding." + r.embedding ? t("why.embedding." + r.embedding) : "";
  const card = el("article", { className: "recall", dataset: { turn: String(rec.turn) } },
    el("header", { className: "recall-head", onclick: () => selectTurn(rec.turn) },
      el("div", { className: "query" }, t("why.turn", { turn: turnLabel(rec.turn), text: short(rec.text, 40) })),
      el("div", { className: "hint small" }, t("why.counts", { memories: (r.memories || []).length, actions: (r.actions || []).length }), emb ? " · " + emb : "")),
    el("ol", { className: "mems" }, rows),
    core.length ? el("details", { className: "core-list" }, el("summary", {}, t("why.core_list", { count: core.length })),
      el("ul", {}, core.map((c) => el("li", {}, el("code", {}, c.id || ""), " ", c.content || "")))) : null,
    r.context ? el("details", {}, el("summary", {}, t("why.context")), el("pre", {}, r.context)) : null,
    el("button", { type: "button", className: "link show-graph", onclick: () => { selectTurn(rec.turn); setTab("graph"); } }, t("why.show_graph")));
  $("recalls").prepend(card);
  updateEmpty();
}

async function feedback(noteId, value, button, statusEl) {
  const row = button.closest(".fb-row");
  row.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  const r = await pushAsync(state.channel, "feedback", { note_id: noteId, value }, 10000);
  row.querySelectorAll("button").forEach((b) => { b.disabled = false; b.classList.remove("on"); });
  if (r.status === "ok") {
    button.classList.add("on");
    statusEl.textContent = t("why.feedback_ok");
    statusEl.className = "fb-status ok";
  } else {
    statusEl.textContent = t("why.feedback_failed", { message: errorText(r.response) });
    statusEl.className = "fb-status error";
  }
}

function selectTurn(turn) {
  state.selected = String(turn);
  document.querySelectorAll("#recalls .recall").forEach((c) => c.classList.toggle("selected", c.dataset.turn === String(turn)));
  loadGraph(state.turns.get(String(turn)));
}

// ---------------------------------------------------------------- graph

function recalledMap(recall) {
  const map = new Map();
  [...(recall.memories || []), ...(recall.actions || []).map((a) => Object.assign({ stage: "Action" }, a))]
    .forEach((m) => { if (m.id) map.set(m.id, { stage: m.stage, score: m.score }); });
  return map;
}

// Without the server's `graph` event: the recalled notes and their association paths.
function pathGraph(recall) {
  const nodes = new Map();
  const links = [];
  const add = (id, extra) => { if (!nodes.has(id)) nodes.set(id, Object.assign({ id, kind: "", content: state.notes.get(id) || id, core: false }, extra || {})); };
  [...(recall.memories || []), ...(recall.actions || [])].forEach((m) => {
    add(m.id, { kind: m.kind || "", content: m.content || m.id, core: !!m.core });
    const path = Array.isArray(m.path) ? m.path : [];
    path.forEach((id) => add(id));
    for (let i = 1; i < path.length; i++) links.push({ from: path[i - 1], to: path[i], kind: "path", intensity: 0.5 });
  });
  return { nodes: [...nodes.values()], links };
}

async function loadGraph(rec) {
  if (!rec || !rec.recall) return;
  const recall = rec.recall;
  const recalled = recalledMap(recall);
  const key = state.connectId + ":" + rec.turn;
  if (!recalled.size) { $("graph-status").textContent = t("graph.empty"); return; }
  if (!rec.graph) {
    $("graph-status").textContent = t("graph.loading");
    const r = await pushAsync(state.channel, "graph", { ids: [...recalled.keys()], hops: 1 }, 15000);
    if (r.status === "ok" && r.response && Array.isArray(r.response.nodes)) {
      rec.graph = { nodes: r.response.nodes, links: r.response.links || [], fallback: false };
      r.response.nodes.forEach((n) => { if (n.id && n.content && !state.notes.has(n.id)) state.notes.set(n.id, n.content); });
    } else if (r.status === "error" && errorCode(r.response) === "unknown_event") {
      rec.graph = Object.assign(pathGraph(recall), { fallback: true });
    } else {
      $("graph-status").textContent = t("graph.failed", { message: r.status === "timeout" ? t("error.timeout") : errorText(r.response) });
      return;
    }
  }
  if (state.selected !== String(rec.turn)) return;
  $("graph-status").textContent = t("graph.turn", { turn: turnLabel(rec.turn) }) + (rec.graph.fallback ? " — " + t("graph.fallback") : "");
  graph.show(rec.graph, recalled, key);
}

// ---------------------------------------------------------------- tabs

function setTab(name) {
  if (!narrow.matches && name === "chat") name = state.tab !== "chat" ? state.tab : "why";
  state.tab = name;
  $("main").dataset.tab = name;
  document.querySelectorAll("#tabs [data-tab]").forEach((b) => {
    const on = b.dataset.tab === name;
    b.classList.toggle("active", on);
    b.setAttribute("aria-selected", on ? "true" : "false");
  });
  if (name === "graph") requestAnimationFrame(() => graph.resize());
  if (name === "memories") manage.shown();
}

// ---------------------------------------------------------------- management (manage.js)

// What the operator view and the memories panel may do with the chat view.
const manage = new Manage({
  current: () => state.current,
  tokenOf,
  // Opens a character in the chat view (a token given is remembered, as if typed in).
  open: (id, token) => {
    if (token && token !== tokenOf(id)) remember(id, token);
    else if (id === state.current && state.joined) { setTab("chat"); return; }
    connect(id);
    setTab("chat");
  },
  // No token for it here: its id goes into the chat view's fields, the token is asked for.
  fill: (id) => {
    $("character").value = id;
    $("auth-character").value = id;
    $("char-status").textContent = t("mc.need_token", { id });
    setTab("characters");
    $("token").focus();
  },
  // A deleted character's tokens no longer open it: forgotten, without switching.
  dropToken: (id) => {
    if (!tokenOf(id)) return;
    state.saved = state.saved.filter((p) => p.character !== id);
    persist();
    renderCharacters();
  }
});

// ---------------------------------------------------------------- start

function onConnectForm(characterInput, tokenInput, statusEl) {
  return (event) => {
    event.preventDefault();
    const character = characterInput.value.trim();
    const token = tokenInput.value.trim();
    if (!character || !token) {
      if (statusEl) statusEl.textContent = t("chars.need_both");
      else $("auth-text").textContent = t("chars.need_both");
      return;
    }
    if (statusEl) statusEl.textContent = "";
    tokenInput.value = "";
    remember(character, token);
    connect(character);
    setTab("chat");
  };
}

function start() {
  apply();
  status("status.idle");
  loadSaved();
  // ?token=…&character=… (and ?say=…) from a link: remembered, then taken out of the address bar.
  const pToken = params.get("token");
  const pCharacter = params.get("character") || (pToken ? "demo" : null);
  if (pToken) remember(pCharacter, pToken);
  else if (pCharacter && tokenOf(pCharacter)) state.current = pCharacter;
  if (params.has("token") || params.has("say") || params.has("character")) {
    history.replaceState(null, "", location.pathname);
  }
  if (!state.current && state.saved.length) state.current = state.saved[0].character;
  renderCharacters();

  $("say").addEventListener("submit", onSay);
  $("connect").addEventListener("submit", onConnectForm($("character"), $("token"), $("char-status")));
  $("auth-form").addEventListener("submit", onConnectForm($("auth-character"), $("auth-token"), null));
  $("switcher").addEventListener("change", (e) => { if (e.target.value) connect(e.target.value); });
  manage.start();
  document.querySelectorAll("#tabs [data-tab]").forEach((b) => b.addEventListener("click", () => setTab(b.dataset.tab)));
  narrow.addEventListener("change", () => setTab(state.tab));
  window.addEventListener("resize", () => { if (state.tab === "graph") graph.resize(); });

  setTab(narrow.matches ? "chat" : "why");
  if (state.current) connect(state.current);
  else { resetConversation(); showAuth("missing", pCharacter || "demo"); }
}

start();
// For the headless test (test/node/page.js): the graph's cytoscape instance.
window.soulPage = { cy: () => graph.cy };
