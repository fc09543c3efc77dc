// Character management on the page, in headless Chromium (puppeteer-core),
// as an operator would do it: with the operator token, import a SillyTavern
// V2 JSON card (3-entry character_book) chosen with the file input and a PNG
// card dropped on the drop zone — each shows its name, the report counts and
// its token once, and appears in the characters table with its counts; a card
// that is not one and an id already taken show the server's message and
// change nothing; an empty character is made with the form. Then the card's
// character is opened in the chat view; its memories tab finds a lorebook
// entry by its key, shows the note's JSON, deletes it (confirm) and exports
// World Info and a V2 card as downloads; at 1280×800 and 390×844 nothing is
// wider than the viewport. Last, both characters are deleted (confirm naming
// the character and its backup; the backup path is shown) and are gone.
//   SOUL_HTTP=http://127.0.0.1:PORT SOUL_OPERATOR_TOKEN=… SOUL_PREFIX=… node page_manage.js
// Screenshots: SOUL_SCREENSHOT (default /tmp/soul_mem_page_manage.png) and _suffix variants.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const zlib = require("zlib");
const { request } = require("./lib");
const pageLib = require("./page_lib");
const { launch, waitVisible } = pageLib;

const base = process.env.SOUL_HTTP;
const operatorToken = process.env.SOUL_OPERATOR_TOKEN;
const prefix = process.env.SOUL_PREFIX || "pm" + Date.now();
const shot = process.env.SOUL_SCREENSHOT || path.join(os.tmpdir(), "soul_mem_page_manage.png");
const variant = (suffix) => shot.replace(/\.png$/, "_" + suffix + ".png");
const shots = {
  operator: shot,
  memories: variant("memories"),
  confirm: variant("confirm"),
  created: variant("created"),
  mobileOperator: variant("390_operator"),
  mobileMemories: variant("390_memories")
};
const work = fs.mkdtempSync(path.join(os.tmpdir(), "soul_mem_page_manage-"));
// The card files and downloads are the run's own: gone when it ends, passed or failed.
process.on("exit", () => fs.rmSync(work, { recursive: true, force: true }));

let current = null; // the page, for a screenshot of a failure

function fail(message) {
  console.error("FAIL page_manage: " + message);
  const done = () => process.exit(1);
  if (current) current.screenshot({ path: variant("failed"), fullPage: true }).then(() => console.error("  screenshot: " + variant("failed")), () => {}).finally(done);
  else done();
}

setTimeout(() => fail("timed out after 80 s"), 80000).unref();

// ------------------------------------------------------------------ fixtures

const LORE = [
  { keys: ["雾钟", "fog bell"], content: "港口的雾钟只在大雾天敲响，林晚小时候数过它一共敲了七下。", comment: "fog bell" },
  { keys: ["青石巷"], content: "青石巷是林晚长大的地方，巷口有一家卖桂花糕的铺子。", comment: "lane" },
  { keys: ["灯塔"], content: "北边的灯塔已经废弃，林晚的父亲曾是最后一任守塔人。", comment: "lighthouse" }
];

function card(name) {
  return {
    spec: "chara_card_v2",
    spec_version: "2.0",
    data: {
      name,
      description: `${name}是港口小镇的图书管理员，说话很轻。`,
      personality: "安静，细心，记性很好",
      scenario: "雾气很重的港口小镇",
      first_mes: "你好，今天也起雾了呢。",
      mes_example: "",
      creator_notes: "",
      system_prompt: "",
      post_history_instructions: "",
      alternate_greetings: [],
      tags: ["test"],
      creator: "soul_mem page test",
      character_version: "1",
      extensions: {},
      character_book: {
        name: `${name}的世界`,
        extensions: {},
        entries: LORE.map((e, i) => ({
          keys: e.keys, content: e.content, comment: e.comment, enabled: true,
          insertion_order: i + 1, id: i + 1, extensions: {}, case_sensitive: false, priority: 10, selective: false, secondary_keys: [], constant: false, position: "before_char"
        }))
      }
    }
  };
}

// A 1×1 PNG carrying the card as base64 in a tEXt chunk named "chara".
const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function chunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const td = Buffer.concat([Buffer.from(type, "ascii"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(td));
  return Buffer.concat([len, td, crc]);
}
function pngCard(json) {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(1, 0);
  ihdr.writeUInt32BE(1, 4);
  ihdr[8] = 8; ihdr[9] = 2; ihdr[10] = 0; ihdr[11] = 0; ihdr[12] = 0;
  const text = Buffer.concat([Buffer.from("chara\0", "latin1"), Buffer.from(Buffer.from(JSON.stringify(json)).toString("base64"), "latin1")]);
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", ihdr), chunk("tEXt", text), chunk("IDAT", zlib.deflateSync(Buffer.from([0, 255, 255, 255]))), chunk("IEND", Buffer.alloc(0))
  ]);
}

// ------------------------------------------------------------------ HTTP

// A JSON request to the server (lib.js): {status, body}.
const api = request;

// ------------------------------------------------------------------ page helpers

async function checkOverflow(page, where) {
  await pageLib.checkOverflow(page, where, fail);
}

async function tab(page, name) {
  await page.click(`#tabs [data-tab="${name}"]`);
  await page.waitForFunction((n) => document.querySelector("#main").dataset.tab === n, { timeout: 3000 }, name);
}

const rowsOf = (page) => page.$$eval("#mc-table tbody tr", (trs) => trs.map((tr) => ({
  id: tr.dataset.id,
  name: tr.querySelector(".mc-name").textContent,
  state: tr.querySelector(".chip.state").textContent,
  notes: tr.querySelector(".mc-notes").textContent,
  links: tr.querySelector(".mc-links").textContent,
  tokens: tr.querySelector(".mc-tokens").textContent,
  last: tr.querySelector(".mc-last").textContent
})));

// Waits for #op-status to change to something matching `re` (after an action).
async function statusAfter(page, action, re, kind) {
  await page.evaluate(() => { document.querySelector("#op-status").dataset.seen = document.querySelector("#op-status").textContent + "\u0001" + Math.random(); document.querySelector("#op-status").textContent = ""; });
  await action();
  await page.waitForFunction((src, k) => {
    const s = document.querySelector("#op-status");
    return new RegExp(src).test(s.textContent) && (!k || s.classList.contains(k));
  }, { timeout: 10000 }, re.source, kind || "");
  return page.$eval("#op-status", (s) => s.textContent);
}

async function rowButton(page, id, cls) {
  const h = await page.evaluateHandle((i, c) => {
    const row = Array.from(document.querySelectorAll("#mc-table tbody tr")).find((tr) => tr.dataset.id === i);
    return row && row.querySelector("button." + c);
  }, id, cls);
  if (!h.asElement()) fail(`no ${cls} button for ${id}`);
  return h.asElement();
}

// The created character's result box: {title, token, report}.
async function created(page) {
  await waitVisible(page, "#mc-result");
  const text = await page.$eval("#mc-result", (b) => b.textContent);
  if (/\bnull\b|undefined/.test(text)) fail("the result box shows a raw value: " + text);
  return page.$eval("#mc-result", (b) => ({
    id: b.dataset.id,
    title: b.querySelector(".result-title").textContent,
    token: b.querySelector("#mc-new-token").textContent,
    report: Object.fromEntries(Array.from(b.querySelectorAll(".report-item")).map((i) => [i.dataset.key, i.querySelector("dd").textContent]))
  }));
}

async function deleteCharacter(page, id, name) {
  await (await rowButton(page, id, "mc-delete")).click();
  await waitVisible(page, "#mc-confirm");
  const text = await page.$eval("#mc-confirm-text", (p) => p.textContent);
  if (!text.includes(id) || !text.includes(name) || !/备份/.test(text)) fail("the delete confirmation does not name the character and its backup: " + text);
  const focused = await page.evaluate(() => document.activeElement && document.activeElement.id);
  if (focused !== "mc-confirm-no") fail("the confirm step does not focus its cancel button: " + focused);
  return text;
}

// ------------------------------------------------------------------ main

async function main() {
  if (!base || !operatorToken) fail("SOUL_HTTP and SOUL_OPERATOR_TOKEN are required");
  const cardId = prefix + "-lin";
  const pngId = prefix + "-png";
  const emptyId = prefix + "-empty";
  const cardName = "林晚";
  const jsonFile = path.join(work, "lin_wan.json");
  fs.writeFileSync(jsonFile, JSON.stringify(card(cardName)));
  const badFile = path.join(work, "not_a_card.json");
  fs.writeFileSync(badFile, "this is not a card");

  const browser = await launch();
  const errors = [];
  const downloads = path.join(work, "downloads");
  fs.mkdirSync(downloads);
  try {
    const page = await browser.newPage();
    current = page;
    page.on("pageerror", (e) => errors.push(e.message));
    const bcdp = await browser.target().createCDPSession();
    await bcdp.send("Browser.setDownloadBehavior", { behavior: "allow", downloadPath: downloads });
    await page.goto(base + "/");
    await page.evaluate(() => localStorage.clear());
    await page.reload();
    await tab(page, "operator");

    // 1. The operator token lists the characters.
    await page.type("#op-token", operatorToken);
    await statusAfter(page, () => page.click("#op-form button[type=submit]"), /个角色/);
    const before = await rowsOf(page);

    // 2. A JSON card chosen with the file input.
    await page.type("#mc-card-id", cardId);
    const input = await page.$("#mc-file");
    await input.uploadFile(jsonFile);
    const r0 = await created(page);
    if (r0.id !== cardId || !r0.title.includes(cardName)) fail("the card's character is not shown: " + JSON.stringify(r0));
    if (r0.report.lore_entries !== "3") fail("report lore_entries: " + JSON.stringify(r0.report));
    const cardToken = r0.token;
    if ((await api("GET", `/api/characters/${encodeURIComponent(cardId)}/token`, cardToken)).status !== 200) fail("the card's token does not open it");
    let rows = await rowsOf(page);
    const row = rows.find((r) => r.id === cardId);
    if (!row) fail("the card's character is not listed: " + JSON.stringify(rows));
    if (Number(row.notes) < 4 || row.tokens !== "1" || row.name !== cardName || row.state !== "运行中" && !row.state.startsWith("运行中")) fail("the card's row: " + JSON.stringify(row));
    // The token is shown once: in the result box only, never in the table.
    const tableText = await page.$eval("#mc-table", (t) => t.textContent);
    if (tableText.includes(cardToken)) fail("the table shows a token");
    await page.screenshot({ path: shots.operator, fullPage: true });

    // 3. A PNG card dropped on the drop zone; then the same id again: refused, nothing changes.
    {
      const png = pngCard(card("沈舟")).toString("base64");
      const drop = async () => {
        await page.$eval("#mc-card-id", (i, v) => { i.value = v; }, pngId);
        await page.evaluate((b64) => {
          const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
          const dt = new DataTransfer();
          dt.items.add(new File([bytes], "shen_zhou.png", { type: "image/png" }));
          const zone = document.querySelector("#mc-drop");
          zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: dt, bubbles: true, cancelable: true }));
          zone.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
        }, png);
      };
      await page.$eval("#mc-result", (b) => { b.hidden = true; });
      await drop();
      const r = await created(page);
      if (r.id !== pngId || !r.title.includes("沈舟")) fail("the PNG card's character is not shown: " + JSON.stringify(r));
      rows = await rowsOf(page);
      const shown = await page.$eval("#mc-result", (b) => b.textContent);
      const msg = await statusAfter(page, drop, /exists|已|出错/, "error");
      if (!/exists/.test(msg)) fail("an id taken is not explained: " + msg);
      if (JSON.stringify(await rowsOf(page)) !== JSON.stringify(rows)) fail("a refused card changed the table");
      if (await page.$eval("#mc-result", (b) => b.textContent) !== shown) fail("a refused card changed the result box");
    }

    // A file that is not a card: the server's message, nothing else changes.
    rows = await rowsOf(page);
    const shownBefore = await page.$eval("#mc-result", (b) => b.hidden + b.textContent);
    const bad = await statusAfter(page, () => input.uploadFile(badFile), /出错/, "error");
    if (JSON.stringify(await rowsOf(page)) !== JSON.stringify(rows) || await page.$eval("#mc-result", (b) => b.hidden + b.textContent) !== shownBefore) fail("a bad card changed the page: " + bad);

    // 4. An empty character from the form; the same id again is refused.
    await page.type("#mc-new-id", emptyId);
    await page.type("#mc-new-name", "阿澄");
    await page.type("#mc-new-desc", "我在海边的旧书店打工。");
    await page.click("#mc-new-go");
    await page.waitForFunction((id) => { const b = document.querySelector("#mc-result"); return !b.hidden && b.dataset.id === id; }, { timeout: 10000 }, emptyId);
    const empty = await created(page);
    if (!empty.title.includes("阿澄") || !empty.token) fail("the empty character's result: " + JSON.stringify(empty));
    rows = await rowsOf(page);
    const emptyRow = rows.find((r) => r.id === emptyId);
    if (!emptyRow || emptyRow.notes !== "1" || emptyRow.name !== "阿澄") fail("the empty character's row: " + JSON.stringify(emptyRow));
    if (await page.$eval("#mc-new-id", (i) => i.value) !== "") fail("the form is not cleared");
    await checkOverflow(page, "1280 created");
    await page.screenshot({ path: shots.created });
    await page.type("#mc-new-id", emptyId);
    await page.type("#mc-new-name", "别人");
    const taken = await statusAfter(page, () => page.click("#mc-new-go"), /出错/, "error");
    if (!/exists/.test(taken) || !taken.includes(emptyId)) fail("an id taken is not explained: " + taken);
    if (JSON.stringify(await rowsOf(page)) !== JSON.stringify(rows)) fail("a refused creation changed the table");
    // The token shows in the result box until closed, then nowhere.
    await page.click("#mc-result .mc-close");
    if (await page.evaluate((tk) => document.body.innerText.includes(tk), empty.token)) fail("the token is still on the page after closing");
    await page.$eval("#mc-new-id", (i) => { i.value = ""; });
    await page.$eval("#mc-new-name", (i) => { i.value = ""; });

    // A row's "new token": shown once, counted.
    await (await rowButton(page, emptyId, "mc-token")).click();
    await page.waitForFunction((id) => { const b = document.querySelector("#mc-result"); return !b.hidden && b.dataset.id === id; }, { timeout: 10000 }, emptyId);
    const second = await created(page);
    if (!second.token || second.token === empty.token) fail("no new token shown: " + JSON.stringify(second));
    if ((await rowsOf(page)).find((r) => r.id === emptyId).tokens !== "2") fail("the new token is not counted");
    await page.click("#mc-result .mc-close");

    // 5. Open the card's character in the chat view, with the token this page minted.
    await (await rowButton(page, cardId, "mc-open")).click();
    await page.waitForFunction((id) => document.querySelector("#status").dataset.state === "joined" && document.querySelector("#status").textContent.includes(id), { timeout: 15000 }, cardId);

    // 6. Its memories: search a lorebook key, see the entry, its JSON; delete it.
    await tab(page, "memories");
    await page.waitForFunction(() => document.querySelectorAll("#mem-list .note").length > 0, { timeout: 10000 });
    const all = await page.$eval("#mem-range", (s) => s.textContent);
    const totalBefore = Number((all.match(/共 (\d+) 条/) || [])[1]);
    if (!(totalBefore >= 4)) fail("the memories tab does not count the notes: " + all);
    if (await page.$eval("#mem-character", (c) => c.textContent) !== cardId) fail("the memories tab names another character");
    await page.type("#mem-query", "雾钟");
    await page.click("#mem-go");
    await page.waitForFunction(() => {
      const items = Array.from(document.querySelectorAll("#mem-list .note"));
      return items.length > 0 && items.every((n) => /雾钟/.test(n.textContent));
    }, { timeout: 10000 });
    const hits = await page.$$eval("#mem-list .note", (lis) => lis.map((li) => ({
      id: li.dataset.id, kind: li.querySelector(".chip.kind").textContent, text: li.querySelector(".note-text").textContent
    })));
    const hit = hits.find((h) => h.text.includes(LORE[0].content.slice(0, 8)));
    if (!hit) fail("the lorebook entry for 雾钟 is not found: " + JSON.stringify(hits));
    if (!["知识", "具体经历", "抽象情境", "习惯"].includes(hit.kind)) fail("kind badge: " + hit.kind);
    await page.click(`#mem-list .note[data-id="${hit.id}"] .note-show`);
    await page.waitForFunction((id) => { const p = document.querySelector(`#mem-list .note[data-id="${id}"] .note-json`); return p && !p.hidden && p.textContent.includes(id); }, { timeout: 5000 }, hit.id);
    await checkOverflow(page, "1280 memories");
    await page.screenshot({ path: shots.memories });
    await page.click(`#mem-list .note[data-id="${hit.id}"] .note-delete`);
    await waitVisible(page, `#mem-list .note[data-id="${hit.id}"] .confirm`);
    await page.click(`#mem-list .note[data-id="${hit.id}"] .note-delete-yes`);
    await page.waitForFunction(() => /已删除记忆/.test(document.querySelector("#mem-status").textContent), { timeout: 10000 });
    if (await page.$(`#mem-list .note[data-id="${hit.id}"]`)) fail("the deleted note is still listed");
    await page.$eval("#mem-query", (i) => { i.value = ""; });
    await page.click("#mem-go");
    await page.waitForFunction((n) => (document.querySelector("#mem-range").textContent.match(/共 (\d+) 条/) || [])[1] === String(n), { timeout: 10000 }, totalBefore - 1);
    // Kind filter: only semantic notes.
    await page.select("#mem-kind", "semantic");
    await page.waitForFunction(() => { const k = Array.from(document.querySelectorAll("#mem-list .note")); return k.length > 0 && k.every((n) => n.dataset.kind === "semantic"); }, { timeout: 10000 });
    await page.select("#mem-kind", "");

    // Exports: World Info and a V2 card, downloaded.
    for (const [button, file, check] of [
      ["#mem-export-wi", ".world_info.json", (j) => j && typeof j.entries === "object"],
      ["#mem-export-card", ".card_v2.json", (j) => j && j.spec === "chara_card_v2" && j.data]
    ]) {
      await page.click(button);
      const target = path.join(downloads, cardId + file);
      const until = Date.now() + 10000;
      while (!fs.existsSync(target) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
      if (!fs.existsSync(target)) fail("no download " + target + " (" + await page.$eval("#mem-status", (s) => s.textContent) + ")");
      const j = JSON.parse(fs.readFileSync(target, "utf8"));
      if (!check(j)) fail("the download " + file + " is not the expected JSON: " + JSON.stringify(j).slice(0, 200));
    }

    // 7. 390×844: the memories tab and the operator view fit.
    await page.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true });
    await tab(page, "memories");
    await page.waitForFunction(() => document.querySelectorAll("#mem-list .note").length > 0, { timeout: 10000 });
    await checkOverflow(page, "390 memories");
    await page.screenshot({ path: shots.mobileMemories, fullPage: true });
    await tab(page, "operator");
    // The mobile viewport reloaded the page: the operator token (never stored) is typed again.
    if (!(await page.$eval("#op-token", (i) => i.value))) await page.type("#op-token", operatorToken);
    await statusAfter(page, () => page.click("#op-form button[type=submit]"), /个角色/);
    await waitVisible(page, "#mc-table tbody tr");
    await checkOverflow(page, "390 operator");
    await page.screenshot({ path: shots.mobileOperator, fullPage: true });
    await page.setViewport({ width: 1280, height: 800 });
    if (!(await page.$eval("#op-token", (i) => i.value))) {
      await tab(page, "operator");
      await page.type("#op-token", operatorToken);
      await statusAfter(page, () => page.click("#op-form button[type=submit]"), /个角色/);
    }

    // 8. Delete both (confirm names the character and the backup); gone, tokens dead.
    await deleteCharacter(page, cardId, cardName);
    await page.screenshot({ path: shots.confirm });
    // Cancel first: nothing happens.
    await page.click("#mc-confirm-no");
    if (!(await rowsOf(page)).some((r) => r.id === cardId)) fail("cancel deleted the character");
    await deleteCharacter(page, cardId, cardName);
    const deleted = await statusAfter(page, () => page.click("#mc-confirm-yes"), new RegExp("已删除 " + cardId));
    const backup = await page.$eval("#mc-backup", (c) => c.textContent).catch(() => "");
    if (!backup.endsWith(".json") || !deleted.includes(backup)) fail("the backup path is not shown: " + deleted);
    if ((await rowsOf(page)).some((r) => r.id === cardId)) fail("the deleted character is still listed");
    if ((await api("GET", `/api/characters/${encodeURIComponent(cardId)}/token`, cardToken)).status !== 401) fail("the deleted character's token still works");
    const saved = await page.evaluate(() => localStorage.getItem("soulmem.characters") || "");
    if (saved.includes(cardToken)) fail("the page keeps the deleted character's token");
    for (const id of [emptyId, pngId]) {
      const name = (await rowsOf(page)).find((r) => r.id === id).name;
      await deleteCharacter(page, id, name);
      await statusAfter(page, () => page.click("#mc-confirm-yes"), new RegExp("已删除 " + id));
    }
    rows = await rowsOf(page);
    if (rows.some((r) => r.id.startsWith(prefix))) fail("characters left: " + JSON.stringify(rows.map((r) => r.id)));

    if (errors.length) fail("page errors: " + errors.join("; "));
    console.log(JSON.stringify({
      test: "page_manage", ok: true, notes_before: totalBefore,
      screenshots: Object.values(shots)
    }));
  } catch (e) {
    // A failed wait: how the page looked.
    await current.screenshot({ path: variant("failed"), fullPage: true }).catch(() => {});
    console.error("  screenshot: " + variant("failed"));
    throw e;
  } finally {
    await browser.close();
  }
  process.exit(0);
}

main().catch((e) => fail(e.stack || String(e)));
