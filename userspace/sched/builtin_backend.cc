#include "sched/builtin_backend.h"

#include <linux/membarrier.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <utility>
#include <vector>

#include <rte_cycles.h>
#include <rte_event_ring.h>
#include <rte_malloc.h>
#include <rte_ring_elem.h>

#include "core/log.h"
#include "runtime/cycles.h"
#include "sched/builtin_port.h"

namespace vecflow::sched {

BuiltinTuning default_builtin_tuning() noexcept {
  return BuiltinTuning{kMigrationIntervalUs, kLoadIntervalUs, kMinSourceLoad,
                       kMaxTargetLoad,       kMinImbalance,   kMaxFlowsPerMigration};
}

namespace builtin {

// ---- a port's set-up and what other threads read of it (builtin_port.h) -----------------

inline Result<void> BuiltinPort::init(uint32_t ring_size, uint32_t buffer_events,
                                      uint32_t max_holds) {
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
  ctl_ = rte_ring_create_elem(name.c_str(), sizeof(CtlMsg), ctl_size, SOCKET_ID_ANY, RING_F_SC_DEQ);
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

BuiltinPort::~BuiltinPort() {
  rte_event_ring_free(in_);
  rte_ring_free(ctl_);
  if (doorbell_ >= 0) close(doorbell_);
}

inline void BuiltinPort::connect() {
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

inline int64_t BuiltinPort::backlog_packets() const noexcept {
  return s_.backlogs.counted() ? s_.backlogs.of(index()) : 0;
}

inline uint32_t BuiltinPort::backlog() const noexcept {
  if (!in_) return 0;
  uint32_t n = rte_event_ring_count(in_);
  for (const SpscEventRing* r : from_)
    n += r->count();
  return n;
}

inline uint64_t BuiltinPort::free_leftovers() noexcept {
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

}  // namespace builtin

namespace {

using builtin::BuiltinPort;
using builtin::RteArray;
using builtin::Shared;
using builtin::sys_membarrier;

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
