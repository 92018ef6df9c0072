#!/usr/bin/env bash
# A lab of replicated databases on this machine, for failover tests: three
# "hosts" (network namespaces) on a bridge of their own, running either
# PostgreSQL 15 + Patroni + etcd or MariaDB Galera, with commands that inject
# faults (a crashed, cut-off, black-holed or paused primary, a switchover, a
# crashed replica) and heal them. docs/ha-lab.md is the guide.
#
#   eval "$(scripts/ha-lab.sh start patroni)"   # exports SQLQ_HA_URL,
#                                                # SQLQ_HA_DIR and more
#   scripts/ha-lab.sh fault primary-kill "$SQLQ_HA_DIR"
#   scripts/ha-lab.sh leader "$SQLQ_HA_DIR" --not 10.213.1.11 --timeout 60
#   scripts/ha-lab.sh heal "$SQLQ_HA_DIR"
#   scripts/ha-lab.sh stop "$SQLQ_HA_DIR"
#
# Needs root (namespaces, bridges, nft) and the Debian packages that
# scripts/install-deps.sh installs. Every address is private and lives only
# on the lab's own bridge: the namespaces have no default route, and the
# root namespace reaches them through the bridge's own /24.
set -euo pipefail
shopt -s inherit_errexit

PG_BIN="${SQLQ_PG_BIN:-/usr/lib/postgresql/15/bin}"
# Bound of every wait (start, heal, leader --timeout default), in seconds.
# Generous: on a loaded two-core machine a Galera SST or a Patroni bootstrap
# takes several times its idle duration.
WAIT="${SQLQ_HA_TIMEOUT:-240}"
# The PostgreSQL, etcd and Patroni processes run as this user (PostgreSQL
# refuses root); MariaDB runs as mysql. Both come with Debian's packages.
PG_USER=postgres
MY_USER=mysql
FAULTS="primary-kill primary-partition primary-blackhole pause pause-db switchover replica-kill all-kill server-kill"

usage() {
  cat <<EOF
usage: scripts/ha-lab.sh COMMAND ...

  start patroni [--async]   PostgreSQL 15 + Patroni + etcd on 3 nodes,
                            synchronous replication (--async: asynchronous,
                            a negative control that can lose acked writes)
  start patroni-haproxy [--async]
                            the same plus an HAProxy node that forwards to the
                            primary only (Patroni REST check); SQLQ_HA_URL
                            names the HAProxy
  start galera [--unsafe-flush]
                            MariaDB Galera on 3 nodes plus an HAProxy node
                            with one active writer (wsrep state check)
                            (--unsafe-flush: innodb_flush_log_at_trx_commit=0,
                            a negative control that all-kill makes lose
                            acked writes)
      prints export lines: SQLQ_HA_URL, SQLQ_HA_DIR, SQLQ_HA_KIND,
      SQLQ_HA_NODES; use as: eval "\$(scripts/ha-lab.sh start patroni)"
  fault NAME DIR            inject a fault; returns once it is in place
  heal DIR                  undo every fault; returns once all three nodes
                            are back in the cluster (Patroni: a leader, two
                            streaming replicas; Galera: size 3, all Synced)
  leader DIR [--not ADDR] [--timeout SEC]
                            print the writable node's address; with --timeout
                            wait for one (other than ADDR) up to SEC seconds
  status DIR                the cluster as its tools see it, and memory used
  sqlq DIR [--servers N] [--workers N] [--bin PATH]
                            N sqlq serve (default 2) on nodes s1-s3 of their
                            own, on the cluster, behind an HTTP HAProxy (node
                            sx, checks /readyz), and N worker nodes w1-w3
                            (default 2); prints export lines: SQLQ_HA_HTTP,
                            SQLQ_HA_TOKEN, SQLQ_HA_SERVERS, SQLQ_HA_WORKER_NODES
  exec DIR NODE -- COMMAND...
                            run COMMAND on a node (in its namespace)
  stop DIR                  remove everything the lab created

faults (the "primary" is the writable node, the one leader prints):
  primary-kill       kill -9 of every process of the primary's namespace
  primary-partition  nft cuts the primary off from its two peers; clients
                     (the root namespace, the HAProxy node) still reach it
  primary-blackhole  nft drops every packet in and out of the primary
  pause              SIGSTOP of the primary's Patroni (Galera: its mariadbd);
                     lasts until heal
  pause-db           SIGSTOP of the primary's database processes
  switchover         planned: patronictl switchover (Galera: clean shutdown
                     of the writer, so that HAProxy moves to the next node)
  replica-kill       kill -9 of every process of one replica's namespace
                     (Patroni: the synchronous standby)
  all-kill           kill -9 of every process of all three nodes at once;
                     heal restarts the cluster (Galera: bootstrapped from the
                     most advanced node)
  server-kill        kill -9 of the sqlq serve on s1 (after the sqlq command)

environment: SQLQ_HA_SUBNET (a private /24 such as 10.213.5.0/24; default:
the first 10.213.N.0/24 without an address or route here), SQLQ_HA_TIMEOUT
(bound of each wait, seconds; default 240), SQLQ_PG_BIN.
EOF
}

die() {
  echo "ha-lab: $*" >&2
  exit 1
}
log() { echo "ha-lab: $*" >&2; }

now() { echo "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# Polls a command until it succeeds, for at most $1 seconds.
wait_until() {
  local limit="$1" what="$2"
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@"; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${limit}s waiting for $what"
      return 1
    fi
    sleep 0.3
  done
}

# --- the lab's names, saved in DIR/lab.env --------------------------------

# Loads the lab of directory $1.
load() {
  DIR="${1:-}"
  [[ -n "$DIR" ]] || die "no lab directory given (the SQLQ_HA_DIR that start printed)"
  [[ -f "$DIR/lab.env" ]] || die "$DIR is not a lab directory (no lab.env)"
  # shellcheck source=/dev/null
  source "$DIR/lab.env"
}

# Nodes: n1-n3 the database cluster, px its HAProxy; with `sqlq`, s1-s3 run
# sqlq serve, sx an HAProxy in front of them, w1-w3 are for workers.
ns_of() { echo "$NSP-$1"; }
ip_of() {
  case "$1" in
    px) echo "$NET.10" ;;
    n*) echo "$NET.1${1#n}" ;;
    sx) echo "$NET.20" ;;
    s*) echo "$NET.2${1#s}" ;;
    w*) echo "$NET.3${1#w}" ;;
  esac
}
node_of_ip() {
  local n
  for n in n1 n2 n3; do
    if [[ "$(ip_of "$n")" == "$1" ]]; then
      echo "$n"
      return 0
    fi
  done
  return 1
}
hosts() {
  echo n1 n2 n3
  if [[ "$PROXY" == 1 ]]; then echo px; fi
}

# The private /24 (its first three octets) for a new lab: SQLQ_HA_SUBNET, or
# the first 10.213.N.0/24 that no interface or route here uses yet. Called
# under the lock, so two starts at once pick different ones.
subnet_in_use() {
  local re="${1//./\\.}\\."
  ip -4 -o addr show | grep -Eq "inet $re" ||
    ip -4 route show table all | grep -Eq "(^| )$re"
}
pick_subnet() {
  if [[ -n "${SQLQ_HA_SUBNET:-}" ]]; then
    local s="${SQLQ_HA_SUBNET%/24}"
    s="${s%.0}"
    [[ "$s" =~ ^(10\.[0-9]{1,3}|172\.(1[6-9]|2[0-9]|3[01])|192\.168)\.[0-9]{1,3}$ ]] ||
      die "SQLQ_HA_SUBNET must be a private /24 such as 10.213.5.0/24, not '$SQLQ_HA_SUBNET'"
    ! subnet_in_use "$s" || die "SQLQ_HA_SUBNET $s.0/24 is already used here (an address or a route)"
    echo "$s"
    return
  fi
  local n
  for n in $(seq 1 254); do
    if ! subnet_in_use "10.213.$n"; then
      echo "10.213.$n"
      return
    fi
  done
  die "every 10.213.N.0/24 is in use; set SQLQ_HA_SUBNET"
}

# --- processes -----------------------------------------------------------

# Starts a command in a namespace, detached (own session, no terminal, output
# to a log), from "/" which every user may enter.
spawn() {
  local ns="$1" logf="$2"
  shift 2
  (cd / && exec ip netns exec "$ns" setsid "$@" </dev/null >>"$logf" 2>&1 &)
}

# The processes of a namespace whose command line contains $2.
pids_matching() {
  local ns="$1" pat="$2" p
  for p in $(ip netns pids "$ns" 2>/dev/null); do
    if tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -qF -- "$pat"; then echo "$p"; fi
  done
}

# kill -9 of every process of a namespace; returns once they are gone.
kill_ns() {
  local ns="$1" pids
  pids="$(ip netns pids "$ns" 2>/dev/null || true)"
  if [[ -n "$pids" ]]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
  fi
  wait_until 30 "the processes of $ns to exit" ns_empty "$ns"
}
ns_lacks() { [[ -z "$(pids_matching "$1" "$2")" ]]; }
ns_has() { [[ -n "$(pids_matching "$1" "$2")" ]]; }
ns_empty() { [[ -z "$(ip netns pids "$1" 2>/dev/null || true)" ]]; }

# --- network -------------------------------------------------------------

net_up() {
  ip link add "$BR" type bridge
  sysctl -qw "net.ipv6.conf.$BR.disable_ipv6=1" || true
  ip link set "$BR" up
  ip addr add "$NET.1/24" dev "$BR"
  local h
  for h in $(hosts); do node_up "$h"; done
}

# A node: its namespace, on the lab's bridge with its address.
node_up() {
  local h="$1" ns
  ns="$(ns_of "$h")"
  ip netns add "$ns"
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 || true
  ip link add "$VP$h" type veth peer name eth0 netns "$ns"
  ip link set "$VP$h" master "$BR" up
  ip -n "$ns" addr add "$(ip_of "$h")/24" dev eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
}

# The fault tables live inside a node's namespace: the namespace's other
# traffic, and the machine's, is untouched.
nft_partition() {
  local ns="$1" peers="$2"
  ip netns exec "$ns" nft -f - <<EOF
table inet sqlq_ha_fault {
  chain input { type filter hook input priority 0; policy accept; ip saddr { $peers } drop; }
  chain output { type filter hook output priority 0; policy accept; ip daddr { $peers } drop; }
}
EOF
}
nft_blackhole() {
  ip netns exec "$1" nft -f - <<EOF
table inet sqlq_ha_fault {
  chain input { type filter hook input priority 0; policy accept; iifname "eth0" drop; }
  chain output { type filter hook output priority 0; policy accept; oifname "eth0" drop; }
}
EOF
}
nft_heal() {
  ip netns exec "$1" nft delete table inet sqlq_ha_fault 2>/dev/null || true
}

# --- HAProxy (galera, patroni-haproxy) -------------------------------------

haproxy_config() {
  local port="$1" check="$2"
  cat <<EOF
global
  maxconn 500
  stats socket $DIR/haproxy.sock mode 600 level admin
defaults
  mode tcp
  timeout connect 2s
  timeout client 1h
  timeout server 1h
  # A check's answer may take a while on a loaded machine (the Galera one
  # runs two mariadb clients, each bounded at 3 s, and waits up to 3 s for
  # the writer's lock): a timeout below that marks a healthy writer down,
  # and with no other allowed to take over the cluster takes no writes.
  timeout check 10s
listen db
  bind $(ip_of px):$port
$check
EOF
}

haproxy_start() {
  spawn "$(ns_of px)" "$DIR/px/haproxy.log" haproxy -db -f "$DIR/px/haproxy.cfg"
}

# "name op_state" of each backend server (op_state 2: up).
haproxy_states() {
  echo "show servers state db" |
    timeout 3 socat -t 2 - "UNIX-CONNECT:$DIR/haproxy.sock" 2>/dev/null |
    awk 'NF > 6 && $1 ~ /^[0-9]+$/ { print $4, $6 }'
}
# How many backend servers HAProxy has up.
haproxy_up_count() { haproxy_states | awk '$2 == 2' | wc -l; }

# --- PostgreSQL + Patroni + etcd ----------------------------------------

etcd_endpoints() { echo "http://$(ip_of n1):2379,http://$(ip_of n2):2379,http://$(ip_of n3):2379"; }

etcd_start() {
  local n="$1" ip
  ip="$(ip_of "$n")"
  # Heartbeat and election timeout doubled from etcd's defaults: on a loaded
  # two-core machine the defaults cause needless elections. The v2 API is on
  # because Patroni talks to etcd through it (see patroni_config).
  spawn "$(ns_of "$n")" "$DIR/$n/etcd.log" etcd --name "$n" --enable-v2 \
    --data-dir "$DIR/$n/etcd" \
    --listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
    --listen-client-urls "http://$ip:2379,http://127.0.0.1:2379" \
    --advertise-client-urls "http://$ip:2379" \
    --initial-cluster "n1=http://$(ip_of n1):2380,n2=http://$(ip_of n2):2380,n3=http://$(ip_of n3):2380" \
    --initial-cluster-state new --initial-cluster-token "sqlq-$ID" \
    --heartbeat-interval 200 --election-timeout 2000
}

etcd_healthy() {
  ETCDCTL_API=3 timeout 10 etcdctl --endpoints="$(etcd_endpoints)" \
    --dial-timeout=1s --command-timeout=2s endpoint health >/dev/null 2>&1
}

patroni_config() {
  local n="$1" ip sync strict
  ip="$(ip_of "$n")"
  sync=true strict=true
  if [[ "$ASYNC" == 1 ]]; then sync=false strict=false; fi
  cat <<EOF
scope: sqlq-$ID
name: $n
restapi:
  listen: $ip:8008
  connect_address: $ip:8008
# etcd's v2 API, not etcd3: Patroni 3.0.2 (Debian 12) renews the leader key
# over etcd3 with a plain put. A leader whose loop stalled for longer than ttl
# (its PostgreSQL frozen, or cut off from etcd) overwrites the key of the node
# promoted meanwhile when it comes back, and that node's acknowledged commits
# are rewound away. Over v2 the renewal is a compare-and-swap on its own name,
# which fails, so the stale leader demotes instead. Patroni 3.0.3 fixed etcd3.
etcd:
  hosts: ['$(ip_of n1):2379', '$(ip_of n2):2379', '$(ip_of n3):2379']
bootstrap:
  dcs:
    # A quick failover: the leader key expires 10 s after the last renewal
    # (Patroni's rule: loop_wait + 2 * retry_timeout <= ttl).
    ttl: 10
    loop_wait: 2
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    # Synchronous replication, strict: a commit is acknowledged only once a
    # standby has it, and only such a standby may be promoted; with no
    # standby left, writes wait rather than go unreplicated.
    synchronous_mode: $sync
    synchronous_mode_strict: $strict
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_log_hints: 'on'
        fsync: 'on'
        synchronous_commit: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        max_connections: 100
        shared_buffers: 32MB
        wal_keep_size: 64MB
        max_wal_size: 256MB
  initdb: [{encoding: UTF8}, {locale: C}, data-checksums]
postgresql:
  listen: $ip,127.0.0.1:5432
  connect_address: $ip:5432
  data_dir: $DIR/$n/data
  bin_dir: $PG_BIN
  pgpass: $DIR/$n/pgpass
  # Patroni's own connections, replication ones included (it reads a
  # replica's timeline through one), go over the socket.
  use_unix_socket: true
  use_unix_socket_repl: true
  parameters:
    unix_socket_directories: '$DIR/$n'
  authentication:
    superuser: {username: postgres, password: '$PW'}
    replication: {username: replicator, password: '$PW'}
  pg_hba:
    - local all all trust
    - local replication all trust
    - host replication replicator $NET.0/24 scram-sha-256
    - host replication replicator 127.0.0.1/32 scram-sha-256
    - host all all $NET.0/24 scram-sha-256
    - host all all 127.0.0.1/32 scram-sha-256
EOF
}

patroni_start() {
  local n="$1"
  spawn "$(ns_of "$n")" "$DIR/$n/patroni.log" env HOME="$DIR/$n" \
    setpriv --reuid="$PG_USER" --regid="$PG_USER" --init-groups \
    /usr/bin/patroni "$DIR/$n/patroni.yml"
}

patronictl_() { timeout 20 patronictl -c "$DIR/n1/patroni.yml" "$@"; }

# One query on the PostgreSQL of address $1, as the superuser.
pg_query() {
  PGPASSWORD="$PW" PGCONNECT_TIMEOUT=2 timeout 5 psql -h "$1" -p 5432 -U postgres \
    -d postgres -AtX -F ' ' -c "$2" 2>/dev/null
}

# The addresses whose Patroni answers REST GET /$1 with 200; asked in
# parallel, 1 s each.
patroni_rest_200() {
  local n
  for n in n1 n2 n3; do
    (
      ip="$(ip_of "$n")"
      code="$(curl -s -o /dev/null -m 1 -w '%{http_code}' "http://$ip:8008/$1" || true)"
      if [[ "$code" == 200 ]]; then echo "$ip"; fi
    ) &
  done
  wait
}
# Those that run the primary and hold the leader key.
patroni_primaries() { patroni_rest_200 primary; }

patroni_healthy() {
  local l rows
  l="$(patroni_primaries)"
  [[ -n "$l" && "$l" != *$'\n'* ]] || return 1
  # Streaming from the leader and caught up with it: a replica that came
  # back with a history of its own does not get there.
  rows="$(pg_query "$l" "SELECT count(*) FILTER (WHERE state = 'streaming'
      AND replay_lsn >= pg_current_wal_lsn()),
    count(*) FILTER (WHERE sync_state = 'sync') FROM pg_stat_replication")" || return 1
  [[ "${rows%% *}" == 2 ]] || return 1
  if [[ "$ASYNC" != 1 ]]; then
    # PostgreSQL waits for a standby, and Patroni has recorded it in etcd as
    # the one it may promote (until then no failover could happen).
    [[ "${rows##* }" -ge 1 ]] || return 1
    [[ -n "$(patroni_rest_200 sync)" ]] || return 1
  fi
  etcd_healthy || return 1
  if [[ "$PROXY" == 1 ]]; then
    [[ "$(haproxy_states | awk '$2 == 2 { print $1 }')" == "$(node_of_ip "$l")" ]] || return 1
  fi
}

# The node Patroni records in etcd as synchronous standby, the only one it
# may promote (when async: the first streaming replica).
patroni_sync_standby() {
  local leader="$1" ip
  if [[ "$ASYNC" != 1 ]]; then
    ip="$(patroni_rest_200 sync | head -n 1)"
    [[ -n "$ip" ]] || return 1
    node_of_ip "$ip"
    return
  fi
  ip="$(pg_query "$leader" "SELECT client_addr FROM pg_stat_replication
    WHERE state = 'streaming' ORDER BY client_addr LIMIT 1")" || true
  [[ -n "$ip" ]] || return 1
  node_of_ip "$ip"
}

start_patroni() {
  local n
  for n in n1 n2 n3; do
    mkdir -p "$DIR/$n"
    patroni_config "$n" >"$DIR/$n/patroni.yml"
    chown -R "$PG_USER:" "$DIR/$n"
    chmod 0700 "$DIR/$n"
  done
  for n in n1 n2 n3; do etcd_start "$n"; done
  wait_until "$WAIT" "etcd (3 members healthy; logs: $DIR/n*/etcd.log)" etcd_healthy
  log "etcd healthy after $(elapsed "$T0") s"
  for n in n1 n2 n3; do patroni_start "$n"; done
  if [[ "$PROXY" == 1 ]]; then
    mkdir -p "$DIR/px"
    haproxy_config 5432 "  option httpchk OPTIONS /primary
  http-check expect status 200
  default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions
  server n1 $(ip_of n1):5432 check port 8008
  server n2 $(ip_of n2):5432 check port 8008
  server n3 $(ip_of n3):5432 check port 8008" >"$DIR/px/haproxy.cfg"
    haproxy_start
  fi
  wait_until "$WAIT" "a Patroni leader with two streaming replicas (logs: $DIR/n*/patroni.log)" \
    patroni_healthy
  local hostlist=""
  for n in n1 n2 n3; do hostlist+="${hostlist:+,}$(ip_of "$n"):5432"; done
  if [[ "$PROXY" == 1 ]]; then hostlist="$(ip_of px):5432"; fi
  URL="postgresql://postgres:$PW@$hostlist/postgres"
}

# --- MariaDB Galera --------------------------------------------------------

# Durable, as users should run it: the redo log is written and flushed at
# every commit. With --unsafe-flush (the negative control) it is written to
# the OS only about once a second (innodb_flush_log_at_timeout), from a log
# buffer inside mariadbd: a kill -9 of every node loses the commits of that
# last second even though the OS keeps running. sync_binlog=0 is what a
# binary log would get with it; the lab runs none.
galera_flush_config() {
  if [[ "$UNSAFE" == 1 ]]; then
    printf '%s\n' "# Negative control (--unsafe-flush): NOT durable." \
      innodb_flush_log_at_trx_commit=0 innodb_flush_log_at_timeout=1 sync_binlog=0
  else
    printf '%s\n' "# Durable, as users should run it: flush the redo log at every commit." \
      innodb_flush_log_at_trx_commit=1
  fi
}

galera_config() {
  local n="$1" ip
  ip="$(ip_of "$n")"
  cat <<EOF
[mysqld]
datadir=$DIR/$n/data
tmpdir=$DIR/$n/tmp
socket=$DIR/$n/sock
pid-file=$DIR/$n/mariadbd.pid
log-error=$DIR/$n/mariadbd.err
bind-address=$ip
port=3306
skip-name-resolve
max_connections=200
performance_schema=OFF
innodb_buffer_pool_size=64M
innodb_log_file_size=32M
$(galera_flush_config)
binlog_format=ROW
innodb_autoinc_lock_mode=2
wsrep_on=ON
wsrep_provider=/usr/lib/galera/libgalera_smm.so
wsrep_cluster_name=sqlq-$ID
wsrep_cluster_address=gcomm://$(ip_of n1),$(ip_of n2),$(ip_of n3)
wsrep_node_address=$ip
wsrep_node_name=$n
wsrep_sst_method=rsync
# A node that stops answering is suspected after 3 s and dropped after 6 s
# (defaults 5 s and 15 s): a quicker failover.
wsrep_provider_options="gcache.size=32M;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;evs.keepalive_period=PT1S"
EOF
}

my_start() {
  local n="$1"
  shift
  spawn "$(ns_of "$n")" "$DIR/$n/mariadbd.log" /usr/sbin/mariadbd \
    --defaults-file="$DIR/$n/my.cnf" --user="$MY_USER" "$@"
}

# One query on node $1 over its socket, as root (unix_socket authentication).
my_query() {
  timeout 5 mariadb --no-defaults -uroot -S "$DIR/$1/sock" -NB -e "$2" 2>/dev/null
}

my_state() {
  my_query "$1" "SELECT
    (SELECT variable_value FROM information_schema.global_status WHERE variable_name = 'wsrep_cluster_size'),
    (SELECT variable_value FROM information_schema.global_status WHERE variable_name = 'wsrep_local_state_comment')"
}
# Node $1 Synced in a cluster of $2 (default 3) nodes.
my_synced() {
  local s
  s="$(my_state "$1")" || return 1
  [[ "$s" == "${2:-3}"$'\tSynced' ]]
}

# Every node Synced, and HAProxy sending to one of them (the writer; the
# others answer its check "standby").
galera_healthy() {
  local n
  for n in n1 n2 n3; do my_synced "$n" || return 1; done
  [[ "$(haproxy_up_count)" -eq 1 ]]
}

# The health check HAProxy asks: HTTP 200 when the node is Synced and ready
# for writes (wsrep_local_state 4, wsrep_ready ON) and is the writer, 503
# otherwise. A handshake check would pass a node outside the primary
# component. The writer (the file px/writer) stays the writer while it is
# Synced; only when it is not does the first Synced node to be checked take
# over. So a node that comes back does not take the writes back: sessions
# still running on the old writer would overlap the new writer's for a
# moment, and Galera with two writers can hand one message to two
# consumers (docs/deploying.md). A writer that does not answer in time
# (a loaded machine, or a paused server) is not taken over from at once:
# only once it has not answered for 6 s, so that a slow answer does not
# make two writers. On one machine every check can read every node's state
# through its socket; a real deployment needs its own way to keep one
# writer (docs/deploying.md).
write_galera_check() {
  cat >"$DIR/check.sh" <<'EOF'
#!/bin/bash
# Reads the request first, so that closing does not reset the connection.
while IFS= read -r -t 2 line && [[ "$line" != $'\r' && -n "$line" ]]; do :; done
# The node's state, "4<TAB>ON" when Synced and ready; exit status 124 when
# it did not answer within 3 s.
state() {
  timeout 3 mariadb --no-defaults -uroot -S "$1/sock" -NB -e "SELECT
    (SELECT variable_value FROM information_schema.global_status WHERE variable_name = 'wsrep_local_state'),
    (SELECT variable_value FROM information_schema.global_status WHERE variable_name = 'wsrep_ready')" 2>/dev/null
}
answer() { printf 'HTTP/1.0 %s\r\nContent-Length: %d\r\n\r\n%s\n' "$1" $((${#2} + 1)) "$2"; }
me="${1##*/}" lab="${1%/*}"
[[ "$(state "$1")" == $'4\tON' ]] || { answer '503 Service Unavailable' 'not Synced'; exit 0; }
exec 9>"$lab/px/writer.lock"
flock -w 3 9 || { answer '503 Service Unavailable' 'busy'; exit 0; }
writer="$(cat "$lab/px/writer" 2>/dev/null)"
silent="$lab/px/writer.silent"  # since when the writer has not answered
if [[ -n "$writer" && "$writer" != "$me" ]]; then
  s="$(state "$lab/$writer")"
  rc=$?
  if [[ "$s" == $'4\tON' ]]; then
    rm -f "$silent"
    answer '503 Service Unavailable' "standby (writer: $writer)"
    exit 0
  fi
  if ((rc == 124)); then
    now=$(date +%s)
    [[ -s "$silent" ]] || echo "$now" >"$silent"
    if ((now - $(cat "$silent") < 6)); then
      answer '503 Service Unavailable' "standby (writer: $writer, not answering)"
      exit 0
    fi
  fi
fi
rm -f "$silent"
[[ "$writer" == "$me" ]] || echo "$me" >"$lab/px/writer"
answer '200 OK' 'Synced, writer'
EOF
  chmod 0755 "$DIR/check.sh"
}
check_start() {
  local n="$1"
  spawn "$(ns_of "$n")" "$DIR/$n/check.log" socat \
    "TCP-LISTEN:9200,bind=$(ip_of "$n"),reuseaddr,fork" "EXEC:$DIR/check.sh $DIR/$n"
}

start_galera() {
  local n
  for n in n1 n2 n3; do
    mkdir -p "$DIR/$n/tmp" "$DIR/$n/data"
    galera_config "$n" >"$DIR/$n/my.cnf"
    chown -R "$MY_USER:" "$DIR/$n"
    chmod 0700 "$DIR/$n"
  done
  # Only the first node needs a system database: the others receive the
  # first's by state transfer when they join.
  (cd / && mariadb-install-db --no-defaults --user="$MY_USER" \
    --datadir="$DIR/n1/data" --tmpdir="$DIR/n1/tmp" --innodb-log-file-size=32M \
    --auth-root-authentication-method=socket --skip-test-db) >"$DIR/n1/install.log" 2>&1 ||
    die "mariadb-install-db failed (log: $DIR/n1/install.log)"
  my_start n1 --wsrep-new-cluster
  wait_until "$WAIT" "the first Galera node (log: $DIR/n1/mariadbd.err)" my_synced n1 1
  my_query n1 "CREATE USER 'sqlq'@'%' IDENTIFIED BY '$PW';
    GRANT ALL PRIVILEGES ON *.* TO 'sqlq'@'%'; CREATE DATABASE sqlq" ||
    die "could not create the sqlq user on n1"
  log "first Galera node up after $(elapsed "$T0") s"
  my_start n2
  my_start n3
  # One writer at a time: the one node whose check answers 200 (n1 first,
  # kept until it is not Synced; write_galera_check). Sessions to a node
  # marked down are cut, so that two nodes never take writes at once.
  mkdir -p "$DIR/px"
  echo n1 >"$DIR/px/writer"
  write_galera_check
  for n in n1 n2 n3; do check_start "$n"; done
  haproxy_config 3306 "  option httpchk GET /
  http-check expect status 200
  default-server inter 1s fall 2 rise 2 on-marked-down shutdown-sessions
  server n1 $(ip_of n1):3306 check port 9200
  server n2 $(ip_of n2):3306 check port 9200
  server n3 $(ip_of n3):3306 check port 9200" >"$DIR/px/haproxy.cfg"
  haproxy_start
  wait_until "$WAIT" "3 Synced Galera nodes behind HAProxy (logs: $DIR/n*/mariadbd.err)" \
    galera_healthy
  URL="mysql://sqlq:$PW@$(ip_of px):3306/sqlq"
}

# No mariadbd runs on any node.
galera_all_down() {
  local n
  for n in n1 n2 n3; do ns_lacks "$(ns_of "$n")" /usr/sbin/mariadbd || return 1; done
}

# The position node $1 has committed up to, "UUID:SEQNO", as InnoDB recovers
# it after a crash (mariadbd --wsrep-recover, as galera_recovery does).
galera_recover_position() {
  local n="$1" out="$DIR/$1/wsrep-recover.log"
  (cd / && timeout "$WAIT" ip netns exec "$(ns_of "$n")" /usr/sbin/mariadbd \
    --defaults-file="$DIR/$n/my.cnf" --user="$MY_USER" --wsrep-recover \
    --log-error="$out") >/dev/null 2>&1 || true
  # "... WSREP: Recovered position: UUID:SEQNO" (SEQNO -1: nothing known)
  sed -n 's/.*WSREP: Recovered position: *\([0-9a-f-]*:-\{0,1\}[0-9]*\).*/\1/p' "$out" | tail -n 1
}

# Restarts a Galera cluster whose every node crashed. No node is safe to
# bootstrap (grastate.dat says seqno -1, safe_to_bootstrap 0), so each node's
# last committed position is recovered from InnoDB; the most advanced one is
# marked safe_to_bootstrap and starts a new cluster at that position, and the
# others join it (by state transfer). Starting from a less advanced node would
# throw away commits the others have.
galera_bootstrap_recovered() {
  local n pos best="" best_seq=-2 seq
  declare -A start_pos=()
  for n in n1 n2 n3; do
    pos="$(galera_recover_position "$n")"
    [[ -n "$pos" ]] || die "heal: no recovered position for $n (log: $DIR/$n/wsrep-recover.log)"
    start_pos[$n]="$pos"
    seq="${pos##*:}"
    log "heal: $n recovered to $pos"
    if ((seq > best_seq)); then
      best="$n"
      best_seq="$seq"
    fi
  done
  ((best_seq >= 0)) || die "heal: no node knows its position; bootstrap by hand"
  sed -i 's/^safe_to_bootstrap:.*/safe_to_bootstrap: 1/' "$DIR/$best/data/grastate.dat"
  log "heal: bootstrapping from $best, the most advanced (seqno $best_seq)"
  my_start "$best" --wsrep-new-cluster --wsrep-start-position="${start_pos[$best]}"
  wait_until "$WAIT" "$best to bootstrap (log: $DIR/$best/mariadbd.err)" my_synced "$best" 1
  for n in n1 n2 n3; do
    if [[ "$n" != "$best" ]]; then
      my_start "$n" --wsrep-start-position="${start_pos[$n]}"
      # In its namespace before heal looks for missing daemons.
      wait_until 30 "mariadbd of $n to start" ns_has "$(ns_of "$n")" /usr/sbin/mariadbd
    fi
  done
}

# The writer: the first server HAProxy sends to (n1, else the first backup up).
galera_writer() {
  local states
  states="$(haproxy_states)"
  awk '$2 == 2 { print $1; exit }' <<<"$states"
}

# --- sqlq serve on nodes of its own, behind an HAProxy (command sqlq) ------

# The database URL the servers use: every node (sqlq then connects to the
# writable one), or the cluster's HAProxy with a failover wait, as
# docs/deploying.md advises behind a proxy.
sqlq_db_url() {
  case "$KIND" in
    patroni) echo "$URL" ;;
    *) echo "$URL?failover_wait_ms=15000" ;;
  esac
}

sqlq_serve_start() {
  local s="$1" url
  url="$(sqlq_db_url)"
  mkdir -p "$DIR/$s"
  spawn "$(ns_of "$s")" "$DIR/$s/serve.log" "$SQLQ_BIN" --db "$url" serve \
    --bind 0.0.0.0 --port 8080 --tokens "$DIR/sx/tokens"
}
sqlq_ready() { curl -sf -m 2 -o /dev/null "http://$(ip_of "$1"):8080/readyz"; }
sqlq_nodes() { seq -f 's%g' 1 "$SERVERS"; }

http_proxy_config() {
  cat <<EOF
global
  maxconn 2000
  stats socket $DIR/sx/haproxy.sock mode 600 level admin
defaults
  mode http
  timeout connect 2s
  # Longer than the longest claim wait (sqlq serve --max-wait, 60 s).
  timeout client 90s
  timeout server 90s
  timeout check 20s
listen sqlq
  bind $(ip_of sx):8080
  balance roundrobin
  # A request whose connection to a server failed (a server that died)
  # goes to another at once; it never reached the dead one.
  option redispatch 1
  retries 2
  retry-on conn-failure
  option httpchk
  http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost
  http-check expect status 200
  default-server inter 1s fall 2 rise 2
EOF
  local s
  for s in $(sqlq_nodes); do
    echo "  server $s $(ip_of "$s"):8080 check"
  done
}
# "name op_state" of each sqlq serve behind the HTTP HAProxy (2: up).
http_proxy_states() {
  echo "show servers state sqlq" |
    timeout 3 socat -t 2 - "UNIX-CONNECT:$DIR/sx/haproxy.sock" 2>/dev/null |
    awk 'NF > 6 && $1 ~ /^[0-9]+$/ { print $4, $6 }'
}
sqlq_all_up() {
  local s
  for s in $(sqlq_nodes); do
    [[ -n "$(pids_matching "$(ns_of "$s")" " serve ")" ]] || return 1
  done
  [[ "$(http_proxy_states | awk '$2 == 2' | wc -l)" -eq "$SERVERS" ]]
}

cmd_sqlq() {
  load "${1:-}"
  shift || true
  local servers=2 workers=2 bin="${SQLQ_BIN:-}"
  while (($#)); do
    case "$1" in
      --servers) servers="${2:-}" && shift ;;
      --workers) workers="${2:-}" && shift ;;
      --bin) bin="${2:-}" && shift ;;
      *) die "sqlq: unknown option '$1' (see --help)" ;;
    esac
    shift
  done
  [[ "$servers" =~ ^[1-3]$ ]] || die "sqlq: --servers takes 1 to 3, not '$servers'"
  [[ "$workers" =~ ^[0-3]$ ]] || die "sqlq: --workers takes 0 to 3, not '$workers'"
  [[ -n "$bin" ]] || bin="$(command -v sqlq || true)"
  [[ -n "$bin" && -x "$bin" ]] || die "sqlq: no sqlq program (give --bin PATH or set SQLQ_BIN)"
  [[ -z "${SERVERS:-}" ]] || die "sqlq: this lab already runs sqlq serve"
  command -v haproxy >/dev/null || die "missing haproxy (run scripts/install-deps.sh)"
  local t0 line token hash
  t0="$(now)"
  SQLQ_BIN="$(readlink -f "$bin")"
  SERVERS="$servers"
  WORKERS="$workers"
  mkdir -p "$DIR/sx"
  # One token with every permission: servers that listen beyond loopback
  # need a token file.
  line="$("$SQLQ_BIN" token new)"
  token="$(awk '$1 == "token:" { print $2 }' <<<"$line")"
  hash="$(awk '$1 == "line:" { print $2 }' <<<"$line")"
  echo "$hash admin:*" >"$DIR/sx/tokens"
  echo "SQLQ_BIN=$SQLQ_BIN SERVERS=$SERVERS WORKERS=$WORKERS TOKEN=$token" >>"$DIR/lab.env"
  local s
  for s in sx $(sqlq_nodes) $(seq -f 'w%g' 1 "$WORKERS"); do node_up "$s"; done
  for s in $(sqlq_nodes); do sqlq_serve_start "$s"; done
  for s in $(sqlq_nodes); do
    wait_until "$WAIT" "sqlq serve on $s to be ready (log: $DIR/$s/serve.log)" sqlq_ready "$s"
  done
  http_proxy_config >"$DIR/sx/haproxy.cfg"
  spawn "$(ns_of sx)" "$DIR/sx/haproxy.log" haproxy -db -f "$DIR/sx/haproxy.cfg"
  wait_until "$WAIT" "HAProxy to see every sqlq serve up" sqlq_all_up
  log "$SERVERS sqlq serve behind HAProxy $(ip_of sx):8080 after $(elapsed "$t0") s"
  local servers_urls="" workers_nodes=""
  for s in $(sqlq_nodes); do servers_urls+="${servers_urls:+ }http://$(ip_of "$s"):8080"; done
  for s in $(seq -f 'w%g' 1 "$WORKERS"); do workers_nodes+="${workers_nodes:+ }$s"; done
  echo "export SQLQ_HA_HTTP='http://$(ip_of sx):8080'"
  echo "export SQLQ_HA_TOKEN='$token'"
  echo "export SQLQ_HA_DB_URL='$(sqlq_db_url)'"
  echo "export SQLQ_HA_SERVERS='$servers_urls'"
  echo "export SQLQ_HA_WORKER_NODES='$workers_nodes'"
}

# Runs a command on a node of the lab (in its namespace), in the
# foreground: workers on w1-w3, as separate machines would run them.
cmd_exec() {
  load "${1:-}"
  local node="${2:-}"
  shift 2 || die "exec: say DIR NODE COMMAND..."
  [[ "${1:-}" != -- ]] || shift
  (($#)) || die "exec: no command given"
  ip netns list | awk '{ print $1 }' | grep -qxF -- "$(ns_of "$node")" ||
    die "exec: the lab has no node '$node'"
  exec ip netns exec "$(ns_of "$node")" "$@"
}

# --- commands --------------------------------------------------------------

cmd_start() {
  local kind="${1:-}" async=0 unsafe=0
  shift || true
  while (($#)); do
    case "$1" in
      --async) async=1 ;;
      --unsafe-flush) unsafe=1 ;;
      *) die "start: unknown option '$1' (see --help)" ;;
    esac
    shift
  done
  case "$kind" in
    patroni | patroni-haproxy | galera) ;;
    *) die "start: say patroni, patroni-haproxy or galera (see --help)" ;;
  esac
  [[ "$async" == 0 || "$kind" != galera ]] || die "--async is for patroni only"
  [[ "$unsafe" == 0 || "$kind" == galera ]] || die "--unsafe-flush is for galera only"
  [[ $(id -u) -eq 0 ]] || die "needs root (network namespaces, a bridge, nft)"
  local need=(ip nft curl setpriv)
  case "$kind" in
    patroni*) need+=(etcd etcdctl patroni patronictl psql "$PG_BIN/postgres") ;;
    galera) need+=(mariadbd mariadb mariadb-install-db socat rsync /usr/lib/galera/libgalera_smm.so) ;;
  esac
  if [[ "$kind" != patroni ]]; then need+=(haproxy socat); fi
  local c
  for c in "${need[@]}"; do
    if [[ "$c" == /* ]]; then
      [[ -e "$c" ]] || die "missing $c (run scripts/install-deps.sh)"
    else
      command -v "$c" >/dev/null || die "missing $c (run scripts/install-deps.sh)"
    fi
  done
  id "$PG_USER" >/dev/null 2>&1 || [[ "$kind" == galera ]] || die "no '$PG_USER' user"
  id "$MY_USER" >/dev/null 2>&1 || [[ "$kind" != galera ]] || die "no '$MY_USER' user"

  T0="$(now)"
  DIR="$(mktemp -d /tmp/sqlq-ha-XXXXXX)"
  chmod 0755 "$DIR"
  ID="${DIR##*-}"
  # From here on a failure removes what was made.
  trap 'rc=$?; if ((rc != 0)); then start_failed; fi' EXIT
  trap 'exit 130' INT TERM
  NSP="sqlqha-$ID"
  BR="sqha$ID"
  VP="sqh$ID"
  KIND="$kind"
  ASYNC="$async"
  UNSAFE="$unsafe"
  PROXY=0
  if [[ "$kind" != patroni ]]; then PROXY=1; fi
  PW="ha$RANDOM$RANDOM$RANDOM"
  # Names first, so that stop (and the trap) can remove a partial start.
  {
    echo "KIND=$KIND ASYNC=$ASYNC UNSAFE=$UNSAFE PROXY=$PROXY ID=$ID"
    echo "NSP=$NSP BR=$BR VP=$VP PW=$PW"
  } >"$DIR/lab.env"
  # The lock is on /tmp itself, so that no lock file is left behind.
  exec 9</tmp
  flock -w 30 9 || die "another lab's start holds the lock on /tmp for 30 s"
  NET="$(pick_subnet)"
  echo "NET=$NET" >>"$DIR/lab.env"
  net_up
  exec 9>&-
  log "$KIND lab in $DIR on $NET.0/24 (bridge $BR)"
  case "$kind" in
    patroni*) start_patroni ;;
    galera) start_galera ;;
  esac
  echo "URL=$URL" >>"$DIR/lab.env"
  trap - EXIT INT TERM
  log "$KIND cluster up after $(elapsed "$T0") s"
  echo "export SQLQ_HA_DIR='$DIR'"
  echo "export SQLQ_HA_URL='$URL'"
  echo "export SQLQ_HA_KIND='$KIND'"
  echo "export SQLQ_HA_NODES='$(ip_of n1) $(ip_of n2) $(ip_of n3)'"
}

# Removes everything a lab made, whatever state it is in.
teardown() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -F -- "${NSP:-none}-" || true); do
    kill_ns "$ns" || true
    ip netns del "$ns" 2>/dev/null || true
  done
  local h
  for h in n1 n2 n3 px sx s1 s2 s3 w1 w2 w3; do ip link del "${VP:-none}$h" 2>/dev/null || true; done
  ip link del "${BR:-none}" 2>/dev/null || true
  rm -rf "$DIR"
}

# After a failed start: the end of each log, then the lab is removed (kept
# with SQLQ_HA_KEEP=1, for a look; stop removes it then).
start_failed() {
  local f
  for f in "$DIR"/*/*.log "$DIR"/*/*.err; do
    if [[ -s "$f" ]]; then
      echo "--- ${f#"$DIR"/} (end)" >&2
      tail -n 15 "$f" >&2
    fi
  done
  if [[ "${SQLQ_HA_KEEP:-0}" == 1 ]]; then
    log "start failed; kept $DIR (SQLQ_HA_KEEP=1): remove it with: $0 stop $DIR"
  else
    log "start failed; removing $DIR"
    teardown
  fi
}

cmd_stop() {
  load "${1:-}"
  teardown
}

# The writable node's address, or nothing.
current_leader() {
  case "$KIND" in
    patroni*)
      local l
      l="$(patroni_primaries)"
      if [[ -n "$l" && "$l" != *$'\n'* ]]; then echo "$l"; fi
      ;;
    galera)
      local w
      w="$(galera_writer)"
      if [[ -n "$w" ]]; then ip_of "$w"; fi
      ;;
  esac
}

test_leader_is() { [[ "$(current_leader)" == "$1" ]]; }
leader_other_than() {
  local l
  l="$(current_leader)"
  [[ -n "$l" && "$l" != "$1" ]] || return 1
  echo "$l"
}

cmd_leader() {
  load "${1:-}"
  shift || true
  local not="" limit=""
  while (($#)); do
    case "$1" in
      --not) not="${2:?--not needs an address}" && shift ;;
      --timeout) limit="${2:?--timeout needs seconds}" && shift ;;
      *) die "leader: unknown option '$1'" ;;
    esac
    shift
  done
  if [[ -z "$limit" ]]; then
    leader_other_than "$not" || die "no writable node${not:+ other than $not} now"
    return
  fi
  [[ "$limit" =~ ^[0-9]+$ ]] || die "--timeout must be whole seconds, not '$limit'"
  local deadline=$((SECONDS + limit))
  until leader_other_than "$not"; do
    ((SECONDS < deadline)) ||
      die "no writable node${not:+ other than $not} within ${limit}s"
    sleep 0.2
  done
}

cmd_fault() {
  local name="${1:-}"
  [[ " $FAULTS " == *" $name "* ]] || die "fault: unknown fault '$name'; faults: $FAULTS"
  load "${2:-}"
  local leader primary
  leader="$(current_leader)"
  [[ -n "$leader" ]] || die "fault $name: no writable node now (heal first)"
  primary="$(node_of_ip "$leader")"
  local ns peers="" n
  ns="$(ns_of "$primary")"
  for n in n1 n2 n3; do
    if [[ "$n" != "$primary" ]]; then peers+="${peers:+, }$(ip_of "$n")"; fi
  done
  case "$name" in
    primary-kill) kill_ns "$ns" ;;
    primary-partition) nft_partition "$ns" "$peers" ;;
    primary-blackhole) nft_blackhole "$ns" ;;
    pause | pause-db)
      local pat
      if [[ "$KIND" == galera ]]; then
        pat=/usr/sbin/mariadbd
      elif [[ "$name" == pause ]]; then
        pat=/usr/bin/patroni
      else
        pat="postgres"
      fi
      local pids p
      if [[ "$pat" == postgres ]]; then
        # The postmaster and every backend: their process name is postgres.
        pids="$(for p in $(ip netns pids "$ns"); do
          if [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == postgres ]]; then echo "$p"; fi
        done)"
      else
        pids="$(pids_matching "$ns" "$pat")"
      fi
      [[ -n "$pids" ]] || die "fault $name: no $pat process on $primary"
      # shellcheck disable=SC2086
      kill -STOP $pids
      ;;
    switchover)
      if [[ "$KIND" == galera ]]; then
        timeout 60 mariadb-admin --no-defaults -uroot -S "$DIR/$primary/sock" shutdown ||
          die "switchover: shutdown of $primary failed"
        wait_until 60 "mariadbd of $primary to exit" ns_lacks "$ns" /usr/sbin/mariadbd
      else
        local cand
        cand="$(patroni_sync_standby "$leader")" || die "switchover: no replica to switch to"
        # patronictl exits 0 even when Patroni refuses; the new leader tells.
        patronictl_ switchover --leader "$primary" --candidate "$cand" --force >&2 || true
        wait_until 60 "$cand to take over from $primary" \
          test_leader_is "$(ip_of "$cand")" || die "switchover: $cand did not take over"
      fi
      ;;
    server-kill)
      [[ -n "${SERVERS:-}" ]] || die "fault server-kill: this lab runs no sqlq serve (see the sqlq command)"
      kill_ns "$(ns_of s1)"
      primary=s1
      ;;
    replica-kill)
      local victim
      if [[ "$KIND" == galera ]]; then
        for n in n1 n2 n3; do
          if [[ "$n" != "$primary" ]]; then
            victim="$n"
            break
          fi
        done
      else
        victim="$(patroni_sync_standby "$leader")" || die "replica-kill: no replica"
      fi
      kill_ns "$(ns_of "$victim")"
      primary="$victim"
      ;;
    all-kill)
      # One kill for the three nodes, so that none outlives the others and
      # takes commits they lack.
      local pids
      pids="$(for n in n1 n2 n3; do ip netns pids "$(ns_of "$n")" 2>/dev/null || true; done)"
      # shellcheck disable=SC2086
      if [[ -n "$pids" ]]; then kill -KILL $pids 2>/dev/null || true; fi
      for n in n1 n2 n3; do
        wait_until 30 "the processes of $(ns_of "$n") to exit" ns_empty "$(ns_of "$n")"
      done
      echo "$name n1 n2 n3" >>"$DIR/faults"
      log "fault $name on n1 n2 n3 (the writer was $primary)"
      return
      ;;
  esac
  echo "$name $primary" >>"$DIR/faults"
  log "fault $name on $primary ($(ip_of "$primary"))"
}

cmd_heal() {
  load "${1:-}"
  local t0 n ns
  t0="$(now)"
  if [[ "$KIND" == galera ]] && galera_all_down; then
    # No node left to join: every one crashed (all-kill).
    for n in n1 n2 n3; do nft_heal "$(ns_of "$n")"; done
    galera_bootstrap_recovered
  fi
  for n in n1 n2 n3; do
    ns="$(ns_of "$n")"
    nft_heal "$ns"
    local pids
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    # shellcheck disable=SC2086
    if [[ -n "$pids" ]]; then kill -CONT $pids 2>/dev/null || true; fi
    case "$KIND" in
      patroni*)
        [[ -n "$(pids_matching "$ns" " --data-dir $DIR/$n/etcd")" ]] || etcd_start "$n"
        [[ -n "$(pids_matching "$ns" /usr/bin/patroni)" ]] || patroni_start "$n"
        ;;
      galera)
        [[ -n "$(pids_matching "$ns" /usr/sbin/mariadbd)" ]] || my_start "$n"
        [[ -n "$(pids_matching "$ns" TCP-LISTEN:9200)" ]] || check_start "$n"
        ;;
    esac
  done
  case "$KIND" in
    patroni*)
      wait_until "$WAIT" "a Patroni leader with two streaming replicas (logs: $DIR/n*/patroni.log)" \
        patroni_healthy
      ;;
    galera)
      wait_until "$WAIT" "3 Synced Galera nodes behind HAProxy (logs: $DIR/n*/mariadbd.err)" \
        galera_healthy
      ;;
  esac
  if [[ -n "${SERVERS:-}" ]]; then
    for n in $(sqlq_nodes); do
      [[ -n "$(pids_matching "$(ns_of "$n")" " serve ")" ]] || sqlq_serve_start "$n"
    done
    wait_until "$WAIT" "HAProxy to see every sqlq serve up (logs: $DIR/s*/serve.log)" sqlq_all_up
  fi
  rm -f "$DIR/faults"
  log "healed after $(elapsed "$t0") s"
}

cmd_status() {
  load "${1:-}"
  echo "$KIND lab in $DIR, subnet $NET.0/24, bridge $BR"
  case "$KIND" in
    patroni*) patronictl_ list || true ;;
    galera)
      local n
      for n in n1 n2 n3; do
        echo "$n $(ip_of "$n"): $(my_state "$n" | tr '\t' ' ' || echo 'no answer')"
      done
      ;;
  esac
  if [[ "$PROXY" == 1 ]]; then echo "haproxy (server op_state, 2 = up):" && haproxy_states; fi
  echo "writable: $(current_leader || true)"
  if [[ -f "$DIR/faults" ]]; then echo "faults: $(tr '\n' ';' <"$DIR/faults")"; fi
  local h kb=0 p
  for h in $(hosts); do
    for p in $(ip netns pids "$(ns_of "$h")" 2>/dev/null || true); do
      kb=$((kb + $(awk '/^Pss:/ { print $2 }' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)))
    done
  done
  # PSS: each page shared by several processes (PostgreSQL's shared
  # buffers) is split among them rather than counted once per process.
  echo "memory: $((kb / 1024)) MB (proportional set size of every lab process)"
}

case "${1:-}" in
  start) shift && cmd_start "$@" ;;
  stop) cmd_stop "${2:-}" ;;
  fault) cmd_fault "${2:-}" "${3:-}" ;;
  heal) cmd_heal "${2:-}" ;;
  leader) shift && cmd_leader "$@" ;;
  status) cmd_status "${2:-}" ;;
  sqlq) shift && cmd_sqlq "$@" ;;
  exec) shift && cmd_exec "$@" ;;
  -h | --help | help) usage ;;
  *)
    usage >&2
    exit 2
    ;;
esac
