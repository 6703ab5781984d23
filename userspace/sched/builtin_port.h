// The builtin scheduler's port (builtin_backend.h describes the design), private to the sched
// part. It is written in two files by job: builtin_port.cc, everything a port does on an
// enqueue or a dequeue (placement, holds, load and migration included, as the dequeue runs
// them), and builtin_backend.cc, its set-up, what other threads read of it, and the
// scheduler around the ports.
//
// Every member function that is not virtual is declared inline and defined in the one file
// that calls it, so that the compiler sees what it saw when the class was defined in one file:
// what the per-event code inlined it still inlines, and what it calls out of line is a call
// within the file (a function with external linkage that is not inline may be interposed
// under -fPIC, so it is never inlined). One thing differs: an inline function with external
// linkage is not inlined merely for having one caller, as the compiler expects other files to
// share its copy; read_inputs() and advance_migration(), which only dequeue_burst() calls and
// which were inlined for that, are always_inline. The virtual functions are reached through
// the vtable, which goes with the destructor.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <rte_event_ring.h>
#include <rte_malloc.h>
#include <rte_ring.h>

#include "core/error.h"
#include "sched/builtin_backend.h"
#include "sched/builtin_backlog.h"
#include "sched/builtin_credits.h"
#include "sched/builtin_flow_choice.h"
#include "sched/builtin_holds.h"
#include "sched/builtin_load.h"
#include "sched/spsc_ring.h"

namespace vecflow::sched::builtin {

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

inline int sys_membarrier(int cmd) {
  return static_cast<int>(syscall(__NR_membarrier, cmd, 0, 0));
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
  ~BuiltinPort() override;

  // ---- set-up (builtin_backend.cc) ------------------------------------------------------

  inline Result<void> init(uint32_t ring_size, uint32_t buffer_events, uint32_t max_holds);
  // After every port's init: a producer learns its ring to each worker, a worker its ring
  // from each producer.
  inline void connect();

  // ---- enqueue (builtin_port.cc) --------------------------------------------------------

  uint16_t enqueue_new_burst(const rte_event* ev, uint16_t n) noexcept override;
  uint16_t enqueue_new_burst_any(rte_event* ev, uint16_t n) noexcept override;
  // `compact`: `ev` itself, when the caller takes refusals from anywhere in the burst.
  inline uint16_t enqueue_new(const rte_event* ev, uint16_t n, rte_event* compact) noexcept;
  // Room: credits for `n` (what Credits::take would find), and some worker below its backlog
  // limit (with one full worker the others' flows are still taken). A producer that stops
  // enqueuing learns here when full workers have caught up.
  // A request beyond what a drained scheduler can offer (every other port may keep two loans)
  // is cut to that, or the caller would wait forever on a small queue_depth.
  bool has_room(uint16_t n) noexcept override;
  uint16_t enqueue_forward_burst(const rte_event* ev, uint16_t n) noexcept override;
  uint16_t enqueue_burst(const rte_event* ev, uint16_t n) noexcept override;

  // ---- dequeue (builtin_port.cc) --------------------------------------------------------

  uint16_t dequeue_burst(rte_event* ev, uint16_t n) noexcept override;
  int arm_wakeup() noexcept override;
  void disarm_wakeup() noexcept override;
  void park() noexcept override;

  // ---- read by other threads (builtin_backend.cc) ---------------------------------------

  uint16_t load() const noexcept { return load_.figure(); }
  // Packets written to this worker's input rings and not yet dequeued (events still in other
  // ports' out-buffers are not counted). 0 when the scheduler has no backlog limit.
  inline int64_t backlog_packets() const noexcept;
  inline uint32_t backlog() const noexcept;

  // Payloads left anywhere in this port (destruction without draining).
  inline uint64_t free_leftovers() noexcept;

 private:
  // ---- placement (builtin_port.cc) ------------------------------------------------------

  inline void route_burst(const rte_event* ev, uint16_t n) noexcept;
  inline void route_chunk(const rte_event* ev, uint16_t n) noexcept;
  inline void write_ring(uint32_t dst, const rte_event* ev, uint16_t n) noexcept;
  // After a write to `to`'s rings: rings its doorbell if it sleeps (builtin_backend.h).
  static inline void wake(BuiltinPort& to) noexcept;
  inline uint16_t read_inputs(rte_event* ev, uint16_t n) noexcept;
  inline uint16_t admit(const rte_event* ev, uint16_t n, rte_event* compact) noexcept;
  inline void flush(uint32_t dst) noexcept;
  inline void flush_all() noexcept;
  // Producer-style call bracket: odd epoch while the call may hold owner-table reads.
  inline void enter() noexcept;
  inline void leave() noexcept;

  // ---- holds (this port as a migration target: builtin_holds.h; builtin_port.cc) --------

  inline void poll_ctl() noexcept;

  // ---- load and migration (this port as a source; builtin_port.cc) ----------------------

  inline void housekeeping() noexcept;
  inline void update_load(uint64_t now) noexcept;
  inline int32_t effective_load(const BuiltinPort& p) const noexcept;
  inline void consider_emigration(uint64_t now) noexcept;
  inline void advance_migration() noexcept;
  static inline void post(BuiltinPort& to, CtlMsg msg) noexcept;

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

}  // namespace vecflow::sched::builtin
