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
#
# With PostgreSQL measured, pg-boss runs the same workloads on the same
# server afterwards (bench/pgboss/bench.mjs; pg-boss pinned in its
# package-lock.json, installed here with `npm ci`), and the table gains a
# column of sqlq on PostgreSQL against pg-boss. SQLQ_SCORECARD_PGBOSS=0
# leaves it out (it needs Node.js and the npm registry).
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
  if [[ $engine == postgres && "${SQLQ_SCORECARD_PGBOSS:-1}" != 0 ]]; then
    # The options pg-boss's bench shares with sqlq bench's scorecard.
    shared=()
    args=("$@")
    for ((i = 0; i < ${#args[@]}; i++)); do
      case "${args[i]}" in
        --runs | --messages | --duration) shared+=("${args[i]}" "${args[i + 1]:-}") ;;
        --runs=* | --messages=* | --duration=*)
          shared+=("${args[i]%%=*}" "${args[i]#*=}") ;;
      esac
    done
    echo "bench-scorecard: pg-boss on the same PostgreSQL..." >&2
    (cd bench/pgboss && npm ci --no-audit --no-fund --silent)
    node bench/pgboss/bench.mjs --json --db "$SQLQ_TEST_PG_URL" \
      "${shared[@]}" >"$work/pgboss.json"
  fi
done

python3 - "$work" $engines <<'PY'
import json, os, sys
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
# pg-boss's figures, by the name sqlq's side of a line has on PostgreSQL
# (the three drain-1 lines share pg-boss's one drain-1).
pgboss = {}
if "postgres" in engines and os.path.exists(f"{work}/pgboss.json"):
    with open(f"{work}/pgboss.json") as f:
        for raw in f:
            j = json.loads(raw)
            pgboss[j["workload"]] = j["msgs_per_s"]
heads = [names[e] for e in engines] + (["PostgreSQL vs pg-boss"] if pgboss else [])
print("| workload | " + " | ".join(heads) + " |")
print("|---|" + "---|" * len(heads))
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
        if "skipped" in j:
            cells.append("–")
            continue
        cells.append(f"{j['msgs_per_s']:,} / {j['yardstick_msgs_per_s']:,} "
                     f"= {j['ratio']:.2f}")
    if pgboss:
        j = lines["postgres"][i]
        # Lines with ack_flush=off have no pg-boss counterpart (its
        # completions wait for the disk).
        theirs = None if "ack_flush" in j["sqlq"] else pgboss.get(
            j["sqlq"].split(" --ack")[0])
        cells.append(f"{j['msgs_per_s']:,} / {theirs:,} = "
                     f"{j['msgs_per_s'] / theirs:.1f}" if theirs else "–")
    print(f"| {label} | " + " | ".join(cells) + " |")
print()
print("fsync/s: " + ", ".join(
    f"{names[e]} {env[e]['fsync_per_s']:,}" for e in engines if e in env) +
    f"; median of {env[engines[0]]['runs']} runs.")
PY
