// The one place a received frame gets the mbuf fields of core/packet.h: from the metadata the
// XDP steering program wrote in front of it (AF_XDP frames), or by parsing it once in software
// (DPDK ports, and AF_XDP frames that arrived without metadata). No later stage parses or hashes
// the frame again.
#pragma once

#include <cstdint>
#include <optional>

#include <rte_mbuf.h>
#include <rte_prefetch.h>

#include "core/counter.h"
#include "core/drop_reason.h"
#include "core/flow.h"
#include "core/ids.h"
#include "core/packet.h"
#include "core/parse.h"
#include "core/sched_types.h"
#include "io/vlan/vlan_demux.h"
#include "vecflow/xdp_meta.h"

namespace vecflow {

struct RxClassify {
  PortId port{};
  bool symmetric = true;                      // steering.symmetric_hash, for software hashes
  bool drop_malformed = true;                 // steering.malformed: drop (else deliver as non-IP)
  FlowIdSource flow_id = FlowIdSource::Auto;  // scheduler.flow_id
  // Whether anything reads the flow hash (a scheduler's flow ids, a stage: Stage::
  // reads_flow_hash). Without a reader a frame the NIC or XDP did not hash is not hashed
  // (~16 cycles of dependent multiplications): m->hash.rss 0, no RTE_MBUF_F_RX_RSS_HASH.
  bool hash = true;
  // core/flow.h; set before the port is first polled. Ports without one pay a null test.
  const FlowHashRewrite* rewrite = nullptr;
  // The port's VLAN sub-interfaces (io/vlan/vlan_demux.h); ports without any pay a null test.
  const VlanDemux* vlans = nullptr;
};

// The metadata in front of a received frame, or nullptr. The magic is cleared as it is read,
// so a stale copy left in a recycled buffer is never taken for a fresh one.
inline const vf_xdp_meta* take_xdp_meta(rte_mbuf* m) noexcept {
  auto* md = reinterpret_cast<vf_xdp_meta*>(rte_pktmbuf_mtod(m, uint8_t*) - sizeof(vf_xdp_meta));
  if (md->magic != VF_XDP_META_MAGIC) return nullptr;
  md->magic = 0;
  return md;
}

// How far ahead of the packet being classified the next one's lines are prefetched: far
// enough to hide a memory access behind the classification of a few packets (~20 ns each),
// near enough that the lines are still in L1 when their turn comes.
inline constexpr uint16_t kPrefetchAhead = 4;

// Brings in what classify_rx touches: the mbuf's second line (l2_len, l3_len, PacketMeta) and
// the first bytes of the frame with the metadata in front of it.
inline void prefetch_rx(const rte_mbuf* m) noexcept {
  rte_prefetch0(reinterpret_cast<const uint8_t*>(m) + RTE_CACHE_LINE_SIZE);
  rte_prefetch0(rte_pktmbuf_mtod_offset(m, const uint8_t*, -int(sizeof(vf_xdp_meta))));
}

// RTE_PTYPE_* described by XDP metadata (the same mapping core/parse.h applies to a parse).
uint32_t packet_type_of(const vf_xdp_meta& md) noexcept;

// Fills the fields from XDP metadata.
inline void apply_xdp_meta(rte_mbuf* m, const vf_xdp_meta& md) noexcept {
  m->hash.rss = md.flow_hash;
  m->ol_flags = RTE_MBUF_F_RX_RSS_HASH;
  m->packet_type = packet_type_of(md);
  m->l2_len = md.l2_len;
  m->l3_len = md.l3_len;
  if (md.flags & VF_META_VLAN) {
    m->vlan_tci = md.vlan_tci;
    m->ol_flags |= RTE_MBUF_F_RX_VLAN;
  }
  meta(m).steer_rule = md.rule_id;
  meta(m).offload_gate = md.gate;
  meta(m).offload_seq = md.gate_seq;
}

// The start of classifying a frame received on `c.port`: port id, reset PacketMeta, and the
// fields the XDP metadata in front of the frame gives, if it has any (then returns true).
inline bool classify_from_meta(rte_mbuf* m, const RxClassify& c, bool try_meta) noexcept {
  m->port = to_index(c.port);
  reset_meta(m);
  if (try_meta) {
    if (const vf_xdp_meta* md = take_xdp_meta(m)) {
      apply_xdp_meta(m, *md);
      return true;
    }
  }
  return false;
}

// Whether the frame keeps the NIC's RSS hash as its flow id, or needs none (else it is hashed
// in software).
inline bool keeps_rss(const rte_mbuf* m, const RxClassify& c) noexcept {
  return !c.hash || (c.flow_id != FlowIdSource::Software && (m->ol_flags & RTE_MBUF_F_RX_RSS_HASH));
}

// A frame the common path did not take, parsed in full. Returns the drop reason when it is
// malformed and the port drops such frames.
inline std::optional<DropReason> classify_full(rte_mbuf* m, const RxClassify& c,
                                               bool keep_rss) noexcept {
  const uint32_t rss = m->hash.rss;
  const int r = parse_packet_full(m, c.symmetric);
  // The full parse hashes anyway: the NIC's hash goes back in where it is the flow id; where
  // none is needed the parse's stays (flagged as the flow id, like any hash).
  if (keep_rss && c.hash) m->hash.rss = rss;
  if (r != VF_PARSE_OK && c.drop_malformed) return static_cast<DropReason>(r);
  return std::nullopt;
}

// Finishes a frame received on `c.port`: port id, reset PacketMeta, then the flow id and
// packet fields from the metadata or from one software parse. Returns the drop reason when
// the frame is malformed and the port drops such frames; the caller frees it and counts it.
// Inline, like parse_packet, so that the result stays in registers.
inline std::optional<DropReason> classify_rx(rte_mbuf* m, const RxClassify& c,
                                             bool try_meta) noexcept {
  if (classify_from_meta(m, c, try_meta)) return std::nullopt;
  const bool keep_rss = keeps_rss(m, c);
  RxFields f;
  if (m->nb_segs == 1 && classify_common(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len,
                                         c.symmetric, !keep_rss, f)) [[likely]] {
    set_common_fields(m, f);
    if (!keep_rss) {
      m->hash.rss = f.hash;
      m->ol_flags |= RTE_MBUF_F_RX_RSS_HASH;
    }
    return std::nullopt;
  }
  return classify_full(m, c, keep_rss);
}

// Classifies a received burst in place (as classify_rx each frame, the next frames' lines
// prefetched): the frames a port keeps stay at the front in their order, a malformed one it
// drops is freed and counted in `drops`, and so is a tagged one no sub-interface of the port
// takes (vlan_unknown); a sub-interface's frames leave untagged, with its port id. Returns how many
// are kept; `bytes` gets their bytes. Inline: the port's rx_burst and this loop are one pass over
// the burst.
//
// The common frames are hashed in a second pass: a flow hash is a chain of dependent
// multiplications (~16 cycles), which one frame at a time each frame waited for; in a pass of
// their own the chains of several frames overlap.
inline uint16_t classify_burst(rte_mbuf** pkts, uint16_t n, const RxClassify& c, bool try_meta,
                               DropCounters& drops, uint64_t& bytes) noexcept {
  constexpr unsigned kHashBatch = 64;
  FlowHashParts parts[kHashBatch];
  rte_mbuf* to_hash[kHashBatch];
  unsigned pending = 0;
  const auto hash_pending = [&]() noexcept {
    for (unsigned k = 0; k < pending; ++k)
      to_hash[k]->hash.rss = parts[k].hash(c.symmetric);
    pending = 0;
  };
  uint16_t kept = 0;
  uint64_t sum = 0;
  // Read once: the mbuf stores below may alias `c`, which would be read again per frame.
  const VlanDemux* const vlans = __atomic_load_n(&c.vlans, __ATOMIC_ACQUIRE);
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    if (i + kPrefetchAhead < n) prefetch_rx(pkts[i + kPrefetchAhead]);
    const bool from_meta = classify_from_meta(m, c, try_meta);
    // Before the parse: a VLAN's frames, untagged, take the common path too. (The metadata is
    // read first: it lies in front of the frame as received.)
    if (vlans != nullptr && !vlan_demux(m, *vlans)) {
      drops.add(DropReason::VLAN_UNKNOWN);
      rte_pktmbuf_free(m);
      continue;
    }
    if (!from_meta) {
      const bool keep_rss = keeps_rss(m, c);
      RxFields f;
      if (m->nb_segs == 1 && classify_common_parts(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len,
                                                   !keep_rss, f, parts[pending])) [[likely]] {
        set_common_fields(m, f);
        if (!keep_rss) {
          m->ol_flags |= RTE_MBUF_F_RX_RSS_HASH;
          to_hash[pending++] = m;
          if (pending == kHashBatch) hash_pending();
        }
      } else if (auto bad = classify_full(m, c, keep_rss)) {
        drops.add(*bad);
        rte_pktmbuf_free(m);
        continue;
      }
    }
    sum += m->pkt_len;
    pkts[kept++] = m;
  }
  hash_pending();
  bytes = sum;
  if (c.rewrite != nullptr) [[unlikely]]
    c.rewrite->apply(pkts, kept);
  return kept;
}

}  // namespace vecflow
