// Shared helpers of the Node tests: the official `phoenix` client over the
// `ws` transport (Node 20 has no global WebSocket), promise wrappers and a
// failing exit. The ExUnit test SoulMemWeb.NodeClientTest runs the scripts.
"use strict";
const { Socket } = require("phoenix");
const WebSocket = require("ws");
const http = require("http");

const env = {
  socketUrl: process.env.SOUL_SOCKET, // ws://127.0.0.1:PORT/socket
  httpUrl: process.env.SOUL_HTTP, // http://127.0.0.1:PORT
  token: process.env.SOUL_TOKEN,
  character: process.env.SOUL_CHARACTER || "demo",
  otherToken: process.env.SOUL_OTHER_TOKEN,
  otherCharacter: process.env.SOUL_OTHER_CHARACTER
};

function fail(name, message) {
  console.error(`FAIL ${name}: ${message}`);
  process.exit(1);
}

function check(name, condition, message) {
  if (!condition) fail(name, message);
}

function socket(token, opts) {
  const s = new Socket(env.socketUrl, Object.assign({
    transport: WebSocket,
    params: token === undefined ? {} : { token },
    reconnectAfterMs: () => 60000,
    timeout: 10000
  }, opts || {}));
  return s;
}

// Resolves {status, response} for a channel push or join.
function reply(push) {
  return new Promise((resolve) => {
    push.receive("ok", (response) => resolve({ status: "ok", response }))
      .receive("error", (response) => resolve({ status: "error", response }))
      .receive("timeout", () => resolve({ status: "timeout", response: null }));
  });
}

function connected(s) {
  return new Promise((resolve, reject) => {
    const open = s.onOpen(() => { s.off([open, err]); resolve(); });
    const err = s.onError((e) => { s.off([open, err]); reject(new Error("socket error " + (e && e.message))); });
    s.connect();
  });
}

// A raw JSON HTTP request: resolves {status, body, text}.
function request(method, path, token, body) {
  const url = new URL(env.httpUrl + path);
  const data = body === undefined ? undefined : (typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body));
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = "Bearer " + token;
  if (data !== undefined) headers["content-length"] = Buffer.byteLength(data);
  return new Promise((resolve, reject) => {
    const req = http.request({ hostname: url.hostname, port: url.port, path: url.pathname, method, headers }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => { text += c; });
      res.on("end", () => {
        let parsed = null;
        try { parsed = JSON.parse(text); } catch (_) { parsed = null; }
        resolve({ status: res.statusCode, body: parsed, text });
      });
    });
    req.on("error", reject);
    if (data !== undefined) req.write(data);
    req.end();
  });
}

function deadline(name, ms) {
  const t = setTimeout(() => fail(name, `timed out after ${ms} ms`), ms);
  t.unref();
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}

module.exports = { env, fail, check, socket, reply, connected, request, deadline, percentile, WebSocket };
