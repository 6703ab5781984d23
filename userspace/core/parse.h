// The frame parser for user space: the same C parser the XDP program runs
// (bpf/include/vecflow/parse.h), wrapped for byte spans and mbufs. DPDK ports call
// parse_packet() on every received mbuf to give it what the XDP metadata gives AF_XDP frames:
// packet_type, l2_len, l3_len and the flow id, or the reason the frame is malformed.
//
// Per-packet path: noexcept, no allocation, reads only the mbuf's first segment.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include <rte_mbuf.h>

#include "core/drop_reason.h"
#include "vecflow/parse.h"

namespace vecflow {

using ParsedFrame = vf_parsed;

// Parses a frame. Returns nullopt when it is well-formed, else the reason it is malformed;
// `out` holds what was read either way (the flow key of a malformed frame may be partial).
inline std::optional<DropReason> parse_frame(std::span<const uint8_t> frame,
                                             ParsedFrame& out) noexcept {
  // An empty span may have no buffer at all, and the C parser's bound checks (data + n > end)
  // need a pointer into one: offsetting a null pointer is undefined (found by fuzzing).
  if (frame.empty()) {
    out = ParsedFrame{};
    return DropReason::L2_TRUNCATED;
  }
  int r = vf_parse_frame(frame.data(), frame.data() + frame.size(), &out);
  if (r == VF_PARSE_OK) return std::nullopt;
  return static_cast<DropReason>(r);
}

// RTE_PTYPE_* of a parsed frame: L2 (plain, VLAN, QinQ), L3 (IPv4/IPv6, with options or
// extension headers), L4 (TCP, UDP, SCTP, ICMP, or FRAG for any fragment). 0 if not IP.
uint32_t packet_type_of(const ParsedFrame& p) noexcept;

// Parses the mbuf's first segment and fills m->packet_type, m->l2_len, m->l3_len and
// m->hash.rss (vf_flow_hash of the 5-tuple, `symmetric` as steering.symmetric_hash) with
// RTE_MBUF_F_RX_RSS_HASH. The hash is set for malformed frames too (from what was read), so
// every packet has a flow id. Returns nullopt, or the reason the frame is malformed;
// FRAME_TOO_BIG for a chained mbuf (user space, like XDP, takes frames in one buffer).
std::optional<DropReason> parse_packet(rte_mbuf* m, bool symmetric) noexcept;

}  // namespace vecflow
