// docs/openapi.json against a real validator and a real `sqlq serve`
// (SQLQ_BIN) on a fresh SQLite database with a token file:
// - the document is valid OpenAPI 3.1 (@seriousme/openapi-schema-validator),
//   and the server serves exactly that file at /openapi.json, without a token;
// - every described operation answers: one request each, with the least
//   token its x-sqlq-permission names, gets a status the operation
//   describes, counted in /metrics under the operation's own route; its
//   reply validates against the described schema, closed to fields the
//   description does not name; a token without that permission gets 403
//   (a schedule's reader 404: to it the schedule is not there), no token
//   401;
// - every route the server answers is described: every other method on each
//   described path, and paths built from the described paths' own segments,
//   answer 404 no_route or 405 method_not_allowed (405 only on a described
//   path).
// Run: `npm ci` here, then `SQLQ_BIN=build/dev/sqlq node --test
// tests/openapi/openapi_test.mjs`.

import test from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { Validator } from "@seriousme/openapi-schema-validator";
import Ajv2020Module from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";

const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;
const addFormats = addFormatsModule.default ?? addFormatsModule;

const HERE = path.dirname(fileURLToPath(import.meta.url));
const DOC_PATH = path.join(HERE, "..", "..", "docs", "openapi.json");
const DOC_TEXT = fs.readFileSync(DOC_PATH, "utf8");
const DOC = JSON.parse(DOC_TEXT);
const BIN = process.env.SQLQ_BIN || path.join(HERE, "..", "..", "build", "dev", "sqlq");
const METHODS = ["get", "post", "put", "patch", "delete"];

// Tokens, one per permission the description names.
const TOKENS = {
  admin: "admin-token-0001",
  send: "send-token-00001",
  claim: "claim-token-0001",
  metrics: "metrics-token-01",
  worker: "worker-token-001",  // send and claim, not admin
  other: "other-token-0001",   // a grant on names no test uses
};
const TOKEN_FILE = [
  `${TOKENS.admin} admin:*`, `${TOKENS.send} send:*`, `${TOKENS.claim} claim:*`,
  `${TOKENS.metrics} metrics:*`, `${TOKENS.worker} send,claim:*`,
  `${TOKENS.other} send:zzz-*`,
].join("\n") + "\n";
// The token that has just the permission, and one that lacks it.
const ALLOWED = { token: "other", any: "send", send: "send", claim: "claim",
                  admin: "admin", metrics: "metrics" };
const REFUSED = { any: "other", send: "claim", claim: "send", admin: "worker",
                  metrics: "send" };
// A schedule is seen through a grant on its queue; to a token with none,
// it is not there (docs/http-api.md, "Schedules"): refused as a missing
// one is, 404 not_found rather than 403.
const HIDDEN_WHEN_REFUSED = new Set(["GET /v1/schedules/{name}"]);

async function waitFor(what, cond, ms = 15000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const v = await cond();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function startServer() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sqlq-openapi-"));
  fs.writeFileSync(path.join(dir, "tokens"), TOKEN_FILE, { mode: 0o600 });
  const portFile = path.join(dir, "port");
  const log = fs.openSync(path.join(dir, "server.log"), "a");
  const proc = spawn(BIN, ["--db", "sqlite:" + path.join(dir, "q.db"), "serve",
                           "--port", "0", "--port-file", portFile,
                           "--tokens", path.join(dir, "tokens")],
                     { stdio: ["ignore", log, log] });
  let exited = false;
  proc.on("exit", () => { exited = true; });
  const port = await waitFor("the server's port file", () => {
    if (exited) {
      throw new Error("sqlq serve exited: " +
                      fs.readFileSync(path.join(dir, "server.log"), "utf8"));
    }
    try { return Number(fs.readFileSync(portFile, "utf8").trim()) || null; }
    catch { return null; }
  });
  const stop = async () => {
    if (!exited) {
      proc.kill("SIGTERM");
      await new Promise((r) => (exited ? r() : proc.on("exit", r)));
    }
    fs.rmSync(dir, { recursive: true, force: true });
  };
  return { url: `http://127.0.0.1:${port}`, stop };
}

// One request; the reply with its JSON (when it is JSON).
async function call(base, method, target, { token, body } = {}) {
  const headers = {};
  if (token) headers.authorization = `Bearer ${TOKENS[token]}`;
  const init = { method: method.toUpperCase(), headers };
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(base + target, init);
  const text = await res.text();
  let json;
  if ((res.headers.get("content-type") || "").startsWith("application/json")) {
    json = JSON.parse(text);
  }
  return { status: res.status, type: res.headers.get("content-type"), text, json };
}

// ---- the description, read ----

// Every operation: "GET /v1/queues/{name}" -> {method, path, op}.
const OPERATIONS = new Map();
for (const [p, item] of Object.entries(DOC.paths)) {
  for (const m of METHODS) {
    if (item[m]) OPERATIONS.set(`${m.toUpperCase()} ${p}`, { method: m, path: p, op: item[m] });
  }
}

// A path template as a matcher: integer parameters match digits only, the
// others any one segment (as the server reads them).
function matcher(template, op) {
  const params = Object.fromEntries((op.parameters || []).map((p) => [p.name, p]));
  const source = template.split("/").map((seg) => {
    const m = /^\{(.+)\}$/.exec(seg);
    if (!m) return seg.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    return params[m[1]]?.schema?.type === "integer" ? "-?[0-9]+" : "[^/]+";
  }).join("/");
  return new RegExp(`^${source}$`);
}
const MATCHERS = [...OPERATIONS.values()].map((o) => ({ ...o, re: matcher(o.path, o.op) }));
const describedMethods = (p) =>
  new Set(MATCHERS.filter((o) => o.re.test(p)).map((o) => o.method));

// JSON Schema validation of replies against the description's schemas,
// closed: an object the description lists the properties of may hold no
// others, so that a field the server sends and the description lacks fails
// here (the description itself stays open: clients ignore new fields).
function closed(node) {
  if (Array.isArray(node)) return node.map(closed);
  if (node === null || typeof node !== "object") return node;
  const out = {};
  for (const [k, v] of Object.entries(node)) out[k] = closed(v);
  if (out.type === "object" && out.properties && !("additionalProperties" in out)) {
    out.additionalProperties = false;
  }
  return out;
}
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema({ $id: "https://sqlq.invalid/openapi.json", ...closed(DOC) });
const validators = new Map();
function replySchema(key, status) {
  const { path: p, method } = OPERATIONS.get(key);
  const responses = DOC.paths[p][method].responses;
  const code = responses[String(status)] ? String(status) : "default";
  assert.ok(responses[code], `${key}: status ${status} is not described`);
  const esc = (s) => s.replace(/~/g, "~0").replace(/\//g, "~1");
  let response = responses[code];
  let pointer = `#/paths/${esc(p)}/${method}/responses/${code}`;
  if (response.$ref) {
    pointer = response.$ref;
    response = response.$ref.split("/").slice(1).reduce((o, k) => o[k], DOC);
  }
  return { response, pointer };
}
function checkReply(key, reply) {
  const { response, pointer } = replySchema(key, reply.status);
  const [type] = Object.keys(response.content || {});
  assert.ok(type, `${key}: reply ${reply.status} has no described content`);
  assert.equal(reply.type, type, `${key}: Content-Type of ${reply.status}`);
  if (type !== "application/json") return;
  const ref = `https://sqlq.invalid/openapi.json${pointer}/content/${type.replace("/", "~1")}/schema`;
  if (!validators.has(ref)) validators.set(ref, ajv.compile({ $ref: ref }));
  const validate = validators.get(ref);
  assert.ok(validate(reply.json),
            `${key} ${reply.status}: the reply does not match its schema: ` +
            `${ajv.errorsText(validate.errors)}\n${reply.text.slice(0, 2000)}`);
}

// ---- the server's own route names, from /metrics ----

async function routeCounts(base) {
  const r = await call(base, "get", "/metrics", { token: "metrics" });
  assert.equal(r.status, 200);
  const counts = new Map();
  const re = /^sqlq_http_request_duration_seconds_count\{route="([^"]*)",status="[^"]*"\} (\d+)$/gm;
  for (const [, route, n] of r.text.matchAll(re)) {
    counts.set(route, (counts.get(route) || 0) + Number(n));
  }
  return counts;
}

// ---- one request per operation, in an order that gives each its data ----

const FUTURE = new Date(Date.now() + 3600e3).toISOString();
const STEPS = [
  ["GET /healthz", () => ({})],
  ["GET /readyz", () => ({})],
  ["GET /openapi.json", () => ({})],
  ["POST /v1/queues/{name}", () => ({ p: { name: "q1" }, body: { archive: true, max_attempts: 2, labels: { team: "a" } }, status: 201 })],
  ["GET /v1/queues", () => ({})],
  ["GET /v1/queues/{name}", () => ({ p: { name: "q1" } })],
  ["PATCH /v1/queues/{name}", () => ({ p: { name: "q1" }, body: { lease_ms: 60000, max_leased: 100 } })],
  ["POST /v1/queues/{name}/pause", () => ({ p: { name: "q1" } })],
  ["POST /v1/queues/{name}/resume", () => ({ p: { name: "q1" } })],
  ["POST /v1/queues/{name}/messages", () => ({
    p: { name: "q1" },
    body: { messages: [
      { payload_base64: "/wA=", priority: 9 },
      { payload: { to: "ada@example.com" }, headers: { tenant: "acme" }, group: "g1", priority: 8 },
      { payload: "later", delay_ms: 3600000, dedup: "k1" },
      { payload: "four" }, { payload: "five" }, { payload: "six" }] },
    then: (ctx, r) => { ctx.ids = r.json.ids; } })],
  ["POST /v1/queues/{name}/claim", () => ({
    p: { name: "q1" }, body: { max: 2, lease_ms: 30000, worker: "w1" },
    then: (ctx, r) => {
      assert.equal(r.json.messages.length, 2);
      ctx.receipts = r.json.messages.map((m) => m.receipt);
    } })],
  ["POST /v1/queues/{name}/extend", (ctx) => ({ p: { name: "q1" }, body: { receipt: ctx.receipts[0], lease_ms: 60000 } })],
  ["POST /v1/queues/{name}/progress", (ctx) => ({ p: { name: "q1" }, body: { receipt: ctx.receipts[0], progress: 50, note: { step: "resize" } } })],
  ["POST /v1/queues/{name}/ack", (ctx) => ({ p: { name: "q1" }, body: { receipts: [ctx.receipts[0], "bogus"] },
                                             then: (c, r) => assert.equal(r.json.acked, 1) })],
  ["GET /v1/queues/{name}/messages/{id}/result", (ctx) => ({ p: { name: "q1", id: ctx.ids[0] }, q: "?wait_ms=1000",
                                                            then: (c, r) => {
                                                              assert.equal(r.json.state, "completed");
                                                              assert.equal(r.json.progress, 50);
                                                              assert.deepEqual(r.json.note, { step: "resize" });
                                                            } })],
  ["POST /v1/queues/{name}/nack", (ctx) => ({ p: { name: "q1" }, body: { receipt: ctx.receipts[1], error: "smtp 451", delay_ms: 0 } })],
  ["GET /v1/queues/{name}/messages", () => ({ p: { name: "q1" }, q: "?state=ready&limit=2",
                                              then: (c, r) => assert.ok(r.json.messages.length > 0) })],
  ["GET /v1/queues/{name}/messages/count", () => ({ p: { name: "q1" }, q: "?header=tenant%3Dacme" })],
  ["GET /v1/queues/{name}/messages/{id}", (ctx) => ({ p: { name: "q1", id: ctx.ids[1] } })],
  ["POST /v1/queues/{name}/messages/{id}/priority", (ctx) => ({ p: { name: "q1", id: ctx.ids[2] }, body: { priority: 3 } })],
  ["POST /v1/queues/{name}/messages/{id}/reschedule", (ctx) => ({ p: { name: "q1", id: ctx.ids[2] }, body: { run_at: FUTURE } })],
  ["POST /v1/queues/{name}/messages/{id}/retry", (ctx) => ({ p: { name: "q1", id: ctx.ids[2] } })],
  ["POST /v1/queues/{name}/messages/{id}/cancel", (ctx) => ({ p: { name: "q1", id: ctx.ids[3] } })],
  ["POST /v1/queues/{name}/messages/priority", (ctx) => ({ p: { name: "q1" }, body: { ids: [ctx.ids[4]], priority: 1 } })],
  ["POST /v1/queues/{name}/messages/reschedule", (ctx) => ({ p: { name: "q1" }, body: { ids: [ctx.ids[4]], run_at: FUTURE } })],
  ["POST /v1/queues/{name}/messages/retry", () => ({ p: { name: "q1" }, body: { filter: { state: "delayed" } } })],
  ["POST /v1/queues/{name}/messages/cancel", (ctx) => ({ p: { name: "q1" }, body: { ids: [ctx.ids[5]] } })],
  ["GET /v1/queues/{name}/dead", () => ({ p: { name: "q1" }, q: "?limit=10&after_id=0",
                                          then: (c, r) => assert.equal(r.json.dead.length, 2) })],
  ["POST /v1/queues/{name}/dead/redrive", (ctx) => ({ p: { name: "q1" }, body: { ids: [ctx.ids[3]] } })],
  ["DELETE /v1/queues/{name}/dead", () => ({ p: { name: "q1" } })],
  ["GET /v1/queues/{name}/archive", () => ({ p: { name: "q1" }, q: "?limit=10",
                                             then: (c, r) => assert.equal(r.json.archive.length, 1) })],
  ["GET /v1/queues/{name}/history", () => ({ p: { name: "q1" } })],
  ["POST /v1/queues/{name}/messages/delete", (ctx) => ({ p: { name: "q1" }, body: { ids: [ctx.ids[4]] } })],
  ["DELETE /v1/queues/{name}/messages/{id}", (ctx) => ({ p: { name: "q1", id: ctx.ids[1] } })],
  ["POST /v1/rings/{name}", () => ({ p: { name: "r1" }, body: { capacity: 5 }, status: 201 })],
  ["GET /v1/rings", () => ({})],
  ["GET /v1/rings/{name}", () => ({ p: { name: "r1" } })],
  ["POST /v1/rings/{name}/groups/{group}", () => ({ p: { name: "r1", group: "article 1" }, body: { payload: "ada" },
                                                    then: (ctx, r) => { ctx.seq = r.json.seq; } })],
  ["GET /v1/rings/{name}/groups/{group}", () => ({ p: { name: "r1", group: "article 1" }, q: "?limit=10&order=oldest&after_seq=0" })],
  ["GET /v1/rings/{name}/groups", () => ({ p: { name: "r1" } })],
  ["DELETE /v1/rings/{name}/groups/{group}/{seq}", (ctx) => ({ p: { name: "r1", group: "article 1", seq: ctx.seq } })],
  ["DELETE /v1/rings/{name}/groups/{group}", () => ({ p: { name: "r1", group: "article 1" } })],
  ["POST /v1/rotations/{name}", () => ({ p: { name: "t1" }, body: { max_failures: 2 }, status: 201 })],
  ["GET /v1/rotations", () => ({})],
  ["GET /v1/rotations/{name}", () => ({ p: { name: "t1" } })],
  ["POST /v1/rotations/{name}/items", () => ({ p: { name: "t1" }, body: { key: "smtp 1", payload: "10.0.0.1:25" }, status: 201 })],
  ["GET /v1/rotations/{name}/items", () => ({ p: { name: "t1" } })],
  ["POST /v1/rotations/{name}/next", () => ({ p: { name: "t1" }, body: { n: 1 } })],
  ["POST /v1/rotations/{name}/items/{key}/fail", () => ({ p: { name: "t1", key: "smtp 1" } })],
  ["POST /v1/rotations/{name}/items/{key}/ok", () => ({ p: { name: "t1", key: "smtp 1" } })],
  ["POST /v1/rotations/{name}/items/{key}/reset", () => ({ p: { name: "t1", key: "smtp 1" } })],
  ["POST /v1/schedules/{name}", () => ({ p: { name: "s1" }, body: { cron: "30 9 * * mon-fri", queue: "q1", payload: { report: "daily" } }, status: 201 })],
  ["GET /v1/schedules", () => ({})],
  ["GET /v1/schedules/{name}", () => ({ p: { name: "s1" } })],
  ["POST /v1/schedules/{name}/pause", () => ({ p: { name: "s1" } })],
  ["POST /v1/schedules/{name}/resume", () => ({ p: { name: "s1" } })],
  ["POST /v1/topics/{name}", () => ({ p: { name: "p1" }, status: 201 })],
  ["GET /v1/topics", () => ({})],
  ["PUT /v1/topics/{name}/subscriptions/{queue}", () => ({ p: { name: "p1", queue: "q1" }, body: { filter: { tenant: "acme" } },
                                                          status: 201 })],
  ["GET /v1/topics/{name}/subscriptions", () => ({ p: { name: "p1" } })],
  ["POST /v1/topics/{name}/messages", () => ({ p: { name: "p1" }, body: { payload: "news", headers: { tenant: "acme" } },
                                               then: (c, r) => assert.equal(r.json.count, 1) })],
  ["DELETE /v1/topics/{name}/subscriptions/{queue}", () => ({ p: { name: "p1", queue: "q1" } })],
  ["PUT /v1/workers/{worker}", () => ({ p: { worker: "web-1:42:ab" }, body: {
    name: "mailer", host: "web-1", pid: 42, queues: ["q1"], kinds: ["email.send"], concurrency: 2,
    jobs: [{ queue: "q1", id: 1, since: FUTURE }], started_at: FUTURE, ttl_ms: 30000 } })],
  ["GET /v1/workers", () => ({ q: "?queue=q1" })],
  ["DELETE /v1/workers/{worker}", () => ({ p: { worker: "web-1:42:ab" } })],
  ["GET /v1/all", () => ({})],
  ["GET /v1/overview", () => ({})],
  ["GET /metrics", () => ({})],
  ["POST /v1/queues/{name}/purge", () => ({ p: { name: "q1" } })],
  // Drops last; the paths' objects stay for the probes (made again below).
  ["DELETE /v1/rotations/{name}/items/{key}", () => ({ p: { name: "t1", key: "smtp 1" } })],
  ["DELETE /v1/schedules/{name}", () => ({ p: { name: "s1" } })],
  ["POST /v1/messages", () => ({
    body: { messages: [{ queue: "q1", payload: "fetch" },
                       { queue: "q1", payload: "resize", depends_on_batch: [0], if_dependency_dies: "run" }] },
    then: (ctx, r) => { assert.equal(r.json.ids.length, 2); ctx.flow = r.json.ids; } })],
  ["GET /v1/queues/{name}/messages/{id}/dependencies", (ctx) => ({ p: { name: "q1", id: ctx.flow[1] },
                                                                  then: (c, r) => assert.deepEqual(r.json, {
                                                                    parents: [{ queue: "q1", id: c.flow[0], dead: false }],
                                                                    dependents: [], more_dependents: false }) })],
  ["POST /v1/batches", () => ({
    body: { id: "b1", members: [{ queue: "q1", payload: "part 1" }, { queue: "q1", payload: "part 2" }],
            callback: { queue: "q1", payload: "all parts done" }, retention_ms: 60000 },
    status: 201, then: (ctx, r) => assert.equal(r.json.members.length, 2) })],
  ["GET /v1/batches/{batch}", () => ({ p: { batch: "b1" }, then: (c, r) => assert.equal(r.json.pending, 2) })],
  ["POST /v1/batches/{batch}/cancel", () => ({ p: { batch: "b1" },
                                              then: (c, r) => assert.deepEqual([r.json.cancelled, r.json.done], [2, true]) })],
  ["DELETE /v1/rotations/{name}", () => ({ p: { name: "t1" } })],
  ["DELETE /v1/rings/{name}", () => ({ p: { name: "r1" } })],
  ["DELETE /v1/topics/{name}", () => ({ p: { name: "p1" } })],
  ["DELETE /v1/queues/{name}", () => ({ p: { name: "q1" } })],
];

// The target of an operation's path with its parameters filled in.
function fill(template, params = {}) {
  return template.replace(/\{([^}]+)\}/g, (_, k) => {
    assert.ok(k in params, `${template}: no value for {${k}}`);
    return encodeURIComponent(String(params[k]));
  });
}

test("the description is valid OpenAPI 3.1", async () => {
  const validator = new Validator();
  const result = await validator.validate(structuredClone(DOC));
  assert.equal(validator.version, "3.1");
  assert.ok(result.valid, JSON.stringify(result.errors, null, 2));
  // The validator can fail: a response without its description is refused.
  const broken = structuredClone(DOC);
  delete broken.paths["/healthz"].get.responses["200"].description;
  assert.equal((await new Validator().validate(broken)).valid, false);
});

test("the description covers every operation once, each with its permission", () => {
  assert.deepEqual([...OPERATIONS.keys()].sort(), STEPS.map(([k]) => k).sort(),
                   "the steps below are one per described operation");
  for (const [key, { op }] of OPERATIONS) {
    assert.ok(op.operationId && op.summary, key);
    const perm = op["x-sqlq-permission"];
    assert.ok(perm === "none" || perm in ALLOWED, `${key}: x-sqlq-permission ${perm}`);
    assert.equal(perm === "none", Array.isArray(op.security) && op.security.length === 0,
                 `${key}: security matches x-sqlq-permission`);
    assert.ok(op.responses.default, `${key}: every error is described`);
  }
});

test("the server and its description agree", async (t) => {
  const server = await startServer();
  t.after(server.stop);
  const base = server.url;

  await t.test("serves the description, without a token", async () => {
    const r = await call(base, "get", "/openapi.json");
    assert.equal(r.status, 200);
    assert.equal(r.type, "application/json");
    assert.ok(r.text === DOC_TEXT,
              `the served document (${r.text.length} bytes) is not docs/openapi.json ` +
              `(${DOC_TEXT.length} bytes): rebuild sqlq`);
    assert.equal(DOC.servers[0].url, "http://127.0.0.1:8080");
  });

  await t.test("HEAD is described where it answers, as GET without the body", async () => {
    const heads = Object.keys(DOC.paths).filter((p) => DOC.paths[p].head);
    assert.deepEqual(heads.sort(), ["/healthz", "/readyz"]);
    for (const p of heads) {
      const get = await fetch(base + p);
      const text = await get.text();
      const head = await fetch(base + p, { method: "HEAD" });
      assert.equal(head.status, get.status, p);
      assert.ok(DOC.paths[p].head.responses[String(head.status)], `${p}: HEAD ${head.status} is described`);
      assert.equal(head.headers.get("content-type"), get.headers.get("content-type"), p);
      assert.equal(head.headers.get("content-length"), String(Buffer.byteLength(text)), p);
      assert.equal(await head.text(), "", p);
    }
  });

  await t.test("every described operation answers as described", async () => {
    const ctx = {};
    for (const [key, step] of STEPS) {
      const { method, path: p, op } = OPERATIONS.get(key);
      const perm = op["x-sqlq-permission"];
      const s = step(ctx);
      const target = fill(p, s.p) + (s.q || "");
      const body = s.body ?? (op.requestBody?.required ? {} : undefined);
      if (perm !== "none") {
        const anonymous = await call(base, method, target, { body });
        assert.equal(anonymous.status, 401, `${key} without a token: ${anonymous.text}`);
        checkReply(key, anonymous);
        if (REFUSED[perm]) {
          const refused = await call(base, method, target, { token: REFUSED[perm], body });
          const hidden = HIDDEN_WHEN_REFUSED.has(key);
          assert.equal(refused.status, hidden ? 404 : 403,
                       `${key} with the ${REFUSED[perm]} token: ${refused.text}`);
          assert.equal(refused.json.error.code, hidden ? "not_found" : "forbidden");
          checkReply(key, refused);
        }
      }
      const before = await routeCounts(base);
      const r = await call(base, method, target,
                           { token: perm === "none" ? undefined : ALLOWED[perm], body });
      const after = await routeCounts(base);
      assert.equal(r.status, s.status || 200, `${key} ${target}: ${r.text.slice(0, 500)}`);
      checkReply(key, r);
      // Counted under its own route: the server's name for it is the path.
      const grew = [...after].filter(([route, n]) => route !== "GET /metrics" &&
                                                      n > (before.get(route) || 0))
                             .map(([route]) => route);
      assert.deepEqual(grew, key === "GET /metrics" ? [] : [key], `${key}: the route /metrics counted`);
      if (s.then) s.then(ctx, r);
    }
  });

  await t.test("described errors: their status and schema", async () => {
    await call(base, "post", "/v1/queues/e1", { token: "admin" });
    const cases = [
      ["POST /v1/queues/{name}/claim", "post", "/v1/queues/e1/claim", { wait_ms: 3600000 }, 400, "wait_too_long"],
      ["POST /v1/queues/{name}/claim", "post", "/v1/queues/e1/claim", { max: 0 }, 400, "invalid_argument"],
      ["POST /v1/queues/{name}/claim", "post", "/v1/queues/e1/claim", { mx: 1 }, 400, "unknown_field"],
      ["POST /v1/queues/{name}/messages", "post", "/v1/queues/e1/messages", { body: "x" }, 400, "unknown_field"],
      ["POST /v1/queues/{name}/messages", "post", "/v1/queues/e1/messages", {}, 400, "invalid_argument"],
      ["GET /v1/queues/{name}", "get", "/v1/queues/nope", undefined, 404, "not_found"],
      ["POST /v1/queues/{name}", "post", "/v1/queues/e1", {}, 409, "already_exists"],
      ["GET /v1/queues/{name}/messages/{id}", "get", "/v1/queues/e1/messages/999999", undefined, 404, "not_found"],
      ["POST /v1/queues/{name}/ack", "post", "/v1/queues/e1/ack", { receipt: "1-1-0000000000000000" }, 400, "invalid_argument"],
    ];
    for (const [key, method, target, body, status, code] of cases) {
      const r = await call(base, method, target, { token: "admin", body });
      assert.equal(r.status, status, `${key}: ${r.text}`);
      assert.equal(r.json.error.code, code);
      checkReply(key, r);
    }
  });

  await t.test("every route the server answers is described", async () => {
    // The objects the paths name, so that a route answers rather than say
    // the object is missing.
    const admin = { token: "admin" };
    await call(base, "post", "/v1/queues/q1", admin);
    const sent = await call(base, "post", "/v1/queues/q1/messages",
                            { ...admin, body: { messages: [{ payload: "x" }] } });
    await call(base, "post", "/v1/rings/r1", admin);
    await call(base, "post", "/v1/rotations/t1", admin);
    await call(base, "post", "/v1/rotations/t1/items", { ...admin, body: { key: "k1" } });
    await call(base, "post", "/v1/schedules/s1", { ...admin, body: { cron: "0 0 * * *", queue: "q1", payload: "x" } });
    await call(base, "put", "/v1/workers/w1", { ...admin, body: { queues: ["q1"] } });
    await call(base, "post", "/v1/topics/p1", admin);
    await call(base, "put", "/v1/topics/p1/subscriptions/q1", admin);
    await call(base, "post", "/v1/batches", { ...admin, body: { id: "b2", members: [{ queue: "q1", payload: "x" }],
                                                               callback: { queue: "q1", payload: "y" } } });
    const values = { name: "q1", id: sent.json.ids[0], group: "g1", seq: 1, key: "k1", worker: "w1", queue: "q1",
                     batch: "b2" };
    const named = { "/v1/rings/": "r1", "/v1/rotations/": "t1", "/v1/schedules/": "s1", "/v1/topics/": "p1" };
    const instance = (p) => {
      const prefix = Object.keys(named).find((k) => p.startsWith(k));
      return fill(p, { ...values, name: prefix ? named[prefix] : values.name });
    };
    const paths = [...new Set(MATCHERS.map((o) => instance(o.path)))];
    const literals = [...new Set(Object.keys(DOC.paths).flatMap((p) => p.split("/"))
                                   .filter((s) => s && !s.startsWith("{")))];
    // Probes: every method on each described path, then each described path
    // with a real segment added or a literal segment swapped for another.
    const probes = [];
    for (const p of paths) for (const m of METHODS) probes.push([m, p, true]);
    for (const p of paths) {
      const segs = p.split("/");
      for (const lit of literals) {
        probes.push(["get", `${p}/${lit}`], ["post", `${p}/${lit}`]);
        segs.forEach((s, i) => {
          if (!literals.includes(s) || s === lit) return;
          const swapped = segs.map((x, j) => (j === i ? lit : x)).join("/");
          probes.push(["get", swapped], ["post", swapped]);
        });
      }
    }
    probes.push(["get", "/v1"], ["get", "/v2/queues"], ["get", "/openapi.yaml"]);
    const before = await routeCounts(base);
    const seen = new Set();
    const todo = probes.filter(([m, p]) => {
      if (seen.has(m + " " + p)) return false;
      seen.add(m + " " + p);
      return !describedMethods(decodeURIComponent(p)).has(m);  // those answered above
    });
    const undescribed = todo.length;
    const isError = ajv.compile({ $ref: "https://sqlq.invalid/openapi.json#/components/schemas/Error" });
    // Eight clients at once: the probes only read.
    const check = async ([m, p, exact]) => {
      const methods = describedMethods(decodeURIComponent(p));
      const r = await call(base, m, p, admin);
      if (methods.size > 0 && !exact && r.status === 404) {
        // A described path naming an object that does not exist (a
        // segment swapped in for another): the object is missing.
        assert.equal(r.json.error.code, "not_found", `${m.toUpperCase()} ${p}: ${r.text}`);
      } else if (methods.size > 0) {
        assert.equal(r.status, 405, `${m.toUpperCase()} ${p}: ${r.text}`);
        assert.equal(r.json.error.code, "method_not_allowed");
      } else {
        assert.equal(r.status, 404, `${m.toUpperCase()} ${p} is not described, yet: ${r.status} ${r.text}`);
        assert.equal(r.json.error.code, "no_route", `${m.toUpperCase()} ${p}: ${r.text}`);
      }
      assert.ok(isError(r.json), `${p}: ${ajv.errorsText(isError.errors)}`);
    };
    let next = 0;
    await Promise.all(Array.from({ length: 8 }, async () => {
      while (next < todo.length) await check(todo[next++]);
    }));
    assert.ok(undescribed > 1000, `${undescribed} probes`);
    // None of them ran a handler: no route but "unmatched" and the 405s'
    // own was counted.
    const after = await routeCounts(base);
    for (const [route, n] of after) {
      if (n === (before.get(route) || 0) || route === "GET /metrics") continue;
      const [m, p] = route.split(" ");
      assert.ok(route === "unmatched" || OPERATIONS.has(route) || DOC.paths[p]?.[m.toLowerCase()],
                `route ${route} is not described`);
    }
    console.log(`# ${undescribed} undescribed method and path probes answered no_route or 405`);
  });
});
