// The builtin scheduler's per-worker backlog limit (SchedulerConfig::worker_backlog_packets).
//
// A worker's backlog is the packets written to its input rings and not yet dequeued, counted in
// packets (a vector holds up to its size) since packet buffers are what a stalled worker would
// exhaust: what every port wrote to it (each port tallies its own writes in its own row, so no
// shared counter is written on the hot path) minus what it dequeued (it publishes its own
// tally). A producer looks at a worker's backlog after each check() packets it sent there (so
// it may overshoot the limit by that much); at the limit it marks the worker full and refuses
// new events of its flows, looking again at every call until the backlog is below the limit.
// The other workers' flows keep being accepted.
//
// Threading: a port writes only its own row of BacklogTable and its own BacklogGate; the
// totals are read by any port (relaxed: a look may be a few events stale, which the check
// interval allows for anyway).
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <vector>

#include <rte_eventdev.h>

#include "sched/event.h"

namespace vecflow::sched {

// Workers a builtin scheduler can have: sets of destinations are 64-bit masks.
inline constexpr uint16_t kMaxWorkers = 64;

class BacklogTable {
 public:
  // `cap` 0: backlogs are not counted.
  void configure(uint16_t ports, uint16_t workers, int64_t cap, bool vector_events) {
    sent_ = std::vector<Row>(ports);
    dequeued_ = std::vector<Row>(workers);
    workers_ = workers;
    cap_ = cap;
    check_ = std::max<int64_t>(1, cap / 8);
    vector_events_ = vector_events;
  }
  bool counted() const noexcept { return cap_ != 0; }
  int64_t cap() const noexcept { return cap_; }
  int64_t check() const noexcept { return check_; }
  uint16_t workers() const noexcept { return workers_; }

  int64_t packets_in(const rte_event* ev, uint32_t n) const noexcept {
    // Without vectors an event is a packet: looking at each would cost a tenth of the
    // scheduler's per-event time.
    if (!vector_events_) return n;
    int64_t p = 0;
    for (uint32_t i = 0; i < n; ++i)
      p += is_vector(ev[i]) ? ev[i].vec->nb_elem : 1;
    return p;
  }

  // Packets written to worker `w` and not yet dequeued by it.
  int64_t of(uint32_t w) const noexcept {
    int64_t sent = 0;
    for (const Row& r : sent_)
      sent += r.v[w].load(std::memory_order_relaxed);
    return sent - dequeued_[w].v[0].load(std::memory_order_relaxed);
  }

  // Port `port` wrote `p` more packets to worker `w` (the port's own row: one writer).
  void add_sent(uint16_t port, uint32_t w, int64_t p) noexcept {
    std::atomic<int64_t>& c = sent_[port].v[w];
    c.store(c.load(std::memory_order_relaxed) + p, std::memory_order_relaxed);
  }
  // Worker `w` has dequeued `p` more packets (its own row: one writer).
  void add_dequeued(uint32_t w, int64_t p) noexcept {
    std::atomic<int64_t>& c = dequeued_[w].v[0];
    c.store(c.load(std::memory_order_relaxed) + p, std::memory_order_relaxed);
  }

 private:
  // One port's tallies on lines of their own: rows every port writes must not share a line.
  struct alignas(64) Row {
    std::atomic<int64_t> v[kMaxWorkers] = {};
  };
  std::vector<Row> sent_;      // [port]: packets written to each worker
  std::vector<Row> dequeued_;  // [worker]: v[0], packets it dequeued
  uint16_t workers_ = 0;
  int64_t cap_ = 0;
  int64_t check_ = 1;
  bool vector_events_ = false;
};

// One producer port's view of the backlogs: which workers it found full at its last look.
class BacklogGate {
 public:
  BacklogGate(BacklogTable& table, uint16_t port) noexcept : t_(table), port_(port) {}

  // Counts `n` events written to worker `dst`; a producer (`look`) looks at its backlog after
  // every check() packets it sent there.
  void sent(uint32_t dst, const rte_event* ev, uint16_t n, bool look) noexcept {
    const int64_t p = t_.packets_in(ev, n);
    t_.add_sent(port_, dst, p);
    if (!look) return;
    unchecked_[dst] += p;
    if (unchecked_[dst] >= t_.check()) {
      unchecked_[dst] = 0;
      if (t_.of(dst) >= t_.cap()) full_ |= uint64_t{1} << dst;
    }
  }

  // Workers found full (bit w), kept until forget_caught_up() sees them below the limit.
  uint64_t full() const noexcept { return full_; }
  bool full(uint32_t w) const noexcept { return full_ >> w & 1; }
  bool all_full() const noexcept { return std::popcount(full_) >= int{t_.workers()}; }
  void forget_caught_up() noexcept {
    for (uint64_t f = full_; f != 0; f &= f - 1) {
      const uint32_t w = static_cast<uint32_t>(std::countr_zero(f));
      if (t_.of(w) < t_.cap()) full_ &= ~(uint64_t{1} << w);
    }
  }

 private:
  BacklogTable& t_;
  const uint16_t port_;
  uint64_t full_ = 0;
  int64_t unchecked_[kMaxWorkers] = {};  // per worker: packets sent since the last look
};

}  // namespace vecflow::sched
