#!/usr/bin/env bash
# The pipeline benchmark, one command:
#
#   sudo tests/bench/run_pipeline_bench.sh [BUILD_DIR] [-- pipeline_bench options]
#
# Reserves 2 MB hugepages for the run (mounting hugetlbfs if none is mounted) and gives back
# exactly what it took when it ends, also on failure. DPDK runs about 2.5x slower here without
# hugepages, so figures without them are not comparable.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build
if [ $# -gt 0 ] && [ "$1" != "--" ]; then build=$1; shift; fi
[ "${1:-}" = "--" ] && shift

# 1 GB for the benchmark's EAL (1024 MB): FIBs of 100 000 routes, the ACL, the mbuf pool.
pages=${VECFLOW_BENCH_HUGEPAGES:-600}
before=$(cat /proc/sys/vm/nr_hugepages)
mounted=""
cleanup() {
  echo "$before" > /proc/sys/vm/nr_hugepages
  if [ -n "$mounted" ]; then umount "$mounted"; fi
}
trap cleanup EXIT
if ! grep -q ' hugetlbfs ' /proc/mounts; then
  mkdir -p /dev/hugepages
  mount -t hugetlbfs nodev /dev/hugepages
  mounted=/dev/hugepages
fi
echo $((before + pages)) > /proc/sys/vm/nr_hugepages
got=$(cat /proc/sys/vm/nr_hugepages)
if [ "$got" -lt $((before + pages)) ]; then
  echo "run_pipeline_bench: only $((got - before)) of $pages hugepages could be reserved" >&2
fi
echo "load: $(uptime)"
"$build/tests/bench/pipeline_bench" "$@"
