// Shared helpers of the headless-Chromium page tests (page.js,
// page_manage.js): Debian's chromium through puppeteer-core, the overflow
// check (nothing wider than the viewport) and waiting for an element to show.
"use strict";
const { execFileSync } = require("child_process");
const puppeteer = require("puppeteer-core");

// Debian's chromium, found on PATH (puppeteer-core downloads nothing), at 1280×800.
function launch() {
  return puppeteer.launch({
    executablePath: process.env.CHROMIUM || execFileSync("sh", ["-c", "command -v chromium"]).toString().trim(),
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--window-size=1280,800"],
    defaultViewport: { width: 1280, height: 800 }
  });
}

// Runs in the page: every element whose right edge passes the viewport (and the document's own width).
function overflow() {
  const w = window.innerWidth;
  const bad = [];
  if (document.documentElement.scrollWidth > w) bad.push(`document scrollWidth ${document.documentElement.scrollWidth} > ${w}`);
  for (const e of document.querySelectorAll("body *")) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.right > w + 0.5) bad.push(`${e.tagName.toLowerCase()}${e.id ? "#" + e.id : ""}.${String(e.className).replace(/\s+/g, ".")} right=${Math.round(r.right)}`);
  }
  return bad;
}

// Calls fail(message) when something is wider than the viewport.
async function checkOverflow(page, where, fail) {
  const bad = await page.evaluate(overflow);
  if (bad.length) fail(`overflow at ${where}: ${bad.slice(0, 8).join("; ")}`);
}

async function waitVisible(page, sel, timeout) {
  await page.waitForFunction((s) => { const e = document.querySelector(s); return !!e && !e.hidden && e.getClientRects().length > 0; }, { timeout: timeout || 10000 }, sel);
}

module.exports = { launch, checkOverflow, waitVisible };
