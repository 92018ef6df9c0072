#!/usr/bin/env bash
# Builds the libFuzzer targets (the fuzz preset: clang, AddressSanitizer and
# UndefinedBehaviorSanitizer) and runs each for SECONDS (default 30), seeded
# with the corpus kept in tests/fuzz/corpus. Fails on any crash, leak,
# sanitizer report or time-out, leaving the input that caused it in
# build/fuzz/findings/TARGET/ and printing how to run it again.
#
#   scripts/fuzz.sh            # 30 s per target (CI runs 10 s: scripts/sanitize.sh)
#   scripts/fuzz.sh 3600       # an hour per target
#   scripts/fuzz.sh 600 http   # one target
#   SQLQ_FUZZ_MERGE=1 scripts/fuzz.sh 600   # then add the inputs that found
#                                           # new coverage to the corpus
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-30}"
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then targets=(http api sqs parsers cli); fi

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"

# One target: its report goes to build/fuzz/fuzz_TARGET.report, printed
# once every target has run.
fuzz_one() {
  local t=$1
  local bin="build/fuzz/tests/fuzz/fuzz_$t"
  # Absolute: a target may change its working directory while it runs.
  local seeds="$PWD/tests/fuzz/corpus/$t"
  local found="$PWD/build/fuzz/findings/$t"
  local work
  work="$(mktemp -d)"
  mkdir -p "$found"
  local log="build/fuzz/fuzz_$t.log"
  local ok=1
  # New inputs go to a scratch directory first; the kept corpus is only
  # read (merged into on request).
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 \
    -print_final_stats=1 -artifact_prefix="$found/" "$work" "$seeds" \
    >"$log" 2>&1; then
    echo "fuzz_$t: $(grep -E '^Done [0-9]+ runs' "$log" | tail -1)," \
      "$(grep -oE 'cov: [0-9]+' "$log" | tail -1)"
    if [[ "${SQLQ_FUZZ_MERGE:-0}" == 1 ]]; then
      "$bin" -merge=1 "$seeds" "$work" >>"$log" 2>&1
      echo "fuzz_$t: corpus now $(ls "$seeds" | wc -l) inputs"
    fi
  else
    echo "fuzz_$t FAILED; the end of its log ($log):"
    grep -vE '^#[0-9]+' "$log" | tail -40
    for a in "$found"/*; do
      [[ -e "$a" ]] && echo "run again: $bin $a"
    done
    ok=0
  fi
  rm -rf "$work"
  ((ok))
}

# A libFuzzer process runs on one core: as many targets at once as there
# are cores, so that a run takes SECONDS for every core's worth of targets.
status=0
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
  rm -f "build/fuzz/fuzz_$t.status"
  {
    if fuzz_one "$t"; then r=0; else r=1; fi
    echo "$r" >"build/fuzz/fuzz_$t.status"
  } >"build/fuzz/fuzz_$t.report" 2>&1 &
done
wait
for t in "${targets[@]}"; do
  cat "build/fuzz/fuzz_$t.report"
  [[ "$(cat "build/fuzz/fuzz_$t.status" 2>/dev/null)" == 0 ]] || status=1
done
exit "$status"
