#include "pipeline_check.h"

#include <algorithm>
#include <memory>
#include <random>

#include <rte_cycles.h>
#include <rte_pause.h>

#include "runtime/cycles.h"

namespace vecflow::test {
namespace {

struct Checks {
  Checks(uint32_t flows, uint16_t queues)
      : flows(flows),
        owner(static_cast<size_t>(flows) * queues),
        stage_next(static_cast<size_t>(flows) * queues),
        egress_next(flows) {
    for (auto& o : owner)
      o.store(-1);
  }
  uint32_t flows;
  std::vector<std::atomic<int>> owner;
  std::vector<std::atomic<uint32_t>> stage_next;
  std::vector<std::atomic<uint32_t>> egress_next;
  std::atomic<uint64_t> violations{0};
  std::atomic<uint64_t> stage_order{0};
  std::atomic<uint64_t> egress_order{0};
  std::atomic<uint64_t> delivered{0};
  std::atomic<uint64_t> dropped{0};
};

inline uint32_t ev_flow(const rte_event& e) {
  return static_cast<uint32_t>(e.u64 >> 32);
}
inline uint32_t ev_seq(const rte_event& e) {
  return static_cast<uint32_t>(e.u64);
}

void spin_ns(uint64_t ns) {
  if (ns == 0) return;
  uint64_t end = rte_rdtsc() + tsc_hz() / 1'000'000'000.0 * static_cast<double>(ns);
  while (rte_rdtsc() < end)
    rte_pause();
}

class CheckHandler final : public sched::EventHandler {
 public:
  CheckHandler(Checks& c, const sched::Scheduler& s, int id, uint16_t stages, uint32_t cost_ns)
      : c_(c), types_(s.queue_types()), id_(id), stages_(stages), cost_ns_(cost_ns) {}

  void process(std::span<rte_event> events) noexcept override {
    for (rte_event& e : events) {
      const uint8_t q = e.queue_id;
      const size_t cell = static_cast<size_t>(q) * c_.flows + ev_flow(e);
      const bool atomic = types_[q] == SchedType::Atomic;
      if (atomic) {
        int expected = -1;
        if (!c_.owner[cell].compare_exchange_strong(expected, id_)) c_.violations.fetch_add(1);
        // Increasing, not consecutive: an overloaded producer leaves gaps.
        if (ev_seq(e) < c_.stage_next[cell].load(std::memory_order_relaxed))
          c_.stage_order.fetch_add(1);
        c_.stage_next[cell].store(ev_seq(e) + 1, std::memory_order_relaxed);
      }
      spin_ns(cost_ns_);
      if (atomic) c_.owner[cell].store(-1);
      if (q + 1 < stages_) sched::forward_to(e, static_cast<uint8_t>(q + 1));
    }
  }

 private:
  Checks& c_;
  const std::array<SchedType, sched::kMaxQueues>& types_;
  int id_;
  uint16_t stages_;
  uint32_t cost_ns_;
};

class CheckSink final : public sched::EgressSink {
 public:
  explicit CheckSink(Checks& c) : c_(c) {}
  void finish(std::span<rte_event> events) noexcept override {
    for (const rte_event& e : events) {
      auto& next = c_.egress_next[ev_flow(e)];
      if (ev_seq(e) < next.load(std::memory_order_relaxed)) c_.egress_order.fetch_add(1);
      next.store(ev_seq(e) + 1, std::memory_order_relaxed);
    }
    c_.delivered.fetch_add(events.size());
  }
  void drop(std::span<rte_event> events, DropReason) noexcept override {
    c_.dropped.fetch_add(events.size());
  }
  void flush() noexcept override {}

 private:
  Checks& c_;
};

class Producer final : public Service {
 public:
  // Producer `index` of s.producers: makes its share of s.events, on its share of the flows.
  Producer(sched::EventPort& port, const Scenario& s, SchedType first, uint16_t index)
      : Service("producer"),
        port_(port),
        s_(s),
        first_(first),
        index_(index),
        events_(s.events / s.producers + (index == 0 ? s.events % s.producers : 0)),
        seqs_(s.flows, 0),
        rng_(7 + index),
        interval_(s.rate ? tsc_hz() * s.producers / s.rate : 0) {}

  bool poll() noexcept override {
    if (made_ == events_ && nbuf_ == 0) {
      if (port_.needs_maintenance()) port_.maintain();
      return false;
    }
    uint64_t now = rte_rdtsc();
    if (interval_ && now < next_) {
      if (port_.needs_maintenance()) port_.maintain();
      return false;
    }
    uint16_t want =
        static_cast<uint16_t>(std::uniform_int_distribution<int>(s_.burst_min, s_.burst_max)(rng_));
    while (nbuf_ < want && made_ < events_) {
      rte_event& e = buf_[nbuf_++];
      const uint32_t own = std::max<uint32_t>(1, s_.flows / s_.producers);
      uint32_t flow = static_cast<uint32_t>(rng_() % own) * s_.producers + index_;
      e = rte_event{};
      e.op = RTE_EVENT_OP_NEW;
      e.queue_id = 0;
      e.sched_type = static_cast<uint8_t>(first_);
      e.event_type = RTE_EVENT_TYPE_CPU;
      e.flow_id = flow & sched::kFlowIdMask;
      e.u64 = (static_cast<uint64_t>(flow) << 32) | seqs_[flow]++;
      ++made_;
    }
    uint16_t ok = port_.enqueue_new_burst(buf_, nbuf_);
    if (ok < nbuf_) {
      if (s_.retry) {
        std::memmove(buf_, buf_ + ok, (nbuf_ - ok) * sizeof(rte_event));
        nbuf_ = static_cast<uint16_t>(nbuf_ - ok);
        if (port_.needs_maintenance()) port_.maintain();
        if (interval_) next_ = now + interval_ * ok;
        return ok > 0;
      }
      refused.fetch_add(nbuf_ - ok);
    }
    nbuf_ = 0;
    if (interval_) next_ = now + interval_ * ok;
    return true;
  }

  bool done() const noexcept { return done_.load(); }
  std::atomic<uint64_t> refused{0};
  std::atomic<bool> done_{false};

  // Marks completion once everything was handed over (called from the poll thread only).
  void note_done() noexcept {
    if (made_ == events_ && nbuf_ == 0) done_.store(true);
  }

 private:
  sched::EventPort& port_;
  const Scenario& s_;
  SchedType first_;
  uint16_t index_;
  uint64_t events_;
  std::vector<uint32_t> seqs_;
  std::mt19937_64 rng_;
  uint64_t interval_;
  uint64_t next_ = 0;
  uint64_t made_ = 0;
  rte_event buf_[sched::kMaxEventBurst];
  uint16_t nbuf_ = 0;
};

// Runs the producers in turn and reports completion after each poll.
class ProducerService final : public Service {
 public:
  explicit ProducerService(std::vector<std::unique_ptr<Producer>>& p)
      : Service("producer"), p_(p) {}
  bool poll() noexcept override {
    bool worked = false;
    for (auto& p : p_) {
      worked |= p->poll();
      p->note_done();
    }
    return worked;
  }
  bool done() const noexcept {
    return std::all_of(p_.begin(), p_.end(), [](const auto& p) { return p->done(); });
  }
  uint64_t refused() const noexcept {
    uint64_t n = 0;
    for (const auto& p : p_)
      n += p->refused.load();
    return n;
  }

 private:
  std::vector<std::unique_ptr<Producer>>& p_;
};

}  // namespace

Outcome run_scenario(BackendKind kind, const Scenario& s) {
  Outcome out;
  std::vector<sched::QueueConfig> queues;
  bool ordered = false;
  for (size_t i = 0; i < s.stages.size(); ++i) {
    queues.push_back({fmt::format("stage{}", i), s.stages[i]});
    ordered |= s.stages[i] == SchedType::Ordered;
  }
  std::optional<uint8_t> egress;
  if (ordered) {
    egress = static_cast<uint8_t>(queues.size());
    queues.push_back({"egress", SchedType::Atomic});
  }
  auto sched = make_scheduler(kind, queues, s.producers, s.workers, s.inflight, s.tuning);
  if (!sched) return out;

  Checks checks(s.flows, static_cast<uint16_t>(queues.size()));
  std::vector<std::unique_ptr<Producer>> producers;
  for (uint16_t i = 0; i < s.producers; ++i)
    producers.push_back(std::make_unique<Producer>(sched->producer(i), s, s.stages[0], i));
  ProducerService producer_service(producers);
  std::vector<std::unique_ptr<CheckHandler>> handlers;
  std::vector<std::unique_ptr<CheckSink>> sinks;
  std::vector<std::shared_ptr<sched::Worker>> workers;
  for (uint16_t w = 0; w < s.workers; ++w) {
    uint32_t cost = w < s.cost_ns.size() ? s.cost_ns[w] : 0;
    handlers.push_back(std::make_unique<CheckHandler>(
        checks, *sched, w, static_cast<uint16_t>(s.stages.size()), cost));
    sinks.push_back(std::make_unique<CheckSink>(checks));
    workers.push_back(std::make_shared<sched::Worker>(fmt::format("worker{}", w), *sched,
                                                      sched->worker(w), *handlers.back(),
                                                      *sinks.back(), egress));
  }
  {
    std::vector<std::shared_ptr<Service>> first{borrow(producer_service)};
    if (auto svc = sched->service()) first.push_back(svc);
    std::vector<std::unique_ptr<LcoreThread>> lcores;
    lcores.push_back(std::make_unique<LcoreThread>(first));
    for (auto& w : workers)
      lcores.push_back(std::make_unique<LcoreThread>(std::vector<std::shared_ptr<Service>>{w}));
    out.completed = wait_until([&] {
      return producer_service.done() &&
             checks.delivered.load() + checks.dropped.load() + producer_service.refused() ==
                 s.events;
    });
    for (auto& l : lcores)
      l->stop();
  }
  for (auto& w : workers)
    w->park();
  out.delivered = checks.delivered.load();
  out.refused_at_producer = producer_service.refused();
  out.dropped_at_workers = checks.dropped.load();
  out.atomic_violations = checks.violations.load();
  out.stage_order_errors = checks.stage_order.load();
  out.egress_order_errors = checks.egress_order.load();
  out.inflight_after = sched->inflight();
  for (auto& w : workers)
    out.per_worker_events.push_back(w->worker_stats().events.load());
  out.stats = sched->stats();
  return out;
}

}  // namespace vecflow::test
