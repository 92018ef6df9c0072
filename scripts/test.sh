#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every
# test. Slow fault and soak tests carry the CTest label "slow" and run only
# with SQLQ_SLOW=1.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

preset="${SQLQ_PRESET:-dev}"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
cmake --build --preset "$preset" --target format-check

exclude=()
if [[ "${SQLQ_SLOW:-0}" != 1 ]]; then exclude=(-LE slow); fi
ctest --preset "$preset" -j "$(nproc)" "${exclude[@]}"
