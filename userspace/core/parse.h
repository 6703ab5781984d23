// The frame parser for user space: the same C parser the XDP program runs
// (bpf/include/vecflow/parse.h), wrapped for byte spans and mbufs, and in front of it a
// straight-line reading of the common frame shapes (classify_common). DPDK ports call
// parse_packet() on every received mbuf to give it what the XDP metadata gives AF_XDP frames:
// packet_type, l2_len, l3_len and the flow id, or the reason the frame is malformed.
//
// Per-packet path: noexcept, no allocation, reads only the mbuf's first segment (which holds
// the headers; the length fields are held against the whole chain).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include <rte_mbuf.h>

#include "core/drop_reason.h"
#include "vecflow/parse.h"

namespace vecflow {

using ParsedFrame = vf_parsed;

// Parses a frame of `frame_len` bytes whose first bytes, headers included, are `frame`
// (frame_len larger than frame.size(): the rest lies in further buffers; 0: all of it is
// `frame`). Returns nullopt when it is well-formed, else the reason it is malformed; `out`
// holds what was read either way (the flow key of a malformed frame may be partial).
inline std::optional<DropReason> parse_frame(std::span<const uint8_t> frame, ParsedFrame& out,
                                             uint32_t frame_len = 0) noexcept {
  // An empty span may have no buffer at all, and the C parser's bound checks (data + n > end)
  // need a pointer into one: offsetting a null pointer is undefined (found by fuzzing).
  if (frame.empty()) {
    out = ParsedFrame{};
    return DropReason::L2_TRUNCATED;
  }
  const uint8_t* end = frame.data() + frame.size();
  const uint8_t* frame_end = frame_len > frame.size() ? frame.data() + frame_len : end;
  int r = vf_parse_frame(frame.data(), end, frame_end, &out);
  if (r == VF_PARSE_OK) return std::nullopt;
  return static_cast<DropReason>(r);
}

// RTE_PTYPE_* of a parsed frame: L2 (plain, VLAN, QinQ), L3 (IPv4/IPv6, with options or
// extension headers), L4 (TCP, UDP, SCTP, ICMP, or FRAG for any fragment). 0 if not IP.
uint32_t packet_type_of(const ParsedFrame& p) noexcept;

// What the receive path stores in the mbuf for a frame (core/packet.h).
struct RxFields {
  uint32_t packet_type;
  uint32_t hash;  // vf_flow_hash of the 5-tuple
  uint16_t l2_len;
  uint16_t l3_len;
};

namespace parse_detail {

inline uint32_t be16(const uint8_t* p) noexcept {
  return uint32_t{p[0]} << 8 | p[1];
}

// The L4 header of a common frame: TCP or UDP, well-formed within `room` bytes (what the IP
// length leaves). Returns its RTE_PTYPE_L4_*, or 0 when the general parser must look (another
// protocol, or a fault it names).
inline uint32_t common_l4(const uint8_t* l4, uint32_t room, uint8_t proto) noexcept {
  if (proto == VF_IPPROTO_UDP) {
    if (room < VF_UDP_HLEN) return 0;
    const uint32_t len = be16(l4 + 4);
    return len >= VF_UDP_HLEN && len <= room ? RTE_PTYPE_L4_UDP : 0;
  }
  if (proto == VF_IPPROTO_TCP) {
    if (room < VF_TCP_HLEN) return 0;
    const uint32_t doff = uint32_t{l4[12]} >> 4 << 2;
    return doff >= VF_TCP_HLEN && doff <= room ? RTE_PTYPE_L4_TCP : 0;
  }
  return 0;
}

}  // namespace parse_detail

// What vf_flow_hash_parts hashes, as a common frame gives it (classify_common_parts). Kept
// apart from the hash so that a burst's frames can be read in one pass and hashed in another
// (io/rx_classify.h).
struct FlowHashParts {
  uint32_t src;  // vf_addr_hash of each address
  uint32_t dst;
  uint16_t sport;  // network order
  uint16_t dport;
  uint8_t proto;
  uint8_t version;

  // From the address hashes and the L4 header (its first 4 bytes are the ports).
  static FlowHashParts of(uint32_t src, uint32_t dst, const uint8_t* l4, uint8_t proto,
                          uint8_t version) noexcept {
    FlowHashParts p;
    p.src = src;
    p.dst = dst;
    __builtin_memcpy(&p.sport, l4, 2);
    __builtin_memcpy(&p.dport, l4 + 2, 2);
    p.proto = proto;
    p.version = version;
    return p;
  }
  uint32_t hash(bool symmetric) const noexcept {
    return vf_flow_hash_parts(src, dst, sport, dport, proto, version, symmetric);
  }
};

// The frames a router sees nearly always, read in a few straight-line checks: untagged
// Ethernet with IPv4 (no options, not a fragment) or IPv6 (no extension header) carrying TCP
// or UDP, well-formed. For such a frame it fills `out` exactly as the general parse would
// (packet_type_of, l2_len, l3_len; with `hash`, `parts` gives the flow hash: a test and a fuzz
// target hold them equal) and returns true; for any other frame, well-formed or not, it
// returns false and the caller parses it in full (parse_frame names the fault of a malformed
// one). Reads only [d, d + len). `hash` false: the flow id comes from the NIC's RSS hash, and
// `parts` is left alone (the addresses of an IPv6 frame cost six multiplications).
inline bool classify_common_parts(const uint8_t* d, uint32_t len, bool hash, RxFields& out,
                                  FlowHashParts& parts) noexcept {
  using parse_detail::be16;
  if (len < VF_ETH_HLEN + VF_IPV4_HLEN) return false;
  const uint32_t type = be16(d + 12);
  const uint8_t* ip = d + VF_ETH_HLEN;
  if (type == VF_ETH_P_IPV4) {
    const uint32_t total = be16(ip + 2);
    // Version 4 with a 20-byte header, a length within the frame, neither MF nor an offset.
    if (ip[0] != 0x45 || total < VF_IPV4_HLEN || total > len - VF_ETH_HLEN ||
        (be16(ip + 6) & 0x3fff) != 0)
      return false;
    const uint8_t proto = ip[9];
    const uint8_t* l4 = ip + VF_IPV4_HLEN;
    const uint32_t l4_type = parse_detail::common_l4(l4, total - VF_IPV4_HLEN, proto);
    if (l4_type == 0) return false;
    out.packet_type = RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV4 | l4_type;
    out.l2_len = VF_ETH_HLEN;
    out.l3_len = VF_IPV4_HLEN;
    if (!hash) return true;
    uint32_t src, dst;
    __builtin_memcpy(&src, ip + 12, 4);
    __builtin_memcpy(&dst, ip + 16, 4);
    parts = FlowHashParts::of(vf_addr4_hash(src), vf_addr4_hash(dst), l4, proto, 4);
    return true;
  }
  if (type == VF_ETH_P_IPV6) {
    if (len < VF_ETH_HLEN + VF_IPV6_HLEN || (ip[0] >> 4) != 6) return false;
    const uint32_t payload = be16(ip + 4);
    if (payload > len - VF_ETH_HLEN - VF_IPV6_HLEN) return false;
    const uint8_t proto = ip[6];
    const uint8_t* l4 = ip + VF_IPV6_HLEN;
    const uint32_t l4_type = parse_detail::common_l4(l4, payload, proto);
    if (l4_type == 0) return false;
    out.packet_type = RTE_PTYPE_L2_ETHER | RTE_PTYPE_L3_IPV6 | l4_type;
    out.l2_len = VF_ETH_HLEN;
    out.l3_len = VF_IPV6_HLEN;
    if (!hash) return true;
    __u32 src[4], dst[4];
    __builtin_memcpy(src, ip + 8, 16);
    __builtin_memcpy(dst, ip + 24, 16);
    parts = FlowHashParts::of(vf_addr_hash(src), vf_addr_hash(dst), l4, proto, 6);
    return true;
  }
  return false;
}

// classify_common_parts with the hash in out.hash (when `hash`).
inline bool classify_common(const uint8_t* d, uint32_t len, bool symmetric, bool hash,
                            RxFields& out) noexcept {
  FlowHashParts parts;
  if (!classify_common_parts(d, len, hash, out, parts)) return false;
  if (hash) out.hash = parts.hash(symmetric);
  return true;
}

// Stores what classify_common found of a frame (not the hash) in its mbuf.
inline void set_common_fields(rte_mbuf* m, const RxFields& f) noexcept {
  m->packet_type = f.packet_type;
  // l2_len and l3_len are bit-fields of tx_offload, whose other fields mean nothing on
  // receive: one store instead of two read-modify-writes.
  m->tx_offload = rte_mbuf_tx_offload(f.l2_len, f.l3_len, 0, 0, 0, 0, 0);
}

// Any frame, in full (parse_frame): fills the same mbuf fields as parse_packet. Returns
// VF_PARSE_OK or the DropReason of a malformed frame.
int parse_packet_full(rte_mbuf* m, bool symmetric) noexcept;

// Parses the mbuf's first segment and fills m->packet_type, m->l2_len, m->l3_len and
// m->hash.rss (vf_flow_hash of the 5-tuple, `symmetric` as steering.symmetric_hash) with
// RTE_MBUF_F_RX_RSS_HASH. The hash is set for malformed frames too (from what was read), so
// every packet has a flow id. Returns nullopt, or the reason the frame is malformed. A chained
// mbuf (a jumbo frame) is parsed from its first segment against its whole length.
// Common frames take classify_common's path; the rest parse_packet_full's. Inline, so that the
// result lives in registers: returned through memory from a call, the optional's two halves
// (written apart, read as one word) stalled the store buffer on every packet. With `hash`
// false a common frame keeps the hash it has (the NIC's RSS hash).
inline std::optional<DropReason> parse_packet(rte_mbuf* m, bool symmetric,
                                              bool hash = true) noexcept {
  RxFields f;
  if (m->nb_segs == 1 && classify_common(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len,
                                         symmetric, hash, f)) [[likely]] {
    set_common_fields(m, f);
    if (hash) {
      m->hash.rss = f.hash;
      m->ol_flags |= RTE_MBUF_F_RX_RSS_HASH;
    }
    return std::nullopt;
  }
  const int r = parse_packet_full(m, symmetric);
  if (r == VF_PARSE_OK) return std::nullopt;
  return static_cast<DropReason>(r);
}

}  // namespace vecflow
