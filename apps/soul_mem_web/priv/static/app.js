// The SoulMem chat page: joins character:<id> over the Phoenix channel
// socket (phoenix.js from the npm package, global `Phoenix`), pushes each
// line as a `message` and then asks `recall`, and shows why every memory was
// recalled (stage, score, seeds) next to the rendered context.
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
  let socket = null;
  let channel = null;
  // ?say=… joins and sends one line at once (used by the headless check).
  const params = new URLSearchParams(location.search);
  let pendingSay = params.get("say");

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => { node[k] = v; });
    children.flat().forEach((c) => node.append(c instanceof Node ? c : document.createTextNode(String(c))));
    return node;
  }

  function status(text, kind) {
    const s = $("status");
    s.textContent = text;
    s.className = "status " + (kind || "");
  }

  function log(role, text) {
    const item = el("li", { className: role }, text);
    $("log").append(item);
    item.scrollIntoView({ block: "end" });
  }

  function errorText(resp) {
    const e = resp && resp.error;
    return e ? `${e.code}: ${e.message}` : JSON.stringify(resp);
  }

  function showRecall(query, r) {
    const rows = (items, kind) => items.map((m) => el("tr", {},
      el("td", {}, el("span", { className: "stage " + m.stage }, m.stage || kind)),
      el("td", { className: "score" }, typeof m.score === "number" ? m.score.toFixed(3) : ""),
      el("td", {}, el("code", {}, m.id), " ", m.content || ""),
      el("td", {}, (m.path && m.path.length ? m.path.join(" → ") : (m.seeds || []).join(", ")) || "—",
        m.channels && m.channels.length ? el("small", {}, " (" + m.channels.join("+") + ")") : "")));

    const table = el("table", {},
      el("thead", {}, el("tr", {}, el("th", {}, "stage"), el("th", {}, "score"), el("th", {}, "memory"), el("th", {}, "seeds"))),
      el("tbody", {}, rows(r.memories || [], "memory"), rows(r.actions || [], "Action")));

    const box = el("div", { className: "recall" },
      el("div", { className: "query" }, "“" + query + "” — " + (r.memories || []).length + " memories, " + (r.actions || []).length + " tendencies"),
      table,
      el("details", {}, el("summary", {}, "rendered context"), el("pre", {}, r.context || "")));
    $("recalls").prepend(box);
    if (r.summary) $("summary").textContent = r.summary;
  }

  function enable(on) {
    $("text").disabled = !on;
    $("send").disabled = !on;
  }

  function join(event) {
    if (event) event.preventDefault();
    if (socket) socket.disconnect();
    const character = $("character").value.trim();
    socket = new Phoenix.Socket("/socket", { params: { token: $("token").value } });
    socket.onError(() => status("connection error", "error"));
    socket.connect();
    channel = socket.channel("character:" + character, {});
    channel.on("summary_updated", (p) => { $("summary").textContent = p.summary; });
    channel.on("consolidated", () => log("system", "memories consolidated"));
    status("joining…");
    channel.join()
      .receive("ok", () => {
        status("joined " + character, "joined");
        enable(true);
        $("text").focus();
        if (pendingSay) { $("text").value = pendingSay; pendingSay = null; $("say").requestSubmit(); }
      })
      .receive("error", (resp) => { status("join refused", "error"); log("system", errorText(resp)); enable(false); socket.disconnect(); })
      .receive("timeout", () => status("join timed out", "error"));
  }

  function say(event) {
    event.preventDefault();
    const text = $("text").value.trim();
    const role = $("role").value;
    if (!text || !channel) return;
    $("text").value = "";
    log(role, text);
    channel.push("message", { role: role, text: text })
      .receive("ok", () => {
        channel.push("recall", { text: text })
          .receive("ok", (r) => showRecall(text, r))
          .receive("error", (resp) => log("system", errorText(resp)));
      })
      .receive("error", (resp) => log("system", errorText(resp)))
      .receive("timeout", () => log("system", "timeout"));
  }

  // The operator view: /api/operator with the operator token in the
  // Authorization header (never in a URL).
  async function operatorCall(method, path) {
    const res = await fetch("/api/operator/" + path, {
      method: method,
      headers: { Authorization: "Bearer " + $("op-token").value }
    });
    const body = await res.json();
    if (!res.ok) throw new Error(errorText(body));
    return body;
  }

  function opStatus(text, kind) {
    $("op-status").textContent = text;
    $("op-status").className = "hint " + (kind || "");
  }

  async function listTokens(event) {
    if (event) event.preventDefault();
    try {
      const body = await operatorCall("GET", "tokens");
      const rows = body.characters.map((c) => el("tr", { className: "op-row" },
        el("td", {}, el("code", {}, c.id)),
        el("td", {}, String(c.tokens)),
        el("td", {}, el("button", { type: "button", className: "op-revoke", onclick: () => revoke(c.id) }, "revoke"))));
      $("op-table").tBodies[0].replaceChildren(...rows);
      opStatus(body.characters.length + " characters with tokens");
    } catch (e) { opStatus(e.message, "error"); }
  }

  async function revoke(id) {
    try {
      await operatorCall("DELETE", "tokens/" + encodeURIComponent(id));
      await listTokens();
      opStatus("revoked every token of " + id);
    } catch (e) { opStatus(e.message, "error"); }
  }

  async function createToken() {
    const id = $("op-new-id").value.trim();
    if (!id) return;
    try {
      const body = await operatorCall("POST", "tokens/" + encodeURIComponent(id));
      await listTokens();
      opStatus("new token for " + id + " (shown once): " + body.token);
    } catch (e) { opStatus(e.message, "error"); }
  }

  $("op-form").addEventListener("submit", listTokens);
  $("op-create").addEventListener("click", createToken);
  $("connect").addEventListener("submit", join);
  $("say").addEventListener("submit", say);

  if (params.get("token")) $("token").value = params.get("token");
  if (params.get("character")) $("character").value = params.get("character");
  join();
})();
