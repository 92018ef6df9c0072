#!/usr/bin/env bash
# A throwaway PostgreSQL 15 server for the tests, in a temporary directory on
# a free loopback port.
#
#   eval "$(scripts/pg-test-server.sh start)"   # exports SQLQ_TEST_PG_URL and
#                                               # SQLQ_TEST_PG_DIR
#   scripts/pg-test-server.sh stop "$SQLQ_TEST_PG_DIR"
#   scripts/pg-test-server.sh restart DIR [fast|immediate]   # fault tests
#   scripts/pg-test-server.sh halt DIR     # stopped, directory kept
#   scripts/pg-test-server.sh resume DIR   # started again, same port
#   scripts/pg-test-server.sh new-timeline DIR   # promoted as a standby is
#
# PostgreSQL refuses to run as root, so when run as root the server runs as
# the "postgres" user (created by Debian's postgresql-15 package), which owns
# the directory. fsync and synchronous_commit stay on: the tests (and later
# the benchmarks) measure the durable configuration users run.
# TCP connections authenticate with a password (scram-sha-256) so that the
# tests can check what a wrong password does; the URL carries the password.
set -euo pipefail

PG_BIN="${SQLQ_PG_BIN:-/usr/lib/postgresql/15/bin}"

die() {
  echo "$(basename "$0" .sh): $*" >&2
  exit 1
}

# Runs a command as the server's user.
# From "/", which that user can always enter (the checkout may be private).
as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
  [[ -x "$PG_BIN/initdb" ]] ||
    die "no PostgreSQL 15 at $PG_BIN (install postgresql-15, or set SQLQ_PG_BIN)"
  local dir
  dir="$(mktemp -d /tmp/sqlq-pg-XXXXXX)"
  chmod 0755 "$dir"
  if [[ $(id -u) -eq 0 ]]; then
    id postgres >/dev/null 2>&1 || die "running as root needs a 'postgres' user"
    chown postgres: "$dir"
  fi
  local password
  password="test$RANDOM$RANDOM"
  echo "$password" >"$dir/pwfile"
  if [[ $(id -u) -eq 0 ]]; then chown postgres: "$dir/pwfile"; fi
  # The superuser is not named sqlq: for a role of that name PostgreSQL's
  # default search_path ("$user", public) would put sqlq's own schema of
  # functions (docs/sql-api.md) first, and the tests' tables into it.
  as_owner "$PG_BIN/initdb" -D "$dir/data" -U sqlq_test --pwfile="$dir/pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-locale \
    >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    die "initdb failed"
  }
  # Tests run in parallel, each with a few pooled connections and a
  # listener; 64-consumer tests need more.
  cat >>"$dir/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
max_connections = 400
shared_buffers = 64MB
fsync = on
synchronous_commit = on
EOF
  local port tries=0
  while :; do
    port=$((20000 + RANDOM % 20000))
    if ! port_in_use "$port" &&
      as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-p $port" start >/dev/null 2>&1; then
      break
    fi
    tries=$((tries + 1))
    if ((tries >= 10)); then
      cat "$dir/server.log" >&2 || true
      die "could not start PostgreSQL (tried 10 ports)"
    fi
  done
  echo "$port" >"$dir/port"
  echo "export SQLQ_TEST_PG_DIR='$dir'"
  echo "export SQLQ_TEST_PG_URL='postgresql://sqlq_test:$password@127.0.0.1:$port/postgres'"
}

stop() {
  local dir="${1:-}"
  [[ -n "$dir" && -d "$dir/data" ]] || die "usage: $0 stop DIR (from start)"
  as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 ||
    true
  rm -rf "$dir"
}

# Restarts the server, for fault tests; the port stays the same. Mode fast
# (default): open connections are cut, transactions rolled back, a clean
# shutdown. Mode immediate: the server processes are killed, as in a crash,
# and the restart runs crash recovery from the WAL.
restart() {
  local dir="${1:-}" mode="${2:-fast}"
  [[ -n "$dir" && -d "$dir/data" ]] || die "usage: $0 restart DIR [fast|immediate]"
  [[ "$mode" == fast || "$mode" == immediate ]] ||
    die "restart: mode must be fast or immediate, not '$mode'"
  as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -m "$mode" -o "-p $(cat "$dir/port")" restart >/dev/null
}

# Halts the server (fast shutdown) and keeps its directory, so that a test
# can see what clients do while the database is down; resume starts it again
# on the same port.
halt() {
  local dir="${1:-}"
  [[ -n "$dir" && -d "$dir/data" ]] || die "usage: $0 halt DIR"
  as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
}
resume() {
  local dir="${1:-}"
  [[ -n "$dir" && -d "$dir/data" ]] || die "usage: $0 resume DIR"
  as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $(cat "$dir/port")" start >/dev/null
}

# Restarts the server as a standby and promotes it, as a failover does to
# the standby it picks: it then writes on a new timeline, the next after
# the one it had. For tests of what tells a new primary from an old one.
new_timeline() {
  local dir="${1:-}"
  [[ -n "$dir" && -d "$dir/data" ]] || die "usage: $0 new-timeline DIR"
  halt "$dir"
  as_owner touch "$dir/data/standby.signal"
  resume "$dir"
  as_owner "$PG_BIN/pg_ctl" -D "$dir/data" -w -t 60 promote >/dev/null
}

# Sourced (scripts/pgbouncer-test-server.sh): only the functions above.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

case "${1:-}" in
  start) start ;;
  stop) stop "${2:-}" ;;
  restart) restart "${2:-}" "${3:-}" ;;
  halt) halt "${2:-}" ;;
  resume) resume "${2:-}" ;;
  new-timeline) new_timeline "${2:-}" ;;
  *) die "usage: $0 start | stop DIR | restart DIR [fast|immediate] | halt DIR | resume DIR | new-timeline DIR" ;;
esac
