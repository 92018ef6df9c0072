#!/usr/bin/env bash
# Every node of a Galera cluster crashes at once (scripts/ha-lab.sh fault
# all-kill, docs/ha-lab.md) while clients write: does the cluster that heal
# brings back still have every write it acknowledged?
#
#   tests/ha/all_kill_test.sh galera          # must lose nothing
#   tests/ha/all_kill_test.sh galera-unsafe   # negative control: must lose
#
# Several writers insert rows through SQLQ_HA_URL, each over one mariadb
# session in autocommit, one row per statement, and record the id of every
# INSERT the server acknowledged (a SELECT of the id that runs only once the
# INSERT has returned OK). Once each has some acknowledged, all-kill crashes
# every node; heal bootstraps the cluster from the most advanced node.
#
# - galera (innodb_flush_log_at_trx_commit=1): every acknowledged row must be
#   on every node.
# - galera-unsafe (--unsafe-flush, innodb_flush_log_at_trx_commit=0): InnoDB
#   writes its log only about once a second, from a buffer inside mariadbd,
#   so the crash loses the commits of that last second on every node. The
#   test passes only if it sees an acknowledged row gone: a check that does
#   not see that loss would not see any.
#
# Needs root; without it the test is skipped (exit 77), or fails when
# SQLQ_REQUIRE_HA=1. SQLQ_HA_WRITERS sets the number of writers (default 4).
set -euo pipefail
shopt -s inherit_errexit

kind="${1:?usage: $0 galera|galera-unsafe}"
lab="$(cd "$(dirname "$0")/../.." && pwd)/scripts/ha-lab.sh"
writers="${SQLQ_HA_WRITERS:-4}"
# Acknowledged rows each writer has before the crash: the crash then hits
# writers in full flow, after several seconds of writing (about 3 s at the
# 2,400 rows/s four writers reach here), so that InnoDB's once-a-second log
# write has run several times and only its last second is at stake.
warm=2000

# shellcheck source=tests/ha/lab_test_lib.sh
source "$(dirname "$0")/lab_test_lib.sh"

case "$kind" in
  galera) start_args=(galera) ;;
  galera-unsafe) start_args=(galera --unsafe-flush) ;;
  *) fail "usage: $0 galera|galera-unsafe" ;;
esac
skip_unless_root

work="$(mktemp -d /tmp/sqlq-allkill-XXXXXX)"
wpids=()
cleanup() {
  local p
  for p in "${wpids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [[ -n "${SQLQ_HA_DIR:-}" ]]; then "$lab" stop "$SQLQ_HA_DIR"; fi
  rm -rf "$work"
}
trap cleanup EXIT

t="$(now)"
eval "$("$lab" start "${start_args[@]}")"
echo "start: $(since "$t") s"
id="${SQLQ_HA_DIR##*-}"
hostport="${SQLQ_HA_URL#*@}"
hostport="${hostport%%/*}"
password="${SQLQ_HA_URL#mysql://sqlq:}"
password="${password%%@*}"
client=(mariadb --no-defaults -P 3306 -usqlq -p"$password" --connect-timeout=2 -NB)
# $1: the host.
sql_at() {
  local host="$1"
  shift
  timeout 20 "${client[@]}" -h "$host" sqlq -e "$*"
}

sql_at "${hostport%:*}" "CREATE TABLE acked (id bigint PRIMARY KEY, w int NOT NULL)"

# Writer $1: ids $1 * 10^9 + 1, 2, ... over one session until it fails.
# --unbuffered: each acknowledged id reaches the file at once; without
# --force the client stops at the first error, and --skip-reconnect keeps a
# lost session lost.
writer() {
  local w="$1"
  awk -v w="$w" 'BEGIN {
    print "SET autocommit = 1;"
    for (i = 1; ; i++) {
      id = w * 1000000000 + i
      printf "INSERT INTO acked VALUES (%d, %d);\nSELECT %d;\n", id, w, id
    }
  }' | "${client[@]}" --unbuffered --skip-reconnect -h "${hostport%:*}" sqlq \
    >"$work/acked.$w" 2>"$work/writer.$w.err" || true
}
tw="$(now)"
for w in $(seq 1 "$writers"); do
  writer "$w" &
  wpids+=("$!")
done
warmed() {
  local w
  for w in $(seq 1 "$writers"); do
    [[ -f "$work/acked.$w" && "$(wc -l <"$work/acked.$w")" -ge "$warm" ]] || return 1
  done
}
retry 120 warmed || fail "the writers did not get $warm rows each acknowledged within 120 s"

echo "writing for $(since "$tw") s when all-kill came"
t="$(now)"
"$lab" fault all-kill "$SQLQ_HA_DIR"
echo "all-kill: $(since "$t") s"
# Every session is cut by the crash: the writers end on their own.
for p in "${wpids[@]}"; do
  retry 60 bash -c "! kill -0 $p 2>/dev/null" || fail "writer $p still runs 60 s after all-kill"
done
wpids=()
sort -n "$work"/acked.* >"$work/acked"
acked="$(wc -l <"$work/acked")"
echo "acknowledged: $acked rows from $writers writers; how they ended:"
for w in $(seq 1 "$writers"); do echo "  writer $w: $(tail -n 1 "$work/writer.$w.err")"; done

t="$(now)"
"$lab" heal "$SQLQ_HA_DIR"
echo "heal: $(since "$t") s"

# Each node's rows; Synced nodes may still be applying, so each gets up to
# 30 s to reach the writer's count.
writer_rows="$(sql_at "${hostport%:*}" "SELECT count(*) FROM acked")" ||
  fail "no read through SQLQ_HA_URL after heal"
node_has_all() {
  [[ "$(sql_at "$1" "SELECT count(*) FROM acked" 2>/dev/null)" == "$writer_rows" ]]
}
most_lost=0
for node in $SQLQ_HA_NODES; do
  retry 30 node_has_all "$node" ||
    fail "node $node does not reach the $writer_rows rows the writer has after heal"
  sql_at "$node" "SELECT id FROM acked ORDER BY id" >"$work/rows.$node"
  lost="$(comm -23 <(sort "$work/acked") <(sort "$work/rows.$node") | wc -l)"
  echo "node $node: $(wc -l <"$work/rows.$node") rows, $lost acknowledged rows missing"
  if ((lost > most_lost)); then most_lost="$lost"; fi
  if [[ "$kind" == galera ]]; then
    ((lost == 0)) || fail "node $node lost $lost of $acked acknowledged rows (first: $(
      comm -23 <(sort "$work/acked") <(sort "$work/rows.$node") | sort -n | head -n 3 | tr '\n' ' '))"
  fi
done
if [[ "$kind" == galera-unsafe ]]; then
  ((most_lost > 0)) ||
    fail "negative control: all-kill with innodb_flush_log_at_trx_commit=0 lost none of $acked acknowledged rows"
  echo "negative control: $most_lost of $acked acknowledged rows missing: loss seen, as expected"
fi

stop_and_check_gone "$lab" "$id"
echo "ok: $kind all-kill"
