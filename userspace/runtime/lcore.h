// An lcore runs its services round-robin on one thread until stopped.
//
// Idle back-off, each step a named trade-off:
//   1. spin: for `spin_us` after the last round that did work, keep polling (rte_pause between
//      rounds). The answer to a packet just sent (a ping's reply, a TCP ACK) comes back within
//      tens of microseconds and finds the lcore awake; so does the next packet of a burst.
//   2. sleep: then, if every service can be woken by file descriptors (its ports' sockets or
//      rx interrupts, its scheduler port's doorbell), sleep on them until one is readable. A
//      frame's arrival wakes the lcore within a wake-up of the kernel's scheduler (a few
//      microseconds) and an idle box costs no CPU at all.
//   3. nap: otherwise sleep 1 us, doubling up to `idle_sleep_max_us`, between rounds: the
//      first packet after a pause waits at most one nap.
// Services with work due by time (has_pending) keep the lcore spinning. With `busy_poll` the
// lcore never leaves step 1: the lowest latency, at the price of a core held at 100 %.
//
// The set of services can change while the lcore runs: set_services() publishes a new list
// and returns only after the lcore finished every round that could still use the old one
// (a quiescent-state wait), so a removed service can be destroyed at once.
//
// An lcore attached to a Qsbr (runtime/qsbr.h) is a reader of the data plane's shared tables:
// online while it runs rounds, quiescent after each round, offline while it naps or sleeps.
//
// Stalls. A round is one poll of each service: microseconds. A round that lasts longer than
// `stall_after_ms` means a service is stuck (blocked in a system call, looping, descheduled
// for long): the lcore publishes when its current round began, so the control plane sees a
// stall while it lasts (round_age_ns), and counts each such round with its length once it
// ends (stats: stalls, stalled_cycles). Cost on the busy path: one relaxed store per round.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/counter.h"
#include "runtime/qsbr.h"
#include "runtime/service.h"

namespace vecflow {

// Idle time an lcore keeps polling before it sleeps (`cpu.spin_us`). 50 us covers a reply
// from a host one hop away (a ping through the box comes back 10-30 us after its request left
// here), so one exchange costs one wake-up, not two; polling longer buys little: the next
// exchange of a slow flow (1 ms apart and more) wakes the lcore anyway.
inline constexpr uint32_t kDefaultSpinUs = 50;

struct BackoffConfig {
  bool busy_poll = false;             // never nap or sleep (cpu.profile: latency)
  uint32_t spin_us = kDefaultSpinUs;  // idle time polled before sleeping or napping
  uint32_t idle_sleep_max_us = 200;   // longest nap, when some service cannot sleep
  uint32_t stall_after_ms = 250;      // a round this long is a stall
};

struct LcoreStats {
  Counter rounds;
  Counter busy_cycles;   // in polls that did work
  Counter idle_cycles;   // in polls that found nothing, and spinning between them
  Counter sleep_cycles;  // napping or sleeping on descriptors
  Counter naps;
  Counter interrupt_sleeps;  // sleeps on the services' descriptors
  Counter stalls;            // rounds that lasted stall_after_ms or longer
  Counter stalled_cycles;    // the length of those rounds
};

class Lcore {
 public:
  Lcore(unsigned id, BackoffConfig backoff);
  ~Lcore();
  Lcore(const Lcore&) = delete;
  Lcore& operator=(const Lcore&) = delete;

  unsigned id() const noexcept { return id_; }
  LcoreStats& stats() noexcept { return stats_; }
  const LcoreStats& stats() const noexcept { return stats_; }

  // Publishes a new service list. When called from another thread while the lcore runs, returns
  // once the lcore can no longer be inside a service that is not in `services`. When called
  // from one of this lcore's own services, the old list is kept until the round ends.
  void set_services(std::vector<std::shared_ptr<Service>> services);
  // Does not wait: the lcore may finish its round with the old list (every service of it is
  // still in the new one), which is freed by a later change once the lcore has moved on. So
  // adding a service to a stalled lcore does not stall the caller.
  void add_service(std::shared_ptr<Service> service);
  // Returns false if the service was not on this lcore.
  bool remove_service(const Service* service);
  std::vector<std::shared_ptr<Service>> services() const;

  // Makes this lcore reader `reader` of `qsbr` (see the file comment). Call before run();
  // nullptr detaches.
  void attach_qsbr(Qsbr* qsbr, unsigned reader) noexcept {
    qsbr_ = qsbr;
    qsbr_reader_ = reader;
  }

  // Runs the loop on the calling thread until request_stop(). Called once per start.
  void run() noexcept;
  // Async-signal-safe: sets a flag and wakes the lcore if it sleeps.
  void request_stop() noexcept;
  bool stop_requested() const noexcept { return stop_.load(std::memory_order_relaxed); }
  bool running() const noexcept { return running_.load(std::memory_order_acquire); }
  // How long the round in progress has lasted; 0 between rounds (napping, sleeping, stopped).
  uint64_t round_age_ns() const noexcept;
  // True while the round in progress has lasted stall_after_ms or longer.
  bool stalled() const noexcept {
    return round_age_ns() >= uint64_t{backoff_.stall_after_ms} * 1000000;
  }
  uint32_t stall_after_ms() const noexcept { return backoff_.stall_after_ms; }

 private:
  struct ServiceList {
    std::vector<std::shared_ptr<Service>> services;
  };

  void wake() noexcept;
  void publish(std::vector<std::shared_ptr<Service>> services, bool wait);
  // Frees the deferred lists the lcore can no longer be using. Holds writer_mutex_.
  void free_deferred_locked() noexcept;
  void idle_wait(uint32_t& nap_us) noexcept;
  bool sleep_on_descriptors(const ServiceList& list) noexcept;

  unsigned id_;
  BackoffConfig backoff_;
  LcoreStats stats_;
  int wake_fd_ = -1;  // eventfd: stop and service changes wake a sleeping lcore
  WakeFds wake_fds_;  // filled by the services at each sleep
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> round_{0};
  std::atomic<uint64_t> round_start_tsc_{0};  // 0 between rounds
  std::atomic<ServiceList*> list_;            // owned: replaced lists are deleted after quiescence
  std::atomic<std::thread::id> thread_{};
  Qsbr* qsbr_ = nullptr;
  unsigned qsbr_reader_ = 0;
  mutable std::mutex writer_mutex_;  // serialises writers; the lcore never takes it
  // Lists replaced without waiting (add_service), with the round count read after the
  // replacement: free once the lcore has completed a round after it. Under writer_mutex_.
  std::vector<std::pair<uint64_t, std::unique_ptr<ServiceList>>> deferred_;
  // Lists replaced from the lcore's own thread, freed at the end of the round that may still
  // be iterating them. Only the lcore thread touches this.
  std::vector<std::unique_ptr<ServiceList>> retired_;
};

}  // namespace vecflow
