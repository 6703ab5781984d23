#!/usr/bin/env bash
# The port benchmark in one command: builds it, reserves 512 MiB of hugepages for the run
# (DPDK is about 2.5x slower here without them) and gives them back afterwards, then prints
# single-core rx->tx forwarding per port kind next to its reference:
#
#   sudo tools/bench-ports.sh                       defaults: 3 rounds of 2 s
#   sudo tools/bench-ports.sh --rounds 5 --seconds 3
#   sudo tools/bench-ports.sh --no-huge [args]      without hugepages
#
# Arguments after the options go to build/tests/bench/io/vf_port_bench (--only afxdp|ring|vhost).
set -euo pipefail
cd "$(dirname "$0")/.."

huge=1
if [ "${1:-}" = "--no-huge" ]; then
  huge=0
  shift
fi
[ "$(id -u)" -eq 0 ] || { echo "bench-ports: needs root" >&2; exit 2; }

cmake -S . -B build -G Ninja >/dev/null
cmake --build build --target vf_port_bench >/dev/null

args=(--hugepages off)
if [ "$huge" = 1 ]; then
  pages=256
  before=$(cat /proc/sys/vm/nr_hugepages)
  mnt=""
  if ! grep -q hugetlbfs /proc/mounts; then
    mnt=$(mktemp -d /tmp/vf-bench-huge.XXXXXX)
    mount -t hugetlbfs nodev "$mnt"
  fi
  restore() {
    echo "$before" > /proc/sys/vm/nr_hugepages
    if [ -n "$mnt" ]; then umount "$mnt" && rmdir "$mnt"; fi
  }
  trap restore EXIT
  echo $((before + pages)) > /proc/sys/vm/nr_hugepages
  args=(--hugepages auto)
fi
uptime
build/tests/bench/io/vf_port_bench "${args[@]}" "$@" 2> >(grep -v "^libbpf\|^libxdp" >&2)
