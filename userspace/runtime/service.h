// A service is one polling function run by an lcore: an rx adapter, a scheduler worker, the
// control server. Services say whether each poll did work, so the lcore can back off when
// nothing happens and busy/idle time can be measured per service (as DPDK's service cores do).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "core/counter.h"

namespace vecflow {

// What an idle lcore sleeps on: the descriptors its services hand it (each becomes readable,
// POLLIN, when the service has work), and the longest the sleep may last when a service has
// work that becomes due by time alone. Filled by Service::arm_wakeup(); a fixed array, so that
// arming allocates nothing.
class WakeFds {
 public:
  // A service that polls more descriptors than this keeps its lcore napping.
  static constexpr size_t kMaxFds = 64;
  static constexpr uint64_t kForever = UINT64_MAX;

  // Adds a descriptor to wait on. False when the set is full.
  bool add(int fd) noexcept {
    if (n_ == kMaxFds) return false;
    fds_[n_++] = fd;
    return true;
  }
  // The sleep ends within `us` microseconds even if no descriptor becomes readable.
  void wake_within_us(uint64_t us) noexcept { within_us_ = std::min(within_us_, us); }

  size_t size() const noexcept { return n_; }
  int fd(size_t i) const noexcept { return fds_[i]; }
  uint64_t within_us() const noexcept { return within_us_; }
  void clear() noexcept {
    n_ = 0;
    within_us_ = kForever;
  }

 private:
  int fds_[kMaxFds];
  size_t n_ = 0;
  uint64_t within_us_ = kForever;
};

// Written by the lcore that runs the service, read by the control plane.
struct ServiceStats {
  Counter polls;
  Counter busy_polls;                 // polls that did work
  Counter busy_cycles;                // TSC cycles spent in polls that did work
  Counter idle_cycles;                // TSC cycles spent in polls that found nothing
  Counter sleeps;                     // times the lcore slept on this service's wake-up descriptor
  std::atomic<bool> sleeping{false};  // true while in interrupt mode (status shows it)
};

class Service {
 public:
  explicit Service(std::string name) : name_(std::move(name)) {}
  virtual ~Service() = default;
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  const std::string& name() const noexcept { return name_; }
  ServiceStats& stats() noexcept { return stats_; }
  const ServiceStats& stats() const noexcept { return stats_; }

  // One round of work. Returns true if it did any (received, sent, advanced state) and false
  // if it found nothing to do. Runs on exactly one lcore at a time; must not block, throw,
  // allocate or take a lock.
  virtual bool poll() noexcept = 0;

  // True while the service holds work that will become due by time alone (a partial vector
  // waiting for its timeout). The lcore then keeps polling instead of napping. Asked only
  // when the lcore is idle, never on the busy path.
  virtual bool has_pending() const noexcept { return false; }

  // Asked when the lcore has been idle for cpu.spin_us. A service that can be woken by file
  // descriptors (AF_XDP sockets, DPDK rx interrupts, a scheduler port's doorbell) arms those
  // wake-ups, adds the descriptors to `set` and returns true; the lcore then sleeps until one
  // becomes readable. A service that cannot, or that has work waiting right now (found while
  // arming, after which no wake-up would come for it), returns false and leaves nothing armed:
  // the lcore keeps polling, napping between rounds.
  virtual bool arm_wakeup(WakeFds& set) noexcept {
    (void)set;
    return false;
  }
  // After a successful arm_wakeup(): the lcore left the sleep (woken by any descriptor, a
  // timeout, a stop or a service change), or another service refused to arm.
  virtual void disarm_wakeup() noexcept {}

 private:
  std::string name_;
  ServiceStats stats_;
};

}  // namespace vecflow
