#!/usr/bin/env bash
# The table docs/benchmarks.md opens with, in one command: `sqlq bench
# --scorecard` on SQLite, PostgreSQL and MariaDB, one engine after the
# other, merged into one Markdown table (sqlq / yardstick = ratio, a column
# per engine) with each engine's fsync rate.
#
#   scripts/bench-scorecard.sh [--runs N] [other sqlq bench options]
#
# The servers are throwaway ones this script starts and stops
# (scripts/pg-test-server.sh, scripts/mariadb-test-server.sh) unless
# SQLQ_TEST_PG_URL or SQLQ_TEST_MYSQL_URL names one (its user must be
# allowed to create queues in that database). SQLQ_BENCH names the bench
# program (default: build/release/sqlq-bench, else `sqlq bench`);
# SQLQ_SCORECARD_ENGINES="sqlite postgres" measures fewer engines. The
# machine should be otherwise idle: every figure is a ratio within one
# engine's run, but the runs take a few minutes each.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -n "${SQLQ_BENCH:-}" ]]; then
  read -r -a bench <<<"$SQLQ_BENCH"
elif [[ -x build/release/sqlq-bench ]]; then
  bench=(build/release/sqlq-bench)
else
  bench=(sqlq bench)
fi
engines="${SQLQ_SCORECARD_ENGINES:-sqlite postgres mysql}"

work="$(mktemp -d)"
pg_dir="" my_dir=""
cleanup() {
  if [[ -n "$pg_dir" ]]; then ./scripts/pg-test-server.sh stop "$pg_dir"; fi
  if [[ -n "$my_dir" ]]; then
    ./scripts/mariadb-test-server.sh stop "$my_dir"
  fi
  rm -rf "$work"
}
trap cleanup EXIT

for engine in $engines; do
  case "$engine" in
    sqlite) db=() ;;
    postgres)
      if [[ -z "${SQLQ_TEST_PG_URL:-}" ]]; then
        eval "$(./scripts/pg-test-server.sh start)"
        pg_dir="$SQLQ_TEST_PG_DIR"
      fi
      db=(--db "$SQLQ_TEST_PG_URL") ;;
    mysql)
      if [[ -z "${SQLQ_TEST_MYSQL_URL:-}" ]]; then
        eval "$(./scripts/mariadb-test-server.sh start)"
        my_dir="$SQLQ_TEST_MYSQL_DIR"
      fi
      db=(--db "$SQLQ_TEST_MYSQL_URL") ;;
    *)
      echo "bench-scorecard: unknown engine '$engine' (sqlite, postgres, mysql)" >&2
      exit 2 ;;
  esac
  echo "bench-scorecard: $engine..." >&2
  "${bench[@]}" --scorecard --json "${db[@]}" "$@" >"$work/$engine.json"
done

python3 - "$work" $engines <<'PY'
import json, sys
work, engines = sys.argv[1], sys.argv[2:]
names = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB"}
lines, env = {}, {}
for e in engines:
    lines[e] = []
    with open(f"{work}/{e}.json") as f:
        for raw in f:
            j = json.loads(raw)
            if j.get("bench") == "environment":
                env[e] = j
            elif j.get("bench") == "scorecard" and "scorecard" in j:
                lines[e].append(j)
print("| workload | " + " | ".join(names[e] for e in engines) + " |")
print("|---|" + "---|" * len(engines))
for i in range(len(lines[engines[0]])):
    # The same line on every engine; the workers' line names each engine's
    # number of workers.
    labels = []
    for e in engines:
        if lines[e][i]["scorecard"] not in labels:
            labels.append(lines[e][i]["scorecard"])
    label = " / ".join(labels)
    cells = []
    for e in engines:
        j = lines[e][i]
        cells.append(f"{j['msgs_per_s']:,} / {j['yardstick_msgs_per_s']:,} "
                     f"= {j['ratio']:.2f}")
    print(f"| {label} | " + " | ".join(cells) + " |")
print()
print("fsync/s: " + ", ".join(
    f"{names[e]} {env[e]['fsync_per_s']:,}" for e in engines if e in env) +
    f"; median of {env[engines[0]]['runs']} runs.")
PY
