// How long things waited, as a histogram of TSC cycles written by one lcore and read by any
// thread (the control plane), like the Counters it is made of.
//
// Buckets are log-linear: four per power of two, so a bucket's upper bound is at most 25 %
// above any value in it, from 1 cycle to 2^40 (minutes), in 160 counters. A quantile is read
// as the upper bound of the bucket it falls in: an answer never below the true one, and within
// 25 % of it. The sum is exact, so the mean is too. Adding costs a bit scan and two counter
// updates; the rx adapter adds once per closed vector, not per packet.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

#include "core/counter.h"

namespace vecflow {

class WaitHistogram {
 public:
  static constexpr unsigned kSubBits = 2;  // 2^kSubBits buckets per power of two
  static constexpr unsigned kMaxBits = 40;
  static constexpr unsigned kBuckets = (kMaxBits + 1) << kSubBits;

  // `count` things waited `cycles` each.
  void add(uint64_t cycles, uint64_t count) noexcept {
    buckets_[index(cycles)].add(count);
    count_.add(count);
    sum_.add(cycles * count);
  }

  uint64_t count() const noexcept { return count_.load(); }
  uint64_t sum_cycles() const noexcept { return sum_.load(); }
  // The smallest bucket bound at or above the q-quantile (0 < q <= 1); 0 when empty. Counters
  // are read one by one while the writer goes on, so a read taken under traffic may mix
  // slightly different moments, as any Counter snapshot does.
  uint64_t quantile_cycles(double q) const noexcept {
    const uint64_t n = count();
    if (n == 0) return 0;
    const auto rank = static_cast<uint64_t>(q * static_cast<double>(n));
    uint64_t seen = 0;
    for (unsigned i = 0; i < kBuckets; ++i) {
      seen += buckets_[i].load();
      if (seen >= rank && seen > 0) return upper_bound(i);
    }
    return upper_bound(kBuckets - 1);
  }

  // How many waited at most `cycles`, counting whole buckets: a bucket that `cycles` cuts
  // counts above it (an answer low by less than a bucket, 25 %, at the bound).
  uint64_t at_most(uint64_t cycles) const noexcept {
    uint64_t n = 0;
    for (unsigned i = 0; i < kBuckets && upper_bound(i) <= cycles; ++i)
      n += buckets_[i].load();
    return n;
  }

  // Bucket of a value: values below 2^kSubBits have one each; above, the top kSubBits + 1
  // bits pick it. Values past 2^kMaxBits share the last bucket.
  static constexpr unsigned index(uint64_t v) noexcept {
    constexpr uint64_t kLinear = uint64_t{1} << kSubBits;
    if (v < kLinear) return static_cast<unsigned>(v);
    const unsigned msb = static_cast<unsigned>(std::bit_width(v)) - 1;
    if (msb >= kMaxBits) return kBuckets - 1;
    const auto sub = static_cast<unsigned>((v >> (msb - kSubBits)) & (kLinear - 1));
    return ((msb - kSubBits + 1) << kSubBits) + sub;
  }
  // The largest value of bucket `i`.
  static constexpr uint64_t upper_bound(unsigned i) noexcept {
    constexpr uint64_t kLinear = uint64_t{1} << kSubBits;
    if (i < kLinear) return i;
    const unsigned msb = (i >> kSubBits) + kSubBits - 1;
    const uint64_t sub = i & (kLinear - 1);
    return ((kLinear + sub + 1) << (msb - kSubBits)) - 1;
  }

 private:
  std::array<Counter, kBuckets> buckets_{};
  Counter count_;
  Counter sum_;
};

}  // namespace vecflow
