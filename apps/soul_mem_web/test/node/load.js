// 200 concurrent sockets (official client) × 20 messages each, pipelined:
// every push must be answered ok. The ExUnit side then checks that the
// character's window holds all 4000 messages, each socket's in order.
"use strict";
const { env, fail, check, socket, reply, connected, deadline } = require("./lib");
const T = "load";
deadline(T, 60000);
const SOCKETS = Number(process.env.SOUL_SOCKETS || 200);
const MESSAGES = Number(process.env.SOUL_MESSAGES || 20);

async function client(i) {
  const s = socket(env.token);
  await connected(s);
  const ch = s.channel(`character:${env.character}`, {});
  const j = await reply(ch.join());
  if (j.status !== "ok") fail(T, `socket ${i} join: ${JSON.stringify(j)}`);
  const pushes = [];
  for (let m = 0; m < MESSAGES; m++) pushes.push(reply(ch.push("message", { role: "user", text: `s${i}-m${m}` })));
  const replies = await Promise.all(pushes);
  const ok = replies.filter((r) => r.status === "ok" && r.response.ok === true).length;
  s.disconnect();
  return ok;
}

async function main() {
  const t0 = Date.now();
  const counts = await Promise.all(Array.from({ length: SOCKETS }, (_, i) => client(i)));
  const total = counts.reduce((a, b) => a + b, 0);
  check(T, total === SOCKETS * MESSAGES, `answered ok: ${total} of ${SOCKETS * MESSAGES}`);
  console.log(JSON.stringify({ test: T, ok: true, sockets: SOCKETS, messages: total, ms: Date.now() - t0 }));
  process.exit(0);
}

main().catch((e) => fail(T, e.stack || String(e)));
