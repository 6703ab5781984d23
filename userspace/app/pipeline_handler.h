// The glue between the scheduler's Worker and the pipeline: runs the stage group an event is
// queued for on the event's packets, and moves the event on.
//
// For an event dequeued from the queue of group g, PipelineWorker::run() gives every packet a
// place (pipeline/worker.h). What this handler does with each:
//   dropped            freed and counted by the pipeline worker itself
//   still Continue     the event carries them on: its packets become exactly these (packed at
//                      the front of the vector, order kept) and it is forwarded to group g+1
//   Transmit/Kernel    if the event goes on, handed to the TxAdapter now (they are decided;
//                      later groups must not run on them); if the event is finished, put back
//                      into it, so that the Worker finishes it through the TxAdapter — after
//                      the egress queue restored the order when the group is ordered
//   mirror copies      handed to the TxAdapter now (charged to no port)
// An event left with no packet is finished empty (a vector is returned to its pool, a
// single-packet event becomes a payload-less CPU event).
//
// Threading: one handler per worker lcore, used only by the Worker service on that lcore.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "pipeline/worker.h"
#include "sched/tx_adapter.h"
#include "sched/worker.h"

namespace vecflow {

// Largest vector the configuration accepts (scheduler.vector.size): the handler stages up to
// this many decided packets of one event.
inline constexpr uint16_t kMaxVectorPackets = 1024;

class PipelineHandler final : public sched::EventHandler, private Sinks {
 public:
  // `group_queue[g]`: the scheduler queue of pipeline group g.
  PipelineHandler(Pipeline& pipeline, OutcomeTable& outcomes, unsigned slot,
                  std::vector<uint8_t> group_queue, sched::TxAdapter& tx);

  void process(std::span<rte_event> events) noexcept override;

 private:
  void transmit(std::span<rte_mbuf*> pkts) noexcept override { stage(pkts); }
  void kernel(std::span<rte_mbuf*> pkts) noexcept override { stage(pkts); }
  void next(std::span<rte_mbuf*> pkts) noexcept override { next_ = pkts.size(); }
  void copies(std::span<rte_mbuf*> pkts) noexcept override { tx_.take(pkts); }
  void stage(std::span<rte_mbuf*> pkts) noexcept;

  PipelineWorker worker_;
  std::vector<uint8_t> group_queue_;
  std::array<uint8_t, sched::kMaxQueues> queue_group_{};
  sched::TxAdapter& tx_;
  size_t next_ = 0;
  uint16_t staged_ = 0;
  std::array<rte_mbuf*, kMaxVectorPackets> decided_{};
};

}  // namespace vecflow
