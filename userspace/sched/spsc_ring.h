// A single-producer single-consumer ring of events, for the builtin scheduler's producer ->
// worker paths.
//
// Written here because no DPDK 22.11 ring does what this one does: each side keeps its own
// position and a cached copy of the other side's, and reads the other side's published index
// only when the cached copy says the ring is full (producer) or empty (consumer). rte_ring,
// even in its single-producer/single-consumer modes, reads the other side's index on every
// call, and its head, tail and mode share a line with what the other side polls: with one
// producer and one worker on two cores, half of the producer's time went to those line
// transfers. Here a producer's common case touches no line the consumer writes.
#pragma once

#include <rte_event_ring.h>
#include <rte_malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace vecflow::sched {

class SpscEventRing {
 public:
  // `size`: a power of two; the ring holds size events.
  explicit SpscEventRing(uint32_t size)
      : slots_(static_cast<rte_event*>(
            rte_malloc("vecflow_spsc", size * sizeof(rte_event), RTE_CACHE_LINE_SIZE))),
        mask_(size - 1) {}
  ~SpscEventRing() { rte_free(slots_); }
  SpscEventRing(const SpscEventRing&) = delete;
  SpscEventRing& operator=(const SpscEventRing&) = delete;

  bool ok() const noexcept { return slots_ != nullptr; }

  // Producer: writes up to n events in order; returns how many fit.
  uint32_t enqueue(const rte_event* ev, uint32_t n) noexcept {
    uint32_t room = prod_.peer + mask_ + 1 - prod_.pos;
    if (room < n) [[unlikely]] {
      prod_.peer = head_.load(std::memory_order_acquire);
      room = prod_.peer + mask_ + 1 - prod_.pos;
      n = std::min(n, room);
    }
    copy_in(prod_.pos, ev, n);
    prod_.pos += n;
    tail_.store(prod_.pos, std::memory_order_release);
    return n;
  }

  // Consumer: reads up to n events in order; returns how many.
  uint32_t dequeue(rte_event* ev, uint32_t n) noexcept {
    uint32_t avail = cons_.peer - cons_.pos;
    if (avail < n) {
      cons_.peer = tail_.load(std::memory_order_acquire);
      avail = cons_.peer - cons_.pos;
      n = std::min(n, avail);
    }
    copy_out(cons_.pos, ev, n);
    cons_.pos += n;
    head_.store(cons_.pos, std::memory_order_release);
    return n;
  }

  // Events written so far (any thread; what the consumer will have read once past it).
  uint32_t written() const noexcept { return tail_.load(std::memory_order_acquire); }
  // Events the consumer has read so far (consumer thread).
  uint32_t read_position() const noexcept { return cons_.pos; }
  // Events in the ring (any thread; a moment's figure).
  uint32_t count() const noexcept {
    return tail_.load(std::memory_order_acquire) - head_.load(std::memory_order_acquire);
  }

 private:
  // One 16-byte load and store per event, inline: a call to memcpy (two, for the wrap) cost
  // more than the copy itself for the bursts of one to a few events producers often send.
  void copy_in(uint32_t pos, const rte_event* ev, uint32_t n) noexcept {
    for (uint32_t i = 0; i < n; ++i)
      slots_[(pos + i) & mask_] = ev[i];
  }
  void copy_out(uint32_t pos, rte_event* ev, uint32_t n) const noexcept {
    for (uint32_t i = 0; i < n; ++i)
      ev[i] = slots_[(pos + i) & mask_];
  }

  // One side's own position and its last look at the other side's published index.
  struct alignas(RTE_CACHE_LINE_SIZE) Side {
    uint32_t pos = 0;
    uint32_t peer = 0;
  };

  rte_event* const slots_;
  const uint32_t mask_;
  Side prod_;                                                   // producer's
  Side cons_;                                                   // consumer's
  alignas(RTE_CACHE_LINE_SIZE) std::atomic<uint32_t> tail_{0};  // published by the producer
  alignas(RTE_CACHE_LINE_SIZE) std::atomic<uint32_t> head_{0};  // published by the consumer
};

}  // namespace vecflow::sched
