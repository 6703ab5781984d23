#!/usr/bin/env bash
# The demo: sets up a fresh Debian 12 machine, builds vecflow, creates the lab (tools/lab.sh:
# client and server namespaces joined through the appliance namespace), starts vecflowd on
# the embedded demo configuration, sends traffic through it and shows what it did. Everything
# it made is removed on exit, Ctrl-C included.
#
#   sudo tools/demo.sh           run the scenario once
#   sudo tools/demo.sh --hold    keep the lab and vecflowd up until Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."

hold=0
[ "${1:-}" = "--hold" ] && hold=1
if [ "$(id -u)" -ne 0 ]; then
  echo "demo: needs root (network namespaces, XDP): sudo $0" >&2
  exit 1
fi

tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build --target vecflowd vecflowctl trafgen

lab=vfdemo
bin=build/userspace/app
log=$(mktemp /tmp/vecflow-demo.XXXXXX.log)
daemon=

cleanup() {
  set +e
  if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
    kill -TERM "$daemon"
    wait "$daemon"
    echo "demo: vecflowd stopped (exit $?)"
  fi
  tools/lab.sh down "$lab"
  echo "demo: lab removed; vecflowd log kept in $log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "lab: $lab-c (client) <-> $lab-a (vecflowd) <-> $lab-s (server)"
tools/lab.sh down "$lab"
tools/lab.sh up "$lab"
tools/lab.sh exec "$lab" a ip -br addr

step "vecflowd on the embedded demo configuration"
"$bin/vecflowd" --print-demo-config | sed -n '/^ports:/,/^steering:/p' | sed '$d'
ip netns exec "$lab-a" "$bin/vecflowd" >"$log" 2>&1 &
daemon=$!
for _ in $(seq 50); do
  grep -q "running from" "$log" && break
  kill -0 "$daemon" 2>/dev/null || { cat "$log"; echo "demo: vecflowd exited" >&2; exit 1; }
  sleep 0.1
done
sed 's/^/  vecflowd| /' "$log"

V() { ip netns exec "$lab-a" build/tools/vecflowctl/vecflowctl --socket /run/vecflow/demo.sock "$@"; }
TG=build/tools/trafgen/trafgen

# Attaching XDP to a veth drops its carrier for up to ~0.3 s, and vecflowd counts what it would
# send there as link_down meanwhile: start the traffic once both links are up again.
for _ in $(seq 30); do
  [ "$(V --json status | grep -c '"state": *"up"')" -ge 2 ] && break
  sleep 0.1
done

step "ping client -> server (198.51.100.2): lifted by XDP, routed in user space"
if tools/lab.sh exec "$lab" c ping -c 5 -i 0.2 -W 1 198.51.100.2; then
  echo "demo: ping crossed the appliance"
else
  echo "demo: ping did not cross the appliance" >&2
fi

step "TCP transfer client -> server, 4 MiB"
tools/lab.sh exec "$lab" s timeout 15 nc -d -l -p 5001 >/tmp/vecflow-demo-rx.$$ &
server=$!
sleep 0.3
head -c 4194304 /dev/urandom | tools/lab.sh exec "$lab" c timeout 15 nc -N -w 3 198.51.100.2 5001 || true
wait "$server" || true
got=$(stat -c %s /tmp/vecflow-demo-rx.$$ 2>/dev/null || echo 0)
rm -f /tmp/vecflow-demo-rx.$$
echo "demo: server received $got of 4194304 bytes"

step "SSH-like TCP to the appliance itself (port 22): kept in the kernel by the XDP 'ssh' rule"
tools/lab.sh exec "$lab" a timeout 5 nc -d -l -p 22 >/dev/null &
sshd=$!
sleep 0.3
echo hello | tools/lab.sh exec "$lab" c timeout 5 nc -N -w 2 192.0.2.1 22 || true
wait "$sshd" || true
V steering | sed -n '/^rules:/,/^$/p'

step "UDP flood client -> server: 64 flows, 64 B, 100 kpps for 4 s (trafgen)"
wan_mac=$(tools/lab.sh exec "$lab" a cat /sys/class/net/wan0/address)
tools/lab.sh exec "$lab" s "$TG" recv --dev eth0 --idle-exit 1000 --duration 15 >/tmp/vecflow-demo-recv.$$ 2>&1 &
recv=$!
sleep 0.3
tools/lab.sh exec "$lab" c "$TG" send --dev eth0 --dst 198.51.100.2 --dst-mac "$wan_mac" \
  --flows 64 --size 60 --rate 100000 --duration 4 &
send=$!
sleep 2
step "while the flood runs: vecflowctl status / ports / sched / pipeline"
V status
V ports
V sched
V pipeline
wait "$send" || true
wait "$recv" || true
cat /tmp/vecflow-demo-recv.$$
rm -f /tmp/vecflow-demo-recv.$$

step "where every packet went: rx = tx + kernel + dropped + held, per ingress port"
sleep 1.2
V accounting
V errors

if [ "$hold" = 1 ]; then
  step "holding: lab and vecflowd stay up until Ctrl-C (ip netns exec $lab-c ... to play)"
  tail -f "$log" &
  wait "$daemon"
fi
