#!/usr/bin/env bash
# Installs the Debian 12 packages vecflow needs to build, test and run its demo. Idempotent:
# checks what is installed first and calls apt-get only for what is missing.
set -euo pipefail

PACKAGES=(
  # build
  build-essential cmake ninja-build pkg-config clang llvm bpftool
  # the fuzz build: clang 19 (C++23) with libFuzzer and the sanitizer runtimes
  clang-19 libclang-rt-19-dev
  libbpf-dev libxdp-dev xdp-tools dpdk dpdk-dev libdpdk-dev
  libyaml-cpp-dev libboost-dev libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev libpcap-dev libsystemd-dev libmnl-dev
  # tests and demo: namespaces, traffic, formatting
  iproute2 iputils-ping netcat-openbsd ethtool kmod clang-format python3
  # control-plane tests: the reference Prometheus text parser, a throwaway-user tool set
  python3-prometheus-client passwd util-linux
  # the Debian package and its checks (ctest -L appliance): debhelper (debian/rules),
  # lintian, systemd-analyze, man page rendering; debootstrap for images/package-check.sh
  # --chroot and images/package-test.sh
  dpkg-dev debhelper lintian debootstrap systemd groff-base file
  # the benchmark suite's curves and its traffic sink (tools/bench/run.sh)
  gnuplot-nox nftables
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run as root (sudo $0) to install them" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi
