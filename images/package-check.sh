#!/usr/bin/env bash
# Builds the vecflow Debian package from this tree and checks it with lintian.
#
#   images/package-check.sh [--chroot] [--twice] [--out DIR]
#       the real package: `dpkg-buildpackage -us -uc -b` (debian/rules: dpkg-buildflags
#       hardening, no tests, no -Werror) in a copy of the tree's files (tracked and untracked,
#       not ignored ones: no build directories), on this machine (its Build-Depends installed:
#       `apt-get build-dep ./`) or with --chroot in a clean Debian 12 debootstrap chroot
#       that has only build-essential and the Build-Depends. --twice builds a second time at
#       the same path and requires byte-identical packages (SOURCE_DATE_EPOCH comes from
#       debian/changelog). A whole build takes 10-20 minutes on 2 cores.
#   images/package-check.sh --prebuilt BUILD_DIR [--out DIR]
#       the fast check (tools/test.sh): the package made from an already built tree
#       (VECFLOW_PREBUILT in debian/rules, no compiling), then lintian. Its binaries carry
#       the developer build's flags, so it checks the packaging, not the hardening.
#
# Output in DIR (default build/deb): vecflow_<version>_amd64.deb, its -dbgsym .deb,
# .buildinfo and .changes, lintian.txt. lintian runs with -I -E --pedantic and fails the check
# on any error or warning; overrides live in debian/*lintian-overrides, each with its reason.
# The chroot and debootstrap cache: build/image (shared with images/package-test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

out=$repo/build/deb
prebuilt= chroot=0 twice=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt) prebuilt=$(realpath "$2"); shift ;;
    --chroot) chroot=1 ;;
    --twice) twice=1 ;;
    --out) out=$(realpath -m "$2"); shift ;;
    *) echo "usage: $0 [--chroot] [--twice] [--prebuilt BUILD_DIR] [--out DIR]" >&2; exit 2 ;;
  esac
  shift
done
fail() { echo "package-check: FAIL: $*" >&2; exit 1; }
export LC_ALL=C.UTF-8 DEBIAN_FRONTEND=noninteractive

version=$(dpkg-parsechangelog -l debian/changelog -S Version)
project_version=$(sed -n 's/^project(vecflow VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
# A native package: the changelog's version is the project's.
[ "$version" = "$project_version" ] ||
  fail "debian/changelog says $version, CMakeLists.txt $project_version"
deb_name=vecflow_${version}_amd64.deb
mkdir -p "$out"
rm -f "$out"/vecflow_* "$out"/vecflow-dbgsym_* "$out/lintian.txt"

# The tree's files as git sees them (tracked, plus untracked not ignored), copied once: every
# build (--twice, --chroot) starts from this snapshot, so edits made meanwhile do not leak in.
# (--prebuilt needs only debian/.)
snapshot=$out/source
rm -rf "$snapshot"
mkdir -p "$snapshot"
if [ -n "$prebuilt" ]; then
  cp -a debian "$snapshot/"
else
  git ls-files -z --cached --others --exclude-standard |
    tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -C "$snapshot" -xf -
fi
# copy_tree DEST: a fresh copy of the snapshot.
copy_tree() {
  rm -rf "$1"
  mkdir -p "$1"
  cp -a "$snapshot/." "$1/"
}

run_lintian() {  # deb
  echo "package-check: lintian -I -E --pedantic $(basename "$1")"
  local rc=0
  lintian -I -E --pedantic --fail-on error,warning "$1" >"$out/lintian.txt" 2>&1 || rc=$?
  if [ -s "$out/lintian.txt" ]; then sed 's/^/  /' "$out/lintian.txt"; else echo "  (no output)"; fi
  [ $rc = 0 ] || fail "lintian reports errors or warnings (exit $rc)"
  grep -qE '^[EW]: ' "$out/lintian.txt" && fail "lintian reports errors or warnings"
  return 0
}

if [ -n "$prebuilt" ]; then
  [ -f "$prebuilt/CMakeCache.txt" ] || fail "$prebuilt is not a configured build tree"
  start=$SECONDS
  work=$out/prebuilt
  rm -rf "$work"
  mkdir -p "$work/vecflow-$version"
  # Only debian/ is needed: the install rules come from the build tree.
  cp -a "$snapshot/debian" "$work/vecflow-$version/"
  # -nc: nothing to clean; -d: the build tree is there, whatever Build-Depends say.
  (cd "$work/vecflow-$version" &&
    VECFLOW_PREBUILT=$prebuilt dpkg-buildpackage -us -uc -b -nc -d) >"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log"; fail "dpkg-buildpackage (prebuilt) failed: $work/build.log"; }
  mv "$work"/vecflow_* "$work"/vecflow-dbgsym_* "$out/" 2>/dev/null || true
  rm -rf "$work" "$snapshot"
  run_lintian "$out/$deb_name"
  echo "package-check: passed (prebuilt from $prebuilt, $((SECONDS - start)) s): $out/$deb_name"
  exit 0
fi

# build_once: one dpkg-buildpackage of a fresh copy; the results land in $out.
if [ "$chroot" = 1 ]; then
  [ "$(id -u)" = 0 ] || fail "--chroot needs root (debootstrap)"
  command -v debootstrap >/dev/null || fail "apt-get install debootstrap"
  cache=$repo/build/image/cache
  root=$repo/build/image/package-build
  mounted=()
  cleanup() {
    for ((i=${#mounted[@]}-1; i>=0; i--)); do
      mountpoint -q "${mounted[$i]}" && umount -l "${mounted[$i]}"
    done
    mounted=()
  }
  trap cleanup EXIT
  mkdir -p "$cache/debootstrap" "$cache/apt-package-build"
  echo "package-check: clean Debian 12 chroot (minbase + build-essential) in $root"
  rm -rf "$root"
  mkdir -p "$root"
  debootstrap --variant=minbase --include=build-essential --cache-dir="$cache/debootstrap" \
    bookworm "$root" http://deb.debian.org/debian >"$out/debootstrap.log" 2>&1 ||
    { tail -20 "$out/debootstrap.log"; fail "debootstrap"; }
  mount -t proc proc "$root/proc"; mounted+=("$root/proc")
  mount --bind "$cache/apt-package-build" "$root/var/cache/apt/archives"
  mounted+=("$root/var/cache/apt/archives")
  src=/build/vecflow-$version
  copy_tree "$root$src"
  echo "package-check: installing the Build-Depends (apt-get build-dep)"
  { chroot "$root" apt-get update &&
    chroot "$root" apt-get install -y --no-install-recommends fakeroot &&
    chroot "$root" sh -c "cd $src && apt-get build-dep -y --no-install-recommends ./"; } \
    >"$out/build-deps.log" 2>&1 || { tail -20 "$out/build-deps.log"; fail "build-dep"; }
  build_once() {
    copy_tree "$root$src"
    rm -f "$root/build"/vecflow_* "$root/build"/vecflow-dbgsym_*
    nice -n 10 chroot "$root" sh -c \
      "cd $src && DEB_BUILD_OPTIONS=parallel=$(nproc) dpkg-buildpackage -us -uc -b" \
      >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; fail "dpkg-buildpackage: $out/build.log"; }
    mv "$root/build"/vecflow_* "$root/build"/vecflow-dbgsym_* "$out/"
  }
else
  missing=$(dpkg-checkbuilddeps 2>&1) ||
    fail "Build-Depends missing here ($missing): apt-get build-dep ./ (or use --chroot)"
  work=$out/src
  src=$work/vecflow-$version
  build_once() {
    copy_tree "$src"
    rm -f "$work"/vecflow_* "$work"/vecflow-dbgsym_*
    (cd "$src" && DEB_BUILD_OPTIONS=parallel=$(nproc) nice -n 10 dpkg-buildpackage -us -uc -b) \
      >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; fail "dpkg-buildpackage: $out/build.log"; }
    mv "$work"/vecflow_* "$work"/vecflow-dbgsym_* "$out/"
  }
fi

start=$SECONDS
echo "package-check: dpkg-buildpackage -us -uc -b in $src"
build_once
echo "  built in $((SECONDS - start)) s"
(cd "$out" && sha256sum ./*.deb) | tee "$out/sha256.first"
if [ "$twice" = 1 ]; then
  mkdir -p "$out/first"
  mv "$out"/*.deb "$out/first/"
  start=$SECONDS
  echo "package-check: second build at the same path"
  build_once
  echo "  built in $((SECONDS - start)) s"
  (cd "$out" && sha256sum ./*.deb) | tee "$out/sha256.second"
  diff -u "$out/sha256.first" "$out/sha256.second" ||
    fail "the two builds differ (first build's packages in $out/first)"
  rm -rf "$out/first"
  echo "package-check: the two builds are byte-identical"
fi
rm -rf "$snapshot"
run_lintian "$out/$deb_name"
echo "package-check: passed: $out/$deb_name"
