// What a loaded port of the builtin scheduler gives away (sched/builtin_backend.h, flow
// migration): it samples the flow slots of the events it dequeues, and when it is busier than
// the least loaded running port by enough, it picks the heaviest sampled slots whose move
// narrows the gap. The migration protocol that then moves them safely is the port's
// (builtin_backend.cc); this is only the choice, a pure function of the samples and two loads.
//
// Threading: one per worker port, used by its lcore only.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "sched/builtin_backend.h"

namespace vecflow::sched {

// The slots chosen and the load (per mille) they are estimated to carry.
struct FlowChoice {
  uint8_t count = 0;
  std::array<uint32_t, kMaxFlowsPerMigration> keys{};
  int32_t moved = 0;
};

class FlowSamples {
 public:
  // The flow key (queue and slot) of one dequeued event; the oldest sample makes room.
  void add(uint32_t key) noexcept {
    samples_[pos_] = key;
    pos_ = static_cast<uint16_t>((pos_ + 1) % kFlowSamples);
    if (n_ < kFlowSamples) ++n_;
  }
  // A choice is made only on a full window: fewer samples say too little of each flow's share.
  bool full() const noexcept { return n_ == kFlowSamples; }
  void clear() noexcept { n_ = 0; }

  // Flows to move from a port at `source_load` to one at `target_load`, at most `max_flows`
  // (<= kMaxFlowsPerMigration): the heaviest first, each only while its share of the source's
  // load is below the gap that remains (moving more would make the target the hotter one).
  FlowChoice choose(int32_t source_load, int32_t target_load, uint8_t max_flows) const noexcept {
    std::array<uint32_t, kFlowSamples> keys = samples_;
    std::sort(keys.begin(), keys.begin() + n_);
    struct Candidate {
      uint32_t key;
      uint16_t count;
    };
    std::array<Candidate, kFlowSamples> cand;
    uint16_t ncand = 0;
    for (uint16_t i = 0; i < n_; ++i) {
      if (ncand > 0 && cand[ncand - 1].key == keys[i]) {
        ++cand[ncand - 1].count;
      } else {
        cand[ncand++] = {keys[i], 1};
      }
    }
    // Heaviest first, equal counts by key: a total order, so std::sort (which, unlike
    // std::stable_sort, never allocates) gives one answer.
    std::sort(cand.begin(), cand.begin() + ncand, [](const Candidate& a, const Candidate& b) {
      return a.count != b.count ? a.count > b.count : a.key < b.key;
    });
    FlowChoice c;
    const uint8_t most = std::min<uint8_t>(max_flows, kMaxFlowsPerMigration);
    for (uint16_t i = 0; i < ncand && c.count < most; ++i) {
      const int32_t f = source_load * cand[i].count / kFlowSamples;
      if (f <= 0 || f >= source_load - target_load) continue;
      c.keys[c.count++] = cand[i].key;
      source_load -= f;
      target_load += f;
      c.moved += f;
    }
    return c;
  }

 private:
  std::array<uint32_t, kFlowSamples> samples_{};
  uint16_t n_ = 0;
  uint16_t pos_ = 0;
};

}  // namespace vecflow::sched
