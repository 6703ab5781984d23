// Running a pipeline on one worker lcore: the contract between the pipeline and whatever
// moves vectors between stages (the scheduler's worker service).
//
// The pipeline's stages are grouped: a stage with `fuse: true` joins the group of the stage
// before it, and a group runs to completion on one worker. Each group is one scheduler queue
// (Pipeline::groups() gives their schedule types). A worker gathers the packets of the events
// it dequeued for group g (several vectors, as VPP gathers a frame for a node) and calls
//
//     GroupOutput r = worker.run(g, pkts, tags, decided, decided_tags, copies);
//
// which runs each of the group's stages once over all of them, then gives every packet to
// exactly one place:
//
//   verdict Drop       freed here, counted in the OutcomeTable row of this lcore at the
//                      packet's ingress port (m->port) under its drop reason
//   verdict Transmit   decided[0, r.decided): send on meta(m).out_port (the tx side counts tx)
//   verdict Kernel     decided[0, r.decided) too: hand to the ingress interface's kernel stack
//   still Continue     pkts[0, r.go_on): on to group g+1 (same flow, same order). After the
//                      last group there are none: a packet with an out_port is Transmit, one
//                      without is dropped as no_route (no stage decided where it goes)
//   made by a stage    copies.copies(): mirror copies, verdict Transmit, kMetaFlagCopy set;
//                      transmit them but charge them to no port (they never entered)
//   verdict Held       kept by the stage (StageEnv::hold), counted as held at the ingress
//                      port; the run forgets it
//   given back         copies.released(): packets a stage held and gave back in tick(), after
//                      the stages that follow it ran on them (Transmit or Kernel); charge
//                      them to their ingress port like any decided packet. Those it drops
//                      are freed and counted here, as above
//
// Stages that hold packets give them back also when no vector comes: the worker's service
// loop calls tick() on every round, and stop() once when it stops, which gives back (sends
// or drops, counted) every packet held on this lcore.
//
// Each class keeps the packets' relative order, and tags[i] (the caller's mark, such as the
// index of the event a packet came in) travels with pkts[i] into the class it ends in.
//
// With flow offload on (core/offload_feed.h), run() offers the flows of the packets it decided
// to transmit, which costs a parse per packet until the flow's XDP entry takes its packets.
//
// Threading: one PipelineWorker per worker lcore, used only by that lcore. run() is noexcept,
// never allocates and never blocks. Between calls the lcore holds no pointer into stage tables,
// so its service loop's end of round is its quiescent point (runtime/qsbr.h, Lcore::run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/accounting.h"
#include "pipeline/pipeline.h"

namespace vecflow {

// Largest vector the configuration accepts (scheduler.vector.size), and so the most packets
// of one event.
inline constexpr uint16_t kMaxVectorPackets = 1024;

// Where packets a stage hands over outside the vector go (the tx side). Takes ownership; may
// be called several times per run or tick, in chunks of at most kMaxBurst packets.
class CopySink {
 public:
  virtual ~CopySink() = default;
  // Mirror copies (Transmit, kMetaFlagCopy): charged to no port.
  virtual void copies(std::span<rte_mbuf*> pkts) noexcept = 0;
  // Held packets given back and decided (Transmit or Kernel, as the stages after the holder
  // left them), in order: charged to their ingress port like any decided packet.
  virtual void released(std::span<rte_mbuf*> pkts) noexcept = 0;
};

// Every outcome of one run as a call: PipelineWorker::run_vector's interface for tests,
// benchmarks and fuzzing. transmit() and kernel() take ownership in chunks of at most
// kMaxBurst packets; next() receives the Continue remainder at once, in place.
class Sinks : public CopySink {
 public:
  virtual void transmit(std::span<rte_mbuf*> pkts) noexcept = 0;
  // Held packets given back go where decided packets of a run go.
  void released(std::span<rte_mbuf*> pkts) noexcept final;
  virtual void kernel(std::span<rte_mbuf*> pkts) noexcept = 0;
  virtual void next(std::span<rte_mbuf*> pkts) noexcept = 0;
};

struct GroupOutput {
  size_t go_on = 0;    // pkts[0, go_on): still Continue
  size_t decided = 0;  // decided[0, decided): Transmit or Kernel
};

class PipelineWorker {
 public:
  // `slot` is this lcore's row in `outcomes` and its index into per-lcore stage state.
  PipelineWorker(Pipeline& pipeline, OutcomeTable& outcomes, unsigned slot) noexcept
      : pipeline_(&pipeline),
        outcomes_(outcomes.row(slot)),
        slot_(slot),
        holders_(!pipeline.holders().empty()),
        offload_(pipeline.offload_feed()) {}

  // Runs group `group` on `pkts` (reordered in place). `tags` (may be null) and the decided
  // arrays hold at least pkts.size() entries. `traced`: some packets may be marked by a trace
  // (core/tracer.h); after each stage, each marked packet's state is recorded.
  GroupOutput run(size_t group, std::span<rte_mbuf*> pkts, uint8_t* tags, rte_mbuf** decided,
                  uint8_t* decided_tags, CopySink& copies, bool traced = false) noexcept;

  // The same for one vector, each class handed to `sinks` (next() gets pkts' front).
  void run_vector(size_t group, std::span<rte_mbuf*> pkts, Sinks& sinks) noexcept;

  // One round of the worker's service loop: the stages that hold packets give back what is
  // due (to sink.released(), drops counted here). Returns whether any packet was given back.
  // Costs a branch when no stage of the pipeline holds packets.
  bool tick(CopySink& sink) noexcept { return holders_ ? tick_stages(sink, false) : false; }
  // The worker stops: every held packet of this lcore is given back, sent or dropped.
  void stop(CopySink& sink) noexcept {
    if (holders_) tick_stages(sink, true);
  }

  // Whether a stage holds packets of this lcore now (they are given back by tick()).
  bool holding() const noexcept;

  unsigned slot() const noexcept { return slot_; }

 private:
  friend class StageEnv;
  bool tick_stages(CopySink& sink, bool stop) noexcept;
  // Runs the stages after `holder` on packets it gave back and hands on what they decide.
  void finish_released(size_t holder, std::span<rte_mbuf*> pkts, CopySink& sink) noexcept;

  Pipeline* pipeline_;
  PortOutcomes* outcomes_;
  unsigned slot_;
  bool holders_;          // some stage holds packets
  OffloadFeed* offload_;  // flow offload's feed: the run offers what it transmits
};

}  // namespace vecflow
