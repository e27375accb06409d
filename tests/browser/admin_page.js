// The admin page (/ui) in a real browser: Debian's chromium, headless, driven over the
// DevTools protocol by puppeteer-core (which downloads no browser). Run by
// tests/e2e/test_admin_page.py, which starts the proxy and its upstream and reads the
// JSON line this prints last. Environment:
//   PROXY, ADMIN      base URLs of listen and admin_listen
//   TOKEN             the admin token
//   KEY               a fresh key prefix for this run
//   ARTIFACTS         where the screenshots go
//   CHROMIUM          the browser (default /usr/bin/chromium)
"use strict";

const fs = require("fs");
const path = require("path");
const puppeteer = require("puppeteer-core");

const { PROXY, ADMIN, TOKEN, KEY, ARTIFACTS } = process.env;
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const steps = [];
const step = (s) => { steps.push(s); console.error("admin page: " + s); };

async function post(pathname, key, body) {
  const r = await fetch(PROXY + pathname, {
    method: "POST",
    headers: { "Content-Type": "application/json", "Idempotency-Key": key },
    body: body || "{}",
  });
  await r.arrayBuffer();
  return r.status;
}

async function adminApi(method, pathname) {
  const r = await fetch(ADMIN + pathname, { method, headers: { Authorization: "Bearer " + TOKEN } });
  return { status: r.status, body: await r.json() };
}

// The number in the outcome table for `route` and `outcome` (0 when not there yet).
const countIn = (route, outcome) => {
  const table = document.getElementById("outcomes");
  const heads = [...table.tHead.rows[0]?.cells ?? []].map((c) => c.textContent);
  const column = heads.indexOf(outcome);
  const row = [...table.tBodies[0].rows].find((r) => r.dataset.route === route);
  return column < 0 || !row ? 0 : Number(row.cells[column].textContent);
};

async function main() {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
  });
  const result = { steps };
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 1000 });
    const requests = [];
    const problems = [];
    page.on("request", (r) => requests.push({ url: r.url(), headers: r.headers() }));
    page.on("pageerror", (e) => problems.push("page error: " + e.message));
    page.on("console", (m) => {
      if (m.type() === "error") problems.push("console: " + m.text());
    });
    page.on("dialog", (d) => d.accept());

    const response = await page.goto(ADMIN + "/ui", { waitUntil: "networkidle0" });
    const csp = response.headers()["content-security-policy"] || "";
    if (!csp.includes("script-src 'self'")) throw new Error("no CSP on /ui: " + csp);
    step("loaded /ui with " + csp);

    // The policy refuses inline script: a script element the page did not load from
    // its own origin never runs.
    const inline = await page.evaluate(() => new Promise((resolve) => {
      const s = document.createElement("script");
      s.textContent = "window.__inlineRan = true;";
      document.body.append(s);
      setTimeout(() => resolve(window.__inlineRan === true), 200);
    }));
    if (inline) throw new Error("an inline script ran despite the Content-Security-Policy");
    problems.length = 0;  // the refusal above is reported on the console: expected
    step("inline script refused");

    // A wrong token is refused and the page stays on the login form.
    await page.type("#token", "not-the-token");
    await page.click("#connect");
    await page.waitForFunction(() => document.getElementById("login-error").textContent.includes("refused"));
    step("wrong token refused: " + await page.$eval("#login-error", (e) => e.textContent));
    problems.length = 0;  // the browser logs the 401 it got: expected

    await page.type("#token", TOKEN);
    await page.click("#connect");
    await page.waitForSelector("#main:not([hidden])");
    await page.waitForFunction(() => document.querySelectorAll("#policy tbody tr").length > 0);
    const policyRoute = await page.$eval("#policy tbody tr td", (td) => td.textContent);
    step("logged in; policy in force lists route " + policyRoute);
    result.policy_route = policyRoute;

    // Counters move under load.
    const before = await page.evaluate(countIn, "orders", "executed");
    const keys = Array.from({ length: 6 }, (_, i) => `${KEY}-load-${i}`);
    for (const k of keys) if (await post("/v1/orders", k, '{"n": 1}') !== 201) throw new Error("load failed");
    for (const k of keys.slice(0, 3)) await post("/v1/orders", k, '{"n": 1}');
    for (const deadline = Date.now() + 15000; ;) {
      if (await page.evaluate(countIn, "orders", "executed") >= before + 6 &&
          await page.evaluate(countIn, "orders", "replayed") >= 3) {
        break;
      }
      if (Date.now() > deadline) throw new Error("the counters did not move");
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    result.executed_before = before;
    result.executed_after = await page.evaluate(countIn, "orders", "executed");
    result.replayed_after = await page.evaluate(countIn, "orders", "replayed");
    step(`counters moved: executed ${before} -> ${result.executed_after}, replayed ${result.replayed_after}`);

    // An indeterminate record, made by an upstream that resets after reading.
    const broken = KEY + "-broken";
    if (await post("/v1/reset-after-read", broken) !== 502) throw new Error("expected 502");
    await page.click("#refresh-records");  // the lists refresh every 10 s by themselves
    await page.waitForFunction(
      (k) => [...document.querySelectorAll("#indeterminate tbody tr")].some((r) => r.cells[0].textContent === k),
      { timeout: 15000 }, broken);
    await page.waitForFunction(() => document.getElementById("fig-indeterminate").textContent !== "-",
      { timeout: 15000 }).catch(() => {});
    step("the indeterminate record is listed");
    await page.screenshot({ path: path.join(ARTIFACTS, "admin-page.png"), fullPage: true });

    // Look it up by key.
    await page.type("#lookup-key", broken);
    await page.click("#lookup");
    await page.waitForSelector("#record-fields");
    const fields = await page.$$eval("#record-fields tbody tr", (rows) =>
      Object.fromEntries(rows.map((r) => [r.cells[0].textContent, r.cells[1].textContent])));
    if (fields.state !== "indeterminate" || !/^\d+$/.test(fields["fencing token"])) {
      throw new Error("lookup showed " + JSON.stringify(fields));
    }
    result.lookup = fields;
    step("lookup shows state " + fields.state + ", token " + fields["fencing token"]);

    // A completed record's body, only when asked.
    await page.$eval("#lookup-key", (e) => { e.value = ""; });
    await page.type("#lookup-key", keys[0]);
    await page.click("#lookup");
    await page.waitForFunction((k) => document.querySelector("#record-fields") &&
      document.querySelector("#record-fields").textContent.includes("completed"), {}, keys[0]);
    if (await page.$("#record-body")) throw new Error("the body was shown without being asked for");
    await page.click("#lookup-body");
    await page.click("#lookup");
    await page.waitForSelector("#record-body");
    const body = JSON.parse(await page.$eval("#record-body", (e) => e.textContent));
    if (body.key !== keys[0]) throw new Error("stored body " + JSON.stringify(body));
    result.body_key = body.key;
    step("the stored body is shown when asked");

    // Resolve the indeterminate record from its row.
    await page.$$eval("#indeterminate tbody tr", (rows, k) => {
      const row = rows.find((r) => r.cells[0].textContent === k);
      row.querySelector('button[data-action="resolve"]').click();
    }, broken);
    await page.waitForFunction(
      (k) => ![...document.querySelectorAll("#indeterminate tbody tr")].some((r) => r.cells[0].textContent === k),
      { timeout: 15000 }, broken);
    const after = await adminApi("GET", "/admin/keys/" + encodeURIComponent(broken));
    if (after.body.state !== "released") throw new Error("after resolve: " + JSON.stringify(after));
    result.resolved_state = after.body.state;
    step("resolved from the page; the admin API says " + after.body.state);
    await page.screenshot({ path: path.join(ARTIFACTS, "admin-page-resolved.png"), fullPage: true });

    // The token never left in a URL or a cookie, and nothing stored it.
    const leaked = requests.filter((r) => r.url.includes(TOKEN) || (r.headers.cookie || "").length > 0);
    if (leaked.length) throw new Error("token in a URL or a cookie: " + JSON.stringify(leaked));
    const stored = await page.evaluate(() => document.cookie + localStorage.length + sessionStorage.length);
    if (stored !== "00") throw new Error("the page stored something: " + stored);
    const dataCalls = requests.filter((r) => r.url.includes("/admin/"));
    if (!dataCalls.length || dataCalls.some((r) => r.headers.authorization !== "Bearer " + TOKEN &&
        r.headers.authorization !== "Bearer not-the-token")) {
      throw new Error("a data call without the token header");
    }
    result.data_calls = dataCalls.length;
    step(`${dataCalls.length} data calls, each with the token in its Authorization header`);
    if (problems.length) throw new Error("the page reported: " + problems.join("; "));
    result.ok = true;
  } catch (error) {
    result.ok = false;
    result.error = String(error && error.stack || error);
    const pages = await browser.pages();
    if (pages.length) {
      await pages[pages.length - 1].screenshot({ path: path.join(ARTIFACTS, "admin-page-failure.png"), fullPage: true })
        .catch(() => {});
    }
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(result));
  process.exit(result.ok ? 0 : 1);
}

main();
