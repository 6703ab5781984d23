#!/usr/bin/env python3
"""vecflow's benchmark suite: runs every benchmark of the project and writes one table.

Run it through tools/bench/run.sh (root; it builds the tools and reserves hugepages). This
script only orchestrates: every figure comes from an existing tool, run in this one process
tree so that all rows are measured in the same run under the same machine load:

  end to end   trafgen (client ns) -> forwarder (appliance ns) -> trafgen recv (server ns) on
               tools/lab.sh's topology, for Linux IP forwarding, vecflowd's XDP redirect rule,
               the raw AF_XDP ceiling (xsk_fwd) and vecflowd's user-space path (AF_XDP,
               scheduler, ACL + route). Ratios are to Linux forwarding of the same point.
  scheduler    vecflow_sched_bench (builtin vs event_dsw vs event_sw)
  pipeline     pipeline_bench (ACL + route, vector 1 vs 64, route tables that grow)
  steering     steer_bench (XDP rule scaling, BPF_PROG_TEST_RUN)
  ports        vf_port_bench (per port kind, against its raw reference)
  growth       e2e rate and vecflowd memory as flows grow (1 -> 1M) and as vecflowd's steering
               rules grow (1 -> 100k); the pipeline's rate and memory as routes grow (1 -> 100k);
               the XDP program's cost per frame as rules grow (steer_bench)
  engine       engine per core: vecflowd on a DPDK net_pcap vdev replaying a pcap from memory
               (trafgen pcap; 64 B, 1 .. 1M flows), one data lcore, pipelines route+neighbour
               and acl+route+neighbour on the builtin and event_dsw schedulers, beside
               dpdk-testpmd io and macswap, DPDK's l3fwd (LPM) and the two samples of
               vecflowd's own design class, l3fwd-graph (rte_graph) and l3fwd in eventdev
               mode (event_dsw, atomic), built from Debian's dpdk-doc (the latter two with
               the patches in tools/bench/peers/), on the same vdev and lcore. Ratios are to
               testpmd io of the same flow count; vecflowd's notes also give its ratio to each
               router sample, and the results' targets issue 37's. Each vecflowd point ends
               with SIGTERM and must exit 0 with exact final accounting, else the point has
               that failure as its reason.
  latency      on the end-to-end topology, each forwarder started once per round (rounds
               interleaved, each run under the measurement lock): ping round trips (client ->
               198.51.100.2, 56 B every 2 ms, ping on CPU 0; LAT_PINGS per row over the rounds)
               through Linux forwarding, xsk_fwd both ways with MAC rewrite, vecflowd with CPU
               profile latency and with the default, power; and one-way latency (trafgen's
               per-frame CLOCK_REALTIME stamp against the kernel's receive timestamp, p50 /
               p99 / p99.9 / max) at LAT_POINTS (1 and 10 kpps, 10 % and 50 % of each
               forwarder's own lossless rate, searched first) through Linux forwarding,
               vecflowd's XDP redirect rule, xsk_fwd one way and vecflowd with either profile.
               Every vecflowd run must stop with exact accounting, or its rows give that as
               their reason. latency.png: p50 and p99 vs offered load.

  offload      issue 40's veth rows, on the end-to-end topology with trafgen's XDP live-frames
               generator (CPU 0, paced) and an XDP sink on the server that veth counts: Linux
               IP forwarding, the nftables flowtable, vecflowd's user-space path, vecflowd with
               its XDP offload and vecflowd's XDP redirect rule, for a stateless pipeline
               (route + neighbour) and a stateful one (conntrack; flows primed with a reply so
               that they are established), 64 and 1500 B, 1, 1024 and 65536 flows. Each point's
               rate is its lossless rate (OFFLOAD_LOSSLESS), searched in every round; rounds
               interleaved, medians. Ratios to Linux forwarding of the same pipeline, and the
               offload rows' to the redirect rule, the user-space path and the flowtable.
               vecflowd's accounting must add up after every point and at SIGTERM, else the
               point has that failure as its reason.

A row carries a number, or an explicit reason why there is none ("not measured: ..."): no
figure is ever made up. Output: results.md, results.json, raw/ (each tool's own output) and,
when gnuplot is installed, curves.png and latency.png.
"""

import argparse
import contextlib
import datetime
import fcntl
import gzip
import json
import math
import os
import re
import select
import shutil
import signal
import socket
import statistics
import string
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# End-to-end points: frame sizes without FCS (60 = a 64 B frame on the wire, 1514 = a 1500 B
# IP packet) and flow counts.
E2E_SIZES = [(60, "64 B"), (1514, "1500 B")]
E2E_FLOWS = [1, 1024]
GROWTH_FLOWS = [1, 1024, 65536, 1 << 20]
GROWTH_RULES = [1, 1000, 10000, 100000]
# Engine per core: flow counts of the replayed pcap (one frame per flow, flows in sequence).
# 16384: where a flow table stops fitting the L2 cache (and one of issue 37's points).
ENGINE_FLOWS = [1, 1024, 16384, 65536, 1 << 20]
# Mbufs beyond the frames net_pcap's infinite_rx keeps in the pool (rx descriptors, vectors in
# flight, per-lcore caches). vecflowd's mbufs are 2 KiB each (dpdk.memory_mb follows).
ENGINE_POOL_SPARE = 65536
# The measurement lock the engineers of this machine share: every process the engine part
# times holds it for its own lifetime only (seconds), so runs on the same 2 cores interleave
# instead of overlapping. VECFLOW_BENCH_LOCK= (empty) takes none.
BENCH_LOCK = os.environ.get("VECFLOW_BENCH_LOCK", "/tmp/vecflow-bench.lock")
BENCH_LOCK_WAIT_S = 600
# A row whose receiver saw less than this share of what was sent did not forward: its rate
# would be a measurement of a broken path, so the row gives the reason instead.
MIN_DELIVERED = 0.01
# Latency part. Ping: this many pings per row (ping -i 0.002, 56 B), split over the rounds.
LAT_PINGS = 3000
LAT_PINGS_QUICK = 200
# One way (trafgen): (frame size, flows, load); a load is packets per second or a share of the
# forwarder's own lossless rate at that size and flow count. The full curve at 64 B and 1
# flow; at 1500 B and at 1024 flows one light and one heavy load each (README: why).
LAT_POINTS = [(60, 1, 1000), (60, 1, 10000), (60, 1, 0.1), (60, 1, 0.5),
              (1514, 1, 10000), (1514, 1, 0.5), (60, 1024, 10000), (60, 1024, 0.5)]
LAT_QUICK_POINTS = [(60, 1, 10000)]
# Frames per point and round: enough for p99.9 to be the 3rd-largest sample at least (3 s at
# 1 kpps), and a second at least at higher loads; a --quick point sends for half a second.
LAT_FRAMES = 3000
LAT_MIN_S, LAT_MAX_S = 1.0, 3.0
# The lossless rate: the highest offered rate of a short search at which the receiver counted
# at least this share of what was sent (a probe of LAT_PROBE_S seconds; the search starts
# unpaced, then tries 0.95x the rate the forwarder delivered at saturation and bisects
# between the highest rate that passed and the lowest that did not, LAT_SEARCH_STEPS probes).
LAT_LOSSLESS = 0.999
LAT_PROBE_S = 0.5
LAT_SEARCH_STEPS = 4
# Offload part (issue 40): flow counts of its points (at 64 and 1500 B, E2E_SIZES). A point's
# rate is its lossless rate: the highest offered rate at which the sink counted at least
# OFFLOAD_LOSSLESS of the frames sent in a probe of OFFLOAD_PROBE_S seconds (the search of
# the latency part, lossless(), OFFLOAD_SEARCH_STEPS paced probes after an unpaced one,
# geometric: unpaced, xdp-live offers 4-9 Mpps, and Linux forwarding then delivered 60 kpps
# where it delivered 0.68 Mpps of 1.1 offered).
OFFLOAD_FLOWS = [1, 1024, 65536]
OFFLOAD_LOSSLESS = 0.99
OFFLOAD_PROBE_S = 0.5
OFFLOAD_SEARCH_STEPS = 5
# Before a point every flow is primed: one frame each at this rate (every row forwards it
# without loss), and for the stateful pipeline a reply per flow, then one more frame each.
OFFLOAD_PRIME_PPS = 100000
# The XDP sink's count has settled when two reads this far apart agree (at most the max).
SINK_SETTLE_S = 0.1
SINK_SETTLE_MAX_S = 3.0


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def fmt_rate(v, unit):
    if v is None:
        return ""
    if unit == "Mpps":
        return f"{v:.3f} Mpps"
    if unit == "us":
        return f"{v:.1f} us"
    if unit == "ns/frame":
        return f"{v:.1f} ns/frame"
    if unit == "x":
        return f"{v:.2f}x"
    return f"{v:.3g} {unit}"


def fmt_kib(k):
    if k is None:
        return ""
    return f"{k / 1024:.1f} MiB" if k >= 1024 else f"{k} KiB"


def nft_forward_table(name, policy, rules, flowtable=False):
    """An nftables inet table with a forward chain of `rules` and, with flowtable, the
    flowtable `ft` on the lab appliance's two interfaces."""
    ft = ("  flowtable ft { hook ingress priority filter; devices = { wan0, lan0 }; }\n"
          if flowtable else "")
    body = "".join(f"    {r}\n" for r in rules)
    return (f"table inet {name} {{\n{ft}  chain forward {{\n"
            f"    type filter hook forward priority filter; policy {policy};\n{body}  }}\n}}\n")


def kernel_config(option):
    """True/False: the running kernel's /proc/config.gz sets `option` (y or m) or not; None
    when the kernel does not publish its configuration."""
    try:
        text = gzip.decompress(Path("/proc/config.gz").read_bytes()).decode(errors="replace")
    except OSError:
        return None
    return re.search(rf"^{option}=[ym]$", text, re.M) is not None


def napi_threads(dev):
    """PIDs of the kernel's threaded-NAPI threads of interfaces named `dev`, in any namespace
    (napi/DEV-ID)."""
    pids = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if (d / "comm").read_text().startswith(f"napi/{dev}-"):
                pids.add(int(d.name))
        except OSError:
            continue
    return pids


def mirror_pcap(src, dst):
    """Writes to dst every frame of the pcap src (IPv4 UDP, trafgen's) with its MACs,
    addresses and ports swapped: the replies of its flows. The checksums stay valid: a
    one's-complement sum does not depend on the order of its words."""
    data = Path(src).read_bytes()
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out = bytearray(data[:24])
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack_from(endian + "I", data, off + 8)[0]
        f = bytearray(data[off + 16:off + 16 + incl])
        if f[12:14] != b"\x08\x00" or f[14] != 0x45 or f[23] != 17:
            raise RuntimeError(f"{src}: a frame that is not IPv4 UDP without options")
        f[0:6], f[6:12] = f[6:12], f[0:6]
        f[26:30], f[30:34] = f[30:34], f[26:30]
        f[34:36], f[36:38] = f[36:38], f[34:36]
        out += data[off:off + 16] + f
        off += 16 + incl
    Path(dst).write_bytes(out)


def tag_pcap(src, dst, tags):
    """Writes to dst every frame of the pcap src with `tags` after its MACs: (TPID, VLAN id)
    pairs, outer first."""
    tag = b"".join(struct.pack(">HH", tpid, vlan) for tpid, vlan in tags)
    data = Path(src).read_bytes()
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    out = bytearray(data[:24])
    off = 24
    while off + 16 <= len(data):
        ts, incl, orig = data[off:off + 8], *struct.unpack_from(endian + "II", data, off + 8)
        f = data[off + 16:off + 16 + incl]
        out += ts + struct.pack(endian + "II", incl + len(tag), orig + len(tag))
        out += f[:12] + tag + f[12:]
        off += 16 + incl
    Path(dst).write_bytes(out)


def accounting_delta(before, after):
    """Per port, the XDP program's counts between two offload_accounting() reads."""
    if not before or not after:
        return None
    out = {}
    for port, c in after.items():
        x, y = c.get("xdp"), (before.get(port) or {}).get("xdp")
        if x and y:
            out[port] = {k: x[k] - y[k] for k in x}
    return out


class Results:
    """The rows of the one table. A row is a measured value or a reason, never both empty."""

    def __init__(self):
        self.rows = []

    def add(self, group, bench, point, value=None, unit="Mpps", vs=None, ratio=None,
            memory_kib=None, note="", reason=None, latency_us=None):
        if value is not None and not value > 0:
            reason = reason or f"not measured: the tool reported {value}"
            value = None
        if value is None and not reason:
            reason = "not measured: no figure"
        row = {"group": group, "benchmark": bench, "point": point, "value": value,
               "unit": unit, "vs": vs, "ratio": ratio, "memory_kib": memory_kib,
               "note": note, "reason": reason}
        if latency_us is not None and value is not None:
            row["latency_us"] = latency_us  # the latency part: every quantile of the row
        self.rows.append(row)

    def value(self, group, bench, point):
        for r in self.rows:
            if (r["group"], r["benchmark"], r["point"]) == (group, bench, point):
                return r["value"]
        return None


class Suite:
    def __init__(self, args):
        self.a = args
        self.build = Path(args.build_dir).resolve()
        self.out = Path(args.out).resolve()
        self.raw = self.out / "raw"
        self.raw.mkdir(parents=True, exist_ok=True)
        self.res = Results()
        self.lab = f"vbn{os.getpid() % 100000}"
        self.children = []  # Popen objects still running, stopped on exit
        self.rss_by_tool = {}
        self.hugepages = "auto" if args.hugepages else "off"
        self.part_seconds = {}  # how long each part took, in results.json's meta

    # ---- processes --------------------------------------------------------------------

    def bin(self, rel):
        p = self.build / rel
        if not p.exists():
            raise FileNotFoundError(f"{p} is not built")
        return str(p)

    def run_tool(self, name, argv, timeout):
        """Runs a benchmark tool to completion; keeps its output under raw/ and its peak RSS."""
        log(f"{name}: {' '.join(argv)}")
        out_path = self.raw / f"{name}.txt"
        with open(out_path, "w") as out, open(self.raw / f"{name}.stderr.txt", "w") as err:
            p = subprocess.Popen(argv, stdout=out, stderr=err, cwd=ROOT)
            self.children.append(p)
            deadline = time.monotonic() + timeout
            while True:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() > deadline:
                    p.kill()
                    pid, status, usage = os.wait4(p.pid, 0)
                    self.children.remove(p)
                    p.returncode = -9
                    return None, f"not measured: {name} did not finish within {timeout} s"
                time.sleep(0.05)
            self.children.remove(p)
            p.returncode = os.waitstatus_to_exitcode(status)
        self.rss_by_tool[name] = usage.ru_maxrss
        text = out_path.read_text()
        if p.returncode != 0:
            tail = (self.raw / f"{name}.stderr.txt").read_text().strip().splitlines()[-1:]
            return text, f"not measured: {name} exited {p.returncode}" + (
                f" ({tail[0][:120]})" if tail else "")
        return text, None

    def spawn(self, argv, log_path, env=None):
        f = open(log_path, "w")
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        p.log_file = f
        self.children.append(p)
        return p

    def stop(self, p, timeout=15):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        p.log_file.close()
        if p in self.children:
            self.children.remove(p)

    def cleanup(self):
        for p in list(self.children):
            if p.poll() is None:
                p.kill()
                p.wait()
        self.children.clear()
        subprocess.run([str(ROOT / "tools/lab.sh"), "down", self.lab], check=False)

    def ns(self, side, *argv):
        return ["ip", "netns", "exec", f"{self.lab}-{side}", *argv]

    def sh(self, side, *argv):
        return subprocess.run(self.ns(side, *argv), check=False, capture_output=True, text=True)

    # ---- end to end -------------------------------------------------------------------

    def lab_up(self):
        subprocess.run([str(ROOT / "tools/lab.sh"), "down", self.lab], check=False)
        subprocess.run([str(ROOT / "tools/lab.sh"), "up", self.lab], check=True)
        # The appliance's receive side runs in its own kthread instead of the generator's
        # softirq (MACHINE.md): otherwise generator and forwarder share one vCPU and every
        # row measures the generator. Same setting for every row.
        self.sh("a", "sh", "-c", "echo 1 > /sys/class/net/wan0/threaded")
        # The server is a sink: its receiver counts the test traffic from an AF_PACKET tap,
        # then the frames are dropped at ingress. Without this the server's IP stack takes
        # each UDP frame to a closed port and routes an ICMP reply for it, and since veth
        # delivers in the sender's softirq, that work (60% of the forwarding CPU's time with
        # vecflowd, 17% in __icmp_send alone) was charged to whichever forwarder ran there.
        self.nft_sink("s")
        mac = lambda side, dev: self.sh(side, "cat", f"/sys/class/net/{dev}/address").stdout.strip()
        self.wan_mac = mac("a", "wan0")
        self.lan_mac = mac("a", "lan0")
        self.client_mac = mac("c", "eth0")
        self.server_mac = mac("s", "eth0")
        addr = re.search(r"inet (\S+)/", self.sh("c", "ip", "-4", "-o", "addr", "show", "dev",
                                                  "eth0").stdout)
        self.client_ip = addr.group(1) if addr else None

    def nft_sink(self, side):
        """UDP frames arriving on eth0 of a host namespace are dropped at ingress (after any
        AF_PACKET tap), before that host's IP stack would answer each with an ICMP error."""
        sink = ('table netdev vfsink { chain in { type filter hook ingress device "eth0" '
                'priority 0; policy accept; meta l4proto udp drop; }; }')
        r = self.sh(side, "nft", sink)
        if r.returncode != 0:
            raise RuntimeError(f"the {dict(s='server', c='client')[side]}'s sink (nft): "
                               f"{r.stderr.strip()}")

    def send(self, size, flows, rate=None, burst_us=None, engine="af_packet", seconds=None,
             count=None):
        """trafgen send from the client (CPU 0) to the server, for `seconds` or `count`
        frames: returns its JSON or raises RuntimeError."""
        argv = self.ns("c", "taskset", "-c", "0", self.bin("tools/trafgen/trafgen"), "send",
                       "--dev", "eth0", "--dst", "198.51.100.2", "--dst-mac", self.wan_mac,
                       "--flows", str(flows), "--size", str(size), "--json",
                       *(["--duration", str(seconds)] if seconds is not None else []),
                       *(["--count", str(count)] if count is not None else []),
                       *(["--engine", engine] if engine != "af_packet" else []),
                       *(["--rate", f"{rate:.0f}"] if rate else []),
                       *(["--burst-us", f"{burst_us:g}"] if burst_us is not None else []))
        expected_s = seconds if seconds is not None else count / (rate or 1e5)
        send = subprocess.run(argv, capture_output=True, text=True, timeout=expected_s + 60)
        if send.returncode != 0:
            raise RuntimeError(f"trafgen send: {send.stderr.strip()[:160]}")
        return json.loads(send.stdout)

    def send_recv(self, size, flows, seconds, rate=None, idle_exit_ms=400, pin_recv=False,
                  burst_us=None, engine="af_packet", sink=False):
        """One measurement: returns (sender json, receiver json) or raises RuntimeError.
        rate: packets per second (None: as fast as the generator can); pin_recv: the receiver
        on CPU 0 with the sender, off the forwarder's CPU 1; burst_us: trafgen's --burst-us
        (the latency part: 0, a batch holds only the frames already due); engine: trafgen's
        --engine; sink: the receiver is the XDP sink on the server's interface (attach_sink),
        whose count once the path has drained is the receiver json's "received" (and "pps",
        over the sender's time) instead of `trafgen recv`'s."""
        if sink:
            before = self.sink_frames()
            s = self.send(size, flows, rate, burst_us, engine, seconds=seconds)
            got = self.sink_frames(settle=True) - before
            return s, {"received": got, "pps": got / s["seconds"] if s["seconds"] else 0}
        recv = subprocess.Popen(
            self.ns("s", *(["taskset", "-c", "0"] if pin_recv else []),
                    self.bin("tools/trafgen/trafgen"), "recv", "--dev", "eth0", "--json",
                    "--duration", str(seconds + 5), "--idle-exit", str(idle_exit_ms)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.children.append(recv)
        try:
            ready = select.select([recv.stderr], [], [], 10)[0]
            if not ready or "receiving" not in recv.stderr.readline():
                raise RuntimeError("the receiver did not start")
            s = self.send(size, flows, rate, burst_us, engine, seconds=seconds)
            out, _ = recv.communicate(timeout=seconds + 20)
        finally:
            if recv.poll() is None:
                recv.kill()
                recv.wait()
            self.children.remove(recv)
        return s, json.loads(out)

    def attach_sink(self):
        """The offload part's receiver: tools/bench/sink.bpf.c on the server's eth0 drops
        the UDP test traffic in XDP, and veth counts the drops (sink_frames)."""
        r = self.sh("s", "ip", "link", "set", "dev", "eth0", "xdpdrv", "obj",
                    self.bin("tools/bench/sink.bpf.o"), "sec", "xdp")
        if r.returncode != 0:
            raise RuntimeError(f"the XDP sink did not attach: {r.stderr.strip()[:160]}")

    def sink_frames(self, settle=False):
        """Frames the XDP sink dropped so far (veth's rx_queue_N_xdp_drops, all queues).
        settle: first wait until the count stops moving (frames still in the forwarder's
        rings and vectors arrive), two reads SINK_SETTLE_S apart, for SINK_SETTLE_MAX_S at
        most."""
        def read():
            out = self.sh("s", "ethtool", "-S", "eth0").stdout
            found = re.findall(r"rx_queue_\d+_xdp_drops:\s*(\d+)", out)
            if not found:
                raise RuntimeError("ethtool -S eth0 on the server shows no rx_queue_N_xdp_drops")
            return sum(int(x) for x in found)

        n = read()
        deadline = time.monotonic() + SINK_SETTLE_MAX_S
        while settle and time.monotonic() < deadline:
            time.sleep(SINK_SETTLE_S)
            m = read()
            if m == n:
                break
            n = m
        return n

    def warm(self):
        """A short burst before a row: ARP, page faults, caches. Not measured; a quick run,
        which checks that rows are measured rather than what they measure, skips it."""
        if self.a.quick:
            return
        try:
            self.send_recv(60, 1024, 0.3)
        except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError):
            pass

    def start_forwarder(self, kind, extra_rules="", timeout=60, tag=""):
        """Sets the appliance namespace up for one row. Returns (process or None, reason).
        tag: a suffix for the forwarder's log under raw/ (one log per run)."""
        if kind == "linux":
            self.sh("a", "sysctl", "-qw", "net.ipv4.ip_forward=1")
            return None, None
        if kind in self.NFT_KINDS:
            nft = self.out / f"{kind}.nft"
            nft.write_text(self.NFT_KINDS[kind][1])
            self.sh("a", "sysctl", "-qw", "net.ipv4.ip_forward=1")
            r = self.sh("a", "nft", "-f", str(nft))
            if r.returncode != 0:
                self.stop_forwarder(kind, None)
                err = next((l for l in r.stderr.splitlines() if "Error" in l),
                           r.stderr.strip() or f"exit {r.returncode}")
                why = f"not measured: nft refused {nft.name} ({err.replace(str(nft), nft.name)})"
                if "flowtable" in kind and kernel_config("CONFIG_NF_FLOW_TABLE") is False:
                    why += "; this kernel is built without nftables flowtables " \
                           "(CONFIG_NF_FLOW_TABLE is not set in /proc/config.gz)"
                return None, why
            return None, None
        if kind in ("xsk", "xsk-both"):
            argv = self.ns("a", "taskset", "-c", "1", self.bin("tools/bench/xsk_fwd"),
                           "--in", "wan0", "--out", "lan0")
            if kind == "xsk-both":
                # Both ways with the MAC rewrite, so that a ping crosses it (latency part).
                argv += ["--in-peer", self.client_mac, "--out-peer", self.server_mac]
            log_path = self.raw / f"xsk_fwd{'-both' if kind == 'xsk-both' else ''}{tag}.log"
            # The kernel lets go of a queue's AF_XDP binding in deferred work after the process
            # that held it exits: a forwarder started right after another (the latency part
            # runs them back to back) can find the queue still taken (EBUSY) for a moment.
            for attempt in range(10):
                p, why = self.wait_ready(self.spawn(argv, log_path), "forwarding", "xsk_fwd")
                if not why or "busy" not in why:
                    break
                time.sleep(0.3)
            return p, why
        offload = self.OFFLOAD_VECFLOWD.get(kind)
        template = HERE / ("vecflowd-redirect.yaml" if kind == "redirect"
                           else "vecflowd-offload.yaml" if offload
                           else "vecflowd-pipeline.yaml")
        cfg = self.out / f"{kind}.yaml"
        stateful = offload is not None and offload[0] == "ct"
        text = string.Template(template.read_text()).substitute(
            hugepages=self.hugepages, prefix=f"{self.lab}-{kind}",
            socket=str(self.out / f"{kind}.sock"), server_mac=self.server_mac,
            client_mac=self.client_mac, extra_rules=extra_rules,
            profile="power" if kind == "pipeline-power" else "latency",
            stateful=self.OFFLOAD_CT_STAGES if stateful else "",
            route_sched="fuse: true" if stateful else "sched: atomic",
            offload=self.OFFLOAD_SECTION if offload and offload[1] else "")
        if kind == "pipeline-nat":
            text = re.sub(r"  - stage: acl\n(.|\n)*?  - stage: route\n    sched: atomic",
                          self.NAT_STAGE, text)
        cfg.write_text(text)
        vecflowd = self.bin("userspace/app/vecflowd")
        p = self.spawn(self.ns("a", vecflowd, "-c", str(cfg)),
                       self.raw / f"vecflowd-{kind}{tag}.log")
        return self.wait_ready(p, "running from", "vecflowd", timeout)

    def wait_ready(self, p, marker, name, timeout=60):
        path = Path(p.log_file.name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker in path.read_text(errors="replace"):
                time.sleep(0.5)  # sockets bound, first fill rings posted
                return p, None
            if p.poll() is not None:
                lines = [l for l in path.read_text(errors="replace").splitlines() if l.strip()]
                self.stop(p)
                # The first line that is not progress: vecflowd's error (located, for a file).
                errors = [l for l in lines
                          if " info " not in l and not re.match(r"^\d+ errors?$", l)]
                why = (errors or lines or [f"exit {p.returncode}"])[0]
                why = why.replace(str(self.out) + "/", "")[:200]
                return None, f"not measured: {name} did not start ({why})"
            time.sleep(0.1)
        self.stop(p)
        return None, f"not measured: {name} not ready within {timeout} s"

    def stop_forwarder(self, kind, p):
        if kind == "linux" or kind in self.NFT_KINDS:
            if kind in self.NFT_KINDS:
                self.sh("a", "nft", "delete", "table", *self.NFT_KINDS[kind][0].split())
            self.sh("a", "sysctl", "-qw", "net.ipv4.ip_forward=0")
        elif p is not None:
            self.stop(p)

    def counters(self, kind):
        """vecflowd's own accounting (rx, tx, kernel, drops per reason), summed over its ports;
        None for forwarders that are not vecflowd or when vecflowctl cannot answer."""
        if kind not in ("redirect", "pipeline", "pipeline-nat", "pipeline-power"):
            return None
        out = {}
        ctl = [self.bin("tools/vecflowctl/vecflowctl"), "--socket", str(self.out / f"{kind}.sock"),
               "--json"]
        try:
            acc = json.loads(subprocess.run(ctl + ["accounting"], capture_output=True, text=True,
                                            timeout=10).stdout)
            err = json.loads(subprocess.run(ctl + ["errors"], capture_output=True, text=True,
                                            timeout=10).stdout)
        except (ValueError, subprocess.TimeoutExpired):
            return None
        for port in acc.get("ports", []):
            for key in ("rx_packets", "tx_packets", "kernel_packets"):
                out[key] = out.get(key, 0) + port.get(key, 0)
        for r in err.get("reasons", []):
            if r.get("count"):
                out[r["reason"]] = out.get(r["reason"], 0) + r["count"]
        return out

    @staticmethod
    def memory(p):
        """Resident memory of a forwarder in KiB: anonymous/file RSS plus hugetlb pages."""
        if p is None or p.poll() is not None:
            return None
        try:
            st = Path(f"/proc/{p.pid}/status").read_text()
        except OSError:
            return None
        kib = 0
        for key in ("VmRSS", "HugetlbPages"):
            m = re.search(rf"^{key}:\s+(\d+) kB", st, re.M)
            if m:
                kib += int(m.group(1))
        return kib

    E2E_ROWS = [
        ("linux", "Linux IP forwarding"),
        ("redirect", "vecflowd XDP redirect rule"),
        ("xsk", "raw AF_XDP rx+tx ceiling (xsk_fwd)"),
        ("pipeline", "vecflowd user space: AF_XDP, ACL + route"),
    ]
    # Source NAT of the client's flows to the box's lan address, in the kernel (nftables:
    # conntrack and NAT on the forward path) and in vecflowd (conntrack with nat, route and
    # neighbour on one atomic queue).
    NAT_ROWS = [
        ("linux-nat", "Linux forwarding, nftables SNAT"),
        ("pipeline-nat", "vecflowd user space: conntrack + nat + route"),
    ]
    NAT_NFT = """table ip vfbench_nat {
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    oifname "lan0" ip saddr 192.0.2.0/24 meta l4proto { tcp, udp } snat to 198.51.100.1:20000-29999
  }
}
"""
    # The offload part's kernel rows, each an nftables table loaded into the appliance with
    # IP forwarding on. Stateful: the condition of vecflowd's stateful pipeline
    # (OFFLOAD_CT_STAGES): established and related flows pass, new ones only from wan0. The
    # flowtable rows add the flows to a software flowtable on both lab interfaces (the kernel
    # then forwards them at ingress, before the IP stack): every UDP flow in the stateless
    # pipeline, established ones (`ct state established`, vecflowd's condition) in the other.
    CT_RULES = ["ct state established,related accept", 'ct state new iifname "wan0" accept']
    FLOW_ADD = {"rn": ["meta l4proto { tcp, udp } flow add @ft"],
                "ct": ["ct state established flow add @ft"]}
    NFT_KINDS = {
        "linux-nat": ("ip vfbench_nat", NAT_NFT),
        "linux-ct": ("inet vfbench_ct", nft_forward_table("vfbench_ct", "drop", CT_RULES)),
        "flowtable-rn": ("inet vfbench_ft", nft_forward_table("vfbench_ft", "accept",
                                                              FLOW_ADD["rn"], flowtable=True)),
        "flowtable-ct": ("inet vfbench_ft", nft_forward_table(
            "vfbench_ft", "drop", FLOW_ADD["ct"] + CT_RULES, flowtable=True)),
    }
    # vecflowd's stateful pipeline in the offload part (vecflowd-offload.yaml's ${stateful}):
    # conntrack, then an ACL fused with it that passes established and related flows and new
    # ones from wan only (Linux's twin: CT_RULES); route and neighbour are fused after them.
    # max_sessions: room above the part's largest flow count.
    OFFLOAD_CT_STAGES = f"""  - stage: conntrack
    sched: atomic
    max_sessions: {2 * max(OFFLOAD_FLOWS)}
  - stage: acl
    fuse: true
    default: deny
    rules:
      - {{name: replies, action: permit, ct: [established, related]}}
      - {{name: from-wan, action: permit, ct: new, in_port: wan}}
"""
    # The offload rows' section of vecflowd-offload.yaml: an entry per flow and direction at
    # the part's largest flow count.
    OFFLOAD_SECTION = f"""offload:
  enabled: true
  table_size: {2 * max(OFFLOAD_FLOWS)}
  idle_timeout_ms: 10000"""
    # The offload part's vecflowd kinds: (pipeline, offload on).
    OFFLOAD_VECFLOWD = {"userspace-rn": ("rn", False), "offload-rn": ("rn", True),
                        "userspace-ct": ("ct", False), "offload-ct": ("ct", True)}
    NAT_STAGE = """  - stage: conntrack
    sched: atomic
    nat:
      snat:
        - {in_port: wan, src: 192.0.2.0/24, to: 198.51.100.1, ports: 20000-29999}
  - stage: route
    fuse: true"""

    def e2e(self, points, group, rounds, seconds, rows=None):
        """Measures every (row, point), rounds interleaved by row; medians of the receiver's
        rate. Returns {(kind, point): dict}."""
        rows = rows or self.E2E_ROWS
        samples = {}
        reasons = {}
        counted = {}  # vecflowd's own counters over the measured runs
        for r in range(rounds):
            for kind, _ in rows:
                if kind in reasons and all((kind, pt) in reasons for pt in points):
                    continue
                log(f"{group}: round {r + 1}/{rounds}: {kind}")
                try:
                    p, why = self.start_forwarder(kind)
                except FileNotFoundError as e:
                    p, why = None, f"not measured: {e}"
                if why:
                    for pt in points:
                        reasons[(kind, pt)] = why
                    continue
                self.warm()
                for pt in points:
                    size, flows = pt
                    before = self.counters(kind)
                    try:
                        s, rcv = self.send_recv(size, flows, seconds)
                    except (RuntimeError, subprocess.TimeoutExpired,
                            json.JSONDecodeError) as e:
                        reasons[(kind, pt)] = f"not measured: {e}"
                        continue
                    mem = self.memory(p)
                    if p is not None and p.poll() is not None:
                        reasons[(kind, pt)] = f"not measured: {kind} forwarder exited"
                        continue
                    after = self.counters(kind)
                    if before is not None and after is not None:
                        delta = {k: after[k] - before.get(k, 0) for k in after}
                        counted.setdefault((kind, pt), {})
                        for k, v in delta.items():
                            counted[(kind, pt)][k] = counted[(kind, pt)].get(k, 0) + v
                    samples.setdefault((kind, pt), []).append((s, rcv, mem))
                self.stop_forwarder(kind, p)
        out = {}
        for kind, _ in rows:
            for pt in points:
                ss = samples.get((kind, pt), [])
                if not ss:
                    out[(kind, pt)] = {"reason": reasons.get((kind, pt), "not measured")}
                    continue
                sent = sum(s["sent"] for s, _, _ in ss)
                recv = sum(r["received"] for _, r, _ in ss)
                d = {
                    "mpps": statistics.median(r["pps"] for _, r, _ in ss) / 1e6,
                    "offered_mpps": statistics.median(s["pps"] for s, _, _ in ss) / 1e6,
                    "sent": sent, "received": recv,
                    "lost": sum(r["lost"] for _, r, _ in ss),
                    "reordered": sum(r["reordered"] for _, r, _ in ss),
                    "memory_kib": max((m for _, _, m in ss if m), default=None),
                    "rounds": len(ss),
                    "vecflowd": counted.get((kind, pt)),
                }
                if recv < MIN_DELIVERED * sent:
                    what = {"pipeline": "vecflowd did not forward",
                            "pipeline-nat": "vecflowd did not forward",
                            "redirect": "the redirect rule did not forward",
                            "xsk": "xsk_fwd did not forward",
                            "linux": "the kernel did not forward",
                            "linux-nat": "the kernel did not forward"}[kind]
                    d = {"reason": f"not measured: {what} (received {recv} of {sent} sent)"}
                out[(kind, pt)] = d
        return out

    def add_e2e_rows(self, group, points, data, label_point, rows=None, base_kind="linux"):
        rows = rows or self.E2E_ROWS
        names = dict(rows)
        for pt in points:
            base = data[(base_kind, pt)].get("mpps")
            for kind, name in rows:
                d = data[(kind, pt)]
                if "reason" in d:
                    self.res.add(group, name, label_point(pt), reason=d["reason"])
                    continue
                loss = 1 - d["received"] / d["sent"] if d["sent"] else 0
                note = (f"offered {d['offered_mpps']:.3f} Mpps; delivered {100 * (1 - loss):.1f}%"
                        f", seq gaps {d['lost']}, reordered {d['reordered']}")
                if kind == "pipeline":
                    ceil = data[("xsk", pt)].get("mpps")
                    if ceil:
                        note += f"; {d['mpps'] / ceil:.2f}x the raw AF_XDP ceiling"
                if kind == "redirect":
                    note += "; frames leave unmodified (no MAC rewrite)"
                c = d.get("vecflowd")
                if c and kind in ("pipeline", "pipeline-nat"):
                    drops = sorted(((v, k) for k, v in c.items()
                                    if k not in ("rx_packets", "tx_packets", "kernel_packets")
                                    and v > 0), reverse=True)
                    note += (f"; vecflowd counted rx {c.get('rx_packets', 0)}, tx "
                             f"{c.get('tx_packets', 0)}, kernel {c.get('kernel_packets', 0)}"
                             + "".join(f", {k} {v}" for v, k in drops))
                self.res.add(group, name, label_point(pt), d["mpps"], "Mpps",
                             vs=None if kind == base_kind else names[base_kind],
                             ratio=(d["mpps"] / base) if base and kind != base_kind else None,
                             memory_kib=d["memory_kib"], note=note)

    def run_e2e(self):
        self.lab_up()
        try:
            points = [(s, f) for s, _ in E2E_SIZES for f in E2E_FLOWS]
            if self.a.quick:
                points = [(60, 1024)]
            size_name = dict(E2E_SIZES)
            data = self.e2e(points, "end to end", self.a.rounds, self.a.seconds)
            self.add_e2e_rows("end to end (veth)", points, data,
                              lambda pt: f"{size_name[pt[0]]}, {plural(pt[1], 'flow')}")
            if self.a.quick:
                return  # the scheduler's rows stand for flow growth in a quick run
            gpoints = [(60, f) for f in GROWTH_FLOWS]
            gdata = self.e2e(gpoints, "flows growth", self.a.rounds, self.a.seconds)
            self.add_e2e_rows("growth: flows (e2e, 64 B)", gpoints, gdata,
                              lambda pt: plural(pt[1], "flow"))
            self.flow_growth = (gpoints, gdata)
        finally:
            self.cleanup()

    def run_nat_e2e(self):
        """NAT over veth: the client's flows source-NATed to the box's lan address by the
        kernel (nftables) and by vecflowd, side by side; 64 B, 1 and 1024 flows."""
        self.lab_up()
        try:
            points = [(60, 1024)] if self.a.quick else [(60, 1), (60, 1024)]
            data = self.e2e(points, "nat", self.a.rounds, self.a.seconds, self.NAT_ROWS)
            self.add_e2e_rows(PART_GROUPS["nat"], points, data,
                              lambda pt: f"64 B, {plural(pt[1], 'flow')}", self.NAT_ROWS,
                              "linux-nat")
        finally:
            self.cleanup()

    JUMBO_ROWS = [
        ("linux", "Linux IP forwarding"),
        ("pipeline", "vecflowd user space: AF_XDP, ACL + route"),
    ]

    def run_jumbo(self):
        """Jumbo frames: every link of the lab at MTU 9000, UDP frames of 1514 and 9014 bytes
        (IP packets of 1500 and 9000) forwarded by the kernel and by vecflowd (a 9014-byte
        frame spans five AF_XDP buffers each way); Gbit/s of Ethernet frames delivered."""
        self.lab_up()
        try:
            for side, dev in (("c", "eth0"), ("a", "wan0"), ("a", "lan0"), ("s", "eth0")):
                r = self.sh(side, "ip", "link", "set", dev, "mtu", "9000")
                if r.returncode != 0:
                    raise RuntimeError(f"MTU 9000 on {dev}: {r.stderr.strip()}")
            points = [(9014, 1024)] if self.a.quick else [(1514, 1024), (9014, 1024)]
            data = self.e2e(points, "jumbo", self.a.rounds, self.a.seconds, self.JUMBO_ROWS)
            group = PART_GROUPS["jumbo"]
            for size, flows in points:
                base = data[("linux", (size, flows))].get("mpps")
                for kind, name in self.JUMBO_ROWS:
                    d = data[(kind, (size, flows))]
                    point = f"{size - 14} B packets, {plural(flows, 'flow')}"
                    if "reason" in d:
                        self.res.add(group, name, point, reason=d["reason"])
                        continue
                    gbps = d["mpps"] * size * 8 / 1000
                    note = (f"{d['mpps']:.3f} Mpps of {size}-byte frames; offered "
                            f"{d['offered_mpps']:.3f} Mpps, delivered "
                            f"{100 * d['received'] / d['sent']:.1f}%")
                    self.res.add(group, name, point, gbps, "Gbit/s",
                                 vs=None if kind == "linux" else "Linux IP forwarding",
                                 ratio=d["mpps"] / base if base and kind != "linux" else None,
                                 memory_kib=d["memory_kib"], note=note)
        finally:
            self.cleanup()

    def run_rules_e2e(self):
        """vecflowd's XDP redirect with 1 .. 100k steering rules in its file: the rate of the
        fast path and vecflowd's memory as the rule set grows. The extra rules have the redirect
        rule's shape (port, source host, protocol, port) and never match the test traffic."""
        group = PART_GROUPS["rules"]
        counts = [1000] if self.a.quick else GROWTH_RULES
        self.lab_up()
        samples, reasons = {}, {}
        try:
            for r in range(self.a.rounds):
                for n in counts:
                    log(f"rules growth: round {r + 1}/{self.a.rounds}: {n} rules")
                    extra = "\n".join(
                        f"    - {{name: b{i}, match: {{port: wan, src: 10.{i >> 16 & 255}."
                        f"{i >> 8 & 255}.{i & 255}/32, proto: udp, dst_port: 7}}, action: drop}}"
                        for i in range(1, n))
                    try:
                        p, why = self.start_forwarder("redirect", extra, timeout=300)
                    except FileNotFoundError as e:
                        p, why = None, f"not measured: {e}"
                    if why:
                        reasons[n] = why
                        continue
                    self.warm()
                    try:
                        s, rcv = self.send_recv(60, 1024, self.a.seconds)
                        samples.setdefault(n, []).append((s, rcv, self.memory(p)))
                    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                        reasons[n] = f"not measured: {e}"
                    self.stop(p)
        finally:
            self.cleanup()
        base = None
        for n in counts:
            ss = samples.get(n)
            if not ss:
                self.res.add(group, "vecflowd XDP redirect rule",
                             plural(n, "rule"), reason=reasons.get(n, "not measured"))
                continue
            sent = sum(x["sent"] for x, _, _ in ss)
            recv = sum(x["received"] for _, x, _ in ss)
            if recv < MIN_DELIVERED * sent:
                self.res.add(group, "vecflowd XDP redirect rule",
                             f"{n} rule{'s' if n > 1 else ''}",
                             reason=f"not measured: the redirect rule did not forward "
                                    f"(received {recv} of {sent} sent)")
                continue
            mpps = statistics.median(x["pps"] for _, x, _ in ss) / 1e6
            if n == counts[0]:
                base = mpps
            self.res.add(group, "vecflowd XDP redirect rule", f"{n} rule{'s' if n > 1 else ''}",
                         mpps, "Mpps", vs="1 rule" if n != counts[0] and base else None,
                         ratio=mpps / base if n != counts[0] and base else None,
                         memory_kib=max((m for _, _, m in ss if m), default=None),
                         note=f"64 B, 1024 flows; delivered {100 * recv / sent:.1f}%; memory: "
                              "vecflowd (BPF maps are kernel memory, not counted)")

    # ---- offload (issue 40) -----------------------------------------------------------

    OFFLOAD_PIPELINES = [
        ("rn", "stateless pipeline (route + neighbour)"),
        ("ct", "stateful pipeline (conntrack, established flows)"),
    ]
    # (row, name, {pipeline: forwarder kind}). In every round each forwarder runs once, in this
    # order (a pipeline's rows, then the other's), for all the points. The redirect rule has no
    # pipeline: its row is in the stateless group, and both groups' offload rows compare with it.
    OFFLOAD_ROWS = [
        ("linux", "Linux IP forwarding", {"rn": "linux", "ct": "linux-ct"}),
        ("flowtable", "nftables flowtable", {"rn": "flowtable-rn", "ct": "flowtable-ct"}),
        ("userspace", "vecflowd user space", {"rn": "userspace-rn", "ct": "userspace-ct"}),
        ("offload", "vecflowd with offload", {"rn": "offload-rn", "ct": "offload-ct"}),
        ("redirect", "vecflowd XDP redirect rule", {"rn": "redirect"}),
    ]
    # What each forwarder runs, in its rows' notes.
    OFFLOAD_DETAIL = {
        "linux": "the kernel forwards (ip_forward), no ruleset, no conntrack",
        "linux-ct": "the kernel forwards through an nftables forward chain: ct state "
                    "established,related accept; ct state new iifname wan0 accept; policy drop",
        "flowtable-rn": "nftables software flowtable on wan0 and lan0, every UDP flow added "
                        "(meta l4proto { tcp, udp } flow add @ft, policy accept)",
        "flowtable-ct": "nftables software flowtable on wan0 and lan0, established flows added "
                        "(ct state established flow add @ft), then the conntrack rules of "
                        "Linux's row",
        "userspace-rn": "vecflowd-offload.yaml: AF_XDP, route + neighbour, offload off",
        "userspace-ct": "vecflowd-offload.yaml: AF_XDP, conntrack + acl (established and "
                        "related pass, new only from wan) + route + neighbour, offload off",
        "offload-rn": "vecflowd-offload.yaml: route + neighbour with `offload: {enabled: "
                      "true}`: XDP forwards the flows the pipeline decided",
        "offload-ct": "vecflowd-offload.yaml: the stateful pipeline with `offload: {enabled: "
                      "true}`",
        "redirect": "vecflowd-redirect.yaml: one steering rule redirects wan0 -> lan0 in XDP, "
                    "frames unmodified (no MAC rewrite, no TTL); no pipeline",
    }
    OFFLOAD_GROUP = "veth offload (issue 40), {}"
    OFFLOAD_RATIO_GROUP = "veth offload: the offload rows' ratios"

    def offload_lab(self, napi_before):
        """The offload part's additions to the lab: the XDP sink on the server, the client's
        nftables sink (the stateful pipeline's primed replies end there instead of in the
        client's stack, which would send ICMP errors back through the forwarder), and wan0's
        NAPI thread (lab_up made wan0 threaded) pinned to CPU 1, the forwarders' CPU (workers:
        [1] in the vecflowd files). napi_before: napi_threads("wan0") before lab_up, so that
        the new thread is this lab's (other labs on the machine have a wan0 too). Returns what
        the rows' notes say about the thread."""
        self.attach_sink()
        self.nft_sink("c")
        new = napi_threads("wan0") - napi_before
        if len(new) != 1:
            return (f"wan0's NAPI thread not pinned ({len(new)} new napi/wan0 threads: another "
                    "lab was made meanwhile), left to the scheduler")
        pid = new.pop()
        os.sched_setaffinity(pid, {1})
        return f"wan0's NAPI thread (pid {pid}) pinned to CPU 1"

    def reply_pcap(self, flows):
        """The replies of the first `flows` flows, a frame each from the server to the client
        (written once per flow count): trafgen writes the flows' frames (the same flows as
        `send`'s, from the client's address), mirror_pcap() turns them around."""
        out = self.out / f"replies-{flows}.pcap"
        if out.exists():
            return out
        fwd = self.out / f"flows-{flows}.pcap"
        if not self.client_ip:
            raise RuntimeError("the client's IPv4 address is unknown (ip addr show dev eth0)")
        r = subprocess.run([self.bin("tools/trafgen/trafgen"), "pcap", "--out", str(fwd),
                            "--flows", str(flows), "--src", self.client_ip,
                            "--dst", "198.51.100.2", "--src-mac", self.lan_mac,
                            "--dst-mac", self.server_mac], capture_output=True, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"trafgen pcap: {r.stderr.strip()[:160]}")
        mirror_pcap(fwd, out)
        fwd.unlink()
        return out

    def prime(self, pipeline, flows):
        """Every flow of a point twice before it is measured (ARP, the forwarder's flow state,
        offload decisions, flowtable entries, which Linux adds from a flow's second frame), at
        OFFLOAD_PRIME_PPS; in the stateful pipeline with a reply per flow from the server
        between the two (trafgen replay), so that every flow is established before a frame is
        measured."""
        self.send(60, flows, OFFLOAD_PRIME_PPS, engine="xdp-live", count=flows)
        if pipeline == "ct":
            r = subprocess.run(self.ns("s", self.bin("tools/trafgen/trafgen"), "replay", "--dev",
                                       "eth0", str(self.reply_pcap(flows))),
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"trafgen replay (replies): {r.stderr.strip()[:160]}")
        self.send(60, flows, OFFLOAD_PRIME_PPS, engine="xdp-live", count=flows)
        self.sink_frames(settle=True)

    ACCOUNTING_KEYS = ("rx_packets", "tx_packets", "kernel_packets", "dropped", "held",
                       "device_dropped", "port_dropped", "xdp")

    def offload_accounting(self, kind):
        """vecflowd's accounting once its counters stop moving (read until two reads agree, for
        SINK_SETTLE_MAX_S at most): ({port: counters}, failures). failures names every port
        where rx != tx + kernel + drops, or where the XDP program's frames do not add up: SEEN
        = PASS + DROPPED + SENT + OFFLOADED + LIFTED."""
        sock = str(self.out / f"{kind}.sock")

        def read():
            return {x["port"]: {k: x.get(k) for k in self.ACCOUNTING_KEYS}
                    for x in self.engine_ctl(sock, "accounting").get("ports", [])}

        acc = read()
        deadline = time.monotonic() + SINK_SETTLE_MAX_S
        while time.monotonic() < deadline:
            time.sleep(SINK_SETTLE_S)
            again = read()
            if again == acc:
                break
            acc = again
        failures = []
        for port, c in acc.items():
            if c["rx_packets"] != c["tx_packets"] + c["kernel_packets"] + c["dropped"]:
                failures.append(f"port {port}: rx {c['rx_packets']} != tx {c['tx_packets']} + "
                                f"kernel {c['kernel_packets']} + drops {c['dropped']} (held "
                                f"{c['held']})")
            x = c["xdp"]
            if x and x["seen"] != (x["pass"] + x["dropped"] + x["sent"] + x["offloaded"]
                                   + x["lifted"]):
                failures.append(f"port {port}: XDP seen {x['seen']} != pass {x['pass']} + "
                                f"dropped {x['dropped']} + sent {x['sent']} + offloaded "
                                f"{x['offloaded']} + lifted {x['lifted']}")
        return acc, failures

    def offload_run(self, kind, pipeline, rnd, points, st):
        """One run of one forwarder in one round: start it, per point prime the flows and
        search the lossless rate (vecflowd: then its exact accounting), stop it (vecflowd: its
        exact final accounting at SIGTERM). Results go to st (see run_offload)."""
        vecflowd = kind == "redirect" or kind in self.OFFLOAD_VECFLOWD

        def fail(why, only=None):
            for pt in (only or points):
                st["reasons"].setdefault((kind, pt), why)
                st["samples"].pop((kind, pt), None)  # a failed point stays failed

        tag = f"-offload-r{rnd + 1}"
        for _ in range(5):
            try:
                p, why = self.start_forwarder(kind, tag=tag)
            except FileNotFoundError as e:
                p, why = None, f"not measured: {e}"
            # The kernel frees the last run's maps, and with its XSKMAP the AF_XDP socket on
            # wan0 queue 0, in deferred work after the process exits (seconds after a run that
            # filled an offload table); a bind before that fails with EBUSY.
            log_path = self.raw / f"vecflowd-{kind}{tag}.log"
            busy = (why and log_path.exists()
                    and "Device or resource busy" in log_path.read_text(errors="replace"))
            if not busy:
                break
            time.sleep(2)
        if why:
            fail(why)
            return
        measured = []
        try:
            for pt in points:
                if (kind, pt) in st["reasons"]:
                    continue
                size, flows = pt
                if p is not None and p.poll() is not None:
                    fail(f"not measured: {kind} exited during the run", [pt])
                    continue
                try:
                    before = self.offload_accounting(kind)[0] if vecflowd else None
                    self.prime(pipeline, flows)
                    log(f"offload: round {rnd + 1}: {kind}: {dict(E2E_SIZES)[size]}, "
                        f"{plural(flows, 'flow')}")
                    found = self.lossless(size, flows, OFFLOAD_LOSSLESS, OFFLOAD_PROBE_S,
                                          OFFLOAD_SEARCH_STEPS, geometric=True,
                                          engine="xdp-live", sink=True)
                    after, failures = (self.offload_accounting(kind) if vecflowd
                                       else (None, []))
                    offload_state = (self.offload_state(kind) if kind in self.OFFLOAD_VECFLOWD
                                     and self.OFFLOAD_VECFLOWD[kind][1] else None)
                except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                    fail(f"not measured: {e}", [pt])
                    continue
                measured.append({"point": list(pt), "found": found, "accounting": after,
                                 "offload": offload_state})
                if failures:
                    fail("not measured: vecflowd's accounting does not add up after the point: "
                         + "; ".join(failures), [pt])
                    continue
                best = max(x["delivered"] for x in found["probes"])
                if best < MIN_DELIVERED:
                    fail(f"not measured: {kind} did not forward (no probe delivered more than "
                         f"{100 * best:.2f}%)", [pt])
                    continue
                st["samples"].setdefault((kind, pt), []).append(
                    {"found": found, "delta": accounting_delta(before, after),
                     "offload": offload_state})
        finally:
            self.stop_forwarder(kind, p)
            (self.raw / f"offload-{kind}-r{rnd + 1}.json").write_text(
                json.dumps({"points": measured}, indent=1) + "\n")
        if vecflowd and p is not None:
            acc, failures = self.exact_accounting(
                p.returncode, Path(p.log_file.name).read_text(errors="replace"))
            if failures:
                fail("not measured: exact accounting failed at SIGTERM: " + "; ".join(failures))
            else:
                st["accounting"].setdefault(kind, []).append(acc)

    def offload_state(self, kind):
        """What `vecflowctl offload` says after an offload row's point (its JSON), or the
        error it gave."""
        try:
            return self.engine_ctl(str(self.out / f"{kind}.sock"), "offload")
        except (RuntimeError, json.JSONDecodeError, subprocess.TimeoutExpired) as e:
            return {"error": str(e)}

    def run_offload(self):
        """The veth forwarding rows of issue 40 (see the header and the README)."""
        started = time.monotonic()
        rounds = 1 if self.a.quick else self.a.rounds
        points = ([(60, 1024)] if self.a.quick
                  else [(size, flows) for size, _ in E2E_SIZES for flows in OFFLOAD_FLOWS])
        runs = [(pl, kinds[pl]) for pl, _ in self.OFFLOAD_PIPELINES
                for _, _, kinds in self.OFFLOAD_ROWS if pl in kinds]
        st = {"samples": {}, "reasons": {}, "accounting": {}}
        napi_before = napi_threads("wan0")
        self.lab_up()
        try:
            napi = self.offload_lab(napi_before)
            # This script stays off CPU 1, the forwarders' CPU.
            affinity = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {0})
            try:
                for rnd in range(rounds):
                    for pl, kind in runs:
                        log(f"offload: round {rnd + 1}/{rounds}: {kind}")
                        with self.bench_lock(f"offload: {kind}") as why:
                            if why:
                                for pt in points:
                                    st["reasons"].setdefault((kind, pt), why)
                                continue
                            self.offload_run(kind, pl, rnd, points, st)
            finally:
                os.sched_setaffinity(0, affinity)
        finally:
            self.cleanup()
        self.offload_rows(st, points, rounds, napi)
        log(f"offload: the part took {time.monotonic() - started:.0f} s")

    @staticmethod
    def accounting_notes(st):
        """Per forwarder kind, the note on its exact final accountings (st["accounting"]: kind
        -> the runs' [(port, rx, tx, kernel, drops, unaccounted)])."""
        notes = {}
        for kind, runs in st["accounting"].items():
            rx = sum(a[1] for run in runs for a in run)
            tx = sum(a[2] for run in runs for a in run)
            kern = sum(a[3] for run in runs for a in run)
            drops = sum(a[4] for run in runs for a in run)
            notes[kind] = (f"vecflowd stopped {len(runs)} time(s) with exit 0 and exact final "
                           f"accounting: rx {rx} = tx {tx} + kernel {kern} + drops {drops}")
        return notes

    def offload_rows(self, st, points, rounds, napi):
        size_name = dict(E2E_SIZES)
        label = lambda pt: f"{size_name[pt[0]]}, {plural(pt[1], 'flow')}"
        # A row's rate is the most its sink counted a second over the search's probes (its
        # throughput), the median of the rounds: the XDP paths lose a few frames at every rate
        # here (a veth's 256-frame input ring overflows whenever its NAPI thread, sharing CPU 1
        # with vecflowd's worker, waits), so a lossless rate alone would leave them without a
        # figure; it is in the note where a probe reached it.
        peak = lambda x: max(p["received_pps"] for p in x["found"]["probes"])
        rates = {}  # (kind, point): Mpps
        for (kind, pt), ss in st["samples"].items():
            rates[(kind, pt)] = statistics.median(peak(x) for x in ss) / 1e6
        acc_note = self.accounting_notes(st)
        setup = (f"trafgen --engine xdp-live on CPU 0, paced; {napi}; receiver: the XDP sink "
                 "on the server (veth's rx_queue_0_xdp_drops)")
        for pl, pl_name in self.OFFLOAD_PIPELINES:
            group = self.OFFLOAD_GROUP.format(pl_name)
            base_kind, base_name = self.OFFLOAD_ROWS[0][2][pl], self.OFFLOAD_ROWS[0][1]
            for pt in points:
                base = rates.get((base_kind, pt))
                for _, name, kinds in self.OFFLOAD_ROWS:
                    kind = kinds.get(pl)
                    if kind is None:
                        continue
                    v = rates.get((kind, pt))
                    if v is None:
                        self.res.add(group, name, label(pt),
                                     reason=st["reasons"].get((kind, pt), "not measured"))
                        continue
                    ss = st["samples"][(kind, pt)]
                    sat = [x["found"]["probes"][0] for x in ss]
                    lossless = [x["found"]["pps"] for x in ss]
                    parts = [self.OFFLOAD_DETAIL[kind],
                             f"the most the sink counted a second over the search's "
                             f"{OFFLOAD_PROBE_S:g} s probes, per round "
                             + " / ".join(f"{peak(x) / 1e6:.3f}" for x in ss) + " Mpps",
                             f"highest offered rate delivering >= {100 * OFFLOAD_LOSSLESS:g}%, "
                             "per round "
                             + " / ".join(f"{v / 1e6:.3f}" if v else "none" for v in lossless)
                             + " Mpps"
                             + (" (the generator's own limit: nothing lost at full rate)"
                                if any(x["found"]["capped"] for x in ss) else ""),
                             "unpaced: offered "
                             f"{statistics.median(x['offered_pps'] for x in sat) / 1e6:.3f}, "
                             f"received {statistics.median(x['received_pps'] for x in sat) / 1e6:.3f}"
                             " Mpps (median)"]
                    d = ss[-1]["delta"]
                    if d:
                        parts.append("XDP over the last round's point: " + ", ".join(
                            f"{port} saw {x['seen']}, offloaded {x['offloaded']}, sent "
                            f"{x['sent']}, lifted {x['lifted']}, passed {x['pass']}"
                            for port, x in d.items() if x["seen"]))
                    off = ss[-1]["offload"]
                    if off is not None and d and not any(x["offloaded"] for x in d.values()):
                        parts.append("nothing was offloaded; vecflowctl offload: "
                                     + json.dumps(off)[:300])
                    if kind in acc_note:
                        parts.append(acc_note[kind])
                    parts.append(setup)
                    self.res.add(group, name, label(pt), v, "Mpps",
                                 vs=base_name if kind != base_kind and base else None,
                                 ratio=v / base if kind != base_kind and base else None,
                                 note="; ".join(parts))
        # The offload rows against the others of the same pipeline, and against the redirect
        # rule (no pipeline: XDP's own ceiling on this path).
        kinds = {row: k for row, _, k in self.OFFLOAD_ROWS}
        names = {row: n for row, n, _ in self.OFFLOAD_ROWS}
        for pl, pl_name in self.OFFLOAD_PIPELINES:
            off = kinds["offload"][pl]
            for other in ("redirect", "userspace", "flowtable"):
                okind = kinds[other].get(pl) or kinds[other]["rn"]
                for pt in points:
                    a, b = rates.get((off, pt)), rates.get((okind, pt))
                    bench = f"{pl_name}: {names['offload']} / {names[other]}"
                    if a is None or b is None:
                        missing = off if a is None else okind
                        self.res.add(self.OFFLOAD_RATIO_GROUP, bench, label(pt),
                                     unit="x", reason=f"{missing}: " + st["reasons"].get(
                                         (missing, pt), "not measured"))
                        continue
                    self.res.add(self.OFFLOAD_RATIO_GROUP, bench, label(pt), a / b, "x",
                                 note=f"{a:.3f} / {b:.3f} Mpps, the rows' rates"
                                 + ("; the redirect rule has no pipeline (frames unmodified)"
                                    if other == "redirect" else ""))

    # ---- latency ----------------------------------------------------------------------

    LAT_PING_GROUP = "latency: ping round trip (56 B, every 2 ms)"
    LAT_GROUP = "latency: one way (trafgen, 1 sender)"
    # (kind, name, ping, one way): the ping rows need a forwarder that answers both ways; the
    # one-way rows are the e2e part's forwarders plus vecflowd with each CPU profile. In every
    # round each forwarder runs once, in this order, for its ping and its one-way points.
    LAT_ROWS = [
        ("linux", "Linux IP forwarding", True, True),
        ("xsk-both", "xsk_fwd both ways, MAC rewrite (raw AF_XDP)", True, False),
        ("redirect", "vecflowd XDP redirect rule", False, True),
        ("xsk", "xsk_fwd one way (raw AF_XDP, e2e rows' mode)", False, True),
        ("pipeline", "vecflowd user space, profile latency", True, True),
        ("pipeline-power", "vecflowd user space, profile power (default)", True, True),
        # Issue 40: a flow's first packets go through user space, the rest through the XDP
        # offload entry (vecflowd-offload.yaml, route + neighbour, profile power).
        ("offload-rn", "vecflowd with offload (route + neighbour, XDP forwards)", True, True),
    ]
    VECFLOWD_KINDS = ("redirect", "pipeline", "pipeline-power", "pipeline-nat", "offload-rn")

    @staticmethod
    def lat_point_name(pt, size_only=False):
        size, flows, load = pt
        head = f"{'64 B' if size == 60 else '1500 B'}, {plural(flows, 'flow')}"
        if size_only:
            return head
        load = (f"{load / 1000:g} kpps" if load >= 1 else f"{100 * load:g}% of lossless")
        return f"{head}, {load}"

    @staticmethod
    def nearest_rank(values, q):
        """The ceil(q * n)-th smallest value (q * n rounded first: 0.99 * 3000 is 2970)."""
        v = sorted(values)
        return v[min(len(v), max(1, math.ceil(round(q * len(v), 6)))) - 1]

    def lat_ping(self, kind, rnd, count):
        """count pings from the client to the server, ping on CPU 0: returns (RTTs in us,
        transmitted, received). Raises RuntimeError when ping cannot run."""
        # Not measured: the first packets of a run meet cold caches and, in the Linux row,
        # the box's own ARP.
        self.sh("c", "ping", "-q", "-c", "20", "-i", "0.002", "-w", "3", "198.51.100.2")
        deadline = int(count * 0.002) + 5
        r = subprocess.run(self.ns("c", "taskset", "-c", "0", "ping", "-i", "0.002", "-s", "56",
                                   "-c", str(count), "-w", str(deadline), "198.51.100.2"),
                           capture_output=True, text=True, timeout=deadline + 15)
        (self.raw / f"latency-ping-{kind}-r{rnd + 1}.txt").write_text(r.stdout + r.stderr)
        m = re.search(r"(\d+) packets transmitted, (\d+) received", r.stdout)
        if not m:
            raise RuntimeError(f"ping printed no summary ({(r.stderr or r.stdout).strip()[:120]})")
        rtts = {}
        for x in re.finditer(r"icmp_seq=(\d+) .*?time=([\d.]+) ms", r.stdout):
            rtts.setdefault(int(x.group(1)), float(x.group(2)) * 1000)  # duplicates once
        return list(rtts.values()), int(m.group(1)), int(m.group(2))

    def lossless(self, size, flows, share, probe_s, steps, geometric=False, **send):
        """The highest offered rate at (size, flows) at which the receiver counted at least
        `share` of the frames sent in a probe of probe_s seconds: the first probe unpaced (the
        generator's own limit; when it passes, nothing higher can be offered here), then 0.95x
        the rate delivered at that saturation, then bisection between the highest rate that
        passed and the lowest that did not, `steps` paced probes in all. geometric: bisect at
        the geometric mean once a rate has passed (halving until then), for forwarders whose
        rate at saturation is far below what they forward without loss (an overloaded path
        that collapses), where the arithmetic mean would spend every step near the top. send:
        send_recv's keywords. Returns {"pps", "capped", "probes"}; pps is None when no probe
        passed."""
        probes = []

        def probe(rate):
            s, r = self.send_recv(size, flows, probe_s, rate=rate, **send)
            ok = s["sent"] > 0 and r["received"] >= share * s["sent"]
            probes.append({"requested_pps": rate, "offered_pps": s["pps"],
                           "received_pps": r["pps"],
                           # xdp-live: frames the forwarder's input veth refused (ring full)
                           **({"input_dropped": s["dev_tx_dropped"]}
                              if "dev_tx_dropped" in s else {}),
                           "delivered": r["received"] / s["sent"] if s["sent"] else 0,
                           "ok": ok})
            return s, r, ok

        s, r, ok = probe(None)
        if ok:  # the generator's own limit: nothing above it can be offered here
            return {"pps": s["pps"], "capped": True, "probes": probes}
        best, lo, hi = None, 0.0, s["pps"]
        rate = min(hi, r["pps"]) * 0.95
        for _ in range(steps):
            s, r, ok = probe(rate)
            if ok:
                lo, best = rate, max(best or 0, s["pps"])
            else:
                hi = rate
            rate = math.sqrt(lo * hi) if geometric and lo > 0 else (lo + hi) / 2
        return {"pps": best, "capped": False, "probes": probes}

    def lat_run(self, kind, rnd, points, pings, st):
        """One run of one forwarder in one round: start it, its ping, its lossless searches
        (first round only), its one-way points, stop it and, for vecflowd, check its exact
        accounting. Results go to st (see run_latency)."""
        _, name, do_ping, do_oneway = next(r for r in self.LAT_ROWS if r[0] == kind)
        items = ([("ping",)] if do_ping else []) + ([("oneway", pt) for pt in points]
                                                  if do_oneway else [])

        def fail(why, only=None):
            for it in (only or items):
                st["reasons"].setdefault((kind, it), why)
                st["samples"].pop((kind, it), None)  # a failed item stays failed

        try:
            p, why = self.start_forwarder(kind, tag=f"-latency-r{rnd + 1}")
        except FileNotFoundError as e:
            p, why = None, f"not measured: {e}"
        if why:
            fail(why)
            return
        measured = []
        try:
            if not self.a.quick:  # ARP, page faults, caches; not measured
                try:
                    self.send_recv(60, 1, 0.2, rate=20000, idle_exit_ms=250, pin_recv=True)
                except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError):
                    pass
            if do_ping and (kind, ("ping",)) not in st["reasons"]:
                log(f"latency: round {rnd + 1}: {name}: {pings} pings")
                try:
                    rtts, sent, got = self.lat_ping(kind, rnd, pings)
                    if not rtts:
                        raise RuntimeError(f"no ping answered ({got} of {sent})")
                    st["samples"].setdefault((kind, ("ping",)), []).append(
                        {"rtts": rtts, "sent": sent, "received": got})
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    fail(f"not measured: {e}", [("ping",)])
            for pt in points if do_oneway else []:
                it = ("oneway", pt)
                if (kind, it) in st["reasons"]:
                    continue
                size, flows, load = pt
                if p is not None and p.poll() is not None:
                    fail(f"not measured: {name} exited during the run", [it])
                    continue
                try:
                    if load < 1:
                        key = (kind, size, flows)
                        if key not in st["lossless"]:
                            log(f"latency: {name}: lossless rate at "
                                f"{self.lat_point_name(pt, True)}")
                            st["lossless"][key] = self.lossless(
                                size, flows, LAT_LOSSLESS, LAT_PROBE_S, LAT_SEARCH_STEPS,
                                idle_exit_ms=250, pin_recv=True, burst_us=0)
                        found = st["lossless"][key]
                        if found["pps"] is None:
                            fail("not measured: no lossless rate found (every probe lost more "
                                 f"than {100 * (1 - LAT_LOSSLESS):g}% of its frames)", [it])
                            continue
                        rate = load * found["pps"]
                    else:
                        rate = load
                    seconds = (0.5 if self.a.quick
                               else min(LAT_MAX_S, max(LAT_MIN_S, LAT_FRAMES / rate)))
                    log(f"latency: round {rnd + 1}: {name}: {self.lat_point_name(pt)}: "
                        f"{rate / 1000:.1f} kpps for {seconds:g} s")
                    s, r = self.send_recv(size, flows, seconds, rate=rate, idle_exit_ms=250,
                                          pin_recv=True, burst_us=0)
                except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                    fail(f"not measured: {e}", [it])
                    continue
                lat = r.get("latency") or {}
                if r["received"] < MIN_DELIVERED * s["sent"] or not lat.get("count"):
                    fail(f"not measured: {name} did not forward (received {r['received']} of "
                         f"{s['sent']} sent)", [it])
                    continue
                st["samples"].setdefault((kind, it), []).append(
                    {"rate": rate, "send": s, "recv": r})
                measured.append({"point": list(pt), "rate": rate, "send": s, "recv": r})
        finally:
            self.stop_forwarder(kind, p)
            # Every measurement of the run as trafgen reported it, and the lossless searches.
            (self.raw / f"latency-{kind}-r{rnd + 1}.json").write_text(json.dumps(
                {"points": measured, "lossless": [
                    {"size": sz, "flows": fl, **v} for (k, sz, fl), v in st["lossless"].items()
                    if k == kind and rnd == 0]}, indent=1) + "\n")
        if kind in self.VECFLOWD_KINDS and p is not None:
            acc, failures = self.exact_accounting(p.returncode,
                                                  Path(p.log_file.name).read_text(
                                                      errors="replace"))
            if failures:
                fail("not measured: exact accounting failed at SIGTERM: " + "; ".join(failures))
            else:
                st["accounting"].setdefault(kind, []).append(acc)

    def run_latency(self):
        """Ping round trips and one-way latency through each forwarder (see the header)."""
        started = time.monotonic()
        quick = self.a.quick
        rounds = 1 if quick else self.a.rounds
        pings = (LAT_PINGS_QUICK if quick else LAT_PINGS) // rounds
        points = LAT_QUICK_POINTS if quick else LAT_POINTS
        st = {"samples": {}, "reasons": {}, "lossless": {}, "accounting": {}}
        self.lab_up()
        try:
            # The kernel's receive side of wan0 back where veth runs it by default, and a NIC's
            # would run after its interrupt: in the sender's softirq (CPU 0, the generator's),
            # for every row. The e2e part moves it to a kthread of its own so that generator
            # and forwarder do not share a CPU; a kthread is a task the scheduler must wake (on
            # CPU 1, the ping's p50 through Linux 36 us instead of 10-12) and time-slice (left
            # to the scheduler it lands beside a busy-polling forwarder on CPU 1 whenever CPU 0
            # is busy: vecflowd's p99 up to 2.2 ms at 32 kpps, 2.8-3.8 ms at 160 kpps), neither
            # of which a forwarder's own latency includes (README, "Latency").
            self.sh("a", "sh", "-c", "echo 0 > /sys/class/net/wan0/threaded")
            # xsk_fwd answers no ARP: the hosts get their gateway's MAC for good, in every row
            # alike (the others would have resolved it themselves).
            lan_mac = self.sh("a", "cat", "/sys/class/net/lan0/address").stdout.strip()
            for side, ip, mac in (("c", "192.0.2.1", self.wan_mac),
                                  ("s", "198.51.100.1", lan_mac)):
                r = self.sh(side, "ip", "neigh", "replace", ip, "lladdr", mac, "dev", "eth0",
                            "nud", "permanent")
                if r.returncode != 0:
                    why = f"not measured: ip neigh replace {ip}: {r.stderr.strip()[:120]}"
                    self.res.add(self.LAT_PING_GROUP, "all", "all", reason=why)
                    self.res.add(self.LAT_GROUP, "all", "all", reason=why)
                    return
            # This script stays off CPU 1, the forwarders' data CPU.
            affinity = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {0})
            try:
                for rnd in range(rounds):
                    for kind, name, *_ in self.LAT_ROWS:
                        log(f"latency: round {rnd + 1}/{rounds}: {name}")
                        with self.bench_lock(f"latency: {name}") as why:
                            if why:
                                for it in [("ping",)] + [("oneway", pt) for pt in points]:
                                    st["reasons"].setdefault((kind, it), why)
                                continue
                            self.lat_run(kind, rnd, points, pings, st)
            finally:
                os.sched_setaffinity(0, affinity)
        finally:
            self.cleanup()
        self.latency = st
        self.lat_rows(st, points, rounds)
        log(f"latency: the part took {time.monotonic() - started:.0f} s")

    def lat_rows(self, st, points, rounds):
        names = {k: n for k, n, *_ in self.LAT_ROWS}
        acc_note = self.accounting_notes(st)

        # Ping: p50 and p99 the medians of the rounds' (a round that another process's work
        # on the machine spoiled moves a pooled p99, not the median), max that of all pings.
        ping = {}
        for kind, _, do_ping, _ in self.LAT_ROWS:
            ss = st["samples"].get((kind, ("ping",)))
            if do_ping and ss:
                rtts = [x for s in ss for x in s["rtts"]]
                ping[kind] = {"p50": statistics.median(self.nearest_rank(s["rtts"], 0.5)
                                                       for s in ss),
                              "p99": statistics.median(self.nearest_rank(s["rtts"], 0.99)
                                                       for s in ss),
                              "max": max(rtts),
                              "sent": sum(s["sent"] for s in ss),
                              "received": sum(s["received"] for s in ss),
                              "round_p50": [self.nearest_rank(s["rtts"], 0.5) for s in ss],
                              "round_p99": [self.nearest_rank(s["rtts"], 0.99) for s in ss]}
        for kind, name, do_ping, _ in self.LAT_ROWS:
            if not do_ping:
                continue
            d = ping.get(kind)
            if d is None:
                self.res.add(self.LAT_PING_GROUP, name, "RTT",
                             reason=st["reasons"].get((kind, ("ping",)), "not measured"))
                continue
            base, floor = ping.get("linux"), ping.get("xsk-both")
            for q in ("p50", "p99", "max"):
                parts = [f"{d['received']} of {d['sent']} pings answered over {rounds} "
                         "interleaved round(s): p50 and p99 the median of the rounds'"]
                if q != "max":
                    parts.append(f"per round {' / '.join(f'{x:.0f}' for x in d['round_' + q])} us")
                if floor and kind != "xsk-both":
                    parts.append(f"{d[q] - floor[q]:+.0f} us vs xsk_fwd")
                if kind in acc_note:
                    parts.append(acc_note[kind])
                self.res.add(self.LAT_PING_GROUP, name, f"RTT {q}", d[q], "us",
                             vs=names["linux"] if base and kind != "linux" else None,
                             ratio=d[q] / base[q] if base and kind != "linux" else None,
                             note="; ".join(parts),
                             latency_us={k: d[k] for k in ("p50", "p99", "max")})

        # One way: per point the medians over rounds of each quantile, the max of all rounds.
        oneway = {}
        for kind, _, _, do_oneway in self.LAT_ROWS:
            for pt in points if do_oneway else []:
                ss = st["samples"].get((kind, ("oneway", pt)))
                if not ss:
                    continue
                med = lambda key: statistics.median(x["recv"]["latency"][key] for x in ss) / 1e3
                oneway[(kind, pt)] = {
                    "p50": med("p50_ns"), "p99": med("p99_ns"), "p999": med("p999_ns"),
                    "max": max(x["recv"]["latency"]["max_ns"] for x in ss) / 1e3,
                    "frames": sum(x["recv"]["latency"]["count"] for x in ss),
                    "behind": sum(x["recv"]["latency"].get("clock_behind", 0) for x in ss),
                    "offered_kpps": statistics.median(x["send"]["pps"] for x in ss) / 1e3,
                    "requested_kpps": ss[0]["rate"] / 1e3,
                    "sent": sum(x["send"]["sent"] for x in ss),
                    "received": sum(x["recv"]["received"] for x in ss),
                    "rounds": len(ss)}
        self.lat_oneway = oneway
        for kind, name, _, do_oneway in self.LAT_ROWS:
            if not do_oneway:
                continue
            for size, flows in dict.fromkeys((sz, fl) for sz, fl, ld in points if ld < 1):
                found = st["lossless"].get((kind, size, flows))
                label = f"{self.lat_point_name((size, flows, 0), True)}, lossless rate"
                if not found or found["pps"] is None:
                    # The search did not run (the forwarder did not start, ...) or found none:
                    # the reason its points carry.
                    why = next((st["reasons"][(kind, ("oneway", pt))] for pt in points
                                if pt[:2] == (size, flows)
                                and (kind, ("oneway", pt)) in st["reasons"]), "not measured")
                    self.res.add(self.LAT_GROUP, name, label, reason=why)
                    continue
                probes = ", ".join(f"{x['offered_pps'] / 1e3:.0f} kpps "
                                   f"{100 * x['delivered']:.2f}%" for x in found["probes"])
                self.res.add(self.LAT_GROUP, name, label, found["pps"] / 1e6, "Mpps",
                             note=("the generator's own limit (nothing lost at full rate); "
                                   if found["capped"] else "") +
                             f"highest offered rate delivering >= {100 * LAT_LOSSLESS:g}% in "
                             f"a {LAT_PROBE_S:g} s probe; probes (offered, delivered): {probes}")
            for pt in points:
                if not do_oneway:
                    break
                d = oneway.get((kind, pt))
                if d is None:
                    self.res.add(self.LAT_GROUP, name, self.lat_point_name(pt),
                                 reason=st["reasons"].get((kind, ("oneway", pt)), "not measured"))
                    continue
                base, floor = oneway.get(("linux", pt)), oneway.get(("xsk", pt))
                parts = [f"p99 {d['p99']:.1f}, p99.9 {d['p999']:.1f}, max {d['max']:.1f} us",
                         f"offered {d['offered_kpps']:.1f} kpps (asked "
                         f"{d['requested_kpps']:.1f}), delivered "
                         f"{100 * d['received'] / d['sent']:.2f}%",
                         f"{d['frames']} frames over {d['rounds']} round(s): quantiles the "
                         "median of the rounds', max of all"]
                if base and kind != "linux":
                    parts.append(f"p99 {d['p99'] / base['p99']:.2f}x Linux")
                if floor and kind in ("pipeline", "pipeline-power"):
                    parts.append(f"p50 {d['p50'] - floor['p50']:+.1f} us, p99 "
                                 f"{d['p99'] - floor['p99']:+.1f} us vs xsk_fwd one way")
                if d["behind"]:
                    parts.append(f"{d['behind']} frames stamped after their receive "
                                 "timestamp (not counted)")
                if kind in acc_note:
                    parts.append(acc_note[kind])
                self.res.add(self.LAT_GROUP, name, self.lat_point_name(pt), d["p50"], "us",
                             vs=names["linux"] if base and kind != "linux" else None,
                             ratio=d["p50"] / base["p50"] if base and kind != "linux" else None,
                             note="; ".join(parts),
                             latency_us={k: d[k] for k in ("p50", "p99", "p999", "max")}
                             | {"offered_kpps": d["offered_kpps"]})

    # ---- engine per core ----------------------------------------------------------------

    # (key, name, kind, detail): testpmd's forwarding modes, DPDK's router samples and
    # vecflowd's pipelines x scheduler backends; a vecflowd detail is (pipeline, backend[,
    # scheduler.path]). With one worker lcore the default path (auto) runs the pipeline
    # without the scheduler, so the event_dsw rows ask for the scheduled path: they measure
    # the backend. Ratios are to testpmd io of the same flow count in this run. l3fwd-graph and l3fwd eventdev are vecflowd's own design class (a
    # graph of nodes passing vectors; an event scheduler between rx, worker and tx).
    # The rows between VLAN ports of p0: the tags of the frames in, the ports (the file's
    # `vlans` field) and the port the route leaves by.
    ENGINE_VLANS = {
        "rn-vlan": ([(0x8100, 100)],
                    "\n  - {name: v100, type: vlan, parent: p0, vlan: 100}"
                    "\n  - {name: v200, type: vlan, parent: p0, vlan: 200}", "v200"),
        "rn-qinq": ([(0x88a8, 300), (0x8100, 10)],
                    "\n  - {name: s300, type: vlan, parent: p0, vlan: 300, proto: 802.1ad}"
                    "\n  - {name: c10, type: vlan, parent: s300, vlan: 10}"
                    "\n  - {name: c11, type: vlan, parent: s300, vlan: 11}", "c11"),
    }

    ENGINE_ROWS = [
        ("io", "testpmd io", "testpmd", "io"),
        ("macswap", "testpmd macswap", "testpmd", "macswap"),
        ("l3fwd", "DPDK l3fwd (LPM)", "l3fwd", None),
        ("l3fwd-graph", "DPDK l3fwd-graph (rte_graph, LPM)", "l3fwd-graph", None),
        ("l3fwd-eventdev", "DPDK l3fwd eventdev (event_dsw, atomic, LPM)", "l3fwd-eventdev",
         None),
        ("floor-builtin", "vecflowd floor: one dscp stage, no route (rx rate), builtin",
         "vecflowd", ("floor", "builtin")),
        ("rn-builtin", "vecflowd route+neighbour, builtin", "vecflowd", ("rn", "builtin")),
        # The same between two VLAN sub-interfaces of the port: frames tagged 100 in, tagged
        # 200 out (the tag removed in the rx burst, put back on transmit): rn-vlan / rn-builtin
        # is what a tagged frame costs.
        ("rn-vlan", "vecflowd route+neighbour, VLAN 100 to VLAN 200, builtin", "vecflowd",
         ("rn-vlan", "builtin")),
        # The same between two QinQ customer VLANs of one service VLAN: frames tagged 802.1ad
        # 300 and 802.1Q 10 in, 300 and 11 out (both tags removed in the rx burst, both put back
        # by the neighbour stage): rn-qinq / rn-vlan is what the second tag costs.
        ("rn-qinq", "vecflowd route+neighbour, QinQ 300/10 to 300/11, builtin", "vecflowd",
         ("rn-qinq", "builtin")),
        # The same with the port in a VRF of its own and the route in that VRF's table: each
        # packet's VRF is read from its port and the lookup is in that VRF's FIB. rn-vrf /
        # rn-builtin is what a VRF costs.
        ("rn-vrf", "vecflowd route+neighbour, port and route in a VRF, builtin", "vecflowd",
         ("rn-vrf", "builtin")),
        # The same pipeline made to take the scheduler hop its one worker does not need
        # (scheduler.path: scheduled): rn-builtin / rn-sched is what the direct path saves.
        ("rn-sched", "vecflowd route+neighbour, builtin, scheduled", "vecflowd",
         ("rn", "builtin", "scheduled")),
        ("rn-dsw", "vecflowd route+neighbour, event_dsw", "vecflowd",
         ("rn", "eventdev", "scheduled")),
        ("arn-builtin", "vecflowd acl+route+neighbour, builtin", "vecflowd", ("arn", "builtin")),
        ("arn-dsw", "vecflowd acl+route+neighbour, event_dsw", "vecflowd",
         ("arn", "eventdev", "scheduled")),
        ("carn-builtin", "vecflowd conntrack+acl+route+neighbour, builtin", "vecflowd",
         ("carn", "builtin")),
        ("ncarn-builtin", "vecflowd conntrack+nat+acl+route+neighbour, builtin", "vecflowd",
         ("ncarn", "builtin")),
    ]
    # Pipeline (a), and the end of every other: the route covers the frames' destination and
    # its next hop is a static neighbour on the same port, so every packet is forwarded.
    ENGINE_ROUTE = """  - stage: route
    $route_sched
    routes:
      - {prefix: 198.51.100.0/24, port: p0}
  - stage: neighbour
    fuse: true
    from_kernel: false
    unresolved: drop
    static:
      - {ip: 198.51.100.2, mac: "02:00:00:00:00:02", port: p0}"""
    # The floor under every pipeline: the receive classification, the rx adapter's vectors,
    # the scheduler, the worker's run and the accounting carry each packet through one stage
    # that rewrites one header field (the DSCP, with the checksum); with no route every packet
    # is dropped at the end (no_route) and freed in bulk, so its rate is what was received.
    # What a pipeline costs beyond it is its stages' own work plus the transmit.
    ENGINE_FLOOR = """  - stage: dscp
    sched: atomic
    dscp: 46"""
    # The ACL of pipeline (b): a handful of rules the test traffic (UDP to 198.51.100.2:9)
    # never matches, default permit; route and neighbour are fused with it (one atomic queue,
    # one scheduler pass, as pipeline (a) has), so (b) - (a) is the ACL stage's cost.
    ENGINE_ACL = """  - stage: acl
    sched: atomic
    default: permit
    rules:
      - {name: no-telnet, action: deny, proto: tcp, dst_port: 23}
      - {name: no-smb, action: deny, proto: tcp, dst_port: 445}
      - {name: no-dns-in, action: deny, proto: udp, src: 203.0.113.0/24, dst_port: 53}
      - {name: no-bogons, action: deny, src: 10.255.0.0/16}
      - {name: no-icmp, action: deny, proto: icmp}"""
    # Pipeline (c): a stateful firewall in front of route and neighbour, all on one atomic
    # queue. Every flow of the file gets a session (the table holds the largest flow count);
    # the replay never answers, so each packet is its flow's originator again: marked new,
    # permitted by the in_port rule after the reply rule was tried. (c) - (b) is conntrack's
    # cost plus what the two ct rules add to the ACL.
    ENGINE_CT = """  - stage: conntrack
    sched: atomic
    max_sessions: 1100000
  - stage: acl
    fuse: true
    default: deny
    rules:
      - {name: replies, action: permit, ct: [established, related]}
      - {name: from-p0, action: permit, ct: new, in_port: p0}"""
    # Pipeline (d): (c) with source NAT on every flow. trafgen's flows vary the source port
    # (60000 of them) then the source address (192.0.2.2, .3 ... .19 for 1M flows): one rule
    # per source address, each to a pool address of its own, so every flow gets a port.
    # (d) - (c) is the translation's cost (and the receive-side hash rewrite's).
    ENGINE_NAT = "\n    nat:\n      snat:\n" + "".join(
        f"        - {{in_port: p0, src: 192.0.2.{2 + i}/32, to: 203.0.113.{1 + i}, "
        f"ports: 1024-65535}}\n" for i in range(18)).rstrip("\n")
    ENGINE_GROUP = "engine per core (net_pcap replay, 1 lcore, 64 B)"
    ENGINE_QUICK_ROWS = ("io", "l3fwd-graph", "l3fwd-eventdev", "floor-builtin", "rn-builtin",
                         "rn-sched", "rn-dsw", "ncarn-builtin")
    # Key suffix of a vecflowd row's twin run with --baseline-build's vecflowd.
    BASELINE = "@baseline"

    def engine_rows(self):
        """ENGINE_ROWS as --engine-rows selects them (testpmd io always: every ratio is to
        it), each vecflowd row followed by its baseline twin with --baseline-build."""
        wanted = set(self.a.engine_rows.split(",")) if self.a.engine_rows else None
        rows = []
        for key, name, kind, detail in self.ENGINE_ROWS:
            if wanted is not None and key not in wanted and key != "io":
                continue
            rows.append((key, name, kind, detail))
            if kind == "vecflowd" and self.a.baseline_build:
                rows.append((key + self.BASELINE, f"{name} (baseline build)", kind, detail))
        return rows

    @contextlib.contextmanager
    def bench_lock(self, what):
        """Holds the machine's measurement lock (BENCH_LOCK) for one timed process."""
        if not BENCH_LOCK:
            yield None
            return
        fd = os.open(BENCH_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log(f"{what}: waiting for {BENCH_LOCK} (another measurement runs)")
                deadline = time.monotonic() + BENCH_LOCK_WAIT_S
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            yield f"not measured: {BENCH_LOCK} stayed taken for " \
                                  f"{BENCH_LOCK_WAIT_S} s (another measurement on this machine)"
                            return
                        time.sleep(0.2)
            yield None
        finally:
            os.close(fd)  # releases the lock

    @staticmethod
    def engine_pool(flows):
        return flows + ENGINE_POOL_SPARE

    @staticmethod
    def remove_runtime_dir(prefix):
        """EAL's runtime directory of a prefix, which testpmd (and a vecflowd that crashed)
        leave, and the prefix's hugepage files: a process that exits with pages still
        allocated (l3fwd never frees its pool) or is killed leaves them taken."""
        shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)
        for line in Path("/proc/mounts").read_text().splitlines():
            f = line.split()
            if len(f) > 2 and f[2] == "hugetlbfs":
                for page in Path(f[1]).glob(f"{prefix}map_*"):
                    page.unlink(missing_ok=True)

    def engine_testpmd(self, mode, flows, pcap, prefix, warm, seconds):
        """One testpmd run. Returns ({mpps, ...}, None) or (None, reason). The rate is testpmd's
        own Tx-pps (TSC-timed, 1 s periods), averaged over the periods after the warm-up."""
        exe = shutil.which("dpdk-testpmd")
        if not exe:
            return None, "not measured: dpdk-testpmd is not installed (Debian package dpdk)"
        pool = self.engine_pool(flows)
        argv = ["stdbuf", "-oL", exe, "-l", "0,1", "--no-pci", "--file-prefix", prefix,
                "--vdev", f"net_pcap0,rx_pcap={pcap},infinite_rx=1"]
        if not self.a.hugepages:
            argv += ["--no-huge", "-m", str(pool * 2560 // (1 << 20) + 256)]
        argv += ["--", "--nb-cores=1", "--stats-period", "1", f"--forward-mode={mode}",
                 f"--total-num-mbufs={pool}"]
        logp = self.raw / f"engine-testpmd-{mode}-{flows}.log"
        skip = 1 + int(round(warm))  # the first period is testpmd's start, then the warm-up
        want = skip + max(1, int(round(seconds)))
        with self.bench_lock(f"engine: testpmd {mode}, {flows} flows") as why:
            if why:
                return None, why
            log(f"engine: {' '.join(argv)}")
            p = subprocess.Popen(argv, stdout=open(logp, "w"), stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, cwd=ROOT)
            self.children.append(p)
            deadline = time.monotonic() + want + 90  # 1M frames: a large pool to fill first
            try:
                while time.monotonic() < deadline and p.poll() is None:
                    if logp.read_text(errors="replace").count("Tx-pps") >= want:
                        break
                    time.sleep(0.1)
            finally:
                if p.poll() is None:
                    p.send_signal(signal.SIGINT)  # testpmd stops its ports and exits
                    try:
                        p.wait(20)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
                self.children.remove(p)
                self.remove_runtime_dir(prefix)
        text = logp.read_text(errors="replace")
        tx = [int(x) for x in re.findall(r"Tx-pps:\s+(\d+)", text)]
        if len(tx) < want:
            err = [l.strip() for l in text.splitlines()
                   if re.search(r"error|fail|cause|not enough", l, re.I)]
            return None, (f"not measured: testpmd {mode} gave {len(tx)} of {want} statistics "
                          "periods" + (f" ({err[0][:150]})" if err else
                                       f" (exit {p.returncode})"))
        window = tx[skip:want]
        if not any(window):
            return None, (f"not measured: the port received nothing (net_pcap infinite_rx keeps "
                          f"the file's {flows} frames in the pool of {pool} mbufs: a pool "
                          "without room beyond them leaves rx empty)")
        return {"mpps": statistics.mean(window) / 1e6, "periods": len(window)}, None

    # DPDK's l3fwd, the router sample each DPDK release is measured with, in LPM mode: per
    # packet what pipeline (a) does at its core (longest-prefix lookup, the RFC 1812 header
    # checks, TTL and checksum update, MAC rewrite), with no flow hash and no scheduler. It
    # tells what a router's own work leaves of testpmd io's rate on this port and lcore. Built
    # from the source Debian ships (package dpdk-doc) with two edits, each checked to apply:
    # l3fwd asks every port for Rx checksum offload, which no vdev offers (it would not start),
    # and sizes its pool at 8192 mbufs at least, where net_pcap's replay keeps every frame of
    # the file in the pool (the pool here is testpmd's: frames + ENGINE_POOL_SPARE).
    L3FWD_SRC = Path("/usr/share/dpdk/examples")
    L3FWD_EDITS = [
        (".offloads = RTE_ETH_RX_OFFLOAD_CHECKSUM,", ".offloads = 0,"),
        ("(unsigned)8192)",
         '(unsigned)(getenv("VF_MBUFS") ? atoi(getenv("VF_MBUFS")) : 8192))'),
    ]
    # The two samples of vecflowd's own class, each patched by a file of its own under
    # tools/bench/peers/ (every hunk says why; README: the engine part). l3fwd-graph: rte_graph's
    # nodes pass vectors of up to 256 packets (ethdev_rx -> pkt_cls -> ip4_lookup -> ip4_rewrite
    # -> ethdev_tx), the route table hard-coded in the sample. l3fwd in eventdev mode: the rx
    # adapter, an atomic event queue, the worker (LPM) and the tx adapter, one packet per event.
    PEERS = HERE / "peers"
    # kind: (build directory under BUILD_DIR, the example, the directories copied from
    # L3FWD_SRC, the patch under PEERS or None, string edits of the example's main.c)
    EXAMPLES = {
        "l3fwd": ("l3fwd-ref", "l3fwd", ("l3fwd", "common"), None, L3FWD_EDITS),
        "l3fwd-graph": ("l3fwd-graph-ref", "l3fwd-graph", ("l3fwd-graph",),
                        "l3fwd-graph.patch", []),
        "l3fwd-eventdev": ("l3fwd-eventdev-ref", "l3fwd", ("l3fwd", "common"),
                           "l3fwd-eventdev.patch", L3FWD_EDITS),
    }

    def example_binary(self, kind):
        """Builds a DPDK example (EXAMPLES[kind]) once per run under BUILD_DIR. Returns (path,
        None) or (None, reason)."""
        built = self.__dict__.setdefault("examples", {})
        if kind not in built:
            built[kind] = self.build_example(*self.EXAMPLES[kind])
        return built[kind]

    def build_example(self, dirname, app, parts, patch, edits):
        main = self.L3FWD_SRC / app / "main.c"
        if not main.exists():
            return None, (f"not measured: DPDK's {app} source is not installed (Debian package "
                          f"dpdk-doc, {main.parent})")
        dst = self.build / dirname
        shutil.rmtree(dst, ignore_errors=True)
        for part in parts:
            shutil.copytree(self.L3FWD_SRC / part, dst / part)
        out = self.raw / f"{dirname}-build.txt"
        if patch:
            try:
                r = subprocess.run(["patch", "-p1", "--batch", "--forward",
                                    "--no-backup-if-mismatch", "-d", str(dst),
                                    "-i", str(self.PEERS / patch)],
                                   capture_output=True, text=True)
            except FileNotFoundError:
                return None, f"not measured: patch(1) is not installed (for peers/{patch})"
            out.write_text(r.stdout + r.stderr)
            if r.returncode != 0:
                err = [l for l in (r.stdout + r.stderr).splitlines()
                       if "FAILED" in l or "malformed" in l or "can't find" in l]
                return None, (f"not measured: tools/bench/peers/{patch} does not apply to the "
                              f"installed {app} source"
                              + (f" ({err[0].strip()[:120]})" if err else ""))
        if edits:
            text = (dst / app / "main.c").read_text()
            for old, new in edits:
                if text.count(old) != 1:
                    return None, (f"not measured: {app}'s main.c no longer has '{old}' once "
                                  "(the suite's edits need updating)")
                text = text.replace(old, new)
            (dst / app / "main.c").write_text(text)
        r = subprocess.run(["make", "-C", str(dst / app), "-j2"], capture_output=True, text=True)
        with open(out, "a") as f:
            f.write(r.stdout + r.stderr)
        exe = dst / app / "build" / app
        if r.returncode != 0 or not exe.exists():
            err = [l for l in (r.stderr or r.stdout).splitlines() if "error" in l]
            return None, (f"not measured: {app} does not build: "
                          + (err[0][:150] if err else f"make exit {r.returncode}"))
        return str(exe), None

    @staticmethod
    def telemetry(path, cmd):
        """One request to a DPDK process's telemetry socket (v2: JSON over SEQPACKET)."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.settimeout(5)
            s.connect(path)
            s.recv(4096)  # the greeting: version, pid, max output length
            s.send(cmd.encode())
            return json.loads(s.recv(1 << 16))
        finally:
            s.close()

    def port_stats(self, tele):
        """Port 0's ethdev counters through telemetry, time-stamped at the middle of the call."""
        t0 = time.monotonic()
        st = self.telemetry(tele, "/ethdev/stats,0")["/ethdev/stats"]
        return (t0 + time.monotonic()) / 2, st

    def l3fwd_rules(self):
        """l3fwd's route files: the frames' destination out of port 0, the port they came in
        on (the IPv6 file only because l3fwd wants one)."""
        rules = self.raw / "l3fwd-routes"
        (rules.with_suffix(".v4")).write_text("R198.51.100.0/24 0\n")
        (rules.with_suffix(".v6")).write_text("R2001:db8::/32 0\n")
        return [f"--rule_ipv4={rules.with_suffix('.v4')}",
                f"--rule_ipv6={rules.with_suffix('.v6')}"]

    def eal_memory(self, flows):
        """EAL's memory options of a DPDK sample: the hugepages run.sh reserved, or enough
        ordinary memory for the pool."""
        if self.a.hugepages:
            return []
        # + 512 MB: l3fwd's LPM tables (IPv4 64 MB of tbl24, IPv6) and the event device's rings
        return ["--no-huge", "-m", str(self.engine_pool(flows) * 2560 // (1 << 20) + 512)]

    def engine_peer(self, name, flows, argv, logp, marker, prefix, warm, seconds):
        """One run of a DPDK sample that prints no rate of its own: started under the
        measurement lock with VF_MBUFS (its pool, patched in), warmed up, port 0's opackets
        read through DPDK telemetry at both ends of the timed window, stopped with SIGTERM.
        Returns ({mpps, seconds, rx, tx, window, exit}, None) or (None, reason); window: the
        log's length in bytes at the window's two ends (what the sample printed in it)."""
        pool = self.engine_pool(flows)
        tele = f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2"
        with self.bench_lock(f"engine: {name}, {flows} flows") as why:
            if why:
                return None, why
            log(f"engine: VF_MBUFS={pool} {' '.join(argv)}")
            p = self.spawn(argv, logp, env=dict(os.environ, VF_MBUFS=str(pool)))
            try:
                p, why = self.wait_ready(p, marker, name, timeout=120)
                if why:
                    # DPDK's own words: EAL's "Cause:" line, or the first error before it.
                    lines = logp.read_text(errors="replace").splitlines()
                    cause = ([l for l in lines if "Cause:" in l]
                             + [l for l in lines if re.search(r"error|fail|invalid|cannot", l,
                                                              re.I)])
                    return None, (f"not measured: {name} did not start ({cause[0].strip()[:160]})"
                                  if cause else why)
                time.sleep(warm)
                try:
                    t0, a = self.port_stats(tele)
                    w0 = logp.stat().st_size
                    time.sleep(seconds)
                    t1, b = self.port_stats(tele)
                    w1 = logp.stat().st_size
                except (OSError, ValueError, KeyError) as e:
                    return None, f"not measured: {name} telemetry: {e}"
            finally:
                if p is not None:
                    self.stop(p, timeout=20)  # on SIGTERM each sample stops its port and exits
                self.remove_runtime_dir(prefix)
        tx = b["opackets"] - a["opackets"]
        if tx <= 0:
            return None, f"not measured: {name} forwarded nothing over the window"
        return {"mpps": tx / (t1 - t0) / 1e6, "seconds": t1 - t0,
                "rx": b["ipackets"] - a["ipackets"], "tx": tx, "window": (w0, w1),
                "exit": p.returncode}, None

    def engine_l3fwd(self, flows, pcap, prefix, warm, seconds):
        """One l3fwd run on lcore 1 (its only lcore: main and forwarding), the route covering
        the frames' destination out of the port they came in on. The rate is the port's
        opackets over the window, read through DPDK telemetry (l3fwd prints no statistics).
        Returns ({mpps, ...}, None) or (None, reason)."""
        exe, why = self.example_binary("l3fwd")
        if why:
            return None, why
        argv = ([exe, "-l", "1", "--no-pci", "--file-prefix", prefix,
                 "--vdev", f"net_pcap0,rx_pcap={pcap},infinite_rx=1"] + self.eal_memory(flows)
                + ["--", "-p", "0x1", "--config", "(0,0,1)", "--lookup", "lpm",
                   *self.l3fwd_rules(), "--eth-dest=0,02:00:00:00:00:02", "-P",
                   "--parse-ptype"])
        return self.engine_peer("l3fwd", flows, argv, self.raw / f"engine-l3fwd-{flows}.log",
                                "entering main loop", prefix, warm, seconds)

    def engine_l3fwd_graph(self, flows, pcap, prefix, warm, seconds):
        """One l3fwd-graph run: its graph on lcore 1, its main lcore (0, where the control
        lcores of the other rows are) printing the graph's statistics once a second and
        sleeping between (patched). The rate is the port's opackets over the window (DPDK
        telemetry); d["nodes"]: per node packets per call and cycles per packet over the same
        window, from those statistics. Returns (d, None) or (None, reason)."""
        exe, why = self.example_binary("l3fwd-graph")
        if why:
            return None, why
        # rx_pcap twice: l3fwd-graph sets up a tx queue per lcore (2), and net_pcap has a tx
        # queue (here: dropping) per rx_pcap. The second rx queue is never set up, so the file
        # is loaded into the pool once. stdbuf: its statistics come through stdout.
        argv = (["stdbuf", "-oL", exe, "-l", "0,1", "--no-pci", "--file-prefix", prefix,
                 "--vdev", f"net_pcap0,rx_pcap={pcap},rx_pcap={pcap},infinite_rx=1"]
                + self.eal_memory(flows)
                + ["--", "-p", "0x1", "--config", "(0,0,1)", "--eth-dest=0,02:00:00:00:00:02",
                   "-P"])
        logp = self.raw / f"engine-l3fwd-graph-{flows}.log"
        d, why = self.engine_peer("l3fwd-graph", flows, argv, logp, "Entering main loop",
                                  prefix, warm, seconds)
        if d:
            d["nodes"] = self.graph_nodes(logp.read_bytes().decode("latin-1"), *d["window"])
        return d, why

    def engine_l3fwd_eventdev(self, flows, pcap, prefix, warm, seconds):
        """One run of l3fwd in eventdev mode on lcore 1 alone: event_dsw, one atomic queue,
        the rx and tx adapters' services run by the worker between its dequeues (patched; no
        service lcore), LPM as the l3fwd row's. Rate as the l3fwd row's."""
        exe, why = self.example_binary("l3fwd-eventdev")
        if why:
            return None, why
        argv = ([exe, "-l", "1", "--no-pci", "--file-prefix", prefix,
                 "--vdev", f"net_pcap0,rx_pcap={pcap},infinite_rx=1", "--vdev", "event_dsw0"]
                + self.eal_memory(flows)
                + ["--", "-p", "0x1", "--mode=eventdev", "--eventq-sched=atomic",
                   "--lookup", "lpm", *self.l3fwd_rules(), "--eth-dest=0,02:00:00:00:00:02",
                   "-P", "--parse-ptype"])
        return self.engine_peer("l3fwd eventdev", flows, argv,
                                self.raw / f"engine-l3fwd-eventdev-{flows}.log",
                                "entering lpm_event_loop", prefix, warm, seconds)

    # A node's row of rte_graph_cluster_stats_get's table (DPDK 22.11): node, calls and objs
    # since the start, realloc count, objs/call and objs/s (both truncated: unused), cycles
    # per call since the previous print.
    GRAPH_ROW = re.compile(r"^\|([^|\s]+)\s*\|(\d+)\s*\|(\d+)\s*\|\d+\s*\|[\d.]+\s*\|[\d.]+\s*"
                           r"\|([\d.]+)\s*\|", re.M)
    GRAPH_PATH = ("ethdev_rx", "pkt_cls", "ip4_lookup", "ip4_rewrite", "ethdev_tx", "pkt_drop")

    @classmethod
    def graph_nodes(cls, text, start, end):
        """Per node packets per call and cycles per packet over [start, end) (byte offsets) of
        an l3fwd-graph log, from the statistics tables it prints once a second: the cycles of
        a period are its cycles per call times the calls it added. Returns {"periods": n,
        "nodes": [(node, pkts/call, cycles/pkt)]} in the packets' path order, or {"reason"}."""
        tables = []
        at = 0
        for chunk in text.split("\x1b[2J"):  # each print clears the screen first
            rows = {m.group(1): (int(m.group(2)), int(m.group(3)), float(m.group(4)))
                    for m in cls.GRAPH_ROW.finditer(chunk)}
            if rows and chunk.count("+-----") >= 3:  # a whole table: its closing border
                tables.append((at, rows))
            at += len(chunk) + len("\x1b[2J")
        # The last table before the window opens it: the periods from there to the last table
        # printed in the window.
        before = [rows for pos, rows in tables if pos < start][-1:]
        window = before + [rows for pos, rows in tables if start <= pos < end]
        how = "over the window"
        if len(window) < 2:  # a short window (--quick): every period after the warm-up
            window = [rows for pos, rows in tables if pos < end]
            how = "since the start"
        if len(window) < 2:
            return {"reason": f"rte_graph statistics: {len(window)} table(s) printed in the run"}
        nodes = []
        for node in window[-1]:
            calls = objs = cycles = 0
            for prev, cur in zip(window, window[1:]):
                c0, o0, _ = prev.get(node, (0, 0, 0.0))
                c1, o1, cpc = cur[node] if node in cur else (c0, o0, 0.0)
                calls, objs, cycles = calls + c1 - c0, objs + o1 - o0, cycles + (c1 - c0) * cpc
            if objs:
                nodes.append((node, objs / calls, cycles / objs))
        order = {n: i for i, n in enumerate(cls.GRAPH_PATH)}
        nodes.sort(key=lambda n: order.get(re.sub(r"-[\d-]+$", "", n[0]), len(order)))
        return {"periods": len(window) - 1, "how": how, "nodes": nodes}

    def engine_ctl(self, sock, *cmd):
        out = subprocess.run([self.bin("tools/vecflowctl/vecflowctl"), "--socket", sock,
                              "--json", *cmd], capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            raise RuntimeError(f"vecflowctl {cmd[0]}: {(out.stderr or out.stdout).strip()[:150]}")
        return json.loads(out.stdout)

    def engine_snapshot(self, sock):
        """vecflowd's counters at one instant: the ports' tx time-stamped at the middle of
        the call, then the scheduler's and the pipeline's counters."""
        t0 = time.monotonic()
        ports = self.engine_ctl(sock, "ports")
        t = (t0 + time.monotonic()) / 2
        # A VLAN port's transmissions are its parent's too (they leave on the parent's queues);
        # its kernel path is its own.
        links = [x for x in ports.get("ports", []) if x.get("kind") != "vlan"]
        snap = {"t": t,
                "rx": sum(x.get("rx_packets", 0) for x in links),
                "tx": sum(x.get("tx_packets", 0) for x in links),
                "kernel": sum(x.get("kernel_packets", 0) for x in ports.get("ports", []))}
        sched = self.engine_ctl(sock, "sched")
        # On the direct path a run of the pipeline is what a vector is on the scheduled one.
        snap["vectors"] = (sum(a.get("vectors", 0) for a in sched.get("rx_adapters", []))
                           + sum(d.get("runs", 0) for d in sched.get("direct", [])))
        snap["vector_packets"] = (sum(a.get("vector_packets", 0)
                                      for a in sched.get("rx_adapters", []))
                                  + sum(d.get("packets", 0) for d in sched.get("direct", [])))
        snap["backend"] = sched.get("backend")
        snap["path"] = sched.get("path")
        pipe = self.engine_ctl(sock, "pipeline")
        snap["stages"] = {st["stage"]: (st["calls"], st["packets"], st["cycles"], st["queue"])
                          for st in pipe.get("stages", [])}
        return snap

    @staticmethod
    def final_accounting(text):
        """The 'final accounting' lines of a vecflowd log: [(port, rx, tx, kernel, drops,
        unaccounted)]."""
        out = []
        for m in re.finditer(r"final accounting: port (\S+): rx=(\d+) tx=(\d+) to_kernel=(\d+) "
                             r"drops=\{([^}]*)\} unaccounted=(-?\d+)", text):
            # {reason:count, ...}: the counts only (a reason's name may hold digits: ipv4_*).
            drops = sum(int(x) for x in re.findall(r":(\d+)", m.group(5)))
            out.append((m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), drops,
                        int(m.group(6))))
        return out

    @classmethod
    def exact_accounting(cls, returncode, text):
        """A stopped vecflowd's exit status and log: ([(port, rx, tx, kernel, drops,
        unaccounted)], failures), failures empty when it exited 0 and every port's final
        accounting has rx = tx + kernel + drops and nothing unaccounted."""
        acc = cls.final_accounting(text)
        failures = []
        if returncode != 0:
            sig = -returncode if returncode < 0 else None
            try:
                name = f" ({signal.Signals(sig).name})" if sig else ""
            except ValueError:
                name = ""
            failures.append(f"exit {returncode}{name}")
        if not acc:
            failures.append("no 'final accounting' line in its log")
        for port, rx, tx, kern, drops, un in acc:
            if un != 0 or rx != tx + kern + drops:
                failures.append(f"port {port}: rx={rx} tx={tx} kernel={kern} drops={drops} "
                                f"unaccounted={un}")
        return acc, failures

    def engine_stages(self, pipeline):
        """The pipeline section's stages of vecflowd-engine.yaml for `pipeline`."""
        if pipeline == "floor":
            return self.ENGINE_FLOOR
        if pipeline in self.ENGINE_VLANS:
            return (string.Template(self.ENGINE_ROUTE).substitute(route_sched="sched: atomic")
                    .replace("port: p0", f"port: {self.ENGINE_VLANS[pipeline][2]}"))
        if pipeline == "rn-vrf":
            return (string.Template(self.ENGINE_ROUTE).substitute(route_sched="sched: atomic")
                    .replace("{prefix: 198.51.100.0/24,", "{prefix: 198.51.100.0/24, vrf: tenant,"))
        front = {"arn": self.ENGINE_ACL, "carn": self.ENGINE_CT,
                 "ncarn": self.ENGINE_CT.replace("max_sessions: 1100000",
                                                 "max_sessions: 1100000" + self.ENGINE_NAT)
                 }.get(pipeline)
        route = string.Template(self.ENGINE_ROUTE).substitute(
            route_sched="fuse: true" if front else "sched: atomic")
        return f"{front}\n{route}" if front else route

    def engine_vecflowd(self, pipeline, backend, path, flows, pcap, prefix, warm, seconds,
                        build=None):
        """One vecflowd run: start, warm up, a timed window between two counter snapshots,
        SIGTERM, and the exact-accounting check of what it leaves. Returns (d, None) or
        (None, reason)."""
        pool = self.engine_pool(flows)
        sock = str(self.out / f"{prefix}.sock")
        name = f"{pipeline}-{backend}" + ("" if path == "auto" else f"-{path}")
        cfg = self.raw / f"engine-vecflowd-{name}-{flows}.yaml"
        cfg.write_text(string.Template((HERE / "vecflowd-engine.yaml").read_text()).substitute(
            memory_mb=pool * 2048 // (1 << 20) + 384, mbufs=pool,
            hugepages="on" if self.a.hugepages else "off", prefix=prefix, pcap=pcap,
            socket=sock,
            backend=("backend: builtin" if backend == "builtin"
                     else "backend: eventdev\n  device: event_dsw0")
            # conntrack takes its flow ids from vecflow's own (symmetric) hash.
            + ("\n  flow_id: software" if pipeline in ("carn", "ncarn") else "")
            # auto is the default: left out, so a --baseline-build from before the key runs.
            + ("" if path == "auto" else f"\n  path: {path}"),
            stages=self.engine_stages(pipeline),
            vlans=self.ENGINE_VLANS[pipeline][1] if pipeline in self.ENGINE_VLANS else "",
            vrfs="vrfs: [{name: tenant, ports: [p0]}]" if pipeline == "rn-vrf" else ""))
        logp = self.raw / f"engine-vecflowd-{name}-{flows}.log"
        with self.bench_lock(f"engine: vecflowd {pipeline} {backend}, {flows} flows") as why:
            if why:
                return None, why
            vecflowd = (str(Path(build) / "userspace/app/vecflowd") if build
                        else self.bin("userspace/app/vecflowd"))
            p = self.spawn([vecflowd, "-c", str(cfg)], logp)
            try:
                p, why = self.wait_ready(p, "running from", "vecflowd", timeout=120)
                if why:
                    return None, why
                time.sleep(warm)
                try:
                    a = self.engine_snapshot(sock)
                    time.sleep(seconds)
                    b = self.engine_snapshot(sock)
                except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                    return None, f"not measured: {e}"
                status = Path(f"/proc/{p.pid}/status").read_text()
                rss = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
                huge = re.search(r"^HugetlbPages:\s+(\d+) kB", status, re.M)
            finally:
                if p is not None:
                    self.stop(p, timeout=30)
                self.remove_runtime_dir(prefix)
                Path(sock).unlink(missing_ok=True)
        dt = b["t"] - a["t"]
        d = {"tx": b["tx"] - a["tx"], "rx": b["rx"] - a["rx"], "seconds": dt,
             "rss_kib": int(rss.group(1)) if rss else None,
             "hugetlb_kib": int(huge.group(1)) if huge else None,
             "backend": b["backend"], "path": b["path"], "exit": p.returncode}
        # The floor forwards nothing: its rate is what it received and carried to the end.
        d["mpps"] = (d["rx"] if pipeline == "floor" else d["tx"]) / dt / 1e6
        d["floor"] = pipeline == "floor"
        dv = b["vectors"] - a["vectors"]
        d["mean_vector"] = (b["vector_packets"] - a["vector_packets"]) / dv if dv > 0 else None
        stages = []
        for name, (calls, pkts, cyc, queue) in b["stages"].items():
            c0, p0, y0, _ = a["stages"].get(name, (0, 0, 0, queue))
            dc, dp, dy = calls - c0, pkts - p0, cyc - y0
            stages.append((name, queue, dp / dc if dc else None, dy / dp if dp else None))
        d["stages"] = stages
        # Exact accounting of the stopped daemon: exit 0 and rx = tx + kernel + drops.
        text = logp.read_text(errors="replace")
        acc, failures = self.exact_accounting(p.returncode, text)
        d["accounting"] = acc
        left = re.search(r"(\d+) event\(s\) still in flight after the drain timeout", text)
        if failures and left:
            failures.append(f"{left.group(1)} event(s) still in flight after the drain timeout")
        if failures:
            issue = " (issue 17: the eventdev backend at stop)" if backend == "eventdev" else ""
            return None, (f"not measured: exact accounting failed at SIGTERM{issue}: "
                          + "; ".join(failures)
                          + f"; unchecked rate before the stop {d['mpps']:.3f} Mpps")
        if d["rx"] == 0:
            return None, (f"not measured: the port received nothing in the window (net_pcap "
                          f"infinite_rx keeps the file's {flows} frames in the pool of {pool} "
                          "mbufs: a pool without room beyond them leaves rx empty)")
        return d, None

    def peer_note(self, kind, ss, flows, warm):
        """The note of a router sample's row: how it was measured and built, and for
        l3fwd-graph the per-node cycles of its median round."""
        mid = sorted(ss, key=lambda d: d["mpps"])[len(ss) // 2]
        pool = self.engine_pool(flows)
        parts = [f"the port's opackets over {mid['seconds']:.1f} s (DPDK telemetry) after a "
                 f"{warm:g} s warm-up"]
        if kind == "l3fwd":
            parts += ["LPM, software ptype parse", f"pool {pool} mbufs",
                      "built from Debian's dpdk-doc without its Rx checksum offload request"]
        elif kind == "l3fwd-graph":
            st = mid["nodes"]
            if "reason" in st:
                parts.append(st["reason"])
            else:
                rx = [n for n in st["nodes"] if n[0].startswith("ethdev_rx")]
                parts.append(
                    f"rte_graph's own statistics {st['how']} ({plural(st['periods'], 'period')}"
                    " of 1 s; every node call timed with rdtsc, in the rate too): "
                    + ", ".join(f"{n} {cpp:.1f}" for n, _, cpp in st["nodes"])
                    + f" cycles/pkt, sum {sum(cpp for *_, cpp in st['nodes']):.0f}"
                    + (f"; {rx[0][1]:.0f} pkts/call" if rx else ""))
            parts += ["ethdev_rx's cycles hold net_pcap's copy and the software ptype parse "
                      "(an rx callback) pkt_cls reads",
                      "the graph on lcore 1, its main lcore 0 printing those statistics once a "
                      "second and sleeping between (patched: it busy-waited)",
                      f"pool {pool} mbufs, cache 512 (patched: 256, the graph's burst, sent "
                      "most allocations and frees to the pool's ring)",
                      "built from Debian's dpdk-doc with tools/bench/peers/l3fwd-graph.patch "
                      "(also: a route for the frames' 198.51.100.0/24 to port 0)"]
        else:
            parts += ["one lcore (1): the worker runs the rx and tx adapters' services between "
                      "its dequeues (patched: without a service lcore nothing ran them)",
                      "event_dsw, an atomic queue and the tx adapter's single-link queue, bursts "
                      "of 32 events of one packet each (--event-vector crashes on event_dsw and "
                      "event_sw in 22.11)",
                      "LPM, software ptype parse (patched: 22.11's eventdev mode never set the "
                      "packet type, so it skipped the lookup and sent each packet back out of "
                      "its input port)", f"pool {pool} mbufs",
                      "built from Debian's dpdk-doc with l3fwd's edits and "
                      "tools/bench/peers/l3fwd-eventdev.patch"]
        exits = sorted({d["exit"] for d in ss if d.get("exit")})
        if exits:
            parts.append("exit " + "/".join(str(e) for e in exits) + " at SIGTERM")
        return "; ".join(parts)

    def run_engine(self):
        """vecflowd and dpdk-testpmd side by side on the same net_pcap vdev (a pcap replayed
        from memory, 64 B UDP frames, one frame per flow), one data lcore (1) each."""
        group = self.ENGINE_GROUP
        flows_list = ([1024] if self.a.quick else
                      [int(f) for f in self.a.engine_flows.split(",")] if self.a.engine_flows
                      else ENGINE_FLOWS)
        warm = 0.5 if self.a.quick else 1.0
        seconds = 1.0 if self.a.quick else self.a.seconds
        trafgen = self.bin("tools/trafgen/trafgen")
        # vecflowctl and this script stay on CPU 0 with the control lcore and testpmd's main
        # lcore: lcore 1 is the data lcore under test.
        affinity = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {0})
        samples, reasons = {}, {}
        rows = self.engine_rows()
        if self.a.quick:
            # The smoke run keeps the rows whose code the others' is part of: testpmd io, both
            # backends, and the whole stateful pipeline (conntrack, nat, acl, route, neighbour);
            # and the two patched peers (~10 s with their builds), which check that the patches
            # under peers/ still apply to the installed sources and build.
            for key, *_ in rows:
                if key not in self.ENGINE_QUICK_ROWS:
                    for flows in flows_list:
                        reasons[(key, flows)] = (
                            "not measured in a --quick run (it measures "
                            + ", ".join(self.ENGINE_QUICK_ROWS) + ")")
        pcaps = {}
        tagged = {}
        try:
            for flows in flows_list:
                pcap = self.out / f"engine-{flows}.pcap"
                r = subprocess.run([trafgen, "pcap", "--out", str(pcap), "--flows", str(flows),
                                    "--size", "60", "--dst", "198.51.100.2",
                                    "--dst-mac", "02:70:63:61:70:00"],
                                   capture_output=True, text=True)
                if r.returncode != 0:
                    for key, *_ in rows:
                        reasons[(key, flows)] = f"not measured: trafgen pcap: {r.stderr.strip()}"
                    continue
                pcaps[flows] = pcap
                for key, *_ in rows:
                    if key in self.ENGINE_VLANS:
                        tagged[(key, flows)] = self.out / f"engine-{flows}-{key}.pcap"
                        tag_pcap(pcap, tagged[(key, flows)], self.ENGINE_VLANS[key][0])
            n = 0
            for rnd in range(self.a.rounds):
                for flows, pcap in pcaps.items():
                    # A row and its baseline twin run back to back, in turns first.
                    ordered = list(rows)
                    if rnd % 2:
                        for i in range(len(ordered) - 1):
                            if ordered[i + 1][0] == ordered[i][0] + self.BASELINE:
                                ordered[i], ordered[i + 1] = ordered[i + 1], ordered[i]
                    for key, name, kind, detail in ordered:
                        if (key, flows) in reasons:
                            continue  # a failed point stays failed: no rate from other rounds
                        n += 1
                        prefix = f"{self.lab}-eng{n}"
                        log(f"engine: round {rnd + 1}/{self.a.rounds}: {flows} flows: {name}")
                        if kind == "testpmd":
                            d, why = self.engine_testpmd(detail, flows, pcap, prefix, warm,
                                                         seconds)
                        elif kind == "l3fwd":
                            d, why = self.engine_l3fwd(flows, pcap, prefix, warm, seconds)
                        elif kind == "l3fwd-graph":
                            d, why = self.engine_l3fwd_graph(flows, pcap, prefix, warm,
                                                             seconds)
                        elif kind == "l3fwd-eventdev":
                            d, why = self.engine_l3fwd_eventdev(flows, pcap, prefix, warm,
                                                                seconds)
                        else:
                            build = (self.a.baseline_build if key.endswith(self.BASELINE)
                                     else None)
                            pipeline, backend, *path = detail
                            d, why = self.engine_vecflowd(pipeline, backend,
                                                          path[0] if path else "auto",
                                                          flows,
                                                          tagged.get((pipeline, flows), pcap),
                                                          prefix, warm,
                                                          seconds, build)
                        if why:
                            reasons[(key, flows)] = why
                            samples.pop((key, flows), None)
                        else:
                            samples.setdefault((key, flows), []).append(d)
        finally:
            os.sched_setaffinity(0, affinity)
            for pcap in list(pcaps.values()) + list(tagged.values()):
                pcap.unlink(missing_ok=True)
        self.engine = {}
        for flows in flows_list:
            io = samples.get(("io", flows))
            base = statistics.median(d["mpps"] for d in io) if io else None
            # The router samples' medians, each vecflowd row's note gives its ratio to them.
            peers = {}
            for key, label in (("l3fwd", "DPDK l3fwd"), ("l3fwd-graph", "l3fwd-graph"),
                               ("l3fwd-eventdev", "l3fwd eventdev")):
                ss = samples.get((key, flows))
                if ss:
                    peers[label] = statistics.median(d["mpps"] for d in ss)
            for key, name, kind, _ in rows:
                point = plural(flows, "flow")
                ss = samples.get((key, flows))
                if not ss:
                    self.res.add(group, name, point,
                                 reason=reasons.get((key, flows), "not measured"))
                    continue
                mpps = statistics.median(d["mpps"] for d in ss)
                self.engine[(key, flows)] = mpps
                ratio = mpps / base if base and key != "io" else None
                if kind == "testpmd":
                    note = (f"testpmd's Tx-pps over {ss[0]['periods']} s after a {warm:g} s "
                            f"warm-up; pool {self.engine_pool(flows)} mbufs; tx dropped by "
                            "net_pcap")
                    self.res.add(group, name, point, mpps, "Mpps",
                                 vs="testpmd io" if ratio else None, ratio=ratio, note=note)
                    continue
                if kind in ("l3fwd", "l3fwd-graph", "l3fwd-eventdev"):
                    self.res.add(group, name, point, mpps, "Mpps",
                                 vs="testpmd io" if ratio else None, ratio=ratio,
                                 note=self.peer_note(kind, ss, flows, warm))
                    continue
                mid = sorted(ss, key=lambda d: d["mpps"])[len(ss) // 2]
                parts = [f"{'rx' if mid['floor'] else 'tx'} over {mid['seconds']:.1f} s "
                         f"after a {warm:g} s warm-up"]
                if mid["floor"]:
                    parts.append("every packet dropped at the pipeline's end (no route): "
                                 "the framework's floor under any pipeline")
                for label, peer in peers.items():
                    parts.append(f"{mpps / peer:.2f}x {label}")
                twin = samples.get((key + self.BASELINE, flows))
                if twin:
                    # Rounds pair up in order: the same round measured both, back to back.
                    pairs = [a["mpps"] / b["mpps"] for a, b in zip(ss, twin)]
                    parts.append(f"{mpps / statistics.median(d['mpps'] for d in twin):.3f}x "
                                 f"the baseline build (per round: "
                                 + " ".join(f"{r:.3f}" for r in pairs) + ")")
                if mid.get("path"):  # None from a baseline build that predates the field
                    parts.append(f"{mid['path']} path")
                if mid["mean_vector"] is not None:
                    parts.append(f"mean vector {mid['mean_vector']:.1f}")
                for st, queue, ppc, cpp in mid["stages"]:
                    parts.append(f"{st}: {ppc:.1f} pkts/call, {cpp:.0f} cycles/pkt"
                                 if ppc is not None and cpp is not None else f"{st}: idle")
                parts.append(f"queue {mid['stages'][0][1]}" if mid["stages"] else "no stages")
                if mid["rx"] != mid["tx"] and not mid["floor"]:
                    parts.append(f"rx - tx over the window {mid['rx'] - mid['tx']} (in flight "
                                 "at its ends)")
                if mid["hugetlb_kib"]:
                    parts.append(f"memory = VmRSS, hugepages not included "
                                 f"(+{fmt_kib(mid['hugetlb_kib'])} hugetlb)")
                else:
                    parts.append("memory = VmRSS (no hugepages: DPDK's memory is in it)")
                port, rx, tx, kern, drops, _ = mid["accounting"][0]
                parts.append(f"stopped: exit 0, final accounting rx {rx} = tx {tx} + kernel "
                             f"{kern} + drops {drops}, unaccounted 0")
                self.res.add(group, name, point, mpps, "Mpps",
                             vs="testpmd io" if ratio else None, ratio=ratio,
                             memory_kib=max(d["rss_kib"] or 0 for d in ss) or None,
                             note="; ".join(parts))

    # ---- existing benchmark tools -----------------------------------------------------

    def run_sched(self):
        argv = [self.bin("tests/bench/vecflow_sched_bench")]
        if self.a.quick:
            argv += ["--quick", "--seconds", "0.02", "--rounds", "1"]
        else:
            argv += ["--seconds", str(self.a.sched_seconds), "--rounds", str(self.a.rounds)]
        if not self.a.hugepages:
            argv.append("--no-huge")
        text, why = self.run_tool("sched_bench", argv, 1800)
        group = "scheduler (1 atomic queue)"
        if why:
            self.res.add(group, "builtin vs event_dsw vs event_sw", "all", reason=why)
            return
        # "## 1 lcore ..." then "| flows | vector | builtin ev/s | ... |" rows.
        tables = {}
        lc = None
        for line in text.splitlines():
            m = re.match(r"## (\d) lcore", line)
            if m:
                lc = int(m.group(1))
                continue
            if line.startswith("## "):
                lc = None
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if lc and len(cells) == 10 and re.match(r"^\d|^1[kM]$", cells[0]):
                pk = [parse_si(c) for c in cells[5:8]]
                tables[(lc, cells[0], int(cells[1]))] = pk
        self.sched = tables
        if not tables:
            self.res.add(group, "builtin vs event_dsw vs event_sw", "all",
                         reason="not measured: no table in vecflow_sched_bench's output")
            return
        backends = ["builtin", "event_dsw", "event_sw"]
        for (lc, flows, vec), pk in sorted(tables.items(), key=lambda kv: (kv[0][0], kv[0][2])):
            if flows != "1k" or vec not in (1, 64):
                continue
            for i, b in enumerate(backends):
                self.res.add(group, b, f"{lc} lcore{'s' if lc > 1 else ''}, 1k flows, vector {vec}",
                             pk[i] / 1e6 if pk[i] else None, "Mpps",
                             vs=None if i == 0 else "builtin",
                             ratio=pk[0] / pk[i] if i and pk[i] else None,
                             note="packets per CPU second; ratio = builtin / this" if i else
                             "packets per CPU second of the busiest thread")
        # Growth in flows, builtin at vector 64, 1 lcore.
        base = tables.get((1, "1", 64), [None])[0]
        for flows in ("1", "1k", "1M"):
            pk = tables.get((1, flows, 64))
            if pk is None:
                continue
            ratio = pk[0] / base if base and pk[0] and flows != "1" else None
            self.res.add("growth: flows (scheduler)", "builtin, vector 64, 1 lcore",
                         f"{flows} flow{'s' if flows != '1' else ''}",
                         pk[0] / 1e6 if pk[0] else None, "Mpps", vs="1 flow" if ratio else None,
                         ratio=ratio,
                         note="fixed-size scheduler state: memory does not grow with flows")

    def run_pipeline(self):
        argv = [self.bin("tests/bench/pipeline_bench"), "--pcap",
                str(self.out / "pipeline-bench.pcap")]
        if self.a.quick:
            argv += ["--seconds", "0.05", "--rounds", "1", "--routes", "1,1000"]
        else:
            argv += ["--seconds", str(self.a.seconds / 2), "--rounds", str(self.a.rounds),
                     "--routes", "1,1000,10000,100000"]
        text, why = self.run_tool("pipeline_bench", argv, 1800)
        group = "growth: routes (pipeline, 1 core)"
        if why:
            self.res.add(group, "ACL 1k rules + route", "all", reason=why)
            return
        rates = {}
        mem = {}
        for line in text.splitlines():
            m = re.match(r"^(\d+) IPv4\s+(\d+)\s+([\d.]+)\s+(\d+)(?:\s+(\d+))?", line)
            if m:
                rates[(int(m.group(1)), int(m.group(2)))] = float(m.group(3))
                if m.group(5):
                    mem[int(m.group(1))] = int(m.group(5))
        if not rates:
            self.res.add(group, "ACL 1k rules + route", "all",
                         reason="not measured: no table in pipeline_bench's output")
            return
        counts = sorted({n for n, _ in rates})
        smallest = counts[0]
        for n in counts:
            for vec in (64, 1):
                v = rates.get((n, vec))
                if vec == 64:
                    ratio = v / rates[(smallest, 64)] if n != smallest and v else None
                    vs = f"{smallest} route{'s' if smallest > 1 else ''}" if ratio else None
                    note = "net_pcap replay -> ACL -> route (fused) -> net_null"
                else:
                    v64 = rates.get((n, 64))
                    ratio = v / v64 if v and v64 else None
                    vs = "vector 64" if ratio else None
                    note = "one packet per stage call"
                self.res.add(group, "ACL 1k rules + route", f"{n} routes, vector {vec}", v,
                             "Mpps", vs=vs, ratio=ratio,
                             memory_kib=mem.get(n) if vec == 64 else None,
                             note=note + ("; memory: DPDK heap taken by the pipeline"
                                          if vec == 64 and n in mem else ""))

    def run_steer(self):
        argv = [self.bin("tests/bench/steer_bench"), "--benchmark_format=json"]
        if self.a.quick:
            argv.append("--benchmark_filter=Reference/.*ipv4|fixed_ipv4/(1|100)/")
        text, why = self.run_tool("steer_bench", argv, 1800)
        group = "growth: rules (XDP steering program)"
        if why:
            self.res.add(group, "steer.bpf.c", "all", reason=why)
            return
        try:
            benches = json.loads(text)["benchmarks"]
        except (ValueError, KeyError):
            self.res.add(group, "steer.bpf.c", "all",
                         reason="not measured: steer_bench printed no JSON")
            return
        # The references, through the same harness: a program that only returns XDP_PASS
        # (what BPF_PROG_TEST_RUN costs a frame; each series' 1-rule row is read against it)
        # and one that only looks a key of the rules' size up in a hash map (one tuple's
        # lookup: the floor of a classifier built on hash maps).
        passes = {}
        names = {"xdp_pass": "XDP_PASS only", "hash_lookup": "one hash map lookup (48 B key)"}
        for b in benches:
            m = re.match(r"BM_Reference/(xdp_pass|hash_lookup)_(ipv[46])/", b["name"])
            if not m:
                continue
            kind, family = m.group(1), m.group(2)
            if b.get("error_occurred"):
                self.res.add(group, names[kind], family,
                             reason=f"not measured: {b.get('error_message', 'error')}")
                continue
            ns = b.get("ns_per_frame")
            if kind == "xdp_pass":
                passes[family] = ns
            ref = passes.get(family) if kind != "xdp_pass" else None
            mpps = 1e3 / ns if ns else None
            self.res.add(group, names[kind], family, mpps, "Mpps",
                         vs="XDP_PASS only" if ref and mpps else None,
                         ratio=mpps * ref / 1e3 if ref and mpps else None,
                         note=(f"{ns:.1f} ns/frame in BPF_PROG_TEST_RUN" + (
                             ": the harness's own cost, the baseline of the 1-rule rows"
                             if kind == "xdp_pass" else
                             f"; {ns / ref:.1f}x the XDP_PASS program's ns" if ref else ""))
                         if ns else "")
        base = {}
        for b in benches:
            m = re.match(r"BM_Steer/(\w+)/(\d+)/", b["name"])
            if not m:
                continue
            series, n = m.group(1), int(m.group(2))
            if b.get("error_occurred"):
                self.res.add(group, f"steer {series}", f"{n} rules",
                             reason=f"not measured: {b.get('error_message', 'error')}")
                continue
            ns = b.get("ns_per_frame")
            mpps = 1e3 / ns if ns else None
            if n == 1:
                base[series] = mpps
            vs = "1 rule" if n != 1 else "XDP_PASS only"
            pass_ns = passes.get(series.split("_")[-1])
            ref = base.get(series) if n != 1 else (1e3 / pass_ns if pass_ns else None)
            ratio = mpps / ref if mpps and ref else None
            cost = (f"; {ns / pass_ns:.1f}x the XDP_PASS program's ns, {ns - pass_ns:.1f} ns "
                    "its own" if ns and pass_ns and n == 1 else "")
            self.res.add(group, f"steer {series}", f"{n} rule{'s' if n > 1 else ''}", mpps,
                         "Mpps", vs=vs if ratio else None, ratio=ratio,
                         note=f"{ns:.1f} ns/frame in BPF_PROG_TEST_RUN; "
                              f"{int(b.get('entries', 0))} map entries, "
                              f"{int(b.get('tuples', 0))} tuples{cost}" if ns else "")

    def run_ports(self):
        argv = [self.bin("tests/bench/io/vf_port_bench"),
                "--hugepages", "auto" if self.a.hugepages else "off"]
        if self.a.quick:
            argv += ["--seconds", "0.3", "--rounds", "1", "--only", "ring"]
        else:
            argv += ["--seconds", str(self.a.seconds), "--rounds", str(self.a.rounds)]
        text, why = self.run_tool("port_bench", argv, 900)
        group = "ports (1 core, rx -> tx)"
        if why:
            self.res.add(group, "vf_port_bench", "all", reason=why)
            return
        rows = []
        on = False
        for line in text.splitlines():
            if line.startswith("forwarding on one core"):
                on = True
                continue
            m = re.match(r"^(.{34}) +([\d.]+)  (.*)$", line) if on else None
            if m:
                rows.append((m.group(1).strip(), float(m.group(2)), m.group(3).strip()))
        if not rows:
            self.res.add(group, "vf_port_bench", "all",
                         reason="not measured: no table in vf_port_bench's output")
            return
        prev = None
        for what, mpps, note in rows:
            kind, _, variant = what.partition(": ")
            # Each port kind prints its reference first, then vecflow's port against it.
            ratio = vs = None
            if prev and prev[0] == kind and mpps > 0 and prev[1] > 0:
                ratio, vs = mpps / prev[1], prev[2]
            if mpps <= 0:
                self.res.add(group, kind, variant or what, reason=f"not measured: {note}")
            else:
                self.res.add(group, kind, variant or what, mpps, "Mpps", vs=vs, ratio=ratio,
                             note=note)
            prev = (kind, mpps, variant)

    # ---- output -----------------------------------------------------------------------

    def write(self, started, load_start):
        meta = {
            "started": started, "finished": datetime.datetime.now().isoformat(timespec="seconds"),
            "command": os.environ.get("VECFLOW_BENCH_COMMAND") or " ".join(sys.argv),
            "quick": self.a.quick, "rounds": self.a.rounds, "seconds": self.a.seconds,
            "hugepages": self.a.hugepages, "cpus": os.cpu_count(),
            "load_start": load_start, "load_end": list(os.getloadavg()),
            "kernel": os.uname().release, "peak_rss_kib": self.rss_by_tool,
            "parts": self.a.only.split(","), "part_seconds": self.part_seconds,
        }
        (self.out / "results.json").write_text(
            json.dumps({"meta": meta, "rows": self.res.rows}, indent=1) + "\n")
        self.write_markdown(meta)
        self.plot()

    def write_markdown(self, meta):
        lines = [
            "# vecflow benchmark suite",
            "",
            f"`{meta['command']}`: {meta['started']} to {meta['finished']}, kernel "
            f"{meta['kernel']}, {meta['cpus']} CPUs, load {fmt_load(meta['load_start'])} at "
            f"start, {fmt_load(meta['load_end'])} at end; hugepages: "
            f"{'yes' if meta['hugepages'] else 'no'}; {meta['rounds']} round(s), medians.",
            "",
            "End to end: trafgen (AF_PACKET TX ring, client ns, CPU 0) -> forwarder (appliance "
            "ns; threaded NAPI on wan0; user-space forwarders on CPU 1) -> trafgen recv (server "
            "ns). Rate = what the receiver counted; ratio = to Linux forwarding of the same "
            "point in this run. Memory = the forwarder's RSS + hugetlb pages (vecflowd, "
            "xsk_fwd) or the DPDK heap a pipeline took. Each tool's full output is in raw/.",
        ]
        if any(r["group"] == PART_GROUPS["engine"] for r in self.res.rows):
            lines += [
                "",
                "Engine per core: vecflowd, dpdk-testpmd, DPDK's l3fwd (LPM) and the two "
                "samples of vecflowd's own class, l3fwd-graph (rte_graph) and l3fwd in "
                "eventdev mode (event_dsw, one lcore), on the same net_pcap vdev replaying a "
                "pcap of 64 B UDP frames from memory (one frame per flow, tx dropped by the "
                "PMD), one data lcore (1) each. Rate = packets forwarded per second; ratio = to "
                "testpmd io of the same flow count in this run (a vecflowd note also gives its "
                "ratio to each router sample); memory = vecflowd's VmRSS (hugepages are not in "
                "it; the note gives them).",
            ]
        if any(r["group"] in (self.LAT_PING_GROUP, self.LAT_GROUP) for r in self.res.rows):
            lines += [
                "",
                "Latency: wan0's receive side in the sender's softirq (CPU 0; not threaded as "
                "in the e2e rows); user-space forwarders on CPU 1. Ping (client ns, CPU 0; 56 B "
                "every 2 ms) to the server through each forwarder, p50 and p99 the medians of "
                "the rounds'; xsk_fwd forwards both ways there and rewrites MACs. One way: "
                "trafgen stamps each frame (CLOCK_REALTIME) as it writes it, `trafgen recv` "
                "(server ns, CPU 0) subtracts it from the kernel's receive timestamp; rate = "
                "p50, the note has p99/p99.9/max (quantiles the medians of the rounds', max of "
                "all) and the offered load; '% of lossless' is of the forwarder's own lossless "
                f"rate (>= {100 * LAT_LOSSLESS:g}% delivered in a {LAT_PROBE_S:g} s probe, its "
                "own rows). Ratio = to Linux forwarding; latency.png: p50 and p99 vs offered "
                "load.",
            ]
        if any(r["group"].startswith("veth offload") for r in self.res.rows):
            lines += [
                "",
                "veth offload (issue 40): trafgen --engine xdp-live (client ns, CPU 0, paced) "
                "-> forwarder (appliance ns; wan0's threaded NAPI pinned to CPU 1 with "
                "vecflowd's worker) -> an XDP program on the server's eth0 that drops the UDP "
                "frames, counted by veth (rx_queue_0_xdp_drops). Rate = the most the sink "
                "counted a second over the probes of a search for the highest offered rate it "
                f"counts >= {100 * OFFLOAD_LOSSLESS:g}% of ({OFFLOAD_PROBE_S:g} s probes; median "
                "of the rounds; the lossless rate, where a probe reached it, in the note); "
                "flows primed before each point (twice each; the stateful pipeline with a "
                "reply between). Ratio = to Linux forwarding with the same pipeline; the "
                "offload rows' ratios to the redirect rule, the user-space path and the "
                "flowtable are a group of their own.",
            ]
        lines += [""] + self.targets() + [""] + [
            "| group | benchmark | point | rate | vs | ratio | memory | note |",
            "|---|---|---|---:|---|---:|---:|---|",
        ]
        for r in self.res.rows:
            rate = fmt_rate(r["value"], r["unit"]) if r["value"] is not None else r["reason"]
            lines.append("| {} | {} | {} | {} | {} | {} | {} | {} |".format(
                r["group"], r["benchmark"], r["point"], rate, r["vs"] or "",
                f"{r['ratio']:.2f}x" if r["ratio"] else "", fmt_kib(r["memory_kib"]),
                r["note"].replace("|", "/")))
        (self.out / "results.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))

    # Issue 37's targets for the engine per core: (row, reference row, kind, goal, label);
    # ">=": the row's rate at least goal x the reference's; "within": within goal (a share)
    # of it either way.
    ENGINE_TARGETS = [
        ("rn-builtin", "l3fwd-graph", ">=", 0.8, "route+neighbour builtin / l3fwd-graph"),
        ("rn-builtin", "l3fwd-eventdev", ">=", 2.0, "route+neighbour builtin / l3fwd eventdev"),
        ("rn-dsw", "rn-sched", "within", 0.10,
         "route+neighbour event_dsw / builtin, both scheduled"),
        ("floor-builtin", "io", ">=", 0.6, "floor / testpmd io"),
    ]

    def engine_targets(self):
        """Issue 37's engine targets against this run's engine rows, a line per flow count."""
        names = {k: n for k, n, *_ in self.ENGINE_ROWS}
        rows = {(r["benchmark"], r["point"]): r for r in self.res.rows
                if r["group"] == self.ENGINE_GROUP}
        if not rows:
            return []
        out = ["Targets (issue 37, engine per core): vecflowd route+neighbour builtin >= 0.8x "
               "l3fwd-graph and >= 2x l3fwd eventdev at every flow count; event_dsw within "
               "10 % of builtin where the scheduler runs (both scheduled); the floor >= 0.6x "
               "testpmd io."]
        for point in dict.fromkeys(p for _, p in rows):
            parts = []
            for a, b, how, goal, what in self.ENGINE_TARGETS:
                ra, rb = rows.get((names[a], point)), rows.get((names[b], point))
                if ra is None or rb is None:
                    continue  # a row this run did not have (--engine-rows)
                if not ra["value"] or not rb["value"]:
                    parts.append(f"{what}: not measured")
                    continue
                r = ra["value"] / rb["value"]
                edge = goal if how == ">=" else 1 - goal
                digits = 3 if abs(r - edge) < 0.01 else 2  # no "0.60x, MISSED" at 0.598
                if how == ">=":
                    verdict = "met" if r >= goal else f"MISSED by {goal - r:.{digits}f}x"
                else:
                    verdict = ("met" if abs(r - 1) <= goal else f"MISSED: {100 * (r - 1):+.0f} %")
                parts.append(f"{what} {r:.{digits}f}x ({verdict})")
            if parts:
                out.append(f"- {point}: " + "; ".join(parts))
        return out

    def targets(self):
        """Issue 8's end-to-end targets for this machine, and issue 37's for the engine,
        against this run's rows."""
        out = ["Targets (issue 8, 64 B): vecflow user space >= 2x Linux forwarding, >= 0.8x the "
               "raw AF_XDP ceiling."]
        names = dict(self.E2E_ROWS)
        rows = {(r["benchmark"], r["point"]): r for r in self.res.rows
                if r["group"] == PART_GROUPS["e2e"] and r["point"].startswith("64 B")}
        for point in dict.fromkeys(p for _, p in rows):
            ours = rows.get((names["pipeline"], point))
            if ours is None:
                continue
            if ours["value"] is None:
                out.append(f"- {point}: {ours['reason']}")
                continue
            parts = []
            for kind, goal in (("linux", 2.0), ("xsk", 0.8)):
                ref = rows.get((names[kind], point))
                if ref and ref["value"]:
                    r = ours["value"] / ref["value"]
                    verdict = "met" if r >= goal else f"MISSED by {goal - r:.2f}x"
                    parts.append(f"{r:.2f}x {names[kind]} ({verdict})")
            out.append(f"- {point}: " + "; ".join(parts))
        engine = self.engine_targets()
        return out + ([""] + engine if engine else [])

    def plot_latency(self):
        """latency.png: one-way p50 and p99 vs offered load (64 B, 1 flow), a line per
        forwarder, each at its own offered rates (the % points follow its lossless rate)."""
        data = getattr(self, "lat_oneway", {})
        curves = []  # (data file, forwarder) with two loads at least
        for kind, name, _, oneway in self.LAT_ROWS:
            pts = sorted((d["offered_kpps"], d["p50"], d["p99"]) for (k, pt), d in data.items()
                         if k == kind and pt[:2] == (60, 1))
            if not oneway or len(pts) < 2:
                continue
            dat = self.out / f"latency-{kind}.dat"
            dat.write_text(f"# {name}, 64 B, 1 flow: offered kpps, p50 us, p99 us\n" + "".join(
                f"{x:.3f} {a:.2f} {b:.2f}\n" for x, a, b in pts))
            curves.append((dat, name))
        if not curves:
            log("latency: fewer than two loads per forwarder measured: no latency.png")
            return
        panels = []
        for col, q in ((2, "p50"), (3, "p99")):
            plots = ", \\\n     ".join(
                f"'{dat}' using 1:{col} with linespoints title '{gp_quote(name)}'"
                for dat, name in curves)
            panels.append(f"""
set title 'one-way latency {q} vs offered load (64 B, 1 flow)'
set logscale xy
set xlabel 'offered load (kpps)'
set ylabel '{q} (us)'
plot {plots}
""")
        script = (f"""set terminal pngcairo size 1400,620 noenhanced
set output '{self.out / "latency.png"}'
set key below
set grid
set multiplot layout 1,2
""" + "".join(panels) + "unset multiplot\n")
        (self.out / "latency.gp").write_text(script)
        r = subprocess.run(["gnuplot", str(self.out / "latency.gp")], capture_output=True,
                           text=True)
        if r.returncode != 0:
            log(f"gnuplot failed: {r.stderr.strip()[:300]}")

    def plot(self):
        """curves.png: rate vs vector size (scheduler) and rate vs flows (end to end); and
        latency.png when the latency part ran."""
        if not shutil.which("gnuplot"):
            log("gnuplot not installed: no curves.png (apt-get install gnuplot-nox)")
            return
        self.plot_latency()
        vec = self.out / "vector.dat"
        with open(vec, "w") as f:
            f.write("# vector builtin event_dsw event_sw (Mpps, 1 lcore, 1k flows)\n")
            for (lc, flows, v), pk in sorted(getattr(self, "sched", {}).items(),
                                             key=lambda kv: kv[0][2]):
                if lc == 1 and flows == "1k":
                    f.write(f"{v} " + " ".join(f"{x / 1e6:.3f}" for x in pk) + "\n")
        fl = self.out / "flows.dat"
        kinds = [k for k, _ in self.E2E_ROWS]
        with open(fl, "w") as f:
            f.write("# flows " + " ".join(kinds) + " (Mpps received, 64 B; ? = not measured)\n")
            points, data = getattr(self, "flow_growth", ([], {}))
            for pt in points:
                f.write(f"{pt[1]} " + " ".join(
                    f"{data[(k, pt)]['mpps']:.3f}" if "mpps" in data[(k, pt)] else "?"
                    for k in kinds) + "\n")
        eng = self.out / "engine.dat"
        keys = [k for k, *_ in self.ENGINE_ROWS]
        with open(eng, "w") as f:
            f.write("# flows " + " ".join(keys) + " (Mpps forwarded, the floor's received; "
                    "1 lcore, 64 B; ? = not measured)\n")
            measured = getattr(self, "engine", {})
            for flows in sorted({fl for _, fl in measured}):
                f.write(f"{flows} " + " ".join(
                    f"{measured[(k, flows)]:.3f}" if (k, flows) in measured else "?"
                    for k in keys) + "\n")
        panels = []
        if has_points(vec):
            panels.append(f"""
set title 'scheduler: rate vs vector size (1 lcore, 1k flows)'
set logscale xy 2
set xlabel 'vector size (packets per event)'
set ylabel 'Mpps (per CPU second)'
plot '{vec}' using 1:2 with linespoints title 'builtin', \\
     '' using 1:3 with linespoints title 'event_dsw', \\
     '' using 1:4 with linespoints title 'event_sw'
""")
        if has_points(fl):
            panels.append(f"""
set title 'end to end over veth: rate vs flows (64 B)'
set logscale x 4
set xtics ("1" 1, "16" 16, "256" 256, "4k" 4096, "64k" 65536, "1M" 1048576)
unset logscale y
set yrange [0:*]
set xlabel 'flows'
set ylabel 'Mpps received'
plot '{fl}' using 1:2 with linespoints title 'Linux forwarding', \\
     '' using 1:3 with linespoints title 'XDP redirect', \\
     '' using 1:4 with linespoints title 'raw AF_XDP', \\
     '' using 1:5 with linespoints title 'vecflow user space'
""")
        if has_points(eng):
            plots = ", \\\n     ".join(
                f"'{eng if i == 0 else ''}' using 1:{i + 2} with linespoints title '{name}'"
                for i, (_, name, *_) in enumerate(self.ENGINE_ROWS))
            panels.append(f"""
set title 'engine per core: rate vs flows (net_pcap replay, 1 lcore, 64 B)'
set logscale x 4
set xtics ("1" 1, "16" 16, "256" 256, "4k" 4096, "16k" 16384, "64k" 65536, "1M" 1048576)
set logscale y 2
set yrange [*:*]
set xlabel 'flows'
set ylabel 'Mpps forwarded'
set key bottom left
plot {plots}
set key top left
""")
        if not panels:
            log("no curve has points (quick run, or the parts did not run): no curves.png")
            return
        script = (f"""set terminal pngcairo size {700 * len(panels)},560 noenhanced
set output '{self.out / "curves.png"}'
set datafile missing '?'
set key top left
set grid
set multiplot layout 1,{len(panels)}
""" + "".join(panels) + "unset multiplot\n")
        (self.out / "curves.gp").write_text(script)
        r = subprocess.run(["gnuplot", str(self.out / "curves.gp")], capture_output=True,
                           text=True)
        if r.returncode != 0:
            log(f"gnuplot failed: {r.stderr.strip()[:300]}")


# The group a part's rows go to when the part cannot run at all.
PART_GROUPS = {"e2e": "end to end (veth)", "sched": "scheduler (1 atomic queue)",
               "pipeline": "growth: routes (pipeline, 1 core)",
               "steer": "growth: rules (XDP steering program)", "ports": "ports (1 core, rx -> tx)",
               "rules": "growth: rules (e2e, vecflowd XDP redirect)",
               "engine": Suite.ENGINE_GROUP, "nat": "NAT over veth (SNAT, 64 B)",
               "latency": Suite.LAT_PING_GROUP, "jumbo": "jumbo frames (veth, MTU 9000)",
               "offload": Suite.OFFLOAD_GROUP.format(Suite.OFFLOAD_PIPELINES[0][1])}


def gp_quote(text):
    """text inside a gnuplot single-quoted string, where a quote is written twice."""
    return text.replace("'", "''")


def plural(n, what):
    return f"{n} {what}{'s' if n != 1 else ''}"


def has_points(path):
    """A data file with at least two measured values (a curve needs two points)."""
    n = 0
    for line in Path(path).read_text().splitlines():
        if not line.startswith("#"):
            n += sum(1 for x in line.split()[1:] if x != "?")
    return n >= 2


def fmt_load(l):
    return "/".join(f"{x:.2f}" for x in l)


def parse_si(s):
    """'113.0 M' -> 113e6, '1.23 G' -> 1.23e9."""
    m = re.match(r"^([\d.]+)\s*([kMG]?)", s)
    if not m:
        return None
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]


def render(path):
    """Writes results.md again from results.json (after a change to the Markdown layout)."""
    data = json.loads(path.read_text())
    s = Suite.__new__(Suite)
    s.out = path.parent
    s.res = Results()
    s.res.rows = data["rows"]
    s.write_markdown(data["meta"])
    return 0


def check(path, parts=None):
    """The smoke test's assertion: every row has a measured number or an explicit reason, and
    every part of the suite produced at least one row."""
    data = json.loads(Path(path).read_text())
    rows = data["rows"]
    bad = [r for r in rows
           if not ((isinstance(r["value"], (int, float)) and r["value"] > 0)
                   or (r["value"] is None and r["reason"] and r["reason"].strip()))]
    groups = {r["group"] for r in rows}
    want = {PART_GROUPS[p] for p in (parts or data["meta"].get("parts") or PART_GROUPS)}
    missing = sorted(want - groups)
    for r in bad:
        print(f"check: row without a number or a reason: {r}", file=sys.stderr)
    if missing:
        print(f"check: no rows from: {', '.join(missing)}", file=sys.stderr)
    e2e = [r for r in rows if r["group"].startswith("end to end")]
    few_e2e = PART_GROUPS["e2e"] in want and len(e2e) < 4
    if few_e2e:
        print("check: fewer than the four end-to-end rows", file=sys.stderr)
    # The latency part has two groups: the ping's (its PART_GROUPS entry) and the one-way one.
    no_oneway = PART_GROUPS["latency"] in want and Suite.LAT_GROUP not in groups
    if no_oneway:
        print(f"check: no rows from: {Suite.LAT_GROUP}", file=sys.stderr)
    ok = not bad and not missing and not few_e2e and not no_oneway
    print(f"check: {len(rows)} rows, {sum(r['value'] is not None for r in rows)} measured, "
          f"{sum(r['value'] is None for r in rows)} with a reason: {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=str(ROOT / "build"))
    ap.add_argument("--out", default=None, help="results directory (default: "
                    "bench-results/<date-time>)")
    ap.add_argument("--quick", action="store_true",
                    help="one point per part, short rounds: checks that every part runs")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    ap.add_argument("--seconds", type=float, default=3.0,
                    help="seconds of traffic per end-to-end point and round")
    ap.add_argument("--sched-seconds", type=float, default=0.25,
                    help="seconds per scheduler point and round")
    ap.add_argument("--hugepages", action="store_true",
                    help="DPDK tools use the hugepages run.sh reserved")
    ap.add_argument("--only",
                    default="e2e,rules,sched,pipeline,steer,ports,engine,nat,latency,jumbo,"
                    "offload",
                    help="comma-separated parts to run")
    ap.add_argument("--engine-rows", default="",
                    help="engine part: only these rows (keys of ENGINE_ROWS, comma-separated; "
                    "testpmd io always runs), e.g. rn-builtin,rn-dsw")
    ap.add_argument("--engine-flows", default="",
                    help="engine part: these flow counts (comma-separated; default "
                    + ",".join(str(f) for f in ENGINE_FLOWS) + ")")
    ap.add_argument("--baseline-build", default="",
                    help="engine part: also run each vecflowd row with DIR/userspace/app/"
                    "vecflowd (a build of an earlier commit), back to back with this build's "
                    "in every round; each row gives its ratio to its baseline twin")
    ap.add_argument("--check", metavar="RESULTS_JSON",
                    help="only check a results.json (the smoke test's assertion)")
    ap.add_argument("--render", metavar="RESULTS_JSON",
                    help="only write results.md again from a results.json (same directory)")
    a = ap.parse_args()
    if a.check:
        return check(a.check)
    if a.render:
        return render(Path(a.render))
    if os.geteuid() != 0:
        print("bench: needs root (namespaces, XDP, AF_XDP, BPF_PROG_TEST_RUN)", file=sys.stderr)
        return 2
    if a.quick:
        a.rounds, a.seconds = 1, 0.5
    if a.out is None:
        a.out = str(ROOT / "bench-results" / datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    s = Suite(a)
    started = datetime.datetime.now().isoformat(timespec="seconds")
    load_start = list(os.getloadavg())
    parts = {"e2e": s.run_e2e, "rules": s.run_rules_e2e, "sched": s.run_sched,
             "pipeline": s.run_pipeline, "steer": s.run_steer, "ports": s.run_ports,
             "engine": s.run_engine, "nat": s.run_nat_e2e, "latency": s.run_latency,
             "jumbo": s.run_jumbo, "offload": s.run_offload}

    def on_term(signum, _):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        for name in a.only.split(","):
            t0 = time.monotonic()
            try:
                parts[name]()
            except FileNotFoundError as e:  # a tool that is not built
                s.res.add(PART_GROUPS[name], name, "all", reason=f"not measured: {e}")
            finally:
                s.part_seconds[name] = round(time.monotonic() - t0, 1)
    except KeyboardInterrupt:
        log("interrupted: writing what was measured")
    finally:
        s.cleanup()
    s.write(started, load_start)
    log(f"results in {s.out}")
    return check(s.out / "results.json") if a.quick else 0


if __name__ == "__main__":
    sys.exit(main())
