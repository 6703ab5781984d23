// The target's side of a flow migration in the builtin scheduler (sched/builtin_backend.h):
// between the source's HOLD and RELEASE messages, a worker port keeps back the events of the
// flows coming to it (they may overtake older events still on their way from the source);
// at RELEASE those events are handed back, ahead of anything read later, in the order they
// arrived.
//
// Also the mapping of flows to slots, which names what moves: a flow's slot in its queue's
// owner table, and a flow key (queue, slot) that names one slot of one queue.
//
// Threading: one per worker port, used by its lcore only. The buffers are sized at start: the
// per-packet path never allocates.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <rte_eventdev.h>

#include "sched/builtin_backend.h"
#include "sched/event.h"

namespace vecflow::sched {

inline uint32_t flow_slot(uint32_t flow_id) noexcept {
  // Multiplicative hashing: flow ids are hashes already, but tests and some sources use
  // small sequential ids, which the multiply spreads over all slots.
  return (flow_id * 0x9E3779B1u) >> (32 - kFlowSlotBits);
}

inline uint32_t flow_key(uint8_t queue, uint32_t slot) noexcept {
  return (static_cast<uint32_t>(queue) << kFlowSlotBits) | slot;
}

inline uint32_t flow_key_of(const rte_event& e) noexcept {
  return flow_key(e.queue_id, flow_slot(e.flow_id));
}

class FlowHolds {
 public:
  // `events`: what can be held at once (the scheduler's in-flight limit); `keys`: flows held
  // at once (every other worker migrating its most to this one).
  void init(uint32_t events, uint32_t keys) {
    held_.resize(events);
    released_.resize(events + kMaxEventBurst);
    keys_.resize(keys);
  }

  bool holding() const noexcept { return nkeys_ > 0; }
  // Events handed back by a release and not yet taken.
  bool has_released() const noexcept { return released_len_ > 0; }
  // Nothing held, nothing waiting to be taken: the port may start a migration of its own.
  bool empty() const noexcept { return nkeys_ == 0 && released_len_ == 0 && held_len_ == 0; }

  void hold(const uint32_t* keys, uint8_t n) noexcept {
    for (uint8_t i = 0; i < n; ++i)
      keys_[nkeys_++] = keys[i];
  }

  // Stops holding `keys`; their held events become the next to be taken, in arrival order.
  void release(const uint32_t* keys, uint8_t n) noexcept {
    auto released = [&](uint32_t key) { return std::find(keys, keys + n, key) != keys + n; };
    uint16_t w = 0;
    for (uint16_t i = 0; i < nkeys_; ++i)
      if (!released(keys_[i])) keys_[w++] = keys_[i];
    nkeys_ = w;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < held_len_; ++i) {
      const rte_event& e = held_[i];
      if (released(flow_key_of(e))) {
        append(&e, 1);
      } else {
        held_[kept++] = e;
      }
    }
    held_len_ = kept;
  }

  // Keeps back the events of held flows from a dequeued burst (parallel queues are never
  // held: `types` by queue); the others stay, packed in order. Returns how many stay.
  uint16_t hold_back(rte_event* ev, uint16_t got, const SchedType* types) noexcept {
    uint16_t kept = 0;
    for (uint16_t i = 0; i < got; ++i) {
      const rte_event& e = ev[i];
      if (types[e.queue_id] != SchedType::Parallel && is_held(flow_key_of(e))) {
        held_[held_len_++] = e;
      } else {
        ev[kept++] = e;
      }
    }
    return kept;
  }

  // Puts events behind those waiting to be taken.
  void append(const rte_event* ev, uint32_t n) noexcept {
    if (released_head_ + released_len_ + n > released_.size()) {
      std::memmove(released_.data(), &released_[released_head_], released_len_ * sizeof(rte_event));
      released_head_ = 0;
    }
    std::memcpy(&released_[released_head_ + released_len_], ev, n * sizeof(rte_event));
    released_len_ += n;
  }

  // Takes up to `n` of the waiting events, oldest first.
  uint16_t take(rte_event* ev, uint16_t n) noexcept {
    const uint16_t k = static_cast<uint16_t>(std::min<uint32_t>(n, released_len_));
    std::memcpy(ev, &released_[released_head_], k * sizeof(rte_event));
    released_head_ += k;
    released_len_ -= k;
    if (released_len_ == 0) released_head_ = 0;
    return k;
  }

  // Every event held or waiting, to `drop` (destruction without draining); then empty.
  template <typename Drop>
  void drain(Drop drop) {
    for (uint32_t i = 0; i < released_len_; ++i)
      drop(released_[released_head_ + i]);
    for (uint32_t i = 0; i < held_len_; ++i)
      drop(held_[i]);
    released_head_ = released_len_ = held_len_ = 0;
  }

 private:
  bool is_held(uint32_t key) const noexcept {
    return std::find(keys_.begin(), keys_.begin() + nkeys_, key) != keys_.begin() + nkeys_;
  }

  std::vector<rte_event> held_;  // events of flows coming to this port, in arrival order
  uint32_t held_len_ = 0;
  std::vector<rte_event> released_;  // events handed back by a release, served first
  uint32_t released_head_ = 0;
  uint32_t released_len_ = 0;
  std::vector<uint32_t> keys_;  // the flows held
  uint16_t nkeys_ = 0;
};

}  // namespace vecflow::sched
