// Grace periods for data the lcores read without locks: pipeline tables, hook lists.
//
// Quiescent-state-based reclamation over DPDK's rte_rcu_qsbr. Every lcore is a reader with its
// own id (its lcore slot). A reader is online while it runs services and reports a quiescent
// state after every round: a service holds no pointer into a shared table from one poll to the
// next, so the end of a round is a point where the lcore references nothing a writer may free.
// A reader goes offline while it naps or sleeps, so a writer never waits for an idle lcore, and
// comes back online (one store-load fence) before its next round.
//
// Writers publish a new pointer, call synchronize(), then free the old object: when
// synchronize() returns, every reader that could have loaded the old pointer has passed a
// quiescent state or gone offline.
//
// Lcore::run() does the reader side when the lcore is attached to a Qsbr (Runtime attaches
// every lcore); code that runs data-path functions on its own threads (tests, benchmarks) calls
// online()/quiescent()/offline() itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/error.h"

struct rte_rcu_qsbr;

namespace vecflow {

class Qsbr {
 public:
  static Result<std::unique_ptr<Qsbr>> create(unsigned readers);
  ~Qsbr();
  Qsbr(const Qsbr&) = delete;
  Qsbr& operator=(const Qsbr&) = delete;

  unsigned readers() const noexcept { return readers_; }

  // Reader side. Only the thread that owns `reader` calls these, and each reader id is owned
  // by one thread at a time. online() also binds the calling thread to `reader`, so that a
  // synchronize() called from inside one of its services does not wait for itself.
  void online(unsigned reader) noexcept;
  void offline(unsigned reader) noexcept;
  void quiescent(unsigned reader) noexcept;

  // Writer side, any thread, never from inside a read-side section (a data-path function).
  // Returns once every reader online at the call has reported a quiescent state or gone
  // offline. Blocks (spinning with pause) for at most one round of the slowest online lcore.
  void synchronize() noexcept;

 private:
  Qsbr() = default;
  struct Free {
    void operator()(rte_rcu_qsbr* v) const noexcept;
  };
  std::unique_ptr<rte_rcu_qsbr, Free> v_;
  unsigned readers_ = 0;
  uint64_t serial_ = 0;                          // tells domains apart in thread-local state
  std::unique_ptr<std::atomic<bool>[]> online_;  // by reader; written by the reader's thread
};

}  // namespace vecflow
