// Running a pipeline on one worker lcore: the contract between the pipeline and whatever
// moves vectors between stages (the scheduler's worker service).
//
// The pipeline's stages are grouped: a stage with `fuse: true` joins the group of the stage
// before it, and a group runs to completion on one worker. Each group is one scheduler queue
// (Pipeline::groups() gives their schedule types). For a vector dequeued from group g's queue,
// the worker calls
//
//     worker.run(g, packets, sinks);
//
// which runs the group's stages in order and then gives every packet to exactly one place:
//
//   verdict Drop       freed here, counted in the OutcomeTable row of this lcore at the
//                      packet's ingress port (m->port) under its drop reason
//   verdict Transmit   sinks.transmit(): send on meta(m).out_port; the tx side counts tx
//   verdict Kernel     sinks.kernel(): hand to the ingress interface's kernel stack
//   still Continue     sinks.next(): enqueue to group g+1 (same flow, same order); after the
//                      last group a packet with an out_port is transmitted, one without is
//                      dropped as no_route (no stage decided where it goes)
//   made by a stage    sinks.copies(): mirror copies, verdict Transmit, kMetaFlagCopy set;
//                      transmit them but charge them to no port (they never entered)
//
// Each class keeps the packets' relative order. Sinks take ownership of what they are given
// and may be called several times per run (in chunks of at most kMaxBurst packets, except
// next(), which receives the whole remainder of the vector at once, in place).
//
// Threading: one PipelineWorker per worker lcore, used only by that lcore. run() is noexcept,
// never allocates and never blocks. Between calls the lcore holds no pointer into stage tables,
// so its service loop's end of round is its quiescent point (runtime/qsbr.h, Lcore::run).
#pragma once

#include <cstddef>
#include <span>

#include "core/accounting.h"
#include "pipeline/pipeline.h"

namespace vecflow {

class Sinks {
 public:
  virtual ~Sinks() = default;
  virtual void transmit(std::span<rte_mbuf*> pkts) noexcept = 0;
  virtual void kernel(std::span<rte_mbuf*> pkts) noexcept = 0;
  virtual void next(std::span<rte_mbuf*> pkts) noexcept = 0;
  virtual void copies(std::span<rte_mbuf*> pkts) noexcept = 0;
};

class PipelineWorker {
 public:
  // `slot` is this lcore's row in `outcomes` and its index into per-lcore stage state.
  PipelineWorker(Pipeline& pipeline, OutcomeTable& outcomes, unsigned slot) noexcept
      : pipeline_(&pipeline), outcomes_(outcomes.row(slot)), slot_(slot) {}

  // Runs group `group` on `pkts` (one vector; the array is reordered in place).
  void run(size_t group, std::span<rte_mbuf*> pkts, Sinks& sinks) noexcept;

  unsigned slot() const noexcept { return slot_; }

 private:
  Pipeline* pipeline_;
  PortOutcomes* outcomes_;
  unsigned slot_;
};

}  // namespace vecflow
