// What a builtin port does on an enqueue or a dequeue (builtin_port.h says why its helpers
// are inline and all here).
#include <linux/membarrier.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <cstdint>

#include <rte_cycles.h>
#include <rte_event_ring.h>
#include <rte_pause.h>
#include <rte_random.h>
#include <rte_ring_elem.h>

#include "sched/builtin_port.h"

namespace vecflow::sched::builtin {

// ---- enqueue ----------------------------------------------------------------------------

uint16_t BuiltinPort::enqueue_new_burst(const rte_event* ev, uint16_t n) noexcept {
  return enqueue_new(ev, n, nullptr);
}

uint16_t BuiltinPort::enqueue_new_burst_any(rte_event* ev, uint16_t n) noexcept {
  return enqueue_new(ev, n, ev);
}

inline uint16_t BuiltinPort::enqueue_new(const rte_event* ev, uint16_t n,
                                         rte_event* compact) noexcept {
  const bool bracket = !(epoch_ & 1);
  if (bracket) enter();
  uint16_t admitted = n;
  if (backlog_.full() != 0) [[unlikely]]
    admitted = admit(ev, n, compact);
  uint16_t ok = credits_.take(admitted);
  route_burst(ev, ok);
  counters_.enq_new.add(ok);
  if (ok != n) counters_.refused.add(n - ok);
  if (bracket) leave();
  return ok;
}

bool BuiltinPort::has_room(uint16_t n) noexcept {
  if (backlog_.full() != 0) [[unlikely]] {
    backlog_.forget_caught_up();
    if (backlog_.all_full()) return false;
  }
  return credits_.could_take(std::min<int64_t>(n, s_.credits.attainable()));
}

uint16_t BuiltinPort::enqueue_forward_burst(const rte_event* ev, uint16_t n) noexcept {
  const bool bracket = !(epoch_ & 1);
  if (bracket) enter();
  uint16_t ok = n;
  if (n <= pending_) {
    pending_ -= n;
  } else {
    // More forwards than events dequeued: the extra ones are new to the scheduler.
    uint16_t extra = static_cast<uint16_t>(n - pending_);
    uint16_t granted = credits_.take(extra);
    ok = static_cast<uint16_t>(pending_ + granted);
    pending_ = 0;
    counters_.enq_new.add(granted);
    if (granted != extra) counters_.refused.add(extra - granted);
  }
  route_burst(ev, ok);
  counters_.enq_forward.add(ok);
  if (bracket) leave();
  return ok;
}

uint16_t BuiltinPort::enqueue_burst(const rte_event* ev, uint16_t n) noexcept {
  const bool bracket = !(epoch_ & 1);
  if (bracket) enter();
  // Accepted events that go on are collected and placed a chunk at a time (in order).
  rte_event keep[kMaxEventBurst];
  uint16_t nkeep = 0;
  uint16_t i = 0;
  uint64_t news = 0, fwds = 0, rels = 0;
  for (; i < n; ++i) {
    const rte_event& e = ev[i];
    if (e.op == RTE_EVENT_OP_RELEASE) {
      // A release without a dequeued event to release is ignored (nothing to give back).
      if (pending_ > 0) {
        --pending_;
        credits_.give_back(1);
        ++rels;
      }
      continue;
    }
    if (e.op == RTE_EVENT_OP_FORWARD && pending_ > 0) {
      --pending_;
      ++fwds;
    } else {
      if (credits_.take(1) == 0) break;
      ++news;
    }
    keep[nkeep++] = e;
    if (nkeep == kMaxEventBurst) {
      route_burst(keep, nkeep);
      nkeep = 0;
    }
  }
  route_burst(keep, nkeep);
  counters_.enq_new.add(news);
  counters_.enq_forward.add(fwds);
  counters_.enq_release.add(rels);
  if (i != n) counters_.refused.add(n - i);
  if (bracket) leave();
  return i;
}

// ---- dequeue ----------------------------------------------------------------------------

uint16_t BuiltinPort::dequeue_burst(rte_event* ev, uint16_t n) noexcept {
  if (!worker_) return 0;
  // Implicit release: whatever of the last burst was neither forwarded nor released.
  if (pending_) {
    credits_.give_back(pending_);
    counters_.enq_release.add(pending_);
    pending_ = 0;
  }
  if (dirty_) flush_all();
  // Quiescent point: nothing read from an owner table before this is still unsent.
  epoch_ = (epoch_ | 1) + 2;
  epoch_shared_.store(epoch_, std::memory_order_release);
  if (s_.fenced) std::atomic_thread_fence(std::memory_order_seq_cst);
  if (migration_ != Migration::Idle) advance_migration();

  uint16_t got;
  if (holds_.has_released()) {
    poll_ctl();
    got = holds_.take(ev, n);
  } else {
    got = read_inputs(ev, n);
    if (s_.backlogs.counted() && got > 0)
      s_.backlogs.add_dequeued(index(), s_.backlogs.packets_in(ev, got));
    // After the ring read: a hold posted before an event we just read was sent is seen.
    poll_ctl();
    if (holds_.holding()) got = holds_.hold_back(ev, got, s_.types.data());
    if (holds_.has_released()) {
      // A release just handed back older events of some flows: they go first.
      holds_.append(ev, got);
      got = holds_.take(ev, n);
    }
  }
  pending_ = got;

  counters_.dequeue_calls.add();
  if (got == 0) {
    counters_.empty_dequeues.add();
    load_.idle(rte_rdtsc());
    housekeeping();
    return 0;
  }
  counters_.dequeued.add(got);
  uint8_t run_queue = ev[0].queue_id;
  uint32_t run = 0;
  for (uint16_t i = 0; i < got; ++i) {
    if (ev[i].queue_id != run_queue) {
      counters_.queue_out[run_queue].add(run);
      run_queue = ev[i].queue_id;
      run = 0;
    }
    ++run;
  }
  counters_.queue_out[run_queue].add(run);
  if (sampling_) {
    for (uint16_t i = 0; i < got; ++i) {
      const rte_event& e = ev[i];
      if (s_.types[e.queue_id] != SchedType::Parallel) samples_.add(flow_key_of(e));
    }
  }
  load_.busy(rte_rdtsc());
  if (++calls_ >= kHousekeepingCalls) housekeeping();
  return got;
}

int BuiltinPort::arm_wakeup() noexcept {
  if (!worker_ || doorbell_ < 0 || migration_ != Migration::Idle || holds_.has_released())
    return -1;
  if (pending_) {
    credits_.give_back(pending_);
    counters_.enq_release.add(pending_);
    pending_ = 0;
  }
  if (dirty_) flush_all();
  // Even epoch: quiescent until the next dequeue makes it odd again.
  epoch_ = (epoch_ | 1) + 1;
  epoch_shared_.store(epoch_, std::memory_order_release);
  load_.set_idle(rte_rdtsc());
  asleep_.store(true, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool waiting = rte_event_ring_count(in_) != 0 || rte_ring_count(ctl_) != 0;
  for (size_t p = 0; p < from_.size() && !waiting; ++p)
    waiting = from_[p]->written() != from_[p]->read_position();
  if (waiting) {
    asleep_.store(false, std::memory_order_relaxed);
    return -1;
  }
  return doorbell_;
}

void BuiltinPort::disarm_wakeup() noexcept {
  asleep_.store(false, std::memory_order_relaxed);
  uint64_t v;
  ssize_t r = read(doorbell_, &v, sizeof(v));
  (void)r;  // EAGAIN: woken by something else
}

void BuiltinPort::park() noexcept {
  if (!worker_) return;
  if (pending_) {
    credits_.give_back(pending_);
    counters_.enq_release.add(pending_);
    pending_ = 0;
  }
  flush_all();
  // Even epoch: quiescent for good. A full load keeps it from being chosen as a target.
  epoch_ = (epoch_ | 1) + 1;
  epoch_shared_.store(epoch_, std::memory_order_release);
  load_.set_full();
  parked_.store(true, std::memory_order_release);
}

// ---- placement --------------------------------------------------------------------------

// Places a burst: each event's destination (owner table, or round-robin for parallel
// queues), then the destination's out-buffer. Two passes over at most kMaxEventBurst events
// at a time, with the loop state in locals (members would be reloaded after every event
// store). The first pass computes destinations, independent for every event; the second
// appends. When every event of the chunk goes to one destination (one worker, or one flow),
// the chunk is appended as a block, or written straight to the destination's ring when its
// out-buffer is empty and the events need no change: no per-event length counter then, whose
// store-to-load chain would bound the loop.
inline void BuiltinPort::route_burst(const rte_event* ev, uint16_t n) noexcept {
  while (n > 0) {
    uint16_t m = std::min<uint16_t>(n, kMaxEventBurst);
    route_chunk(ev, m);
    ev += m;
    n = static_cast<uint16_t>(n - m);
  }
}

inline void BuiltinPort::route_chunk(const rte_event* ev, uint16_t n) noexcept {
  const SchedType* const types = s_.types.data();
  const uint8_t* const owners = s_.owners.data();
  uint8_t dsts[kMaxEventBurst];
  // Events per queue, counted as runs in a register: a burst usually goes to one queue.
  uint8_t run_queue = ev[0].queue_id;
  uint32_t run = 0;
  bool typed = true;  // every event already carries its queue's sched_type
  uint32_t same = 0;  // OR of (destination ^ first destination): zero if all go to one
  uint32_t first = 0;
  for (uint16_t i = 0; i < n; ++i) {
    const rte_event& e = ev[i];
    const uint8_t q = e.queue_id;
    assert(q < s_.nqueues);
    if (q != run_queue) {
      counters_.queue_in[run_queue].add(run);
      run_queue = q;
      run = 0;
    }
    ++run;
    const SchedType t = types[q];
    uint32_t dst;
    if (t == SchedType::Parallel) {
      dst = rr_;
      rr_ = rr_ + 1 == s_.nworkers ? 0 : rr_ + 1;
    } else {
      dst = __atomic_load_n(&owners[static_cast<size_t>(q) * kFlowSlots + flow_slot(e.flow_id)],
                            __ATOMIC_ACQUIRE);
    }
    if (i == 0) first = dst;
    same |= dst ^ first;
    typed &= e.sched_type == static_cast<uint8_t>(t);
    dsts[i] = static_cast<uint8_t>(dst);
  }
  counters_.queue_in[run_queue].add(run);

  rte_event* const out = out_.data();
  uint16_t* const out_len = out_len_.data();
  if (same == 0) {
    // A producer flushes at the end of the call anyway; a worker only skips its out-buffer
    // for chunks big enough to be a good ring write on their own.
    if (typed && out_len[first] == 0 && (!worker_ || n >= kOutBurst / 2)) {
      write_ring(first, ev, n);
      return;
    }
    uint16_t i = 0;
    while (i < n) {
      const uint16_t len = out_len[first];
      const uint16_t k = std::min<uint16_t>(kOutBurst - len, n - i);
      rte_event* slot = &out[first * kOutBurst + len];
      for (uint16_t j = 0; j < k; ++j) {
        slot[j].event = with_sched_type(ev[i + j].event, types[ev[i + j].queue_id]);
        slot[j].u64 = ev[i + j].u64;
      }
      out_len[first] = static_cast<uint16_t>(len + k);
      dirty_ |= uint64_t{1} << first;
      i = static_cast<uint16_t>(i + k);
      if (len + k == kOutBurst) flush(first);
    }
    return;
  }
  uint64_t dirty = dirty_;
  for (uint16_t i = 0; i < n; ++i) {
    const rte_event& e = ev[i];
    const uint32_t dst = dsts[i];
    const uint16_t len = out_len[dst];
    rte_event* slot = &out[dst * kOutBurst + len];
    // Whole-word stores: writing the sched_type bit-field into the buffer would reload the
    // event just stored (a store-forwarding stall on every event).
    slot->event = with_sched_type(e.event, types[e.queue_id]);
    slot->u64 = e.u64;
    dirty |= uint64_t{1} << dst;
    out_len[dst] = static_cast<uint16_t>(len + 1);
    if (len + 1 == kOutBurst) {
      dirty_ = dirty;
      flush(dst);
      dirty = dirty_;
    }
  }
  dirty_ = dirty;
}

inline void BuiltinPort::write_ring(uint32_t dst, const rte_event* ev, uint16_t n) noexcept {
  if (s_.backlogs.counted()) backlog_.sent(dst, ev, n, !worker_);
  // Every ring holds the whole in-flight limit, so it is never full for long (only while
  // its consumer is mid-dequeue of a ring holding everything).
  if (!worker_) {
    SpscEventRing* ring = to_[dst];
    unsigned done = ring->enqueue(ev, n);
    while (unlikely(done < n)) {
      rte_pause();
      done += ring->enqueue(ev + done, n - done);
    }
  } else {
    rte_event_ring* ring = s_.workers[dst]->in_;
    unsigned done = rte_event_ring_enqueue_burst(ring, ev, n, nullptr);
    while (unlikely(done < n)) {
      rte_pause();
      done += rte_event_ring_enqueue_burst(ring, ev + done, n - done, nullptr);
    }
  }
  wake(*s_.workers[dst]);
}

inline void BuiltinPort::wake(BuiltinPort& to) noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (to.asleep_.load(std::memory_order_relaxed) &&
      to.asleep_.exchange(false, std::memory_order_relaxed)) {
    const uint64_t one = 1;
    ssize_t r = write(to.doorbell_, &one, sizeof(one));
    (void)r;  // EAGAIN only when the counter is saturated: readable anyway
  }
}

// A worker's inputs: the ring the workers share first (what they forward is further along
// the pipeline; finishing it frees credits sooner), then the producers' rings, starting
// with a different one each call so none waits behind the others. Inlined into
// dequeue_burst(), its one caller (builtin_port.h says why it must be told to).
[[gnu::always_inline]] inline uint16_t BuiltinPort::read_inputs(rte_event* ev,
                                                                uint16_t n) noexcept {
  uint16_t got = static_cast<uint16_t>(rte_event_ring_dequeue_burst(in_, ev, n, nullptr));
  const size_t nfrom = from_.size();
  for (size_t k = 0; k < nfrom && got < n; ++k) {
    got = static_cast<uint16_t>(got + from_[next_from_]->dequeue(ev + got, n - got));
    next_from_ = next_from_ + 1 == nfrom ? 0 : next_from_ + 1;
  }
  return got;
}

// Some worker was full at this producer's last look: forget those that are no longer, then
// admit the events whose worker is not full. With `compact` (== ev), the admitted events
// move to its front in their order and the refused ones behind them (swapped there, in any
// order); without, admission stops at the first refused event (a prefix). Parallel queues
// are admitted (their worker is chosen at routing). Returns how many were admitted.
inline uint16_t BuiltinPort::admit(const rte_event* ev, uint16_t n, rte_event* compact) noexcept {
  backlog_.forget_caught_up();
  if (backlog_.full() == 0) return n;
  uint16_t kept = 0;
  for (uint16_t i = 0; i < n; ++i) {
    const rte_event& e = ev[i];
    bool ok = true;
    if (s_.types[e.queue_id] != SchedType::Parallel) {
      const uint8_t w = __atomic_load_n(
          &s_.owners[static_cast<size_t>(e.queue_id) * kFlowSlots + flow_slot(e.flow_id)],
          __ATOMIC_ACQUIRE);
      ok = !backlog_.full(w);
    }
    if (!compact) {
      if (!ok) return i;
      continue;
    }
    if (ok) std::swap(compact[kept++], compact[i]);
  }
  return compact ? kept : n;
}

inline void BuiltinPort::flush(uint32_t dst) noexcept {
  write_ring(dst, &out_[dst * kOutBurst], out_len_[dst]);
  out_len_[dst] = 0;
  dirty_ &= ~(uint64_t{1} << dst);
}

inline void BuiltinPort::flush_all() noexcept {
  while (dirty_) {
    uint32_t d = static_cast<uint32_t>(std::countr_zero(dirty_));
    flush(d);
  }
}

inline void BuiltinPort::enter() noexcept {
  epoch_shared_.store(++epoch_, std::memory_order_relaxed);
  if (s_.fenced) std::atomic_thread_fence(std::memory_order_seq_cst);
}

inline void BuiltinPort::leave() noexcept {
  flush_all();
  epoch_shared_.store(++epoch_, std::memory_order_release);
}

// ---- holds (this port as a migration target: builtin_holds.h) ---------------------------

inline void BuiltinPort::poll_ctl() noexcept {
  CtlMsg msgs[8];
  unsigned k = rte_ring_sc_dequeue_burst_elem(ctl_, msgs, sizeof(CtlMsg), 8, nullptr);
  for (unsigned m = 0; m < k; ++m) {
    const CtlMsg& msg = msgs[m];
    if (msg.type == CtlType::Hold) {
      holds_.hold(msg.keys, msg.count);
    } else {
      holds_.release(msg.keys, msg.count);
      counters_.immigrations.add(msg.count);
    }
  }
}

// ---- load and migration (this port as a source) -----------------------------------------

inline void BuiltinPort::housekeeping() noexcept {
  calls_ = 0;
  uint64_t now = rte_rdtsc();
  if (now >= next_load_) update_load(now);
  if (now >= next_emigration_) consider_emigration(now);
}

inline void BuiltinPort::update_load(uint64_t now) noexcept {
  const uint16_t load = load_.end_period(now);
  immigration_load_.store(0, std::memory_order_relaxed);
  next_load_ = now + s_.load_interval_tsc;
  sampling_ = s_.nworkers > 1 && load >= s_.tuning.min_source_load;
  if (!sampling_) samples_.clear();
}

inline int32_t BuiltinPort::effective_load(const BuiltinPort& p) const noexcept {
  return p.load_.figure() + p.immigration_load_.load(std::memory_order_relaxed);
}

inline void BuiltinPort::consider_emigration(uint64_t now) noexcept {
  const uint64_t interval = s_.migration_interval_tsc;
  next_emigration_ = now + interval / 2 + (interval ? rte_rand_max(interval) : 0);
  if (s_.nworkers < 2 || migration_ != Migration::Idle || !holds_.empty() || !samples_.full())
    return;
  const BuiltinTuning& t = s_.tuning;
  int32_t source = load_.figure();
  if (source < t.min_source_load) return;

  // The least loaded port that is running and can take more.
  int32_t target_load = INT32_MAX;
  BuiltinPort* target = nullptr;
  for (BuiltinPort* p : s_.workers) {
    if (p == this || p->parked_.load(std::memory_order_acquire)) continue;
    // A worker that never dequeued is not running: it must not receive flows. One asleep
    // (an even epoch after dequeues) may: the flows' events ring its doorbell.
    if (p->epoch_shared_.load(std::memory_order_relaxed) == 0) continue;
    int32_t l = effective_load(*p);
    if (l < target_load) {
      target_load = l;
      target = p;
    }
  }
  if (!target || target_load > t.max_target_load || source - target_load < t.min_imbalance) return;

  const FlowChoice choice = samples_.choose(source, target_load, t.max_flows_per_migration);
  if (choice.count == 0) return;
  CtlMsg msg{CtlType::Hold, static_cast<uint8_t>(id_), choice.count, 0, {}};
  std::copy_n(choice.keys.begin(), choice.count, msg.keys);

  // Hold first, then point the slots at the target (builtin_backend.h says why in this order).
  post(*target, msg);
  const uint8_t tid = static_cast<uint8_t>(target->index());
  for (uint8_t i = 0; i < msg.count; ++i) {
    uint8_t q = static_cast<uint8_t>(msg.keys[i] >> kFlowSlotBits);
    uint32_t slot = msg.keys[i] & (kFlowSlots - 1);
    __atomic_store_n(&s_.owner_table(q)[slot], tid, __ATOMIC_RELEASE);
  }
  if (s_.fenced) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
  } else {
    sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED);
  }
  for (size_t p = 0; p < s_.all.size(); ++p)
    snap_[p] = s_.all[p]->epoch_shared_.load(std::memory_order_acquire);
  target->immigration_load_.fetch_add(choice.moved, std::memory_order_relaxed);
  migration_ = Migration::Grace;
  mig_target_ = target;
  mig_msg_ = msg;
  mig_msg_.type = CtlType::Release;
  samples_.clear();
}

// Inlined into dequeue_burst(), its one caller (builtin_port.h says why it must be told to).
[[gnu::always_inline]] inline void BuiltinPort::advance_migration() noexcept {
  if (migration_ == Migration::Grace) {
    for (size_t p = 0; p < s_.all.size(); ++p) {
      if (s_.all[p] == this) continue;
      uint64_t s = snap_[p];
      if ((s & 1) && s_.all[p]->epoch_shared_.load(std::memory_order_acquire) == s) return;
    }
    mig_mark_ = __atomic_load_n(&in_->r.prod.tail, __ATOMIC_ACQUIRE);
    for (size_t p = 0; p < from_.size(); ++p)
      mig_marks_[p] = from_[p]->written();
    migration_ = Migration::Drain;
  }
  // Called at the top of a dequeue: the burst that held the last event sent under the old
  // owner (if it was dequeued) has just been released.
  uint32_t consumed = __atomic_load_n(&in_->r.cons.tail, __ATOMIC_RELAXED);
  if (static_cast<int32_t>(consumed - mig_mark_) < 0) return;
  for (size_t p = 0; p < from_.size(); ++p)
    if (static_cast<int32_t>(from_[p]->read_position() - mig_marks_[p]) < 0) return;
  post(*mig_target_, mig_msg_);
  counters_.emigrations.add(mig_msg_.count);
  migration_ = Migration::Idle;
}

inline void BuiltinPort::post(BuiltinPort& to, CtlMsg msg) noexcept {
  // Sized for two outstanding messages from every other port: never full for long.
  while (rte_ring_mp_enqueue_elem(to.ctl_, &msg, sizeof(CtlMsg)) != 0)
    rte_pause();
  wake(to);
}

}  // namespace vecflow::sched::builtin
