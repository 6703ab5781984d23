#include "pipeline/pipeline_worker.h"

#include <algorithm>
#include <array>

#include <rte_cycles.h>

#include "core/burst.h"
#include "core/offload_feed.h"
#include "core/packet.h"
#include "core/tracer.h"

namespace vecflow {

void StageEnv::flush_copies() noexcept {
  if (copies_.count == 0) return;
  sink_->copies(copies_.span());
  copies_.clear();
}

void StageEnv::flush_released() noexcept {
  if (released_.count == 0) return;
  runner_->finish_released(stage_, released_.span(), *sink_);
  released_.clear();
}

namespace {

void flush_drops(Burst& b, PortOutcomes* outcomes) noexcept {
  for (uint16_t i = 0; i < b.count; ++i) {
    rte_mbuf* m = b.pkts[i];
    outcomes[m->port].drops.add(static_cast<DropReason>(meta(m).drop_reason));
  }
  rte_pktmbuf_free_bulk(b.pkts, b.count);
  b.clear();
}

// The arrays one run sorts packets into. `tags` moves along with each packet when kTags.
struct Classes {
  rte_mbuf** pkts;
  uint8_t* tags;
  rte_mbuf** decided;
  uint8_t* decided_tags;
  size_t ndecided;
  Burst drops;
};

// Moves the decided packets of pkts[0, n) out (Transmit and Kernel to `decided`, Drop to the
// drop burst) and packs the undecided ones at the front, keeping their order. Returns how many
// are still undecided. After the last stage of the last group (kLast), an undecided packet is
// decided here: Transmit where a stage chose an egress port, else a no_route drop.
template <bool kTags, bool kLast>
size_t separate(Classes& c, size_t n, PortOutcomes* outcomes) noexcept {
  // Locals, not the struct's fields (the drop count too): the tag stores are byte stores,
  // which may alias anything, and would make the compiler reload every field from memory on
  // every packet.
  rte_mbuf** const pkts = c.pkts;
  uint8_t* const tags = c.tags;
  rte_mbuf** const decided = c.decided;
  uint8_t* const decided_tags = c.decided_tags;
  const int meta_offset = g_packet_meta_offset;
  size_t ndecided = c.ndecided;
  uint16_t ndrops = c.drops.count;
  size_t keep = 0;
  for (size_t i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    PacketMeta& pm = *RTE_MBUF_DYNFIELD(m, meta_offset, PacketMeta*);
    if constexpr (kLast) {
      if (pm.verdict == Verdict::Continue) {
        if (pm.out_port != kNoPort) {
          pm.verdict = Verdict::Transmit;
        } else {
          pm.verdict = Verdict::Drop;
          pm.drop_reason = static_cast<uint16_t>(DropReason::NO_ROUTE);
        }
      }
    }
    switch (pm.verdict) {
      case Verdict::Continue:
        pkts[keep] = m;
        if constexpr (kTags) tags[keep] = tags[i];
        ++keep;
        break;
      case Verdict::Drop:
        c.drops.pkts[ndrops++] = m;
        if (ndrops == kMaxBurst) {
          c.drops.count = ndrops;
          flush_drops(c.drops, outcomes);
          ndrops = 0;
        }
        break;
      case Verdict::Transmit:
      case Verdict::Kernel:
        decided[ndecided] = m;
        if constexpr (kTags) decided_tags[ndecided] = tags[i];
        ++ndecided;
        break;
      case Verdict::Held:  // the stage owns it now
        break;
    }
  }
  c.ndecided = ndecided;
  c.drops.count = ndrops;
  return keep;
}

// Records what stage `index` left each marked packet of pkts[0, n) with. After the last stage
// an undecided packet is shown as separate<kLast> will decide it.
void trace_stage(const Stage& stage, size_t index, rte_mbuf* const* pkts, size_t n,
                 bool last) noexcept {
  for (size_t i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    if (!trace::marked(m)) continue;
    const PacketMeta& pm = meta(m);
    trace::Record r;
    r.step = trace::Step::Stage;
    r.index = static_cast<uint16_t>(index);
    Verdict v = pm.verdict;
    r.reason = pm.drop_reason;
    if (last && v == Verdict::Continue) {
      v = pm.out_port != kNoPort ? Verdict::Transmit : Verdict::Drop;
      if (v == Verdict::Drop) r.reason = static_cast<uint16_t>(DropReason::NO_ROUTE);
    }
    r.verdict = static_cast<uint8_t>(v);
    if (v == Verdict::Transmit && (pm.flags & kMetaFlagCopy)) r.extra = trace::kTraceAnswered;
    r.port = pm.out_port;
    r.value = pm.nexthop;
    r.bytes = static_cast<uint16_t>(
        stage.describe(m, {reinterpret_cast<char*>(r.data.data()), r.data.size()}));
    trace::tracer().add(m, r);
  }
}

template <bool kTags>
GroupOutput run_group(Pipeline& pipeline, size_t group, Classes& c, size_t n, StageEnv& env,
                      unsigned slot, PortOutcomes* outcomes, bool traced) noexcept {
  const PipelineGroup& g = pipeline.groups()[group];
  const bool last = group + 1 == pipeline.groups().size();
  uint64_t t = rte_rdtsc();
  env.set_now(t);
  for (size_t i = 0; i < g.count && n > 0; ++i) {
    Stage& stage = pipeline.stage(g.first + i);
    env.set_stage(g.first + i);
    stage.process({c.pkts, n}, env);
    const uint64_t now = rte_rdtsc();
    StageLcoreStats& st = stage.lcore_stats(slot);
    st.calls.add();
    st.packets.add(n);
    st.cycles.add(now - t);
    if (traced) [[unlikely]]
      trace_stage(stage, g.first + i, c.pkts, n, last && i + 1 == g.count);
    t = now;
    if (last && i + 1 == g.count) {
      n = separate<kTags, true>(c, n, outcomes);
    } else if (!env.stage_kept_all()) {
      n = separate<kTags, false>(c, n, outcomes);
    }
  }
  if (c.drops.count) flush_drops(c.drops, outcomes);
  env.flush_copies();
  return GroupOutput{n, c.ndecided};
}

}  // namespace

GroupOutput PipelineWorker::run(size_t group, std::span<rte_mbuf*> pkts, uint8_t* tags,
                                rte_mbuf** decided, uint8_t* decided_tags, CopySink& copies,
                                bool traced) noexcept {
  StageEnv env(slot_, copies, *this, outcomes_);
  Classes c{pkts.data(), tags, decided, decided_tags, 0, {}};
  c.drops.clear();
  // Read before the stages read their tables (OffloadFeed::offer).
  const bool offering = offload_ != nullptr && offload_->enabled();
  const uint64_t changes = offering ? offload_->changes() : 0;
  GroupOutput r =
      tags ? run_group<true>(*pipeline_, group, c, pkts.size(), env, slot_, outcomes_, traced)
           : run_group<false>(*pipeline_, group, c, pkts.size(), env, slot_, outcomes_, traced);
  if (offering) [[unlikely]]
    offload_->offer(slot_, decided, r.decided, env.now(), changes);
  return r;
}

bool PipelineWorker::tick_stages(CopySink& sink, bool stop) noexcept {
  StageEnv env(slot_, sink, *this, outcomes_);
  bool gave = false;
  for (size_t i : pipeline_->holders()) {
    env.set_stage(i);
    gave |= pipeline_->stage(i).tick(env, stop);
    env.flush_released();
  }
  return gave;
}

bool PipelineWorker::holding() const noexcept {
  if (!holders_) return false;
  for (size_t i : pipeline_->holders()) {
    if (pipeline_->stage(i).holding(slot_)) return true;
  }
  return false;
}

void PipelineWorker::finish_released(size_t holder, std::span<rte_mbuf*> pkts,
                                     CopySink& sink) noexcept {
  // The stages after the holder, which are the rest of the last group (Pipeline::build), as
  // run_group runs them; then what is decided goes to the sink, drops are counted.
  rte_mbuf* decided[kMaxBurst];
  Classes c{pkts.data(), nullptr, decided, nullptr, 0, {}};
  c.drops.clear();
  StageEnv env(slot_, sink, *this, outcomes_);
  env.set_now(rte_rdtsc());
  const size_t first = holder + 1;
  const size_t end = pipeline_->size();
  // Held packets are few: each is looked at for a trace's mark. A marked one gets the
  // holder's step again (what it decided on giving the packet back), then each later stage's.
  const bool traced = std::any_of(pkts.begin(), pkts.end(), trace::marked);
  if (traced) trace_stage(pipeline_->stage(holder), holder, pkts.data(), pkts.size(), first == end);
  size_t n = first == end ? separate<false, true>(c, pkts.size(), outcomes_)
                          : separate<false, false>(c, pkts.size(), outcomes_);
  for (size_t i = first; i < end && n > 0; ++i) {
    env.set_stage(i);
    pipeline_->stage(i).process({c.pkts, n}, env);
    if (traced) trace_stage(pipeline_->stage(i), i, c.pkts, n, i + 1 == end);
    n = i + 1 == end ? separate<false, true>(c, n, outcomes_)
                     : separate<false, false>(c, n, outcomes_);
  }
  if (c.drops.count) flush_drops(c.drops, outcomes_);
  env.flush_copies();
  if (c.ndecided) sink.released({decided, c.ndecided});
}

void Sinks::released(std::span<rte_mbuf*> pkts) noexcept {
  Burst tx, kernel;
  tx.clear();
  kernel.clear();
  for (rte_mbuf* m : pkts)
    (meta(m).verdict == Verdict::Kernel ? kernel : tx).push(m);
  if (tx.count) transmit(tx.span());
  if (kernel.count) this->kernel(kernel.span());
}

void PipelineWorker::run_vector(size_t group, std::span<rte_mbuf*> pkts, Sinks& sinks) noexcept {
  std::array<rte_mbuf*, kMaxVectorPackets> decided;
  Burst tx, kernel;
  tx.clear();
  kernel.clear();
  size_t go_on = 0;
  for (size_t base = 0; base < pkts.size(); base += decided.size()) {
    const auto chunk = pkts.subspan(base, std::min(decided.size(), pkts.size() - base));
    GroupOutput r = run(group, chunk, nullptr, decided.data(), nullptr, sinks);
    // Transmit and Kernel apart, each in order, in chunks of at most kMaxBurst.
    for (size_t i = 0; i < r.decided; ++i) {
      rte_mbuf* m = decided[i];
      const bool to_kernel = meta(m).verdict == Verdict::Kernel;
      Burst& b = to_kernel ? kernel : tx;
      b.push(m);
      if (b.full()) {
        to_kernel ? sinks.kernel(b.span()) : sinks.transmit(b.span());
        b.clear();
      }
    }
    std::copy_n(chunk.begin(), r.go_on, pkts.begin() + go_on);
    go_on += r.go_on;
  }
  if (tx.count) sinks.transmit(tx.span());
  if (kernel.count) sinks.kernel(kernel.span());
  if (go_on) sinks.next(pkts.first(go_on));
}

}  // namespace vecflow
