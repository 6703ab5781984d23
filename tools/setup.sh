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
  # the man pages' coverage test (tests/appliance/man_coverage.py) reads configs/reference.yaml
  python3-yaml
  # the Debian package and its checks (ctest -L appliance): debhelper (debian/rules),
  # lintian, systemd-analyze, man page rendering; debootstrap for images/package-check.sh
  # --chroot and images/package-test.sh
  dpkg-dev debhelper lintian debootstrap systemd groff-base file
  # the benchmark suite's curves, its traffic sink and the kernel rows' rulesets (nftables:
  # conntrack, flowtable), the sources of its DPDK router samples (l3fwd, l3fwd-graph) and
  # patch(1) for tools/bench/peers/ (tools/bench/run.sh)
  gnuplot-nox nftables dpdk-doc patch
  # the scale-out lab and its test (tools/scaleout-lab.sh): BGP and BFD beside vecflowd
  frr
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# promtool, Prometheus' own check of the metrics text (the control tests run it): taken out of
# Debian's prometheus package rather than installing the package, which would start a
# Prometheus server on this machine.
need_promtool=0
command -v promtool >/dev/null || need_promtool=1

if [ ${#missing[@]} -eq 0 ] && [ $need_promtool = 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  [ ${#missing[@]} -eq 0 ] || echo "setup: missing packages: ${missing[*]}" >&2
  [ $need_promtool = 0 ] || echo "setup: missing promtool" >&2
  echo "setup: run as root (sudo $0) to install them" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  if ! apt-get install -y --no-install-recommends "${missing[@]}"; then
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
  fi
fi

if [ $need_promtool = 1 ]; then
  echo "setup: installing promtool from Debian's prometheus package"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # apt's download user cannot write into a root-owned mktemp directory.
  chmod 755 "$tmp"
  chown _apt "$tmp" 2>/dev/null || true
  (cd "$tmp" && { apt-get download prometheus || { apt-get update && apt-get download prometheus; }; })
  dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool
  install -m 755 "$tmp/usr/bin/promtool" /usr/local/bin/promtool
fi
