// Run by bench/first_token.exs: joins the character's channel with the official `phoenix`
// client and sends SOUL_TURNS chat turns one after another; for each, the wall-clock time
// (µs since the epoch) at which the first reply_delta arrived. Prints one JSON line.
"use strict";
const path = require("path");
const modules = path.join(__dirname, "../apps/soul_mem_web/node_modules");
const { Socket } = require(path.join(modules, "phoenix"));
const WebSocket = require(path.join(modules, "ws"));

const now = () => Math.round((performance.timeOrigin + performance.now()) * 1000);
const turns = Number(process.env.SOUL_TURNS || 50);

const socket = new Socket(process.env.SOUL_SOCKET, {
  transport: WebSocket, params: { token: process.env.SOUL_TOKEN }, timeout: 60000
});
socket.connect();
const channel = socket.channel("character:" + process.env.SOUL_CHARACTER, {});
const firsts = [];
let resolveTurn = null;
let gotFirst = false;

channel.on("reply_delta", () => {
  if (!gotFirst) { gotFirst = true; firsts.push(now()); }
});
channel.on("reply_done", () => resolveTurn && resolveTurn());
channel.on("reply_error", (p) => { console.error(JSON.stringify(p)); process.exit(1); });

channel.join().receive("ok", async () => {
  for (let i = 0; i < turns; i++) {
    gotFirst = false;
    await new Promise((resolve) => {
      resolveTurn = resolve;
      channel.push("chat", { text: `第${i}次：你还记得小白吗？${Math.random()}` }, 60000);
    });
  }
  console.log(JSON.stringify({ ok: true, firsts }));
  process.exit(0);
}).receive("error", (e) => { console.error(JSON.stringify(e)); process.exit(1); });
