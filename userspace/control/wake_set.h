// How the control lcore sleeps while the control plane is idle.
//
// The ControlServer runs Boost.Asio's io_context in non-blocking steps (io_context::poll() from
// Service::poll()), so the control lcore's loop, not Asio, decides when to sleep. To sleep, the
// lcore needs one descriptor that becomes readable exactly when Asio has something to do. Asio's
// own reactor descriptor is not public, so the server keeps this shadow set beside it:
//
//   - every socket the server creates (listeners, connections) is added edge-triggered
//     (EPOLLET), so a socket Asio is not reading (a reply still being written) does not keep
//     the lcore awake; poll() harvests the edges *before* running Asio, so an edge that arrives
//     after Asio looked is still pending in this set when the lcore arms it (no lost wake-up);
//   - a timerfd is armed at the earliest deadline of the server's Asio timers (read timeouts,
//     the sampler, a reload's confirmation deadline): each timer reports its deadline with
//     note_deadline(); a cancelled timer costs at most one spurious wake-up;
//   - an eventfd is written by other threads (post(), the SIGHUP handler) after they queue
//     work for the control thread.
//
// The alternatives were worse: a thread blocking in io_context::run() would run the handlers
// off the control lcore (they would then need locks against reload and the parts' tables); a
// plain eventfd cannot see socket readiness; napping in short intervals keeps an idle box
// waking thousands of times a second. With this set an idle control lcore sleeps in poll(2)
// until a client connects, a timer is due or another thread posts, and a request is served
// within the lcore's wake-up latency (microseconds), far inside the millisecond budget.
#pragma once

#include <chrono>
#include <queue>
#include <vector>

#include "core/error.h"

namespace vecflow::control {

class WakeSet {
 public:
  using Clock = std::chrono::steady_clock;  // what asio::steady_timer uses: CLOCK_MONOTONIC

  static Result<WakeSet> create();
  WakeSet(WakeSet&& other) noexcept;
  WakeSet& operator=(WakeSet&&) = delete;
  WakeSet(const WakeSet&) = delete;
  ~WakeSet();

  // Control thread only.
  void add(int fd) noexcept;
  void remove(int fd) noexcept;
  void note_deadline(Clock::time_point when);

  // Any thread, async-signal-safe: makes the set readable until the next drain().
  void notify() noexcept;

  // The descriptor to sleep on, or -1 when a noted deadline has already passed (the caller
  // polls again instead of sleeping).
  int arm() noexcept;
  // Harvests pending readiness; call before letting Asio look at its sockets.
  void drain() noexcept;

 private:
  WakeSet() = default;
  int epoll_fd_ = -1;
  int timer_fd_ = -1;
  int event_fd_ = -1;
  std::priority_queue<Clock::time_point, std::vector<Clock::time_point>, std::greater<>> deadlines_;
};

}  // namespace vecflow::control
