#include "latency.h"

#include <time.h>

#include <algorithm>
#include <bit>
#include <cmath>

namespace vecflow::trafgen {

uint64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::optional<uint64_t> one_way_ns(uint32_t tp_sec, uint32_t tp_nsec, uint64_t tx_ns) {
  uint64_t rx_ns = uint64_t{tp_sec} * 1'000'000'000ull + tp_nsec;
  if (rx_ns < tx_ns) return std::nullopt;
  return rx_ns - tx_ns;
}

unsigned LatencyHistogram::bucket(uint64_t ns) {
  if (ns < kExact) return static_cast<unsigned>(ns);
  unsigned e = 63 - static_cast<unsigned>(std::countl_zero(ns));  // ns in [2^e, 2^(e+1))
  unsigned sub = static_cast<unsigned>(ns >> (e - kSubBits)) & (kSub - 1);
  return kExact + (e - (kSubBits + 1)) * kSub + sub;
}

uint64_t LatencyHistogram::lower(unsigned b) {
  if (b < kExact) return b;
  unsigned e = (b - kExact) / kSub + kSubBits + 1;
  uint64_t sub = (b - kExact) % kSub;
  return (kSub + sub) << (e - kSubBits);
}

uint64_t LatencyHistogram::width(unsigned b) {
  if (b < kExact) return 1;
  unsigned e = (b - kExact) / kSub + kSubBits + 1;
  return uint64_t{1} << (e - kSubBits);
}

void LatencyHistogram::add(uint64_t ns) {
  ++counts_[bucket(ns)];
  ++count_;
  min_ = std::min(min_, ns);
  max_ = std::max(max_, ns);
  sum_ += ns;
}

uint64_t LatencyHistogram::quantile(double q) const {
  if (count_ == 0) return 0;
  auto rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_)));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  // The extremes are known exactly; a bucket's middle could only be further from them.
  if (rank == 1) return min_;
  if (rank == count_) return max_;
  uint64_t seen = 0;
  for (unsigned b = 0; b < kBuckets; ++b) {
    seen += counts_[b];
    if (seen >= rank) return std::clamp(lower(b) + width(b) / 2, min_, max_);
  }
  return max_;  // unreachable: the buckets hold count_ values
}

}  // namespace vecflow::trafgen
