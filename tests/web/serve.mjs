// Shared by the browser tests: loads playwright-core, starts the real
// `sqlq serve` (SQLQ_BIN) on a free port, and waits on conditions rather
// than sleeping.

import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";

export const BIN = process.env.SQLQ_BIN || "build/dev/sqlq";
export const BROWSER = process.env.SQLQ_CHROMIUM || "/usr/bin/chromium";
export const DEADLINE_MS = 10000;  // generous: a user would see it within a second

// A test of a file under a short key. With SQLQ_WEB_PART=key only that
// one runs: CTest runs each key as a test of its own (web.<file>.<key>),
// so that each has its own timeout on a busy machine and a failure names
// it. A key that names no test fails the run rather than passing empty.
const chosen = process.env.SQLQ_WEB_PART;
let matched = false;
process.on("exit", (code) => {
  if (chosen && !matched && code === 0) {
    console.error(`no test has the key SQLQ_WEB_PART=${chosen}`);
    process.exitCode = 1;
  }
});
export function part(key, title, fn) {
  if (chosen !== undefined && chosen !== key) return;
  matched = true;
  test(title, fn);
}

// Polls `cond` until it holds, or fails after `ms`: a wait, not a sleep.
export async function waitFor(what, cond, ms = DEADLINE_MS) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    last = await cond();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out waiting for ${what}`);
}

// Starts `sqlq serve` on a database in `dir` with the extra `args`; returns
// the process, its URL and a stop function.
export async function startServer(dir, args = []) {
  const portFile = path.join(dir, "port");
  const log = fs.openSync(path.join(dir, "server.log"), "a");
  const proc = spawn(BIN, ["--db", "sqlite:" + path.join(dir, "q.db"), "serve",
                           "--port", "0", "--port-file", portFile, ...args],
                     { stdio: ["ignore", log, log] });
  let exited = false;
  proc.on("exit", () => { exited = true; });
  const port = await waitFor("the server's port file", () => {
    if (exited) throw new Error("sqlq serve exited: " +
                                fs.readFileSync(path.join(dir, "server.log")));
    try {
      return Number(fs.readFileSync(portFile, "utf8").trim()) || null;
    } catch { return null; }
  }, 15000);
  const stop = async () => {
    proc.kill("SIGTERM");
    await new Promise((r) => proc.exitCode !== null ? r() : proc.on("exit", r));
  };
  return { proc, port, url: `http://127.0.0.1:${port}`, stop };
}

// playwright-core's chromium, or exits with what to do when it is missing.
export async function loadChromium() {
  try {
    return (await import("playwright-core")).chromium;
  } catch (e) {
    console.error("playwright-core is missing: run `npm ci` in tests/web");
    process.exit(1);
  }
}
