#!/usr/bin/env bash
# A throwaway MariaDB server for the tests, in a temporary directory on a
# free loopback port.
#
#   eval "$(scripts/mariadb-test-server.sh start)"  # exports
#                                  # SQLQ_TEST_MYSQL_URL, SQLQ_TEST_MYSQL_DIR
#   scripts/mariadb-test-server.sh start --binlog STATEMENT   # with a binlog
#   scripts/mariadb-test-server.sh stop DIR
#   scripts/mariadb-test-server.sh restart DIR   # clean shutdown, same port
#   scripts/mariadb-test-server.sh crash DIR     # kill -9, then start again
#   eval "$(scripts/mariadb-test-server.sh start-replicated MIXED)"
#       # a primary (binlog_format=MIXED) and a replica replicating from it:
#       # SQLQ_TEST_MYSQL_URL / SQLQ_TEST_MYSQL_PRIMARY_DIR for the primary,
#       # SQLQ_TEST_MYSQL_REPLICA_URL / SQLQ_TEST_MYSQL_REPLICA_DIR for the
#       # replica; SQLQ_TEST_MYSQL_DIR holds both (stop it to stop both).
#
# Durable configuration, as users run it: innodb_flush_log_at_trx_commit=1
# and sync_binlog=1. The server ignores /etc/mysql (--no-defaults) so that a
# developer's own configuration cannot change what the tests see.
# When run as root the server runs as the "mysql" user (created by Debian's
# mariadb-server package), which owns the directory.
# Each server has its own tmpdir inside its directory: two
# mariadb-install-db runs at once (ctest -j2) collided on /tmp otherwise.
# TCP connections authenticate root with a password (the URL carries it),
# so that the tests can check what a wrong password does.
set -euo pipefail
shopt -s inherit_errexit

MARIADBD="${SQLQ_MARIADBD:-/usr/sbin/mariadbd}"

die() {
  echo "mariadb-test-server: $*" >&2
  exit 1
}

server_user() {
  if [[ $(id -u) -eq 0 ]]; then
    if id mysql >/dev/null 2>&1; then echo mysql; else echo root; fi
  else
    id -un
  fi
}

# kill -0 alone would count a zombie (exited, not yet reaped by whoever
# inherited it) as running.
# Reads /proc rather than running ps, which minimal images lack.
alive() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }" # the state letter follows the command name
  [[ -n "$stat" && "$stat" != Z* ]]
}

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The client over the server's socket, as root (password from $dir/password
# once set).
client() {
  local dir="$1"
  shift
  local pw=()
  if [[ -f "$dir/password" ]]; then pw=("-p$(cat "$dir/password")"); fi
  mariadb --no-defaults --protocol=socket --socket="$dir/sock" -uroot \
    "${pw[@]}" "$@"
}

# Starts mariadbd on $dir (already initialised) on $(cat $dir/port); waits
# until it answers on its socket. Returns 1 if it exited (e.g. port taken).
launch() {
  local dir="$1"
  local port
  port="$(cat "$dir/port")"
  local extra=()
  if [[ -f "$dir/options" ]]; then mapfile -t extra <"$dir/options"; fi
  # setsid + closed descriptors: the server outlives this script and does not
  # hold the caller's $(...) pipe open.
  setsid "$MARIADBD" --no-defaults --user="$(server_user)" \
    --datadir="$dir/data" --tmpdir="$dir/tmp" --socket="$dir/sock" \
    --pid-file="$dir/mariadbd.pid" --log-error="$dir/server.log" \
    --port="$port" --bind-address=127.0.0.1 --skip-name-resolve \
    --innodb-flush-log-at-trx-commit=1 --sync-binlog=1 \
    --innodb-buffer-pool-size=256M --innodb-log-file-size=256M \
    --max-connections=500 --character-set-server=utf8mb4 \
    --collation-server=utf8mb4_bin "${extra[@]}" \
    </dev/null >>"$dir/mariadbd.out" 2>&1 &
  local pid=$!
  echo "$pid" >"$dir/pid"
  local deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    if ! alive "$pid"; then return 1; fi
    # Any answer will do, even "access denied": the server is up.
    if mariadb-admin --no-defaults --protocol=socket --socket="$dir/sock" \
      -uroot --connect-timeout=2 ping >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  return 1
}

# Creates and starts one server in the new directory $1; options for mariadbd
# come as further arguments.
create() {
  local dir="$1"
  shift
  mkdir -p "$dir/data" "$dir/tmp"
  chmod 0755 "$dir"
  : >"$dir/options"
  if (($# > 0)); then printf '%s\n' "$@" >"$dir/options"; fi
  local user
  user="$(server_user)"
  if [[ $(id -u) -eq 0 ]]; then chown -R "$user": "$dir"; fi
  # From "/": the server's user may not be allowed into the caller's cwd.
  (cd / && mariadb-install-db --no-defaults --user="$user" \
    --datadir="$dir/data" --tmpdir="$dir/tmp" \
    --auth-root-authentication-method=normal --skip-test-db \
    --innodb-log-file-size=256M) >"$dir/install.log" 2>&1 || {
    cat "$dir/install.log" >&2
    die "mariadb-install-db failed"
  }
  local port tries=0
  while :; do
    port=$((20000 + RANDOM % 20000))
    echo "$port" >"$dir/port"
    if ! port_in_use "$port" && launch "$dir"; then break; fi
    tries=$((tries + 1))
    if ((tries >= 10)); then
      tail -n 30 "$dir/server.log" "$dir/mariadbd.out" >&2 || true
      die "could not start mariadbd (tried 10 ports)"
    fi
  done
  local password="test$RANDOM$RANDOM"
  # Not written to the binlog: a replica creates the same accounts itself.
  client "$dir" <<EOF
SET SESSION sql_log_bin = 0;
ALTER USER 'root'@'localhost' IDENTIFIED BY '$password';
CREATE OR REPLACE USER 'root'@'127.0.0.1' IDENTIFIED BY '$password';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
EOF
  echo "$password" >"$dir/password"
}

url() {
  local dir="$1"
  echo "mysql://root:$(cat "$dir/password")@127.0.0.1:$(cat "$dir/port")/sqlq"
}

check_format() {
  case "$1" in
    STATEMENT | MIXED | ROW) ;;
    *) die "binlog format must be STATEMENT, MIXED or ROW, not '$1'" ;;
  esac
}

binlog_options() {
  local format="$1" server_id="$2"
  echo "--server-id=$server_id"
  echo "--log-bin=binlog"
  echo "--binlog-format=$format"
  echo "--log-warnings=2"
}

start() {
  local options=()
  if [[ "${1:-}" == --binlog ]]; then
    [[ -n "${2:-}" ]] || die "usage: $0 start [--binlog FORMAT]"
    check_format "$2"
    mapfile -t options < <(binlog_options "$2" 1)
  elif [[ -n "${1:-}" ]]; then
    die "usage: $0 start [--binlog FORMAT]"
  fi
  local dir
  dir="$(mktemp -d /tmp/sqlq-mariadb-XXXXXX)"
  create "$dir" "${options[@]}"
  client "$dir" -e "CREATE DATABASE sqlq"
  echo "export SQLQ_TEST_MYSQL_DIR='$dir' SQLQ_TEST_MYSQL_URL='$(url "$dir")'"
}

start_replicated() {
  local format="${1:-}"
  [[ -n "$format" ]] || die "usage: $0 start-replicated FORMAT"
  check_format "$format"
  local top
  top="$(mktemp -d /tmp/sqlq-mariadb-repl-XXXXXX)"
  chmod 0755 "$top"
  local primary replica primary_opts replica_opts
  mapfile -t primary_opts < <(binlog_options "$format" 1)
  mapfile -t replica_opts < <(binlog_options "$format" 2)
  primary="$top/primary"
  replica="$top/replica"
  create "$primary" "${primary_opts[@]}"
  create "$replica" "${replica_opts[@]}"
  # The replica starts from the primary's first binlog event (its
  # gtid_slave_pos is empty), so the CREATE DATABASE below replicates too.
  client "$replica" <<EOF
CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=$(cat "$primary/port"),
  MASTER_USER='root', MASTER_PASSWORD='$(cat "$primary/password")',
  MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1;
START SLAVE;
EOF
  client "$primary" -e "CREATE DATABASE sqlq"
  echo "export SQLQ_TEST_MYSQL_DIR='$top'" \
    "SQLQ_TEST_MYSQL_URL='$(url "$primary")'" \
    "SQLQ_TEST_MYSQL_PRIMARY_DIR='$primary'" \
    "SQLQ_TEST_MYSQL_REPLICA_URL='$(url "$replica")'" \
    "SQLQ_TEST_MYSQL_REPLICA_DIR='$replica'"
}

kill_server() {
  local dir="$1" signal="$2"
  [[ -f "$dir/pid" ]] || return 0
  local pid
  pid="$(cat "$dir/pid")"
  kill "-$signal" "$pid" 2>/dev/null || return 0
  local deadline=$((SECONDS + 120))
  while alive "$pid"; do
    ((SECONDS < deadline)) || die "mariadbd $pid did not exit"
    sleep 0.05
  done
}

stop() {
  local dir="${1:-}"
  [[ -n "$dir" && -d "$dir" ]] || die "usage: $0 stop DIR (from start)"
  local d
  for d in "$dir/replica" "$dir/primary" "$dir"; do
    if [[ -f "$d/port" ]]; then kill_server "$d" KILL; fi
  done
  rm -rf "$dir"
}

# Clean shutdown (SIGTERM: open connections are cut, InnoDB shuts down
# cleanly), then the same server on the same port. For fault tests.
restart() {
  local dir="${1:-}"
  [[ -n "$dir" && -f "$dir/port" ]] || die "usage: $0 restart DIR (a server's directory)"
  kill_server "$dir" TERM
  launch "$dir" || {
    tail -n 30 "$dir/server.log" >&2
    die "restart failed"
  }
}

# kill -9 (InnoDB recovers from its redo log on start), then the same server
# on the same port. For fault tests.
crash() {
  local dir="${1:-}"
  [[ -n "$dir" && -f "$dir/port" ]] || die "usage: $0 crash DIR (a server's directory)"
  kill_server "$dir" KILL
  launch "$dir" || {
    tail -n 30 "$dir/server.log" >&2
    die "start after crash failed"
  }
}

case "${1:-}" in
  start) start "${@:2}" ;;
  start-replicated) start_replicated "${2:-}" ;;
  stop) stop "${2:-}" ;;
  restart) restart "${2:-}" ;;
  crash) crash "${2:-}" ;;
  *) die "usage: $0 start [--binlog FORMAT] | start-replicated FORMAT | stop DIR | restart DIR | crash DIR" ;;
esac
