// The glue between the scheduler's Worker and the pipeline: runs the stage group events are
// queued for on their packets, and moves each event on.
//
// Stages run on whole bursts. Consecutive events of a dequeued burst queued for the same group
// are gathered into one array of packets (up to kGatherPackets, more only for a single large
// vector), tagged with their event, and each stage of the group runs once over all of them:
// with many flows a vector holds few packets, and running the stages per event would pay every
// stage's per-call cost (table loads, counters, clock reads) for a packet or two. Events keep
// their order, so a flow's packets keep theirs.
//
// What PipelineWorker::run() leaves (pipeline/pipeline_worker.h), per event:
//   dropped            freed and counted by the pipeline worker itself
//   still Continue     the event carries them on: its packets become exactly these (packed at
//                      the front of the vector, order kept) and it is forwarded to group g+1
//   Transmit/Kernel    handed to the TxAdapter now. Only when the group's queue is ordered and
//                      the event is finished are they put back into it, so that the Worker
//                      sends them through the egress queue, which restores the order
//   mirror copies      handed to the TxAdapter now (charged to no port)
//   held, given back   handed to the TxAdapter now, ahead of the run's decided packets (tx of
//                      their ingress port); so are those a tick() gives back between events
// Events the rx adapter marked (sub_event_type, core/tracer.h) carry packets a trace follows:
// their dequeue and every stage's decision are recorded for those packets.
// An event left with no packet is finished empty (a vector is returned to its pool, a
// single-packet event becomes a payload-less CPU event).
//
// Threading: one handler per worker lcore, used only by the Worker service on that lcore.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "pipeline/pipeline_worker.h"
#include "sched/tx_adapter.h"
#include "sched/worker.h"

namespace vecflow {

// Packets gathered from consecutive events before the group's stages run over them. Enough for
// every stage's per-call cost to vanish per packet, few enough that what the stages touch of
// each packet (two mbuf lines and a header line: 24 KiB for 128) stays in a 48 KiB L1 from
// one stage to the next; at 256 it did not (stages 30% slower per packet on event_dsw, whose
// dequeues gather ~240).
inline constexpr size_t kGatherPackets = 128;

class PipelineHandler final : public sched::EventHandler, private CopySink {
 public:
  // `group_queue[g]`: the scheduler queue of pipeline group g.
  PipelineHandler(Pipeline& pipeline, OutcomeTable& outcomes, unsigned slot,
                  std::vector<uint8_t> group_queue, sched::TxAdapter& tx);

  void process(std::span<rte_event> events) noexcept override;
  // Held packets that are due (sent or dropped), and all of them at stop.
  bool tick() noexcept override { return worker_.tick(*this); }
  bool holding() const noexcept override { return worker_.holding(); }
  void stop() noexcept override { worker_.stop(*this); }

 private:
  void copies(std::span<rte_mbuf*> pkts) noexcept override { tx_.take(pkts); }
  void released(std::span<rte_mbuf*> pkts) noexcept override { tx_.take(pkts); }
  // Runs the group of events[first, last) over their gathered packets and moves each on.
  // `traced`: an event carries packets a trace follows (core/tracer.h).
  void run_gathered(std::span<rte_event> events, size_t first, size_t last, size_t npkts,
                    bool traced) noexcept;
  // Records the dequeue of each traced packet of `events`.
  void trace_dequeued(std::span<rte_event> events) noexcept;

  Pipeline& pipeline_;
  PipelineWorker worker_;
  std::vector<uint8_t> group_queue_;
  std::vector<bool> group_ordered_;
  std::array<uint8_t, sched::kMaxQueues> queue_group_{};
  sched::TxAdapter& tx_;
  // One gathering: packets with their event's index in the burst, and the decided ones.
  // kMaxVectorPackets also holds a single vector larger than kGatherPackets.
  std::array<rte_mbuf*, kMaxVectorPackets> pkts_{};
  std::array<uint8_t, kMaxVectorPackets> tags_{};
  std::array<rte_mbuf*, kMaxVectorPackets> decided_{};
  std::array<uint8_t, kMaxVectorPackets> decided_tags_{};
};

}  // namespace vecflow
