#!/usr/bin/env bash
# The README's first command: installs what is missing, builds a release
# binary, and runs the main job: `sqlq serve` on the embedded SQLite default.
#
#   ./scripts/run.sh              # database ./sqlq.db, port 8080
#   SQLQ_DATA_DIR=/var/lib/sqlq SQLQ_PORT=9000 ./scripts/run.sh
#
# Any other `sqlq serve` flag may follow (./scripts/run.sh --tokens tokens.txt);
# the SQLQ_* environment of docs/server.md works too. Stop it with Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target sqlq

sqlq="$PWD/build/release/sqlq"
data="${SQLQ_DATA_DIR:-$OLDPWD}"
mkdir -p "$data"
port="${SQLQ_PORT:-8080}"
db="${SQLQ_DB:-sqlite:$data/sqlq.db}"

cat <<MSG

sqlq built at $sqlq
Serving $db on 127.0.0.1:$port

  Browser (dashboard):  http://127.0.0.1:$port/
  Clients (HTTP API):   http://127.0.0.1:$port/v1/queues   (docs/http-api.md)
  Metrics:              http://127.0.0.1:$port/metrics
  Try it:
    curl --json '{"max_attempts":3}' http://127.0.0.1:$port/v1/queues/emails
    curl --json '{"payload":"hello"}' http://127.0.0.1:$port/v1/queues/emails/messages
    curl --json '{"max":10,"wait_ms":20000}' http://127.0.0.1:$port/v1/queues/emails/claim

MSG
exec "$sqlq" --db "$db" serve --port "$port" "$@"
