#include "runtime/cycles.h"

#include <time.h>

#include <atomic>

#include <rte_cycles.h>

namespace vecflow {
namespace {

uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t measure() {
  uint64_t n0 = now_ns();
  uint64_t t0 = rte_rdtsc();
  while (now_ns() - n0 < 5'000'000) {
  }
  uint64_t n1 = now_ns();
  uint64_t t1 = rte_rdtsc();
  return static_cast<uint64_t>(static_cast<double>(t1 - t0) * 1e9 / static_cast<double>(n1 - n0));
}

}  // namespace

uint64_t tsc_hz() noexcept {
  static std::atomic<uint64_t> cached{0};
  uint64_t hz = cached.load(std::memory_order_relaxed);
  if (hz != 0) return hz;
  hz = rte_get_tsc_hz();
  if (hz == 0) hz = measure();
  cached.store(hz, std::memory_order_relaxed);
  return hz;
}

}  // namespace vecflow
