#!/usr/bin/env bash
# The packaging test (docs/installing.md): builds the "package" preset (sqlq,
# sqlq-bench and libsqlq, no tests), installs it into a temporary directory and builds a
# small libsqlq user against it (tests/package/consumer) with find_package
# and with pkg-config, then runs it; builds the SQLite-only configuration
# ("package-sqlite") and checks its programs need neither libpq nor
# libmariadb and refuse their URLs; makes the release tarball (scripts/dist.sh
# release) and runs its sqlq, man page, unit and completion unpacked in a
# temporary directory; then installs the .deb on this machine, runs the
# installed sqlq (and sqlq bench), its man page, unit and bash completion,
# and purges it.
# scripts/test.sh runs it after ctest; SQLQ_PACKAGE_TEST=0 skips it there.
# Needs root for dpkg (SQLQ_PACKAGE_DEB=0 skips the .deb part).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
step() { printf '== package-test: %s (%ss)\n' "$*" "$SECONDS"; }
fail() { printf 'package-test: FAILED: %s\n' "$*" >&2; exit 1; }

# Both builds share ccache objects: only src/engines/engines.cc (and the
# baselines' stubs) differ between them.
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
jobs=$(nproc)
# SQLQ_PACKAGE_BUILD_TYPE=Debug: both built with the dev preset's flags, so
# that they take a dev build's objects from ccache (scripts/test.sh); the
# package is then unoptimized, for this test only. scripts/dist.sh reads it
# too.
build_type=()
if [[ -n "${SQLQ_PACKAGE_BUILD_TYPE:-}" ]]; then
  build_type=(-DCMAKE_BUILD_TYPE="$SQLQ_PACKAGE_BUILD_TYPE")
fi

tmp=$(mktemp -d /tmp/sqlq-package-test.XXXXXX)
deb_installed=0
cleanup() {
  if ((deb_installed)); then dpkg -P sqlq >/dev/null 2>&1 || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

step "building the package preset"
cmake --preset package "${build_type[@]}" >/dev/null
cmake --build --preset package -j "$jobs" >"$tmp/build.log" 2>&1 ||
  { tail -50 "$tmp/build.log"; fail "build of the package preset"; }
size_full=$(stat -c %s build/package/sqlq)
size_stripped=$(stat -c %s build/package/stripped/sqlq)
echo "sqlq: $size_full bytes as linked, $size_stripped stripped" \
  "(debug info: $(stat -c %s build/package/stripped/sqlq.debug) bytes)"
readelf -S build/package/stripped/sqlq | grep -q '\.debug_info' &&
  fail "the installed sqlq still has debug info"
readelf -S build/package/stripped/sqlq | grep -q '\.gnu_debuglink' ||
  fail "the installed sqlq has no .gnu_debuglink"

step "cmake --install into a temporary root"
stage=$tmp/stage
DESTDIR=$stage cmake --install build/package >/dev/null
prefix=$stage/usr
arch=$(gcc -print-multiarch)
for f in bin/sqlq bin/sqlq-bench include/sqlq/store.h lib/$arch/libsqlq.a \
  lib/$arch/cmake/sqlq/sqlqConfig.cmake lib/$arch/pkgconfig/sqlq.pc \
  share/man/man1/sqlq.1.gz share/bash-completion/completions/sqlq \
  lib/systemd/system/sqlq.service lib/debug/usr/bin/sqlq.debug \
  lib/debug/usr/bin/sqlq-bench.debug; do
  [[ -f $prefix/$f ]] || fail "cmake --install left out $f"
done
[[ -f $stage/etc/sqlq/sqlq.conf ]] || fail "cmake --install left out /etc/sqlq/sqlq.conf"

step "a libsqlq user built with find_package(sqlq)"
cmake -S tests/package/consumer -B "$tmp/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/consumer" "sqlite:$tmp/cmake.db"

step "the same program built with pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/$arch/pkgconfig
# shellcheck disable=SC2046
c++ -std=c++20 -o "$tmp/consumer-pc" tests/package/consumer/main.cc \
  $(pkg-config --cflags --libs sqlq)
unset PKG_CONFIG_PATH
"$tmp/consumer-pc" "sqlite:$tmp/pkgconfig.db"

step "the SQLite-only build (SQLQ_WITH_POSTGRES=OFF SQLQ_WITH_MYSQL=OFF)"
cmake --preset package-sqlite "${build_type[@]}" >/dev/null
grep -Eq '^(LIBPQ|MARIADB)_FOUND' build/package-sqlite/CMakeCache.txt &&
  fail "the SQLite-only configuration looked for libpq or libmariadb"
cmake --build --preset package-sqlite -j "$jobs" >"$tmp/build-sqlite.log" 2>&1 ||
  { tail -50 "$tmp/build-sqlite.log"; fail "SQLite-only build"; }
sqlite_sqlq=build/package-sqlite/sqlq
for program in "$sqlite_sqlq" build/package-sqlite/sqlq-bench; do
  needed=$(readelf -d "$program" | grep NEEDED)
  grep -Eq 'libpq|libmariadb|libmysql' <<<"$needed" &&
    fail "the SQLite-only $(basename "$program") needs: $needed"
done
ls build/package-sqlite/libsqlq_postgres.a build/package-sqlite/libsqlq_mysql.a \
  >/dev/null 2>&1 && fail "the SQLite-only build built an engine it left out"
# A switched-off engine's URL: the CLI and the server say why.
for url in postgresql://localhost/db mysql://root@localhost/db; do
  want="built without PostgreSQL support"
  [[ $url == mysql* ]] && want="built without MariaDB/MySQL support"
  set +e
  out=$("$sqlite_sqlq" --db "$url" queue list 2>&1)
  rc=$?
  serve_out=$(timeout 20 "$sqlite_sqlq" --db "$url" serve --port 0 2>&1 </dev/null)
  serve_rc=$?
  set -e
  [[ $rc == 2 && $out == *"this sqlq was $want"* ]] ||
    fail "sqlq --db $url queue list: exit $rc: $out"
  [[ $serve_rc != 0 && $serve_out == *"this sqlq was $want"* ]] ||
    fail "sqlq --db $url serve: exit $serve_rc: $serve_out"
done
"$sqlite_sqlq" --db "sqlite:$tmp/only.db" queue create q >/dev/null
"$sqlite_sqlq" --db "sqlite:$tmp/only.db" send q hi >/dev/null
[[ $("$sqlite_sqlq" --db "sqlite:$tmp/only.db" --json claim q) == *'"payload":"hi"'* ]] ||
  fail "the SQLite-only sqlq did not claim what it sent"
# Its library, installed, serves a program too.
DESTDIR=$tmp/stage-sqlite cmake --install build/package-sqlite --component dev >/dev/null
grep -Eq 'libpq|libmariadb' "$tmp/stage-sqlite/usr/lib/$arch/pkgconfig/sqlq.pc" &&
  fail "the SQLite-only sqlq.pc requires libpq or libmariadb"
cmake -S tests/package/consumer -B "$tmp/consumer-sqlite" -G Ninja \
  -DCMAKE_PREFIX_PATH="$tmp/stage-sqlite/usr" \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build "$tmp/consumer-sqlite" >/dev/null
readelf -d "$tmp/consumer-sqlite/consumer" | grep -Eq 'libpq|libmariadb' &&
  fail "a program of the SQLite-only libsqlq links libpq or libmariadb"
"$tmp/consumer-sqlite/consumer" "sqlite:$tmp/sqlite-only.db"

step "the release tarball (scripts/dist.sh release)"
version=$(sed -n 's/^project(sqlq VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
name=sqlq-$version-linux-$(dpkg --print-architecture)
./scripts/dist.sh release --out "$tmp/dist" >/dev/null
(cd "$tmp/dist" && sha256sum --check --strict --quiet SHA256SUMS) ||
  fail "the release tarball's checksums"
tarball=$tmp/dist/$name.tar.gz
want_files="$name/etc/sqlq/sqlq.conf
$name/usr/bin/sqlq
$name/usr/bin/sqlq-bench
$name/usr/lib/systemd/system/sqlq.service
$name/usr/share/bash-completion/completions/sqlq
$name/usr/share/doc/sqlq/README.md
$name/usr/share/man/man1/sqlq.1.gz"
files=$(tar -tzf "$tarball" | grep -v '/$' | sort)
[[ $files == "$want_files" ]] || fail "the release tarball holds: $files"
tar --numeric-owner -tvzf "$tarball" | awk '$2 != "0/0" {exit 1}' ||
  fail "the release tarball has files not owned by root"
mkdir "$tmp/release"
tar -xzf "$tarball" -C "$tmp/release"
rel=$tmp/release/$name
"$rel/usr/bin/sqlq" --version | grep -qx "sqlq $version" ||
  fail "the release tarball's sqlq --version: $("$rel/usr/bin/sqlq" --version)"
for program in sqlq sqlq-bench; do
  ldd "$rel/usr/bin/$program" | grep -q 'not found' &&
    fail "the release tarball's $program misses libraries: $(ldd "$rel/usr/bin/$program")"
done
# Unpacked anywhere, `sqlq bench` runs the sqlq-bench beside it.
[[ $("$rel/usr/bin/sqlq" bench --json --runs 1 --threads 1 --messages 50 --workload send-1) == *'"workload":"send-1"'* ]] ||
  fail "the release tarball's sqlq bench did not run its sqlq-bench"
# Its config file, as the unit passes it, with the state directory and the
# port moved to the test's own; then a user's first steps on it.
sed -e "s|/var/lib/sqlq|$tmp/release|" \
  -e "s|^port = .*|port = 0\nport-file = $tmp/release/port|" \
  "$rel/etc/sqlq/sqlq.conf" >"$tmp/release/sqlq.conf"
"$rel/usr/bin/sqlq" serve --config "$tmp/release/sqlq.conf" >"$tmp/release/serve.log" 2>&1 &
rel_pid=$!
for _ in $(seq 100); do [[ -s $tmp/release/port ]] && break; sleep 0.1; done
[[ -s $tmp/release/port ]] ||
  { cat "$tmp/release/serve.log"; fail "the release tarball's sqlq serve did not start"; }
url=http://127.0.0.1:$(cat "$tmp/release/port")
curl -sS --fail-with-body --json '{}' "$url/v1/queues/jobs" >/dev/null ||
  fail "creating a queue on the release tarball's server"
curl -sS --fail-with-body --json '{"messages":[{"payload":"over http"}]}' \
  "$url/v1/queues/jobs/messages" >/dev/null || fail "sending to it"
"$rel/usr/bin/sqlq" --db "sqlite:$tmp/release/sqlq.db" send jobs "from the cli" >/dev/null
claimed=$(curl -sS --fail-with-body --json '{"max":10}' "$url/v1/queues/jobs/claim")
[[ $claimed == *'"payload":"over http"'*'"payload":"from the cli"'* ]] ||
  fail "the release tarball's server claimed: $claimed"
kill "$rel_pid"
wait "$rel_pid" || fail "the release tarball's sqlq serve did not stop cleanly"
rel_man=$(MANWIDTH=80 man -l "$rel/usr/share/man/man1/sqlq.1.gz" 2>/dev/null | col -b)
grep -qF "durable queues in SQL tables" <<<"$rel_man" ||
  fail "the release tarball's man page"
grep -qx "ExecStart=/usr/bin/sqlq serve --config /etc/sqlq/sqlq.conf" \
  "$rel/usr/lib/systemd/system/sqlq.service" ||
  fail "the release tarball's unit does not run /usr/bin/sqlq with /etc/sqlq/sqlq.conf"
[[ $(PATH=$rel/usr/bin:$PATH bash -c 'source "$1"
  COMP_WORDS=(sqlq queue cr); COMP_CWORD=2; _sqlq; echo "${COMPREPLY[*]}"' \
  _ "$rel/usr/share/bash-completion/completions/sqlq") == create ]] ||
  fail "the release tarball's completion"

if [[ "${SQLQ_PACKAGE_DEB:-1}" != 1 ]]; then
  step "done (SQLQ_PACKAGE_DEB=0: the .deb was not tested)"
  exit 0
fi

step "the .deb"
rm -f build/package/sqlq_*.deb
(cd build/package && cpack >/dev/null)
deb=$(ls build/package/sqlq_*.deb)
dpkg-deb -f "$deb" Depends | grep -q libsqlite3 ||
  fail "the .deb's Depends were not computed: $(dpkg-deb -f "$deb" Depends)"
dpkg-deb -c "$deb" | grep -q 'sqlq.debug' && fail "the .deb carries the debug info"
if dpkg -s sqlq >/dev/null 2>&1; then
  fail "a sqlq package is installed on this machine already; remove it first"
fi
deb_installed=1
dpkg -i "$deb" >/dev/null
/usr/bin/sqlq --version | grep -qx "sqlq $(sed -n 's/^project(sqlq VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)" ||
  fail "/usr/bin/sqlq --version: $(/usr/bin/sqlq --version)"
/usr/bin/sqlq --db "sqlite:$tmp/deb.db" queue create jobs >/dev/null
/usr/bin/sqlq --db "sqlite:$tmp/deb.db" send jobs "from the deb" >/dev/null
[[ $(/usr/bin/sqlq --db "sqlite:$tmp/deb.db" --json claim jobs) == *'"payload":"from the deb"'* ]] ||
  fail "the installed sqlq did not claim what it sent"
# `sqlq bench` runs the installed sqlq-bench beside it.
[[ $(/usr/bin/sqlq bench --json --runs 1 --threads 1 --messages 50 --workload send-1) == *'"workload":"send-1"'* ]] ||
  fail "the installed sqlq bench did not run /usr/bin/sqlq-bench"

# The installed config file, as the unit passes it to `sqlq serve` (this
# test cannot start the unit itself: there may be no systemd running), with
# the state directory and port moved to the test's own.
sed -e "s|/var/lib/sqlq|$tmp|" -e "s|^port = .*|port = 0\nport-file = $tmp/port|" \
  /etc/sqlq/sqlq.conf >"$tmp/sqlq.conf"
/usr/bin/sqlq serve --config "$tmp/sqlq.conf" >"$tmp/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 100); do [[ -s $tmp/port ]] && break; sleep 0.1; done
[[ -s $tmp/port ]] || { cat "$tmp/serve.log"; fail "sqlq serve with the installed config did not start"; }
[[ $(curl -s "http://127.0.0.1:$(cat "$tmp/port")/healthz") == *'"ok"'* ]] ||
  fail "sqlq serve with the installed config does not answer /healthz"
kill "$serve_pid"
wait "$serve_pid" || true
[[ -f $tmp/sqlq.db ]] || fail "the installed config's database is not in the state directory"

man_text=$(MANWIDTH=80 man -l /usr/share/man/man1/sqlq.1.gz 2>/dev/null | col -b)
for want in "durable queues in SQL tables" "--db" "queue" "serve" "--tokens" \
  "/etc/sqlq/sqlq.conf"; do
  grep -qF -- "$want" <<<"$man_text" || fail "the man page does not mention $want"
done
if command -v man >/dev/null && man -w sqlq >/dev/null 2>&1; then
  man -w sqlq | grep -q /usr/share/man/man1/sqlq.1 || fail "man sqlq finds $(man -w sqlq)"
fi

if systemd-analyze verify /usr/lib/systemd/system/sqlq.service; then
  echo "systemd-analyze verify sqlq.service: ok"
else
  fail "systemd-analyze verify sqlq.service"
fi

# The completion, loaded as bash-completion would: subcommands, nested
# subcommands and options.
complete_words() {
  bash -c 'source /usr/share/bash-completion/completions/sqlq
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _sqlq; echo "${COMPREPLY[*]}"' \
    _ "$@"
}
[[ $(complete_words sqlq se) == "send serve" ]] ||
  fail "completing 'sqlq se' gave '$(complete_words sqlq se)'"
[[ $(complete_words sqlq queue cr) == create ]] ||
  fail "completing 'sqlq queue cr' gave '$(complete_words sqlq queue cr)'"
[[ $(complete_words sqlq --db sqlite:x serve --tok) == --tokens ]] ||
  fail "completing 'sqlq serve --tok' gave '$(complete_words sqlq serve --tok)'"
[[ $(complete_words sqlq queue sh) == show ]] ||
  fail "completing 'sqlq queue sh' gave '$(complete_words sqlq queue sh)'"
[[ $(complete_words sqlq message cancel --dr) == --dry-run ]] ||
  fail "completing 'sqlq message cancel --dr' gave '$(complete_words sqlq message cancel --dr)'"

step "purging the .deb"
files=$(dpkg -L sqlq | while read -r f; do [[ -f $f ]] && echo "$f"; done)
dpkg -P sqlq >/dev/null
deb_installed=0
dpkg -s sqlq >/dev/null 2>&1 && fail "dpkg -P left the package installed"
for f in $files; do [[ -e $f ]] && fail "dpkg -P left $f"; done
for d in /etc/sqlq /var/lib/sqlq /var/lib/private/sqlq; do
  [[ -e $d ]] && fail "dpkg -P left $d"
done
getent passwd sqlq >/dev/null && fail "a user sqlq is left after the purge"
step "done"
