#include "sched/scheduler.h"

#include "sched/builtin_backend.h"
#include "sched/eventdev.h"

namespace vecflow::sched {

void free_payload(rte_event& ev) noexcept {
  if (is_vector(ev)) {
    rte_event_vector* v = ev.vec;
    rte_pktmbuf_free_bulk(vector_mbufs(v) + v->elem_offset, v->nb_elem);
    free_vector(v);
  } else if (is_packet(ev)) {
    rte_pktmbuf_free(ev.mbuf);
  }
}

Scheduler::Scheduler(std::vector<QueueConfig> queues) : queues_(std::move(queues)) {
  for (size_t q = 0; q < queues_.size() && q < kMaxQueues; ++q)
    types_[q] = queues_[q].type;
}

uint64_t Scheduler::inflight() const noexcept {
  auto* self = const_cast<Scheduler*>(this);  // port accessors are non-const for the data path
  int64_t n = 0;
  auto add = [&](const EventPort& p) {
    n += static_cast<int64_t>(p.counters().enq_new.load());
    n -= static_cast<int64_t>(p.counters().enq_release.load());
  };
  for (uint16_t i = 0; i < producer_count(); ++i)
    add(self->producer(i));
  for (uint16_t i = 0; i < worker_count(); ++i)
    add(self->worker(i));
  return n > 0 ? static_cast<uint64_t>(n) : 0;
}

void Scheduler::fill_common_stats(SchedulerStats& s) const {
  auto* self = const_cast<Scheduler*>(this);  // port accessors are non-const for the data path
  s.queues.resize(queue_count());
  for (uint16_t q = 0; q < queue_count(); ++q) {
    s.queues[q].name = queues_[q].name;
    s.queues[q].type = types_[q];
  }
  auto add_port = [&](const EventPort& p) {
    const PortCounters& c = p.counters();
    PortStats ps;
    ps.role = p.role();
    ps.index = p.index();
    ps.enq_new = c.enq_new.load();
    ps.enq_forward = c.enq_forward.load();
    ps.enq_release = c.enq_release.load();
    ps.refused = c.refused.load();
    ps.dequeued = c.dequeued.load();
    ps.dequeue_calls = c.dequeue_calls.load();
    ps.empty_dequeues = c.empty_dequeues.load();
    ps.emigrations = c.emigrations.load();
    ps.immigrations = c.immigrations.load();
    s.ports.push_back(ps);
    for (uint16_t q = 0; q < queue_count(); ++q) {
      s.queues[q].enqueued += c.queue_in[q].load();
      s.queues[q].dequeued += c.queue_out[q].load();
    }
  };
  for (uint16_t i = 0; i < producer_count(); ++i)
    add_port(self->producer(i));
  for (uint16_t i = 0; i < worker_count(); ++i)
    add_port(self->worker(i));
}

Result<std::unique_ptr<Scheduler>> create_scheduler(const SchedulerConfig& config) {
  if (config.queues.empty()) return fail("scheduler: no queues (the pipeline has no stage)");
  if (config.queues.size() > kMaxQueues)
    return fail("scheduler: {} queues; at most {} pipeline stages are supported",
                config.queues.size(), kMaxQueues - 1);
  if (config.workers == 0) return fail("scheduler: no worker ports");
  if (config.backend == SchedBackend::Builtin) return create_builtin_scheduler(config);
  return create_eventdev_scheduler(config);
}

}  // namespace vecflow::sched
