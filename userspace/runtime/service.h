// A service is one polling function run by an lcore: an rx adapter, a scheduler worker, the
// control server. Services say whether each poll did work, so the lcore can back off when
// nothing happens and busy/idle time can be measured per service (as DPDK's service cores do).
#pragma once

#include <atomic>
#include <string>
#include <utility>

#include "core/counter.h"

namespace vecflow {

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

  // Asked when the lcore has been idle for cpu.interrupt_after_ms. A service that can be
  // woken by a file descriptor (AF_XDP socket with need_wakeup, DPDK rx interrupt) arms that
  // wake-up and returns the descriptor to wait on for POLLIN. One that cannot returns -1, and
  // the lcore keeps napping in short intervals instead of sleeping.
  virtual int arm_wakeup() noexcept { return -1; }
  // The lcore left the sleep (woken by any descriptor, a stop or a service change).
  virtual void disarm_wakeup() noexcept {}

 private:
  std::string name_;
  ServiceStats stats_;
};

}  // namespace vecflow
