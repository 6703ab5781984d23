// Counters written by exactly one lcore and read by any thread (the control plane).
//
// The writer does a relaxed load and store, not an atomic read-modify-write: there is only one
// writer, so no update can be lost, and a plain store costs what a non-atomic increment costs
// (no lock prefix). Readers see each 64-bit value whole (aligned 64-bit stores are atomic on
// every target we build for) but may see counters of one group from slightly different
// moments; snapshots that must balance are taken on drained state.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "core/drop_reason.h"

namespace vecflow {

class Counter {
 public:
  void add(uint64_t n = 1) noexcept {
    value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  uint64_t load() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class DropCounters {
 public:
  void add(DropReason r, uint64_t n = 1) noexcept { counts_[static_cast<size_t>(r)].add(n); }
  uint64_t load(DropReason r) const noexcept { return counts_[static_cast<size_t>(r)].load(); }
  uint64_t total() const noexcept {
    uint64_t sum = 0;
    for (const auto& c : counts_)
      sum += c.load();
    return sum;
  }

 private:
  std::array<Counter, kDropReasonCount> counts_{};
};

}  // namespace vecflow
