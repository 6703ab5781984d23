// The pipeline run straight on what the ports deliver, with no scheduler in between: the data
// path when one worker lcore polls every rx queue (scheduler.path: auto, datapath.h).
//
// With a single worker there is nothing to schedule: every flow is on that worker, in the order
// its queue delivered it, and every stage group runs to completion there. So the worker's poll
// takes up to kDirectBursts bursts from each of its rx queues (a queue that returns less than a
// burst is empty for now), runs the pipeline's groups in turn over the packets (each group's
// undecided packets go on to the next), hands what is decided to its TxAdapter and flushes it:
// as VPP's input node hands a frame to the graph and l3fwd-graph runs its nodes on a burst. What
// this saves against rx adapter -> scheduler -> worker is the vectors by flow bucket, the
// events, the enqueue and dequeue, and the gather of the packets of several events: 20-30
// cycles a packet of route + neighbour's ~100-130 here (1.18-1.38x the scheduled path,
// tools/bench/log/2026-12-05-engine-direct-path.md). A packet after which nothing comes
// leaves in the poll that received it, as on the scheduled path.
//
// Accounting is the scheduled path's: rx counted here, per ingress port, in this lcore's row
// of the OutcomeTable; tx, kernel and drops where the pipeline and the TxAdapter decide them.
// Rx hooks run on each burst as the rx adapter runs them; a burst they ran on is run with the
// trace's per-stage records on.
//
// Sleeping: arms every rx queue's wake-up (Port::arm_wakeup); a pipeline holding packets for
// an unresolved next hop bounds the sleep (sched::kHeldWakeUs).
//
// Threading: poll() on its lcore only; park() after the service left its lcore.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/accounting.h"
#include "core/counter.h"
#include "pipeline/pipeline_worker.h"
#include "runtime/service.h"
#include "sched/tx_adapter.h"

namespace vecflow {

class HookTable;
class Port;

// Packets asked of a port per rx burst, and bursts taken from one queue per poll while they come
// back full: up to 128 packets per pipeline run, what the pipeline handler gathers from events
// (datapath/pipeline_handler.h, kGatherPackets), so that a stage's per-call cost vanishes per
// packet while what it touches of them stays in L1.
inline constexpr uint16_t kDirectBurst = 32;
inline constexpr uint16_t kDirectBursts = 4;

struct DirectPathStats {
  Counter packets;  // received
  Counter runs;     // pipeline runs (packets / runs: the mean run)
};

class DirectPath final : public Service, private CopySink {
 public:
  // `outcomes`: this lcore's OutcomeTable row (indexed by PortId); `slot` its slot (the
  // pipeline's per-lcore state). `hooks`: rx hooks, nullptr for none.
  DirectPath(std::string name, Pipeline& pipeline, OutcomeTable& outcomes, unsigned slot,
             sched::TxAdapter& tx, HookTable* hooks);

  // Before the service runs.
  void add_queue(Port& port, uint16_t queue);

  bool poll() noexcept override;
  bool arm_wakeup(WakeFds& fds) noexcept override;
  void disarm_wakeup() noexcept override;
  // After the service left its lcore: gives back every held packet (sent or dropped) and sends
  // what the TxAdapter buffers.
  void park() noexcept;

  const DirectPathStats& path_stats() const noexcept { return stats_; }
  size_t queue_count() const noexcept { return queues_.size(); }

 private:
  struct RxQueue {
    Port* port;
    uint16_t queue;
    uint16_t port_id;
  };
  static constexpr size_t kMaxRun = size_t{kDirectBurst} * kDirectBursts;

  // Receives up to kDirectBursts bursts from `q` into pkts_; returns how many packets. Sets
  // `traced` when a hook ran on a burst.
  size_t receive(const RxQueue& q, bool& traced) noexcept;
  void run(size_t n, bool traced) noexcept;
  void copies(std::span<rte_mbuf*> pkts) noexcept override { tx_.take(pkts); }
  void released(std::span<rte_mbuf*> pkts) noexcept override { tx_.take(pkts); }

  Pipeline& pipeline_;
  PipelineWorker worker_;
  PortOutcomes* outcomes_;
  sched::TxAdapter& tx_;
  HookTable* hooks_;
  std::vector<RxQueue> queues_;
  size_t armed_ = 0;
  DirectPathStats stats_;
  std::array<rte_mbuf*, kMaxRun> pkts_{};
  std::array<rte_mbuf*, kMaxRun> decided_{};
};

}  // namespace vecflow
