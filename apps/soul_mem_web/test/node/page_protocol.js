// The page against a stand-in of the chat protocol (no Elixir): a small
// Node server serves priv/static and the npm files, and answers the channel
// as the spec says — `chat` → {turn, recall}, then `reply_delta` pieces and
// `reply_done`; `history`; `graph`; `feedback`; a first join refused with
// `loading`. Checks in headless Chromium that the page retries the loading
// join, streams the reply piece by piece, shows the neighbours in the graph
// and restores the conversation after a reload. Self-contained:
//   node test/node/page_protocol.js   (SOUL_SCREENSHOT optional)
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const http = require("http");
const WebSocket = require("ws");
const { launch } = require("./page_lib");

const STATIC = path.join(__dirname, "../../priv/static");
const NODE_MODULES = path.join(__dirname, "../../node_modules");
const VENDOR = { "phoenix.js": "phoenix/priv/static/phoenix.js", "cytoscape.min.js": "cytoscape/dist/cytoscape.min.js" };
const TOKEN = "proto-token";
const REPLY = ["小白", "那次呀，", "我们吃到", "舌头都麻了嘛！"];
const shot = (process.env.SOUL_SCREENSHOT || path.join(os.tmpdir(), "soul_mem_page.png")).replace(/\.png$/, "_protocol.png");

function fail(message) {
  console.error("FAIL page_protocol: " + message);
  process.exit(1);
}
setTimeout(() => fail("timed out after 45 s"), 45000).unref();

const recall = {
  memories: [
    { id: "m_malatang", uuid: "u1", kind: "episodic", content: "和小白在老街吃麻辣烫，辣得直哭", score: 0.9, stage: "Both", seeds: ["m_xiaobai"], channels: ["dense", "association"], path: ["m_xiaobai", "m_malatang"], core: false },
    { id: "m_xiaobai", uuid: "u2", kind: "semantic", content: "小白是我最好的朋友", score: 0.6, stage: "Similarity", seeds: [], channels: ["dense", "lexical"], path: [], core: true }
  ],
  actions: [], core: [], window: [], summary: "", context: "…", embedding: "model"
};
const graphReply = {
  nodes: [
    { id: "m_malatang", kind: "episodic", content: "和小白在老街吃麻辣烫，辣得直哭", core: false },
    { id: "m_xiaobai", kind: "semantic", content: "小白是我最好的朋友", core: true },
    { id: "m_street", kind: "semantic", content: "学校东门外的老街", core: false }
  ],
  links: [
    { from: "m_xiaobai", to: "m_malatang", kind: "Sem", intensity: 0.8 },
    { from: "m_malatang", to: "m_street", kind: "Sem", intensity: 0.5 }
  ]
};

const stored = [];
let joins = 0;
let feedbacks = 0;

const server = http.createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  let file = null;
  if (url.pathname === "/") file = path.join(STATIC, "index.html");
  else if (url.pathname.startsWith("/assets/vendor/")) file = VENDOR[path.basename(url.pathname)] && path.join(NODE_MODULES, VENDOR[path.basename(url.pathname)]);
  else if (url.pathname.startsWith("/assets/")) {
    const name = path.basename(url.pathname);
    file = VENDOR[name] ? path.join(NODE_MODULES, VENDOR[name]) : path.join(STATIC, name);
  }
  if (!file || !fs.existsSync(file)) { res.writeHead(404, { "content-type": "application/json" }); res.end('{"error":{"code":"not_found","message":"not found"}}'); return; }
  const type = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css" }[path.extname(file)] || "application/octet-stream";
  res.writeHead(200, { "content-type": type + "; charset=utf-8" });
  fs.createReadStream(file).pipe(res);
});

const wss = new WebSocket.Server({ noServer: true });
server.on("upgrade", (req, sock, head) => {
  const url = new URL(req.url, "http://x");
  if (url.searchParams.get("token") !== TOKEN) { sock.end("HTTP/1.1 403 Forbidden\r\n\r\n"); return; }
  wss.handleUpgrade(req, sock, head, (ws) => wss.emit("connection", ws));
});

wss.on("connection", (ws) => {
  const send = (frame) => ws.send(JSON.stringify(frame));
  ws.on("message", (data) => {
    const [joinRef, ref, topic, event, payload] = JSON.parse(data);
    const reply = (status, response) => send([joinRef, ref, topic, "phx_reply", { status, response }]);
    const push = (ev, body) => send([joinRef, null, topic, ev, body]);
    if (topic === "phoenix") return reply("ok", {});
    switch (event) {
      case "phx_join":
        joins++;
        if (joins === 1) return reply("error", { reason: "loading", error: { code: "loading", message: "the character is still loading; retry shortly" } });
        return reply("ok", { character: "demo" });
      case "chat": {
        const turn = stored.length / 2 + 1;
        stored.push({ role: "user", text: payload.text, at: new Date().toISOString() });
        reply("ok", { turn, recall });
        let i = 0;
        const next = () => {
          if (i < REPLY.length) { push("reply_delta", { turn, text: REPLY[i++] }); setTimeout(next, 250); }
          else {
            stored.push({ role: "assistant", text: REPLY.join(""), at: new Date().toISOString() });
            push("reply_done", { turn, text: REPLY.join("") });
          }
        };
        setTimeout(next, 250);
        return;
      }
      case "history": return reply("ok", { messages: stored, summary: "" });
      case "graph": return reply("ok", graphReply);
      case "feedback": feedbacks++; return reply("ok", { ok: true });
      default: return reply("error", { reason: "unknown_event", error: { code: "unknown_event", message: "unknown event" } });
    }
  });
});

async function main() {
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${server.address().port}`;
  const browser = await launch();
  const errors = [];
  try {
    const page = await browser.newPage();
    page.on("pageerror", (e) => errors.push(e.message));
    await page.goto(`${base}/?token=${TOKEN}&character=demo`);
    // The first join says `loading`: shown, then retried.
    await page.waitForFunction(() => document.querySelector("#status").dataset.state === "loading", { timeout: 5000 });
    await page.waitForFunction(() => document.querySelector("#status").dataset.state === "joined", { timeout: 10000 });

    await page.evaluate(() => {
      window.__seen = [];
      new MutationObserver(() => {
        const all = document.querySelectorAll("#log .msg.assistant .bubble");
        const b = all[all.length - 1];
        if (b && window.__seen[window.__seen.length - 1] !== b.textContent) window.__seen.push(b.textContent);
      }).observe(document.querySelector("#log"), { childList: true, subtree: true, characterData: true });
    });
    await page.type("#text", "你还记得麻辣烫吗");
    await page.click("#send");
    await page.waitForSelector("#log .msg.assistant.done", { timeout: 10000 });
    const seen = await page.evaluate(() => window.__seen.filter(Boolean));
    const whole = REPLY.join("");
    if (seen[seen.length - 1] !== whole) fail("the reply is not whole: " + JSON.stringify(seen));
    if (seen.length < REPLY.length) fail("the reply did not grow piece by piece: " + JSON.stringify(seen));

    const rows = await page.$$eval("#recalls .mem", (lis) => lis.map((li) => ({
      channels: Array.from(li.querySelectorAll(".chip.channel")).map((c) => c.textContent),
      bar: li.querySelector(".bar span").style.width,
      path: li.querySelector(".path") && li.querySelector(".path").textContent
    })));
    if (rows[0].bar !== "100%" || rows[1].bar !== "67%") fail("bars: " + JSON.stringify(rows));
    if (JSON.stringify(rows[0].channels) !== JSON.stringify(["语义相似", "联想"])) fail("channels: " + JSON.stringify(rows));
    if (!rows[0].path || !rows[0].path.includes("小白是我最好的朋友 → 和小白在老街吃麻辣烫")) fail("path: " + JSON.stringify(rows));
    await page.click("#recalls .mem .fb-down");
    await page.waitForSelector("#recalls .fb-status.ok", { timeout: 5000 });
    if (feedbacks !== 1) fail("feedback pushes: " + feedbacks);

    await page.click('#tabs [data-tab="graph"]');
    await page.waitForFunction(() => window.soulPage.cy() && window.soulPage.cy().nodes().length === 3, { timeout: 10000 });
    const g = await page.evaluate(() => ({ neighbours: window.soulPage.cy().nodes(".neighbour").map((n) => n.id()), edges: window.soulPage.cy().edges().length }));
    if (JSON.stringify(g.neighbours) !== '["m_street"]' || g.edges !== 2) fail("graph: " + JSON.stringify(g));
    await page.screenshot({ path: shot });

    await page.reload();
    await page.waitForFunction(() => document.querySelector("#status").dataset.state === "joined", { timeout: 10000 });
    await page.waitForFunction((w) => Array.from(document.querySelectorAll("#log .msg.restored.assistant .bubble")).some((b) => b.textContent === w), { timeout: 5000 }, whole);
    const restored = await page.$$eval("#log .msg.restored .bubble", (bs) => bs.map((b) => b.textContent));
    if (restored[0] !== "你还记得麻辣烫吗") fail("restored: " + JSON.stringify(restored));

    if (errors.length) fail("page errors: " + errors.join("; "));
    console.log(JSON.stringify({ test: "page_protocol", ok: true, pieces: seen.length, joins, screenshot: shot }));
  } finally {
    await browser.close();
    server.close();
  }
  process.exit(0);
}

main().catch((e) => fail(e.stack || String(e)));
