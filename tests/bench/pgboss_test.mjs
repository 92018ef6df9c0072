// The scorecard's pg-boss column (bench/pgboss/bench.mjs) against a real
// PostgreSQL and the real pg-boss pinned in bench/pgboss/package-lock.json
// (scripts/test.sh runs `npm ci` there): every workload runs and passes its
// own checks, pg-boss's schema is gone afterwards, and bad options get a
// clear error.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createTestDb, dropTestDb } from "../sqs/test_db.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const BENCH = join(here, "..", "..", "bench", "pgboss", "bench.mjs");
// A fresh PostgreSQL database, made and dropped by the SQS tests' helper.
const env = { ...process.env, SQLQ_SQS_ENGINE: "postgres" };

let dir, db;

before(() => {
  dir = mkdtempSync(join(tmpdir(), "sqlq-pgboss-bench-"));
  db = createTestDb(dir, env);
});

after(() => {
  if (db) dropTestDb(db, env);
  rmSync(dir, { recursive: true, force: true });
});

function bench(...args) {
  return spawnSync(process.execPath, [BENCH, ...args], {
    encoding: "utf8",
    timeout: 150_000,
  });
}

test("every workload of the pg-boss column runs, checks what it measured and cleans up", () => {
  const r = bench("--db", db, "--runs", "1", "--messages", "200", "--duration", "2", "--json");
  assert.equal(r.status, 0, r.stderr);
  const lines = r.stdout.trim().split("\n").map((l) => JSON.parse(l));
  // The names sqlq bench --scorecard gives sqlq's side of each line on
  // PostgreSQL, which scripts/bench-scorecard.sh matches them by.
  assert.deepEqual(
    lines.map((l) => l.workload),
    ["send-1", "send-100", "drain-1", "drain-10", "mixed 2+2", "send-batch x4", "workers 32+32", "publish"],
  );
  for (const l of lines) {
    assert.equal(l.bench, "pg-boss");
    assert.ok(l.msgs_per_s > 0, `${l.workload}: ${l.msgs_per_s} msgs/s`);
    assert.deepEqual(l.runs, [l.msgs_per_s]);
  }
  const left = execFileSync(
    "psql",
    ["-X", "-At", "-d", db, "-c", "SELECT count(*) FROM pg_namespace WHERE nspname = 'sqlq_bench_pgboss'"],
    { encoding: "utf8" },
  ).trim();
  assert.equal(left, "0", "pg-boss's schema is dropped at the end");
});

test("bad options are refused with what is wrong, before anything is written", () => {
  for (const [args, says] of [
    [["--db", "sqlite:/tmp/x.db"], /--db must name a PostgreSQL database/],
    [["--db", db, "--runs", "three"], /--runs: 'three' is not a whole number/],
    [["--db", db, "--duration"], /--duration needs a value/],
    [["--db", db, "--workers", "4"], /unknown option '--workers'/],
  ]) {
    const r = bench(...args);
    assert.equal(r.status, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.match(r.stderr, says);
    assert.match(r.stderr, /usage: node bench\/pgboss\/bench.mjs/);
  }
});
