# shellcheck shell=bash
# What the lab's smoke tests (ha_lab_test.sh, all_kill_test.sh) share: their
# failure and skip, their clock, and the retry of a write during a failover.
# Sourced, not run.

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# The lab needs root: without it the test is skipped (exit 77, which CTest
# reads as skipped), or fails when SQLQ_REQUIRE_HA=1.
skip_unless_root() {
  if [[ $(id -u) -ne 0 ]]; then
    [[ "${SQLQ_REQUIRE_HA:-0}" != 1 ]] || fail "needs root (SQLQ_REQUIRE_HA=1)"
    echo "SKIP: the lab needs root (network namespaces)" >&2
    exit 77
  fi
}

now() { echo "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# Retries a command for at most $1 seconds (a write during a failover).
retry() {
  local limit="$1" deadline
  shift
  deadline=$((SECONDS + limit))
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.3
  done
}

# Stops the lab of SQLQ_HA_DIR with the lab script $1, and checks that
# nothing of lab $2 (its id) is left: directory, namespaces, links.
stop_and_check_gone() {
  local lab="$1" id="$2" dir="$SQLQ_HA_DIR"
  "$lab" stop "$dir"
  SQLQ_HA_DIR=""
  [[ ! -e "$dir" ]] || fail "stop left $dir"
  ! ip netns list | grep -qF -- "-$id-" || fail "stop left namespaces of $id"
  ! ip link show | grep -qF -- "$id" || fail "stop left links of $id"
}
