// Runtime hooks on the rx and tx paths of each port queue: code (a capture, a latency stamp)
// that an operator adds and removes while traffic runs.
//
// The rx/tx adapters call run_rx() after a port's rx burst and run_tx() before its tx burst.
// With no hook on a queue that is one load of a pointer and a branch the predictor always
// gets right: the fast path pays nothing measurable (tests/bench measures it). A queue's hooks
// are an immutable list replaced as a whole under RCU (runtime/qsbr.h): remove() returns only
// after every lcore passed a quiescent point, so no lcore can still be inside the removed hook
// and its owner may destroy it at once.
//
// A hook observes: it may read the packets and write their data or metadata (a timestamp), but
// must not free, keep, drop or reorder them; packet accounting does not see hooks.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include <rte_mbuf.h>

#include "core/error.h"
#include "core/ids.h"
#include "runtime/qsbr.h"

namespace vecflow {

enum class HookDirection : uint8_t { Rx, Tx };

struct HookPoint {
  PortId port{};
  QueueId queue{};
  HookDirection direction = HookDirection::Rx;
};

class Hook {
 public:
  virtual ~Hook() = default;
  // One burst on the lcore that polls (rx) or transmits on (tx) `where`. Runs on the data
  // path: noexcept, no allocation, no lock, no blocking.
  virtual void on_burst(const HookPoint& where, std::span<rte_mbuf* const> pkts) noexcept = 0;
};

class HookTable {
 public:
  using HookId = uint64_t;
  // Hooks on one queue and direction at most; a fixed bound keeps a list one allocation.
  static constexpr size_t kMaxHooksPerQueue = 8;

  // Points for `ports` ports of up to `queues` queues each, in both directions.
  HookTable(Qsbr& qsbr, uint16_t ports, uint16_t queues);
  ~HookTable();
  HookTable(const HookTable&) = delete;
  HookTable& operator=(const HookTable&) = delete;

  // ---- control plane (any thread; serialised internally) ----
  // Installs `hook` on one queue of a port, or on every queue when `queue` is empty. The hook
  // must stay alive until remove() of the returned id returned.
  Result<HookId> add(HookDirection direction, PortId port, std::optional<QueueId> queue,
                     Hook& hook);
  // Uninstalls; when it returns no lcore is inside the hook or can enter it again.
  Result<void> remove(HookId id);
  // Uninstalls every hook of `ids` in one pass over the table and one grace period: a trace's
  // tx hooks sit on every port id (kMaxPorts), which one remove() each took a pass and a
  // grace period apiece. Fails, removing nothing, when one of them is not installed.
  Result<void> remove(std::span<const HookId> ids);
  size_t installed() const;

  // ---- data path (the lcore that owns the queue) ----
  // Returns whether any hook ran: only then can the burst hold packets a trace marked
  // (core/tracer.h), which the rx adapter then looks for.
  bool run_rx(PortId port, QueueId queue, std::span<rte_mbuf* const> pkts) noexcept {
    return run(slot(HookDirection::Rx, port, queue), pkts);
  }
  void run_tx(PortId port, QueueId queue, std::span<rte_mbuf* const> pkts) noexcept {
    run(slot(HookDirection::Tx, port, queue), pkts);
  }

 private:
  struct List {
    HookPoint where;
    size_t count = 0;
    Hook* hooks[kMaxHooksPerQueue] = {};
    HookId ids[kMaxHooksPerQueue] = {};
  };

  size_t slot(HookDirection d, PortId p, QueueId q) const noexcept {
    return (size_t(d) * ports_ + to_index(p)) * queues_ + to_index(q);
  }
  bool run(size_t slot, std::span<rte_mbuf* const> pkts) noexcept {
    const List* list = lists_[slot].load(std::memory_order_acquire);
    if (list == nullptr) [[likely]]
      return false;
    for (size_t i = 0; i < list->count; ++i)
      list->hooks[i]->on_burst(list->where, pkts);
    return true;
  }

  Qsbr& qsbr_;
  uint16_t ports_;
  uint16_t queues_;
  std::unique_ptr<std::atomic<List*>[]> lists_;
  mutable std::mutex mutex_;  // writers
  HookId next_id_ = 1;
  size_t installed_ = 0;
};

}  // namespace vecflow
