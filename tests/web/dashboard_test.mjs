// The dashboard in a real headless browser: a real `sqlq serve` (SQLQ_BIN)
// with a token file, messages sent over HTTP, and Debian's Chromium driven
// by playwright-core. Checks what a user sees: live numbers from one
// request per refresh, the waiting consumers, a queue's page (pause, the
// message browser, bulk actions behind a confirmation), a message's page
// and its actions, rings and rotations, a batch's progress and cancel, a
// hostile payload staying text,
// and a claim-only token seeing no admin control. Screenshots go to
// $SQLQ_SCREENSHOTS when set (docs/dashboard.md shows them).
//
// Run: SQLQ_BIN=build/dev/sqlq node tests/web/dashboard_test.mjs
// (after `npm ci` in tests/web). CTest runs it with the label "web".

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

import { BIN, BROWSER, DEADLINE_MS, loadChromium, part,
         startServer as serve, waitFor }
    from "./serve.mjs";

const chromium = await loadChromium();

const ADMIN = "admin-token-web-0001";
const WORKER = "worker-token-web-0001";
const CLAIMER = "claimer-token-web-0001";
const HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>';

async function startServer(dir, args) {
  fs.writeFileSync(path.join(dir, "tokens.txt"),
                   `${ADMIN} admin:*\n${WORKER} send,claim:*\n` +
                   `${CLAIMER} claim:jobs\n`);
  return serve(dir, ["--tokens", path.join(dir, "tokens.txt"), ...args]);
}

// A server (with `args`), a browser, and helpers; `body` runs with them.
async function withDashboard(body, args = [], pageOptions = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sqlq-web-"));
  const { url, stop } = await startServer(dir, args);
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
    const send = async (queue, messages) => {
      const r = await call("POST", `/v1/queues/${queue}/messages`,
                           { messages: messages.map((m) =>
                               typeof m === "string" ? { payload: m } : m) });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      return r.json;
    };
    const page = await browser.newPage({ viewport: { width: 1200, height: 900 },
                                         ...pageOptions });
    const errors = [];
    page.on("pageerror", (e) => errors.push(e.message));
    // Console errors but the browser's own line for each failed request
    // (a 401 before the token is typed is the page working as meant).
    page.on("console", (m) => {
      if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) {
        errors.push(m.text());
      }
    });
    const requests = [];
    page.on("request", (r) => requests.push(r.method() + " " +
                                            new URL(r.url()).pathname));
    const login = async (token) => {
      await page.fill("#token", token);
      await page.click("#token-save");
    };
    const shot = async (name) => {
      const to = process.env.SQLQ_SCREENSHOTS;
      if (to) await page.screenshot({ path: path.join(to, name + ".png"),
                                      fullPage: true });
    };
    const db = "sqlite:" + path.join(dir, "q.db");
    await body({ url, db, call, send, page, errors, requests, login, shot });
    // Every page loaded and every action ran without a console error
    // (a script or style the Content-Security-Policy blocked shows there).
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
    await stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const field = (page, queue, name) =>
    page.locator(`#queues tr[data-queue="${queue}"] td[data-field="${name}"]`);
const shows = (page, queue, name, text) =>
    waitFor(`${queue} ${name} = ${text}`, async () =>
        (await field(page, queue, name).count()) === 1 &&
        (await field(page, queue, name).textContent()) === text);

part("overview", "the overview is live, one request a refresh", async () => {
  await withDashboard(async ({ url, db, call, send, page, requests, login,
                               shot }) => {
    assert.equal((await call("POST", "/v1/queues/jobs",
                             { max_attempts: 1 })).status, 201);
    assert.equal((await call("POST", "/v1/queues/other", {})).status, 201);
    assert.equal((await call("POST", "/v1/rings/views", { capacity: 3 })).status,
                 201);
    assert.equal((await call("POST", "/v1/rotations/relays", {})).status, 201);
    assert.equal((await call("POST", "/v1/schedules/nightly",
                             { cron: "0 3 * * *", queue: "jobs",
                               payload: "report" })).status, 201);
    await send("jobs", ["a", "b", "c"]);

    const res = await page.goto(url + "/");
    assert.equal(res.status(), 200);
    assert.match(res.headers()["content-security-policy"],
                 /default-src 'none'; script-src 'sha256-/);
    assert.equal(res.headers()["x-frame-options"], "DENY");
    assert.equal(await page.title(), "sqlq dashboard");
    // Without a token the page says why it shows nothing.
    await waitFor("unauthorized", async () =>
        (await page.textContent("#status")).includes("unauthorized"));
    assert.equal(await page.locator("#queues tbody tr").count(), 0);

    await login(ADMIN);
    await shows(page, "jobs", "ready", "3");
    await shows(page, "other", "ready", "0");
    await waitFor("the ring, the rotation and the schedule", async () =>
        (await page.locator('#rings tr[data-ring="views"]').count()) === 1 &&
        (await page.locator('#rotations tr[data-rotation="relays"]').count()) ===
            1 &&
        (await page.locator('#schedules tr[data-schedule="nightly"]').count()) ===
            1);

    // New sends show in the depth and as a send rate.
    const sawRate = page.waitForFunction(() => {
      const td = document.querySelector(
          '#queues tr[data-queue="jobs"] td[data-field="sends_per_s"]');
      return td !== null && Number(td.textContent) > 0;
    }, null, { polling: "raf", timeout: DEADLINE_MS });
    await send("jobs", ["d", "e"]);
    await sawRate;
    await shows(page, "jobs", "ready", "5");

    // Claimed messages move from ready to leased; a nack on the last
    // attempt makes a dead letter.
    const claimed = await call("POST", "/v1/queues/jobs/claim",
                               { max: 2, lease_ms: 60000 });
    assert.equal(claimed.json.messages.length, 2);
    await shows(page, "jobs", "leased", "2");
    assert.equal((await call("POST", "/v1/queues/jobs/nack",
                             { receipt: claimed.json.messages[0].receipt,
                               error: "boom" })).status, 200);
    await shows(page, "jobs", "dead", "1");

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

    // A claim waiting in another process (a worker on the same database)
    // counts for the whole database and for its queue, not for this
    // server; it is reported within 5 s.
    const worker = spawn(BIN, ["--db", db, "--json", "claim", "other",
                               "--wait", "60s"], { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    worker.stdout.on("data", (d) => { out += d; });
    const exited = new Promise((r) => worker.on("exit", r));
    await waitFor("a waiting consumer elsewhere", async () =>
        (await page.textContent("#waiting-all")) === "1" &&
        (await field(page, "other", "waiting").textContent()) === "1", 15000);
    assert.equal(await page.textContent("#waiting"), "0");
    await send("other", ["for the worker"]);
    assert.equal(await exited, 0);
    assert.equal(JSON.parse(out).payload, "for the worker");
    await waitFor("no waiting consumer elsewhere", async () =>
        (await page.textContent("#waiting-all")) === "0" &&
        (await field(page, "other", "waiting").textContent()) === "0", 15000);

    // Each refresh is one request, whatever the page shows.
    requests.length = 0;
    await waitFor("three refreshes", async () =>
        requests.filter((r) => r === "GET /v1/overview").length >= 3, 15000);
    assert.deepEqual([...new Set(requests)], ["GET /v1/overview"]);

    // The token survives a reload of the tab (sessionStorage); the filter
    // narrows the tables.
    await page.reload();
    assert.equal(await page.inputValue("#token"), ADMIN);
    await shows(page, "jobs", "dead", "1");
    await shot("overview");
    await page.fill("#filter", "oth");
    await waitFor("only 'other'", async () =>
        (await page.locator("#queues tbody tr").count()) === 1 &&
        (await field(page, "other", "ready").count()) === 1);
    // Refreshes leave the box the user types in alone.
    const box = await page.$("#filter");
    requests.length = 0;
    await waitFor("two more refreshes", async () =>
        requests.filter((r) => r === "GET /v1/overview").length >= 2, 15000);
    assert.equal(await box.evaluate((e) => e.isConnected), true);
    assert.equal(await page.inputValue("#filter"), "oth");

    // The queue's page lists the schedules that send to it.
    await page.goto(url + "/#/queue/jobs");
    await page.locator("#queue-schedules").waitFor({ timeout: DEADLINE_MS });
    assert.match(await page.textContent("#queue-schedules"), /nightly.*0 3 \* \* \*/);
  });
});

part("many-queues",
     "five hundred queues refresh with one request",
     async () => {
  await withDashboard(async ({ url, call, page, requests, login }) => {
    for (let i = 0; i < 500; i += 50) {
      const made = await Promise.all(Array.from({ length: 50 }, (_, k) =>
          call("POST", `/v1/queues/q${String(i + k).padStart(3, "0")}`, {})));
      for (const m of made) assert.equal(m.status, 201);
    }
    await page.goto(url + "/");
    await login(ADMIN);
    await waitFor("500 rows", async () =>
        (await page.locator("#queues tbody tr").count()) === 500);
    requests.length = 0;
    await waitFor("two refreshes", async () =>
        requests.filter((r) => r === "GET /v1/overview").length >= 2, 15000);
    assert.deepEqual([...new Set(requests)], ["GET /v1/overview"]);
    assert.equal(await page.locator("#queues tbody tr").count(), 500);
  });
});

part("queue",
     "a queue's page: pause, browse, bulk actions, a message's actions",
     async () => {
  await withDashboard(async ({ url, call, send, page, login, shot }) => {
    assert.equal((await call("POST", "/v1/queues/jobs",
                             { max_attempts: 1 })).status, 201);
    const sent = await send("jobs", [
      { payload: HOSTILE, headers: { tenant: "acme" }, group: "g1" },
      { payload: '{"to":"a@example.com","n":1}', headers: { tenant: "acme" } },
      { payload_base64: Buffer.from([0, 1, 2, 255]).toString("base64") },
      "four", "five", "six"]);
    const ids = sent.ids;
    await page.goto(url + "/#/queue/jobs");
    await login(ADMIN);
    await waitFor("the counts", async () =>
        (await page.locator('#counts b[data-field="ready"]').count()) === 1 &&
        (await page.textContent('#counts b[data-field="ready"]')) === "6");
    // The charts draw the history the server keeps (a point every 200 ms
    // here): the depth of 6, and the sends.
    const line = (chart, series) =>
        page.locator(`#${chart} path[data-series="${series}"]`);
    await waitFor("lines of several points", async () =>
        (await line("depth-chart", "ready").count()) === 1 &&
        (await line("depth-chart", "ready").getAttribute("d")).includes("L") &&
        (await line("rate-chart", "sends").count()) === 1);
    const history = (await call("GET", "/v1/queues/jobs/history")).json;
    assert.ok(history.points.length >= 1);
    assert.equal(history.points.at(-1).ready, 6);
    assert.equal(history.step_s, 0.2);

    // Pause and resume.
    await page.click("#pause");
    await waitFor("paused", async () =>
        (await call("GET", "/v1/queues/jobs")).json.stats.paused === true);
    await page.locator("#resume").waitFor({ timeout: DEADLINE_MS });
    await page.click("#resume");
    await waitFor("resumed", async () =>
        (await call("GET", "/v1/queues/jobs")).json.stats.paused === false);

    // The browser lists the ready messages; the hostile payload is text.
    const row = (id) => page.locator(`#messages tr[data-id="${id}"]`);
    await waitFor("six rows", async () =>
        (await page.locator("#messages tbody tr").count()) === 6);
    assert.equal(await row(ids[0]).locator("td.payload").textContent(), HOSTILE);
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    await shot("queue");

    // A search by the payload's first bytes, then by a header.
    await page.fill("#find-prefix", "<img");
    await page.press("#find-prefix", "Enter");
    await waitFor("the one row", async () =>
        (await page.locator("#messages tbody tr").count()) === 1 &&
        (await row(ids[0]).count()) === 1);
    await page.fill("#find-prefix", "");
    await page.press("#find-prefix", "Enter");
    await waitFor("six rows again", async () =>
        (await page.locator("#messages tbody tr").count()) === 6);
    await page.fill("#find-header", "tenant=acme");
    await page.press("#find-header", "Enter");
    await waitFor("two acme rows", async () =>
        (await page.locator("#messages tbody tr").count()) === 2);

    // Bulk delete of a selection asks first and says how many.
    await row(ids[0]).locator("input.pick").check();
    await row(ids[1]).locator("input.pick").check();
    await page.click("#bulk-delete");
    await page.locator("#confirm[open]").waitFor({ timeout: DEADLINE_MS });
    assert.equal(await page.textContent("#confirm-text"), "Delete 2 messages?");
    await page.click("#confirm-no");
    assert.equal((await call("GET", "/v1/queues/jobs")).json.stats.ready, 6);
    // Over the filter: every acme message, counted; one sent while the
    // dialog is open is not among those it said, and stays.
    await page.click("#bulk-delete-all");
    await page.locator("#confirm[open]").waitFor({ timeout: DEADLINE_MS });
    assert.match(await page.textContent("#confirm-text"),
                 /^Delete 2 messages \(every ready message the filter selects\)\?$/);
    const late = (await send("jobs", [{ payload: "late", headers: { tenant: "acme" } }]))
        .ids[0];
    await page.click("#confirm-yes");
    await waitFor("two deleted", async () =>
        (await call("GET", "/v1/queues/jobs")).json.stats.ready === 5);
    assert.equal((await call("GET", `/v1/queues/jobs/messages/${late}`)).json.state,
                 "ready");
    await waitFor("the late acme row only", async () =>
        (await page.locator("#messages tbody tr").count()) === 1 &&
        (await row(late).count()) === 1);

    // Cancel from a message's page: a dead letter with the error "cancelled".
    await page.goto(url + `/#/queue/jobs/message/${late}`);
    await page.locator("#cancel").waitFor({ timeout: DEADLINE_MS });
    await page.click("#cancel");
    await page.locator("#confirm[open]").waitFor({ timeout: DEADLINE_MS });
    assert.equal(await page.textContent("#confirm-text"),
                 `Cancel message ${late}? It becomes a dead letter.`);
    await page.click("#confirm-yes");
    await page.locator('#fields dd[data-field="state"]:text("dead")')
        .waitFor({ timeout: DEADLINE_MS });
    assert.equal(await page.textContent('#fields dd[data-field="last_error"]'),
                 "cancelled");
    assert.equal((await call("GET", "/v1/queues/jobs")).json.stats.ready, 4);

    // A message's page: a binary payload as hex, its priority changed.
    await page.goto(url + `/#/queue/jobs/message/${ids[2]}`);
    await page.locator("#payload-hex").waitFor({ timeout: DEADLINE_MS });
    assert.match(await page.textContent("#payload-hex"), /^000000 {2}00 01 02 ff$/);
    await page.fill("#priority", "7");
    await page.click("#set-priority");
    await waitFor("priority 7", async () =>
        (await call("GET", `/v1/queues/jobs/messages/${ids[2]}`)).json.priority === 7);
    await waitFor("the page shows it", async () =>
        (await page.textContent('#fields dd[data-field="priority"]')) === "7");
    await shot("message");

    // Reschedule to tomorrow, then retry now: delayed, then ready again.
    const tomorrow = new Date(Date.now() + 86400000);
    const local = new Date(tomorrow.getTime() - tomorrow.getTimezoneOffset() * 60000)
        .toISOString().slice(0, 16);
    await page.fill("#run-at", local);
    await page.click("#reschedule");
    await waitFor("delayed", async () =>
        (await call("GET", `/v1/queues/jobs/messages/${ids[2]}`)).json.state ===
            "delayed");
    await page.locator('#fields dd[data-field="state"]:text("delayed")')
        .waitFor({ timeout: DEADLINE_MS });
    await page.click("#retry");
    await waitFor("ready", async () =>
        (await call("GET", `/v1/queues/jobs/messages/${ids[2]}`)).json.state ===
            "ready");

    // A dead letter: its error history, and a redrive.
    const claimed = await call("POST", "/v1/queues/jobs/claim", { max: 1 });
    const dead = claimed.json.messages[0];
    await call("POST", "/v1/queues/jobs/nack",
               { receipt: dead.receipt, error: "smtp 451" });
    // (By way of the queue's page: the dead letter may be the message on
    // screen, and the same address would not load it again.)
    await page.goto(url + "/#/queue/jobs");
    await page.goto(url + `/#/queue/jobs/message/${dead.id}`);
    await page.locator('#fields dd[data-field="state"]:text("dead")')
        .waitFor({ timeout: DEADLINE_MS });
    assert.match(await page.textContent("#errors"), /smtp 451/);
    await page.click("#retry");
    await waitFor("redriven", async () =>
        (await call("GET", `/v1/queues/jobs/messages/${dead.id}`)).json.state ===
            "ready");

    // Chosen dead letters are redriven from the browser too.
    const again = await call("POST", "/v1/queues/jobs/claim", { max: 1 });
    const dead2 = again.json.messages[0];
    await call("POST", "/v1/queues/jobs/nack",
               { receipt: dead2.receipt, error: "smtp 550" });
    await page.goto(url + "/#/queue/jobs");
    await page.locator("#state").waitFor({ timeout: DEADLINE_MS });
    await page.selectOption("#state", "dead");
    await row(dead2.id).locator("input.pick").check({ timeout: DEADLINE_MS });
    await page.click("#bulk-redrive");
    await page.locator("#confirm[open]").waitFor({ timeout: DEADLINE_MS });
    assert.equal(await page.textContent("#confirm-text"), "Retry now 1 message?");
    await page.click("#confirm-yes");
    await waitFor("redriven from the browser", async () =>
        (await call("GET", `/v1/queues/jobs/messages/${dead2.id}`)).json.state ===
            "ready");

    // A made-up message address reaches nothing but an error.
    const asked = [];
    page.on("request", (r) => asked.push(new URL(r.url()).pathname));
    await page.goto(url + "/#/queue/jobs/message/..%2F..%2F..%2Fschedules%2Fx");
    await waitFor("the error", async () =>
        (await page.textContent("#status")).includes("no message id"));
    assert.deepEqual(asked.filter((p) => p.includes("schedules")), []);
    await page.goto(url + `/#/queue/jobs/message/${dead.id}`);
    await page.locator("#delete").waitFor({ timeout: DEADLINE_MS });

    // Delete, after a confirmation.
    await page.click("#delete");
    await page.locator("#confirm[open]").waitFor({ timeout: DEADLINE_MS });
    assert.equal(await page.textContent("#confirm-text"),
                 `Delete message ${dead.id}?`);
    await page.click("#confirm-yes");
    await waitFor("gone", async () =>
        (await call("GET", `/v1/queues/jobs/messages/${dead.id}`)).status === 404);
    await page.waitForURL(/#\/queue\/jobs$/, { timeout: DEADLINE_MS });
  }, ["--history-step", "200ms"]);
});

part("claim-only",
     "a claim-only token sees its queue and no admin control",
     async () => {
  await withDashboard(async ({ url, call, send, page, login }) => {
    for (const q of ["jobs", "billing"]) {
      assert.equal((await call("POST", `/v1/queues/${q}`, {})).status, 201);
    }
    await call("POST", "/v1/rings/views", {});
    await send("jobs", ["x"]);
    await page.goto(url + "/");
    await login(CLAIMER);
    await shows(page, "jobs", "ready", "1");
    assert.equal(await page.locator("#queues tbody tr").count(), 1);
    assert.equal(await page.locator("#rings").count(), 0);
    await page.click('#queues a[href="#/queue/jobs"]');
    await waitFor("the queue page", async () =>
        (await page.locator("#queue-head").count()) === 1);
    await page.locator("#browser p").waitFor({ timeout: DEADLINE_MS });
    assert.match(await page.textContent("#browser"), /needs the admin permission/);
    for (const control of ["#pause", "#resume", "#bulk", "#bulk-delete",
                           "#messages"]) {
      assert.equal(await page.locator(control).count(), 0, control);
    }
  });
});

part("rings", "rings and rotations have pages", async () => {
  await withDashboard(async ({ url, call, page, login, shot }) => {
    await call("POST", "/v1/rings/views", { capacity: 3 });
    for (const p of ["v1", "v2", "v3", "v4"]) {
      await call("POST", "/v1/rings/views/groups/home", { payload: p });
    }
    await call("POST", "/v1/rotations/relays", { max_failures: 2 });
    for (const k of ["smtp-a", "smtp-b"]) {
      await call("POST", "/v1/rotations/relays/items", { key: k, payload: k });
    }
    await call("POST", "/v1/rotations/relays/items/smtp-b/fail", {});
    await call("POST", "/v1/rotations/relays/items/smtp-b/fail", {});
    await page.goto(url + "/#/ring/views");
    await login(ADMIN);
    await waitFor("the newest entries", async () =>
        (await page.locator("main table tbody tr").count()) === 3);
    assert.equal(await page.locator("main table tbody tr td.payload").first()
                     .textContent(), "v4");
    await page.goto(url + "/#/rotation/relays");
    await waitFor("the items", async () =>
        (await page.locator("#items tbody tr").count()) === 2);
    assert.match(await page.textContent("#items"), /parked/);
    await shot("rotation");
  });
});

part("topics", "topics are listed with their subscriptions", async () => {
  await withDashboard(async ({ url, call, page, login }) => {
    for (const q of ["mail", "crm-eu"]) {
      assert.equal((await call("POST", `/v1/queues/${q}`, {})).status, 201);
    }
    assert.equal((await call("POST", "/v1/topics/signups", {})).status, 201);
    assert.equal((await call("POST", "/v1/topics/quiet", {})).status, 201);
    assert.equal((await call("PUT", "/v1/topics/signups/subscriptions/mail")).status, 201);
    assert.equal((await call("PUT", "/v1/topics/signups/subscriptions/crm-eu",
                             { filter: { region: "eu" } })).status, 201);
    await page.goto(url + "/");
    await login(ADMIN);
    await waitFor("the topics", async () =>
        (await page.locator("#topics tbody tr").count()) === 2);
    assert.equal(await page.textContent(
        '#topics tr[data-topic="signups"] td[data-field="subscriptions"]'), "2");
    await page.click('#topics a[href="#/topic/signups"]');
    await waitFor("the subscriptions", async () =>
        (await page.locator("#subscriptions tbody tr").count()) === 2);
    assert.equal(await page.textContent(
        '#subscriptions tr[data-queue="crm-eu"] td[data-field="filter"]'), "region=eu");
    assert.equal(await page.textContent(
        '#subscriptions tr[data-queue="mail"] td[data-field="filter"]'), "every message");
    await page.goto(url + "/#/topic/quiet");
    await page.locator("#no-subscriptions").waitFor({ timeout: DEADLINE_MS });
  });
});

part("batch",
     "a batch's page shows its progress, live, and cancels it",
     async () => {
  await withDashboard(async ({ url, call, page, login, shot }) => {
    assert.equal((await call("POST", "/v1/queues/jobs", { max_attempts: 1 })).status, 201);
    assert.equal((await call("POST", "/v1/queues/done", {})).status, 201);
    const sent = await call("POST", "/v1/batches", {
      id: "album-7",
      members: ["a", "b", "c", "d"].map((p) => ({ queue: "jobs", payload: p })),
      callback: { queue: "done", payload: "album ready" } });
    assert.equal(sent.status, 201, JSON.stringify(sent.json));
    const count = (name) => page.textContent(`#batch-counts td[data-field="${name}"]`);
    const counts = async () => Promise.all(
        ["completed", "dead", "cancelled", "pending", "total"].map(count));

    // Opened by its id from the Batches page.
    await page.goto(url + "/");
    await login(ADMIN);
    await page.click('nav a[href="#/batches"]');
    await page.fill("#batch-id", "album-7");
    await page.click("#batch-open");
    await waitFor("the batch", async () =>
        (await page.locator("#batch-counts").count()) === 1);
    assert.deepEqual(await counts(), ["0", "0", "0", "4", "4"]);
    assert.equal(await page.textContent("#batch-state"), "4 pending");
    assert.equal(await page.getAttribute("#batch-fields dd[data-field=callback] a", "href"),
                 `#/queue/done/message/${sent.json.callback_id}`);

    // One member completes and one dies, through the API: the page follows.
    const c1 = await call("POST", "/v1/queues/jobs/claim", { max: 2 });
    await call("POST", "/v1/queues/jobs/ack", { receipt: c1.json.messages[0].receipt });
    await call("POST", "/v1/queues/jobs/nack",
               { receipt: c1.json.messages[1].receipt, error: "corrupt" });
    await waitFor("two ended", async () =>
        (await count("pending")) === "2" && (await count("dead")) === "1");
    assert.equal(await count("completed"), "1");
    assert.equal(await page.getAttribute("#batch-bar", "value"), "2");
    await shot("batch");

    // Cancelled behind a confirmation: the pending two, and then done.
    await page.click("#batch-cancel");
    await page.locator("#confirm[open]").waitFor({ timeout: DEADLINE_MS });
    assert.match(await page.textContent("#confirm-text"), /^Cancel batch album-7\? Its 2 pending/);
    await page.click("#confirm-yes");
    await waitFor("cancelled", async () =>
        (await page.textContent("#batch-state")) === "done (cancelled)");
    assert.deepEqual(await counts(), ["1", "1", "2", "0", "4"]);
    assert.equal(await page.locator("#batch-cancel").count(), 0);

    // A member's and the callback's pages lead to the batch.
    await page.goto(url + `/#/queue/jobs/message/${sent.json.members[3]}`);
    await waitFor("the member's page", async () =>
        (await page.textContent("h2")) === `Message ${sent.json.members[3]}`);
    assert.equal(await page.textContent("#fields dd[data-field=batch]"), "album-7");
    await page.goto(url + `/#/queue/done/message/${sent.json.callback_id}`);
    await waitFor("the callback's page", async () =>
        (await page.textContent("h2")) === `Message ${sent.json.callback_id}`);
    assert.equal(await page.textContent("#fields dd[data-field=batch]"),
                 "album-7 (its callback)");
    await page.click("#fields dd[data-field=batch] a");
    await page.locator("#batch-counts").waitFor({ timeout: DEADLINE_MS });

    // An unknown id says so.
    await page.goto(url + "/#/batch/nope");
    await page.locator("#batch-error").waitFor({ timeout: DEADLINE_MS });
    assert.match(await page.textContent("#batch-error"), /no batch 'nope'/);
  });
});

part("workers",
     "live workers have a page, and a leased message leads to its worker",
     async () => {
  await withDashboard(async ({ url, call, send, page, login, shot }) => {
    await call("POST", "/v1/queues/jobs", { archive: true });
    const sent = await send("jobs", [{ payload: "hi", kind: "email.send" }]);
    const id = sent.ids[0];
    const put = await call("PUT", "/v1/workers/web-1:42:ab", {
      name: "mailer", host: "web-1", pid: 42, queues: ["jobs"],
      kinds: ["email.send"], concurrency: 4,
      jobs: [{ queue: "jobs", id, since: new Date().toISOString() }] });
    assert.equal(put.status, 200, JSON.stringify(put.json));
    const claimed = await call("POST", "/v1/queues/jobs/claim",
                               { worker: "web-1:42:ab" });
    assert.equal(claimed.json.messages[0].id, id);
    await page.goto(url + "/#/workers");
    await login(ADMIN);
    await waitFor("the worker's row", async () =>
        (await page.locator("#workers tbody tr").count()) === 1);
    const row = await page.textContent("#workers tbody tr");
    assert.match(row, /mailer/);
    assert.match(row, /web-1 pid 42/);
    assert.match(row, /email\.send/);
    assert.equal(await page.locator(`#workers a[href="#/queue/jobs/message/${id}"]`)
                     .count(), 1);
    await shot("workers");
    // The job in its hands leads to the message, which shows its kind and
    // leads back to the workers.
    await page.click(`#workers a[href="#/queue/jobs/message/${id}"]`);
    await waitFor("the message's kind", async () =>
        (await page.locator('#fields dd[data-field="kind"]').count()) === 1);
    assert.equal(await page.textContent('#fields dd[data-field="kind"]'),
                 "email.send");
    assert.equal(await page.locator("#job").count(), 0);
    // The progress its worker records shows on the message's page.
    const receipt = claimed.json.messages[0].receipt;
    const progress = await call("POST", "/v1/queues/jobs/progress",
                                { receipt, progress: 40, note: { step: "render" } });
    assert.equal(progress.status, 200, JSON.stringify(progress.json));
    await page.goto(url + "/#/queue/jobs");
    await page.goto(url + `/#/queue/jobs/message/${id}`);
    await waitFor("the job's progress", async () =>
        (await page.locator('#job dd[data-field="progress"]').count()) === 1);
    assert.match(await page.textContent('#job dd[data-field="progress"]'), /40/);
    assert.match(await page.textContent('#job dd[data-field="note"]'), /render/);
    await page.click('#fields dd[data-field="worker"] a');
    await waitFor("the workers page again", async () =>
        (await page.locator("#workers tbody tr").count()) === 1);
    // Gone from the list once it says goodbye.
    await call("DELETE", "/v1/workers/web-1:42:ab");
    await waitFor("no worker", async () =>
        (await page.locator("#workers").count()) === 0 &&
        /No worker/.test(await page.textContent("main")));
    // Acked with a result: the archived message's page shows it.
    const acked = await call("POST", "/v1/queues/jobs/ack",
                             { receipt, result: { url: "/t/1.png" } });
    assert.equal(acked.status, 200, JSON.stringify(acked.json));
    await page.goto(url + `/#/queue/jobs/message/${id}`);
    await waitFor("the job's result", async () =>
        (await page.locator("#result").count()) === 1);
    assert.match(await page.textContent("#result"), /\/t\/1\.png/);
    await shot("message-result");
  });
});

part("message",
     "a message's page shows what it waits for and what waits for it",
     async () => {
  await withDashboard(async ({ url, call, page, login, shot }) => {
    for (const q of ["fetch", "stitch", "mail"]) {
      assert.equal((await call("POST", `/v1/queues/${q}`, {})).status, 201);
    }
    // A workflow as the clients send one: every job carries its id.
    const wf = { "sqlq-workflow": "wf-7" };
    const sent = await call("POST", "/v1/messages", { messages: [
      { queue: "fetch", payload: "a.png", headers: wf },
      { queue: "fetch", payload: "b.png", headers: wf },
      { queue: "stitch", payload: "a+b", headers: wf, depends_on_batch: [0, 1] },
      { queue: "mail", payload: "done", headers: wf, depends_on_batch: [2] }] });
    assert.equal(sent.status, 200, JSON.stringify(sent.json));
    const [a, b, s, m] = sent.json.ids;
    const claimed = await call("POST", "/v1/queues/fetch/claim", { max: 1 });
    assert.equal(claimed.json.messages[0].id, a);
    const links = await call("GET", `/v1/queues/stitch/messages/${s}/dependencies`);
    assert.equal(links.status, 200, JSON.stringify(links.json));
    assert.deepEqual(links.json, {
      parents: [{ queue: "fetch", id: a, dead: false },
                { queue: "fetch", id: b, dead: false }],
      dependents: [{ queue: "mail", id: m }], more_dependents: false });

    await page.goto(url + `/#/queue/stitch/message/${s}`);
    await login(ADMIN);
    const node = (k) => page.locator(`#graph a[data-node="${k}"]`);
    await waitFor("the graph of four", async () =>
        (await page.locator("#graph a[data-node]").count()) === 4);
    assert.equal(await page.textContent("#workflow"), "Workflow wf-7");
    // Each message with its state, linked; an arrow from each parent.
    for (const [k, state] of [[`fetch/${a}`, "leased"], [`fetch/${b}`, "ready"],
                              [`stitch/${s}`, "waiting"], [`mail/${m}`, "waiting"]]) {
      assert.equal(await node(k).getAttribute("data-state"), state, k);
      assert.match(await node(k).textContent(), new RegExp(state), k);
    }
    assert.equal(await node(`fetch/${a}`).getAttribute("href"),
                 `#/queue/fetch/message/${a}`);
    const edges = await page.locator("#graph line[data-edge]").evaluateAll(
        (ls) => ls.map((l) => l.getAttribute("data-edge")).sort());
    assert.deepEqual(edges, [`fetch/${a} stitch/${s}`, `fetch/${b} stitch/${s}`,
                             `stitch/${s} mail/${m}`].sort());
    // Parents left of the message, its dependent right of it.
    const x = async (k) => Number(await node(k).locator("rect").getAttribute("x"));
    assert.ok(await x(`fetch/${a}`) < await x(`stitch/${s}`));
    assert.ok(await x(`stitch/${s}`) < await x(`mail/${m}`));
    const cell = (t, k) => page.textContent(
        `#${t} tr[data-message="${k}"] td[data-field="state"]`);
    assert.equal(await cell("parents", `fetch/${a}`), "leased");
    assert.equal(await cell("parents", `fetch/${b}`), "ready");
    assert.equal(await cell("dependents", `mail/${m}`), "waiting");
    await shot("message-dependencies");

    // A node leads to its message's page, where the graph is the same.
    await node(`mail/${m}`).click();
    await waitFor("the last job's page", async () =>
        (await page.textContent("h2")) === `Message ${m}` &&
        (await page.locator("#graph a[data-node]").count()) === 4);
    assert.equal(await cell("parents", `stitch/${s}`), "waiting");
    assert.equal(await page.locator("#no-dependents").count(), 1);

    // Once a completes it is no longer linked, and still the stitch's
    // parent: drawn and listed as done, the stitch waiting for b only.
    const acked = await call("POST", "/v1/queues/fetch/ack",
                             { receipt: claimed.json.messages[0].receipt });
    assert.equal(acked.status, 200, JSON.stringify(acked.json));
    const after = await call("GET", `/v1/queues/stitch/messages/${s}/dependencies`);
    assert.deepEqual(after.json.parents, [{ queue: "fetch", id: b, dead: false }]);
    await page.goto(url + "/#/queue/stitch");
    await page.goto(url + `/#/queue/stitch/message/${s}`);
    await waitFor("a drawn as done", async () =>
        (await page.locator("#graph a[data-node]").count()) === 4 &&
        (await node(`fetch/${a}`).getAttribute("data-state")) === "done");
    const edgesAfter = await page.locator("#graph line[data-edge]").evaluateAll(
        (ls) => ls.map((l) => l.getAttribute("data-edge")).sort());
    assert.deepEqual(edgesAfter, edges);
    assert.equal(await page.locator("#parents tbody tr").count(), 2);
    assert.equal(await cell("parents", `fetch/${a}`), "done");
    assert.equal(await cell("parents", `fetch/${b}`), "ready");

    // A message without links or workflow has no such part.
    const lone = await call("POST", "/v1/queues/fetch/messages",
                            { messages: [{ payload: "alone" }] });
    await page.goto(url + `/#/queue/fetch/message/${lone.json.ids[0]}`);
    await waitFor("the lone message's page", async () =>
        (await page.textContent("h2")) === `Message ${lone.json.ids[0]}`);
    assert.equal(await page.locator("#graph, #parents, #workflow").count(), 0);
  });
});

// axe-core (from npm, in tests/web) on every page: no serious or critical
// violation of WCAG 2 A and AA. The page's Content-Security-Policy would
// refuse the injected checker, so this page's context bypasses it (the
// other tests keep it). And the keyboard alone reaches a queue.
const AXE = createRequire(import.meta.url).resolve("axe-core/axe.min.js");

part("a11y",
     "every page passes an accessibility check and works from the keyboard",
     async () => {
  await withDashboard(async ({ url, call, send, page, login }) => {
    assert.equal((await call("POST", "/v1/queues/jobs", { max_attempts: 1 })).status,
                 201);
    const sent = await send("jobs", [{ payload: "a", headers: { k: "v" } }, "b"]);
    const waiting = await send("jobs", [{ payload: "c", depends_on: [sent.ids[1]] }]);
    const claimed = await call("POST", "/v1/queues/jobs/claim", { max: 1 });
    await call("POST", "/v1/queues/jobs/nack",
               { receipt: claimed.json.messages[0].receipt, error: "bad" });
    await call("POST", "/v1/rings/views", {});
    await call("POST", "/v1/rings/views/groups/home", { payload: "p" });
    await call("POST", "/v1/rotations/relays", {});
    await call("POST", "/v1/rotations/relays/items", { key: "k", payload: "p" });
    await call("POST", "/v1/topics/news", {});
    await call("PUT", "/v1/topics/news/subscriptions/jobs", { filter: { k: "v" } });
    await page.goto(url + "/");
    await login(ADMIN);
    const audit = async (what, ready) => {
      await page.locator(ready).first().waitFor({ timeout: DEADLINE_MS });
      if (!(await page.evaluate(() => typeof window.axe !== "undefined"))) {
        await page.addScriptTag({ path: AXE });
      }
      const found = await page.evaluate(async () => {
        const r = await window.axe.run(document, {
            runOnly: { type: "tag", values: ["wcag2a", "wcag2aa"] } });
        return r.violations.filter((v) => v.impact === "serious" ||
                                          v.impact === "critical")
                           .map((v) => v.id + ": " + v.help + " (" +
                                       v.nodes.length + ")");
      });
      assert.deepEqual(found, [], what);
    };
    await audit("overview", '#queues tr[data-queue="jobs"]');

    // The keyboard: Tab from the token field to the queue's link, Enter.
    await page.focus("#token");
    let reached = false;
    for (let i = 0; i < 20 && !reached; ++i) {
      await page.keyboard.press("Tab");
      reached = await page.evaluate(() =>
          document.activeElement.getAttribute("href") === "#/queue/jobs");
    }
    assert.ok(reached, "Tab reaches the queue's link");
    await page.keyboard.press("Enter");
    await audit("queue", "#messages tbody tr");
    await page.goto(url + `/#/queue/jobs/message/${sent.ids[1]}`);
    await audit("message", "#fields");
    await page.goto(url + `/#/queue/jobs/message/${sent.ids[0]}`);
    await audit("dead letter", "#errors");
    await page.goto(url + `/#/queue/jobs/message/${waiting.ids[0]}`);
    await audit("dependencies", "#graph");
    await page.goto(url + "/#/ring/views");
    await audit("ring", "main table");
    await page.goto(url + "/#/rotation/relays");
    await audit("rotation", "#items");
    await page.goto(url + "/#/topic/news");
    await audit("topic", "#subscriptions");
    await call("POST", "/v1/batches", { id: "b1", members: [{ queue: "jobs", payload: "m" }],
                                        callback: { queue: "jobs", payload: "cb" } });
    await page.goto(url + "/#/batch/b1");
    await audit("batch", "#batch-counts");
    await page.goto(url + "/#/batches");
    await audit("batches", "#batch-form");
  }, [], { bypassCSP: true });
});
