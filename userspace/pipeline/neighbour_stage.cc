#include "pipeline/neighbour_stage.h"

#include <rte_cycles.h>
#include <rte_ether.h>

#include "pipeline/kernel_sync.h"
#include "pipeline/packet_view.h"

namespace vecflow {

NeighbourStage::NeighbourStage(const config::StageConfig& cfg, StageContext& ctx)
    : PerPacketStage(cfg.type, cfg.name, ctx.lcore_slots),
      table_(ctx.neighbours),
      policy_(std::get<config::NeighbourStage>(cfg.params).unresolved),
      resolve_(ctx.kernel != nullptr),
      retry_tsc_(rte_get_tsc_hz() / 1000 * KernelSync::kResolveRetry.count()),
      lcores_(new LcoreState[ctx.lcore_slots]),
      slots_(ctx.lcore_slots) {
  for (const PortInfo& p : ctx.ports) {
    bool known = p.mac != MacAddress{};
    port_mac_.push_back(known ? neighbour_word(p.mac) : 0);
  }
}

Result<std::unique_ptr<NeighbourStage>> NeighbourStage::create(const config::StageConfig& cfg,
                                                               StageContext& ctx) {
  const auto& p = std::get<config::NeighbourStage>(cfg.params);
  if (ctx.neighbours == nullptr) return fail("the neighbour stage needs the pipeline's table");
  std::unique_ptr<NeighbourStage> s(new NeighbourStage(cfg, ctx));
  for (const auto& e : p.entries) {
    auto id = ctx.neighbours->set_static(PortId{ctx.port_index(e.port)}, e.ip, e.mac);
    if (!id) return std::unexpected(id.error());
  }
  // Learning applies to ports with a kernel interface; without any there is nothing to learn.
  if (p.from_kernel && ctx.kernel != nullptr) {
    if (auto r = ctx.kernel->learn_neighbours(); !r) return std::unexpected(r.error());
  }
  return s;
}

void NeighbourStage::unresolved(rte_mbuf* m, const NeighbourKey& key, uint32_t id,
                                uint64_t now) noexcept {
  if (resolve_) {
    if (id != NeighbourTable::kNotFound) {
      table_->request_resolution(id, now, retry_tsc_);
    } else {
      table_->request_resolution(key);
    }
  }
  if (policy_ == config::Unresolved::Kernel) {
    set_kernel(m);
  } else {
    set_drop(m, DropReason::NEIGH_UNRESOLVED);
  }
}

void NeighbourStage::process_packet(rte_mbuf* m, VectorState& vs, StageEnv& env) noexcept {
  PacketMeta& pm = meta(m);
  LcoreState& st = lcores_[env.slot()];
  if (pm.out_port >= port_mac_.size()) {  // kNoPort: no stage placed it
    st.unplaced.add();
    return;
  }
  uint32_t id = pm.nexthop;
  NeighbourKey key;
  if (id >= kNextHopConnected) {
    // Connected destination (or placed by a stage that chose no next hop): the next hop is
    // the destination itself.
    key.port = pm.out_port;
    if (pkt::is_ipv4(m)) {
      key.version = 4;
      std::memcpy(key.ip, &pkt::ipv4(m)->dst_addr, 4);
    } else if (pkt::is_ipv6(m)) {
      key.version = 6;
      std::memcpy(key.ip, pkt::ipv6(m)->dst_addr, 16);
    } else {
      st.unplaced.add();
      return;
    }
    id = table_->find(key);
    if (id == NeighbourTable::kNotFound) {
      st.unresolved.add();
      unresolved(m, key, id, vs.now);
      return;
    }
  }
  NeighbourEntry* e = &table_->entry(id);
  const uint64_t word = e->word.load(std::memory_order_relaxed);
  if (!(word & NeighbourEntry::kResolved)) {
    st.unresolved.add();
    unresolved(m, key, id, vs.now);
    return;
  }
  if (e->used.load(std::memory_order_relaxed) == 0) e->used.store(1, std::memory_order_relaxed);
  rte_ether_hdr* eth = pkt::eth(m);
  std::memcpy(eth->dst_addr.addr_bytes, &word, RTE_ETHER_ADDR_LEN);
  if (const uint64_t src = port_mac_[pm.out_port]; src != 0)
    std::memcpy(eth->src_addr.addr_bytes, &src, RTE_ETHER_ADDR_LEN);
  st.resolved.add();
}

NeighbourCounters NeighbourStage::counters() const noexcept {
  NeighbourCounters c;
  for (unsigned i = 0; i < slots_; ++i) {
    c.resolved += lcores_[i].resolved.load();
    c.unresolved += lcores_[i].unresolved.load();
    c.unplaced += lcores_[i].unplaced.load();
  }
  return c;
}

Result<std::unique_ptr<Stage>> make_neighbour_stage(const config::StageConfig& cfg,
                                                    StageContext& ctx) {
  auto s = NeighbourStage::create(cfg, ctx);
  if (!s) return std::unexpected(s.error());
  return std::unique_ptr<Stage>(std::move(*s));
}

}  // namespace vecflow
