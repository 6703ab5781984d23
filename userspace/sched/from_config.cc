#include "sched/from_config.h"

#include <algorithm>
#include <bit>

#include "sched/rx_adapter.h"

namespace vecflow::sched {
StageQueues stage_queues(std::span<const config::StageConfig> stages) {
  StageQueues q;
  bool ordered = false;
  for (const auto& s : stages) {
    if (!s.fuse || q.queues.empty()) {
      q.queues.push_back(QueueConfig{s.name, s.sched});
      ordered |= s.sched == SchedType::Ordered;
    }
    q.stage_queue.push_back(static_cast<uint8_t>(q.queues.size() - 1));
  }
  if (ordered) {
    q.egress = static_cast<uint8_t>(q.queues.size());
    q.queues.push_back(QueueConfig{"egress", SchedType::Atomic});
  }
  return q;
}

SchedulerConfig scheduler_config(const config::SchedulerSection& section, const StageQueues& q,
                                 uint16_t producers, uint16_t workers, uint32_t spare_mbufs) {
  SchedulerConfig c;
  c.backend = section.backend;
  c.device = section.device;
  c.devargs = section.devargs;
  c.queues = q.queues;
  c.producers = producers;
  c.workers = workers;
  c.inflight_limit = section.queue_depth;
  c.vector_events = section.vector_size > 1;
  // Half the spare buffers shared among the workers' backlogs leaves the other half for the
  // rx rings' refills, the open vectors and the packets being processed and sent.
  c.worker_backlog_packets = section.worker_backlog
                                 ? section.worker_backlog
                                 : std::max<uint32_t>(spare_mbufs / (2 * workers), 64);
  return c;
}

uint16_t flow_buckets(const config::SchedulerSection& section, uint16_t workers) {
  if (section.vector_buckets != 0) return section.vector_buckets;
  constexpr uint32_t kPerWorker = 8;
  const uint32_t want = std::max<uint32_t>(kPerWorker, kPerWorker * workers);
  return static_cast<uint16_t>(std::min<uint32_t>(std::bit_ceil(want), kMaxFlowBuckets));
}

}  // namespace vecflow::sched
