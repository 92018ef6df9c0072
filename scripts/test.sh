#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# test, then the fuzz targets and the tests under the sanitizers
# (scripts/sanitize.sh). Slow fault and soak tests carry the CTest label
# "slow" and run only with SQLQ_SLOW=1. The PostgreSQL tests run against a throwaway server that
# this script starts (scripts/pg-test-server.sh) and stops; SQLQ_REQUIRE_PG=1
# makes them fail rather than skip should it be missing. The same for MariaDB
# (scripts/mariadb-test-server.sh, SQLQ_REQUIRE_MYSQL=1).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start, with the seconds since this script began, so that a
# slow run shows where its time went.
stage() { printf '== test.sh: %s (%ss)\n' "$*" "$SECONDS"; }

stage "installing what is missing"
./scripts/install-deps.sh

preset="${SQLQ_PRESET:-dev}"
# ccache keys on paths relative to the checkout and not on the build
# directory, so that the packaging test's build below (the dev build's
# flags, SQLQ_PACKAGE_BUILD_TYPE) takes the dev build's objects.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
stage "building the $preset preset"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
cmake --build --preset "$preset" --target format-check
stage "installing the tests' npm packages"
# The dashboard's browser test: playwright-core at the version pinned in
# tests/web/package-lock.json.
(cd tests/web && npm ci --no-audit --no-fund --silent)
# The SQS endpoint's JavaScript test: @aws-sdk/client-sqs at the version
# pinned in tests/sqs/node/package-lock.json.
(cd tests/sqs/node && npm ci --no-audit --no-fund --silent)
# The Node.js client's type check and tracing test: typescript, @types/node
# and OpenTelemetry's API and SDK pinned in clients/node/package-lock.json
# (the client itself has no dependencies).
(cd clients/node && npm ci --no-audit --no-fund --silent)
# The scorecard's pg-boss column and its test: pg-boss and pg pinned in
# bench/pgboss/package-lock.json.
(cd bench/pgboss && npm ci --no-audit --no-fund --silent)
# The OpenAPI description's test: @seriousme/openapi-schema-validator and
# ajv pinned in tests/openapi/package-lock.json.
(cd tests/openapi && npm ci --no-audit --no-fund --silent)

# A server of the developer's own may be named in SQLQ_TEST_PG_URL instead
# (its user must be allowed to create databases).
if [[ -z "${SQLQ_TEST_PG_URL:-}" ]]; then
  pg_server="$PWD/scripts/pg-test-server.sh"
  eval "$("$pg_server" start)"
fi
# Stops the servers this script started.
cleanup() {
  if [[ -n "${pg_server:-}" ]]; then "$pg_server" stop "$SQLQ_TEST_PG_DIR"; fi
  if [[ -n "${mariadb_server:-}" ]]; then
    "$mariadb_server" stop "$SQLQ_TEST_MYSQL_DIR"
  fi
}
trap cleanup EXIT
export SQLQ_TEST_PG_URL SQLQ_REQUIRE_PG=1

# Likewise a throwaway MariaDB (scripts/mariadb-test-server.sh), unless
# SQLQ_TEST_MYSQL_URL names one (its user must be allowed to create
# databases). Tests that need a primary and a replica, or restart the server,
# start their own with the same script.
if [[ -z "${SQLQ_TEST_MYSQL_URL:-}" ]]; then
  mariadb_server="$PWD/scripts/mariadb-test-server.sh"
  eval "$("$mariadb_server" start)"
fi
export SQLQ_TEST_MYSQL_URL SQLQ_REQUIRE_MYSQL=1

package_test=0 sanitize=0
if [[ "$preset" == dev ]]; then
  package_test="${SQLQ_PACKAGE_TEST:-1}" sanitize="${SQLQ_SANITIZE:-1}"
fi

# Labels not run here: "slow" (unless SQLQ_SLOW=1), and with the sanitizer
# stage to come, "server" (black-box tests of sqlq serve), which run there
# against the sanitized sqlq rather than twice. The CLI's tests (label
# "cli") run here, against the plain sqlq: each of their short runs of the
# program starts in 0.02 s, against 0.15 s under ASan (the 108 tests took
# 56 s of a run against 177), and fuzz_cli runs the CLI's code under ASan.
skip=()
if [[ "${SQLQ_SLOW:-0}" != 1 ]]; then skip+=(slow); fi
if [[ $sanitize == 1 ]]; then skip+=(server); fi
exclude=()
if ((${#skip[@]})); then exclude=(-LE "^($(IFS='|'; echo "${skip[*]}"))\$"); fi
stage "ctest"
ctest --preset "$preset" -j "$(nproc)" --output-on-failure "${exclude[@]}"

# The install rules, the .deb and an SQLite-only build
# (scripts/package-test.sh, docs/installing.md); SQLQ_PACKAGE_TEST=0 skips
# them.
# Built with the dev build's flags (Debug), from its objects: the install
# rules, the package and the SQLite-only build are what it tests, and an
# optimized build of its own took four minutes of a run. The optimized
# builds in a run are the fuzz build's (clang, -O2) and the ASan and UBSan
# tests run on it.
if [[ $package_test == 1 ]]; then
  stage "the packaging test"
  SQLQ_PACKAGE_BUILD_TYPE=Debug ./scripts/package-test.sh
fi

# Fuzzing and the sanitizers (scripts/sanitize.sh, docs/reliability.md);
# SQLQ_SANITIZE=0 skips them.
if [[ $sanitize == 1 ]]; then
  stage "the sanitizers"
  ./scripts/sanitize.sh
fi
stage "done"
