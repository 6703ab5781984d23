#!/usr/bin/env bash
# vecflow's benchmark suite in one command: every benchmark of the project, one table of
# side-by-side ratios measured in the same run (Markdown, JSON, and curves.png when gnuplot is
# installed) in a results directory.
#
#   sudo tools/bench/run.sh                         everything: 3 interleaved rounds, medians
#   sudo tools/bench/run.sh --rounds 5 --seconds 5  longer, steadier
#   sudo tools/bench/run.sh --only e2e,sched        some parts: e2e, rules, sched, pipeline,
#                                                   steer, ports, engine, nat, latency, jumbo,
#                                                   offload
#   sudo tools/bench/run.sh --only engine           vecflowd vs dpdk-testpmd on one lcore
#   sudo tools/bench/run.sh --only latency          ping RTT and one-way latency per forwarder
#   sudo tools/bench/run.sh --only offload          issue 40's veth rows: Linux, nftables
#                                                   flowtable, vecflowd user space, offload and
#                                                   XDP redirect (trafgen xdp-live, paced)
#   sudo tools/bench/run.sh --quick                 one point per part, no hugepages: checks
#                                                   that every row is measured or says why not
#   sudo tools/bench/run.sh --out DIR               results there (default bench-results/<time>)
#
# Builds what it runs (--no-build: use BUILD_DIR as it is; --build-dir DIR, default build).
# Reserves 2 MB hugepages for the run (DPDK is about 2.5x slower here without them): adds its
# pages to /proc/sys/vm/nr_hugepages, mounts a hugetlbfs if none is mounted, and gives back
# exactly what it added when it ends, also on failure or Ctrl-C. The engine part replays up to
# 1M frames from a DPDK pool of as many mbufs, so when it runs the reservation is raised to
# VECFLOW_BENCH_ENGINE_HUGEPAGES (default 1700 pages, 3.4 GB). tools/bench/suite.py does the
# measuring; see its header for what each row is.
set -euo pipefail
cd "$(dirname "$0")/../.."

# 77: not root, so nothing can be measured (the smoke test reports it as skipped).
[ "$(id -u)" -eq 0 ] || { echo "bench: needs root (namespaces, XDP, AF_XDP, hugepages)" >&2; exit 77; }

build=build
do_build=1
huge=1
only=""
cmdline="$0 $*"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift ;;
    --no-build) do_build=0 ;;
    --no-huge) huge=0 ;;
    --quick) huge=0; args+=("$1") ;;
    --only) only=$2; args+=("$1" "$2"); shift ;;
    --only=*) only=${1#--only=}; args+=("$1") ;;
    *) args+=("$1") ;;
  esac
  shift
done

# vecflowd, vecflowctl and trafgen (its `pcap` subcommand) serve the e2e, rules, engine,
# latency and offload parts (bench_sink: the offload part's XDP receiver); dpdk-testpmd, the
# engine part's reference, comes from Debian's dpdk package.
if [ "$do_build" = 1 ]; then
  cmake -S . -B "$build" -G Ninja >/dev/null
  cmake --build "$build" --target vecflowd vecflowctl trafgen xsk_fwd steer_bench vecflow_sched_bench \
    pipeline_bench vf_port_bench bench_sink
fi

# 1200 MB: the scheduler and pipeline benchmarks ask EAL for 1024 MB; the parts run one at a
# time, so one reservation serves all of them.
PAGES=${VECFLOW_BENCH_HUGEPAGES:-600}
# The engine part (in the default set, or named in --only) keeps 1M replayed frames in a pool
# of 1.1M mbufs: vecflowd asks EAL for 2.5 GB, testpmd allocates ~2.8 GB (one at a time).
case ",${only:-engine}," in
  *,engine,*)
    ENGINE_PAGES=${VECFLOW_BENCH_ENGINE_HUGEPAGES:-1700}
    [ "$PAGES" -ge "$ENGINE_PAGES" ] || PAGES=$ENGINE_PAGES ;;
esac
NR=/proc/sys/vm/nr_hugepages
added=0
mnt=""
release() {
  if [ -n "$mnt" ]; then umount "$mnt" 2>/dev/null || true; rmdir "$mnt" 2>/dev/null || true; fi
  if [ "$added" -gt 0 ]; then
    cur=$(cat "$NR")
    echo $((cur > added ? cur - added : 0)) >"$NR" || true
  fi
}
trap release EXIT
trap 'exit 130' INT TERM

if [ "$huge" = 1 ]; then
  before=$(cat "$NR")
  echo $((before + PAGES)) >"$NR" || true
  added=$(($(cat "$NR") - before))
  if ! grep -q ' hugetlbfs ' /proc/mounts; then
    mnt=$(mktemp -d /tmp/vecflow-bench-huge.XXXXXX)
    mount -t hugetlbfs nodev "$mnt"
  fi
  free_mb=$(awk '/HugePages_Free/ {f=$2} /Hugepagesize/ {s=$2} END {print int(f*s/1024)}' /proc/meminfo)
  if [ "$free_mb" -ge 1024 ]; then
    args+=(--hugepages)
    echo "bench: $added hugepages reserved for this run ($free_mb MB free)" >&2
  else
    echo "bench: only $free_mb MB of hugepages free: DPDK tools run without them" >&2
  fi
fi

echo "bench: load $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2
VECFLOW_BENCH_COMMAND=$cmdline python3 tools/bench/suite.py --build-dir "$build" "${args[@]}"
