#!/usr/bin/env bash
# The scheduler benchmark in one command, with 2 MB hugepages reserved for the run:
#
#   sudo tests/bench/sched_bench.sh [build/tests/bench/vecflow_sched_bench] [bench options]
#
# Adds its pages to /proc/sys/vm/nr_hugepages (never takes pages others reserved), mounts a
# hugetlbfs if none is mounted, and undoes both on exit, also on failure. Without hugepages
# (not root, or the kernel could not find the memory) it runs with --no-huge and says so:
# DPDK is about 2.5x slower then, but the backends still compare side by side.
set -euo pipefail

PAGES=${VSC_BENCH_HUGEPAGES:-640}  # EAL asks for 1024 MB; 1280 MB leaves slack
BIN=build/tests/bench/vecflow_sched_bench
if [[ $# -gt 0 && $1 != -* ]]; then
  BIN=$1
  shift
fi
[[ -x $BIN ]] || { echo "sched_bench.sh: $BIN not built (ninja -C build vecflow_sched_bench)" >&2; exit 1; }

NR=/proc/sys/vm/nr_hugepages
reserved=0
mnt=""
cleanup() {
  if [[ -n $mnt ]]; then
    umount "$mnt" 2>/dev/null || true
    rmdir "$mnt" 2>/dev/null || true
  fi
  if ((reserved > 0)); then
    cur=$(cat "$NR")
    echo $((cur > reserved ? cur - reserved : 0)) >"$NR" || true
  fi
}
trap cleanup EXIT

if [[ -w $NR ]]; then
  before=$(cat "$NR")
  echo $((before + PAGES)) >"$NR" || true
  after=$(cat "$NR")
  reserved=$((after - before))
fi
free_mb=$(awk '/HugePages_Free/ {f=$2} /Hugepagesize/ {s=$2} END {print f*s/1024}' /proc/meminfo)
if ((${free_mb%.*} >= 1024)); then
  if ! grep -q ' hugetlbfs ' /proc/mounts; then
    mnt=$(mktemp -d /tmp/vsc-huge.XXXXXX)
    mount -t hugetlbfs nodev "$mnt"
  fi
  echo "# $reserved hugepages reserved for this run (${free_mb%.*} MB free)"
  "$BIN" "$@"
else
  echo "# note: hugepages unavailable (${free_mb%.*} MB free): running with --no-huge"
  "$BIN" --no-huge "$@"
fi
