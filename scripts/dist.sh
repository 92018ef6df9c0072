#!/usr/bin/env bash
# Makes what a user installs (docs/installing.md, "Release artifacts"), with
# nothing from the network:
#
#   ./scripts/dist.sh [python|node|release|all]... [--out DIR]   (default: all, build/dist)
#
#   python   DIR/python/sqlq-VERSION.tar.gz (sdist) and
#            DIR/python/sqlq-VERSION-py3-none-any.whl, from clients/python
#            (Debian's python3-build with its setuptools; the wheel is built
#            from the sdist, so a file the sdist leaves out fails the build)
#   node     DIR/node/sqlq-VERSION.tgz, `npm pack` of clients/node
#   release  DIR/sqlq-VERSION-linux-ARCH.tar.gz: the `package` preset's
#            install (runtime component) as it lands on / — usr/bin/sqlq,
#            the man page, bash completion, the systemd unit,
#            etc/sqlq/sqlq.conf and usr/share/doc/sqlq/README.md — under one
#            top directory (so `tar -C / --strip-components=1` installs
#            what the .deb's runtime part does); builds the preset first
#
# Then DIR/SHA256SUMS lists every artifact in DIR (sha256sum -c SHA256SUMS
# checks them). The tests: tests/package/artifacts_test.py (ctest -L package
# for python and node; scripts/package-test.sh for the release tarball).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

out=$root/build/dist
kinds=()
while (($#)); do
  case $1 in
    --out) out=$(realpath -m "$2"); shift 2 ;;
    python | node | release) kinds+=("$1"); shift ;;
    all) kinds+=(python node release); shift ;;
    *) echo "usage: $0 [python|node|release|all]... [--out DIR]" >&2; exit 2 ;;
  esac
done
((${#kinds[@]})) || kinds=(python node release)
mkdir -p "$out"
version=$(sed -n 's/^project(sqlq VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
tmp=$(mktemp -d /tmp/sqlq-dist.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

for kind in "${kinds[@]}"; do
  case $kind in
    python)
      # From a copy without caches and build leftovers, so that the source
      # tree stays as it is and nothing stray gets in.
      rm -rf "$out/python"
      mkdir -p "$out/python"
      git ls-files -z clients/python | tar --null -T - -cf - | tar -xf - -C "$tmp"
      # Debian's python3 with Debian's build, setuptools and wheel
      # (--no-isolation: nothing is fetched).
      /usr/bin/python3 -m build --no-isolation --outdir "$out/python" \
        "$tmp/clients/python" >"$tmp/python.log" 2>&1 ||
        { cat "$tmp/python.log" >&2; exit 1; }
      ;;
    node)
      rm -rf "$out/node"
      mkdir -p "$out/node"
      (cd clients/node &&
        npm pack --offline --silent --pack-destination "$out/node" >/dev/null)
      ;;
    release)
      # SQLQ_PACKAGE_BUILD_TYPE: as scripts/package-test.sh, which runs
      # this, configured the preset.
      cmake --preset package \
        ${SQLQ_PACKAGE_BUILD_TYPE:+-DCMAKE_BUILD_TYPE="$SQLQ_PACKAGE_BUILD_TYPE"} >/dev/null
      cmake --build --preset package -j2 >"$tmp/build.log" 2>&1 ||
        { tail -50 "$tmp/build.log" >&2; exit 1; }
      arch=$(dpkg --print-architecture)
      name=sqlq-$version-linux-$arch
      DESTDIR=$tmp/$name cmake --install build/package --component runtime >/dev/null
      install -D -m 0644 README.md "$tmp/$name/usr/share/doc/sqlq/README.md"
      # Owned by root, dated by the last commit: the same tree gives the
      # same tarball.
      when=$(git log -1 --format=%cI)
      tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="$when" \
        -C "$tmp" -cf - "$name" | gzip -9n >"$out/$name.tar.gz"
      ;;
  esac
done

# Checksums of everything in DIR, by paths relative to it.
(cd "$out" && find . -type f ! -name SHA256SUMS -printf '%P\n' | sort |
  xargs -r sha256sum >SHA256SUMS)
echo "artifacts in $out:"
sed 's/^[0-9a-f]*  /  /' "$out/SHA256SUMS"
