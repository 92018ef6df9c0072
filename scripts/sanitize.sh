#!/usr/bin/env bash
# The sanitizer stage of scripts/test.sh (docs/reliability.md): run after the
# dev build's tests pass, with the same database servers.
#
# 1. clang, AddressSanitizer + UndefinedBehaviorSanitizer (the fuzz preset):
#    every fuzz target for SQLQ_FUZZ_SECONDS (10), then the server tests
#    of the dev build run against the sanitized `sqlq` (the server is what
#    they test, as a black box; the CLI's tests run in scripts/test.sh
#    against the plain one, and fuzz_cli runs the CLI's code here).
# 2. gcc, ThreadSanitizer (the tsan preset): the core tests (write batcher,
#    wake hub, waiting reports) built with TSan, and the server tests of
#    concurrency again against a TSan `sqlq` (long polls, parked claims,
#    shutdown, the crash campaign on every engine). With
#    SQLQ_TSAN_CONFORMANCE=1 also the conformance tests of concurrent
#    callers on every engine (the whole test binary built with TSan: about
#    150 s more, left out of CI for the time a run takes).
# Any sanitizer report stops the program at once (halt_on_error), which
# fails its test.
#
# Needs: a configured and built dev preset (scripts/test.sh does it), and
# SQLQ_TEST_PG_URL / SQLQ_TEST_MYSQL_URL for the server engines' tests.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"

export ASAN_OPTIONS="halt_on_error=1:abort_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"

echo "== ASan + UBSan: fuzzing (${SECONDS}s)"
./scripts/fuzz.sh "${SQLQ_FUZZ_SECONDS:-10}"

# The labels exactly, as anchored patterns (ctest matches labels as
# regular expressions).
echo "== ASan + UBSan: the server tests against build/fuzz/sqlq (${SECONDS}s)"
SQLQ_TEST_BIN="$PWD/build/fuzz/sqlq" SQLQ_TEST_BIN_SANITIZED=1 \
  ctest --preset dev -j "$jobs" -L '^(server|server_bounds)$' -LE slow

conformance="${SQLQ_TSAN_CONFORMANCE:-0}"
echo "== TSan: build (${SECONDS}s)"
cmake --preset tsan >/dev/null
cmake --build --preset tsan-ci -j "$jobs"
if [[ $conformance == 1 ]]; then
  cmake --build --preset tsan -j "$jobs" --target sqlq_tests
fi
echo "== TSan: the core tests (${SECONDS}s)"
ctest --preset tsan -j "$jobs" -L core
if [[ $conformance == 1 ]]; then
  echo "== TSan: the engines' conformance tests of concurrent callers (${SECONDS}s)"
  # Every engine: concurrent consumers, senders, pushers, schedulers and
  # opens (a selection of the conformance suite).
  ctest --preset tsan -j "$jobs" -LE slow \
    -R 'Conformance\..*(Concurrent|Racing|SixtyFour|Sixteen)|SqliteMultiProcess\.|DropQueueRacingSends'
fi
echo "== TSan: the server tests of concurrency against build/tsan/sqlq (${SECONDS}s)"
# Long polls and parked claims, shutdown and readiness, the database going
# away, limits shared between requests, and the crash campaign on every
# engine (the tests of single requests' answers run under ASan above).
SQLQ_TEST_BIN="$PWD/build/tsan/sqlq" SQLQ_TEST_BIN_SANITIZED=1 \
  ctest --preset dev -j "$jobs" -L server -LE slow \
  -R '^(CrashCampaign|LongPoll|Lifecycle|Readiness|DatabaseDown|DiskFull|SharedLimits|ReplyLimit|HostileBody|Batches|Schedules|SendOne|Topics|MetricsScrape)\.'

