#!/usr/bin/env bash
# Smoke test of the replicated-database lab (scripts/ha-lab.sh,
# docs/ha-lab.md): start a cluster, write a row through SQLQ_HA_URL, inject a
# fault on the primary, wait for a new writable node, check that the row
# survived and that a write succeeds, heal, check every node has both rows,
# stop, and check that nothing of the lab is left.
#
#   tests/ha/ha_lab_test.sh patroni primary-kill
#   tests/ha/ha_lab_test.sh galera primary-partition
#   tests/ha/ha_lab_test.sh patroni-async primary-partition   # negative control
#
# On Patroni with primary-partition, a row is also written on the cut-off old
# primary directly, as a client that still reaches it would: with synchronous
# replication that commit must either fail or survive the failover; with
# patroni-async (asynchronous replication) it is acknowledged and then lost,
# and the test checks that it sees that loss.
#
# With SQLQ_BIN set, sqlq itself also sends a message before the fault and
# claims it after the failover (on Patroni through the multi-host URL with
# target_session_attrs=read-write).
# Needs root; without it the test is skipped (exit 77), or fails when
# SQLQ_REQUIRE_HA=1.
set -euo pipefail
shopt -s inherit_errexit

kind="${1:?usage: $0 patroni|patroni-async|galera FAULT}"
fault="${2:?usage: $0 patroni|patroni-async|galera FAULT}"
lab="$(cd "$(dirname "$0")/../.." && pwd)/scripts/ha-lab.sh"

# shellcheck source=tests/ha/lab_test_lib.sh
source "$(dirname "$0")/lab_test_lib.sh"
skip_unless_root

start_args=("$kind")
if [[ "$kind" == patroni-async ]]; then start_args=(patroni --async); fi
t="$(now)"
eval "$("$lab" start "${start_args[@]}")"
cleanup() { if [[ -n "${SQLQ_HA_DIR:-}" ]]; then "$lab" stop "$SQLQ_HA_DIR"; fi; }
trap cleanup EXIT
echo "start: $(since "$t") s"
id="${SQLQ_HA_DIR##*-}"

if [[ "$kind" == galera ]]; then
  hostport="${SQLQ_HA_URL#*@}"
  hostport="${hostport%%/*}"
  password="${SQLQ_HA_URL#mysql://sqlq:}"
  password="${password%%@*}"
  # $1: the host (default: the HAProxy of SQLQ_HA_URL).
  sql_at() {
    local host="$1"
    shift
    timeout 10 mariadb --no-defaults -h "$host" -P 3306 -usqlq -p"$password" \
      --connect-timeout=2 -NB sqlq -e "$*"
  }
  sql() { sql_at "${hostport%:*}" "$@"; }
  sqlq_url="$SQLQ_HA_URL"
  rows_sql="SELECT group_concat(v ORDER BY id) FROM smoke"
  insert_after="INSERT IGNORE INTO smoke VALUES (2, 'after')"
else
  password="${SQLQ_HA_URL#postgresql://postgres:}"
  password="${password%%@*}"
  url="$SQLQ_HA_URL?target_session_attrs=read-write&connect_timeout=2"
  sql() { timeout 10 psql "$url" -qAtX -v ON_ERROR_STOP=1 -c "$*"; }
  sql_at() {
    local host="$1"
    shift
    PGPASSWORD="$password" timeout 10 psql -h "$host" -U postgres -d postgres \
      -qAtX -v ON_ERROR_STOP=1 -c "$*"
  }
  sqlq_url="$url"
  rows_sql="SELECT string_agg(v, ',' ORDER BY id) FROM smoke"
  insert_after="INSERT INTO smoke VALUES (2, 'after') ON CONFLICT (id) DO NOTHING"
fi

sql "CREATE TABLE smoke (id int PRIMARY KEY, v text)"
sql "INSERT INTO smoke VALUES (1, 'before')"
if [[ -n "${SQLQ_BIN:-}" ]]; then
  "$SQLQ_BIN" --db "$sqlq_url" queue create jobs >/dev/null
  "$SQLQ_BIN" --db "$sqlq_url" send jobs before-failover >/dev/null
fi

old="$("$lab" leader "$SQLQ_HA_DIR")"
t="$(now)"
"$lab" fault "$fault" "$SQLQ_HA_DIR"
stray=none
if [[ "$kind" == patroni* && "$fault" == primary-partition ]]; then
  # Only an acknowledgement counts; a commit that fails may still be there.
  if sql_at "$old" "INSERT INTO smoke VALUES (3, 'stray')" 2>/dev/null; then
    stray=acked
  else
    stray=failed
  fi
  echo "write on the cut-off primary: $stray"
fi
new="$("$lab" leader "$SQLQ_HA_DIR" --not "$old" --timeout 90)" ||
  fail "no new writable node within 90 s after $fault of $old"
echo "new writable node: $new (was $old) after $(since "$t") s"
# A retry after an INSERT whose outcome the client did not learn must not
# fail on the row it may have written.
retry 60 sql "$insert_after" ||
  fail "no write through SQLQ_HA_URL within 60 s of the new leader"
echo "first write after the fault: $(since "$t") s"
# Asynchronous replication may lose it; the negative control checks that
# below.
[[ "$(sql "SELECT v FROM smoke WHERE id = 1")" == before || "$kind" == patroni-async ]] ||
  fail "the row written before the fault is gone"
if [[ -n "${SQLQ_BIN:-}" ]]; then
  claimed="$(retry 30 "$SQLQ_BIN" --db "$sqlq_url" claim jobs)" ||
    fail "sqlq could not claim after the failover"
  [[ "$claimed" == *before-failover* ]] ||
    fail "sqlq claimed '$claimed', not the message sent before the fault"
fi

t="$(now)"
"$lab" heal "$SQLQ_HA_DIR"
echo "heal: $(since "$t") s"
if [[ "$kind" == patroni-async ]]; then
  # The negative control: every write above was acknowledged ("stray" if
  # the cut-off primary took it); after the heal the writable node must lack
  # at least one of them, whichever node ends up leading.
  acked="before,after"
  if [[ "$stray" == acked ]]; then acked="before,after,stray"; fi
  leader="$("$lab" leader "$SQLQ_HA_DIR" --timeout 60)"
  rows="$(retry 30 sql_at "$leader" "$rows_sql")" || fail "the leader $leader does not answer"
  [[ "$rows" != "$acked" ]] ||
    fail "negative control: no acknowledged write was lost (the leader has $rows)"
  echo "negative control: acknowledged $acked, the leader has $rows: loss seen, as expected"
else
  # What each node must end with; replicas replay asynchronously after
  # heal, so each node gets up to 30 s to converge.
  case "$stray" in
    acked) expected=("before,after,stray") ;;
    failed) expected=("before,after" "before,after,stray") ;;
    *) expected=("before,after") ;;
  esac
  node_converged() {
    rows="$(sql_at "$1" "$rows_sql" 2>/dev/null)" || return 1
    [[ " ${expected[*]} " == *" $rows "* ]]
  }
  for node in $SQLQ_HA_NODES; do
    retry 30 node_converged "$node" ||
      fail "node $node has '${rows:-no answer}', not ${expected[*]} (write on the cut-off primary: $stray)"
  done
fi

stop_and_check_gone "$lab" "$id"
echo "ok: $kind $fault"
