// TSC helpers usable with or without EAL (unit tests run lcores on plain threads).
#pragma once

#include <cstdint>

namespace vecflow {

// TSC ticks per second: EAL's figure when EAL is up, else measured once against
// CLOCK_MONOTONIC over a few milliseconds.
uint64_t tsc_hz() noexcept;

// Converts a TSC interval to nanoseconds.
inline uint64_t tsc_to_ns(uint64_t cycles) noexcept {
  uint64_t hz = tsc_hz();
  return hz ? static_cast<uint64_t>(static_cast<double>(cycles) * 1e9 / static_cast<double>(hz))
            : 0;
}

}  // namespace vecflow
