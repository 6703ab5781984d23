// Sets of PortIds (below kMaxPorts) as bit words, for the tx adapter: which ports it may
// send to, and which of its buffers hold packets. A 64-bit mask, as the adapter had, caps
// the ports at 64, which one trunk's VLANs pass; these keep a test to one load and a shift.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>

#include "core/ids.h"
#include "core/packet.h"

namespace vecflow::sched {

namespace port_bits_detail {
inline constexpr unsigned kWords = kMaxPorts / 64;
static_assert(kMaxPorts % 64 == 0 && kWords <= 64, "a summary word covers the words");
constexpr uint64_t bit(uint16_t port) noexcept {
  return uint64_t{1} << (port & 63);
}
}  // namespace port_bits_detail

// Written by the control thread (a reload attaching or detaching a port) while a worker
// tests it: a port's targets are written before its bit is set (release), and read after the
// bit was seen (acquire).
class SharedPortBits {
 public:
  bool test(uint16_t port) const noexcept {  // port < kMaxPorts
    return words_[port >> 6].load(std::memory_order_acquire) & port_bits_detail::bit(port);
  }
  void set(uint16_t port) noexcept {
    words_[port >> 6].fetch_or(port_bits_detail::bit(port), std::memory_order_release);
  }
  void reset(uint16_t port) noexcept {
    words_[port >> 6].fetch_and(~port_bits_detail::bit(port), std::memory_order_release);
  }

 private:
  std::array<std::atomic<uint64_t>, port_bits_detail::kWords> words_{};
};

// One worker's own: the ports whose buffers hold packets, taken lowest first. A summary bit
// per word, so that a flush with a few ports waiting reads a few words, not every one.
class PortBits {
 public:
  void set(uint16_t port) noexcept {
    words_[port >> 6] |= port_bits_detail::bit(port);
    summary_ |= uint64_t{1} << (port >> 6);
  }
  void reset(uint16_t port) noexcept { words_[port >> 6] &= ~port_bits_detail::bit(port); }
  // The lowest port in the set, or kNoPort when it is empty.
  uint16_t first() noexcept {
    while (summary_ != 0) {
      const unsigned w = static_cast<unsigned>(std::countr_zero(summary_));
      if (words_[w] != 0) return static_cast<uint16_t>(w * 64 + std::countr_zero(words_[w]));
      summary_ &= summary_ - 1;  // that word emptied since: its summary bit goes
    }
    return kNoPort;
  }

 private:
  std::array<uint64_t, port_bits_detail::kWords> words_{};
  uint64_t summary_ = 0;
};

}  // namespace vecflow::sched
