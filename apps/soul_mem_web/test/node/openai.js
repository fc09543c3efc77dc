// The OpenAI-compatible endpoint driven by the official `openai` npm client:
// models, a SillyTavern-shaped chat (card, example dialogue, history), the
// same chat streamed, a regenerate, and the errors a client can cause. The
// upstream LLM is the scripted server of the ExUnit test (SoulMemWeb.OpenAITest),
// which answers the completions in order with SOUL_REPLIES (JSON array).
"use strict";
const OpenAI = require("openai");

const base = process.env.SOUL_HTTP + "/v1";
const token = process.env.SOUL_TOKEN;
const character = process.env.SOUL_CHARACTER;
const replies = JSON.parse(process.env.SOUL_REPLIES);

function fail(message) {
  console.error("FAIL openai.js: " + message);
  process.exit(1);
}

function check(condition, message) {
  if (!condition) fail(message);
}

async function refused(promise, status, what) {
  try {
    await promise;
  } catch (e) {
    check(e.status === status, `${what}: status ${e.status}, want ${status} (${e.message})`);
    check(e.error && typeof e.error.message === "string", `${what}: no OpenAI-shaped error`);
    return e;
  }
  fail(`${what}: was accepted`);
}

const card = { role: "system", content: "你是小红，十六岁的高中生，开朗爱笑。" };
const example = { role: "system", content: "[Example Chat]\n{{user}}：你好\n小红：你好呀！今天也要开心哦～" };

async function main() {
  const client = new OpenAI({ apiKey: token, baseURL: base, maxRetries: 0, timeout: 20000 });

  const models = await client.models.list();
  const ids = models.data.map((m) => m.id);
  check(ids.length === 1 && ids[0] === character, "models: " + JSON.stringify(ids));

  const first = [card, example, { role: "user", content: "你还记得小白吗？" }];
  const one = await client.chat.completions.create({
    model: character, messages: first, temperature: 0.8, max_tokens: 200, stop: ["{{user}}："]
  });
  check(one.object === "chat.completion", "object " + one.object);
  check(one.choices[0].message.content === replies[0], "reply 1: " + one.choices[0].message.content);

  const second = first.concat([
    { role: "assistant", content: replies[0] },
    { role: "user", content: "那我们一起吃麻辣烫吧！" }
  ]);
  const stream = await client.chat.completions.create({ model: character, messages: second, stream: true });
  let text = "";
  let pieces = 0;
  let finish = null;
  for await (const chunk of stream) {
    const delta = chunk.choices[0].delta;
    if (delta.content) { text += delta.content; pieces++; }
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  check(text === replies[1], "streamed reply: " + text);
  check(pieces > 1, "the reply came in one piece");
  check(finish === "stop", "finish_reason " + finish);

  // Regenerate: the same request again replaces the last answer.
  const again = await client.chat.completions.create({ model: character, messages: second });
  check(again.choices[0].message.content === replies[2], "regenerated: " + again.choices[0].message.content);

  await refused(client.chat.completions.create({ model: "nobody", messages: first }), 404, "wrong model");
  const other = new OpenAI({ apiKey: process.env.SOUL_OTHER_TOKEN, baseURL: base, maxRetries: 0 });
  await refused(other.chat.completions.create({ model: character, messages: first }), 404, "another character's token");
  const bad = new OpenAI({ apiKey: "sm-wrong", baseURL: base, maxRetries: 0 });
  await refused(bad.chat.completions.create({ model: character, messages: first }), 401, "wrong token");
  await refused(bad.models.list(), 401, "models with a wrong token");
  await refused(client.chat.completions.create({ model: character, messages: [card] }), 400, "no user message");
  await refused(client.chat.completions.create({ model: character, messages: first, n: 2 }), 400, "n = 2");
  await refused(client.chat.completions.create({
    model: character, messages: first,
    tools: [{ type: "function", function: { name: "f", parameters: { type: "object" } } }]
  }), 400, "tools");
  const many = Array.from({ length: 3000 }, (_, i) => ({ role: "user", content: "m" + i }));
  await refused(client.chat.completions.create({ model: character, messages: many }), 400, "3,000 messages");
  const huge = [{ role: "user", content: "长".repeat(700000) }];
  await refused(client.chat.completions.create({ model: character, messages: huge }), 413, "a 2 MB body");

  console.log(JSON.stringify({ ok: true, pieces }));
}

main().catch((e) => fail(e.stack || String(e)));
