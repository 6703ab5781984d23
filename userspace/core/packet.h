// How vecflow uses an rte_mbuf beyond the packet bytes. A port's rx path fills these fields,
// so no later stage parses or hashes a packet again:
//
//   m->port          ingress PortId (vecflow's port index, not DPDK's port id)
//   m->hash.rss      flow id: the XDP program's hash (AF_XDP metadata), the NIC's RSS hash, or
//                    the software flow_hash(), RTE_MBUF_F_RX_RSS_HASH in ol_flags; set unless
//                    nothing reads it (io/rx_classify.h, RxClassify::hash): a reader that
//                    may meet a packet without it tests the flag
//   m->packet_type   RTE_PTYPE_L2_ETHER* | RTE_PTYPE_L3_IPV4/IPV6* | RTE_PTYPE_L4_TCP/UDP/
//                    ICMP/FRAG, or 0 for frames that are not IP
//   m->l2_len        Ethernet header plus VLAN tags
//   m->l3_len        IP header with IPv4 options or IPv6 extension headers (0 if not IP)
//   PacketMeta       the dynamic field below: steering rule, and the pipeline's verdict
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>

#include "core/drop_reason.h"
#include "core/error.h"
#include "core/ids.h"
#include "vecflow/xdp_meta.h"

namespace vecflow {

// What the pipeline decided for a packet. Stages set it; the scheduler routes on it between
// stages and the tx adapter acts on it at the end.
enum class Verdict : uint8_t {
  Continue = 0,  // on to the next stage (the initial state)
  Transmit,      // send on out_port
  Kernel,        // hand to the kernel stack of the ingress interface
  Drop,          // drop, counted under drop_reason
  Held,          // a stage keeps it for later (StageEnv::hold): the run forgets it, and the
                 // stage gives it back decided through StageEnv::release
};

inline constexpr uint32_t kNoRule = VF_NO_RULE;  // the XDP metadata's "no rule"
inline constexpr uint16_t kNoPort = 0xffff;
inline constexpr uint32_t kNoNextHop = 0xffffffff;

// PacketMeta::flags bits.
// A packet vecflow made (a mirror copy, an ICMP error, a fragment after the first), not one
// that entered through a port: it is transmitted on out_port but charged to no port's
// accounting (rx = tx + ... counts the packets that entered). A copy reaches the tx path through
// CopySink::copies (pipeline/pipeline_worker.h), an ICMP error with the vector it was built in
// (StageEnv::answered), fragments from the tx adapter that made them.
inline constexpr uint8_t kMetaFlagCopy = 0x01;
// A packet `vecflowctl trace` follows (core/tracer.h); trace_id says which.
inline constexpr uint8_t kMetaFlagTrace = 0x02;
// Bits 2-4: what the conntrack stage found the packet to be (CtMark), for the stages after it.
inline constexpr uint8_t kMetaCtShift = 2;
inline constexpr uint8_t kMetaCtMask = 0x07 << kMetaCtShift;
// A stage must see this packet's flow's later packets too (a connection not established yet, a
// packet mirrored): the flow is not offloaded to XDP (core/offload_feed.h).
inline constexpr uint8_t kMetaFlagKeep = 0x20;
// A stage that tracks connections vouched for this packet's flow to flow offload and noted
// what it arrived as (OffloadFeed::note).
inline constexpr uint8_t kMetaFlagTracked = 0x40;
// The packet carries its egress VLAN's tag already (the neighbour stage wrote it with the MACs,
// while the header was in cache): the VLAN port (io/vlan/vlan_port.h) sends it as it is.
inline constexpr uint8_t kMetaFlagTagged = 0x80;

// A packet's connection-tracking mark (pipeline/conntrack/conntrack_stage.h), which the stages
// after the conntrack stage match on (acl `ct:`). None: no conntrack stage looked at it (not IP,
// or no such stage before this one).
enum class CtMark : uint8_t { None = 0, New = 1, Established = 2, Related = 3, Invalid = 4 };
inline constexpr unsigned kCtMarkCount = 5;
// "none", "new", "established", "related", "invalid": as the file, views and metrics spell them.
std::string_view ct_mark_name(CtMark c) noexcept;
// A mark other than None by its name.
std::optional<CtMark> ct_mark_from_name(std::string_view name) noexcept;

// PacketMeta::nexthop values besides a neighbour id (pipeline/neighbour_table.h).
// The destination is on a connected network: the next hop is the packet's own destination.
inline constexpr uint32_t kNextHopConnected = 0xfffffffe;

struct PacketMeta {
  uint32_t steer_rule;   // XDP steering rule that lifted the packet, kNoRule if none
  uint32_t nexthop;      // next hop chosen by route (neighbour id, kNextHopConnected or
                         // kNoNextHop), resolved to a MAC address by the neighbour stage
  uint16_t out_port;     // egress PortId once decided, kNoPort until then
  uint16_t drop_reason;  // DropReason, meaningful when verdict == Drop
  Verdict verdict;
  uint8_t flags;      // kMetaFlag* bits
  uint16_t trace_id;  // with kMetaFlagTrace: the trace's generation and packet number
  // The offload gate the steering program lifted the packet under (vecflow/offload_abi.h),
  // 0 for none, and the packet's number under it: the tx adapter settles it once the packet
  // is sent or dropped.
  uint16_t offload_gate;
  // The VRF to route the packet in, plus 1, where its conntrack session says (a reply de-NATed
  // into the tenant VRF it came from: pipeline/vrf.h); 0: its ingress port's.
  uint16_t vrf;
  uint32_t offload_seq;
};
static_assert(sizeof(PacketMeta) == 24);

// Offset of PacketMeta in the mbuf, set once by register_packet_meta().
extern int g_packet_meta_offset;

// Registers the dynamic field. Needs EAL; called once at start-up before any port receives.
Result<void> register_packet_meta();

inline PacketMeta& meta(rte_mbuf* m) noexcept {
  return *RTE_MBUF_DYNFIELD(m, g_packet_meta_offset, PacketMeta*);
}
inline const PacketMeta& meta(const rte_mbuf* m) noexcept {
  return *RTE_MBUF_DYNFIELD(m, g_packet_meta_offset, const PacketMeta*);
}

// Resets the metadata of a freshly received packet.
inline void reset_meta(rte_mbuf* m) noexcept {
  meta(m) = PacketMeta{kNoRule, kNoNextHop, kNoPort, 0, Verdict::Continue, 0, 0, 0, 0, 0};
}

inline CtMark ct_mark(const rte_mbuf* m) noexcept {
  const uint8_t f = RTE_MBUF_DYNFIELD(m, g_packet_meta_offset, const PacketMeta*)->flags;
  return static_cast<CtMark>((f & kMetaCtMask) >> kMetaCtShift);
}
inline void set_ct_mark(rte_mbuf* m, CtMark c) noexcept {
  PacketMeta& pm = meta(m);
  pm.flags = static_cast<uint8_t>((pm.flags & ~kMetaCtMask) | uint8_t(c) << kMetaCtShift);
}

inline void set_drop(rte_mbuf* m, DropReason r) noexcept {
  PacketMeta& pm = meta(m);
  pm.verdict = Verdict::Drop;
  pm.drop_reason = static_cast<uint16_t>(r);
}

inline void set_kernel(rte_mbuf* m) noexcept {
  meta(m).verdict = Verdict::Kernel;
}

inline void set_transmit(rte_mbuf* m, PortId out) noexcept {
  PacketMeta& pm = meta(m);
  pm.verdict = Verdict::Transmit;
  pm.out_port = to_index(out);
}

}  // namespace vecflow
