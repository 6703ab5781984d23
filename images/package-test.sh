#!/usr/bin/env bash
# The vecflow package on a clean Debian 12 system (a debootstrap chroot with systemd):
#
#   sudo images/package-test.sh [--deb FILE]
#
#   1. installs the package's dependencies from Debian's archive, then records every path of
#      the system with its type, owner and mode (and the content of /etc files);
#   2. `dpkg -i` the package: it must install without an error or a warning, create the
#      vecflow user and group and /var/lib/vecflow/capture (vecflow:vecflow 0750), and the installed unit
#      must pass `systemd-analyze verify` silently;
#   3. does what an operator does: enables the unit, edits /etc/vecflow/appliance.yaml, adds
#      /etc/vecflow/site.yaml and a drop-in /etc/systemd/system/vecflowd.service.d/site.conf;
#   4. `dpkg --purge vecflow`, records again, and compares: the only differences allowed are
#      the operator's two added files and their directories, and the system user and group
#      vecflow, which stay in /etc/passwd, /etc/shadow, /etc/group and /etc/gshadow (Debian
#      policy: purge leaves system users and groups). Shadow's backups (/etc/group-,
#      /etc/gshadow-, /etc/passwd-, /etc/shadow-) and dpkg's and apt's own records are not
#      compared.
#
# The debootstrap cache is shared with images/build-image.sh (build/image/cache).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

deb=
while [ $# -gt 0 ]; do
  case "$1" in
    --deb) deb=$(realpath "$2"); shift ;;
    *) echo "usage: $0 [--deb FILE]" >&2; exit 2 ;;
  esac
  shift
done
if [ "$(id -u)" -ne 0 ]; then
  echo "package-test: needs root (debootstrap chroot): sudo $0" >&2
  exit 1
fi
command -v debootstrap >/dev/null || { echo "package-test: apt-get install debootstrap" >&2; exit 1; }
if [ -z "$deb" ]; then
  # The real package: dpkg-buildpackage (images/package-check.sh), 10-20 minutes.
  "$repo/images/package-check.sh" >/dev/null
  deb=$(ls -t "$repo"/build/deb/vecflow_*_amd64.deb | head -1)
fi

export LC_ALL=C DEBIAN_FRONTEND=noninteractive
cache=$repo/build/image/cache
work=$repo/build/image/package-test
root=$work/root
# Its own apt archive directory: apt locks it, and an image build may run meanwhile.
mkdir -p "$cache/debootstrap" "$cache/apt-package-test"
cp -ln "$cache"/apt/*.deb "$cache/apt-package-test/" 2>/dev/null || true
mounted=()
cleanup() {
  for ((i=${#mounted[@]}-1; i>=0; i--)); do
    mountpoint -q "${mounted[$i]}" && umount -l "${mounted[$i]}"
  done
}
trap cleanup EXIT
fail() { echo "package-test: FAIL: $*" >&2; exit 1; }
in_root() { chroot "$root" "$@"; }

# A snapshot of the system: every path with type, owner, group and mode; /etc contents.
snapshot() {
  in_root find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp \
      -o -path /var/lib/dpkg -o -path /var/lib/apt -o -path /var/cache -o -path /var/log \
      -o -path /etc/group- -o -path /etc/gshadow- -o -path /etc/passwd- -o -path /etc/shadow- \
      -o -path /vecflow.deb \) -prune -o -printf '%y %u:%g %m %p\n' | sort >"$1"
  (cd "$root/etc" && find . -xdev -type f ! -name '*-' -print0 | sort -z | xargs -0 sha256sum) \
    >>"$1"
}

echo "package-test: clean Debian 12 (minbase + systemd) in $root"
rm -rf "$work"
mkdir -p "$work"
debootstrap --variant=minbase --include=systemd-sysv --cache-dir="$cache/debootstrap" \
  bookworm "$root" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
  { tail -20 "$work/debootstrap.log"; fail "debootstrap"; }
mount -t proc proc "$root/proc"; mounted+=("$root/proc")
mount --bind "$cache/apt-package-test" "$root/var/cache/apt/archives"; mounted+=("$root/var/cache/apt/archives")
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
cp "$deb" "$root/vecflow.deb"

echo "package-test: installing the dependencies of $(basename "$deb")"
deps=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/(.*)//; s/ //g' | grep -v '^$')
{
  in_root apt-get update
  # shellcheck disable=SC2086
  in_root apt-get install -y --no-install-recommends $deps
} >"$work/apt.log" 2>&1 || { tail -20 "$work/apt.log"; fail "installing dependencies"; }
snapshot "$work/before"

echo "package-test: dpkg -i"
in_root dpkg -i /vecflow.deb >"$work/install.log" 2>&1 || { cat "$work/install.log"; fail "dpkg -i"; }
if grep -iE 'warning|error' "$work/install.log"; then fail "dpkg -i printed warnings"; fi
in_root getent passwd vecflow >/dev/null || fail "no vecflow user"
in_root getent group vecflow >/dev/null || fail "no vecflow group"
[ "$(in_root stat -c '%U:%G %a' /var/lib/vecflow/capture)" = "vecflow:vecflow 750" ] ||
  fail "/var/lib/vecflow/capture is $(in_root stat -c '%U:%G %a' /var/lib/vecflow/capture)"
verify=$(in_root systemd-analyze verify --man=no vecflowd.service 2>&1) ||
  fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify: $verify"
in_root vecflowd --check /etc/vecflow/appliance.yaml >/dev/null || fail "default file invalid"
echo "  installed: user and group vecflow, /var/lib/vecflow/capture, unit verified, default file"
echo "  valid"

echo "package-test: operator changes, then dpkg --purge"
in_root systemctl enable vecflowd.service >/dev/null 2>&1
[ -L "$root/etc/systemd/system/multi-user.target.wants/vecflowd.service" ] || fail "enable"
echo "# edited by the operator" >>"$root/etc/vecflow/appliance.yaml"
cp "$root/etc/vecflow/appliance.yaml" "$root/etc/vecflow/site.yaml"
mkdir -p "$root/etc/systemd/system/vecflowd.service.d"
printf '[Service]\nEnvironment=VECFLOW_CONFIG=/etc/vecflow/site.yaml\n' \
  >"$root/etc/systemd/system/vecflowd.service.d/site.conf"
in_root dpkg --purge vecflow >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "purge"; }
snapshot "$work/after"
in_root getent passwd vecflow >/dev/null || fail "purge removed the system user vecflow"
in_root getent group vecflow >/dev/null || fail "purge removed the system group vecflow"

diff "$work/before" "$work/after" | grep '^[<>]' | sort >"$work/diff" || true
cat >"$work/expected" <<'EOF'
< -  ./group
< -  ./gshadow
< -  ./passwd
< -  ./shadow
> -  ./group
> -  ./gshadow
> -  ./passwd
> -  ./shadow
> -  ./systemd/system/vecflowd.service.d/site.conf
> -  ./vecflow/site.yaml
> d root:root 755 /etc/systemd/system/vecflowd.service.d
> d root:root 755 /etc/vecflow
> f root:root 644 /etc/systemd/system/vecflowd.service.d/site.conf
> f root:root 644 /etc/vecflow/site.yaml
EOF
# Compare paths only for the sha256 lines (their hashes are the operator's content).
sed -E 's/^([<>]) [0-9a-f]{64} /\1 - /' "$work/diff" | sort >"$work/diff.norm"
if ! diff -u "$work/expected" "$work/diff.norm"; then
  cat "$work/purge.log"
  fail "purge left or removed more than the operator's files (above: expected vs found)"
fi
echo "package-test: passed: installs cleanly; purge leaves only the operator's files and the"
echo "  system user and group vecflow:"
sed 's/^>/ /' "$work/expected" | grep -v '^. -'
cleanup
mounted=()
rm -rf "$work"
