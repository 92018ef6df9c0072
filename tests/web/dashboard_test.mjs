// The dashboard in a real headless browser: a real `sqlq serve` (SQLQ_BIN)
// with a token file, messages sent over HTTP, and Debian's Chromium driven
// by playwright-core. Checks the numbers a user sees change, the waiting
// consumers, the token kept in sessionStorage, and that only an admin token
// can peek and redrive dead letters.
//
// Run: SQLQ_BIN=build/dev/sqlq node tests/web/dashboard_test.mjs
// (after `npm ci` in tests/web). CTest runs it with the label "web".

import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";

import { BROWSER, DEADLINE_MS, loadChromium, startServer as serve, waitFor }
    from "./serve.mjs";

const chromium = await loadChromium();

const ADMIN = "admin-token-web-0001";
const WORKER = "worker-token-web-0001";

async function startServer(dir) {
  fs.writeFileSync(path.join(dir, "tokens.txt"),
                   `${ADMIN} admin:*\n${WORKER} send,claim:*\n`);
  return serve(dir, ["--tokens", path.join(dir, "tokens.txt")]);
}

test("the dashboard shows live queue numbers and redrives dead letters",
     async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sqlq-web-"));
  const { url, stop } = await startServer(dir);
  const browser = await chromium.launch({ executablePath: BROWSER,
                                          args: ["--no-sandbox"] });
  try {
    const call = async (method, target, body, token = ADMIN) => {
      const res = await fetch(url + target, {
        method,
        headers: { "Authorization": "Bearer " + token,
                   "Content-Type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body) });
      const json = await res.json();
      return { status: res.status, json };
    };
    const send = async (queue, payloads) => {
      const r = await call("POST", `/v1/queues/${queue}/messages`,
                           { messages: payloads.map((p) => ({ payload: p })) });
      assert.equal(r.status, 200);
    };
    assert.equal((await call("POST", "/v1/queues/jobs",
                             { max_attempts: 1 })).status, 201);
    assert.equal((await call("POST", "/v1/queues/other", {})).status, 201);
    await send("jobs", ["a", "b", "c"]);

    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    // A script or style the Content-Security-Policy blocked shows here.
    page.on("console", (m) => {
      if (/Content Security Policy/.test(m.text())) errors.push(m.text());
    });
    const res = await page.goto(url + "/");
    assert.equal(res.status(), 200);
    assert.match(res.headers()["content-type"], /text\/html/);
    assert.match(res.headers()["content-security-policy"],
                 /default-src 'none'; script-src 'sha256-/);
    assert.match(res.headers()["content-security-policy"],
                 /frame-ancestors 'none'/);
    assert.equal(res.headers()["x-frame-options"], "DENY");
    assert.equal(await page.title(), "sqlq dashboard");

    // Without a token the page says why it shows nothing.
    await page.waitForFunction(
        () => document.getElementById("status").textContent
                  .includes("unauthorized"),
        null, { timeout: DEADLINE_MS });
    assert.equal(await page.locator("#queues tbody tr").count(), 0);

    const field = (queue, name) =>
        page.locator(`#queues tr[data-queue="${queue}"] td[data-field="${name}"]`);
    const shows = (queue, name, text) =>
        waitFor(`${queue} ${name} = ${text}`, async () =>
            (await field(queue, name).count()) === 1 &&
            (await field(queue, name).textContent()) === text);

    await page.fill("#token", ADMIN);
    await page.click("#token-save");
    await shows("jobs", "ready", "3");
    await shows("jobs", "leased", "0");
    await shows("jobs", "dead", "0");
    await shows("other", "ready", "0");
    assert.equal(await page.textContent("#status"), "live");

    // New sends show up in the depth and, for one refresh, as a send rate.
    const sawRate = page.waitForFunction(
        () => {
          const td = document.querySelector(
              '#queues tr[data-queue="jobs"] td[data-field="sends_per_s"]');
          return td !== null && Number(td.textContent) > 0;
        }, null, { polling: "raf", timeout: DEADLINE_MS });
    await send("jobs", ["d", "e"]);
    await sawRate;
    await shows("jobs", "ready", "5");

    // Claimed messages move from ready to leased.
    const claimed = await call("POST", "/v1/queues/jobs/claim",
                               { max: 2, lease_ms: 60000 });
    assert.equal(claimed.json.messages.length, 2);
    await shows("jobs", "ready", "3");
    await shows("jobs", "leased", "2");

    // A nack on the last attempt makes a dead letter.
    const one = await call("POST", "/v1/queues/jobs/claim", { max: 1 });
    const dead = one.json.messages[0];
    assert.equal((await call("POST", "/v1/queues/jobs/nack",
                             { receipt: dead.receipt, error: "boom" })).status,
                 200);
    await shows("jobs", "dead", "1");
    await shows("jobs", "ready", "2");

    // A claim waiting on "other" is a waiting consumer until a send wakes it.
    await waitFor("no waiting consumers",
                  async () => (await page.textContent("#waiting")) === "0");
    const parked = call("POST", "/v1/queues/other/claim",
                        { max: 1, wait_ms: 20000 });
    await waitFor("one waiting consumer",
                  async () => (await page.textContent("#waiting")) === "1");
    await send("other", ["wake"]);
    assert.equal((await parked).json.messages[0].payload, "wake");
    await waitFor("no waiting consumers again",
                  async () => (await page.textContent("#waiting")) === "0");
    await shows("other", "leased", "1");

    // The token survives a reload of the tab (sessionStorage).
    await page.reload();
    assert.equal(await page.inputValue("#token"), ADMIN);
    await shows("jobs", "dead", "1");

    // A token without admin sees the queue but may not peek dead letters.
    await page.fill("#token", WORKER);
    await page.click("#token-save");
    // Its queues stay live; the server's gauges need a metrics grant.
    await waitFor("the gauges hidden from a worker's token", async () =>
        (await page.textContent("#waiting")) === "–");
    assert.equal(await page.textContent("#status"), "live");
    await page.click('#queues tr[data-queue="jobs"] button.show-dead');
    await waitFor("the forbidden message", async () =>
        (await page.textContent("#dead-message")).includes("forbidden"));
    assert.equal(await page.locator("#dead-letters tbody tr").count(), 0);

    // The admin peeks the dead letter: its payload and last error...
    await page.fill("#token", ADMIN);
    await page.click("#token-save");
    const row = page.locator(`#dead-letters tr[data-id="${dead.id}"]`);
    await waitFor("the dead letter row", async () => (await row.count()) === 1);
    assert.equal(await row.locator('td[data-field="payload"]').textContent(),
                 dead.payload);
    assert.equal(await row.locator('td[data-field="last_error"]').textContent(),
                 "boom");
    // ...and redrives it: it is ready again, and no longer dead.
    await row.locator("input.dead-select").check();
    await page.click("#redrive-selected");
    await waitFor("the redrive message", async () =>
        (await page.textContent("#dead-message")) === "Redriven: 1");
    await shows("jobs", "dead", "0");
    await shows("jobs", "ready", "3");
    assert.equal(await page.locator("#dead-letters tbody tr").count(), 0);
    const stats = await call("GET", "/v1/queues/jobs");
    assert.equal(stats.json.stats.dead, 0);
    assert.equal(stats.json.stats.ready, 3);

    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
    await stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
