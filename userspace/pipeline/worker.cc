#include "pipeline/worker.h"

#include <rte_cycles.h>

#include "core/packet.h"

namespace vecflow {

void StageEnv::flush_copies() noexcept {
  if (copies_.count == 0) return;
  sinks_->copies(copies_.span());
  copies_.clear();
}

namespace {

// Decided packets waiting for their sink, flushed whenever a buffer fills and at the end of
// a run. Fixed arrays on the worker's stack: a vector may be larger than a burst.
struct Outboxes {
  Burst drop;
  Burst transmit;
  Burst kernel;
};

void flush_drops(Burst& b, PortOutcomes* outcomes) noexcept {
  for (uint16_t i = 0; i < b.count; ++i) {
    rte_mbuf* m = b.pkts[i];
    outcomes[m->port].drops.add(static_cast<DropReason>(meta(m).drop_reason));
  }
  rte_pktmbuf_free_bulk(b.pkts, b.count);
  b.clear();
}

// Moves every decided packet of `pkts` to its outbox and packs the undecided ones at the
// front, keeping their order. Returns how many are still undecided.
size_t separate(std::span<rte_mbuf*> pkts, Outboxes& out, PortOutcomes* outcomes,
                Sinks& sinks) noexcept {
  size_t keep = 0;
  for (rte_mbuf* m : pkts) {
    switch (meta(m).verdict) {
      case Verdict::Continue:
        pkts[keep++] = m;
        break;
      case Verdict::Drop:
        out.drop.push(m);
        if (out.drop.full()) flush_drops(out.drop, outcomes);
        break;
      case Verdict::Transmit:
        out.transmit.push(m);
        if (out.transmit.full()) {
          sinks.transmit(out.transmit.span());
          out.transmit.clear();
        }
        break;
      case Verdict::Kernel:
        out.kernel.push(m);
        if (out.kernel.full()) {
          sinks.kernel(out.kernel.span());
          out.kernel.clear();
        }
        break;
    }
  }
  return keep;
}

}  // namespace

void PipelineWorker::run(size_t group, std::span<rte_mbuf*> pkts, Sinks& sinks) noexcept {
  const PipelineGroup& g = pipeline_->groups()[group];
  const bool last = group + 1 == pipeline_->groups().size();
  StageEnv env(slot_, sinks);
  Outboxes out;
  out.drop.clear();
  out.transmit.clear();
  out.kernel.clear();

  uint64_t t = rte_rdtsc();
  env.now_ = t;
  size_t n = pkts.size();
  for (size_t i = 0; i < g.count && n > 0; ++i) {
    Stage& stage = pipeline_->stage(g.first + i);
    stage.process(pkts.first(n), env);
    uint64_t now = rte_rdtsc();
    StageLcoreStats& st = stage.lcore_stats(slot_);
    st.calls.add();
    st.packets.add(n);
    st.cycles.add(now - t);
    t = now;
    n = separate(pkts.first(n), out, outcomes_, sinks);
  }

  if (last) {
    // End of the pipeline: a packet some stage gave an egress port leaves through it; one
    // that no stage placed has nowhere to go.
    for (size_t i = 0; i < n; ++i) {
      rte_mbuf* m = pkts[i];
      PacketMeta& pm = meta(m);
      if (pm.out_port != kNoPort) {
        pm.verdict = Verdict::Transmit;
      } else {
        pm.verdict = Verdict::Drop;
        pm.drop_reason = static_cast<uint16_t>(DropReason::NO_ROUTE);
      }
    }
    n = separate(pkts.first(n), out, outcomes_, sinks);
  } else if (n > 0) {
    sinks.next(pkts.first(n));
  }

  if (out.drop.count) flush_drops(out.drop, outcomes_);
  if (out.transmit.count) sinks.transmit(out.transmit.span());
  if (out.kernel.count) sinks.kernel(out.kernel.span());
  env.flush_copies();
}

}  // namespace vecflow
