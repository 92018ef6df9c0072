#!/usr/bin/env bash
# A throwaway pgbouncer in front of a PostgreSQL server, for the tests of
# sqlq behind a pooler (docs/deploying.md, "Poolers").
#
#   eval "$(scripts/pgbouncer-test-server.sh start URL [session|transaction])"
#       # URL: postgresql://user:password@host:port/dbname of the server;
#       # exports SQLQ_TEST_PGBOUNCER_URL (the same database through
#       # pgbouncer) and SQLQ_TEST_PGBOUNCER_DIR
#   scripts/pgbouncer-test-server.sh stop "$SQLQ_TEST_PGBOUNCER_DIR"
#
# pgbouncer refuses to run as root, so when run as root it runs as the
# "postgres" user (created by Debian's postgresql-15 package).
set -euo pipefail

# die, as_owner and port_in_use.
# shellcheck source=scripts/pg-test-server.sh
source "$(dirname "$0")/pg-test-server.sh"

start_pooler() {
  local url="${1:-}" mode="${2:-session}"
  command -v pgbouncer >/dev/null || die "no pgbouncer (install pgbouncer)"
  [[ "$mode" == session || "$mode" == transaction ]] ||
    die "mode must be session or transaction, not '$mode'"
  local re='^postgres(ql)?://([^:@/]+):([^@/]*)@([^:/]+):([0-9]+)/([^?]+)$'
  [[ "$url" =~ $re ]] || die "usage: $0 start postgresql://user:pw@host:port/db [mode]"
  local user="${BASH_REMATCH[2]}" password="${BASH_REMATCH[3]}"
  local host="${BASH_REMATCH[4]}" server_port="${BASH_REMATCH[5]}"
  local db="${BASH_REMATCH[6]}"
  local dir
  dir="$(mktemp -d /tmp/sqlq-pgbouncer-XXXXXX)"
  chmod 0755 "$dir"
  printf '"%s" "%s"\n' "$user" "$password" >"$dir/userlist.txt"
  local port tries=0
  while :; do
    port=$((20000 + RANDOM % 20000))
    port_in_use "$port" || break
    tries=$((tries + 1))
    ((tries < 20)) || die "no free port"
  done
  cat >"$dir/pgbouncer.ini" <<CONF
[databases]
* = host=$host port=$server_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
pool_mode = $mode
max_client_conn = 400
default_pool_size = 40
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
CONF
  if [[ $(id -u) -eq 0 ]]; then chown -R postgres: "$dir"; fi
  as_owner pgbouncer -d -q "$dir/pgbouncer.ini" ||
    { cat "$dir/pgbouncer.log" >&2 2>/dev/null; rm -rf "$dir"; die "pgbouncer did not start"; }
  tries=0
  until port_in_use "$port"; do
    tries=$((tries + 1))
    if ((tries > 500)); then
      cat "$dir/pgbouncer.log" >&2 || true
      stop_pooler "$dir"
      die "pgbouncer did not listen on $port"
    fi
    sleep 0.01
  done
  echo "export SQLQ_TEST_PGBOUNCER_DIR='$dir'"
  echo "export SQLQ_TEST_PGBOUNCER_URL='postgresql://$user:$password@127.0.0.1:$port/$db'"
}

stop_pooler() {
  local dir="${1:-}"
  [[ -n "$dir" && -f "$dir/pgbouncer.ini" ]] || die "usage: $0 stop DIR (from start)"
  if [[ -f "$dir/pgbouncer.pid" ]]; then
    kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) shift; start_pooler "$@" ;;
  stop) shift; stop_pooler "$@" ;;
  *) die "usage: $0 start URL [session|transaction] | stop DIR" ;;
esac
