// A full conversation through the official phoenix client: join, messages,
// recall (the same JSON as the HTTP API), feedback, notes, control, an
// unknown event, leave; then the round-trip latency of 1000 pushes.
"use strict";
const { env, fail, check, socket, reply, connected, request, deadline, percentile } = require("./lib");
const T = "conversation";
deadline(T, 30000);

async function main() {
  const s = socket(env.token);
  await connected(s);
  const ch = s.channel(`character:${env.character}`, {});
  const summaries = [];
  ch.on("summary_updated", (p) => summaries.push(p.summary));

  const joined = await reply(ch.join());
  check(T, joined.status === "ok" && joined.response.character === env.character, "join: " + JSON.stringify(joined));

  const lines = ["放学后我们去吃麻辣烫吧", "小白又把汤打翻了", "你还记得和小白吃麻辣烫那次吗"];
  for (const text of lines) {
    const r = await reply(ch.push("message", { role: "user", text }));
    check(T, r.status === "ok" && r.response.ok === true, "message: " + JSON.stringify(r));
  }
  const tagged = await reply(ch.push("message", { role: "assistant", text: "记得呀！", tag: true }));
  check(T, tagged.status === "ok", "tagged message: " + JSON.stringify(tagged));

  const rec = await reply(ch.push("recall", { text: "你还记得和小白吃麻辣烫那次吗" }));
  check(T, rec.status === "ok", "recall: " + JSON.stringify(rec));
  const r = rec.response;
  for (const key of ["memories", "actions", "window", "summary", "context"]) check(T, key in r, "recall lacks " + key);
  check(T, r.memories.length > 0, "no memories recalled");
  for (const m of r.memories) {
    check(T, typeof m.id === "string" && typeof m.content === "string" && typeof m.kind === "string", "memory shape " + JSON.stringify(m));
    check(T, typeof m.score === "number" && ["Similarity", "Ppr", "Both"].includes(m.stage) && Array.isArray(m.seeds), "memory trace " + JSON.stringify(m));
  }
  check(T, r.memories.some((m) => m.id === "sit_malatang_spill" || m.content.includes("麻辣烫")), "the 麻辣烫 memory is missing");
  const texts = r.window.map((m) => m.text);
  check(T, JSON.stringify(texts.slice(-4)) === JSON.stringify(lines.concat(["记得呀！"])), "window order " + JSON.stringify(texts));
  check(T, r.context.includes("麻辣烫"), "context does not render the memories");

  // The HTTP recall answers with the same JSON shape.
  const h = await request("POST", `/api/characters/${env.character}/recall`, env.token, { text: "你还记得和小白吃麻辣烫那次吗" });
  check(T, h.status === 200, "http recall " + h.status + " " + h.text);
  check(T, JSON.stringify(Object.keys(h.body).sort()) === JSON.stringify(Object.keys(r).sort()), "http and channel recall differ in keys");
  check(T, JSON.stringify(h.body.memories.map((m) => m.id)) === JSON.stringify(r.memories.map((m) => m.id)), "http and channel recall differ in memories");

  const noteId = r.memories[0].id;
  const fb = await reply(ch.push("feedback", { note_id: noteId, value: 1 }));
  check(T, fb.status === "ok", "feedback: " + JSON.stringify(fb));
  const badFb = await reply(ch.push("feedback", { note_id: noteId, value: 5 }));
  check(T, badFb.status === "error" && badFb.response.error.code === "invalid_feedback", "bad feedback: " + JSON.stringify(badFb));
  const missing = await reply(ch.push("feedback", { note_id: "no_such_note", value: -1 }));
  check(T, missing.status === "error" && missing.response.error.code === "not_found", "feedback on a missing note: " + JSON.stringify(missing));

  const note = await reply(ch.push("note:get", { id: noteId }));
  check(T, note.status === "ok" && note.response.note.id === noteId, "note:get: " + JSON.stringify(note));
  const noNote = await reply(ch.push("note:get", { id: "no_such_note" }));
  check(T, noNote.status === "error" && noNote.response.error.code === "not_found", "note:get missing: " + JSON.stringify(noNote));

  // Forcing a task either starts it or says why not (a runtime without it).
  const ctl = await reply(ch.push("control", { task: "persist" }));
  check(T, ctl.status === "ok" || ["unsupported", "busy"].includes(ctl.response.error.code), "control: " + JSON.stringify(ctl));
  const badCtl = await reply(ch.push("control", { task: "reboot" }));
  check(T, badCtl.status === "error" && badCtl.response.error.code === "invalid_payload", "bad control: " + JSON.stringify(badCtl));

  const unknown = await reply(ch.push("dance", {}));
  check(T, unknown.status === "error" && unknown.response.reason === "unknown_event", "unknown event: " + JSON.stringify(unknown));

  // Round trips on a live channel (loopback).
  const times = [];
  for (let i = 0; i < 1000; i++) {
    const t0 = process.hrtime.bigint();
    const x = await reply(ch.push("note:get", { id: noteId }));
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    if (x.status !== "ok") fail(T, "round trip " + i + ": " + JSON.stringify(x));
  }
  times.sort((a, b) => a - b);

  const left = await reply(ch.leave());
  check(T, left.status === "ok", "leave: " + JSON.stringify(left));
  check(T, ch.state === "closed", "channel state after leave: " + ch.state);
  // After leaving, the topic is no longer served on this socket.
  const ch2 = s.channel(`character:${env.character}`, {});
  const again = await reply(ch2.join());
  check(T, again.status === "ok", "rejoin: " + JSON.stringify(again));
  s.disconnect();

  console.log(JSON.stringify({
    test: T, ok: true, memories: r.memories.length,
    rtt_ms: { p50: +percentile(times, 0.5).toFixed(3), p99: +percentile(times, 0.99).toFixed(3), n: times.length }
  }));
  process.exit(0);
}

main().catch((e) => fail(T, e.stack || String(e)));
