// A fresh database for a Node.js test, made and dropped by the Python
// tests' helper (test_db.py) on the engine SQLQ_SQS_ENGINE names (SQLite by
// default). When that engine's server is not there and not required, the
// test ends at once as skipped (exit 0 with a note).
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const TEST_DB = join(dirname(fileURLToPath(import.meta.url)), "test_db.py");

// The URL of a new, empty database (SQLite: a file in `dir`).
export function createTestDb(dir, env = process.env) {
  try {
    return execFileSync("/usr/bin/python3", [TEST_DB, "create", dir], {
      encoding: "utf8",
      env,
    }).trim();
  } catch (e) {
    if (e.status === 77) {
      // The engine's server is not there, and not required.
      console.log(`# skipped: ${e.stderr}`);
      process.exit(0);
    }
    throw e;
  }
}

// Drops a database createTestDb made.
export function dropTestDb(url, env = process.env) {
  execFileSync("/usr/bin/python3", [TEST_DB, "drop", url], { env });
}
