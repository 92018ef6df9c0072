#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# test. Slow fault and soak tests carry the CTest label "slow" and run only
# with SQLQ_SLOW=1. The PostgreSQL tests run against a throwaway server that
# this script starts (scripts/pg-test-server.sh) and stops; SQLQ_REQUIRE_PG=1
# makes them fail rather than skip should it be missing.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

preset="${SQLQ_PRESET:-dev}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
cmake --build --preset "$preset" --target format-check
# The dashboard's browser test: playwright-core at the version pinned in
# tests/web/package-lock.json.
(cd tests/web && npm ci --no-audit --no-fund --silent)

# A server of the developer's own may be named in SQLQ_TEST_PG_URL instead
# (its user must be allowed to create databases).
if [[ -z "${SQLQ_TEST_PG_URL:-}" ]]; then
  pg_server="$PWD/scripts/pg-test-server.sh"
  eval "$("$pg_server" start)"
  trap '"$pg_server" stop "$SQLQ_TEST_PG_DIR"' EXIT
fi
export SQLQ_TEST_PG_URL SQLQ_REQUIRE_PG=1

exclude=()
if [[ "${SQLQ_SLOW:-0}" != 1 ]]; then exclude=(-LE slow); fi
ctest --preset "$preset" -j "$(nproc)" "${exclude[@]}"
