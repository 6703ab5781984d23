#!/usr/bin/python3
"""Boots the vecflow appliance image under qemu and sends traffic through it.

    sudo images/boot-test.py [--image IMG] [--uefi] [--log FILE]
                             [--accel auto|kvm|tcg] [--cpu MODEL] [--trafgen PATH]

Accelerator and CPU model: by default probed. With /dev/kvm, each CPU model of KVM_CPU_MODELS
(`host`, then `kvm64`, which exposes no IA32_ARCH_CAPABILITIES MSR: under nested
virtualisation `-cpu host` can die on that MSR, and the boot can stop in a KVM emulation
failure) boots the image alone until the guest kernel's first console line (seconds); the
first one that gets there is used, else TCG with `-cpu max`. --accel and --cpu override the
probe; the choice is printed. If the image boot then dies or reports a KVM/firmware error before the login prompt,
the next probed choice is tried. qemu's death, a KVM error, a firmware boot failure or a
kernel panic is reported within seconds, with the tail of the serial log.

The guest gets two virtio-net NICs in PCI slots 3 and 4, which the image names wan0 and lan0.
Each is backed by a tap device created inside its own test network namespace:

    client ns (vapc…)              guest: vecflowd                 server ns (vaps…)
    tap 192.0.2.2/24 ── wan0 192.0.2.1 │ vecflow │ lan0 198.51.100.1 ── tap 198.51.100.2/24

The test then, over the serial console:
  1. logs in as root (first login: the image asks for a new password),
  2. waits for vecflowd.service to be active (Type=notify: vecflowd has sent READY=1),
  3. runs `vecflowctl status` as a member of the vecflow group (and checks that a user
     outside the group is refused), and shows how the steering program and the AF_XDP
     sockets are attached (native or generic XDP, copy or zero-copy),
  4. turns the guest kernel's IP forwarding off, so that only vecflow can carry packets
     between wan0 and lan0, lets the guest resolve both hosts, and sends traffic between the
     namespaces: ping both ways, a TCP transfer each way (nc; the bytes must arrive whole),
     then a UDP stream (tools/trafgen) whose every packet must arrive,
  5. reads `vecflowctl accounting` until it settles and checks, per port, that
     rx = tx + kernel + dropped with nothing in flight, and that the packets vecflowd
     forwarded cover what the hosts sent through it.

The hosts send what a wire carries (as tools/lab.sh does): no tx checksum offload, TSO or
GSO on the taps, no IPv6 (its neighbour discovery would only add noise to the counts).
Prints the boot-to-ready time, every step's duration and the traffic figures. Exit 0 when
every step passed. Under software emulation (TCG) count on several minutes. Everything it creates (namespaces, taps, the hosts' processes, a copy-on-write
overlay of the image, a scratch directory) is removed on exit, failures and SIGTERM
included; the image itself is never written (qemu -snapshot). Traffic stays between the two
namespaces and the guest.
"""
import argparse
import ctypes
import fcntl
import json
import os
import re
import secrets
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TAP = 0x0002
IFF_NO_PI = 0x1000

# Time budgets under software emulation on a loaded 2-core machine. KVM is far faster.
BOOT_TIMEOUT_S = 600  # qemu start to the login prompt
READY_TIMEOUT_S = 300  # login to vecflowd active
COMMAND_TIMEOUT_S = 120  # one command on the console

CLIENT_IP, GUEST_WAN_IP = "192.0.2.2", "192.0.2.1"
SERVER_IP, GUEST_LAN_IP = "198.51.100.2", "198.51.100.1"
WAN_MAC, LAN_MAC = "52:54:00:7e:cf:01", "52:54:00:7e:cf:02"
PASSWORD = "vap-" + secrets.token_hex(8)  # the image forces a new root password at first login
PING_COUNT = 10  # echo requests each way
TCP_PORT = 5001
# Per direction. 1 MiB is about 725 full-sized segments: enough for TCP to open its window
# and keep several vectors in flight, short enough for an emulated guest (tens of seconds).
TCP_BYTES = 1 << 20
TCP_TIMEOUT_S = 180
UDP_PACKETS = 2000
UDP_RATE_PPS = 200  # low enough for an emulated guest: every packet must arrive
UDP_FLOWS = 16
TCP_MSS = 1448  # 1500-byte MTU, IPv4, TCP timestamps: the most payload one segment carries
SETTLE_TRIES = 30  # accounting samples (1 s apart) until two in a row agree, nothing in flight


# CPU models tried under KVM, best first (see the docstring).
KVM_CPU_MODELS = ("host", "kvm64")
TCG_CPU_MODEL = "max"
PROBE_TIMEOUT_S = 30  # qemu start to the kernel's first line: a few seconds under KVM

# Console text that ends a boot at once: qemu's own errors (stderr shares the console's pipe),
# KVM failures (qemu stops the guest and stays alive, so nothing else would notice), firmware
# that found nothing to boot, a guest kernel panic.
FATAL_CONSOLE = re.compile(
    r"(KVM internal error.*|.*emulation failure.*|qemu-system-x86_64: .*(?:[Ff]ailed|[Ee]rror|"
    r"[Aa]ssertion).*|.*Assertion .* failed.*|No bootable device.*|Boot failed.*|"
    r"Kernel panic - not syncing.*)")


class Failure(Exception):
    pass


class QemuFailure(Failure):
    """qemu died or reported a fatal error: another accelerator or CPU model may boot."""


def log(msg):
    print(f"[{time.monotonic() - T0:7.1f}s] {msg}", flush=True)


def run(*cmd, check=True, capture=False, timeout=60):
    r = subprocess.run(cmd, check=False, text=True, timeout=timeout,
                       stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.STDOUT if capture else None)
    if check and r.returncode != 0:
        raise Failure(f"{' '.join(cmd)} exited {r.returncode}: {r.stdout or ''}")
    return r


class Netns:
    """A network namespace with a tap device whose file descriptor qemu inherits.

    The host in it sends what a wire carries: checksums filled in, frames of at most the MTU
    (no tx checksum offload, TSO or GSO), IPv4 only. Its gateway's MAC is the guest NIC's,
    set statically, so the host never depends on ARP through the appliance."""

    libc = ctypes.CDLL("libc.so.6", use_errno=True)

    def __init__(self, name, tap, address, gateway, gateway_mac):
        self.name, self.tap, self.tap_fd, self.procs = name, tap, None, []
        run("ip", "netns", "add", name)
        try:
            self.tap_fd = self._create_tap()
            ns = ["ip", "netns", "exec", name]
            run(*ns, "ip", "link", "set", "lo", "up")
            run(*ns, "sysctl", "-qw", f"net.ipv6.conf.{tap}.disable_ipv6=1")
            run(*ns, "ethtool", "-K", tap, "tx", "off", "tso", "off", "gso", "off", capture=True)
            run(*ns, "ip", "addr", "add", f"{address}/24", "dev", tap)
            run(*ns, "ip", "link", "set", tap, "up")
            run(*ns, "ip", "neigh", "replace", gateway, "lladdr", gateway_mac, "dev", tap,
                "nud", "permanent")
            run(*ns, "ip", "route", "add", "default", "via", gateway)
        except BaseException:
            self.remove()
            raise

    def _setns(self, fd):
        if self.libc.setns(fd, CLONE_NEWNET) != 0:
            raise Failure(f"setns: {os.strerror(ctypes.get_errno())}")

    def _create_tap(self):
        # The tap is made inside the namespace and lives as long as its descriptor: when the
        # test and qemu are gone, so is the tap.
        home = os.open("/proc/self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{self.name}", os.O_RDONLY)
        try:
            self._setns(target)
            fd = os.open("/dev/net/tun", os.O_RDWR)
            fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", self.tap.encode(), IFF_TAP | IFF_NO_PI))
            os.set_inheritable(fd, True)
            return fd
        finally:
            self._setns(home)
            os.close(home)
            os.close(target)

    def exec(self, *cmd, **kw):
        return run("ip", "netns", "exec", self.name, *cmd, **kw)

    def spawn(self, *cmd, **kw):
        """Starts a command in the namespace; remove() kills it if it still runs."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.name, *cmd], **kw)
        self.procs.append(proc)
        return proc

    def remove(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if self.tap_fd is not None:
            os.close(self.tap_fd)
        run("ip", "netns", "del", self.name, check=False)

class Console:
    """The guest's serial console (qemu -serial stdio)."""

    def __init__(self, proc, transcript):
        self.proc, self.buf, self.transcript = proc, "", transcript
        self.tail = ""  # the last few KB of console text, for failure reports
        self.pending = ""  # an unfinished last line, for the fatal-text check
        self.watch_fatal = True  # off once logged in: the test's own output is not qemu's
        os.set_blocking(proc.stdout.fileno(), False)

    def tail_lines(self, n=25):
        lines = [l for l in self.tail.split("\n") if l.strip()]
        return "\n".join("    | " + l for l in lines[-n:])

    def _read(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            if self.proc.poll() is not None:
                raise QemuFailure(f"qemu exited (status {self.proc.returncode}); serial log "
                                  f"ends with:\n{self.tail_lines()}")
            return
        data = os.read(self.proc.stdout.fileno(), 65536)
        if not data:
            status = self.proc.wait()
            raise QemuFailure(f"qemu exited (status {status}); serial log ends with:\n"
                              f"{self.tail_lines()}")
        text = data.decode(errors="replace").replace("\r", "")
        self.transcript.write(text)
        self.transcript.flush()
        self.buf += text
        self.tail = (self.tail + text)[-8192:]
        if self.watch_fatal:
            lines = (self.pending + text).split("\n")
            self.pending = lines.pop()
            for line in lines:
                m = FATAL_CONSOLE.search(line)
                if m:
                    # A moment for the rest of qemu's report, then the tail with it.
                    time.sleep(0.5)
                    try:
                        more = os.read(self.proc.stdout.fileno(), 65536)
                        self.tail = (self.tail + more.decode(errors="replace"))[-8192:]
                        self.transcript.write(more.decode(errors="replace"))
                    except (BlockingIOError, OSError):
                        pass
                    raise QemuFailure(f"fatal console message: {m.group(0).strip()!r}; "
                                      f"serial log ends with:\n{self.tail_lines()}")

    def expect(self, patterns, timeout):
        """Waits for one of the regexes; returns (index, match) and drops the text before it."""
        deadline = time.monotonic() + timeout
        compiled = [re.compile(p) for p in patterns]
        while True:
            for i, c in enumerate(compiled):
                m = c.search(self.buf)
                if m:
                    self.buf = self.buf[m.end():]
                    return i, m
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure(f"timed out after {timeout}s waiting for {patterns}; "
                              f"console ends with: {self.buf[-400:]!r}")
            self._read(min(left, 1.0))

    def send(self, text):
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def command(self, cmd, timeout=COMMAND_TIMEOUT_S):
        """Runs a shell command in the guest; returns (exit status, output)."""
        tag = secrets.token_hex(4)
        # The end marker is built by the shell, so the echoed command line never matches it.
        self.send(f"echo BEGIN{tag}; {cmd}; echo END{tag}=$((0+$?))\n")
        self.expect([rf"(?m)^BEGIN{tag}\n"], timeout)
        _, m = self.expect([rf"(?s)(.*?)END{tag}=(\d+)\n"], timeout)
        return int(m.group(2)), m.group(1)


def probe(qemu, accel, cpu, image, firmware):
    """Boots the image alone (no NICs, qemu -snapshot) with this accelerator and CPU model
    until the guest kernel prints its first line on the serial console: firmware, boot loader
    and the kernel's entry then ran. Returns None if they did, else why not. (Measured on a
    nested-KVM machine: SeaBIOS alone runs with every model, then SYSLINUX's switch between
    real and protected mode stops in a KVM emulation failure: the firmware is not enough.)"""
    cmd = [qemu, "-machine", "pc", "-m", "512", "-smp", "1", "-accel", accel, "-cpu", cpu,
           "-display", "none", "-vga", "none", "-serial", "stdio", "-monitor", "none",
           "-nic", "none", "-no-reboot", "-snapshot",
           "-drive", f"file={image},format=raw,if=virtio"] + firmware
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    os.set_blocking(proc.stdout.fileno(), False)
    deadline, text = time.monotonic() + PROBE_TIMEOUT_S, ""
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            data = os.read(proc.stdout.fileno(), 65536) if ready else b""
            text += data.decode(errors="replace")
            fatal = FATAL_CONSOLE.search(text)
            if fatal:
                return fatal.group(0).strip()
            if "Linux version" in text:
                return None
            if ready and not data:
                lines = [l for l in text.replace("\r", "").split("\n") if l.strip()]
                return f"qemu exited {proc.wait()}: {' / '.join(lines[-3:])}"
        return f"no kernel message on the serial console in {PROBE_TIMEOUT_S}s"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()


def choices(args, qemu, firmware):
    """(accelerator, CPU model, how chosen) to boot with, best first."""
    if args.accel == "tcg":
        return [("tcg", args.cpu or TCG_CPU_MODEL, "--accel tcg")]
    if args.accel == "kvm" and args.cpu:
        return [("kvm", args.cpu, "--accel kvm --cpu")]
    found = []
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        if args.accel == "kvm":
            raise Failure("--accel kvm: /dev/kvm is not there or not accessible")
        log("accelerator probe: no usable /dev/kvm")
    else:
        for cpu in ([args.cpu] if args.cpu else KVM_CPU_MODELS):
            t = time.monotonic()
            why = probe(qemu, "kvm", cpu, args.image, firmware)
            log(f"accelerator probe: kvm -cpu {cpu}: "
                f"{why or 'the guest kernel starts'} ({time.monotonic() - t:.1f}s)")
            if why is None:
                found.append(("kvm", cpu, "probed"))
        if args.accel == "kvm" and not found:
            raise Failure("--accel kvm: no CPU model starts the guest kernel under KVM")
    if args.accel != "kvm":
        found.append(("tcg", TCG_CPU_MODEL if args.accel == "auto" or not args.cpu else args.cpu,
                      "fallback" if found else "probed"))
    return found


def login(console):
    console.expect([r"login: "], BOOT_TIMEOUT_S)
    console.send("root\n")
    while True:
        i, _ = console.expect([r"New password: $", r"Retype new password: $", r"# $"],
                              COMMAND_TIMEOUT_S)
        if i == 2:
            break
        console.send(PASSWORD + "\n")
    # Quiet the kernel on the console, a plain prompt, no echo: command output stays parseable.
    console.send("dmesg -n 1; stty -echo; PS1='# '; export SYSTEMD_PAGER= SYSTEMD_COLORS=0\n")
    console.command("true")
    # The guest is up: from here the console carries the test's own commands and output
    # (journal lines may say "failed"); qemu's death is still noticed at once.
    console.watch_fatal = False


def wait_ready(console):
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        _, state = console.command("systemctl is-active vecflowd.service")
        state = state.strip()
        if state == "active":
            return
        if state == "failed" or time.monotonic() > deadline:
            _, journal = console.command("journalctl -u vecflowd.service --no-pager -n 60")
            raise Failure(f"vecflowd.service is {state}:\n{journal}")
        time.sleep(2)


def guest_ok(console, cmd, what):
    rc, out = console.command(cmd)
    if rc != 0:
        raise Failure(f"{what}: `{cmd}` exited {rc}:\n{out}")
    return out


def guest_json(console, args, what):
    out = guest_ok(console, f"vecflowctl --json {args}", what)
    try:
        return json.loads(out)
    except json.JSONDecodeError as e:
        raise Failure(f"{what}: `vecflowctl --json {args}` printed no JSON ({e}):\n{out}")


COUNTERS = ("rx_packets", "tx_packets", "kernel_packets", "dropped")


def settled_accounting(console):
    """`vecflowctl accounting` once nothing is in flight and two samples (the control plane
    samples once a second) agree: {port: row}."""
    last = None
    for _ in range(SETTLE_TRIES):
        rows = guest_json(console, "accounting", "accounting")["ports"]
        counts = {r["port"]: {k: r[k] for k in COUNTERS} for r in rows}
        if all(r["in_flight"] == 0 for r in rows) and counts == last:
            return counts
        last = counts
        time.sleep(1)
    raise Failure(f"the accounting did not settle in {SETTLE_TRIES} samples: {rows}")


def wait_neighbours(console, ips):
    """The neighbour stage learns the hosts from the guest kernel's table."""
    for _ in range(SETTLE_TRIES):
        entries = guest_json(console, "neighbours", "neighbours")["entries"]
        resolved = {e["ip"] for e in entries if e["state"] == "resolved"}
        if set(ips) <= resolved:
            return
        time.sleep(1)
    raise Failure(f"vecflowd did not resolve {ips}: {entries}")


def ping(ns, target, what):
    r = ns.exec("ping", "-c", str(PING_COUNT), "-i", "0.2", "-W", "5", target, capture=True,
                check=False, timeout=120)
    print(r.stdout, flush=True)
    if r.returncode != 0 or " 0% packet loss" not in r.stdout:
        raise Failure(f"ping {what} lost packets")
    rtt = re.search(r"= [\d.]+/([\d.]+)/", r.stdout)
    return float(rtt.group(1)) if rtt else float("nan")


def wait_listening(ns, port):
    for _ in range(50):
        out = ns.exec("ss", "-Hltn", f"sport = :{port}", capture=True).stdout
        if out.strip():
            return
        time.sleep(0.1)
    raise Failure(f"nc in {ns.name} is not listening on port {port}")


def tcp_transfer(sender, receiver, receiver_ip, scratch, label):
    """Sends TCP_BYTES from sender to receiver with nc; returns the seconds it took."""
    src, dst = scratch / f"{label}.sent", scratch / f"{label}.received"
    src.write_bytes(os.urandom(TCP_BYTES))
    with open(dst, "wb") as out:
        listener = receiver.spawn("timeout", str(TCP_TIMEOUT_S), "nc", "-d", "-l", "-p",
                                  str(TCP_PORT), stdout=out, stderr=subprocess.STDOUT)
    wait_listening(receiver, TCP_PORT)
    started = time.monotonic()
    with open(src, "rb") as data:
        r = subprocess.run(["ip", "netns", "exec", sender.name, "timeout", str(TCP_TIMEOUT_S),
                            "nc", "-N", "-w", "10", receiver_ip, str(TCP_PORT)],
                           stdin=data, capture_output=True, text=True, timeout=TCP_TIMEOUT_S + 30)
    try:
        listener.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    elapsed = time.monotonic() - started
    got = dst.stat().st_size
    if r.returncode != 0 or listener.returncode != 0 or src.read_bytes() != dst.read_bytes():
        tcp_state = "".join(
            f"\n  {ns.name}: " + ns.exec("ss", "-Htnio", f"( sport = :{TCP_PORT} or "
                                         f"dport = :{TCP_PORT} )", capture=True).stdout.strip()
            for ns in (sender, receiver))
        if listener.poll() is None:
            listener.kill()
            listener.wait()
        raise Failure(f"TCP {label}: sender exited {r.returncode} ({r.stderr.strip()}), "
                      f"receiver {'still waiting' if listener.returncode < 0 else 'exited'}, "
                      f"{got} of {TCP_BYTES} bytes arrived"
                      f"{'' if got != TCP_BYTES else ' but differ'}; TCP state:{tcp_state}")
    return elapsed


def show_attachment(console):
    """How XDP and AF_XDP attached in the guest: virtio-net under TCG has no zero-copy AF_XDP
    (copy mode is expected); the kernel's view (`xdp` native, `xdpgeneric`) is shown beside
    vecflowd's."""
    status = guest_json(console, "status", "status")
    for st in status.get("steering", []):
        log(f"steering on {st['interface']} (port {st['port']}): {st['attach']}, "
            f"{st['mode']} XDP")
    for pt in status.get("ports", []):
        log(f"port {pt['name']} ({pt['type']} on {pt['interface']}): {pt['state']}, "
            f"{pt['queues']} queue(s), {pt['mode']}")
    print(guest_ok(console, "ip -d link show wan0 | grep -o 'prog/xdp[a-z]* id [0-9]*'; "
                   "ip -d link show lan0 | grep -o 'prog/xdp[a-z]* id [0-9]*'",
                   "XDP attachment in the kernel"), flush=True)


def show_identity(console):
    """The user vecflowd runs as (the unit's User=vecflow, not root), its capabilities, and
    libxdp's state in the service's own bpffs directory (the unit's LIBXDP_BPFFS)."""
    ident = guest_ok(console, "ps -o user=,group= -C vecflowd; "
                     "grep -E '^Cap(Eff|Bnd|Amb)' /proc/$(pgrep -x vecflowd)/status; "
                     "ls -l /sys/fs/bpf/vecflow/xdp", "vecflowd's identity")
    print(ident, flush=True)
    user = ident.split()[0] if ident.split() else ""
    if user != "vecflow":
        raise Failure(f"vecflowd runs as '{user}', not as the service user vecflow")
    log("vecflowd runs as user vecflow")


def restart_service(console):
    """A stop and a start of the service as its user: vecflowd detaches its programs at stop
    (libxdp's lock and pins under /sys/fs/bpf/vecflow; finding the programs takes
    CAP_SYS_ADMIN) and attaches them again. The traffic then runs on the new instance."""
    guest_ok(console, "systemctl restart vecflowd.service", "systemctl restart vecflowd")
    wait_ready(console)
    stop = guest_ok(console, "journalctl -u vecflowd.service -o cat --no-pager | "
                    "grep -E 'detached from|stopped cleanly|steering attached'",
                    "vecflowd's stop and start in the journal")
    print(stop, flush=True)
    if "stopped cleanly" not in stop:
        raise Failure(f"vecflowd did not stop cleanly on restart:\n{stop}")
    log("vecflowd restarted: stopped cleanly, active again")


def check_accounting(before, after, expected_forwarded):
    """Per port: rx = tx + kernel + dropped, and what it forwarded covers what the hosts sent
    in through it. Returns the deltas."""
    deltas = {}
    for port, row in after.items():
        if row["rx_packets"] != row["tx_packets"] + row["kernel_packets"] + row["dropped"]:
            raise Failure(f"port {port}: rx {row['rx_packets']} != tx {row['tx_packets']} + "
                          f"kernel {row['kernel_packets']} + dropped {row['dropped']}")
        deltas[port] = {k: row[k] - before[port][k] for k in COUNTERS}
    for port, least in expected_forwarded.items():
        if deltas[port]["tx_packets"] < least:
            raise Failure(f"port {port}: vecflowd forwarded {deltas[port]['tx_packets']} packets "
                          f"that entered it during the traffic, the hosts sent at least {least}")
    return deltas


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_image = sorted((REPO / "build/image").glob("vecflow-*-amd64.img"))
    ap.add_argument("--image", type=Path, default=default_image[-1] if default_image else None)
    ap.add_argument("--uefi", action="store_true", help="boot with OVMF instead of SeaBIOS")
    ap.add_argument("--log", type=Path, default=REPO / "build/image/boot-test-console.log",
                    help="where the console transcript goes")
    ap.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                    help="auto: KVM if a probed CPU model starts the guest kernel, else TCG")
    ap.add_argument("--cpu", help="qemu CPU model (default: probed under KVM, max under TCG)")
    ap.add_argument("--trafgen", type=Path, default=REPO / "build/tools/trafgen/trafgen",
                    help="the traffic generator of a build with tests (tools/trafgen)")
    args = ap.parse_args()

    if os.geteuid() != 0:
        sys.exit("boot-test: needs root (namespaces, taps): sudo " + sys.argv[0])
    if not args.image or not args.image.exists():
        sys.exit("boot-test: no image: build one with `sudo images/build-image.sh` or give --image")
    qemu = shutil.which("qemu-system-x86_64")
    if not qemu:
        sys.exit("boot-test: apt-get install qemu-system-x86")
    for tool, package in (("nc", "netcat-openbsd"), ("ethtool", "ethtool"), ("ss", "iproute2")):
        if not shutil.which(tool):
            sys.exit(f"boot-test: apt-get install {package}")
    trafgen = args.trafgen.resolve()
    if not trafgen.exists():
        sys.exit("boot-test: build tools/trafgen first (ninja -C build trafgen) or give --trafgen")
    ovmf = Path("/usr/share/ovmf/OVMF.fd")
    if args.uefi and not ovmf.exists():
        sys.exit("boot-test: apt-get install ovmf")

    # SIGTERM (a CI timeout) unwinds like a failure: the finally below removes what we made.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tag = secrets.token_hex(3)
    client = server = proc = console = None
    args.log.parent.mkdir(parents=True, exist_ok=True)
    transcript = open(args.log, "w")
    scratch = Path(tempfile.mkdtemp(prefix=f"vap{tag}-"))
    timings, figures = {}, {}
    try:
        client = Netns(f"vapc{tag}", f"vapw{tag}", CLIENT_IP, GUEST_WAN_IP, WAN_MAC)
        server = Netns(f"vaps{tag}", f"vapl{tag}", SERVER_IP, GUEST_LAN_IP, LAN_MAC)
        firmware = ["-bios", str(ovmf)] if args.uefi else []
        options = choices(args, qemu, firmware)
        for n, (accel, cpu, how) in enumerate(options):
            cmd = [qemu, "-machine", "pc", "-m", "1536", "-smp", "2",
                   "-accel", "tcg,thread=multi" if accel == "tcg" else accel, "-cpu", cpu,
                   "-display", "none", "-vga", "none", "-serial", "stdio", "-monitor", "none",
                   "-nic", "none", "-no-reboot", "-snapshot",
                   "-drive", f"file={args.image},format=raw,if=virtio",
                   "-netdev", f"tap,id=wan,fd={client.tap_fd}",
                   "-device", f"virtio-net-pci,netdev=wan,addr=0x3,mac={WAN_MAC}",
                   "-netdev", f"tap,id=lan,fd={server.tap_fd}",
                   "-device", f"virtio-net-pci,netdev=lan,addr=0x4,mac={LAN_MAC}"]
            cmd += firmware
            log(f"booting {args.image.name}: accelerator {accel}, -cpu {cpu} ({how})"
                f"{', UEFI' if args.uefi else ', BIOS'}; console: {args.log}")
            figures["accelerator, CPU model"] = f"{accel}, {cpu} ({how})"
            started = time.monotonic()
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT,
                                    pass_fds=(client.tap_fd, server.tap_fd))
            console = Console(proc, transcript)
            try:
                login(console)
                break
            except QemuFailure as e:
                # Only a probed choice falls back; one the caller forced fails the test.
                if n + 1 == len(options) or how.startswith("--"):
                    raise
                log(f"boot with {accel} -cpu {cpu} failed after "
                    f"{time.monotonic() - started:.0f}s: {e}")
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                proc.stdout.close()
                proc.stdin.close()
        timings["boot to login prompt"] = time.monotonic() - started
        log(f"logged in on the serial console ({timings['boot to login prompt']:.0f}s)")
        wait_ready(console)
        timings["boot to vecflowd ready"] = time.monotonic() - started
        ready_us = guest_ok(console, "systemctl show -P ActiveEnterTimestampMonotonic vecflowd",
                            "readiness time")
        timings["guest kernel start to ready"] = int(ready_us.strip()) / 1e6
        log(f"vecflowd.service active (READY=1) {timings['boot to vecflowd ready']:.0f}s after "
            f"qemu start, {timings['guest kernel start to ready']:.1f}s after the guest kernel")
        print(guest_ok(console, "systemd-analyze time; ip -br link; ip -br addr; "
                       "journalctl -u vecflowd.service -o cat --no-pager", "guest state"),
              flush=True)
        # The sandbox as the guest's systemd rates the running service (vecflowd(8): SERVICE).
        exposure = guest_ok(console, "systemd-analyze security --no-pager vecflowd.service | "
                            "tail -1", "systemd-analyze security").strip()
        m = re.search(r"exposure level for vecflowd.service: ([\d.]+)", exposure)
        figures["systemd-analyze security exposure"] = m.group(1) if m else exposure
        log(f"systemd-analyze security: {exposure}")

        guest_ok(console, "useradd -G vecflow vapop && useradd vapout", "test users")
        status = guest_ok(console, "runuser -u vapop -- vecflowctl status",
                          "vecflowctl status as a member of group vecflow")
        print(status, flush=True)
        for word in ("wan", "lan"):
            if word not in status:
                raise Failure(f"vecflowctl status does not show port {word}:\n{status}")
        rc, out = console.command("runuser -u vapout -- vecflowctl status")
        if rc == 0:
            raise Failure(f"vecflowctl status worked for a user outside group vecflow:\n{out}")
        log("vecflowctl status answers a member of vecflow and refuses others")
        show_identity(console)
        restart_service(console)
        show_attachment(console)

        # From here on only vecflow can carry packets between wan0 and lan0.
        guest_ok(console, "sysctl -qw net.ipv4.ip_forward=0", "turn kernel forwarding off")
        # The guest resolves both hosts (the neighbour stage reads the kernel's table); the
        # echo replies come back through vecflowd, which hands them to the kernel (host-bound).
        guest_ok(console, f"ping -c 1 -W 10 {CLIENT_IP} && ping -c 1 -W 10 {SERVER_IP}",
                 "the guest pinging both hosts")
        wait_neighbours(console, [CLIENT_IP, SERVER_IP])
        # The appliance's own addresses answer the hosts (ICMP to it: vecflowd's kernel path).
        client.exec("ping", "-c", "2", "-W", "5", GUEST_WAN_IP, capture=True)
        server.exec("ping", "-c", "2", "-W", "5", GUEST_LAN_IP, capture=True)
        log("the guest and both hosts reach each other; vecflowd resolved both hosts")
        before = settled_accounting(console)

        # Every traffic step runs even when one before it failed, so that one run shows all
        # that works and all that does not; the accounting is checked over all of them.
        failures = []
        # Packets each port must have forwarded, from the steps that passed (ingress port).
        expected = {"wan": 0, "lan": 0}

        def step(name, fn):
            t = time.monotonic()
            try:
                fn()
                timings[name] = time.monotonic() - t
            except (Failure, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                log(f"FAILED: {name}: {e}")
                failures.append(name)

        def pings():
            figures["ping client -> server, avg rtt ms"] = ping(client, SERVER_IP,
                                                                "client -> server")
            figures["ping server -> client, avg rtt ms"] = ping(server, CLIENT_IP,
                                                                "server -> client")
            # Requests and replies: PING_COUNT of each entered on each port.
            expected["wan"] += 2 * PING_COUNT
            expected["lan"] += 2 * PING_COUNT
            log(f"{PING_COUNT} echoes each way crossed vecflow, none lost")
        step("ping both ways", pings)

        segments = -(-TCP_BYTES // TCP_MSS)
        for sender, receiver, ip, label, ingress in (
                (client, server, SERVER_IP, "client -> server", "wan"),
                (server, client, CLIENT_IP, "server -> client", "lan")):
            def transfer(sender=sender, receiver=receiver, ip=ip, label=label, ingress=ingress):
                took = tcp_transfer(sender, receiver, ip, scratch, label.replace(" -> ", "-to-"))
                figures[f"TCP {label}, KiB/s"] = TCP_BYTES / 1024 / took
                expected[ingress] += segments
                log(f"TCP {label}: {TCP_BYTES} bytes arrived whole in {took:.1f}s "
                    f"({TCP_BYTES / 1024 / took:.0f} KiB/s)")
            step(f"TCP {label}", transfer)

        def udp():
            duration = UDP_PACKETS / UDP_RATE_PPS
            recv = server.spawn(str(trafgen), "recv", "--dev", server.tap, "--duration",
                                str(duration + 15), "--idle-exit", "5000", "--json",
                                stdout=subprocess.PIPE, text=True)
            time.sleep(1)
            sent = client.exec(str(trafgen), "send", "--dev", client.tap, "--dst", SERVER_IP,
                               "--dst-mac", WAN_MAC, "--flows", str(UDP_FLOWS), "--rate",
                               str(UDP_RATE_PPS), "--count", str(UDP_PACKETS), "--json",
                               capture=True, timeout=duration + 60).stdout
            got, _ = recv.communicate(timeout=duration + 60)
            print(f"trafgen send: {sent.strip()}\ntrafgen recv: {got.strip()}", flush=True)
            received = json.loads(got)["received"]
            figures["UDP packets sent / received"] = f"{UDP_PACKETS} / {received}"
            if received != UDP_PACKETS:
                raise Failure(f"{UDP_PACKETS} UDP packets sent through vecflow, "
                              f"{received} arrived")
            expected["wan"] += UDP_PACKETS
            log(f"{UDP_PACKETS} UDP packets in {UDP_FLOWS} flows crossed vecflow, none lost")
        step("UDP stream client -> server", udp)

        after = settled_accounting(console)
        print(guest_ok(console, "vecflowctl accounting; vecflowctl ports; vecflowctl errors",
                       "counters"), flush=True)
        deltas = check_accounting(before, after, expected)
        for port, d in deltas.items():
            figures[f"{port}: rx = tx + kernel + dropped (traffic)"] = (
                f"{d['rx_packets']} = {d['tx_packets']} + {d['kernel_packets']} + "
                f"{d['dropped']}")
        log(f"accounting exact on both ports, nothing in flight; forwarded counts cover the "
            f"traffic that arrived (at least {expected['wan']} from wan, "
            f"{expected['lan']} from lan)")
        if failures:
            for k, v in figures.items():
                print(f"  {k:42s} {v:.1f}" if isinstance(v, float) else f"  {k:42s} {v}")
            raise Failure(f"traffic steps failed: {', '.join(failures)}")

        console.send("systemctl poweroff\n")
        proc.wait(timeout=COMMAND_TIMEOUT_S)
        print("\nboot test passed")
        for k, v in timings.items():
            print(f"  {k:42s} {v:7.1f} s")
        for k, v in figures.items():
            print(f"  {k:42s} {v:.1f}" if isinstance(v, float) else f"  {k:42s} {v}")
        return 0
    except (Failure, subprocess.TimeoutExpired, json.JSONDecodeError) as e:
        log(f"FAILED: {e}")
        if console and proc.poll() is None:
            try:
                # The verifier's instruction listing is left out: its verdict stays.
                _, journal = console.command(
                    "journalctl -u vecflowd.service -o cat --no-pager | "
                    "grep -v '^steer: [0-9;]' | tail -100", timeout=60)
                print(f"vecflowd's journal:\n{journal}", flush=True)
                _, state = console.command(
                    "vecflowctl accounting; vecflowctl errors; vecflowctl steering; "
                    "vecflowctl neighbours; ip -s -br link; ip neigh", timeout=60)
                print(f"guest state:\n{state}", flush=True)
            except (Failure, OSError) as again:
                log(f"(the console did not answer for the journal: {again})")
        for ns in (client, server):
            if ns:
                r = ns.exec("sh", "-c", f"ip -s link show dev {ns.tap}; ss -tnio", capture=True,
                            check=False)
                print(f"host {ns.name}:\n{r.stdout}", flush=True)
        log(f"console transcript: {args.log}")
        return 1
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        for ns in (client, server):
            if ns:
                ns.remove()
        shutil.rmtree(scratch, ignore_errors=True)
        transcript.close()


T0 = time.monotonic()
if __name__ == "__main__":
    sys.exit(main())
