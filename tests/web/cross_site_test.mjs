// A page of another site, in a real headless Chromium, tries what any web
// page a developer opens could try against a `sqlq serve` on their machine
// (no tokens, loopback): purge, send and read through cross-site requests,
// and read every queue through DNS rebinding. Chromium's
// --host-resolver-rules plays the attacker's DNS: evil.example and
// app.example resolve to 127.0.0.1, as a rebound name would.
//
// Run: SQLQ_BIN=build/dev/sqlq node tests/web/cross_site_test.mjs
// (after `npm ci` in tests/web). CTest runs it with the label "web".

import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";

import { BROWSER, loadChromium, startServer } from "./serve.mjs";

const chromium = await loadChromium();

// Serves site.html at / from another port: another origin than the
// server's. The page is set after the start, once its origin is known.
async function startSite() {
  const site = http.createServer((req, res) => {
    res.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
    res.end(site.html);
  });
  await new Promise((r) => site.listen(0, "127.0.0.1", r));
  return site;
}

// The attacker's page: every way a page can reach the API, each recorded in
// window.results as "read: ...", "sent" (no readable answer) or "failed".
const ATTACK = (api) => `<!doctype html><title>attack</title>
<iframe name="sink"></iframe>
<form id="form" method="POST" target="sink" enctype="text/plain"
      action="${api}/v1/queues/jobs/purge"><input name="x" value="y"></form>
<script>
window.results = {};
async function attempt(name, fn) {
  try { window.results[name] = await fn(); }
  catch (e) { window.results[name] = "failed"; }
}
window.done = (async () => {
  await attempt("no-cors purge", async () => {
    await fetch("${api}/v1/queues/jobs/purge", {method: "POST", mode: "no-cors",
        headers: {"Content-Type": "text/plain"}, body: "{}"});
    return "sent";
  });
  await attempt("no-cors send", async () => {
    await fetch("${api}/v1/queues/jobs/messages", {method: "POST",
        mode: "no-cors", headers: {"Content-Type": "text/plain"},
        body: JSON.stringify({messages: [{payload: "evil"}]})});
    return "sent";
  });
  await attempt("json claim", async () => {
    const r = await fetch("${api}/v1/queues/jobs/claim", {method: "POST",
        headers: {"Content-Type": "application/json"}, body: '{"max":1}'});
    return "read: " + await r.text();
  });
  await attempt("list queues", async () => {
    const r = await fetch("${api}/v1/queues");
    return "read: " + await r.text();
  });
  document.getElementById("form").submit();
})();
</script>`;

test("pages of other sites cannot change or read the queues", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sqlq-web-"));
  const server = await startServer(dir);
  const site = await startSite();
  site.html = ATTACK(server.url);
  const sitePort = site.address().port;
  const browser = await chromium.launch({
    executablePath: BROWSER,
    args: ["--no-sandbox",
           "--host-resolver-rules=MAP evil.example 127.0.0.1"] });
  const api = async (method, target, body) => {
    const res = await fetch(server.url + target, {
      method, headers: { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.status, json: await res.json() };
  };
  try {
    assert.equal((await api("POST", "/v1/queues/jobs", {})).status, 201);
    assert.equal((await api("POST", "/v1/queues/jobs/messages",
                            { messages: [{ payload: "a" }, { payload: "b" }] }))
                     .status, 200);

    const page = await browser.newPage();
    const form = page.waitForEvent("requestfinished",
                                   (r) => r.method() === "POST" &&
                                          r.frame() !== page.mainFrame());
    await page.goto(`http://evil.example:${sitePort}/`);
    const results = await page.evaluate(async () => {
      await window.done;
      return window.results;
    });
    const formResponse = await (await form).response();

    // Nothing the page sent was acted on, and it read nothing.
    assert.equal(results["no-cors purge"], "sent");  // opaque to the page
    assert.equal(results["no-cors send"], "sent");
    assert.equal(results["json claim"], "failed");   // preflight refused
    assert.equal(results["list queues"], "failed");  // no CORS headers
    assert.equal(formResponse.status(), 403);
    const stats = (await api("GET", "/v1/queues/jobs")).json.stats;
    assert.equal(stats.ready, 2, "the page purged or claimed messages");
    assert.equal(stats.sends, 2, "the page sent a message");
    assert.equal(stats.claims, 0);

    // DNS rebinding: the page's own name now leads to the server, so the
    // browser treats the server as the page's origin. Refused by Host.
    const rebound = await browser.newPage();
    const res = await rebound.goto(`http://evil.example:${server.port}/v1/queues`);
    assert.equal(res.status(), 403);
    const body = await rebound.textContent("body");
    assert.match(body, /host_not_allowed/);
    assert.doesNotMatch(body, /jobs/);
    const purge = await rebound.evaluate(async () => {
      const r = await fetch("/v1/queues/jobs/purge", { method: "POST" });
      return r.status;
    });
    assert.equal(purge, 403);
    assert.equal((await api("GET", "/v1/queues/jobs")).json.stats.ready, 2);
  } finally {
    await browser.close();
    site.close();
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("an origin in --cors-origins may call the API and read the replies",
     async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sqlq-web-"));
  const site = await startSite();
  const origin = `http://app.example:${site.address().port}`;
  const server = await startServer(dir, ["--cors-origins", origin]);
  site.html = `<!doctype html><title>app</title><script>
    window.done = (async () => {
      const api = "${server.url}";
      const post = (p, b) => fetch(api + p, {method: "POST",
          headers: {"Content-Type": "application/json"},
          body: JSON.stringify(b)}).then((r) => r.json());
      await post("/v1/queues/jobs", {});
      await post("/v1/queues/jobs/messages", {messages: [{payload: "hi"}]});
      return post("/v1/queues/jobs/claim", {max: 1});
    })();</script>`;
  const browser = await chromium.launch({
    executablePath: BROWSER,
    args: ["--no-sandbox",
           "--host-resolver-rules=MAP app.example 127.0.0.1"] });
  try {
    const page = await browser.newPage();
    await page.goto(origin + "/");
    const claimed = await page.evaluate(() => window.done);
    assert.equal(claimed.messages.length, 1);
    assert.equal(claimed.messages[0].payload, "hi");
  } finally {
    await browser.close();
    site.close();
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
