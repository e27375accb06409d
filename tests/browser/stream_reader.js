// A browser's fetch reading streamed answers through the proxy: Debian's chromium,
// headless, driven by puppeteer-core. Run by tests/e2e/test_stream_clients.py, which
// reads the JSON line this prints last. Environment:
//   PROXY      the proxy's base URL (the page is loaded from it: same origin)
//   KEY        a fresh key prefix for this run
//   CHROMIUM   the browser (default /usr/bin/chromium)
// It reads server-sent events as they come (when each read arrived), then a 1 MiB
// answer twice, executed and replayed from its chunks (the SHA-256 of each).
"use strict";

const puppeteer = require("puppeteer-core");

const { PROXY, KEY } = process.env;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

// In the page: POSTs `path` with the key and reads the body as it comes.
async function readInPage(path, key) {
  const t0 = performance.now();
  const res = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": key },
    body: "{}",
  });
  const reader = res.body.getReader();
  const reads = [];
  const parts = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    reads.push((performance.now() - t0) / 1000);
    parts.push(value);
  }
  const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { bytes.set(p, at); at += p.length; }
  const digest = [...new Uint8Array(await crypto.subtle.digest("SHA-256", bytes))]
    .map((b) => b.toString(16).padStart(2, "0")).join("");
  const text = bytes.length < 65536 ? new TextDecoder().decode(bytes) : "";
  return { status: res.status, replayed: res.headers.get("idempotent-replayed"),
           reads, length: bytes.length, digest, text };
}

(async () => {
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
  const out = { ok: false };
  try {
    const page = await browser.newPage();
    await page.goto(PROXY + "/status");
    out.events = await page.evaluate(readInPage, "/v1/events?n=5&gap_ms=300", KEY + "-events");
    out.big = await page.evaluate(readInPage, "/v1/big?bytes=1048576&chunked=1", KEY + "-big");
    out.big_again = await page.evaluate(readInPage, "/v1/big?bytes=1048576&chunked=1",
                                        KEY + "-big");
    out.ok = true;
  } catch (e) {
    out.error = String(e && e.stack || e);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(out));
})();
