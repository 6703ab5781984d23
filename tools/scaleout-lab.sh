#!/usr/bin/env bash
# The scale-out lab: N vecflow appliances behind an upstream router that spreads flows over them
# with BGP equal-cost multipath, each box running vecflowd beside FRR (bgpd, bfdd).
#
#   NAME-c client          NAME-r router (FRR, AS 65000)      NAME-bI box I (vecflowd + FRR,
#   eth0 10.0.1.2/24 ───── eth0 10.0.1.1/24                   AS 65001)
#                          upI 10.1.I.1/24 ────────────────── wan0 10.1.I.2/24
#                                                              lan0 10.9.0.I/24 ──┐
#   NAME-s server: br0 10.9.0.100/24, one bridge port per box ────────────────────┘
#
# Each box announces the server's prefix 10.9.0.0/24 to the router over eBGP; the router
# installs it with one next hop per box (maximum-paths, the kernel's nexthop groups, hashing on
# the 5-tuple) and announces the client's 10.0.1.0/24 to every box, whose route stage learns
# it from the kernel (routes: from-kernel). BGP (TCP 179) and BFD control (UDP 3784) reach each
# box's kernel through XDP `pass`; BFD echo (UDP 3785) is forwarded by vecflowd itself, like
# the traffic, so a box whose data path died (vecflowd killed) stops returning the router's
# echoes and is withdrawn within BFD's detection time (3 x 100 ms), while its kernel, which
# would answer BFD control packets forever, keeps nothing alive. The boxes' kernels do not
# forward. The server answers through static multipath routes over the boxes (replies take any
# box; the tests measure the client-to-server direction).
#
#   tools/scaleout-lab.sh up NAME [--boxes N]   create the lab and start everything (N: 3)
#   tools/scaleout-lab.sh down NAME             stop everything and remove the namespaces
#   tools/scaleout-lab.sh exec NAME NODE CMD... run a command in c, r, s or bI
#   tools/scaleout-lab.sh vtysh NAME NODE CMD   an FRR command on r or bI
#   tools/scaleout-lab.sh ctl NAME I ARGS...    vecflowctl of box I
#   tools/scaleout-lab.sh paths NAME            the boxes the router's route to the server uses
#   tools/scaleout-lab.sh spread NAME [FLOWS]   the box the router sends each of trafgen's
#                                               UDP flows to (source ports 1024...), one a line
#   tools/scaleout-lab.sh box NAME I ACTION     stop (graceful: BGP withdrawn, the router's
#                                               route without the box, then SIGTERM), kill
#                                               (SIGKILL), cut (the link silently drops all),
#                                               restore, unplug (link down), plug, start
#   tools/scaleout-lab.sh demo NAME             traffic over all boxes, vecflowctl of each
#   tools/scaleout-lab.sh failover NAME ACTION I [FLOWS RATE]
#                                               UDP flows (256, 20000 pps) for 3 s, ACTION on
#                                               box I at 1 s (stop, kill, cut, unplug), then the
#                                               box back; one JSON line: packets lost, the
#                                               outage of the box's flows (lost / their rate),
#                                               when the router dropped the box, flows that
#                                               moved at the failure and at the return
#
# Everything lives in /tmp/vecflow-scaleout/NAME (configurations, logs, sockets) and in the
# NAME-* namespaces; nothing is sent outside them. VECFLOWD and VECFLOWCTL name the binaries
# (default: the build tree).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VECFLOWD=${VECFLOWD:-$root/build/userspace/app/vecflowd}
VECFLOWCTL=${VECFLOWCTL:-$root/build/tools/vecflowctl/vecflowctl}
TRAFGEN=${TRAFGEN:-$root/build/tools/trafgen/trafgen}
FRR=/usr/lib/frr

usage() { sed -n '/^#   tools/s/^#   //p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
name=$2
shift 2
dir=/tmp/vecflow-scaleout/$name

ns() { echo "$name-$1"; }
in_ns() { local n=$1; shift; ip netns exec "$(ns "$n")" "$@"; }
boxes() { cat "$dir/boxes" 2>/dev/null || echo 0; }

# ---- FRR ----------------------------------------------------------------------------------

frr_start() {  # node: zebra, bfdd and bgpd of one node, their files in $dir/NODE
  local node=$1 d=$dir/$1
  # As FRR's own user (Debian's package makes it): the daemons keep the capabilities they need.
  chown -R frr:frr "$d"
  local common=(-d -u frr -g frr --vty_socket "$d" -z "$d/zserv.api")
  in_ns "$node" "$FRR/zebra" "${common[@]}" -i "$d/zebra.pid" -f "$d/zebra.conf" \
    --log "file:$d/zebra.log"
  in_ns "$node" "$FRR/bfdd" "${common[@]}" -i "$d/bfdd.pid" -f "$d/bfdd.conf" \
    --bfdctl "$d/bfdd.sock" --log "file:$d/bfdd.log"
  in_ns "$node" "$FRR/bgpd" "${common[@]}" -i "$d/bgpd.pid" -f "$d/bgpd.conf" \
    --log "file:$d/bgpd.log"
} 2>>"$dir/frr-stderr.log"

frr_stop() {
  local d=$dir/$1 p
  for p in bgpd bfdd zebra; do
    [ -f "$d/$p.pid" ] && kill "$(cat "$d/$p.pid")" 2>/dev/null || true
  done
}

vty() { local node=$1; shift; in_ns "$node" vtysh --vty_socket "$dir/$node" "$@"; }

# A BFD profile both sides use: control packets every 300 ms, echoes every 100 ms, three missed
# echoes take a session down (300 ms).
bfd_conf() {
  cat <<EOF
bfd
 profile fast
  detect-multiplier 3
  receive-interval 300
  transmit-interval 300
  echo-mode
  echo transmit-interval 100
  echo receive-interval 100
 !
!
EOF
}

write_router_conf() {
  local d=$dir/r n=$1 i
  mkdir -p "$d"
  # Routes with their next hops inline, not kernel nexthop objects: when a link goes down the
  # kernel drops that next hop from a shared object, and FRR 8.4 does not put it back when the
  # link returns (its copy still lists it), so a box that came back took no traffic.
  printf 'hostname %s-r\nno zebra nexthop kernel enable\n' "$name" >"$d/zebra.conf"
  bfd_conf >"$d/bfdd.conf"
  {
    echo "router bgp 65000"
    echo " bgp router-id 10.0.1.1"
    echo " no bgp ebgp-requires-policy"
    echo " timers bgp 1 3"
    echo " neighbor boxes peer-group"
    echo " neighbor boxes remote-as 65001"
    echo " neighbor boxes bfd profile fast"
    echo " neighbor boxes timers connect 1"
    echo " neighbor boxes advertisement-interval 0"
    for i in $(seq 1 "$n"); do echo " neighbor 10.1.$i.2 peer-group boxes"; done
    echo " address-family ipv4 unicast"
    echo "  network 10.0.1.0/24"
    echo "  maximum-paths $n"
    echo " exit-address-family"
  } >"$d/bgpd.conf"
}

write_box_conf() {
  local i=$1 d=$dir/b$1
  mkdir -p "$d"
  printf 'hostname %s-b%s\n' "$name" "$i" >"$d/zebra.conf"
  bfd_conf >"$d/bfdd.conf"
  cat >"$d/bgpd.conf" <<EOF
router bgp 65001
 bgp router-id 10.1.$i.2
 no bgp ebgp-requires-policy
 timers bgp 1 3
 neighbor 10.1.$i.1 remote-as 65000
 neighbor 10.1.$i.1 bfd profile fast
 neighbor 10.1.$i.1 timers connect 1
 neighbor 10.1.$i.1 advertisement-interval 0
 address-family ipv4 unicast
  network 10.9.0.0/24
 exit-address-family
EOF
  # The appliance file: both ports AF_XDP; routing protocols to the kernel, BFD echoes and the
  # traffic through the pipeline; routes and neighbours from the kernel.
  cat >"$d/appliance.yaml" <<EOF
appliance: {name: $name-b$i}
cpu: {control: 0, workers: [1]}
dpdk: {memory_mb: 256, hugepages: off, file_prefix: $name-b$i, mbufs: 8192}
ports:
  - {name: wan, type: afxdp, interface: wan0, queues: 1, mode: auto}
  - {name: lan, type: afxdp, interface: lan0, queues: 1, mode: auto}
steering:
  default: userspace
  rules:
    - {name: arp, match: {l3: arp}, action: pass}
    - {name: bgp-in, match: {proto: tcp, dst_port: 179}, action: pass}
    - {name: bgp-out, match: {proto: tcp, src_port: 179}, action: pass}
    - {name: bfd-control, match: {proto: udp, dst_port: 3784}, action: pass}
scheduler:
  backend: builtin
  vector: {size: 64, timeout_us: 50}
pipeline:
  - stage: route
    sched: atomic
    routes: from-kernel
  - stage: neighbour
    fuse: true
    from_kernel: true
    unresolved: hold
control:
  socket: $d/control.sock
EOF
}

vecflowd_start() {
  vecflowd_spawn "$1"
  vecflowd_ready "$1"
}

vecflowd_spawn() {
  local i=$1 d=$dir/b$1
  # Not through in_ns: $! must be vecflowd itself (ip netns exec execs it), not a subshell.
  ip netns exec "$(ns "b$i")" "$VECFLOWD" -c "$d/appliance.yaml" >>"$d/vecflowd.log" 2>&1 &
  echo $! >"$d/vecflowd.pid"
}

vecflowd_ready() {
  local i=$1 d=$dir/b$1 t
  for t in $(seq 1 150); do
    [ -S "$d/control.sock" ] && in_ns "b$i" "$VECFLOWCTL" --socket "$d/control.sock" status \
      >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$d/vecflowd.pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "scaleout-lab: vecflowd of box $i did not start; $d/vecflowd.log:" >&2
  tail -20 "$d/vecflowd.log" >&2
  return 1
}

vecflowd_signal() {  # box signal: signals vecflowd and waits for it to end
  local pidf=$dir/b$1/vecflowd.pid pid
  [ -f "$pidf" ] || return 0
  pid=$(cat "$pidf")
  kill "-$2" "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  rm -f "$pidf"
}

# The next hops of the router's route to the server: the boxes it spreads over, "1 2 3".
paths() {
  in_ns r ip -4 route show 10.9.0.0/24 2>/dev/null | grep -o 'via 10\.1\.[0-9]*\.2' |
    sed 's/via 10\.1\.\([0-9]*\)\.2/\1/' | sort -n | tr '\n' ' ' | sed 's/ $//'
}

wait_paths() {  # expected [seconds]: waits until paths() is expected
  local want=$1 limit=${2:-30} t=0
  while [ "$(paths)" != "$want" ]; do
    sleep 0.1
    t=$((t + 1))
    if [ $t -ge $((limit * 10)) ]; then
      echo "scaleout-lab: the router's paths are '$(paths)', not '$want', after ${limit} s" >&2
      return 1
    fi
  done
}

all_paths() { seq -s ' ' 1 "$(boxes)"; }

# The router's choice for each of trafgen's flows (client 10.0.1.2, UDP, source ports from
# 1024, destination port 9), asked of its FIB with the 5-tuple it hashes.
spread() {
  local flows=${1:-256} f
  for f in $(seq 0 $((flows - 1))); do
    echo "route get 10.9.0.100 from 10.0.1.2 iif eth0 ipproto udp sport $((1024 + f)) dport 9"
  done | in_ns r ip -o -batch - | grep -o 'via 10\.1\.[0-9]*\.2' | sed 's/via 10\.1\.\([0-9]*\)\.2/\1/'
}

# ---- the lab ------------------------------------------------------------------------------

down() {
  local i
  # Every box at once: each vecflowd takes a second or so to drain and release its ports.
  for i in $(seq 1 "$(boxes)"); do vecflowd_signal "$i" TERM & done
  wait
  for i in $(seq 1 "$(boxes)"); do frr_stop "b$i"; done
  frr_stop r
  for n in c r s $(for i in $(seq 1 16); do echo "b$i"; done); do
    if ip netns list | grep -qw "^$(ns "$n")"; then ip netns del "$(ns "$n")"; fi
  done
  rm -rf "$dir"
}

up() {
  local n=3
  while [ $# -gt 0 ]; do
    case "$1" in
      --boxes) n=$2; shift ;;
      *) usage ;;
    esac
    shift
  done
  [ -x "$FRR/bgpd" ] || { echo "scaleout-lab: FRR is not installed (apt-get install frr)" >&2; exit 1; }
  if ip netns list | grep -qw "^$(ns r)"; then
    echo "scaleout-lab: $(ns r) exists; run '$0 down $name' first" >&2
    exit 1
  fi
  mkdir -p "$dir"
  echo "$n" >"$dir/boxes"
  trap 'down' ERR
  local i
  for x in c r s $(seq -f 'b%g' 1 "$n"); do
    ip netns add "$(ns "$x")"
    in_ns "$x" ip link set lo up
  done
  ip link add eth0 netns "$(ns c)" type veth peer name eth0 netns "$(ns r)"
  in_ns s ip link add br0 type bridge
  for i in $(seq 1 "$n"); do
    ip link add "up$i" netns "$(ns r)" type veth peer name wan0 netns "$(ns "b$i")"
    ip link add "s$i" netns "$(ns s)" type veth peer name lan0 netns "$(ns "b$i")"
    in_ns s ip link set "s$i" master br0 up
  done
  in_ns c ip addr add 10.0.1.2/24 dev eth0
  in_ns r ip addr add 10.0.1.1/24 dev eth0
  in_ns s ip addr add 10.9.0.100/24 dev br0
  for i in $(seq 1 "$n"); do
    in_ns r ip addr add "10.1.$i.1/24" dev "up$i"
    in_ns "b$i" ip addr add "10.1.$i.2/24" dev wan0
    in_ns "b$i" ip addr add "10.9.0.$i/24" dev lan0
    in_ns "b$i" sysctl -qw net.ipv4.ip_forward=0
    for l in wan0 lan0; do in_ns "b$i" ip link set "$l" up; done
    in_ns r ip link set "up$i" up
  done
  in_ns c ip link set eth0 up
  in_ns r ip link set eth0 up
  in_ns s ip link set br0 up
  # Hosts send what a wire carries (tools/lab.sh); the router hashes flows on the 5-tuple.
  for x in c s; do
    for l in $(in_ns "$x" ls /sys/class/net); do
      in_ns "$x" ethtool -K "$l" tx off tso off gso off >/dev/null 2>&1 || true
    done
  done
  in_ns r sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1
  in_ns c ip route add default via 10.0.1.1
  local hops=()
  for i in $(seq 1 "$n"); do hops+=(nexthop via "10.9.0.$i"); done
  in_ns s ip route add 10.0.1.0/24 "${hops[@]}"

  write_router_conf "$n"
  frr_start r
  for i in $(seq 1 "$n"); do
    write_box_conf "$i"
    frr_start "b$i"
    vecflowd_spawn "$i"
  done
  for i in $(seq 1 "$n"); do vecflowd_ready "$i"; done
  wait_paths "$(all_paths)" 60
  # Every neighbour on the way resolved (router to boxes, boxes to server), so that measured
  # traffic does not start with the first packets of each path waiting on ARP.
  in_ns c "$TRAFGEN" send --dev eth0 --dst 10.9.0.100 --flows 256 --rate 2000 --duration 0.5 \
    --dst-mac "$(in_ns r cat /sys/class/net/eth0/address)" >/dev/null
  trap - ERR
  echo "scaleout-lab: $n boxes up; the router spreads 10.9.0.0/24 over boxes $(paths)"
}

box() {
  local i=$1 action=$2
  case "$action" in
    stop)
      # Withdraw first: the router takes the box out of its route while the box still
      # forwards what is on its way; then vecflowd stops (SIGTERM drains it).
      vty "b$i" -c "configure terminal" -c "router bgp 65001" \
        -c "neighbor 10.1.$i.1 shutdown" >/dev/null
      wait_paths "$(paths | tr ' ' '\n' | grep -vx "$i" | tr '\n' ' ' | sed 's/ $//')" 10
      sleep 0.2
      vecflowd_signal "$i" TERM
      ;;
    kill) vecflowd_signal "$i" KILL ;;
    # A silent cut: the link stays up and carries nothing either way (a fault behind a switch),
    # so only BFD can tell.
    cut)
      in_ns r nft -f - <<EOF
table netdev cut$i {
  chain in { type filter hook ingress device up$i priority 0; policy drop; }
  chain out { type filter hook egress device up$i priority 0; policy drop; }
}
EOF
      ;;
    restore) in_ns r nft delete table netdev "cut$i" 2>/dev/null || true ;;
    unplug) in_ns r ip link set "up$i" down ;;
    plug) in_ns r ip link set "up$i" up ;;
    start)
      [ -f "$dir/b$i/vecflowd.pid" ] || vecflowd_start "$i"
      vty "b$i" -c "configure terminal" -c "router bgp 65001" \
        -c "no neighbor 10.1.$i.1 shutdown" >/dev/null
      ;;
    *) usage ;;
  esac
}

demo() {
  local n
  n=$(boxes)
  local mac
  mac=$(in_ns r cat /sys/class/net/eth0/address)
  echo "scaleout-lab: 256 UDP flows, 20 kpps for 2 s from the client to the server"
  in_ns s "$TRAFGEN" recv --dev br0 --duration 3 --json >"$dir/recv.json" 2>/dev/null &
  local rp=$!
  sleep 0.5
  in_ns c "$TRAFGEN" send --dev eth0 --dst 10.9.0.100 --dst-mac "$mac" --flows 256 \
    --rate 20000 --duration 2 >/dev/null
  wait $rp
  echo "received: $(cat "$dir/recv.json")"
  for i in $(seq 1 "$n"); do
    echo "---- box $i"
    in_ns "b$i" "$VECFLOWCTL" --socket "$dir/b$i/control.sock" ports
  done
}

ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

failover() {
  local action=$1 i=$2 flows=${3:-256} rate=${4:-20000}
  local mac others t0 withdrawn=-1
  mac=$(in_ns r cat /sys/class/net/eth0/address)
  others=$(all_paths | tr ' ' '\n' | grep -vx "$i" | tr '\n' ' ' | sed 's/ $//')
  spread "$flows" >"$dir/spread-before"
  in_ns s "$TRAFGEN" recv --dev br0 --duration 4.5 --json >"$dir/failover-recv.json" 2>/dev/null &
  local rp=$!
  sleep 0.5
  in_ns c "$TRAFGEN" send --dev eth0 --dst 10.9.0.100 --dst-mac "$mac" --flows "$flows" \
    --rate "$rate" --duration 3 --json >"$dir/failover-send.json" &
  local sp=$!
  sleep 1
  rm -f "$dir/withdrawn-ms"
  t0=$(date +%s%N)
  # When the router's route loses the box, seen from beside the action (a stop waits for it, a
  # kill for vecflowd's exit).
  (
    while [ "$(paths)" != "$others" ] && [ "$(ms_since "$t0")" -lt 5000 ]; do sleep 0.01; done
    [ "$(paths)" = "$others" ] && ms_since "$t0" >"$dir/withdrawn-ms"
  ) &
  local wp=$!
  box "$i" "$action"
  wait "$wp" "$sp" "$rp"
  [ -f "$dir/withdrawn-ms" ] && withdrawn=$(cat "$dir/withdrawn-ms")
  spread "$flows" >"$dir/spread-during"
  case "$action" in
    stop | kill) box "$i" start ;;
    cut) box "$i" restore ;;
    unplug) box "$i" plug ;;
  esac
  wait_paths "$(all_paths)" 30
  spread "$flows" >"$dir/spread-after"
  python3 - "$dir" "$action" "$i" "$flows" "$rate" "$withdrawn" <<'EOF'
import json, sys
d, action, box, flows, rate, withdrawn = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
recv = json.load(open(f"{d}/failover-recv.json"))
sent = json.load(open(f"{d}/failover-send.json"))
read = lambda n: open(f"{d}/spread-{n}").read().split()
before, during, after = read("before"), read("during"), read("after")
share = before.count(box) / flows
lost = sent["sent"] - recv["received"]
print(json.dumps({
    "action": action, "box": int(box), "flows": flows, "rate_pps": rate,
    "sent": sent["sent"], "received": recv["received"], "lost": lost,
    "reordered": recv["reordered"],
    # The failed box's flows lose (outage x their rate) packets; the others lose none.
    "outage_ms": round(1000 * lost / (rate * share), 1) if share else None,
    "router_withdrew_after_ms": withdrawn if withdrawn >= 0 else None,
    "flows_of_box": before.count(box),
    "moved_at_failure": sum(1 for a, b in zip(before, during) if a != b and a != box),
    "moved_at_return": sum(1 for a, b in zip(during, after) if a != b),
    "moved_to_returning_box": sum(1 for a, b in zip(during, after) if a != b and b == box)}))
EOF
}

case "$cmd" in
  up) up "$@" ;;
  failover) [ $# -ge 2 ] || usage; failover "$@" ;;
  down) down ;;
  exec) [ $# -ge 2 ] || usage; node=$1; shift; in_ns "$node" "$@" ;;
  vtysh) [ $# -ge 2 ] || usage; node=$1; shift; vty "$node" -c "$*" ;;
  ctl) [ $# -ge 1 ] || usage; i=$1; shift
    in_ns "b$i" "$VECFLOWCTL" --socket "$dir/b$i/control.sock" "$@" ;;
  paths) paths; echo ;;
  spread) spread "$@" ;;
  box) [ $# -eq 2 ] || usage; box "$1" "$2" ;;
  demo) demo ;;
  *) usage ;;
esac
