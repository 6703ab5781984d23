#!/usr/bin/env bash
# The vecflow appliance image: a bootable x86-64 disk (raw) built from Debian 12 packages,
# with the vecflow package installed and its service enabled.
#
#   sudo images/build-image.sh [--deb FILE] [--out DIR] [--root-size MB] [--kernel generic|cloud]
#
# Writes DIR/vecflow-<version>-amd64.img (default DIR: build/image) and beside it the
# package list (.packages) and checksum (.sha256). Without --deb it builds the package
# first (`images/package-check.sh`: dpkg-buildpackage, 10-20 minutes).
#
# How, and why this way rather than mkosi:
#   1. debootstrap --variant=minbase, then apt-get in the chroot installs a fixed package
#      list (below) and the vecflow .deb, resolving its dependencies from Debian's archive
#      (bookworm, bookworm-updates and bookworm-security).
#   2. The disk is assembled without loop devices or mounts: the root file system is made
#      from the directory by `mkfs.ext4 -d`, the boot partition by mtools, the partition
#      table by sfdisk on a plain file. So the build needs root only for debootstrap's
#      chroot, works where loop devices are not available (containers, CI), and every
#      byte of the image comes from a deterministic tool given fixed UUIDs and
#      SOURCE_DATE_EPOCH. mkosi (bookworm has v14) would hide the same steps behind
#      systemd-repart and loop devices and gives no more control over reproducibility.
#   3. One FAT partition (MBR type EF, an EFI system partition) boots both ways: BIOS
#      through SYSLINUX (MBR code + ldlinux.sys) and UEFI through systemd-boot
#      (EFI/BOOT/BOOTX64.EFI). It holds the kernel and initramfs; the root is ext4.
#
# Reproducibility: SOURCE_DATE_EPOCH (default: the commit time of HEAD) sets every file
# time in the root and boot file systems and the file systems' own times; UUIDs, volume
# ids, the MBR disk id and the ext4 hash seed are fixed. Two builds from the same package
# set give the same image except for ext4 inode change times (mke2fs copies the change
# time of each file of the build directory, which no tool lets us set); see
# images/README.md for the check.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

deb=
out=$repo/build/image
root_mb=2048
boot_mb=256
kernel=generic
mirror=http://deb.debian.org/debian
security=http://deb.debian.org/debian-security
suite=bookworm

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --deb) deb=$(realpath "$2"); shift ;;
    --out) out=$(realpath -m "$2"); shift ;;
    --root-size) root_mb=$2; shift ;;
    --kernel) kernel=$2; shift ;;
    -h|--help) usage ;;
    *) echo "build-image: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
case "$kernel" in
  generic) kernel_pkg=linux-image-amd64 ;;          # every NIC driver: for servers
  cloud) kernel_pkg=linux-image-cloud-amd64 ;;      # virtio, ENA, gVNIC, mlx5: for VMs, 1/4 size
  *) echo "build-image: --kernel is generic or cloud" >&2; exit 2 ;;
esac

if [ "$(id -u)" -ne 0 ]; then
  echo "build-image: needs root (debootstrap chroot): sudo $0" >&2
  exit 1
fi

# The image tools are not part of tools/setup.sh: only this script needs them.
need=(debootstrap:debootstrap mkfs.ext4:e2fsprogs mkfs.fat:dosfstools mcopy:mtools
      syslinux:syslinux sfdisk:fdisk)
missing=()
for pair in "${need[@]}"; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
[ -f /usr/lib/SYSLINUX/mbr.bin ] || missing+=(syslinux-common)
if [ ${#missing[@]} -gt 0 ]; then
  echo "build-image: missing tools: apt-get install ${missing[*]}" >&2
  exit 1
fi

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct)}
export LC_ALL=C TZ=UTC DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true

started=$(date +%s)
step() { printf '[%4ds] %s\n' $(( $(date +%s) - started )) "$*"; }

if [ -z "$deb" ]; then
  step "building the vecflow package (images/package-check.sh: dpkg-buildpackage, lintian)"
  "$repo/images/package-check.sh" >/dev/null
  deb=$(ls -t "$repo"/build/deb/vecflow_*_amd64.deb | head -1)
fi
version=$(dpkg-deb -f "$deb" Version)
name=vecflow-${version%-*}-amd64
work=$out/work
root=$work/rootfs
# Downloaded packages, kept between builds whatever --out says.
cache=$repo/build/image/cache
mkdir -p "$out" "$cache/debootstrap" "$cache/apt"

# Fixed identities: a reproducible image names its file systems the same every time.
# Written to a new disk, they are unique enough (one appliance per disk); clones share them.
root_uuid=7ecf1000-0000-4000-8000-0000000000a1
boot_volid=7ECF10B0            # FAT volume id, the boot partition's UUID 7ECF-10B0
disk_id=0x7ecf10d0             # MBR disk identifier

# Package set of the image, beyond minbase. Recommends are not installed.
packages=(
  systemd-sysv udev dbus kmod "$kernel_pkg" initramfs-tools zstd
  systemd-boot-efi             # BOOTX64.EFI for the UEFI path (files only)
  iproute2 iputils-ping procps ethtool less
  frr                          # BGP and BFD for a box behind ECMP (images/README.md); off
)

mounted=()
cleanup() {
  local m
  for ((i=${#mounted[@]}-1; i>=0; i--)); do
    m=${mounted[$i]}
    mountpoint -q "$m" && umount -l "$m"
  done
}
trap cleanup EXIT
chroot_mount() {  # fstype source target
  mkdir -p "$3"
  mount -t "$1" "$2" "$3"
  mounted+=("$3")
}
in_root() { chroot "$root" "$@"; }

step "debootstrap $suite (minbase) into $root"
rm -rf "$work"
mkdir -p "$work"
debootstrap --variant=minbase --cache-dir="$cache/debootstrap" "$suite" "$root" "$mirror" \
  >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log"; exit 1; }

chroot_mount proc proc "$root/proc"
chroot_mount sysfs sysfs "$root/sys"
mkdir -p "$root/var/cache/apt/archives"
mount --bind "$cache/apt" "$root/var/cache/apt/archives"
mounted+=("$root/var/cache/apt/archives")

# No service starts inside the build chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"

# Minimal footprint: no translations and no documentation except copyright files and
# vecflow's own (its reference of the appliance file, its man page).
cat >"$root/etc/dpkg/dpkg.cfg.d/01-vecflow-minimal" <<'EOF'
# vecflow appliance image: keep the footprint small.
path-exclude /usr/share/locale/*
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-include /usr/share/doc/vecflow/*
path-exclude /usr/share/man/*
path-include /usr/share/man/man8/vecflow*
path-include /usr/share/man/man1/vecflow*
path-exclude /usr/share/info/*
EOF
cat >"$root/etc/apt/apt.conf.d/01-vecflow-minimal" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
EOF
cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
EOF
# initramfs: every storage driver (MODULES=most: the disk of the target box is unknown),
# zstd-compressed.
mkdir -p "$root/etc/initramfs-tools/conf.d"
printf 'MODULES=most\nCOMPRESS=zstd\n' >"$root/etc/initramfs-tools/conf.d/vecflow.conf"

step "installing the package set and $(basename "$deb")"
cp "$deb" "$root/tmp/vecflow.deb"
# The initramfs is made once, after every package is in (its hooks included): INITRD=No
# stops the kernel's postinst from making one, and initramfs-tools' trigger only updates
# initramfs images that exist.
{
  in_root apt-get update
  in_root apt-get -y dist-upgrade
  INITRD=No in_root apt-get -y install "${packages[@]}" /tmp/vecflow.deb
} >"$work/apt.log" 2>&1 || { tail -30 "$work/apt.log"; exit 1; }
rm "$root/tmp/vecflow.deb"
kver=$(basename "$(ls -d "$root"/lib/modules/*)")
step "initramfs for kernel $kver"
in_root update-initramfs -c -k "$kver" >>"$work/apt.log" 2>&1 ||
  { tail -30 "$work/apt.log"; exit 1; }
# The installed unit, as systemd will read it on the appliance: any message is a failure.
verify=$(in_root systemd-analyze verify --man=no vecflowd.service 2>&1) && [ -z "$verify" ] ||
  { echo "build-image: systemd-analyze verify vecflowd.service: $verify" >&2; exit 1; }
in_root dpkg-query -W -f='${Package} ${Version}\n' | sort >"$out/$name.packages"

step "configuring the appliance"
install -m 0644 -D images/rootfs/hostname "$root/etc/hostname"
install -m 0644 images/rootfs/hosts "$root/etc/hosts"
install -m 0644 images/rootfs/10-vecflow-wan0.link images/rootfs/10-vecflow-lan0.link \
  images/rootfs/20-vecflow-wan0.network images/rootfs/20-vecflow-lan0.network \
  "$root/etc/systemd/network/"
install -m 0644 images/rootfs/60-vecflow-forwarding.conf "$root/etc/sysctl.d/"
install -m 0644 images/rootfs/motd "$root/etc/motd"
cat >"$root/etc/fstab" <<EOF
# <file system>            <mount point> <type> <options>                <dump> <pass>
UUID=$root_uuid  /             ext4   errors=remount-ro        0      1
UUID=${boot_volid:0:4}-${boot_volid:4:4}  /boot/efi     vfat   umask=0077,noauto,x-systemd.automount 0 0
EOF
mkdir -p "$root/boot/efi"
# An empty machine-id: each box makes its own at first boot (not a "first boot" in
# systemd's sense, so presets are not re-applied over the image's choices).
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"
# First login on the console as root, with no password; login then asks for a new one.
in_root passwd -d root >/dev/null
in_root chage -d 0 root
in_root systemctl enable vecflowd.service systemd-networkd.service >/dev/null 2>&1
# An appliance does not fetch package lists or upgrade itself.
in_root systemctl disable apt-daily.timer apt-daily-upgrade.timer >/dev/null 2>&1
# FRR runs only where the operator configures it (images/README.md, "Behind BGP ECMP").
in_root systemctl disable frr.service >/dev/null 2>&1 || true

step "cleaning up"
rm -f "$root/usr/sbin/policy-rc.d"
cleanup
mounted=()
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/debconf/*-old \
  "$root"/var/lib/dpkg/*-old "$root"/etc/*- "$root"/var/cache/ldconfig/aux-cache \
  "$root"/tmp/* "$root"/var/tmp/* "$root"/root/.bash_history
find "$root/var/log" -type f -delete
find "$root/var/cache/apt/archives" -mindepth 1 -delete

boot_files=$work/boot-files
rm -rf "$boot_files"
mkdir -p "$boot_files/syslinux" "$boot_files/EFI/BOOT" "$boot_files/loader/entries"
cp "$root/boot/vmlinuz-$kver" "$boot_files/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$boot_files/initrd.img"
cmdline="root=UUID=$root_uuid ro console=tty0 console=ttyS0,115200n8"
cat >"$boot_files/syslinux/syslinux.cfg" <<EOF
# BIOS boot (SYSLINUX). Kernel $kver, vecflow $version.
DEFAULT vecflow
PROMPT 0
TIMEOUT 0
SERIAL 0 115200
LABEL vecflow
  LINUX /vmlinuz
  INITRD /initrd.img
  APPEND $cmdline
EOF
cp "$root/usr/lib/systemd/boot/efi/systemd-bootx64.efi" "$boot_files/EFI/BOOT/BOOTX64.EFI"
printf 'default vecflow.conf\ntimeout 0\nconsole-mode keep\n' >"$boot_files/loader/loader.conf"
cat >"$boot_files/loader/entries/vecflow.conf" <<EOF
title   vecflow $version (Debian $(cat "$root/etc/debian_version"), kernel $kver)
linux   /vmlinuz
initrd  /initrd.img
options $cmdline
EOF

# Every modification time at most SOURCE_DATE_EPOCH (files from packages keep their older
# times), every access time SOURCE_DATE_EPOCH (unpacking and running the build read them).
find "$root" "$boot_files" -newermt "@$SOURCE_DATE_EPOCH" -print0 |
  xargs -0r touch --no-dereference --date="@$SOURCE_DATE_EPOCH"
find "$root" "$boot_files" -print0 |
  xargs -0r touch --no-dereference --no-create -a --date="@$SOURCE_DATE_EPOCH"

step "root file system (ext4, ${root_mb} MB)"
used_mb=$(du -sm --apparent-size "$root" | cut -f1)
if [ "$used_mb" -gt $((root_mb * 3 / 4)) ]; then
  echo "build-image: the root file system holds ${used_mb} MB: --root-size must be larger" >&2
  exit 1
fi
rm -f "$work/root.img" "$work/boot.img"
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mkfs.ext4 -q -F -L vecflow-root -U "$root_uuid" \
  -E "hash_seed=$root_uuid,lazy_itable_init=0" -d "$root" "$work/root.img" "${root_mb}M"

step "boot partition (FAT32, ${boot_mb} MB: SYSLINUX and systemd-boot)"
boot_start=2048                                  # sectors: 1 MiB, the usual alignment
boot_sectors=$((boot_mb * 2048))
root_start=$((boot_start + boot_sectors))
root_sectors=$((root_mb * 2048))
mkfs.fat -F 32 -n VECFLOWBOOT -i "$boot_volid" --invariant -h "$boot_start" \
  -C "$work/boot.img" $((boot_mb * 1024)) >/dev/null
export MTOOLS_SKIP_CHECK=1
(cd "$boot_files" && find . -mindepth 1 -type d | sort | sed 's|^\./|::/|' |
  xargs -r mmd -i "$work/boot.img")
(cd "$boot_files" && find . -type f | sort | while read -r f; do
  mcopy -m -i "$work/boot.img" "$f" "::/${f#./}"
done)
syslinux --directory /syslinux --install "$work/boot.img"

step "disk image"
img=$out/$name.img
rm -f "$img"
truncate -s $(( (root_start + root_sectors + 2048) * 512 )) "$img"
sfdisk -q --no-reread --no-tell-kernel "$img" <<EOF
label: dos
label-id: $disk_id
unit: sectors
start=$boot_start, size=$boot_sectors, type=ef, bootable
start=$root_start, size=$root_sectors, type=83
EOF
dd if=/usr/lib/SYSLINUX/mbr.bin of="$img" bs=440 count=1 conv=notrunc status=none
dd if="$work/boot.img" of="$img" bs=1M seek=$((boot_start / 2048)) conv=notrunc,sparse status=none
dd if="$work/root.img" of="$img" bs=1M seek=$((root_start / 2048)) conv=notrunc,sparse status=none
(cd "$out" && sha256sum "$name.img" >"$name.img.sha256")

step "done: $img"
printf '  image        %s MB (raw), %s MB allocated\n' \
  $(( $(stat -c %s "$img") >> 20 )) $(( $(du -k "$img" | cut -f1) >> 10 ))
printf '  root files   %s MB, %s packages, kernel %s\n' "$used_mb" \
  "$(wc -l <"$out/$name.packages")" "$kver"
printf '  sha256       %s\n' "$(cut -d' ' -f1 "$out/$name.img.sha256")"
printf '  boot it      images/boot-test.py --image %s\n' "$img"
