#!/usr/bin/python3
"""Boots the vecflow appliance image under qemu and sends traffic through it.

    sudo images/boot-test.py [--image IMG] [--uefi] [--log FILE]

The guest gets two virtio-net NICs in PCI slots 3 and 4, which the image names wan0 and lan0.
Each is backed by a tap device created inside its own test network namespace:

    client ns (vapc…)              guest: vecflowd                 server ns (vaps…)
    tap 192.0.2.2/24 ── wan0 192.0.2.1 │ vecflow │ lan0 198.51.100.1 ── tap 198.51.100.2/24

The test then, over the serial console:
  1. logs in as root (first login: the image asks for a new password),
  2. waits for vecflowd.service to be active (Type=notify: vecflowd has sent READY=1),
  3. runs `vecflowctl status` as a member of the vecflow group (and checks that a user
     outside the group is refused),
  4. turns the guest kernel's IP forwarding off, so that only vecflow can carry packets
     between wan0 and lan0, and sends traffic from the client namespace to the server
     namespace: ping, then a UDP stream (tools/trafgen) whose every packet must arrive.

Prints the boot-to-ready time and every step's duration. Exit 0 when every step passed.
Software emulation (TCG) is used when /dev/kvm is absent: count on several minutes.
Everything it creates (namespaces, taps, a copy-on-write overlay of the image) is removed
on exit; the image itself is never written (qemu -snapshot).
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
import struct
import subprocess
import sys
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
UDP_PACKETS = 2000
UDP_RATE_PPS = 200  # low enough for an emulated guest: every packet must arrive


class Failure(Exception):
    pass


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
    """A network namespace with a tap device whose file descriptor qemu inherits."""

    libc = ctypes.CDLL("libc.so.6", use_errno=True)

    def __init__(self, name, tap, address, gateway):
        self.name, self.tap = name, tap
        run("ip", "netns", "add", name)
        self.tap_fd = self._create_tap()
        ns = ["ip", "netns", "exec", name]
        run(*ns, "ip", "link", "set", "lo", "up")
        run(*ns, "ip", "addr", "add", f"{address}/24", "dev", tap)
        run(*ns, "ip", "link", "set", tap, "up")
        run(*ns, "ip", "route", "add", "default", "via", gateway)

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

    def remove(self):
        os.close(self.tap_fd)
        run("ip", "netns", "del", self.name, check=False)


class Console:
    """The guest's serial console (qemu -serial stdio)."""

    def __init__(self, proc, transcript):
        self.proc, self.buf, self.transcript = proc, "", transcript
        os.set_blocking(proc.stdout.fileno(), False)

    def _read(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return
        data = os.read(self.proc.stdout.fileno(), 65536)
        if not data:
            raise Failure(f"qemu exited (status {self.proc.wait()})")
        text = data.decode(errors="replace").replace("\r", "")
        self.transcript.write(text)
        self.transcript.flush()
        self.buf += text

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default_image = sorted((REPO / "build/image").glob("vecflow-*-amd64.img"))
    ap.add_argument("--image", type=Path, default=default_image[-1] if default_image else None)
    ap.add_argument("--uefi", action="store_true", help="boot with OVMF instead of SeaBIOS")
    ap.add_argument("--log", type=Path, default=REPO / "build/image/boot-test-console.log",
                    help="where the console transcript goes")
    args = ap.parse_args()

    if os.geteuid() != 0:
        sys.exit("boot-test: needs root (namespaces, taps): sudo " + sys.argv[0])
    if not args.image or not args.image.exists():
        sys.exit("boot-test: no image: build one with `sudo images/build-image.sh` or give --image")
    qemu = shutil.which("qemu-system-x86_64")
    if not qemu:
        sys.exit("boot-test: apt-get install qemu-system-x86")
    trafgen = REPO / "build/tools/trafgen/trafgen"
    if not trafgen.exists():
        sys.exit("boot-test: build tools/trafgen first: ninja -C build trafgen")
    ovmf = Path("/usr/share/ovmf/OVMF.fd")
    if args.uefi and not ovmf.exists():
        sys.exit("boot-test: apt-get install ovmf")

    tag = secrets.token_hex(3)
    client = server = proc = None
    args.log.parent.mkdir(parents=True, exist_ok=True)
    transcript = open(args.log, "w")
    timings = {}
    try:
        client = Netns(f"vapc{tag}", f"vapw{tag}", CLIENT_IP, GUEST_WAN_IP)
        server = Netns(f"vaps{tag}", f"vapl{tag}", SERVER_IP, GUEST_LAN_IP)
        kvm = os.access("/dev/kvm", os.R_OK | os.W_OK)
        cmd = [qemu, "-machine", "pc", "-m", "1536", "-smp", "2",
               "-accel", "kvm" if kvm else "tcg,thread=multi",
               "-cpu", "host" if kvm else "max",
               "-display", "none", "-vga", "none", "-serial", "stdio", "-monitor", "none",
               "-nic", "none", "-no-reboot", "-snapshot",
               "-drive", f"file={args.image},format=raw,if=virtio",
               "-netdev", f"tap,id=wan,fd={client.tap_fd}",
               "-device", f"virtio-net-pci,netdev=wan,addr=0x3,mac={WAN_MAC}",
               "-netdev", f"tap,id=lan,fd={server.tap_fd}",
               "-device", f"virtio-net-pci,netdev=lan,addr=0x4,mac={LAN_MAC}"]
        if args.uefi:
            cmd += ["-bios", str(ovmf)]
        log(f"booting {args.image.name} ({'KVM' if kvm else 'TCG, no /dev/kvm'}"
            f"{', UEFI' if args.uefi else ', BIOS'}); console: {args.log}")
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                pass_fds=(client.tap_fd, server.tap_fd))
        console = Console(proc, transcript)

        login(console)
        timings["boot to login prompt"] = time.monotonic() - started
        log(f"logged in on the serial console ({timings['boot to login prompt']:.0f}s)")
        wait_ready(console)
        timings["boot to vecflowd ready"] = time.monotonic() - started
        ready_us = guest_ok(console, "systemctl show -P ActiveEnterTimestampMonotonic vecflowd",
                            "readiness time")
        timings["guest kernel start to ready"] = int(ready_us.strip()) / 1e6
        log(f"vecflowd.service active (READY=1) {timings['boot to vecflowd ready']:.0f}s after "
            f"qemu start, {timings['guest kernel start to ready']:.1f}s after the guest kernel")
        print(guest_ok(console, "systemd-analyze time; ip -br link; ip -br addr", "guest state"),
              flush=True)

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

        # From here on only vecflow can carry packets between wan0 and lan0.
        guest_ok(console, "sysctl -qw net.ipv4.ip_forward=0", "turn kernel forwarding off")
        # The guest kernel learns both hosts' MACs (the neighbour stage reads its table).
        client.exec("ping", "-c", "1", "-W", "5", GUEST_WAN_IP, capture=True)
        server.exec("ping", "-c", "1", "-W", "5", GUEST_LAN_IP, capture=True)

        t = time.monotonic()
        r = client.exec("ping", "-c", "10", "-i", "0.5", "-W", "5", SERVER_IP, capture=True,
                        check=False, timeout=120)
        print(r.stdout, flush=True)
        if r.returncode != 0 or " 0% packet loss" not in r.stdout:
            raise Failure("ping from the client namespace through vecflow to the server "
                          "namespace lost packets")
        timings["ping through vecflow"] = time.monotonic() - t

        t = time.monotonic()
        gw_mac = client.exec("ip", "-j", "neigh", "show", GUEST_WAN_IP, capture=True).stdout
        gw_mac = json.loads(gw_mac)[0]["lladdr"]
        duration = UDP_PACKETS / UDP_RATE_PPS
        recv = subprocess.Popen(["ip", "netns", "exec", server.name, str(trafgen), "recv",
                                 "--dev", server.tap, "--duration", str(duration + 15),
                                 "--idle-exit", "5000", "--json"],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        sent = client.exec(str(trafgen), "send", "--dev", client.tap, "--dst", SERVER_IP,
                           "--dst-mac", gw_mac, "--flows", "16", "--rate", str(UDP_RATE_PPS),
                           "--count", str(UDP_PACKETS), "--json", capture=True,
                           timeout=duration + 60).stdout
        got, _ = recv.communicate(timeout=duration + 60)
        print(f"trafgen send: {sent.strip()}\ntrafgen recv: {got.strip()}", flush=True)
        received = json.loads(got)["received"]
        if received != UDP_PACKETS:
            raise Failure(f"{UDP_PACKETS} UDP packets sent through vecflow, {received} arrived")
        timings["UDP stream through vecflow"] = time.monotonic() - t
        print(guest_ok(console, "vecflowctl ports", "port counters"), flush=True)
        log(f"{UDP_PACKETS} UDP packets in 16 flows crossed vecflow, none lost")

        console.send("systemctl poweroff\n")
        proc.wait(timeout=COMMAND_TIMEOUT_S)
        print("\nboot test passed")
        for k, v in timings.items():
            print(f"  {k:32s} {v:7.1f} s")
        return 0
    except (Failure, subprocess.TimeoutExpired) as e:
        log(f"FAILED: {e}")
        log(f"console transcript: {args.log}")
        return 1
    finally:
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        for ns in (client, server):
            if ns:
                ns.remove()
        transcript.close()


T0 = time.monotonic()
if __name__ == "__main__":
    sys.exit(main())
