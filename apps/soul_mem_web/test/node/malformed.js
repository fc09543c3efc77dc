// Malformed frames and bodies: each gets an error, the socket stays open
// (until a frame over the size limit), the character's window is unchanged.
"use strict";
const { env, fail, check, request, deadline, WebSocket } = require("./lib");
const T = "malformed";
deadline(T, 20000);

function rawSocket() {
  const ws = new WebSocket(`${env.socketUrl}/websocket?vsn=2.0.0&token=${encodeURIComponent(env.token)}`);
  const inbox = [];
  const waiters = [];
  ws.on("message", (data) => {
    const frame = JSON.parse(data.toString());
    const i = waiters.findIndex((w) => w.match(frame));
    if (i >= 0) waiters.splice(i, 1)[0].resolve(frame); else inbox.push(frame);
  });
  const next = (match) => new Promise((resolve) => {
    const i = inbox.findIndex(match);
    if (i >= 0) resolve(inbox.splice(i, 1)[0]); else waiters.push({ match, resolve });
  });
  return { ws, next, opened: new Promise((resolve, reject) => { ws.on("open", resolve); ws.on("error", reject); }) };
}

let ref = 0;
const topic = `character:${env.character}`;
async function call(sock, event, payload, joinRef) {
  ref += 1;
  const r = String(ref);
  sock.ws.send(JSON.stringify([joinRef === undefined ? "j1" : joinRef, r, topic, event, payload]));
  return sock.next((f) => f[1] === r && f[3] === "phx_reply");
}

async function main() {
  const sock = rawSocket();
  await sock.opened;
  const joined = await call(sock, "phx_join", {});
  check(T, joined[4].status === "ok", "join " + JSON.stringify(joined));
  const before = (await call(sock, "recall", {}))[4].response.window.length;

  const socketError = () => sock.next((f) => f[2] === "phoenix" && f[3] === "phx_error");
  sock.ws.send("this is not json");
  check(T, (await socketError())[4].error.code === "invalid_json", "non-JSON frame");
  sock.ws.send("[1,2]");
  check(T, (await socketError())[4].error.code === "invalid_payload", "short array frame");
  sock.ws.send(Buffer.from([1, 2, 3]), { binary: true });
  check(T, (await socketError())[4].error.code === "invalid_payload", "binary frame");
  sock.ws.send(JSON.stringify(["j1", "77", topic, "message", "a string payload"]));
  const strPayload = await sock.next((f) => f[1] === "77");
  check(T, strPayload[4].status === "error" && strPayload[4].response.error.code === "invalid_payload", "string payload " + JSON.stringify(strPayload));

  const shapes = [
    [{ role: "bot", text: "hi" }, "invalid_role"],
    [{ role: "user" }, "invalid_payload"],
    [{ role: "user", text: 42 }, "invalid_message"],
    [{ role: "user", text: "   " }, "empty_text"],
    [{ role: "user", text: "hi", extra: 1 }, "invalid_payload"],
    [{ role: "user", text: "长".repeat(200000) }, "too_large"]
  ];
  for (const [payload, code] of shapes) {
    const r = await call(sock, "message", payload);
    check(T, r[4].status === "error" && r[4].response.error.code === code, `message ${JSON.stringify(payload).slice(0, 60)} -> ${JSON.stringify(r[4]).slice(0, 200)}`);
  }
  const badRecall = await call(sock, "recall", { queries: "not a list" });
  check(T, badRecall[4].response.error.code === "invalid_queries", "recall with bad queries " + JSON.stringify(badRecall[4]));
  const notJoined = await call(sock, "message", { role: "user", text: "hi" }, "other-join-ref");
  check(T, notJoined[4].response.reason === "unmatched_topic", "stale join_ref " + JSON.stringify(notJoined[4]));
  const otherTopic = await (async () => { ref += 1; const r = String(ref); sock.ws.send(JSON.stringify(["j9", r, "room:lobby", "phx_join", {}])); return sock.next((f) => f[1] === r); })();
  check(T, otherTopic[4].status === "error" && otherTopic[4].response.reason === "unmatched_topic", "unknown topic " + JSON.stringify(otherTopic));

  // Nothing above changed the window; the socket still answers heartbeats.
  const after = (await call(sock, "recall", {}))[4].response.window.length;
  check(T, after === before, `window changed by rejected messages: ${before} -> ${after}`);
  ref += 1;
  const hb = String(ref);
  sock.ws.send(JSON.stringify([null, hb, "phoenix", "heartbeat", {}]));
  check(T, (await sock.next((f) => f[1] === hb))[4].status === "ok", "heartbeat after errors");

  // HTTP: malformed JSON, wrong shapes, huge bodies, unknown routes: JSON errors, no stack traces.
  const p = `/api/characters/${env.character}`;
  const httpCases = [
    ["POST", p + "/messages", "{not json", 400, "invalid_json"],
    ["POST", p + "/messages", "", 400, "invalid_json"],
    ["POST", p + "/messages", JSON.stringify([1, 2]), 400, "invalid_payload"],
    ["POST", p + "/feedback", JSON.stringify({ note_id: "sem_self", value: "yes" }), 422, "invalid_feedback"],
    ["POST", p + "/messages", JSON.stringify({ role: "user", text: "x".repeat(2 * 1024 * 1024) }), 413, "too_large"],
    ["GET", p + "/messages", undefined, 405, "method_not_allowed"],
    ["GET", p + "/nothing", undefined, 404, "not_found"],
    ["GET", "/nothing/at/all", undefined, 404, "not_found"],
    ["GET", p + "/notes/no_such_note", undefined, 404, "not_found"]
  ];
  for (const [method, path, body, status, code] of httpCases) {
    const r = await request(method, path, env.token, body);
    check(T, r.status === status && r.body && r.body.error.code === code, `${method} ${path} -> ${r.status} ${r.text.slice(0, 200)}`);
    check(T, !/stack|erlang|yaws_/i.test(r.text), "an error body leaks internals: " + r.text.slice(0, 200));
  }
  const afterHttp = (await call(sock, "recall", {}))[4].response.window.length;
  check(T, afterHttp === before, "window changed by rejected HTTP requests");

  // A frame over the limit closes the socket with 1009 (message too big). The server
  // rejects it from the header while the client is still sending the rest; its close can
  // then meet unread data, which TCP turns into a reset, and the client sees 1006
  // (abnormal closure) instead. Either way the socket is closed and nothing was stored.
  const closed = new Promise((resolve) => sock.ws.on("close", (code) => resolve(code)));
  sock.ws.on("error", () => {});
  sock.ws.send(JSON.stringify(["j1", "big", topic, "message", { role: "user", text: "x".repeat(2 * 1024 * 1024) }]));
  const code = await closed;
  check(T, code === 1009 || code === 1006, "oversized frame closed with " + code);

  const again = rawSocket();
  await again.opened;
  const rejoined = await call(again, "phx_join", {});
  check(T, rejoined[4].status === "ok", "rejoin after the oversized frame " + JSON.stringify(rejoined));
  const afterBig = (await call(again, "recall", {}))[4].response.window.length;
  check(T, afterBig === before, "window changed by the oversized frame");
  again.ws.close();

  console.log(JSON.stringify({ test: T, ok: true }));
  process.exit(0);
}

main().catch((e) => fail(T, e.stack || String(e)));
