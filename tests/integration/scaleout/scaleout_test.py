#!/usr/bin/env python3
"""Three vecflow boxes behind a router that spreads flows over them with BGP ECMP (FRR, BFD):
tools/scaleout-lab.sh. Traffic crosses all three; a graceful stop loses nothing; a killed
vecflowd and a silently cut link lose only what BFD's detection time lets through; every box's
accounting is exact at the end. Needs root and FRR; exits 77 (skipped) without them.

    scaleout_test.py            (VECFLOWD, VECFLOWCTL, TRAFGEN name the binaries)
"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LAB = ROOT / "tools" / "scaleout-lab.sh"
NAME = f"vfso{os.getpid() % 100000}"
# BFD declares a box down after 3 missed echoes 100 ms apart; the route then leaves the
# router's FIB (BGP, zebra). A loaded 2-vCPU machine stretches the second part: the bound.
OUTAGE_BOUND_MS = 1500

failures = []


def lab(*args, check=True):
    r = subprocess.run([str(LAB), args[0], NAME, *map(str, args[1:])], capture_output=True,
                       text=True, timeout=180)
    if check and r.returncode != 0:
        raise RuntimeError(f"scaleout-lab.sh {' '.join(map(str, args))}: {r.returncode}\n"
                           f"{r.stdout}\n{r.stderr}")
    return r.stdout


def ctl(box, *args):
    return json.loads(lab("ctl", box, "--json", *args))


def expect(ok, what):
    print(("ok      " if ok else "FAILED  ") + what, flush=True)
    if not ok:
        failures.append(what)


def wan_rx(box):
    return next(p["rx_packets"] for p in ctl(box, "ports")["ports"] if p["port"] == "wan")


def settled_accounting(box):
    """The box's accounting once nothing is in flight. The router's BFD echoes cross every box
    ten times a second, so the counters never stay still: a read with nothing in flight is the
    settled state."""
    rows = None
    for _ in range(50):
        rows = ctl(box, "accounting")["ports"]
        if all(p["in_flight"] == 0 for p in rows):
            return rows
        time.sleep(0.1)
    return rows


def main():
    if os.geteuid() != 0:
        print("skipped: needs root (network namespaces, XDP)")
        return 77
    if not Path("/usr/lib/frr/bgpd").exists() or not shutil.which("vtysh"):
        print("skipped: FRR is not installed (tools/setup.sh installs it)")
        return 77
    try:
        print(lab("up", "--boxes", 3).strip().splitlines()[-1], flush=True)
        expect(lab("paths").split() == ["1", "2", "3"], "the router spreads over the 3 boxes")
        routes = ctl(1, "routes")["routes"]
        client = [r for r in routes if r["prefix"] == "10.0.1.0/24"]
        expect(len(client) == 1 and client[0]["protocol"] == "bgp" and
               client[0]["nexthops"] == ["via 10.1.1.1 dev wan"],
               f"box 1 routes the client's prefix as BGP installed it ({client})")

        before = {b: wan_rx(b) for b in (1, 2, 3)}
        demo = lab("demo")
        received = json.loads(demo.split("received: ", 1)[1].splitlines()[0])
        expect(received["lost"] == 0 and received["received"] > 0,
               f"traffic crosses the boxes ({received['received']} received, "
               f"{received['lost']} lost)")
        for b in (1, 2, 3):
            got = wan_rx(b) - before[b]
            expect(got > received["received"] / 10,
                   f"box {b} forwarded its share ({got} of {received['received']})")

        f = json.loads(lab("failover", "stop", 1))
        print("graceful stop:", json.dumps(f), flush=True)
        expect(f["lost"] == 0, f"a graceful stop loses no packet (lost {f['lost']})")
        expect(f["moved_to_returning_box"] == f["flows_of_box"],
               "the box's flows come back to it when it returns")

        for action, box in (("kill", 2), ("cut", 3)):
            f = json.loads(lab("failover", action, box))
            print(f"{action}:", json.dumps(f), flush=True)
            expect(f["lost"] > 0 and f["outage_ms"] is not None and
                   f["outage_ms"] <= OUTAGE_BOUND_MS,
                   f"{action} of box {box}: its flows out for {f['outage_ms']} ms "
                   f"(bound {OUTAGE_BOUND_MS}), the others lose nothing")
            expect(f["reordered"] == 0, f"{action}: no flow reordered")
        expect(lab("paths").split() == ["1", "2", "3"], "all 3 boxes back in the route")

        for b in (1, 2, 3):
            rows = settled_accounting(b)
            exact = rows is not None and all(
                p["rx_packets"] == p["tx_packets"] + p["kernel_packets"] + p["dropped"]
                for p in rows)
            expect(exact, f"box {b}: rx = tx + kernel + dropped on every port")
        log = (Path("/tmp/vecflow-scaleout") / NAME / "b1" / "vecflowd.log").read_text()
        expect("stopped cleanly" in log and "unaccounted=0" in log and
               "unaccounted=-" not in log and
               all(line.endswith("unaccounted=0") for line in log.splitlines()
                   if "final accounting" in line),
               "box 1's graceful stop: every packet accounted at exit")
    except Exception as e:  # noqa: BLE001 (any error fails the test, after the lab is down)
        failures.append(str(e))
        print(e)
    finally:
        lab("down", check=False)
    if failures:
        print(f"{len(failures)} failed:\n  " + "\n  ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
