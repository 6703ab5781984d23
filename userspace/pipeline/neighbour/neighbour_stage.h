// The `neighbour` stage: gives a routed packet the link-layer addresses of its next hop.
//
// For a packet the route stage placed (meta.out_port set), the next hop is meta.nexthop (the
// gateway's entry in the NeighbourTable) or, for a connected destination, the packet's own
// destination on out_port. A resolved next hop gets its MAC as destination and the egress
// port's MAC as source; the packet goes on (Continue). For an unresolved one the kernel is
// asked to resolve it (KernelSync sends the request; at most one per neighbour per
// KernelSync::kResolveRetry) and the packet follows the `unresolved` policy:
//
//   hold    (the default) kept, as Linux keeps unres_qlen packets per neighbour while it
//           resolves (RFC 1812 §3.3.2): each worker has kHoldQueues queues of hold_packets
//           packets, one per next hop it waits for, reserved at start. Once the next hop is
//           resolved its packets go on, in order, through the stages after this one (which
//           run on the same worker: the configuration requires them fused to it) and out,
//           counted as tx of their ingress port like any packet. When the queue is full, or no
//           queue is free, the packet is dropped (neigh_unresolved); after hold_timeout_ms
//           without resolution the queue's packets are, too. A packet to a next hop that has
//           packets held on this worker never overtakes them: it joins the queue (or is
//           dropped when it is full), so it can leave only after them.
//   kernel  handed to the kernel, which queues it while it resolves (if it forwards at all)
//   drop    dropped (neigh_unresolved)
// A next hop that is an address of the box itself (NeighbourEntry::kLocal: a connected route
// covers the box's own address) is no neighbour: its packets go to the kernel, whatever the
// policy.
//
// Held packets leave through tick(), which every worker runs on each round of its service
// loop (PipelineWorker::tick): sent once resolved, dropped on timeout, and all of them at
// stop (sent if resolved, else dropped). While held they are counted as `held` at their
// ingress port (core/accounting.h), so the accounting adds up at any moment.
//
// Packets no stage placed are left alone. Connected destinations are looked up in bulk per
// batch of packets, once per run of packets to the same destination.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "core/packet.h"
#include "pipeline/neighbour_table.h"
#include "pipeline/stage.h"

namespace vecflow {

// What the neighbour stage does with a packet whose next hop has no link-layer address yet:
// hold it while the kernel resolves (sent once resolved, as Linux queues unres_qlen packets
// per neighbour), hand it to the kernel, or drop it (neigh_unresolved).
enum class Unresolved { Hold, Kernel, Drop };
inline constexpr std::string_view unresolved_name(Unresolved u) noexcept {
  return u == Unresolved::Hold ? "hold" : u == Unresolved::Kernel ? "kernel" : "drop";
}
// Most packets held per next hop and worker: what hold_packets accepts (Linux's unres_qlen
// defaults to 101 since 3.3, but a few are what the first packets of a flow need).
inline constexpr uint16_t kMaxHoldPackets = 64;

struct StaticNeighbour {
  IpAddress ip;
  MacAddress mac;
  std::string port;
};

// The keys of a `stage: neighbour` entry (configs/reference.yaml).
struct NeighbourConfig {
  std::vector<StaticNeighbour> entries;
  bool from_kernel = true;  // learn from the kernel's neighbour table over netlink
  Unresolved unresolved = Unresolved::Hold;
  // Hold: packets held per next hop per worker (more are dropped), and how long a next hop
  // may take to resolve before its held packets are dropped (Linux: unres_qlen and
  // mcast_solicit x retrans_time, 3 probes 1 s apart).
  uint16_t hold_packets = 4;
  uint32_t hold_timeout_ms = 3000;
};

struct NeighbourCounters {
  uint64_t resolved = 0;
  uint64_t unresolved = 0;  // held, handed to the kernel or dropped, as configured
  uint64_t unplaced = 0;    // no egress port: left for later stages
  // Policy hold: packets taken into a queue, sent from one once resolved, dropped from one
  // (timeout, or stop before resolution); the rest of `unresolved` was dropped at once (full).
  uint64_t held = 0;
  uint64_t held_sent = 0;
  uint64_t held_dropped = 0;
  uint64_t holding() const noexcept { return held - held_sent - held_dropped; }
};

class NeighbourStage final : public Stage {
 public:
  bool reads_flow_hash() const noexcept override { return false; }
  bool offloadable() const noexcept override { return true; }
  // Packets handled per pass: the connected destinations among them are looked up in one
  // bulk call (at most NeighbourTable::kMaxBulk).
  static constexpr unsigned kBatch = 64;
  // Next hops a worker holds packets for at once (policy hold); packets to more are dropped
  // as neigh_unresolved. Enough for the burst of fresh next hops a box meets after a start
  // or a link change, small enough that finding a next hop's queue (a scan, on the
  // unresolved path only) stays short.
  static constexpr unsigned kHoldQueues = 64;
  // How often, at most, a worker looks at its held queues (tick): a next hop takes far
  // longer to resolve (an ARP or ND round trip), and a worker busy with traffic polls far
  // more often, each time paying a scan of the queues and a hash lookup per connected
  // destination still without an entry.
  static constexpr uint64_t kHoldCheckUs = 10;

  static Result<std::unique_ptr<NeighbourStage>> create(const config::StageConfig& cfg,
                                                        StageContext& ctx);

  ~NeighbourStage() override;

  void process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept override;
  // The destination MAC address it wrote, or why it has none.
  size_t describe(rte_mbuf* m, std::span<char> out) const noexcept override;
  bool holds_packets() const noexcept override { return policy_ == Unresolved::Hold; }
  bool tick(StageEnv& env, bool stop) noexcept override;
  void set_port(PortId id, const PortInfo& info) override;
  bool holding(unsigned slot) const noexcept override { return holds_ && holds_[slot].held > 0; }

  Unresolved unresolved_policy() const noexcept { return policy_; }
  NeighbourTable& table() noexcept { return *table_; }
  NeighbourCounters counters() const noexcept;

 private:
  struct alignas(64) LcoreState {
    Counter resolved, unresolved, unplaced, held, held_sent, held_dropped;
  };
  // One next hop's held packets on one worker, oldest first.
  struct HoldQueue {
    NeighbourKey key;   // a connected destination's (by_key), else unused
    uint32_t id;        // its entry; kNotFound while a connected destination has none
    bool by_key;        // found by key (connected destination) or by id (gateway)
    uint16_t count;     // 0: free
    uint64_t deadline;  // TSC: dropped unless resolved by then
    rte_mbuf** pkts;    // hold_packets slots of the worker's HoldState::pkts
  };
  // The held packets of one worker, written by that worker only.
  struct HoldState {
    uint32_t held = 0;     // packets in its queues
    uint64_t checked = 0;  // TSC of the last look at them
    std::vector<HoldQueue> queues;
    std::vector<rte_mbuf*> pkts;
  };

  NeighbourStage(const config::StageConfig& cfg, StageContext& ctx);
  // Applies the unresolved policy to `m` (next hop `id`, or a connected destination `key`).
  // Returns whether it was held.
  bool unresolved(rte_mbuf* m, const NeighbourKey* key, uint32_t id, uint64_t now,
                  StageEnv& env) noexcept;
  // The queue of a next hop on this worker, or nullptr.
  HoldQueue* held_queue(HoldState& hs, const NeighbourKey* key, uint32_t id) noexcept;
  // Takes `m` into the next hop's queue (made if there is none). False when full.
  bool hold(HoldState& hs, rte_mbuf* m, const NeighbourKey* key, uint32_t id, uint64_t now,
            StageEnv& env) noexcept;

  NeighbourTable* table_;
  Unresolved policy_;
  bool resolve_;                     // a KernelSync drains resolution requests
  uint64_t retry_tsc_;               // KernelSync::kResolveRetry in TSC cycles
  std::vector<uint64_t> port_mac_;   // source MAC of each port (NeighbourEntry word form), 0: keep
  std::vector<VlanTags> port_vlan_;  // a VLAN port's tags, written with the MACs
  std::unique_ptr<LcoreState[]> lcores_;
  unsigned slots_;
  uint16_t hold_packets_;
  uint64_t hold_tsc_;                   // hold_timeout_ms in TSC cycles
  uint64_t check_tsc_;                  // kHoldCheckUs in TSC cycles
  std::unique_ptr<HoldState[]> holds_;  // per lcore slot; empty unless the policy is hold
};

struct StageModule;
// The neighbour stage type: its configuration, factory and live reload of its static entries.
StageModule neighbour_stage_module();

}  // namespace vecflow
