// Drives the chat page in headless Chromium with puppeteer-core, as a person
// would: joins, sends one line through phoenix.js and waits for the recalled
// memories (each with stage, score and seeds); then opens the operator view,
// gives a new character a token, checks it opens that character, revokes it
// with the page's button and checks it no longer does. Saves screenshots.
//   SOUL_HTTP=http://127.0.0.1:PORT SOUL_TOKEN=... SOUL_OPERATOR_TOKEN=... node page.js
"use strict";
const os = require("os");
const path = require("path");
const http = require("http");
const { execFileSync } = require("child_process");
const puppeteer = require("puppeteer-core");

const base = process.env.SOUL_HTTP;
const token = process.env.SOUL_TOKEN;
const operatorToken = process.env.SOUL_OPERATOR_TOKEN;
const shot = process.env.SOUL_SCREENSHOT || path.join(os.tmpdir(), "soul_mem_page.png");
const opShot = shot.replace(/\.png$/, "_operator.png");
const say = "你还记得和小白吃麻辣烫那次吗";

function fail(message) {
  console.error("FAIL page: " + message);
  process.exit(1);
}

const deadline = setTimeout(() => fail("timed out after 60 s"), 60000);

// The status of a GET with a bearer token (to check what a token opens).
function statusWith(bearer, urlPath) {
  return new Promise((resolve, reject) => {
    http.get(base + urlPath, { headers: { Authorization: "Bearer " + bearer } }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode));
    }).on("error", reject);
  });
}

async function main() {
  const browser = await puppeteer.launch({
    // Debian's chromium, found on PATH (puppeteer-core downloads nothing).
    executablePath: process.env.CHROMIUM || execFileSync("sh", ["-c", "command -v chromium"]).toString().trim(),
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--window-size=1280,900"],
    defaultViewport: { width: 1280, height: 900 }
  });
  const errors = [];
  try {
    const page = await browser.newPage();
    page.on("pageerror", (e) => errors.push(e.message));

    const url = `${base}/?token=${encodeURIComponent(token)}&character=demo&say=${encodeURIComponent(say)}`;
    await page.goto(url);
    await page.waitForFunction(() => document.querySelector("#status").textContent.startsWith("joined"), { timeout: 15000 });
    await page.waitForSelector(".recall tbody tr", { timeout: 15000 });
    const rows = await page.$$eval(".recall tbody tr", (trs) => trs.map((tr) => Array.from(tr.cells).map((c) => c.textContent)));

    const stages = rows.map((r) => r[0]);
    if (!stages.every((s) => ["Similarity", "Ppr", "Both", "Action", "Core"].includes(s))) fail("unexpected stages " + JSON.stringify(stages));
    if (!rows.some((r) => r[0] !== "Action" && /^\d+\.\d{3}$/.test(r[1]) && r[3] !== "—")) fail("no memory row with a score and seeds: " + JSON.stringify(rows));
    if (!rows.some((r) => r[2].includes("麻辣烫"))) fail("the 麻辣烫 memory was not recalled: " + JSON.stringify(rows));
    const userLine = await page.$eval("#log li.user", (li) => li.textContent);
    if (userLine !== say) fail("the chat log does not show the line: " + userLine);
    await page.screenshot({ path: shot });

    // The operator view: a wrong token is refused on the page.
    await page.$eval("#operator", (d) => { d.open = true; });
    await page.type("#op-token", "not-an-operator");
    await page.click("#op-form button[type=submit]");
    await page.waitForFunction(() => document.querySelector("#op-status").textContent.includes("forbidden"), { timeout: 5000 });

    // A new token for a new character, then its revocation, by the page's buttons.
    const character = "page-op-" + Date.now();
    await page.$eval("#op-token", (i) => { i.value = ""; });
    await page.type("#op-token", operatorToken);
    await page.type("#op-new-id", character);
    await page.click("#op-create");
    await page.waitForFunction(() => document.querySelector("#op-status").textContent.includes("shown once"), { timeout: 5000 });
    const status = await page.$eval("#op-status", (p) => p.textContent);
    const created = status.split(": ").pop().trim();
    const listed = await page.$$eval("#op-table tbody tr", (trs) => trs.map((tr) => tr.cells[0].textContent));
    if (!listed.includes(character)) fail("the new character is not listed: " + JSON.stringify(listed));
    const notePath = `/api/characters/${encodeURIComponent(character)}/notes/sem_self`;
    const before = await statusWith(created, notePath);
    if (before === 401 || before === 403) fail("the new token does not open its character: " + before);

    await page.screenshot({ path: opShot });
    const revokeButton = await page.evaluateHandle((id) => {
      const row = Array.from(document.querySelectorAll("#op-table tbody tr")).find((tr) => tr.cells[0].textContent === id);
      return row && row.querySelector("button.op-revoke");
    }, character);
    if (!revokeButton.asElement()) fail("no revoke button for " + character);
    await revokeButton.asElement().click();
    await page.waitForFunction((id) => document.querySelector("#op-status").textContent.includes("revoked every token of " + id), { timeout: 5000 }, character);
    const after = await statusWith(created, notePath);
    if (after !== 401) fail("the revoked token still answers " + after);
    const remaining = await page.$$eval("#op-table tbody tr", (trs) => trs.map((tr) => tr.cells[0].textContent));
    if (remaining.includes(character)) fail("the revoked character is still listed");

    if (errors.length) fail("page errors: " + errors.join("; "));
    console.log(JSON.stringify({ test: "page", ok: true, rows: rows.length, screenshot: shot, operator_screenshot: opShot }));
  } finally {
    clearTimeout(deadline);
    await browser.close();
  }
  process.exit(0);
}

main().catch((e) => fail(e.stack || String(e)));
