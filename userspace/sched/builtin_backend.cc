#include "sched/builtin_backend.h"

#include <linux/membarrier.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <cstring>
#include <utility>
#include <vector>

#include <rte_cycles.h>
#include <rte_event_ring.h>
#include <rte_malloc.h>
#include <rte_pause.h>
#include <rte_random.h>
#include <rte_ring_elem.h>

#include "core/log.h"
#include "runtime/cycles.h"
#include "sched/builtin_backlog.h"
#include "sched/builtin_credits.h"
#include "sched/builtin_flow_choice.h"
#include "sched/builtin_holds.h"
#include "sched/builtin_load.h"
#include "sched/spsc_ring.h"

namespace vecflow::sched {

BuiltinTuning default_builtin_tuning() noexcept {
  return BuiltinTuning{kMigrationIntervalUs, kLoadIntervalUs, kMinSourceLoad,
                       kMaxTargetLoad,       kMinImbalance,   kMaxFlowsPerMigration};
}

namespace {

// Memory from DPDK's heap (hugepages when EAL has them: fewer TLB misses on the rings and
// buffers every event passes through), zeroed, cache-line aligned. T is trivial.
template <typename T>
class RteArray {
 public:
  RteArray() = default;
  explicit RteArray(size_t n)
      : p_(static_cast<T*>(rte_zmalloc("vecflow_sched", n * sizeof(T), RTE_CACHE_LINE_SIZE))),
        n_(n) {}
  ~RteArray() { rte_free(p_); }
  RteArray(RteArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(o.n_) {}
  RteArray& operator=(RteArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  bool ok() const noexcept { return p_ != nullptr || n_ == 0; }
  T* data() noexcept { return p_; }
  T& operator[](size_t i) noexcept { return p_[i]; }
  const T& operator[](size_t i) const noexcept { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

int sys_membarrier(int cmd) {
  return static_cast<int>(syscall(__NR_membarrier, cmd, 0, 0));
}

// Whether this process may use MEMBARRIER_CMD_PRIVATE_EXPEDITED. Without it, ports issue a
// full fence at each quiescent point instead (about 20 cycles per call, not per event).
bool membarrier_available() {
  static const bool ok = [] {
    int cmds = sys_membarrier(MEMBARRIER_CMD_QUERY);
    if (cmds < 0 || !(cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED)) return false;
    return sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
  }();
  return ok;
}

enum class CtlType : uint8_t { Hold, Release };

// Migration control message, from the source port to the target's control ring.
struct CtlMsg {
  CtlType type;
  uint8_t source;
  uint8_t count;
  uint8_t pad;
  uint32_t keys[kMaxFlowsPerMigration];  // flow_key(queue, slot)
};
static_assert(sizeof(CtlMsg) % 4 == 0, "rte_ring elements are multiples of 4 bytes");

enum class Migration : uint8_t { Idle, Grace, Drain };

class BuiltinPort;

// State shared by every port of one scheduler. Written at creation; afterwards only the owner
// tables change (single-byte atomic stores by the migrating port).
struct Shared {
  uint16_t nqueues = 0;
  uint16_t nworkers = 0;
  std::array<SchedType, kMaxQueues> types{};
  RteArray<uint8_t> owners;           // [queue][kFlowSlots]: worker index owning the slot
  std::vector<BuiltinPort*> all;      // producers then workers
  std::vector<BuiltinPort*> workers;  // by worker index
  // Producer -> worker rings, [producer][worker].
  std::vector<std::unique_ptr<SpscEventRing>> direct;
  CreditPool credits;
  BacklogTable backlogs;
  bool fenced = false;  // no membarrier: full fences at quiescent points instead
  BuiltinTuning tuning{};
  uint64_t migration_interval_tsc = 0;
  uint64_t load_interval_tsc = 0;

  uint8_t* owner_table(uint8_t q) noexcept { return &owners[static_cast<size_t>(q) * kFlowSlots]; }
};

class BuiltinPort final : public EventPort {
 public:
  BuiltinPort(Shared& s, PortRole role, uint16_t index, uint16_t id)
      : EventPort(role, index), s_(s), id_(id), worker_(role == PortRole::Worker) {}

  Result<void> init(uint32_t ring_size, uint32_t buffer_events, uint32_t max_holds) {
    out_len_ = RteArray<uint16_t>(s_.nworkers);
    out_ = RteArray<rte_event>(static_cast<size_t>(s_.nworkers) * kOutBurst);
    if (!out_len_.ok() || !out_.ok()) return fail("builtin scheduler: out of DPDK memory");
    if (!worker_) return {};
    static std::atomic<uint32_t> seq{0};
    uint32_t n = seq.fetch_add(1);
    std::string name = fmt::format("vfsb_in{}", n);
    in_ = rte_event_ring_create(name.c_str(), ring_size, SOCKET_ID_ANY, RING_F_SC_DEQ);
    if (!in_)
      return fail("builtin scheduler: cannot create ring {}: {}", name, rte_strerror(rte_errno));
    name = fmt::format("vfsb_ctl{}", n);
    uint32_t ctl_size = std::bit_ceil(std::max<uint32_t>(16, 4u * s_.nworkers));
    ctl_ =
        rte_ring_create_elem(name.c_str(), sizeof(CtlMsg), ctl_size, SOCKET_ID_ANY, RING_F_SC_DEQ);
    if (!ctl_)
      return fail("builtin scheduler: cannot create ring {}: {}", name, rte_strerror(rte_errno));
    holds_.init(buffer_events, max_holds);
    // Without a doorbell (no descriptors left) the port never sleeps; nothing else changes.
    doorbell_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    snap_.resize(s_.all.size());
    uint64_t now = rte_rdtsc();
    load_.start(now);
    next_load_ = now + s_.load_interval_tsc;
    next_emigration_ = now + s_.migration_interval_tsc;
    return {};
  }

  ~BuiltinPort() override {
    rte_event_ring_free(in_);
    rte_ring_free(ctl_);
    if (doorbell_ >= 0) close(doorbell_);
  }

  // After every port's init: a producer learns its ring to each worker, a worker its ring
  // from each producer.
  void connect() {
    const size_t producers = s_.direct.size() / s_.nworkers;
    if (!worker_) {
      to_.resize(s_.nworkers);
      for (size_t w = 0; w < s_.nworkers; ++w)
        to_[w] = s_.direct[index() * s_.nworkers + w].get();
      return;
    }
    from_.resize(producers);
    mig_marks_.resize(producers);
    for (size_t p = 0; p < producers; ++p)
      from_[p] = s_.direct[p * s_.nworkers + index()].get();
  }

  // ---- enqueue -------------------------------------------------------------------------

  uint16_t enqueue_new_burst(const rte_event* ev, uint16_t n) noexcept override {
    return enqueue_new(ev, n, nullptr);
  }

  uint16_t enqueue_new_burst_any(rte_event* ev, uint16_t n) noexcept override {
    return enqueue_new(ev, n, ev);
  }

  // `compact`: `ev` itself, when the caller takes refusals from anywhere in the burst.
  uint16_t enqueue_new(const rte_event* ev, uint16_t n, rte_event* compact) noexcept {
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

  // Room: credits for `n` (what Credits::take would find), and some worker below its backlog
  // limit (with one full worker the others' flows are still taken). A producer that stops
  // enqueuing learns here when full workers have caught up.
  // A request beyond what a drained scheduler can offer (every other port may keep two loans)
  // is cut to that, or the caller would wait forever on a small queue_depth.
  bool has_room(uint16_t n) noexcept override {
    if (backlog_.full() != 0) [[unlikely]] {
      backlog_.forget_caught_up();
      if (backlog_.all_full()) return false;
    }
    return credits_.could_take(std::min<int64_t>(n, s_.credits.attainable()));
  }

  uint16_t enqueue_forward_burst(const rte_event* ev, uint16_t n) noexcept override {
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

  uint16_t enqueue_burst(const rte_event* ev, uint16_t n) noexcept override {
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

  // ---- dequeue -------------------------------------------------------------------------

  uint16_t dequeue_burst(rte_event* ev, uint16_t n) noexcept override {
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

  int arm_wakeup() noexcept override {
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

  void disarm_wakeup() noexcept override {
    asleep_.store(false, std::memory_order_relaxed);
    uint64_t v;
    ssize_t r = read(doorbell_, &v, sizeof(v));
    (void)r;  // EAGAIN: woken by something else
  }

  void park() noexcept override {
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

  // ---- read by other threads ------------------------------------------------------------

  uint16_t load() const noexcept { return load_.figure(); }
  // Packets written to this worker's input rings and not yet dequeued (events still in other
  // ports' out-buffers are not counted). 0 when the scheduler has no backlog limit.
  int64_t backlog_packets() const noexcept {
    return s_.backlogs.counted() ? s_.backlogs.of(index()) : 0;
  }
  uint32_t backlog() const noexcept {
    if (!in_) return 0;
    uint32_t n = rte_event_ring_count(in_);
    for (const SpscEventRing* r : from_)
      n += r->count();
    return n;
  }

  // Payloads left anywhere in this port (destruction without draining).
  uint64_t free_leftovers() noexcept {
    uint64_t n = 0;
    auto drop = [&](rte_event& e) {
      free_payload(e);
      ++n;
    };
    for (uint32_t d = 0; d < s_.nworkers; ++d) {
      for (uint16_t i = 0; i < out_len_[d]; ++i)
        drop(out_[d * kOutBurst + i]);
      out_len_[d] = 0;
    }
    if (!worker_) return n;
    holds_.drain(drop);
    rte_event e;
    while (rte_event_ring_dequeue_burst(in_, &e, 1, nullptr) == 1)
      drop(e);
    for (SpscEventRing* r : from_)
      while (r->dequeue(&e, 1) == 1)
        drop(e);
    return n;
  }

 private:
  // ---- placement -------------------------------------------------------------------------

  // Places a burst: owner table lookup, then the destination's out-buffer. One loop with its
  // state in locals (the compiler cannot keep members in registers across the event stores),
  // the same work for every event whatever the burst size.
  // Places a burst: each event's destination (owner table, or round-robin for parallel
  // queues), then the destination's out-buffer. Two passes over at most kMaxEventBurst events
  // at a time, with the loop state in locals (members would be reloaded after every event
  // store). The first pass computes destinations, independent for every event; the second
  // appends. When every event of the chunk goes to one destination (one worker, or one flow),
  // the chunk is appended as a block, or written straight to the destination's ring when its
  // out-buffer is empty and the events need no change: no per-event length counter then, whose
  // store-to-load chain would bound the loop.
  void route_burst(const rte_event* ev, uint16_t n) noexcept {
    while (n > 0) {
      uint16_t m = std::min<uint16_t>(n, kMaxEventBurst);
      route_chunk(ev, m);
      ev += m;
      n = static_cast<uint16_t>(n - m);
    }
  }

  void route_chunk(const rte_event* ev, uint16_t n) noexcept {
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

  void write_ring(uint32_t dst, const rte_event* ev, uint16_t n) noexcept {
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

  // After a write to `to`'s rings: rings its doorbell if it sleeps (builtin_backend.h).
  static void wake(BuiltinPort& to) noexcept {
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
  // with a different one each call so none waits behind the others.
  uint16_t read_inputs(rte_event* ev, uint16_t n) noexcept {
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
  uint16_t admit(const rte_event* ev, uint16_t n, rte_event* compact) noexcept {
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

  void flush(uint32_t dst) noexcept {
    write_ring(dst, &out_[dst * kOutBurst], out_len_[dst]);
    out_len_[dst] = 0;
    dirty_ &= ~(uint64_t{1} << dst);
  }

  void flush_all() noexcept {
    while (dirty_) {
      uint32_t d = static_cast<uint32_t>(std::countr_zero(dirty_));
      flush(d);
    }
  }

  // Producer-style call bracket: odd epoch while the call may hold owner-table reads.
  void enter() noexcept {
    epoch_shared_.store(++epoch_, std::memory_order_relaxed);
    if (s_.fenced) std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  void leave() noexcept {
    flush_all();
    epoch_shared_.store(++epoch_, std::memory_order_release);
  }

  // ---- holds (this port as a migration target: builtin_holds.h) --------------------------

  void poll_ctl() noexcept {
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

  // ---- load and migration (this port as a source) ----------------------------------------

  void housekeeping() noexcept {
    calls_ = 0;
    uint64_t now = rte_rdtsc();
    if (now >= next_load_) update_load(now);
    if (now >= next_emigration_) consider_emigration(now);
  }

  void update_load(uint64_t now) noexcept {
    const uint16_t load = load_.end_period(now);
    immigration_load_.store(0, std::memory_order_relaxed);
    next_load_ = now + s_.load_interval_tsc;
    sampling_ = s_.nworkers > 1 && load >= s_.tuning.min_source_load;
    if (!sampling_) samples_.clear();
  }

  int32_t effective_load(const BuiltinPort& p) const noexcept {
    return p.load_.figure() + p.immigration_load_.load(std::memory_order_relaxed);
  }

  void consider_emigration(uint64_t now) noexcept {
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
    if (!target || target_load > t.max_target_load || source - target_load < t.min_imbalance)
      return;

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

  void advance_migration() noexcept {
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

  static void post(BuiltinPort& to, CtlMsg msg) noexcept {
    // Sized for two outstanding messages from every other port: never full for long.
    while (rte_ring_mp_enqueue_elem(to.ctl_, &msg, sizeof(CtlMsg)) != 0)
      rte_pause();
    wake(to);
  }

  Shared& s_;
  const uint16_t id_;
  const bool worker_;

  // Owner thread only: the hot part first.
  Credits credits_{s_.credits};
  uint32_t pending_ = 0;  // dequeued, neither forwarded nor released yet
  uint64_t dirty_ = 0;    // destinations whose out-buffer holds events
  uint32_t rr_ = 0;       // next destination for parallel queues
  uint64_t epoch_ = 0;    // this thread's copy of epoch_shared_
  BacklogGate backlog_{s_.backlogs, id_};
  RteArray<uint16_t> out_len_;
  RteArray<rte_event> out_;
  std::vector<SpscEventRing*> to_;    // producers: ring to each worker
  std::vector<SpscEventRing*> from_;  // workers: ring from each producer
  size_t next_from_ = 0;              // workers: the producer ring read first next time

  FlowHolds holds_;

  Migration migration_ = Migration::Idle;
  BuiltinPort* mig_target_ = nullptr;
  CtlMsg mig_msg_{};
  uint32_t mig_mark_ = 0;            // the shared input ring's producer index at Drain
  std::vector<uint32_t> mig_marks_;  // and each producer ring's
  std::vector<uint64_t> snap_;
  uint64_t next_emigration_ = 0;

  uint64_t next_load_ = 0;
  uint32_t calls_ = 0;
  bool sampling_ = false;
  FlowSamples samples_;

  // Read by other ports, each group on its own cache line. The rings are set at init and read
  // by every send here: a member this port writes as it works on their line would make each
  // send wait for the line to come back (a third of a producer's time at 2 lcores).
  alignas(64) rte_event_ring* in_ = nullptr;  // workers: input ring from the workers
  rte_ring* ctl_ = nullptr;                   // workers: migration messages (multi-producer)
  int doorbell_ = -1;                         // workers: eventfd the sleeping lcore waits on
  // Set by the owner before it sleeps; cleared by it when it wakes, or by the writer that
  // rings the doorbell. Written only around sleeps, so the line stays shared while busy.
  std::atomic<bool> asleep_{false};
  alignas(64) std::atomic<uint64_t> epoch_shared_{0};
  // The load figure is read by others once per migration interval; its owner writes the
  // line only when the port turns busy or idle.
  alignas(64) LoadMeter load_;
  std::atomic<int32_t> immigration_load_{0};
  std::atomic<bool> parked_{false};
};

class BuiltinScheduler final : public Scheduler {
 public:
  explicit BuiltinScheduler(const SchedulerConfig& c) : Scheduler(c.queues) {}

  ~BuiltinScheduler() override {
    uint64_t left = 0;
    for (auto& p : ports_)
      left += p->free_leftovers();
    if (left > 0) {
      log::get("sched")->warn("builtin scheduler destroyed with {} event(s) in flight; freed",
                              left);
    }
  }

  Result<void> init(const SchedulerConfig& c) {
    if (c.queues.empty() || c.queues.size() > kMaxQueues)
      return fail("builtin scheduler: {} queues (1 to {} supported)", c.queues.size(), kMaxQueues);
    if (c.workers == 0 || c.workers > kMaxWorkers)
      return fail("builtin scheduler: {} workers (1 to {} supported)", c.workers, kMaxWorkers);
    s_.nqueues = static_cast<uint16_t>(c.queues.size());
    s_.nworkers = c.workers;
    for (size_t q = 0; q < c.queues.size(); ++q)
      s_.types[q] = c.queues[q].type;
    s_.tuning = c.builtin;
    // Control messages carry at most kMaxFlowsPerMigration flows.
    s_.tuning.max_flows_per_migration =
        std::min<uint8_t>(s_.tuning.max_flows_per_migration, kMaxFlowsPerMigration);
    uint64_t hz = tsc_hz();
    s_.migration_interval_tsc = hz / 1'000'000 * c.builtin.migration_interval_us;
    s_.load_interval_tsc = hz / 1'000'000 * c.builtin.load_interval_us;
    s_.fenced = !membarrier_available();
    if (s_.fenced) {
      log::get("sched")->info(
          "membarrier unavailable: builtin ports fence at each quiescent point");
    }
    uint32_t ports = c.producers + c.workers;
    s_.credits.configure(c.inflight_limit, ports);
    uint32_t ring_size = std::bit_ceil(static_cast<uint32_t>(s_.credits.limit()) + 1);
    s_.backlogs.configure(static_cast<uint16_t>(ports), c.workers, c.worker_backlog_packets,
                          c.vector_events);

    s_.owners = RteArray<uint8_t>(static_cast<size_t>(s_.nqueues) * kFlowSlots);
    if (!s_.owners.ok()) return fail("builtin scheduler: out of DPDK memory");
    for (uint16_t q = 0; q < s_.nqueues; ++q) {
      uint8_t* t = s_.owner_table(static_cast<uint8_t>(q));
      for (uint32_t slot = 0; slot < kFlowSlots; ++slot)
        t[slot] = static_cast<uint8_t>(slot % s_.nworkers);
    }
    for (uint16_t i = 0; i < c.producers; ++i) {
      ports_.push_back(std::make_unique<BuiltinPort>(s_, PortRole::Producer, i,
                                                     static_cast<uint16_t>(ports_.size())));
    }
    for (uint16_t i = 0; i < c.workers; ++i) {
      ports_.push_back(std::make_unique<BuiltinPort>(s_, PortRole::Worker, i,
                                                     static_cast<uint16_t>(ports_.size())));
    }
    for (auto& p : ports_) {
      s_.all.push_back(p.get());
      if (p->role() == PortRole::Worker) s_.workers.push_back(p.get());
    }
    uint32_t max_holds = static_cast<uint32_t>(c.workers) * kMaxFlowsPerMigration;
    for (auto& p : ports_) {
      if (auto r = p->init(ring_size, static_cast<uint32_t>(s_.credits.limit()), max_holds); !r)
        return r;
    }
    for (uint32_t i = 0; i < uint32_t{c.producers} * c.workers; ++i) {
      s_.direct.push_back(std::make_unique<SpscEventRing>(ring_size));
      if (!s_.direct.back()->ok()) return fail("builtin scheduler: out of DPDK memory");
    }
    for (auto& p : ports_)
      p->connect();
    producers_ = c.producers;
    return {};
  }

  std::string_view backend() const noexcept override { return "builtin"; }
  uint16_t producer_count() const noexcept override { return producers_; }
  uint16_t worker_count() const noexcept override { return s_.nworkers; }
  EventPort& producer(uint16_t i) noexcept override { return *ports_[i]; }
  EventPort& worker(uint16_t i) noexcept override { return *ports_[producers_ + i]; }

  SchedulerStats stats() const override {
    SchedulerStats s;
    s.backend = "builtin";
    fill_common_stats(s);
    for (uint16_t w = 0; w < s_.nworkers; ++w) {
      PortStats& ps = s.ports[producers_ + w];
      ps.load_permille = s_.workers[w]->load();
      ps.backlog = s_.workers[w]->backlog();
      ps.backlog_packets = s_.workers[w]->backlog_packets();
      s.migrations += ps.emigrations;
    }
    s.inflight = inflight();
    return s;
  }

 private:
  Shared s_;
  std::vector<std::unique_ptr<BuiltinPort>> ports_;
  uint16_t producers_ = 0;
};

}  // namespace

Result<std::unique_ptr<Scheduler>> create_builtin_scheduler(const SchedulerConfig& config) {
  auto s = std::make_unique<BuiltinScheduler>(config);
  if (auto r = s->init(config); !r) return std::unexpected(r.error());
  return std::unique_ptr<Scheduler>(std::move(s));
}

}  // namespace vecflow::sched
