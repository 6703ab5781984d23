// A builtin worker port's load (sched/builtin_backend.h, flow migration): the share of time it
// spends with events in hand, from the first dequeue that returns events to the next one that
// returns none, measured over periods and smoothed. Other ports read the figure to choose
// where flows go.
//
// Threading: measured by the port's lcore; the figure is read by any port (relaxed).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace vecflow::sched {

class LoadMeter {
 public:
  static constexpr uint16_t kMax = 1000;  // per mille

  void start(uint64_t now) noexcept { period_start_ = now; }
  // A dequeue returned events (busy from now, if it was idle) or none (idle from now).
  void busy(uint64_t now) noexcept {
    if (busy_) return;
    busy_ = true;
    busy_start_ = now;
  }
  void idle(uint64_t now) noexcept {
    if (!busy_) return;
    busy_ = false;
    busy_cycles_ += now - busy_start_;
  }

  // Ends the period at `now` and folds its busy share into the figure with equal weight to
  // the last one: smooths one odd period, follows a real change within two.
  uint16_t end_period(uint64_t now) noexcept {
    uint64_t busy = busy_cycles_;
    if (busy_) {
      busy += now - busy_start_;
      busy_start_ = now;
    }
    const uint64_t period = now - period_start_;
    const uint32_t period_load =
        period ? static_cast<uint32_t>(std::min<uint64_t>(busy * kMax / period, kMax)) : 0;
    const uint16_t load = static_cast<uint16_t>((figure() + period_load) / 2);
    figure_.store(load, std::memory_order_relaxed);
    busy_cycles_ = 0;
    period_start_ = now;
    return load;
  }

  uint16_t figure() const noexcept { return figure_.load(std::memory_order_relaxed); }
  // A port asleep (its worker found nothing for a while) shows none: the first choice of a
  // loaded port looking for a target.
  void set_idle(uint64_t now) noexcept {
    idle(now);
    busy_cycles_ = 0;
    period_start_ = now;
    figure_.store(0, std::memory_order_relaxed);
  }
  // A parked port shows a full load, so that no flow is sent its way.
  void set_full() noexcept { figure_.store(kMax, std::memory_order_relaxed); }

 private:
  bool busy_ = false;
  uint64_t busy_start_ = 0;
  uint64_t busy_cycles_ = 0;
  uint64_t period_start_ = 0;
  std::atomic<uint16_t> figure_{0};
};

}  // namespace vecflow::sched
