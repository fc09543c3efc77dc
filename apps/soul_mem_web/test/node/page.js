// Opens the chat page in headless Chromium (driven over the DevTools
// protocol with `ws`), sends one line through phoenix.js and waits for the
// recalled memories to render; checks that each shows stage, score and
// seeds, and saves a screenshot.
//   SOUL_HTTP=http://127.0.0.1:PORT SOUL_TOKEN=... SOUL_SCREENSHOT=/tmp/x.png node page.js
"use strict";
const { spawn } = require("child_process");
const fs = require("fs");
const os = require("os");
const path = require("path");
const http = require("http");
const WebSocket = require("ws");

const base = process.env.SOUL_HTTP;
const token = process.env.SOUL_TOKEN;
const shot = process.env.SOUL_SCREENSHOT || path.join(os.tmpdir(), "soul_mem_page.png");
const chromium = process.env.CHROMIUM || "chromium";
const say = "你还记得和小白吃麻辣烫那次吗";

function fail(message) {
  console.error("FAIL page: " + message);
  process.exit(1);
}

const deadline = setTimeout(() => fail("timed out after 40 s"), 40000);

function getJson(url) {
  return new Promise((resolve, reject) => {
    http.get(url, (res) => {
      let body = "";
      res.on("data", (c) => { body += c; });
      res.on("end", () => { try { resolve(JSON.parse(body)); } catch (e) { reject(e); } });
    }).on("error", reject);
  });
}

async function waitFor(check, what, ms) {
  const until = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > until) fail("waiting for " + what);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function main() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "soul_mem_chromium_"));
  const browser = spawn(chromium, [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--remote-debugging-port=0", "--user-data-dir=" + profile, "--window-size=1280,900", "about:blank"
  ], { stdio: "ignore" });
  // The profile is removed once the browser has exited (it writes until then).
  const exited = new Promise((resolve) => browser.on("exit", resolve));
  process.on("exit", () => { try { browser.kill("SIGKILL"); } catch (_) {} });

  const portFile = path.join(profile, "DevToolsActivePort");
  const devPort = await waitFor(() => fs.existsSync(portFile) && fs.readFileSync(portFile, "utf8").split("\n")[0], "DevTools port", 20000);
  const targets = await getJson(`http://127.0.0.1:${devPort}/json/list`);
  const page = targets.find((t) => t.type === "page");
  if (!page) fail("no page target");

  const cdp = new WebSocket(page.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => { cdp.on("open", resolve); cdp.on("error", reject); });
  let id = 0;
  const pending = new Map();
  const logs = [];
  cdp.on("message", (data) => {
    const msg = JSON.parse(data);
    if (msg.id && pending.has(msg.id)) { pending.get(msg.id)(msg); pending.delete(msg.id); }
    if (msg.method === "Runtime.exceptionThrown") logs.push("exception: " + JSON.stringify(msg.params.exceptionDetails.text));
  });
  const send = (method, params) => new Promise((resolve) => { id += 1; pending.set(id, resolve); cdp.send(JSON.stringify({ id, method, params: params || {} })); });
  const evaluate = async (expression) => {
    const r = await send("Runtime.evaluate", { expression, returnByValue: true });
    return r.result && r.result.result ? r.result.result.value : undefined;
  };

  await send("Runtime.enable");
  await send("Page.enable");
  const url = `${base}/?token=${encodeURIComponent(token)}&character=demo&say=${encodeURIComponent(say)}`;
  await send("Page.navigate", { url });

  await waitFor(() => evaluate("document.querySelector('#status').textContent.startsWith('joined')"), "the join", 15000);
  const rows = await waitFor(async () => {
    const r = await evaluate(`Array.from(document.querySelectorAll('.recall tbody tr')).map(tr => Array.from(tr.cells).map(c => c.textContent))`);
    return r && r.length > 0 ? r : null;
  }, "recalled memories", 15000);

  const stages = rows.map((r) => r[0]);
  if (!stages.every((s) => ["Similarity", "Ppr", "Both", "Action", "Core"].includes(s))) fail("unexpected stages " + JSON.stringify(stages));
  if (!rows.some((r) => r[0] !== "Action" && /^\d+\.\d{3}$/.test(r[1]) && r[3] !== "—")) fail("no memory row with a score and seeds: " + JSON.stringify(rows));
  if (!rows.some((r) => r[2].includes("麻辣烫"))) fail("the 麻辣烫 memory was not recalled: " + JSON.stringify(rows));
  const userLine = await evaluate("document.querySelector('#log li.user') && document.querySelector('#log li.user').textContent");
  if (userLine !== say) fail("the chat log does not show the line: " + userLine);
  if (logs.length) fail("page errors: " + logs.join("; "));

  const png = await send("Page.captureScreenshot", { format: "png" });
  fs.writeFileSync(shot, Buffer.from(png.result.data, "base64"));
  console.log(JSON.stringify({ test: "page", ok: true, rows: rows.length, screenshot: shot }));
  clearTimeout(deadline);
  cdp.close();
  browser.kill("SIGKILL");
  await exited;
  try { fs.rmSync(profile, { recursive: true, force: true }); } catch (_) { /* a leftover temp dir */ }
  process.exit(0);
}

main().catch((e) => fail(e.stack || String(e)));
