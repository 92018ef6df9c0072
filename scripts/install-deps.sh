#!/usr/bin/env bash
# Installs the Debian 12 packages sqlq needs to build and test, if missing.
# Idempotent; uses sudo when not run as root.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache clang-format
  libsqlite3-dev sqlite3
  libpq-dev postgresql-15
  libmariadb-dev mariadb-server mariadb-client
  libfmt-dev nlohmann-json3-dev libcli11-dev libsimdjson-dev
  libgtest-dev libgmock-dev
  libboost1.81-dev libssl-dev curl openssl
  clang-14 libclang-rt-14-dev llvm-14
  libcctz-dev tzdata
  beanstalkd
  python3-botocore python3-boto3 awscli python3-celery python3-kombu
  python3-pycurl python3-psycopg
  help2man dpkg-dev file man-db systemd
  # The Go client's tests (clients/go): Go 1.19, standard library only.
  golang-go
  # The documentation's examples (tests/docs): docs/http-api.md pipes a
  # reply through jq, as readers do.
  jq
  # The clients' packages (scripts/dist.sh, tests/package/artifacts_test.py):
  # the Python sdist and wheel built offline and pip-installed into fresh
  # virtual environments.
  python3-build python3-setuptools python3-wheel python3-venv python3-pip
  # The replicated-database lab (scripts/ha-lab.sh, tests/ha): Patroni with
  # etcd, Galera (with mariadb-server), HAProxy, nft for the faults (and
  # the engines' tests of a server that went dark), rsync and socat for
  # Galera's state transfer and health check; pgbouncer for the tests of
  # sqlq behind a pooler.
  patroni python3-etcd etcd-server etcd-client haproxy galera-4 nftables
  rsync socat pgbouncer
)

# The dashboard's browser test (tests/web): a headless Chromium and Node.js
# with npm, each only if the machine has none yet (any Node.js >= 18 does).
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
