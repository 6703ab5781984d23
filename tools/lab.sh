#!/usr/bin/env bash
# The lab: three network namespaces joined by veth pairs, the appliance in the middle.
#
#   NAME-c (client)            NAME-a (appliance: vecflowd)             NAME-s (server)
#   eth0 192.0.2.2/24 ─ veth ─ wan0 192.0.2.1 | lan0 198.51.100.1 ─ veth ─ eth0 198.51.100.2/24
#   (IPv6: 2001:db8:1::2/64 ... 2001:db8:1::1 | 2001:db8:2::1 ... 2001:db8:2::2/64)
#
# Addresses come from the documentation ranges; nothing leaves the namespaces. Interface names
# are the same in every lab (each lives in its own namespace), so one appliance file serves
# the demo and the tests; only NAME differs.
#
#   tools/lab.sh up NAME [--queues N]   create (fails if NAME exists)
#   tools/lab.sh down NAME              remove everything NAME made (quiet if absent)
#   tools/lab.sh exec NAME c|a|s CMD... run a command in one of the namespaces
set -euo pipefail

usage() { echo "usage: $0 up|down|exec NAME ..." >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
name=$2
shift 2
C="$name-c"
A="$name-a"
S="$name-s"

in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

down() {
  for ns in "$C" "$A" "$S"; do
    if ip netns list | grep -qw "^$ns"; then ip netns del "$ns"; fi
  done
}

up() {
  local queues=1
  while [ $# -gt 0 ]; do
    case "$1" in
      --queues) queues=$2; shift ;;
      *) usage ;;
    esac
    shift
  done
  for ns in "$C" "$A" "$S"; do
    if ip netns list | grep -qw "^$ns"; then
      echo "lab: namespace $ns exists; run '$0 down $name' first" >&2
      exit 1
    fi
  done
  trap 'down' ERR
  ip netns add "$C"
  ip netns add "$A"
  ip netns add "$S"
  ip link add wan0 netns "$A" numrxqueues "$queues" numtxqueues "$queues" type veth \
    peer name eth0 netns "$C" numrxqueues "$queues" numtxqueues "$queues"
  ip link add lan0 netns "$A" numrxqueues "$queues" numtxqueues "$queues" type veth \
    peer name eth0 netns "$S" numrxqueues "$queues" numtxqueues "$queues"

  for ns in "$C" "$A" "$S"; do in_ns "$ns" ip link set lo up; done
  in_ns "$C" ip addr add 192.0.2.2/24 dev eth0
  in_ns "$C" ip -6 addr add 2001:db8:1::2/64 dev eth0 nodad
  in_ns "$S" ip addr add 198.51.100.2/24 dev eth0
  in_ns "$S" ip -6 addr add 2001:db8:2::2/64 dev eth0 nodad
  in_ns "$A" ip addr add 192.0.2.1/24 dev wan0
  in_ns "$A" ip -6 addr add 2001:db8:1::1/64 dev wan0 nodad
  in_ns "$A" ip addr add 198.51.100.1/24 dev lan0
  in_ns "$A" ip -6 addr add 2001:db8:2::1/64 dev lan0 nodad
  # The appliance's kernel does not forward: what crosses the box is vecflow's doing.
  in_ns "$A" sysctl -qw net.ipv4.ip_forward=0 net.ipv6.conf.all.forwarding=0
  for pair in "$C eth0" "$A wan0" "$A lan0" "$S eth0"; do
    set -- $pair
    in_ns "$1" ip link set "$2" up
  done
  # GRO lets a veth receive XDP-redirected frames and batch them; it costs nothing here. Set
  # once both ends are up: the kernel recomputes whether a veth accepts redirected frames
  # (ndo_xdp_xmit) when its peer's GRO changes on a running device.
  for pair in "$C eth0" "$A wan0" "$A lan0" "$S eth0"; do
    set -- $pair
    in_ns "$1" ethtool -K "$2" gro on >/dev/null 2>&1 || true
  done
  # The hosts send what a wire carries: frames of at most the MTU with their checksums filled
  # in. With offloads on, a veth hands its peer 64 KiB TSO super-frames, larger than any MTU
  # they would leave by, and TCP/UDP checksums left for a NIC to finish, which nothing does
  # once XDP lifts the frame to user space.
  for ns in "$C" "$S"; do
    in_ns "$ns" ethtool -K eth0 tx off tso off gso off >/dev/null 2>&1 || true
  done
  in_ns "$C" ip route add default via 192.0.2.1
  in_ns "$C" ip -6 route add default via 2001:db8:1::1
  in_ns "$S" ip route add default via 198.51.100.1
  in_ns "$S" ip -6 route add default via 2001:db8:2::1
  trap - ERR
}

case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  exec)
    [ $# -ge 2 ] || usage
    side=$1; shift
    case "$side" in c) ns=$C ;; a) ns=$A ;; s) ns=$S ;; *) usage ;; esac
    in_ns "$ns" "$@"
    ;;
  *) usage ;;
esac
