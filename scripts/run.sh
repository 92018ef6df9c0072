#!/usr/bin/env bash
# The README's first command: installs what is missing, builds a release
# binary, and runs the main job. Until the server lands (issue 6) the main job
# is a short tour of the sqlq CLI on the embedded SQLite default, in a
# scratch directory.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target sqlq

sqlq="$PWD/build/release/sqlq"
demo="$(mktemp -d)"
trap 'rm -rf "$demo"' EXIT
cd "$demo"
run() { echo "\$ sqlq $*"; "$sqlq" "$@"; echo; }

echo "sqlq built at $sqlq; demo database: $demo/sqlq.db"
echo
run queue create emails --max-attempts 3 --lease 30s
run send emails --priority 5 "urgent: reset password"
run send emails "weekly digest"
printf 'bulk 1\nbulk 2\nbulk 3\n' >"$demo/lines"
echo "\$ printf 'bulk 1\nbulk 2\nbulk 3\n' | sqlq send emails - --json"
"$sqlq" send emails - --json <"$demo/lines"; echo
run queue stats emails
echo "\$ sqlq claim emails --max 2 --json"
claimed="$("$sqlq" claim emails --max 2 --json)"
echo "$claimed"; echo
receipt="$(echo "$claimed" | head -1 | sed 's/.*"receipt":"\([^"]*\)".*/\1/')"
run ack emails "$receipt"
run queue stats emails
echo "Next: 'sqlq --help', docs/cli.md, and 'sqlq bench' for figures."
