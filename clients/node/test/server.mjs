// Starts the real `sqlq serve` (SQLQ_BIN) on a fresh SQLite database in a
// temporary directory, on a free port, and waits on conditions, not sleeps.

import { before, after } from "node:test";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const BIN = process.env.SQLQ_BIN ||
  path.resolve(here, "../../../build/dev/sqlq");
export const DEADLINE_MS = 20000;

// Polls `cond` until it gives a truthy value, or fails after `ms`.
export async function waitFor(what, cond, ms = DEADLINE_MS) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// Every directory made here goes when the test process ends (its servers
// are stopped by then).
const made = [];
process.on("exit", () => {
  for (const dir of made) fs.rmSync(dir, { recursive: true, force: true });
});

export function tempDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sqlq-node-"));
  made.push(dir);
  return dir;
}

// A server on `dir`/q.db. `port` 0 picks a free one; restart() starts it
// again on the same port and database.
export async function startServer(dir = tempDir(), { port = 0, args = [] } = {}) {
  const portFile = path.join(dir, "port");
  fs.rmSync(portFile, { force: true });
  const logPath = path.join(dir, "server.log");
  const log = fs.openSync(logPath, "a");
  const proc = spawn(BIN, ["--db", "sqlite:" + path.join(dir, "q.db"), "serve",
                           "--port", String(port), "--port-file", portFile, ...args],
                     { stdio: ["ignore", log, log] });
  fs.closeSync(log);
  let exited = false;
  const exit = new Promise((r) => proc.on("exit", () => { exited = true; r(); }));
  const got = await waitFor("the server's port file", () => {
    if (exited) throw new Error("sqlq serve exited: " + fs.readFileSync(logPath, "utf8"));
    try {
      return Number(fs.readFileSync(portFile, "utf8").trim()) || null;
    } catch { return null; }
  });
  const server = {
    dir, proc, port: got, url: `http://127.0.0.1:${got}`,
    async kill(signal = "SIGKILL") {
      if (!exited) proc.kill(signal);
      await exit;
    },
    async stop() { await server.kill("SIGTERM"); },
    async restart() {
      return startServer(dir, { port: got, args });
    },
    log() { return fs.readFileSync(logPath, "utf8"); },
  };
  return server;
}

// The server and client of a test file's tests: `useServer(makeClient)`
// starts them before the tests and stops them after; the file imports
// `server` and `client`, set once the tests run.
export let server, client;
export function useServer(makeClient) {
  before(async () => {
    server = await startServer();
    client = makeClient(server.url);
  });
  after(async () => {
    client?.close();
    await server?.stop();
  });
}

// A logger that keeps what a worker logs: [{level, msg, fields}].
export function captureLogger() {
  const lines = [];
  const at = (level) => (msg, fields) => lines.push({ level, msg, fields });
  return { lines, logger: { info: at("info"), warn: at("warn"), error: at("error") } };
}
