// A burst: a fixed-capacity array of packet pointers with a count, passed by reference along
// the data path. Plain data (no constructor work, no allocation): a Burst lives on the stack of
// the loop that fills it.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>

struct rte_mbuf;

namespace vecflow {

// 64 covers the largest rx burst we ask of a port (32 is DPDK's usual; AF_XDP rings reward 64)
// while keeping a Burst at 520 bytes, small enough to sit on a worker's stack.
inline constexpr uint16_t kMaxBurst = 64;

struct Burst {
  uint16_t count;
  rte_mbuf* pkts[kMaxBurst];

  void clear() noexcept { count = 0; }
  bool full() const noexcept { return count == kMaxBurst; }
  // Unchecked on purpose: callers fill at most kMaxBurst (rx bursts are asked for at most
  // that many, and loops test full() once per packet they add). A bounds check here would be
  // a branch on every packet for a condition the caller already knows.
  void push(rte_mbuf* m) noexcept { pkts[count++] = m; }
  std::span<rte_mbuf*> span() noexcept { return {pkts, count}; }
};

static_assert(std::is_trivial_v<Burst> && std::is_standard_layout_v<Burst>);

}  // namespace vecflow
