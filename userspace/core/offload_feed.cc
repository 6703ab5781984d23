#include "core/offload_feed.h"

#include <cstdio>
#include <cstdlib>

#include <rte_cycles.h>

#include "core/packet.h"
#include "core/parse.h"

namespace vecflow {

Result<std::unique_ptr<OffloadFeed>> OffloadFeed::create(unsigned slots, size_t ports) {
  std::unique_ptr<OffloadFeed> f(new OffloadFeed());
  f->repeat_tsc_ = rte_get_tsc_hz() / 1000 * kRepeatMs;
  f->nports_ = ports;
  f->ports_ = std::make_unique<std::atomic<uint8_t>[]>(ports);
  f->gates_ = std::make_unique<std::atomic<vf_offload_gate*>[]>(ports);
  for (size_t p = 0; p < ports; ++p) {
    f->ports_[p].store(0, std::memory_order_relaxed);
    f->gates_[p].store(nullptr, std::memory_order_relaxed);
  }
  const ssize_t bytes = rte_ring_get_memsize_elem(sizeof(OffloadOffer), kRingSize);
  if (bytes < 0) return fail("offload feed: ring of {} offers: {}", kRingSize, -bytes);
  for (unsigned s = 0; s < slots; ++s) {
    auto lane = std::make_unique<Lane>();
    // rte_ring wants its header cache-line aligned; the ring lives in memory of our own,
    // not a memzone, so that the feed needs no EAL memory (unit tests run without it).
    const size_t size = RTE_ALIGN_CEIL(size_t(bytes), RTE_CACHE_LINE_SIZE);
    lane->memory.reset(std::aligned_alloc(RTE_CACHE_LINE_SIZE, size));
    if (!lane->memory) return fail("offload feed: {} bytes for a ring", size);
    lane->ring = static_cast<rte_ring*>(lane->memory.get());
    char name[RTE_RING_NAMESIZE];
    std::snprintf(name, sizeof(name), "vf_offer_%u", s);
    if (int r = rte_ring_init(lane->ring, name, kRingSize, RING_F_SP_ENQ | RING_F_SC_DEQ); r < 0)
      return fail("offload feed: ring {}: error {}", name, -r);
    f->lanes_.push_back(std::move(lane));
  }
  return f;
}

OffloadFeed::~OffloadFeed() = default;

void OffloadFeed::FreeMemory::operator()(void* p) const noexcept {
  std::free(p);
}

void OffloadFeed::set_port(uint16_t port, bool ingress, bool egress) noexcept {
  if (port >= nports_) return;
  ports_[port].store(uint8_t((ingress ? kIngress : 0) | (egress ? kEgress : 0)),
                     std::memory_order_relaxed);
}

bool OffloadFeed::qualifies(const Lane& lane, rte_mbuf* m, uint64_t run_tsc,
                            OffloadOffer& out) const noexcept {
  const PacketMeta& pm = meta(m);
  if (pm.verdict != Verdict::Transmit ||
      (pm.flags & (kMetaFlagCopy | kMetaFlagTrace | kMetaFlagKeep)))
    return false;
  if (m->port >= nports_ || pm.out_port >= nports_) return false;
  if (!(ports_[m->port].load(std::memory_order_relaxed) & kIngress) ||
      !(ports_[pm.out_port].load(std::memory_order_relaxed) & kEgress))
    return false;
  ParsedFrame p;
  const auto* data = rte_pktmbuf_mtod(m, const uint8_t*);
  if (parse_frame({data, m->data_len}, p, m->pkt_len)) return false;
  if (p.flags & (VF_PARSED_VLAN | VF_PARSED_FRAGMENT)) return false;
  if (p.key.ip_version == 4 ? p.l3_len != 20 : p.key.ip_version == 6 ? p.l3_len != 40 : true)
    return false;
  if (p.key.l4_proto == VF_IPPROTO_TCP) {
    const uint8_t tcp_flags = data[p.l2_len + p.l3_len + 13];
    if (tcp_flags & (0x01 | 0x04)) return false;  // FIN, RST
  }
  out.leaves = p.key;
  out.key = p.key;
  out.session = kNoOffloadSession;
  if (pm.flags & kMetaFlagTracked) {
    const Origin& o = lane.origins[origin_slot(m)];
    if (o.m != m || o.run != run_tsc) return false;
    out.key = o.key;
    out.session = o.session;
  }
  std::copy(data, data + 6, out.dst_mac.begin());
  std::copy(data + 6, data + 12, out.src_mac.begin());
  out.in_port = m->port;
  out.out_port = pm.out_port;
  out.steer_rule = pm.steer_rule;
  return true;
}

void OffloadFeed::offer(unsigned slot, rte_mbuf* const* pkts, size_t n, uint64_t now_tsc,
                        uint64_t changes) noexcept {
  Lane& lane = *lanes_[slot];
  for (size_t i = 0; i < n; ++i) {
    OffloadOffer o;
    if (!qualifies(lane, pkts[i], now_tsc, o)) continue;
    const uint32_t h = vf_flow_hash(&o.key, 0);
    Recent& r = lane.recent[h % kRecentSlots];
    if (r.hash == h && r.tsc != 0 && now_tsc - r.tsc < repeat_tsc_) continue;
    r = Recent{h, now_tsc};
    o.changes = changes;
    if (rte_ring_sp_enqueue_elem(lane.ring, &o, sizeof(o)) == 0)
      lane.stats.offered.add();
    else
      lane.stats.ring_full.add();
  }
}

size_t OffloadFeed::take(std::span<OffloadOffer> out) noexcept {
  size_t got = 0;
  for (size_t k = 0; k < lanes_.size() && got < out.size(); ++k) {
    Lane& lane = *lanes_[(next_lane_ + k) % lanes_.size()];
    got += rte_ring_sc_dequeue_burst_elem(lane.ring, out.data() + got, sizeof(OffloadOffer),
                                          unsigned(out.size() - got), nullptr);
  }
  if (!lanes_.empty()) next_lane_ = (next_lane_ + 1) % lanes_.size();
  return got;
}

OffloadFeedStats OffloadFeed::stats() const noexcept {
  OffloadFeedStats s;
  for (const auto& lane : lanes_) {
    s.offered += lane->stats.offered.load();
    s.ring_full += lane->stats.ring_full.load();
  }
  return s;
}

}  // namespace vecflow
