// The `neighbour` stage: gives a routed packet the link-layer addresses of its next hop.
//
// For a packet the route stage placed (meta.out_port set), the next hop is meta.nexthop (the
// gateway's entry in the NeighbourTable) or, for a connected destination, the packet's own
// destination on out_port. A resolved next hop gets its MAC as destination and the egress
// port's MAC as source; the packet goes on (Continue). An unresolved one is handed to the
// kernel (which queues it while it resolves) or dropped (neigh_unresolved), as configured,
// and the kernel is asked to resolve it (KernelSync sends the request; at most one per
// neighbour per KernelSync::kResolveRetry).
//
// Packets no stage placed are left alone. Connected destinations are looked up in bulk per
// batch of packets, once per run of packets to the same destination.
#pragma once

#include <memory>
#include <vector>

#include "config/config.h"
#include "core/packet.h"
#include "pipeline/neighbour_table.h"
#include "pipeline/stage.h"

namespace vecflow {

struct NeighbourCounters {
  uint64_t resolved = 0;
  uint64_t unresolved = 0;  // handed to the kernel or dropped, as configured
  uint64_t unplaced = 0;    // no egress port: left for later stages
};

class NeighbourStage final : public Stage {
 public:
  // Packets handled per pass: the connected destinations among them are looked up in one
  // bulk call (at most NeighbourTable::kMaxBulk).
  static constexpr unsigned kBatch = 64;

  static Result<std::unique_ptr<NeighbourStage>> create(const config::StageConfig& cfg,
                                                        StageContext& ctx);

  void process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept override;

  config::Unresolved unresolved_policy() const noexcept { return policy_; }
  NeighbourTable& table() noexcept { return *table_; }
  NeighbourCounters counters() const noexcept;

 private:
  struct alignas(64) LcoreState {
    Counter resolved, unresolved, unplaced;
  };
  NeighbourStage(const config::StageConfig& cfg, StageContext& ctx);
  void unresolved(rte_mbuf* m, const NeighbourKey* key, uint32_t id, uint64_t now) noexcept;

  NeighbourTable* table_;
  config::Unresolved policy_;
  bool resolve_;                    // a KernelSync drains resolution requests
  uint64_t retry_tsc_;              // KernelSync::kResolveRetry in TSC cycles
  std::vector<uint64_t> port_mac_;  // source MAC of each port (NeighbourEntry word form), 0: keep
  std::unique_ptr<LcoreState[]> lcores_;
  unsigned slots_;
};

Result<std::unique_ptr<Stage>> make_neighbour_stage(const config::StageConfig& cfg,
                                                    StageContext& ctx);

}  // namespace vecflow
